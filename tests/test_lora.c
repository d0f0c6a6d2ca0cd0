/* test_lora.c — LoRA adapters on a frozen base (model/lora.h) against independent oracles.
 *
 * Oracles:
 *   torch   tests/fixtures/lora_{gpt2,llama}.bin from gen_lora_ref.py: a float64 PyTorch GPT-2 (one
 *           adapter on the fused c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj) and Llama (q, k, v, o,
 *           gate, up, down) with y = xWᵀ + (alpha/r)(xAᵀ)Bᵀ written from LoRA's definition. Loss and
 *           every adapter gradient within 1e-5 (relative L2 per tensor), the fixture's own float64 central
 *           differences (h = 1e-6) agreeing with its gradients within 1e-6; three AdamW steps on the
 *           adapters: losses within 1e-5, final adapters within 1e-4; merged weights W + (alpha/r)·B·A
 *           within 1e-6 of torch's; the merged model's logits equal the adapted model's within 1e-5.
 *   FD      central finite differences of the fp32 loss, LoRA dropout 0.1 (masks included), on the
 *           largest-gradient entry and a middle entry of every adapter tensor of block 0: |fd − g| within 1e-2
 *           of the tensor's largest |g| (fp32 loss, h = 1e-2).
 *   recompute  adapter gradients under --recompute selective and full bitwise those of none (dropout 0.1);
 *           control: those of other dropout masks differ.
 *   frozen  the base has no gradient buffer (d.grads NULL) and its parameters are bitwise identical
 *           (memcmp) after forward, backward and three AdamW steps of the adapters.
 *   FLOPs   the GEMM FLOPs a full-training step runs less those of the frozen step with adapters on
 *           every target (mm_count_flops, GPT-2 and Llama): exactly tokens · (layout_flops_per_token −
 *           layout_lora_flops_per_token), the MFU numerator of LoRA runs and plan. Controls: the
 *           difference must not be that of a LoRA count equal to full training's, nor of one
 *           without the adapters' own FLOPs.
 * Negative controls (each must FAIL its check): the scale alpha instead of alpha/r (torch gradients);
 * merged with B·A unscaled (merge check); FD of other dropout masks than the gradient's; a base with
 * one element perturbed by one ulp (the frozen check). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "model/gpt.h"
#include "model/layout.h"
#include "model/lora.h"
#include "model/matmul.h"
#include "optim/optim.h"
#include "testutil.h"

typedef struct {
    Fixture f;
    ModelConfig mc;
    int B, T, r, llama;
    float alpha;
    unsigned mask;
    const int32_t *inp, *tgt;
    long ntok;
} Fx;

static const FixtureEntry *need(const Fixture *f, const char *name) {
    const FixtureEntry *e = fixture_get(f, name);
    if (!e) {
        printf("fixture entry %s missing\n", name);
        exit(1);
    }
    return e;
}

static void open_fx(const char *file, Fx *x) {
    char path[1024], msg[512];
    memset(x, 0, sizeof *x);
    snprintf(path, sizeof path, "%s/tests/fixtures/%s", ST_SOURCE_DIR, file);
    if (fixture_load(&x->f, path, msg, sizeof msg) != 0) {
        printf("%s\n", msg);
        exit(1);
    }
    const int32_t *c = need(&x->f, "config")->data;
    const double *cf = need(&x->f, "config_f")->data;
    x->llama = strstr(file, "llama") != NULL;
    if (x->llama) { /* [L, NH, KV, C, F, V, maxT, B, T, untied, r]; [alpha, eps, theta] */
        x->mc = (ModelConfig){c[0], c[1], c[3], c[5], 0, c[6], 0.0f};
        x->mc.arch = ARCH_LLAMA, x->mc.n_kv_head = c[2], x->mc.ffn = c[4], x->mc.untied = c[9];
        x->mc.norm_eps = (float)cf[1], x->mc.rope_theta = (float)cf[2];
        x->B = c[7], x->T = c[8], x->r = c[10];
        x->mask = 0x7f; /* every target */
    } else { /* [L, NH, C, V, maxT, B, T, r]; [alpha] */
        x->mc = (ModelConfig){c[0], c[1], c[2], c[3], 0, c[4], 0.0f};
        x->B = c[5], x->T = c[6], x->r = c[7];
        x->mask = (1u << LORA_Q) | (1u << LORA_K) | (1u << LORA_V) | (1u << LORA_O) | (1u << LORA_UP) | (1u << LORA_DOWN);
    }
    x->alpha = (float)cf[0];
    Err err;
    if (model_config_validate(&x->mc, &err) != ST_OK) {
        printf("%s: %s\n", file, err.msg);
        exit(1);
    }
    x->inp = need(&x->f, "inputs")->data, x->tgt = need(&x->f, "targets")->data;
    for (int i = 0; i < x->B * x->T; i++) x->ntok += x->tgt[i] >= 0;
}

