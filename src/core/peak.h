/* peak.h — measured peak fp32 FLOP/s of this machine (for MFU) and build information. */
#ifndef ST_CORE_PEAK_H
#define ST_CORE_PEAK_H

#include <stddef.h>

/* Runs an FMA loop with independent accumulators on nt threads for about `ms` milliseconds and
 * returns the achieved fp32 FLOP/s (2 per FMA lane). */
double peak_measure_fp32(int nt, double ms);

/* The probe's loop on one thread: every lane of its accumulators starts at a0 and takes `iters`
 * steps acc = fma(acc, m, c), one rounding each; returns their mean (exact: all lanes are equal).
 * Public for test_peak, which checks that a step rounds once. */
float peak_fma_block(long iters, float a0, float m, float c);

/* The same for bf16 dot products (AVX512-BF16 vdpbf16ps: 2 FLOPs per bf16 pair); 0 when the
 * build's target has no bf16 instructions. */
double peak_measure_bf16(int nt, double ms);

/* Memory bandwidth in bytes/s: the best of the passes of a parallel copy of `bytes` (read + write
 * counted) on nt threads in half a second (at least 5, at most 64). */
double peak_measure_bandwidth(int nt, size_t bytes);

/* Compiler and git commit this binary was built from. */
const char *build_compiler(void);
const char *build_git_commit(void);

#endif
