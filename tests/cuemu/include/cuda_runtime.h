/* cuda_runtime.h — the CPU emulation of CUDA (tests/cuemu; docs/cuda.md section 4): the part of
 * the runtime API and of the device language that the .cu files of src/model use, for the host C++ compiler.
 * A test tool, not a backend: it runs the CUDA backend's own kernels and host code on the CPU so
 * CTest can check them on machines without a GPU. See cuemu.cc for what it checks. */
#ifndef CUEMU_CUDA_RUNTIME_H
#define CUEMU_CUDA_RUNTIME_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifndef __cplusplus
#error "the CUDA emulation is C++ (cu2cc.pl's output)"
#endif

/* ---- runtime API ---- */

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
} cudaError_t;

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
};

typedef struct CUstream_st *cudaStream_t;

struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    int multiProcessorCount;
    int major, minor;
    int warpSize;
    int maxThreadsPerBlock;
};

typedef enum cudaDataType_t { CUDA_R_16F = 2, CUDA_R_32F = 0, CUDA_R_16BF = 14 } cudaDataType;

enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };

cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaSetDevice(int dev);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int dev);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaGetLastError(void);
const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocHost(void **p, size_t bytes);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s = 0);
cudaError_t cudaMemset(void *dst, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void *dst, int value, size_t bytes, cudaStream_t s = 0);
template <class T> static inline cudaError_t cudaMalloc(T **p, size_t bytes) { return cudaMalloc((void **)p, bytes); }
/* The opt-in to more than 48 KiB of dynamic shared memory (up to the H100's 227 KiB), per kernel. */
cudaError_t cuemu_func_set_attribute(const void *fn, int attr, int value);
template <class F> static inline cudaError_t cudaFuncSetAttribute(F *fn, cudaFuncAttribute attr, int value) {
    return cuemu_func_set_attribute((const void *)fn, (int)attr, value);
}

/* ---- the device language ---- */

struct uint3 {
    unsigned x, y, z;
};
struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
/* Block-shared variables: the emulator runs one block at a time (and refuses launches from two host
 * threads at once), so one static instance is the running block's. */
#define __shared__ static

/* The running emulated thread's coordinates (set by the scheduler before each switch). A plain
 * global: one launch runs at a time. */
struct CuemuCoords {
    uint3 thread, block, block_dim, grid_dim;
};
extern CuemuCoords cuemu_xy;
#define threadIdx (cuemu_xy.thread)
#define blockIdx (cuemu_xy.block)
#define blockDim (cuemu_xy.block_dim)
#define gridDim (cuemu_xy.grid_dim)

void __syncthreads(void);
int __syncthreads_or(int pred);
void __syncwarp(unsigned mask = 0xffffffffu);
/* Warp exchanges: every lane of mask must reach the same call (checked); values up to 8 bytes. */
uint64_t cuemu_shfl(unsigned mask, uint64_t v, int arg, int width, int kind);
unsigned __ballot_sync(unsigned mask, int pred);
static inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
static inline int __all_sync(unsigned mask, int pred) { return (__ballot_sync(mask, pred) & mask) == mask; }
template <class T> static inline T cuemu_shfl_t(unsigned mask, T v, int arg, int width, int kind) {
    static_assert(sizeof(T) <= 8, "shuffle of more than 8 bytes");
    uint64_t u = 0;
    memcpy(&u, &v, sizeof v);
    u = cuemu_shfl(mask, u, arg, width, kind);
    memcpy(&v, &u, sizeof v);
    return v;
}
template <class T> static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
    return cuemu_shfl_t(mask, v, src, width, 0);
}
template <class T> static inline T __shfl_xor_sync(unsigned mask, T v, int lanemask, int width = 32) {
    return cuemu_shfl_t(mask, v, lanemask, width, 1);
}

static inline unsigned __float_as_uint(float x) {
    unsigned u;
    memcpy(&u, &x, 4);
    return u;
}
static inline float __uint_as_float(unsigned u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}
/* The product rounded to fp32 (a GPU never fuses it into an FMA); the volatile keeps the host
 * compiler from contracting it either. */
static inline float __fmul_rn(float a, float b) {
    volatile float p = a * b;
    return p;
}
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
static inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }
static inline unsigned long min(unsigned long a, unsigned long b) { return a < b ? a : b; }
static inline unsigned long max(unsigned long a, unsigned long b) { return a > b ? a : b; }

/* ---- launches (cu2cc.pl's rewrite of name<<<grid, block, smem, stream>>>(args)) ---- */

#define CUEMU_STR_(x) #x
#define CUEMU_STR(x) CUEMU_STR_(x)
/* The dynamic shared memory of the running block (the launch's smem bytes, NaN-filled per block). */
void *cuemu_dyn_smem(void);
/* Runs body once per thread of every block, blocks one after another; a bad configuration is
 * recorded for cudaGetLastError and nothing runs, as on a GPU. */
void cuemu_run(const void *fn, const char *name, void (*body)(void *), void *ctx, dim3 grid, dim3 block, size_t smem,
               cudaStream_t s);
/* A kernel's pointer arguments must be NULL or point into device memory: a GPU faults on a host
 * pointer (an illegal address), where the emulator, sharing the host's memory, would not. */
void cuemu_check_ptr(const char *kernel, int index, const void *p);
static inline void cuemu_check_one(const char *, int) {}
template <class T> static inline void cuemu_check_one(const char *k, int i, T *p) {
    cuemu_check_ptr(k, i, (const void *)p);
}
template <class T> static inline void cuemu_check_one(const char *, int, const T &) {}
template <class... A> static inline void cuemu_check_args(const char *kernel, const A &...args) {
    int i = 0;
    (cuemu_check_one(kernel, ++i, args), ...);
}

template <class F>
static inline void cuemu_launch(const void *fn, const char *name, F f, dim3 grid, dim3 block, size_t smem = 0,
                                cudaStream_t s = 0) {
    cuemu_run(fn, name, [](void *c) { (*(F *)c)(); }, &f, grid, block, smem, s);
}

#endif
