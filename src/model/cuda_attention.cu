/* cuda_attention.cu — causal grouped-query attention on the GPU, flash style (kernels.h's
 * attention_gqa_forward/backward): tiles of keys in shared memory, an online softmax, only each
 * row's log-sum-exp saved; backward recomputes the probabilities from it. No T×T matrix is ever
 * stored, and the `scratch` argument is not used (the layout's CPU scratch stays allocated).
 *
 * Document masking (pos non-NULL; kernels.h): query t sees keys [t − pos[b·T + t], t]; the key
 * loop skips tiles wholly before that start, and masked scores are −inf as those above the diagonal.
 *
 * Layout as the CPU: qkv rows (B·T) of (NH + 2·KV)·hs floats (query heads, key heads, value heads);
 * query head h reads KV head h / (NH/KV). hs <= 128 (ATT_EMAX · 32).
 *
 * Work split. Forward and dQ: one warp per query row, ATT_Q rows per block, key tiles of ATT_K
 * (each lane one key of the tile for the scores, then each lane its hs/32 output dimensions). dK,
 * dV: one warp per key row of a KV head, walking the group's query heads in order and their query
 * rows in order, so each dK, dV element is one thread's sum in a fixed order: no atomics, the same
 * bits every run. The probabilities' normaliser D_i = Σ dY_i·Y_i is recomputed where needed.
 *
 * lowp (bf16) rounds what the CPU rounds before its GEMMs: Q, K, V, dY, the (dropped)
 * probabilities and dS; products accumulate in fp32, the softmax statistics stay fp32.
 *
 * Performance: lowp's forward, dQ and dK/dV run on tensor cores (k_att_forward_tc,
 * k_att_backward_dq_tc, k_att_backward_dkv_tc, below) for head sizes that are multiples of 16; the
 * fp32 path is scalar fp32 FMAs from shared memory. bench/gpu_kernels times both (an A/B). */
#include <cuda_bf16.h>
#include <math.h>
#include <mma.h>
#include <stdlib.h>

#include "model/cuda_common.cuh"

using namespace nvcuda;

#define ATT_Q 8    /* query (or key) rows per block: one warp each */
#define ATT_K 32   /* keys (or queries) per shared-memory tile: one per lane */
#define ATT_EMAX 4 /* output dimensions per lane: hs <= 128 */

static __device__ __forceinline__ float rnd(float x, int lowp) { return lowp ? cu_round_bf16(x) : x; }

__global__ void k_att_forward(float *out, float *lse, const float *qkv, const int32_t *pos, int T, int NH, int KV,
                              int hs, float scale, Dropout d, int lowp) {
    extern __shared__ float sm[];
    int hsp = hs + 1; /* padded K rows: lane j reads row j without bank conflicts */
    float *Ks = sm, *Vs = Ks + ATT_K * hsp, *Qs = Vs + ATT_K * hs;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int bh = blockIdx.y, b = bh / NH, h = bh % NH, kh = h / (NH / KV);
    size_t ld = (size_t)(NH + 2 * KV) * hs, C = (size_t)NH * hs;
    int row = blockIdx.x * ATT_Q + warp, last = min(T - 1, (int)blockIdx.x * ATT_Q + ATT_Q - 1);
    const float *base = qkv + (size_t)b * T * ld;
    uint64_t bhg = (uint64_t)b * (d.heads ? d.heads : NH) + d.head0 + h;
    float *q = Qs + warp * hs;
    int start = pos && row < T ? row - pos[(size_t)b * T + row] : 0; /* the row's first visible key */
    if (row < T)
        for (int x = lane; x < hs; x += 32) q[x] = rnd(base[(size_t)row * ld + (size_t)h * hs + x], lowp);
    float m = -INFINITY, l = 0, o[ATT_EMAX] = {0, 0, 0, 0};
    for (int k0 = 0; k0 <= last; k0 += ATT_K) {
        __syncthreads();
        for (int idx = threadIdx.x; idx < ATT_K * hs; idx += blockDim.x) {
            int j = idx / hs, x = idx % hs, key = k0 + j;
            float kv = 0, vv = 0;
            if (key < T) {
                kv = base[(size_t)key * ld + (size_t)(NH + kh) * hs + x];
                vv = base[(size_t)key * ld + (size_t)(NH + KV + kh) * hs + x];
            }
            Ks[j * hsp + x] = rnd(kv, lowp);
            Vs[j * hs + x] = rnd(vv, lowp);
        }
        __syncthreads();
        if (row >= T || k0 > row || k0 + ATT_K <= start) continue; /* the whole warp: row is per warp */
        int key = k0 + lane, jn = min(ATT_K, row - k0 + 1);
        int vis = key <= row && key >= start;
        float s = -INFINITY;
        if (vis) {
            float acc = 0;
            for (int x = 0; x < hs; x++) acc += q[x] * Ks[lane * hsp + x];
            s = acc * scale;
        }
        float bm = fmaxf(m, cu_warp_max(s));
        float corr = m == -INFINITY ? 0.0f : expf(m - bm);
        float p = vis ? expf(s - bm) : 0.0f;
        l = l * corr + cu_warp_sum(p);
        m = bm;
        float pd = p;
        if (d.p > 0 && vis) pd *= cu_drop(d, bhg * T * T + (uint64_t)row * T + key);
        pd = rnd(pd, lowp);
#pragma unroll
        for (int e = 0; e < ATT_EMAX; e++) o[e] *= corr;
        for (int j = 0; j < jn; j++) {
            float pj = __shfl_sync(0xffffffffu, pd, j);
#pragma unroll
            for (int e = 0; e < ATT_EMAX; e++) {
                int x = lane + 32 * e;
                if (x < hs) o[e] += pj * Vs[j * hs + x];
            }
        }
    }
    if (row >= T) return;
    float inv = 1.0f / l;
    float *y = out + ((size_t)b * T + row) * C + (size_t)h * hs;
#pragma unroll
    for (int e = 0; e < ATT_EMAX; e++) {
        int x = lane + 32 * e;
        if (x < hs) y[x] = o[e] * inv;
    }
    if (lane == 0) lse[(size_t)bh * T + row] = m + logf(l);
}

