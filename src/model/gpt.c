/* gpt.c — the GPT model's allocation, forward and backward over the layer kernels (see gpt.h). */
#include "model/gpt.h"

#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/rng.h"
#include "core/stopsig.h"
#include "core/timer.h"
#include "model/backend.h"
#include "model/kernels.h"
#include "model/lora.h"

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

void gpt_set_lora(Gpt *g, struct Lora *lora) {
    if (lora) {
        ST_CHECK_MSG(g->w.prec == GPT_FP32 && !g->s.sp, "LoRA adapters need an fp32 model without --sp");
        ST_CHECK_MSG(lora->lay.L == g->w.cfg.n_layer && lora->N >= (size_t)g->s.B * g->s.T && lora->lay.tp == g->s.tp &&
                     lora->lay.tp_rank == g->s.tp_rank, "LoRA adapters built for another model or tp slice");
        ST_CHECK_MSG(g->s.tp == 1 || g->hooks.tp_allreduce, "LoRA at tp > 1: set the tp hooks before gpt_set_lora");
        lora->tp_allreduce = g->s.tp > 1 ? g->hooks.tp_allreduce : NULL, lora->tp_ctx = g->hooks.ctx;
    }
    g->lora = lora;
}

/* LoRA's dropout for block l's adapters (training forwards only); lora_forward adds the target to
 * the stream (sites 8..14, beside the model's 0..3). */
static Dropout lora_dropout_at(const Gpt *g, int layer) {
    Dropout d = {g->s.cur_train ? g->lora->lay.cfg.dropout : 0.0f, g->s.dropout_seed,
                 (g->s.cur_drop_counter << 24) | ((uint64_t)(layer + 1) << 4), 0, 0, 0};
    return d;
}

/* The adapters of block l at a GEMM site, forward (y += ...) or backward (dx += ..., their grads +=). */
static void lora_fwd(Gpt *g, int l, int site, const float *x, float *y, int ldy) {
    if (g->lora) lora_forward(g->lora, l, site, x, y, ldy, g->s.curB * g->s.curT, lora_dropout_at(g, l));
}
static void lora_bwd(Gpt *g, int l, int site, const float *x, const float *dy, int ldy, float *dx) {
    if (g->lora) lora_backward(g->lora, l, site, x, dy, ldy, dx, g->s.curB * g->s.curT, lora_dropout_at(g, l));
}

void gpt_map_lp(Gpt *g, int i, const float *from, const uint16_t *to, size_t len) {
    ST_CHECK(i >= 0 && i < GPT_LP_RANGES);
    g->w.lp_from[i] = from, g->w.lp_to[i] = to, g->w.lp_len[i] = len;
}

/* The masks of one site of the current micro-batch; none outside training (evaluation mode). */
static Dropout dropout_at(const Gpt *g, int layer, int site) {
    Dropout d = {g->s.cur_train ? g->w.cfg.dropout : 0.0f, g->s.dropout_seed,
                 (g->s.cur_drop_counter << 24) | ((uint64_t)(layer + 1) << 4) | (uint64_t)site, 0, 0, 0};
    /* Tensor parallelism: a rank's rows (--sp) and heads are the same elements of one process. */
    if (site == DROP_ATTN) d.head0 = g->s.tp_rank * g->s.dim.NHl, d.heads = g->w.cfg.n_head;
    else if (g->s.sp) d.offset = (uint64_t)g->s.tp_rank * g->s.curNl * g->w.cfg.n_embd;
    return d;
}

GptOptions gpt_default_options(void) {
    GptOptions o;
    memset(&o, 0, sizeof o);
    o.B = 1, o.T = 1, o.threads = 1, o.shard_multiple = 1;
    o.recompute = RECOMPUTE_NONE, o.precision = GPT_FP32;
    o.tp = 1, o.tp_rank = 0, o.sp = 0;
    o.slots = 1;
    return o;
}

static Status check_options(const ModelConfig *cfg, const GptOptions *o, Err *err) {
    /* The blueprint must come out of model_config_validate: a zero KV-head count or MLP width would
     * otherwise build a model of another shape without a word. */
    ModelConfig v = *cfg;
    Status st = model_config_validate(&v, err);
    if (st != ST_OK) return st;
    if (v.n_kv_head != cfg->n_kv_head || v.ffn != cfg->ffn || v.vocab_padded != cfg->vocab_padded ||
        v.norm_eps != cfg->norm_eps || v.rope_theta != cfg->rope_theta || v.rope_type != cfg->rope_type || v.mup_input_alpha != cfg->mup_input_alpha ||
        v.mup_output_alpha != cfg->mup_output_alpha)
        return err_set(err, ST_ERR_INPUT, "model: expected a blueprint completed by model_config_validate, found "
                       "kv-heads %d, ffn %d, padded vocabulary %d (expected %d, %d, %d)", cfg->n_kv_head, cfg->ffn,
                       cfg->vocab_padded, v.n_kv_head, v.ffn, v.vocab_padded);
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
    st = layout_tp_check(cfg, o->tp, err);
    if (st != ST_OK) return st;
    if (o->tp_rank < 0 || o->tp_rank >= o->tp)
        return err_set(err, ST_ERR_INPUT, "tp rank %d outside the tp group of %d", o->tp_rank, o->tp);
    if (o->sp && o->tp == 1) return err_set(err, ST_ERR_INPUT, "--sp: expected --tp > 1, found --tp 1");
    if (o->split_backward && (st = layout_check_split_backward(o->recompute, o->sp, err)) != ST_OK) return st;
    if (o->slots < 1) return err_set(err, ST_ERR_INPUT, "pipeline: expected at least 1 activation slot, found %d", o->slots);
    if (o->stage.n < 0 || o->stage.n > LAYOUT_MAX_CHUNKS)
        return err_set(err, ST_ERR_INPUT, "--interleave: expected 1..%d model chunks per rank, found %d",
                       LAYOUT_MAX_CHUNKS, o->stage.n);
    for (int i = 0, prev = 0; i < o->stage.n; i++) {
        if (o->stage.first[i] < prev || o->stage.last[i] <= o->stage.first[i] || o->stage.last[i] > cfg->n_layer)
            return err_set(err, ST_ERR_INPUT, "--pp-layers: chunk %d holds blocks [%d, %d): expected an ordered, "
                           "non-empty range inside [%d, %d)", i, o->stage.first[i], o->stage.last[i], prev,
                           cfg->n_layer);
        prev = o->stage.last[i];
    }
    if (o->frozen && (o->precision != GPT_FP32 || o->sp || o->stage.n > 1 || o->split_backward))
        return err_set(err, ST_ERR_INPUT, "--lora-rank: a frozen base needs --precision fp32, no --sp and --pp 1, found "
                       "precision %d, sp %d, %d model chunks", (int)o->precision, o->sp, o->stage.n > 1 ? o->stage.n : 1);
    if (o->sp && ((long)o->B * o->T) % o->tp)
        return err_set(err, ST_ERR_INPUT, "--sp: expected --micro-batch x --seq-len = %d x %d = %ld divisible by --tp %d",
                       o->B, o->T, (long)o->B * o->T, o->tp);
    if (o->sp && o->precision == GPT_BF16 && ((long)o->B * o->T / o->tp * cfg->n_embd) % 2)
        return err_set(err, ST_ERR_INPUT, "--sp with --bf16: expected an even number of elements per rank's rows, found "
                       "%ld x %d", (long)o->B * o->T / o->tp, cfg->n_embd);
    return ST_OK;
}

/* Weights: the layout, the fp32 parameters (or the master) and the 2-byte working copy. */
static int weights_alloc(GptWeights *w, const ModelConfig *cfg, const GptOptions *o, const Backend *be, MemStats *mem) {
    w->cfg = *cfg;
    w->prec = o->precision;
    if (layout_init_stage(&w->layout, cfg, o->shard_multiple, o->tp, o->tp_rank, o->stage.n ? &o->stage : NULL) != 0)
        return -1;
    w->first = w->layout.stage.first[0], w->last = w->layout.stage.last[w->layout.stage.n - 1];
    size_t total = w->layout.total;
    if (!(w->p.blocks = calloc((size_t)cfg->n_layer, sizeof(BlockParams)))) return -1;
    if (o->external_params) return 0; /* the caller points the views and maps the copies */
    if (!(w->params = be->alloc(mem, w->prec != GPT_FP32 ? MEM_MASTER : MEM_PARAMS, total * sizeof(float)))) return -1;
    layout_views(&w->layout, w->params, &w->p);
    if (w->prec != GPT_FP32) {
        if (!(w->params_lp = be->alloc(mem, MEM_PARAMS, total * sizeof(uint16_t)))) return -1;
        w->lp_from[0] = w->params, w->lp_to[0] = w->params_lp, w->lp_len[0] = total;
    }
    return 0;
}

static int grads_alloc(GptGrads *d, const GptWeights *w, const GptOptions *o, const Backend *be, MemStats *mem) {
    if (!(d->g.blocks = calloc((size_t)w->cfg.n_layer, sizeof(BlockParams)))) return -1;
    d->frozen = o->frozen;
    if (o->external_grads || o->frozen) return 0; /* the caller points the views; frozen: none (NULL views) */
    if (!(d->grads = be->alloc(mem, MEM_GRADS, w->layout.total * sizeof(float)))) return -1;
    layout_views(&w->layout, d->grads, &d->g);
    return 0;
}

/* Run state: the GEMM conversion scratch of mixed precision, saved activations and scratch for
 * micro-batches up to B×T, carved out of two buffers in the order layout_activations counts. */
