/* lora.c — LoRA adapters: targets, layout, allocation, forward/backward at a GEMM site, merge
 * (see lora.h). */
#include "model/lora.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "model/matmul.h"

static const char *const TARGET_NAMES[LORA_NTARGETS] = {"q", "k", "v", "o", "gate", "up", "down"};
#define QKV_BITS ((1u << LORA_Q) | (1u << LORA_K) | (1u << LORA_V))

Status lora_parse_targets(const char *s, const ModelConfig *cfg, unsigned *mask, Err *err) {
    unsigned m = 0;
    int llama = cfg->arch == ARCH_LLAMA;
    const char *p = s;
    size_t n = strlen(s);
    if (n && s[n - 1] == ',') /* an empty last name, refused as an empty first one is */
        return err_set(err, ST_ERR_INPUT, "--lora-targets: expected names from q,k,v,o,gate,up,down,attn,mlp,all "
                       "separated by commas, found '%s'", s);
    while (*p) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        char w[32];
        if (len == 0 || len >= sizeof w)
            return err_set(err, ST_ERR_INPUT, "--lora-targets: expected names from q,k,v,o,gate,up,down,attn,mlp,all "
                           "separated by commas, found '%s'", s);
        memcpy(w, p, len), w[len] = 0;
        int t = -1;
        for (int k = 0; k < LORA_NTARGETS; k++)
            if (!strcmp(w, TARGET_NAMES[k])) t = k;
        if (t >= 0) m |= 1u << t;
        else if (!strcmp(w, "attn")) m |= QKV_BITS | 1u << LORA_O;
        else if (!strcmp(w, "mlp")) m |= (llama ? 1u << LORA_GATE : 0) | 1u << LORA_UP | 1u << LORA_DOWN;
        else if (!strcmp(w, "all")) m |= QKV_BITS | 1u << LORA_O | (llama ? 1u << LORA_GATE : 0) | 1u << LORA_UP | 1u << LORA_DOWN;
        else if (!llama && (!strcmp(w, "c_attn"))) m |= QKV_BITS;
        else
            return err_set(err, ST_ERR_INPUT, "--lora-targets: unknown target '%s' (expected q, k, v, o, gate, up, "
                           "down, attn, mlp or all)", w);
        p += len + (e != NULL);
    }
    if (!m) return err_set(err, ST_ERR_INPUT, "--lora-targets: expected at least one target, found '%s'", s);
    if (!llama && (m & 1u << LORA_GATE))
        return err_set(err, ST_ERR_INPUT, "--lora-targets: gate is a Llama layer; GPT-2's MLP has up (c_fc) and down "
                       "(mlp.c_proj) only");
    if (!llama && (m & QKV_BITS) && (m & QKV_BITS) != QKV_BITS)
        return err_set(err, ST_ERR_INPUT, "--lora-targets: GPT-2 computes q, k and v in one fused c_attn layer, which "
                       "takes one adapter: expected all of q,k,v (or attn, or c_attn), found only some of them in '%s'", s);
    *mask = m;
    return ST_OK;
}

void lora_targets_string(unsigned mask, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = 0;
    for (int k = 0; k < LORA_NTARGETS; k++)
        if (mask & 1u << k) n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "%s%s", n ? "," : "", TARGET_NAMES[k]);
}

const char *lora_module_name(const ModelConfig *cfg, int target) {
    static const char *const LLAMA[LORA_NTARGETS] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
    static const char *const GPT2[LORA_NTARGETS] = {"attn.c_attn", "attn.c_attn", "attn.c_attn", "attn.c_proj", "",
                                                     "mlp.c_fc", "mlp.c_proj"};
    return cfg->arch == ARCH_LLAMA ? LLAMA[target] : GPT2[target];
}

void lora_tensor_name(const ModelConfig *cfg, int l, int target, int is_b, char *buf, size_t cap) {
    if (cfg->arch == ARCH_LLAMA)
        snprintf(buf, cap, "base_model.model.model.layers.%d.%s.%s.lora_%c.weight", l,
                 target <= LORA_O ? "self_attn" : "mlp", lora_module_name(cfg, target), is_b ? 'B' : 'A');
    else
        snprintf(buf, cap, "base_model.model.transformer.h.%d.%s.lora_%c.weight", l, lora_module_name(cfg, target),
                 is_b ? 'B' : 'A');
}

