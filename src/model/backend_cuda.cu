/* backend_cuda.cu — the CUDA backend of the model's seam (backend.h; docs/cuda.md): device memory
 * of one GPU, the GEMMs through cuBLASLt, the layer kernels of cuda_kernels.cu and
 * cuda_attention.cu, and the table that names them.
 *
 * Process state. Like matmul.c's primitive cache and failure record, the backend keeps one
 * process-wide state: the device, cuBLASLt's handle (the library is opened with dlopen at the
 * first use, so programs that never use the GPU do not load its 500 MB), a GEMM workspace, a
 * private reduction scratch, the GEMM plan cache and the first failure. The device is opened at the
 * first entry that needs it (cu_ready): on a machine without a GPU the table exists and every entry
 * records "no usable GPU" instead of running. The model calls the backend from one host thread.
 *
 * Memory the model's layout does not size: the cuBLASLt workspace (CU_GEMM_WS bytes) and the
 * reduction scratch (CU_REDUCE_FLOATS floats, the column sums' partials and the head's
 * probabilities), both allocated once at open and not counted in any MemStats: their sizes are
 * backend.h's BACKEND_CUDA_* constants, which `plan` adds to a GPU's bytes as its own line.
 *
 * GEMMs. Row-major C = alpha·op(A)·op(B) + beta·C is the column-major C^T = op(B)^T·op(A)^T, so
 * cuBLASLt gets (B, A) with the roles swapped and no copy. Compute type CUBLAS_COMPUTE_32F
 * (not _FAST_TF32): fp32 operands are multiplied in fp32, the exact mode the CPU comparisons use;
 * bf16 operands run with fp32 accumulation and fp32 output. Split-K reductions
 * that use atomics (CUBLASLT_REDUCTION_SCHEME_INPLACE) are excluded so a run repeats bit for bit.
 * Each shape's plan (descriptors, layouts, heuristic's algorithm) is cached. */
#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>

#include "model/cuda_common.cuh"

#define CU_GEMM_WS BACKEND_CUDA_GEMM_WS_BYTES /* backend.h: plan counts them */
#define CU_REDUCE_FLOATS (BACKEND_CUDA_REDUCE_BYTES / sizeof(float))
#define CU_PLANS 256
#define CU_HOST_STAGE 65536 /* floats: sum_ordered's host staging */
#ifndef ST_CUDA_LIBDIR /* CMake passes the toolkit's library folder (CUDAToolkit_LIBRARY_DIR) */
#define ST_CUDA_LIBDIR "/usr/local/cuda/lib64"
#endif

/* cuBLASLt's entry points, taken from the library opened at run time. */
typedef struct {
    void *lib;
    decltype(&cublasLtCreate) create;
    decltype(&cublasLtDestroy) destroy;
    decltype(&cublasLtMatmulDescCreate) desc_create;
    decltype(&cublasLtMatmulDescDestroy) desc_destroy;
    decltype(&cublasLtMatmulDescSetAttribute) desc_set;
    decltype(&cublasLtMatrixLayoutCreate) layout_create;
    decltype(&cublasLtMatrixLayoutDestroy) layout_destroy;
    decltype(&cublasLtMatmulPreferenceCreate) pref_create;
    decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy;
    decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set;
    decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic;
    decltype(&cublasLtMatmul) matmul;
} LtApi;

/* One GEMM shape's cuBLASLt plan. */
typedef struct {
    int ta, tb, M, N, K, lda, ldb, ldc, bf16, align;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
} GemmPlan;

static struct {
    int state; /* 0: not opened, 1: open, -1: opening failed (why in open_msg) */
    char open_msg[512];
    int device;
    LtApi lt;
    cublasLtHandle_t handle;
    void *ws;
    float *reduce;
    float *host_stage;
    GemmPlan plans[CU_PLANS];
    int nplans;
    Err first; /* the first failure since the last take */
} G;

/* ------------------------------------------------------------------------------------------ */
/* Failures and the device                                                                    */
/* ------------------------------------------------------------------------------------------ */

