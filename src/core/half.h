/* half.h — fp32 rounded to the 2-byte formats of mixed precision, round to nearest even: bf16
 * bits (by integer arithmetic, vectorizes) and fp16 bits (overflow gives inf). Shared by the
 * model's kernels and the optimizer's fused update of the working copy, which must agree bit for
 * bit. A NaN stays a NaN of the same sign, made quiet (its high 16 bits with bit 6 set): the rule
 * of vcvtneps2bf16, the CUDA backend's cu_bf16 and the safetensors export. Rounding a NaN like a
 * number carried it into the exponent: a payload in the low bits gave ±inf, an all-ones one
 * (0x7FFFFFFF) −0, and a NaN in a weight or gradient vanished from the bf16 copy. */
#ifndef ST_CORE_HALF_H
#define ST_CORE_HALF_H

#include <stdint.h>
#include <string.h>

#include "core/hostdev.h"

/* half_bf16 on the float's bits (the CUDA backend's cu_bf16 too). */
static inline ST_HD uint16_t half_bf16_bits(uint32_t u) {
    return (u & 0x7FFFFFFFu) > 0x7F800000u ? (uint16_t)((u >> 16) | 0x40u)
                                           : (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

static inline uint16_t half_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return half_bf16_bits(u);
}

#ifndef __CUDACC__ /* _Float16 is the host compiler's (the device rounds with __float2half_rn) */
static inline uint16_t half_fp16(float x) {
    _Float16 h = (_Float16)x;
    uint16_t u;
    memcpy(&u, &h, sizeof u);
    return u;
}
#endif

#endif
