/* parallel.h — data parallelism over the dp group of a Comm, with ZeRO stages 0–3 (issue 6), and
 * the tensor-parallel collectives of a model slice (issue 13).
 *
 * Implemented one file per mechanism (issue 24): parallel.c composes zero.c (ZeRO, the dp hooks),
 * tp.c (tp hooks, the norm's replicated pieces, whole tensors from slices), pp_tied.c (the
 * pipeline's tied wte), matopt.c (Muon, Shampoo, Sophia); parallel_internal.h holds their Par.
 *
 * The model knows nothing of communication: par_init installs the Gpt's hooks (gpt.h) and from
 * them starts, progresses and finishes the collectives of a step. Design and memory formulas:
 * docs/parallel.md.
 *
 * Tensor parallelism. A model built with GptOptions.tp = c->tp, tp_rank = c->tp_rank holds a slice
 * (layout_init_tp); everything below then works on that slice's layout over the dp group (ZeRO
 * shards a tp slice over the ranks with the same tp coordinate), and par_init also installs the
 * tp_* hooks on comm_tp_*. The global gradient norm counts the tensors every tp rank holds whole
 * (LayerNorms, wpe, row-parallel biases) once.
 *
 * Ownership. The layout is built with shard_multiple = dp, so segment s (0 embeddings, 1..L
 * blocks, L+1 final norm) of length len[s] splits into dp blocks of blk[s] = len[s]/dp floats;
 * dp rank r owns [off[s] + r·blk[s], +blk[s]) of every segment. Its *shard* is the concatenation
 * of its blocks in segment order (S = total/dp floats): sharded moments, gradients (stage ≥ 2)
 * and parameters (stage 3) live in that order.
 *
 * Stages (what each rank stores; G = gradients, P = parameters, M = moments):
 *   Every collective runs in pieces of ≤ bucket_floats (4 MiB) through one scheduler (zero.c:
 *   queued in hook order, started in that order, at most ZERO_IN_FLIGHT (2) all-reduce or
 *   ZERO_RS_IN_FLIGHT (8) ring reduce-scatter pieces at once so the MPI library's and the ring's
 *   temporaries stay bounded (2 on a device: its host slots), progressed and refilled by comm_test
 *   in before_forward, before_backward and grads_ready). A reduce-scatter or all-gather piece is the
 *   same floats of every rank's block (layout_dp_piece_floats), so it runs comm's ring and sums in
 *   the unsplit segment's order.
 *   0  P, G, M full; per-segment gradient all-reduce (buckets of ≤ bucket_floats), queued at
 *      grads_ready on the last micro-batch, waited before the norm; every rank runs the optimizer
 *      on the whole range.
 *   1  P, G full, M sharded; per-segment in-place reduce-scatter at grads_ready of the last
 *      micro-batch; each rank updates its blocks; per-segment all-gather of P queued after the
 *      update and waited by that segment's next before_forward (--no-overlap, a device: at once).
 *   2  as 1, but G sharded: backward writes each segment into a bucket (external gradients; the
 *      g->d.g views are re-pointed from the hooks), the bucket is reduce-scattered at grads_ready of
 *      EVERY micro-batch and its owned block ADDED to the gradient shard (DeepSpeed's scheme).
 *   3  as 2, and P sharded (external parameters): a segment is all-gathered into a gather buffer
 *      before its forward and again before its backward, the next one prefetched meanwhile; the
 *      embedding segment has its own buffer (wte is the tied LM head) and stays gathered until
 *      the optimizer changes it.
 *
 * Pipeline (c->pp > 1, ZeRO 0-1): the model holds a stage (GptOptions.stage); every segment it does
 * not hold is empty. The gradients start from zero each step (micro-batches are in flight together).
 * The first and last stage both hold wte (embedding and tied head): par_grads_finish first sums
 * their two gradient parts between them (point-to-point, in chunks of bucket_floats through a
 * MEM_COMM buffer), then reduces the segment over dp; both copies stay identical, and the norm
 * counts wte on the first stage only.
 *
 * Gradients are SUMMED over ranks; the caller divides the loss by the global token count, so the
 * step equals one process running the same global batch (up to summation order).
 *
 * Threads: every call comes from the thread that called comm_init, between kernels. */
