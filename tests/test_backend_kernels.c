/* test_backend_kernels.c — every kernel and GEMM of a backend's table (model/backend.h) against a
 * float64 reference computed here, on fresh random inputs every run. Usage:
 *   test_backend_kernels cpu    (CTest: checks the CPU table, and this harness itself, everywhere)
 *   test_backend_kernels cuda   (make test-gpu: the CUDA backend; fails, never skips, without a GPU)
 *
 * Oracle: float64 loops over the same inputs (the formulas of kernels.h, written again here, not
 * called). Inputs are drawn from Philox with a seed taken from the clock and pid (printed; set
 * ST_TEST_SEED to repeat a run). Every buffer lives in the backend's memory (alloc, from_host,
 * to_host), so the same code tests any backend.
 *
 * Tolerance, per element: err = |got − ref| / (|ref| + rms(ref)) — relative, with the tensor's rms
 * as the floor for elements near zero where cancellation makes a pure relative error meaningless.
 * fp32 outputs: err <= 1e-5. bf16 GEMMs: the reference takes the bf16-rounded operands, so the
 * products are exact and only the fp32 accumulation differs: 1e-5 as well. Outputs rounded to bf16
 * (a few bf16 ulps): 1.6e-2. Attention's lowp mode (probabilities and dS rounded to bf16 inside):
 * output and dqkv 8e-3 with Σ|term| of each element added to the floor (cmp_mag), the
 * log-sum-exp 1e-5.
 *
 * Poison: every output that a kernel overwrites is filled with NaN before the call, so an element
 * it leaves unwritten fails (NaN never passes). Outputs it accumulates into start from random values.
 * Negative control: each comparison is repeated with the output element of largest |ref| scaled by
 * 1 + max(1e-3, 4·tol) (1.001 for fp32) and must fail. Determinism: the reductions (embedding,
 * norm and attention backward, column sums, the head, attention_decode) run twice and must agree bit
 * for bit.
 * Failure recording: after each call the backend's take_error must be ST_OK; on cuda, an
 * unsupported head size must be recorded (ST_ERR_INPUT) instead of running. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/half.h"
#include "core/rng.h"
#include "backend_put.h"
#include "model/backend.h"
#include "testutil.h"

static const Backend *be;
static uint64_t seed;
static uint64_t stream_ctr = 1;
#define TOL32 1e-5
#define TOL16 1.6e-2
#define TOL_ATT_LOWP 8e-3 /* attention's lowp output and dqkv against Σ|term| (cmp_mag): each term rounds
                             P or dS once to bf16 (2^-9 relative); measured at most 2.4e-3 over 30
                             draws of each case (CPU, emulated GPU tensor-core and scalar kernels) */

/* ---- buffers ---- */

/* n uniforms in [-a, a), fresh stream each call. */
static float *hrand(size_t n, float a) {
    float *h = malloc(n * sizeof(float) + 1);
    uint64_t s = stream_ctr++;
    for (size_t i = 0; i < n; i++) h[i] = (2.0f * rng_uniform(seed, s, i) - 1.0f) * a;
    return h;
}
static void *dput(const void *h, size_t bytes) { return backend_put(be, "test_backend_kernels", h, bytes); }
static float *dputf(const float *h, size_t n) { return dput(h, n * sizeof(float)); }
/* n floats of NaN (or, for 2-byte outputs, 0xFFFF: NaN in bf16 and fp16). */
static void *dpoison(size_t bytes) {
    void *h = malloc(bytes + 1);
    memset(h, 0xFF, bytes);
    void *d = dput(h, bytes);
    free(h);
    return d;
}
static float *dget(const void *d, size_t n) {
    float *h = malloc(n * sizeof(float) + 1);
    be->to_host(h, d, n * sizeof(float));
    return h;
}
static float *dget_bf16(const void *d, size_t n) { /* bf16 bits widened to float */
    uint16_t *b = malloc(n * 2 + 2);
    be->to_host(b, d, n * 2);
    float *h = malloc(n * sizeof(float) + 1);
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)b[i] << 16;
        memcpy(&h[i], &u, 4);
    }
    free(b);
    return h;
}
static void dfree(void *d, size_t bytes) { be->free(NULL, MEM_WORKSPACE, d, bytes); }
static double bf(float x) { /* x rounded to bf16, as double */
    uint32_t u = (uint32_t)half_bf16(x) << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void backend_ok(const char *what) {
    Err e = {0};
    Status st = be->take_error(&e);
    if (st != ST_OK) tu_check(0, what, "the backend recorded a failure: %s", e.msg);
}

/* ---- comparison ---- */

/* mag (NULL: none): per element, the sum of the absolute values of the terms the reference summed
 * for it; it joins the floor, so an element that is a small difference of large terms is judged
 * against the size of those terms (the bound of any rounding of them), not against its own. */
static double max_err(const float *got, const double *ref, const double *mag, size_t n, size_t *at) {
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += ref[i] * ref[i];
    double rms = sqrt(ss / (n ? n : 1)) + 1e-30, worst = 0;
    *at = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - ref[i]) / (fabs(ref[i]) + rms + (mag ? mag[i] : 0));
        if (!(e <= worst)) { /* NaN lands here and stays */
            worst = isnan(e) ? INFINITY : e;
            *at = i;
            if (isnan(e)) break;
        }
    }
    return worst;
}

static void cmp_mag(const char *name, const float *got, const double *ref, const double *mag, size_t n, double tol) {
    size_t at;
    double e = max_err(got, ref, mag, n, &at);
    tu_check(e <= tol, name, "max per-element err %.3g (tol %.2g) at %zu: got %.9g ref %.9g (%s)", e, tol, at,
             n ? got[at] : 0.0, n ? ref[at] : 0.0, be->name);
    /* the control scales the element the metric weighs most: the largest |ref| / its floor */
    size_t big = 0;
    double ss = 0, wbig = -1;
    for (size_t i = 0; i < n; i++) ss += ref[i] * ref[i];
    double rms = sqrt(ss / (n ? n : 1)) + 1e-30;
    for (size_t i = 0; i < n; i++) {
        double w = fabs(ref[i]) / (fabs(ref[i]) + rms + (mag ? mag[i] : 0));
        if (w > wbig) wbig = w, big = i;
    }
    float *bad = malloc(n * sizeof(float) + 1);
    memcpy(bad, got, n * sizeof(float));
    double f = 1.0 + (4 * tol > 1e-3 ? 4 * tol : 1e-3);
    bad[big] = (float)(bad[big] * f);
    double eb = max_err(bad, ref, mag, n, &at);
    char cname[160];
    snprintf(cname, sizeof cname, "%s_control_x%.3g", name, f);
    tu_check(!(eb <= tol), cname, "err %.3g with one element scaled (must exceed %.2g)", eb, tol);
    free(bad);
}

static void cmp(const char *name, const float *got, const double *ref, size_t n, double tol) {
    cmp_mag(name, got, ref, NULL, n, tol);
}

static void same_bits(const char *name, const float *a, const float *b, size_t n) {
    tu_check(!memcmp(a, b, n * sizeof(float)), name, "two runs of the same call, %zu floats, bit for bit (%s)", n,
             be->name);
}

static double drop_ref(Dropout d, uint64_t i) {
    return rng_uniform(d.seed, d.stream, i + d.offset) >= d.p ? 1.0 / (1.0 - d.p) : 0.0;
}

/* ------------------------------------------------------------------------------------------ */

/* C = 300 > 256: the GPU's embedding backward gives each thread the columns c, c + 256, ... (a
 * second pass with a tail of 44) */
