/* test_kernels.c — every layer's backward against central finite differences, our own
 * reductions bit-identical for 1 and 2 threads, and GEMM failures returned as a Status.
 *
 * Oracle: for a layer y = f(x, w), the scalar L = Σ y·R (R fixed random) has dL/dθ from the
 * backward with dout = R; each is compared with (L(θ+h) - L(θ-h)) / 2h, L summed in double,
 * h = 1e-2 (fp32 forward). Tolerance: ||analytic - numeric|| / ||numeric|| <= 2e-3 per tensor
 * (float rounding of L over h gives ~1e-4; a wrong formula gives O(1)).
 *
 * GEMM failures (test_gemm_errors, test_gpt_errors): a failing GEMM (the test-only fault
 * mm_fail_after, or a negative leading dimension that oneDNN itself refuses) must come back as
 * ST_ERR_RUNTIME whose message names the GEMM's exact shape, leave its output untouched and not
 * abort; the same calls without a fault must return ST_OK with the naive product (1e-5) or the
 * reference gradients bit for bit, which is also the negative control: the faulted pass's
 * gradients must differ from the reference. */
#include <math.h>
#if defined(__AVX512BF16__)
#include <immintrin.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/half.h"
#include "core/rng.h"
#include "model/gpt.h"
#include "model/fastmath.h"
#include "model/kernels.h"
#include "model/matmul.h"
#include "testutil.h"

/* Every buffer of this test is tracked and freed at exit (the suite also runs under LeakSanitizer). */
static void *tracked[512];
static int ntracked;
static void *track(void *p) {
    if (ntracked < 512) tracked[ntracked++] = p;
    return p;
}
static void free_tracked(void) {
    while (ntracked) free(tracked[--ntracked]);
}
#define calloc(n, s) track(calloc((n), (s)))
#define malloc(s) track(malloc(s))

#define H 1e-2f
#define TOL 2e-3

static float *randv(size_t n, uint64_t stream, float scale) {
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = scale * rng_normal(99, stream, i);
    return x;
}

static double dot(const float *a, const float *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

/* A layer under test: forward(ctx) writes ctx->out; the parameter vectors are perturbed in place. */
typedef struct Case Case;
struct Case {
    void (*forward)(Case *c);
    float *out, *R;
    size_t nout;
    void *ctx;
};

static double loss_of(Case *c) {
    c->forward(c);
    return dot(c->out, c->R, c->nout);
}

/* Compares analytic gradient g of vector x (n) against finite differences of c's loss. */
static void fd_check(Case *c, float *x, const float *g, size_t n, const char *name) {
    float *num = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        float keep = x[i];
        x[i] = keep + H;
        double lp = loss_of(c);
        x[i] = keep - H;
        double lm = loss_of(c);
        x[i] = keep;
        num[i] = (float)((lp - lm) / (2.0 * H));
    }
    double re = tu_rel_err_f(g, num, n);
    tu_check(re <= TOL, name, "rel_err=%.3g vs finite differences (tol %.0e, n=%zu)", re, TOL, n);
}

/* ---- LayerNorm ---- */
typedef struct { float *inp, *w, *b, *mean, *rstd; int N, C; } LnCtx;
static void ln_fwd(Case *c) {
    LnCtx *x = c->ctx;
    layernorm_forward(c->out, x->mean, x->rstd, x->inp, x->w, x->b, x->N, x->C, 2);
}
static void test_layernorm(void) {
    int N = 5, C = 12;
    LnCtx x = {randv(N * C, 1, 1), randv(C, 2, 1), randv(C, 3, 1), calloc(N, 4), calloc(N, 4), N, C};
    for (int i = 0; i < C; i++) x.w[i] += 1.0f;
    Case c = {ln_fwd, calloc(N * C, 4), randv(N * C, 4, 1), (size_t)N * C, &x};
    float *dinp = calloc(N * C, 4), *dw = calloc(C, 4), *db = calloc(C, 4), *scr = calloc(2 * C * 2, 4);
    c.forward(&c);
    layernorm_backward(dinp, dw, db, scr, c.R, x.inp, x.w, x.mean, x.rstd, N, C, 1, 2);
    fd_check(&c, x.inp, dinp, N * C, "layernorm dinp");
    fd_check(&c, x.w, dw, C, "layernorm dweight");
    fd_check(&c, x.b, db, C, "layernorm dbias");
}

/* ---- Linear ---- */
typedef struct { float *inp, *w, *b; int N, C, OC; } MmCtx;
static void mm_fwd(Case *c) {
    MmCtx *x = c->ctx;
    matmul_forward(c->out, x->inp, x->w, x->b, x->N, x->C, x->OC, 2);
}
static void test_matmul(void) {
    int N = 6, C = 8, OC = 10;
    MmCtx x = {randv(N * C, 5, 1), randv(OC * C, 6, 1), randv(OC, 7, 1), N, C, OC};
    Case c = {mm_fwd, calloc(N * OC, 4), randv(N * OC, 8, 1), (size_t)N * OC, &x};
    float *dinp = calloc(N * C, 4), *dw = calloc(OC * C, 4), *db = calloc(OC, 4);
    matmul_backward(dinp, dw, db, c.R, x.inp, x.w, N, C, OC, 1, 2);
    fd_check(&c, x.inp, dinp, N * C, "matmul dinp");
    fd_check(&c, x.w, dw, OC * C, "matmul dweight");
    fd_check(&c, x.b, db, OC, "matmul dbias");
}

