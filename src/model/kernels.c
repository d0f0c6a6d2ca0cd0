/* kernels.c — GPT layer kernels (contracts in kernels.h). */
#include "model/kernels.h"

#include <math.h>
#include <omp.h>
#include <string.h>

#include "core/half.h"
#include "core/rng.h"
#include "core/timer.h"
#include "model/fastmath.h"
#include "model/matmul.h"

/* Bias gradients: column blocks of 64, each summed over the rows in order by one thread, so the
 * sums do not depend on the thread count; the fused variants below keep that order bit for bit. */
#define COLSUM_BLOCK 64

static inline float drop_scale(Dropout d, uint64_t i) {
    return rng_uniform(d.seed, d.stream, i + d.offset) >= d.p ? 1.0f / (1.0f - d.p) : 0.0f;
}

/* ------------------------------------------------------------------------------------------ */
/* Encoder                                                                                    */
/* ------------------------------------------------------------------------------------------ */

void encoder_forward(float *out, const int32_t *inp, const float *wte, const float *wpe, int B, int T, int C,
                     Dropout d, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (long bt = 0; bt < (long)B * T; bt++) {
        const float *e = wte + (size_t)inp[bt] * C, *p = wpe + (size_t)(bt % T) * C;
        float *o = out + (size_t)bt * C;
        if (d.p > 0) {
            for (int c = 0; c < C; c++) o[c] = (e[c] + p[c]) * drop_scale(d, (uint64_t)bt * C + c);
        } else {
#pragma omp simd
            for (int c = 0; c < C; c++) o[c] = e[c] + p[c];
        }
    }
}

void encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int B, int T, int C,
                      Dropout d, int nt) {
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
                for (int c = c0; c < c1; c++) g[c] += o[c] * drop_scale(d, (uint64_t)bt * C + c);
            } else {
#pragma omp simd
                for (int c = c0; c < c1; c++) g[c] += o[c];
            }
        }
#pragma omp for schedule(static)
        for (int t = 0; t < T; t++) {
            float *g = dwpe + (size_t)t * C;
            for (int b = 0; b < B; b++) {
                size_t bt = (size_t)b * T + t;
                const float *o = dout + bt * C;
                if (d.p > 0) {
                    for (int c = 0; c < C; c++) g[c] += o[c] * drop_scale(d, (uint64_t)bt * C + c);
                } else {
#pragma omp simd
                    for (int c = 0; c < C; c++) g[c] += o[c];
                }
            }
        }
    }
}

void encoder_forward_vp(float *out, const int32_t *inp, const float *wte, const float *wpe, int B, int T, int C,
                        int v0, int vn, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (long bt = 0; bt < (long)B * T; bt++) {
        int v = inp[bt] - v0;
        float *o = out + (size_t)bt * C;
        const float *p = wpe ? wpe + (size_t)(bt % T) * C : NULL;
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

void encoder_backward_vp(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int B, int T, int C, int v0,
                         int vn, int nt) {
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
        if (dwpe) {
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

/* Shared by the fp32 and the bf16 output: exactly one of out, out_lp is non-NULL. */
static void residual_layernorm(float *res, float *out, uint16_t *out_lp, float *mean, float *rstd, const float *a,
                               const float *b, Dropout d, const float *w, const float *bias, int N, int C, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int i = 0; i < N; i++) {
        const float *ai = a + (size_t)i * C, *bi = b + (size_t)i * C;
        float *x = res + (size_t)i * C, *o = out ? out + (size_t)i * C : NULL;
        uint16_t *olp = out_lp ? out_lp + (size_t)i * C : NULL;
        if (d.p > 0) {
            for (int c = 0; c < C; c++) x[c] = ai[c] + bi[c] * drop_scale(d, (size_t)i * C + c);
        } else {
#pragma omp simd
            for (int c = 0; c < C; c++) x[c] = ai[c] + bi[c];
        }
        layernorm_row(o, olp, &mean[i], &rstd[i], x, w, bias, C); /* the row is still in L1 */
    }
}

void residual_layernorm_forward(float *res, float *out, float *mean, float *rstd, const float *a, const float *b,
                                Dropout d, const float *w, const float *bias, int N, int C, int nt) {
    residual_layernorm(res, out, NULL, mean, rstd, a, b, d, w, bias, N, C, nt);
}

void residual_layernorm_forward_bf16(float *res, uint16_t *out, float *mean, float *rstd, const float *a,
                                     const float *b, Dropout d, const float *w, const float *bias, int N, int C,
                                     int nt) {
    residual_layernorm(res, NULL, out, mean, rstd, a, b, d, w, bias, N, C, nt);
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
            dw[c] = acc ? dw[c] + sw : sw;
            db[c] = acc ? db[c] + sb : sb;
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
static void residual_rmsnorm(float *res, float *out, uint16_t *out_lp, float *rstd, const float *a, const float *b,
                             Dropout d, const float *w, int N, int C, float eps, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int i = 0; i < N; i++) {
        const float *ai = a + (size_t)i * C, *bi = b + (size_t)i * C;
        float *x = res + (size_t)i * C, *o = out ? out + (size_t)i * C : NULL;
        uint16_t *olp = out_lp ? out_lp + (size_t)i * C : NULL;
        if (d.p > 0) {
            for (int c = 0; c < C; c++) x[c] = ai[c] + bi[c] * drop_scale(d, (size_t)i * C + c);
        } else {
#pragma omp simd
            for (int c = 0; c < C; c++) x[c] = ai[c] + bi[c];
        }
        rmsnorm_row(o, olp, &rstd[i], x, w, C, eps); /* the row is still in L1 */
    }
}

void residual_rmsnorm_forward(float *res, float *out, float *rstd, const float *a, const float *b, Dropout d,
                              const float *w, int N, int C, float eps, int nt) {
    residual_rmsnorm(res, out, NULL, rstd, a, b, d, w, N, C, eps, nt);
}

void residual_rmsnorm_forward_bf16(float *res, uint16_t *out, float *rstd, const float *a, const float *b,
                                   Dropout d, const float *w, int N, int C, float eps, int nt) {
    residual_rmsnorm(res, NULL, out, rstd, a, b, d, w, N, C, eps, nt);
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
            dw[c] = acc ? dw[c] + sw : sw;
        }
    }
}

void rope_table(float *cs, int T, int hs, double theta) {
    int half = hs / 2;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < half; i++) {
            double a = (double)t * pow(theta, -2.0 * i / hs);
            cs[(size_t)t * hs + i] = (float)cos(a);
            cs[(size_t)t * hs + half + i] = (float)sin(a);
        }
}