static void test_encoder(int use_pos, int C) {
    int B = 3, T = 37, V = 11; /* few tokens: many repeats in the scatter */
    size_t N = (size_t)B * T;
    Dropout d = {0.1f, seed + 7, 3, 0, 0, 0};
    int32_t *inp = malloc(N * 4), *pos = malloc(N * 4);
    for (size_t i = 0; i < N; i++) inp[i] = (int32_t)rng_below(seed, stream_ctr, i, V);
    stream_ctr++;
    doc_positions(pos, inp, B, T, 3); /* token 3 ends a document */
    float *wte = hrand((size_t)V * C, 1), *wpe = hrand((size_t)T * C, 1), *dout = hrand(N * C, 1);
    float *dwte0 = hrand((size_t)V * C, 1), *dwpe0 = hrand((size_t)T * C, 1);
    int32_t *d_inp = dput(inp, N * 4), *d_pos = use_pos ? dput(pos, N * 4) : NULL;
    float *d_wte = dputf(wte, (size_t)V * C), *d_wpe = dputf(wpe, (size_t)T * C), *d_dout = dputf(dout, N * C);
    float *d_out = dpoison(N * C * 4);
    be->encoder_forward(d_out, d_inp, d_pos, d_wte, d_wpe, B, T, C, d, 1);
    backend_ok("encoder_forward");
    double *ref = malloc(N * C * sizeof(double) + 8);
    for (size_t bt = 0; bt < N; bt++) {
        size_t p = use_pos ? (size_t)pos[bt] : bt % T;
        for (int c = 0; c < C; c++)
            ref[bt * C + c] = ((double)wte[(size_t)inp[bt] * C + c] + wpe[p * C + c]) * drop_ref(d, bt * C + c);
    }
    float *got = dget(d_out, N * C);
    cmp(use_pos ? "encoder_forward_docpos" : "encoder_forward_dropout", got, ref, N * C, TOL32);
    free(got);
    /* backward: accumulates into dwte, dwpe */
    float *runs[2][2];
    for (int r = 0; r < 2; r++) {
        float *d_dwte = dputf(dwte0, (size_t)V * C), *d_dwpe = dputf(dwpe0, (size_t)T * C);
        be->encoder_backward(d_dwte, d_dwpe, d_dout, d_inp, d_pos, B, T, C, d, 1);
        backend_ok("encoder_backward");
        runs[r][0] = dget(d_dwte, (size_t)V * C), runs[r][1] = dget(d_dwpe, (size_t)T * C);
        dfree(d_dwte, (size_t)V * C * 4), dfree(d_dwpe, (size_t)T * C * 4);
    }
    double *rw = malloc((size_t)V * C * 8), *rp = malloc((size_t)T * C * 8);
    for (size_t i = 0; i < (size_t)V * C; i++) rw[i] = dwte0[i];
    for (size_t i = 0; i < (size_t)T * C; i++) rp[i] = dwpe0[i];
    for (size_t bt = 0; bt < N; bt++) {
        size_t p = use_pos ? (size_t)pos[bt] : bt % T;
        for (int c = 0; c < C; c++) {
            double g = dout[bt * C + c] * drop_ref(d, bt * C + c);
            rw[(size_t)inp[bt] * C + c] += g;
            rp[p * C + c] += g;
        }
    }
    cmp(use_pos ? "encoder_backward_dwte_docpos" : "encoder_backward_dwte", runs[0][0], rw, (size_t)V * C, TOL32);
    cmp(use_pos ? "encoder_backward_dwpe_docpos" : "encoder_backward_dwpe", runs[0][1], rp, (size_t)T * C, TOL32);
    same_bits("encoder_backward_repeats", runs[0][0], runs[1][0], (size_t)V * C);
    for (int r = 0; r < 2; r++) free(runs[r][0]), free(runs[r][1]);
    free(rw), free(rp), free(ref), free(inp), free(pos), free(wte), free(wpe), free(dout), free(dwte0), free(dwpe0);
    dfree(d_inp, N * 4), dfree(d_pos, N * 4), dfree(d_wte, (size_t)V * C * 4), dfree(d_wpe, (size_t)T * C * 4);
    dfree(d_dout, N * C * 4), dfree(d_out, N * C * 4);
}

/* LayerNorm (rms = 0) or RMSNorm (rms = 1), forward and backward, plus the fused residual form
 * with a bf16 output. C = 1100 > DROP_CHUNK: a row's dropout factors are drawn in two pieces. */
static void test_norm(int rms, int C) {
    int N = 150; /* 3 row chunks of 64, the last partial */
    size_t n = (size_t)N * C;
    const float eps = 1e-5f;
    float *x = hrand(n, 2), *w = hrand(C, 1), *b = hrand(C, 1), *dout = hrand(n, 1), *dinp0 = hrand(n, 1);
    for (int i = 0; i < N; i++) x[(size_t)i * C] += 1.5f; /* a non-zero mean */
    float *d_x = dputf(x, n), *d_w = dputf(w, C), *d_b = dputf(b, C), *d_dout = dputf(dout, n);
    float *d_out = dpoison(n * 4), *d_mean = dpoison((size_t)N * 4), *d_rstd = dpoison((size_t)N * 4);
    if (rms) be->rmsnorm_forward(d_out, d_rstd, d_x, d_w, N, C, eps, 1);
    else be->layernorm_forward(d_out, d_mean, d_rstd, d_x, d_w, d_b, N, C, 1);
    backend_ok("norm_forward");
    double *ref = malloc(n * 8), *rmean = malloc((size_t)N * 8), *rrstd = malloc((size_t)N * 8);
    for (int i = 0; i < N; i++) {
        const float *xi = x + (size_t)i * C;
        double m = 0, v = 0;
        if (!rms) {
            for (int c = 0; c < C; c++) m += xi[c];
            m /= C;
        }
        for (int c = 0; c < C; c++) v += (xi[c] - m) * (xi[c] - m);
        double r = 1.0 / sqrt(v / C + (rms ? eps : 1e-5));
        rmean[i] = m, rrstd[i] = r;
        for (int c = 0; c < C; c++) ref[(size_t)i * C + c] = (xi[c] - m) * r * w[c] + (rms ? 0.0 : b[c]);
    }
    float *got = dget(d_out, n), *gm = dget(d_mean, N), *gr = dget(d_rstd, N);
    cmp(rms ? "rmsnorm_forward" : "layernorm_forward", got, ref, n, TOL32);
    cmp(rms ? "rmsnorm_forward_rstd" : "layernorm_forward_rstd", gr, rrstd, N, TOL32);
    if (!rms) cmp("layernorm_forward_mean", gm, rmean, N, TOL32);
    /* backward with the saved statistics the forward wrote (gm, gr: the kernel's own) */
    int nchunk = (N + KERNEL_ROW_CHUNK - 1) / KERNEL_ROW_CHUNK;
    float *runs[2][3];
    for (int r = 0; r < 2; r++) {
        float *d_dinp = dputf(dinp0, n), *d_dw = dpoison((size_t)C * 4), *d_db = dpoison((size_t)C * 4);
        float *d_scr = dpoison((size_t)nchunk * 2 * C * 4);
        if (rms) be->rmsnorm_backward(d_dinp, d_dw, d_scr, d_dout, d_x, d_w, d_rstd, N, C, 0, 1);
        else be->layernorm_backward(d_dinp, d_dw, d_db, d_scr, d_dout, d_x, d_w, d_mean, d_rstd, N, C, 0, 1);
        backend_ok("norm_backward");
        runs[r][0] = dget(d_dinp, n), runs[r][1] = dget(d_dw, C), runs[r][2] = rms ? NULL : dget(d_db, C);
        dfree(d_dinp, n * 4), dfree(d_dw, (size_t)C * 4), dfree(d_db, (size_t)C * 4);
        dfree(d_scr, (size_t)nchunk * 2 * C * 4);
    }
    double *rdx = malloc(n * 8), *rdw = calloc(C, 8), *rdb = calloc(C, 8);
    for (int i = 0; i < N; i++) {
        const float *xi = x + (size_t)i * C, *g = dout + (size_t)i * C;
        double m = rms ? 0.0 : gm[i], r = gr[i], a = 0, bs = 0;
        for (int c = 0; c < C; c++) {
            double nn = (xi[c] - m) * r, dn = (double)g[c] * w[c];
            a += dn, bs += dn * nn;
            rdw[c] += g[c] * nn, rdb[c] += g[c];
        }
        a = rms ? 0.0 : a / C, bs /= C;
        for (int c = 0; c < C; c++) {
            double nn = (xi[c] - m) * r;
            rdx[(size_t)i * C + c] = dinp0[(size_t)i * C + c] + ((double)g[c] * w[c] - a - nn * bs) * r;
        }
    }
    cmp(rms ? "rmsnorm_backward_dinp" : "layernorm_backward_dinp", runs[0][0], rdx, n, TOL32);
    cmp(rms ? "rmsnorm_backward_dw" : "layernorm_backward_dw", runs[0][1], rdw, C, TOL32);
    if (!rms) cmp("layernorm_backward_db", runs[0][2], rdb, C, TOL32);
    same_bits(rms ? "rmsnorm_backward_repeats" : "layernorm_backward_repeats", runs[0][1], runs[1][1], C);
    for (int r = 0; r < 2; r++) free(runs[r][0]), free(runs[r][1]), free(runs[r][2]);
    /* the fused residual + norm with a bf16 output and dropout: res = a + drop(b), out = norm(res) */
    float *a2 = hrand(n, 1), *b2 = hrand(n, 1);
    Dropout d = {0.2f, seed + 11, 5, 0, 0, 0};
    float *d_a = dputf(a2, n), *d_b2 = dputf(b2, n), *d_res = dpoison(n * 4);
    uint16_t *d_olp = dpoison(n * 2);
    if (rms) be->residual_rmsnorm_forward_bf16(d_res, d_olp, d_rstd, d_a, d_b2, d, d_w, N, C, eps, 1);
    else be->residual_layernorm_forward_bf16(d_res, d_olp, d_mean, d_rstd, d_a, d_b2, d, d_w, d_b, N, C, 1);
    backend_ok("residual_norm_forward_bf16");
    double *rres = malloc(n * 8), *rout = malloc(n * 8);
    float *row = malloc((size_t)C * sizeof *row);
    for (int i = 0; i < N; i++) {
        double m = 0, v = 0;
        for (int c = 0; c < C; c++) {
            size_t k = (size_t)i * C + c;
            row[c] = (float)(a2[k] + b2[k] * drop_ref(d, k)); /* the fp32 res the norm reads */
            rres[k] = (double)a2[k] + b2[k] * drop_ref(d, k);
            m += rms ? 0.0 : row[c];
        }
        m /= rms ? 1 : C;
        for (int c = 0; c < C; c++) v += (row[c] - m) * (row[c] - m);
        double r = 1.0 / sqrt(v / C + (rms ? eps : 1e-5));
        for (int c = 0; c < C; c++) rout[(size_t)i * C + c] = (row[c] - m) * r * w[c] + (rms ? 0.0 : b[c]);
    }
    float *gres = dget(d_res, n), *gout = dget_bf16(d_olp, n);
    cmp(rms ? "residual_rmsnorm_res" : "residual_layernorm_res", gres, rres, n, TOL32);
    cmp(rms ? "residual_rmsnorm_out_bf16" : "residual_layernorm_out_bf16", gout, rout, n, TOL16);
    free(gres), free(gout), free(rres), free(rout), free(a2), free(b2), free(row);
    dfree(d_a, n * 4), dfree(d_b2, n * 4), dfree(d_res, n * 4), dfree(d_olp, n * 2);
    free(got), free(gm), free(gr), free(ref), free(rmean), free(rrstd), free(rdx), free(rdw), free(rdb);
    free(x), free(w), free(b), free(dout), free(dinp0);
    dfree(d_x, n * 4), dfree(d_w, (size_t)C * 4), dfree(d_b, (size_t)C * 4), dfree(d_dout, n * 4);
    dfree(d_out, n * 4), dfree(d_mean, (size_t)N * 4), dfree(d_rstd, (size_t)N * 4);
}

