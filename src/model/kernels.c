/* kernels.c — GPT layer kernels (contracts in kernels.h): embedding, LayerNorm, the Llama kernels,
 * linear layers and precision casts, GELU, residual and dropout. Attention is in kernels_attention.c,
 * the LM head in kernels_head.c. */
#include "model/kernels.h"

#include <math.h>
#include <omp.h>
#include <string.h>

#include "core/half.h"
#include "core/rng.h"
#include "core/timer.h"
#include "model/fastmath.h"
#include "model/kernels_internal.h"
#include "model/matmul.h"


/* ------------------------------------------------------------------------------------------ */
/* Encoder                                                                                    */
/* ------------------------------------------------------------------------------------------ */

void doc_positions(int32_t *pos, const int32_t *inp, int B, int T, int32_t eot) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            size_t i = (size_t)b * T + t;
            pos[i] = t == 0 || inp[i - 1] == eot ? 0 : pos[i - 1] + 1;
        }
}

/* The position of token bt of a (B, T) batch: t, or its document position (document masking). */
static inline size_t tok_pos(const int32_t *pos, long bt, int T) { return pos ? (size_t)pos[bt] : (size_t)(bt % T); }

/* g[c] += o[c] · drop_scale(d, base + c) for c in [c0, c1): the factors drawn DROP_CHUNK at a time. */
static void drop_add_row(float *g, const float *o, int c0, int c1, Dropout d, uint64_t base) {
    float f[DROP_CHUNK];
    for (int a = c0; a < c1; a += DROP_CHUNK) {
        int b = c1 - a < DROP_CHUNK ? c1 : a + DROP_CHUNK;
        drop_factors_at(f, (size_t)(b - a), d, base + (uint64_t)a);
        for (int c = a; c < b; c++) g[c] += o[c] * f[c - a];
    }
}

void encoder_forward(float *out, const int32_t *inp, const int32_t *pos, const float *wte, const float *wpe, int B,
                     int T, int C, Dropout d, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (long bt = 0; bt < (long)B * T; bt++) {
        const float *e = wte + (size_t)inp[bt] * C, *p = wpe + tok_pos(pos, bt, T) * C;
        float *o = out + (size_t)bt * C;
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = e[c] + p[c];
        if (d.p > 0) drop_row(o, NULL, o, (size_t)C, d, (uint64_t)bt * C); /* (e + p) · f, in place */
    }
}

void encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp, const int32_t *pos, int B,
                      int T, int C, Dropout d, int nt) {
    /* Each thread owns a channel range and walks all rows in order: the sum order of every
     * dwte element is the row order, whatever the thread count. */
#pragma omp parallel num_threads(nt)
    {
        int tid = omp_get_thread_num(), n = omp_get_num_threads();
        int c0 = (int)((long)C * tid / n), c1 = (int)((long)C * (tid + 1) / n);
        for (long bt = 0; bt < (long)B * T; bt++) {
            float *g = dwte + (size_t)inp[bt] * C;
            const float *o = dout + (size_t)bt * C;
            if (d.p > 0) {
                drop_add_row(g, o, c0, c1, d, (uint64_t)bt * C);
            } else {
#pragma omp simd
                for (int c = c0; c < c1; c++) g[c] += o[c];
            }
        }
        if (pos) {
            /* document positions: a scatter like dwte's, each thread on its channel range in row order */
            for (long bt = 0; bt < (long)B * T; bt++) {
                float *g = dwpe + (size_t)pos[bt] * C;
                const float *o = dout + (size_t)bt * C;
                if (d.p > 0) {
                    drop_add_row(g, o, c0, c1, d, (uint64_t)bt * C);
                } else {
#pragma omp simd
                    for (int c = c0; c < c1; c++) g[c] += o[c];
                }
            }
        } else {
#pragma omp for schedule(static)
            for (int t = 0; t < T; t++) {
                float *g = dwpe + (size_t)t * C;
                for (int b = 0; b < B; b++) {
                    size_t bt = (size_t)b * T + t;
                    const float *o = dout + bt * C;
                    if (d.p > 0) {
                        drop_add_row(g, o, 0, C, d, (uint64_t)bt * C);
                    } else {
#pragma omp simd
                        for (int c = 0; c < C; c++) g[c] += o[c];
                    }
                }
            }
        }
    }
}

void encoder_forward_vp(float *out, const int32_t *inp, const int32_t *pos, const float *wte, const float *wpe,
                        int B, int T, int C, int v0, int vn, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (long bt = 0; bt < (long)B * T; bt++) {
        int v = inp[bt] - v0;
        float *o = out + (size_t)bt * C;
        const float *p = wpe ? wpe + tok_pos(pos, bt, T) * C : NULL;
        if (v >= 0 && v < vn) {
            const float *e = wte + (size_t)v * C;
            if (p) {
#pragma omp simd
                for (int c = 0; c < C; c++) o[c] = e[c] + p[c];
            } else {
                memcpy(o, e, (size_t)C * sizeof(float));
            }
        } else if (p) {
            memcpy(o, p, (size_t)C * sizeof(float));
        } else {
            memset(o, 0, (size_t)C * sizeof(float));
        }
    }
}