Status lora_layout_init(LoraLayout *ll, const ModelConfig *cfg, const LoraConfig *c, int shard_multiple, Err *err) {
    return lora_layout_init_tp(ll, cfg, c, shard_multiple, 1, 0, err);
}

Status lora_layout_init_tp(LoraLayout *ll, const ModelConfig *cfg, const LoraConfig *c, int shard_multiple, int tp,
                           int tp_rank, Err *err) {
    memset(ll, 0, sizeof *ll);
    if (tp > 1 && c->dropout > 0)
        return err_set(err, ST_ERR_INPUT, "--lora-dropout %g with --tp %d: expected 0 (the masks of a row-parallel layer's "
                       "column slice are not implemented)", c->dropout, tp);
    if (c->rank < 1) return err_set(err, ST_ERR_INPUT, "--lora-rank: expected a positive integer, found %d", c->rank);
    if (!(c->alpha > 0)) return err_set(err, ST_ERR_INPUT, "--lora-alpha: expected a positive number, found %g", c->alpha);
    if (!(c->dropout >= 0 && c->dropout < 1))
        return err_set(err, ST_ERR_INPUT, "--lora-dropout: expected a probability in [0, 1), found %g", c->dropout);
    if (!c->targets) return err_set(err, ST_ERR_INPUT, "--lora-targets: expected at least one target, found none");
    if (shard_multiple < 1) shard_multiple = 1;
    ll->cfg = *c, ll->model = *cfg, ll->L = cfg->n_layer;
    ll->scale = c->alpha / (float)c->rank;
    ll->tp = tp, ll->tp_rank = tp_rank;
    ModelDims d = layout_dims(cfg, tp);
    int C = cfg->n_embd, kv = d.KVl * d.hs, llama = cfg->arch == ARCH_LLAMA, r = c->rank;
    size_t off = 0;
    for (int t = 0; t < LORA_NTARGETS; t++) {
        if (!(c->targets & 1u << t)) continue;
        if (!llama && (t == LORA_K || t == LORA_V)) continue; /* inside c_attn's adapter (LORA_Q) */
        LoraAdapter a = {.target = t};
        a.groups = 1;
        switch (t) { /* this rank's q|k|v output is [q (Cl) | k (KVl·hs) | v (KVl·hs)], gate|up [gate | up] */
        case LORA_Q:
            a.site = LORA_SITE_QKV, a.col = 0, a.in = C, a.out = llama ? d.Cl : d.QKVl, a.groups = llama ? 1 : 3;
            break;
        case LORA_K: a.site = LORA_SITE_QKV, a.col = d.Cl, a.in = C, a.out = kv; break;
        case LORA_V: a.site = LORA_SITE_QKV, a.col = d.Cl + kv, a.in = C, a.out = kv; break;
        case LORA_O: a.site = LORA_SITE_O, a.col = 0, a.in = d.Cl, a.out = C, a.row_par = 1; break;
        case LORA_GATE: a.site = LORA_SITE_FC, a.col = 0, a.in = C, a.out = d.Fl; break;
        case LORA_UP: a.site = LORA_SITE_FC, a.col = llama ? d.Fl : 0, a.in = C, a.out = d.Fl; break;
        default: a.site = LORA_SITE_DOWN, a.col = 0, a.in = d.Fl, a.out = C, a.row_par = 1; break;
        }
        a.in_full = a.row_par ? a.in * tp : a.in, a.out_full = a.row_par ? a.out : a.out * tp;
        a.a_off = off, off += (size_t)r * a.in;
        a.b_off = off, off += (size_t)a.out * r;
        if (a.in > ll->max_in) ll->max_in = a.in;
        ll->ad[ll->n++] = a;
    }
    /* A rank above min(in, out) of a targeted layer adds parameters, not rank (3000000 on a 64-wide
     * model was allocated until the OOM killer ended the run); the narrowest layer bounds it. Here,
     * so that train and plan refuse alike. */
    const LoraAdapter *narrow = NULL;
    int cap = 0;
    for (int i = 0; i < ll->n; i++) {
        const LoraAdapter *a = &ll->ad[i];
        int m = a->in_full < a->out_full ? a->in_full : a->out_full;
        if (!narrow || m < cap) cap = m, narrow = a;
    }
    if (narrow && r > cap)
        return err_set(err, ST_ERR_INPUT, "--lora-rank: expected 1..%d (min(in, out) = min(%d, %d) of the targeted layer "
                       "%s: a larger rank adds parameters, not rank), found %d", cap, narrow->in_full, narrow->out_full,
                       lora_module_name(cfg, narrow->target), r);
    ll->block_floats = off;
    size_t t = off * (size_t)ll->L, m = (size_t)shard_multiple;
    ll->total = (t + m - 1) / m * m;
    return ST_OK;
}

