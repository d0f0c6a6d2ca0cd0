/* test_bpe.c — GPT-2 BPE and byte tokenizers against tiktoken's ids.
 *
 * Oracles (exact, no tolerance):
 *   - tests/fixtures/gpt2_tokenizer_vectors.jsonl: 69 cases, ids from npm tiktoken 1.0.22;
 *   - tests/fixtures/gpt2_extra_vectors.jsonl: 33 long-pre-token / whitespace cases, same source;
 *   - Tiny Shakespeare: 338,025 ids and FNV-1a-64 of the ids (uint32 LE) computed once with
 *     tiktoken 1.0.22 by tests/fixtures/gpt2_shakespeare_checksum.cjs (see TOKENIZER_FIXTURES.md);
 *   - decode(encode(x)) == x on random byte strings, invalid UTF-8 included;
 *   - concurrent encodes on one Tokenizer equal the single-threaded result;
 *   - tokenizer hashes: tests/fixtures/tokenizer_hashes.txt, computed from the files by
 *     gen_tokenizer_hash.py with python3-xxhash; a one-byte change must change the hash. */
#include <cjson/cJSON.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileio.h"
#include "data/bpe.h"
#include "testutil.h"

#define SHAKESPEARE_TOKENS 338025
#define SHAKESPEARE_FNV 0xe22fcd868ca90167ULL

/* The whole file (NUL-terminated) through core/fileio, or NULL. */
static char *read_all(const char *path, size_t *n) {
    char *b;
    Err e;
    return file_read_all(path, &b, n, &e) == ST_OK ? b : NULL;
}

static uint64_t fnv_ids(const uint32_t *ids, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < 4; k++) {
            h ^= (ids[i] >> (8 * k)) & 255;
            h *= 0x100000001b3ULL;
        }
    return h;
}

/* Encodes then decodes; 1 if decode(encode(s)) == s. */
static int round_trip(const Tokenizer *t, const uint8_t *s, size_t n) {
    uint32_t *ids = NULL;
    size_t nids = 0, cap = 0, len = 0, bcap = 0;
    uint8_t *back = NULL;
    Err err;
    int ok = tokenizer_encode(t, s, n, &ids, &nids, &cap, &err) == ST_OK &&
             tokenizer_decode(t, ids, nids, &back, &len, &bcap, &err) == ST_OK && len == n &&
             (n == 0 || memcmp(back, s, n) == 0);
    for (size_t i = 0; i < nids; i++) ok &= ids[i] != tokenizer_eot(t);
    free(ids);
    free(back);
    return ok;
}

/* Checks every {"text","ids"} line of a fixture; returns the number of failing cases. */
static int check_vectors(const Tokenizer *t, const char *path, int *ncases) {
    size_t n;
    char *buf = read_all(path, &n);
    if (!buf) {
        tu_check(0, "vectors_file", "cannot read %s", path);
        return 1;
    }
    int bad = 0;
    *ncases = 0;
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        cJSON *text = cJSON_GetObjectItem(o, "text"), *jids = cJSON_GetObjectItem(o, "ids");
        size_t tl = strlen(text->valuestring);
        uint32_t *ids = NULL;
        size_t nids = 0, cap = 0;
        Err err;
        tokenizer_encode(t, (const uint8_t *)text->valuestring, tl, &ids, &nids, &cap, &err);
        int ok = (int)nids == cJSON_GetArraySize(jids);
        for (size_t i = 0; ok && i < nids; i++) ok = ids[i] == (uint32_t)cJSON_GetArrayItem(jids, (int)i)->valueint;
        ok = ok && round_trip(t, (const uint8_t *)text->valuestring, tl);
        if (!ok) {
            bad++;
            printf("  mismatch on %s: got", line);
            for (size_t i = 0; i < nids; i++) printf(" %u", ids[i]);
            printf("\n");
        }
        (*ncases)++;
        free(ids);
        cJSON_Delete(o);
    }
    free(buf);
    return bad;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

/* A random string mixing ASCII, spaces, apostrophes, valid multi-byte UTF-8 and raw invalid bytes. */
static size_t random_text(uint8_t *s, size_t max) {
    static const char *pieces[] = {" ", "  ", "\n", "\t", "'", "'s", "'ll", "a", "Z", "7", "é", "日", "😀", "\xC2\xA0",
                                   "\xE3\x80\x80", "!", "\xC0", "\xFF", "\xE2\x82", "\xED\xA0\x80", "\x80", "\xF4\x90\x80\x80"};
    size_t n = 0, want = rnd() % max;
    while (n < want) {
        if (rnd() % 4 == 0) {
            s[n++] = (uint8_t)rnd();
            continue;
        }
        const char *p = pieces[rnd() % (sizeof pieces / sizeof *pieces)];
        size_t l = strlen(p);
        if (n + l > max) break;
        memcpy(s + n, p, l);
        n += l;
    }
    return n;
}

