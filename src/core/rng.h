/* rng.h — counter-based random numbers (Philox4x32-10, Salmon et al. 2011).
 *
 * A value depends only on (seed, stream, index), never on thread or rank count, so
 * initialisation and dropout are reproducible however the work is split. "stream" names what
 * the numbers are for (a tensor id, a dropout site); "index" is the element position. */
#ifndef ST_CORE_RNG_H
#define ST_CORE_RNG_H

#include <stdint.h>

#include "core/hostdev.h"

/* Four independent 32-bit words for (seed, stream, index). */
void rng_philox(uint64_t seed, uint64_t stream, uint64_t index, uint32_t out[4]);

/* The same, inline: a loop over blocks (dropout's masks) can then be vectorized by the compiler. */
static inline ST_HD void rng_philox_inline(uint64_t seed, uint64_t stream, uint64_t index, uint32_t out[4]) {
    uint32_t c0 = (uint32_t)index, c1 = (uint32_t)(index >> 32);
    uint32_t c2 = (uint32_t)stream, c3 = (uint32_t)(stream >> 32);
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0;
        uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n1 = (uint32_t)p1;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        uint32_t n3 = (uint32_t)p0;
        c0 = n0, c1 = n1, c2 = n2, c3 = n3;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

/* A Philox word as a uniform in [0, 1): its top 24 bits (rng_uniform, dropout's factors). */
static inline ST_HD float rng_unit24(uint32_t x) { return (float)(x >> 8) * (1.0f / 16777216.0f); }

/* Uniform in [0, 1) with 24 bits of resolution, from word `lane` (0..3) of the block at index/4. */
float rng_uniform(uint64_t seed, uint64_t stream, uint64_t index);

/* Standard normal N(0,1) for element `index` of stream (Box–Muller on one Philox block). */
float rng_normal(uint64_t seed, uint64_t stream, uint64_t index);

/* Uniform integer in [0, n) for draw `index` of stream (unbiased, 64-bit). */
uint64_t rng_below(uint64_t seed, uint64_t stream, uint64_t index, uint64_t n);

#endif
