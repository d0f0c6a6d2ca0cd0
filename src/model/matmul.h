/* matmul.h — the one GEMM entry point of the model (DESIGN.md §6).
 *
 * Row-major C = alpha · op(A) · op(B) + beta · C, op = identity or transpose, beta 0 or 1.
 * Backend: oneDNN's matmul primitive, chosen by measurement (bench/results/gemm.md): it runs
 * AVX-512 kernels on this CPU by itself, where Debian's OpenBLAS falls back to Haswell kernels
 * (4x slower) unless an environment variable is set before the process starts, and it runs bf16
 * on the bf16 dot-product units. Primitives are cached per shape in a small per-thread table (one
 * per thread, so calls from inside an OpenMP region need no lock); inside a parallel region a
 * call runs on the calling thread only.
 *
 * Errors. A GEMM that cannot run (oneDNN cannot create its primitive: out of memory, a shape it
 * refuses; no memory for the cache; execution fails) does not abort: it leaves C unwritten and
 * records the failure with the GEMM's shape and oneDNN's status. The first failure wins until it
 * is taken. GEMMs run deep inside kernels, many on OpenMP worker threads, which cannot return a
 * status, so the record is process state like the primitive cache (thread-safe), and it is taken
 * between kernels: the model does so after each forward and backward (gpt_status in gpt.h);
 * other callers of the kernels take it themselves. */
#ifndef ST_MODEL_MATMUL_H
#define ST_MODEL_MATMUL_H

#include <stdint.h>

#include "core/status.h"

/* fp32 inputs and output. */
void mm_sgemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc);

/* bf16 inputs (raw uint16 bit patterns), fp32 output and accumulation. */
void mm_gemm_bf16(int trans_a, int trans_b, int M, int N, int K, float alpha, const uint16_t *A, int lda,
                  const uint16_t *B, int ldb, float beta, float *C, int ldc);

/* A linear layer's forward in one primitive: C (M, N) = A (M, K) · W^T (W is (N, K)) + bias (N;
 * may be NULL), the bias added inside the GEMM instead of in a second pass over C. */
void mm_linear(int M, int N, int K, const float *A, const float *W, const float *bias, float *C);
void mm_linear_bf16(int M, int N, int K, const uint16_t *A, const uint16_t *W, const float *bias, float *C);

/* The first GEMM failure since the last call, as ST_ERR_RUNTIME with its message (e.g.
 * "GEMM 64x96x32 (fp32, A·B^T + bias): oneDNN out_of_memory creating the primitive"), which it
 * forgets; ST_OK if none. Call it from one thread while no GEMM runs. */
Status mm_take_error(Err *err);

/* Test-only fault: the n-th GEMM call from now (n >= 1, counted over all threads) fails as if
 * oneDNN had run out of memory creating its primitive; 0 cancels. */
void mm_fail_after(long n);

/* Sets the thread count of our OpenMP regions and of the GEMM library (one pool: libgomp). */
void mm_set_threads(int n);

/* "oneDNN 2.6.3 (cpu, omp)" for the start record. */
const char *mm_backend_info(void);

#endif
