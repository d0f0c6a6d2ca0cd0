/* test_doc_mask.c — document masking (docs/doc-mask.md; issue 27).
 *
 * Oracles:
 *  1. The model: a packed micro-batch (B = 2 rows of three documents each, lengths differing, the
 *     EOT closing each document) trained one forward + backward under doc_mask gives per-token
 *     losses and parameter gradients equal (<= 1e-6 relative) to running every document alone
 *     (its own T, positions from 0, gradients summed over the six runs), for GPT-2 (learned
 *     positions) and Llama (RoPE, GQA 4:2). Control: the same packed batch without doc_mask must
 *     differ from the documents alone (losses by > 1e-3 relative).
 *     The same under bf16 (<= 1e-5: only the fp32 accumulation order differs; control > 0.1).
 *     Recompute: under doc_mask with dropout, recompute none / selective / full give the same
 *     loss and gradients bit for bit (the positions reach the recomputed forward).
 *     KV cache: token by token over a history with three EOTs, infer_feed's logits equal the last
 *     row of the masked forward (gpt_logits, <= 1e-5); control: an unmasked cache differs.
 *  2. The kernel: attention_gqa_forward/_backward with document positions against a float64
 *     reference whose query i sums over keys j in [start(i), i] only (softmax, dropout with the
 *     same absolute (row, key) index, and the chain rule written out), fp32 (<= 1e-5) and bf16
 *     (in (1e-5, 1e-2]), T = 300 so that documents straddle the 64-query and 256-key blocks, a
 *     one-token document included; and T = 640 with a document starting at 600, whose rows begin
 *     past the first two key blocks of their query block (a row's first key beyond the block's
 *     end: the bf16 row loops must not write past it). Controls: the masked kernel is far from the unmasked
 *     reference; a row without any EOT (positions 0..T-1) is the causal kernel (pos = NULL) bit
 *     for bit. RoPE with positions = RoPE of each row alone at pos0 = its position (bit for bit);
 *     the GPT-2 embedding with positions = wte[tok] + wpe[pos] and its backward = the float64
 *     scatter.
 *  3. FLOPs: layout_doc_span (the per-token attention span the trainer's MFU uses) = Σ L_i² / (B·T)
 *     by hand for the batch above, T for a row without EOT; layout_flops_per_token_span equals the
 *     closed form 6·(12·L·C² + V·C) + 12·L·C·S for S = 1..1024 and, at S = T,
 *     layout_flops_per_token exactly; plan --doc-mask --mean-doc-len prices S = min(len, T).
 *     Control: the masked plan is below the unmasked one. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "model/gpt.h"
#include "model/infer.h"
#include "model/kernels.h"
#include "model/layout.h"
#include "plan/plan.h"
#include "testutil.h"

#define EOT 3 /* the test vocabulary's EOT id */

/* ---------------------------------------------------------------------------------------------- */
/* 1. the model                                                                                    */
/* ---------------------------------------------------------------------------------------------- */

enum { B = 2, T = 32, NDOC = 3 };
static const int LENS[B][NDOC] = {{9, 14, 9}, {20, 1, 11}};

/* Tokens of the test batch: random ids != EOT, each document but the row's last closed by EOT. */
static void make_batch(int V, int32_t *inp, int32_t *tgt) {
    for (int b = 0; b < B; b++) {
        int t = 0;
        for (int d = 0; d < NDOC; d++)
            for (int i = 0; i < LENS[b][d]; i++, t++) {
                int32_t x = (int32_t)(rng_uniform(77, (uint64_t)b, (uint64_t)t) * (V - 1));
                if (x >= EOT) x++; /* never EOT */
                inp[b * T + t] = (i == LENS[b][d] - 1 && d < NDOC - 1) ? EOT : x;
                tgt[b * T + t] = (int32_t)(rng_uniform(78, (uint64_t)b, (uint64_t)t) * V);
            }
    }
}

typedef struct {
    float *losses; /* B·T per-token losses */
    float *grads;
    size_t n;
    double loss;
} Run;

