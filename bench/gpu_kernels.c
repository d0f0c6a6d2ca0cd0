/* gpu_kernels.c — the CUDA backend's kernels at GPT-2 124M's shapes (B 16, T 1024, C 768, 12 heads,
 * vocabulary 50257), timed through the backend table (issue 25; scripts/gpu_check.sh runs it).
 *
 * Until the trainer runs on the GPU (gpt_init refuses non-host backends), this is what can be
 * measured of "our step": each kernel's median time over reps after a warm-up (the backend's sync,
 * then the host clock), the bf16 GEMM rate on a 8192³ problem (the ceiling MFU is measured against,
 * and the figure plan's GPU presets can be calibrated with), a step estimate from them (12 × the
 * layer's kernels + the head + the AdamW update), and then the real step: the model built on the
 * device (GptOptions.device_resident), bf16, forward, backward, gradient norm, clip 1.0 and AdamW
 * with the bf16 working copy, timed by phase (the backend's sync between phases). Inputs are random
 * (never zeros: zeros run faster than real data). Prints a table and RESULT {json} lines.
 *
 * usage: gpu_kernels [cuda|cpu] [B] [T]     (defaults: cuda 16 1024) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "core/timer.h"
#include "model/backend.h"
#include "model/gpt.h"

static const Backend *be;

static void *dev_rand(size_t n, int bf16, uint64_t stream) {
    size_t bytes = n * (bf16 ? 2 : 4);
    void *h = malloc(bytes), *d = be->alloc(NULL, MEM_WORKSPACE, bytes);
    if (!h || !d) {
        Err e = {0};
        be->take_error(&e);
        fprintf(stderr, "gpu_kernels: allocation of %zu bytes failed: %s\n", bytes, e.msg);
        exit(1);
    }
    for (size_t i = 0; i < n; i++) { /* 2^20 random values, repeated: random data, a fast fill */
        float v = (2.0f * rng_uniform(1234, stream, i & 0xFFFFF) - 1.0f) * 0.5f;
        if (bf16) {
            uint32_t u;
            memcpy(&u, &v, 4);
            ((uint16_t *)h)[i] = (uint16_t)(u >> 16);
        } else {
            ((float *)h)[i] = v;
        }
    }
    be->from_host(d, h, bytes);
    free(h);
    return d;
}

static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median ms of reps runs of fn after 3 warm-up runs; the backend's failures are fatal. */
typedef void (*Fn)(void *ctx);
static double bench(Fn fn, void *ctx, int reps) {
    double t[64];
    for (int i = 0; i < 3; i++) fn(ctx);
    be->sync();
    for (int i = 0; i < reps; i++) {
        double t0 = timer_ms();
        fn(ctx);
        be->sync();
        t[i] = timer_ms() - t0;
    }
    Err e = {0};
    if (be->take_error(&e) != ST_OK) {
        fprintf(stderr, "gpu_kernels: %s\n", e.msg);
        exit(1);
    }
    qsort(t, reps, sizeof t[0], cmpd);
    return t[reps / 2];
}

typedef struct {
    int B, T, C, NH, V, Vp, N;
    float *x, *y, *res, *mean, *rstd, *w, *b, *qkv, *att, *lse, *dqkv, *fch, *out, *grads, *m, *v, *losses, *logits;
    uint16_t *xlp, *wlp, *big_a, *big_b, *plp;
    int32_t *tg;
    float *bigc;
    size_t nparams;
    MatPrec mp;
} Ctx;

