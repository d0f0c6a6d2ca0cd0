/* train.h — the trainer as a library call: train_run(&config).
 *
 * Reentrant: all state lives in the call (no globals), so a scaling-law sweep can drive many
 * runs from one process. The step is a schedule over micro-batch slots (DESIGN.md §2): the
 * tokens of the whole step are counted first, each slot's loss is divided by that count, and
 * gradients accumulate, so k micro-batches of B give the update of one batch of k·B. */
#ifndef ST_TRAIN_TRAIN_H
#define ST_TRAIN_TRAIN_H

#include <stdint.h>

#include "comm/comm.h"
#include "core/fault.h"
#include "core/status.h"
#include "model/config.h"
#include "model/layout.h"
#include "model/lora.h"
#include "optim/optim.h"
#include "plan/plan.h"
#include "train/health.h"

#define METRICS_SCHEMA_VERSION 1

/* The most optimizer steps and gradient-accumulation micro-batches a run takes (train refuses more
 * at its flags, as sweep and the studies do for the runs they launch): 1e9 steps is far beyond a
 * real run (the step-time sample is capped: tr_step_cap); more micro-batches ran out of memory
 * allocating their batches. */
#define TRAIN_MAX_STEPS 1000000000L
#define TRAIN_MAX_GRAD_ACCUM 65536