static GptPrecision g_prec = GPT_FP32; /* the precision model_init builds */

static int model_init(Gpt *g, const ModelConfig *mc0, int doc_mask, Recompute rc) {
    GptOptions o = gpt_default_options();
    o.B = B, o.T = T, o.threads = 2, o.recompute = rc, o.precision = g_prec;
    ModelConfig m = *mc0;
    m.doc_mask = doc_mask, m.doc_eot = EOT;
    const ModelConfig *mc = &m;
    Err e;
    if (gpt_init(g, mc, &o, NULL, &e) != ST_OK) {
        printf("gpt_init: %s\n", e.msg);
        return -1;
    }
    gpt_init_params(g, 11);
    gpt_sync_lp(g);
    return 0;
}

/* The packed batch in one forward + backward (dscale 1: gradients of the loss sum). */
static int run_packed(const ModelConfig *mc, int doc_mask, Recompute rc, Run *r) {
    Gpt g;
    if (model_init(&g, mc, doc_mask, rc)) return -1;
    int32_t inp[B * T], tgt[B * T];
    make_batch(mc->vocab, inp, tgt);
    gpt_zero_grads(&g);
    r->loss = gpt_forward(&g, inp, tgt, B, T, 1.0f, 1, 9);
    r->losses = malloc(sizeof(float) * B * T);
    memcpy(r->losses, g.s.losses, sizeof(float) * B * T);
    gpt_backward(&g);
    Err e;
    Status st = gpt_status(&g, &e);
    r->n = g.w.layout.total;
    r->grads = malloc(r->n * sizeof(float));
    memcpy(r->grads, g.d.grads, r->n * sizeof(float));
    gpt_free(&g);
    return st == ST_OK ? 0 : -1;
}

/* Every document alone (B = 1, T = its length, no masking), gradients summed over the runs. */
static int run_alone(const ModelConfig *mc, Run *r) {
    Gpt g;
    if (model_init(&g, mc, 0, RECOMPUTE_NONE)) return -1;
    int32_t inp[B * T], tgt[B * T];
    make_batch(mc->vocab, inp, tgt);
    r->losses = malloc(sizeof(float) * B * T);
    r->loss = 0;
    gpt_zero_grads(&g);
    for (int b = 0; b < B; b++)
        for (int d = 0, t0 = 0; d < NDOC; t0 += LENS[b][d], d++) {
            int L = LENS[b][d];
            r->loss += gpt_forward(&g, inp + b * T + t0, tgt + b * T + t0, 1, L, 1.0f, 1, 9);
            memcpy(r->losses + b * T + t0, g.s.losses, sizeof(float) * L);
            gpt_backward(&g);
        }
    Err e;
    Status st = gpt_status(&g, &e);
    r->n = g.w.layout.total;
    r->grads = malloc(r->n * sizeof(float));
    memcpy(r->grads, g.d.grads, r->n * sizeof(float));
    gpt_free(&g);
    return st == ST_OK ? 0 : -1;
}

static double max_rel(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]) / (fabs((double)b[i]) > 1e-30 ? fabs((double)b[i]) : 1e-30);
        if (d > m) m = d;
    }
    return m;
}

