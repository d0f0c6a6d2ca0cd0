/* bench_step_common.h — the training step step_bench.c and step_profile.c time: the same model
 * (gpt_init_params seed 1, working copy rounded), the same random batches (rng stream 7, counters 1
 * and 2) and the same AdamW state, so the profile's per-kernel split is of exactly the step the
 * benchmark times. Header-only: each bench is one translation unit. */
#ifndef ST_BENCH_STEP_COMMON_H
#define ST_BENCH_STEP_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/rng.h"
#include "model/gpt.h"
#include "model/matmul.h"
#include "optim/optim.h"

typedef struct {
    Gpt g;
    int B, T, N;
    int32_t *inp, *tgt; /* N tokens each */
    float *m, *v;       /* AdamW's moments over the whole layout */
    OptimRange r;       /* one range: every parameter, weight decay on */
    OptimConfig oc;
} BenchStep;

/* The GEMMs' threads, and ST_BF16_GEMM read as the trainer reads it (matmul.h, mm_gemm_env:
 * "packed" or "onednn" for the bf16 layer GEMMs); prints "prog: error" and returns 0 on a bad value. */
static inline int bench_step_gemm_setup(const char *prog, int nt) {
    mm_set_threads(nt);
    Err e = {0};
    if (mm_gemm_env(&e) == ST_OK) return 1;
    fprintf(stderr, "%s: %s\n", prog, e.msg);
    return 0;
}

/* The model of go (B, T, threads, precision, backend set by the caller) with its parameters and
 * AdamW state; prints the error and returns 0 on failure. */
static inline int bench_step_init(BenchStep *b, const ModelConfig *mc, const GptOptions *go, MemStats *ms) {
    Err err;
    if (gpt_init(&b->g, mc, go, ms, &err) != ST_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 0;
    }
    gpt_init_params(&b->g, 1);
    gpt_sync_lp(&b->g);
    b->B = go->B, b->T = go->T, b->N = go->B * go->T;
    size_t n = b->g.w.layout.total;
    b->inp = malloc(sizeof(int32_t) * (size_t)b->N), b->tgt = malloc(sizeof(int32_t) * (size_t)b->N);
    b->m = calloc(n, 4), b->v = calloc(n, 4);
    if (!b->inp || !b->tgt || !b->m || !b->v) {
        fprintf(stderr, "out of memory for the batch and AdamW state (%zu parameters)\n", n);
        return 0;
    }
    b->r = (OptimRange){0, n, 1, 1.0f};
    b->oc = optim_default_config(OPT_ADAMW);
    return 1;
}

/* Step s's batch: uniform random token ids below the vocabulary. */
static inline void bench_step_batch(BenchStep *b, int s) {
    uint64_t V = (uint64_t)b->g.w.cfg.vocab;
    for (int i = 0; i < b->N; i++) {
        b->inp[i] = (int32_t)rng_below(7, 1, (uint64_t)s * b->N + i, V);
        b->tgt[i] = (int32_t)rng_below(7, 2, (uint64_t)s * b->N + i, V);
    }
}

static inline void bench_step_free(BenchStep *b) {
    gpt_free(&b->g);
    free(b->inp), free(b->tgt), free(b->m), free(b->v);
}

#endif
