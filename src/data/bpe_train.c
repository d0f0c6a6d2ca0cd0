/* bpe_train.c — learning a byte-level BPE (contract in bpe.h, format in docs/tokenizer.md).
 *
 * 1. count pre-tokens (the chosen pattern: GPT-2's, cl100k's, o200k's or Llama 3's) in a hash map of byte strings;
 * 2. each distinct pre-token becomes a "word": a symbol sequence (initially its bytes) and a count;
 * 3. pair counts (adjacent symbols, weighted by word count, overlapping pairs counted) in a hash map,
 *    each pair with the list of words it occurs in; a max-heap of (count, pair) with lazy deletion:
 *    an entry is valid only if its count equals the pair's current count;
 * 4. repeat: pop the best pair (highest count, ties: lexicographically smallest pair of byte strings),
 *    re-write only the words that contain it, adjusting the counts of the pairs they touch;
 * 5. write encoder.json + vocab.bpe (+ `pattern` unless gpt2) crash-safely (temporary file, fsync,
 *    rename, fsync dir). */
#include <errno.h>
#include <fcntl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "core/fileio.h"
#include "data/bpe.h"

BpeTrainOptions bpe_train_default_options(void) {
    BpeTrainOptions o = {4096, 0, BPE_PATTERN_GPT2};
    return o;
}

/* ================================================================== state */

typedef struct {
    int64_t count;    /* weighted occurrences */
    uint32_t a, b;    /* the pair */
    uint32_t *where;  /* words it occurs (or occurred) in; may repeat */
    uint32_t nwhere, cwhere;
    uint32_t stamp;   /* last merge step that touched it (dedup of heap pushes) */
} Pair;

typedef struct {
    int64_t count;
    uint32_t a, b;
} HeapEnt;

typedef struct {
    /* tokens */
    uint8_t *pool;
    size_t npool, cpool;
    size_t *off;          /* [ntok + 1] */
    uint32_t ntok, ctok;
    /* words */
    uint32_t **sym;       /* symbols of each word */
    uint32_t *len;        /* symbols per word */
    int64_t *freq;
    uint32_t *wstamp;     /* last merge step that rewrote the word */
    uint32_t nwords;
    /* pairs */
    Pair *pairs;
    uint32_t npairs, cpairs;
    uint64_t *pkeys;      /* (a << 32 | b) + 1, 0 = empty */
    uint32_t *pidx;
    size_t pmask;
    /* heap */
    HeapEnt *heap;
    size_t hn, hcap;
    /* merges */
    uint32_t *merges;     /* [nmerges][2] */
    size_t nmerges;
    int oom;
} Trainer;

static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

/* Index of pair (a, b), created with count 0 if absent (create = 1), or UINT32_MAX. */
static uint32_t pair_get(Trainer *t, uint32_t a, uint32_t b, int create) {
    uint64_t key = (((uint64_t)a << 32) | b) + 1;
    size_t h = mix64(key) & t->pmask;
    while (t->pkeys[h]) {
        if (t->pkeys[h] == key) return t->pidx[h];
        h = (h + 1) & t->pmask;
    }
    if (!create) return UINT32_MAX;
    if (2 * ((size_t)t->npairs + 1) > t->pmask) { /* grow the table, then re-probe */
        size_t ncap = (t->pmask + 1) * 2;
        uint64_t *nk = calloc(ncap, sizeof *nk);
        uint32_t *ni = malloc(ncap * sizeof *ni);
        if (!nk || !ni) {
            free(nk);
            free(ni);
            t->oom = 1;
            return UINT32_MAX;
        }
        for (size_t i = 0; i <= t->pmask; i++)
            if (t->pkeys[i]) {
                size_t g = mix64(t->pkeys[i]) & (ncap - 1);
                while (nk[g]) g = (g + 1) & (ncap - 1);
                nk[g] = t->pkeys[i];
                ni[g] = t->pidx[i];
            }
        free(t->pkeys);
        free(t->pidx);
        t->pkeys = nk;
        t->pidx = ni;
        t->pmask = ncap - 1;
        h = mix64(key) & t->pmask;
        while (t->pkeys[h]) h = (h + 1) & t->pmask;
    }
    if (t->npairs == t->cpairs) {
        uint32_t nc = t->cpairs ? 2 * t->cpairs : 1024;
        Pair *np = realloc(t->pairs, (size_t)nc * sizeof *np);
        if (!np) {
            t->oom = 1;
            return UINT32_MAX;
        }
        t->pairs = np;
        t->cpairs = nc;
    }
    uint32_t id = t->npairs++;
    memset(&t->pairs[id], 0, sizeof t->pairs[id]);
    t->pairs[id].a = a;
    t->pairs[id].b = b;
    t->pairs[id].stamp = UINT32_MAX;
    t->pkeys[h] = key;
    t->pidx[h] = id;
    return id;
}

