/* bpe.c — GPT-2 byte-level BPE and byte tokenizers: loading, pre-tokenization, encode, decode.
 *
 * Contents:
 *   1. character classes (UTF-8 decoding + generated Unicode range tables)
 *   2. pre-tokenization (GPT-2's regex, by hand)
 *   3. byte <-> unicode map of GPT-2's files
 *   4. hash tables (merges by id pair, token bytes -> id)
 *   5. loading encoder.json + vocab.bpe
 *   6. BPE of one pre-token (rank-ordered merges, heap for long pre-tokens), encode, decode
 * Contract and thread-safety notes are in bpe.h; the format is in docs/tokenizer.md. */
#include "data/bpe.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "data/unicode_tables.h"

/* ================================================================== 1. character classes */

enum { CL_OTHER = 0, CL_LETTER = 1, CL_NUMBER = 2, CL_SPACE = 3 };

static int in_ranges(const uint32_t (*r)[2], int count, uint32_t cp) {
    int lo = 0, hi = count - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < r[mid][0]) hi = mid - 1;
        else if (cp > r[mid][1]) lo = mid + 1;
        else return 1;
    }
    return 0;
}

static int class_of_cp(uint32_t cp) {
    if (in_ranges(UT_LETTER, UT_LETTER_COUNT, cp)) return CL_LETTER;
    if (in_ranges(UT_NUMBER, UT_NUMBER_COUNT, cp)) return CL_NUMBER;
    if (in_ranges(UT_SPACE, UT_SPACE_COUNT, cp)) return CL_SPACE;
    return CL_OTHER;
}

/* ASCII classes come precomputed from the generator (UT_ASCII_CLASS), so nothing is mutable. */
#define ascii_class UT_ASCII_CLASS

/* Length (1..4) of the well-formed UTF-8 sequence at s[i], or 0 if s[i] does not start one
 * (Unicode Table 3-7: no overlongs, no surrogates, nothing above U+10FFFF). */
static int utf8_decode(const uint8_t *s, size_t n, size_t i, uint32_t *cp) {
    uint8_t b0 = s[i];
    if (b0 < 0x80) { *cp = b0; return 1; }
    size_t left = n - i;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        if (left < 2 || (s[i + 1] & 0xC0) != 0x80) return 0;
        *cp = ((uint32_t)(b0 & 0x1F) << 6) | (s[i + 1] & 0x3F);
        return 2;
    }
    if (b0 >= 0xE0 && b0 <= 0xEF) {
        if (left < 3) return 0;
        uint8_t b1 = s[i + 1], b2 = s[i + 2];
        uint8_t lo = b0 == 0xE0 ? 0xA0 : 0x80, hi = b0 == 0xED ? 0x9F : 0xBF;
        if (b1 < lo || b1 > hi || (b2 & 0xC0) != 0x80) return 0;
        *cp = ((uint32_t)(b0 & 0x0F) << 12) | ((uint32_t)(b1 & 0x3F) << 6) | (b2 & 0x3F);
        return 3;
    }
    if (b0 >= 0xF0 && b0 <= 0xF4) {
        if (left < 4) return 0;
        uint8_t b1 = s[i + 1], b2 = s[i + 2], b3 = s[i + 3];
        uint8_t lo = b0 == 0xF0 ? 0x90 : 0x80, hi = b0 == 0xF4 ? 0x8F : 0xBF;
        if (b1 < lo || b1 > hi || (b2 & 0xC0) != 0x80 || (b3 & 0xC0) != 0x80) return 0;
        *cp = ((uint32_t)(b0 & 0x07) << 18) | ((uint32_t)(b1 & 0x3F) << 12) | ((uint32_t)(b2 & 0x3F) << 6) |
              (b3 & 0x3F);
        return 4;
    }
    return 0;
}

/* Class and byte length of the character at s[i]; an invalid byte is one "other" character. */
static inline int char_at(const uint8_t *s, size_t n, size_t i, int *len) {
    if (s[i] < 0x80) {
        *len = 1;
        return ascii_class[s[i]];
    }
    uint32_t cp;
    int l = utf8_decode(s, n, i, &cp);
    if (l == 0) {
        *len = 1;
        return CL_OTHER;
    }
    *len = l;
    return class_of_cp(cp);
}

