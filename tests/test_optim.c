/* test_optim.c — optimizers, clipping and schedules against closed-form answers.
 *
 * Oracles: values worked out by hand (in the comments; tolerance 1e-6 absolute, fp32); 8 steps of
 * each optimizer with changing gradients against a float64 recurrence written in this file (2e-6),
 * and every schedule shape at every step against its closed form (1e-6 relative), each with
 * negative controls (a broken recurrence, another shape's closed form) that the same comparison
 * must reject. The fused low-precision step is checked bit for bit against the plain step
 * followed by model/kernels' separate casts, and on hand-rounded values. The gradient norm's
 * chunk sums (eight chunks side by side) are checked bit for bit against the in-order double loop,
 * with a reversed-order and a swapped-lane negative control. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/kernels.h"

#include "optim/optim.h"
#include "testutil.h"

static float one_step(OptimKind kind, float theta, float g, float lr, float wd, int decay, long steps, float *m_out) {
    OptimConfig c = optim_default_config(kind);
    c.weight_decay = wd;
    float p = theta, m = 0, v = 0;
    OptimRange r = {0, 1, decay, 1.0f};
    for (long s = 1; s <= steps; s++) optim_step(&c, &p, &g, &m, &v, &r, 1, s, lr, 1.0f, 1);
    if (m_out) *m_out = m;
    return p;
}

static void near(double got, double want, double tol, const char *name) {
    tu_check(fabs(got - want) <= tol, name, "got=%.9g want=%.9g diff=%.3g", got, want, fabs(got - want));
}

/* optim_step_lowp against optim_step + cast_bf16/cast_fp16: same master, same moments, and a
 * working copy equal bit for bit to the cast of the ranges; elements outside them untouched. */
static void check_fused_lowp(OptimKind kind, OptimLowp lk) {
    enum { N = 10007 };
    OptimConfig c = optim_default_config(kind);
    OptimRange r[2] = {{3, 4000, 1, 1.0f}, {4100, N - 4100, 0, 1.0f}}; /* a gap at [0,3) and [4003,4100) */
    float *p1 = malloc(N * 4), *p2 = malloc(N * 4), *g = malloc(N * 4), *m1 = calloc(N, 4), *m2 = calloc(N, 4),
          *v1 = calloc(N, 4), *v2 = calloc(N, 4);
    uint16_t *lp = malloc(N * 2), *want = malloc(N * 2);
    for (int i = 0; i < N; i++) {
        p1[i] = p2[i] = sinf(0.37f * i) * (lk == OPTIM_LOWP_FP16 && i % 97 == 0 ? 9e4f : 1.0f);
        g[i] = cosf(0.11f * i) * 0.01f;
    }
    memset(lp, 0xAB, N * 2);
    for (long s = 1; s <= 3; s++) {
        optim_step(&c, p1, g, m1, v1, r, 2, s, 1e-2f, 0.7f, 2);
        optim_step_lowp(&c, p2, g, m2, v2, r, 2, s, 1e-2f, 0.7f, lp, lk, 2);
    }
    if (lk == OPTIM_LOWP_BF16) cast_bf16(want, p1, N, 1);
    else cast_fp16(want, p1, N, 1);
    int inside_bad = 0, outside_bad = 0;
    for (int i = 0; i < N; i++) {
        int in = (i >= 3 && i < 4003) || i >= 4100;
        if (in && lp[i] != want[i]) inside_bad++;
        if (!in && lp[i] != 0xABAB) outside_bad++;
    }
    char name[80];
    snprintf(name, sizeof name, "fused %s step, %s copy", optim_kind_name(kind), lk == OPTIM_LOWP_BF16 ? "bf16" : "fp16");
    int same = !memcmp(p1, p2, N * 4) && !memcmp(m1, m2, N * 4) && !memcmp(v1, v2, N * 4);
    tu_check(same, name, "master and moments %s optim_step's (memcmp)", same ? "equal" : "differ from");
    tu_check(inside_bad == 0 && outside_bad == 0, name, "%d copies differ from the cast, %d outside the ranges written",
             inside_bad, outside_bad);
    free(p1), free(p2), free(g), free(m1), free(m2), free(v1), free(v2), free(lp), free(want);
}

