/* test_llama_kernels.c — the Llama kernels (issue 15): RMSNorm, RoPE, SwiGLU and grouped-query
 * attention, forward and backward, fp32 and bf16.
 *
 * Oracles, each written here in float64 from the definitions (not from kernels.c):
 *  1. Forward: a direct float64 loop per kernel — RMSNorm x·w/sqrt(mean(x²)+eps); RoPE with Hugging
 *     Face's rotate-half pairing (x[i], x[i+hs/2]) and angles pos·theta^(-2i/hs) computed in double;
 *     SwiGLU silu(g)·u; attention as the naive softmax(Q K^T / sqrt(hs)) V with the causal mask,
 *     query head h on KV head h / (NH/KV), dropout masks drawn from the same counter RNG. fp32
 *     tolerance: relative 1e-6 for the elementwise kernels (one rounding per operation, st_expf
 *     ~2e-7), 1e-5 for attention (the test_kernels bound: fp32 sums over T keys).
 *  2. Backward: central finite differences of L = Σ R·f(x) on the float64 forward (h = 1e-5 · max(1,
 *     |x|): truncation and rounding both below 1e-9 relative), per input tensor, against the fp32
 *     analytic gradient: relative error ≤ 1e-4 (an fp32 gradient is good to ~1e-6; a wrong term is
 *     O(1e-1) or more). Attention at T = 300 (more than one 256-key block, where finite differences
 *     would take minutes) is checked against the float64 reference's own analytic backward, which
 *     is itself checked by finite differences at T = 20 (≤ 1e-7).
 *  3. bf16 attention (lowp = 1) against the float64 forward/backward of the unrounded inputs:
 *     bf16 keeps 8 significant bits (unit roundoff 2^-9 ≈ 2e-3); each GEMM operand is rounded once,
 *     so products are off by ~4e-3 relative at worst and random-sign sums of them by less in norm:
 *     bound 1e-2 (the test_kernels bound), and at least 1e-5, or the GEMMs did not run in bf16.
 *  4. Bit identities (memcmp): the _bf16 kernels = fp32 kernel then cast_bf16; residual_rmsnorm =
 *     residual_forward then rmsnorm_forward (dropout, in place); nt = 1 = nt = 2; rmsnorm_backward
 *     acc = 0 = acc = 1 into zeros; attention_gqa at KV = NH = attention_forward/_backward (fp32,
 *     bf16, dropout); a tensor-parallel slice of the heads (Dropout head0/heads) = those heads of the
 *     whole; GQA = the MHA kernel on K, V copied per query head (dK, dV: the sum over the group,
 *     1e-6).
 *  5. Negative controls, run here and required to FAIL the check they control: RoPE with the
 *     interleaved pairing (x[2i], x[2i+1]); GQA mapping query head h to KV head h % KV; RMSNorm's
 *     gradient without the projection term; SwiGLU's gate gradient without σ'; RoPE's backward
 *     turning forward instead of back; attention's dK/dV from one query head of the group only;
 *     and the memcmp identities telling (x·rstd)·w from x·(rstd·w). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "model/kernels.h"
#include "model/matmul.h"
#include "testutil.h"

/* Every buffer is tracked and freed at exit (the suite also runs under LeakSanitizer). */
static void *tracked[1024];
static int ntracked;
static void *track(void *p) {
    if (!p) {
        fprintf(stderr, "test_llama_kernels: out of memory\n");
        exit(1);
    }
    if (ntracked < 1024) tracked[ntracked++] = p;
    return p;
}
static void free_tracked(void) {
    while (ntracked) free(tracked[--ntracked]);
}
#define calloc(n, s) track(calloc((n), (s)))
#define malloc(s) track(malloc(s))

#define TOL_FD 1e-4

static float *randv(size_t n, uint64_t stream, float scale) {
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = scale * rng_normal(15, stream, i);
    return x;
}

static double *to_d(const float *x, size_t n) {
    double *y = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) y[i] = x[i];
    return y;
}

