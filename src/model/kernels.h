/* kernels.h — the layer kernels of the GPT, as forward/backward pairs.
 *
 * Conventions (STYLE.md): inputs are const; no allocation, no hidden state; scratch is passed in.
 * Backward kernels ADD (+=) into parameter gradients when their `acc` argument is 1 and overwrite
 * them (=) when it is 0 (the first micro-batch of a step then needs no zeroed buffer: one write
 * instead of a memset, a read and a write); where noted they also add into the residual-stream
 * gradient, always; every other output is overwritten. N = B·T rows. Every reduction over rows uses a
 * fixed partition (64-row chunks summed in order, or one thread per output column), so results
 * do not depend on the OpenMP thread count. `nt` is the number of OpenMP threads to use. */
#ifndef ST_MODEL_KERNELS_H
#define ST_MODEL_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#define KERNEL_ROW_CHUNK 64

/* Dropout is regenerated from a counter-based RNG instead of stored: element i of site `stream`
 * is kept when uniform(seed, stream, i) >= p, and kept values are scaled by 1/(1-p). */
typedef struct {
    float p;        /* 0 = off */
    uint64_t seed;
    uint64_t stream;
    /* Where a slice sits in the whole tensor, so every tensor-parallel rank draws the masks one
     * process would draw for the same elements: element i of the slice is element i + offset
     * (sequence parallelism: the rows held), and attention's head h is head head0 + h of `heads`
     * (0: the heads passed). */
    uint64_t offset;
    int head0, heads;
} Dropout;

/* Document masking (docs/doc-mask.md). The position kernels (encoder_*, rope_*) and attention
 * take `pos`, NULL or B·T int32: pos[b·T + t] is token t's position inside its document within
 * row b (0 at a document's first token, then +1 per token). Token t's document starts at row
 * index t − pos[b·T + t]; attention then lets query t see keys s with t − pos[b·T + t] <= s <= t
 * (causal and block-diagonal), by bounding the key loop: no T×T mask exists. pos = NULL: every
 * row is one document (positions t, plain causal attention), bit for bit the kernels without the
 * argument. doc_positions (gpt.c's caller of these) fills pos from the tokens. */

/* The document positions of the (B, T) tokens inp: pos[b·T + t] = 0 at t = 0 and after an `eot`
 * token (inp[b·T + t − 1] == eot), else pos[b·T + t − 1] + 1. Host memory. */
void doc_positions(int32_t *pos, const int32_t *inp, int B, int T, int32_t eot);

/* out (N=B·T, C) = drop(wte[inp] + wpe[p]), p = t (pos NULL) or pos[b·T + t]. */
void encoder_forward(float *out, const int32_t *inp, const int32_t *pos, const float *wte, const float *wpe, int B,
                     int T, int C, Dropout d, int nt);
/* dwte[inp] += drop'(dout), dwpe[p] += sum over the rows at position p (row order: the sum order
 * is independent of nt). */
void encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp, const int32_t *pos, int B,
                      int T, int C, Dropout d, int nt);

/* Vocabulary-parallel embedding (tensor parallelism): wte holds vocabulary rows [v0, v0 + vn).
 * out (N, C) = (inp in range ? wte[inp - v0] : 0) + (wpe ? wpe[t] : 0); no dropout (the sum over
 * ranks comes first). */
void encoder_forward_vp(float *out, const int32_t *inp, const int32_t *pos, const float *wte, const float *wpe,
                        int B, int T, int C, int v0, int vn, int nt);
/* dwte[inp - v0] += dout for inp in range; dwpe[t] += sum over b (dwpe NULL: skipped). */
void encoder_backward_vp(float *dwte, float *dwpe, const float *dout, const int32_t *inp, const int32_t *pos, int B,
                         int T, int C, int v0, int vn, int nt);

/* out (N, C) = LN(inp) · w + b; saves mean, rstd (N). eps 1e-5. */
void layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                       int N, int C, int nt);
/* res = a + drop(b) (the residual add) and out = LN(res) · w + bias in one pass over the rows, each
 * row normalised while it is still in L1: bit-identical to residual_forward then layernorm_forward,
 * with one read of res fewer. res may alias a. */
void residual_layernorm_forward(float *res, float *out, float *mean, float *rstd, const float *a, const float *b,
                                Dropout d, const float *w, const float *bias, int N, int C, int nt);
