/* fit.c — scaling-law fits to a table of runs (see fit.h; the math is in docs/fit.md).
 *
 * Contents: the CSV table · budget groups · Approach 3 (Huber objective, L-BFGS from the grid) ·
 * Approaches 1 and 2 · Kaplan forms · the bootstrap and fit_run. */
#include "fit/fit.h"

#include <ctype.h>
#include <float.h>
#include <gsl/gsl_errno.h>
#include <gsl/gsl_fit.h>
#include <gsl/gsl_multifit.h>
#include <lbfgs.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileio.h"
#include "core/rng.h"
#include "plan/plan.h"

FitOptions fit_default_options(void) {
    FitOptions o = {0};
    o.bootstrap = 100;
    o.seed = 1234;
    o.huber_delta = 1e-3;
    o.ci = 0.95;
    o.grid_stride = 1;
    o.boot_starts = 4;
    return o;
}

/* ========================================================= the table ================== */

void fit_table_free(FitTable *t) {
    free(t->N), free(t->D), free(t->C), free(t->L), free(t->line), free(t->B);
    memset(t, 0, sizeof *t);
}

static int table_alloc(FitTable *t, size_t cap) {
    t->N = malloc(cap * sizeof *t->N), t->D = malloc(cap * sizeof *t->D), t->C = malloc(cap * sizeof *t->C);
    t->L = malloc(cap * sizeof *t->L), t->line = malloc(cap * sizeof *t->line), t->B = calloc(cap, sizeof *t->B);
    return t->N && t->D && t->C && t->L && t->line && t->B;
}

/* Splits a line at commas into cells, RFC 4180 style, in place (line must be writable and
 * NUL-terminated): blanks around a cell are trimmed; a cell that starts with a double quote runs to
 * the matching closing quote, commas inside it included, and "" inside it is one quote (the sweep's
 * table quotes a `vary` or `status` cell holding a comma; a spreadsheet quotes any). Returns the
 * number of cells, or -1 when a quoted cell has no closing quote on the line (or text follows
 * its closing quote before the next comma). */
static int split_cells(char *line, char **cells, int max) {
    int n = 0;
    char *p = line;
    for (;;) {
        while (*p == ' ' || *p == '\t') p++;
        char *s = p, *e;
        if (*p == '"') { /* quoted: unescape "" into the same buffer */
            char *w = s;
            for (p++;; p++) {
                if (*p == '\0') return -1;
                if (*p == '"') {
                    if (p[1] != '"') break;
                    p++;
                }
                *w++ = *p;
            }
            e = w;
            for (p++; *p == ' ' || *p == '\t' || *p == '\r'; p++) {}
            if (*p != ',' && *p != '\0') return -1;
        } else {
            while (*p && *p != ',') p++;
            e = p;
            while (e > s && isspace((unsigned char)e[-1])) e--;
        }
        int last = *p == '\0';
        *e = '\0';
        if (n < max) cells[n] = s;
        n++;
        if (last) break;
        p++;
    }
    return n;
}

#define FIT_MAX_COLS 256

/* A cell as a decimal number ([+-]digits[.digits][e[+-]digits]): strtod alone would also take hex
 * (0x10), inf and nan. Returns 0 when s is not one. */
static int parse_decimal(const char *s, double *x) {
    const char *q = s;
    int digits = 0;
    if (*q == '+' || *q == '-') q++;
    for (; isdigit((unsigned char)*q); q++) digits++;
    if (*q == '.')
        for (q++; isdigit((unsigned char)*q); q++) digits++;
    if (!digits) return 0;
    if (*q == 'e' || *q == 'E') {
        q++;
        if (*q == '+' || *q == '-') q++;
        if (!isdigit((unsigned char)*q)) return 0;
        while (isdigit((unsigned char)*q)) q++;
    }
    if (*q) return 0;
    char *end = NULL;
    *x = strtod(s, &end);
    return *end == '\0';
}

