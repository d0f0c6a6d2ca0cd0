/* peak.h — measured peak fp32 FLOP/s of this machine (for MFU) and build information. */
#ifndef ST_CORE_PEAK_H
#define ST_CORE_PEAK_H

#include <stddef.h>

/* Runs an FMA loop with independent accumulators on nt threads for about `ms` milliseconds and
 * returns the achieved fp32 FLOP/s (2 per FMA lane). */
double peak_measure_fp32(int nt, double ms);

/* The same for bf16 dot products (AVX512-BF16 vdpbf16ps: 2 FLOPs per bf16 pair); 0 when the
 * build's target has no bf16 instructions. */
double peak_measure_bf16(int nt, double ms);

/* Memory bandwidth in bytes/s: best of a few passes of a parallel copy of `bytes` (read + write
 * counted), on nt threads. */
double peak_measure_bandwidth(int nt, size_t bytes);

/* Compiler and git commit this binary was built from. */
const char *build_compiler(void);
const char *build_git_commit(void);

#endif