/* Rotates the NH + KV heads at the start of each qkv row (q heads, then k heads) by the angles of
 * position pos0 + t: (a, b) = (x[i], x[i + hs/2]) → (a·cos − b·sin, b·cos + a·sin) with sign = 1;
 * sign = −1 turns by −angle, the transpose (the backward of a rotation). One pass, in place. */
static void rope_apply(float *qkv, const float *cs, int B, int T, int NH, int KV, int hs, int pos0, float sign,
                       int nt) {
    int half = hs / 2, nh = NH + KV;
    size_t ld = (size_t)(NH + 2 * KV) * hs;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (long bt = 0; bt < (long)B * T; bt++) {
        const float *co = cs + (size_t)(pos0 + bt % T) * hs, *si = co + half;
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

void rope_forward(float *qkv, const float *cs, int B, int T, int NH, int KV, int hs, int pos0, int nt) {
    rope_apply(qkv, cs, B, T, NH, KV, hs, pos0, 1.0f, nt);
}

void rope_backward(float *dqkv, const float *cs, int B, int T, int NH, int KV, int hs, int pos0, int nt) {
    rope_apply(dqkv, cs, B, T, NH, KV, hs, pos0, -1.0f, nt);
}

/* SwiGLU: per row, g = h[0, F) (gate), u = h[F, 2F) (up); out = silu(g) · u with
 * silu(g) = g · σ(g), σ(g) = 1/(1 + e^−g) (st_expf clamps e^−g to [e^−87, e^88], so silu is
 * finite everywhere). Backward: d/dg silu = σ · (1 + g · (1 − σ)), so dg = dout · u · σ(1 + g(1 − σ)),
 * du = dout · silu(g). The bf16 forms store the same fp32 values rounded. */
static inline float silu_at(float g) { return g / (1.0f + st_expf(-g)); }

void swiglu_forward(float *out, const float *h, int N, int F, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int i = 0; i < N; i++) {
        const float *g = h + (size_t)i * 2 * F, *u = g + F;
        float *o = out + (size_t)i * F;
#pragma omp simd
        for (int j = 0; j < F; j++) o[j] = silu_at(g[j]) * u[j];
    }
}

void swiglu_forward_bf16(uint16_t *out, const float *h, int N, int F, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int i = 0; i < N; i++) {
        const float *g = h + (size_t)i * 2 * F, *u = g + F;
        uint16_t *o = out + (size_t)i * F;
#pragma omp simd
        for (int j = 0; j < F; j++) o[j] = half_bf16(silu_at(g[j]) * u[j]);
    }
}

/* One element's gradients: *dg for the gate, *du for the up value (one exponential for both). */
static inline void swiglu_grad_at(float *dg, float *du, float dout, float g, float u) {
    float s = 1.0f / (1.0f + st_expf(-g));
    *dg = dout * u * (s * (1.0f + g * (1.0f - s)));
    *du = dout * (g * s);
}

void swiglu_backward(float *dh, const float *dout, const float *h, int N, int F, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int i = 0; i < N; i++) {
        const float *g = h + (size_t)i * 2 * F, *u = g + F, *d = dout + (size_t)i * F;
        float *dg = dh + (size_t)i * 2 * F, *du = dg + F;
#pragma omp simd
        for (int j = 0; j < F; j++) swiglu_grad_at(&dg[j], &du[j], d[j], g[j], u[j]);
    }
}