typedef struct {
    ModelConfig model;       /* vocab 0: take it from the shard headers */
    char data[1024];         /* train shards: path or glob */
    char val_data[1024];     /* validation shards ("" = none) */
    char tokenizer[256];     /* recorded with the weights so `sample` can decode ("" = unknown) */
    uint64_t tokenizer_hash; /* refuse shards made with another tokenizer (0 = don't check) */

    int micro_batch;         /* B */
    int seq_len;             /* T */
    int grad_accum;          /* k micro-batches per optimizer step */

    OptimConfig optim;
    Schedule sched;          /* lr, min_lr, warmup, kind, decay; total is set from steps */
    float grad_clip;         /* <= 0: no clipping */
    long steps;

    uint64_t seed;           /* initialisation (and dropout) */
    uint64_t data_seed;      /* data order */

    int threads;
    double peak_flops;       /* 0: measure at start (train/machine_peak.h) */
    char peak_cache[1024];   /* the measured peaks' cache file ("" = none: measure every start) */
    int remeasure_peak;      /* 1: measure the peak even when the cache has it, and update the cache */
    int have_hw;             /* hw holds a hardware profile (--hardware) for the plan's prediction */
    PlanHardware hw;
    int val_every;           /* 0: only at the end (if val_data) */
    int val_batches;         /* micro-batches of B×T per validation */
    int sample_every;        /* generate a sample every N steps and at the end (0: never) */
    int sample_tokens;       /* tokens per generated sample */
    const struct Tokenizer *sample_tokenizer; /* decodes samples (borrowed; NULL: log the ids only) */
    char log_path[1024];     /* JSON Lines metrics ("" = none) */
    char out_dir[1024];      /* final weights (model.safetensors + config.json), "" = none */
    int quiet;               /* no per-step console lines */
    int no_pack;             /* one document per row, padding masked (default: packed rows) */
    int no_noise_scale;      /* 1: do not estimate the gradient noise scale (train/noise.h; it costs
                                one pass over the gradients per step) */
    Recompute recompute;     /* activation recompute level (model/layout.h) */
    int bf16;                /* mixed precision: bf16 GEMM inputs, fp32 master weights and moments */
    int fp16;                /* fp16 working copy and GEMM operands with dynamic loss scaling */
    float loss_scale;        /* fp16: initial loss scale (default 65536) */
    int loss_scale_window;   /* fp16: clean steps before the scale doubles (default 1000) */

    /* Checkpoints (docs/checkpoint.md). */
    char ckpt_dir[1024];     /* "" = no checkpoints */
    int ckpt_every;          /* steps between checkpoints (0: only at the end and on preemption) */
    int keep_last;           /* retention: newest K (<= 0 keeps all) */
    int keep_every;          /* retention: every M-th step forever (0: none) */
    int ckpt_async;          /* copy the state and write it from a background thread */
    char resume[1024];       /* "" | "auto" | a checkpoint directory */
    char overrides[512];     /* comma-separated trajectory fields allowed to change on resume, or "all" */
    char init_from[1024];    /* start from weights: HF safetensors (file or dir) or llm.c .bin */
    double mtbf_hours;       /* > 0: print the Young/Daly checkpoint interval for this MTBF */
    int handle_signals;      /* SIGTERM/SIGINT/SIGUSR1 finish the step, save, exit cleanly (CLI sets it);
                                SIGUSR1 because mpirun forwards it to every rank (docs/checkpoint.md) */
    HealthOptions health;    /* spike / divergence / stall detectors and their policy (train/health.h) */
    long debug_spike_step;   /* test hook: corrupt the batch of this attempt (random targets) */
    long debug_nan_step;     /* test hook: put a NaN into the gradients of this attempt */
    long debug_drop_first, debug_drop_last; /* test hook: consume these batches without training on them */
    Faults faults;           /* test-only faults (core/fault.h; all zero: none), passed on to parallel
                                (ParOptions.faults) and checkpoints (CkptOptions.faults, the loaders) */
    /* Data parallelism (src/parallel, docs/parallel.md). comm NULL: one process, no MPI. */
    Comm *comm;              /* the process grid (from comm_init; not owned) */
    int dp;                  /* data-parallel ranks (0: the world size); dp × tp × pp must be the world */
    int zero;                /* ZeRO stage 0..3 */
    int tp;                  /* tensor-parallel ranks (0, 1: none): Megatron's layer splits */
    int sp;                  /* sequence parallelism inside the tp group (needs tp > 1) */
    int pp;                  /* pipeline stages (0, 1: none) */
    char device[16];         /* --device: where the model computes (model/backend.h: cpu; cuda in a CUDA build) */
    char pp_schedule[16];    /* gpipe | 1f1b | interleaved | zb-h1 (parallel/schedule.h) */
    char pp_layers[256];     /* blocks per (virtual) stage "4,4,3,3" ("" = balanced by FLOPs) */
    int interleave;          /* model chunks per pipeline rank (interleaved schedule; 1 otherwise) */
    int pp_print_schedule;   /* print every rank's op list at the start (rank 0) */
    double comm_timeout;     /* > 0: a collective not done after this many seconds ends the job */
    int no_overlap;          /* start gradient collectives only after the backward pass (measurement) */
    int log_layer_stats;     /* each step record gets layer_stats: per layout segment (embeddings, each
                                block, the final norm) the raw gradient's norm, the weights' norm before
                                the update and the update's norm (one process at ZeRO 0; a copy of the
                                parameters is kept for the update) */
    long stop_after;         /* > 0: stop after this step as if preempted (checkpoint, clean exit); for
                                job time slots: the schedule still spans --steps */
    LoraConfig lora;         /* lora.rank > 0: LoRA fine-tuning of a frozen base (train/lora_train.c,
                                docs/lora.md); 0: ordinary training */
    /* Free-form build info of the caller (e.g. the command line), recorded in `start`. */
    const char *argv_joined;
} TrainConfig;

/* Defaults of every option (the CLI's --help shows them). */
TrainConfig train_default_config(void);

/* What train_run refuses in c before it reads anything (ranges, option combinations): ST_OK or
 * ST_ERR_INPUT naming the flag. sweep checks every run with it before the first one starts. */
Status train_validate(const TrainConfig *c, Err *err);

/* The data-parallel size a run of `world` processes takes with --dp dp, --tp tp, --pp pp (each 0
 * or less: not given): one process is dp 1 (a grid asked of it is refused); else dp when given,
 * else the world over tp × pp; 0 where tp × pp does not divide the world (refused). The one rule of
 * tr_setup_grid and of the CLI's checks that run before it. */