size_t lora_act_floats(const LoraLayout *ll, size_t N) { return (size_t)ll->L * ll->n * N * ll->cfg.rank; }
size_t lora_scratch_floats(const LoraLayout *ll, size_t N) {
    return 2 * N * (size_t)ll->max_in + N * (size_t)ll->cfg.rank;
}

size_t lora_zero3_piece(const LoraLayout *ll, int dp) { return (ll->block_floats + (size_t)dp - 1) / (size_t)dp; }

double lora_input_width(const LoraLayout *ll) {
    double w = 0;
    for (int i = 0; i < ll->n; i++) w += ll->ad[i].in;
    return w * ll->L;
}

size_t lora_moment_floats(const LoraLayout *ll, int dp, int zero) {
    if (zero >= 3) return (size_t)ll->L * lora_zero3_piece(ll, dp);
    return zero >= 1 && dp > 1 ? ll->total / (size_t)dp : ll->total;
}

void lora_plan_bytes(const LoraLayout *ll, size_t N, int n_moments, int dp, int zero, size_t bytes[MEM_NCAT]) {
    /* ZeRO 3: the rank's pieces (L · piece) of the parameters and gradient sums, plus one block's
     * window (dp · piece) of each, gathered / reduce-scattered around the block */
    size_t whole = zero >= 3 ? lora_moment_floats(ll, dp, zero) + (size_t)dp * lora_zero3_piece(ll, dp) : ll->total;
    bytes[MEM_PARAMS] += whole * sizeof(float);
    bytes[MEM_GRADS] += whole * sizeof(float);
    bytes[MEM_MOMENTS] += (size_t)n_moments * lora_moment_floats(ll, dp, zero) * sizeof(float);
    bytes[MEM_ACTIVATIONS] += lora_act_floats(ll, N) * sizeof(float);
    bytes[MEM_WORKSPACE] += lora_scratch_floats(ll, N) * sizeof(float);
}

size_t lora_base_window_floats(const ParamLayout *pl) {
    size_t w = 0;
    for (int s = 1; s <= pl->cfg.n_layer; s++)
        if (pl->seg_off[s + 1] - pl->seg_off[s] > w) w = pl->seg_off[s + 1] - pl->seg_off[s];
    return w;
}

size_t lora_base_param_bytes(const ParamLayout *pl, int base_bf16) {
    if (!base_bf16) return pl->total * sizeof(float);
    int L = pl->cfg.n_layer;
    size_t blocks = pl->seg_off[L + 1] - pl->seg_off[1], rest = pl->total - blocks;
    return rest * sizeof(float) + blocks * sizeof(uint16_t) + lora_base_window_floats(pl) * sizeof(float);
}

void lora_memory_plan(const ModelConfig *cfg, const ActOptions *o, const LoraLayout *ll, int n_moments, int dp,
                      int zero, size_t bytes[MEM_NCAT]) {
    memset(bytes, 0, MEM_NCAT * sizeof bytes[0]);
    ParamLayout pl; /* the base's slice of tp rank 0 (every rank's is as large) */
    ST_CHECK(layout_init_tp(&pl, cfg, 1, o->tp > 1 ? o->tp : 1, 0) == 0);
    bytes[MEM_PARAMS] = lora_base_param_bytes(&pl, ll->cfg.base_bf16);
    layout_free(&pl);
    layout_run_bytes(cfg, o, bytes);
    lora_plan_bytes(ll, (size_t)o->B * o->T, n_moments, dp, zero, bytes);
}