/* ---- Attention (with and without dropout) ---- */
typedef struct { float *qkv, *lse, *scr; int B, T, C, NH; Dropout d; } AttCtx;
static void att_fwd(Case *c) {
    AttCtx *x = c->ctx;
    attention_forward(c->out, x->lse, x->scr, x->qkv, x->B, x->T, x->C, x->NH, x->d, 0, 2);
}
static void test_attention(float p) {
    int B = 2, T = 5, C = 8, NH = 2;
    AttCtx x = {randv(B * T * 3 * C, 9, 1), calloc(B * NH * T, 4), calloc(attention_scratch_floats(T, C / NH, 2), 4), B, T,
                C, NH, {p, 17, 3}};
    Case c = {att_fwd, calloc(B * T * C, 4), randv(B * T * C, 10, 1), (size_t)B * T * C, &x};
    float *dqkv = calloc(B * T * 3 * C, 4);
    c.forward(&c);
    attention_backward(dqkv, x.scr, c.R, x.qkv, c.out, x.lse, B, T, C, NH, x.d, 0, 2);
    fd_check(&c, x.qkv, dqkv, (size_t)B * T * 3 * C, p > 0 ? "attention dqkv (dropout 0.3)" : "attention dqkv");
}

/* ---- Attention at T > block size against a naive float64 implementation ---- */
static double keep(Dropout d, uint64_t i) {
    if (d.p <= 0) return 1.0;
    return rng_uniform(d.seed, d.stream, i) >= d.p ? 1.0 / (1.0 - d.p) : 0.0;
}

/* lowp = 1: the bf16 path against the same float64 reference of the unrounded inputs. Its error
 * is that of rounding the GEMM operands to 8 significant bits (about 2^-9 each): tolerance 1e-2,
 * and it must be above 1e-6, or the GEMMs did not run in bf16. */
static void test_attention_long(float p, int T, int lowp) {
    int B = 1, C = lowp ? 128 : 32, NH = 2, hs = C / NH, C3 = 3 * C;
    Dropout d = {p, 21, 5};
    float *qkv = randv((size_t)B * T * C3, 40, 1), *dy = randv((size_t)B * T * C, 41, 1);
    float *out = calloc((size_t)B * T * C, 4), *lse = calloc((size_t)B * NH * T, 4);
    float *scr = calloc(attention_scratch_floats(T, hs, 2), 4), *dqkv = calloc((size_t)B * T * C3, 4);
    attention_forward(out, lse, scr, qkv, B, T, C, NH, d, lowp, 2);
    attention_backward(dqkv, scr, dy, qkv, out, lse, B, T, C, NH, d, lowp, 2);
    double *ref = calloc((size_t)B * T * C, 8), *dref = calloc((size_t)B * T * C3, 8);
    double *P = malloc(sizeof(double) * T * T), *dP = malloc(sizeof(double) * T * T);
    double sc = 1.0 / sqrt((double)hs);
    for (int h = 0; h < NH; h++) {
        const float *q = qkv + h * hs, *k = q + C, *v = q + 2 * C;
        uint64_t base = (uint64_t)h * T * T;
        for (int i = 0; i < T; i++) {
            double mx = -1e300, s = 0;
            for (int j = 0; j <= i; j++) {
                double a = 0;
                for (int x = 0; x < hs; x++) a += (double)q[(size_t)i * C3 + x] * k[(size_t)j * C3 + x];
                P[(size_t)i * T + j] = a * sc;
                if (a * sc > mx) mx = a * sc;
            }
            for (int j = 0; j <= i; j++) s += P[(size_t)i * T + j] = exp(P[(size_t)i * T + j] - mx);
            for (int j = 0; j <= i; j++) P[(size_t)i * T + j] /= s;
            for (int x = 0; x < hs; x++) {
                double a = 0;
                for (int j = 0; j <= i; j++) a += P[(size_t)i * T + j] * keep(d, base + (size_t)i * T + j) * v[(size_t)j * C3 + x];
                ref[(size_t)i * C + h * hs + x] = a;
            }
        }
        for (int i = 0; i < T; i++) {
            double dot = 0;
            for (int j = 0; j <= i; j++) {
                double g = 0;
                for (int x = 0; x < hs; x++) g += (double)dy[(size_t)i * C + h * hs + x] * v[(size_t)j * C3 + x];
                g *= keep(d, base + (size_t)i * T + j);
                dP[(size_t)i * T + j] = g;
                dot += g * P[(size_t)i * T + j];
            }
            for (int j = 0; j <= i; j++) dP[(size_t)i * T + j] = P[(size_t)i * T + j] * (dP[(size_t)i * T + j] - dot) * sc;
        }
        for (int i = 0; i < T; i++)
            for (int j = 0; j <= i; j++)
                for (int x = 0; x < hs; x++) {
                    double pd = P[(size_t)i * T + j] * keep(d, base + (size_t)i * T + j);
                    dref[(size_t)j * C3 + 2 * C + h * hs + x] += pd * dy[(size_t)i * C + h * hs + x];
                    dref[(size_t)i * C3 + h * hs + x] += dP[(size_t)i * T + j] * k[(size_t)j * C3 + x];
                    dref[(size_t)j * C3 + C + h * hs + x] += dP[(size_t)i * T + j] * q[(size_t)i * C3 + x];
                }
    }
    double e1 = tu_rel_err_fd(out, ref, (size_t)T * C), e2 = tu_rel_err_fd(dqkv, dref, (size_t)T * C3);
    char name[96];
    snprintf(name, sizeof name, "attention%s T=%d vs float64 naive%s", lowp ? " bf16" : "", T,
             p > 0 ? ", dropout 0.2" : "");
    if (lowp)
        tu_check(e1 <= 1e-2 && e2 <= 1e-2 && e1 > 1e-6 && e2 > 1e-6, name,
                 "forward rel_err=%.3g backward rel_err=%.3g (expected in (1e-6, 1e-2])", e1, e2);
    else
        tu_check(e1 <= 1e-5 && e2 <= 1e-5, name, "forward rel_err=%.3g backward rel_err=%.3g (tol 1e-5)", e1, e2);
}