/* The same with the LayerNorm output rounded to bf16 (out: N × C bf16). */
void residual_layernorm_forward_bf16(float *res, uint16_t *out, float *mean, float *rstd, const float *a,
                                     const float *b, Dropout d, const float *w, const float *bias, int N, int C,
                                     int nt);
/* The same rounded to bf16 (the next GEMM's operand): out (N, C) bf16; bit-identical to
 * layernorm_forward then cast_bf16. */
void layernorm_forward_bf16(uint16_t *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                            int N, int C, int nt);
/* dinp += ..., dw += ..., db += ... (acc = 0: dw, db are overwritten instead); scratch holds
 * ceil(N/64)·2C floats. */
void layernorm_backward(float *dinp, float *dw, float *db, float *scratch, const float *dout, const float *inp,
                        const float *w, const float *mean, const float *rstd, int N, int C, int acc, int nt);

/* out (N, OC) = inp (N, C) · w^T (w is (OC, C)) + bias (OC, may be NULL). */
void matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC, int nt);
/* dinp (N, C) = dout · w (overwritten; skipped if dinp is NULL); dw += dout^T · inp; dbias += column sums. */
void matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w,
                     int N, int C, int OC, int acc, int nt);

/* Causal multi-head attention, flash style. qkv (B, T, 3C) holds q, k, v; heads are contiguous hs
 * slices. out (B, T, C). The T×T scores are never stored: lse (B, NH, T) saves each row's
 * log-sum-exp and backward recomputes the probabilities from it. scratch: attention_scratch_floats
 * (hs = C/NH), for either precision. lowp = 1: the GEMM operands (q, k, v, dY, the probabilities
 * and dS) are rounded to bf16 and multiplied on the bf16 units with fp32 accumulation; softmax
 * statistics, outputs and gradients stay fp32. */
size_t attention_scratch_floats(int T, int hs, int nt);
void attention_forward(float *out, float *lse, float *scratch, const float *qkv, int B, int T, int C, int NH,
                       Dropout d, int lowp, int nt);
/* dqkv (B, T, 3C) overwritten; out and lse from the forward. */
void attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *out,
                        const float *lse, int B, int T, int C, int NH, Dropout d, int lowp, int nt);

/* ---- Llama kernels (issue 15; docs/llama.md) ---- */

/* RMSNorm: out (N, C) = inp · rstd · w, rstd = 1/sqrt(mean(inp²) + eps) saved per row (N). */
void rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C, float eps, int nt);
/* The same rounded to bf16 (the next GEMM's operand): bit-identical to rmsnorm_forward then cast_bf16. */
void rmsnorm_forward_bf16(uint16_t *out, float *rstd, const float *inp, const float *w, int N, int C, float eps,
                          int nt);
/* res = a + drop(b) and out = RMSNorm(res) in one pass over the rows (res may alias a):
 * bit-identical to residual_forward then rmsnorm_forward; the _bf16 form writes out as bf16. */
void residual_rmsnorm_forward(float *res, float *out, float *rstd, const float *a, const float *b, Dropout d,
                              const float *w, int N, int C, float eps, int nt);
void residual_rmsnorm_forward_bf16(float *res, uint16_t *out, float *rstd, const float *a, const float *b,
                                   Dropout d, const float *w, int N, int C, float eps, int nt);
/* dinp += ..., dw += (acc = 0: dw overwritten); scratch holds ceil(N/64)·C floats (dw's row
 * chunks summed in order: independent of nt). */
void rmsnorm_backward(float *dinp, float *dw, float *scratch, const float *dout, const float *inp, const float *w,
                      const float *rstd, int N, int C, int acc, int nt);

/* Rotary position embeddings, Hugging Face's rotate-half convention: in each head of size hs the
 * pair (x[i], x[i + hs/2]), i < hs/2, at position t turns by the angle t·inv_freq[i]; plain RoPE
 * has inv_freq[i] = theta^(-2i/hs) (rope_inv_freq; scaled RoPE types: model_rope_inv_freq).
 * rope_table fills cs (T·hs floats: for each t, hs/2 cosines then hs/2 sines) for positions
 * [0, T), angles t·inv_freq[i] computed in double and rounded to fp32 once. */
void rope_inv_freq(double *inv_freq, int hs, double theta);
void rope_table(float *cs, int T, int hs, const double *inv_freq);
/* In place on the rows of qkv (B·T rows of (NH + 2·KV)·hs: q heads, k heads, v heads): rotates the
 * NH q heads and the KV k heads of row b·T + t by position pos0 + t (cs covers pos0 + T positions);
 * v untouched. rope_backward rotates the same parts of dqkv back (the transpose: angle −θ). */
