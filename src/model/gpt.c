/* gpt.c — the GPT-2 model's allocation, forward and backward over the layer kernels (see gpt.h). */
#include "model/gpt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "core/timer.h"
#include "model/kernels.h"
#include "model/matmul.h"

enum { DROP_EMBED = 0, DROP_ATTN = 1, DROP_ATTN_RES = 2, DROP_MLP_RES = 3 };

/* The 2-byte working copy of an fp32 parameter pointer (NULL in fp32). */
static const uint16_t *lp(const Gpt *g, const float *p) {
    const GptWeights *w = &g->w;
    if (w->prec == GPT_FP32) return NULL;
    for (int i = 0; i < GPT_LP_RANGES; i++)
        if (w->lp_from[i] && p >= w->lp_from[i] && p < w->lp_from[i] + w->lp_len[i]) return w->lp_to[i] + (p - w->lp_from[i]);
    ST_CHECK_MSG(0, "no working copy mapped for a parameter (gpt_map_lp)");
    return NULL;
}

void gpt_map_lp(Gpt *g, int i, const float *from, const uint16_t *to, size_t len) {
    ST_CHECK(i >= 0 && i < GPT_LP_RANGES);
    g->w.lp_from[i] = from, g->w.lp_to[i] = to, g->w.lp_len[i] = len;
}

/* The masks of one site of the current micro-batch; none outside training (evaluation mode). */
static Dropout dropout_at(const Gpt *g, int layer, int site) {
    Dropout d = {g->s.cur_train ? g->w.cfg.dropout : 0.0f, g->s.dropout_seed,
                 (g->s.cur_drop_counter << 24) | ((uint64_t)(layer + 1) << 4) | (uint64_t)site};
    return d;
}

GptOptions gpt_default_options(void) {
    GptOptions o;
    memset(&o, 0, sizeof o);
    o.B = 1, o.T = 1, o.threads = 1, o.shard_multiple = 1;
    o.recompute = RECOMPUTE_NONE, o.precision = GPT_FP32;
    return o;
}

static Status check_options(const ModelConfig *cfg, const GptOptions *o, Err *err) {
    if (o->B < 1) return err_set(err, ST_ERR_INPUT, "--micro-batch: expected a positive integer, found %d", o->B);
    if (o->T < 1 || o->T > cfg->max_seq)
        return err_set(err, ST_ERR_INPUT, "--seq-len: expected 1..%d (the model's --max-seq-len), found %d",
                       cfg->max_seq, o->T);
    if (o->threads < 1) return err_set(err, ST_ERR_INPUT, "--threads: expected a positive integer, found %d", o->threads);
    if (o->shard_multiple < 1)
        return err_set(err, ST_ERR_INPUT, "--dp: expected a positive number of ranks, found %d", o->shard_multiple);
    if (o->recompute < RECOMPUTE_NONE || o->recompute > RECOMPUTE_FULL)
        return err_set(err, ST_ERR_INPUT, "--recompute: expected none, selective or full, found level %d",
                       (int)o->recompute);
    if (o->precision < GPT_FP32 || o->precision > GPT_FP16)
        return err_set(err, ST_ERR_INPUT, "--precision: expected fp32, bf16 or fp16, found precision %d",
                       (int)o->precision);
    return ST_OK;
}

/* Weights: the layout, the fp32 parameters (or the master) and the 2-byte working copy. */
static int weights_alloc(GptWeights *w, const ModelConfig *cfg, const GptOptions *o, MemStats *mem) {
    w->cfg = *cfg;
    w->first = 0, w->last = cfg->n_layer;
    w->prec = o->precision;
    if (layout_init(&w->layout, cfg, o->shard_multiple) != 0) return -1;
    size_t total = w->layout.total;
    if (!(w->p.blocks = calloc((size_t)cfg->n_layer, sizeof(BlockParams)))) return -1;
    if (o->external_params) return 0; /* the caller points the views and maps the copies */
    if (!(w->params = mem_alloc(mem, w->prec != GPT_FP32 ? MEM_MASTER : MEM_PARAMS, total * sizeof(float)))) return -1;
    layout_views(&w->layout, w->params, &w->p);
    if (w->prec != GPT_FP32) {
        if (!(w->params_lp = mem_alloc(mem, MEM_PARAMS, total * sizeof(uint16_t)))) return -1;
        w->lp_from[0] = w->params, w->lp_to[0] = w->params_lp, w->lp_len[0] = total;
    }
    return 0;
}

