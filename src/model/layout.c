/* layout.c — the pure layout function (see layout.h). */
#include "model/layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/kernels.h"

static size_t round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }

static void add_tensor(ParamLayout *pl, size_t *off, int seg, const char *name, int r, int c,
                       int rows_real, int decay) {
    TensorInfo *t = &pl->tensors[pl->ntensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->segment = seg;
    t->ndim = c > 0 ? 2 : 1;
    t->shape[0] = r;
    t->shape[1] = c > 0 ? c : 1;
    t->rows_real = rows_real;
    *off = round_up(*off, 16);
    t->offset = *off;
    t->numel = (size_t)r * (size_t)(c > 0 ? c : 1);
    t->decay = decay;
    *off += t->numel;
}

int layout_init(ParamLayout *pl, const ModelConfig *cfg, int shard_multiple) {
    memset(pl, 0, sizeof *pl);
    int L = cfg->n_layer, C = cfg->n_embd;
    pl->cfg = *cfg;
    pl->shard_multiple = shard_multiple < 1 ? 1 : shard_multiple;
    pl->nseg = L + 2;
    pl->seg_off = calloc((size_t)pl->nseg + 1, sizeof *pl->seg_off);
    pl->tensors = calloc((size_t)(4 + 12 * L), sizeof *pl->tensors);
    if (!pl->seg_off || !pl->tensors) {
        layout_free(pl);
        return -1;
    }
    /* Segments start 16-float aligned and have a length that splits over shard_multiple ranks. */
    size_t seg_mult = (size_t)pl->shard_multiple * 16;
    size_t off = 0;
    pl->seg_off[0] = 0;
    add_tensor(pl, &off, 0, "wte", cfg->vocab_padded, C, cfg->vocab, 1);
    add_tensor(pl, &off, 0, "wpe", cfg->max_seq, C, cfg->max_seq, 1);
    off = round_up(off, seg_mult);
    for (int l = 0; l < L; l++) {
        int s = l + 1;
        pl->seg_off[s] = off;
        static const char *const N[BT_COUNT] = {"ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
                                                 "ln2w", "ln2b", "fcw",  "fcb",  "fcprojw",  "fcprojb"};
        const int rows[BT_COUNT] = {C, C, 3 * C, 3 * C, C, C, C, C, 4 * C, 4 * C, C, C};
        const int cols[BT_COUNT] = {0, 0, C, 0, C, 0, 0, 0, C, 0, 4 * C, 0};
        for (int k = 0; k < BT_COUNT; k++) {
            char name[48];
            snprintf(name, sizeof name, "h.%d.%s", l, N[k]);
            add_tensor(pl, &off, s, name, rows[k], cols[k], rows[k], cols[k] > 0);
        }
        off = round_up(off, seg_mult);
    }
    pl->seg_off[L + 1] = off;
    add_tensor(pl, &off, L + 1, "lnfw", C, 0, C, 0);
    add_tensor(pl, &off, L + 1, "lnfb", C, 0, C, 0);
    off = round_up(off, seg_mult);
    pl->seg_off[L + 2] = off;
    pl->total = off;
    return 0;
}

void layout_free(ParamLayout *pl) {
    free(pl->seg_off);
    free(pl->tensors);
    pl->seg_off = NULL;
    pl->tensors = NULL;
}

int layout_find(const ParamLayout *pl, const char *name) {
    for (int i = 0; i < pl->ntensors; i++)
        if (strcmp(pl->tensors[i].name, name) == 0) return i;
    return -1;
}

void layout_views(const ParamLayout *pl, float *base, ParamViews *v) {
    const TensorInfo *t = pl->tensors;
    v->wte = base + t[0].offset;
    v->wpe = base + t[1].offset;
    for (int l = 0; l < pl->cfg.n_layer; l++) {
        const TensorInfo *b = &t[2 + l * BT_COUNT];
        BlockParams *p = &v->blocks[l];
        p->ln1w = base + b[BT_LN1W].offset, p->ln1b = base + b[BT_LN1B].offset;
        p->qkvw = base + b[BT_QKVW].offset, p->qkvb = base + b[BT_QKVB].offset;
        p->attprojw = base + b[BT_ATTPROJW].offset, p->attprojb = base + b[BT_ATTPROJB].offset;
        p->ln2w = base + b[BT_LN2W].offset, p->ln2b = base + b[BT_LN2B].offset;
        p->fcw = base + b[BT_FCW].offset, p->fcb = base + b[BT_FCB].offset;
        p->fcprojw = base + b[BT_FCPROJW].offset, p->fcprojb = base + b[BT_FCPROJB].offset;
    }
    const TensorInfo *f = &t[2 + pl->cfg.n_layer * BT_COUNT];
    v->lnfw = base + f[0].offset;
    v->lnfb = base + f[1].offset;
}

int layout_head_chunk_rows(const ModelConfig *cfg, int B, int T) {
    /* Up to 16M floats (64 MiB) of logits at once, and at least 128 rows: the dwte GEMM reads and
     * writes all of dwte once per chunk, so chunks of few rows would be memory-bound. */
    long rows = (16L << 20) / cfg->vocab_padded;
    if (rows < 128) rows = 128;
    long bt = (long)B * T;
    if (rows > bt) rows = bt;
    return (int)rows;
}

/* Floats of each saved tensor of one block, for N = B·T rows. With bf16 the LayerNorm and GELU
 * outputs (only ever GEMM operands) are stored as bf16: half as many floats, rounded up. */
typedef struct { size_t ln, stats, qkv, probs, atty, res2, fch, fchg, res3; } BlockActs;

static size_t half_floats(size_t n) { return (n + 1) / 2; }

static BlockActs block_acts(const ModelConfig *cfg, int B, int T, int bf16) {
    size_t N = (size_t)B * T, C = cfg->n_embd;
    size_t ln = bf16 ? half_floats(N * C) : N * C, fchg = bf16 ? half_floats(4 * N * C) : 4 * N * C;
    BlockActs b = {ln, N, 3 * N * C, (size_t)B * cfg->n_head * T, N * C, N * C, 4 * N * C, fchg, N * C};
    return b;
}

ActSizes layout_activations_rc(const ModelConfig *cfg, int B, int T, int threads, Recompute rc) {
    return layout_activations_prec(cfg, B, T, threads, rc, 0);
}

ActSizes layout_activations_prec(const ModelConfig *cfg, int B, int T, int threads, Recompute rc, int bf16) {
    ActSizes a;
    size_t BT = (size_t)B * T, C = cfg->n_embd;
    BlockActs b = block_acts(cfg, B, T, bf16);
    /* ln1 + stats, qkv, attention lse, atty, res2, ln2 + stats, fch, fch_gelu, res3 */
    size_t all = 2 * b.ln + 4 * b.stats + b.qkv + b.probs + b.atty + b.res2 + b.fch + b.fchg + b.res3;
    size_t cheap = 2 * b.ln + b.fchg; /* selective: LayerNorm outputs and the GELU output */
    a.encoded = BT * C;
    switch (rc) {
    case RECOMPUTE_SELECTIVE: a.per_layer = all - cheap, a.shared = cheap; break;
    case RECOMPUTE_FULL: a.per_layer = b.res3, a.shared = all - b.res3; break;
    default: a.per_layer = all, a.shared = 0; break;
    }
    a.final_ = BT * C + 2 * BT + BT;
    a.total = a.encoded + (size_t)cfg->n_layer * a.per_layer + a.shared + a.final_;
    /* Workspace: dres (NC) + dbuf_a (4NC) + dbuf_b (NC) + dbuf_c (NC) + attention (per thread: fp32 score
     * blocks and bf16 copies of one head, see kernels.c)
     * + LayerNorm partial sums (2C per 64-row chunk) + one logits chunk (rows · Vp). */
    size_t chunks = (BT + 63) / 64;
    a.scratch = BT * C * 7 + attention_scratch_floats(T, (int)C / cfg->n_head, threads) + chunks * 2 * C +
                (size_t)layout_head_chunk_rows(cfg, B, T) * cfg->vocab_padded;
    return a;
}

ActSizes layout_activations(const ModelConfig *cfg, int B, int T, int threads) {
    return layout_activations_rc(cfg, B, T, threads, RECOMPUTE_NONE);
}

const char *layout_recompute_name(Recompute rc) {
    static const char *const N[] = {"none", "selective", "full"};
    return rc >= 0 && rc <= RECOMPUTE_FULL ? N[rc] : "?";
}

void layout_bf16_scratch(const ModelConfig *cfg, int B, int T, size_t *a, size_t *b) {
    size_t n4 = (size_t)B * T * 4 * cfg->n_embd;
    size_t head = (size_t)layout_head_chunk_rows(cfg, B, T) * cfg->vocab_padded;
    *a = n4 > head ? n4 : head;
    *b = n4;
}

void layout_fp16_scratch(const ModelConfig *cfg, int B, int T, size_t *fa, size_t *fb, size_t *fw) {
    layout_bf16_scratch(cfg, B, T, fa, fb);
    size_t C = cfg->n_embd, vp = (size_t)cfg->vocab_padded;
    *fw = (vp > 4 * C ? vp : 4 * C) * C;
}

void layout_memory_plan(const ModelConfig *cfg, int B, int T, int threads, Recompute rc, int precision, int nmoments,
                        size_t *bytes) {
    ParamLayout pl;
    for (int c = 0; c < MEM_NCAT; c++) bytes[c] = 0;
    if (layout_init(&pl, cfg, 1) != 0) return;
    layout_zero_bytes(&pl, 1, 0, nmoments, layout_state_bytes(precision), bytes);
    layout_free(&pl);
    ActSizes as = layout_activations_prec(cfg, B, T, threads, rc, precision == 1);
    bytes[MEM_ACTIVATIONS] = as.total * 4;
    bytes[MEM_WORKSPACE] = as.scratch * 4;
    if (precision == 1) {
        size_t a, b;
        layout_bf16_scratch(cfg, B, T, &a, &b);
        bytes[MEM_WORKSPACE] += (a + b) * 2;
    } else if (precision == 2) {
        size_t fa, fb, fw;
        layout_fp16_scratch(cfg, B, T, &fa, &fb, &fw);
        bytes[MEM_WORKSPACE] += (fa + fb + fw) * 4;
    }
}

StateBytes layout_state_bytes(int precision) {
    StateBytes b = {4, 4, 0, 4};
    if (precision != 0) b.weight = 2, b.master = 4; /* bf16 and fp16: a 2-byte copy of the fp32 master */
    return b;
}

void layout_zero_bytes(const ParamLayout *pl, int dp, int zero, int n_moments, StateBytes b, size_t bytes[MEM_NCAT]) {
    for (int c = 0; c < MEM_NCAT; c++) bytes[c] = 0;
    size_t T = pl->total, S = pl->total / (size_t)(dp < 1 ? 1 : dp), E = pl->seg_off[1] - pl->seg_off[0], X = 0;
    for (int s = 1; s < pl->nseg; s++) {
        size_t n = pl->seg_off[s + 1] - pl->seg_off[s];
        if (n > X) X = n;
    }
    /* Stage 3 keeps the shard, the embedding segment whole (wte is also the tied LM head, read after the
     * last block) and two gather slots; stage 2's gradients are the same shape of buffers. */
    size_t buffers = E + 2 * X;
    size_t w = (size_t)b.weight, g = (size_t)b.grad, m = (size_t)b.master, mo = (size_t)b.moment;
    bytes[MEM_MOMENTS] = mo * (size_t)n_moments * (zero >= 1 ? S : T);
    bytes[MEM_GRADS] = g * (zero >= 2 ? S + buffers : T);
    bytes[MEM_MASTER] = m * (zero >= 3 ? S : T);
    if (zero < 3) bytes[MEM_PARAMS] = w * T;
    else bytes[MEM_PARAMS] = m ? (m + w) * buffers : w * (S + buffers);
}

TokenFlops layout_token_flops(double block_matmul_weights, int L, int C, int V, int T) {
    TokenFlops f;
    f.blocks = 2.0 * L * block_matmul_weights;
    f.attention = 4.0 * L * (double)T * C;
    f.head = 2.0 * (double)V * C;
    f.train = 3.0 * (f.blocks + f.attention + f.head);
    return f;
}

double layout_flops_per_token(const ModelConfig *cfg, int T) {
    double C = cfg->n_embd;
    /* qkv 3C², attention projection C², MLP 4C² + 4C² */
    return layout_token_flops(12.0 * C * C, cfg->n_layer, cfg->n_embd, cfg->vocab, T).train;
}