static Status init_common(Lora *lo, const LoraLayout *ll, size_t N, int nt, size_t pfloats, MemStats *mem, Err *err) {
    memset(lo, 0, sizeof *lo);
    lo->lay = *ll, lo->N = N, lo->nt = nt, lo->mem = mem, lo->pfloats = pfloats;
    size_t xs = N * (size_t)ll->max_in;
    lo->params = mem_alloc(mem, MEM_PARAMS, pfloats * sizeof(float));
    lo->grads = mem_alloc(mem, MEM_GRADS, pfloats * sizeof(float));
    lo->u = mem_alloc(mem, MEM_ACTIVATIONS, lora_act_floats(ll, N) * sizeof(float));
    float *scr = mem_alloc(mem, MEM_WORKSPACE, lora_scratch_floats(ll, N) * sizeof(float));
    if (!lo->params || !lo->grads || !lo->u || !scr) {
        mem_free(mem, MEM_WORKSPACE, scr, lora_scratch_floats(ll, N) * sizeof(float));
        lora_free(lo);
        return err_set(err, ST_ERR_RUNTIME, "out of memory allocating the LoRA adapters (%zu floats)", ll->total);
    }
    lo->xd = scr, lo->dx = scr + xs, lo->du = scr + 2 * xs;
    memset(lo->params, 0, pfloats * sizeof(float));
    memset(lo->grads, 0, pfloats * sizeof(float));
    return ST_OK;
}

Status lora_init(Lora *lo, const LoraLayout *ll, size_t N, int nt, MemStats *mem, Err *err) {
    return init_common(lo, ll, N, nt, ll->total, mem, err);
}

Status lora_init_window(Lora *lo, const LoraLayout *ll, size_t N, int nt, size_t wfloats, MemStats *mem, Err *err) {
    ST_CHECK(wfloats >= ll->block_floats);
    Status st = init_common(lo, ll, N, nt, wfloats, mem, err);
    lo->window = 1;
    return st;
}

void lora_free(Lora *lo) {
    const LoraLayout *ll = &lo->lay;
    mem_free(lo->mem, MEM_PARAMS, lo->params, lo->pfloats * sizeof(float));
    mem_free(lo->mem, MEM_GRADS, lo->grads, lo->pfloats * sizeof(float));
    mem_free(lo->mem, MEM_ACTIVATIONS, lo->u, lora_act_floats(ll, lo->N) * sizeof(float));
    mem_free(lo->mem, MEM_WORKSPACE, lo->xd, lora_scratch_floats(ll, lo->N) * sizeof(float));
    memset(lo, 0, sizeof *lo);
}

void lora_init_params(Lora *lo, uint64_t seed) {
    ST_CHECK(!lo->window);
    lora_init_params_buf(&lo->lay, lo->params, seed);
}

void lora_init_params_buf(const LoraLayout *ll, float *params, uint64_t seed) {
    memset(params, 0, ll->total * sizeof(float));
    for (int l = 0; l < ll->L; l++)
        for (int k = 0; k < ll->n; k++) {
            const LoraAdapter *a = &ll->ad[k];
            float *A = params + (size_t)l * ll->block_floats + a->a_off;
            float bound = 1.0f / sqrtf((float)a->in_full);
            uint64_t stream = (uint64_t)0x4c6f5241 * 65536 + (uint64_t)l * LORA_NTARGETS + (uint64_t)a->target;
            size_t c0 = a->row_par ? (size_t)ll->tp_rank * a->in : 0; /* a row-parallel rank's columns */
            for (int j = 0; j < ll->cfg.rank; j++)
                for (int c = 0; c < a->in; c++) /* the element of the whole A (r, in_full): tp-independent */
                    A[(size_t)j * a->in + c] =
                        bound * (2.0f * rng_uniform(seed, stream, (size_t)j * a->in_full + c0 + c) - 1.0f);
        }
}

static float *saved_u(Lora *lo, int l, int k) {
    return lo->u + ((size_t)l * lo->lay.n + (size_t)k) * lo->N * lo->lay.cfg.rank;
}

/* The adapter's input: x, or drop(x) in lo->xd. */
static const float *dropped(Lora *lo, const LoraAdapter *a, const float *x, int N, Dropout d) {
    if (d.p <= 0) return x;
    d.stream |= (uint64_t)(8 + a->target);
    dropout_backward(lo->xd, x, (size_t)N * a->in, d, lo->nt); /* x · mask / (1 − p) */
    return lo->xd;
}

