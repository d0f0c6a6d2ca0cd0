/* infer.c — one-token forward with a KV cache, the sliding window over a history, the sampler.
 * Every step runs through the model's backend table on backend memory (the cache included), so the
 * same code samples on the CPU and on a device; the sampler (infer_pick) reads host logits. */
#include "model/infer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/backend.h"
#include "model/kernels.h"

/* The backend buffers of a cache, in one order: kv_init allocates and kv_free frees them by it. */
static float **kv_slot(KvCache *kv, int i) {
    float **slot[] = {&kv->k, &kv->v, &kv->rope, &kv->x, &kv->ln, &kv->qkv, &kv->att,
                      &kv->y, &kv->h, &kv->hg, &kv->scores, &kv->stat, &kv->dlogits, (float **)&kv->tok};
    _Static_assert(sizeof slot / sizeof slot[0] == sizeof kv->bytes / sizeof kv->bytes[0], "one size per buffer");
    return slot[i];
}

Status kv_init(KvCache *kv, const Gpt *g, Err *err) {
    memset(kv, 0, sizeof *kv);
    const ModelConfig *c = &g->w.cfg;
    const Backend *be = g->be;
    /* The cache holds the KV heads only (Llama's grouped-query attention; GPT-2: KV = NH). */
    size_t C = c->n_embd, hs = C / (size_t)c->n_head, kvw = (size_t)c->n_kv_head * hs, T = (size_t)c->max_seq;
    size_t cache = (size_t)c->n_layer * T * kvw, H = (size_t)c->ffn * (c->arch == ARCH_LLAMA ? 2 : 1);
    size_t floats[14] = {cache, cache, c->arch == ARCH_LLAMA ? T * hs : 0, C, C, (size_t)layout_qkv_width(c), C,
                         C, H, H, (size_t)c->n_head * T, 2, (size_t)c->vocab_padded, 1};
    kv->cap = c->max_seq;
    kv->be = be;
    for (int i = 0; i < 14; i++) {
        kv->bytes[i] = floats[i] * sizeof(float); /* the token: one int32, the size of a float */
        if (floats[i] && !(*kv_slot(kv, i) = be->alloc(NULL, MEM_ACTIVATIONS, kv->bytes[i]))) {
            kv_free(kv);
            return err_set(err, ST_ERR_RUNTIME, "out of memory for the KV cache (%zu bytes on %s)", kv->bytes[i],
                           be->name);
        }
    }
    if (!(kv->logits = calloc((size_t)c->vocab_padded, sizeof(float)))) {
        kv_free(kv);
        return err_set(err, ST_ERR_RUNTIME, "out of memory for the logits");
    }
    if (c->arch == ARCH_LLAMA) {
        double *inv_freq = malloc(hs / 2 * sizeof(double)); /* the training forward's frequencies */
        if (!inv_freq) return kv_free(kv), err_set(err, ST_ERR_RUNTIME, "out of memory for the RoPE table");
        model_rope_inv_freq(c, inv_freq);
        be->rope_table(kv->rope, c->max_seq, (int)hs, inv_freq);
        free(inv_freq);
    }
    return ST_OK;
}

void kv_free(KvCache *kv) {
    if (kv->be)
        for (int i = 0; i < 14; i++) kv->be->free(NULL, MEM_ACTIVATIONS, *kv_slot(kv, i), kv->bytes[i]);
    free(kv->logits);
    memset(kv, 0, sizeof *kv);
}

/* x[0, n) *= a: muP's input and logit multipliers, the training forward's (gpt.c), in the same
 * place of the computation so the cache's logits equal the forward's. */
static void scale_vec(const Backend *be, float *x, int n, float a) {
    if (a != 1.0f) be->scale_inplace(x, (size_t)n, a, 1);
}

/* The cached K, V rows of the token at kv->len from q|k|v (kvw floats each at offsets C and C + kvw). */
static void cache_kv(const Backend *be, KvCache *kv, int l, int C, int kvw) {
    size_t row = ((size_t)l * kv->cap + (size_t)kv->len) * kvw;
    be->copy(kv->k + row, kv->qkv + C, (size_t)kvw * sizeof(float));
    be->copy(kv->v + row, kv->qkv + C + kvw, (size_t)kvw * sizeof(float));
}

/* The V real logits out of the backend into kv->logits. */
static void logits_out(const Backend *be, KvCache *kv, int V) {
    if (kv->test_host_read) memcpy(kv->logits, kv->dlogits, (size_t)V * sizeof(float)); /* the fault: no to_host */
    else be->to_host(kv->logits, kv->dlogits, (size_t)V * sizeof(float));
}

