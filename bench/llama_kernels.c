/* llama_kernels.c — timing of the Llama kernels (issue 15) and of the GPT-2 attention they replace.
 *
 *   llama_kernels att B T NH KV[,KV...] hs [fp32|bf16] [reps] [threads]
 *       attention_gqa_forward / _backward on random q, k, v, dY, no dropout, for each KV count of
 *       the list (same FLOPs: the query heads are the same), called in turn within each
 *       repetition; prints each one's median forward and backward ms over reps (after one
 *       warm-up), the GFLOP/s of the causal half, and the median of the per-repetition ratios to
 *       the first KV count of the list.
 *   llama_kernels mha B T NH hs [fp32|bf16] [reps] [threads]
 *       the same through attention_forward / _backward (C = NH·hs): the GPT-2 entry points, which
 *       this binary also has when compiled against an older kernels.c (-DLK_MHA_ONLY).
 *   llama_kernels elem N C F [reps] [threads]
 *       the memory-bound kernels on N rows: RMSNorm forward (fp32, bf16), residual+RMSNorm,
 *       RMSNorm backward, RoPE forward/backward (C/64 heads of 64, KV = heads/3 rounded up), SwiGLU
 *       forward (fp32, bf16) and backward (fp32, bf16) on (N, 2F), with LayerNorm and GELU beside
 *       them for scale; median ms and the GB/s of the bytes each must read and write once.
 *   llama_kernels cmp B T NH hs [fp32|bf16] [reps] [threads]     (built with -DLK_BASE only)
 *       base_attention_forward/_backward (another commit's kernels.c, its symbols renamed and
 *       the rest made local by bench/llama_kernels.sh) against attention_forward/_backward and
 *       attention_gqa at KV = NH, the three called in turn within each repetition, so that the
 *       machine's load hits all three alike; prints each one's median ms and the median over
 *       repetitions of the per-repetition ratio new / base.
 *   llama_kernels dump FILE
 *       writes attention_forward / _backward's outputs (out, lse, dqkv) for a fixed list of shapes,
 *       precisions, dropout and 1 and 2 threads, as raw floats: two builds give the same file iff
 *       the attention is bit-identical (bench/llama_kernels.sh compares the base commit's).
 *
 * Random inputs are N(0, 1) from core/rng (seeded), so runs and builds see the same numbers. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "core/timer.h"
#include "model/kernels.h"
#include "model/matmul.h"

static float *randv(size_t n, uint64_t stream) {
    float *x = malloc(n * sizeof(float));
    if (!x) {
        fprintf(stderr, "llama_kernels: out of memory (%zu floats)\n", n);
        exit(1);
    }
    for (size_t i = 0; i < n; i++) x[i] = rng_normal(7, stream, i);
    return x;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#define MAXREP 200

/* ---- attention ---- */

#define MAXKV 8

/* gqa = 0: attention_forward/_backward (KV = NH, one entry); else attention_gqa for each KV of kvs,
 * in turn within each repetition. */