void swiglu_backward_bf16(uint16_t *dh, const float *dout, const float *h, int N, int F, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int i = 0; i < N; i++) {
        const float *g = h + (size_t)i * 2 * F, *u = g + F, *d = dout + (size_t)i * F;
        uint16_t *dg = dh + (size_t)i * 2 * F, *du = dg + F;
#pragma omp simd
        for (int j = 0; j < F; j++) {
            float a, b;
            swiglu_grad_at(&a, &b, d[j], g[j], u[j]);
            dg[j] = half_bf16(a), du[j] = half_bf16(b);
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Linear layers                                                                              */
/* ------------------------------------------------------------------------------------------ */

void matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC, int nt) {
    mm_linear(N, OC, C, inp, w, bias, out);
}

#define GELU_S 0.7978845608028654f /* sqrt(2/pi) */

static inline float gelu_at(float x) { return 0.5f * x * (1.0f + st_tanhf(GELU_S * (x + 0.044715f * x * x * x))); }

static inline float gelu_grad_at(float x) {
    float t = st_tanhf(GELU_S * (x + 0.044715f * x * x * x));
    float sech2 = 1.0f - t * t;
    return 0.5f * (1.0f + t) + 0.5f * x * sech2 * GELU_S * (1.0f + 3.0f * 0.044715f * x * x);
}

/* What a column-sum pass does to each element g of src (N, OC) besides adding it to its column:
 * nothing, round it to bf16 into dst, or take v = g · gelu'(inp) first (then v is summed and
 * rounded). One 64-column block per task, rows summed in order: bit-identical for any thread
 * count, and the same sums in all three modes. */
enum { COLSUM_PLAIN, COLSUM_CAST, COLSUM_GELU };

static void colsum_pass(int mode, uint16_t *dst, float *colsum, const float *src, const float *inp, int N, int OC,
                        int acc, int nt) {
    int nblk = (OC + COLSUM_BLOCK - 1) / COLSUM_BLOCK;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int kb = 0; kb < nblk; kb++) {
        int j0 = kb * COLSUM_BLOCK, j1 = j0 + COLSUM_BLOCK < OC ? j0 + COLSUM_BLOCK : OC;
        float sum[COLSUM_BLOCK] = {0};
        for (int i = 0; i < N; i++) {
            const float *g = src + (size_t)i * OC;
            uint16_t *d = dst ? dst + (size_t)i * OC : NULL;
            if (mode == COLSUM_PLAIN) {
#pragma omp simd
                for (int j = j0; j < j1; j++) sum[j - j0] += g[j];
            } else if (mode == COLSUM_CAST) {
#pragma omp simd
                for (int j = j0; j < j1; j++) {
                    sum[j - j0] += g[j];
                    d[j] = half_bf16(g[j]);
                }
            } else {
                const float *x = inp + (size_t)i * OC;
#pragma omp simd
                for (int j = j0; j < j1; j++) {
                    float v = g[j] * gelu_grad_at(x[j]);
                    sum[j - j0] += v;
                    d[j] = half_bf16(v);
                }
            }
        }
        for (int j = j0; j < j1; j++) colsum[j] = acc ? colsum[j] + sum[j - j0] : sum[j - j0];
    }
}

void matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w,
                     int N, int C, int OC, int acc, int nt) {
    if (dinp) mm_sgemm(0, 0, N, C, OC, 1.0f, dout, OC, w, C, 0.0f, dinp, C);
    if (dw) mm_sgemm(1, 0, OC, C, N, 1.0f, dout, OC, inp, C, acc ? 1.0f : 0.0f, dw, C);
    if (dbias) colsum_pass(COLSUM_PLAIN, NULL, dbias, dout, NULL, N, OC, acc, nt);
}

void cast_bf16_colsum(uint16_t *dst, float *colsum, const float *src, int N, int OC, int acc, int nt) {
    colsum_pass(COLSUM_CAST, dst, colsum, src, NULL, N, OC, acc, nt);
}

void cast_bf16(uint16_t *dst, const float *src, size_t n, int nt) {
#pragma omp parallel for simd num_threads(nt) schedule(static)
    for (size_t i = 0; i < n; i++) dst[i] = half_bf16(src[i]);
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
        if (dbias) matmul_backward(NULL, NULL, dbias, mp->fa, NULL, NULL, N, C, OC, acc, nt);
        return;
    }
    if (!mp || !mp->bf16) {
        matmul_backward(dinp, dw, dbias, dout, inp, w, N, C, OC, acc, nt);
        return;
    }
    if (dbias) cast_bf16_colsum(mp->a, dbias, dout, N, OC, acc, nt);
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
/* Attention                                                                                  */
/* ------------------------------------------------------------------------------------------ */

/* Causal attention, flash style: per (batch, query head), 64-query blocks against key blocks of up
 * to 256 with an online softmax, so the T×T matrix is never stored; only each row's log-sum-exp is
 * saved, and backward recomputes the probabilities from it. Blocks above the diagonal are skipped.
 *
 * With lowp (bf16), each head's Q, K, V (and dY in backward) are first rounded into contiguous
 * bf16 copies, and the probabilities and dS are rounded before their GEMMs, so all five GEMMs run
 * on the bf16 units with fp32 accumulation; the softmax, its statistics and every output stay fp32.
 *
 * One implementation, grouped-query (attention_gqa_*, below); GPT-2's multi-head attention is its
 * case KV = NH (attention_forward/_backward at the end of this section). */
#define ATT_BLOCK 64
#define ATT_KBLOCK 256

/* Per thread: S/P, dP and the dropped P (fp32, 64 × min(T, 256) each), their bf16 roundings
 * (half as many floats each), then bf16 Q, K, V, dY of one head (T × hs each). */
static size_t att_blk(int T) { return (size_t)ATT_BLOCK * (size_t)(T < ATT_KBLOCK ? T : ATT_KBLOCK); }
static size_t att_thread_floats(int T, int hs) { return 4 * att_blk(T) + 2 * (size_t)T * hs; }