static void model_case(const char *name, ModelConfig mc) {
    Err e;
    if (model_config_validate(&mc, &e) != ST_OK) {
        tu_check(0, name, "config: %s", e.msg);
        return;
    }
    Run m = {0}, a = {0}, u = {0};
    int ok = run_packed(&mc, 1, RECOMPUTE_NONE, &m) == 0 && run_alone(&mc, &a) == 0 &&
             run_packed(&mc, 0, RECOMPUTE_NONE, &u) == 0;
    char what[160];
    double el = ok ? max_rel(m.losses, a.losses, B * T) : 1, eg = ok ? tu_rel_err_f(m.grads, a.grads, m.n) : 1;
    snprintf(what, sizeof what, "%s: doc-mask packed = documents alone (per-token losses, all gradients)", name);
    tu_check(ok && el <= 1e-6 && eg <= 1e-6, what,
             "losses max rel %.3g, gradients rel %.3g over %zu (tol 1e-6); loss sums %.9g vs %.9g", el, eg, m.n, m.loss,
             a.loss);
    double cl = ok ? max_rel(u.losses, a.losses, B * T) : 0, cg = ok ? tu_rel_err_f(u.grads, a.grads, u.n) : 0;
    snprintf(what, sizeof what, "%s: control: without doc-mask the packed batch differs from the documents alone", name);
    tu_check(ok && cl > 1e-3 && cg > 1e-3, what, "losses max rel %.3g, gradients rel %.3g (must be > 1e-3)", cl, cg);
    free(m.losses), free(m.grads), free(a.losses), free(a.grads), free(u.losses), free(u.grads);

    /* bf16 (GEMM and attention operands rounded to bf16, fp32 accumulation): a document rounds the same
     * values packed or alone, so only the accumulation order differs (measured ~1e-7): <= 1e-5. */
    g_prec = GPT_BF16;
    Run mb = {0}, ab = {0}, ub = {0};
    ok = run_packed(&mc, 1, RECOMPUTE_NONE, &mb) == 0 && run_alone(&mc, &ab) == 0 &&
         run_packed(&mc, 0, RECOMPUTE_NONE, &ub) == 0;
    g_prec = GPT_FP32;
    el = ok ? max_rel(mb.losses, ab.losses, B * T) : 1, eg = ok ? tu_rel_err_f(mb.grads, ab.grads, mb.n) : 1;
    cg = ok ? tu_rel_err_f(ub.grads, ab.grads, ub.n) : 0;
    snprintf(what, sizeof what, "%s bf16: doc-mask packed = documents alone (<= 1e-5; control without the mask > 0.1)",
             name);
    tu_check(ok && el <= 1e-5 && eg <= 1e-5 && cg > 0.1, what, "losses max rel %.3g, gradients rel %.3g; control %.3g",
             el, eg, cg);
    free(mb.losses), free(mb.grads), free(ab.losses), free(ab.grads), free(ub.losses), free(ub.grads);

    /* Recompute levels under doc-mask, dropout on: bit for bit. */
    mc.dropout = 0.1f;
    Run r[3] = {{0}};
    int rok = 1;
    for (int k = 0; k < 3; k++) rok = rok && run_packed(&mc, 1, (Recompute)k, &r[k]) == 0;
    int same = rok;
    for (int k = 1; k < 3 && rok; k++)
        same = same && r[k].loss == r[0].loss && !memcmp(r[k].grads, r[0].grads, r[0].n * sizeof(float));
    snprintf(what, sizeof what, "%s: doc-mask + dropout: recompute none = selective = full, bit for bit", name);
    tu_check(same, what, "losses %.17g %.17g %.17g", r[0].loss, r[1].loss, r[2].loss);
    for (int k = 0; k < 3; k++) free(r[k].losses), free(r[k].grads);
}

/* KV-cache generation under doc-mask: after each token of a history with EOTs, infer_feed's logits
 * equal the last row of the masked training forward over the history so far (gpt_logits); the
 * cache restarts after an EOT. Control: the same feed on the model without masking differs. */