static double dotd(const double *a, const double *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* ||a - b|| / ||b|| with both in double. */
static double rel_dd(const double *a, const double *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) num += (a[i] - b[i]) * (a[i] - b[i]), den += b[i] * b[i];
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* A check that must fail: passes (as a test) when the controlled condition does NOT hold. */
static void control(int check_passed, const char *name, const char *fmt, double v) {
    char detail[160];
    snprintf(detail, sizeof detail, fmt, v);
    tu_check(!check_passed, name, "%s: the check %s (required: rejected)", detail,
             check_passed ? "PASSED" : "rejected it");
}

/* Central differences of loss(ctx) in each element of x (n), into num. */
typedef double (*LossFn)(void *ctx);
static void fd_grad(double *num, double *x, size_t n, LossFn loss, void *ctx) {
    for (size_t i = 0; i < n; i++) {
        double keep = x[i], h = 1e-5 * (fabs(keep) > 1 ? fabs(keep) : 1);
        x[i] = keep + h;
        double lp = loss(ctx);
        x[i] = keep - h;
        double lm = loss(ctx);
        x[i] = keep;
        num[i] = (lp - lm) / (2 * h);
    }
}

static double keep_scale(Dropout d, uint64_t i) {
    if (d.p <= 0) return 1.0;
    return rng_uniform(d.seed, d.stream, i + d.offset) >= d.p ? 1.0 / (1.0 - d.p) : 0.0;
}

/* ============================================================================================ */
/* RMSNorm                                                                                      */
/* ============================================================================================ */

typedef struct { double *x, *w, *R, *out; int N, C; double eps; } RmsRef;

static void ref_rmsnorm(double *out, double *rstd, const double *x, const double *w, int N, int C, double eps) {
    for (int i = 0; i < N; i++) {
        double s = 0;
        for (int c = 0; c < C; c++) s += x[(size_t)i * C + c] * x[(size_t)i * C + c];
        double r = 1.0 / sqrt(s / C + eps);
        if (rstd) rstd[i] = r;
        for (int c = 0; c < C; c++) out[(size_t)i * C + c] = x[(size_t)i * C + c] * r * w[c];
    }
}

static double rms_loss(void *p) {
    RmsRef *r = p;
    ref_rmsnorm(r->out, NULL, r->x, r->w, r->N, r->C, r->eps);
    return dotd(r->out, r->R, (size_t)r->N * r->C);
}

static void test_rmsnorm(void) {
    int N = 37, C = 50; /* a partial 64-row chunk, rows not a multiple of the vector width */
    size_t n = (size_t)N * C;
    float eps = 1e-5f;
    float *x = randv(n, 1, 1.5f), *w = randv(C, 2, 0.5f), *R = randv(n, 3, 1);
    for (int c = 0; c < C; c++) w[c] += 1.0f;
    for (int c = 0; c < C; c++) x[c] *= 1e-3f; /* a row whose mean square is near eps */
    float *out = calloc(n, 4), *rstd = calloc(N, 4);
    rmsnorm_forward(out, rstd, x, w, N, C, eps, 2);
    RmsRef r = {to_d(x, n), to_d(w, C), to_d(R, n), calloc(n, 8), N, C, eps};
    double *rs = calloc(N, 8), *ro = calloc(n, 8);
    ref_rmsnorm(ro, rs, r.x, r.w, N, C, eps);
    double e1 = tu_rel_err_fd(out, ro, n), e2 = tu_rel_err_fd(rstd, rs, N);
    tu_check(e1 <= 1e-6 && e2 <= 1e-6, "rmsnorm forward vs float64", "out rel_err=%.3g rstd rel_err=%.3g (tol 1e-6)",
             e1, e2);

    /* backward: dinp accumulates (starts from a nonzero residual gradient), dw overwritten (acc 0) */
    float *dx = randv(n, 4, 1), *dx0 = malloc(n * 4), *dw = randv(C, 5, 1);
    memcpy(dx0, dx, n * 4);
    float *scr = calloc(((size_t)(N + 63) / 64) * C, 4);
    rmsnorm_backward(dx, dw, scr, R, x, w, rstd, N, C, 0, 2);
    for (size_t i = 0; i < n; i++) dx[i] -= dx0[i];
    double *nx = calloc(n, 8), *nw = calloc(C, 8);
    fd_grad(nx, r.x, n, rms_loss, &r);
    fd_grad(nw, r.w, C, rms_loss, &r);
    double ex = tu_rel_err_fd(dx, nx, n), ew = tu_rel_err_fd(dw, nw, C);
    tu_check(ex <= TOL_FD, "rmsnorm dinp (+=) vs finite differences", "rel_err=%.3g (tol %.0e)", ex, TOL_FD);
    tu_check(ew <= TOL_FD, "rmsnorm dweight (acc 0) vs finite differences", "rel_err=%.3g (tol %.0e)", ew, TOL_FD);

    /* negative control: dx = rstd · dout · w, the projection term − n·mean(dn·n) dropped */
    double *bad = calloc(n, 8);
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++) bad[(size_t)i * C + c] = rs[i] * R[(size_t)i * C + c] * w[c];
    double eb = rel_dd(bad, nx, n);
    control(eb <= TOL_FD, "negative control: rmsnorm dinp without the projection term", "rel_err=%.3g", eb);

    /* bit identities: bf16 form, the fused residual, threads, acc */
    uint16_t *want = calloc(n, 2), *got = calloc(n, 2);
    float *rstd2 = calloc(N, 4);
    cast_bf16(want, out, n, 2);
    rmsnorm_forward_bf16(got, rstd2, x, w, N, C, eps, 2);
    int same_bf16 = !memcmp(want, got, n * 2) && !memcmp(rstd, rstd2, N * 4);
    tu_check(same_bf16, "rmsnorm_forward_bf16", "bf16 output and rstd bit-identical to rmsnorm_forward + cast_bf16");
    /* control of the memcmp comparisons: the same formula with the other association, x·(rstd·w)
     * instead of (x·rstd)·w, is a few ulps off in some elements and must be told apart */
    float *alt = calloc(n, 4);
    int ndiff = 0;
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++) {
            alt[(size_t)i * C + c] = x[(size_t)i * C + c] * (rstd[i] * w[c]);
            ndiff += alt[(size_t)i * C + c] != out[(size_t)i * C + c];
        }
    control(!memcmp(out, alt, n * 4), "negative control: bit identity with x*(rstd*w) instead of (x*rstd)*w",
            "%g elements differ", (double)ndiff);

    for (int pi = 0; pi < 2; pi++) {
        Dropout d = {pi ? 0.25f : 0.0f, 5, 9, 123};
        float *a = randv(n, 6, 1), *b = randv(n, 7, 1);
        float *res1 = calloc(n, 4), *o1 = calloc(n, 4), *s1 = calloc(N, 4);
        float *res2 = malloc(n * 4), *o2 = calloc(n, 4), *s2 = calloc(N, 4);
        uint16_t *l1 = calloc(n, 2), *l2 = calloc(n, 2);
        float *res3 = calloc(n, 4), *s3 = calloc(N, 4);
        residual_forward(res1, a, b, n, d, 2);
        rmsnorm_forward(o1, s1, res1, w, N, C, eps, 2);
        cast_bf16(l1, o1, n, 2);
        memcpy(res2, a, n * 4);
        residual_rmsnorm_forward(res2, o2, s2, res2, b, d, w, N, C, eps, 2); /* in place: res aliases a */
        residual_rmsnorm_forward_bf16(res3, l2, s3, a, b, d, w, N, C, eps, 1);
        int same = !memcmp(res1, res2, n * 4) && !memcmp(o1, o2, n * 4) && !memcmp(s1, s2, N * 4);
        int same_lp = !memcmp(res1, res3, n * 4) && !memcmp(l1, l2, n * 2) && !memcmp(s1, s3, N * 4);
        tu_check(same, pi ? "residual_rmsnorm_forward (dropout 0.25, in place)" : "residual_rmsnorm_forward (in place)",
                 "max |out diff| %.3g: bit-identical to residual_forward + rmsnorm_forward required",
                 tu_max_abs_diff_f(o1, o2, n));
        tu_check(same_lp, pi ? "residual_rmsnorm_forward_bf16 (1 thread, dropout 0.25)"
                          : "residual_rmsnorm_forward_bf16 (1 thread)",
                 "residual, bf16 output and rstd bit-identical to residual_forward + rmsnorm_forward + cast_bf16");
    }

    /* threads and acc on more rows (several 64-row chunks) */
    {
        int M = 200, D = 96;
        size_t m = (size_t)M * D;
        float *xx = randv(m, 8, 1), *ww = randv(D, 9, 1), *gg = randv(m, 10, 1);
        float *o1 = calloc(m, 4), *o2 = calloc(m, 4), *r1 = calloc(M, 4), *r2 = calloc(M, 4);
        float *d1 = calloc(m, 4), *d2 = calloc(m, 4), *w1 = calloc(D, 4), *w2 = malloc(D * 4);
        float *sc = calloc(((size_t)(M + 63) / 64) * D, 4);
        rmsnorm_forward(o1, r1, xx, ww, M, D, eps, 1);
        rmsnorm_forward(o2, r2, xx, ww, M, D, eps, 2);
        rmsnorm_backward(d1, w1, sc, gg, xx, ww, r1, M, D, 1, 1); /* acc 1 into zeros */
        for (int c = 0; c < D; c++) w2[c] = NAN;                  /* acc 0 must overwrite */
        rmsnorm_backward(d2, w2, sc, gg, xx, ww, r2, M, D, 0, 2);
        tu_check(!memcmp(o1, o2, m * 4) && !memcmp(r1, r2, M * 4) && !memcmp(d1, d2, m * 4) && !memcmp(w1, w2, D * 4),
                 "rmsnorm forward/backward bit-identical for 1 and 2 threads, acc 0 = acc 1 into zeros",
                 "N=%d C=%d memcmp equal", M, D);
    }
}