size_t attention_scratch_floats(int T, int hs, int nt) {
    return (size_t)(nt > 0 ? nt : 1) * att_thread_floats(T, hs);
}

/* rows × cols of src (leading dimension ld) into dst (leading dimension cols), rounded to bf16. */
static void rows_to_bf16(uint16_t *dst, const float *src, int rows, int cols, size_t ld) {
    for (int r = 0; r < rows; r++) {
        const float *s = src + (size_t)r * ld;
        uint16_t *d = dst + (size_t)r * cols;
#pragma omp simd
        for (int c = 0; c < cols; c++) d[c] = half_bf16(s[c]);
    }
}

typedef struct {
    float *S, *dP, *Pd;
    uint16_t *Pb, *dSb, *Qb, *Kb, *Vb, *dYb;
} AttScratch;

static AttScratch att_scratch(float *scratch, int T, int hs) {
    size_t blk = att_blk(T);
    float *base = scratch + (size_t)omp_get_thread_num() * att_thread_floats(T, hs);
    AttScratch a;
    a.S = base, a.dP = base + blk, a.Pd = base + 2 * blk;
    a.Pb = (uint16_t *)(base + 3 * blk), a.dSb = a.Pb + blk;
    a.Qb = (uint16_t *)(base + 4 * blk), a.Kb = a.Qb + (size_t)T * hs, a.Vb = a.Kb + (size_t)T * hs;
    a.dYb = a.Vb + (size_t)T * hs;
    return a;
}

size_t attention_gqa_scratch_floats(int T, int hs, int group, int nt) {
    (void)group; /* query heads are processed one at a time: the scratch is that of one head */
    return attention_scratch_floats(T, hs, nt);
}

/* Grouped-query attention. The qkv row holds NH query heads, then KV key heads, then KV value
 * heads (ld = (NH + 2·KV)·hs floats); query head h reads KV head h / G, G = NH / KV, in place.
 *
 * Forward: one task per (batch, query head), as the GPT-2 attention; with lowp, a thread keeps the
 * bf16 K, V of the KV head it converted last, so the G query heads of a group (adjacent in the
 * static schedule) convert their shared K, V once. At KV = NH every task does exactly what the
 * GPT-2 kernel did, in the same order: results are bit-identical. */
void attention_gqa_forward(float *out, float *lse, float *scratch, const float *qkv, int B, int T, int NH, int KV,
                           int hs, float scale, Dropout d, int lowp, int nt) {
    int G = NH / KV, C = NH * hs, ld = (NH + 2 * KV) * hs;
#pragma omp parallel num_threads(nt)
    {
        long held = -1; /* the (b, KV head) whose bf16 K, V this thread's scratch holds */
#pragma omp for schedule(static)
        for (int bh = 0; bh < B * NH; bh++) {
            int b = bh / NH, h = bh % NH, kh = h / G;
            uint64_t bhg = (uint64_t)b * (d.heads ? d.heads : NH) + d.head0 + h; /* the head in the whole model */
            const float *row0 = qkv + (size_t)b * T * ld;
            const float *q = row0 + (size_t)h * hs, *k = row0 + (size_t)(NH + kh) * hs, *v = k + (size_t)KV * hs;
            AttScratch w = att_scratch(scratch, T, hs);
            float *S = w.S, *Pd = w.Pd;
            float *y = out + (size_t)b * T * C + (size_t)h * hs, *L = lse + (size_t)bh * T;
            if (lowp) {
                rows_to_bf16(w.Qb, q, T, hs, ld);
                if (held != (long)b * KV + kh) {
                    rows_to_bf16(w.Kb, k, T, hs, ld), rows_to_bf16(w.Vb, v, T, hs, ld);
                    held = (long)b * KV + kh;
                }
            }
            for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
                int m = T - r0 < ATT_BLOCK ? T - r0 : ATT_BLOCK, kend = r0 + m;
                float mx[ATT_BLOCK], l[ATT_BLOCK];
                for (int i = 0; i < m; i++) mx[i] = -INFINITY, l[i] = 0;
                for (int k0 = 0; k0 < kend; k0 += ATT_KBLOCK) {
                    int kn = kend - k0 < ATT_KBLOCK ? kend - k0 : ATT_KBLOCK;
                    if (lowp)
                        mm_gemm_bf16(0, 1, m, kn, hs, scale, w.Qb + (size_t)r0 * hs, hs, w.Kb + (size_t)k0 * hs, hs,
                                     0.0f, S, kn);
                    else
                        mm_sgemm(0, 1, m, kn, hs, scale, q + (size_t)r0 * ld, ld, k + (size_t)k0 * ld, ld, 0.0f, S, kn);
                    for (int i = 0; i < m; i++) {
                        int row = r0 + i, jn = row - k0 + 1 < kn ? row - k0 + 1 : kn; /* causal: keys <= row */
                        float *srow = S + (size_t)i * kn, bm = mx[i];
#pragma omp simd reduction(max : bm)
                        for (int j = 0; j < jn; j++) bm = srow[j] > bm ? srow[j] : bm;
                        float corr = st_expf(mx[i] - bm), sum = 0;
                        if (mx[i] == -INFINITY) corr = 0.0f;
#pragma omp simd reduction(+ : sum)
                        for (int j = 0; j < jn; j++) {
                            srow[j] = st_expf(srow[j] - bm);
                            sum += srow[j];
                        }
                        for (int j = jn; j < kn; j++) srow[j] = 0.0f;
                        l[i] = l[i] * corr + sum;
                        mx[i] = bm;
                        float *yrow = y + (size_t)row * C;
                        if (k0 == 0) {
                            for (int x = 0; x < hs; x++) yrow[x] = 0.0f;
                        } else {
                            for (int x = 0; x < hs; x++) yrow[x] *= corr;
                        }
                        if (d.p > 0)
                            for (int j = 0; j < kn; j++)
                                Pd[(size_t)i * kn + j] =
                                    srow[j] * drop_scale(d, bhg * T * T + (size_t)row * T + k0 + j);
                    }
                    const float *P = d.p > 0 ? Pd : S;
                    if (lowp) {
                        rows_to_bf16(w.Pb, P, m, kn, kn);
                        mm_gemm_bf16(0, 0, m, hs, kn, 1.0f, w.Pb, kn, w.Vb + (size_t)k0 * hs, hs, 1.0f,
                                     y + (size_t)r0 * C, C);
                    } else {
                        mm_sgemm(0, 0, m, hs, kn, 1.0f, P, kn, v + (size_t)k0 * ld, ld, 1.0f, y + (size_t)r0 * C, C);
                    }
                }
                for (int i = 0; i < m; i++) {
                    float inv = 1.0f / l[i], *yrow = y + (size_t)(r0 + i) * C;
                    for (int x = 0; x < hs; x++) yrow[x] *= inv;
                    L[r0 + i] = mx[i] + logf(l[i]);
                }
            }
        }
    }
}

