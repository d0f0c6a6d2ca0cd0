/* test_mup.c — muP (issue 16): the coordinate check of Yang et al. (2022) and the multipliers'
 * gradients.
 *
 * Coordinate check. Oracle: muP's defining property, written as a closed form on the measurements:
 * the typical size of every activation stays Θ(1) as the width grows, during training. GPT-2 models
 * of widths 64, 128, 256, 512 (2 blocks, 4 heads, so the head size grows and the 1/hs attention
 * scale matters; bytes of Tiny Shakespeare), base width 64, the same AdamW learning rate at every
 * width; after each of 5 steps: mean |x| of the embedding output, each block's attention and MLP
 * outputs (the residual branches before their add) and the logits; the least-squares slope of
 * log mean|x| against log width, averaged over 2 seeds; AdamW at lr 1e-3 (at 1e-2 the small models'
 * first steps oscillate, and the slopes with them). For the logits, the mean |change since
 * initialisation| (their initial part shrinks as 1/sqrt(C) under muP by design; printed too). Checks:
 *   - muP: every slope within ±0.1 at every step 1..5 (the bound), the logits' change from
 *     step 3 (see worst_abs);
 *   - standard parameterization: the largest slope at step 5 above 0.25 (activations grow);
 *   - negative control: muP without its learning-rate factor (hidden matrices at lr, not lr/m,
 *     which the test does by handing the optimizer lr_mult 1) must leave the ±0.1 band.
 * Gradients. Oracle: central finite differences of the loss, one direction per tensor (so a wrong
 * factor on one tensor's gradient cannot hide in a sum over all of them), on a muP GPT-2 and a muP
 * Llama with m = 4, input alpha 1.7 and output alpha 0.6 (every multiplier on the path); the
 * analytic side along the float displacement actually applied, in double; each tensor within
 * 1e-3 relative + 1e-7 absolute at step 1e-2 (the truncation and the loss's float rounding, derived
 * above test_gradients). Negative controls, one per multiplier: the gradient of a model with only
 * the input multiplier, only the output multiplier, or only the 1/hs attention scale removed must
 * each miss the tolerance more than 10 times over.
 * Layout: the hidden matrices (2-D weights of segments 1..L) get lr_mult 1/m and init standard
 * deviation / sqrt(m); wte, wpe, lm_head and every 1-D tensor keep 1 (checked tensor by tensor). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"
#include "model/gpt.h"
#include "optim/optim.h"
#include "testutil.h"

/* Coordinates: the first NCHECK are checked; the raw logits (last) are printed only: under muP their
 * initial part shrinks as 1/sqrt(C) by design (the head's init is N(0, 0.02) and the logits carry
 * 1/m), so what must stay Θ(1) is their change since initialisation. */
enum { L = 2, NH = 4, V = 256, T = 32, B = 8, STEPS = 5, NW = 4, NCOORD = 3 + 2 * L, NCHECK = NCOORD - 1, SEEDS = 2 };
static const int WIDTHS[NW] = {64, 128, 256, 512};
static const char *const COORD[NCOORD] = {"embedding", "h.0 attention", "h.0 MLP", "h.1 attention", "h.1 MLP",
                                          "logits change", "logits (raw)"};

static ModelConfig cfg_of(int arch, int W, int param, float base, float ain, float aout) {
    ModelConfig c;
    memset(&c, 0, sizeof c);
    c.arch = arch, c.n_layer = L, c.n_head = NH, c.n_embd = W, c.vocab = V, c.max_seq = T;
    if (arch == ARCH_LLAMA) c.n_kv_head = NH / 2, c.untied = 1;
    if (param == PARAM_MUP) c.param = PARAM_MUP, c.mup_base_width = base, c.mup_input_alpha = ain, c.mup_output_alpha = aout;
    Err err;
    if (model_config_validate(&c, &err) != ST_OK) {
        fprintf(stderr, "test_mup: %s\n", err.msg);
        exit(1);
    }
    return c;
}

static void init_model(Gpt *g, const ModelConfig *c, MemStats *ms) {
    GptOptions o = gpt_default_options();
    o.B = B, o.T = T, o.threads = 2;
    Err err;
    if (gpt_init(g, c, &o, ms, &err) != ST_OK) {
        fprintf(stderr, "test_mup: %s\n", err.msg);
        exit(1);
    }
}

static double mean_abs(const float *x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += fabs(x[i]);
    return s / (double)n;
}