#ifndef ST_PARALLEL_PARALLEL_H
#define ST_PARALLEL_PARALLEL_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "core/fault.h"
#include "core/mem.h"
#include "core/status.h"
#include "model/gpt.h"
#include "model/layout.h"
#include "optim/optim.h"

/* The default bucket of stage 0's gradient all-reduce and the largest piece of ZeRO's other
 * collectives, in floats (4 MiB): one source with plan, model/layout.h's LAYOUT_BUCKET_FLOATS
 * (plan_trainer_comm books the same buckets and pieces). */
#define PAR_DEFAULT_BUCKET_FLOATS LAYOUT_BUCKET_FLOATS

typedef struct {
    int zero;             /* ZeRO stage 0..3 */
    size_t bucket_floats; /* largest request of ZeRO's collectives (default PAR_DEFAULT_BUCKET_FLOATS) */
    int overlap;          /* 1 (default): start buckets from grads_ready; 0: start all after the
                             backward pass (for measuring how much overlap hides) */
    int n_moments;        /* optimizer moment buffers (optim_num_moments) */
    int nt;               /* threads for the norm and copies */
    int muon;             /* 1: OPT_MUON — the hidden matrices (layout_hidden_matrices) get Muon's
                             whole-matrix update, each on one owner rank (docs/optimizers.md) */
    int muon_bf16;        /* Muon's Newton–Schulz GEMMs on bf16 operands (--precision bf16) */
    int shampoo;          /* 1: OPT_SHAMPOO — the hidden matrices' blocks (layout_shampoo_blocks) get
                             Shampoo's update, each block on one owner rank (docs/optimizers.md) */
    int shampoo_block, precond_every; /* Shampoo's block side and root interval */
    float shampoo_eps;    /* ε of Shampoo's roots */
    int noise;            /* 1: keep the squared norm of this rank's first micro-batch gradient
                             (par_noise_sumsq), for the gradient noise scale (train/noise.h) */
    Faults faults;        /* test-only faults (core/fault.h; all zero: none): grad_scale, kill_*,
                             tp_skip_backward, pp_skip_tied, matrix_no_share, matrix_reset */
} ParOptions;

ParOptions par_default_options(void);

typedef struct Par Par;

/* ST_ERR_INPUT (one line naming --zero and --pp, and why) for a ZeRO stage that does not combine
 * with a pipeline of pp stages: 2 and 3 (every micro-batch would reduce-scatter its gradients or
 * gather the parameters, m times a step). Checked by the trainer before allocation and by par_init. */
Status par_check_grid(int zero, int pp, Err *err);

/* Sets the model options a dp group at a ZeRO stage needs: shard_multiple = dp, external
 * gradients from stage 2, external parameters at stage 3. */
void par_gpt_options(int dp, int zero, GptOptions *o);

/* Planned bytes per MemCategory of everything gpt_init (options of the stage) and par_init
 * allocate for parameters, gradients, master weights and moments on one rank of a dp group
 * (other categories 0): layout_zero_bytes with the trainer's element sizes (layout_state_bytes;
 * lowp = GPT_BF16 or GPT_FP16), whose header has the formulas. pl must be built with
 * shard_multiple = dp. */
/* o supplies zero, n_moments and the matrix optimizer: o->muon adds Muon's buffers to MEM_MOMENTS
 * (layout_muon_bytes with bf16 = (lowp == GPT_BF16)), o->shampoo dp rank `rank`'s Shampoo buffers
 * and owned block state (layout_shampoo_bytes). */
void par_planned_bytes(const ParamLayout *pl, int dp, int rank, const ParOptions *o, int lowp, size_t bytes[MEM_NCAT]);

