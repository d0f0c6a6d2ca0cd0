/* step_profile.c — where a training step's time goes, by kernel: the step of step_bench (forward,
 * backward, gradient norm, AdamW) on random tokens, with the model running on a copy of the CPU
 * backend's table (model/backend.h) whose entries are wrapped by a wall-clock timer. The wrapped
 * entries call the CPU backend's own functions, so the step computes exactly what step_bench's does;
 * only the timer calls are added (two clock reads per kernel call, ≈ 50 ns each).
 *
 * usage: step_profile L NH C V B T [steps=8] [threads=2] [fp32|bf16]
 *
 * Prints, for the steps after two warm-up steps, one line per (kernel, shape): calls per step, ms
 * per step, % of the step, and for the GEMM entries the GFLOP/s achieved. The GEMMs inside the LM
 * head's chunks and attention's blocks are not separate entries; the head's are timed separately at
 * its chunk shapes (mm_gemm_bf16 / mm_sgemm, the three GEMMs of a chunk, same threads) so its non-GEMM
 * part is its time minus those. "unwrapped" is the step minus everything listed (loops, barriers,
 * the kernels gpt.c calls outside the table). A 512^3 GEMM of the precision (as the peak's) is timed
 * for comparison. With 1 thread every time is process CPU time, else wall clock. bench/results/step_bf16_2026-11-26.md has the tables and the commands. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/timer.h"
#include "model/backend.h"
#include "model/gpt.h"
#include "model/matmul.h"
#include "optim/optim.h"

#include "bench_step_common.h"

/* ---- the timed table ---- */

/* The clock: wall time, or with 1 thread the process CPU time (a loaded machine's descheduling
 * then does not count; with 2 threads CPU time would count the spinning of a waiting thread). */
static int use_cpu_clock;
static double now_ms(void) {
    if (!use_cpu_clock) return timer_ms();
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

#define MAXK 256
typedef struct {
    char name[96];
    double ms, flops;
    long calls;
} Slot;
static Slot slots[MAXK];
static int nslots, recording;
static const Backend *cpu;

static void account(const char *name, double ms, double flops) {
    if (!recording) return;
    int i = 0;
    while (i < nslots && strcmp(slots[i].name, name)) i++;
    if (i == nslots) {
        if (nslots == MAXK) return;
        snprintf(slots[nslots++].name, sizeof slots[0].name, "%s", name);
    }
    slots[i].ms += ms, slots[i].flops += flops, slots[i].calls++;
}

/* T(label-format, flops, call): time one call of the CPU backend's entry under a label. */
#define T(flops, call, ...)                                                                                            \
    do {                                                                                                               \
        char nm_[96];                                                                                                  \
        snprintf(nm_, sizeof nm_, __VA_ARGS__);                                                                        \
        double t0_ = now_ms();                                                                                       \
        call;                                                                                                          \
        account(nm_, now_ms() - t0_, flops);                                                                         \
    } while (0)

static void w_encoder_forward(float *out, const int32_t *inp, const int32_t *pos, const float *wte, const float *wpe,
                              int B, int T_, int C, Dropout d, int nt) {
    T(0, cpu->encoder_forward(out, inp, pos, wte, wpe, B, T_, C, d, nt), "encoder_forward");
}
static void w_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp, const int32_t *pos,
                               int B, int T_, int C, Dropout d, int nt) {
    T(0, cpu->encoder_backward(dwte, dwpe, dout, inp, pos, B, T_, C, d, nt), "encoder_backward");
}
static void w_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                                int N, int C, int nt) {
    T(0, cpu->layernorm_forward(out, mean, rstd, inp, w, b, N, C, nt), "layernorm_forward %dx%d", N, C);
}
static void w_layernorm_forward_bf16(uint16_t *out, float *mean, float *rstd, const float *inp, const float *w,
                                     const float *b, int N, int C, int nt) {
    T(0, cpu->layernorm_forward_bf16(out, mean, rstd, inp, w, b, N, C, nt), "layernorm_forward_bf16 %dx%d", N, C);
}
static void w_residual_layernorm_forward(float *res, float *out, float *mean, float *rstd, const float *a,
                                         const float *b, Dropout d, const float *w, const float *bias, int N, int C,
                                         int nt) {
    T(0, cpu->residual_layernorm_forward(res, out, mean, rstd, a, b, d, w, bias, N, C, nt),
      "residual_layernorm_forward %dx%d", N, C);
}
static void w_residual_layernorm_forward_bf16(float *res, uint16_t *out, float *mean, float *rstd, const float *a,
                                              const float *b, Dropout d, const float *w, const float *bias, int N,
                                              int C, int nt) {
    T(0, cpu->residual_layernorm_forward_bf16(res, out, mean, rstd, a, b, d, w, bias, N, C, nt),
      "residual_layernorm_forward_bf16 %dx%d", N, C);
}
static void w_layernorm_backward(float *dinp, float *dw, float *db, float *scratch, const float *dout,
                                 const float *inp, const float *w, const float *mean, const float *rstd, int N, int C,
                                 int acc, int nt) {
    T(0, cpu->layernorm_backward(dinp, dw, db, scratch, dout, inp, w, mean, rstd, N, C, acc, nt),
      "layernorm_backward %dx%d", N, C);
}
/* Attention's GEMM FLOPs, causal blocks counted as the kernel runs them (half of T×T, as PaLM's
 * full-T×T convention halves): forward 2 GEMMs, backward 5 (recomputed scores, dV, dP, dQ, dK). */