/* The fixture's name of target t. */
static const char *tname(const Fx *x, int t) {
    static const char *const N[LORA_NTARGETS] = {"q", "k", "v", "o", "gate", "up", "down"};
    return !x->llama && t == LORA_Q ? "c_attn" : N[t];
}

/* Copies fixture tensors prefix.lora.{l}.{t}.{A,B} into buf (ll's layout). */
static void load_adapters(const Fx *x, const LoraLayout *ll, float *buf, const char *prefix) {
    for (int l = 0; l < ll->L; l++)
        for (int k = 0; k < ll->n; k++)
            for (int b = 0; b < 2; b++) {
                const LoraAdapter *a = &ll->ad[k];
                char name[128];
                snprintf(name, sizeof name, "%slora.%d.%s.%c", prefix, l, tname(x, a->target), b ? 'B' : 'A');
                const FixtureEntry *e = need(&x->f, name);
                size_t n = (size_t)ll->cfg.rank * (b ? a->out : a->in);
                if (e->numel != n) {
                    printf("%s: %zu values, expected %zu\n", name, e->numel, n);
                    exit(1);
                }
                float *d = buf + (size_t)l * ll->block_floats + (b ? a->b_off : a->a_off);
                for (size_t i = 0; i < n; i++) d[i] = (float)((const double *)e->data)[i];
            }
}

/* A frozen model with the fixture's base and adapters; scale alpha (the fixture's unless given). */
static Recompute g_recompute = RECOMPUTE_NONE;

static void build(const Fx *x, Gpt *g, Lora *lo, float alpha, float dropout) {
    GptOptions go = gpt_default_options();
    go.B = x->B, go.T = x->T, go.frozen = 1, go.recompute = g_recompute;
    Err err;
    if (gpt_init(g, &x->mc, &go, NULL, &err) != ST_OK) {
        printf("gpt_init: %s\n", err.msg);
        exit(1);
    }
    g->s.dropout_seed = 77;
    for (int k = 0; k < g->w.layout.ntensors; k++) {
        const TensorInfo *t = &g->w.layout.tensors[k];
        const FixtureEntry *e = need(&x->f, t->name);
        size_t n = (size_t)t->rows_real * t->shape[1];
        if (e->numel != n) {
            printf("%s: %zu values, expected %zu\n", t->name, e->numel, n);
            exit(1);
        }
        for (size_t i = 0; i < n; i++) g->w.params[t->offset + i] = (float)((const double *)e->data)[i];
    }
    LoraConfig lc = {x->r, alpha, dropout, x->mask};
    LoraLayout ll;
    if (lora_layout_init(&ll, &x->mc, &lc, 1, &err) != ST_OK || lora_init(lo, &ll, (size_t)x->B * x->T, 1, NULL, &err) != ST_OK) {
        printf("lora: %s\n", err.msg);
        exit(1);
    }
    load_adapters(x, &ll, lo->params, "");
    gpt_set_lora(g, lo);
}

static double loss_grads(const Fx *x, Gpt *g, Lora *lo, uint64_t drop) {
    memset(lo->grads, 0, lo->lay.total * sizeof(float));
    double l = gpt_forward(g, x->inp, x->tgt, x->B, x->T, 1.0f / (float)x->ntok, 1, drop) / (double)x->ntok;
    gpt_backward(g);
    return l;
}

