/* infer.h — autoregressive inference with a KV cache (one token at a time, linear in length).
 *
 * Uses the trained parameters of a Gpt (its fp32 views) and its own small buffers; the Gpt's
 * training activations are not touched.
 *
 * The cache always represents one window of the token history, hist[start .. start + len), at
 * positions 0 .. len-1, and its logits equal those of a full forward pass (gpt_logits) over that
 * window. When the window is full (maxT tokens) and another token comes, infer_feed restarts it on
 * the last maxT/2 tokens, recomputed once: exact (every step is a full forward over a window of
 * maxT/2 .. maxT tokens), and amortised to about one extra token step per generated token. Shifting
 * the cached K/V rows instead would be cheaper but is no forward pass at all: the cached keys
 * carry the position embeddings of the positions they were computed at (test_sample shows the
 * difference). */
#ifndef ST_MODEL_INFER_H
#define ST_MODEL_INFER_H

#include <stddef.h>
#include <stdint.h>

#include "model/gpt.h"

/* The cache and the one-token buffers live in the model's backend memory (g->be->alloc, counted
 * in no MemStats: they are not the training layout's), so on a device backend (CUDA) the whole
 * step runs there and only the token goes in (from_host) and the logits come out (to_host). */
typedef struct {
    int len;          /* positions cached so far */
    int cap;          /* maxT */
    size_t start;     /* history index of the token at position 0 (infer_feed) */
    /* ---- backend memory ---- */
    float *k, *v;     /* (L, maxT, KV·hs) each: the KV heads only (GPT-2: C) */
    float *rope;      /* Llama: the RoPE table of positions [0, maxT) */
    float *x, *ln, *qkv, *att, *y, *h, *hg; /* one-token buffers */
    float *scores;    /* (NH, maxT): attention_decode's scratch */
    float *stat;      /* 2: the norm's mean and rstd (not used after the step) */
    float *dlogits;   /* (Vp): the head's output */
    int32_t *tok;     /* 1: the token fed */
    /* ---- host memory ---- */
    float *logits;    /* (Vp): the V real logits of the last step, copied out of dlogits */
    const struct Backend *be; /* the backend the buffers above came from (kv_free) */
    size_t bytes[14];  /* each backend buffer's size, in kv_init's order (kv_free) */
    int test_host_read; /* test fault (Faults.device_bypass): the logits copied out by memcpy instead of
                           to_host, which the emulated device must stop with a signal (test_device_sample) */
} KvCache;

/* Allocates the cache for g's model through g's backend. ST_ERR_RUNTIME when out of memory. */
Status kv_init(KvCache *kv, const Gpt *g, Err *err);
/* Frees what kv_init allocated; safe on a zeroed or half-built cache. */
void kv_free(KvCache *kv);

/* Feeds `token` at position kv->len (< maxT) and writes the V real logits to kv->logits. */
void infer_step(const Gpt *g, KvCache *kv, int32_t token);

/* Makes kv->logits the next-token logits after the history hist[0 .. n): feeds the tokens not yet
 * cached (n > kv->start + kv->len: at least one, e.g. the whole prompt on the first call, then the
 * token just picked), restarting the window on the last maxT/2 tokens when they do not fit (see
 * the file comment). Afterwards the cache holds hist[kv->start .. n). ST_ERR_RUNTIME when a GEMM
 * failed on the way (its message names the shape, matmul.h): the logits are garbage then. */
Status infer_feed(const Gpt *g, KvCache *kv, const int32_t *hist, size_t n, Err *err);
/* Under document masking (cfg.doc_mask) the window never reaches before the last token's document:
 * a history with an EOT restarts the cache after it (docs/doc-mask.md), so the logits are those of
 * the masked forward over the history (test_doc_mask). */

/* The first GEMM failure since the last call (after infer_step), as infer_feed reports it. */
Status infer_status(const Gpt *g, Err *err);

/* The next token from V logits: the argmax (greedy) when temperature is 0, else a draw from
 * softmax(logits / temperature) restricted to the top_k largest (0 = all) with uniform u in [0, 1).
 * top_k 1 is greedy too. work: V floats of scratch (may be NULL when top_k is 0 or >= V). */
int infer_pick(const float *logits, int V, float temperature, int top_k, float u, float *work);

#endif