static int grads_alloc(GptGrads *d, const GptWeights *w, const GptOptions *o, MemStats *mem) {
    if (!(d->g.blocks = calloc((size_t)w->cfg.n_layer, sizeof(BlockParams)))) return -1;
    if (o->external_grads) return 0; /* the caller points the views */
    if (!(d->grads = mem_alloc(mem, MEM_GRADS, w->layout.total * sizeof(float)))) return -1;
    layout_views(&w->layout, d->grads, &d->g);
    return 0;
}

/* Run state: the GEMM conversion scratch of mixed precision, saved activations and scratch for
 * micro-batches up to B×T, carved out of two buffers in the order layout_activations_prec counts. */
static int run_state_alloc(GptRunState *s, const ModelConfig *cfg, const GptOptions *o, GptPrecision prec,
                           MemStats *mem) {
    int B = o->B, T = o->T, L = cfg->n_layer;
    Recompute rc = o->recompute;
    s->B = B, s->T = T, s->nt = o->threads, s->recompute = rc;
    if (!(s->la = calloc((size_t)L, sizeof(LayerActs)))) return -1;
    MatPrec *mp = &s->mp;
    if (prec == GPT_FP16) {
        size_t fa, fb, fw;
        layout_fp16_scratch(cfg, B, T, &fa, &fb, &fw);
        mp->fp16 = 1;
        mp->fa = mem_alloc(mem, MEM_WORKSPACE, fa * sizeof(float));
        mp->fb = mem_alloc(mem, MEM_WORKSPACE, fb * sizeof(float));
        mp->fw = mem_alloc(mem, MEM_WORKSPACE, fw * sizeof(float));
        if (!mp->fa || !mp->fb || !mp->fw) return -1;
    } else if (prec == GPT_BF16) {
        size_t na, nb;
        layout_bf16_scratch(cfg, B, T, &na, &nb);
        mp->bf16 = 1;
        mp->a = mem_alloc(mem, MEM_WORKSPACE, na * sizeof(uint16_t));
        mp->b = mem_alloc(mem, MEM_WORKSPACE, nb * sizeof(uint16_t));
        if (!mp->a || !mp->b) return -1;
    }

    int lpa = mp->bf16; /* bf16 LayerNorm and GELU outputs */
    ActSizes as = layout_activations_prec(cfg, B, T, s->nt, rc, lpa);
    s->acts_floats = as.total;
    s->scratch_floats = as.scratch;
    s->acts = mem_alloc(mem, MEM_ACTIVATIONS, as.total * sizeof(float));
    s->scratch = mem_alloc(mem, MEM_WORKSPACE, as.scratch * sizeof(float));
    if (!s->acts || !s->scratch) return -1;

    size_t N = (size_t)B * T, C = cfg->n_embd, NH = cfg->n_head;
    size_t probs = (size_t)B * NH * T; /* attention log-sum-exp */
    float *a = s->acts;
#define TAKE(ptr, n) (ptr = a, a += (n))
/* A GEMM-operand activation: fp32, or bf16 in half as many floats (rounded up). */
#define TAKE_OP(x, fp, lp, n) (lpa ? (void)((x)->lp = (uint16_t *)a, a += ((n) + 1) / 2) : (void)TAKE((x)->fp, (n)))
    TAKE(s->encoded, N * C);
    /* Saved per layer, then (with recompute) one shared set that every layer's pointers alias. */
    for (int l = 0; l < L; l++) {
        LayerActs *x = &s->la[l];
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
            LayerActs *x = &s->la[l];
            x->ln1 = sh.ln1, x->ln2 = sh.ln2, x->fch_gelu = sh.fch_gelu;
            x->ln1_lp = sh.ln1_lp, x->ln2_lp = sh.ln2_lp, x->fchg_lp = sh.fchg_lp;
            if (rc == RECOMPUTE_FULL) {
                float *res3 = x->res3;
                *x = sh;
                x->res3 = res3;
            }
        }
    }
    TAKE(s->lnf, N * C), TAKE(s->lnf_mean, N), TAKE(s->lnf_rstd, N), TAKE(s->losses, N);
    ST_CHECK((size_t)(a - s->acts) == as.total);
    s->head_chunk = layout_head_chunk_rows(cfg, B, T);
    a = s->scratch;
    TAKE(s->dres, N * C), TAKE(s->dbuf_a, 4 * N * C), TAKE(s->dbuf_b, N * C), TAKE(s->dbuf_c, N * C);
    TAKE(s->att_scratch, attention_scratch_floats(T, cfg->n_embd / cfg->n_head, s->nt));
    TAKE(s->ln_scratch, (N + KERNEL_ROW_CHUNK - 1) / KERNEL_ROW_CHUNK * 2 * C);
    TAKE(s->logits, (size_t)s->head_chunk * cfg->vocab_padded);
    ST_CHECK((size_t)(a - s->scratch) == as.scratch);
