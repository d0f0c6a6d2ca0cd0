/* rng.c — Philox4x32-10 and the distributions built on it. */
#include "core/rng.h"

#include <math.h>

void rng_philox(uint64_t seed, uint64_t stream, uint64_t index, uint32_t out[4]) {
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

float rng_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
    uint32_t w[4];
    rng_philox(seed, stream, index >> 2, w);
    return (float)(w[index & 3] >> 8) * (1.0f / 16777216.0f);
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
