/* mem.c — categorised aligned allocation. */
#include "core/mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const NAMES[MEM_NCAT] = {
    "parameters", "gradients", "master_weights", "optimizer_moments", "activations",
    "workspace",  "communication", "checkpoint_staging", "data"};

const char *mem_category_name(MemCategory c) { return (c >= 0 && c < MEM_NCAT) ? NAMES[c] : "?"; }

void *mem_alloc(MemStats *ms, MemCategory c, size_t bytes) {
    if (bytes == 0) return NULL;
    size_t rounded = (bytes + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, rounded);
    if (!p) return NULL;
    memset(p, 0, rounded);
    if (ms) {
        ms->bytes[c] += bytes;
        if (ms->bytes[c] > ms->peak[c]) ms->peak[c] = ms->bytes[c];
    }
    return p;
}

void mem_free(MemStats *ms, MemCategory c, void *p, size_t bytes) {
    if (!p) return;
    free(p);
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