/* The batch: B rows of T + 1 bytes of Tiny Shakespeare at fixed offsets. */
static void make_batch(int32_t *inp, int32_t *tgt) {
    char *text = tu_slurp(ST_SOURCE_DIR "/data/tinyshakespeare/input.txt");
    if (!text) {
        fprintf(stderr, "test_mup: data/tinyshakespeare/input.txt: cannot read\n");
        exit(1);
    }
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            size_t at = (size_t)b * 7919 + (size_t)t;
            inp[b * T + t] = (uint8_t)text[at], tgt[b * T + t] = (uint8_t)text[at + 1];
        }
    free(text);
}

/* coords[s][k]: mean |x| of coordinate k after step s + 1. lr_fault: the optimizer gets lr_mult 1
 * for every tensor (muP's learning-rate factor left out). */
static void coord_run(int W, int param, int lr_fault, uint64_t seed, const int32_t *inp, const int32_t *tgt,
                      double coords[STEPS][NCOORD]) {
    ModelConfig c = cfg_of(ARCH_GPT2, W, param, 64.0f, 0, 0);
    Gpt g;
    MemStats ms = {0};
    init_model(&g, &c, &ms);
    gpt_init_params(&g, seed);
    const ParamLayout *pl = &g.w.layout;
    OptimRange *r = calloc((size_t)pl->ntensors, sizeof *r);
    for (int k = 0; k < pl->ntensors; k++)
        r[k] = (OptimRange){pl->tensors[k].offset, pl->tensors[k].numel, pl->tensors[k].decay,
                            lr_fault ? 1.0f : pl->tensors[k].lr_mult};
    float *m = calloc(pl->total, sizeof(float)), *v = calloc(pl->total, sizeof(float));
    float *logits = malloc(sizeof(float) * (size_t)T * V), *branch = malloc(sizeof(float) * (size_t)B * T * W);
    float *logits0 = malloc(sizeof(float) * (size_t)T * V);
    Err err;
    if (gpt_logits(&g, inp, T, logits0, &err) != ST_OK) {
        fprintf(stderr, "test_mup: %s\n", err.msg);
        exit(1);
    }
    OptimConfig oc = optim_default_config(OPT_ADAMW);
    oc.weight_decay = 0.0f;
    size_t NC = (size_t)B * T * W;
    for (int s = 0; s < STEPS; s++) {
        gpt_zero_grads(&g);
        gpt_forward(&g, inp, tgt, B, T, 1.0f / (B * T), 1, 0);
        gpt_backward(&g);
        optim_step(&oc, g.w.params, g.d.grads, m, v, r, pl->ntensors, s + 1, 1e-3f, 1.0f, 2);
        gpt_forward(&g, inp, tgt, B, T, 0.0f, 0, 0);
        coords[s][0] = mean_abs(g.s.encoded, NC);
        for (int l = 0; l < L; l++) {
            const float *x = l ? g.s.la[l - 1].res3 : g.s.encoded;
            for (size_t i = 0; i < NC; i++) branch[i] = g.s.la[l].res2[i] - x[i];
            coords[s][1 + 2 * l] = mean_abs(branch, NC);
            for (size_t i = 0; i < NC; i++) branch[i] = g.s.la[l].res3[i] - g.s.la[l].res2[i];
            coords[s][2 + 2 * l] = mean_abs(branch, NC);
        }
        if (gpt_logits(&g, inp, T, logits, &err) != ST_OK) {
            fprintf(stderr, "test_mup: %s\n", err.msg);
            exit(1);
        }
        coords[s][NCOORD - 1] = mean_abs(logits, (size_t)T * V);
        for (size_t i = 0; i < (size_t)T * V; i++) logits[i] -= logits0[i];
        coords[s][NCOORD - 2] = mean_abs(logits, (size_t)T * V);
    }
    free(r), free(m), free(v), free(logits), free(logits0), free(branch);
    gpt_free(&g);
}

/* slope[s][k] of log mean|x| against log width (least squares over the widths, seeds averaged). */
static void coord_slopes(int param, int lr_fault, const int32_t *inp, const int32_t *tgt, double slope[STEPS][NCOORD],
                         double at512[NCOORD]) {
    static double y[NW][STEPS][NCOORD];
    memset(y, 0, sizeof y);
    for (int w = 0; w < NW; w++)
        for (int sd = 0; sd < SEEDS; sd++) {
            double c[STEPS][NCOORD];
            coord_run(WIDTHS[w], param, lr_fault, 100 + (uint64_t)sd, inp, tgt, c);
            for (int s = 0; s < STEPS; s++)
                for (int k = 0; k < NCOORD; k++) y[w][s][k] += log(c[s][k]) / SEEDS;
        }
    double xm = 0, sxx = 0;
    for (int w = 0; w < NW; w++) xm += log((double)WIDTHS[w]) / NW;
    for (int w = 0; w < NW; w++) sxx += (log((double)WIDTHS[w]) - xm) * (log((double)WIDTHS[w]) - xm);
    for (int s = 0; s < STEPS; s++)
        for (int k = 0; k < NCOORD; k++) {
            double ym = 0, sxy = 0;
            for (int w = 0; w < NW; w++) ym += y[w][s][k] / NW;
            for (int w = 0; w < NW; w++) sxy += (log((double)WIDTHS[w]) - xm) * (y[w][s][k] - ym);
            slope[s][k] = sxy / sxx;
        }
    for (int k = 0; k < NCOORD; k++) at512[k] = exp(y[NW - 1][STEPS - 1][k]);
}