static int run_state_alloc(GptRunState *s, const ModelConfig *cfg, const GptOptions *o, GptPrecision prec,
                           const Backend *be, MemStats *mem) {
    int B = o->B, T = o->T, L = cfg->n_layer, tp = o->tp;
    Recompute rc = o->recompute;
    s->B = B, s->T = T, s->nt = o->threads, s->recompute = rc;
    s->tp = tp, s->tp_rank = o->tp_rank, s->sp = o->sp;
    s->split_backward = o->split_backward;
    s->dim = layout_dims(cfg, tp);
    s->att_scale = model_attn_scale(cfg), s->logit_mult = model_logit_mult(cfg), s->input_mult = model_input_mult(cfg);
    if (!(s->la = calloc((size_t)L, sizeof(LayerActs)))) return -1;
    MatPrec *mp = &s->mp;
    if (prec == GPT_FP16) {
        size_t fa, fb, fw;
        layout_fp16_scratch_tp(cfg, B, T, tp, &fa, &fb, &fw);
        mp->fp16 = 1;
        mp->fa = be->alloc(mem, MEM_WORKSPACE, fa * sizeof(float));
        mp->fb = be->alloc(mem, MEM_WORKSPACE, fb * sizeof(float));
        mp->fw = be->alloc(mem, MEM_WORKSPACE, fw * sizeof(float));
        if (!mp->fa || !mp->fb || !mp->fw) return -1;
    } else if (prec == GPT_BF16) {
        size_t na, nb;
        layout_bf16_scratch_tp(cfg, B, T, tp, be->host_addressable, &na, &nb);
        mp->bf16 = 1;
        mp->head_rows = layout_head_grad_rows(cfg, B, T, tp, be->host_addressable);
        mp->a = be->alloc(mem, MEM_WORKSPACE, na * sizeof(uint16_t));
        mp->b = be->alloc(mem, MEM_WORKSPACE, nb * sizeof(uint16_t));
        if (!mp->a || !mp->b) return -1;
    }

    int lpa = mp->bf16; /* bf16 LayerNorm and GELU outputs */
    ParamLayout stl;    /* what the stage holds: the blocks per slot, the head */
    if (layout_init_stage(&stl, cfg, 1, 1, 0, o->stage.n ? &o->stage : NULL) != 0) return -1;
    ActStage ast = layout_act_stage(&stl, o->slots);
    ast.split = o->split_backward;
    layout_free(&stl);
    if (mp->bf16 && ast.head && be->host_addressable) {
        size_t w = layout_head_pack_words(cfg, B, T, tp, 1);
        if (w) {
            if (!(mp->wt = be->alloc(mem, MEM_WORKSPACE, w * sizeof(uint32_t)))) return -1;
            mp->pack_words = w / 2, mp->wn = mp->wt + w / 2;
        }
    }
    /* GptPrecision is the layout's 0/1/2 */
    ActOptions ao = {B, T, s->nt, rc, (int)prec, tp, o->sp, &ast, !be->host_addressable};
    s->doc_mask = cfg->doc_mask != 0, s->doc_eot = cfg->doc_eot;
    if (s->doc_mask && !(s->docpos_host = malloc((size_t)B * T * sizeof(int32_t)))) return -1;
    ActSizes as = layout_activations(cfg, &ao);
    s->acts_floats = as.total;
    s->scratch_floats = as.scratch;
    s->nslots = ast.slots, s->slot_blocks = ast.blocks;
    s->slots = calloc((size_t)ast.slots, sizeof *s->slots);
    LayerActs *store = calloc((size_t)ast.slots * (size_t)(ast.blocks > 0 ? ast.blocks : 1), sizeof *store);
    if (!s->slots || !store) {
        free(store);
        return -1;
    }
    s->slots[0].la = store; /* owns the slots' LayerActs */
    s->acts = be->alloc(mem, MEM_ACTIVATIONS, as.total * sizeof(float));
    s->scratch = be->alloc(mem, MEM_WORKSPACE, as.scratch * sizeof(float));
    if (!s->acts || !s->scratch) return -1;

    /* Rows of the residual stream held (Nl), and the parallel regions' widths (layout.c's TpDims). */
    size_t N = (size_t)B * T, Nl = o->sp ? N / (size_t)tp : N, C = cfg->n_embd;
    size_t C3 = (size_t)s->dim.QKVl, F = (size_t)s->dim.Fl, H = (size_t)s->dim.Hl, Ca = (size_t)s->dim.Cl;
    int gpt2 = !s->dim.rms; /* LayerNorm statistics: mean and rstd (RMSNorm: rstd only) */
    size_t probs = (size_t)B * s->dim.NHl * T; /* attention log-sum-exp */
    float *a = s->acts;
#define TAKE(ptr, n) (ptr = a, a += (n))
/* A GEMM-operand activation: fp32, or bf16 in half as many floats (rounded up). */
#define TAKE_OP(x, fp, lp, n) (lpa ? (void)((x)->lp = (uint16_t *)a, a += ((n) + 1) / 2) : (void)TAKE((x)->fp, (n)))
    /* Per slot: the chunk's input, its blocks' saved tensors, the head's; then (with recompute) one
     * shared set that every block's pointers alias. */
    for (int k = 0; k < ast.slots; k++) {
        GptSlot *sl = &s->slots[k];
        sl->la = store + (size_t)k * ast.blocks;
        if (s->doc_mask) { /* int32 in float-sized cells */
            sl->docpos = (int32_t *)a;
            a += N;
        }
        TAKE(sl->encoded, Nl * C);
        for (int l = 0; l < ast.blocks; l++) {
            LayerActs *x = &sl->la[l];
            if (rc == RECOMPUTE_NONE) {
                TAKE_OP(x, ln1, ln1_lp, Nl * C), TAKE_OP(x, ln2, ln2_lp, Nl * C), TAKE_OP(x, fch_gelu, fchg_lp, N * F);
            }
            if (rc != RECOMPUTE_FULL) {
                if (gpt2) TAKE(x->ln1_mean, Nl), TAKE(x->ln2_mean, Nl);
                TAKE(x->ln1_rstd, Nl), TAKE(x->qkv, N * C3), TAKE(x->lse, probs);
                TAKE(x->atty, N * Ca), TAKE(x->res2, Nl * C), TAKE(x->ln2_rstd, Nl);
                TAKE(x->fch, N * H);
            }
            TAKE(x->res3, Nl * C);
            if (ast.split) { /* the weight pass's output gradients (bf16 where the GEMM reads bf16) */
                size_t h = lpa ? 2 : 1;
                TAKE(x->wg_fcproj, (N * C + h - 1) / h), TAKE(x->wg_fc, (N * H + h - 1) / h);
                TAKE(x->wg_attproj, N * C), TAKE(x->wg_qkv, (N * C3 + h - 1) / h);
            }
        }
        if (ast.head) {
            TAKE(sl->lnf, Nl * C), TAKE(sl->lnf_rstd, Nl), TAKE(sl->losses, N);
            if (gpt2) TAKE(sl->lnf_mean, Nl);
            if (ast.slots > 1) TAKE(sl->dhead, N * C);
        }
    }
    if (rc != RECOMPUTE_NONE) {
        LayerActs sh = {0};
        TAKE_OP(&sh, ln1, ln1_lp, Nl * C), TAKE_OP(&sh, ln2, ln2_lp, Nl * C), TAKE_OP(&sh, fch_gelu, fchg_lp, N * F);
        if (rc == RECOMPUTE_FULL) {
            if (gpt2) TAKE(sh.ln1_mean, Nl), TAKE(sh.ln2_mean, Nl);
            TAKE(sh.ln1_rstd, Nl), TAKE(sh.qkv, N * C3), TAKE(sh.lse, probs);
            TAKE(sh.atty, N * Ca), TAKE(sh.res2, Nl * C), TAKE(sh.ln2_rstd, Nl);
            TAKE(sh.fch, N * H);
        }
        for (size_t i = 0; i < (size_t)ast.slots * ast.blocks; i++) {
            LayerActs *x = &store[i];
            x->ln1 = sh.ln1, x->ln2 = sh.ln2, x->fch_gelu = sh.fch_gelu;
            x->ln1_lp = sh.ln1_lp, x->ln2_lp = sh.ln2_lp, x->fchg_lp = sh.fchg_lp;
            if (rc == RECOMPUTE_FULL) {
                float *res3 = x->res3;
                *x = sh;
                x->res3 = res3;
            }
        }
    }
    ST_CHECK((size_t)(a - s->acts) == as.total);
    s->head_chunk = layout_head_chunk_rows(cfg, B, T);
    a = s->scratch;
    size_t Fw = layout_dbuf_width(cfg, tp);
    TAKE(s->dres, Nl * C), TAKE(s->dbuf_a, N * Fw), TAKE(s->dbuf_b, N * C), TAKE(s->dbuf_c, N * C);
    TAKE(s->att_scratch, s->dim.rms ? attention_gqa_scratch_floats(T, s->dim.hs, cfg->n_head / cfg->n_kv_head, s->nt)
                                : attention_scratch_floats(T, s->dim.hs, s->nt));
    TAKE(s->sums, layout_sums_floats(cfg, B, T, tp));
    s->mp.sums = s->sums;
    TAKE(s->logits, (size_t)s->head_chunk * s->dim.Vl);
    if (tp > 1) TAKE(s->head_stats, 3 * (size_t)s->head_chunk);
    if (Nl < N) TAKE(s->sp_gather, lpa ? (N * C + 1) / 2 : N * C), TAKE(s->sp_lngrad, 2 * C);
    if (ast.pipe) TAKE(s->pp_gin, Nl * C);
    if (s->dim.rms) {
        TAKE(s->rope_cs, (size_t)T * s->dim.hs);
        double *inv_freq = malloc((size_t)s->dim.hs / 2 * sizeof(double));
        if (!inv_freq) return -1;
        model_rope_inv_freq(cfg, inv_freq);
        be->rope_table(s->rope_cs, T, s->dim.hs, inv_freq);
        free(inv_freq);
    }
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
    g->be = o->backend ? o->backend : backend_cpu();
    Status st = check_options(cfg, o, err);
    if (st != ST_OK) return st;
    if (!g->be->host_addressable && !o->device_resident) /* backend.h: the trainer's host paths are not there yet */
        return err_set(err, ST_ERR_INPUT, "--device %s: the model's buffers would not be host-addressable, and the "
                       "optimizer, parallel and checkpoint paths for such a backend are not built yet", g->be->name);
    /* External gradients and parameters (ZeRO 2, 3) are the caller's device buffers (parallel/ allocates
     * them through the same backend). */
    if (!g->be->host_addressable && (o->tp > 1 || o->stage.n > 1 || o->slots > 1))
        return err_set(err, ST_ERR_INPUT, "--device %s: expected one process's whole model (tp 1, one pipeline "
                       "chunk and slot), found tp %d, %d chunks, %d slots", g->be->name, o->tp, o->stage.n, o->slots);
    const Backend *be = g->be;
    int wok = weights_alloc(&g->w, cfg, o, be, mem) == 0;
    if (wok) { /* the vocabulary rows held, from the layout */
        ST_CHECK(g->w.layout.vocab_local == layout_dims(cfg, o->tp).Vl);
        g->s.v0 = o->tp_rank * g->w.layout.vocab_local, g->s.Vr = g->w.layout.tensors[0].rows_real;
    }
    int dok = 1;
    if (wok && !be->host_addressable) { /* the tokens and targets a forward copies in */
        size_t bt = (size_t)o->B * o->T * sizeof(int32_t);
        g->s.dev_inp = be->alloc(mem, MEM_DATA, bt), g->s.dev_tgt = be->alloc(mem, MEM_DATA, bt);
        dok = g->s.dev_inp && g->s.dev_tgt;
    }
    if (!wok || !dok || grads_alloc(&g->d, &g->w, o, be, mem) != 0 ||
        run_state_alloc(&g->s, cfg, o, g->w.prec, be, mem) != 0) {
        Err why = {0}; /* a device backend says why (no GPU, out of device memory); the CPU's has nothing */
        int said = be->take_error(&why) != ST_OK;
        gpt_free(g);
        if (said)
            return err_set(err, ST_ERR_RUNTIME, "allocating the model (L=%d C=%d V=%d B=%d T=%d) on %s: %s",
                           cfg->n_layer, cfg->n_embd, cfg->vocab, o->B, o->T, be->name, why.msg);
        return err_set(err, ST_ERR_RUNTIME, "out of memory allocating the model (L=%d C=%d V=%d B=%d T=%d)",
                       cfg->n_layer, cfg->n_embd, cfg->vocab, o->B, o->T);
    }
    return ST_OK;
}

void gpt_free(Gpt *g) {
    if (!g->be) g->be = backend_cpu(); /* a zeroed Gpt: nothing was allocated through a backend */
    GptWeights *w = &g->w;
    GptRunState *s = &g->s;
    size_t total = w->layout.total;
    if (s->mp.bf16 || s->mp.fp16) {
        size_t na, nb, fa, fb, fw;
        layout_bf16_scratch_tp(&w->cfg, s->B, s->T, s->tp, g->be->host_addressable, &na, &nb);
        layout_fp16_scratch_tp(&w->cfg, s->B, s->T, s->tp, &fa, &fb, &fw);
        g->be->free(g->mem, MEM_WORKSPACE, s->mp.a, na * sizeof(uint16_t));
        g->be->free(g->mem, MEM_WORKSPACE, s->mp.b, nb * sizeof(uint16_t));
        g->be->free(g->mem, MEM_WORKSPACE, s->mp.fa, fa * sizeof(float));
        g->be->free(g->mem, MEM_WORKSPACE, s->mp.fb, fb * sizeof(float));
        g->be->free(g->mem, MEM_WORKSPACE, s->mp.fw, fw * sizeof(float));
        g->be->free(g->mem, MEM_WORKSPACE, s->mp.wt, 2 * s->mp.pack_words * sizeof(uint32_t));
    }
    g->be->free(g->mem, MEM_ACTIVATIONS, s->acts, s->acts_floats * sizeof(float));
    g->be->free(g->mem, MEM_WORKSPACE, s->scratch, s->scratch_floats * sizeof(float));
    free(s->la);
    free(s->docpos_host);
    size_t bt = (size_t)s->B * s->T * sizeof(int32_t);
    g->be->free(g->mem, MEM_DATA, s->dev_inp, bt);
    g->be->free(g->mem, MEM_DATA, s->dev_tgt, bt);
    if (s->slots) free(s->slots[0].la);
    free(s->slots);
    g->be->free(g->mem, MEM_GRADS, g->d.grads, total * sizeof(float));
    free(g->d.g.blocks);
    g->be->free(g->mem, w->prec != GPT_FP32 ? MEM_MASTER : MEM_PARAMS, w->params, total * sizeof(float));
    g->be->free(g->mem, MEM_PARAMS, w->params_lp, total * sizeof(uint16_t));
    free(w->p.blocks);
    layout_free(&w->layout);
    memset(g, 0, sizeof *g);
}

