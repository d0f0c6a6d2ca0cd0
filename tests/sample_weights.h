/* sample_weights.h — the random weights of the generation tests (test_sample, test_device_sample):
 * matrices N(0, 0.2), wpe N(0, 0.5) so positions matter, vectors N(0, 0.1) (the norms' weights
 * around 1), the padded vocabulary rows zero. Far from uniform logits, so a wrong token shows. */
#ifndef ST_TESTS_SAMPLE_WEIGHTS_H
#define ST_TESTS_SAMPLE_WEIGHTS_H

#include <stdint.h>
#include <string.h>

#include "core/rng.h"
#include "model/gpt.h"

static inline void sample_fill_weights(const ParamLayout *pl, float *p, uint64_t seed) {
    memset(p, 0, pl->total * sizeof(float));
    for (int k = 0; k < pl->ntensors; k++) {
        const TensorInfo *t = &pl->tensors[k];
        const char *leaf = strrchr(t->name, '.');
        leaf = leaf ? leaf + 1 : t->name;
        int lnw = !strcmp(leaf, "ln1w") || !strcmp(leaf, "ln2w") || !strcmp(leaf, "lnfw");
        float std = t->ndim == 2 ? (!strcmp(t->name, "wpe") ? 0.5f : 0.2f) : 0.1f;
        size_t n = (size_t)t->rows_real * (t->ndim == 2 ? (size_t)t->shape[1] : 1);
        for (size_t i = 0; i < n; i++) p[t->offset + i] = (lnw ? 1.0f : 0.0f) + std * rng_normal(seed, (uint64_t)k, i);
    }
}

#endif
