/* train.c — the step loop: data, forward, backward, clip, optimizer, validation, metrics. */
#include "train/train.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "ckpt/ckpt.h"
#include "ckpt/safetensors.h"
#include "core/mem.h"
#include "core/peak.h"
#include "core/progress.h"
#include "core/rng.h"
#include "core/timer.h"
#include "data/loader.h"
#include "model/gpt.h"
#include "model/layout.h"
#include "model/infer.h"
#include "model/matmul.h"
#include "data/bpe.h"
#include "parallel/parallel.h"
#include "plan/plan.h"

TrainConfig train_default_config(void) {
    TrainConfig c;
    memset(&c, 0, sizeof c);
    c.model.n_layer = 6, c.model.n_head = 6, c.model.n_embd = 384;
    c.model.vocab = 0, c.model.max_seq = 1024, c.model.dropout = 0.0f;
    c.micro_batch = 8, c.seq_len = 256, c.grad_accum = 1;
    c.optim = optim_default_config(OPT_ADAMW);
    c.sched.kind = SCHED_COSINE, c.sched.lr = 6e-4f, c.sched.min_lr = 6e-5f, c.sched.warmup = 100;
    c.sched.decay_frac = 0.2f, c.sched.decay_shape = DECAY_LINEAR;
    c.grad_clip = 1.0f;
    c.steps = 1000;
    c.seed = 1337, c.data_seed = 42;
    c.threads = 2;
    c.val_every = 100, c.val_batches = 10;
    c.keep_last = 3;
    c.sample_tokens = 64;
    health_default_options(&c.health);
    c.loss_scale = 65536.0f, c.loss_scale_window = 1000;
    return c;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, long n) {
    if (n <= 0) return NAN;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* One JSON Lines record; "event" first. Takes ownership of o. */
static void log_event(FILE *f, cJSON *o) {
    if (f) {
        char *s = cJSON_PrintUnformatted(o);
        if (s) {
            fputs(s, f);
            fputc('\n', f);
            fflush(f);
            free(s);
        }
    }
    cJSON_Delete(o);
}

static cJSON *event(const char *name) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "event", name);
    return o;
}

static cJSON *config_json(const TrainConfig *c) {
    cJSON *o = cJSON_CreateObject();
    cJSON *m = cJSON_AddObjectToObject(o, "model");
    cJSON_AddNumberToObject(m, "layers", c->model.n_layer);
    cJSON_AddNumberToObject(m, "heads", c->model.n_head);
    cJSON_AddNumberToObject(m, "channels", c->model.n_embd);
    cJSON_AddNumberToObject(m, "vocab", c->model.vocab);
    cJSON_AddNumberToObject(m, "vocab_padded", c->model.vocab_padded);
    cJSON_AddNumberToObject(m, "max_seq_len", c->model.max_seq);
    cJSON_AddNumberToObject(m, "dropout", c->model.dropout);
    cJSON_AddStringToObject(o, "data", c->data);
    cJSON_AddStringToObject(o, "val_data", c->val_data);
    cJSON_AddStringToObject(o, "tokenizer", c->tokenizer);
    cJSON_AddNumberToObject(o, "micro_batch", c->micro_batch);
    cJSON_AddNumberToObject(o, "seq_len", c->seq_len);
    cJSON_AddNumberToObject(o, "grad_accum", c->grad_accum);
    cJSON_AddNumberToObject(o, "dp", c->dp > 0 ? c->dp : 1);
    cJSON_AddNumberToObject(o, "zero", c->zero);
    cJSON_AddStringToObject(o, "optimizer", optim_kind_name(c->optim.kind));
    cJSON_AddNumberToObject(o, "beta1", c->optim.beta1);
    cJSON_AddNumberToObject(o, "beta2", c->optim.beta2);
    cJSON_AddNumberToObject(o, "eps", c->optim.eps);
    cJSON_AddNumberToObject(o, "weight_decay", c->optim.weight_decay);
    cJSON_AddNumberToObject(o, "momentum", c->optim.momentum);
    cJSON_AddStringToObject(o, "schedule", sched_kind_name(c->sched.kind));
    cJSON_AddNumberToObject(o, "lr", c->sched.lr);
    cJSON_AddNumberToObject(o, "min_lr", c->sched.min_lr);
    cJSON_AddNumberToObject(o, "warmup", (double)c->sched.warmup);
    cJSON_AddNumberToObject(o, "decay_frac", c->sched.decay_frac);
    cJSON_AddStringToObject(o, "decay_shape", sched_shape_name(c->sched.decay_shape));
    cJSON_AddNumberToObject(o, "grad_clip", c->grad_clip);
    cJSON_AddNumberToObject(o, "steps", (double)c->steps);
    cJSON_AddNumberToObject(o, "seed", (double)c->seed);
    cJSON_AddNumberToObject(o, "data_seed", (double)c->data_seed);
    cJSON_AddNumberToObject(o, "threads", c->threads);
    cJSON_AddNumberToObject(o, "val_every", c->val_every);
    cJSON_AddNumberToObject(o, "val_batches", c->val_batches);
    char hash[32];
    snprintf(hash, sizeof hash, "%016llx", (unsigned long long)c->tokenizer_hash);
    cJSON_AddStringToObject(o, "tokenizer_hash", hash);
    cJSON_AddBoolToObject(o, "no_pack", c->no_pack);
    cJSON_AddStringToObject(o, "recompute", layout_recompute_name(c->recompute));
    cJSON_AddStringToObject(o, "precision", c->fp16 ? "fp16" : c->bf16 ? "bf16" : "fp32");
    cJSON_AddStringToObject(o, "log", c->log_path);
    cJSON_AddStringToObject(o, "out", c->out_dir);
    cJSON_AddStringToObject(o, "ckpt_dir", c->ckpt_dir);
    cJSON_AddNumberToObject(o, "ckpt_every", c->ckpt_every);
    cJSON_AddNumberToObject(o, "keep_last", c->keep_last);
    cJSON_AddNumberToObject(o, "keep_every", c->keep_every);
    cJSON_AddBoolToObject(o, "ckpt_async", c->ckpt_async);
    cJSON_AddStringToObject(o, "init_from", c->init_from);
    return o;
}

static Status validate(const TrainConfig *c, Err *err) {
    if (c->micro_batch < 1)
        return err_set(err, ST_ERR_INPUT, "--micro-batch: expected a positive integer, found %d", c->micro_batch);
    if (c->seq_len < 1) return err_set(err, ST_ERR_INPUT, "--seq-len: expected a positive integer, found %d", c->seq_len);
    if (c->grad_accum < 1)
        return err_set(err, ST_ERR_INPUT, "--grad-accum: expected a positive integer, found %d", c->grad_accum);
    if (c->steps < 1) return err_set(err, ST_ERR_INPUT, "--steps: expected a positive integer, found %ld", c->steps);
    if (c->threads < 1 || c->threads > 1024)
        return err_set(err, ST_ERR_INPUT, "--threads: expected 1..1024, found %d", c->threads);
    if (!(c->sched.lr >= 0)) return err_set(err, ST_ERR_INPUT, "--lr: expected a value >= 0, found %g", c->sched.lr);
    if (!(c->sched.min_lr >= 0 && c->sched.min_lr <= c->sched.lr))
        return err_set(err, ST_ERR_INPUT, "--min-lr: expected a value in [0, --lr=%g], found %g", c->sched.lr,
                       c->sched.min_lr);
    if (c->sched.warmup < 0) return err_set(err, ST_ERR_INPUT, "--warmup: expected >= 0, found %ld", c->sched.warmup);
    if (!(c->sched.decay_frac >= 0 && c->sched.decay_frac <= 1))
        return err_set(err, ST_ERR_INPUT, "--decay-frac: expected a value in [0, 1], found %g", c->sched.decay_frac);
    if (!(c->optim.beta1 >= 0 && c->optim.beta1 < 1))
        return err_set(err, ST_ERR_INPUT, "--beta1: expected a value in [0, 1), found %g", c->optim.beta1);
    if (!(c->optim.beta2 >= 0 && c->optim.beta2 < 1))
        return err_set(err, ST_ERR_INPUT, "--beta2: expected a value in [0, 1), found %g", c->optim.beta2);
    if (!(c->optim.eps >= 0)) return err_set(err, ST_ERR_INPUT, "--eps: expected a value >= 0, found %g", c->optim.eps);
    if (!(c->optim.weight_decay >= 0))
        return err_set(err, ST_ERR_INPUT, "--weight-decay: expected a value >= 0, found %g", c->optim.weight_decay);
    if (c->val_batches < 1)
        return err_set(err, ST_ERR_INPUT, "--val-batches: expected a positive integer, found %d", c->val_batches);
    if (c->val_every < 0) return err_set(err, ST_ERR_INPUT, "--val-every: expected >= 0, found %d", c->val_every);
    if (!c->data[0]) return err_set(err, ST_ERR_INPUT, "--data: expected a token shard path or glob, found none");
    return ST_OK;
}

