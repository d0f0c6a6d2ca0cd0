/* matmul.h — the one GEMM entry point of the model (DESIGN.md §6): oneDNN's matmul, and for
 * attention's small bf16 blocks the inline tiles at the end of this header.
 *
 * Row-major C = alpha · op(A) · op(B) + beta · C, op = identity or transpose, beta 0 or 1.
 * Backend: oneDNN's matmul primitive, chosen by measurement (bench/results/gemm.md): it runs
 * AVX-512 kernels on this CPU by itself, where Debian's OpenBLAS falls back to Haswell kernels
 * (4x slower) unless an environment variable is set before the process starts, and it runs bf16
 * on the bf16 dot-product units. Primitives are cached per shape in a small per-thread table (one
 * per thread, so calls from inside an OpenMP region need no lock); inside a parallel region a
 * call runs on the calling thread only.
 *
 * Errors. A GEMM that cannot run (oneDNN cannot create its primitive: out of memory, a shape it
 * refuses; no memory for the cache; execution fails) does not abort: it leaves C unwritten and
 * records the failure with the GEMM's shape and oneDNN's status. The first failure wins until it
 * is taken. GEMMs run deep inside kernels, many on OpenMP worker threads, which cannot return a
 * status, so the record is process state like the primitive cache (thread-safe), and it is taken
 * between kernels: the model does so after each forward and backward (gpt_status in gpt.h);
 * other callers of the kernels take it themselves. */
#ifndef ST_MODEL_MATMUL_H
#define ST_MODEL_MATMUL_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

/* fp32 inputs and output. */
void mm_sgemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc);

/* bf16 inputs (raw uint16 bit patterns), fp32 output and accumulation. */
void mm_gemm_bf16(int trans_a, int trans_b, int M, int N, int K, float alpha, const uint16_t *A, int lda,
                  const uint16_t *B, int ldb, float beta, float *C, int ldc);

/* A linear layer's forward in one primitive: C (M, N) = A (M, K) · W^T (W is (N, K)) + bias (N;
 * may be NULL), the bias added inside the GEMM instead of in a second pass over C. */
void mm_linear(int M, int N, int K, const float *A, const float *W, const float *bias, float *C);
void mm_linear_bf16(int M, int N, int K, const uint16_t *A, const uint16_t *W, const float *bias, float *C);

/* The first GEMM failure since the last call, as ST_ERR_RUNTIME with its message (e.g.
 * "GEMM 64x96x32 (fp32, A·B^T + bias): oneDNN out_of_memory creating the primitive"), which it
 * forgets; ST_OK if none. Call it from one thread while no GEMM runs. */
Status mm_take_error(Err *err);

/* Test-only fault: the n-th GEMM call from now (n >= 1, counted over all threads) fails as if
 * oneDNN had run out of memory creating its primitive; 0 cancels. */
void mm_fail_after(long n);

/* Test-only: the FLOPs (2·M·N·K each) of the GEMMs run since the previous call, while counting was
 * on; counting is then on (on = 1) or off from here. The oracle of what a step computes (test_lora:
 * the base's weight gradients a frozen model skips). */
long long mm_count_flops(int on);

/* Sets the thread count of our OpenMP regions and of the GEMM library (one pool: libgomp). */
void mm_set_threads(int n);

/* "oneDNN 2.6.3 (cpu, omp)" for the start record. */
const char *mm_backend_info(void);

/* ---- Large bf16 GEMMs on packed panels (matmul_pack.c) ------------------------------------------ */

/* C = alpha · op(A) · op(B) (+ bias, N floats, or NULL) + beta · C, bf16 operands as mm_gemm_bf16's,
 * on vdpbf16ps with op(B) packed into column panels, threaded over the caller's OpenMP threads
 * (inside a parallel region: on the calling thread alone). Each output is the sum of its K/2 pairs in order, then
 * alpha, bias, C: the same bits at any thread count. mm_gemm_bf16 and mm_linear_bf16 take this path
 * for the layer shapes (mm_pack_wanted): by default where mm_tile_preferred() (AVX512_BF16 without
 * AMX: Zen 4/5), else as mm_pack_enable / ST_BF16_GEMM say. Returns 0 without touching C when its
 * scratch cannot be allocated, or when the build has no AVX512_BF16. */