void gpt_init_params_buf(const ParamLayout *pl, float *buf, uint64_t seed, int nt) {
    float proj_std = 0.02f / sqrtf(2.0f * pl->cfg.n_layer);
    /* muP: the hidden matrices' variance divided by the width multiplier m (their learning-rate
     * factor is 1/m too: TensorInfo.lr_mult); the embeddings and head keep N(0, 0.02). */
    float hidden = (float)(1.0 / sqrt(model_width_mult(&pl->cfg)));
    memset(buf, 0, pl->total * sizeof(float));
    for (int k = 0; k < pl->ntensors; k++) {
        const TensorInfo *t = &pl->tensors[k];
        float *w = buf + t->offset;
        const char *leaf = strrchr(t->name, '.');
        leaf = leaf ? leaf + 1 : t->name;
        if (t->ndim == 1) {
            /* LayerNorm and RMSNorm weights 1; all biases and LayerNorm biases 0. */
            if (!strcmp(leaf, "ln1w") || !strcmp(leaf, "ln2w") || !strcmp(leaf, "lnfw"))
                for (size_t i = 0; i < t->numel; i++) w[i] = 1.0f;
            continue;
        }
        /* The residual projections (GPT-2's attprojw, fcprojw; Llama's wo, wdown) scaled by 1/sqrt(2L). */
        float std = (!strcmp(leaf, "attprojw") || !strcmp(leaf, "fcprojw") || !strcmp(leaf, "wo") ||
                     !strcmp(leaf, "wdown")) ? proj_std : 0.02f;
        if (t->lr_mult != 1.0f) std *= hidden; /* the hidden matrices: the layout marks them (layout.c) */
        size_t n = (size_t)t->rows_real * t->shape[1]; /* padded wte rows stay 0 */
#pragma omp parallel for num_threads(nt) schedule(static)
        for (size_t i = 0; i < n; i++) w[i] = std * rng_normal(seed, (uint64_t)t->id, i);
    }
}

void gpt_init_params(Gpt *g, uint64_t seed) {
    ST_CHECK(g->w.params != NULL);
    if (g->be->host_addressable) {
        gpt_init_params_buf(&g->w.layout, g->w.params, seed, g->s.nt);
        return;
    }
    /* device_resident: the same values drawn on the host, then copied (a host buffer of the size) */
    size_t bytes = g->w.layout.total * sizeof(float);
    float *h = malloc(bytes);
    ST_CHECK_MSG(h != NULL, "gpt_init_params: no host memory for the parameters' staging copy");
    gpt_init_params_buf(&g->w.layout, h, seed, g->s.nt);
    g->be->from_host(g->w.params, h, bytes);
    free(h);
}

void gpt_round_lp(const Gpt *g, uint16_t *dst, const float *src, size_t n) {
    if (g->w.prec == GPT_FP16) g->be->cast_fp16(dst, src, n, g->s.nt);
    else if (g->w.prec == GPT_BF16) g->be->cast_bf16(dst, src, n, g->s.nt);
}

void gpt_sync_lp(Gpt *g) {
    if (g->w.params_lp) gpt_round_lp(g, g->w.params_lp, g->w.params, g->w.layout.total); /* none: fp32 or external */
}

void gpt_zero_grads(Gpt *g) {
    ST_CHECK(g->d.grads != NULL);
    g->be->zero(g->d.grads, g->w.layout.total * sizeof(float));
}

void gpt_overwrite_grads(Gpt *g) {
    ST_CHECK(g->d.grads != NULL);
    g->d.overwrite = 1;
}

static void hook(void (*fn)(void *, int), void *ctx, int seg) {
    if (fn) fn(ctx, seg);
}

void gpt_set_label_sampling(Gpt *g, const float *u, int32_t *labels) {
    g->s.sample.u = u;
    g->s.sample.labels = u ? labels : NULL;
}

/* Moves a GEMM failure recorded by matmul into the run state (the first error wins). Returns 1
 * if the run state holds an error. */
static int take_errors(Gpt *g) {
    Err e;
    if (g->be->take_error(&e) != ST_OK && g->s.err.status == ST_OK) g->s.err = e;
    return g->s.err.status != ST_OK;
}

/* ---- Tensor parallelism: the collectives at the edges of the parallel regions (hooks) ---- */

/* Sum over the tp group of a partial (N, C) result, leaving the rows this rank holds: the whole
 * buffer (all-reduce), or under --sp its own Nl rows at buf + row0·C (reduce-scatter). Returns
 * those rows. No-op at tp 1. */
static float *tp_reduce_rows(Gpt *g, float *buf) {
    GptRunState *s = &g->s;
    if (s->tp == 1) return buf;
    size_t nlc = (size_t)s->curNl * g->w.cfg.n_embd;
    if (s->sp) {
        g->hooks.tp_reduce_scatter(g->hooks.ctx, buf, nlc);
        return buf + (size_t)s->tp_rank * nlc;
    }
    g->hooks.tp_allreduce(g->hooks.ctx, buf, nlc, 0);
    return buf;
}

/* --sp: the whole (N, C) LayerNorm output (fp32, or bf16 in half as many floats) for a
 * column-parallel GEMM, gathered from every rank's rows (own rows at `own`). Without --sp, own. */
static const float *sp_gather_rows(Gpt *g, const float *own) {
    GptRunState *s = &g->s;
    if (!s->sp) return own;
    size_t nlc = (size_t)s->curNl * g->w.cfg.n_embd, blk = s->mp.bf16 ? nlc / 2 : nlc;
    g->be->copy(s->sp_gather + (size_t)s->tp_rank * blk, own, blk * sizeof(float));
    g->hooks.tp_allgather(g->hooks.ctx, s->sp_gather, blk);
    return s->sp_gather;
}

/* Overlapped tp collectives (issue 28, docs/parallel.md "Overlap"): at tp > 1 with the nonblocking
 * hooks set, the column-parallel layers' collectives, the row-parallel layers' forward sums (in row
 * chunks, rowpar_forward) and under --sp their output-gradient gathers (sp_rowpar_backward) run
 * while GEMMs or row-wise kernels that do not touch their buffers compute. The same arithmetic on
 * the same operands as the blocking path (GEMMs at most split by output rows, which keeps every
 * row's bits), so the results are the same bits. Not with LoRA adapters (they add into the input
 * gradient, and the row-parallel output, before its sum), a split backward (no weight GEMM here) or
 * fp16 storage (its GEMMs round both operands together). */
static int tp_overlap(const Gpt *g) {
    const GptRunState *s = &g->s;
    return s->tp > 1 && g->hooks.tp_start && !g->lora && !s->split_backward && !s->mp.fp16;
}

/* One GEMM step of an overlapped layer (what overlap_run runs beside the progress loop). */
typedef enum { JOB_FWD, JOB_DINP, JOB_DW, JOB_CALL } JobKind;
typedef struct {
    JobKind kind;
    float *out;           /* FWD: (rows, OC); DINP: dinp (N, C); DW: dw (OC, C) */
    float *dbias;         /* DINP: the bias gradient (+)= column sums of dY, or NULL */
    const float *in;      /* FWD: (rows, C); DW: the whole input (N, C); bf16 bits under bf16 */
    const float *dout;    /* DINP, DW: dY (N, OC) fp32, or NULL under bf16: s->mp.a holds it rounded */
    const float *w, *bias;/* the weight (OC, C); FWD: the bias or NULL */
    int rows, C, OC, acc;
    void (*call)(const void *arg); /* CALL: any other step (the row-parallel layers' chunks), on arg */
    const void *arg;
} Job;

static void job_run(Gpt *g, const Job *j) {
    GptRunState *s = &g->s;
    int bf = s->mp.bf16, nt = s->nt;
    switch (j->kind) {
    case JOB_FWD:
        if (bf) g->be->matmul_forward_lp(j->out, (const uint16_t *)j->in, lp(g, j->w), j->bias, j->rows, j->C, j->OC);
        else g->be->matmul_forward_p(&s->mp, j->out, j->in, j->w, lp(g, j->w), j->bias, j->rows, j->C, j->OC, nt);
        break;
    case JOB_DINP:
        if (bf) {
            if (j->dout && j->dbias) g->be->cast_bf16_colsum(s->mp.a, j->dbias, s->sums, j->dout, j->rows, j->OC, j->acc, nt);
            else if (j->dout) g->be->cast_bf16(s->mp.a, j->dout, (size_t)j->rows * j->OC, nt);
            g->be->matmul_backward_lp(j->out, NULL, s->mp.a, NULL, lp(g, j->w), j->rows, j->C, j->OC, j->acc);
        } else {
            g->be->matmul_backward_p(&s->mp, j->out, NULL, j->dbias, j->dout, NULL, j->w, lp(g, j->w), j->rows, j->C,
                                     j->OC, j->acc, nt);
        }
        break;
    case JOB_DW:
        if (bf) g->be->matmul_backward_lp(NULL, j->out, s->mp.a, (const uint16_t *)j->in, NULL, j->rows, j->C, j->OC, j->acc);
        else g->be->matmul_backward_p(&s->mp, NULL, j->out, NULL, j->dout, j->in, j->w, NULL, j->rows, j->C, j->OC,
                                      j->acc, nt);
        break;
    case JOB_CALL: j->call(j->arg); break;
    }
}

/* The overlap worker: one thread per process, made on first use, so that one thread runs a job
 * while the other progresses the collectives in flight (tp_progress every TP_POLL_US until none is
 * left or the job is done). At --threads 1 the worker runs the job and the calling thread (the one
 * that may call MPI) polls; with more kernel threads the job keeps the caller's OpenMP team and the
 * worker polls, which MPI allows where it gave MPI_THREAD_SERIALIZED (GptHooks.tp_progress_threaded):
 * the caller makes no MPI call meanwhile. Between jobs it sleeps on a condition variable. It is not
 * an OpenMP team: libgomp's idle team thread spins for its wait
 * policy's spin count after every region, and with ranks sharing cores (4 ranks of pp 2 × tp 2 on 2
 * cores) that spinning took the cores from the ranks with work: 16x slower steps (7.6 s against
 * 0.5 s for test_pp's 10 steps; OMP_WAIT_POLICY=passive alone gave 0.6 s). Its OpenMP thread count is
 * 1, so a GEMM on it takes the same single-thread path as one at --threads 1 (the same bits). */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv, cv_done; /* cv: a post or stop for the worker; cv_done: the worker ended its part */
    Gpt *g;
    const Job *job;        /* the posted job, or NULL: the worker polls */
    int posted, stop, done; /* under mu: a part is posted; the caller's job ended; the worker's part ended */
} OverlapWorker;

#define TP_POLL_US 50
static OverlapWorker ow = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, NULL,
                           0, 0, 0};
static pthread_once_t ow_once = PTHREAD_ONCE_INIT;
static int ow_ok; /* 1 when the worker runs; otherwise jobs run on the caller */

/* The polling side, with ow.mu held on entry and exit: tp_progress every TP_POLL_US (the lock
 * released around it) until nothing is in flight or the other side sets *end, signalling cv (so no
 * period is waited out). */