static void pair_add_word(Trainer *t, Pair *p, uint32_t w) {
    if (p->nwhere && p->where[p->nwhere - 1] == w) return;
    if (p->nwhere == p->cwhere) {
        uint32_t nc = p->cwhere ? 2 * p->cwhere : 4;
        uint32_t *nw = realloc(p->where, (size_t)nc * sizeof *nw);
        if (!nw) {
            t->oom = 1;
            return;
        }
        p->where = nw;
        p->cwhere = nc;
    }
    p->where[p->nwhere++] = w;
}

/* Heap order: 1 if x should pop before y (higher count; ties: smaller left bytes, then right). */
static int tok_cmp(const Trainer *t, uint32_t x, uint32_t y) {
    if (x == y) return 0;
    size_t lx = t->off[x + 1] - t->off[x], ly = t->off[y + 1] - t->off[y];
    int c = memcmp(t->pool + t->off[x], t->pool + t->off[y], lx < ly ? lx : ly);
    if (c) return c;
    return lx < ly ? -1 : lx > ly ? 1 : 0;
}

static int before(const Trainer *t, const HeapEnt *x, const HeapEnt *y) {
    if (x->count != y->count) return x->count > y->count;
    int c = tok_cmp(t, x->a, y->a);
    if (c) return c < 0;
    return tok_cmp(t, x->b, y->b) < 0;
}

static void heap_push(Trainer *t, int64_t count, uint32_t a, uint32_t b) {
    if (t->hn == t->hcap) {
        size_t nc = t->hcap ? 2 * t->hcap : 4096;
        HeapEnt *nh = realloc(t->heap, nc * sizeof *nh);
        if (!nh) {
            t->oom = 1;
            return;
        }
        t->heap = nh;
        t->hcap = nc;
    }
    HeapEnt e = {count, a, b};
    size_t i = t->hn++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!before(t, &e, &t->heap[p])) break;
        t->heap[i] = t->heap[p];
        i = p;
    }
    t->heap[i] = e;
}

static HeapEnt heap_pop(Trainer *t) {
    HeapEnt top = t->heap[0], e = t->heap[--t->hn];
    size_t i = 0, n = t->hn;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && before(t, &t->heap[c + 1], &t->heap[c])) c++;
        if (!before(t, &t->heap[c], &e)) break;
        t->heap[i] = t->heap[c];
        i = c;
    }
    if (n) t->heap[i] = e;
    return top;
}

