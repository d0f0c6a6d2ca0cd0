/* train.c — the trainer: setup, the step loop, and the end of a run.
 *
 * Read it top-down as llm.c's loop. train_run sets a run up (run_setup: the grid, the data, the
 * resume decision, the model and its parallel state, the log and the plan), then repeats
 * train_step, whose stages each have a function of their own:
 *
 *   step_data           the step's k micro-batches and the global count of their target tokens
 *   step_micro_batches  forward + backward of each micro-batch (gradients accumulate)
 *   step_grads          gradient collectives done, global loss and norm, fp16 overflow, clip
 *   step_health         spike / non-finite / stall detectors decide: update, skip, roll back, stop
 *   step_update         the optimizer (and ZeRO's parameter all-gather)
 *   step_checkpoint     a checkpoint when due, preempted or at the end
 *   step_report         the progress line and the step record (events.h has the schema)
 *   step_validate       validation and generation samples at their cadence
 *
 * One process is the trivial grid: dp = 1 over a single-process Comm, with the same parallel
 * state (src/parallel) as any data-parallel run, so there is one norm and one optimizer path. */
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
#include "ckpt/shard.h"
#include "core/mem.h"
#include "core/peak.h"
#include "core/progress.h"
#include "core/stats.h"
#include "core/rng.h"
#include "core/timer.h"
#include "data/bpe.h"
#include "data/loader.h"
#include "model/backend.h"
#include "model/gpt.h"
#include "model/infer.h"
#include "model/layout.h"
#include "model/matmul.h"
#include "parallel/parallel.h"
#include "parallel/pp.h"
#include "parallel/schedule.h"
#include "plan/plan.h"
#include "train/events.h"
#include "train/noise.h"

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
    snprintf(c.device, sizeof c.device, "cpu");
    c.val_every = 100, c.val_batches = 10;
    c.keep_last = 3;
    c.sample_tokens = 64;
    health_default_options(&c.health);
    c.loss_scale = 65536.0f, c.loss_scale_window = 1000;
    return c;
}

