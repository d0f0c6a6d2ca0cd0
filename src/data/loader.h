/* loader.h — the resumable, rank-aware token loader (DESIGN.md §2).
 *
 * The shards of a dataset are one token stream. Window w is tokens [w·T, w·T + T] (T+1 tokens:
 * inputs are the first T, targets the last T). An epoch is a seeded permutation of all windows;
 * the n-th sample of the whole run is window perm_e[n mod nwin] with e = n / nwin. Optimizer step
 * s, rank r, micro-batch j, row b takes sample n = s·G + r·(B·k) + j·B + b with G = B·k·dp, so the
 * same global batch gives the same samples on any number of ranks, and the whole state is
 * (seed, samples consumed). The loader gets its rank and world size as integers. */
#ifndef ST_DATA_LOADER_H
#define ST_DATA_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "data/shard.h"

typedef struct {
    uint64_t seed;     /* data-order seed */
    uint64_t consumed; /* samples (windows) consumed by the whole run */
} LoaderState;

typedef struct {
    Shard *shards;
    int nshards;
    size_t *start;        /* first global token index of each shard (nshards + 1 entries) */
    size_t total_tokens;
    int T;
    uint64_t nwin;        /* windows per epoch */
    int shuffle;          /* 0: window n mod nwin in order (validation) */
    uint64_t source_bytes; /* sum of shard source byte counts, 0 if any is unknown */
    LoaderState st;
    uint64_t perm_epoch[2]; /* two cached epoch permutations (a batch may straddle epochs) */
    uint64_t *perm[2];
    int perm_next;
} Loader;

/* Opens every file matching `pattern` (a path or a glob; sorted), validates each shard
 * (header, size, every token < vocab unless vocab is 0; tokenizer hash when both it and expected_hash are non-zero)
 * and checks there is at least one window of T+1 tokens. Errors name the file. */
Status loader_open(Loader *ld, const char *pattern, int T, uint32_t vocab, uint64_t expected_hash, uint64_t seed,
                   int shuffle, Err *err);
void loader_close(Loader *ld);

/* Checks every token of every shard is below vocab; the error names the file and position. */
Status loader_check_vocab(const Loader *ld, uint32_t vocab, Err *err);

/* Fills count rows of inputs and targets (count·T each) with samples first .. first+count-1. */
void loader_fill(Loader *ld, uint64_t first, int count, int32_t *inp, int32_t *tgt);

/* The vocabulary size recorded in the shards' headers (0 if unknown or inconsistent). */
uint32_t loader_header_vocab(const Loader *ld);

#endif
