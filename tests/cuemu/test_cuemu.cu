/* test_cuemu.cu — the CUDA emulator's own checks (tests/cuemu/cuemu.cc; docs/cuda.md section 4).
 * CUDA source, built like the backend's (cu2cc.pl, then the host compiler against the shim
 * headers), so it also checks that rewrite.
 *
 * Oracles are closed forms (sums, lane arithmetic, grid coordinates) and, for the emulated
 * cuBLASLt, a float64 row-major product written here for every transpose pair, fp32 and bf16, with
 * padded leading dimensions. Negative controls, each run here: a missing __syncthreads must give a
 * wrong answer (the scheduler's harshest legal interleaving); the GEMM comparison must fail on a
 * reference with one element scaled by 1.001; what a GPU would not run as written must abort a
 * child process with a message naming it (deadlock, an exchange naming an exited lane, lanes at
 * different exchanges, a write past dynamic shared memory, a host pointer as a kernel argument),
 * and the same child harness must pass a
 * correct kernel; bad launches, copies and cuBLASLt calls must be refused. */
#include <dlfcn.h>
#include <math.h>

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern "C" {
#include "testutil.h"
}

#define check tu_check

/* ---- kernels ---- */

__global__ void k_block_sum(float *out, const float *x, int n) {
    __shared__ float part[32];
    float s = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += x[i];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        float t = 0;
        for (int w = 0; w < (int)blockDim.x / 32; w++) t += part[w];
        out[blockIdx.x] = t;
    }
}

/* Each thread reads its neighbour's shared-memory slot: needs the barrier between write and read. */
__global__ void k_neighbour(float *out, int sync) {
    extern __shared__ float sm[];
    sm[threadIdx.x] = (float)threadIdx.x;
    if (sync) __syncthreads();
    out[threadIdx.x] = sm[(threadIdx.x + 1) % blockDim.x];
}

/* Thread i reads thread i−1's slot without a barrier: right when lower threads run first, wrong
 * in CUEMU_ORDER=reverse (the missing barrier the forward order hides). */
__global__ void k_prev(float *out) {
    extern __shared__ float sm[];
    sm[threadIdx.x] = (float)threadIdx.x;
    out[threadIdx.x] = threadIdx.x ? sm[threadIdx.x - 1] : 0.0f;
}
/* Block b reads block b−1's output: a race between blocks, right only when blocks run in order. */
__global__ void k_chain(float *x) { x[blockIdx.x + 1] = x[blockIdx.x] + 1.0f; }

__global__ void k_lanes(int *out) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, v = lane * 10 + warp;
    int *o = out + threadIdx.x * 7;
    o[0] = __shfl_sync(0xffffffffu, v, 3);
    o[1] = __shfl_xor_sync(0xffffffffu, v, 5);
    o[2] = (int)__ballot_sync(0xffffffffu, lane & 1);
    o[3] = __shfl_sync(0xffffffffu, v, 2, 8);
    o[4] = __syncthreads_or(threadIdx.x == 77);
    o[5] = __any_sync(0xffffffffu, lane == 9 && warp == 1);
    o[6] = 2 * __all_sync(0xffffffffu, lane < 32) + __all_sync(0xffffffffu, lane != 4);
}

__global__ void k_coords(int *out) {
    int b = blockIdx.y * gridDim.x + blockIdx.x, t = threadIdx.y * blockDim.x + threadIdx.x;
    out[b * blockDim.x * blockDim.y + t] = (int)(blockIdx.x + 10 * blockIdx.y + 100 * threadIdx.x + 1000 * threadIdx.y);
}

