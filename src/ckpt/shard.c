/* shard.c — sharded checkpoints: the two-phase save written by every rank, the resharding load,
 * and the single-process format sliced for a stage or tp layout (see shard.h; byte-level format in
 * docs/checkpoint.md, "Sharded checkpoints").
 *
 * Contents: slices (what one rank file holds, as C structs and as JSON) | fault injection with a
 * rank filter | the save: prepare, write, agree, commit | the load: plan, map and verify, copy or
 * assemble and cut | the single-process format on any layout | the asynchronous save.
 *
 * Test-only switches (the negative controls of tests/test_ckpt_shard.c): ST_CKPT_SHARD_TEST=
 * wrong-slice makes the loader place every tp slice one tp rank off; =skip-verify makes it skip
 * the xxh3 comparison of the files it reads. Both must make that test's checks fail. */
#include "ckpt/shard.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "ckpt/ckpt_internal.h"
#include "ckpt/safetensors.h"
#include "core/fileio.h"
#include "core/timer.h"

#define MANIFEST_FORMAT "scaletrain-checkpoint-manifest"

/* ======================================================================================== */
/* Slices                                                                                    */
/* ======================================================================================== */

enum { KIND_PARAMS, KIND_M, KIND_V, NKIND };
static const char *const KIND_NAME[NKIND] = {"params", "m", "v"};
static const char *const SPLIT_NAME[3] = {"replicated", "rows", "cols"}; /* TP_REPLICATED, TP_ROWS, TP_COLS */

/* One stored slice of one tensor: where it is and which part of the full tensor it holds. */
typedef struct {
    char name[48];  /* our tensor name ("h.3.qkvw") */
    int id;         /* TensorInfo.id */
    int kind;       /* KIND_* */
    char file[32];  /* "rank%05d.safetensors" */
    char key[128];  /* "<kind>.<name>" inside the file */
    int split;      /* TP_REPLICATED | TP_ROWS | TP_COLS of the layout it was written from */
    int groups;     /* TP_ROWS: the full rows are `groups` equal blocks, each split over tp */
    int tp, tp_rank;
    int ndim;
    int rows, cols; /* the local shape as stored in the layout (rows padded for wte) */
    int rows_real;  /* rows in the file: the stored tensor is (rows_real, cols) */
} Slice;

/* A slice holds the whole tensor when it was not split (replicated, or tp = 1). */
static int slice_whole(const Slice *s) { return s->split == TP_REPLICATED || s->tp == 1; }

static void slice_from_tensor(Slice *s, const ParamLayout *pl, const TensorInfo *t, int kind, int rank) {
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", t->name);
    s->id = t->id, s->kind = kind;
    snprintf(s->file, sizeof s->file, "rank%05d.safetensors", rank);
    snprintf(s->key, sizeof s->key, "%s.%s", KIND_NAME[kind], t->name);
    s->split = pl->tp > 1 ? t->split : TP_REPLICATED;
    s->groups = t->groups, s->tp = pl->tp, s->tp_rank = pl->tp_rank;
    s->ndim = t->ndim, s->rows = t->shape[0], s->cols = t->shape[1], s->rows_real = t->rows_real;
}

/* The TensorInfo layout_tp_copy_tensor needs for a slice (no offset: it is given a pointer). */
static TensorInfo slice_info(const Slice *s) {
    TensorInfo t;
    memset(&t, 0, sizeof t);
    t.ndim = s->ndim, t.shape[0] = s->rows, t.shape[1] = s->cols, t.rows_real = s->rows_real;
    t.split = slice_whole(s) ? TP_REPLICATED : s->split, t.groups = s->groups;
    return t;
}

static cJSON *slice_json(const Slice *s, int with_name) {
    cJSON *o = cJSON_CreateObject();
    if (with_name) {
        cJSON_AddStringToObject(o, "name", s->name);
        cJSON_AddNumberToObject(o, "id", s->id);
    }
    cJSON_AddStringToObject(o, "file", s->file);
    cJSON_AddStringToObject(o, "key", s->key);
    cJSON_AddStringToObject(o, "kind", KIND_NAME[s->kind]);
    cJSON_AddStringToObject(o, "split", SPLIT_NAME[s->split]);
    cJSON_AddNumberToObject(o, "groups", s->groups);
    cJSON_AddNumberToObject(o, "tp", s->tp);
    cJSON_AddNumberToObject(o, "tp_rank", s->tp_rank);
    int shape[2] = {s->rows, s->cols};
    cJSON_AddItemToObject(o, "shape", cJSON_CreateIntArray(shape, s->ndim));
    cJSON_AddNumberToObject(o, "rows_real", s->rows_real);
    return o;
}

static int json_int(const cJSON *o, const char *k, int lo, int hi, int *v) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    /* the range first: a cast of 1e46 to an integer is undefined (UBSan) */
    if (!cJSON_IsNumber(x) || !(x->valuedouble >= lo && x->valuedouble <= hi) || x->valuedouble != floor(x->valuedouble))
        return 0;
    *v = (int)x->valuedouble;
    return 1;
}

static int json_str(const cJSON *o, const char *k, char *out, size_t cap) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsString(x) || strlen(x->valuestring) >= cap) return 0;
    snprintf(out, cap, "%s", x->valuestring);
    return 1;
}

static int name_index(const char *const *names, int n, const char *s) {
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], s)) return i;
    return -1;
}

/* Parses and range-checks one slice object (name and id from the object unless given). Every
 * field comes from a file, so nothing is trusted. */
static Status slice_parse(const cJSON *o, const char *name, int id, Slice *s, const char *where, Err *err) {
    memset(s, 0, sizeof *s);
    char kind[16], split[16];
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(o, "shape");
    int ok = cJSON_IsObject(o) && json_str(o, "file", s->file, sizeof s->file) &&
             json_str(o, "key", s->key, sizeof s->key) && json_str(o, "kind", kind, sizeof kind) &&
             json_str(o, "split", split, sizeof split) && json_int(o, "groups", 1, 1 << 20, &s->groups) &&
             json_int(o, "tp", 1, 1 << 20, &s->tp) && json_int(o, "tp_rank", 0, s->tp - 1, &s->tp_rank) &&
             cJSON_IsArray(shape) && json_int(o, "rows_real", 0, 1 << 30, &s->rows_real);
    if (ok && name) {
        snprintf(s->name, sizeof s->name, "%s", name);
        s->id = id;
    } else if (ok) {
        ok = json_str(o, "name", s->name, sizeof s->name) && json_int(o, "id", 0, 1 << 30, &s->id);
    }
    if (ok) {
        s->kind = name_index(KIND_NAME, NKIND, kind);
        s->split = name_index(SPLIT_NAME, 3, split);
        s->ndim = cJSON_GetArraySize(shape);
        ok = s->kind >= 0 && s->split >= 0 && (s->ndim == 1 || s->ndim == 2) && !strchr(s->file, '/') &&
             s->file[0] != '.';
    }
    if (ok) {
        const cJSON *r = cJSON_GetArrayItem(shape, 0), *c = s->ndim == 2 ? cJSON_GetArrayItem(shape, 1) : NULL;
        ok = cJSON_IsNumber(r) && r->valuedouble >= 0 && r->valuedouble <= (1 << 30) && (!c || (cJSON_IsNumber(c) &&
             c->valuedouble >= 1 && c->valuedouble <= (1 << 30)));
        if (ok) s->rows = (int)r->valuedouble, s->cols = c ? (int)c->valuedouble : 1;
        ok = ok && s->rows_real <= s->rows && s->rows % s->groups == 0;
    }
    if (!ok)
        return err_set(err, ST_ERR_INPUT, "%s: slice of tensor %s: expected {file, key, kind params|m|v, split "
                       "replicated|rows|cols, groups, tp, tp_rank < tp, shape [rows(, cols)], rows_real <= rows}",
                       where, name ? name : s->name[0] ? s->name : "?");
    return ST_OK;
}

/* Whether slice s fits inside a full tensor of (full_rows, full_cols): every element it maps to
 * lies inside. The check that keeps a hostile manifest from writing out of bounds. */