/* pos non-NULL (document masking): row b·T + t turns by position pos0 + pos[b·T + t] instead. */
void rope_forward(float *qkv, const float *cs, const int32_t *pos, int B, int T, int NH, int KV, int hs, int pos0,
                  int nt);
void rope_backward(float *dqkv, const float *cs, const int32_t *pos, int B, int T, int NH, int KV, int hs, int pos0,
                   int nt);

/* SwiGLU on the fused gate|up GEMM output h (N, 2F: per row F gate values, then F up values):
 * out (N, F) = silu(gate) · up, silu(x) = x / (1 + e^-x). The _bf16 form writes the next GEMM's
 * operand (bit-identical to swiglu_forward then cast_bf16). */
void swiglu_forward(float *out, const float *h, int N, int F, int nt);
void swiglu_forward_bf16(uint16_t *out, const float *h, int N, int F, int nt);
/* dh (N, 2F) overwritten from dout (N, F) and h; the _bf16 form writes dh as bf16 (the operand of
 * the gate|up GEMM's backward), bit-identical to swiglu_backward then cast_bf16. */
void swiglu_backward(float *dh, const float *dout, const float *h, int N, int F, int nt);
void swiglu_backward_bf16(uint16_t *dh, const float *dout, const float *h, int N, int F, int nt);

/* Grouped-query attention, flash style as attention_forward: qkv (B, T, (NH + 2·KV)·hs) holds per
 * row the NH query heads, then KV key heads, then KV value heads; query head h reads KV head
 * h / (NH/KV) (KV divides NH), which is never copied per query head. out (B, T, NH·hs), lse
 * (B, NH, T). KV = NH with hs = C/NH is exactly attention_forward (same results bit for bit).
 * Scores are q·k · scale: 1/sqrt(hs) in the standard parameterization, 1/hs under muP
 * (model_attn_scale). Dropout's head indices are query heads. */
size_t attention_gqa_scratch_floats(int T, int hs, int group, int nt);
/* pos: document masking (above); NULL: causal over the whole row. */
void attention_gqa_forward(float *out, float *lse, float *scratch, const float *qkv, const int32_t *pos, int B, int T,
                           int NH, int KV, int hs, float scale, Dropout d, int lowp, int nt);
/* dqkv (B, T, (NH + 2·KV)·hs) overwritten: each KV head's gradient sums over its group's query
 * heads in a fixed order (results independent of nt). */
void attention_gqa_backward(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *out,
                            const float *lse, const int32_t *pos, int B, int T, int NH, int KV, int hs, float scale,
                            Dropout d, int lowp, int nt);

/* One query token's causal attention over a KV cache (infer.c's decoding step): out (NH·hs)
 * overwritten from q (NH·hs) against the cached rows 0..pos of K and V (each row KV·hs floats: the
 * KV heads only), query head h reading KV head h / (NH/KV); per head softmax(q·k · scale) over the
 * rows, the scores and their sum in row order. scores: NH·(pos+1) floats of scratch (the CPU uses
 * the first pos+1). nt is unused (one token: the heads run in order). */
void attention_decode_forward(float *out, float *scores, const float *q, const float *K, const float *V, int pos,
                              int NH, int KV, int hs, float scale, int nt);

/* GELU, tanh approximation. */
void gelu_forward(float *out, const float *inp, size_t n, int nt);
/* dinp = dout · gelu'(inp) (overwritten; dinp may alias dout). */
void gelu_backward(float *dinp, const float *dout, const float *inp, size_t n, int nt);

/* x (N, C) += bias (C) on every row: a row-parallel layer's bias, added once after the reduction. */
void bias_add_rows(float *x, const float *bias, int N, int C, int nt);

/* x[0, n) *= a (muP's multipliers on the embedding output, the logits' input and their gradients). */
void scale_inplace(float *x, size_t n, float a, int nt);
/* Σ x[i] for i in [0, n) in index order, accumulated in double (the loss sum of a micro-batch). */
double sum_ordered(const float *x, size_t n);
/* dst = src (acc = 0) or dst += src (acc = 1), n elements. */
void add_or_set(float *dst, const float *src, size_t n, int acc);

