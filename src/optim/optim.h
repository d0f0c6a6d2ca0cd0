/* optim.h — optimizers, global-norm clipping and learning-rate schedules on flat fp32 ranges.
 *
 * The optimizer knows no model: it receives the flat parameter, gradient and moment buffers and
 * a list of ranges, each with a weight-decay flag (the trainer marks 2-D matmul and embedding
 * weights; biases and LayerNorm parameters get no decay). Updates are elementwise, so any split
 * of the ranges (threads, ZeRO shards) gives bit-identical results. */
#ifndef ST_OPTIM_OPTIM_H
#define ST_OPTIM_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

/* OPT_MUON: Muon (optim/muon.h) on the hidden 2-D matrices, AdamW (this file) on every other range;
 * OPT_SHAMPOO: blocked Shampoo grafted to Adam (optim/shampoo.h) on the hidden matrices, AdamW on
 * the rest. The matrices are whole-matrix work that parallel/ assigns to owners (docs/optimizers.md). */
/* OPT_SOPHIA: Sophia-G (Liu et al. 2023) on every range: m in the first moment buffer, the
 * Gauss-Newton-Bartlett Hessian EMA h in the second (optim_hess_update, from the gradient of the loss
 * on labels sampled from the model's own softmax every hess_every steps: the trainer's extra pass). */
typedef enum { OPT_ADAMW, OPT_ADAM, OPT_SGD, OPT_LION, OPT_MUON, OPT_SHAMPOO, OPT_SOPHIA } OptimKind;
#define OPTIM_NKINDS 7

typedef struct {
    OptimKind kind;
    float beta1;        /* Adam/AdamW/Lion/Sophia first moment (Lion: interpolation for the update) */
    float beta2;        /* Adam/AdamW second moment; Lion: momentum decay; Sophia: the Hessian EMA */
    float eps;          /* Adam/AdamW; Sophia: the floor of the denominator max(gamma·h, eps) */
    float weight_decay; /* AdamW, Lion, Sophia: decoupled (p -= lr·wd·p); Adam: L2 (g += wd·p); SGD: L2 */
    float momentum;     /* SGD (0 = plain SGD); Nesterov not implemented */
    float muon_lr;      /* Muon: peak learning rate of the hidden matrices (the schedule's shape) */
    float muon_momentum;/* Muon: β of its Nesterov momentum */
    int shampoo_block;  /* Shampoo: largest block side (rows and cols) */
    int precond_every;  /* Shampoo: steps between inverse-root computations */
    float shampoo_eps;  /* Shampoo: ε added to the statistics before the root */
    float sophia_gamma; /* Sophia: γ of clip(m / max(γ·h, eps), 1) */
    int hess_every;     /* Sophia: steps between Hessian estimates (k; at steps 1, k+1, 2k+1, ...) */
} OptimConfig;

typedef struct {
    size_t offset, n; /* in floats */
    int decay;        /* weight decay applies to this range */
    float lr_mult;    /* the range's learning rate is lr · lr_mult (muP's hidden matrices: 1/m; else 1) */
} OptimRange;

OptimConfig optim_default_config(OptimKind kind);
/* "adamw" | "adam" | "sgd" | "lion" | "muon" | "shampoo" | "sophia" → kind; ST_ERR_INPUT naming --optimizer
 * otherwise. */
Status optim_parse_kind(const char *s, OptimKind *kind, Err *err);
const char *optim_kind_name(OptimKind kind);
/* Moment buffers the optimizer needs per parameter: 2 (Adam family; Muon: its AdamW ranges, the
 * matrices keep their momentum in the first and leave the second zero; Sophia: m and h), 1 (SGD
 * momentum, Lion). */
int optim_num_moments(const OptimConfig *c);

/* 1 if the kind runs whole-matrix work beside the flat ranges (Muon, Shampoo). */
int optim_is_matrix(OptimKind kind);

/* One update of params over the ranges (OPT_MUON: the AdamW rule; its matrices go through muon.h). m, v: moment buffers in the same layout (v unused by
 * SGD/Lion). grad_scale multiplies every gradient first (clipping). step counts from 1 (bias
 * correction). Params and moments are overwritten in place. */
void optim_step(const OptimConfig *c, float *params, const float *grads, float *m, float *v,
                const OptimRange *ranges, int nranges, long step, float lr, float grad_scale, int nt);

