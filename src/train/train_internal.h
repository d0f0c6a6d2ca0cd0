/* train_internal.h — what the trainer's files (train.c, train_setup.c, train_ckpt.c, train_step.c)
 * share and nothing outside src/train sees: the Run a train_run owns, the Step one optimizer step
 * fills, and the functions one file calls in another. */
#ifndef ST_TRAIN_TRAIN_INTERNAL_H
#define ST_TRAIN_TRAIN_INTERNAL_H

#include <signal.h>

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
#include "train/machine_peak.h"
#include "train/stop.h"
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
#include "train/train.h"

/* The pipeline's runtime state on this rank (pp > 1; the schedule is checked before allocation). */
typedef struct {
    PipeSchedule sched;         /* the schedule */
    StageBlocks stage;          /* this rank's chunks of blocks */
    int slots;                  /* activation sets (the schedule's peak in flight here) */
    int first[LAYOUT_MAX_CHUNKS * SCHED_MAX_P], last[LAYOUT_MAX_CHUNKS * SCHED_MAX_P]; /* per virtual stage */
    int peak_inflight[SCHED_MAX_P];
    PpRun *run;                 /* the runtime that walks the schedule (also pp 1's trivial one) */
    PpStats stats;              /* the last step's pipeline timings */
    double *idle;               /* world doubles: each rank's pipeline idle time of the step */
    /* Each stage's mean forward, backward and weight-pass time (ms per op) and its count of each op
     * in the step (the first rank of the stage's): the step record's by-stage figures. */
    double stage_ms[3][SCHED_MAX_P], stage_ops[3][SCHED_MAX_P];
    /* Interleaved (v > 1): each virtual stage's mean forward, backward and weight-pass time, chunk
     * c of pp rank q at c·pp + q (what bubble_simulated used): the S = pp·v forward times, then the
     * S backward times, then the S weight-pass times. */
    double vstage_ms[3 * LAYOUT_MAX_CHUNKS * SCHED_MAX_P];
} RunPipe;

/* Checkpoint writing. */
typedef struct {
    CkptAsync *async;           /* one process: the background writer of the whole state */
    CkptShardAsync *sasync;     /* several ranks: each rank's background writer (ckpt/shard.h) */
    unsigned char *write;       /* several ranks: which tensors of its layout this rank writes */
    float *xstate;              /* a save in progress: the optimizer's state outside the layout
                                   (par_get_extra_state), NULL when it has none */
    size_t xstate_n;
    double first_ms;            /* the first save's time (the Young/Daly interval's write time) */
} RunCkpt;

/* Resume: decided before allocation, applied after. */
#define SKIP_RECORD_MAX 1024
typedef struct {
    char path[4096];            /* the checkpoint to continue from ("" = a fresh start) */
    char note[2048];            /* what --resume found, for the console and the start record */
    long step;                  /* optimizer steps done before this run */
    long attempt;               /* batches consumed before this run */
    long skipped[SKIP_RECORD_MAX]; /* batches whose update was skipped (logged and checkpointed) */
    int nskipped;
    unsigned long long read0;  /* file_process_read_bytes when the search began */
} RunResume;

/* --log-layer-stats: the parameters before the update and the norms per segment. */
typedef struct {
    float *prev;
    float *host; /* a device run: the gradients, then the updated weights, copied to the host */
    int nseg;
    double *grad, *weight, *update;
} RunLayerStats;

/* Accounting fixed at start. */
typedef struct {
    long long batch_seqs, batch_tokens;
    double fpt;                 /* model FLOPs per token */
    double peak, peak_job;      /* this rank's peak FLOP/s, and the sum over ranks (MFU's denominator;
                                   raised to a step's achieved model FLOP/s when that beats it) */
    int peak_raised;            /* a step beat the peak (the notice is printed once) */
    const char *peak_kind;      /* what gave `peak` (mpeak.kind, or "given") */
    MachinePeak mpeak;          /* the probe's and the GEMM's figures (zero when --peak-gflops) */
    MachinePeakOptions po;      /* what mpeak was resolved with (valid when speed[0] > 0) */
    double speed[2];            /* this machine's GEMM check at start and at the end over its cached
                                   figure (machine_peak_speed; 0: not a cached peak, or not run) */
    PlanResult plan;
    int have_plan;
    const char *plan_hw;        /* what priced the plan, for its end line (--hardware's name, the cached
                                   profile, or the preset at the run's peak) */
    size_t rss_base;            /* resident anonymous memory before the run allocated anything */
} RunAccounting;