#undef TAKE_OP
#undef TAKE
    return 0;
}

Status gpt_init(Gpt *g, const ModelConfig *cfg, const GptOptions *o, MemStats *mem, Err *err) {
    GptOptions def = gpt_default_options();
    if (!o) o = &def;
    memset(g, 0, sizeof *g);
    g->mem = mem;
    Status st = check_options(cfg, o, err);
    if (st != ST_OK) return st;
    if (weights_alloc(&g->w, cfg, o, mem) != 0 || grads_alloc(&g->d, &g->w, o, mem) != 0 ||
        run_state_alloc(&g->s, cfg, o, g->w.prec, mem) != 0) {
        gpt_free(g);
        return err_set(err, ST_ERR_RUNTIME, "out of memory allocating the model (L=%d C=%d V=%d B=%d T=%d)",
                       cfg->n_layer, cfg->n_embd, cfg->vocab, o->B, o->T);
    }
    return ST_OK;
}

void gpt_free(Gpt *g) {
    GptWeights *w = &g->w;
    GptRunState *s = &g->s;
    size_t total = w->layout.total;
    if (s->mp.bf16 || s->mp.fp16) {
        size_t na, nb, fa, fb, fw;
        layout_bf16_scratch(&w->cfg, s->B, s->T, &na, &nb);
        layout_fp16_scratch(&w->cfg, s->B, s->T, &fa, &fb, &fw);
        mem_free(g->mem, MEM_WORKSPACE, s->mp.a, na * sizeof(uint16_t));
        mem_free(g->mem, MEM_WORKSPACE, s->mp.b, nb * sizeof(uint16_t));
        mem_free(g->mem, MEM_WORKSPACE, s->mp.fa, fa * sizeof(float));
        mem_free(g->mem, MEM_WORKSPACE, s->mp.fb, fb * sizeof(float));
        mem_free(g->mem, MEM_WORKSPACE, s->mp.fw, fw * sizeof(float));
    }
    mem_free(g->mem, MEM_ACTIVATIONS, s->acts, s->acts_floats * sizeof(float));
    mem_free(g->mem, MEM_WORKSPACE, s->scratch, s->scratch_floats * sizeof(float));
    free(s->la);
    mem_free(g->mem, MEM_GRADS, g->d.grads, total * sizeof(float));
    free(g->d.g.blocks);
    mem_free(g->mem, w->prec != GPT_FP32 ? MEM_MASTER : MEM_PARAMS, w->params, total * sizeof(float));
    mem_free(g->mem, MEM_PARAMS, w->params_lp, total * sizeof(uint16_t));
    free(w->p.blocks);
    layout_free(&w->layout);
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
    ST_CHECK(g->w.params != NULL);
    gpt_init_params_buf(&g->w.layout, g->w.params, seed, g->s.nt);
}

void gpt_round_lp(const Gpt *g, uint16_t *dst, const float *src, size_t n) {
    if (g->w.prec == GPT_FP16) cast_fp16(dst, src, n, g->s.nt);
    else if (g->w.prec == GPT_BF16) cast_bf16(dst, src, n, g->s.nt);
}

