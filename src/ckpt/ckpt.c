/* ckpt.c — checkpoint save (crash-safe), verification, load, resolve with fallback, retention.
 *
 * Contents: fault injection | small file helpers | state.json (build, self checksum, parse) |
 * save | verify and load | resolve | retention. The byte-level format is in docs/checkpoint.md. */
#include "ckpt/ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "ckpt/ckpt_internal.h"
#include "ckpt/safetensors.h"
#include "core/fileio.h"
#include "core/timer.h"

#define STATE_MARKER ",\n\t\"state_checksum\":\t\""
#define STATE_TAIL "\"\n}\n"

static const char *const FILES[] = {"model.safetensors", "config.json", "optimizer.safetensors"};
enum { NFILES = 3 };

/* ======================================================================================== */
/* Fault injection (ST_CKPT_FAIL_AT=<stage>[:exit|:stop|:slow])                              */
/* ======================================================================================== */

/* Stages in save order; the fault fires when the save reaches the stage. */
static const char *const CKPT_STAGES[] = {
    "begin",     /* temporary directory created, nothing written */
    "model",     /* in the middle of model.safetensors */
    "config",    /* model.safetensors complete, config.json not written */
    "optimizer", /* in the middle of optimizer.safetensors */
    "state",     /* in the middle of state.json */
    "sync",      /* every file written and fsynced, directory not fsynced */
    "rename",    /* before the temporary directory is renamed to step_%08ld */
    "latest",    /* new checkpoint in place, `latest` not yet updated */
    "prune",     /* `latest` updated, retention not applied */
    /* The sharded save's own stages (shard.c; docs/checkpoint.md, "Sharded checkpoints"): */
    "shard",     /* in the middle of this rank's rank%05d.safetensors */
    "agree",     /* this rank's file fsynced, before the all-ranks agreement */
    "manifest",  /* rank 0: every rank agreed, in the middle of manifest.json */
};
enum { NSTAGES = sizeof CKPT_STAGES / sizeof CKPT_STAGES[0] };


Status ckpt_fault_parse(Fault *f, const Faults *src, Err *err) {
    memset(f, 0, sizeof *f);
    if (!src || !src->ckpt_fail_stage[0]) return ST_OK;
    snprintf(f->stage, sizeof f->stage, "%s", src->ckpt_fail_stage);
    f->mode = src->ckpt_fail_mode;
    f->slow_ms = src->ckpt_slow_ms > 0 ? src->ckpt_slow_ms : 1000;
    for (int i = 0; i < NSTAGES; i++)
        if (!strcmp(f->stage, CKPT_STAGES[i])) return ST_OK;
    return err_set(err, ST_ERR_INPUT,
                   "checkpoint fault at '%s' (ST_CKPT_FAIL_AT): unknown stage (expected begin, model, config, optimizer, "
                   "state, sync, rename, latest, prune, shard, agree or manifest)", f->stage);
}

Status ckpt_fault_hit(const Fault *f, const char *stage, Err *err) {
    if (!f->stage[0] || strcmp(f->stage, stage) != 0) return ST_OK;
    if (f->mode == 1) _exit(3);
    if (f->mode == 2) {
        raise(SIGSTOP); /* the test's parent kill -9s us here; if continued, carry on */
        return ST_OK;
    }
    if (f->mode == 3) {
        nanosleep(&(struct timespec){f->slow_ms / 1000, (long)(f->slow_ms % 1000) * 1000000L}, NULL);
        return ST_OK;
    }
    return err_set(err, ST_ERR_RUNTIME, "checkpoint save aborted at stage '%s' (test fault ST_CKPT_FAIL_AT)", stage);
}

/* ======================================================================================== */
/* File helpers                                                                              */
/* ======================================================================================== */

/* out = a "/" b; a path too long for out is cut (and then fails to open, naming the cut path). */
static __attribute__((noinline)) void join(char *out, size_t n, const char *a, const char *b) {
    snprintf(out, n, "%s/%s", a, b);
}

/* The stages' names for core/fileio's helpers (one source: file_fsync_dir, file_rm_tree). */
Status ckpt_fsync_dir(const char *dir, Err *err) { return file_fsync_dir(dir, err); }

int ckpt_rm_tree(const char *path) { return file_rm_tree(path); }

/* A sink that writes to fd, hashes with XXH3-64, counts bytes and can fire a fault mid-file. */
typedef struct {
    int fd;
    const char *path;
    XXH3_state_t *h;
    size_t bytes;
    int writes;
    const Fault *fault;
    const char *stage;   /* fault stage fired after fault_after writes (NULL: none) */
    int fault_after;
    const CkptOptions *o; /* progress callback (may be NULL) */
    uint64_t *done, total;
} Sink;

static Status sink_write(void *ctx, const void *p, size_t n, Err *err) {
    Sink *s = ctx;
    if (s->stage && s->writes == s->fault_after) {
        Status st = ckpt_fault_hit(s->fault, s->stage, err);
        if (st != ST_OK) return st;
    }
    s->writes++;
    XXH3_64bits_update(s->h, p, n);
    s->bytes += n;
    Status st = file_write_fd(s->fd, p, n, s->path, err);
    if (st != ST_OK) return st;
    if (s->o && s->o->progress && s->done) {
        *s->done += (uint64_t)n;
        s->o->progress(s->o->progress_ctx, *s->done < s->total ? *s->done : s->total, s->total);
    }
    return ST_OK;
}


/* Creates dir/name, streams producer's bytes into it, fsyncs and closes it. */
Status ckpt_write_file(const char *dir, const char *name, Producer prod, const void *arg, const Fault *fault,
                         const char *stage, int fault_after, const CkptOptions *o, uint64_t *done, uint64_t total,
                         FileSum *sum, Err *err) {
    char path[4200];
    join(path, sizeof path, dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return err_set(err, ST_ERR_RUNTIME, "%s: cannot create: %s", path, strerror(errno));
    XXH3_state_t *h = XXH3_createState();
    if (!h) {
        close(fd);
        return err_set(err, ST_ERR_RUNTIME, "%s: out of memory", path);
    }
    XXH3_64bits_reset(h);
    Sink s = {fd, path, h, 0, 0, fault, stage, fault_after, o, done, total};
    Status st = prod(arg, sink_write, &s, err);
    if (st == ST_OK && fsync(fd) != 0) st = err_set(err, ST_ERR_RUNTIME, "%s: fsync failed: %s", path, strerror(errno));
    if (close(fd) != 0 && st == ST_OK) st = err_set(err, ST_ERR_RUNTIME, "%s: close failed: %s", path, strerror(errno));
    sum->bytes = s.bytes;
    sum->xxh3 = XXH3_64bits_digest(h);
    XXH3_freeState(h);
    return st;
}

void ckpt_hex64(char out[17], uint64_t x) { snprintf(out, 17, "%016" PRIx64, x); }

int ckpt_parse_hex64(const char *s, size_t n, uint64_t *out) {
    uint64_t x = 0;
    if (n != 16) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return 0;
        x = x << 4 | (uint64_t)d;
    }
    *out = x;
    return 1;
}

