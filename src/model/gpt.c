/* gpt.c — GPT-2 forward and backward over the layer kernels (see gpt.h). */
#include "model/gpt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "core/timer.h"
#include "model/kernels.h"

enum { DROP_EMBED = 0, DROP_ATTN = 1, DROP_ATTN_RES = 2, DROP_MLP_RES = 3 };

/* The 2-byte working copy of an fp32 parameter pointer (NULL in fp32). */
static const uint16_t *lp(const Gpt *g, const float *w) {
    if (!g->bf16) return NULL;
    for (int i = 0; i < GPT_LP_RANGES; i++)
        if (g->lp_from[i] && w >= g->lp_from[i] && w < g->lp_from[i] + g->lp_len[i]) return g->lp_to[i] + (w - g->lp_from[i]);
    ST_CHECK_MSG(0, "no working copy mapped for a parameter (gpt_map_lp)");
    return NULL;
}

void gpt_map_lp(Gpt *g, int i, const float *from, const uint16_t *to, size_t len) {
    ST_CHECK(i >= 0 && i < GPT_LP_RANGES);
    g->lp_from[i] = from, g->lp_to[i] = to, g->lp_len[i] = len;
}

/* The masks of one site of the current micro-batch; none outside training (evaluation mode). */
static Dropout dropout_at(const Gpt *g, int layer, int site) {
    Dropout d = {g->cur_train ? g->cfg.dropout : 0.0f, g->dropout_seed,
                 (g->cur_drop_counter << 24) | ((uint64_t)(layer + 1) << 4) | (uint64_t)site};
    return d;
}

Status gpt_init(Gpt *g, const ModelConfig *cfg, int B, int T, int nt, int shard_multiple, MemStats *mem, Err *err) {
    return gpt_init_rc(g, cfg, B, T, nt, shard_multiple, RECOMPUTE_NONE, mem, err);
}

Status gpt_init_rc(Gpt *g, const ModelConfig *cfg, int B, int T, int nt, int shard_multiple, Recompute rc,
                   MemStats *mem, Err *err) {
    return gpt_init_ex(g, cfg, B, T, nt, shard_multiple, rc, 0, mem, err);
}