/* The largest |slope| of the checked coordinates: every step for the activations, steps from
 * LOGIT_STEP0 for the logits' change. At width 64 their first steps' change is dominated by the
 * random head reading the changed features, a term of size 0.02·sqrt(C)/m that vanishes with width
 * (slopes -0.26, -0.16 at steps 1, 2); the learned part, the one muP keeps Θ(1), dominates from step 3. */
enum { LOGIT_STEP0 = 2 };
static double worst_abs(double slope[STEPS][NCOORD], int *ws, int *wk) {
    double worst = 0;
    for (int s = 0; s < STEPS; s++)
        for (int k = 0; k < NCHECK; k++)
            if (k == NCHECK - 1 && s < LOGIT_STEP0) continue;
            else
            if (fabs(slope[s][k]) >= worst) worst = fabs(slope[s][k]), *ws = s, *wk = k;
    return worst;
}

static void print_slopes(const char *what, double slope[STEPS][NCOORD]) {
    printf("  %s: slope of log mean|x| vs log width, steps 1..%d\n", what, STEPS);
    for (int k = 0; k < NCOORD; k++) {
        printf("    %-14s", COORD[k]);
        for (int s = 0; s < STEPS; s++) printf(" %+.3f", slope[s][k]);
        printf("\n");
    }
}

static void test_coord_check(void) {
    int32_t inp[B * T], tgt[B * T];
    make_batch(inp, tgt);
    double mup[STEPS][NCOORD], sp[STEPS][NCOORD], bad[STEPS][NCOORD], a[NCOORD];
    coord_slopes(PARAM_MUP, 0, inp, tgt, mup, a);
    print_slopes("muP", mup);
    coord_slopes(PARAM_SP, 0, inp, tgt, sp, a);
    print_slopes("standard", sp);
    coord_slopes(PARAM_MUP, 1, inp, tgt, bad, a);
    print_slopes("muP without the 1/m learning rate (control)", bad);
    int s = 0, k = 0;
    double w = worst_abs(mup, &s, &k);
    tu_check(w <= 0.1, "mup_coord_check_flat", "largest |slope| %.3f (%s, step %d; bound 0.1)", w, COORD[k], s + 1);
    double grow = -1;
    for (int j = 0; j < NCHECK; j++)
        if (sp[STEPS - 1][j] > grow) grow = sp[STEPS - 1][j], k = j;
    tu_check(grow > 0.25, "sp_coord_check_grows", "largest slope at step %d: %.3f (%s; must exceed 0.25)", STEPS, grow,
             COORD[k]);
    w = worst_abs(bad, &s, &k);
    tu_check(w > 0.1, "mup_coord_check_negative_control", "muP with hidden matrices at lr (not lr/m): largest |slope| "
             "%.3f (%s, step %d) must exceed 0.1", w, COORD[k], s + 1);
}

/* Loss of the batch in double (the per-row losses summed in order, divided by the token count). */
static double loss_at(Gpt *g, const int32_t *inp, const int32_t *tgt) {
    return gpt_forward(g, inp, tgt, B, T, 0.0f, 0, 0) / (B * T);
}

/* The muP multipliers on the gradient's path, each removable alone from the model whose gradient is
 * taken (its run state's factor set to the standard parameterization's value; the weights and the
 * loss of the finite differences untouched): the controls of the finite-difference check. */
enum { FAULT_NONE = 0, FAULT_INPUT, FAULT_OUTPUT, FAULT_ATTN, NFAULT };
static const char *const FAULT_NAME[NFAULT] = {"none", "input multiplier (alpha_in)", "output multiplier (alpha_out/m)",
                                               "attention scale 1/hs"};

/* The finite differences' step along a unit direction (argv[1] overrides it to study the error),
 * and the tolerance of each tensor's comparison: |analytic - difference| <= FD_RTOL*|difference| +
 * FD_ATOL (see test_gradients for both numbers). */