void encoder_backward_vp(float *dwte, float *dwpe, const float *dout, const int32_t *inp, const int32_t *pos, int B,
                         int T, int C, int v0, int vn, int nt) {
#pragma omp parallel num_threads(nt)
    {
        int tid = omp_get_thread_num(), n = omp_get_num_threads();
        int c0 = (int)((long)C * tid / n), c1 = (int)((long)C * (tid + 1) / n);
        for (long bt = 0; bt < (long)B * T; bt++) {
            int v = inp[bt] - v0;
            if (v < 0 || v >= vn) continue;
            float *g = dwte + (size_t)v * C;
            const float *o = dout + (size_t)bt * C;
#pragma omp simd
            for (int c = c0; c < c1; c++) g[c] += o[c];
        }
        if (dwpe && pos) {
            for (long bt = 0; bt < (long)B * T; bt++) {
                float *g = dwpe + (size_t)pos[bt] * C;
                const float *o = dout + (size_t)bt * C;
#pragma omp simd
                for (int c = c0; c < c1; c++) g[c] += o[c];
            }
        } else if (dwpe) {
#pragma omp for schedule(static)
            for (int t = 0; t < T; t++) {
                float *g = dwpe + (size_t)t * C;
                for (int b = 0; b < B; b++) {
                    const float *o = dout + ((size_t)b * T + t) * C;
                    for (int c = 0; c < C; c++) g[c] += o[c];
                }
            }
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* LayerNorm                                                                                  */
/* ------------------------------------------------------------------------------------------ */

/* One row: o = (x - mean) · rstd · w + b, eps 1e-5, into o (fp32) or, if olp, rounded to bf16
 * into olp; the statistics are stored at *mean, *rstd. */
static inline void layernorm_row(float *o, uint16_t *olp, float *mean, float *rstd, const float *x, const float *w,
                                 const float *b, int C) {
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (int c = 0; c < C; c++) s += x[c];
    float m = s / C, v = 0;
#pragma omp simd reduction(+ : v)
    for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
    float r = 1.0f / sqrtf(v / C + 1e-5f);
    if (olp) {
#pragma omp simd
        for (int c = 0; c < C; c++) olp[c] = half_bf16((x[c] - m) * r * w[c] + b[c]);
    } else {
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = (x[c] - m) * r * w[c] + b[c];
    }
    *mean = m, *rstd = r;
}

void layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                       int N, int C, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int i = 0; i < N; i++)
        layernorm_row(out + (size_t)i * C, NULL, &mean[i], &rstd[i], inp + (size_t)i * C, w, b, C);
}

void layernorm_forward_bf16(uint16_t *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                            int N, int C, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int i = 0; i < N; i++)
        layernorm_row(NULL, out + (size_t)i * C, &mean[i], &rstd[i], inp + (size_t)i * C, w, b, C);
}

static inline void rmsnorm_row(float *o, uint16_t *olp, float *rstd, const float *x, const float *w, int C,
                               float eps);

/* res = a + drop(b), then the row's pre-norm (LayerNorm with mean and bias, or RMSNorm when rms)
 * while the row is still in L1. Shared by both norms and both outputs: exactly one of out, out_lp
 * is non-NULL. */
static void residual_norm(float *res, float *out, uint16_t *out_lp, float *mean, float *rstd, const float *a,
                          const float *b, Dropout d, const float *w, const float *bias, int N, int C, float eps,
                          int rms, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int i = 0; i < N; i++) {
        const float *ai = a + (size_t)i * C, *bi = b + (size_t)i * C;
        float *x = res + (size_t)i * C, *o = out ? out + (size_t)i * C : NULL;
        uint16_t *olp = out_lp ? out_lp + (size_t)i * C : NULL;
        if (d.p > 0) {
            drop_row(x, ai, bi, (size_t)C, d, (uint64_t)i * C);
        } else {
#pragma omp simd
            for (int c = 0; c < C; c++) x[c] = ai[c] + bi[c];
        }
        if (rms) rmsnorm_row(o, olp, &rstd[i], x, w, C, eps);
        else layernorm_row(o, olp, &mean[i], &rstd[i], x, w, bias, C);
    }
}

void residual_layernorm_forward(float *res, float *out, float *mean, float *rstd, const float *a, const float *b,
                                Dropout d, const float *w, const float *bias, int N, int C, int nt) {
    residual_norm(res, out, NULL, mean, rstd, a, b, d, w, bias, N, C, 0.0f, 0, nt);
}

void residual_layernorm_forward_bf16(float *res, uint16_t *out, float *mean, float *rstd, const float *a,
                                     const float *b, Dropout d, const float *w, const float *bias, int N, int C,
                                     int nt) {
    residual_norm(res, NULL, out, mean, rstd, a, b, d, w, bias, N, C, 0.0f, 0, nt);
}

