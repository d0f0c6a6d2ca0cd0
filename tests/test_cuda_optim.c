/* test_cuda_optim.c — the optimizer entries of a device backend (backend.h's optim_update and sumsq):
 * AdamW, Adam, SGD with momentum and Lion, three steps each with weight decay and a clip factor, the
 * bf16 and fp16 working copies, and the gradient's sum of squares. Usage:
 *   test_cuda_optim          the CUDA backend (make test-gpu; fails without a GPU or a CUDA build)
 *   test_cuda_optim cpu      the same checks with optim/'s own functions in the backend's place:
 *                            checks the harness and its references here (CTest)
 *
 * Oracle: the update rules of docs/optimizers.md in float64 (written again here), on fresh random
 * parameters, gradients and moments every run (seed printed; ST_TEST_SEED repeats it). Tolerance
 * per element: |got − ref| / (|ref| + rms(ref)) <= 1e-5 for parameters and moments after 3 steps
 * (Lion's sign makes an element whose u is within rounding of 0 ambiguous: such elements, |u| <
 * 1e-6, are excluded and counted). Working copies: bit for bit the rounding (core/half.h) of the
 * backend's own updated fp32 parameters. sumsq: <= 1e-6 relative to the float64 Σ x², and the same
 * bits twice. Controls: every comparison repeated with one element scaled by 1.001 must fail; the
 * outputs are poisoned (NaN) where the kernel overwrites (the working copy). The OptimKind values
 * must equal BACKEND_OPT_* (the table's kinds are optim.h's). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/half.h"
#include "core/rng.h"
#include "backend_put.h"
#include "model/backend.h"
#include "optim/optim.h"
#include "testutil.h"

static const Backend *be;
static int cpu_mode;
static uint64_t seed;

/* cpu mode: optim_step_lowp on one range as the "backend", memory = host memory (cpu table). */
static void cpu_update(const BackendOptStep *s, float *p, const float *g, float *m, float *v, uint16_t *lowp,
                       size_t n) {
    OptimConfig c = optim_default_config((OptimKind)s->kind);
    c.beta1 = s->beta1, c.beta2 = s->beta2, c.eps = s->eps, c.momentum = s->momentum, c.weight_decay = s->wd;
    OptimRange r = {0, n, s->wd != 0.0f, 1.0f};
    optim_step_lowp(&c, p, g, m, v, &r, 1, s->step, s->lr, s->grad_scale, lowp,
                    s->lowp == 1 ? OPTIM_LOWP_BF16 : s->lowp == 2 ? OPTIM_LOWP_FP16 : OPTIM_LOWP_NONE, 1);
}
static double cpu_sumsq(const float *x, size_t n) {
    double r = optim_l2_norm(x, n, 1);
    return r * r;
}

static float *hrand(size_t n, float lo, float hi, uint64_t stream) {
    float *h = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) h[i] = lo + (hi - lo) * rng_uniform(seed, stream, i);
    return h;
}
static void *dput(const void *h, size_t bytes) { return backend_put(be, "test_cuda_optim", h, bytes); }

static double max_err(const float *got, const double *ref, size_t n, const char *skip) {
    double ss = 0, worst = 0;
    for (size_t i = 0; i < n; i++) ss += ref[i] * ref[i];
    double rms = sqrt(ss / n) + 1e-30;
    for (size_t i = 0; i < n; i++) {
        if (skip && skip[i]) continue;
        double e = fabs((double)got[i] - ref[i]) / (fabs(ref[i]) + rms);
        if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
    }
    return worst;
}
static void cmp(const char *name, const float *got, const double *ref, size_t n, const char *skip) {
    double e = max_err(got, ref, n, skip);
    tu_check(e <= 1e-5, name, "max per-element err %.3g (tol 1e-5, %s)", e, be->name);
    float *bad = malloc(n * sizeof(float));
    memcpy(bad, got, n * sizeof(float));
    size_t big = 0;
    for (size_t i = 0; i < n; i++)
        if ((!skip || !skip[i]) && fabs(ref[i]) > fabs(ref[big])) big = i;
    bad[big] *= 1.001f;
    char cn[128];
    snprintf(cn, sizeof cn, "%s_control_x1.001", name);
    tu_check(!(max_err(bad, ref, n, skip) <= 1e-5), cn, "one element scaled must fail");
    free(bad);
}

static const char *KN[] = {"adamw", "adam", "sgd", "lion"};