/* Builds the data-parallel state for g (created by gpt_init with par_gpt_options(c->dp,
 * o->zero)): allocates shards, buckets, gather buffers and moments (in mem),
 * installs g's hooks. ST_ERR_INPUT if g's layout was not built for c->dp. */
Status par_init(Par **p, Comm *c, Gpt *g, const ParOptions *o, MemStats *mem, Err *err);
void par_free(Par *p); /* safe on NULL */

/* Moment buffers in shard order (stage ≥ 1) or the full layout (stage 0); v NULL if 1 moment. */
float *par_moment(Par *p, int which);

/* ---- state in and out (initialisation, checkpoints, final weights) ---- */

/* Sets this rank's parameters and moments from full-layout buffers (m, v may be NULL = zero):
 * the whole range (stage 0, params of stage 1–2) or the owned blocks. No communication. */
void par_set_full(Par *p, const float *params, const float *m, const float *v);

/* Gathers full-layout copies of parameters and moments (any may be NULL) on every rank.
 * Collective over the dp group. */
Status par_get_full(Par *p, float *params, float *m, float *v, Err *err);

/* Whole tensors from every rank's slices (tp > 1 or pp > 1): local holds nb buffers of this rank's
 * layout (par_get_full's, every dp rank alike), fbuf nb zeroed buffers of full (layout_init's of
 * the whole network). Each tp rank writes its slices (tp rank 0 also the replicated tensors), the
 * tp group sums them, and the stages' buffers (the head stage's copy of a tied wte left out) are
 * summed on stage 0 of the replica holding world rank 0 (dp rank 0, tp rank 0), where fbuf then
 * holds the whole network; elsewhere fbuf holds partial sums. Collective over the tp group, then
 * point-to-point over the pp group of that replica; `step` names the step in a timeout. Staging
 * (MEM_CKPT_STAGING) for one 16 MiB chunk on the receiving rank. */
Status par_full_tensors(Par *p, const ParamLayout *full, float *local, float *fbuf, int nb, long step, Err *err);

/* Optimizer state outside the layout: Shampoo's blocks (L, R, P_L, P_R of every block, in
 * layout_shampoo_blocks order), a vector that is the same for any dp (checkpoints reshard it by
 * taking each block where the new owner finds it). 0 floats (and a NULL name) without Shampoo. */
size_t par_extra_state_floats(const Par *p);
const char *par_extra_state_name(const Par *p);
/* buf (par_extra_state_floats) gets every block's state on every rank: each owner writes its blocks
 * into zeros and one all-reduce sums them (exact). Collective over the dp group. */
Status par_get_extra_state(Par *p, float *buf, Err *err);
/* This rank's owned blocks from buf. No communication. */
void par_set_extra_state(Par *p, const float *buf);

/* ---- the step ----
 * Per optimizer step, on every rank:
 *   par_step_begin(p, k, step);
 *   for j in 0..k-1: par_micro_begin(p, j); gpt_forward(...); gpt_backward(...);
 *   par_grads_finish(p, &err);            waits for the gradient collectives (exposed comm)
 *   par_grad_norm(p, &norm, &err);        global norm, identical on every rank
 *   par_optim_step(p, ...);               this rank's part of the update (Muon: collective)
 *   par_params_sync(p, &err);             stage 1–2 all-gather started (waited by the next
 *                                         forward's hooks); stage 3 invalidates caches */
void par_step_begin(Par *p, int k, long step);
void par_micro_begin(Par *p, int j);
Status par_grads_finish(Par *p, Err *err);
/* With ParOptions.noise: the sum of squares of the gradient this rank computed from its first
 * micro-batch of the step (taken in the grads_ready hooks before any reduction: each segment as the
 * backward finished it), each tensor counted once per tp group (replicated ones on tp rank 0).
 * In the loss's scale: divided by the step's token count (and times the fp16 loss scale). The sum
 * over a replica's tp ranks is that micro-batch's squared gradient norm. Not for pp > 1 (a tied
 * wte's two parts are summed only after the backward). */