void layernorm_backward(float *dinp, float *dw, float *db, float *scratch, const float *dout, const float *inp,
                        const float *w, const float *mean, const float *rstd, int N, int C, int acc, int nt) {
    int nchunk = (N + KERNEL_ROW_CHUNK - 1) / KERNEL_ROW_CHUNK;
#pragma omp parallel num_threads(nt)
    {
#pragma omp for schedule(static)
        for (int k = 0; k < nchunk; k++) {
            float *pw = scratch + (size_t)k * 2 * C, *pb = pw + C;
            memset(pw, 0, sizeof(float) * 2 * C);
            int i1 = (k + 1) * KERNEL_ROW_CHUNK < N ? (k + 1) * KERNEL_ROW_CHUNK : N;
            for (int i = k * KERNEL_ROW_CHUNK; i < i1; i++) {
                const float *x = inp + (size_t)i * C, *g = dout + (size_t)i * C;
                float *dx = dinp + (size_t)i * C;
                float m = mean[i], r = rstd[i], a = 0, bsum = 0;
#pragma omp simd reduction(+ : a, bsum)
                for (int c = 0; c < C; c++) {
                    float n = (x[c] - m) * r, dn = g[c] * w[c];
                    a += dn;
                    bsum += dn * n;
                }
                a /= C;
                bsum /= C;
#pragma omp simd
                for (int c = 0; c < C; c++) {
                    float n = (x[c] - m) * r;
                    pw[c] += g[c] * n;
                    pb[c] += g[c];
                    dx[c] += (g[c] * w[c] - a - n * bsum) * r;
                }
            }
        }
#pragma omp for schedule(static)
        for (int c = 0; c < C; c++) {
            float sw = 0, sb = 0;
            for (int k = 0; k < nchunk; k++) {
                sw += scratch[(size_t)k * 2 * C + c];
                sb += scratch[(size_t)k * 2 * C + C + c];
            }
            if (dw) dw[c] = acc ? dw[c] + sw : sw; /* NULL: a frozen base (LoRA) */
            if (db) db[c] = acc ? db[c] + sb : sb;
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Llama: RMSNorm, RoPE, SwiGLU                                                               */
/* ------------------------------------------------------------------------------------------ */

/* One row: o = x · rstd · w, rstd = 1/sqrt(mean(x²) + eps), into o (fp32) or, if olp, rounded to
 * bf16 into olp (the same fp32 value rounded: the _bf16 kernels equal the fp32 ones then
 * cast_bf16); rstd is stored at *rstd. */
static inline void rmsnorm_row(float *o, uint16_t *olp, float *rstd, const float *x, const float *w, int C,
                               float eps) {
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (int c = 0; c < C; c++) s += x[c] * x[c];
    float r = 1.0f / sqrtf(s / C + eps);
    if (olp) {
#pragma omp simd
        for (int c = 0; c < C; c++) olp[c] = half_bf16(x[c] * r * w[c]);
    } else {
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = x[c] * r * w[c];
    }
    *rstd = r;
}

void rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C, float eps, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int i = 0; i < N; i++) rmsnorm_row(out + (size_t)i * C, NULL, &rstd[i], inp + (size_t)i * C, w, C, eps);
}

void rmsnorm_forward_bf16(uint16_t *out, float *rstd, const float *inp, const float *w, int N, int C, float eps,
                          int nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int i = 0; i < N; i++) rmsnorm_row(NULL, out + (size_t)i * C, &rstd[i], inp + (size_t)i * C, w, C, eps);
}

/* Shared by the fp32 and the bf16 output: exactly one of out, out_lp is non-NULL. The residual
 * add is residual_forward's expression, element for element (same dropout index). */
void residual_rmsnorm_forward(float *res, float *out, float *rstd, const float *a, const float *b, Dropout d,
                              const float *w, int N, int C, float eps, int nt) {
    residual_norm(res, out, NULL, NULL, rstd, a, b, d, w, NULL, N, C, eps, 1, nt);
}

void residual_rmsnorm_forward_bf16(float *res, uint16_t *out, float *rstd, const float *a, const float *b,
                                   Dropout d, const float *w, int N, int C, float eps, int nt) {
    residual_norm(res, NULL, out, NULL, rstd, a, b, d, w, NULL, N, C, eps, 1, nt);
}

/* With n = x · r (r = rstd) and dn = dout · w: dx = r · (dn − n · mean(dn · n)), dw = Σ_rows dout · n.
 * dw's partial sums per 64-row chunk go to scratch and are added in chunk order. */
void rmsnorm_backward(float *dinp, float *dw, float *scratch, const float *dout, const float *inp, const float *w,
                      const float *rstd, int N, int C, int acc, int nt) {
    int nchunk = (N + KERNEL_ROW_CHUNK - 1) / KERNEL_ROW_CHUNK;
#pragma omp parallel num_threads(nt)
    {
#pragma omp for schedule(static)
        for (int k = 0; k < nchunk; k++) {
            float *pw = scratch + (size_t)k * C;
            memset(pw, 0, sizeof(float) * C);
            int i1 = (k + 1) * KERNEL_ROW_CHUNK < N ? (k + 1) * KERNEL_ROW_CHUNK : N;
            for (int i = k * KERNEL_ROW_CHUNK; i < i1; i++) {
                const float *x = inp + (size_t)i * C, *g = dout + (size_t)i * C;
                float *dx = dinp + (size_t)i * C;
                float r = rstd[i], a = 0;
#pragma omp simd reduction(+ : a)
                for (int c = 0; c < C; c++) a += g[c] * w[c] * (x[c] * r);
                a /= C;
#pragma omp simd
                for (int c = 0; c < C; c++) {
                    float n = x[c] * r;
                    pw[c] += g[c] * n;
                    dx[c] += (g[c] * w[c] - n * a) * r;
                }
            }
        }
#pragma omp for schedule(static)
        for (int c = 0; c < C; c++) {
            float sw = 0;
            for (int k = 0; k < nchunk; k++) sw += scratch[(size_t)k * C + c];
            if (dw) dw[c] = acc ? dw[c] + sw : sw;
        }
    }
}

void rope_inv_freq(double *inv_freq, int hs, double theta) {
    for (int i = 0; i < hs / 2; i++) inv_freq[i] = pow(theta, -2.0 * i / hs);
}

void rope_table(float *cs, int T, int hs, const double *inv_freq) {
    int half = hs / 2;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < half; i++) {
            double a = (double)t * inv_freq[i]; /* = t·theta^(-2i/hs) for plain RoPE, as before */
            cs[(size_t)t * hs + i] = (float)cos(a);
            cs[(size_t)t * hs + half + i] = (float)sin(a);
        }
}

