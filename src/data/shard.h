/* shard.h — token shards in llm.c's format (DESIGN.md §5, byte layout in docs/formats.md).
 *
 * Header: 256 little-endian int32. [0] magic, [1] version, [2] token count; then the tokens.
 *   magic 20240520 version 1: uint16 tokens;  magic 20240801 version 7: uint32 tokens.
 * Reserved words we write (0 = unknown, as in files made by llm.c):
 *   [3],[4] tokenizer hash (low, high 32 bits); [5],[6] source byte count (low, high);
 *   [7] vocabulary size of the tokenizer (highest id + 1); [8] EOT id + 1 (0 = unknown: then the EOT is
 *   vocabulary size - 1, true of every tokenizer before cl100k/o200k, whose EOT is not their last id).
 * Shards are memory-mapped read-only; a file whose size does not match its header is refused. */
#ifndef ST_DATA_SHARD_H
#define ST_DATA_SHARD_H

#include <stddef.h>
#include <stdint.h>

#include "core/fileio.h"
#include "core/status.h"

#define SHARD_HEADER_INTS 256
#define SHARD_MAGIC_U16 20240520
#define SHARD_VERSION_U16 1
#define SHARD_MAGIC_U32 20240801
#define SHARD_VERSION_U32 7

typedef struct {
    uint64_t tokenizer_hash; /* 0 = unknown */
    uint64_t source_bytes;   /* bytes of text the tokens came from; 0 = unknown */
    uint32_t vocab_size;     /* tokenizer vocabulary (highest id + 1); 0 = unknown */
    uint32_t eot_plus1;      /* EOT id + 1; 0 = unknown (EOT = vocab_size - 1) */
    uint32_t version;        /* write: 0 = automatic (1 when every id fits uint16, else 7), 1 or 7 forces
                                it; open: the file's version */
} ShardMeta;

typedef struct {
    char path[1024];
    void *map;         /* whole file, read-only mapping */
    size_t map_bytes;
    int elem_bytes;    /* 2 (uint16) or 4 (uint32) */
    const void *tokens;
    size_t ntok;
    ShardMeta meta;
    /* The loss mask beside the shard (shard_mask_open; NULL: none, every target trained). */
    void *mask_map;
    size_t mask_map_bytes;
    const uint8_t *mask;   /* bit i (LSB first) of byte i/8: token i is a trained target */
    uint64_t mask_trained; /* bits set */
} Shard;

/* Maps and validates a shard: magic/version, header count vs file size, reserved words [9..255] 0,
 * words [7], [8] in range. Errors name the path,
 * the expected and the found values (ST_ERR_INPUT). shard_close is safe after a failed open.
 *
 * A file truncated (or rewritten shorter) in place while it is mapped makes a read past its new end
 * a bus error. While a shard or mask is mapped, a SIGBUS handler (installed by the first open,
 * SA_SIGINFO) looks the faulting address up in a fixed table of the open mappings and, when it falls
 * in one, writes one line prepared at open time with write(2):
 *   "<program>: <path>: the shard changed or shrank while it was being read (a bus error reading its
 *    mapping); expected shard files unchanged during a run"   ("loss mask" for a mask file)
 * and ends the process with _exit(SHARD_BUS_EXIT) (2: an input error, as the CLI's). A SIGBUS at any
 * other address, or one sent by kill/raise, gets the disposition SIGBUS had before (the default:
 * killed by the signal). shard_close unregisters the mapping. The table holds 16384 mappings; one
 * opened beyond that is not covered (its bus error kills the process by the signal, as before).
 * A file replaced by one of the same size is read as it now is: nothing is checked per read. */
#define SHARD_BUS_EXIT 2
Status shard_open(Shard *s, const char *path, Err *err);
void shard_close(Shard *s);
/* The prefix of the bus-error line ("scaletrain train"; default "scaletrain"), for mappings opened
 * after the call. */
void shard_set_program(const char *prog);

static inline uint32_t shard_token(const Shard *s, size_t i) {
    return s->elem_bytes == 2 ? ((const uint16_t *)s->tokens)[i] : ((const uint32_t *)s->tokens)[i];
}