/* The model object of state.json and of the sharded manifest (ckpt_internal.h). */
void ckpt_model_json(cJSON *md, const ModelConfig *mc) {
    cJSON_AddNumberToObject(md, "layers", mc->n_layer);
    cJSON_AddNumberToObject(md, "heads", mc->n_head);
    cJSON_AddNumberToObject(md, "channels", mc->n_embd);
    cJSON_AddNumberToObject(md, "vocab", mc->vocab);
    cJSON_AddNumberToObject(md, "max_seq_len", mc->max_seq);
    if (mc->arch == ARCH_LLAMA) {
        cJSON_AddStringToObject(md, "arch", model_arch_name(mc->arch));
        cJSON_AddNumberToObject(md, "kv_heads", mc->n_kv_head);
        cJSON_AddNumberToObject(md, "ffn", mc->ffn);
        cJSON_AddBoolToObject(md, "tie_embeddings", !mc->untied);
    }
    if (mc->param == PARAM_MUP) { /* the weights' meaning: muP's multipliers (docs/mup.md) */
        cJSON_AddStringToObject(md, "param", model_param_name(mc->param));
        cJSON_AddNumberToObject(md, "mup_base_width", mc->mup_base_width);
        cJSON_AddNumberToObject(md, "mup_input_alpha", mc->mup_input_alpha);
        cJSON_AddNumberToObject(md, "mup_output_alpha", mc->mup_output_alpha);
    }
}

/* The last path component, for messages naming "step_00000100/model.safetensors". */
const char *ckpt_base_name(const char *p) {
    const char *s = strrchr(p, '/');
    while (s && s[1] == '\0' && s > p) { /* trailing slash */
        const char *q = s - 1;
        while (q > p && *q != '/') q--;
        return *q == '/' ? q + 1 : q;
    }
    return s ? s + 1 : p;
}

/* ======================================================================================== */
/* Meta helpers                                                                              */
/* ======================================================================================== */

static int set_named(char (*names)[CKPT_NAME_LEN], size_t stride, int *n, const char *name) {
    for (int i = 0; i < *n; i++)
        if (!strcmp((char *)names + stride * (size_t)i, name)) return i;
    if (*n >= CKPT_MAX_NAMED) return -1;
    snprintf((char *)names + stride * (size_t)*n, CKPT_NAME_LEN, "%s", name);
    return (*n)++;
}

int ckpt_meta_set_rng(CkptMeta *m, const char *name, uint64_t value) {
    int i = set_named((char(*)[CKPT_NAME_LEN])m->rng[0].name, sizeof m->rng[0], &m->nrng, name);
    if (i < 0) return -1;
    m->rng[i].value = value;
    return 0;
}

int ckpt_meta_set_scaler(CkptMeta *m, const char *name, double value) {
    int i = set_named((char(*)[CKPT_NAME_LEN])m->scaler[0].name, sizeof m->scaler[0], &m->nscaler, name);
    if (i < 0) return -1;
    m->scaler[i].value = value;
    return 0;
}

int ckpt_meta_rng(const CkptMeta *m, const char *name, uint64_t *value) {
    for (int i = 0; i < m->nrng; i++)
        if (!strcmp(m->rng[i].name, name)) return *value = m->rng[i].value, 1;
    return 0;
}

int ckpt_meta_scaler(const CkptMeta *m, const char *name, double *value) {
    for (int i = 0; i < m->nscaler; i++)
        if (!strcmp(m->scaler[i].name, name)) return *value = m->scaler[i].value, 1;
    return 0;
}

void ckpt_meta_free(CkptMeta *m) {
    if (!m) return;
    cJSON_Delete(m->config);
    cJSON_Delete(m->extra);
    m->config = NULL;
    m->extra = NULL;
}

int ckpt_meta_copy(CkptMeta *dst, const CkptMeta *src) {
    *dst = *src;
    dst->config = NULL;
    dst->extra = NULL;
    if (src->config && !(dst->config = cJSON_Duplicate(src->config, 1))) return -1;
    if (src->extra && !(dst->extra = cJSON_Duplicate(src->extra, 1))) return -1;
    return 0;
}

CkptOptions ckpt_default_options(void) {
    CkptOptions o = {0};
    o.keep_last = 3;
    return o;
}

/* ======================================================================================== */
/* state.json                                                                                */
/* ======================================================================================== */

static void add_u64(cJSON *o, const char *k, uint64_t v) {
    char s[32];
    snprintf(s, sizeof s, "%" PRIu64, v);
    cJSON_AddStringToObject(o, k, s);
}

static int get_u64(const cJSON *o, const char *k, uint64_t *v) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsString(x) || !x->valuestring[0]) return 0;
    char *end;
    errno = 0;
    unsigned long long u = strtoull(x->valuestring, &end, 10);
    if (*end || errno || x->valuestring[0] == '-') return 0;
    *v = u;
    return 1;
}

static int get_num(const cJSON *o, const char *k, double *v) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(x)) return 0;
    *v = x->valuedouble;
    return 1;
}

char *ckpt_state_text(const CkptMeta *m, const ModelConfig *mc, const char *format, const char *const *names,
                      const FileSum *sums, int nfiles) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "format", format);
    cJSON_AddNumberToObject(o, "version", 1);
    cJSON_AddNumberToObject(o, "step", (double)m->step);
    add_u64(o, "tokens_seen", m->tokens_seen);
    cJSON *s = cJSON_AddObjectToObject(o, "schedule");
    cJSON_AddNumberToObject(s, "step", (double)m->sched_step);
    cJSON *l = cJSON_AddObjectToObject(o, "loader");
    add_u64(l, "seed", m->loader.seed);
    add_u64(l, "consumed", m->loader.consumed);
    cJSON *r = cJSON_AddObjectToObject(o, "rng");
    for (int i = 0; i < m->nrng; i++) add_u64(r, m->rng[i].name, m->rng[i].value);
    if (m->nscaler > 0) {
        cJSON *ls = cJSON_AddObjectToObject(o, "loss_scaler");
        for (int i = 0; i < m->nscaler; i++) cJSON_AddNumberToObject(ls, m->scaler[i].name, m->scaler[i].value);
    } else {
        cJSON_AddNullToObject(o, "loss_scaler");
    }
    cJSON *op = cJSON_AddObjectToObject(o, "optimizer");
    cJSON_AddStringToObject(op, "kind", m->optimizer);
    cJSON_AddNumberToObject(op, "step", (double)m->optim_step);
    cJSON *p = cJSON_AddObjectToObject(o, "parallel");
    cJSON_AddNumberToObject(p, "dp", m->dp > 0 ? m->dp : 1);
    cJSON_AddNumberToObject(p, "tp", m->tp > 0 ? m->tp : 1);
    cJSON_AddNumberToObject(p, "pp", m->pp > 0 ? m->pp : 1);
    cJSON_AddNumberToObject(p, "zero", m->zero);
    ckpt_model_json(cJSON_AddObjectToObject(o, "model"), mc);
    if (m->config) cJSON_AddItemToObject(o, "config", cJSON_Duplicate(m->config, 1));
    else cJSON_AddNullToObject(o, "config");
    if (m->extra) cJSON_AddItemToObject(o, "extra", cJSON_Duplicate(m->extra, 1));
    cJSON *f = cJSON_AddObjectToObject(o, "files");
    for (int i = 0; i < nfiles; i++) {
        cJSON *e = cJSON_AddObjectToObject(f, names[i]);
        cJSON_AddNumberToObject(e, "bytes", (double)sums[i].bytes);
        char hx[17];
        ckpt_hex64(hx, sums[i].xxh3);
        cJSON_AddStringToObject(e, "xxh3", hx);
    }
    char *text = cJSON_Print(o); /* ends with "\n}" */
    cJSON_Delete(o);
    return text;
}


