/* matmul_tile.c — small bf16 GEMMs on vdpbf16ps and their operand packing (matmul.h). */
#include "model/matmul.h"

#include <string.h>

#include "core/half.h"
#include "model/matmul_simd.h"
#include "core/status.h"

#if defined(__AVX512F__) && defined(__AVX512BF16__)
#include <cpuid.h>
#include <immintrin.h>

int mm_tile_available(void) { return 1; }

/* AMX-BF16 (CPUID.(EAX=7,ECX=0):EDX[22]): oneDNN's AMX tiles beat one vdpbf16ps per 16 columns. */
int mm_tile_preferred(void) {
    static int cached = -1;
    if (cached < 0) {
        unsigned a, b, c, d;
        int amx = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 22 & 1u);
        cached = !amx;
    }
    return cached;
}

/* One register tile: R rows (1..4) × NV vectors of 16 columns (1..4), the last vector's columns
 * limited by mask `last`; 16 accumulators at most, each pair step loads NV vectors of B and
 * broadcasts one pair of A per row. R and NV are constants at every call (the switch below), so
 * the compiler unrolls both loops and keeps acc in registers. */
static inline __attribute__((always_inline)) void tile(const int R, const int NV, __mmask16 last, int KP, float alpha,
                                                       const uint32_t *A, int lda, const uint32_t *B, int ldb,
                                                       int beta1, float *C, int ldc) {
    __m512 acc[4][4];
    for (int r = 0; r < R; r++)
        for (int v = 0; v < NV; v++) acc[r][v] = _mm512_setzero_ps();
    for (int p = 0; p < KP; p++) {
        const uint32_t *b = B + (size_t)p * ldb;
        __m512i bv[4];
        for (int v = 0; v < NV; v++)
            bv[v] = v == NV - 1 ? _mm512_maskz_loadu_epi32(last, b + 16 * v) : _mm512_loadu_si512(b + 16 * v);
        for (int r = 0; r < R; r++) {
            __m512i a = _mm512_set1_epi32((int)A[(size_t)r * lda + p]);
            for (int v = 0; v < NV; v++) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], (__m512bh)a, (__m512bh)bv[v]);
        }
    }
    __m512 al = _mm512_set1_ps(alpha);
    for (int r = 0; r < R; r++)
        for (int v = 0; v < NV; v++) {
            __mmask16 k = v == NV - 1 ? last : (__mmask16)0xFFFF;
            float *c = C + (size_t)r * ldc + 16 * v;
            __m512 x = _mm512_mul_ps(acc[r][v], al);
            if (beta1) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(k, c));
            _mm512_mask_storeu_ps(c, k, x);
        }
}

/* Tile rows i .. i + R − 1 under the band (matmul.h): its columns [0, *nn) of the block at n0 and
 * its pairs [*p0, *p1); 0 when the band leaves the tile no column of this block. */
static inline int band_cut(MmBand band, int d, int i, int R, int n0, int *nn, int KP, int *p0, int *p1) {
    *p0 = 0, *p1 = KP;
    if (band == MM_BAND_COLS) {
        int w = i + R + d - n0; /* the tile's last row needs the columns before i + R + d */
        if (w <= 0) return 0;
        if (w < *nn) *nn = w;
    } else if (band == MM_BAND_KEND) {
        int e = (i + R - 1 + d) / 2 + 1; /* the pair of the last row's last key, + 1 */
        *p1 = e < 1 ? 1 : e < KP ? e : KP;
    } else if (band == MM_BAND_KBEG) {
        int b = (i - d) / 2; /* the pair of the first row's first query */
        *p0 = b < 0 ? 0 : b < KP ? b : KP - 1;
    }
    return 1;
}

