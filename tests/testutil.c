/* testutil.c — check bookkeeping, error norms and file reading for the tests. */
#include "testutil.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>

#include "core/fileio.h"

int tu_failures = 0;

void tu_check(int ok, const char *name, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%s: %s ", name, ok ? "OK" : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    if (!ok) tu_failures++;
}

double tu_rel_err_f(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    if (den == 0) return sqrt(num);
    return sqrt(num / den);
}

double tu_rel_err_fd(const float *a, const double *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += b[i] * b[i];
    }
    if (den == 0) return sqrt(num);
    return sqrt(num / den);
}

double tu_max_abs_diff_f(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= m)) m = d; /* NaN propagates as the max */
    }
    return m;
}

int tu_exit(void) {
    if (tu_failures) printf("%d check(s) failed\n", tu_failures);
    return tu_failures ? 1 : 0;
}

char *tu_slurp(const char *path) {
    char *t;
    size_t n;
    Err e;
    return file_read_all(path, &t, &n, &e) == ST_OK ? t : NULL;
}
