/* matmul_pack.c — large bf16 GEMMs on vdpbf16ps with packed operands (matmul.h, mm_pack_gemm_bf16).
 *
 * Why: on Zen 5 at 2 threads oneDNN 2.6's bf16 matmul runs the layer shapes of a step at 600–720
 * GFLOP/s where the dot-product units give 870–930 (one thread: 380–430 of 465, as this kernel);
 * its threading loses the difference. This kernel: 1.05–1.13× oneDNN per layer's 12 GEMMs at 2
 * threads, 1.03× on a whole bf16 step of configs B and C (bench/results/step.md, "bf16 GEMMs on
 * packed panels").
 *
 * How it is cut. op(B) is packed into panels of NR columns, pair row by pair row (the layout
 * vdpbf16ps reads, matmul.h); op(A) is read in place when it is a row-major matrix of pair rows,
 * else packed into groups of MR rows, pair p of the group's rows side by side. The register tile is
 * MR rows × NR columns of fp32 accumulators, and each tile runs over all of K at once, so every
 * output is the sum of its pairs in order p = 0, 1, ..., then times alpha, then + bias, then + C:
 * one order, whatever the thread count, the blocking or the rows around it (oneDNN splits K on
 * some shapes; this never does). Many rows (block mode): op(B) packed whole once, each thread takes
 * an equal share of the rows (to one register tile) in blocks of at most MC_MAX rows, and runs each
 * block against every panel (the block of A stays in L2). Few rows (panel
 * mode): each thread packs one panel at a time and runs every row against it.
 *
 * Scratch, grown to the largest call and kept (as oneDNN keeps its primitives): the calling
 * thread's (op(B) packed, K·N·2 bytes rounded to panels; or in panel mode a packed op(A)), and each
 * OpenMP thread's (a block of op(A), at most MC_MAX·K·2 bytes, or a panel of op(B)). mm_pack_wanted keeps op(B)
 * under 8 M values and K under 8192.
 *
 * mm_packed_gemm_bf16 (the LM head): op(B) packed by the caller once for many calls, op(A) read in
 * place, no scratch; a K too long for L2 runs in blocks that continue C's fp32 sums. */
#include "model/matmul.h"

#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "model/matmul_simd.h"

#if defined(__AVX512F__) && defined(__AVX512BF16__)
#include <immintrin.h>

#define MR 8           /* rows of a register tile (12 × 32 measured no faster in a step) */
#define NV 3           /* 16-column vectors of a register tile */
#define NR (16 * NV)   /* columns of a B panel */
/* Rows of A a thread keeps while the panels pass (mc_rows): as many as fit, with one panel of
 * op(B), in MC_BYTES of its L2, from 96 up to 192. Zen 5 (1 MB L2): the layer weight gradients (K
 * 2048) ran best at 96 rows (128: 6% slower), the LM head's (K 1332) at 192 (2.5% faster than 96). */
#define MC_MIN 96
#define MC_MAX 192
#define MC_BYTES (600u << 10)
#define PANEL_ROWS 512 /* at most this many rows: panel mode (run_panels) */
#define PANEL_A_VALUES (2u << 20) /* ... if op(A) is read in place or packs into 8 MB */
#define PACK_AHEAD 16             /* rows of op(B) requested ahead of pack_b's reads */

/* A's pairs read in place from its bf16 rows: a uint32 view that may alias them. */
typedef uint32_t __attribute__((may_alias)) u32a;

/* R rows (1..MR) × nv vectors (1..NV, the last one's columns limited by `last`) of C from KP pairs:
 * pair p of row r at a[p·sp + r·sr], panel row p at b + p·NR. R and nv are constants at each
 * call (the switches below), so the loops unroll and the accumulators stay in registers. */
/* One pair row p into the accumulators; each row's A word masked by amask (the high half of an odd
 * K's last pair, which B holds as 0, is cleared in A too: the value past A's K columns is not ours
 * and may be a NaN). */
#define TILE_PAIR(p, amask)                                                                                        \
    do {                                                                                                           \
        __m512i bv[NV];                                                                                            \
        for (int v = 0; v < nv; v++) bv[v] = _mm512_load_si512(b + (size_t)(p) * NR + 16 * v);                     \
        for (int r = 0; r < R; r++) {                                                                              \
            __m512i av = _mm512_set1_epi32((int)(a[(size_t)(p) * sp + (size_t)r * sr] & (amask)));                 \
            for (int v = 0; v < nv; v++) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], (__m512bh)av, (__m512bh)bv[v]); \
        }                                                                                                          \
    } while (0)