static void kv_case(const char *name, ModelConfig mc) {
    enum { H = 20 };
    mc.doc_mask = 1, mc.doc_eot = EOT;
    Err e;
    Gpt g;
    KvCache kv = {0};
    if (model_config_validate(&mc, &e) != ST_OK || model_init(&g, &mc, 1, RECOMPUTE_NONE) ||
        kv_init(&kv, &g, &e) != ST_OK) {
        tu_check(0, name, "setup failed");
        return;
    }
    int32_t hist[H];
    for (int i = 0; i < H; i++) hist[i] = (i * 7 + 5) % mc.vocab == EOT ? 1 : (i * 7 + 5) % mc.vocab;
    hist[4] = hist[5] = hist[12] = EOT; /* documents 0..4, 5, 6..12, 13..19 (an EOT-only document) */
    float *full = malloc(sizeof(float) * H * mc.vocab);
    double worst = 0;
    int fails = 0;
    for (int n = 1; n <= H; n++) {
        fails += infer_feed(&g, &kv, hist, (size_t)n, &e) != ST_OK;
        fails += gpt_logits(&g, hist, n, full, &e) != ST_OK;
        double r = tu_rel_err_f(kv.logits, full + (size_t)(n - 1) * mc.vocab, (size_t)mc.vocab);
        worst = r > worst ? r : worst;
    }
    char what[160];
    snprintf(what, sizeof what, "%s: doc-mask KV-cache logits = the masked forward's, token by token over 3 EOTs", name);
    tu_check(!fails && worst < 1e-5, what, "worst rel %.3g (tol 1e-5), %d failures", worst, fails);
    /* Control: the cache of the unmasked model keeps the earlier documents in view. */
    kv_free(&kv);
    g.w.cfg.doc_mask = 0;
    double last = 1;
    if (kv_init(&kv, &g, &e) == ST_OK && infer_feed(&g, &kv, hist, H, &e) == ST_OK)
        last = tu_rel_err_f(kv.logits, full + (size_t)(H - 1) * mc.vocab, (size_t)mc.vocab);
    snprintf(what, sizeof what, "%s: control: an unmasked cache over the same history differs", name);
    tu_check(last > 1e-3, what, "rel %.3g (must be > 1e-3)", last);
    kv_free(&kv);
    free(full);
    gpt_free(&g);
}

/* ---------------------------------------------------------------------------------------------- */
/* 2. the kernels                                                                                  */
/* ---------------------------------------------------------------------------------------------- */

static float *randv(size_t n, uint64_t stream) {
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = rng_normal(15, stream, i);
    return x;
}

static double keep_scale(Dropout d, uint64_t i) {
    if (d.p <= 0) return 1.0;
    return rng_uniform(d.seed, d.stream, i + d.offset) >= d.p ? 1.0 / (1.0 - d.p) : 0.0;
}

/* Float64 attention with document starts: query i of row b sees keys [i − pos[b·T + i], i]
 * (pos NULL: [0, i]); dropout index (b·NH + h)·T·T + i·T + j as the kernel's. out and, with dy,
 * dqkv (summed into the KV heads of the group h / (NH/KV)). */
