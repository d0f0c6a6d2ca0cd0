/* prepare.c — corpus -> token shards in bounded memory (contract in prepare.h, rules in
 * docs/data.md §6, files in docs/formats.md).
 *
 * Contents: 1. inputs  2. runs (sorted, keyed, encoded documents)  3. the journal (resume)
 *           4. phase 1: read and encode  5. phase 2: merge into shards  6. manifest
 *           7. prepare_run  8. prepare_read_documents (tokenizer training, in memory). */
#include "data/prepare.h"

#include "core/fileio.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "data/chat.h"
#include "data/loader.h"
#include "data/shard.h"

PrepareOptions prepare_default_options(void) {
    PrepareOptions o;
    memset(&o, 0, sizeof o);
    o.format = PREP_FORMAT_AUTO;
    o.separator = "<|endoftext|>";
    o.field = "text";
    o.val_fraction = 0.05;
    o.val_docs = -1;
    o.seed = 1337;
    o.shard_tokens = 100000000;
    o.dedup = 1;
    o.seq_len = 1024;
    o.run_bytes = (size_t)256 << 20;
    return o;
}

/* ================================================================== 1. inputs */

typedef struct {
    char *path;
    long long size;         /* from stat; -1 for standard input */
    long long mtime;        /* nanoseconds (a rewrite within the same second changes it) */
    int done;               /* read to the end and in a written run */
    uint64_t docs;          /* documents in written runs */
    uint64_t prefix;        /* XXH3-64 of those documents (each: its length, u64, then its bytes): a
                               resume checks the documents it skips against it (standard input has
                               no size or mtime to tell one stream from another) */
    uint64_t raw_bytes;     /* bytes read (when done) */
    uint64_t checksum;      /* XXH3-64 of those bytes (when done) */
    uint64_t line_pieces;   /* pieces its single document was cut into (when done; docsource.h) */
} Input;

typedef struct {
    Input *v;
    size_t n, cap;
} Inputs;

static void inputs_free(Inputs *in) {
    for (size_t i = 0; i < in->n; i++) free(in->v[i].path);
    free(in->v);
    memset(in, 0, sizeof *in);
}

static Status inputs_add(Inputs *in, const char *path, const struct stat *sb, Err *err) {
    if (in->n == in->cap) {
        size_t nc = in->cap ? 2 * in->cap : 16;
        Input *nv = realloc(in->v, nc * sizeof *nv);
        if (!nv) return err_set(err, ST_ERR_RUNTIME, "out of memory listing inputs");
        in->v = nv, in->cap = nc;
    }
    Input *x = &in->v[in->n];
    memset(x, 0, sizeof *x);
    if (!(x->path = strdup(path))) return err_set(err, ST_ERR_RUNTIME, "out of memory listing inputs");
    x->size = sb ? (long long)sb->st_size : -1;
    x->mtime = sb ? (long long)sb->st_mtim.tv_sec * 1000000000LL + sb->st_mtim.tv_nsec : 0;
    in->n++;
    return ST_OK;
}

static int cmp_input(const void *a, const void *b) { return strcmp(((const Input *)a)->path, ((const Input *)b)->path); }

/* Expands o->inputs into the list of files (directories in name order). */
static Status collect_inputs(Inputs *in, const PrepareOptions *o, Err *err) {
    for (size_t i = 0; i < o->ninputs; i++) {
        const char *p = o->inputs[i];
        struct stat sb;
        if (!strcmp(p, "-")) {
            /* a second "-" would read the end of the stream the first one consumed: nothing */
            for (size_t k = 0; k < i; k++)
                if (!strcmp(o->inputs[k], "-"))
                    return err_set(err, ST_ERR_INPUT, "-: expected standard input once among the inputs, found it "
                                   "given twice");
            Status st = inputs_add(in, p, NULL, err);
            if (st) return st;
            continue;
        }
        if (stat(p, &sb) != 0)
            return err_set(err, ST_ERR_INPUT, "%s: expected an input file or directory, found nothing there (%s)", p, strerror(errno));
        if (!S_ISDIR(sb.st_mode)) {
            Status st = inputs_add(in, p, &sb, err);
            if (st) return st;
            continue;
        }
        DIR *d = opendir(p);
        if (!d) return err_set(err, ST_ERR_INPUT, "%s: expected a readable directory, found %s", p, strerror(errno));
        size_t first = in->n;
        Status st = ST_OK;
        for (struct dirent *e; !st && (e = readdir(d));) {
            if (e->d_name[0] == '.') continue;
            char q[4096];
            snprintf(q, sizeof q, "%s/%s", p, e->d_name);
            if (stat(q, &sb) == 0 && S_ISREG(sb.st_mode)) st = inputs_add(in, q, &sb, err);
        }
        closedir(d);
        if (st) return st;
        if (in->n == first) return err_set(err, ST_ERR_INPUT, "%s: expected a directory with input files, found no regular files", p);
        qsort(in->v + first, in->n - first, sizeof *in->v, cmp_input);
    }
    if (in->n == 0) return err_set(err, ST_ERR_INPUT, "expected at least one input file, found none");
    return ST_OK;
}

/* 1 for a name prepare writes into its output directory (a shard, a loss mask, the manifest). */
static int prepare_output_name(const char *name) {
    size_t l = strlen(name);
    int shard = !strncmp(name, "train_", 6) || !strncmp(name, "val_", 4);
    return !strcmp(name, "manifest.json") ||
           (shard && ((l > 4 && !strcmp(name + l - 4, ".bin")) || (l > 5 && !strcmp(name + l - 5, ".mask"))));
}

Status prepare_check_inputs_not_outputs(const char *const *inputs, size_t n, const char *out_dir,
                                        int (*is_output)(const char *name), const char *writes, Err *err) {
    struct stat so;
    if (!out_dir || stat(out_dir, &so) != 0 || !S_ISDIR(so.st_mode)) return ST_OK; /* created later: empty */
    for (size_t i = 0; i < n; i++) {
        const char *p = inputs[i];
        struct stat sb;
        if (!strcmp(p, "-") || stat(p, &sb) != 0) continue; /* a missing input is named later */
        if (S_ISDIR(sb.st_mode) && sb.st_dev == so.st_dev && sb.st_ino == so.st_ino)
            return err_set(err, ST_ERR_INPUT, "%s: expected an input directory other than the output directory %s, "
                           "found that directory itself (the %s written there would be read as input by the next "
                           "run)", p, out_dir, writes);
        if (S_ISDIR(sb.st_mode)) continue; /* its files are read, not its subdirectories: out_dir may lie in it */
        const char *slash = strrchr(p, '/'), *base = slash ? slash + 1 : p;
        char parent[4096];
        snprintf(parent, sizeof parent, "%.*s", slash ? (int)(slash - p) + 1 : 1, slash ? p : ".");
        struct stat sp;
        if (is_output(base) && stat(parent, &sp) == 0 && sp.st_dev == so.st_dev && sp.st_ino == so.st_ino)
            return err_set(err, ST_ERR_INPUT, "%s: expected an input that is not an output of this command, found "
                           "one of the %s it writes into %s", p, writes, out_dir);
    }
    return ST_OK;
}

Status prepare_input_formats(const PrepareOptions *o, unsigned *formats, Err *err) {
    *formats = 0;
    Inputs in = {0};
    Status st = collect_inputs(&in, o, err);
    for (size_t i = 0; !st && i < in.n; i++) *formats |= 1u << docsource_format_of(in.v[i].path, o->format);
    inputs_free(&in);
    return st;
}

static DocReaderOptions reader_options(const PrepareOptions *o) {
    DocReaderOptions r = {o->format, o->separator ? o->separator : "", o->field, o->skip_bad, o->allow_invalid_utf8, 0};
    return r;
}

/* Line pieces (docs/data.md §6): a validation split is asked for, documents end at blank lines
 * (--separator ""), and the corpus is one text input, so a text without blank lines would be one
 * document and no split could be made: that input is cut into pieces at line ends instead. Only
 * there, so every corpus `prepare` accepted before gives the same shards. */
static size_t line_pieces_for(const PrepareOptions *o, const Inputs *in) {
    int asked = o->val_docs > 0 || (o->val_docs < 0 && o->val_fraction > 0);
    int blank = !(o->separator && o->separator[0]);
    return asked && blank && in->n == 1 && docsource_format_of(in->v[0].path, o->format) == PREP_FORMAT_TEXT
               ? PREP_LINE_PIECE_BYTES : 0;
}

/* ================================================================== 2. runs */

/* A record: key (hi, lo: 16 bytes) | source bytes (u64) | token count n (u32) | flags (u32: 1 = a
 * loss mask follows) | tokens (u16 or u32 each, the shards' width) | with the flag, n + 1 mask bytes
 * (1 = trained target; the last one for the EOT appended after the document). A run file:
 * "STRUN001", u64 record count, the records in increasing key. */
typedef struct {
    uint64_t hi, lo;
} Key;

#define REC_HEAD 32
#define REC_MASKED 1u
#define RUN_MAGIC "STRUN001"

static int key_cmp(Key a, Key b) { return a.hi != b.hi ? (a.hi < b.hi ? -1 : 1) : a.lo != b.lo ? (a.lo < b.lo ? -1 : 1) : 0; }

typedef struct {
    Key key;
    size_t off;                /* into RunBuf.data */
} RunIdx;

typedef struct {
    uint8_t *data;
    size_t len, cap;
    RunIdx *idx;
    size_t n, icap;
    int width;                 /* bytes per token: 2 or 4 */
    int masked;                /* records carry loss masks (--format chat) */
} RunBuf;