/* ================================================================== 2. pre-tokenization */

/* End of the run of characters of class cl starting at i (the character at i is of class cl). */
static size_t run_end(const uint8_t *s, size_t n, size_t i, int cl) {
    while (i < n) {
        int len;
        if (char_at(s, n, i, &len) != cl) break;
        i += (size_t)len;
    }
    return i;
}

size_t bpe_pretoken_end(const uint8_t *s, size_t n, size_t i) {
    /* 's|'t|'re|'ve|'m|'ll|'d — case-sensitive, checked first as in the regex's alternation. */
    if (s[i] == '\'' && i + 1 < n) {
        uint8_t c = s[i + 1];
        if (c == 's' || c == 't' || c == 'm' || c == 'd') return i + 2;
        if (i + 2 < n) {
            uint8_t d = s[i + 2];
            if ((c == 'r' && d == 'e') || (c == 'v' && d == 'e') || (c == 'l' && d == 'l')) return i + 3;
        }
    }
    int len0;
    int cl0 = char_at(s, n, i, &len0);
    /* ` ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+`: the optional prefix is U+0020 only. */
    if (s[i] == ' ' && i + 1 < n) {
        int len1;
        int cl1 = char_at(s, n, i + 1, &len1);
        if (cl1 != CL_SPACE) return run_end(s, n, i + 1, cl1);
    }
    if (cl0 != CL_SPACE) return run_end(s, n, i, cl0);
    /* `\s+(?!\S)|\s+`: a whitespace run at the end of text is one pre-token; before a
     * non-space, the run minus its last character (if >= 2 characters), else the single one. */
    size_t j = i, last = i;
    int nchars = 0;
    while (j < n) {
        int len;
        if (char_at(s, n, j, &len) != CL_SPACE) break;
        last = j;
        j += (size_t)len;
        nchars++;
    }
    if (j == n || nchars == 1) return j;
    return last;
}

/* ================================================================== 3. byte <-> unicode */

uint32_t bpe_byte_to_unicode(uint8_t b) {
    /* GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the other 68 bytes to
     * U+0100.. in increasing byte order. */
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE)) return b;
    uint32_t k = 0;
    for (uint32_t c = 0; c < b; c++)
        if (!((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE))) k++;
    return 256 + k;
}

/* Inverse map: code point (< 324) -> byte, or -1. */
static void unicode_to_byte_table(int16_t inv[324]) {
    for (int i = 0; i < 324; i++) inv[i] = -1;
    for (int b = 0; b < 256; b++) inv[bpe_byte_to_unicode((uint8_t)b)] = (int16_t)b;
}

/* Converts a GPT-2 file string (UTF-8 of mapped code points) to raw bytes in out (capacity >= strlen).
 * Returns the byte count, or -1 if a character is outside the byte alphabet. */
static long unmap_string(const char *str, const int16_t inv[324], uint8_t *out) {
    const uint8_t *s = (const uint8_t *)str;
    size_t n = strlen(str), i = 0;
    long k = 0;
    while (i < n) {
        uint32_t cp;
        int l = utf8_decode(s, n, i, &cp);
        if (l == 0 || cp >= 324 || inv[cp] < 0) return -1;
        out[k++] = (uint8_t)inv[cp];
        i += (size_t)l;
    }
    return k;
}

/* ================================================================== 4. hash tables */

static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

/* Merge table: key (a << 32 | b), value (rank << 32 | merged id); open addressing, linear probe. */
typedef struct {
    uint64_t *keys; /* UINT64_MAX = empty */
    uint64_t *vals;
    size_t mask;
} MergeMap;

static int mergemap_init(MergeMap *m, size_t n) {
    size_t cap = 16;
    while (cap < 2 * n + 16) cap <<= 1;
    m->keys = malloc(cap * sizeof *m->keys);
    m->vals = malloc(cap * sizeof *m->vals);
    m->mask = cap - 1;
    if (!m->keys || !m->vals) return -1;
    memset(m->keys, 0xff, cap * sizeof *m->keys);
    return 0;
}

