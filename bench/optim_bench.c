/* optim_bench.c — the optimizer's time per step, Muon against AdamW, on a GPT-2 layout; and Muon's
 * Newton–Schulz GEMMs against the GEMM ceiling measured in the same process (issue 17).
 *
 * One process, dp 1, ZeRO 0: the computation parallel.c's par_optim_step runs there (the flat
 * ranges by optim_step_lowp; Muon: AdamW on the embeddings, biases and norms, then muon_momentum,
 * muon_ns and muon_apply on every hidden matrix; no broadcast at dp 1). Random gradients (the
 * time does not depend on their values). Rounds interleave AdamW and Muon; medians per variant.
 *
 * With "shampoo" as 8th argument it also times Shampoo at dp 1 (blocks of 512, the computation of
 * parallel.c's shampoo_step without collectives): shampoo_ms, the median of steps without roots
 * (interleaved with the others), shampoo_root_ms, one step that recomputes every block's roots, and
 * shampoo_amortized_ms = shampoo_ms + (root − shampoo_ms)/10 (--precond-every 10).
 *
 * usage: optim_bench L NH C V [rounds=5] [threads=2] [fp32|bf16] [shampoo]
 * Prints RESULT_SOPHIA (Sophia's rule, its Hessian EMA, amortised over hess_every 10, / AdamW) and a
 * RESULT line of JSON: adamw_ms, muon_ms, ratio, ns_ms (the Newton–Schulz part of muon_ms),
 * ns_gflops (muon_ns_flops over the median NS time), ns_best_gflops (over the fastest round's),
 * ceiling_gflops (the best of the NS's three GEMM shapes for the largest matrix, each timed alone
 * through model/matmul, best call), ns_vs_ceiling = ns_best_gflops / ceiling_gflops (best against
 * best: on shared cores the least disturbed figures compare like with like). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "core/timer.h"
#include "model/layout.h"
#include "model/matmul.h"
#include "optim/muon.h"
#include "optim/optim.h"
#include "optim/shampoo.h"

/* Shampoo at dp 1 on every block: Adam's moments of the matrices, statistics (+ roots when `roots`),
 * m̂ preconditioned, grafted to Adam's norm, applied (as parallel.c's shampoo_step). */