/* Bytes of a record of n tokens. */
static size_t rec_bytes(size_t n, int width, int masked) { return REC_HEAD + n * (size_t)width + (masked ? n + 1 : 0); }

static void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); } /* little-endian hosts (x86-64, arm64) */
static uint64_t get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

static int runbuf_add(RunBuf *rb, Key k, uint64_t src, const uint32_t *ids, size_t n, const uint8_t *mask, int eot) {
    size_t need = rec_bytes(n, rb->width, rb->masked);
    if (rb->len + need > rb->cap) {
        size_t nc = rb->cap ? rb->cap : (1u << 20);
        while (nc < rb->len + need) nc *= 2;
        uint8_t *nd = realloc(rb->data, nc);
        if (!nd) return -1;
        rb->data = nd, rb->cap = nc;
    }
    if (rb->n == rb->icap) {
        size_t nc = rb->icap ? 2 * rb->icap : 4096;
        RunIdx *ni = realloc(rb->idx, nc * sizeof *ni);
        if (!ni) return -1;
        rb->idx = ni, rb->icap = nc;
    }
    uint8_t *p = rb->data + rb->len;
    put64(p, k.hi), put64(p + 8, k.lo), put64(p + 16, src);
    uint32_t n32 = (uint32_t)n, flags = rb->masked ? REC_MASKED : 0;
    memcpy(p + 24, &n32, 4), memcpy(p + 28, &flags, 4);
    p += REC_HEAD;
    if (rb->width == 4) memcpy(p, ids, n * 4);
    else
        for (size_t i = 0; i < n; i++) {
            uint16_t v = (uint16_t)ids[i];
            memcpy(p + 2 * i, &v, 2);
        }
    if (rb->masked) memcpy(p + n * (size_t)rb->width, mask, n), p[n * (size_t)rb->width + n] = (uint8_t)eot;
    rb->idx[rb->n++] = (RunIdx){k, rb->len};
    rb->len += need;
    return 0;
}

static int cmp_runidx(const void *a, const void *b) {
    const RunIdx *x = a, *y = b;
    int c = key_cmp(x->key, y->key);
    return c ? c : (x->off < y->off ? -1 : x->off > y->off);
}

static void run_path(char *p, size_t cap, const char *out, size_t i) { snprintf(p, cap, "%s/.prepare/run_%06zu.bin", out, i); }

/* Sorts the buffer by key and writes it as run i (crash-safe); empties the buffer. */
static Status runbuf_flush(RunBuf *rb, const char *out, size_t i, Err *err) {
    qsort(rb->idx, rb->n, sizeof *rb->idx, cmp_runidx);
    char p[4200];
    run_path(p, sizeof p, out, i);
    FileAtomic f;
    Status st = file_atomic_open(&f, p, err);
    uint8_t head[16];
    memcpy(head, RUN_MAGIC, 8);
    put64(head + 8, rb->n);
    if (!st) st = file_atomic_write(&f, head, 16, err);
    /* write in key order, coalescing into 1 MiB writes */
    uint8_t *obuf = st ? NULL : malloc(1u << 20);
    size_t on = 0;
    if (!st && !obuf) st = err_set(err, ST_ERR_RUNTIME, "out of memory");
    for (size_t r = 0; r < rb->n && !st; r++) {
        const uint8_t *rec = rb->data + rb->idx[r].off;
        uint32_t nt;
        memcpy(&nt, rec + 24, 4);
        size_t len = rec_bytes(nt, rb->width, rb->masked);
        if (on + len > (1u << 20)) {
            st = file_atomic_write(&f, obuf, on, err);
            on = 0;
        }
        if (st) break;
        if (len > (1u << 20)) st = file_atomic_write(&f, rec, len, err);
        else memcpy(obuf + on, rec, len), on += len;
    }
    if (!st && on) st = file_atomic_write(&f, obuf, on, err);
    free(obuf);
    if (!st) st = file_atomic_commit(&f, err);
    file_atomic_abort(&f);
    rb->len = rb->n = 0;
    return st;
}

/* ================================================================== 3. journal */

typedef struct {
    uint64_t config;           /* hash of everything that decides the runs' contents */
    size_t runs;               /* run files written */
    int read_done;             /* phase 1 finished */
    uint64_t docs, bytes_read;
    DocSkips skips;
} Journal;

/* What decides the runs: the tokenizer, the seed, how documents are found, and the inputs. */
static uint64_t config_hash(const PrepareOptions *o, const Inputs *in, int width) {
    XXH3_state_t *s = XXH3_createState();
    ST_CHECK(s != NULL);
    XXH3_64bits_reset(s);
    uint64_t v[8] = {tokenizer_hash(o->tok), o->seed, (uint64_t)o->format, (uint64_t)o->skip_bad,
                     (uint64_t)o->allow_invalid_utf8, (uint64_t)width, in->n, 2 /* journal version */};
    XXH3_64bits_update(s, v, sizeof v);
    uint64_t lp = line_pieces_for(o, in); /* hashed only when on: other journals keep their hash */
    if (lp) XXH3_64bits_update(s, &lp, sizeof lp);
    if (o->format == PREP_FORMAT_CHAT) { /* the template decides the ids (other formats hash as before) */
        uint64_t t = 0x43484154u + (uint64_t)o->chat_template;
        XXH3_64bits_update(s, &t, sizeof t);
    }
    const char *sep = o->separator ? o->separator : "", *field = o->field ? o->field : "text";
    XXH3_64bits_update(s, sep, strlen(sep) + 1);
    XXH3_64bits_update(s, field, strlen(field) + 1);
    for (size_t i = 0; i < in->n; i++) {
        XXH3_64bits_update(s, in->v[i].path, strlen(in->v[i].path) + 1);
        long long w[2] = {in->v[i].size, in->v[i].mtime};
        XXH3_64bits_update(s, w, sizeof w);
    }
    uint64_t h = XXH3_64bits_digest(s);
    XXH3_freeState(s);
    return h;
}

static void journal_path(char *p, size_t cap, const char *out) { snprintf(p, cap, "%s/.prepare/journal.json", out); }

static Status journal_write(const char *out, const Journal *j, const Inputs *in, Err *err) {
    cJSON *o = cJSON_CreateObject();
    char hex[32];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)j->config);
    cJSON_AddStringToObject(o, "config", hex);
    cJSON_AddNumberToObject(o, "runs", (double)j->runs);
    cJSON_AddBoolToObject(o, "read_done", j->read_done);
    cJSON_AddNumberToObject(o, "docs", (double)j->docs);
    cJSON_AddNumberToObject(o, "bytes_read", (double)j->bytes_read);
    cJSON_AddNumberToObject(o, "skipped_bad_json", (double)j->skips.bad_json);
    cJSON_AddNumberToObject(o, "skipped_missing_field", (double)j->skips.missing_field);
    cJSON_AddNumberToObject(o, "skipped_bad_utf8", (double)j->skips.bad_utf8);
    cJSON_AddNumberToObject(o, "skipped_bad_chat", (double)j->skips.bad_chat);
    cJSON *a = cJSON_AddArrayToObject(o, "inputs");
    for (size_t i = 0; i < in->n; i++) {
        cJSON *x = cJSON_CreateObject();
        cJSON_AddStringToObject(x, "path", in->v[i].path);
        cJSON_AddBoolToObject(x, "done", in->v[i].done);
        cJSON_AddNumberToObject(x, "docs", (double)in->v[i].docs);
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)in->v[i].prefix);
        cJSON_AddStringToObject(x, "docs_xxh3_64", hex);
        cJSON_AddNumberToObject(x, "bytes", (double)in->v[i].raw_bytes);
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)in->v[i].checksum);
        cJSON_AddStringToObject(x, "xxh3_64", hex);
        if (in->v[i].line_pieces) cJSON_AddNumberToObject(x, "line_pieces", (double)in->v[i].line_pieces);
        cJSON_AddItemToArray(a, x);
    }
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    if (!text) return err_set(err, ST_ERR_RUNTIME, "out of memory");
    char p[4200];
    journal_path(p, sizeof p, out);
    const void *bufs[1] = {text};
    size_t lens[1] = {strlen(text)};
    Status st = file_write_atomic(p, bufs, lens, 1, err);
    free(text);
    return st;
}

/* Loads the journal when it exists and matches config; returns 1 if loaded. */
static int journal_read(const char *out, uint64_t config, Journal *j, Inputs *in) {
    char p[4200], *text = NULL;
    size_t n;
    journal_path(p, sizeof p, out);
    Err e;
    if (file_read_all(p, &text, &n, &e) != ST_OK) return 0;
    cJSON *o = cJSON_ParseWithLength(text, n);
    free(text);
    char hex[32];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)config);
    cJSON *c = cJSON_GetObjectItemCaseSensitive(o, "config"), *a = cJSON_GetObjectItemCaseSensitive(o, "inputs");
    int ok = cJSON_IsString(c) && !strcmp(c->valuestring, hex) && cJSON_IsArray(a) &&
             (size_t)cJSON_GetArraySize(a) == in->n;
