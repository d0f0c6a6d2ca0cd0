/* studies.h — the training-dynamics studies as library calls (docs/studies.md): each trains
 * through the library (train_run, via the sweep engine or study_train), then writes DIR/index.html
 * (figures.h: charts inline) with paragraphs of findings generated from the measured numbers, and
 * DIR/summary.json with the same numbers.
 *
 *   study_lr_transfer  learning-rate sweeps at several widths under SP and under muP (lr_transfer.c)
 *   study_spike        a run with too high a learning rate and no warmup or clipping, and the same
 *                      run with both: spike events and the per-layer diagnosis (spike.c)
 *   study_optimizers   each optimizer at its own best lr on one token budget (optimizers.c)
 *
 * cli (cmd_study.c, cmd_study_opt.c) parses and checks the flags into the options below, calls,
 * and prints the outcome. Here: errors are a Status with an Err naming what failed; rank 0 prints
 * one progress line per phase and run (as the sweep engine does); nothing exits. Every run's flags
 * go through tp, train's own parser (sweep.h). */
#ifndef ST_STUDY_STUDIES_H
#define ST_STUDY_STUDIES_H

#include "comm/comm.h"
#include "core/status.h"
#include "study/study_common.h"
#include "study/sweep.h"

/* What a study hands back to its command. */
typedef struct {
    int interrupted; /* a run was stopped by a signal: running the same command again resumes */
    char *findings;  /* rank 0, when the study finished: the findings paragraphs, one per line
                        (malloc'd); set even when writing the page failed. NULL otherwise. */
} StudyOutcome;

void study_outcome_free(StudyOutcome *o); /* safe on a zeroed outcome */

/* ---- lr-transfer ---- */
typedef struct {
    char out[1024];                   /* DIR: sp/, mup/ (two sweeps), index.html, summary.json */
    int nw, nlr;                      /* nw >= 2 */
    double widths[STUDY_MAXV];        /* model widths C; the first is muP's base width */
    double lrs[STUDY_MAXV];           /* the same learning rates at every width */
    long steps;                       /* >= 1: optimizer steps per run */
    int layers, T, B, vb, threads;    /* blocks, seq-len, micro-batch, val-batches, threads per run */
} LrTransferOptions;

Status study_lr_transfer(const LrTransferOptions *o, Comm *comm, const TrainFlagsParser *tp, StudyOutcome *res, Err *err);

/* ---- spike ---- */
#define STUDY_SPIKE_MAXSTEPS 4096 /* the longest run the spike study reads back */

typedef struct {
    char out[1024];        /* DIR: runs/unstable, runs/stable, index.html, summary.json */
    long steps;            /* 8..STUDY_SPIKE_MAXSTEPS */
    double lr;             /* > 0: the (too high) peak learning rate of both runs */
    double warmup_frac;    /* [0, 1): the stable run's warmup as a fraction of its steps */
    double clip;           /* > 0: the stable run's gradient clipping */
    int layers, channels, heads, T, B, threads;
} SpikeOptions;

Status study_spike(const SpikeOptions *o, Comm *comm, const TrainFlagsParser *tp, StudyOutcome *res, Err *err);

/* ---- optimizers ---- */
typedef struct {
    int layers, width, heads, T, B, threads, vb, val_every; /* val_every >= 1; heads = width / 32 */
    long steps, sweep_steps;
    int timing_rounds, timing_steps; /* phase 3 */
    int quick;                       /* --quick: two grid values per optimizer */
} OsSetup;

typedef struct {
    char out[1024];        /* DIR: sweep/<optimizer>/, final/<optimizer>/, timing/, index.html, summary.json */
    char optimizers[256];  /* comma-separated subset of the table (adamw required) */
    double lr_scale;       /* > 0: multiplies every optimizer's lr grid */
    OsSetup su;            /* checked by the caller */
} OptStudyOptions;

/* Every optimizer of the study's table, comma-separated ("adamw,adam,..."): --optimizers' default. */
void study_optimizers_all(char *buf, size_t cap);

/* Errors: ST_ERR_INPUT naming --optimizers for a bad list, or AdamW's refusal (the setup's). */
Status study_optimizers(const OptStudyOptions *o, Comm *comm, const TrainFlagsParser *tp, StudyOutcome *res, Err *err);

#endif