/* ============================================================================================ */
/* RoPE                                                                                         */
/* ============================================================================================ */

typedef struct {
    double *x, *R, *out;
    int B, T, NH, KV, hs, pos0, interleaved;
    double theta;
    double *co, *si; /* cos, sin of (pos0 + t)·theta^(-2i/hs), (T, hs/2): rope_ref_angles */
} RopeRef;

static void rope_ref_angles(RopeRef *r) {
    int half = r->hs / 2;
    r->co = calloc((size_t)r->T * half, 8), r->si = calloc((size_t)r->T * half, 8);
    for (int t = 0; t < r->T; t++)
        for (int i = 0; i < half; i++) {
            double ang = (double)(r->pos0 + t) * pow(r->theta, -2.0 * i / r->hs);
            r->co[(size_t)t * half + i] = cos(ang), r->si[(size_t)t * half + i] = sin(ang);
        }
}

/* The definition: in each q and k head, pair p = (i, i + hs/2) (rotate-half; interleaved: (2i,
 * 2i+1)) at position pos0 + t turns by (pos0 + t)·theta^(-2i/hs). */
static void ref_rope(const RopeRef *r, const double *x, double *out) {
    int ld = (r->NH + 2 * r->KV) * r->hs, half = r->hs / 2;
    for (int b = 0; b < r->B; b++)
        for (int t = 0; t < r->T; t++) {
            const double *xr = x + ((size_t)b * r->T + t) * ld;
            double *o = out + ((size_t)b * r->T + t) * ld;
            memcpy(o, xr, sizeof(double) * ld);
            for (int h = 0; h < r->NH + r->KV; h++)
                for (int i = 0; i < half; i++) {
                    double co = r->co[(size_t)t * half + i], si = r->si[(size_t)t * half + i];
                    int i0 = r->interleaved ? 2 * i : i, i1 = r->interleaved ? 2 * i + 1 : i + half;
                    double a = xr[h * r->hs + i0], c = xr[h * r->hs + i1];
                    o[h * r->hs + i0] = a * co - c * si;
                    o[h * r->hs + i1] = c * co + a * si;
                }
        }
}

static double rope_loss(void *p) {
    RopeRef *r = p;
    ref_rope(r, r->x, r->out);
    return dotd(r->out, r->R, (size_t)r->B * r->T * (r->NH + 2 * r->KV) * r->hs);
}