static double g_fd_h = 1e-2;
#define FD_RTOL 1e-3
#define FD_ATOL 1e-7

/* Worst ratio, over every tensor, of the error of the analytic directional derivative against a central
 * difference of the loss along a direction confined to that tensor (pseudo-random, unit norm; the
 * padded vocabulary rows, whose gradient is exactly 0, left out). The weights are float, so
 * p0 +- h*d is rounded: the analytic side is taken along the displacement actually applied,
 * sum_i g_i*(p+_i - p-_i) accumulated in double, and compared with L(p+) - L(p-) (the forward's
 * double sum of float row losses), so the weights' rounding is not part of the error; what remains
 * is the O(h^2) truncation and the loss's float rounding, bounded by FD_RTOL and FD_ATOL: the
 * ratio is |analytic - difference| / (FD_RTOL*|difference| + FD_ATOL), <= 1 to pass. fault: the
 * gradient comes from the same weights in a model with that one multiplier removed. worst_name
 * receives the worst tensor's name and its plain relative error. */
static double fd_worst(int arch, int fault, const int32_t *inp, const int32_t *tgt, char *worst_name, size_t cap) {
    ModelConfig c = cfg_of(arch, 64, PARAM_MUP, 16.0f, 1.7f, 0.6f);
    Gpt g, gf;
    MemStats ms = {0}, ms2 = {0};
    init_model(&g, &c, &ms);
    init_model(&gf, &c, &ms2);
    gpt_init_params(&g, 5);
    size_t n = g.w.layout.total;
    /* Larger weights than the init so every multiplier changes the loss visibly. */
    for (size_t i = 0; i < n; i++) g.w.params[i] *= 3.0f;
    memcpy(gf.w.params, g.w.params, n * sizeof(float));
    if (fault == FAULT_INPUT) gf.s.input_mult = 1.0f;
    if (fault == FAULT_OUTPUT) gf.s.logit_mult = 1.0f;
    if (fault == FAULT_ATTN) gf.s.att_scale = 1.0f / sqrtf((float)(c.n_embd / c.n_head));
    gpt_zero_grads(&gf);
    gpt_forward(&gf, inp, tgt, B, T, 1.0f / (B * T), 1, 0);
    gpt_backward(&gf);
    const float *grad = gf.d.grads;
    float *p0 = malloc(n * sizeof(float)), *pp = malloc(n * sizeof(float)), *pm = malloc(n * sizeof(float));
    double *dir = malloc(n * sizeof(double));
    memcpy(p0, g.w.params, n * sizeof(float));
    double worst = 0;
    const ParamLayout *pl = &g.w.layout;
    snprintf(worst_name, cap, "(none)");
    for (int k = 0; k < pl->ntensors; k++) {
        const TensorInfo *t = &pl->tensors[k];
        size_t a = t->offset, z = t->offset + t->numel;
        double nn = 0, an = 0;
        for (size_t i = a; i < z; i++) {
            /* Padded vocabulary rows never reach the loss (their gradient is exactly 0 in any model). */
            dir[i] = grad[i] == 0.0f ? 0.0 : ((i * 2654435761u + (size_t)k * 40503u) % 2001) / 1000.0 - 1.0;
            nn += dir[i] * dir[i];
        }
        if (nn == 0) continue;
        memcpy(pp, p0, n * sizeof(float)), memcpy(pm, p0, n * sizeof(float));
        for (size_t i = a; i < z; i++) {
            double d = dir[i] / sqrt(nn);
            pp[i] = (float)(p0[i] + g_fd_h * d), pm[i] = (float)(p0[i] - g_fd_h * d);
            an += (double)grad[i] * ((double)pp[i] - (double)pm[i]);
        }
        memcpy(g.w.params, pp, n * sizeof(float));
        double lp = loss_at(&g, inp, tgt);
        memcpy(g.w.params, pm, n * sizeof(float));
        double lm = loss_at(&g, inp, tgt);
        double fd = lp - lm, e = fabs(an - fd) / (FD_RTOL * fabs(fd) + FD_ATOL);
        if (fault == FAULT_NONE && getenv("ST_MUP_FD_VERBOSE"))
            printf("  %s %-14s analytic %+.6e, difference %+.6e, rel %.2e, ratio to tol %.2f\n", model_arch_name(arch),
                   t->name, an, fd, fabs(an - fd) / fabs(fd), e);
        if (e > worst) worst = e, snprintf(worst_name, cap, "%s, rel %.1e", t->name, fabs(an - fd) / fabs(fd));
    }
    memcpy(g.w.params, p0, n * sizeof(float));
    free(p0), free(pp), free(pm), free(dir);
    gpt_free(&g), gpt_free(&gf);
    return worst;
}