/* Mean loss over `batches` sequential micro-batches of the validation stream. */
static double validate_loss(Gpt *g, Loader *val, int batches, int32_t *inp, int32_t *tgt) {
    int B = g->B, T = g->T;
    uint64_t avail = val->nwin / (uint64_t)B;
    if ((uint64_t)batches > avail) batches = (int)(avail ? avail : 1);
    double sum = 0, count = 0;
    for (int j = 0; j < batches; j++) {
        int rows = val->nwin < (uint64_t)B ? (int)val->nwin : B;
        loader_fill(val, (uint64_t)j * B, rows, inp, tgt);
        sum += gpt_forward(g, inp, tgt, rows, T, 0.0f, 0, 0);
        for (int i = 0; i < rows * T; i++) count += tgt[i] >= 0;
    }
    return count > 0 ? sum / count : NAN;
}

/* Preemption: the signal handler only sets a flag that the step loop reads between steps; a
 * second signal exits at once. Process-wide by nature (signals are), installed only when the
 * caller asks (the CLI), so library users and concurrent runs are unaffected. */
static volatile sig_atomic_t g_stop_signal = 0;

static void on_stop_signal(int sig) {
    if (g_stop_signal) _exit(128 + sig);
    g_stop_signal = sig;
}

/* Splits "a,b,c" into at most max pointers into buf (modified). */
static int split_list(char *buf, const char **out, int max) {
    int n = 0;
    for (char *tok = strtok(buf, ","); tok && n < max; tok = strtok(NULL, ",")) out[n++] = tok;
    return n;
}

/* Everything a run owns; released by run_free in one place. */
typedef struct {
    TrainConfig cfg;
    MemStats mem;
    Loader train, val;
    Gpt g;
    float *m, *v;
    size_t moment_bytes;
    int32_t *inp, *tgt;
    size_t batch_ints;
    OptimRange *ranges;
    double *step_ms;
    FILE *log;
    CkptAsync *async;
    cJSON *config;
    Par *par;                   /* data parallelism (NULL: one process, the plain path) */
    int dp, dp_rank;            /* data-parallel ranks and this rank (1, 0 without parallelism) */
    HealthState health;         /* spike / divergence detectors (train/health.h) */
    LossScaler scaler;          /* fp16 dynamic loss scaling */
    long start_attempt;         /* batches consumed before this run started (resume) */
#define SKIP_RECORD_MAX 1024
    long skipped[SKIP_RECORD_MAX]; /* batches whose update was skipped (logged and checkpointed) */
    int nskipped;
} Run;

static void run_free(Run *r) {
    if (r->async) {
        Err e;
        ckpt_async_wait(r->async, NULL, &e);
        ckpt_async_free(r->async);
    }
    if (r->log) fclose(r->log);
    free(r->ranges);
    free(r->step_ms);
    mem_free(&r->mem, MEM_DATA, r->inp, r->batch_ints * sizeof(int32_t));
    mem_free(&r->mem, MEM_DATA, r->tgt, r->batch_ints * sizeof(int32_t));
    mem_free(&r->mem, MEM_MOMENTS, r->m, r->moment_bytes);
    mem_free(&r->mem, MEM_MOMENTS, r->v, r->moment_bytes);
    par_free(r->par);
    gpt_free(&r->g);
    loader_close(&r->train);
    loader_close(&r->val);
    cJSON_Delete(r->config);
}

/* ================================================================ data parallelism (issue 6)
 * One process without a Comm, or with dp = 1 and ZeRO 0, runs the code above unchanged; otherwise
 * `parallel` (docs/parallel.md) owns the moments, the gradient collectives and the update, and
 * these helpers adapt the trainer's state handling to it. */

/* Grid (dp × tp × pp = world, refused before any allocation) and the collective timeout. */
static Status run_par_setup(Run *r, Err *err) {
    TrainConfig *c = &r->cfg;
    r->dp = 1, r->dp_rank = 0;
    if (c->zero < 0 || c->zero > 3) return err_set(err, ST_ERR_INPUT, "--zero: expected 0, 1, 2 or 3, found %d", c->zero);
    if (!c->comm) {
        if (c->dp > 1 || c->zero > 0)
            return err_set(err, ST_ERR_INPUT, "--dp %d --zero %d: expected a process grid (Comm), found none", c->dp,
                           c->zero);
        return ST_OK;
    }
    int dp = c->dp > 0 ? c->dp : c->comm->world;
    Status st = comm_set_grid(c->comm, dp, 1, 1, err);
    if (st != ST_OK) return st;
    if (c->comm_timeout > 0) c->comm->timeout_s = c->comm_timeout;
    c->dp = r->dp = dp, r->dp_rank = c->comm->dp_rank;
    return ST_OK;
}

/* Every rank got the same config (hash of its JSON); the grid and each rank's threads are printed;
 * from here on only rank 0 prints progress and writes the log. */
static Status run_par_check(Run *r, Err *err) {
    TrainConfig *c = &r->cfg;
    if (!c->comm) return ST_OK;
    char *text = cJSON_PrintUnformatted(r->config);
    if (!text) return err_set(err, ST_ERR_RUNTIME, "out of memory (config text)");
    uint64_t h = XXH3_64bits(text, strlen(text));
    free(text);
    Status st = comm_check_same_u64(c->comm, h, "config hash", err);
    if (st != ST_OK) return st;
    double *thr = calloc((size_t)c->comm->world, sizeof *thr);
    if (!thr) return err_set(err, ST_ERR_RUNTIME, "out of memory");
    st = comm_allgather_f64(c->comm, (double)c->threads, thr, err);
    if (st == ST_OK && c->comm->rank == 0 && !c->quiet) {
        char d[256];
        comm_describe(c->comm, d, sizeof d);
        printf("grid: %s, ZeRO stage %d, collective timeout %.0f s\nthreads:", d, c->zero, c->comm->timeout_s);
        for (int i = 0; i < c->comm->world; i++) printf(" rank %d %d%s", i, (int)thr[i], i + 1 < c->comm->world ? "," : "\n");
        fflush(stdout);
    }
    free(thr);
    if (c->comm->rank != 0) c->quiet = 1, c->log_path[0] = 0;
    return st;
}

static Status run_gpt_init(Run *r, int B, int T, int nt, Err *err) {
    TrainConfig *c = &r->cfg;
    if (!c->comm || (r->dp == 1 && c->zero == 0))
        return gpt_init_ex(&r->g, &c->model, B, T, nt, 1, c->recompute,
                           c->fp16 ? GPT_FP16 : c->bf16 ? GPT_BF16 : 0, &r->mem, err);
    int prec = c->fp16 ? GPT_FP16 : c->bf16 ? GPT_BF16 : 0;
    Status st = gpt_init_ex(&r->g, &c->model, B, T, nt, r->dp, c->recompute, par_gpt_flags(c->zero) | prec, &r->mem, err);
    if (st != ST_OK) return st;
    ParOptions po = par_default_options();
    po.zero = c->zero, po.overlap = !c->no_overlap, po.n_moments = optim_num_moments(&c->optim), po.nt = nt;
    return par_init(&r->par, c->comm, &r->g, &po, &r->mem, err);
}

/* Transient full-layout buffers (initialisation, checkpoints, final weights) are staging memory. */
static float *run_staging(Run *r, int n) {
    return mem_alloc(&r->mem, MEM_CKPT_STAGING, r->g.layout.total * sizeof(float) * (size_t)n);
}
static void run_staging_free(Run *r, float *p, int n) {
    mem_free(&r->mem, MEM_CKPT_STAGING, p, r->g.layout.total * sizeof(float) * (size_t)n);
}

/* Initial weights: seeded, or --init-from (path non-NULL). Every element depends on (seed, tensor,
 * index) only, so every grid starts from the same weights. */