static int slice_fits(const Slice *s, int full_rows, int full_cols) {
    if (slice_whole(s)) return s->rows_real == full_rows && s->cols == full_cols;
    if (s->split == TP_ROWS) {
        if (s->cols != full_cols) return 0;
        if (s->rows_real == 0) return 1;
        long long q = s->rows / s->groups, j = s->rows_real - 1;
        if (q == 0) return 0;
        long long last = (j / q) * q * s->tp + (long long)s->tp_rank * q + j % q;
        return last < full_rows;
    }
    return s->rows == full_rows && s->rows_real == s->rows && (long long)(s->tp_rank + 1) * s->cols <= full_cols;
}

/* ST_OK if the n slices (one tensor, one kind) cover the full tensor exactly once: one whole copy,
 * or one slice per tp rank of one split whose rows (or columns) add up to the full tensor's. */
static Status check_cover(const Slice *const *s, int n, const char *name, const char *kind, int full_rows,
                          int full_cols, const char *where, Err *err) {
    if (n == 0) return err_set(err, ST_ERR_INPUT, "%s: tensor %s (%s) missing", where, name, kind);
    for (int i = 0; i < n; i++)
        if (!slice_fits(s[i], full_rows, full_cols))
            return err_set(err, ST_ERR_INPUT, "%s: tensor %s (%s): the slice in %s (tp rank %d of %d, shape %d x %d, "
                           "%d rows real) does not fit the full shape %d x %d", where, name, kind, s[i]->file,
                           s[i]->tp_rank, s[i]->tp, s[i]->rows, s[i]->cols, s[i]->rows_real, full_rows, full_cols);
    if (slice_whole(s[0]) || n > 1) {
        for (int i = 0; i < n; i++)
            if (slice_whole(s[i]) && n > 1)
                return err_set(err, ST_ERR_INPUT, "%s: tensor %s (%s) written %d times (%s and %s): expected one "
                               "writer per tensor slice", where, name, kind, n, s[0]->file, s[1]->file);
    }
    if (slice_whole(s[0])) return ST_OK;
    int tp = s[0]->tp, split = s[0]->split;
    long long sum = 0;
    unsigned char seen[1024] = {0};
    for (int i = 0; i < n; i++) {
        if (s[i]->tp != tp || s[i]->split != split || s[i]->groups != s[0]->groups || tp > 1024)
            return err_set(err, ST_ERR_INPUT, "%s: tensor %s (%s): slices of different splits (%s tp %d, %s tp %d)",
                           where, name, kind, s[0]->file, tp, s[i]->file, s[i]->tp);
        if (seen[s[i]->tp_rank]++)
            return err_set(err, ST_ERR_INPUT, "%s: tensor %s (%s): tp slice %d of %d written twice (%s): expected one "
                           "writer per tensor slice", where, name, kind, s[i]->tp_rank, tp, s[i]->file);
        sum += split == TP_ROWS ? s[i]->rows_real : s[i]->cols;
    }
    if (n != tp || sum != (split == TP_ROWS ? full_rows : full_cols)) {
        int have = 0;
        for (int r = 0; r < tp; r++) have += seen[r] != 0;
        return err_set(err, ST_ERR_INPUT, "%s: tensor %s (%s): slice coverage incomplete: %d of %d tp slices, %lld of %d "
                       "%s", where, name, kind, have, tp, sum, split == TP_ROWS ? full_rows : full_cols,
                       split == TP_ROWS ? "rows" : "columns");
    }
    return ST_OK;
}

/* ======================================================================================== */
/* Fault injection with a rank filter                                                       */
/* ======================================================================================== */

/* The save's fault as ckpt.c parses it, kept only on world rank src->ckpt_fail_rank if
 * src->ckpt_fail_only_rank is set. */
static Status fault_for_rank(Fault *f, const Faults *src, int rank, Err *err) {
    Status st = ckpt_fault_parse(f, src, err);
    if (st != ST_OK) return st;
    if (src->ckpt_fail_only_rank && src->ckpt_fail_rank != rank) f->stage[0] = '\0';
    return ST_OK;
}

/* ======================================================================================== */
/* Save                                                                                      */
/* ======================================================================================== */

void ckpt_shard_assign(const ParamLayout *pl, int dp, int dp_rank, unsigned char *write) {
    int n = pl->ntensors;
    int *order = malloc((size_t)n * sizeof *order);
    double load[1024] = {0};
    ST_CHECK(order && dp >= 1 && dp <= 1024 && dp_rank >= 0 && dp_rank < dp);
    int m = 0;
    for (int k = 0; k < n; k++) {
        const TensorInfo *t = &pl->tensors[k];
        write[k] = 0;
        /* One writer per (tensor, tp slice): replicated copies on tp rank 0 only, the tied wte on
         * the embedding stage only (the head's stage holds the same values). */
        if (pl->tp > 1 && t->split == TP_REPLICATED && pl->tp_rank != 0) continue;
        if (t->id == 0 && !pl->has_embed) continue;
        order[m++] = k;
    }
    /* Largest first (insertion sort: tens of tensors; ties keep layout order), each to the dp rank
     * with the fewest bytes so far (ties to the lower rank). */
    for (int i = 1; i < m; i++)
        for (int j = i; j > 0; j--) {
            const TensorInfo *a = &pl->tensors[order[j - 1]], *b = &pl->tensors[order[j]];
            if ((size_t)b->rows_real * b->shape[1] <= (size_t)a->rows_real * a->shape[1]) break;
            int x = order[j - 1];
            order[j - 1] = order[j], order[j] = x;
        }
    for (int i = 0; i < m; i++) {
        const TensorInfo *t = &pl->tensors[order[i]];
        int best = 0;
        for (int r = 1; r < dp; r++)
            if (load[r] < load[best]) best = r;
        load[best] += (double)t->rows_real * t->shape[1];
        if (best == dp_rank) write[order[i]] = 1;
    }
    free(order);
}

/* One tensor slice this rank writes: where it goes and where its rows_real × cols floats are. */
typedef struct {
    Slice s;
    const float *data;
} Item;

/* This rank's items, kind by kind (params, m, v), tensors in layout order. Returns the count, or
 * -1 when out of memory; *floats receives their total size. */
static int build_items(const CkptShardSrc *src, int rank, Item **out, size_t *floats) {
    const ParamLayout *pl = src->pl;
    const float *bufs[NKIND] = {src->params, src->m, src->v};
    *out = calloc((size_t)pl->ntensors * NKIND + 1, sizeof **out);
    if (!*out) return -1;
    int n = 0;
    *floats = 0;
    for (int k = 0; k < NKIND; k++) {
        if (!bufs[k]) continue;
        for (int i = 0; i < pl->ntensors; i++) {
            if (!src->write[i]) continue;
            const TensorInfo *t = &pl->tensors[i];
            Item *it = &(*out)[n++];
            slice_from_tensor(&it->s, pl, t, k, rank);
            it->data = bufs[k] + t->offset;
            *floats += (size_t)t->rows_real * t->shape[1];
        }
    }
    return n;
}

typedef struct {
    const Item *items;
    int n;
    int rank;
} RankFileArg;

static Status rank_file_producer(const void *arg, StWriteFn w, void *ctx, Err *err) {
    const RankFileArg *a = arg;
    StTensorOut *t = calloc((size_t)a->n + 1, sizeof *t);
    if (!t) return err_set(err, ST_ERR_RUNTIME, "out of memory writing a checkpoint shard");
    for (int i = 0; i < a->n; i++) {
        const Slice *s = &a->items[i].s;
        snprintf(t[i].name, sizeof t[i].name, "%s", s->key);
        t[i].ndim = s->ndim;
        t[i].shape[0] = s->rows_real;
        t[i].shape[1] = s->cols;
        t[i].data = a->items[i].data;
    }
    char rank[16];
    snprintf(rank, sizeof rank, "%d", a->rank);
    const char *const meta[] = {"scaletrain", "checkpoint-shard", "rank", rank, NULL};
    Status st = st_write(t, a->n, meta, w, ctx, err);
    free(t);
    return st;
}

/* Where one save writes. */
typedef struct {
    char dir[4096];  /* CKPT_DIR */
    char name[64];   /* step_%08ld */
    char tmp[4200];  /* CKPT_DIR/.tmp-step_%08ld */
    char fin[4200];  /* CKPT_DIR/step_%08ld */
} SavePaths;

