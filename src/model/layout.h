/* layout.h — the pure layout function: where every parameter lives, and how big every
 * activation buffer is, for a config. plan/ uses the same functions the allocator uses.
 *
 * Parameters live in one flat buffer laid out segment by segment:
 *   segment 0          embeddings: wte (Vp, C), wpe (maxT, C)
 *   segment 1 .. L     block l-1: ln1w ln1b (C) qkvw (3C, C) qkvb (3C) attprojw (C, C) attprojb (C)
 *                      ln2w ln2b (C) fcw (4C, C) fcb (4C) fcprojw (C, 4C) fcprojb (C)
 *   segment L+1        final norm: lnfw lnfb (C)
 * Llama (cfg->arch == ARCH_LLAMA; docs/llama.md) has no biases and no wpe:
 *   segment 0          wte (Vp, C), and lm_head (Vp, C) when the head is untied
 *   segment 1 .. L     ln1w (C) wq (C, C) wk (KV·hs, C) wv (KV·hs, C) wo (C, C) ln2w (C)
 *                      wgate (F, C) wup (F, C) wdown (C, F)
 *   segment L+1        lnfw (C)
 * where wk, wv follow wq and wup follows wgate with no gap: q|k|v and gate|up are one GEMM each.
 * Weights are (out, in) row-major like nn.Linear. Each tensor starts on a 16-float (64-byte)
 * boundary; each segment's length is a multiple of `shard_multiple` floats, so a segment splits
 * evenly over that many data-parallel ranks. Gaps are zero in params and grads and stay zero.
 * The gradient, master and moment buffers share this layout. */
#ifndef ST_MODEL_LAYOUT_H
#define ST_MODEL_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "core/mem.h"
#include "core/status.h"
#include "model/config.h"

enum { BT_LN1W, BT_LN1B, BT_QKVW, BT_QKVB, BT_ATTPROJW, BT_ATTPROJB, BT_LN2W, BT_LN2B,
       BT_FCW, BT_FCB, BT_FCPROJW, BT_FCPROJB, BT_COUNT };
enum { LB_LN1W, LB_WQ, LB_WK, LB_WV, LB_WO, LB_LN2W, LB_WGATE, LB_WUP, LB_WDOWN, LB_COUNT };

/* Tensors per block: BT_COUNT (GPT-2) or LB_COUNT (Llama). */
int layout_block_tensors(const ModelConfig *cfg);
/* The q|k|v GEMM's output width: (NH + 2·KV)·hs (GPT-2: 3C). */
int layout_qkv_width(const ModelConfig *cfg);
/* Weight elements of one block's matmuls: GPT-2 12C²; Llama C·(C + 2·KV·hs) + C² + 3·C·F. */
double layout_block_matmul_weights(const ModelConfig *cfg);
/* Parameters of one block: GPT-2 12C² + 13C; Llama its matmul weights + 2C (two RMSNorm weights). */
long long layout_block_params(const ModelConfig *cfg);
/* Row width (floats per token) of the backward's widest per-token buffer (dbuf_a) for one tp rank:
 * max(C, the q|k|v width, the MLP width; Llama: F + 2F, the down GEMM's input gradient beside
 * gate|up's). */
size_t layout_dbuf_width(const ModelConfig *cfg, int tp);
/* The row chunks' partial sums (GptRunState.sums): a LayerNorm's parameter gradients and the bias
 * gradients (kernels.h, colsum_floats), the widest of them, over B·T rows. */
size_t layout_sums_floats(const ModelConfig *cfg, int B, int T, int tp);

typedef struct {
    char name[48];   /* our name: "wte", "h.3.qkvw", "lnfw" */
    int id;          /* index in the whole network's list (wte 0, wpe or Llama's lm_head 1, block
                        l's k-th 2 + K·l + k with K = layout_block_tensors, lnfw 2 + K·L, lnfb
                        3 + K·L), whatever stage or slice a layout holds: the initialisation's RNG
                        stream and the match between layouts */
    int segment;     /* 0 embeddings, 1..L blocks, L+1 final norm */
    int ndim;
    int shape[2];    /* padded shape as stored (wte has Vp rows) */
    int rows_real;   /* rows that are real (wte: V; otherwise shape[0]) */
    size_t offset;   /* in floats from the start of the flat buffer */
    size_t numel;    /* shape[0] * shape[1] */
    int decay;       /* 1 for 2-D matmul and embedding weights: weight decay applies */
    float lr_mult;   /* the optimizer's learning-rate factor: 1/m for the hidden matrices under muP
                        (m = model_width_mult), 1 otherwise */
    /* Tensor parallelism: how this tensor is split over the tp ranks (Megatron's layer splits). */
    int split;       /* TP_REPLICATED, TP_ROWS (column-parallel weights, their biases, wte's
                        vocabulary rows) or TP_COLS (row-parallel weights) */
    int groups;      /* TP_ROWS: the full tensor's rows are `groups` equal blocks (qkv: Q, K, V),
                        each split over tp; a rank holds its part of each block, in order */
} TensorInfo;