/* Rotates the NH + KV heads at the start of each qkv row (q heads, then k heads) by the angles of
 * position pos0 + t: (a, b) = (x[i], x[i + hs/2]) → (a·cos − b·sin, b·cos + a·sin) with sign = 1;
 * sign = −1 turns by −angle, the transpose (the backward of a rotation). One pass, in place. */
static void rope_apply(float *qkv, const float *cs, const int32_t *pos, int B, int T, int NH, int KV, int hs, int pos0,
                       float sign, int nt) {
    int half = hs / 2, nh = NH + KV;
    size_t ld = (size_t)(NH + 2 * KV) * hs;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (long bt = 0; bt < (long)B * T; bt++) {
        const float *co = cs + (size_t)(pos0 + (pos ? pos[bt] : bt % T)) * hs, *si = co + half;
        float *row = qkv + (size_t)bt * ld;
        for (int h = 0; h < nh; h++) {
            float *x = row + (size_t)h * hs, *y = x + half;
#pragma omp simd
            for (int i = 0; i < half; i++) {
                float a = x[i], b = y[i], s = sign * si[i];
                x[i] = a * co[i] - b * s;
                y[i] = b * co[i] + a * s;
            }
        }
    }
}

void rope_forward(float *qkv, const float *cs, const int32_t *pos, int B, int T, int NH, int KV, int hs, int pos0,
                  int nt) {
    rope_apply(qkv, cs, pos, B, T, NH, KV, hs, pos0, 1.0f, nt);
}

void rope_backward(float *dqkv, const float *cs, const int32_t *pos, int B, int T, int NH, int KV, int hs, int pos0,
                   int nt) {
    rope_apply(dqkv, cs, pos, B, T, NH, KV, hs, pos0, -1.0f, nt);
}

/* SwiGLU: per row, g = h[0, F) (gate), u = h[F, 2F) (up); out = silu(g) · u with
 * silu(g) = g · σ(g), σ(g) = 1/(1 + e^−g) (st_expf clamps e^−g to [e^−87, e^88], so silu is
 * finite everywhere). Backward: d/dg silu = σ · (1 + g · (1 − σ)), so dg = dout · u · σ(1 + g(1 − σ)),
 * du = dout · silu(g) (fastmath.h: st_silu, st_swiglu_grad; their 16-lane forms four vectors at a
 * time, VEC4_SPAN). The bf16 forms store the same fp32 values rounded. */

void swiglu_forward(float *out, const float *h, int N, int F, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int i = 0; i < N; i++) {
        const float *g = h + (size_t)i * 2 * F, *u = g + F;
        float *o = out + (size_t)i * F;
#if ST_VEC4
#define LD_(j, k) _mm512_maskz_loadu_ps(k, g + (j))
#define F_(x, j, k) _mm512_mul_ps(st_silu16(x), _mm512_maskz_loadu_ps(k, u + (j)))
#define ST_(j, k, x) _mm512_mask_storeu_ps(o + (j), k, x)
        VEC4_SPAN(0, F, LD_, F_, ST_);
#undef F_
#undef ST_
#else
#pragma omp simd
        for (int j = 0; j < F; j++) o[j] = st_silu(g[j]) * u[j];
#endif
    }
}

void swiglu_forward_bf16(uint16_t *out, const float *h, int N, int F, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int i = 0; i < N; i++) {
        const float *g = h + (size_t)i * 2 * F, *u = g + F;
        uint16_t *o = out + (size_t)i * F;
#if ST_VEC4
#define F_(x, j, k) _mm512_mul_ps(st_silu16(x), _mm512_maskz_loadu_ps(k, u + (j)))
#define ST_(j, k, x) store_bf16_16(o + (j), k, x)
        VEC4_SPAN(0, F, LD_, F_, ST_);
#undef F_
#undef ST_
#else
#pragma omp simd
        for (int j = 0; j < F; j++) o[j] = half_bf16(st_silu(g[j]) * u[j]);
#endif
    }
}

#if ST_VEC4
#define SIG_(x, j, k) st_sigmoid16(x)
/* The gradients a_ (gate) and b_ (up) of 16 lanes from σ = s, in the rows' d, g, u. */
#define SWIGLU_GRAD_(j, k, s)                                                                                 \
    __m512 a_, b_;                                                                                            \
    st_swiglu_grad16(&a_, &b_, s, _mm512_maskz_loadu_ps(k, d + (j)), _mm512_maskz_loadu_ps(k, g + (j)),      \
                     _mm512_maskz_loadu_ps(k, u + (j)))
#endif

void swiglu_backward(float *dh, const float *dout, const float *h, int N, int F, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int i = 0; i < N; i++) {
        const float *g = h + (size_t)i * 2 * F, *u = g + F, *d = dout + (size_t)i * F;
        float *dg = dh + (size_t)i * 2 * F, *du = dg + F;
#if ST_VEC4
#define ST_(j, k, s)                                                                      \
    do {                                                                                  \
        SWIGLU_GRAD_(j, k, s);                                                            \
        _mm512_mask_storeu_ps(dg + (j), k, a_), _mm512_mask_storeu_ps(du + (j), k, b_);   \
    } while (0)
        VEC4_SPAN(0, F, LD_, SIG_, ST_);
#undef ST_
#else
#pragma omp simd
        for (int j = 0; j < F; j++) st_swiglu_grad(&dg[j], &du[j], d[j], g[j], u[j]);
#endif
    }
}