static void ref_attention(const float *qkvf, const int32_t *pos, int Bn, int Tn, int NH, int KV, int hs, Dropout d,
                          const float *dyf, double *out, double *dqkv) {
    int ld = (NH + 2 * KV) * hs, C = NH * hs, G = NH / KV;
    double sc = 1.0 / sqrt((double)hs);
    double *P = malloc(sizeof(double) * Tn), *K = malloc(sizeof(double) * Tn), *dP = malloc(sizeof(double) * Tn);
    if (dqkv) memset(dqkv, 0, sizeof(double) * Bn * Tn * ld);
    for (int b = 0; b < Bn; b++)
        for (int h = 0; h < NH; h++) {
            int kh = h / G;
            const float *q = qkvf + (size_t)b * Tn * ld + h * hs, *k = qkvf + (size_t)b * Tn * ld + (NH + kh) * hs;
            const float *v = k + KV * hs;
            uint64_t base = ((uint64_t)b * NH + h) * Tn * Tn;
            for (int i = 0; i < Tn; i++) {
                int s0 = pos ? i - pos[b * Tn + i] : 0;
                double mx = -1e300, s = 0;
                for (int j = s0; j <= i; j++) {
                    double x = 0;
                    for (int c = 0; c < hs; c++) x += (double)q[(size_t)i * ld + c] * k[(size_t)j * ld + c];
                    P[j] = x * sc, mx = P[j] > mx ? P[j] : mx;
                    K[j] = keep_scale(d, base + (size_t)i * Tn + j);
                }
                for (int j = s0; j <= i; j++) s += P[j] = exp(P[j] - mx);
                for (int j = s0; j <= i; j++) P[j] /= s;
                for (int c = 0; c < hs; c++) {
                    double x = 0;
                    for (int j = s0; j <= i; j++) x += P[j] * K[j] * v[(size_t)j * ld + c];
                    out[((size_t)b * Tn + i) * C + h * hs + c] = x;
                }
                if (!dqkv) continue;
                const float *g = dyf + ((size_t)b * Tn + i) * C + h * hs;
                double rs = 0;
                for (int j = s0; j <= i; j++) {
                    double x = 0;
                    for (int c = 0; c < hs; c++) x += (double)g[c] * v[(size_t)j * ld + c];
                    dP[j] = x * K[j], rs += dP[j] * P[j];
                }
                double *dq = dqkv + ((size_t)b * Tn + i) * ld + h * hs;
                for (int j = s0; j <= i; j++) {
                    double ds = P[j] * (dP[j] - rs) * sc, pd = P[j] * K[j];
                    double *dk = dqkv + ((size_t)b * Tn + j) * ld + (NH + kh) * hs, *dv = dk + KV * hs;
                    for (int c = 0; c < hs; c++) {
                        dq[c] += ds * k[(size_t)j * ld + c];
                        dk[c] += ds * q[(size_t)i * ld + c];
                        dv[c] += pd * g[c];
                    }
                }
            }
        }
    free(P), free(K), free(dP);
}

/* Document positions of rows with the given document lengths (each row's lengths sum to Tn). */
static void positions(int32_t *pos, const int *lens, int ndoc_per_row, int Bn, int Tn) {
    for (int b = 0; b < Bn; b++)
        for (int d = 0, t = 0; d < ndoc_per_row; d++)
            for (int i = 0; i < lens[b * ndoc_per_row + d]; i++, t++) pos[b * Tn + t] = i;
}

