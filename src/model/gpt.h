/* gpt.h — the GPT-2 composition: parameters, saved activations, forward and backward.
 *
 * Three parts as in llama2.c: the blueprint (ModelConfig), the weights (one flat buffer in the
 * block-by-block ParamLayout, with named views), the run state (activations and scratch sized
 * for a micro-batch capacity B×T). Nothing is allocated after gpt_init.
 *
 * Hooks let `parallel` act around each segment (0 embeddings, 1..L blocks, L+1 final norm)
 * without the model knowing about communication: before a segment's forward (ZeRO-3 gather),
 * before its backward, and when its gradients for this micro-batch are complete (start a bucket).
 * The LM head uses the embedding segment's wte, so segment 0 must stay available until the head
 * is done. */
#ifndef ST_MODEL_GPT_H
#define ST_MODEL_GPT_H

#include <stdint.h>

#include "core/mem.h"
#include "core/status.h"
#include "model/config.h"
#include "model/kernels.h"
#include "model/layout.h"

#define GPT_LP_RANGES 3

typedef struct {
    void *ctx;
    void (*before_forward)(void *ctx, int seg);
    void (*before_backward)(void *ctx, int seg);
    void (*grads_ready)(void *ctx, int seg);
} GptHooks;

/* Saved activations of one block for the current micro-batch. */
typedef struct {
    float *ln1, *ln1_mean, *ln1_rstd; /* (N, C), (N), (N) */
    float *qkv;                       /* (N, 3C) */
    float *lse;                       /* (B, NH, T) attention log-sum-exp per query row */
    float *atty;                      /* (N, C) attention output before the projection */
    float *res2;                      /* (N, C) residual after attention */
    float *ln2, *ln2_mean, *ln2_rstd; /* (N, C), (N), (N) */
    float *fch, *fch_gelu;            /* (N, 4C) before and after GELU */
    float *res3;                      /* (N, C) block output */
    /* bf16 (GPT_BF16): ln1, ln2 and fch_gelu are stored only as these bf16 copies (they are only
     * ever GEMM operands), and the float pointers above are NULL. */
    uint16_t *ln1_lp, *ln2_lp, *fchg_lp;
} LayerActs;

typedef struct {
    ModelConfig cfg;
    ParamLayout layout;
    int B, T;         /* capacity of the activation buffers */
    Recompute recompute; /* what backward recomputes instead of reading saved activations */
    int nt;           /* OpenMP threads for our kernels */
    MemStats *mem;    /* where allocations are counted (not owned) */

    float *params;    /* layout.total floats (category parameters; master weights under GPT_BF16) */
    int bf16;         /* mixed precision (GPT_BF16 or GPT_FP16): params is the fp32 master */
    int fp16;         /* the working copy is fp16 (GPT_FP16) */
    uint16_t *params_lp; /* bf16 working copy of params, same layout (GPT_BF16; NULL with external
                            parameters, whose copies the caller maps with gpt_map_lp) */
    /* Where the working copy of an fp32 parameter address lives: range i maps
     * [lp_from[i], lp_from[i] + lp_len[i]) floats to lp_to[i]. One range over params normally. */
    const float *lp_from[GPT_LP_RANGES];
    const uint16_t *lp_to[GPT_LP_RANGES];
    size_t lp_len[GPT_LP_RANGES];
    MatPrec mp;       /* GEMM precision and its conversion scratch */
    float *grads;     /* layout.total floats (category gradients) */
    ParamViews p, g;

    float *acts;      /* saved activations (category activations) */
    size_t acts_floats;
    float *encoded;   /* (N, C) */
    LayerActs *la;    /* L entries */
    float *lnf, *lnf_mean, *lnf_rstd, *losses; /* (N, C), (N), (N), (N) */

    float *scratch;   /* workspace */
    size_t scratch_floats;
    float *dres, *dbuf_a, *dbuf_b, *dbuf_c, *att_scratch, *ln_scratch, *logits;
    int head_chunk;

    GptHooks hooks;
    uint64_t dropout_seed;

    /* State of the current micro-batch between forward and backward. */
    const int32_t *cur_inp;
    int curB, curT;
    uint64_t cur_drop_counter;
    int cur_train;       /* the forward is a training one: dropout applies */
    int have_head_grads;
    int grads_overwrite; /* set by gpt_overwrite_grads, cleared by the next gpt_backward */
    double ms_fwd, ms_bwd; /* accumulated by forward/backward; the caller resets them */
} Gpt;

/* Allocates parameters, gradients, activations and scratch for micro-batches up to B×T with nt
 * threads. cfg must be validated; T <= cfg->max_seq is checked (ST_ERR_INPUT naming --seq-len).
 * gpt_free is safe on a zeroed or half-built Gpt. gpt_init_rc also sets the activation
 * recompute level (layout.h); gpt_init is gpt_init_rc with RECOMPUTE_NONE. Gradients are
 * bit-identical at every level. */