/* ---- GELU ---- */
typedef struct { float *inp; size_t n; } GeluCtx;
static void gelu_fwd(Case *c) {
    GeluCtx *x = c->ctx;
    gelu_forward(c->out, x->inp, x->n, 2);
}
/* ---- Residual + LayerNorm fused: the unfused pair (each checked by finite differences) is the
 * oracle, bit for bit, with and without dropout and with res aliasing a. ---- */
static void test_residual_layernorm(float p) {
    int N = 37, C = 50;
    size_t n = (size_t)N * C;
    Dropout d = {p, 5, 9};
    float *a = randv(n, 60, 1), *b = randv(n, 61, 1), *w = randv(C, 62, 1), *bias = randv(C, 63, 1);
    float *res1 = calloc(n, 4), *out1 = calloc(n, 4), *m1 = calloc(N, 4), *r1 = calloc(N, 4);
    float *res2 = malloc(n * 4), *out2 = calloc(n, 4), *m2 = calloc(N, 4), *r2 = calloc(N, 4);
    residual_forward(res1, a, b, n, d, 2);
    layernorm_forward(out1, m1, r1, res1, w, bias, N, C, 2);
    memcpy(res2, a, n * 4);
    residual_layernorm_forward(res2, out2, m2, r2, res2, b, d, w, bias, N, C, 2); /* in place */
    int same = !memcmp(res1, res2, n * 4) && !memcmp(out1, out2, n * 4) && !memcmp(m1, m2, N * 4) &&
               !memcmp(r1, r2, N * 4);
    tu_check(same, p > 0 ? "residual+layernorm fused (dropout 0.25)" : "residual+layernorm fused",
             "max |out diff| %.3g against residual_forward + layernorm_forward, bit-identical required", tu_max_abs_diff_f(out1, out2, n));
}

/* ---- bf16 rounding: cast_bf16 (and through it the fused kernels' stores, kernels_internal.h's
 * store_bf16_32) against half_bf16 element by element, bit for bit, on special bit patterns (NaNs of
 * every kind, denormals, infinities, the largest finite value, ties) mixed into random values, at
 * lengths that end inside and on a 32-value block, at 1 and 2 threads. Control: the same data
 * through vcvtneps2bf16 alone (which quiets NaNs and flushes denormals) must differ somewhere, so
 * the data reaches the lanes the kernels route around it. ---- */
/* The bf16 value nearest x, ties to the even significand (the oracle of half_bf16, in double); a
 * NaN input is not for this function. Candidates: x's high half truncated and the next one up in
 * magnitude, the all-ones exponent read as 2^128 so that overflow rounds to infinity. */
static uint16_t bf16_nearest(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    uint32_t lo = u & 0xFFFF0000u, hi = lo + 0x10000u;
    if ((u & 0x7FFFFFFFu) == 0x7F800000u || lo == u) return (uint16_t)(u >> 16); /* ±inf, exact */
    float fl, fh;
    memcpy(&fl, &lo, 4), memcpy(&fh, &hi, 4);
    double dl = fabs((double)x - fl), dh = (hi & 0x7F800000u) == 0x7F800000u ? fabs(ldexp(1.0, 128) - fabs((double)x))
                                                                         : fabs((double)x - fh);
    if (dl != dh) return (uint16_t)((dl < dh ? lo : hi) >> 16);
    return (uint16_t)((((lo >> 16) & 1u) ? hi : lo) >> 16);
}

/* half_bf16 against its definition: every finite and infinite input as bf16_nearest, every NaN a
 * quiet NaN of the same sign (its high half, bit 6 set). `old`: the rounding before NaNs were
 * kept (a NaN rounded as a number), the control. */
static int bf16_defined(const float *x, int n, int old) {
    for (int i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        uint16_t h = old ? (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16) : half_bf16(x[i]);
        if (isnan(x[i]) ? h != (uint16_t)((u >> 16) | 0x40u) || (h & 0x7F80u) != 0x7F80u || !(h & 0x7Fu)
                        : h != bf16_nearest(x[i]))
            return 0;
    }
    return 1;
}