enum { TP_REPLICATED = 0, TP_ROWS = 1, TP_COLS = 2 };

/* The blocks a pipeline rank holds: n contiguous ranges [first[i], last[i]) (one per model chunk,
 * in chunk order; interleaved schedules give a rank several). The rank holding block 0 also holds
 * the embeddings (wte, wpe); the one holding block L − 1 the final LayerNorm and the LM head, whose
 * weight is the tied wte: with pp > 1 both ends hold a copy of wte. */
#define LAYOUT_MAX_CHUNKS 16
typedef struct {
    int n;
    int first[LAYOUT_MAX_CHUNKS], last[LAYOUT_MAX_CHUNKS];
} StageBlocks;

/* Every block: one range [0, L). */
StageBlocks layout_all_blocks(const ModelConfig *cfg);

typedef struct {
    ModelConfig cfg;      /* the whole network's */
    StageBlocks stage;    /* the blocks held (all of them unless a pipeline stage) */
    int has_embed;        /* holds wte and wpe (block 0 held) */
    int has_head;         /* holds the final LayerNorm and the head's wte (block L − 1 held) */
    int shard_multiple;
    int tp, tp_rank;      /* the tensor-parallel slice this layout holds (1, 0: everything) */
    int vocab_local;      /* wte rows held: Vp_tp / tp, Vp_tp = V rounded up to 64·tp */
    int nseg;             /* L + 2, whatever is held: segments not held are empty */
    size_t *seg_off;      /* nseg + 1 offsets, seg_off[nseg] == total */
    TensorInfo *tensors;  /* the tensors held, in segment order (2 + 12 L + 2 for the whole model) */
    int ntensors;
    size_t total;         /* floats in the flat buffer, padding included */
} ParamLayout;

/* Builds the layout; cfg must be validated. Returns 0, or -1 when out of memory. */
int layout_init(ParamLayout *pl, const ModelConfig *cfg, int shard_multiple);
/* The layout of tp rank tp_rank's slice (tp must divide the heads; layout_tp_check): each block's
 * qkvw (3C/tp, C) and qkvb hold the rank's heads' Q, K and V rows, attprojw (C, C/tp) their
 * columns, fcw (4C/tp, C) and fcb its share of the MLP rows, fcprojw (C, 4C/tp) the matching
 * columns; LayerNorms, wpe and the row-parallel biases attprojb, fcprojb are replicated; wte holds
 * vocabulary rows [tp_rank·Vl, (tp_rank+1)·Vl), Vl = vocab_local (rows past V are padding, zero).
 * Names are the full tensors' (checkpoints hold full shapes; layout_tp_copy moves slices). */
int layout_init_tp(ParamLayout *pl, const ModelConfig *cfg, int shard_multiple, int tp, int tp_rank);
/* The layout of a pipeline rank holding the blocks of sb (NULL: all) of tp rank tp_rank's slice:
 * segment 0 holds wte (and wpe on the embedding stage) when it has the embeddings or the head,
 * segment l + 1 block l when held, segment L + 1 the final norm on the head's stage; the others are
 * empty. Returns -1 on a bad argument (ranges outside [0, L), overlapping or unordered) or when out
 * of memory. */
int layout_init_stage(ParamLayout *pl, const ModelConfig *cfg, int shard_multiple, int tp, int tp_rank,
                      const StageBlocks *sb);
/* 1 if block l is held. */
int layout_holds_block(const ParamLayout *pl, int l);
/* ST_ERR_INPUT unless tp splits cfg: heads and the MLP width (4C) divisible by tp; the message
 * names --tp and the numbers. */
Status layout_tp_check(const ModelConfig *cfg, int tp, Err *err);
/* Copies every tensor's slice between a tp-slice layout (local, lbuf; any stage) and the full layout
 * (full, fbuf: layout_init's, any shard_multiple), tensors matched by id: to_full = 1 writes the
 * slice's elements into fbuf (replicated tensors only when with_replicated), 0 reads them from fbuf
 * into lbuf (everything). */
void layout_tp_copy(const ParamLayout *local, float *lbuf, const ParamLayout *full, float *fbuf, int to_full,
                    int with_replicated);
/* One tensor's slice: t (a tp-slice layout's, split over tp ranks, this one tp_rank) at lt, the
 * whole tensor f at ft (f's padded shape: wte's rows_real rows are the ones copied). */
void layout_tp_copy_tensor(const TensorInfo *t, int tp, int tp_rank, float *lt, const TensorInfo *f, float *ft,
                           int to_full);