/* out = a + drop(b) over n elements (out may alias a). */
void residual_forward(float *out, const float *a, const float *b, size_t n, Dropout d, int nt);
/* out = drop'(dout): the gradient reaching the dropped branch. */
void dropout_backward(float *out, const float *dout, size_t n, Dropout d, int nt);

/* ---- Mixed precision (bf16 GEMM inputs, fp32 accumulation and outputs) ----
 * With mp->bf16 set, the *_p variants round their GEMM operands to bf16 (round to nearest even)
 * into mp's scratch and run the GEMM on the bf16 units; weights come pre-converted (w_lp, the
 * working copy of the fp32 master). Everything else (bias, reductions, outputs) stays fp32.
 * mp == NULL or neither mp->bf16 nor mp->fp16 is exactly the fp32 kernel. */
typedef struct {
    int bf16;
    uint16_t *a, *b; /* scratch: a >= max(N·4C, head_rows·Vp) elements, b >= N·4C */
    int head_rows;   /* the fused bf16 head's backward GEMMs run once per head_rows rows (whole
                        chunks; layout_head_grad_rows), their logit gradient kept in a meanwhile */
    /* fp16 storage emulation: there is no fp16 arithmetic on this CPU (and oneDNN has no f16
     * matmul for it), so GEMM operands are rounded to fp16 (overflow → inf, which the loss scaler
     * catches) into fp32 scratch and multiplied in fp32. fa, fb as a, b; fw >= the largest weight. */
    int fp16;
    float *fa, *fb, *fw;
    /* bf16 on the packed GEMMs (matmul.h, mm_head_pack_wanted): the head's weight packed at each
     * call of head_forward_backward_p / _vp, for its logits (wt: op(B) = wteᵀ) and its input
     * gradient (wn: op(B) = wte), pack_words words each (layout_head_pack_words / 2). NULL: the
     * head's logits and input gradient run on mm_gemm_bf16. */
    uint32_t *wt, *wn;
    size_t pack_words;
    float *sums; /* the bias gradients' partial sums (cast_bf16_colsum), for every precision; NULL: none */
} MatPrec;

/* fp32 → fp16 bits (round to nearest even, overflow to inf), and fp32 rounded through fp16. */
void cast_fp16(uint16_t *dst, const float *src, size_t n, int nt);
void round_fp16(float *dst, const float *src, size_t n, int nt);
void widen_fp16(float *dst, const uint16_t *src, size_t n, int nt);

/* fp32 → bf16 (round to nearest even), n elements. */
void cast_bf16(uint16_t *dst, const float *src, size_t n, int nt);
/* Bias gradients, colsum (OC) (+)= the column sums of an (N, OC) gradient (matmul_backward's dbias
 * and the fused kernels below), sum in one order whatever the thread count: each column over a
 * KERNEL_ROW_CHUNK-row chunk's rows in order, then the chunks' sums in chunk order (the CUDA
 * backend's order too). `sums`, the chunks' partial sums: colsum_floats(N, OC) floats of scratch;
 * NULL (matmul_backward, callers without scratch): the same sums, threads taking columns instead
 * of chunks, slower at 2 threads and more. */
size_t colsum_floats(int N, int OC);
/* cast_bf16 on src (N, OC) and its bias gradient in one pass: bit-identical to cast_bf16 and
 * matmul_backward's. */
void cast_bf16_colsum(uint16_t *dst, float *colsum, float *sums, const float *src, int N, int OC, int acc, int nt);

/* GELU written straight as the next GEMM's bf16 operand: out = bf16(gelu(inp)), bit-identical to
 * gelu_forward then cast_bf16. */
void gelu_forward_bf16(uint16_t *out, const float *inp, size_t n, int nt);
/* GELU backward on (N, OC) fused with the next GEMM's rounding and the bias gradient:
 * dinp_lp = bf16(dout · gelu'(inp)), colsum (OC) += the column sums of the fp32 values; no fp32
 * output is written. Bit-identical to gelu_backward, cast_bf16 and matmul_backward's dbias. */
void gelu_backward_bf16(uint16_t *dinp_lp, float *colsum, float *sums, const float *dout, const float *inp, int N, int OC,
                        int acc, int nt);

/* A linear layer's bf16 GEMMs on operands already rounded (by the fused kernels above):
 * out = inp_lp · w_lp^T + bias; dinp = dout_lp · w_lp (skipped if NULL), dw += dout_lp^T · inp_lp
 * (skipped if NULL). */