void cu_fail(Status st, const char *fmt, ...) {
    if (G.first.status != ST_OK) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(G.first.msg, sizeof G.first.msg, fmt, ap);
    va_end(ap);
    G.first.status = st;
}

cudaStream_t cu_stream(void) { return 0; } /* the legacy default stream: ordered with cudaMemcpy */

float *cu_reduce_scratch(size_t *floats) {
    *floats = CU_REDUCE_FLOATS;
    return G.reduce;
}

/* What an open that failed part-way had got: the workspace and scratch (64 MiB of the GPU), the
 * pinned staging buffer, the cuBLASLt handle and library. The process may go on without the GPU
 * (the message reaches the caller as an error, not an exit), so they are not held until exit. */
static void open_release(void) {
    if (G.host_stage) cudaFreeHost(G.host_stage);
    if (G.reduce) cudaFree(G.reduce);
    if (G.ws) cudaFree(G.ws);
    if (G.handle && G.lt.destroy) G.lt.destroy(G.handle);
    if (G.lt.lib) dlclose(G.lt.lib);
    G.host_stage = NULL, G.reduce = NULL, G.ws = NULL, G.handle = NULL;
    memset(&G.lt, 0, sizeof G.lt);
}

static int open_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int open_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(G.open_msg, sizeof G.open_msg, fmt, ap);
    va_end(ap);
    open_release();
    G.state = -1;
    return 0;
}

#define LT_SYM(field, name)                                                                  \
    do {                                                                                     \
        *(void **)&G.lt.field = dlsym(G.lt.lib, name);                                       \
        if (!G.lt.field) return open_fail("CUDA backend: %s has no symbol %s", lib, name);   \
    } while (0)

static int open_device(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n < 1)
        return open_fail("CUDA backend: no usable GPU (cudaGetDeviceCount: %s, %d devices)",
                         e != cudaSuccess ? cudaGetErrorString(e) : "ok", n);
    /* Which GPU: ST_CUDA_DEVICE when set; else, under a launcher, the process's rank on its node
     * modulo the GPUs it sees (Open MPI's mpirun, then Slurm's srun), so ranks spread over a node's
     * GPUs and share them round-robin when there are fewer GPUs than ranks (two ranks on one GPU
     * both use device 0); else device 0 (docs/cuda.md §6, "Several processes"). */
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    if (!local) local = getenv("SLURM_LOCALID");
    Err pe;
    G.device = backend_device_index(getenv("ST_CUDA_DEVICE"), local, n, &pe);
    if (G.device < 0) return open_fail("CUDA backend: %s", pe.msg);
    if ((e = cudaSetDevice(G.device)) != cudaSuccess)
        return open_fail("CUDA backend: cudaSetDevice(%d): %s", G.device, cudaGetErrorString(e));
    /* By soname first (the loader's path: LD_LIBRARY_PATH, ld.so.conf), then in the toolkit's
     * library folder this program was built against (ST_CUDA_LIBDIR, from CMake), so a machine
     * whose ld.so.conf does not list /usr/local/cuda/lib64 still finds it. */
    const char *lib = "libcublasLt.so.13";
    G.lt.lib = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    char first_err[256];
    snprintf(first_err, sizeof first_err, "%s", G.lt.lib ? "" : dlerror());
    static char path[512];
    if (!G.lt.lib) {
        snprintf(path, sizeof path, "%s/libcublasLt.so.13", ST_CUDA_LIBDIR);
        lib = path;
        G.lt.lib = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    }
    if (!G.lt.lib)
        return open_fail("CUDA backend: cannot open libcublasLt.so.13 (by soname: %s; then %s: %s)", first_err, lib,
                         dlerror());
    LT_SYM(create, "cublasLtCreate");
    LT_SYM(destroy, "cublasLtDestroy");
    LT_SYM(desc_create, "cublasLtMatmulDescCreate");
    LT_SYM(desc_destroy, "cublasLtMatmulDescDestroy");
    LT_SYM(desc_set, "cublasLtMatmulDescSetAttribute");
    LT_SYM(layout_create, "cublasLtMatrixLayoutCreate");
    LT_SYM(layout_destroy, "cublasLtMatrixLayoutDestroy");
    LT_SYM(pref_create, "cublasLtMatmulPreferenceCreate");
    LT_SYM(pref_destroy, "cublasLtMatmulPreferenceDestroy");
    LT_SYM(pref_set, "cublasLtMatmulPreferenceSetAttribute");
    LT_SYM(heuristic, "cublasLtMatmulAlgoGetHeuristic");
    LT_SYM(matmul, "cublasLtMatmul");
    cublasStatus_t s = G.lt.create(&G.handle);
    if (s != CUBLAS_STATUS_SUCCESS) return open_fail("CUDA backend: cublasLtCreate failed (status %d)", (int)s);
    if ((e = cudaMalloc(&G.ws, CU_GEMM_WS)) != cudaSuccess ||
        (e = cudaMalloc((void **)&G.reduce, CU_REDUCE_FLOATS * sizeof(float))) != cudaSuccess)
        return open_fail("CUDA backend: cudaMalloc of its %zu MiB of workspace: %s",
                         (CU_GEMM_WS + CU_REDUCE_FLOATS * sizeof(float)) >> 20, cudaGetErrorString(e));
    if ((e = cudaMallocHost((void **)&G.host_stage, CU_HOST_STAGE * sizeof(float))) != cudaSuccess)
        return open_fail("CUDA backend: cudaMallocHost: %s", cudaGetErrorString(e));
    G.state = 1;
    return 1;
}