void layout_free(ParamLayout *pl);
/* Tensor index by name, -1 if absent. */
int layout_find(const ParamLayout *pl, const char *name);
/* Tensor index by id (TensorInfo.id), -1 if not held. */
int layout_find_id(const ParamLayout *pl, int id);

/* Named pointers into one flat buffer of the layout. Llama uses ln1w (attention RMSNorm), qkvw (wq,
 * followed by wk and wv), attprojw (wo), ln2w (MLP RMSNorm), fcw (wgate, followed by wup) and
 * fcprojw (wdown); its bias and LayerNorm-bias pointers are NULL. */
typedef struct {
    float *ln1w, *ln1b;          /* (C) */
    float *qkvw, *qkvb;          /* (3C, C), (3C) */
    float *attprojw, *attprojb;  /* (C, C), (C) */
    float *ln2w, *ln2b;          /* (C) */
    float *fcw, *fcb;            /* (4C, C), (4C) */
    float *fcprojw, *fcprojb;    /* (C, 4C), (C) */
} BlockParams;

typedef struct {
    float *wte;          /* (Vp, C) */
    float *wpe;          /* (maxT, C); NULL for Llama */
    float *lm_head;      /* (Vp, C) untied head (Llama); NULL when tied */
    float *head;         /* the head's weight: lm_head, or wte when tied (NULL off the head's stage) */
    BlockParams *blocks; /* L entries, owned by the caller of layout_views */
    float *lnfw, *lnfb;  /* (C); lnfb NULL for Llama */
} ParamViews;

/* Points v at base (a flat buffer of pl->total floats); v->blocks must hold L entries. Tensors the
 * layout does not hold (another pipeline stage's) get NULL. */
void layout_views(const ParamLayout *pl, float *base, ParamViews *v);

/* Points the views of segment s (0 embeddings, 1..L blocks, L + 1 final norm) at buf, which holds
 * that segment's floats (seg_off[s + 1] − seg_off[s]); the other views are left as they are. */
void layout_segment_views(const ParamLayout *pl, int s, float *buf, ParamViews *v);

/* The dimensions derived from a config and a tensor-parallel degree, computed once (layout_dims) for
 * the model, the layout and the sizes `plan` prices: what one tp rank's GEMMs and kernels work on. */
typedef struct {
    int C, hs;         /* width, head size C/NH */
    int Cl, Fl;        /* a rank's attention width C/tp and MLP width F/tp (GPT-2 F = 4C) */
    int NHl, KVl;      /* a rank's query heads NH/tp and KV heads KV/tp (GPT-2: NHl) */
    int QKVl, Hl;      /* the q|k|v GEMM's width (NHl + 2·KVl)·hs, the fc GEMM's (Llama gate|up: 2·Fl) */
    int Vl;            /* vocabulary rows a rank holds (padded; the vocabulary-parallel split) */
    int rms;           /* Llama: RMSNorm, RoPE, GQA, SwiGLU, no biases */
} ModelDims;

/* cfg validated, tp >= 1 dividing the heads. */
ModelDims layout_dims(const ModelConfig *cfg, int tp);

/* Activation floats saved by the forward pass for one micro-batch of B×T (no recompute),
 * per layer and in total; the exact sizes the trainer allocates. */
typedef struct {
    size_t encoded;      /* B T C: block 0 input */
    size_t per_layer;    /* saved tensors of one block (recompute level applied) */
    size_t shared;       /* one block's recomputed tensors, shared by all blocks (0 without recompute) */
    size_t final_;       /* lnf out, mean, rstd, per-row losses */
    size_t docpos;       /* cfg->doc_mask: the slot's per-token document positions (N int32, counted as
                            N floats); else 0 */
    size_t slot;         /* one pipeline slot: docpos + encoded + blocks·per_layer + final_ (+ the head's input
                            gradient with several slots); the whole model: encoded + L per_layer + final_ */
    size_t total;        /* slots · slot + shared */
    size_t scratch;      /* backward and head scratch (workspace) */
} ActSizes;

/* Activation recompute (DESIGN §3 `recompute`):
 *   NONE       every tensor of every block is saved;
 *   SELECTIVE  the cheap ones (LayerNorm outputs ln1, ln2 and the GELU output) are not saved: one
 *              shared copy is recomputed in backward from the saved inputs and statistics;
 *   FULL       only each block's output (the next block's input) is saved; backward reruns the
 *              block's forward into one shared set of buffers. */
typedef enum { RECOMPUTE_NONE = 0, RECOMPUTE_SELECTIVE = 1, RECOMPUTE_FULL = 2 } Recompute;