static void test_rope_case(int NH, int KV, int hs, int pos0, double theta) {
    int B = 2, T = 7, ld = (NH + 2 * KV) * hs;
    size_t n = (size_t)B * T * ld;
    float *cs = calloc((size_t)(pos0 + T) * hs, 4);
    double *inv = malloc((size_t)hs / 2 * 8);
    rope_inv_freq(inv, hs, theta);
    rope_table(cs, pos0 + T, hs, inv);
    float *x = randv(n, 20, 1), *y = malloc(n * 4), *R = randv(n, 21, 1);
    memcpy(y, x, n * 4);
    rope_forward(y, cs, NULL, B, T, NH, KV, hs, pos0, 2);
    RopeRef r = {to_d(x, n), to_d(R, n), calloc(n, 8), B, T, NH, KV, hs, pos0, 0, theta, NULL, NULL};
    rope_ref_angles(&r);
    double *ref = calloc(n, 8);
    ref_rope(&r, r.x, ref);
    double e = tu_rel_err_fd(y, ref, n);
    int vsame = 1;
    for (int bt = 0; bt < B * T; bt++) /* v untouched, bit for bit */
        vsame &= !memcmp(y + (size_t)bt * ld + (NH + KV) * hs, x + (size_t)bt * ld + (NH + KV) * hs, KV * hs * 4);
    char name[128];
    snprintf(name, sizeof name, "rope forward vs float64 rotate-half (NH=%d KV=%d hs=%d pos0=%d theta=%g)", NH, KV, hs,
             pos0, theta);
    tu_check(e <= 1e-6 && vsame, name, "rel_err=%.3g (tol 1e-6), v untouched: %d", e, vsame);
    /* negative control: the interleaved (GPT-J / Meta checkpoint) pairing must not match */
    RopeRef ri = r;
    ri.interleaved = 1;
    double *refi = calloc(n, 8);
    ref_rope(&ri, ri.x, refi);
    double ei = tu_rel_err_fd(y, refi, n);
    snprintf(name, sizeof name, "negative control: rope vs the interleaved pairing (hs=%d)", hs);
    control(ei <= 1e-6, name, "rel_err=%.3g", ei);

    /* backward: rotate R back; against finite differences of the float64 forward */
    float *g = malloc(n * 4);
    memcpy(g, R, n * 4);
    rope_backward(g, cs, NULL, B, T, NH, KV, hs, pos0, 2);
    double *num = calloc(n, 8);
    fd_grad(num, r.x, n, rope_loss, &r);
    double eg = tu_rel_err_fd(g, num, n);
    snprintf(name, sizeof name, "rope backward vs finite differences (NH=%d KV=%d hs=%d)", NH, KV, hs);
    tu_check(eg <= TOL_FD, name, "rel_err=%.3g (tol %.0e)", eg, TOL_FD);
    /* negative control: the forward rotation applied to the gradient (not its transpose) */
    float *gbad = malloc(n * 4);
    memcpy(gbad, R, n * 4);
    rope_forward(gbad, cs, NULL, B, T, NH, KV, hs, pos0, 2);
    double eb = tu_rel_err_fd(gbad, num, n);
    snprintf(name, sizeof name, "negative control: rope backward turning forward (hs=%d)", hs);
    control(eb <= TOL_FD, name, "rel_err=%.3g", eb);
    /* threads */
    float *y1 = malloc(n * 4);
    memcpy(y1, x, n * 4);
    rope_forward(y1, cs, NULL, B, T, NH, KV, hs, pos0, 1);
    snprintf(name, sizeof name, "rope bit-identical for 1 and 2 threads (hs=%d)", hs);
    tu_check(!memcmp(y, y1, n * 4), name, "memcmp equal");
}

static void test_rope(void) {
    /* rope_table against double: for each t, hs/2 cosines then hs/2 sines, rounded once */
    int T = 4096, hs = 128;
    float *cs = calloc((size_t)T * hs, 4);
    double inv[64];
    rope_inv_freq(inv, hs, 500000.0);
    rope_table(cs, T, hs, inv);
    int bad = 0;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < hs / 2; i++) {
            double a = t * pow(500000.0, -2.0 * i / hs);
            bad += cs[(size_t)t * hs + i] != (float)cos(a) || cs[(size_t)t * hs + hs / 2 + i] != (float)sin(a);
        }
    tu_check(bad == 0, "rope_table (T=4096, hs=128, theta=500000) = float64 angles rounded once", "%d of %d differ",
             bad, T * hs);
    test_rope_case(4, 2, 16, 0, 10000.0);
    test_rope_case(6, 2, 8, 3, 10000.0);     /* pos0 > 0: the KV-cache decode offset */
    test_rope_case(2, 2, 64, 3000, 500000.0); /* large angles, Llama 3's theta */
}

/* ============================================================================================ */
/* SwiGLU                                                                                       */
/* ============================================================================================ */

typedef struct { double *h, *R, *out; int N, F; } SwiRef;

static void ref_swiglu(double *out, const double *h, int N, int F) {
    for (int i = 0; i < N; i++)
        for (int j = 0; j < F; j++) {
            double g = h[(size_t)i * 2 * F + j], u = h[(size_t)i * 2 * F + F + j];
            out[(size_t)i * F + j] = g / (1.0 + exp(-g)) * u;
        }
}

static double swi_loss(void *p) {
    SwiRef *s = p;
    ref_swiglu(s->out, s->h, s->N, s->F);
    return dotd(s->out, s->R, (size_t)s->N * s->F);
}

