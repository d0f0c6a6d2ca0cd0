/* test_matmul_tile.c — the bf16 tile GEMM and its operand packing (src/model/matmul.h), which the
 * bf16 attention runs on (kernels_attention.c's tile path).
 *
 * Oracles:
 *  - packing: each packer against the layout's definition written out element by element with
 *    half_bf16 (exact equality), at shapes with odd and non-multiple-of-16 tails;
 *  - GEMM: C = alpha·A·B + beta·C in float64 over the same bf16-rounded operands (products of
 *    bf16 values are exact in fp32, so the only error is the fp32 accumulation): per element
 *    |C − ref| <= (K + 2)·2^-23 · (Σ_k |a_k b_k| + |beta·C0|), the standard bound of a K-term
 *    fp32 sum, at shapes with row, column and odd-K tails, beta 0 and 1, B packed both ways.
 *  - the causal band (mm_tile_gemm_bf16_band): bit for bit the full tile GEMM on every output a
 *    row needs, where A carries the mask's zeros; nothing written past the band's reach.
 * Negative controls (run here): one packed B pair changed by one bf16 ulp must make the same
 * comparison fail, so a comparison that cannot fail is caught; a nonzero A value inside the mask
 * must make the band differ from the full GEMM (the skipped pairs are really skipped).
 * A build without AVX512_BF16 has no tile GEMM (attention then uses oneDNN): the packers are still
 * tested, and the test fails if this CPU has the instructions, i.e. the build lost them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/half.h"
#include "model/matmul.h"
#include "testutil.h"

static uint64_t rng_state = 88172645463325252ull;
static float frand(void) { /* xorshift64, uniform in [-1, 1) */
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}
static float *randv(size_t n) {
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = frand();
    return v;
}
static double bf(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static uint32_t pair_of(float lo, float hi) { return (uint32_t)half_bf16(lo) | (uint32_t)half_bf16(hi) << 16; }

/* The three packers against their definitions (matmul.h). */
static void test_pack(int R, int N) {
    int P = (R + 1) / 2, ld = R + 3; /* X: R rows of N (pack_rows) or N rows of R (pack_t), padded rows */
    float *X = randv((size_t)(R > N ? R : N) * (size_t)(ld > N + 5 ? ld : N + 5));
    size_t ldx = (size_t)(ld > N + 5 ? ld : N + 5);
    uint32_t *got = calloc((size_t)(P + 1) * (N + 1) * 2, 4), *want = calloc((size_t)(P + 1) * (N + 1) * 2, 4);
    long bad = 0;
    /* mm_tile_pack_t: X (N rows × R columns) → P pair rows × N, row stride N + 1. */
    mm_tile_pack_t(got, N + 1, X, ldx, N, R);
    for (int p = 0; p < P; p++)
        for (int n = 0; n < N; n++) {
            const float *x = X + (size_t)n * ldx;
            bad += got[(size_t)p * (N + 1) + n] != pair_of(x[2 * p], 2 * p + 1 < R ? x[2 * p + 1] : 0.0f);
        }
    /* mm_tile_pack_rows: X (R rows × N columns) → P pair rows × N. */
    mm_tile_pack_rows(got, N + 1, X, ldx, R, N);
    for (int p = 0; p < P; p++)
        for (int n = 0; n < N; n++)
            bad += got[(size_t)p * (N + 1) + n] !=
                   pair_of(X[(size_t)2 * p * ldx + n], 2 * p + 1 < R ? X[(size_t)(2 * p + 1) * ldx + n] : 0.0f);
    /* mm_tile_pack_rows_t: bf16 X (R rows × N columns) → N rows × P pairs, row stride P + 1. */
    uint16_t *Xb = malloc((size_t)R * (N + 2) * 2);
    for (int r = 0; r < R; r++)
        for (int n = 0; n < N + 2; n++) Xb[(size_t)r * (N + 2) + n] = half_bf16(frand());
    mm_tile_pack_rows_t(got, P + 1, Xb, (size_t)N + 2, R, N);
    for (int n = 0; n < N; n++)
        for (int p = 0; p < P; p++) {
            uint32_t hi = 2 * p + 1 < R ? Xb[(size_t)(2 * p + 1) * (N + 2) + n] : 0;
            bad += got[(size_t)n * (P + 1) + p] != ((uint32_t)Xb[(size_t)2 * p * (N + 2) + n] | hi << 16);
        }
    char name[96];
    snprintf(name, sizeof name, "tile packing %dx%d vs the layouts' definitions", R, N);
    tu_check(bad == 0, name, "%ld pairs differ (exact)", bad);
    free(X), free(got), free(want), free(Xb);
}

/* Worst |C − ref| / bound over C; ref and bound in float64 from the bf16 operands. */
static double gemm_excess(int M, int N, int K, float alpha, const uint32_t *A, int lda, const uint32_t *B, int ldb,
                          float beta, const float *C0, const float *C) {
    double worst = 0;
    for (int i = 0; i < M; i++)
        for (int n = 0; n < N; n++) {
            double ref = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                uint32_t a = A[(size_t)i * lda + k / 2], b = B[(size_t)(k / 2) * ldb + n];
                double t = bf((uint16_t)(k % 2 ? a >> 16 : a)) * bf((uint16_t)(k % 2 ? b >> 16 : b));
                ref += t, mag += fabs(t);
            }
            ref *= alpha, mag *= fabs(alpha);
            ref += beta * C0[(size_t)i * N + n], mag += fabs(beta * C0[(size_t)i * N + n]);
            double bound = (K + 2) * ldexp(1.0, -23) * mag + 1e-30;
            double e = fabs(C[(size_t)i * N + n] - ref) / bound;
            worst = e > worst ? e : worst;
        }
    return worst;
}

