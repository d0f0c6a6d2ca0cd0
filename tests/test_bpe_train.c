/* test_bpe_train.c — BPE training.
 *
 * Oracles (exact):
 *   - a corpus whose merges are derived by hand ("aaabdaaabac", see the comment in main);
 *   - the first 400 merges on Tiny Shakespeare equal those of a naive Python trainer that recounts
 *     every pair each step (tests/fixtures/naive_bpe.py -> bpe_train_shakespeare_naive400.txt);
 *   - training twice gives byte-identical files; the result loads through tokenizer_load and
 *     round-trips text and random bytes; training 4096 on 1 MB takes a few seconds at most;
 *   - --pattern cl100k / o200k: on a digit-heavy corpus no learned token holds a digit together with
 *     anything but at most 2 other digits (digit runs are pre-tokenized by 3); negative control: gpt2's
 *     pattern on the same corpus learns longer digit tokens; the pattern is recorded in DIR/pattern,
 *     loaded back, and the tokenizer round-trips; gpt2 writes no pattern file (removes a stale one). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fileio.h"
#include "data/bpe.h"
#include "testutil.h"

/* The whole file (NUL-terminated) through core/fileio, or NULL. */
static char *read_all(const char *path, size_t *n) {
    char *b;
    Err e;
    return file_read_all(path, &b, n, &e) == ST_OK ? b : NULL;
}

static int same_file(const char *a, const char *b) {
    size_t na, nb;
    char *x = read_all(a, &na), *y = read_all(b, &nb);
    int ok = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return ok;
}

static int round_trip(const Tokenizer *t, const uint8_t *s, size_t n, size_t *ntok) {
    uint32_t *ids = NULL;
    uint8_t *back = NULL;
    size_t nids = 0, cap = 0, len = 0, bcap = 0;
    Err err;
    int ok = !tokenizer_encode(t, s, n, &ids, &nids, &cap, &err) && !tokenizer_decode(t, ids, nids, &back, &len, &bcap, &err) &&
             len == n && (n == 0 || memcmp(back, s, n) == 0);
    if (ntok) *ntok = nids;
    free(ids);
    free(back);
    return ok;
}

/* Learned tokens (ids 256 .. EOT-1) that break cl100k's digit rule: a token with a digit must be 1..3
 * digits and nothing else. */
static int digit_violations(const Tokenizer *t, size_t *longest) {
    int bad = 0;
    *longest = 0;
    for (uint32_t id = 256; id < tokenizer_eot(t); id++) {
        size_t n, run = 0;
        const uint8_t *b = tokenizer_token_bytes(t, id, &n);
        int digits = 0;
        for (size_t i = 0; b && i < n; i++) {
            int d = b[i] >= '0' && b[i] <= '9';
            digits += d;
            run = d ? run + 1 : 0;
            if (run > *longest) *longest = run;
        }
        bad += digits && (digits != (int)n || n > 3);
    }
    return bad;
}