int cu_ready(void) {
    if (G.state == 0) open_device();
    if (G.state == 1) return 1;
    cu_fail(ST_ERR_RUNTIME, "%s", G.open_msg);
    return 0;
}

Status cu_take_error(Err *err) {
    if (G.state == 1) {
        /* Kernel faults are asynchronous: wait for the work so far, so they are reported here. */
        cudaError_t e = cudaDeviceSynchronize();
        if (e != cudaSuccess) cu_fail(ST_ERR_RUNTIME, "CUDA: a kernel failed: %s", cudaGetErrorString(e));
    }
    Status st = G.first.status;
    if (st != ST_OK && err) *err = G.first;
    G.first.status = ST_OK, G.first.msg[0] = 0;
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* Memory                                                                                     */
/* ------------------------------------------------------------------------------------------ */

static void *cu_alloc(MemStats *ms, MemCategory c, size_t bytes) {
    if (!bytes || !cu_ready()) return NULL;
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        cudaGetLastError(); /* out of memory is not sticky: clear it */
        cu_fail(ST_ERR_RUNTIME, "CUDA: cudaMalloc of %zu bytes (%s): %s", bytes, mem_category_name(c),
                cudaGetErrorString(e));
        return NULL;
    }
    if ((e = cudaMemset(p, 0, bytes)) != cudaSuccess) {
        cu_fail(ST_ERR_RUNTIME, "CUDA: cudaMemset of %zu bytes: %s", bytes, cudaGetErrorString(e));
        cudaFree(p);
        return NULL;
    }
    if (ms) {
        ms->bytes[c] += bytes;
        if (ms->bytes[c] > ms->peak[c]) ms->peak[c] = ms->bytes[c];
    }
    return p;
}

static void cu_free(MemStats *ms, MemCategory c, void *p, size_t bytes) {
    if (!p) return;
    CU_TRY(cudaFree(p));
    if (ms) ms->bytes[c] -= bytes;
}

