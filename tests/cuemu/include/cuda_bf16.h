/* cuda_bf16.h — the CPU emulation of CUDA (tests/cuemu): the bf16 type as bits, with round-to-
 * nearest-even conversion (the hardware's __float2bfloat16). */
#ifndef CUEMU_CUDA_BF16_H
#define CUEMU_CUDA_BF16_H
#include <stdint.h>
#include <string.h>

struct __nv_bfloat16 {
    uint16_t bits;
};
static inline __nv_bfloat16 __float2bfloat16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    __nv_bfloat16 h;
    h.bits = (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
    return h;
}
static inline float __bfloat162float(__nv_bfloat16 h) {
    uint32_t u = (uint32_t)h.bits << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}
#endif
