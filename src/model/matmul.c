/* matmul.c — GEMM through oneDNN's matmul primitive with a per-thread primitive cache, and the
 * record of the first failure (matmul.h). */
#include "model/matmul.h"

#include <dnnl.h>
#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
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

/* The first failure, until mm_take_error takes it (process state: see matmul.h), and the
 * countdown of the test fault (0: none). */
static pthread_mutex_t err_lock = PTHREAD_MUTEX_INITIALIZER;
static Err first_err;
static atomic_long fail_countdown;

static const char *dnnl_status_name(dnnl_status_t s) {
    switch (s) {
    case dnnl_out_of_memory: return "out_of_memory";
    case dnnl_invalid_arguments: return "invalid_arguments";
    case dnnl_unimplemented: return "unimplemented";
    case dnnl_iterator_ends: return "iterator_ends";
    case dnnl_runtime_error: return "runtime_error";
    case dnnl_not_required: return "not_required";
    default: return "error";
    }
}

/* Records a failed GEMM: its shape, what was being done and oneDNN's status (s), or for the packed
 * path (s = dnnl_success) only what failed. First one wins. */
static void record(const Key *k, dnnl_status_t s, const char *what) {
    static const char *ops[4] = {"A*B", "A*B^T", "A^T*B", "A^T*B^T"};
    char by[48] = "";
    if (s != dnnl_success) snprintf(by, sizeof by, "oneDNN %s ", dnnl_status_name(s));
    pthread_mutex_lock(&err_lock);
    if (first_err.status == ST_OK)
        err_set(&first_err, ST_ERR_RUNTIME, "GEMM %dx%dx%d (MxNxK, %s, %s%s%s): %s%s", k->M, k->N, k->K,
                k->bf16 ? "bf16" : "fp32", ops[2 * (k->ta != 0) + (k->tb != 0)], k->bias ? " + bias" : "",
                k->beta1 ? " + C" : "", by, what);
    pthread_mutex_unlock(&err_lock);
}

Status mm_take_error(Err *err) {
    pthread_mutex_lock(&err_lock);
    Err e = first_err;
    first_err.status = ST_OK, first_err.msg[0] = 0;
    pthread_mutex_unlock(&err_lock);
    if (e.status != ST_OK && err) *err = e;
    return e.status;
}

void mm_fail_after(long n) { atomic_store(&fail_countdown, n); }

/* Test-only FLOP count (mm_count_flops): 2·M·N·K of every GEMM that runs while counting is on. */
static atomic_int count_on;
static _Atomic long long flops_counted;

long long mm_count_flops(int on) {
    atomic_store(&count_on, 0);
    long long n = atomic_exchange(&flops_counted, 0);
    atomic_store(&count_on, on);
    return n;
}

/* 1 when the test fault fires on this call. */
static int fault_fires(void) {
    return atomic_load_explicit(&fail_countdown, memory_order_relaxed) > 0 && atomic_fetch_sub(&fail_countdown, 1) == 1;
}

/* This thread's state, created on first use; NULL (recorded against key) when it cannot be. */
static ThreadState *thread_state(const Key *key) {
    if (tls) return tls;
    ThreadState *ts = calloc(1, sizeof *ts);
    if (!ts) {
        record(key, dnnl_out_of_memory, "allocating the primitive cache");
        return NULL;
    }
    dnnl_status_t s = dnnl_engine_create(&ts->engine, dnnl_cpu, 0);
    if (s == dnnl_success) {
        s = dnnl_stream_create(&ts->stream, ts->engine, dnnl_stream_default_flags);
        if (s != dnnl_success) dnnl_engine_destroy(ts->engine);
    }
    if (s != dnnl_success) {
        record(key, s, "creating the engine and stream");
        free(ts);
        return NULL;
    }
    return tls = ts;
}