void gpt_sync_lp(Gpt *g) {
    if (g->w.params_lp) gpt_round_lp(g, g->w.params_lp, g->w.params, g->w.layout.total); /* none: fp32 or external */
}

void gpt_zero_grads(Gpt *g) {
    ST_CHECK(g->d.grads != NULL);
    memset(g->d.grads, 0, g->w.layout.total * sizeof(float));
}

void gpt_overwrite_grads(Gpt *g) {
    ST_CHECK(g->d.grads != NULL);
    g->d.overwrite = 1;
}

static void hook(void (*fn)(void *, int), void *ctx, int seg) {
    if (fn) fn(ctx, seg);
}

/* Moves a GEMM failure recorded by matmul into the run state (the first error wins). Returns 1
 * if the run state holds an error. */
static int take_errors(Gpt *g) {
    Err e;
    if (mm_take_error(&e) != ST_OK && g->s.err.status == ST_OK) g->s.err = e;
    return g->s.err.status != ST_OK;
}

/* Forward of block l on input x (B, T, C) into its LayerActs (shared buffers under recompute). */
static void block_forward(Gpt *g, int l, const float *x, int B, int T) {
    const ModelConfig *cfg = &g->w.cfg;
    int C = cfg->n_embd, NH = cfg->n_head, nt = g->s.nt, N = B * T;
    Dropout off = {0};
    const BlockParams *p = &g->w.p.blocks[l];
    LayerActs *a = &g->s.la[l];
    if (g->s.mp.bf16) {
        /* bf16: the LayerNorm and GELU outputs are produced, stored and used as bf16 GEMM operands. */
        layernorm_forward_bf16(a->ln1_lp, a->ln1_mean, a->ln1_rstd, x, p->ln1w, p->ln1b, N, C, nt);
        matmul_forward_lp(a->qkv, a->ln1_lp, lp(g, p->qkvw), p->qkvb, N, C, 3 * C);
    } else {
        layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, x, p->ln1w, p->ln1b, N, C, nt);
        matmul_forward_p(&g->s.mp, a->qkv, a->ln1, p->qkvw, lp(g, p->qkvw), p->qkvb, N, C, 3 * C, nt);
    }
    attention_forward(a->atty, a->lse, g->s.att_scratch, a->qkv, B, T, C, NH,
                      cfg->dropout > 0 ? dropout_at(g, l, DROP_ATTN) : off, g->s.mp.bf16, nt);
    matmul_forward_p(&g->s.mp, g->s.dbuf_b, a->atty, p->attprojw, lp(g, p->attprojw), p->attprojb, N, C, C, nt);
    if (g->s.mp.bf16) {
        residual_layernorm_forward_bf16(a->res2, a->ln2_lp, a->ln2_mean, a->ln2_rstd, x, g->s.dbuf_b,
                                        dropout_at(g, l, DROP_ATTN_RES), p->ln2w, p->ln2b, N, C, nt);
        matmul_forward_lp(a->fch, a->ln2_lp, lp(g, p->fcw), p->fcb, N, C, 4 * C);
        gelu_forward_bf16(a->fchg_lp, a->fch, (size_t)N * 4 * C, nt);
        matmul_forward_lp(g->s.dbuf_b, a->fchg_lp, lp(g, p->fcprojw), p->fcprojb, N, 4 * C, C);
    } else {
        residual_layernorm_forward(a->res2, a->ln2, a->ln2_mean, a->ln2_rstd, x, g->s.dbuf_b,
                                   dropout_at(g, l, DROP_ATTN_RES), p->ln2w, p->ln2b, N, C, nt);
        matmul_forward_p(&g->s.mp, a->fch, a->ln2, p->fcw, lp(g, p->fcw), p->fcb, N, C, 4 * C, nt);
        gelu_forward(a->fch_gelu, a->fch, (size_t)N * 4 * C, nt);
        matmul_forward_p(&g->s.mp, g->s.dbuf_b, a->fch_gelu, p->fcprojw, lp(g, p->fcprojw), p->fcprojb, N, 4 * C, C, nt);
    }
    residual_forward(a->res3, a->res2, g->s.dbuf_b, (size_t)N * C, dropout_at(g, l, DROP_MLP_RES), nt);
}