void lora_forward(Lora *lo, int l, int site, const float *x, float *y, int ldy, int N, Dropout d) {
    const LoraLayout *ll = &lo->lay;
    ST_CHECK((size_t)N <= lo->N);
    int r = ll->cfg.rank;
    for (int k = 0; k < ll->n; k++) {
        const LoraAdapter *a = &ll->ad[k];
        if (a->site != site) continue;
        const float *A = lo->params + (lo->window ? 0 : (size_t)l * ll->block_floats) + a->a_off, *B = A - a->a_off + a->b_off;
        const float *xd = dropped(lo, a, x, N, d);
        float *u = saved_u(lo, l, k);
        mm_sgemm(0, 1, N, r, a->in, 1.0f, xd, a->in, A, a->in, 0.0f, u, r);               /* u = xd · Aᵀ */
        mm_sgemm(0, 1, N, a->out, r, ll->scale, u, r, B, r, 1.0f, y + a->col, ldy);       /* y += s · u · Bᵀ */
        if (a->row_par && lo->tp_allreduce) lo->tp_allreduce(lo->tp_ctx, u, (size_t)N * r, 0); /* partial → whole u */
    }
}

void lora_backward(Lora *lo, int l, int site, const float *x, const float *dy, int ldy, float *dx, int N, Dropout d) {
    const LoraLayout *ll = &lo->lay;
    int r = ll->cfg.rank;
    for (int k = 0; k < ll->n; k++) {
        const LoraAdapter *a = &ll->ad[k];
        if (a->site != site) continue;
        size_t bo = lo->window ? 0 : (size_t)l * ll->block_floats; /* ZeRO 3: the window holds block l */
        const float *A = lo->params + bo + a->a_off, *B = lo->params + bo + a->b_off;
        float *dA = lo->grads + bo + a->a_off, *dB = lo->grads + bo + a->b_off;
        const float *u = saved_u(lo, l, k), *dyc = dy + a->col;
        mm_sgemm(1, 0, a->out, r, N, ll->scale, dyc, ldy, u, r, 1.0f, dB, r);             /* dB += s · dyᵀ · u */
        mm_sgemm(0, 0, N, r, a->out, ll->scale, dyc, ldy, B, r, 0.0f, lo->du, r);         /* du = s · dy · B */
        const float *xd = dropped(lo, a, x, N, d);
        if (!a->row_par && lo->tp_allreduce) { /* column-parallel at tp > 1: dx gets the partial du · A */
            mm_sgemm(0, 0, N, a->in, r, 1.0f, lo->du, r, A, a->in, 1.0f, dx, a->in);
            lo->tp_allreduce(lo->tp_ctx, lo->du, (size_t)N * r, 0);                      /* du whole */
            mm_sgemm(1, 0, r, a->in, N, 1.0f, lo->du, r, xd, a->in, 1.0f, dA, a->in);
            continue;
        }
        mm_sgemm(1, 0, r, a->in, N, 1.0f, lo->du, r, xd, a->in, 1.0f, dA, a->in);         /* dA += duᵀ · xd */
        if (d.p <= 0) {
            mm_sgemm(0, 0, N, a->in, r, 1.0f, lo->du, r, A, a->in, 1.0f, dx, a->in);     /* dx += du · A */
        } else {
            mm_sgemm(0, 0, N, a->in, r, 1.0f, lo->du, r, A, a->in, 0.0f, lo->dx, a->in);
            Dropout dd = d;
            dd.stream |= (uint64_t)(8 + a->target);
            dropout_backward(lo->dx, lo->dx, (size_t)N * a->in, dd, lo->nt);
            size_t n = (size_t)N * a->in;
            for (size_t i = 0; i < n; i++) dx[i] += lo->dx[i];
        }
    }
}

void lora_tp_copy(const LoraLayout *local, float *lbuf, const LoraLayout *full, float *fbuf, int to_full) {
    int r = local->cfg.rank, tp = local->tp, tr = local->tp_rank;
    ST_CHECK(full->tp == 1 && full->n == local->n && full->L == local->L);
    for (int l = 0; l < local->L; l++)
        for (int k = 0; k < local->n; k++) {
            const LoraAdapter *a = &local->ad[k], *f = &full->ad[k];
            float *lA = lbuf + (size_t)l * local->block_floats + a->a_off, *lB = lbuf + (size_t)l * local->block_floats + a->b_off;
            float *fA = fbuf + (size_t)l * full->block_floats + f->a_off, *fB = fbuf + (size_t)l * full->block_floats + f->b_off;
            for (int j = 0; j < r; j++) { /* A (r, in): a row-parallel rank's columns, or the whole row */
                float *ls = lA + (size_t)j * a->in, *fs = fA + (size_t)j * f->in + (a->row_par ? (size_t)tr * a->in : 0);
                if (to_full) memcpy(fs, ls, (size_t)a->in * sizeof(float));
                else memcpy(ls, fs, (size_t)a->in * sizeof(float));
            }
            /* B (out, r): a column-parallel rank's rows of each group, or every row */
            int per = a->out / a->groups, fper = f->out / f->groups;
            for (int gi = 0; gi < a->groups; gi++)
                for (int o = 0; o < per; o++) {
                    size_t fo = (size_t)gi * fper + (a->row_par ? 0 : (size_t)tr * per) + o;
                    float *ls = lB + ((size_t)gi * per + o) * r, *fs = fB + fo * r;
                    if (to_full) memcpy(fs, ls, (size_t)r * sizeof(float));
                    else memcpy(ls, fs, (size_t)r * sizeof(float));
                }
        }
    (void)tp;
}

