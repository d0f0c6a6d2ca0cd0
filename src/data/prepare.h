/* prepare.h — text corpora -> train/validation token shards (the `scaletrain prepare` logic).
 *
 * Inputs: plain text files (documents separated by a line holding only the separator, default
 * `<|endoftext|>`; a file without separators is one document), JSON Lines files (one object per
 * line with a string field "text"), WikiText files (*.tokens: one document per article, an article
 * starting at each top-level heading line ` = Title = `), or directories of such files (regular,
 * non-hidden files, in name order). The format follows the extension (.jsonl -> JSON Lines,
 * .tokens -> WikiText, anything else -> text) unless forced.
 *
 * Pipeline: read and split documents -> drop exact duplicates (64-bit XXH3 of the bytes; the first
 * occurrence is kept) -> choose validation documents (a seeded permutation, whole documents) ->
 * encode in parallel (OpenMP) -> each document's ids followed by EOT -> shards of at most
 * shard_tokens tokens named train_000000.bin ... and val_000000.bin ... in out_dir (see shard.h;
 * the header records the tokenizer hash, the source bytes of the documents whose EOT lies in the
 * shard, and the vocabulary size). The result does not depend on the thread count.
 * Library code: never prints; progress goes through a callback. docs/tokenizer.md has the details. */
#ifndef ST_DATA_PREPARE_H
#define ST_DATA_PREPARE_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "data/bpe.h"

typedef enum {
    PREP_FORMAT_AUTO = 0, /* by extension */
    PREP_FORMAT_TEXT,
    PREP_FORMAT_JSONL,
    PREP_FORMAT_WIKITEXT,
} PrepareFormat;

typedef struct {
    const char *const *inputs; /* files or directories */
    size_t ninputs;
    const char *out_dir;       /* created if missing (one level) */
    const Tokenizer *tok;
    PrepareFormat format;      /* default AUTO */
    const char *separator;     /* document separator line for text files; default "<|endoftext|>" */
    double val_fraction;       /* fraction of (unique) documents for validation; default 0.05 */
    long val_docs;             /* if >= 0: exact number of validation documents (overrides fraction); default -1 */
    uint64_t seed;             /* validation choice; default 1337 */
    size_t shard_tokens;       /* max tokens per shard; default 100,000,000 */
    int threads;               /* encoding threads; 0 = OpenMP default */
    int dedup;                 /* drop exact duplicate documents; default 1 */
    uint32_t shard_version;    /* 0 = automatic (1 = uint16 when the vocabulary fits, else 7 = uint32);
                                  1 or 7 forces it (1 with a vocabulary over 65536 is refused) */
    int seq_len;               /* T of the --no-pack utilization report; default 1024, 0 = no report */
    /* Progress: called from the calling thread after each batch with text bytes encoded so far and
     * the total; may be NULL. */
    void (*progress)(void *ctx, uint64_t done_bytes, uint64_t total_bytes);
    void *progress_ctx;
} PrepareOptions;

typedef struct {
    size_t files;              /* input files read */
    size_t docs;               /* documents read (non-empty) */
    size_t duplicates;         /* documents dropped as exact duplicates */
    size_t train_docs, val_docs;
    uint64_t bytes;            /* text bytes of the kept documents */
    uint64_t train_tokens, val_tokens; /* EOTs included */
    size_t train_shards, val_shards;
    /* Packing report for the train split at o->seq_len: packed rows use every target slot; with
     * --no-pack every document takes ceil((its tokens + EOT) / T) rows of its own (loader.h). */
    uint64_t nopack_rows;
    double nopack_utilization; /* train tokens (EOT included) / (nopack_rows * seq_len) */
    double seconds;
} PrepareStats;

/* Defaults as documented on each field (inputs, out_dir and tok must still be set). */
PrepareOptions prepare_default_options(void);

/* Runs the pipeline. Errors: ST_ERR_INPUT for a missing/unreadable input (named), a file that is
 * binary (a NUL byte, or over a quarter of its first MiB control bytes or invalid UTF-8; named
 * with the offset), a bad JSON line (file:line), a JSON line without a string "text", input with
 * no non-empty document, bad options (val fraction outside [0, 1), shard_tokens 0, shard version
 * 1 with a vocabulary over 65536), an out_dir that cannot be created; ST_ERR_RUNTIME for I/O and
 * out of memory.
 * On error no shard is left half-written (each shard is written crash-safely), but shards written
 * before the error stay. stats may be NULL. */
Status prepare_run(const PrepareOptions *o, PrepareStats *stats, Err *err);

/* The documents of o->inputs (o->format, o->separator; the other fields are not used) in input
 * order, before deduplication: what `tokenizer train` learns from. Same errors as prepare_run's
 * reading stage (missing, binary, bad JSON line, no document). Free with prepare_docs_free. */
typedef struct {
    const uint8_t **text;      /* document bytes (not NUL-terminated), owned by the struct */
    size_t *len;
    size_t n;
    size_t files;
    void *priv;                /* the buffers */
} PrepareDocs;

Status prepare_read_documents(const PrepareOptions *o, PrepareDocs *docs, Err *err);
void prepare_docs_free(PrepareDocs *docs);

#endif