static uint64_t key_hash(const Key *k) {
    uint64_t h = 1469598103934665603ull;
    const unsigned char *p = (const unsigned char *)k;
    for (size_t i = 0; i < sizeof *k; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static dnnl_status_t md_2d(dnnl_memory_desc_t *md, int rows, int cols, int ld, int trans, dnnl_data_type_t dt) {
    dnnl_dims_t dims = {rows, cols};
    /* A logical (rows x cols) operand stored row-major, or transposed (cols x rows) in memory. */
    dnnl_dims_t strides = {trans ? 1 : ld, trans ? ld : 1};
    return dnnl_memory_desc_init_by_strides(md, 2, dims, dt, strides);
}

/* Destroys what an entry holds; leaves it unused. */
static void entry_release(Entry *e) {
    if (e->prim) dnnl_primitive_destroy(e->prim);
    if (e->a) dnnl_memory_destroy(e->a);
    if (e->b) dnnl_memory_destroy(e->b);
    if (e->c) dnnl_memory_destroy(e->c);
    if (e->bias) dnnl_memory_destroy(e->bias);
    memset(e, 0, sizeof *e);
}

/* Creates the primitive and memory objects of key in the free slot e. 0 on failure, which is
 * recorded, and e is left free. */
static int entry_create(ThreadState *ts, Entry *e, const Key *key) {
    dnnl_status_t s;
    const char *what = "describing the operands";
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t pd = NULL;
    memset(e, 0, sizeof *e);
#define TRY(call, stage)                   \
    do {                                   \
        what = (stage);                    \
        if ((s = (call)) != dnnl_success) \
            goto fail;                     \
    } while (0)
    dnnl_data_type_t in = key->bf16 ? dnnl_bf16 : dnnl_f32;
    dnnl_memory_desc_t a_md, b_md, c_md, bias_md;
    TRY(md_2d(&a_md, key->M, key->K, key->lda, key->ta, in), "describing the operands");
    TRY(md_2d(&b_md, key->K, key->N, key->ldb, key->tb, in), "describing the operands");
    TRY(md_2d(&c_md, key->M, key->N, key->ldc, 0, dnnl_f32), "describing the operands");
    if (key->bias) TRY(md_2d(&bias_md, 1, key->N, key->N, 0, dnnl_f32), "describing the operands");
    dnnl_matmul_desc_t desc;
    TRY(dnnl_matmul_desc_init(&desc, &a_md, &b_md, key->bias ? &bias_md : NULL, &c_md), "describing the matmul");
    TRY(dnnl_primitive_attr_create(&attr), "creating the attributes");
    if (key->alpha != 1.0f) TRY(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &key->alpha), "setting alpha");
    if (key->beta1) {
        dnnl_post_ops_t po;
        TRY(dnnl_post_ops_create(&po), "setting beta");
        s = dnnl_post_ops_append_sum(po, 1.0f);
        if (s == dnnl_success) s = dnnl_primitive_attr_set_post_ops(attr, po);
        dnnl_post_ops_destroy(po);
        TRY(s, "setting beta");
    }
    TRY(dnnl_primitive_desc_create(&pd, &desc, attr, ts->engine, NULL), "creating the primitive");
    TRY(dnnl_primitive_create(&e->prim, pd), "creating the primitive");
    TRY(dnnl_memory_create(&e->a, &a_md, ts->engine, DNNL_MEMORY_NONE), "creating the memory objects");
    TRY(dnnl_memory_create(&e->b, &b_md, ts->engine, DNNL_MEMORY_NONE), "creating the memory objects");
    TRY(dnnl_memory_create(&e->c, &c_md, ts->engine, DNNL_MEMORY_NONE), "creating the memory objects");
    if (key->bias) TRY(dnnl_memory_create(&e->bias, &bias_md, ts->engine, DNNL_MEMORY_NONE), "creating the memory objects");
#undef TRY
    dnnl_primitive_desc_destroy(pd);
    dnnl_primitive_attr_destroy(attr);
    e->key = *key;
    e->used = 1;
    return 1;
fail:
    record(key, s, what);
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (attr) dnnl_primitive_attr_destroy(attr);
    entry_release(e);
    return 0;
}

/* The cached entry of key, created on a miss; NULL when it cannot be (recorded). */
static Entry *lookup(ThreadState *ts, const Key *key) {
    uint64_t h = key_hash(key);
    for (int probe = 0; probe < CACHE_SLOTS; probe++) {
        Entry *e = &ts->slots[(h + (uint64_t)probe) % CACHE_SLOTS];
        if (e->used && !memcmp(&e->key, key, sizeof *key)) return e;
        if (!e->used) return entry_create(ts, e, key) ? e : NULL;
    }
    /* Table full: recycle a slot (rare; shapes per run are few). */
    Entry *e = &ts->slots[h % CACHE_SLOTS];
    entry_release(e);
    return entry_create(ts, e, key) ? e : NULL;
}

/* One GEMM; on failure C is left unwritten and the failure recorded. */
static void run(int ta, int tb, int M, int N, int K, float alpha, const void *A, int lda, const void *B, int ldb,
                float beta, float *C, int ldc, int bf16, const float *bias) {
    if (M <= 0 || N <= 0) return;
    ST_CHECK(beta == 0.0f || beta == 1.0f);
    if (K <= 0) {
        if (beta == 0.0f)
            for (int i = 0; i < M; i++) memset(C + (size_t)i * ldc, 0, sizeof(float) * N);
        return;
    }
    Key key;
    memset(&key, 0, sizeof key); /* padding bytes take part in hash and compare */
    key.ta = ta, key.tb = tb, key.M = M, key.N = N, key.K = K, key.lda = lda, key.ldb = ldb, key.ldc = ldc;
    key.beta1 = beta != 0.0f, key.nthr = omp_in_parallel() ? 1 : omp_get_max_threads(), key.bf16 = bf16;
    key.bias = bias != NULL;
    key.alpha = alpha;
    if (fault_fires()) {
        record(&key, dnnl_out_of_memory, "creating the primitive (test fault)");
        return;
    }
    if (atomic_load_explicit(&count_on, memory_order_relaxed)) atomic_fetch_add(&flops_counted, 2LL * M * N * K);
    if (bf16 && mm_pack_wanted(M, N, K)) {
        if (!mm_pack_gemm_bf16(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias))
            record(&key, dnnl_success, "out of memory for the packed bf16 GEMM's scratch (matmul_pack.c)");
        return;
    }
    ThreadState *ts = thread_state(&key);
    Entry *e = ts ? lookup(ts, &key) : NULL;
    if (!e) return;
    dnnl_status_t s = dnnl_memory_set_data_handle(e->a, (void *)A);
    if (s == dnnl_success) s = dnnl_memory_set_data_handle(e->b, (void *)B);
    if (s == dnnl_success) s = dnnl_memory_set_data_handle(e->c, C);
    if (s == dnnl_success && bias) s = dnnl_memory_set_data_handle(e->bias, (void *)bias);
    if (s != dnnl_success) {
        record(&key, s, "setting the operands");
        return;
    }
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, e->a}, {DNNL_ARG_WEIGHTS, e->b}, {DNNL_ARG_DST, e->c},
                               {DNNL_ARG_BIAS, e->bias}};
    s = dnnl_primitive_execute(e->prim, ts->stream, bias ? 4 : 3, args);
    if (s == dnnl_success) s = dnnl_stream_wait(ts->stream);
    if (s != dnnl_success) record(&key, s, "running the primitive");
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