/* dQ rows (overwritten): one warp per query row. */
__global__ void k_att_backward_dq(float *dqkv, const float *dout, const float *qkv, const float *out, const float *lse,
                                  const int32_t *pos, int T, int NH, int KV, int hs, float scale, Dropout d,
                                  int lowp) {
    extern __shared__ float sm[];
    int hsp = hs + 1;
    float *Ks = sm, *Vs = Ks + ATT_K * hsp, *Qs = Vs + ATT_K * hsp, *dYs = Qs + ATT_Q * hs;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int bh = blockIdx.y, b = bh / NH, h = bh % NH, kh = h / (NH / KV);
    size_t ld = (size_t)(NH + 2 * KV) * hs, C = (size_t)NH * hs;
    int row = blockIdx.x * ATT_Q + warp, last = min(T - 1, (int)blockIdx.x * ATT_Q + ATT_Q - 1);
    const float *base = qkv + (size_t)b * T * ld;
    uint64_t bhg = (uint64_t)b * (d.heads ? d.heads : NH) + d.head0 + h;
    float *q = Qs + warp * hs, *dy = dYs + warp * hs;
    int start = pos && row < T ? row - pos[(size_t)b * T + row] : 0;
    float D = 0, L = 0;
    if (row < T) {
        const float *g = dout + ((size_t)b * T + row) * C + (size_t)h * hs;
        const float *yv = out + ((size_t)b * T + row) * C + (size_t)h * hs;
        float s = 0;
        for (int x = lane; x < hs; x += 32) {
            q[x] = rnd(base[(size_t)row * ld + (size_t)h * hs + x], lowp);
            dy[x] = rnd(g[x], lowp);
            s += g[x] * yv[x];
        }
        D = cu_warp_sum(s);
        L = lse[(size_t)bh * T + row];
    }
    float dq[ATT_EMAX] = {0, 0, 0, 0};
    for (int k0 = 0; k0 <= last; k0 += ATT_K) {
        __syncthreads();
        for (int idx = threadIdx.x; idx < ATT_K * hs; idx += blockDim.x) {
            int j = idx / hs, x = idx % hs, key = k0 + j;
            float kv = 0, vv = 0;
            if (key < T) {
                kv = base[(size_t)key * ld + (size_t)(NH + kh) * hs + x];
                vv = base[(size_t)key * ld + (size_t)(NH + KV + kh) * hs + x];
            }
            Ks[j * hsp + x] = rnd(kv, lowp);
            Vs[j * hsp + x] = rnd(vv, lowp);
        }
        __syncthreads();
        if (row >= T || k0 > row || k0 + ATT_K <= start) continue;
        int key = k0 + lane, jn = min(ATT_K, row - k0 + 1);
        float ds = 0;
        if (key <= row && key >= start) {
            float sacc = 0, dp = 0;
            for (int x = 0; x < hs; x++) {
                sacc += q[x] * Ks[lane * hsp + x];
                dp += dy[x] * Vs[lane * hsp + x];
            }
            float p = expf(sacc * scale - L);
            if (d.p > 0) dp *= cu_drop(d, bhg * T * T + (uint64_t)row * T + key);
            ds = rnd(p * (dp - D) * scale, lowp);
        }
        for (int j = 0; j < jn; j++) {
            float sj = __shfl_sync(0xffffffffu, ds, j);
#pragma unroll
            for (int e = 0; e < ATT_EMAX; e++) {
                int x = lane + 32 * e;
                if (x < hs) dq[e] += sj * Ks[j * hsp + x];
            }
        }
    }
    if (row >= T) return;
    float *g = dqkv + ((size_t)b * T + row) * ld + (size_t)h * hs;
#pragma unroll
    for (int e = 0; e < ATT_EMAX; e++) {
        int x = lane + 32 * e;
        if (x < hs) g[x] = dq[e];
    }
}

/* A staged element: fp32 rounded to bf16 where lowp (the scalar kernels' tiles) or a bf16 value
 * (the tensor-core kernels' tiles). */
static __device__ __forceinline__ void tile_put(float *dst, float v, int lowp) { *dst = rnd(v, lowp); }
static __device__ __forceinline__ void tile_put(__nv_bfloat16 *dst, float v, int) { *dst = __float2bfloat16(v); }

/* Rows [q0, q0 + rows) of query head h: Q and dY (rows past T zero) into tiles of ldt elements a row:
 * what every backward kernel that walks query tiles stages per tile. */
template <typename E>
static __device__ __forceinline__ void load_qdy(E *Qs, E *dYs, int rows, int ldt, int lowp, const float *base,
                                                const float *dout, int b, int q0, int T, size_t ld, size_t C, int h,
                                                int hs) {
    for (int idx = threadIdx.x; idx < rows * hs; idx += blockDim.x) {
        int i = idx / hs, x = idx % hs, row = q0 + i;
        float qv = 0, gv = 0;
        if (row < T) {
            qv = base[(size_t)row * ld + (size_t)h * hs + x];
            gv = dout[((size_t)b * T + row) * C + (size_t)h * hs + x];
        }
        tile_put(&Qs[i * ldt + x], qv, lowp);
        tile_put(&dYs[i * ldt + x], gv, lowp);
    }
}

/* D = Σ dY·Y (fp32, from the unrounded values), L (the forward's log-sum-exp) and the first visible
 * key of query rows [q0, q0 + rows) of head h, one row per warp at a time (nwarps warps); a row past
 * T gets D = L = 0 and start T (it sees no key). What both dK/dV kernels stage per query tile. */
static __device__ __forceinline__ void att_row_stats(float *Dt, float *Lt, int *St, int rows, int nwarps,
                                                     const float *dout, const float *out, const float *lse,
                                                     const int32_t *pos, int b, int h, int q0, int T, int NH, size_t C,
                                                     int hs) {
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int i = warp; i < rows; i += nwarps) {
        int qr = q0 + i;
        float s = 0;
        if (qr < T) {
            const float *g = dout + ((size_t)b * T + qr) * C + (size_t)h * hs;
            const float *yv = out + ((size_t)b * T + qr) * C + (size_t)h * hs;
            for (int x = lane; x < hs; x += 32) s += g[x] * yv[x];
        }
        s = cu_warp_sum(s);
        if (lane == 0) {
            Dt[i] = s;
            Lt[i] = qr < T ? lse[((size_t)b * NH + h) * T + qr] : 0.0f;
            St[i] = qr >= T ? T : pos ? qr - pos[(size_t)b * T + qr] : 0;
        }
    }
}