/* Writes body, the marker, the checksum of everything before it, and the tail. Two writes before
 * the checksum so the "state" fault lands mid-file. */
Status ckpt_state_producer(const void *arg, StWriteFn w, void *ctx, Err *err) {
    const StateArg *a = arg;
    size_t half = a->body_len / 2;
    Status st;
    if ((st = w(ctx, a->body, half, err)) != ST_OK) return st;
    if ((st = w(ctx, a->body + half, a->body_len - half, err)) != ST_OK) return st;
    XXH3_state_t *h = XXH3_createState();
    if (!h) return err_set(err, ST_ERR_RUNTIME, "out of memory");
    XXH3_64bits_reset(h);
    XXH3_64bits_update(h, a->body, a->body_len);
    XXH3_64bits_update(h, STATE_MARKER, strlen(STATE_MARKER));
    char hx[17];
    ckpt_hex64(hx, XXH3_64bits_digest(h));
    XXH3_freeState(h);
    char tail[128];
    int n = snprintf(tail, sizeof tail, "%s%s%s", STATE_MARKER, hx, STATE_TAIL);
    return w(ctx, tail, (size_t)n, err);
}

void ckpt_files_free(CkptFileList *f) {
    if (!f) return;
    free(f->e);
    f->e = NULL;
    f->n = 0;
}

const FileSum *ckpt_files_find(const CkptFileList *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->e[i].name, name)) return &f->e[i].sum;
    return NULL;
}

typedef struct {
    char *p;
    size_t n;
} SealBuf;

static Status seal_write(void *ctx, const void *p, size_t n, Err *err) {
    (void)err;
    SealBuf *b = ctx;
    memcpy(b->p + b->n, p, n);
    b->n += n;
    return ST_OK;
}

/* The text through ckpt_state_producer into memory: one writer of the state format. */
char *ckpt_state_seal(const char *text) {
    StateArg a = {text, strlen(text) - 2}; /* cJSON_Print's closing "\n}" */
    SealBuf b = {malloc(a.body_len + strlen(STATE_MARKER) + 16 + strlen(STATE_TAIL) + 1), 0};
    Err e;
    if (!b.p || ckpt_state_producer(&a, seal_write, &b, &e) != ST_OK) {
        free(b.p);
        return NULL;
    }
    b.p[b.n] = '\0';
    return b.p;
}

Status ckpt_state_verify(const char *path, const char *text, size_t len, Err *err) {
    size_t ml = strlen(STATE_MARKER), tl = strlen(STATE_TAIL);
    if (len < ml + 16 + tl || memcmp(text + len - tl, STATE_TAIL, tl) != 0 ||
        memcmp(text + len - tl - 16 - ml, STATE_MARKER, ml) != 0)
        return err_set(err, ST_ERR_INPUT, "%s: expected the state_checksum member at the end, found none (truncated?)",
                       path);
    uint64_t want;
    if (!ckpt_parse_hex64(text + len - tl - 16, 16, &want))
        return err_set(err, ST_ERR_INPUT, "%s: state_checksum is not 16 hex digits", path);
    uint64_t got = XXH3_64bits(text, len - tl - 16);
    if (got != want)
        return err_set(err, ST_ERR_INPUT, "%s: xxh3 checksum mismatch: recorded %016" PRIx64 ", computed %016" PRIx64
                       " (corrupt)", path, want, got);
    return ST_OK;
}