/* The gradient noise scale (train/noise.h). */
typedef struct {
    NoiseScale avg;             /* its averages */
    int on;                     /* estimated: pp 1 and two batch sizes (dp >= 2 or grad_accum >= 2) */
    double *rep;                /* dp doubles: each replica's first-micro-batch |G_small|² of the step */
} RunNoise;

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
    RunPipe pipe;
    int32_t *inp, *tgt;         /* the step's k micro-batches, (k, B, T) */
    size_t batch_ints;
    float *hess_u;              /* Sophia: the label draws of the Hessian pass, like tgt */
    int32_t *hess_y;            /* Sophia: the labels drawn */
    double *step_ms;            /* wall time of each step, for the medians */
    long nmeasured, step_cap;
    double *by_rank;            /* world doubles: one value per rank, for per-rank records */
    int threads_auto;           /* --threads 0: cfg.threads is this rank's share of its node */
    double *by_rank2;
    double *peak_by_rank;   /* each rank's peak FLOP/s at start (the start record's peak_flops_by_rank) */
    double *comm_by_rank;   /* each rank's exposed communication of the step (ms), before the report's gathers */
    EventLog log;
    cJSON *config;
    HealthState health;         /* spike / divergence detectors (train/health.h) */
    LossScaler scaler;          /* fp16 dynamic loss scaling */
    RunNoise ns;
    RunCkpt ck;
    RunResume rs;
    RunLayerStats ls;
    RunAccounting acct;

    /* Progress. `step` counts optimizer updates (Adam's t, the schedule, checkpoints); `attempt`
     * counts batches consumed. They differ only after health actions skipped or rolled back. */
    long step, attempt;
    double ms_total, loop_t0;
    TrSignals sig;
    int ckpt_lock;          /* --ckpt-dir's .lock, held open (flock) for the run: -1 none */
} Run;