Status fit_table_parse(FitTable *t, const char *path, const char *text, size_t len, Err *err) {
    memset(t, 0, sizeof *t);
    char *buf = malloc(len + 1);
    if (!buf) return err_set(err, ST_ERR_RUNTIME, "%s: out of memory", path);
    memcpy(buf, text, len);
    buf[len] = '\0';
    /* A NUL byte would end its line early and drop the cells after it unseen. */
    const char *nul = memchr(buf, '\0', len);
    if (nul) {
        size_t at = 1;
        for (const char *c = buf; c < nul; c++) at += *c == '\n';
        free(buf);
        return err_set(err, ST_ERR_INPUT, "%s:%zu: expected text, found a NUL byte", path, at);
    }
    enum { COL_PARAMS, COL_TOKENS, COL_LOSS, COL_FLOPS, COL_BUDGET, NCOL };
    static const char *const names[NCOL] = {"params", "tokens", "loss", "flops", "budget"};
    int col[NCOL] = {-1, -1, -1, -1, -1}, ncells = 0, need = 0, budget_ok = 1;
    char *cells[FIT_MAX_COLS];
    Status st = ST_OK;
    size_t lineno = 0, cap = 0;
    int header = 0;
    char *p = buf;
    if (len >= 3 && !memcmp(p, "\xEF\xBB\xBF", 3)) p += 3; /* a UTF-8 byte-order mark (spreadsheets write one) */
    while (p && *p) {
        char *nl = strchr(p, '\n');
        if (nl) *nl = '\0';
        lineno++;
        size_t ll = strlen(p);
        if (ll && p[ll - 1] == '\r') p[--ll] = '\0';
        const char *q = p;
        while (*q && isspace((unsigned char)*q)) q++;
        if (*q == '\0' || *q == '#') {
            p = nl ? nl + 1 : NULL;
            continue;
        }
        ncells = split_cells(p, cells, FIT_MAX_COLS);
        if (ncells < 0) {
            st = err_set(err, ST_ERR_INPUT, "%s:%zu: expected a quoted cell to close with a double quote followed by a "
                         "comma or the end of the line, found an unclosed quote or text after it (a quoted cell spanning "
                         "lines is not read)", path, lineno);
            goto done;
        }
        if (!header) {
            header = 1;
            for (int c = 0; c < ncells && c < FIT_MAX_COLS; c++)
                for (int k = 0; k < NCOL; k++) {
                    if (strcasecmp(cells[c], names[k])) continue;
                    if (col[k] >= 0) { /* which of the two would be read is a guess: refuse */
                        st = err_set(err, ST_ERR_INPUT, "%s:%zu: expected each column once, found '%s' twice (columns %d "
                                     "and %d)", path, lineno, names[k], col[k] + 1, c + 1);
                        goto done;
                    }
                    col[k] = c;
                }
            if (col[COL_PARAMS] < 0 || col[COL_TOKENS] < 0 || col[COL_LOSS] < 0) {
                char found[512] = "";
                for (int c = 0; c < ncells && c < FIT_MAX_COLS && strlen(found) < 400; c++)
                    snprintf(found + strlen(found), sizeof found - strlen(found), "%s%s", c ? "," : "", cells[c]);
                st = err_set(err, ST_ERR_INPUT, "%s: expected columns params,tokens,loss (flops optional), found: %s",
                             path, found[0] ? found : "(no names)");
                goto done;
            }
            for (int k = 0; k < COL_BUDGET; k++) /* budget is optional per row too */
                if (col[k] + 1 > need) need = col[k] + 1;
            t->has_flops = col[COL_FLOPS] >= 0;
            budget_ok = col[COL_BUDGET] >= 0;
            p = nl ? nl + 1 : NULL;
            continue;
        }
        if (ncells < need) {
            st = err_set(err, ST_ERR_INPUT, "%s:%zu: expected at least %d cells (up to the last of params,tokens,loss%s), "
                         "found %d", path, lineno, need, t->has_flops ? ",flops" : "", ncells);
            goto done;
        }
        if (t->n == cap) {
            cap = cap ? 2 * cap : 64;
            FitTable g = *t;
            double *arr[5] = {g.N, g.D, g.C, g.L, g.B};
            double **dst[5] = {&t->N, &t->D, &t->C, &t->L, &t->B};
            for (int k = 0; k < 5; k++) {
                double *r = realloc(arr[k], cap * sizeof(double));
                if (!r) {
                    st = err_set(err, ST_ERR_RUNTIME, "%s: out of memory", path);
                    goto done;
                }
                *dst[k] = r;
            }
            size_t *rl = realloc(t->line, cap * sizeof *rl);
            if (!rl) {
                st = err_set(err, ST_ERR_RUNTIME, "%s: out of memory", path);
                goto done;
            }
            t->line = rl;
        }
        double v[NCOL] = {0};
        if (!cells[col[COL_LOSS]][0]) { /* a run without a final loss (failed, diverged): left out, counted */
            if (t->skipped++ == 0) t->first_skipped = lineno;
            p = nl ? nl + 1 : NULL;
            continue;
        }
        if (col[COL_BUDGET] >= 0) { /* 0 or empty in any row: no budget grouping (a sizes x tokens grid) */
            const char *s = col[COL_BUDGET] < ncells ? cells[col[COL_BUDGET]] : "";
            double x = 0;
            if (s[0] && (!parse_decimal(s, &x) || !isfinite(x) || x < 0)) { /* "x", -1: not a budget, nor none */
                st = err_set(err, ST_ERR_INPUT, "%s:%zu:%d (budget): expected a finite decimal number >= 0 or an empty "
                             "cell, found '%s'", path, lineno, col[COL_BUDGET] + 1, s);
                goto done;
            }
            if (x <= 0) budget_ok = 0;
            else v[COL_BUDGET] = x;
        }
        for (int k = 0; k < COL_BUDGET; k++) {
            if (col[k] < 0) continue;
            const char *s = cells[col[k]];
            double x = 0;
            if (!parse_decimal(s, &x) || !isfinite(x) || x <= 0) {
                st = err_set(err, ST_ERR_INPUT, "%s:%zu:%d (%s): expected a positive finite decimal number, found '%s'", path,
                             lineno, col[k] + 1, names[k], s);
                goto done;
            }
            v[k] = x;
        }
        t->N[t->n] = v[COL_PARAMS], t->D[t->n] = v[COL_TOKENS], t->L[t->n] = v[COL_LOSS];
        t->C[t->n] = t->has_flops ? v[COL_FLOPS] : 6.0 * v[COL_PARAMS] * v[COL_TOKENS];
        if (!isfinite(t->C[t->n])) { /* 6ND past DBL_MAX: an infinite budget gave NaN optima, exit 0 */
            st = err_set(err, ST_ERR_INPUT, "%s:%zu: expected C = 6 x params x tokens (no flops column) to be a finite "
                         "number, found 6 x %g x %g, beyond %g", path, lineno, v[COL_PARAMS], v[COL_TOKENS], DBL_MAX);
            goto done;
        }
        t->B[t->n] = v[COL_BUDGET];
        t->line[t->n] = lineno;
        t->n++;
        p = nl ? nl + 1 : NULL;
    }
    t->has_budget = budget_ok && t->n > 0;
    if (!header) st = err_set(err, ST_ERR_INPUT, "%s: empty file (expected a CSV header with columns params,tokens,loss)", path);
    else if (t->n == 0 && t->skipped)
        st = err_set(err, ST_ERR_INPUT, "%s: %zu row%s, every one with an empty loss (failed or diverged runs, the first "
                     "at line %zu); expected runs with a loss", path, t->skipped, t->skipped == 1 ? "" : "s",
                     t->first_skipped);
    else if (t->n == 0) st = err_set(err, ST_ERR_INPUT, "%s: a header and no rows (expected one row per run)", path);
done:
    free(buf);
    if (st != ST_OK) fit_table_free(t);
    return st;
}