static void test_rope(void) {
    int B = 2, T = 19, NH = 4, KV = 2, hs = 16, pos0 = 3;
    int ld = (NH + 2 * KV) * hs;
    size_t n = (size_t)B * T * ld;
    double inv[8];
    rope_inv_freq(inv, hs, 10000.0);
    float *d_cs = dpoison((size_t)(T + pos0) * hs * 4);
    be->rope_table(d_cs, T + pos0, hs, inv);
    float *qkv = hrand(n, 1);
    int32_t pos[2 * 19];
    for (int i = 0; i < B * T; i++) pos[i] = (i * 7) % 11; /* any positions < T */
    for (int use_pos = 0; use_pos < 2; use_pos++) {
        float *d_qkv = dputf(qkv, n);
        int32_t *d_pos = use_pos ? dput(pos, sizeof pos) : NULL;
        be->rope_forward(d_qkv, d_cs, d_pos, B, T, NH, KV, hs, pos0, 1);
        backend_ok("rope_forward");
        double *ref = malloc(n * 8);
        for (int bt = 0; bt < B * T; bt++) {
            int p = pos0 + (use_pos ? pos[bt] : bt % T);
            for (int k = 0; k < ld; k++) ref[(size_t)bt * ld + k] = qkv[(size_t)bt * ld + k];
            for (int h = 0; h < NH + KV; h++)
                for (int i = 0; i < hs / 2; i++) {
                    size_t o = (size_t)bt * ld + (size_t)h * hs;
                    double a = qkv[o + i], b = qkv[o + i + hs / 2], th = p * inv[i];
                    ref[o + i] = a * cos(th) - b * sin(th);
                    ref[o + i + hs / 2] = b * cos(th) + a * sin(th);
                }
        }
        float *got = dget(d_qkv, n);
        cmp(use_pos ? "rope_forward_docpos" : "rope_forward", got, ref, n, TOL32);
        be->rope_backward(d_qkv, d_cs, d_pos, B, T, NH, KV, hs, pos0, 1); /* the inverse rotation */
        backend_ok("rope_backward");
        float *back = dget(d_qkv, n);
        for (size_t i = 0; i < n; i++) ref[i] = qkv[i];
        cmp(use_pos ? "rope_backward_inverts_docpos" : "rope_backward_inverts", back, ref, n, TOL32);
        free(got), free(back), free(ref);
        dfree(d_qkv, n * 4), dfree(d_pos, sizeof pos);
    }
    free(qkv);
    dfree(d_cs, (size_t)(T + pos0) * hs * 4);
}