static void test_kind(int kind, int lowp) {
    size_t n = 5000 + (size_t)(rng_below(seed, 5, kind, 3000)); /* fresh size: partial blocks */
    float *p = hrand(n, -1, 1, 10 + kind), *m = hrand(n, -0.1f, 0.1f, 20 + kind), *v = hrand(n, 0, 0.01f, 30 + kind);
    double *rp = malloc(n * 8), *rm = malloc(n * 8), *rv = malloc(n * 8);
    for (size_t i = 0; i < n; i++) rp[i] = p[i], rm[i] = m[i], rv[i] = v[i];
    char *skip = calloc(n, 1);
    float *d_p = dput(p, n * 4), *d_m = dput(m, n * 4), *d_v = dput(v, n * 4), *d_g = NULL;
    uint16_t *d_lp = NULL;
    if (lowp) {
        uint16_t *poison = malloc(n * 2);
        memset(poison, 0xFF, n * 2);
        d_lp = dput(poison, n * 2);
        free(poison);
    }
    BackendOptStep s = {kind, 3e-3f, 0.1f, 0.7f, 0.9f, 0.95f, 1e-8f, kind == BACKEND_OPT_SGD ? 0.9f : 0.0f, 0, 0, 0, lowp};
    float *g = NULL;
    for (long step = 1; step <= 3; step++) {
        g = hrand(n, -1, 1, 100 * step + kind);
        if (d_g) be->free(NULL, MEM_WORKSPACE, d_g, n * 4);
        d_g = dput(g, n * 4);
        s.step = step, s.bc1 = 1.0f - powf(s.beta1, (float)step), s.bc2 = 1.0f - powf(s.beta2, (float)step);
        be->optim_update(&s, d_p, d_g, d_m, d_v, d_lp, n);
        Err e = {0};
        if (be->take_error(&e) != ST_OK) tu_check(0, "optim_update_ran", "%s", e.msg);
        double b1 = s.beta1, b2 = s.beta2, lr = s.lr, wd = s.wd;
        for (size_t i = 0; i < n; i++) {
            double gi = (double)g[i] * s.grad_scale;
            switch (kind) {
            case BACKEND_OPT_ADAMW:
                rm[i] = b1 * rm[i] + (1 - b1) * gi, rv[i] = b2 * rv[i] + (1 - b2) * gi * gi;
                rp[i] -= lr * ((rm[i] / (1 - pow(b1, step))) / (sqrt(rv[i] / (1 - pow(b2, step))) + s.eps) + wd * rp[i]);
                break;
            case BACKEND_OPT_ADAM:
                gi += wd * rp[i];
                rm[i] = b1 * rm[i] + (1 - b1) * gi, rv[i] = b2 * rv[i] + (1 - b2) * gi * gi;
                rp[i] -= lr * ((rm[i] / (1 - pow(b1, step))) / (sqrt(rv[i] / (1 - pow(b2, step))) + s.eps));
                break;
            case BACKEND_OPT_SGD:
                gi += wd * rp[i];
                rm[i] = step > 1 ? s.momentum * rm[i] + gi : gi;
                rp[i] -= lr * rm[i];
                break;
            case BACKEND_OPT_LION: {
                double u = b1 * rm[i] + (1 - b1) * gi;
                if (fabs(u) < 1e-6) skip[i] = 1;
                rp[i] -= lr * ((u > 0) - (u < 0) + wd * rp[i]);
                rm[i] = b2 * rm[i] + (1 - b2) * gi;
                break;
            }
            }
        }
        free(g);
    }
    float *gp = malloc(n * 4), *gm = malloc(n * 4);
    be->to_host(gp, d_p, n * 4);
    be->to_host(gm, d_m, n * 4);
    char nm[96];
    snprintf(nm, sizeof nm, "%s%s_params_3steps", KN[kind], lowp == 1 ? "_bf16" : lowp == 2 ? "_fp16" : "");
    cmp(nm, gp, rp, n, skip);
    snprintf(nm, sizeof nm, "%s%s_m_3steps", KN[kind], lowp == 1 ? "_bf16" : lowp == 2 ? "_fp16" : "");
    cmp(nm, gm, rm, n, skip);
    if (kind == BACKEND_OPT_ADAMW || kind == BACKEND_OPT_ADAM) {
        float *gv = malloc(n * 4);
        be->to_host(gv, d_v, n * 4);
        snprintf(nm, sizeof nm, "%s%s_v_3steps", KN[kind], lowp == 1 ? "_bf16" : lowp == 2 ? "_fp16" : "");
        cmp(nm, gv, rv, n, NULL);
        free(gv);
    }
    if (lowp) {
        uint16_t *hl = malloc(n * 2);
        be->to_host(hl, d_lp, n * 2);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) bad += hl[i] != (lowp == 1 ? half_bf16(gp[i]) : half_fp16(gp[i]));
        snprintf(nm, sizeof nm, "%s_%s_working_copy_bits", KN[kind], lowp == 1 ? "bf16" : "fp16");
        tu_check(bad == 0, nm, "%zu of %zu differ from the rounding of the updated master (%s)", bad, n, be->name);
        free(hl);
        be->free(NULL, MEM_WORKSPACE, d_lp, n * 2);
    }
    size_t nskip = 0;
    for (size_t i = 0; i < n; i++) nskip += skip[i];
    if (kind == BACKEND_OPT_LION) printf("lion: %zu of %zu elements with |u| < 1e-6 not compared\n", nskip, n);
    free(gp), free(gm), free(p), free(m), free(v), free(rp), free(rm), free(rv), free(skip);
    be->free(NULL, MEM_WORKSPACE, d_p, n * 4), be->free(NULL, MEM_WORKSPACE, d_m, n * 4);
    be->free(NULL, MEM_WORKSPACE, d_v, n * 4), be->free(NULL, MEM_WORKSPACE, d_g, n * 4);
}

