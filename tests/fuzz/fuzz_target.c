/* fuzz_target.c — the libFuzzer entry of one reader (FZ_READER, a name from fuzz_readers.c's table),
 * built once per reader by tests/fuzz/CMakeLists.txt (ST_FUZZ=ON, clang) and run by bench/fuzz.sh.
 *
 * The same harness as the CTest test_fuzz_readers: LLVMFuzzerInitialize sets the reader up under
 * $ST_FUZZ_WORK (default ./fuzz-work)/<pid> and writes its seed into $ST_FUZZ_SEED_DIR when set (the
 * corpus folder bench/fuzz.sh passes, read by libFuzzer after this returns); each input is run
 * through fz_run and a broken contract (fz_contract: a status that is not one, an empty or
 * multi-line message, one naming no file of the reader, an invariant of what loaded) aborts with
 * the reason, which libFuzzer records as a crash. Crashes, leaks, hangs and sanitizer reports are
 * libFuzzer's and the sanitizers' own. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_readers.h"

#ifndef FZ_READER
#error "FZ_READER: the reader's name (tests/fuzz/CMakeLists.txt defines it)"
#endif

static FzReader *reader;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    reader = fz_reader_find(FZ_READER);
    if (!reader) {
        fprintf(stderr, "fuzz_%s: no such reader in tests/fuzz/fuzz_readers.c\n", FZ_READER);
        exit(2);
    }
    const char *w = getenv("ST_FUZZ_WORK"), *src = getenv("ST_SOURCE_DIR");
    char work[1024];
    snprintf(work, sizeof work, "%s/%ld", w && *w ? w : "fuzz-work", (long)getpid()); /* one per process (-jobs) */
    Err err;
    if (fz_setup(reader, work, src && *src ? src : ST_SOURCE_DIR, &err) != ST_OK) {
        fprintf(stderr, "fuzz_%s: %s\n", FZ_READER, err.msg);
        exit(2);
    }
    const char *seeds = getenv("ST_FUZZ_SEED_DIR");
    if (seeds && *seeds) {
        char path[1200];
        snprintf(path, sizeof path, "%s/seed", seeds);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(reader->seed, 1, reader->seed_len, f) != reader->seed_len || fclose(f) != 0) {
            fprintf(stderr, "fuzz_%s: cannot write the seed to %s\n", FZ_READER, path);
            exit(2);
        }
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    Err err;
    uint64_t digest;
    Status st = fz_run(reader, data, size, &digest, &err);
    char why[600];
    if (!fz_contract(reader, st, &err, why, sizeof why)) {
        fprintf(stderr, "fuzz_%s: contract broken: %s\n", FZ_READER, why);
        abort();
    }
    return 0;
}