static double gelu_d(double x) { return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
static double gelu_grad_d(double x) {
    double t = tanh(0.7978845608028654 * (x + 0.044715 * x * x * x));
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * 0.7978845608028654 * (1 + 3 * 0.044715 * x * x);
}

static void test_activations(void) {
    int N = 70, F = 48;
    size_t n = (size_t)N * F;
    float *h = hrand(2 * n, 4), *x = hrand(n, 4), *dout = hrand(n, 1);
    float *d_h = dputf(h, 2 * n), *d_x = dputf(x, n), *d_dout = dputf(dout, n);
    /* SwiGLU */
    float *d_o = dpoison(n * 4), *d_dh = dpoison(2 * n * 4);
    be->swiglu_forward(d_o, d_h, N, F, 1);
    be->swiglu_backward(d_dh, d_dout, d_h, N, F, 1);
    backend_ok("swiglu");
    double *ro = malloc(n * 8), *rdh = malloc(2 * n * 8);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < F; j++) {
            double g = h[(size_t)i * 2 * F + j], u = h[(size_t)i * 2 * F + F + j], s = 1 / (1 + exp(-g));
            double dd = dout[(size_t)i * F + j];
            ro[(size_t)i * F + j] = g * s * u;
            rdh[(size_t)i * 2 * F + j] = dd * u * s * (1 + g * (1 - s));
            rdh[(size_t)i * 2 * F + F + j] = dd * g * s;
        }
    float *go = dget(d_o, n), *gdh = dget(d_dh, 2 * n);
    cmp("swiglu_forward", go, ro, n, TOL32);
    cmp("swiglu_backward", gdh, rdh, 2 * n, TOL32);
    free(go), free(gdh);
    uint16_t *d_olp = dpoison(n * 2);
    be->swiglu_forward_bf16(d_olp, d_h, N, F, 1);
    backend_ok("swiglu_forward_bf16");
    go = dget_bf16(d_olp, n);
    cmp("swiglu_forward_bf16", go, ro, n, TOL16);
    free(go);
    /* GELU */
    float *d_g = dpoison(n * 4), *d_dg = dpoison(n * 4), *d_cs = dpoison((size_t)F * 4);
    be->gelu_forward(d_g, d_x, n, 1);
    be->gelu_backward(d_dg, d_dout, d_x, n, 1);
    be->gelu_backward_bf16(d_olp, d_cs, NULL, d_dout, d_x, N, F, 0, 1);
    backend_ok("gelu");
    double *rcs = calloc(F, 8);
    for (size_t i = 0; i < n; i++) {
        ro[i] = gelu_d(x[i]);
        rdh[i] = dout[i] * gelu_grad_d(x[i]);
        rcs[i % F] += rdh[i];
    }
    float *gg = dget(d_g, n), *gdg = dget(d_dg, n), *gcs = dget(d_cs, F), *glp = dget_bf16(d_olp, n);
    cmp("gelu_forward", gg, ro, n, TOL32);
    cmp("gelu_backward", gdg, rdh, n, TOL32);
    cmp("gelu_backward_bf16_colsum", gcs, rcs, F, TOL32);
    cmp("gelu_backward_bf16_dinp", glp, rdh, n, TOL16);
    free(gg), free(gdg), free(gcs), free(glp), free(rcs), free(ro), free(rdh), free(h), free(x), free(dout);
    dfree(d_h, 2 * n * 4), dfree(d_x, n * 4), dfree(d_dout, n * 4), dfree(d_o, n * 4), dfree(d_dh, 2 * n * 4);
    dfree(d_olp, n * 2), dfree(d_g, n * 4), dfree(d_dg, n * 4), dfree(d_cs, (size_t)F * 4);
}

/* ---- attention ---- */

typedef struct {
    int B, T, NH, KV, hs;
    float p;
    int use_pos, lowp;
    const char *name;
} AttCase;

static void test_attention(AttCase ac) {
    int B = ac.B, T = ac.T, NH = ac.NH, KV = ac.KV, hs = ac.hs, G = NH / KV;
    int ld = (NH + 2 * KV) * hs, C = NH * hs;
    float scale = 1.0f / sqrtf((float)hs);
    Dropout d = {ac.p, seed + 13, 9, 0, 0, 0};
    size_t nq = (size_t)B * T * ld, ny = (size_t)B * T * C, nl = (size_t)B * NH * T;
    float *qkv = hrand(nq, 1.5f), *dy = hrand(ny, 1);
    int32_t *pos = malloc((size_t)B * T * 4);
    for (int b = 0; b < B; b++) /* documents of 1..23 tokens */
        for (int t = 0, s = 0; t < T; t++) {
            if (t > 0 && rng_below(seed, 999, (uint64_t)b * T + t, 9) == 0) s = t;
            pos[b * T + t] = t - s;
        }
    float *d_qkv = dputf(qkv, nq), *d_dy = dputf(dy, ny);
    int32_t *d_pos = ac.use_pos ? dput(pos, (size_t)B * T * 4) : NULL;
    size_t scr = attention_gqa_scratch_floats(T, hs, G, 1);
    float *d_scr = dpoison(scr * 4), *d_y = dpoison(ny * 4), *d_lse = dpoison(nl * 4);
    be->attention_forward(d_y, d_lse, d_scr, d_qkv, d_pos, B, T, NH, KV, hs, scale, d, ac.lowp, 1);
    backend_ok("attention_forward");
    float *runs[2];
    for (int r = 0; r < 2; r++) {
        float *d_dqkv = dpoison(nq * 4);
        be->attention_backward(d_dqkv, d_scr, d_dy, d_qkv, d_y, d_lse, d_pos, B, T, NH, KV, hs, scale, d, ac.lowp, 1);
        backend_ok("attention_backward");
        runs[r] = dget(d_dqkv, nq);
        dfree(d_dqkv, nq * 4);
    }
    /* float64 reference, the whole T×T per head (small T); lowp: operands q, k, v, dY bf16-rounded.
     * The backward's D = Σ dY·Y takes the Y the backward was given (the kernel's forward output, as
     * in training), not the reference's: in lowp they differ by the forward's bf16 rounding, an error
     * common to a row's dS that no backward kernel could remove. */
    float *gy = dget(d_y, ny), *gl = dget(d_lse, nl);
    double *ry = calloc(ny, 8), *rl = calloc(nl, 8), *rdq = calloc(nq, 8);
    double *my = calloc(ny, 8), *mdq = calloc(nq, 8); /* Σ|term| of each element (lowp's floor) */
    double *P = malloc((size_t)T * T * 8), *Pd = malloc((size_t)T * T * 8), *dP = malloc((size_t)T * T * 8);
#define OP(x) (ac.lowp ? bf(x) : (double)(x))
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            int kh = h / G;
            uint64_t bhg = (uint64_t)b * NH + h;
            const float *base = qkv + (size_t)b * T * ld;
            for (int i = 0; i < T; i++) {
                int s0 = ac.use_pos ? i - pos[b * T + i] : 0;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j < T; j++) {
                    double s = -INFINITY;
                    if (j <= i && j >= s0) {
                        s = 0;
                        for (int x = 0; x < hs; x++)
                            s += OP(base[(size_t)i * ld + h * hs + x]) * OP(base[(size_t)j * ld + (NH + kh) * hs + x]);
                        s *= scale;
                    }
                    P[(size_t)i * T + j] = s;
                    mx = s > mx ? s : mx;
                }
                for (int j = 0; j < T; j++) sum += (P[(size_t)i * T + j] = exp(P[(size_t)i * T + j] - mx));
                rl[((size_t)b * NH + h) * T + i] = mx + log(sum);
                for (int j = 0; j < T; j++) {
                    P[(size_t)i * T + j] /= sum;
                    double ks = d.p > 0 ? drop_ref(d, bhg * T * T + (uint64_t)i * T + j) : 1.0;
                    Pd[(size_t)i * T + j] = P[(size_t)i * T + j] * ks;
                }
                for (int x = 0; x < hs; x++) {
                    double acc = 0, mag = 0;
                    for (int j = 0; j <= i; j++) {
                        double t = Pd[(size_t)i * T + j] * OP(base[(size_t)j * ld + (NH + KV + kh) * hs + x]);
                        acc += t, mag += fabs(t);
                    }
                    ry[((size_t)b * T + i) * C + h * hs + x] = acc;
                    my[((size_t)b * T + i) * C + h * hs + x] = mag;
                }
            }
            /* backward of this head */
            for (int i = 0; i < T; i++) {
                const float *g = dy + ((size_t)b * T + i) * C + h * hs;
                double D = 0;
                for (int x = 0; x < hs; x++) D += (double)g[x] * gy[((size_t)b * T + i) * C + h * hs + x];
                for (int j = 0; j < T; j++) {
                    double dp = 0;
                    for (int x = 0; x < hs; x++) dp += OP(g[x]) * OP(base[(size_t)j * ld + (NH + KV + kh) * hs + x]);
                    double ks = d.p > 0 ? drop_ref(d, bhg * T * T + (uint64_t)i * T + j) : 1.0;
                    dP[(size_t)i * T + j] = P[(size_t)i * T + j] * (dp * ks - D) * scale;
                }
            }
            double *dq = rdq;
            for (int i = 0; i < T; i++)
                for (int x = 0; x < hs; x++) {
                    double a = 0, mag = 0;
                    for (int j = 0; j < T; j++) {
                        double t = dP[(size_t)i * T + j] * OP(base[(size_t)j * ld + (NH + kh) * hs + x]);
                        a += t, mag += fabs(t);
                    }
                    dq[((size_t)b * T + i) * ld + h * hs + x] = a;
                    mdq[((size_t)b * T + i) * ld + h * hs + x] = mag;
                }
            for (int j = 0; j < T; j++)
                for (int x = 0; x < hs; x++) {
                    double ak = 0, av = 0, mk = 0, mv = 0;
                    for (int i = 0; i < T; i++) {
                        double tk = dP[(size_t)i * T + j] * OP(base[(size_t)i * ld + h * hs + x]);
                        double tv = Pd[(size_t)i * T + j] * OP(dy[((size_t)b * T + i) * C + h * hs + x]);
                        ak += tk, av += tv, mk += fabs(tk), mv += fabs(tv);
                    }
                    dq[((size_t)b * T + j) * ld + (NH + kh) * hs + x] += ak;
                    dq[((size_t)b * T + j) * ld + (NH + KV + kh) * hs + x] += av;
                    mdq[((size_t)b * T + j) * ld + (NH + kh) * hs + x] += mk;
                    mdq[((size_t)b * T + j) * ld + (NH + KV + kh) * hs + x] += mv;
                }
        }