static void cu_copy(void *dst, const void *src, size_t bytes) {
    if (bytes && cu_ready()) CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cu_stream()));
}
static void cu_zero(void *dst, size_t bytes) {
    if (bytes && cu_ready()) CU_TRY(cudaMemsetAsync(dst, 0, bytes, cu_stream()));
}
static void cu_to_host(void *host, const void *src, size_t bytes) {
    if (bytes && cu_ready()) CU_TRY(cudaMemcpy(host, src, bytes, cudaMemcpyDeviceToHost));
}
static void cu_from_host(void *dst, const void *host, size_t bytes) {
    if (bytes && cu_ready()) CU_TRY(cudaMemcpy(dst, host, bytes, cudaMemcpyHostToDevice));
}
/* cudaGetDeviceProperties' name of the open device ("CUDA (no usable GPU)" when it cannot open). */
static const char *cu_device_name(void) {
    static char name[256];
    cudaDeviceProp p;
    if (!cu_ready() || cudaGetDeviceProperties(&p, G.device) != cudaSuccess)
        return snprintf(name, sizeof name, "CUDA (no usable GPU)"), name;
    snprintf(name, sizeof name, "%s", p.name);
    return name;
}

static void cu_sync(void) {
    if (G.state == 1) CU_TRY(cudaDeviceSynchronize());
}

/* Σ x in index order in double, on the host: the loss sum is B·T floats, one copy. */
static double cu_sum_ordered(const float *x, size_t n) {
    double sum = 0;
    if (!cu_ready()) return NAN;
    for (size_t i0 = 0; i0 < n; i0 += CU_HOST_STAGE) {
        size_t m = n - i0 < CU_HOST_STAGE ? n - i0 : CU_HOST_STAGE;
        cudaError_t e = cudaMemcpy(G.host_stage, x + i0, m * sizeof(float), cudaMemcpyDeviceToHost);
        if (e != cudaSuccess) {
            cu_fail(ST_ERR_RUNTIME, "CUDA sum_ordered: cudaMemcpy: %s", cudaGetErrorString(e));
            return NAN;
        }
        for (size_t i = 0; i < m; i++) sum += G.host_stage[i];
    }
    return sum;
}

/* ------------------------------------------------------------------------------------------ */
/* GEMMs                                                                                      */
/* ------------------------------------------------------------------------------------------ */

/* The largest power of two (<= 256) that divides every pointer: the alignment the plan may assume. */
static int ptr_align(const void *a, const void *b, const void *c) {
    uintptr_t u = (uintptr_t)a | (uintptr_t)b | (uintptr_t)c | 256;
    return (int)(u & (~u + 1));
}

