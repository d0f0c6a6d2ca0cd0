/* kernels_internal.h — what the kernel files (kernels.c, kernels_attention.c, kernels_head.c) share
 * and nothing else includes. */
#ifndef ST_MODEL_KERNELS_INTERNAL_H
#define ST_MODEL_KERNELS_INTERNAL_H

#include "core/rng.h"
#include "model/fastmath.h"
#include "model/kernels.h"

/* Bias gradients without the caller's scratch (kernels.h, colsum_floats): a thread takes one
 * contiguous span of columns (multiples of COLSUM_UNIT) and walks the rows once over all of it
 * (COLSUM_SPAN columns at a time only where it is wider), in the sums' chunked order. Blocks of 64
 * columns, each walking all the rows, made as many strided passes as blocks and ran 2.7× slower
 * (GELU's backward at 2048 × 1536 on one Zen 5 core: 9.0 ms against 3.4 ms). With scratch, threads
 * take row chunks instead (kernels.c, colsum_pass). */
#define COLSUM_UNIT 16
#define COLSUM_SPAN 4096

/* Dropout's factor for element i of site d: 0 (dropped) or 1/(1 − p) (kept). */
static inline float drop_scale(Dropout d, uint64_t i) {
    return rng_uniform(d.seed, d.stream, i + d.offset) >= d.p ? 1.0f / (1.0f - d.p) : 0.0f;
}

/* drop_scale(d, i) for i in 0 .. n-1 into f, one Philox block per 4 elements, vectorized (kernels.c):
 * the same factors at a fraction of the cost; one thread. */
void drop_factors(float *f, size_t n, Dropout d);
#define DROP_CHUNK 1024 /* elements whose factors an elementwise pass draws at once (on the stack) */
/* drop_scale(d, base + i) for i in 0 .. n-1 into f (drop_factors at an offset). */
static inline void drop_factors_at(float *f, size_t n, Dropout d, uint64_t base) {
    d.offset += base;
    drop_factors(f, n, d);
}
/* out[i] = (a[i], or 0 when a is NULL) + b[i] · drop_scale(d, base + i) for i in 0 .. n-1, the
 * factors drawn DROP_CHUNK at a time on the stack; one thread (out may be a or b). */
void drop_row(float *out, const float *a, const float *b, size_t n, Dropout d, uint64_t base);
/* drop_row at base 0 over n elements on nt threads. */
void drop_apply(float *out, const float *a, const float *b, size_t n, Dropout d, int nt);

/* ST_VEC4: the build has the AVX-512 subsets VEC4_SPAN and store_bf16_16 use. */
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define ST_VEC4 1
#include <immintrin.h>

#include "model/matmul_simd.h"

/* Elementwise passes whose per-element math is a long dependent chain (fastmath.h's 16-lane exp,
 * tanh, GELU: a degree-6 polynomial, a division) leave the core waiting on latency one vector at
 * a time; four side by side ran 1.7× GCC's vectorization of the scalar loop (GELU, Zen 5).
 * VEC4_SPAN runs v = LD(i, k); v = F(v, i, k); ST(i, k, v) over elements i0 .. i1 − 1 in vectors
 * of 16 at i, k the lanes in range: a constant full mask in the main loop (plain loads and stores;
 * masked ones measured 13% slower), the last lanes masked. */
#define VEC4_SPAN(i0, i1, LD, F, ST) VEC4_SPAN4(i0, i1, LD, F, VEC4_ST4_, VEC4_ST1_, ST, 0)
/* The loop itself, its stores passed in: ST4(i, v0, v1, v2, v3, X, Y) the four full vectors at i
 * (their mask f_), ST1(i, k, v, X, Y) one vector's lanes k; X, Y: what they need (VEC4_SPAN: X = ST). */
#define VEC4_ST4_(i, v0, v1, v2, v3, ST, Y_) \
    do {                                      \
        ST(i, f_, v0);                        \
        ST((i) + 16, f_, v1);                 \
        ST((i) + 32, f_, v2);                 \
        ST((i) + 48, f_, v3);                 \
    } while (0)
#define VEC4_ST1_(i, k, v, ST, Y_) ST(i, k, v)
#define VEC4_SPAN4(i0, i1, LD, F, ST4, ST1, X, Y)                                                        \
    do {                                                                                                 \
        size_t i_ = (i0);                                                                                \
        const __mmask16 f_ = 0xFFFF;                                                                     \
        for (; i_ + 64 <= (size_t)(i1); i_ += 64) {                                                      \
            __m512 v0 = LD(i_, f_), v1 = LD(i_ + 16, f_), v2 = LD(i_ + 32, f_), v3 = LD(i_ + 48, f_);    \
            v0 = F(v0, i_, f_), v1 = F(v1, i_ + 16, f_), v2 = F(v2, i_ + 32, f_), v3 = F(v3, i_ + 48, f_); \
            ST4(i_, v0, v1, v2, v3, X, Y);                                                               \
        }                                                                                                \
        for (; i_ < (size_t)(i1); i_ += 16) {                                                            \
            __mmask16 k_ = mm_mask16((int)((size_t)(i1) - i_));                                          \
            __m512 v = LD(i_, k_);                                                                       \
            v = F(v, i_, k_);                                                                            \
            ST1(i_, k_, v, X, Y);                                                                        \
        }                                                                                                \
    } while (0)

