/* testutil.h — tiny helpers shared by the test executables.
 *
 * Each test names its oracle and tolerance and prints "name: OK maxdiff=..." or FAIL; any
 * failure makes the executable exit non-zero (TU_EXIT). */
#ifndef ST_TESTUTIL_H
#define ST_TESTUTIL_H

#include <stddef.h>

extern int tu_failures;

/* Records a check: prints "name: OK <detail>" or "name: FAIL <detail>". */
void tu_check(int ok, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ||a - b|| / ||b|| in double (b = reference); 0 if both are zero. */
double tu_rel_err_f(const float *a, const float *b, size_t n);
double tu_rel_err_fd(const float *a, const double *b, size_t n);
double tu_max_abs_diff_f(const float *a, const float *b, size_t n);

/* The whole file as a NUL-terminated string (caller frees), or NULL if it cannot be read. */
char *tu_slurp(const char *path);

/* Returns the process exit status for main: 0 if no check failed. */
int tu_exit(void);

#endif