#undef OP
    /* lowp: judged against Σ|term| (an output that is a small difference of large terms would
     * otherwise be judged against its own size: 1.6e-2 and 4e-2 flaked about once in 40 runs);
     * the log-sum-exp sums unrounded probabilities in fp32 in both modes */
    double tol = ac.lowp ? TOL_ATT_LOWP : TOL32;
    char nm[128];
    snprintf(nm, sizeof nm, "attention_%s_out", ac.name);
    cmp_mag(nm, gy, ry, ac.lowp ? my : NULL, ny, tol);
    snprintf(nm, sizeof nm, "attention_%s_lse", ac.name);
    cmp(nm, gl, rl, nl, TOL32);
    snprintf(nm, sizeof nm, "attention_%s_dqkv", ac.name);
    cmp_mag(nm, runs[0], rdq, ac.lowp ? mdq : NULL, nq, tol);
    snprintf(nm, sizeof nm, "attention_%s_backward_repeats", ac.name);
    same_bits(nm, runs[0], runs[1], nq);
    free(gy), free(gl), free(runs[0]), free(runs[1]), free(ry), free(rl), free(rdq), free(P), free(Pd), free(dP);
    free(my), free(mdq);
    free(qkv), free(dy), free(pos);
    dfree(d_qkv, nq * 4), dfree(d_dy, ny * 4), dfree(d_pos, (size_t)B * T * 4), dfree(d_scr, scr * 4);
    dfree(d_y, ny * 4), dfree(d_lse, nl * 4);
}

/* ---- GEMMs ---- */

/* attention_decode (sampling's one query token over a KV cache of pos+1 rows) against float64. */
static void test_attention_decode(int NH, int KV, int hs, int pos) {
    int kvw = KV * hs, G = NH / KV, n = pos + 1;
    float scale = 1.0f / sqrtf((float)hs);
    float *q = hrand((size_t)NH * hs, 1.0f), *K = hrand((size_t)n * kvw, 1.0f), *V = hrand((size_t)n * kvw, 1.0f);
    float *d_q = dputf(q, (size_t)NH * hs), *d_k = dputf(K, (size_t)n * kvw), *d_v = dputf(V, (size_t)n * kvw);
    float *d_s = dpoison((size_t)NH * n * sizeof(float)), *d_y = dpoison((size_t)NH * hs * sizeof(float));
    be->attention_decode(d_y, d_s, d_q, d_k, d_v, pos, NH, KV, hs, scale, 1);
    backend_ok("attention_decode");
    float *y = dget(d_y, (size_t)NH * hs);
    double *ref = calloc((size_t)NH * hs, sizeof(double)), *w = malloc((size_t)n * sizeof(double));
    for (int h = 0; h < NH; h++) {
        int off = (h / G) * hs;
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < n; j++) {
            double d = 0;
            for (int i = 0; i < hs; i++) d += (double)q[h * hs + i] * K[(size_t)j * kvw + off + i];
            w[j] = d * scale, mx = w[j] > mx ? w[j] : mx;
        }
        for (int j = 0; j < n; j++) sum += w[j] = exp(w[j] - mx);
        for (int j = 0; j < n; j++)
            for (int i = 0; i < hs; i++) ref[h * hs + i] += w[j] / sum * V[(size_t)j * kvw + off + i];
    }
    char nm[96];
    snprintf(nm, sizeof nm, "attention_decode_NH%d_KV%d_hs%d_pos%d", NH, KV, hs, pos);
    cmp(nm, y, ref, (size_t)NH * hs, TOL32);
    be->attention_decode(d_y, d_s, d_q, d_k, d_v, pos, NH, KV, hs, scale, 1);
    float *y2 = dget(d_y, (size_t)NH * hs);
    snprintf(nm, sizeof nm, "attention_decode_NH%d_KV%d_hs%d_pos%d_repeats", NH, KV, hs, pos);
    same_bits(nm, y, y2, (size_t)NH * hs);
    dfree(d_q, (size_t)NH * hs * 4), dfree(d_k, (size_t)n * kvw * 4), dfree(d_v, (size_t)n * kvw * 4);
    dfree(d_s, (size_t)NH * n * 4), dfree(d_y, (size_t)NH * hs * 4);
    free(q), free(K), free(V), free(y), free(y2), free(ref), free(w);
}

/* Odd N, C, OC: leading dimensions of 29 and 41 elements (cuBLASLt with operands aligned to 4 or
 * 2 bytes only, as a model with such widths would give it). */
static void test_matmul(int bf16, int N, int C, int OC) {
    char nm[96];
    float *x = hrand((size_t)N * C, 1), *w = hrand((size_t)OC * C, 1), *bias = hrand(OC, 1);
    float *dout = hrand((size_t)N * OC, 1), *dw0 = hrand((size_t)OC * C, 1), *db0 = hrand(OC, 1);
    uint16_t *wlp = malloc((size_t)OC * C * 2);
    for (size_t i = 0; i < (size_t)OC * C; i++) wlp[i] = half_bf16(w[i]);
    float *d_x = dputf(x, (size_t)N * C), *d_w = dputf(w, (size_t)OC * C), *d_bias = dputf(bias, OC);
    float *d_dout = dputf(dout, (size_t)N * OC);
    uint16_t *d_wlp = dput(wlp, (size_t)OC * C * 2);
    MatPrec mp = {0};
    size_t na = (size_t)N * 4 * C;
    mp.bf16 = 1, mp.a = dpoison(na * 2), mp.b = dpoison(na * 2);
    const MatPrec *m = bf16 ? &mp : NULL;
    float *d_out = dpoison((size_t)N * OC * 4), *d_dinp = dpoison((size_t)N * C * 4);
    float *d_dw = dputf(dw0, (size_t)OC * C), *d_db = dputf(db0, OC);
    be->matmul_forward_p(m, d_out, d_x, d_w, d_wlp, d_bias, N, C, OC, 1);
    be->matmul_backward_p(m, d_dinp, d_dw, d_db, d_dout, d_x, d_w, d_wlp, N, C, OC, 1, 1);
    backend_ok("matmul");
#define OPF(v) (bf16 ? bf(v) : (double)(v))
    double *ro = malloc((size_t)N * OC * 8), *rdx = malloc((size_t)N * C * 8), *rdw = malloc((size_t)OC * C * 8);
    double *rdb = malloc(OC * 8);
    for (int i = 0; i < N; i++)
        for (int o = 0; o < OC; o++) {
            double s = bias[o];
            for (int c = 0; c < C; c++) s += OPF(x[(size_t)i * C + c]) * OPF(w[(size_t)o * C + c]);
            ro[(size_t)i * OC + o] = s;
        }
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++) {
            double s = 0;
            for (int o = 0; o < OC; o++) s += OPF(dout[(size_t)i * OC + o]) * OPF(w[(size_t)o * C + c]);
            rdx[(size_t)i * C + c] = s;
        }
    for (int o = 0; o < OC; o++) {
        double sb = db0[o];
        for (int i = 0; i < N; i++) sb += dout[(size_t)i * OC + o]; /* bias gradient: fp32 dout */
        rdb[o] = sb;
        for (int c = 0; c < C; c++) {
            double s = dw0[(size_t)o * C + c];
            for (int i = 0; i < N; i++) s += OPF(dout[(size_t)i * OC + o]) * OPF(x[(size_t)i * C + c]);
            rdw[(size_t)o * C + c] = s;
        }
    }
