/* head_rows.c — the fp32 LM head's three GEMMs per row, by chunk rows, the sizes interleaved call
 * by call (bench/results/step.md, "fp32 head chunks of 16 rows"): on a VM whose speed moves by tens
 * of % from one second to the next, each round calls every size's three GEMMs in turn, so a slow
 * phase falls on all of them alike; medians over the rounds.
 *
 * usage: head_rows C ROUNDS ROWS...   (V = 50304, GPT-2's padded vocabulary; threads: OMP_NUM_THREADS)
 *
 * Per size m: logits (m × V) = x (m × C) · wᵀ, dx (m × C) = dlogits · w, dw (V × C) += dlogitsᵀ · x,
 * each through mm_sgemm (oneDNN), as kernels_head.c runs them (the logits per chunk of
 * layout_head_chunk_rows, the two backward GEMMs per group of chunks, layout_head_grad_rows). Prints
 * the median ms per 1000 rows of each GEMM and their sum. The operands' values do not matter to the
 * time. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/stats.h"
#include "core/timer.h"
#include "model/matmul.h"

#define MAXM 16
#define MAXR 400

int main(int argc, char **argv) {
    const int V = 50304;
    int C = argc > 1 ? atoi(argv[1]) : 0, rounds = argc > 2 ? atoi(argv[2]) : 0, nm = argc - 3, ms[MAXM], mmax = 0;
    if (C < 1 || rounds < 1 || rounds > MAXR || nm < 1 || nm > MAXM) {
        fprintf(stderr, "usage: head_rows C ROUNDS(1..%d) ROWS... (1..%d sizes)\n", MAXR, MAXM);
        return 2;
    }
    for (int i = 0; i < nm; i++) {
        ms[i] = atoi(argv[3 + i]);
        if (ms[i] < 1 || ms[i] > 65536) {
            fprintf(stderr, "head_rows: rows: expected 1..65536, found '%s'\n", argv[3 + i]);
            return 2;
        }
        if (ms[i] > mmax) mmax = ms[i];
    }
    mm_set_threads(omp_get_max_threads());
    float *x = malloc(sizeof(float) * (size_t)mmax * C), *w = malloc(sizeof(float) * (size_t)V * C);
    float *l = malloc(sizeof(float) * (size_t)mmax * V), *dx = malloc(sizeof(float) * (size_t)mmax * C);
    float *dw = calloc((size_t)V * C, sizeof(float));
    static double t[MAXM][3][MAXR];
    if (!x || !w || !l || !dx || !dw) {
        fprintf(stderr, "head_rows: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < (size_t)mmax * C; i++) x[i] = 0.001f * (float)(i % 97);
    for (size_t i = 0; i < (size_t)V * C; i++) w[i] = 0.001f * (float)(i % 89);
    for (size_t i = 0; i < (size_t)mmax * V; i++) l[i] = 0.001f * (float)(i % 83);
    for (int r = 0; r <= rounds; r++) /* round 0 untimed: oneDNN's primitives, first touches */
        for (int i = 0; i < nm; i++) {
            int m = ms[i];
            double t0 = timer_ms();
            mm_sgemm(0, 1, m, V, C, 1.0f, x, C, w, C, 0.0f, l, V);
            double t1 = timer_ms();
            mm_sgemm(0, 0, m, C, V, 1.0f, l, V, w, C, 0.0f, dx, C);
            double t2 = timer_ms();
            mm_sgemm(1, 0, V, C, m, 1.0f, l, V, x, C, 1.0f, dw, C);
            double t3 = timer_ms();
            if (r) t[i][0][r - 1] = (t1 - t0) / m * 1e3, t[i][1][r - 1] = (t2 - t1) / m * 1e3, t[i][2][r - 1] = (t3 - t2) / m * 1e3;
        }
    printf("# head_rows C %d V %d, %d threads, %d rounds: median ms per 1000 rows\n| rows | logits | dx | dw | sum |\n"
           "|---:|---:|---:|---:|---:|\n", C, V, omp_get_max_threads(), rounds);
    for (int i = 0; i < nm; i++) {
        double s = 0, med[3];
        for (int k = 0; k < 3; k++) med[k] = stats_median_inplace(t[i][k], (size_t)rounds), s += med[k];
        printf("| %d | %.1f | %.1f | %.1f | %.1f |\n", ms[i], med[0], med[1], med[2], s);
    }
    free(x), free(w), free(l), free(dx), free(dw);
    return 0;
}
