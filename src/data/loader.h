/* loader.h — the resumable, rank-aware token loader (DESIGN.md §2; rules in docs/data.md).
 *
 * Rows. A dataset (the shards matched by one glob) is one token stream. Each row the loader hands
 * out is T inputs and T targets:
 *   packed (default): row w is the window of tokens [w·T, w·T + T] (T+1 tokens; inputs the first T,
 *       targets the last T); documents are packed back to back, separated by EOT, and attention
 *       crosses the EOT as in GPT-2. Every target is a real token (utilization 1).
 *   no-pack (LOADER_NO_PACK): each document (the tokens between two EOTs, plus its closing EOT) gets
 *       rows of its own. The row's first input is the EOT before the document (a synthetic EOT for
 *       the stream's first document), so every token of the document, its EOT included, is a
 *       target exactly once; a document with more than T targets is split into ceil(targets / T)
 *       rows (chunk c starts at the document's target c·T). Positions after the document are
 *       padding: input EOT, target -1 (masked). Utilization = real targets / (rows · T).
 *
 * Order. An epoch of a dataset is a seeded permutation of its rows (Fisher–Yates with Philox draws;
 * it depends on (seed, dataset index, epoch) only). Sample m of a dataset is row perm_e[m mod rows]
 * with e = m / rows: sampling without replacement inside an epoch.
 *
 * Mixing. `--data a:0.7,b:0.3` names several datasets with weights. The weights are quantized to
 * integer quotas q_d summing to LOADER_MIX_PERIOD (largest remainder, each q_d >= 1), and a fixed
 * pattern of LOADER_MIX_PERIOD slots is built by smooth weighted round robin (each slot: add q_d to
 * every dataset's credit, take the dataset with the largest credit — ties to the lower index — and
 * subtract the period from it). Global sample n goes to dataset d = pattern[n mod P] as that
 * dataset's sample m = (n / P)·q_d + (the slot's rank among d's slots in the pattern). So the
 * assignment is a pure function of n: independent of ranks, exactly resumable, and every window of
 * P consecutive samples holds exactly q_d samples of dataset d.
 *
 * Loss masks (SFT, docs/finetune.md). A shard may have a mask beside it (shard.h): one bit per token,
 * 1 = trained as a target. A target whose bit is 0 is handed out as -1 (ignored by the loss, like
 * no-pack padding), in packed and no-pack rows alike; inputs are never masked. Within a dataset every
 * shard has a mask or none has. Masks are a function of the token position, so the state below
 * resumes them exactly as the tokens.
 *
 * Ranks. Optimizer step s, rank r, micro-batch j, row b take global sample
 *   n = consumed + r·(B·k) + j·B + b,   consumed = samples of all completed steps (s·G, G = B·k·dp),
 * so the same global batch gives the same samples on any number of ranks and a run resumed on
 * another world size continues the same order. The whole state is LoaderState {seed, consumed}.
 * The loader gets its rank and world size as integers, never a Comm. */
#ifndef ST_DATA_LOADER_H
#define ST_DATA_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "data/shard.h"

#define LOADER_MIX_PERIOD 10000 /* mixing quota resolution: weights are exact to 1e-4 */
#define LOADER_MAX_SETS 64      /* datasets in one --data mixture */

/* loader_open flags */
#define LOADER_SHUFFLE 1 /* epoch permutations (training); without it row n mod rows (validation) */
#define LOADER_NO_PACK 2 /* one document per row, padding masked (see above) */
#define LOADER_FOR_WEIGHTS 4 /* expected_name is the tokenizer recorded with saved weights (eval): the
                                mismatch message names no train flag */

typedef struct {
    uint64_t seed;     /* data-order seed */
    uint64_t consumed; /* samples (rows) consumed by the whole run: all ranks, all completed steps */
} LoaderState;

/* One dataset of a mixture: the shards of one glob. */
typedef struct {
    char pattern[1024];
    double weight;          /* normalized: the weights of a mixture sum to 1 */
    uint32_t quota;         /* slots of the mixing period (mixtures only) */
    Shard *shards;
    int nshards;
    size_t *start;          /* first global token index of each shard (nshards + 1 entries) */
    size_t total_tokens;
    uint64_t nrows;         /* rows per epoch */
    uint64_t real_targets;  /* unmasked targets in one epoch of rows */
    uint64_t *row_first;    /* no-pack: global index + 1 of each row's first input (0 = synthetic EOT) */
    uint32_t *row_len;      /* no-pack: real targets of each row (1..T) */
    uint64_t source_bytes;  /* sum of the shards' source byte counts, 0 if any is unknown */
    int masked;             /* every shard has a loss mask (shard.h): untrained targets are -1 */
    uint64_t perm_epoch[2]; /* two cached epoch permutations (a batch may straddle epochs) */
    uint64_t *perm[2];
    int perm_next;
} LoaderSet;