/* What a pipeline rank keeps of activations: `slots` sets (micro-batches in flight: the
 * schedule's peak, sched_simulate's peak_inflight), each holding one model chunk's `blocks` blocks
 * (the largest chunk of the rank), the chunk's input (the received activations, or the
 * embedding), and on the head's rank the final LayerNorm, the losses and, with slots > 1, the
 * head's input gradient (N·C: the fused head computes it in the forward). pipe = 1 adds the
 * received output gradient (Nl·C) to the workspace (sent gradients go out of the runtime's pool,
 * MEM_COMM). NULL: the whole model, one slot, no pipeline. */
typedef struct {
    int blocks, slots, head, pipe;
    int split;   /* split backward (zb-h1): each block also keeps its weight GEMMs' output gradients
                    per slot: N·(2C + 4C/tp + 3C/tp) floats (bf16: the fcproj, fc and qkv parts in half) */
} ActStage;

/* What one rank's activations and workspace depend on: one record for every caller (the model's
 * allocation, plan, the tests) instead of positional variants. */
typedef struct {
    int B, T;              /* micro-batch capacity B×T */
    int threads;           /* the attention scratch is per thread */
    Recompute recompute;   /* what backward recomputes (default NONE) */
    int precision;         /* 0 fp32, 1 bf16, 2 fp16 (as layout_memory_plan). bf16 stores the LayerNorm
                              outputs (ln1, ln2) and the GELU output as bf16 (they are only ever GEMM
                              operands) and adds the bf16 GEMM scratch; fp16 (emulated) stores fp32
                              and adds its fp32 rounding scratch */
    int tp, sp;            /* tp rank's slice (layout_init_tp; default 1) and sequence parallelism: the
                              parallel regions' tensors (qkv, attention, fc) hold their share of the
                              columns, the residual stream's (encoded, LayerNorm outputs and statistics,
                              res2, res3, lnf) N/tp rows under --sp; the workspace adds the
                              vocabulary-parallel loss statistics and, under --sp, the gathered
                              LayerNorm output (docs/parallel.md) */
    const ActStage *stage; /* a pipeline rank's share; NULL (default): the whole model, one slot */
    int device;            /* 1: a backend whose memory the host cannot address (CUDA): none of the
                              CPU kernels' own scratch (layout_head_pack_words); 0 (default): the CPU */
} ActOptions;

/* B×T, threads, and the defaults: fp32, no recompute, tp 1, no sp, the whole model. */
ActOptions layout_act_options(int B, int T, int threads);

/* Activation floats saved per block and in total, and the workspace, for o: the exact sizes the
 * trainer allocates. */
ActSizes layout_activations(const ModelConfig *cfg, const ActOptions *o);
/* The ActStage of a layout's stage with `slots` slots (pipe when the layout is not the whole model). */
ActStage layout_act_stage(const ParamLayout *pl, int slots);
const char *layout_recompute_name(Recompute rc);

/* bf16 conversion scratch of the mixed-precision GEMMs on a tp rank, in elements (N = B·T):
 * a >= max(N·max(C, 4C/tp), layout_head_grad_rows(cpu)·Vl), b >= N·max(C, 4C/tp); cpu 0 for a device
 * backend, and for fp16's scratch (one chunk). */
void layout_bf16_scratch_tp(const ModelConfig *cfg, int B, int T, int tp, int cpu, size_t *a, size_t *b);
/* uint32 words of the bf16 head's two packed weight copies (kernels.h MatPrec.wt, .wn) on a tp
 * rank holding the head, on the CPU: twice the larger mm_packed_b_words of its Vl × C rows' two layouts where
 * the head takes the packed GEMMs (bf16 and mm_head_pack_wanted(B·T): AVX512_BF16 without AMX, or
 * ST_BF16_GEMM=packed, and at least 256 rows a micro-batch), else 0. GPT-2 124M: 2 × 77 MB. */
size_t layout_head_pack_words(const ModelConfig *cfg, int B, int T, int tp, int precision);

/* Planned bytes per memory category (core/mem.h order) of one process training this model
 * without sharding: parameters (bf16 working copy under bf16), master weights (fp32, bf16 only),
 * gradients (fp32), optimizer moments (nmoments fp32 buffers), activations and workspace (the
 * recompute level and the bf16 scratch applied). Other categories are 0. The allocator uses the
 * same functions, so planned == allocated exactly (tested). */
/* precision: 0 fp32, 1 bf16, 2 fp16 (fp16: 2-byte working copy plus fp32 scratch for the
 * rounded operands and the widest weight, see MatPrec). */
/* o: the run (o->tp, o->sp and o->stage must be the defaults: one process). */
void layout_memory_plan(const ModelConfig *cfg, const ActOptions *o, int nmoments, size_t *bytes /* MEM_NCAT entries */);

