/* gpt.h — the GPT model (GPT-2 or Llama, ModelConfig.arch): weights, gradients and run state;
 * forward and backward. Llama runs the same block structure with RMSNorm for LayerNorm, RoPE on
 * the q|k|v GEMM's output, grouped-query attention and SwiGLU for GELU, no biases, no wpe.
 *
 * A Gpt is three parts, in llama2.c's spirit (config / weights / run state), plus the hooks:
 *   w  GptWeights   what the model IS: a copy of the blueprint (ModelConfig), the layout, the
 *                   fp32 parameters (the master under mixed precision), the 2-byte working copy
 *                   and its address map, named views. What checkpoints save and load; forward and
 *                   backward only read it.
 *   d  GptGrads     one gradient per parameter (d as in the kernels' dX), same layout and views.
 *   s  GptRunState  what a forward/backward NEEDS: activations saved for a micro-batch capacity
 *                   B×T (recompute level applied), scratch, the current micro-batch, timings, and
 *                   the first error met.
 * Everything is allocated by gpt_init from one GptOptions; nothing after.
 *
 * Where the next kinds of parallelism go. Data parallelism (parallel/) needs nothing of the
 * model but the hooks and, for ZeRO 2-3, external gradient/parameter buffers. The other two change
 * what one instance HOLDS, which GptWeights records:
 *   pipeline  a stage holds the contiguous blocks [w.first, w.last) (the layout lays parameters
 *             out block by block so that a block range is one contiguous range); the embeddings
 *             only on the first stage, the final norm and head only on the last. The views'
 *             blocks, the gradients and the saved activations (s.la) then cover those blocks
 *             only, and forward/backward take and return the residual stream at the stage edges.
 *   tensor    each block's heads and MLP columns, and the vocabulary rows of wte (the LM head),
 *             split over tp ranks: w.cfg stays the whole network's; the layout (layout_init_tp)
 *             sizes each tensor by the slice, and the activations shrink with it.
 * Tensor parallelism is implemented (GptOptions.tp, tp_rank, sp; the tp_* hooks carry its
 * collectives); pipeline stages are not yet: gpt_init builds every block (first 0, last L). The
 * block loops already run over [w.first, w.last).
 *
 * Hooks let `parallel` act around each segment (0 embeddings, 1..L blocks, L+1 final norm)
 * without the model knowing about communication: before a segment's forward (ZeRO-3 gather),
 * before its backward, and when its gradients for this micro-batch are complete (start a bucket).
 * The LM head uses the embedding segment's wte, so segment 0 must stay available until the head
 * is done.
 *
 * Errors. Library code never aborts on a failure of the outside world: a GEMM that oneDNN
 * cannot run (out of memory, primitive refused) is recorded by matmul (matmul.h) and collected
 * by the model at the end of gpt_forward / gpt_backward; the caller asks gpt_status once per
 * micro-batch or per step (see there). Broken invariants (a programming error) still abort
 * through ST_CHECK. */
#ifndef ST_MODEL_GPT_H
#define ST_MODEL_GPT_H

#include <stdint.h>

#include "core/mem.h"
#include "core/status.h"
#include "model/config.h"
#include "model/kernels.h"
#include "model/layout.h"

#define GPT_LP_RANGES 3

/* Numeric precision of the GEMMs (values as layout_memory_plan's `precision`). */
typedef enum {
    GPT_FP32 = 0, /* fp32 everywhere */
    GPT_BF16 = 1, /* bf16 working copy and GEMM operands, fp32 master, accumulation and the rest */
    GPT_FP16 = 2, /* as bf16 with an fp16 working copy; GEMM operands rounded to fp16 (overflow
                     gives inf: pair it with a loss scaler) and multiplied in fp32 */
} GptPrecision;

typedef struct Backend Backend; /* model/backend.h */

