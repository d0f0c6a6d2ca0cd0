/* fastmath.h — vectorizable exp and tanh for the elementwise kernels.
 *
 * glibc's expf/tanhf are not vectorized without -ffast-math; these are branch-free so that
 * `#pragma omp simd` loops compile to AVX-512. st_expf: Cephes-style range reduction and a
 * degree-6 polynomial, relative error about 2e-7 on [-87, 88] (inputs are clamped to that range).
 * st_tanhf: 1 - 2/(exp(2u)+1), absolute error about 2e-7 (relative error grows only near 0,
 * where every caller multiplies by x or adds 1); st_expf's clamp keeps it finite at any u (±1
 * beyond |u| ≈ 9.5), so it needs no clamp of its own. NaN in, NaN out for both. st_gelu and
 * st_gelu_grad build on st_tanhf; the *16 functions are their AVX-512 forms, bit-identical. */
#ifndef ST_MODEL_FASTMATH_H
#define ST_MODEL_FASTMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float st_expf(float x) {
    /* Two clamps, each one vmaxps/vminps (one nested conditional compiled to mask juggling through
     * general registers, a third of GELU's time); the same values, NaN included. */
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    /* k = round(x / ln 2) by the 1.5·2^23 trick: no libm call, so the loop stays vectorized. The
     * steps are fused multiply-adds, written (fmaf: the build is ISO C, which contracts nothing):
     * 9 of the 16-lane form's 18 operations, where separate products and sums took 27 (a CPU
     * without FMA gets libm's exact fmaf, the same bits, slowly). */
    float kb = fmaf(x, 1.44269504088896341f, 12582912.0f), k = kb - 12582912.0f;
    float r = fmaf(-k, 0.693359375f, x);
    r = fmaf(-k, -2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = fmaf(p, r, 1.3981999507e-3f);
    p = fmaf(p, r, 8.3334519073e-3f);
    p = fmaf(p, r, 4.1665795894e-2f);
    p = fmaf(p, r, 1.6666665459e-1f);
    p = fmaf(p, r, 5.0000001201e-1f);
    p = fmaf(p * r, r, r) + 1.0f;
    /* 2^k from kb's bits, where k sits as an integer in the low mantissa bits of 1.5·2^23 + k (|k|
     * <= 128): no float-to-integer conversion, which a NaN x (k NaN) made undefined. Unsigned
     * arithmetic throughout; the shift leaves no mantissa bit, so scale is never a NaN and a NaN x
     * returns p's NaN. */
    uint32_t kbits;
    memcpy(&kbits, &kb, sizeof kbits);
    uint32_t bits = (kbits - 0x4B400000u + 127u) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

#if defined(__AVX512F__)
#include <immintrin.h>
/* st_expf on 16 lanes, bit for bit (the same fused steps). The clamps keep a NaN lane NaN. */
static inline __m512 st_expf16(__m512 x) {
    x = _mm512_min_ps(_mm512_set1_ps(88.0f), _mm512_max_ps(_mm512_set1_ps(-87.0f), x));
    __m512 big = _mm512_set1_ps(12582912.0f);
    __m512 k = _mm512_sub_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), big), big);
    __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(k, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), _mm512_set1_ps(1.0f));
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(k), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}
#endif

static inline float st_tanhf(float u) {
    return 1.0f - 2.0f / (st_expf(2.0f * u) + 1.0f);
}

/* GELU, tanh form (GPT-2's), and its derivative. */
#define ST_GELU_S 0.7978845608028654f /* sqrt(2/pi) */

static inline float st_gelu(float x) {
    return 0.5f * x * (1.0f + st_tanhf(ST_GELU_S * (x + 0.044715f * x * x * x)));
}

static inline float st_gelu_grad(float x) {
    float t = st_tanhf(ST_GELU_S * (x + 0.044715f * x * x * x));
    float sech2 = 1.0f - t * t;
    return 0.5f * (1.0f + t) + 0.5f * x * sech2 * ST_GELU_S * (1.0f + 3.0f * 0.044715f * x * x);
}

