/* attn_bench.c — attention forward + backward at one layer of a step_bench config, timed in process
 * CPU time (which a loaded machine disturbs far less than the wall clock), with a checksum of the
 * outputs so two builds can be compared bit for bit (issue 28; bench/results/step.md).
 *
 *   build/bench/attn_bench [B=8] [T=256] [NH=6] [hs=64] [lowp=1] [threads=1] [reps=7]
 *
 * attention_forward and attention_backward (GPT-2's, KV = NH, no dropout) on fixed inputs; prints
 * the best forward and backward CPU ms of reps runs, the GFLOP/s of the GEMM FLOPs they actually
 * run (64-query blocks against the keys up to the block's end: 2 GEMMs forward, 5 backward), and
 * two weighted sums of out and dqkv printed with 17 digits (equal between builds iff, in practice,
 * the bits are). Built against another tree's libst_model.a it measures that tree (see step.md). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "model/kernels.h"
#include "model/matmul.h"

static double cpu_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

int main(int argc, char **argv) {
    int B = argc > 1 ? atoi(argv[1]) : 8, T = argc > 2 ? atoi(argv[2]) : 256, NH = argc > 3 ? atoi(argv[3]) : 6;
    int hs = argc > 4 ? atoi(argv[4]) : 64, lowp = argc > 5 ? atoi(argv[5]) : 1, nt = argc > 6 ? atoi(argv[6]) : 1;
    int reps = argc > 7 ? atoi(argv[7]) : 7;
    if (B < 1 || T < 1 || NH < 1 || hs < 1 || nt < 1 || reps < 1)
        return fprintf(stderr, "attn_bench: expected positive B T NH hs lowp threads reps, found %s %s ...\n",
                       argc > 1 ? argv[1] : "", argc > 2 ? argv[2] : ""), 1;
    mm_set_threads(nt); /* as the trainer: oneDNN and our regions use nt threads */
    int C = NH * hs;
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C;
    float *qkv = malloc(nq * 4), *dq = malloc(nq * 4), *out = malloc(no * 4), *dy = malloc(no * 4);
    float *lse = malloc((size_t)B * NH * T * 4), *scr = calloc(attention_scratch_floats(T, hs, nt), 4);
    if (!qkv || !dq || !out || !dy || !lse || !scr) return fprintf(stderr, "attn_bench: out of memory\n"), 1;
    for (size_t i = 0; i < nq; i++) qkv[i] = sinf((float)i * 0.37f);
    for (size_t i = 0; i < no; i++) dy[i] = cosf((float)i * 0.11f);
    Dropout d = {0};
    double bf = 1e30, bb = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = cpu_ms();
        attention_forward(out, lse, scr, qkv, B, T, C, NH, d, lowp, nt);
        double t1 = cpu_ms();
        attention_backward(dq, scr, dy, qkv, out, lse, B, T, C, NH, d, lowp, nt);
        double t2 = cpu_ms();
        bf = t1 - t0 < bf ? t1 - t0 : bf, bb = t2 - t1 < bb ? t2 - t1 : bb;
    }
    double keys = 0; /* query-key pairs the blocks compute */
    for (int r0 = 0; r0 < T; r0 += 64) keys += (double)(T - r0 < 64 ? T - r0 : 64) * (r0 + (T - r0 < 64 ? T - r0 : 64));
    double f1 = 2.0 * hs * keys * B * NH; /* one GEMM over all blocks */
    double h1 = 0, h2 = 0;
    for (size_t i = 0; i < no; i++) h1 += out[i] * (double)(i % 7 + 1);
    for (size_t i = 0; i < nq; i++) h2 += dq[i] * (double)(i % 5 + 1);
    printf("attention B=%d T=%d NH=%d hs=%d %s, %d threads: forward %.2f ms (%.0f GFLOP/s), backward %.2f ms "
           "(%.0f GFLOP/s), CPU time, best of %d; checksum %.17g %.17g\n",
           B, T, NH, hs, lowp ? "bf16" : "fp32", nt, bf, 2 * f1 / bf * 1e-6, bb, 5 * f1 / bb * 1e-6, reps, h1, h2);
    free(qkv), free(dq), free(out), free(dy), free(lse), free(scr);
    return 0;
}