/* dK, dV rows (overwritten): one warp per key row j of KV head kh; the group's query heads in
 * order, each head's query rows i >= j in order. */
__global__ void k_att_backward_dkv(float *dqkv, const float *dout, const float *qkv, const float *out,
                                   const float *lse, const int32_t *pos, int T, int NH, int KV, int hs, float scale,
                                   Dropout d, int lowp) {
    extern __shared__ float sm[];
    int hsp = hs + 1;
    float *Qt = sm, *dYt = Qt + ATT_K * hsp, *Dt = dYt + ATT_K * hsp, *Lt = Dt + ATT_K, *Kj = Lt + ATT_K,
          *Vj = Kj + ATT_Q * hs;
    int *St = (int *)(Vj + ATT_Q * hs); /* the tile's query rows' first visible keys */
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int bkv = blockIdx.y, b = bkv / KV, kh = bkv % KV, G = NH / KV;
    size_t ld = (size_t)(NH + 2 * KV) * hs, C = (size_t)NH * hs;
    int first = blockIdx.x * ATT_Q, j = first + warp;
    const float *base = qkv + (size_t)b * T * ld;
    float *kj = Kj + warp * hs, *vj = Vj + warp * hs;
    if (j < T)
        for (int x = lane; x < hs; x += 32) {
            kj[x] = rnd(base[(size_t)j * ld + (size_t)(NH + kh) * hs + x], lowp);
            vj[x] = rnd(base[(size_t)j * ld + (size_t)(NH + KV + kh) * hs + x], lowp);
        }
    float dk[ATT_EMAX] = {0, 0, 0, 0}, dv[ATT_EMAX] = {0, 0, 0, 0};
    for (int h = kh * G; h < (kh + 1) * G; h++) {
        uint64_t bhg = (uint64_t)b * (d.heads ? d.heads : NH) + d.head0 + h;
        for (int q0 = first; q0 < T; q0 += ATT_K) {
            __syncthreads();
            load_qdy(Qt, dYt, ATT_K, hsp, lowp, base, dout, b, q0, T, ld, C, h, hs);
            att_row_stats(Dt, Lt, St, ATT_K, ATT_Q, dout, out, lse, pos, b, h, q0, T, NH, C, hs);
            __syncthreads();
            if (j >= T) continue;
            int i = q0 + lane, in = min(ATT_K, T - q0);
            float pd = 0, ds = 0;
            if (i >= j && i < T && St[lane] <= j) {
                float sacc = 0, dp = 0;
                for (int x = 0; x < hs; x++) {
                    sacc += Qt[lane * hsp + x] * kj[x];
                    dp += dYt[lane * hsp + x] * vj[x];
                }
                float p = expf(sacc * scale - Lt[lane]), ks = 1.0f;
                if (d.p > 0) ks = cu_drop(d, bhg * T * T + (uint64_t)i * T + j);
                pd = rnd(p * ks, lowp);
                ds = rnd(p * (dp * ks - Dt[lane]) * scale, lowp);
            }
            for (int ii = 0; ii < in; ii++) {
                float pi = __shfl_sync(0xffffffffu, pd, ii), si = __shfl_sync(0xffffffffu, ds, ii);
#pragma unroll
                for (int e = 0; e < ATT_EMAX; e++) {
                    int x = lane + 32 * e;
                    if (x < hs) {
                        dv[e] += pi * dYt[ii * hsp + x];
                        dk[e] += si * Qt[ii * hsp + x];
                    }
                }
            }
        }
    }
    if (j >= T) return;
    float *gk = dqkv + ((size_t)b * T + j) * ld + (size_t)(NH + kh) * hs, *gv = gk + (size_t)KV * hs;
#pragma unroll
    for (int e = 0; e < ATT_EMAX; e++) {
        int x = lane + 32 * e;
        if (x < hs) gk[x] = dk[e], gv[x] = dv[e];
    }
}

/* ---- the forward on tensor cores (lowp, head size a multiple of 16 up to 128) ----
 *
 * The same online softmax as k_att_forward, with its two products on bf16 tensor cores (wmma
 * 16×16×16, fp32 accumulation): lowp's rounding is exactly that of the CPU's bf16 GEMMs (Q, K, V
 * and the dropped probabilities rounded to bf16, products accumulated in fp32). A block holds
 * TC_Q = 64 query rows, 16 per warp; key tiles of TC_K = 64. Per tile each warp computes its
 * 16 × 64 scores (S = Q·Kᵀ) into shared memory, two lanes per row then mask, scale and fold them
 * into the running maximum and sum, write the rounded probabilities P and rescale the row's output
 * accumulator O (kept in shared memory: a fragment's element layout is unspecified), and the warp
 * adds P·V to O. Shared memory (bytes): Q, K, V tiles 3 · 64 · (hs + 8) · 2, S 4 · 16 · 68 · 4,
 * P 4 · 16 · 72 · 2, O 4 · 16 · (hs + 4) · 4: 70 KiB at hs 64, 110 KiB at hs 128, above the
 * 48 KiB default, so the launch opts in with cudaFuncSetAttribute. Leading dimensions are padded
 * (+8 bf16, +4 floats) against bank conflicts and keep every fragment pointer 32-byte aligned.
 * ST_CUDA_ATT_SCALAR=1 runs the scalar kernels instead (an A/B on the GPU; the tests run both). */
#define TC_Q 64
#define TC_K 64
#define TC_WARPS (TC_Q / 16)

static size_t tc_smem(int hs) {
    size_t ldq = (size_t)hs + 8, lds = TC_K + 4, ldp = TC_K + 8, ldo = (size_t)hs + 4;
    return (TC_Q + 2 * TC_K) * ldq * 2 + TC_WARPS * 16 * (lds * 4 + ldp * 2 + ldo * 4);
}