static void poll_until(GptHooks *h, const int *end, pthread_cond_t *cv) {
    while (!*end) {
        pthread_mutex_unlock(&ow.mu);
        int left = h->tp_progress(h->ctx);
        pthread_mutex_lock(&ow.mu);
        if (left <= 0 || *end) break;
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_nsec += TP_POLL_US * 1000L;
        if (dl.tv_nsec >= 1000000000L) dl.tv_sec++, dl.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(cv, &ow.mu, &dl);
    }
}

static void *ow_main(void *arg) {
    (void)arg;
    omp_set_num_threads(1);
    pthread_mutex_lock(&ow.mu);
    for (;;) {
        while (!ow.posted) pthread_cond_wait(&ow.cv, &ow.mu);
        ow.posted = 0;
        if (ow.job) {
            const Job *j = ow.job;
            pthread_mutex_unlock(&ow.mu);
            job_run(ow.g, j);
            pthread_mutex_lock(&ow.mu);
        } else {
            poll_until(&ow.g->hooks, &ow.stop, &ow.cv);
        }
        ow.done = 1;
        pthread_cond_signal(&ow.cv_done);
    }
    return NULL;
}

/* Started with every signal blocked: the stop signals reach core/stopsig's waiter only, and no
 * handler frame can land on the stack a oneDNN kernel moved into the heap (docs/debugging.md). */
static void ow_start(void) {
    pthread_t t;
    ow_ok = stopsig_thread_create(&t, ow_main, NULL) == 0;
    if (ow_ok) pthread_detach(t);
}

/* Runs job j while the collectives in flight progress. Open MPI moves a nonblocking collective only
 * inside an MPI call, and oneDNN's GEMM cannot be cut into pieces with calls between them without
 * changing its blocking (and so its bits: measured), so the GEMM runs whole on one thread while the
 * other calls tp_progress (the worker above: which side does what). Either way the GEMM runs with
 * the thread count the blocking path gives it: the same bits. Where MPI allows no second calling
 * thread and the rank has more than one kernel thread, the collective moves at its wait. */
static void overlap_run(Gpt *g, const Job *j) {
    GptHooks *h = &g->hooks;
    if (!h->tp_progress || (g->s.nt != 1 && !h->tp_progress_threaded)) {
        job_run(g, j);
        return;
    }
    pthread_once(&ow_once, ow_start);
    if (!ow_ok) { /* no second thread: the GEMM here, progress at the wait */
        job_run(g, j);
        return;
    }
    int here = g->s.nt != 1; /* the job on this thread's team, the worker polls */
    pthread_mutex_lock(&ow.mu);
    ow.g = g, ow.job = here ? NULL : j, ow.stop = 0, ow.done = 0, ow.posted = 1;
    pthread_cond_broadcast(&ow.cv);
    if (here) {
        pthread_mutex_unlock(&ow.mu);
        job_run(g, j);
        pthread_mutex_lock(&ow.mu);
        ow.stop = 1;
        pthread_cond_broadcast(&ow.cv);
    } else {
        poll_until(h, &ow.done, &ow.cv_done);
    }
    while (!ow.done) pthread_cond_wait(&ow.cv_done, &ow.mu); /* its writes are visible past the lock */
    pthread_mutex_unlock(&ow.mu);
}

/* --sp forward, overlapped: the whole (N, C) pre-norm output (own rows at `own`; bf16 when
 * s->mp.bf16) times the column-parallel weight w (OC, C) into out (N, OC), bias added. The all-gather
 * of the other ranks' rows is in flight while this rank's own row block is multiplied; then the
 * other row blocks (a GEMM split by output rows gives the same bits: each row's dot products are
 * unchanged; checked by test_tp overlap and bitcheck). */
static void sp_colpar_forward(Gpt *g, float *out, const float *own, const float *w, const float *bias, int C, int OC) {
    GptRunState *s = &g->s;
    GptHooks *h = &g->hooks;
    int bf = s->mp.bf16, Nl = s->curNl, t = s->tp;
    size_t nlc = (size_t)Nl * C, blk = bf ? nlc / 2 : nlc;
    g->be->copy(s->sp_gather + (size_t)s->tp_rank * blk, own, blk * sizeof(float));
    int hg = h->tp_start(h->ctx, GPT_TP_ALLGATHER, s->sp_gather, blk);
    for (int k = 0; k < t; k++) {
        int r = (s->tp_rank + k) % t; /* own block first: its rows need nothing from the others */
        Job j = {JOB_FWD, out + (size_t)r * Nl * OC, NULL, s->sp_gather + (size_t)r * blk, NULL, w, bias, Nl, C, OC, 0};
        if (k == 0) {
            overlap_run(g, &j);
            h->tp_wait(h->ctx, hg);
        } else {
            job_run(g, &j);
        }
    }
}

/* Backward of a column-parallel linear (fc, qkv) at tp > 1, overlapped (Megatron): under --sp the
 * re-gather of the pre-norm output (own rows at `own`) is in flight during the input-gradient
 * GEMM dinp (N, C) = dY·W; then the input gradient's sum over the tp group (all-reduce, or
 * reduce-scatter under --sp) is in flight during the weight-gradient GEMM dw (+)= dY^T·in. dY:
 * dout (fp32), or under bf16 with dout NULL the operand already rounded into s->mp.a (as
 * linear_backward); dbias (+)= its column sums. Returns the rows held of the summed input gradient
 * (tp_reduce_rows' result). */
static float *colpar_backward(Gpt *g, float *dinp, float *dw, float *dbias, const float *dout, const float *own,
                              const float *w, int N, int C, int OC, int acc) {
    GptRunState *s = &g->s;
    GptHooks *h = &g->hooks;
    size_t nlc = (size_t)s->curNl * C;
    const float *in = own;
    Job jd = {JOB_DINP, dinp, dbias, NULL, dout, w, NULL, N, C, OC, acc};
    if (s->sp) {
        size_t blk = s->mp.bf16 ? nlc / 2 : nlc;
        g->be->copy(s->sp_gather + (size_t)s->tp_rank * blk, own, blk * sizeof(float));
        int hg = h->tp_start(h->ctx, GPT_TP_ALLGATHER, s->sp_gather, blk);
        in = s->sp_gather;
        overlap_run(g, &jd);
        h->tp_wait(h->ctx, hg);
    } else {
        job_run(g, &jd);
    }
    int hr = h->tp_start(h->ctx, s->sp ? GPT_TP_REDUCE_SCATTER : GPT_TP_ALLREDUCE, dinp, nlc);
    Job jw = {JOB_DW, dw, NULL, in, dout, w, NULL, N, C, OC, acc};
    overlap_run(g, &jw);
    h->tp_wait(h->ctx, hr);
    return dinp + (s->sp ? (size_t)s->tp_rank * nlc : 0);
}

/* --sp backward of a row-parallel linear (fcproj: in (N, K = F/tp); attproj: K = C/tp), overlapped:
 * the output gradient's rows held (src, dropped out by d) go into dst's own block (N, C) as in
 * branch_grad, and their all-gather is in flight while the own rows' input gradient
 * dinp[own] = dY[own]·W runs (a GEMM split by output rows: the same bits, test_tp_rowsplit); after
 * the wait the other blocks' rows, then the bias and weight gradients over all N rows as the
 * blocking path computes them (linear_backward, matmul_backward_p): under bf16 dY is rounded into
 * s->mp.a (the own rows twice, the same values; the bias gradient's column sums in the blocking
 * path's one pass), the input in_lp, or in32 rounded into s->mp.b when in_lp is NULL. */
/* Rows of a linear layer's input gradient, dinp (rows, K) = dY (rows, C) · W (C, K): dY fp32 (dy), or
 * under bf16 its rounded copy dy_lp. What sp_rowpar_backward runs beside the gather. */
typedef struct {
    Gpt *g;
    float *dinp;
    const float *dy;
    const uint16_t *dy_lp;
    const float *w;
    int rows, K, C;
} DinpRows;

static void dinp_rows(const void *arg) {
    const DinpRows *r = arg;
    Gpt *g = r->g;
    if (r->dy_lp) g->be->matmul_backward_lp(r->dinp, NULL, r->dy_lp, NULL, lp(g, r->w), r->rows, r->K, r->C, 0);
    else g->be->matmul_backward_p(&g->s.mp, r->dinp, NULL, NULL, r->dy, NULL, r->w, NULL, r->rows, r->K, r->C, 0, g->s.nt);
}

static void sp_rowpar_backward(Gpt *g, float *dinp, float *dw, float *dbias, float *dst, const float *src, Dropout d,
                               const float *in32, const uint16_t *in_lp, const float *w, int K, int acc) {
    GptRunState *s = &g->s;
    GptHooks *h = &g->hooks;
    int C = g->w.cfg.n_embd, Nl = s->curNl, N = Nl * s->tp, nt = s->nt, bf = s->mp.bf16, me = s->tp_rank;
    size_t nlc = (size_t)Nl * C;
    float *own = dst + (size_t)me * nlc;
    if (d.p > 0) g->be->dropout_backward(own, src, nlc, d, nt);
    else g->be->copy(own, src, nlc * sizeof(float));
    int hg = h->tp_start(h->ctx, GPT_TP_ALLGATHER, dst, nlc);
    for (int k = 0; k < s->tp; k++) {
        int r = (me + k) % s->tp; /* own block first: it needs nothing from the others */
        DinpRows dr = {g, dinp + (size_t)r * Nl * K, dst + (size_t)r * nlc, bf ? s->mp.a + (size_t)r * nlc : NULL, w,
                       Nl, K, C};
        if (k == 0) {
            if (bf) g->be->cast_bf16(s->mp.a + (size_t)me * nlc, own, nlc, nt); /* at its place in mp.a */
            Job j = {.kind = JOB_CALL, .call = dinp_rows, .arg = &dr};
            overlap_run(g, &j);
            h->tp_wait(h->ctx, hg);
            /* The gather is in: dY rounded whole (the own rows again: the same values) with the bias
             * gradient's column sums, in the blocking path's one pass. */
            if (bf && dbias) g->be->cast_bf16_colsum(s->mp.a, dbias, s->sums, dst, N, C, acc, nt);
            else if (bf) g->be->cast_bf16(s->mp.a, dst, (size_t)N * C, nt);
            continue;
        }
        dinp_rows(&dr);
    }
    if (bf) {
        const uint16_t *inl = in_lp;
        if (!inl) g->be->cast_bf16(s->mp.b, in32, (size_t)N * K, nt), inl = s->mp.b;
        g->be->matmul_backward_lp(NULL, dw, s->mp.a, inl, NULL, N, K, C, acc);
    } else {
        g->be->matmul_backward_p(&s->mp, NULL, dw, dbias, dst, in32, w, NULL, N, K, C, acc, nt);
    }
}

/* The gradient of a row-parallel layer's output for all N rows: the rows held (src, Nl rows)
 * copied into dst's own block (after `d`'s dropout) and, under --sp, gathered. Returns dst, or
 * src when there is nothing to do (no dropout, no --sp). */
static const float *branch_grad(Gpt *g, float *dst, const float *src, Dropout d) {
    GptRunState *s = &g->s;
    size_t nlc = (size_t)s->curNl * g->w.cfg.n_embd;
    if (d.p <= 0 && !s->sp) return src;
    float *own = dst + (s->sp ? (size_t)s->tp_rank * nlc : 0);
    if (d.p > 0) g->be->dropout_backward(own, src, nlc, d, s->nt);
    else g->be->copy(own, src, nlc * sizeof(float));
    if (s->sp) g->hooks.tp_allgather(g->hooks.ctx, dst, nlc);
    return dst;
}

/* The pre-norm of the Nl rows of x: LayerNorm (w, b; saves mean, rstd) or, for Llama, RMSNorm (w;
 * saves rstd), into out (fp32) or, when out_lp is set, rounded to bf16 for the next GEMM. */
