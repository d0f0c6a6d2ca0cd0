/* bpe.c — GPT-2 byte-level BPE, tiktoken rank files (cl100k_base, o200k_base), Meta's Llama 3
 * tokenizer.model and byte tokenizers: loading, pre-tokenization, special tokens, encode, decode.
 *
 * Contents:
 *   1. character classes (UTF-8 decoding + generated Unicode range tables)
 *   2. pre-tokenization (GPT-2's, cl100k's (= Llama 3's) and o200k's regexes, by hand)
 *   3. byte <-> unicode map of GPT-2's files
 *   4. hash tables (merges by id pair, token bytes -> id)
 *   5. loading encoder.json + vocab.bpe; loading rank files; Meta's Llama 3 tokenizer.model; special
 *      tokens by name
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

/* ---- cl100k_base and o200k_base ------------------------------------------------------------
 * Categories from UT_CAT (1 Lu, 2 Ll, 3 Lt, 4 Lm, 5 Lo, 6 M, 7 N, 8 White_Space, 0 other; an
 * invalid UTF-8 byte is one "other" character). The regexes (verbatim from tiktoken 1.0.22):
 *   cl100k: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*
 *           |\s*[\r\n]+|\s+(?!\S)|\s+
 *   o200k:  [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
 *           |[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
 *           |\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * Alternatives are tried in order at each position and the first that matches wins, with the extent
 * a backtracking (leftmost-first) engine gives; where backtracking matters it is spelled out below. */

enum { CAT_OTHER, CAT_LU, CAT_LL, CAT_LT, CAT_LM, CAT_LO, CAT_M, CAT_N, CAT_WS };
#define CM(c) (1u << (c))
#define M_LETTER (CM(CAT_LU) | CM(CAT_LL) | CM(CAT_LT) | CM(CAT_LM) | CM(CAT_LO))
#define M_UPPER (CM(CAT_LU) | CM(CAT_LT) | CM(CAT_LM) | CM(CAT_LO) | CM(CAT_M)) /* o200k [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] */
#define M_LOWER (CM(CAT_LL) | CM(CAT_LM) | CM(CAT_LO) | CM(CAT_M))              /* o200k [\p{Ll}\p{Lm}\p{Lo}\p{M}] */
#define M_PUNCT (CM(CAT_OTHER) | CM(CAT_M))                                     /* [^\s\p{L}\p{N}] */

static inline int cat_of_cp(uint32_t cp) {
    if (cp < 0x10000) return UT_BMP_CAT[UT_BMP_BLOCK[cp >> 8]][cp & 255];
    int lo = 0, hi = UT_CAT_COUNT - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < UT_CAT[mid][0]) hi = mid - 1;
        else if (cp > UT_CAT[mid][1]) lo = mid + 1;
        else return (int)UT_CAT[mid][2];
    }
    return CAT_OTHER;
}

/* Category and byte length of the character at s[i]. */
static inline int cat_at(const uint8_t *s, size_t n, size_t i, int *len) {
    if (s[i] < 0x80) {
        *len = 1;
        return UT_ASCII_CAT[s[i]];
    }
    uint32_t cp;
    int l = utf8_decode(s, n, i, &cp);
    if (l == 0) {
        *len = 1;
        return CAT_OTHER;
    }
    *len = l;
    return cat_of_cp(cp);
}

/* End of the run of characters whose category is in mask, from i. */
static inline size_t cat_run(const uint8_t *s, size_t n, size_t i, uint32_t mask) {
    while (i < n) {
        int len;
        if (!(CM(cat_at(s, n, i, &len)) & mask)) break;
        i += (size_t)len;
    }
    return i;
}

/* Rules of one pattern; the TEST_ variants change one rule each. */
typedef struct {
    int o200k;      /* o200k's letter alternatives (else cl100k's \p{L}+ and leading contractions) */
    int icase;      /* contractions case-insensitive, (?i:...) */
    int max_digits; /* \p{N}{1,max_digits} */
    uint32_t upper, lower; /* o200k's two letter classes */
} PatRules;

static const PatRules RULES_CL100K = {0, 1, 3, 0, 0};
static const PatRules RULES_O200K = {1, 1, 3, M_UPPER, M_LOWER};

static inline uint8_t ascii_lower(uint8_t c) { return c >= 'A' && c <= 'Z' ? (uint8_t)(c + 32) : c; }

/* Length of `'s|'t|'re|'ve|'m|'ll|'d` at s[j] (0 if none). Case-insensitively, as Rust's regex does
 * (Unicode simple case folding), `s` also matches U+017F LATIN SMALL LETTER LONG S. */
static inline size_t contraction_len(const uint8_t *s, size_t n, size_t j, int icase) {
    if (j + 1 >= n || s[j] != '\'') return 0;
    uint8_t c = icase ? ascii_lower(s[j + 1]) : s[j + 1];
    if (c == 's' || c == 't' || c == 'm' || c == 'd') return 2;
    if (icase && c == 0xC5 && j + 2 < n && s[j + 2] == 0xBF) return 3; /* 'ſ */
    if (j + 2 < n) {
        uint8_t d = icase ? ascii_lower(s[j + 2]) : s[j + 2];
        if ((c == 'r' && d == 'e') || (c == 'v' && d == 'e') || (c == 'l' && d == 'l')) return 3;
    }
    return 0;
}

/* o200k's first letter alternative after the optional prefix, from p: U* W+ C? (U, W = r->upper,
 * r->lower; Lm, Lo and M are in both). Returns the end, or 0 if it does not match. Backtracking:
 * U* takes the whole U run; if a W character follows, W+ takes the W run from there; otherwise U*
 * gives back characters until one in W is left for W+, i.e. the match ends after the last W
 * character inside the U run (none: no match). */