/* Worst relative L2 error over the adapter tensors of buf against fixture prefix.lora.... */
static double adapters_err(const Fx *x, const Lora *lo, const float *buf, const char *prefix) {
    const LoraLayout *ll = &lo->lay;
    float *ref = calloc(ll->total, sizeof(float));
    load_adapters(x, ll, ref, prefix);
    double worst = 0;
    for (int l = 0; l < ll->L; l++)
        for (int k = 0; k < ll->n; k++)
            for (int b = 0; b < 2; b++) {
                const LoraAdapter *a = &ll->ad[k];
                size_t o = (size_t)l * ll->block_floats + (b ? a->b_off : a->a_off), n = (size_t)ll->cfg.rank * (b ? a->out : a->in);
                double num = 0, den = 0;
                for (size_t i = 0; i < n; i++) {
                    double d = (double)buf[o + i] - ref[o + i];
                    num += d * d, den += (double)ref[o + i] * ref[o + i];
                }
                double e = den > 0 ? sqrt(num / den) : sqrt(num);
                if (!(e <= worst)) worst = e;
            }
    free(ref);
    return worst;
}

static void check_torch(const char *file) {
    Fx x;
    open_fx(file, &x);
    Gpt g;
    Lora lo;
    char nm[160];
    /* Loss and gradients. */
    build(&x, &g, &lo, x.alpha, 0.0f);
    tu_check(g.d.grads == NULL && g.d.g.blocks[0].qkvw == NULL, file, "frozen base: no gradient buffer");
    size_t nb = g.w.layout.total * sizeof(float);
    float *base0 = malloc(nb);
    memcpy(base0, g.w.params, nb);
    double loss = loss_grads(&x, &g, &lo, 0), ref = *(const double *)need(&x.f, "loss")->data;
    double le = fabs(loss - ref) / fabs(ref), ge = adapters_err(&x, &lo, lo.grads, "grad.");
    snprintf(nm, sizeof nm, "%s torch loss", file);
    tu_check(le <= 1e-5, nm, "rel=%.3g (tol 1e-5)", le);
    double fdself = *(const double *)need(&x.f, "fd_selfcheck")->data;
    snprintf(nm, sizeof nm, "%s torch adapter gradients", file);
    tu_check(ge <= 1e-5 && fdself <= 1e-6, nm, "worst rel L2=%.3g (tol 1e-5); the fixture's float64 finite differences "
             "agree with its gradients to %.3g (tol 1e-6)", ge, fdself);
    /* Three AdamW steps on the adapters (the fixture's hyperparameters, decay on A and B). */
    const double *hp = need(&x.f, "adamw_hparams")->data, *lref = need(&x.f, "adamw_losses")->data;
    OptimConfig oc = optim_default_config(OPT_ADAMW);
    oc.beta1 = (float)hp[1], oc.beta2 = (float)hp[2], oc.eps = (float)hp[3], oc.weight_decay = (float)hp[4];
    float *m = calloc(lo.lay.total, sizeof(float)), *v = calloc(lo.lay.total, sizeof(float));
    OptimRange all = {0, lo.lay.total, 1, 1.0f};
    double lworst = 0;
    for (int s = 1; s <= 3; s++) {
        double l = loss_grads(&x, &g, &lo, 0);
        double e = fabs(l - lref[s - 1]) / fabs(lref[s - 1]);
        if (!(e <= lworst)) lworst = e;
        optim_step(&oc, lo.params, lo.grads, m, v, &all, 1, s, (float)hp[0], 1.0f, 1);
    }
    double fe = adapters_err(&x, &lo, lo.params, "adamw_final.");
    snprintf(nm, sizeof nm, "%s torch AdamW on the adapters", file);
    tu_check(lworst <= 1e-5 && fe <= 1e-4, nm, "losses rel=%.3g (tol 1e-5), final adapters rel=%.3g (tol 1e-4)", lworst, fe);
    snprintf(nm, sizeof nm, "%s frozen base after 3 steps", file);
    tu_check(memcmp(base0, g.w.params, nb) == 0, nm, "bitwise equal (memcmp of %zu bytes)", nb);
    /* Negative control: a base perturbed by one ulp is seen by the same comparison. */
    float keep = g.w.params[g.w.layout.tensors[2].offset];
    g.w.params[g.w.layout.tensors[2].offset] = nextafterf(keep, 1.0f);
    snprintf(nm, sizeof nm, "%s negative control: perturbed base detected", file);
    tu_check(memcmp(base0, g.w.params, nb) != 0, nm, "one element one ulp off");
    g.w.params[g.w.layout.tensors[2].offset] = keep;
    lora_free(&lo), gpt_free(&g);

    /* Negative control: scale alpha instead of alpha / r. */
    build(&x, &g, &lo, x.alpha * (float)x.r, 0.0f);
    loss_grads(&x, &g, &lo, 0);
    double bad = adapters_err(&x, &lo, lo.grads, "grad.");
    snprintf(nm, sizeof nm, "%s negative control: scale alpha instead of alpha/r", file);
    tu_check(bad > 1e-3, nm, "worst rel L2=%.3g (must exceed 1e-3)", bad);
    lora_free(&lo), gpt_free(&g);

    /* Merge: W + s·B·A against torch's, then the merged model (no adapters) against the adapted one. */
    build(&x, &g, &lo, x.alpha, 0.0f);
    int V = x.mc.vocab, T = x.T;
    float *la = malloc(sizeof(float) * (size_t)T * V), *lm = malloc(sizeof(float) * (size_t)T * V);
    Err err;
    gpt_logits(&g, x.inp, T, la, &err);
    for (int pass = 0; pass < 2; pass++) { /* 0: the real merge; 1: negative control, B·A unscaled */
        memcpy(g.w.params, base0, nb);
        LoraLayout ll = lo.lay;
        if (pass) ll.scale = 1.0f;
        lora_merge(&ll, lo.params, &g.w.p);
        double worst = 0;
        for (int k = 0; k < g.w.layout.ntensors; k++) {
            const TensorInfo *t = &g.w.layout.tensors[k];
            snprintf(nm, sizeof nm, "merged.%s", t->name);
            const FixtureEntry *e = fixture_get(&x.f, nm);
            if (!e) continue;
            double e2 = tu_rel_err_fd(g.w.params + t->offset, e->data, e->numel);
            if (!(e2 <= worst)) worst = e2;
        }
        snprintf(nm, sizeof nm, pass ? "%s negative control: unscaled merge" : "%s merged W + (alpha/r)BA vs torch", file);
        tu_check(pass ? worst > 1e-3 : worst <= 1e-6, nm, "worst rel L2=%.3g (%s)", worst, pass ? "must exceed 1e-3" : "tol 1e-6");
    }
    memcpy(g.w.params, base0, nb);
    lora_merge(&lo.lay, lo.params, &g.w.p);
    gpt_set_lora(&g, NULL);
    gpt_logits(&g, x.inp, T, lm, &err);
    double me = tu_rel_err_f(lm, la, (size_t)T * V);
    snprintf(nm, sizeof nm, "%s merged model logits = adapted model logits", file);
    tu_check(me <= 1e-5, nm, "rel L2=%.3g (tol 1e-5)", me);
    free(la), free(lm), free(m), free(v), free(base0);
    lora_free(&lo), gpt_free(&g);
    fixture_free(&x.f);
}