static void bench_attention(int gqa, int B, int T, int NH, const int *kvs, int nkv, int hs, int lowp, int reps,
                            int nt) {
    int C = NH * hs, ldmax = 3 * C;
    float *qkv = randv((size_t)B * T * ldmax, 1), *dy = randv((size_t)B * T * C, 2);
    float *out = calloc((size_t)B * T * C, 4), *lse = calloc((size_t)B * NH * T, 4);
    float *dqkv = calloc((size_t)B * T * ldmax, 4);
    size_t ns = attention_scratch_floats(T, hs, nt);
#ifndef LK_MHA_ONLY
    for (int k = 0; k < nkv; k++) {
        size_t n = attention_gqa_scratch_floats(T, hs, NH / kvs[k], nt);
        if (n > ns) ns = n;
    }
#endif
    float *scr = calloc(ns, 4);
    Dropout d = {0};
    static double f[MAXKV][MAXREP], b[MAXKV][MAXREP], rf[MAXREP], rb[MAXREP];
    for (int r = -1; r < reps; r++)
        for (int k = 0; k < nkv; k++) {
            int KV = kvs[k];
            double t0 = timer_ms();
#ifndef LK_MHA_ONLY
            if (gqa) attention_gqa_forward(out, lse, scr, qkv, NULL, B, T, NH, KV, hs, 1.0f / sqrtf((float)hs), d, lowp, nt);
            else
#endif
                attention_forward(out, lse, scr, qkv, B, T, C, NH, d, lowp, nt);
            double t1 = timer_ms();
#ifndef LK_MHA_ONLY
            if (gqa) attention_gqa_backward(dqkv, scr, dy, qkv, out, lse, NULL, B, T, NH, KV, hs, 1.0f / sqrtf((float)hs), d, lowp, nt);
            else
#endif
                attention_backward(dqkv, scr, dy, qkv, out, lse, B, T, C, NH, d, lowp, nt);
            double t2 = timer_ms();
            if (r >= 0) f[k][r] = t1 - t0, b[k][r] = t2 - t1;
        }
    /* causal: half the T² scores; 2 GEMMs forward (QK^T, PV), 5 backward (with the QK^T recompute) */
    double flop = 2.0 * B * NH * (double)T * T / 2 * hs;
    for (int k = 0; k < nkv; k++) {
        for (int r = 0; r < reps; r++) rf[r] = f[k][r] / f[0][r], rb[r] = b[k][r] / b[0][r];
        double rfm = median(rf, reps), rbm = median(rb, reps), fm = median(f[k], reps), bm = median(b[k], reps);
        printf("%s B=%d T=%d NH=%d KV=%d hs=%d %s threads=%d: forward %.3f ms (%.1f GFLOP/s) backward %.3f ms "
               "(%.1f GFLOP/s) [median of %d]; ratio to KV=%d: forward %.4f backward %.4f\n",
               gqa ? "attention_gqa" : "attention(mha)", B, T, NH, kvs[k], hs, lowp ? "bf16" : "fp32", nt, fm,
               2 * flop / fm * 1e-6, bm, 5 * flop / bm * 1e-6, reps, kvs[0], rfm, rbm);
    }
    free(qkv), free(dy), free(out), free(lse), free(dqkv), free(scr);
}

#ifdef LK_BASE
void base_attention_forward(float *out, float *lse, float *scratch, const float *qkv, int B, int T, int C, int NH,
                            Dropout d, int lowp, int nt);
void base_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *out,
                             const float *lse, int B, int T, int C, int NH, Dropout d, int lowp, int nt);

/* Base, wrapper and GQA at KV = NH in turn, reps times; per-repetition ratios to the base. */
static void bench_cmp(int B, int T, int NH, int hs, int lowp, int reps, int nt) {
    int C = NH * hs;
    float *qkv = randv((size_t)B * T * 3 * C, 1), *dy = randv((size_t)B * T * C, 2);
    float *out = calloc((size_t)B * T * C, 4), *lse = calloc((size_t)B * NH * T, 4);
    float *dqkv = calloc((size_t)B * T * 3 * C, 4), *scr = calloc(attention_scratch_floats(T, hs, nt), 4);
    Dropout d = {0};
    double t[3][2][MAXREP], rt[2][2][MAXREP];
    for (int r = -1; r < reps; r++)
        for (int k = 0; k < 3; k++) {
            double t0 = timer_ms();
            if (k == 0) base_attention_forward(out, lse, scr, qkv, B, T, C, NH, d, lowp, nt);
            else if (k == 1) attention_forward(out, lse, scr, qkv, B, T, C, NH, d, lowp, nt);
            else attention_gqa_forward(out, lse, scr, qkv, NULL, B, T, NH, NH, hs, 1.0f / sqrtf((float)hs), d, lowp, nt);
            double t1 = timer_ms();
            if (k == 0) base_attention_backward(dqkv, scr, dy, qkv, out, lse, B, T, C, NH, d, lowp, nt);
            else if (k == 1) attention_backward(dqkv, scr, dy, qkv, out, lse, B, T, C, NH, d, lowp, nt);
            else attention_gqa_backward(dqkv, scr, dy, qkv, out, lse, NULL, B, T, NH, NH, hs, 1.0f / sqrtf((float)hs), d, lowp, nt);
            double t2 = timer_ms();
            if (r >= 0) t[k][0][r] = t1 - t0, t[k][1][r] = t2 - t1;
        }
    for (int k = 1; k < 3; k++)
        for (int p = 0; p < 2; p++)
            for (int r = 0; r < reps; r++) rt[k - 1][p][r] = t[k][p][r] / t[0][p][r];
    static const char *names[3] = {"base attention", "attention_forward/_backward", "attention_gqa KV = NH"};
    printf("cmp B=%d T=%d NH=%d hs=%d %s threads=%d, %d repetitions:\n", B, T, NH, hs, lowp ? "bf16" : "fp32", nt,
           reps);
    for (int k = 0; k < 3; k++) {
        double f = median(t[k][0], reps), b = median(t[k][1], reps);
        if (k == 0) printf("  %-28s forward %.3f ms backward %.3f ms\n", names[k], f, b);
        else
            printf("  %-28s forward %.3f ms backward %.3f ms  ratio to base: forward %.4f backward %.4f\n", names[k],
                   f, b, median(rt[k - 1][0], reps), median(rt[k - 1][1], reps));
    }
    free(qkv), free(dy), free(out), free(lse), free(dqkv), free(scr);
}
#endif

