/* cuda_kernels.cu — the CUDA backend's layer kernels except attention (cuda_attention.cu) and the
 * GEMMs (backend_cuda.cu): embedding, LayerNorm, RMSNorm, RoPE, SwiGLU, GELU, residual and
 * dropout, precision casts, bias and column sums, the LM head's softmax. Contracts: kernels.h.
 *
 * Row kernels run one warp per row (rows of C floats, statistics by warp reductions). Every sum
 * over rows (parameter gradients, bias gradients) uses a fixed partition, 64-row chunks summed in
 * chunk order like the CPU kernels, or one thread walking the rows in order: no atomics, so a run
 * repeats bit for bit. The embedding backward walks rows in row order per vocabulary row, the
 * CPU's order, so dwte is the CPU's sum bit for bit apart from the fp32 inputs' own differences. */
#include <math.h>
#include <stdlib.h>

#include "model/cuda_common.cuh"

#define TPB 256
#define ROWS_PER_BLOCK 8 /* warps per block in the row kernels */

/* Every entry returns before launching on zero rows or elements (B·T, N or n = 0, as the CPU's loops
 * do nothing): a grid of 0 blocks is "invalid configuration argument", which would be recorded as
 * a failure. Where acc = 0 overwrites a parameter gradient, its empty sum, 0, is still written. */

/* ------------------------------------------------------------------------------------------ */
/* Encoder                                                                                    */
/* ------------------------------------------------------------------------------------------ */

/* Token bt's position: t, or its document position (kernels.h, "Document masking"). */
static __device__ __forceinline__ size_t tok_pos(const int32_t *pos, size_t bt, int T) {
    return pos ? (size_t)pos[bt] : bt % T;
}

__global__ void k_encoder_forward(float *out, const int32_t *inp, const int32_t *pos, const float *wte,
                                  const float *wpe, int T, int C, size_t n, Dropout d) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    size_t bt = i / C;
    int c = (int)(i % C);
    float v = wte[(size_t)inp[bt] * C + c] + wpe[tok_pos(pos, bt, T) * C + c];
    out[i] = d.p > 0 ? v * cu_drop(d, i) : v;
}

void cu_encoder_forward(float *out, const int32_t *inp, const int32_t *pos, const float *wte, const float *wpe, int B,
                        int T, int C, Dropout d, int nt) {
    size_t n = (size_t)B * T * C;
    if (!cu_ready() || n == 0) return;
    k_encoder_forward<<<cu_blocks(n, TPB), TPB, 0, cu_stream()>>>(out, inp, pos, wte, wpe, T, C, n, d);
    CU_LAUNCHED("encoder_forward");
}

#define ENC_MAXK 32 /* columns per thread: C <= 32 · 256 */

/* A scatter-add of rows in row order: dst[key[bt]] += drop'(dout[bt]) (keys v0-shifted and
 * range-checked when vn > 0): dwte by token, or dwpe by document position. One block per row bt;
 * the block whose row is the FIRST occurrence of its key sums, for each of its columns, dst's value
 * and then every row with that key in row order (the CPU's order of additions); other blocks
 * return. O(N²) key comparisons (one per thread per tile, from L2): no atomics, no sort. */
__global__ void k_encoder_backward_wte(float *dwte, const float *dout, const int32_t *inp, int N, int C, Dropout d,
                                       int v0, int vn) {
    __shared__ unsigned masks[TPB / 32];
    int bt = blockIdx.x, tok = inp[bt];
    if (vn > 0) {
        if (tok < v0 || tok >= v0 + vn) return;
    }
    int earlier = 0;
    for (int j0 = 0; j0 < bt; j0 += TPB) {
        int j = j0 + threadIdx.x;
        earlier |= j < bt && inp[j] == tok;
    }
    if (__syncthreads_or(earlier)) return;
    float acc[ENC_MAXK];
    float *g = dwte + (size_t)(vn > 0 ? tok - v0 : tok) * C;
#pragma unroll
    for (int k = 0; k < ENC_MAXK; k++) {
        int c = threadIdx.x + k * TPB;
        acc[k] = c < C ? g[c] : 0.0f;
    }
    /* The rows of each tile that hold the key, as one ballot mask per warp, then walked in
     * ascending row order: matches are few, so a tile costs one comparison per thread. */
    for (int j0 = bt; j0 < N; j0 += TPB) {
        int j = j0 + (int)threadIdx.x;
        unsigned hit = __ballot_sync(0xffffffffu, j < N && inp[j] == tok);
        __syncthreads(); /* the previous tile's masks are read */
        if (threadIdx.x % 32 == 0) masks[threadIdx.x / 32] = hit;
        __syncthreads();
        for (int w = 0; w < TPB / 32; w++) {
            for (unsigned mk = masks[w]; mk; mk &= mk - 1) {
                size_t row = (size_t)(j0 + w * 32 + __ffs(mk) - 1) * C;
#pragma unroll
                for (int k = 0; k < ENC_MAXK; k++) {
                    int c = threadIdx.x + k * TPB;
                    if (c < C) acc[k] += d.p > 0 ? dout[row + c] * cu_drop(d, row + c) : dout[row + c];
                }
            }
        }
    }
#pragma unroll
    for (int k = 0; k < ENC_MAXK; k++) {
        int c = threadIdx.x + k * TPB;
        if (c < C) g[c] = acc[k];
    }
}