static void test_swiglu(void) {
    int N = 9, F = 37;
    size_t nf = (size_t)N * F, nh = 2 * nf;
    float *h = randv(nh, 30, 3), *R = randv(nf, 31, 1);
    /* the tails: silu saturates (x) and vanishes (x·e^x) */
    h[0] = 30, h[1] = -30, h[2] = 90, h[3] = -90, h[4] = 0, h[5] = 1e-3f;
    float *out = calloc(nf, 4);
    swiglu_forward(out, h, N, F, 2);
    SwiRef s = {to_d(h, nh), to_d(R, nf), calloc(nf, 8), N, F};
    double *ref = calloc(nf, 8);
    ref_swiglu(ref, s.h, N, F);
    double e = tu_rel_err_fd(out, ref, nf);
    tu_check(e <= 1e-6, "swiglu forward vs float64", "rel_err=%.3g (tol 1e-6)", e);

    float *dh = calloc(nh, 4);
    swiglu_backward(dh, R, h, N, F, 2);
    double *num = calloc(nh, 8);
    fd_grad(num, s.h, nh, swi_loss, &s);
    /* gate and up halves of each row reported separately */
    float *dg = calloc(nf, 4), *du = calloc(nf, 4);
    double *ng = calloc(nf, 8), *nu = calloc(nf, 8);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < F; j++) {
            dg[(size_t)i * F + j] = dh[(size_t)i * 2 * F + j], du[(size_t)i * F + j] = dh[(size_t)i * 2 * F + F + j];
            ng[(size_t)i * F + j] = num[(size_t)i * 2 * F + j], nu[(size_t)i * F + j] = num[(size_t)i * 2 * F + F + j];
        }
    double eg = tu_rel_err_fd(dg, ng, nf), eu = tu_rel_err_fd(du, nu, nf);
    tu_check(eg <= TOL_FD, "swiglu dgate vs finite differences", "rel_err=%.3g (tol %.0e)", eg, TOL_FD);
    tu_check(eu <= TOL_FD, "swiglu dup vs finite differences", "rel_err=%.3g (tol %.0e)", eu, TOL_FD);
    /* negative control: dgate = dout · u · σ(g), the σ'·g term dropped */
    double *bad = calloc(nf, 8);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < F; j++) {
            double g = h[(size_t)i * 2 * F + j], u = h[(size_t)i * 2 * F + F + j];
            bad[(size_t)i * F + j] = R[(size_t)i * F + j] * u / (1.0 + exp(-g));
        }
    double eb = rel_dd(bad, ng, nf);
    control(eb <= TOL_FD, "negative control: swiglu dgate without the sigma' term", "rel_err=%.3g", eb);

    /* bit identities: bf16 forms, threads */
    {
        int M = 130, G = 300;
        size_t m = (size_t)M * G;
        float *hh = randv(2 * m, 32, 2), *dd = randv(m, 33, 1);
        float *o1 = calloc(m, 4), *o2 = calloc(m, 4), *g1 = calloc(2 * m, 4), *g2 = calloc(2 * m, 4);
        uint16_t *l1 = calloc(2 * m, 2), *l2 = calloc(2 * m, 2);
        swiglu_forward(o1, hh, M, G, 2);
        swiglu_forward(o2, hh, M, G, 1);
        cast_bf16(l1, o1, m, 2);
        swiglu_forward_bf16(l2, hh, M, G, 2);
        tu_check(!memcmp(l1, l2, m * 2), "swiglu_forward_bf16", "bit-identical to swiglu_forward + cast_bf16");
        swiglu_backward(g1, dd, hh, M, G, 2);
        swiglu_backward(g2, dd, hh, M, G, 1);
        cast_bf16(l1, g1, 2 * m, 2);
        swiglu_backward_bf16(l2, dd, hh, M, G, 2);
        tu_check(!memcmp(l1, l2, 2 * m * 2), "swiglu_backward_bf16", "bit-identical to swiglu_backward + cast_bf16");
        tu_check(!memcmp(o1, o2, m * 4) && !memcmp(g1, g2, 2 * m * 4),
                 "swiglu forward/backward bit-identical for 1 and 2 threads", "memcmp equal");
    }
}

/* ============================================================================================ */
/* Grouped-query attention                                                                      */
/* ============================================================================================ */

/* Which KV head query head h reads: the definition (groups of NH/KV adjacent query heads), and
 * the wrong one for the negative control. */
typedef int (*KvMap)(int h, int NH, int KV);
static int kv_group(int h, int NH, int KV) { return h / (NH / KV); }
static int kv_modulo(int h, int NH, int KV) { return h % KV; }

typedef struct {
    int B, T, NH, KV, hs;
    Dropout d;
    KvMap map;
    int one_head_dkv; /* negative control: dK, dV from the group's first query head only */
    double *qkv, *R, *out;
} AttRef;

/* out (B, T, NH·hs) = softmax(Q K^T / sqrt(hs), causal) · drop · V per query head; with dy, also
 * dqkv (B, T, (NH + 2KV)·hs) from the chain rule written out (dV = Pd^T dY, dP = dY V^T ∘ drop,
 * dS = P ∘ (dP − rowsum(P ∘ dP)) / sqrt(hs), dQ = dS K, dK = dS^T Q), summed into the KV heads. */
static void ref_attention(const AttRef *a, const double *qkv, double *out, const double *dy, double *dqkv) {
    int B = a->B, T = a->T, NH = a->NH, KV = a->KV, hs = a->hs, ld = (NH + 2 * KV) * hs, C = NH * hs;
    double sc = 1.0 / sqrt((double)hs);
    /* (malloc): the real one, not the tracking macro; this runs thousands of times under FD */
    double *P = (malloc)(sizeof(double) * T * T), *dP = (malloc)(sizeof(double) * T * T);
    double *K = (malloc)(sizeof(double) * T * T);
    if (!P || !dP || !K) {
        fprintf(stderr, "test_llama_kernels: out of memory\n");
        exit(1);
    }
    if (dqkv) memset(dqkv, 0, sizeof(double) * B * T * ld);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            int kh = a->map(h, NH, KV);
            const double *q = qkv + (size_t)b * T * ld + h * hs, *k = qkv + (size_t)b * T * ld + (NH + kh) * hs;
            const double *v = k + KV * hs;
            uint64_t base = ((uint64_t)b * NH + h) * T * T; /* dropout index of (b, query head h, i, j) */
            for (int i = 0; i < T; i++)
                for (int j = 0; j <= i; j++) K[(size_t)i * T + j] = keep_scale(a->d, base + (size_t)i * T + j);
            for (int i = 0; i < T; i++) {
                double mx = -1e300, s = 0;
                for (int j = 0; j <= i; j++) {
                    double x = 0;
                    for (int c = 0; c < hs; c++) x += q[(size_t)i * ld + c] * k[(size_t)j * ld + c];
                    P[(size_t)i * T + j] = x * sc;
                    if (x * sc > mx) mx = x * sc;
                }
                for (int j = 0; j <= i; j++) s += P[(size_t)i * T + j] = exp(P[(size_t)i * T + j] - mx);
                for (int j = 0; j <= i; j++) P[(size_t)i * T + j] /= s;
                for (int c = 0; c < hs; c++) {
                    double x = 0;
                    for (int j = 0; j <= i; j++)
                        x += P[(size_t)i * T + j] * K[(size_t)i * T + j] * v[(size_t)j * ld + c];
                    out[((size_t)b * T + i) * C + h * hs + c] = x;
                }
            }
            if (!dqkv) continue;
            const double *g = dy + (size_t)b * T * C + h * hs;
            double *dq = dqkv + (size_t)b * T * ld + h * hs, *dk = dqkv + (size_t)b * T * ld + (NH + kh) * hs;
            double *dv = dk + KV * hs;
            int add_kv = !a->one_head_dkv || h % (NH / KV) == 0;
            for (int i = 0; i < T; i++) {
                double rs = 0;
                for (int j = 0; j <= i; j++) {
                    double x = 0;
                    for (int c = 0; c < hs; c++) x += g[(size_t)i * C + c] * v[(size_t)j * ld + c];
                    x *= K[(size_t)i * T + j];
                    dP[(size_t)i * T + j] = x;
                    rs += x * P[(size_t)i * T + j];
                }
                for (int j = 0; j <= i; j++)
                    dP[(size_t)i * T + j] = P[(size_t)i * T + j] * (dP[(size_t)i * T + j] - rs) * sc;
            }
            for (int i = 0; i < T; i++)
                for (int j = 0; j <= i; j++) {
                    double pd = P[(size_t)i * T + j] * K[(size_t)i * T + j], ds = dP[(size_t)i * T + j];
                    for (int c = 0; c < hs; c++) {
                        dq[(size_t)i * ld + c] += ds * k[(size_t)j * ld + c];
                        if (add_kv) {
                            dv[(size_t)j * ld + c] += pd * g[(size_t)i * C + c];
                            dk[(size_t)j * ld + c] += ds * q[(size_t)i * ld + c];
                        }
                    }
                }
        }
    free(P), free(dP), free(K);
}

