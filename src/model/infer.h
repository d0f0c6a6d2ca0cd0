/* infer.h — autoregressive inference with a KV cache (one token at a time, linear in length).
 *
 * Uses the trained parameters of a Gpt (its views) and its own small buffers; the Gpt's training
 * activations are not touched. */
#ifndef ST_MODEL_INFER_H
#define ST_MODEL_INFER_H

#include <stdint.h>

#include "model/gpt.h"

typedef struct {
    int len;          /* positions cached so far */
    int cap;          /* maxT */
    float *k, *v;     /* (L, maxT, C) each */
    float *x, *ln, *qkv, *att, *y, *h, *hg, *scores; /* one-token buffers */
    float *logits;    /* (Vp) */
} KvCache;

Status kv_init(KvCache *kv, const Gpt *g, Err *err);
void kv_free(KvCache *kv);

/* Feeds `token` at position kv->len (< maxT) and writes the V real logits to kv->logits. */
void infer_step(const Gpt *g, KvCache *kv, int32_t token);

#endif