/* dwpe[t, c] += dout[b, t, c] over b in order: one thread per (t, c). */
__global__ void k_encoder_backward_wpe(float *dwpe, const float *dout, int B, int T, int C, Dropout d) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)T * C) return;
    size_t t = i / C, c = i % C;
    float g = dwpe[i];
    for (int b = 0; b < B; b++) {
        size_t idx = ((size_t)b * T + t) * C + c;
        g += d.p > 0 ? dout[idx] * cu_drop(d, idx) : dout[idx];
    }
    dwpe[i] = g;
}

static int enc_check(int C) {
    if (C > ENC_MAXK * TPB) {
        cu_fail(ST_ERR_INPUT, "CUDA encoder_backward: expected at most %d channels, found %d", ENC_MAXK * TPB, C);
        return 0;
    }
    return 1;
}

void cu_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp, const int32_t *pos, int B,
                         int T, int C, Dropout d, int nt) {
    if (!cu_ready() || !enc_check(C) || (size_t)B * T * C == 0) return; /* += of nothing */
    k_encoder_backward_wte<<<B * T, TPB, 0, cu_stream()>>>(dwte, dout, inp, B * T, C, d, 0, 0);
    CU_LAUNCHED("encoder_backward(wte)");
    if (pos) {
        k_encoder_backward_wte<<<B * T, TPB, 0, cu_stream()>>>(dwpe, dout, pos, B * T, C, d, 0, 0);
    } else {
        k_encoder_backward_wpe<<<cu_blocks((size_t)T * C, TPB), TPB, 0, cu_stream()>>>(dwpe, dout, B, T, C, d);
    }
    CU_LAUNCHED("encoder_backward(wpe)");
}

__global__ void k_encoder_forward_vp(float *out, const int32_t *inp, const int32_t *pos, const float *wte,
                                     const float *wpe, int T, int C, size_t n, int v0, int vn) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    size_t bt = i / C;
    int c = (int)(i % C), v = inp[bt] - v0;
    float e = v >= 0 && v < vn ? wte[(size_t)v * C + c] : 0.0f;
    out[i] = wpe ? e + wpe[tok_pos(pos, bt, T) * C + c] : e;
}

void cu_encoder_forward_vp(float *out, const int32_t *inp, const int32_t *pos, const float *wte, const float *wpe,
                           int B, int T, int C, int v0, int vn, int nt) {
    size_t n = (size_t)B * T * C;
    if (!cu_ready() || n == 0) return;
    k_encoder_forward_vp<<<cu_blocks(n, TPB), TPB, 0, cu_stream()>>>(out, inp, pos, wte, wpe, T, C, n, v0, vn);
    CU_LAUNCHED("encoder_forward_vp");
}

void cu_encoder_backward_vp(float *dwte, float *dwpe, const float *dout, const int32_t *inp, const int32_t *pos,
                            int B, int T, int C, int v0, int vn, int nt) {
    if (!cu_ready() || !enc_check(C) || (size_t)B * T * C == 0) return; /* += of nothing */
    Dropout none = {0};
    if (vn > 0) {
        k_encoder_backward_wte<<<B * T, TPB, 0, cu_stream()>>>(dwte, dout, inp, B * T, C, none, v0, vn);
        CU_LAUNCHED("encoder_backward_vp(wte)");
    }
    if (dwpe && pos) {
        k_encoder_backward_wte<<<B * T, TPB, 0, cu_stream()>>>(dwpe, dout, pos, B * T, C, none, 0, 0);
        CU_LAUNCHED("encoder_backward_vp(wpe)");
    } else if (dwpe) {
        k_encoder_backward_wpe<<<cu_blocks((size_t)T * C, TPB), TPB, 0, cu_stream()>>>(dwpe, dout, B, T, C, none);
        CU_LAUNCHED("encoder_backward_vp(wpe)");
    }
}

/* ------------------------------------------------------------------------------------------ */
/* LayerNorm and RMSNorm, forward                                                             */
/* ------------------------------------------------------------------------------------------ */