/* Appends token a+b (by id: the pool may move when it grows, so no pointers are taken before). */
static int add_token(Trainer *t, uint32_t a, uint32_t b) {
    size_t oa = t->off[a], la = t->off[a + 1] - oa, ob = t->off[b], lb = t->off[b + 1] - ob;
    if (t->ntok + 1 >= t->ctok) {
        uint32_t nc = t->ctok * 2;
        size_t *no = realloc(t->off, ((size_t)nc + 1) * sizeof *no);
        if (!no) return -1;
        t->off = no;
        t->ctok = nc;
    }
    if (t->npool + la + lb > t->cpool) {
        size_t nc = t->cpool * 2 + la + lb;
        uint8_t *np = realloc(t->pool, nc);
        if (!np) return -1;
        t->pool = np;
        t->cpool = nc;
    }
    memcpy(t->pool + t->npool, t->pool + oa, la);
    memcpy(t->pool + t->npool + la, t->pool + ob, lb);
    t->npool += la + lb;
    t->off[t->ntok + 1] = t->npool;
    t->ntok++;
    return 0;
}

/* ================================================================== counting pre-tokens */

typedef struct {
    const uint8_t *p;
    uint32_t n;
    int64_t count;
    uint64_t hash;
} PreTok;

typedef struct {
    PreTok *tab;
    size_t cap, n;
} PreTab;

/* Adds count occurrences of s[0..n) (hash h); -1 on out of memory. */
static int pretab_add(PreTab *t, const uint8_t *s, uint32_t n, uint64_t h, int64_t count) {
    size_t k = h & (t->cap - 1);
    while (t->tab[k].p && !(t->tab[k].hash == h && t->tab[k].n == n && memcmp(t->tab[k].p, s, n) == 0))
        k = (k + 1) & (t->cap - 1);
    if (t->tab[k].p) {
        t->tab[k].count += count;
        return 0;
    }
    t->tab[k] = (PreTok){s, n, count, h};
    if (2 * ++t->n > t->cap) {
        size_t nc = t->cap * 2;
        PreTok *nt = calloc(nc, sizeof *nt);
        if (!nt) return -1;
        for (size_t q = 0; q < t->cap; q++)
            if (t->tab[q].p) {
                size_t g = t->tab[q].hash & (nc - 1);
                while (nt[g].p) g = (g + 1) & (nc - 1);
                nt[g] = t->tab[q];
            }
        free(t->tab);
        t->tab = nt;
        t->cap = nc;
    }
    return 0;
}

static int pretok_cmp(const void *x, const void *y) {
    const PreTok *a = x, *b = y;
    if (a->hash != b->hash) return a->hash < b->hash ? -1 : 1;
    if (a->n != b->n) return a->n < b->n ? -1 : 1;
    return memcmp(a->p, b->p, a->n);
}

/* A chunk of a text that starts and ends on pre-token boundaries. */
typedef struct {
    const uint8_t *s;
    size_t n;
} Chunk;

#define CHUNK_BYTES (1u << 20)

/* Splits every text into chunks of about CHUNK_BYTES at positions that are pre-token boundaries
 * whatever follows: just before a '\n' whose previous byte is printable ASCII other than space (a
 * letter/number/punctuation pre-token ends there, and no pre-token rule looks behind). The chunks
 * depend on the input only. Returns the count, or SIZE_MAX on out of memory. */
/* A cut just before the '\n' at s[i] is a pre-token boundary whatever follows: no rule looks behind,
 * and the pre-token ending at s[i - 1] cannot extend over a newline when s[i - 1] is printable
 * non-space ASCII (gpt2), or an ASCII letter or digit (cl100k, o200k, llama3: their punctuation runs take
 * trailing newlines, `[\r\n]*`). */
static int cut_before(const uint8_t *s, size_t i, BpePattern p) {
    uint8_t c = s[i - 1];
    if (s[i] != '\n') return 0;
    if (p == BPE_PATTERN_GPT2) return c > 0x20 && c < 0x7f;
    return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
}