/* Two rows of AT tokens, ndoc documents each (lens: row 0's, then row 1's). */
static void attention_case_docs(int lowp, float p, int AT, const int *lens, int ndoc) {
    enum { AB = 2, NH = 4, KV = 2, HS = 16 };
    int ld = (NH + 2 * KV) * HS, C = NH * HS;
    size_t nq = (size_t)AB * AT * ld, no = (size_t)AB * AT * C;
    Dropout d = {p, 21, 5};
    int32_t *pos = malloc(sizeof(int32_t) * AB * AT);
    positions(pos, lens, ndoc, AB, AT);
    char docs[96] = "";
    for (int i = 0; i < AB * ndoc; i++)
        snprintf(docs + strlen(docs), sizeof docs - strlen(docs), "%s%d", i == 0 ? "" : i % ndoc ? "|" : ", ", lens[i]);
    float *qkv = randv(nq, 40 + lowp), *dy = randv(no, 41 + lowp);
    float *out = calloc(no, 4), *lse = calloc((size_t)AB * NH * AT, 4), *dqkv = calloc(nq, 4);
    float *scr = calloc(attention_gqa_scratch_floats(AT, HS, NH / KV, 2), 4);
    float sc = 1.0f / sqrtf((float)HS);
    attention_gqa_forward(out, lse, scr, qkv, pos, AB, AT, NH, KV, HS, sc, d, lowp, 2);
    attention_gqa_backward(dqkv, scr, dy, qkv, out, lse, pos, AB, AT, NH, KV, HS, sc, d, lowp, 2);
    double *ref = calloc(no, 8), *dref = calloc(nq, 8), *unm = calloc(no, 8);
    ref_attention(qkv, pos, AB, AT, NH, KV, HS, d, dy, ref, dref);
    double e1 = tu_rel_err_fd(out, ref, no), e2 = tu_rel_err_fd(dqkv, dref, nq);
    char name[160];
    snprintf(name, sizeof name, "masked attention_gqa %s vs float64 (B=%d T=%d NH=%d KV=%d, docs %s%s)",
             lowp ? "bf16" : "fp32", AB, AT, NH, KV, docs, p > 0 ? ", dropout" : "");
    if (lowp)
        tu_check(e1 <= 1e-2 && e2 <= 1e-2 && e1 > 1e-5 && e2 > 1e-5, name,
                 "forward rel %.3g backward rel %.3g (expected in (1e-5, 1e-2])", e1, e2);
    else
        tu_check(e1 <= 1e-5 && e2 <= 1e-5, name, "forward rel %.3g backward rel %.3g (tol 1e-5)", e1, e2);
    ref_attention(qkv, NULL, AB, AT, NH, KV, HS, d, NULL, unm, NULL);
    double eu = tu_rel_err_fd(out, unm, no);
    snprintf(name, sizeof name, "control: masked attention %s is far from the unmasked reference", lowp ? "bf16" : "fp32");
    tu_check(eu > 0.05, name, "rel %.3g (must be > 0.05)", eu);

    /* A row with no EOT: positions 0..T-1 = the causal kernel (NULL) bit for bit. */
    for (int b = 0; b < AB; b++)
        for (int t = 0; t < AT; t++) pos[b * AT + t] = t;
    float *o2 = calloc(no, 4), *l2 = calloc((size_t)AB * NH * AT, 4), *g2 = calloc(nq, 4);
    float *o1 = calloc(no, 4), *l1 = calloc((size_t)AB * NH * AT, 4), *g1 = calloc(nq, 4);
    attention_gqa_forward(o1, l1, scr, qkv, pos, AB, AT, NH, KV, HS, sc, d, lowp, 2);
    attention_gqa_backward(g1, scr, dy, qkv, o1, l1, pos, AB, AT, NH, KV, HS, sc, d, lowp, 2);
    attention_gqa_forward(o2, l2, scr, qkv, NULL, AB, AT, NH, KV, HS, sc, d, lowp, 2);
    attention_gqa_backward(g2, scr, dy, qkv, o2, l2, NULL, AB, AT, NH, KV, HS, sc, d, lowp, 2);
    int same = !memcmp(o1, o2, no * 4) && !memcmp(l1, l2, (size_t)AB * NH * AT * 4) && !memcmp(g1, g2, nq * 4);
    snprintf(name, sizeof name, "one document per row (positions 0..T-1) = pos NULL, bit for bit (%s%s)",
             lowp ? "bf16" : "fp32", p > 0 ? ", dropout" : "");
    tu_check(same, name, "%s", same ? "identical" : "differ");
    free(qkv), free(dy), free(out), free(lse), free(dqkv), free(scr), free(ref), free(dref), free(unm);
    free(o1), free(l1), free(g1), free(o2), free(l2), free(g2), free(pos);
}

static void attention_case(int lowp, float p) {
    static const int lens[2 * 4] = {70, 200, 29, 1, 1, 150, 64, 85};
    attention_case_docs(lowp, p, 300, lens, 4);
}