Status gpt_init_ex(Gpt *g, const ModelConfig *cfg, int B, int T, int nt, int shard_multiple, Recompute rc, int flags,
                   MemStats *mem, Err *err) {
    memset(g, 0, sizeof *g);
    g->cfg = *cfg;
    g->B = B, g->T = T, g->nt = nt < 1 ? 1 : nt;
    g->recompute = rc;
    g->mem = mem;
    if (B < 1) return err_set(err, ST_ERR_INPUT, "--micro-batch: expected a positive integer, found %d", B);
    if (T < 1 || T > cfg->max_seq)
        return err_set(err, ST_ERR_INPUT, "--seq-len: expected 1..%d (the model's --max-seq-len), found %d",
                       cfg->max_seq, T);
    if (layout_init(&g->layout, cfg, shard_multiple) != 0) goto oom;
    int L = cfg->n_layer;
    size_t total = g->layout.total;
    g->p.blocks = calloc((size_t)L, sizeof(BlockParams));
    g->g.blocks = calloc((size_t)L, sizeof(BlockParams));
    g->la = calloc((size_t)L, sizeof(LayerActs));
    if (!g->p.blocks || !g->g.blocks || !g->la) goto oom;
    g->fp16 = (flags & GPT_FP16) != 0;
    g->bf16 = (flags & (GPT_BF16 | GPT_FP16)) != 0;
    if (!(flags & GPT_EXTERNAL_PARAMS)) {
        if (!(g->params = mem_alloc(mem, g->bf16 ? MEM_MASTER : MEM_PARAMS, total * sizeof(float)))) goto oom;
        layout_views(&g->layout, g->params, &g->p);
    }
    if (g->bf16) {
        if (!(flags & GPT_EXTERNAL_PARAMS)) {
            if (!(g->params_lp = mem_alloc(mem, MEM_PARAMS, total * sizeof(uint16_t)))) goto oom;
            gpt_map_lp(g, 0, g->params, g->params_lp, total);
        }
        if (g->fp16) {
            size_t fa, fb, fw;
            layout_fp16_scratch(cfg, B, T, &fa, &fb, &fw);
            g->mp.fp16 = 1;
            g->mp.fa = mem_alloc(mem, MEM_WORKSPACE, fa * sizeof(float));
            g->mp.fb = mem_alloc(mem, MEM_WORKSPACE, fb * sizeof(float));
            g->mp.fw = mem_alloc(mem, MEM_WORKSPACE, fw * sizeof(float));
            if (!g->mp.fa || !g->mp.fb || !g->mp.fw) goto oom;
        } else {
            size_t na, nb;
            layout_bf16_scratch(cfg, B, T, &na, &nb);
            g->mp.bf16 = 1;
            g->mp.a = mem_alloc(mem, MEM_WORKSPACE, na * sizeof(uint16_t));
            g->mp.b = mem_alloc(mem, MEM_WORKSPACE, nb * sizeof(uint16_t));
            if (!g->mp.a || !g->mp.b) goto oom;
        }
    }
    if (!(flags & GPT_EXTERNAL_GRADS)) {
        if (!(g->grads = mem_alloc(mem, MEM_GRADS, total * sizeof(float)))) goto oom;
        layout_views(&g->layout, g->grads, &g->g);
    }

    int lpa = g->mp.bf16; /* bf16 LayerNorm and GELU outputs */
    ActSizes as = layout_activations_prec(cfg, B, T, g->nt, rc, lpa);
    g->acts_floats = as.total;
    g->scratch_floats = as.scratch;
    g->acts = mem_alloc(mem, MEM_ACTIVATIONS, as.total * sizeof(float));
    g->scratch = mem_alloc(mem, MEM_WORKSPACE, as.scratch * sizeof(float));
    if (!g->acts || !g->scratch) goto oom;

    size_t N = (size_t)B * T, C = cfg->n_embd, NH = cfg->n_head;
    size_t probs = (size_t)B * NH * T; /* attention log-sum-exp */
    float *a = g->acts;
#define TAKE(ptr, n) (ptr = a, a += (n))
/* A GEMM-operand activation: fp32, or bf16 in half as many floats (rounded up). */
#define TAKE_OP(x, fp, lp, n) (lpa ? (void)((x)->lp = (uint16_t *)a, a += ((n) + 1) / 2) : (void)TAKE((x)->fp, (n)))
    TAKE(g->encoded, N * C);
    /* Saved per layer, then (with recompute) one shared set that every layer's pointers alias. */
    for (int l = 0; l < L; l++) {
        LayerActs *x = &g->la[l];
        if (rc == RECOMPUTE_NONE) {
            TAKE_OP(x, ln1, ln1_lp, N * C), TAKE_OP(x, ln2, ln2_lp, N * C), TAKE_OP(x, fch_gelu, fchg_lp, 4 * N * C);
        }
        if (rc != RECOMPUTE_FULL) {
            TAKE(x->ln1_mean, N), TAKE(x->ln1_rstd, N), TAKE(x->qkv, 3 * N * C), TAKE(x->lse, probs);
            TAKE(x->atty, N * C), TAKE(x->res2, N * C), TAKE(x->ln2_mean, N), TAKE(x->ln2_rstd, N);
            TAKE(x->fch, 4 * N * C);
        }
        TAKE(x->res3, N * C);
    }
    if (rc != RECOMPUTE_NONE) {
        LayerActs sh = {0};
        TAKE_OP(&sh, ln1, ln1_lp, N * C), TAKE_OP(&sh, ln2, ln2_lp, N * C), TAKE_OP(&sh, fch_gelu, fchg_lp, 4 * N * C);
        if (rc == RECOMPUTE_FULL) {
            TAKE(sh.ln1_mean, N), TAKE(sh.ln1_rstd, N), TAKE(sh.qkv, 3 * N * C), TAKE(sh.lse, probs);
            TAKE(sh.atty, N * C), TAKE(sh.res2, N * C), TAKE(sh.ln2_mean, N), TAKE(sh.ln2_rstd, N);
            TAKE(sh.fch, 4 * N * C);
        }
        for (int l = 0; l < L; l++) {
            LayerActs *x = &g->la[l];
            x->ln1 = sh.ln1, x->ln2 = sh.ln2, x->fch_gelu = sh.fch_gelu;
            x->ln1_lp = sh.ln1_lp, x->ln2_lp = sh.ln2_lp, x->fchg_lp = sh.fchg_lp;
            if (rc == RECOMPUTE_FULL) {
                float *res3 = x->res3;
                *x = sh;
                x->res3 = res3;
            }
        }
    }
    TAKE(g->lnf, N * C), TAKE(g->lnf_mean, N), TAKE(g->lnf_rstd, N), TAKE(g->losses, N);
    ST_CHECK((size_t)(a - g->acts) == as.total);
    g->head_chunk = layout_head_chunk_rows(cfg, B, T);
    a = g->scratch;
    TAKE(g->dres, N * C), TAKE(g->dbuf_a, 4 * N * C), TAKE(g->dbuf_b, N * C), TAKE(g->dbuf_c, N * C);
    TAKE(g->att_scratch, attention_scratch_floats(T, cfg->n_embd / cfg->n_head, g->nt));
    TAKE(g->ln_scratch, (N + KERNEL_ROW_CHUNK - 1) / KERNEL_ROW_CHUNK * 2 * C);
    TAKE(g->logits, (size_t)g->head_chunk * cfg->vocab_padded);
    ST_CHECK((size_t)(a - g->scratch) == as.scratch);
#undef TAKE_OP
#undef TAKE
    return ST_OK;
oom:
    gpt_free(g);
    return err_set(err, ST_ERR_RUNTIME, "out of memory allocating the model (L=%d C=%d V=%d B=%d T=%d)",
                   cfg->n_layer, cfg->n_embd, cfg->vocab, B, T);
}