/* One warp per row. With a (non-NULL), the row is first res = a + drop(b) (written to res, which
 * may alias a: each lane reads then writes only its own elements). rms: RMSNorm (no mean, no bias).
 * Exactly one of out, out_lp is non-NULL. */
__global__ void k_norm_forward(float *res, float *out, uint16_t *out_lp, float *mean, float *rstd, const float *a,
                               const float *b, Dropout d, const float *inp, const float *w, const float *bias, int N,
                               int C, float eps, int rms) {
    int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    size_t o = (size_t)row * C;
    const float *x = inp ? inp + o : res + o;
    if (a) {
        for (int c = lane; c < C; c += 32) {
            float bv = b[o + c];
            if (d.p > 0) bv *= cu_drop(d, o + c);
            res[o + c] = a[o + c] + bv;
        }
        __syncwarp();
    }
    float m = 0.0f, r;
    if (rms) {
        float s = 0;
        for (int c = lane; c < C; c += 32) s += x[c] * x[c];
        s = cu_warp_sum(s);
        r = 1.0f / sqrtf(s / C + eps);
    } else {
        float s = 0;
        for (int c = lane; c < C; c += 32) s += x[c];
        m = cu_warp_sum(s) / C;
        float v = 0;
        for (int c = lane; c < C; c += 32) v += (x[c] - m) * (x[c] - m);
        v = cu_warp_sum(v);
        r = 1.0f / sqrtf(v / C + 1e-5f);
    }
    for (int c = lane; c < C; c += 32) {
        float y = rms ? x[c] * r * w[c] : (x[c] - m) * r * w[c] + bias[c];
        if (out_lp) out_lp[o + c] = cu_bf16(y);
        else out[o + c] = y;
    }
    if (lane == 0) {
        if (!rms) mean[row] = m;
        rstd[row] = r;
    }
}

static void norm_forward(float *res, float *out, uint16_t *out_lp, float *mean, float *rstd, const float *a,
                         const float *b, Dropout d, const float *inp, const float *w, const float *bias, int N, int C,
                         float eps, int rms, const char *name) {
    if (!cu_ready() || N == 0) return;
    k_norm_forward<<<cu_blocks((size_t)N, ROWS_PER_BLOCK), 32 * ROWS_PER_BLOCK, 0, cu_stream()>>>(
        res, out, out_lp, mean, rstd, a, b, d, inp, w, bias, N, C, eps, rms);
    CU_LAUNCHED(name);
}

static const Dropout NODROP = {0};

void cu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                          int N, int C, int nt) {
    norm_forward(NULL, out, NULL, mean, rstd, NULL, NULL, NODROP, inp, w, b, N, C, 0, 0, "layernorm_forward");
}
void cu_layernorm_forward_bf16(uint16_t *out, float *mean, float *rstd, const float *inp, const float *w,
                               const float *b, int N, int C, int nt) {
    norm_forward(NULL, NULL, out, mean, rstd, NULL, NULL, NODROP, inp, w, b, N, C, 0, 0, "layernorm_forward_bf16");
}
void cu_residual_layernorm_forward(float *res, float *out, float *mean, float *rstd, const float *a, const float *b,
                                   Dropout d, const float *w, const float *bias, int N, int C, int nt) {
    norm_forward(res, out, NULL, mean, rstd, a, b, d, NULL, w, bias, N, C, 0, 0, "residual_layernorm_forward");
}
void cu_residual_layernorm_forward_bf16(float *res, uint16_t *out, float *mean, float *rstd, const float *a,
                                        const float *b, Dropout d, const float *w, const float *bias, int N, int C,
                                        int nt) {
    norm_forward(res, NULL, out, mean, rstd, a, b, d, NULL, w, bias, N, C, 0, 0, "residual_layernorm_forward_bf16");
}
void cu_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C, float eps, int nt) {
    norm_forward(NULL, out, NULL, NULL, rstd, NULL, NULL, NODROP, inp, w, NULL, N, C, eps, 1, "rmsnorm_forward");
}
void cu_rmsnorm_forward_bf16(uint16_t *out, float *rstd, const float *inp, const float *w, int N, int C, float eps,
                             int nt) {
    norm_forward(NULL, NULL, out, NULL, rstd, NULL, NULL, NODROP, inp, w, NULL, N, C, eps, 1, "rmsnorm_forward_bf16");
}
void cu_residual_rmsnorm_forward(float *res, float *out, float *rstd, const float *a, const float *b, Dropout d,
                                 const float *w, int N, int C, float eps, int nt) {
    norm_forward(res, out, NULL, NULL, rstd, a, b, d, NULL, w, NULL, N, C, eps, 1, "residual_rmsnorm_forward");
}
void cu_residual_rmsnorm_forward_bf16(float *res, uint16_t *out, float *rstd, const float *a, const float *b,
                                      Dropout d, const float *w, int N, int C, float eps, int nt) {
    norm_forward(res, NULL, out, NULL, rstd, a, b, d, NULL, w, NULL, N, C, eps, 1, "residual_rmsnorm_forward_bf16");
}

