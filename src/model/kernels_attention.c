/* kernels_attention.c — causal (grouped-query) attention, flash style: the attention_* kernels of
 * kernels.h. */
#include "model/kernels.h"

#include <math.h>
#include <omp.h>
#include <string.h>

#include "core/half.h"
#include "core/rng.h"
#include "core/timer.h"
#include "model/fastmath.h"
#include "model/kernels_internal.h"
#include "model/matmul.h"
#include "model/matmul_simd.h"

/* ------------------------------------------------------------------------------------------ */
/* Attention                                                                                  */
/* ------------------------------------------------------------------------------------------ */

/* Causal attention, flash style: per (batch, query head), 64-query blocks against key blocks of up
 * to 256 with an online softmax, so the T×T matrix is never stored; only each row's log-sum-exp is
 * saved, and backward recomputes the probabilities from it. Blocks above the diagonal are skipped;
 * with document positions (document masking, kernels.h) so are the keys before a block's documents.
 *
 * With lowp (bf16), each head's Q, K, V (and dY in backward) are first rounded into contiguous
 * bf16 copies, and the probabilities and dS are rounded before their GEMMs, so all five GEMMs run
 * on the bf16 units with fp32 accumulation; the softmax, its statistics and every output stay fp32.
 *
 * bf16 without dropout, where the build targets AVX512_BF16 (matmul.h) and hs is even, the five
 * GEMMs are mm_tile_gemm_bf16 calls instead of oneDNN's ("the tile path"): no library call per 64-row
 * block, and operands in the pair layouts vdpbf16ps reads, packed once per head (K^T, V^T and K, V,
 * Q, dY with row pairs interleaved) or written so by the softmax loop (P and dS, and backward's
 * P^T and dS^T). On a block that meets the diagonal they skip, tile by tile, what the causal mask
 * zeroes (matmul.h's MM_BAND_*: S's and dP's columns past a row's last key, the zero pairs of P,
 * dS and their transposes): 8–10% of bf16 attention at T = 256, the same bits. Each output sums the k pairs in order, then alpha, then + C: the order of
 * oneDNN 2.6's bf16 kernels on Zen 4, so there the results are bit-identical to the oneDNN path's
 * (scripts/bitcheck.sh, bench/attn_bench's checksums); another oneDNN or CPU may sum otherwise.
 * fp32 and dropout runs never take it.
 *
 * One implementation, grouped-query (attention_gqa_*, below); GPT-2's multi-head attention is its
 * case KV = NH (attention_forward/_backward at the end of this section). */
#define ATT_BLOCK 64
#define ATT_KBLOCK 256

/* Per thread: S/P, dP and the dropped P (fp32, 64 × min(T, 256) each = blk floats); the bf16
 * P and dS (64 rows of min(T, 256) rounded up to even: blk / 2 + 32 floats each); the tile path's
 * P^T and dS^T (min(T, 256) rows of 64: blk / 2 each); then eight per-head operands of T × hs
 * bf16 values, T rounded up to even (T·hs / 2 + hs floats each): bf16 Q, K, V, dY as rows (the
 * oneDNN path uses the first four as Q, K, V, dY), and the tile path's Q, dY rows, K^T, V^T, and
 * K, V, Q, dY with row pairs interleaved. */
static size_t att_blk(int T) { return (size_t)ATT_BLOCK * (size_t)(T < ATT_KBLOCK ? T : ATT_KBLOCK); }
static size_t att_head(int T, int hs) { return (size_t)T * hs / 2 + (size_t)hs; }
static size_t att_thread_floats(int T, int hs) { return 5 * att_blk(T) + 64 + 8 * att_head(T, hs); }

size_t attention_scratch_floats(int T, int hs, int nt) {
    return (size_t)(nt > 0 ? nt : 1) * att_thread_floats(T, hs);
}

/* A head's operands are a few cache lines of each row far apart (its slice of a qkv or output row),
 * read cold in the step: the loops over them request the row ATT_AHEAD rows on (mm_prefetch_row). */
#define ATT_AHEAD 16

/* rows × cols of src (leading dimension ld) into dst (leading dimension cols), rounded to bf16. */
static void rows_to_bf16(uint16_t *dst, const float *src, int rows, int cols, size_t ld) {
    for (int r = 0; r < rows; r++) {
        const float *s = src + (size_t)r * ld;
        uint16_t *d = dst + (size_t)r * cols;
        if (r + ATT_AHEAD < rows) mm_prefetch_row(s + ATT_AHEAD * ld, cols);
#pragma omp simd
        for (int c = 0; c < cols; c++) d[c] = half_bf16(s[c]);
    }
}