/* Activation and workspace bytes (bytes[MEM_ACTIVATIONS], [MEM_WORKSPACE]; the rest untouched) of
 * the rank o describes (its precision's GEMM scratch included): exactly what gpt_init allocates. */
void layout_run_bytes(const ModelConfig *cfg, const ActOptions *o, size_t bytes[MEM_NCAT]);

/* ---- The two formulas the trainer, parallel, plan and the tests share (one function each) ---- */

/* Bytes per element of each state kind. master 0: the weights are the master (fp32 training). */
typedef struct {
    int weight;   /* the working weights the matmuls read */
    int grad;     /* gradients */
    int master;   /* master weights the optimizer updates (0: none) */
    int moment;   /* each optimizer moment */
} StateBytes;

/* This trainer's element sizes: precision 0 (fp32) 4/4/0/4; 1 (bf16) and 2 (fp16) 2/4/4/4: a 2-byte
 * working copy beside fp32 gradients, master weights and moments. */
StateBytes layout_state_bytes(int precision);

/* Bytes of parameters, gradients, master weights and moments (bytes[MEM_PARAMS], [MEM_GRADS],
 * [MEM_MASTER], [MEM_MOMENTS]; other entries 0) that one rank of a data-parallel group of dp ranks
 * allocates at ZeRO stage `zero` (0..3) for element sizes b and n_moments moment buffers: exactly
 * what gpt_init and par_init allocate (docs/parallel.md), and with dp = 1, zero = 0 what one
 * process allocates. pl must be built with shard_multiple = dp. With T = pl->total, S = T/dp (the
 * shard), E = the embedding segment, X = the largest other segment (one bucket or gather slot):
 *   moments = n·moment·T             stage 0   | n·moment·S                  stage >= 1
 *   grads   = grad·T                 stage 0-1 | grad·(S + E + 2X)           stage >= 2 (shard,
 *                                                embedding bucket, two bucket slots)
 *   master  = master·T               stage 0-2 | master·S                    stage 3
 *   weights = weight·T               stage 0-2 | stage 3: weight·(S + E + 2X) when master = 0,
 *             else (master + weight)·(E + 2X): gather buffers of master precision and their copies. */
void layout_zero_bytes(const ParamLayout *pl, int dp, int zero, int n_moments, StateBytes b,
                       size_t bytes[MEM_NCAT]);

/* ---- Whole-matrix optimizers (Muon; docs/optimizers.md) ---- */

/* One hidden matrix: the 2-D weights of segments 1..L (not the embeddings or the head), GPT-2's
 * packed q|k|v split into its three row blocks (modded-nanogpt orthogonalises q, k and v apart). */
typedef struct {
    int tensor;    /* index in pl->tensors */
    size_t offset; /* flat offset of its first element */
    int rows, cols;
} LayoutMatrix;

/* The hidden matrices of pl in layout order into out (may be NULL); returns their count. */
int layout_hidden_matrices(const ParamLayout *pl, LayoutMatrix *out);

/* Bytes every rank allocates for Muon beside the moments (MEM_MOMENTS): the gather buffer of the
 * update inputs and outputs, one float per element of segments 1..L (seg_off[L+1] − seg_off[1]),
 * and Newton–Schulz scratch for the largest hidden matrix (optim/muon.h muon_ns_scratch_bytes: with
 * m = min(rows, cols), n = max: 4·(2mn + 2m²), bf16 + 2·(mn + 2m²); the maximum over matrices). */
size_t layout_muon_bytes(const ParamLayout *pl, int bf16);

/* Longest processing time first: items by cost descending (index ascending on ties), each to the
 * one of n_owners with the least cost so far (lowest index on ties); owner[i] receives item i's
 * owner. Returns the most loaded owner's cost, or -1 when out of memory. The one rule behind Muon's
 * matrix owners and Shampoo's block owners (deterministic: every rank computes the same). */
double layout_lpt_assign(const double *cost, int n, int n_owners, int *owner);

/* FLOPs of the most loaded dp rank's whole-matrix optimizer work per step: Muon (muon = 1) the
 * Newton–Schulz iterations of its matrices, 5·(4m²n + 2m³) each (m = min, n = max of the shape);
 * Shampoo (muon = 0) its blocks' costs as in layout_shampoo_blocks (roots amortised over `every`).
 * plan adds it to the optimizer's time at the matmul rate. -1 when out of memory. */
double layout_matrix_opt_flops(const ParamLayout *pl, int muon, int block, int every, int dp);

/* Shampoo's blocks: each hidden matrix cut into blocks of at most `block` rows × `block` cols
 * (row-major order of blocks, matrices in layout_hidden_matrices order), each assigned to one of dp
 * owner ranks, longest processing time first: blocks by cost descending (index order on ties), each
 * to the rank with the least cost so far (lowest rank on ties). Cost = FLOPs of a step of the block
 * with the roots amortised over `every` steps: 4·r·c·(r + c) (statistics and P_L·M·P_R) +
 * 9·(r³ + c³)/every (dsyevd and the root's GEMM). */