/* Backward: one task per (batch, KV head), so exactly one thread writes a KV head's dK, dV. It
 * zeroes them, then takes the group's G query heads in order h = kh·G, ..., kh·G + G − 1: each
 * writes its own dQ and adds its dK, dV contributions (GEMMs with beta 1, query blocks in order)
 * — a fixed summation order, independent of the thread count. At KV = NH this is the GPT-2
 * kernel's per-head task, bit for bit. */
void attention_gqa_backward(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *out,
                            const float *lse, int B, int T, int NH, int KV, int hs, float scale, Dropout d, int lowp,
                            int nt) {
    int G = NH / KV, C = NH * hs, ld = (NH + 2 * KV) * hs;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int bkv = 0; bkv < B * KV; bkv++) {
        int b = bkv / KV, kh = bkv % KV;
        const float *row0 = qkv + (size_t)b * T * ld;
        const float *k = row0 + (size_t)(NH + kh) * hs, *v = k + (size_t)KV * hs;
        float *drow0 = dqkv + (size_t)b * T * ld;
        float *dk = drow0 + (size_t)(NH + kh) * hs, *dv = dk + (size_t)KV * hs;
        AttScratch w = att_scratch(scratch, T, hs);
        float *P = w.S, *dP = w.dP, *Pd = w.Pd;
        for (int t = 0; t < T; t++) {
            float *a = dk + (size_t)t * ld, *c = dv + (size_t)t * ld;
            for (int x = 0; x < hs; x++) a[x] = 0.0f, c[x] = 0.0f;
        }
        if (lowp) rows_to_bf16(w.Kb, k, T, hs, ld), rows_to_bf16(w.Vb, v, T, hs, ld);
        for (int h = kh * G; h < (kh + 1) * G; h++) {
            uint64_t bhg = (uint64_t)b * (d.heads ? d.heads : NH) + d.head0 + h;
            const float *q = row0 + (size_t)h * hs;
            float *dq = drow0 + (size_t)h * hs;
            const float *dy = dout + (size_t)b * T * C + (size_t)h * hs, *y = out + (size_t)b * T * C + (size_t)h * hs;
            const float *L = lse + ((size_t)b * NH + h) * T;
            for (int t = 0; t < T; t++) {
                float *a = dq + (size_t)t * ld;
                for (int x = 0; x < hs; x++) a[x] = 0.0f;
            }
            if (lowp) rows_to_bf16(w.Qb, q, T, hs, ld), rows_to_bf16(w.dYb, dy, T, hs, C);
            for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
                int m = T - r0 < ATT_BLOCK ? T - r0 : ATT_BLOCK, kend = r0 + m;
                float D[ATT_BLOCK]; /* rowsum(dY ∘ Y) = Σ_j P_ij dP'_ij (dropout included) */
                for (int i = 0; i < m; i++) {
                    const float *g = dy + (size_t)(r0 + i) * C, *o = y + (size_t)(r0 + i) * C;
                    float s = 0;
                    for (int x = 0; x < hs; x++) s += g[x] * o[x];
                    D[i] = s;
                }
                for (int k0 = 0; k0 < kend; k0 += ATT_KBLOCK) {
                    int kn = kend - k0 < ATT_KBLOCK ? kend - k0 : ATT_KBLOCK;
                    /* P = exp(scale·Q K^T − L), recomputed; dP = dY V^T */
                    if (lowp) {
                        mm_gemm_bf16(0, 1, m, kn, hs, scale, w.Qb + (size_t)r0 * hs, hs, w.Kb + (size_t)k0 * hs, hs,
                                     0.0f, P, kn);
                        mm_gemm_bf16(0, 1, m, kn, hs, 1.0f, w.dYb + (size_t)r0 * hs, hs, w.Vb + (size_t)k0 * hs, hs,
                                     0.0f, dP, kn);
                    } else {
                        mm_sgemm(0, 1, m, kn, hs, scale, q + (size_t)r0 * ld, ld, k + (size_t)k0 * ld, ld, 0.0f, P, kn);
                        mm_sgemm(0, 1, m, kn, hs, 1.0f, dy + (size_t)r0 * C, C, v + (size_t)k0 * ld, ld, 0.0f, dP, kn);
                    }
                    for (int i = 0; i < m; i++) {
                        int row = r0 + i, jn = row - k0 + 1 < kn ? row - k0 + 1 : kn;
                        float *prow = P + (size_t)i * kn, *g = dP + (size_t)i * kn, li = L[row];
#pragma omp simd
                        for (int j = 0; j < jn; j++) prow[j] = st_expf(prow[j] - li);
                        for (int j = jn; j < kn; j++) prow[j] = 0.0f;
                        if (d.p > 0) {
                            for (int j = 0; j < kn; j++) {
                                float ks = drop_scale(d, bhg * T * T + (size_t)row * T + k0 + j);
                                Pd[(size_t)i * kn + j] = prow[j] * ks;
                                g[j] *= ks;
                            }
                        }
#pragma omp simd
                        for (int j = 0; j < jn; j++) g[j] = prow[j] * (g[j] - D[i]) * scale;
                        for (int j = jn; j < kn; j++) g[j] = 0.0f;
                    }
                    /* dV += Pd^T dY; dQ += dS K; dK += dS^T Q */
                    const float *Pv = d.p > 0 ? Pd : P;
                    if (lowp) {
                        rows_to_bf16(w.Pb, Pv, m, kn, kn), rows_to_bf16(w.dSb, dP, m, kn, kn);
                        mm_gemm_bf16(1, 0, kn, hs, m, 1.0f, w.Pb, kn, w.dYb + (size_t)r0 * hs, hs, 1.0f,
                                     dv + (size_t)k0 * ld, ld);
                        mm_gemm_bf16(0, 0, m, hs, kn, 1.0f, w.dSb, kn, w.Kb + (size_t)k0 * hs, hs, 1.0f,
                                     dq + (size_t)r0 * ld, ld);
                        mm_gemm_bf16(1, 0, kn, hs, m, 1.0f, w.dSb, kn, w.Qb + (size_t)r0 * hs, hs, 1.0f,
                                     dk + (size_t)k0 * ld, ld);
                    } else {
                        mm_sgemm(1, 0, kn, hs, m, 1.0f, Pv, kn, dy + (size_t)r0 * C, C, 1.0f, dv + (size_t)k0 * ld, ld);
                        mm_sgemm(0, 0, m, hs, kn, 1.0f, dP, kn, k + (size_t)k0 * ld, ld, 1.0f, dq + (size_t)r0 * ld,
                                 ld);
                        mm_sgemm(1, 0, kn, hs, m, 1.0f, dP, kn, q + (size_t)r0 * ld, ld, 1.0f, dk + (size_t)k0 * ld,
                                 ld);
                    }
                }
            }
        }
    }
}

