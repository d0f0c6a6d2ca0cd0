/* matmul.c — GEMM through oneDNN's matmul primitive with a per-thread primitive cache. */
#include "model/matmul.h"

#include <dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"

#define CACHE_SLOTS 256

typedef struct {
    int ta, tb, M, N, K, lda, ldb, ldc, beta1, nthr, bf16, bias;
    float alpha;
} Key;

typedef struct {
    Key key;
    int used;
    dnnl_primitive_t prim;
    dnnl_memory_t a, b, c, bias;
} Entry;

/* Per-thread state: engine, stream and the cache. Thread-local so that OpenMP workers calling
 * GEMMs concurrently (attention heads) never share memory objects; primitives are immutable. */
typedef struct {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    Entry slots[CACHE_SLOTS];
} ThreadState;

static _Thread_local ThreadState *tls;

#define DNNL_OK(call)                                                                  \
    do {                                                                               \
        dnnl_status_t s_ = (call);                                                     \
        if (s_ != dnnl_success) {                                                      \
            char m_[64];                                                               \
            snprintf(m_, sizeof m_, "oneDNN status %d", (int)s_);                      \
            st_abort(__FILE__, __LINE__, #call, m_);                                   \
        }                                                                              \
    } while (0)

static ThreadState *thread_state(void) {
    if (!tls) {
        tls = calloc(1, sizeof *tls);
        ST_CHECK_MSG(tls != NULL, "out of memory for the GEMM cache");
        DNNL_OK(dnnl_engine_create(&tls->engine, dnnl_cpu, 0));
        DNNL_OK(dnnl_stream_create(&tls->stream, tls->engine, dnnl_stream_default_flags));
    }
    return tls;
}

static uint64_t key_hash(const Key *k) {
    uint64_t h = 1469598103934665603ull;
    const unsigned char *p = (const unsigned char *)k;
    for (size_t i = 0; i < sizeof *k; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static void md_2d(dnnl_memory_desc_t *md, int rows, int cols, int ld, int trans, dnnl_data_type_t dt) {
    dnnl_dims_t dims = {rows, cols};
    /* A logical (rows x cols) operand stored row-major, or transposed (cols x rows) in memory. */
    dnnl_dims_t strides = {trans ? 1 : ld, trans ? ld : 1};
    DNNL_OK(dnnl_memory_desc_init_by_strides(md, 2, dims, dt, strides));
}

static Entry *lookup(ThreadState *ts, const Key *key) {
    uint64_t h = key_hash(key);
    for (int probe = 0; probe < CACHE_SLOTS; probe++) {
        Entry *e = &ts->slots[(h + (uint64_t)probe) % CACHE_SLOTS];
        if (e->used && !memcmp(&e->key, key, sizeof *key)) return e;
        if (!e->used) {
            dnnl_data_type_t in = key->bf16 ? dnnl_bf16 : dnnl_f32;
            dnnl_memory_desc_t a_md, b_md, c_md;
            md_2d(&a_md, key->M, key->K, key->lda, key->ta, in);
            md_2d(&b_md, key->K, key->N, key->ldb, key->tb, in);
            md_2d(&c_md, key->M, key->N, key->ldc, 0, dnnl_f32);
            dnnl_memory_desc_t bias_md;
            if (key->bias) md_2d(&bias_md, 1, key->N, key->N, 0, dnnl_f32);
            dnnl_matmul_desc_t desc;
            DNNL_OK(dnnl_matmul_desc_init(&desc, &a_md, &b_md, key->bias ? &bias_md : NULL, &c_md));
            dnnl_primitive_attr_t attr;
            DNNL_OK(dnnl_primitive_attr_create(&attr));
            if (key->alpha != 1.0f) DNNL_OK(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &key->alpha));
            if (key->beta1) {
                dnnl_post_ops_t po;
                DNNL_OK(dnnl_post_ops_create(&po));
                DNNL_OK(dnnl_post_ops_append_sum(po, 1.0f));
                DNNL_OK(dnnl_primitive_attr_set_post_ops(attr, po));
                dnnl_post_ops_destroy(po);
            }
            dnnl_primitive_desc_t pd;
            DNNL_OK(dnnl_primitive_desc_create(&pd, &desc, attr, ts->engine, NULL));
            DNNL_OK(dnnl_primitive_create(&e->prim, pd));
            dnnl_primitive_desc_destroy(pd);
            dnnl_primitive_attr_destroy(attr);
            DNNL_OK(dnnl_memory_create(&e->a, &a_md, ts->engine, DNNL_MEMORY_NONE));
            DNNL_OK(dnnl_memory_create(&e->b, &b_md, ts->engine, DNNL_MEMORY_NONE));
            DNNL_OK(dnnl_memory_create(&e->c, &c_md, ts->engine, DNNL_MEMORY_NONE));
            e->bias = NULL;
            if (key->bias) DNNL_OK(dnnl_memory_create(&e->bias, &bias_md, ts->engine, DNNL_MEMORY_NONE));
            e->key = *key;
            e->used = 1;
            return e;
        }
    }
    /* Table full: recycle a slot (rare; shapes per run are few). */
    Entry *e = &ts->slots[h % CACHE_SLOTS];
    dnnl_primitive_destroy(e->prim);
    dnnl_memory_destroy(e->a), dnnl_memory_destroy(e->b), dnnl_memory_destroy(e->c);
    if (e->bias) dnnl_memory_destroy(e->bias);
    e->used = 0;
    return lookup(ts, key);
}

static void run(int ta, int tb, int M, int N, int K, float alpha, const void *A, int lda, const void *B, int ldb,
                float beta, float *C, int ldc, int bf16, const float *bias) {
    if (M <= 0 || N <= 0) return;
    ST_CHECK(beta == 0.0f || beta == 1.0f);
    if (K <= 0) {
        if (beta == 0.0f)
            for (int i = 0; i < M; i++) memset(C + (size_t)i * ldc, 0, sizeof(float) * N);
        return;
    }
    ThreadState *ts = thread_state();
    Key key;
    memset(&key, 0, sizeof key); /* padding bytes take part in hash and compare */
    key.ta = ta, key.tb = tb, key.M = M, key.N = N, key.K = K, key.lda = lda, key.ldb = ldb, key.ldc = ldc;
    key.beta1 = beta != 0.0f, key.nthr = omp_in_parallel() ? 1 : omp_get_max_threads(), key.bf16 = bf16;
    key.bias = bias != NULL;
    key.alpha = alpha;
    Entry *e = lookup(ts, &key);
    DNNL_OK(dnnl_memory_set_data_handle(e->a, (void *)A));
    DNNL_OK(dnnl_memory_set_data_handle(e->b, (void *)B));
    DNNL_OK(dnnl_memory_set_data_handle(e->c, C));
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, e->a}, {DNNL_ARG_WEIGHTS, e->b}, {DNNL_ARG_DST, e->c},
                               {DNNL_ARG_BIAS, e->bias}};
    if (bias) DNNL_OK(dnnl_memory_set_data_handle(e->bias, (void *)bias));
    DNNL_OK(dnnl_primitive_execute(e->prim, ts->stream, bias ? 4 : 3, args));
    DNNL_OK(dnnl_stream_wait(ts->stream));
}

void mm_sgemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc) {
    run(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, 0, NULL);
}

void mm_linear(int M, int N, int K, const float *A, const float *W, const float *bias, float *C) {
    run(0, 1, M, N, K, 1.0f, A, K, W, K, 0.0f, C, N, 0, bias);
}

void mm_linear_bf16(int M, int N, int K, const uint16_t *A, const uint16_t *W, const float *bias, float *C) {
    run(0, 1, M, N, K, 1.0f, A, K, W, K, 0.0f, C, N, 1, bias);
}

void mm_gemm_bf16(int trans_a, int trans_b, int M, int N, int K, float alpha, const uint16_t *A, int lda,
                  const uint16_t *B, int ldb, float beta, float *C, int ldc) {
    run(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, 1, NULL);
}

void mm_set_threads(int n) { omp_set_num_threads(n); }

const char *mm_backend_info(void) {
    static _Thread_local char buf[128]; /* per thread: no shared mutable state */
    const dnnl_version_t *v = dnnl_version();
    snprintf(buf, sizeof buf, "oneDNN %d.%d.%d (%s)", v->major, v->minor, v->patch, v->cpu_runtime == DNNL_RUNTIME_OMP ? "omp" : "other runtime");
    return buf;
}