int mm_pack_gemm_bf16(int trans_a, int trans_b, int M, int N, int K, float alpha, const uint16_t *A, int lda,
                      const uint16_t *B, int ldb, float beta, float *C, int ldc, const float *bias);

/* 1 when mm_gemm_bf16 / mm_linear_bf16 run this shape on mm_pack_gemm_bf16: enabled, and decided
 * by N and K alone (matmul.c), so row ranges of a GEMM take the path of the whole. Enabled by
 * default where mm_tile_preferred(); mm_pack_enable(1) turns it on (where the build has the
 * kernels, AMX or not), 0 off: every bf16 GEMM on oneDNN. */
int mm_pack_wanted(int M, int N, int K);
void mm_pack_enable(int on);

/* op(B) packed once and used by many calls (the bf16 LM head's weight, packed once per forward in
 * the two layouts its logits and input gradient read). mm_packed_b_words: the uint32 words of the
 * packed op(B) (K × N), 0 in a build without the kernels. mm_pack_b_bf16: packs op(B) = B (tb 0:
 * B is K × N row-major) or Bᵀ (tb 1: B is N × K row-major) into dst, threaded as above; 0 in a build
 * without the kernels. mm_packed_gemm_bf16: C (M × N, ldc) = A · op(B), A (M × K row-major bf16,
 * lda even, A 4-byte aligned) read in place, alpha 1, beta 0; K may be odd (A's value past column
 * K − 1 is never used). Each output is the sum of its pairs in order, as mm_pack_gemm_bf16's, also
 * where a large K runs in blocks. Returns 0 without touching C when A's layout does not fit or the
 * build has no kernels. mm_head_pack_wanted: 1 when a bf16 head call over `rows` rows takes this
 * path: the packed GEMMs enabled (mm_pack_wanted's switch) and rows >= 256. Below that the packing
 * (5 ms at C 384, 10 ms at C 768 on a 2-core Zen 5) costs more than the faster GEMMs save
 * (`head_gemm`: at 128 rows 28.7 vs 26.7 ms and 61 vs 56 ms on oneDNN; at 256, 98–118 vs 118–154). */
size_t mm_packed_b_words(int N, int K);
int mm_pack_b_bf16(uint32_t *dst, int tb, int N, int K, const uint16_t *B, int ldb);
int mm_packed_gemm_bf16(int M, int N, int K, const uint16_t *A, int lda, const uint32_t *Bp, float *C, int ldc);
int mm_head_pack_wanted(long rows);

/* Reads ST_BF16_GEMM once at start: unset (the default above), "onednn" (off) or "packed" (on);
 * anything else, or "packed" in a build without the kernels, is ST_ERR_INPUT with one line naming
 * the variable. */
Status mm_gemm_env(Err *err);

/* ---- Small bf16 tiles (matmul_tile.c) ---------------------------------------------------------- */

/* Small bf16 GEMMs on the AVX-512 bf16 dot-product instruction (vdpbf16ps), run in the caller's
 * thread without a library call: attention's 64-query blocks (kernels_attention.c), where oneDNN's
 * per-call cost (about 3 µs, bench/results/step.md) and its small-shape kernels held the bf16
 * attention to 30–80 % of the 512³ GEMM's rate.
 *
 * Operands are "pair" layouts, the one vdpbf16ps reads: a uint32 holds two bf16 values adjacent
 * along the reduction dimension k (low half k even, high half k + 1; a bf16 value is the high 16
 * bits of its fp32). K is counted in pairs (KP = ceil(K / 2)); an odd K's last pair carries a zero.
 *   A (M × K), pair rows: pair p of row i is A[i·lda + p] = (A[i][2p], A[i][2p + 1]). A row-major
 *     bf16 matrix with an even row length is already this (lda = row length / 2).
 *   B (K × N), packed pairs: pair row p holds the N pairs B[p·ldb + n] = (B[2p][n], B[2p + 1][n]).
 *     For B = X^T with X (N × K) row-major bf16, this is X's pairs transposed (mm_tile_pack_t);
 *     for B = X (K × N) row-major, rows 2p and 2p + 1 of X interleaved (mm_tile_pack_rows).
 * Each fp32 output is the sum over pairs in order p = 0, 1, ..., the two products of a pair
 * added by the instruction, then times alpha, then + C: a fixed order, independent of the thread
 * count, and the one oneDNN 2.6's bf16 kernels follow on Zen 4 (mm_gemm_bf16 gives the same bits
 * there; bench/results/step.md). Roundings to bf16 are half_bf16's (to nearest, ties to even).
 *
 * Available only where the compiler targets AVX512_BF16 (Release's -march=native on Zen 4/5,
 * Cooper Lake, Sapphire Rapids); mm_tile_available() says so, and callers use oneDNN otherwise.
 * These calls cannot fail (no primitive, no allocation): nothing is recorded for mm_take_error. */

