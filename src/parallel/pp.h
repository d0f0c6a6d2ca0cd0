/* pp.h — the step's micro-batch loop for every pp: executes this rank's ops of a schedule
 * (schedule.h) over the model's stage API (gpt_forward_stage / gpt_backward_stage) and comm's
 * point-to-point (issue 14). One process (pp 1) is the trivial schedule, 1F1B with P = 1
 * (F0 B0 F1 B1 …): there F is the whole model's gpt_forward, B its gpt_backward, and nothing is
 * sent (issue 24: the trainer's step and Sophia's Hessian pass walk the same loop).
 *
 * Per step, the rank walks its op list strictly in order:
 *   F(mb, chunk)  takes a free activation slot; unless it is virtual stage 0, receives the
 *                 previous stage's activations into the slot's input; runs the chunk's forward;
 *                 unless it is the last virtual stage, sends the chunk's output (straight from the
 *                 slot, which stays untouched until its backward) to the next stage.
 *   B(mb, chunk)  unless it is the last virtual stage, receives the output gradient; runs the
 *                 chunk's backward (par_micro_begin(mb) first, so the data-parallel buckets start
 *                 on the last micro-batch); unless it is virtual stage 0, copies the input
 *                 gradient into a send buffer and sends it; frees the slot.
 * Sends are non-blocking and progressed between kernels (par_set_progress). No op waits for a send
 * of its own rank to complete (that could wait for a peer waiting for this rank): a slot's
 * activation send is complete once its gradient came back, and a gradient goes out of a buffer
 * from a pool (MEM_COMM) that grows when every buffer is in flight — usually one or two. Receives are posted when their op comes and waited at once: the time
 * spent waiting (for a message, a slot, or at the end for the last rank to finish: a barrier) is the
 * rank's idle time, the pipeline bubble it sees.
 * Tags: (micro-batch · S + virtual stage) · 2 + direction, S = P · v virtual stages.
 *
 *   W(mb, chunk)  (zb-h1: the model built with GptOptions.split_backward, whose B computes input
 *                 gradients only) the chunk's weight GEMMs; frees the slot.
 * The schedule must have been checked (sched_simulate: complete and deadlock-free with unbounded
 * buffers). */
#ifndef ST_PARALLEL_PP_H
#define ST_PARALLEL_PP_H

#include <stdint.h>

#include "comm/comm.h"
#include "core/status.h"
#include "model/gpt.h"
#include "parallel/parallel.h"
#include "parallel/schedule.h"

typedef struct {
    double idle_ms;      /* waiting for a receive, a slot's sends, or the step's last rank */
    double busy_ms;      /* inside forward and backward ops */
    double f_ms, b_ms, w_ms; /* of which forwards, backwards, weight passes (per op: divide by nf, nb, nw) */
    int nf, nb, nw;
    /* the same per chunk of this rank (interleaved: chunk c is virtual stage c·P + rank; the head's
     * chunk, the last rank's last, is not its other chunks' size) */
    double chunk_ms[3][LAYOUT_MAX_CHUNKS];
    int chunk_ops[3][LAYOUT_MAX_CHUNKS];
    double sent_bytes;   /* point-to-point bytes this rank sent */
} PpStats;

typedef struct PpRun PpRun;

/* Labels drawn from the model's softmax instead of the targets (Sophia's Hessian pass;
 * gpt_set_label_sampling): micro-batch j's forward draws at u + j·B·T and writes its labels to
 * y + j·B·T. Whole model only (pp 1). */
typedef struct {
    const float *u;
    int32_t *y;
} PpLabels;

/* For the model g (built with GptOptions.stage = this rank's chunks of the schedule's virtual
 * stages and slots >= the schedule's peak in flight on this rank; with c->pp == 1 the whole model
 * and a one-rank schedule of one chunk without weight passes) and its Par. The schedule is
 * borrowed and must outlive the runtime. ST_ERR_INPUT when the schedule does not fit the model
 * or the grid. */
Status pp_init(PpRun **out, Comm *c, Gpt *g, Par *par, const PipeSchedule *s, Err *err);
void pp_free(PpRun *pr);

/* One step: m = s->m micro-batches of B×T, micro-batch j at inp + j·B·T (tgt alike; every rank
 * holds them: stage 0 reads the inputs, the last stage the targets, all of them the masks),
 * dropout counter drop[j]; labels (NULL: the targets) only at pp 1. *loss_sum gets the loss sum on
 * the rank running the last virtual stage (0 elsewhere). Errors: a failed point-to-point
 * (ST_ERR_RUNTIME naming the op). The caller runs par_step_begin before and par_grads_finish
 * after; GEMM failures stay in the model (gpt_status). */
Status pp_step(PpRun *pr, const int32_t *inp, const int32_t *tgt, int B, int T, float dscale, const uint64_t *drop,
               const PpLabels *labels, double *loss_sum, PpStats *st, Err *err);

/* Evaluation forward of one micro-batch (no dropout, no gradients) through every virtual stage in
 * order, each rank running its chunks with slot 0 (call it between steps; pp > 1 only). *loss_sum gets the
 * loss sum on the rank running the last virtual stage (0 elsewhere). */
Status pp_eval(PpRun *pr, const int32_t *inp, const int32_t *tgt, int B, int T, double *loss_sum, Err *err);

#endif