/* Llama's step: RMSNorm, q|k|v, RoPE at the cache position, GQA over the cached KV heads, SwiGLU. */
static void llama_step(const Gpt *g, KvCache *kv, int32_t token) {
    const ModelConfig *c = &g->w.cfg;
    const Backend *be = g->be;
    int C = c->n_embd, NH = c->n_head, KV = c->n_kv_head, hs = C / NH, F = c->ffn, pos = kv->len, nt = 1;
    int kvw = KV * hs, Q = layout_qkv_width(c);
    float eps = c->norm_eps, *rstd = kv->stat;
    be->copy(kv->x, g->w.p.wte + (size_t)token * C, C * sizeof(float));
    scale_vec(be, kv->x, C, model_input_mult(c));
    for (int l = 0; l < c->n_layer; l++) {
        const BlockParams *p = &g->w.p.blocks[l];
        float *K = kv->k + ((size_t)l * kv->cap) * kvw, *V = kv->v + ((size_t)l * kv->cap) * kvw;
        be->rmsnorm_forward(kv->ln, rstd, kv->x, p->ln1w, 1, C, eps, nt);
        be->matmul_forward(kv->qkv, kv->ln, p->qkvw, NULL, 1, C, Q, nt);
        be->rope_forward(kv->qkv, kv->rope, NULL, 1, 1, NH, KV, hs, pos, nt);
        cache_kv(be, kv, l, C, kvw);
        be->attention_decode(kv->att, kv->scores, kv->qkv, K, V, pos, NH, KV, hs, model_attn_scale(c), nt);
        be->matmul_forward(kv->y, kv->att, p->attprojw, NULL, 1, C, C, nt);
        be->add_or_set(kv->x, kv->y, (size_t)C, 1);
        be->rmsnorm_forward(kv->ln, rstd, kv->x, p->ln2w, 1, C, eps, nt);
        be->matmul_forward(kv->h, kv->ln, p->fcw, NULL, 1, C, 2 * F, nt);
        be->swiglu_forward(kv->hg, kv->h, 1, F, nt);
        be->matmul_forward(kv->y, kv->hg, p->fcprojw, NULL, 1, F, C, nt);
        be->add_or_set(kv->x, kv->y, (size_t)C, 1);
    }
    be->rmsnorm_forward(kv->ln, rstd, kv->x, g->w.p.lnfw, 1, C, eps, nt);
    scale_vec(be, kv->ln, C, model_logit_mult(c));
    be->matmul_forward(kv->dlogits, kv->ln, g->w.p.head, NULL, 1, C, c->vocab, nt);
    logits_out(be, kv, c->vocab);
    kv->len++;
}

void infer_step(const Gpt *g, KvCache *kv, int32_t token) {
    const ModelConfig *c = &g->w.cfg;
    if (c->arch == ARCH_LLAMA) {
        ST_CHECK(kv->len < kv->cap && token >= 0 && token < c->vocab);
        llama_step(g, kv, token);
        return;
    }
    const Backend *be = g->be;
    int C = c->n_embd, NH = c->n_head, hs = C / NH, pos = kv->len, nt = 1;
    ST_CHECK(pos < kv->cap && token >= 0 && token < c->vocab);
    float *mean = kv->stat, *rstd = kv->stat + 1;
    Dropout off = {0};
    be->from_host(kv->tok, &token, sizeof token);
    be->encoder_forward(kv->x, kv->tok, NULL, g->w.p.wte, g->w.p.wpe + (size_t)pos * C, 1, 1, C, off, nt);
    scale_vec(be, kv->x, C, model_input_mult(c));
    for (int l = 0; l < c->n_layer; l++) {
        const BlockParams *p = &g->w.p.blocks[l];
        float *K = kv->k + ((size_t)l * kv->cap) * C, *V = kv->v + ((size_t)l * kv->cap) * C;
        be->layernorm_forward(kv->ln, mean, rstd, kv->x, p->ln1w, p->ln1b, 1, C, nt);
        be->matmul_forward(kv->qkv, kv->ln, p->qkvw, p->qkvb, 1, C, 3 * C, nt);
        cache_kv(be, kv, l, C, C);
        be->attention_decode(kv->att, kv->scores, kv->qkv, K, V, pos, NH, NH, hs, model_attn_scale(c), nt);
        be->matmul_forward(kv->y, kv->att, p->attprojw, p->attprojb, 1, C, C, nt);
        be->add_or_set(kv->x, kv->y, (size_t)C, 1);
        be->layernorm_forward(kv->ln, mean, rstd, kv->x, p->ln2w, p->ln2b, 1, C, nt);
        be->matmul_forward(kv->h, kv->ln, p->fcw, p->fcb, 1, C, 4 * C, nt);
        be->gelu_forward(kv->hg, kv->h, (size_t)4 * C, nt);
        be->matmul_forward(kv->y, kv->hg, p->fcprojw, p->fcprojb, 1, 4 * C, C, nt);
        be->add_or_set(kv->x, kv->y, (size_t)C, 1);
    }
    be->layernorm_forward(kv->ln, mean, rstd, kv->x, g->w.p.lnfw, g->w.p.lnfb, 1, C, nt);
    scale_vec(be, kv->ln, C, model_logit_mult(c));
    be->matmul_forward(kv->dlogits, kv->ln, g->w.p.wte, NULL, 1, C, c->vocab, nt);
    logits_out(be, kv, c->vocab);
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
