/* step_bench.c — times one training step (forward, backward, AdamW) of the GPT on random
 * tokens, per phase, for a given shape. Used by bench/bench_step.sh beside the PyTorch peer.
 *
 * usage: step_bench L NH C V B T [steps] [threads] [fp32|bf16] [none|selective|full] [gpt2|llama KV F]
 *   llama: RMSNorm, RoPE, SwiGLU of width F, KV key/value heads, untied head (issue 15).
 *
 * Besides wall-clock medians it reports the median process CPU time of a step and of its parts
 * (cpu_*_ms). On a machine shared with other jobs the wall clock of a 2-thread step mostly measures
 * the other jobs (a thread waiting at a barrier for its descheduled partner), while the CPU time of
 * a 1-thread run stays close to the work done; with 1 thread it also reports cpu_mfu, the model
 * FLOPs per CPU second against a 512^3 GEMM of the precision timed the same way in the same
 * process (cpu_peak_gflops), as a load-robust stand-in for MFU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "train/machine_peak.h"
#include "core/timer.h"
#include "model/gpt.h"
#include "model/matmul.h"
#include "optim/optim.h"

#include "bench_step_common.h"

static double cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* The best FLOP/s in process CPU time of 20 calls of the 512^3 GEMM of machine_peak (C = A · B^T,
 * bf16 or fp32 inputs) after one untimed call. */