int train_grid_dp(int world, int dp, int tp, int pp);

/* c's --device, checked as train_validate checks it and then opened (train/devemu.h, devemu_open),
 * so that a device that cannot open fails before the caller prepares data: ST_ERR_RUNTIME
 * "--device NAME: <why>". Nothing to open on the CPU. */
Status train_open_device(const TrainConfig *c, Err *err);

typedef struct {
    double first_loss, last_loss;   /* training loss of the first and last step */
    double first_val, last_val;     /* validation loss at the first/last evaluation (NaN if none) */
    double tokens_per_s;            /* median over steps after the first */
    double median_step_ms;
    long steps_done;
    long start_step;                /* 0, or the step a resumed run started after */
    unsigned long long resume_read_bytes; /* bytes this process read from finding to loading the
                                             checkpoint (file_process_read_bytes; 0: no resume) */
    int preempted;                  /* stopped by a signal after saving */
    long spikes, skips, rollbacks;  /* health actions taken */
    long overflows;                 /* fp16 steps skipped by the loss scaler */
    float final_loss_scale;
    long long num_params;
    int err_everywhere;             /* on failure under several ranks: every rank returned this same
                                       error (an invalid flag, the grid, a refusal the ranks agreed
                                       on), so rank 0's copy is enough; 0: this rank's own finding
                                       (a file only it reads), which it must print itself */
} TrainResult;

/* Runs training. Bad configuration or data → ST_ERR_INPUT with a message naming the flag or
 * file; I/O failure → ST_ERR_RUNTIME. Progress lines go to stdout unless quiet. */
Status train_run(const TrainConfig *cfg, TrainResult *res, Err *err);

/* A stage's outcome st (err its message) agreed over c's world, so that a check some ranks fail
 * alone (a file only they read, a flag only their command line has) ends every rank at this point
 * instead of leaving the others in the next collective. A failing rank keeps its error; *everywhere
 * = 1 when it is rank 0's message too (rank 0 prints it once), 0 when it is this rank's own (it
 * must print it itself, named). A rank that passed returns "<stage>: refused on N other rank(s) of
 * W (their messages say why)", *everywhere = 1. Returns st, or that refusal. Collective: every rank
 * calls it after the same stage; one process (c NULL or world 1) returns st. */
Status train_agree(Comm *c, Status st, const char *stage, Err *err, int *everywhere);

/* LoRA fine-tuning (cfg->lora.rank > 0; train_run calls it): the base frozen, the adapters trained
 * (docs/lora.md). Flags it does not implement (tp, pp, ZeRO, bf16, other optimizers, ...) are
 * refused with one line naming them. */
Status lora_train_run(const TrainConfig *cfg, TrainResult *res, Err *err);

/* The plan's input for this configuration on a dp × tp × pp grid, as the trainer builds it for its
 * start record (docs/plan.md): the model, batch, grid, optimizer moments, recompute and the
 * trainer's precisions; the hardware is cfg->hw when cfg->have_hw, else on the CPU this machine's
 * profile cached by `plan` for the run's threads (cfg->peak_cache) and the node_ranks ranks
 * sharing this node (measured together, hwprobe.h's hw_measure_copies; the profile of one rank
 * alone when there is none), else plan's preset with its peaks replaced by `peak` when peak > 0
 * (the trainer passes its measured one). So a caller planning a run (sweep --dry-run) gets the
 * trainer's own planned memory and step time. Returns 1 when the hardware is the cached profile, 2
 * when that profile was measured while other work took more than MACHINE_OTHERS_DISTURBED of the
 * CPUs (its figures low), 3 when it is one rank's alone while node_ranks > 1 share the node. */
int train_plan_input(const TrainConfig *cfg, int dp, int tp, int pp, int node_ranks, double peak, PlanInput *pi);

#endif
