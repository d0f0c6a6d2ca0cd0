/* test_optim.c — optimizers, clipping and schedules against closed-form answers.
 *
 * Oracle: values worked out by hand (in the comments); tolerance 1e-6 absolute (fp32). The fused
 * low-precision step is checked bit for bit against the plain step followed by model/kernels'
 * separate casts, and on hand-rounded values. */
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
    OptimRange r = {0, 1, decay};
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
    OptimRange r[2] = {{3, 4000, 1}, {4100, N - 4100, 0}}; /* a gap at [0,3) and [4003,4100) */
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
    tu_check(!memcmp(p1, p2, N * 4) && !memcmp(m1, m2, N * 4) && !memcmp(v1, v2, N * 4), name,
             "master or moments differ from optim_step");
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
        OptimRange r = {0, 5, 0};
        optim_step_lowp(&c, p, g, m, NULL, &r, 1, 1, 1.0f, 1.0f, lp, k ? OPTIM_LOWP_FP16 : OPTIM_LOWP_BF16, 1);
        for (int i = 0; i < 5; i++)
            tu_check(lp[i] == (k ? want_h : want_bf)[i], k ? "fp16 rounding" : "bf16 rounding",
                     "value %.9g: got 0x%04X want 0x%04X", (double)x[i], lp[i], (k ? want_h : want_bf)[i]);
    }
}

int main(void) {
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
        OptimRange r = {0, 1, 1};
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
        OptimRange r = {0, 3, 0};
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
    return tu_exit();
}
