/* status.c — error message formatting and the invariant abort. */
#include "core/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Messages longer than Err.msg are cut on purpose: one line, never an overflow. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

Status err_set(Err *err, Status status, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->status = status;
    }
    return status;
}

Status err_prefix(Err *err, const char *fmt, ...) {
    if (!err) return ST_ERR_RUNTIME;
    char pre[256], old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    old[sizeof old - 1] = '\0';
    size_t n = strlen(pre);
    memcpy(err->msg, pre, n);
    snprintf(err->msg + n, sizeof err->msg - n, ": %s", old);
    return err->status;
}

void st_abort(const char *file, int line, const char *expr, const char *msg) {
    fprintf(stderr, "scaletrain: internal error at %s:%d: check failed: %s%s%s\n", file, line, expr,
            msg ? ": " : "", msg ? msg : "");
    fflush(stderr);
    abort();
}
