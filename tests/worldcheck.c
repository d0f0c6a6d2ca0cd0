/* worldcheck.c — checks under MPI that must hold on every rank (see worldcheck.h). */
#include "worldcheck.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "testutil.h"

static Comm *g_world; /* tu_world_init's communicator (tests may use globals) */

Comm *tu_world_init(int *argc, char ***argv) {
    Err err = {0};
    if (comm_init(&g_world, argc, argv, &err) != ST_OK) {
        fprintf(stderr, "comm_init: %s\n", err.msg);
        exit(1);
    }
    return g_world;
}

void tu_world_check(int ok, const char *name, const char *fmt, ...) {
    Comm *c = g_world;
    char detail[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    int64_t bad = !ok;
    Err err = {0};
    if (comm_allreduce_i64(c, &bad, 1, COMM_MAX, &err) != ST_OK) {
        fprintf(stderr, "rank %d: verdict all-reduce failed: %s\n", c->rank, err.msg);
        bad = 1;
    }
    if (!ok && c->rank != 0) fprintf(stderr, "rank %d: %s: FAIL %s\n", c->rank, name, detail);
    if (c->rank == 0)
        tu_check(!bad, name, "world=%d %s", c->world, detail);
    else if (bad)
        tu_failures++;
}