static void test_bf16_rounding(void) {
    static const uint32_t pats[] = {0x7F800001u, 0x7FBFFFFFu, 0x7FC00000u, 0x7FFFFFFFu, 0xFFFFFFFFu, 0xFF800001u,
                                    0x00000001u, 0x807FFFFFu, 0x00400000u, 0x7F7FFFFFu, 0xFF7FFFFFu, 0x7F800000u,
                                    0xFF800000u, 0x00000000u, 0x80000000u, 0x3F808000u, 0x3F818000u, 0x3F80FFFFu};
    const int np = (int)(sizeof pats / sizeof pats[0]);
    int ok = 1, control = 0, defined = 1, old_differs = 0;
    for (int n = 1; n <= 200; n += 7) {
        float *x = randv((size_t)n, 300 + n, 3);
        for (int i = 0; i < n; i++)
            if ((i * 5 + n) % 3 == 0) memcpy(&x[i], &pats[(i + n) % np], 4);
        uint16_t *want = malloc((size_t)n * 2), *got = malloc((size_t)n * 2);
        for (int i = 0; i < n; i++) want[i] = half_bf16(x[i]);
        if (!bf16_defined(x, n, 0)) defined = 0;
        if (!bf16_defined(x, n, 1)) old_differs = 1;
        for (int nt = 1; nt <= 2; nt++) {
            memset(got, 0x5a, (size_t)n * 2);
            cast_bf16(got, x, (size_t)n, nt);
            if (memcmp(want, got, (size_t)n * 2)) ok = 0;
        }
#if defined(__AVX512BF16__)
        for (int i = 0; i + 16 <= n; i += 16) {
            __m256i h = (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x + i));
            if (memcmp(&h, want + i, 32)) control = 1;
        }
#else
        control = 1; /* no vcvtneps2bf16 in this build: cast_bf16 is half_bf16's loop */
#endif
    }
    tu_check(defined, "bf16 rounding: half_bf16", "nearest bf16 (ties to even, overflow to inf, computed in double) "
                                                   "for every number, a quiet NaN of the same sign for every NaN");
    tu_check(old_differs, "bf16 rounding: half_bf16 control (a NaN rounded as a number)",
             "the integer rounding without the NaN case must fail that check on this data (0x7FFFFFFF gives -0)");
    tu_check(ok, "bf16 rounding", "cast_bf16 bit-identical to half_bf16 on NaNs, denormals, infinities and ties, "
                                  "lengths 1..200, 1 and 2 threads");
    tu_check(control, "bf16 rounding: control (vcvtneps2bf16 alone)",
             "the hardware rounding without the denormal lanes' path must differ from half_bf16 on this data");
}

/* ---- Bias sums (kernels.h): the documented order, computed here element by element ----
 * Each column over a 64-row chunk's rows in order, then the chunks' sums in order; the kernel's
 * result bit for bit with its scratch (threads taking chunks) and without (threads taking columns),
 * at 1, 2 and 3 threads. Control: the plain row-order sum of a column, which this data makes differ
 * in some column, must not match (the check can tell the orders apart). */
static void test_colsum_order(const float *g, int N, int OC, float *sums) {
    float *want = malloc(OC * 4), *plain = malloc(OC * 4), *got = malloc(OC * 4);
    for (int j = 0; j < OC; j++) {
        float tot = 0, p = 0, s = 0;
        for (int i = 0; i < N; i++) {
            if (i % KERNEL_ROW_CHUNK == 0) p = 0;
            p += g[(size_t)i * OC + j], s += g[(size_t)i * OC + j];
            if (i % KERNEL_ROW_CHUNK == KERNEL_ROW_CHUNK - 1 || i == N - 1) tot = i < KERNEL_ROW_CHUNK ? p : tot + p;
        }
        want[j] = tot, plain[j] = s;
    }
    int ok = 1;
    for (int nt = 1; nt <= 3; nt++)
        for (int scratch = 0; scratch < 2; scratch++) {
            memset(got, 0xff, OC * 4); /* NaN: a column left unwritten fails */
            matmul_backward(NULL, NULL, got, g, NULL, NULL, N, 1, OC, 0, nt);
            if (scratch) {
                MatPrec mp = {.sums = sums};
                memset(got, 0xff, OC * 4);
                matmul_backward_p(&mp, NULL, NULL, got, g, NULL, NULL, NULL, N, 1, OC, 0, nt);
            }
            if (memcmp(want, got, OC * 4)) ok = 0;
        }
    tu_check(ok, "bias sums: chunked order", "bit-identical to 64-row chunks summed in order required, with and without "
                                             "scratch, 1-3 threads");
    tu_check(memcmp(want, plain, OC * 4) != 0, "bias sums: control (plain row order)",
             "the row-order sums must differ from the chunked ones somewhere on this data (else the check above "
             "cannot tell the orders apart)");
    /* want, plain, got: freed by free_tracked */
}