/* ------------------------------------------------------------------------------------------ */
/* LayerNorm and RMSNorm, backward                                                            */
/* ------------------------------------------------------------------------------------------ */

/* dinp += per row (one warp per row). With n = (x − mean)·rstd (rms: x·rstd, mean 0),
 * dn = dout·w: LayerNorm dx = (dn − mean(dn) − n·mean(dn·n))·rstd; RMSNorm dx = (dn − n·mean(dn·n))·rstd. */
__global__ void k_norm_backward_dx(float *dinp, const float *dout, const float *inp, const float *w, const float *mean,
                                   const float *rstd, int N, int C, int rms) {
    int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    size_t o = (size_t)row * C;
    float m = rms ? 0.0f : mean[row], r = rstd[row], sa = 0, sb = 0;
    for (int c = lane; c < C; c += 32) {
        float n = (inp[o + c] - m) * r, dn = dout[o + c] * w[c];
        sa += dn;
        sb += dn * n;
    }
    float a = rms ? 0.0f : cu_warp_sum(sa) / C, bs = cu_warp_sum(sb) / C;
    for (int c = lane; c < C; c += 32) {
        float n = (inp[o + c] - m) * r;
        dinp[o + c] += (dout[o + c] * w[c] - a - n * bs) * r;
    }
}

/* Per 64-row chunk k and column c: scratch[k·stride + c] = Σ dout·n, and for LayerNorm
 * scratch[k·stride + C + c] = Σ dout, rows in order. */
__global__ void k_norm_backward_partial(float *scratch, const float *dout, const float *inp, const float *mean,
                                        const float *rstd, int N, int C, int rms) {
    int c = blockIdx.x * blockDim.x + threadIdx.x, k = blockIdx.y;
    if (c >= C) return;
    int i1 = (k + 1) * KERNEL_ROW_CHUNK < N ? (k + 1) * KERNEL_ROW_CHUNK : N;
    float pw = 0, pb = 0;
    for (int i = k * KERNEL_ROW_CHUNK; i < i1; i++) {
        float g = dout[(size_t)i * C + c];
        float n = (inp[(size_t)i * C + c] - (rms ? 0.0f : mean[i])) * rstd[i];
        pw += g * n;
        pb += g;
    }
    size_t stride = rms ? (size_t)C : 2 * (size_t)C;
    scratch[k * stride + c] = pw;
    if (!rms) scratch[k * stride + C + c] = pb;
}

/* dw (and db) (+)= the chunks' partial sums, in chunk order. */
__global__ void k_norm_backward_sum(float *dw, float *db, const float *scratch, int nchunk, int C, int acc, int rms) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    size_t stride = rms ? (size_t)C : 2 * (size_t)C;
    float sw = 0, sb = 0;
    for (int k = 0; k < nchunk; k++) {
        sw += scratch[k * stride + c];
        if (!rms) sb += scratch[k * stride + C + c];
    }
    if (dw) dw[c] = acc ? dw[c] + sw : sw; /* NULL: a frozen weight, as the CPU's (LoRA) */
    if (!rms && db) db[c] = acc ? db[c] + sb : sb;
}

static void norm_backward(float *dinp, float *dw, float *db, float *scratch, const float *dout, const float *inp,
                          const float *w, const float *mean, const float *rstd, int N, int C, int acc, int rms) {
    if (!cu_ready() || C == 0) return;
    int nchunk = (N + KERNEL_ROW_CHUNK - 1) / KERNEL_ROW_CHUNK;
    if (nchunk > 65535) { /* the chunks are gridDim.y (limit 65535) */
        cu_fail(ST_ERR_INPUT, "CUDA norm backward: expected at most %d rows, found %d", 65535 * KERNEL_ROW_CHUNK, N);
        return;
    }
    cudaStream_t s = cu_stream();
    if (N > 0) { /* 0 rows: no dx, no partial sums; dw, db still get their empty sum (acc = 0) */
        k_norm_backward_dx<<<cu_blocks((size_t)N, ROWS_PER_BLOCK), 32 * ROWS_PER_BLOCK, 0, s>>>(dinp, dout, inp, w,
                                                                                              mean, rstd, N, C, rms);
        CU_LAUNCHED("norm_backward(dx)");
        k_norm_backward_partial<<<dim3(cu_blocks((size_t)C, TPB), nchunk), TPB, 0, s>>>(scratch, dout, inp, mean, rstd,
                                                                                       N, C, rms);
        CU_LAUNCHED("norm_backward(partial)");
    }
    k_norm_backward_sum<<<cu_blocks((size_t)C, TPB), TPB, 0, s>>>(dw, db, scratch, nchunk, C, acc, rms);
    CU_LAUNCHED("norm_backward(sum)");
}