static void test_gemm(int M, int N, int K, float alpha, float beta, int b_rows) {
    int KP = (K + 1) / 2, lda = KP + 1, ldb = N + 3;
    /* A: M × K fp32 → pair rows (mm_tile_pack_rows of A^T is A's pair rows: use the definition). */
    float *Af = randv((size_t)M * K), *Bf = randv((size_t)K * N + (size_t)N * K), *C0 = randv((size_t)M * N);
    uint32_t *A = calloc((size_t)M * lda, 4), *B = calloc((size_t)KP * ldb, 4);
    for (int i = 0; i < M; i++)
        for (int p = 0; p < KP; p++)
            A[(size_t)i * lda + p] =
                pair_of(Af[(size_t)i * K + 2 * p], 2 * p + 1 < K ? Af[(size_t)i * K + 2 * p + 1] : 0.0f);
    if (b_rows) /* B (K × N) row-major: row pairs interleaved */
        mm_tile_pack_rows(B, ldb, Bf, (size_t)N, K, N);
    else /* B = X^T, X (N × K) row-major */
        mm_tile_pack_t(B, ldb, Bf, (size_t)K, N, K);
    float *C = malloc((size_t)M * N * sizeof *C);
    memcpy(C, C0, (size_t)M * N * sizeof *C);
    mm_tile_gemm_bf16(M, N, KP, alpha, A, lda, B, ldb, beta, C, N);
    double e = gemm_excess(M, N, K, alpha, A, lda, B, ldb, beta, C0, C);
    char name[128];
    snprintf(name, sizeof name, "mm_tile_gemm_bf16 %dx%dx%d alpha %g beta %g (B %s) vs float64", M, N, K, alpha, beta,
             b_rows ? "rows" : "transposed");
    tu_check(e <= 1.0, name, "worst error / fp32-sum bound = %.3g (<= 1)", e);
    if (M == 64 && N == 64 && K == 64 && beta == 1.0f && b_rows) {
        /* Negative control: one pair of B one bf16 ulp off (low half of pair (3, 5)) must fail. */
        B[(size_t)3 * ldb + 5] ^= 1u;
        memcpy(C, C0, (size_t)M * N * sizeof *C);
        mm_tile_gemm_bf16(M, N, KP, alpha, A, lda, B, ldb, beta, C, N);
        B[(size_t)3 * ldb + 5] ^= 1u; /* the oracle reads the true B */
        double ec = gemm_excess(M, N, K, alpha, A, lda, B, ldb, beta, C0, C);
        tu_check(ec > 1.0, "control: tile GEMM with one B value off by one bf16 ulp is caught",
                 "worst error / bound = %.3g (must be > 1)", ec);
    }
    free(Af), free(Bf), free(C0), free(A), free(B), free(C);
}

/* The causal band (mm_tile_gemm_bf16_band) against the full tile GEMM, bit for bit: query row i
 * sees keys j <= i + d. A carries the mask's zeros (KEND: a query row's pairs past its last key;
 * KBEG: a key row's pairs before its first query; their partial pairs keep a zero half), as
 * attention's P and dS do. COLS: every column a row needs equal, and none past its tile's last
 * key written (C there poisoned with NaN stays NaN). Negative control (control 1): one
 * masked A value made nonzero must make KEND/KBEG differ from the full GEMM, which reads it. */