typedef struct {
    int matrix;    /* index in layout_hidden_matrices */
    int tensor;    /* index in pl->tensors */
    size_t offset; /* flat offset of the block's first element */
    int r, c, ld;  /* block rows, cols and the matrix's row stride (its cols) */
    int owner;     /* dp rank */
} LayoutBlock;

/* The blocks into out (may be NULL); returns their count. block >= 1 (the callers validate it;
 * aborts otherwise). */
int layout_shampoo_blocks(const ParamLayout *pl, int block, int every, int dp, LayoutBlock *out);

/* Bytes dp rank `rank` allocates for Shampoo beside the moments (MEM_MOMENTS): the gather buffer
 * (4 · (seg_off[L+1] − seg_off[1])), the state of its own blocks (4 · Σ (2·(r² + c²) + r·c): L, R,
 * P_L, P_R and the block's direction D), padding to the next multiple of 64 bytes, and scratch for
 * the largest block of the model
 * (optim/shampoo.h shampoo_block_scratch_bytes: max(8·r·c, shampoo_root_work_bytes(max(r, c))),
 * root work(n) = 8·(n² + n + 1 + 6n + 2n²) + 4·(3 + 5n) + 4·n² + 8). */
size_t layout_shampoo_bytes(const ParamLayout *pl, int block, int every, int dp, int rank);

/* FLOPs per token of a GPT-style decoder (a multiply-add is 2; PaLM's accounting: attention scores
 * over the full T×T, embedding lookups free, backward = 2 × forward), by part of the forward pass.
 * T here is the attention span S of a token: the keys it is charged for, T without document masking
 * (PaLM's full row); with it, each document of length L_i is charged its full L_i × L_i block, so a
 * row costs Σ L_i² scores instead of T², i.e. S = Σ L_i² / T per token (layout_doc_span). Both
 * count full squares, not causal triangles (T(T+1)/2, L_i(L_i+1)/2): the convention stays PaLM's,
 * and the masked count is the unmasked one scaled by the same Σ L_i² / T² (docs/doc-mask.md). */
typedef struct {
    double blocks;    /* the blocks' matmuls: 2·L·W, W = weight elements of one block's matmuls */
    double attention; /* QKᵀ and AV: 4·L·S·C */
    double head;      /* the LM head: 2·V·C */
    double train;     /* model FLOPs per trained token: 3·(blocks + attention + head) */
} TokenFlops;

TokenFlops layout_token_flops(double block_matmul_weights, int L, int C, int V, double span);

/* Model FLOPs per trained token of our GPT-2 (W = 12C², V unpadded): 6·(12·L·C² + V·C) + 12·L·T·C.
 * The MFU numerator of the trainer and plan's exact count. */
double layout_flops_per_token(const ModelConfig *cfg, int T);
/* The same at attention span `span` (layout_token_flops): layout_flops_per_token(cfg, T) is
 * layout_flops_per_token_span(cfg, T); document masking passes layout_doc_span's. */
double layout_flops_per_token_span(const ModelConfig *cfg, double span);
/* Model FLOPs per trained token of LoRA fine-tuning (model/lora.h) at attention span `span`: the
 * forward, and a backward that computes input gradients only, the frozen base's weight gradients
 * being skipped (its blocks' matmuls and the head once each instead of twice: 2·(blocks + head)),
 * the attention's backward whole (its operands are activations: 3·attention), plus 6 FLOPs per
 * adapter parameter (each adapter's forward, weight gradient and input gradient). The LoRA
 * trainer's MFU numerator and plan's (docs/lora.md, "Compute"). */
double layout_lora_flops_per_token(const ModelConfig *cfg, double span, double adapter_params);
/* The attention span of the (B, T) tokens inp under document masking: Σ over rows and over the
 * documents of each row (a document ends after an `eot` token or at the row's end) of L_i², over
 * B·T. T for rows without an EOT; 1 for rows of EOTs only. */
double layout_doc_span(const int32_t *inp, int B, int T, int eot);
/* plan's price of the span for documents of mean length mean_len (> 0) in rows of T: min(mean_len,
 * T), exact for rows of whole documents of that length (the documents cut at row edges ignored). */
double layout_doc_span_mean(int T, double mean_len);

/* Dropout's draws per trained token (drop_factors' elements), the forward's: the embedding's
 * output (C), and per block the attention probabilities (each head's row of keys, (span + 1)/2 on
 * average under the causal mask: t + 1 keys at position t, span T; document masking's span
 * likewise) and the two residual branches (2C). The backward draws each once more (the factors
 * are recomputed, not stored), full recompute the forward's once more. With tp the heads split
 * over the ranks, the residual streams only under --sp. plan's price of --dropout. */