void gpt_free(Gpt *g) {
    size_t total = g->layout.total;
    if (g->bf16) {
        size_t na, nb, fa, fb, fw;
        layout_bf16_scratch(&g->cfg, g->B, g->T, &na, &nb);
        layout_fp16_scratch(&g->cfg, g->B, g->T, &fa, &fb, &fw);
        mem_free(g->mem, MEM_PARAMS, g->params_lp, total * sizeof(uint16_t));
        mem_free(g->mem, MEM_WORKSPACE, g->mp.a, na * sizeof(uint16_t));
        mem_free(g->mem, MEM_WORKSPACE, g->mp.b, nb * sizeof(uint16_t));
        mem_free(g->mem, MEM_WORKSPACE, g->mp.fa, fa * sizeof(float));
        mem_free(g->mem, MEM_WORKSPACE, g->mp.fb, fb * sizeof(float));
        mem_free(g->mem, MEM_WORKSPACE, g->mp.fw, fw * sizeof(float));
    }
    mem_free(g->mem, g->bf16 ? MEM_MASTER : MEM_PARAMS, g->params, total * sizeof(float));
    mem_free(g->mem, MEM_GRADS, g->grads, total * sizeof(float));
    mem_free(g->mem, MEM_ACTIVATIONS, g->acts, g->acts_floats * sizeof(float));
    mem_free(g->mem, MEM_WORKSPACE, g->scratch, g->scratch_floats * sizeof(float));
    free(g->p.blocks);
    free(g->g.blocks);
    free(g->la);
    layout_free(&g->layout);
    memset(g, 0, sizeof *g);
}

