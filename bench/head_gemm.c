/* head_gemm.c — the LM head's three bf16 GEMMs per chunk of rows, by chunk size (issue 28: what the
 * head's chunk costs; bench/results/step.md, "The LM head's chunk on Zen 5").
 *
 * usage: head_gemm [C=384] [V=50257] [N=2048] [reps=3]   (threads: OMP_NUM_THREADS)
 *
 * For chunks of 128, 256, … rows up to N, and the trainer's (layout_head_chunk_rows), the N rows of a step in chunks as kernels_head.c runs them:
 * logits (m × V) = x_c · wteᵀ, dx_c = dlogits · wte, dwte += dlogitsᵀ · x_c, each through
 * mm_gemm_bf16 (oneDNN for the first two), operands in bf16, outputs fp32; the best of `reps` per
 * GEMM. Then the same first two on matmul_pack.c against wte packed once per step in both layouts
 * (mm_pack_b_bf16 / mm_packed_gemm_bf16, as kernels_head.c runs them where mm_head_pack_wanted),
 * the packing timed apart, and the largest difference of their outputs from oneDNN's relative to
 * the output's largest magnitude. Prints GFLOP/s per GEMM and ms per step. The operands' values do
 * not matter to the time. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/timer.h"
#include "model/layout.h"
#include "model/matmul.h"

int main(int argc, char **argv) {
    int C = argc > 1 ? atoi(argv[1]) : 384, V = argc > 2 ? atoi(argv[2]) : 50257;
    int N = argc > 3 ? atoi(argv[3]) : 2048, reps = argc > 4 ? atoi(argv[4]) : 3;
    if (C < 1 || V < 1 || N < 1 || reps < 1) {
        fprintf(stderr, "usage: head_gemm [C>=1] [V>=1] [N>=1] [reps>=1]\n");
        return 2;
    }
    int Vp = (V + 63) / 64 * 64;
    mm_set_threads(omp_get_max_threads());
    uint16_t *A = malloc((size_t)N * Vp * 2), *X = malloc((size_t)N * C * 2), *W = malloc((size_t)Vp * C * 2);
    float *L = malloc((size_t)N * Vp * 4), *dx = malloc((size_t)N * C * 4), *dw = malloc((size_t)Vp * C * 4);
    if (!A || !X || !W || !L || !dx || !dw) {
        fprintf(stderr, "head_gemm: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < (size_t)N * Vp; i++) A[i] = (uint16_t)(0x3c00 + i % 97); /* bf16 values near 0.008 */
    for (size_t i = 0; i < (size_t)N * C; i++) X[i] = (uint16_t)(0x3c00 + i % 89);
    for (size_t i = 0; i < (size_t)Vp * C; i++) W[i] = (uint16_t)(0x3c00 + i % 83);
    memset(L, 0, (size_t)N * Vp * 4), memset(dx, 0, (size_t)N * C * 4), memset(dw, 0, (size_t)Vp * C * 4);
    printf("# head_gemm C %d V %d (padded %d), %d rows per step, %d threads, best of %d\n", C, V, Vp, N,
           omp_get_max_threads(), reps);
    size_t pw = mm_packed_b_words(V, C);
    uint32_t *Pt = pw ? aligned_alloc(64, pw * 4) : NULL, *Pn = pw ? aligned_alloc(64, pw * 4) : NULL;
    float *L2 = malloc((size_t)N * Vp * 4), *dx2 = malloc((size_t)N * C * 4);
    if ((pw && (!Pt || !Pn)) || !L2 || !dx2) {
        fprintf(stderr, "head_gemm: out of memory\n");
        return 1;
    }
    printf("| chunk rows | logits GFLOP/s | dX GFLOP/s | dW GFLOP/s | the three, ms per step | packed logits | packed dX | "
           "packing ms per step | packed three + packing, ms | max rel. diff logits, dX |\n"
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
    /* powers of two from 128, and the trainer's chunk (layout_head_chunk_rows) */
    ModelConfig mc = {0};
    mc.vocab_padded = Vp;
    int lay = layout_head_chunk_rows(&mc, 1, N), chunks[32], nc = 0;
    for (int ch = 128; nc < 30; ch *= 2) {
        if (lay < ch && (nc == 0 || chunks[nc - 1] < lay) && lay < N) chunks[nc++] = lay;
        chunks[nc++] = ch < N ? ch : N;
        if (ch >= N) break;
    }
    for (int ci = 0; ci < nc; ci++) {
        int chunk = chunks[ci];
        double best[3] = {1e30, 1e30, 1e30};
        for (int r = 0; r < reps; r++) {
            double t[3] = {0, 0, 0};
            for (int r0 = 0; r0 < N; r0 += chunk) {
                int m = N - r0 < chunk ? N - r0 : chunk;
                double a = timer_ms();
                mm_gemm_bf16(0, 1, m, V, C, 1.0f, X + (size_t)r0 * C, C, W, C, 0.0f, L, Vp);
                double b = timer_ms();
                mm_gemm_bf16(0, 0, m, C, V, 1.0f, A, Vp, W, C, 0.0f, dx + (size_t)r0 * C, C);
                double c = timer_ms();
                mm_gemm_bf16(1, 0, V, C, m, 1.0f, A, Vp, X + (size_t)r0 * C, C, 1.0f, dw, C);
                double d = timer_ms();
                t[0] += b - a, t[1] += c - b, t[2] += d - c;
            }
            for (int k = 0; k < 3; k++) best[k] = t[k] < best[k] ? t[k] : best[k];
        }
        double gf = 2.0 * N * V * C / 1e6; /* per GEMM per step, in GFLOP·ms/s units: / ms gives GFLOP/s */
        printf("| %d%s | %.0f | %.0f | %.0f | %.1f |", chunk, chunk == lay ? " (the trainer's)" : "", gf / best[0],
               gf / best[1], gf / best[2], best[0] + best[1] + best[2]);
        if (!pw) {
            printf(" – | – | – | – | no AVX512_BF16 kernels in this build |\n");
            continue;
        }
        double pbest[3] = {1e30, 1e30, 1e30};
        for (int r = 0; r < reps; r++) {
            double a = timer_ms();
            mm_pack_b_bf16(Pt, 1, V, C, W, C);
            mm_pack_b_bf16(Pn, 0, C, V, W, C);
            double t[3] = {timer_ms() - a, 0, 0};
            for (int r0 = 0; r0 < N; r0 += chunk) {
                int m = N - r0 < chunk ? N - r0 : chunk;
                double b = timer_ms();
                mm_packed_gemm_bf16(m, V, C, X + (size_t)r0 * C, C, Pt, L2, Vp);
                double c = timer_ms();
                mm_packed_gemm_bf16(m, C, V, A, Vp, Pn, dx2 + (size_t)r0 * C, C);
                t[1] += c - b, t[2] += timer_ms() - c;
            }
            for (int k = 0; k < 3; k++) pbest[k] = t[k] < pbest[k] ? t[k] : pbest[k];
        }
        /* The last chunk's logits (both paths wrote L rows 0..m-1 last) and every dX row. */
        int m = N % chunk ? N % chunk : chunk;
        double dl = 0, ml = 0, dd = 0, md = 0;
        for (size_t i = 0; i < (size_t)m; i++)
            for (int v = 0; v < V; v++) {
                double x = L[i * Vp + v], y = L2[i * Vp + v];
                dl = fabs(x - y) > dl ? fabs(x - y) : dl, ml = fabs(x) > ml ? fabs(x) : ml;
            }
        for (size_t i = 0; i < (size_t)N * C; i++)
            dd = fabs(dx[i] - dx2[i]) > dd ? fabs(dx[i] - dx2[i]) : dd, md = fabs(dx[i]) > md ? fabs(dx[i]) : md;
        printf(" %.0f | %.0f | %.1f | %.1f | %.1e, %.1e |\n", gf / pbest[1], gf / pbest[2], pbest[0],
               pbest[0] + pbest[1] + pbest[2] + best[2], dl / ml, dd / md);
    }
    free(Pt), free(Pn), free(L2), free(dx2);
    free(A), free(X), free(W), free(L), free(dx), free(dw);
    return 0;
}