static void mergemap_put(MergeMap *m, uint64_t key, uint64_t val) {
    size_t h = mix64(key) & m->mask;
    while (m->keys[h] != UINT64_MAX && m->keys[h] != key) h = (h + 1) & m->mask;
    m->keys[h] = key;
    m->vals[h] = val;
}

/* Returns 1 and sets *val if (a, b) is a merge. */
static inline int mergemap_get(const MergeMap *m, uint32_t a, uint32_t b, uint64_t *val) {
    uint64_t key = ((uint64_t)a << 32) | b;
    size_t h = mix64(key) & m->mask;
    for (;;) {
        uint64_t k = m->keys[h];
        if (k == key) {
            *val = m->vals[h];
            return 1;
        }
        if (k == UINT64_MAX) return 0;
        h = (h + 1) & m->mask;
    }
}

/* ================================================================== 5. loading */

enum { KIND_BYTES, KIND_GPT2, KIND_BPE };

struct Tokenizer {
    int kind;             /* KIND_* */
    uint32_t vocab;       /* ids incl. EOT */
    uint32_t eot;         /* vocab - 1 */
    uint8_t *pool;        /* token bytes, concatenated */
    size_t *off;          /* [vocab + 1] offsets of each token's bytes in pool */
    uint32_t byte_id[256];/* single-byte token of each byte */
    size_t nmerges;
    uint32_t *merge_pairs;/* [nmerges][3]: a, b, merged id, in rank order */
    MergeMap merges;      /* (a, b) -> (rank, merged id) */
    uint64_t hash;        /* tokenizer_hash */
};

static const char EOT_TEXT[] = "<|endoftext|>";

void tokenizer_free(Tokenizer *t) {
    if (!t) return;
    free(t->pool);
    free(t->off);
    free(t->merge_pairs);
    free(t->merges.keys);
    free(t->merges.vals);
    free(t);
}

static void compute_hash(Tokenizer *t) {
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    const char tag[] = "scaletrain-tokenizer-v1";
    XXH3_64bits_update(&st, tag, sizeof tag - 1);
    uint8_t w[4];
#define PUT32(v)                                                                              \
    do {                                                                                      \
        uint32_t v_ = (uint32_t)(v);                                                          \
        w[0] = (uint8_t)v_, w[1] = (uint8_t)(v_ >> 8), w[2] = (uint8_t)(v_ >> 16), w[3] = (uint8_t)(v_ >> 24); \
        XXH3_64bits_update(&st, w, 4);                                                        \
    } while (0)
    PUT32(t->vocab);
    for (uint32_t i = 0; i < t->vocab; i++) {
        PUT32(t->off[i + 1] - t->off[i]);
        XXH3_64bits_update(&st, t->pool + t->off[i], t->off[i + 1] - t->off[i]);
    }
    PUT32(t->nmerges);
    for (size_t r = 0; r < t->nmerges; r++) {
        PUT32(t->merge_pairs[3 * r]);
        PUT32(t->merge_pairs[3 * r + 1]);
    }
    PUT32(t->eot);
#undef PUT32
    t->hash = XXH3_64bits_digest(&st);
}

static Status load_bytes(Tokenizer **out, Err *err) {
    Tokenizer *t = calloc(1, sizeof *t);
    if (!t) return err_set(err, ST_ERR_RUNTIME, "out of memory loading the byte tokenizer");
    t->kind = KIND_BYTES;
    t->vocab = 257;
    t->eot = 256;
    t->pool = malloc(256 + sizeof EOT_TEXT);
    t->off = malloc(258 * sizeof *t->off);
    if (!t->pool || !t->off) {
        tokenizer_free(t);
        return err_set(err, ST_ERR_RUNTIME, "out of memory loading the byte tokenizer");
    }
    for (int b = 0; b < 256; b++) {
        t->pool[b] = (uint8_t)b;
        t->off[b] = (size_t)b;
        t->byte_id[b] = (uint32_t)b;
    }
    memcpy(t->pool + 256, EOT_TEXT, sizeof EOT_TEXT - 1);
    t->off[256] = 256;
    t->off[257] = 256 + sizeof EOT_TEXT - 1;
    compute_hash(t);
    *out = t;
    return ST_OK;
}