/* "42s", "3m05s", "2h07m": durations on the progress line. */
static void fmt_duration(double s, char *buf, size_t len) {
    if (!(s >= 0) || s > 1e8) snprintf(buf, len, "?");
    else if (s < 60) snprintf(buf, len, "%.0fs", s);
    else if (s < 3600) snprintf(buf, len, "%dm%02ds", (int)(s / 60), (int)s % 60);
    else snprintf(buf, len, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
}

static Status validate(const TrainConfig *c, Err *err) {
    const Backend *be;
    if (backend_find(c->device, &be, err) != ST_OK) return ST_ERR_INPUT;
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
    if (!(c->optim.muon_lr >= 0)) return err_set(err, ST_ERR_INPUT, "--muon-lr: expected a value >= 0, found %g", c->optim.muon_lr);
    if (!(c->optim.muon_momentum >= 0 && c->optim.muon_momentum < 1))
        return err_set(err, ST_ERR_INPUT, "--muon-momentum: expected a value in [0, 1), found %g", c->optim.muon_momentum);
    if (c->optim.shampoo_block < 1)
        return err_set(err, ST_ERR_INPUT, "--shampoo-block: expected an integer >= 1, found %d", c->optim.shampoo_block);
    if (c->optim.precond_every < 1)
        return err_set(err, ST_ERR_INPUT, "--precond-every: expected an integer >= 1, found %d", c->optim.precond_every);
    if (!(c->optim.shampoo_eps > 0))
        return err_set(err, ST_ERR_INPUT, "--shampoo-eps: expected a value > 0, found %g", c->optim.shampoo_eps);
    if (c->optim.kind == OPT_SHAMPOO && c->ckpt_async)
        return err_set(err, ST_ERR_INPUT, "--ckpt-async with --optimizer shampoo: expected synchronous checkpoints "
                       "(the background writer does not copy Shampoo's block state), found --ckpt-async");
    if (!(c->optim.sophia_gamma > 0))
        return err_set(err, ST_ERR_INPUT, "--sophia-gamma: expected a value > 0, found %g", c->optim.sophia_gamma);
    if (c->optim.hess_every < 1)
        return err_set(err, ST_ERR_INPUT, "--hess-every: expected an integer >= 1, found %d", c->optim.hess_every);
    if (c->optim.kind == OPT_SOPHIA && (c->tp > 1 || c->pp > 1))
        return err_set(err, ST_ERR_INPUT, "--optimizer sophia: expected --tp 1 and --pp 1 (its label sampling needs "
                       "the whole vocabulary's softmax and one pass through the model; not implemented across tp "
                       "slices or pipeline stages), found --tp %d --pp %d", c->tp > 1 ? c->tp : 1, c->pp > 1 ? c->pp : 1);
    if (optim_is_matrix(c->optim.kind) && (c->tp > 1 || c->pp > 1))
        return err_set(err, ST_ERR_INPUT, "--optimizer %s: expected --tp 1 and --pp 1 (it updates whole "
                       "matrices; gathering tp slices or pipeline stages is not implemented), found --tp %d --pp %d",
                       optim_kind_name(c->optim.kind), c->tp > 1 ? c->tp : 1, c->pp > 1 ? c->pp : 1);
    if (c->val_batches < 1)
        return err_set(err, ST_ERR_INPUT, "--val-batches: expected a positive integer, found %d", c->val_batches);
    if (c->val_every < 0) return err_set(err, ST_ERR_INPUT, "--val-every: expected >= 0, found %d", c->val_every);
    if (!c->data[0]) return err_set(err, ST_ERR_INPUT, "--data: expected a token shard path or glob, found none");
    return ST_OK;
}

/* Mean loss over `batches` sequential micro-batches of the validation stream. With a pipeline
 * (pr non-NULL) the micro-batches go through the stages and the last stage's sum is shared over
 * the world (NaN everywhere if a message failed). */
static double validate_loss(Gpt *g, Loader *val, int batches, int32_t *inp, int32_t *tgt, PpRun *pr, Comm *c) {
    int B = g->s.B, T = g->s.T;
    uint64_t avail = val->nwin / (uint64_t)B;
    if ((uint64_t)batches > avail) batches = (int)(avail ? avail : 1);
    double sum = 0, count = 0;
    for (int j = 0; j < batches; j++) {
        int rows = val->nwin < (uint64_t)B ? (int)val->nwin : B;
        loader_fill(val, (uint64_t)j * B, rows, inp, tgt);
        if (pr) {
            double ls = 0;
            Err e;
            if (pp_eval(pr, inp, tgt, rows, T, &ls, &e) != ST_OK) ls = NAN;
            sum += c->pp_rank == c->pp - 1 && c->tp_rank == 0 && c->dp_rank == 0 ? ls : 0.0;
        } else {
            sum += gpt_forward(g, inp, tgt, rows, T, 0.0f, 0, 0);
        }
        for (int i = 0; i < rows * T; i++) count += tgt[i] >= 0;
    }
    if (pr) {
        Err e;
        if (comm_allreduce_f64(c, &sum, 1, COMM_SUM, &e) != ST_OK) sum = NAN;
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

/* ================================================================ the run's state */

/* Everything a run owns; released by run_free in one place. */
typedef struct {
    TrainConfig cfg;
    TrainResult *res;
    MemStats mem;
    Loader train, val;
    Gpt g;
    ParamLayout full;           /* sliced: the whole network's layout (checkpoints hold full shapes) */
    Par *par;                   /* parameters' shards, gradient collectives, moments, the update */
    Comm *comm;                 /* the process grid: the caller's, or own_comm */
    Comm *own_comm;             /* a single-process grid for callers that pass none */
    int dp, dp_rank, world;
    int tp, tp_rank;            /* tensor-parallel group: this rank holds slice tp_rank of tp */
    int pp, pp_rank;            /* pipeline: this rank runs stage pp_rank of pp */
    int sliced;                 /* tp > 1 or pp > 1: this rank's layout is not the whole network's */
    int local;                  /* dp 1, tp 1, pp 1 at ZeRO 0: every tensor is whole on this rank */
    PipeSchedule sched;         /* pp > 1: the schedule (checked before allocation) */
    StageBlocks stage;          /* pp > 1: this rank's chunks of blocks */
    int slots;                  /* pp > 1: activation sets (the schedule's peak in flight here) */
    int sched_first[LAYOUT_MAX_CHUNKS * SCHED_MAX_P], sched_last[LAYOUT_MAX_CHUNKS * SCHED_MAX_P]; /* per virtual stage */
    int peak_inflight[SCHED_MAX_P];
    PpRun *pp_run;
    PpStats pps;                /* the last step's pipeline timings */
    int32_t *inp, *tgt;         /* the step's k micro-batches, (k, B, T) */
    size_t batch_ints;
    float *hess_u;              /* Sophia: the label draws of the Hessian pass, like tgt */
    int32_t *hess_y;            /* Sophia: the labels drawn */
    double *step_ms;            /* wall time of each step, for the medians */
    long nmeasured, step_cap;
    double *by_rank;            /* world doubles: one value per rank, for per-rank records */
    double *by_rank2;
    double *pp_idle;            /* world doubles: each rank's pipeline idle time of the step */
    /* Each pipeline stage's mean forward, backward and weight-pass time (ms per op) and its count
     * of each op in the step (the first rank of the stage's): the step record's by-stage figures. */
    double pp_stage_ms[3][SCHED_MAX_P], pp_stage_ops[3][SCHED_MAX_P];
    EventLog log;
    CkptAsync *async;           /* one process: the background writer of the whole state */
    CkptShardAsync *sasync;     /* several ranks: each rank's background writer (ckpt/shard.h) */
    unsigned char *ckpt_write;  /* several ranks: which tensors of its layout this rank writes */
    cJSON *config;
    HealthState health;         /* spike / divergence detectors (train/health.h) */
    NoiseScale noise;           /* the gradient noise scale's averages (train/noise.h) */
    int noise_on;               /* estimated: pp 1 and two batch sizes (dp >= 2 or grad_accum >= 2) */
    double *noise_rep;          /* dp doubles: each replica's first-micro-batch |G_small|² of the step */
    LossScaler scaler;          /* fp16 dynamic loss scaling */

    /* Resume: decided before allocation, applied after. */
    char resume_path[4096];     /* the checkpoint to continue from ("" = a fresh start) */
    char resume_note[2048];     /* what --resume found, for the console and the start record */
    long start_step;            /* optimizer steps done before this run */
    long start_attempt;         /* batches consumed before this run */
#define SKIP_RECORD_MAX 1024
    long skipped[SKIP_RECORD_MAX]; /* batches whose update was skipped (logged and checkpointed) */
    int nskipped;

    /* --log-layer-stats: the parameters before the update and the norms per segment. */
    float *ls_prev;
    int ls_nseg;
    double *ls_grad, *ls_weight, *ls_update;

    /* Accounting fixed at start. */
    long long batch_seqs, batch_tokens;
    double fpt;                 /* model FLOPs per token */
    double peak, peak_job;      /* this rank's peak FLOP/s, and the sum over ranks (MFU's denominator) */
    const char *peak_kind;
    PlanResult plan;
    int have_plan;
    size_t rss_base;            /* resident anonymous memory before the run allocated anything */

    /* Progress. `step` counts optimizer updates (Adam's t, the schedule, checkpoints); `attempt`
     * counts batches consumed. They differ only after health actions skipped or rolled back. */
    long step, attempt;
    double ms_total, first_ckpt_ms, loop_t0;
    int signals;
    struct sigaction old_term, old_int;
    /* A checkpoint save in progress: the optimizer's state outside the layout (par_get_extra_state),
     * NULL when it has none. */
    float *xstate;
    size_t xstate_n;
} Run;

static void run_free(Run *r) {
    if (r->async) {
        Err e;
        ckpt_async_wait(r->async, NULL, &e);
        ckpt_async_free(r->async);
    }
    ckpt_shard_async_free(r->sasync); /* an uncommitted save stays invisible (run_finish commits it) */
    free(r->ckpt_write);
    events_close(&r->log);
    free(r->step_ms);
    free(r->by_rank);
    free(r->by_rank2);
    free(r->pp_idle);
    free(r->noise_rep);
    free(r->ls_prev);
    free(r->ls_grad);
    mem_free(&r->mem, MEM_DATA, r->inp, r->batch_ints * sizeof(int32_t));
    mem_free(&r->mem, MEM_DATA, r->tgt, r->batch_ints * sizeof(int32_t));
    mem_free(&r->mem, MEM_DATA, r->hess_u, r->hess_u ? r->batch_ints * sizeof(float) : 0);
    mem_free(&r->mem, MEM_DATA, r->hess_y, r->hess_y ? r->batch_ints * sizeof(int32_t) : 0);
    pp_free(r->pp_run);
    sched_free(&r->sched);
    par_free(r->par);
    gpt_free(&r->g);
    layout_free(&r->full);
    loader_close(&r->train);
    loader_close(&r->val);
    cJSON_Delete(r->config);
    comm_finalize(r->own_comm);
}

static double comm_bytes_total(const Comm *c) {
    double b = 0;
    for (int k = 0; k < COMM_NKIND; k++) b += (double)c->stats.bytes[k];
    return b;
}

/* ================================================================ setup */

/* Pipeline: the schedule (built, then simulated with unit times, which refuses an incomplete or
 * deadlocking one) and the split of the blocks into pp·v virtual stages, before any allocation. */
static Status setup_pipeline(Run *r, int pp, Err *err) {
    TrainConfig *c = &r->cfg;
    int v = c->interleave > 0 ? c->interleave : 1;
    if (!c->pp_schedule[0]) /* not given: plan's rule, so both price and run the same schedule */
        snprintf(c->pp_schedule, sizeof c->pp_schedule, "%s", sched_type_name(sched_default_type(pp > 1 ? v : 1)));
    if (pp == 1) {
        if (v > 1 || c->pp_layers[0] || strcmp(c->pp_schedule, "1f1b") != 0 || c->pp_print_schedule)
            return err_set(err, ST_ERR_INPUT, "--pp-schedule/--pp-layers/--interleave/--pp-print-schedule: expected "
                           "--pp > 1, found --pp 1");
        /* The trivial schedule, F0 B0 F1 B1 …: the step walks it like a pipeline's (pp.h). */
        return sched_build(&r->sched, SCHED_1F1B, 1, c->grad_accum, 1, err);
    }
    SchedType type;
    Status st = sched_type_parse(c->pp_schedule, &type, err);
    if (st != ST_OK) return st;
    if ((st = sched_build(&r->sched, type, pp, c->grad_accum, v, err)) != ST_OK) {
        err_prefix(err, "--grad-accum (pipeline micro-batches)");
        return st;
    }
    SchedTimes t = {1.0, 2.0, 0.0, 0.0};
    SchedSim sim;
    if (pp > SCHED_MAX_P) return err_set(err, ST_ERR_INPUT, "--pp %d: expected at most %d stages", pp, SCHED_MAX_P);
    if ((st = sched_simulate(&r->sched, &t, &sim, err)) != ST_OK) return st;
    int S = pp * v, first[LAYOUT_MAX_CHUNKS * SCHED_MAX_P], last[LAYOUT_MAX_CHUNKS * SCHED_MAX_P];
    if (v > LAYOUT_MAX_CHUNKS)
        return err_set(err, ST_ERR_INPUT, "--interleave %d: expected at most %d chunks per rank", v, LAYOUT_MAX_CHUNKS);
    if ((st = layout_pp_split(&c->model, c->seq_len, S, c->pp_layers, first, last, err)) != ST_OK) {
        if (v > 1) err_prefix(err, "--interleave %d: %d x %d = %d virtual stages", v, pp, v, S);
        return st;
    }
    r->stage.n = v;
    for (int k = 0; k < S; k++) r->sched_first[k] = first[k], r->sched_last[k] = last[k];
    memcpy(r->peak_inflight, sim.peak_inflight, sizeof r->peak_inflight);
    if (c->pp_print_schedule && r->comm->rank == 0) {
        printf("pipeline schedule %s, %d ranks, %d micro-batches, %d chunk(s) per rank:\n", c->pp_schedule, pp,
               c->grad_accum, v);
        sched_print(&r->sched, stdout);
        fflush(stdout);
    }
    return ST_OK;
}

/* This rank's chunks (layout_pp_rank_stage: virtual stage c·pp + pp_rank for chunk c) and slots. */
static void pipeline_rank_stage(Run *r) {
    r->stage = layout_pp_rank_stage(r->sched_first, r->sched_last, r->pp, r->stage.n, r->pp_rank);
    r->slots = r->peak_inflight[r->pp_rank];
}

/* The process grid (dp × tp × pp = world), refused before any allocation. */
static Status setup_grid(Run *r, Err *err) {
    TrainConfig *c = &r->cfg;
    if (c->zero < 0 || c->zero > 3) return err_set(err, ST_ERR_INPUT, "--zero: expected 0, 1, 2 or 3, found %d", c->zero);
    r->comm = c->comm;
    if (!r->comm) {
        Status st = comm_init_local(&r->own_comm, err);
        if (st != ST_OK) return st;
        r->comm = r->own_comm;
    }
    int tp = c->tp > 0 ? c->tp : 1, pp = c->pp > 0 ? c->pp : 1, world = r->comm->world;
    if (world % tp)
        return err_set(err, ST_ERR_INPUT, "--tp %d: expected a divisor of the world size %d (ranks launched), found a "
                       "remainder of %d", tp, world, world % tp);
    if (world % (tp * pp))
        return err_set(err, ST_ERR_INPUT, "--pp %d: expected tp x pp = %d to divide the world size %d (ranks launched), "
                       "found a remainder of %d", pp, tp * pp, world, world % (tp * pp));
    if (c->sp && tp == 1) return err_set(err, ST_ERR_INPUT, "--sp: expected --tp > 1 (sequence parallelism splits "
                                         "inside a tensor-parallel group), found --tp 1");
    Status st = setup_pipeline(r, pp, err);
    if (st != ST_OK) return st;
    int dp = c->dp > 0 ? c->dp : world / (tp * pp);
    if ((st = par_check_grid(c->zero, pp, err)) != ST_OK) return st;
    if ((st = comm_set_grid(r->comm, dp, tp, pp, err)) != ST_OK) return st;
    if (c->comm_timeout > 0) r->comm->timeout_s = c->comm_timeout;
    c->dp = r->dp = dp, r->dp_rank = r->comm->dp_rank, r->world = r->comm->world;
    c->tp = r->tp = tp, r->tp_rank = r->comm->tp_rank;
    c->pp = r->pp = pp, r->pp_rank = r->comm->pp_rank;
    r->sliced = tp > 1 || pp > 1;
    r->local = dp == 1 && !r->sliced && c->zero == 0;
    if (pp > 1) pipeline_rank_stage(r);
    if (c->ckpt_async && c->ckpt_dir[0] && !r->local && r->world == 1)
        return err_set(err, ST_ERR_INPUT, "--ckpt-async: expected ZeRO 0 in one process, found ZeRO %d (a one-process "
                       "save of a sharded state is gathered and written synchronously; drop the flag)", c->zero);
    if (r->sliced && c->sample_every > 0)
        return err_set(err, ST_ERR_INPUT, "--sample-every %d: expected 0 with --tp %d --pp %d (a sample needs the whole "
                       "model on one rank; sample the saved weights with `scaletrain sample`)", c->sample_every, tp, pp);
    r->by_rank = calloc((size_t)r->world, sizeof *r->by_rank);
    r->by_rank2 = calloc((size_t)r->world, sizeof *r->by_rank2);
    r->pp_idle = calloc((size_t)r->world, sizeof *r->pp_idle);
    if (!r->by_rank || !r->by_rank2 || !r->pp_idle) return err_set(err, ST_ERR_RUNTIME, "out of memory");
    return ST_OK;
}

/* Shards, the model's vocabulary (from their headers when not given) and its validation. */
static Status setup_data(Run *r, Err *err) {
    TrainConfig *c = &r->cfg;
    Status st;
    int lflags = LOADER_SHUFFLE | (c->no_pack ? LOADER_NO_PACK : 0);
    if ((st = loader_open(&r->train, c->data, c->seq_len, 0, c->tokenizer_hash, c->data_seed, lflags, err)) != ST_OK)
        return st;
    if (c->model.vocab == 0) {
        c->model.vocab = (int)loader_header_vocab(&r->train);
        if (c->model.vocab == 0)
            return err_set(err, ST_ERR_INPUT, "--vocab: not given and the shard headers of %s record no vocabulary size",
                           c->data);
    }
    if ((st = model_config_validate(&c->model, err)) != ST_OK) return st;
    if ((st = loader_check_vocab(&r->train, (uint32_t)c->model.vocab, err)) != ST_OK) return st;
    if (c->val_data[0]) {
        int vflags = c->no_pack ? LOADER_NO_PACK : 0;
        if ((st = loader_open(&r->val, c->val_data, c->seq_len, (uint32_t)c->model.vocab, c->tokenizer_hash, 0, vflags,
                              err)) != ST_OK)
            return st;
        /* --sp splits every forward's rows over tp; a validation set shorter than one micro-batch
         * runs a smaller one, which must split too. */
        if (c->sp && r->val.nwin < (uint64_t)c->micro_batch && (r->val.nwin * (uint64_t)c->seq_len) % (uint64_t)r->tp)
            return err_set(err, ST_ERR_INPUT, "--val-data %s: with --sp, expected at least --micro-batch %d rows or a "
                           "row count x --seq-len divisible by --tp %d, found %llu rows", c->val_data, c->micro_batch,
                           r->tp, (unsigned long long)r->val.nwin);
    }
    c->sched.total = c->steps;
    if ((st = health_validate_options(&c->health, err)) != ST_OK) return st;
    health_init(&r->health);
    scaler_init(&r->scaler, c->loss_scale, c->loss_scale_window);
    return ST_OK;
}

/* Every rank got the same config (hash of its JSON); the grid and each rank's threads are printed;
 * from here on only rank 0 prints progress and writes the log. */
static Status setup_same_config(Run *r, Err *err) {
    TrainConfig *c = &r->cfg;
    r->config = events_config_json(c);
    char *text = cJSON_PrintUnformatted(r->config);
    if (!text) return err_set(err, ST_ERR_RUNTIME, "out of memory (config text)");
    uint64_t h = XXH3_64bits(text, strlen(text));
    free(text);
    Status st = comm_check_same_u64(r->comm, h, "config hash", err);
    if (st == ST_OK) st = comm_allgather_f64(r->comm, (double)c->threads, r->by_rank, err);
    if (st == ST_OK && r->world > 1 && r->comm->rank == 0 && !c->quiet) {
        char d[256];
        comm_describe(r->comm, d, sizeof d);
        printf("grid: %s, ZeRO stage %d, collective timeout %.0f s\nthreads:", d, c->zero, r->comm->timeout_s);
        for (int i = 0; i < r->world; i++) printf(" rank %d %d%s", i, (int)r->by_rank[i], i + 1 < r->world ? "," : "\n");
        fflush(stdout);
    }
    if (r->comm->rank != 0) c->quiet = 1, c->log_path[0] = 0;
    return st;
}

/* ================================================================ resume */

/* Finds the checkpoint to continue from and checks the config against it, before allocating.
 * Nothing found under --resume auto is a fresh start, said on the console and in the start
 * record; nothing found at an explicit path is an error. */
static Status resume_find(Run *r, Err *err) {
    TrainConfig *c = &r->cfg;
    if (!c->resume[0]) return ST_OK;
    int is_auto = !strcmp(c->resume, "auto");
    if (is_auto && !c->ckpt_dir[0])
        return err_set(err, ST_ERR_INPUT, "--resume auto: expected --ckpt-dir to search, found none");
    Status st = ckpt_resolve(is_auto ? c->ckpt_dir : c->resume, "auto", r->resume_path, sizeof r->resume_path,
                             r->resume_note, sizeof r->resume_note, err);
    if (st != ST_OK) return st;
    if (r->resume_note[0] && !c->quiet) printf("resume: %s\n", r->resume_note);
    if (!r->resume_path[0]) {
        if (!is_auto) return err_set(err, ST_ERR_INPUT, "--resume %s: expected a checkpoint, found none", c->resume);
        snprintf(r->resume_note, sizeof r->resume_note, "no checkpoint in %s, starting from scratch", c->ckpt_dir);
        if (!c->quiet) printf("resume: %s\n", r->resume_note);
        return ST_OK;
    }
    CkptMeta meta;
    memset(&meta, 0, sizeof meta);
    if ((st = ckpt_read_meta(r->resume_path, &meta, err)) != ST_OK) return st;
    char buf[512], report[2048] = "";
    snprintf(buf, sizeof buf, "%s", c->overrides);
    const char *ov[32];
    int nov = split_list(buf, ov, 32);
    st = ckpt_check_config(meta.config, r->config, ov, nov, report, sizeof report, err);
    if (st != ST_OK) err_prefix(err, "--resume %s", r->resume_path);
    else if (meta.step >= c->steps)
        st = err_set(err, ST_ERR_INPUT, "--steps %ld: the checkpoint %s is already at step %ld (extend --steps)", c->steps,
                     r->resume_path, meta.step);
    if (st == ST_OK && report[0] && !c->quiet) printf("resume: %s\n", report);
    r->start_step = r->start_attempt = meta.step;
    ckpt_meta_free(&meta);
    return st;
}

/* Transient buffers of a layout (initialisation, checkpoints, final weights) are staging memory:
 * n buffers of this rank's layout, or with tp > 1 of the whole network's (r->full). mem_alloc
 * zeroes them. */
static float *run_staging(Run *r, const ParamLayout *pl, int n) {
    return mem_alloc(&r->mem, MEM_CKPT_STAGING, pl->total * sizeof(float) * (size_t)n);
}
static void run_staging_free(Run *r, const ParamLayout *pl, float *p, int n) {
    mem_free(&r->mem, MEM_CKPT_STAGING, p, pl->total * sizeof(float) * (size_t)n);
}
static void slices_from_full(Run *r, float *local, const float *full, int n) {
    for (int i = 0; i < n; i++)
        layout_tp_copy(&r->g.w.layout, local + i * r->g.w.layout.total, &r->full, (float *)full + i * r->full.total, 0,
                       1);
}

/* A progress bar for long checkpoint reads and writes: on a terminal, or for 256 MiB and more of
 * parameters in logs. NULL when none is wanted. */
static Progress *run_ckpt_bar(Run *r, Progress *bar, const char *what) {
    if (r->cfg.quiet || !(isatty(2) || r->g.w.layout.total * 4 >= ((size_t)256 << 20))) return NULL;
    progress_init(bar, what, "bytes", "MB/s", 1e-6);
    return bar;
}

/* The optimizer's state outside the layout (Shampoo's blocks) from checkpoint `path`, if it has any:
 * every rank reads the whole vector and keeps its own blocks. */
static Status run_load_extra(Run *r, const char *path, Err *err) {
    size_t n = par_extra_state_floats(r->par);
    if (!n) return ST_OK;
    float *buf = mem_alloc(&r->mem, MEM_CKPT_STAGING, n * sizeof(float));
    if (!buf) return err_set(err, ST_ERR_RUNTIME, "out of memory (optimizer state staging)");
    Status st = ckpt_read_extra(path, par_extra_state_name(r->par), buf, n, err);
    if (st == ST_OK) par_set_extra_state(r->par, buf);
    mem_free(&r->mem, MEM_CKPT_STAGING, buf, n * sizeof(float));
    return st;
}

/* Loads a checkpoint (written by any grid) into this rank's parameters and moments: in place when
 * the state is whole here, else through full-layout staging that par scatters. */
static Status run_load_ckpt(Run *r, const char *path, CkptMeta *meta, Err *err) {
    if (r->local) {
        Progress bar, *pb = run_ckpt_bar(r, &bar, "checkpoint load");
        CkptProgressFn fn = pb ? progress_cb : NULL;
        CkptOptState opt = {par_moment(r->par, 0), par_moment(r->par, 1), NULL};
        Status st = ckpt_load_progress(path, &r->g.w, &opt, meta, fn, pb, err);
        gpt_sync_lp(&r->g);
        return st == ST_OK ? run_load_extra(r, path, err) : st;
    }
    /* Any checkpoint (one process's or sharded, any grid) resliced into this rank's layout, then par
     * keeps its shards. */
    int nv = par_moment(r->par, 1) ? 1 : 0;
    const ParamLayout *pl = &r->g.w.layout;
    float *buf = run_staging(r, pl, 2 + nv);
    if (!buf) return err_set(err, ST_ERR_RUNTIME, "out of memory (checkpoint staging)");
    size_t n = pl->total;
    Status st = ckpt_load_any(path, pl, buf, buf + n, nv ? buf + 2 * n : NULL, meta, &r->cfg.faults, err);
    if (st == ST_OK) par_set_full(r->par, buf, buf + n, nv ? buf + 2 * n : NULL);
    run_staging_free(r, pl, buf, 2 + nv);
    return st == ST_OK ? run_load_extra(r, path, err) : st;
}

/* The noise scale's averages in state.json's "extra", so a resumed run smooths B_simple on from
 * where the checkpoint left it. The doubles are written as "%.17g" strings: cJSON prints numbers with
 * 15 digits whenever they read back within an epsilon, which is not the same double. */
static void add_exact(cJSON *o, const char *name, double v) {
    char buf[40];
    snprintf(buf, sizeof buf, "%.17g", v);
    cJSON_AddStringToObject(o, name, buf);
}

static int get_exact(const cJSON *o, const char *name, double *v) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, name);
    char *end = NULL;
    if (cJSON_IsString(x)) *v = strtod(x->valuestring, &end);
    return cJSON_IsString(x) && end != x->valuestring && *end == '\0';
}

static cJSON *noise_to_json(const NoiseScale *n) {
    cJSON *o = cJSON_CreateObject();
    add_exact(o, "g2_ema", n->g2_ema);
    add_exact(o, "trs_ema", n->trs_ema);
    cJSON_AddNumberToObject(o, "n", (double)n->n);
    return o;
}

static Status noise_from_json(NoiseScale *n, const cJSON *o, const char *path, Err *err) {
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(o, "n");
    double g, t;
    if (!get_exact(o, "g2_ema", &g) || !get_exact(o, "trs_ema", &t) || !cJSON_IsNumber(k) || k->valuedouble < 0)
        return err_set(err, ST_ERR_INPUT, "%s/state.json: extra.noise_scale: expected g2_ema and trs_ema as decimal "
                       "strings and n >= 0, found another value", path);
    n->g2_ema = g, n->trs_ema = t, n->n = (long)k->valuedouble;
    return ST_OK;
}

/* Applies the checkpoint found by resume_find: weights, moments, loader position, loss scaler,
 * health detectors, the noise scale's averages, and the batches consumed and skipped. */
static Status resume_load(Run *r, Err *err) {
    TrainConfig *c = &r->cfg;
    if (!r->resume_path[0]) return ST_OK;
    CkptMeta m;
    Status st = run_load_ckpt(r, r->resume_path, &m, err);
    if (st != ST_OK) return st;
    loader_set_state(&r->train, m.loader);
    const cJSON *hj = m.extra ? cJSON_GetObjectItemCaseSensitive(m.extra, "health") : NULL;
    const cJSON *bj = m.extra ? cJSON_GetObjectItemCaseSensitive(m.extra, "batches") : NULL;
    const cJSON *sj = m.extra ? cJSON_GetObjectItemCaseSensitive(m.extra, "skipped_batches") : NULL;
    if (cJSON_IsNumber(bj)) r->start_attempt = (long)bj->valuedouble;
    double sv;
    if (c->fp16 && ckpt_meta_scaler(&m, "scale", &sv)) {
        r->scaler.scale = (float)sv;
        if (ckpt_meta_scaler(&m, "good_steps", &sv)) r->scaler.good = (long)sv;
        if (ckpt_meta_scaler(&m, "skips", &sv)) r->scaler.skips = (long)sv;
    }
    if (hj && (st = health_state_from_json(&r->health, hj, c->health.window, err)) != ST_OK)
        err_prefix(err, "%s/state.json: health", r->resume_path);
    const cJSON *nj = m.extra ? cJSON_GetObjectItemCaseSensitive(m.extra, "noise_scale") : NULL;
    if (st == ST_OK && nj && r->noise_on) st = noise_from_json(&r->noise, nj, r->resume_path, err);
    for (const cJSON *x = sj ? sj->child : NULL; x && r->nskipped < SKIP_RECORD_MAX; x = x->next)
        r->skipped[r->nskipped++] = (long)x->valuedouble;
    ckpt_meta_free(&m);
    if (st == ST_OK && !c->quiet) printf("resume: continuing from %s (step %ld)\n", r->resume_path, r->start_step);
    return st;
}

/* ================================================================ the model and its state */

/* Initial weights: seeded, or --init-from (path non-NULL). Every element depends on (seed, tensor,
 * index) only, so every grid starts from the same weights. */
static Status run_init_weights(Run *r, const char *path, Err *err) {
    if (r->sliced) { /* the whole network's weights, then this rank's slices */
        float *full = run_staging(r, &r->full, 1), *mine = run_staging(r, &r->g.w.layout, 1);
        Status st = ST_OK;
        if (!full || !mine) st = err_set(err, ST_ERR_RUNTIME, "out of memory (initial weights)");
        GptWeights view = r->g.w;
        view.layout = r->full, view.params = full;
        if (st == ST_OK && path) st = ckpt_init_from(&view, path, err);
        else if (st == ST_OK) gpt_init_params_buf(&r->full, full, r->cfg.seed, r->g.s.nt);
        if (st == ST_OK) {
            slices_from_full(r, mine, full, 1);
            par_set_full(r->par, mine, NULL, NULL);
        }
        run_staging_free(r, &r->full, full, 1);
        run_staging_free(r, &r->g.w.layout, mine, 1);
        return st;
    }
    if (r->cfg.zero < 3) {
        if (!path) gpt_init_params(&r->g, r->cfg.seed);
        Status st = path ? ckpt_init_from(&r->g.w, path, err) : ST_OK;
        gpt_sync_lp(&r->g);
        return st;
    }
    float *full = run_staging(r, &r->g.w.layout, 1);
    if (!full) return err_set(err, ST_ERR_RUNTIME, "out of memory (initial weights)");
    Status st = ST_OK;
    GptWeights view = r->g.w; /* ckpt reads the layout and writes view.params */
    view.params = full;
    if (path) st = ckpt_init_from(&view, path, err);
    else gpt_init_params_buf(&r->g.w.layout, full, r->cfg.seed, r->g.s.nt);
    if (st == ST_OK) par_set_full(r->par, full, NULL, NULL);
    run_staging_free(r, &r->g.w.layout, full, 1);
    return st;
}

/* The model (its layout padded for the dp group), the parallel state that owns the moments and
 * the collectives, the initial weights, and the batch buffers. */
static Status setup_model(Run *r, Err *err) {
    TrainConfig *c = &r->cfg;
    int B = c->micro_batch, T = c->seq_len, k = c->grad_accum, nt = c->threads;
    mm_set_threads(nt);
    GptOptions go = gpt_default_options();
    Status st = backend_find(c->device, &go.backend, err);
    if (st != ST_OK) return st;
    go.B = B, go.T = T, go.threads = nt, go.recompute = c->recompute;
    go.precision = c->fp16 ? GPT_FP16 : c->bf16 ? GPT_BF16 : GPT_FP32;
    go.tp = r->tp, go.tp_rank = r->tp_rank, go.sp = c->sp;
    if (r->pp > 1) go.stage = r->stage, go.slots = r->slots, go.split_backward = r->sched.split_backward;
    par_gpt_options(r->dp, c->zero, &go);
    st = gpt_init(&r->g, &c->model, &go, &r->mem, err);
    if (st != ST_OK) return st;
    if (r->sliced && layout_init(&r->full, &c->model, 1) != 0)
        return err_set(err, ST_ERR_RUNTIME, "out of memory (the full layout)");
    ParOptions po = par_default_options();
    po.zero = c->zero, po.overlap = !c->no_overlap, po.n_moments = optim_num_moments(&c->optim), po.nt = nt;
    po.muon = c->optim.kind == OPT_MUON, po.muon_bf16 = go.precision == GPT_BF16;
    po.shampoo = c->optim.kind == OPT_SHAMPOO, po.shampoo_block = c->optim.shampoo_block;
    po.precond_every = c->optim.precond_every, po.shampoo_eps = c->optim.shampoo_eps;
    po.faults = c->faults;
    /* The noise scale needs a batch smaller than the step's (a micro-batch of one replica) and a
     * gradient whole on the stage that computed it (no pipeline: a tied wte is split there). */
    r->noise_on = plan_noise_scale_on(r->dp, r->pp, k, c->no_noise_scale);
    po.noise = r->noise_on;
    noise_init(&r->noise, NOISE_EMA_BETA);
    if (r->noise_on && !(r->noise_rep = calloc((size_t)r->dp, sizeof *r->noise_rep)))
        return err_set(err, ST_ERR_RUNTIME, "out of memory (noise scale)");
    if ((st = par_init(&r->par, r->comm, &r->g, &po, &r->mem, err)) != ST_OK) return st;
    if ((st = pp_init(&r->pp_run, r->comm, &r->g, r->par, &r->sched, err)) != ST_OK) return st;
    if ((st = run_init_weights(r, NULL, err)) != ST_OK) return st;
    r->g.s.dropout_seed = c->seed ^ 0xd509u;
    if (c->init_from[0] && !r->resume_path[0] && (st = run_init_weights(r, c->init_from, err)) != ST_OK) {
        err_prefix(err, "--init-from");
        return st;
    }
    r->batch_ints = (size_t)k * B * T;
    r->inp = mem_alloc(&r->mem, MEM_DATA, r->batch_ints * sizeof(int32_t));
    r->tgt = mem_alloc(&r->mem, MEM_DATA, r->batch_ints * sizeof(int32_t));
    r->step_cap = c->steps * 2 + 64;
    r->step_ms = calloc((size_t)r->step_cap, sizeof *r->step_ms);
    if (!r->inp || !r->tgt || !r->step_ms) return err_set(err, ST_ERR_RUNTIME, "out of memory allocating the batches");
    if (c->optim.kind == OPT_SOPHIA) {
        r->hess_u = mem_alloc(&r->mem, MEM_DATA, r->batch_ints * sizeof(float));
        r->hess_y = mem_alloc(&r->mem, MEM_DATA, r->batch_ints * sizeof(int32_t));
        if (!r->hess_u || !r->hess_y) return err_set(err, ST_ERR_RUNTIME, "out of memory (Sophia's sampled labels)");
    }
    return ST_OK;
}

/* The asynchronous checkpoint writer (its copy of the state) and the metrics log. */
static Status setup_outputs(Run *r, Err *err) {
    TrainConfig *c = &r->cfg;
    if (c->ckpt_dir[0] && r->world > 1) { /* every rank writes its share of the tensors */
        const ParamLayout *pl = &r->g.w.layout;
        if (!(r->ckpt_write = calloc((size_t)pl->ntensors, 1))) return err_set(err, ST_ERR_RUNTIME, "out of memory");
        ckpt_shard_assign(pl, r->dp, r->dp_rank, r->ckpt_write);
        if (c->ckpt_async) {
            float probe = 0; /* async_init reads which buffers exist, not their contents */
            CkptShardSrc src = {pl, &probe, &probe, par_moment(r->par, 1) ? &probe : NULL, r->ckpt_write};
            Status st = ckpt_shard_async_init(&r->sasync, &src, &r->mem, err);
            if (st != ST_OK) return st;
        }
    } else if (c->ckpt_dir[0] && c->ckpt_async) { /* one process: setup_grid allows it only at ZeRO 0 */
        CkptOptState opt = {par_moment(r->par, 0), par_moment(r->par, 1), NULL};
        Status st = ckpt_async_init(&r->async, &r->g.w, &opt, &r->mem, err);
        if (st != ST_OK) return st;
    }
    if (c->log_layer_stats) {
        const ParamLayout *pl = &r->g.w.layout;
        if (!r->local || !r->g.d.grads)
            return err_set(err, ST_ERR_INPUT, "--log-layer-stats: expected one process at ZeRO 0 (dp, tp, pp 1), found "
                           "world %d, ZeRO %d", r->world, c->zero);
        r->ls_nseg = pl->nseg < LAYER_STATS_MAX ? pl->nseg : LAYER_STATS_MAX;
        r->ls_prev = malloc(pl->total * sizeof(float));
        r->ls_grad = calloc((size_t)r->ls_nseg * 3, sizeof(double));
        if (!r->ls_prev || !r->ls_grad) return err_set(err, ST_ERR_RUNTIME, "out of memory (--log-layer-stats)");
        r->ls_weight = r->ls_grad + r->ls_nseg, r->ls_update = r->ls_weight + r->ls_nseg;
    }
    /* A resumed run appends to its log; a new run starts it. */
    return events_open(&r->log, c->log_path, r->start_step > 0, err);
}

/* Per-rank planned bytes of parameters, gradients, master weights and moments. */
static void run_state_plan(const Run *r, size_t plan[MEM_NCAT]) {
    ParOptions po = par_default_options();
    const OptimConfig *oc = &r->cfg.optim;
    po.zero = r->cfg.zero, po.n_moments = optim_num_moments(oc), po.muon = oc->kind == OPT_MUON;
    po.shampoo = oc->kind == OPT_SHAMPOO, po.shampoo_block = oc->shampoo_block, po.precond_every = oc->precond_every;
    par_planned_bytes(&r->g.w.layout, r->dp, r->dp_rank, &po, (int)r->g.w.prec, plan);
}

void train_plan_input(const TrainConfig *c, int dp, int tp, int pp, double peak, PlanInput *out) {
    PlanInput pi = plan_default_input();
    plan_model_from_config(&pi.model, &c->model);
    pi.micro_batch = c->micro_batch, pi.seq_len = c->seq_len, pi.grad_accum = c->grad_accum, pi.threads = c->threads;
    pi.dp = dp, pi.tp = tp, pi.sp = c->sp, pi.zero = c->zero, pi.overlap = !c->no_overlap;
    pi.no_noise_scale = c->no_noise_scale;
    pi.pp = pp, pi.interleave = c->interleave > 0 ? c->interleave : 1;
    snprintf(pi.pp_schedule, sizeof pi.pp_schedule, "%s", c->pp_schedule);
    snprintf(pi.pp_layers, sizeof pi.pp_layers, "%s", c->pp_layers);
    pi.n_moments = optim_num_moments(&c->optim);
    pi.muon = c->optim.kind == OPT_MUON;
    pi.shampoo = c->optim.kind == OPT_SHAMPOO;
    pi.shampoo_block = c->optim.shampoo_block, pi.precond_every = c->optim.precond_every;
    pi.hess_every = c->optim.kind == OPT_SOPHIA ? c->optim.hess_every : 0;
    pi.recompute = (PlanRecompute)c->recompute;
    if (c->have_hw) pi.hw = c->hw; /* a measured profile (plan --measure-hardware) */
    else if (peak > 0) pi.hw.peak_fp32 = peak;
    /* This trainer's precisions; fp16 is emulated, so its GEMMs run at the fp32 rate. */
    Err pe;
    plan_precision_trainer(&pi.prec, c->fp16 ? "fp16" : c->bf16 ? "bf16" : "fp32", &pe);
    if (c->fp16) pi.prec.compute = PLAN_DTYPE_FP32;
    *out = pi;
}

/* The peak FLOP/s that MFU divides by (this rank's, measured for the precision in use unless
 * given, summed over ranks), and the plan of this run from the same layout function
 * (docs/plan.md): its step time and memory, compared with the measurements at the end. */
static Status setup_accounting(Run *r, Err *err) {
    TrainConfig *c = &r->cfg;
    int B = c->micro_batch, T = c->seq_len, k = c->grad_accum, nt = c->threads;
    r->peak = c->peak_flops;
    r->peak_kind = "fp32 FMA";
    if (!(r->peak > 0) && c->bf16 && !c->fp16) r->peak = peak_measure_bf16(nt, 200.0), r->peak_kind = "bf16 dot product";
    if (!(r->peak > 0)) r->peak = peak_measure_fp32(nt, 200.0), r->peak_kind = "fp32 FMA";
    r->peak_job = r->peak;
    Status st = comm_allreduce_f64(r->comm, &r->peak_job, 1, COMM_SUM, err);
    if (st != ST_OK) return st;
    r->fpt = layout_flops_per_token(&c->model, T);
    r->batch_seqs = (long long)B * k * r->dp, r->batch_tokens = r->batch_seqs * T;

    PlanInput pi;
    train_plan_input(c, r->dp, r->tp, r->pp, r->peak, &pi);
    /* Every rank on one node (comm found them so): dp and tp collectives go over shared memory,
     * and an in-place reduce-scatter runs as an all-reduce (comm.h), as the plan then assumes. */
    if (r->comm->rs_as_allreduce && r->world > pi.hw.devices_per_node) pi.hw.devices_per_node = r->world;
    Err perr;
    r->have_plan = plan_predict_step(&pi, &r->plan, &perr) == ST_OK;
    return ST_OK;
}

/* The console summary and the start and memory records. Collective (memory per rank). */
static Status announce(Run *r, Err *err) {
    TrainConfig *c = &r->cfg;
    int B = c->micro_batch, T = c->seq_len, k = c->grad_accum, nt = c->threads;
    double util = loader_utilization(&r->train);
    long long nparams = model_config_num_params(&c->model);
    r->res->num_params = nparams;
    if (!c->quiet) {
        const ModelConfig *m = &c->model;
        if (m->arch == ARCH_LLAMA)
            printf("model: llama L=%d NH=%d KV=%d C=%d F=%d V=%d (padded %d) maxT=%d theta=%g %s head, %lld parameters\n",
                   m->n_layer, m->n_head, m->n_kv_head, m->n_embd, m->ffn, m->vocab, m->vocab_padded, m->max_seq,
                   m->rope_theta, m->untied ? "untied" : "tied", nparams);
        else
            printf("model: L=%d NH=%d C=%d V=%d (padded %d) maxT=%d, %lld parameters\n", m->n_layer, m->n_head,
                   m->n_embd, m->vocab, m->vocab_padded, m->max_seq, nparams);
        if (r->noise_on)
            printf("noise scale: each replica's first micro-batch (%d x %d tokens) against the step's: logged as "
                   "noise_scale\n", B, T);
        else if (!c->no_noise_scale)
            printf("noise scale: not estimated (it needs a batch smaller than the step's: --grad-accum >= 2 or "
                   "dp >= 2, and no --pp)\n");
        if (m->param == PARAM_MUP)
            printf("muP: width multiplier m = %g (C %d / base %g): hidden matrices lr x %.4g and init variance x %.4g, "
                   "logits x %.4g, embeddings x %g, attention 1/hs\n", model_width_mult(m), m->n_embd,
                   m->mup_base_width, 1.0 / model_width_mult(m), 1.0 / model_width_mult(m), model_logit_mult(m),
                   m->mup_input_alpha);
        printf("data: %zu train tokens in %d shard(s), %llu rows of %d+1 (%s, utilization %.1f%%)%s\n",
               r->train.total_tokens, r->train.nshards, (unsigned long long)r->train.nwin, T,
               c->no_pack ? "one document per row, padding masked" : "packed", 100 * util,
               r->val.nshards ? "" : ", no validation data");
        printf("batch: micro-batch %d x seq %d x accumulation %d%s = %lld sequences = %lld tokens per step\n", B, T, k,
               r->dp > 1 ? " x dp" : "", r->batch_seqs, r->batch_tokens);
        printf("memory:");
        for (int mc = 0; mc < MEM_NCAT; mc++)
            if (r->mem.bytes[mc]) printf(" %s %.1f MiB", mem_category_name((MemCategory)mc), r->mem.bytes[mc] / 1048576.0);
        printf("\n");
        printf("compute: %.3g FLOP/token, peak %.1f GFLOP/s per rank (%s), %d threads, %s\n", r->fpt, r->peak / 1e9,
               c->peak_flops > 0 ? "given" : r->peak_kind, nt, mm_backend_info());
        fflush(stdout);
    }
    size_t state[MEM_NCAT];
    run_state_plan(r, state);
    StartEvent se = {.config = r->config, .threads = nt, .command = c->argv_joined, .batch_seqs = r->batch_seqs,
                     .batch_tokens = r->batch_tokens, .num_params = nparams, .flops_per_token = r->fpt,
                     .peak_flops = r->peak, .peak_flops_job = r->peak_job, .data_utilization = util,
                     .world = r->world, .peak_given = c->peak_flops > 0, .peak_kind = r->peak_kind,
                     .resumed_from_step = r->start_step, .resume_requested = c->resume,
                     .resume_checkpoint = r->resume_path, .resume_note = r->resume_note, .have_plan = r->have_plan};
    if (r->have_plan) {
        se.plan_step_ms = r->plan.compute.step * 1e3, se.plan_tokens_per_s = r->plan.compute.tokens_per_s;
        se.plan_mfu = r->plan.compute.mfu, se.plan_num_params = (double)r->plan.n_params;
        se.plan_memory_total = r->plan.mem.total;
    }
    memset(se.planned, 0, sizeof se.planned);
    ActStage ast = layout_act_stage(&r->g.w.layout, r->g.s.nslots);
    ActOptions ao = {B, T, nt, c->recompute, c->fp16 ? 2 : c->bf16 ? 1 : 0, r->tp, c->sp, &ast};
    layout_run_bytes(&c->model, &ao, se.planned);
    static const MemCategory cats[4] = {MEM_PARAMS, MEM_GRADS, MEM_MASTER, MEM_MOMENTS};
    for (int i = 0; i < 4; i++) se.planned[cats[i]] = state[cats[i]];
    ev_start(&r->log, &se);

    /* Planned against measured state bytes on every rank (each against its own plan: pipeline
     * stages hold different tensors). */
    MemoryEvent me = {.world = r->world, .dp = r->dp, .tp = r->tp, .sp = c->sp, .zero = c->zero, .match = 1};
    memcpy(me.measured, r->mem.bytes, sizeof me.measured);
    memcpy(me.planned, state, sizeof me.planned);
    double *all = calloc((size_t)r->world * 5, sizeof *all), *planned = all + (size_t)r->world * 4;
    if (!all) return err_set(err, ST_ERR_RUNTIME, "out of memory");
    Status st = ST_OK;
    for (int i = 0; i < 4 && st == ST_OK; i++) {
        me.by_rank[i] = all + (size_t)i * r->world;
        st = comm_allgather_f64(r->comm, (double)r->mem.bytes[cats[i]], all + (size_t)i * r->world, err);
        if (st == ST_OK) st = comm_allgather_f64(r->comm, (double)state[cats[i]], planned, err);
        for (int q = 0; q < r->world; q++) me.match = me.match && me.by_rank[i][q] == planned[q];
    }
    if (st == ST_OK) ev_memory(&r->log, &me);
    free(all);
    if (st == ST_OK && r->world > 1 && !c->quiet)
        printf("memory per rank (dp %d, tp %d%s, pp %d, ZeRO %d): params %.2f MiB, grads %.2f MiB, moments %.2f MiB "
               "planned here; measured on every rank against its plan: %s\n",
               r->dp, r->tp, c->sp ? " + sp" : "", r->pp, c->zero, state[MEM_PARAMS] / 1048576.0, state[MEM_GRADS] / 1048576.0,
               state[MEM_MOMENTS] / 1048576.0, me.match ? "equal" : "DIFFERENT (see the memory event)");
    return st;
}

static Status run_setup(Run *r, Err *err) {
    Status st;
    if ((st = setup_grid(r, err)) != ST_OK) return st; /* a wrong grid is refused before any allocation */
    if ((st = setup_data(r, err)) != ST_OK) return st;
    if ((st = setup_same_config(r, err)) != ST_OK) return st;
    if ((st = resume_find(r, err)) != ST_OK) return st;
    if ((st = setup_model(r, err)) != ST_OK) return st;
    if ((st = resume_load(r, err)) != ST_OK) return st;
    if ((st = setup_outputs(r, err)) != ST_OK) return st;
    if ((st = setup_accounting(r, err)) != ST_OK) return st;
    if ((st = announce(r, err)) != ST_OK) return st;
    r->step = r->start_step, r->attempt = r->start_attempt;
    r->res->start_step = r->start_step;
    return ST_OK;
}

static void signals_install(Run *r) {
    if (!r->cfg.handle_signals) return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    g_stop_signal = 0;
    sigaction(SIGTERM, &sa, &r->old_term);
    sigaction(SIGINT, &sa, &r->old_int);
    r->signals = 1;
}

static void signals_restore(Run *r) {
    if (!r->signals) return;
    sigaction(SIGTERM, &r->old_term, NULL);
    sigaction(SIGINT, &r->old_int, NULL);
}

/* ================================================================ checkpoints */

/* Gathers the full parameters (and moments when opt_too) into staging; rank 0 writes. The others
 * learn rank 0's outcome, so a failed write ends the run everywhere instead of a hang. */
static Status run_save_gathered(Run *r, const CkptMeta *meta, const CkptOptions *o, CkptSaveInfo *info,
                                const char *out_dir, Err *err) {
    int nv = par_moment(r->par, 1) ? 1 : 0, nb = out_dir ? 1 : 2 + nv;
    float *buf = run_staging(r, &r->g.w.layout, nb), *fbuf = r->sliced ? run_staging(r, &r->full, nb) : NULL;
    if (!buf || (r->sliced && !fbuf)) {
        run_staging_free(r, &r->g.w.layout, buf, nb);
        return err_set(err, ST_ERR_RUNTIME, "out of memory (checkpoint staging)");
    }
    size_t n = r->g.w.layout.total;
    Status st = par_get_full(r->par, buf, out_dir ? NULL : buf + n, out_dir || !nv ? NULL : buf + 2 * n, err);
    float *wr = buf;
    if (st == ST_OK && r->sliced) { /* full tensors on world rank 0 (parallel/tp.c) */
        st = par_full_tensors(r->par, &r->full, buf, fbuf, nb, r->step, err);
        wr = fbuf, n = r->full.total;
    }
    int64_t fail = 0;
    if (st == ST_OK && r->comm->rank == 0) {
        GptWeights view = r->g.w;
        if (r->sliced) view.layout = r->full;
        view.params = wr;
        CkptOptState opt = {out_dir ? NULL : wr + n, out_dir || !nv ? NULL : wr + 2 * n, NULL};
        if (!out_dir) opt.extra = r->xstate, opt.extra_n = r->xstate_n, opt.extra_name = par_extra_state_name(r->par);
        st = out_dir ? st_save_hf(&view, out_dir, r->cfg.tokenizer, err) : ckpt_save(&view, &opt, meta, o, info, err);
        fail = st != ST_OK;
    }
    run_staging_free(r, &r->g.w.layout, buf, nb);
    run_staging_free(r, &r->full, fbuf, nb);
    Err e2;
    Status st2 = comm_allreduce_i64(r->comm, &fail, 1, COMM_MAX, &e2);
    if (st != ST_OK) return st;
    if (st2 != ST_OK) return *err = e2, st2;
    if (fail) return err_set(err, ST_ERR_RUNTIME, "%s: rank 0 could not write it (its message says why)",
                             out_dir ? out_dir : "checkpoint");
    return ST_OK;
}

/* Young/Daly needs the full write time of a checkpoint: a synchronous save's, or the background
 * write's, learnt when the next save or the end of the run waits for it (never by waiting early). */
static void note_write_time(Run *r, const CkptSaveInfo *info) {
    if (!r->first_ckpt_ms && info->path[0]) r->first_ckpt_ms = info->ms_write + info->ms_prune;
}

/* A checkpoint written by every rank (ckpt/shard.h): each rank's tensors of its own layout (a stage,
 * a tp slice), split between the ranks of its dp group; the ZeRO shards of the group are gathered
 * into staging of that layout first (none at ZeRO 0, where every rank holds its layout whole).
 * Collective over the world; every rank returns the same status. */
static Status run_save_sharded(Run *r, const CkptMeta *meta, const CkptOptions *o, CkptSaveInfo *info, Err *err) {
    const ParamLayout *pl = &r->g.w.layout;
    int nv = par_moment(r->par, 1) ? 1 : 0, staged = r->cfg.zero > 0;
    size_t n = pl->total;
    float *buf = staged ? run_staging(r, pl, 2 + nv) : NULL;
    Status st = buf || !staged ? ST_OK : err_set(err, ST_ERR_RUNTIME, "out of memory (checkpoint staging)");
    /* A rank that cannot stage still takes part in the collectives: the save then fails everywhere. */
    int64_t bad = st != ST_OK;
    Err e2;
    if (comm_allreduce_i64(r->comm, &bad, 1, COMM_MAX, &e2) != ST_OK || bad) {
        if (st == ST_OK) st = err_set(err, ST_ERR_RUNTIME, "checkpoint: another rank could not stage its state");
    } else if (staged) {
        st = par_get_full(r->par, buf, buf + n, nv ? buf + 2 * n : NULL, err);
    }
    if (st == ST_OK) {
        CkptShardSrc src = {pl, staged ? buf : r->g.w.params, staged ? buf + n : par_moment(r->par, 0),
                            nv ? (staged ? buf + 2 * n : par_moment(r->par, 1)) : NULL, r->ckpt_write};
        src.extra = r->xstate, src.extra_n = r->xstate_n, src.extra_name = par_extra_state_name(r->par);
        if (r->sasync) { /* commits the previous save (collective), then copies and writes behind training */
            CkptSaveInfo prev;
            memset(&prev, 0, sizeof prev);
            st = ckpt_shard_async_save(r->sasync, r->comm, &src, meta, o, &prev, err);
            note_write_time(r, &prev);
        } else {
            st = ckpt_shard_save(r->comm, &src, meta, o, info, err);
        }
    }
    if (staged) run_staging_free(r, pl, buf, 2 + nv);
    return st;
}

/* The final weights (model.safetensors + config.json in out_dir). */
static Status save_weights(Run *r, const char *out_dir, Err *err) {
    if (r->local) return st_save_hf(&r->g.w, out_dir, r->cfg.tokenizer, err);
    return run_save_gathered(r, NULL, NULL, NULL, out_dir, err);
}


/* Writes a checkpoint of the state after `step` completed steps; *ms is its cost to the step. */
static Status save_checkpoint(Run *r, long step, double *ms, CkptSaveInfo *info, Err *err) {
    const TrainConfig *c = &r->cfg;
    double t0 = timer_ms();
    long attempt = r->attempt;
    CkptMeta meta;
    memset(&meta, 0, sizeof meta);
    meta.step = step;
    meta.tokens_seen = (uint64_t)attempt * (uint64_t)r->batch_tokens;
    meta.sched_step = step;
    meta.loader = loader_get_state(&r->train);
    snprintf(meta.optimizer, sizeof meta.optimizer, "%s", optim_kind_name(c->optim.kind));
    meta.optim_step = step;
    meta.dp = r->dp, meta.tp = r->tp, meta.pp = r->pp, meta.zero = c->zero;
    ckpt_meta_set_rng(&meta, "init_seed", c->seed);
    ckpt_meta_set_rng(&meta, "data_seed", c->data_seed);
    ckpt_meta_set_rng(&meta, "dropout_seed", r->g.s.dropout_seed);
    ckpt_meta_set_rng(&meta, "dropout_counter", (uint64_t)attempt * c->grad_accum * r->dp);
    meta.config = r->config;
    /* Health detectors, the batch counter and the skipped batches travel in "extra". */
    cJSON *extra = cJSON_CreateObject();
    cJSON_AddItemToObject(extra, "health", health_state_to_json(&r->health));
    if (r->noise_on) cJSON_AddItemToObject(extra, "noise_scale", noise_to_json(&r->noise));
    cJSON_AddNumberToObject(extra, "batches", (double)attempt);
    cJSON *sk = cJSON_AddArrayToObject(extra, "skipped_batches");
    for (int i = 0; i < r->nskipped; i++) cJSON_AddItemToArray(sk, cJSON_CreateNumber((double)r->skipped[i]));
    meta.extra = extra;
    if (c->fp16) {
        ckpt_meta_set_scaler(&meta, "scale", r->scaler.scale);
        ckpt_meta_set_scaler(&meta, "good_steps", (double)r->scaler.good);
        ckpt_meta_set_scaler(&meta, "skips", (double)r->scaler.skips);
    }
    CkptOptState opt = {par_moment(r->par, 0), par_moment(r->par, 1), NULL};
    /* Shampoo's block state, gathered from its owners (collective: every rank saves). */
    r->xstate_n = par_extra_state_floats(r->par);
    if (r->xstate_n) {
        Status xs = (r->xstate = mem_alloc(&r->mem, MEM_CKPT_STAGING, r->xstate_n * sizeof(float)))
                        ? ST_OK : err_set(err, ST_ERR_RUNTIME, "out of memory (optimizer state staging)");
        int64_t bad = xs != ST_OK;
        Err e2;
        if (comm_allreduce_i64(r->comm, &bad, 1, COMM_MAX, &e2) != ST_OK || bad) {
            if (xs == ST_OK) err_set(err, ST_ERR_RUNTIME, "checkpoint: another rank could not stage the optimizer state");
            mem_free(&r->mem, MEM_CKPT_STAGING, r->xstate, r->xstate_n * sizeof(float));
            r->xstate = NULL;
            cJSON_Delete(extra);
            return ST_ERR_RUNTIME;
        }
        if ((xs = par_get_extra_state(r->par, r->xstate, err)) != ST_OK) {
            mem_free(&r->mem, MEM_CKPT_STAGING, r->xstate, r->xstate_n * sizeof(float));
            r->xstate = NULL;
            cJSON_Delete(extra);
            return xs;
        }
        opt.extra = r->xstate, opt.extra_n = r->xstate_n, opt.extra_name = par_extra_state_name(r->par);
    }
    CkptOptions o = ckpt_default_options();
    o.dir = c->ckpt_dir, o.keep_last = c->keep_last, o.keep_every = c->keep_every, o.tokenizer = c->tokenizer;
    o.faults = c->faults;
    /* Synchronous saves show progress; an asynchronous one runs behind training. */
    Progress bar, *pb = r->async || r->sasync || r->world > 1 ? NULL : run_ckpt_bar(r, &bar, "checkpoint");
    if (pb) o.progress = progress_cb, o.progress_ctx = pb;
    Status st;
    memset(info, 0, sizeof *info);
    if (r->async) {
        /* The previous background write must be complete (and its errors seen) first. */
        CkptSaveInfo prev;
        memset(&prev, 0, sizeof prev);
        if ((st = ckpt_async_wait(r->async, &prev, err)) == ST_OK) {
            note_write_time(r, &prev);
            st = ckpt_async_save(r->async, &r->g.w, &opt, &meta, &o, err);
        }
    } else if (r->local) {
        st = ckpt_save(&r->g.w, &opt, &meta, &o, info, err);
    } else if (r->world > 1) { /* every rank writes its own part */
        st = run_save_sharded(r, &meta, &o, info, err);
    } else {
        st = run_save_gathered(r, &meta, &o, info, NULL, err);
    }
    if (r->xstate) mem_free(&r->mem, MEM_CKPT_STAGING, r->xstate, r->xstate_n * sizeof(float));
    r->xstate = NULL, r->xstate_n = 0;
    cJSON_Delete(extra);
    *ms = timer_ms() - t0;
    return st;
}

/* ================================================================ generation samples */

/* A generation sample from the current weights (KV cache, temperature 0.8 over the whole
 * vocabulary, seeded by the step so it is reproducible), printed and logged. */
static void log_sample(Run *r, long step) {
    const TrainConfig *c = &r->cfg;
    if (!r->g.w.params) return; /* ZeRO-3: the full weights are not on this rank */
    KvCache kv;
    Err e;
    if (kv_init(&kv, &r->g, &e) != ST_OK) return;
    int n = c->sample_tokens < c->model.max_seq ? c->sample_tokens : c->model.max_seq - 1;
    uint32_t *ids = calloc((size_t)n + 1, sizeof *ids);
    uint32_t he = loader_header_eot(&r->train); /* start from end-of-text (not the last id for cl100k/o200k) */
    int32_t cur = he < (uint32_t)c->model.vocab ? (int32_t)he : c->model.vocab - 1;
    int ok = 1;
    for (int i = 0; i < n && ids && ok; i++) {
        infer_step(&r->g, &kv, cur);
        if (infer_status(&r->g, &e) != ST_OK) { /* a failed GEMM: no sample rather than a garbage one */
            if (!c->quiet) printf("sample %5ld | skipped: %s\n", step, e.msg);
            ok = 0;
            break;
        }
        cur = infer_pick(kv.logits, c->model.vocab, 0.8f, 0, rng_uniform((uint64_t)step, 0x5a3b1e, (uint64_t)i), NULL);
        ids[i] = (uint32_t)cur;
    }
    uint8_t *text = NULL;
    size_t len = 0, cap = 0;
    if (ids && ok && c->sample_tokenizer) tokenizer_decode(c->sample_tokenizer, ids, (size_t)n, &text, &len, &cap, &e);
    char *t = text ? malloc(len + 1) : NULL;
    if (t) {
        memcpy(t, text, len);
        t[len] = 0;
        if (!c->quiet) {
            /* The console line stays one line: newlines are shown as ⏎, other control bytes as spaces. */
            printf("sample %5ld | ", step);
            for (size_t i = 0; i < len; i++) {
                unsigned char ch = (unsigned char)t[i];
                if (ch == '\n') fputs("⏎", stdout);
                else if (ch < 0x20 || ch == 0x7f) putchar(' ');
                else putchar(ch);
            }
            printf("\n");
        }
    }
    if (ok && (t || ids)) ev_sample(&r->log, step, t, ids, n);
    free(t);
    free(text);
    free(ids);
    kv_free(&kv);
}

/* ================================================================ one optimizer step */

/* What one step measured and decided, filled stage by stage. */
typedef struct {
    long next;                  /* the step this update would complete */
    long ntok;                  /* unmasked target tokens of the step, all ranks */
    long ntok0;                 /* this rank's tokens of its first micro-batch (the noise scale's small batch) */
    double noise[6];            /* b_small, |G_small|², |G|², tr(Σ), B_simple of the step, smoothed B_simple */
    int stop;                   /* a stop signal reached some rank (agreed by all) */
    double t0, t1, t2, t3;      /* start; data ready; gradients reduced; update applied */
    double comm_ms0, comm_b0;   /* communication counters at the start */
    CommStats cs0;
    double loss_sum, loss, norm;
    float lscale, scale, lr;    /* fp16 loss scale (1 otherwise), clip factor, learning rate */
    int overflow, updated, rolled_back, last, stopping;
    double ckpt_ms;
    double hess_ms, hess_loss;  /* Sophia's Hessian pass: its time (0: none this step), the mean loss of
                                   the sampled labels (NaN: none) */
    double hess_bytes;          /* its collectives' bytes (left out of the step's communication) */
    int hess_skipped;           /* its gradient was not finite: the EMA kept its value */
    Status gemm_st;             /* a GEMM failure of this rank's micro-batches (gpt_status) */
    Err gemm_err;
} Step;

/* The step's k micro-batches of this rank, and the global count of their target tokens: the
 * loss denominator, so that accumulation and data parallelism give the loss of one batch. The
 * same small all-reduce agrees on preemption. */
static Status step_data(Run *r, Step *s, Err *err) {
    const TrainConfig *c = &r->cfg;
    int B = c->micro_batch, T = c->seq_len, k = c->grad_accum;
    s->t0 = timer_ms();
    for (int j = 0; j < k; j++)
        loader_fill_rank(&r->train, r->dp_rank, r->dp, j, B, k, r->inp + (size_t)j * B * T, r->tgt + (size_t)j * B * T);
    loader_step_done(&r->train, r->dp, B, k);
    if (r->attempt == c->debug_spike_step) /* test hook: a corrupted batch (random targets) */
        for (size_t i = 0; i < r->batch_ints; i++)
            r->tgt[i] = (int32_t)rng_below(99, 0xbad, i, (uint64_t)c->model.vocab);
    long ntok = 0; /* counted once per dp replica: its tp ranks and pipeline stages share the batch */
    for (size_t i = 0; i < r->batch_ints && r->tp_rank == 0 && r->pp_rank == 0; i++) ntok += r->tgt[i] >= 0;
    s->ntok0 = 0;
    for (size_t i = 0; i < (size_t)B * T; i++) s->ntok0 += r->tgt[i] >= 0;
    s->comm_ms0 = r->comm->stats.wait_ms_total, s->comm_b0 = comm_bytes_total(r->comm), s->cs0 = r->comm->stats;
    int64_t v[2] = {ntok, g_stop_signal != 0};
    Status st = comm_allreduce_i64(r->comm, v, 2, COMM_SUM, err);
    s->ntok = (long)v[0], s->stop = v[1] > 0;
    s->t1 = timer_ms();
    return st;
}

/* The step's micro-batches: this rank's ops of the schedule (pp.h; one process walks the trivial
 * one, F0 B0 F1 B1 …), micro-batch j's dropout counter its index in the global step (rank-major,
 * as one process), each loss divided by the step's token count (times the fp16 loss scale) so the
 * accumulated gradients are those of the whole step; labels (NULL: the targets) for Sophia's pass.
 * Errors: out of memory, a failed point-to-point; GEMM failures stay in the model (gpt_status). */
static Status step_walk(Run *r, const Step *s, float dscale, const PpLabels *labels, double *loss_sum, PpStats *ps,
                        Err *err) {
    const TrainConfig *c = &r->cfg;
    int k = c->grad_accum;
    uint64_t drop0 = ((uint64_t)(r->attempt - 1) * r->dp + r->dp_rank) * k;
    uint64_t *drop = malloc((size_t)k * sizeof *drop);
    if (!drop) return err_set(err, ST_ERR_RUNTIME, "out of memory");
    for (int j = 0; j < k; j++) drop[j] = drop0 + (uint64_t)j;
    Status st = pp_step(r->pp_run, r->inp, r->tgt, c->micro_batch, c->seq_len, dscale, drop, labels, loss_sum, ps, err);
    free(drop);
    return st;
}

/* Forward and backward of each micro-batch (step_walk). A GEMM that failed on the way is kept in
 * s->gemm (gpt_status) for step_grads, which makes every rank stop on it before anything uses the
 * result. */
static void step_micro_batches(Run *r, Step *s) {
    const TrainConfig *c = &r->cfg;
    par_step_begin(r->par, c->grad_accum, s->next); /* the first micro-batch writes the gradients, the others add */
    r->g.s.ms_fwd = r->g.s.ms_bwd = 0;
    s->lscale = c->fp16 ? r->scaler.scale : 1.0f;
    float dscale = s->ntok > 0 ? s->lscale / (float)s->ntok : 0.0f;
    Status st = step_walk(r, s, dscale, NULL, &s->loss_sum, &r->pps, &s->gemm_err);
    if (r->attempt == c->debug_nan_step && r->g.d.grads) r->g.d.grads[r->g.w.layout.tensors[2].offset] = NAN; /* test hook */
    s->gemm_st = gpt_status(&r->g, st == ST_OK ? &s->gemm_err : NULL);
    if (st != ST_OK) s->gemm_st = st;
}

/* The collectives since `before` are some other part's cost (a checkpoint's gathers, Sophia's
 * Hessian pass): the step record's communication (bytes, by kind, waits) leaves them out. */
static void step_comm_exclude(Run *r, Step *s, const CommStats *before) {
    const CommStats *now = &r->comm->stats;
    for (int k = 0; k < COMM_NKIND; k++) {
        s->cs0.bytes[k] += now->bytes[k] - before->bytes[k];
        s->cs0.wait_ms[k] += now->wait_ms[k] - before->wait_ms[k];
        s->comm_b0 += (double)(now->bytes[k] - before->bytes[k]);
    }
    s->comm_ms0 += now->wait_ms_total - before->wait_ms_total;
}

/* Sophia's Hessian estimate (Liu et al. 2023, Gauss-Newton-Bartlett): a forward and backward of
 * the step's own micro-batches with labels drawn from the model's softmax (the model's sampling
 * mode; the draw of each row is keyed by its global position in the run, rank-major like the
 * dropout counter, so any dp × accumulation split draws the same labels), the gradients reduced as
 * a step's, then h ← β2·h + (1 − β2)·B·ĝ² on the owned shard (B: the step's token count; ĝ: the
 * sampled loss's mean gradient). Runs before the step's own pass at steps 1, k+1, 2k+1, ... so the
 * update of that step already reads the new h (paper's Algorithm 1). Its communication is its own
 * (s->hess_bytes), not the step's; a non-finite estimate (fp16 overflow) leaves h as it was. */
static Status step_hessian(Run *r, Step *s, Err *err) {
    const TrainConfig *c = &r->cfg;
    int B = c->micro_batch, T = c->seq_len, k = c->grad_accum;
    double t0 = timer_ms(), cb0 = comm_bytes_total(r->comm);
    CommStats cs0 = r->comm->stats;
    float lscale = c->fp16 ? r->scaler.scale : 1.0f;
    float dscale = s->ntok > 0 ? lscale / (float)s->ntok : 0.0f;
    uint64_t drop0 = ((uint64_t)(r->attempt - 1) * r->dp + r->dp_rank) * k;
    /* test fault hess_rank_local: the draws keyed by rank-local rows */
    uint64_t row0 = c->faults.hess_rank_local ? (uint64_t)(r->attempt - 1) * k * B * T : drop0 * (uint64_t)B * T;
    for (size_t i = 0; i < r->batch_ints; i++) r->hess_u[i] = rng_uniform(c->seed, 0x50f1a, row0 + i);
    par_step_begin(r->par, k, s->next);
    double lsum = 0;
    PpLabels labels = {r->hess_u, r->hess_y};
    PpStats ps; /* the step's own pipeline record stays the step's */
    Err gerr = {0};
    Status wst = step_walk(r, s, dscale, &labels, &lsum, &ps, &gerr);
    Status gst = gpt_status(&r->g, wst == ST_OK ? &gerr : NULL);
    if (wst != ST_OK) gst = wst; /* counted with a GEMM failure below, so every rank stops */
    Status st = par_grads_finish(r->par, err);
    double sums[2] = {r->tp_rank == 0 ? lsum : 0.0, gst != ST_OK};
    if (st == ST_OK) st = comm_allreduce_f64(r->comm, sums, 2, COMM_SUM, err);
    if (st != ST_OK) return st;
    if (gst != ST_OK) return *err = gerr, gst;
    if (sums[1] > 0)
        return err_set(err, ST_ERR_RUNTIME, "step %ld: a GEMM of Sophia's Hessian pass failed on %.0f other rank(s)",
                       s->next, sums[1]);
    double norm;
    if ((st = par_grad_norm(r->par, &norm, err)) != ST_OK) return st;
    s->hess_skipped = !isfinite(norm);
    if (!s->hess_skipped) par_hess_update(r->par, &c->optim, (float)s->ntok / (lscale * lscale));
    s->hess_loss = s->ntok > 0 ? sums[0] / s->ntok : NAN;
    s->hess_ms = timer_ms() - t0;
    s->hess_bytes = comm_bytes_total(r->comm) - cb0;
    step_comm_exclude(r, s, &cs0); /* the pass's collectives are its own cost */
    return ST_OK;
}

/* The gradient noise scale (train/noise.h): each replica's first micro-batch gradient (its tp ranks'
 * squared parts summed) against the step's; the small batch's |G|² is the replicas' mean, its size
 * their mean token count. Collective. */
static Status step_noise(Run *r, Step *s, Err *err) {
    double *part = r->by_rank, *tok = r->by_rank2;
    Status st = comm_allgather_f64(r->comm, par_noise_sumsq(r->par), part, err);
    if (st == ST_OK) st = comm_allgather_f64(r->comm, (double)s->ntok0, tok, err);
    if (st != ST_OK) return st;
    for (int i = 0; i < 6; i++) s->noise[i] = NAN;
    double g2s = 0, bs = 0, ls = s->lscale;
    for (int d = 0; d < r->dp; d++) { /* ranks: tp fastest, then dp (pp is 1 here) */
        double sq = 0, nt = tok[d * r->tp];
        for (int t = 0; t < r->tp; t++) sq += part[d * r->tp + t];
        if (!(nt > 0)) return ST_OK; /* a replica's micro-batch without targets: no estimate */
        double f = (double)s->ntok / (ls * nt); /* the gradient buffer holds sum / (ntok / lscale) */
        r->noise_rep[d] = sq * f * f;
        g2s += sq * f * f / r->dp, bs += nt / r->dp;
    }
    double g2, trs;
    s->noise[0] = bs, s->noise[1] = g2s;
    if (s->overflow || !noise_estimate(g2s, bs, s->norm * s->norm, (double)s->ntok, &g2, &trs)) return ST_OK;
    s->noise[2] = g2, s->noise[3] = trs, s->noise[4] = trs / g2;
    s->noise[5] = noise_update(&r->noise, g2, trs);
    return ST_OK;
}

/* Gradient collectives finished; the global loss, and whether a GEMM failed on any rank (every
 * rank stops then, the failing one with its message); the global norm (and each rank's value of
 * it, logged to show they agree); fp16 overflow; the clip factor and the learning rate. */
static Status step_grads(Run *r, Step *s, Err *err) {
    const TrainConfig *c = &r->cfg;
    Status st = par_grads_finish(r->par, err);
    /* Every tp rank of the last pipeline stage computed the whole loss of its replica's batch: tp
     * rank 0 contributes it, and the world sum gives every rank (every stage) the same loss, so
     * spike detection and the NaN guard decide alike everywhere. */
    double sums[2] = {r->tp_rank == 0 && r->pp_rank == r->pp - 1 ? s->loss_sum : 0.0, s->gemm_st != ST_OK};
    if (st == ST_OK) st = comm_allreduce_f64(r->comm, sums, 2, COMM_SUM, err);
    if (st != ST_OK) return st;
    if (s->gemm_st != ST_OK) return *err = s->gemm_err, s->gemm_st;
    if (sums[1] > 0)
        return err_set(err, ST_ERR_RUNTIME, "step %ld: a GEMM failed on %.0f other rank(s) (their messages say why)",
                       s->next, sums[1]);
    s->loss_sum = sums[0];
    s->loss = s->ntok > 0 ? s->loss_sum / s->ntok : 0.0;
    s->t2 = timer_ms();
    if ((st = par_grad_norm(r->par, &s->norm, err)) != ST_OK) return st;
    if (c->fp16) {
        /* Loss scaling: inf/nan in the scaled gradients means the scale overflowed fp16 — skip the
         * step and halve; otherwise unscale the norm (the update is unscaled in step_update). */
        float before = r->scaler.scale;
        s->overflow = !isfinite(s->norm);
        if (!s->overflow) s->norm /= s->lscale;
        scaler_update(&r->scaler, !s->overflow);
        if (s->overflow) {
            ev_overflow(&r->log, s->next, r->attempt, before, r->scaler.scale);
            r->res->overflows++;
            if (!c->quiet)
                printf("fp16: gradients overflowed at step %ld with loss scale %g: step skipped, scale %g\n", s->next,
                       before, r->scaler.scale);
        }
    }
    if (r->noise_on && (st = step_noise(r, s, err)) != ST_OK) return st;
    s->scale = optim_clip_scale(s->norm, c->grad_clip);
    s->lr = sched_lr(&c->sched, s->next);
    return comm_allgather_f64(r->comm, s->norm, r->by_rank, err);
}

/* Rolls back to the last checkpoint; the loader keeps its position, so the batches that led to
 * the spike are skipped. The health windows stay as they are (the cap counts on). Returns 0 when
 * there is nothing to roll back to. */
static int health_rollback(Run *r, Step *s, Status *st, Err *err) {
    const TrainConfig *c = &r->cfg;
    char path[4096] = "", note[256];
    /* Several ranks saving in the background: commit the last save first (every rank decides the
     * rollback alike, so all of them are here), so that it is the one rolled back to. */
    if (r->sasync && (*st = ckpt_shard_async_wait(r->sasync, r->comm, NULL, err)) != ST_OK) return 1;
    if (!c->ckpt_dir[0] || ckpt_resolve(c->ckpt_dir, "auto", path, sizeof path, note, sizeof note, err) != ST_OK ||
        !path[0])
        return 0;
    CkptMeta back;
    LoaderState keep = loader_get_state(&r->train);
    if ((*st = run_load_ckpt(r, path, &back, err)) != ST_OK) return 1;
    loader_set_state(&r->train, keep);
    if (!c->quiet) printf("health: rolled back to %s (step %ld)\n", path, back.step);
    ev_rollback(&r->log, s->next, back.step, r->attempt, path);
    r->step = back.step;
    ckpt_meta_free(&back);
    r->res->rollbacks++;
    s->rolled_back = 1;
    return 1;
}

/* The detectors decide whether this update happens (log, skip, roll back or stop). A loss
 * scaler overflow is not the model's divergence: it skips without touching the detectors. */
static Status step_health(Run *r, Step *s, Err *err) {
    const TrainConfig *c = &r->cfg;
    HealthVerdict hv;
    if (s->overflow) {
        memset(&hv, 0, sizeof hv);
        hv.action = HEALTH_ACT_SKIP;
    } else {
        hv = health_step(&r->health, &c->health, s->next, s->loss, s->norm);
    }
    if (hv.loss_spike || hv.gnorm_spike || hv.nonfinite) {
        int g = hv.gnorm_spike && !hv.loss_spike;
        SpikeEvent e = {.step = s->next, .batch = r->attempt, .nonfinite = hv.nonfinite,
                        .metric = g ? "grad_norm" : "loss", .action = health_action_name(hv.action),
                        .value = g ? s->norm : s->loss, .median = g ? hv.gnorm_median : hv.loss_median,
                        .z = g ? hv.gnorm_z : hv.loss_z, .tokens_seen = (double)r->attempt * r->batch_tokens};
        ev_spike(&r->log, &e);
        r->res->spikes++;
        if (!c->quiet)
            printf("health: %s at step %ld (batch %ld): %s -> %s\n", hv.nonfinite ? "non-finite values" : "spike",
                   s->next, r->attempt, hv.why, health_action_name(hv.action));
    }
    if (hv.stall) {
        ev_stall(&r->log, s->next, hv.why);
        if (!c->quiet) printf("health: stall at step %ld: %s\n", s->next, hv.why);
    }
    if (hv.action == HEALTH_ACT_STOP) {
        char last_good[4096] = "", note[256];
        Err e2;
        if (c->ckpt_dir[0]) ckpt_resolve(c->ckpt_dir, "auto", last_good, sizeof last_good, note, sizeof note, &e2);
        return err_set(err, ST_ERR_RUNTIME, "step %ld: %s; the weights were not updated; last good checkpoint: %s",
                       s->next, hv.why, last_good[0] ? last_good : "none (no --ckpt-dir)");
    }
    Status st = ST_OK;
    if (hv.action == HEALTH_ACT_ROLLBACK && !health_rollback(r, s, &st, err)) {
        hv.action = HEALTH_ACT_SKIP; /* nothing to roll back to: skip the update instead */
        if (!c->quiet) printf("health: no checkpoint to roll back to, skipping the update instead\n");
    }
    if (st != ST_OK) return st;
    if (hv.action == HEALTH_ACT_SKIP) {
        ev_skip(&r->log, s->next, r->attempt);
        if (r->nskipped < SKIP_RECORD_MAX) r->skipped[r->nskipped++] = r->attempt;
        r->res->skips++;
    }
    s->updated = hv.action == HEALTH_ACT_NONE || hv.action == HEALTH_ACT_LOG;
    return ST_OK;
}

/* --log-layer-stats, before the update: per segment the raw gradient's norm (unscaled by the fp16
 * loss scale, before clipping) and the weights' norm, and a copy of the weights. Segments are the
 * layout's (embeddings, block 0..L-1, final norm); their padding is zero in both buffers. */
static void layer_stats_before(Run *r, float lscale) {
    const ParamLayout *pl = &r->g.w.layout;
    const float *w = r->g.w.params, *g = r->g.d.grads;
    for (int k = 0; k < r->ls_nseg; k++) {
        double gs = 0, ws = 0;
        for (size_t i = pl->seg_off[k]; i < pl->seg_off[k + 1]; i++) gs += (double)g[i] * g[i], ws += (double)w[i] * w[i];
        r->ls_grad[k] = sqrt(gs) / lscale, r->ls_weight[k] = sqrt(ws);
    }
    memcpy(r->ls_prev, w, pl->total * sizeof(float));
}

/* After the update: the norm of the change of each segment's weights. */
static void layer_stats_after(Run *r) {
    const ParamLayout *pl = &r->g.w.layout;
    const float *w = r->g.w.params;
    for (int k = 0; k < r->ls_nseg; k++) {
        double us = 0;
        for (size_t i = pl->seg_off[k]; i < pl->seg_off[k + 1]; i++) {
            double d = (double)w[i] - r->ls_prev[i];
            us += d * d;
        }
        r->ls_update[k] = sqrt(us);
    }
}

/* This rank's part of the update (clip and fp16 unscale folded into the gradient scale), then
 * ZeRO's parameter all-gather. */
static Status step_update(Run *r, Step *s, Err *err) {
    Status st = ST_OK;
    if (s->updated && r->ls_nseg) layer_stats_before(r, s->lscale);
    if (s->updated) {
        /* Muon's matrices follow the schedule's shape at their own peak (--muon-lr); Shampoo's are
         * grafted to Adam and use the run's learning rate. */
        float mlr = r->cfg.sched.lr > 0 ? r->cfg.optim.muon_lr * (s->lr / r->cfg.sched.lr) : 0.0f;
        st = par_optim_step(r->par, &r->cfg.optim, s->next, s->lr, mlr, s->scale / s->lscale, err);
        if (st == ST_OK && r->ls_nseg) layer_stats_after(r);
        if (st == ST_OK) st = par_params_sync(r->par, err);
        r->step = s->next;
    }
    s->t3 = timer_ms();
    return st;
}

/* A checkpoint when due, at the end, and when stopping (signal or --stop-after). */
static Status step_checkpoint(Run *r, Step *s, Err *err) {
    const TrainConfig *c = &r->cfg;
    s->last = s->updated && r->step == c->steps;
    /* One process reads the flag now; under MPI every rank acts on the agreed one. */
    int signalled = s->stop || (r->world == 1 && g_stop_signal != 0);
    s->stopping = signalled || (c->stop_after > 0 && r->step >= c->stop_after && !s->last);
    int due = s->updated && c->ckpt_every > 0 && r->step % c->ckpt_every == 0;
    if (!c->ckpt_dir[0] || s->rolled_back || !(s->last || s->stopping || due)) return ST_OK;
    CkptSaveInfo info;
    CommStats before = r->comm->stats;
    Status st = save_checkpoint(r, r->step, &s->ckpt_ms, &info, err);
    if (st != ST_OK) return st;
    /* A save's gathers are the checkpoint's cost (time_ms.checkpoint), not the step's. */
    step_comm_exclude(r, s, &before);
    ev_ckpt(&r->log, r->step, s->ckpt_ms, r->async || r->sasync ? NULL : info.path, (double)info.bytes, info.pruned);
    /* Young/Daly needs the full write time: for async saves, the background write's. */
    if (!r->async && !r->sasync) note_write_time(r, &info);
    return ST_OK;
}

/* After the first step every buffer and the libraries' scratch are live: measured memory by
 * category, and resident anonymous memory above the start of the run, on every rank. Collective. */
static Status report_memory(Run *r, Step *s, Err *err) {
    size_t rss = mem_rss_anon(), allocated = 0;
    for (int c = 0; c < MEM_NCAT; c++) allocated += r->mem.bytes[c];
    MemoryStepEvent e = {.step = s->next, .allocated_total = (double)allocated, .world = r->world,
                         .rss_above = rss > r->rss_base ? (double)(rss - r->rss_base) : 0.0,
                         .rss_unaccounted = rss > r->rss_base + allocated ? (double)(rss - r->rss_base - allocated) : 0.0};
    memcpy(e.measured, r->mem.bytes, sizeof e.measured);
    double *all = calloc((size_t)r->world * 2, sizeof *all);
    if (!all) return err_set(err, ST_ERR_RUNTIME, "out of memory");
    Status st = comm_allgather_f64(r->comm, e.allocated_total, all, err);
    if (st == ST_OK) st = comm_allgather_f64(r->comm, e.rss_above, all + r->world, err);
    e.allocated_by_rank = all, e.rss_above_by_rank = all + r->world;
    if (st == ST_OK) ev_memory_step(&r->log, &e);
    free(all);
    return st;
}

/* The step's pipeline bubble: measured (the world's idle time over its ranks' time inside the
 * schedule), the formula's ((p − 1)/(v·m + p − 1): the (p − 1)/v stages' worth of idle time of
 * GPipe, 1F1B and interleaved over the step, which assumes equal stages), and the schedule
 * simulated with each stage's measured mean forward, backward and weight-pass times (the uneven
 * stages included). pp_idle gets each rank's idle time. */
static Status pipeline_bubble(Run *r, Step *s, double out[3], Err *err) {
    const PpStats *p = &r->pps;
    double v[2] = {p->idle_ms, p->idle_ms + p->busy_ms};
    Status st = comm_allreduce_f64(r->comm, v, 2, COMM_SUM, err);
    if (st == ST_OK) st = comm_allgather_f64(r->comm, p->idle_ms, r->pp_idle, err);
    /* Each pipeline rank's mean op times (the world's ranks are pp-major: pp rank q's times are
     * those of world rank q·dp·tp, the first of its stage). */
    double *all = calloc((size_t)r->world * 3, sizeof *all), f[SCHED_MAX_P], b[SCHED_MAX_P], w[SCHED_MAX_P];
    if (!all) return err_set(err, ST_ERR_RUNTIME, "out of memory");
    double mine[3] = {p->nf ? p->f_ms / p->nf : 0, p->nb ? p->b_ms / p->nb : 0, p->nw ? p->w_ms / p->nw : 0};
    for (int i = 0; i < 3 && st == ST_OK; i++) st = comm_allgather_f64(r->comm, mine[i], all + (size_t)i * r->world, err);
    for (int q = 0; q < r->pp; q++) {
        int wr = q * r->dp * r->tp;
        f[q] = all[wr], b[q] = all[r->world + wr], w[q] = all[2 * r->world + wr];
        r->pp_stage_ms[0][q] = f[q], r->pp_stage_ms[1][q] = b[q], r->pp_stage_ms[2][q] = w[q];
    }
    /* The op counts, for the record only (the tests' check that every W pass ran): their gathers
     * are the record's cost, not the step's communication. */
    CommStats before = r->comm->stats;
    double cnt[3] = {p->nf, p->nb, p->nw};
    for (int i = 0; i < 3 && st == ST_OK; i++) st = comm_allgather_f64(r->comm, cnt[i], all + (size_t)i * r->world, err);
    for (int q = 0; q < r->pp && st == ST_OK; q++)
        for (int i = 0; i < 3; i++) r->pp_stage_ops[i][q] = all[(size_t)i * r->world + (size_t)q * r->dp * r->tp];
    step_comm_exclude(r, s, &before);
    free(all);
    if (st != ST_OK) return st;
    double m = r->sched.m, P = r->pp, vv = r->sched.v;
    out[0] = v[1] > 0 ? v[0] / v[1] : 0;
    SchedTimes t = {1, 2, 0, 0, f, b, r->sched.split_backward ? w : NULL};
    SchedSim sim;
    Err e;
    out[2] = sched_simulate(&r->sched, &t, &sim, &e) == ST_OK ? sim.bubble : NAN;
    /* zb-h1 has no closed form: its figure is the schedule's own timeline with the measured F, B, W. */
    out[1] = r->sched.split_backward ? out[2] : (P - 1) / (vv * m + P - 1);
    return ST_OK;
}

/* The progress line and the step record. MFU is the job's model FLOP/s over the sum of the ranks'
 * peaks. Collective (step times of every rank). */
static Status step_report(Run *r, Step *s, Err *err) {
    const TrainConfig *c = &r->cfg;
    TrainResult *res = r->res;
    double dt = timer_ms() - s->t0;
    int first = r->attempt == r->start_attempt + 1;
    Status st = first ? report_memory(r, s, err) : ST_OK;
    if (st == ST_OK) st = comm_allgather_f64(r->comm, dt, r->by_rank2, err);
    if (st != ST_OK) return st;
    double mx = 0;
    for (int i = 0; i < r->world; i++) mx = r->by_rank2[i] > mx ? r->by_rank2[i] : mx;
    if (r->nmeasured < r->step_cap) r->step_ms[r->nmeasured++] = dt;
    r->ms_total += dt;
    /* The model FLOPs of the step: its batch, and the same batch again in Sophia's Hessian pass. */
    double tok_s = r->batch_tokens / (dt * 1e-3), mfu = r->fpt * tok_s * (s->hess_ms > 0 ? 2 : 1) / r->peak_job;
    double elapsed = (timer_ms() - r->loop_t0) * 1e-3;
    long done = r->attempt - r->start_attempt, left = c->steps - r->step;
    double eta = done > 0 ? elapsed / done * left : NAN;
    if (first) res->first_loss = s->loss;
    res->last_loss = s->loss;
    res->steps_done = r->step;
    if (!c->quiet) {
        char el[32], et[32];
        fmt_duration(elapsed, el, sizeof el), fmt_duration(eta, et, sizeof et);
        printf("step %5ld/%ld | loss %.4f | lr %.2e | norm %.3f -> %.3f | %7.1f ms | %6.0f tok/s | MFU %4.1f%% | "
               "%s, ETA %s%s%s\n",
               s->next, c->steps, s->loss, s->lr, s->norm, s->norm * s->scale, dt, tok_s, 100 * mfu, el, et,
               s->ckpt_ms > 0 ? " | ckpt" : "", s->updated ? "" : " | not applied");
        fflush(stdout);
    }
    double pipe[4] = {0, 0, 0, 0}; /* pp > 1: bubble measured, formula, simulated; idle of this rank */
    if (r->pp > 1 && (st = pipeline_bubble(r, s, pipe, err)) != ST_OK) return st;
    double comm_ms = r->comm->stats.wait_ms_total - s->comm_ms0, by_kind[COMM_NKIND], tp_ms = 0;
    for (int k = 0; k < COMM_NKIND; k++) {
        by_kind[k] = (double)(r->comm->stats.bytes[k] - s->cs0.bytes[k]);
        if (comm_kind_is_tp((CommKind)k))
            tp_ms += r->comm->stats.wait_ms[k] - s->cs0.wait_ms[k];
    }
    StepEvent e = {.step = s->next, .batch = r->attempt, .loss = s->loss, .lr = s->lr, .grad_norm = s->norm,
                   .grad_norm_clipped = s->norm * s->scale, .grad_norm_by_rank = r->by_rank, .world = r->world,
                   .applied = s->updated, .fp16 = c->fp16, .loss_scale = s->lscale, .tokens = (double)s->ntok,
                   .tokens_seen = (double)r->batch_tokens * r->attempt, .tokens_per_s = tok_s, .mfu = mfu,
                   .elapsed_s = elapsed, .eta_s = eta, .comm_bytes = comm_bytes_total(r->comm) - s->comm_b0,
                   .step_ms_max = mx, .step_ms_median = stats_median_inplace(r->by_rank2, (size_t)r->world), .ms_total = dt,
                   .ms_data = s->t1 - s->t0, .ms_forward = r->g.s.ms_fwd,
                   .ms_backward = (s->t2 - s->t1) - r->g.s.ms_fwd - s->hess_ms,
                   .ms_comm = comm_ms, .ms_comm_dp = comm_ms - tp_ms, .ms_comm_tp = tp_ms,
                   .comm_bytes_by_kind = by_kind, .ms_optimizer = s->t3 - s->t2, .ms_checkpoint = s->ckpt_ms,
                   .pp = r->pp, .pp_idle_ms = r->pps.idle_ms, .pp_busy_ms = r->pps.busy_ms, .pp_f_ms = r->pps.f_ms,
                   .pp_b_ms = r->pps.b_ms, .pp_w_ms = r->pps.w_ms, .pp_bubble = pipe[0], .pp_bubble_formula = pipe[1], .pp_bubble_sim = pipe[2],
                   .pp_idle_by_rank = r->pp > 1 ? r->pp_idle : NULL,
                   .pp_stage_ms = {r->pp_stage_ms[0], r->pp_stage_ms[1], r->pp_stage_ms[2]},
                   .pp_stage_ops = {r->pp_stage_ops[0], r->pp_stage_ops[1], r->pp_stage_ops[2]}, .noise = r->noise_on ? s->noise : NULL,
                   .noise_by_replica = r->noise_rep, .dp = r->dp,
                   .nseg = r->ls_nseg && s->updated ? r->ls_nseg : 0, .seg_grad = r->ls_grad, .seg_weight = r->ls_weight,
                   .seg_update = r->ls_update, .sophia = c->optim.kind == OPT_SOPHIA, .ms_hessian = s->hess_ms,
                   .hess_loss = s->hess_loss, .hess_bytes = s->hess_bytes, .hess_tokens = (double)s->ntok,
                   .hess_skipped = s->hess_skipped};
    ev_step(&r->log, &e);
    return ST_OK;
}

/* Validation every val_every steps, at the end, when stopping, and right after a resume (so a bad
 * resume shows at once); generation samples every sample_every steps and at the end. */
static void step_validate(Run *r, Step *s) {
    const TrainConfig *c = &r->cfg;
    int after_resume = r->start_step > 0 && r->attempt == r->start_attempt + 1;
    int due = s->updated && c->val_every > 0 && (r->step % c->val_every == 0 || r->step == 1);
    if (r->val.nshards && (due || s->last || after_resume || s->stopping)) {
        double tv = timer_ms();
        double vl = validate_loss(&r->g, &r->val, c->val_batches, r->inp, r->tgt, r->pp > 1 ? r->pp_run : NULL, r->comm);
        double vms = timer_ms() - tv;
        if (isnan(r->res->first_val)) r->res->first_val = vl;
        r->res->last_val = vl;
        if (!c->quiet) {
            printf("val   %5ld | loss %.4f | perplexity %.2f | %.0f ms\n", r->step, vl, exp(vl), vms);
            fflush(stdout);
        }
        ev_val(&r->log, r->step, vl, vms);
    }
    if (c->sample_every > 0 && s->updated && (r->step % c->sample_every == 0 || s->last)) log_sample(r, r->step);
}

/* One optimizer step through its stages; *stop is set when the run must end after it. */
static Status train_step(Run *r, int *stop, Err *err) {
    const TrainConfig *c = &r->cfg;
    Step s;
    memset(&s, 0, sizeof s);
    r->attempt++;
    s.next = r->step + 1;
    if (r->attempt >= c->debug_drop_first && r->attempt <= c->debug_drop_last) { /* test hook */
        loader_step_done(&r->train, r->dp, c->micro_batch, c->grad_accum);
        return ST_OK;
    }
    Status st;
    if ((st = step_data(r, &s, err)) != ST_OK) return st;
    s.hess_loss = NAN;
    if (optim_hess_due(&c->optim, s.next) && (st = step_hessian(r, &s, err)) != ST_OK) return st;
    step_micro_batches(r, &s);
    if ((st = step_grads(r, &s, err)) != ST_OK) return st;
    if ((st = step_health(r, &s, err)) != ST_OK) return st;
    if ((st = step_update(r, &s, err)) != ST_OK) return st;
    if ((st = step_checkpoint(r, &s, err)) != ST_OK) return st;
    if ((st = step_report(r, &s, err)) != ST_OK) return st;
    step_validate(r, &s);
    if (s.stopping) {
        r->res->preempted = 1, *stop = 1;
        if (!c->quiet) {
            if (g_stop_signal) printf("stopped by signal %d after step %ld", (int)g_stop_signal, r->step);
            else if (s.stop) printf("stopped by a signal on another rank after step %ld", r->step);
            else printf("stopped after step %ld (--stop-after)", r->step);
            printf("%s\n", c->ckpt_dir[0] ? "; checkpoint saved, resume with --resume auto" : " (no --ckpt-dir: not saved)");
        }
    }
    return ST_OK;
}

/* ================================================================ the end of a run */

/* The last asynchronous write, the medians, the Young/Daly interval, the final weights, the end
 * record and the plan against the measurement. */
static Status run_finish(Run *r, Err *err) {
    const TrainConfig *c = &r->cfg;
    TrainResult *res = r->res;
    Status st;
    if (r->async || r->sasync) {
        CkptSaveInfo info;
        st = r->async ? ckpt_async_wait(r->async, &info, err) : ckpt_shard_async_wait(r->sasync, r->comm, &info, err);
        if (st != ST_OK) return st;
        note_write_time(r, &info);
        if (!c->quiet && info.path[0])
            printf("checkpoint: last asynchronous write %s took %.0f ms in the background\n", info.path, info.ms_write);
    }
    res->final_loss_scale = r->scaler.scale;
    long n = r->nmeasured;
    res->median_step_ms = stats_median_inplace(r->step_ms + (n > 1), (size_t)(n - (n > 1)));
    res->tokens_per_s = r->batch_tokens / (res->median_step_ms * 1e-3);
    if (c->mtbf_hours > 0 && r->first_ckpt_ms > 0 && !c->quiet) {
        /* Young/Daly: the interval minimizing expected lost work + checkpoint overhead. */
        double interval_s = sqrt(2.0 * r->first_ckpt_ms * 1e-3 * c->mtbf_hours * 3600.0);
        printf("checkpoint interval for MTBF %.1f h (Young/Daly sqrt(2 * %.2f s * MTBF)): %.0f s = every %.0f steps\n",
               c->mtbf_hours, r->first_ckpt_ms * 1e-3, interval_s, interval_s / (res->median_step_ms * 1e-3));
    }
    if (c->out_dir[0] && !res->preempted) {
        if ((st = save_weights(r, c->out_dir, err)) != ST_OK) return st;
        if (!c->quiet) printf("saved weights to %s/model.safetensors\n", c->out_dir);
    }
    double plan_ms = r->have_plan ? r->plan.compute.step * 1e3 : 0;
    EndEvent e = {.res = res, .fp16 = c->fp16, .loss_scale = r->scaler.scale, .wall_s = r->ms_total * 1e-3,
                  .have_plan = r->have_plan, .planned_step_ms = plan_ms};
    memcpy(e.peak, r->mem.peak, sizeof e.peak);
    ev_end(&r->log, &e);
    if (r->have_plan && !c->quiet)
        printf("plan: predicted %.1f ms/step, measured median %.1f ms/step (%.2fx)\n", plan_ms, res->median_step_ms,
               res->median_step_ms / plan_ms);
    if (!c->quiet)
        printf("done: %ld steps, median %.1f ms/step, %.0f tokens/s\n", res->steps_done, res->median_step_ms,
               res->tokens_per_s);
    return ST_OK;
}

Status train_run(const TrainConfig *cfg, TrainResult *res, Err *err) {
    Status st = validate(cfg, err);
    if (st != ST_OK) return st;
    memset(res, 0, sizeof *res);
    res->first_val = res->last_val = NAN;
    Run run;
    memset(&run, 0, sizeof run);
    Run *r = &run;
    r->rss_base = mem_rss_anon(); /* before anything of this run is allocated */
    r->cfg = *cfg, r->res = res;
    if ((st = run_setup(r, err)) == ST_OK) {
        signals_install(r);
        r->loop_t0 = timer_ms();
        int stop = 0;
        while (st == ST_OK && !stop && r->step < r->cfg.steps) st = train_step(r, &stop, err);
        if (st == ST_OK) st = run_finish(r, err);
        signals_restore(r);
    }
    run_free(r);
    return st;
}
