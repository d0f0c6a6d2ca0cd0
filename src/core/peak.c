/* peak.c — FMA throughput probe and build metadata. */
#include "core/peak.h"

#include <immintrin.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/timer.h"

#ifndef ST_GIT_COMMIT
#define ST_GIT_COMMIT "unknown"
#endif

/* 12 independent accumulators hide the FMA latency (4 cycles, 2 pipes). Each step is an explicit
 * fused multiply-add: this is an ISO C build (-std=c11, so GCC's -ffp-contract=off), where
 * `acc * m + c` compiles to a multiply and an add. On cores whose multiplies and adds share the FMA
 * pipes (Intel's) that pair runs at half the FMA rate: the probe read 182 GFLOP/s on a 2-core
 * Xeon whose oneDNN GEMM ran 331 (2026-11-29); Zen's separate add pipes hid it. */
#define ACC 12
#if defined(__AVX512F__)
#define LANES 16
typedef __m512 vacc;
#define V_SET1(x) _mm512_set1_ps(x)
#define V_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define V_SUM(a) _mm512_reduce_add_ps(a)
#elif defined(__AVX2__) && defined(__FMA__)
#define LANES 8
typedef __m256 vacc;
#define V_SET1(x) _mm256_set1_ps(x)
#define V_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
static inline float v_sum8(__m256 a) {
    float t[8];
    _mm256_storeu_ps(t, a);
    return ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
}
#define V_SUM(a) v_sum8(a)
#else /* no FMA instruction: a multiply and an add are this target's peak */
#define LANES 1
typedef float vacc;
#define V_SET1(x) (x)
#define V_FMA(a, b, c) ((a) * (b) + (c))
#define V_SUM(a) (a)
#endif
/* The probes measure the hardware: sanitizer instrumentation of their register-resident loops
 * (ASan keeps the accumulator array on an instrumented stack) would measure the sanitizer. */
#define PEAK_KERNEL __attribute__((no_sanitize("address", "undefined"), noinline))

PEAK_KERNEL float peak_fma_block(long iters, float a0, float m, float c) {
    vacc acc[ACC];
    for (int a = 0; a < ACC; a++) acc[a] = V_SET1(a0);
    const vacc vm = V_SET1(m), vc = V_SET1(c);
    for (long i = 0; i < iters; i++)
        for (int a = 0; a < ACC; a++) acc[a] = V_FMA(acc[a], vm, vc);
    float s = 0;
    for (int a = 0; a < ACC; a++) s += V_SUM(acc[a]);
    return s / (ACC * LANES);
}

double peak_measure_fp32(int nt, double ms) {
    long iters = 1 << 16;
    volatile float sink = 0;
    double best = 0;
    double t_end = timer_ms() + ms;
    while (timer_ms() < t_end) {
        double t0 = timer_ms();
#pragma omp parallel num_threads(nt) reduction(+ : sink)
        sink += peak_fma_block(iters, (float)omp_get_thread_num(), 0.999999f, 1e-7f);
        double dt = (timer_ms() - t0) * 1e-3;
        double flops = 2.0 * ACC * LANES * (double)iters * nt / dt;
        if (flops > best) best = flops;
    }
    return best;
}

const char *build_compiler(void) {
#ifdef __VERSION__
    return "gcc " __VERSION__;
#else
    return "unknown";
#endif
}

const char *build_git_commit(void) { return ST_GIT_COMMIT; }

#if defined(__AVX512BF16__)
PEAK_KERNEL static float bf16_block(long iters, float seed) {
    __m512 acc[ACC];
    for (int a = 0; a < ACC; a++) acc[a] = _mm512_set1_ps(seed + a);
    __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80), y = (__m512bh)_mm512_set1_epi16(0x3380); /* 1.0, ~6e-8 */
    for (long i = 0; i < iters; i++)
        for (int a = 0; a < ACC; a++) acc[a] = _mm512_dpbf16_ps(acc[a], x, y);
    float s = 0;
    for (int a = 0; a < ACC; a++) s += _mm512_reduce_add_ps(acc[a]);
    return s;
}
#endif

double peak_measure_bf16(int nt, double ms) {
#if defined(__AVX512BF16__)
    long iters = 1 << 16;
    volatile float sink = 0;
    double best = 0, t_end = timer_ms() + ms;
    while (timer_ms() < t_end) {
        double t0 = timer_ms();
#pragma omp parallel num_threads(nt) reduction(+ : sink)
        sink += bf16_block(iters, (float)omp_get_thread_num());
        double dt = (timer_ms() - t0) * 1e-3;
        /* each vdpbf16ps: 16 lanes x 2 pairs x 2 FLOPs */
        double flops = 64.0 * ACC * (double)iters * nt / dt;
        if (flops > best) best = flops;
    }
    return best;
#else
    (void)nt, (void)ms;
    return 0;
#endif
}

double peak_measure_bandwidth(int nt, size_t bytes) {
    size_t n = bytes / 2 / sizeof(float);
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
    if (!a || !b) {
        free(a), free(b);
        return 0;
    }
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t i = 0; i < n; i++) a[i] = (float)i, b[i] = 0;
    double best = 0, start = timer_ms();
    /* at least 5 passes and half a second: 5 passes alone varied 8.9-11.2 GB/s between runs on a
     * quiet shared VM (one thread, 2026-11-29) */
    for (int rep = 0; rep < 64 && (rep < 5 || timer_ms() - start < 500); rep++) {
        double t0 = timer_ms();
#pragma omp parallel for num_threads(nt) schedule(static)
        for (size_t i = 0; i < n; i++) b[i] = a[i] * 1.0001f;
        double dt = (timer_ms() - t0) * 1e-3;
        double bw = 2.0 * n * sizeof(float) / dt;
        if (bw > best) best = bw;
    }
    volatile float sink = b[n / 2];
    (void)sink;
    free(a), free(b);
    return best;
}