static double cpu_gemm_peak(int bf16) {
    const int S = 512;
    size_t n = (size_t)S * S;
    float *a = malloc(n * 4), *b = malloc(n * 4), *c = malloc(n * 4);
    uint16_t *ah = malloc(n * 2), *bh = malloc(n * 2);
    for (size_t i = 0; i < n; i++) {
        a[i] = 0.001f * (float)(i % 97), b[i] = 0.001f * (float)(i % 89);
        ah[i] = 0x3c00 + (uint16_t)(i % 7), bh[i] = 0x3c00 + (uint16_t)(i % 5);
    }
    double best = 0;
    for (int rep = 0; rep <= 20; rep++) {
        double t0 = cpu_ms();
        if (bf16) mm_gemm_bf16(0, 1, S, S, S, 1.0f, ah, S, bh, S, 0.0f, c, S);
        else mm_sgemm(0, 1, S, S, S, 1.0f, a, S, b, S, 0.0f, c, S);
        double r = 2.0 * S * S * (double)S / ((cpu_ms() - t0) * 1e-3);
        if (rep > 0 && r > best) best = r;
    }
    free(a), free(b), free(c), free(ah), free(bh);
    return best;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 7) {
        fprintf(stderr, "usage: step_bench L NH C V B T [steps] [threads]\n");
        return 2;
    }
    ModelConfig mc = {atoi(argv[1]), atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), 0, 1024, 0.0f};
    int B = atoi(argv[5]), T = atoi(argv[6]);
    int steps = argc > 7 ? atoi(argv[7]) : 12, nt = argc > 8 ? atoi(argv[8]) : 2;
    int bf16 = argc > 9 && !strcmp(argv[9], "bf16");
    Recompute rc = argc > 10 ? (!strcmp(argv[10], "full") ? RECOMPUTE_FULL
                                : !strcmp(argv[10], "selective") ? RECOMPUTE_SELECTIVE : RECOMPUTE_NONE)
                             : RECOMPUTE_NONE;
    if (argc > 11 && !strcmp(argv[11], "llama")) {
        mc.arch = ARCH_LLAMA, mc.untied = 1;
        mc.n_kv_head = argc > 12 ? atoi(argv[12]) : 0, mc.ffn = argc > 13 ? atoi(argv[13]) : 0;
    }
    Err err;
    if (model_config_validate(&mc, &err) != ST_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 2;
    }
    if (!bench_step_gemm_setup("step_bench", nt)) return 2;
    MemStats ms = {0};
    GptOptions go = gpt_default_options();
    go.B = B, go.T = T, go.threads = nt, go.recompute = rc, go.precision = bf16 ? GPT_BF16 : GPT_FP32;
    BenchStep bs;
    if (!bench_step_init(&bs, &mc, &go, &ms)) return 1;
    Gpt *g = &bs.g;
    int N = bs.N;
    double *tot = calloc(steps, sizeof(double)), *fw = calloc(steps, sizeof(double)),
           *bw = calloc(steps, sizeof(double)), *op = calloc(steps, sizeof(double));
    double *ctot = calloc(steps, sizeof(double)), *cfw = calloc(steps, sizeof(double)),
           *cbw = calloc(steps, sizeof(double)), *cop = calloc(steps, sizeof(double));
    for (int s = 0; s < steps; s++) {
        bench_step_batch(&bs, s);
        double t0 = timer_ms(), c0 = cpu_ms();
        gpt_overwrite_grads(g);
        g->s.ms_fwd = g->s.ms_bwd = 0;
        gpt_forward(g, bs.inp, bs.tgt, B, T, 1.0f / N, 1, 0);
        double c1 = cpu_ms();
        gpt_backward(g);
        double t1 = timer_ms(), c2 = cpu_ms();
        double norm = optim_l2_norm(g->d.grads, g->w.layout.total, nt);
        optim_step_lowp(&bs.oc, g->w.params, g->d.grads, bs.m, bs.v, &bs.r, 1, s + 1, 1e-4f, optim_clip_scale(norm, 1.0f), g->w.params_lp,
                        bf16 ? OPTIM_LOWP_BF16 : OPTIM_LOWP_NONE, nt);
        double t2 = timer_ms(), c3 = cpu_ms();
        tot[s] = t2 - t0, fw[s] = g->s.ms_fwd, bw[s] = (t1 - t0) - g->s.ms_fwd, op[s] = t2 - t1;
        ctot[s] = c3 - c0, cfw[s] = c1 - c0, cbw[s] = c2 - c1, cop[s] = c3 - c2;
    }
    int w = steps > 2 ? 2 : 0, n = steps - w;
    qsort(tot + w, n, sizeof(double), cmp), qsort(fw + w, n, sizeof(double), cmp);
    qsort(bw + w, n, sizeof(double), cmp), qsort(op + w, n, sizeof(double), cmp);
    qsort(ctot + w, n, sizeof(double), cmp), qsort(cfw + w, n, sizeof(double), cmp);
    qsort(cbw + w, n, sizeof(double), cmp), qsort(cop + w, n, sizeof(double), cmp);
    double med = tot[w + n / 2];
    double fpt = layout_flops_per_token(&mc, T);
    /* MFU against this machine's peak of the GEMM precision, measured now (same process, same load,
     * no cache): the best of the FMA probe and a GEMM, as the trainer's (train/machine_peak.h). */
    MachinePeakOptions po = machine_peak_default_options();
    po.threads = nt, po.bf16 = bf16;
    MachinePeak mp;
    Err perr;
    if (machine_peak_resolve(&mp, &po, &perr) != ST_OK) {
        fprintf(stderr, "step_bench: %s\n", perr.msg);
        return 1;
    }
    double peak = mp.best;
    double cpeak = nt == 1 ? cpu_gemm_peak(bf16) : 0, cmed = ctot[w + n / 2];
    /* No step beats the peak: when the fastest one did, the peak was measured low (under load), and
     * that step's rate is the peak (MFU <= 1, as the trainer's achieved-rate guard). */
    double best = fpt * N / (tot[w] * 1e-3), cbest = fpt * N / (ctot[w] * 1e-3);
    int raised = best > peak;
    if (raised) fprintf(stderr, "step_bench: the fastest step (%.1f GFLOP/s) beat the measured peak (%.1f): it is the peak\n",
                        best * 1e-9, peak * 1e-9), peak = best;
    if (cpeak > 0 && cbest > cpeak) cpeak = cbest;
    printf("RESULT {\"peer\": \"scaletrain\", \"arch\": \"%s\", \"flops_per_token\": %.0f, \"L\": %d, \"C\": %d, \"V\": %d, \"B\": %d, \"T\": %d, \"threads\": %d, "
           "\"median_ms\": %.2f, \"forward_ms\": %.2f, \"backward_ms\": %.2f, \"optimizer_ms\": %.2f, "
           "\"tokens_per_s\": %.1f, \"gflops\": %.1f, \"peak_gflops\": %.1f, \"peak_raised\": %d, \"mfu\": %.4f, \"precision\": \"%s\", \"recompute\": \"%s\", "
           "\"cpu_ms\": %.2f, \"cpu_forward_ms\": %.2f, \"cpu_backward_ms\": %.2f, \"cpu_optimizer_ms\": %.2f, "
           "\"cpu_peak_gflops\": %.1f, \"cpu_mfu\": %.4f, \"activation_bytes\": %zu, \"allocated_bytes\": %zu, \"params\": %zu}\n",
           model_arch_name(mc.arch), fpt, mc.n_layer, mc.n_embd, mc.vocab, B, T, nt, med, fw[w + n / 2], bw[w + n / 2], op[w + n / 2], N / (med * 1e-3),
           fpt * N / (med * 1e-3) / 1e9, peak / 1e9, raised, fpt * N / (med * 1e-3) / peak, bf16 ? "bf16" : "fp32", layout_recompute_name(rc),
           cmed, cfw[w + n / 2], cbw[w + n / 2], cop[w + n / 2], cpeak / 1e9, cpeak > 0 ? fpt * N / (cmed * 1e-3) / cpeak : 0.0,
           ms.bytes[MEM_ACTIVATIONS], ms.bytes[MEM_PARAMS] + ms.bytes[MEM_MASTER] + ms.bytes[MEM_GRADS] +
               ms.bytes[MEM_ACTIVATIONS] + ms.bytes[MEM_WORKSPACE] + 2 * g->w.layout.total * 4,
           g->w.layout.total);
    bench_step_free(&bs);
    return 0;
}
