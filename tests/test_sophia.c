/* test_sophia.c — Sophia-G (issue 17): its update and Hessian EMA against a float64 reference, and
 * the sampled-label head its Gauss-Newton-Bartlett estimator reads.
 *
 *   step      12 steps of optim_step + optim_hess_update (estimates at steps 1, 4, 7, 10: k = 3) on
 *             24 parameters in two ranges (decayed, not decayed; lr_mult 1 and 0.5), with changing
 *             gradients and changing Hessian-pass gradients, against the recurrence written here
 *             in double: h ← β2·h + (1−β2)·B·ĝ² when due; m ← β1·m + (1−β1)·g·s;
 *             p ← p − lr·wd·p − lr·clip(m / max(γ·h, ε), 1). Parameters and h within 2e-6
 *             (relative to max(1, |ref|)). Both sides of the clip are exercised (counted). Negative
 *             controls: the same reference without the clip, with h replaced instead of averaged,
 *             with the estimate every step, without the B factor, with Adam's bias correction on m,
 *             and with L2-coupled decay must each differ by more than the tolerance.
 *   labels    the fused head in sampling mode on 4096 random rows (V 37 of 40 padded): every label
 *             equals the inverse CDF of the softmax computed here in double at the same u (a row
 *             whose u lies within 1e-5 of a CDF step may go either way: counted, must be rare);
 *             masked rows get label −1, loss 0 and a zero input gradient. Negative control: the
 *             labels of u + 0.5 (mod 1) must mostly differ.
 *   gradient  the sampled pass's dx and dwte bit-identical to a plain pass with targets = the drawn
 *             labels, losses within 2e-6.
 *   chi2      20000 copies of one row with independent u: the label counts against the double
 *             softmax, chi-square (36 degrees of freedom) below 90 (p ≈ 1e-6). Negative control: u²
 *             instead of u (a skewed draw) must exceed it.
 *   model     gpt_set_label_sampling through a whole GPT-2 (2 layers) forward and backward: every
 *             parameter gradient bit-identical to the ordinary pass with the drawn labels as targets. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "model/gpt.h"
#include "model/kernels.h"
#include "optim/optim.h"
#include "testutil.h"

/* ------------------------------------------------------------------ the update and the EMA */

enum { NE = 24, NSTEPS = 12, K = 3 };
#define TOL 2e-6
#define BTOK 64.0   /* the estimate's token count B */
#define GSCALE 0.5  /* the clip factor applied to the step's gradient */

typedef enum { R_EXACT, R_NO_CLIP, R_REPLACE, R_EVERY_STEP, R_NO_B, R_BIAS_CORRECTED, R_L2, R_COUNT } Ref;
static const char *const REF_NAME[R_COUNT] = {"exact", "no clip", "h replaced, not averaged",
                                              "estimate every step", "no B factor", "bias-corrected m",
                                              "L2-coupled decay"};

static double grad_at(int t, int i) { return (0.1 + 0.9 * ((i * 7) % 10) / 9.0) * sin(0.9 * t + 0.4 * i + 0.3); }
static double hgrad_at(int t, int i) { return 0.05 * pow(10.0, ((i * 3) % 5) / 2.0) * cos(0.7 * t + 0.5 * i); }
static double lr_at(int t) { return 1e-2 * (1.0 + 0.05 * t); }
static double p0(int i) { return (i % 2 ? -1.0 : 1.0) * (0.4 + 0.03 * i); }
static int decays(int i) { return i < NE / 2; }
static double lrm(int i) { return i < NE / 2 ? 1.0 : 0.5; }

/* p[t][i] and h[t][i] after step t+1 under the reference variant; *clipped and *free count the
 * elements on each side of the clip (exact variant). */