static size_t make_chunks(const uint8_t *const *texts, const size_t *lens, size_t ntexts, BpePattern p, Chunk **out) {
    size_t cap = ntexts + 16, n = 0;
    Chunk *c = malloc(cap * sizeof *c);
    if (!c) return SIZE_MAX;
    for (size_t f = 0; f < ntexts; f++) {
        size_t pos = 0, len = lens[f];
        const uint8_t *s = texts[f];
        while (pos < len) {
            size_t end = len;
            if (len - pos > 2 * (size_t)CHUNK_BYTES) {
                size_t i = pos + CHUNK_BYTES;
                while (i < len && !cut_before(s, i, p)) i++;
                end = i;
            }
            if (n == cap) {
                Chunk *nc = realloc(c, 2 * cap * sizeof *c);
                if (!nc) {
                    free(c);
                    return SIZE_MAX;
                }
                c = nc, cap *= 2;
            }
            c[n++] = (Chunk){s + pos, end - pos};
            pos = end;
        }
    }
    *out = c;
    return n;
}

/* Counts the distinct pre-tokens of all texts on `threads` threads (each counts whole chunks into
 * its own table), then merges: the result is sorted by (hash, length, bytes), so it depends on
 * the input only, not on the thread count. */
static int count_pretokens(const uint8_t *const *texts, const size_t *lens, size_t ntexts, int threads,
                           BpePattern pattern, PreTok **out, size_t *nout) {
    Chunk *ch = NULL;
    size_t nch = make_chunks(texts, lens, ntexts, pattern, &ch);
    if (nch == SIZE_MAX) return -1;
    int nt = threads > 0 ? threads : omp_get_max_threads();
    if ((size_t)nt > nch) nt = nch ? (int)nch : 1;
    PreTab *tabs = calloc((size_t)nt, sizeof *tabs);
    int failed = tabs == NULL;
    if (!failed) {
#pragma omp parallel num_threads(nt)
        {
            PreTab *t = &tabs[omp_get_thread_num()];
            t->cap = 1 << 14;
            t->tab = calloc(t->cap, sizeof *t->tab);
            int bad = t->tab == NULL;
#pragma omp for schedule(dynamic, 1)
            for (size_t c = 0; c < nch; c++) {
                const uint8_t *s = ch[c].s;
                size_t i = 0, len = ch[c].n;
                while (i < len && !bad) {
                    size_t j = bpe_pretoken_end_pattern(pattern, s, len, i);
                    bad = pretab_add(t, s + i, (uint32_t)(j - i), XXH3_64bits(s + i, j - i), 1);
                    i = j;
                }
            }
            if (bad) {
#pragma omp atomic write
                failed = 1;
            }
        }
    }
    size_t total = 0;
    for (int k = 0; tabs && k < nt; k++) total += tabs[k].n;
    PreTok *all = failed ? NULL : malloc((total + 1) * sizeof *all);
    size_t m = 0;
    for (int k = 0; tabs && k < nt; k++) {
        for (size_t q = 0; all && q < tabs[k].cap; q++)
            if (tabs[k].tab[q].p) all[m++] = tabs[k].tab[q];
        free(tabs[k].tab);
    }
    free(tabs);
    free(ch);
    if (!all) return -1;
    qsort(all, m, sizeof *all, pretok_cmp);
    size_t w = 0;
    for (size_t q = 0; q < m; q++) {
        if (w && pretok_cmp(&all[w - 1], &all[q]) == 0) all[w - 1].count += all[q].count;
        else all[w++] = all[q];
    }
    *out = all;
    *nout = w;
    return 0;
}

/* ================================================================== saving */

/* dir/name written crash-safely (core/fileio: temporary, fsync, rename, fsync of the directory). */
static Status write_atomic(const char *dir, const char *name, const char *data, size_t n, Err *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    const void *bufs[1] = {data};
    size_t lens[1] = {n};
    return file_write_atomic(path, bufs, lens, 1, err);
}