void gpt_init_params_buf(const ParamLayout *pl, float *buf, uint64_t seed, int nt) {
    float proj_std = 0.02f / sqrtf(2.0f * pl->cfg.n_layer);
    memset(buf, 0, pl->total * sizeof(float));
    for (int k = 0; k < pl->ntensors; k++) {
        const TensorInfo *t = &pl->tensors[k];
        float *w = buf + t->offset;
        const char *leaf = strrchr(t->name, '.');
        leaf = leaf ? leaf + 1 : t->name;
        if (t->ndim == 1) {
            /* LayerNorm weights 1; all biases and LayerNorm biases 0. */
            if (!strcmp(leaf, "ln1w") || !strcmp(leaf, "ln2w") || !strcmp(leaf, "lnfw"))
                for (size_t i = 0; i < t->numel; i++) w[i] = 1.0f;
            continue;
        }
        float std = (!strcmp(leaf, "attprojw") || !strcmp(leaf, "fcprojw")) ? proj_std : 0.02f;
        size_t n = (size_t)t->rows_real * t->shape[1]; /* padded wte rows stay 0 */
#pragma omp parallel for num_threads(nt) schedule(static)
        for (size_t i = 0; i < n; i++) w[i] = std * rng_normal(seed, (uint64_t)k, i);
    }
}

void gpt_init_params(Gpt *g, uint64_t seed) {
    ST_CHECK(g->params != NULL);
    gpt_init_params_buf(&g->layout, g->params, seed, g->nt);
}

void gpt_round_lp(const Gpt *g, uint16_t *dst, const float *src, size_t n) {
    if (g->fp16) cast_fp16(dst, src, n, g->nt);
    else if (g->bf16) cast_bf16(dst, src, n, g->nt);
}

void gpt_sync_lp(Gpt *g) {
    if (g->params_lp) gpt_round_lp(g, g->params_lp, g->params, g->layout.total); /* none: fp32 or external */
}

void gpt_zero_grads(Gpt *g) {
    ST_CHECK(g->grads != NULL);
    memset(g->grads, 0, g->layout.total * sizeof(float));
}

void gpt_overwrite_grads(Gpt *g) {
    ST_CHECK(g->grads != NULL);
    g->grads_overwrite = 1;
}

static void hook(void (*fn)(void *, int), void *ctx, int seg) {
    if (fn) fn(ctx, seg);
}

/* Forward of block l on input x (B, T, C) into its LayerActs (shared buffers under recompute). */
static void block_forward(Gpt *g, int l, const float *x, int B, int T) {
    const ModelConfig *cfg = &g->cfg;
    int C = cfg->n_embd, NH = cfg->n_head, nt = g->nt, N = B * T;
    Dropout off = {0};
    const BlockParams *p = &g->p.blocks[l];
    LayerActs *a = &g->la[l];
    if (g->mp.bf16) {
        /* bf16: the LayerNorm and GELU outputs are produced, stored and used as bf16 GEMM operands. */
        layernorm_forward_bf16(a->ln1_lp, a->ln1_mean, a->ln1_rstd, x, p->ln1w, p->ln1b, N, C, nt);
        matmul_forward_lp(a->qkv, a->ln1_lp, lp(g, p->qkvw), p->qkvb, N, C, 3 * C);
    } else {
        layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, x, p->ln1w, p->ln1b, N, C, nt);
        matmul_forward_p(&g->mp, a->qkv, a->ln1, p->qkvw, lp(g, p->qkvw), p->qkvb, N, C, 3 * C, nt);
    }
    attention_forward(a->atty, a->lse, g->att_scratch, a->qkv, B, T, C, NH,
                      cfg->dropout > 0 ? dropout_at(g, l, DROP_ATTN) : off, g->mp.bf16, nt);
    matmul_forward_p(&g->mp, g->dbuf_b, a->atty, p->attprojw, lp(g, p->attprojw), p->attprojb, N, C, C, nt);
    if (g->mp.bf16) {
        residual_layernorm_forward_bf16(a->res2, a->ln2_lp, a->ln2_mean, a->ln2_rstd, x, g->dbuf_b,
                                        dropout_at(g, l, DROP_ATTN_RES), p->ln2w, p->ln2b, N, C, nt);
        matmul_forward_lp(a->fch, a->ln2_lp, lp(g, p->fcw), p->fcb, N, C, 4 * C);
        gelu_forward_bf16(a->fchg_lp, a->fch, (size_t)N * 4 * C, nt);
        matmul_forward_lp(g->dbuf_b, a->fchg_lp, lp(g, p->fcprojw), p->fcprojb, N, 4 * C, C);
    } else {
        residual_layernorm_forward(a->res2, a->ln2, a->ln2_mean, a->ln2_rstd, x, g->dbuf_b,
                                   dropout_at(g, l, DROP_ATTN_RES), p->ln2w, p->ln2b, N, C, nt);
        matmul_forward_p(&g->mp, a->fch, a->ln2, p->fcw, lp(g, p->fcw), p->fcb, N, C, 4 * C, nt);
        gelu_forward(a->fch_gelu, a->fch, (size_t)N * 4 * C, nt);
        matmul_forward_p(&g->mp, g->dbuf_b, a->fch_gelu, p->fcprojw, lp(g, p->fcprojw), p->fcprojb, N, 4 * C, C, nt);
    }
    residual_forward(a->res3, a->res2, g->dbuf_b, (size_t)N * C, dropout_at(g, l, DROP_MLP_RES), nt);
}