#define TILE_BAND(R)                                                                                      \
    do {                                                                                                  \
        int nnt = nn, p0, p1;                                                                             \
        if (!band_cut(band, d, i, R, n0, &nnt, KP, &p0, &p1)) break;                                      \
        int nv = (nnt + 15) / 16;                                                                         \
        __mmask16 last = (__mmask16)(nnt % 16 ? (1u << (nnt % 16)) - 1 : 0xFFFFu);                       \
        const uint32_t *a = A + (size_t)i * lda + p0, *b = B + n0 + (size_t)p0 * ldb;                    \
        float *c = C + (size_t)i * ldc + n0;                                                              \
        int KPt = p1 - p0;                                                                                \
        switch (nv) {                                                                                     \
        case 1: tile(R, 1, last, KPt, alpha, a, lda, b, ldb, beta1, c, ldc); break;                       \
        case 2: tile(R, 2, last, KPt, alpha, a, lda, b, ldb, beta1, c, ldc); break;                       \
        case 3: tile(R, 3, last, KPt, alpha, a, lda, b, ldb, beta1, c, ldc); break;                       \
        default: tile(R, 4, last, KPt, alpha, a, lda, b, ldb, beta1, c, ldc); break;                      \
        }                                                                                                 \
    } while (0)

void mm_tile_gemm_bf16_band(MmBand band, int d, int M, int N, int KP, float alpha, const uint32_t *A, int lda,
                            const uint32_t *B, int ldb, float beta, float *C, int ldc) {
    ST_CHECK(beta == 0.0f || beta == 1.0f);
    int beta1 = beta != 0.0f;
    /* Column blocks of 64 outside, rows inside: a block's KP × 64 pairs of B (16 KB at KP = 64)
     * stay in L1 while every row of A passes over them. */
    for (int n0 = 0; n0 < N; n0 += 64) {
        int nn = N - n0 < 64 ? N - n0 : 64;
        int i = 0;
        for (; i + 4 <= M; i += 4) TILE_BAND(4);
        for (; i < M; i++) TILE_BAND(1);
    }
}

void mm_tile_gemm_bf16(int M, int N, int KP, float alpha, const uint32_t *A, int lda, const uint32_t *B, int ldb,
                       float beta, float *C, int ldc) {
    mm_tile_gemm_bf16_band(MM_BAND_NONE, 0, M, N, KP, alpha, A, lda, B, ldb, beta, C, ldc);
}

#else

int mm_tile_available(void) { return 0; }

int mm_tile_preferred(void) { return 0; }

void mm_tile_gemm_bf16_band(MmBand band, int d, int M, int N, int KP, float alpha, const uint32_t *A, int lda,
                            const uint32_t *B, int ldb, float beta, float *C, int ldc) {
    ST_CHECK_MSG(0, "mm_tile_gemm_bf16: this build does not target AVX512_BF16 (check mm_tile_available)");
}

void mm_tile_gemm_bf16(int M, int N, int KP, float alpha, const uint32_t *A, int lda, const uint32_t *B, int ldb,
                       float beta, float *C, int ldc) {
    mm_tile_gemm_bf16_band(MM_BAND_NONE, 0, M, N, KP, alpha, A, lda, B, ldb, beta, C, ldc);
}

#endif

static inline uint32_t pair(float lo, float hi) { return (uint32_t)half_bf16(lo) | (uint32_t)half_bf16(hi) << 16; }

#if defined(__AVX512F__) && defined(__AVX512BF16__)
/* Stores the transposed block: column t of the rows built (r[t] after mm_transpose16) goes to
 * dst + t·ldd, its first `cols` lanes; `rows` of them (tails of N, K). */
static inline void store_t(uint32_t *dst, size_t ldd, __m512i r[16], int rows, int cols) {
    mm_transpose16(r);
    __mmask16 k = (__mmask16)(cols >= 16 ? 0xFFFFu : (1u << cols) - 1);
    for (int t = 0; t < rows; t++) _mm512_mask_storeu_epi32(dst + (size_t)t * ldd, k, r[t]);
}