/* cont: the accumulators start from C's values, and are stored as they are (alpha 1, no bias, no
 * beta: the caller's K blocks after the first, so that an output summed in blocks is the same fp32
 * chain as one summed at once). odd: the last pair is that of an odd K (TILE_PAIR). */
static inline __attribute__((always_inline)) void tile(const int R, const int nv, __mmask16 last, int KP, float alpha,
                                                       const u32a *a, size_t sp, size_t sr, const uint32_t *b,
                                                       const float *bias, int beta1, float *C, int ldc, int cont,
                                                       int odd) {
    __m512 acc[MR][NV];
    for (int r = 0; r < R; r++)
        for (int v = 0; v < nv; v++) {
            if (cont) {
                acc[r][v] = _mm512_maskz_loadu_ps(v == nv - 1 ? last : (__mmask16)0xFFFF, C + (size_t)r * ldc + 16 * v);
                continue;
            }
            acc[r][v] = _mm512_setzero_ps();
            /* C's lines fetched for writing now, while the pairs run: a step's outputs are cold,
             * and the stores at the end would each wait for memory */
            _mm_prefetch((const char *)(C + (size_t)r * ldc + 16 * v), _MM_HINT_ET0);
        }
    const int KF = KP - (odd ? 1 : 0); /* the pairs with both halves */
    for (int p = 0; p < KF; p++) {
        if ((p & 15) == 0) /* the rows' next cache lines of pairs, ahead of the hardware's streams */
            for (int r = 0; r < R; r++) _mm_prefetch((const char *)(a + (size_t)(p + 32) * sp + (size_t)r * sr), _MM_HINT_T0);
        TILE_PAIR(p, 0xFFFFFFFFu);
    }
    if (odd) TILE_PAIR(KF, 0xFFFFu);
    __m512 al = _mm512_set1_ps(alpha);
#pragma GCC unroll 16
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) {
            __mmask16 k = v == nv - 1 ? last : (__mmask16)0xFFFF;
            float *c = C + (size_t)r * ldc + 16 * v;
            __m512 x = cont || alpha == 1.0f ? acc[r][v] : _mm512_mul_ps(acc[r][v], al);
            if (bias) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(k, bias + 16 * v));
            if (beta1) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(k, c));
            _mm512_mask_storeu_ps(c, k, x);
        }
}

#define TILE_NV(R)                                                                   \
    switch (nv) {                                                                    \
    case 1: tile(R, 1, last, KP, alpha, a, sp, sr, b, bias, beta1, C, ldc, cont, odd); break;   \
    case 2: tile(R, 2, last, KP, alpha, a, sp, sr, b, bias, beta1, C, ldc, cont, odd); break;   \
    default: tile(R, NV, last, KP, alpha, a, sp, sr, b, bias, beta1, C, ldc, cont, odd); break; \
    }

static void tile_any(int R, int nv, __mmask16 last, int KP, float alpha, const u32a *a, size_t sp, size_t sr,
                     const uint32_t *b, const float *bias, int beta1, float *C, int ldc, int cont, int odd) {
    switch (R) {
    case 1: TILE_NV(1) break;
    case 2: TILE_NV(2) break;
    case 3: TILE_NV(3) break;
    case 4: TILE_NV(4) break;
    case 5: TILE_NV(5) break;
    case 6: TILE_NV(6) break;
    case 7: TILE_NV(7) break;
    default: TILE_NV(8) break;
    }
}

/* 16 pairs (X[r0][n], X[r1][n]) for n = 0..15 under mask k (r1 NULL: high halves 0). */
static inline __m512i pairs16(const uint16_t *r0, const uint16_t *r1, __mmask16 k) {
    __m512i lo = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, r0));
    if (!r1) return lo;
    return _mm512_or_si512(lo, _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, r1)), 16));
}