double gpt_forward(Gpt *g, const int32_t *inp, const int32_t *tgt, int B, int T, float dscale, int train,
                   uint64_t drop_counter) {
    ST_CHECK(B <= g->B && T <= g->T && (size_t)B * T <= (size_t)g->B * g->T);
    const ModelConfig *cfg = &g->cfg;
    int L = cfg->n_layer, C = cfg->n_embd, nt = g->nt, N = B * T;
    double t0 = timer_ms();
    g->cur_inp = inp, g->curB = B, g->curT = T, g->cur_drop_counter = drop_counter, g->cur_train = train != 0;

    hook(g->hooks.before_forward, g->hooks.ctx, 0);
    encoder_forward(g->encoded, inp, g->p.wte, g->p.wpe, B, T, C, dropout_at(g, -1, DROP_EMBED), nt);
    const float *x = g->encoded;
    for (int l = 0; l < L; l++) {
        hook(g->hooks.before_forward, g->hooks.ctx, l + 1);
        block_forward(g, l, x, B, T);
        x = g->la[l].res3;
    }
    hook(g->hooks.before_forward, g->hooks.ctx, L + 1);
    layernorm_forward(g->lnf, g->lnf_mean, g->lnf_rstd, x, g->p.lnfw, g->p.lnfb, N, C, nt);
    double head_fwd = 0, head_bwd = 0;
    double t1 = timer_ms();
    head_forward_backward_p(&g->mp, g->losses, train ? g->dbuf_b : NULL, g->g.wte, g->logits, g->lnf, g->p.wte,
                            lp(g, g->p.wte), tgt, N, C, cfg->vocab, cfg->vocab_padded, dscale, g->head_chunk,
                            !(train && g->grads_overwrite), nt, NULL, &head_fwd, &head_bwd);
    double t2 = timer_ms();
    g->have_head_grads = train;
    /* Fixed-order sum of the per-row losses. */
    double sum = 0;
    for (int i = 0; i < N; i++) sum += g->losses[i];
    g->ms_fwd += (t1 - t0) + (t2 - t1 - head_bwd);
    g->ms_bwd += head_bwd;
    return sum;
}