/* ---- The bf16-fused kernels against their unfused sequences, bit for bit ---- */
static void test_bf16_fused(void) {
    int N = 70, OC = 150; /* a partial 64-column block and a partial 64-row chunk */
    size_t n = (size_t)N * OC;
    float *x = randv(n, 70, 2), *g = randv(n, 71, 1);
    uint16_t *want = calloc(n, 2), *got = calloc(n, 2);
    float *bw = randv(OC, 72, 1), *bg = malloc(OC * 4), *f1 = calloc(n, 4);
    memcpy(bg, bw, OC * 4);
    float *sums = malloc(colsum_floats(N, OC) * 4);
    cast_bf16(want, g, n, 2);
    matmul_backward(NULL, NULL, bw, g, NULL, NULL, N, 1, OC, 1, 2);
    cast_bf16_colsum(got, bg, sums, g, N, OC, 1, 2);
    tu_check(!memcmp(want, got, n * 2) && !memcmp(bw, bg, OC * 4), "cast_bf16_colsum",
             "bf16 copy and bias sums bit-identical to cast_bf16 + matmul_backward required");
    test_colsum_order(g, N, OC, sums);
    gelu_forward(f1, x, n, 2);
    cast_bf16(want, f1, n, 2);
    gelu_forward_bf16(got, x, n, 2);
    tu_check(!memcmp(want, got, n * 2), "gelu_forward_bf16", "bit-identical to gelu_forward + cast_bf16 required");
    /* LayerNorm and residual + LayerNorm straight into bf16 (the stored bf16 activations). */
    {
        float *w = randv(OC, 73, 1), *b = randv(OC, 74, 1), *m1 = calloc(N, 4), *r1 = calloc(N, 4), *m2 = calloc(N, 4),
              *r2 = calloc(N, 4), *res1 = calloc(n, 4), *res2 = calloc(n, 4);
        Dropout d = {0.2f, 3, 4};
        layernorm_forward(f1, m1, r1, x, w, b, N, OC, 2);
        cast_bf16(want, f1, n, 2);
        layernorm_forward_bf16(got, m2, r2, x, w, b, N, OC, 2);
        tu_check(!memcmp(want, got, n * 2) && !memcmp(m1, m2, N * 4) && !memcmp(r1, r2, N * 4), "layernorm_forward_bf16",
                 "bf16 output and statistics bit-identical to layernorm_forward + cast_bf16 required");
        residual_layernorm_forward(res1, f1, m1, r1, x, g, d, w, b, N, OC, 2);
        cast_bf16(want, f1, n, 2);
        residual_layernorm_forward_bf16(res2, got, m2, r2, x, g, d, w, b, N, OC, 2);
        tu_check(!memcmp(want, got, n * 2) && !memcmp(res1, res2, n * 4) && !memcmp(m1, m2, N * 4),
                 "residual_layernorm_forward_bf16", "residual, bf16 output and statistics bit-identical required");
    }
    gelu_backward(f1, g, x, n, 2);
    cast_bf16(want, f1, n, 2);
    matmul_backward(NULL, NULL, bw, f1, NULL, NULL, N, 1, OC, 1, 2);
    gelu_backward_bf16(got, bg, sums, g, x, N, OC, 1, 1); /* one thread against two: the sums do not move */
    tu_check(!memcmp(want, got, n * 2) && !memcmp(bw, bg, OC * 4), "gelu_backward_bf16",
             "bf16 gradient and bias sums bit-identical to gelu_backward + cast_bf16 + matmul_backward required");
}

static void test_gelu(void) {
    size_t n = 40;
    GeluCtx x = {randv(n, 11, 2), n};
    Case c = {gelu_fwd, calloc(n, 4), randv(n, 12, 1), n, &x};
    float *d = calloc(n, 4);
    gelu_backward(d, c.R, x.inp, n, 2);
    fd_check(&c, x.inp, d, n, "gelu dinp");
}

/* GELU's passes (16-lane forms where the build has AVX-512, four vectors at a time, the last
 * lanes masked) against the scalar st_gelu / st_gelu_grad element by element, bit for bit: 2^22
 * inputs, half random bit patterns (NaN, infinities, denormals, huge), half uniform in [-12, 12],
 * n not a multiple of 16 and two threads (each range's tail). Negative control: the same
 * comparison against the scalar values one ulp away must see differences. */
static void test_gelu_lanes(void) {
    size_t n = ((size_t)1 << 22) - 5;
    float *x = malloc(n * 4), *y = malloc(n * 4), *one = malloc(n * 4);
    uint64_t st = 12345;
    for (size_t i = 0; i < n; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t u = (uint32_t)(st >> 32);
        if (i % 2) x[i] = (float)(u >> 8) / 16777216.0f * 24.0f - 12.0f;
        else memcpy(&x[i], &u, 4);
        one[i] = 1.0f;
    }
    const float sp[] = {0.0f, -0.0f, NAN, INFINITY, -INFINITY, 1e-40f, -1e-40f, 1e-30f, -88.0f, 88.0f, 5.5f, -5.5f};
    memcpy(x, sp, sizeof sp);
    size_t bad_f = 0, bad_g = 0, near_f = 0, near_g = 0;
    gelu_forward(y, x, n, 2);
    for (size_t i = 0; i < n; i++) {
        float w = st_gelu(x[i]), z = st_gelu(nextafterf(x[i], INFINITY));
        bad_f += memcmp(&w, &y[i], 4) != 0 && !(isnan(w) && isnan(y[i]));
        near_f += isfinite(x[i]) && fabsf(x[i]) > 1e-3f && fabsf(x[i]) < 10.0f && memcmp(&z, &y[i], 4) != 0;
    }
    gelu_backward(y, one, x, n, 2);
    for (size_t i = 0; i < n; i++) {
        float w = st_gelu_grad(x[i]), z = st_gelu_grad(nextafterf(x[i], INFINITY));
        bad_g += memcmp(&w, &y[i], 4) != 0 && !(isnan(w) && isnan(y[i]));
        near_g += isfinite(x[i]) && fabsf(x[i]) > 1e-3f && fabsf(x[i]) < 10.0f && memcmp(&z, &y[i], 4) != 0;
    }
    tu_check(bad_f == 0 && bad_g == 0, "gelu lanes",
             "gelu_forward / gelu_backward bit-identical to st_gelu / st_gelu_grad required: %zu and %zu of %zu differ",
             bad_f, bad_g, n);
    tu_check(near_f > n / 100 && near_g > n / 100, "gelu lanes negative control",
             "values one ulp away must differ: %zu and %zu of %zu did", near_f, near_g, n);
    /* SwiGLU's passes the same way: rows of F = 1000 gates and 1000 up values (tails of 8 lanes)
     * from the same inputs, against st_silu and st_swiglu_grad. */
    int F = 1000, N = (int)(n / (2 * (size_t)F));
    size_t nf = (size_t)N * F, bad_s = 0, bad_d = 0, near_s = 0;
    float *dh = malloc(nf * 2 * 4);
    swiglu_forward(y, x, N, F, 2);
    swiglu_backward(dh, one, x, N, F, 2);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < F; j++) {
            const float g = x[(size_t)i * 2 * F + j], u = x[(size_t)i * 2 * F + F + j];
            float w = st_silu(g) * u, z = st_silu(nextafterf(g, INFINITY)) * u, a, b;
            st_swiglu_grad(&a, &b, 1.0f, g, u);
            const float *o = y + (size_t)i * F + j, *da = dh + (size_t)i * 2 * F + j, *db = da + F;
            bad_s += memcmp(&w, o, 4) != 0 && !(isnan(w) && isnan(*o));
            bad_d += (memcmp(&a, da, 4) != 0 && !(isnan(a) && isnan(*da))) + (memcmp(&b, db, 4) != 0 && !(isnan(b) && isnan(*db)));
            near_s += isfinite(w) && fabsf(g) > 1e-3f && fabsf(g) < 10.0f && fabsf(u) > 1e-3f && memcmp(&z, o, 4) != 0;
        }
    tu_check(bad_s == 0 && bad_d == 0, "swiglu lanes",
             "swiglu_forward / swiglu_backward bit-identical to st_silu / st_swiglu_grad required: %zu and %zu of %zu differ",
             bad_s, bad_d, nf);
    tu_check(near_s > nf / 100, "swiglu lanes negative control", "gates one ulp away must differ: %zu of %zu did",
             near_s, nf);
}

