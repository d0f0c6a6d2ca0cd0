/* test_matmul_pack.c — the packed bf16 GEMM (src/model/matmul_pack.c, mm_pack_gemm_bf16) that
 * mm_gemm_bf16 and mm_linear_bf16 run on for large shapes.
 *
 * Oracles:
 *  - float64 over the same bf16 operands (their products are exact in fp32, so the only error is
 *    the fp32 accumulation): per element |C − ref| <= (K + 2)·2^-23·(|alpha|·Σ_k |a_k b_k| + |bias| +
 *    |beta·C0|), at every transpose pair, row / column / odd-K tails, padded leading dimensions,
 *    alpha ≠ 1, beta 0 and 1, with and without bias; C is poisoned with NaN before a beta-0 call,
 *    so an element left unwritten fails (a NaN counts as over the bound);
 *  - the same bits at 1 and 2 threads, and for rows computed as part of a smaller problem (another
 *    blocking of the rows): each output's sum runs in one order whatever the cut;
 *  - the dispatch: by default the packed path where mm_tile_preferred; turned off (mm_pack_enable(0),
 *    as ST_BF16_GEMM=onednn does) mm_linear_bf16 runs oneDNN (within the bound); turned on it gives
 *    mm_pack_gemm_bf16's bits at a layer shape, the same bits for row ranges run from a parallel
 *    region's threads, and is not taken for the LM head's logits and input-gradient GEMMs or a
 *    test-sized layer.
 *  - op(B) packed once (mm_pack_b_bf16, both layouts) and the GEMM against it (mm_packed_gemm_bf16,
 *    as the bf16 LM head runs its logits and input gradient): float64 within the same bound, A's
 *    value past an odd K poisoned with NaN (never read); a K long enough to run in blocks gives
 *    mm_pack_gemm_bf16's one-pass bits (the blocks continue one fp32 chain); 1 thread = 2 threads;
 *  - the bf16 head on it (head_forward_backward_p with the packed weight): one 320-row chunk gives
 *    the losses and input gradient of 64-row chunks, bit for bit (each row's logits and input
 *    gradient do not depend on the rows around it), and its weight gradient matches the oneDNN
 *    head's within the bf16 rounding of its inputs; with the backward GEMMs run per group of
 *    chunks (MatPrec.head_rows), the same losses and input gradient, and the weight gradient
 *    within the spread of fp32 sums in another order.
 * Negative controls (run here): one B value off by one bf16 ulp in the GEMM's input (the oracle
 * reads the true one) must exceed the bound; one output element overwritten by NaN must too; the
 * prepacked GEMM told K + 1 reads the poisoned value and must fail the bound; the head with one
 * target moved must differ from the sub-chunked run, and the grouped run's weight gradient with
 * it must exceed its bound.
 * A build without AVX512_BF16 has no packed GEMM (mm_pack_gemm_bf16 returns 0): the test fails if
 * this CPU has the instructions, i.e. the build lost them. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/half.h"
#include "model/kernels.h"
#include "model/matmul.h"
#include "testutil.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float frand(void) { /* xorshift64, uniform in [-1, 1) */
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}
static double bf(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static uint16_t *rand_bf16(size_t n) {
    uint16_t *v = malloc(n * 2);
    for (size_t i = 0; i < n; i++) v[i] = half_bf16(frand());
    return v;
}

typedef struct {
    int ta, tb, M, N, K, lda, ldb, ldc;
    float alpha, beta;
    int bias;
} Shape;

/* op(A)[i][k], op(B)[k][n] */
static double a_at(const Shape *s, const uint16_t *A, int i, int k) {
    return bf(s->ta ? A[(size_t)k * s->lda + i] : A[(size_t)i * s->lda + k]);
}
static double b_at(const Shape *s, const uint16_t *B, int k, int n) {
    return bf(s->tb ? B[(size_t)n * s->ldb + k] : B[(size_t)k * s->ldb + n]);
}

/* Worst |C − ref| / bound over C (rows every `step`-th); a NaN or an infinity counts as INFINITY. */
static double excess(const Shape *s, const uint16_t *A, const uint16_t *B, const float *bias, const float *C0,
                     const float *C, int step) {
    double worst = 0;
    for (int i = 0; i < s->M; i += step)
        for (int n = 0; n < s->N; n++) {
            double ref = 0, mag = 0;
            for (int k = 0; k < s->K; k++) {
                double t = a_at(s, A, i, k) * b_at(s, B, k, n);
                ref += t, mag += fabs(t);
            }
            ref *= s->alpha, mag *= fabs(s->alpha);
            if (bias) ref += bias[n], mag += fabs(bias[n]);
            if (s->beta != 0.0f) { /* a beta-0 call's C0 is NaN */
                double c0 = C0[(size_t)i * s->ldc + n];
                ref += s->beta * c0, mag += fabs(s->beta * c0);
            }
            double bound = (s->K + 2) * ldexp(1.0, -23) * mag + 1e-30;
            double e = fabs(C[(size_t)i * s->ldc + n] - ref) / bound;
            if (!(e <= 1e300)) e = INFINITY;
            worst = e > worst ? e : worst;
        }
    return worst;
}

static size_t a_size(const Shape *s) { return (size_t)(s->ta ? s->K : s->M) * s->lda; }
static size_t b_size(const Shape *s) { return (size_t)(s->tb ? s->N : s->K) * s->ldb; }

/* C0 for the call: random for beta 1, NaN for beta 0 (an unwritten element shows). */
static float *start_c(const Shape *s) {
    size_t n = (size_t)s->M * s->ldc;
    float *C = malloc(n * sizeof *C);
    for (size_t i = 0; i < n; i++) C[i] = s->beta != 0.0f ? frand() : NAN;
    return C;
}

static int run_pack(const Shape *s, const uint16_t *A, const uint16_t *B, const float *bias, float *C) {
    return mm_pack_gemm_bf16(s->ta, s->tb, s->M, s->N, s->K, s->alpha, A, s->lda, B, s->ldb, s->beta, C, s->ldc, bias);
}

static void test_shape(Shape s, int controls) {
    uint16_t *A = rand_bf16(a_size(&s)), *B = rand_bf16(b_size(&s));
    float *bias = NULL;
    if (s.bias) {
        bias = malloc((size_t)s.N * sizeof *bias);
        for (int n = 0; n < s.N; n++) bias[n] = frand();
    }
    float *C0 = start_c(&s), *C = malloc((size_t)s.M * s.ldc * sizeof *C), *C1 = malloc((size_t)s.M * s.ldc * sizeof *C);
    size_t cb = (size_t)s.M * s.ldc * sizeof *C;
    int step = s.M > 256 ? 7 : 1;
    char name[160];
    snprintf(name, sizeof name, "mm_pack_gemm_bf16 %s%s %dx%dx%d lda %d ldb %d ldc %d alpha %g beta %g%s vs float64",
             s.ta ? "T" : "N", s.tb ? "T" : "N", s.M, s.N, s.K, s.lda, s.ldb, s.ldc, s.alpha, s.beta,
             s.bias ? " + bias" : "");
    memcpy(C, C0, cb);
    omp_set_num_threads(2);
    int ran = run_pack(&s, A, B, bias, C);
    double e = ran ? excess(&s, A, B, bias, C0, C, step) : INFINITY;
    tu_check(ran && e <= 1.0, name, "ran %d, worst error / fp32-sum bound = %.3g (<= 1)", ran, e);

    /* The same bits at 1 thread. */
    memcpy(C1, C0, cb);
    omp_set_num_threads(1);
    run_pack(&s, A, B, bias, C1);
    omp_set_num_threads(2);
    snprintf(name, sizeof name, "mm_pack_gemm_bf16 %s%s %dx%dx%d: 1 thread = 2 threads, bit for bit", s.ta ? "T" : "N",
             s.tb ? "T" : "N", s.M, s.N, s.K);
    tu_check(!memcmp(C, C1, cb), name, "%s", memcmp(C, C1, cb) ? "bits differ" : "identical");

    /* Rows r0 .. M − 1 as a problem of their own (other row blocks): the same bits. */
    int r0 = s.M > 9 ? 9 : s.M - 1;
    Shape sub = s;
    sub.M = s.M - r0;
    const uint16_t *Asub = s.ta ? A + r0 : A + (size_t)r0 * s.lda;
    memcpy(C1, C0, cb);
    run_pack(&sub, Asub, B, bias, C1 + (size_t)r0 * s.ldc);
    snprintf(name, sizeof name, "mm_pack_gemm_bf16 %s%s %dx%dx%d: rows %d.. alone = within the whole, bit for bit",
             s.ta ? "T" : "N", s.tb ? "T" : "N", s.M, s.N, s.K, r0);
    int same = !memcmp(C + (size_t)r0 * s.ldc, C1 + (size_t)r0 * s.ldc, (size_t)sub.M * s.ldc * sizeof *C);
    tu_check(same, name, "%s", same ? "identical" : "bits differ");

    if (controls) {
        /* One B value one bf16 ulp off in the GEMM's input (the largest of op(B)'s first column, so
         * the change is well over the bound at this K); the oracle reads the true B. */
        size_t at = 0;
        for (int k = 0; k < s.K; k++) {
            size_t x = s.tb ? (size_t)k : (size_t)k * s.ldb;
            if (fabs(bf(B[x])) > fabs(bf(B[at]))) at = x;
        }
        B[at] ^= 1u;
        memcpy(C1, C0, cb);
        run_pack(&s, A, B, bias, C1);
        B[at] ^= 1u;
        double ec = excess(&s, A, B, bias, C0, C1, 1);
        tu_check(ec > 1.0, "control: packed GEMM with one B value off by one bf16 ulp is caught",
                 "worst error / bound = %.3g (must be > 1)", ec);
        /* One output element not written (NaN). */
        memcpy(C1, C, cb);
        C1[(size_t)(s.M / 2) * s.ldc + s.N / 2] = NAN;
        ec = excess(&s, A, B, bias, C0, C1, 1);
        tu_check(ec > 1.0, "control: an output element left NaN is caught", "worst error / bound = %.3g (must be > 1)",
                 ec);
    }
    free(A), free(B), free(bias), free(C0), free(C), free(C1);
}

/* op(B) packed once, then C = A · op(B) against it (alpha 1, beta 0, A read in place). */
static void test_prepacked(int tb, int M, int N, int K, int lda, int controls) {
    Shape s = {.ta = 0, .tb = tb, .M = M, .N = N, .K = K, .lda = lda, .ldb = tb ? K + 3 : N + 5, .ldc = N + 1,
               .alpha = 1, .beta = 0};
    uint16_t *A = rand_bf16(a_size(&s)), *B = rand_bf16(b_size(&s));
    for (int i = 0; i < M && lda > K; i++) A[(size_t)i * lda + K] = 0x7FC0; /* NaN just past each row's K values */
    size_t words = mm_packed_b_words(N, K), cb = (size_t)M * s.ldc * sizeof(float);
    uint32_t *P = aligned_alloc(64, (words * 4 + 63) / 64 * 64);
    float *C0 = start_c(&s), *C = malloc(cb), *C1 = malloc(cb);
    char name[160];
    omp_set_num_threads(2);
    int packed = mm_pack_b_bf16(P, tb, N, K, B, s.ldb);
    memcpy(C, C0, cb);
    int ran = packed && mm_packed_gemm_bf16(M, N, K, A, lda, P, C, s.ldc);
    double e = ran ? excess(&s, A, B, NULL, C0, C, 1) : INFINITY;
    snprintf(name, sizeof name, "mm_packed_gemm_bf16 N%s %dx%dx%d lda %d (NaN past K) vs float64", tb ? "T" : "N", M, N, K,
             lda);
    tu_check(ran && e <= 1.0, name, "ran %d, worst error / fp32-sum bound = %.3g (<= 1)", ran, e);
    memcpy(C1, C0, cb);
    omp_set_num_threads(1);
    mm_packed_gemm_bf16(M, N, K, A, lda, P, C1, s.ldc);
    omp_set_num_threads(2);
    snprintf(name, sizeof name, "mm_packed_gemm_bf16 N%s %dx%dx%d: 1 thread = 2 threads, bit for bit", tb ? "T" : "N", M, N,
             K);
    tu_check(!memcmp(C, C1, cb), name, "%s", memcmp(C, C1, cb) ? "bits differ" : "identical");
    /* mm_pack_gemm_bf16 packs op(A) for an odd K (the last pair's high half 0) and sums each output
     * in one pass: the prepacked GEMM's bits, K blocks or not. */
    memcpy(C1, C0, cb);
    run_pack(&s, A, B, NULL, C1);
    snprintf(name, sizeof name, "mm_packed_gemm_bf16 N%s %dx%dx%d = mm_pack_gemm_bf16, bit for bit%s", tb ? "T" : "N", M,
             N, K, (K + 1) / 2 > 2048 ? " (K in blocks)" : "");
    tu_check(!memcmp(C, C1, cb), name, "%s", memcmp(C, C1, cb) ? "bits differ" : "identical");
    if (controls) {
        /* Told K + 1 (even), the GEMM reads the NaN past K in full pairs: NaN · 0 (B's last pair's
         * high half) is NaN, so the poison is there to be caught. */
        memcpy(C1, C0, cb);
        mm_packed_gemm_bf16(M, N, K + 1, A, lda, P, C1, s.ldc);
        double ec = excess(&s, A, B, NULL, C0, C1, 1);
        tu_check(ec > 1.0, "control: the prepacked GEMM told K + 1 reads the NaN past K and is caught",
                 "worst error / bound = %.3g (must be > 1)", ec);
        /* One value of B one bf16 ulp off when packed (the oracle reads the true B). */
        size_t at = 0;
        for (int k = 0; k < K; k++) {
            size_t x = tb ? (size_t)k : (size_t)k * s.ldb;
            if (fabs(bf(B[x])) > fabs(bf(B[at]))) at = x;
        }
        B[at] ^= 1u;
        mm_pack_b_bf16(P, tb, N, K, B, s.ldb);
        B[at] ^= 1u;
        memcpy(C1, C0, cb);
        mm_packed_gemm_bf16(M, N, K, A, lda, P, C1, s.ldc);
        ec = excess(&s, A, B, NULL, C0, C1, 1);
        tu_check(ec > 1.0, "control: a packed B value off by one bf16 ulp is caught", "worst error / bound = %.3g (must be > 1)",
                 ec);
    }
    free(A), free(B), free(P), free(C0), free(C), free(C1);
}

/* The bf16 head with its weight packed: n = 320 rows in one chunk against 64-row chunks; V odd (the
 * input gradient's K), a few ignored targets. */
/* The largest |a − b| of two head weight gradients (V × C) over n · 2^-24 · Σ_i |x[i][c]| / n: the
 * spread of summing n products of magnitude <= |x|/n in another order. */
static double dw_excess(const float *a, const float *b, const float *x, int n, int C, int V) {
    double worst = 0;
    for (int c = 0; c < C; c++) {
        double mag = 0;
        for (int i = 0; i < n; i++) mag += fabs(x[(size_t)i * C + c]) / n;
        for (int v = 0; v < V; v++) {
            double e = fabs(a[(size_t)v * C + c] - b[(size_t)v * C + c]) / (n * ldexp(1.0, -24) * mag + 1e-30);
            worst = !(e <= 1e300) ? INFINITY : e > worst ? e : worst;
        }
    }
    return worst;
}

static void test_head_packed(void) {
    const int n = 320, C = 64, V = 999, Vp = 1024;
    uint16_t *wlp = rand_bf16((size_t)V * C);
    float *x = malloc((size_t)n * C * sizeof *x), *wf = calloc((size_t)V * C, sizeof *wf);
    int32_t *tg = malloc((size_t)n * sizeof *tg);
    for (size_t i = 0; i < (size_t)n * C; i++) x[i] = frand();
    for (int i = 0; i < n; i++) tg[i] = i % 37 == 5 ? -1 : (int)((unsigned)(frand() * 1e6f + 2e6f) % (unsigned)V);
    size_t pw = mm_packed_b_words(V, C) > mm_packed_b_words(C, V) ? mm_packed_b_words(V, C) : mm_packed_b_words(C, V);
    MatPrec mp = {.bf16 = 1, .pack_words = pw};
    mp.a = malloc((size_t)n * Vp * 2), mp.b = malloc((size_t)n * C * 2);
    mp.wt = aligned_alloc(64, 2 * pw * 4), mp.wn = mp.wt + pw;
    float *logits = malloc((size_t)n * Vp * sizeof *logits);
    float *loss[4], *dx[4], *dw[4];
    for (int r = 0; r < 4; r++) {
        loss[r] = malloc((size_t)n * sizeof(float)), dx[r] = malloc((size_t)n * C * sizeof(float));
        dw[r] = malloc((size_t)V * C * sizeof(float));
    }
    omp_set_num_threads(2);
    mm_pack_enable(1); /* also on an AMX CPU, where the default keeps oneDNN */
    int wanted = mm_head_pack_wanted(n);
    /* 0: one chunk; 1: 64-row chunks; 2: one chunk on oneDNN (no packed weight) */
    for (int r = 0; r < 3; r++) {
        MatPrec m2 = mp;
        if (r == 2) m2.wt = m2.wn = NULL;
        head_forward_backward_p(&m2, loss[r], dx[r], dw[r], logits, x, wf, wlp, tg, n, C, V, Vp, 1.0f / n, r == 1 ? 64 : n, 0,
                                2, NULL, NULL, NULL, NULL);
    }
    int same = !memcmp(loss[0], loss[1], (size_t)n * sizeof(float)) && !memcmp(dx[0], dx[1], (size_t)n * C * sizeof(float));
    tu_check(wanted && same, "bf16 head, packed weight: one 320-row chunk = 64-row chunks (losses, dx), bit for bit",
             "packed %d, %s", wanted, same ? "identical" : "bits differ");
    /* Against the oneDNN head: the logits and input gradient GEMMs sum in another order, so the
     * bf16 logit gradients may round apart by one bf16 ulp (2^-8 relative) where the fp32 values
     * straddle; the weight gradient's error is then within that times Σ|x|. */
    double worst = 0;
    for (int v = 0; v < V; v++)
        for (int c = 0; c < C; c++) {
            double mag = 0;
            for (int i = 0; i < n; i++) mag += fabs(x[(size_t)i * C + c]) / n;
            double e = fabs(dw[0][(size_t)v * C + c] - dw[2][(size_t)v * C + c]) / (ldexp(1.0, -7) * mag + 1e-30);
            worst = !(e <= 1e300) ? INFINITY : e > worst ? e : worst;
        }
    tu_check(worst <= 1.0, "bf16 head, packed weight: weight gradient = the oneDNN head's within 2^-7 of Σ|x|/n",
             "worst / bound = %.3g (<= 1)", worst);
    /* The backward GEMMs per group of three 64-row chunks (MatPrec.head_rows 192: groups of 192
     * and 128 rows), as the trainer runs them: the same losses and input gradient bit for bit, and
     * the weight gradient the one-chunk run's up to the order of its fp32 sums (dlogits' bf16
     * values are the same, |dlogit| <= 1/n, so the error is within n · 2^-24 · Σ|x|/n). */
    MatPrec m3 = mp;
    m3.head_rows = 192;
    head_forward_backward_p(&m3, loss[3], dx[3], dw[3], logits, x, wf, wlp, tg, n, C, V, Vp, 1.0f / n, 64, 0, 2, NULL,
                            NULL, NULL, NULL);
    same = !memcmp(loss[0], loss[3], (size_t)n * sizeof(float)) && !memcmp(dx[0], dx[3], (size_t)n * C * sizeof(float));
    double eg = dw_excess(dw[3], dw[0], x, n, C, V);
    tu_check(same && eg <= 1.0, "bf16 head, backward in groups of 3 chunks: losses, dx bit for bit, dwte = one chunk's",
             "%s, dwte worst / (n·2^-24·Σ|x|/n) = %.3g (<= 1)", same ? "identical" : "bits differ", eg);
    /* Control: one target moved in the 64-row-chunk run: the comparisons must see it. */
    tg[100] = (tg[100] + 1) % V;
    head_forward_backward_p(&mp, loss[1], dx[1], dw[1], logits, x, wf, wlp, tg, n, C, V, Vp, 1.0f / n, 64, 0, 2, NULL, NULL,
                            NULL, NULL);
    int caught = memcmp(loss[0], loss[1], (size_t)n * sizeof(float)) || memcmp(dx[0], dx[1], (size_t)n * C * sizeof(float));
    tu_check(caught, "control: one target moved, the head's comparison differs", "%s", caught ? "differs" : "identical");
    head_forward_backward_p(&m3, loss[3], dx[3], dw[3], logits, x, wf, wlp, tg, n, C, V, Vp, 1.0f / n, 64, 0, 2, NULL,
                            NULL, NULL, NULL);
    eg = dw_excess(dw[3], dw[0], x, n, C, V);
    tu_check(eg > 1.0, "control: one target moved in the grouped run, its dwte is past the bound",
             "worst / bound = %.3g (must be > 1)", eg);
    mm_pack_enable(mm_tile_preferred());
    for (int r = 0; r < 4; r++) free(loss[r]), free(dx[r]), free(dw[r]);
    free(wlp), free(x), free(wf), free(tg), free(mp.a), free(mp.b), free(mp.wt), free(logits);
}

/* mm_gemm_bf16 at a training step's shape runs the packed GEMM where mm_pack_wanted says so, and
 * oneDNN once disabled. */
static void test_dispatch(void) {
    Shape s = {.ta = 0, .tb = 1, .M = 512, .N = 384, .K = 384, .lda = 384, .ldb = 384, .ldc = 384, .alpha = 1, .beta = 0};
    uint16_t *A = rand_bf16(a_size(&s)), *B = rand_bf16(b_size(&s));
    float *bias = malloc((size_t)s.N * sizeof *bias);
    for (int n = 0; n < s.N; n++) bias[n] = frand();
    size_t cb = (size_t)s.M * s.ldc * sizeof(float);
    float *C0 = start_c(&s), *Cp = malloc(cb), *Cg = malloc(cb), *Cd = malloc(cb);
    omp_set_num_threads(2);
    Err err;
    /* The default: packed where mm_tile_preferred (AVX512_BF16 without AMX). */
    int def = mm_pack_wanted(s.M, s.N, s.K);
    tu_check(def == mm_tile_preferred(), "default: mm_pack_wanted at a layer shape (512x384x384) = mm_tile_preferred",
             "wanted %d, mm_tile_preferred %d", def, mm_tile_preferred());
    /* The head packs its weight from 256 rows a call, where the layer GEMMs are packed. */
    tu_check(mm_head_pack_wanted(256) == def && !mm_head_pack_wanted(255),
             "default: mm_head_pack_wanted at 256 rows = mm_pack_wanted, never at 255", "%d at 256, %d at 255",
             mm_head_pack_wanted(256), mm_head_pack_wanted(255));
    /* Turned off: oneDNN, within the bound. */
    mm_pack_enable(0);
    int off = mm_pack_wanted(s.M, s.N, s.K);
    memcpy(Cd, C0, cb);
    mm_linear_bf16(s.M, s.N, s.K, A, B, bias, Cd);
    double e = excess(&s, A, B, bias, C0, Cd, 3);
    tu_check(!off && mm_take_error(&err) == ST_OK && e <= 1.0, "mm_pack_enable(0): mm_linear_bf16 on oneDNN vs float64",
             "wanted %d (0), worst error / bound = %.3g (<= 1)", off, e);
    mm_pack_enable(1);
    int wanted = mm_pack_wanted(s.M, s.N, s.K);
    tu_check(wanted == 1, "mm_pack_enable(1): wanted at a layer shape (512x384x384)", "wanted %d", wanted);
    memcpy(Cp, C0, cb), memcpy(Cg, C0, cb);
    run_pack(&s, A, B, bias, Cp);
    mm_linear_bf16(s.M, s.N, s.K, A, B, bias, Cg);
    tu_check(mm_take_error(&err) == ST_OK && !memcmp(Cp, Cg, cb), "mm_linear_bf16 takes the packed path once enabled",
             "%s", memcmp(Cp, Cg, cb) ? "bits differ from mm_pack_gemm_bf16" : "bits of mm_pack_gemm_bf16");
    /* Row halves from the two threads of a parallel region (each GEMM on its calling thread, as the
     * tp overlap's row chunks run): the bits of the whole. */
    memcpy(Cd, C0, cb);
#pragma omp parallel num_threads(2)
    {
        int h = omp_get_thread_num(), r0 = h ? 200 : 0, m = h ? s.M - 200 : 200;
        mm_linear_bf16(m, s.N, s.K, A + (size_t)r0 * s.lda, B, bias, Cd + (size_t)r0 * s.ldc);
    }
    tu_check(mm_take_error(&err) == ST_OK && !memcmp(Cd, Cg, cb),
             "mm_linear_bf16 on row ranges from a parallel region's threads = the whole, bit for bit", "%s",
             memcmp(Cd, Cg, cb) ? "bits differ" : "identical");
    /* Not wanted: the LM head's logits (a 50304-row wte as op(B)) and input gradient (K = 50304), a
     * test-sized layer. */
    tu_check(!mm_pack_wanted(333, 50304, 384) && !mm_pack_wanted(333, 384, 50304) && !mm_pack_wanted(64, 64, 64),
             "mm_pack_wanted: not for the LM head's logits and input-gradient GEMMs or a 64 x 64 layer", "%d %d %d",
             mm_pack_wanted(333, 50304, 384), mm_pack_wanted(333, 384, 50304), mm_pack_wanted(64, 64, 64));
    mm_pack_enable(0);
    tu_check(!mm_pack_wanted(s.M, s.N, s.K) && !mm_head_pack_wanted(4096), "mm_pack_enable(0) turns the path off, the head's too",
             "wanted %d, head %d", mm_pack_wanted(s.M, s.N, s.K), mm_head_pack_wanted(4096));
    free(A), free(B), free(bias), free(C0), free(Cp), free(Cg), free(Cd);
}

int main(void) {
    Shape probe = {.M = 8, .N = 16, .K = 2, .lda = 2, .ldb = 16, .ldc = 16, .alpha = 1};
    uint16_t a[16] = {0}, b[32] = {0};
    float c[128];
    if (!mm_pack_gemm_bf16(0, 0, probe.M, probe.N, probe.K, 1.0f, a, 2, b, 16, 0.0f, c, 16, NULL)) {
        tu_bf16_kernels_missing("mm_pack_gemm_bf16", "bf16 GEMMs run on oneDNN");
        return tu_exit();
    }
    /* The layer GEMMs of a step (fwd NT + bias, dX NN, dW TN + C), at test-sized rows. */
    test_shape((Shape){0, 1, 256, 1152, 384, 384, 384, 1152, 1.0f, 0.0f, 1}, 0);
    test_shape((Shape){0, 0, 256, 384, 1536, 1536, 384, 384, 1.0f, 0.0f, 0}, 0);
    test_shape((Shape){1, 0, 384, 1536, 256, 384, 1536, 1536, 1.0f, 1.0f, 0}, 0);
    /* Every tail: rows (not a multiple of 8 or of the row blocks), columns (not of 16 or 48), odd
     * K, odd and padded leading dimensions, alpha, the fourth transpose pair. */
    test_shape((Shape){0, 1, 203, 77, 99, 101, 103, 80, 0.5f, 1.0f, 1}, 1);
    test_shape((Shape){1, 1, 77, 203, 65, 80, 66, 205, -2.0f, 0.0f, 0}, 0);
    test_shape((Shape){0, 0, 1, 1, 1, 1, 1, 1, 1.0f, 1.0f, 1}, 0);
    test_shape((Shape){1, 0, 9, 50, 3, 9, 51, 50, 1.0f, 0.0f, 0}, 0);
    test_shape((Shape){0, 0, 100, 49, 64, 65, 49, 49, 0.125f, 0.0f, 0}, 0);
    test_shape((Shape){0, 1, 97, 96, 2048, 2048, 2048, 96, 1.0f, 1.0f, 0}, 0);
    /* Over 512 rows (block mode: each thread's share of the 8-row groups cut into row blocks), with
     * a row tail: A read in place, A packed (odd K), and A transposed (pack_at_rows). */
    test_shape((Shape){0, 0, 1029, 100, 64, 64, 100, 100, 1.0f, 0.0f, 1}, 0);
    test_shape((Shape){0, 1, 1037, 77, 99, 101, 103, 80, 0.5f, 1.0f, 0}, 1);
    test_shape((Shape){1, 0, 777, 50, 130, 780, 51, 50, 1.0f, 0.0f, 0}, 0);
    test_shape((Shape){1, 1, 1029, 77, 65, 1031, 66, 80, -2.0f, 0.0f, 0}, 0); /* A^T with an odd K */
    /* The head's logits (op(B) = wteᵀ, K = C, panels in parallel) and input gradient (op(B) = wte,
     * K = the vocabulary: one pass, and 3 blocks of up to 1024 pairs), with tails and odd K. */
    test_prepacked(1, 45, 203, 98, 98, 0);
    test_prepacked(0, 29, 100, 97, 98, 1);
    test_prepacked(0, 37, 100, 5001, 5004, 0);
    test_prepacked(1, 19, 50, 4801, 4802, 0);
    test_prepacked(0, 203, 60, 4501, 4502, 0); /* many rows: threads split the rows, K in blocks */
    test_head_packed();
    test_dispatch();
    return tu_exit();
}