/* Reads a whole file (NUL-terminated). */
static Status slurp(const char *path, char **buf, size_t *len, Err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return err_set(err, ST_ERR_INPUT, "%s: cannot open (%s)", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    for (;;) {
        if (!b) {
            fclose(f);
            return err_set(err, ST_ERR_RUNTIME, "%s: out of memory", path);
        }
        n += fread(b + n, 1, cap - n - 1, f);
        if (n < cap - 1) break;
        cap *= 2;
        char *nb = realloc(b, cap);
        if (!nb) free(b);
        b = nb;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(b);
        return err_set(err, ST_ERR_INPUT, "%s: read error", path);
    }
    b[n] = 0;
    *buf = b;
    *len = n;
    return ST_OK;
}

/* Token bytes -> id map used while reading vocab.bpe (open addressing on XXH3). */
typedef struct {
    const Tokenizer *t;
    uint32_t *slots; /* id + 1, 0 = empty */
    size_t mask;
} BytesMap;

static uint32_t bytesmap_find(const BytesMap *m, const uint8_t *b, size_t n) {
    size_t h = XXH3_64bits(b, n) & m->mask;
    for (;;) {
        uint32_t s = m->slots[h];
        if (!s) return UINT32_MAX;
        uint32_t id = s - 1;
        size_t len = m->t->off[id + 1] - m->t->off[id];
        if (len == n && memcmp(m->t->pool + m->t->off[id], b, n) == 0) return id;
        h = (h + 1) & m->mask;
    }
}

Status tokenizer_load_files(Tokenizer **out, const char *enc_path, const char *bpe_path, Err *err) {
    *out = NULL;
    char *json = NULL, *bpe = NULL;
    size_t jlen, blen;
    cJSON *root = NULL;
    Tokenizer *t = NULL;
    BytesMap bm = {0};
    uint8_t *tmp = NULL, *tmp2 = NULL;
    int16_t inv[324];
    unicode_to_byte_table(inv);
    Status st = slurp(enc_path, &json, &jlen, err);
    if (st) goto done;
    st = slurp(bpe_path, &bpe, &blen, err);
    if (st) goto done;
    root = cJSON_ParseWithLength(json, jlen);
    if (!root || !cJSON_IsObject(root)) {
        st = err_set(err, ST_ERR_INPUT, "%s: expected a JSON object {token: id}, found invalid JSON", enc_path);
        goto done;
    }
    int nv = cJSON_GetArraySize(root);
    if (nv < 257) {
        st = err_set(err, ST_ERR_INPUT, "%s: expected at least 257 tokens, found %d", enc_path, nv);
        goto done;
    }
    t = calloc(1, sizeof *t);
    if (!t) goto oom;
    t->kind = KIND_BPE;
    t->vocab = (uint32_t)nv;
    t->eot = t->vocab - 1;
    t->off = calloc((size_t)nv + 1, sizeof *t->off);
    size_t *lens = calloc((size_t)nv, sizeof *lens);
    long *src = malloc((size_t)nv * sizeof *src); /* unused slot marker */
    tmp = malloc(jlen + 1);
    if (!t->off || !lens || !src || !tmp) {
        free(lens);
        free(src);
        goto oom;
    }
    for (int i = 0; i < nv; i++) src[i] = -1;
    /* Pass 1: ids and lengths; pass 2: bytes into the pool in id order. */
    int k = 0;
    for (cJSON *it = root->child; it; it = it->next, k++) {
        if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble >= nv ||
            it->valuedouble != (double)(int)it->valuedouble) {
            st = err_set(err, ST_ERR_INPUT, "%s: token \"%.60s\": expected an integer id in [0, %d), found %s",
                         enc_path, it->string, nv, cJSON_IsNumber(it) ? "an out-of-range number" : "a non-number");
            break;
        }
        int id = it->valueint;
        if (src[id] >= 0) {
            st = err_set(err, ST_ERR_INPUT, "%s: expected unique ids, found id %d twice", enc_path, id);
            break;
        }
        src[id] = k;
        long l = unmap_string(it->string, inv, tmp);
        if (id == nv - 1 && strcmp(it->string, EOT_TEXT) == 0) l = (long)strlen(EOT_TEXT);
        if (l < 0) {
            st = err_set(err, ST_ERR_INPUT, "%s: token \"%.60s\": expected characters of GPT-2's byte alphabet",
                         enc_path, it->string);
            break;
        }
        if (l == 0) {
            st = err_set(err, ST_ERR_INPUT, "%s: expected non-empty tokens, found \"\" (id %d)", enc_path, id);
            break;
        }
        lens[id] = (size_t)l;
    }
    if (!st) {
        cJSON *last = cJSON_GetObjectItemCaseSensitive(root, EOT_TEXT);
        if (!last || last->valueint != nv - 1)
            st = err_set(err, ST_ERR_INPUT, "%s: expected \"%s\" as the last id %d, found %s", enc_path, EOT_TEXT,
                         nv - 1, last ? "it at another id" : "no such token");
    }
    if (st) {
        free(lens);
        free(src);
        goto done;
    }
    for (int i = 0; i < nv; i++) t->off[i + 1] = t->off[i] + lens[i];
    free(lens);
    t->pool = malloc(t->off[nv] + 1);
    cJSON **items = malloc((size_t)nv * sizeof *items);
    if (!t->pool || !items) {
        free(items);
        free(src);
        goto oom;
    }
    k = 0;
    for (cJSON *it = root->child; it; it = it->next, k++) items[k] = it;
    for (int id = 0; id < nv; id++) {
        const char *s = items[src[id]]->string;
        if (id == nv - 1) memcpy(t->pool + t->off[id], EOT_TEXT, strlen(EOT_TEXT));
        else unmap_string(s, inv, t->pool + t->off[id]);
    }
    free(items);
    free(src);
    cJSON_Delete(root);
    root = NULL;
    /* token bytes -> id (EOT excluded: its bytes are ordinary text) */
    size_t cap = 16;
    while (cap < 2 * (size_t)nv) cap <<= 1;
    bm.t = t;
    bm.mask = cap - 1;
    bm.slots = calloc(cap, sizeof *bm.slots);
    if (!bm.slots) goto oom;
    for (uint32_t id = 0; id < t->eot; id++) {
        const uint8_t *b = t->pool + t->off[id];
        size_t n = t->off[id + 1] - t->off[id];
        if (bytesmap_find(&bm, b, n) != UINT32_MAX) {
            st = err_set(err, ST_ERR_INPUT, "%s: expected distinct tokens, found id %u repeating an earlier token",
                         enc_path, id);
            goto done;
        }
        size_t h = XXH3_64bits(b, n) & bm.mask;
        while (bm.slots[h]) h = (h + 1) & bm.mask;
        bm.slots[h] = id + 1;
    }
    for (int b = 0; b < 256; b++) {
        uint8_t c = (uint8_t)b;
        uint32_t id = bytesmap_find(&bm, &c, 1);
        if (id == UINT32_MAX) {
            st = err_set(err, ST_ERR_INPUT, "%s: expected a single-byte token for every byte, found none for 0x%02X",
                         enc_path, b);
            goto done;
        }
        t->byte_id[b] = id;
    }
    /* vocab.bpe: optional "#version" line, then "A B" per merge in rank order. */
    size_t nlines = 0;
    for (size_t i = 0; i < blen; i++) nlines += bpe[i] == '\n';
    t->merge_pairs = malloc((nlines + 1) * 3 * sizeof *t->merge_pairs);
    tmp2 = malloc(blen + 1);
    if (!t->merge_pairs || !tmp2 || mergemap_init(&t->merges, nlines + 1)) goto oom;
    char *line = bpe;
    size_t lineno = 0;
    while (line < bpe + blen) {
        char *nl = memchr(line, '\n', (size_t)(bpe + blen - line));
        if (nl) *nl = 0;
        lineno++;
        size_t ll = strlen(line);
        if (ll && line[ll - 1] == '\r') line[--ll] = 0;
        if (ll == 0 || (lineno == 1 && strncmp(line, "#version", 8) == 0)) goto next;
        char *sp = strchr(line, ' ');
        if (!sp || strchr(sp + 1, ' ') || sp == line || !sp[1]) {
            st = err_set(err, ST_ERR_INPUT, "%s:%zu: expected \"A B\" (two tokens, one space), found \"%.60s\"",
                         bpe_path, lineno, line);
            goto done;
        }
        *sp = 0;
        long la = unmap_string(line, inv, tmp2), lb = la < 0 ? -1 : unmap_string(sp + 1, inv, tmp2 + la);
        uint32_t a = la < 0 ? UINT32_MAX : bytesmap_find(&bm, tmp2, (size_t)la);
        uint32_t b = lb < 0 ? UINT32_MAX : bytesmap_find(&bm, tmp2 + la, (size_t)lb);
        uint32_t m = (a == UINT32_MAX || b == UINT32_MAX) ? UINT32_MAX : bytesmap_find(&bm, tmp2, (size_t)(la + lb));
        if (m == UINT32_MAX) {
            st = err_set(err, ST_ERR_INPUT, "%s:%zu: expected a merge of two tokens of %s into a third, found \"%s %s\"",
                         bpe_path, lineno, enc_path, line, sp + 1);
            goto done;
        }
        uint64_t dummy;
        if (!mergemap_get(&t->merges, a, b, &dummy)) {
            mergemap_put(&t->merges, ((uint64_t)a << 32) | b, ((uint64_t)t->nmerges << 32) | m);
            uint32_t *mp = t->merge_pairs + 3 * t->nmerges++;
            mp[0] = a, mp[1] = b, mp[2] = m;
        }
    next:
        if (!nl) break;
        line = nl + 1;
    }
    /* "gpt2" names OpenAI's vocabulary: the kind follows the content, not the spec. */
    if (t->vocab == 50257 && t->nmerges == 50000) t->kind = KIND_GPT2;
    compute_hash(t);
    *out = t;
    t = NULL;
    st = ST_OK;
    goto done;
oom:
    st = err_set(err, ST_ERR_RUNTIME, "%s: out of memory loading the tokenizer", enc_path);
done:
    cJSON_Delete(root);
    free(json);
    free(bpe);
    free(tmp);
    free(tmp2);
    free(bm.slots);
    tokenizer_free(t);
    return st;
}