static Status run_init_weights(Run *r, const char *path, Err *err) {
    if (!r->par || r->cfg.zero < 3) {
        if (!path) gpt_init_params(&r->g, r->cfg.seed);
        Status st = path ? ckpt_init_from(&r->g, path, err) : ST_OK;
        gpt_sync_lp(&r->g);
        return st;
    }
    float *full = run_staging(r, 1);
    if (!full) return err_set(err, ST_ERR_RUNTIME, "out of memory (initial weights)");
    Status st = ST_OK;
    Gpt view = r->g; /* ckpt reads the layout and writes view.params */
    view.params = full;
    if (path) st = ckpt_init_from(&view, path, err);
    else gpt_init_params_buf(&r->g.layout, full, r->cfg.seed, r->g.nt);
    if (st == ST_OK) par_set_full(r->par, full, NULL, NULL);
    run_staging_free(r, full, 1);
    return st;
}

/* A progress bar for long checkpoint reads and writes: on a terminal, or for 256 MiB and more of
 * parameters in logs. NULL when none is wanted. */
static Progress *run_ckpt_bar(Run *r, Progress *bar, const char *what) {
    if (r->cfg.quiet || !(isatty(2) || r->g.layout.total * 4 >= ((size_t)256 << 20))) return NULL;
    progress_init(bar, what, "bytes", "MB/s", 1e-6);
    return bar;
}

/* Loads a checkpoint (written by any grid) into this rank's parameters and moments. */
static Status run_load_ckpt(Run *r, const char *path, CkptMeta *meta, Err *err) {
    Progress bar, *pb = run_ckpt_bar(r, &bar, "checkpoint load");
    CkptProgressFn fn = pb ? progress_cb : NULL;
    if (!r->par) {
        CkptOptState opt = {r->m, r->v, NULL};
        Status st = ckpt_load_progress(path, &r->g, &opt, meta, fn, pb, err);
        gpt_sync_lp(&r->g);
        return st;
    }
    int nv = par_moment(r->par, 1) ? 1 : 0;
    float *buf = run_staging(r, 2 + nv);
    if (!buf) return err_set(err, ST_ERR_RUNTIME, "out of memory (checkpoint staging)");
    size_t n = r->g.layout.total;
    Gpt view = r->g;
    view.params = buf;
    CkptOptState opt = {buf + n, nv ? buf + 2 * n : NULL, NULL};
    Status st = ckpt_load_progress(path, &view, &opt, meta, fn, pb, err);
    if (st == ST_OK) par_set_full(r->par, buf, opt.m, opt.v);
    run_staging_free(r, buf, 2 + nv);
    return st;
}

/* Gathers the full parameters (and moments when opt_too) into staging; rank 0 writes. The others
 * learn rank 0's outcome, so a failed write ends the run everywhere instead of a hang. */
static Status run_save_par(Run *r, const CkptMeta *meta, const CkptOptions *o, CkptSaveInfo *info, const char *out_dir,
                           Err *err) {
    int nv = par_moment(r->par, 1) ? 1 : 0, nb = out_dir ? 1 : 2 + nv;
    float *buf = run_staging(r, nb);
    if (!buf) return err_set(err, ST_ERR_RUNTIME, "out of memory (checkpoint staging)");
    size_t n = r->g.layout.total;
    CkptOptState opt = {out_dir ? NULL : buf + n, out_dir || !nv ? NULL : buf + 2 * n, NULL};
    Status st = par_get_full(r->par, buf, opt.m, opt.v, err);
    int64_t fail = 0;
    if (st == ST_OK && r->cfg.comm->rank == 0) {
        Gpt view = r->g;
        view.params = buf;
        st = out_dir ? st_save_hf(&view, out_dir, r->cfg.tokenizer, err) : ckpt_save(&view, &opt, meta, o, info, err);
        fail = st != ST_OK;
    }
    run_staging_free(r, buf, nb);
    Err e2;
    Status st2 = comm_allreduce_i64(r->cfg.comm, &fail, 1, COMM_MAX, &e2);
    if (st != ST_OK) return st;
    if (st2 != ST_OK) return *err = e2, st2;
    if (fail) return err_set(err, ST_ERR_RUNTIME, "%s: rank 0 could not write it (its message says why)",
                             out_dir ? out_dir : "checkpoint");
    return ST_OK;
}

/* The step's global token count and the agreed preemption flag (one small all-reduce). */
static Status run_par_tokens(Run *r, long *ntok, int *stop, Err *err) {
    int64_t v[2] = {*ntok, g_stop_signal != 0};
    Status st = comm_allreduce_i64(r->cfg.comm, v, 2, COMM_SUM, err);
    *ntok = (long)v[0], *stop = v[1] > 0;
    return st;
}

/* After the backward passes: gradient collectives finished, loss summed, global norm. */
static Status run_par_reduce(Run *r, double *loss_sum, double *norm, Err *err) {
    Status st = par_grads_finish(r->par, err);
    if (st == ST_OK) st = comm_allreduce_f64(r->cfg.comm, loss_sum, 1, COMM_SUM, err);
    if (st == ST_OK) st = par_grad_norm(r->par, norm, err);
    return st;
}

static double comm_bytes_total(const Comm *c) {
    double b = 0;
    for (int k = 0; k < COMM_NKIND; k++) b += (double)c->stats.bytes[k];
    return b;
}

/* Step record additions: bytes sent, max and median step time across ranks. Collective. */
static void run_par_step_record(Run *r, cJSON *o, double dt, double bytes) {
    Comm *c = r->cfg.comm;
    double *all = calloc((size_t)c->world, sizeof *all);
    Err e;
    if (!all || comm_allgather_f64(c, dt, all, &e) != ST_OK) {
        free(all);
        return;
    }
    double mx = 0;
    for (int i = 0; i < c->world; i++) mx = all[i] > mx ? all[i] : mx;
    cJSON_AddNumberToObject(o, "comm_bytes", bytes);
    cJSON_AddNumberToObject(o, "step_ms_max", mx);
    cJSON_AddNumberToObject(o, "step_ms_median", median(all, c->world));
    free(all);
}

/* Per-rank planned bytes of parameters, gradients, master weights and moments. */
static void run_par_plan(const Run *r, size_t plan[MEM_NCAT]) {
    par_planned_bytes(&r->g.layout, r->dp, r->cfg.zero, optim_num_moments(&r->cfg.optim), r->g.bf16, plan);
}

/* The memory event: this stage's planned bytes per rank and every rank's measured bytes. */
static void run_par_memory(Run *r, cJSON *o) {
    Comm *c = r->cfg.comm;
    size_t plan[MEM_NCAT];
    run_par_plan(r, plan);
    static const MemCategory cats[4] = {MEM_PARAMS, MEM_GRADS, MEM_MASTER, MEM_MOMENTS};
    cJSON *pl = cJSON_AddObjectToObject(o, "planned");
    cJSON *br = cJSON_AddObjectToObject(o, "measured_by_rank");
    double *all = calloc((size_t)c->world, sizeof *all);
    int match = all != NULL;
    for (int i = 0; i < 4 && all; i++) {
        Err e;
        cJSON_AddNumberToObject(pl, mem_category_name(cats[i]), (double)plan[cats[i]]);
        if (comm_allgather_f64(c, (double)r->mem.bytes[cats[i]], all, &e) != ST_OK) match = 0;
        cJSON *a = cJSON_AddArrayToObject(br, mem_category_name(cats[i]));
        for (int q = 0; q < c->world; q++) {
            cJSON_AddItemToArray(a, cJSON_CreateNumber(all[q]));
            match = match && all[q] == (double)plan[cats[i]];
        }
    }
    free(all);
    cJSON_AddNumberToObject(o, "zero", r->cfg.zero);
    cJSON_AddNumberToObject(o, "dp", r->dp);
    cJSON_AddBoolToObject(o, "planned_equals_measured", match);
    if (!r->cfg.quiet)
        printf("memory per rank (dp %d, ZeRO %d): params %.2f MiB, grads %.2f MiB, moments %.2f MiB planned; measured "
               "on every rank %s\n",
               r->dp, r->cfg.zero, plan[MEM_PARAMS] / 1048576.0, plan[MEM_GRADS] / 1048576.0,
               plan[MEM_MOMENTS] / 1048576.0, match ? "equal" : "DIFFERENT (see the memory event)");
}