/* ---- Encoder (repeated tokens, dropout) ---- */
typedef struct { int32_t *inp; float *wte, *wpe; int B, T, C; Dropout d; } EncCtx;
static void enc_fwd(Case *c) {
    EncCtx *x = c->ctx;
    encoder_forward(c->out, x->inp, NULL, x->wte, x->wpe, x->B, x->T, x->C, x->d, 2);
}
static void test_encoder(float p) {
    int B = 2, T = 4, C = 6, V = 5;
    int32_t inp[8] = {1, 3, 1, 4, 0, 1, 1, 2};
    EncCtx x = {inp, randv(V * C, 13, 1), randv(T * C, 14, 1), B, T, C, {p, 5, 1}};
    Case c = {enc_fwd, calloc(B * T * C, 4), randv(B * T * C, 15, 1), (size_t)B * T * C, &x};
    float *dwte = calloc(V * C, 4), *dwpe = calloc(T * C, 4);
    encoder_backward(dwte, dwpe, c.R, inp, NULL, B, T, C, x.d, 2);
    fd_check(&c, x.wte, dwte, V * C, p > 0 ? "encoder dwte (dropout)" : "encoder dwte");
    fd_check(&c, x.wpe, dwpe, T * C, p > 0 ? "encoder dwpe (dropout)" : "encoder dwpe");
}

/* ---- Fused LM head + cross-entropy (loss is the scalar itself) ---- */
typedef struct { float *x, *wte, *logits, *losses; int32_t *tgt; int n, C, V, Vp; } HeadCtx;
static void head_fwd(Case *c) {
    HeadCtx *h = c->ctx;
    head_forward_backward(h->losses, NULL, NULL, h->logits, h->x, h->wte, h->tgt, h->n, h->C, h->V, h->Vp, 0, 2,
                          1, 2, NULL, NULL, NULL);
    memcpy(c->out, h->losses, sizeof(float) * h->n);
}
static void test_head(void) {
    int n = 5, C = 8, V = 11, Vp = 64;
    int32_t tgt[5] = {3, -1, 10, 0, 7};
    HeadCtx h = {randv(n * C, 16, 1), randv(Vp * C, 17, 1), calloc(Vp * n, 4), calloc(n, 4), tgt, n, C, V, Vp};
    float ones[5] = {1, 1, 1, 1, 1};
    Case c = {head_fwd, calloc(n, 4), ones, (size_t)n, &h};
    float *dx = calloc(n * C, 4), *dwte = calloc(Vp * C, 4);
    /* chunk 2 rows: exercises the chunked loop */
    head_forward_backward(h.losses, dx, dwte, h.logits, h.x, h.wte, tgt, n, C, V, Vp, 1.0f, 2, 1, 2, NULL, NULL, NULL);
    fd_check(&c, h.x, dx, n * C, "head+cross-entropy dx (masked row, chunked)");
    fd_check(&c, h.wte, dwte, V * C, "head+cross-entropy dwte");
    int nz = 0;
    for (int i = V * C; i < Vp * C; i++) nz += dwte[i] != 0;
    tu_check(nz == 0 && h.losses[1] == 0.0f, "head padded rows and masked row", "nonzero padded grads=%d masked loss=%g",
             nz, h.losses[1]);
    /* acc = 0 over 3 chunks: the first chunk writes the V real rows (NaN before), the others add;
     * equal to accumulating into zeros, and the padded rows are left alone. */
    float *dw0 = malloc(Vp * C * 4), *dx0 = calloc(n * C, 4);
    for (int i = 0; i < Vp * C; i++) dw0[i] = i < V * C ? NAN : 0.0f;
    head_forward_backward(h.losses, dx0, dw0, h.logits, h.x, h.wte, tgt, n, C, V, Vp, 1.0f, 2, 0, 2, NULL, NULL, NULL);
    int diff = 0;
    for (int i = 0; i < Vp * C; i++) diff += !(dw0[i] == dwte[i]);
    tu_check(diff == 0, "head dwte overwritten (acc 0, chunked)", "%d of %d elements differ from accumulating into zeros",
             diff, Vp * C);
}