static void save_paths(SavePaths *p, const char *dir, long step) {
    snprintf(p->dir, sizeof p->dir, "%s", dir);
    ckpt_step_name(p->name, sizeof p->name, step);
    snprintf(p->tmp, sizeof p->tmp, "%s/.tmp-%s", dir, p->name);
    snprintf(p->fin, sizeof p->fin, "%s/%s", dir, p->name);
}

/* The outcome of one rank's write phase. */
typedef struct {
    Status st;
    Err err;
    int wrote;   /* its rank file exists */
    FileSum sum;
    double ms;
} RankWrite;

/* Step 2, local (no comm: the asynchronous writer thread runs it): this rank's file. */
static void write_rank(const SavePaths *p, int rank, const Item *items, int n, const Fault *fault, RankWrite *rw) {
    double t0 = timer_ms();
    memset(rw, 0, sizeof *rw);
    if (n > 0) {
        char name[32];
        snprintf(name, sizeof name, "rank%05d.safetensors", rank);
        RankFileArg a = {items, n, rank};
        rw->wrote = 1;
        rw->st = ckpt_write_file(p->tmp, name, rank_file_producer, &a, fault, "shard", 2, NULL, NULL, 0, &rw->sum,
                                 &rw->err);
    }
    rw->ms = timer_ms() - t0;
}

/* Every rank learns whether every rank succeeded (an all-gather of status flags). On failure all
 * return ST_ERR_RUNTIME (ST_ERR_INPUT if that is what the failing rank had) with the message of the
 * lowest failing rank (broadcast from it), naming the rank, what it could not do and, when
 * tmpl_file is given, its file (tmpl_file formats the rank number). */
static Status agree(Comm *c, Status mine, const Err *my_err, const char *what, const char *tmpl_file, Err *err) {
    double *flags = calloc((size_t)c->world, sizeof *flags);
    if (!flags) return err_set(err, ST_ERR_RUNTIME, "out of memory (checkpoint agreement)");
    Status st = comm_allgather_f64(c, mine == ST_OK ? 0.0 : (double)mine, flags, err);
    int bad = -1;
    for (int r = 0; st == ST_OK && r < c->world && bad < 0; r++)
        if (flags[r] != 0) bad = r;
    Status theirs = bad >= 0 ? (Status)flags[bad] : ST_OK;
    free(flags);
    if (st != ST_OK || bad < 0) return st;
    char msg[sizeof my_err->msg];
    snprintf(msg, sizeof msg, "%s", c->rank == bad ? my_err->msg : "");
    if ((st = comm_bcast_bytes(c, msg, sizeof msg, bad, err)) != ST_OK) return st;
    char file[64] = "";
    if (tmpl_file) snprintf(file, sizeof file, tmpl_file, bad);
    return err_set(err, theirs == ST_ERR_INPUT ? ST_ERR_INPUT : ST_ERR_RUNTIME,
                   "checkpoint save aborted on every rank: rank %d could not %s%s%s: %s", bad, what, file[0] ? " " : "",
                   file, msg);
}

/* A save all ranks agreed to abort: rank 0 removes its temporary directory, and every rank returns
 * only once nothing of it remains (collective). */
static void abandon(Comm *c, const SavePaths *p) {
    if (c->rank == 0) ckpt_rm_tree(p->tmp);
    Err eb;
    comm_barrier(c, &eb);
}

/* Step 1 (collective): rank 0 prepares the temporary directory (removing stale leftovers);
 * every rank checks its arguments and fault setting; all agree. */
static Status shard_prepare(Comm *c, const SavePaths *p, const CkptMeta *meta, const CkptOptions *o, Fault *fault,
                            Err *err) {
    Err e = {0};
    Status mine = fault_for_rank(fault, &o->faults, c->rank, &e);
    if (mine == ST_OK && meta->step < 0)
        mine = err_set(&e, ST_ERR_INPUT, "checkpoint step: expected >= 0, found %ld", meta->step);
    if (mine == ST_OK && c->rank == 0) {
        if ((mine = file_mkdirs(p->dir, &e)) == ST_OK) {
            ckpt_remove_leftovers(p->dir);
            if (mkdir(p->tmp, 0755) != 0)
                mine = err_set(&e, ST_ERR_RUNTIME, "%s: cannot create directory: %s", p->tmp, strerror(errno));
        }
    }
    if (mine == ST_OK) mine = ckpt_fault_hit(fault, "begin", &e);
    Status st = agree(c, mine, &e, "start the save", NULL, err);
    if (st != ST_OK) abandon(c, p);
    return st;
}

/* This rank's manifest entries (JSON): its file (bytes, xxh3) and its slices. Caller frees. */
static char *fragment_text(int rank, const Item *items, int n, const int kinds[NKIND], const RankWrite *rw) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "rank", rank);
    cJSON *k = cJSON_AddArrayToObject(o, "kinds");
    for (int i = 0; i < NKIND; i++)
        if (kinds[i]) cJSON_AddItemToArray(k, cJSON_CreateString(KIND_NAME[i]));
    if (rw->wrote) {
        cJSON *f = cJSON_AddObjectToObject(o, "file");
        char name[32], hx[17];
        snprintf(name, sizeof name, "rank%05d.safetensors", rank);
        ckpt_hex64(hx, rw->sum.xxh3);
        cJSON_AddStringToObject(f, "name", name);
        cJSON_AddNumberToObject(f, "rank", rank);
        cJSON_AddNumberToObject(f, "bytes", (double)rw->sum.bytes);
        cJSON_AddStringToObject(f, "xxh3", hx);
    }
    cJSON *s = cJSON_AddArrayToObject(o, "slices");
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(s, slice_json(&items[i].s, 1));
    char *t = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return t;
}

typedef struct {
    const char *text;
} TextArg;

/* A text file in two writes, so a fault after the first lands mid-file. */
static Status text2_producer(const void *arg, StWriteFn w, void *ctx, Err *err) {
    const char *t = ((const TextArg *)arg)->text;
    size_t n = strlen(t), h = n / 2;
    Status st = w(ctx, t, h, err);
    return st != ST_OK ? st : w(ctx, t + h, n - h, err);
}

/* The result of a save as rank 0 broadcasts it. */
typedef struct {
    int32_t status;
    int32_t pruned;
    uint64_t bytes;
    double ms_prune;
    char path[4096];
    char msg[1024];
} Outcome;

/* Step 4 on rank 0: check the gathered entries, write manifest.json, config.json and state.json,
 * fsync, rename into place, fsync CKPT_DIR, move `latest`, prune. */