/* The block's key tile [k0, k0 + TC_K) of KV head kh, K and V rounded to bf16 (rows past T zero),
 * rows of ldq elements: what both tensor-core kernels stage per tile. */
static __device__ __forceinline__ void tc_load_kv(__nv_bfloat16 *Ks, __nv_bfloat16 *Vs, const float *base, int k0,
                                                  int T, size_t ld, int NH, int KV, int kh, int hs, int ldq) {
    for (int idx = threadIdx.x; idx < TC_K * hs; idx += blockDim.x) {
        int j = idx / hs, x = idx % hs, key = k0 + j;
        float kv = 0, vv = 0;
        if (key < T) {
            kv = base[(size_t)key * ld + (size_t)(NH + kh) * hs + x];
            vv = base[(size_t)key * ld + (size_t)(NH + KV + kh) * hs + x];
        }
        Ks[j * ldq + x] = __float2bfloat16(kv);
        Vs[j * ldq + x] = __float2bfloat16(vv);
    }
}

/* A warp's two score-shaped products, 16 × 64 each, into shared memory (fp32, row-major, ld lds):
 * X = A·Bᵀ and Y = E·Fᵀ, A and E the warp's 16 rows, B and F 64 rows, all bf16 rows of ldq
 * elements and hs columns (dQ: S = Q·Kᵀ, dP = dY·Vᵀ; dK/dV: Sᵀ = K·Qᵀ, dPᵀ = V·dYᵀ). */
static __device__ __forceinline__ void tc_two_products(float *X, float *Y, const __nv_bfloat16 *A,
                                                       const __nv_bfloat16 *B, const __nv_bfloat16 *E,
                                                       const __nv_bfloat16 *F, int hs, int ldq, int lds) {
    for (int n = 0; n < TC_K / 16; n++) { /* TC_K = TC_Q: the other side's tile */
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> x_acc, y_acc;
        wmma::fill_fragment(x_acc, 0.0f);
        wmma::fill_fragment(y_acc, 0.0f);
        for (int kk = 0; kk < hs / 16; kk++) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa, fe;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb, ff;
            wmma::load_matrix_sync(fa, A + kk * 16, ldq);
            wmma::load_matrix_sync(fb, B + n * 16 * ldq + kk * 16, ldq);
            wmma::mma_sync(x_acc, fa, fb, x_acc);
            wmma::load_matrix_sync(fe, E + kk * 16, ldq);
            wmma::load_matrix_sync(ff, F + n * 16 * ldq + kk * 16, ldq);
            wmma::mma_sync(y_acc, fe, ff, y_acc);
        }
        wmma::store_matrix_sync(X + n * 16, x_acc, lds, wmma::mem_row_major);
        wmma::store_matrix_sync(Y + n * 16, y_acc, lds, wmma::mem_row_major);
    }
}

__global__ void k_att_forward_tc(float *out, float *lse, const float *qkv, const int32_t *pos, int T, int NH, int KV,
                                 int hs, float scale, Dropout d) {
    extern __shared__ float sm[];
    const int ldq = hs + 8, lds = TC_K + 4, ldp = TC_K + 8, ldo = hs + 4;
    __nv_bfloat16 *Qs = (__nv_bfloat16 *)sm, *Ks = Qs + TC_Q * ldq, *Vs = Ks + TC_K * ldq;
    float *Ss = (float *)(Vs + TC_K * ldq);
    __nv_bfloat16 *Ps = (__nv_bfloat16 *)(Ss + TC_WARPS * 16 * lds);
    float *Os = (float *)(Ps + TC_WARPS * 16 * ldp);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int bh = blockIdx.y, b = bh / NH, h = bh % NH, kh = h / (NH / KV);
    size_t ld = (size_t)(NH + 2 * KV) * hs, C = (size_t)NH * hs;
    const float *base = qkv + (size_t)b * T * ld;
    int q0 = blockIdx.x * TC_Q, last = min(T - 1, q0 + TC_Q - 1);
    int w0 = q0 + warp * 16, wlast = min(T - 1, w0 + 15);
    uint64_t bhg = (uint64_t)b * (d.heads ? d.heads : NH) + d.head0 + h;
    float *Sw = Ss + warp * 16 * lds, *Ow = Os + warp * 16 * ldo;
    __nv_bfloat16 *Pw = Ps + warp * 16 * ldp;
    for (int idx = threadIdx.x; idx < TC_Q * hs; idx += blockDim.x) {
        int i = idx / hs, x = idx % hs, row = q0 + i;
        Qs[i * ldq + x] = __float2bfloat16(row < T ? base[(size_t)row * ld + (size_t)h * hs + x] : 0.0f);
    }
    for (int idx = lane; idx < 16 * ldo; idx += 32) Ow[idx] = 0.0f;
    /* lanes 2r and 2r + 1 own row r of the warp's 16: columns [32·half, 32·half + 32) of a tile */
    int r = lane >> 1, half = lane & 1, row = w0 + r;
    int start = pos && row < T ? row - pos[(size_t)b * T + row] : 0;
    float m = -INFINITY, l = 0;
    for (int k0 = 0; k0 <= last; k0 += TC_K) {
        __syncthreads(); /* the previous tile's K, V are read */
        tc_load_kv(Ks, Vs, base, k0, T, ld, NH, KV, kh, hs, ldq);
        __syncthreads();
        if (w0 >= T || k0 > wlast) continue; /* the whole warp: no row of it sees this tile */
        for (int n = 0; n < TC_K / 16; n++) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::fill_fragment(acc, 0.0f);
            for (int kk = 0; kk < hs / 16; kk++) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb;
                wmma::load_matrix_sync(fa, Qs + warp * 16 * ldq + kk * 16, ldq);
                wmma::load_matrix_sync(fb, Ks + n * 16 * ldq + kk * 16, ldq);
                wmma::mma_sync(acc, fa, fb, acc);
            }
            wmma::store_matrix_sync(Sw + n * 16, acc, lds, wmma::mem_row_major);
        }
        __syncwarp();
        float tmax = -INFINITY;
        for (int c = 0; c < 32; c++) {
            int j = half * 32 + c, key = k0 + j;
            float s = row < T && key <= row && key >= start ? Sw[r * lds + j] * scale : -INFINITY;
            Sw[r * lds + j] = s;
            tmax = fmaxf(tmax, s);
        }
        tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
        float bm = fmaxf(m, tmax), corr = m == -INFINITY ? 0.0f : expf(m - bm), psum = 0;
        for (int c = 0; c < 32; c++) {
            int j = half * 32 + c, key = k0 + j;
            float s = Sw[r * lds + j], p = s == -INFINITY ? 0.0f : expf(s - bm), pd = p;
            if (d.p > 0 && s != -INFINITY) pd *= cu_drop(d, bhg * T * T + (uint64_t)row * T + key);
            psum += p;
            Pw[r * ldp + j] = __float2bfloat16(pd);
        }
        psum += __shfl_xor_sync(0xffffffffu, psum, 1);
        l = l * corr + psum;
        m = bm;
        for (int x = half; x < hs; x += 2) Ow[r * ldo + x] *= corr;
        __syncwarp();
        for (int n = 0; n < hs / 16; n++) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::load_matrix_sync(acc, Ow + n * 16, ldo, wmma::mem_row_major);
            for (int kk = 0; kk < TC_K / 16; kk++) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> fb;
                wmma::load_matrix_sync(fa, Pw + kk * 16, ldp);
                wmma::load_matrix_sync(fb, Vs + kk * 16 * ldq + n * 16, ldq);
                wmma::mma_sync(acc, fa, fb, acc);
            }
            wmma::store_matrix_sync(Ow + n * 16, acc, ldo, wmma::mem_row_major);
        }
        __syncwarp();
    }
    if (row >= T) return;
    float inv = 1.0f / l, *y = out + ((size_t)b * T + row) * C + (size_t)h * hs;
    for (int x = half; x < hs; x += 2) y[x] = Ow[r * ldo + x] * inv;
    if (half == 0) lse[(size_t)bh * T + row] = m + logf(l);
}

