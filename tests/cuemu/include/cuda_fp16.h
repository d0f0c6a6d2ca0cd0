/* cuda_fp16.h — the CPU emulation of CUDA (tests/cuemu): IEEE half conversions by the CPU's F16C
 * instructions (round to nearest even), independent of core/half.h's integer rounding. */
#ifndef CUEMU_CUDA_FP16_H
#define CUEMU_CUDA_FP16_H
#include <immintrin.h>
#include <stdint.h>

struct __half {
    uint16_t bits;
};
static inline __half __float2half_rn(float x) {
    __half h;
    h.bits = (uint16_t)_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return h;
}
static inline float __half2float(__half h) { return _cvtsh_ss(h.bits); }
static inline unsigned short __half_as_ushort(__half h) { return h.bits; }
static inline __half __ushort_as_half(unsigned short u) {
    __half h;
    h.bits = u;
    return h;
}
#endif
