/* infer.c — one-token forward with a KV cache, the sliding window over a history, the sampler. */
#include "model/infer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/backend.h"
#include "model/kernels.h"

Status kv_init(KvCache *kv, const Gpt *g, Err *err) {
    memset(kv, 0, sizeof *kv);
    const ModelConfig *c = &g->w.cfg;
    /* The cache holds the KV heads only (Llama's grouped-query attention; GPT-2: KV = NH). */
    size_t C = c->n_embd, hs = C / (size_t)c->n_head, kvw = (size_t)c->n_kv_head * hs;
    size_t cache = (size_t)c->n_layer * c->max_seq * kvw, H = (size_t)c->ffn * (c->arch == ARCH_LLAMA ? 2 : 1);
    kv->cap = c->max_seq;
    kv->k = calloc(cache, sizeof(float));
    kv->v = calloc(cache, sizeof(float));
    kv->x = calloc(C, sizeof(float)), kv->ln = calloc(C, sizeof(float));
    kv->qkv = calloc((size_t)layout_qkv_width(c), sizeof(float));
    kv->att = calloc(C, sizeof(float)), kv->y = calloc(C, sizeof(float));
    kv->h = calloc(H, sizeof(float)), kv->hg = calloc(H, sizeof(float));
    if (c->arch == ARCH_LLAMA) {
        double *inv_freq = malloc(hs / 2 * sizeof(double)); /* the training forward's frequencies */
        if (!(kv->rope = malloc((size_t)c->max_seq * hs * sizeof(float))) || !inv_freq)
            return free(inv_freq), kv_free(kv), err_set(err, ST_ERR_RUNTIME, "out of memory for the RoPE table");
        model_rope_inv_freq(c, inv_freq);
        g->be->rope_table(kv->rope, c->max_seq, (int)hs, inv_freq);
        free(inv_freq);
    }
    kv->scores = calloc((size_t)c->max_seq, sizeof(float));
    kv->logits = calloc((size_t)c->vocab_padded, sizeof(float));
    if (!kv->k || !kv->v || !kv->x || !kv->ln || !kv->qkv || !kv->att || !kv->y || !kv->h || !kv->hg ||
        !kv->scores || !kv->logits) {
        kv_free(kv);
        return err_set(err, ST_ERR_RUNTIME, "out of memory for the KV cache");
    }
    return ST_OK;
}

void kv_free(KvCache *kv) {
    free(kv->k), free(kv->v), free(kv->x), free(kv->ln), free(kv->qkv), free(kv->att);
    free(kv->y), free(kv->h), free(kv->hg), free(kv->scores), free(kv->logits), free(kv->rope);
    memset(kv, 0, sizeof *kv);
}

/* x[0, n) *= a: muP's input and logit multipliers, the training forward's (gpt.c), in the same
 * place of the computation so the cache's logits equal the forward's. */
static void scale_vec(float *x, int n, float a) {
    if (a != 1.0f)
        for (int i = 0; i < n; i++) x[i] *= a;
}

/* Causal attention of the query heads in q against cached K, V rows 0..pos (kvw floats per row):
 * query head h reads KV head h / (NH / KV). */
static void attend(KvCache *kv, const float *q, const float *K, const float *V, int pos, int NH, int KV, int hs,
                   float scale) {
    int G = NH / KV, kvw = KV * hs;
    for (int h = 0; h < NH; h++) {
        const float *qh = q + h * hs;
        int off = (h / G) * hs;
        float mx = -INFINITY, s = 0;
        for (int j = 0; j <= pos; j++) {
            const float *k = K + (size_t)j * kvw + off;
            float d = 0;
            for (int i = 0; i < hs; i++) d += qh[i] * k[i];
            kv->scores[j] = d * scale;
            mx = kv->scores[j] > mx ? kv->scores[j] : mx;
        }
        for (int j = 0; j <= pos; j++) s += kv->scores[j] = expf(kv->scores[j] - mx);
        float *y = kv->att + h * hs;
        memset(y, 0, hs * sizeof(float));
        for (int j = 0; j <= pos; j++) {
            const float *v = V + (size_t)j * kvw + off;
            float w = kv->scores[j] / s;
            for (int i = 0; i < hs; i++) y[i] += w * v[i];
        }
    }
}