/* dQ on tensor cores (lowp, hs a multiple of 16): k_att_backward_dq's arithmetic with S = Q·Kᵀ,
 * dP = dY·Vᵀ and dQ += dS·K as bf16 wmma tiles (fp32 accumulation). A warp's 16 rows keep their dQ
 * in fragments across the key tiles (no rescaling, unlike the forward), staged through shared
 * memory at the end so rows past T are not written. Shared memory: Q, dY, K, V tiles
 * 4 · 64 · (hs + 8) · 2, S and dP 2 · 4 · 16 · 68 · 4, dS 4 · 16 · 72 · 2, the dQ staging
 * 4 · 16 · (hs + 4) · 4: 96 KiB at hs 64, 144 KiB at hs 128. */
#define TC_DQ_FRAGS 8 /* hs / 16 at hs 128 */

static size_t tc_dq_smem(int hs) {
    size_t ldq = (size_t)hs + 8, lds = TC_K + 4, ldp = TC_K + 8, ldo = (size_t)hs + 4;
    return (2 * TC_Q + 2 * TC_K) * ldq * 2 + TC_WARPS * 16 * (2 * lds * 4 + ldp * 2 + ldo * 4);
}

__global__ void k_att_backward_dq_tc(float *dqkv, const float *dout, const float *qkv, const float *out,
                                     const float *lse, const int32_t *pos, int T, int NH, int KV, int hs, float scale,
                                     Dropout d) {
    extern __shared__ float sm[];
    const int ldq = hs + 8, lds = TC_K + 4, ldp = TC_K + 8, ldo = hs + 4;
    __nv_bfloat16 *Qs = (__nv_bfloat16 *)sm, *dYs = Qs + TC_Q * ldq, *Ks = dYs + TC_Q * ldq, *Vs = Ks + TC_K * ldq;
    float *Ss = (float *)(Vs + TC_K * ldq), *dPs = Ss + TC_WARPS * 16 * lds;
    __nv_bfloat16 *dSs = (__nv_bfloat16 *)(dPs + TC_WARPS * 16 * lds);
    float *Os = (float *)(dSs + TC_WARPS * 16 * ldp);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int bh = blockIdx.y, b = bh / NH, h = bh % NH, kh = h / (NH / KV);
    size_t ld = (size_t)(NH + 2 * KV) * hs, C = (size_t)NH * hs;
    const float *base = qkv + (size_t)b * T * ld;
    int q0 = blockIdx.x * TC_Q, last = min(T - 1, q0 + TC_Q - 1);
    int w0 = q0 + warp * 16, wlast = min(T - 1, w0 + 15);
    uint64_t bhg = (uint64_t)b * (d.heads ? d.heads : NH) + d.head0 + h;
    float *Sw = Ss + warp * 16 * lds, *dPw = dPs + warp * 16 * lds, *Ow = Os + warp * 16 * ldo;
    __nv_bfloat16 *dSw = dSs + warp * 16 * ldp;
    load_qdy(Qs, dYs, TC_Q, ldq, 1, base, dout, b, q0, T, ld, C, h, hs);
    int r = lane >> 1, half = lane & 1, row = w0 + r;
    int start = pos && row < T ? row - pos[(size_t)b * T + row] : 0;
    float D = 0, L = 0;
    if (row < T) { /* D = Σ dY·Y in fp32 from the unrounded values, as the scalar kernel */
        const float *g = dout + ((size_t)b * T + row) * C + (size_t)h * hs;
        const float *yv = out + ((size_t)b * T + row) * C + (size_t)h * hs;
        for (int x = half; x < hs; x += 2) D += g[x] * yv[x];
        L = lse[(size_t)bh * T + row];
    }
    D += __shfl_xor_sync(0xffffffffu, D, 1);
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> dq[TC_DQ_FRAGS];
#pragma unroll
    for (int n = 0; n < TC_DQ_FRAGS; n++) wmma::fill_fragment(dq[n], 0.0f); /* constant indices: registers */
    for (int k0 = 0; k0 <= last; k0 += TC_K) {
        __syncthreads();
        tc_load_kv(Ks, Vs, base, k0, T, ld, NH, KV, kh, hs, ldq);
        __syncthreads();
        if (w0 >= T || k0 > wlast) continue;
        tc_two_products(Sw, dPw, Qs + warp * 16 * ldq, Ks, dYs + warp * 16 * ldq, Vs, hs, ldq, lds);
        __syncwarp();
        for (int c = 0; c < 32; c++) {
            int j = half * 32 + c, key = k0 + j;
            float ds = 0;
            if (row < T && key <= row && key >= start) {
                float p = expf(Sw[r * lds + j] * scale - L), dp = dPw[r * lds + j];
                if (d.p > 0) dp *= cu_drop(d, bhg * T * T + (uint64_t)row * T + key);
                ds = p * (dp - D) * scale;
            }
            dSw[r * ldp + j] = __float2bfloat16(ds);
        }
        __syncwarp();
        for (int kk = 0; kk < TC_K / 16; kk++) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fs;
            wmma::load_matrix_sync(fs, dSw + kk * 16, ldp);
#pragma unroll
            for (int n = 0; n < TC_DQ_FRAGS; n++) {
                if (n >= hs / 16) break;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> fk;
                wmma::load_matrix_sync(fk, Ks + kk * 16 * ldq + n * 16, ldq);
                wmma::mma_sync(dq[n], fs, fk, dq[n]);
            }
        }
    }
    if (w0 >= T) return;