/* ---- Residual with dropout ---- */
typedef struct { float *a, *b; size_t n; Dropout d; } ResCtx;
static void res_fwd(Case *c) {
    ResCtx *x = c->ctx;
    residual_forward(c->out, x->a, x->b, x->n, x->d, 2);
}
static void test_residual(void) {
    size_t n = 30;
    ResCtx x = {randv(n, 18, 1), randv(n, 19, 1), n, {0.4f, 3, 9}};
    Case c = {res_fwd, calloc(n, 4), randv(n, 20, 1), n, &x};
    float *db = calloc(n, 4);
    dropout_backward(db, c.R, n, x.d, 2);
    fd_check(&c, x.b, db, n, "residual dropout branch");
    fd_check(&c, x.a, c.R, n, "residual identity path");
}

/* ---- Thread-count independence of our own reductions ---- */
static void test_threads(void) {
    int N = 300, C = 96, OC = 80, V = 200;
    float *inp = randv(N * C, 30, 1), *w = randv(C, 31, 1), *b = randv(C, 32, 1), *dout = randv(N * C, 33, 1);
    float *mean = calloc(N, 4), *rstd = calloc(N, 4), *o = calloc(N * C, 4);
    layernorm_forward(o, mean, rstd, inp, w, b, N, C, 2);
    float *r[2][3];
    for (int t = 0; t < 2; t++) {
        float *dinp = calloc(N * C, 4), *dw = calloc(C, 4), *db = calloc(C, 4), *scr = calloc((N / 64 + 1) * 2 * C, 4);
        layernorm_backward(dinp, dw, db, scr, dout, inp, w, mean, rstd, N, C, 1, t + 1);
        r[t][0] = dinp, r[t][1] = dw, r[t][2] = db;
    }
    int same = !memcmp(r[0][0], r[1][0], N * C * 4) && !memcmp(r[0][1], r[1][1], C * 4) &&
               !memcmp(r[0][2], r[1][2], C * 4);
    tu_check(same, "layernorm backward bit-identical for 1 and 2 threads", "%s", same ? "memcmp equal" : "differ");
    float *g = randv(N * OC, 34, 1), *db1 = calloc(OC, 4), *db2 = calloc(OC, 4);
    float *dw1 = calloc(OC * C, 4), *dw2 = calloc(OC * C, 4), *wm = randv(OC * C, 35, 1);
    matmul_backward(NULL, dw1, db1, g, inp, wm, N, C, OC, 1, 1);
    matmul_backward(NULL, dw2, db2, g, inp, wm, N, C, OC, 1, 2);
    tu_check(!memcmp(db1, db2, OC * 4), "bias gradient bit-identical for 1 and 2 threads", "OC=%d", OC);
    int32_t *tok = malloc(N * sizeof(int32_t));
    for (int i = 0; i < N; i++) tok[i] = (int32_t)rng_below(1, 2, i, 7); /* many repeats */
    float *e1 = calloc(V * C, 4), *e2 = calloc(V * C, 4), *p1 = calloc(N * C, 4), *p2 = calloc(N * C, 4);
    Dropout off = {0};
    encoder_backward(e1, p1, dout, tok, NULL, 3, 100, C, off, 1);
    encoder_backward(e2, p2, dout, tok, NULL, 3, 100, C, off, 2);
    tu_check(!memcmp(e1, e2, V * C * 4) && !memcmp(p1, p2, 100 * C * 4),
             "embedding gradients bit-identical for 1 and 2 threads", "repeated tokens");
}

/* ---- GEMM failures ---- */
static int all_equal(const float *x, size_t n, float v) {
    for (size_t i = 0; i < n; i++)
        if (x[i] != v) return 0;
    return 1;
}

static void test_gemm_errors(void) {
    enum { M = 2, N = 3, K = 4 };
    float A[M * K], Bm[K * N], C[M * N], ref[M * N];
    for (int i = 0; i < M * K; i++) A[i] = rng_normal(5, 1, (uint64_t)i);
    for (int i = 0; i < K * N; i++) Bm[i] = rng_normal(5, 2, (uint64_t)i);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double acc = 0;
            for (int k = 0; k < K; k++) acc += (double)A[i * K + k] * Bm[k * N + j];
            ref[i * N + j] = (float)acc;
        }
    Err e = {0};
    mm_sgemm(0, 0, M, N, K, 1.0f, A, K, Bm, N, 0.0f, C, N);
    Status s = mm_take_error(&e);
    double d = tu_max_abs_diff_f(C, ref, M * N);
    tu_check(s == ST_OK && d <= 1e-5, "gemm without a fault", "status %d, max |C - naive| %.3g (tol 1e-5)", s, d);

    const char *want = "GEMM 2x3x4 (MxNxK, fp32, A*B): oneDNN out_of_memory creating the primitive (test fault)";
    for (int i = 0; i < M * N; i++) C[i] = 42.0f;
    mm_fail_after(1);
    mm_sgemm(0, 0, M, N, K, 1.0f, A, K, Bm, N, 0.0f, C, N);
    s = mm_take_error(&e);
    tu_check(s == ST_ERR_RUNTIME && !strcmp(e.msg, want) && all_equal(C, M * N, 42.0f), "gemm test fault",
             "status %d \"%s\", C untouched: %d", s, s ? e.msg : "", all_equal(C, M * N, 42.0f));
    s = mm_take_error(&e);
    tu_check(s == ST_OK, "gemm failure taken once", "second take: status %d", s);

    /* A real refusal: oneDNN rejects a negative leading dimension when describing the operand. */
    mm_sgemm(0, 0, M, N, K, 1.0f, A, -K, Bm, N, 0.0f, C, N);
    s = mm_take_error(&e);
    tu_check(s == ST_ERR_RUNTIME && !strcmp(e.msg, "GEMM 2x3x4 (MxNxK, fp32, A*B): oneDNN invalid_arguments describing the operands") &&
                 all_equal(C, M * N, 42.0f),
             "gemm refused by oneDNN", "status %d \"%s\"", s, s ? e.msg : "");

    /* The first failure wins: a fault on a bf16 GEMM, then the refusal above. */
    uint16_t Ab[M * K], Bb[K * N];
    cast_bf16(Ab, A, M * K, 1), cast_bf16(Bb, Bm, K * N, 1);
    mm_fail_after(1);
    mm_gemm_bf16(1, 0, M, N, K, 1.0f, Ab, M, Bb, N, 1.0f, C, N); /* A read as (K, M): in bounds if it ran */
    mm_sgemm(0, 0, M, N, K, 1.0f, A, -K, Bm, N, 0.0f, C, N);
    s = mm_take_error(&e);
    tu_check(s == ST_ERR_RUNTIME && strstr(e.msg, "GEMM 2x3x4 (MxNxK, bf16, A^T*B + C):") && strstr(e.msg, "test fault"),
             "gemm first failure wins", "\"%s\"", s ? e.msg : "");
}