static GemmPlan *gemm_plan(int ta, int tb, int M, int N, int K, int lda, int ldb, int ldc, int bf16, int align,
                           GemmPlan *tmp) {
    for (int i = 0; i < G.nplans; i++) {
        GemmPlan *p = &G.plans[i];
        if (p->ta == ta && p->tb == tb && p->M == M && p->N == N && p->K == K && p->lda == lda && p->ldb == ldb &&
            p->ldc == ldc && p->bf16 == bf16 && p->align == align)
            return p;
    }
    GemmPlan *p = G.nplans < CU_PLANS ? &G.plans[G.nplans] : tmp;
    memset(p, 0, sizeof *p);
    p->ta = ta, p->tb = tb, p->M = M, p->N = N, p->K = K, p->lda = lda, p->ldb = ldb, p->ldc = ldc, p->bf16 = bf16;
    p->align = align;
    cudaDataType_t in = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    cublasComputeType_t ct = CUBLAS_COMPUTE_32F; /* not _FAST_TF32: fp32 operands stay fp32 */
    cublasOperation_t opa = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasStatus_t s = G.lt.desc_create(&p->desc, ct, CUDA_R_32F);
    if (s == CUBLAS_STATUS_SUCCESS) s = G.lt.desc_set(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa);
    if (s == CUBLAS_STATUS_SUCCESS) s = G.lt.desc_set(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb);
    /* Lt's A is our B, stored (N, K) column-major when tb = 0; Lt's B is our A, (K, M) when ta = 0. */
    if (s == CUBLAS_STATUS_SUCCESS) s = G.lt.layout_create(&p->la, in, tb ? K : N, tb ? N : K, ldb);
    if (s == CUBLAS_STATUS_SUCCESS) s = G.lt.layout_create(&p->lb, in, ta ? M : K, ta ? K : M, lda);
    if (s == CUBLAS_STATUS_SUCCESS) s = G.lt.layout_create(&p->lc, CUDA_R_32F, N, M, ldc);
    cublasLtMatmulPreference_t pref = NULL;
    if (s == CUBLAS_STATUS_SUCCESS) s = G.lt.pref_create(&pref);
    size_t ws = CU_GEMM_WS;
    uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE |
                       CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE;
    uint32_t al = (uint32_t)align;
    if (s == CUBLAS_STATUS_SUCCESS)
        s = G.lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = G.lt.pref_set(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes, sizeof schemes);
    if (s == CUBLAS_STATUS_SUCCESS) s = G.lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, sizeof al);
    if (s == CUBLAS_STATUS_SUCCESS) s = G.lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al, sizeof al);
    if (s == CUBLAS_STATUS_SUCCESS) s = G.lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al, sizeof al);
    if (s == CUBLAS_STATUS_SUCCESS) s = G.lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al, sizeof al);
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    if (s == CUBLAS_STATUS_SUCCESS) s = G.lt.heuristic(G.handle, p->desc, p->la, p->lb, p->lc, p->lc, pref, 1, &res, &found);
    if (pref) G.lt.pref_destroy(pref);
    if (s != CUBLAS_STATUS_SUCCESS || found < 1) {
        cu_fail(ST_ERR_RUNTIME, "GEMM %dx%dx%d (%s, %s%s, align %d): cuBLASLt found no algorithm (status %d)", M, N, K,
                bf16 ? "bf16" : "fp32", ta ? "A^T" : "A", tb ? "·B^T" : "·B", align, (int)s);
        if (p->desc) G.lt.desc_destroy(p->desc);
        if (p->la) G.lt.layout_destroy(p->la);
        if (p->lb) G.lt.layout_destroy(p->lb);
        if (p->lc) G.lt.layout_destroy(p->lc);
        return NULL;
    }
    p->algo = res.algo;
    if (p != tmp) G.nplans++;
    return p;
}

/* Row-major C (M, N) = alpha·op(A)·op(B) + beta·C; A, B fp32 or bf16 bits (bf16 = 1). */
static void cu_gemm(int ta, int tb, int M, int N, int K, float alpha, const void *A, int lda, const void *B, int ldb,
                    float beta, float *C, int ldc, int bf16) {
    if (!cu_ready() || M == 0 || N == 0) return;
    if (K == 0) { /* no products: C = beta·C */
        if (beta == 0.0f)
            for (int i = 0; i < M; i++) CU_TRY(cudaMemsetAsync(C + (size_t)i * ldc, 0, (size_t)N * sizeof(float)));
        return;
    }
    GemmPlan tmp, *p = gemm_plan(ta, tb, M, N, K, lda, ldb, ldc, bf16, ptr_align(A, B, C), &tmp);
    if (!p) return;
    cublasStatus_t s = G.lt.matmul(G.handle, p->desc, &alpha, B, p->la, A, p->lb, &beta, C, p->lc, C, p->lc, &p->algo,
                                   G.ws, CU_GEMM_WS, cu_stream());
    if (s != CUBLAS_STATUS_SUCCESS)
        cu_fail(ST_ERR_RUNTIME, "GEMM %dx%dx%d (%s): cublasLtMatmul failed (status %d)", M, N, K, bf16 ? "bf16" : "fp32",
                (int)s);
    CU_LAUNCHED("cublasLtMatmul");
    if (p == &tmp) {
        G.lt.desc_destroy(p->desc);
        G.lt.layout_destroy(p->la), G.lt.layout_destroy(p->lb), G.lt.layout_destroy(p->lc);
    }
}

/* ---- the linear layers (kernels.h), as the CPU composes them ---- */

static void cu_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC,
                              int nt) {
    cu_gemm(0, 1, N, OC, C, 1.0f, inp, C, w, C, 0.0f, out, OC, 0);
    if (bias) cu_bias_add_rows(out, bias, N, OC, nt);
}

