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

/* 12 independent 16-lane accumulators hide the FMA latency (4 cycles, 2 pipes); GCC vector
 * types make the loop use full-width FMAs whatever the auto-vectorizer prefers. */
typedef float v16 __attribute__((vector_size(64)));
#define LANES 16
#define ACC 12
/* The probes measure the hardware: sanitizer instrumentation of their register-resident loops
 * (ASan keeps the accumulator array on an instrumented stack) would measure the sanitizer. */
#define PEAK_KERNEL __attribute__((no_sanitize("address", "undefined"), noinline))

PEAK_KERNEL static float fma_block(long iters, float seed) {
    v16 acc[ACC];
    for (int a = 0; a < ACC; a++)
        for (int l = 0; l < LANES; l++) acc[a][l] = seed + a + l;
    const v16 m = {0.999999f, 0.999999f, 0.999999f, 0.999999f, 0.999999f, 0.999999f, 0.999999f, 0.999999f,
                   0.999999f, 0.999999f, 0.999999f, 0.999999f, 0.999999f, 0.999999f, 0.999999f, 0.999999f};
    const v16 c = m * 1e-7f;
    for (long i = 0; i < iters; i++)
        for (int a = 0; a < ACC; a++) acc[a] = acc[a] * m + c;
    float s = 0;
    for (int a = 0; a < ACC; a++)
        for (int l = 0; l < LANES; l++) s += acc[a][l];
    return s;
}

double peak_measure_fp32(int nt, double ms) {
    long iters = 1 << 16;
    volatile float sink = 0;
    double best = 0;
    double t_end = timer_ms() + ms;
    while (timer_ms() < t_end) {
        double t0 = timer_ms();
#pragma omp parallel num_threads(nt) reduction(+ : sink)
        sink += fma_block(iters, (float)omp_get_thread_num());
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
    double best = 0;
    for (int rep = 0; rep < 5; rep++) {
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