#define NUM(obj, name) (cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(obj, name)) ? \
                        cJSON_GetObjectItemCaseSensitive(obj, name)->valuedouble : 0.0)
    if (ok) {
        j->runs = (size_t)NUM(o, "runs");
        j->read_done = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "read_done"));
        j->docs = (uint64_t)NUM(o, "docs");
        j->bytes_read = (uint64_t)NUM(o, "bytes_read");
        j->skips.bad_json = (uint64_t)NUM(o, "skipped_bad_json");
        j->skips.missing_field = (uint64_t)NUM(o, "skipped_missing_field");
        j->skips.bad_utf8 = (uint64_t)NUM(o, "skipped_bad_utf8");
        j->skips.bad_chat = (uint64_t)NUM(o, "skipped_bad_chat");
        for (size_t i = 0; i < in->n; i++) {
            cJSON *x = cJSON_GetArrayItem(a, (int)i), *h = cJSON_GetObjectItemCaseSensitive(x, "xxh3_64");
            cJSON *dh = cJSON_GetObjectItemCaseSensitive(x, "docs_xxh3_64");
            in->v[i].prefix = cJSON_IsString(dh) ? strtoull(dh->valuestring, NULL, 16) : 0;
            in->v[i].done = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(x, "done"));
            in->v[i].docs = (uint64_t)NUM(x, "docs");
            in->v[i].raw_bytes = (uint64_t)NUM(x, "bytes");
            in->v[i].checksum = cJSON_IsString(h) ? strtoull(h->valuestring, NULL, 16) : 0;
            in->v[i].line_pieces = (uint64_t)NUM(x, "line_pieces");
        }
    }
#undef NUM
    cJSON_Delete(o);
    return ok;
}

/* Removes the runs, temporaries and journal in out/.prepare (and the directory). The journal
 * goes first: a kill part-way then leaves runs no journal names (a fresh start, which clears
 * them), never a journal that names runs already removed (every later call failed on them). */
static void work_dir_clear(const char *out, int rmdir_too) {
    char d[4200], jp[4300];
    snprintf(d, sizeof d, "%s/.prepare", out);
    journal_path(jp, sizeof jp, out);
    Err fe;
    if (unlink(jp) == 0) file_fsync_dir(d, &fe); /* the removal durable before the runs go */
    DIR *dir = opendir(d);
    if (dir) {
        for (struct dirent *e; (e = readdir(dir));) {
            if (e->d_name[0] == '.') continue;
            char p[4600];
            snprintf(p, sizeof p, "%s/%s", d, e->d_name);
            unlink(p);
        }
        closedir(dir);
    }
    if (rmdir_too) rmdir(d);
}

/* ================================================================== 4. phase 1: read and encode */

#define BATCH_BYTES (4u << 20)
#define BATCH_DOCS 65536

typedef struct {
    uint8_t *text;             /* the batch's documents, back to back */
    size_t tlen, tcap;
    size_t *off, *len;
    Key *key;
    size_t *idoff, *nids;      /* a document's ids: task buffer tids[its task] + idoff, nids of them */
    size_t n, cap;
    /* encoding tasks: task t encodes documents [tfirst[t], tfirst[t + 1] or n) into tids[t] */
    uint32_t **tids;
    size_t *tn, *tcap_ids, *tfirst;
    size_t ntask, taskcap;
    /* chat: task t's mask bytes beside tids[t] (tmask[t][j] for tids[t][j]), each document's EOT flag */
    const ChatFormat *chat;    /* NULL: plain encoding, no masks */
    uint8_t **tmask;
    size_t *tmcap;
    uint8_t *eot_trained;
    /* where the reader stood after the batch's last document: applied to the inputs when the batch
     * is in the run buffer, so the journal never counts a document that is not in a written run */
    size_t input;              /* the input its documents come from (a batch never spans two) */
    uint64_t input_docs;       /* documents of that input read so far */
    uint64_t input_prefix;     /* and their XXH3-64 (Input.prefix) */
    int input_done;            /* the batch ends the input: */
    uint64_t raw_bytes, checksum; /* the input's size as read and XXH3-64 */
    uint64_t line_pieces;      /* and the pieces its single document was cut into */
    DocSkips skips;            /* and its skipped records */
    int failed;                /* an encoding task failed: */
    Err efail;
} Batch;

static void batch_free(Batch *b) {
    for (size_t t = 0; t < b->taskcap; t++) free(b->tids[t]), free(b->tmask ? b->tmask[t] : NULL);
    free(b->text), free(b->off), free(b->len), free(b->key), free(b->idoff), free(b->nids);
    free(b->tids), free(b->tn), free(b->tcap_ids), free(b->tfirst);
    free(b->tmask), free(b->tmcap), free(b->eot_trained);
    memset(b, 0, sizeof *b);
}

static int batch_add(Batch *b, const uint8_t *p, size_t n) {
    if (b->n == b->cap) {
        size_t nc = b->cap ? 2 * b->cap : 1024;
        size_t *o2 = realloc(b->off, nc * sizeof *o2);
        if (o2) b->off = o2;
        size_t *l2 = realloc(b->len, nc * sizeof *l2);
        if (l2) b->len = l2;
        Key *k2 = realloc(b->key, nc * sizeof *k2);
        if (k2) b->key = k2;
        size_t *i2 = realloc(b->idoff, nc * sizeof *i2);
        if (i2) b->idoff = i2;
        size_t *n2 = realloc(b->nids, nc * sizeof *n2);
        if (n2) b->nids = n2;
        uint8_t *e2 = realloc(b->eot_trained, nc);
        if (e2) b->eot_trained = e2;
        if (!o2 || !l2 || !k2 || !i2 || !n2 || !e2) return -1;
        b->cap = nc;
    }
    if (b->tlen + n > b->tcap) {
        size_t nc = b->tcap ? b->tcap : BATCH_BYTES + (1u << 16);
        while (nc < b->tlen + n) nc *= 2;
        uint8_t *nt = realloc(b->text, nc);
        if (!nt) return -1;
        b->text = nt, b->tcap = nc;
    }
    memcpy(b->text + b->tlen, p, n);
    b->off[b->n] = b->tlen, b->len[b->n] = n;
    b->tlen += n;
    b->n++;
    return 0;
}

typedef struct {
    const PrepareOptions *o;
    Inputs *in;
    Journal *j;
    RunBuf rb;
    Batch b[2];                /* one filled by the reading thread while the other is encoded */
    int threads;
    size_t runs_this_call;
    double t0;
    uint64_t bytes_total;
    size_t batch_bytes;        /* BATCH_BYTES, or a quarter of a small run budget */
} Reader;

/* Task t: keys documents [a, e) of the batch and encodes them one after another into tids[t]. */
static void batch_encode_range(Batch *b, const PrepareOptions *o, size_t t, size_t a, size_t e) {
    b->tn[t] = 0;
    for (size_t i = a; i < e; i++) {
        const uint8_t *p = b->text + b->off[i];
        XXH128_hash_t h = XXH3_128bits_withSeed(p, b->len[i], o->seed);
        b->key[i] = (Key){h.high64, h.low64};
        Err e2;
        b->idoff[i] = b->tn[t];
        int et = 0;
        Status st = b->chat ? chat_render(b->chat, o->tok, p, b->len[i], 0, &b->tids[t], &b->tn[t], &b->tcap_ids[t],
                                          &b->tmask[t], &b->tmcap[t], &et, &e2)
                            : tokenizer_encode(o->tok, p, b->len[i], &b->tids[t], &b->tn[t], &b->tcap_ids[t], &e2);
        b->eot_trained[i] = (uint8_t)et;
        if (st) { /* appends */
#pragma omp critical(prepare_encode_failed)
            if (!b->failed) b->failed = 1, b->efail = e2;
            b->tn[t] = b->idoff[i];
        }
        b->nids[i] = b->tn[t] - b->idoff[i];
    }
}

/* Hands the batch to the team as tasks of about 256 KiB of text each; returns at once (0), or -1
 * when out of memory for the task table. */
static int batch_spawn(Batch *b, const PrepareOptions *o) {
    b->ntask = 0;
    for (size_t a = 0; a < b->n;) {
        size_t e = a, bytes = 0;
        while (e < b->n && (e == a || bytes < (256u << 10))) bytes += b->len[e++];
        if (b->ntask == b->taskcap) {
            size_t nc = b->taskcap ? 2 * b->taskcap : 64;
            uint32_t **t1 = realloc(b->tids, nc * sizeof *t1);
            if (t1) b->tids = t1;
            size_t *t2 = realloc(b->tn, nc * sizeof *t2);
            if (t2) b->tn = t2;
            size_t *t3 = realloc(b->tcap_ids, nc * sizeof *t3);
            if (t3) b->tcap_ids = t3;
            size_t *t4 = realloc(b->tfirst, nc * sizeof *t4);
            if (t4) b->tfirst = t4;
            uint8_t **t5 = realloc(b->tmask, nc * sizeof *t5);
            if (t5) b->tmask = t5;
            size_t *t6 = realloc(b->tmcap, nc * sizeof *t6);
            if (t6) b->tmcap = t6;
            if (!t1 || !t2 || !t3 || !t4 || !t5 || !t6) return -1;
            for (size_t t = b->taskcap; t < nc; t++) b->tids[t] = NULL, b->tcap_ids[t] = 0, b->tmask[t] = NULL, b->tmcap[t] = 0;
            b->taskcap = nc;
        }
        size_t t = b->ntask++;
        b->tfirst[t] = a;
#pragma omp task firstprivate(t, a, e)
        batch_encode_range(b, o, t, a, e);
        a = e;
    }
    return 0;
}

/* Writes the run buffer as the next run, then the journal that says what it holds. */
static Status flush_run(Reader *R, Err *err) {
    if (R->rb.n == 0) return ST_OK;
    Status st = runbuf_flush(&R->rb, R->o->out_dir, R->j->runs, err);
    if (st) return st;
    R->j->runs++;
    if ((st = journal_write(R->o->out_dir, R->j, R->in, err)) != ST_OK) return st;
    R->runs_this_call++;
    if (R->o->fault_after_runs && (int)R->runs_this_call >= R->o->fault_after_runs)
        return err_set(err, ST_ERR_RUNTIME, "prepare: interrupted (fault injected after %zu runs)", R->runs_this_call);
    return ST_OK;
}