void cu_layernorm_backward(float *dinp, float *dw, float *db, float *scratch, const float *dout, const float *inp,
                           const float *w, const float *mean, const float *rstd, int N, int C, int acc, int nt) {
    norm_backward(dinp, dw, db, scratch, dout, inp, w, mean, rstd, N, C, acc, 0);
}

void cu_rmsnorm_backward(float *dinp, float *dw, float *scratch, const float *dout, const float *inp, const float *w,
                         const float *rstd, int N, int C, int acc, int nt) {
    norm_backward(dinp, dw, NULL, scratch, dout, inp, w, NULL, rstd, N, C, acc, 1);
}

/* ------------------------------------------------------------------------------------------ */
/* RoPE, SwiGLU, GELU                                                                         */
/* ------------------------------------------------------------------------------------------ */

/* The table is the CPU's: angles in double on the host, rounded to fp32 once, then copied. */
void cu_rope_table(float *cs, int T, int hs, const double *inv_freq) {
    if (!cu_ready()) return;
    size_t n = (size_t)T * hs;
    float *h = (float *)malloc(n * sizeof(float));
    if (!h) {
        cu_fail(ST_ERR_RUNTIME, "CUDA rope_table: out of host memory (%zu floats)", n);
        return;
    }
    rope_table(h, T, hs, inv_freq);
    CU_TRY(cudaMemcpy(cs, h, n * sizeof(float), cudaMemcpyHostToDevice));
    free(h);
}

/* One thread per (row, head of the NH + KV rotated, pair i < hs/2). */
__global__ void k_rope(float *qkv, const float *cs, const int32_t *pos, int T, int NH, int KV, int hs, int pos0,
                       float sign, size_t n) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n) return;
    int half = hs / 2, nh = NH + KV;
    int i = (int)(idx % half);
    size_t rest = idx / half;
    int h = (int)(rest % nh);
    size_t bt = rest / nh;
    const float *co = cs + (pos0 + tok_pos(pos, bt, T)) * hs, *si = co + half;
    float *x = qkv + bt * (size_t)(NH + 2 * KV) * hs + (size_t)h * hs;
    float a = x[i], b = x[i + half], s = sign * si[i];
    x[i] = a * co[i] - b * s;
    x[i + half] = b * co[i] + a * s;
}

static void rope_apply(float *qkv, const float *cs, const int32_t *pos, int B, int T, int NH, int KV, int hs,
                       int pos0, float sign) {
    size_t n = (size_t)B * T * (NH + KV) * (hs / 2);
    if (!cu_ready() || n == 0) return;
    k_rope<<<cu_blocks(n, TPB), TPB, 0, cu_stream()>>>(qkv, cs, pos, T, NH, KV, hs, pos0, sign, n);
    CU_LAUNCHED("rope");
}
void cu_rope_forward(float *qkv, const float *cs, const int32_t *pos, int B, int T, int NH, int KV, int hs, int pos0,
                     int nt) {
    rope_apply(qkv, cs, pos, B, T, NH, KV, hs, pos0, 1.0f);
}
void cu_rope_backward(float *dqkv, const float *cs, const int32_t *pos, int B, int T, int NH, int KV, int hs,
                      int pos0, int nt) {
    rope_apply(dqkv, cs, pos, B, T, NH, KV, hs, pos0, -1.0f);
}

__device__ __forceinline__ float silu_at(float g) { return g / (1.0f + expf(-g)); }

/* mode 0: fp32 out; 1: bf16 out. */
__global__ void k_swiglu_forward(float *out, uint16_t *out_lp, const float *h, int F, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    size_t r = i / F, j = i % F;
    const float *g = h + r * 2 * F;
    float y = silu_at(g[j]) * g[F + j];
    if (out_lp) out_lp[i] = cu_bf16(y);
    else out[i] = y;
}

