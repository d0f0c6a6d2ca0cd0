/* progress.c — the progress bar of prepare and eval (see progress.h). */
#include "core/progress.h"

#include <omp.h>
#include <stdio.h>
#include <unistd.h>

void progress_init(Progress *p, const char *what, const char *noun, const char *unit, double rate_scale) {
    p->what = what, p->noun = noun, p->unit = unit, p->rate_scale = rate_scale;
    p->tty = isatty(2);
    p->last_decile = -1;
    p->t0 = omp_get_wtime();
}

void progress_update(Progress *p, uint64_t done, uint64_t total) {
    double el = omp_get_wtime() - p->t0, frac = total ? (double)done / (double)total : 1.0;
    double rate = el > 0 ? (double)done / el * p->rate_scale : 0;
    double eta = frac > 0 ? el * (1 - frac) / frac : 0;
    if (p->tty) {
        int w = 30, k = (int)(frac * w + 0.5);
        char bar[64];
        for (int i = 0; i < w; i++) bar[i] = i < k ? '#' : '.';
        bar[w] = 0;
        fprintf(stderr, "\r%s [%s] %5.1f%% %10.1f %s  ETA %3d:%02d ", p->what, bar, frac * 100, rate, p->unit,
                (int)eta / 60, (int)eta % 60);
        if (done >= total) fprintf(stderr, "\n");
    } else {
        int dec = (int)(frac * 10);
        if (dec > p->last_decile || done >= total) {
            p->last_decile = dec;
            fprintf(stderr, "%s: %3.0f%% %llu/%llu %s, %.1f %s, ETA %.0f s\n", p->what, frac * 100,
                    (unsigned long long)done, (unsigned long long)total, p->noun, rate, p->unit, eta);
        }
    }
}

void progress_cb(void *ctx, uint64_t done, uint64_t total) { progress_update(ctx, done, total); }