/* Central differences of the fp32 loss on block 0's adapters, LoRA dropout 0.1. fd_drop: the
 * dropout counter of the finite differences (the gradient's is 5; another is the negative control).
 * Returns the worst |fd − g| / max|g| of a tensor. */
static double fd_check(const char *file, uint64_t fd_drop) {
    Fx x;
    open_fx(file, &x);
    Gpt g;
    Lora lo;
    build(&x, &g, &lo, x.alpha, 0.1f);
    loss_grads(&x, &g, &lo, 5);
    float *grad = malloc(lo.lay.total * sizeof(float));
    memcpy(grad, lo.grads, lo.lay.total * sizeof(float));
    double worst = 0, h = 1e-2;
    for (int k = 0; k < lo.lay.n; k++)
        for (int b = 0; b < 2; b++) {
            const LoraAdapter *a = &lo.lay.ad[k];
            size_t o = b ? a->b_off : a->a_off, n = (size_t)lo.lay.cfg.rank * (b ? a->out : a->in);
            double gmax = 0;
            for (size_t i = 0; i < n; i++) gmax = fmax(gmax, fabs(grad[o + i]));
            size_t big = o;
            for (size_t i = 0; i < n; i++)
                if (fabs(grad[o + i]) > fabs(grad[big])) big = o + i;
            size_t probes[2] = {big, o + n / 2}; /* the largest entry and a middle one */
            for (int q = 0; q < 2; q++) {
                size_t at = probes[q];
                float keep = lo.params[at];
                lo.params[at] = (float)(keep + h);
                double lp = gpt_forward(&g, x.inp, x.tgt, x.B, x.T, 0.0f, 1, fd_drop) / (double)x.ntok;
                lo.params[at] = (float)(keep - h);
                double lmn = gpt_forward(&g, x.inp, x.tgt, x.B, x.T, 0.0f, 1, fd_drop) / (double)x.ntok;
                lo.params[at] = keep;
                /* the steps actually taken in fp32 */
                double fd = (lp - lmn) / ((double)(float)(keep + h) - (double)(float)(keep - h));
                double e = fabs(fd - grad[at]) / (gmax > 0 ? gmax : 1);
                if (!(e <= worst)) worst = e;
            }
        }
    free(grad);
    lora_free(&lo), gpt_free(&g);
    fixture_free(&x.f);
    return worst;
}