/* The bf16 paths' row loops (fuse, below). With AVX-512 each row runs in 16-key vectors from js,
 * the last one masked: no scalar remainder (on the diagonal block a row ends anywhere, and the
 * remainder's scalar exps were a third of the forward's own time at T = 256); a row's max and sum
 * are taken per lane, then over the lanes (_mm512_reduce_*). Elsewhere, plain vectorized loops.
 * Every entry of [0, kn) outside [js, jn) is written 0. fp32 and dropout runs keep the loops in
 * the kernels below. */
#if ST_VEC4 /* the bf16 stores need AVX512BW and VL */

/* max(m, row[js..jn)); a NaN entry is passed over, as the scalar loop's comparison does. Four
 * lanes' maxima side by side (a max is exact: any grouping gives the same value). */
static float row_max16(const float *row, int js, int jn, float m) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 a0 = _mm512_set1_ps(m), a1 = a0, a2 = a0, a3 = a0;
    int j = js;
    for (; j + 64 <= jn; j += 64) {
        a0 = _mm512_max_ps(_mm512_loadu_ps(row + j), a0), a1 = _mm512_max_ps(_mm512_loadu_ps(row + j + 16), a1);
        a2 = _mm512_max_ps(_mm512_loadu_ps(row + j + 32), a2), a3 = _mm512_max_ps(_mm512_loadu_ps(row + j + 48), a3);
    }
    for (; j < jn; j += 16) a0 = _mm512_max_ps(_mm512_mask_loadu_ps(ninf, mm_mask16(jn - j), row + j), a0);
    return _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(a0, a1), _mm512_max_ps(a2, a3)));
}

/* The softmax rows' exponentials, four vectors side by side (VEC4_SPAN: each waits on a long chain
 * of latency) while each lane's sum still adds the vectors in order. A vector's lanes past jn are
 * 0, and its store writes them up to kn; `after` is where those vectors end. */
static int row_after(int js, int jn) { return jn > js ? js + (jn - js + 15) / 16 * 16 : js; }

/* p_j = exp(row_j − m) on [js, jn) as bf16 into pb; returns Σ p_j (fp32, before rounding). */
static float row_exp16(uint16_t *pb, const float *row, int kn, int js, int jn, float m) {
    __m512 acc = _mm512_setzero_ps(), vm = _mm512_set1_ps(m);
    int jz = js < kn ? js : kn, j; /* a document may start past this key block */
    for (j = 0; j < jz; j += 16) store_bf16_16(pb + j, mm_mask16(jz - j), _mm512_setzero_ps());
#define LD_(i, k) _mm512_maskz_loadu_ps(k, row + (i))
#define F_(v, i, k) _mm512_maskz_mov_ps(k, st_expf16(_mm512_sub_ps(v, vm)))
#define ST_(i, k, v) (acc = _mm512_add_ps(acc, v), store_bf16_16(pb + (i), mm_mask16(kn - (int)(i)), v))
    if (jn > js) VEC4_SPAN((size_t)js, (size_t)jn, LD_, F_, ST_);
#undef LD_
#undef F_
#undef ST_
    for (j = row_after(js, jn); j < kn; j += 16) store_bf16_16(pb + j, mm_mask16(kn - j), _mm512_setzero_ps());
    return _mm512_reduce_add_ps(acc);
}

/* Backward: p_j = exp(row_j − L) and dS_j = p_j (dP_j − D) · scale on [js, jn), as bf16 into pb, sb. */
static void row_ds16(uint16_t *pb, uint16_t *sb, const float *row, const float *dp, int kn, int js, int jn, float L,
                     float D, float scale) {
    __m512 vl = _mm512_set1_ps(L), vd = _mm512_set1_ps(D), vs = _mm512_set1_ps(scale), z = _mm512_setzero_ps();
    int jz = js < kn ? js : kn, j; /* a document may start past this key block */
    for (j = 0; j < jz; j += 16) store_bf16_16(pb + j, mm_mask16(jz - j), z), store_bf16_16(sb + j, mm_mask16(jz - j), z);
#define LD_(i, k) _mm512_maskz_loadu_ps(k, row + (i))
#define F_(v, i, k) _mm512_maskz_mov_ps(k, st_expf16(_mm512_sub_ps(v, vl)))
#define ST_(i, k, v)                                                                                          \
    (store_bf16_16(pb + (i), mm_mask16(kn - (int)(i)), v),                                                   \
     store_bf16_16(sb + (i), mm_mask16(kn - (int)(i)),                                                       \
                   _mm512_maskz_mul_ps(k, _mm512_mul_ps(v, _mm512_sub_ps(_mm512_maskz_loadu_ps(k, dp + (i)), vd)), vs)))
    if (jn > js) VEC4_SPAN((size_t)js, (size_t)jn, LD_, F_, ST_);
#undef LD_
#undef F_
#undef ST_
    for (j = row_after(js, jn); j < kn; j += 16)
        store_bf16_16(pb + j, mm_mask16(kn - j), z), store_bf16_16(sb + j, mm_mask16(kn - j), z);
}