static double att_flops(int B, int T_, int NH, int hs, int nmm) {
    return (double)nmm * 2.0 * B * NH * ((double)T_ * (T_ + 1) / 2) * hs;
}
static void w_attention_forward(float *out, float *lse, float *scratch, const float *qkv, const int32_t *pos, int B,
                                int T_, int NH, int KV, int hs, float scale, Dropout d, int lowp, int nt) {
    T(att_flops(B, T_, NH, hs, 2), cpu->attention_forward(out, lse, scratch, qkv, pos, B, T_, NH, KV, hs, scale, d, lowp, nt),
      "attention_forward B%d T%d NH%d hs%d", B, T_, NH, hs);
}
static void w_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *out,
                                 const float *lse, const int32_t *pos, int B, int T_, int NH, int KV, int hs,
                                 float scale, Dropout d, int lowp, int nt) {
    T(att_flops(B, T_, NH, hs, 5),
      cpu->attention_backward(dqkv, scratch, dout, qkv, out, lse, pos, B, T_, NH, KV, hs, scale, d, lowp, nt),
      "attention_backward B%d T%d NH%d hs%d", B, T_, NH, hs);
}
static void w_gelu_forward(float *out, const float *inp, size_t n, int nt) {
    T(0, cpu->gelu_forward(out, inp, n, nt), "gelu_forward %zu", n);
}
static void w_gelu_backward(float *dinp, const float *dout, const float *inp, size_t n, int nt) {
    T(0, cpu->gelu_backward(dinp, dout, inp, n, nt), "gelu_backward %zu", n);
}
static void w_gelu_forward_bf16(uint16_t *out, const float *inp, size_t n, int nt) {
    T(0, cpu->gelu_forward_bf16(out, inp, n, nt), "gelu_forward_bf16 %zu", n);
}
static void w_gelu_backward_bf16(uint16_t *dinp_lp, float *colsum, float *sums, const float *dout, const float *inp,
                                 int N, int OC, int acc, int nt) {
    T(0, cpu->gelu_backward_bf16(dinp_lp, colsum, sums, dout, inp, N, OC, acc, nt), "gelu_backward_bf16+colsum %dx%d", N, OC);
}
static void w_bias_add_rows(float *x, const float *bias, int N, int C, int nt) {
    T(0, cpu->bias_add_rows(x, bias, N, C, nt), "bias_add_rows %dx%d", N, C);
}
static void w_residual_forward(float *out, const float *a, const float *b, size_t n, Dropout d, int nt) {
    T(0, cpu->residual_forward(out, a, b, n, d, nt), "residual_forward %zu", n);
}
static void w_dropout_backward(float *out, const float *dout, size_t n, Dropout d, int nt) {
    T(0, cpu->dropout_backward(out, dout, n, d, nt), "dropout_backward %zu", n);
}
static void w_cast_bf16(uint16_t *dst, const float *src, size_t n, int nt) {
    T(0, cpu->cast_bf16(dst, src, n, nt), "cast_bf16 %zu", n);
}
static void w_cast_bf16_colsum(uint16_t *dst, float *colsum, float *sums, const float *src, int N, int OC, int acc,
                               int nt) {
    T(0, cpu->cast_bf16_colsum(dst, colsum, sums, src, N, OC, acc, nt), "cast_bf16+colsum %dx%d", N, OC);
}
static void w_add_or_set(float *dst, const float *src, size_t n, int acc) {
    T(0, cpu->add_or_set(dst, src, n, acc), "add_or_set %zu", n);
}
static void w_scale_inplace(float *x, size_t n, float a, int nt) {
    T(0, cpu->scale_inplace(x, n, a, nt), "scale_inplace %zu", n);
}
static void w_zero(void *dst, size_t bytes) { T(0, cpu->zero(dst, bytes), "zero %zu B", bytes); }
static void w_copy(void *dst, const void *src, size_t bytes) { T(0, cpu->copy(dst, src, bytes), "copy %zu B", bytes); }
static void w_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC,
                             int nt) {
    T(2.0 * N * C * OC, cpu->matmul_forward(out, inp, w, bias, N, C, OC, nt), "GEMM fwd fp32 %dx%dx%d", N, C, OC);
}
/* The distinct (N, C, OC) of the layer GEMMs seen, for the standalone comparison. */
static int shapes[32][3], nshapes;
static void shape_note(int N, int C, int OC) {
    for (int i = 0; i < nshapes; i++)
        if (shapes[i][0] == N && shapes[i][1] == C && shapes[i][2] == OC) return;
    if (nshapes < 32) shapes[nshapes][0] = N, shapes[nshapes][1] = C, shapes[nshapes++][2] = OC;
}
static void w_matmul_forward_lp(float *out, const uint16_t *inp_lp, const uint16_t *w_lp, const float *bias, int N,
                                int C, int OC) {
    shape_note(N, C, OC);
    T(2.0 * N * C * OC, cpu->matmul_forward_lp(out, inp_lp, w_lp, bias, N, C, OC), "GEMM fwd bf16 %dx%dx%d", N, C, OC);
}
static void w_matmul_backward_lp(float *dinp, float *dw, const uint16_t *dout_lp, const uint16_t *inp_lp,
                                 const uint16_t *w_lp, int N, int C, int OC, int acc) {
    /* dX and dW are two independent GEMMs inside the entry: timed one at a time (the same calls). */
    shape_note(N, C, OC);
    if (dinp) T(2.0 * N * C * OC, cpu->matmul_backward_lp(dinp, NULL, dout_lp, inp_lp, w_lp, N, C, OC, acc),
                "GEMM bwd bf16 dX %dx%dx%d", N, C, OC);
    if (dw) T(2.0 * N * C * OC, cpu->matmul_backward_lp(NULL, dw, dout_lp, inp_lp, w_lp, N, C, OC, acc),
              "GEMM bwd bf16 dW %dx%dx%d", N, C, OC);
}
static void w_matmul_forward_p(const MatPrec *mp, float *out, const float *inp, const float *w, const uint16_t *w_lp,
                               const float *bias, int N, int C, int OC, int nt) {
    shape_note(N, C, OC);
    T(2.0 * N * C * OC, cpu->matmul_forward_p(mp, out, inp, w, w_lp, bias, N, C, OC, nt),
      "GEMM fwd %s (+cast of X) %dx%dx%d", mp && mp->bf16 ? "bf16" : "fp32", N, C, OC);
}
static void w_matmul_backward_p(const MatPrec *mp, float *dinp, float *dw, float *dbias, const float *dout,
                                const float *inp, const float *w, const uint16_t *w_lp, int N, int C, int OC, int acc,
                                int nt) {
    shape_note(N, C, OC);
    T(2.0 * N * C * OC * ((dinp != NULL) + (dw != NULL)),
      cpu->matmul_backward_p(mp, dinp, dw, dbias, dout, inp, w, w_lp, N, C, OC, acc, nt),
      "GEMM bwd %s (+casts%s) %s%s %dx%dx%d", mp && mp->bf16 ? "bf16" : "fp32", dbias ? ", bias sum" : "",
      dinp ? "dX" : "", dw ? "dW" : "", N, C, OC);
}
static void w_head_forward_backward_p(const MatPrec *mp, float *losses, float *dx, float *dwte, float *logits,
                                      const float *x, const float *wte, const uint16_t *wte_lp, const int32_t *targets,
                                      int n, int C, int V, int Vp, float dscale, int chunk, int acc, int nt,
                                      float *probs_out, const HeadSample *smp, double *ms_fwd, double *ms_bwd) {
    T(6.0 * n * C * (double)Vp,
      cpu->head_forward_backward_p(mp, losses, dx, dwte, logits, x, wte, wte_lp, targets, n, C, V, Vp, dscale, chunk,
                                   acc, nt, probs_out, smp, ms_fwd, ms_bwd),
      "LM head fwd+bwd (3 GEMMs, softmax, loss) n%d C%d Vp%d chunk%d", n, C, Vp, chunk);
}