/* Panel j of op(B) (columns n0 .. n0 + nn - 1, zero beyond) into d (KP rows of NR pairs). */
static void pack_b(uint32_t *d, int tb, const uint16_t *B, int ldb, int K, int KP, int n0, int nn) {
    if (!tb) {
        /* op(B) = B (K × N row-major): pair row p interleaves rows 2p and 2p + 1. */
        for (int p = 0; p < KP; p++) {
            const uint16_t *r0 = B + (size_t)(2 * p) * ldb + n0, *r1 = 2 * p + 1 < K ? r0 + ldb : NULL;
            if (2 * p + PACK_AHEAD + 1 < K) /* the panel's rows are ldb apart: cold, the prefetchers lag */
                for (int t = PACK_AHEAD; t < PACK_AHEAD + 2; t++) /* the strip's 2·NR bytes as NR / 2 floats */
                    mm_prefetch_row((const float *)(const void *)(r0 + (size_t)t * ldb), NR / 2);
            for (int v = 0; v < NV; v++) {
                int c = nn - 16 * v;
                __m512i x = c > 0 ? pairs16(r0 + 16 * v, r1 ? r1 + 16 * v : NULL, mm_mask16(c)) : _mm512_setzero_si512();
                _mm512_store_si512(d + (size_t)p * NR + 16 * v, x);
            }
        }
        return;
    }
    /* op(B) = W^T, W (N × K row-major): row n's pairs are contiguous; transpose 16 × 16 blocks. */
    for (int v = 0; v < NV; v++) {
        int c0 = 16 * v, cn = nn - c0; /* W rows n0 + c0 .. */
        for (int p0 = 0; p0 < KP; p0 += 16) {
            int pn = KP - p0 < 16 ? KP - p0 : 16;
            __m512i r[16];
            for (int t = 0; t < 16; t++) {
                if (t >= cn) {
                    r[t] = _mm512_setzero_si512();
                    continue;
                }
                const uint16_t *w = B + (size_t)(n0 + c0 + t) * ldb + 2 * p0;
                int kk = K - 2 * p0 < 32 ? K - 2 * p0 : 32; /* values left in this row block */
                /* 32 bf16 values = 16 pairs; an odd K's last pair gets a zero high half */
                r[t] = _mm512_maskz_loadu_epi16(kk >= 32 ? 0xFFFFFFFFu : (1u << kk) - 1, w);
            }
            mm_transpose16(r);
            for (int t = 0; t < pn; t++) _mm512_store_si512(d + (size_t)(p0 + t) * NR + c0, r[t]);
        }
    }
}

/* Group g of op(A): rows i0 .. i0 + rr - 1 (rr <= MR; rows beyond are zero), pair p of row r at
 * d[p·MR + r]. */
static void pack_a(uint32_t *d, int ta, const uint16_t *A, int lda, int K, int KP, int i0, int rr) {
    if (ta) {
        /* op(A) = A^T, A (K × M row-major): pair p of row i is (A[2p][i], A[2p + 1][i]). */
        __mmask16 k = mm_mask16(rr);
        for (int p = 0; p < KP; p++) {
            const uint16_t *r0 = A + (size_t)(2 * p) * lda + i0, *r1 = 2 * p + 1 < K ? r0 + lda : NULL;
            _mm512_mask_storeu_epi32(d + (size_t)p * MR, (__mmask16)((1u << MR) - 1), pairs16(r0, r1, k));
        }
        return;
    }
    for (int r = 0; r < MR; r++)
        for (int p = 0; p < KP; p++) {
            uint32_t v = 0;
            if (r < rr) {
                const uint16_t *x = A + (size_t)(i0 + r) * lda;
                v = x[2 * p] | (uint32_t)(2 * p + 1 < K ? x[2 * p + 1] : 0) << 16;
            }
            d[(size_t)p * MR + r] = v;
        }
}

/* Scratch, grown to the largest call and kept: the calling thread's (all of op(B) packed, or all
 * of op(A) in panel mode), and each OpenMP thread's (its block of op(A), or its panel of op(B)). */
static _Thread_local uint32_t *scratch;
static _Thread_local size_t scratch_words;
static _Thread_local uint32_t *own;
static _Thread_local size_t own_words;

static uint32_t *grow(uint32_t **buf, size_t *cap, size_t words) {
    if (words > *cap) {
        free(*buf);
        *cap = 0;
        *buf = aligned_alloc(64, (words * 4 + 63) / 64 * 64);
        if (*buf) *cap = words;
    }
    return *buf;
}

/* The operands of one call, as the loops below read them. */
typedef struct {
    int ta, tb, M, N, K, KP, lda, ldb, ldc, beta1, direct;
    int odd; /* direct A with an odd K: its last pair's high half masked (tile) */
    float alpha;
    const uint16_t *A, *B;
    const float *bias;
    float *C;
} Gemm;