/* The GPT-2 attention is GQA with one KV head per query head. */
void attention_forward(float *out, float *lse, float *scratch, const float *qkv, int B, int T, int C, int NH,
                       Dropout d, int lowp, int nt) {
    attention_gqa_forward(out, lse, scratch, qkv, B, T, NH, NH, C / NH, 1.0f / sqrtf((float)(C / NH)), d, lowp, nt);
}

void attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *out,
                        const float *lse, int B, int T, int C, int NH, Dropout d, int lowp, int nt) {
    attention_gqa_backward(dqkv, scratch, dout, qkv, out, lse, B, T, NH, NH, C / NH, 1.0f / sqrtf((float)(C / NH)), d,
                           lowp, nt);
}

/* ------------------------------------------------------------------------------------------ */
/* GELU, residual, dropout                                                                    */
/* ------------------------------------------------------------------------------------------ */

void gelu_forward(float *out, const float *inp, size_t n, int nt) {
#pragma omp parallel for simd num_threads(nt) schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = gelu_at(inp[i]);
}

void gelu_backward(float *dinp, const float *dout, const float *inp, size_t n, int nt) {
#pragma omp parallel for simd num_threads(nt) schedule(static)
    for (size_t i = 0; i < n; i++) dinp[i] = dout[i] * gelu_grad_at(inp[i]);
}

void gelu_forward_bf16(uint16_t *out, const float *inp, size_t n, int nt) {
#pragma omp parallel for simd num_threads(nt) schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = half_bf16(gelu_at(inp[i]));
}

void gelu_backward_bf16(uint16_t *dinp_lp, float *colsum, const float *dout, const float *inp, int N, int OC, int acc,
                        int nt) {
    colsum_pass(COLSUM_GELU, dinp_lp, colsum, dout, inp, N, OC, acc, nt);
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
    if (d.p > 0) {
#pragma omp parallel for num_threads(nt) schedule(static)
        for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i] * drop_scale(d, i);
    } else {
#pragma omp parallel for simd num_threads(nt) schedule(static)
        for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
    }
}

void dropout_backward(float *out, const float *dout, size_t n, Dropout d, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = dout[i] * drop_scale(d, i);
}

/* ------------------------------------------------------------------------------------------ */
/* LM head + cross-entropy                                                                    */
/* ------------------------------------------------------------------------------------------ */

