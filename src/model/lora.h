/* lora.h — LoRA adapters (Hu et al. 2021) on a frozen GPT-2 or Llama base (docs/lora.md).
 *
 * A targeted linear layer y = W x (+ b) becomes y = W x (+ b) + s · B (A · drop(x)) with
 * A (r, in), B (out, r), s = alpha / r and drop() LoRA's own dropout (training forwards only).
 * A starts as PEFT's Kaiming-uniform (a = sqrt(5)): U(−1/sqrt(in), 1/sqrt(in)); B starts at zero,
 * so the adapted model starts equal to the base.
 *
 * Targets and where they sit (the model's fused GEMMs, layout.h):
 *   Llama  q, k, v   column slices [0, C), [C, C + KV·hs), [C + KV·hs, Q) of the q|k|v GEMM's output
 *          o         the attention output projection (wo)
 *          gate, up  column slices [0, F), [F, 2F) of the gate|up GEMM's output
 *          down      the MLP down projection (wdown)
 *   GPT-2  q,k,v     all three together: ONE adapter on the fused c_attn (out 3C), as PEFT's
 *                    target_modules=["c_attn"]; one or two of them alone are refused
 *          o         attn.c_proj;  up: mlp.c_fc;  down: mlp.c_proj (gate refused: GPT-2 has none)
 *   groups attn = q,k,v,o and mlp = gate,up,down (GPT-2: up,down).
 *
 * Adapter parameters live in one flat fp32 buffer laid out block by block (block l's adapters in
 * target order, each A then B), so a block is a contiguous range; the total is padded to a
 * multiple of shard_multiple (data-parallel ranks). Gradients and optimizer moments share it.
 *
 * Saved activations: per block and adapter u = A · drop(x) (N, r) for the backward. Scratch: the
 * dropped input and its gradient (N × max in) and du (N, r).
 *
 * Tensor parallelism (lora_layout_init_tp): each adapter is split like its base layer. Column-
 * parallel bases (q|k|v, gate|up, GPT-2's c_attn and c_fc): B holds the rank's output rows, A is
 * replicated; row-parallel bases (o, down): A holds the rank's input columns, B is replicated. One
 * tp all-reduce of an (N, r) matrix per adapter: u in a row-parallel forward, du in a column-parallel
 * backward (lora_forward / lora_backward). Replicated tensors get equal gradients on every tp rank.
 *
 * The base is never written: with GptOptions.frozen the model allocates no base gradients and its
 * backward computes input gradients only (gpt.h). */
#ifndef ST_MODEL_LORA_H
#define ST_MODEL_LORA_H

#include <stddef.h>
#include <stdint.h>

#include "core/mem.h"
#include "core/status.h"
#include "model/config.h"
#include "model/kernels.h"
#include "model/layout.h"

enum { LORA_Q, LORA_K, LORA_V, LORA_O, LORA_GATE, LORA_UP, LORA_DOWN, LORA_NTARGETS };
/* The GEMM an adapter adds to: q|k|v, the attention projection, fc (gate|up), the down projection. */
enum { LORA_SITE_QKV, LORA_SITE_O, LORA_SITE_FC, LORA_SITE_DOWN, LORA_NSITES };

typedef struct {
    int rank;          /* r >= 1 (0: LoRA off) */
    float alpha;       /* the scale's numerator: s = alpha / r */
    float dropout;     /* LoRA dropout on the adapter's input, [0, 1) */
    unsigned targets;  /* bit LORA_x set: the layer is adapted */
    int base_bf16;     /* 1: the frozen base's blocks are stored in bf16 (lora_base_param_floats) */
} LoraConfig;

/* One adapter of a block (the same for every block). */
typedef struct {
    int target;        /* LORA_*: GPT-2's fused c_attn is LORA_Q standing for q|k|v */
    int site;          /* LORA_SITE_* */
    int col;           /* its first output column in the site GEMM's output row */
    int in, out;       /* x (N, in) → y columns [col, col + out): this tp rank's widths */
    int in_full, out_full; /* the whole layer's */
    int row_par;       /* tensor parallelism: 0 the base is column-parallel (q|k|v, gate|up, fc): B holds
                          the rank's rows (out/tp of each of `groups` row blocks), A is replicated;
                          1 row-parallel (o, down): A holds the rank's columns (in/tp), B is replicated */
    int groups;        /* GPT-2's c_attn: 3 (its Q, K, V row blocks each split over tp); else 1 */
    size_t a_off;      /* A (r, in) at block offset + a_off; B (out, r) at block offset + b_off */
    size_t b_off;
} LoraAdapter;