/* Rounding by hand: SGD with lr 1 and g = -x moves p from 0 to x exactly. */
static void check_lowp_rounding(void) {
    const float x[5] = {1.0f + 0x1p-8f,      /* bf16 tie between 1 and 1+2^-7: even → 1.0 (0x3F80) */
                        1.0f + 3 * 0x1p-8f,  /* tie between 1+2^-7 and 1+2^-6: even → 0x3F82 */
                        1.0f + 0x1p-8f + 0x1p-20f, /* above the tie: up → 0x3F81 */
                        70000.0f,            /* fp16: beyond 65504 → inf (0x7C00) */
                        -2.0f};
    const uint16_t want_bf[5] = {0x3F80, 0x3F82, 0x3F81, 0x4789, 0xC000};
    const uint16_t want_h[5] = {0x3C04, 0x3C0C, 0x3C04, 0x7C00, 0xC000}; /* 2^-8 is exact in fp16 */
    OptimConfig c = optim_default_config(OPT_SGD);
    c.momentum = 0, c.weight_decay = 0;
    for (int k = 0; k < 2; k++) {
        float p[5] = {0}, g[5], m[5] = {0};
        uint16_t lp[5];
        for (int i = 0; i < 5; i++) g[i] = -x[i];
        OptimRange r = {0, 5, 0, 1.0f};
        optim_step_lowp(&c, p, g, m, NULL, &r, 1, 1, 1.0f, 1.0f, lp, k ? OPTIM_LOWP_FP16 : OPTIM_LOWP_BF16, 1);
        for (int i = 0; i < 5; i++)
            tu_check(lp[i] == (k ? want_h : want_bf)[i], k ? "fp16 rounding" : "bf16 rounding",
                     "value %.9g: got 0x%04X want 0x%04X", (double)x[i], lp[i], (k ? want_h : want_bf)[i]);
    }
}

/* ---- Several steps with changing gradients against a float64 recurrence ----
 * The recurrences are written here from the update rules as published (AdamW: Loshchilov & Hutter;
 * Adam with L2 and SGD with momentum: PyTorch's documented torch.optim.Adam/SGD; Lion: Chen et al.
 * 2023, Algorithm 2), in double, not copied from optim.c. 16 elements in two ranges (decay, no
 * decay), gradients that change magnitude and sign every step, a learning rate that changes every
 * step and a clip factor of 0.5, so every term (β1, β2, bias correction at t = 1..8, eps, decay,
 * the clip factor) moves the parameters. Tolerance: 2e-6 absolute on every parameter after every
 * step (fp32 rounding of ~1 values over 8 steps). Negative controls: the same comparison against
 * the recurrence with one term broken (bias correction dropped or frozen at t = 1, β2 = 0.999, β1
 * and β2 exchanged, the other kind of decay, the clip factor ignored, SGD dampening, Lion's
 * momentum updated before the sign) must report a difference above the tolerance. */
enum { NE = 16, NSTEPS = 8 };
#define MULTI_TOL 2e-6

typedef enum {
    V_EXACT,
    V_NO_BIAS_CORRECTION, /* m̂ = m, v̂ = v */
    V_STEP_FROZEN,        /* bias correction always at t = 1 (the step counter not passed on) */
    V_BETA2_999,          /* β2 = 0.999 instead of the configured one */
    V_BETAS_SWAPPED,      /* β1 and β2 exchanged */
    V_OTHER_DECAY,        /* AdamW ↔ Adam L2; SGD: decoupled instead of L2; Lion: no decay */
    V_SCALE_IGNORED,      /* the clip factor not applied to the gradients */
    V_DAMPENING,          /* SGD: buf = μ·buf + (1-μ)·g */
    V_LION_M_FIRST,       /* Lion: momentum updated before the sign is taken */
    V_COUNT
} Variant;

static const char *const VARIANT_NAME[V_COUNT] = {
    "exact", "no bias correction", "bias correction frozen at t=1", "beta2=0.999", "beta1/beta2 exchanged",
    "the other kind of weight decay", "clip factor ignored", "SGD dampening", "Lion momentum before sign"};

static double multi_grad(int t, int i) {
    double a = pow(10.0, -3.0 + (i % 4)); /* 1e-3 .. 1: eps matters for the small ones */
    return a * (sin(1.1 * t + 0.7 * i) + 0.3 * ((i % 3) - 1));
}
static double multi_lr(const OptimConfig *c, int t) { return (c->kind == OPT_LION ? 1e-3 : 1e-2) * (1.0 + 0.1 * t); }
static double multi_p0(int i) { return (i % 2 ? -1.0 : 1.0) * (0.5 + 0.05 * i); }
static int multi_decay(int i) { return i < NE / 2; }
#define MULTI_SCALE 0.5

