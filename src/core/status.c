/* status.c — error message formatting and the invariant abort. */
#include "core/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Messages longer than Err.msg are cut on purpose: one line, never an overflow. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

/* text into msg (cap bytes) as one line: a control byte (a newline, a carriage return, an escape
 * that a file's own bytes put into the message where it quotes them: a tensor name, a JSON key, a
 * line of text) is written as \n, \r or \xNN; a tab stays. Cut at cap - 1 bytes, never inside an
 * escape. */
static void one_line(char *msg, size_t cap, const char *text) {
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)text; *p && o + 1 < cap; p++) {
        unsigned char c = *p;
        if ((c >= 0x20 && c != 0x7f) || c == '\t') {
            msg[o++] = (char)c;
            continue;
        }
        char esc[8];
        int n = c == '\n' ? snprintf(esc, sizeof esc, "\\n") : c == '\r' ? snprintf(esc, sizeof esc, "\\r")
                                                              : snprintf(esc, sizeof esc, "\\x%02x", c);
        if (o + (size_t)n + 1 > cap) break;
        memcpy(msg + o, esc, (size_t)n);
        o += (size_t)n;
    }
    msg[o] = '\0';
}

Status err_set(Err *err, Status status, const char *fmt, ...) {
    if (err) {
        char text[sizeof err->msg];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(text, sizeof text, fmt, ap);
        va_end(ap);
        one_line(err->msg, sizeof err->msg, text);
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
    char text[sizeof err->msg];
    snprintf(text, sizeof text, "%s: %s", pre, old);
    one_line(err->msg, sizeof err->msg, text);
    return err->status;
}

void st_abort(const char *file, int line, const char *expr, const char *msg) {
    fprintf(stderr, "scaletrain: internal error at %s:%d: check failed: %s%s%s\n", file, line, expr,
            msg ? ": " : "", msg ? msg : "");
    fflush(stderr);
    abort();
}
