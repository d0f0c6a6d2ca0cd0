/* matmul.c — GEMM through OpenBLAS (OpenMP build, so it shares the OpenMP thread pool). */
#include "model/matmul.h"

#include <cblas.h>
#include <stdio.h>

void openblas_set_num_threads(int);
char *openblas_get_config(void);
char *openblas_get_corename(void);

void mm_sgemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc) {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M,
                N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void mm_set_threads(int n) { openblas_set_num_threads(n); }

const char *mm_backend_info(void) {
    static _Thread_local char buf[256]; /* per thread: no shared mutable state */
    snprintf(buf, sizeof buf, "OpenBLAS %s (core %s)", openblas_get_config(), openblas_get_corename());
    return buf;
}