Status gpt_init(Gpt *g, const ModelConfig *cfg, int B, int T, int nt, int shard_multiple, MemStats *mem, Err *err);
Status gpt_init_rc(Gpt *g, const ModelConfig *cfg, int B, int T, int nt, int shard_multiple, Recompute rc,
                   MemStats *mem, Err *err);

/* gpt_init_ex flags: the caller owns the parameter and/or gradient storage (ZeRO-2/3). Then
 * g->params / g->grads stay NULL and the caller points the views (g->p, g->g: wte, wpe, lnfw,
 * lnfb and every g->p.blocks[l] / g->g.blocks[l]) at its buffers before each segment is used,
 * e.g. from the hooks; gpt_zero_grads and gpt_init_params then must not be called (use
 * gpt_init_params_buf on the caller's flat buffer). */
enum { GPT_EXTERNAL_PARAMS = 1, GPT_EXTERNAL_GRADS = 2, GPT_BF16 = 4, GPT_FP16 = 8 };
/* Mixed precision with external parameters: the caller keeps a 2-byte copy beside each fp32
 * buffer it points the views at, and maps them (range i < GPT_LP_RANGES) with gpt_map_lp. */
void gpt_map_lp(Gpt *g, int i, const float *from, const uint16_t *to, size_t len);
/* GPT_FP16: as GPT_BF16 with an fp16 working copy; GEMM operands are rounded to fp16 (overflow
 * gives inf: pair it with a loss scaler) and multiplied in fp32 (no fp16 units on this CPU). */
/* GPT_BF16: mixed precision. g->params is then the fp32 master (counted as master weights) and
 * g->params_lp a bf16 working copy (counted as parameters) that every matmul reads; activations,
 * LayerNorm, softmax, the loss and gradients stay fp32. Call gpt_sync_lp after every change of
 * g->params (init, load, optimizer step). With GPT_EXTERNAL_PARAMS there is no params_lp: the
 * caller rounds the buffers it points the views at and maps them (gpt_map_lp). */
Status gpt_init_ex(Gpt *g, const ModelConfig *cfg, int B, int T, int nt, int shard_multiple, Recompute rc, int flags,
                   MemStats *mem, Err *err);

/* Refreshes the bf16 working copy from the fp32 master (no-op in fp32). */
void gpt_sync_lp(Gpt *g);
/* n fp32 parameters rounded to the model's 2-byte format (bf16 or fp16; nothing in fp32): for
 * callers keeping copies of external parameters. */
void gpt_round_lp(const Gpt *g, uint16_t *dst, const float *src, size_t n);

/* GPT-2 initialisation (see gpt_init_params) of a flat buffer in layout pl. */
void gpt_init_params_buf(const ParamLayout *pl, float *buf, uint64_t seed, int nt);
void gpt_free(Gpt *g);

/* GPT-2 initialisation from a counter-based RNG: weights N(0, 0.02), residual projections
 * (attprojw, fcprojw) N(0, 0.02/sqrt(2L)), biases 0, LayerNorm weights 1; padded vocabulary rows
 * 0. Value of element i of tensor k depends only on (seed, k, i). */
void gpt_init_params(Gpt *g, uint64_t seed);

void gpt_zero_grads(Gpt *g);

/* The next training forward + backward WRITE the parameter gradients instead of adding to them:
 * for the first micro-batch of a step, in place of gpt_zero_grads (which costs a pass over the
 * buffer, and makes every gradient GEMM read the zeros back). Every element of a real parameter
 * is written; padding (padded vocabulary rows, layout alignment) is never written by anything and
 * keeps the zeros it was allocated with. Not for external gradient buffers (ZeRO >= 2). */
void gpt_overwrite_grads(Gpt *g);

/* Forward pass of one micro-batch inp (B, T) with targets tgt (B, T; -1 = ignored). Returns the
 * SUM of the per-token losses over unmasked targets (divide by the token count for a mean).
 * With train != 0 the LM head's backward runs fused with the loss (dlogits scaled by dscale,
 * e.g. 1 / tokens of the whole optimizer step) so gpt_backward can follow; drop_counter selects
 * the dropout masks (a global micro-batch counter). Dropout applies to training forwards only:
 * with train = 0 (validation, eval, sampling) nothing is dropped and drop_counter is unused. */
double gpt_forward(Gpt *g, const int32_t *inp, const int32_t *tgt, int B, int T, float dscale, int train,
                   uint64_t drop_counter);

/* Backward of the micro-batch of the last gpt_forward(train=1): parameter gradients ADD (+=), or
 * are written after gpt_overwrite_grads. */
void gpt_backward(Gpt *g);

/* Probabilities over the V real tokens of row 0 of the last forward (tests). probs (V). */
void gpt_probs_row0(Gpt *g, const int32_t *inp, int T, float *probs);

/* Logits (T, V) over the V real tokens at every position of one sequence inp (T <= g->T tokens),
 * as the training forward computes them (same kernels, GEMMs and precision), without dropout:
 * the oracle for other paths to the logits (KV-cache inference, imported weights). Overwrites
 * the run state of the last forward. */
void gpt_logits(Gpt *g, const int32_t *inp, int T, float *logits);

#endif