/* Σ g[i]² over i in [b, e) ∩ [lo, hi). */
/* Σ g[i]² over i in [b, e) ∩ [lo, hi), g holding the elements from index `base` on (g[i − base]). */
static double sq_range(const float *g, size_t base, size_t b, size_t e, size_t lo, size_t hi) {
    double s = 0;
    for (size_t i = b > lo ? b : lo; i < (e < hi ? e : hi); i++) s += (double)g[i - base] * g[i - base];
    return s;
}

/* One block's adapters' squares over the block-local range [lo, hi) held by g (from index base). */
static void block_sq(const LoraLayout *ll, const float *g, size_t base, size_t o, size_t lo, size_t hi, double *s,
                     double *rp) {
    for (int k = 0; k < ll->n; k++) {
        const LoraAdapter *a = &ll->ad[k];
        size_t na = (size_t)ll->cfg.rank * a->in, nb = (size_t)ll->cfg.rank * a->out;
        double sa = sq_range(g, base, o + a->a_off, o + a->a_off + na, lo, hi);
        double sb = sq_range(g, base, o + a->b_off, o + a->b_off + nb, lo, hi);
        if (ll->tp == 1) *s += sa + sb;
        else if (a->row_par) *s += sa, *rp += sb; /* A split, B replicated */
        else *s += sb, *rp += sa;                 /* B split, A replicated */
    }
}

void lora_norm_sq_zero3(const LoraLayout *ll, const float *pieces, int dp, int rank, double *split_sq, double *repl_sq) {
    size_t pc = lora_zero3_piece(ll, dp), bf = ll->block_floats;
    double s = 0, rp = 0;
    for (int l = 0; l < ll->L; l++) {
        size_t lo = (size_t)rank * pc, hi = lo + pc < bf ? lo + pc : bf;
        if (lo < hi) block_sq(ll, pieces + (size_t)l * pc, lo, 0, lo, hi, &s, &rp);
    }
    *split_sq = s, *repl_sq = rp;
}

void lora_norm_sq(const LoraLayout *ll, const float *g, size_t lo, size_t hi, double *split_sq, double *repl_sq) {
    double s = 0, rp = 0;
    for (int l = 0; l < ll->L; l++) block_sq(ll, g, 0, (size_t)l * ll->block_floats, lo, hi, &s, &rp);
    *split_sq = s, *repl_sq = rp;
}

void lora_merge(const LoraLayout *ll, const float *adapters, ParamViews *base) {
    int r = ll->cfg.rank;
    ST_CHECK_MSG(ll->tp == 1, "lora_merge: the whole adapters (tp 1)");
    for (int l = 0; l < ll->L; l++) {
        BlockParams *bp = &base->blocks[l];
        for (int k = 0; k < ll->n; k++) {
            const LoraAdapter *a = &ll->ad[k];
            const float *A = adapters + (size_t)l * ll->block_floats + a->a_off;
            const float *B = adapters + (size_t)l * ll->block_floats + a->b_off;
            float *W = a->site == LORA_SITE_QKV ? bp->qkvw : a->site == LORA_SITE_O ? bp->attprojw
                     : a->site == LORA_SITE_FC ? bp->fcw : bp->fcprojw;
            ST_CHECK(W != NULL);
            for (int o = 0; o < a->out; o++) {
                float *row = W + (size_t)(a->col + o) * a->in;
                for (int i = 0; i < a->in; i++) {
                    double s = 0;
                    for (int j = 0; j < r; j++) s += (double)B[(size_t)o * r + j] * A[(size_t)j * a->in + i];
                    row[i] = (float)((double)row[i] + (double)ll->scale * s);
                }
            }
        }
    }
}