#undef OPF
    float *go = dget(d_out, (size_t)N * OC), *gdx = dget(d_dinp, (size_t)N * C), *gdw = dget(d_dw, (size_t)OC * C);
    float *gdb = dget(d_db, OC);
    const char *pr = bf16 ? "bf16" : "fp32";
    snprintf(nm, sizeof nm, "matmul_forward_%s_%dx%dx%d", pr, N, C, OC);
    cmp(nm, go, ro, (size_t)N * OC, TOL32);
    snprintf(nm, sizeof nm, "matmul_backward_%s_%dx%dx%d_dinp", pr, N, C, OC);
    cmp(nm, gdx, rdx, (size_t)N * C, TOL32);
    snprintf(nm, sizeof nm, "matmul_backward_%s_%dx%dx%d_dw_acc", pr, N, C, OC);
    cmp(nm, gdw, rdw, (size_t)OC * C, TOL32);
    snprintf(nm, sizeof nm, "matmul_backward_%s_%dx%dx%d_dbias_acc", pr, N, C, OC);
    cmp(nm, gdb, rdb, OC, TOL32);
    free(go), free(gdx), free(gdw), free(gdb), free(ro), free(rdx), free(rdw), free(rdb);
    free(x), free(w), free(bias), free(dout), free(dw0), free(db0), free(wlp);
    dfree(d_x, (size_t)N * C * 4), dfree(d_w, (size_t)OC * C * 4), dfree(d_bias, OC * 4);
    dfree(d_dout, (size_t)N * OC * 4), dfree(d_wlp, (size_t)OC * C * 2), dfree(mp.a, na * 2), dfree(mp.b, na * 2);
    dfree(d_out, (size_t)N * OC * 4), dfree(d_dinp, (size_t)N * C * 4), dfree(d_dw, (size_t)OC * C * 4);
    dfree(d_db, OC * 4);
}

/* ---- the fused LM head ---- */

/* n rows in chunks (the last partial), V real columns of Vp; GPT-2's V = 50257 (odd, padded to 50304,
 * more columns than a block's threads walk in one pass) as well as a small one. */
static void test_head(int n, int C, int V, int Vp, int chunk) {
    float dscale = 1.0f / n;
    char nm[96];
    float *x = hrand((size_t)n * C, 1), *wte = hrand((size_t)Vp * C, 1);
    int32_t *tg = malloc((size_t)n * 4);
    for (int i = 0; i < n; i++) tg[i] = (int32_t)rng_below(seed, 77, i, V);
    tg[n > 5 ? 5 : n - 1] = -1; /* a masked row */
    float *d_x = dputf(x, (size_t)n * C), *d_wte = dputf(wte, (size_t)Vp * C);
    int32_t *d_tg = dput(tg, (size_t)n * 4);
    float *runs[2][3], *probs = malloc((size_t)V * sizeof(float));
    for (int r = 0; r < 2; r++) {
        float *d_loss = dpoison((size_t)n * 4), *d_dx = dpoison((size_t)n * C * 4), *d_dwte = dpoison((size_t)Vp * C * 4);
        float *d_log = dpoison((size_t)chunk * Vp * 4);
        for (int v = 0; v < V; v++) probs[v] = NAN;
        be->head_forward_backward(d_loss, d_dx, d_dwte, d_log, d_x, d_wte, d_tg, n, C, V, Vp, dscale, chunk, 0, 1,
                                  probs, NULL, NULL);
        backend_ok("head_forward_backward");
        runs[r][0] = dget(d_loss, n), runs[r][1] = dget(d_dx, (size_t)n * C), runs[r][2] = dget(d_dwte, (size_t)V * C);
        dfree(d_loss, (size_t)n * 4), dfree(d_dx, (size_t)n * C * 4), dfree(d_dwte, (size_t)Vp * C * 4);
        dfree(d_log, (size_t)chunk * Vp * 4);
    }
    /* a frozen head (dwte NULL: LoRA's base, kernels_head.c): losses and dx as with dwte, bit for bit,
     * and nothing written through NULL (cuda ran its dwte GEMM on NULL before this check) */
    float *d_loss = dpoison((size_t)n * 4), *d_dx = dpoison((size_t)n * C * 4);
    float *d_log = dpoison((size_t)chunk * Vp * 4);
    be->head_forward_backward(d_loss, d_dx, NULL, d_log, d_x, d_wte, d_tg, n, C, V, Vp, dscale, chunk, 0, 1, NULL, NULL,
                              NULL);
    backend_ok("head_forward_backward(frozen)");
    float *frozen_loss = dget(d_loss, n), *frozen_dx = dget(d_dx, (size_t)n * C);
    dfree(d_loss, (size_t)n * 4), dfree(d_dx, (size_t)n * C * 4), dfree(d_log, (size_t)chunk * Vp * 4);
    double *rl = malloc((size_t)n * 8), *rdx = calloc((size_t)n * C, 8), *rdw = calloc((size_t)V * C, 8);
    double *lg = malloc((size_t)V * 8), *rp = malloc((size_t)V * 8);
    for (int i = 0; i < n; i++) {
        double mx = -INFINITY, s = 0;
        for (int v = 0; v < V; v++) {
            double a = 0;
            for (int c = 0; c < C; c++) a += (double)x[(size_t)i * C + c] * wte[(size_t)v * C + c];
            lg[v] = a;
            mx = a > mx ? a : mx;
        }
        for (int v = 0; v < V; v++) s += exp(lg[v] - mx);
        double lse = mx + log(s);
        rl[i] = tg[i] >= 0 ? lse - lg[tg[i]] : 0.0;
        if (i == 0)
            for (int v = 0; v < V; v++) rp[v] = exp(lg[v] - lse);
        if (tg[i] < 0) continue;
        for (int v = 0; v < V; v++) {
            double g = (exp(lg[v] - lse) - (v == tg[i])) * dscale;
            for (int c = 0; c < C; c++) {
                rdx[(size_t)i * C + c] += g * wte[(size_t)v * C + c];
                rdw[(size_t)v * C + c] += g * x[(size_t)i * C + c];
            }
        }
    }
    snprintf(nm, sizeof nm, "head_V%d_losses", V);
    cmp(nm, runs[0][0], rl, n, TOL32);
    snprintf(nm, sizeof nm, "head_V%d_dx", V);
    cmp(nm, runs[0][1], rdx, (size_t)n * C, TOL32);
    snprintf(nm, sizeof nm, "head_V%d_dwte", V);
    cmp(nm, runs[0][2], rdw, (size_t)V * C, TOL32);
    snprintf(nm, sizeof nm, "head_V%d_probs_row0", V);
    cmp(nm, probs, rp, V, TOL32);
    snprintf(nm, sizeof nm, "head_V%d_repeats_dwte", V);
    same_bits(nm, runs[0][2], runs[1][2], (size_t)V * C);
    snprintf(nm, sizeof nm, "head_V%d_frozen_dx", V);
    cmp(nm, frozen_dx, rdx, (size_t)n * C, TOL32);
    snprintf(nm, sizeof nm, "head_V%d_frozen_losses_as_trained", V);
    same_bits(nm, frozen_loss, runs[0][0], n);
    snprintf(nm, sizeof nm, "head_V%d_frozen_dx_as_trained", V);
    same_bits(nm, frozen_dx, runs[0][1], (size_t)n * C);
    free(frozen_loss), free(frozen_dx);
    free(probs), free(rp);
    for (int r = 0; r < 2; r++) free(runs[r][0]), free(runs[r][1]), free(runs[r][2]);
    free(rl), free(rdx), free(rdw), free(lg), free(x), free(wte), free(tg);
    dfree(d_x, (size_t)n * C * 4), dfree(d_wte, (size_t)Vp * C * 4), dfree(d_tg, (size_t)n * 4);
}