static Status rank0_finish(Comm *c, const char *all, const size_t *lens, const CkptMeta *meta, const CkptOptions *o,
                           const ModelConfig *cfg, const Fault *fault, const SavePaths *p, const FileSum *extra,
                           Outcome *out, Err *err) {
    Status st = ST_OK;
    int nf = 0, ns = 0, cap = 64;
    char (*fnames)[32] = calloc((size_t)c->world, sizeof *fnames);
    FileSum *fsums = calloc((size_t)c->world + 3, sizeof *fsums);
    int *franks = calloc((size_t)c->world, sizeof *franks);
    Slice *sl = malloc((size_t)cap * sizeof *sl);
    const Slice **pick = NULL;
    cJSON *man = NULL, *frag = NULL;
    char *mtext = NULL, *state = NULL, **names = NULL;
    ParamLayout full;
    memset(&full, 0, sizeof full);
    int kinds0[NKIND] = {0};
    if (!fnames || !fsums || !franks || !sl || layout_init(&full, cfg, 1) != 0) {
        st = err_set(err, ST_ERR_RUNTIME, "%s: out of memory building the manifest", p->tmp);
        goto done;
    }
    /* 1. Parse every rank's entries. */
    size_t off = 0;
    for (int r = 0; r < c->world; r++) {
        char where[64];
        snprintf(where, sizeof where, "checkpoint manifest entries of rank %d", r);
        cJSON_Delete(frag);
        frag = cJSON_ParseWithLength(all + off, lens[r]);
        off += lens[r];
        const cJSON *kinds = cJSON_GetObjectItemCaseSensitive(frag, "kinds");
        const cJSON *slices = cJSON_GetObjectItemCaseSensitive(frag, "slices");
        const cJSON *file = cJSON_GetObjectItemCaseSensitive(frag, "file");
        if (!cJSON_IsArray(kinds) || !cJSON_IsArray(slices)) {
            st = err_set(err, ST_ERR_RUNTIME, "%s: expected {kinds, slices}, found unparsable text", where);
            goto done;
        }
        int kr[NKIND] = {0};
        for (const cJSON *k = kinds->child; k; k = k->next) {
            int i = cJSON_IsString(k) ? name_index(KIND_NAME, NKIND, k->valuestring) : -1;
            if (i >= 0) kr[i] = 1;
        }
        if (r == 0) memcpy(kinds0, kr, sizeof kr);
        else if (memcmp(kinds0, kr, sizeof kr) != 0) {
            st = err_set(err, ST_ERR_INPUT, "checkpoint: rank %d saves %s%s%s, rank 0 saves %s%s%s: every rank must "
                         "save the same optimizer state", r, kr[0] ? "params" : "", kr[1] ? " m" : "", kr[2] ? " v" : "",
                         kinds0[0] ? "params" : "", kinds0[1] ? " m" : "", kinds0[2] ? " v" : "");
            goto done;
        }
        if (cJSON_IsObject(file)) {
            double b;
            const cJSON *hx = cJSON_GetObjectItemCaseSensitive(file, "xxh3"), *by = cJSON_GetObjectItemCaseSensitive(file, "bytes");
            if (!json_str(file, "name", fnames[nf], sizeof fnames[nf]) || !cJSON_IsNumber(by) || !cJSON_IsString(hx) ||
                !ckpt_parse_hex64(hx->valuestring, strlen(hx->valuestring), &fsums[nf].xxh3)) {
                st = err_set(err, ST_ERR_RUNTIME, "%s: file: expected {name, bytes, xxh3}", where);
                goto done;
            }
            b = by->valuedouble;
            fsums[nf].bytes = (size_t)b;
            franks[nf++] = r;
        }
        for (const cJSON *x = slices->child; x; x = x->next) {
            if (ns == cap) {
                Slice *y = realloc(sl, (size_t)(cap *= 2) * sizeof *sl);
                if (!y) {
                    st = err_set(err, ST_ERR_RUNTIME, "out of memory building the manifest");
                    goto done;
                }
                sl = y;
            }
            if ((st = slice_parse(x, NULL, 0, &sl[ns], where, err)) != ST_OK) goto done;
            if (!kinds0[sl[ns].kind] || layout_find_id(&full, sl[ns].id) < 0 ||
                strcmp(full.tensors[layout_find_id(&full, sl[ns].id)].name, sl[ns].name)) {
                st = err_set(err, ST_ERR_INPUT, "%s: slice %s (id %d, %s) is not a tensor of this model", where,
                             sl[ns].name, sl[ns].id, KIND_NAME[sl[ns].kind]);
                goto done;
            }
            ns++;
        }
    }
    if (!kinds0[KIND_PARAMS]) {
        st = err_set(err, ST_ERR_INPUT, "checkpoint: no rank saves the weights");
        goto done;
    }
    /* 2. Every (tensor, kind) of the whole model covered exactly once; the manifest. */
    if (!(pick = malloc((size_t)(ns + 1) * sizeof *pick))) {
        st = err_set(err, ST_ERR_RUNTIME, "out of memory building the manifest");
        goto done;
    }
    man = cJSON_CreateObject();
    cJSON_AddStringToObject(man, "format", MANIFEST_FORMAT);
    cJSON_AddNumberToObject(man, "version", 1);
    cJSON_AddNumberToObject(man, "step", (double)meta->step);
    cJSON *g = cJSON_AddObjectToObject(man, "grid");
    cJSON_AddNumberToObject(g, "world", c->world);
    cJSON_AddNumberToObject(g, "dp", c->dp);
    cJSON_AddNumberToObject(g, "tp", c->tp);
    cJSON_AddNumberToObject(g, "pp", c->pp);
    cJSON_AddNumberToObject(g, "zero", meta->zero);
    ckpt_model_json(cJSON_AddObjectToObject(man, "model"), cfg);
    cJSON *ka = cJSON_AddArrayToObject(man, "kinds");
    for (int k = 0; k < NKIND; k++)
        if (kinds0[k]) cJSON_AddItemToArray(ka, cJSON_CreateString(KIND_NAME[k]));
    cJSON *fa = cJSON_AddArrayToObject(man, "files");
    for (int i = 0; i < nf; i++) {
        cJSON *f = cJSON_CreateObject();
        char hx[17];
        ckpt_hex64(hx, fsums[i].xxh3);
        cJSON_AddStringToObject(f, "name", fnames[i]);
        cJSON_AddNumberToObject(f, "rank", franks[i]);
        cJSON_AddNumberToObject(f, "bytes", (double)fsums[i].bytes);
        cJSON_AddStringToObject(f, "xxh3", hx);
        cJSON_AddItemToArray(fa, f);
    }
    cJSON *ta = cJSON_AddObjectToObject(man, "tensors");
    for (int k = 0; k < full.ntensors; k++) {
        const TensorInfo *f = &full.tensors[k];
        cJSON *t = cJSON_AddObjectToObject(ta, f->name);
        cJSON_AddNumberToObject(t, "id", f->id);
        int shape[2] = {f->rows_real, f->shape[1]};
        cJSON_AddItemToObject(t, "shape", cJSON_CreateIntArray(shape, f->ndim));
        cJSON *sa = cJSON_AddArrayToObject(t, "slices");
        for (int kind = 0; kind < NKIND; kind++) {
            if (!kinds0[kind]) continue;
            int n = 0;
            for (int i = 0; i < ns; i++)
                if (sl[i].id == f->id && sl[i].kind == kind) pick[n++] = &sl[i];
            if ((st = check_cover(pick, n, f->name, KIND_NAME[kind], f->rows_real, f->shape[1], "checkpoint save",
                                  err)) != ST_OK)
                goto done;
            for (int i = 0; i < n; i++) cJSON_AddItemToArray(sa, slice_json(pick[i], 0));
        }
    }
    mtext = cJSON_Print(man);
    /* 3. The files, then the commit. */
    if (!mtext || !(names = calloc((size_t)nf + 3, sizeof *names))) {
        st = err_set(err, ST_ERR_RUNTIME, "out of memory building the manifest");
        goto done;
    }
    TextArg ma = {mtext};
    FileSum msum, csum, ssum;
    if ((st = ckpt_write_file(p->tmp, CKPT_MANIFEST, text2_producer, &ma, fault, "manifest", 1, NULL, NULL, 0, &msum,
                              err)) != ST_OK)
        goto done;
    char cfgtext[4096];
    st_hf_config_text(cfg, o->tokenizer, cfgtext, sizeof cfgtext);
    TextArg ca = {cfgtext};
    if ((st = ckpt_write_file(p->tmp, "config.json", text2_producer, &ca, fault, NULL, 0, NULL, NULL, 0, &csum, err)) !=
        ST_OK)
        goto done;
    /* state.json's files: config.json, manifest.json, the optimizer's extra state (written by this
     * rank before the agreement) if any, then every rank file (shifted up). */
    int head = 2 + (extra != NULL);
    memmove(fsums + head, fsums, (size_t)nf * sizeof *fsums);
    fsums[0] = csum, fsums[1] = msum;
    names[0] = "config.json", names[1] = CKPT_MANIFEST;
    if (extra) fsums[2] = *extra, names[2] = CKPT_EXTRA_FILE;
    for (int i = 0; i < nf; i++) names[i + head] = fnames[i];
    nf += head - 2;
    if (!(state = ckpt_state_text(meta, cfg, CKPT_FORMAT_SHARDED, (const char *const *)names, fsums, nf + 2))) {
        st = err_set(err, ST_ERR_RUNTIME, "%s: out of memory building state.json", p->tmp);
        goto done;
    }
    StateArg sa = {state, strlen(state) - 2}; /* drop the closing "\n}" */
    if ((st = ckpt_write_file(p->tmp, "state.json", ckpt_state_producer, &sa, fault, "state", 1, NULL, NULL, 0, &ssum,
                              err)) != ST_OK)
        goto done;
    out->bytes = ssum.bytes;
    for (int i = 0; i < nf + 2; i++) out->bytes += fsums[i].bytes;
    if ((st = ckpt_fault_hit(fault, "sync", err)) != ST_OK) goto done;
    if ((st = ckpt_fsync_dir(p->tmp, err)) != ST_OK) goto done;
    if ((st = ckpt_fault_hit(fault, "rename", err)) != ST_OK) goto done;
    struct stat sb;
    if (lstat(p->fin, &sb) == 0) {
        /* Re-saving an existing step (e.g. after a fallback): swap atomically, then drop the old. */
        if (renameat2(AT_FDCWD, p->tmp, AT_FDCWD, p->fin, RENAME_EXCHANGE) != 0) {
            st = err_set(err, ST_ERR_RUNTIME, "%s: cannot exchange with %s: %s", p->fin, p->tmp, strerror(errno));
            goto done;
        }
    } else if (rename(p->tmp, p->fin) != 0) {
        st = err_set(err, ST_ERR_RUNTIME, "%s: cannot rename from %s: %s", p->fin, p->tmp, strerror(errno));
        goto done;
    }
    /* Committed: from here on a failure leaves the new checkpoint valid (resolve finds it). */
    if ((st = ckpt_fsync_dir(p->dir, err)) != ST_OK) goto done;
    ckpt_rm_tree(p->tmp); /* the old copy after an exchange; nothing otherwise */
    snprintf(out->path, sizeof out->path, "%.4095s", p->fin);
    if ((st = ckpt_fault_hit(fault, "latest", err)) != ST_OK) goto done;
    if ((st = ckpt_write_latest(p->dir, p->name, fault, err)) != ST_OK) goto done;
    if ((st = ckpt_fault_hit(fault, "prune", err)) != ST_OK) goto done;
    double t1 = timer_ms();
    int pruned = 0;
    st = ckpt_prune(p->dir, o->keep_last, o->keep_every, &pruned, err);
    out->pruned = pruned;
    out->ms_prune = timer_ms() - t1;
done:
    if (st != ST_OK && !out->path[0]) ckpt_rm_tree(p->tmp); /* not committed: nothing of it stays */
    cJSON_Delete(frag);
    cJSON_Delete(man);
    free(mtext);
    free(state);
    free(names);
    free(pick);
    free(sl);
    free(fnames);
    free(fsums);
    free(franks);
    layout_free(&full);
    return st;
}