/* 1 when this build has the kernels (compiled for AVX512_BF16). */
int mm_tile_available(void);

/* 1 when callers should use them: available, and the CPU has no AMX-BF16 (there oneDNN's AMX
 * GEMMs are the faster path; measured only on Zen 4, without AMX, so far). */
int mm_tile_preferred(void);

/* C (M × N, ldc floats) = alpha · A · B + beta · C, beta 0 or 1; A, B as in the header, KP pairs.
 * No allocation; C is read (beta 1) and written only inside its M × N. Aborts if unavailable. */
void mm_tile_gemm_bf16(int M, int N, int KP, float alpha, const uint32_t *A, int lda, const uint32_t *B, int ldb,
                       float beta, float *C, int ldc);

/* Causal attention's GEMMs skip what its mask makes zero or unused. With query rows and key
 * columns numbered from the call's first, query row i sees keys j <= i + d:
 *   MM_BAND_COLS (S = Q·Kᵀ, dP = dY·Vᵀ; rows are queries, columns keys): C's columns past a row's
 *     last key may be left unwritten (computed up to its 4-row tile's and 16-column vector's end);
 *   MM_BAND_KEND (P·V, dS·K; rows are queries, pairs keys): A's pairs past a tile's last key are
 *     zero and skipped;
 *   MM_BAND_KBEG (Pᵀ·dY, dSᵀ·Q; rows are keys, pairs queries): A's pairs before a tile's first
 *     query are zero and skipped.
 * Every output written is the same sum as mm_tile_gemm_bf16's bit for bit where the skipped
 * products are zero (a zero pair times finite B adds +0 to a sum that starts at +0 and is never
 * −0 or denormal after vdpbf16ps); the skipped pairs of A and B are never read. */
typedef enum { MM_BAND_NONE, MM_BAND_COLS, MM_BAND_KEND, MM_BAND_KBEG } MmBand;
void mm_tile_gemm_bf16_band(MmBand band, int d, int M, int N, int KP, float alpha, const uint32_t *A, int lda,
                            const uint32_t *B, int ldb, float beta, float *C, int ldc);

/* dst (KP × N pairs, row stride ldd) = the packed-pair form of X^T, X (N rows × K columns) fp32 with
 * leading dimension ldx, rounded to bf16 (KP = ceil(K / 2); an odd K's last pair carries 0). */
void mm_tile_pack_t(uint32_t *dst, int ldd, const float *X, size_t ldx, int N, int K);
/* dst (N rows × (R + 1) / 2 pairs, row stride ldd) = the pair rows of X^T, X (R rows × N columns,
 * bf16, leading dimension ldx): dst[n·ldd + p] = (X[2p][n], X[2p + 1][n]); an odd R's last pair
 * carries 0. The A operand of X^T · Y. */
void mm_tile_pack_rows_t(uint32_t *dst, int ldd, const uint16_t *X, size_t ldx, int R, int N);
/* dst ((R + 1) / 2 pair rows × N, row stride ldd) = rows 2p and 2p + 1 of X (R rows × N columns,
 * fp32, leading dimension ldx) interleaved, rounded to bf16; an odd R's last pair carries 0. */
void mm_tile_pack_rows(uint32_t *dst, int ldd, const float *X, size_t ldx, int R, int N);

#endif