/* Adapter gradients with LoRA dropout 0.1 under --recompute full and selective against none: bitwise
 * (the recomputed forward redraws the same masks and u). Returns 1 if all equal. */
static int recompute_equal(const char *file) {
    Fx x;
    open_fx(file, &x);
    Gpt g;
    Lora lo;
    float *ref = NULL;
    int same = 1;
    for (int rc = RECOMPUTE_NONE; rc <= RECOMPUTE_FULL; rc++) {
        g_recompute = (Recompute)rc;
        build(&x, &g, &lo, x.alpha, 0.1f);
        loss_grads(&x, &g, &lo, 3);
        if (!ref) {
            ref = malloc(lo.lay.total * sizeof(float));
            memcpy(ref, lo.grads, lo.lay.total * sizeof(float));
        } else {
            same &= memcmp(ref, lo.grads, lo.lay.total * sizeof(float)) == 0;
        }
        lora_free(&lo), gpt_free(&g);
    }
    g_recompute = RECOMPUTE_NONE;
    /* Negative control: other masks (dropout counter 4) must not compare equal. */
    build(&x, &g, &lo, x.alpha, 0.1f);
    loss_grads(&x, &g, &lo, 4);
    int control = memcmp(ref, lo.grads, lo.lay.total * sizeof(float)) != 0;
    lora_free(&lo), gpt_free(&g);
    char nm[160];
    snprintf(nm, sizeof nm, "%s negative control: other dropout masks differ", file);
    tu_check(control, nm, "memcmp of the adapter gradients");
    free(ref);
    fixture_free(&x.f);
    return same;
}

/* The GEMM FLOPs of one forward + backward (mm_count_flops) of a full-training model and of the
 * same model frozen with adapters on every target: the difference must be what the counts say
 * it is, tokens · (layout_flops_per_token − layout_lora_flops_per_token): the base's weight
 * gradients (blocks and head) the frozen model skips, less the adapters' 6 per parameter. The
 * attention's GEMMs (causal tiles, not PaLM's full squares) are the same in both and cancel. */