Status fit_table_load(FitTable *t, const char *path, Err *err) {
    char *text = NULL;
    size_t len = 0;
    Status st = file_read_all(path, &text, &len, err);
    if (st != ST_OK) return st;
    st = fit_table_parse(t, path, text, len, err);
    free(text);
    return st;
}

Status fit_table_from_arrays(FitTable *t, const double *N, const double *D, const double *C, const double *L, size_t n,
                             Err *err) {
    memset(t, 0, sizeof *t);
    if (!table_alloc(t, n ? n : 1)) {
        fit_table_free(t);
        return err_set(err, ST_ERR_RUNTIME, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        t->N[i] = N[i], t->D[i] = D[i], t->L[i] = L[i], t->C[i] = C ? C[i] : 6.0 * N[i] * D[i], t->line[i] = 0;
    }
    t->n = n;
    t->has_flops = C != NULL;
    return ST_OK;
}

void fit_table_drop_highest(FitTable *t, size_t k) {
    for (size_t d = 0; d < k && t->n > 0; d++) {
        size_t w = 0;
        for (size_t i = 1; i < t->n; i++)
            if (t->L[i] >= t->L[w]) w = i; /* ties: the later row */
        for (size_t i = w; i + 1 < t->n; i++)
            t->N[i] = t->N[i + 1], t->D[i] = t->D[i + 1], t->C[i] = t->C[i + 1], t->L[i] = t->L[i + 1],
            t->line[i] = t->line[i + 1], t->B[i] = t->B[i + 1];
        t->n--;
    }
}

/* ========================================================= budget groups ============== */

/* order[0..n): positions j into idx sorted by C[idx[j]]; insertion sort (n is a few hundred at
 * most; keeps the code reentrant, unlike a qsort with a global context). */
static void sort_by_c(const FitTable *t, const size_t *idx, size_t n, size_t *order) {
    const double *key = t->has_budget ? t->B : t->C; /* budget groups: sorted by budget (fit.h) */
    for (size_t j = 0; j < n; j++) {
        size_t v = j, i = j;
        while (i > 0 && key[idx[order[i - 1]]] > key[idx[v]]) order[i] = order[i - 1], i--;
        order[i] = v;
    }
}

/* Rows idx[0..n) grouped by compute (fit.h); gid[j] receives the group of idx[j], groups numbered
 * in increasing C; order receives the positions sorted by C. Returns the number of groups. */
static int group_rows(const FitTable *t, const size_t *idx, size_t n, int *gid, size_t *order) {
    sort_by_c(t, idx, n, order);
    int g = -1;
    double c0 = 0;
    for (size_t j = 0; j < n; j++) {
        double c = t->has_budget ? t->B[idx[order[j]]] : t->C[idx[order[j]]];
        if (g < 0 || (t->has_budget ? c != c0 : c > c0 * (1.0 + FIT_GROUP_RTOL))) g++, c0 = c;
        gid[order[j]] = g;
    }
    return g + 1;
}

int fit_budget_groups(const FitTable *t, int *gid) {
    size_t *idx = malloc((t->n ? t->n : 1) * sizeof *idx), *order = malloc((t->n ? t->n : 1) * sizeof *order);
    int ng = -1;
    if (idx && order) {
        for (size_t i = 0; i < t->n; i++) idx[i] = i;
        ng = group_rows(t, idx, t->n, gid, order);
    }
    free(idx), free(order);
    return ng;
}

/* ========================================================= Approach 3 ================= */

/* glibc's vector exp and log (libmvec, pulled in by libm's link script) for the loop below: with
 * these declarations GCC calls the 8-wide AVX-512 (or 4-wide AVX2) forms under `omp simd`. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__GLIBC__) && !defined(__FAST_MATH__)
__attribute__((simd("notinbranch"))) double exp(double);
__attribute__((simd("notinbranch"))) double log(double);
#endif

/* The objective over rows given as ln N, ln D, ln L (xs, ys, ls: n each). The logarithms of the
 * data are the same at every evaluation, so fit_approach3 takes them once; the rows are summed as
 * vectors (omp simd: the sum's order is the vector width's, fixed for a build) with libmvec's exp
 * and log, which are within a few ulps of the scalar ones. The largest of the three terms has weight
 * exactly 1 for a finite maximum; an infinite one keeps exp(inf - inf) = NaN. 108 runs from the
 * 5400-start grid: 1.71 -> 0.72 s on one core against the scalar loop (docs/fit.md). */
static double objective_logs(const double *xs, const double *ys, const double *ls, size_t n, double delta,
                             const double p[5], double g[5]) {
    double e = p[0], a = p[1], b = p[2], al = p[3], be = p[4];
    double f = 0, g0 = 0, g1 = 0, g2 = 0, g3 = 0, g4 = 0;
#pragma omp simd reduction(+ : f, g0, g1, g2, g3, g4)
    for (size_t j = 0; j < n; j++) {
        double x = xs[j], y = ys[j];
        double t1 = a - al * x, t2 = b - be * y, t3 = e;
        double m = t1 > t2 ? t1 : t2;
        m = m > t3 ? m : t3;
        int fin = m - m == 0; /* finite */
        double w1 = exp(t1 - m), w2 = exp(t2 - m), w3 = exp(t3 - m);
        w1 = fin && t1 == m ? 1.0 : w1, w2 = fin && t2 == m ? 1.0 : w2, w3 = fin && t3 == m ? 1.0 : w3;
        double s = w1 + w2 + w3;
        double r = m + log(s) - ls[j];
        double ar = r < 0 ? -r : r;
        int in = ar <= delta;
        f += in ? 0.5 * r * r : delta * (ar - 0.5 * delta);
        double dh = in ? r : r > 0 ? delta : -delta;
        double is = 1.0 / s; /* softmax: d LSE / d t_k */
        g0 += dh * w3 * is;
        g1 += dh * w1 * is;
        g2 += dh * w2 * is;
        g3 -= dh * w1 * is * x;
        g4 -= dh * w2 * is * y;
    }
    if (g) g[0] = g0, g[1] = g1, g[2] = g2, g[3] = g3, g[4] = g4;
    return f;
}

/* ln N, ln D, ln L of rows idx[0..n) (all rows when idx is NULL) into one allocation of 3n. */
static double *row_logs(const FitTable *t, const size_t *idx, size_t n) {
    double *v = malloc((n ? 3 * n : 1) * sizeof *v);
    ST_CHECK(v != NULL);
    for (size_t j = 0; j < n; j++) {
        size_t i = idx ? idx[j] : j;
        v[j] = log(t->N[i]), v[n + j] = log(t->D[i]), v[2 * n + j] = log(t->L[i]);
    }
    return v;
}

double fit_objective(const FitTable *t, const size_t *idx, size_t n, double delta, const double p[5], double g[5]) {
    double *v = row_logs(t, idx, n);
    double f = objective_logs(v, v + n, v + 2 * n, n, delta, p, g);
    free(v);
    return f;
}

typedef struct {
    const double *xs, *ys, *ls; /* ln N, ln D, ln L of the rows, in order */
    size_t n;
    double delta;
} ObjCtx;

static lbfgsfloatval_t obj_eval(void *inst, const lbfgsfloatval_t *x, lbfgsfloatval_t *g, const int n,
                                const lbfgsfloatval_t step) {
    const ObjCtx *c = inst;
    return objective_logs(c->xs, c->ys, c->ls, c->n, c->delta, x, g);
}

/* One L-BFGS run from p (overwritten by the final point); returns 1 if it reported convergence. */
static int lbfgs_from(const ObjCtx *c, double p[5], double *f) {
    lbfgs_parameter_t prm;
    lbfgs_parameter_init(&prm);
    /* Stop on a relative gradient of 1e-10 or a relative decrease below 1e-12 over 10 iterations;
     * objectives of exact data go to ~0, so the decrease test is what ends those runs. */
    prm.epsilon = 1e-10;
    prm.past = 10;
    prm.delta = 1e-12;
    prm.max_iterations = 1000;
    lbfgsfloatval_t *x = lbfgs_malloc(5), fx = 0;
    ST_CHECK(x != NULL);
    for (int k = 0; k < 5; k++) x[k] = p[k];
    int ret = lbfgs(5, x, &fx, obj_eval, NULL, (void *)c, &prm);
    for (int k = 0; k < 5; k++) p[k] = x[k];
    lbfgs_free(x);
    /* The library returns the last accepted point on a line-search failure; re-evaluate there. */
    *f = objective_logs(c->xs, c->ys, c->ls, c->n, c->delta, p, NULL);
    if (!isfinite(*f)) *f = INFINITY;
    return ret >= 0;
}

/* Hoffmann et al.'s initialisation grid (fit.h), every stride-th value of each axis. */
static int grid_starts(int stride, double **out) {
    double al[5], e[6], ab[6];
    int nal = 0, ne = 0, nab = 0;
    if (stride < 1) stride = 1;
    for (int i = 0; i < 5; i += stride) al[nal++] = 0.5 * i;
    for (int i = 0; i < 6; i += stride) e[ne++] = -1.0 + 0.5 * i;
    for (int i = 0; i < 6; i += stride) ab[nab++] = 5.0 * i;
    int n = nal * nal * ne * nab * nab, k = 0;
    double *s = malloc((size_t)n * 5 * sizeof *s);
    ST_CHECK(s != NULL);
    for (int i1 = 0; i1 < nal; i1++)
        for (int i2 = 0; i2 < nal; i2++)
            for (int i3 = 0; i3 < ne; i3++)
                for (int i4 = 0; i4 < nab; i4++)
                    for (int i5 = 0; i5 < nab; i5++) {
                        double *p = &s[5 * k++];
                        p[0] = e[i3], p[1] = ab[i4], p[2] = ab[i5], p[3] = al[i1], p[4] = al[i2];
                    }
    *out = s;
    return n;
}

static FitLaw law_from(const double p[5]) {
    return (FitLaw){exp(p[0]), exp(p[1]), exp(p[2]), p[3], p[4]};
}

int fit_approach3(const FitTable *t, const size_t *idx, size_t n, double delta, int grid_stride, const double *starts,
                  int nstart, FitLaw *law, double *objective, double *keep, int nkeep) {
    double *grid = NULL;
    if (nstart == 0) nstart = grid_starts(grid_stride, &grid), starts = grid;
    double *pts = malloc((size_t)nstart * 5 * sizeof *pts), *fs = malloc((size_t)nstart * sizeof *fs);
    int *conv = malloc((size_t)nstart * sizeof *conv);
    ST_CHECK(pts && fs && conv);
    double *logs = row_logs(t, idx, n);
    ObjCtx c = {logs, logs + n, logs + 2 * n, n, delta};
    /* Independent starts; each writes only its own slot and the reduction below runs in start
     * order, so the result does not depend on the thread count. */
#pragma omp parallel for schedule(dynamic, 8)
    for (int s = 0; s < nstart; s++) {
        double *p = &pts[5 * s];
        memcpy(p, &starts[5 * s], 5 * sizeof *p);
        conv[s] = lbfgs_from(&c, p, &fs[s]);
    }
    int best = 0, nconv = 0;
    for (int s = 0; s < nstart; s++) {
        nconv += conv[s];
        if (fs[s] < fs[best]) best = s;
    }
    *law = law_from(&pts[5 * best]);
    *objective = fs[best];
    /* The best distinct final points, for warm starts: repeatedly the lowest objective whose point
     * differs from every kept one by more than 1e-3 in some coordinate. */
    for (int k = 0; keep && k < nkeep; k++) {
        int pick = -1;
        for (int s = 0; s < nstart; s++) {
            if (!isfinite(fs[s]) || (pick >= 0 && fs[s] >= fs[pick])) continue;
            int dup = 0;
            for (int j = 0; j < k && !dup; j++) {
                double d = 0;
                for (int q = 0; q < 5; q++) d = fmax(d, fabs(pts[5 * s + q] - keep[5 * j + q]));
                dup = d <= 1e-3;
            }
            if (!dup) pick = s;
        }
        if (pick < 0) pick = best; /* fewer distinct minima than asked: repeat the best */
        memcpy(&keep[5 * k], &pts[5 * pick], 5 * sizeof *keep);
    }
    free(pts), free(fs), free(conv), free(grid), free(logs);
    return nconv;
}

void fit_law_optimum(const FitLaw *law, double C, double *N, double *D) {
    PlanScaling s = {.name = "fit", .E = law->E, .A = law->A, .B = law->B, .alpha = law->alpha, .beta = law->beta};
    plan_scaling_optimum(&s, C, N, D);
}

double fit_law_loss(const FitLaw *law, double N, double D) {
    PlanScaling s = {.name = "fit", .E = law->E, .A = law->A, .B = law->B, .alpha = law->alpha, .beta = law->beta};
    return plan_scaling_loss(&s, N, D);
}

/* ========================================================= Approaches 1, 2, Kaplan ====== */

/* Least squares y = k + a x over n points; 0 if fewer than 2 points or x constant. */
static int line_fit(const double *x, const double *y, size_t n, double *a, double *k) {
    if (n < 2) return 0;
    double lo = x[0], hi = x[0];
    for (size_t i = 1; i < n; i++) lo = fmin(lo, x[i]), hi = fmax(hi, x[i]);
    if (hi - lo <= 1e-12 * fmax(1.0, fabs(hi))) return 0;
    double c0, c1, v00, v01, v11, ss;
    if (gsl_fit_linear(x, 1, y, 1, n, &c0, &c1, &v00, &v01, &v11, &ss) != GSL_SUCCESS) return 0;
    *a = c1, *k = c0;
    return isfinite(c0) && isfinite(c1);
}

/* Least-squares parabola L = p0 + p1 x + p2 x² (x = ln N) over rows idx[sel[0..m)]; x is centred
 * on its mean for conditioning and the coefficients are returned for the uncentred x. */
static int parabola_fit(const FitTable *t, const size_t *idx, const size_t *sel, size_t m, double p[3]) {
    double xm = 0;
    for (size_t j = 0; j < m; j++) xm += log(t->N[idx[sel[j]]]);
    xm /= (double)m;
    gsl_matrix *X = gsl_matrix_alloc(m, 3), *cov = gsl_matrix_alloc(3, 3);
    gsl_vector *y = gsl_vector_alloc(m), *c = gsl_vector_alloc(3);
    gsl_multifit_linear_workspace *w = gsl_multifit_linear_alloc(m, 3);
    ST_CHECK(X && cov && y && c && w);
    for (size_t j = 0; j < m; j++) {
        double u = log(t->N[idx[sel[j]]]) - xm;
        gsl_matrix_set(X, j, 0, 1.0), gsl_matrix_set(X, j, 1, u), gsl_matrix_set(X, j, 2, u * u);
        gsl_vector_set(y, j, t->L[idx[sel[j]]]);
    }
    double chisq;
    int ok = gsl_multifit_linear(X, y, c, cov, &chisq, w) == GSL_SUCCESS;
    double q0 = gsl_vector_get(c, 0), q1 = gsl_vector_get(c, 1), q2 = gsl_vector_get(c, 2);
    /* L = q0 + q1 (x − xm) + q2 (x − xm)² */
    p[0] = q0 - q1 * xm + q2 * xm * xm, p[1] = q1 - 2 * q2 * xm, p[2] = q2;
    gsl_multifit_linear_free(w), gsl_vector_free(c), gsl_vector_free(y), gsl_matrix_free(cov), gsl_matrix_free(X);
    return ok && isfinite(p[0]) && isfinite(p[1]) && isfinite(p[2]);
}

/* Scratch for the per-sample fits of Approaches 1, 2 and Kaplan (all n-sized). */
typedef struct {
    size_t *order, *sel;
    int *gid;
    double *x, *y, *y2;
} Scratch;

typedef struct {
    int ap1, ap2, kn, kc;           /* 1: fitted */
    double a1n, k1n, a1d, k1d;      /* Approach 1 */
    double a2n, k2n, a2d, k2d;      /* Approach 2 */
    double an, cn, ac, cc;          /* Kaplan: alpha_N, ln N_c, alpha_C, ln C_c */
    int n1, n2, nkn, nkc;           /* points used */
} SmallFits;

/* Approaches 1, 2 and the Kaplan forms on rows idx[0..n). groups (if non-NULL, up to
 * FIT_MAX_GROUPS) receives the per-budget detail; why1 / why2 receive why an approach was skipped. */
static void small_fits(const FitTable *t, const size_t *idx, size_t n, Scratch *s, SmallFits *r, FitGroup *groups,
                       int *ngroups, char *why1, char *why2, size_t whylen) {
    memset(r, 0, sizeof *r);
    int ng = group_rows(t, idx, n, s->gid, s->order);
    if (ngroups) *ngroups = ng < FIT_MAX_GROUPS ? ng : FIT_MAX_GROUPS;
    /* Walk the groups in C order (order[] is sorted by C, groups are contiguous in it). */
    size_t n1 = 0, n2 = 0, used = 0, parab = 0;
    double *x1 = s->x, *yn = s->y, *yd = s->y2;
    double *x2 = x1 + n, *zn = yn + n, *zd = yd + n; /* second halves: Approach 2's points */
    for (size_t j0 = 0; j0 < n;) {
        int g = s->gid[s->order[j0]];
        size_t j1 = j0;
        while (j1 < n && s->gid[s->order[j1]] == g) j1++;
        size_t m = j1 - j0, best = idx[s->order[j0]];
        double lc = 0, xlo = INFINITY, xhi = -INFINITY;
        int distinct = 0;
        for (size_t j = j0; j < j1; j++) {
            size_t i = idx[s->order[j]];
            lc += log(t->C[i]);
            if (t->L[i] < t->L[best]) best = i;
            double xi = log(t->N[i]);
            int seen = 0;
            for (size_t q = j0; q < j && !seen; q++) seen = fabs(log(t->N[idx[s->order[q]]]) - xi) < 1e-9;
            distinct += !seen;
            xlo = fmin(xlo, xi), xhi = fmax(xhi, xi);
            s->sel[j - j0] = s->order[j];
        }
        lc /= (double)m;
        /* Approach 1: the lowest loss of this budget. */
        x1[n1] = lc, yn[n1] = log(t->N[best]), yd[n1] = log(t->D[best]), n1++;
        FitGroup fg = {.C = exp(lc), .nrows = (int)m, .ndistinct = distinct, .best = best};
        /* Approach 2: a parabola in ln N when the budget has 3 or more sizes. */
        if (distinct >= 3) {
            double p[3];
            parab++;
            if (parabola_fit(t, idx, s->sel, m, p)) {
                fg.parabola = 1, fg.p0 = p[0], fg.p1 = p[1], fg.p2 = p[2];
                double xv = p[2] > 0 ? -p[1] / (2 * p[2]) : NAN;
                fg.n_vertex = exp(xv);
                if (!(p[2] > 0)) snprintf(fg.why, sizeof fg.why, "the parabola opens downward");
                else if (xv < xlo || xv > xhi)
                    snprintf(fg.why, sizeof fg.why, "the vertex N=%.3g lies outside the sampled %.3g..%.3g", exp(xv),
                             exp(xlo), exp(xhi));
                else {
                    fg.used = 1, used++;
                    x2[n2] = lc, zn[n2] = xv, zd[n2] = lc - log(6.0) - xv, n2++;
                }
            } else {
                snprintf(fg.why, sizeof fg.why, "the least-squares parabola failed");
            }
        } else {
            snprintf(fg.why, sizeof fg.why, "%d distinct model size%s (3 needed)", distinct, distinct == 1 ? "" : "s");
        }
        if (groups && g < FIT_MAX_GROUPS) groups[g] = fg;
        j0 = j1;
    }
    /* Approach 1 */
    r->n1 = (int)n1;
    if (n1 < 3) {
        if (why1) snprintf(why1, whylen, "fewer than 3 compute budgets (found %zu)", n1);
    } else {
        r->ap1 = line_fit(x1, yn, n1, &r->a1n, &r->k1n) && line_fit(x1, yd, n1, &r->a1d, &r->k1d);
        if (!r->ap1 && why1) snprintf(why1, whylen, "the least-squares fit failed");
    }
    /* Approach 2 */
    r->n2 = (int)n2;
    if (parab == 0) {
        if (why2) snprintf(why2, whylen, "no compute budget with 3 or more model sizes");
    } else if (n2 < 3) {
        if (why2)
            snprintf(why2, whylen, "%zu of %zu budgets with 3 or more sizes have a usable parabola minimum (3 needed)",
                     n2, parab);
    } else {
        r->ap2 = line_fit(x2, zn, n2, &r->a2n, &r->k2n) && line_fit(x2, zd, n2, &r->a2d, &r->k2d);
        if (!r->ap2 && why2) snprintf(why2, whylen, "the least-squares fit failed");
    }
    /* Kaplan L(C) on the frontier: the lowest loss of each budget. */
    for (size_t q = 0, j0 = 0; j0 < n; q++) {
        int g = s->gid[s->order[j0]];
        size_t best = idx[s->order[j0]];
        while (j0 < n && s->gid[s->order[j0]] == g) {
            size_t i = idx[s->order[j0]];
            if (t->L[i] < t->L[best]) best = i;
            j0++;
        }
        zn[q] = log(t->L[best]);
        r->nkc = (int)q + 1;
    }
    if (r->nkc >= 3) {
        double a, k;
        if (line_fit(x1, zn, (size_t)r->nkc, &a, &k)) r->kc = 1, r->ac = -a, r->cc = k / r->ac;
    }
    /* Kaplan L(N): the lowest loss of each distinct N (sort by N via the scratch). */
    size_t nk = 0;
    for (size_t j = 0; j < n; j++) {
        size_t i = idx[j];
        double xi = log(t->N[i]), li = log(t->L[i]);
        size_t q = 0;
        while (q < nk && fabs(x2[q] - xi) >= 1e-9) q++;
        if (q == nk) x2[nk] = xi, zd[nk] = li, nk++;
        else if (li < zd[q]) zd[q] = li;
    }
    r->nkn = (int)nk;
    if (nk >= 3) {
        double a, k;
        if (line_fit(x2, zd, nk, &a, &k)) r->kn = 1, r->an = -a, r->cn = k / r->an;
    }
}

/* ========================================================= bootstrap, fit_run ========== */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The central ci-interval of v[0..n) (sorted in place; linear interpolation between order
 * statistics); NaN values are left out. [NaN, NaN] when none is left. */
static void percentile_ci(double *v, int n, double ci, double out[2]) {
    int m = 0;
    for (int i = 0; i < n; i++)
        if (isfinite(v[i])) v[m++] = v[i];
    if (m == 0) {
        out[0] = out[1] = NAN;
        return;
    }
    qsort(v, (size_t)m, sizeof *v, cmp_double);
    double q[2] = {(1 - ci) / 2, 1 - (1 - ci) / 2};
    for (int k = 0; k < 2; k++) {
        double h = q[k] * (m - 1);
        int lo = (int)floor(h);
        int hi = lo + 1 < m ? lo + 1 : lo;
        out[k] = v[lo] + (h - lo) * (v[hi] - v[lo]);
    }
}

enum { B_E, B_A, B_B, B_AL, B_BE, B_NOPT, B_DOPT, B_TPP, B_LOSS, B_ACL, B_1A, B_1D, B_1NB, B_1DB, B_2A, B_2D, B_2NB,
       B_2DB, B_KAN, B_KNC, B_KAC, B_KCC, B_NSTAT };

void fit_result_free(FitResult *r) {
    free(r->residual);
    r->residual = NULL;
}

static void power_at(FitPower *p, double C) { p->at_budget = exp(p->k + p->a * log(C)); }

Status fit_run(FitTable *t, const FitOptions *o, FitResult *r, Err *err) {
    memset(r, 0, sizeof *r);
    size_t before = t->n;
    fit_table_drop_highest(t, o->drop_highest);
    r->n_dropped = before - t->n;
    r->n_rows = t->n;
    r->has_flops = t->has_flops;
    r->has_budget = t->has_budget, r->n_skipped = t->skipped, r->first_skipped = t->first_skipped;
    if (t->n < 5)
        return err_set(err, ST_ERR_INPUT, "%zu row%s%s, expected at least 5 runs to fit the 5 constants of L(N, D)", t->n,
                       t->n == 1 ? "" : "s", r->n_dropped ? " after --drop-highest" : "");
    /* The law has 5 constants: 5 rows of one (N, D) point repeated determine none of them (the fit
     * then returns any of a family of minima with objective 0). */
    size_t distinct = 0;
    for (size_t i = 0; i < t->n; i++) {
        size_t j = 0;
        while (j < i && !(t->N[j] == t->N[i] && t->D[j] == t->D[i])) j++;
        distinct += j == i;
    }
    if (distinct < 5)
        return err_set(err, ST_ERR_INPUT, "%zu distinct (params, tokens) point%s in %zu rows, expected at least 5 to fit "
                       "the 5 constants of L(N, D) (Approach 3)", distinct, distinct == 1 ? "" : "s", t->n);
    /* Each term's shape is fitted on its own axis: A/N^alpha on k distinct N gives k values up to the
     * constant it shares with E, so A, alpha and that constant need k >= 3 (likewise B, beta on D).
     * One model size returned an alpha and an N* the data say nothing about, exit 0. */
    for (int ax = 0; ax < 2; ax++) {
        const double *v = ax ? t->D : t->N;
        size_t k = 0;
        for (size_t i = 0; i < t->n && k < 3; i++) {
            size_t j = 0;
            while (j < i && v[j] != v[i]) j++;
            k += j == i;
        }
        if (k < 3)
            return err_set(err, ST_ERR_INPUT, "%zu distinct %s value%s in %zu rows, expected at least 3 to fit %s of "
                           "L(N, D) = E + A/N^alpha + B/D^beta (Approach 3)", k, ax ? "tokens" : "params", k == 1 ? "" : "s",
                           t->n, ax ? "B and beta" : "A and alpha");
    }
    if (o->bootstrap > FIT_MAX_BOOTSTRAP)
        return err_set(err, ST_ERR_INPUT, "bootstrap: expected at most %d resamples, found %d", FIT_MAX_BOOTSTRAP, o->bootstrap);
    gsl_set_error_handler_off(); /* GSL reports through return codes; never abort the process */
    size_t n = t->n;
    double cmax = 0;
    for (size_t i = 0; i < n; i++) cmax = fmax(cmax, t->C[i]);
    r->budget = o->budget_flops > 0 ? o->budget_flops : cmax;
    int nkeep = o->boot_starts > 0 ? o->boot_starts : 1;
    double *keep = malloc((size_t)nkeep * 5 * sizeof *keep);
    size_t *idx = malloc(n * sizeof *idx);
    Scratch s = {malloc(n * sizeof(size_t)), malloc(n * sizeof(size_t)), malloc(n * sizeof(int)),
                 malloc(2 * n * sizeof(double)), malloc(2 * n * sizeof(double)), malloc(2 * n * sizeof(double))};
    r->residual = malloc(n * sizeof *r->residual);
    int K = o->bootstrap > 0 ? o->bootstrap : 0;
    double *stat = malloc(((size_t)K + 1) * B_NSTAT * sizeof *stat);
    if (!keep || !idx || !s.order || !s.sel || !s.gid || !s.x || !s.y || !s.y2 || !r->residual || !stat) {
        free(keep), free(idx), free(s.order), free(s.sel), free(s.gid), free(s.x), free(s.y), free(s.y2), free(stat);
        fit_result_free(r);
        return err_set(err, ST_ERR_RUNTIME, "out of memory");
    }

    /* ---- the full-data fits ---- */
    r->n_starts = 0;
    {
        int stride = o->grid_stride > 0 ? o->grid_stride : 1;
        double *g = NULL;
        r->n_starts = grid_starts(stride, &g);
        free(g);
        r->n_converged = fit_approach3(t, NULL, n, o->huber_delta, stride, NULL, 0, &r->law, &r->objective, keep, nkeep);
    }
    for (size_t i = 0; i < n; i++) r->residual[i] = log(t->L[i]) - log(fit_law_loss(&r->law, t->N[i], t->D[i]));
    fit_law_optimum(&r->law, r->budget, &r->n_opt, &r->d_opt);
    r->tpp = r->d_opt / r->n_opt;
    r->loss_opt = fit_law_loss(&r->law, r->n_opt, r->d_opt);
    r->a_closed = r->law.beta / (r->law.alpha + r->law.beta);
    for (size_t i = 0; i < n; i++) idx[i] = i;
    SmallFits sf;
    small_fits(t, idx, n, &s, &sf, r->groups, &r->ngroups, r->ap1.why, r->ap2.why, sizeof r->ap1.why);
    r->ap1.ok = sf.ap1, r->ap1.npoints = sf.n1;
    r->ap1.n_opt.a = sf.a1n, r->ap1.n_opt.k = sf.k1n, r->ap1.d_opt.a = sf.a1d, r->ap1.d_opt.k = sf.k1d;
    r->ap2.ok = sf.ap2, r->ap2.npoints = sf.n2;
    r->ap2.n_opt.a = sf.a2n, r->ap2.n_opt.k = sf.k2n, r->ap2.d_opt.a = sf.a2d, r->ap2.d_opt.k = sf.k2d;
    power_at(&r->ap1.n_opt, r->budget), power_at(&r->ap1.d_opt, r->budget);
    power_at(&r->ap2.n_opt, r->budget), power_at(&r->ap2.d_opt, r->budget);
    r->kaplan_n_ok = sf.kn, r->alpha_n = sf.an, r->n_c = exp(sf.cn), r->kaplan_n_points = sf.nkn;
    r->kaplan_c_ok = sf.kc, r->alpha_c = sf.ac, r->c_c = exp(sf.cc), r->kaplan_c_points = sf.nkc;

    /* ---- the bootstrap: K resamples of the rows with replacement, every approach refitted;
     * Approach 3 from the full fit's best distinct minima (not the whole grid: docs/fit.md) ---- */
    for (int b = 0; b < K; b++) {
        double *st = &stat[(size_t)b * B_NSTAT];
        for (int q = 0; q < B_NSTAT; q++) st[q] = NAN;
        for (size_t i = 0; i < n; i++) idx[i] = (size_t)rng_below(o->seed, 0xF17B007, (uint64_t)b * n + i, n);
        FitLaw lw;
        double f;
        fit_approach3(t, idx, n, o->huber_delta, 1, keep, nkeep, &lw, &f, NULL, 0);
        double nb, db;
        fit_law_optimum(&lw, r->budget, &nb, &db);
        st[B_E] = lw.E, st[B_A] = lw.A, st[B_B] = lw.B, st[B_AL] = lw.alpha, st[B_BE] = lw.beta;
        st[B_NOPT] = nb, st[B_DOPT] = db, st[B_TPP] = db / nb, st[B_LOSS] = fit_law_loss(&lw, nb, db);
        st[B_ACL] = lw.beta / (lw.alpha + lw.beta);
        small_fits(t, idx, n, &s, &sf, NULL, NULL, NULL, NULL, 0);
        double lb = log(r->budget);
        if (sf.ap1) st[B_1A] = sf.a1n, st[B_1D] = sf.a1d, st[B_1NB] = exp(sf.k1n + sf.a1n * lb), st[B_1DB] = exp(sf.k1d + sf.a1d * lb);
        if (sf.ap2) st[B_2A] = sf.a2n, st[B_2D] = sf.a2d, st[B_2NB] = exp(sf.k2n + sf.a2n * lb), st[B_2DB] = exp(sf.k2d + sf.a2d * lb);
        if (sf.kn) st[B_KAN] = sf.an, st[B_KNC] = exp(sf.cn);
        if (sf.kc) st[B_KAC] = sf.ac, st[B_KCC] = exp(sf.cc);
        if ((r->ap1.ok && !sf.ap1) || (r->ap2.ok && !sf.ap2) || (r->kaplan_n_ok && !sf.kn) || (r->kaplan_c_ok && !sf.kc))
            r->boot_failed++;
    }
    r->bootstrap = K;
    double *col = malloc(((size_t)K + 1) * sizeof *col), ci[B_NSTAT][2];
    ST_CHECK(col != NULL);
    for (int q = 0; q < B_NSTAT; q++) {
        for (int b = 0; b < K; b++) col[b] = stat[(size_t)b * B_NSTAT + q];
        percentile_ci(col, K, o->ci, ci[q]);
    }
    free(col);
#define CI(dst, q) (dst)[0] = ci[q][0], (dst)[1] = ci[q][1]
    CI(r->law_ci[0], B_E), CI(r->law_ci[1], B_A), CI(r->law_ci[2], B_B), CI(r->law_ci[3], B_AL), CI(r->law_ci[4], B_BE);
    CI(r->n_opt_ci, B_NOPT), CI(r->d_opt_ci, B_DOPT), CI(r->tpp_ci, B_TPP), CI(r->loss_opt_ci, B_LOSS);
    CI(r->a_closed_ci, B_ACL);
    CI(r->ap1.n_opt.a_ci, B_1A), CI(r->ap1.d_opt.a_ci, B_1D), CI(r->ap1.n_opt.at_budget_ci, B_1NB),
        CI(r->ap1.d_opt.at_budget_ci, B_1DB);
    CI(r->ap2.n_opt.a_ci, B_2A), CI(r->ap2.d_opt.a_ci, B_2D), CI(r->ap2.n_opt.at_budget_ci, B_2NB),
        CI(r->ap2.d_opt.at_budget_ci, B_2DB);
    CI(r->alpha_n_ci, B_KAN), CI(r->n_c_ci, B_KNC), CI(r->alpha_c_ci, B_KAC), CI(r->c_c_ci, B_KCC);
#undef CI
    free(keep), free(idx), free(s.order), free(s.sel), free(s.gid), free(s.x), free(s.y), free(s.y2), free(stat);
    return ST_OK;
}