static void cu_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                               const float *w, int N, int C, int OC, int acc) {
    if (dinp) cu_gemm(0, 0, N, C, OC, 1.0f, dout, OC, w, C, 0.0f, dinp, C, 0);
    if (dw) cu_gemm(1, 0, OC, C, N, 1.0f, dout, OC, inp, C, acc ? 1.0f : 0.0f, dw, C, 0);
    if (dbias) cu_colsum(dbias, dout, N, OC, acc);
}

static void cu_matmul_forward_lp(float *out, const uint16_t *inp_lp, const uint16_t *w_lp, const float *bias, int N,
                                 int C, int OC) {
    cu_gemm(0, 1, N, OC, C, 1.0f, inp_lp, C, w_lp, C, 0.0f, out, OC, 1);
    if (bias) cu_bias_add_rows(out, bias, N, OC, 1);
}

static void cu_matmul_backward_lp(float *dinp, float *dw, const uint16_t *dout_lp, const uint16_t *inp_lp,
                                  const uint16_t *w_lp, int N, int C, int OC, int acc) {
    if (dinp) cu_gemm(0, 0, N, C, OC, 1.0f, dout_lp, OC, w_lp, C, 0.0f, dinp, C, 1);
    if (dw) cu_gemm(1, 0, OC, C, N, 1.0f, dout_lp, OC, inp_lp, C, acc ? 1.0f : 0.0f, dw, C, 1);
}

static void cu_matmul_forward_p(const MatPrec *mp, float *out, const float *inp, const float *w, const uint16_t *w_lp,
                                const float *bias, int N, int C, int OC, int nt) {
    if (mp && mp->fp16) { /* fp16 storage emulated as on the CPU: operands rounded, fp32 GEMM */
        cu_round_fp16(mp->fa, inp, (size_t)N * C);
        cu_widen_fp16(mp->fw, w_lp, (size_t)OC * C);
        cu_matmul_forward(out, mp->fa, mp->fw, bias, N, C, OC, nt);
    } else if (!mp || !mp->bf16) {
        cu_matmul_forward(out, inp, w, bias, N, C, OC, nt);
    } else {
        cu_cast_bf16(mp->a, inp, (size_t)N * C, nt);
        cu_matmul_forward_lp(out, mp->a, w_lp, bias, N, C, OC);
    }
}

static void cu_matmul_backward_p(const MatPrec *mp, float *dinp, float *dw, float *dbias, const float *dout,
                                 const float *inp, const float *w, const uint16_t *w_lp, int N, int C, int OC, int acc,
                                 int nt) {
    if (mp && mp->fp16) {
        cu_round_fp16(mp->fa, dout, (size_t)N * OC);
        cu_round_fp16(mp->fb, inp, (size_t)N * C);
        cu_widen_fp16(mp->fw, w_lp, (size_t)OC * C);
        cu_matmul_backward(dinp, dw, dbias, mp->fa, mp->fb, mp->fw, N, C, OC, acc);
    } else if (!mp || !mp->bf16) {
        cu_matmul_backward(dinp, dw, dbias, dout, inp, w, N, C, OC, acc);
    } else {
        if (dbias) cu_cast_bf16_colsum(mp->a, dbias, NULL, dout, N, OC, acc, nt);
        else cu_cast_bf16(mp->a, dout, (size_t)N * OC, nt);
        cu_cast_bf16(mp->b, inp, (size_t)N * C, nt);
        cu_matmul_backward_lp(dinp, dw, mp->a, mp->b, w_lp, N, C, OC, acc);
    }
}

/* ---- the fused LM head ---- */

