/* kernels_head.c — the fused LM head and cross-entropy (head_forward_backward*, kernels.h): logits,
 * softmax, loss and its gradient per chunk of rows, never the whole B·T × V logits. */
#include "model/kernels.h"

#include <math.h>
#include <omp.h>
#include <string.h>

#include "core/half.h"
#include "core/rng.h"
#include "core/timer.h"
#include "model/fastmath.h"
#include "model/kernels_internal.h"
#include "model/matmul.h"

/* ------------------------------------------------------------------------------------------ */
/* LM head + cross-entropy                                                                    */
/* ------------------------------------------------------------------------------------------ */

/* The LM head's GEMMs on one chunk of m rows (x_c: the chunk's rows of x) against `rows` rows of
 * wte, in the precision of mp: logits (m, rows; leading dimension ld) = x_c · wte^T, and from the
 * logits' gradient left in `logits`: dx_c = dlogits · wte, dwte (+)= dlogits^T · x_c (beta 0: =).
 * The fp16 path reads wte widened into mp->fw (head_widen) and x_c rounded into mp->fb by the
 * logits call; bf16 keeps x_c's bf16 copy in mp->b for the backward. */
static void head_widen(const MatPrec *mp, const uint16_t *wte_lp, int rows, int C, int nt) {
    if (mp && mp->fp16 && rows > 0) widen_fp16(mp->fw, wte_lp, (size_t)rows * C, nt);
}

/* The packed copies of wte_lp's `rows` rows (MatPrec.wt, .wn) for this call over n rows of x: 1
 * when the head takes the packed GEMMs. wn only with a backward. Timed into the forward and backward it serves. */
static int head_pack(const MatPrec *mp, const uint16_t *wte_lp, int n, int rows, int C, int backward, double *ms_fwd,
                     double *ms_bwd) {
    if (!mp || !mp->bf16 || !mp->wt || rows <= 0 || !mm_head_pack_wanted(n) ||
        mm_packed_b_words(rows, C) > mp->pack_words || mm_packed_b_words(C, rows) > mp->pack_words)
        return 0;
    double t0 = timer_ms();
    mm_pack_b_bf16(mp->wt, 1, rows, C, wte_lp, C);
    double t1 = timer_ms();
    if (backward) mm_pack_b_bf16(mp->wn, 0, C, rows, wte_lp, C);
    if (ms_fwd) *ms_fwd += t1 - t0;
    if (ms_bwd) *ms_bwd += timer_ms() - t1;
    return 1;
}

/* bf16: x_c rounded into mp->b + xb_off (the chunk's place among the rows the backward reads). */
static void head_logits_gemm(const MatPrec *mp, float *logits, int ld, const float *x_c, const float *wte,
                             const uint16_t *wte_lp, int m, int rows, int C, int nt, int packed, size_t xb_off) {
    if (mp && mp->bf16) {
        uint16_t *xb = mp->b + xb_off;
        cast_bf16(xb, x_c, (size_t)m * C, nt);
        if (!(packed && mm_packed_gemm_bf16(m, rows, C, xb, C, mp->wt, logits, ld)))
            mm_gemm_bf16(0, 1, m, rows, C, 1.0f, xb, C, wte_lp, C, 0.0f, logits, ld);
    } else if (mp && mp->fp16) {
        round_fp16(mp->fb, x_c, (size_t)m * C, nt);
        mm_sgemm(0, 1, m, rows, C, 1.0f, mp->fb, C, mp->fw, C, 0.0f, logits, ld);
    } else {
        mm_sgemm(0, 1, m, rows, C, 1.0f, x_c, C, wte, C, 0.0f, logits, ld);
    }
}

/* The softmax denominator Σ_v e^(l[v] − mx) of one row, in blocks of HEAD_SUM_BLOCK: each block
 * summed in fp32 (vectorised where the compiler can), the block sums in double. A plain fp32 sum of
 * 50257 terms in order, as a build that does not vectorise the loop does it (the sanitizers', a
 * portable one), drifts ~1e-5 relative, past the head's fp32 tolerance; blocked, the error is that
 * of one block whatever the order inside it. head_exp_sum_store also leaves each exponential in
 * l[v] for the gradient pass. */
#define HEAD_SUM_BLOCK 512

static float head_exp_sum(const float *l, int V, float mx) {
    double s = 0;
    for (int b0 = 0; b0 < V; b0 += HEAD_SUM_BLOCK) {
        const int b1 = b0 + HEAD_SUM_BLOCK < V ? b0 + HEAD_SUM_BLOCK : V;
        float bs = 0;
#pragma omp simd reduction(+ : bs)
        for (int v = b0; v < b1; v++) bs += st_expf(l[v] - mx);
        s += bs;
    }
    return (float)s;
}

