/* matmul_simd.h — helpers shared by the bf16 GEMM files (matmul_tile.c, matmul_pack.c) and bf16
 * attention (kernels_attention.c); internal to model/. The register helpers exist in builds that
 * target AVX-512 (the transpose: with bf16 dot products). */
#ifndef ST_MODEL_MATMUL_SIMD_H
#define ST_MODEL_MATMUL_SIMD_H

/* Requests the lines of cols floats at p: rows of an operand that lie far apart (a head's slice of
 * each qkv row), which the hardware prefetchers do not follow far enough ahead when they are cold. */
static inline void mm_prefetch_row(const float *p, int cols) {
    for (int c = 0; c < cols; c += 16) __builtin_prefetch(p + c);
}

#if defined(__AVX512F__)
#include <immintrin.h>

/* The first n of 16 lanes (n >= 0). */
static inline __mmask16 mm_mask16(int n) { return (__mmask16)(n >= 16 ? 0xFFFFu : (1u << n) - 1u); }

/* 16 fp32 lanes rounded to bf16 as half_bf16 does (to nearest, ties to even; a NaN lane its high
 * half made quiet), in the low halves. */
static inline __m512i mm_bf16_lanes(__m512 x) {
    __m512i u = _mm512_castps_si512(x), hi = _mm512_srli_epi32(u, 16);
    __m512i odd = _mm512_and_si512(hi, _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), odd), 16);
    return _mm512_mask_or_epi32(r, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), hi, _mm512_set1_epi32(0x40));
}
#endif

#if defined(__AVX512F__) && defined(__AVX512BF16__)

/* Transposes the 16 × 16 uint32 block in r (row t = r[t]) in registers: r[t] becomes column t. */
static inline void mm_transpose16(__m512i r[16]) {
    __m512i t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    /* Now 128-bit lane q of r[4a + b] holds column 4q + b of rows 4a .. 4a + 3: gather the four
     * lanes of each column (two rounds of 128-bit lane shuffles). */
    for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0x88);      /* lanes 0, 2 of r[i], then of r[i + 4] */
        t[i + 4] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0xDD);  /* lanes 1, 3 */
        t[i + 8] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0xDD);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xDD);
        r[i + 4] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0x88);
        r[i + 12] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0xDD);
    }
}

#endif

#endif
