/* rng.h — counter-based random numbers (Philox4x32-10, Salmon et al. 2011).
 *
 * A value depends only on (seed, stream, index), never on thread or rank count, so
 * initialisation and dropout are reproducible however the work is split. "stream" names what
 * the numbers are for (a tensor id, a dropout site); "index" is the element position. */
#ifndef ST_CORE_RNG_H
#define ST_CORE_RNG_H

#include <stdint.h>

/* Four independent 32-bit words for (seed, stream, index). */
void rng_philox(uint64_t seed, uint64_t stream, uint64_t index, uint32_t out[4]);

/* Uniform in [0, 1) with 24 bits of resolution, from word `lane` (0..3) of the block at index/4. */
float rng_uniform(uint64_t seed, uint64_t stream, uint64_t index);

/* Standard normal N(0,1) for element `index` of stream (Box–Muller on one Philox block). */
float rng_normal(uint64_t seed, uint64_t stream, uint64_t index);

/* Uniform integer in [0, n) for draw `index` of stream (unbiased, 64-bit). */
uint64_t rng_below(uint64_t seed, uint64_t stream, uint64_t index, uint64_t n);

#endif