double gpt_forward(Gpt *g, const int32_t *inp, const int32_t *tgt, int B, int T, float dscale, int train,
                   uint64_t drop_counter) {
    ST_CHECK(B <= g->s.B && T <= g->s.T && (size_t)B * T <= (size_t)g->s.B * g->s.T);
    const ModelConfig *cfg = &g->w.cfg;
    int L = cfg->n_layer, C = cfg->n_embd, nt = g->s.nt, N = B * T;
    double t0 = timer_ms();
    g->s.cur_inp = inp, g->s.curB = B, g->s.curT = T, g->s.cur_drop_counter = drop_counter;
    g->s.cur_train = train != 0;

    hook(g->hooks.before_forward, g->hooks.ctx, 0);
    encoder_forward(g->s.encoded, inp, g->w.p.wte, g->w.p.wpe, B, T, C, dropout_at(g, -1, DROP_EMBED), nt);
    const float *x = g->s.encoded;
    for (int l = g->w.first; l < g->w.last; l++) {
        hook(g->hooks.before_forward, g->hooks.ctx, l + 1);
        block_forward(g, l, x, B, T);
        x = g->s.la[l].res3;
    }
    hook(g->hooks.before_forward, g->hooks.ctx, L + 1);
    layernorm_forward(g->s.lnf, g->s.lnf_mean, g->s.lnf_rstd, x, g->w.p.lnfw, g->w.p.lnfb, N, C, nt);
    double head_fwd = 0, head_bwd = 0;
    double t1 = timer_ms();
    head_forward_backward_p(&g->s.mp, g->s.losses, train ? g->s.dbuf_b : NULL, g->d.g.wte, g->s.logits, g->s.lnf, g->w.p.wte,
                            lp(g, g->w.p.wte), tgt, N, C, cfg->vocab, cfg->vocab_padded, dscale, g->s.head_chunk,
                            !(train && g->d.overwrite), nt, NULL, &head_fwd, &head_bwd);
    double t2 = timer_ms();
    g->s.have_head_grads = train;
    /* Fixed-order sum of the per-row losses. */
    double sum = 0;
    for (int i = 0; i < N; i++) sum += g->s.losses[i];
    g->s.ms_fwd += (t1 - t0) + (t2 - t1 - head_bwd);
    g->s.ms_bwd += head_bwd;
    return take_errors(g) ? NAN : sum;
}