/* The packed bf16 GEMMs: -1 until chosen (then on where mm_tile_preferred: AVX512_BF16 without AMX),
 * else 0 / 1 as mm_pack_enable or ST_BF16_GEMM set it. On a 2-core Zen 5 a whole bf16 step measured
 * 1.08–1.3× oneDNN on GPT-2 124M at 4 × 1024 tokens, 1.03× on configs B and C, 0.97× on A (4 × 64
 * tokens; bench/results/step.md). */
static atomic_int pack_on = -1;

void mm_pack_enable(int on) { atomic_store(&pack_on, on && mm_tile_available()); }

static int pack_enabled(void) {
    int on = atomic_load_explicit(&pack_on, memory_order_relaxed);
    return on < 0 ? mm_tile_preferred() : on;
}

Status mm_gemm_env(Err *err) {
    const char *v = getenv("ST_BF16_GEMM");
    if (!v || !*v) return ST_OK;
    if (!strcmp(v, "onednn")) {
        mm_pack_enable(0);
        return ST_OK;
    }
    if (!strcmp(v, "packed")) {
        if (!mm_tile_available())
            return err_set(err, ST_ERR_INPUT, "ST_BF16_GEMM=packed: this build has no AVX512_BF16 kernels "
                           "(a CPU or ST_ARCH_FLAGS without avx512bf16); unset it or use onednn");
        mm_pack_enable(1);
        return ST_OK;
    }
    return err_set(err, ST_ERR_INPUT, "ST_BF16_GEMM: expected onednn or packed, found '%s'", v);
}

/* By the shape of op(B) alone (K × N), so that a GEMM cut into row ranges (the tp overlap's row
 * chunks, a micro-batch) takes the same path, and gives the same bits, as the whole: at least 64 K
 * values (smaller layers measured as fast on oneDNN, and the test models' stay there), at most 8 M
 * (its packed copy is scratch) with K at most 8192 (a panel's pairs stay in L2). The LM head's
 * logits (a 50257-row wte as op(B)) and input gradient (K = 50257) are not taken here: packing wte
 * per chunk costs more than it gains, so kernels_head.c packs it once per call and runs them on
 * mm_packed_gemm_bf16 (mm_head_pack_wanted); its weight gradient (op(B) = the chunk's inputs) is
 * taken. Inside a parallel region the
 * packed GEMM runs on the calling thread alone. */
int mm_pack_wanted(int M, int N, int K) {
    (void)M;
    return pack_enabled() && N >= 16 && K >= 16 && K <= 8192 &&
           (double)N * K >= 65536.0 && (double)N * K <= 8388608.0;
}

int mm_head_pack_wanted(long rows) { return rows >= 256 && pack_enabled(); /* enabled implies the kernels */ }

void mm_set_threads(int n) { omp_set_num_threads(n); }

const char *mm_backend_info(void) {
    static _Thread_local char buf[128]; /* per thread: no shared mutable state */
    const dnnl_version_t *v = dnnl_version();
    snprintf(buf, sizeof buf, "oneDNN %d.%d.%d (%s)%s", v->major, v->minor, v->patch,
             v->cpu_runtime == DNNL_RUNTIME_OMP ? "omp" : "other runtime",
             pack_enabled() ? ", bf16 layer GEMMs on matmul_pack.c" : "");
    return buf;
}