__global__ void k_swiglu_backward(float *dh, uint16_t *dh_lp, const float *dout, const float *h, int F, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    size_t r = i / F, j = i % F;
    float g = h[r * 2 * F + j], u = h[r * 2 * F + F + j], d = dout[i];
    float s = 1.0f / (1.0f + expf(-g));
    float dg = d * u * (s * (1.0f + g * (1.0f - s))), du = d * (g * s);
    if (dh_lp) dh_lp[r * 2 * F + j] = cu_bf16(dg), dh_lp[r * 2 * F + F + j] = cu_bf16(du);
    else dh[r * 2 * F + j] = dg, dh[r * 2 * F + F + j] = du;
}

void cu_swiglu_forward(float *out, const float *h, int N, int F, int nt) {
    size_t n = (size_t)N * F;
    if (!cu_ready() || n == 0) return;
    k_swiglu_forward<<<cu_blocks(n, TPB), TPB, 0, cu_stream()>>>(out, NULL, h, F, n);
    CU_LAUNCHED("swiglu_forward");
}
void cu_swiglu_forward_bf16(uint16_t *out, const float *h, int N, int F, int nt) {
    size_t n = (size_t)N * F;
    if (!cu_ready() || n == 0) return;
    k_swiglu_forward<<<cu_blocks(n, TPB), TPB, 0, cu_stream()>>>(NULL, out, h, F, n);
    CU_LAUNCHED("swiglu_forward_bf16");
}
void cu_swiglu_backward(float *dh, const float *dout, const float *h, int N, int F, int nt) {
    size_t n = (size_t)N * F;
    if (!cu_ready() || n == 0) return;
    k_swiglu_backward<<<cu_blocks(n, TPB), TPB, 0, cu_stream()>>>(dh, NULL, dout, h, F, n);
    CU_LAUNCHED("swiglu_backward");
}
void cu_swiglu_backward_bf16(uint16_t *dh, const float *dout, const float *h, int N, int F, int nt) {
    size_t n = (size_t)N * F;
    if (!cu_ready() || n == 0) return;
    k_swiglu_backward<<<cu_blocks(n, TPB), TPB, 0, cu_stream()>>>(NULL, dh, dout, h, F, n);
    CU_LAUNCHED("swiglu_backward_bf16");
}

#define GELU_S 0.7978845608028654f /* sqrt(2/pi) */

__device__ __forceinline__ float gelu_at(float x) {
    return 0.5f * x * (1.0f + tanhf(GELU_S * (x + 0.044715f * x * x * x)));
}
__device__ __forceinline__ float gelu_grad_at(float x) {
    float t = tanhf(GELU_S * (x + 0.044715f * x * x * x));
    float sech2 = 1.0f - t * t;
    return 0.5f * (1.0f + t) + 0.5f * x * sech2 * GELU_S * (1.0f + 3.0f * 0.044715f * x * x);
}

__global__ void k_gelu_forward(float *out, uint16_t *out_lp, const float *inp, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float y = gelu_at(inp[i]);
    if (out_lp) out_lp[i] = cu_bf16(y);
    else out[i] = y;
}
__global__ void k_gelu_backward(float *dinp, const float *dout, const float *inp, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dinp[i] = dout[i] * gelu_grad_at(inp[i]);
}

void cu_gelu_forward(float *out, const float *inp, size_t n, int nt) {
    if (!cu_ready() || n == 0) return;
    k_gelu_forward<<<cu_blocks(n, TPB), TPB, 0, cu_stream()>>>(out, NULL, inp, n);
    CU_LAUNCHED("gelu_forward");
}
void cu_gelu_forward_bf16(uint16_t *out, const float *inp, size_t n, int nt) {
    if (!cu_ready() || n == 0) return;
    k_gelu_forward<<<cu_blocks(n, TPB), TPB, 0, cu_stream()>>>(NULL, out, inp, n);
    CU_LAUNCHED("gelu_forward_bf16");
}
void cu_gelu_backward(float *dinp, const float *dout, const float *inp, size_t n, int nt) {
    if (!cu_ready() || n == 0) return;
    k_gelu_backward<<<cu_blocks(n, TPB), TPB, 0, cu_stream()>>>(dinp, dout, inp, n);
    CU_LAUNCHED("gelu_backward");
}

/* ------------------------------------------------------------------------------------------ */
/* Column sums (bias gradients), fused with the bf16 cast or GELU's backward                  */
/* ------------------------------------------------------------------------------------------ */

enum { COLSUM_PLAIN, COLSUM_CAST, COLSUM_GELU };

/* Pass 1, per chunk k of R rows and column j: v = src (or src · gelu'(inp)); dst = bf16(v) when
 * dst is set; part[k·OC + j] = Σ v over the chunk's rows in order. Coalesced across columns. */