/* ---- bit-identity dump of the GPT-2 attention ---- */

static void dump_attention(FILE *fp) {
    static const struct { int B, T, NH, C, lowp; float p; } cs[] = {
        {2, 150, 2, 32, 0, 0.0f},  {2, 150, 2, 32, 0, 0.2f},  {1, 600, 2, 128, 1, 0.0f}, {1, 333, 2, 128, 1, 0.2f},
        {3, 70, 3, 96, 0, 0.0f},   {3, 70, 3, 96, 1, 0.0f},   {2, 257, 4, 256, 1, 0.1f}, {2, 257, 4, 256, 0, 0.1f},
        {1, 600, 2, 32, 0, 0.0f},  {4, 64, 6, 384, 1, 0.0f},
    };
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++)
        for (int nt = 1; nt <= 2; nt++) {
            int B = cs[c].B, T = cs[c].T, NH = cs[c].NH, C = cs[c].C, hs = C / NH;
            Dropout d = {cs[c].p, 21, 5};
            float *qkv = randv((size_t)B * T * 3 * C, 10 + c), *dy = randv((size_t)B * T * C, 30 + c);
            float *out = calloc((size_t)B * T * C, 4), *lse = calloc((size_t)B * NH * T, 4);
            float *dqkv = calloc((size_t)B * T * 3 * C, 4), *scr = calloc(attention_scratch_floats(T, hs, nt), 4);
            attention_forward(out, lse, scr, qkv, B, T, C, NH, d, cs[c].lowp, nt);
            attention_backward(dqkv, scr, dy, qkv, out, lse, B, T, C, NH, d, cs[c].lowp, nt);
            fwrite(out, 4, (size_t)B * T * C, fp);
            fwrite(lse, 4, (size_t)B * NH * T, fp);
            fwrite(dqkv, 4, (size_t)B * T * 3 * C, fp);
            free(qkv), free(dy), free(out), free(lse), free(dqkv), free(scr);
        }
}

/* ---- memory-bound kernels ---- */

#ifndef LK_MHA_ONLY
typedef struct {
    int N, C, F, hs, NH, KV, nt;
    float *x, *a, *res, *out, *w, *bias, *rstd, *mean, *dout, *dx, *dw, *db, *scr, *qkv, *cs, *h, *dh, *o, *dof, *g;
    uint16_t *lp, *hlp;
} Elem;

enum { K_RMS, K_RMS_BF16, K_RES_RMS, K_RMS_BWD, K_LN, K_LN_BWD, K_ROPE, K_ROPE_BWD, K_SWI, K_SWI_BF16, K_SWI_BWD,
       K_SWI_BWD_BF16, K_GELU, K_N };
static const char *knames[K_N] = {"rmsnorm_forward",  "rmsnorm_forward_bf16", "residual_rmsnorm_forward",
                                  "rmsnorm_backward", "layernorm_forward",    "layernorm_backward",
                                  "rope_forward",     "rope_backward",        "swiglu_forward",
                                  "swiglu_forward_bf16", "swiglu_backward",   "swiglu_backward_bf16",
                                  "gelu_forward (N x 4C)"};

