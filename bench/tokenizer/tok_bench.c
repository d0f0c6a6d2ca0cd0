/* tok_bench.c — our side of bench/tokenizer/run.sh: loads the GPT-2 tokenizer once, encodes FILE
 * (one tokenizer_encode call on the whole file, one thread) REPS times, prints the best time as
 * JSON and writes the ids as little-endian uint32 to OUT. Load time is excluded, as for tiktoken.
 * Usage: tok_bench GPT2_DIR FILE OUT REPS */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "data/bpe.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: tok_bench GPT2_DIR FILE OUT REPS\n");
        return 2;
    }
    Err e;
    Tokenizer *t = NULL;
    if (tokenizer_load(&t, "gpt2", argv[1], &e)) {
        fprintf(stderr, "tok_bench: %s\n", e.msg);
        return 2;
    }
    FILE *f = fopen(argv[2], "rb");
    if (!f) {
        fprintf(stderr, "tok_bench: %s: cannot open\n", argv[2]);
        return 2;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)n + 1);
    if (!b || fread(b, 1, (size_t)n, f) != (size_t)n) return 1;
    fclose(f);
    uint32_t *ids = NULL;
    size_t nids = 0, cap = 0;
    double best = 1e30;
    for (int r = 0; r < atoi(argv[4]); r++) {
        nids = 0;
        double t0 = now();
        if (tokenizer_encode(t, b, (size_t)n, &ids, &nids, &cap, &e)) return 1;
        double dt = now() - t0;
        if (dt < best) best = dt;
    }
    FILE *o = fopen(argv[3], "wb");
    if (!o || fwrite(ids, sizeof *ids, nids, o) != nids) return 1; /* x86: already little-endian */
    fclose(o);
    printf("{\"bytes\": %ld, \"tokens\": %zu, \"seconds\": %.6f}\n", n, nids, best);
    free(ids);
    free(b);
    tokenizer_free(t);
    return 0;
}