__global__ void k_colsum_partial(float *part, uint16_t *dst, const float *src, const float *inp, int N, int OC, int R,
                                 int mode) {
    int j = blockIdx.x * blockDim.x + threadIdx.x, k = blockIdx.y;
    if (j >= OC) return;
    int i1 = (k + 1) * R < N ? (k + 1) * R : N;
    float s = 0;
    for (int i = k * R; i < i1; i++) {
        size_t o = (size_t)i * OC + j;
        float v = src[o];
        if (mode == COLSUM_GELU) v *= gelu_grad_at(inp[o]);
        if (mode != COLSUM_PLAIN) dst[o] = cu_bf16(v);
        s += v;
    }
    part[(size_t)k * OC + j] = s;
}

__global__ void k_colsum_final(float *colsum, const float *part, int nchunk, int OC, int acc) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= OC) return;
    float s = 0;
    for (int k = 0; k < nchunk; k++) s += part[(size_t)k * OC + j];
    colsum[j] = acc ? colsum[j] + s : s;
}

static void colsum_pass(int mode, uint16_t *dst, float *colsum, const float *src, const float *inp, int N, int OC,
                        int acc) {
    if (!cu_ready() || OC == 0) return;
    size_t cap;
    float *part = cu_reduce_scratch(&cap);
    /* 64-row chunks, or longer ones when the partial sums would not fit the private scratch. */
    int R = KERNEL_ROW_CHUNK;
    while ((size_t)((N + R - 1) / R) * OC > cap) R *= 2;
    int nchunk = (N + R - 1) / R;
    if (nchunk > 65535) {
        cu_fail(ST_ERR_INPUT, "CUDA column sum: %d row chunks exceed the grid (N %d, OC %d)", nchunk, N, OC);
        return;
    }
    cudaStream_t s = cu_stream();
    if (nchunk > 0) { /* 0 rows: the final pass writes the empty sum (acc = 0) */
        k_colsum_partial<<<dim3(cu_blocks((size_t)OC, TPB), nchunk), TPB, 0, s>>>(part, dst, src, inp, N, OC, R, mode);
        CU_LAUNCHED("colsum(partial)");
    }
    k_colsum_final<<<cu_blocks((size_t)OC, TPB), TPB, 0, s>>>(colsum, part, nchunk, OC, acc);
    CU_LAUNCHED("colsum(final)");
}

void cu_colsum(float *colsum, const float *src, int N, int OC, int acc) {
    colsum_pass(COLSUM_PLAIN, NULL, colsum, src, NULL, N, OC, acc);
}
/* sums (the CPU kernels' partial sums) is not used: the partial sums go to cu_reduce_scratch. */
void cu_cast_bf16_colsum(uint16_t *dst, float *colsum, float *sums, const float *src, int N, int OC, int acc, int nt) {
    (void)sums;
    colsum_pass(COLSUM_CAST, dst, colsum, src, NULL, N, OC, acc);
}
void cu_gelu_backward_bf16(uint16_t *dinp_lp, float *colsum, float *sums, const float *dout, const float *inp, int N,
                           int OC, int acc, int nt) {
    (void)sums;
    colsum_pass(COLSUM_GELU, dinp_lp, colsum, dout, inp, N, OC, acc);
}

/* ------------------------------------------------------------------------------------------ */
/* Elementwise: residual, dropout, casts, bias, scale                                         */
/* ------------------------------------------------------------------------------------------ */

__global__ void k_residual(float *out, const float *a, const float *b, size_t n, Dropout d) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + (d.p > 0 ? b[i] * cu_drop(d, i) : b[i]);
}
__global__ void k_dropout_backward(float *out, const float *dout, size_t n, Dropout d) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = dout[i] * cu_drop(d, i);
}
__global__ void k_cast_bf16(uint16_t *dst, const float *src, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = cu_bf16(src[i]);
}
__global__ void k_cast_fp16(uint16_t *dst, const float *src, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = cu_fp16(src[i]);
}
__global__ void k_round_fp16(float *dst, const float *src, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = __half2float(__float2half_rn(src[i]));
}
__global__ void k_widen_fp16(float *dst, const uint16_t *src, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = __half2float(__ushort_as_half(src[i]));
}
__global__ void k_bias_add_rows(float *x, const float *bias, int C, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += bias[i % C];
}
__global__ void k_scale(float *x, size_t n, float a) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
__global__ void k_add_or_set(float *dst, const float *src, size_t n, int acc) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = acc ? dst[i] + src[i] : src[i];
}

#define ELEMENTWISE(name, kernel, n, ...)                                                 \
    do {                                                                                  \
        if (!cu_ready() || (n) == 0) return;                                              \
        kernel<<<cu_blocks((n), TPB), TPB, 0, cu_stream()>>>(__VA_ARGS__);                \
        CU_LAUNCHED(name);                                                                \
    } while (0)