static void run_kernel(Elem *e, int k) {
    int N = e->N, C = e->C, F = e->F, nt = e->nt;
    Dropout d = {0};
    switch (k) {
    case K_RMS: rmsnorm_forward(e->out, e->rstd, e->x, e->w, N, C, 1e-5f, nt); break;
    case K_RMS_BF16: rmsnorm_forward_bf16(e->lp, e->rstd, e->x, e->w, N, C, 1e-5f, nt); break;
    case K_RES_RMS: residual_rmsnorm_forward(e->res, e->out, e->rstd, e->x, e->a, d, e->w, N, C, 1e-5f, nt); break;
    case K_RMS_BWD: rmsnorm_backward(e->dx, e->dw, e->scr, e->dout, e->x, e->w, e->rstd, N, C, 1, nt); break;
    case K_LN: layernorm_forward(e->out, e->mean, e->rstd, e->x, e->w, e->bias, N, C, nt); break;
    case K_LN_BWD:
        layernorm_backward(e->dx, e->dw, e->db, e->scr, e->dout, e->x, e->w, e->mean, e->rstd, N, C, 1, nt);
        break;
    case K_ROPE: rope_forward(e->qkv, e->cs, NULL, 1, N, e->NH, e->KV, e->hs, 0, nt); break;
    case K_ROPE_BWD: rope_backward(e->qkv, e->cs, NULL, 1, N, e->NH, e->KV, e->hs, 0, nt); break;
    case K_SWI: swiglu_forward(e->o, e->h, N, F, nt); break;
    case K_SWI_BF16: swiglu_forward_bf16(e->hlp, e->h, N, F, nt); break;
    case K_SWI_BWD: swiglu_backward(e->dh, e->dof, e->h, N, F, nt); break;
    case K_SWI_BWD_BF16: swiglu_backward_bf16(e->hlp, e->dof, e->h, N, F, nt); break;
    case K_GELU: gelu_forward(e->g, e->h, (size_t)N * 4 * C, nt); break;
    }
}

/* Bytes each kernel must move at least once (reads + writes), for the GB/s column. */
static double kernel_bytes(const Elem *e, int k) {
    double NC = (double)e->N * e->C, NF = (double)e->N * e->F, R = (double)e->N * (e->NH + e->KV) * e->hs;
    switch (k) {
    case K_RMS: case K_LN: return 8 * NC;
    case K_RMS_BF16: return 6 * NC;
    case K_RES_RMS: return 16 * NC;
    case K_RMS_BWD: case K_LN_BWD: return 16 * NC; /* x, dout, dx read + dx written */
    case K_ROPE: case K_ROPE_BWD: return 8 * R;
    case K_SWI: return 12 * NF;
    case K_SWI_BF16: return 10 * NF;
    case K_SWI_BWD: return 20 * NF;
    case K_SWI_BWD_BF16: return 16 * NF;
    case K_GELU: return 32 * NC;
    }
    return 0;
}

static void bench_elem(int N, int C, int F, int reps, int nt) {
    Elem e = {N, C, F, 64, C / 64, (C / 64 + 2) / 3, nt};
    size_t NC = (size_t)N * C, NF = (size_t)N * F, ld = (size_t)(e.NH + 2 * e.KV) * e.hs;
    e.x = randv(NC, 1), e.a = randv(NC, 2), e.res = calloc(NC, 4), e.out = calloc(NC, 4), e.w = randv(C, 3);
    e.bias = randv(C, 4), e.rstd = calloc(N, 4), e.mean = calloc(N, 4), e.dout = randv(NC, 5), e.dx = calloc(NC, 4);
    e.dw = calloc(C, 4), e.db = calloc(C, 4), e.scr = calloc(((size_t)N / 64 + 1) * 2 * C, 4);
    e.qkv = randv((size_t)N * ld, 6), e.cs = calloc((size_t)N * e.hs, 4);
    e.h = randv(4 * NC > 2 * NF ? 4 * NC : 2 * NF, 7);
    e.dh = calloc(2 * NF, 4), e.o = calloc(NF, 4), e.dof = randv(NF, 8), e.g = calloc(4 * NC, 4);
    e.lp = calloc(NC, 2), e.hlp = calloc(2 * NF, 2);
    double *inv = malloc((size_t)e.hs / 2 * 8);
    rope_inv_freq(inv, e.hs, 10000.0);
    rope_table(e.cs, N, e.hs, inv);
    free(inv);
    run_kernel(&e, K_RMS); /* rstd for the backward */
    printf("elementwise kernels N=%d C=%d F=%d (RoPE: %d q + %d kv heads of %d) threads=%d, median of %d:\n", N, C,
           F, e.NH, e.KV, e.hs, nt, reps);
    for (int k = 0; k < K_N; k++) {
        double t[MAXREP];
        for (int r = -1; r < reps; r++) {
            if (k == K_LN_BWD) run_kernel(&e, K_LN);
            if (k == K_RMS_BWD) run_kernel(&e, K_RMS);
            double t0 = timer_ms();
            run_kernel(&e, k);
            if (r >= 0) t[r] = timer_ms() - t0;
        }
        double m = median(t, reps);
        printf("  %-26s %8.3f ms %6.1f GB/s\n", knames[k], m, kernel_bytes(&e, k) / m * 1e-6);
    }
}
#endif