static void f_gemm_peak(void *p) {
    Ctx *c = p;
    be->matmul_forward_lp(c->bigc, c->big_a, c->big_b, NULL, 8192, 8192, 8192);
}
static void f_qkv_fwd(void *p) {
    Ctx *c = p;
    be->matmul_forward_lp(c->qkv, c->xlp, c->wlp, c->b, c->N, c->C, 3 * c->C);
}
static void f_qkv_bwd(void *p) { /* dinp and dw of the same GEMM: two GEMMs of the forward's size */
    Ctx *c = p;
    be->matmul_backward_lp(c->y, c->grads, c->plp, c->xlp, c->wlp, c->N, c->C, 3 * c->C, 1);
}
static void f_fc_fwd(void *p) {
    Ctx *c = p;
    be->matmul_forward_lp(c->fch, c->xlp, c->wlp, c->b, c->N, c->C, 4 * c->C);
}
static void f_att_fwd(void *p) {
    Ctx *c = p;
    Dropout d = {0};
    be->attention_forward(c->att, c->lse, NULL, c->qkv, NULL, c->B, c->T, c->NH, c->NH, c->C / c->NH,
                          1.0f / sqrtf((float)(c->C / c->NH)), d, 1, 1);
}
static void f_att_bwd(void *p) {
    Ctx *c = p;
    Dropout d = {0};
    be->attention_backward(c->dqkv, NULL, c->att, c->qkv, c->att, c->lse, NULL, c->B, c->T, c->NH, c->NH, c->C / c->NH,
                           1.0f / sqrtf((float)(c->C / c->NH)), d, 1, 1);
}
static void f_ln_fwd(void *p) {
    Ctx *c = p;
    Dropout d = {0};
    be->residual_layernorm_forward_bf16(c->res, c->xlp, c->mean, c->rstd, c->res, c->x, d, c->w, c->b, c->N, c->C, 1);
}
static void f_ln_bwd(void *p) {
    Ctx *c = p;
    be->layernorm_backward(c->y, c->grads, c->grads + c->C, c->out, c->x, c->res, c->w, c->mean, c->rstd, c->N, c->C,
                           1, 1);
}
static void f_gelu_fwd(void *p) {
    Ctx *c = p;
    be->gelu_forward_bf16(c->plp, c->fch, (size_t)c->N * 4 * c->C, 1);
}
static void f_gelu_bwd(void *p) {
    Ctx *c = p;
    be->gelu_backward_bf16(c->plp, c->grads, NULL, c->fch, c->fch, c->N, 4 * c->C, 1, 1);
}
static void f_head(void *p) {
    Ctx *c = p;
    be->head_forward_backward_p(&c->mp, c->losses, c->y, c->grads, c->logits, c->x, c->grads, c->wlp, c->tg, c->N,
                                c->C, c->V, c->Vp, 1.0f / c->N, 1024, 1, 1, NULL, NULL, NULL, NULL);
}
static void f_adamw(void *p) {
    Ctx *c = p;
    BackendOptStep s = {BACKEND_OPT_ADAMW, 1e-4f, 0.1f, 1.0f, 0.9f, 0.95f, 1e-8f, 0, 0.1f, 0.05f, 2, 1};
    be->optim_update(&s, c->grads, c->out, c->m, c->v, c->wlp, c->nparams);
}