/* Steps 3 and 4 (collective): agree on the writes, gather the entries, rank 0 commits, everyone
 * returns rank 0's outcome. */
static Status shard_commit(Comm *c, const SavePaths *p, const Item *items, int n, const int kinds[NKIND],
                           const RankWrite *rw, const CkptMeta *meta, const CkptOptions *o, const ModelConfig *cfg,
                           const Fault *fault, const FileSum *extra, CkptSaveInfo *info, Err *err) {
    Err e = rw->err;
    Status mine = rw->st;
    if (mine == ST_OK) mine = ckpt_fault_hit(fault, "agree", &e);
    char file[64];
    snprintf(file, sizeof file, "%s/rank%%05d.safetensors", ckpt_base_name(p->tmp));
    Status st = agree(c, mine, &e, "write", file, err);
    if (st != ST_OK) {
        abandon(c, p);
        return st;
    }
    char *frag = fragment_text(c->rank, items, n, kinds, rw);
    size_t *lens = c->rank == 0 ? calloc((size_t)c->world, sizeof *lens) : NULL;
    void *all = NULL;
    st = comm_gather_bytes(c, frag ? frag : "", frag ? strlen(frag) : 0, &all, lens, err);
    free(frag);
    Outcome *out = calloc(1, sizeof *out);
    if (!out) st = err_set(err, ST_ERR_RUNTIME, "out of memory (checkpoint outcome)");
    if (st != ST_OK) { /* a collective failed: the job is broken, nothing to agree on */
        free(all), free(lens), free(out);
        return st;
    }
    if (c->rank == 0) {
        Err e0 = {0};
        out->status = lens ? rank0_finish(c, all, lens, meta, o, cfg, fault, p, extra, out, &e0)
                           : err_set(&e0, ST_ERR_RUNTIME, "out of memory (checkpoint manifest)");
        snprintf(out->msg, sizeof out->msg, "%s", e0.msg);
    }
    free(all), free(lens);
    st = comm_bcast_bytes(c, out, sizeof *out, 0, err);
    if (st == ST_OK && out->status != ST_OK)
        st = err_set(err, (Status)out->status, "checkpoint save %s on every rank: rank 0 could not %s %s: %s",
                     out->path[0] ? "committed but incomplete" : "aborted", out->path[0] ? "finish" : "commit",
                     p->name, out->msg);
    if (st == ST_OK || out->path[0]) {
        snprintf(info->path, sizeof info->path, "%s", out->path);
        info->bytes = out->bytes, info->pruned = out->pruned, info->ms_prune = out->ms_prune;
    }
    free(out);
    return st;
}

static void kinds_of(const CkptShardSrc *src, int kinds[NKIND]) {
    kinds[KIND_PARAMS] = src->params != NULL, kinds[KIND_M] = src->m != NULL, kinds[KIND_V] = src->v != NULL;
}

Status ckpt_shard_save(Comm *c, const CkptShardSrc *src, const CkptMeta *meta, const CkptOptions *o,
                       CkptSaveInfo *info, Err *err) {
    CkptSaveInfo local;
    if (!info) info = &local;
    memset(info, 0, sizeof *info);
    if (!o || !o->dir || !o->dir[0]) return err_set(err, ST_ERR_INPUT, "--ckpt-dir: expected a directory, found none");
    double t0 = timer_ms();
    SavePaths p;
    save_paths(&p, o->dir, meta->step);
    Fault fault;
    Status st = shard_prepare(c, &p, meta, o, &fault, err);
    if (st != ST_OK) return st;
    Item *items = NULL;
    size_t floats;
    int n = build_items(src, c->rank, &items, &floats);
    RankWrite rw;
    if (n < 0) {
        memset(&rw, 0, sizeof rw);
        rw.st = err_set(&rw.err, ST_ERR_RUNTIME, "out of memory listing the checkpoint slices");
        n = 0;
    } else {
        write_rank(&p, c->rank, items, n, &fault, &rw);
    }
    /* The optimizer's extra state: world rank 0 writes it beside its rank file; a failure is its
     * write's failure (every rank learns it at the agreement). */
    FileSum xsum = {0};
    int has_extra = c->rank == 0 && src->extra != NULL;
    if (has_extra && rw.st == ST_OK) {
        CkptSnap xs;
        memset(&xs, 0, sizeof xs);
        xs.extra = src->extra, xs.extra_n = src->extra_n, xs.extra_name = src->extra_name;
        rw.st = ckpt_write_file(p.tmp, CKPT_EXTRA_FILE, ckpt_extra_producer, &xs, &fault, NULL, 0, NULL, NULL, 0, &xsum,
                                &rw.err);
    }
    int kinds[NKIND];
    kinds_of(src, kinds);
    st = shard_commit(c, &p, items, n, kinds, &rw, meta, o, &src->pl->cfg, &fault, has_extra ? &xsum : NULL, info, err);
    free(items);
    info->ms_write = timer_ms() - t0 - info->ms_prune;
    return st;
}

/* ======================================================================================== */
/* Load                                                                                      */
/* ======================================================================================== */

int ckpt_is_sharded(const char *path) {
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", path, CKPT_MANIFEST);
    return access(p, F_OK) == 0;
}

/* One file of the checkpoint, mapped and verified when first needed. */
typedef struct {
    char name[64];
    FileSum sum;
    int needed;
    unsigned char *map;
    size_t len;
    StFile sf;
    int parsed;
} MapFile;

/* Maps ckpt/name read-only, checks its size and XXH3-64 against state.json's record, parses the
 * safetensors header. Errors name "step_x/name". */