#else

static float row_max16(const float *row, int js, int jn, float m) {
#pragma omp simd reduction(max : m)
    for (int j = js; j < jn; j++) m = row[j] > m ? row[j] : m;
    return m;
}

static float row_exp16(uint16_t *pb, const float *row, int kn, int js, int jn, float m) {
    float sum = 0;
    for (int j = 0; j < js && j < kn; j++) pb[j] = 0;
#pragma omp simd reduction(+ : sum)
    for (int j = js; j < jn; j++) {
        float p = st_expf(row[j] - m);
        sum += p;
        pb[j] = half_bf16(p);
    }
    for (int j = jn > js ? jn : js; j < kn; j++) pb[j] = 0;
    return sum;
}

static void row_ds16(uint16_t *pb, uint16_t *sb, const float *row, const float *dp, int kn, int js, int jn, float L,
                     float D, float scale) {
    for (int j = 0; j < js && j < kn; j++) pb[j] = 0, sb[j] = 0;
#pragma omp simd
    for (int j = js; j < jn; j++) {
        float p = st_expf(row[j] - L);
        pb[j] = half_bf16(p);
        sb[j] = half_bf16(p * (dp[j] - D) * scale);
    }
    for (int j = jn > js ? jn : js; j < kn; j++) pb[j] = 0, sb[j] = 0;
}

#endif

/* C (M × N) += A · B on its first n1 rows, = A · B on the rest (beta 0: rows not yet written);
 * A's rows are pair rows of KP (row stride KP), B's row stride is N; key row i meets the queries
 * from i − d on (MM_BAND_KBEG). Row by row the same bits as one call adding into zeros: a tile's
 * sums start from +0 and are never −0. */
static void tile_rows_from(int n1, int d, int M, int N, int KP, const uint32_t *A, const uint32_t *B, float *C, int ldc) {
    mm_tile_gemm_bf16_band(MM_BAND_KBEG, d, n1, N, KP, 1.0f, A, KP, B, N, 1.0f, C, ldc);
    mm_tile_gemm_bf16_band(MM_BAND_KBEG, d - n1, M - n1, N, KP, 1.0f, A + (size_t)n1 * KP, KP, B, N, 0.0f,
                           C + (size_t)n1 * ldc, ldc);
}

typedef struct {
    float *S, *dP, *Pd;
    uint16_t *Pb, *dSb, *Qb, *Kb, *Vb, *dYb;
    /* The tile path (pair layouts, matmul.h): P^T, dS^T (pair rows along the query rows), the
     * packed K^T, V^T, and K, V, Q, dY (row pairs interleaved). Q, dY as pair rows are Qb, dYb. */
    uint32_t *PT, *dST, *KT, *VT, *K2, *V2, *Q2, *dY2;
} AttScratch;

static AttScratch att_scratch(float *scratch, int T, int hs) {
    size_t blk = att_blk(T), hd = att_head(T, hs);
    float *base = scratch + (size_t)omp_get_thread_num() * att_thread_floats(T, hs);
    AttScratch a;
    a.S = base, a.dP = base + blk, a.Pd = base + 2 * blk;
    a.Pb = (uint16_t *)(base + 3 * blk), a.dSb = (uint16_t *)(base + 3 * blk + blk / 2 + 32);
    a.PT = (uint32_t *)(base + 4 * blk + 64), a.dST = a.PT + blk / 2;
    uint32_t *h = (uint32_t *)(base + 5 * blk + 64);
    a.Qb = (uint16_t *)h, a.Kb = (uint16_t *)(h + hd);
    a.Vb = (uint16_t *)(h + 2 * hd), a.dYb = (uint16_t *)(h + 3 * hd);
    a.KT = h + 4 * hd, a.VT = h + 5 * hd, a.K2 = h + 6 * hd, a.V2 = h + 7 * hd;
    /* Q, dY interleaved share the oneDNN path's K, V rows (the tile path never uses those). */
    a.Q2 = (uint32_t *)a.Kb, a.dY2 = (uint32_t *)a.Vb;
    return a;
}