static void norm_forward(const Gpt *g, float *out, uint16_t *out_lp, float *mean, float *rstd, const float *x,
                         const float *w, const float *b) {
    const GptRunState *s = &g->s;
    int C = g->w.cfg.n_embd, Nl = s->curNl, nt = s->nt;
    float eps = g->w.cfg.norm_eps;
    if (s->dim.rms && out_lp) g->be->rmsnorm_forward_bf16(out_lp, rstd, x, w, Nl, C, eps, nt);
    else if (s->dim.rms) g->be->rmsnorm_forward(out, rstd, x, w, Nl, C, eps, nt);
    else if (out_lp) g->be->layernorm_forward_bf16(out_lp, mean, rstd, x, w, b, Nl, C, nt);
    else g->be->layernorm_forward(out, mean, rstd, x, w, b, Nl, C, nt);
}

/* res = a + drop(br), then its pre-norm as norm_forward, in one pass, over Nl rows (the rows held, or
 * a chunk of them: the pointers then point at its first row, d.offset at its first element). */
static void residual_norm_forward(const Gpt *g, int Nl, float *res, float *out, uint16_t *out_lp, float *mean,
                                  float *rstd, const float *a, const float *br, Dropout d, const float *w,
                                  const float *b) {
    const GptRunState *s = &g->s;
    int C = g->w.cfg.n_embd, nt = s->nt;
    float eps = g->w.cfg.norm_eps;
    if (s->dim.rms && out_lp) g->be->residual_rmsnorm_forward_bf16(res, out_lp, rstd, a, br, d, w, Nl, C, eps, nt);
    else if (s->dim.rms) g->be->residual_rmsnorm_forward(res, out, rstd, a, br, d, w, Nl, C, eps, nt);
    else if (out_lp) g->be->residual_layernorm_forward_bf16(res, out_lp, mean, rstd, a, br, d, w, b, Nl, C, nt);
    else g->be->residual_layernorm_forward(res, out, mean, rstd, a, br, d, w, b, Nl, C, nt);
}

/* Pre-norm backward of the rows held (LayerNorm, or RMSNorm without db). Under --sp each rank
 * has a part of the parameter gradients: they are summed over the tp group before they join dw, db.
 * With `defer` (--sp, overlapped hooks) the sum is left in flight: returns its handle, and
 * ln_grads_finish waits and adds (before the next ln_backward, which reuses s->sp_lngrad); else -1. */
static int ln_backward(Gpt *g, float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                       const float *mean, const float *rstd, int acc, int defer) {
    GptRunState *s = &g->s;
    int C = g->w.cfg.n_embd, Nl = s->curNl, np = s->dim.rms ? 1 : 2;
    if (!s->sp) {
        if (s->dim.rms) g->be->rmsnorm_backward(dinp, dw, s->sums, dout, inp, w, rstd, Nl, C, acc, s->nt);
        else g->be->layernorm_backward(dinp, dw, db, s->sums, dout, inp, w, mean, rstd, Nl, C, acc, s->nt);
        return -1;
    }
    float *pw = s->sp_lngrad, *pb = pw + C;
    if (s->dim.rms) g->be->rmsnorm_backward(dinp, pw, s->sums, dout, inp, w, rstd, Nl, C, 0, s->nt);
    else g->be->layernorm_backward(dinp, pw, pb, s->sums, dout, inp, w, mean, rstd, Nl, C, 0, s->nt);
    if (defer) return g->hooks.tp_start(g->hooks.ctx, GPT_TP_ALLREDUCE, pw, (size_t)np * C);
    g->hooks.tp_allreduce(g->hooks.ctx, pw, (size_t)np * C, 0);
    g->be->add_or_set(dw, pw, (size_t)C, acc);
    if (!s->dim.rms) g->be->add_or_set(db, pb, (size_t)C, acc);
    return -1;
}

/* The end of a deferred ln_backward (h its handle, or -1 after a blocking one: nothing to do). */
static void ln_grads_finish(Gpt *g, int defer, int h, float *dw, float *db, int acc) {
    GptRunState *s = &g->s;
    int C = g->w.cfg.n_embd;
    if (!defer) return;
    g->hooks.tp_wait(g->hooks.ctx, h);
    g->be->add_or_set(dw, s->sp_lngrad, (size_t)C, acc);
    if (!s->dim.rms) g->be->add_or_set(db, s->sp_lngrad + C, (size_t)C, acc);
}

/* Attention of the block's q|k|v (q and k already rotated for Llama). */
static void attn_forward(Gpt *g, LayerActs *a, int l, int B, int T) {
    GptRunState *s = &g->s;
    Dropout off = {0}, d = g->w.cfg.dropout > 0 ? dropout_at(g, l, DROP_ATTN) : off;
    /* GPT-2 is the case KV = NH (attention_forward's arguments, bit for bit). */
    g->be->attention_forward(a->atty, a->lse, s->att_scratch, a->qkv, s->cur_docpos, B, T, s->dim.NHl, s->dim.KVl,
                             s->dim.hs, s->att_scale, d, s->mp.bf16, s->nt);
}

/* ---- Row-parallel forward, overlapped (issue 28, docs/parallel.md "Overlap") ----
 *
 * A row-parallel layer (attention output projection, MLP down projection) gives each tp rank a
 * partial (N, C) that the tp group sums (all-reduce, or under --sp reduce-scatter) before its bias
 * and the residual. Overlapped, the rows held are cut into layout_tp_row_chunks pieces: chunk k's
 * GEMM rows, then its sum started; chunk k+1's GEMM runs while chunk k's sum is in flight; the
 * tail (bias, residual, and after the attention the second pre-norm) of chunk k runs while chunk
 * k+1's sum is. Every element gets the same GEMM dot product (a GEMM split by output rows keeps
 * each row's: test_tp overlap and bitcheck compare against the blocking path to the bit), the same
 * sum over the ranks and the same row-wise tail, so the results are the blocking path's bits.
 *
 * Under --sp chunk k is rows [r0, r1) of every rank's block of Nl rows: its GEMMs write them as tp
 * consecutive blocks of m = r1 - r0 rows at dbuf_b + tp·r0·C, so that the chunk's reduce-scatter
 * (block m·C) leaves rank r's rows [r0, r1) summed in block r. Without --sp chunk k is rows
 * [r0, r1) of the N rows, at their place in dbuf_b. */
typedef struct {
    Gpt *g;
    int l;               /* the block */
    int mlp;             /* 0: the attention projection (tail: bias, res2 = x + drop(.), ln2 of res2);
                            1: the MLP down projection (tail: bias, res3 = res2 + drop(.)) */
    const float *in;     /* the GEMM's input (N, K): fp32, or bf16 bits when in_lp */
    int in_lp;           /* 1: bf16 input (matmul_forward_lp), 0: matmul_forward_p (rounds under bf16) */
    const float *w;      /* (C, K) this rank's slice of the weight */
    int K;
    const float *x;      /* the block's input (the Nl rows held): the attention's residual */
    int k, nchunks;      /* the chunk the next step acts on, and how many */
} RowPar;

static int rowpar_start(const RowPar *rp, int k) { return layout_tp_row_start(rp->g->s.curNl, k); }

/* Chunk rp->k's GEMMs (the partial sums of its rows, see above). */
static void rowpar_gemm(const void *arg) {
    const RowPar *rp = arg;
    Gpt *g = rp->g;
    GptRunState *s = &g->s;
    int C = g->w.cfg.n_embd, Nl = s->curNl, r0 = rowpar_start(rp, rp->k), m = rowpar_start(rp, rp->k + 1) - r0;
    int nb = s->sp ? s->tp : 1;
    for (int r = 0; r < nb; r++) {
        size_t row = (size_t)r * Nl + r0; /* the input row of block r's chunk */
        float *out = s->dbuf_b + ((size_t)nb * r0 + (size_t)r * m) * C;
        if (rp->in_lp) g->be->matmul_forward_lp(out, (const uint16_t *)rp->in + row * rp->K, lp(g, rp->w), NULL, m, rp->K, C);
        else g->be->matmul_forward_p(&s->mp, out, rp->in + row * rp->K, rp->w, lp(g, rp->w), NULL, m, rp->K, C, s->nt);
    }
}

/* The summed rows of chunk k held by this rank. */
static float *rowpar_summed(const RowPar *rp, int k) {
    const GptRunState *s = &rp->g->s;
    int C = rp->g->w.cfg.n_embd, r0 = rowpar_start(rp, k), m = rowpar_start(rp, k + 1) - r0;
    return s->dbuf_b + ((size_t)(s->sp ? s->tp : 1) * r0 + (size_t)(s->sp ? s->tp_rank : 0) * m) * C;
}

/* Chunk rp->k's tail on its summed rows: bias, residual, (attention) the second pre-norm. */
static void rowpar_tail(const void *arg) {
    const RowPar *rp = arg;
    Gpt *g = rp->g;
    GptRunState *s = &g->s;
    const BlockParams *p = &g->w.p.blocks[rp->l];
    LayerActs *a = &s->la[rp->l];
    int C = g->w.cfg.n_embd, nt = s->nt, r0 = rowpar_start(rp, rp->k), m = rowpar_start(rp, rp->k + 1) - r0;
    size_t o = (size_t)r0 * C;
    float *br = rowpar_summed(rp, rp->k);
    const float *bias = rp->mlp ? p->fcprojb : p->attprojb;
    if (bias) g->be->bias_add_rows(br, bias, m, C, nt);
    Dropout d = dropout_at(g, rp->l, rp->mlp ? DROP_MLP_RES : DROP_ATTN_RES);
    d.offset += o; /* the chunk's first element in the rows held */
    if (rp->mlp) {
        g->be->residual_forward(a->res3 + o, a->res2 + o, br, (size_t)m * C, d, nt);
        return;
    }
    int bf = s->mp.bf16;
    residual_norm_forward(g, m, a->res2 + o, bf ? NULL : a->ln2 + o, bf ? a->ln2_lp + o : NULL,
                          a->ln2_mean ? a->ln2_mean + r0 : NULL, a->ln2_rstd + r0, rp->x + o, br, d, p->ln2w, p->ln2b);
}

/* The whole row-parallel layer (see above): GEMMs, sums and tails of every chunk; collectives move
 * (tp_progress) while the GEMM or tail beside them runs (overlap_run). */
static void rowpar_forward(RowPar *rp) {
    Gpt *g = rp->g;
    GptRunState *s = &g->s;
    GptHooks *h = &g->hooks;
    int C = g->w.cfg.n_embd, kind = s->sp ? GPT_TP_REDUCE_SCATTER : GPT_TP_ALLREDUCE;
    int hd[LAYOUT_TP_ROW_CHUNKS];
    rp->nchunks = layout_tp_row_chunks(s->curNl);
    for (int k = 0; k < rp->nchunks; k++) {
        rp->k = k;
        Job j = {.kind = JOB_CALL, .call = rowpar_gemm, .arg = rp};
        if (k == 0) job_run(g, &j); /* nothing in flight yet */
        else overlap_run(g, &j);
        int r0 = rowpar_start(rp, k), m = rowpar_start(rp, k + 1) - r0;
        hd[k] = h->tp_start(h->ctx, kind, s->dbuf_b + (size_t)(s->sp ? s->tp : 1) * r0 * C, (size_t)m * C);
    }
    for (int k = 0; k < rp->nchunks; k++) {
        h->tp_wait(h->ctx, hd[k]);
        rp->k = k;
        Job j = {.kind = JOB_CALL, .call = rowpar_tail, .arg = rp};
        if (k + 1 < rp->nchunks) overlap_run(g, &j); /* the later chunks' sums are in flight */
        else job_run(g, &j);
    }
}

/* Forward of block l on input x (the Nl rows held of (B, T, C)) into its LayerActs (shared
 * buffers under recompute). With tp > 1 the attention and MLP are Megatron's parallel regions:
 * a column-parallel GEMM on the whole LayerNorm output, a row-parallel GEMM whose partial sums
 * tp_reduce_rows combines before the bias and the residual (overlapped: rowpar_forward). */
