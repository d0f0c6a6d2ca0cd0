/* matmul.h — the one GEMM entry point of the model (DESIGN.md §6).
 *
 * Row-major C = alpha · op(A) · op(B) + beta · C, op = identity or transpose, beta 0 or 1.
 * Backend: oneDNN's matmul primitive, chosen by measurement (bench/results/gemm.md): it runs
 * AVX-512 kernels on this CPU by itself, where Debian's OpenBLAS falls back to Haswell kernels
 * (4x slower) unless an environment variable is set before the process starts, and it runs bf16
 * on the bf16 dot-product units. Primitives are cached per shape in a small per-thread table (one
 * per thread, so calls from inside an OpenMP region need no lock); inside a parallel region a
 * call runs on the calling thread only. */
#ifndef ST_MODEL_MATMUL_H
#define ST_MODEL_MATMUL_H

#include <stdint.h>

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

/* Sets the thread count of our OpenMP regions and of the GEMM library (one pool: libgomp). */
void mm_set_threads(int n);

/* "oneDNN 2.6.3 (cpu, omp)" for the start record. */
const char *mm_backend_info(void);

#endif
