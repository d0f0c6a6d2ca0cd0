/* prepare.h — text corpora -> train/validation token shards (the `scaletrain prepare` logic),
 * streamed in bounded memory.
 *
 * Inputs: files, directories of files (regular, non-hidden, in name order) or "-" (standard
 * input); plain, gzip or zstd; text, JSON Lines or WikiText (docsource.h says how documents are
 * found and which input is refused).
 *
 * Pipeline (docs/data.md §6 has the rules, docs/formats.md the files):
 *   1. read: each document gets a key, XXH3-128 of its bytes seeded with `seed`, and is encoded
 *      (one thread reads the next ~4 MiB batch while OpenMP tasks encode the last) into a *run*
 *      buffer of run_bytes; a full
 *      buffer is sorted by key and written as a run file in out_dir/.prepare/ (crash-safe),
 *      then the journal (.prepare/journal.json: the inputs finished, the documents consumed of
 *      the one in progress) is replaced.
 *   2. merge: the runs are merged by key; equal keys are exact duplicates (dropped unless
 *      dedup = 0); a document is validation when the high 64 bits of its key are below
 *      val_fraction * 2^64 (or, with val_docs >= 0, when it is among the val_docs smallest keys);
 *      each split is written in key order into shards of at most shard_tokens tokens, each shard
 *      streamed to a temporary file and renamed when full.
 *   3. manifest.json beside the shards; .prepare/ removed.
 * Line pieces: when a validation split is asked for, the separator is "" and the corpus is one text
 * input, that input is read with DocReaderOptions.line_pieces = PREP_LINE_PIECE_BYTES: a text
 * without blank lines, which would be a single document and no split, is cut at line ends.
 * Format chat (chat.h, docs/finetune.md): each document is a conversation rendered by the chat
 * template into ids and a per-token loss mask; the mask travels with the ids through runs and merge
 * and is written beside each shard (X.mask beside X.bin, shard.h) after the shard.
 * The shards are thus a function of the set of documents, the seed and the tokenizer: not of the
 * thread count, the order of the inputs, how the corpus is cut into files, nor of interruptions
 * (a rerun with the same inputs and options resumes after the last run written).
 * Memory: run_bytes and its sort index + two batches (~4 MiB of text and its ids each) + one
 * 256 KiB buffer per run while merging + the longest document; not the corpus.
 * Library code: never prints; progress goes through a callback. */
#ifndef ST_DATA_PREPARE_H
#define ST_DATA_PREPARE_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "data/bpe.h"
#include "data/chat.h"
#include "data/docsource.h"

/* Line pieces: with a validation split asked for and --separator "" (documents end at blank lines),
 * a corpus of one text input that comes out as a single document is cut instead into pieces of at
 * least this many bytes, each ending at a line end (docsource.h has the rule, docs/data.md §6 the
 * why): about one 1024-token context of English under GPT-2. Fixed, so the documents depend on the
 * text alone. */
#define PREP_LINE_PIECE_BYTES 4096

typedef struct {
    int phase;                 /* 1 read and encode, 2 merge into shards */
    uint64_t done, total;      /* phase 1: input bytes read (compressed size for .gz/.zst), total of the
                                  input files (0 = unknown: standard input); phase 2: documents merged */
    uint64_t docs;             /* documents read so far (phase 1) */
    double seconds;            /* since the start of the phase */
} PrepareProgress;

typedef struct {
    const char *const *inputs; /* files or directories */
    size_t ninputs;
    const char *out_dir;       /* created if missing (one level) */
    const Tokenizer *tok;
    PrepareFormat format;      /* default AUTO */
    const char *separator;     /* document separator line for text files; default "<|endoftext|>" */
    const char *field;         /* JSON Lines: the string field of the text; default "text" */
    int skip_bad;              /* count and skip bad records (bad JSON, no field, invalid UTF-8, a bad
                                  conversation); default 0 */
    ChatTemplate chat_template; /* format chat: the template (chat.h); default AUTO (by the tokenizer) */
    int allow_invalid_utf8;    /* keep documents with invalid UTF-8 (encoded as bytes); default 0 */
    double val_fraction;       /* share of (unique) documents for validation, by key; default 0.05 */
    long val_docs;             /* if >= 0: the val_docs documents of smallest key (overrides fraction); default -1 */
    uint64_t seed;             /* the document key (split and order); default 1337 */
    size_t shard_tokens;       /* max tokens per shard; default 100,000,000 */
    int threads;               /* encoding threads; 0 = OpenMP default */
    int dedup;                 /* drop exact duplicate documents; default 1 */
    uint32_t shard_version;    /* 0 = automatic (1 = uint16 when the vocabulary fits, else 7 = uint32);
                                  1 or 7 forces it (1 with a vocabulary over 65536 is refused) */
    int seq_len;               /* T of the --no-pack utilization report; default 1024, 0 = no report */
    size_t run_bytes;          /* memory for the encoded documents of one run; default 256 MiB */
    const char *argv_line;     /* recorded in the manifest (may be NULL) */
    const char *tokenizer_arg; /* --tokenizer as given (gpt2, cl100k, a directory): the manifest's
                                  tokenizer.name, what train and eval name in a mismatch (may be NULL) */
    /* Progress: called from the calling thread after each batch; may be NULL. */
    void (*progress)(void *ctx, const PrepareProgress *p);
    void *progress_ctx;
    /* Fault injection (tests): stop with ST_ERR_RUNTIME "interrupted" after this many runs written by
     * this call (phase 1), this many shards written (phase 2), or this many files moved into out_dir
     * while publishing (phase 3); 0 = never. */
    int fault_after_runs, fault_after_shards, fault_after_moves;
} PrepareOptions;