static Status map_file(const char *ckpt, MapFile *f, const Faults *faults, Err *err) {
    char path[4200], shown[256];
    snprintf(path, sizeof path, "%s/%s", ckpt, f->name);
    snprintf(shown, sizeof shown, "%s/%s", ckpt_base_name(ckpt), f->name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        if (fd >= 0) close(fd);
        return err_set(err, ST_ERR_INPUT, "%s: missing or unreadable", shown);
    }
    size_t n = (size_t)sb.st_size;
    if (n != f->sum.bytes || n == 0) {
        close(fd);
        return err_set(err, ST_ERR_INPUT, "%s: expected %zu bytes, found %zu (%s)", shown, f->sum.bytes, n,
                       n < f->sum.bytes ? "truncated" : "corrupt");
    }
    void *m = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) return err_set(err, ST_ERR_RUNTIME, "%s: cannot map %zu bytes: %s", shown, n, strerror(errno));
    f->map = m, f->len = n;
    madvise(m, n, MADV_SEQUENTIAL);
    uint64_t h = XXH3_64bits(m, n);
    if (h != f->sum.xxh3 && !(faults && faults->ckpt_skip_verify))
        return err_set(err, ST_ERR_INPUT, "%s: xxh3 checksum mismatch: state.json records %016" PRIx64 ", file has %016"
                       PRIx64 " (corrupt)", shown, f->sum.xxh3, h);
    Status st = st_parse(&f->sf, shown, m, n, err);
    f->parsed = st == ST_OK;
    return st;
}

static void map_free(MapFile *f) {
    if (f->parsed) st_file_free(&f->sf);
    if (f->map) munmap(f->map, f->len);
    f->map = NULL, f->parsed = 0;
}

/* The data of slice s in its (mapped, verified) file: an F32 entry of shape (rows_real(, cols)). */
static Status slice_data(const MapFile *f, const Slice *s, const float **out, Err *err) {
    const StEntry *e = st_find(&f->sf, s->key);
    if (!e) return err_set(err, ST_ERR_INPUT, "%s: tensor %s missing (the manifest names it)", f->sf.path, s->key);
    int ok = !strcmp(e->dtype, "F32") && e->ndim == s->ndim && e->shape[0] == s->rows_real &&
             (s->ndim == 1 || e->shape[1] == s->cols) && e->end - e->begin == (size_t)s->rows_real * s->cols * 4;
    if (!ok)
        return err_set(err, ST_ERR_INPUT, "%s: tensor %s: expected F32 (%d, %d) as the manifest says, found %s of %d dims",
                       f->sf.path, s->key, s->rows_real, s->cols, e->dtype, e->ndim);
    *out = (const float *)(f->sf.data + e->begin);
    return ST_OK;
}

/* A tensor of the manifest: its full shape and its slices (all kinds). */
typedef struct {
    char name[48];
    int id, ndim, rows, cols;
    int first, n; /* slices [first, first + n) of the slice array */
} ManTensor;

typedef struct {
    cJSON *json;
    ManTensor *t;
    int nt;
    Slice *s;
    int ns;
    int kinds[NKIND];
} Manifest;

static void manifest_free(Manifest *m) {
    cJSON_Delete(m->json);
    free(m->t);
    free(m->s);
    memset(m, 0, sizeof *m);
}

/* Parses manifest.json (already verified) and checks its model shape against cfg. */
static Status manifest_parse(Manifest *m, const char *text, size_t len, const ModelConfig *cfg, const char *where,
                             const Faults *faults, Err *err) {
    memset(m, 0, sizeof *m);
    m->json = cJSON_ParseWithLength(text, len);
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(m->json, "format");
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(m->json, "model");
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(m->json, "tensors");
    const cJSON *ks = cJSON_GetObjectItemCaseSensitive(m->json, "kinds");
    int ver;
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, MANIFEST_FORMAT) || !json_int(m->json, "version", 1, 1, &ver) ||
        !cJSON_IsObject(md) || !cJSON_IsObject(ts) || !cJSON_IsArray(ks))
        return err_set(err, ST_ERR_INPUT, "%s: expected format %s version 1 with model, kinds and tensors", where,
                       MANIFEST_FORMAT);
    const char *keys[5] = {"layers", "heads", "channels", "vocab", "max_seq_len"};
    int want[5] = {cfg->n_layer, cfg->n_head, cfg->n_embd, cfg->vocab, cfg->max_seq};
    for (int i = 0; i < 5; i++) {
        int v;
        if (!json_int(md, keys[i], 0, 1 << 30, &v))
            return err_set(err, ST_ERR_INPUT, "%s: model.%s: expected a number", where, keys[i]);
        if (v != want[i])
            return err_set(err, ST_ERR_INPUT, "%s: model %s: checkpoint has %d, model has %d", where, keys[i], v, want[i]);
    }
    const cJSON *ar = cJSON_GetObjectItemCaseSensitive(md, "arch");
    int arch = cJSON_IsString(ar) ? model_arch_parse(ar->valuestring) : ar ? -1 : ARCH_GPT2;
    if (arch != cfg->arch)
        return err_set(err, ST_ERR_INPUT, "%s: model arch: checkpoint has %s, model has %s", where,
                       cJSON_IsString(ar) ? ar->valuestring : "gpt2", model_arch_name(cfg->arch));
    if (arch == ARCH_LLAMA) {
        int kvh, ffn;
        const cJSON *tie = cJSON_GetObjectItemCaseSensitive(md, "tie_embeddings");
        if (!json_int(md, "kv_heads", 1, 1 << 30, &kvh) || !json_int(md, "ffn", 1, 1 << 30, &ffn) || !cJSON_IsBool(tie))
            return err_set(err, ST_ERR_INPUT, "%s: model: expected kv_heads, ffn and tie_embeddings for a Llama", where);
        if (kvh != cfg->n_kv_head || ffn != cfg->ffn || cJSON_IsTrue(tie) == cfg->untied)
            return err_set(err, ST_ERR_INPUT, "%s: model: checkpoint has kv_heads %d, ffn %d, %s head; model has %d, %d, "
                           "%s", where, kvh, ffn, cJSON_IsTrue(tie) ? "tied" : "untied", cfg->n_kv_head, cfg->ffn,
                           cfg->untied ? "untied" : "tied");
    }
    for (const cJSON *k = ks->child; k; k = k->next) {
        int i = cJSON_IsString(k) ? name_index(KIND_NAME, NKIND, k->valuestring) : -1;
        if (i < 0) return err_set(err, ST_ERR_INPUT, "%s: kinds: expected params, m or v", where);
        m->kinds[i] = 1;
    }
    int nt = cJSON_GetArraySize(ts), ns = 0;
    for (const cJSON *t = ts->child; t; t = t->next)
        ns += cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(t, "slices"));
    m->t = calloc((size_t)nt + 1, sizeof *m->t);
    m->s = calloc((size_t)ns + 1, sizeof *m->s);
    if (!m->t || !m->s) return err_set(err, ST_ERR_RUNTIME, "%s: out of memory", where);
    for (const cJSON *t = ts->child; t; t = t->next) {
        ManTensor *x = &m->t[m->nt];
        const cJSON *shape = cJSON_GetObjectItemCaseSensitive(t, "shape");
        const cJSON *sl = cJSON_GetObjectItemCaseSensitive(t, "slices");
        x->ndim = cJSON_GetArraySize(shape);
        if (strlen(t->string) >= sizeof x->name || !json_int(t, "id", 0, 1 << 30, &x->id) || !cJSON_IsArray(shape) ||
            x->ndim < 1 || x->ndim > 2 || !cJSON_IsArray(sl))
            return err_set(err, ST_ERR_INPUT, "%s: tensors.%s: expected {id, shape, slices}", where, t->string);
        snprintf(x->name, sizeof x->name, "%s", t->string);
        const cJSON *r = cJSON_GetArrayItem(shape, 0), *c = x->ndim == 2 ? cJSON_GetArrayItem(shape, 1) : NULL;
        /* whole and in range before the casts below (1e300 was cast to an int: undefined) */
        if (!cJSON_IsNumber(r) || (c && !cJSON_IsNumber(c)) || !(r->valuedouble >= 0 && r->valuedouble <= (1 << 30)) ||
            r->valuedouble != floor(r->valuedouble) ||
            (c && (!(c->valuedouble >= 1 && c->valuedouble <= (1 << 30)) || c->valuedouble != floor(c->valuedouble))))
            return err_set(err, ST_ERR_INPUT, "%s: tensors.%s.shape: expected whole numbers in [0, 2^30]", where, t->string);
        x->rows = (int)r->valuedouble, x->cols = c ? (int)c->valuedouble : 1;
        x->first = m->ns;
        for (const cJSON *s = sl->child; s; s = s->next) {
            Status st = slice_parse(s, x->name, x->id, &m->s[m->ns], where, err);
            if (st != ST_OK) return st;
            Slice *y = &m->s[m->ns++];
            /* Test-only negative control: every tp slice placed one tp rank off. */
            if (!slice_whole(y) && faults && faults->ckpt_wrong_slice) y->tp_rank = (y->tp_rank + 1) % y->tp;
        }
        x->n = m->ns - x->first;
        m->nt++;
    }
    return ST_OK;
}