/* What one step measured and decided, filled stage by stage. */
typedef struct {
    long next;                  /* the step this update would complete */
    long ntok;                  /* unmasked target tokens of the step, all ranks */
    long ntok0;                 /* this rank's tokens of its first micro-batch (the noise scale's small batch) */
    double span;                /* --doc-mask: the step's attention span Σ L_i² / tokens over every row of
                                   the global batch (layout_doc_span), the MFU's attention term */
    double noise[6];            /* b_small, |G_small|², |G|², tr(Σ), B_simple of the step, smoothed B_simple */
    int stop;                   /* a stop signal reached some rank (agreed by all) */
    double t0, t1, t2, t3;      /* start; data ready; gradients reduced; update applied */
    double comm_ms0, comm_b0;   /* communication counters at the start */
    CommStats cs0;
    long ahead0;          /* par_zero_gathers_ahead at the step's start (ZeRO 3) */
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


/* ---- across the trainer's files (contracts at their definitions) ---- */
void tr_fmt_duration(double s, char *buf, size_t len);
int tr_split_list(char *buf, const char **out, int max);
double tr_comm_bytes_total(const Comm *c);
/* One copy of a device buffer to the host, the backend's first error taken into err. */
static inline Status tr_to_host(const Backend *be, void *dst, const void *src, size_t bytes, Err *err) {
    be->to_host(dst, src, bytes);
    return be->take_error(err);
}

/* How many step times a run keeps for its medians (both trainers): every step, those a rollback runs
 * again included (twice the steps), at most 2,000,064 (16 MB); a longer run's medians are over its
 * first two million. The LoRA loop allocated steps + 1 of them: 8 GB asked for at --steps 1e9. */
static inline long tr_step_cap(long steps) { return (steps < 1000000 ? steps : 1000000) * 2 + 64; }

Status tr_setup_grid(Run *r, Err *err);
Status tr_setup_data(Run *r, Err *err);
/* A setup stage's outcome st (err its message) agreed over the world, so a check that failed on
 * some ranks alone ends every rank here instead of leaving the others in the next collective: a
 * failing rank keeps its error (marked err_everywhere when it is rank 0's message too); a rank that
 * passed returns "<stage>: refused on N other rank(s) (their messages say why)". Returns st, or that
 * refusal. Collective over the world: every rank must call it after the same stage. */
Status tr_agree_setup(Run *r, Status st, const char *stage, Err *err);
Status tr_setup_same_config(Run *r, Err *err);
/* Collective: every rank's allowed CPUs and node gathered; *threads 0 (--threads' default) becomes
 * this rank's share of its node (machine_auto_threads); every rank's threads gathered into by_rank
 * (world entries; NULL: not kept). Rank 0 (unless quiet) prints grid (when not NULL) with each
 * rank's threads, and warns once where threads exceed a rank's allowed CPUs or a node's CPUs
 * (docs/parallel.md, "Threads and CPUs"). The full trainer and LoRA's both call it. */
Status train_threads(Comm *comm, int *threads, double *by_rank, const char *grid, int quiet, Err *err);
Status tr_setup_model(Run *r, Err *err);
Status tr_setup_outputs(Run *r, Err *err);
/* The peak MFU divides by (a->peak: --peak-gflops, a device's --hardware peak, else the measured
 * best of the FMA probe and a GEMM; a->peak_job: every rank's summed, by_rank[world] each one's) and
 * the plan's input for this grid on the trainer's hardware (train_plan_input), its label in
 * a->plan_hw. Collective. The full trainer's and the LoRA loop's accounting share it. */
Status tr_peak_and_plan_input(const TrainConfig *c, const Backend *be, Comm *comm, int dp, int tp, int pp,
                              RunAccounting *a, double *by_rank, PlanInput *pi, Err *err);
Status tr_setup_accounting(Run *r, Err *err);
/* The end's console lines: "plan: predicted ..." (plan_ms > 0: a plan, a->plan_hw its label) and
 * "done: ...", tail appended to the latter ("" or " | lora"). */
/* The end's GEMM check (a->speed[1]), where the start's ran: every rank at the same point. */
void tr_recheck_speed(RunAccounting *a);
/* The console note when either check ran under 0.9 of the cached figure (rank 0). */
void tr_print_speed(const RunAccounting *a);
void tr_print_end(const RunAccounting *a, double plan_ms, const TrainResult *res, const char *tail);
double tr_step_mfu(RunAccounting *a, EventLog *log, const TrainConfig *c, long step, double rate, int say);
/* 1 when step is one the schedule validates at: every val_every steps (> 0) and step 1. The end,
 * a stop and the step after a resume are validated too (each loop adds them). */
int tr_val_due(long step, int val_every);
Status tr_announce(Run *r, Err *err);
void tr_print_init_from(const TrainConfig *c);
void tr_print_data(const TrainConfig *c, const Loader *train, const Loader *val);
void tr_print_batch(const TrainConfig *c, int dp, long long seqs, long long tokens);
void tr_print_memory(const MemStats *mem);
/* what: words after "FLOP/token" ("" for the full trainer) */
void tr_print_compute(const TrainConfig *c, const RunAccounting *a, int threads_auto, const char *what);
Status tr_resume_find(Run *r, Err *err);
/* The first position of n whose input or target id is not below the vocabulary V (a target may be
 * -1: masked), or -1. The shards' ids are checked when they open; a shard rewritten in place during
 * the run (same size, other content) is read as it is then, and an id past the embedding table would
 * be read out of bounds. */
static inline long tr_bad_id(const int32_t *inp, const int32_t *tgt, size_t n, int V) {
    for (size_t i = 0; i < n; i++)
        if ((uint32_t)inp[i] >= (uint32_t)V || (tgt[i] >= 0 && tgt[i] >= V) || tgt[i] < -1) return (long)i;
    return -1;
}
/* The step's stop word, one element of its small all-reduce (summed over ranks, the bytes plan
 * counts): the ranks asking to stop, + 2^32 × the ranks whose batch has a bad id (bad >= 0). */
static inline int64_t tr_stop_word(int stop, long bad) { return (int64_t)(stop != 0) + ((int64_t)(bad >= 0) << 32); }
static inline int tr_word_stop(int64_t w) { return (w & 0xffffffff) > 0; }
/* ST_OK, or (some rank's batch had a bad id, the word says) the error every rank stops with: this
 * rank's ids at bad, or another rank's. */
Status tr_word_bad_ids(int64_t w, const TrainConfig *c, const int32_t *inp, const int32_t *tgt, long bad, Err *err);
/* The run's outputs, claimed before anything is written (collective; both trainers): refuses
 * outputs that would overwrite its inputs (--log being a training or validation shard or a file of
 * the --init-from weights or of the resumed checkpoint resume_dir, NULL or "" none; --out being the
 * --init-from folder, the resumed checkpoint, a step_ folder of --ckpt-dir or any folder holding a
 * state.json: ST_ERR_INPUT, one line naming both); then rank 0 takes --ckpt-dir's lock into *lock
 * (file_lock_dir on DIR/.lock) and, for a run without --resume, refuses a --ckpt-dir that holds
 * checkpoints; every rank agrees on the outcome (train_agree; *err_everywhere as there). val's
 * shards count when --val-data is given. */
Status tr_claim_outputs(Comm *comm, const TrainConfig *c, const Loader *train, const Loader *val, const char *resume_dir,
                        int *lock, int *err_everywhere, Err *err);
/* The training data as resolved: [{"weight": w, "files": [[name, bytes, fingerprint], ...]}, ...]
 * per dataset (file names without their folder, sizes in bytes, shard_fingerprint in 16 hex
 * digits), the config's "data_files": what a resume compares (ckpt_check_config), so that a glob
 * matching other files, or a shard prepared again in place, is refused and the same files spelled
 * another way are not. NULL when out of memory. */
struct cJSON *tr_data_files_json(const Loader *l);
float *tr_run_staging(Run *r, const ParamLayout *pl, int n);
void tr_run_staging_free(Run *r, const ParamLayout *pl, float *p, int n);
void tr_slices_from_full(Run *r, float *local, const float *full, int n);
Status tr_run_load_ckpt(Run *r, const char *path, CkptMeta *meta, Err *err);
Status tr_resume_load(Run *r, Err *err);
void tr_note_write_time(Run *r, const CkptSaveInfo *info);
Status tr_save_weights(Run *r, const char *out_dir, Err *err);
Status tr_save_checkpoint(Run *r, long step, double *ms, CkptSaveInfo *info, Err *err);
Status tr_train_step(Run *r, int *stop, Err *err);

#endif