void gpt_backward(Gpt *g) {
    ST_CHECK(g->have_head_grads);
    const ModelConfig *cfg = &g->cfg;
    int L = cfg->n_layer, C = cfg->n_embd, NH = cfg->n_head, nt = g->nt;
    int B = g->curB, T = g->curT, N = B * T;
    double t0 = timer_ms();
    Dropout off = {0};
    size_t NC = (size_t)N * C;
    int acc = !g->grads_overwrite; /* 0: every parameter gradient below is written, not added */

    hook(g->hooks.before_backward, g->hooks.ctx, L + 1);
    memset(g->dres, 0, NC * sizeof(float));
    const float *xlast = L > 0 ? g->la[L - 1].res3 : g->encoded;
    layernorm_backward(g->dres, g->g.lnfw, g->g.lnfb, g->ln_scratch, g->dbuf_b, xlast, g->p.lnfw, g->lnf_mean,
                       g->lnf_rstd, N, C, acc, nt);
    hook(g->hooks.grads_ready, g->hooks.ctx, L + 1);

    for (int l = L - 1; l >= 0; l--) {
        hook(g->hooks.before_backward, g->hooks.ctx, l + 1);
        const BlockParams *p = &g->p.blocks[l];
        BlockParams *dp = &g->g.blocks[l];
        LayerActs *a = &g->la[l];
        const float *x = l > 0 ? g->la[l - 1].res3 : g->encoded;
        if (g->recompute == RECOMPUTE_FULL) {
            /* dbuf_b is free here: the head's dx was consumed by the final LayerNorm backward. */
            block_forward(g, l, x, B, T);
        } else if (g->recompute == RECOMPUTE_SELECTIVE && g->mp.bf16) {
            layernorm_forward_bf16(a->ln1_lp, a->ln1_mean, a->ln1_rstd, x, p->ln1w, p->ln1b, N, C, nt);
            layernorm_forward_bf16(a->ln2_lp, a->ln2_mean, a->ln2_rstd, a->res2, p->ln2w, p->ln2b, N, C, nt);
            gelu_forward_bf16(a->fchg_lp, a->fch, NC * 4, nt);
        } else if (g->recompute == RECOMPUTE_SELECTIVE) {
            layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, x, p->ln1w, p->ln1b, N, C, nt);
            layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, p->ln2w, p->ln2b, N, C, nt);
            gelu_forward(a->fch_gelu, a->fch, NC * 4, nt);
        }
        const float *dbranch = g->dres;
        if (cfg->dropout > 0) {
            dropout_backward(g->dbuf_c, g->dres, NC, dropout_at(g, l, DROP_MLP_RES), nt);
            dbranch = g->dbuf_c;
        }
        if (g->mp.bf16) {
            /* The stored bf16 operands go straight into the GEMMs; GELU backward writes fc's bf16
             * output gradient and its bias gradient. */
            cast_bf16_colsum(g->mp.a, dp->fcprojb, dbranch, N, C, acc, nt);
            matmul_backward_lp(g->dbuf_a, dp->fcprojw, g->mp.a, a->fchg_lp, lp(g, p->fcprojw), N, 4 * C, C, acc);
            gelu_backward_bf16(g->mp.a, dp->fcb, g->dbuf_a, a->fch, N, 4 * C, acc, nt);
            matmul_backward_lp(g->dbuf_b, dp->fcw, g->mp.a, a->ln2_lp, lp(g, p->fcw), N, C, 4 * C, acc);
        } else {
            matmul_backward_p(&g->mp, g->dbuf_a, dp->fcprojw, dp->fcprojb, dbranch, a->fch_gelu, p->fcprojw,
                              lp(g, p->fcprojw), N, 4 * C, C, acc, nt);
            gelu_backward(g->dbuf_a, g->dbuf_a, a->fch, NC * 4, nt);
            matmul_backward_p(&g->mp, g->dbuf_b, dp->fcw, dp->fcb, g->dbuf_a, a->ln2, p->fcw, lp(g, p->fcw), N, C,
                              4 * C, acc, nt);
        }
        layernorm_backward(g->dres, dp->ln2w, dp->ln2b, g->ln_scratch, g->dbuf_b, a->res2, p->ln2w, a->ln2_mean,
                           a->ln2_rstd, N, C, acc, nt);
        dbranch = g->dres;
        if (cfg->dropout > 0) {
            dropout_backward(g->dbuf_c, g->dres, NC, dropout_at(g, l, DROP_ATTN_RES), nt);
            dbranch = g->dbuf_c;
        }
        matmul_backward_p(&g->mp, g->dbuf_b, dp->attprojw, dp->attprojb, dbranch, a->atty, p->attprojw,
                          lp(g, p->attprojw), N, C, C, acc, nt);
        attention_backward(g->dbuf_a, g->att_scratch, g->dbuf_b, a->qkv, a->atty, a->lse, B, T, C, NH,
                           cfg->dropout > 0 ? dropout_at(g, l, DROP_ATTN) : off, g->mp.bf16, nt);
        if (g->mp.bf16) {
            cast_bf16_colsum(g->mp.a, dp->qkvb, g->dbuf_a, N, 3 * C, acc, nt);
            matmul_backward_lp(g->dbuf_b, dp->qkvw, g->mp.a, a->ln1_lp, lp(g, p->qkvw), N, C, 3 * C, acc);
        } else {
            matmul_backward_p(&g->mp, g->dbuf_b, dp->qkvw, dp->qkvb, g->dbuf_a, a->ln1, p->qkvw, lp(g, p->qkvw), N, C,
                              3 * C, acc, nt);
        }
        layernorm_backward(g->dres, dp->ln1w, dp->ln1b, g->ln_scratch, g->dbuf_b, x, p->ln1w, a->ln1_mean,
                           a->ln1_rstd, N, C, acc, nt);
        hook(g->hooks.grads_ready, g->hooks.ctx, l + 1);
    }
    hook(g->hooks.before_backward, g->hooks.ctx, 0);
    /* wte's gradient was written by the head in the forward; wpe's has max_seq rows, of which
     * only the first T get a contribution, so overwriting starts from zeros there (a few MB). */
    if (!acc) memset(g->g.wpe, 0, (size_t)cfg->max_seq * C * sizeof(float));
    encoder_backward(g->g.wte, g->g.wpe, g->dres, g->cur_inp, B, T, C, dropout_at(g, -1, DROP_EMBED), nt);
    hook(g->hooks.grads_ready, g->hooks.ctx, 0);
    g->have_head_grads = 0, g->grads_overwrite = 0;
    g->ms_bwd += timer_ms() - t0;
}