typedef struct {
    double embed, block;
} DropDraws;
DropDraws layout_dropout_draws(int C, int n_head, double span, int tp, int sp);

/* Bytes of memory traffic per logit of the fused LM head's passes outside its GEMMs (the max,
 * the exponentials and their sum, the loss, the logit gradient: kernels_head.c), each chunk of
 * logits (64 MiB, layout_head_chunk_rows) larger than the caches. precision 0 fp32, 1 bf16, 2
 * fp16; vp 1: the vocabulary-parallel head of tp > 1.
 *   vp 0: one row at a time: its max pass reads it from memory (4), the exponential and gradient
 *         passes find it in L2, the written row goes back (4): 8; bf16 also writes the bf16
 *         gradient the backward GEMMs read (2): 10; fp16 rounds the fp32 gradient in a pass of
 *         its own (4 + 2): 14.
 *   vp 1: the chunk's rows between the two all-reduces: a max pass (4), a sum pass (4), the
 *         gradient pass (4 + 4): 16; bf16 and fp16 cast the gradient in a pass (4 + 2): 22.
 * plan's price of the head's elementwise work: × tokens × the rank's vocabulary rows / memory
 * bandwidth (config B at 2 threads, fp32: 8 B × 2048 × 50257 at 20 GB/s = 41 ms; measured, the head's
 * time less its GEMMs' at the layers' rate, 43: docs/plan.md). */
double layout_head_softmax_bytes(int precision, int vp);

/* ---- Pipeline stages: which blocks each of pp stages holds (docs/plan.md, "Pipeline stages") ----
 *
 * Stage s holds blocks [first[s], last[s]) (half-open, contiguous, first[0] = 0, last[s] =
 * first[s+1], last[pp-1] = L, every stage at least one block). Stage 0 also holds the embeddings
 * (wte, wpe), the last stage the final LayerNorm and the LM head + loss, which reads the tied wte:
 * with pp > 1 both ends hold a copy of wte. pp = 1 is one stage holding everything.
 *
 * Cost model (FLOPs per token, layout_token_flops's per-part numbers with L = 1, so the stages'
 * costs sum to layout_flops_per_token exactly): a block costs 3·(2·12C² + 4·T·C) (its matmuls and
 * attention, forward + 2 × forward in backward), the head 3·2·V·C (V unpadded), the embedding
 * lookups 0 (PaLM's accounting counts matmuls only; so are the LayerNorms, the final one included). */

/* Splits cfg's L blocks into pp stages: first[pp], last[pp] filled on ST_OK (untouched otherwise).
 * explicit_layers NULL or "": balanced, the split minimising the largest stage cost (an exact DP
 * over contiguous splits); among splits with that maximum, the one with the least sum of squared
 * stage costs (the most even), and among those the one with the fewest blocks on the earliest stages
 * (under 1F1B stage s holds pp − s micro-batches of activations, so spare blocks go late).
 * explicit_layers "4,4,3,3" (--pp-layers): blocks per stage, pp counts, each >= 1, summing to L.
 * ST_ERR_INPUT with one line naming --pp or --pp-layers, what was expected and what was found:
 * pp < 1, pp > L, a count that is not a positive decimal number, the wrong number of counts, a sum
 * other than L. T >= 1 is the sequence length the attention cost is counted at. */
/* The split-backward schedule (--pp-schedule zb-h1) needs what a block saved in its forward whole:
 * ST_ERR_INPUT naming --pp-schedule zb-h1 unless recompute is none and sp is off. The one rule of
 * the model (gpt_init) and plan's checklist. */
Status layout_check_split_backward(Recompute recompute, int sp, Err *err);

Status layout_pp_split(const ModelConfig *cfg, int T, int pp, const char *explicit_layers, int first[], int last[],
                       Err *err);

/* Training FLOPs per token of stage `stage` of the split (the cost model above): the stage's
 * blocks, plus the head on the last stage. Sums over the stages to layout_flops_per_token. */
double layout_pp_stage_flops(const ModelConfig *cfg, int T, const int first[], const int last[], int stage, int pp);

/* Parameters (elements, unpadded: V rows of wte, no alignment gaps) stage `stage` holds:
 *   every stage      its blocks, 12C² + 13C each;
 *   stage 0          + wte (V·C) + wpe (maxT·C);
 *   stage pp − 1     + lnf (2C) + its own copy of the tied wte (V·C) when pp > 1.
 * With pp = 1 this is model_config_num_params; summed over pp > 1 stages it is that plus V·C. */
long long layout_pp_stage_params(const ModelConfig *cfg, const int first[], const int last[], int stage, int pp);