static double att_loss(void *p) {
    AttRef *a = p;
    ref_attention(a, a->qkv, a->out, NULL, NULL);
    return dotd(a->out, a->R, (size_t)a->B * a->T * a->NH * a->hs);
}

/* Runs the kernel (fp32 or bf16) on random inputs, compares with the float64 reference; at small
 * T also checks the reference's backward and the kernel's by finite differences. */
static void test_gqa_case(int B, int T, int NH, int KV, int hs, float p, int lowp) {
    int ld = (NH + 2 * KV) * hs, C = NH * hs;
    size_t nq = (size_t)B * T * ld, no = (size_t)B * T * C;
    Dropout d = {p, 21, 5};
    float *qkv = randv(nq, 40 + T, 1), *dy = randv(no, 41 + T, 1);
    float *out = calloc(no, 4), *lse = calloc((size_t)B * NH * T, 4), *dqkv = calloc(nq, 4);
    float *scr = calloc(attention_gqa_scratch_floats(T, hs, NH / KV, 2), 4);
    attention_gqa_forward(out, lse, scr, qkv, NULL, B, T, NH, KV, hs, 1.0f / sqrtf((float)hs), d, lowp, 2);
    attention_gqa_backward(dqkv, scr, dy, qkv, out, lse, NULL, B, T, NH, KV, hs, 1.0f / sqrtf((float)hs), d, lowp, 2);
    AttRef a = {B, T, NH, KV, hs, d, kv_group, 0, to_d(qkv, nq), to_d(dy, no), calloc(no, 8)};
    double *ref = calloc(no, 8), *dref = calloc(nq, 8);
    ref_attention(&a, a.qkv, ref, a.R, dref);
    double e1 = tu_rel_err_fd(out, ref, no), e2 = tu_rel_err_fd(dqkv, dref, nq);
    char name[160], cfg[96];
    snprintf(cfg, sizeof cfg, "B=%d T=%d NH=%d KV=%d hs=%d%s", B, T, NH, KV, hs, p > 0 ? " dropout" : "");
    if (lowp) {
        snprintf(name, sizeof name, "attention_gqa bf16 vs float64 (%s)", cfg);
        tu_check(e1 <= 1e-2 && e2 <= 1e-2 && e1 > 1e-5 && e2 > 1e-5, name,
                 "forward rel_err=%.3g backward rel_err=%.3g (expected in (1e-5, 1e-2])", e1, e2);
    } else {
        snprintf(name, sizeof name, "attention_gqa fp32 vs float64 (%s)", cfg);
        tu_check(e1 <= 1e-5 && e2 <= 1e-5, name, "forward rel_err=%.3g backward rel_err=%.3g (tol 1e-5)", e1, e2);
    }
    if (KV < NH && !lowp) { /* negative control: query head h on KV head h % KV */
        AttRef m = a;
        m.map = kv_modulo;
        double *refm = calloc(no, 8);
        ref_attention(&m, m.qkv, refm, NULL, NULL);
        double em = tu_rel_err_fd(out, refm, no);
        snprintf(name, sizeof name, "negative control: GQA reference with KV head h %% KV (%s)", cfg);
        control(em <= 1e-5, name, "forward rel_err=%.3g", em);
    }
    if (T > 32 || lowp) return;
    /* finite differences of the float64 forward: the reference backward and the kernel's */
    double *num = calloc(nq, 8);
    fd_grad(num, a.qkv, nq, att_loss, &a);
    double er = rel_dd(dref, num, nq), ek = tu_rel_err_fd(dqkv, num, nq);
    snprintf(name, sizeof name, "attention float64 reference backward vs finite differences (%s)", cfg);
    tu_check(er <= 1e-7, name, "rel_err=%.3g (tol 1e-7)", er);
    snprintf(name, sizeof name, "attention_gqa dqkv vs finite differences (%s)", cfg);
    tu_check(ek <= TOL_FD, name, "rel_err=%.3g (tol %.0e)", ek, TOL_FD);
    if (KV < NH) { /* negative control: dK, dV not summed over the group */
        AttRef o = a;
        o.one_head_dkv = 1;
        double *dbad = calloc(nq, 8), *outb = calloc(no, 8);
        ref_attention(&o, o.qkv, outb, o.R, dbad);
        double eb = rel_dd(dbad, num, nq);
        snprintf(name, sizeof name, "negative control: dK, dV from one query head of the group (%s)", cfg);
        control(eb <= TOL_FD, name, "rel_err=%.3g", eb);
    }
}

