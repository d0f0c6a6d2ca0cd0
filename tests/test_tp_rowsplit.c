/* test_tp_rowsplit.c — the GEMM property the overlapped row-parallel forward rests on (issue 28,
 * gpt.c rowpar_forward, docs/parallel.md "Overlap"): a linear layer's GEMM out (M, OC) = in (M, K) ·
 * W^T computed as several GEMMs over row ranges of in gives every element the same bits as one GEMM
 * over all M rows, for the row ranges the model uses (layout_tp_row_chunks / layout_tp_row_start of
 * the rows held; under --sp each of the tp rank blocks cut the same way) and the shapes it meets.
 *
 * Oracle: the unsplit GEMM through the same entry points the model calls (mm_linear, and
 * mm_linear_bf16 on bf16-rounded operands), compared bit for bit (memcmp), at 1 and 2 threads; at 1
 * thread the chunks run on the second thread of an OpenMP region, as overlap_run runs them.
 * Shapes: bench/tp_speed.sh's at tp 2 (M = 8 x 256 rows; the attention projection K = 384/2, the
 * MLP down projection K = 4·384/2, OC = 384) and test_tp's (M = 2 x 29, 2 x 32; K 16 and 64, OC 32).
 * The same for the backward's input-gradient GEMM dY·W split into --sp's two rank blocks (gpt.c
 * sp_rowpar_backward; fcproj and attproj at the benchmark's shapes).
 * Negative control: the same GEMM split along K instead (two GEMMs, the second accumulating, which
 * changes the order of the additions; the reason the model never splits that way) must differ in
 * some element of the shapes with K >= 192. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/half.h"
#include "core/rng.h"
#include "model/layout.h"
#include "model/matmul.h"
#include "testutil.h"

typedef struct {
    int M, K, OC;
} Shape;

/* out rows [r0, r0 + m) = in rows [r0, r0 + m) · W^T, fp32 or bf16. */
static void gemm_rows(int bf, const float *in, const uint16_t *in_lp, const float *w, const uint16_t *w_lp, float *out,
                      int r0, int m, int K, int OC) {
    if (bf) mm_linear_bf16(m, OC, K, in_lp + (size_t)r0 * K, w_lp, NULL, out + (size_t)r0 * OC);
    else mm_linear(m, OC, K, in + (size_t)r0 * K, w, NULL, out + (size_t)r0 * OC);
}

/* The model's split of M rows: nb rank blocks (1, or tp under --sp) of M/nb rows, each in
 * layout_tp_row_chunks pieces; at one thread each piece on an OpenMP region's second thread. */
static void gemm_split(int bf, int nt, int nb, const float *in, const uint16_t *in_lp, const float *w,
                       const uint16_t *w_lp, float *out, int M, int K, int OC) {
    int Nl = M / nb;
    for (int k = 0; k < layout_tp_row_chunks(Nl); k++) {
        int r0 = layout_tp_row_start(Nl, k), m = layout_tp_row_start(Nl, k + 1) - r0;
        for (int r = 0; r < nb; r++) {
            if (nt > 1) {
                gemm_rows(bf, in, in_lp, w, w_lp, out, r * Nl + r0, m, K, OC);
                continue;
            }
#pragma omp parallel num_threads(2)
            if (omp_get_thread_num() == (omp_get_num_threads() > 1 ? 1 : 0))
                gemm_rows(bf, in, in_lp, w, w_lp, out, r * Nl + r0, m, K, OC);
        }
    }
}