Status tokenizer_load(Tokenizer **out, const char *spec, const char *gpt2_dir, Err *err) {
    *out = NULL;
    if (!spec) return err_set(err, ST_ERR_INPUT, "tokenizer: expected gpt2, bytes or a directory, found nothing");
    if (strcmp(spec, "bytes") == 0) return load_bytes(out, err);
    const char *dir = spec;
    int gpt2 = strcmp(spec, "gpt2") == 0;
    if (gpt2) {
        if (!gpt2_dir)
            return err_set(err, ST_ERR_INPUT, "tokenizer gpt2: expected a directory with encoder.json and vocab.bpe, "
                                              "found none (give --tokenizer-dir)");
        dir = gpt2_dir;
    }
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return err_set(err, ST_ERR_INPUT,
                       "tokenizer %s: expected gpt2, bytes or a directory with encoder.json and vocab.bpe, found %s",
                       dir, stat(dir, &sb) != 0 ? "no such directory" : "a non-directory");
    char ep[2048], bp[2048];
    snprintf(ep, sizeof ep, "%s/encoder.json", dir);
    snprintf(bp, sizeof bp, "%s/vocab.bpe", dir);
    (void)gpt2;
    return tokenizer_load_files(out, ep, bp, err);
}

uint32_t tokenizer_vocab_size(const Tokenizer *t) { return t->vocab; }
uint32_t tokenizer_eot(const Tokenizer *t) { return t->eot; }
uint64_t tokenizer_hash(const Tokenizer *t) { return t->hash; }
const char *tokenizer_kind(const Tokenizer *t) {
    return t->kind == KIND_BYTES ? "bytes" : t->kind == KIND_GPT2 ? "gpt2" : "bpe";
}
size_t tokenizer_merge_count(const Tokenizer *t) { return t->nmerges; }
uint32_t tokenizer_merge(const Tokenizer *t, size_t rank, uint32_t *a, uint32_t *b) {
    ST_CHECK(rank < t->nmerges);
    const uint32_t *mp = t->merge_pairs + 3 * rank;
    *a = mp[0];
    *b = mp[1];
    return mp[2];
}