/* Parses a verified state.json text into meta and the file list (files may be NULL). */
static Status state_parse(const char *path, const char *text, size_t len, CkptMeta *m, CkptFileList *files,
                          Err *err) {
    Status vs = ckpt_state_verify(path, text, len, err);
    if (vs != ST_OK) return vs;
    cJSON *o = cJSON_ParseWithLength(text, len);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return err_set(err, ST_ERR_INPUT, "%s: expected a JSON object, found unparsable text", path);
    }
    memset(m, 0, sizeof *m);
    /* emptied before the first refusal below: done frees it (a step of -1 freed the caller's
     * uninitialised list, a wild pointer) */
    if (files) memset(files, 0, sizeof *files);
    Status st = ST_OK;
    double d;
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(o, "format");
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(o, "version");
    int sharded = cJSON_IsString(fmt) && !strcmp(fmt->valuestring, CKPT_FORMAT_SHARDED);
    if (!cJSON_IsString(fmt) || (strcmp(fmt->valuestring, CKPT_FORMAT_SINGLE) && !sharded) || !cJSON_IsNumber(ver) ||
        ver->valueint != 1) {
        if (cJSON_IsString(fmt) && !strcmp(fmt->valuestring, "scaletrain-lora")) /* what a user meant, and the way */
            st = err_set(err, ST_ERR_INPUT, "%s: a LoRA checkpoint (format scaletrain-lora): resume it with the run's "
                         "--lora-rank flags, or export it with --merge for a full model", path);
        else
            st = err_set(err, ST_ERR_INPUT, "%s: expected format %s or %s, version 1, found %s", path, CKPT_FORMAT_SINGLE,
                         CKPT_FORMAT_SHARDED, cJSON_IsString(fmt) ? fmt->valuestring : "none");
        goto done;
    }
    const cJSON *sch = cJSON_GetObjectItemCaseSensitive(o, "schedule");
    const cJSON *ld = cJSON_GetObjectItemCaseSensitive(o, "loader");
    const cJSON *op = cJSON_GetObjectItemCaseSensitive(o, "optimizer");
    const cJSON *par = cJSON_GetObjectItemCaseSensitive(o, "parallel");
    const cJSON *opk = op ? cJSON_GetObjectItemCaseSensitive(op, "kind") : NULL;
    double s_step, o_step, dp, tp, pp, zero;
    if (!get_num(o, "step", &d) || !get_u64(o, "tokens_seen", &m->tokens_seen) || !get_num(sch, "step", &s_step) ||
        !get_u64(ld, "seed", &m->loader.seed) || !get_u64(ld, "consumed", &m->loader.consumed) ||
        !cJSON_IsString(opk) || !get_num(op, "step", &o_step) || !get_num(par, "dp", &dp) ||
        !get_num(par, "tp", &tp) || !get_num(par, "pp", &pp) || !get_num(par, "zero", &zero)) {
        st = err_set(err, ST_ERR_INPUT, "%s: a required field (step, tokens_seen, schedule, loader, optimizer, parallel) "
                     "is missing or has the wrong type", path);
        goto done;
    }
    /* Counters are whole and at least 0 (below 2^53, where doubles stop counting), the grid whole
     * and positive, ZeRO 0..3: a state.json edited and resealed is refused here, not trained from
     * (a step of -1 ran into non-finite losses, 1e30 wrapped to a negative step). */
    const struct { const char *name; double v, lo, hi; } rng_chk[] = {
        {"step", d, 0, 9007199254740992.0}, {"schedule.step", s_step, 0, 9007199254740992.0},
        {"optimizer.step", o_step, 0, 9007199254740992.0}, {"parallel.dp", dp, 1, 1 << 20},
        {"parallel.tp", tp, 1, 1 << 20}, {"parallel.pp", pp, 1, 1 << 20}, {"parallel.zero", zero, 0, 3},
    };
    for (size_t i = 0; i < sizeof rng_chk / sizeof rng_chk[0]; i++)
        if (!(rng_chk[i].v >= rng_chk[i].lo && rng_chk[i].v <= rng_chk[i].hi) || rng_chk[i].v != floor(rng_chk[i].v)) {
            st = err_set(err, ST_ERR_INPUT, "%s: %s: expected a whole number in [%.0f, %.0f], found %g", path, rng_chk[i].name,
                         rng_chk[i].lo, rng_chk[i].hi, rng_chk[i].v);
            goto done;
        }
    m->step = (long)d, m->sched_step = (long)s_step, m->optim_step = (long)o_step;
    m->dp = (int)dp, m->tp = (int)tp, m->pp = (int)pp, m->zero = (int)zero;
    snprintf(m->optimizer, sizeof m->optimizer, "%s", opk->valuestring);
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(o, "rng");
    for (const cJSON *x = r ? r->child : NULL; x; x = x->next) {
        uint64_t v;
        if (!get_u64(r, x->string, &v) || ckpt_meta_set_rng(m, x->string, v) != 0) {
            st = err_set(err, ST_ERR_INPUT, "%s: rng.%s: expected a decimal u64 string", path, x->string);
            goto done;
        }
    }
    /* loss_scaler, config and extra: null (extra: absent) or an object; another value was taken as
     * none, and the scaler's numbers as they came (a scale of -1 or 1e300, a counter of 2.5) */
    const cJSON *ls = cJSON_GetObjectItemCaseSensitive(o, "loss_scaler");
    cJSON *cfg = cJSON_GetObjectItemCaseSensitive(o, "config"), *extra = cJSON_GetObjectItemCaseSensitive(o, "extra");
    const char *odd = ls && !cJSON_IsNull(ls) && !cJSON_IsObject(ls) ? "loss_scaler"
                      : cfg && !cJSON_IsNull(cfg) && !cJSON_IsObject(cfg) ? "config"
                      : extra && !cJSON_IsNull(extra) && !cJSON_IsObject(extra) ? "extra" : NULL;
    if (odd) {
        st = err_set(err, ST_ERR_INPUT, "%s: %s: expected null or an object, found another value", path, odd);
        goto done;
    }
    for (const cJSON *x = cJSON_IsObject(ls) ? ls->child : NULL; x; x = x->next) {
        /* the trainer's scaler (train_ckpt.c): the scale a float > 0, its counters whole; any other
         * member a finite number */
        int scale = !strcmp(x->string, "scale"), count = !strcmp(x->string, "good_steps") || !strcmp(x->string, "skips");
        double v = cJSON_IsNumber(x) ? x->valuedouble : NAN;
        if (!(scale ? v > 0 && v <= FLT_MAX : count ? v >= 0 && v <= 9007199254740992.0 && v == floor(v) : isfinite(v)) ||
            ckpt_meta_set_scaler(m, x->string, v) != 0) {
            st = err_set(err, ST_ERR_INPUT, "%s: loss_scaler.%s: expected %s, found %s", path, x->string,
                         scale ? "a positive number within a float" : count ? "a whole number in [0, 9007199254740992]"
                                                                        : "a finite number",
                         cJSON_IsNumber(x) ? "another number" : "another value");
            goto done;
        }
    }
    if (cJSON_IsObject(cfg)) m->config = cJSON_DetachItemViaPointer(o, cfg);
    if (cJSON_IsObject(extra)) m->extra = cJSON_DetachItemViaPointer(o, extra);
    if (files) {
        /* Every member of "files"; the single-process format must name its three files, the
         * sharded one its config.json and manifest.json (the rank files are named there too). */
        files->sharded = sharded;
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, "files");
        int n = cJSON_IsObject(f) ? cJSON_GetArraySize(f) : 0;
        files->e = calloc((size_t)n + 1, sizeof *files->e);
        if (!files->e) {
            st = err_set(err, ST_ERR_RUNTIME, "%s: out of memory", path);
            goto done;
        }
        for (const cJSON *e = n ? f->child : NULL; e; e = e->next) {
            const cJSON *hx = cJSON_GetObjectItemCaseSensitive(e, "xxh3");
            CkptFileEntry *x = &files->e[files->n];
            double b;
            if (!e->string || strlen(e->string) >= sizeof x->name || strchr(e->string, '/') || e->string[0] == '.' ||
                !get_num(e, "bytes", &b) || !(b >= 0 && b <= 9007199254740992.0 && b == floor(b)) || !cJSON_IsString(hx) ||
                !ckpt_parse_hex64(hx->valuestring, strlen(hx->valuestring), &x->sum.xxh3)) {
                st = err_set(err, ST_ERR_INPUT, "%s: files.%s: expected {bytes, xxh3} under a plain file name", path,
                             e->string ? e->string : "?");
                goto done;
            }
            snprintf(x->name, sizeof x->name, "%s", e->string);
            x->sum.bytes = (size_t)b;
            files->n++;
        }
        static const char *const need_sharded[] = {"config.json", CKPT_MANIFEST};
        const char *const *need = sharded ? need_sharded : FILES;
        for (int i = 0; i < (sharded ? 2 : NFILES); i++)
            if (!ckpt_files_find(files, need[i])) {
                st = err_set(err, ST_ERR_INPUT, "%s: files.%s: expected {bytes, xxh3}, found nothing", path, need[i]);
                goto done;
            }
    }
done:
    cJSON_Delete(o);
    if (st != ST_OK) {
        ckpt_meta_free(m);
        ckpt_files_free(files);
    }
    return st;
}

static Status read_state(const char *ckpt, CkptMeta *m, CkptFileList *sums, Err *err) {
    char path[4200], *text;
    size_t len;
    snprintf(path, sizeof path, "%s/state.json", ckpt);
    Status st = file_read_all(path, &text, &len, err);
    if (st != ST_OK) return st;
    st = state_parse(path, text, len, m, sums, err);
    free(text);
    return st;
}

Status ckpt_read_meta(const char *ckpt_path, CkptMeta *meta, Err *err) { return read_state(ckpt_path, meta, NULL, err); }

/* ======================================================================================== */
/* Save                                                                                      */
/* ======================================================================================== */

static Status model_producer(const void *arg, StWriteFn w, void *ctx, Err *err) {
    const CkptSnap *s = arg;
    return st_hf_write_model(s->pl, s->params, w, ctx, err);
}