/* p[t][i]: the parameters after step t+1 under variant v of c's rule. */
static void multi_reference(const OptimConfig *c, Variant v, double p_out[NSTEPS][NE]) {
    double b1 = c->beta1, b2 = c->beta2, eps = c->eps, mu = c->momentum;
    if (v == V_BETA2_999) b2 = 0.999;
    if (v == V_BETAS_SWAPPED) b1 = c->beta2, b2 = c->beta1;
    for (int i = 0; i < NE; i++) {
        double p = multi_p0(i), m = 0, s = 0; /* s: second moment */
        double wd = multi_decay(i) ? c->weight_decay : 0.0;
        for (int t = 1; t <= NSTEPS; t++) {
            double g = multi_grad(t, i) * (v == V_SCALE_IGNORED ? 1.0 : MULTI_SCALE), lr = multi_lr(c, t);
            int tb = v == V_STEP_FROZEN ? 1 : t;
            double bc1 = v == V_NO_BIAS_CORRECTION ? 1.0 : 1.0 - pow(b1, tb);
            double bc2 = v == V_NO_BIAS_CORRECTION ? 1.0 : 1.0 - pow(b2, tb);
            int l2 = (c->kind == OPT_ADAM) != (v == V_OTHER_DECAY); /* decay through the gradient */
            switch (c->kind) {
            case OPT_ADAMW:
            case OPT_ADAM:
                if (l2) g += wd * p;
                else p -= lr * wd * p;
                m = b1 * m + (1 - b1) * g;
                s = b2 * s + (1 - b2) * g * g;
                p -= lr * (m / bc1) / (sqrt(s / bc2) + eps);
                break;
            case OPT_SGD:
                if (v != V_OTHER_DECAY) g += wd * p;
                else p -= lr * wd * p;
                m = t == 1 ? g : mu * m + (v == V_DAMPENING ? 1 - mu : 1.0) * g;
                p -= lr * m;
                break;
            case OPT_LION: {
                if (v != V_OTHER_DECAY) p -= lr * wd * p;
                if (v == V_LION_M_FIRST) m = b2 * m + (1 - b2) * g;
                double u = v == V_LION_M_FIRST ? m : b1 * m + (1 - b1) * g;
                p -= lr * ((u > 0) - (u < 0));
                if (v != V_LION_M_FIRST) m = b2 * m + (1 - b2) * g;
                break;
            }
            case OPT_MUON: /* whole-matrix: tests/test_muon.c, test_shampoo.c */
            case OPT_SHAMPOO:
            case OPT_SOPHIA: /* its Hessian EMA: tests/test_sophia.c */
                break;
            }
            p_out[t - 1][i] = p;
        }
    }
}

/* max |got - ref| over every parameter after every step: the one comparison used for the real
 * check and for the negative controls. */
static double multi_maxdiff(const float got[NSTEPS][NE], const double ref[NSTEPS][NE]) {
    double md = 0;
    for (int t = 0; t < NSTEPS; t++)
        for (int i = 0; i < NE; i++) {
            double d = fabs(got[t][i] - ref[t][i]);
            if (!(d <= md)) md = d;
        }
    return md;
}