/* Panel j of N columns: its first column n0, its 16-column vectors nv, the last one's mask. */
static void panel_cols(int N, int j, int *n0, int *nv, __mmask16 *last) {
    int nn = N - j * NR < NR ? N - j * NR : NR;
    *n0 = j * NR, *nv = (nn + 15) / 16, *last = mm_mask16(nn - 16 * (*nv - 1));
}

/* Every panel of op(B) into dst, panel j at dst + j·KP·NR: the panels shared among the threads of
 * the enclosing parallel region (an orphaned loop). */
static void pack_panels(uint32_t *dst, int tb, const uint16_t *B, int ldb, int N, int K, int KP) {
    int NP = (N + NR - 1) / NR;
#pragma omp for schedule(static)
    for (int j = 0; j < NP; j++) pack_b(dst + (size_t)j * KP * NR, tb, B, ldb, K, KP, j * NR, N - j * NR < NR ? N - j * NR : NR);
}

/* Rows i0 .. i1 − 1 (i0 a multiple of MR) of C's panel j from the packed panel b; op(A)'s pairs in
 * place (direct) or in groups of MR rows from ap, which holds rows a0 .. onwards. */
static void rows_panel(const Gemm *g, int i0, int i1, int j, const uint32_t *b, const uint32_t *ap, int a0) {
    int n0, nv;
    __mmask16 last;
    panel_cols(g->N, j, &n0, &nv, &last);
    const float *bj = g->bias ? g->bias + n0 : NULL;
    size_t sp = g->direct ? 1 : MR, sr = g->direct ? (size_t)g->lda / 2 : 1;
    for (int i = i0; i < i1; i += MR) {
        int R = i1 - i < MR ? i1 - i : MR;
        const u32a *a = g->direct ? (const u32a *)(const void *)(g->A + (size_t)i * g->lda) : ap + (size_t)(i - a0) * g->KP;
        tile_any(R, nv, last, g->KP, g->alpha, a, sp, sr, b, bj, g->beta1, g->C + (size_t)i * g->ldc + n0, g->ldc, 0, g->odd);
    }
}

/* Rows i0 .. i1 − 1 of op(A) = A^T (A K × M row-major) into their groups of MR (as pack_a, group q
 * of the range at d + q·KP·MR): for each pair p, the range's columns of A's rows 2p and 2p + 1 read
 * whole, 16 pairs (two groups) at a time. Group by group (pack_a) read 16 bytes of each of K rows
 * per group, 8–12 % of a weight gradient's time (its dY^T). */
static void pack_at_rows(uint32_t *d, const uint16_t *A, int lda, int K, int KP, int i0, int i1) {
    const int n = i1 - i0;
    for (int p = 0; p < KP; p++) {
        const uint16_t *r0 = A + (size_t)(2 * p) * lda + i0, *r1 = 2 * p + 1 < K ? r0 + lda : NULL;
        if (2 * p + PACK_AHEAD + 1 < K) /* K rows lda apart, read a few cache lines each */
            for (int t = PACK_AHEAD; t < PACK_AHEAD + 2; t++)
                mm_prefetch_row((const float *)(const void *)(r0 + (size_t)t * lda), (n + 1) / 2);
        for (int c = 0; c < n; c += 16) {
            __m512i x = pairs16(r0 + c, r1 ? r1 + c : NULL, mm_mask16(n - c));
            uint32_t *q = d + (size_t)(c / MR) * KP * MR + (size_t)p * MR;
            _mm256_store_si256((__m256i *)(void *)q, _mm512_castsi512_si256(x));
            if (n - c > MR) /* the second group of the 16 columns */
                _mm256_store_si256((__m256i *)(void *)(q + (size_t)KP * MR), _mm512_extracti64x4_epi64(x, 1));
        }
    }
}

static void pack_a_rows(const Gemm *g, uint32_t *d, int i0, int i1) {
    if (g->ta) {
        pack_at_rows(d, g->A, g->lda, g->K, g->KP, i0, i1);
        return;
    }
    for (int i = i0; i < i1; i += MR)
        pack_a(d + (size_t)(i - i0) * g->KP, g->ta, g->A, g->lda, g->K, g->KP, i, i1 - i < MR ? i1 - i : MR);
}

/* Panel mode (few rows): each thread packs its panels of op(B) one at a time into its own buffer
 * and runs every row against it while it is in L2; op(A), where it must be packed, is packed
 * whole first. */