void swiglu_backward_bf16(uint16_t *dh, const float *dout, const float *h, int N, int F, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int i = 0; i < N; i++) {
        const float *g = h + (size_t)i * 2 * F, *u = g + F, *d = dout + (size_t)i * F;
        uint16_t *dg = dh + (size_t)i * 2 * F, *du = dg + F;
#if ST_VEC4
#define ST_(j, k, s)                                                     \
    do {                                                                 \
        SWIGLU_GRAD_(j, k, s);                                           \
        store_bf16_16(dg + (j), k, a_), store_bf16_16(du + (j), k, b_);  \
    } while (0)
        VEC4_SPAN(0, F, LD_, SIG_, ST_);
#undef ST_
#else
#pragma omp simd
        for (int j = 0; j < F; j++) {
            float a, b;
            st_swiglu_grad(&a, &b, d[j], g[j], u[j]);
            dg[j] = half_bf16(a), du[j] = half_bf16(b);
        }
#endif
    }
}
#if ST_VEC4
#undef LD_
#undef SIG_
#undef SWIGLU_GRAD_
#endif

/* ------------------------------------------------------------------------------------------ */
/* Linear layers                                                                              */
/* ------------------------------------------------------------------------------------------ */

void matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC, int nt) {
    mm_linear(N, OC, C, inp, w, bias, out);
}

/* GELU's loops run on fastmath.h's 16-lane forms (bit-identical to st_gelu / st_gelu_grad) four
 * vectors at a time (VEC4_SPAN) where the build has AVX-512. */
#if ST_VEC4
#define GELU_F(v, i, k) st_gelu16(v)
#endif

/* What a column-sum pass does to each element g of src (N, OC) besides adding it to its column:
 * nothing, round it to bf16 into dst, or take v = g · gelu'(inp) first (then v is summed and
 * rounded). The sums' order is kernels.h's (per 64-row chunk, then the chunks in order): the same
 * bits in all three modes, for any thread count, with or without the caller's scratch. */
enum { COLSUM_PLAIN, COLSUM_CAST, COLSUM_GELU };

/* Rows i0 .. i1 − 1, columns j0 .. j1 − 1: sum[j − j0] = the rows' values of column j, in row order
 * (dst, inp and src addressed by (row, column) as in the whole matrix). */
#if ST_VEC4 /* sum[j − j0] += v on lanes k */
#define COLSUM_ACC_(j, k, v)                                                                          \
    _mm512_mask_storeu_ps(sum + ((j) - (size_t)j0), k,                                                \
                          _mm512_add_ps(_mm512_maskz_loadu_ps(k, sum + ((j) - (size_t)j0)), v))
#endif
static void colsum_rows(int mode, uint16_t *dst, float *sum, const float *src, const float *inp, int i0, int i1,
                        int j0, int j1, int OC) {
    memset(sum, 0, sizeof(float) * (size_t)(j1 - j0));
    for (int i = i0; i < i1; i++) {
        const float *g = src + (size_t)i * OC;
        uint16_t *d = dst ? dst + (size_t)i * OC : NULL;
        if (mode == COLSUM_PLAIN) {
#pragma omp simd
            for (int j = j0; j < j1; j++) sum[j - j0] += g[j];
        } else if (mode == COLSUM_CAST) {
#if ST_VEC4
#define LD_(j, k) _mm512_maskz_loadu_ps(k, g + (j))
#define F_(v, j, k) (v)
            VEC4_SPAN_BF16((size_t)j0, (size_t)j1, LD_, F_, COLSUM_ACC_, d);
#undef LD_
#undef F_
#else
#pragma omp simd
            for (int j = j0; j < j1; j++) {
                sum[j - j0] += g[j];
                d[j] = half_bf16(g[j]);
            }
#endif
        } else {
            const float *x = inp + (size_t)i * OC;
#if ST_VEC4
#define LD_(j, k) _mm512_maskz_loadu_ps(k, x + (j))
#define F_(v, j, k) _mm512_mul_ps(_mm512_maskz_loadu_ps(k, g + (j)), st_gelu_grad16(v))
            VEC4_SPAN_BF16((size_t)j0, (size_t)j1, LD_, F_, COLSUM_ACC_, d);
#undef LD_
#undef F_
#else
#pragma omp simd
            for (int j = j0; j < j1; j++) {
                float v = g[j] * st_gelu_grad(x[j]);
                sum[j - j0] += v;
                d[j] = half_bf16(v);
            }
#endif
        }
    }
}

size_t colsum_floats(int N, int OC) {
    return (size_t)((N + KERNEL_ROW_CHUNK - 1) / KERNEL_ROW_CHUNK) * (size_t)(OC > 0 ? OC : 0);
}