/* What to do for one (tensor of the target layout, kind): copy one slice, or assemble all. */
typedef struct {
    int tensor;      /* index in the target layout */
    int kind;
    const ManTensor *mt;
    const Slice *direct; /* a saved slice identical to the wanted one, or NULL */
} Job;

static int file_index(MapFile *files, int nfiles, const char *name) {
    for (int i = 0; i < nfiles; i++)
        if (!strcmp(files[i].name, name)) return i;
    return -1;
}

Status ckpt_shard_load(const char *path, const ParamLayout *pl, float *params, float *m, float *v, CkptMeta *meta,
                       const Faults *faults, Err *err) {
    CkptMeta mt;
    CkptFileList fl;
    memset(&fl, 0, sizeof fl);
    Status st = ckpt_state_read(path, &mt, &fl, err);
    if (st != ST_OK) return st;
    const char *ck = ckpt_base_name(path);
    char where[512];
    snprintf(where, sizeof where, "%s/%s", ck, CKPT_MANIFEST);
    Manifest man;
    memset(&man, 0, sizeof man);
    MapFile *files = NULL;
    Job *jobs = NULL;
    const Slice **pick = NULL;
    float *full = NULL;
    char *mtext = NULL;
    size_t mlen = 0;
    ParamLayout fl_layout;
    memset(&fl_layout, 0, sizeof fl_layout);
    float *bufs[NKIND] = {params, m, v};
    int njobs = 0;
    if (!fl.sharded) {
        st = err_set(err, ST_ERR_INPUT, "%s: expected a sharded checkpoint (state.json format %s), found the "
                     "single-process format", ck, CKPT_FORMAT_SHARDED);
        goto done;
    }
    if ((st = ckpt_check_file(path, "config.json", ckpt_files_find(&fl, "config.json"), NULL, NULL, NULL, err)) != ST_OK)
        goto done;
    if ((st = ckpt_check_file(path, CKPT_MANIFEST, ckpt_files_find(&fl, CKPT_MANIFEST), &mtext, &mlen, NULL, err)) !=
        ST_OK)
        goto done;
    if ((st = manifest_parse(&man, mtext, mlen, &pl->cfg, where, faults, err)) != ST_OK) goto done;
    if (layout_init(&fl_layout, &pl->cfg, 1) != 0 || !(files = calloc((size_t)fl.n + 1, sizeof *files)) ||
        !(jobs = calloc((size_t)pl->ntensors * NKIND + 1, sizeof *jobs)) ||
        !(pick = calloc((size_t)man.ns + 1, sizeof *pick))) {
        st = err_set(err, ST_ERR_RUNTIME, "%s: out of memory", ck);
        goto done;
    }
    for (int i = 0; i < fl.n; i++) {
        snprintf(files[i].name, sizeof files[i].name, "%s", fl.e[i].name);
        files[i].sum = fl.e[i].sum;
    }
    for (int k = 0; k < NKIND; k++) {
        if (!bufs[k]) continue;
        memset(bufs[k], 0, pl->total * sizeof(float));
        if (!man.kinds[k]) {
            st = err_set(err, ST_ERR_INPUT, "%s: holds no %s (its optimizer is %s); this run needs them", ck, KIND_NAME[k],
                         mt.optimizer);
            goto done;
        }
    }
    /* Plan: for every wanted (tensor, kind) the slices to read, and so the files. */
    for (int i = 0; i < pl->ntensors; i++) {
        const TensorInfo *t = &pl->tensors[i];
        const TensorInfo *f = &fl_layout.tensors[layout_find_id(&fl_layout, t->id)];
        const ManTensor *x = NULL;
        for (int j = 0; j < man.nt && !x; j++)
            if (!strcmp(man.t[j].name, t->name)) x = &man.t[j];
        if (!x) {
            st = err_set(err, ST_ERR_INPUT, "%s: tensor %s missing", where, t->name);
            goto done;
        }
        if (x->id != t->id || x->rows != f->rows_real || x->cols != f->shape[1] || x->ndim != f->ndim) {
            st = err_set(err, ST_ERR_INPUT, "%s: tensor %s: checkpoint has id %d shape %d x %d, model has id %d shape %d x %d",
                         where, t->name, x->id, x->rows, x->cols, t->id, f->rows_real, f->shape[1]);
            goto done;
        }
        for (int k = 0; k < NKIND; k++) {
            if (!bufs[k]) continue;
            int n = 0;
            for (int j = 0; j < x->n; j++)
                if (man.s[x->first + j].kind == k) pick[n++] = &man.s[x->first + j];
            if ((st = check_cover(pick, n, t->name, KIND_NAME[k], x->rows, x->cols, where, err)) != ST_OK) goto done;
            Job *jb = &jobs[njobs++];
            jb->tensor = i, jb->kind = k, jb->mt = x;
            int want_whole = t->split == TP_REPLICATED || pl->tp == 1;
            for (int j = 0; j < n && !jb->direct; j++) {
                const Slice *s = pick[j];
                if ((want_whole && slice_whole(s)) ||
                    (!want_whole && !slice_whole(s) && s->tp == pl->tp && s->tp_rank == pl->tp_rank &&
                     s->split == t->split && s->groups == t->groups && s->rows == t->shape[0] &&
                     s->cols == t->shape[1] && s->rows_real == t->rows_real))
                    jb->direct = s;
            }
            for (int j = 0; j < n; j++) {
                if (jb->direct && pick[j] != jb->direct) continue;
                int fi = file_index(files, fl.n, pick[j]->file);
                if (fi < 0) {
                    st = err_set(err, ST_ERR_INPUT, "%s: tensor %s (%s) is in %s, which state.json does not list", where,
                                 t->name, KIND_NAME[k], pick[j]->file);
                    goto done;
                }
                files[fi].needed = 1;
            }
        }
    }
    /* Read (map) and verify every needed file before copying anything from it. */
    for (int i = 0; i < fl.n; i++)
        if (files[i].needed && (st = map_file(path, &files[i], faults, err)) != ST_OK) goto done;
    for (int j = 0; j < njobs; j++) {
        const Job *jb = &jobs[j];
        const TensorInfo *t = &pl->tensors[jb->tensor];
        float *dst = bufs[jb->kind] + t->offset;
        const float *src;
        if (jb->direct) {
            const MapFile *f = &files[file_index(files, fl.n, jb->direct->file)];
            if ((st = slice_data(f, jb->direct, &src, err)) != ST_OK) goto done;
            size_t n = (size_t)t->rows_real * t->shape[1];
            ST_CHECK((size_t)jb->direct->rows_real * jb->direct->cols == n);
            memcpy(dst, src, n * sizeof(float));
            continue;
        }
        /* Assemble the full tensor from every saved slice, then cut the wanted one. */
        const ManTensor *x = jb->mt;
        TensorInfo ft;
        memset(&ft, 0, sizeof ft);
        ft.ndim = x->ndim, ft.shape[0] = x->rows, ft.shape[1] = x->cols, ft.rows_real = x->rows;
        free(full);
        if (!(full = calloc((size_t)x->rows * x->cols + 1, sizeof *full))) {
            st = err_set(err, ST_ERR_RUNTIME, "%s: out of memory assembling tensor %s", ck, t->name);
            goto done;
        }
        for (int i = 0; i < x->n; i++) {
            const Slice *s = &man.s[x->first + i];
            if (s->kind != jb->kind) continue;
            const MapFile *f = &files[file_index(files, fl.n, s->file)];
            if ((st = slice_data(f, s, &src, err)) != ST_OK) goto done;
            TensorInfo si = slice_info(s);
            layout_tp_copy_tensor(&si, s->tp, s->tp_rank, (float *)src, &ft, full, 1); /* reads src only */
        }
        layout_tp_copy_tensor(t, pl->tp, pl->tp_rank, dst, &ft, full, 0);
    }
done:
    if (files)
        for (int i = 0; i < fl.n; i++) map_free(&files[i]);
    free(files);
    free(jobs);
    free(pick);
    free(full);
    free(mtext);
    manifest_free(&man);
    layout_free(&fl_layout);
    ckpt_files_free(&fl);
    if (st == ST_OK && meta) *meta = mt;
    else ckpt_meta_free(&mt);
    return st;
}

