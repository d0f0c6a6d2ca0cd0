/* gelu_bench.c — the elementwise passes whose per-element math is a long dependent chain (GELU,
 * its gradient, SwiGLU's, the LM head's exponentials) as the model runs them (kernels.c's
 * gelu_forward, gelu_forward_bf16, gelu_backward_bf16 with its bias sums, swiglu_forward_bf16,
 * swiglu_backward_bf16: fastmath.h's 16-lane forms, four vectors at a time, where the build has
 * AVX-512) against the peer they replaced: GCC's vectorization of the same scalar functions
 * (st_gelu, st_gelu_grad, st_silu, st_swiglu_grad, st_expf) in `#pragma omp simd` loops compiled
 * here with the same flags. Interleaved call by call (each first in every other round: the first
 * of a pair pays for the dirty lines of the pass before), best of the timed calls, each on the same
 * threads; the outputs compared bit for bit (the kernels' contract), which fails the run if they
 * differ.
 *
 * usage: gelu_bench [threads=2] [reps=20] [N=2048] [F=1536]   (GELU on N × F, the MLP of configs B
 * and C; SwiGLU on N/2 rows of F gates and F up values; the head's exponentials on N/8 rows of
 * 50257 logits) */
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/half.h"
#include "model/fastmath.h"
#include "model/kernels.h"

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

/* ---- the peers: the scalar functions in GCC-vectorized loops, threaded as the kernels are ---- */

static void peer_gelu(float *out, const float *x, size_t n, int nt) {
#pragma omp parallel for simd num_threads(nt) schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = st_gelu(x[i]);
}

static void peer_gelu_bf16(uint16_t *out, const float *x, size_t n, int nt) {
#pragma omp parallel for simd num_threads(nt) schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = half_bf16(st_gelu(x[i]));
}

/* GELU's backward with the bias sums in the kernels' order (kernels.h): each 64-row chunk's rows in
 * order, then the chunks in order; threads take chunks, partial sums in part (colsum_floats). */
static void peer_gelu_bwd_bf16(uint16_t *d, float *colsum, float *part, const float *g, const float *x, int N, int F,
                               int nt) {
    const int R = KERNEL_ROW_CHUNK, nchunk = (N + R - 1) / R;
#pragma omp parallel num_threads(nt)
    {
#pragma omp for schedule(static)
        for (int k = 0; k < nchunk; k++) {
            float *sum = part + (size_t)k * F;
            memset(sum, 0, sizeof(float) * (size_t)F);
            for (int i = k * R; i < N && i < (k + 1) * R; i++) {
                const float *gi = g + (size_t)i * F, *xi = x + (size_t)i * F;
                uint16_t *di = d + (size_t)i * F;
#pragma omp simd
                for (int j = 0; j < F; j++) {
                    float v = gi[j] * st_gelu_grad(xi[j]);
                    sum[j] += v;
                    di[j] = half_bf16(v);
                }
            }
        }
#pragma omp for schedule(static)
        for (int j = 0; j < F; j++) {
            float t = 0;
            for (int k = 0; k < nchunk; k++) t += part[(size_t)k * F + j];
            colsum[j] = t;
        }
    }
}

/* SwiGLU into bf16 on rows of 2F (gate, up), forward and backward, as kernels.c's loops did before. */
static void peer_swiglu_bf16(uint16_t *out, const float *h, int N, int F, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int i = 0; i < N; i++) {
        const float *g = h + (size_t)i * 2 * F, *u = g + F;
        uint16_t *o = out + (size_t)i * F;
#pragma omp simd
        for (int j = 0; j < F; j++) o[j] = half_bf16(st_silu(g[j]) * u[j]);
    }
}

static void peer_swiglu_bwd_bf16(uint16_t *dh, const float *dout, const float *h, int N, int F, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int i = 0; i < N; i++) {
        const float *g = h + (size_t)i * 2 * F, *u = g + F, *d = dout + (size_t)i * F;
        uint16_t *dg = dh + (size_t)i * 2 * F, *du = dg + F;
#pragma omp simd
        for (int j = 0; j < F; j++) {
            float a, b;
            st_swiglu_grad(&a, &b, d[j], g[j], u[j]);
            dg[j] = half_bf16(a), du[j] = half_bf16(b);
        }
    }
}