#pragma unroll
    for (int n = 0; n < TC_DQ_FRAGS; n++)
        if (n < hs / 16) wmma::store_matrix_sync(Ow + n * 16, dq[n], ldo, wmma::mem_row_major);
    __syncwarp();
    if (row >= T) return;
    float *g = dqkv + ((size_t)b * T + row) * ld + (size_t)h * hs;
    for (int x = half; x < hs; x += 2) g[x] = Ow[r * ldo + x];
}

/* dK, dV on tensor cores (lowp, hs a multiple of 16): k_att_backward_dkv's arithmetic with
 * Sᵀ = K·Qᵀ, dPᵀ = V·dYᵀ, dV += Pᵀ·dY and dK += dSᵀ·Q as bf16 wmma tiles (fp32 accumulation). A block
 * holds TC_K = 64 key rows of one KV head, 16 per warp, and walks the group's query heads in order
 * and their query tiles of TC_Q rows in order (from its own first key row: earlier rows see none of
 * its keys); a warp keeps its dK and dV in fragments across them, so each element is one warp's sum
 * in a fixed order (no atomics, the same bits every run). Per tile: the Q and dY tiles (bf16) and
 * each query row's D = Σ dY·Y (fp32, unrounded), L and first visible key are staged once for the
 * block; a warp whose 16 keys no row of the tile sees (past T, above the diagonal or before a
 * document start) skips the tile's products. Shared memory: K, V, Q, dY tiles 4 · 64 · (hs + 8) · 2,
 * Sᵀ and dPᵀ 4 · 2 · 16 · 68 · 4 (reused to stage the results), Pᵀ and dSᵀ 4 · 2 · 16 · 72 · 2, the
 * rows' D, L, start 3 · 64 · 4: 89 KiB at hs 64, 121 KiB at hs 128. */
static size_t tc_dkv_smem(int hs) {
    size_t ldq = (size_t)hs + 8, lds = TC_Q + 4, ldp = TC_Q + 8;
    return (2 * TC_Q + 2 * TC_K) * ldq * 2 + TC_WARPS * 2 * 16 * (lds * 4 + ldp * 2) + 3 * TC_Q * 4;
}

__global__ void k_att_backward_dkv_tc(float *dqkv, const float *dout, const float *qkv, const float *out,
                                      const float *lse, const int32_t *pos, int T, int NH, int KV, int hs,
                                      float scale, Dropout d) {
    extern __shared__ float sm[];
    const int ldq = hs + 8, lds = TC_Q + 4, ldp = TC_Q + 8, ldo = hs + 4;
    __nv_bfloat16 *Ks = (__nv_bfloat16 *)sm, *Vs = Ks + TC_K * ldq, *Qs = Vs + TC_K * ldq, *dYs = Qs + TC_Q * ldq;
    float *SP = (float *)(dYs + TC_Q * ldq);
    __nv_bfloat16 *PS = (__nv_bfloat16 *)(SP + TC_WARPS * 2 * 16 * lds);
    float *Dt = (float *)(PS + TC_WARPS * 2 * 16 * ldp), *Lt = Dt + TC_Q;
    int *St = (int *)(Lt + TC_Q); /* the tile's query rows' first visible keys */
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int bkv = blockIdx.y, b = bkv / KV, kh = bkv % KV, G = NH / KV;
    size_t ld = (size_t)(NH + 2 * KV) * hs, C = (size_t)NH * hs;
    const float *base = qkv + (size_t)b * T * ld;
    int k0 = blockIdx.x * TC_K, j0 = k0 + warp * 16, jlast = min(T - 1, j0 + 15);
    float *Sw = SP + warp * 2 * 16 * lds, *dPw = Sw + 16 * lds; /* the warp's Sᵀ and dPᵀ: 16 keys × 64 queries */
    __nv_bfloat16 *Pw = PS + warp * 2 * 16 * ldp, *dSw = Pw + 16 * ldp;
    tc_load_kv(Ks, Vs, base, k0, T, ld, NH, KV, kh, hs, ldq);
    /* lanes 2r and 2r + 1 own key row r of the warp's 16: query columns [32·half, 32·half + 32) */
    int r = lane >> 1, half = lane & 1, j = j0 + r;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> dk[TC_DQ_FRAGS], dv[TC_DQ_FRAGS];
#pragma unroll
    for (int n = 0; n < TC_DQ_FRAGS; n++) wmma::fill_fragment(dk[n], 0.0f), wmma::fill_fragment(dv[n], 0.0f);
    for (int h = kh * G; h < (kh + 1) * G; h++) {
        uint64_t bhg = (uint64_t)b * (d.heads ? d.heads : NH) + d.head0 + h;
        for (int q0 = k0; q0 < T; q0 += TC_Q) {
            __syncthreads(); /* the previous tile is read (the first time: K and V are staged) */
            load_qdy(Qs, dYs, TC_Q, ldq, 1, base, dout, b, q0, T, ld, C, h, hs);
            att_row_stats(Dt, Lt, St, TC_Q, TC_WARPS, dout, out, lse, pos, b, h, q0, T, NH, C, hs);
            __syncthreads();
            if (j0 >= T) continue;
            int ia = q0 + lane, ib = ia + 32; /* does any row of the tile see any of the warp's keys? */
            int any = (ia < T && ia >= j0 && St[lane] <= jlast) || (ib < T && ib >= j0 && St[lane + 32] <= jlast);
            if (!__any_sync(0xffffffffu, any)) continue;
            tc_two_products(Sw, dPw, Ks + warp * 16 * ldq, Qs, Vs + warp * 16 * ldq, dYs, hs, ldq, lds);
            __syncwarp();
            for (int c = 0; c < 32; c++) {
                int ic = half * 32 + c, i = q0 + ic;
                float pd = 0, ds = 0;
                if (j < T && i < T && i >= j && St[ic] <= j) {
                    float p = expf(Sw[r * lds + ic] * scale - Lt[ic]), ks = 1.0f;
                    if (d.p > 0) ks = cu_drop(d, bhg * T * T + (uint64_t)i * T + j);
                    pd = p * ks;
                    ds = p * (dPw[r * lds + ic] * ks - Dt[ic]) * scale;
                }
                Pw[r * ldp + ic] = __float2bfloat16(pd);
                dSw[r * ldp + ic] = __float2bfloat16(ds);
            }
            __syncwarp();
            for (int kk = 0; kk < TC_Q / 16; kk++) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fp, fs;
                wmma::load_matrix_sync(fp, Pw + kk * 16, ldp);
                wmma::load_matrix_sync(fs, dSw + kk * 16, ldp);
#pragma unroll
                for (int n = 0; n < TC_DQ_FRAGS; n++) {
                    if (n >= hs / 16) break;
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> fy, fq;
                    wmma::load_matrix_sync(fy, dYs + kk * 16 * ldq + n * 16, ldq);
                    wmma::mma_sync(dv[n], fp, fy, dv[n]);
                    wmma::load_matrix_sync(fq, Qs + kk * 16 * ldq + n * 16, ldq);
                    wmma::mma_sync(dk[n], fs, fq, dk[n]);
                }
            }
        }
    }
    if (j0 >= T) return;
    /* staged through the warp's Sᵀ/dPᵀ area (16 · (hs + 4) <= 2 · 16 · 68 floats), dK then dV, so
     * rows past T are not written */
    size_t off = ((size_t)b * T + j) * ld + (size_t)(NH + kh) * hs;
    __syncwarp();