static void reference(const OptimConfig *c, Ref v, double P[NSTEPS][NE], double H[NSTEPS][NE], int *clipped,
                      int *unclipped) {
    double b1 = c->beta1, b2 = c->beta2, gam = c->sophia_gamma, eps = c->eps;
    for (int i = 0; i < NE; i++) {
        double p = p0(i), m = 0, h = 0, wd = decays(i) ? c->weight_decay : 0.0;
        for (int t = 1; t <= NSTEPS; t++) {
            if ((t - 1) % K == 0 || v == R_EVERY_STEP) {
                double gh = hgrad_at(t, i), est = (v == R_NO_B ? 1.0 : BTOK) * gh * gh;
                h = v == R_REPLACE ? est : b2 * h + (1 - b2) * est;
            }
            double g = grad_at(t, i) * GSCALE, lr = lr_at(t) * lrm(i);
            if (v == R_L2) g += wd * p;
            m = b1 * m + (1 - b1) * g;
            double mm = v == R_BIAS_CORRECTED ? m / (1 - pow(b1, t)) : m;
            double den = gam * h > eps ? gam * h : eps, u = mm / den;
            if (fabs(u) > 1) ++*clipped;
            else ++*unclipped;
            if (v != R_NO_CLIP) u = u > 1 ? 1 : u < -1 ? -1 : u;
            if (v != R_L2) p -= lr * wd * p;
            p -= lr * u;
            P[t - 1][i] = p, H[t - 1][i] = h;
        }
    }
}

static double maxdiff(const float got[NSTEPS][NE], const double ref[NSTEPS][NE]) {
    double md = 0;
    for (int t = 0; t < NSTEPS; t++)
        for (int i = 0; i < NE; i++) {
            double d = fabs(got[t][i] - ref[t][i]) / fmax(1.0, fabs(ref[t][i]));
            if (!(d <= md)) md = d;
        }
    return md;
}

static void test_step(void) {
    OptimConfig c = optim_default_config(OPT_SOPHIA);
    c.beta2 = 0.9f, c.hess_every = K; /* a faster EMA: three estimates move h visibly */
    float p[NE], g[NE], m[NE] = {0}, h[NE] = {0}, gotp[NSTEPS][NE], goth[NSTEPS][NE];
    for (int i = 0; i < NE; i++) p[i] = (float)p0(i);
    OptimRange r[2] = {{0, NE / 2, 1, 1.0f}, {NE / 2, NE / 2, 0, 0.5f}};
    int due = 0;
    for (int t = 1; t <= NSTEPS; t++) {
        if (optim_hess_due(&c, t)) {
            due++;
            for (int i = 0; i < NE; i++) g[i] = (float)hgrad_at(t, i);
            optim_hess_update(&c, h, g, r, 2, (float)BTOK, 1);
        }
        for (int i = 0; i < NE; i++) g[i] = (float)grad_at(t, i);
        optim_step(&c, p, g, m, h, r, 2, t, (float)lr_at(t), (float)GSCALE, 1);
        memcpy(gotp[t - 1], p, sizeof p), memcpy(goth[t - 1], h, sizeof h);
    }
    tu_check(due == 4, "sophia: optim_hess_due at steps 1, 4, 7, 10 of 12 (k = 3)", "%d estimates", due);
    static double P[NSTEPS][NE], H[NSTEPS][NE];
    int clipped = 0, unclipped = 0;
    reference(&c, R_EXACT, P, H, &clipped, &unclipped);
    double dp = maxdiff(gotp, P), dh = maxdiff(goth, H);
    tu_check(dp <= TOL && dh <= TOL, "sophia: 12 steps against the float64 recurrence",
             "parameters %.2e, Hessian EMA %.2e (tol %.0e)", dp, dh, TOL);
    tu_check(clipped >= 20 && unclipped >= 20, "sophia: the test exercises both sides of the clip",
             "%d clipped, %d not, of %d", clipped, unclipped, NE * NSTEPS);
    for (int v = 1; v < R_COUNT; v++) {
        int a = 0, b = 0;
        reference(&c, (Ref)v, P, H, &a, &b);
        double d = fmax(maxdiff(gotp, P), maxdiff(goth, H));
        char name[128];
        snprintf(name, sizeof name, "sophia negative control: reference with %s", REF_NAME[v]);
        tu_check(d > 10 * TOL, name, "must differ: %.2e", d);
    }
}

/* ------------------------------------------------------------------ the sampled-label head */

enum { C = 16, V = 37, VP = 40, N = 4096, CHUNK = 256, NCHI = 20000 };

static void fill(float *x, size_t n, uint64_t stream, float scale) {
    for (size_t i = 0; i < n; i++) x[i] = scale * rng_normal(7, stream, i);
}

/* The label of row x at u, in double: the smallest v with CDF_v > u. *near: u is within 1e-5 of a
 * CDF step. */