/* After the batch's tasks ended: its records into the run buffer and the reader position it
 * carries into the inputs. */
static Status batch_finish(Reader *R, Batch *b, Err *err) {
    if (b->failed) {
        b->failed = 0;
        if (err) *err = b->efail;
        return b->efail.status;
    }
    for (size_t t = 0; t < b->ntask; t++) {
        size_t e = t + 1 < b->ntask ? b->tfirst[t + 1] : b->n;
        for (size_t i = b->tfirst[t]; i < e; i++)
            if (runbuf_add(&R->rb, b->key[i], b->len[i], b->tids[t] + b->idoff[i], b->nids[i],
                           b->chat ? b->tmask[t] + b->idoff[i] : NULL, b->chat ? b->eot_trained[i] : 0))
                return err_set(err, ST_ERR_RUNTIME, "prepare: out of memory (run buffer)");
    }
    R->j->docs += b->n;
    Input *x = &R->in->v[b->input];
    x->docs = b->input_docs, x->prefix = b->input_prefix;
    if (b->input_done) {
        x->done = 1;
        x->raw_bytes = b->raw_bytes;
        x->checksum = b->checksum;
        x->line_pieces = b->line_pieces;
        R->j->skips.bad_json += b->skips.bad_json, R->j->skips.missing_field += b->skips.missing_field;
        R->j->skips.bad_utf8 += b->skips.bad_utf8, R->j->skips.bad_chat += b->skips.bad_chat;
        R->j->bytes_read += b->raw_bytes;
    }
    b->n = b->tlen = 0;
    b->input_done = 0;
    return ST_OK;
}

/* Gives the filled batch *cur to the team and takes the other one for reading: first waits for
 * the batch in flight (*busy) and finishes it, so batches reach the run buffer in reading order;
 * a full run buffer is sorted and written while the team encodes *cur. */
static Status batch_submit(Reader *R, Batch **cur, Batch **busy, Err *err) {
    Batch *next = *cur == &R->b[0] ? &R->b[1] : &R->b[0];
    if (*busy) {
#pragma omp taskwait
        Status st = batch_finish(R, *busy, err);
        *busy = NULL;
        if (st) return st;
    }
    if (batch_spawn(*cur, R->o)) return err_set(err, ST_ERR_RUNTIME, "prepare: out of memory (tasks)");
    *busy = *cur;
    *cur = next;
    return R->rb.len >= R->o->run_bytes ? flush_run(R, err) : ST_OK;
}

static void report(Reader *R, uint64_t done, uint64_t docs) {
    if (!R->o->progress) return;
    PrepareProgress p = {1, done, R->bytes_total, docs, omp_get_wtime() - R->t0};
    R->o->progress(R->o->progress_ctx, &p);
}

/* An input resumed with other documents than the journal's (standard input, or a file changed
 * without changing its size or mtime). */
static Status resume_mismatch(const PrepareOptions *o, const Input *x, uint64_t seen, Err *err) {
    const char *name = strcmp(x->path, "-") ? x->path : "<stdin>";
    return err_set(err, ST_ERR_INPUT,
                   "%s: expected the %s an interrupted prepare into %s was reading (its first %llu documents, XXH3 "
                   "%016llx), found %s: give the same input again, or remove %s/.prepare to start afresh",
                   name, strcmp(x->path, "-") ? "file" : "stream", o->out_dir, (unsigned long long)x->docs,
                   (unsigned long long)x->prefix, seen < x->docs ? "fewer documents" : "other documents", o->out_dir);
}

/* The reading thread: documents into batches, batches to the team (runs inside omp single). An
 * input the journal has started is read from its first document: those already in runs are
 * hashed and checked against the journal's hash, not added again; a finished standard input is
 * read through and checked the same way (a finished file is not opened: its size and mtime). */
static Status read_loop(Reader *R, Err *err) {
    const PrepareOptions *o = R->o;
    DocReaderOptions ro = reader_options(o);
    ro.line_pieces = line_pieces_for(o, R->in);
    Batch *cur = &R->b[0], *busy = NULL;
    uint64_t done_before = 0, docs = R->j->docs; /* input bytes of finished inputs; documents read */
    XXH3_state_t *xs = XXH3_createState();
    Status st = xs ? ST_OK : err_set(err, ST_ERR_RUNTIME, "out of memory");
    for (size_t i = 0; i < R->in->n && !st; i++) {
        Input *x = &R->in->v[i];
        int check_done = x->done && !strcmp(x->path, "-");
        if (x->done && !check_done) {
            done_before += x->size > 0 ? (uint64_t)x->size : x->raw_bytes;
            continue;
        }
        DocReader *dr = NULL;
        if ((st = docreader_open(&dr, x->path, &ro, err)) != ST_OK) break;
        XXH3_64bits_reset(xs);
        uint64_t skip = x->docs; /* documents of this input already in runs (an interrupted call) */
        uint64_t seen = 0, last_report = 0;
        for (;;) {
            const uint8_t *d;
            size_t n;
            if ((st = docreader_next(dr, &d, &n, err)) != ST_OK || !d) break;
            uint64_t len = n;
            XXH3_64bits_update(xs, &len, sizeof len);
            XXH3_64bits_update(xs, d, n);
            if (seen++ < skip) {
                if (seen == skip && XXH3_64bits_digest(xs) != x->prefix) st = resume_mismatch(o, x, seen, err);
                if (st) break;
                continue;
            }
            if (check_done) {
                st = resume_mismatch(o, x, seen, err); /* more documents than the finished stream */
                break;
            }
            docs++;
            if (batch_add(cur, d, n)) {
                st = err_set(err, ST_ERR_RUNTIME, "prepare: out of memory (batch)");
                break;
            }
            if (cur->tlen >= R->batch_bytes || cur->n >= BATCH_DOCS) {
                cur->input = i, cur->input_docs = seen, cur->input_prefix = XXH3_64bits_digest(xs);
                if ((st = batch_submit(R, &cur, &busy, err)) != ST_OK) break;
                uint64_t rb = docreader_raw_bytes(dr);
                if (rb - last_report >= (8u << 20)) report(R, done_before + rb, docs), last_report = rb;
            }
        }
        if (!st && seen < skip) st = resume_mismatch(o, x, seen, err);
        if (!st && check_done) {
            done_before += x->raw_bytes;
        } else if (!st) { /* the input's last batch carries its end */
            cur->input = i, cur->input_docs = seen, cur->input_done = 1, cur->input_prefix = XXH3_64bits_digest(xs);
            cur->raw_bytes = docreader_raw_bytes(dr), cur->checksum = docreader_checksum(dr);
            cur->line_pieces = docreader_line_pieces(dr);
            cur->skips = *docreader_skips(dr);
            done_before += cur->raw_bytes;
            st = batch_submit(R, &cur, &busy, err);
            report(R, done_before, docs);
        }
        docreader_close(dr);
    }
#pragma omp taskwait
    if (busy && !st) st = batch_finish(R, busy, err);
    XXH3_freeState(xs);
    return st;
}

/* Phase 1 over the inputs not finished by an earlier call: one thread reads while the others
 * (and the reader, when it waits) encode. */
static Status read_inputs(Reader *R, Err *err) {
    Status st = ST_OK;
#pragma omp parallel num_threads(R->threads)
#pragma omp single
    st = read_loop(R, err);
    if (st) return st;
    if ((st = flush_run(R, err)) != ST_OK) return st;
    R->j->read_done = 1;
    return journal_write(R->o->out_dir, R->j, R->in, err);
}

/* ================================================================== 5. phase 2: merge */

typedef struct {
    FILE *f;
    char path[4200];
    uint64_t left;             /* records not yet read */
    Key key;                   /* current record */
    uint64_t src;
    uint32_t ntok;
    uint32_t flags;            /* REC_MASKED: n + 1 mask bytes follow the tokens */
    int live;
} RunReader;

static Status rr_next(RunReader *r, Err *err) {
    if (r->left == 0) {
        r->live = 0;
        return ST_OK;
    }
    uint8_t h[REC_HEAD];
    if (fread(h, 1, REC_HEAD, r->f) != REC_HEAD)
        return err_set(err, ST_ERR_RUNTIME, "%s: expected %llu more records, found the end of the file", r->path,
                       (unsigned long long)r->left);
    r->key = (Key){get64(h), get64(h + 8)};
    r->src = get64(h + 16);
    memcpy(&r->ntok, h + 24, 4);
    memcpy(&r->flags, h + 28, 4);
    r->left--;
    r->live = 1;
    return ST_OK;
}

typedef struct {
    const PrepareOptions *o;
    const char *prefix;
    ShardWriter w;
    int open;
    size_t shards;
    uint64_t tokens, src;
    ShardMeta meta;
    /* chat: the open shard's loss mask, packed bits (shard.h), written beside it at commit */
    int masked;
    uint8_t *bits;
    size_t bits_cap;           /* bytes */
    uint64_t trained;          /* trained targets of the split */
} SplitWriter;

/* Records the mask bits of k tokens just appended to the open shard (mask NULL: all `fill`). */
static Status sw_mask_add(SplitWriter *s, const uint8_t *mask, int fill, size_t k, Err *err) {
    if (!s->masked) return ST_OK;
    size_t first = s->w.n - k, need = (s->w.n + 7) / 8;
    if (need > s->bits_cap) {
        size_t nc = s->bits_cap ? 2 * s->bits_cap : 4096;
        while (nc < need) nc *= 2;
        uint8_t *nb = realloc(s->bits, nc);
        if (!nb) return err_set(err, ST_ERR_RUNTIME, "prepare: out of memory (loss mask)");
        memset(nb + s->bits_cap, 0, nc - s->bits_cap);
        s->bits = nb, s->bits_cap = nc;
    }
    for (size_t j = 0; j < k; j++)
        if (mask ? mask[j] : fill) {
            size_t i = first + j;
            s->bits[i >> 3] |= (uint8_t)(1u << (i & 7));
            s->trained++;
        }
    return ST_OK;
}