/* The hash named `name` in tests/fixtures/tokenizer_hashes.txt (0 if absent). */
static uint64_t fixture_hash(const char *text, const char *name) {
    size_t n = strlen(name);
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (!strncmp(l, name, n) && l[n] == ' ') return strtoull(l + n + 1, NULL, 16);
    return 0;
}

/* Tokenizer hashes against the ones tests/fixtures/gen_tokenizer_hash.py computed from the files with
 * python3-xxhash (a change would make existing shards be refused). Negative control: the gpt2 files
 * with one byte changed (the first merge "Ġ t" made "Ġ a") hash differently, to the value the script
 * computed for that change. */
static void check_hashes(const Tokenizer *g, const Tokenizer *b) {
    char *want = tu_slurp(ST_SOURCE_DIR "/tests/fixtures/tokenizer_hashes.txt");
    uint64_t wg = want ? fixture_hash(want, "gpt2") : 0, wb = want ? fixture_hash(want, "bytes") : 0;
    uint64_t wm = want ? fixture_hash(want, "gpt2_first_merge_t_to_a") : 0;
    free(want);
    tu_check(wg && wb && wm && tokenizer_hash(g) == wg && tokenizer_hash(b) == wb,
             "tokenizer_hash == gen_tokenizer_hash.py", "%sgpt2=0x%016llx (script 0x%016llx) bytes=0x%016llx (script 0x%016llx)",
             wg && wb && wm ? "" : "tests/fixtures/tokenizer_hashes.txt missing or incomplete; ",
             (unsigned long long)tokenizer_hash(g), (unsigned long long)wg, (unsigned long long)tokenizer_hash(b),
             (unsigned long long)wb);
    /* The modified copy: encoder.json as is, vocab.bpe with one byte changed. */
    const char *dir = ST_BINARY_DIR "/test_bpe_modified";
    char *enc = tu_slurp(ST_SOURCE_DIR "/data/gpt2_tokenizer/encoder.json");
    char *bpe = tu_slurp(ST_SOURCE_DIR "/data/gpt2_tokenizer/vocab.bpe");
    size_t ne = enc ? strlen(enc) : 0, nb = bpe ? strlen(bpe) : 0;
    char *first = bpe ? strstr(bpe, "\n\xC4\xA0 t\n") : NULL; /* "Ġ t", the first merge */
    int changed = first && first == strchr(bpe, '\n');
    if (changed) first[4] = 'a';
    Err err;
    Tokenizer *m = NULL;
    Status st = ST_ERR_INPUT;
    if (changed && file_mkdirs(dir, &err) == ST_OK) {
        const void *eb[1] = {enc}, *bb[1] = {bpe};
        if (file_write_atomic(ST_BINARY_DIR "/test_bpe_modified/encoder.json", eb, &ne, 1, &err) == ST_OK &&
            file_write_atomic(ST_BINARY_DIR "/test_bpe_modified/vocab.bpe", bb, &nb, 1, &err) == ST_OK)
            st = tokenizer_load(&m, dir, NULL, &err);
    }
    uint64_t hm = st == ST_OK ? tokenizer_hash(m) : 0;
    tu_check(st == ST_OK && hm != wg && hm == wm, "tokenizer_hash negative control: one byte of vocab.bpe changed",
             "detected: 0x%016llx != gpt2 0x%016llx, == script 0x%016llx%s%s", (unsigned long long)hm,
             (unsigned long long)wg, (unsigned long long)wm, st ? "; load: " : "", st ? err.msg : "");
    tokenizer_free(m);
    free(enc);
    free(bpe);
}