static void cu_head_forward_backward_p(const MatPrec *mp, float *losses, float *dx, float *dwte, float *logits,
                                       const float *x, const float *wte, const uint16_t *wte_lp,
                                       const int32_t *targets, int n, int C, int V, int Vp, float dscale, int chunk,
                                       int acc, int nt, float *probs_out, const HeadSample *smp, double *ms_fwd,
                                       double *ms_bwd) {
    if (!cu_ready()) return;
    if (smp) {
        cu_fail(ST_ERR_INPUT, "--device cuda: sampled labels (Sophia's estimator) are not implemented on the GPU");
        return;
    }
    if (probs_out && (size_t)V > CU_REDUCE_FLOATS) {
        cu_fail(ST_ERR_INPUT, "CUDA head: probabilities of %d classes exceed the scratch", V);
        return;
    }
    int fp16 = mp && mp->fp16, bf16 = mp && mp->bf16 && !fp16;
    if (fp16) cu_widen_fp16(mp->fw, wte_lp, (size_t)V * C);
    for (int r0 = 0; r0 < n; r0 += chunk) {
        int m = n - r0 < chunk ? n - r0 : chunk;
        float beta = acc || r0 > 0 ? 1.0f : 0.0f;
        const float *xc = x + (size_t)r0 * C;
        /* logits (m, V; ld Vp) = x_c · wte^T; padded columns are never computed or read */
        if (bf16) {
            cu_cast_bf16(mp->b, xc, (size_t)m * C, nt);
            cu_gemm(0, 1, m, V, C, 1.0f, mp->b, C, wte_lp, C, 0.0f, logits, Vp, 1);
        } else if (fp16) {
            cu_round_fp16(mp->fb, xc, (size_t)m * C);
            cu_gemm(0, 1, m, V, C, 1.0f, mp->fb, C, mp->fw, C, 0.0f, logits, Vp, 0);
        } else {
            cu_gemm(0, 1, m, V, C, 1.0f, xc, C, wte, C, 0.0f, logits, Vp, 0);
        }
        cu_head_softmax(logits, losses + r0, targets + r0, m, V, Vp, dscale, dx != NULL,
                        probs_out && r0 == 0 ? G.reduce : NULL);
        if (!dx) continue;
        float *dxc = dx + (size_t)r0 * C;
        /* dwte NULL: a frozen head (LoRA's base, as kernels_head.c), its weight gradient skipped */
        if (fp16) {
            cu_round_fp16(mp->fa, logits, (size_t)m * Vp);
            cu_gemm(0, 0, m, C, V, 1.0f, mp->fa, Vp, mp->fw, C, 0.0f, dxc, C, 0);
            if (dwte) cu_gemm(1, 0, V, C, m, 1.0f, mp->fa, Vp, mp->fb, C, beta, dwte, C, 0);
        } else if (bf16) {
            cu_cast_bf16(mp->a, logits, (size_t)m * Vp, nt);
            cu_gemm(0, 0, m, C, V, 1.0f, mp->a, Vp, wte_lp, C, 0.0f, dxc, C, 1);
            if (dwte) cu_gemm(1, 0, V, C, m, 1.0f, mp->a, Vp, mp->b, C, beta, dwte, C, 1);
        } else {
            cu_gemm(0, 0, m, C, V, 1.0f, logits, Vp, wte, C, 0.0f, dxc, C, 0);
            if (dwte) cu_gemm(1, 0, V, C, m, 1.0f, logits, Vp, xc, C, beta, dwte, C, 0);
        }
    }
    if (probs_out && n > 0) CU_TRY(cudaMemcpy(probs_out, G.reduce, (size_t)V * sizeof(float), cudaMemcpyDeviceToHost));
    (void)ms_fwd, (void)ms_bwd; /* host timers would measure launches, not kernels: left to the caller */
}

static void cu_head_forward_backward(float *losses, float *dx, float *dwte, float *logits, const float *x,
                                     const float *wte, const int32_t *targets, int n, int C, int V, int Vp,
                                     float dscale, int chunk, int acc, int nt, float *probs_out, double *ms_fwd,
                                     double *ms_bwd) {
    cu_head_forward_backward_p(NULL, losses, dx, dwte, logits, x, wte, NULL, targets, n, C, V, Vp, dscale, chunk, acc,
                               nt, probs_out, NULL, ms_fwd, ms_bwd);
}