static void check_multi_step(OptimKind kind, const Variant *controls, int ncontrols) {
    OptimConfig c = optim_default_config(kind);
    if (kind == OPT_ADAMW || kind == OPT_ADAM) c.eps = 1e-4f; /* of the order of the small gradients */
    if (kind == OPT_SGD) c.weight_decay = 0.01f, c.momentum = 0.9f;
    if (kind == OPT_LION) c.weight_decay = 0.5f;
    float p[NE], g[NE], m[NE] = {0}, v[NE] = {0}, got[NSTEPS][NE];
    for (int i = 0; i < NE; i++) p[i] = (float)multi_p0(i);
    OptimRange r[2] = {{0, NE / 2, 1, 1.0f}, {NE / 2, NE / 2, 0, 1.0f}};
    for (int t = 1; t <= NSTEPS; t++) {
        for (int i = 0; i < NE; i++) g[i] = (float)multi_grad(t, i);
        optim_step(&c, p, g, m, v, r, 2, t, (float)multi_lr(&c, t), (float)MULTI_SCALE, 1);
        memcpy(got[t - 1], p, sizeof p);
    }
    static double ref[NSTEPS][NE];
    multi_reference(&c, V_EXACT, ref);
    double md = multi_maxdiff(got, ref);
    char name[96];
    snprintf(name, sizeof name, "%s: %d steps vs float64 recurrence", optim_kind_name(kind), NSTEPS);
    tu_check(md <= MULTI_TOL, name, "maxdiff=%.3g (tol %.0e)", md, MULTI_TOL);
    for (int k = 0; k < ncontrols; k++) {
        multi_reference(&c, controls[k], ref);
        double mv = multi_maxdiff(got, ref);
        snprintf(name, sizeof name, "%s negative control (%s)", optim_kind_name(kind), VARIANT_NAME[controls[k]]);
        tu_check(mv > MULTI_TOL, name, "detected: maxdiff=%.3g vs the broken recurrence (must exceed %.0e)", mv,
                 MULTI_TOL);
    }
}

/* ---- Schedule shapes against their closed forms ----
 * Written here from the definitions: linear warmup lr·s/W for s <= W; then with f the fraction of
 * the decay done (cosine/linear: f = (s - W) / (N - W) over the steps after warmup; WSD: stable at
 * lr until the last D = round(decay_frac·N) steps, f = (s - (N - D)) / D), lr(s) = min + (lr - min)·w(f)
 * with w = 1 - f (linear), (1 + cos πf) / 2 (cosine), 1 - √f (1-sqrt). Every step of each run is
 * compared (1e-6 relative, fp32 output), with named checks at 25% and 75% of the decay where the
 * shapes differ (at 50% linear and cosine coincide). Negative control: each shape's closed form
 * against every other shape's output must fail the same comparison. */
typedef struct {
    SchedKind kind;
    DecayShape shape;
} Shape;

static double closed_form_lr(Shape sh, double lr, double lo, long W, long N, double frac, long s) {
    if (s <= W) return lr * (double)s / (double)W;
    if (sh.kind == SCHED_CONSTANT) return lr;
    double f;
    DecayShape w = sh.kind == SCHED_LINEAR ? DECAY_LINEAR : sh.kind == SCHED_COSINE ? DECAY_COSINE : sh.shape;
    if (sh.kind == SCHED_WSD) {
        long D = lround(frac * (double)N);
        if (s <= N - D) return lr;
        f = (double)(s - (N - D)) / (double)D;
    } else {
        f = (double)(s - W) / (double)(N - W);
    }
    double x = w == DECAY_LINEAR ? 1 - f : w == DECAY_COSINE ? 0.5 * (1 + cos(M_PI * f)) : 1 - sqrt(f);
    return lo + (lr - lo) * x;
}

static const char *shape_label(Shape sh) {
    static char buf[4][32];
    static int k;
    char *b = buf[k++ & 3];
    if (sh.kind == SCHED_WSD) snprintf(b, 32, "wsd %s", sched_shape_name(sh.shape));
    else snprintf(b, 32, "%s", sched_kind_name(sh.kind));
    return b;
}

/* Relative difference of sched_lr under `impl` from the closed form of `form`, worst over steps. */
static double sched_maxrel(Shape impl, Shape form, long W, long N, long s0, long s1) {
    Schedule s = {impl.kind, 1.0f, 0.1f, W, N, 0.2f, impl.shape};
    double md = 0;
    for (long t = s0; t <= s1; t++) {
        double want = closed_form_lr(form, 1.0, 0.1, W, N, 0.2, t), d = fabs(sched_lr(&s, t) - want) / want;
        if (!(d <= md)) md = d;
    }
    return md;
}