/* Llama's step: RMSNorm, q|k|v, RoPE at the cache position, GQA over the cached KV heads, SwiGLU. */
static void llama_step(const Gpt *g, KvCache *kv, int32_t token) {
    const ModelConfig *c = &g->w.cfg;
    int C = c->n_embd, NH = c->n_head, KV = c->n_kv_head, hs = C / NH, F = c->ffn, pos = kv->len, nt = 1;
    int kvw = KV * hs, Q = layout_qkv_width(c);
    float rstd, eps = c->norm_eps;
    memcpy(kv->x, g->w.p.wte + (size_t)token * C, C * sizeof(float));
    scale_vec(kv->x, C, model_input_mult(c));
    for (int l = 0; l < c->n_layer; l++) {
        const BlockParams *p = &g->w.p.blocks[l];
        float *K = kv->k + ((size_t)l * kv->cap) * kvw, *V = kv->v + ((size_t)l * kv->cap) * kvw;
        g->be->rmsnorm_forward(kv->ln, &rstd, kv->x, p->ln1w, 1, C, eps, nt);
        g->be->matmul_forward(kv->qkv, kv->ln, p->qkvw, NULL, 1, C, Q, nt);
        g->be->rope_forward(kv->qkv, kv->rope, NULL, 1, 1, NH, KV, hs, pos, nt);
        memcpy(K + (size_t)pos * kvw, kv->qkv + C, kvw * sizeof(float));
        memcpy(V + (size_t)pos * kvw, kv->qkv + C + kvw, kvw * sizeof(float));
        attend(kv, kv->qkv, K, V, pos, NH, KV, hs, model_attn_scale(c));
        g->be->matmul_forward(kv->y, kv->att, p->attprojw, NULL, 1, C, C, nt);
        for (int i = 0; i < C; i++) kv->x[i] += kv->y[i];
        g->be->rmsnorm_forward(kv->ln, &rstd, kv->x, p->ln2w, 1, C, eps, nt);
        g->be->matmul_forward(kv->h, kv->ln, p->fcw, NULL, 1, C, 2 * F, nt);
        g->be->swiglu_forward(kv->hg, kv->h, 1, F, nt);
        g->be->matmul_forward(kv->y, kv->hg, p->fcprojw, NULL, 1, F, C, nt);
        for (int i = 0; i < C; i++) kv->x[i] += kv->y[i];
    }
    g->be->rmsnorm_forward(kv->ln, &rstd, kv->x, g->w.p.lnfw, 1, C, eps, nt);
    scale_vec(kv->ln, C, model_logit_mult(c));
    g->be->matmul_forward(kv->logits, kv->ln, g->w.p.head, NULL, 1, C, c->vocab, nt);
    kv->len++;
}