typedef struct {
    const Backend *backend; /* where the kernels run and the buffers live (backend.h); default NULL:
                               the CPU backend */
    int B, T;               /* micro-batch capacity: activations for up to B×T tokens (default 1×1,
                               for callers that only want the weights); T <= cfg->max_seq */
    int threads;            /* OpenMP threads of our kernels (default 1) */
    int shard_multiple;     /* each layout segment a multiple of this many floats: the number of
                               data-parallel ranks that split it (default 1) */
    Recompute recompute;    /* what backward recomputes instead of saving (default NONE; layout.h).
                               Gradients are bit-identical at every level. */
    GptPrecision precision; /* default GPT_FP32 */
    int external_params;    /* 1: the caller owns the parameter storage (ZeRO-3), see below */
    int external_grads;     /* 1: the caller owns the gradient storage (ZeRO-2/3), see below */
    int tp, tp_rank;        /* tensor parallelism: hold tp rank tp_rank's slice (layout_init_tp);
                               default 1, 0. tp > 1 needs the tp_* hooks */
    int sp;                 /* 1: sequence parallelism (tp > 1): the residual stream, LayerNorms and
                               dropout hold B·T/tp rows (B·T must divide by tp) */
    StageBlocks stage;      /* pipeline: the blocks held, one range per model chunk (n = 0: all) */
    int slots;              /* pipeline: activation sets, one per micro-batch in flight (default 1) */
    int split_backward;     /* 1: backward computes input gradients (and biases, LayerNorms); the weight
                               GEMMs wait for gpt_weight_stage (zero-bubble schedules). Needs
                               recompute none and no --sp */
    int frozen;             /* 1: the base is frozen (LoRA, model/lora.h): no gradient buffers are
                               allocated (d.grads NULL, views NULL) and backward computes only the
                               gradients of the activations (down to block 0's input; the embedding's
                               backward is skipped) for the attached adapters (gpt_set_lora). fp32,
                               one pipeline stage, no split backward; with external_params the caller
                               holds the base (LoRA's bf16-stored base widens a block per segment) */
    int device_resident;    /* 1: accept a backend whose memory is not host-addressable (CUDA): the
                               model stages inp and tgt into backend memory itself and initialises
                               the parameters through a host copy; the caller reads and writes
                               parameters and gradients only through the backend (to_host, from_host,
                               optim_update, sumsq). One slot, one chunk, tp 1, own storage only.
                               0 (default): such a backend is refused (the trainer's paths) */
} GptOptions;

GptOptions gpt_default_options(void);

typedef struct {
    void *ctx;
    void (*before_forward)(void *ctx, int seg);
    void (*before_backward)(void *ctx, int seg);
    void (*grads_ready)(void *ctx, int seg);
    /* Tensor parallelism (tp > 1): in-place collectives over the tp group, called between kernels
     * (Megatron's f/g operators; docs/parallel.md "Tensor parallelism"):
     *   tp_allreduce       sum (max = 0) or max (max = 1) of n floats: the exit of a parallel
     *                      region in forward, its entry in backward, the embedding, the loss's
     *                      row statistics;
     *   tp_allgather       buf holds tp blocks of `block` floats, the own one filled: --sp's
     *                      gather before a column-parallel layer (forward) and of the residual
     *                      gradient before a row-parallel one (backward);
     *   tp_reduce_scatter  buf holds tp partial blocks; the own block gets their sum: --sp's
     *                      replacement of the all-reduce. */
    void (*tp_allreduce)(void *ctx, float *buf, size_t n, int max);
    void (*tp_allgather)(void *ctx, float *buf, size_t block);
    void (*tp_reduce_scatter)(void *ctx, float *buf, size_t block);
    /* Nonblocking forms (issue 28; NULL: the blocking ones above serve everywhere). tp_start starts
     * the collective `kind` (GPT_TP_*: n floats for an all-reduce sum, the block for the others) on
     * buf and returns a handle for tp_wait; buf belongs to the collective until tp_wait returns.
     * The model overlaps them with GEMMs that neither read nor write buf (docs/parallel.md
     * "Overlap"). tp_progress lets the collectives in flight advance (Open MPI moves a nonblocking
     * collective only inside MPI calls) and returns how many are still in flight; the model calls
     * it from the thread that calls the other hooks, or, where tp_progress_threaded is 1, from a
     * second thread while that thread runs only kernels (never two calls at once). May be NULL. */
    int (*tp_start)(void *ctx, int kind, float *buf, size_t n);
    void (*tp_wait)(void *ctx, int handle);
    int (*tp_progress)(void *ctx);
    int tp_progress_threaded;
} GptHooks;