#pragma unroll
    for (int n = 0; n < TC_DQ_FRAGS; n++)
        if (n < hs / 16) wmma::store_matrix_sync(Sw + n * 16, dk[n], ldo, wmma::mem_row_major);
    __syncwarp();
    if (j < T)
        for (int x = half; x < hs; x += 2) dqkv[off + x] = Sw[r * ldo + x];
    __syncwarp();
#pragma unroll
    for (int n = 0; n < TC_DQ_FRAGS; n++)
        if (n < hs / 16) wmma::store_matrix_sync(Sw + n * 16, dv[n], ldo, wmma::mem_row_major);
    __syncwarp();
    if (j < T)
        for (int x = half; x < hs; x += 2) dqkv[off + (size_t)KV * hs + x] = Sw[r * ldo + x];
}

/* A tensor-core kernel's shared-memory opt-in. The attribute is one value per kernel, whatever the
 * head size, and a launch may use at most that: it is raised to the largest size asked so far and
 * never lowered (*opted: the value set). Set once per head size instead (as it was), hs 128, then a
 * first hs 64, then hs 128 again: the hs 64 call lowered it to 70 KiB and the third launch, 110 KiB,
 * was refused ("invalid configuration argument"). */
static void tc_opt_in(const void *kernel, size_t *opted, size_t bytes) {
    if (bytes <= *opted) return;
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (e != cudaSuccess) {
        cu_fail(ST_ERR_RUNTIME, "CUDA cudaFuncSetAttribute(%zu bytes of shared memory): %s", bytes,
                cudaGetErrorString(e));
        return;
    }
    *opted = bytes;
}

/* Read at every call (one getenv per launch): bench/gpu_kernels flips it for its A/B. */
static int att_scalar_only(void) {
    const char *v = getenv("ST_CUDA_ATT_SCALAR");
    return v && v[0] == '1';
}

/* The launches put (batch, head) on gridDim.y, whose limit is 65535 (not gridDim.x's 2^31 − 1):
 * B·NH above it would be "invalid configuration argument" at launch; it is refused by name. */
#define ATT_GRID_Y 65535

static int att_check(int B, int NH, int KV, int hs) {
    if (hs < 1 || hs > 32 * ATT_EMAX || KV < 1 || NH % KV) {
        cu_fail(ST_ERR_INPUT, "CUDA attention: expected head size 1..%d and KV heads dividing %d, found hs %d, KV %d",
                32 * ATT_EMAX, NH, hs, KV);
        return 0;
    }
    if ((long)B * NH > ATT_GRID_Y) {
        cu_fail(ST_ERR_INPUT, "CUDA attention: expected batch x heads <= %d (the grid's y limit), found %d x %d",
                ATT_GRID_Y, B, NH);
        return 0;
    }
    return 1;
}

void cu_attention_forward(float *out, float *lse, float *scratch, const float *qkv, const int32_t *pos, int B, int T,
                          int NH, int KV, int hs, float scale, Dropout d, int lowp, int nt) {
    if (!cu_ready() || !att_check(B, NH, KV, hs) || (long)B * T * NH == 0) return; /* no rows: a grid of 0 blocks */
    if (lowp && hs % 16 == 0 && !att_scalar_only()) {
        static size_t opted;
        size_t bytes = tc_smem(hs);
        tc_opt_in((const void *)k_att_forward_tc, &opted, bytes);
        dim3 tgrid(cu_blocks((size_t)T, TC_Q), B * NH);
        k_att_forward_tc<<<tgrid, 32 * TC_WARPS, bytes, cu_stream()>>>(out, lse, qkv, pos, T, NH, KV, hs, scale, d);
        CU_LAUNCHED("attention_forward(tensor cores)");
        return;
    }
    size_t smem = ((size_t)ATT_K * (hs + 1) + (size_t)ATT_K * hs + (size_t)ATT_Q * hs) * sizeof(float);
    dim3 grid(cu_blocks((size_t)T, ATT_Q), B * NH);
    k_att_forward<<<grid, 32 * ATT_Q, smem, cu_stream()>>>(out, lse, qkv, pos, T, NH, KV, hs, scale, d, lowp);
    CU_LAUNCHED("attention_forward");
}