static inline size_t o200k_lower_word(const PatRules *r, const uint8_t *s, size_t n, size_t p) {
    size_t q = p, last_w = 0;
    while (q < n) {
        int len, c = cat_at(s, n, q, &len);
        if (!(CM(c) & r->upper)) break;
        q += (size_t)len;
        if (CM(c) & r->lower) last_w = q;
    }
    size_t e;
    int len;
    if (q < n && (CM(cat_at(s, n, q, &len)) & r->lower)) e = cat_run(s, n, q, r->lower);
    else if (last_w) e = last_w;
    else return 0;
    return e + contraction_len(s, n, e, r->icase);
}

/* o200k's second letter alternative from p: U+ W* C?. Returns the end, or 0. */
static inline size_t o200k_upper_word(const PatRules *r, const uint8_t *s, size_t n, size_t p) {
    size_t q = cat_run(s, n, p, r->upper);
    if (q == p) return 0;
    size_t e = cat_run(s, n, q, r->lower);
    return e + contraction_len(s, n, e, r->icase);
}

/* The end of the pre-token at i (< n) under cl100k's or o200k's rules. */
static inline size_t tik_pretoken_end(const PatRules *r, const uint8_t *s, size_t n, size_t i) {
    int l0;
    int c0 = cat_at(s, n, i, &l0);
    /* [^\r\n\p{L}\p{N}]: not a letter, number, CR or LF (spaces, punctuation, marks) */
    int prefix = !(CM(c0) & (M_LETTER | CM(CAT_N))) && s[i] != '\r' && s[i] != '\n' && i + (size_t)l0 < n;
    if (r->o200k) {
        /* alternative 1 with the prefix, then without; then alternative 2 likewise */
        size_t e;
        if (prefix && (e = o200k_lower_word(r, s, n, i + (size_t)l0))) return e;
        if ((e = o200k_lower_word(r, s, n, i))) return e;
        if (prefix && (e = o200k_upper_word(r, s, n, i + (size_t)l0))) return e;
        if ((e = o200k_upper_word(r, s, n, i))) return e;
    } else {
        size_t k;
        if (s[i] == '\'' && (k = contraction_len(s, n, i, r->icase))) return i + k;
        if (CM(c0) & M_LETTER) return cat_run(s, n, i, M_LETTER);
        int l1;
        if (prefix && (CM(cat_at(s, n, i + (size_t)l0, &l1)) & M_LETTER)) return cat_run(s, n, i + (size_t)l0, M_LETTER);
    }
    /* \p{N}{1,3} */
    if (c0 == CAT_N) {
        size_t j = i + (size_t)l0;
        for (int d = 1; d < r->max_digits && j < n; d++) {
            int len;
            if (cat_at(s, n, j, &len) != CAT_N) break;
            j += (size_t)len;
        }
        return j;
    }
    /* ` ?[^\s\p{L}\p{N}]+[\r\n]*` (o200k: `[\r\n/]*`; a '/' is already in the punctuation run) */
    size_t j = 0;
    int l1;
    if (s[i] == ' ' && i + 1 < n && (CM(cat_at(s, n, i + 1, &l1)) & M_PUNCT)) j = cat_run(s, n, i + 1, M_PUNCT);
    else if (CM(c0) & M_PUNCT) j = cat_run(s, n, i, M_PUNCT);
    if (j) {
        while (j < n && (s[j] == '\r' || s[j] == '\n' || (r->o200k && s[j] == '/'))) j++;
        return j;
    }
    /* c0 is white space. `\s*[\r\n]+`: \s* gives back until [\r\n]+ matches, i.e. the match ends
     * after the last CR/LF of the white-space run. Else `\s+(?!\S)|\s+` as for GPT-2. */
    size_t last = i, last_nl = 0;
    int nchars = 0;
    j = i;
    while (j < n) {
        int len;
        if (cat_at(s, n, j, &len) != CAT_WS) break;
        if (s[j] == '\r' || s[j] == '\n') last_nl = j + 1;
        last = j;
        j += (size_t)len;
        nchars++;
    }
    if (last_nl) return last_nl;
    if (j == n || nchars == 1) return j;
    return last;
}

size_t bpe_pretoken_end_pattern(BpePattern p, const uint8_t *s, size_t n, size_t i) {
    static const PatRules digits4_c = {0, 1, 4, 0, 0}, case_c = {0, 0, 3, 0, 0},
                          case_o = {1, 0, 3, M_UPPER, M_LOWER}, digits4_o = {1, 1, 4, M_UPPER, M_LOWER};
    switch (p) {
    case BPE_PATTERN_CL100K:
    case BPE_PATTERN_LLAMA3: return tik_pretoken_end(&RULES_CL100K, s, n, i);
    case BPE_PATTERN_O200K: return tik_pretoken_end(&RULES_O200K, s, n, i);
    case BPE_PATTERN_TEST_CL100K_DIGITS4: return tik_pretoken_end(&digits4_c, s, n, i);
    case BPE_PATTERN_TEST_CL100K_CASE:
    case BPE_PATTERN_TEST_LLAMA3_CASE: return tik_pretoken_end(&case_c, s, n, i);
    case BPE_PATTERN_TEST_O200K_CASE: return tik_pretoken_end(&case_o, s, n, i);
    case BPE_PATTERN_TEST_O200K_DIGITS4: return tik_pretoken_end(&digits4_o, s, n, i);
    default: return bpe_pretoken_end(s, n, i);
    }
}

int bpe_pattern_parse(const char *name, BpePattern *out) {
    static const struct { const char *name; BpePattern p; } tab[] = {
        {"gpt2", BPE_PATTERN_GPT2}, {"cl100k", BPE_PATTERN_CL100K}, {"o200k", BPE_PATTERN_O200K},
        {"llama3", BPE_PATTERN_LLAMA3}};
    for (size_t k = 0; name && k < sizeof tab / sizeof *tab; k++)
        if (!strcmp(name, tab[k].name)) {
            *out = tab[k].p;
            return 0;
        }
    return -1;
}

