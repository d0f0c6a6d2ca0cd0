/* layout.c — the pure layout function (see layout.h). */
#include "model/layout.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/collective.h"
#include "model/kernels.h"
#include "model/matmul.h"

static size_t round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }

/* Appends a tensor at *off, rounded up to 16 floats unless `packed` (then it follows the previous
 * tensor directly: Llama's wq|wk|wv and wgate|wup are each one GEMM's weight). */
static void add_tensor_at(ParamLayout *pl, size_t *off, int id, int seg, const char *name, int r, int c,
                          int rows_real, int decay, int split, int groups, int packed) {
    TensorInfo *t = &pl->tensors[pl->ntensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->id = id;
    t->segment = seg;
    t->ndim = c > 0 ? 2 : 1;
    t->shape[0] = r;
    t->shape[1] = c > 0 ? c : 1;
    t->rows_real = rows_real;
    if (!packed) *off = round_up(*off, 16);
    t->offset = *off;
    t->numel = (size_t)r * (size_t)(c > 0 ? c : 1);
    t->decay = decay;
    /* muP's hidden matrices: the 2-D weights inside the blocks (segments 1..L); the embeddings and
     * the output head keep the base learning rate. */
    t->lr_mult = c > 0 && seg >= 1 && seg <= pl->cfg.n_layer ? (float)(1.0 / model_width_mult(&pl->cfg)) : 1.0f;
    t->split = split;
    t->groups = groups;
    *off += t->numel;
}

static void add_tensor(ParamLayout *pl, size_t *off, int id, int seg, const char *name, int r, int c,
                       int rows_real, int decay, int split, int groups) {
    add_tensor_at(pl, off, id, seg, name, r, c, rows_real, decay, split, groups, 0);
}

int layout_block_tensors(const ModelConfig *cfg) { return cfg->arch == ARCH_LLAMA ? LB_COUNT : BT_COUNT; }

int layout_qkv_width(const ModelConfig *cfg) {
    int hs = cfg->n_embd / cfg->n_head;
    return (cfg->n_head + 2 * cfg->n_kv_head) * hs;
}

double layout_block_matmul_weights(const ModelConfig *cfg) {
    double C = cfg->n_embd;
    if (cfg->arch != ARCH_LLAMA) return 12.0 * C * C; /* qkv 3C², attention projection C², MLP 4C² + 4C² */
    return C * layout_qkv_width(cfg) + C * C + 3.0 * C * cfg->ffn; /* q k v, o, gate up down */
}

long long layout_block_params(const ModelConfig *cfg) {
    long long C = cfg->n_embd;
    if (cfg->arch != ARCH_LLAMA) return 12 * C * C + 13 * C;
    return (long long)layout_block_matmul_weights(cfg) + 2 * C; /* and the two RMSNorm weights */
}

/* wte rows one of tp ranks holds: the vocabulary padded to 64·tp so that every rank's rows are a
 * multiple of 64, split evenly (tp 1: Vp, the config's padding). */
static int vocab_local(const ModelConfig *cfg, int tp) {
    if (tp <= 1) return cfg->vocab_padded;
    return (int)(round_up((size_t)cfg->vocab, (size_t)VOCAB_PAD_MULTIPLE * tp) / (size_t)tp);
}

Status layout_tp_check(const ModelConfig *cfg, int tp, Err *err) {
    if (tp < 1) return err_set(err, ST_ERR_INPUT, "--tp: expected a positive number of ranks, found %d", tp);
    if (cfg->n_head % tp)
        return err_set(err, ST_ERR_INPUT, "--tp %d: expected a divisor of the %d attention heads (--heads), found a "
                       "remainder of %d", tp, cfg->n_head, cfg->n_head % tp);
    if (cfg->arch == ARCH_LLAMA) {
        /* KV heads are split, never replicated: tp > KV would need copies of K and V per rank. */
        if (cfg->n_kv_head % tp)
            return err_set(err, ST_ERR_INPUT, "--tp %d: expected a divisor of the %d KV heads (--kv-heads; KV heads are "
                           "split over tp, not replicated), found a remainder of %d", tp, cfg->n_kv_head,
                           cfg->n_kv_head % tp);
        if (cfg->ffn % tp)
            return err_set(err, ST_ERR_INPUT, "--tp %d: expected a divisor of the MLP width --ffn %d, found a remainder "
                           "of %d", tp, cfg->ffn, cfg->ffn % tp);
        return ST_OK;
    }
    if ((4 * cfg->n_embd) % tp)
        return err_set(err, ST_ERR_INPUT, "--tp %d: expected a divisor of the MLP width 4*%d = %d, found a remainder of %d",
                       tp, cfg->n_embd, 4 * cfg->n_embd, (4 * cfg->n_embd) % tp);
    return ST_OK;
}

StageBlocks layout_all_blocks(const ModelConfig *cfg) {
    StageBlocks sb = {1, {0}, {cfg->n_layer}};
    return sb;
}

int layout_holds_block(const ParamLayout *pl, int l) {
    for (int i = 0; i < pl->stage.n; i++)
        if (l >= pl->stage.first[i] && l < pl->stage.last[i]) return 1;
    return 0;
}

int layout_init(ParamLayout *pl, const ModelConfig *cfg, int shard_multiple) {
    return layout_init_stage(pl, cfg, shard_multiple, 1, 0, NULL);
}

int layout_init_tp(ParamLayout *pl, const ModelConfig *cfg, int shard_multiple, int tp, int tp_rank) {
    return layout_init_stage(pl, cfg, shard_multiple, tp, tp_rank, NULL);
}

int layout_init_stage(ParamLayout *pl, const ModelConfig *cfg, int shard_multiple, int tp, int tp_rank,
                      const StageBlocks *sb) {
    memset(pl, 0, sizeof *pl);
    int L = cfg->n_layer, C = cfg->n_embd, llama = cfg->arch == ARCH_LLAMA, K = layout_block_tensors(cfg);
    if (tp < 1 || tp_rank < 0 || tp_rank >= tp || cfg->n_head % tp || cfg->n_kv_head % tp || cfg->ffn % tp) return -1;
    pl->stage = sb ? *sb : layout_all_blocks(cfg);
    if (pl->stage.n < 1 || pl->stage.n > LAYOUT_MAX_CHUNKS) return -1;
    for (int i = 0, prev = 0; i < pl->stage.n; i++) {
        if (pl->stage.first[i] < prev || pl->stage.last[i] <= pl->stage.first[i] || pl->stage.last[i] > L) return -1;
        prev = pl->stage.last[i];
    }
    pl->has_embed = layout_holds_block(pl, 0);
    pl->has_head = layout_holds_block(pl, L - 1);
    pl->cfg = *cfg;
    pl->shard_multiple = shard_multiple < 1 ? 1 : shard_multiple;
    pl->tp = tp, pl->tp_rank = tp_rank;
    int vl = vocab_local(cfg, tp), vreal = cfg->vocab - tp_rank * vl;
    vreal = vreal < 0 ? 0 : vreal > vl ? vl : vreal;
    pl->vocab_local = vl;
    pl->nseg = L + 2;
    pl->seg_off = calloc((size_t)pl->nseg + 1, sizeof *pl->seg_off);
    pl->tensors = calloc((size_t)(4 + K * L), sizeof *pl->tensors);
    if (!pl->seg_off || !pl->tensors) {
        layout_free(pl);
        return -1;
    }
    /* Segments start 16-float aligned and have a length that splits over shard_multiple ranks. */
    size_t seg_mult = (size_t)pl->shard_multiple * 16;
    size_t off = 0;
    int R = TP_REPLICATED, SR = tp > 1 ? TP_ROWS : R, SC = tp > 1 ? TP_COLS : R;
    pl->seg_off[0] = 0;
    /* Segment 0: the embedding and the head's weight, wte when tied (both ends of a pipeline hold a
     * copy), lm_head when untied (on the head's stage only). */
    int tied = !cfg->untied;
    if (pl->has_embed || (pl->has_head && tied)) add_tensor(pl, &off, 0, 0, "wte", vl, C, vreal, 1, SR, 1);
    if (pl->has_embed && !llama) add_tensor(pl, &off, 1, 0, "wpe", cfg->max_seq, C, cfg->max_seq, 1, R, 1);
    if (pl->has_head && !tied) add_tensor(pl, &off, 1, 0, "lm_head", vl, C, vreal, 1, SR, 1);
    off = round_up(off, seg_mult);
    int Cl = C / tp, Fl = cfg->ffn / tp, hs = C / cfg->n_head, KVl = cfg->n_kv_head / tp * hs;
    for (int l = 0; l < L; l++) {
        int s = l + 1;
        pl->seg_off[s] = off;
        if (!layout_holds_block(pl, l)) continue;
        if (llama) {
            /* wq|wk|wv and wgate|wup packed: one GEMM each (the rank's slice of each, in order). */
            static const char *const N[LB_COUNT] = {"ln1w", "wq", "wk", "wv", "wo", "ln2w", "wgate", "wup", "wdown"};
            const int rows[LB_COUNT] = {C, Cl, KVl, KVl, C, C, Fl, Fl, C};
            const int cols[LB_COUNT] = {0, C, C, C, Cl, 0, C, C, Fl};
            const int split[LB_COUNT] = {R, SR, SR, SR, SC, R, SR, SR, SC};
            const int packed[LB_COUNT] = {0, 0, 1, 1, 0, 0, 0, 1, 0};
            for (int k = 0; k < LB_COUNT; k++) {
                char name[48];
                snprintf(name, sizeof name, "h.%d.%s", l, N[k]);
                add_tensor_at(pl, &off, 2 + l * K + k, s, name, rows[k], cols[k], rows[k], cols[k] > 0, split[k], 1,
                              packed[k]);
            }
            off = round_up(off, seg_mult);
            continue;
        }
        static const char *const N[BT_COUNT] = {"ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
                                                 "ln2w", "ln2b", "fcw",  "fcb",  "fcprojw",  "fcprojb"};
        const int rows[BT_COUNT] = {C, C, 3 * Cl, 3 * Cl, C, C, C, C, Fl, Fl, C, C};
        const int cols[BT_COUNT] = {0, 0, C, 0, Cl, 0, 0, 0, C, 0, Fl, 0};
        const int split[BT_COUNT] = {R, R, SR, SR, SC, R, R, R, SR, SR, SC, R};
        const int groups[BT_COUNT] = {1, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1};
        for (int k = 0; k < BT_COUNT; k++) {
            char name[48];
            snprintf(name, sizeof name, "h.%d.%s", l, N[k]);
            add_tensor(pl, &off, 2 + l * BT_COUNT + k, s, name, rows[k], cols[k], rows[k], cols[k] > 0, split[k],
                       groups[k]);
        }
        off = round_up(off, seg_mult);
    }
    pl->seg_off[L + 1] = off;
    if (pl->has_head) {
        add_tensor(pl, &off, 2 + L * K, L + 1, "lnfw", C, 0, C, 0, R, 1);
        if (!llama) add_tensor(pl, &off, 3 + L * K, L + 1, "lnfb", C, 0, C, 0, R, 1);
    }
    off = round_up(off, seg_mult);
    pl->seg_off[L + 2] = off;
    pl->total = off;
    return 0;
}

void layout_tp_copy(const ParamLayout *local, float *lbuf, const ParamLayout *full, float *fbuf, int to_full,
                    int with_replicated) {
    for (int k = 0; k < local->ntensors; k++) {
        const TensorInfo *t = &local->tensors[k];
        int fk = layout_find_id(full, t->id);
        ST_CHECK_MSG(fk >= 0, "layout_tp_copy: the full layout lacks a tensor of the slice");
        const TensorInfo *f = &full->tensors[fk];
        if (t->split == TP_REPLICATED && to_full && !with_replicated) continue;
        layout_tp_copy_tensor(t, local->tp, local->tp_rank, lbuf + t->offset, f, fbuf + f->offset, to_full);
    }
}

void layout_tp_copy_tensor(const TensorInfo *t, int tp, int r, float *lt, const TensorInfo *f, float *ft,
                           int to_full) {
    if (t->split == TP_REPLICATED || tp == 1) {
        size_t n = (size_t)(t->rows_real < f->rows_real ? t->rows_real : f->rows_real) * t->shape[1];
        if (!to_full) memcpy(lt, ft, n * sizeof(float));
        else memcpy(ft, lt, n * sizeof(float));
    } else if (t->split == TP_ROWS) {
        /* Local row j of group g is full row g·(q·tp) + r·q + j%q, q = rows per group held. */
        int q = t->shape[0] / t->groups, w = t->shape[1];
        for (int j = 0; j < t->rows_real; j++) {
            size_t fr = (size_t)(j / q) * q * tp + (size_t)r * q + j % q;
            float *a = lt + (size_t)j * w, *b = ft + fr * w;
            if (to_full) memcpy(b, a, (size_t)w * sizeof(float));
            else memcpy(a, b, (size_t)w * sizeof(float));
        }
    } else { /* TP_COLS: columns [r·cl, (r+1)·cl) of every row */
        int cl = t->shape[1], fc = f->shape[1];
        for (int i = 0; i < t->shape[0]; i++) {
            float *a = lt + (size_t)i * cl, *b = ft + (size_t)i * fc + (size_t)r * cl;
            if (to_full) memcpy(b, a, (size_t)cl * sizeof(float));
            else memcpy(a, b, (size_t)cl * sizeof(float));
        }
    }
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

int layout_find_id(const ParamLayout *pl, int id) {
    if (id >= 0 && id < pl->ntensors && pl->tensors[id].id == id) return id; /* the whole model's list */
    for (int i = 0; i < pl->ntensors; i++)
        if (pl->tensors[i].id == id) return i;
    return -1;
}

void layout_segment_views(const ParamLayout *pl, int s, float *buf, ParamViews *v) {
    int K = layout_block_tensors(&pl->cfg), L = pl->cfg.n_layer, llama = pl->cfg.arch == ARCH_LLAMA;
    for (int i = 0; i < pl->ntensors; i++) {
        const TensorInfo *t = &pl->tensors[i];
        if (t->segment != s) continue;
        float *q = buf + (t->offset - pl->seg_off[s]);
        if (s == 0) {
            if (t->id == 0) v->wte = q;
            else if (llama) v->lm_head = q;
            else v->wpe = q;
        } else if (s == L + 1) {
            if (t->id == 2 + L * K) v->lnfw = q;
            else v->lnfb = q;
        } else if (llama) { /* wk, wv and wup follow wq and wgate in the same buffer: no views of their own */
            BlockParams *b = &v->blocks[s - 1];
            float **f[LB_COUNT] = {&b->ln1w, &b->qkvw, NULL, NULL, &b->attprojw, &b->ln2w, &b->fcw, NULL, &b->fcprojw};
            float **dst = f[t->id - 2 - (s - 1) * K];
            if (dst) *dst = q;
        } else {
            BlockParams *b = &v->blocks[s - 1];
            float **f[BT_COUNT] = {&b->ln1w, &b->ln1b, &b->qkvw, &b->qkvb, &b->attprojw, &b->attprojb,
                                   &b->ln2w, &b->ln2b, &b->fcw, &b->fcb, &b->fcprojw, &b->fcprojb};
            *f[t->id - 2 - (s - 1) * K] = q;
        }
    }
    if (s == 0 && pl->has_head) v->head = pl->cfg.untied ? v->lm_head : v->wte;
}

void layout_views(const ParamLayout *pl, float *base, ParamViews *v) {
    BlockParams *blocks = v->blocks;
    memset(v, 0, sizeof *v);
    v->blocks = blocks;
    memset(blocks, 0, (size_t)pl->cfg.n_layer * sizeof *blocks);
    const TensorInfo *t = pl->tensors;
    int k = 0, L = pl->cfg.n_layer, llama = pl->cfg.arch == ARCH_LLAMA;
    if (k < pl->ntensors && t[k].id == 0) v->wte = base + t[k++].offset;
    if (k < pl->ntensors && t[k].id == 1) {
        if (llama) v->lm_head = base + t[k++].offset;
        else v->wpe = base + t[k++].offset;
    }
    v->head = pl->has_head ? (pl->cfg.untied ? v->lm_head : v->wte) : NULL;
    for (int l = 0; l < L; l++) {
        if (!layout_holds_block(pl, l)) continue;
        if (llama) {
            const TensorInfo *b = &t[k];
            k += LB_COUNT;
            BlockParams *p = &v->blocks[l];
            p->ln1w = base + b[LB_LN1W].offset, p->qkvw = base + b[LB_WQ].offset, p->attprojw = base + b[LB_WO].offset;
            p->ln2w = base + b[LB_LN2W].offset, p->fcw = base + b[LB_WGATE].offset;
            p->fcprojw = base + b[LB_WDOWN].offset;
            continue;
        }
        const TensorInfo *b = &t[k];
        k += BT_COUNT;
        BlockParams *p = &v->blocks[l];
        p->ln1w = base + b[BT_LN1W].offset, p->ln1b = base + b[BT_LN1B].offset;
        p->qkvw = base + b[BT_QKVW].offset, p->qkvb = base + b[BT_QKVB].offset;
        p->attprojw = base + b[BT_ATTPROJW].offset, p->attprojb = base + b[BT_ATTPROJB].offset;
        p->ln2w = base + b[BT_LN2W].offset, p->ln2b = base + b[BT_LN2B].offset;
        p->fcw = base + b[BT_FCW].offset, p->fcb = base + b[BT_FCB].offset;
        p->fcprojw = base + b[BT_FCPROJW].offset, p->fcprojb = base + b[BT_FCPROJB].offset;
    }
    if (pl->has_head) {
        v->lnfw = base + t[k].offset;
        v->lnfb = llama ? NULL : base + t[k + 1].offset;
    }
}

int layout_head_chunk_rows(const ModelConfig *cfg, int B, int T) {
    /* Up to 16M floats (64 MiB) of logits at once, and at least 128 rows: the dwte GEMM reads and
     * writes all of dwte once per chunk, so chunks of few rows would be memory-bound. A multiple of
     * 16 rows: GPT-2's padded vocabulary gave 333, and oneDNN's fp32 logits GEMM (333 x 50304 x C)
     * ran 7-11 % slower per row than at 320 or 336 (C 384 / 256, 2 threads, the 2-core Xeon VM,
     * 2026-11-30: medians of 15-21 rounds, each size's three head GEMMs called in turn; the
     * backward's groups of chunks, 1332 or 1344 rows, alike). */
    long rows = (16L << 20) / cfg->vocab_padded / 16 * 16;
    if (rows < 128) rows = 128;
    long bt = (long)B * T;
    if (rows > bt) rows = bt;
    return (int)rows;
}

int layout_head_grad_rows(const ModelConfig *cfg, int B, int T, int tp, int cpu) {
    /* Whole chunks, up to 2048 rows and 64 Mi values (128 MiB of bf16). The weight gradient's GEMM
     * reads and writes all of dwte once per pass (77 MB each way at GPT-2's vocabulary and C 384):
     * per 333-row chunk the head of config B took 418 ms a step, per 1332 rows 384, per 2048 381
     * (bench/results/step.md, "dYᵀ packed by blocks, the LM head's backward by groups of chunks"). */
    int chunk = layout_head_chunk_rows(cfg, B, T);
    if (!cpu || tp > 1) return chunk; /* a device's head, and the vocabulary-parallel one: per chunk */
    long cap = (64L << 20) / cfg->vocab_padded, bt = (long)B * T;
    if (cap > 2048) cap = 2048;
    if (cap > bt) cap = bt;
    long k = cap / chunk;
    return (int)(k < 1 ? chunk : k * chunk);
}

int layout_tp_row_chunks(int rows) { return rows < LAYOUT_TP_ROW_CHUNKS ? (rows < 1 ? 1 : rows) : LAYOUT_TP_ROW_CHUNKS; }

int layout_tp_row_start(int rows, int k) { return (int)((long)rows * k / layout_tp_row_chunks(rows)); }

ModelDims layout_dims(const ModelConfig *cfg, int tp) {
    ModelDims d;
    if (tp < 1) tp = 1;
    d.C = cfg->n_embd, d.hs = cfg->n_embd / cfg->n_head;
    d.Cl = cfg->n_embd / tp, d.Fl = cfg->ffn / tp, d.NHl = cfg->n_head / tp, d.KVl = cfg->n_kv_head / tp;
    d.QKVl = layout_qkv_width(cfg) / tp;
    d.rms = cfg->arch == ARCH_LLAMA;
    d.Hl = d.rms ? 2 * d.Fl : d.Fl; /* the fc GEMM's output: Llama's gate|up */
    d.Vl = vocab_local(cfg, tp);
    return d;
}

/* The sizes one tp rank works with, as size_t: every tensor of the residual stream has Nl rows
 * (N/tp with sequence parallelism), the parallel regions N rows of their share of the columns. */
typedef struct { size_t N, Nl, C, Cl, Fl, NHl, Vl, QKVl, Hl; int rms; } TpDims;

static TpDims tp_dims(const ModelConfig *cfg, int B, int T, int tp, int sp) {
    ModelDims m = layout_dims(cfg, tp);
    TpDims d;
    d.N = (size_t)B * T, d.Nl = sp && tp > 1 ? d.N / (size_t)tp : d.N, d.C = (size_t)m.C;
    d.Cl = (size_t)m.Cl, d.Fl = (size_t)m.Fl, d.NHl = (size_t)m.NHl, d.Vl = (size_t)m.Vl;
    d.QKVl = (size_t)m.QKVl, d.Hl = (size_t)m.Hl, d.rms = m.rms;
    return d;
}

/* Floats of each saved tensor of one block. With bf16 the LayerNorm and GELU outputs (only ever
 * GEMM operands) are stored as bf16: half as many floats, rounded up. */
typedef struct { size_t ln, stats, qkv, probs, atty, res2, fch, fchg, res3, nstats; } BlockActs;

static size_t half_floats(size_t n) { return (n + 1) / 2; }

static BlockActs block_acts(const TpDims *d, int B, int T, int bf16) {
    size_t ln = bf16 ? half_floats(d->Nl * d->C) : d->Nl * d->C, fchg = bf16 ? half_floats(d->N * d->Fl) : d->N * d->Fl;
    BlockActs b = {ln, d->Nl, d->N * d->QKVl, (size_t)B * d->NHl * T, d->N * d->Cl, d->Nl * d->C, d->N * d->Hl, fchg,
                   d->Nl * d->C, d->rms ? 2 : 4}; /* LayerNorm: mean and rstd per row; RMSNorm: rstd */
    return b;
}

ActOptions layout_act_options(int B, int T, int threads) {
    ActOptions o = {B, T, threads, RECOMPUTE_NONE, 0, 1, 0, NULL};
    return o;
}

ActStage layout_act_stage(const ParamLayout *pl, int slots) {
    ActStage st = {0, slots < 1 ? 1 : slots, pl->has_head, 0, 0};
    for (int i = 0; i < pl->stage.n; i++)
        if (pl->stage.last[i] - pl->stage.first[i] > st.blocks) st.blocks = pl->stage.last[i] - pl->stage.first[i];
    st.pipe = !(pl->stage.n == 1 && pl->has_embed && pl->has_head);
    return st;
}

ActSizes layout_activations(const ModelConfig *cfg, const ActOptions *o) {
    int B = o->B, T = o->T, threads = o->threads, bf16 = o->precision == 1, tp = o->tp, sp = o->sp;
    Recompute rc = o->recompute;
    ActStage whole = {cfg->n_layer, 1, 1, 0, 0};
    const ActStage *st = o->stage ? o->stage : &whole;
    ActSizes a;
    TpDims d = tp_dims(cfg, B, T, tp, sp);
    BlockActs b = block_acts(&d, B, T, bf16);
    /* ln1 + stats, qkv, attention lse, atty, res2, ln2 + stats, fch, fch_gelu, res3 */
    size_t all = 2 * b.ln + b.nstats * b.stats + b.qkv + b.probs + b.atty + b.res2 + b.fch + b.fchg + b.res3;
    size_t cheap = 2 * b.ln + b.fchg; /* selective: LayerNorm outputs and the GELU output */
    a.encoded = d.Nl * d.C;
    switch (rc) {
    case RECOMPUTE_SELECTIVE: a.per_layer = all - cheap, a.shared = cheap; break;
    case RECOMPUTE_FULL: a.per_layer = b.res3, a.shared = all - b.res3; break;
    default: a.per_layer = all, a.shared = 0; break;
    }
    a.final_ = st->head ? d.Nl * d.C + b.nstats / 2 * d.Nl + d.N : 0; /* lnf, its statistics, the per-row losses */
    size_t dhead = st->head && st->slots > 1 ? d.N * d.C : 0, h = bf16 ? 2 : 1;
    size_t wgrad = st->split ? (d.N * d.C + h - 1) / h + (d.N * d.Hl + h - 1) / h + d.N * d.C + (d.N * d.QKVl + h - 1) / h
                             : 0;
    a.docpos = cfg->doc_mask ? d.N : 0;
    a.slot = a.docpos + a.encoded + (size_t)st->blocks * (a.per_layer + wgrad) + a.final_ + dhead;
    a.total = (size_t)st->slots * a.slot + a.shared;
    /* Workspace: dres (Nl·C) + dbuf_a (N·max(Fl, C)) + dbuf_b (N·C) + dbuf_c (N·C) + attention (per
     * thread: fp32 score blocks and bf16 copies of one head, see kernels.c) + the row chunks' partial
     * sums (layout_sums_floats) + one logits chunk (rows · Vl); with tp > 1 the vocabulary-parallel
     * loss statistics (3 per chunk row), with sequence parallelism the gathered LayerNorm output
     * (N·C, bf16 under bf16) and one LayerNorm's partial parameter gradients (2C). */
    size_t Fw = layout_dbuf_width(cfg, tp);
    size_t rows = (size_t)layout_head_chunk_rows(cfg, B, T);
    int hs = cfg->n_embd / cfg->n_head;
    size_t att = d.rms ? attention_gqa_scratch_floats(T, hs, cfg->n_head / cfg->n_kv_head, threads)
                       : attention_scratch_floats(T, hs, threads);
    a.scratch = d.Nl * d.C + d.N * Fw + 2 * d.N * d.C + att + layout_sums_floats(cfg, B, T, tp) + rows * d.Vl;
    if (d.rms) a.scratch += (size_t)T * hs; /* the RoPE table */
    if (tp > 1) a.scratch += 3 * rows;
    if (d.Nl < d.N) a.scratch += (bf16 ? half_floats(d.N * d.C) : d.N * d.C) + 2 * d.C;
    if (st->pipe) a.scratch += d.Nl * d.C;
    return a;
}

const char *layout_recompute_name(Recompute rc) {
    static const char *const N[] = {"none", "selective", "full"};
    return rc >= 0 && rc <= RECOMPUTE_FULL ? N[rc] : "?";
}

size_t layout_sums_floats(const ModelConfig *cfg, int B, int T, int tp) {
    /* A LayerNorm's two parameter gradients over its Nl rows, a bias gradient over N rows (the
     * widest: dbuf_a's width, layout_dbuf_width); N >= Nl. */
    size_t w = layout_dbuf_width(cfg, tp), ln = 2 * (size_t)cfg->n_embd;
    return colsum_floats(B * T, (int)(w > ln ? w : ln));
}

size_t layout_dbuf_width(const ModelConfig *cfg, int tp) {
    TpDims d = tp_dims(cfg, 1, 1, tp, 0);
    size_t w = d.C > d.QKVl ? d.C : d.QKVl;
    size_t f = d.rms ? d.Fl + d.Hl : d.Fl; /* Llama: the down GEMM's input gradient, then gate|up's */
    return w > f ? w : f;
}

void layout_bf16_scratch_tp(const ModelConfig *cfg, int B, int T, int tp, int cpu, size_t *a, size_t *b) {
    TpDims d = tp_dims(cfg, B, T, tp, 0);
    size_t wide = d.Hl > d.C ? d.Hl : d.C;
    if (d.QKVl > wide) wide = d.QKVl;
    size_t nw = d.N * wide;
    size_t head = (size_t)layout_head_grad_rows(cfg, B, T, tp, cpu) * d.Vl;
    *a = nw > head ? nw : head;
    *b = nw;
}

size_t layout_head_pack_words(const ModelConfig *cfg, int B, int T, int tp, int precision) {
    if (precision != 1 || !mm_head_pack_wanted((long)B * T)) return 0;
    TpDims d = tp_dims(cfg, 1, 1, tp, 0);
    size_t t = mm_packed_b_words((int)d.Vl, (int)d.C), n = mm_packed_b_words((int)d.C, (int)d.Vl);
    return 2 * (t > n ? t : n); /* one block, its halves the two copies */
}

void layout_fp16_scratch(const ModelConfig *cfg, int B, int T, size_t *fa, size_t *fb, size_t *fw) {
    layout_fp16_scratch_tp(cfg, B, T, 1, fa, fb, fw);
}

void layout_fp16_scratch_tp(const ModelConfig *cfg, int B, int T, int tp, size_t *fa, size_t *fb, size_t *fw) {
    layout_bf16_scratch_tp(cfg, B, T, tp, 0, fa, fb);
    TpDims d = tp_dims(cfg, B, T, tp, 0);
    size_t w = d.Vl > d.Hl ? d.Vl : d.Hl;
    if (d.QKVl > w) w = d.QKVl;
    *fw = (w > d.C ? w : d.C) * d.C;
}

void layout_memory_plan(const ModelConfig *cfg, const ActOptions *o, int nmoments, size_t *bytes) {
    ParamLayout pl;
    for (int c = 0; c < MEM_NCAT; c++) bytes[c] = 0;
    if (layout_init(&pl, cfg, 1) != 0) return;
    layout_zero_bytes(&pl, 1, 0, nmoments, layout_state_bytes(o->precision), bytes);
    layout_free(&pl);
    layout_run_bytes(cfg, o, bytes);
}

void layout_run_bytes(const ModelConfig *cfg, const ActOptions *o, size_t bytes[MEM_NCAT]) {
    int B = o->B, T = o->T, precision = o->precision, tp = o->tp;
    ActSizes as = layout_activations(cfg, o);
    bytes[MEM_ACTIVATIONS] = as.total * 4;
    bytes[MEM_WORKSPACE] = as.scratch * 4;
    if (precision == 1) {
        size_t a, b;
        layout_bf16_scratch_tp(cfg, B, T, tp, !o->device, &a, &b);
        bytes[MEM_WORKSPACE] += (a + b) * 2;
        if (!o->device && (!o->stage || o->stage->head)) bytes[MEM_WORKSPACE] += layout_head_pack_words(cfg, B, T, tp, 1) * 4;
    } else if (precision == 2) {
        size_t fa, fb, fw;
        layout_fp16_scratch_tp(cfg, B, T, tp, &fa, &fb, &fw);
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

int layout_hidden_matrices(const ParamLayout *pl, LayoutMatrix *out) {
    int n = 0, L = pl->cfg.n_layer, K = layout_block_tensors(&pl->cfg);
    for (int i = 0; i < pl->ntensors; i++) {
        const TensorInfo *t = &pl->tensors[i];
        if (t->ndim != 2 || t->segment < 1 || t->segment > L) continue;
        int parts = pl->cfg.arch == ARCH_GPT2 && (t->id - 2) % K == BT_QKVW ? 3 : 1;
        int rows = t->shape[0] / parts, cols = t->shape[1];
        for (int k = 0; k < parts; k++, n++)
            if (out) out[n] = (LayoutMatrix){i, t->offset + (size_t)k * rows * cols, rows, cols};
    }
    return n;
}

size_t layout_muon_bytes(const ParamLayout *pl, int bf16) {
    int L = pl->cfg.n_layer, n = layout_hidden_matrices(pl, NULL);
    LayoutMatrix *mx = n ? calloc((size_t)n, sizeof *mx) : NULL;
    if (n && !mx) return 0;
    layout_hidden_matrices(pl, mx);
    size_t scratch = 0;
    for (int i = 0; i < n; i++) {
        size_t a = (size_t)(mx[i].rows < mx[i].cols ? mx[i].rows : mx[i].cols);
        size_t b = (size_t)(mx[i].rows < mx[i].cols ? mx[i].cols : mx[i].rows);
        size_t s = 4 * (2 * a * b + 2 * a * a) + (bf16 ? 2 * (a * b + 2 * a * a) : 0);
        if (s > scratch) scratch = s;
    }
    free(mx);
    return 4 * (pl->seg_off[L + 1] - pl->seg_off[1]) + scratch;
}

double layout_lpt_assign(const double *cost, int n, int n_owners, int *owner) {
    int *order = calloc((size_t)n + 1, sizeof(int));
    double *load = calloc((size_t)(n_owners > 0 ? n_owners : 1), sizeof(double));
    if (!order || !load) {
        free(order), free(load);
        return -1;
    }
    for (int b = 0; b < n; b++) { /* insertion sort: cost descending, index ascending on ties */
        int j = b - 1;
        while (j >= 0 && cost[order[j]] < cost[b]) order[j + 1] = order[j], j--;
        order[j + 1] = b;
    }
    for (int k = 0; k < n; k++) {
        int b = order[k], best = 0;
        for (int r = 1; r < n_owners; r++)
            if (load[r] < load[best]) best = r;
        owner[b] = best;
        load[best] += cost[b];
    }
    double mx = 0;
    for (int r = 0; r < (n_owners > 0 ? n_owners : 1); r++) mx = load[r] > mx ? load[r] : mx;
    free(order), free(load);
    return mx;
}

double layout_matrix_opt_flops(const ParamLayout *pl, int muon, int block, int every, int dp) {
    int n = muon ? layout_hidden_matrices(pl, NULL) : layout_shampoo_blocks(pl, block, every, dp, NULL);
    if (n <= 0) return n < 0 ? -1 : 0;
    double *cost = calloc((size_t)n, sizeof(double));
    int *owner = calloc((size_t)n, sizeof(int));
    LayoutMatrix *mx = muon ? calloc((size_t)n, sizeof *mx) : NULL;
    LayoutBlock *b = muon ? NULL : calloc((size_t)n, sizeof *b);
    double r = -1;
    if (cost && owner && (mx || b)) {
        if (muon) layout_hidden_matrices(pl, mx);
        else layout_shampoo_blocks(pl, block, every, dp, b);
        for (int i = 0; i < n; i++) {
            double rr = muon ? mx[i].rows : b[i].r, cc = muon ? mx[i].cols : b[i].c;
            double m = rr < cc ? rr : cc, nn = rr < cc ? cc : rr;
            cost[i] = muon ? 5.0 * (4.0 * m * m * nn + 2.0 * m * m * m)
                           : 4.0 * rr * cc * (rr + cc) + 9.0 * (rr * rr * rr + cc * cc * cc) / (every > 0 ? every : 1);
        }
        r = layout_lpt_assign(cost, n, dp, owner);
    }
    free(cost), free(owner), free(mx), free(b);
    return r;
}

int layout_shampoo_blocks(const ParamLayout *pl, int block, int every, int dp, LayoutBlock *out) {
    /* The callers validate --shampoo-block >= 1 (train.c, plan_validate); a block side < 1 would
     * walk the matrices forever. */
    ST_CHECK_MSG(block >= 1, "layout_shampoo_blocks: block side < 1");
    int nm = layout_hidden_matrices(pl, NULL), n = 0;
    LayoutMatrix *mx = nm ? calloc((size_t)nm, sizeof *mx) : NULL;
    if (nm && !mx) return -1;
    layout_hidden_matrices(pl, mx);
    for (int k = 0; k < nm; k++)
        for (int i = 0; i < mx[k].rows; i += block)
            for (int j = 0; j < mx[k].cols; j += block, n++) {
                if (!out) continue;
                int r = mx[k].rows - i < block ? mx[k].rows - i : block, c = mx[k].cols - j < block ? mx[k].cols - j : block;
                out[n] = (LayoutBlock){k, mx[k].tensor, mx[k].offset + (size_t)i * mx[k].cols + (size_t)j, r, c, mx[k].cols, 0};
            }
    free(mx);
    if (!out || n == 0) return n;
    double *cost = calloc((size_t)n, sizeof(double));
    int *owner = calloc((size_t)n, sizeof(int));
    int ok = cost && owner;
    for (int b = 0; ok && b < n; b++) {
        double r = out[b].r, c = out[b].c;
        cost[b] = 4.0 * r * c * (r + c) + 9.0 * (r * r * r + c * c * c) / (every > 0 ? every : 1);
    }
    ok = ok && layout_lpt_assign(cost, n, dp, owner) >= 0;
    for (int b = 0; ok && b < n; b++) out[b].owner = owner[b];
    free(cost), free(owner);
    return ok ? n : -1;
}

static size_t root_work_bytes(size_t n) {
    return 8 * (n * n + n + 1 + 6 * n + 2 * n * n) + 4 * (3 + 5 * n) + 4 * n * n + 8;
}

size_t layout_shampoo_bytes(const ParamLayout *pl, int block, int every, int dp, int rank) {
    int n = layout_shampoo_blocks(pl, block, every, dp, NULL), L = pl->cfg.n_layer;
    LayoutBlock *b = n > 0 ? calloc((size_t)n, sizeof *b) : NULL;
    if (n > 0 && (!b || layout_shampoo_blocks(pl, block, every, dp, b) != n)) {
        free(b);
        return 0;
    }
    size_t own = 0, scratch = 0;
    for (int i = 0; i < n; i++) {
        size_t r = (size_t)b[i].r, c = (size_t)b[i].c, d = 8 * r * c, w = root_work_bytes(r > c ? r : c);
        if (b[i].owner == rank) own += 2 * (r * r + c * c) + r * c;
        if ((d > w ? d : w) > scratch) scratch = d > w ? d : w;
    }
    free(b);
    size_t head = 4 * (pl->seg_off[L + 1] - pl->seg_off[1]) + 4 * own;
    return head + (64 - head % 64) % 64 + scratch; /* the scratch (doubles inside) 64-byte aligned */
}

TokenFlops layout_token_flops(double block_matmul_weights, int L, int C, int V, double T) {
    TokenFlops f;
    f.blocks = 2.0 * L * block_matmul_weights;
    f.attention = 4.0 * L * (double)T * C;
    f.head = 2.0 * (double)V * C;
    f.train = 3.0 * (f.blocks + f.attention + f.head);
    return f;
}

double layout_flops_per_token(const ModelConfig *cfg, int T) { return layout_flops_per_token_span(cfg, T); }

double layout_flops_per_token_span(const ModelConfig *cfg, double span) {
    return layout_token_flops(layout_block_matmul_weights(cfg), cfg->n_layer, cfg->n_embd, cfg->vocab, span).train;
}

double layout_lora_flops_per_token(const ModelConfig *cfg, double span, double adapter_params) {
    TokenFlops f = layout_token_flops(layout_block_matmul_weights(cfg), cfg->n_layer, cfg->n_embd, cfg->vocab, span);
    return 2.0 * (f.blocks + f.head) + 3.0 * f.attention + 6.0 * adapter_params;
}

double layout_doc_span(const int32_t *inp, int B, int T, int eot) {
    double sq = 0;
    for (int b = 0; b < B; b++) {
        long len = 0;
        for (int t = 0; t < T; t++) {
            len++;
            if (inp[(size_t)b * T + t] == eot || t == T - 1) sq += (double)len * len, len = 0;
        }
    }
    return B > 0 && T > 0 ? sq / ((double)B * T) : 0.0;
}

double layout_doc_span_mean(int T, double mean_len) { return mean_len < T ? mean_len : (double)T; }

/* ---- Pipeline stages (layout.h, docs/plan.md "Pipeline stages: the split") ---- */

/* A block's and the head's forward FLOPs per token in units of 2C FLOPs, from layout_token_flops
 * with L = 1 (24C² + 4TC → 12C + 2T, 2VC → V): integers, so the split's comparisons are exact. */
static void pp_units(const ModelConfig *cfg, int T, long long *block, long long *head) {
    double C = cfg->n_embd;
    TokenFlops f = layout_token_flops(layout_block_matmul_weights(cfg), 1, cfg->n_embd, cfg->vocab, T);
    *block = llround((f.blocks + f.attention) / (2.0 * C));
    *head = llround(f.head / (2.0 * C));
}

DropDraws layout_dropout_draws(int C, int n_head, double span, int tp, int sp) {
    double t = tp > 1 ? tp : 1, stream = sp && tp > 1 ? C / t : C;
    DropDraws d = {stream, 2.0 * stream + (double)n_head / t * (span + 1.0) / 2.0};
    return d;
}

double layout_head_softmax_bytes(int precision, int vp) {
    if (vp) return precision == 0 ? 16.0 : 22.0;
    return precision == 1 ? 10.0 : precision == 2 ? 14.0 : 8.0;
}

/* Stage s's forward cost in units when it holds n blocks: its blocks, the head on the last stage
 * (the embedding lookups on stage 0 cost 0). */
static long long pp_cost(long long block, long long head, int s, int pp, int n) {
    return (long long)n * block + (s == pp - 1 ? head : 0);
}

/* Parses --pp-layers into counts[pp]; ST_ERR_INPUT naming the flag otherwise. */
static Status pp_parse_layers(const char *text, int L, int pp, int counts[], Err *err) {
    int n = 0;
    long long sum = 0;
    const char *p = text;
    for (;;) {
        const char *q = p;
        long long v = 0;
        while (*q >= '0' && *q <= '9' && q - p < 10) v = v * 10 + (*q++ - '0');
        if (q == p || (*q != ',' && *q != '\0')) {
            size_t len = strcspn(p, ",");
            return err_set(err, ST_ERR_INPUT, "--pp-layers %s: expected comma-separated positive layer counts, found "
                           "\"%.*s\"", text, (int)(len > 40 ? 40 : len), p);
        }
        if (v < 1)
            return err_set(err, ST_ERR_INPUT, "--pp-layers %s: expected at least 1 layer per stage, found %lld for "
                           "stage %d", text, v, n);
        if (n < pp) counts[n] = (int)v;
        n++, sum += v;
        if (*q == '\0') break;
        p = q + 1;
    }
    if (n != pp) return err_set(err, ST_ERR_INPUT, "--pp-layers %s: expected %d counts (--pp %d), found %d", text, pp, pp, n);
    if (sum != L)
        return err_set(err, ST_ERR_INPUT, "--pp-layers %s: expected counts summing to %d layers (--layers), found %lld",
                       text, L, sum);
    return ST_OK;
}

Status layout_pp_split(const ModelConfig *cfg, int T, int pp, const char *explicit_layers, int first[], int last[],
                       Err *err) {
    int L = cfg->n_layer;
    if (pp < 1) return err_set(err, ST_ERR_INPUT, "--pp %d: expected a positive number of pipeline stages", pp);
    if (pp > L)
        return err_set(err, ST_ERR_INPUT, "--pp %d: expected at most the %d layers (--layers), found %d", pp, L, pp);
    if (T < 1) return err_set(err, ST_ERR_INPUT, "--seq-len %d: expected a positive sequence length", T);
    int *n = malloc((size_t)pp * sizeof *n);
    if (!n) return err_set(err, ST_ERR_RUNTIME, "pipeline split: out of memory");
    if (explicit_layers && explicit_layers[0]) {
        Status st = pp_parse_layers(explicit_layers, L, pp, n, err);
        if (st != ST_OK) {
            free(n);
            return st;
        }
    } else {
        /* Two exact DPs over (stage s, first block i) → the best split of blocks i..L−1 over stages
         * s..pp−1, each stage at least one block. The first minimises the largest stage cost M; the
         * second, among splits whose every stage costs <= M, the sum of squared costs, trying stage
         * s's block count in increasing order and keeping the first best (fewest blocks early). */
        long long block, head;
        pp_units(cfg, T, &block, &head);
        size_t W = (size_t)L + 1, cells = (size_t)(pp + 1) * W;
        long long *f = malloc(cells * sizeof *f);
        long double *g = malloc(cells * sizeof *g);
        int *pick = malloc(cells * sizeof *pick);
        if (!f || !g || !pick) {
            free(f), free(g), free(pick), free(n);
            return err_set(err, ST_ERR_RUNTIME, "pipeline split: out of memory");
        }
        const long long INF = -1; /* no valid split */
        for (size_t k = 0; k < cells; k++) f[k] = INF, g[k] = -1, pick[k] = 0;
        f[(size_t)pp * W + L] = 0, g[(size_t)pp * W + L] = 0;
        for (int s = pp - 1; s >= 0; s--)
            for (int i = s; i <= L - (pp - s); i++)
                for (int j = i + 1; j <= L - (pp - 1 - s); j++) {
                    long long rest = f[(size_t)(s + 1) * W + j];
                    if (rest == INF) continue;
                    long long c = pp_cost(block, head, s, pp, j - i), m = c > rest ? c : rest;
                    long long *cur = &f[(size_t)s * W + i];
                    if (*cur == INF || m < *cur) *cur = m;
                }
        long long M = f[0];
        for (int s = pp - 1; s >= 0; s--)
            for (int i = s; i <= L - (pp - s); i++)
                for (int j = i + 1; j <= L - (pp - 1 - s); j++) {
                    long double rest = g[(size_t)(s + 1) * W + j];
                    long long c = pp_cost(block, head, s, pp, j - i);
                    if (rest < 0 || c > M) continue;
                    long double q = (long double)c * c + rest, *cur = &g[(size_t)s * W + i];
                    if (*cur < 0 || q < *cur) *cur = q, pick[(size_t)s * W + i] = j;
                }
        ST_CHECK(M != INF && g[0] >= 0);
        for (int s = 0, i = 0; s < pp; s++) {
            int j = pick[(size_t)s * W + i];
            n[s] = j - i, i = j;
        }
        free(f), free(g), free(pick);
    }
    for (int s = 0, i = 0; s < pp; s++) first[s] = i, last[s] = i += n[s];
    ST_CHECK(last[pp - 1] == L);
    free(n);
    return ST_OK;
}

double layout_pp_stage_flops(const ModelConfig *cfg, int T, const int first[], const int last[], int stage, int pp) {
    TokenFlops f = layout_token_flops(layout_block_matmul_weights(cfg), last[stage] - first[stage], cfg->n_embd,
                                      cfg->vocab, T);
    if (stage != pp - 1) f.head = 0;
    return 3.0 * (f.blocks + f.attention + f.head);
}

long long layout_pp_stage_params(const ModelConfig *cfg, const int first[], const int last[], int stage, int pp) {
    long long C = cfg->n_embd, wte = (long long)cfg->vocab * C;
    long long p = (long long)(last[stage] - first[stage]) * layout_block_params(cfg);
    if (cfg->arch == ARCH_LLAMA) {
        if (stage == 0) p += wte;
        /* the final RMSNorm, and lm_head or the head's copy of the tied wte */
        if (stage == pp - 1) p += C + (cfg->untied || pp > 1 ? wte : 0);
        return p;
    }
    if (stage == 0) p += wte + (long long)cfg->max_seq * C;
    if (stage == pp - 1) p += 2 * C + (pp > 1 ? wte : 0); /* lnf, and the head's copy of the tied wte */
    return p;
}

/* ---- Pipeline ranks (layout.h) ---- */

StageBlocks layout_pp_rank_stage(const int first[], const int last[], int pp, int v, int rank) {
    StageBlocks sb;
    memset(&sb, 0, sizeof sb);
    sb.n = v < 1 ? 1 : v > LAYOUT_MAX_CHUNKS ? LAYOUT_MAX_CHUNKS : v;
    for (int c = 0; c < sb.n; c++) sb.first[c] = first[c * pp + rank], sb.last[c] = last[c * pp + rank];
    return sb;
}

size_t layout_pp_tied_floats(const ParamLayout *pl, int pp) {
    int wte = layout_find_id(pl, 0);
    return pp > 1 && !pl->cfg.untied && wte >= 0 && pl->has_embed != pl->has_head ? pl->tensors[wte].numel : 0;
}

Status layout_check_split_backward(Recompute recompute, int sp, Err *err) {
    if (recompute != RECOMPUTE_NONE || sp)
        return err_set(err, ST_ERR_INPUT, "--pp-schedule zb-h1: expected --recompute none without --sp (the weight-"
                       "gradient pass reads the saved LayerNorm and GELU outputs whole), found --recompute %s%s",
                       layout_recompute_name(recompute), sp ? " with --sp" : "");
    return ST_OK;
}

size_t layout_dp_piece_floats(size_t bucket_floats, int dp, size_t block) {
    if (block == 0) return 0;
    size_t q = dp > 0 ? bucket_floats / (size_t)dp : bucket_floats;
    if (q == 0) q = 1;
    if (dp > COMM_RING_MAX_RANKS || q > block) q = block;
    return q;
}

size_t layout_dp_rs_slot_floats(const ParamLayout *pl, int dp, int zero, size_t bucket_floats) {
    if (zero < 1 || dp < 2 || dp > COMM_RING_MAX_RANKS) return 0;
    size_t q = 0;
    for (int s = 0; s < pl->nseg; s++) {
        size_t blk = (pl->seg_off[s + 1] - pl->seg_off[s]) / (size_t)dp, n = layout_dp_piece_floats(bucket_floats, dp, blk);
        if (n > q) q = n;
    }
    return q;
}

size_t layout_dp_pieces(size_t bucket_floats, int dp, size_t block) {
    size_t q = layout_dp_piece_floats(bucket_floats, dp, block);
    return q ? (block + q - 1) / q : 0;
}