static int ref_label(const float *x, const float *wte, double u, int *near) {
    double l[V], mx = -INFINITY, s = 0;
    for (int v = 0; v < V; v++) {
        double a = 0;
        for (int c = 0; c < C; c++) a += (double)x[c] * wte[v * C + c];
        l[v] = a, mx = a > mx ? a : mx;
    }
    for (int v = 0; v < V; v++) s += (l[v] = exp(l[v] - mx));
    double cdf = 0;
    int y = V - 1;
    *near = 0;
    for (int v = 0; v < V; v++) {
        cdf += l[v] / s;
        if (fabs(cdf - u) < 1e-5) *near = 1;
        if (cdf > u && y == V - 1 && v < V - 1) y = v;
        if (cdf > u) break;
    }
    return y;
}

static void head(float *losses, float *dx, float *dwte, const float *x, const float *wte, const int32_t *tgt,
                 const float *u, int32_t *labels, int n) {
    static float logits[CHUNK * VP];
    HeadSample smp = {u, labels};
    head_forward_backward_p(NULL, losses, dx, dwte, logits, x, wte, NULL, tgt, n, C, V, VP, 1.0f / n, CHUNK, 0, 2, NULL,
                            u ? &smp : NULL, NULL, NULL);
}

static void test_labels(void) {
    float *x = malloc(sizeof(float) * N * C), *wte = calloc(VP * C, sizeof(float)), *u = malloc(sizeof(float) * N);
    float *u2 = malloc(sizeof(float) * N), *loss = malloc(sizeof(float) * N), *loss2 = malloc(sizeof(float) * N);
    float *dx = malloc(sizeof(float) * N * C), *dx2 = malloc(sizeof(float) * N * C);
    float *dw = calloc(VP * C, sizeof(float)), *dw2 = calloc(VP * C, sizeof(float));
    int32_t *tgt = malloc(sizeof(int32_t) * N), *y = malloc(sizeof(int32_t) * N), *y2 = malloc(sizeof(int32_t) * N);
    fill(x, (size_t)N * C, 1, 1.0f), fill(wte, (size_t)V * C, 2, 0.6f);
    for (int i = 0; i < N; i++) {
        u[i] = rng_uniform(7, 3, i), u2[i] = fmodf(u[i] + 0.5f, 1.0f);
        tgt[i] = i % 17 == 5 ? -1 : 0; /* some masked rows */
    }
    head(loss, dx, dw, x, wte, tgt, u, y, N);
    int bad = 0, nearc = 0, masked_ok = 1, other = 0;
    for (int i = 0; i < N; i++) {
        if (tgt[i] < 0) {
            int zero = 1;
            for (int c = 0; c < C; c++) zero &= dx[(size_t)i * C + c] == 0.0f;
            masked_ok &= y[i] == -1 && loss[i] == 0.0f && zero;
            continue;
        }
        int near, r = ref_label(x + (size_t)i * C, wte, u[i], &near), r2 = ref_label(x + (size_t)i * C, wte, u2[i], &near);
        if (y[i] != r) near ? nearc++ : bad++;
        other += y[i] != r2;
    }
    tu_check(bad == 0 && nearc <= 2, "sophia labels: the inverse CDF of the double softmax at the same u",
             "%d rows differ, %d within 1e-5 of a CDF step", bad, nearc);
    tu_check(masked_ok, "sophia labels: masked rows get label -1, loss 0, zero input gradient", "%s",
             masked_ok ? "all" : "not all");
    tu_check(other > N / 2, "sophia labels negative control: the labels of u + 0.5 differ from the reference",
             "%d of %d rows differ", other, N);
    /* the same pass with the drawn labels as targets */
    head(loss2, dx2, dw2, x, wte, y, NULL, NULL, N);
    double dl = 0;
    for (int i = 0; i < N; i++) dl = fmax(dl, fabs(loss[i] - loss2[i]));
    int same = !memcmp(dx, dx2, sizeof(float) * N * C) && !memcmp(dw, dw2, sizeof(float) * VP * C);
    tu_check(same && dl <= 2e-6, "sophia gradient: dx and dwte bit-identical to targets = the drawn labels",
             "%s, losses within %.2e", same ? "identical" : "DIFFER", dl);
    free(x), free(wte), free(u), free(u2), free(loss), free(loss2), free(dx), free(dx2), free(dw), free(dw2);
    free(tgt), free(y), free(y2);
}