/* --pattern: trains on Tiny Shakespeare + repeated long numbers with each pattern into dir/pat_NAME. */
static void check_patterns(const char *dir, const uint8_t *shakes, size_t nshakes) {
    size_t cap = 400000, n = 0;
    uint8_t *c = malloc(cap);
    if (!c) return;
    size_t take = nshakes < 200000 ? nshakes : 200000;
    memcpy(c, shakes, take);
    n = take;
    static const char *nums[] = {"1234567", "31415926", "2024", "9876543210", "55555", "120000"};
    for (int k = 0; n + 64 < cap; k++) n += (size_t)snprintf((char *)c + n, 64, "item %s costs %s.\n", nums[k % 6], nums[(k / 6) % 6]);
    const uint8_t *texts[1] = {c};
    size_t lens[1] = {n};
    const char *names[] = {"gpt2", "cl100k", "o200k"};
    for (int k = 0; k < 3; k++) {
        BpeTrainOptions o = bpe_train_default_options();
        o.vocab_size = 700;
        bpe_pattern_parse(names[k], &o.pattern);
        char d[600], pf[700];
        snprintf(d, sizeof d, "%s/pat_%s", dir, names[k]);
        snprintf(pf, sizeof pf, "%s/pattern", d);
        if (k == 0) { /* a stale pattern file from an earlier training must not survive a gpt2 training */
            Err e2;
            size_t pl = 7;
            const void *pb[1] = {"cl100k\n"};
            file_mkdirs(d, &e2);
            file_write_atomic(pf, pb, &pl, 1, &e2);
        }
        BpeTrainStats s;
        Err err;
        Status st = bpe_train(texts, lens, 1, &o, d, &s, &err);
        Tokenizer *t = NULL;
        if (!st) st = tokenizer_load(&t, d, NULL, &err);
        size_t longest = 0, nt = 0;
        int viol = st ? -1 : digit_violations(t, &longest);
        char *rec = read_all(pf, &nt);
        int rec_ok = k == 0 ? rec == NULL : rec && !strcmp(rec, k == 1 ? "cl100k\n" : "o200k\n");
        int rt = !st && round_trip(t, c, n, &nt);
        if (k == 0)
            tu_check(!st && viol > 0 && longest >= 4 && rec_ok && rt && tokenizer_pattern(t) == BPE_PATTERN_GPT2,
                     "train_pattern_gpt2_negative_control",
                     "gpt2 pattern learns %d tokens mixing digits or longer than 3 (longest digit run %zu; must be > 0), "
                     "no pattern file: %s, round trip %s", viol, longest, rec_ok ? "yes" : "NO", rt ? "ok" : "FAILED");
        else
            tu_check(!st && viol == 0 && longest == 3 && rec_ok && rt && tokenizer_pattern(t) == o.pattern,
                     "train_pattern", "%s: %d tokens break the 3-digit rule (longest digit run %zu), pattern file %s, "
                     "loaded pattern %s, round trip %s%s%s", names[k], viol, longest, rec_ok ? "ok" : "WRONG",
                     t ? bpe_pattern_name(tokenizer_pattern(t)) : "-", rt ? "ok" : "FAILED", st ? ": " : "", st ? err.msg : "");
        free(rec);
        tokenizer_free(t);
    }
    free(c);
}

