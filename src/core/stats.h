/* stats.h — order statistics shared by the trainer (step-time medians), its health checks (the
 * rolling median and MAD of spike detection) and the studies (timing medians): one median. */
#ifndef ST_CORE_STATS_H
#define ST_CORE_STATS_H

#include <stddef.h>

/* The median of the finite values of v[0..n) (the mean of the two middle ones for an even count);
 * NaN when none is finite (or n == 0). In place: v is reordered, its finite values first, sorted
 * ascending; no allocation (for callers in the step loop, with their own scratch). */
double stats_median_inplace(double *v, size_t n);

/* The same on a copy: v is not modified. NaN also when the copy cannot be allocated. */
double stats_median(const double *v, size_t n);

#endif
