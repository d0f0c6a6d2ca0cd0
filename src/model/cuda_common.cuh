/* cuda_common.cuh — what the CUDA backend's files (backend_cuda.cu, cuda_kernels.cu,
 * cuda_attention.cu, cuda_optim.cu) share and nothing else includes: the checked-call macros and
 * the first-failure record, the uniforms of core/rng.h's Philox and core/half.h's bf16 rounding
 * (their inline functions compiled for the device: dropout masks and bf16 copies are the CPU's),
 * fp16 rounding identical to core/half.h's, warp and block reductions, and the declarations of the
 * kernels' host entry points (cu_*, each with the signature and contract of its kernels.h namesake;
 * `nt` is ignored).
 *
 * Conventions. C-style CUDA (llm.c): plain __global__ functions, no templates beyond what a loop
 * bound needs, no classes. Every launch is followed by CU_LAUNCHED (cudaGetLastError), every
 * runtime call is wrapped in CU_TRY; a failure never aborts: it is recorded once (the first wins,
 * backend.h's take_error contract) and the entry returns. All work goes to one stream, in order,
 * so an entry may return before its kernels finish and `sync` waits for all of them. Reductions
 * use fixed partitions (no atomics): the same inputs give the same bits every run. */
#ifndef ST_MODEL_CUDA_COMMON_CUH
#define ST_MODEL_CUDA_COMMON_CUH

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "core/half.h"
#include "core/mem.h"
#include "core/rng.h"
#include "core/status.h"
#include "model/backend.h"
#include "model/kernels.h"
}

/* ---- failures ---- */

/* Records the first failure (later ones are dropped until cu_take_error). */
void cu_fail(Status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
Status cu_take_error(Err *err);
/* 1 when the device is open (opening it on the first call); 0 after recording why not. Every
 * entry that touches the device starts with it. */
int cu_ready(void);
/* The stream all work goes to. */
cudaStream_t cu_stream(void);
/* The backend's private device scratch for fixed-partition reductions (floats), opened with the
 * device; its size in floats. */
float *cu_reduce_scratch(size_t *floats);

#define CU_TRY(call)                                                                                      \
    do {                                                                                                  \
        cudaError_t e_ = (call);                                                                          \
        if (e_ != cudaSuccess)                                                                            \
            cu_fail(ST_ERR_RUNTIME, "CUDA %s at %s:%d: %s", #call, __FILE__, __LINE__, cudaGetErrorString(e_)); \
    } while (0)

/* After every launch: a bad configuration or an earlier asynchronous fault shows here. */
#define CU_LAUNCHED(name)                                                                                 \
    do {                                                                                                  \
        cudaError_t e_ = cudaGetLastError();                                                              \
        if (e_ != cudaSuccess)                                                                            \
            cu_fail(ST_ERR_RUNTIME, "CUDA kernel %s at %s:%d: %s", name, __FILE__, __LINE__, cudaGetErrorString(e_)); \
    } while (0)

static inline unsigned cu_blocks(size_t n, unsigned threads) { return (unsigned)((n + threads - 1) / threads); }

/* ---- numbers ---- */

/* rng_uniform and kernels_internal.h's drop_scale. */
__device__ __forceinline__ float cu_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
    uint32_t w[4];
    rng_philox_inline(seed, stream, index >> 2, w);
    /* selected, not indexed: a runtime index into w would put it in local memory */
    uint32_t x = (index & 3) == 0 ? w[0] : (index & 3) == 1 ? w[1] : (index & 3) == 2 ? w[2] : w[3];
    return rng_unit24(x);
}
__device__ __forceinline__ float cu_drop(Dropout d, uint64_t i) {
    return cu_uniform(d.seed, d.stream, i + d.offset) >= d.p ? 1.0f / (1.0f - d.p) : 0.0f;
}

/* core/half.h's half_bf16 (round to nearest even by integer arithmetic, a NaN kept and made
 * quiet; its definition) and its inverse. */
__device__ __forceinline__ uint16_t cu_bf16(float x) { return half_bf16_bits(__float_as_uint(x)); }
__device__ __forceinline__ float cu_bf16_f(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }
/* x rounded through bf16 (the CPU's lowp operands). */
__device__ __forceinline__ float cu_round_bf16(float x) { return cu_bf16_f(cu_bf16(x)); }
__device__ __forceinline__ uint16_t cu_fp16(float x) { return __half_as_ushort(__float2half_rn(x)); }

__device__ __forceinline__ float cu_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float cu_warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* ---- the kernels' host entry points (contracts in kernels.h) ---- */

void cu_encoder_forward(float *out, const int32_t *inp, const int32_t *pos, const float *wte, const float *wpe, int B,
                        int T, int C, Dropout d, int nt);
void cu_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp, const int32_t *pos, int B,
                         int T, int C, Dropout d, int nt);
void cu_encoder_forward_vp(float *out, const int32_t *inp, const int32_t *pos, const float *wte, const float *wpe,
                           int B, int T, int C, int v0, int vn, int nt);
void cu_encoder_backward_vp(float *dwte, float *dwpe, const float *dout, const int32_t *inp, const int32_t *pos,
                            int B, int T, int C, int v0, int vn, int nt);