/* The model: a fault in the forward and in the backward comes back from gpt_status with the
 * failing GEMM's shape (the first GEMM of each pass: block 0's qkv, block L-1's fcproj input
 * gradient); afterwards the same pass reproduces the reference bit for bit. */
static void test_gpt_errors(void) {
    ModelConfig mc = {2, 2, 32, 50, 0, 16, 0.0f};
    Err e = {0};
    model_config_validate(&mc, &e);
    GptOptions o = gpt_default_options();
    o.B = 2, o.T = 8, o.threads = 2;
    Gpt g;
    if (gpt_init(&g, &mc, &o, NULL, &e) != ST_OK) {
        tu_check(0, "gpt errors setup", "%s", e.msg);
        return;
    }
    gpt_init_params(&g, 5);
    int32_t inp[16], tgt[16];
    for (int i = 0; i < 16; i++) inp[i] = (int32_t)rng_below(5, 3, (uint64_t)i, 50), tgt[i] = (int32_t)rng_below(5, 4, (uint64_t)i, 50);
    size_t n = g.w.layout.total;
    float *ref = malloc(n * sizeof(float));
    gpt_zero_grads(&g);
    double loss0 = gpt_forward(&g, inp, tgt, 2, 8, 1.0f / 16, 1, 0);
    gpt_backward(&g);
    Status s = gpt_status(&g, &e);
    memcpy(ref, g.d.grads, n * sizeof(float));
    tu_check(s == ST_OK && isfinite(loss0), "gpt without a fault", "status %d, loss %.6f", s, loss0);

    mm_fail_after(1);
    gpt_zero_grads(&g);
    double loss = gpt_forward(&g, inp, tgt, 2, 8, 1.0f / 16, 1, 0);
    gpt_backward(&g);
    s = gpt_status(&g, &e);
    tu_check(s == ST_ERR_RUNTIME && isnan(loss) &&
                 !strcmp(e.msg, "GEMM 16x96x32 (MxNxK, fp32, A*B^T + bias): oneDNN out_of_memory creating the primitive (test fault)"),
             "gpt fault in the forward", "loss %g, status %d \"%s\"", loss, s, s ? e.msg : "");

    gpt_zero_grads(&g);
    loss = gpt_forward(&g, inp, tgt, 2, 8, 1.0f / 16, 1, 0);
    mm_fail_after(1);
    gpt_backward(&g);
    s = gpt_status(&g, &e);
    int differ = memcmp(ref, g.d.grads, n * sizeof(float)) != 0;
    tu_check(s == ST_ERR_RUNTIME && loss == loss0 && differ &&
                 !strcmp(e.msg, "GEMM 16x128x32 (MxNxK, fp32, A*B): oneDNN out_of_memory creating the primitive (test fault)"),
             "gpt fault in the backward", "status %d \"%s\", gradients differ from the reference: %d", s, s ? e.msg : "",
             differ);

    gpt_zero_grads(&g);
    loss = gpt_forward(&g, inp, tgt, 2, 8, 1.0f / 16, 1, 0);
    gpt_backward(&g);
    s = gpt_status(&g, &e);
    tu_check(s == ST_OK && loss == loss0 && !memcmp(ref, g.d.grads, n * sizeof(float)), "gpt after a fault",
             "status %d, loss and %zu gradients bit-identical to the reference", s, n);
    gpt_free(&g); /* ref is freed with the other tracked buffers */
}

int main(void) {
    test_layernorm();
    test_matmul();
    test_attention(0.0f);
    test_attention(0.3f);
    test_attention_long(0.0f, 150, 0);
    test_attention_long(0.2f, 150, 0);
    test_attention_long(0.0f, 600, 0); /* several 256-key blocks: the online softmax */
    test_attention_long(0.2f, 333, 0);
    test_attention_long(0.0f, 600, 1);
    test_attention_long(0.2f, 333, 1);
    test_gelu();
    test_gelu_lanes();
    test_bf16_fused();
    test_bf16_rounding();
    test_residual_layernorm(0.0f);
    test_residual_layernorm(0.25f);
    test_encoder(0.0f);
    test_encoder(0.25f);
    test_head();
    test_residual();
    test_threads();
    test_gemm_errors();
    test_gpt_errors();
    free_tracked();
    return tu_exit();
}