/* Faults (run in a child): */
__global__ void k_deadlock(int *out) { /* half a warp at the barrier, half at a full-warp shuffle */
    if (threadIdx.x < 16) __syncthreads();
    else out[threadIdx.x] = __shfl_sync(0xffffffffu, (int)threadIdx.x, 0);
}
__global__ void k_exited_lane(int *out) {
    if (threadIdx.x == 5) return;
    out[threadIdx.x] = __shfl_sync(0xffffffffu, (int)threadIdx.x, 0);
}
__global__ void k_mixed(int *out) {
    if (threadIdx.x < 16) out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, (int)threadIdx.x, 1);
    else out[threadIdx.x] = (int)__ballot_sync(0xffffffffu, 1);
}
__global__ void k_smem_overflow(int *out) {
    extern __shared__ float sm[];
    sm[threadIdx.x] = 1.0f; /* 32 threads, 16 floats */
    out[threadIdx.x] = 0;
}
__global__ void k_past_the_end(float *out, const float *x, int n) { out[threadIdx.x] = x[threadIdx.x + n - 16]; }
/* One 16×16 tile: D = A·B + C with A, B bf16 (row-major A, column-major B), from shared memory at
 * byte offset `skew` (32 keeps wmma's 256-bit alignment, 16 breaks it). */
__global__ void k_wmma(float *D, const float *A, const float *B, const float *Cm, int skew) {
    extern __shared__ float sm[];
    __nv_bfloat16 *a = (__nv_bfloat16 *)((char *)sm + skew), *b = a + 256;
    for (int i = threadIdx.x; i < 256; i += 32) a[i] = __float2bfloat16(A[i]), b[i] = __float2bfloat16(B[i]);
    __syncwarp();
    nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, __nv_bfloat16, nvcuda::wmma::row_major> fa;
    nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, __nv_bfloat16, nvcuda::wmma::col_major> fb;
    nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> fc;
    nvcuda::wmma::load_matrix_sync(fa, a, 16);
    nvcuda::wmma::load_matrix_sync(fb, b, 16);
    nvcuda::wmma::load_matrix_sync(fc, Cm, 16, nvcuda::wmma::mem_row_major);
    nvcuda::wmma::mma_sync(fc, fa, fb, fc);
    nvcuda::wmma::store_matrix_sync(D, fc, 16, nvcuda::wmma::mem_row_major);
}
__global__ void k_fine(int *out) { out[threadIdx.x] = __shfl_sync(0xffffffffu, (int)threadIdx.x, 0); }

/* ---- helpers ---- */

static void *dalloc(size_t bytes) {
    void *p = NULL;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
        fprintf(stderr, "test_cuemu: cudaMalloc of %zu bytes failed\n", bytes);
        exit(1);
    }
    return p;
}

/* Runs fn in a child with stderr captured: 1 if it died (SIGABRT, or ASan's exit) and its stderr
 * holds phrase (phrase NULL: 1 if it exited 0). */
static int child(void (*fn)(void), const char *phrase, char *msg, size_t msgn) {
    char path[] = "/tmp/test_cuemu_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return 0;
    fflush(stdout), fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd, 2);
        fn();
        _exit(0); /* not exit: the child's copies of the parent's buffers are not leaks */
    }
    int st = 0;
    waitpid(pid, &st, 0);
    ssize_t n = pread(fd, msg, msgn - 1, 0);
    msg[n > 0 ? n : 0] = 0;
    close(fd), unlink(path);
    char *line = strstr(msg, "cuemu:") ? strstr(msg, "cuemu:") : strstr(msg, "ERROR:") ? strstr(msg, "ERROR:") : msg;
    memmove(msg, line, strlen(line) + 1);
    char *nl = strchr(msg, '\n');
    if (nl) *nl = 0;
    if (!phrase) return WIFEXITED(st) && WEXITSTATUS(st) == 0;
    int died = (WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT) || (WIFEXITED(st) && WEXITSTATUS(st) != 0);
    return died && strstr(msg, phrase) != NULL;
}
static int *g_out;
static void run_deadlock(void) { k_deadlock<<<1, 32>>>(g_out); }
static void run_exited(void) { k_exited_lane<<<1, 32>>>(g_out); }
static void run_mixed(void) { k_mixed<<<1, 32>>>(g_out); }
static void run_overflow(void) { k_smem_overflow<<<1, 32, 16 * sizeof(float)>>>(g_out); }
static void run_fine(void) { k_fine<<<1, 32>>>(g_out); }
static int g_host[32];
static void run_host_pointer(void) { k_fine<<<1, 32>>>(g_host); }
static float *g_wa, *g_wd; /* 256 floats each */
static void run_wmma_misaligned(void) { k_wmma<<<1, 32, 2048>>>(g_wd, g_wa, g_wa, g_wa, 16); }
static float *g_x; /* 1000 floats */
static void run_past_the_end(void) { k_past_the_end<<<1, 32>>>((float *)g_out, g_x, 1000); }