/* Writes a checkpoint of the state after `step` completed steps; returns its cost in ms. */
static Status save_checkpoint(Run *r, long step, long attempt, double *ms, CkptSaveInfo *info, Err *err) {
    const TrainConfig *c = &r->cfg;
    double t0 = timer_ms();
    CkptMeta meta;
    memset(&meta, 0, sizeof meta);
    meta.step = step;
    meta.tokens_seen = (uint64_t)attempt * c->micro_batch * c->grad_accum * r->dp * c->seq_len;
    meta.sched_step = step;
    meta.loader = loader_get_state(&r->train);
    snprintf(meta.optimizer, sizeof meta.optimizer, "%s", optim_kind_name(c->optim.kind));
    meta.optim_step = step;
    meta.dp = r->dp, meta.tp = 1, meta.pp = 1, meta.zero = c->zero;
    ckpt_meta_set_rng(&meta, "init_seed", c->seed);
    ckpt_meta_set_rng(&meta, "data_seed", c->data_seed);
    ckpt_meta_set_rng(&meta, "dropout_seed", r->g.dropout_seed);
    ckpt_meta_set_rng(&meta, "dropout_counter", (uint64_t)attempt * c->grad_accum * r->dp);
    meta.config = r->config;
    /* Health detectors, the batch counter and the skipped batches travel in "extra". */
    cJSON *extra = cJSON_CreateObject();
    cJSON_AddItemToObject(extra, "health", health_state_to_json(&r->health));
    cJSON_AddNumberToObject(extra, "batches", (double)attempt);
    cJSON *sk = cJSON_AddArrayToObject(extra, "skipped_batches");
    for (int i = 0; i < r->nskipped; i++) cJSON_AddItemToArray(sk, cJSON_CreateNumber((double)r->skipped[i]));
    meta.extra = extra;
    if (c->fp16) {
        ckpt_meta_set_scaler(&meta, "scale", r->scaler.scale);
        ckpt_meta_set_scaler(&meta, "good_steps", (double)r->scaler.good);
        ckpt_meta_set_scaler(&meta, "skips", (double)r->scaler.skips);
    }
    CkptOptState opt = {r->m, r->v, NULL};
    CkptOptions o = ckpt_default_options();
    o.dir = c->ckpt_dir, o.keep_last = c->keep_last, o.keep_every = c->keep_every, o.tokenizer = c->tokenizer;
    /* Synchronous saves show progress; an asynchronous one runs behind training. */
    Progress bar, *pb = r->async ? NULL : run_ckpt_bar(r, &bar, "checkpoint");
    if (pb) o.progress = progress_cb, o.progress_ctx = pb;
    Status st;
    memset(info, 0, sizeof *info);
    if (r->async) {
        /* The previous background write must be complete (and its errors seen) first. */
        if ((st = ckpt_async_wait(r->async, NULL, err)) != ST_OK) return st;
        st = ckpt_async_save(r->async, &r->g, &opt, &meta, &o, err);
    } else if (r->par) {
        st = run_save_par(r, &meta, &o, info, NULL, err);
    } else {
        st = ckpt_save(&r->g, &opt, &meta, &o, info, err);
    }
    cJSON_Delete(extra);
    *ms = timer_ms() - t0;
    return st;
}

/* A generation sample from the current weights (KV cache, temperature 0.8 over the whole
 * vocabulary, seeded by the step so it is reproducible), printed and logged. */
static void log_sample(Run *r, long step, FILE *log) {
    const TrainConfig *c = &r->cfg;
    if (!r->g.params) return; /* ZeRO-3: the full weights are not on this rank */
    KvCache kv;
    Err e;
    if (kv_init(&kv, &r->g, &e) != ST_OK) return;
    int n = c->sample_tokens < c->model.max_seq ? c->sample_tokens : c->model.max_seq - 1;
    uint32_t *ids = calloc((size_t)n + 1, sizeof *ids);
    int32_t cur = c->model.vocab - 1; /* start from end-of-text */
    for (int i = 0; i < n && ids; i++) {
        infer_step(&r->g, &kv, cur);
        float mx = kv.logits[0];
        for (int v = 1; v < c->model.vocab; v++) mx = kv.logits[v] > mx ? kv.logits[v] : mx;
        double sum = 0;
        for (int v = 0; v < c->model.vocab; v++) sum += exp((kv.logits[v] - mx) / 0.8);
        double u = rng_uniform((uint64_t)step, 0x5a3b1e, (uint64_t)i) * sum, acc = 0;
        cur = c->model.vocab - 1;
        for (int v = 0; v < c->model.vocab; v++) {
            acc += exp((kv.logits[v] - mx) / 0.8);
            if (acc >= u) {
                cur = v;
                break;
            }
        }
        ids[i] = (uint32_t)cur;
    }
    uint8_t *text = NULL;
    size_t len = 0, cap = 0;
    if (ids && c->sample_tokenizer) tokenizer_decode(c->sample_tokenizer, ids, (size_t)n, &text, &len, &cap, &e);
    cJSON *o = event("sample");
    cJSON_AddNumberToObject(o, "step", (double)step);
    if (text) {
        char *t = malloc(len + 1);
        memcpy(t, text, len);
        t[len] = 0;
        cJSON_AddStringToObject(o, "text", t);
        if (!c->quiet) {
            /* The console line stays one line: newlines are shown as ⏎, other control bytes as spaces. */
            printf("sample %5ld | ", step);
            for (size_t i = 0; i < len; i++) {
                unsigned char ch = (unsigned char)t[i];
                if (ch == '\n') fputs("⏎", stdout);
                else if (ch < 0x20 || ch == 0x7f) putchar(' '); /* no control bytes on the console */
                else putchar(ch);
            }
            printf("\n");
        }
        free(t);
    } else if (ids) {
        cJSON *a = cJSON_AddArrayToObject(o, "ids");
        for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[i]));
    }
    log_event(log, o);
    free(text);
    free(ids);
    kv_free(&kv);
}