static void colsum_pass(int mode, uint16_t *dst, float *colsum, float *sums, const float *src, const float *inp, int N,
                        int OC, int acc, int nt) {
    const int nchunk = (N + KERNEL_ROW_CHUNK - 1) / KERNEL_ROW_CHUNK;
    if (sums) {
        /* Threads take whole chunks (contiguous runs of rows), each chunk's sums into its row of
         * sums, then columns add the chunks. Threads taking columns instead (each over every row)
         * read and write alternate stretches of the same rows: at 2 threads on Zen 5 that ran 3–6×
         * slower than one thread over whole rows (bench/results/step.md, "Bias sums by row chunks"). */
#pragma omp parallel num_threads(nt)
        {
#pragma omp for schedule(static)
            for (int k = 0; k < nchunk; k++) {
                int i1 = (k + 1) * KERNEL_ROW_CHUNK < N ? (k + 1) * KERNEL_ROW_CHUNK : N;
                colsum_rows(mode, dst, sums + (size_t)k * OC, src, inp, k * KERNEL_ROW_CHUNK, i1, 0, OC, OC);
            }
#pragma omp for schedule(static)
            for (int j = 0; j < OC; j++) {
                float t = 0;
                for (int k = 0; k < nchunk; k++) t += sums[(size_t)k * OC + j];
                colsum[j] = acc ? colsum[j] + t : t;
            }
        }
        return;
    }
    /* No scratch: threads take spans of columns (multiples of COLSUM_UNIT), each chunk's sums of a
     * span (at most COLSUM_SPAN columns at a time) added to the span's total in chunk order. */
    int units = (OC + COLSUM_UNIT - 1) / COLSUM_UNIT;
#pragma omp parallel num_threads(nt)
    {
        int tid = omp_get_thread_num(), nth = omp_get_num_threads();
        int c0 = (int)((long)units * tid / nth) * COLSUM_UNIT, c1 = (int)((long)units * (tid + 1) / nth) * COLSUM_UNIT;
        if (c1 > OC) c1 = OC;
        for (int j0 = c0; j0 < c1; j0 += COLSUM_SPAN) {
            int j1 = j0 + COLSUM_SPAN < c1 ? j0 + COLSUM_SPAN : c1;
            float part[COLSUM_SPAN], tot[COLSUM_SPAN];
            for (int k = 0; k < nchunk; k++) {
                int i1 = (k + 1) * KERNEL_ROW_CHUNK < N ? (k + 1) * KERNEL_ROW_CHUNK : N;
                colsum_rows(mode, dst, part, src, inp, k * KERNEL_ROW_CHUNK, i1, j0, j1, OC);
                for (int j = 0; j < j1 - j0; j++) tot[j] = k ? tot[j] + part[j] : part[j];
            }
            for (int j = j0; j < j1; j++) {
                float t = nchunk ? tot[j - j0] : 0.0f;
                colsum[j] = acc ? colsum[j] + t : t;
            }
        }
    }
}

void matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w,
                     int N, int C, int OC, int acc, int nt) {
    if (dinp) mm_sgemm(0, 0, N, C, OC, 1.0f, dout, OC, w, C, 0.0f, dinp, C);
    if (dw) mm_sgemm(1, 0, OC, C, N, 1.0f, dout, OC, inp, C, acc ? 1.0f : 0.0f, dw, C);
    if (dbias) colsum_pass(COLSUM_PLAIN, NULL, dbias, NULL, dout, NULL, N, OC, acc, nt);
}

void cast_bf16_colsum(uint16_t *dst, float *colsum, float *sums, const float *src, int N, int OC, int acc, int nt) {
    colsum_pass(COLSUM_CAST, dst, colsum, sums, src, NULL, N, OC, acc, nt);
}

/* The elementwise passes on n values (cast_bf16, GELU): in a parallel region, this thread's range of
 * whole 16-lane vectors. */
#define VEC_RANGE(n, i0, i1)                                                                     \
    size_t nv_ = ((n) + 15) / 16, me_ = (size_t)omp_get_thread_num(), nth_ = (size_t)omp_get_num_threads(); \
    size_t i0 = nv_ * me_ / nth_ * 16, i1 = nv_ * (me_ + 1) / nth_ * 16;                          \
    if (i1 > (n)) i1 = (n)

void cast_bf16(uint16_t *dst, const float *src, size_t n, int nt) {
#if ST_VEC4
#pragma omp parallel num_threads(nt)
    {
        VEC_RANGE(n, i0, i1);
#define LD_(i, k) _mm512_maskz_loadu_ps(k, src + (i))
#define F_(v, i, k) (v)
#define ACC_(i, k, v) ((void)0)
        VEC4_SPAN_BF16(i0, i1, LD_, F_, ACC_, dst);
#undef LD_
#undef F_
#undef ACC_
    }
#else
#pragma omp parallel for simd num_threads(nt) schedule(static)
    for (size_t i = 0; i < n; i++) dst[i] = half_bf16(src[i]);
#endif
}

void cast_fp16(uint16_t *dst, const float *src, size_t n, int nt) {
#pragma omp parallel for simd num_threads(nt) schedule(static)
    for (size_t i = 0; i < n; i++) dst[i] = half_fp16(src[i]);
}

void round_fp16(float *dst, const float *src, size_t n, int nt) {
#pragma omp parallel for simd num_threads(nt) schedule(static)
    for (size_t i = 0; i < n; i++) dst[i] = (float)(_Float16)src[i];
}

void widen_fp16(float *dst, const uint16_t *src, size_t n, int nt) {
#pragma omp parallel for simd num_threads(nt) schedule(static)
    for (size_t i = 0; i < n; i++) {
        _Float16 h;
        memcpy(&h, &src[i], sizeof h);
        dst[i] = (float)h;
    }
}

void matmul_forward_p(const MatPrec *mp, float *out, const float *inp, const float *w, const uint16_t *w_lp,
                      const float *bias, int N, int C, int OC, int nt) {
    if (mp && mp->fp16) {
        round_fp16(mp->fa, inp, (size_t)N * C, nt);
        widen_fp16(mp->fw, w_lp, (size_t)OC * C, nt);
        matmul_forward(out, mp->fa, mp->fw, bias, N, C, OC, nt);
        return;
    }
    if (!mp || !mp->bf16) {
        matmul_forward(out, inp, w, bias, N, C, OC, nt);
        return;
    }
    cast_bf16(mp->a, inp, (size_t)N * C, nt);
    mm_linear_bf16(N, OC, C, mp->a, w_lp, bias, out);
}