static void check_schedules(void) {
    /* Cosine / linear: warmup 10 of 110, so 25% and 75% of the decay are steps 35 and 85. WSD: warmup
     * 10 of 100, decay over the last 20 (81..100): 25% and 75% are steps 85 and 95. */
    const Shape shapes[5] = {{SCHED_COSINE, DECAY_LINEAR}, {SCHED_LINEAR, DECAY_LINEAR}, {SCHED_WSD, DECAY_LINEAR},
                             {SCHED_WSD, DECAY_COSINE}, {SCHED_WSD, DECAY_SQRT}};
    const long total[5] = {110, 110, 100, 100, 100}, q1[5] = {35, 35, 85, 85, 85}, q3[5] = {85, 85, 95, 95, 95};
    const double tol = 1e-6;
    char name[128];
    for (int a = 0; a < 5; a++) {
        double md = sched_maxrel(shapes[a], shapes[a], 10, total[a], 1, total[a]);
        snprintf(name, sizeof name, "schedule %s: every step vs closed form", shape_label(shapes[a]));
        tu_check(md <= tol, name, "maxrel=%.3g over steps 1..%ld (tol %.0e)", md, total[a], tol);
        for (int q = 0; q < 2; q++) {
            long t = q ? q3[a] : q1[a];
            Schedule s = {shapes[a].kind, 1.0f, 0.1f, 10, total[a], 0.2f, shapes[a].shape};
            double want = closed_form_lr(shapes[a], 1.0, 0.1, 10, total[a], 0.2, t);
            snprintf(name, sizeof name, "schedule %s at %d%% of the decay (step %ld)", shape_label(shapes[a]),
                     q ? 75 : 25, t);
            near(sched_lr(&s, t), want, tol * want, name);
        }
        /* Negative controls: another shape's closed form, compared at 25% and at 75% of the decay. */
        for (int b = 0; b < 5; b++) {
            if (b == a || total[b] != total[a]) continue;
            double d1 = sched_maxrel(shapes[a], shapes[b], 10, total[a], q1[a], q1[a]);
            double d3 = sched_maxrel(shapes[a], shapes[b], 10, total[a], q3[a], q3[a]);
            snprintf(name, sizeof name, "schedule negative control: %s output vs %s closed form",
                     shape_label(shapes[a]), shape_label(shapes[b]));
            tu_check(d1 > tol && d3 > tol, name, "detected: rel diff %.3g at 25%%, %.3g at 75%% (must exceed %.0e)", d1,
                     d3, tol);
        }
    }
    /* Warmup alone: constant after it, and a wrong warmup length is seen. */
    double mc = sched_maxrel((Shape){SCHED_CONSTANT, DECAY_LINEAR}, (Shape){SCHED_CONSTANT, DECAY_LINEAR}, 10, 100, 1, 100);
    tu_check(mc <= tol, "schedule constant with warmup: every step vs closed form", "maxrel=%.3g (tol %.0e)", mc, tol);
    Schedule cs = {SCHED_CONSTANT, 1.0f, 0.1f, 10, 100, 0.2f, DECAY_LINEAR};
    double dw = fabs(sched_lr(&cs, 5) - closed_form_lr((Shape){SCHED_CONSTANT, DECAY_LINEAR}, 1.0, 0.1, 12, 100, 0.2, 5));
    tu_check(dw > tol, "schedule negative control: warmup 10 output vs warmup 12 closed form", "detected: diff %.3g", dw);
}

/* The gradient norm's chunk sums (par_grad_norm): optim_chunk_sumsq8 against eight in-order
 * double loops written here, bit for bit, at n = 4096 (the norm's chunk), 4099 and 5 (the tails
 * past the 8-wide steps), on values from denormals to 1e18 so that the order of the additions
 * shows in the last bits; optim_chunk_sumsq against the same loop, and both against a closed form
 * on small integers. Negative controls: the same data summed in reverse order must differ from
 * the kernel in some chunk (else the data could not see an order change), and the kernel with
 * two chunk pointers swapped must be caught by the same comparison. */
static double ref_sumsq(const float *x, size_t n, int reverse) {
    double a = 0;
    for (size_t i = 0; i < n; i++) {
        float v = x[reverse ? n - 1 - i : i];
        a += (double)v * (double)v;
    }
    return a;
}

