/* bf16_gemm.c — the bf16 layer GEMMs of a training step through the model's entry points
 * (mm_linear_bf16 for the forward, mm_gemm_bf16 for dX and dW += dY^T X), on the packed kernel
 * (matmul_pack.c) and on oneDNN (mm_pack_enable(0)), interleaved call by call so that load hits
 * both alike. Per shape: the best of the timed calls (after one untimed call each), GFLOP/s, and
 * packed / oneDNN; per config the summed time of its 12 layer GEMMs (one layer). Last, the ceilings
 * (ceilings below): the dot-product probe, and the packed kernel on hot operands.
 *
 * usage: bf16_gemm [threads=2] [reps=15] [configs=ABCG]   (BF16_GEMM_COLD=1: 64 MB written between
 * calls, so the operands come from memory as in a step)
 *   A 12/768, B×T 4×64; B and C 6/384, 8×256 (the same layer shapes); G gpt2-124m, 4×1024 */
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/peak.h"
#include "model/matmul.h"

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

/* kind 0: out (N, OC) = X (N, C) · W^T + bias; 1: dX (N, C) = dY (N, OC) · W; 2: dW (OC, C) += dY^T · X */
static void call(int kind, int N, int C, int OC, const uint16_t *x, const uint16_t *w, const uint16_t *dy,
                 const float *bias, float *out) {
    if (kind == 0) mm_linear_bf16(N, OC, C, x, w, bias, out);
    else if (kind == 1) mm_gemm_bf16(0, 0, N, C, OC, 1.0f, dy, OC, w, C, 0.0f, out, C);
    else mm_gemm_bf16(1, 0, OC, C, N, 1.0f, dy, OC, x, C, 1.0f, out, C);
}

/* What the layer GEMMs above can reach at best on this machine, measured in the same process: the
 * dot-product probe (core/peak.c: register-resident vdpbf16ps, the MFU peak of a bf16 run) and the
 * packed kernel on hot operands (512 rows × 48·2·nt columns × K 384, op(B) packed once and read
 * from L1/L2, A from L2, C in L2: no packing, no cold lines). The gap between the two is the
 * register tile's own cost (loads, broadcasts, its prologue and epilogue every 192 pairs); the gap
 * between the hot kernel and the table is what packing and memory cost the GEMMs of a step. */
static void ceilings(int nt, int reps) {
    const int M = 512, N = 96 * nt, K = 384;
    uint16_t *a = malloc((size_t)M * K * 2), *b = malloc((size_t)N * K * 2);
    uint32_t *bp = aligned_alloc(64, (mm_packed_b_words(N, K) * 4 + 63) / 64 * 64);
    float *c = calloc((size_t)M * N, 4);
    if (!a || !b || !bp || !c) {
        fprintf(stderr, "bf16_gemm: out of memory for the ceiling's operands\n");
        exit(1);
    }
    for (size_t i = 0; i < (size_t)M * K; i++) a[i] = 0x3c00 + (uint16_t)(i % 97);
    for (size_t i = 0; i < (size_t)N * K; i++) b[i] = 0x3c00 + (uint16_t)(i % 89);
    mm_pack_b_bf16(bp, 1, N, K, b, K);
    double best = 1e30;
    for (int r = 0; r < 20 * reps; r++) {
        double t0 = now_ms();
        mm_packed_gemm_bf16(M, N, K, a, K, bp, c, N);
        double t = now_ms() - t0;
        if (r > 0 && t < best) best = t;
    }
    double hot = 2.0 * M * N * K / best * 1e-6, probe = peak_measure_bf16(nt, 300) * 1e-9;
    printf("# ceilings, %d threads: bf16 dot-product probe %.0f GFLOP/s (the MFU peak); the packed kernel on hot "
           "operands (%d × %d × %d, op(B) packed once) %.0f GFLOP/s = %.2f of the probe\n",
           nt, probe, M, N, K, hot, hot / probe);
    free(a), free(b), free(bp), free(c);
}