static void cu_head_forward_backward_vp(const MatPrec *mp, float *losses, float *dx, float *dwte, float *logits,
                                        float *stats, const float *x, const float *wte, const uint16_t *wte_lp,
                                        const int32_t *targets, int n, int C, int v0, int Vr, int Vl, float dscale,
                                        int chunk, int acc, int nt, HeadReduceFn reduce, void *ctx, double *ms_fwd,
                                        double *ms_bwd) {
    cu_fail(ST_ERR_INPUT, "--device cuda: tensor parallelism (the vocabulary-parallel head) is not implemented on the GPU");
}

/* ------------------------------------------------------------------------------------------ */
/* The table                                                                                  */
/* ------------------------------------------------------------------------------------------ */

static const Backend CUDA_BACKEND = {
    .name = "cuda",
    .host_addressable = 0,
    .alloc = cu_alloc,
    .free = cu_free,
    .copy = cu_copy,
    .zero = cu_zero,
    .to_host = cu_to_host,
    .from_host = cu_from_host,
    .sync = cu_sync,
    .device_name = cu_device_name,
    .take_error = cu_take_error,
    .scale_inplace = cu_scale_inplace,
    .sum_ordered = cu_sum_ordered,
    .add_or_set = cu_add_or_set,
    .encoder_forward = cu_encoder_forward,
    .encoder_backward = cu_encoder_backward,
    .encoder_forward_vp = cu_encoder_forward_vp,
    .encoder_backward_vp = cu_encoder_backward_vp,
    .layernorm_forward = cu_layernorm_forward,
    .layernorm_forward_bf16 = cu_layernorm_forward_bf16,
    .residual_layernorm_forward = cu_residual_layernorm_forward,
    .residual_layernorm_forward_bf16 = cu_residual_layernorm_forward_bf16,
    .layernorm_backward = cu_layernorm_backward,
    .rmsnorm_forward = cu_rmsnorm_forward,
    .rmsnorm_forward_bf16 = cu_rmsnorm_forward_bf16,
    .residual_rmsnorm_forward = cu_residual_rmsnorm_forward,
    .residual_rmsnorm_forward_bf16 = cu_residual_rmsnorm_forward_bf16,
    .rmsnorm_backward = cu_rmsnorm_backward,
    .rope_table = cu_rope_table,
    .rope_forward = cu_rope_forward,
    .rope_backward = cu_rope_backward,
    .swiglu_forward = cu_swiglu_forward,
    .swiglu_forward_bf16 = cu_swiglu_forward_bf16,
    .swiglu_backward = cu_swiglu_backward,
    .swiglu_backward_bf16 = cu_swiglu_backward_bf16,
    .attention_forward = cu_attention_forward,
    .attention_backward = cu_attention_backward,
    .attention_decode = cu_attention_decode,
    .gelu_forward = cu_gelu_forward,
    .gelu_backward = cu_gelu_backward,
    .gelu_forward_bf16 = cu_gelu_forward_bf16,
    .gelu_backward_bf16 = cu_gelu_backward_bf16,
    .bias_add_rows = cu_bias_add_rows,
    .residual_forward = cu_residual_forward,
    .dropout_backward = cu_dropout_backward,
    .cast_bf16 = cu_cast_bf16,
    .cast_bf16_colsum = cu_cast_bf16_colsum,
    .cast_fp16 = cu_cast_fp16,
    .matmul_forward = cu_matmul_forward,
    .matmul_forward_lp = cu_matmul_forward_lp,
    .matmul_backward_lp = cu_matmul_backward_lp,
    .matmul_forward_p = cu_matmul_forward_p,
    .matmul_backward_p = cu_matmul_backward_p,
    .head_forward_backward = cu_head_forward_backward,
    .head_forward_backward_p = cu_head_forward_backward_p,
    .head_forward_backward_vp = cu_head_forward_backward_vp,
    .optim_update = cu_optim_update,
    .sumsq = cu_sumsq,
};

extern "C" const Backend *backend_cuda(void) { return &CUDA_BACKEND; }