static Status sw_commit(SplitWriter *s, int *shards_this_call, Err *err) {
    if (!s->open) return ST_OK;
    char path[sizeof s->w.f.path];
    memcpy(path, s->w.f.path, sizeof path);
    size_t n = s->w.n;
    Status st = shard_writer_commit(&s->w, s->src, err);
    shard_writer_abort(&s->w);
    s->open = 0;
    /* the mask after its shard: it carries the hash of the shard's committed tokens */
    if (!st && s->masked) {
        st = shard_mask_write(path, s->bits, n, err);
        memset(s->bits, 0, s->bits_cap);
    }
    if (st) return st;
    s->shards++;
    s->src = 0;
    ++*shards_this_call;
    if (s->o->fault_after_shards && *shards_this_call >= s->o->fault_after_shards)
        return err_set(err, ST_ERR_RUNTIME, "prepare: interrupted (fault injected after %d shards)", *shards_this_call);
    return ST_OK;
}

/* Appends a document's ids and EOT, starting a new shard when one is full (a document may span two
 * shards; its source bytes count where its EOT is). mask (chat): n + 1 bytes, the EOT's last. */
static Status sw_add(SplitWriter *s, const uint32_t *ids, const uint8_t *mask, size_t n, uint32_t eot, uint64_t doc_bytes,
                     int *nsh, Err *err) {
    size_t i = 0;
    for (;;) {
        if (s->open && s->w.n == s->o->shard_tokens) {
            Status st = sw_commit(s, nsh, err);
            if (st) return st;
        }
        if (!s->open) {
            char p[4200];
            snprintf(p, sizeof p, "%s/.prepare/%s_%06zu.bin", s->o->out_dir, s->prefix, s->shards); /* staged */
            Status st = shard_writer_open(&s->w, p, &s->meta, err);
            if (st) return st;
            s->open = 1;
        }
        size_t room = s->o->shard_tokens - s->w.n;
        if (i == n) {
            s->tokens++;
            s->src += doc_bytes;
            Status st = shard_writer_append(&s->w, &eot, 1, err);
            return st ? st : sw_mask_add(s, mask ? mask + n : NULL, 0, 1, err);
        }
        size_t k = n - i < room ? n - i : room;
        Status st = shard_writer_append(&s->w, ids + i, k, err);
        if (!st) st = sw_mask_add(s, mask ? mask + i : NULL, 0, k, err);
        if (st) return st;
        s->tokens += k;
        i += k;
    }
}

typedef struct {
    RunReader *r;
    size_t n;
    size_t *heap, nh;
} Merge;

static int mless(const Merge *m, size_t a, size_t b) {
    int c = key_cmp(m->r[a].key, m->r[b].key);
    return c ? c < 0 : a < b;
}

static void heap_down(Merge *m, size_t i) {
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, s = i;
        if (l < m->nh && mless(m, m->heap[l], m->heap[s])) s = l;
        if (r < m->nh && mless(m, m->heap[r], m->heap[s])) s = r;
        if (s == i) return;
        size_t t = m->heap[i];
        m->heap[i] = m->heap[s], m->heap[s] = t;
        i = s;
    }
}

/* Reads the tokens of run r's current record into *buf (u32), then advances r and the heap. */
static Status merge_take(Merge *m, int width, uint32_t **buf, size_t *cap, uint8_t **mbuf, size_t *mcap, Key *k,
                         uint64_t *src, size_t *ntok, Err *err) {
    RunReader *r = &m->r[m->heap[0]];
    *k = r->key, *src = r->src, *ntok = r->ntok;
    if ((r->flags & REC_MASKED) && *ntok + 1 > *mcap) {
        size_t nc = *mcap ? *mcap : 4096;
        while (nc < *ntok + 1) nc *= 2;
        uint8_t *nb = realloc(*mbuf, nc);
        if (!nb) return err_set(err, ST_ERR_RUNTIME, "prepare: out of memory (a document of %zu tokens)", *ntok);
        *mbuf = nb, *mcap = nc;
    }
    if (*ntok > *cap) {
        size_t nc = *cap ? *cap : 4096;
        while (nc < *ntok) nc *= 2;
        uint32_t *nb = realloc(*buf, nc * sizeof *nb);
        if (!nb) return err_set(err, ST_ERR_RUNTIME, "prepare: out of memory (a document of %zu tokens)", *ntok);
        *buf = nb, *cap = nc;
    }
    if (width == 4) {
        if (fread(*buf, 4, *ntok, r->f) != *ntok) return err_set(err, ST_ERR_RUNTIME, "%s: truncated run", r->path);
    } else {
        uint16_t *t = (uint16_t *)*buf + *ntok; /* read u16 into the upper half, widen in place from the front */
        if (fread(t, 2, *ntok, r->f) != *ntok) return err_set(err, ST_ERR_RUNTIME, "%s: truncated run", r->path);
        for (size_t i = 0; i < *ntok; i++) (*buf)[i] = t[i];
    }
    if ((r->flags & REC_MASKED) && fread(*mbuf, 1, *ntok + 1, r->f) != *ntok + 1)
        return err_set(err, ST_ERR_RUNTIME, "%s: truncated run", r->path);
    Status st = rr_next(r, err);
    if (st) return st;
    if (!r->live) m->heap[0] = m->heap[--m->nh];
    if (m->nh) heap_down(m, 0);
    return ST_OK;
}

/* Opens runs 0..nruns-1 of out_dir and heaps them by their first key. */
static Status merge_open(Merge *m, const char *out_dir, size_t nruns, Err *err) {
    m->r = calloc(nruns + 1, sizeof *m->r);
    m->heap = calloc(nruns + 1, sizeof *m->heap);
    if (!m->r || !m->heap) return err_set(err, ST_ERR_RUNTIME, "out of memory");
    for (size_t i = 0; i < nruns; i++) {
        RunReader *r = &m->r[i];
        run_path(r->path, sizeof r->path, out_dir, i);
        if (!(r->f = fopen(r->path, "rb")))
            return err_set(err, ST_ERR_RUNTIME, "%s: cannot open a run (%s)", r->path, strerror(errno));
        m->n++;
        setvbuf(r->f, NULL, _IOFBF, 256u << 10);
        uint8_t h[16];
        if (fread(h, 1, 16, r->f) != 16 || memcmp(h, RUN_MAGIC, 8))
            return err_set(err, ST_ERR_RUNTIME, "%s: expected a run file, found another file", r->path);
        r->left = get64(h + 8);
        Status st = rr_next(r, err);
        if (st) return st;
        if (r->live) m->heap[m->nh++] = i;
    }
    for (size_t i = m->nh; i-- > 0;) heap_down(m, i);
    return ST_OK;
}

static void merge_close(Merge *m) {
    for (size_t i = 0; i < m->n; i++)
        if (m->r[i].f) fclose(m->r[i].f);
    free(m->r);
    free(m->heap);
}

static void split_writers_init(SplitWriter sw[2], const PrepareOptions *o) {
    uint32_t eot = tokenizer_eot(o->tok), vocab = tokenizer_vocab_size(o->tok);
    for (int w = 0; w < 2; w++) {
        sw[w].o = o;
        sw[w].prefix = w ? "val" : "train";
        sw[w].meta.tokenizer_hash = tokenizer_hash(o->tok);
        sw[w].meta.vocab_size = vocab;
        /* word [8] only where it says something: shards of EOT-last tokenizers stay as before */
        sw[w].meta.eot_plus1 = eot + 1 == vocab ? 0 : eot + 1;
        sw[w].meta.version = o->shard_version;
        sw[w].masked = o->format == PREP_FORMAT_CHAT;
    }
}

/* A validation split was asked for (--val-fraction > 0 or --val-docs > 0) but one side came out
 * empty: the corpus has a single distinct document (a text file without separator lines is one
 * document), or --val-docs takes them all. Refused before any shard is published, saying what to
 * change (issue 26: `train --val-data` would otherwise stop on a missing val_*.bin). `text`: some
 * input is read as text, so the separator is worth naming. */