/* 1 when attention takes the tile path (above): bf16, no dropout, even hs, a build with it, no AMX. */
static int att_tile(int lowp, Dropout d, int hs) { return lowp && !(d.p > 0) && hs % 2 == 0 && mm_tile_preferred(); }

size_t attention_gqa_scratch_floats(int T, int hs, int group, int nt) {
    (void)group; /* query heads are processed one at a time: the scratch is that of one head */
    return attention_scratch_floats(T, hs, nt);
}

/* Document masking (pos non-NULL): query row t sees keys [t − pos[b·T + t], t]. A query block's key
 * loop starts at the smallest document start of its rows, rounded down to a multiple of 64 (keys
 * before it are never computed), and each row's softmax runs over its own range [js, jn) of a key block, the entries
 * outside set to 0 as those above the diagonal are. pos NULL: js = 0 and the loop starts at 0,
 * exactly the causal kernel. Dropout indices stay those of the absolute (row, key) pair. */
static int doc_block_start(const int32_t *dpos, int r0, int m) {
    int s = r0 - dpos[r0];
    for (int i = 1; i < m; i++) s = r0 + i - dpos[r0 + i] < s ? r0 + i - dpos[r0 + i] : s;
    /* Rounded down to a multiple of the query block: the key blocks' widths stay multiples of 64
     * (kend is one), so the GEMMs keep the few shapes of the causal kernel instead of one per
     * document start (each new shape is a oneDNN primitive to create, matmul.c's cache). The keys
     * below the start inside it are masked per row. */
    s = s < 0 ? 0 : s;
    return s / ATT_BLOCK * ATT_BLOCK;
}
static int doc_row_from(const int32_t *dpos, int row, int k0) {
    if (!dpos) return 0;
    int s = row - dpos[row] - k0;
    return s > 0 ? s : 0;
}

/* Grouped-query attention. The qkv row holds NH query heads, then KV key heads, then KV value
 * heads (ld = (NH + 2·KV)·hs floats); query head h reads KV head h / G, G = NH / KV, in place.
 *
 * Forward: one task per (batch, query head), as the GPT-2 attention; with lowp, a thread keeps the
 * bf16 K, V of the KV head it converted last, so the G query heads of a group (adjacent in the
 * static schedule) convert their shared K, V once. At KV = NH every task does exactly what the
 * GPT-2 kernel did, in the same order: results are bit-identical. */
