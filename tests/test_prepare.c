/* test_prepare.c — corpus -> shards, and the shard format.
 *
 * Oracle: a small corpus built here whose documents, duplicates and byte counts are known exactly;
 * with the byte tokenizer every document's ids are its bytes, so the shards can be checked token
 * by token: counts, EOT positions, header words (magic, version, count, tokenizer hash, source
 * bytes, vocab), uint16 vs uint32, thread-count independence, crash-safe replacement, bad input. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "data/bpe.h"
#include "data/prepare.h"
#include "data/shard.h"
#include "testutil.h"

#include <xxhash.h>

static char tmpdir[] = "/tmp/test_prepare_XXXXXX";

static void write_file(const char *name, const char *content) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", tmpdir, name);
    FILE *f = fopen(p, "wb");
    fputs(content, f);
    fclose(f);
}

/* A copy that outlives path()'s four rotating buffers (an output directory kept in options). */
static const char *keep(const char *p) {
    static char k[16][512];
    static int n;
    n = (n + 1) % 16;
    snprintf(k[n], sizeof k[n], "%s", p);
    return k[n];
}

static char *path(const char *name) {
    static char p[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", tmpdir, name);
    return p[k];
}

/* Reads all shards <prefix>_NNNNNN.bin of dir: concatenated tokens, shard count, summed source bytes. */
static uint32_t *read_split(const char *dir, const char *prefix, size_t *ntok, size_t *nshards, uint64_t *src,
                            uint64_t hash, int *hdr_ok, int *elem) {
    uint32_t *all = NULL;
    *ntok = *nshards = 0;
    *src = 0;
    for (size_t i = 0;; i++) {
        char p[600];
        snprintf(p, sizeof p, "%s/%s_%06zu.bin", dir, prefix, i);
        if (access(p, F_OK)) break;
        Shard s;
        Err err;
        if (shard_open(&s, p, &err)) {
            *hdr_ok = 0;
            break;
        }
        *hdr_ok &= s.meta.tokenizer_hash == hash && s.meta.vocab_size == 257;
        *elem = s.elem_bytes;
        all = realloc(all, (*ntok + s.ntok) * sizeof *all);
        for (size_t k = 0; k < s.ntok; k++) all[*ntok + k] = shard_token(&s, k);
        *ntok += s.ntok;
        *src += s.meta.source_bytes;
        (*nshards)++;
        shard_close(&s);
    }
    return all;
}

/* Splits tokens at EOT (256) into documents; returns 1 if each is one of want[] (as bytes), and
 * counts them. */
static int docs_match(const uint32_t *t, size_t n, const char *const *want, int nwant, int *ndocs) {
    *ndocs = 0;
    size_t start = 0;
    for (size_t i = 0; i < n; i++) {
        if (t[i] != 256) continue;
        int found = 0;
        for (int w = 0; w < nwant && !found; w++) {
            size_t l = strlen(want[w]);
            if (l != i - start) continue;
            found = 1;
            for (size_t k = 0; k < l && found; k++) found = t[start + k] == (uint8_t)want[w][k];
        }
        if (!found) return 0;
        (*ndocs)++;
        start = i + 1;
    }
    return start == n; /* the stream ends with EOT */
}

/* Runs `scaletrain ARGS`; returns 1 when it exits 2 with exactly one stderr line containing want. */
static int cli_fails(const char *name, const char *args, const char *want) {
    char cmd[4096], errp[600];
    snprintf(errp, sizeof errp, "%s/stderr.txt", tmpdir);
    snprintf(cmd, sizeof cmd, "%s/scaletrain %s >/dev/null 2>%s", ST_BINARY_DIR, args, errp);
    int rc = system(cmd);
    int code = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    char text[2048] = "";
    FILE *f = fopen(errp, "rb");
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    text[n] = 0;
    int lines = 0;
    for (size_t i = 0; i < n; i++) lines += text[i] == '\n';
    int ok = code == 2 && lines == 1 && strstr(text, want) != NULL;
    if (n && text[n - 1] == '\n') text[n - 1] = 0;
    tu_check(ok, name, "exit=%d lines=%d stderr=\"%s\"", code, lines, text);
    return ok;
}

/* A tokenizer directory with 256 byte tokens + 65280 two-byte tokens + EOT = 65537 ids (ids up to
 * 65536 do not fit uint16) and no merges: tokenizer_load accepts it. */
static void write_big_vocab(const char *dir) {
    char p[3100];
    snprintf(p, sizeof p, "%s/encoder.json", dir);
    FILE *f = fopen(p, "wb");
    fputc('{', f);
    int id = 0;
    for (int b = 0; b < 256; b++) fprintf(f, "%s\"\\u%04x\": %d", id ? ", " : "", bpe_byte_to_unicode((uint8_t)b), id), id++;
    for (int a = 0; a < 256 && id < 65536; a++)
        for (int b = 0; b < 256 && id < 65536; b++)
            fprintf(f, ", \"\\u%04x\\u%04x\": %d", bpe_byte_to_unicode((uint8_t)a), bpe_byte_to_unicode((uint8_t)b), id++);
    fprintf(f, ", \"<|endoftext|>\": %d}", id);
    fclose(f);
    snprintf(p, sizeof p, "%s/vocab.bpe", dir);
    f = fopen(p, "wb");
    fputs("#version: 0.2\n", f);
    fclose(f);
}

int main(void) {
    if (!mkdtemp(tmpdir)) return 1;
    Err err;
    Tokenizer *bt = NULL;
    tokenizer_load(&bt, "bytes", NULL, &err);

    /* Corpus: a.txt has 4 documents (one a duplicate), b.jsonl 3 (one duplicates a.txt's), in dir/. */
    char sub[600];
    snprintf(sub, sizeof sub, "%s/in", tmpdir);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", sub);
    if (system(cmd) != 0) return 1;
    write_file("in/a.txt", "Hello world\n<|endoftext|>\nSecond doc\nline two\n<|endoftext|>\nHello world\n"
                           "<|endoftext|>\nThird \xff\xfe invalid\n");
    write_file("in/b.jsonl", "{\"text\": \"json one\", \"id\": 1}\n\n{\"text\": \"Second doc\\nline two\"}\n"
                             "{\"text\": \"caf\\u00e9\"}\n");
    const char *want[] = {"Hello world", "Second doc\nline two", "Third \xff\xfe invalid\n", "json one", "caf\xc3\xa9"};
    uint64_t want_bytes = 11 + 19 + 17 + 8 + 5;

    const char *inputs[1] = {sub};
    PrepareOptions o = prepare_default_options();
    o.inputs = inputs;
    o.ninputs = 1;
    o.out_dir = keep(path("out1"));
    o.tok = bt;
    o.val_docs = 1;
    o.seed = 7;
    o.allow_invalid_utf8 = 1; /* a.txt's third document has invalid bytes: kept as bytes (test below: refused by default) */
    o.shard_tokens = 16;
    o.threads = 2;
    PrepareStats s;
    Status st = prepare_run(&o, &s, &err);
    tu_check(st == ST_OK && s.files == 2 && s.docs == 7 && s.duplicates == 2 && s.train_docs == 4 && s.val_docs == 1 &&
                 s.bytes == want_bytes && s.train_tokens + s.val_tokens == want_bytes + 5,
             "prepare_counts", "%s files=%zu docs=%zu dup=%zu train=%zu val=%zu bytes=%llu tokens=%llu", st ? err.msg : "",
             s.files, s.docs, s.duplicates, s.train_docs, s.val_docs, (unsigned long long)s.bytes,
             (unsigned long long)(s.train_tokens + s.val_tokens));
    size_t ntr, nva, shtr, shva;
    uint64_t srctr, srcva;
    int hdr_ok = 1, elem = 0, ndtr = 0, ndva = 0;
    uint32_t *tr = read_split(o.out_dir, "train", &ntr, &shtr, &srctr, tokenizer_hash(bt), &hdr_ok, &elem);
    uint32_t *va = read_split(o.out_dir, "val", &nva, &shva, &srcva, tokenizer_hash(bt), &hdr_ok, &elem);
    int ok_tr = docs_match(tr, ntr, want, 5, &ndtr), ok_va = docs_match(va, nva, want, 5, &ndva);
    tu_check(ok_tr && ok_va && ndtr == 4 && ndva == 1 && ntr == s.train_tokens && nva == s.val_tokens,
             "prepare_eot_positions", "train docs=%d tokens=%zu, val docs=%d tokens=%zu", ndtr, ntr, ndva, nva);
    tu_check(hdr_ok && elem == 2 && srctr + srcva == want_bytes && shtr == (ntr + 15) / 16 && shtr == s.train_shards &&
                 shva == (nva + 15) / 16 && shva == s.val_shards,
             "prepare_header_words", "hash+vocab ok=%d elem=%d source bytes=%llu shards=%zu+%zu", hdr_ok, elem,
             (unsigned long long)(srctr + srcva), shtr, shva);

    /* the same with 1 thread: identical shards; and no temporary file left behind */
    o.out_dir = keep(path("out2"));
    o.threads = 1;
    st = prepare_run(&o, &s, &err);
    size_t n2, sh2;
    uint64_t src2;
    uint32_t *tr2 = read_split(o.out_dir, "train", &n2, &sh2, &src2, tokenizer_hash(bt), &hdr_ok, &elem);
    tu_check(!st && n2 == ntr && memcmp(tr, tr2, ntr * sizeof *tr) == 0, "prepare_thread_independent", "tokens=%zu", n2);
    int tmp_left = 0;
    DIR *d = opendir(o.out_dir);
    for (struct dirent *e; d && (e = readdir(d));) tmp_left += strstr(e->d_name, ".tmp") != NULL;
    if (d) closedir(d);
    tu_check(tmp_left == 0, "prepare_no_temp_files", "left=%d", tmp_left);
    free(tr);
    free(va);
    free(tr2);

    /* fraction split: a document is validation when the high 64 bits of XXH3-128(bytes, seed) are
     * below fraction * 2^64 (docs/data.md §6); oracle: the rule computed here on the 5 unique docs */
    o.out_dir = keep(path("out3"));
    o.val_docs = -1;
    o.val_fraction = 0.5;
    o.shard_tokens = 1000;
    st = prepare_run(&o, &s, &err);
    size_t want_val = 0;
    for (int w = 0; w < 5; w++) want_val += XXH3_128bits_withSeed(want[w], strlen(want[w]), 7).high64 < (1ULL << 63);
    if (want_val == 0) want_val = 1; /* a fraction > 0 gives validation at least the smallest key */
    tu_check(!st && s.val_docs == want_val && s.train_docs == 5 - want_val && s.val_shards == 1,
             "prepare_val_fraction", "val=%zu (rule: %zu) train=%zu", s.val_docs, want_val, s.train_docs);

    /* WikiText: split at top-level headings only */
    write_file("w.tokens", " \n = Alpha = \n\n text one \n\n = = Sub = = \n\n more \n = Beta = \n\n b text \n");
    const char *win[1] = {path("w.tokens")};
    o.inputs = win;
    o.out_dir = keep(path("out4"));
    o.val_fraction = 0;
    st = prepare_run(&o, &s, &err);
    tu_check(!st && s.docs == 2 && s.train_tokens == strlen(" \n = Alpha = \n\n text one \n\n = = Sub = = \n\n more \n") +
                                                    strlen(" = Beta = \n\n b text \n") + 2,
             "prepare_wikitext_articles", "docs=%zu tokens=%llu", s.docs, (unsigned long long)s.train_tokens);

    /* bad inputs: missing file, bad JSON line (file:line), non-string text */
    const char *miss[1] = {path("nope.txt")};
    o.inputs = miss;
    st = prepare_run(&o, &s, &err);
    tu_check(st == ST_ERR_INPUT && strstr(err.msg, "nope.txt"), "prepare_missing_file", "%s", err.msg);
    write_file("bad.jsonl", "{\"text\": \"fine\"}\n{\"text\": \"broken\n{\"text\": 3}\n");
    const char *bad[1] = {path("bad.jsonl")};
    o.inputs = bad;
    st = prepare_run(&o, &s, &err);
    tu_check(st == ST_ERR_INPUT && strstr(err.msg, "bad.jsonl:2:"), "prepare_bad_jsonl_line", "%s", err.msg);
    write_file("bad2.jsonl", "{\"text\": \"fine\"}\n{\"text\": 3}\n");
    bad[0] = path("bad2.jsonl");
    st = prepare_run(&o, &s, &err);
    tu_check(st == ST_ERR_INPUT && strstr(err.msg, "bad2.jsonl:2:") && strstr(err.msg, "non-string"),
             "prepare_jsonl_text_not_string", "%s", err.msg);

    /* shard format: uint16 vs uint32 choice */
    uint32_t toks[4] = {1, 65535, 7, 256};
    ShardMeta m = {0x1122334455667788ULL, 123456789012ULL, 50257};
    Shard sh;
    st = shard_write(path("u16.bin"), toks, 4, &m, &err);
    st = st ? st : shard_open(&sh, path("u16.bin"), &err);
    tu_check(!st && sh.elem_bytes == 2 && sh.ntok == 4 && shard_token(&sh, 1) == 65535 &&
                 sh.meta.tokenizer_hash == m.tokenizer_hash && sh.meta.source_bytes == m.source_bytes &&
                 sh.meta.vocab_size == 50257 && sh.map_bytes == 1024 + 8,
             "shard_u16", "elem=%d bytes=%zu", sh.elem_bytes, sh.map_bytes);
    m.vocab_size = 100277;
    uint32_t big[2] = {100276, 3};
    st = shard_write(path("u32.bin"), big, 2, &m, &err);
    Shard s32;
    st = st ? st : shard_open(&s32, path("u32.bin"), &err);
    const uint32_t *hw = s32.map;
    tu_check(!st && s32.elem_bytes == 4 && hw[0] == SHARD_MAGIC_U32 && hw[1] == SHARD_VERSION_U32 && hw[2] == 2 &&
                 shard_token(&s32, 0) == 100276 && shard_find_token_at_least(&s32, 100000) == 0,
             "shard_u32", "magic=%u version=%u", hw[0], hw[1]);
    shard_close(&s32);

    /* crash-safe replacement: the old mapping keeps the old contents (rename, not truncate) */
    uint32_t other[3] = {9, 9, 9};
    m.vocab_size = 257;
    st = shard_write(path("u16.bin"), other, 3, &m, &err);
    Shard fresh;
    Status st2 = shard_open(&fresh, path("u16.bin"), &err);
    tu_check(!st && !st2 && sh.ntok == 4 && shard_token(&sh, 1) == 65535 && fresh.ntok == 3 &&
                 shard_token(&fresh, 0) == 9,
             "shard_atomic_replace", "old ntok=%zu new ntok=%zu", sh.ntok, fresh.ntok);
    shard_close(&sh);
    shard_close(&fresh);
    st = shard_write(path("no/such/dir/x.bin"), other, 3, &m, &err);
    tu_check(st != ST_OK && strstr(err.msg, "no/such/dir"), "shard_write_bad_dir", "%s", err.msg);

    /* shard_open refusals: truncated file, bad magic, missing */
    FILE *f = fopen(path("trunc.bin"), "wb");
    int32_t hdr[256] = {SHARD_MAGIC_U16, SHARD_VERSION_U16, 10};
    fwrite(hdr, 4, 256, f);
    fwrite(toks, 2, 3, f);
    fclose(f);
    st = shard_open(&sh, path("trunc.bin"), &err);
    tu_check(st == ST_ERR_INPUT && strstr(err.msg, "trunc.bin") && strstr(err.msg, "10 tokens"), "shard_open_truncated",
             "%s", err.msg);
    shard_close(&sh);
    hdr[0] = 12345;
    f = fopen(path("magic.bin"), "wb");
    fwrite(hdr, 4, 256, f);
    fclose(f);
    st = shard_open(&sh, path("magic.bin"), &err);
    tu_check(st == ST_ERR_INPUT && strstr(err.msg, "magic.bin") && strstr(err.msg, "12345"), "shard_open_bad_magic",
             "%s", err.msg);
    st = shard_open(&sh, path("missing.bin"), &err);
    tu_check(st == ST_ERR_INPUT && strstr(err.msg, "missing.bin"), "shard_open_missing", "%s", err.msg);

    /* empty input and a binary file: library errors */
    write_file("empty.txt", "");
    const char *emp[1] = {path("empty.txt")};
    o.inputs = emp;
    st = prepare_run(&o, &s, &err);
    tu_check(st == ST_ERR_INPUT && strstr(err.msg, "empty.txt") && strstr(err.msg, "empty input"), "prepare_empty_input",
             "%s", err.msg);
    {
        FILE *bf = fopen(path("blob.txt"), "wb");
        for (int i = 0; i < 4096; i++) fputc((i * 131 + 7) & 255, bf); /* has NULs and invalid UTF-8 */
        fclose(bf);
        bf = fopen(path("noise.txt"), "wb");
        uint64_t x = 99;
        for (int i = 0; i < 4096; i++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            fputc((int)(x >> 56) | 1, bf); /* no NUL byte: caught by the invalid-UTF-8 share */
        }
        fclose(bf);
    }
    const char *blob[1] = {path("blob.txt")};
    o.inputs = blob;
    st = prepare_run(&o, &s, &err);
    tu_check(st == ST_ERR_INPUT && strstr(err.msg, "blob.txt") && strstr(err.msg, "binary data (NUL byte"),
             "prepare_binary_nul", "%s", err.msg);
    blob[0] = path("noise.txt");
    st = prepare_run(&o, &s, &err);
    tu_check(st == ST_ERR_INPUT && strstr(err.msg, "noise.txt") && strstr(err.msg, "invalid UTF-8"),
             "prepare_binary_noise", "%s", err.msg);

    /* the same through the binary: one line on stderr, exit 2 */
    char args[3000];
    snprintf(args, sizeof args, "prepare --tokenizer bytes --out %s %s", path("cli"), path("empty.txt"));
    cli_fails("cli_prepare_empty_input", args, "empty input");
    snprintf(args, sizeof args, "prepare --tokenizer bytes --out %s %s", path("cli"), path("blob.txt"));
    cli_fails("cli_prepare_binary_file", args, "expected text (UTF-8) or JSON Lines, found binary data");
    write_file("notext.jsonl", "{\"text\": \"fine\"}\n{\"body\": \"no text here\"}\n");
    snprintf(args, sizeof args, "prepare --tokenizer bytes --out %s %s", path("cli"), path("notext.jsonl"));
    cli_fails("cli_prepare_jsonl_without_text", args, "notext.jsonl:2: expected a JSON object with a string \"text\"");
    snprintf(args, sizeof args, "train --data %s --layers 1 --heads 1 --channels 8 --vocab 257 --seq-len 4 --steps 1 "
             "--peak-gflops 1 --quiet", path("trunc.bin"));
    cli_fails("cli_shard_size_disagrees_with_header", args, "trunc.bin: header says 10 tokens");
    snprintf(args, sizeof args, "%s/big", tmpdir);
    mkdir(args, 0755);
    write_big_vocab(args);
    write_file("small.txt", "a tiny document\n");
    char bigdir[700];
    snprintf(bigdir, sizeof bigdir, "%s/big", tmpdir);
    snprintf(args, sizeof args, "prepare --tokenizer %s --shard-version 1 --out %s %s", bigdir, path("cli"),
             path("small.txt"));
    cli_fails("cli_vocab_over_65536_in_version_1", args, "--shard-version 1: expected a vocabulary of at most 65536 ids");
    /* control: the same vocabulary with the automatic version writes uint32 shards (version 7) */
    snprintf(cmd, sizeof cmd, "%s/scaletrain prepare --quiet --tokenizer %s --val-fraction 0 --out %s %s >/dev/null 2>&1",
             ST_BINARY_DIR, bigdir, path("cli7"), path("small.txt"));
    int rc7 = system(cmd);
    Shard s7;
    Status st7 = shard_open(&s7, path("cli7/train_000000.bin"), &err);
    tu_check(rc7 == 0 && !st7 && s7.meta.version == 7 && s7.elem_bytes == 4 && s7.meta.vocab_size == 65537 &&
                 shard_token(&s7, s7.ntok - 1) == 65536,
             "cli_vocab_over_65536_auto_version_7", "exit=%d version=%u elem=%d last=%u", rc7, st7 ? 0 : s7.meta.version,
             st7 ? 0 : s7.elem_bytes, st7 ? 0 : shard_token(&s7, s7.ntok - 1));
    if (!st7) shard_close(&s7);

    tokenizer_free(bt);
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) printf("note: could not remove %s\n", tmpdir);
    return tu_exit();
}