enum { GPT_TP_ALLREDUCE, GPT_TP_ALLGATHER, GPT_TP_REDUCE_SCATTER }; /* GptHooks.tp_start's kinds */

/* The weights. params is NULL with external parameters: the caller then points the views at its
 * buffers. Under mixed precision every GEMM reads the 2-byte working copy of a parameter, found
 * through the address map: range i maps fp32 addresses [lp_from[i], lp_from[i] + lp_len[i]) to
 * lp_to[i] (one range over params normally; gpt_map_lp with external parameters). */
typedef struct {
    ModelConfig cfg;        /* the whole network's blueprint */
    ParamLayout layout;     /* where each tensor lives in params, the gradients, master, moments */
    int first, last;        /* blocks [first, last) held: [0, L) (a pipeline stage: its range) */
    GptPrecision prec;
    float *params;          /* layout.total floats: category parameters, or master weights under
                               GPT_BF16/GPT_FP16 */
    uint16_t *params_lp;    /* the 2-byte working copy (category parameters): NULL in fp32 and with
                               external parameters */
    const float *lp_from[GPT_LP_RANGES];
    const uint16_t *lp_to[GPT_LP_RANGES];
    size_t lp_len[GPT_LP_RANGES];
    ParamViews p;           /* named views into params (or the caller's buffers) */
} GptWeights;

/* The gradients, in the weights' layout. grads is NULL with external gradients: the caller then
 * points the views at its buffers before each segment's backward (from the hooks). */
typedef struct {
    float *grads;           /* layout.total floats (category gradients) */
    ParamViews g;           /* named views into grads */
    int overwrite;          /* set by gpt_overwrite_grads, cleared by the next gpt_backward */
    int frozen;             /* GptOptions.frozen: no base gradients at all */
} GptGrads;

/* Saved activations of one block for the current micro-batch (in a pipeline slot). */
typedef struct {
    float *ln1, *ln1_mean, *ln1_rstd; /* (N, C), (N), (N); RMSNorm (Llama): no mean (NULL) */
    float *qkv;                       /* (N, 3C); Llama (N, (NH + 2·KV)·hs), q and k after RoPE */
    float *lse;                       /* (B, NH, T) attention log-sum-exp per query row */
    float *atty;                      /* (N, C) attention output before the projection */
    float *res2;                      /* (N, C) residual after attention */
    float *ln2, *ln2_mean, *ln2_rstd; /* (N, C), (N), (N) */
    float *fch, *fch_gelu;            /* (N, 4C) before and after GELU; Llama: gate|up (N, 2F) and
                                         silu(gate)·up (N, F) */
    float *res3;                      /* (N, C) block output */
    /* bf16 (GPT_BF16): ln1, ln2 and fch_gelu are stored only as these bf16 copies (they are only
     * ever GEMM operands), and the float pointers above are NULL. */
    uint16_t *ln1_lp, *ln2_lp, *fchg_lp;
    /* Split backward (zb-h1): the output gradients of the four weight GEMMs, kept from the input-
     * gradient pass to the weight pass: fcproj (N, C), fc (N, 4C/tp), attproj (N, C), qkv (N, 3C/tp);
     * under bf16 fcproj, fc and qkv hold the bf16 operand the GEMM reads (half as many floats). */
    float *wg_fcproj, *wg_fc, *wg_attproj, *wg_qkv;
} LayerActs;

/* A pipeline slot: one micro-batch's activations for one model chunk, from its forward to its
 * backward, and what that backward needs to know of the forward. */
typedef struct {
    float *encoded;         /* (Nl, C) the chunk's input: the embedding, or the received activations */
    LayerActs *la;          /* the chunk's blocks (slot_blocks entries; the first ones used) */
    float *lnf, *lnf_mean, *lnf_rstd, *losses; /* head rank only */
    float *dhead;           /* head rank with several slots: the head's input gradient (N, C) */
    const int32_t *inp;
    int32_t *docpos;        /* doc_mask: the micro-batch's document positions (B·T, doc_positions of inp),
                               computed by its forward on every stage and read by its backward */
    int B, T, Nl, train, chunk, have_head_grads;
    uint64_t drop_counter;
} GptSlot;