static Status check_split(const PrepareOptions *o, const char *what, int text, const PrepareStats *s,
                          uint64_t train_distinct, uint64_t val_distinct, Err *err) {
    int asked = o->val_docs > 0 || (o->val_docs < 0 && o->val_fraction > 0);
    if (!asked || (val_distinct > 0 && train_distinct > 0)) return ST_OK;
    size_t unique = (size_t)(val_distinct + train_distinct);
    char hint[512] = "";
    if (text) {
        const char *sep = o->separator ? o->separator : "";
        if (*sep)
            snprintf(hint, sizeof hint, " (text is cut into documents at lines \"%s\", and there are none): give "
                     "--separator \"\" to cut at blank lines, or give", sep);
        else if (s->line_pieces)
            snprintf(hint, sizeof hint, " (text is cut into documents at blank lines with --separator \"\", and a "
                     "text without any into pieces of at least %d bytes at line ends: this one gave %llu piece%s, "
                     "%zu distinct, and two need at least %d bytes with a line end between): give a longer text, or "
                     "give", PREP_LINE_PIECE_BYTES, (unsigned long long)s->line_pieces, s->line_pieces == 1 ? "" : "s",
                     unique, 2 * PREP_LINE_PIECE_BYTES);
        else
            snprintf(hint, sizeof hint, " (text is cut into documents at blank lines with --separator \"\", and "
                     "there are none): cut the text into paragraphs or give a separator line with --separator, or give");
    }
    /* a single document may fall under the --val-fraction threshold: it is the same error (found 1) */
    if (unique < 2)
        return err_set(err, ST_ERR_INPUT,
                       "%s: expected at least 2 distinct documents for a validation split, found %zu%s "
                       "--val-fraction 0 for no validation split (then train without --val-data)",
                       what, unique, *hint ? hint : ": give");
    if (o->val_docs < 0)
        return err_set(err, ST_ERR_INPUT,
                       "--val-fraction %g: expected at least one training document, found all %zu distinct documents "
                       "of %s under the validation threshold (docs/data.md §6): give a smaller --val-fraction or more "
                       "documents", o->val_fraction, unique, what);
    return err_set(err, ST_ERR_INPUT,
                   "--val-docs %ld: expected fewer than the %zu distinct documents of %s, found all of them taken "
                   "for validation (no training document left)", o->val_docs, unique, what);
}

/* Phase 2: the runs merged by key into the train and val shards (docs/data.md §6). `what` names the
 * inputs in errors, `text` as in check_split. */
static Status merge_runs(const PrepareOptions *o, const char *what, int text, size_t nruns, int width, PrepareStats *s,
                         Err *err) {
    Merge m = {0};
    SplitWriter sw[2];
    memset(sw, 0, sizeof sw);
    split_writers_init(sw, o);
    uint32_t *buf = NULL, eot = tokenizer_eot(o->tok);
    uint8_t *mbuf = NULL;
    size_t cap = 0, mcap = 0;
    int nsh = 0;
    /* validation: high 64 key bits below val_fraction * 2^64 (computed in long double) */
    uint64_t thr = (uint64_t)((long double)o->val_fraction * 18446744073709551616.0L), unique = 0, merged = 0;
    uint64_t distinct_val = 0;
    Key last = {0, 0};
    int last_val = 0;
    double t0 = omp_get_wtime();
    Status st = merge_open(&m, o->out_dir, nruns, err);
    while (!st && m.nh) {
        Key k;
        uint64_t src;
        size_t nt;
        if ((st = merge_take(&m, width, &buf, &cap, &mbuf, &mcap, &k, &src, &nt, err)) != ST_OK) break;
        merged++;
        int copy = unique && key_cmp(k, last) == 0; /* the same document again (records of a key are adjacent) */
        if (o->dedup && copy) {
            s->duplicates++;
            continue;
        }
        int val;
        if (copy) {
            val = last_val; /* --no-dedup: a copy goes where its first went, never to the other split */
        } else {
            val = o->val_docs >= 0 ? unique < (uint64_t)o->val_docs : k.hi < thr;
            /* nothing under the threshold before the smallest key: it goes to validation (a fraction > 0
             * never leaves >= 2 distinct documents without a val split; with one, check_split refuses) */
            if (!val && o->val_docs < 0 && unique == 0 && o->val_fraction > 0) val = 1;
            unique++;
            distinct_val += val;
        }
        last = k, last_val = val;
        if ((st = sw_add(&sw[val], buf, sw[val].masked ? mbuf : NULL, nt, eot, src, &nsh, err)) != ST_OK) break;
        if (val) s->val_docs++;
        else s->train_docs++, s->nopack_rows += o->seq_len > 0 ? loader_nopack_rows(nt + 1, o->seq_len) : 0;
        s->bytes += src;
        if (o->progress && (merged & 0xffff) == 0) {
            PrepareProgress p = {2, merged, s->docs, s->docs, omp_get_wtime() - t0};
            o->progress(o->progress_ctx, &p);
        }
    }
    if (!st) st = check_split(o, what, text, s, unique - distinct_val, distinct_val, err);
    for (int w = 0; w < 2 && !st; w++) st = sw_commit(&sw[w], &nsh, err);
    if (!st && o->progress) {
        PrepareProgress p = {2, merged, s->docs, s->docs, omp_get_wtime() - t0};
        o->progress(o->progress_ctx, &p);
    }
    s->train_tokens = sw[0].tokens, s->val_tokens = sw[1].tokens;
    s->train_shards = sw[0].shards, s->val_shards = sw[1].shards;
    s->train_trained = sw[0].trained, s->val_trained = sw[1].trained;
    for (int w = 0; w < 2; w++) {
        if (sw[w].open) shard_writer_abort(&sw[w].w);
        free(sw[w].bits);
    }
    merge_close(&m);
    free(buf);
    free(mbuf);
    return st;
}

/* ================================================================== 6. manifest */

static Status write_manifest(const PrepareOptions *o, const Inputs *in, const PrepareStats *s, int width, Err *err) {
    char hex[32];
    cJSON *m = cJSON_CreateObject();
    cJSON_AddNumberToObject(m, "manifest_version", 1);
    if (o->argv_line) cJSON_AddStringToObject(m, "command", o->argv_line);
    cJSON *t = cJSON_AddObjectToObject(m, "tokenizer");
    cJSON_AddStringToObject(t, "kind", tokenizer_kind(o->tok));
    if (o->tokenizer_arg) cJSON_AddStringToObject(t, "name", o->tokenizer_arg);
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)tokenizer_hash(o->tok));
    cJSON_AddStringToObject(t, "hash", hex);
    cJSON_AddNumberToObject(t, "vocab_size", tokenizer_vocab_size(o->tok));
    cJSON_AddNumberToObject(t, "eot", tokenizer_eot(o->tok));
    cJSON *f = cJSON_AddObjectToObject(m, "options");
    const char *fmt[] = {"auto", "text", "jsonl", "wikitext", "chat"};
    cJSON_AddStringToObject(f, "format", fmt[o->format]);
    if (o->format == PREP_FORMAT_CHAT) cJSON_AddStringToObject(f, "chat_template", chat_template_name(s->chat_template));
    cJSON_AddStringToObject(f, "separator", o->separator ? o->separator : "");
    cJSON_AddStringToObject(f, "field", o->field ? o->field : "text");
    cJSON_AddNumberToObject(f, "val_fraction", o->val_fraction);
    cJSON_AddNumberToObject(f, "val_docs", (double)o->val_docs);
    snprintf(hex, sizeof hex, "%llu", (unsigned long long)o->seed);
    cJSON_AddStringToObject(f, "seed", hex);
    cJSON_AddBoolToObject(f, "dedup", o->dedup);
    cJSON_AddBoolToObject(f, "skip_bad", o->skip_bad);
    cJSON_AddBoolToObject(f, "allow_invalid_utf8", o->allow_invalid_utf8);
    cJSON_AddNumberToObject(f, "shard_tokens", (double)o->shard_tokens);
    cJSON_AddNumberToObject(f, "shard_version", width == 4 ? 7 : 1);
    cJSON *a = cJSON_AddArrayToObject(m, "inputs");
    for (size_t i = 0; i < in->n; i++) {
        cJSON *x = cJSON_CreateObject();
        cJSON_AddStringToObject(x, "path", in->v[i].path);
        cJSON_AddNumberToObject(x, "bytes", (double)in->v[i].raw_bytes);
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)in->v[i].checksum);
        cJSON_AddStringToObject(x, "xxh3_64", hex);
        cJSON_AddNumberToObject(x, "documents", (double)in->v[i].docs);
        if (in->v[i].line_pieces) cJSON_AddNumberToObject(x, "line_pieces", (double)in->v[i].line_pieces);
        cJSON_AddItemToArray(a, x);
    }
    cJSON *r = cJSON_AddObjectToObject(m, "result");
    cJSON_AddNumberToObject(r, "documents", (double)s->docs);
    cJSON_AddNumberToObject(r, "duplicates_dropped", (double)s->duplicates);
    cJSON_AddNumberToObject(r, "skipped_bad_json", (double)s->skips.bad_json);
    cJSON_AddNumberToObject(r, "skipped_missing_field", (double)s->skips.missing_field);
    cJSON_AddNumberToObject(r, "skipped_bad_utf8", (double)s->skips.bad_utf8);
    if (o->format == PREP_FORMAT_CHAT) cJSON_AddNumberToObject(r, "skipped_bad_chat", (double)s->skips.bad_chat);
    cJSON_AddNumberToObject(r, "train_documents", (double)s->train_docs);
    cJSON_AddNumberToObject(r, "val_documents", (double)s->val_docs);
    cJSON_AddNumberToObject(r, "bytes", (double)s->bytes);
    cJSON_AddNumberToObject(r, "train_tokens", (double)s->train_tokens);
    cJSON_AddNumberToObject(r, "val_tokens", (double)s->val_tokens);
    uint64_t toks = s->train_tokens + s->val_tokens;
    cJSON_AddNumberToObject(r, "bytes_per_token", toks ? (double)s->bytes / (double)toks : 0.0);
    cJSON_AddNumberToObject(r, "train_shards", (double)s->train_shards);
    cJSON_AddNumberToObject(r, "val_shards", (double)s->val_shards);
    if (o->format == PREP_FORMAT_CHAT) { /* a .mask beside every shard (docs/formats.md) */
        cJSON_AddBoolToObject(r, "loss_masks", 1);
        cJSON_AddNumberToObject(r, "train_trained_tokens", (double)s->train_trained);
        cJSON_AddNumberToObject(r, "val_trained_tokens", (double)s->val_trained);
    }
    char *text = cJSON_Print(m);
    cJSON_Delete(m);
    if (!text) return err_set(err, ST_ERR_RUNTIME, "out of memory");
    char p[4200];
    snprintf(p, sizeof p, "%s/.prepare/manifest.json", o->out_dir); /* staged: publish moves it last */
    size_t len = strlen(text);
    const void *bufs[2] = {text, "\n"};
    size_t lens[2] = {len, 1};
    Status st = file_write_atomic(p, bufs, lens, 2, err);
    free(text);
    return st;
}