/* ---- the emulated cuBLASLt against a float64 product ---- */

/* A value in [-1, 1] in steps of 0.001 from a 64-bit LCG. */
static float lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1;
    return (float)((*s >> 40) % 2001) / 1000.0f - 1.0f;
}

static float bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    u = ((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16) << 16;
    memcpy(&x, &u, 4);
    return x;
}

/* Column-major D (m, n; ld) = alpha·op(A)·op(B) + beta·C through the emulated library, op(A) (m, k)
 * and op(B) (kb, n) (kb != k: a mismatch); returns the status of the first call that failed. */
static cublasStatus_t lt_gemm(cublasLtHandle_t h, int ta, int tb, int m, int n, int k, int kb, float alpha,
                              const void *A, int lda, const void *B, int ldb, float beta, float *C, int ldc, int bf16,
                              int align, int skew_a) {
    cudaDataType in = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    cublasLtMatmulDesc_t d = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    cublasLtMatmulPreference_t p = NULL;
    int32_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    uint32_t al = (uint32_t)align;
    uint64_t ws = 0;
    cublasLtMatmulHeuristicResult_t r;
    int found = 0;
    cublasStatus_t s = cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (!s) s = cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa);
    if (!s) s = cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb);
    if (!s) s = cublasLtMatrixLayoutCreate(&la, in, ta ? k : m, ta ? m : k, lda);
    if (!s) s = cublasLtMatrixLayoutCreate(&lb, in, tb ? n : kb, tb ? kb : n, ldb);
    if (!s) s = cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, m, n, ldc);
    if (!s) s = cublasLtMatmulPreferenceCreate(&p);
    if (!s) s = cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    for (int i = 0; i < 4 && !s; i++)
        s = cublasLtMatmulPreferenceSetAttribute(
            p, (cublasLtMatmulPreferenceAttributes_t)(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES + i), &al, sizeof al);
    if (!s) s = cublasLtMatmulAlgoGetHeuristic(h, d, la, lb, lc, lc, p, 1, &r, &found);
    if (!s && found < 1) s = CUBLAS_STATUS_NOT_SUPPORTED;
    if (!s)
        s = cublasLtMatmul(h, d, &alpha, (const char *)A + skew_a, la, B, lb, &beta, C, lc, C, lc, &r.algo, NULL, 0,
                           0);
    if (p) cublasLtMatmulPreferenceDestroy(p);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (d) cublasLtMatmulDescDestroy(d);
    return s;
}

static double worst_rel(const float *got, const double *ref, int m, int n, int ld) {
    double w = 0;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double r = ref[j * m + i], e = fabs(got[j * ld + i] - r) / (fabs(r) + 1e-3);
            if (!(e <= w)) w = isnan(e) ? INFINITY : e;
        }
    return w;
}

