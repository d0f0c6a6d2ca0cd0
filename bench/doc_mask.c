/* doc_mask.c — the masked attention kernel's time against the causal one (issue 27; docs/doc-mask.md).
 *
 *   build/bench/doc_mask_bench [lowp] [threads]
 *
 * attention_gqa_forward + _backward on B = 2 rows of T = 1024 (12 heads of 64, KV = NH, no dropout,
 * fixed inputs): pos = NULL (causal), then document positions for documents of 1024, 512, 256, 128
 * and 64 tokens (every row cut into equal documents), then documents of pseudo-random lengths 1..255. Best of 5 runs each, in milliseconds; the
 * attention FLOPs fall as Σ L_i² / T² (1, 1/2, 1/4, 1/8, 1/16 of the causal row). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/timer.h"
#include "model/kernels.h"

int main(int argc, char **argv) {
    int B = 2, T = 1024, NH = 12, KV = 12, hs = 64;
    int lowp = argc > 1 ? atoi(argv[1]) : 0, nt = argc > 2 ? atoi(argv[2]) : 2;
    int ld = (NH + 2 * KV) * hs, C = NH * hs;
    size_t nq = (size_t)B * T * ld, no = (size_t)B * T * C;
    float *qkv = malloc(nq * 4), *dy = malloc(no * 4), *out = malloc(no * 4), *dq = malloc(nq * 4);
    float *lse = malloc((size_t)B * NH * T * 4), *scr = calloc(attention_gqa_scratch_floats(T, hs, 1, nt), 4);
    int32_t *pos = malloc(sizeof(int32_t) * B * T);
    if (!qkv || !dy || !out || !dq || !lse || !scr || !pos) return fprintf(stderr, "out of memory\n"), 1;
    for (size_t i = 0; i < nq; i++) qkv[i] = sinf((float)i * 0.37f);
    for (size_t i = 0; i < no; i++) dy[i] = cosf((float)i * 0.11f);
    static const int LENS[] = {0, 1024, 512, 256, 128, 64, -128}; /* -128: random lengths 1..255, mean 128 */
    Dropout d = {0};
    printf("attention fwd+bwd, B=%d T=%d NH=%d hs=%d, %s, %d threads (best of 5)\n", B, T, NH, hs,
           lowp ? "bf16" : "fp32", nt);
    for (int k = 0; k < 7; k++) {
        if (LENS[k] >= 0) {
            for (int i = 0; i < B * T; i++) pos[i] = k ? (i % T) % LENS[k] : i % T;
        } else { /* documents of pseudo-random lengths: every document start a new key offset */
            unsigned x = 12345;
            for (int i = 0, left = 0; i < B * T; i++) {
                if (i % T == 0 || left == 0) x = x * 1103515245u + 12345u, left = 1 + (int)((x >> 16) % 255u), pos[i] = 0;
                else pos[i] = pos[i - 1] + 1;
                left--;
            }
        }
        const int32_t *p = k ? pos : NULL;
        double best = INFINITY;
        for (int r = 0; r < 5; r++) {
            double t0 = timer_ms();
            attention_gqa_forward(out, lse, scr, qkv, p, B, T, NH, KV, hs, 0.125f, d, lowp, nt);
            attention_gqa_backward(dq, scr, dy, qkv, out, lse, p, B, T, NH, KV, hs, 0.125f, d, lowp, nt);
            double t = timer_ms() - t0;
            best = t < best ? t : best;
        }
        if (LENS[k] < 0) printf("random 1..255:     %7.1f ms\n", best);
        else if (k) printf("documents of %4d: %7.1f ms\n", LENS[k], best);
        else printf("pos NULL (causal): %7.1f ms\n", best);
    }
    free(qkv), free(dy), free(out), free(dq), free(lse), free(scr), free(pos);
    return 0;
}