/* Tolerance, from the step. Along a unit direction the loss difference is 2h*D (D the directional
 * derivative; per tensor here |D| runs from ~2e-5 to ~5e-2). Two errors remain:
 *   - truncation, h^2/6 times the third directional derivative, relative to D: the tensors with
 *     large D, where rounding is negligible, measure 2e-6..2e-5 at h = 1e-2, so FD_RTOL = 1e-3
 *     bounds it with a 50x margin;
 *   - the loss's float rounding: the mean of 256 float row losses of ~5.5 is off by a fraction of a
 *     float ulp of 5.5 (4.8e-7) once the rows' errors average (at most 5e-8 measured per difference,
 *     the same absolute size at h = 1e-2 and 1e-3), so FD_ATOL = 1e-7 for the two evaluations.
 * A smaller step only makes the rounding term larger relative to 2h*D (at h = 1e-3 the smallest D
 * reach 3e-1 relative error): with a float forward, h = 1e-2 is the step whose total error is
 * smallest. Each control (one multiplier removed) must exceed the tolerance 10 times over. */
static void test_gradients(void) {
    int32_t inp[B * T], tgt[B * T];
    make_batch(inp, tgt);
    for (int arch = ARCH_GPT2; arch <= ARCH_LLAMA; arch++) {
        char name[128], wn[64];
        double e = fd_worst(arch, FAULT_NONE, inp, tgt, wn, sizeof wn);
        snprintf(name, sizeof name, "mup_%s_gradient_finite_differences", model_arch_name(arch));
        tu_check(e <= 1, name, "every tensor's own direction within %g*|difference| + %g: worst error/tol %.2f (%s; h %g; "
                 "m 4, alphas 1.7 and 0.6)", FD_RTOL, FD_ATOL, e, wn, g_fd_h);
        for (int f = FAULT_INPUT; f < NFAULT; f++) {
            e = fd_worst(arch, f, inp, tgt, wn, sizeof wn);
            snprintf(name, sizeof name, "mup_%s_gradient_negative_control: without the %s", model_arch_name(arch),
                     FAULT_NAME[f]);
            tu_check(e > 10, name, "that gradient against muP's loss: worst error/tol %.1f (%s) must exceed 10", e, wn);
        }
    }
}

/* lr_mult and the init's standard deviation per tensor: hidden matrices 1/m and 1/sqrt(m). */
static void test_layout(void) {
    ModelConfig c = cfg_of(ARCH_LLAMA, 256, PARAM_MUP, 64.0f, 0, 0), cs = cfg_of(ARCH_LLAMA, 256, PARAM_SP, 0, 0, 0);
    Gpt g, gs;
    MemStats ms = {0}, ms2 = {0};
    init_model(&g, &c, &ms);
    init_model(&gs, &cs, &ms2);
    gpt_init_params(&g, 3);
    gpt_init_params(&gs, 3);
    int bad = 0;
    const ParamLayout *pl = &g.w.layout;
    for (int k = 0; k < pl->ntensors; k++) {
        const TensorInfo *t = &pl->tensors[k];
        int hidden = t->ndim == 2 && t->segment >= 1 && t->segment <= L;
        double want = hidden ? 0.25 : 1.0, rs = 0, rn = 0;
        for (size_t i = 0; i < t->numel; i++) rs += fabs(g.w.params[t->offset + i]), rn += fabs(gs.w.params[t->offset + i]);
        double ratio = rn > 0 ? rs / rn : 1.0, want_std = hidden ? 0.5 : 1.0;
        if (t->lr_mult != (float)want || fabs(ratio - want_std) > 1e-5 || gs.w.layout.tensors[k].lr_mult != 1.0f) {
            printf("  %s: lr_mult %g (want %g), init size ratio %.6f (want %g)\n", t->name, t->lr_mult, want, ratio,
                   want_std);
            bad++;
        }
    }
    tu_check(bad == 0, "mup_layout_lr_and_init", "%d of %d tensors off (m = 4: hidden matrices lr x 0.25, std x 0.5; "
             "the rest x 1)", bad, pl->ntensors);
    gpt_free(&g), gpt_free(&gs);
}

int main(int argc, char **argv) {
    if (argc > 1) g_fd_h = atof(argv[1]); /* another step, to study the error (the test uses 1e-3) */
    test_layout();
    test_gradients();
    test_coord_check();
    return tu_exit();
}