int main(void) {
    char dir[] = "/tmp/test_bpe_train_XXXXXX";
    if (!mkdtemp(dir)) return 1;
    char d1[256], d2[256], d3[256], p1[300], p2[300];
    snprintf(d1, sizeof d1, "%s/a", dir);
    snprintf(d2, sizeof d2, "%s/b", dir);
    snprintf(d3, sizeof d3, "%s/hand", dir);
    Err err;
    BpeTrainOptions o = bpe_train_default_options();
    BpeTrainStats s;

    /* Hand-derived: one pre-token "aaabdaaabac" (count 1). Pair counts aa=4 ab=2 others 1.
     *  1 (a,a)  -> X a b d X a b a c ; Xa=2 ab=2: tie, left "a" < "aa" -> 2 (a,b)
     *  -> X Y d X Y a c ; XY=2 -> 3 (aa,ab) = Z -> Z d Z a c ; all 1, smallest left "a" -> 4 (a,c) = W
     *  -> Z d Z W ; (Z,d) vs (Z,W): right "ac" < "d" -> 5 (aaab,ac) -> Z d V -> 6 (aaab,d) -> 7 (aaabd,aaabac)
     * then no pairs remain: vocab = 256 + 7 + EOT = 264 even though 300 was asked. */
    const char *hand = "aaabdaaabac";
    const uint8_t *texts[1] = {(const uint8_t *)hand};
    size_t lens[1] = {strlen(hand)};
    o.vocab_size = 300;
    Status st = bpe_train(texts, lens, 1, &o, d3, &s, &err);
    snprintf(p1, sizeof p1, "%s/vocab.bpe", d3);
    size_t n;
    char *v = read_all(p1, &n);
    const char *want = "#version: 0.2\na a\na b\naa ab\na c\naaab ac\naaab d\naaabd aaabac\n";
    tu_check(st == ST_OK && v && strcmp(v, want) == 0 && s.vocab_size == 264 && s.merges == 7, "train_hand_merges",
             "vocab=%u merges=%zu", s.vocab_size, s.merges);
    free(v);
    Tokenizer *t = NULL;
    st = tokenizer_load(&t, d3, NULL, &err);
    uint32_t *ids = NULL;
    size_t nids = 0, cap = 0;
    if (!st) tokenizer_encode(t, (const uint8_t *)hand, lens[0], &ids, &nids, &cap, &err);
    tu_check(!st && tokenizer_vocab_size(t) == 264 && tokenizer_eot(t) == 263 && nids == 1 && ids[0] == 262,
             "train_hand_load_encode", "%s ntok=%zu id=%u", st ? err.msg : "", nids, nids ? ids[0] : 0);
    free(ids);
    tokenizer_free(t);

    /* Tiny Shakespeare, 4096: speed, determinism, naive oracle, round trip */
    size_t tn;
    char *ts = read_all(ST_SOURCE_DIR "/data/tinyshakespeare/input.txt", &tn);
    if (!ts) {
        tu_check(0, "read_shakespeare", "cannot read %s", "input.txt");
        return tu_exit();
    }
    texts[0] = (const uint8_t *)ts;
    lens[0] = tn;
    o.vocab_size = 4096;
    double t0 = omp_get_wtime();
    st = bpe_train(texts, lens, 1, &o, d1, &s, &err);
    double dt = omp_get_wtime() - t0;
    tu_check(st == ST_OK && s.vocab_size == 4096 && s.merges == 3839 && dt < 10, "train_shakespeare_4096",
             "%.2f s, %zu pre-tokens, %s", dt, s.unique_pretokens, st ? err.msg : "");
    o.threads = 1;
    st = bpe_train(texts, lens, 1, &o, d2, &s, &err);
    snprintf(p1, sizeof p1, "%s/vocab.bpe", d1);
    snprintf(p2, sizeof p2, "%s/vocab.bpe", d2);
    int same = same_file(p1, p2);
    snprintf(p1, sizeof p1, "%s/encoder.json", d1);
    snprintf(p2, sizeof p2, "%s/encoder.json", d2);
    same &= same_file(p1, p2);
    tu_check(st == ST_OK && same, "train_deterministic", "two runs byte-identical=%d", same);

    /* Threaded counting: Tiny Shakespeare three times over (3.3 MB, so the text is cut into ~1 MiB
     * chunks at pre-token boundaries) on 3 threads must count exactly 3x each pre-token of one copy
     * (the junction "\n" + "First" makes the same pre-tokens), hence the same distinct pre-tokens
     * and, every count scaled by 3, the same merges as one copy on 1 thread. */
    {
        size_t n3 = 3 * tn;
        char *ts3 = malloc(n3);
        for (int r = 0; r < 3; r++) memcpy(ts3 + (size_t)r * tn, ts, tn);
        const uint8_t *t3[1] = {(const uint8_t *)ts3};
        size_t l3[1] = {n3};
        size_t pre1 = s.unique_pretokens;
        BpeTrainOptions o3 = o;
        o3.threads = 3;
        char d3b[256];
        snprintf(d3b, sizeof d3b, "%s/threads3", dir);
        st = bpe_train(t3, l3, 1, &o3, d3b, &s, &err);
        snprintf(p1, sizeof p1, "%s/vocab.bpe", d2);
        snprintf(p2, sizeof p2, "%s/vocab.bpe", d3b);
        int same3 = same_file(p1, p2);
        tu_check(st == ST_OK && same3 && s.unique_pretokens == pre1 && s.corpus_bytes == n3, "train_threads_chunked",
                 "3 threads on 3 copies: merges identical to 1 thread on 1 copy=%d, pre-tokens %zu vs %zu", same3,
                 s.unique_pretokens, pre1);
        free(ts3);
    }

    snprintf(p1, sizeof p1, "%s/vocab.bpe", d1);
    v = read_all(p1, &n);
    size_t rn;
    char *ref = read_all(ST_SOURCE_DIR "/tests/fixtures/bpe_train_shakespeare_naive400.txt", &rn);
    const char *body = v ? strchr(v, '\n') + 1 : NULL;
    tu_check(v && ref && strncmp(body, ref, rn) == 0, "train_vs_naive_reference", "first 400 merges, %zu bytes", rn);
    free(v);
    free(ref);

    st = tokenizer_load(&t, d1, NULL, &err);
    size_t ntok = 0;
    int ok = !st && round_trip(t, (const uint8_t *)ts, tn, &ntok);
    tu_check(ok && tokenizer_vocab_size(t) == 4096 && tokenizer_eot(t) == 4095 && strcmp(tokenizer_kind(t), "bpe") == 0,
             "trained_load_roundtrip", "%zu tokens, %.3f bytes/token (train set)", ntok, (double)tn / (double)ntok);
    uint64_t seed = 12345;
    int bad = 0;
    uint8_t buf[400];
    for (int i = 0; i < 500 && !st; i++) {
        size_t m = (size_t)(i % 400);
        for (size_t k = 0; k < m; k++) {
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            buf[k] = (uint8_t)(seed >> 56);
        }
        bad += !round_trip(t, buf, m, NULL);
    }
    tu_check(!st && bad == 0, "trained_roundtrip_random", "strings=500 failures=%d", bad);
    tokenizer_free(t);

    /* bad input */
    o.vocab_size = 256;
    st = bpe_train(texts, lens, 1, &o, d1, &s, &err);
    tu_check(st == ST_ERR_INPUT && strstr(err.msg, "257") && strstr(err.msg, "256"), "train_vocab_too_small", "%s",
             err.msg);
    o.vocab_size = 300;
    /* a directory below a regular file cannot be created, even by root */
    char under_file[400];
    snprintf(under_file, sizeof under_file, "%s/vocab.bpe/x", d1);
    st = bpe_train(texts, lens, 1, &o, under_file, &s, &err);
    tu_check(st == ST_ERR_INPUT && strstr(err.msg, "vocab.bpe/x"), "train_bad_out_dir", "%s", err.msg);
    /* missing parents are created (mkdir -p) */
    char nested[400];
    snprintf(nested, sizeof nested, "%s/new/parent/tok", dir);
    st = bpe_train(texts, lens, 1, &o, nested, &s, &err);
    tu_check(st == ST_OK, "train_out_dir_parents", "%s", st ? err.msg : nested);
    /* A retraining killed between its renames: the 300-id training's stamp and vocab.bpe over the
     * 4096-id one's encoder.json (the same text, so the 43 merges name tokens that encoder.json has:
     * without the stamp this loaded as one tokenizer). Refused naming encoder.json; controls: both
     * trainings load as they are, and the mixed folder without its stamp loads (what the stamp
     * catches). */
    char mix[400], mcmd[2400];
    snprintf(mix, sizeof mix, "%s/mixed", dir);
    snprintf(mcmd, sizeof mcmd, "mkdir -p %s && cp %s/encoder.json %s/ && cp %s/vocab.bpe %s/files.xxh3 %s/", mix, d1, mix,
             nested, nested, mix);
    tu_shell(mcmd);
    Tokenizer *tm = NULL, *ta = NULL, *tb = NULL;
    Status sm = tokenizer_load(&tm, mix, NULL, &err);
    char merr[1100];
    snprintf(merr, sizeof merr, "%s", sm ? err.msg : "(loaded)");
    Status sa = tokenizer_load(&ta, d1, NULL, &err), sb = tokenizer_load(&tb, nested, NULL, &err);
    tu_check(sm == ST_ERR_INPUT && strstr(merr, "its encoder.json is not the one `tokenizer train` wrote") && sa == ST_OK &&
                 sb == ST_OK, "train_interrupted_files_refused", "%s", merr);
    tokenizer_free(tm), tokenizer_free(ta), tokenizer_free(tb);
    snprintf(mcmd, sizeof mcmd, "rm %s/files.xxh3", mix);
    tu_shell(mcmd);
    tm = NULL;
    sm = tokenizer_load(&tm, mix, NULL, &err);
    tu_check(sm == ST_OK, "negative control: the mixed files without the stamp load as one tokenizer", "%s",
             sm ? err.msg : "loaded");
    tokenizer_free(tm);
    check_patterns(dir, (const uint8_t *)ts, tn);
    free(ts);

    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) printf("note: could not remove %s\n", dir);
    return tu_exit();
}