void cu_residual_forward(float *out, const float *a, const float *b, size_t n, Dropout d, int nt) {
    ELEMENTWISE("residual_forward", k_residual, n, out, a, b, n, d);
}
void cu_dropout_backward(float *out, const float *dout, size_t n, Dropout d, int nt) {
    ELEMENTWISE("dropout_backward", k_dropout_backward, n, out, dout, n, d);
}
void cu_cast_bf16(uint16_t *dst, const float *src, size_t n, int nt) {
    ELEMENTWISE("cast_bf16", k_cast_bf16, n, dst, src, n);
}
void cu_cast_fp16(uint16_t *dst, const float *src, size_t n, int nt) {
    ELEMENTWISE("cast_fp16", k_cast_fp16, n, dst, src, n);
}
void cu_round_fp16(float *dst, const float *src, size_t n) { ELEMENTWISE("round_fp16", k_round_fp16, n, dst, src, n); }
void cu_widen_fp16(float *dst, const uint16_t *src, size_t n) {
    ELEMENTWISE("widen_fp16", k_widen_fp16, n, dst, src, n);
}
void cu_bias_add_rows(float *x, const float *bias, int N, int C, int nt) {
    size_t n = (size_t)N * C;
    ELEMENTWISE("bias_add_rows", k_bias_add_rows, n, x, bias, C, n);
}
void cu_scale_inplace(float *x, size_t n, float a, int nt) { ELEMENTWISE("scale_inplace", k_scale, n, x, n, a); }
void cu_add_or_set(float *dst, const float *src, size_t n, int acc) {
    ELEMENTWISE("add_or_set", k_add_or_set, n, dst, src, n, acc);
}

/* ------------------------------------------------------------------------------------------ */
/* The LM head's softmax and cross-entropy                                                    */
/* ------------------------------------------------------------------------------------------ */

/* Block-wide reduction of one value per thread (TPB threads); every thread gets the result. */
__device__ float block_reduce(float v, int is_max) {
    __shared__ float sh[TPB / 32];
    __shared__ float res;
    int lane = threadIdx.x % 32, wid = threadIdx.x / 32;
    v = is_max ? cu_warp_max(v) : cu_warp_sum(v);
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    if (wid == 0) {
        float x = lane < TPB / 32 ? sh[lane] : (is_max ? -INFINITY : 0.0f);
        x = is_max ? cu_warp_max(x) : cu_warp_sum(x);
        if (lane == 0) res = x;
    }
    __syncthreads();
    float r = res;
    __syncthreads();
    return r;
}

/* One block per row: max, Σ exp, loss = lse − logit[target]; with grad the row becomes
 * (softmax − onehot)·dscale over the V real columns (0 for a masked row). */
__global__ void k_head_softmax(float *logits, float *losses, const int32_t *targets, int V, int ld, float dscale,
                               int grad, float *probs) {
    int i = blockIdx.x;
    float *l = logits + (size_t)i * ld;
    int t = targets[i];
    float mx = -INFINITY;
    for (int v = threadIdx.x; v < V; v += TPB) mx = fmaxf(mx, l[v]);
    mx = block_reduce(mx, 1);
    float s = 0;
    for (int v = threadIdx.x; v < V; v += TPB) s += expf(l[v] - mx);
    s = block_reduce(s, 0);
    float lse = mx + logf(s);
    if (threadIdx.x == 0) losses[i] = t >= 0 ? lse - l[t] : 0.0f;
    if (probs && i == 0)
        for (int v = threadIdx.x; v < V; v += TPB) probs[v] = expf(l[v] - lse);
    if (!grad) return;
    __syncthreads(); /* l[t] was read above before it is overwritten */
    float inv = dscale / s;
    /* The label's p − dscale from p rounded to fp32 first, as the CPU's (label_grad_bf16 keeps that
     * rounding with a volatile): __fmul_rn is never fused, where a plain product and difference may
     * be contracted into one FMA by ptxas (PTX's mul.f32 without .rn), which the bf16 rounding of
     * the gradient after it can turn into a different bf16. */
    for (int v = threadIdx.x; v < V; v += TPB)
        l[v] = t < 0 ? 0.0f : __fmul_rn(expf(l[v] - mx), inv) - (v == t ? dscale : 0.0f);
}

void cu_head_softmax(float *logits, float *losses, const int32_t *targets, int m, int V, int ld, float dscale,
                     int grad, float *probs) {
    if (!cu_ready() || m == 0) return;
    k_head_softmax<<<m, TPB, 0, cu_stream()>>>(logits, losses, targets, V, ld, dscale, grad, probs);
    CU_LAUNCHED("head_softmax");
}