static void block_forward(Gpt *g, int l, const float *x, int B, int T) {
    const ModelConfig *cfg = &g->w.cfg;
    GptRunState *s = &g->s;
    int C = cfg->n_embd, nt = s->nt, N = B * T, Nl = s->curNl, Ca = s->dim.Cl, F = s->dim.Fl, tp1 = s->tp == 1;
    const BlockParams *p = &g->w.p.blocks[l];
    LayerActs *a = &s->la[l];
    const float *rb_att = tp1 ? p->attprojb : NULL, *rb_fc = tp1 ? p->fcprojb : NULL; /* tp > 1: after the sum */
    int Q = s->dim.QKVl, H = s->dim.Hl, bf = s->mp.bf16;
    int rovl = tp_overlap(g), ovl = s->sp && rovl; /* row-parallel sums overlapped; --sp: gathers too */
    /* bf16: the norm and activation outputs are produced, stored and used as bf16 GEMM operands. */
    norm_forward(g, bf ? NULL : a->ln1, bf ? a->ln1_lp : NULL, a->ln1_mean, a->ln1_rstd, x, p->ln1w, p->ln1b);
    const float *own1 = bf ? (const float *)a->ln1_lp : a->ln1;
    if (ovl) {
        sp_colpar_forward(g, a->qkv, own1, p->qkvw, p->qkvb, C, Q);
    } else if (bf) {
        const uint16_t *in = (const uint16_t *)sp_gather_rows(g, own1);
        g->be->matmul_forward_lp(a->qkv, in, lp(g, p->qkvw), p->qkvb, N, C, Q);
    } else {
        const float *in = sp_gather_rows(g, own1);
        g->be->matmul_forward_p(&s->mp, a->qkv, in, p->qkvw, lp(g, p->qkvw), p->qkvb, N, C, Q, nt);
        lora_fwd(g, l, LORA_SITE_QKV, in, a->qkv, Q);
    }
    if (s->dim.rms)
        g->be->rope_forward(a->qkv, s->rope_cs, s->cur_docpos, B, T, s->dim.NHl, s->dim.KVl, s->dim.hs, 0, nt);
    attn_forward(g, a, l, B, T);
    if (rovl) {
        RowPar rp = {.g = g, .l = l, .mlp = 0, .in = a->atty, .in_lp = 0, .w = p->attprojw, .K = Ca, .x = x};
        rowpar_forward(&rp);
    } else {
        g->be->matmul_forward_p(&s->mp, s->dbuf_b, a->atty, p->attprojw, lp(g, p->attprojw), rb_att, N, Ca, C, nt);
        lora_fwd(g, l, LORA_SITE_O, a->atty, s->dbuf_b, C);
        float *br = tp_reduce_rows(g, s->dbuf_b);
        if (!tp1 && p->attprojb) g->be->bias_add_rows(br, p->attprojb, Nl, C, nt);
        residual_norm_forward(g, Nl, a->res2, bf ? NULL : a->ln2, bf ? a->ln2_lp : NULL, a->ln2_mean, a->ln2_rstd, x,
                              br, dropout_at(g, l, DROP_ATTN_RES), p->ln2w, p->ln2b);
    }
    const float *own2 = bf ? (const float *)a->ln2_lp : a->ln2;
    if (ovl) {
        sp_colpar_forward(g, a->fch, own2, p->fcw, p->fcb, C, H);
    } else if (bf) {
        const uint16_t *in = (const uint16_t *)sp_gather_rows(g, own2);
        g->be->matmul_forward_lp(a->fch, in, lp(g, p->fcw), p->fcb, N, C, H);
    } else {
        const float *in = sp_gather_rows(g, own2);
        g->be->matmul_forward_p(&s->mp, a->fch, in, p->fcw, lp(g, p->fcw), p->fcb, N, C, H, nt);
        lora_fwd(g, l, LORA_SITE_FC, in, a->fch, H);
    }
    if (s->dim.rms && bf) g->be->swiglu_forward_bf16(a->fchg_lp, a->fch, N, F, nt);
    else if (s->dim.rms) g->be->swiglu_forward(a->fch_gelu, a->fch, N, F, nt);
    else if (bf) g->be->gelu_forward_bf16(a->fchg_lp, a->fch, (size_t)N * F, nt);
    else g->be->gelu_forward(a->fch_gelu, a->fch, (size_t)N * F, nt);
    const float *fin = bf ? (const float *)a->fchg_lp : a->fch_gelu; /* the down projection's input */
    if (rovl) {
        RowPar rp = {.g = g, .l = l, .mlp = 1, .in = fin, .in_lp = bf, .w = p->fcprojw, .K = F, .x = x};
        rowpar_forward(&rp);
        return;
    }
    if (bf) {
        g->be->matmul_forward_lp(s->dbuf_b, a->fchg_lp, lp(g, p->fcprojw), rb_fc, N, F, C);
    } else {
        g->be->matmul_forward_p(&s->mp, s->dbuf_b, a->fch_gelu, p->fcprojw, lp(g, p->fcprojw), rb_fc, N, F, C, nt);
        lora_fwd(g, l, LORA_SITE_DOWN, a->fch_gelu, s->dbuf_b, C);
    }
    float *br = tp_reduce_rows(g, s->dbuf_b);
    if (!tp1 && p->fcprojb) g->be->bias_add_rows(br, p->fcprojb, Nl, C, nt);
    g->be->residual_forward(a->res3, a->res2, br, (size_t)Nl * C, dropout_at(g, l, DROP_MLP_RES), nt);
}

/* The embedding: wte[inp] + wpe[t], dropped out, into s->encoded (the rows held). With tp > 1 each
 * rank looks up the rows of its vocabulary (zero elsewhere; tp rank 0 adds wpe) and the ranks'
 * sums are combined before the dropout. */
static void embed_forward(Gpt *g, const int32_t *inp, int B, int T) {
    GptRunState *s = &g->s;
    int C = g->w.cfg.n_embd, nt = s->nt;
    if (s->tp == 1 && g->w.p.wpe) {
        g->be->encoder_forward(s->encoded, inp, s->cur_docpos, g->w.p.wte, g->w.p.wpe, B, T, C,
                               dropout_at(g, -1, DROP_EMBED), nt);
        return;
    }
    /* Vocabulary-parallel (and Llama, which has no wpe, at any tp). */
    g->be->encoder_forward_vp(s->dbuf_b, inp, s->cur_docpos, g->w.p.wte, s->tp_rank == 0 ? g->w.p.wpe : NULL, B, T, C,
                              s->v0, s->Vr, nt);
    float *own = tp_reduce_rows(g, s->dbuf_b);
    Dropout d = dropout_at(g, -1, DROP_EMBED);
    size_t nlc = (size_t)s->curNl * C;
    if (d.p > 0) g->be->dropout_backward(s->encoded, own, nlc, d, nt); /* the mask applied forward */
    else g->be->copy(s->encoded, own, nlc * sizeof(float));
}

/* Points the run state's current tensors (s->encoded, s->la of the chunk's blocks, the head's)
 * at slot k's, for chunk `chunk`. */
static void bind_slot(Gpt *g, int k, int chunk) {
    GptRunState *s = &g->s;
    GptSlot *sl = &s->slots[k];
    const StageBlocks *sb = &g->w.layout.stage;
    s->encoded = sl->encoded;
    for (int l = sb->first[chunk]; l < sb->last[chunk]; l++) s->la[l] = sl->la[l - sb->first[chunk]];
    s->lnf = sl->lnf, s->lnf_mean = sl->lnf_mean, s->lnf_rstd = sl->lnf_rstd, s->losses = sl->losses;
    s->dhead = sl->dhead ? sl->dhead : s->dbuf_b;
}

float *gpt_stage_input(Gpt *g, int slot) {
    ST_CHECK(slot >= 0 && slot < g->s.nslots);
    return g->s.slots[slot].encoded;
}

const float *gpt_stage_output(const Gpt *g, int slot, int chunk) {
    const StageBlocks *sb = &g->w.layout.stage;
    ST_CHECK(slot >= 0 && slot < g->s.nslots && chunk >= 0 && chunk < sb->n);
    return g->s.slots[slot].la[sb->last[chunk] - sb->first[chunk] - 1].res3;
}

const float *gpt_stage_dinput(const Gpt *g) { return g->s.dres; }

double gpt_forward(Gpt *g, const int32_t *inp, const int32_t *tgt, int B, int T, float dscale, int train,
                   uint64_t drop_counter) {
    const ParamLayout *pl = &g->w.layout;
    ST_CHECK_MSG(pl->stage.n == 1 && pl->has_embed && pl->has_head, "gpt_forward needs the whole model");
    return gpt_forward_stage(g, 0, 0, inp, tgt, B, T, dscale, train, drop_counter);
}

double gpt_forward_stage(Gpt *g, int slot, int chunk, const int32_t *inp, const int32_t *tgt, int B, int T,
                         float dscale, int train, uint64_t drop_counter) {
    ST_CHECK(B <= g->s.B && T <= g->s.T && (size_t)B * T <= (size_t)g->s.B * g->s.T);
    const ModelConfig *cfg = &g->w.cfg;
    GptRunState *s = &g->s;
    int L = cfg->n_layer, C = cfg->n_embd, nt = s->nt, N = B * T;
    const StageBlocks *sb = &g->w.layout.stage;
    ST_CHECK(slot >= 0 && slot < s->nslots && chunk >= 0 && chunk < sb->n);
    int f = sb->first[chunk], e = sb->last[chunk];
    ST_CHECK_MSG(!g->d.overwrite || s->nslots == 1, "gpt_overwrite_grads with several slots");
    ST_CHECK_MSG(s->tp == 1 || (g->hooks.tp_allreduce && g->hooks.tp_allgather && g->hooks.tp_reduce_scatter),
                 "tensor parallelism needs the tp_* hooks");
    ST_CHECK_MSG(!s->sp || N % s->tp == 0, "--sp: the micro-batch's rows must divide by tp");
    double t0 = timer_ms();
    const int32_t *host_inp = inp; /* doc_positions reads the tokens on the host */
    if (s->dev_inp) { /* device_resident: the micro-batch into backend memory */
        g->be->from_host(s->dev_inp, inp, (size_t)N * sizeof(int32_t));
        inp = s->dev_inp;
        if (tgt) {
            g->be->from_host(s->dev_tgt, tgt, (size_t)N * sizeof(int32_t));
            tgt = s->dev_tgt;
        }
    }
    bind_slot(g, slot, chunk);
    s->cur_inp = inp, s->curB = B, s->curT = T, s->cur_drop_counter = drop_counter;
    s->curNl = s->sp ? N / s->tp : N;
    s->cur_train = train != 0;
    int Nl = s->curNl;
    GptSlot *sl = &s->slots[slot];
    sl->inp = inp, sl->B = B, sl->T = T, sl->Nl = Nl, sl->train = s->cur_train, sl->chunk = chunk;
    s->cur_docpos = NULL;
    if (s->doc_mask) { /* every stage derives them from the tokens it is given */
        doc_positions(s->docpos_host, host_inp, B, T, s->doc_eot);
        g->be->from_host(sl->docpos, s->docpos_host, (size_t)B * T * sizeof(int32_t));
        s->cur_docpos = sl->docpos;
    }
    sl->drop_counter = drop_counter, sl->have_head_grads = 0;

    if (f == 0) {
        hook(g->hooks.before_forward, g->hooks.ctx, 0);
        embed_forward(g, inp, B, T);
        if (s->input_mult != 1.0f) g->be->scale_inplace(s->encoded, (size_t)Nl * C, s->input_mult, nt);
    }
    const float *x = s->encoded;
    for (int l = f; l < e; l++) {
        hook(g->hooks.before_forward, g->hooks.ctx, l + 1);
        block_forward(g, l, x, B, T);
        x = s->la[l].res3;
    }
    if (e < L) {
        s->ms_fwd += timer_ms() - t0;
        return take_errors(g) ? NAN : 0.0;
    }
    hook(g->hooks.before_forward, g->hooks.ctx, L + 1);
    norm_forward(g, s->lnf, NULL, s->lnf_mean, s->lnf_rstd, x, g->w.p.lnfw, g->w.p.lnfb);
    /* muP's logit multiplier on the head's input: logits = (s·x)·Wᵀ, so the head's weight gradient
     * reads the scaled rows and its input gradient is scaled once more in the backward. */
    if (s->logit_mult != 1.0f) g->be->scale_inplace(s->lnf, (size_t)Nl * C, s->logit_mult, nt);
    double head_fwd = 0, head_bwd = 0;
    double t1 = timer_ms();
    int acc = !(train && g->d.overwrite);
    float *dx = train ? s->dhead : NULL;
    if (s->sample.u && s->tp > 1) {
        if (s->err.status == ST_OK)
            err_set(&s->err, ST_ERR_INPUT, "sampled labels (gpt_set_label_sampling) under tensor parallelism: not implemented");
        s->sample.u = NULL;
    }
    if (s->tp == 1) {
        g->be->head_forward_backward_p(&s->mp, s->losses, dx, g->d.g.head, s->logits, s->lnf, g->w.p.head,
                                lp(g, g->w.p.head), tgt, N, C, cfg->vocab, cfg->vocab_padded, dscale, s->head_chunk, acc,
                                nt, NULL, s->sample.u ? &s->sample : NULL, &head_fwd, &head_bwd);
    } else {
        /* Vocabulary-parallel: every rank computes every row's loss from its vocabulary rows; under
         * --sp the final LayerNorm's rows are gathered first (into dbuf_c, free in the forward). */
        const float *xf = s->lnf;
        if (s->sp) {
            size_t nlc = (size_t)Nl * C;
            g->be->copy(s->dbuf_c + (size_t)s->tp_rank * nlc, s->lnf, nlc * sizeof(float));
            g->hooks.tp_allgather(g->hooks.ctx, s->dbuf_c, nlc);
            xf = s->dbuf_c;
        }
        g->be->head_forward_backward_vp(&s->mp, s->losses, dx, g->d.g.head, s->logits, s->head_stats, xf,
                                 g->w.p.head, lp(g, g->w.p.head), tgt, N, C, s->v0, s->Vr, s->dim.Vl, dscale, s->head_chunk,
                                 acc, nt, g->hooks.tp_allreduce, g->hooks.ctx, &head_fwd, &head_bwd);
    }
    double t2 = timer_ms();
    s->have_head_grads = train;
    sl->have_head_grads = train;
    /* Fixed-order sum of the per-row losses. */
    double sum = g->be->sum_ordered(s->losses, (size_t)N);
    s->ms_fwd += (t1 - t0) + (t2 - t1 - head_bwd);
    s->ms_bwd += head_bwd;
    return take_errors(g) ? NAN : sum;
}