static void test_sumsq(void) {
    size_t n = 3 * 4096 + 1000 + (size_t)rng_below(seed, 6, 0, 4096);
    float *x = hrand(n, -2, 2, 500);
    float *d_x = dput(x, n * 4);
    double a = be->sumsq(d_x, n), b = be->sumsq(d_x, n), ref = 0;
    for (size_t i = 0; i < n; i++) ref += (double)x[i] * x[i];
    double e = fabs(a - ref) / ref;
    tu_check(e <= 1e-6, "sumsq", "%.17g vs float64 %.17g: rel err %.3g (tol 1e-6, %s)", a, ref, e, be->name);
    tu_check(!(fabs(a * 1.001 - ref) / ref <= 1e-6), "sumsq_control_x1.001", "a scaled sum must fail");
    tu_check(memcmp(&a, &b, sizeof a) == 0, "sumsq_repeats", "%.17g, %.17g", a, b);
    Err er = {0};
    if (be->take_error(&er) != ST_OK) tu_check(0, "sumsq_ran", "%s", er.msg);
    free(x);
    be->free(NULL, MEM_WORKSPACE, d_x, n * 4);
}

int main(int argc, char **argv) {
    cpu_mode = argc > 1 && !strcmp(argv[1], "cpu");
    static Backend shim;
    Err e = {0};
    if (cpu_mode) {
        shim = *backend_cpu();
        shim.optim_update = cpu_update, shim.sumsq = cpu_sumsq;
        be = &shim;
    } else if (backend_find("cuda", &be, &e) != ST_OK) {
        fprintf(stderr, "test_cuda_optim: %s\n", e.msg);
        return 1;
    }
    if (!be->optim_update || !be->sumsq) {
        fprintf(stderr, "test_cuda_optim: backend %s has no optimizer entries\n", be->name);
        return 1;
    }
    tu_check((int)OPT_ADAMW == (int)BACKEND_OPT_ADAMW && (int)OPT_ADAM == (int)BACKEND_OPT_ADAM &&
                 (int)OPT_SGD == (int)BACKEND_OPT_SGD && (int)OPT_LION == (int)BACKEND_OPT_LION,
             "kinds_match_optim_h", "BACKEND_OPT_* are optim.h's OptimKind values");
    const char *env = getenv("ST_TEST_SEED");
    seed = env ? strtoull(env, NULL, 0) : ((uint64_t)time(NULL) << 20) ^ (uint64_t)getpid();
    printf("test_cuda_optim: backend %s, seed %llu\n", cpu_mode ? "cpu (optim/ in the table)" : be->name,
           (unsigned long long)seed);
    for (int k = 0; k < 4; k++) test_kind(k, 0);
    test_kind(BACKEND_OPT_ADAMW, 1);
    test_kind(BACKEND_OPT_LION, 2);
    test_sumsq();
    return tu_exit();
}
