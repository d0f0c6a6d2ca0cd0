/* sweep.h — a grid of short trainings from one spec (docs/sweep.md): `scaletrain sweep SPEC.json`
 * and the studies built on it (cmd_study.c).
 *
 * A spec (JSON) names shared data, base train flags, a grid (model sizes × token budgets, or
 * IsoFLOP compute budgets × model sizes), schedule rules (cosine to each run's own length, warmup
 * as a fraction of it, min lr as a fraction of lr), seeds and flags to vary. sweep_load expands
 * it into runs; each run is a list of `scaletrain train` flags, parsed by train_args_parse (the
 * same parser as `scaletrain train`), so `--list` prints exactly the library call. A run trains
 * through train_run in OUT/runs/<id>/ (log.jsonl, ckpt/, done.json); the results table
 * OUT/results.csv + OUT/results.jsonl is rebuilt from every done.json after each run and written
 * atomically. Re-running skips runs with done.json and resumes the others from their newest
 * checkpoint (--resume auto).
 *
 * FLOPs = layout_flops_per_token(model, T) × tokens: the formula the trainer's MFU and `plan` use.
 * A library of the study module (src/study, issue 24: moved from cli/): errors are a Status with an
 * Err; the only printing is rank 0's progress lines (one per run) and the dry run's table, as
 * train_run prints its own progress; nothing exits. */
#ifndef ST_STUDY_SWEEP_H
#define ST_STUDY_SWEEP_H

#include <stdint.h>

#include "comm/comm.h"
#include "core/status.h"
#include "train/train.h"

/* One parsed `scaletrain train` command line (TrainFlagsParser.parse). */
typedef struct {
    TrainConfig *cfg;   /* the parsed config (set by a successful parse; cfg->argv_joined = joined) */
    const char *joined; /* the command line, "scaletrain train FLAGS" */
    int help;           /* --help was given: the help was printed, cfg is unset */
    void *owner;        /* the parser's own state, freed by release */
} TrainFlags;

/* `scaletrain train`'s flag parser, owned by cli (cli/train_args.h: defaults, presets, refusals, the
 * bundled corpus) and handed in by it, so that every run the engines launch is exactly
 * `scaletrain train FLAGS` (one parser) while study/ does not link cli. */
typedef struct {
    /* Parses argv[0..argc) (no subcommand word) into *f (zeroed first); comm may be NULL. Errors:
     * one line naming the flag or file. Call release after, on success or failure. */
    Status (*parse)(int argc, char **argv, const Comm *comm, TrainFlags *f, Err *err);
    void (*release)(TrainFlags *f); /* frees what parse made; safe on a zeroed TrainFlags */
    int (*option)(const char *name); /* whether name (no dashes) is a train option: -1 no, 0 with a
                                        value, 1 a flag without one */
} TrainFlagsParser;

#define SWEEP_MAX_ARGS 160

/* One run of the grid. */
typedef struct {
    char id[160];            /* directory name under OUT/runs/ (letters, digits, '-', '.', '_') */
    char model[64];          /* the model's label (its "name", preset, or L<layers>C<channels>) */
    int nargs;
    char *args[SWEEP_MAX_ARGS]; /* train flags (malloc'd), the sweep's own last */
    long steps;              /* tokens / batch tokens, rounded, >= 1 */
    long long batch_tokens;  /* B × T × k × dp */
    double tokens;           /* steps × batch_tokens: what the run trains on */
    double tokens_requested; /* the grid's token budget (or C / FLOPs per token) */
    double budget;           /* IsoFLOP: the compute budget C of this run (0 otherwise) */
    double fpt;              /* model FLOPs per token (layout_flops_per_token) */
    double flops;            /* fpt × tokens */
    long long params;        /* model_config_num_params */
    int layers, heads, channels;
    double lr;
    uint64_t seed;
    char vary[256];          /* "key=value,..." of the vary axes ("" if none) */
    char dir[1200];          /* OUT/runs/<id> */
} SweepRun;

typedef struct {
    char path[1024];         /* the spec file */
    char name[128];
    char kind[16];           /* "sizes_tokens" | "isoflop" */
    char out[1024];          /* OUT */
    SweepRun *runs;
    int nruns;
    const TrainFlagsParser *tp; /* the parser of the runs' flags (sweep_load's) */
} Sweep;

/* Reads and expands the spec at path for output directory out (created by sweep_execute, not
 * here). Every refusal is one line naming the file, the key and what was expected
 * (ST_ERR_INPUT): unknown keys anywhere, a bad grid, missing data or validation data, keys the
 * sweep sets per run (steps, warmup, min-lr, seed, log, ckpt-dir, resume, data...). comm: the
 * process grid the runs will use (batch tokens count dp ranks; NULL = one process). tp: train's
 * flag parser, kept in s for the dry run and the execution (it must outlive s). */
Status sweep_load(Sweep *s, const char *path, const char *out, const Comm *comm, const TrainFlagsParser *tp, Err *err);
void sweep_free(Sweep *s);

/* The index of run id, -1 if none. */
int sweep_find(const Sweep *s, const char *id);

/* The run's `scaletrain train` command line, shell-quoted, into buf. */
void sweep_command_line(const SweepRun *r, const char *exe, char *buf, size_t cap);

/* What the dry run shows of run i beside its SweepRun: the trainer's own plan of it
 * (train_plan_input + plan_predict_step). */
typedef struct {
    double memory_bytes; /* planned memory per rank (PlanResult.mem.total) */
    double predicted_s;  /* predicted step time × steps, on plan's hardware profile */
    int done;            /* OUT/runs/<id>/done.json exists */
} SweepRunPlan;

/* Plans run i of s (the dry run: `sweep --dry-run` prints each run's params, tokens, steps, FLOPs
 * and these). Errors: the run's flags refused or its plan failing, "run <id>: plan: ...". */
Status sweep_plan_run(const Sweep *s, int i, const Comm *comm, SweepRunPlan *out, Err *err);

typedef struct {
    int only;                /* >= 0: run only this index */
    int verbose;             /* per-step lines (default: each run quiet, one line per run) */
    long test_stop_after;    /* > 0: every run trained in this call stops after this step as if
                                preempted (tests: an interrupted sweep) */
} SweepExecOptions;

typedef struct {
    int trained, skipped, restarted; /* restarted: done.json missing beside a final checkpoint */
    int failed;              /* trained some steps, then failed (diverged): done.json with status
                                "failed: ..." and no loss, a row of the table all the same */
    int interrupted;         /* a run stopped (signal, test stop) with its checkpoint saved */
    char interrupted_id[160];
} SweepExecResult;

/* Trains every run (or the one selected) that has no done.json, in grid order, through
 * train_run with the process grid comm; writes done.json (rank 0, atomically) and rebuilds the
 * results table after each. A run that fails after training steps (a runtime error: divergence past
 * --max-nonfinite) is recorded as failed and the sweep goes on; bad input stops it. Stops at a run
 * that was interrupted (signal) and says so in *res. */
Status sweep_execute(const Sweep *s, Comm *comm, const SweepExecOptions *o, SweepExecResult *res, Err *err);

/* Rebuilds OUT/results.csv and OUT/results.jsonl from the done.json of every run, in grid order
 * (runs without one are left out); returns how many rows in *rows. */
Status sweep_write_results(const Sweep *s, int *rows, Err *err);

/* OUT/index.html: validation loss against tokens (IsoFLOP: against parameters, one line per budget)
 * and against FLOPs, one line per model, and the table (figures.h; charts inline). */
Status sweep_write_page(const Sweep *s, Err *err);

#endif