int main(void) {
    static const Shape S[] = {{2048, 192, 384}, {2048, 768, 384}, {58, 16, 32}, {64, 16, 32}, {64, 64, 32}};
    int controls = 0, caught = 0;
    for (size_t i = 0; i < sizeof S / sizeof S[0]; i++) {
        int M = S[i].M, K = S[i].K, OC = S[i].OC;
        size_t nin = (size_t)M * K, nw = (size_t)OC * K, nout = (size_t)M * OC;
        float *in = malloc(nin * sizeof *in), *w = malloc(nw * sizeof *w);
        float *ref = malloc(nout * sizeof *ref), *got = malloc(nout * sizeof *got);
        uint16_t *in_lp = malloc(nin * sizeof *in_lp), *w_lp = malloc(nw * sizeof *w_lp);
        if (!in || !w || !ref || !got || !in_lp || !w_lp) {
            tu_check(0, "allocation", "out of memory");
            return tu_exit();
        }
        for (size_t x = 0; x < nin; x++) in[x] = rng_normal(11, i, x), in_lp[x] = half_bf16(in[x]);
        for (size_t x = 0; x < nw; x++) w[x] = 0.02f * rng_normal(12, i, x), w_lp[x] = half_bf16(w[x]);
        for (int bf = 0; bf < 2; bf++)
            for (int nt = 1; nt <= 2; nt++) {
                mm_set_threads(nt);
                gemm_rows(bf, in, in_lp, w, w_lp, ref, 0, M, K, OC);
                for (int nb = 1; nb <= 2; nb++) {
                    memset(got, 0xff, nout * sizeof *got); /* NaN: a row left unwritten fails */
                    gemm_split(bf, nt, nb, in, in_lp, w, w_lp, got, M, K, OC);
                    char name[160];
                    snprintf(name, sizeof name, "%s M=%d K=%d OC=%d threads %d, %s: row chunks == one GEMM to the bit",
                             bf ? "bf16" : "fp32", M, K, OC, nt, nb == 1 ? "all rows" : "2 rank blocks (--sp)");
                    tu_check(!memcmp(ref, got, nout * sizeof *got), name, "maxdiff=%g",
                             tu_max_abs_diff_f(ref, got, nout));
                }
                if (K < 192) continue;
                /* Negative control: split along K (the second half accumulates into the first's). */
                int k0 = K / 2;
                float *wa = malloc(nw * sizeof *wa);
                uint16_t *wa_lp = malloc(nw * sizeof *wa_lp);
                float *ina = malloc(nin * sizeof *ina);
                uint16_t *ina_lp = malloc(nin * sizeof *ina_lp);
                if (!wa || !wa_lp || !ina || !ina_lp) {
                    tu_check(0, "allocation", "out of memory");
                    return tu_exit();
                }
                /* Pass 1: the first k0 columns (zeroed elsewhere) ... */
                for (size_t x = 0; x < nw; x++) wa[x] = (int)(x % K) < k0 ? w[x] : 0, wa_lp[x] = half_bf16(wa[x]);
                gemm_rows(bf, in, in_lp, wa, wa_lp, got, 0, M, K, OC);
                /* ... pass 2: the rest, added in (C += A_hi · W_hi^T) */
                for (size_t x = 0; x < nin; x++) ina[x] = (int)(x % K) >= k0 ? in[x] : 0, ina_lp[x] = half_bf16(ina[x]);
                if (bf) mm_gemm_bf16(0, 1, M, OC, K, 1.0f, ina_lp, K, w_lp, K, 1.0f, got, OC);
                else mm_sgemm(0, 1, M, OC, K, 1.0f, ina, K, w, K, 1.0f, got, OC);
                controls++;
                caught += memcmp(ref, got, nout * sizeof *got) != 0;
                printf("control %s M=%d K=%d threads %d, split along K: maxdiff=%g\n", bf ? "bf16" : "fp32", M, K, nt,
                       tu_max_abs_diff_f(ref, got, nout));
                free(wa), free(wa_lp), free(ina), free(ina_lp);
            }
        free(in), free(w), free(ref), free(got), free(in_lp), free(w_lp);
    }
    /* The backward's input gradient dinp (M, K) = dY (M, OC) · W (OC, K) under --sp, split into the
     * tp = 2 rank blocks of M/2 rows (gpt.c sp_rowpar_backward): fcproj K = 768, attproj K = 192. */
    static const Shape D[] = {{2048, 768, 384}, {2048, 192, 384}, {58, 64, 32}};
    for (size_t i = 0; i < sizeof D / sizeof D[0]; i++) {
        int M = D[i].M, K = D[i].K, OC = D[i].OC, h = M / 2;
        size_t ndy = (size_t)M * OC, nw = (size_t)OC * K, nout = (size_t)M * K;
        float *dy = malloc(ndy * sizeof *dy), *w = malloc(nw * sizeof *w);
        float *ref = malloc(nout * sizeof *ref), *got = malloc(nout * sizeof *got);
        uint16_t *dy_lp = malloc(ndy * sizeof *dy_lp), *w_lp = malloc(nw * sizeof *w_lp);
        if (!dy || !w || !ref || !got || !dy_lp || !w_lp) {
            tu_check(0, "allocation", "out of memory");
            return tu_exit();
        }
        for (size_t x = 0; x < ndy; x++) dy[x] = rng_normal(13, i, x), dy_lp[x] = half_bf16(dy[x]);
        for (size_t x = 0; x < nw; x++) w[x] = 0.02f * rng_normal(14, i, x), w_lp[x] = half_bf16(w[x]);
        for (int bf = 0; bf < 2; bf++)
            for (int nt = 1; nt <= 2; nt++) {
                mm_set_threads(nt);
                if (bf) mm_gemm_bf16(0, 0, M, K, OC, 1.0f, dy_lp, OC, w_lp, K, 0.0f, ref, K);
                else mm_sgemm(0, 0, M, K, OC, 1.0f, dy, OC, w, K, 0.0f, ref, K);
                memset(got, 0xff, nout * sizeof *got);
                for (int r = 0; r < 2; r++) {
                    int r0 = r * h, m = r ? M - h : h;
#pragma omp parallel num_threads(2)
                    if (omp_get_thread_num() == (nt == 1 && omp_get_num_threads() > 1 ? 1 : 0)) {
                        if (bf) mm_gemm_bf16(0, 0, m, K, OC, 1.0f, dy_lp + (size_t)r0 * OC, OC, w_lp, K, 0.0f,
                                             got + (size_t)r0 * K, K);
                        else mm_sgemm(0, 0, m, K, OC, 1.0f, dy + (size_t)r0 * OC, OC, w, K, 0.0f, got + (size_t)r0 * K, K);
                    }
                }
                char name[160];
                snprintf(name, sizeof name, "%s dY·W M=%d K=%d OC=%d threads %d, 2 rank blocks: == one GEMM to the bit",
                         bf ? "bf16" : "fp32", M, K, OC, nt);
                tu_check(!memcmp(ref, got, nout * sizeof *got), name, "maxdiff=%g", tu_max_abs_diff_f(ref, got, nout));
            }
        free(dy), free(w), free(ref), free(got), free(dy_lp), free(w_lp);
    }
    Err e = {0};
    tu_check(mm_take_error(&e) == ST_OK, "no GEMM failed", "%s", e.msg);
    tu_check(controls > 0 && caught == controls, "negative control: every split along K differs from one GEMM",
             "%d of %d differ", caught, controls);
    return tu_exit();
}