void attention_gqa_forward(float *out, float *lse, float *scratch, const float *qkv, const int32_t *pos, int B, int T,
                           int NH, int KV, int hs, float scale, Dropout d, int lowp, int nt) {
    int G = NH / KV, C = NH * hs, ld = (NH + 2 * KV) * hs;
    /* bf16 without dropout: each probability row is rounded to the P·V GEMM's bf16 operand as soon
     * as it is computed, instead of the whole block by a second pass. */
    const int fuse = lowp && !(d.p > 0), tl = att_tile(lowp, d, hs), hp = hs / 2;
#pragma omp parallel num_threads(nt)
    {
        long held = -1; /* the (b, KV head) whose bf16 K, V this thread's scratch holds */
#pragma omp for schedule(static)
        for (int bh = 0; bh < B * NH; bh++) {
            int b = bh / NH, h = bh % NH, kh = h / G;
            uint64_t bhg = (uint64_t)b * (d.heads ? d.heads : NH) + d.head0 + h; /* the head in the whole model */
            const float *row0 = qkv + (size_t)b * T * ld;
            const float *q = row0 + (size_t)h * hs, *k = row0 + (size_t)(NH + kh) * hs, *v = k + (size_t)KV * hs;
            AttScratch w = att_scratch(scratch, T, hs);
            float *S = w.S, *Pd = w.Pd;
            float *y = out + (size_t)b * T * C + (size_t)h * hs, *L = lse + (size_t)bh * T;
            if (lowp) {
                rows_to_bf16(w.Qb, q, T, hs, ld);
                if (held != (long)b * KV + kh) {
                    if (tl)
                        mm_tile_pack_t(w.KT, T, k, ld, T, hs), mm_tile_pack_rows(w.V2, hs, v, ld, T, hs);
                    else
                        rows_to_bf16(w.Kb, k, T, hs, ld), rows_to_bf16(w.Vb, v, T, hs, ld);
                    held = (long)b * KV + kh;
                }
            }
            const int32_t *dpos = pos ? pos + (size_t)b * T : NULL;
            for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
                int m = T - r0 < ATT_BLOCK ? T - r0 : ATT_BLOCK, kend = r0 + m;
                int kbeg = dpos ? doc_block_start(dpos, r0, m) : 0;
                float mx[ATT_BLOCK], l[ATT_BLOCK];
                for (int i = 0; i < m; i++) mx[i] = -INFINITY, l[i] = 0;
                for (int k0 = kbeg; k0 < kend; k0 += ATT_KBLOCK) {
                    int kn = kend - k0 < ATT_KBLOCK ? kend - k0 : ATT_KBLOCK;
                    int kp = (kn + 1) / 2; /* the tile path's P rows: kn rounded up to even, in pairs */
                    if (tl) /* S's columns past a row's last key are not needed: not computed */
                        mm_tile_gemm_bf16_band(MM_BAND_COLS, r0 - k0, m, kn, hp, scale, (const uint32_t *)w.Qb + (size_t)r0 * hp,
                                               hp, w.KT + k0, T, 0.0f, S, kn);
                    else if (lowp)
                        mm_gemm_bf16(0, 1, m, kn, hs, scale, w.Qb + (size_t)r0 * hs, hs, w.Kb + (size_t)k0 * hs, hs,
                                     0.0f, S, kn);
                    else
                        mm_sgemm(0, 1, m, kn, hs, scale, q + (size_t)r0 * ld, ld, k + (size_t)k0 * ld, ld, 0.0f, S, kn);
                    for (int i = 0; i < m; i++) {
                        int row = r0 + i, jn = row - k0 + 1 < kn ? row - k0 + 1 : kn; /* causal: keys <= row */
                        int js = doc_row_from(dpos, row, k0); /* document: keys >= its start */
                        float *srow = S + (size_t)i * kn, bm = mx[i];
                        float corr, sum = 0;
                        if (fuse) {
                            bm = row_max16(srow, js, jn, bm);
                            corr = mx[i] == -INFINITY ? 0.0f : st_expf(mx[i] - bm);
                            uint16_t *pb = w.Pb + (size_t)i * (tl ? 2 * kp : kn);
                            sum = row_exp16(pb, srow, kn, js, jn, bm);
                            if (tl && kn % 2) pb[kn] = 0; /* the last pair's zero */
                        } else {
#pragma omp simd reduction(max : bm)
                            for (int j = js; j < jn; j++) bm = srow[j] > bm ? srow[j] : bm;
                            corr = mx[i] == -INFINITY ? 0.0f : st_expf(mx[i] - bm);
                            sum = exp_rows_sum(srow, js, jn, bm);
                            for (int j = 0; j < js && j < kn; j++) srow[j] = 0.0f;
                            for (int j = jn > js ? jn : js; j < kn; j++) srow[j] = 0.0f;
                        }
                        l[i] = l[i] * corr + sum;
                        mx[i] = bm;
                        /* The first key block's P·V writes the rows (beta 0, below); later ones add. */
                        float *yrow = y + (size_t)row * C;
                        if (k0 != kbeg)
                            for (int x = 0; x < hs; x++) yrow[x] *= corr;
                        if (d.p > 0) /* the row's factors at once (drop_factors: drop_scale's, bit for bit) */
                            drop_row(Pd + (size_t)i * kn, NULL, srow, (size_t)kn, d, bhg * T * T + (size_t)row * T + k0);
                    }
                    const float *P = d.p > 0 ? Pd : S;
                    const float by = k0 == kbeg ? 0.0f : 1.0f;
                    if (tl) {
                        mm_tile_gemm_bf16_band(MM_BAND_KEND, r0 - k0, m, hs, kp, 1.0f, (const uint32_t *)w.Pb, kp,
                                               w.V2 + (size_t)k0 / 2 * hs, hs, by, y + (size_t)r0 * C, C);
                    } else if (lowp) {
                        if (!fuse) rows_to_bf16(w.Pb, P, m, kn, kn);
                        mm_gemm_bf16(0, 0, m, hs, kn, 1.0f, w.Pb, kn, w.Vb + (size_t)k0 * hs, hs, by,
                                     y + (size_t)r0 * C, C);
                    } else {
                        mm_sgemm(0, 0, m, hs, kn, 1.0f, P, kn, v + (size_t)k0 * ld, ld, by, y + (size_t)r0 * C, C);
                    }
                }
                for (int i = 0; i < m; i++) {
                    float inv = 1.0f / l[i], *yrow = y + (size_t)(r0 + i) * C;
                    for (int x = 0; x < hs; x++) yrow[x] *= inv;
                    L[r0 + i] = mx[i] + logf(l[i]);
                }
            }
        }
    }
}