/* The LM head's GEMMs on one chunk of m rows (x_c: the chunk's rows of x) against `rows` rows of
 * wte, in the precision of mp: logits (m, rows; leading dimension ld) = x_c · wte^T, and from the
 * logits' gradient left in `logits`: dx_c = dlogits · wte, dwte (+)= dlogits^T · x_c (beta 0: =).
 * The fp16 path reads wte widened into mp->fw (head_widen) and x_c rounded into mp->fb by the
 * logits call; bf16 keeps x_c's bf16 copy in mp->b for the backward. */
static void head_widen(const MatPrec *mp, const uint16_t *wte_lp, int rows, int C, int nt) {
    if (mp && mp->fp16 && rows > 0) widen_fp16(mp->fw, wte_lp, (size_t)rows * C, nt);
}

static void head_logits_gemm(const MatPrec *mp, float *logits, int ld, const float *x_c, const float *wte,
                             const uint16_t *wte_lp, int m, int rows, int C, int nt) {
    if (mp && mp->bf16) {
        cast_bf16(mp->b, x_c, (size_t)m * C, nt);
        mm_gemm_bf16(0, 1, m, rows, C, 1.0f, mp->b, C, wte_lp, C, 0.0f, logits, ld);
    } else if (mp && mp->fp16) {
        round_fp16(mp->fb, x_c, (size_t)m * C, nt);
        mm_sgemm(0, 1, m, rows, C, 1.0f, mp->fb, C, mp->fw, C, 0.0f, logits, ld);
    } else {
        mm_sgemm(0, 1, m, rows, C, 1.0f, x_c, C, wte, C, 0.0f, logits, ld);
    }
}

static void head_backward_gemms(const MatPrec *mp, float *dx_c, float *dwte, const float *logits, int ld,
                                const float *x_c, const float *wte, const uint16_t *wte_lp, int m, int rows, int C,
                                float beta, int nt) {
    if (mp && mp->fp16) {
        round_fp16(mp->fa, logits, (size_t)m * ld, nt);
        mm_sgemm(0, 0, m, C, rows, 1.0f, mp->fa, ld, mp->fw, C, 0.0f, dx_c, C);
        mm_sgemm(1, 0, rows, C, m, 1.0f, mp->fa, ld, mp->fb, C, beta, dwte, C);
    } else if (mp && mp->bf16) {
        cast_bf16(mp->a, logits, (size_t)m * ld, nt);
        mm_gemm_bf16(0, 0, m, C, rows, 1.0f, mp->a, ld, wte_lp, C, 0.0f, dx_c, C);
        mm_gemm_bf16(1, 0, rows, C, m, 1.0f, mp->a, ld, mp->b, C, beta, dwte, C);
    } else {
        mm_sgemm(0, 0, m, C, rows, 1.0f, logits, ld, wte, C, 0.0f, dx_c, C);
        mm_sgemm(1, 0, rows, C, m, 1.0f, logits, ld, x_c, C, beta, dwte, C);
    }
}

void head_forward_backward(float *losses, float *dx, float *dwte, float *logits, const float *x, const float *wte,
                           const int32_t *targets, int n, int C, int V, int Vp, float dscale, int chunk, int acc,
                           int nt, float *probs_out, double *ms_fwd, double *ms_bwd) {
    head_forward_backward_p(NULL, losses, dx, dwte, logits, x, wte, NULL, targets, n, C, V, Vp, dscale, chunk, acc, nt,
                            probs_out, NULL, ms_fwd, ms_bwd);
}

/* The inverse-CDF draw of HeadSample on one row of unnormalised probabilities e (V, sum s): block
 * sums first (vectorised), then the one block element by element. A draw that rounding leaves past
 * the last element takes the last one with e > 0. */
static int sample_row(const float *e, int V, float s, float u) {
    const float target = u * s;
    float acc = 0;
    for (int b0 = 0; b0 < V; b0 += 64) {
        int b1 = b0 + 64 < V ? b0 + 64 : V;
        float bs = 0;
#pragma omp simd reduction(+ : bs)
        for (int v = b0; v < b1; v++) bs += e[v];
        if (acc + bs > target) {
            for (int v = b0; v < b1; v++)
                if ((acc += e[v]) > target) return v;
            for (int v = b1 - 1; v >= b0; v--)
                if (e[v] > 0) return v;
        }
        acc += bs;
    }
    for (int v = V - 1; v > 0; v--)
        if (e[v] > 0) return v;
    return 0;
}