const char *bpe_pattern_name(BpePattern p) {
    return p == BPE_PATTERN_GPT2     ? "gpt2"
           : p == BPE_PATTERN_CL100K ? "cl100k"
           : p == BPE_PATTERN_O200K  ? "o200k"
           : p == BPE_PATTERN_LLAMA3 ? "llama3"
                                     : "test";
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

enum { KIND_BYTES, KIND_GPT2, KIND_BPE, KIND_TIKTOKEN };

/* Token bytes -> id map (open addressing on XXH3), over t->pool / t->off. */
typedef struct {
    const struct Tokenizer *t;
    uint32_t *slots; /* id + 1, 0 = empty */
    size_t mask;
} BytesMap;

struct Tokenizer {
    int kind;             /* KIND_* */
    BpePattern pattern;   /* pre-tokenizer */
    char name[16];        /* tiktoken encodings: the rank file's pattern name ("cl100k", "o200k"), "llama3" */
    uint32_t vocab;       /* highest id + 1 (holes and special tokens included) */
    uint32_t eot;         /* id that ends a document: <|endoftext|> (llama3: <|end_of_text|>) */
    uint32_t first_special; /* ids >= this that are not holes are special tokens (EOT's id for gpt2,
                               bytes and directory tokenizers; the rank count for tiktoken ones) */
    uint8_t *pool;        /* token bytes, concatenated (a hole has none) */
    size_t *off;          /* [vocab + 1] offsets of each token's bytes in pool */
    uint32_t byte_id[256];/* single-byte token of each byte */
    size_t nmerges;
    uint32_t *merge_pairs;/* [nmerges][3]: a, b, merged id, in rank order (not for tiktoken) */
    MergeMap merges;      /* (a, b) -> (rank, merged id) */
    BytesMap pieces;      /* tiktoken: ordinary token bytes -> id, for whole pre-tokens */
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
    free(t->pieces.slots);
    free(t);
}

/* tokenizer_hash (docs/tokenizer.md §1): gpt2-pattern tokenizers keep the v1 layout (existing shards
 * stay valid); another pattern appends its name; tiktoken encodings use their own tag. */
static void compute_hash(Tokenizer *t) {
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    const char tag[] = "scaletrain-tokenizer-v1", ttag[] = "scaletrain-tokenizer-tiktoken-v1";
    if (t->kind == KIND_TIKTOKEN) XXH3_64bits_update(&st, ttag, sizeof ttag - 1);
    else XXH3_64bits_update(&st, tag, sizeof tag - 1);
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
    if (t->pattern != BPE_PATTERN_GPT2) {
        const char *pn = bpe_pattern_name(t->pattern);
        PUT32(strlen(pn));
        XXH3_64bits_update(&st, pn, strlen(pn));
    }
#undef PUT32
    t->hash = XXH3_64bits_digest(&st);
}

static Status load_bytes(Tokenizer **out, Err *err) {
    Tokenizer *t = calloc(1, sizeof *t);
    if (!t) return err_set(err, ST_ERR_RUNTIME, "out of memory loading the byte tokenizer");
    t->kind = KIND_BYTES;
    t->vocab = 257;
    t->eot = 256;
    t->first_special = 256;
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

/* Reads a whole file (NUL-terminated). A directory is refused by name (fopen opens one, and its
 * read failed as a bare "read error"). */
static Status slurp(const char *path, char **buf, size_t *len, Err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return err_set(err, ST_ERR_INPUT, "%s: cannot open (%s)", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && S_ISDIR(sb.st_mode)) {
        fclose(f);
        return err_set(err, ST_ERR_INPUT, "%s: expected a file, found a directory", path);
    }
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
    int bad = ferror(f), e = errno;
    fclose(f);
    if (bad) {
        free(b);
        return err_set(err, ST_ERR_INPUT, "%s: read error (%s)", path, strerror(e));
    }
    b[n] = 0;
    *buf = b;
    *len = n;
    return ST_OK;
}

static inline uint32_t bytesmap_find(const BytesMap *m, const uint8_t *b, size_t n) {
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
    t->first_special = t->eot;
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

/* ---- rank files (docs/tokenizer.md §3b) ---------------------------------------------------- */

/* The pat_str each pattern implements, verbatim from tiktoken 1.0.22: a rank file naming a pattern
 * must carry exactly this string, so a file made for another regex is refused, not mis-encoded. */
static const char PAT_CL100K[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char PAT_O200K[] =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* Llama 3's pat_str, verbatim from Meta's tokenizer.py: character for character the string above (the
 * pat_str of cl100k_base in npm tiktoken 1.0.22; Python tiktoken's newer cl100k string with possessive
 * quantifiers, `\s++$` and `\s*[\r\n]` matches the same pre-tokens), so the same rules implement it.
 * It is kept as its own constant because it is Meta's, not OpenAI's: if one changes, the other does not. */
static const char PAT_LLAMA3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static uint64_t fnv1a64(const uint8_t *b, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}

static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Fills m with ids [0, count) of t that have bytes and are not special (id >= nordinary). */
static int bytesmap_build(BytesMap *m, const Tokenizer *t, uint32_t nordinary) {
    size_t cap = 16;
    while (cap < 2 * (size_t)nordinary) cap <<= 1;
    m->t = t;
    m->mask = cap - 1;
    m->slots = calloc(cap, sizeof *m->slots);
    if (!m->slots) return -1;
    for (uint32_t id = 0; id < nordinary; id++) {
        const uint8_t *b = t->pool + t->off[id];
        size_t n = t->off[id + 1] - t->off[id], h = XXH3_64bits(b, n) & m->mask;
        if (n == 0) continue;
        while (m->slots[h]) h = (h + 1) & m->mask;
        m->slots[h] = id + 1;
    }
    return 0;
}

/* The common end of loading a rank set (a rank file or tokenizer.model): t->pool / t->off hold ranks
 * 0..nranks-1 then the special tokens. Checks that ranks are non-empty and distinct and that every
 * byte is a token, builds the whole-pre-token map and the merge table, computes the hash. Errors name
 * `path`. */
static Status ranks_finish(Tokenizer *t, const char *path, uint32_t nranks, Err *err) {
    Status st = ST_OK;
    uint32_t *pairs = NULL;
    for (uint32_t r = 0; r < nranks; r++)
        if (t->off[r + 1] == t->off[r]) {
            st = err_set(err, ST_ERR_INPUT, "%s: expected non-empty tokens, found rank %u empty", path, r);
            goto done;
        }
    if (bytesmap_build(&t->pieces, t, nranks)) goto oom;
    for (uint32_t r = 0; r < nranks; r++)
        if (bytesmap_find(&t->pieces, t->pool + t->off[r], t->off[r + 1] - t->off[r]) != r) {
            st = err_set(err, ST_ERR_INPUT, "%s: expected distinct tokens, found rank %u repeating an earlier one", path, r);
            goto done;
        }
    for (int c = 0; c < 256; c++) {
        uint8_t by = (uint8_t)c;
        if ((t->byte_id[c] = bytesmap_find(&t->pieces, &by, 1)) == UINT32_MAX) {
            st = err_set(err, ST_ERR_INPUT, "%s: expected a token for every byte, found none for 0x%02X", path, c);
            goto done;
        }
    }
    /* tiktoken merges two adjacent parts when their concatenation is a token, lowest rank first:
     * the same as merging id pairs (a, b) -> token a+b at rank(a+b), for every split of every token
     * into two tokens. Collected first, then put into a table of the right size. */
    size_t np = 0, cp = 1 << 16;
    pairs = malloc(cp * 3 * sizeof *pairs);
    if (!pairs) goto oom;
    for (uint32_t r = 0; r < nranks; r++) {
        const uint8_t *tb = t->pool + t->off[r];
        size_t l = t->off[r + 1] - t->off[r];
        for (size_t k = 1; k < l; k++) {
            uint32_t a = bytesmap_find(&t->pieces, tb, k), c = a == UINT32_MAX ? a : bytesmap_find(&t->pieces, tb + k, l - k);
            if (c == UINT32_MAX) continue;
            if (np == cp) {
                uint32_t *q = realloc(pairs, 2 * cp * 3 * sizeof *pairs);
                if (!q) goto oom;
                pairs = q;
                cp *= 2;
            }
            pairs[3 * np] = a, pairs[3 * np + 1] = c, pairs[3 * np + 2] = r;
            np++;
        }
    }
    if (mergemap_init(&t->merges, np)) goto oom;
    for (size_t k = 0; k < np; k++)
        mergemap_put(&t->merges, (uint64_t)pairs[3 * k] << 32 | pairs[3 * k + 1], (uint64_t)pairs[3 * k + 2] << 32 | pairs[3 * k + 2]);
    compute_hash(t);
    goto done;
oom:
    st = err_set(err, ST_ERR_RUNTIME, "%s: out of memory loading the rank file", path);
done:
    free(pairs);
    return st;
}

Status tokenizer_load_ranks(Tokenizer **out, const char *path, BpePattern pattern, Err *err) {
    *out = NULL;
    char *buf = NULL;
    size_t n = 0;
    Tokenizer *t = NULL;
    Status st = slurp(path, &buf, &n, err);
    if (st) return st;
    const uint8_t *b = (const uint8_t *)buf;
    /* header: magic, R, S, name, pat_str */
    if (n < 8 || memcmp(b, "STTIKRK1", 8) != 0) {
        st = err_set(err, ST_ERR_INPUT, "%s: expected a rank file (magic STTIKRK1), found %s", path,
                     n < 8 ? "a file shorter than the magic" : "other bytes");
        goto done;
    }
    if (n < 20 + 8) { /* the size field itself may be missing: no size to quote */
        st = err_set(err, ST_ERR_INPUT, "%s: expected a rank file of at least 28 bytes (header and checksum), found %zu "
                     "bytes: truncated", path, n);
        goto done;
    }
    if (rd32(b + 8) != n) {
        st = err_set(err, ST_ERR_INPUT, "%s: expected a file of %u bytes (its header), found %zu bytes: truncated or extended",
                     path, rd32(b + 8), n);
        goto done;
    }
    uint64_t stored = (uint64_t)rd32(b + n - 8) | (uint64_t)rd32(b + n - 4) << 32, sum = fnv1a64(b, n - 8);
    if (stored != sum) {
        st = err_set(err, ST_ERR_INPUT, "%s: expected checksum 0x%016llx (FNV-1a-64 of the first %zu bytes), found "
                     "0x%016llx: the file is corrupt", path, (unsigned long long)stored, n - 8, (unsigned long long)sum);
        goto done;
    }
    size_t end = n - 8, pos;
    uint32_t nranks = rd32(b + 12), nspecial = rd32(b + 16);
    pos = 20;
    char name[16] = "", pat[1024] = "";
    for (int k = 0; k < 2; k++) {
        if (pos + 4 > end) goto truncated;
        uint32_t l = rd32(b + pos);
        pos += 4;
        if (l >= (k ? sizeof pat : sizeof name) || pos + l > end) {
            st = err_set(err, ST_ERR_INPUT, "%s: expected a %s of at most %zu bytes, found a length of %u", path,
                         k ? "pat_str" : "pattern name", (k ? sizeof pat : sizeof name) - 1, l);
            goto done;
        }
        memcpy(k ? pat : name, b + pos, l);
        pos += l;
    }
    BpePattern fp;
    if (bpe_pattern_parse(name, &fp) || fp == BPE_PATTERN_GPT2) {
        st = err_set(err, ST_ERR_INPUT, "%s: expected pattern cl100k, o200k or llama3, found \"%s\"", path, name);
        goto done;
    }
    const char *impl = fp == BPE_PATTERN_O200K ? PAT_O200K : fp == BPE_PATTERN_LLAMA3 ? PAT_LLAMA3 : PAT_CL100K;
    if (strcmp(pat, impl) != 0) {
        st = err_set(err, ST_ERR_INPUT, "%s: expected %s's pat_str \"%s\", found \"%.200s\"", path, name, impl, pat);
        goto done;
    }
    if (nranks < 256 || nranks > (1u << 24) || nspecial > 1024) {
        st = err_set(err, ST_ERR_INPUT, "%s: expected 256..16777216 ranks and at most 1024 special tokens, found %u and %u",
                     path, nranks, nspecial);
        goto done;
    }
    /* pass 1: lengths, vocabulary size */
    size_t rpos = pos, total = 0;
    for (uint32_t r = 0; r < nranks; r++) {
        if (pos >= end || pos + 1 + b[pos] > end) goto truncated;
        total += b[pos];
        pos += 1 + (size_t)b[pos];
    }
    uint32_t vocab = nranks, eot = UINT32_MAX, prev = 0;
    for (uint32_t k = 0; k < nspecial; k++) {
        if (pos + 5 > end || pos + 5 + b[pos + 4] > end) goto truncated;
        uint32_t id = rd32(b + pos), l = b[pos + 4];
        /* increasing ids, each above the previous one (the first special's id only was compared:
         * 100, 102, 101 passed, and so did a repeated later id) */
        if (id < nranks || id >= (1u << 25) || (k && id <= prev)) {
            st = err_set(err, ST_ERR_INPUT, "%s: special token %u: expected an id above the ranks (>= %u) and not repeated, "
                         "found %u", path, k, nranks, id);
            goto done;
        }
        prev = id;
        if (l == sizeof EOT_TEXT - 1 && !memcmp(b + pos + 5, EOT_TEXT, l)) eot = id;
        if (id + 1 > vocab) vocab = id + 1;
        total += l;
        pos += 5 + l;
    }
    if (pos != end) {
        st = err_set(err, ST_ERR_INPUT, "%s: expected %zu bytes of records, found %zu", path, pos - rpos, end - rpos);
        goto done;
    }
    if (eot == UINT32_MAX) {
        st = err_set(err, ST_ERR_INPUT, "%s: expected a special token \"%s\", found none", path, EOT_TEXT);
        goto done;
    }
    t = calloc(1, sizeof *t);
    if (!t) goto oom;
    t->kind = KIND_TIKTOKEN;
    t->pattern = pattern == BPE_PATTERN_FILE ? fp : pattern;
    snprintf(t->name, sizeof t->name, "%s", name);
    t->vocab = vocab;
    t->eot = eot;
    t->off = calloc((size_t)vocab + 1, sizeof *t->off);
    t->pool = malloc(total + 1);
    if (!t->off || !t->pool) goto oom;
    /* pass 2: bytes into the pool in id order (holes: empty) */
    size_t o = 0;
    pos = rpos;
    for (uint32_t r = 0; r < nranks; r++) {
        t->off[r] = o;
        memcpy(t->pool + o, b + pos + 1, b[pos]);
        o += b[pos];
        pos += 1 + (size_t)b[pos];
    }
    uint32_t id = nranks;
    for (uint32_t k = 0; k < nspecial; k++) {
        uint32_t sid = rd32(b + pos), l = b[pos + 4];
        for (; id <= sid; id++) t->off[id] = o;
        memcpy(t->pool + o, b + pos + 5, l);
        o += l;
        pos += 5 + l;
    }
    t->off[vocab] = o;
    t->first_special = nranks;
    if ((st = ranks_finish(t, path, nranks, err))) goto done;
    *out = t;
    t = NULL;
    st = ST_OK;
    goto done;
truncated:
    st = err_set(err, ST_ERR_INPUT, "%s: expected the records the header announces, found a truncated file of %zu bytes", path, n);
    goto done;
oom:
    st = err_set(err, ST_ERR_RUNTIME, "%s: out of memory loading the rank file", path);
done:
    free(buf);
    tokenizer_free(t);
    return st;
}

/* ---- Meta's Llama 3 tokenizer.model (docs/tokenizer.md §3c) ------------------------------ */

enum { LLAMA3_RANKS = 128000, LLAMA3_SPECIALS = 256 };

/* The names of Meta's special tokens 128000..128011, in id order, as in Meta's llama-models
 * models/llama3/tokenizer.py (Llama 3.1 and later; Llama 3.0 called 128004, 128005, 128008, 128010
 * and 128011 <|reserved_special_token_2..6|>). Ids 128012..128255 are <|reserved_special_token_2|> ..
 * <|reserved_special_token_245|>. */
static const char *const LLAMA3_NAMED[] = {
    "<|begin_of_text|>",   "<|end_of_text|>",        "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
    "<|finetune_right_pad_id|>", "<|step_id|>",     "<|start_header_id|>",          "<|end_header_id|>",
    "<|eom_id|>",          "<|eot_id|>",             "<|python_tag|>",               "<|image|>",
};
enum { LLAMA3_NNAMED = sizeof LLAMA3_NAMED / sizeof *LLAMA3_NAMED };

/* The text of Llama 3 special token k (id 128000 + k) into buf (>= 40 bytes); returns its length. */
static size_t llama3_special_text(uint32_t k, char *buf, size_t cap) {
    if (k < LLAMA3_NNAMED) return (size_t)snprintf(buf, cap, "%s", LLAMA3_NAMED[k]);
    return (size_t)snprintf(buf, cap, "<|reserved_special_token_%u|>", k - LLAMA3_NNAMED + 2);
}

/* The value of each base64 character (RFC 4648 alphabet), -1 for any other byte. */
static void base64_table(int8_t v[256]) {
    static const char alpha[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    memset(v, -1, 256);
    for (int k = 0; k < 64; k++) v[(uint8_t)alpha[k]] = (int8_t)k;
}

/* Standard base64 ('=' padding, length a multiple of 4) of s[0..n) into out, v from base64_table;
 * returns the decoded length, or -1 if s is not such a string. */
static long base64_decode(const int8_t v[256], const uint8_t *s, size_t n, uint8_t *out) {
    if (n == 0 || n % 4) return -1;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int pad = (s[i + 3] == '=') + (s[i + 2] == '=' && s[i + 3] == '=');
        if (pad && i + 4 != n) return -1;
        int a = v[s[i]], b = v[s[i + 1]], c = pad >= 2 ? 0 : v[s[i + 2]], d = pad >= 1 ? 0 : v[s[i + 3]];
        if (a < 0 || b < 0 || c < 0 || d < 0) return -1;
        uint32_t w = (uint32_t)a << 18 | (uint32_t)b << 12 | (uint32_t)c << 6 | (uint32_t)d;
        out[o++] = (uint8_t)(w >> 16);
        if (pad < 2) out[o++] = (uint8_t)(w >> 8);
        if (pad < 1) out[o++] = (uint8_t)w;
    }
    return (long)o;
}

Status tokenizer_load_llama3(Tokenizer **out, const char *path, BpePattern pattern, Err *err) {
    *out = NULL;
    char *buf = NULL;
    size_t n = 0;
    Tokenizer *t = NULL;
    Status st = slurp(path, &buf, &n, err);
    if (st) return st;
    const uint8_t *b = (const uint8_t *)buf;
    /* lines: LF-terminated (the last one may lack its LF); count them first */
    size_t nlines = 0;
    for (size_t i = 0; i < n; i++) nlines += b[i] == '\n';
    if (n && b[n - 1] != '\n') nlines++;
    if (nlines != LLAMA3_RANKS) {
        st = err_set(err, ST_ERR_INPUT, "%s: expected %u lines `base64(token) rank` (Meta's Llama 3 tokenizer.model), "
                     "found %zu lines", path, LLAMA3_RANKS, nlines);
        goto done;
    }
    t = calloc(1, sizeof *t);
    if (!t) goto oom;
    t->kind = KIND_TIKTOKEN;
    t->pattern = pattern == BPE_PATTERN_FILE ? BPE_PATTERN_LLAMA3 : pattern;
    snprintf(t->name, sizeof t->name, "llama3");
    t->vocab = LLAMA3_RANKS + LLAMA3_SPECIALS;
    t->eot = LLAMA3_RANKS + 1; /* <|end_of_text|> */
    t->first_special = LLAMA3_RANKS;
    t->off = calloc((size_t)t->vocab + 1, sizeof *t->off);
    t->pool = malloc(n + 64 * LLAMA3_SPECIALS); /* decoded tokens are shorter than their base64 */
    if (!t->off || !t->pool) goto oom;
    int8_t b64[256];
    base64_table(b64);
    size_t pos = 0, o = 0;
    for (uint32_t line = 0; line < LLAMA3_RANKS; line++) {
        size_t e = pos, sp = SIZE_MAX;
        while (e < n && b[e] != '\n') {
            if (b[e] == ' ' && sp == SIZE_MAX) sp = e;
            e++;
        }
        if (e > pos && b[e - 1] == '\r') {
            st = err_set(err, ST_ERR_INPUT, "%s:%u: expected lines ending in LF, found CR LF", path, line + 1);
            goto done;
        }
        if (sp == SIZE_MAX || sp == pos || sp + 1 == e) {
            st = err_set(err, ST_ERR_INPUT, "%s:%u: expected `base64(token) rank`, found \"%.*s\"", path, line + 1,
                         (int)(e - pos > 60 ? 60 : e - pos), (const char *)(b + pos));
            goto done;
        }
        long l = base64_decode(b64, b + pos, sp - pos, t->pool + o);
        if (l <= 0) {
            st = err_set(err, ST_ERR_INPUT, "%s:%u: expected the token's bytes in base64, found \"%.*s\"", path, line + 1,
                         (int)(sp - pos > 60 ? 60 : sp - pos), (const char *)(b + pos));
            goto done;
        }
        unsigned long rank = 0;
        int ok = e - (sp + 1) <= 9;
        for (size_t k = sp + 1; ok && k < e; k++) {
            if (b[k] < '0' || b[k] > '9') ok = 0;
            else rank = rank * 10 + (unsigned long)(b[k] - '0');
        }
        if (!ok || rank != line) {
            st = err_set(err, ST_ERR_INPUT, "%s:%u: expected rank %u (ranks in order from 0), found \"%.*s\"", path, line + 1,
                         line, (int)(e - sp - 1 > 20 ? 20 : e - sp - 1), (const char *)(b + sp + 1));
            goto done;
        }
        t->off[line] = o;
        o += (size_t)l;
        pos = e + 1;
    }
    for (uint32_t k = 0; k < LLAMA3_SPECIALS; k++) {
        t->off[LLAMA3_RANKS + k] = o;
        o += llama3_special_text(k, (char *)t->pool + o, 64);
    }
    t->off[t->vocab] = o;
    if ((st = ranks_finish(t, path, LLAMA3_RANKS, err))) goto done;
    *out = t;
    t = NULL;
    goto done;
oom:
    st = err_set(err, ST_ERR_RUNTIME, "%s: out of memory loading the Llama 3 tokenizer", path);
done:
    free(buf);
    tokenizer_free(t);
    return st;
}

int tokenizer_special_id(const Tokenizer *t, const char *text, uint32_t *id) {
    size_t n = strlen(text);
    for (uint32_t k = t->first_special; k < t->vocab; k++) {
        size_t l = t->off[k + 1] - t->off[k];
        if (l == n && l && !memcmp(t->pool + t->off[k], text, n)) {
            *id = k;
            return 0;
        }
    }
    return -1;
}

uint32_t tokenizer_special_count(const Tokenizer *t) {
    uint32_t c = 0;
    for (uint32_t k = t->first_special; k < t->vocab; k++) c += t->off[k + 1] != t->off[k];
    return c;
}

uint32_t tokenizer_special_at(const Tokenizer *t, uint32_t k) {
    for (uint32_t id = t->first_special; id < t->vocab; id++)
        if (t->off[id + 1] != t->off[id] && k-- == 0) return id;
    ST_CHECK(!"tokenizer_special_at: k >= tokenizer_special_count");
    return UINT32_MAX;
}

long tokenizer_named_eot(const char *spec) {
    static const struct { const char *name; long eot; } tab[] = {{"gpt2", 50256}, {"cl100k", 100257}, {"o200k", 199999},
                                                                 {"llama3", LLAMA3_RANKS + 1}, {"bytes", 256}};
    for (size_t k = 0; spec && k < sizeof tab / sizeof *tab; k++)
        if (!strcmp(spec, tab[k].name)) return tab[k].eot;
    return -1;
}

long tokenizer_named_bos(const char *spec) {
    if (spec && !strcmp(spec, "llama3")) return LLAMA3_RANKS; /* <|begin_of_text|> */
    return tokenizer_named_eot(spec);
}

const char *tokenizer_data_subdir(const char *spec) {
    if (!spec) return NULL;
    if (!strcmp(spec, "gpt2")) return "gpt2_tokenizer";
    if (!strcmp(spec, "cl100k") || !strcmp(spec, "o200k")) return "tokenizers";
    if (!strcmp(spec, "llama3")) return "tokenizers/llama3";
    return NULL;
}

/* DIR/pattern of a trained tokenizer: absent = gpt2; else one pattern name (a trailing newline allowed). */
static Status read_pattern_file(const char *dir, BpePattern *p, Err *err) {
    char path[2048], *buf = NULL;
    size_t n;
    snprintf(path, sizeof path, "%s/pattern", dir);
    *p = BPE_PATTERN_GPT2;
    struct stat sb;
    if (stat(path, &sb) != 0) return ST_OK;
    Status st = slurp(path, &buf, &n, err);
    if (st) return st;
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) buf[--n] = 0;
    if (bpe_pattern_parse(buf, p))
        st = err_set(err, ST_ERR_INPUT, "%s: expected gpt2, cl100k, o200k or llama3, found \"%.40s\"", path, buf);
    free(buf);
    return st;
}

/* DIR/BPE_FILES_STAMP, where `tokenizer train` wrote one: each file it names must hash as recorded
 * ("none": the file absent). No stamp (GPT-2's own files, a hand-made folder): nothing to check. */
static Status check_files_stamp(const char *dir, Err *err) {
    char sp[2048], *text = NULL;
    size_t n;
    snprintf(sp, sizeof sp, "%s/%s", dir, BPE_FILES_STAMP);
    struct stat sb;
    if (stat(sp, &sb) != 0) return ST_OK;
    Status st = slurp(sp, &text, &n, err);
    if (st) return st;
    if (strlen(text) != n) { /* the lines below end at a NUL: what follows it was not read */
        st = err_set(err, ST_ERR_INPUT, "%s: expected text lines, found a NUL byte at offset %zu", sp, strlen(text));
        free(text);
        return st;
    }
    char *save = NULL, *ln = strtok_r(text, "\n", &save);
    if (!ln || strcmp(ln, "scaletrain-tokenizer-files 1")) st = err_set(err, ST_ERR_INPUT, "%s: expected "
                                                                         "\"scaletrain-tokenizer-files 1\" first, found \"%.40s\"", sp, ln ? ln : "");
    /* the three files bpe_train stamps, each once: a line lost or renamed left its file unchecked */
    static const char *const stamped[3] = {"vocab.bpe", "encoder.json", "pattern"};
    int seen[3] = {0, 0, 0};
    while (!st && (ln = strtok_r(NULL, "\n", &save))) {
        char name[64], want[24];
        int k = 0, two = sscanf(ln, "%63s %23s", name, want) == 2;
        while (two && k < 3 && strcmp(name, stamped[k])) k++;
        if (!two || k == 3 || seen[k]++) {
            st = err_set(err, ST_ERR_INPUT, "%s: expected one \"FILE HASH\" line for each of vocab.bpe, encoder.json and "
                         "pattern, found \"%.60s\"", sp, ln);
            break;
        }
        char fp[2200], *buf = NULL, got[24] = "none";
        size_t fl;
        snprintf(fp, sizeof fp, "%s/%s", dir, name);
        if (stat(fp, &sb) == 0) {
            if ((st = slurp(fp, &buf, &fl, err))) break;
            snprintf(got, sizeof got, "%016llx", (unsigned long long)XXH3_64bits(buf, fl));
            free(buf);
        }
        if (strcmp(got, want))
            st = err_set(err, ST_ERR_INPUT, "%s: its %s is not the one `tokenizer train` wrote with the other files "
                         "(XXH3 %s, %s records %s: a training interrupted while it replaced them?); train it again",
                         dir, name, got, BPE_FILES_STAMP, want);
    }
    for (int k = 0; !st && k < 3; k++)
        if (!seen[k])
            st = err_set(err, ST_ERR_INPUT, "%s: expected a \"FILE HASH\" line for %s, found none (a stamp cut short?)",
                         sp, stamped[k]);
    free(text);
    return st;
}

Status tokenizer_load(Tokenizer **out, const char *spec, const char *data_dir, Err *err) {
    *out = NULL;
    if (!spec)
        return err_set(err, ST_ERR_INPUT, "tokenizer: expected gpt2, cl100k, o200k, llama3, bytes, a rank file or a "
                                          "directory, found nothing");
    if (strcmp(spec, "bytes") == 0) return load_bytes(out, err);
    const char *dir = spec;
    char rp[2048];
    if (!strcmp(spec, "cl100k") || !strcmp(spec, "o200k")) {
        if (!data_dir)
            return err_set(err, ST_ERR_INPUT, "tokenizer %s: expected the directory holding %s_base.tkr, found none "
                                              "(give --tokenizer-dir)", spec, spec);
        snprintf(rp, sizeof rp, "%s/%s_base.tkr", data_dir, spec);
        Status st = tokenizer_load_ranks(out, rp, BPE_PATTERN_FILE, err);
        if (!st && strcmp((*out)->name, spec)) {
            st = err_set(err, ST_ERR_INPUT, "%s: expected the %s encoding, found %s", rp, spec, (*out)->name);
            tokenizer_free(*out);
            *out = NULL;
        }
        return st;
    }
    if (!strcmp(spec, "llama3")) {
        if (!data_dir)
            return err_set(err, ST_ERR_INPUT, "tokenizer llama3: expected the directory holding Meta's tokenizer.model, "
                                              "found none (give --tokenizer-dir)");
        snprintf(rp, sizeof rp, "%s/tokenizer.model", data_dir);
        return tokenizer_load_llama3(out, rp, BPE_PATTERN_FILE, err);
    }
    if (!strcmp(spec, "gpt2")) {
        if (!data_dir)
            return err_set(err, ST_ERR_INPUT, "tokenizer gpt2: expected a directory with encoder.json and vocab.bpe, "
                                              "found none (give --tokenizer-dir)");
        dir = data_dir;
    }
    struct stat sb;
    if (stat(dir, &sb) == 0 && S_ISREG(sb.st_mode)) return tokenizer_load_ranks(out, dir, BPE_PATTERN_FILE, err);
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return err_set(err, ST_ERR_INPUT,
                       "tokenizer %s: expected gpt2, cl100k, o200k, llama3, bytes, a rank file or a directory with "
                       "encoder.json and vocab.bpe, found %s", dir, stat(dir, &sb) != 0 ? "no such file or directory" : "neither");
    BpePattern pat;
    Status st = check_files_stamp(dir, err);
    if (!st) st = read_pattern_file(dir, &pat, err);
    if (st) return st;
    /* Meta's tokenizer.model with a `pattern` file reading llama3 (what fetch-llama3-tokenizer.sh writes);
     * a directory trained with --pattern llama3 has encoder.json and no tokenizer.model */
    char mp[2048], ep[2048], bp[2048];
    snprintf(mp, sizeof mp, "%s/tokenizer.model", dir);
    snprintf(ep, sizeof ep, "%s/encoder.json", dir);
    if (pat == BPE_PATTERN_LLAMA3 && (stat(mp, &sb) == 0 || stat(ep, &sb) != 0))
        return tokenizer_load_llama3(out, mp, BPE_PATTERN_FILE, err);
    snprintf(bp, sizeof bp, "%s/vocab.bpe", dir);
    st = tokenizer_load_files(out, ep, bp, err);
    if (!st && pat != BPE_PATTERN_GPT2) {
        (*out)->pattern = pat;
        (*out)->kind = KIND_BPE;
        compute_hash(*out);
    }
    return st;
}

uint32_t tokenizer_vocab_size(const Tokenizer *t) { return t->vocab; }
uint32_t tokenizer_eot(const Tokenizer *t) { return t->eot; }
uint64_t tokenizer_hash(const Tokenizer *t) { return t->hash; }
const char *tokenizer_kind(const Tokenizer *t) {
    if (t->kind == KIND_TIKTOKEN)
        return t->pattern == BPE_PATTERN_CL100K && !strcmp(t->name, "cl100k") ? "cl100k"
               : t->pattern == BPE_PATTERN_O200K && !strcmp(t->name, "o200k") ? "o200k"
               : t->pattern == BPE_PATTERN_LLAMA3 && !strcmp(t->name, "llama3") ? "llama3" : "tiktoken";
    return t->kind == KIND_BYTES ? "bytes" : t->kind == KIND_GPT2 ? "gpt2" : "bpe";
}
BpePattern tokenizer_pattern(const Tokenizer *t) { return t->pattern; }
size_t tokenizer_merge_count(const Tokenizer *t) { return t->nmerges; }
uint32_t tokenizer_merge(const Tokenizer *t, size_t rank, uint32_t *a, uint32_t *b) {
    ST_CHECK(rank < t->nmerges);
    const uint32_t *mp = t->merge_pairs + 3 * rank;
    *a = mp[0];
    *b = mp[1];
    return mp[2];
}

const uint8_t *tokenizer_token_bytes(const Tokenizer *t, uint32_t id, size_t *len) {
    if (id >= t->vocab || t->off[id + 1] == t->off[id]) return NULL;
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
    int whole = t->kind == KIND_TIKTOKEN;
    BpePattern pat = t->pattern;
    while (i < n) {
        /* the common patterns inline (their rules are constants there) */
        size_t j = pat == BPE_PATTERN_GPT2     ? bpe_pretoken_end(text, n, i)
                   : pat == BPE_PATTERN_CL100K || pat == BPE_PATTERN_LLAMA3 ? tik_pretoken_end(&RULES_CL100K, text, n, i)
                   : pat == BPE_PATTERN_O200K  ? tik_pretoken_end(&RULES_O200K, text, n, i)
                                               : bpe_pretoken_end_pattern(pat, text, n, i);
        if (ids_reserve(ids, cap, *nids + (j - i))) {
            scratch_free(&sc);
            return err_set(err, ST_ERR_RUNTIME, "out of memory encoding %zu bytes", n);
        }
        /* tiktoken: a pre-token that is itself a token is that token, before any merging */
        uint32_t id = whole && j - i > 1 ? bytesmap_find(&t->pieces, text + i, j - i) : UINT32_MAX;
        if (id != UINT32_MAX) (*ids)[(*nids)++] = id;
        else *nids += bpe_piece(t, text + i, j - i, *ids + *nids, &sc);
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
        if (l == 0)
            return err_set(err, ST_ERR_INPUT, "token %zu: expected an id of a token, found %u, a hole of the %s vocabulary",
                           i, ids[i], tokenizer_kind(t));
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