static void test_band(MmBand band, int d, int M, int N, int KP, float beta, int control) {
    int lda = KP + 1, ldb = N + 3;
    uint32_t *A = calloc((size_t)M * lda, 4), *B = calloc((size_t)KP * ldb, 4);
    float *C0 = randv((size_t)M * N), *Cf = malloc((size_t)M * N * 4), *Cb = malloc((size_t)M * N * 4);
    for (int i = 0; i < M; i++)
        for (int p = 0; p < KP; p++) {
            float lo = frand(), hi = frand();
            int k0 = 2 * p, k1 = 2 * p + 1; /* the pair's two keys (KEND) or queries (KBEG) */
            if (band == MM_BAND_KEND) lo = k0 <= i + d ? lo : 0.0f, hi = k1 <= i + d ? hi : 0.0f;
            if (band == MM_BAND_KBEG) lo = k0 >= i - d ? lo : 0.0f, hi = k1 >= i - d ? hi : 0.0f;
            A[(size_t)i * lda + p] = pair_of(lo, hi);
        }
    for (size_t i = 0; i < (size_t)KP * ldb; i++) B[i] = pair_of(frand(), frand());
    int at = -1; /* the control's masked A word: one no row of its tile reads */
    if (control && band == MM_BAND_KEND && KP - 1 > (3 + d) / 2) at = KP - 1;                /* row 0's last pair */
    if (control && band == MM_BAND_KBEG && ((M - 1) / 4 * 4 - d) / 2 > 0) at = (M - 1) * lda; /* the last row's first */
    if (at >= 0) A[at] = pair_of(0.5f, 0.5f);
    memcpy(Cf, C0, (size_t)M * N * 4);
    for (size_t i = 0; i < (size_t)M * N; i++) Cb[i] = band == MM_BAND_COLS && beta == 0.0f ? NAN : C0[i];
    mm_tile_gemm_bf16(M, N, KP, 0.125f, A, lda, B, ldb, beta, Cf, N);
    mm_tile_gemm_bf16_band(band, d, M, N, KP, 0.125f, A, lda, B, ldb, beta, Cb, N);
    int diff = 0, stray = 0;
    for (int i = 0; i < M; i++)
        for (int n = 0; n < N; n++) {
            size_t x = (size_t)i * N + n;
            int need = band != MM_BAND_COLS || n <= i + d;
            int tend = i < M / 4 * 4 ? i / 4 * 4 + 4 : i + 1; /* 4-row tiles, then single rows */
            int reach = band != MM_BAND_COLS || n < tend + d;
            if (need && memcmp(&Cf[x], &Cb[x], 4)) diff++;
            if (band == MM_BAND_COLS && beta == 0.0f && !reach && !isnan(Cb[x])) stray++;
        }
    const char *bn[] = {"none", "cols", "kend", "kbeg"};
    char name[160];
    if (control) {
        snprintf(name, sizeof name, "control: band %s with a nonzero A value inside the mask differs from the full GEMM", bn[band]);
        tu_check(at >= 0 && diff > 0, name, "masked word %d, %d outputs differ (must be > 0)", at, diff);
    } else {
        snprintf(name, sizeof name, "mm_tile_gemm_bf16_band %s d %d %dx%dx%d pairs beta %g = the full GEMM, bit for bit",
                 bn[band], d, M, N, KP, beta);
        tu_check(!diff && !stray, name, "%d needed outputs differ, %d written past the band", diff, stray);
    }
    free(A), free(B), free(C0), free(Cf), free(Cb);
}

int main(void) {
    test_pack(64, 64);
    test_pack(7, 37);
    test_pack(1, 1);
    test_pack(33, 129);
    if (!mm_tile_available()) {
        tu_bf16_kernels_missing("mm_tile_gemm_bf16", "attention uses oneDNN; packers tested");
        return tu_exit();
    }
    test_gemm(64, 64, 64, 1.0f, 1.0f, 1);   /* a block's P·V, beta 1 */
    test_gemm(64, 256, 64, 0.125f, 0.0f, 0); /* S = scale·Q K^T */
    test_gemm(256, 64, 64, 1.0f, 1.0f, 1);  /* dV += P^T dY */
    test_gemm(64, 64, 256, 1.0f, 1.0f, 1);  /* dQ += dS K, K = 256 */
    test_gemm(7, 37, 13, 0.5f, 1.0f, 0);    /* every tail: rows, columns, odd K */
    test_gemm(5, 70, 3, 1.0f, 0.0f, 1);
    test_gemm(1, 1, 1, 2.0f, 1.0f, 0);
    test_gemm(45, 45, 45, 0.17f, 0.0f, 0);  /* test_backend_kernels' T = 45 */
    /* The band, as attention calls it (d = query block start − key block start) and at tails. */
    test_band(MM_BAND_COLS, 0, 64, 64, 32, 0.0f, 0);   /* S on the diagonal block */
    test_band(MM_BAND_COLS, 192, 64, 256, 32, 0.0f, 0); /* the last query block of T = 256 */
    test_band(MM_BAND_COLS, 5, 61, 131, 7, 1.0f, 0);
    test_band(MM_BAND_KEND, 0, 64, 64, 32, 1.0f, 0);    /* P·V, dS·K */
    test_band(MM_BAND_KEND, 128, 64, 64, 96, 0.0f, 0);
    test_band(MM_BAND_KEND, 3, 37, 70, 21, 1.0f, 0);
    test_band(MM_BAND_KBEG, 0, 64, 64, 32, 1.0f, 0);    /* Pᵀ·dY, dSᵀ·Q (kn key rows, m queries) */
    test_band(MM_BAND_KBEG, 192, 256, 64, 32, 0.0f, 0);
    test_band(MM_BAND_KBEG, -6, 45, 33, 23, 1.0f, 0);   /* tile_rows_from's second call: d − n1 */
    test_band(MM_BAND_KEND, 0, 64, 64, 32, 1.0f, 1);
    test_band(MM_BAND_KBEG, 0, 64, 64, 32, 1.0f, 1);
    return tu_exit();
}