/* GQA against the MHA kernel: at KV = NH the same call (bit for bit); at KV < NH the MHA kernel on
 * K, V copied per query head (same arithmetic per head; dK, dV = the sum over the group's copies). */
static void test_gqa_vs_mha(int B, int T, int NH, int KV, int hs, float p, int lowp) {
    int G = NH / KV, ld = (NH + 2 * KV) * hs, C = NH * hs, C3 = 3 * C;
    size_t nq = (size_t)B * T * ld, no = (size_t)B * T * C, n3 = (size_t)B * T * C3;
    Dropout d = {p, 33, 7};
    float *qkv = randv(nq, 50, 1), *dy = randv(no, 51, 1), *x3 = calloc(n3, 4);
    for (size_t bt = 0; bt < (size_t)B * T; bt++)
        for (int h = 0; h < NH; h++) {
            int kh = h / G;
            memcpy(x3 + bt * C3 + h * hs, qkv + bt * ld + h * hs, hs * 4);
            memcpy(x3 + bt * C3 + C + h * hs, qkv + bt * ld + (NH + kh) * hs, hs * 4);
            memcpy(x3 + bt * C3 + 2 * C + h * hs, qkv + bt * ld + (NH + KV + kh) * hs, hs * 4);
        }
    float *o1 = calloc(no, 4), *l1 = calloc((size_t)B * NH * T, 4), *g1 = calloc(nq, 4);
    float *o2 = calloc(no, 4), *l2 = calloc((size_t)B * NH * T, 4), *g2 = calloc(n3, 4);
    float *scr = calloc(attention_gqa_scratch_floats(T, hs, G, 2), 4);
    float *scr3 = calloc(attention_scratch_floats(T, hs, 2), 4);
    attention_gqa_forward(o1, l1, scr, qkv, NULL, B, T, NH, KV, hs, 1.0f / sqrtf((float)hs), d, lowp, 2);
    attention_gqa_backward(g1, scr, dy, qkv, o1, l1, NULL, B, T, NH, KV, hs, 1.0f / sqrtf((float)hs), d, lowp, 2);
    attention_forward(o2, l2, scr3, x3, B, T, C, NH, d, lowp, 2);
    attention_backward(g2, scr3, dy, x3, o2, l2, B, T, C, NH, d, lowp, 2);
    char name[160];
    snprintf(name, sizeof name,
             "attention_gqa = attention_forward/_backward on K, V per query head (B=%d T=%d NH=%d KV=%d%s%s)", B, T, NH,
             KV, lowp ? " bf16" : "", p > 0 ? " dropout" : "");
    if (KV == NH) {
        tu_check(!memcmp(o1, o2, no * 4) && !memcmp(l1, l2, (size_t)B * NH * T * 4) && !memcmp(g1, g2, nq * 4), name,
                 "out, lse, dqkv bit-identical required");
        return;
    }
    /* the MHA gradient folded back onto the GQA layout, group copies summed in double */
    double *gf = calloc(nq, 8);
    for (size_t bt = 0; bt < (size_t)B * T; bt++)
        for (int h = 0; h < NH; h++) {
            int kh = h / G;
            for (int c = 0; c < hs; c++) {
                gf[bt * ld + h * hs + c] = g2[bt * C3 + h * hs + c];
                gf[bt * ld + (NH + kh) * hs + c] += g2[bt * C3 + C + h * hs + c];
                gf[bt * ld + (NH + KV + kh) * hs + c] += g2[bt * C3 + 2 * C + h * hs + c];
            }
        }
    double eo = tu_max_abs_diff_f(o1, o2, no), el = tu_max_abs_diff_f(l1, l2, (size_t)B * NH * T);
    double eg = tu_rel_err_fd(g1, gf, nq);
    tu_check(eo == 0 && el == 0 && eg <= 1e-6, name,
             "out, lse max diff %.3g, %.3g (bit-identical required); dqkv rel_err=%.3g (tol 1e-6)", eo, el, eg);
}

/* Threads: nt = 1 and 2 give the same bits (B·KV odd: one thread takes more KV heads). */
static void test_gqa_threads(int lowp) {
    int B = 3, T = 100, NH = 3, KV = 1, hs = 16, ld = (NH + 2 * KV) * hs, C = NH * hs;
    size_t nq = (size_t)B * T * ld, no = (size_t)B * T * C;
    Dropout d = {0.1f, 3, 3};
    float *qkv = randv(nq, 60, 1), *dy = randv(no, 61, 1);
    float *o[2], *l[2], *g[2];
    float *scr = calloc(attention_gqa_scratch_floats(T, hs, NH / KV, 2), 4);
    for (int k = 0; k < 2; k++) {
        o[k] = calloc(no, 4), l[k] = calloc((size_t)B * NH * T, 4), g[k] = calloc(nq, 4);
        attention_gqa_forward(o[k], l[k], scr, qkv, NULL, B, T, NH, KV, hs, 1.0f / sqrtf((float)hs), d, lowp, k + 1);
        attention_gqa_backward(g[k], scr, dy, qkv, o[k], l[k], NULL, B, T, NH, KV, hs, 1.0f / sqrtf((float)hs), d, lowp, k + 1);
    }
    tu_check(!memcmp(o[0], o[1], no * 4) && !memcmp(l[0], l[1], (size_t)B * NH * T * 4) && !memcmp(g[0], g[1], nq * 4),
             lowp ? "attention_gqa bf16 bit-identical for 1 and 2 threads (B=3 KV=1 NH=3, dropout)"
                  : "attention_gqa bit-identical for 1 and 2 threads (B=3 KV=1 NH=3, dropout)",
             "out, lse, dqkv memcmp equal");
}