void cu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                          int N, int C, int nt);
void cu_layernorm_forward_bf16(uint16_t *out, float *mean, float *rstd, const float *inp, const float *w,
                               const float *b, int N, int C, int nt);
void cu_residual_layernorm_forward(float *res, float *out, float *mean, float *rstd, const float *a, const float *b,
                                   Dropout d, const float *w, const float *bias, int N, int C, int nt);
void cu_residual_layernorm_forward_bf16(float *res, uint16_t *out, float *mean, float *rstd, const float *a,
                                        const float *b, Dropout d, const float *w, const float *bias, int N, int C,
                                        int nt);
void cu_layernorm_backward(float *dinp, float *dw, float *db, float *scratch, const float *dout, const float *inp,
                           const float *w, const float *mean, const float *rstd, int N, int C, int acc, int nt);
void cu_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C, float eps, int nt);
void cu_rmsnorm_forward_bf16(uint16_t *out, float *rstd, const float *inp, const float *w, int N, int C, float eps,
                             int nt);
void cu_residual_rmsnorm_forward(float *res, float *out, float *rstd, const float *a, const float *b, Dropout d,
                                 const float *w, int N, int C, float eps, int nt);
void cu_residual_rmsnorm_forward_bf16(float *res, uint16_t *out, float *rstd, const float *a, const float *b,
                                      Dropout d, const float *w, int N, int C, float eps, int nt);
void cu_rmsnorm_backward(float *dinp, float *dw, float *scratch, const float *dout, const float *inp, const float *w,
                         const float *rstd, int N, int C, int acc, int nt);
void cu_rope_table(float *cs, int T, int hs, const double *inv_freq);
void cu_rope_forward(float *qkv, const float *cs, const int32_t *pos, int B, int T, int NH, int KV, int hs, int pos0,
                     int nt);
void cu_rope_backward(float *dqkv, const float *cs, const int32_t *pos, int B, int T, int NH, int KV, int hs,
                      int pos0, int nt);
void cu_swiglu_forward(float *out, const float *h, int N, int F, int nt);
void cu_swiglu_forward_bf16(uint16_t *out, const float *h, int N, int F, int nt);
void cu_swiglu_backward(float *dh, const float *dout, const float *h, int N, int F, int nt);
void cu_swiglu_backward_bf16(uint16_t *dh, const float *dout, const float *h, int N, int F, int nt);
void cu_attention_forward(float *out, float *lse, float *scratch, const float *qkv, const int32_t *pos, int B, int T,
                          int NH, int KV, int hs, float scale, Dropout d, int lowp, int nt);
void cu_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *out,
                           const float *lse, const int32_t *pos, int B, int T, int NH, int KV, int hs, float scale,
                           Dropout d, int lowp, int nt);
void cu_attention_decode(float *out, float *scores, const float *q, const float *K, const float *V, int pos, int NH,
                         int KV, int hs, float scale, int nt);
void cu_gelu_forward(float *out, const float *inp, size_t n, int nt);
void cu_gelu_backward(float *dinp, const float *dout, const float *inp, size_t n, int nt);
void cu_gelu_forward_bf16(uint16_t *out, const float *inp, size_t n, int nt);
void cu_gelu_backward_bf16(uint16_t *dinp_lp, float *colsum, float *sums, const float *dout, const float *inp, int N,
                           int OC, int acc, int nt);
void cu_bias_add_rows(float *x, const float *bias, int N, int C, int nt);
void cu_residual_forward(float *out, const float *a, const float *b, size_t n, Dropout d, int nt);
void cu_dropout_backward(float *out, const float *dout, size_t n, Dropout d, int nt);
void cu_cast_bf16(uint16_t *dst, const float *src, size_t n, int nt);
void cu_cast_bf16_colsum(uint16_t *dst, float *colsum, float *sums, const float *src, int N, int OC, int acc, int nt);
void cu_cast_fp16(uint16_t *dst, const float *src, size_t n, int nt);
void cu_round_fp16(float *dst, const float *src, size_t n);
void cu_widen_fp16(float *dst, const uint16_t *src, size_t n);
/* colsum (OC) (+)= column sums of src (N, OC) in a fixed partition (rows in chunks, chunks in order). */
void cu_colsum(float *colsum, const float *src, int N, int OC, int acc);
void cu_scale_inplace(float *x, size_t n, float a, int nt);
void cu_add_or_set(float *dst, const float *src, size_t n, int acc);

void cu_optim_update(const BackendOptStep *s, float *p, const float *g, float *m, float *v, uint16_t *lowp, size_t n);
double cu_sumsq(const float *x, size_t n);

/* The LM head's per-row softmax / cross-entropy on a chunk of m logits rows (leading dimension ld,
 * V real columns): losses[i], and with grad set the logits row replaced by its gradient
 * (softmax − onehot)·dscale (0 on masked rows); probs, when non-NULL, gets row 0's probabilities
 * (device memory, V floats). */
void cu_head_softmax(float *logits, float *losses, const int32_t *targets, int m, int V, int ld, float dscale,
                     int grad, float *probs);

#endif