/* The head's exponentials of one row, stored, as head_exp_sum_store's loop did before. */
static void peer_exp_rows(float *l, int rows, int V, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int r = 0; r < rows; r++) {
        float *x = l + (size_t)r * V;
#pragma omp simd
        for (int v = 0; v < V; v++) x[v] = st_expf(x[v] - 1.5f);
    }
}

#if defined(__AVX512F__)
#include <immintrin.h>
/* The same with fastmath.h's st_expf16 four vectors at a time, as kernels_head.c runs it. */
static void our_exp_rows(float *l, int rows, int V, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int r = 0; r < rows; r++) {
        float *x = l + (size_t)r * V;
        const __m512 m = _mm512_set1_ps(1.5f);
        int v = 0;
        for (; v + 64 <= V; v += 64) {
            __m512 a = st_expf16(_mm512_sub_ps(_mm512_loadu_ps(x + v), m));
            __m512 b = st_expf16(_mm512_sub_ps(_mm512_loadu_ps(x + v + 16), m));
            __m512 c = st_expf16(_mm512_sub_ps(_mm512_loadu_ps(x + v + 32), m));
            __m512 d = st_expf16(_mm512_sub_ps(_mm512_loadu_ps(x + v + 48), m));
            _mm512_storeu_ps(x + v, a), _mm512_storeu_ps(x + v + 16, b);
            _mm512_storeu_ps(x + v + 32, c), _mm512_storeu_ps(x + v + 48, d);
        }
        for (; v < V; v += 16) {
            __mmask16 k = V - v >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (V - v)) - 1);
            _mm512_mask_storeu_ps(x + v, k, st_expf16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + v), m)));
        }
    }
}
#else
static void our_exp_rows(float *l, int rows, int V, int nt) { peer_exp_rows(l, rows, V, nt); }
#endif

static int fails;
static void same(const void *a, const void *b, size_t bytes, const char *what) {
    if (memcmp(a, b, bytes)) {
        fprintf(stderr, "gelu_bench: %s: the kernel's output differs from the peer's (bit-identical required)\n", what);
        fails = 1;
    }
}