/* next (NULL: none): the row this thread takes next, requested into L2 a block at a time while the
 * exponentials keep the core busy; its max pass then reads it from L2, not memory (the passes over a
 * 333-row chunk of GPT-2's vocabulary 3.8 → 3.1 ms at 2 threads; bench/results/step.md). */
static float head_exp_sum_store(float *l, int V, float mx, const float *next) {
    double s = 0;
    for (int b0 = 0; b0 < V; b0 += HEAD_SUM_BLOCK) {
        const int b1 = b0 + HEAD_SUM_BLOCK < V ? b0 + HEAD_SUM_BLOCK : V;
        if (next)
            for (int v = b0; v < b1; v += 16) __builtin_prefetch(next + v, 0, 2);
        s += exp_rows_sum(l, b0, b1, mx);
    }
    return (float)s;
}

/* dwte NULL: a frozen head (LoRA), its weight gradient skipped. */
static void head_backward_gemms(const MatPrec *mp, float *dx_c, float *dwte, const float *logits, int ld,
                                const float *x_c, const float *wte, const uint16_t *wte_lp, int m, int rows, int C,
                                float beta, int nt, int lp_ready, int packed) {
    if (mp && mp->fp16) {
        round_fp16(mp->fa, logits, (size_t)m * ld, nt);
        mm_sgemm(0, 0, m, C, rows, 1.0f, mp->fa, ld, mp->fw, C, 0.0f, dx_c, C);
        if (dwte) mm_sgemm(1, 0, rows, C, m, 1.0f, mp->fa, ld, mp->fb, C, beta, dwte, C);
    } else if (mp && mp->bf16) {
        if (!lp_ready) cast_bf16(mp->a, logits, (size_t)m * ld, nt);
        if (!(packed && mm_packed_gemm_bf16(m, C, rows, mp->a, ld, mp->wn, dx_c, C)))
            mm_gemm_bf16(0, 0, m, C, rows, 1.0f, mp->a, ld, wte_lp, C, 0.0f, dx_c, C);
        if (dwte) mm_gemm_bf16(1, 0, rows, C, m, 1.0f, mp->a, ld, mp->b, C, beta, dwte, C);
    } else {
        mm_sgemm(0, 0, m, C, rows, 1.0f, logits, ld, wte, C, 0.0f, dx_c, C);
        if (dwte) mm_sgemm(1, 0, rows, C, m, 1.0f, logits, ld, x_c, C, beta, dwte, C);
    }
}

/* The label's logit gradient p - dscale rounded to bf16, with p first rounded to fp32 as the fp32
 * path stores it (volatile: no fused multiply-subtract may skip that rounding). */
static uint16_t label_grad_bf16(float p, float dscale) {
    volatile float q = p;
    return half_bf16(q - dscale);
}

void head_forward_backward(float *losses, float *dx, float *dwte, float *logits, const float *x, const float *wte,
                           const int32_t *targets, int n, int C, int V, int Vp, float dscale, int chunk, int acc,
                           int nt, float *probs_out, double *ms_fwd, double *ms_bwd) {
    head_forward_backward_p(NULL, losses, dx, dwte, logits, x, wte, NULL, targets, n, C, V, Vp, dscale, chunk, acc, nt,
                            probs_out, NULL, ms_fwd, ms_bwd);
}

/* The inverse-CDF draw of HeadSample on one row of unnormalised probabilities e (V, sum s): block
 * sums first (vectorised), then the one block element by element. A draw that rounding leaves past
 * the last element takes the last one with e > 0. */
static int sample_row(const float *e, int V, float s, float u) {
    const float target = u * s;
    float acc = 0;
    for (int b0 = 0; b0 < V; b0 += 64) {
        int b1 = b0 + 64 < V ? b0 + 64 : V;
        float bs = 0;
#pragma omp simd reduction(+ : bs)
        for (int v = b0; v < b1; v++) bs += e[v];
        if (acc + bs > target) {
            for (int v = b0; v < b1; v++)
                if ((acc += e[v]) > target) return v;
            for (int v = b1 - 1; v >= b0; v--)
                if (e[v] > 0) return v;
        }
        acc += bs;
    }
    for (int v = V - 1; v > 0; v--)
        if (e[v] > 0) return v;
    return 0;
}

