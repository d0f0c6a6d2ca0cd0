/* mem.c — categorised aligned allocation. */
#include "core/mem.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
/* The slack calloc gives around the aligned block is poisoned, so an access just outside the block
 * (the size rounded up to 64 bytes, as aligned_alloc's was) is caught as it was before. */
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

static const char *const NAMES[MEM_NCAT] = {
    "parameters", "gradients", "master_weights", "optimizer_moments", "activations",
    "workspace",  "communication", "checkpoint_staging", "data"};

const char *mem_category_name(MemCategory c) { return (c >= 0 && c < MEM_NCAT) ? NAMES[c] : "?"; }

static size_t round64(size_t bytes) { return (bytes + 63) & ~(size_t)63; }

/* calloc, not aligned_alloc + memset: a large block comes from fresh mmap pages that are already
 * zero, so calloc does not write them and the run touches each page first where it uses it (a model
 * of 124 M parameters took a second of page faults and memset at init, and the same page faults
 * again at its first step). The pointer calloc gave sits in the 8 bytes below the aligned block. */
void *mem_alloc(MemStats *ms, MemCategory c, size_t bytes) {
    if (bytes == 0) return NULL;
    size_t rounded = round64(bytes);
    if (rounded < bytes || rounded > (size_t)-1 - 128) return NULL;
    size_t total = rounded + 64 + sizeof(void *);
    char *base = calloc(1, total);
    if (!base) return NULL;
    char *p = (char *)(((uintptr_t)base + sizeof(void *) + 63) & ~(uintptr_t)63);
    memcpy(p - sizeof(void *), &base, sizeof base);
    POISON(base, (size_t)(p - base));
    POISON(p + rounded, (size_t)(base + total - (p + rounded)));
    if (ms) {
        ms->bytes[c] += bytes;
        if (ms->bytes[c] > ms->peak[c]) ms->peak[c] = ms->bytes[c];
    }
    return p;
}

void mem_free(MemStats *ms, MemCategory c, void *p, size_t bytes) {
    if (!p) return;
    char *base;
    UNPOISON((char *)p - sizeof(void *), sizeof base);
    memcpy(&base, (char *)p - sizeof(void *), sizeof base);
    UNPOISON(base, (size_t)((char *)p - base) + round64(bytes));
    free(base);
    if (ms) ms->bytes[c] -= bytes;
}

size_t mem_rss_anon(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    size_t kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "RssAnon: %zu kB", &kb) == 1) break;
    fclose(f);
    return kb * 1024;
}