/* fp16 scratch in floats: fa >= max(N·4C, chunk·Vp), fb >= N·4C, fw >= the widest weight. */
void layout_fp16_scratch(const ModelConfig *cfg, int B, int T, size_t *fa, size_t *fb, size_t *fw);
void layout_fp16_scratch_tp(const ModelConfig *cfg, int B, int T, int tp, size_t *fa, size_t *fb, size_t *fw);

/* Rows of logits computed at once in the fused LM head + loss (bounds the logits buffer). */
int layout_head_chunk_rows(const ModelConfig *cfg, int B, int T);
/* Rows whose bf16 logit gradient the fused head (head_forward_backward_p, MatPrec.head_rows) keeps
 * for one pass of its two backward GEMMs: on the CPU (cpu 1) a multiple of the chunk; the chunk at
 * tp > 1 and on a device backend (cpu 0). */
int layout_head_grad_rows(const ModelConfig *cfg, int B, int T, int tp, int cpu);

/* Tensor parallelism's forward row-parallel sums (attention output and MLP down projections),
 * overlapped (issue 28, docs/parallel.md "Overlap"): the `rows` rows a rank holds of the residual
 * stream (N = B·T without --sp, N/tp with it) are computed and summed in layout_tp_row_chunks(rows)
 * pieces, chunk k covering rows [layout_tp_row_start(rows, k), layout_tp_row_start(rows, k + 1)),
 * so that one chunk's collective is in flight while the next chunk's GEMM runs. Shared by the
 * model (gpt.c) and plan's call count (plan_trainer_comm). */
#define LAYOUT_TP_ROW_CHUNKS 2
int layout_tp_row_chunks(int rows);
int layout_tp_row_start(int rows, int k);

/* ---- Pipeline ranks: what one of pp ranks holds (plan's per-rank figures; the trainer's call sites
 * compute the same: train.c pipeline_rank_stage, parallel.c par_init's tied buffer) ---- */

/* The chunks of blocks pipeline rank `rank` of pp holds when the blocks are split into S = pp·v
 * virtual stages [first[s], last[s]) (layout_pp_split with S stages): chunk c is virtual stage
 * c·pp + rank (Megatron's interleaved layout; v = 1: the one stage `rank`). v <= LAYOUT_MAX_CHUNKS. */
StageBlocks layout_pp_rank_stage(const int first[], const int last[], int pp, int v, int rank);

/* The default gradient bucket, in floats (4 MiB): ZeRO stage 0's all-reduce requests
 * (parallel's PAR_DEFAULT_BUCKET_FLOATS) and the chunks of the tied wte exchange below; plan books
 * the same buckets (plan_trainer_comm). */
#define LAYOUT_BUCKET_FLOATS ((size_t)1 << 20)

/* ZeRO 1-3's reduce-scatters and all-gathers of a segment's dp blocks run in pieces (docs/parallel.md
 * "Pieces"): piece i is the floats [i·q, (i+1)·q) of every rank's block, q = this function's result,
 * bucket_floats / dp (at least 1), so a whole piece holds at most bucket_floats; the whole block
 * (one piece) when it is no larger or when dp exceeds COMM_RING_MAX_RANKS (the ring runs the
 * pieces). 0 for an empty block. The trainer (zero.c) splits and plan_trainer_comm counts the calls
 * with it. */
size_t layout_dp_piece_floats(size_t bucket_floats, int dp, size_t block);
/* Pieces of a block of `block` floats: ceil(block / layout_dp_piece_floats(...)), 0 when empty. */
size_t layout_dp_pieces(size_t bucket_floats, int dp, size_t block);
/* ZeRO 1-3's ring reduce-scatter pieces in flight at once (zero.c's scheduler; docs/parallel.md
 * "Pieces") and the receive block each holds: LAYOUT_RS_IN_FLIGHT slots of this many floats, the
 * largest piece's per-rank part over the layout's segments, allocated once per rank as `comm`
 * memory; 0 where no ring runs (ZeRO 0, one dp rank, more than COMM_RING_MAX_RANKS). The trainer
 * allocates them and plan counts them with it. */
#define LAYOUT_RS_IN_FLIGHT 8
size_t layout_dp_rs_slot_floats(const ParamLayout *pl, int dp, int zero, size_t bucket_floats);

/* Floats of the tied wte gradient a pipeline end sends to the other end every step (and receives
 * from it): the local wte's numel (vocab_local·C) when pp > 1 and pl holds wte with exactly one of
 * the embeddings and the head; 0 otherwise. The exchange goes through a MEM_COMM buffer of
 * min(this, the bucket floats) floats, in chunks of that size. */
size_t layout_pp_tied_floats(const ParamLayout *pl, int pp);

#endif