typedef struct {
    size_t files;              /* input files read (resumed ones included) */
    size_t resumed_files;      /* inputs finished by an earlier, interrupted call and skipped */
    int finished_publish;      /* an earlier call, interrupted while moving its shards into out_dir,
                                  had its move finished first (its shards then replaced by this call's) */
    size_t docs;               /* documents read (non-empty, not skipped) */
    DocSkips skips;            /* bad records skipped (skip_bad) */
    size_t duplicates;         /* documents dropped as exact duplicates */
    size_t train_docs, val_docs;
    uint64_t input_bytes;      /* bytes of the input files as stored (compressed for .gz/.zst) */
    uint64_t bytes;            /* text bytes of the kept documents */
    uint64_t train_tokens, val_tokens; /* EOTs included */
    size_t train_shards, val_shards;
    uint64_t train_trained, val_trained; /* format chat: trained targets (mask bits set) per split */
    ChatTemplate chat_template; /* format chat: the template used (AUTO resolved) */
    size_t runs;               /* sorted runs merged */
    uint64_t line_pieces;      /* >= 2: the corpus, one text input without blank lines, was cut into this
                                  many pieces at line ends (PREP_LINE_PIECE_BYTES); 0: not cut */
    /* Packing report for the train split at o->seq_len: packed rows use every target slot; with
     * --no-pack every document takes ceil((its tokens + EOT) / T) rows of its own (loader.h). */
    uint64_t nopack_rows;
    double nopack_utilization; /* train tokens (EOT included) / (nopack_rows * seq_len) */
    double seconds;
} PrepareStats;

/* Defaults as documented on each field (inputs, out_dir and tok must still be set). */
PrepareOptions prepare_default_options(void);

/* The formats o->inputs are read as under o->format (directories expanded as prepare_run does,
 * each file by docsource_format_of, so "-" is text unless forced): bit (1u << f) is set in *formats
 * for each PrepareFormat f met. For refusing an option that applies to none of the inputs (--field
 * without JSON Lines, --separator without text). Errors: as prepare_run's for a missing input or an
 * unreadable or empty directory. */
Status prepare_input_formats(const PrepareOptions *o, unsigned *formats, Err *err);

/* Refuses an input that would be an output: an input directory that is out_dir itself (what the
 * command writes there would be read as input by its next run), or an input file in out_dir whose
 * name is_output() claims. `writes` names those outputs in the error ("shards and manifest.json").
 * ST_OK when out_dir does not exist yet. prepare_run applies it with prepare's names; `tokenizer
 * train` with its own. */
Status prepare_check_inputs_not_outputs(const char *const *inputs, size_t n, const char *out_dir,
                                        int (*is_output)(const char *name), const char *writes, Err *err);

/* Runs the pipeline. Errors: ST_ERR_INPUT for a missing/unreadable input (named), bad input as
 * in docsource.h (file:line or byte offset), input with no non-empty document, bad options (val
 * fraction outside [0, 1), shard_tokens 0, shard version 1 with a vocabulary over 65536), an
 * out_dir that cannot be created; ST_ERR_RUNTIME for I/O and out of memory.
 * Shards are written into out_dir/.prepare and moved into out_dir only when every one is written
 * and the split is accepted, so on error out_dir keeps what an earlier call published; the runs and
 * the journal stay, so the same call again resumes. A call interrupted while moving leaves
 * out_dir/.prepare/manifest.json, which the loader refuses and the next call into out_dir finishes
 * first. stats may be NULL. */
Status prepare_run(const PrepareOptions *o, PrepareStats *stats, Err *err);

/* The documents of o->inputs (o->format, separator, field, skip_bad; the other fields are not used) in input
 * order, before deduplication, held in memory: what `tokenizer train` learns from. Same errors as
 * prepare_run's reading stage (missing, bad input, no document), except that invalid UTF-8 is kept
 * (encoded as bytes, as before). Free with prepare_docs_free. */
typedef struct {
    const uint8_t **text;      /* document bytes (not NUL-terminated), owned by the struct */
    size_t *len;
    size_t n;
    size_t files;
    DocSkips skips;            /* what o->skip_bad skipped */
    void *priv;                /* the buffers */
} PrepareDocs;

Status prepare_read_documents(const PrepareOptions *o, PrepareDocs *docs, Err *err);
void prepare_docs_free(PrepareDocs *docs);

#endif