/* ================================================================== 7. prepare_run */

/* No document came out of the inputs: empty ones, or every record skipped by --skip-bad (which
 * "empty input" misnamed: the input held records, all bad). */
static Status no_document(const char *what, const char *all, const DocSkips *k, Err *err) {
    uint64_t skipped = k->bad_json + k->missing_field + k->bad_utf8 + k->bad_chat;
    if (!skipped)
        return err_set(err, ST_ERR_INPUT, "%s%s: expected at least one non-empty document, found none (empty input)",
                       what, all);
    return err_set(err, ST_ERR_INPUT, "%s%s: expected at least one non-empty document, found none (--skip-bad skipped "
                   "%llu records: %llu not JSON objects, %llu without the field, %llu bad conversations, %llu with "
                   "invalid UTF-8; any others were empty)", what, all, (unsigned long long)skipped,
                   (unsigned long long)k->bad_json, (unsigned long long)k->missing_field,
                   (unsigned long long)k->bad_chat, (unsigned long long)k->bad_utf8);
}

/* Removes <prefix>_NNNNNN.bin left by an earlier run with more shards, so a glob sees only ours,
 * temporaries of shards an interrupted call was writing, and every <prefix>_NNNNNN.mask that is not
 * ours (index >= masks_kept: all of them after a text prepare, so old masks never meet new tokens). */
static void remove_stale(const char *dir, const char *prefix, size_t from, size_t masks_kept) {
    for (size_t i = from;; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s_%06zu.bin", dir, prefix, i);
        if (unlink(path) != 0) break;
    }
    DIR *d = opendir(dir);
    if (!d) return;
    size_t pl = strlen(prefix);
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, prefix, pl) || e->d_name[pl] != '_') continue;
        char *end;
        unsigned long long idx = strtoull(e->d_name + pl + 1, &end, 10);
        int stale_mask = end != e->d_name + pl + 1 && !strcmp(end, ".mask") && idx >= masks_kept;
        if (strstr(e->d_name, ".bin.tmp.") || strstr(e->d_name, ".mask.tmp") || stale_mask) {
            char path[4600];
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
    }
    closedir(d);
}

/* Phase 3, publishing: the shards staged in out/.prepare (all written, the split accepted) and
 * their manifest moved into out. The staged manifest is written first and moved last, so while it
 * is in .prepare a move is under way or was interrupted: out may hold new and old shards side by
 * side, the loader refuses them (loader.c), and the next prepare into out finishes the move before
 * anything else (a rename is idempotent here: a staged file already gone was moved). out's old
 * manifest goes first, so no manifest ever describes a mixed directory. */
static Status publish_finish(const char *out, int fault_after_moves, Err *err) {
    char mp[4200], *text = NULL;
    size_t len = 0;
    snprintf(mp, sizeof mp, "%s/.prepare/manifest.json", out);
    Status st = file_read_all(mp, &text, &len, err);
    if (st) return st;
    cJSON *m = cJSON_ParseWithLength(text, len);
    free(text);
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "result");
    const cJSON *nt = cJSON_GetObjectItemCaseSensitive(r, "train_shards"), *nv = cJSON_GetObjectItemCaseSensitive(r, "val_shards");
    int masked = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "loss_masks"));
    /* whole shard counts in range before the cast (1e300 cast to size_t is undefined) */
    int ok = cJSON_IsNumber(nt) && cJSON_IsNumber(nv) && nt->valuedouble >= 0 && nv->valuedouble >= 0 &&
             nt->valuedouble <= 1e9 && nv->valuedouble <= 1e9 && nt->valuedouble == floor(nt->valuedouble) &&
             nv->valuedouble == floor(nv->valuedouble);
    size_t n[2] = {ok ? (size_t)nt->valuedouble : 0, ok ? (size_t)nv->valuedouble : 0};
    cJSON_Delete(m);
    if (!ok)
        return err_set(err, ST_ERR_INPUT, "%s: expected the manifest of staged shards (result.train_shards, "
                       "val_shards), found another file: remove %s/.prepare and prepare again", mp, out);
    char dst[4200];
    snprintf(dst, sizeof dst, "%s/manifest.json", out);
    if (unlink(dst) != 0 && errno != ENOENT)
        return err_set(err, ST_ERR_RUNTIME, "%s: cannot remove (%s)", dst, strerror(errno));
    int moves = 0;
    static const char *const prefix[2] = {"train", "val"}, *const ext[2] = {"bin", "mask"};
    for (int w = 0; w < 2; w++)
        for (size_t i = 0; i < n[w]; i++)
            for (int e = 0; e < 1 + masked; e++) {
                char src[4200];
                snprintf(src, sizeof src, "%s/.prepare/%s_%06zu.%s", out, prefix[w], i, ext[e]);
                snprintf(dst, sizeof dst, "%s/%s_%06zu.%s", out, prefix[w], i, ext[e]);
                if (rename(src, dst) != 0) {
                    struct stat sb;
                    if (errno == ENOENT && stat(dst, &sb) == 0) continue; /* moved before an interruption */
                    return err_set(err, ST_ERR_RUNTIME, "%s: cannot move to %s (%s)", src, dst, strerror(errno));
                }
                if (fault_after_moves && ++moves >= fault_after_moves)
                    return err_set(err, ST_ERR_RUNTIME, "prepare: interrupted (fault injected after %d moves)", moves);
            }
    remove_stale(out, "train", n[0], masked ? n[0] : 0);
    remove_stale(out, "val", n[1], masked ? n[1] : 0);
    if ((st = file_fsync_dir(out, err)) != ST_OK) return st;
    snprintf(dst, sizeof dst, "%s/manifest.json", out);
    if (rename(mp, dst) != 0) return err_set(err, ST_ERR_RUNTIME, "%s: cannot move to %s (%s)", mp, dst, strerror(errno));
    return file_fsync_dir(out, err);
}

/* 1 when out/.prepare holds a staged manifest: an earlier call's publish to finish. */
static int publish_pending(const char *out) {
    char mp[4200];
    struct stat sb;
    snprintf(mp, sizeof mp, "%s/.prepare/manifest.json", out);
    return stat(mp, &sb) == 0;
}

static Status check_options(const PrepareOptions *o, Err *err) {
    if (!o->tok) return err_set(err, ST_ERR_INPUT, "prepare: expected a tokenizer, found none");
    if (!o->out_dir || !*o->out_dir) return err_set(err, ST_ERR_INPUT, "prepare: expected an output directory (--out)");
    if (!(o->val_fraction >= 0 && o->val_fraction < 1))
        return err_set(err, ST_ERR_INPUT, "--val-fraction: expected a number in [0, 1), found %g", o->val_fraction);
    if (o->shard_tokens == 0 || o->shard_tokens > UINT32_MAX / 4)
        return err_set(err, ST_ERR_INPUT, "--shard-tokens: expected 1..%u, found %zu", UINT32_MAX / 4, o->shard_tokens);
    if (o->shard_version != 0 && o->shard_version != SHARD_VERSION_U16 && o->shard_version != SHARD_VERSION_U32)
        return err_set(err, ST_ERR_INPUT, "--shard-version: expected 1 (uint16) or 7 (uint32), found %u", o->shard_version);
    if (o->shard_version == SHARD_VERSION_U16 && tokenizer_vocab_size(o->tok) > 65536)
        return err_set(err, ST_ERR_INPUT,
                       "--shard-version 1: expected a vocabulary of at most 65536 ids (uint16 tokens), found %u ids "
                       "(use --shard-version 7 or auto)", tokenizer_vocab_size(o->tok));
    if (o->seq_len < 0) return err_set(err, ST_ERR_INPUT, "--seq-len: expected >= 0, found %d", o->seq_len);
    if (o->run_bytes < 4096) return err_set(err, ST_ERR_INPUT, "--memory: expected at least 4096 bytes, found %zu", o->run_bytes);
    return ST_OK;
}

/* Creates out_dir and takes its lock: flock on out_dir/.prepare.lock (which then holds the pid),
 * kept until prepare_run returns. Two prepares into one out_dir wrote, cleared and merged each
 * other's runs: one failed, and the other published shards of neither call (a mix of two seeds'
 * runs) with exit 0. A folder another process holds is refused (ST_ERR_INPUT naming its pid), as
 * train refuses a --ckpt-dir in use. Not out_dir/.lock: train holds that one on the bundled
 * corpus's cache while it calls prepare_run into it, and a second flock of it would be refused. */
static Status lock_out_dir(const char *out, int *fd, Err *err) {
    struct stat sb;
    if (stat(out, &sb) == 0 && !S_ISDIR(sb.st_mode))
        return err_set(err, ST_ERR_INPUT, "%s: expected an output directory, found a file", out);
    char who[32];
    int got = file_lock_dir(out, ".prepare.lock", fd, who, sizeof who, err);
    if (got < 0) return err_prefix(err, "--out");
    if (got == 0)
        return err_set(err, ST_ERR_INPUT, "--out %s: expected an output directory no other prepare is writing, found "
                       "it in use by process %s (%s/.prepare.lock held)", out, who, out);
    return ST_OK;
}