/* Backward: one task per (batch, KV head), so exactly one thread writes a KV head's dK, dV. It
 * zeroes them, then takes the group's G query heads in order h = kh·G, ..., kh·G + G − 1: each
 * writes its own dQ and adds its dK, dV contributions (GEMMs with beta 1, query blocks in order)
 * — a fixed summation order, independent of the thread count. At KV = NH this is the GPT-2
 * kernel's per-head task, bit for bit. */
void attention_gqa_backward(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *out,
                            const float *lse, const int32_t *pos, int B, int T, int NH, int KV, int hs, float scale,
                            Dropout d, int lowp, int nt) {
    int G = NH / KV, C = NH * hs, ld = (NH + 2 * KV) * hs;
    /* bf16 without dropout: P and dS are written only as the bf16 operands of their GEMMs, in the
     * loop that computes them (the same values, rounded from the same fp32; no reduction there). */
    const int fuse = lowp && !(d.p > 0), tl = att_tile(lowp, d, hs), hp = hs / 2;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int bkv = 0; bkv < B * KV; bkv++) {
        int b = bkv / KV, kh = bkv % KV;
        const float *row0 = qkv + (size_t)b * T * ld;
        const float *k = row0 + (size_t)(NH + kh) * hs, *v = k + (size_t)KV * hs;
        float *drow0 = dqkv + (size_t)b * T * ld;
        float *dk = drow0 + (size_t)(NH + kh) * hs, *dv = dk + (size_t)KV * hs;
        AttScratch w = att_scratch(scratch, T, hs);
        float *P = w.S, *dP = w.dP, *Pd = w.Pd;
        const int32_t *dpos = pos ? pos + (size_t)b * T : NULL;
        /* The tile path writes each key row's dK, dV first with beta 0 (tile_rows_from, below); the
         * others add from the start. */
        if (tl) {
            mm_tile_pack_t(w.KT, T, k, ld, T, hs), mm_tile_pack_t(w.VT, T, v, ld, T, hs),
                mm_tile_pack_rows(w.K2, hs, k, ld, T, hs);
        } else {
            for (int t = 0; t < T; t++) {
                float *a = dk + (size_t)t * ld, *c = dv + (size_t)t * ld;
                for (int x = 0; x < hs; x++) a[x] = 0.0f, c[x] = 0.0f;
            }
            if (lowp) rows_to_bf16(w.Kb, k, T, hs, ld), rows_to_bf16(w.Vb, v, T, hs, ld);
        }
        for (int h = kh * G; h < (kh + 1) * G; h++) {
            uint64_t bhg = (uint64_t)b * (d.heads ? d.heads : NH) + d.head0 + h;
            const float *q = row0 + (size_t)h * hs;
            float *dq = drow0 + (size_t)h * hs;
            const float *dy = dout + (size_t)b * T * C + (size_t)h * hs, *y = out + (size_t)b * T * C + (size_t)h * hs;
            const float *L = lse + ((size_t)b * NH + h) * T;
            if (lowp) rows_to_bf16(w.Qb, q, T, hs, ld), rows_to_bf16(w.dYb, dy, T, hs, C);
            if (tl) mm_tile_pack_rows(w.Q2, hs, q, ld, T, hs), mm_tile_pack_rows(w.dY2, hs, dy, C, T, hs);
            for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
                int m = T - r0 < ATT_BLOCK ? T - r0 : ATT_BLOCK, kend = r0 + m;
                int mp = (m + 1) / 2; /* the tile path's P^T, dS^T rows: m rounded up to even, in pairs */
                float D[ATT_BLOCK]; /* rowsum(dY ∘ Y) = Σ_j P_ij dP'_ij (dropout included) */
                /* Each row's sum in x order, eight rows at a time: eight independent chains
                 * instead of one (one row's chain of hs dependent adds was ~5% of the bf16
                 * attention at T = 256); every sum keeps its order, so D is bit for bit the same. */
                int i8 = 0;
                for (; i8 + 8 <= m; i8 += 8) {
                    float s8[8] = {0};
                    for (int r = ATT_AHEAD; r < ATT_AHEAD + 8 && r0 + i8 + r < T; r++)
                        mm_prefetch_row(dy + (size_t)(r0 + i8 + r) * C, hs), mm_prefetch_row(y + (size_t)(r0 + i8 + r) * C, hs);
                    for (int x = 0; x < hs; x++)
                        for (int r = 0; r < 8; r++)
                            s8[r] += dy[(size_t)(r0 + i8 + r) * C + x] * y[(size_t)(r0 + i8 + r) * C + x];
                    for (int r = 0; r < 8; r++) D[i8 + r] = s8[r];
                }
                for (int i = i8; i < m; i++) {
                    const float *g = dy + (size_t)(r0 + i) * C, *o = y + (size_t)(r0 + i) * C;
                    float s = 0;
                    for (int x = 0; x < hs; x++) s += g[x] * o[x];
                    D[i] = s;
                }
                int kbeg = dpos ? doc_block_start(dpos, r0, m) : 0;
                for (int k0 = kbeg; k0 < kend; k0 += ATT_KBLOCK) {
                    int kn = kend - k0 < ATT_KBLOCK ? kend - k0 : ATT_KBLOCK, kp = (kn + 1) / 2;
                    /* P = exp(scale·Q K^T − L), recomputed; dP = dY V^T */
                    if (tl) {
                        mm_tile_gemm_bf16_band(MM_BAND_COLS, r0 - k0, m, kn, hp, scale, (const uint32_t *)w.Qb + (size_t)r0 * hp,
                                               hp, w.KT + k0, T, 0.0f, P, kn);
                        mm_tile_gemm_bf16_band(MM_BAND_COLS, r0 - k0, m, kn, hp, 1.0f, (const uint32_t *)w.dYb + (size_t)r0 * hp,
                                               hp, w.VT + k0, T, 0.0f, dP, kn);
                    } else if (lowp) {
                        mm_gemm_bf16(0, 1, m, kn, hs, scale, w.Qb + (size_t)r0 * hs, hs, w.Kb + (size_t)k0 * hs, hs,
                                     0.0f, P, kn);
                        mm_gemm_bf16(0, 1, m, kn, hs, 1.0f, w.dYb + (size_t)r0 * hs, hs, w.Vb + (size_t)k0 * hs, hs,
                                     0.0f, dP, kn);
                    } else {
                        mm_sgemm(0, 1, m, kn, hs, scale, q + (size_t)r0 * ld, ld, k + (size_t)k0 * ld, ld, 0.0f, P, kn);
                        mm_sgemm(0, 1, m, kn, hs, 1.0f, dy + (size_t)r0 * C, C, v + (size_t)k0 * ld, ld, 0.0f, dP, kn);
                    }
                    for (int i = 0; i < m; i++) {
                        int row = r0 + i, jn = row - k0 + 1 < kn ? row - k0 + 1 : kn;
                        int js = doc_row_from(dpos, row, k0);
                        float *prow = P + (size_t)i * kn, *g = dP + (size_t)i * kn, li = L[row];
                        if (fuse) {
                            /* P and dS as bf16 rows; dS's are the dQ GEMM's A as they are, and on
                             * the tile path both are transposed below into the dV, dK GEMMs' A. */
                            size_t rl = tl ? (size_t)2 * kp : (size_t)kn;
                            uint16_t *pb = w.Pb + (size_t)i * rl, *sb = w.dSb + (size_t)i * rl;
                            row_ds16(pb, sb, prow, g, kn, js, jn, li, D[i], scale);
                            if (tl && kn % 2) sb[kn] = 0; /* the last pair's zero */
                            continue;
                        }
                        exp_rows(prow, js, jn, li);
                        for (int j = 0; j < js && j < kn; j++) prow[j] = 0.0f;
                        for (int j = jn > js ? jn : js; j < kn; j++) prow[j] = 0.0f;
                        if (d.p > 0) {
                            float *pd = Pd + (size_t)i * kn;
                            drop_factors_at(pd, (size_t)kn, d, bhg * T * T + (size_t)row * T + k0); /* then P·f in place */
                            for (int j = 0; j < kn; j++) {
                                float ks = pd[j];
                                pd[j] = prow[j] * ks;
                                g[j] *= ks;
                            }
                        }
#pragma omp simd
                        for (int j = js; j < jn; j++) g[j] = prow[j] * (g[j] - D[i]) * scale;
                        for (int j = 0; j < js && j < kn; j++) g[j] = 0.0f;
                        for (int j = jn > js ? jn : js; j < kn; j++) g[j] = 0.0f;
                    }
                    /* dV += Pd^T dY; dQ += dS K (the first key block writes it: beta 0); dK += dS^T Q */
                    const float *Pv = d.p > 0 ? Pd : P;
                    const float bq = k0 == kbeg ? 0.0f : 1.0f;
                    if (tl) {
                        /* Key rows from r0 on meet their first query block here (earlier blocks end
                         * before r0): the group's first head writes them, instead of a zeroing pass;
                         * the rows before r0 and the other heads add. */
                        int n1 = h != kh * G ? kn : r0 - k0 < 0 ? 0 : r0 - k0 < kn ? r0 - k0 : kn;
                        const uint32_t *dY2 = w.dY2 + (size_t)r0 / 2 * hs, *Q2 = w.Q2 + (size_t)r0 / 2 * hs;
                        mm_tile_pack_rows_t(w.PT, mp, w.Pb, (size_t)2 * kp, m, kn);
                        mm_tile_pack_rows_t(w.dST, mp, w.dSb, (size_t)2 * kp, m, kn);
                        tile_rows_from(n1, r0 - k0, kn, hs, mp, w.PT, dY2, dv + (size_t)k0 * ld, ld);
                        mm_tile_gemm_bf16_band(MM_BAND_KEND, r0 - k0, m, hs, kp, 1.0f, (const uint32_t *)w.dSb, kp,
                                               w.K2 + (size_t)k0 / 2 * hs, hs, bq, dq + (size_t)r0 * ld, ld);
                        tile_rows_from(n1, r0 - k0, kn, hs, mp, w.dST, Q2, dk + (size_t)k0 * ld, ld);
                    } else if (lowp) {
                        if (!fuse) rows_to_bf16(w.Pb, Pv, m, kn, kn), rows_to_bf16(w.dSb, dP, m, kn, kn);
                        mm_gemm_bf16(1, 0, kn, hs, m, 1.0f, w.Pb, kn, w.dYb + (size_t)r0 * hs, hs, 1.0f,
                                     dv + (size_t)k0 * ld, ld);
                        mm_gemm_bf16(0, 0, m, hs, kn, 1.0f, w.dSb, kn, w.Kb + (size_t)k0 * hs, hs, bq,
                                     dq + (size_t)r0 * ld, ld);
                        mm_gemm_bf16(1, 0, kn, hs, m, 1.0f, w.dSb, kn, w.Qb + (size_t)r0 * hs, hs, 1.0f,
                                     dk + (size_t)k0 * ld, ld);
                    } else {
                        mm_sgemm(1, 0, kn, hs, m, 1.0f, Pv, kn, dy + (size_t)r0 * C, C, 1.0f, dv + (size_t)k0 * ld, ld);
                        mm_sgemm(0, 0, m, hs, kn, 1.0f, dP, kn, k + (size_t)k0 * ld, ld, bq, dq + (size_t)r0 * ld,
                                 ld);
                        mm_sgemm(1, 0, kn, hs, m, 1.0f, dP, kn, q + (size_t)r0 * ld, ld, 1.0f, dk + (size_t)k0 * ld,
                                 ld);
                    }
                }
            }
        }
    }
}