const uint8_t *tokenizer_token_bytes(const Tokenizer *t, uint32_t id, size_t *len) {
    if (id >= t->vocab) return NULL;
    *len = t->off[id + 1] - t->off[id];
    return t->pool + t->off[id];
}

/* ================================================================== 6. BPE, encode, decode */

/* Grows *ids to hold at least need elements. */
static int ids_reserve(uint32_t **ids, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    size_t nc = *cap ? *cap : 256;
    while (nc < need) nc *= 2;
    uint32_t *p = realloc(*ids, nc * sizeof *p);
    if (!p) return -1;
    *ids = p;
    *cap = nc;
    return 0;
}

/* Per-call scratch for long pre-tokens (heap merge). */
typedef struct {
    uint32_t *id;   /* symbol id, UINT32_MAX once merged away */
    int32_t *next, *prev;
    uint64_t *heap; /* (rank << 32 | position) */
    size_t cap, hcap, hn;
} Scratch;

static void scratch_free(Scratch *s) {
    free(s->id);
    free(s->next);
    free(s->prev);
    free(s->heap);
}

static int scratch_reserve(Scratch *s, size_t n) {
    if (n <= s->cap) return 0;
    scratch_free(s);
    s->id = malloc(n * sizeof *s->id);
    s->next = malloc(n * sizeof *s->next);
    s->prev = malloc(n * sizeof *s->prev);
    s->heap = malloc(2 * n * sizeof *s->heap);
    if (!s->id || !s->next || !s->prev || !s->heap) {
        s->cap = 0;
        return -1;
    }
    s->cap = n;
    s->hcap = 2 * n;
    return 0;
}

