/* status.h — status codes, error messages and the never-compiled-out invariant check.
 *
 * Anything touching the outside world (files, flags, MPI) returns a Status and fills an Err
 * whose message names the file or flag, what was expected and what was found. Only cli/ prints
 * the message and exits. Broken internal invariants abort through ST_CHECK with file:line. */
#ifndef ST_CORE_STATUS_H
#define ST_CORE_STATUS_H

#include <stddef.h>

typedef enum {
    ST_OK = 0,
    ST_ERR_RUNTIME = 1, /* the input was fine but something failed (I/O, out of memory) */
    ST_ERR_INPUT = 2,   /* bad input or usage: the process exit code is 2 */
} Status;

typedef struct {
    Status status;
    char msg[1024]; /* one line, no trailing newline: err_set and err_prefix write a control byte of
                       the text (a newline in a file name, key or line the message quotes) as \n, \r
                       or \xNN */
} Err;

/* Sets err (if non-NULL) to status and a printf-formatted message; returns status. */
Status err_set(Err *err, Status status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Prefixes the existing message with "prefix: " (e.g. a file name); returns err->status. */
Status err_prefix(Err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

void st_abort(const char *file, int line, const char *expr, const char *msg) __attribute__((noreturn));

/* Invariant check that survives NDEBUG: aborts with file:line and the failed expression. */
#define ST_CHECK(cond)                                                     \
    do {                                                                   \
        if (!(cond)) st_abort(__FILE__, __LINE__, #cond, NULL);            \
    } while (0)
#define ST_CHECK_MSG(cond, msg)                                            \
    do {                                                                   \
        if (!(cond)) st_abort(__FILE__, __LINE__, #cond, (msg));           \
    } while (0)

#endif
