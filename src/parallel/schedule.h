/* schedule.h — pipeline schedules as data, their checker and a timing simulator (issue 14).
 *
 * Pure: no MPI, no model. A schedule says, for each of P ranks (pipeline stages), the ordered list
 * of the compute ops that rank runs in one training step; the pipeline runtime executes the list
 * strictly in order, posting the point-to-point messages each op implies. Building the list here,
 * once, lets it be printed (`--pp-print-schedule`), checked for deadlock before the run, and
 * simulated to give the bubble the measured one is compared against.
 *
 * Ops. F = forward, B = backward (for zb-h1 only the input-gradient half), W = weight-gradient pass
 * (zb-h1 only). Each names a micro-batch 0..m-1 and a model chunk 0..v-1 (v > 1 only for
 * interleaved). The model is split into S = P·v virtual stages; chunk c of rank r holds virtual
 * stage s = c·P + r (Megatron's layout), so stage s lives on rank s % P, chunk s / P.
 *
 * Dependencies (what the checker and simulator enforce), for micro-batch j:
 *   F(s, j)  needs F(s-1, j)                     (activations from the previous stage; s > 0)
 *   B(s, j)  needs F(s, j) and B(s+1, j)         (the loss gradient starts at s = S-1)
 *   W(s, j)  needs B(s, j)
 * A dependency on another rank costs the point-to-point latency on top of its finish time.
 *
 * Schedules (sched_build; v = 1 except interleaved):
 *   gpipe        F0..F(m-1) then B0..B(m-1) on every rank (Huang et al. 2019).
 *   1f1b         PipeDream-Flush (Narayanan et al. 2021): rank r runs w = min(P-r-1, m) warm-up
 *                forwards, then m-w pairs "F(w+k) B(k)", then the w cool-down backwards.
 *   interleaved  Megatron's interleaved 1F1B (Narayanan et al. 2021 §2.2) over m·v virtual
 *                micro-batches k: chunk (k mod P·v) / P (reversed for backwards), micro-batch
 *                (k / P·v)·P + k mod P; warm-up 2(P-r-1) + (v-1)P forwards (all of them when
 *                m == P), then one-forward-one-backward, then cool-down. m must be a multiple of P.
 *                v = 1 gives 1f1b (as Megatron dispatches).
 *   zb-h1        Qi et al. 2023 ZB-H1: 1f1b's F/B order with the backward split into B and W; rank r
 *                delays its first r W passes to the end of the step, where they fill the cool-down
 *                bubble; every other W runs right after its pair's B (oldest pending W first). The
 *                peak activations (F done, W not done) are min(P, m) on every rank, the same maximum as
 *                1f1b's rank 0.
 */
#ifndef ST_PARALLEL_SCHEDULE_H
#define ST_PARALLEL_SCHEDULE_H

#include <stddef.h>
#include <stdio.h>

#include "core/status.h"

typedef enum { SCHED_F = 0, SCHED_B = 1, SCHED_W = 2 } PipeOpKind;

typedef enum { SCHED_GPIPE = 0, SCHED_1F1B, SCHED_INTERLEAVED, SCHED_ZB_H1 } SchedType;

typedef struct {
    int kind;  /* PipeOpKind */
    int mb;    /* micro-batch 0..m-1 */
    int chunk; /* model chunk of this rank 0..v-1 (virtual stage chunk·P + rank) */
} SchedOp;

typedef struct {
    SchedType type;
    int p;              /* ranks (pipeline stages) */
    int m;              /* micro-batches per step */
    int v;              /* model chunks per rank (1 unless interleaved) */
    int split_backward; /* 1: B is the input-gradient half and every (mb, chunk) also has a W */
    int cap;            /* room per rank in ops[r] (m·v·3) */
    int *n;             /* [p] ops of each rank */
    SchedOp **ops;      /* [p] rank r's ops in execution order, n[r] of them */
} PipeSchedule;