/* chi-square of the labels of NCHI copies of one row with draws u (or u²) against the softmax */
static double chi2_of(const float *x1, const float *wte, int skew) {
    float *x = malloc(sizeof(float) * NCHI * C), *u = malloc(sizeof(float) * NCHI), *loss = malloc(sizeof(float) * NCHI);
    int32_t *tgt = calloc(NCHI, sizeof(int32_t)), *y = malloc(sizeof(int32_t) * NCHI);
    for (int i = 0; i < NCHI; i++) {
        memcpy(x + (size_t)i * C, x1, sizeof(float) * C);
        float a = rng_uniform(7, 11, i);
        u[i] = skew ? a * a : a;
    }
    head(loss, NULL, NULL, x, wte, tgt, u, y, NCHI);
    double l[V], mx = -INFINITY, s = 0, chi = 0;
    long cnt[V] = {0};
    for (int i = 0; i < NCHI; i++) cnt[y[i]]++;
    for (int v = 0; v < V; v++) {
        double a = 0;
        for (int c = 0; c < C; c++) a += (double)x1[c] * wte[v * C + c];
        l[v] = a, mx = a > mx ? a : mx;
    }
    for (int v = 0; v < V; v++) s += (l[v] = exp(l[v] - mx));
    for (int v = 0; v < V; v++) {
        double e = NCHI * l[v] / s;
        chi += (cnt[v] - e) * (cnt[v] - e) / e;
    }
    free(x), free(u), free(loss), free(tgt), free(y);
    return chi;
}

static void test_chi2(void) {
    float x1[C], *wte = calloc(VP * C, sizeof(float));
    fill(x1, C, 4, 0.5f), fill(wte, (size_t)V * C, 2, 0.6f);
    double chi = chi2_of(x1, wte, 0), skew = chi2_of(x1, wte, 1);
    tu_check(chi < 90, "sophia chi2: 20000 draws of one row follow its softmax", "chi-square %.1f (36 dof, bound 90)", chi);
    tu_check(skew >= 90, "sophia chi2 negative control: draws at u^2 must fail", "chi-square %.1f", skew);
    free(wte);
}

/* ------------------------------------------------------------------ through the model */

static void test_model(void) {
    ModelConfig mc = {2, 2, 32, 61, 0, 16, 0};
    Err e = {0};
    Gpt g;
    memset(&g, 0, sizeof g);
    GptOptions o = gpt_default_options();
    o.B = 2, o.T = 16, o.threads = 2;
    if (model_config_validate(&mc, &e) != ST_OK || gpt_init(&g, &mc, &o, NULL, &e) != ST_OK) {
        tu_check(0, "sophia model: build", "%s", e.msg);
        return;
    }
    gpt_init_params(&g, 5);
    enum { NT = 32 };
    int32_t inp[NT], tgt[NT], y[NT];
    float u[NT];
    for (int i = 0; i < NT; i++) inp[i] = (int32_t)rng_below(5, 1, i, 61), tgt[i] = i == 9 ? -1 : 0, u[i] = rng_uniform(5, 2, i);
    size_t n = g.w.layout.total;
    float *g1 = malloc(n * sizeof(float));
    gpt_zero_grads(&g);
    gpt_set_label_sampling(&g, u, y);
    gpt_forward(&g, inp, tgt, 2, 16, 1.0f / 31, 1, 0);
    gpt_backward(&g);
    gpt_set_label_sampling(&g, NULL, NULL);
    memcpy(g1, g.d.grads, n * sizeof(float));
    gpt_zero_grads(&g);
    gpt_forward(&g, inp, y, 2, 16, 1.0f / 31, 1, 0);
    gpt_backward(&g);
    int same = !memcmp(g1, g.d.grads, n * sizeof(float)), dist = 0;
    for (int i = 0; i < NT; i++) dist += y[i] != y[0];
    tu_check(same && y[9] == -1 && dist > 0 && gpt_status(&g, &e) == ST_OK,
             "sophia model: a sampled pass's gradients bit-identical to the pass with the drawn labels",
             "%s; masked row label %d; %d labels differ from the first", same ? "identical" : "DIFFER", y[9], dist);
    free(g1);
    gpt_free(&g);
}

int main(void) {
    test_step();
    test_labels();
    test_chi2();
    test_model();
    return tu_exit();
}