static void gemm_checks(void) {
    cublasLtHandle_t h;
    void *lib = dlopen("libcublasLt.so.13", RTLD_NOW);
    check(lib && dlsym(lib, "cublasLtMatmul") == (void *)&cublasLtMatmul && !dlsym(lib, "cublasLtNoSuchCall"),
          "dlopen_gives_the_emulated_library", "dlopen/dlsym of libcublasLt.so.13 hand out the emulator's functions");
    cublasLtCreate(&h);
    const int m = 5, n = 7, k = 9, pad = 3;
    uint64_t seed = 12345;
    for (int bf16 = 0; bf16 < 2; bf16++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                int ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
                int lda = ar + pad, ldb = br + pad, ldc = m + pad;
                size_t es = bf16 ? 2 : 4;
                float *ha = (float *)malloc(sizeof(float) * lda * ac), *hb = (float *)malloc(sizeof(float) * ldb * bc);
                float *hc = (float *)malloc(sizeof(float) * ldc * n);
                for (int i = 0; i < lda * ac; i++) ha[i] = lcg(&seed);
                for (int i = 0; i < ldb * bc; i++) hb[i] = lcg(&seed);
                for (int i = 0; i < ldc * n; i++) hc[i] = lcg(&seed);
                if (bf16)
                    for (int i = 0; i < lda * ac; i++) ha[i] = bf16_round(ha[i]);
                if (bf16)
                    for (int i = 0; i < ldb * bc; i++) hb[i] = bf16_round(hb[i]);
                /* device copies in the operand type */
                void *da = dalloc(es * lda * ac), *db = dalloc(es * ldb * bc);
                float *dc = (float *)dalloc(sizeof(float) * ldc * n);
                if (bf16) {
                    uint16_t *t = (uint16_t *)malloc(2 * (size_t)(lda * ac > ldb * bc ? lda * ac : ldb * bc));
                    for (int i = 0; i < lda * ac; i++) {
                        uint32_t u;
                        memcpy(&u, &ha[i], 4);
                        t[i] = (uint16_t)(u >> 16);
                    }
                    cudaMemcpy(da, t, 2 * (size_t)lda * ac, cudaMemcpyHostToDevice);
                    for (int i = 0; i < ldb * bc; i++) {
                        uint32_t u;
                        memcpy(&u, &hb[i], 4);
                        t[i] = (uint16_t)(u >> 16);
                    }
                    cudaMemcpy(db, t, 2 * (size_t)ldb * bc, cudaMemcpyHostToDevice);
                    free(t);
                } else {
                    cudaMemcpy(da, ha, 4 * (size_t)lda * ac, cudaMemcpyHostToDevice);
                    cudaMemcpy(db, hb, 4 * (size_t)ldb * bc, cudaMemcpyHostToDevice);
                }
                cudaMemcpy(dc, hc, 4 * (size_t)ldc * n, cudaMemcpyHostToDevice);
                double *ref = (double *)malloc(sizeof(double) * m * n);
                for (int j = 0; j < n; j++)
                    for (int i = 0; i < m; i++) {
                        double acc = 0;
                        for (int l = 0; l < k; l++) {
                            double a = ta ? ha[i * lda + l] : ha[l * lda + i];
                            double b = tb ? hb[l * ldb + j] : hb[j * ldb + l];
                            acc += a * b;
                        }
                        ref[j * m + i] = 1.5 * acc + 0.5 * hc[j * ldc + i];
                    }
                cublasStatus_t s = lt_gemm(h, ta, tb, m, n, k, k, 1.5f, da, lda, db, ldb, 0.5f, dc, ldc, bf16, 4, 0);
                float *got = (float *)malloc(sizeof(float) * ldc * n);
                cudaMemcpy(got, dc, 4 * (size_t)ldc * n, cudaMemcpyDeviceToHost);
                char nm[64];
                snprintf(nm, sizeof nm, "gemm_%s_%c%c", bf16 ? "bf16" : "fp32", ta ? 'T' : 'N', tb ? 'T' : 'N');
                double w = worst_rel(got, ref, m, n, ldc);
                int pads_kept = 1;
                for (int j = 0; j < n; j++)
                    for (int i = m; i < ldc; i++) pads_kept &= got[j * ldc + i] == hc[j * ldc + i];
                check(s == CUBLAS_STATUS_SUCCESS && w <= 1e-6 && pads_kept, nm,
                      "status %d, worst relative error %.3g against float64 (tol 1e-6), padding rows untouched: %s",
                      (int)s, w, pads_kept ? "yes" : "no");
                ref[(m * n) / 2] *= 1.001;
                double wc = worst_rel(got, ref, m, n, ldc);
                snprintf(nm, sizeof nm, "gemm_%s_%c%c_control", bf16 ? "bf16" : "fp32", ta ? 'T' : 'N', tb ? 'T' : 'N');
                check(wc > 1e-6, nm, "one reference element x1.001: worst error %.3g must exceed 1e-6", wc);
                if (!bf16 && !ta && !tb) {
                    /* beta 0: C is not read (NaN there must not reach D) */
                    cudaMemset(dc, 0xFF, 4 * (size_t)ldc * n);
                    s = lt_gemm(h, 0, 0, m, n, k, k, 1.0f, da, lda, db, ldb, 0.0f, dc, ldc, 0, 4, 0);
                    cudaMemcpy(got, dc, 4 * (size_t)ldc * n, cudaMemcpyDeviceToHost);
                    int nan = 0;
                    for (int j = 0; j < n; j++)
                        for (int i = 0; i < m; i++) nan += isnan(got[j * ldc + i]);
                    check(s == 0 && nan == 0, "gemm_beta0_ignores_C", "status %d, %d NaN in D from a NaN C", (int)s,
                          nan);
                    s = lt_gemm(h, 0, 0, m, n, k, k - 1, 1.0f, da, lda, db, ldb, 0.0f, dc, ldc, 0, 4, 0);
                    check(s != 0, "gemm_refuses_a_shape_mismatch",
                          "op(A) with k columns against op(B) with k - 1 rows: status %d", (int)s);
                    s = lt_gemm(h, 0, 0, m, n, k, k, 1.0f, da, lda, db, ldb, 0.0f, dc, ldc, 0, 16, 4);
                    check(s != 0, "gemm_refuses_a_pointer_below_the_promised_alignment",
                          "A 4 bytes past a 256-byte boundary, 16 promised: status %d", (int)s);
                    s = lt_gemm(h, 0, 0, m, n, k, k, 1.0f, da, m - 1, db, ldb, 0.0f, dc, ldc, 0, 4, 0);
                    check(s != 0, "gemm_refuses_ld_below_rows", "lda %d for %d rows: status %d", m - 1, m, (int)s);
                    s = lt_gemm(h, 0, 0, m, n, k, k, 1.0f, ha, lda, db, ldb, 0.0f, dc, ldc, 0, 4, 0);
                    check(s != 0, "gemm_refuses_host_memory", "A in host memory: status %d", (int)s);
                }
                free(ha), free(hb), free(hc), free(ref), free(got);
                cudaFree(da), cudaFree(db), cudaFree(dc);
            }
    cublasLtMatmulDesc_t d;
    cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    int64_t wide = CUBLAS_OP_T;
    cublasStatus_t s = cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &wide, sizeof wide);
    check(s == CUBLAS_STATUS_INVALID_VALUE, "lt_attribute_size_checked", "TRANSA given 8 bytes: status %d", (int)s);
    cublasLtMatmulDescDestroy(d);
    cublasLtDestroy(h);
}