static void usage(void) {
    fprintf(stderr, "usage: llama_kernels att B T NH KV[,KV...] hs [fp32|bf16] [reps] [threads]\n"
                    "       llama_kernels mha B T NH hs [fp32|bf16] [reps] [threads]\n"
                    "       llama_kernels elem N C F [reps] [threads]\n"
                    "       llama_kernels cmp B T NH hs [fp32|bf16] [reps] [threads]  (-DLK_BASE builds)\n"
                    "       llama_kernels dump FILE\n");
    exit(2);
}

static int arg(int argc, char **argv, int i, int dflt) { return argc > i ? atoi(argv[i]) : dflt; }

int main(int argc, char **argv) {
    if (argc < 2) usage();
    if (!strcmp(argv[1], "dump")) {
        if (argc < 3) usage();
        FILE *fp = fopen(argv[2], "wb");
        if (!fp) {
            fprintf(stderr, "llama_kernels: cannot write %s\n", argv[2]);
            return 1;
        }
        mm_set_threads(2);
        dump_attention(fp);
        return fclose(fp) ? 1 : 0;
    }
    if (!strcmp(argv[1], "mha") && argc >= 6) {
        int lowp = argc > 6 && !strcmp(argv[6], "bf16"), reps = arg(argc, argv, 7, 11), nt = arg(argc, argv, 8, 2);
        if (reps > MAXREP || reps < 1) usage();
        mm_set_threads(nt);
        int kv = atoi(argv[4]);
        bench_attention(0, atoi(argv[2]), atoi(argv[3]), kv, &kv, 1, atoi(argv[5]), lowp, reps, nt);
        return 0;
    }
#ifdef LK_BASE
    if (!strcmp(argv[1], "cmp") && argc >= 6) {
        int lowp = argc > 6 && !strcmp(argv[6], "bf16"), reps = arg(argc, argv, 7, 51), nt = arg(argc, argv, 8, 2);
        if (reps > MAXREP || reps < 1) usage();
        mm_set_threads(nt);
        bench_cmp(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), atoi(argv[5]), lowp, reps, nt);
        return 0;
    }
#endif
#ifndef LK_MHA_ONLY
    if (!strcmp(argv[1], "att") && argc >= 7) {
        int lowp = argc > 7 && !strcmp(argv[7], "bf16"), reps = arg(argc, argv, 8, 11), nt = arg(argc, argv, 9, 2);
        if (reps > MAXREP || reps < 1) usage();
        mm_set_threads(nt);
        int kvs[MAXKV], nkv = 0, NH = atoi(argv[4]);
        for (char *tok = strtok(argv[5], ","); tok && nkv < MAXKV; tok = strtok(NULL, ","))
            kvs[nkv++] = atoi(tok);
        for (int k = 0; k < nkv; k++)
            if (kvs[k] < 1 || NH % kvs[k]) usage();
        if (nkv == 0) usage();
        bench_attention(1, atoi(argv[2]), atoi(argv[3]), NH, kvs, nkv, atoi(argv[6]), lowp, reps, nt);
        return 0;
    }
    if (!strcmp(argv[1], "elem") && argc >= 5) {
        int reps = arg(argc, argv, 5, 21), nt = arg(argc, argv, 6, 2);
        if (reps > MAXREP || reps < 1) usage();
        mm_set_threads(nt);
        bench_elem(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), reps, nt);
        return 0;
    }
#endif
    usage();
}