/* ======================================================================================== */
/* Either format on any layout                                                               */
/* ======================================================================================== */

Status ckpt_load_any(const char *path, const ParamLayout *pl, float *params, float *m, float *v, CkptMeta *meta,
                     const Faults *faults, Err *err) {
    if (ckpt_is_sharded(path)) return ckpt_shard_load(path, pl, params, m, v, meta, faults, err);
    /* The single-process format holds full tensors: read them into the full layout, cut pl's slices. */
    ParamLayout full;
    if (layout_init(&full, &pl->cfg, 1) != 0) return err_set(err, ST_ERR_RUNTIME, "out of memory");
    float *bufs[NKIND] = {params, m, v}, *fb[NKIND] = {0};
    Status st = ST_OK;
    for (int k = 0; k < NKIND && st == ST_OK; k++)
        if (bufs[k] && !(fb[k] = calloc(full.total, sizeof(float))))
            st = err_set(err, ST_ERR_RUNTIME, "%s: out of memory (%zu floats)", ckpt_base_name(path), full.total);
    if (st == ST_OK) st = ckpt_load_single(path, &full, fb[0], fb[1], fb[2], NULL, meta, NULL, NULL, err);
    for (int k = 0; k < NKIND && st == ST_OK; k++) {
        if (!bufs[k]) continue;
        memset(bufs[k], 0, pl->total * sizeof(float));
        layout_tp_copy(pl, bufs[k], &full, fb[k], 0, 1);
    }
    for (int k = 0; k < NKIND; k++) free(fb[k]);
    layout_free(&full);
    return st;
}

/* ======================================================================================== */
/* Asynchronous save                                                                         */
/* ======================================================================================== */

struct CkptShardAsync {
    MemStats *mem;
    float *staging;       /* this rank's slices, packed (MEM_CKPT_STAGING) */
    size_t floats;        /* staging size */
    Item *items;          /* slices, data pointing into staging */
    int n;
    int kinds[NKIND];
    ModelConfig cfg;
    /* The save in flight (started, not committed). */
    int pending;
    pthread_t thread;
    int started;
    atomic_int finished;
    SavePaths paths;
    Fault fault;
    CkptMeta meta;        /* deep copy */
    CkptOptions opts;     /* strings copied below */
    char tokenizer[256];
    RankWrite rw;
    int rank;
    double ms_copy, t_start;
};

static void touch_pages(float *p, size_t n) {
    volatile float *q = p;
    for (size_t i = 0; i < n; i += 4096 / sizeof(float)) q[i] = 0.0f;
}

Status ckpt_shard_async_init(CkptShardAsync **out, const CkptShardSrc *src, MemStats *mem, Err *err) {
    *out = NULL;
    CkptShardAsync *a = calloc(1, sizeof *a);
    if (!a) return err_set(err, ST_ERR_RUNTIME, "out of memory creating the asynchronous checkpoint saver");
    a->mem = mem;
    a->cfg = src->pl->cfg;
    a->n = build_items(src, 0, &a->items, &a->floats);
    kinds_of(src, a->kinds);
    if (a->n < 0 || !(a->staging = mem_alloc(mem, MEM_CKPT_STAGING, (a->floats + 1) * sizeof(float)))) {
        size_t b = a->floats * sizeof(float);
        ckpt_shard_async_free(a);
        return err_set(err, ST_ERR_RUNTIME, "out of memory allocating %zu bytes of checkpoint staging", b);
    }
    touch_pages(a->staging, a->floats);
    *out = a;
    return ST_OK;
}

static void *async_worker(void *arg) {
    CkptShardAsync *a = arg;
    write_rank(&a->paths, a->rank, a->items, a->n, &a->fault, &a->rw);
    atomic_store(&a->finished, 1);
    return NULL;
}

int ckpt_shard_async_pending(const CkptShardAsync *a) { return a && a->pending; }

Status ckpt_shard_async_wait(CkptShardAsync *a, Comm *c, CkptSaveInfo *info, Err *err) {
    CkptSaveInfo local;
    if (!info) info = &local;
    memset(info, 0, sizeof *info);
    if (!a->pending) return ST_OK;
    if (a->started) pthread_join(a->thread, NULL);
    a->started = 0, a->pending = 0;
    double t0 = timer_ms();
    Status st = shard_commit(c, &a->paths, a->items, a->n, a->kinds, &a->rw, &a->meta, &a->opts, &a->cfg, &a->fault,
                             NULL, info, err);
    info->ms_copy = a->ms_copy;
    info->ms_write = a->rw.ms + (timer_ms() - t0) - info->ms_prune;
    ckpt_meta_free(&a->meta);
    return st;
}

Status ckpt_shard_async_save(CkptShardAsync *a, Comm *c, const CkptShardSrc *src, const CkptMeta *meta,
                             const CkptOptions *o, CkptSaveInfo *prev, Err *err) {
    Status st = ckpt_shard_async_wait(a, c, prev, err);
    if (st != ST_OK) return st;
    if (!o || !o->dir || !o->dir[0]) return err_set(err, ST_ERR_INPUT, "--ckpt-dir: expected a directory, found none");
    if (src->extra) /* (the same on every rank: no rank leaves the collectives alone) */
        return err_set(err, ST_ERR_INPUT, "--ckpt-async: expected an optimizer without extra state, found %s",
                       src->extra_name ? src->extra_name : "some");
    double t0 = timer_ms();
    /* Everything that can fail locally before the collective step 1, so that no rank leaves the
     * sequence of collectives the others are in. */
    if (ckpt_meta_copy(&a->meta, meta) != 0) {
        ckpt_meta_free(&a->meta);
        /* Still take part in step 1's agreement (as shard_prepare would), failing it, so that
         * every rank returns the error. */
        Err e = {0};
        err_set(&e, ST_ERR_RUNTIME, "out of memory copying checkpoint meta");
        return agree(c, ST_ERR_RUNTIME, &e, "start the save", NULL, err);
    }
    save_paths(&a->paths, o->dir, meta->step);
    if ((st = shard_prepare(c, &a->paths, meta, o, &a->fault, err)) != ST_OK) {
        ckpt_meta_free(&a->meta);
        return st;
    }
    /* Copy this rank's slices into staging; the items then point there. */
    Item *live = NULL;
    size_t floats;
    int n = build_items(src, c->rank, &live, &floats);
    ST_CHECK_MSG(n == a->n && floats == a->floats, "ckpt_shard_async_save: the layout or write flags changed since init");
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        size_t k = (size_t)live[i].s.rows_real * live[i].s.cols;
        memcpy(a->staging + off, live[i].data, k * sizeof(float));
        a->items[i] = live[i];
        a->items[i].data = a->staging + off;
        off += k;
    }
    free(live);
    a->opts = *o;
    snprintf(a->tokenizer, sizeof a->tokenizer, "%s", o->tokenizer ? o->tokenizer : "");
    a->opts.dir = a->paths.dir, a->opts.tokenizer = a->tokenizer, a->opts.progress = NULL;
    a->rank = c->rank;
    a->ms_copy = timer_ms() - t0;
    memset(&a->rw, 0, sizeof a->rw);
    atomic_store(&a->finished, 0);
    a->pending = 1;
    if (pthread_create(&a->thread, NULL, async_worker, a) != 0) {
        /* No thread: write here, so the commit sees a complete (or failed) file either way. */
        write_rank(&a->paths, a->rank, a->items, a->n, &a->fault, &a->rw);
        return ST_OK;
    }
    a->started = 1;
    return ST_OK;
}

void ckpt_shard_async_free(CkptShardAsync *a) {
    if (!a) return;
    if (a->started) pthread_join(a->thread, NULL);
    if (a->pending) ckpt_meta_free(&a->meta);
    if (a->staging) mem_free(a->mem, MEM_CKPT_STAGING, a->staging, (a->floats + 1) * sizeof(float));
    free(a->items);
    free(a);
}