int main(void) {
    /* block reduction: shuffles, static shared memory, barrier */
    const int n = 1000;
    float *hx = (float *)malloc(n * sizeof(float));
    for (int i = 0; i < n; i++) hx[i] = (float)(i + 1);
    float *dx = (float *)dalloc(n * sizeof(float)), *dsum = (float *)dalloc(3 * sizeof(float));
    cudaMemcpy(dx, hx, n * sizeof(float), cudaMemcpyHostToDevice);
    k_block_sum<<<3, 256>>>(dsum, dx, n);
    float sums[3];
    cudaMemcpy(sums, dsum, sizeof sums, cudaMemcpyDeviceToHost);
    check(cudaGetLastError() == cudaSuccess && sums[0] == 500500.0f && sums[1] == 500500.0f && sums[2] == 500500.0f,
          "block_sum", "3 blocks of 256: %.1f %.1f %.1f (closed form 500500)", sums[0], sums[1], sums[2]);

    /* the barrier, and its negative control */
    float *dn = (float *)dalloc(64 * sizeof(float)), hn[64];
    k_neighbour<<<1, 64, 64 * sizeof(float)>>>(dn, 1);
    cudaMemcpy(hn, dn, sizeof hn, cudaMemcpyDeviceToHost);
    int good = 1;
    for (int i = 0; i < 64; i++) good &= hn[i] == (float)((i + 1) % 64);
    check(good, "barrier_orders_shared_memory", "thread i reads (i+1) mod 64 after __syncthreads");
    k_neighbour<<<1, 64, 64 * sizeof(float)>>>(dn, 0);
    cudaMemcpy(hn, dn, sizeof hn, cudaMemcpyDeviceToHost);
    int wrong = 0;
    for (int i = 0; i < 64; i++) wrong += hn[i] != (float)((i + 1) % 64);
    check(wrong > 0, "missing_barrier_is_caught", "%d of 64 threads read an unwritten (NaN) slot without the barrier",
          wrong);

    /* the order-dependent kernels: both orders are checked, in a child each */
    {
        float hp[64], hc[9];
        int forward_ok = 0, reverse_bad = 0;
        for (int rev = 0; rev < 2; rev++) {
            if (rev) setenv("CUEMU_ORDER", "reverse", 1);
            k_prev<<<1, 64, 64 * sizeof(float)>>>(dn);
            cudaMemcpy(hp, dn, sizeof hp, cudaMemcpyDeviceToHost);
            cudaMemset(dn, 0, 9 * sizeof(float));
            k_chain<<<8, 1>>>(dn);
            cudaMemcpy(hc, dn, sizeof hc, cudaMemcpyDeviceToHost);
            int ok = hc[8] == 8.0f;
            for (int i = 1; i < 64; i++) ok &= hp[i] == (float)(i - 1);
            if (rev) reverse_bad = !ok;
            else forward_ok = ok;
            unsetenv("CUEMU_ORDER");
        }
        check(forward_ok && reverse_bad, "reverse_order_exposes_order_dependence",
              "a missing barrier (thread i reads i-1) and a block reading the previous block: right in the "
              "forward order, wrong in CUEMU_ORDER=reverse");
    }

    /* warp exchanges and __syncthreads_or */
    int *dl = (int *)dalloc(96 * 7 * sizeof(int)), hl[96 * 7];
    k_lanes<<<1, 96>>>(dl);
    cudaMemcpy(hl, dl, sizeof hl, cudaMemcpyDeviceToHost);
    int lanes_ok = 1;
    for (int t = 0; t < 96; t++) {
        int lane = t % 32, warp = t / 32;
        const int *o = hl + t * 7;
        lanes_ok &= o[0] == 3 * 10 + warp && o[1] == (lane ^ 5) * 10 + warp && (unsigned)o[2] == 0xAAAAAAAAu &&
                    o[3] == ((lane & ~7) + 2) * 10 + warp && o[4] == 1 && o[5] == (warp == 1) && o[6] == 2;
    }
    check(lanes_ok, "warp_exchanges", "shfl, shfl_xor, ballot, any, all, width-8 shfl and syncthreads_or on 3 warps");

    /* coordinates */
    int *dcoord = (int *)dalloc(6 * 6 * sizeof(int)), hcoord[36];
    k_coords<<<dim3(3, 2), dim3(3, 2)>>>(dcoord);
    cudaMemcpy(hcoord, dcoord, sizeof hcoord, cudaMemcpyDeviceToHost);
    int coords_ok = 1;
    for (int by = 0; by < 2; by++)
        for (int bx = 0; bx < 3; bx++)
            for (int ty = 0; ty < 2; ty++)
                for (int tx = 0; tx < 3; tx++)
                    coords_ok &= hcoord[(by * 3 + bx) * 6 + ty * 3 + tx] == bx + 10 * by + 100 * tx + 1000 * ty;
    check(coords_ok, "grid_and_block_coordinates", "a 3x2 grid of 3x2 blocks");

    /* faults abort with a message; the same harness passes a correct kernel */
    g_out = (int *)dalloc(64 * sizeof(int));
    char msg[512];
    check(child(run_fine, NULL, msg, sizeof msg), "fault_harness_passes_a_correct_kernel", "exit 0");
    int r = child(run_deadlock, "deadlock", msg, sizeof msg);
    check(r, "deadlock_aborts", "%s", msg);
    r = child(run_exited, "which has exited", msg, sizeof msg);
    check(r, "exchange_with_an_exited_lane_aborts", "%s", msg);
    r = child(run_mixed, "different exchanges", msg, sizeof msg);
    check(r, "lanes_at_different_exchanges_abort", "%s", msg);
    r = child(run_overflow, "past its 64 bytes of dynamic shared memory", msg, sizeof msg);
    check(r, "dynamic_shared_memory_overflow_aborts", "%s", msg);
    r = child(run_host_pointer, "argument 1", msg, sizeof msg);
    check(r && strstr(msg, "is not device memory"), "host_pointer_argument_aborts", "%s", msg);
#if defined(__SANITIZE_ADDRESS__)
    /* device memory is heap memory of exactly the allocation's size: a kernel reading 16 floats past
     * the end of a 1000-float buffer is AddressSanitizer's heap-buffer-overflow */
    g_x = dx;
    r = child(run_past_the_end, "heap-buffer-overflow", msg, sizeof msg);
    check(r, "asan_catches_a_kernel_reading_past_an_allocation", "%s", msg);
#else
    (void)run_past_the_end;
    printf("asan_catches_a_kernel_reading_past_an_allocation: (the ASan tree's check)\n");
#endif

    /* wmma: one tile against a float64 product of the bf16-rounded operands; a pointer off the
     * 256-bit alignment aborts */
    {
        float ha[256], hb[256], hc[256], hd[256];
        uint64_t sd = 99;
        for (int i = 0; i < 256; i++) ha[i] = lcg(&sd), hb[i] = lcg(&sd), hc[i] = lcg(&sd);
        float *da = (float *)dalloc(sizeof ha), *db = (float *)dalloc(sizeof hb), *dc = (float *)dalloc(sizeof hc);
        float *dd = (float *)dalloc(sizeof hd);
        cudaMemcpy(da, ha, sizeof ha, cudaMemcpyHostToDevice);
        cudaMemcpy(db, hb, sizeof hb, cudaMemcpyHostToDevice);
        cudaMemcpy(dc, hc, sizeof hc, cudaMemcpyHostToDevice);
        k_wmma<<<1, 32, 2048>>>(dd, da, db, dc, 32);
        cudaMemcpy(hd, dd, sizeof hd, cudaMemcpyDeviceToHost);
        double w = 0, wt = 0; /* wt: against B read row-major, the layout not asked for (control) */
        for (int i = 0; i < 16; i++)
            for (int j = 0; j < 16; j++) {
                double ref = hc[i * 16 + j], reft = hc[i * 16 + j];
                for (int k = 0; k < 16; k++) { /* B column-major: element (k, j) at j·16 + k */
                    ref += (double)bf16_round(ha[i * 16 + k]) * bf16_round(hb[j * 16 + k]);
                    reft += (double)bf16_round(ha[i * 16 + k]) * bf16_round(hb[k * 16 + j]);
                }
                w = fmax(w, fabs(hd[i * 16 + j] - ref) / (fabs(ref) + 1e-3));
                wt = fmax(wt, fabs(hd[i * 16 + j] - reft) / (fabs(reft) + 1e-3));
            }
        check(cudaGetLastError() == cudaSuccess && w <= 1e-5 && wt > 1e-2, "wmma_tile",
              "16x16x16 bf16 tile: worst error %.3g (fp32 sums, tol 1e-5); against the other layout %.3g (must "
              "exceed 1e-2)",
              w, wt);
        g_wa = da, g_wd = dd;
        r = child(run_wmma_misaligned, "not 256-bit aligned", msg, sizeof msg);
        check(r, "wmma_misaligned_pointer_aborts", "%s", msg);
        /* 64 KiB of shared memory: refused without the opt-in, run with it */
        cudaGetLastError();
        k_wmma<<<1, 32, 64 << 10>>>(dd, da, db, dc, 32);
        cudaError_t without = cudaGetLastError();
        cudaFuncSetAttribute(k_wmma, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 << 10);
        k_wmma<<<1, 32, 64 << 10>>>(dd, da, db, dc, 32);
        cudaError_t with = cudaGetLastError();
        check(without == cudaErrorInvalidConfiguration && with == cudaSuccess, "shared_memory_opt_in",
              "64 KiB without cudaFuncSetAttribute: %d, with it: %d", (int)without, (int)with);
        cudaFree(da), cudaFree(db), cudaFree(dc), cudaFree(dd);
    }

    /* launches a GPU refuses: nothing runs, cudaGetLastError says why */
    cudaGetLastError();
    cudaMemset(dsum, 0, sizeof sums);
    k_block_sum<<<1, 2048>>>(dsum, dx, n);
    cudaError_t e1 = cudaGetLastError();
    k_neighbour<<<1, 64, 64 << 10>>>(dn, 1);
    cudaError_t e2 = cudaGetLastError();
    k_block_sum<<<0, 256>>>(dsum, dx, n);
    cudaError_t e3 = cudaGetLastError();
    k_block_sum<<<1, 256>>>(dsum, dx, n);
    cudaError_t e4 = cudaGetLastError();
    cudaMemcpy(sums, dsum, sizeof sums, cudaMemcpyDeviceToHost);
    check(e1 == cudaErrorInvalidConfiguration && e2 == cudaErrorInvalidConfiguration &&
              e3 == cudaErrorInvalidConfiguration && e4 == cudaSuccess && sums[0] == 500500.0f && sums[1] == 0.0f,
          "bad_launches_refused", "2048 threads: %d, 64 KiB shared: %d, empty grid: %d; a valid launch after: %d",
          (int)e1, (int)e2, (int)e3, (int)e4);

    /* the runtime's memory checks */
    float *fresh = (float *)dalloc(16), hf[4];
    cudaMemcpy(hf, fresh, 16, cudaMemcpyDeviceToHost);
    check(isnan(hf[0]) && isnan(hf[3]), "fresh_device_memory_is_nan", "uninitialised device memory reads as NaN");
    cudaError_t m1 = cudaMemcpy(fresh, hx, 32, cudaMemcpyHostToDevice);
    cudaError_t m2 = cudaMemcpy(hf, hx, 16, cudaMemcpyDeviceToHost);
    cudaError_t m3 = cudaFree((char *)fresh + 4);
    cudaError_t m4 = cudaMemset((char *)fresh + 8, 0, 16);
    cudaError_t m5 = cudaMemcpy(fresh, hx, 16, cudaMemcpyHostToDevice);
    check(m1 == cudaErrorInvalidValue && m2 == cudaErrorInvalidValue && m3 != cudaSuccess &&
              m4 == cudaErrorInvalidValue &&
              m5 == cudaSuccess,
          "runtime_memory_checks",
          "copy past the end: %d, host pointer as the device side: %d, free of an interior pointer: %d, memset past "
          "the end: %d; a valid copy: %d",
          (int)m1, (int)m2, (int)m3, (int)m4, (int)m5);
    cudaGetLastError();

    gemm_checks();
    cudaFree(dx), cudaFree(dsum), cudaFree(dn), cudaFree(dl), cudaFree(dcoord), cudaFree(g_out), cudaFree(fresh);
    free(hx);
    return tu_exit();
}