/* 16 lanes rounded to bf16 (half_bf16's rounding, to nearest, ties to even) into d, lanes k. */
static inline __attribute__((always_inline)) void store_bf16_16(uint16_t *d, __mmask16 k, __m512 x) {
    __m256i h = _mm512_cvtepi32_epi16(mm_bf16_lanes(x));
    if (k == 0xFFFF) _mm256_storeu_si256((__m256i *)(void *)d, h);
    else _mm256_mask_storeu_epi16(d, k, h);
}

/* 32 lanes (lo, then hi) rounded as store_bf16_16 into d. Where the build has AVX512_BF16, one
 * vcvtne2ps2bf16 (0.19 ns per 16 values against 0.51 for the integer rounding, Zen 5, in L1),
 * whose rounding is half_bf16's (NaNs included) except that it flushes denormals: a pair of vectors
 * with a denormal lane (fpclass) takes the integer rounding, so the bits are half_bf16's. */
static inline __attribute__((always_inline)) void store_bf16_32(uint16_t *d, __m512 lo, __m512 hi) {
#if defined(__AVX512BF16__)
    if (__builtin_expect(!(_mm512_fpclass_ps_mask(lo, 0x20) | _mm512_fpclass_ps_mask(hi, 0x20)), 1)) {
        _mm512_storeu_si512((void *)d, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
        return;
    }
#endif
    store_bf16_16(d, 0xFFFF, lo);
    store_bf16_16(d + 16, 0xFFFF, hi);
}

/* VEC4_SPAN for a bf16 output OUT: v = F(LD(i, k)); ACC(i, k, v) (anything else done with the fp32
 * value); OUT[i..] = bf16(v), the full vectors two at a time (store_bf16_32). */
#define VEC4_SPAN_BF16(i0, i1, LD, F, ACC, OUT) VEC4_SPAN4(i0, i1, LD, F, VEC4_BF16_ST4_, VEC4_BF16_ST1_, ACC, OUT)
#define VEC4_BF16_ST4_(i, v0, v1, v2, v3, ACC, OUT)  \
    do {                                             \
        VEC4_ST4_(i, v0, v1, v2, v3, ACC, 0);        \
        store_bf16_32((OUT) + (i), v0, v1);          \
        store_bf16_32((OUT) + (i) + 32, v2, v3);     \
    } while (0)
#define VEC4_BF16_ST1_(i, k, v, ACC, OUT) \
    do {                                  \
        ACC(i, k, v);                     \
        store_bf16_16((OUT) + (i), k, v); \
    } while (0)

#endif

/* x[j] = exp(x[j] − m) for j in [j0, j1): a softmax's exponentials (the LM head's rows, the fp32
 * and dropout attention's). With ST_VEC4 on st_expf16 four vectors at a time (st_expf's
 * bits; its chain waits on latency, bench/gelu_bench), else GCC's vectorization of st_expf. */
static inline void exp_rows(float *x, int j0, int j1, float m) {
#if ST_VEC4
    const __m512 vm = _mm512_set1_ps(m);
#define LD_(j, k) _mm512_maskz_loadu_ps(k, x + (j))
#define F_(v, j, k) st_expf16(_mm512_sub_ps(v, vm))
#define ST_(j, k, v) _mm512_mask_storeu_ps(x + (j), k, v)
    if (j1 > j0) VEC4_SPAN((size_t)j0, (size_t)j1, LD_, F_, ST_);
#undef LD_
#undef F_
#undef ST_
#else
#pragma omp simd
    for (int j = j0; j < j1; j++) x[j] = st_expf(x[j] - m);
#endif
}

/* exp_rows, returning the fp32 sum of the stored values over [j0, j1) in GCC's vectorized order.
 * Without ST_VEC4 one fused loop: GCC's AVX2 vectorization sums the split form in another order,
 * and the portable build keeps its bits; with AVX-512 both forms sum the same floats alike
 * (bitcheck). */
static inline float exp_rows_sum(float *x, int j0, int j1, float m) {
    float sum = 0;
#if ST_VEC4
    exp_rows(x, j0, j1, m);
#pragma omp simd reduction(+ : sum)
    for (int j = j0; j < j1; j++) sum += x[j];
#else
#pragma omp simd reduction(+ : sum)
    for (int j = j0; j < j1; j++) sum += (x[j] = st_expf(x[j] - m));
#endif
    return sum;
}

#endif
