/* rng.c — Philox4x32-10 and the distributions built on it. */
#include "core/rng.h"

#include <math.h>

void rng_philox(uint64_t seed, uint64_t stream, uint64_t index, uint32_t out[4]) {
    rng_philox_inline(seed, stream, index, out);
}

float rng_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
    uint32_t w[4];
    rng_philox(seed, stream, index >> 2, w);
    return rng_unit24(w[index & 3]);
}

float rng_normal(uint64_t seed, uint64_t stream, uint64_t index) {
    uint32_t w[4];
    rng_philox(seed, stream, index, w);
    /* 53-bit uniforms; u1 in (0,1] so the log is finite. */
    double u1 = ((((uint64_t)w[0] << 21) ^ (w[1] >> 11)) + 1.0) * (1.0 / 9007199254740992.0);
    double u2 = (((uint64_t)w[2] << 21) ^ (w[3] >> 11)) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

uint64_t rng_below(uint64_t seed, uint64_t stream, uint64_t index, uint64_t n) {
    /* Rejection on a 64-bit draw; the retry counter goes into the upper index bits. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    for (uint64_t attempt = 0;; attempt++) {
        uint32_t w[4];
        rng_philox(seed, stream ^ (attempt << 48), index, w);
        uint64_t x = ((uint64_t)w[0] << 32) | w[1];
        if (x < limit) return x % n;
    }
}