void matmul_backward_p(const MatPrec *mp, float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                       const float *w, const uint16_t *w_lp, int N, int C, int OC, int acc, int nt) {
    if (mp && mp->fp16) {
        round_fp16(mp->fa, dout, (size_t)N * OC, nt);
        round_fp16(mp->fb, inp, (size_t)N * C, nt);
        widen_fp16(mp->fw, w_lp, (size_t)OC * C, nt);
        matmul_backward(dinp, dw, NULL, mp->fa, mp->fb, mp->fw, N, C, OC, acc, nt);
        if (dbias) colsum_pass(COLSUM_PLAIN, NULL, dbias, mp->sums, mp->fa, NULL, N, OC, acc, nt);
        return;
    }
    if (!mp || !mp->bf16) {
        matmul_backward(dinp, dw, NULL, dout, inp, w, N, C, OC, acc, nt);
        if (dbias) colsum_pass(COLSUM_PLAIN, NULL, dbias, mp ? mp->sums : NULL, dout, NULL, N, OC, acc, nt);
        return;
    }
    if (dbias) cast_bf16_colsum(mp->a, dbias, mp->sums, dout, N, OC, acc, nt);
    else cast_bf16(mp->a, dout, (size_t)N * OC, nt);
    cast_bf16(mp->b, inp, (size_t)N * C, nt);
    matmul_backward_lp(dinp, dw, mp->a, mp->b, w_lp, N, C, OC, acc);
}

void matmul_forward_lp(float *out, const uint16_t *inp_lp, const uint16_t *w_lp, const float *bias, int N, int C,
                       int OC) {
    mm_linear_bf16(N, OC, C, inp_lp, w_lp, bias, out);
}

void matmul_backward_lp(float *dinp, float *dw, const uint16_t *dout_lp, const uint16_t *inp_lp, const uint16_t *w_lp,
                        int N, int C, int OC, int acc) {
    if (dinp) mm_gemm_bf16(0, 0, N, C, OC, 1.0f, dout_lp, OC, w_lp, C, 0.0f, dinp, C);
    if (dw) mm_gemm_bf16(1, 0, OC, C, N, 1.0f, dout_lp, OC, inp_lp, C, acc ? 1.0f : 0.0f, dw, C);
}

/* ------------------------------------------------------------------------------------------ */
/* GELU, residual, dropout                                                                    */
/* ------------------------------------------------------------------------------------------ */

void gelu_forward(float *out, const float *inp, size_t n, int nt) {
#pragma omp parallel num_threads(nt)
    {
        VEC_RANGE(n, i0, i1);
#if ST_VEC4
#define LD_(i, k) _mm512_maskz_loadu_ps(k, inp + (i))
#define ST_(i, k, v) _mm512_mask_storeu_ps(out + (i), k, v)
        VEC4_SPAN(i0, i1, LD_, GELU_F, ST_);
#undef LD_
#undef ST_
#else
#pragma omp simd
        for (size_t i = i0; i < i1; i++) out[i] = st_gelu(inp[i]);
#endif
    }
}

void gelu_backward(float *dinp, const float *dout, const float *inp, size_t n, int nt) {
#pragma omp parallel num_threads(nt)
    {
        VEC_RANGE(n, i0, i1);
#if ST_VEC4
#define LD_(i, k) _mm512_maskz_loadu_ps(k, inp + (i))
#define F_(v, i, k) _mm512_mul_ps(_mm512_maskz_loadu_ps(k, dout + (i)), st_gelu_grad16(v))
#define ST_(i, k, v) _mm512_mask_storeu_ps(dinp + (i), k, v)
        VEC4_SPAN(i0, i1, LD_, F_, ST_);
#undef LD_
#undef F_
#undef ST_
#else
#pragma omp simd
        for (size_t i = i0; i < i1; i++) dinp[i] = dout[i] * st_gelu_grad(inp[i]);
#endif
    }
}

void gelu_forward_bf16(uint16_t *out, const float *inp, size_t n, int nt) {
#pragma omp parallel num_threads(nt)
    {
        VEC_RANGE(n, i0, i1);
#if ST_VEC4
#define LD_(i, k) _mm512_maskz_loadu_ps(k, inp + (i))
#define ACC_(i, k, v) ((void)0)
        VEC4_SPAN_BF16(i0, i1, LD_, GELU_F, ACC_, out);
#undef LD_
#undef ACC_
#else
#pragma omp simd
        for (size_t i = i0; i < i1; i++) out[i] = half_bf16(st_gelu(inp[i]));
#endif
    }
}

void gelu_backward_bf16(uint16_t *dinp_lp, float *colsum, float *sums, const float *dout, const float *inp, int N, int OC,
                        int acc, int nt) {
    colsum_pass(COLSUM_GELU, dinp_lp, colsum, sums, dout, inp, N, OC, acc, nt);
}

void bias_add_rows(float *x, const float *bias, int N, int C, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int i = 0; i < N; i++) {
        float *r = x + (size_t)i * C;
#pragma omp simd
        for (int c = 0; c < C; c++) r[c] += bias[c];
    }
}

void residual_forward(float *out, const float *a, const float *b, size_t n, Dropout d, int nt) {
    if (d.p > 0) { /* out may be a */
        drop_apply(out, a, b, n, d, nt);
    } else {
#pragma omp parallel for simd num_threads(nt) schedule(static)
        for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
    }
}

