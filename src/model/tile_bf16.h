/* tile_bf16.h — small bf16 GEMMs on the AVX-512 bf16 dot-product instruction (vdpbf16ps), called
 * inline without a library: attention's 64-query blocks (kernels_attention.c), where oneDNN's
 * per-call cost (about 3 µs, bench/results/step.md) and its small-shape kernels held the bf16
 * attention to 30–80 % of the 512³ GEMM's rate.
 *
 * Operands are "pair" layouts, the one vdpbf16ps reads: a uint32 holds two bf16 values adjacent
 * along the reduction dimension k (low half k even, high half k + 1; a bf16 value is the high 16
 * bits of its fp32). K is counted in pairs (KP = ceil(K / 2)); an odd K's last pair carries a zero.
 *   A (M × K), pair rows: pair p of row i is A[i·lda + p] = (A[i][2p], A[i][2p + 1]). A row-major
 *     bf16 matrix with an even row length is already this (lda = row length / 2).
 *   B (K × N), packed pairs: pair row p holds the N pairs B[p·ldb + n] = (B[2p][n], B[2p + 1][n]).
 *     For B = X^T with X (N × K) row-major bf16, this is X's pairs transposed (tile_pack_t);
 *     for B = X (K × N) row-major, rows 2p and 2p + 1 of X interleaved (tile_pack_rows).
 * Each fp32 output is the sum over pairs in order p = 0, 1, ..., the two products of a pair
 * added by the instruction: a fixed order, independent of the thread count.
 *
 * Available only where the compiler targets AVX512_BF16 (Release's -march=native on Zen 4/5,
 * Cooper Lake, Sapphire Rapids); tile_bf16_available() says so, and callers use oneDNN otherwise. */
#ifndef ST_MODEL_TILE_BF16_H
#define ST_MODEL_TILE_BF16_H

#include <stddef.h>
#include <stdint.h>

/* 1 when this build has the kernels (compiled for AVX512_BF16). */
int tile_bf16_available(void);

/* C (M × N, ldc floats) = alpha · A · B + beta · C, beta 0 or 1; A, B as in the header, KP pairs.
 * No allocation; C is read (beta 1) and written only inside its M × N. Aborts if unavailable. */
void tile_gemm_bf16(int M, int N, int KP, float alpha, const uint32_t *A, int lda, const uint32_t *B, int ldb,
                    float beta, float *C, int ldc);

/* dst (KP × N pairs, row stride ldd) = the packed-pair form of X^T, X (N rows × K columns) fp32 with
 * leading dimension ldx, rounded to bf16 (KP = ceil(K / 2); an odd K's last pair carries 0). */
void tile_pack_t(uint32_t *dst, int ldd, const float *X, size_t ldx, int N, int K);
/* dst (N rows × (R + 1) / 2 pairs, row stride ldd) = the pair rows of X^T, X (R rows × N columns,
 * bf16, leading dimension ldx): dst[n·ldd + p] = (X[2p][n], X[2p + 1][n]); an odd R's last pair
 * carries 0. The A operand of X^T · Y. */
void tile_pack_rows_t(uint32_t *dst, int ldd, const uint16_t *X, size_t ldx, int R, int N);
/* dst ((R + 1) / 2 pair rows × N, row stride ldd) = rows 2p and 2p + 1 of X (R rows × N columns,
 * fp32, leading dimension ldx) interleaved, rounded to bf16; an odd R's last pair carries 0. */
void tile_pack_rows(uint32_t *dst, int ldd, const float *X, size_t ldx, int R, int N);

#endif