typedef struct {
    LoaderSet *sets;
    int nsets;
    int T;
    int flags;             /* LOADER_SHUFFLE | LOADER_NO_PACK */
    uint32_t eot;          /* no-pack: padding input and document separator */
    LoaderState st;
    uint16_t *mix_set;     /* mixtures: dataset of each slot of the period */
    uint32_t *mix_rank;    /* mixtures: rank of the slot among its dataset's slots */
    /* Totals over the datasets (for messages and the trainer's start-up line). */
    int nshards;
    size_t total_tokens;
    uint64_t nwin;         /* rows per epoch, summed over the datasets */
    int shuffle;           /* flags & LOADER_SHUFFLE */
    uint64_t source_bytes; /* 0 if unknown for any dataset */
    int masked;            /* some dataset has loss masks (SFT data, docs/finetune.md) */
} Loader;

/* Opens the datasets of `spec` and validates every shard (header, size, tokenizer hash when both
 * it and expected_hash are non-zero, every token < vocab unless vocab is 0) and checks that each
 * dataset has at least one row. spec is a path or glob (sorted), or a comma-separated list of them:
 * without weights the list is one dataset (concatenated in order), with a ":W" suffix (W > 0) on
 * every item it is a mixture of weighted datasets. flags: LOADER_SHUFFLE and/or LOADER_NO_PACK
 * (no-pack takes EOT = the shards' header EOT, else vocab - 1; refused unless below vocab when vocab
 * is given: it pads rows with it). Errors (ST_ERR_INPUT)
 * name the file or the spec item. loader_close is safe after a failed open. */
Status loader_open(Loader *ld, const char *spec, int T, uint32_t vocab, uint64_t expected_hash, uint64_t seed,
                   int flags, Err *err);
/* loader_open, with the name of the expected tokenizer (the run's --tokenizer) for the mismatch
 * message: "x.bin: prepared with tokenizer bytes, expected --tokenizer gpt2's tokens ...: train with
 * --tokenizer bytes, or prepare the text again with --tokenizer gpt2". */
Status loader_open_named(Loader *ld, const char *spec, int T, uint32_t vocab, uint64_t expected_hash,
                         const char *expected_name, uint64_t seed, int flags, Err *err);
void loader_close(Loader *ld);

/* Checks every token of every shard is below vocab; the error names the file and position. */
Status loader_check_vocab(const Loader *ld, uint32_t vocab, Err *err);

/* Fills count rows of inputs and targets (count·T each; targets -1 at masked positions) with
 * global samples first .. first+count-1. The primitive under loader_fill_rank. */
void loader_fill(Loader *ld, uint64_t first, int count, int32_t *inp, int32_t *tgt);

/* Fills micro-batch `micro` (0..k-1) of rank `rank` (0..dp-1) of the current optimizer step:
 * B rows (inp, tgt: B·T each) = samples consumed + rank·B·k + micro·B + b. */
void loader_fill_rank(Loader *ld, int rank, int dp, int micro, int B, int k, int32_t *inp, int32_t *tgt);

/* Ends an optimizer step of global batch B·k·dp rows: consumed += B·k·dp (every rank calls it). */
void loader_step_done(Loader *ld, int dp, int B, int k);

/* The state to save in a checkpoint, and restoring it (a changed seed drops the cached
 * permutations). */
LoaderState loader_get_state(const Loader *ld);
void loader_set_state(Loader *ld, LoaderState st);

/* Where global sample n comes from: *set = dataset index, returns the row of that dataset
 * (for tests and diagnostics). */
uint64_t loader_sample_row(Loader *ld, uint64_t n, int *set);

/* Real target tokens / allocated target slots of the rows handed out, in expectation over the
 * mixture: 1 for packed rows, the padding share for no-pack. */
double loader_utilization(const Loader *ld);

/* Rows a document of n_targets targets takes in no-pack mode (ceil(n_targets / T)). */
static inline uint64_t loader_nopack_rows(uint64_t n_targets, int T) {
    return (n_targets + (uint64_t)T - 1) / (uint64_t)T;
}

/* The tokenizer hash the shards' headers record (all agree: loader_open refuses shards of two), 0 if
 * none records one. */
uint64_t loader_tokenizer_hash(const Loader *ld);

/* val's shards against train's: refused when both headers record a tokenizer and they differ (what
 * --val-data is checked with when the run names no --tokenizer). */
Status loader_check_same_tokenizer(const Loader *train, const Loader *val, const char *val_spec, Err *err);

/* The name of the tokenizer that made shard_path's shards (hash: its header's), from the
 * manifest.json beside it: 1 and out set, or 0 when no manifest names it. */
int loader_shard_tokenizer_name(const char *shard_path, uint64_t hash, char *out, size_t cap);

/* The vocabulary size recorded in the shards' headers (0 if unknown or inconsistent). */
uint32_t loader_header_vocab(const Loader *ld);

/* The EOT id recorded in the shards' headers (word [8]), else header vocabulary - 1 (every tokenizer
 * before cl100k/o200k), else UINT32_MAX (unknown or inconsistent). */
uint32_t loader_header_eot(const Loader *ld);

#endif