void mm_tile_pack_t(uint32_t *dst, int ldd, const float *X, size_t ldx, int N, int K) {
    int KP = (K + 1) / 2;
    for (int n0 = 0; n0 < N; n0 += 16) {
        int nn = N - n0 < 16 ? N - n0 : 16;
        /* The next block's rows, requested now: each row is a few lines far apart (a head's slice of
         * a qkv row), which the hardware prefetchers do not follow; cold, this loop ran 4x slower than
         * mm_tile_pack_rows over the same bytes. */
        for (int t = n0 ? 32 : 0; t < 48 && n0 + t < N; t++) mm_prefetch_row(X + (size_t)(n0 + t) * ldx, K);
        for (int p0 = 0; p0 < KP; p0 += 16) {
            int pn = KP - p0 < 16 ? KP - p0 : 16, k0 = 2 * p0, kk = K - k0 < 32 ? K - k0 : 32;
            __mmask16 lo = (__mmask16)(kk >= 16 ? 0xFFFFu : (1u << kk) - 1);
            __mmask16 hi = (__mmask16)(kk >= 32 ? 0xFFFFu : kk > 16 ? (1u << (kk - 16)) - 1 : 0);
            /* Row t of the block: row n0 + t of X, values k0 .. k0 + 31 as 16 pairs. */
            __m512i r[16];
            const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
            const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
            for (int t = 0; t < 16; t++) {
                if (t >= nn) {
                    r[t] = _mm512_setzero_si512();
                    continue;
                }
                const float *x = X + (size_t)(n0 + t) * ldx + k0;
                __m512i a = mm_bf16_lanes(_mm512_maskz_loadu_ps(lo, x)), b = mm_bf16_lanes(_mm512_maskz_loadu_ps(hi, x + 16));
                __m512i e = _mm512_permutex2var_epi32(a, even, b), o = _mm512_permutex2var_epi32(a, odd, b);
                r[t] = _mm512_or_si512(e, _mm512_slli_epi32(o, 16));
            }
            store_t(dst + (size_t)p0 * ldd + n0, ldd, r, pn, nn);
        }
    }
}

void mm_tile_pack_rows_t(uint32_t *dst, int ldd, const uint16_t *X, size_t ldx, int R, int N) {
    int RP = (R + 1) / 2;
    for (int p0 = 0; p0 < RP; p0 += 16) {
        int pn = RP - p0 < 16 ? RP - p0 : 16;
        for (int n0 = 0; n0 < N; n0 += 16) {
            int nn = N - n0 < 16 ? N - n0 : 16;
            __mmask16 k = mm_mask16(nn);
            /* Row t of the block: rows 2(p0 + t) and 2(p0 + t) + 1 of X interleaved, columns n0 ... */
            __m512i r[16];
            for (int t = 0; t < 16; t++) {
                int i = 2 * (p0 + t);
                if (t >= pn) {
                    r[t] = _mm512_setzero_si512();
                    continue;
                }
                __m512i a = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, X + (size_t)i * ldx + n0));
                __m512i b = _mm512_setzero_si512();
                if (i + 1 < R) b = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, X + (size_t)(i + 1) * ldx + n0));
                r[t] = _mm512_or_si512(a, _mm512_slli_epi32(b, 16));
            }
            store_t(dst + (size_t)n0 * ldd + p0, ldd, r, nn, pn);
        }
    }
}

#else

void mm_tile_pack_t(uint32_t *dst, int ldd, const float *X, size_t ldx, int N, int K) {
    for (int n = 0; n < N; n++) {
        const float *x = X + (size_t)n * ldx;
        int p = 0;
        for (; 2 * p + 1 < K; p++) dst[(size_t)p * ldd + n] = pair(x[2 * p], x[2 * p + 1]);
        if (K % 2) dst[(size_t)p * ldd + n] = pair(x[K - 1], 0.0f);
    }
}

void mm_tile_pack_rows_t(uint32_t *dst, int ldd, const uint16_t *X, size_t ldx, int R, int N) {
    for (int p = 0; 2 * p < R; p++)
        for (int n = 0; n < N; n++)
            dst[(size_t)n * ldd + p] = (uint32_t)X[(size_t)(2 * p) * ldx + n] |
                                       (uint32_t)(2 * p + 1 < R ? X[(size_t)(2 * p + 1) * ldx + n] : 0) << 16;
}

#endif

void mm_tile_pack_rows(uint32_t *dst, int ldd, const float *X, size_t ldx, int R, int N) {
    for (int p = 0; 2 * p < R; p++) {
        const float *x0 = X + (size_t)(2 * p) * ldx, *x1 = x0 + ldx;
        uint32_t *d = dst + (size_t)p * ldd;
        for (int t = 2 * p + 16; t < 2 * p + 18 && t < R; t++) mm_prefetch_row(X + (size_t)t * ldx, N);
        if (2 * p + 1 < R) {
#pragma omp simd
            for (int n = 0; n < N; n++) d[n] = pair(x0[n], x1[n]);
        } else {
#pragma omp simd
            for (int n = 0; n < N; n++) d[n] = pair(x0[n], 0.0f);
        }
    }
}