/* The model's own step at GPT-2 124M, bf16, on the device: median ms per phase over 10 steps. */
static void model_step(int B, int T, double peak_tflops) {
    ModelConfig mc = {12, 12, 768, 50257, 0, T, 0.0f};
    Err e = {0};
    if (model_config_validate(&mc, &e) != ST_OK) {
        fprintf(stderr, "gpu_kernels: %s\n", e.msg);
        exit(1);
    }
    GptOptions o = gpt_default_options();
    o.backend = be, o.B = B, o.T = T, o.precision = GPT_BF16, o.device_resident = 1;
    MemStats mem = {0};
    Gpt g;
    if (gpt_init(&g, &mc, &o, &mem, &e) != ST_OK) {
        fprintf(stderr, "gpu_kernels: model step: %s\n", e.msg);
        exit(1);
    }
    gpt_init_params(&g, 1);
    gpt_sync_lp(&g);
    size_t total = g.w.layout.total;
    float *m = be->alloc(&mem, MEM_MOMENTS, total * 4), *v = be->alloc(&mem, MEM_MOMENTS, total * 4);
    int32_t *inp = malloc((size_t)B * T * 4), *tgt = malloc((size_t)B * T * 4);
    double ph[4][16];
    const char *phase[4] = {"forward", "backward", "norm+clip", "AdamW"};
    int reps = 10;
    double loss = 0;
    for (int it = 0; it < 3 + reps; it++) {
        for (int i = 0; i < B * T; i++) {
            inp[i] = (int32_t)rng_below(5, (uint64_t)it, (uint64_t)i, 50257);
            tgt[i] = (int32_t)rng_below(6, (uint64_t)it, (uint64_t)i, 50257);
        }
        double t[5];
        be->sync();
        t[0] = timer_ms();
        gpt_zero_grads(&g);
        loss = gpt_forward(&g, inp, tgt, B, T, 1.0f / (B * T), 1, (uint64_t)it) / (B * T);
        be->sync();
        t[1] = timer_ms();
        gpt_backward(&g);
        be->sync();
        t[2] = timer_ms();
        if (gpt_status(&g, &e) != ST_OK) {
            fprintf(stderr, "gpu_kernels: model step: %s\n", e.msg);
            exit(1);
        }
        double norm = sqrt(be->sumsq(g.d.grads, total));
        float clip = norm > 1.0 ? (float)(1.0 / norm) : 1.0f;
        t[3] = timer_ms();
        BackendOptStep s = {BACKEND_OPT_ADAMW, 6e-4f, 0.1f, clip, 0.9f, 0.95f, 1e-8f, 0,
                            1.0f - powf(0.9f, it + 1.0f), 1.0f - powf(0.95f, it + 1.0f), it + 1, 1};
        be->optim_update(&s, g.w.params, g.d.grads, m, v, g.w.params_lp, total);
        be->sync();
        t[4] = timer_ms();
        if (be->take_error(&e) != ST_OK) {
            fprintf(stderr, "gpu_kernels: model step: %s\n", e.msg);
            exit(1);
        }
        if (it >= 3)
            for (int k = 0; k < 4; k++) ph[k][it - 3] = t[k + 1] - t[k];
    }
    double step = 0, med[4];
    for (int k = 0; k < 4; k++) {
        qsort(ph[k], reps, sizeof(double), cmpd);
        med[k] = ph[k][reps / 2];
        step += med[k];
    }
    size_t dev = 0;
    for (int c = 0; c < MEM_NCAT; c++) dev += mem.peak[c];
    double flops = 6.0 * 124475904.0 * B * T + 12.0 * 12 * T * 768.0 * B * T;
    printf("model step (GPT-2 124M, bf16, device-resident), B %d T %d: %.1f ms = %.0f tokens/s, MFU %.1f%% of "
           "the measured GEMM rate, %.1f%% of 989 TFLOP/s; loss %.4f; %.2f GiB allocated\n",
           B, T, step, B * T / (step * 1e-3), 100 * flops / (step * 1e-3) / (peak_tflops * 1e12),
           100 * flops / (step * 1e-3) / 989e12, loss, dev / 1073741824.0);
    for (int k = 0; k < 4; k++) printf("  %-10s %8.2f ms\n", phase[k], med[k]);
    for (int c = 0; c < MEM_NCAT; c++)
        if (mem.peak[c]) printf("  %-12s %10.1f MiB\n", mem_category_name((MemCategory)c), mem.peak[c] / 1048576.0);
    printf("RESULT {\"ours\":\"model-step\",\"B\":%d,\"T\":%d,\"median_ms\":%.2f,\"tokens_per_s\":%.0f,"
           "\"mfu\":%.4f,\"peak_mem_gib\":%.2f,\"fwd_ms\":%.2f,\"bwd_ms\":%.2f,\"norm_ms\":%.2f,\"opt_ms\":%.2f,"
           "\"loss\":%.4f}\n",
           B, T, step, B * T / (step * 1e-3), flops / (step * 1e-3) / 989e12, dev / 1073741824.0, med[0], med[1],
           med[2], med[3], loss);
    be->free(&mem, MEM_MOMENTS, m, total * 4), be->free(&mem, MEM_MOMENTS, v, total * 4);
    free(inp), free(tgt);
    gpt_free(&g);
}