void gpt_probs_row0(Gpt *g, const int32_t *inp, int T, float *probs) {
    int32_t *tgt = calloc((size_t)T, sizeof *tgt);
    ST_CHECK(tgt != NULL);
    gpt_forward(g, inp, tgt, 1, T, 0.0f, 0, 0);
    head_forward_backward(g->losses, NULL, NULL, g->logits, g->lnf, g->p.wte, tgt, 1, g->cfg.n_embd, g->cfg.vocab,
                          g->cfg.vocab_padded, 0.0f, g->head_chunk, 1, g->nt, probs, NULL, NULL);
    free(tgt);
}

void gpt_logits(Gpt *g, const int32_t *inp, int T, float *logits) {
    const ModelConfig *c = &g->cfg;
    int C = c->n_embd, V = c->vocab, Vp = c->vocab_padded, chunk = g->head_chunk;
    ST_CHECK(T >= 1 && T <= g->T);
    int32_t *tgt = malloc((size_t)T * sizeof *tgt);
    ST_CHECK(tgt != NULL);
    memset(tgt, 0xff, (size_t)T * sizeof *tgt); /* every target -1: ignored */
    float p = g->cfg.dropout;
    g->cfg.dropout = 0; /* gpt_forward applies the configured dropout whether training or not */
    gpt_forward(g, inp, tgt, 1, T, 0.0f, 0, 0);
    g->cfg.dropout = p;
    /* The head again, chunk by chunk, keeping each chunk's raw logits (the forward's buffer only
     * holds the last chunk, and without dx the head leaves them unnormalised). */
    for (int r0 = 0; r0 < T; r0 += chunk) {
        int m = T - r0 < chunk ? T - r0 : chunk;
        head_forward_backward_p(&g->mp, g->losses + r0, NULL, NULL, g->logits, g->lnf + (size_t)r0 * C, g->p.wte,
                                lp(g, g->p.wte), tgt + r0, m, C, V, Vp, 0.0f, chunk, 1, g->nt, NULL, NULL, NULL);
        for (int i = 0; i < m; i++)
            memcpy(logits + (size_t)(r0 + i) * V, g->logits + (size_t)i * Vp, (size_t)V * sizeof(float));
    }
    free(tgt);
}