void gpt_backward(Gpt *g) {
    ST_CHECK(g->s.have_head_grads);
    const ModelConfig *cfg = &g->w.cfg;
    int L = cfg->n_layer, C = cfg->n_embd, NH = cfg->n_head, nt = g->s.nt, first = g->w.first, last = g->w.last;
    int B = g->s.curB, T = g->s.curT, N = B * T;
    double t0 = timer_ms();
    Dropout off = {0};
    size_t NC = (size_t)N * C;
    int acc = !g->d.overwrite; /* 0: every parameter gradient below is written, not added */

    hook(g->hooks.before_backward, g->hooks.ctx, L + 1);
    memset(g->s.dres, 0, NC * sizeof(float));
    const float *xlast = last > first ? g->s.la[last - 1].res3 : g->s.encoded;
    layernorm_backward(g->s.dres, g->d.g.lnfw, g->d.g.lnfb, g->s.ln_scratch, g->s.dbuf_b, xlast, g->w.p.lnfw, g->s.lnf_mean,
                       g->s.lnf_rstd, N, C, acc, nt);
    hook(g->hooks.grads_ready, g->hooks.ctx, L + 1);

    for (int l = last - 1; l >= first; l--) {
        hook(g->hooks.before_backward, g->hooks.ctx, l + 1);
        const BlockParams *p = &g->w.p.blocks[l];
        BlockParams *dp = &g->d.g.blocks[l];
        LayerActs *a = &g->s.la[l];
        const float *x = l > first ? g->s.la[l - 1].res3 : g->s.encoded;
        if (g->s.recompute == RECOMPUTE_FULL) {
            /* dbuf_b is free here: the head's dx was consumed by the final LayerNorm backward. */
            block_forward(g, l, x, B, T);
        } else if (g->s.recompute == RECOMPUTE_SELECTIVE && g->s.mp.bf16) {
            layernorm_forward_bf16(a->ln1_lp, a->ln1_mean, a->ln1_rstd, x, p->ln1w, p->ln1b, N, C, nt);
            layernorm_forward_bf16(a->ln2_lp, a->ln2_mean, a->ln2_rstd, a->res2, p->ln2w, p->ln2b, N, C, nt);
            gelu_forward_bf16(a->fchg_lp, a->fch, NC * 4, nt);
        } else if (g->s.recompute == RECOMPUTE_SELECTIVE) {
            layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, x, p->ln1w, p->ln1b, N, C, nt);
            layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, p->ln2w, p->ln2b, N, C, nt);
            gelu_forward(a->fch_gelu, a->fch, NC * 4, nt);
        }
        const float *dbranch = g->s.dres;
        if (cfg->dropout > 0) {
            dropout_backward(g->s.dbuf_c, g->s.dres, NC, dropout_at(g, l, DROP_MLP_RES), nt);
            dbranch = g->s.dbuf_c;
        }
        if (g->s.mp.bf16) {
            /* The stored bf16 operands go straight into the GEMMs; GELU backward writes fc's bf16
             * output gradient and its bias gradient. */
            cast_bf16_colsum(g->s.mp.a, dp->fcprojb, dbranch, N, C, acc, nt);
            matmul_backward_lp(g->s.dbuf_a, dp->fcprojw, g->s.mp.a, a->fchg_lp, lp(g, p->fcprojw), N, 4 * C, C, acc);
            gelu_backward_bf16(g->s.mp.a, dp->fcb, g->s.dbuf_a, a->fch, N, 4 * C, acc, nt);
            matmul_backward_lp(g->s.dbuf_b, dp->fcw, g->s.mp.a, a->ln2_lp, lp(g, p->fcw), N, C, 4 * C, acc);
        } else {
            matmul_backward_p(&g->s.mp, g->s.dbuf_a, dp->fcprojw, dp->fcprojb, dbranch, a->fch_gelu, p->fcprojw,
                              lp(g, p->fcprojw), N, 4 * C, C, acc, nt);
            gelu_backward(g->s.dbuf_a, g->s.dbuf_a, a->fch, NC * 4, nt);
            matmul_backward_p(&g->s.mp, g->s.dbuf_b, dp->fcw, dp->fcb, g->s.dbuf_a, a->ln2, p->fcw, lp(g, p->fcw), N, C,
                              4 * C, acc, nt);
        }
        layernorm_backward(g->s.dres, dp->ln2w, dp->ln2b, g->s.ln_scratch, g->s.dbuf_b, a->res2, p->ln2w, a->ln2_mean,
                           a->ln2_rstd, N, C, acc, nt);
        dbranch = g->s.dres;
        if (cfg->dropout > 0) {
            dropout_backward(g->s.dbuf_c, g->s.dres, NC, dropout_at(g, l, DROP_ATTN_RES), nt);
            dbranch = g->s.dbuf_c;
        }
        matmul_backward_p(&g->s.mp, g->s.dbuf_b, dp->attprojw, dp->attprojb, dbranch, a->atty, p->attprojw,
                          lp(g, p->attprojw), N, C, C, acc, nt);
        attention_backward(g->s.dbuf_a, g->s.att_scratch, g->s.dbuf_b, a->qkv, a->atty, a->lse, B, T, C, NH,
                           cfg->dropout > 0 ? dropout_at(g, l, DROP_ATTN) : off, g->s.mp.bf16, nt);
        if (g->s.mp.bf16) {
            cast_bf16_colsum(g->s.mp.a, dp->qkvb, g->s.dbuf_a, N, 3 * C, acc, nt);
            matmul_backward_lp(g->s.dbuf_b, dp->qkvw, g->s.mp.a, a->ln1_lp, lp(g, p->qkvw), N, C, 3 * C, acc);
        } else {
            matmul_backward_p(&g->s.mp, g->s.dbuf_b, dp->qkvw, dp->qkvb, g->s.dbuf_a, a->ln1, p->qkvw, lp(g, p->qkvw), N, C,
                              3 * C, acc, nt);
        }
        layernorm_backward(g->s.dres, dp->ln1w, dp->ln1b, g->s.ln_scratch, g->s.dbuf_b, x, p->ln1w, a->ln1_mean,
                           a->ln1_rstd, N, C, acc, nt);
        hook(g->hooks.grads_ready, g->hooks.ctx, l + 1);
    }
    hook(g->hooks.before_backward, g->hooks.ctx, 0);
    /* wte's gradient was written by the head in the forward; wpe's has max_seq rows, of which
     * only the first T get a contribution, so overwriting starts from zeros there (a few MB). */
    if (!acc) memset(g->d.g.wpe, 0, (size_t)cfg->max_seq * C * sizeof(float));
    encoder_backward(g->d.g.wte, g->d.g.wpe, g->s.dres, g->s.cur_inp, B, T, C, dropout_at(g, -1, DROP_EMBED), nt);
    hook(g->hooks.grads_ready, g->hooks.ctx, 0);
    g->s.have_head_grads = 0, g->d.overwrite = 0;
    g->s.ms_bwd += timer_ms() - t0;
    take_errors(g);
}

