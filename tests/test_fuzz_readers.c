/* test_fuzz_readers.c — every reader of untrusted file input under a seeded mutation campaign
 * (the deterministic replay of the libFuzzer targets of tests/fuzz/, which share its harness:
 * tests/fuzz/fuzz_readers.c; longer campaigns: bench/fuzz.sh).
 *
 * For each reader: its seed (a file the project's writers produce, or the repository ships), then a
 * fixed set of mutations from a seeded xorshift: bit flips, bytes set to 0, 0xff or a random value,
 * 32-bit header words set to 0, 1, -1, INT_MAX, INT_MIN and their neighbours, truncations at many
 * lengths (every length through a binary header), chunks duplicated and deleted, several changes at
 * once, and in JSON (also a safetensors header, its length rewritten) and CSV every value replaced
 * by -1, 0, a huge number, a fraction, another JSON type or an emptied string, keys given a newline.
 *
 * Oracle (the contract of every reader, fuzz_readers.h): each case returns ST_OK, ST_ERR_INPUT or
 * ST_ERR_RUNTIME, and a refusal's message is one non-empty line naming the file; no crash, abort,
 * sanitizer report, leak or hang (a case over 30 s ends the test naming it). And silent acceptance
 * is a failure where the format can tell: a changed byte of a binary header (the reader's strict
 * bytes), a truncated binary or JSON file, a JSON or CSV value replaced by -1, a huge number, a
 * fraction of an integer, another type or an empty string — unless the reader declares the key
 * free (fuzz_readers.c, each with its reason). A changed JSON white space is never judged, nor a
 * value mutation that loads exactly what the seed loads (the reader does not use that value there,
 * or another member says the same; not for "format" and "version"), nor a cut a fixup restored.
 *
 * Cost (2026-11-29, 2-core VM at load 2): about 13 s in the release tree, 23 s under
 * ASan + UBSan. GCC's -fsanitize=undefined has no float-cast-overflow: a huge JSON number cast to an
 * integer is caught by bench/fuzz.sh's clang build, not here (two named cases replay such inputs).
 *
 * Controls: every seed loads (twice, to the same digest) and every reader refuses at least one case
 * (a mutation engine that never reached the parser, or a seed that is refused, fails); lax
 * "readers" (an empty message, two lines, a message naming no file, a status that is not one, a
 * reader that accepts a changed header byte, a truncation, a value of -1) must each be flagged by
 * the same checking code; every reader has a libFuzzer target (tests/fuzz/CMakeLists.txt); and one
 * named case per defect these campaigns found, each the minimized input that failed before its fix
 * (the fix's message expected; checked by reverting each fix, 2026-11-29).
 *
 * Usage: test_fuzz_readers [READER|all] [BUDGET_SCALE] [CASE]  (e.g. `test_fuzz_readers llmc 10`; with
 * CASE that case alone, its files left under build/test_fuzz_readers/READER); ST_FUZZ_VERBOSE=1 lists
 * every accepted mutation that loaded something else than the seed, 2 every refusal too. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fuzz/fuzz_readers.h"
#include "testutil.h"

#define WORK ST_BINARY_DIR "/test_fuzz_readers"

static int verbose;
static int only_case = -1; /* argv[3]: run that case alone and leave its files (reproducing one) */

/* ======================================================================================== */
/* Mutations                                                                                 */
/* ======================================================================================== */