static void position_kernels(void) {
    enum { PB = 2, PT = 12, NH = 2, KV = 1, HS = 8, C = 8, V = 10, MAXT = 16 };
    static const int lens[PB * 3] = {5, 4, 3, 1, 10, 1};
    int32_t pos[PB * PT], inp[PB * PT];
    positions(pos, lens, 3, PB, PT);
    for (int i = 0; i < PB * PT; i++) inp[i] = (i * 7 + 1) % V;
    /* RoPE */
    int ld = (NH + 2 * KV) * HS;
    double inv[HS / 2];
    rope_inv_freq(inv, HS, 10000.0);
    float cs[MAXT * HS];
    rope_table(cs, MAXT, HS, inv);
    float *x = randv((size_t)PB * PT * ld, 50), *y = malloc(sizeof(float) * PB * PT * ld);
    memcpy(y, x, sizeof(float) * PB * PT * ld);
    rope_forward(y, cs, pos, PB, PT, NH, KV, HS, 0, 2);
    int bad = 0;
    for (int i = 0; i < PB * PT; i++) {
        float row[(NH + 2 * KV) * HS];
        memcpy(row, x + (size_t)i * ld, sizeof row);
        rope_forward(row, cs, NULL, 1, 1, NH, KV, HS, pos[i], 1);
        bad += memcmp(row, y + (size_t)i * ld, sizeof row) != 0;
    }
    rope_backward(y, cs, pos, PB, PT, NH, KV, HS, 0, 2);
    double e = tu_rel_err_f(y, x, (size_t)PB * PT * ld);
    tu_check(bad == 0 && e < 1e-6, "rope with positions = each row at pos0 = its position (bit for bit); backward inverts",
             "%d rows differ, backward(forward) rel %.3g", bad, e);
    /* GPT-2 embedding */
    float *wte = randv((size_t)V * C, 51), *wpe = randv((size_t)MAXT * C, 52), *dout = randv((size_t)PB * PT * C, 53);
    float *out = malloc(sizeof(float) * PB * PT * C), *dwte = calloc((size_t)V * C, 4), *dwpe = calloc((size_t)MAXT * C, 4);
    Dropout off = {0};
    encoder_forward(out, inp, pos, wte, wpe, PB, PT, C, off, 2);
    encoder_backward(dwte, dwpe, dout, inp, pos, PB, PT, C, off, 2);
    double rte[V * C] = {0}, rpe[MAXT * C] = {0};
    bad = 0;
    for (int i = 0; i < PB * PT; i++)
        for (int c = 0; c < C; c++) {
            bad += out[i * C + c] != wte[inp[i] * C + c] + wpe[pos[i] * C + c];
            rte[inp[i] * C + c] += dout[i * C + c], rpe[pos[i] * C + c] += dout[i * C + c];
        }
    double e1 = tu_rel_err_fd(dwte, rte, (size_t)V * C), e2 = tu_rel_err_fd(dwpe, rpe, (size_t)MAXT * C);
    tu_check(bad == 0 && e1 < 1e-6 && e2 < 1e-6, "encoder with positions: wte[tok] + wpe[pos]; backward = float64 scatter",
             "%d outputs differ, dwte rel %.3g, dwpe rel %.3g", bad, e1, e2);
    free(x), free(y), free(wte), free(wpe), free(dout), free(out), free(dwte), free(dwpe);
    /* doc_positions from tokens: the EOT belongs to the document it closes */
    int32_t toks[8] = {5, EOT, 6, 7, EOT, EOT, 1, 2}, p8[8], want[8] = {0, 1, 0, 1, 2, 0, 0, 1};
    doc_positions(p8, toks, 1, 8, EOT);
    tu_check(!memcmp(p8, want, sizeof want), "doc_positions: restart after each EOT, EOT closes its document",
             "%d %d %d %d %d %d %d %d", p8[0], p8[1], p8[2], p8[3], p8[4], p8[5], p8[6], p8[7]);
}

/* ---------------------------------------------------------------------------------------------- */
/* 3. FLOPs                                                                                        */
/* ---------------------------------------------------------------------------------------------- */