void matmul_forward_lp(float *out, const uint16_t *inp_lp, const uint16_t *w_lp, const float *bias, int N, int C,
                       int OC);
void matmul_backward_lp(float *dinp, float *dw, const uint16_t *dout_lp, const uint16_t *inp_lp, const uint16_t *w_lp,
                        int N, int C, int OC, int acc);

void matmul_forward_p(const MatPrec *mp, float *out, const float *inp, const float *w, const uint16_t *w_lp,
                      const float *bias, int N, int C, int OC, int nt);
void matmul_backward_p(const MatPrec *mp, float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                       const float *w, const uint16_t *w_lp, int N, int C, int OC, int acc, int nt);

/* Fused LM head and cross-entropy on rows [0, n) of x (n, C), tied weight wte (Vp, C) of which
 * the first V rows are real. For each row i with target t_i >= 0:
 *   loss_i = logsumexp(logits_i[0:V]) - logits_i[t_i];   rows with t_i < 0 get loss 0.
 * logits is a (chunk, Vp) workspace; rows are processed `chunk` at a time so the (n, Vp) logits
 * are never all held. If dx is non-NULL (training): dlogits = (softmax - onehot)·dscale
 * for real columns, 0 for padded columns and masked rows; dx (n, C) is overwritten with
 * dlogits · wte and dwte += dlogits^T · x (acc = 0: dwte's V real rows are overwritten; its padded
 * rows are never written). If probs_out is non-NULL, row 0's V probabilities are
 * written to it (tests, sampling). Returns nothing; losses (n) overwritten. */
void head_forward_backward(float *losses, float *dx, float *dwte, float *logits, const float *x, const float *wte,
                           const int32_t *targets, int n, int C, int V, int Vp, float dscale, int chunk, int acc,
                           int nt, float *probs_out, double *ms_fwd, double *ms_bwd);
/* Labels drawn from the model's own softmax instead of the data's (Sophia's Gauss-Newton-Bartlett
 * estimator): row i with targets[i] >= 0 gets the label y_i = the smallest v with
 * Σ_{w<=v} p_w > u[i]·Σ_w p_w (inverse CDF of softmax(logits_i) at u[i] ∈ [0, 1), summed in blocks of
 * 64 in fp32), written to labels[i] (-1 for masked rows); the loss and dlogits are those of y_i.
 * The caller supplies u (a counter-based draw per global row: the same labels however the batch is
 * split over ranks and micro-batches). */
typedef struct {
    const float *u;
    int32_t *labels;
} HeadSample;

/* The same with mixed-precision GEMMs (wte_lp: bf16 copy of wte), and optionally sampled labels
 * (smp non-NULL: targets only mark the rows that count; smp->u and smp->labels are indexed like
 * targets). */
void head_forward_backward_p(const MatPrec *mp, float *losses, float *dx, float *dwte, float *logits, const float *x,
                             const float *wte, const uint16_t *wte_lp, const int32_t *targets, int n, int C, int V,
                             int Vp, float dscale, int chunk, int acc, int nt, float *probs_out, const HeadSample *smp,
                             double *ms_fwd, double *ms_bwd);

/* Vocabulary-parallel LM head and cross-entropy (Megatron): wte holds the vocabulary rows [v0,
 * v0 + Vr) (Vl rows allocated, the first Vr <= Vl real; Vr may be 0). The full logits are
 * never gathered: per chunk of rows, `reduce` combines over the tp ranks the row maxima (max = 1,
 * m floats), then the sums of exponentials and the target logits (max = 0, 2m floats, in stats).
 * losses (n) get the full cross-entropy on every rank; dx (n, C) gets this rank's PART of
 * dlogits · wte (the caller sums dx over ranks, Megatron's all-reduce at the head's input);
 * dwte += dlogits^T · x on the rows held. logits: (chunk, Vl) workspace; stats: 3·chunk floats. */
typedef void (*HeadReduceFn)(void *ctx, float *buf, size_t n, int max);
void head_forward_backward_vp(const MatPrec *mp, float *losses, float *dx, float *dwte, float *logits, float *stats,
                              const float *x, const float *wte, const uint16_t *wte_lp, const int32_t *targets, int n,
                              int C, int v0, int Vr, int Vl, float dscale, int chunk, int acc, int nt,
                              HeadReduceFn reduce, void *ctx, double *ms_fwd, double *ms_bwd);

#endif