/* ------------------------------------------------------------------ loss masks (SFT)
 * Beside a token shard X.bin (any other name: X + ".mask"), X.mask holds one bit per token: 1 = the
 * token is a trained *target* (the loss counts predicting it from the token before), 0 = it is not
 * (prompt, template, padding). Byte layout (docs/formats.md "Mask shards"): a 64-byte header
 *   [0] u32 magic 20261126  [4] u32 version 1  [8] u64 token count n  [16] u64 XXH3-64 (seed 0) of the
 *   token shard's token bytes (the file from byte 1024 on)  [24] u64 bits set  [32] u32 bits per token
 *   (1)  [36..64) reserved 0
 * then ceil(n/8) bytes of bits. The hash ties a mask to the exact tokens it was written for. */
#define SHARD_MASK_MAGIC 20261126
#define SHARD_MASK_VERSION 1
#define SHARD_MASK_HEADER 64

/* The mask path of a token shard: X.bin -> X.mask, anything else X -> X.mask. */
void shard_mask_path(char *out, size_t cap, const char *shard_path);

/* XXH3-64 (seed 0) of the shard's token bytes as stored. */
uint64_t shard_tokens_hash(const Shard *s);

/* A sampled fingerprint of the shard's contents, cheap at any size: XXH3-64 of its 1024-byte
 * header and of 16 blocks of 4 KiB spread evenly over its tokens (all of them below 64 KiB), and
 * of its mask's header when one is open (which holds the hash of every token). A resume compares it
 * (train's data_files): a shard prepared again with another --seed or corpus has the same size
 * whenever its token count is the same, and differs in every block; an edit of a few tokens
 * between the blocks is not seen. */
uint64_t shard_fingerprint(const Shard *s);

/* Opens the mask beside an open shard when there is one (s->mask NULL when the file is absent) and
 * validates it: size, magic, version, bits per token, reserved bytes 0, count = the shard's, hash =
 * the shard's tokens, bits set = the header's count. Errors (ST_ERR_INPUT) name the mask file, expected and found. */
Status shard_mask_open(Shard *s, Err *err);

static inline int shard_mask_bit(const Shard *s, size_t i) { return (s->mask[i >> 3] >> (i & 7)) & 1; }

/* Writes the mask of the (committed) token shard at shard_path crash-safely: bits holds ceil(n/8)
 * packed bytes as in the file (bit i & 7 of byte i >> 3: token i trained; padding bits 0, checked), n
 * must be the shard's token count (checked); the hash is read from the shard itself. */
Status shard_mask_write(const char *shard_path, const uint8_t *bits, size_t n, Err *err);

/* Index of the first token >= vocab, or SIZE_MAX if every token is below vocab. */
size_t shard_find_token_at_least(const Shard *s, uint32_t vocab);

/* Writes n tokens crash-safely (temporary file, fsync, rename, fsync of the directory).
 * Version 1 (uint16) when meta->vocab_size <= 65536 and every token fits, else version 7 (uint32),
 * unless meta->version forces one: version 1 with a vocabulary over 65536 or a token over 65535 is
 * refused (ST_ERR_INPUT), as is any other version. */
Status shard_write(const char *path, const uint32_t *tokens, size_t n, const ShardMeta *meta, Err *err);

/* A shard written as its tokens arrive (prepare's writers), in 64 KiB of memory: the tokens go to
 * `path.tmp.<pid>`; commit writes the header (count, source bytes) at offset 0, fsyncs, renames
 * and fsyncs the directory, so a reader sees no shard or a whole one. The width is fixed at open:
 * meta->version 7, or 0 with meta->vocab_size > 65536, gives uint32; else uint16 (version 1 with a
 * vocabulary over 65536 is refused). The caller guarantees every id < meta->vocab_size. */
typedef struct {
    FileAtomic f;
    ShardMeta meta;
    int wide;          /* 4-byte tokens */
    size_t n;          /* tokens appended */
    size_t nbuf;       /* bytes waiting in buf */
    uint8_t buf[1 << 16];
} ShardWriter;

Status shard_writer_open(ShardWriter *w, const char *path, const ShardMeta *meta, Err *err);
Status shard_writer_append(ShardWriter *w, const uint32_t *tokens, size_t n, Err *err);
/* Finishes the file with meta.source_bytes = source_bytes. */
Status shard_writer_commit(ShardWriter *w, uint64_t source_bytes, Err *err);
void shard_writer_abort(ShardWriter *w); /* removes the temporary; safe after commit */

#endif