/* The run state: everything sized by the micro-batch capacity, and what passes from a forward to
 * its backward. */
typedef struct {
    int B, T;               /* capacity of the activation buffers */
    Recompute recompute;
    int nt;                 /* OpenMP threads for our kernels */
    MatPrec mp;             /* GEMM precision and its conversion scratch */

    float *acts;            /* saved activations (category activations) */
    size_t acts_floats;
    GptSlot *slots;         /* nslots activation sets (a pipeline's micro-batches in flight) */
    int nslots, slot_blocks;
    /* The slot bound by the running forward/backward (bind_slot in gpt.c): */
    float *encoded;         /* (N, C) the first block's input */
    LayerActs *la;          /* L entries: the bound chunk's blocks point into the slot */
    float *lnf, *lnf_mean, *lnf_rstd, *losses; /* (N, C), (N), (N), (N) */
    float *dhead;           /* the head's input gradient: the slot's, or dbuf_b with one slot */
    float *pp_gin;          /* pipeline: the received output gradient (Nl, C) */

    float *scratch;         /* workspace */
    size_t scratch_floats;
    float *dres, *dbuf_a, *dbuf_b, *dbuf_c, *att_scratch, *logits;
    float *sums; /* the row chunks' partial sums (layout_sums_floats): LayerNorm and bias gradients */
    int head_chunk;         /* rows of logits computed at once */

    /* Tensor parallelism: the slice this rank computes (tp 1: the whole model). */
    int tp, tp_rank, sp;
    int split_backward;     /* GptOptions.split_backward */
    ModelDims dim;          /* this rank's widths, heads, head size (layout_dims, computed once) */
    float att_scale;        /* attention scores' factor: 1/sqrt(hs), muP 1/hs (model_attn_scale) */
    float logit_mult;       /* logits' factor (muP: alpha_out / m; else 1), applied to the final norm's
                               output, the head's only input */
    float input_mult;       /* the embedding output's factor (muP: alpha_in; else 1) */
    float *rope_cs;         /* Llama: the RoPE table of positions [0, T) (rope_table) */
    int v0, Vr;             /* vocabulary rows [v0, v0 + Vr) real of the dim.Vl held */
    float *head_stats;      /* 3 · head_chunk: the vocabulary-parallel loss's row statistics */
    float *sp_gather;       /* --sp: the gathered LayerNorm output (N, C; bf16 under bf16) */
    float *sp_lngrad;       /* --sp: one LayerNorm's partial weight and bias gradients (2C) */

    uint64_t dropout_seed;
    HeadSample sample;      /* gpt_set_label_sampling's draws (u NULL: the data's targets) */

    int doc_mask;           /* ModelConfig.doc_mask, doc_eot (document masking) */
    int32_t doc_eot;
    int32_t *docpos_host;   /* doc_mask: host staging of the positions (B·T) */
    int32_t *dev_inp, *dev_tgt; /* device_resident: the micro-batch's tokens and targets in backend
                               memory (B·T each, MEM_DATA); NULL on host-addressable backends */

    /* The current micro-batch, between gpt_forward and gpt_backward. */
    const int32_t *cur_inp;
    const int32_t *cur_docpos; /* the bound slot's document positions (NULL without doc_mask) */
    int curB, curT;
    int curNl;              /* rows of the residual stream held: curB·curT, or its 1/tp under --sp */
    uint64_t cur_drop_counter;
    int cur_train;          /* the forward is a training one: dropout applies */
    int have_head_grads;
    double ms_fwd, ms_bwd;  /* accumulated by forward/backward; the caller resets them */
    Err err;                /* the first error met since the last gpt_status (status ST_OK: none) */
} GptRunState;

typedef struct {
    GptWeights w;
    GptGrads d;
    GptRunState s;
    GptHooks hooks;
    const Backend *be;      /* the kernels, GEMMs and memory of this model (GptOptions.backend) */
    struct Lora *lora;      /* LoRA adapters added to the targeted GEMMs (gpt_set_lora; not owned; NULL: none) */
    MemStats *mem;          /* where allocations are counted (not owned; may be NULL) */
} Gpt;

