/* step_bench.c — times one training step (forward, backward, AdamW) of the GPT on random
 * tokens, per phase, for a given shape. Used by bench/bench_step.sh beside the PyTorch peer.
 *
 * usage: step_bench L NH C V B T [steps] [threads] [fp32|bf16] [none|selective|full] [gpt2|llama KV F]
 *   llama: RMSNorm, RoPE, SwiGLU of width F, KV key/value heads, untied head (issue 15). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/machine_peak.h"
#include "core/rng.h"
#include "core/timer.h"
#include "model/gpt.h"
#include "model/matmul.h"
#include "optim/optim.h"

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
    mm_set_threads(nt);
    Gpt g;
    MemStats ms = {0};
    GptOptions go = gpt_default_options();
    go.B = B, go.T = T, go.threads = nt, go.recompute = rc, go.precision = bf16 ? GPT_BF16 : GPT_FP32;
    if (gpt_init(&g, &mc, &go, &ms, &err) != ST_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    gpt_init_params(&g, 1);
    gpt_sync_lp(&g);
    int N = B * T;
    int32_t *inp = malloc(sizeof(int32_t) * N), *tgt = malloc(sizeof(int32_t) * N);
    float *m = calloc(g.w.layout.total, 4), *v = calloc(g.w.layout.total, 4);
    OptimRange r = {0, g.w.layout.total, 1, 1.0f};
    OptimConfig oc = optim_default_config(OPT_ADAMW);
    double *tot = calloc(steps, sizeof(double)), *fw = calloc(steps, sizeof(double)),
           *bw = calloc(steps, sizeof(double)), *op = calloc(steps, sizeof(double));
    for (int s = 0; s < steps; s++) {
        for (int i = 0; i < N; i++) {
            inp[i] = (int32_t)rng_below(7, 1, (uint64_t)s * N + i, (uint64_t)mc.vocab);
            tgt[i] = (int32_t)rng_below(7, 2, (uint64_t)s * N + i, (uint64_t)mc.vocab);
        }
        double t0 = timer_ms();
        gpt_overwrite_grads(&g);
        g.s.ms_fwd = g.s.ms_bwd = 0;
        gpt_forward(&g, inp, tgt, B, T, 1.0f / N, 1, 0);
        gpt_backward(&g);
        double t1 = timer_ms();
        double norm = optim_l2_norm(g.d.grads, g.w.layout.total, nt);
        optim_step_lowp(&oc, g.w.params, g.d.grads, m, v, &r, 1, s + 1, 1e-4f, optim_clip_scale(norm, 1.0f), g.w.params_lp,
                        bf16 ? OPTIM_LOWP_BF16 : OPTIM_LOWP_NONE, nt);
        double t2 = timer_ms();
        tot[s] = t2 - t0, fw[s] = g.s.ms_fwd, bw[s] = (t1 - t0) - g.s.ms_fwd, op[s] = t2 - t1;
    }
    int w = steps > 2 ? 2 : 0, n = steps - w;
    qsort(tot + w, n, sizeof(double), cmp), qsort(fw + w, n, sizeof(double), cmp);
    qsort(bw + w, n, sizeof(double), cmp), qsort(op + w, n, sizeof(double), cmp);
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
    printf("RESULT {\"peer\": \"scaletrain\", \"arch\": \"%s\", \"flops_per_token\": %.0f, \"L\": %d, \"C\": %d, \"V\": %d, \"B\": %d, \"T\": %d, \"threads\": %d, "
           "\"median_ms\": %.2f, \"forward_ms\": %.2f, \"backward_ms\": %.2f, \"optimizer_ms\": %.2f, "
           "\"tokens_per_s\": %.1f, \"gflops\": %.1f, \"peak_gflops\": %.1f, \"mfu\": %.4f, \"precision\": \"%s\", \"recompute\": \"%s\", "
           "\"activation_bytes\": %zu, \"allocated_bytes\": %zu, \"params\": %zu}\n",
           model_arch_name(mc.arch), fpt, mc.n_layer, mc.n_embd, mc.vocab, B, T, nt, med, fw[w + n / 2], bw[w + n / 2], op[w + n / 2], N / (med * 1e-3),
           fpt * N / (med * 1e-3) / 1e9, peak / 1e9, fpt * N / (med * 1e-3) / peak, bf16 ? "bf16" : "fp32", layout_recompute_name(rc),
           ms.bytes[MEM_ACTIVATIONS], ms.bytes[MEM_PARAMS] + ms.bytes[MEM_MASTER] + ms.bytes[MEM_GRADS] +
               ms.bytes[MEM_ACTIVATIONS] + ms.bytes[MEM_WORKSPACE] + 2 * g.w.layout.total * 4,
           g.w.layout.total);
    gpt_free(&g);
    return 0;
}