/* Philox blocks bg .. bg + 15 of (seed, stream) into w[word][block] (rng_philox_inline's words). */
#define DROP_LANES 16
static void philox16(uint64_t bg, uint64_t seed, uint64_t stream, uint32_t w[4][DROP_LANES]) {
#ifdef ST_VEC4
    const uint32_t s0 = (uint32_t)stream, s1 = (uint32_t)(stream >> 32), key0 = (uint32_t)seed, key1 = (uint32_t)(seed >> 32);
    /* 8 blocks per vector in 64-bit lanes: vpmuludq multiplies their low 32 bits exactly (GCC's
     * vectorization of the scalar loop used the 64x64 vpmullq, 1.25x the scalar code); high garbage
     * in a lane is never read (products take the low words, stores truncate) */
    for (int h = 0; h < DROP_LANES; h += 8) {
        const __m512i M0 = _mm512_set1_epi64(0xD2511F53u), M1 = _mm512_set1_epi64(0xCD9E8D57u);
        __m512i idx = _mm512_add_epi64(_mm512_set1_epi64((long long)(bg + (uint64_t)h)), _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0));
        __m512i c0 = idx, c1 = _mm512_srli_epi64(idx, 32), c2 = _mm512_set1_epi64(s0), c3 = _mm512_set1_epi64(s1);
        __m512i k0 = _mm512_set1_epi64(key0), k1 = _mm512_set1_epi64(key1);
        const __m512i W0 = _mm512_set1_epi64(0x9E3779B9u), W1 = _mm512_set1_epi64(0xBB67AE85u);
        for (int r = 0; r < 10; r++) {
            __m512i p0 = _mm512_mul_epu32(M0, c0), p1 = _mm512_mul_epu32(M1, c2);
            c0 = _mm512_xor_si512(_mm512_xor_si512(_mm512_srli_epi64(p1, 32), c1), k0);
            c1 = p1;
            c2 = _mm512_xor_si512(_mm512_xor_si512(_mm512_srli_epi64(p0, 32), c3), k1);
            c3 = p0;
            k0 = _mm512_add_epi64(k0, W0), k1 = _mm512_add_epi64(k1, W1);
        }
        _mm256_storeu_si256((__m256i *)&w[0][h], _mm512_cvtepi64_epi32(c0));
        _mm256_storeu_si256((__m256i *)&w[1][h], _mm512_cvtepi64_epi32(c1));
        _mm256_storeu_si256((__m256i *)&w[2][h], _mm512_cvtepi64_epi32(c2));
        _mm256_storeu_si256((__m256i *)&w[3][h], _mm512_cvtepi64_epi32(c3));
    }
#else
    for (int l = 0; l < DROP_LANES; l++) {
        uint32_t o[4];
        rng_philox_inline(seed, stream, bg + (uint64_t)l, o);
        w[0][l] = o[0], w[1][l] = o[1], w[2][l] = o[2], w[3][l] = o[3];
    }
#endif
}

/* drop_scale's factors for elements 0 .. n-1 of d (indices d.offset + i), bit for bit: one Philox
 * block per 4 elements (drop_scale computes a block per element and keeps one of its 4 words: 4x
 * the work, not inlined), 16 blocks at a time (philox16). One thread. */
void drop_factors(float *f, size_t n, Dropout d) {
    if (n == 0) return;
    const float keep = 1.0f / (1.0f - d.p);
    const uint64_t a0 = d.offset, b0 = a0 >> 2, b1 = (a0 + n - 1) >> 2;
    uint32_t w[4][DROP_LANES];
    for (uint64_t bg = b0; bg <= b1; bg += DROP_LANES) {
        philox16(bg, d.seed, d.stream, w);
        for (int l = 0; l < DROP_LANES; l++)
            for (int j = 0; j < 4; j++) {
                uint64_t idx = 4 * (bg + (uint64_t)l) + (uint64_t)j;
                if (idx < a0 || idx - a0 >= n) continue;
                f[idx - a0] = rng_unit24(w[j][l]) >= d.p ? keep : 0.0f;
            }
    }
}

void drop_row(float *out, const float *a, const float *b, size_t n, Dropout d, uint64_t base) {
    float f[DROP_CHUNK];
    for (size_t i0 = 0; i0 < n; i0 += DROP_CHUNK) {
        size_t m = n - i0 < DROP_CHUNK ? n - i0 : DROP_CHUNK;
        drop_factors_at(f, m, d, base + i0);
        if (a) /* the two loops apart: 0 + x would turn a -0 product into +0 */
            for (size_t i = 0; i < m; i++) out[i0 + i] = a[i0 + i] + b[i0 + i] * f[i];
        else
            for (size_t i = 0; i < m; i++) out[i0 + i] = b[i0 + i] * f[i];
    }
}

/* drop_row over n elements, DROP_CHUNK of them per thread at a time (out may be a or b). */
void drop_apply(float *out, const float *a, const float *b, size_t n, Dropout d, int nt) {
    const long long nc = (long long)((n + DROP_CHUNK - 1) / DROP_CHUNK);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (long long q = 0; q < nc; q++) {
        size_t i0 = (size_t)q * DROP_CHUNK, m = n - i0 < DROP_CHUNK ? n - i0 : DROP_CHUNK;
        drop_row(out + i0, a ? a + i0 : NULL, b + i0, m, d, i0);
    }
}

void dropout_backward(float *out, const float *dout, size_t n, Dropout d, int nt) {
    drop_apply(out, NULL, dout, n, d, nt);
}

/* ---- small elementwise kernels of the model (kernels.h) ---- */

void scale_inplace(float *x, size_t n, float a, int nt) {
#pragma omp parallel for simd num_threads(nt) schedule(static)
    for (size_t i = 0; i < n; i++) x[i] *= a;
}

double sum_ordered(const float *x, size_t n) {
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += x[i];
    return sum;
}

void add_or_set(float *dst, const float *src, size_t n, int acc) {
    for (size_t i = 0; i < n; i++) dst[i] = acc ? dst[i] + src[i] : src[i];
}