typedef struct {
    LoraConfig cfg;
    ModelConfig model;
    int L, n;                         /* blocks; adapters per block */
    LoraAdapter ad[LORA_NTARGETS];    /* n entries in target order */
    size_t block_floats;              /* one block's adapters */
    size_t total;                     /* L · block_floats padded to a multiple of shard_multiple */
    float scale;                      /* alpha / r */
    int max_in;                       /* widest adapter input (this rank's) */
    int tp, tp_rank;                  /* the slice held (1, 0: everything) */
} LoraLayout;

/* "q,k,v,o,gate,up,down", "attn", "mlp", "all" (comma-separated, any mix) → a target mask for arch.
 * ST_ERR_INPUT naming --lora-targets: an unknown name, gate on GPT-2, one or two of q,k,v on
 * GPT-2 (its fused c_attn takes one adapter), an empty list. */
Status lora_parse_targets(const char *s, const ModelConfig *cfg, unsigned *mask, Err *err);
/* The comma-separated names of mask ("q,k,v,o"). */
void lora_targets_string(unsigned mask, char *buf, size_t cap);
/* PEFT's module name of target t for arch (Llama "q_proj"; GPT-2 "attn.c_attn", "attn.c_proj",
 * "mlp.c_fc", "mlp.c_proj") and the prefix of block l's module ("base_model.model.model.layers.3.self_attn."). */
const char *lora_module_name(const ModelConfig *cfg, int target);
void lora_tensor_name(const ModelConfig *cfg, int l, int target, int is_b, char *buf, size_t cap);

/* Checks c (rank >= 1, alpha > 0, dropout in [0, 1), a non-empty mask) and builds the layout.
 * ST_ERR_INPUT names the flag. */
Status lora_layout_init(LoraLayout *ll, const ModelConfig *cfg, const LoraConfig *c, int shard_multiple, Err *err);
/* The layout of tp rank tp_rank's adapters, split like their base (LoraAdapter.row_par); every
 * rank's total is the same. LoRA dropout with tp > 1 is refused (ST_ERR_INPUT: a row-parallel
 * layer's input is a column slice whose masks would not be one process's). */
Status lora_layout_init_tp(LoraLayout *ll, const ModelConfig *cfg, const LoraConfig *c, int shard_multiple, int tp,
                           int tp_rank, Err *err);
/* Copies every adapter tensor's slice between a tp layout (local, lbuf) and the whole one (full,
 * fbuf; tp 1): to_full = 1 writes the rank's elements into fbuf (replicated tensors too), 0 fills
 * lbuf from fbuf. */
void lora_tp_copy(const LoraLayout *local, float *lbuf, const LoraLayout *full, float *fbuf, int to_full);
/* Squared L2 norms of the elements [lo, hi) of a gradient buffer in layout ll: of the split tensors'
 * (this rank's part) and of the replicated ones' (equal on every tp rank), each in double in layout
 * order (at tp 1 everything counts as split). */
void lora_norm_sq(const LoraLayout *ll, const float *g, size_t lo, size_t hi, double *split_sq, double *repl_sq);
/* The same over ZeRO 3 pieces (lora_moment_floats): rank `rank`'s piece of every block. */
void lora_norm_sq_zero3(const LoraLayout *ll, const float *pieces, int dp, int rank, double *split_sq, double *repl_sq);

/* Floats of the saved activations (u of every block and adapter) and of the scratch for a
 * micro-batch capacity of N = B·T rows: what lora_init allocates (memory plan). */
size_t lora_act_floats(const LoraLayout *ll, size_t N);
size_t lora_scratch_floats(const LoraLayout *ll, size_t N);

/* Bytes per memory category of the adapters (params and grads whole on every rank; n_moments moment
 * buffers of total floats, or at ZeRO >= 1 of the rank's shard total/dp; at ZeRO 3 params and grads
 * are the rank's pieces plus one block's window of dp · piece floats each), their activations and
 * scratch for N rows: added to the base's plan. bytes[MEM_NCAT] is ADDED to. */
void lora_plan_bytes(const LoraLayout *ll, size_t N, int n_moments, int dp, int zero, size_t bytes[MEM_NCAT]);
/* Floats of each moment buffer a rank holds: total, or total/dp at ZeRO 1-2 (ll built with
 * shard_multiple = dp); at ZeRO 3 L · lora_zero3_piece: the rank's piece of every block.
 * ZeRO 3 shards block by block: block l (block_floats, zero-padded to dp · piece) is split into dp
 * pieces of `piece` floats; rank k holds piece k of every block, at k's buffers + l · piece (its
 * parameters, gradient sums and moments alike). */
size_t lora_moment_floats(const LoraLayout *ll, int dp, int zero);
/* The adapters' input widths (this rank's `in`) summed over every adapter of every block: the
 * elements --lora-dropout draws per token in a forward (plan_lora_step's count). */
double lora_input_width(const LoraLayout *ll);
size_t lora_zero3_piece(const LoraLayout *ll, int dp);