static Backend timed_backend(void) {
    cpu = backend_cpu();
    Backend b = *cpu;
    b.name = "cpu-timed";
    b.encoder_forward = w_encoder_forward, b.encoder_backward = w_encoder_backward;
    b.layernorm_forward = w_layernorm_forward, b.layernorm_forward_bf16 = w_layernorm_forward_bf16;
    b.residual_layernorm_forward = w_residual_layernorm_forward;
    b.residual_layernorm_forward_bf16 = w_residual_layernorm_forward_bf16;
    b.layernorm_backward = w_layernorm_backward;
    b.attention_forward = w_attention_forward, b.attention_backward = w_attention_backward;
    b.gelu_forward = w_gelu_forward, b.gelu_backward = w_gelu_backward;
    b.gelu_forward_bf16 = w_gelu_forward_bf16, b.gelu_backward_bf16 = w_gelu_backward_bf16;
    b.bias_add_rows = w_bias_add_rows, b.residual_forward = w_residual_forward;
    b.dropout_backward = w_dropout_backward, b.cast_bf16 = w_cast_bf16, b.cast_bf16_colsum = w_cast_bf16_colsum;
    b.add_or_set = w_add_or_set, b.scale_inplace = w_scale_inplace, b.zero = w_zero, b.copy = w_copy;
    b.matmul_forward = w_matmul_forward, b.matmul_forward_lp = w_matmul_forward_lp;
    b.matmul_backward_lp = w_matmul_backward_lp, b.matmul_forward_p = w_matmul_forward_p;
    b.matmul_backward_p = w_matmul_backward_p, b.head_forward_backward_p = w_head_forward_backward_p;
    return b;
}