static uint64_t rnd(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

/* One case: the mutated bytes and what judging it needs. */
typedef struct {
    uint8_t *buf;
    size_t n;
    char desc[200];    /* e.g. "bitflip@1034.3", "json hidden_size=-1" */
    char judged;       /* JSON/CSV value mutation: 'n' -1, 'h' huge, 'f' fraction, 't' type, 'e' emptied; 0: none */
    char key[96];      /* its key (column for CSV) */
    int strict_hit;    /* a changed strict byte (binary), white space for white space excepted */
    int trunc_judged;  /* a truncation that removed more than white space (binary with strict bytes, JSON) */
} Case;

static int is_ws(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static void case_init(Case *c, const uint8_t *b, size_t n, size_t extra) {
    memset(c, 0, sizeof *c);
    c->buf = malloc(n + extra + 1);
    memcpy(c->buf, b, n);
    c->n = n;
}

/* Sets byte i of the case (a copy of the seed of r) to v, noting a strict byte changed. */
static void set_byte(Case *c, const FzReader *r, size_t i, uint8_t v) {
    uint8_t old = c->buf[i];
    c->buf[i] = v;
    if (old != v && r->strict && i < r->seed_len && r->strict[i] && !(is_ws(old) && is_ws(v))) c->strict_hit = 1;
}

/* A value of a JSON text (or of a CSV table): its byte range, its key, its type. */
typedef struct {
    size_t off, len;
    char key[96];
    char type;  /* 'n' number, 's' string, 'l' literal (true/false/null), 'k' a key's string */
    int is_int; /* a number written without '.', 'e' */
} Val;

/* The values and keys of JSON text t[0, n) (any number of documents: JSON Lines too), in order,
 * each with the last key seen before it (arrays: their key). At most max. */
static int json_values(const uint8_t *t, size_t n, Val *v, int max) {
    int k = 0;
    char key[96] = "";
    for (size_t i = 0; i < n && k < max;) {
        uint8_t c = t[i];
        if (c == '"') {
            size_t j = i + 1;
            while (j < n && t[j] != '"') j += t[j] == '\\' ? 2 : 1;
            if (j >= n) break;
            size_t q = j + 1;
            while (q < n && is_ws(t[q])) q++;
            Val *x = &v[k++];
            x->off = i, x->len = j + 1 - i, x->is_int = 0;
            if (q < n && t[q] == ':') {
                size_t l = j - i - 1 < sizeof key - 1 ? j - i - 1 : sizeof key - 1;
                memcpy(key, t + i + 1, l), key[l] = '\0';
                x->type = 'k';
                snprintf(x->key, sizeof x->key, "%s", key);
            } else {
                x->type = 's';
                snprintf(x->key, sizeof x->key, "%s", key);
            }
            i = j + 1;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            size_t j = i;
            int integer = 1;
            while (j < n && (strchr("+-0123456789.eE", t[j]) && t[j])) integer &= !strchr(".eE", t[j]), j++;
            Val *x = &v[k++];
            x->off = i, x->len = j - i, x->type = 'n', x->is_int = integer;
            snprintf(x->key, sizeof x->key, "%s", key);
            i = j;
        } else if (c == 't' || c == 'f' || c == 'n') {
            size_t j = i;
            while (j < n && t[j] >= 'a' && t[j] <= 'z') j++;
            Val *x = &v[k++];
            x->off = i, x->len = j - i, x->type = 'l', x->is_int = 0;
            snprintf(x->key, sizeof x->key, "%s", key);
            i = j;
        } else {
            i++;
        }
    }
    return k;
}

/* The cells of a CSV table: each cell of every row after the header, keyed by its column's name. */
static int csv_values(const uint8_t *t, size_t n, Val *v, int max) {
    char cols[64][96];
    int ncol = 0, k = 0;
    size_t i = 0;
    for (size_t a = 0; i <= n && ncol < 64; i++)
        if (i == n || t[i] == ',' || t[i] == '\n') {
            size_t l = i - a < 95 ? i - a : 95;
            memcpy(cols[ncol], t + a, l), cols[ncol][l] = '\0';
            ncol++, a = i + 1;
            if (i == n || t[i] == '\n') break;
        }
    int col = 0;
    for (size_t a = ++i; i <= n && k < max; i++)
        if (i == n || t[i] == ',' || t[i] == '\n') {
            if (col < ncol && i > a) {
                Val *x = &v[k++];
                x->off = a, x->len = i - a;
                snprintf(x->key, sizeof x->key, "%s", cols[col]);
                char *end;
                char cell[64];
                size_t l = x->len < 63 ? x->len : 63;
                memcpy(cell, t + a, l), cell[l] = '\0';
                strtod(cell, &end);
                x->type = *end || end == cell ? 's' : 'n';
                x->is_int = x->type == 'n' && !strpbrk(cell, ".eE");
            }
            col = i < n && t[i] == '\n' ? 0 : col + 1;
            a = i + 1;
        }
    return k;
}

/* The replacements of a value, with the kind each is judged as (0: run, not judged). */
typedef struct {
    const char *text;
    char judged;
} Repl;

static const Repl NUM_JSON[] = {{"-1", 'n'}, {"1e300", 'h'}, {"9223372036854775807", 'h'}, {"2.5", 'f'}, {"\"x\"", 't'},
                                {"null", 't'}, {"true", 't'}, {"0", 0}, {"-0", 0}, {"1e-320", 0}, {"[]", 't'}, {"{}", 't'}};
static const Repl STR_JSON[] = {{"\"\"", 'e'}, {"7", 't'}, {"null", 't'}, {"{}", 't'}, {"\"a\\nb\"", 0}, {"\"\\u0000\"", 0},
                                {"\"\\ud800\"", 0}};
static const Repl LIT_JSON[] = {{"\"x\"", 't'}, {"0", 't'}, {"{}", 't'}};
static const Repl KEY_JSON[] = {{"\"\"", 0}, {"\"a\\nb\"", 0}, {"\"a\nb\"", 0}};
static const Repl NUM_CSV[] = {{"-1", 'n'}, {"1e300", 'h'}, {"2.5", 'f'}, {"x", 't'}, {"", 'e'}, {"0", 0}, {"nan", 't'},
                               {"inf", 'h'}, {"1e-320", 0}, {"\"1\"", 0}};
static const Repl STR_CSV[] = {{"", 'e'}, {"7", 0}, {"a\"b", 0}};

/* Replaces value x of the seed by text (a safetensors header: the length word rewritten). */
static void replace_value(Case *c, const FzReader *r, const Val *x, const char *text, size_t base, int st_header) {
    size_t tl = strlen(text), n = r->seed_len - x->len + tl;
    free(c->buf);
    c->buf = malloc(n + 1);
    memcpy(c->buf, r->seed, base + x->off);
    memcpy(c->buf + base + x->off, text, tl);
    memcpy(c->buf + base + x->off + tl, r->seed + base + x->off + x->len, r->seed_len - base - x->off - x->len);
    c->n = n;
    if (st_header) {
        uint64_t hl;
        memcpy(&hl, r->seed, 8);
        hl = hl - x->len + tl;
        memcpy(c->buf, &hl, 8);
    }
}

/* The safetensors header of a binary seed: 1 and its JSON range when r's seed is one. */
static int st_header(const FzReader *r, size_t *base, size_t *len) {
    if (r->seed_len < 10 || r->seed[8] != '{') return 0;
    uint64_t hl;
    memcpy(&hl, r->seed, 8);
    if (hl > r->seed_len - 8) return 0;
    *base = 8, *len = (size_t)hl;
    return 1;
}

typedef struct {
    Val *vals;
    int nvals;
    size_t base;    /* where the JSON text starts in the seed */
    int st;         /* the JSON is a safetensors header */
    int csv;
    size_t *strict_at; /* offsets of strict bytes */
    size_t nstrict;
} Plan;

static void plan_init(Plan *p, const FzReader *r) {
    memset(p, 0, sizeof *p);
    p->vals = calloc(4096, sizeof *p->vals);
    size_t hl;
    if (r->kind == FZ_JSON || (r->kind == FZ_LINES && strcmp(r->name, "fit_csv") && strcmp(r->name, "text") &&
                               strcmp(r->name, "gpt2_merges")))
        p->nvals = json_values(r->seed, r->seed_len, p->vals, 4096);
    else if (!strcmp(r->name, "fit_csv"))
        p->nvals = csv_values(r->seed, r->seed_len, p->vals, 4096), p->csv = 1;
    else if (r->kind == FZ_BINARY && st_header(r, &p->base, &hl))
        p->nvals = json_values(r->seed + 8, hl, p->vals, 4096), p->st = 1;
    if (r->strict) {
        p->strict_at = malloc(r->seed_len * sizeof *p->strict_at);
        for (size_t i = 0; i < r->seed_len; i++)
            if (r->strict[i]) p->strict_at[p->nstrict++] = i;
    }
}

static void plan_free(Plan *p) {
    free(p->vals);
    free(p->strict_at);
}

/* Case number i of reader r: deterministic in (r, i). The first cases walk every value of the JSON
 * (or CSV, or safetensors header) through its replacements while there are; then the mixture. */
static void make_case(const FzReader *r, const Plan *p, int i, uint64_t *s, Case *c) {
    size_t n = r->seed_len;
    case_init(c, r->seed, n, 256);
    /* value mutations: round-robin over (value, replacement) while they last, at most half the cases */
    if (p->nvals && i % 2 == 0) {
        int j = i / 2;
        const Val *x = &p->vals[j % p->nvals];
        int round = j / p->nvals;
        const Repl *set;
        int nset;
        if (p->csv) set = x->type == 'n' ? NUM_CSV : STR_CSV, nset = x->type == 'n' ? 10 : 3;
        else if (x->type == 'n') set = NUM_JSON, nset = (int)(sizeof NUM_JSON / sizeof *NUM_JSON);
        else if (x->type == 's') set = STR_JSON, nset = (int)(sizeof STR_JSON / sizeof *STR_JSON);
        else if (x->type == 'l') set = LIT_JSON, nset = (int)(sizeof LIT_JSON / sizeof *LIT_JSON);
        else set = KEY_JSON, nset = (int)(sizeof KEY_JSON / sizeof *KEY_JSON);
        if (round < nset) {
            const Repl *rp = &set[(round + j / 7) % nset];
            replace_value(c, r, x, rp->text, p->base, p->st);
            /* a fraction judges only an integer, and a huge number only where the seed's is a count */
            c->judged = rp->judged == 'f' && !x->is_int ? 0 : rp->judged;
            snprintf(c->key, sizeof c->key, "%s", x->key);
            snprintf(c->desc, sizeof c->desc, "%s %s=%s", x->type == 'k' ? "key" : "value", x->key, rp->text);
            return;
        }
    }
    uint64_t v = rnd(s);
    int kind = (int)(v % 100);
    size_t at = n ? (size_t)(rnd(s) % n) : 0;
    if (p->nstrict && rnd(s) % 2) at = p->strict_at[rnd(s) % p->nstrict];
    if (n == 0) kind = 99;
    if (kind < 14) { /* one bit */
        int bit = (int)(rnd(s) % 8);
        set_byte(c, r, at, (uint8_t)(c->buf[at] ^ (1u << bit)));
        snprintf(c->desc, sizeof c->desc, "bitflip@%zu.%d", at, bit);
    } else if (kind < 30) { /* one byte set */
        static const uint8_t vals[] = {0x00, 0xff, 0x7f, 0x80, '\n', '"', '{', '}', ',', '-', '9', 0x0a};
        uint8_t b = kind < 24 ? vals[rnd(s) % sizeof vals] : (uint8_t)rnd(s);
        set_byte(c, r, at, b);
        snprintf(c->desc, sizeof c->desc, "set@%zu=0x%02x", at, b);
    } else if (kind < 42 && n >= 4) { /* a 32-bit word */
        size_t w = p->nstrict ? p->strict_at[rnd(s) % p->nstrict] & ~(size_t)3 : at & ~(size_t)3;
        if (w + 4 > n) w = n - 4;
        uint32_t old = (uint32_t)c->buf[w] | (uint32_t)c->buf[w + 1] << 8 | (uint32_t)c->buf[w + 2] << 16 |
                       (uint32_t)c->buf[w + 3] << 24;
        const uint32_t choices[] = {0, 1, 0xffffffffu, 0x7fffffffu, 0x80000000u, old + 1, old - 1, old << 8, old * 2,
                                    old ^ 0x10000u, 255, 1u << 30};
        uint32_t nw = choices[rnd(s) % (sizeof choices / sizeof *choices)];
        for (int k = 0; k < 4; k++) set_byte(c, r, w + (size_t)k, (uint8_t)(nw >> (8 * k)));
        snprintf(c->desc, sizeof c->desc, "word@%zu=0x%08x", w, nw);
    } else if (kind < 60) { /* truncation: every length through the strict bytes first, then anywhere */
        size_t len;
        if (p->nstrict && kind < 52) len = p->strict_at[rnd(s) % p->nstrict];
        else len = (size_t)(rnd(s) % (n + 1));
        if (kind < 44) len = (size_t)(rnd(s) % (n < 64 ? n + 1 : 64));
        int only_ws = 1;
        for (size_t k = len; k < n; k++) only_ws &= is_ws(r->seed[k]);
        c->n = len;
        c->trunc_judged = !only_ws && len < n && ((r->kind == FZ_BINARY && r->strict) || r->kind == FZ_JSON);
        snprintf(c->desc, sizeof c->desc, "truncate@%zu", len);
    } else if (kind < 70) { /* a chunk duplicated in place */
        size_t len = 1 + (size_t)(rnd(s) % (kind < 65 ? 8 : 256));
        if (at + len > n) len = n - at;
        free(c->buf);
        c->buf = malloc(n + len + 1);
        memcpy(c->buf, r->seed, at + len);
        memcpy(c->buf + at + len, r->seed + at, n - at);
        c->n = n + len;
        snprintf(c->desc, sizeof c->desc, "dup@%zu+%zu", at, len);
    } else if (kind < 80) { /* a chunk deleted */
        size_t len = 1 + (size_t)(rnd(s) % (kind < 75 ? 8 : 256));
        if (at + len > n) len = n - at;
        memmove(c->buf + at, c->buf + at + len, n - at - len);
        c->n = n - len;
        snprintf(c->desc, sizeof c->desc, "del@%zu+%zu", at, len);
    } else if (kind < 90) { /* several changes at once */
        int m = 2 + (int)(rnd(s) % 5);
        size_t o = (size_t)snprintf(c->desc, sizeof c->desc, "multi");
        for (int k = 0; k < m; k++) {
            size_t a = (size_t)(rnd(s) % n);
            uint8_t b = (uint8_t)rnd(s);
            c->buf[a] = b;
            if (o < sizeof c->desc) o += (size_t)snprintf(c->desc + o, sizeof c->desc - o, " %zu=0x%02x", a, b);
        }
    } else if (kind < 95 && n > 16) { /* a chunk moved over another place (a swap of structure) */
        size_t len = 1 + (size_t)(rnd(s) % 32), b = (size_t)(rnd(s) % n);
        if (at + len > n) len = n - at;
        if (b + len > n) b = n - len;
        memmove(c->buf + b, r->seed + at, len);
        snprintf(c->desc, sizeof c->desc, "copy %zu+%zu@%zu", at, len, b);
    } else { /* empty, or a tiny prefix of random bytes */
        size_t len = (size_t)(rnd(s) % 12);
        for (size_t k = 0; k < len && k < n; k++) c->buf[k] = (uint8_t)rnd(s);
        c->n = len < n ? len : n;
        snprintf(c->desc, sizeof c->desc, "random prefix of %zu", c->n);
    }
}

/* ======================================================================================== */
/* Judging                                                                                   */
/* ======================================================================================== */

/* key is free for mutation kind j in r's list ("key" or "key/KINDS"). */
static int key_free(const FzReader *r, const char *key, char j, int st_metadata) {
    if (st_metadata) return 1;
    for (const char *const *f = r->free_keys; f && *f; f++) {
        const char *slash = strchr(*f, '/');
        size_t l = slash ? (size_t)(slash - *f) : strlen(*f);
        if (strlen(key) == l && !strncmp(*f, key, l) && (!slash || strchr(slash + 1, j))) return 1;
    }
    return 0;
}

/* The verdict on one result (same: it loaded what the seed loads): 1 holds, 0 fails with why. A
 * value mutation that changed nothing loaded is not judged (the reader does not use that value
 * there, or another member says the same), but for a format's "format" and "version". */
static int judge(const FzReader *r, const Case *c, Status st, const Err *err, int same, char *why, size_t cap) {
    if (!fz_contract(r, st, err, why, cap)) return 0;
    if (st != ST_OK) return 1;
    if (c->strict_hit) return snprintf(why, cap, "accepted a changed header byte (%s)", c->desc), 0;
    /* a fixup (a checksum written anew) may restore what a cut took: the seed's load again */
    if (c->trunc_judged && !(r->fixup && same))
        return snprintf(why, cap, "accepted a truncated file (%s of %zu bytes)", c->desc, r->seed_len), 0;
    /* a safetensors header's __metadata__ is a free string map, by the format */
    int md = r->kind == FZ_BINARY && (!strcmp(c->key, "format") || !strcmp(c->key, "__metadata__"));
    int always = !md && (!strcmp(c->key, "format") || !strcmp(c->key, "version"));
    if (c->judged && (!same || always) && !key_free(r, c->key, c->judged, md))
        return snprintf(why, cap, "accepted %s (judged '%c': the key is not one the reader may ignore)", c->desc, c->judged), 0;
    return 1;
}

/* ======================================================================================== */
/* The campaign                                                                              */
/* ======================================================================================== */

static const char *current_case = "";
static char current_buf[512];

static void on_alarm(int sig) {
    (void)sig;
    static const char m[] = "test_fuzz_readers: a case ran past 30 s (a hang): ";
    ssize_t w = write(2, m, sizeof m - 1);
    w = write(2, current_case, strlen(current_case));
    w = write(2, "\n", 1);
    (void)w;
    _exit(1);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void campaign(FzReader *r, double scale) {
    double t0 = now_s();
    Err err;
    uint64_t d1 = 0, d2 = 0;
    char why[512] = "";
    Status s1 = fz_run(r, r->seed, r->seed_len, &d1, &err);
    int ok1 = fz_contract(r, s1, &err, why, sizeof why);
    Status s2 = fz_run(r, r->seed, r->seed_len, &d2, &err);
    tu_check(s1 == ST_OK && s2 == ST_OK && ok1 && d1 && d1 == d2, r->name,
             "seed (%zu bytes) loads: status %d/%d digest %016llx/%016llx %s%s", r->seed_len, s1, s2,
             (unsigned long long)d1, (unsigned long long)d2, why, s1 == ST_OK ? "" : err.msg);
    if (s1 != ST_OK) return;
    Plan p;
    plan_init(&p, r);
    uint64_t s = 0x9E3779B97F4A7C15ULL;
    for (const char *q = r->name; *q; q++) s = (s ^ (uint8_t)*q) * 0x100000001b3ULL;
    int budget = (int)(r->budget * scale), refused = 0, accepted = 0, same = 0, failed = 0, shown_kind[2] = {0, 0};
    for (int i = 0; i < budget; i++) {
        Case c;
        make_case(r, &p, i, &s, &c);
        if (only_case >= 0 && i != only_case) {
            free(c.buf);
            continue;
        }
        snprintf(current_buf, sizeof current_buf, "%s case %d: %s", r->name, i, c.desc);
        current_case = current_buf;
        alarm(30);
        uint64_t d = 0;
        Status st = fz_run(r, c.buf, c.n, &d, &err);
        alarm(0);
        if (!judge(r, &c, st, &err, st == ST_OK && d == d1, why, sizeof why)) {
            failed++;
            int contract = st != ST_OK || r->broken[0]; /* the first few of each kind are shown */
            if (shown_kind[contract]++ < 6) tu_check(0, r->name, "case %d (%s): %s", i, c.desc, why);
        }
        if (st != ST_OK) refused++;
        else accepted++, same += d == d1;
        if (verbose && st == ST_OK && d != d1) printf("  accepted %s: %s\n", r->name, c.desc);
        if (verbose > 1 && st != ST_OK) printf("  refused %s: %s: %s\n", r->name, c.desc, err.msg);
        if (only_case >= 0) printf("case %d (%s): status %d digest %016llx: %s\n", i, c.desc, st, (unsigned long long)d, err.msg);
        free(c.buf);
    }
    plan_free(&p);
    tu_check(refused > 0 && failed == 0, r->name,
             "%d cases (%d values): %d refused, %d accepted (%d as the seed), %d failed (%d contract, %d acceptance), "
             "%.2f s", budget, p.nvals, refused, accepted, same, failed, shown_kind[1], shown_kind[0], now_s() - t0);
}

/* ======================================================================================== */
/* Negative controls of the checker                                                          */
/* ======================================================================================== */

static int lax_mode;
static Status lax_run(FzReader *r, const uint8_t *b, size_t n, uint64_t *digest, Err *err) {
    (void)r, (void)b, (void)n;
    *digest = 1;
    switch (lax_mode) {
    case 0: err->msg[0] = '\0'; return ST_ERR_INPUT;                                  /* empty message */
    case 1: snprintf(err->msg, sizeof err->msg, "lax.bin: two\nlines"); return ST_ERR_INPUT;
    case 2: snprintf(err->msg, sizeof err->msg, "expected a number, found another value"); return ST_ERR_INPUT;
    case 3: snprintf(err->msg, sizeof err->msg, "lax.bin: odd"); return (Status)7;     /* not a Status */
    case 4: snprintf(err->msg, sizeof err->msg, "lax.bin: ends with a newline\n"); return ST_ERR_RUNTIME;
    default: return ST_OK;                                                            /* accepts everything */
    }
}

static void checker_controls(void) {
    static uint8_t seed[64] = "HEADERHEADERHEAD{\"count\": 12, \"name\": \"x\"}    data data data";
    static uint8_t strict[64];
    memset(strict, 1, 16);
    static const char *const nofree[] = {NULL};
    FzReader lax = {"lax", "a reader that breaks the contract", FZ_BINARY, 0, 0, nofree};
    lax.run = lax_run, lax.seed = seed, lax.seed_len = sizeof seed, lax.strict = strict, lax.names[0] = "lax.bin";
    Case c;
    char why[512];
    Err err;
    uint64_t d;
    static const char *const modes[] = {"empty message", "two lines", "no file named", "status 7", "trailing newline"};
    for (lax_mode = 0; lax_mode < 5; lax_mode++) {
        case_init(&c, seed, sizeof seed, 0);
        Status st = fz_run(&lax, c.buf, c.n, &d, &err);
        int ok = judge(&lax, &c, st, &err, 0, why, sizeof why);
        tu_check(!ok, "control_lax_message", "%s: flagged (%s)", modes[lax_mode], ok ? "not flagged" : why);
        free(c.buf);
    }
    lax_mode = 5; /* accepts everything: a header byte, a truncation, a -1 must each be flagged */
    Plan p;
    memset(&p, 0, sizeof p);
    size_t sa[16];
    for (int k = 0; k < 16; k++) sa[k] = (size_t)k;
    p.strict_at = sa, p.nstrict = 16;
    int flagged_hdr = 0, flagged_trunc = 0, tried_hdr = 0, tried_trunc = 0;
    uint64_t s = 12345;
    for (int i = 0; i < 400; i++) {
        make_case(&lax, &p, i, &s, &c);
        Status st = fz_run(&lax, c.buf, c.n, &d, &err);
        int ok = judge(&lax, &c, st, &err, 1, why, sizeof why);
        tried_hdr += c.strict_hit, flagged_hdr += c.strict_hit && !ok;
        tried_trunc += c.trunc_judged, flagged_trunc += c.trunc_judged && !ok;
        free(c.buf);
    }
    tu_check(tried_hdr > 20 && flagged_hdr == tried_hdr, "control_lax_header", "a reader accepting everything: %d of %d "
             "changed header bytes flagged", flagged_hdr, tried_hdr);
    tu_check(tried_trunc > 5 && flagged_trunc == tried_trunc, "control_lax_truncation", "%d of %d truncations flagged",
             flagged_trunc, tried_trunc);
    FzReader laxj = lax;
    laxj.kind = FZ_JSON, laxj.strict = NULL;
    static uint8_t js[] = "{\"count\": 12, \"name\": \"x\", \"n_ctx\": 4}";
    laxj.seed = js, laxj.seed_len = sizeof js - 1;
    static const char *const free_ctx[] = {"n_ctx", NULL};
    laxj.free_keys = free_ctx;
    Plan pj;
    plan_init(&pj, &laxj);
    int flagged_val = 0, judged_val = 0, free_flagged = 0;
    for (int i = 0; i < 2 * pj.nvals * 12; i += 2) {
        make_case(&laxj, &pj, i, &s, &c);
        Status st = fz_run(&laxj, c.buf, c.n, &d, &err);
        int ok = judge(&laxj, &c, st, &err, 0, why, sizeof why);
        if (c.judged && strcmp(c.key, "n_ctx")) judged_val++, flagged_val += !ok;
        if (c.judged && !strcmp(c.key, "n_ctx")) free_flagged += !ok;
        free(c.buf);
    }
    plan_free(&pj);
    tu_check(pj.nvals == 6 && judged_val > 8 && flagged_val == judged_val && free_flagged == 0, "control_lax_values",
             "%d values found (6 expected), %d of %d judged value mutations flagged, %d of a free key flagged (0 expected)",
             pj.nvals, flagged_val, judged_val, free_flagged);
}

/* ======================================================================================== */
/* The named cases: each the minimized input of one defect, refused since its fix            */
/* ======================================================================================== */

/* The seed with the first occurrence of `from` replaced by `to` (a safetensors header's length
 * rewritten when the change falls inside it). */
static uint8_t *seed_replace(const FzReader *r, const char *from, const char *to, size_t *n) {
    const uint8_t *at = memmem(r->seed, r->seed_len, from, strlen(from));
    if (!at) return NULL;
    size_t o = (size_t)(at - r->seed), fl = strlen(from), tl = strlen(to);
    *n = r->seed_len - fl + tl;
    uint8_t *b = malloc(*n + 1);
    memcpy(b, r->seed, o), memcpy(b + o, to, tl), memcpy(b + o + tl, r->seed + o + fl, r->seed_len - o - fl);
    size_t base, hl;
    if (r->kind == FZ_BINARY && st_header(r, &base, &hl) && o < 8 + hl) {
        uint64_t h = (uint64_t)hl - fl + tl;
        memcpy(b, &h, 8);
    }
    return b;
}

/* The seed with the 32-bit little-endian word at byte off set to v. */
static uint8_t *seed_word(const FzReader *r, size_t off, uint32_t v, size_t *n) {
    uint8_t *b = malloc(r->seed_len);
    memcpy(b, r->seed, r->seed_len);
    for (int k = 0; k < 4; k++) b[off + (size_t)k] = (uint8_t)(v >> (8 * k));
    *n = r->seed_len;
    return b;
}

typedef struct {
    const char *reader, *name;
    const char *from, *to; /* a text replacement of the seed, or (from NULL) a word set: */
    size_t word_at;
    uint32_t word;
    size_t cut;            /* bytes then cut from the end */
    const char *want;      /* in the refusal's message */
} Named;

/* Each fails without its fix (checked by reverting it, 2026-11-29): before, the input loaded, or
 * was refused with a message of two lines or one naming a flag instead of the file. */
static const Named NAMED[] = {
    /* core/status.c: err_set wrote a file's newline into the message (every reader quoting a name,
     * a key or a line: tensor names and dtypes, JSON keys, chat roles, pat_str) */
    {"safetensors", "named_dtype_newline", "\"dtype\":\"F32\"", "\"dtype\":\"F3\n\"", 0, 0, 0,
     "expected dtype F32, BF16 or F16, found F3\\n"},
    {"chat", "named_role_newline", "\"role\": \"user\"", "\"role\": \"us\\ner\"", 0, 0, 0, "role \"us\\ner\""},
    {"hw_profile", "named_key_newline", "\"name\":", "\"na\nme\":", 0, 0, 0, "unknown key 'na\\nme'"},
    /* ckpt/llmc.c: header words 8..255 were not read, and ckpt_init_from (unlike ckpt_peek_config)
     * took a padded vocabulary below the vocabulary, reading wpe from wte's last row (the file cut
     * to that Vp's size) */
    {"llmc", "named_llmc_reserved_word", NULL, NULL, 40, 1, 0, "llm.c header word [10]: expected 0 (reserved), found 1"},
    {"llmc", "named_llmc_vp_below_vocab", NULL, NULL, 28, 95, (128 - 95) * 16 * 4, "padded vocabulary 95 is smaller"},
    /* data/shard.c: the reserved shard header words 9..255 and mask header bytes 36..63 were not read */
    {"token_shard", "named_shard_reserved_word", NULL, NULL, 40, 1, 0, "reserved header word 10, found 1"},
    {"token_mask", "named_mask_reserved_byte", NULL, NULL, 40, 7, 0, "reserved header bytes 36..63 zero, found 0x07 at byte 40"},
    /* data/loader.c: a header vocabulary above the model's made no-pack pad rows with an id past it */
    {"token_shard", "named_nopack_eot_past_vocab", NULL, NULL, 28, 321, 0, "--no-pack pads rows with it), found 320"},
    /* ckpt/lora_ckpt.c: version, counters, the LoRA config and the seeds were taken as written */
    {"lora_state", "named_lora_version", "\"version\":\t2", "\"version\":\t3", 0, 0, 0, "version: expected 1 or 2, found 3"},
    {"lora_state", "named_lora_rank_wide", "\"rank\":\t2", "\"rank\":\t17", 0, 0, 0, "state.json: lora: --lora-rank: expected 1..16"},
    {"lora_state", "named_lora_rank_cast", "\"rank\":\t2", "\"rank\":\t1e300", 0, 0, 0, "lora.rank: expected a positive integer"},
    {"lora_state", "named_lora_dropout", "\"dropout\":\t0", "\"dropout\":\t2", 0, 0, 0, "lora.dropout: expected a probability"},
    {"lora_state", "named_lora_seed_empty", "\"loader_seed\":\t\"5\"", "\"loader_seed\":\t\"\"", 0, 0, 0,
     "loader_seed, loader_consumed: expected decimal digits"},
    /* ckpt/safetensors.c: scaletrain.tokenizer of another type was taken as none */
    {"hf_config_llama", "named_hf_tokenizer_type", "\"tokenizer\": \"llama3\"", "\"tokenizer\": 7", 0, 0, 0,
     "scaletrain.tokenizer: expected a string"},
    /* ckpt/ckpt.c: loss_scaler, config and extra of another type were taken as none, the scale as written */
    /* ckpt/ckpt.c: a refusal before state.json's files member freed the caller's uninitialised file
     * list (ckpt_load, ckpt_verify: a wild free; ASan's bad-free, in the release tree as the stack
     * happens to hold) */
    {"ckpt_state", "named_state_step_negative", "\"step\":\t1,", "\"step\":\t-1,", 0, 0, 0,
     "step: expected a whole number in [0, 9007199254740992], found -1"},
    {"ckpt_state", "named_state_scale_negative", "\"scale\":\t65536", "\"scale\":\t-1", 0, 0, 0, "loss_scaler.scale: expected"},
    {"ckpt_state", "named_state_config_type", "\"config\":\t{", "\"config\":\t7,\n\t\"was_config\":\t{", 0, 0, 0,
     "config: expected null or an object"},
    /* train/health.c (the resume's reading of state.json's extra.health): counters taken as any number,
     * 2.5 truncated, -1 kept, 1e300 cast to an integer (undefined) */
    {"ckpt_state", "named_health_counter_fraction", "\"spikes\":\t0,", "\"spikes\":\t2.5,", 0, 0, 0,
     "health.spikes: expected a whole number in [0, 9007199254740992], found another number"},
    /* ckpt/shard.c, ckpt/safetensors.c: a huge number cast to an integer before its range check
     * (undefined: clang's UBSan in bench/fuzz.sh's build stops there; GCC's -fsanitize=undefined has
     * no float-cast-overflow, so these two replay without failing in the gcc trees) */
    {"ckpt_manifest", "named_manifest_int_huge", "\"layers\":\t1,", "\"layers\":\t1e46,", 0, 0, 0,
     "model.layers: expected a number"},
    {"hf_config", "named_doc_mask_eot_huge", "{\"tokenizer\": \"gpt2\"}", "{\"tokenizer\": \"gpt2\", \"doc_mask\": {\"eot\": 1e300}}",
     0, 0, 0, "scaletrain.doc_mask: expected"},
    /* ckpt/shard.c: a manifest tensor's shape was cast unchecked (1e300: INT_MIN rows, refused later by
     * comparison, by chance of the cast) */
    {"ckpt_manifest", "named_manifest_shape_huge", "\"shape\":\t[96, 16]", "\"shape\":\t[1e300, 16]", 0, 0, 0,
     "tensors.wte.shape: expected whole numbers in [0, 2^30]"},
    /* data/bpe.c: a files.xxh3 stamp with a line lost (or its name changed) left that file unchecked */
    {"tok_stamp", "named_stamp_line_dropped", "pattern none\n", "", 0, 0, 0, "line for pattern, found none"},
    /* ... and one whose last LF became a NUL (the stamp's 99 bytes end "one\n") was read up to it */
    {"tok_stamp", "named_stamp_nul", NULL, NULL, 95, 0x00656e6fu, 0, "found a NUL byte at offset 98"},
    /* fit/fit.c: a budget cell that is no number (or negative) turned budget grouping off silently */
    {"fit_csv", "named_fit_budget_negative", "1e+15,166666667,d1", "-1,166666667,d1", 0, 0, 0, "(budget): expected"},
    {NULL, NULL, NULL, NULL, 0, 0, 0, NULL},
};

static void named_cases(const char *only) {
    for (const Named *x = NAMED; x->reader; x++) {
        if (only && strcmp(only, x->reader)) continue;
        FzReader *r = fz_reader_find(x->reader);
        if (!r || !r->ready) continue;
        size_t n = 0;
        uint8_t *b = x->from ? seed_replace(r, x->from, x->to, &n) : seed_word(r, x->word_at, x->word, &n);
        if (b) n -= x->cut < n ? x->cut : n;
        if (!b) {
            tu_check(0, x->name, "%s: the seed holds no \"%s\"", r->name, x->from);
            continue;
        }
        Err err;
        uint64_t d;
        char why[512] = "";
        Status st = fz_run(r, b, n, &d, &err);
        int ok = fz_contract(r, st, &err, why, sizeof why);
        tu_check(st == ST_ERR_INPUT && ok && strstr(err.msg, x->want), x->name, "%s: status %d, \"%s\" (expected a refusal "
                 "holding \"%s\") %s", r->name, st, err.msg, x->want, why);
        free(b);
    }
}

/* tests/fuzz/CMakeLists.txt's FZ_READERS (the libFuzzer targets) names every reader: 1 if name is a
 * whole word of that list. */
static int fuzz_target_listed(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)) != NULL; p += n)
        if ((p == list || p[-1] == ' ' || p[-1] == '\n') && (p[n] == ' ' || p[n] == '\n' || p[n] == ')')) return 1;
    return 0;
}