/* The schedule's name as --pp-schedule spells it ("gpipe", "1f1b", "interleaved", "zb-h1"). */
const char *sched_type_name(SchedType t);

/* The schedule when --pp-schedule is not given: 1F1B, or interleaved with v > 1 chunks per rank.
 * The one rule that `train` and `plan` share. */
SchedType sched_default_type(int v);

/* Parses a --pp-schedule value; ST_ERR_INPUT naming the accepted values otherwise. */
Status sched_type_parse(const char *name, SchedType *t, Err *err);

/* Builds schedule `type` for p ranks, m micro-batches, v chunks per rank. ST_ERR_INPUT (naming the
 * flags) when p, m or v < 1, v > 1 without interleaved, or interleaved with m not a multiple of p.
 * The result passes sched_check. On error *s is zeroed (sched_free-safe). */
Status sched_build(PipeSchedule *s, SchedType type, int p, int m, int v, Err *err);

/* An empty schedule (n[r] = 0, room for m·v·3 ops per rank) to be filled by hand: tests and
 * future hand-written or searched schedules. */
Status sched_init_empty(PipeSchedule *s, SchedType type, int p, int m, int v, int split_backward, Err *err);

/* Frees the lists; safe on a zeroed or half-built PipeSchedule. */
void sched_free(PipeSchedule *s);

/* Completeness: every rank runs every F and B (and W when split_backward) of every micro-batch
 * and chunk exactly once, no W without split_backward, every index in range. ST_ERR_INPUT naming
 * the rank and the missing / repeated / bad op otherwise. Does not look at the order (see
 * sched_simulate for deadlocks). */
Status sched_check(const PipeSchedule *s, Err *err);

/* Durations of one op (per chunk for interleaved: a stage's time / v) and the point-to-point
 * latency added to every dependency that crosses ranks (may be 0). */
typedef struct {
    double t_f, t_b, t_w, t_p2p;
    /* Optional per-rank op times (p entries each; NULL: t_f, t_b, t_w for every rank): a pipeline
     * whose stages differ (the head's stage, an uneven split) simulated with each rank's measured
     * times. */
    const double *rank_f, *rank_b, *rank_w;
    /* Optional per-virtual-stage op times (p·v entries, chunk c of rank r at c·p + r; NULL: the
     * per-rank or common times): interleaved chunks that differ (the head's chunk). */
    const double *stage_f, *stage_b, *stage_w;
} SchedTimes;

#define SCHED_MAX_P 64

typedef struct {
    double makespan;             /* end of the last op anywhere; every rank starts at 0 */
    double busy[SCHED_MAX_P];    /* sum of the rank's op durations */
    double idle[SCHED_MAX_P];    /* makespan - busy: waiting inside the step, before its first op
                                    and after its last */
    double bubble;               /* sum(idle) / (p · makespan): the step's idle fraction */
    int peak_inflight[SCHED_MAX_P]; /* most (mb, chunk) activation sets the rank holds at once:
                                       F done and the releasing op (W if split, else B) not */
} SchedSim;

/* Runs the schedule as the runtime would: each rank executes its list strictly in order, an op
 * starts when the rank is free and its dependencies (above) have finished (+ t_p2p across ranks).
 * Checks completeness first (sched_check). A schedule whose ranks cannot all finish is a deadlock:
 * ST_ERR_INPUT naming the first blocked rank, its next op, the op it waits for and what that op's
 * rank is blocked at. p ≤ SCHED_MAX_P. */
Status sched_simulate(const PipeSchedule *s, const SchedTimes *t, SchedSim *out, Err *err);

/* One op as printed: "F3", "B0", "W2"; with v > 1 the chunk follows: "F3.1". Returns the length
 * (snprintf's contract). */
int sched_op_format(const PipeSchedule *s, SchedOp op, char *buf, size_t cap);

/* One line per rank, "rank 0: F0 F1 B0 F2 B1 B2\n", for --pp-print-schedule. */
void sched_print(const PipeSchedule *s, FILE *f);

#endif