static Status text_producer(const void *arg, StWriteFn w, void *ctx, Err *err) {
    const char *t = arg;
    return w(ctx, t, strlen(t), err);
}

/* optimizer.safetensors: m.*, v.*, master.* per tensor in our orientation, unpadded rows. */
static Status optim_producer(const void *arg, StWriteFn w, void *ctx, Err *err) {
    const CkptSnap *s = arg;
    const ParamLayout *pl = s->pl;
    const float *bufs[3] = {s->m, s->v, s->master};
    static const char *const prefix[3] = {"m", "v", "master"};
    StTensorOut *t = calloc((size_t)pl->ntensors * 3 + 1, sizeof *t);
    if (!t) return err_set(err, ST_ERR_RUNTIME, "out of memory writing optimizer.safetensors");
    int n = 0;
    for (int b = 0; b < 3; b++) {
        if (!bufs[b]) continue;
        for (int k = 0; k < pl->ntensors; k++) {
            const TensorInfo *ti = &pl->tensors[k];
            StTensorOut *x = &t[n++];
            snprintf(x->name, sizeof x->name, "%s.%s", prefix[b], ti->name);
            x->ndim = ti->ndim;
            x->shape[0] = ti->rows_real;
            x->shape[1] = ti->ndim == 2 ? ti->shape[1] : 1;
            x->data = bufs[b] + ti->offset;
        }
    }
    static const char *const meta[] = {"scaletrain", "optimizer-state", NULL};
    Status st = st_write(t, n, meta, w, ctx, err);
    free(t);
    return st;
}

Status ckpt_extra_producer(const void *arg, StWriteFn w, void *ctx, Err *err) {
    const CkptSnap *s = arg;
    if (s->extra_n > (size_t)2147483647)
        return err_set(err, ST_ERR_INPUT, "%s: %s holds %zu floats, more than a safetensors shape of int32 here",
                       CKPT_EXTRA_FILE, s->extra_name, s->extra_n);
    StTensorOut t;
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "%s", s->extra_name);
    t.ndim = 1, t.shape[0] = (int)s->extra_n, t.shape[1] = 1, t.data = s->extra;
    static const char *const meta[] = {"scaletrain", "optimizer-extra-state", NULL};
    return st_write(&t, 1, meta, w, ctx, err);
}

Status ckpt_read_extra(const char *ckpt_path, const char *name, float *buf, size_t n, Err *err) {
    CkptMeta m;
    CkptFileList files;
    Status st = ckpt_state_read(ckpt_path, &m, &files, err);
    if (st != ST_OK) return st;
    const FileSum *sum = ckpt_files_find(&files, CKPT_EXTRA_FILE);
    char *b = NULL;
    size_t len = 0;
    StFile f;
    memset(&f, 0, sizeof f);
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", ckpt_base_name(ckpt_path), CKPT_EXTRA_FILE);
    if (!sum) {
        st = err_set(err, ST_ERR_INPUT, "%s: absent, expected the optimizer's %s (the checkpoint's optimizer is %s)",
                     path, name, m.optimizer);
        goto done;
    }
    FileSum s = *sum;
    if ((st = ckpt_check_file(ckpt_path, CKPT_EXTRA_FILE, &s, &b, &len, NULL, err)) != ST_OK) goto done;
    if ((st = st_parse(&f, path, b, len, err)) != ST_OK) goto done;
    if (!st_find(&f, name)) {
        st = err_set(err, ST_ERR_INPUT, "%s: tensor %s missing (the checkpoint's optimizer is %s)", path, name, m.optimizer);
        goto done;
    }
    if (n > (size_t)2147483647) {
        st = err_set(err, ST_ERR_INPUT, "%s: %s of %zu floats is larger than this reader takes", path, name, n);
        goto done;
    }
    int shape[2] = {(int)n, 1};
    st = st_read_f32(&f, name, 1, shape, 0, buf, err);
done:
    st_file_free(&f);
    free(b);
    ckpt_files_free(&files);
    ckpt_meta_free(&m);
    return st;
}

/* Names step directories: "step_%08ld". */
void ckpt_step_name(char *buf, size_t n, long step) { snprintf(buf, n, "step_%08ld", step); }

/* Step number of a directory name "step_<digits>", or -1. */
long ckpt_parse_step_name(const char *name) {
    if (strncmp(name, "step_", 5) != 0 || !name[5]) return -1;
    long v = 0;
    for (const char *p = name + 5; *p; p++) {
        if (*p < '0' || *p > '9' || v > (long)1e15) return -1;
        v = v * 10 + (*p - '0');
    }
    return v;
}

/* Removes leftovers of interrupted saves and prunes: .tmp-* and .del-* directories. */
void ckpt_remove_leftovers(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[4200];
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, ".tmp-step_", 10) && strncmp(e->d_name, ".del-step_", 10)) continue;
        join(path, sizeof path, dir, e->d_name);
        ckpt_rm_tree(path);
    }
    closedir(d);
}

Status ckpt_publish_dir(const char *dir, const char *tmp, const char *fin, const Fault *fault, Err *err) {
    Status st = ckpt_fsync_dir(tmp, err);
    if (st == ST_OK && fault) st = ckpt_fault_hit(fault, "rename", err);
    if (st != ST_OK) return st;
    struct stat sb;
    if (lstat(fin, &sb) == 0) {
        /* Re-saving an existing step (e.g. after a fallback): swap atomically, then drop the old. */
        if (renameat2(AT_FDCWD, tmp, AT_FDCWD, fin, RENAME_EXCHANGE) != 0)
            return err_set(err, ST_ERR_RUNTIME, "%s: cannot exchange with %s: %s", fin, tmp, strerror(errno));
    } else if (rename(tmp, fin) != 0) {
        return err_set(err, ST_ERR_RUNTIME, "%s: cannot rename from %s: %s", fin, tmp, strerror(errno));
    }
    if ((st = ckpt_fsync_dir(dir, err)) != ST_OK) return st;
    ckpt_rm_tree(tmp); /* the old copy after an exchange; nothing otherwise */
    return ST_OK;
}

Status ckpt_write_latest(const char *dir, const char *name, const Fault *fault, Err *err) {
    char path[4200], tmp[4200], text[64];
    snprintf(path, sizeof path, "%s/latest", dir);
    snprintf(tmp, sizeof tmp, "%s/latest.tmp", dir);
    int n = snprintf(text, sizeof text, "%s\n", name);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return err_set(err, ST_ERR_RUNTIME, "%s: cannot create: %s", tmp, strerror(errno));
    Status st = ST_OK;
    if (write(fd, text, (size_t)n) != n) st = err_set(err, ST_ERR_RUNTIME, "%s: write failed: %s", tmp, strerror(errno));
    if (st == ST_OK && fsync(fd) != 0) st = err_set(err, ST_ERR_RUNTIME, "%s: fsync failed: %s", tmp, strerror(errno));
    close(fd);
    if (st == ST_OK && rename(tmp, path) != 0)
        st = err_set(err, ST_ERR_RUNTIME, "%s: cannot rename from %s: %s", path, tmp, strerror(errno));
    if (st != ST_OK) {
        unlink(tmp);
        return st;
    }
    return ckpt_fsync_dir(dir, err);
}

