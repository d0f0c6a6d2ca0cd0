/* stats.c — the median (stats.h). */
#include "core/stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double stats_median_inplace(double *v, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(v[i])) {
            double t = v[k];
            v[k++] = v[i], v[i] = t;
        }
    if (k == 0) return NAN;
    qsort(v, k, sizeof *v, cmp_double);
    return k % 2 ? v[k / 2] : 0.5 * (v[k / 2 - 1] + v[k / 2]);
}

double stats_median(const double *v, size_t n) {
    if (n == 0) return NAN;
    double *t = malloc(sizeof *t * n);
    if (!t) return NAN;
    memcpy(t, v, sizeof *t * n);
    double m = stats_median_inplace(t, n);
    free(t);
    return m;
}