void head_forward_backward_p(const MatPrec *mp, float *losses, float *dx, float *dwte, float *logits, const float *x,
                             const float *wte, const uint16_t *wte_lp, const int32_t *targets, int n, int C, int V,
                             int Vp, float dscale, int chunk, int acc, int nt, float *probs_out, const HeadSample *smp,
                             double *ms_fwd, double *ms_bwd) {
    head_widen(mp, wte_lp, V, C, nt); /* the V real rows of the tied weight */
    for (int r0 = 0; r0 < n; r0 += chunk) {
        int m = n - r0 < chunk ? n - r0 : chunk;
        float beta = acc || r0 > 0 ? 1.0f : 0.0f; /* overwriting: the first chunk writes dwte's V rows */
        double t0 = timer_ms();
        /* Only the V real columns are computed; padded columns are never read (probability 0). */
        head_logits_gemm(mp, logits, Vp, x + (size_t)r0 * C, wte, wte_lp, m, V, C, nt);
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int i = 0; i < m; i++) {
            float *l = logits + (size_t)i * Vp;
            int t = targets[r0 + i];
            float mx = l[0], s = 0;
#pragma omp simd reduction(max : mx)
            for (int v = 1; v < V; v++) mx = l[v] > mx ? l[v] : mx;
            if (smp) { /* the label drawn from this row's softmax; one exponential pass serves all */
                if (t < 0) {
                    smp->labels[r0 + i] = -1, losses[r0 + i] = 0.0f;
                    if (dx) memset(l, 0, sizeof(float) * V);
                    continue;
                }
#pragma omp simd reduction(+ : s)
                for (int v = 0; v < V; v++) s += (l[v] = st_expf(l[v] - mx));
                int y = sample_row(l, V, s, smp->u[r0 + i]);
                smp->labels[r0 + i] = y;
                losses[r0 + i] = logf(s) - logf(l[y]);
                if (dx) {
                    float inv = dscale / s;
#pragma omp simd
                    for (int v = 0; v < V; v++) l[v] *= inv;
                    l[y] -= dscale;
                }
                continue;
            }
#pragma omp simd reduction(+ : s)
            for (int v = 0; v < V; v++) s += st_expf(l[v] - mx);
            float lse = mx + logf(s);
            losses[r0 + i] = t >= 0 ? lse - l[t] : 0.0f;
            if (probs_out && r0 + i == 0)
                for (int v = 0; v < V; v++) probs_out[v] = st_expf(l[v] - lse);
            if (dx) {
                if (t < 0) {
                    memset(l, 0, sizeof(float) * V);
                } else {
                    float inv = dscale / s;
#pragma omp simd
                    for (int v = 0; v < V; v++) l[v] = st_expf(l[v] - mx) * inv;
                    l[t] -= dscale;
                }
            }
        }
        double t1 = timer_ms();
        if (ms_fwd) *ms_fwd += t1 - t0;
        if (dx) {
            head_backward_gemms(mp, dx + (size_t)r0 * C, dwte, logits, Vp, x + (size_t)r0 * C, wte, wte_lp, m, V, C, beta,
                                nt);
            if (ms_bwd) *ms_bwd += timer_ms() - t1;
        }
    }
}

void head_forward_backward_vp(const MatPrec *mp, float *losses, float *dx, float *dwte, float *logits, float *stats,
                              const float *x, const float *wte, const uint16_t *wte_lp, const int32_t *targets, int n,
                              int C, int v0, int Vr, int Vl, float dscale, int chunk, int acc, int nt,
                              HeadReduceFn reduce, void *ctx, double *ms_fwd, double *ms_bwd) {
    head_widen(mp, wte_lp, Vr, C, nt);
    for (int r0 = 0; r0 < n; r0 += chunk) {
        int m = n - r0 < chunk ? n - r0 : chunk;
        float beta = acc || r0 > 0 ? 1.0f : 0.0f;
        float *mx = stats, *se = stats + m, *tl = stats + 2 * m;
        double t0 = timer_ms();
        if (Vr > 0) head_logits_gemm(mp, logits, Vl, x + (size_t)r0 * C, wte, wte_lp, m, Vr, C, nt);
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int i = 0; i < m; i++) {
            const float *l = logits + (size_t)i * Vl;
            float b = -INFINITY;
#pragma omp simd reduction(max : b)
            for (int v = 0; v < Vr; v++) b = l[v] > b ? l[v] : b;
            mx[i] = b;
        }
        reduce(ctx, mx, (size_t)m, 1);
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int i = 0; i < m; i++) {
            const float *l = logits + (size_t)i * Vl;
            float s = 0, b = mx[i];
#pragma omp simd reduction(+ : s)
            for (int v = 0; v < Vr; v++) s += st_expf(l[v] - b);
            int t = targets[r0 + i] - v0;
            se[i] = s;
            tl[i] = t >= 0 && t < Vr ? l[t] : 0.0f;
        }
        reduce(ctx, se, 2 * (size_t)m, 0);
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int i = 0; i < m; i++) {
            float *l = logits + (size_t)i * Vl;
            int t = targets[r0 + i];
            losses[r0 + i] = t >= 0 ? mx[i] + logf(se[i]) - tl[i] : 0.0f;
            if (dx) {
                if (t < 0) {
                    memset(l, 0, sizeof(float) * (size_t)Vr);
                } else {
                    float inv = dscale / se[i], b = mx[i];
#pragma omp simd
                    for (int v = 0; v < Vr; v++) l[v] = st_expf(l[v] - b) * inv;
                    if (t - v0 >= 0 && t - v0 < Vr) l[t - v0] -= dscale;
                }
            }
        }
        double t1 = timer_ms();
        if (ms_fwd) *ms_fwd += t1 - t0;
        if (dx) {
            if (Vr == 0) memset(dx + (size_t)r0 * C, 0, (size_t)m * C * sizeof(float));
            else
                head_backward_gemms(mp, dx + (size_t)r0 * C, dwte, logits, Vl, x + (size_t)r0 * C, wte, wte_lp, m, Vr, C,
                                    beta, nt);
            if (ms_bwd) *ms_bwd += timer_ms() - t1;
        }
    }
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