static void heap_push(Scratch *s, uint64_t v) {
    if (s->hn == s->hcap) { /* grow: pushes are bounded by n + 2 * merges */
        uint64_t *h = realloc(s->heap, 2 * s->hcap * sizeof *h);
        ST_CHECK(h != NULL);
        s->heap = h;
        s->hcap *= 2;
    }
    size_t i = s->hn++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (s->heap[p] <= v) break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = v;
}

static uint64_t heap_pop(Scratch *s) {
    uint64_t top = s->heap[0], v = s->heap[--s->hn];
    size_t i = 0, n = s->hn;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && s->heap[c + 1] < s->heap[c]) c++;
        if (v <= s->heap[c]) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n) s->heap[i] = v;
    return top;
}

/* Threshold in bytes above which a pre-token is merged with the heap instead of quadratic scans. */
#define BPE_SHORT 48

/* BPE of one pre-token: appends its ids to out (capacity reserved by the caller: n more ids). */
static size_t bpe_piece(const Tokenizer *t, const uint8_t *p, size_t n, uint32_t *out, Scratch *sc) {
    if (n == 1) {
        out[0] = t->byte_id[p[0]];
        return 1;
    }
    if (n <= BPE_SHORT) {
        /* Merge the lowest-rank adjacent pair (leftmost on ties) until none is a merge. */
        uint32_t sym[BPE_SHORT];
        size_t m = n;
        for (size_t i = 0; i < n; i++) sym[i] = t->byte_id[p[i]];
        uint64_t rk[BPE_SHORT]; /* rank << 32 | merged id of pair (i, i+1), UINT64_MAX if none */
        for (size_t i = 0; i + 1 < m; i++)
            if (!mergemap_get(&t->merges, sym[i], sym[i + 1], &rk[i])) rk[i] = UINT64_MAX;
        while (m > 1) {
            size_t best = 0;
            for (size_t i = 1; i + 1 < m; i++)
                if (rk[i] < rk[best]) best = i;
            if (rk[best] == UINT64_MAX) break;
            sym[best] = (uint32_t)rk[best];
            for (size_t i = best + 1; i + 1 < m; i++) sym[i] = sym[i + 1];
            for (size_t i = best + 1; i + 2 < m; i++) rk[i] = rk[i + 1];
            m--;
            if (best > 0 && !mergemap_get(&t->merges, sym[best - 1], sym[best], &rk[best - 1])) rk[best - 1] = UINT64_MAX;
            if (best + 1 < m && !mergemap_get(&t->merges, sym[best], sym[best + 1], &rk[best])) rk[best] = UINT64_MAX;
        }
        memcpy(out, sym, m * sizeof *sym);
        return m;
    }
    /* Long pre-token: linked list of symbols + min-heap of (rank, position); stale entries are
     * skipped when popped. Ties in rank pop the smaller (leftmost) position first. */
    ST_CHECK(scratch_reserve(sc, n) == 0);
    sc->hn = 0;
    for (size_t i = 0; i < n; i++) {
        sc->id[i] = t->byte_id[p[i]];
        sc->next[i] = i + 1 < n ? (int32_t)(i + 1) : -1;
        sc->prev[i] = (int32_t)i - 1;
    }
    uint64_t v;
    for (size_t i = 0; i + 1 < n; i++)
        if (mergemap_get(&t->merges, sc->id[i], sc->id[i + 1], &v)) heap_push(sc, (v >> 32) << 32 | i);
    while (sc->hn) {
        uint64_t e = heap_pop(sc);
        uint32_t rank = (uint32_t)(e >> 32), pos = (uint32_t)e;
        int32_t q = sc->next[pos];
        if (sc->id[pos] == UINT32_MAX || q < 0) continue;
        if (!mergemap_get(&t->merges, sc->id[pos], sc->id[q], &v) || (uint32_t)(v >> 32) != rank) continue;
        sc->id[pos] = (uint32_t)v;
        sc->id[q] = UINT32_MAX;
        sc->next[pos] = sc->next[q];
        if (sc->next[q] >= 0) sc->prev[sc->next[q]] = (int32_t)pos;
        int32_t pr = sc->prev[pos], nx = sc->next[pos];
        if (pr >= 0 && mergemap_get(&t->merges, sc->id[pr], sc->id[pos], &v)) heap_push(sc, (v >> 32) << 32 | (uint32_t)pr);
        if (nx >= 0 && mergemap_get(&t->merges, sc->id[pos], sc->id[nx], &v)) heap_push(sc, (v >> 32) << 32 | pos);
    }
    size_t m = 0;
    for (int32_t i = 0; i >= 0; i = sc->next[i]) out[m++] = sc->id[i];
    return m;
}