Status train_run(const TrainConfig *cfg_in, TrainResult *res, Err *err) {
    Status st = validate(cfg_in, err);
    if (st != ST_OK) return st;
    memset(res, 0, sizeof *res);
    res->first_val = res->last_val = NAN;
    size_t rss_base = mem_rss_anon(); /* before anything of this run is allocated */
    Run run;
    memset(&run, 0, sizeof run);
    Run *r = &run;
    r->cfg = *cfg_in;
    TrainConfig *cfg = &r->cfg;
    int B = cfg->micro_batch, T = cfg->seq_len, k = cfg->grad_accum, nt = cfg->threads;
    char ckpt_path[4096] = "", note[1024] = "";
    CkptMeta meta;
    memset(&meta, 0, sizeof meta);
    long start_step = 0;
    /* The process grid first: a wrong one is refused before anything is allocated. */
    if ((st = run_par_setup(r, err)) != ST_OK) goto done;

    int lflags = LOADER_SHUFFLE | (cfg->no_pack ? LOADER_NO_PACK : 0);
    if ((st = loader_open(&r->train, cfg->data, T, 0, cfg->tokenizer_hash, cfg->data_seed, lflags, err)) != ST_OK)
        goto done;
    if (cfg->model.vocab == 0) {
        cfg->model.vocab = (int)loader_header_vocab(&r->train);
        if (cfg->model.vocab == 0) {
            st = err_set(err, ST_ERR_INPUT, "--vocab: not given and the shard headers of %s record no vocabulary size",
                         cfg->data);
            goto done;
        }
    }
    if ((st = model_config_validate(&cfg->model, err)) != ST_OK) goto done;
    if ((st = loader_check_vocab(&r->train, (uint32_t)cfg->model.vocab, err)) != ST_OK) goto done;
    if (cfg->val_data[0]) {
        int vflags = cfg->no_pack ? LOADER_NO_PACK : 0;
        if ((st = loader_open(&r->val, cfg->val_data, T, (uint32_t)cfg->model.vocab, cfg->tokenizer_hash, 0, vflags,
                              err)) != ST_OK)
            goto done;
    }
    cfg->sched.total = cfg->steps;
    if ((st = health_validate_options(&cfg->health, err)) != ST_OK) goto done;
    health_init(&r->health);
    scaler_init(&r->scaler, cfg->loss_scale, cfg->loss_scale_window);
    r->config = config_json(cfg);
    if ((st = run_par_check(r, err)) != ST_OK) goto done;

    /* Resume: find the checkpoint and check the config against it before allocating. */
    if (cfg->resume[0]) {
        if (!cfg->ckpt_dir[0] && !strcmp(cfg->resume, "auto")) {
            st = err_set(err, ST_ERR_INPUT, "--resume auto: expected --ckpt-dir to search, found none");
            goto done;
        }
        const char *where = strcmp(cfg->resume, "auto") ? cfg->resume : cfg->ckpt_dir;
        if ((st = ckpt_resolve(where, "auto", ckpt_path, sizeof ckpt_path, note, sizeof note, err)) != ST_OK) goto done;
        if (note[0] && !cfg->quiet) printf("resume: %s\n", note);
        if (!ckpt_path[0]) {
            if (strcmp(cfg->resume, "auto")) {
                st = err_set(err, ST_ERR_INPUT, "--resume %s: expected a checkpoint, found none", cfg->resume);
                goto done;
            }
            if (!cfg->quiet) printf("resume: no checkpoint in %s, starting from scratch\n", cfg->ckpt_dir);
        } else {
            if ((st = ckpt_read_meta(ckpt_path, &meta, err)) != ST_OK) goto done;
            char buf[512], report[2048] = "";
            snprintf(buf, sizeof buf, "%s", cfg->overrides);
            const char *ov[32];
            int nov = split_list(buf, ov, 32);
            if ((st = ckpt_check_config(meta.config, r->config, ov, nov, report, sizeof report, err)) != ST_OK) {
                err_prefix(err, "--resume %s", ckpt_path);
                goto done;
            }
            if (report[0] && !cfg->quiet) printf("resume: %s\n", report);
            if (meta.step >= cfg->steps) {
                st = err_set(err, ST_ERR_INPUT, "--steps %ld: the checkpoint %s is already at step %ld (extend --steps)",
                             cfg->steps, ckpt_path, meta.step);
                goto done;
            }
            start_step = meta.step;
        }
    }

    mm_set_threads(nt);
    if ((st = run_gpt_init(r, B, T, nt, err)) != ST_OK) goto done;
    if ((st = run_init_weights(r, NULL, err)) != ST_OK) goto done;
    r->g.dropout_seed = cfg->seed ^ 0xd509u;
    if (cfg->init_from[0] && !ckpt_path[0]) {
        if ((st = run_init_weights(r, cfg->init_from, err)) != ST_OK) {
            err_prefix(err, "--init-from");
            goto done;
        }
    }

    size_t total = r->g.layout.total;
    int nmom = optim_num_moments(&cfg->optim);
    r->moment_bytes = r->par ? 0 : total * sizeof(float); /* with parallelism the moments are par's */
    if (!r->par) r->m = mem_alloc(&r->mem, MEM_MOMENTS, r->moment_bytes);
    if (nmom == 2 && !r->par) r->v = mem_alloc(&r->mem, MEM_MOMENTS, r->moment_bytes);
    r->batch_ints = (size_t)k * B * T;
    r->inp = mem_alloc(&r->mem, MEM_DATA, r->batch_ints * sizeof(int32_t));
    r->tgt = mem_alloc(&r->mem, MEM_DATA, r->batch_ints * sizeof(int32_t));
    r->ranges = calloc((size_t)r->g.layout.ntensors, sizeof *r->ranges);
    r->step_ms = calloc((size_t)cfg->steps * 2 + 64, sizeof *r->step_ms);
    if ((!r->par && (!r->m || (nmom == 2 && !r->v))) || !r->inp || !r->tgt || !r->ranges || !r->step_ms) {
        st = err_set(err, ST_ERR_RUNTIME, "out of memory allocating optimizer state and batches");
        goto done;
    }
    for (int i = 0; i < r->g.layout.ntensors; i++) {
        const TensorInfo *t = &r->g.layout.tensors[i];
        r->ranges[i] = (OptimRange){t->offset, t->numel, t->decay};
    }
    if (ckpt_path[0]) {
        CkptMeta loaded;
        if ((st = run_load_ckpt(r, ckpt_path, &loaded, err)) != ST_OK) goto done;
        loader_set_state(&r->train, loaded.loader);
        r->start_attempt = start_step;
        const cJSON *hj = loaded.extra ? cJSON_GetObjectItemCaseSensitive(loaded.extra, "health") : NULL;
        const cJSON *bj = loaded.extra ? cJSON_GetObjectItemCaseSensitive(loaded.extra, "batches") : NULL;
        const cJSON *sj = loaded.extra ? cJSON_GetObjectItemCaseSensitive(loaded.extra, "skipped_batches") : NULL;
        if (cJSON_IsNumber(bj)) r->start_attempt = (long)bj->valuedouble;
        double sv;
        if (cfg->fp16 && ckpt_meta_scaler(&loaded, "scale", &sv)) {
            r->scaler.scale = (float)sv;
            if (ckpt_meta_scaler(&loaded, "good_steps", &sv)) r->scaler.good = (long)sv;
            if (ckpt_meta_scaler(&loaded, "skips", &sv)) r->scaler.skips = (long)sv;
        }
        if (hj && (st = health_state_from_json(&r->health, hj, cfg->health.window, err)) != ST_OK) {
            ckpt_meta_free(&loaded);
            err_prefix(err, "%s/state.json: health", ckpt_path);
            goto done;
        }
        for (const cJSON *x = sj ? sj->child : NULL; x && r->nskipped < SKIP_RECORD_MAX; x = x->next)
            r->skipped[r->nskipped++] = (long)x->valuedouble;
        ckpt_meta_free(&loaded);
        if (!cfg->quiet) printf("resume: continuing from %s (step %ld)\n", ckpt_path, start_step);
    }
    if (cfg->ckpt_dir[0] && cfg->ckpt_async && !r->par) { /* with parallelism saves are synchronous */
        CkptOptState opt = {r->m, r->v, NULL};
        if ((st = ckpt_async_init(&r->async, &r->g, &opt, &r->mem, err)) != ST_OK) goto done;
    }
    if (cfg->log_path[0]) {
        /* A resumed run appends to its log; a new run starts it. */
        r->log = fopen(cfg->log_path, start_step > 0 ? "a" : "w");
        if (!r->log) {
            st = err_set(err, ST_ERR_INPUT, "--log %s: cannot open for writing", cfg->log_path);
            goto done;
        }
    }
    res->start_step = start_step;

    /* MFU against the peak of the precision in use: bf16 dot products for bf16, FMA otherwise. */
    double peak = cfg->peak_flops;
    const char *peak_kind = "fp32 FMA";
    if (!(peak > 0) && cfg->bf16 && !cfg->fp16) {
        peak = peak_measure_bf16(nt, 200.0);
        peak_kind = "bf16 dot product";
    }
    if (!(peak > 0)) peak = peak_measure_fp32(nt, 200.0), peak_kind = "fp32 FMA";
    double fpt = layout_flops_per_token(&cfg->model, T);
    long long nparams = model_config_num_params(&cfg->model);
    res->num_params = nparams;
    long long batch_seqs = (long long)B * k * r->dp, batch_tokens = batch_seqs * T;
    double util = loader_utilization(&r->train);
    /* The plan of this run from the same layout function (docs/plan.md): its predicted step time
     * and memory are logged at start and compared with the measurements at the end. */
    PlanResult *plan = calloc(1, sizeof *plan);
    int have_plan = 0;
    if (plan) {
        PlanInput pi = plan_default_input();
        plan_model_from_config(&pi.model, &cfg->model);
        pi.micro_batch = B, pi.seq_len = T, pi.grad_accum = k, pi.threads = nt;
        pi.n_moments = nmom;
        pi.recompute = (PlanRecompute)cfg->recompute;
        if (cfg->have_hw) pi.hw = cfg->hw; /* a measured profile (plan --measure-hardware) */
        else pi.hw.peak_fp32 = peak;
        if (cfg->bf16 || cfg->fp16) {
            /* This trainer's mixed precision: a 2-byte weight copy beside the fp32 master and
             * moments, but fp32 gradients (and activations, which the exact mode counts); fp16 is
             * emulated, so its GEMMs run at the fp32 rate. */
            Err pe;
            plan_precision_preset(&pi.prec, cfg->fp16 ? "fp16" : "bf16", &pe);
            pi.prec.grad = 4;
            if (cfg->fp16) pi.prec.compute = PLAN_DTYPE_FP32;
        }
        Err perr;
        have_plan = plan_predict_step(&pi, plan, &perr) == ST_OK;
    }
    if (!cfg->quiet) {
        printf("model: L=%d NH=%d C=%d V=%d (padded %d) maxT=%d, %lld parameters\n", cfg->model.n_layer,
               cfg->model.n_head, cfg->model.n_embd, cfg->model.vocab, cfg->model.vocab_padded, cfg->model.max_seq,
               nparams);
        printf("data: %zu train tokens in %d shard(s), %llu rows of %d+1 (%s, utilization %.1f%%)%s\n",
               r->train.total_tokens, r->train.nshards, (unsigned long long)r->train.nwin, T,
               cfg->no_pack ? "one document per row, padding masked" : "packed", 100 * util,
               r->val.nshards ? "" : ", no validation data");
        printf("batch: micro-batch %d x seq %d x accumulation %d = %lld sequences = %lld tokens per step\n", B, T, k,
               batch_seqs, batch_tokens);
        printf("memory:");
        for (int mc = 0; mc < MEM_NCAT; mc++)
            if (r->mem.bytes[mc]) printf(" %s %.1f MiB", mem_category_name((MemCategory)mc), r->mem.bytes[mc] / 1048576.0);
        printf("\n");
        printf("compute: %.3g FLOP/token, peak %.1f GFLOP/s (%s), %d threads, %s\n", fpt, peak / 1e9,
               cfg->peak_flops > 0 ? "given" : peak_kind, nt, mm_backend_info());
        fflush(stdout);
    }
    {
        cJSON *o = event("start");
        cJSON_AddNumberToObject(o, "schema_version", METRICS_SCHEMA_VERSION);
        cJSON_AddItemReferenceToObject(o, "config", r->config);
        cJSON *b = cJSON_AddObjectToObject(o, "build");
        cJSON_AddStringToObject(b, "git_commit", build_git_commit());
        cJSON_AddStringToObject(b, "compiler", build_compiler());
        cJSON_AddStringToObject(b, "gemm", mm_backend_info());
        cJSON_AddNumberToObject(b, "threads", nt);
        if (cfg->argv_joined) cJSON_AddStringToObject(b, "command", cfg->argv_joined);
        cJSON *eb = cJSON_AddObjectToObject(o, "effective_batch");
        cJSON_AddNumberToObject(eb, "sequences", (double)batch_seqs);
        cJSON_AddNumberToObject(eb, "tokens", (double)batch_tokens);
        cJSON_AddNumberToObject(o, "num_params", (double)nparams);
        cJSON_AddNumberToObject(o, "flops_per_token", fpt);
        cJSON_AddNumberToObject(o, "peak_flops", peak);
        cJSON_AddStringToObject(o, "peak_source", cfg->peak_flops > 0 ? "given" : "measured");
        cJSON_AddStringToObject(o, "peak_kind", cfg->peak_flops > 0 ? "given" : peak_kind);
        cJSON_AddNumberToObject(o, "data_utilization", util);
        cJSON_AddNumberToObject(o, "resumed_from_step", (double)start_step);
        if (have_plan) {
            cJSON *pl = cJSON_AddObjectToObject(o, "plan");
            cJSON_AddNumberToObject(pl, "step_ms", plan->compute.step * 1e3);
            cJSON_AddNumberToObject(pl, "tokens_per_s", plan->compute.tokens_per_s);
            cJSON_AddNumberToObject(pl, "mfu", plan->compute.mfu);
            cJSON_AddNumberToObject(pl, "num_params", (double)plan->n_params);
            cJSON_AddNumberToObject(pl, "memory_total", plan->mem.total);
        }
        cJSON *mp = cJSON_AddObjectToObject(o, "memory_planned");
        size_t plan_b[MEM_NCAT];
        layout_memory_plan(&cfg->model, B, T, nt, cfg->recompute, cfg->fp16 ? 2 : cfg->bf16 ? 1 : 0, nmom, plan_b);
        for (int c = 0; c < MEM_NCAT; c++)
            if (c != MEM_DATA && c != MEM_COMM && c != MEM_CKPT_STAGING)
                cJSON_AddNumberToObject(mp, mem_category_name((MemCategory)c), (double)plan_b[c]);
        if (r->par) {
            size_t pb[MEM_NCAT];
            run_par_plan(r, pb);
            cJSON_ReplaceItemInObject(mp, "parameters", cJSON_CreateNumber((double)pb[MEM_PARAMS]));
            cJSON_ReplaceItemInObject(mp, "master_weights", cJSON_CreateNumber((double)pb[MEM_MASTER]));
            cJSON_ReplaceItemInObject(mp, "gradients", cJSON_CreateNumber((double)pb[MEM_GRADS]));
            cJSON_ReplaceItemInObject(mp, "optimizer_moments", cJSON_CreateNumber((double)pb[MEM_MOMENTS]));
        }
        log_event(r->log, o);
    }
    {
        cJSON *o = event("memory");
        cJSON *mm = cJSON_AddObjectToObject(o, "measured");
        for (int c = 0; c < MEM_NCAT; c++)
            cJSON_AddNumberToObject(mm, mem_category_name((MemCategory)c), (double)r->mem.bytes[c]);
        if (r->par) run_par_memory(r, o);
        log_event(r->log, o);
    }

    struct sigaction old_term, old_int;
    if (cfg->handle_signals) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_stop_signal;
        sigemptyset(&sa.sa_mask);
        g_stop_signal = 0;
        sigaction(SIGTERM, &sa, &old_term);
        sigaction(SIGINT, &sa, &old_int);
    }

    double ms_total = 0, first_ckpt_ms = 0;
    long nmeasured = 0, step_cap = cfg->steps * 2 + 64;
    /* `step` counts optimizer updates (Adam's t, the schedule, checkpoints); `attempt` counts the
     * batches consumed. They differ only after health actions skipped or rolled back updates. */
    long step = start_step, attempt = r->start_attempt;
    while (step < cfg->steps) {
        attempt++;
        long next = step + 1;
        if (attempt >= cfg->debug_drop_first && attempt <= cfg->debug_drop_last) { /* test hook */
            loader_step_done(&r->train, r->dp, B, k);
            continue;
        }
        double t0 = timer_ms();
        /* Data: the k micro-batches of this step, then the unmasked-token count of the whole step
         * (the loss denominator, so accumulation is exact). */
        for (int j = 0; j < k; j++)
            loader_fill_rank(&r->train, r->dp_rank, r->dp, j, B, k, r->inp + (size_t)j * B * T,
                             r->tgt + (size_t)j * B * T);
        loader_step_done(&r->train, r->dp, B, k);
        if (attempt == cfg->debug_spike_step) /* test hook: a corrupted batch (random targets) */
            for (size_t i = 0; i < r->batch_ints; i++)
                r->tgt[i] = (int32_t)rng_below(99, 0xbad, i, (uint64_t)cfg->model.vocab);
        long ntok = 0;
        for (size_t i = 0; i < r->batch_ints; i++) ntok += r->tgt[i] >= 0;
        int par_stop = 0;
        double comm_ms0 = cfg->comm ? cfg->comm->stats.wait_ms_total : 0, comm_b0 = cfg->comm ? comm_bytes_total(cfg->comm) : 0;
        if (r->par && (st = run_par_tokens(r, &ntok, &par_stop, err)) != ST_OK) goto done_signals;
        double t1 = timer_ms();
        if (r->par) par_step_begin(r->par, k, next);
        else gpt_overwrite_grads(&r->g); /* the first micro-batch writes the gradients, the others add */
        r->g.ms_fwd = r->g.ms_bwd = 0;
        double loss_sum = 0;
        float lscale = cfg->fp16 ? r->scaler.scale : 1.0f; /* fp16: the loss (so every gradient) is scaled */
        float dscale = ntok > 0 ? lscale / (float)ntok : 0.0f;
        for (int j = 0; j < k; j++) {
            size_t off = (size_t)j * B * T;
            if (r->par) par_micro_begin(r->par, j);
            /* Dropout counter: the micro-batch's index in the global step (rank-major), as one process. */
            loss_sum += gpt_forward(&r->g, r->inp + off, r->tgt + off, B, T, dscale, 1,
                                    ((uint64_t)(attempt - 1) * r->dp + r->dp_rank) * k + j);
            gpt_backward(&r->g);
        }
        if (attempt == cfg->debug_nan_step && r->g.grads) r->g.grads[r->g.layout.tensors[2].offset] = NAN; /* test hook */
        double par_norm = 0;
        if (r->par && (st = run_par_reduce(r, &loss_sum, &par_norm, err)) != ST_OK) goto done_signals;
        double loss = ntok > 0 ? loss_sum / ntok : 0.0;
        double t2 = timer_ms();
        double norm = r->par ? par_norm : optim_l2_norm(r->g.grads, total, nt);
        int overflow = 0;
        if (cfg->fp16) {
            /* Loss scaling: inf/nan in the scaled gradients means the scale overflowed fp16 — skip
             * the step and halve; otherwise unscale the norm (the update is unscaled below). */
            float before = r->scaler.scale;
            overflow = !isfinite(norm);
            if (!overflow) norm /= lscale;
            scaler_update(&r->scaler, !overflow);
            if (overflow) {
                cJSON *oo = event("overflow");
                cJSON_AddNumberToObject(oo, "step", (double)next);
                cJSON_AddNumberToObject(oo, "batch", (double)attempt);
                cJSON_AddNumberToObject(oo, "loss_scale", before);
                cJSON_AddNumberToObject(oo, "new_loss_scale", r->scaler.scale);
                log_event(r->log, oo);
                res->overflows++;
                if (!cfg->quiet)
                    printf("fp16: gradients overflowed at step %ld with loss scale %g: step skipped, scale %g\n", next,
                           before, r->scaler.scale);
            }
        }
        float scale = optim_clip_scale(norm, cfg->grad_clip);
        float lr = sched_lr(&cfg->sched, next);

        /* Health: spikes, non-finite values and stalls decide whether this update happens. A loss
         * scaler overflow is not the model's divergence: it skips without touching the detectors. */
        HealthVerdict hv;
        if (overflow) {
            memset(&hv, 0, sizeof hv);
            hv.action = HEALTH_ACT_SKIP;
        } else {
            hv = health_step(&r->health, &cfg->health, next, loss, norm);
        }
        if (hv.loss_spike || hv.gnorm_spike || hv.nonfinite) {
            cJSON *os = event(hv.nonfinite ? "nonfinite" : "spike");
            cJSON_AddNumberToObject(os, "step", (double)next);
            cJSON_AddNumberToObject(os, "batch", (double)attempt);
            cJSON_AddStringToObject(os, "metric", hv.gnorm_spike && !hv.loss_spike ? "grad_norm" : "loss");
            cJSON_AddNumberToObject(os, "value", hv.gnorm_spike && !hv.loss_spike ? norm : loss);
            cJSON_AddNumberToObject(os, "median", hv.gnorm_spike && !hv.loss_spike ? hv.gnorm_median : hv.loss_median);
            cJSON_AddNumberToObject(os, "z", hv.gnorm_spike && !hv.loss_spike ? hv.gnorm_z : hv.loss_z);
            cJSON_AddStringToObject(os, "action", health_action_name(hv.action));
            cJSON_AddNumberToObject(os, "tokens_seen", (double)attempt * batch_tokens);
            log_event(r->log, os);
            res->spikes++;
            if (!cfg->quiet)
                printf("health: %s at step %ld (batch %ld): %s -> %s\n", hv.nonfinite ? "non-finite values" : "spike",
                       next, attempt, hv.why, health_action_name(hv.action));
        }
        if (hv.stall) {
            cJSON *os = event("stall");
            cJSON_AddNumberToObject(os, "step", (double)next);
            cJSON_AddStringToObject(os, "why", hv.why);
            log_event(r->log, os);
            if (!cfg->quiet) printf("health: stall at step %ld: %s\n", next, hv.why);
        }
        if (hv.action == HEALTH_ACT_STOP) {
            char last_good[4096] = "", note2[256];
            Err e2;
            if (cfg->ckpt_dir[0]) ckpt_resolve(cfg->ckpt_dir, "auto", last_good, sizeof last_good, note2, sizeof note2, &e2);
            st = err_set(err, ST_ERR_RUNTIME, "step %ld: %s; the weights were not updated; last good checkpoint: %s", next,
                         hv.why, last_good[0] ? last_good : "none (no --ckpt-dir)");
            goto done_signals;
        }
        int rolled_back = 0;
        if (hv.action == HEALTH_ACT_ROLLBACK) {
            char path[4096] = "", note2[256];
            if (cfg->ckpt_dir[0] &&
                ckpt_resolve(cfg->ckpt_dir, "auto", path, sizeof path, note2, sizeof note2, err) == ST_OK && path[0]) {
                /* Reload the last checkpoint; the loader keeps its position, so the batches that led
                 * to the spike are skipped. The health windows stay as they are (the cap counts on). */
                CkptMeta back;
                LoaderState keep = loader_get_state(&r->train);
                if ((st = run_load_ckpt(r, path, &back, err)) != ST_OK) goto done_signals;
                loader_set_state(&r->train, keep);
                if (!cfg->quiet) printf("health: rolled back to %s (step %ld)\n", path, back.step);
                cJSON *ob = event("rollback");
                cJSON_AddNumberToObject(ob, "step", (double)next);
                cJSON_AddNumberToObject(ob, "to_step", (double)back.step);
                cJSON_AddNumberToObject(ob, "batch", (double)attempt);
                cJSON_AddStringToObject(ob, "checkpoint", path);
                log_event(r->log, ob);
                step = back.step;
                ckpt_meta_free(&back);
                res->rollbacks++;
                rolled_back = 1;
            } else {
                hv.action = HEALTH_ACT_SKIP; /* nothing to roll back to: skip the update instead */
                if (!cfg->quiet) printf("health: no checkpoint to roll back to, skipping the update instead\n");
            }
        }
        if (hv.action == HEALTH_ACT_SKIP) {
            cJSON *ok = event("skip");
            cJSON_AddNumberToObject(ok, "step", (double)next);
            cJSON_AddNumberToObject(ok, "batch", (double)attempt);
            log_event(r->log, ok);
            if (r->nskipped < SKIP_RECORD_MAX) r->skipped[r->nskipped++] = attempt;
            res->skips++;
        }
        int updated = hv.action == HEALTH_ACT_NONE || hv.action == HEALTH_ACT_LOG;
        if (updated) {
            if (r->par) {
                par_optim_step(r->par, &cfg->optim, next, lr, scale / lscale);
                if ((st = par_params_sync(r->par, err)) != ST_OK) goto done_signals;
            } else {
                /* Mixed precision: the working copy follows the fp32 master in the same pass. */
                OptimLowp lk = r->g.fp16 ? OPTIM_LOWP_FP16 : r->g.bf16 ? OPTIM_LOWP_BF16 : OPTIM_LOWP_NONE;
                optim_step_lowp(&cfg->optim, r->g.params, r->g.grads, r->m, r->v, r->ranges, r->g.layout.ntensors,
                                next, lr, scale / lscale, r->g.params_lp, lk, nt);
            }
            step = next;
        }
        double t3 = timer_ms();
        int last = updated && step == cfg->steps;
        int stopping = (r->par ? par_stop : g_stop_signal != 0) || (cfg->stop_after > 0 && step >= cfg->stop_after && !last);
        double ckpt_ms = 0;
        CkptSaveInfo info;
        int due = updated && cfg->ckpt_every > 0 && step % cfg->ckpt_every == 0;
        if (cfg->ckpt_dir[0] && !rolled_back && (last || stopping || due)) {
            if ((st = save_checkpoint(r, step, attempt, &ckpt_ms, &info, err)) != ST_OK) goto done_signals;
            cJSON *oc = event("ckpt");
            cJSON_AddNumberToObject(oc, "step", (double)step);
            cJSON_AddStringToObject(oc, "mode", r->async ? "async" : "sync");
            cJSON_AddNumberToObject(oc, "time_ms", ckpt_ms);
            if (!r->async) {
                cJSON_AddStringToObject(oc, "path", info.path);
                cJSON_AddNumberToObject(oc, "bytes", (double)info.bytes);
                cJSON_AddNumberToObject(oc, "pruned", info.pruned);
            }
            log_event(r->log, oc);
            /* Young/Daly needs the full write time: for async saves, the background write's. */
            if (!first_ckpt_ms && !r->async) first_ckpt_ms = info.ms_write + info.ms_prune;
            if (!first_ckpt_ms && r->async && cfg->mtbf_hours > 0) {
                CkptSaveInfo wi;
                if ((st = ckpt_async_wait(r->async, &wi, err)) != ST_OK) goto done_signals;
                first_ckpt_ms = wi.ms_write + wi.ms_prune;
            }
        }
        double dt = timer_ms() - t0;
        if (attempt == r->start_attempt + 1) {
            /* After the first step every buffer and the libraries' scratch are live: measured
             * memory by category, and resident anonymous memory above the start of the run. */
            size_t rss = mem_rss_anon(), planned = 0;
            cJSON *om = event("memory");
            cJSON_AddNumberToObject(om, "step", (double)next);
            cJSON *mm = cJSON_AddObjectToObject(om, "measured");
            for (int c = 0; c < MEM_NCAT; c++) {
                cJSON_AddNumberToObject(mm, mem_category_name((MemCategory)c), (double)r->mem.bytes[c]);
                planned += r->mem.bytes[c];
            }
            cJSON_AddNumberToObject(om, "allocated_total", (double)planned);
            cJSON_AddNumberToObject(om, "rss_anon_above_baseline", rss > rss_base ? (double)(rss - rss_base) : 0.0);
            cJSON_AddNumberToObject(om, "rss_unaccounted", rss > rss_base + planned ? (double)(rss - rss_base - planned) : 0.0);
            log_event(r->log, om);
        }
        if (nmeasured < step_cap) r->step_ms[nmeasured++] = dt;
        ms_total += dt;
        double tok_s = batch_tokens / (dt * 1e-3);
        double mfu = fpt * tok_s / peak;
        if (attempt == r->start_attempt + 1) res->first_loss = loss;
        res->last_loss = loss;
        res->steps_done = step;
        if (!cfg->quiet) {
            printf("step %5ld/%ld | loss %.4f | lr %.2e | norm %.3f -> %.3f | %7.1f ms | %6.0f tok/s | MFU %4.1f%%%s%s\n",
                   next, cfg->steps, loss, lr, norm, norm * scale, dt, tok_s, 100 * mfu, ckpt_ms > 0 ? " | ckpt" : "",
                   updated ? "" : " | not applied");
            fflush(stdout);
        }
        cJSON *o = event("step");
        cJSON_AddNumberToObject(o, "step", (double)next);
        cJSON_AddNumberToObject(o, "batch", (double)attempt);
        cJSON_AddNumberToObject(o, "loss", loss);
        cJSON_AddNumberToObject(o, "lr", lr);
        cJSON_AddNumberToObject(o, "grad_norm", norm);
        cJSON_AddNumberToObject(o, "grad_norm_clipped", norm * scale);
        cJSON_AddBoolToObject(o, "applied", updated);
        if (cfg->fp16) cJSON_AddNumberToObject(o, "loss_scale", lscale);
        cJSON_AddNumberToObject(o, "tokens", (double)ntok);
        cJSON_AddNumberToObject(o, "tokens_seen", (double)batch_tokens * attempt);
        cJSON_AddNumberToObject(o, "tokens_per_s", tok_s);
        cJSON_AddNumberToObject(o, "mfu", mfu);
        cJSON *tm = cJSON_AddObjectToObject(o, "time_ms");
        cJSON_AddNumberToObject(tm, "total", dt);
        cJSON_AddNumberToObject(tm, "data", t1 - t0);
        cJSON_AddNumberToObject(tm, "forward", r->g.ms_fwd);
        cJSON_AddNumberToObject(tm, "backward", (t2 - t1) - r->g.ms_fwd);
        cJSON_AddNumberToObject(tm, "comm", cfg->comm ? cfg->comm->stats.wait_ms_total - comm_ms0 : 0);
        if (r->par) run_par_step_record(r, o, dt, comm_bytes_total(cfg->comm) - comm_b0);
        cJSON_AddNumberToObject(tm, "optimizer", t3 - t2);
        cJSON_AddNumberToObject(tm, "checkpoint", ckpt_ms);
        log_event(r->log, o);

        /* Validation: every val_every steps, at the end, and right after a resume (so a bad resume
         * shows at once). */
        int after_resume = start_step > 0 && attempt == r->start_attempt + 1;
        int val_due = updated && cfg->val_every > 0 && (step % cfg->val_every == 0 || step == 1);
        if (r->val.nshards && (val_due || last || after_resume || stopping)) {
            double tv = timer_ms();
            double vl = validate_loss(&r->g, &r->val, cfg->val_batches, r->inp, r->tgt);
            double vms = timer_ms() - tv;
            if (isnan(res->first_val)) res->first_val = vl;
            res->last_val = vl;
            if (!cfg->quiet) {
                printf("val   %5ld | loss %.4f | perplexity %.2f | %.0f ms\n", step, vl, exp(vl), vms);
                fflush(stdout);
            }
            cJSON *ov = event("val");
            cJSON_AddNumberToObject(ov, "step", (double)step);
            cJSON_AddNumberToObject(ov, "loss", vl);
            cJSON_AddNumberToObject(ov, "perplexity", exp(vl));
            cJSON_AddNumberToObject(ov, "time_ms", vms);
            log_event(r->log, ov);
        }
        if (cfg->sample_every > 0 && updated && (step % cfg->sample_every == 0 || last)) log_sample(r, step, r->log);
        if (stopping) {
            res->preempted = 1;
            if (!cfg->quiet) {
                if (g_stop_signal) printf("stopped by signal %d after step %ld", (int)g_stop_signal, step);
                else printf("stopped after step %ld (--stop-after)", step);
                printf("%s\n", cfg->ckpt_dir[0] ? "; checkpoint saved, resume with --resume auto"
                                                  : " (no --ckpt-dir: not saved)");
            }
            break;
        }
    }
    if (r->async) {
        CkptSaveInfo info;
        if ((st = ckpt_async_wait(r->async, &info, err)) != ST_OK) goto done_signals;
        if (!cfg->quiet && info.path[0])
            printf("checkpoint: last asynchronous write %s took %.0f ms in the background\n", info.path,
                   info.ms_write);
    }
    res->final_loss_scale = r->scaler.scale;
    res->median_step_ms = median(r->step_ms + (nmeasured > 1), nmeasured - (nmeasured > 1));
    res->tokens_per_s = batch_tokens / (res->median_step_ms * 1e-3);
    if (cfg->mtbf_hours > 0 && first_ckpt_ms > 0 && !cfg->quiet) {
        /* Young/Daly: the interval minimizing expected lost work + checkpoint overhead. */
        double interval_s = sqrt(2.0 * first_ckpt_ms * 1e-3 * cfg->mtbf_hours * 3600.0);
        printf("checkpoint interval for MTBF %.1f h (Young/Daly sqrt(2 * %.2f s * MTBF)): %.0f s = every %.0f steps\n",
               cfg->mtbf_hours, first_ckpt_ms * 1e-3, interval_s, interval_s / (res->median_step_ms * 1e-3));
    }
    if (cfg->out_dir[0] && !res->preempted) {
        if (r->par) st = run_save_par(r, NULL, NULL, NULL, cfg->out_dir, err);
        else st = st_save_hf(&r->g, cfg->out_dir, cfg->tokenizer, err);
        if (st != ST_OK) goto done_signals;
        if (!cfg->quiet) printf("saved weights to %s/model.safetensors\n", cfg->out_dir);
    }
    {
        cJSON *o = event("end");
        cJSON_AddNumberToObject(o, "steps", (double)res->steps_done);
        cJSON_AddBoolToObject(o, "preempted", res->preempted);
        cJSON_AddNumberToObject(o, "spikes", (double)res->spikes);
        cJSON_AddNumberToObject(o, "skips", (double)res->skips);
        cJSON_AddNumberToObject(o, "rollbacks", (double)res->rollbacks);
        if (cfg->fp16) {
            cJSON_AddNumberToObject(o, "overflows", (double)res->overflows);
            cJSON_AddNumberToObject(o, "loss_scale", r->scaler.scale);
        }
        cJSON_AddNumberToObject(o, "final_loss", res->last_loss);
        cJSON_AddNumberToObject(o, "final_val_loss", res->last_val);
        cJSON_AddNumberToObject(o, "median_step_ms", res->median_step_ms);
        cJSON_AddNumberToObject(o, "tokens_per_s", res->tokens_per_s);
        cJSON_AddNumberToObject(o, "wall_s", ms_total * 1e-3);
        if (have_plan) {
            cJSON_AddNumberToObject(o, "planned_step_ms", plan->compute.step * 1e3);
            cJSON_AddNumberToObject(o, "step_ms_over_plan", res->median_step_ms / (plan->compute.step * 1e3));
        }
        cJSON *mm = cJSON_AddObjectToObject(o, "memory_measured");
        for (int c = 0; c < MEM_NCAT; c++)
            cJSON_AddNumberToObject(mm, mem_category_name((MemCategory)c), (double)r->mem.peak[c]);
        log_event(r->log, o);
    }
    if (have_plan && !cfg->quiet)
        printf("plan: predicted %.1f ms/step, measured median %.1f ms/step (%.2fx)\n", plan->compute.step * 1e3,
               res->median_step_ms, res->median_step_ms / (plan->compute.step * 1e3));
    if (!cfg->quiet)
        printf("done: %ld steps, median %.1f ms/step, %.0f tokens/s\n", res->steps_done, res->median_step_ms,
               res->tokens_per_s);
done_signals:
    free(plan);
    if (cfg->handle_signals) {
        sigaction(SIGTERM, &old_term, NULL);
        sigaction(SIGINT, &old_int, NULL);
    }
done:
    ckpt_meta_free(&meta);
    run_free(r);
    return st;
}
