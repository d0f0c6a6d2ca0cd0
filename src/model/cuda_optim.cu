/* cuda_optim.cu — the optimizer's elementwise update and the gradient's sum of squares on the GPU
 * (backend.h's optim_update and sumsq): optim.c's AdamW, Adam, SGD and Lion rules, fp32 master
 * weights updated in place and, in the same pass, the bf16 (or fp16) working copy the GEMMs read.
 *
 * The update is elementwise, one thread per parameter, with optim.c's expressions in its order of
 * operations, so each element differs from the CPU's only by the device's sqrtf/division rounding
 * (both IEEE-correct: none in practice). The sum of squares uses optim_l2_norm's partition: one
 * block per 4096-element chunk (a fixed tree inside the block), the chunks' fp32 sums copied to the
 * host and added in double in chunk order: the same bits every run. */
#include <math.h>
#include <stdlib.h>

#include "model/cuda_common.cuh"

#define OPT_TPB 256
#define NORM_CHUNK 4096

__global__ void k_optim_update(BackendOptStep s, float *p, const float *gr, float *mm, float *vv, uint16_t *lowp,
                               size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float b1 = s.beta1, b2 = s.beta2, eps = s.eps, lr = s.lr, wd = s.wd;
    float pi = p[i];
    switch (s.kind) {
    case BACKEND_OPT_ADAMW: {
        float g = gr[i] * s.grad_scale;
        float m1 = b1 * mm[i] + (1.0f - b1) * g;
        float v1 = b2 * vv[i] + (1.0f - b2) * g * g;
        mm[i] = m1, vv[i] = v1;
        float mhat = m1 / s.bc1, vhat = v1 / s.bc2;
        pi -= lr * (mhat / (sqrtf(vhat) + eps) + wd * pi);
        break;
    }
    case BACKEND_OPT_ADAM: {
        float g = gr[i] * s.grad_scale + wd * pi;
        float m1 = b1 * mm[i] + (1.0f - b1) * g;
        float v1 = b2 * vv[i] + (1.0f - b2) * g * g;
        mm[i] = m1, vv[i] = v1;
        pi -= lr * ((m1 / s.bc1) / (sqrtf(v1 / s.bc2) + eps));
        break;
    }
    case BACKEND_OPT_SGD: {
        float g = gr[i] * s.grad_scale + wd * pi;
        float b = (s.momentum > 0 && s.step > 1) ? s.momentum * mm[i] + g : g;
        mm[i] = b;
        pi -= lr * b;
        break;
    }
    case BACKEND_OPT_LION: {
        float g = gr[i] * s.grad_scale;
        float u = b1 * mm[i] + (1.0f - b1) * g;
        float sg = (float)((u > 0.0f) - (u < 0.0f));
        pi -= lr * (sg + wd * pi);
        mm[i] = b2 * mm[i] + (1.0f - b2) * g;
        break;
    }
    }
    p[i] = pi;
    if (lowp && s.lowp == 1) lowp[i] = cu_bf16(pi);
    else if (lowp && s.lowp == 2) lowp[i] = cu_fp16(pi);
}

void cu_optim_update(const BackendOptStep *s, float *p, const float *g, float *m, float *v, uint16_t *lowp, size_t n) {
    if (!cu_ready() || n == 0) return;
    if (s->kind < BACKEND_OPT_ADAMW || s->kind > BACKEND_OPT_LION) {
        cu_fail(ST_ERR_INPUT, "--device cuda: optimizer kind %d has no GPU update (AdamW, Adam, SGD and Lion do)",
                s->kind);
        return;
    }
    k_optim_update<<<cu_blocks(n, OPT_TPB), OPT_TPB, 0, cu_stream()>>>(*s, p, g, m, v, lowp, n);
    CU_LAUNCHED("optim_update");
}

/* One block per chunk: Σ x² of its NORM_CHUNK elements in fp32 (thread strides, then a fixed tree). */
__global__ void k_sumsq_chunks(float *part, const float *x, size_t n) {
    __shared__ float sh[OPT_TPB / 32];
    size_t i0 = (size_t)blockIdx.x * NORM_CHUNK, i1 = i0 + NORM_CHUNK < n ? i0 + NORM_CHUNK : n;
    float s = 0;
    for (size_t i = i0 + threadIdx.x; i < i1; i += OPT_TPB) s += x[i] * x[i];
    s = cu_warp_sum(s);
    if (threadIdx.x % 32 == 0) sh[threadIdx.x / 32] = s;
    __syncthreads();
    if (threadIdx.x < 32) {
        float t = threadIdx.x < OPT_TPB / 32 ? sh[threadIdx.x] : 0.0f;
        t = cu_warp_sum(t);
        if (threadIdx.x == 0) part[blockIdx.x] = t;
    }
}

double cu_sumsq(const float *x, size_t n) {
    if (!cu_ready()) return NAN;
    if (n == 0) return 0.0;
    size_t cap, nchunk = (n + NORM_CHUNK - 1) / NORM_CHUNK;
    float *part = cu_reduce_scratch(&cap);
    if (nchunk > cap || nchunk > 0x7fffffff) {
        cu_fail(ST_ERR_INPUT, "CUDA sumsq: %zu chunks exceed the scratch", nchunk);
        return NAN;
    }
    k_sumsq_chunks<<<(unsigned)nchunk, OPT_TPB, 0, cu_stream()>>>(part, x, n);
    CU_LAUNCHED("sumsq");
    float *h = (float *)malloc(nchunk * sizeof(float));
    if (!h) {
        cu_fail(ST_ERR_RUNTIME, "CUDA sumsq: out of host memory (%zu floats)", nchunk);
        return NAN;
    }
    double total = 0;
    cudaError_t e = cudaMemcpy(h, part, nchunk * sizeof(float), cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) cu_fail(ST_ERR_RUNTIME, "CUDA sumsq: cudaMemcpy: %s", cudaGetErrorString(e));
    else
        for (size_t c = 0; c < nchunk; c++) total += h[c];
    free(h);
    return e == cudaSuccess ? total : NAN;
}