int main(int argc, char **argv) {
    const char *name = argc > 1 ? argv[1] : "cuda";
    Err e = {0};
    if (backend_find(name, &be, &e) != ST_OK) {
        fprintf(stderr, "gpu_kernels: %s\n", e.msg);
        return 1;
    }
    if (!be->optim_update) {
        fprintf(stderr, "gpu_kernels: backend %s has no device optimizer entries: use cuda\n", be->name);
        return 1;
    }
    Ctx c = {0};
    c.B = argc > 2 ? atoi(argv[2]) : 16, c.T = argc > 3 ? atoi(argv[3]) : 1024;
    c.C = 768, c.NH = 12, c.V = 50257, c.Vp = 50304, c.N = c.B * c.T;
    size_t N = c.N, C = c.C;
    c.nparams = 124475904; /* GPT-2 124M with the padded vocabulary */
    c.x = dev_rand(N * C, 0, 1), c.y = dev_rand(N * C, 0, 2), c.res = dev_rand(N * C, 0, 3);
    c.mean = dev_rand(N, 0, 4), c.rstd = dev_rand(N, 0, 5), c.w = dev_rand(C, 0, 6), c.b = dev_rand(4 * C, 0, 7);
    c.qkv = dev_rand(N * 3 * C, 0, 8), c.att = dev_rand(N * C, 0, 9), c.lse = dev_rand(N * c.NH, 0, 10);
    c.dqkv = dev_rand(N * 3 * C, 0, 11), c.fch = dev_rand(N * 4 * C, 0, 12);
    c.out = dev_rand(c.nparams > N * C ? c.nparams : N * C, 0, 13);
    c.grads = dev_rand(c.nparams, 0, 14), c.m = dev_rand(c.nparams, 0, 15), c.v = dev_rand(c.nparams, 0, 16);
    c.losses = dev_rand(N, 0, 17), c.logits = dev_rand((size_t)1024 * c.Vp, 0, 18);
    c.xlp = dev_rand(N * 4 * C, 1, 19), c.wlp = dev_rand(c.nparams, 1, 20), c.plp = dev_rand(N * 4 * C, 1, 21);
    c.big_a = dev_rand((size_t)8192 * 8192, 1, 22), c.big_b = dev_rand((size_t)8192 * 8192, 1, 23);
    c.bigc = dev_rand((size_t)8192 * 8192, 0, 24);
    int32_t *tg = malloc(N * 4);
    for (size_t i = 0; i < N; i++) tg[i] = (int32_t)rng_below(1234, 99, i, c.V);
    c.tg = be->alloc(NULL, MEM_WORKSPACE, N * 4);
    be->from_host(c.tg, tg, N * 4);
    free(tg);
    c.mp.bf16 = 1, c.mp.a = dev_rand((size_t)1024 * c.Vp > N * 4 * C ? (size_t)1024 * c.Vp : N * 4 * C, 1, 25);
    c.mp.b = dev_rand(N * 4 * C, 1, 26);

    double peak_ms = bench(f_gemm_peak, &c, 10), peak = 2.0 * 8192.0 * 8192.0 * 8192.0 / (peak_ms * 1e-3) / 1e12;
    struct {
        const char *name;
        Fn fn;
        int per_step; /* times per training step */
    } K[] = {
        {"qkv GEMM fwd (bf16)", f_qkv_fwd, 12},     {"qkv GEMM bwd (bf16)", f_qkv_bwd, 12},
        {"fc GEMM fwd (bf16)", f_fc_fwd, 12 * 2},   /* fc and fcproj: about the same FLOPs */
        {"attention fwd (lowp)", f_att_fwd, 12},   {"attention bwd (lowp)", f_att_bwd, 12},
        {"res+LN fwd (bf16 out)", f_ln_fwd, 24},   {"LN bwd", f_ln_bwd, 24},
        {"GELU fwd (bf16 out)", f_gelu_fwd, 12},   {"GELU bwd + bias", f_gelu_bwd, 12},
        {"head fwd+bwd (bf16)", f_head, 1},        {"AdamW 124M (+bf16 copy)", f_adamw, 1},
    };
    int nk = sizeof K / sizeof K[0];
    double total = 0, ms[16];
    printf("gpu_kernels: backend %s, GPT-2 124M shapes B %d T %d; bf16 GEMM 8192^3: %.3f ms = %.1f TFLOP/s\n",
           be->name, c.B, c.T, peak_ms, peak);
    printf("%-26s %10s %8s %12s\n", "kernel", "ms", "x/step", "ms/step");
    for (int k = 0; k < nk; k++) {
        ms[k] = bench(K[k].fn, &c, 9);
        total += ms[k] * K[k].per_step;
        printf("%-26s %10.3f %8d %12.2f\n", K[k].name, ms[k], K[k].per_step, ms[k] * K[k].per_step);
    }
    /* the qkv backward twice more for attproj/fc/fcproj backward: ~3x the qkv's 2 GEMMs */
    double gemm_bwd_rest = ms[1] * 12 * 3;
    total += gemm_bwd_rest;
    double flops = 6.0 * 124e6 * N + 12.0 * 12 * c.T * C * N; /* 6ND + attention (PaLM's appendix B) */
    printf("%-26s %10s %8s %12.2f\n", "other GEMM bwd (est.)", "", "", gemm_bwd_rest);
    /* A/B: the scalar attention kernels (ST_CUDA_ATT_SCALAR=1) beside the tensor-core ones; not in the sum */
    const char *was = getenv("ST_CUDA_ATT_SCALAR");
    char keep[8] = "";
    if (was) snprintf(keep, sizeof keep, "%s", was);
    setenv("ST_CUDA_ATT_SCALAR", "1", 1);
    double sc_fwd = bench(f_att_fwd, &c, 9), sc_bwd = bench(f_att_bwd, &c, 9);
    if (was) setenv("ST_CUDA_ATT_SCALAR", keep, 1);
    else unsetenv("ST_CUDA_ATT_SCALAR");
    printf("%-26s %10.3f %8s %12s  default is %.2fx faster\n", "attention fwd (scalar A/B)", sc_fwd, "-", "",
           sc_fwd / ms[3]);
    printf("%-26s %10.3f %8s %12s  default is %.2fx faster\n", "attention bwd (scalar A/B)", sc_bwd, "-", "",
           sc_bwd / ms[4]);
    printf("step estimate: %.1f ms = %.0f tokens/s, MFU %.1f%% of the measured bf16 GEMM rate\n", total,
           N / (total * 1e-3), 100.0 * flops / (total * 1e-3) / (peak * 1e12));
    printf("RESULT {\"backend\":\"%s\",\"B\":%d,\"T\":%d,\"gemm_tflops\":%.1f,\"step_ms_est\":%.2f,"
           "\"attn_fwd_ms\":%.3f,\"attn_bwd_ms\":%.3f,\"attn_fwd_scalar_ms\":%.3f,\"attn_bwd_scalar_ms\":%.3f,"
           "\"head_ms\":%.3f,\"adamw_ms\":%.3f}\n",
           be->name, c.B, c.T, peak, total, ms[3], ms[4], sc_fwd, sc_bwd, ms[9], ms[10]);
    /* the kernels' buffers go before the model takes its memory */
    void *bufs[] = {c.x, c.y, c.res, c.mean, c.rstd, c.w, c.b, c.qkv, c.att, c.lse, c.dqkv, c.fch, c.out, c.grads,
                    c.m, c.v, c.losses, c.logits, c.xlp, c.wlp, c.plp, c.big_a, c.big_b, c.bigc, c.tg, c.mp.a,
                    c.mp.b};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) be->free(NULL, MEM_WORKSPACE, bufs[i], 1);
    model_step(c.B, c.T, peak);
    return 0;
}