void gpt_backward(Gpt *g) {
    const ParamLayout *pl = &g->w.layout;
    ST_CHECK_MSG(pl->stage.n == 1 && pl->has_embed && pl->has_head, "gpt_backward needs the whole model");
    gpt_backward_stage(g, 0, 0, NULL);
}

/* Under full or selective recompute, what the forward did not keep of block l (input x): the whole
 * block again, or only the cheap tensors (the two pre-norm outputs and the MLP activation). */
static void block_recompute(Gpt *g, int l, const float *x, int B, int T) {
    GptRunState *s = &g->s;
    const BlockParams *p = &g->w.p.blocks[l];
    LayerActs *a = &s->la[l];
    size_t N = (size_t)B * T;
    if (s->recompute == RECOMPUTE_FULL) {
        block_forward(g, l, x, B, T); /* dbuf_b is free: the head's dx was consumed by the final norm */
    } else if (s->recompute == RECOMPUTE_SELECTIVE) {
        int bf = s->mp.bf16;
        norm_forward(g, bf ? NULL : a->ln1, bf ? a->ln1_lp : NULL, a->ln1_mean, a->ln1_rstd, x, p->ln1w, p->ln1b);
        norm_forward(g, bf ? NULL : a->ln2, bf ? a->ln2_lp : NULL, a->ln2_mean, a->ln2_rstd, a->res2, p->ln2w, p->ln2b);
        if (s->dim.rms && bf) g->be->swiglu_forward_bf16(a->fchg_lp, a->fch, (int)N, s->dim.Fl, s->nt);
        else if (s->dim.rms) g->be->swiglu_forward(a->fch_gelu, a->fch, (int)N, s->dim.Fl, s->nt);
        else if (bf) g->be->gelu_forward_bf16(a->fchg_lp, a->fch, N * s->dim.Fl, s->nt);
        else g->be->gelu_forward(a->fch_gelu, a->fch, N * s->dim.Fl, s->nt);
    }
}

/* A linear layer's backward at the model's precision: dinp (N, C) = dY · W, and unless the
 * backward is split, dw (+)= dY^T · in; dbias (+)= column sums. dY is dout (fp32), or under bf16
 * with dout NULL the operand a fused kernel already rounded into s->mp.a (and whose bias gradient
 * it summed). in: in32 (fp32) or in_lp (bf16). With a split backward the GEMM operand dY is kept in
 * wg for gpt_weight_stage (bf16: the rounded copy, half as many floats). */
static void linear_backward(Gpt *g, float *dinp, float *dw, float *dbias, const float *dout, const float *in32,
                            const uint16_t *in_lp, const float *w, int N, int C, int OC, int acc, float *wg) {
    GptRunState *s = &g->s;
    int split = s->split_backward, nt = s->nt;
    if (s->mp.bf16) {
        if (dout && dbias) g->be->cast_bf16_colsum(s->mp.a, dbias, s->sums, dout, N, OC, acc, nt);
        else if (dout) g->be->cast_bf16(s->mp.a, dout, (size_t)N * OC, nt);
        g->be->matmul_backward_lp(dinp, split ? NULL : dw, s->mp.a, in_lp, lp(g, w), N, C, OC, acc);
        if (split) g->be->copy(wg, s->mp.a, (size_t)N * OC * sizeof(uint16_t));
    } else {
        g->be->matmul_backward_p(&s->mp, dinp, split ? NULL : dw, dbias, dout, in32, w, lp(g, w), N, C, OC, acc, nt);
        if (split) g->be->copy(wg, dout, (size_t)N * OC * sizeof(float));
    }
}

/* The MLP activation's backward from dbuf_a (the down projection's input gradient, (N, F)): under
 * bf16 rounded straight into s->mp.a with GELU's bias gradient summed (returns NULL); in fp32 the fc
 * GEMM's output gradient (N, H), which it returns. */
static const float *mlp_act_backward(Gpt *g, const LayerActs *a, float *dfcb, int N, int acc) {
    GptRunState *s = &g->s;
    int F = s->dim.Fl, nt = s->nt;
    if (s->mp.bf16) {
        if (s->dim.rms) g->be->swiglu_backward_bf16(s->mp.a, s->dbuf_a, a->fch, N, F, nt);
        else g->be->gelu_backward_bf16(s->mp.a, dfcb, s->sums, s->dbuf_a, a->fch, N, F, acc, nt);
        return NULL;
    }
    if (!s->dim.rms) {
        g->be->gelu_backward(s->dbuf_a, s->dbuf_a, a->fch, (size_t)N * F, nt);
        return s->dbuf_a;
    }
    float *dh = s->dbuf_a + (size_t)N * F; /* beside the down GEMM's input gradient it is computed from */
    g->be->swiglu_backward(dh, s->dbuf_a, a->fch, N, F, nt);
    return dh;
}

/* Block l's backward from s->dres (the gradient of its output, overwritten with its input's): the
 * MLP, its pre-norm, attention, its pre-norm. x is the block's input. */
static void block_backward(Gpt *g, int l, const float *x, int B, int T, int acc) {
    const ModelConfig *cfg = &g->w.cfg;
    GptRunState *s = &g->s;
    const BlockParams *p = &g->w.p.blocks[l];
    BlockParams *dp = &g->d.g.blocks[l];
    LayerActs *a = &s->la[l];
    int N = B * T, C = cfg->n_embd, F = s->dim.Fl, H = s->dim.Hl, Q = s->dim.QKVl, bf = s->mp.bf16;
    int ovl = tp_overlap(g); /* the column-parallel layers' collectives overlapped with GEMMs */
    Dropout off = {0};
    int spo = ovl && s->sp; /* --sp: the row-parallel layers' output-gradient gathers overlapped */
    block_recompute(g, l, x, B, T);
    const float *dbr;
    if (spo) {
        sp_rowpar_backward(g, s->dbuf_a, dp->fcprojw, dp->fcprojb, s->dbuf_c, s->dres,
                           cfg->dropout > 0 ? dropout_at(g, l, DROP_MLP_RES) : off, a->fch_gelu, a->fchg_lp,
                           p->fcprojw, F, acc);
    } else {
        dbr = branch_grad(g, s->dbuf_c, s->dres, cfg->dropout > 0 ? dropout_at(g, l, DROP_MLP_RES) : off);
        linear_backward(g, s->dbuf_a, dp->fcprojw, dp->fcprojb, dbr, a->fch_gelu, a->fchg_lp, p->fcprojw, N, F, C, acc,
                        a->wg_fcproj);
        lora_bwd(g, l, LORA_SITE_DOWN, a->fch_gelu, dbr, C, s->dbuf_a);
    }
    const float *dh = mlp_act_backward(g, a, dp->fcb, N, acc);
    const float *own = bf ? (const float *)a->ln2_lp : a->ln2, *in;
    float *dx;
    if (ovl) {
        dx = colpar_backward(g, s->dbuf_b, dp->fcw, dp->fcb, dh, own, p->fcw, N, C, H, acc);
    } else {
        in = sp_gather_rows(g, own);
        linear_backward(g, s->dbuf_b, dp->fcw, dp->fcb, dh, in, (const uint16_t *)in, p->fcw, N, C, H, acc, a->wg_fc);
        lora_bwd(g, l, LORA_SITE_FC, in, dh, H, s->dbuf_b);
        dx = tp_reduce_rows(g, s->dbuf_b);
    }
    /* --sp: the second norm's parameter-gradient sum in flight through the attention's backward. */
    int hl = ln_backward(g, s->dres, dp->ln2w, dp->ln2b, dx, a->res2, p->ln2w, a->ln2_mean, a->ln2_rstd, acc, spo);
    if (spo) {
        sp_rowpar_backward(g, s->dbuf_b, dp->attprojw, dp->attprojb, s->dbuf_c, s->dres,
                           cfg->dropout > 0 ? dropout_at(g, l, DROP_ATTN_RES) : off, a->atty, NULL, p->attprojw,
                           s->dim.Cl, acc);
    } else {
        dbr = branch_grad(g, s->dbuf_c, s->dres, cfg->dropout > 0 ? dropout_at(g, l, DROP_ATTN_RES) : off);
        g->be->matmul_backward_p(&s->mp, s->dbuf_b, s->split_backward ? NULL : dp->attprojw, dp->attprojb, dbr,
                                 a->atty, p->attprojw, lp(g, p->attprojw), N, s->dim.Cl, C, acc, s->nt);
        if (s->split_backward) g->be->copy(a->wg_attproj, dbr, (size_t)N * C * sizeof(float));
        lora_bwd(g, l, LORA_SITE_O, a->atty, dbr, C, s->dbuf_b);
    }
    Dropout da = cfg->dropout > 0 ? dropout_at(g, l, DROP_ATTN) : off;
    g->be->attention_backward(s->dbuf_a, s->att_scratch, s->dbuf_b, a->qkv, a->atty, a->lse, s->cur_docpos, B, T,
                              s->dim.NHl, s->dim.KVl, s->dim.hs, s->att_scale, da, bf, s->nt);
    if (s->dim.rms)
        g->be->rope_backward(s->dbuf_a, s->rope_cs, s->cur_docpos, B, T, s->dim.NHl, s->dim.KVl, s->dim.hs, 0, s->nt);
    if (bf) /* the bias gradient and the rounding first, as the bf16 path always did */
        dp->qkvb ? g->be->cast_bf16_colsum(s->mp.a, dp->qkvb, s->sums, s->dbuf_a, N, Q, acc, s->nt)
                 : g->be->cast_bf16(s->mp.a, s->dbuf_a, (size_t)N * Q, s->nt);
    own = bf ? (const float *)a->ln1_lp : a->ln1;
    if (ovl) {
        dx = colpar_backward(g, s->dbuf_b, dp->qkvw, dp->qkvb, bf ? NULL : s->dbuf_a, own, p->qkvw, N, C, Q, acc);
    } else {
        in = sp_gather_rows(g, own);
        linear_backward(g, s->dbuf_b, dp->qkvw, dp->qkvb, bf ? NULL : s->dbuf_a, in, (const uint16_t *)in, p->qkvw, N,
                        C, Q, acc, a->wg_qkv);
        lora_bwd(g, l, LORA_SITE_QKV, in, s->dbuf_a, Q, s->dbuf_b);
        dx = tp_reduce_rows(g, s->dbuf_b);
    }
    ln_grads_finish(g, spo, hl, dp->ln2w, dp->ln2b, acc);
    ln_backward(g, s->dres, dp->ln1w, dp->ln1b, dx, x, p->ln1w, a->ln1_mean, a->ln1_rstd, acc, 0);
}