/* Allocates weights, gradients, activations and scratch for cfg (validated) with options o
 * (NULL: the defaults). ST_ERR_INPUT names the flag of a bad option (--micro-batch, --seq-len,
 * --threads, ...); ST_ERR_RUNTIME when out of memory. gpt_free is safe on a zeroed or half-built
 * Gpt.
 *
 * External storage (ZeRO-2/3): with o->external_params / o->external_grads, w.params / d.grads
 * stay NULL and the caller points the views (w.p, d.g: wte, wpe, lnfw, lnfb and every blocks[l])
 * at its buffers before each segment is used, e.g. from the hooks; gpt_zero_grads,
 * gpt_overwrite_grads and gpt_init_params then must not be called (use gpt_init_params_buf on
 * the caller's flat buffer). Mixed precision with external parameters: the caller keeps a 2-byte
 * copy beside each fp32 buffer it points the views at and maps them with gpt_map_lp.
 *
 * Mixed precision (GPT_BF16, GPT_FP16): w.params is the fp32 master (counted as master weights)
 * and w.params_lp the working copy (counted as parameters) that every matmul reads; activations,
 * LayerNorm, softmax, the loss and gradients stay fp32. Call gpt_sync_lp after every change of
 * w.params (init, load, optimizer step). */
Status gpt_init(Gpt *g, const ModelConfig *cfg, const GptOptions *o, MemStats *mem, Err *err);
void gpt_free(Gpt *g);

/* Attaches LoRA adapters (model/lora.h; NULL detaches): every forward adds them to their GEMMs and
 * every backward accumulates their gradients (lora->grads, +=). They must be built for this model's
 * config, tp slice and a row capacity >= B·T; fp32, no --sp, the whole model (ST_CHECK); at tp > 1 the
 * model's tp hooks must be set first (the adapters use its tp_allreduce). */
struct Lora;
void gpt_set_lora(Gpt *g, struct Lora *lora);

/* Maps range i < GPT_LP_RANGES of fp32 parameter addresses to their 2-byte copies (see GptWeights). */
void gpt_map_lp(Gpt *g, int i, const float *from, const uint16_t *to, size_t len);
/* Refreshes the working copy from the fp32 master (no-op in fp32 and with external parameters). */
void gpt_sync_lp(Gpt *g);
/* n fp32 parameters rounded to the model's 2-byte format (bf16 or fp16; nothing in fp32): for
 * callers keeping copies of external parameters. */
void gpt_round_lp(const Gpt *g, uint16_t *dst, const float *src, size_t n);

/* GPT-2 initialisation from a counter-based RNG: weights N(0, 0.02), residual projections
 * (attprojw, fcprojw) N(0, 0.02/sqrt(2L)), biases 0, LayerNorm weights 1; padded vocabulary rows
 * 0. Value of element i of tensor k depends only on (seed, k, i). gpt_init_params_buf does it on
 * a flat buffer in layout pl. */
void gpt_init_params(Gpt *g, uint64_t seed);
void gpt_init_params_buf(const ParamLayout *pl, float *buf, uint64_t seed, int nt);

void gpt_zero_grads(Gpt *g);

/* The next training forward + backward WRITE the parameter gradients instead of adding to them:
 * for the first micro-batch of a step, in place of gpt_zero_grads (which costs a pass over the
 * buffer, and makes every gradient GEMM read the zeros back). Every element of a real parameter
 * is written; padding (padded vocabulary rows, layout alignment) is never written by anything and
 * keeps the zeros it was allocated with. Not for external gradient buffers (ZeRO >= 2). */
void gpt_overwrite_grads(Gpt *g);

/* Forward pass of one micro-batch inp (B, T) with targets tgt (B, T; -1 = ignored). Returns the
 * SUM of the per-token losses over unmasked targets (divide by the token count for a mean), or
 * NaN when an error was met (gpt_status says which).
 * With train != 0 the LM head's backward runs fused with the loss (dlogits scaled by dscale,
 * e.g. 1 / tokens of the whole optimizer step) so gpt_backward can follow; drop_counter selects
 * the dropout masks (a global micro-batch counter). Dropout applies to training forwards only:
 * with train = 0 (validation, eval, sampling) nothing is dropped and drop_counter is unused. */