/* Creates out_dir/.prepare (out_dir exists: lock_out_dir). When the journal there matches this call (same inputs and
 * run-deciding options) it is loaded: a resume, *resumed = the inputs it finished; else .prepare is
 * cleared and j starts empty. */
static Status work_begin(const PrepareOptions *o, Inputs *in, int width, Journal *j, size_t *resumed, Err *err) {
    char wd[4200]; /* out_dir itself was made (a file there refused) by lock_out_dir */
    snprintf(wd, sizeof wd, "%s/.prepare", o->out_dir);
    Status st = file_mkdirs(wd, err);
    if (st) return st;
    memset(j, 0, sizeof *j);
    j->config = config_hash(o, in, width);
    *resumed = 0;
    int ok = journal_read(o->out_dir, j->config, j, in);
    for (size_t i = 0; ok && i < j->runs; i++) { /* every run it names still there (else: afresh) */
        char p[4200];
        run_path(p, sizeof p, o->out_dir, i);
        ok = access(p, R_OK) == 0;
    }
    if (!ok) {
        work_dir_clear(o->out_dir, 0); /* another corpus or other options: start afresh */
        uint64_t c = j->config;
        memset(j, 0, sizeof *j);
        j->config = c;
        for (size_t i = 0; i < in->n; i++) in->v[i].done = 0, in->v[i].docs = 0;
        return ST_OK;
    }
    for (size_t i = 0; i < in->n; i++) *resumed += in->v[i].done;
    /* a run written after the journal's last update (a crash between the two) is not counted */
    for (size_t i = j->runs;; i++) {
        char p[4200];
        run_path(p, sizeof p, o->out_dir, i);
        if (unlink(p) != 0) break;
    }
    return ST_OK;
}

Status prepare_run(const PrepareOptions *o, PrepareStats *stats, Err *err) {
    double t0 = omp_get_wtime();
    PrepareStats s;
    memset(&s, 0, sizeof s);
    Status st = check_options(o, err);
    if (st) return st;
    Inputs in = {0};
    Reader R;
    memset(&R, 0, sizeof R);
    Journal j;
    memset(&j, 0, sizeof j);
    int lock = -1; /* out_dir/.prepare.lock, held to the end */
    if ((st = collect_inputs(&in, o, err)) != ST_OK) goto done;
    /* `prepare --out d d` read its own manifest.json and shards as input the second time */
    if ((st = prepare_check_inputs_not_outputs(o->inputs, o->ninputs, o->out_dir, prepare_output_name,
                                               "shards and manifest.json", err)) != ST_OK)
        goto done;
    if ((st = lock_out_dir(o->out_dir, &lock, err)) != ST_OK) goto done;
    if (publish_pending(o->out_dir)) { /* before work_begin, which may clear .prepare */
        if ((st = publish_finish(o->out_dir, 0, err)) != ST_OK) goto done;
        work_dir_clear(o->out_dir, 0);
        s.finished_publish = 1;
    }
    uint32_t vocab = tokenizer_vocab_size(o->tok);
    int width = o->shard_version == SHARD_VERSION_U32 || vocab > 65536 ? 4 : 2;
    ChatFormat chat;
    if (o->format == PREP_FORMAT_CHAT && (st = chat_format_init(&chat, o->chat_template, o->tok, err)) != ST_OK) goto done;
    s.chat_template = o->format == PREP_FORMAT_CHAT ? chat.t : CHAT_TEMPLATE_AUTO;
    if ((st = work_begin(o, &in, width, &j, &s.resumed_files, err)) != ST_OK) goto done;
    int stdin_in = 0; /* a finished standard input is read again, to check it is the same stream */
    for (size_t i = 0; i < in.n; i++) stdin_in |= !strcmp(in.v[i].path, "-");
    if (!j.read_done || stdin_in) {
        R.o = o, R.in = &in, R.j = &j;
        R.rb.width = width;
        R.rb.masked = o->format == PREP_FORMAT_CHAT;
        R.b[0].chat = R.b[1].chat = R.rb.masked ? &chat : NULL;
        R.threads = o->threads > 0 ? o->threads : omp_get_max_threads();
        R.batch_bytes = o->run_bytes / 4 < BATCH_BYTES ? o->run_bytes / 4 : BATCH_BYTES;
        R.t0 = omp_get_wtime();
        for (size_t i = 0; i < in.n; i++) R.bytes_total += in.v[i].size > 0 ? (uint64_t)in.v[i].size : 0;
        if ((st = read_inputs(&R, err)) != ST_OK) goto done;
    }
    s.files = in.n;
    s.docs = j.docs;
    s.skips = j.skips;
    s.runs = j.runs;
    for (size_t i = 0; i < in.n; i++) s.input_bytes += in.v[i].raw_bytes;
    if (line_pieces_for(o, &in)) s.line_pieces = in.v[0].line_pieces;
    if (j.docs == 0) {
        st = no_document(in.n == 1 ? (strcmp(in.v[0].path, "-") ? in.v[0].path : "<stdin>") : "inputs",
                         in.n == 1 ? "" : " (all files)", &j.skips, err);
        work_dir_clear(o->out_dir, 1);
        goto done;
    }
    char what[4200];
    snprintf(what, sizeof what, "%s%s", in.n == 1 ? (strcmp(in.v[0].path, "-") ? in.v[0].path : "<stdin>") : "inputs",
             in.n == 1 ? "" : " (all files)");
    int text = 0;
    for (size_t i = 0; i < in.n; i++) text |= docsource_format_of(in.v[i].path, o->format) == PREP_FORMAT_TEXT;
    if ((st = merge_runs(o, what, text, j.runs, width, &s, err)) != ST_OK) goto done;
    if (s.nopack_rows) s.nopack_utilization = (double)s.train_tokens / ((double)s.nopack_rows * o->seq_len);
    if ((st = write_manifest(o, &in, &s, width, err)) != ST_OK) goto done;
    if ((st = publish_finish(o->out_dir, o->fault_after_moves, err)) != ST_OK) goto done;
    work_dir_clear(o->out_dir, 1);
    s.seconds = omp_get_wtime() - t0;
    if (stats) *stats = s;
done:
    if (lock >= 0) close(lock); /* releases the flock */
    free(R.rb.data);
    free(R.rb.idx);
    batch_free(&R.b[0]);
    batch_free(&R.b[1]);
    inputs_free(&in);
    return st;
}

/* ================================================================== 8. documents in memory */

typedef struct {
    uint8_t **chunks;
    size_t nchunks;
} DocArena;

Status prepare_read_documents(const PrepareOptions *o, PrepareDocs *docs, Err *err) {
    memset(docs, 0, sizeof *docs);
    Inputs in = {0};
    DocArena *a = calloc(1, sizeof *a);
    size_t cap = 0, used = 0, ccap = 0, chunk_left = 0;
    uint8_t *chunk = NULL;
    Status st = a ? collect_inputs(&in, o, err) : err_set(err, ST_ERR_RUNTIME, "out of memory");
    docs->priv = a;
    DocReaderOptions ro = reader_options(o);
    ro.allow_invalid_utf8 = 1; /* as before issue 29: BPE training takes stray bytes as bytes */
    for (size_t i = 0; i < in.n && !st; i++) {
        DocReader *dr = NULL;
        if ((st = docreader_open(&dr, in.v[i].path, &ro, err)) != ST_OK) break;
        for (;;) {
            const uint8_t *d;
            size_t n;
            if ((st = docreader_next(dr, &d, &n, err)) != ST_OK || !d) break;
            if (n > chunk_left) { /* a new chunk of at least 16 MiB */
                size_t sz = n > (16u << 20) ? n : (16u << 20);
                if (a->nchunks == ccap) {
                    ccap = ccap ? 2 * ccap : 16;
                    uint8_t **nc = realloc(a->chunks, ccap * sizeof *nc);
                    if (!nc) { st = err_set(err, ST_ERR_RUNTIME, "out of memory"); break; }
                    a->chunks = nc;
                }
                if (!(chunk = malloc(sz))) { st = err_set(err, ST_ERR_RUNTIME, "out of memory"); break; }
                a->chunks[a->nchunks++] = chunk;
                chunk_left = sz;
            }
            uint8_t *dst = chunk;
            memcpy(dst, d, n);
            chunk += n, chunk_left -= n;
            if (used == cap) {
                cap = cap ? 2 * cap : 1024;
                const uint8_t **nt = realloc(docs->text, cap * sizeof *nt);
                if (nt) docs->text = nt;
                size_t *nl = realloc(docs->len, cap * sizeof *nl);
                if (nl) docs->len = nl;
                if (!nt || !nl) { st = err_set(err, ST_ERR_RUNTIME, "out of memory"); break; }
            }
            docs->text[used] = dst, docs->len[used] = n;
            used++;
        }
        if (dr) {
            const DocSkips *k = docreader_skips(dr);
            docs->skips.bad_json += k->bad_json, docs->skips.missing_field += k->missing_field;
            docs->skips.bad_utf8 += k->bad_utf8, docs->skips.bad_chat += k->bad_chat;
        }
        docreader_close(dr);
    }
    docs->n = used;
    docs->files = in.n;
    if (!st && used == 0)
        st = no_document(in.n == 1 ? in.v[0].path : "inputs", in.n == 1 ? "" : " (all files)", &docs->skips, err);
    inputs_free(&in);
    if (st) prepare_docs_free(docs);
    return st;
}

void prepare_docs_free(PrepareDocs *docs) {
    DocArena *a = docs->priv;
    if (a) {
        for (size_t i = 0; i < a->nchunks; i++) free(a->chunks[i]);
        free(a->chunks);
        free(a);
    }
    free(docs->text);
    free(docs->len);
    memset(docs, 0, sizeof *docs);
}
