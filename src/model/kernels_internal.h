/* kernels_internal.h — what the kernel files (kernels.c, kernels_attention.c, kernels_head.c) share
 * and nothing else includes. */
#ifndef ST_MODEL_KERNELS_INTERNAL_H
#define ST_MODEL_KERNELS_INTERNAL_H

#include "core/rng.h"
#include "model/kernels.h"

/* Bias gradients: column blocks of 64, each summed over the rows in order by one thread, so the
 * sums do not depend on the thread count; the fused variants keep that order bit for bit. */
#define COLSUM_BLOCK 64

/* Dropout's factor for element i of site d: 0 (dropped) or 1/(1 − p) (kept). */
static inline float drop_scale(Dropout d, uint64_t i) {
    return rng_uniform(d.seed, d.stream, i + d.offset) >= d.p ? 1.0f / (1.0f - d.p) : 0.0f;
}

#endif