/* Tensor parallelism splits the heads: a rank holds query heads [h0, h0 + NH/2) and their KV heads
 * and passes Dropout head0/heads; its outputs must be those heads of the whole computation. */
static void test_gqa_tp_slice(void) {
    int B = 2, T = 40, NH = 4, KV = 2, hs = 8, ld = (NH + 2 * KV) * hs, C = NH * hs;
    int nh = NH / 2, kv = KV / 2, lds = (nh + 2 * kv) * hs, Cs = nh * hs;
    size_t nq = (size_t)B * T * ld, no = (size_t)B * T * C;
    Dropout d = {0.2f, 8, 2};
    float *qkv = randv(nq, 70, 1), *dy = randv(no, 71, 1);
    float *o = calloc(no, 4), *l = calloc((size_t)B * NH * T, 4), *g = calloc(nq, 4);
    float *scr = calloc(attention_gqa_scratch_floats(T, hs, NH / KV, 2), 4);
    attention_gqa_forward(o, l, scr, qkv, NULL, B, T, NH, KV, hs, 1.0f / sqrtf((float)hs), d, 0, 2);
    attention_gqa_backward(g, scr, dy, qkv, o, l, NULL, B, T, NH, KV, hs, 1.0f / sqrtf((float)hs), d, 0, 2);
    int ok = 1;
    for (int r = 0; r < 2; r++) {
        float *xs = calloc((size_t)B * T * lds, 4), *dys = calloc((size_t)B * T * Cs, 4);
        float *os = calloc((size_t)B * T * Cs, 4), *ls = calloc((size_t)B * nh * T, 4);
        float *gs = calloc((size_t)B * T * lds, 4);
        for (size_t bt = 0; bt < (size_t)B * T; bt++) {
            memcpy(xs + bt * lds, qkv + bt * ld + r * nh * hs, Cs * 4);
            memcpy(xs + bt * lds + Cs, qkv + bt * ld + (NH + r * kv) * hs, kv * hs * 4);
            memcpy(xs + bt * lds + Cs + kv * hs, qkv + bt * ld + (NH + KV + r * kv) * hs, kv * hs * 4);
            memcpy(dys + bt * Cs, dy + bt * C + r * Cs, Cs * 4);
        }
        Dropout ds = d;
        ds.head0 = r * nh, ds.heads = NH;
        attention_gqa_forward(os, ls, scr, xs, NULL, B, T, nh, kv, hs, 1.0f / sqrtf((float)hs), ds, 0, 2);
        attention_gqa_backward(gs, scr, dys, xs, os, ls, NULL, B, T, nh, kv, hs, 1.0f / sqrtf((float)hs), ds, 0, 2);
        for (size_t bt = 0; bt < (size_t)B * T; bt++) {
            ok &= !memcmp(os + bt * Cs, o + bt * C + r * Cs, Cs * 4);
            ok &= !memcmp(gs + bt * lds, g + bt * ld + r * nh * hs, Cs * 4);
            ok &= !memcmp(gs + bt * lds + Cs, g + bt * ld + (NH + r * kv) * hs, kv * hs * 4);
            ok &= !memcmp(gs + bt * lds + Cs + kv * hs, g + bt * ld + (NH + KV + r * kv) * hs, kv * hs * 4);
        }
        for (int b = 0; b < B; b++)
            ok &= !memcmp(ls + (size_t)b * nh * T, l + ((size_t)b * NH + r * nh) * T, (size_t)nh * T * 4);
    }
    tu_check(ok, "attention_gqa on a tensor-parallel half of the heads (Dropout head0/heads)",
             "out, lse, dqkv bit-identical to those heads of the whole (NH=4 KV=2, dropout 0.2)");
}

static void test_attention(void) {
    /* finite differences (T = 20) and the negative controls; NH=4 KV=2, NH=6 KV=2 (group 3), KV = NH */
    test_gqa_case(2, 20, 4, 2, 8, 0.0f, 0);
    test_gqa_case(2, 20, 4, 2, 8, 0.2f, 0);
    test_gqa_case(1, 20, 6, 2, 8, 0.0f, 0);
    test_gqa_case(2, 20, 3, 3, 8, 0.0f, 0);
    /* several query blocks and 256-key blocks (online softmax) against the float64 reference */
    test_gqa_case(1, 300, 6, 2, 16, 0.0f, 0);
    test_gqa_case(1, 300, 6, 2, 16, 0.2f, 0);
    test_gqa_case(2, 150, 4, 4, 16, 0.0f, 0);
    test_gqa_case(1, 300, 8, 2, 64, 0.0f, 1);
    test_gqa_case(1, 300, 8, 2, 64, 0.2f, 1);
    test_gqa_case(1, 200, 4, 4, 64, 0.0f, 1);
    /* against the GPT-2 kernel */
    test_gqa_vs_mha(2, 100, 4, 4, 16, 0.0f, 0);
    test_gqa_vs_mha(2, 100, 4, 4, 16, 0.2f, 0);
    test_gqa_vs_mha(2, 300, 4, 4, 32, 0.2f, 1);
    test_gqa_vs_mha(2, 100, 6, 2, 16, 0.0f, 0);
    test_gqa_vs_mha(2, 300, 4, 2, 16, 0.2f, 0);
    test_gqa_vs_mha(1, 300, 6, 3, 32, 0.2f, 1);
    test_gqa_threads(0);
    test_gqa_threads(1);
    test_gqa_tp_slice();
}

int main(void) {
    test_rmsnorm();
    test_rope();
    test_swiglu();
    test_attention();
    Err e;
    Status s = mm_take_error(&e);
    tu_check(s == ST_OK, "no GEMM failed", "status %d", s);
    free_tracked();
    return tu_exit();
}