static void check_chunk_sumsq(void) {
    const size_t ns[3] = {4096, 4099, 5};
    float *buf = malloc(8 * 4099 * sizeof(float));
    uint64_t r = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < 8 * 4099; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        float mant = (float)((r >> 40) & 0xFFFFFF) / 16777216.0f - 0.5f;
        int e = (int)((r >> 20) % 200) - 140; /* 2^-140 (denormal) .. 2^59 */
        buf[i] = ldexpf(mant, e);
        if (i % 101 == 0) buf[i] = 0.0f;
    }
    for (int t = 0; t < 3; t++) {
        size_t n = ns[t];
        const float *x[8];
        for (int k = 0; k < 8; k++) x[k] = buf + (size_t)k * n;
        double out[8];
        optim_chunk_sumsq8(x, n, out);
        int bad = 0, bad1 = 0, rev_differs = 0;
        for (int k = 0; k < 8; k++) {
            double want = ref_sumsq(x[k], n, 0);
            bad += memcmp(&out[k], &want, sizeof want) != 0;
            double one = optim_chunk_sumsq(x[k], n);
            bad1 += memcmp(&one, &want, sizeof want) != 0;
            double rev = ref_sumsq(x[k], n, 1);
            rev_differs += memcmp(&rev, &out[k], sizeof rev) != 0;
        }
        char name[120];
        snprintf(name, sizeof name, "chunk sums, 8 chunks of %zu: optim_chunk_sumsq8 equals the in-order loop bit for bit", n);
        tu_check(bad == 0, name, "%d of 8 chunks differ", bad);
        snprintf(name, sizeof name, "chunk sums of %zu: optim_chunk_sumsq equals the in-order loop bit for bit", n);
        tu_check(bad1 == 0, name, "%d of 8 chunks differ", bad1);
        if (n >= 4096) { /* 5 elements are too few to be sure an order change shows */
            snprintf(name, sizeof name, "negative control: the reversed order differs from the kernel (n %zu)", n);
            tu_check(rev_differs > 0, name, "no chunk's reversed sum differed: the data cannot see the order");
        }
        /* negative control: lanes swapped (chunks 2 and 5) must not pass the same comparison */
        const float *sw[8];
        memcpy(sw, x, sizeof sw);
        sw[2] = x[5], sw[5] = x[2];
        optim_chunk_sumsq8(sw, n, out);
        int caught = 0;
        for (int k = 0; k < 8; k++) {
            double want = ref_sumsq(x[k], n, 0);
            caught += memcmp(&out[k], &want, sizeof want) != 0;
        }
        snprintf(name, sizeof name, "negative control: two chunks swapped are caught (n %zu)", n);
        tu_check(caught == 2, name, "%d chunks differ, expected 2", caught);
    }
    /* closed form: x[i] = i mod 7 - 3 over 4096 elements is 585 cycles of (9+4+1+0+1+4+9) = 28 and
     * one extra element (4095 mod 7 = 0: 9): 585·28 + 9 = 16389, exact in double; chunk k scaled
     * by (k + 1) gives (k + 1)² · 16389 */
    for (int k = 0; k < 8; k++)
        for (int i = 0; i < 4096; i++) buf[k * 4096 + i] = (float)((i % 7 - 3) * (k + 1));
    const float *x[8];
    for (int k = 0; k < 8; k++) x[k] = buf + k * 4096;
    double out[8];
    optim_chunk_sumsq8(x, 4096, out);
    int bad = 0;
    for (int k = 0; k < 8; k++) bad += out[k] != (double)(k + 1) * (k + 1) * 16389.0 || optim_chunk_sumsq(x[k], 4096) != out[k];
    tu_check(bad == 0, "chunk sums on small integers equal the closed form (k+1)^2 * 16389", "%d of 8 chunks differ", bad);
    free(buf);
}