static void shampoo_bench_step(const ParamLayout *pl, const LayoutBlock *b, int nb, float **state, float *p, const float *g,
                               float *m, float *v, const int *is_mx, float *U, float *Ub, void *scr, long step, int roots,
                               int nt) {
    const float b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, bc1 = 1.0f - powf(b1, (float)step), bc2 = 1.0f - powf(b2, (float)step);
    Err e;
    for (int i = 0; i < pl->ntensors; i++) {
        if (!is_mx[i]) continue;
        const TensorInfo *t = &pl->tensors[i];
        long N = (long)t->numel;
        float *mm = m + t->offset, *vv = v + t->offset, *u = U + t->offset;
        const float *gg = g + t->offset;
#pragma omp parallel for simd num_threads(nt) schedule(static)
        for (long k = 0; k < N; k++) {
            mm[k] = b1 * mm[k] + (1 - b1) * gg[k], vv[k] = b2 * vv[k] + (1 - b2) * gg[k] * gg[k];
            u[k] = mm[k] / bc1;
        }
    }
    for (int k = 0; k < nb; k++) {
        float *L = state[k], *R = L + (size_t)b[k].r * b[k].r, *PL = R + (size_t)b[k].c * b[k].c, *PR = PL + (size_t)b[k].r * b[k].r,
              *D = PR + (size_t)b[k].c * b[k].c;
        shampoo_stats(L, R, g + b[k].offset, b[k].r, b[k].c, b[k].ld, b2, mm_sgemm, nt);
        if (roots) shampoo_root(PL, L, b[k].r, 1e-6f, mm_sgemm, scr, &e), shampoo_root(PR, R, b[k].c, 1e-6f, mm_sgemm, scr, &e);
        shampoo_precondition(D, PL, U + b[k].offset, b[k].ld, PR, b[k].r, b[k].c, mm_sgemm, scr);
        double a2 = 0;
        for (int i = 0; i < b[k].r; i++)
            for (int j = 0; j < b[k].c; j++) {
                size_t x = b[k].offset + (size_t)i * b[k].ld + j;
                double a = (m[x] / bc1) / (sqrtf(v[x] / bc2) + eps);
                a2 += a * a;
            }
        shampoo_graft(Ub + b[k].offset, b[k].ld, D, b[k].r, b[k].c, a2, nt);
    }
    for (int i = 0; i < pl->ntensors; i++)
        if (is_mx[i])
            muon_apply(p + pl->tensors[i].offset, Ub + pl->tensors[i].offset, pl->tensors[i].numel, 6e-4f, 0.1f, 1.0f, NULL,
                       OPTIM_LOWP_NONE, nt);
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* GFLOP/s of one GEMM shape: the best call of at least 5 (and at least 200 ms of calls) after a
 * warm-up — the ceiling is what the library reaches on the shape, so the least disturbed call. */
static double gemm_rate(int M, int N, int K, int bf16, int tb) {
    float *A = calloc((size_t)M * K, 4), *B = calloc((size_t)K * N, 4), *C = calloc((size_t)M * N, 4);
    uint16_t *Ab = calloc((size_t)M * K, 2), *Bb = calloc((size_t)K * N, 2);
    for (size_t i = 0; i < (size_t)M * K; i++) A[i] = 0.01f * (float)(i % 97), Ab[i] = 0x3c00;
    for (size_t i = 0; i < (size_t)K * N; i++) B[i] = 0.01f * (float)(i % 89), Bb[i] = 0x3c00;
    double best = INFINITY, total = 0;
    for (int r = -1; r < 5 || total < 200.0; r++) {
        double t0 = timer_ms();
        if (bf16) mm_gemm_bf16(0, tb, M, N, K, 1.0f, Ab, K, Bb, tb ? K : N, 0.0f, C, N);
        else mm_sgemm(0, tb, M, N, K, 1.0f, A, K, B, tb ? K : N, 0.0f, C, N);
        double t = timer_ms() - t0;
        if (r >= 0) total += t, best = t < best ? t : best;
    }
    free(A), free(B), free(C), free(Ab), free(Bb);
    return 2.0 * M * N * K / (best * 1e6);
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: optim_bench L NH C V [rounds] [threads] [fp32|bf16]\n");
        return 2;
    }
    ModelConfig mc = {atoi(argv[1]), atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), 0, 1024, 0.0f};
    int rounds = argc > 5 ? atoi(argv[5]) : 5, nt = argc > 6 ? atoi(argv[6]) : 2;
    int bf16 = argc > 7 && !strcmp(argv[7], "bf16"), sham = argc > 8 && !strcmp(argv[8], "shampoo");
    Err e;
    if (model_config_validate(&mc, &e) != ST_OK) return fprintf(stderr, "%s\n", e.msg), 2;
    mm_set_threads(nt);
    ParamLayout pl;
    if (layout_init(&pl, &mc, 1) != 0) return 1;
    size_t T = pl.total;
    float *p = malloc(T * 4), *g = malloc(T * 4), *m = calloc(T, 4), *v = calloc(T, 4);
    uint16_t *lp = bf16 ? malloc(T * 2) : NULL;
    size_t mub = layout_muon_bytes(&pl, bf16), nb = pl.seg_off[mc.n_layer + 1] - pl.seg_off[1];
    float *mu = aligned_alloc(64, (mub + 63) / 64 * 64);
    if (!p || !g || !m || !v || !mu || (bf16 && !lp)) return fprintf(stderr, "out of memory\n"), 1;
    for (size_t i = 0; i < T; i++) p[i] = 0.02f * rng_normal(1, 0, i), g[i] = 1e-3f * rng_normal(2, 0, i);
    float *U = mu - pl.seg_off[1];
    void *scratch = mu + nb;
    int nmx = layout_hidden_matrices(&pl, NULL);
    LayoutMatrix *mx = calloc((size_t)nmx, sizeof *mx);
    layout_hidden_matrices(&pl, mx);
    int *is_mx = calloc((size_t)pl.ntensors, sizeof(int));
    float *scale = calloc((size_t)pl.ntensors, sizeof(float));
    for (int i = 0; i < nmx; i++) is_mx[mx[i].tensor] = 1, scale[mx[i].tensor] = muon_shape_scale(mx[i].rows, mx[i].cols);
    OptimRange *all = calloc((size_t)pl.ntensors, sizeof *all), *flat = calloc((size_t)pl.ntensors, sizeof *flat);
    int nflat = 0;
    for (int i = 0; i < pl.ntensors; i++) {
        const TensorInfo *t = &pl.tensors[i];
        all[i] = (OptimRange){t->offset, t->numel, t->decay, 1.0f};
        if (!is_mx[i]) flat[nflat++] = all[i];
    }
    OptimConfig adam = optim_default_config(OPT_ADAMW), muon = optim_default_config(OPT_MUON);
    OptimLowp lk = bf16 ? OPTIM_LOWP_BF16 : OPTIM_LOWP_NONE;
    MuonGemm mg = muon_gemm(mm_sgemm, mm_gemm_bf16, bf16);
    double *ta = calloc((size_t)rounds, sizeof(double)), *tm = calloc((size_t)rounds, sizeof(double)),
           *tn = calloc((size_t)rounds, sizeof(double));
    /* Shampoo (optional): blocks of 512, each block's state and a second buffer for the updates. */
    int nsb = sham ? layout_shampoo_blocks(&pl, 512, 10, 1, NULL) : 0;
    LayoutBlock *sb = nsb > 0 ? calloc((size_t)nsb, sizeof *sb) : NULL;
    float **sst = nsb > 0 ? calloc((size_t)nsb, sizeof *sst) : NULL, *Ub = sham ? malloc(nb * 4) : NULL;
    void *sscr = NULL;
    double *ts = calloc((size_t)rounds, sizeof(double)), t_root = 0;
    double *tso = calloc((size_t)rounds, sizeof(double)), *the = calloc((size_t)rounds, sizeof(double));
    OptimConfig sophia = optim_default_config(OPT_SOPHIA);
    if (nsb > 0) {
        layout_shampoo_blocks(&pl, 512, 10, 1, sb);
        size_t mx_s = 0;
        for (int k = 0; k < nsb; k++) {
            sst[k] = calloc(shampoo_block_state_floats(sb[k].r, sb[k].c) + (size_t)sb[k].r * sb[k].c, 4);
            size_t s = shampoo_block_scratch_bytes(sb[k].r, sb[k].c);
            if (s > mx_s) mx_s = s;
        }
        sscr = aligned_alloc(64, (mx_s + 63) / 64 * 64);
        float *Ubf = Ub - pl.seg_off[1];
        double t0 = timer_ms(); /* step 1: the roots of every block */
        shampoo_bench_step(&pl, sb, nsb, sst, p, g, m, v, is_mx, U, Ubf, sscr, 1, 1, nt);
        t_root = timer_ms() - t0;
    }
    double ns_flops = 0;
    for (int i = 0; i < nmx; i++) ns_flops += muon_ns_flops(mx[i].rows, mx[i].cols, MUON_NS_STEPS);
    for (int r = -1; r < rounds; r++) { /* round -1 warms up both */
        double t0 = timer_ms();
        optim_step_lowp(&adam, p, g, m, v, all, pl.ntensors, 10, 6e-4f, 1.0f, lp, lk, nt);
        double t1 = timer_ms();
        optim_step_lowp(&muon, p, g, m, v, flat, nflat, 10, 6e-4f, 1.0f, lp, lk, nt);
        for (int i = 0; i < pl.ntensors; i++)
            if (is_mx[i])
                muon_momentum(m + pl.tensors[i].offset, g + pl.tensors[i].offset, U + pl.tensors[i].offset,
                              pl.tensors[i].numel, muon.muon_momentum, 1.0f, nt);
        double t2 = timer_ms();
        for (int i = 0; i < nmx; i++) muon_ns(&mg, U + mx[i].offset, U + mx[i].offset, mx[i].rows, mx[i].cols, scratch, nt);
        double t3 = timer_ms();
        for (int i = 0; i < pl.ntensors; i++) {
            const TensorInfo *t = &pl.tensors[i];
            if (is_mx[i])
                muon_apply(p + t->offset, U + t->offset, t->numel, 0.02f, muon.weight_decay, scale[i],
                           lp ? lp + t->offset : NULL, lk, nt);
        }
        double t4 = timer_ms();
        if (nsb > 0) {
            optim_step_lowp(&muon, p, g, m, v, flat, nflat, 10, 6e-4f, 1.0f, lp, lk, nt); /* Shampoo's AdamW part */
            shampoo_bench_step(&pl, sb, nsb, sst, p, g, m, v, is_mx, U, Ub - pl.seg_off[1], sscr, 2, 0, nt);
        }
        double t5 = timer_ms();
        optim_step_lowp(&sophia, p, g, m, v, all, pl.ntensors, 10, 6e-4f, 1.0f, lp, lk, nt); /* Sophia's rule */
        double t6 = timer_ms();
        optim_hess_update(&sophia, v, g, all, pl.ntensors, 1.0f, nt); /* its EMA, on a Hessian step */
        double t7 = timer_ms();
        if (r >= 0) ta[r] = t1 - t0, tm[r] = t4 - t1, tn[r] = t3 - t2, ts[r] = t5 - t4, tso[r] = t6 - t5, the[r] = t7 - t6;
    }
    if (mm_take_error(&e) != ST_OK) return fprintf(stderr, "%s\n", e.msg), 1;
    double ns_best = INFINITY;
    for (int r = 0; r < rounds; r++) ns_best = tn[r] < ns_best ? tn[r] : ns_best;
    double a = median(ta, rounds), mu_ms = median(tm, rounds), ns = median(tn, rounds);
    /* The ceiling: the NS's GEMM shapes of the largest matrix (m = C, n = 4C) timed alone. */
    int M = mc.n_embd, N = 4 * mc.n_embd;
    double c1 = gemm_rate(M, M, N, bf16, 1), c2 = gemm_rate(M, M, M, bf16, 0), c3 = gemm_rate(M, N, M, bf16, 0);
    double ceil = c1 > c2 ? c1 : c2;
    if (c3 > ceil) ceil = c3;
    double gf = ns_flops / (ns * 1e6), gfb = ns_flops / (ns_best * 1e6);
    printf("RESULT {\"L\": %d, \"C\": %d, \"V\": %d, \"precision\": \"%s\", \"threads\": %d, \"rounds\": %d, "
           "\"params\": %zu, \"matrices\": %d, \"adamw_ms\": %.2f, \"muon_ms\": %.2f, \"ratio\": %.3f, \"ns_ms\": %.2f, "
           "\"ns_gflops\": %.1f, \"ns_best_gflops\": %.1f, \"gemm_xxt_gflops\": %.1f, \"gemm_aa_gflops\": %.1f, \"gemm_bx_gflops\": %.1f, "
           "\"ceiling_gflops\": %.1f, \"ns_vs_ceiling\": %.3f}\n",
           mc.n_layer, mc.n_embd, mc.vocab, bf16 ? "bf16" : "fp32", nt, rounds, T, nmx, a, mu_ms, mu_ms / a, ns, gf, gfb,
           c1, c2, c3, ceil, gfb / ceil);
    if (nsb > 0) {
        double sm = median(ts, rounds);
        printf("RESULT_SHAMPOO {\"blocks\": %d, \"shampoo_ms\": %.2f, \"shampoo_root_ms\": %.2f, "
               "\"shampoo_amortized_ms\": %.2f, \"ratio_amortized\": %.3f}\n",
               nsb, sm, t_root, sm + (t_root - sm) / 10.0, (sm + (t_root - sm) / 10.0) / a);
    }
    /* Sophia: the update rule every step and the Hessian EMA on one step in hess_every (10); its
     * Hessian pass (a forward and backward) is the trainer's, not the optimizer's: time_ms.hessian. */
    double so = median(tso, rounds), he = median(the, rounds);
    printf("RESULT_SOPHIA {\"sophia_ms\": %.2f, \"hess_ema_ms\": %.2f, \"sophia_amortized_ms\": %.2f, "
           "\"ratio_amortized\": %.3f}\n", so, he, so + he / sophia.hess_every, (so + he / sophia.hess_every) / a);
    free(p), free(g), free(m), free(v), free(lp), free(mu), free(mx), free(is_mx), free(scale), free(all), free(flat);
    free(ta), free(tm), free(tn), free(ts), free(tso), free(the);
    layout_free(&pl);
    return 0;
}