double par_noise_sumsq(const Par *p);
/* ZeRO 3: parameter gathers started ahead of the hook that needs them so far (the two-slot prefetch
 * behind the compute; 0 under --no-overlap, which gathers each segment when needed); -1 below
 * ZeRO 3 or without a Par. The step record's zero_gathers_ahead is its change over the step. */
long par_zero_gathers_ahead(const Par *p);
Status par_grad_norm(Par *p, double *norm, Err *err);
/* The update of this rank's part: the flat ranges by oc's rule (Muon: AdamW) at lr; with
 * ParOptions.muon also the hidden matrices at matrix_lr, which is collective over the dp group
 * (docs/optimizers.md, "Sharding"):
 *   1. each rank updates the momentum of its flat part of every matrix and writes the Nesterov
 *      input u there in the gather buffer; ZeRO >= 1 all-gathers the block segments of it;
 *   2. the owner of each matrix (par_muon_owner) orthogonalises it in place (muon_ns);
 *   3. each matrix is broadcast from its owner;
 *   4. each rank applies p ← p·(1 − lr·wd) − lr·s·O to its part of the parameters.
 * Every rank then holds the same result for the parameters it updates. With ParOptions.shampoo the
 * matrices' blocks (at lr, the run's): each rank updates Adam's moments of its flat part and writes
 * three inputs in turn into the gather buffer (the gradient, m̂, Adam's update A; all-gathered at
 * ZeRO >= 1): the owner of each block updates its statistics (and roots when due), preconditions
 * m̂ and grafts to ‖A‖; the owners' results are summed into a zeroed buffer (an all-reduce that
 * adds exact zeros); each rank applies p ← p·(1 − lr·wd) − lr·U to its part.
 * Errors: a failed collective, a failed eigendecomposition. */
Status par_optim_step(Par *p, const OptimConfig *oc, long step, float lr, float matrix_lr, float grad_scale, Err *err);

/* Sophia's Hessian EMA (optim_hess_update) over this rank's part of the gradients, which hold the
 * reduced gradient of a sampled-label pass (par_step_begin .. par_grads_finish like a step's):
 * v ← beta2·v + (1 − beta2)·scale·g². Elementwise, so any sharding gives one process's values. */
void par_hess_update(Par *p, const OptimConfig *oc, float scale);

/* Muon: the dp rank that orthogonalises hidden matrix i (layout_hidden_matrices order), -1 without
 * Muon. Owners are assigned once, longest-processing-time first: matrices by Newton–Schulz FLOPs
 * (muon_ns_flops) descending, each to the rank with the least FLOPs so far (lowest rank on ties). */
int par_muon_owner(const Par *p, int i);
/* Stage 1-2: starts the all-gather of the updated parameters, segment by segment in forward order;
 * each segment's before_forward hook waits for its own (so later segments' gathers run behind
 * earlier segments' forward), or, with ParOptions.overlap = 0 or on a device, all are waited here.
 * Stage 3: the gathered copies are invalidated. */
Status par_params_sync(Par *p, Err *err);
/* Waits for every parameter all-gather par_params_sync started (stage 1-2; others: ST_OK), so the
 * full parameters may be read outside a forward (generation samples) or written. par_get_full,
 * par_set_full and par_optim_step call it themselves. */
Status par_params_wait(Par *p, Err *err);

/* Pipeline: fn(ctx) is called between kernels (from the hooks) to progress the point-to-point
 * messages of the pipeline runtime. */
void par_set_progress(Par *p, void (*fn)(void *ctx), void *ctx);

/* Tag of the tied wte's gradient exchange between the pipeline's first and last stage. */
#define PAR_TIED_TAG 0x3fffffff

/* Any error a hook met (hooks cannot return one); ST_OK if none. Checked by par_grads_finish. */
Status par_hook_status(const Par *p, Err *err);

#endif