/* ---- standalone GEMMs for comparison ---- */

/* Median ms of `reps` calls of C(m×n) = A(m×k)·B(n×k)^T (bf16 or fp32 operands, fp32 out; trans
 * flags as given), after one untimed call. */
static double gemm_ms(int bf16, int ta, int tb, int m, int n, int k, int reps) {
    size_t na = (size_t)m * k, nb = (size_t)n * k;
    float *a = malloc(na * 4), *b = malloc(nb * 4), *c = calloc((size_t)m * n, 4);
    uint16_t *ah = malloc(na * 2), *bh = malloc(nb * 2);
    for (size_t i = 0; i < na; i++) a[i] = 0.001f * (float)(i % 97), ah[i] = 0x3c00 + (uint16_t)(i % 7);
    for (size_t i = 0; i < nb; i++) b[i] = 0.001f * (float)(i % 89), bh[i] = 0x3c00 + (uint16_t)(i % 5);
    double best[64];
    if (reps > 64) reps = 64;
    for (int r = -1; r < reps; r++) {
        double t0 = now_ms();
        int lda = ta ? m : k, ldb = tb ? k : n;
        if (bf16) mm_gemm_bf16(ta, tb, m, n, k, 1.0f, ah, lda, bh, ldb, 0.0f, c, n);
        else mm_sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, n);
        if (r >= 0) best[r] = now_ms() - t0;
    }
    for (int i = 1; i < reps; i++)
        for (int j = i; j > 0 && best[j] < best[j - 1]; j--) {
            double t = best[j];
            best[j] = best[j - 1], best[j - 1] = t;
        }
    free(a), free(b), free(c), free(ah), free(bh);
    return best[reps / 2];
}