static long long step_flops(const ModelConfig *mc, int B, int T, int lora) {
    GptOptions go = gpt_default_options();
    go.B = B, go.T = T, go.frozen = lora;
    Gpt g;
    Lora lo;
    Err err;
    if (gpt_init(&g, mc, &go, NULL, &err) != ST_OK) {
        printf("gpt_init: %s\n", err.msg);
        exit(1);
    }
    gpt_init_params(&g, 5);
    if (lora) {
        LoraConfig lc = {4, 8.0f, 0.0f, 0};
        LoraLayout ll;
        if (lora_parse_targets("all", mc, &lc.targets, &err) != ST_OK || lora_layout_init(&ll, mc, &lc, 1, &err) != ST_OK ||
            lora_init(&lo, &ll, (size_t)B * T, 1, NULL, &err) != ST_OK) {
            printf("lora: %s\n", err.msg);
            exit(1);
        }
        lora_init_params(&lo, 9);
        gpt_set_lora(&g, &lo);
    }
    int32_t *inp = malloc(sizeof(int32_t) * B * T), *tgt = malloc(sizeof(int32_t) * B * T);
    for (int i = 0; i < B * T; i++) inp[i] = (i * 7) % mc->vocab, tgt[i] = (i * 11 + 3) % mc->vocab;
    mm_count_flops(1);
    gpt_forward(&g, inp, tgt, B, T, 1.0f / (float)(B * T), 1, 0);
    gpt_backward(&g);
    long long n = mm_count_flops(0);
    free(inp), free(tgt);
    if (lora) lora_free(&lo);
    gpt_free(&g);
    return n;
}

static void check_flops(void) {
    ModelConfig gp = {2, 4, 64, 301, 0, 32, 0.0f}, ll = gp;
    ll.arch = ARCH_LLAMA, ll.n_kv_head = 2, ll.ffn = 96, ll.untied = 1;
    Err e;
    for (int a = 0; a < 2; a++) {
        ModelConfig *mc = a ? &ll : &gp;
        if (model_config_validate(mc, &e) != ST_OK) {
            printf("config: %s\n", e.msg);
            exit(1);
        }
        LoraConfig lc = {4, 8.0f, 0.0f, 0};
        LoraLayout lay;
        lora_parse_targets("all", mc, &lc.targets, &e);
        lora_layout_init(&lay, mc, &lc, 1, &e);
        double P = (double)(lay.block_floats * lay.L);
        int B = 2, T = 32;
        double tokens = (double)B * T;
        long long full = step_flops(mc, B, T, 0), lora = step_flops(mc, B, T, 1);
        double want = tokens * (layout_flops_per_token(mc, T) - layout_lora_flops_per_token(mc, T, P));
        char nm[160];
        snprintf(nm, sizeof nm, "%s: LoRA's FLOPs per token = the GEMMs a frozen step skips (mm_count_flops)", a ? "Llama" : "GPT-2");
        tu_check(full > 0 && (double)(full - lora) == want, nm, "full %lld, LoRA %lld: difference %lld, formula %.0f", full, lora,
                 full - lora, want);
        /* controls: LoRA counted as full training (6N: nothing skipped), and without the adapters' own FLOPs */
        double as_full = 0, no_adapters = tokens * (layout_flops_per_token(mc, T) - layout_lora_flops_per_token(mc, T, 0));
        snprintf(nm, sizeof nm, "%s negative control: full training's count, and one without the adapters, differ", a ? "Llama" : "GPT-2");
        tu_check((double)(full - lora) != as_full && (double)(full - lora) != no_adapters, nm, "difference %lld, as full %.0f, "
                 "no adapters %.0f", full - lora, as_full, no_adapters);
    }
}

int main(void) {
    check_flops();
    check_torch("lora_gpt2.bin");
    check_torch("lora_llama.bin");
    for (int i = 0; i < 2; i++) {
        const char *file = i ? "lora_llama.bin" : "lora_gpt2.bin";
        char nm[160];
        double e = fd_check(file, 5);
        snprintf(nm, sizeof nm, "%s finite differences (dropout 0.1)", file);
        tu_check(e <= 1e-2, nm, "worst |fd-g|/max|g|=%.3g (tol 1e-2)", e);
        double bad = fd_check(file, 6);
        snprintf(nm, sizeof nm, "%s negative control: other dropout masks", file);
        tu_check(bad > 2e-2, nm, "worst=%.3g (must exceed 2e-2)", bad);
    }
    for (int i = 0; i < 2; i++) {
        const char *file = i ? "lora_llama.bin" : "lora_gpt2.bin";
        char nm[160];
        snprintf(nm, sizeof nm, "%s recompute selective and full = none", file);
        tu_check(recompute_equal(file), nm, "adapter gradients bitwise equal (LoRA dropout 0.1)");
    }
    return tu_exit();
}