/* The head's chunk: the final norm's backward from the head's input gradient (computed in the
 * forward) into s->dres. */
static void head_backward(Gpt *g, const float *xlast, int acc) {
    GptRunState *s = &g->s;
    int L = g->w.cfg.n_layer;
    size_t NlC = (size_t)s->curNl * g->w.cfg.n_embd;
    hook(g->hooks.before_backward, g->hooks.ctx, L + 1);
    g->be->zero(s->dres, NlC * sizeof(float));
    /* The head's input gradient: with tp > 1 each rank holds a part (its vocabulary rows' share). */
    float *dhead = tp_reduce_rows(g, s->dhead);
    if (s->logit_mult != 1.0f) g->be->scale_inplace(dhead, NlC, s->logit_mult, s->nt);
    ln_backward(g, s->dres, g->d.g.lnfw, g->d.g.lnfb, dhead, xlast, g->w.p.lnfw, s->lnf_mean, s->lnf_rstd, acc, 0);
    hook(g->hooks.grads_ready, g->hooks.ctx, L + 1);
}

/* The embedding's backward from s->dres. */
static void embed_backward(Gpt *g, int B, int T, int acc) {
    const ModelConfig *cfg = &g->w.cfg;
    GptRunState *s = &g->s;
    int C = cfg->n_embd;
    hook(g->hooks.before_backward, g->hooks.ctx, 0);
    /* wte's gradient was written by the head in the forward; wpe's has max_seq rows, of which
     * only the first T get a contribution, so overwriting starts from zeros there (a few MB). */
    if (!acc && g->d.g.wpe) g->be->zero(g->d.g.wpe, (size_t)cfg->max_seq * C * sizeof(float));
    /* An untied head did not write wte's gradient: overwriting starts from zeros (its real rows). */
    if (!acc && cfg->untied) g->be->zero(g->d.g.wte, (size_t)s->Vr * C * sizeof(float));
    if (s->input_mult != 1.0f) g->be->scale_inplace(s->dres, (size_t)s->curNl * C, s->input_mult, s->nt); /* muP */
    Dropout d = dropout_at(g, -1, DROP_EMBED), off = {0};
    if (s->tp == 1 && g->d.g.wpe) {
        g->be->encoder_backward(g->d.g.wte, g->d.g.wpe, s->dres, s->cur_inp, s->cur_docpos, B, T, C, d, s->nt);
    } else { /* every rank needs every row's gradient for its vocabulary rows (and computes wpe's whole) */
        const float *demb = branch_grad(g, s->dbuf_c, s->dres, d.p > 0 ? d : off);
        g->be->encoder_backward_vp(g->d.g.wte, g->d.g.wpe, demb, s->cur_inp, s->cur_docpos, B, T, C, s->v0, s->Vr,
                                   s->nt);
    }
    hook(g->hooks.grads_ready, g->hooks.ctx, 0);
}

void gpt_backward_stage(Gpt *g, int slot, int chunk, const float *dout) {
    GptRunState *s = &g->s;
    const StageBlocks *sb = &g->w.layout.stage;
    ST_CHECK(slot >= 0 && slot < s->nslots && chunk >= 0 && chunk < sb->n);
    GptSlot *sl = &s->slots[slot];
    ST_CHECK_MSG(sl->chunk == chunk && sl->train, "gpt_backward_stage: the slot holds no training forward of this chunk");
    int first = sb->first[chunk], last = sb->last[chunk];
    bind_slot(g, slot, chunk);
    s->cur_inp = sl->inp, s->curB = sl->B, s->curT = sl->T, s->curNl = sl->Nl;
    s->cur_docpos = s->doc_mask ? sl->docpos : NULL;
    s->cur_drop_counter = sl->drop_counter, s->cur_train = 1;
    int B = s->curB, T = s->curT;
    double t0 = timer_ms();
    int acc = !g->d.overwrite; /* 0: every parameter gradient below is written, not added */
    if (last == g->w.cfg.n_layer) {
        ST_CHECK(sl->have_head_grads && !dout);
        head_backward(g, last > first ? s->la[last - 1].res3 : s->encoded, acc);
    } else {
        ST_CHECK_MSG(dout != NULL, "gpt_backward_stage: a chunk before the head needs its output gradient");
        g->be->copy(s->dres, dout, (size_t)s->curNl * g->w.cfg.n_embd * sizeof(float));
    }
    sl->have_head_grads = 0;
    for (int l = last - 1; l >= first; l--) {
        hook(g->hooks.before_backward, g->hooks.ctx, l + 1);
        block_backward(g, l, l > first ? s->la[l - 1].res3 : s->encoded, B, T, acc);
        if (!s->split_backward) hook(g->hooks.grads_ready, g->hooks.ctx, l + 1); /* split: after the W pass */
    }
    if (first == 0 && !g->d.frozen) embed_backward(g, B, T, acc); /* frozen: no embedding gradients to compute */
    s->have_head_grads = 0, g->d.overwrite = 0;
    s->ms_bwd += timer_ms() - t0;
    take_errors(g);
}

void gpt_weight_stage(Gpt *g, int slot, int chunk) {
    GptRunState *s = &g->s;
    const StageBlocks *sb = &g->w.layout.stage;
    ST_CHECK_MSG(s->split_backward, "gpt_weight_stage: the model was built without split_backward");
    ST_CHECK(slot >= 0 && slot < s->nslots && chunk >= 0 && chunk < sb->n && s->slots[slot].chunk == chunk);
    const GptSlot *sl = &s->slots[slot];
    bind_slot(g, slot, chunk);
    int N = sl->B * sl->T, C = g->w.cfg.n_embd, Ca = s->dim.Cl, F = s->dim.Fl, Q = s->dim.QKVl, H = s->dim.Hl, nt = s->nt;
    double t0 = timer_ms();
    for (int l = sb->last[chunk] - 1; l >= sb->first[chunk]; l--) {
        const BlockParams *p = &g->w.p.blocks[l];
        BlockParams *dp = &g->d.g.blocks[l];
        const LayerActs *a = &s->la[l];
        if (s->mp.bf16) {
            g->be->matmul_backward_lp(NULL, dp->fcprojw, (const uint16_t *)a->wg_fcproj, a->fchg_lp, NULL, N, F, C, 1);
            g->be->matmul_backward_lp(NULL, dp->fcw, (const uint16_t *)a->wg_fc, a->ln2_lp, NULL, N, C, H, 1);
            g->be->matmul_backward_lp(NULL, dp->qkvw, (const uint16_t *)a->wg_qkv, a->ln1_lp, NULL, N, C, Q, 1);
        } else {
            g->be->matmul_backward_p(&s->mp, NULL, dp->fcprojw, NULL, a->wg_fcproj, a->fch_gelu, p->fcprojw, lp(g, p->fcprojw), N,
                              F, C, 1, nt);
            g->be->matmul_backward_p(&s->mp, NULL, dp->fcw, NULL, a->wg_fc, a->ln2, p->fcw, lp(g, p->fcw), N, C, H, 1, nt);
            g->be->matmul_backward_p(&s->mp, NULL, dp->qkvw, NULL, a->wg_qkv, a->ln1, p->qkvw, lp(g, p->qkvw), N, C, Q, 1, nt);
        }
        g->be->matmul_backward_p(&s->mp, NULL, dp->attprojw, NULL, a->wg_attproj, a->atty, p->attprojw, lp(g, p->attprojw), N,
                          Ca, C, 1, nt);
        hook(g->hooks.grads_ready, g->hooks.ctx, l + 1);
    }
    s->ms_bwd += timer_ms() - t0;
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
    if (g->s.tp > 1) return err_set(err, ST_ERR_INPUT, "probabilities of a tensor-parallel slice: gather the model first");
    int32_t *tgt = calloc((size_t)T, sizeof *tgt);
    if (!tgt) return err_set(err, ST_ERR_RUNTIME, "out of memory (%d targets)", T);
    const ModelConfig *c = &g->w.cfg;
    gpt_forward(g, inp, tgt, 1, T, 0.0f, 0, 0);
    const int32_t *t0 = g->s.dev_tgt ? g->s.dev_tgt : tgt; /* device_resident: the forward staged them */
    g->be->head_forward_backward(g->s.losses, NULL, NULL, g->s.logits, g->s.lnf, g->w.p.head, t0, 1, c->n_embd, c->vocab,
                          c->vocab_padded, 0.0f, g->s.head_chunk, 1, g->s.nt, probs, NULL, NULL);
    free(tgt);
    return gpt_status(g, err);
}

Status gpt_logits(Gpt *g, const int32_t *inp, int T, float *logits, Err *err) {
    if (g->s.tp > 1) return err_set(err, ST_ERR_INPUT, "logits of a tensor-parallel slice: gather the model first");
    const ModelConfig *c = &g->w.cfg;
    int C = c->n_embd, V = c->vocab, Vp = c->vocab_padded, chunk = g->s.head_chunk;
    ST_CHECK(T >= 1 && T <= g->s.T);
    int32_t *tgt = malloc((size_t)T * sizeof *tgt);
    if (!tgt) return err_set(err, ST_ERR_RUNTIME, "out of memory (%d targets)", T);
    memset(tgt, 0xff, (size_t)T * sizeof *tgt); /* every target -1: ignored */
    gpt_forward(g, inp, tgt, 1, T, 0.0f, 0, 0); /* train = 0: no dropout */
    const int32_t *tg = g->s.dev_tgt ? g->s.dev_tgt : tgt; /* device_resident: the forward staged them */
    /* The head again, chunk by chunk, keeping each chunk's raw logits (the forward's buffer only
     * holds the last chunk, and without dx the head leaves them unnormalised). */
    for (int r0 = 0; r0 < T; r0 += chunk) {
        int m = T - r0 < chunk ? T - r0 : chunk;
        g->be->head_forward_backward_p(&g->s.mp, g->s.losses + r0, NULL, NULL, g->s.logits, g->s.lnf + (size_t)r0 * C,
                                g->w.p.head, lp(g, g->w.p.head), tg + r0, m, C, V, Vp, 0.0f, chunk, 1, g->s.nt, NULL,
                                NULL, NULL, NULL);
        for (int i = 0; i < m; i++)
            g->be->to_host(logits + (size_t)(r0 + i) * V, g->s.logits + (size_t)i * Vp, (size_t)V * sizeof(float));
    }
    free(tgt);
    return gpt_status(g, err);
}