static int by_ms(const void *x, const void *y) {
    double a = ((const Slot *)x)->ms, b = ((const Slot *)y)->ms;
    return (a < b) - (a > b);
}

int main(int argc, char **argv) {
    if (argc < 7) {
        fprintf(stderr, "usage: step_profile L NH C V B T [steps=8] [threads=2] [fp32|bf16]\n");
        return 2;
    }
    ModelConfig mc = {atoi(argv[1]), atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), 0, 1024, 0.0f};
    int B = atoi(argv[5]), T_ = atoi(argv[6]);
    int steps = argc > 7 ? atoi(argv[7]) : 8, nt = argc > 8 ? atoi(argv[8]) : 2;
    if (argc > 9 && strcmp(argv[9], "bf16") && strcmp(argv[9], "fp32")) {
        fprintf(stderr, "step_profile: precision: expected fp32 or bf16, found '%s'\n", argv[9]);
        return 2;
    }
    int bf16 = argc > 9 && !strcmp(argv[9], "bf16");
    if (steps < 3) {
        fprintf(stderr, "step_profile: steps: expected at least 3 (2 warm-up), found %d\n", steps);
        return 2;
    }
    Err err;
    if (model_config_validate(&mc, &err) != ST_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 2;
    }
    if (!bench_step_gemm_setup("step_profile", nt)) return 2;
    use_cpu_clock = nt == 1;
    Backend tb = timed_backend();
    GptOptions go = gpt_default_options();
    go.B = B, go.T = T_, go.threads = nt, go.precision = bf16 ? GPT_BF16 : GPT_FP32, go.backend = &tb;
    BenchStep bs; /* step_bench's step (bench_step_common.h) */
    if (!bench_step_init(&bs, &mc, &go, NULL)) return 1;
    Gpt *g = &bs.g;
    int N = bs.N;
    double step_ms = 0, fwd_ms = 0, bwd_ms = 0;
    for (int s = 0; s < steps; s++) {
        bench_step_batch(&bs, s);
        recording = s >= 2;
        double t0 = now_ms();
        gpt_overwrite_grads(g);
        gpt_forward(g, bs.inp, bs.tgt, B, T_, 1.0f / N, 1, 0);
        double t1 = now_ms();
        gpt_backward(g);
        double t2 = now_ms();
        double norm;
        T(0, norm = optim_l2_norm(g->d.grads, g->w.layout.total, nt), "gradient norm (reads %zu grads)", g->w.layout.total);
        T(0,
          optim_step_lowp(&bs.oc, g->w.params, g->d.grads, bs.m, bs.v, &bs.r, 1, s + 1, 1e-4f, optim_clip_scale(norm, 1.0f),
                          g->w.params_lp, bf16 ? OPTIM_LOWP_BF16 : OPTIM_LOWP_NONE, nt),
          "AdamW%s (%zu params)", bf16 ? " + bf16 copy" : "", g->w.layout.total);
        if (recording) step_ms += now_ms() - t0, fwd_ms += t1 - t0, bwd_ms += t2 - t1;
    }
    recording = 0;
    int ns = steps - 2;
    double fpt = layout_flops_per_token(&mc, T_);
    double g512 = 2.0 * 512 * 512 * 512 / (gemm_ms(bf16, 0, 1, 512, 512, 512, 21) * 1e-3) / 1e9;
    printf("# step_profile %d/%d/%d/%d B%d T%d, %s, %d threads (%s), %d steps timed: step %.1f ms (fwd %.1f, bwd %.1f), "
           "%.1f model GFLOP/s; 512^3 GEMM %.1f GFLOP/s\n",
           mc.n_layer, mc.n_head, mc.n_embd, mc.vocab, B, T_, bf16 ? "bf16" : "fp32", nt, use_cpu_clock ? "process CPU time" : "wall clock", ns, step_ms / ns, fwd_ms / ns,
           bwd_ms / ns, fpt * N / (step_ms / ns * 1e-3) / 1e9, g512);
    qsort(slots, nslots, sizeof(Slot), by_ms);
    double listed = 0, gemm = 0;
    printf("| kernel (shape) | calls/step | ms/step | %% of step | GFLOP/s |\n|---|---:|---:|---:|---:|\n");
    for (int i = 0; i < nslots; i++) {
        Slot *k = &slots[i];
        listed += k->ms;
        if (!strncmp(k->name, "GEMM", 4)) gemm += k->ms;
        printf("| %s | %.0f | %.2f | %.1f |", k->name, (double)k->calls / ns, k->ms / ns, 100 * k->ms / step_ms);
        if (k->flops > 0) printf(" %.1f |\n", k->flops / (k->ms * 1e-3) / 1e9);
        else printf(" |\n");
    }
    printf("| unwrapped (loops, barriers, kernels outside the table) | | %.2f | %.1f | |\n", (step_ms - listed) / ns,
           100 * (step_ms - listed) / step_ms);
    printf("# layer GEMMs (table entries): %.1f ms/step, %.1f%% of the step\n", gemm / ns, 100 * gemm / step_ms);
    /* Each layer GEMM shape alone, the calls the model makes (kernels.c: forward out = X·W^T, dX =
     * dY·W, dW = dY^T·X), hot in cache, median of 9. */
    for (int i = 0; i < nshapes; i++) {
        int n_ = shapes[i][0], c_ = shapes[i][1], o_ = shapes[i][2];
        double f = 2.0 * n_ * c_ * o_ / 1e6;
        printf("# GEMM alone %dx%dx%d (N x C x OC): fwd %.1f, dX %.1f, dW %.1f GFLOP/s\n", n_, c_, o_,
               f / gemm_ms(bf16, 0, 1, n_, o_, c_, 9), f / gemm_ms(bf16, 0, 0, n_, c_, o_, 9),
               f / gemm_ms(bf16, 1, 0, o_, c_, n_, 9));
    }
    /* The head's three GEMMs per chunk alone (forward logits = x·wte^T, dx = dlogits·wte,
     * dwte += dlogits^T·x), at the chunk shape the model uses. */
    int chunk = g->s.head_chunk > 0 && g->s.head_chunk < N ? g->s.head_chunk : N, Vp = mc.vocab_padded;
    int nchunks = (N + chunk - 1) / chunk;
    double hm = 0;
    for (int c = 0; c < nchunks; c++) {
        int rows = c + 1 < nchunks ? chunk : N - c * chunk;
        hm += gemm_ms(bf16, 0, 1, rows, Vp, mc.n_embd, 5) + gemm_ms(bf16, 0, 0, rows, mc.n_embd, Vp, 5) +
              gemm_ms(bf16, 1, 0, Vp, mc.n_embd, rows, 5);
    }
    printf("# LM head's 3 GEMMs alone at its chunks (%d rows x %d x %d, %d chunks): %.2f ms/step, %.1f GFLOP/s\n",
           chunk, Vp, mc.n_embd, nchunks, hm, 6.0 * N * mc.n_embd * (double)Vp / (hm * 1e-3) / 1e9);
    bench_step_free(&bs);
    return 0;
}