double gpt_forward(Gpt *g, const int32_t *inp, const int32_t *tgt, int B, int T, float dscale, int train,
                   uint64_t drop_counter);

/* Until called again with u = NULL, the forwards' loss (and, training, its gradient) is that of
 * labels drawn from the model's own softmax (HeadSample: row i with a target >= 0 draws at u[i] and
 * writes its label to labels[i]; masked rows stay masked), not of the targets: Sophia's
 * Gauss-Newton-Bartlett estimator. u and labels are indexed like the forward's targets and must
 * stay valid until its backward. Whole vocabulary only: under tp the forward fails (gpt_status). */
void gpt_set_label_sampling(Gpt *g, const float *u, int32_t *labels);

/* Backward of the micro-batch of the last gpt_forward(train=1): parameter gradients ADD (+=), or
 * are written after gpt_overwrite_grads. */
void gpt_backward(Gpt *g);

/* ---- Pipeline stages (GptOptions.stage, .slots) ----
 * A rank holding chunks of blocks runs each micro-batch through each of its chunks in a slot:
 *   forward   gpt_forward_stage(g, slot, chunk, ...): a chunk starting at block 0 embeds inp; any
 *             other reads its input from gpt_stage_input(g, slot), which the caller filled (the
 *             previous stage's activations). A chunk ending at block L runs the head and returns
 *             the loss sum as gpt_forward; any other returns 0 and leaves its output in
 *             gpt_stage_output(g, slot, chunk) (valid until the slot's next forward).
 *   backward  gpt_backward_stage(g, slot, chunk, dout): dout is the gradient of the chunk's output
 *             (NULL on the head's chunk). A chunk not starting at block 0 leaves the gradient of
 *             its input in gpt_stage_dinput(g) (valid until the next backward).
 * Gradients always add: zero them at the step's start (gpt_overwrite_grads is for one slot). Several
 * forwards may run before their backwards, in any slot order; drop_counter is the micro-batch's
 * global index, so masks equal one process's. tgt and inp must stay valid until the backward. */
double gpt_forward_stage(Gpt *g, int slot, int chunk, const int32_t *inp, const int32_t *tgt, int B, int T,
                         float dscale, int train, uint64_t drop_counter);
void gpt_backward_stage(Gpt *g, int slot, int chunk, const float *dout);
/* With GptOptions.split_backward: the weight-gradient pass of the slot's last backward (the four
 * weight GEMMs of each block of the chunk, accumulated); the slot is free after it. grads_ready of
 * each block's segment fires here, not in the backward. */
void gpt_weight_stage(Gpt *g, int slot, int chunk);
float *gpt_stage_input(Gpt *g, int slot);
const float *gpt_stage_output(const Gpt *g, int slot, int chunk);
const float *gpt_stage_dinput(const Gpt *g);

/* The first error met by gpt_forward / gpt_backward since the last call (ST_ERR_RUNTIME, e.g.
 * "GEMM 512x2304x768 (fp32, A·B^T): oneDNN out_of_memory creating the primitive"), which it
 * forgets; ST_OK if none. The contract for trainers: after the forward/backward passes of a step
 * and BEFORE using the loss or the gradients (norm, optimizer), call gpt_status and stop on an
 * error; the values computed since the error are garbage. Forward and backward run to the end
 * after an error, so every hook (and the collectives behind it) still runs and ranks stay in
 * step; a data-parallel trainer agrees on the failure before stopping. */
Status gpt_status(Gpt *g, Err *err);

/* Probabilities over the V real tokens of row 0 of a forward of inp (1, T) (tests). probs (V). */
Status gpt_probs_row0(Gpt *g, const int32_t *inp, int T, float *probs, Err *err);

/* Logits (T, V) over the V real tokens at every position of one sequence inp (T <= g->s.T tokens),
 * as the training forward computes them (same kernels, GEMMs and precision), without dropout:
 * the oracle for other paths to the logits (KV-cache inference, imported weights). Overwrites
 * the run state of the last forward. Errors as gpt_status. */
Status gpt_logits(Gpt *g, const int32_t *inp, int T, float *logits, Err *err);

#endif