Status ckpt_save_snap(const CkptSnap *s, const CkptMeta *meta, const CkptOptions *o, CkptSaveInfo *info, Err *err) {
    CkptSaveInfo local;
    if (!info) info = &local;
    memset(info, 0, sizeof *info);
    if (!o || !o->dir || !o->dir[0]) return err_set(err, ST_ERR_INPUT, "--ckpt-dir: expected a directory, found none");
    if (meta->step < 0) return err_set(err, ST_ERR_INPUT, "checkpoint step: expected >= 0, found %ld", meta->step);
    double t0 = timer_ms();
    Fault fault;
    Status st = ckpt_fault_parse(&fault, &o->faults, err);
    if (st != ST_OK) return st;
    if ((st = file_mkdirs(o->dir, err)) != ST_OK) return st;
    ckpt_remove_leftovers(o->dir);

    char name[64], tmp[4200], fin[4200];
    ckpt_step_name(name, sizeof name, meta->step);
    snprintf(tmp, sizeof tmp, "%s/.tmp-%s", o->dir, name);
    join(fin, sizeof fin, o->dir, name);
    if (mkdir(tmp, 0755) != 0) return err_set(err, ST_ERR_RUNTIME, "%s: cannot create directory: %s", tmp, strerror(errno));
    FileSum sums[NFILES + 1];
    const char *names[NFILES + 1] = {FILES[0], FILES[1], FILES[2], CKPT_EXTRA_FILE};
    int nfiles = NFILES + (s->extra != NULL);
    char cfg[4096];
    st_hf_config_text(&s->pl->cfg, o->tokenizer, cfg, sizeof cfg);
    char *state = NULL;
    if ((st = ckpt_fault_hit(&fault, "begin", err)) != ST_OK) goto done;
    /* Progress total: the fp32 buffers written (weights, moments, master), padding included. */
    uint64_t done_bytes = 0, total_bytes = (uint64_t)s->pl->total * 4 * (1 + (s->m != NULL) + (s->v != NULL) + (s->master != NULL));
    if ((st = ckpt_write_file(tmp, FILES[0], model_producer, s, &fault, "model", 2, o, &done_bytes, total_bytes, &sums[0], err)) != ST_OK)
        goto done;
    if ((st = ckpt_fault_hit(&fault, "config", err)) != ST_OK) goto done;
    if ((st = ckpt_write_file(tmp, FILES[1], text_producer, cfg, &fault, NULL, 0, NULL, NULL, 0, &sums[1], err)) != ST_OK) goto done;
    if ((st = ckpt_write_file(tmp, FILES[2], optim_producer, s, &fault, "optimizer", 2, o, &done_bytes, total_bytes, &sums[2],
                         err)) != ST_OK)
        goto done;
    if (s->extra && (st = ckpt_write_file(tmp, CKPT_EXTRA_FILE, ckpt_extra_producer, s, &fault, NULL, 0, NULL, NULL, 0,
                                          &sums[NFILES], err)) != ST_OK)
        goto done;
    if (o->progress) o->progress(o->progress_ctx, total_bytes, total_bytes);
    state = ckpt_state_text(meta, &s->pl->cfg, CKPT_FORMAT_SINGLE, names, sums, nfiles);
    if (!state) {
        st = err_set(err, ST_ERR_RUNTIME, "%s: out of memory building state.json", tmp);
        goto done;
    }
    StateArg sa = {state, strlen(state) - 2}; /* drop the closing "\n}" */
    FileSum ssum = {0};
    if ((st = ckpt_write_file(tmp, "state.json", ckpt_state_producer, &sa, &fault, "state", 1, NULL, NULL, 0, &ssum, err)) != ST_OK)
        goto done;
    for (int i = 0; i < nfiles; i++) info->bytes += sums[i].bytes;
    info->bytes += ssum.bytes;
    if ((st = ckpt_fault_hit(&fault, "sync", err)) != ST_OK) goto done;
    if ((st = ckpt_publish_dir(o->dir, tmp, fin, &fault, err)) != ST_OK) goto done;
    if ((st = ckpt_fault_hit(&fault, "latest", err)) != ST_OK) goto done;
    if ((st = ckpt_write_latest(o->dir, name, &fault, err)) != ST_OK) goto done;
    memcpy(info->path, fin, sizeof info->path - 1);
    double t1 = timer_ms();
    info->ms_write = t1 - t0;
    if ((st = ckpt_fault_hit(&fault, "prune", err)) != ST_OK) goto done;
    st = ckpt_prune(o->dir, o->keep_last, o->keep_every, &info->pruned, err);
    info->ms_prune = timer_ms() - t1;
done:
    /* a failed save takes its partial copy with it (on a full disk it held the space the next save
     * needs); a crash leaves it for ckpt_remove_leftovers */
    if (st != ST_OK) ckpt_rm_tree(tmp);
    free(state);
    return st;
}

Status ckpt_save(const GptWeights *w, const CkptOptState *opt, const CkptMeta *meta, const CkptOptions *o,
                 CkptSaveInfo *info, Err *err) {
    CkptOptState none = {0};
    if (!opt) opt = &none;
    CkptSnap s = {&w->layout, w->params, opt->m, opt->v, opt->master, opt->extra, opt->extra_n, opt->extra_name};
    return ckpt_save_snap(&s, meta, o, info, err);
}

/* ======================================================================================== */
/* Verify and load                                                                           */
/* ======================================================================================== */


#define READ_CHUNK ((size_t)32 << 20)

/* Reads ckpt/name in chunks, hashing as it goes, and checks size and hash against sum; *buf
 * receives the bytes if buf != NULL (otherwise one chunk-sized buffer is reused, so verifying
 * never holds a whole file). The size is checked before any reading. */
