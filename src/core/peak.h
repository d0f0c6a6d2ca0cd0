/* peak.h — measured peak fp32 FLOP/s of this machine (for MFU) and build information. */
#ifndef ST_CORE_PEAK_H
#define ST_CORE_PEAK_H

/* Runs an FMA loop with independent accumulators on nt threads for about `ms` milliseconds and
 * returns the achieved fp32 FLOP/s (2 per FMA lane). */
double peak_measure_fp32(int nt, double ms);

/* Compiler and git commit this binary was built from. */
const char *build_compiler(void);
const char *build_git_commit(void);

#endif