static void fuzz_targets_complete(void) {
    char *cm = tu_slurp(ST_SOURCE_DIR "/tests/fuzz/CMakeLists.txt");
    char *list = cm ? strstr(cm, "set(FZ_READERS") : NULL;
    char *end = list ? strchr(list, ')') : NULL;
    if (end) end[1] = '\0';
    int missing = 0;
    for (int i = 0; list && fz_reader(i); i++)
        if (!fuzz_target_listed(list, fz_reader(i)->name)) {
            tu_check(0, "fuzz_targets_listed", "reader %s has no libFuzzer target in tests/fuzz/CMakeLists.txt", fz_reader(i)->name);
            missing++;
        }
    tu_check(list && !missing && !fuzz_target_listed(list, "no_such_reader") && !fuzz_target_listed(list, "token"),
             "fuzz_targets_listed", "every reader is a target of tests/fuzz/CMakeLists.txt's FZ_READERS (control: "
             "no_such_reader and token are not)");
    free(cm);
}

int main(int argc, char **argv) {
    const char *only = argc > 1 && strcmp(argv[1], "all") ? argv[1] : NULL;
    double scale = argc > 2 ? atof(argv[2]) : 1.0;
    only_case = argc > 3 ? atoi(argv[3]) : -1;
    const char *v = getenv("ST_FUZZ_VERBOSE");
    verbose = v ? atoi(v) : 0;
    signal(SIGALRM, on_alarm);
    checker_controls();
    fuzz_targets_complete();
    double t0 = now_s();
    for (int i = 0; fz_reader(i); i++) {
        FzReader *r = fz_reader(i);
        if (only && strcmp(only, r->name)) continue;
        Err err;
        double t1 = now_s();
        Status st = fz_setup(r, WORK, ST_SOURCE_DIR, &err);
        if (st != ST_OK) {
            tu_check(0, r->name, "setup: %s", err.msg);
            continue;
        }
        if (verbose) printf("  setup %s: %.2f s, seed %zu bytes\n", r->name, now_s() - t1, r->seed_len);
        campaign(r, scale);
    }
    named_cases(only);
    for (int i = 0; only_case < 0 && fz_reader(i); i++) fz_teardown(fz_reader(i));
    tu_check(1, "fuzz_readers_total", "%.2f s", now_s() - t0);
    return tu_exit();
}