Status ckpt_check_file(const char *ckpt, const char *name, const FileSum *sum, char **buf, size_t *len,
                         ReadProgress *pg, Err *err) {
    char path[4200];
    join(path, sizeof path, ckpt, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        if (fd >= 0) close(fd);
        return err_set(err, ST_ERR_INPUT, "%s/%s: missing or unreadable", ckpt_base_name(ckpt), name);
    }
    size_t n = (size_t)sb.st_size;
    if (n != sum->bytes) {
        close(fd);
        return err_set(err, ST_ERR_INPUT, "%s/%s: expected %zu bytes, found %zu (%s)", ckpt_base_name(ckpt), name,
                       sum->bytes, n, n < sum->bytes ? "truncated" : "corrupt");
    }
    char *data = malloc(buf ? n + 1 : (n < READ_CHUNK ? n + 1 : READ_CHUNK));
    XXH3_state_t *hs = XXH3_createState();
    Status st = ST_OK;
    if (!data || !hs || XXH3_64bits_reset(hs) != XXH_OK) {
        st = err_set(err, ST_ERR_RUNTIME, "%s/%s: out of memory reading %zu bytes", ckpt_base_name(ckpt), name, n);
        goto out;
    }
    for (size_t off = 0; off < n;) {
        size_t want = n - off < READ_CHUNK ? n - off : READ_CHUNK;
        char *dst = buf ? data + off : data;
        ssize_t got = read(fd, dst, want);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            st = err_set(err, ST_ERR_INPUT, "%s/%s: read failed after %zu of %zu bytes%s%s", ckpt_base_name(ckpt), name, off,
                         n, got < 0 ? ": " : " (truncated while reading)", got < 0 ? strerror(errno) : "");
            goto out;
        }
        XXH3_64bits_update(hs, dst, (size_t)got);
        off += (size_t)got;
        if (pg && pg->fn) pg->done += (uint64_t)got, pg->fn(pg->ctx, pg->done, pg->total);
    }
    uint64_t h = XXH3_64bits_digest(hs);
    if (h != sum->xxh3) {
        st = err_set(err, ST_ERR_INPUT, "%s/%s: xxh3 checksum mismatch: state.json records %016" PRIx64
                     ", file has %016" PRIx64 " (corrupt)", ckpt_base_name(ckpt), name, sum->xxh3, h);
        goto out;
    }
    if (buf) {
        data[n] = '\0';
        *buf = data, *len = n, data = NULL;
    }
out:
    XXH3_freeState(hs);
    free(data);
    close(fd);
    return st;
}

Status ckpt_state_read(const char *ckpt, CkptMeta *m, CkptFileList *files, Err *err) {
    Status st = read_state(ckpt, m, files, err);
    if (st != ST_OK && err) {
        /* Name the checkpoint directory and file instead of the full path. */
        char *p = strstr(err->msg, "state.json");
        if (p) {
            char msg[sizeof err->msg];
            join(msg, sizeof msg, ckpt_base_name(ckpt), p);
            memcpy(err->msg, msg, sizeof msg);
        }
        err->status = ST_ERR_INPUT;
        return ST_ERR_INPUT;
    }
    return st;
}

Status ckpt_load_single(const char *ckpt_path, const ParamLayout *pl, float *params, float *mom1, float *mom2,
                        float *master, CkptMeta *meta, CkptProgressFn progress, void *progress_ctx, Err *err) {
    CkptMeta m;
    CkptFileList files;
    Status st = ckpt_state_read(ckpt_path, &m, &files, err);
    if (st != ST_OK) return st;
    if (files.sharded) {
        ckpt_meta_free(&m);
        ckpt_files_free(&files);
        return err_set(err, ST_ERR_INPUT, "%s: a sharded checkpoint, expected the single-process format",
                       ckpt_base_name(ckpt_path));
    }
    FileSum sums[NFILES];
    for (int i = 0; i < NFILES; i++) sums[i] = *ckpt_files_find(&files, FILES[i]);
    ckpt_files_free(&files);
    ReadProgress pg = {progress, progress_ctx, 0, sums[0].bytes + sums[2].bytes}; /* the two data files */
    char *mb = NULL, *ob = NULL;
    size_t ml = 0, ol = 0;
    StFile mf = {0}, of = {0};
    char path[4200];
    if ((st = ckpt_check_file(ckpt_path, FILES[1], &sums[1], NULL, NULL, NULL, err)) != ST_OK) goto done;
    if ((st = ckpt_check_file(ckpt_path, FILES[0], &sums[0], &mb, &ml, &pg, err)) != ST_OK) goto done;
    join(path, sizeof path, ckpt_base_name(ckpt_path), FILES[0]);
    if ((st = st_parse(&mf, path, mb, ml, err)) != ST_OK) goto done;
    if ((st = st_hf_read_model(&mf, pl, params, err)) != ST_OK) goto done;
    free(mb), mb = NULL;
    if ((st = ckpt_check_file(ckpt_path, FILES[2], &sums[2], &ob, &ol, &pg, err)) != ST_OK) goto done;
    join(path, sizeof path, ckpt_base_name(ckpt_path), FILES[2]);
    if ((st = st_parse(&of, path, ob, ol, err)) != ST_OK) goto done;
    {
        float *bufs[3] = {mom1, mom2, master};
        static const char *const prefix[3] = {"m", "v", "master"};
        for (int b = 0; b < 3 && st == ST_OK; b++) {
            if (!bufs[b]) continue;
            memset(bufs[b], 0, pl->total * sizeof(float));
            for (int k = 0; k < pl->ntensors && st == ST_OK; k++) {
                const TensorInfo *ti = &pl->tensors[k];
                char name[128];
                snprintf(name, sizeof name, "%s.%s", prefix[b], ti->name);
                int shape[2] = {ti->rows_real, ti->ndim == 2 ? ti->shape[1] : 1};
                st = st_read_f32(&of, name, ti->ndim, shape, 0, bufs[b] + ti->offset, err);
                if (st != ST_OK && !st_find(&of, name))
                    err_set(err, ST_ERR_INPUT, "%s: tensor %s missing (the checkpoint's optimizer is %s)", path, name,
                            m.optimizer);
            }
        }
    }
done:
    st_file_free(&mf);
    st_file_free(&of);
    free(mb);
    free(ob);
    if (st == ST_OK && meta) *meta = m;
    else ckpt_meta_free(&m);
    return st;
}

/* ======================================================================================== */
/* Resolve                                                                                   */
/* ======================================================================================== */

static int cmp_long_desc(const void *a, const void *b) {
    long x = *(const long *)a, y = *(const long *)b;
    return (x < y) - (x > y);
}

/* Steps of the step_* directories of dir, newest first. Caller frees. -1 if dir is unreadable. */
static int list_steps(const char *dir, long **steps) {
    *steps = NULL;
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        long s = ckpt_parse_step_name(e->d_name);
        if (s < 0) continue;
        char p[4200];
        struct stat sb;
        join(p, sizeof p, dir, e->d_name);
        if (stat(p, &sb) != 0 || !S_ISDIR(sb.st_mode)) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            long *x = realloc(*steps, (size_t)cap * sizeof *x);
            if (!x) break;
            *steps = x;
        }
        (*steps)[n++] = s;
    }
    closedir(d);
    if (n) qsort(*steps, (size_t)n, sizeof **steps, cmp_long_desc);
    return n;
}

int ckpt_dir_holds_checkpoints(const char *dir, char *found, size_t cap) {
    DIR *d = opendir(dir);
    int got = 0;
    for (struct dirent *e; d && !got && (e = readdir(d));)
        if ((got = !strcmp(e->d_name, "latest") || !strncmp(e->d_name, "step_", 5)) && cap) snprintf(found, cap, "%s", e->d_name);
    if (d) closedir(d);
    return got;
}

int ckpt_is_weights_folder(const char *dir) {
    char p[4200];
    join(p, sizeof p, dir, "state.json");
    if (access(p, F_OK) == 0) return 0;
    join(p, sizeof p, dir, FILES[0]);
    if (access(p, F_OK) == 0) return 1;
    join(p, sizeof p, dir, "model.safetensors.index.json"); /* Hugging Face's sharded weights */
    return access(p, F_OK) == 0;
}