Status gpt_status(Gpt *g, Err *err) {
    take_errors(g);
    Status st = g->s.err.status;
    if (st != ST_OK && err) *err = g->s.err;
    g->s.err.status = ST_OK, g->s.err.msg[0] = 0;
    return st;
}

Status gpt_probs_row0(Gpt *g, const int32_t *inp, int T, float *probs, Err *err) {
    int32_t *tgt = calloc((size_t)T, sizeof *tgt);
    if (!tgt) return err_set(err, ST_ERR_RUNTIME, "out of memory (%d targets)", T);
    const ModelConfig *c = &g->w.cfg;
    gpt_forward(g, inp, tgt, 1, T, 0.0f, 0, 0);
    head_forward_backward(g->s.losses, NULL, NULL, g->s.logits, g->s.lnf, g->w.p.wte, tgt, 1, c->n_embd, c->vocab,
                          c->vocab_padded, 0.0f, g->s.head_chunk, 1, g->s.nt, probs, NULL, NULL);
    free(tgt);
    return gpt_status(g, err);
}

Status gpt_logits(Gpt *g, const int32_t *inp, int T, float *logits, Err *err) {
    const ModelConfig *c = &g->w.cfg;
    int C = c->n_embd, V = c->vocab, Vp = c->vocab_padded, chunk = g->s.head_chunk;
    ST_CHECK(T >= 1 && T <= g->s.T);
    int32_t *tgt = malloc((size_t)T * sizeof *tgt);
    if (!tgt) return err_set(err, ST_ERR_RUNTIME, "out of memory (%d targets)", T);
    memset(tgt, 0xff, (size_t)T * sizeof *tgt); /* every target -1: ignored */
    gpt_forward(g, inp, tgt, 1, T, 0.0f, 0, 0); /* train = 0: no dropout */
    /* The head again, chunk by chunk, keeping each chunk's raw logits (the forward's buffer only
     * holds the last chunk, and without dx the head leaves them unnormalised). */
    for (int r0 = 0; r0 < T; r0 += chunk) {
        int m = T - r0 < chunk ? T - r0 : chunk;
        head_forward_backward_p(&g->s.mp, g->s.losses + r0, NULL, NULL, g->s.logits, g->s.lnf + (size_t)r0 * C,
                                g->w.p.wte, lp(g, g->w.p.wte), tgt + r0, m, C, V, Vp, 0.0f, chunk, 1, g->s.nt, NULL,
                                NULL, NULL);
        for (int i = 0; i < m; i++)
            memcpy(logits + (size_t)(r0 + i) * V, g->s.logits + (size_t)i * Vp, (size_t)V * sizeof(float));
    }
    free(tgt);
    return gpt_status(g, err);
}