int main(void) {
    Err err;
    Tokenizer *g = NULL, *b = NULL;
    Status st = tokenizer_load(&g, "gpt2", ST_SOURCE_DIR "/data/gpt2_tokenizer", &err);
    tu_check(st == ST_OK, "gpt2_load", "%s", st ? err.msg : "");
    if (st) return tu_exit();
    tu_check(tokenizer_vocab_size(g) == 50257 && tokenizer_eot(g) == 50256 && tokenizer_merge_count(g) == 50000 &&
                 strcmp(tokenizer_kind(g), "gpt2") == 0,
             "gpt2_shape", "vocab=%u eot=%u merges=%zu kind=%s", tokenizer_vocab_size(g), tokenizer_eot(g),
             tokenizer_merge_count(g), tokenizer_kind(g));

    int ncases = 0, bad = check_vectors(g, ST_SOURCE_DIR "/tests/fixtures/gpt2_tokenizer_vectors.jsonl", &ncases);
    tu_check(bad == 0 && ncases == 69, "gpt2_vectors", "cases=%d mismatches=%d (oracle: tiktoken 1.0.22)", ncases, bad);
    bad = check_vectors(g, ST_SOURCE_DIR "/tests/fixtures/gpt2_extra_vectors.jsonl", &ncases);
    tu_check(bad == 0 && ncases == 33, "gpt2_extra_vectors", "cases=%d mismatches=%d", ncases, bad);

    /* EOT is never parsed from text */
    const char *eot = "<|endoftext|>";
    uint32_t *ids = NULL;
    size_t nids = 0, cap = 0;
    tokenizer_encode(g, (const uint8_t *)eot, strlen(eot), &ids, &nids, &cap, &err);
    tu_check(nids == 7 && ids[0] == 27 && ids[6] == 29, "gpt2_eot_literal", "ntok=%zu", nids);

    /* random byte strings, invalid UTF-8 included */
    uint8_t s[600];
    int rt_bad = 0;
    for (int i = 0; i < 3000; i++) {
        size_t n = random_text(s, sizeof s);
        if (!round_trip(g, s, n)) rt_bad++;
    }
    for (int i = 0; i < 300; i++) { /* pure random bytes */
        size_t n = rnd() % sizeof s;
        for (size_t k = 0; k < n; k++) s[k] = (uint8_t)rnd();
        if (!round_trip(g, s, n)) rt_bad++;
    }
    tu_check(rt_bad == 0, "gpt2_roundtrip_random", "strings=3300 failures=%d", rt_bad);

    /* decode rejects out-of-range ids */
    uint32_t badid[2] = {5, 50257};
    uint8_t *out = NULL;
    size_t olen = 0, ocap = 0;
    st = tokenizer_decode(g, badid, 2, &out, &olen, &ocap, &err);
    tu_check(st == ST_ERR_INPUT && strstr(err.msg, "50257"), "gpt2_decode_bad_id", "%s", err.msg);
    free(out);

    /* Tiny Shakespeare: count + checksum of tiktoken's ids */
    size_t tn;
    char *ts = read_all(ST_SOURCE_DIR "/data/tinyshakespeare/input.txt", &tn);
    tu_check(ts != NULL, "shakespeare_read", "%zu bytes", tn);
    if (ts) {
        nids = 0;
        double t0 = omp_get_wtime();
        tokenizer_encode(g, (const uint8_t *)ts, tn, &ids, &nids, &cap, &err);
        double dt = omp_get_wtime() - t0;
        uint64_t h = fnv_ids(ids, nids);
        tu_check(nids == SHAKESPEARE_TOKENS && h == SHAKESPEARE_FNV, "gpt2_shakespeare",
                 "tokens=%zu fnv=0x%016llx (want %d 0x%016llx) %.1f MB/s", nids, (unsigned long long)h,
                 SHAKESPEARE_TOKENS, (unsigned long long)SHAKESPEARE_FNV, tn / dt / 1e6);
        tu_check(round_trip(g, (const uint8_t *)ts, tn), "gpt2_shakespeare_roundtrip", "bytes=%zu", tn);
        /* the same tokenizer from 4 threads at once */
        int thr_bad = 0;
#pragma omp parallel for num_threads(4) reduction(+ : thr_bad)
        for (int k = 0; k < 4; k++) {
            uint32_t *v = NULL;
            size_t nv = 0, cv = 0;
            Err e2;
            tokenizer_encode(g, (const uint8_t *)ts, tn, &v, &nv, &cv, &e2);
            thr_bad += nv != nids || memcmp(v, ids, nids * sizeof *v) != 0;
            free(v);
        }
        tu_check(thr_bad == 0, "gpt2_concurrent_encode", "threads=4 mismatches=%d", thr_bad);
        free(ts);
    }
    free(ids);

    /* byte tokenizer */
    st = tokenizer_load(&b, "bytes", NULL, &err);
    tu_check(st == ST_OK && tokenizer_vocab_size(b) == 257 && tokenizer_eot(b) == 256 &&
                 strcmp(tokenizer_kind(b), "bytes") == 0,
             "bytes_shape", "vocab=%u", b ? tokenizer_vocab_size(b) : 0);
    rt_bad = 0;
    for (int i = 0; i < 500; i++) {
        size_t n = rnd() % sizeof s;
        for (size_t k = 0; k < n; k++) s[k] = (uint8_t)rnd();
        if (!round_trip(b, s, n)) rt_bad++;
    }
    tu_check(rt_bad == 0, "bytes_roundtrip", "strings=500 failures=%d", rt_bad);
    check_hashes(g, b);

    /* load errors name the path */
    Tokenizer *x = NULL;
    st = tokenizer_load(&x, "/nonexistent/tok", NULL, &err);
    tu_check(st == ST_ERR_INPUT && strstr(err.msg, "/nonexistent/tok") && !x, "load_missing_dir", "%s", err.msg);
    st = tokenizer_load(&x, "gpt2", "/nonexistent/gpt2dir", &err);
    tu_check(st == ST_ERR_INPUT && strstr(err.msg, "/nonexistent/gpt2dir"), "load_missing_gpt2_dir", "%s", err.msg);

    tokenizer_free(g);
    tokenizer_free(b);
    return tu_exit();
}