int main(void) {
    check_chunk_sumsq();
    /* AdamW, t=1: m̂ = g, v̂ = g², update = g/|g| = 1; θ - lr·(1 + wd·θ) = 1.5 - 1e-3·1.15 */
    near(one_step(OPT_ADAMW, 1.5f, 0.3f, 1e-3f, 0.1f, 1, 1, NULL), 1.49885, 1e-6, "adamw one step");
    /* Same tensor marked no-decay (bias/LayerNorm): 1.5 - 1e-3 */
    near(one_step(OPT_ADAMW, 1.5f, 0.3f, 1e-3f, 0.1f, 0, 1, NULL), 1.499, 1e-6, "adamw no decay on bias range");
    /* Adam with L2: g' = 0.3 + 0.1·1.5 = 0.45, update g'/|g'| = 1: 1.5 - 1e-3 = 1.499 (decay
     * passes through the moments, so the decay term is normalised away at t=1: the difference). */
    near(one_step(OPT_ADAM, 1.5f, 0.3f, 1e-3f, 0.1f, 1, 1, NULL), 1.499, 1e-6, "adam (L2) one step");
    /* Adam L2 with a gradient of 0: g' = wd·θ = 0.15 still gives a full lr step: 1.499; AdamW
     * with g = 0 decays only by lr·wd·θ = 1.5e-4: 1.49985 */
    near(one_step(OPT_ADAM, 1.5f, 0.0f, 1e-3f, 0.1f, 1, 1, NULL), 1.499, 1e-6, "adam (L2) zero gradient");
    near(one_step(OPT_ADAMW, 1.5f, 0.0f, 1e-3f, 0.1f, 1, 1, NULL), 1.49985, 1e-6, "adamw zero gradient");
    /* AdamW two steps, b1=0.9 b2=0.95, g=0.3 twice: m̂ = g, v̂ = g² again → two unit steps with
     * decay: θ1 = 1.5 - 1e-3·1.15 = 1.49885; θ2 = θ1 - 1e-3·(1 + 0.1·θ1) = 1.497700115 */
    near(one_step(OPT_ADAMW, 1.5f, 0.3f, 1e-3f, 0.1f, 1, 2, NULL), 1.497700115, 2e-6, "adamw two steps");
    /* SGD momentum 0.9, lr 0.1, g = 0.3: b1 = 0.3 → 1.47; b2 = 0.9·0.3 + 0.3 = 0.57 → 1.413 */
    {
        OptimConfig c = optim_default_config(OPT_SGD);
        c.momentum = 0.9f, c.weight_decay = 0;
        float p = 1.5f, g = 0.3f, m = 0;
        OptimRange r = {0, 1, 1, 1.0f};
        optim_step(&c, &p, &g, &m, NULL, &r, 1, 1, 0.1f, 1.0f, 1);
        near(p, 1.47, 1e-6, "sgd momentum step 1");
        optim_step(&c, &p, &g, &m, NULL, &r, 1, 2, 0.1f, 1.0f, 1);
        near(p, 1.413, 1e-6, "sgd momentum step 2");
    }
    /* Lion (b1 0.9, b2 0.99), lr 1e-3, wd 0.1: u = 0.1·0.3 > 0 → sign 1: 1.5 - 1e-3·(1 + 0.15)
     * = 1.49885; m = 0.01·0.3 = 0.003. With g = -0.3: 1.5 + 1e-3 - 1.5e-4 = 1.50085 */
    {
        float m;
        near(one_step(OPT_LION, 1.5f, 0.3f, 1e-3f, 0.1f, 1, 1, &m), 1.49885, 1e-6, "lion step");
        near(m, 0.003, 1e-8, "lion momentum");
        near(one_step(OPT_LION, 1.5f, -0.3f, 1e-3f, 0.1f, 1, 1, NULL), 1.50085, 1e-6, "lion negative gradient");
    }
    /* Clipping: |[3,4,12]| = 13, clip 5 → scale 5/13; clip above the norm → 1; clip 0 → off. */
    {
        float x[3] = {3, 4, 12};
        double n = optim_l2_norm(x, 3, 2);
        near(n, 13.0, 1e-6, "l2 norm [3,4,12]");
        near(optim_clip_scale(n, 5.0f), 5.0 / 13.0, 1e-7, "clip scale 5/13");
        near(optim_clip_scale(n, 20.0f), 1.0, 0, "clip above norm");
        near(optim_clip_scale(n, 0.0f), 1.0, 0, "clip disabled");
        /* The clip scale applied inside the update: SGD, lr 1, no momentum: p - g·5/13 */
        OptimConfig c = optim_default_config(OPT_SGD);
        c.momentum = 0;
        float p[3] = {0, 0, 0}, m[3] = {0};
        OptimRange r = {0, 3, 0, 1.0f};
        optim_step(&c, p, x, m, NULL, &r, 1, 1, 1.0f, optim_clip_scale(n, 5.0f), 1);
        near(sqrt(p[0] * p[0] + p[1] * p[1] + p[2] * p[2]), 5.0, 1e-5, "clipped update has norm 5");
    }
    /* Norm over a long vector is identical for 1 and 2 threads (fixed partition). */
    {
        enum { N = 1000003 };
        static float x[N];
        for (int i = 0; i < N; i++) x[i] = sinf((float)i) * 1e-3f;
        double a = optim_l2_norm(x, N, 1), b = optim_l2_norm(x, N, 2);
        tu_check(a == b, "l2 norm thread independence", "1 thread %.17g, 2 threads %.17g", a, b);
    }
    /* Schedules: lr 1, min 0.1, warmup 10, total 100. */
    {
        Schedule s = {SCHED_COSINE, 1.0f, 0.1f, 10, 100, 0.2f, DECAY_LINEAR};
        near(sched_lr(&s, 1), 0.1, 1e-7, "cosine first (warmup 1/10)");
        near(sched_lr(&s, 10), 1.0, 1e-7, "cosine peak at end of warmup");
        near(sched_lr(&s, 55), 0.55, 1e-6, "cosine midpoint");
        near(sched_lr(&s, 100), 0.1, 1e-7, "cosine last = min_lr");
        s.kind = SCHED_LINEAR;
        near(sched_lr(&s, 1), 0.1, 1e-7, "linear first");
        near(sched_lr(&s, 10), 1.0, 1e-7, "linear peak");
        near(sched_lr(&s, 55), 0.55, 1e-6, "linear midpoint");
        near(sched_lr(&s, 100), 0.1, 1e-7, "linear last");
        s.kind = SCHED_CONSTANT;
        near(sched_lr(&s, 1), 0.1, 1e-7, "constant first (warmup)");
        near(sched_lr(&s, 10), 1.0, 1e-7, "constant peak");
        near(sched_lr(&s, 100), 1.0, 1e-7, "constant last");
        s.kind = SCHED_WSD; /* decay over the last 20 steps: 81..100 */
        near(sched_lr(&s, 1), 0.1, 1e-7, "wsd first");
        near(sched_lr(&s, 10), 1.0, 1e-7, "wsd peak");
        near(sched_lr(&s, 80), 1.0, 1e-7, "wsd stable until decay");
        near(sched_lr(&s, 90), 0.55, 1e-6, "wsd linear decay midpoint");
        near(sched_lr(&s, 100), 0.1, 1e-7, "wsd last (linear)");
        s.decay_shape = DECAY_COSINE;
        near(sched_lr(&s, 90), 0.55, 1e-6, "wsd cosine midpoint");
        near(sched_lr(&s, 100), 0.1, 1e-7, "wsd last (cosine)");
        s.decay_shape = DECAY_SQRT;
        near(sched_lr(&s, 90), 0.1 + 0.9 * (1 - sqrt(0.5)), 1e-6, "wsd 1-sqrt midpoint");
        near(sched_lr(&s, 100), 0.1, 1e-7, "wsd last (1-sqrt)");
        Schedule nw = {SCHED_COSINE, 1.0f, 0.0f, 0, 10, 0.2f, DECAY_LINEAR};
        near(sched_lr(&nw, 1), 0.5 * (1 + cos(M_PI * 0.1)), 1e-6, "cosine without warmup, step 1");
    }
    for (int k = 0; k < 4; k++) {
        check_fused_lowp((OptimKind)k, OPTIM_LOWP_BF16);
        check_fused_lowp((OptimKind)k, OPTIM_LOWP_FP16);
    }
    check_lowp_rounding();
    {
        const Variant adamw[] = {V_NO_BIAS_CORRECTION, V_STEP_FROZEN, V_BETA2_999, V_BETAS_SWAPPED, V_OTHER_DECAY,
                                 V_SCALE_IGNORED};
        const Variant adam[] = {V_NO_BIAS_CORRECTION, V_STEP_FROZEN, V_BETA2_999, V_BETAS_SWAPPED, V_OTHER_DECAY,
                                V_SCALE_IGNORED};
        const Variant sgd[] = {V_DAMPENING, V_OTHER_DECAY, V_SCALE_IGNORED};
        /* Lion's update is a sign: a common factor on every gradient (the clip factor) cannot show. */
        const Variant lion[] = {V_BETAS_SWAPPED, V_BETA2_999, V_OTHER_DECAY, V_LION_M_FIRST};
        check_multi_step(OPT_ADAMW, adamw, 6);
        check_multi_step(OPT_ADAM, adam, 6);
        check_multi_step(OPT_SGD, sgd, 3);
        check_multi_step(OPT_LION, lion, 4);
    }
    check_schedules();
    return tu_exit();
}
