/* fuzz_readers.h — one harness per reader of untrusted file input, shared by the deterministic CTest
 * (tests/test_fuzz_readers.c, a seeded mutation campaign on every `make test`) and the libFuzzer
 * targets (tests/fuzz/fuzz_target.c, bench/fuzz.sh): the same setup, seed, run and contract check.
 *
 * A reader here is one file a command reads and the library calls that read it as that command does:
 * fz_run writes the bytes where the reader expects its file (every other file it needs stays as
 * fz_setup wrote it), calls the reader, frees what it loaded and returns its Status. Where the file is
 * sealed by a checksum that another file records (a checkpoint's state.json, the rank file's
 * FNV-1a), fz_run seals the mutated bytes again first (say so in `fixup`): a mutation then reaches the
 * parser instead of the checksum, which the readers' own tests cover.
 *
 * The contract (docs/testing.md, the project's rule for readers): the reader returns ST_OK, or
 * ST_ERR_INPUT / ST_ERR_RUNTIME with Err.msg one non-empty line that names the file (one of the
 * reader's `names`); never a crash, an abort, a hang, an out-of-bounds access, a leak or an exit. */
#ifndef ST_TESTS_FUZZ_READERS_H
#define ST_TESTS_FUZZ_READERS_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

/* How an accepted mutation is judged (test_fuzz_readers.c):
 *   FZ_BINARY: a change inside the seed's strict bytes (strict[i] = 1) that loads is a defect;
 *   FZ_JSON:   one JSON document; a number or string value replaced (-1, huge, a fraction of an
 *              integer, another type, emptied) that loads something else than the seed is a defect
 *              unless its key is in free_keys (any such value is as good: a format that cannot tell);
 *              a truncated document that loads is one too;
 *   FZ_LINES:  line-oriented text (JSON Lines, CSV, text): values as FZ_JSON, and whole lines may
 *              go (a shorter input is still a valid one). */
typedef enum { FZ_BINARY, FZ_JSON, FZ_LINES } FzKind;

typedef struct FzReader {
    const char *name;         /* the libFuzzer target's and the CTest case's name */
    const char *what;         /* the file and the calls, one line */
    FzKind kind;
    int fixup;                /* fz_run seals the bytes again (checksums) before the reader sees them */
    int budget;               /* mutation cases in the CTest (its cost per case decides) */
    const char *const *free_keys; /* FZ_JSON / FZ_LINES: keys whose value may change (NULL-terminated) */
    /* filled by fz_setup */
    char path[1024];          /* where fz_run writes the bytes */
    const char *names[4];     /* what Err.msg must name (one of them): the file, or its folder */
    uint8_t *seed;            /* the unmutated input (a file a writer of the project produced) */
    size_t seed_len;
    uint8_t *strict;          /* FZ_BINARY: seed_len flags, 1 = a byte no accepted change may touch */
    int ready;
    char broken[256];         /* set by run when what loaded breaks an invariant (fz_contract fails it) */
    void *priv;               /* the reader's own state (fixed files, buffers) */
    /* the reader's functions (fuzz_readers.c) */
    Status (*setup)(struct FzReader *r, Err *err);
    Status (*run)(struct FzReader *r, const uint8_t *buf, size_t len, uint64_t *digest, Err *err);
    void (*teardown)(struct FzReader *r);
} FzReader;

/* The readers, in a fixed order; NULL past the last. */
FzReader *fz_reader(int i);
FzReader *fz_reader_find(const char *name);

/* Prepares reader r: its fixed files and its seed under workdir/<name>/ (created, emptied first).
 * srcdir: the repository (data/, tests/fixtures/). */
Status fz_setup(FzReader *r, const char *workdir, const char *srcdir, Err *err);
void fz_teardown(FzReader *r);

/* Runs reader r on buf[0, len): *digest (may be NULL) receives a hash of what it loaded (0 when it
 * refused), the same for inputs that load the same thing. */
Status fz_run(FzReader *r, const uint8_t *buf, size_t len, uint64_t *digest, Err *err);

/* The contract for one result: 1 when it holds; else 0 and why (cap bytes) says what broke it. */
int fz_contract(const FzReader *r, Status st, const Err *err, char *why, size_t cap);

#endif
