/* progress.h — progress of long operations on stderr: a bar with rate and ETA on a terminal, a
 * plain line per 10% otherwise (logs, CI). */
#ifndef ST_CORE_PROGRESS_H
#define ST_CORE_PROGRESS_H

#include <stdint.h>

typedef struct {
    const char *what;  /* "prepare", "eval" */
    const char *unit;  /* "MB/s", "tok/s" */
    const char *noun;  /* "bytes", "tokens" (plain lines) */
    double rate_scale; /* the rate shown is items/s times this (1e-6 for MB/s of bytes) */
    int tty;
    int last_decile;
    double t0;
} Progress;

void progress_init(Progress *p, const char *what, const char *noun, const char *unit, double rate_scale);
void progress_update(Progress *p, uint64_t done, uint64_t total);
/* The same as a callback (ctx = Progress *), for library code that reports progress. */
void progress_cb(void *ctx, uint64_t done, uint64_t total);

#endif