void cu_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *out,
                           const float *lse, const int32_t *pos, int B, int T, int NH, int KV, int hs, float scale,
                           Dropout d, int lowp, int nt) {
    if (!cu_ready() || !att_check(B, NH, KV, hs) || (long)B * T * NH == 0) return;
    if (lowp && hs % 16 == 0 && !att_scalar_only()) { /* both on tensor cores */
        static size_t opted, opted_kv;
        size_t bytes = tc_dq_smem(hs);
        tc_opt_in((const void *)k_att_backward_dq_tc, &opted, bytes);
        dim3 tgrid(cu_blocks((size_t)T, TC_Q), B * NH);
        k_att_backward_dq_tc<<<tgrid, 32 * TC_WARPS, bytes, cu_stream()>>>(dqkv, dout, qkv, out, lse, pos, T, NH, KV,
                                                                          hs, scale, d);
        CU_LAUNCHED("attention_backward(dq, tensor cores)");
        bytes = tc_dkv_smem(hs);
        tc_opt_in((const void *)k_att_backward_dkv_tc, &opted_kv, bytes);
        dim3 kgrid(cu_blocks((size_t)T, TC_K), B * KV);
        k_att_backward_dkv_tc<<<kgrid, 32 * TC_WARPS, bytes, cu_stream()>>>(dqkv, dout, qkv, out, lse, pos, T, NH,
                                                                           KV, hs, scale, d);
        CU_LAUNCHED("attention_backward(dkv, tensor cores)");
        return;
    }
    size_t smem_q = (2 * (size_t)ATT_K * (hs + 1) + 2 * (size_t)ATT_Q * hs) * sizeof(float);
    dim3 grid_q(cu_blocks((size_t)T, ATT_Q), B * NH);
    k_att_backward_dq<<<grid_q, 32 * ATT_Q, smem_q, cu_stream()>>>(dqkv, dout, qkv, out, lse, pos, T, NH, KV, hs, scale,
                                                                   d, lowp);
    CU_LAUNCHED("attention_backward(dq)");
    size_t smem_kv = (2 * (size_t)ATT_K * (hs + 1) + 3 * (size_t)ATT_K + 2 * (size_t)ATT_Q * hs) * sizeof(float);
    dim3 grid_kv(cu_blocks((size_t)T, ATT_Q), B * KV);
    k_att_backward_dkv<<<grid_kv, 32 * ATT_Q, smem_kv, cu_stream()>>>(dqkv, dout, qkv, out, lse, pos, T, NH, KV, hs,
                                                                      scale, d, lowp);
    CU_LAUNCHED("attention_backward(dkv)");
}

/* ---- decoding: one query token over the KV cache (kernels.h's attention_decode_forward) ----
 * One block per query head, DEC_THREADS threads: each thread the scores of keys j ≡ tid (mod
 * threads) into the head's row of `scores` (NH·(pos+1) floats), the block's max and Σexp by a
 * fixed tree (same bits every run), then one thread per output dimension sums the value rows in
 * row order. Results equal the CPU's to rounding (the CPU sums the exponentials in row order). */
#define DEC_THREADS 128

/* v reduced over the block by op (0: sum, 1: max) in a fixed order; every thread gets the result. */
static __device__ float dec_block_reduce(float v, int op, float *red) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    v = op ? cu_warp_max(v) : cu_warp_sum(v);
    __syncthreads(); /* red may still be read by a previous call */
    if (lane == 0) red[w] = v;
    __syncthreads();
    float r = red[0];
    for (int i = 1; i < DEC_THREADS / 32; i++) r = op ? fmaxf(r, red[i]) : r + red[i];
    return r;
}

__global__ void k_att_decode(float *out, float *scores, const float *q, const float *K, const float *V, int pos,
                             int NH, int KV, int hs, float scale) {
    __shared__ float red[DEC_THREADS / 32];
    int h = blockIdx.x, G = NH / KV, kvw = KV * hs, off = (h / G) * hs, n = pos + 1;
    const float *qh = q + (size_t)h * hs;
    float *s = scores + (size_t)h * n;
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < n; j += DEC_THREADS) {
        const float *k = K + (size_t)j * kvw + off;
        float d = 0;
        for (int i = 0; i < hs; i++) d += qh[i] * k[i];
        s[j] = d * scale;
        mx = fmaxf(mx, s[j]);
    }
    mx = dec_block_reduce(mx, 1, red);
    float sum = 0;
    for (int j = threadIdx.x; j < n; j += DEC_THREADS) sum += s[j] = expf(s[j] - mx);
    sum = dec_block_reduce(sum, 0, red); /* its __syncthreads also publishes s[] to the block */
    for (int i = threadIdx.x; i < hs; i += DEC_THREADS) {
        float y = 0;
        for (int j = 0; j < n; j++) y += s[j] / sum * V[(size_t)j * kvw + off + i];
        out[(size_t)h * hs + i] = y;
    }
}

void cu_attention_decode(float *out, float *scores, const float *q, const float *K, const float *V, int pos, int NH,
                         int KV, int hs, float scale, int nt) {
    if (!cu_ready()) return;
    if (hs < 1 || KV < 1 || NH % KV || pos < 0) {
        cu_fail(ST_ERR_INPUT, "CUDA attention_decode: expected KV heads dividing %d and pos >= 0, found KV %d, pos %d",
                NH, KV, pos);
        return;
    }
    if (NH == 0) return; /* no heads: a grid of 0 blocks */
    k_att_decode<<<NH, DEC_THREADS, 0, cu_stream()>>>(out, scores, q, K, V, pos, NH, KV, hs, scale);
    CU_LAUNCHED("attention_decode");
}