void head_forward_backward_p(const MatPrec *mp, float *losses, float *dx, float *dwte, float *logits, const float *x,
                             const float *wte, const uint16_t *wte_lp, const int32_t *targets, int n, int C, int V,
                             int Vp, float dscale, int chunk, int acc, int nt, float *probs_out, const HeadSample *smp,
                             double *ms_fwd, double *ms_bwd) {
    head_widen(mp, wte_lp, V, C, nt); /* the V real rows of the tied weight */
    const int packed = head_pack(mp, wte_lp, n, V, C, dx != NULL, ms_fwd, ms_bwd);
    /* bf16 with a backward: the logits' gradient is written straight as the bf16 operand of the
     * two backward GEMMs (mp->a, leading dimension Vp), each value rounded from the same fp32 as
     * before, instead of into the fp32 logits and rounded by a second pass over them (a chunk's
     * logits are larger than the caches: that pass cost a read and a write of them). */
    const int fuse = mp && mp->bf16 && dx;
    /* Fused, the backward GEMMs run once per group of whole chunks (mp->head_rows rows, their bf16
     * logit gradients and inputs side by side in mp->a and mp->b): dwte is read and written once
     * per group, not per chunk. dx's rows are the same sums either way; dwte's are summed over a
     * group's rows in order, then added to the sum of the groups before. */
    const int group = fuse && mp->head_rows > chunk ? mp->head_rows / chunk * chunk : chunk;
    for (int g0 = 0; g0 < n; g0 += group) {
        const int gm = n - g0 < group ? n - g0 : group;
        for (int r0 = g0; r0 < g0 + gm; r0 += chunk) {
            int m = g0 + gm - r0 < chunk ? g0 + gm - r0 : chunk;
            double t0 = timer_ms();
            /* Only the V real columns are computed; padded columns are never read (probability 0). */
            head_logits_gemm(mp, logits, Vp, x + (size_t)r0 * C, wte, wte_lp, m, V, C, nt, packed,
                             (size_t)(r0 - g0) * C);
#pragma omp parallel for num_threads(nt) schedule(static)
            for (int i = 0; i < m; i++) {
                float *l = logits + (size_t)i * Vp;
                uint16_t *lo = fuse ? mp->a + (size_t)(r0 - g0 + i) * Vp : NULL;
                int t = targets[r0 + i];
                float mx = l[0], s;
#pragma omp simd reduction(max : mx)
                for (int v = 1; v < V; v++) mx = l[v] > mx ? l[v] : mx;
                if (smp) { /* the label drawn from this row's softmax; one exponential pass serves all */
                    if (t < 0) {
                        smp->labels[r0 + i] = -1, losses[r0 + i] = 0.0f;
                        if (lo) memset(lo, 0, sizeof(uint16_t) * V);
                        else if (dx) memset(l, 0, sizeof(float) * V);
                        continue;
                    }
                    s = head_exp_sum_store(l, V, mx, i + 1 < m ? l + Vp : NULL);
                    int y = sample_row(l, V, s, smp->u[r0 + i]);
                    smp->labels[r0 + i] = y;
                    losses[r0 + i] = logf(s) - logf(l[y]);
                    if (lo) {
                        float inv = dscale / s;
#pragma omp simd
                        for (int v = 0; v < V; v++) lo[v] = half_bf16(l[v] * inv);
                        lo[y] = label_grad_bf16(l[y] * inv, dscale);
                    } else if (dx) {
                        float inv = dscale / s;
#pragma omp simd
                        for (int v = 0; v < V; v++) l[v] *= inv;
                        l[y] -= dscale;
                    }
                    continue;
                }
                /* With a gradient to write, the sum pass stores each exponential in place and the
                 * gradient pass scales them (one exp per logit instead of two; the same floats, so the
                 * same bits). Row 0 with probs_out keeps the logits: its probabilities read them. */
                if ((lo || dx) && t >= 0 && !(probs_out && r0 + i == 0)) {
                    const float lt = l[t];
                    s = head_exp_sum_store(l, V, mx, i + 1 < m ? l + Vp : NULL);
                    losses[r0 + i] = mx + logf(s) - lt;
                    float inv = dscale / s;
                    if (lo) {
#pragma omp simd
                        for (int v = 0; v < V; v++) lo[v] = half_bf16(l[v] * inv);
                        lo[t] = label_grad_bf16(l[t] * inv, dscale);
                    } else {
#pragma omp simd
                        for (int v = 0; v < V; v++) l[v] *= inv;
                        l[t] -= dscale;
                    }
                    continue;
                }
                s = head_exp_sum(l, V, mx);
                float lse = mx + logf(s);
                losses[r0 + i] = t >= 0 ? lse - l[t] : 0.0f;
                if (probs_out && r0 + i == 0)
                    for (int v = 0; v < V; v++) probs_out[v] = st_expf(l[v] - lse);
                if (lo) {
                    if (t < 0) {
                        memset(lo, 0, sizeof(uint16_t) * V);
                    } else {
                        float inv = dscale / s;
#pragma omp simd
                        for (int v = 0; v < V; v++) lo[v] = half_bf16(st_expf(l[v] - mx) * inv);
                        lo[t] = label_grad_bf16(st_expf(l[t] - mx) * inv, dscale);
                    }
                } else if (dx) {
                    if (t < 0) {
                        memset(l, 0, sizeof(float) * V);
                    } else {
                        float inv = dscale / s;
#pragma omp simd
                        for (int v = 0; v < V; v++) l[v] = st_expf(l[v] - mx) * inv;
                        l[t] -= dscale;
                    }
                }
            }
            if (ms_fwd) *ms_fwd += timer_ms() - t0;
        }
        /* Unfused, a group is one chunk, its gradient in the fp32 logits. beta 0 for the first
         * group (without acc): it writes dwte's V rows. */
        if (dx) {
            double t1 = timer_ms();
            head_backward_gemms(mp, dx + (size_t)g0 * C, dwte, logits, Vp, x + (size_t)g0 * C, wte, wte_lp, gm, V, C,
                                acc || g0 > 0 ? 1.0f : 0.0f, nt, fuse, packed);
            if (ms_bwd) *ms_bwd += timer_ms() - t1;
        }
    }
}