/* ---- elementwise and host reads ---- */

static void test_elementwise(void) {
    size_t n = 3001;
    int N = 31, C = 97; /* N·C = 3007 >= n */
    Dropout d = {0.3f, seed + 17, 21, 5, 0, 0};
    float *a = hrand(n, 2), *b = hrand(n, 2), *bias = hrand(C, 1);
    float *d_a = dputf(a, n), *d_b = dputf(b, n), *d_o = dpoison(n * 4);
    double *ref = malloc(n * 8);
    be->residual_forward(d_o, d_a, d_b, n, d, 1);
    backend_ok("residual_forward");
    for (size_t i = 0; i < n; i++) ref[i] = (double)a[i] + b[i] * drop_ref(d, i);
    float *g = dget(d_o, n);
    cmp("residual_forward_dropout", g, ref, n, TOL32);
    free(g);
    be->dropout_backward(d_o, d_b, n, d, 1);
    for (size_t i = 0; i < n; i++) ref[i] = b[i] * drop_ref(d, i);
    g = dget(d_o, n);
    cmp("dropout_backward", g, ref, n, TOL32);
    free(g);
    float *d_x = dputf(a, n);
    be->scale_inplace(d_x, n, 0.37f, 1);
    for (size_t i = 0; i < n; i++) ref[i] = (double)a[i] * 0.37f;
    g = dget(d_x, n);
    cmp("scale_inplace", g, ref, n, TOL32);
    free(g);
    be->add_or_set(d_x, d_b, n, 0);
    be->add_or_set(d_x, d_a, n, 1);
    for (size_t i = 0; i < n; i++) ref[i] = (double)b[i] + a[i];
    g = dget(d_x, n);
    cmp("add_or_set", g, ref, n, TOL32);
    free(g);
    float *xr = hrand((size_t)N * C, 1), *d_xr = dputf(xr, (size_t)N * C);
    double *rr = malloc((size_t)N * C * 8);
    float *d_bias = dputf(bias, C);
    be->bias_add_rows(d_xr, d_bias, N, C, 1);
    for (int i = 0; i < N * C; i++) rr[i] = (double)xr[i] + bias[i % C];
    g = dget(d_xr, (size_t)N * C);
    cmp("bias_add_rows", g, rr, (size_t)N * C, TOL32);
    free(g);
    /* casts: exactly core/half.h's rounding, bit for bit */
    uint16_t *d_h = dpoison(n * 2), *hb = malloc(n * 2);
    be->cast_bf16(d_h, d_a, n, 1);
    be->to_host(hb, d_h, n * 2);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += hb[i] != half_bf16(a[i]);
    tu_check(bad == 0, "cast_bf16_bits", "%zu of %zu differ from half_bf16 (%s)", bad, n, be->name);
    be->cast_fp16(d_h, d_a, n, 1);
    be->to_host(hb, d_h, n * 2);
    bad = 0;
    for (size_t i = 0; i < n; i++) bad += hb[i] != half_fp16(a[i]);
    tu_check(bad == 0, "cast_fp16_bits", "%zu of %zu differ from half_fp16 (%s)", bad, n, be->name);
    /* sum_ordered: the index-order double sum of the fp32 values, exactly */
    double s = be->sum_ordered(d_a, n), rs = 0;
    for (size_t i = 0; i < n; i++) rs += a[i];
    tu_check(s == rs, "sum_ordered_exact", "%.17g vs %.17g (%s)", s, rs, be->name);
    backend_ok("elementwise");
    free(a), free(b), free(bias), free(ref), free(xr), free(rr), free(hb);
    dfree(d_a, n * 4), dfree(d_b, n * 4), dfree(d_o, n * 4), dfree(d_x, n * 4), dfree(d_xr, (size_t)N * C * 4);
    dfree(d_h, n * 2), dfree(d_bias, (size_t)C * 4);
}

/* ---- empty calls ---- */

/* 1 when a[i] == b[i] for every i (bits). */
static int equal_bits(const float *a, const float *b, size_t n) { return !memcmp(a, b, n * sizeof(float)); }

/* Every entry on zero rows (B = 0, N = 0, n = 0) does what the CPU's loops do: nothing, except that
 * an overwriting parameter gradient (acc = 0) is the empty sum, 0, and an accumulating one (acc = 1)
 * stays. No failure may be recorded (cuda: a launch of 0 blocks is "invalid configuration argument",
 * which every such entry recorded before its empty case returned early). Control: the gradients
 * start random, so "became 0" and "stayed" are each false of the other outcome. */
static void test_empty(void) {
    int C = 40, T = 5, V = 7, NH = 2, KV = 1, hs = 16;
    Dropout d = {0.1f, seed + 23, 4, 0, 0, 0};
    float *one = hrand(64, 1), *zeros = calloc(C, sizeof(float));
    float *d_one = dputf(one, 64); /* a valid device pointer for every argument no element of is read */
    int32_t *d_i = dput((int32_t[64]){0}, 64 * 4);
    uint16_t *d_h = dpoison(64 * 2);
    float *init = hrand(C, 1), *wte0 = hrand((size_t)V * C, 1), *wpe0 = hrand((size_t)T * C, 1);
    tu_check(!equal_bits(init, zeros, C), "empty_control", "the gradients' start differs from the empty sum");
    float *d_wte = dputf(wte0, (size_t)V * C), *d_wpe = dputf(wpe0, (size_t)T * C);
    be->encoder_forward(d_one, d_i, NULL, d_one, d_one, 0, T, C, d, 1);
    be->encoder_forward_vp(d_one, d_i, NULL, d_one, d_one, 0, T, C, 0, V, 1);
    be->encoder_backward(d_wte, d_wpe, d_one, d_i, NULL, 0, T, C, d, 1);
    be->encoder_backward(d_wte, d_wpe, d_one, d_i, d_i, 0, T, C, d, 1);
    be->encoder_backward_vp(d_wte, d_wpe, d_one, d_i, NULL, 0, T, C, 0, V, 1);
    backend_ok("encoder on 0 rows");
    float *gw = dget(d_wte, (size_t)V * C), *gp = dget(d_wpe, (size_t)T * C);
    tu_check(equal_bits(gw, wte0, (size_t)V * C) && equal_bits(gp, wpe0, (size_t)T * C), "empty_encoder_backward",
             "dwte, dwpe unchanged (%s)", be->name);
    free(gw), free(gp);
    be->layernorm_forward(d_one, d_one, d_one, d_one, d_one, d_one, 0, C, 1);
    be->layernorm_forward_bf16(d_h, d_one, d_one, d_one, d_one, d_one, 0, C, 1);
    be->residual_layernorm_forward(d_one, d_one, d_one, d_one, d_one, d_one, d, d_one, d_one, 0, C, 1);
    be->rmsnorm_forward(d_one, d_one, d_one, d_one, 0, C, 1e-5f, 1);
    be->residual_rmsnorm_forward_bf16(d_one, d_h, d_one, d_one, d_one, d, d_one, 0, C, 1e-5f, 1);
    be->rope_forward(d_one, d_one, NULL, 0, T, NH, KV, hs, 0, 1);
    be->rope_backward(d_one, d_one, NULL, 0, T, NH, KV, hs, 0, 1);
    be->swiglu_forward(d_one, d_one, 0, C, 1);
    be->swiglu_forward_bf16(d_h, d_one, 0, C, 1);
    be->swiglu_backward(d_one, d_one, d_one, 0, C, 1);
    be->swiglu_backward_bf16(d_h, d_one, d_one, 0, C, 1);
    be->gelu_forward(d_one, d_one, 0, 1);
    be->gelu_forward_bf16(d_h, d_one, 0, 1);
    be->gelu_backward(d_one, d_one, d_one, 0, 1);
    be->attention_forward(d_one, d_one, d_one, d_one, NULL, 0, T, NH, KV, hs, 0.25f, d, 0, 1);
    be->attention_backward(d_one, d_one, d_one, d_one, d_one, d_one, NULL, 0, T, NH, KV, hs, 0.25f, d, 0, 1);
    be->attention_forward(d_one, d_one, d_one, d_one, NULL, 0, T, NH, KV, hs, 0.25f, d, 1, 1);
    be->attention_backward(d_one, d_one, d_one, d_one, d_one, d_one, NULL, 0, T, NH, KV, hs, 0.25f, d, 1, 1);
    backend_ok("row kernels on 0 rows");
    /* the parameter gradients of 0 rows: = 0 (acc 0), unchanged (acc 1) */
    for (int acc = 0; acc < 2; acc++) {
        const float *want = acc ? init : zeros;
        float *d_dw = dputf(init, C), *d_db = dputf(init, C), *d_cs = dputf(init, C), *d_cs2 = dputf(init, C);
        float *d_rw = dputf(init, C);
        be->layernorm_backward(d_one, d_dw, d_db, d_one, d_one, d_one, d_one, d_one, d_one, 0, C, acc, 1);
        be->rmsnorm_backward(d_one, d_rw, d_one, d_one, d_one, d_one, d_one, 0, C, acc, 1);
        be->gelu_backward_bf16(d_h, d_cs, NULL, d_one, d_one, 0, C, acc, 1);
        be->cast_bf16_colsum(d_h, d_cs2, NULL, d_one, 0, C, acc, 1);
        backend_ok(acc ? "parameter gradients of 0 rows (acc 1)" : "parameter gradients of 0 rows (acc 0)");
        float *g[5] = {dget(d_dw, C), dget(d_db, C), dget(d_rw, C), dget(d_cs, C), dget(d_cs2, C)};
        static const char *what[5] = {"layernorm_backward_dw", "layernorm_backward_db", "rmsnorm_backward_dw",
                                      "gelu_backward_bf16_colsum", "cast_bf16_colsum"};
        for (int k = 0; k < 5; k++) {
            char nm[96];
            snprintf(nm, sizeof nm, "empty_%s_acc%d", what[k], acc);
            tu_check(equal_bits(g[k], want, C), nm, "%s (%s)", acc ? "unchanged" : "the empty sum, 0", be->name);
            free(g[k]);
        }
        dfree(d_dw, C * 4), dfree(d_db, C * 4), dfree(d_cs, C * 4), dfree(d_cs2, C * 4), dfree(d_rw, C * 4);
    }
    be->attention_decode(d_one, d_one, d_one, d_one, d_one, 3, 0, 1, hs, 0.25f, 1); /* no heads */
    backend_ok("attention_decode of 0 heads");
    free(one), free(zeros), free(init), free(wte0), free(wpe0);
    dfree(d_one, 64 * 4), dfree(d_i, 64 * 4), dfree(d_h, 64 * 2), dfree(d_wte, (size_t)V * C * 4);
    dfree(d_wpe, (size_t)T * C * 4);
}