Status tokenizer_encode(const Tokenizer *t, const uint8_t *text, size_t n, uint32_t **ids, size_t *nids,
                        size_t *cap, Err *err) {
    if (ids_reserve(ids, cap, *nids + (t->kind == KIND_BYTES ? n : 0)))
        return err_set(err, ST_ERR_RUNTIME, "out of memory encoding %zu bytes", n);
    if (t->kind == KIND_BYTES) {
        for (size_t i = 0; i < n; i++) (*ids)[(*nids)++] = text[i];
        return ST_OK;
    }
    Scratch sc = {0};
    size_t i = 0;
    while (i < n) {
        size_t j = bpe_pretoken_end(text, n, i);
        if (ids_reserve(ids, cap, *nids + (j - i))) {
            scratch_free(&sc);
            return err_set(err, ST_ERR_RUNTIME, "out of memory encoding %zu bytes", n);
        }
        *nids += bpe_piece(t, text + i, j - i, *ids + *nids, &sc);
        i = j;
    }
    scratch_free(&sc);
    return ST_OK;
}

Status tokenizer_decode(const Tokenizer *t, const uint32_t *ids, size_t n, uint8_t **out, size_t *len,
                        size_t *cap, Err *err) {
    for (size_t i = 0; i < n; i++) {
        if (ids[i] >= t->vocab)
            return err_set(err, ST_ERR_INPUT, "token %zu: expected an id below the vocabulary size %u, found %u", i,
                           t->vocab, ids[i]);
        size_t l = t->off[ids[i] + 1] - t->off[ids[i]];
        if (*len + l > *cap) {
            size_t nc = *cap ? *cap : 1024;
            while (nc < *len + l) nc *= 2;
            uint8_t *p = realloc(*out, nc);
            if (!p) return err_set(err, ST_ERR_RUNTIME, "out of memory decoding %zu ids", n);
            *out = p;
            *cap = nc;
        }
        memcpy(*out + *len, t->pool + t->off[ids[i]], l);
        *len += l;
    }
    return ST_OK;
}