static int run_panels(const Gemm *g, int nt) {
    int NP = (g->N + NR - 1) / NR, G = (g->M + MR - 1) / MR, failed = 0;
    uint32_t *Ap = NULL;
    if (!g->direct && !(Ap = grow(&scratch, &scratch_words, (size_t)G * g->KP * MR))) return 0;
#pragma omp parallel num_threads(nt) if (nt > 1) reduction(| : failed)
    {
        if (!g->direct) {
            /* group by group: the packed op(A) (up to 8 MB) is written in one stream per thread;
             * pack_at_rows' four or more streams measured 2–7 % slower here */
#pragma omp for schedule(static)
            for (int q = 0; q < G; q++)
                pack_a(Ap + (size_t)q * g->KP * MR, g->ta, g->A, g->lda, g->K, g->KP, q * MR,
                       g->M - q * MR < MR ? g->M - q * MR : MR);
        }
        uint32_t *b = grow(&own, &own_words, (size_t)g->KP * NR);
        failed = !b;
        if (b) {
#pragma omp for schedule(static)
            for (int j = 0; j < NP; j++) {
                pack_b(b, g->tb, g->B, g->ldb, g->K, g->KP, j * NR, g->N - j * NR < NR ? g->N - j * NR : NR);
                rows_panel(g, 0, g->M, j, b, Ap, 0);
            }
        }
    }
    return !failed;
}

static int mc_rows(int KP) {
    long fit = ((long)MC_BYTES - (long)KP * NR * 4) / ((long)KP * 4) / MR * MR;
    return fit < MC_MIN ? MC_MIN : fit > MC_MAX ? MC_MAX : (int)fit;
}

/* Block mode (many rows): op(B) packed whole once; each thread takes its share of the rows, packs
 * each block of op(A) where needed, and runs it against every panel. The share was once whole
 * blocks of 96 rows: at 2048 rows one thread had 1056 and the other 992 (bf16_gemm: the layer's
 * 12 GEMMs 2% slower). */
static int run_blocks(const Gemm *g, int nt) {
    int NP = (g->N + NR - 1) / NR, failed = 0;
    uint32_t *Bp = grow(&scratch, &scratch_words, (size_t)NP * g->KP * NR);
    if (!Bp) return 0;
    /* Each thread its share of the MR-row groups (within one group of the others'), cut into
     * blocks of at most mc rows that differ by at most one group. */
    const int G = (g->M + MR - 1) / MR;
#pragma omp parallel num_threads(nt) if (nt > 1) reduction(| : failed)
    {
        pack_panels(Bp, g->tb, g->B, g->ldb, g->N, g->K, g->KP);
        int me = omp_get_thread_num(), n = omp_get_num_threads();
        int q0 = (int)((long)G * me / n), q1 = (int)((long)G * (me + 1) / n), nq = q1 - q0;
        const int mc = mc_rows(g->KP);
        int nb = (nq * MR + mc - 1) / mc;
        uint32_t *Ap = g->direct || !nq ? NULL : grow(&own, &own_words, (size_t)((nq + nb - 1) / nb) * MR * g->KP);
        failed = !g->direct && nq && !Ap;
        if (!failed)
            for (int ib = 0; ib < nb; ib++) {
                int i0 = (q0 + (int)((long)nq * ib / nb)) * MR, i1 = (q0 + (int)((long)nq * (ib + 1) / nb)) * MR;
                if (i1 > g->M) i1 = g->M;
                if (!g->direct) pack_a_rows(g, Ap, i0, i1);
                for (int j = 0; j < NP; j++) rows_panel(g, i0, i1, j, Bp + (size_t)j * g->KP * NR, Ap, i0);
            }
    }
    return !failed;
}

int mm_pack_gemm_bf16(int ta, int tb, int M, int N, int K, float alpha, const uint16_t *A, int lda, const uint16_t *B,
                      int ldb, float beta, float *C, int ldc, const float *bias) {
    ST_CHECK(beta == 0.0f || beta == 1.0f);
    Gemm g = {.ta = ta, .tb = tb, .M = M, .N = N, .K = K, .KP = (K + 1) / 2, .lda = lda, .ldb = ldb, .ldc = ldc,
              .beta1 = beta != 0.0f, .alpha = alpha, .A = A, .B = B, .bias = bias, .C = C};
    /* op(A) read in place: row-major pair rows (even K, even lda, 4-byte aligned). */
    g.direct = !ta && K % 2 == 0 && lda % 2 == 0 && ((uintptr_t)A & 3) == 0;
    int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
    /* Few rows: packing all of op(B) for them costs more than its panels one by one in L2. */
    if (M <= PANEL_ROWS && (g.direct || (size_t)M * K <= PANEL_A_VALUES)) return run_panels(&g, nt);
    return run_blocks(&g, nt);
}