/* A bf16-stored base (LoraConfig.base_bf16): the blocks' tensors (segments 1..L, every weight, bias
 * and norm of every block) are kept as bf16 (2 bytes each), the embeddings and final norm
 * (segments 0 and L + 1) as fp32, and one fp32 window of the largest block, into which a block is
 * widened before its forward and backward (the model computes in fp32 from the window). Bytes of
 * the base's parameters of layout pl, either precision. */
size_t lora_base_param_bytes(const ParamLayout *pl, int base_bf16);
size_t lora_base_window_floats(const ParamLayout *pl);

/* The memory plan of one rank fine-tuning cfg with these adapters (fp32, pp 1; o->tp the tp slice,
 * ll its adapters' layout): the frozen base's
 * fp32 parameters (MEM_PARAMS; no gradients, master or moments), its activations and workspace for o
 * (layout_run_bytes, exactly what gpt_init allocates), and lora_plan_bytes. bytes[MEM_NCAT] is set. */
void lora_memory_plan(const ModelConfig *cfg, const ActOptions *o, const LoraLayout *ll, int n_moments, int dp,
                      int zero, size_t bytes[MEM_NCAT]);

/* tp > 1 (set by gpt_set_lora from the model's hooks): the sum over the tp group, in place. Forward
 * of a row-parallel layer: y gets this rank's partial s·u_p·Bᵀ (the model sums y after), then u is
 * summed (saved whole); backward of a column-parallel layer: dx gets the partial du_p·A (summed with
 * the model's), then du is summed before dA. */
typedef void (*LoraAllreduce)(void *ctx, float *buf, size_t n, int max);

typedef struct Lora {
    LoraLayout lay;
    float *params;    /* lay.total (MEM_PARAMS); window: one block's (pfloats >= block_floats) */
    float *grads;     /* as params (MEM_GRADS) */
    size_t pfloats;   /* floats of params and of grads */
    int window;       /* 1 (lora_init_window, ZeRO 3): params/grads hold only the block being computed, which
                         the caller gathers before the block's forward/backward (the model's hooks) */
    float *u;         /* saved u: L · n · N · r (MEM_ACTIVATIONS) */
    float *xd, *dx;   /* N · max_in each (MEM_WORKSPACE) */
    float *du;        /* N · r (MEM_WORKSPACE) */
    size_t N;         /* row capacity */
    LoraAllreduce tp_allreduce; /* tp > 1: the tp group's sum (gpt_set_lora); NULL at tp 1 */
    void *tp_ctx;
    int nt;
    MemStats *mem;
} Lora;

/* Allocates the adapters for a micro-batch capacity of N rows (params zero: call lora_init_params).
 * lora_free is safe on a zeroed or half-built Lora. */
Status lora_init(Lora *lo, const LoraLayout *ll, size_t N, int nt, MemStats *mem, Err *err);
void lora_free(Lora *lo);
/* ZeRO 3: as lora_init, but params and grads are one block's window of wfloats (>= block_floats):
 * lora_forward/lora_backward of block l read params[0, block_floats) and add into grads, which the
 * caller fills (gather) and drains (reduce-scatter) around each block. */
Status lora_init_window(Lora *lo, const LoraLayout *ll, size_t N, int nt, size_t wfloats, MemStats *mem, Err *err);
/* PEFT's initialisation: A[i] = (2u − 1)/sqrt(in), u = rng_uniform(seed, stream, i) with stream
 * 0x4c6f5241 ("LoRA") · 65536 + l · LORA_NTARGETS + target; B = 0. */
void lora_init_params(Lora *lo, uint64_t seed);
/* The same values into a whole-layout buffer (ll->total floats). */
void lora_init_params_buf(const LoraLayout *ll, float *params, uint64_t seed);

/* The adapters of block l at `site`: y[:, col:col+out] += s · (drop(x) · Aᵀ) · Bᵀ for each, saving
 * u. x (N, in), y (N, ldy). d: the dropout of the site's adapters; stream is the block's base stream,
 * the adapter's is stream | (8 + target). */
void lora_forward(Lora *lo, int l, int site, const float *x, float *y, int ldy, int N, Dropout d);

/* The backward of lora_forward: dB += s · dyᵀ · u; du = s · dy · B; dA += duᵀ · drop(x);
 * dx (N, in) += drop(du · A). dy (N, ldy). Gradients ADD. */
void lora_backward(Lora *lo, int l, int site, const float *x, const float *dy, int ldy, float *dx, int N, Dropout d);

/* W += s · B · A for every block and adapter: rows [col, col + out) of the site's weight (layout.h
 * views: qkvw, attprojw, fcw, fcprojw; (out, in) row-major). adapters: lay.total floats. In fp32,
 * each element W[o][i] + s · Σ_k B[o][k] · A[k][i] summed in double over k then rounded once. */
void lora_merge(const LoraLayout *ll, const float *adapters, ParamViews *base);
#endif