/* Sophia's Hessian EMA over the ranges: h = beta2·h + (1 − beta2)·scale·g², elementwise (g: the
 * reduced gradient of the sampled-label loss; scale = the estimate's token count B over the squared
 * fp16 loss scale, so that scale·g² is the Gauss-Newton-Bartlett estimate B·ĝ⊙ĝ). */
void optim_hess_update(const OptimConfig *c, float *h, const float *g, const OptimRange *ranges, int nranges,
                       float scale, int nt);
/* 1 when Sophia estimates the Hessian at optimizer step `step` (1-based): (step − 1) mod k == 0. */
int optim_hess_due(const OptimConfig *c, long step);

/* Mixed precision: the working copy of the parameters the GEMMs read, kept beside the master. */
typedef enum { OPTIM_LOWP_NONE, OPTIM_LOWP_BF16, OPTIM_LOWP_FP16 } OptimLowp;

/* optim_step, and in the same pass each updated parameter rounded to nearest even into lowp
 * (same layout as params; bf16 or fp16 bits, fp16 overflowing to inf): bit-identical to the step
 * followed by a cast of the ranges, without reading the master a second time. lowp may be NULL. */
void optim_step_lowp(const OptimConfig *c, float *params, const float *grads, float *m, float *v,
                     const OptimRange *ranges, int nranges, long step, float lr, float grad_scale, uint16_t *lowp,
                     OptimLowp lowp_kind, int nt);

/* Global L2 norm of x (n floats): an fp32 sum per fixed 4096-element chunk (vectorized order), the
 * chunks added in double in order, so the result does not depend on the thread count. (The
 * trainer's gradient norm, par_grad_norm, sums each chunk in double instead: optim_chunk_sumsq.) */
double optim_l2_norm(const float *x, size_t n, int nt);
/* The square of optim_l2_norm before its square root: the same chunks, the same bits at any thread
 * count (the noise scale's per-segment Σx², parallel/zero.c). */
double optim_sumsq(const float *x, size_t n, int nt);
/* The gradient norm's chunk sum (par_grad_norm's partition, parallel/): Σ x[i]² over n floats,
 * each square taken exactly in double and added in index order into a double that starts at 0. */
double optim_chunk_sumsq(const float *x, size_t n);
/* optim_chunk_sumsq of eight chunks of n floats each, out[k] for x[k]: the same additions in the
 * same order per chunk, so bit-identical to eight calls, but the eight chains run side by side
 * (one double lane each) instead of one latency-bound chain at a time (3-4x faster on A's 124.5 M
 * gradients: docs/performance.md). */
void optim_chunk_sumsq8(const float *const x[8], size_t n, double out[8]);
/* Clip factor min(1, clip / norm); clip <= 0 disables (1). */
float optim_clip_scale(double norm, float clip);

/* ---- dynamic loss scaling (fp16) ----
 * The loss (and so every gradient) is multiplied by `scale`. A step whose gradients contain inf or
 * NaN is skipped and the scale halved; after `growth_interval` clean steps in a row it doubles. */
typedef struct {
    float scale;          /* current loss scale */
    int growth_interval;  /* clean steps before doubling */
    long good;            /* clean steps since the last change */
    long skips;           /* overflowed steps so far */
} LossScaler;

void scaler_init(LossScaler *s, float init_scale, int growth_interval);
/* Records a step's outcome; returns 1 when its update may be applied (gradients finite). */
int scaler_update(LossScaler *s, int finite);

/* ---- learning-rate schedules ---- */
typedef enum { SCHED_COSINE, SCHED_WSD, SCHED_LINEAR, SCHED_CONSTANT } SchedKind;
typedef enum { DECAY_LINEAR, DECAY_COSINE, DECAY_SQRT } DecayShape;

typedef struct {
    SchedKind kind;
    float lr, min_lr;
    long warmup;         /* linear warmup from lr/warmup at step 1 to lr at step warmup */
    long total;          /* total steps */
    float decay_frac;    /* WSD: fraction of total spent decaying (default 0.2) */
    DecayShape decay_shape; /* WSD decay shape: linear, cosine or 1-sqrt */
} Schedule;

Status sched_parse_kind(const char *s, SchedKind *k, Err *err);
Status sched_parse_shape(const char *s, DecayShape *d, Err *err);
const char *sched_kind_name(SchedKind k);
const char *sched_shape_name(DecayShape d);
/* Learning rate of optimizer step `step` (1-based, 1..total). */
float sched_lr(const Schedule *s, long step);

#endif
