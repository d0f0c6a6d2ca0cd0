/* matmul.h — the one GEMM entry point of the model (DESIGN.md §6).
 *
 * Row-major C = alpha · op(A) · op(B) + beta · C with op = identity or transpose. The backend
 * (OpenBLAS, OpenMP build, chosen by measurement: bench/results/gemm.md) is hidden here so it can
 * change without touching the kernels. Called from inside an OpenMP parallel region, it runs on
 * the calling thread only. */
#ifndef ST_MODEL_MATMUL_H
#define ST_MODEL_MATMUL_H

void mm_sgemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc);

/* Sets the GEMM library's thread count (process-wide in the library); the same value is used for
 * our own OpenMP kernels so the two share one pool. */
void mm_set_threads(int n);

/* "OpenBLAS 0.3.21 (openmp, Zen)" or similar, for the start record. */
const char *mm_backend_info(void);

#endif