int main(int argc, char **argv) {
    int nt = argc > 1 ? atoi(argv[1]) : 2, reps = argc > 2 ? atoi(argv[2]) : 15;
    const char *want = argc > 3 ? argv[3] : "ABCG";
    if (nt < 1 || reps < 2) {
        fprintf(stderr, "bf16_gemm: usage: bf16_gemm [threads >= 1] [reps >= 2] [configs]\n");
        return 2;
    }
    mm_set_threads(nt);
    /* cold=1 in the environment: 64 MB written between calls, so operands come from memory */
    size_t cold_n = (size_t)16 << 20;
    float *cold = getenv("BF16_GEMM_COLD") ? calloc(cold_n, 4) : NULL;
    mm_pack_enable(1);
    if (!mm_pack_wanted(2048, 384, 384)) {
        fprintf(stderr, "bf16_gemm: the packed GEMM is not used on this build/CPU (no AVX512_BF16, or AMX present)\n");
        return 1;
    }
    static const struct { char name; int N, C; } cfgs[] = {{'A', 256, 768}, {'B', 2048, 384}, {'G', 4096, 768}};
    static const char *kinds[3] = {"fwd", "dX", "dW"};
    printf("# bf16_gemm: %d threads, best of %d calls each, interleaved\n", nt, reps - 1);
    printf("| config | GEMM (N × C → OC) | oneDNN GFLOP/s | packed GFLOP/s | packed / oneDNN |\n|---|---|---:|---:|---:|\n");
    for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++) {
        if (!strchr(want, cfgs[c].name) && !(cfgs[c].name == 'B' && strchr(want, 'C'))) continue;
        int N = cfgs[c].N, C = cfgs[c].C;
        int ocs[4][2] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}}; /* (in, out): qkv, attproj, fc, fcproj */
        double sum[2] = {0, 0};
        for (int l = 0; l < 4; l++) {
            int Ci = ocs[l][0], OC = ocs[l][1];
            size_t nx = (size_t)N * Ci, nw = (size_t)OC * Ci, ny = (size_t)N * OC;
            uint16_t *x = malloc(nx * 2), *w = malloc(nw * 2), *dy = malloc(ny * 2);
            float *bias = calloc((size_t)OC, 4), *out = calloc(ny > nx ? (ny > nw ? ny : nw) : (nx > nw ? nx : nw), 4);
            for (size_t i = 0; i < nx; i++) x[i] = 0x3c00 + (uint16_t)(i % 97);
            for (size_t i = 0; i < nw; i++) w[i] = 0x3c00 + (uint16_t)(i % 89);
            for (size_t i = 0; i < ny; i++) dy[i] = 0x3c00 + (uint16_t)(i % 83);
            for (int k = 0; k < 3; k++) {
                double best[2] = {1e30, 1e30};
                for (int r = 0; r < reps; r++)
                    for (int p = 0; p < 2; p++) {
                        mm_pack_enable(p);
                        if (cold) /* the operands out of the caches, as in a step of a large model */
                            for (size_t q = 0; q < cold_n; q++) cold[q] += 1;
                        double t0 = now_ms();
                        call(k, N, Ci, OC, x, w, dy, bias, out);
                        double t = now_ms() - t0;
                        if (r > 0 && t < best[p]) best[p] = t;
                    }
                Err e;
                if (mm_take_error(&e) != ST_OK) {
                    fprintf(stderr, "bf16_gemm: %s\n", e.msg);
                    return 1;
                }
                double fl = 2.0 * N * Ci * OC;
                printf("| %c | %s %d × %d → %d | %.0f | %.0f | %.2f× |\n", cfgs[c].name, kinds[k], N, Ci, OC,
                       fl / best[0] * 1e-6, fl / best[1] * 1e-6, best[0] / best[1]);
                sum[0] += best[0], sum[1] += best[1];
            }
            free(x), free(w), free(dy), free(bias), free(out);
        }
        printf("| %c | one layer's 12 GEMMs, ms | %.2f | %.2f | %.2f× |\n", cfgs[c].name, sum[0], sum[1], sum[0] / sum[1]);
    }
    ceilings(nt, reps);
    return 0;
}