static void flops(void) {
    ModelConfig c = {.n_layer = 6, .n_head = 6, .n_embd = 384, .vocab = 50257, .max_seq = 1024};
    Err e;
    if (model_config_validate(&c, &e) != ST_OK) {
        tu_check(0, "flops config", "%s", e.msg);
        return;
    }
    /* The test batch: Σ L² / (B·T) by hand. */
    int32_t inp[B * T], tgt[B * T];
    make_batch(50, inp, tgt);
    double want = 0;
    for (int b = 0; b < B; b++)
        for (int d = 0; d < NDOC; d++) want += (double)LENS[b][d] * LENS[b][d];
    want /= (double)B * T;
    double span = layout_doc_span(inp, B, T, EOT);
    int32_t none[T];
    for (int t = 0; t < T; t++) none[t] = 7;
    double s1 = layout_doc_span(none, 1, T, EOT);
    tu_check(span == want && s1 == T, "layout_doc_span = Σ L_i² / (B·T) (docs 9|14|9, 20|1|11); T without EOT",
             "%.17g vs %.17g by hand; no EOT %.17g (want %d)", span, want, s1, T);
    /* Closed form: 6·(12·L·C² + V·C) + 12·L·C·S; span T = layout_flops_per_token exactly. */
    double L = c.n_layer, C = c.n_embd, V = c.vocab;
    int bad = 0;
    double worst = 0;
    for (double S = 1; S <= 1024; S *= 2) {
        double f = layout_flops_per_token_span(&c, S), cf = 6.0 * (12.0 * L * C * C + V * C) + 12.0 * L * C * S;
        double rel = fabs(f - cf) / cf;
        worst = rel > worst ? rel : worst;
        bad += rel > 1e-15;
    }
    int exact = layout_flops_per_token_span(&c, 1024) == layout_flops_per_token(&c, 1024);
    tu_check(!bad && exact, "layout_flops_per_token_span = 6(12LC²+VC) + 12LCS; span T = layout_flops_per_token",
             "worst rel %.3g over S = 1..1024; span T %s", worst, exact ? "identical" : "differs");
    /* plan: --doc-mask --mean-doc-len 256 at T 1024 prices span 256; 4096 is capped at T; control: no mask. */
    PlanInput in = plan_default_input();
    plan_model_from_config(&in.model, &c);
    in.seq_len = 1024, in.micro_batch = 1;
    PlanResult r0, r1, r2;
    Status a = plan_predict_step(&in, &r0, &e);
    in.doc_mask = 1, in.mean_doc_len = 256;
    Status b = plan_predict_step(&in, &r1, &e);
    in.mean_doc_len = 4096;
    Status d = plan_predict_step(&in, &r2, &e);
    int ok = a == ST_OK && b == ST_OK && d == ST_OK;
    tu_check(ok && r1.compute.fpt == layout_flops_per_token_span(&c, 256) && r2.compute.fpt == r0.compute.fpt &&
                 r0.compute.fpt == layout_flops_per_token(&c, 1024),
             "plan --doc-mask --mean-doc-len: fpt at span min(len, T) (256: the span formula; 4096: = unmasked)",
             "fpt %.10g (want %.10g), %.10g and unmasked %.10g", ok ? r1.compute.fpt : 0,
             layout_flops_per_token_span(&c, 256), ok ? r2.compute.fpt : 0, ok ? r0.compute.fpt : 0);
    tu_check(ok && r1.compute.fpt < r0.compute.fpt - 1e6,
             "control: plan's document-masked price is below the unmasked one (the flag is not ignored)",
             "%.10g vs %.10g", ok ? r1.compute.fpt : 0, ok ? r0.compute.fpt : 0);
}

int main(void) {
    flops();
    position_kernels();
    attention_case(0, 0.0f);
    attention_case(0, 0.1f);
    attention_case(1, 0.0f);
    /* Rows 576..639 of row 0 hold a document starting at 0 and one starting at 600: the query block
     * walks key blocks 0, 256, 512, and the second document's rows start past the first two. */
    static const int long_lens[2 * 2] = {600, 40, 1, 639};
    attention_case_docs(1, 0.0f, 640, long_lens, 2);
    attention_case_docs(0, 0.0f, 640, long_lens, 2);
    ModelConfig gpt2 = {.n_layer = 2, .n_head = 4, .n_embd = 32, .vocab = 50, .max_seq = 32};
    model_case("gpt2", gpt2);
    ModelConfig llama = {.n_layer = 2, .n_head = 4, .n_embd = 32, .vocab = 50, .max_seq = 32, .arch = ARCH_LLAMA,
                         .n_kv_head = 2};
    model_case("llama-gqa", llama);
    kv_case("gpt2", gpt2);
    kv_case("llama-gqa", llama);
    return tu_exit();
}