/* ---- op(B) packed once, for many calls (the LM head's weight) ---- */

size_t mm_packed_b_words(int N, int K) { return (size_t)((N + NR - 1) / NR) * (size_t)((K + 1) / 2) * NR; }

int mm_pack_b_bf16(uint32_t *dst, int tb, int N, int K, const uint16_t *B, int ldb) {
    int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
#pragma omp parallel num_threads(nt) if (nt > 1)
    pack_panels(dst, tb, B, ldb, N, K, (K + 1) / 2);
    return 1;
}

/* K blocks of the many-pair calls (the head's input gradient, K = the vocabulary). Each block after
 * the first reloads the thread's rows of C; 1024 to 2048 pairs measured best on Zen 5 at C 384 and
 * 768 (`head_gemm`: 1.1–1.2× oneDNN; 128 pairs, with everything in L2, ran 0.9×). */
#define KB_PAIRS 1024
/* Up to this many pairs, one pass over K with the threads taking panels (the logits: K = C). */
#define ONE_PASS_PAIRS 2048

int mm_packed_gemm_bf16(int M, int N, int K, const uint16_t *A, int lda, const uint32_t *Bp, float *C, int ldc) {
    if (lda % 2 || ((uintptr_t)A & 3)) return 0;
    const int NP = (N + NR - 1) / NR, KP = (K + 1) / 2, odd = K % 2;
    const size_t sr = (size_t)lda / 2;
    const u32a *A32 = (const u32a *)(const void *)A;
    int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
    if (KP <= ONE_PASS_PAIRS) {
        /* Threads take panels; each runs every row against its panel (A's rows stay in L2). */
        Gemm g = {.M = M, .N = N, .K = K, .KP = KP, .lda = lda, .ldc = ldc, .direct = 1, .odd = odd, .alpha = 1.0f,
                  .A = A, .C = C};
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
        for (int j = 0; j < NP; j++) rows_panel(&g, 0, M, j, Bp + (size_t)j * KP * NR, NULL, 0);
        return 1;
    }
    /* Many pairs (the head's input gradient: K = the vocabulary): threads take row ranges (whole
     * register tiles), and run K in blocks, every panel per block; a block after the first starts
     * from the partial sums in C, so each output is still its pairs summed in order. */
    int G = (M + MR - 1) / MR;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int me = omp_get_thread_num(), n = omp_get_num_threads();
        int i0 = (int)((long)G * me / n) * MR, i1 = (int)((long)G * (me + 1) / n) * MR;
        if (i1 > M) i1 = M;
        for (int p0 = 0; p0 < KP; p0 += KB_PAIRS) {
            int kn = KP - p0 < KB_PAIRS ? KP - p0 : KB_PAIRS, final = p0 + kn == KP;
            for (int j = 0; j < NP; j++) {
                int n0, nv;
                __mmask16 last;
                panel_cols(N, j, &n0, &nv, &last);
                const uint32_t *b = Bp + (size_t)j * KP * NR + (size_t)p0 * NR;
                for (int i = i0; i < i1; i += MR)
                    tile_any(i1 - i < MR ? i1 - i : MR, nv, last, kn, 1.0f, A32 + (size_t)i * sr + p0, 1, sr, b, NULL, 0,
                             C + (size_t)i * ldc + n0, ldc, p0 > 0, final && odd);
            }
        }
    }
    return 1;
}

#else

size_t mm_packed_b_words(int N, int K) {
    (void)N, (void)K;
    return 0;
}

int mm_pack_b_bf16(uint32_t *dst, int tb, int N, int K, const uint16_t *B, int ldb) {
    (void)dst, (void)tb, (void)N, (void)K, (void)B, (void)ldb;
    return 0;
}

int mm_packed_gemm_bf16(int M, int N, int K, const uint16_t *A, int lda, const uint32_t *Bp, float *C, int ldc) {
    (void)M, (void)N, (void)K, (void)A, (void)lda, (void)Bp, (void)C, (void)ldc;
    return 0;
}

int mm_pack_gemm_bf16(int ta, int tb, int M, int N, int K, float alpha, const uint16_t *A, int lda, const uint16_t *B,
                      int ldb, float beta, float *C, int ldc, const float *bias) {
    (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda, (void)B, (void)ldb, (void)beta;
    (void)C, (void)ldc, (void)bias;
    return 0;
}

#endif