int main(int argc, char **argv) {
    int nt = argc > 1 ? atoi(argv[1]) : 2, reps = argc > 2 ? atoi(argv[2]) : 20;
    int N = argc > 3 ? atoi(argv[3]) : 2048, F = argc > 4 ? atoi(argv[4]) : 1536;
    const int V = 50257, rows = N / 8 > 0 ? N / 8 : 1;
    if (nt < 1 || reps < 2 || N < 1 || F < 1) {
        fprintf(stderr, "usage: gelu_bench [threads>=1] [reps>=2] [N>=1] [F>=1]\n");
        return 2;
    }
    size_t n = (size_t)N * F, nl = (size_t)rows * V;
    float *x = aligned_alloc(64, n * 4), *g = aligned_alloc(64, n * 4), *o1 = aligned_alloc(64, n * 4),
          *o2 = aligned_alloc(64, n * 4), *s1 = calloc((size_t)F, 4), *s2 = calloc((size_t)F, 4),
          *l0 = aligned_alloc(64, nl * 4), *l1 = aligned_alloc(64, nl * 4), *l2 = aligned_alloc(64, nl * 4);
    uint16_t *b1 = aligned_alloc(64, n * 2), *b2 = aligned_alloc(64, n * 2);
    float *p1 = malloc(colsum_floats(N, F) * 4), *p2 = malloc(colsum_floats(N, F) * 4); /* the bias sums' scratch */
    if (!x || !g || !o1 || !o2 || !s1 || !s2 || !l0 || !l1 || !l2 || !b1 || !b2 || !p1 || !p2) {
        fprintf(stderr, "gelu_bench: out of memory for %zu + %zu values\n", n, nl);
        return 1;
    }
    /* Pre-activations as a step sees them (about N(0, 1.5)), gradients around 1e-3, logits in ±8. */
    uint64_t st = 7;
    for (size_t i = 0; i < n; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        float u = (float)(st >> 40) / 16777216.0f;
        x[i] = 3.0f * (u - 0.5f) * (1.0f + u), g[i] = 2e-3f * (u - 0.5f);
    }
    for (size_t i = 0; i < nl; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        l0[i] = 16.0f * ((float)(st >> 40) / 16777216.0f - 0.5f);
    }
    const char *names[6] = {"GELU forward, fp32", "GELU forward into bf16", "GELU backward into bf16 + bias sums",
                            "LM head exponentials (st_expf)", "SwiGLU forward into bf16", "SwiGLU backward into bf16"};
    const int Ns = N / 2 > 0 ? N / 2 : 1; /* SwiGLU rows: 2F values each, in x; dout in g */
    double best[6][2];
    for (int k = 0; k < 6; k++) best[k][0] = best[k][1] = 1e30;
    for (int r = 0; r < reps; r++) {
        for (int k = 0; k < 6; k++)
            for (int w = 0; w < 2; w++) { /* who 0: the model's kernel, 1: the peer; each first in
                                            * every other round (the first pays for the dirty lines
                                            * of the pass before) */
                int who = r % 2 ? 1 - w : w;
                if (k == 3) memcpy(who ? l2 : l1, l0, nl * 4);
                double t0 = now_ms();
                if (k == 0) who ? peer_gelu(o2, x, n, nt) : gelu_forward(o1, x, n, nt);
                else if (k == 1) who ? peer_gelu_bf16(b2, x, n, nt) : gelu_forward_bf16(b1, x, n, nt);
                else if (k == 2) who ? peer_gelu_bwd_bf16(b2, s2, p2, g, x, N, F, nt) : gelu_backward_bf16(b1, s1, p1, g, x, N, F, 0, nt);
                else if (k == 3) who ? peer_exp_rows(l2, rows, V, nt) : our_exp_rows(l1, rows, V, nt);
                else if (k == 4) who ? peer_swiglu_bf16(b2, x, Ns, F, nt) : swiglu_forward_bf16(b1, x, Ns, F, nt);
                else who ? peer_swiglu_bwd_bf16(b2, g, x, Ns, F, nt) : swiglu_backward_bf16(b1, g, x, Ns, F, nt);
                double t = now_ms() - t0;
                if (r > 0 && t < best[k][who]) best[k][who] = t;
            }
        if (r == 0) {
            peer_gelu(o2, x, n, nt), gelu_forward(o1, x, n, nt);
            same(o1, o2, n * 4, names[0]);
            peer_gelu_bf16(b2, x, n, nt), gelu_forward_bf16(b1, x, n, nt);
            same(b1, b2, n * 2, names[1]);
            peer_gelu_bwd_bf16(b2, s2, p2, g, x, N, F, nt), gelu_backward_bf16(b1, s1, p1, g, x, N, F, 0, nt);
            same(b1, b2, n * 2, names[2]), same(s1, s2, (size_t)F * 4, "GELU backward's bias sums");
            same(l1, l2, nl * 4, names[3]);
            peer_swiglu_bf16(b2, x, Ns, F, nt), swiglu_forward_bf16(b1, x, Ns, F, nt);
            same(b1, b2, (size_t)Ns * F * 2, names[4]);
            peer_swiglu_bwd_bf16(b2, g, x, Ns, F, nt), swiglu_backward_bf16(b1, g, x, Ns, F, nt);
            same(b1, b2, (size_t)Ns * F * 2 * 2, names[5]);
        }
    }
    printf("# gelu_bench: %d threads, GELU on %d x %d, SwiGLU on %d x 2 x %d, exponentials on %d x %d, best of %d calls "
           "each, interleaved\n", nt, N, F, Ns, F, rows, V, reps - 1);
    printf("| pass | ours ms | peer (GCC's vectorized scalar loop) ms | peer / ours |\n|---|---:|---:|---:|\n");
    for (int k = 0; k < 6; k++)
        printf("| %s | %.3f | %.3f | %.2f× |\n", names[k], best[k][0], best[k][1], best[k][1] / best[k][0]);
    printf("# outputs %s\n", fails ? "DIFFER (see stderr)" : "bit-identical to the peer's");
    return fails;
}