/* The GPT-2 attention is GQA with one KV head per query head. */
void attention_forward(float *out, float *lse, float *scratch, const float *qkv, int B, int T, int C, int NH,
                       Dropout d, int lowp, int nt) {
    attention_gqa_forward(out, lse, scratch, qkv, NULL, B, T, NH, NH, C / NH, 1.0f / sqrtf((float)(C / NH)), d, lowp, nt);
}

void attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *out,
                        const float *lse, int B, int T, int C, int NH, Dropout d, int lowp, int nt) {
    attention_gqa_backward(dqkv, scratch, dout, qkv, out, lse, NULL, B, T, NH, NH, C / NH, 1.0f / sqrtf((float)(C / NH)), d,
                           lowp, nt);
}

/* ------------------------------------------------------------------------------------------ */
/* Decoding: one query token over the KV cache                                                */
/* ------------------------------------------------------------------------------------------ */

/* The loop infer.c ran on the host before the cache moved behind the seam, unchanged (so CPU
 * sampling keeps its bits): per head the scores into scratch, their max, exp and sum in row order,
 * then the weighted sum of the value rows in row order. */
void attention_decode_forward(float *out, float *scores, const float *q, const float *K, const float *V, int pos,
                              int NH, int KV, int hs, float scale, int nt) {
    (void)nt;
    int G = NH / KV, kvw = KV * hs;
    for (int h = 0; h < NH; h++) {
        const float *qh = q + h * hs;
        int off = (h / G) * hs;
        float mx = -INFINITY, s = 0;
        for (int j = 0; j <= pos; j++) {
            const float *k = K + (size_t)j * kvw + off;
            float d = 0;
            for (int i = 0; i < hs; i++) d += qh[i] * k[i];
            scores[j] = d * scale;
            mx = scores[j] > mx ? scores[j] : mx;
        }
        for (int j = 0; j <= pos; j++) s += scores[j] = expf(scores[j] - mx);
        float *y = out + h * hs;
        memset(y, 0, hs * sizeof(float));
        for (int j = 0; j <= pos; j++) {
            const float *v = V + (size_t)j * kvw + off;
            float w = scores[j] / s;
            for (int i = 0; i < hs; i++) y[i] += w * v[i];
        }
    }
}