/* SwiGLU's gate: silu(g) = g · σ(g), σ(g) = 1/(1 + e^−g); the gradients of out = silu(g) · u given
 * dout, *dg for the gate and *du for the up value (one exponential for both). */
static inline float st_silu(float g) { return g / (1.0f + st_expf(-g)); }

static inline void st_swiglu_grad(float *dg, float *du, float dout, float g, float u) {
    float s = 1.0f / (1.0f + st_expf(-g));
    *dg = dout * u * (s * (1.0f + g * (1.0f - s)));
    *du = dout * (g * s);
}

#if defined(__AVX512F__)
/* st_tanhf, st_gelu, st_gelu_grad, st_silu and st_swiglu_grad on 16 lanes, bit for bit: each step
 * as the scalar functions above compile, products and sums rounded one at a time (the build is ISO
 * C, -std=c11, whose GCC default is -ffp-contract=off: no fused multiply-adds unless written, as
 * st_expf's are). GCC's own vectorization of the scalar loops runs one vector at a time and waits on
 * this chain's latency; the kernels run four side by side (VEC4_SPAN, kernels_internal.h).
 * tests/test_kernels.c compares them with the scalar functions on 2^22 inputs, special values
 * included: a fused multiply-add in x + 0.044715 x^3 changes ~2000 of them. */
static inline __m512 st_tanh16(__m512 u) {
    __m512 one = _mm512_set1_ps(1.0f);
    __m512 d = _mm512_add_ps(st_expf16(_mm512_mul_ps(_mm512_set1_ps(2.0f), u)), one);
    return _mm512_sub_ps(one, _mm512_div_ps(_mm512_set1_ps(2.0f), d));
}

/* tanh's argument u = sqrt(2/pi) (x + 0.044715 x^3). */
static inline __m512 st_gelu_u16(__m512 x) {
    __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.044715f), x), x), x);
    return _mm512_mul_ps(_mm512_set1_ps(ST_GELU_S), _mm512_add_ps(x, x3));
}

static inline __m512 st_gelu16(__m512 x) {
    __m512 t = st_tanh16(st_gelu_u16(x));
    return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x), _mm512_add_ps(_mm512_set1_ps(1.0f), t));
}

static inline __m512 st_neg16(__m512 x) {
    return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(x), _mm512_set1_epi32((int)0x80000000u)));
}

static inline __m512 st_silu16(__m512 g) {
    return _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), st_expf16(st_neg16(g))));
}

/* σ(g); st_swiglu_grad16 takes it as s. */
static inline __m512 st_sigmoid16(__m512 g) {
    return _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_add_ps(_mm512_set1_ps(1.0f), st_expf16(st_neg16(g))));
}

static inline void st_swiglu_grad16(__m512 *dg, __m512 *du, __m512 s, __m512 d, __m512 g, __m512 u) {
    __m512 one = _mm512_set1_ps(1.0f);
    *dg = _mm512_mul_ps(_mm512_mul_ps(d, u), _mm512_mul_ps(s, _mm512_add_ps(one, _mm512_mul_ps(g, _mm512_sub_ps(one, s)))));
    *du = _mm512_mul_ps(d, _mm512_mul_ps(g, s));
}

static inline __m512 st_gelu_grad16(__m512 x) {
    __m512 one = _mm512_set1_ps(1.0f), half = _mm512_set1_ps(0.5f), t = st_tanh16(st_gelu_u16(x));
    __m512 sech2 = _mm512_sub_ps(one, _mm512_mul_ps(t, t));
    __m512 q = _mm512_add_ps(one, _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(3.0f * 0.044715f), x), x));
    __m512 a = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(half, x), sech2), _mm512_set1_ps(ST_GELU_S)), q);
    return _mm512_add_ps(_mm512_mul_ps(half, _mm512_add_ps(one, t)), a);
}
#endif

#endif