void infer_step(const Gpt *g, KvCache *kv, int32_t token) {
    const ModelConfig *c = &g->w.cfg;
    if (c->arch == ARCH_LLAMA) {
        ST_CHECK(kv->len < kv->cap && token >= 0 && token < c->vocab);
        llama_step(g, kv, token);
        return;
    }
    int C = c->n_embd, NH = c->n_head, hs = C / NH, pos = kv->len, nt = 1;
    ST_CHECK(pos < kv->cap && token >= 0 && token < c->vocab);
    float mean, rstd;
    Dropout off = {0};
    g->be->encoder_forward(kv->x, &token, NULL, g->w.p.wte, g->w.p.wpe + (size_t)pos * C, 1, 1, C, off, nt);
    scale_vec(kv->x, C, model_input_mult(c));
    for (int l = 0; l < c->n_layer; l++) {
        const BlockParams *p = &g->w.p.blocks[l];
        float *K = kv->k + ((size_t)l * kv->cap) * C, *V = kv->v + ((size_t)l * kv->cap) * C;
        g->be->layernorm_forward(kv->ln, &mean, &rstd, kv->x, p->ln1w, p->ln1b, 1, C, nt);
        g->be->matmul_forward(kv->qkv, kv->ln, p->qkvw, p->qkvb, 1, C, 3 * C, nt);
        memcpy(K + (size_t)pos * C, kv->qkv + C, C * sizeof(float));
        memcpy(V + (size_t)pos * C, kv->qkv + 2 * C, C * sizeof(float));
        attend(kv, kv->qkv, K, V, pos, NH, NH, hs, model_attn_scale(c));
        g->be->matmul_forward(kv->y, kv->att, p->attprojw, p->attprojb, 1, C, C, nt);
        for (int i = 0; i < C; i++) kv->x[i] += kv->y[i];
        g->be->layernorm_forward(kv->ln, &mean, &rstd, kv->x, p->ln2w, p->ln2b, 1, C, nt);
        g->be->matmul_forward(kv->h, kv->ln, p->fcw, p->fcb, 1, C, 4 * C, nt);
        g->be->gelu_forward(kv->hg, kv->h, (size_t)4 * C, nt);
        g->be->matmul_forward(kv->y, kv->hg, p->fcprojw, p->fcprojb, 1, 4 * C, C, nt);
        for (int i = 0; i < C; i++) kv->x[i] += kv->y[i];
    }
    g->be->layernorm_forward(kv->ln, &mean, &rstd, kv->x, g->w.p.lnfw, g->w.p.lnfb, 1, C, nt);
    scale_vec(kv->ln, C, model_logit_mult(c));
    g->be->matmul_forward(kv->logits, kv->ln, g->w.p.wte, NULL, 1, C, c->vocab, nt);
    kv->len++;
}

Status infer_status(const Gpt *g, Err *err) { return g->be->take_error(err); }

Status infer_feed(const Gpt *g, KvCache *kv, const int32_t *hist, size_t n, Err *err) {
    ST_CHECK(n > kv->start + (size_t)kv->len);
    const ModelConfig *c = &g->w.cfg;
    if (c->doc_mask) {
        /* Document masking: the next logits are those of the last token's document, which starts
         * after the last EOT before it. A cached window reaching into an earlier document restarts
         * at that start (positions from 0), as the masked forward computes them. */
        size_t ds = 0;
        for (size_t j = n - 1; j > kv->start; j--)
            if (hist[j - 1] == c->doc_eot) {
                ds = j;
                break;
            }
        if (ds > kv->start) kv->start = ds, kv->len = 0;
    }
    if (n - kv->start > (size_t)kv->cap) {
        size_t keep = kv->cap > 1 ? (size_t)kv->cap / 2 : 1;
        kv->start = n - keep, kv->len = 0;
    }
    for (size_t i = kv->start + (size_t)kv->len; i < n; i++) infer_step(g, kv, hist[i]);
    return infer_status(g, err);
}

int infer_pick(const float *logits, int V, float temperature, int top_k, float u, float *work) {
    int best = 0;
    for (int i = 1; i < V; i++) best = logits[i] > logits[best] ? i : best;
    if (temperature <= 0) return best;
    float kth = -INFINITY;
    if (top_k > 0 && top_k < V) {
        memcpy(work, logits, sizeof(float) * V);
        /* k-th largest by partial selection (V is small enough for this per token). */
        for (int r = 0; r < top_k; r++) {
            int m = r;
            for (int i = r + 1; i < V; i++) m = work[i] > work[m] ? i : m;
            float t = work[r];
            work[r] = work[m], work[m] = t;
        }
        kth = work[top_k - 1];
    }
    double s = 0;
    for (int i = 0; i < V; i++) s += logits[i] >= kth ? exp((logits[i] - logits[best]) / temperature) : 0.0;
    double target = u * s, acc = 0;
    for (int i = 0; i < V; i++) {
        if (logits[i] < kth) continue;
        acc += exp((logits[i] - logits[best]) / temperature);
        if (acc >= target) return i;
    }
    return best;
}