/* Appends the GPT-2 file form of token bytes (mapped code points as UTF-8; JSON-escaped if json). */
static size_t put_mapped(char *o, const uint8_t *b, size_t n, int json) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t cp = bpe_byte_to_unicode(b[i]);
        if (json && (cp == '"' || cp == '\\')) o[k++] = '\\';
        if (cp < 0x80) o[k++] = (char)cp;
        else {
            o[k++] = (char)(0xC0 | (cp >> 6));
            o[k++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    return k;
}

static Status save(const Trainer *t, const char *dir, BpePattern pattern, Err *err) {
    Err e2;
    if (file_mkdirs(dir, &e2) != ST_OK) /* mkdir -p */
        return err_set(err, ST_ERR_INPUT, "output directory %s: %s", dir, e2.msg);
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return err_set(err, ST_ERR_INPUT, "%s: expected an output directory, found a file", dir);
    /* each byte becomes at most 3 characters (escape or 2-byte UTF-8) */
    size_t cap = 3 * t->npool + 32 * (size_t)t->ntok + 64;
    char *j = malloc(cap), *v = malloc(cap);
    if (!j || !v) {
        free(j);
        free(v);
        return err_set(err, ST_ERR_RUNTIME, "out of memory saving the tokenizer");
    }
    size_t nj = 0, nv = 0;
    j[nj++] = '{';
    for (uint32_t id = 0; id < t->ntok; id++) {
        nj += (size_t)sprintf(j + nj, "%s\"", id ? ", " : "");
        nj += put_mapped(j + nj, t->pool + t->off[id], t->off[id + 1] - t->off[id], 1);
        nj += (size_t)sprintf(j + nj, "\": %u", id);
    }
    nj += (size_t)sprintf(j + nj, ", \"<|endoftext|>\": %u}", t->ntok);
    nv += (size_t)sprintf(v, "#version: 0.2\n");
    for (size_t r = 0; r < t->nmerges; r++) {
        uint32_t a = t->merges[2 * r], b = t->merges[2 * r + 1];
        nv += put_mapped(v + nv, t->pool + t->off[a], t->off[a + 1] - t->off[a], 0);
        v[nv++] = ' ';
        nv += put_mapped(v + nv, t->pool + t->off[b], t->off[b + 1] - t->off[b], 0);
        v[nv++] = '\n';
    }
    /* The three files are replaced one by one; their hashes go first (BPE_FILES_STAMP), so a kill
     * between two renames leaves files the stamp does not match, which tokenizer_load refuses (it
     * loaded a new vocab.bpe with the old encoder.json as one tokenizer). */
    char line[32], stamp[256], ph[24] = "none";
    int nl = snprintf(line, sizeof line, "%s\n", bpe_pattern_name(pattern));
    if (pattern != BPE_PATTERN_GPT2) snprintf(ph, sizeof ph, "%016llx", (unsigned long long)XXH3_64bits(line, (size_t)nl));
    int ns = snprintf(stamp, sizeof stamp, "scaletrain-tokenizer-files 1\nvocab.bpe %016llx\nencoder.json %016llx\npattern %s\n",
                      (unsigned long long)XXH3_64bits(v, nv), (unsigned long long)XXH3_64bits(j, nj), ph);
    Status st = write_atomic(dir, BPE_FILES_STAMP, stamp, (size_t)ns, err);
    if (!st) st = write_atomic(dir, "vocab.bpe", v, nv, err);
    if (!st) st = write_atomic(dir, "encoder.json", j, nj, err);
    /* the pre-tokenizer, read back by tokenizer_load; gpt2 writes none (the files of before) and
     * removes one a previous training left */
    char pf[2048];
    snprintf(pf, sizeof pf, "%s/pattern", dir);
    if (!st && pattern != BPE_PATTERN_GPT2) {
        st = write_atomic(dir, "pattern", line, (size_t)nl, err);
    } else if (!st && unlink(pf) != 0 && errno != ENOENT) {
        st = err_set(err, ST_ERR_INPUT, "%s: expected to remove the pattern file of an earlier training, found %s", pf,
                     strerror(errno));
    }
    free(j);
    free(v);
    return st;
}

/* ================================================================== training */

static void trainer_free(Trainer *t) {
    free(t->pool);
    free(t->off);
    for (uint32_t w = 0; w < t->nwords; w++) free(t->sym[w]);
    free(t->sym);
    free(t->len);
    free(t->freq);
    free(t->wstamp);
    for (uint32_t p = 0; p < t->npairs; p++) free(t->pairs[p].where);
    free(t->pairs);
    free(t->pkeys);
    free(t->pidx);
    free(t->heap);
    free(t->merges);
}

Status bpe_train(const uint8_t *const *texts, const size_t *lens, size_t ntexts, const BpeTrainOptions *o,
                 const char *out_dir, BpeTrainStats *stats, Err *err) {
    double t0 = omp_get_wtime();
    if (o->vocab_size < 257)
        return err_set(err, ST_ERR_INPUT, "vocab size: expected >= 257 (256 bytes + <|endoftext|>), found %u",
                       o->vocab_size);
    Trainer T;
    memset(&T, 0, sizeof T);
    Trainer *t = &T;
    PreTok *pt = NULL;
    size_t npt = 0;
    uint32_t *touched = NULL; /* pairs whose count changed in this merge step */
    size_t ntouched = 0, ctouched = 0;
    uint64_t corpus = 0;
    for (size_t f = 0; f < ntexts; f++) corpus += lens[f];
    if (o->pattern != BPE_PATTERN_GPT2 && o->pattern != BPE_PATTERN_CL100K && o->pattern != BPE_PATTERN_O200K &&
        o->pattern != BPE_PATTERN_LLAMA3)
        return err_set(err, ST_ERR_INPUT, "pattern: expected gpt2, cl100k, o200k or llama3, found %d", (int)o->pattern);
    if (count_pretokens(texts, lens, ntexts, o->threads, o->pattern, &pt, &npt)) goto oom;
    /* base vocabulary: id = byte value */
    size_t nmerge_max = o->vocab_size - 257;
    t->ctok = 512;
    t->off = malloc(((size_t)t->ctok + 1) * sizeof *t->off);
    t->cpool = 4096;
    t->pool = malloc(t->cpool);
    t->merges = malloc((nmerge_max + 1) * 2 * sizeof *t->merges);
    if (!t->off || !t->pool || !t->merges) goto oom;
    t->off[0] = 0;
    for (int b = 0; b < 256; b++) {
        t->pool[b] = (uint8_t)b;
        t->off[b + 1] = (size_t)b + 1;
    }
    t->npool = 256;
    t->ntok = 256;
    /* words */
    t->nwords = (uint32_t)npt;
    t->sym = calloc(npt + 1, sizeof *t->sym);
    t->len = calloc(npt + 1, sizeof *t->len);
    t->freq = calloc(npt + 1, sizeof *t->freq);
    t->wstamp = malloc((npt + 1) * sizeof *t->wstamp);
    t->pmask = 65535;
    t->pkeys = calloc(t->pmask + 1, sizeof *t->pkeys);
    t->pidx = malloc((t->pmask + 1) * sizeof *t->pidx);
    if (!t->sym || !t->len || !t->freq || !t->wstamp || !t->pkeys || !t->pidx) goto oom;
    for (uint32_t w = 0; w < t->nwords; w++) {
        t->wstamp[w] = UINT32_MAX;
        t->len[w] = pt[w].n;
        t->freq[w] = pt[w].count;
        if (!(t->sym[w] = malloc((size_t)pt[w].n * sizeof **t->sym))) goto oom;
        for (uint32_t i = 0; i < pt[w].n; i++) t->sym[w][i] = pt[w].p[i];
        for (uint32_t i = 0; i + 1 < pt[w].n; i++) {
            uint32_t p = pair_get(t, t->sym[w][i], t->sym[w][i + 1], 1);
            if (p == UINT32_MAX) goto oom;
            t->pairs[p].count += t->freq[w];
            pair_add_word(t, &t->pairs[p], w);
        }
    }
    free(pt);
    pt = NULL;
    for (uint32_t p = 0; p < t->npairs; p++) heap_push(t, t->pairs[p].count, t->pairs[p].a, t->pairs[p].b);
    if (t->oom) goto oom;
    /* merges */
    while (t->nmerges < nmerge_max && t->hn) {
        HeapEnt e = heap_pop(t);
        uint32_t pi = pair_get(t, e.a, e.b, 0);
        if (pi == UINT32_MAX || t->pairs[pi].count != e.count || e.count <= 0) continue;
        uint32_t step = (uint32_t)t->nmerges, a = e.a, b = e.b;
        if (add_token(t, a, b)) goto oom;
        uint32_t c = t->ntok - 1;
        t->merges[2 * step] = a;
        t->merges[2 * step + 1] = b;
        t->nmerges++;
        ntouched = 0;
        /* the where list may grow while we iterate (pairs of c are new, never (a, b)) */
        for (uint32_t k = 0; k < t->pairs[pi].nwhere; k++) {
            uint32_t w = t->pairs[pi].where[k];
            if (t->wstamp[w] == step) continue;
            t->wstamp[w] = step;
            uint32_t *s = t->sym[w], n = t->len[w];
            int has = 0;
            for (uint32_t i = 0; i + 1 < n && !has; i++) has = s[i] == a && s[i + 1] == b;
            if (!has) continue;
            int64_t f = t->freq[w];
            for (int pass = 0; pass < 2; pass++) {
                /* pass 0: remove the old word's pairs; pass 1 (after merging): add the new word's */
                if (pass == 1) {
                    uint32_t m = 0;
                    for (uint32_t i = 0; i < n; i++) {
                        if (i + 1 < n && s[i] == a && s[i + 1] == b) {
                            s[m++] = c;
                            i++;
                        } else {
                            s[m++] = s[i];
                        }
                    }
                    n = t->len[w] = m;
                }
                for (uint32_t i = 0; i + 1 < n; i++) {
                    uint32_t p = pair_get(t, s[i], s[i + 1], pass);
                    if (p == UINT32_MAX) {
                        if (t->oom) goto oom;
                        continue;
                    }
                    t->pairs[p].count += pass ? f : -f;
                    if (pass && (s[i] == c || s[i + 1] == c)) pair_add_word(t, &t->pairs[p], w);
                    if (t->pairs[p].stamp != step) {
                        t->pairs[p].stamp = step;
                        if (ntouched == ctouched) {
                            size_t nc = ctouched ? 2 * ctouched : 1024;
                            uint32_t *nt = realloc(touched, nc * sizeof *nt);
                            if (!nt) goto oom;
                            touched = nt;
                            ctouched = nc;
                        }
                        touched[ntouched++] = p;
                    }
                }
            }
        }
        if (t->oom) goto oom;
        for (size_t k = 0; k < ntouched; k++) {
            Pair *p = &t->pairs[touched[k]];
            if (p->count > 0) heap_push(t, p->count, p->a, p->b);
        }
        /* the merged pair's list is no longer needed */
        free(t->pairs[pi].where);
        t->pairs[pi].where = NULL;
        t->pairs[pi].nwhere = t->pairs[pi].cwhere = 0;
    }
    free(touched);
    touched = NULL;
    Status st = save(t, out_dir, o->pattern, err);
    if (!st && stats) {
        stats->vocab_size = t->ntok + 1;
        stats->merges = t->nmerges;
        stats->unique_pretokens = t->nwords;
        stats->corpus_bytes = corpus;
        stats->seconds = omp_get_wtime() - t0;
    }
    trainer_free(t);
    return st;
oom:
    free(touched);
    free(pt);
    trainer_free(t);
    return err_set(err, ST_ERR_RUNTIME, "bpe_train: out of memory");
}