/* What a resolve checks of each candidate: everything (every file read and hashed) or the structure
 * (state.json and its own checksum, every listed file present with its recorded size). */
/* A listed file's size against state.json's record, with ckpt_check_file's messages, without reading it. */
static Status check_size(const char *ckpt, const char *name, const FileSum *sum, Err *err) {
    char path[4200];
    struct stat sb;
    join(path, sizeof path, ckpt, name);
    if (stat(path, &sb) != 0)
        return err_set(err, ST_ERR_INPUT, "%s/%s: missing or unreadable", ckpt_base_name(ckpt), name);
    size_t n = (size_t)sb.st_size;
    if (n != sum->bytes)
        return err_set(err, ST_ERR_INPUT, "%s/%s: expected %zu bytes, found %zu (%s)", ckpt_base_name(ckpt), name,
                       sum->bytes, n, n < sum->bytes ? "truncated" : "corrupt");
    return ST_OK;
}

/* state.json (its own checksum), then every file it lists: read and hashed (data) or sized only. */
static Status check_listed(const char *ckpt_path, int data, Err *err) {
    CkptMeta m;
    CkptFileList files;
    Status st = ckpt_state_read(ckpt_path, &m, &files, err);
    if (st != ST_OK) return st;
    ckpt_meta_free(&m);
    for (int i = 0; i < files.n && st == ST_OK; i++)
        st = data ? ckpt_check_file(ckpt_path, files.e[i].name, &files.e[i].sum, NULL, NULL, NULL, err)
                  : check_size(ckpt_path, files.e[i].name, &files.e[i].sum, err);
    ckpt_files_free(&files);
    return st;
}

/* Both formats: every file state.json names (the single-process format's three, or a sharded
 * checkpoint's config.json, manifest.json and rank files) against its recorded size and hash. */
Status ckpt_verify(const char *ckpt_path, Err *err) { return check_listed(ckpt_path, 1, err); }

Status ckpt_check_structure(const char *ckpt_path, Err *err) { return check_listed(ckpt_path, 0, err); }

static Status resolve(const char *dir, const char *spec, long before, Status (*check)(const char *, Err *), char *out,
                      size_t out_len, char *note, size_t note_len, Err *err);

Status ckpt_resolve(const char *dir, const char *spec, char *out, size_t out_len, char *note, size_t note_len,
                    Err *err) {
    return resolve(dir, spec, LONG_MAX, ckpt_verify, out, out_len, note, note_len, err);
}

Status ckpt_resolve_unread(const char *dir, const char *spec, long before_step, char *out, size_t out_len, char *note,
                           size_t note_len, Err *err) {
    return resolve(dir, spec, before_step, ckpt_check_structure, out, out_len, note, note_len, err);
}

static Status resolve(const char *dir, const char *spec, long before, Status (*check)(const char *, Err *), char *out,
                      size_t out_len, char *note, size_t note_len, Err *err) {
    out[0] = '\0';
    if (note && note_len) note[0] = '\0';
    char probe[4200];
    if ((!spec || !strcmp(spec, "auto")) && dir && dir[0]) {
        /* dir may itself be a checkpoint directory: then it is the explicit choice. */
        join(probe, sizeof probe, dir, "state.json");
        if (access(probe, F_OK) == 0) spec = dir;
    }
    if (spec && strcmp(spec, "auto") != 0) {
        snprintf(probe, sizeof probe, "%s/state.json", spec);
        if (access(probe, F_OK) == 0) {
            Status st = check(spec, err);
            if (st != ST_OK) return err_prefix(err, "%s", spec);
            snprintf(out, out_len, "%s", spec);
            return ST_OK;
        }
        if (!file_is_dir(spec))
            return err_set(err, ST_ERR_INPUT, "%s: expected a checkpoint directory or a directory of checkpoints, found %s",
                           spec, access(spec, F_OK) == 0 ? "a file" : "nothing");
        dir = spec;
    }
    if (!dir || !dir[0]) return err_set(err, ST_ERR_INPUT, "no directory of checkpoints to search");
    long *steps;
    int n = list_steps(dir, &steps);
    if (n <= 0) {
        free(steps);
        if (note && note_len) snprintf(note, note_len, "no checkpoint in %s: starting from scratch", dir);
        return ST_OK;
    }
    Err first = {0};
    long first_step = -1;
    int skipped = 0;
    Status st = ST_ERR_INPUT;
    for (int i = 0; i < n; i++) {
        char name[64], path[4200];
        ckpt_step_name(name, sizeof name, steps[i]);
        join(path, sizeof path, dir, name);
        Err e = {0};
        if (steps[i] >= before) continue; /* at or after a step the caller found corrupt */
        if (check(path, &e) == ST_OK) {
            snprintf(out, out_len, "%s", path);
            if (skipped && note && note_len)
                snprintf(note, note_len, "newest checkpoint refused (%s); %d newer checkpoint(s) skipped, falling back to %s",
                         first.msg, skipped, name);
            st = ST_OK;
            break;
        }
        if (!skipped) first = e, first_step = steps[i];
        skipped++;
    }
    free(steps);
    if (st != ST_OK && first_step < 0)
        return err_set(err, ST_ERR_INPUT, "no checkpoint in %s older than step %ld (%d found)", dir, before, n);
    if (st != ST_OK)
        return err_set(err, ST_ERR_INPUT, "no valid checkpoint in %s (%d found; newest step %ld: %s)", dir,
                       n, first_step, first.msg);
    return ST_OK;
}

/* ======================================================================================== */
/* Retention                                                                                 */
/* ======================================================================================== */

Status ckpt_prune(const char *dir, int keep_last, int keep_every, int *removed, Err *err) {
    if (removed) *removed = 0;
    if (keep_last <= 0) return ST_OK;
    long *steps;
    int n = list_steps(dir, &steps); /* newest first */
    if (n < 0) return err_set(err, ST_ERR_RUNTIME, "%s: cannot list the checkpoint directory: %s", dir, strerror(errno));
    long latest = -1;
    char path[4200], *text;
    size_t len;
    snprintf(path, sizeof path, "%s/latest", dir);
    if (file_read_all(path, &text, &len, NULL) == ST_OK) {
        text[strcspn(text, "\n")] = '\0';
        latest = ckpt_parse_step_name(text);
        free(text);
    }
    Status st = ST_OK;
    for (int i = keep_last; i < n; i++) {
        if ((keep_every > 0 && steps[i] % keep_every == 0) || steps[i] == latest) continue;
        char name[64], del[4200];
        ckpt_step_name(name, sizeof name, steps[i]);
        join(path, sizeof path, dir, name);
        snprintf(del, sizeof del, "%s/.del-%s", dir, name);
        /* Rename first so an interrupted removal never leaves a half-deleted step_* directory. */
        if (rename(path, del) != 0 || ckpt_rm_tree(del) != 0) {
            st = err_set(err, ST_ERR_RUNTIME, "%s: cannot remove: %s", path, strerror(errno));
            break;
        }
        if (removed) (*removed)++;
    }
    free(steps);
    if (st == ST_OK && removed && *removed) st = ckpt_fsync_dir(dir, err);
    return st;
}