void head_forward_backward_vp(const MatPrec *mp, float *losses, float *dx, float *dwte, float *logits, float *stats,
                              const float *x, const float *wte, const uint16_t *wte_lp, const int32_t *targets, int n,
                              int C, int v0, int Vr, int Vl, float dscale, int chunk, int acc, int nt,
                              HeadReduceFn reduce, void *ctx, double *ms_fwd, double *ms_bwd) {
    head_widen(mp, wte_lp, Vr, C, nt);
    const int packed = head_pack(mp, wte_lp, n, Vr, C, dx != NULL, ms_fwd, ms_bwd);
    for (int r0 = 0; r0 < n; r0 += chunk) {
        int m = n - r0 < chunk ? n - r0 : chunk;
        float beta = acc || r0 > 0 ? 1.0f : 0.0f;
        float *mx = stats, *se = stats + m, *tl = stats + 2 * m;
        double t0 = timer_ms();
        if (Vr > 0) head_logits_gemm(mp, logits, Vl, x + (size_t)r0 * C, wte, wte_lp, m, Vr, C, nt, packed, 0);
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int i = 0; i < m; i++) {
            const float *l = logits + (size_t)i * Vl;
            float b = -INFINITY;
#pragma omp simd reduction(max : b)
            for (int v = 0; v < Vr; v++) b = l[v] > b ? l[v] : b;
            mx[i] = b;
        }
        reduce(ctx, mx, (size_t)m, 1);
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int i = 0; i < m; i++) {
            const float *l = logits + (size_t)i * Vl;
            const float s = head_exp_sum(l, Vr, mx[i]);
            int t = targets[r0 + i] - v0;
            se[i] = s;
            tl[i] = t >= 0 && t < Vr ? l[t] : 0.0f;
        }
        reduce(ctx, se, 2 * (size_t)m, 0);
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int i = 0; i < m; i++) {
            float *l = logits + (size_t)i * Vl;
            int t = targets[r0 + i];
            losses[r0 + i] = t >= 0 ? mx[i] + logf(se[i]) - tl[i] : 0.0f;
            if (dx) {
                if (t < 0) {
                    memset(l, 0, sizeof(float) * (size_t)Vr);
                } else {
                    float inv = dscale / se[i], b = mx[i];
#pragma omp simd
                    for (int v = 0; v < Vr; v++) l[v] = st_expf(l[v] - b) * inv;
                    if (t - v0 >= 0 && t - v0 < Vr) l[t - v0] -= dscale;
                }
            }
        }
        double t1 = timer_ms();
        if (ms_fwd) *ms_fwd += t1 - t0;
        if (dx) {
            if (Vr == 0) memset(dx + (size_t)r0 * C, 0, (size_t)m * C * sizeof(float));
            else
                head_backward_gemms(mp, dx + (size_t)r0 * C, dwte, logits, Vl, x + (size_t)r0 * C, wte, wte_lp, m, Vr, C,
                                    beta, nt, 0, packed);
            if (ms_bwd) *ms_bwd += timer_ms() - t1;
        }
    }
}