/* A call the backend cannot run is recorded, not run (cuda: head size over 128; batch x heads over
 * the grid's y limit of 65535, which a launch would reject). */
static void test_refusal(void) {
    if (strcmp(be->name, "cuda")) return;
    be->attention_forward(NULL, NULL, NULL, NULL, NULL, 1, 4, 1, 1, 200, 1.0f, (Dropout){0}, 0, 1);
    Err e = {0};
    Status st = be->take_error(&e);
    tu_check(st == ST_ERR_INPUT && strstr(e.msg, "head size") && !strchr(e.msg, '\n'), "cuda_records_refusal", "%s",
             st == ST_OK ? "not recorded" : e.msg);
    be->attention_backward(NULL, NULL, NULL, NULL, NULL, NULL, NULL, 2048, 4, 64, 64, 64, 1.0f, (Dropout){0}, 0, 1);
    st = be->take_error(&e);
    tu_check(st == ST_ERR_INPUT && strstr(e.msg, "grid") && !strchr(e.msg, '\n'), "cuda_records_grid_refusal", "%s",
             st == ST_OK ? "not recorded" : e.msg);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_backend_kernels cpu|cuda\n");
        return 2;
    }
    Err e = {0};
    if (backend_find(argv[1], &be, &e) != ST_OK) {
        fprintf(stderr, "test_backend_kernels: %s\n", e.msg);
        return 1;
    }
    const char *env = getenv("ST_TEST_SEED");
    seed = env ? strtoull(env, NULL, 0) : ((uint64_t)time(NULL) << 20) ^ (uint64_t)getpid();
    printf("test_backend_kernels: backend %s, seed %llu (ST_TEST_SEED repeats it)\n", be->name,
           (unsigned long long)seed);
    test_encoder(0, 40);
    test_encoder(1, 300);
    test_encoder(1, 1100); /* > DROP_CHUNK: a row's dropout factors in two pieces */
    test_norm(0, 72);
    test_norm(1, 72);
    test_norm(0, 1100);
    test_rope();
    test_activations();
    /* B, T, NH, KV, hs, dropout, doc positions, lowp */
    test_attention((AttCase){2, 45, 4, 2, 32, 0.0f, 0, 0, "gqa_fp32"});
    test_attention((AttCase){1, 70, 2, 2, 64, 0.0f, 0, 0, "mha_hs64_T70"});
    test_attention((AttCase){2, 45, 4, 1, 24, 0.1f, 0, 0, "mqa_hs24_dropout"});
    test_attention((AttCase){2, 45, 4, 2, 32, 0.0f, 1, 0, "gqa_docmask"});
    test_attention((AttCase){2, 45, 4, 2, 32, 0.0f, 0, 1, "gqa_lowp"});
    /* the largest head size (4 dimensions per lane, the most shared memory), T one past a key tile */
    test_attention((AttCase){1, 33, 2, 1, 128, 0.1f, 1, 0, "mqa_hs128_T33_docmask_dropout"});
    /* lowp past one 64-row block and key tile (cuda: the tensor-core kernels at hs 64 and 128), with
     * dropout and with document positions; T 200 with 4 query heads per KV head: dK/dV's blocks walk
     * several query tiles of each head and skip those no row of which sees their keys */
    test_attention((AttCase){2, 130, 4, 2, 64, 0.1f, 0, 1, "gqa_lowp_hs64_T130_dropout"});
    test_attention((AttCase){1, 70, 2, 1, 128, 0.0f, 1, 1, "mqa_lowp_hs128_T70_docmask"});
    test_attention((AttCase){1, 200, 4, 1, 64, 0.1f, 1, 1, "mqa_lowp_hs64_T200_docmask_dropout"});
    /* a head size not run before (hs 48: three 16-wide fragments), then hs 128 again (keep this
     * order; cuda: a tensor-core kernel's shared-memory opt-in is one value per kernel, and was set
     * once per new head size: hs 48 lowered it below hs 128's need, and that launch was refused) */
    test_attention((AttCase){1, 20, 2, 1, 48, 0.0f, 0, 1, "mqa_lowp_hs48_T20"});
    test_attention((AttCase){1, 20, 2, 1, 128, 0.0f, 0, 1, "mqa_lowp_hs128_T20_after_hs48"});
    /* one token: one key, one query row per (batch, head) */
    test_attention((AttCase){2, 1, 4, 2, 32, 0.1f, 0, 0, "gqa_T1_dropout"});
    test_attention((AttCase){2, 1, 4, 2, 32, 0.0f, 0, 1, "gqa_lowp_T1"});
    /* NH, KV, hs, pos: GQA; MHA past one block's 128 threads; MQA at the first position */
    test_attention_decode(4, 2, 32, 44);
    test_attention_decode(2, 2, 64, 300);
    test_attention_decode(4, 1, 24, 0);
    test_matmul(0, 70, 48, 40);
    test_matmul(1, 70, 48, 40);
    test_matmul(0, 37, 29, 41);
    test_matmul(1, 37, 29, 41);
    test_head(37, 32, 101, 128, 16);
    test_head(5, 16, 50257, 50304, 2);
    test_elementwise();
    test_empty();
    test_refusal();
    return tu_exit();
}
