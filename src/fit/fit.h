/* fit.h — scaling laws fitted to our own runs (issue 16, docs/fit.md): pure functions, no printing.
 *
 * Input: a table of runs, one row each: N parameters, D training tokens, C compute (the `flops`
 * column when the CSV has one, else 6·N·D) and the final loss L (nats per token).
 *
 * Fits (each one documented with its data in docs/fit.md):
 *   Approach 3 (Hoffmann et al. 2022 §3.3, Besiroglu et al. 2024): L(N, D) = E + A/N^α + B/D^β,
 *     parameterised as e = ln E, a = ln A, b = ln B, minimising
 *       Σ_i Huber_δ( LSE(a − α ln N_i, b − β ln D_i, e) − ln L_i ),   δ = 1e-3,
 *     with L-BFGS (liblbfgs) and analytic gradients from every point of Hoffmann's grid
 *     (α, β ∈ {0, 0.5, …, 2}, e ∈ {−1, −0.5, …, 1.5}, a, b ∈ {0, 5, …, 25}); the lowest final
 *     objective is kept.
 *   Approach 1: runs grouped by compute budget, the lowest-loss run of each group, then least
 *     squares ln N_opt = a ln C + k and ln D_opt = b ln C + k' (GSL gsl_fit_linear).
 *   Approach 2: per budget group with >= 3 distinct N, a least-squares parabola of L in ln N; its
 *     vertex (if it opens upward and lies inside the sampled N) is that budget's N_opt,
 *     D_opt = C/(6 N_opt); then the same power laws in C.
 *   Kaplan et al. 2020 forms: L(N) = (N_c/N)^α_N on the lowest loss of each distinct N, and
 *     L(C) = (C_c/C)^α_C on the frontier (the lowest loss of each budget group); both by least
 *     squares in log space.
 *   Bootstrap: K resamples of the rows with replacement (Philox, seeded: deterministic), every
 *     approach refitted on each; percentile intervals.
 *
 * Budget groups: with a `budget` column (every row > 0: the budget each run was sized for, as an
 * IsoFLOP sweep writes), rows of equal budget. Otherwise rows sorted by C; a row joins the current
 * group when its C is within FIT_GROUP_RTOL (relative) of the group's smallest C, else it opens a
 * new group. Equal C always group together, so a `flops` column of exact budgets groups exactly. */
#ifndef ST_FIT_FIT_H
#define ST_FIT_FIT_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#define FIT_GROUP_RTOL 0.05  /* relative width of a compute-budget group */
#define FIT_MAX_GROUPS 64     /* budget groups kept for reporting (Approach 2 parabolas) */
#define FIT_MAX_BOOTSTRAP 100000 /* resamples: 100 give 95% intervals; 1e9 ended in "out of memory" */

/* ---------------------------------------------------------------- the table ------------ */

typedef struct {
    size_t n;             /* rows */
    double *N;            /* parameters, > 0 */
    double *D;            /* training tokens, > 0 */
    double *C;            /* compute: the flops column, else 6 N D; > 0 */
    double *L;            /* final loss, > 0 */
    size_t *line;         /* source line of each row (1-based; 0 for rows built in memory) */
    int has_flops;        /* 1: C came from a `flops` column */
    double *B;            /* the requested compute budget of each row (a `budget` column, as sweep
                             writes for IsoFLOP grids), used to group rows when has_budget */
    int has_budget;       /* 1: every row has a budget > 0: groups are equal budgets */
    size_t skipped;       /* rows without a loss (an empty cell: a run that failed), left out */
    size_t first_skipped; /* the first such row's line */
} FitTable;

/* Parses CSV text (a header line naming the columns, then one row per line; blank lines and
 * lines starting with '#' are skipped; extra columns are ignored). Needs columns `params`,
 * `tokens` and `loss`; `flops` is used when present. path names the file in messages.
 * Errors (ST_ERR_INPUT), one line each: a missing column ("PATH: expected columns
 * params,tokens,loss (flops optional), found: a,b,c"), a cell that is not a finite number > 0
 * ("PATH:LINE:COLUMN (name): expected a positive finite decimal number, found 'x'"), a `budget` cell
 * other than empty, 0 (no budget grouping) or a positive number, a row with too few
 * cells, an empty file, a column the fit reads named twice, a NUL byte, rows whose losses are all
 * empty. A UTF-8 byte-order mark before the header is skipped. The table owns its arrays: fit_table_free. */
Status fit_table_parse(FitTable *t, const char *path, const char *text, size_t len, Err *err);
Status fit_table_load(FitTable *t, const char *path, Err *err);
/* Builds a table from arrays (copied); C may be NULL for 6ND. */
Status fit_table_from_arrays(FitTable *t, const double *N, const double *D, const double *C, const double *L, size_t n,
                             Err *err);
void fit_table_free(FitTable *t);

/* Removes the k rows with the highest loss (ties: the later row goes first), keeping row order. */
void fit_table_drop_highest(FitTable *t, size_t k);

/* ---------------------------------------------------------------- options, results ----- */

typedef struct {
    int bootstrap;        /* resamples (0: no intervals) */
    size_t drop_highest;  /* rows with the highest loss removed before fitting */
    double budget_flops;  /* C for the optimum; <= 0: the largest C in the data */
    uint64_t seed;        /* bootstrap resampling seed */
    double huber_delta;   /* δ of the Huber loss (1e-3) */
    double ci;            /* central interval mass (0.95 → 2.5 / 97.5 percentiles) */
    int grid_stride;      /* 1: Hoffmann's full grid; s > 1: every s-th value of each axis (tests) */
    int boot_starts;      /* starts per bootstrap refit of Approach 3: the best distinct grid
                             minima of the full-data fit (1 = the best only) */
} FitOptions;

FitOptions fit_default_options(void);

/* The budget group of each of the table's rows (gid: t->n ints, groups numbered in increasing
 * compute, as the fits use them); returns the number of groups, -1 on out of memory. */
int fit_budget_groups(const FitTable *t, int *gid);

/* The five constants of L(N, D) = E + A/N^alpha + B/D^beta. */
typedef struct {
    double E, A, B, alpha, beta;
} FitLaw;

/* A power law y = exp(k) x^a fitted in log space, its interval and its prediction at the budget. */
typedef struct {
    double a, k;          /* slope and intercept of ln y = a ln x + k */
    double a_ci[2];
    double at_budget;     /* exp(k) C^a at the budget */
    double at_budget_ci[2];
} FitPower;

typedef struct {
    int ok;               /* 0: skipped, why says so */
    char why[200];
    FitPower n_opt, d_opt;/* N_opt(C), D_opt(C) */
    int npoints;          /* budgets used */
} FitApproach12;

/* One budget group (for reports: Approach 1's minimum, Approach 2's parabola). */
typedef struct {
    double C;             /* the group's compute (geometric mean of its rows) */
    int nrows, ndistinct; /* rows, distinct N */
    size_t best;          /* row with the lowest loss */
    int parabola;         /* 1: a parabola was fitted (>= 3 distinct N) */
    double p0, p1, p2;    /* L ≈ p0 + p1 x + p2 x², x = ln N */
    int used;             /* 1: its vertex entered Approach 2 */
    double n_vertex;      /* exp(−p1 / 2 p2) */
    char why[120];        /* why not used */
} FitGroup;

typedef struct {
    /* data */
    size_t n_rows;        /* rows fitted (after --drop-highest) */
    size_t n_dropped;
    int has_flops;
    int has_budget;       /* groups were the `budget` column's equal budgets */
    size_t n_skipped, first_skipped; /* rows without a loss left out, the first one's line */
    int ngroups;
    FitGroup groups[FIT_MAX_GROUPS];
    double budget;        /* C used for the optimum */

    /* Approach 3 */
    FitLaw law;
    double law_ci[5][2];  /* E, A, B, alpha, beta */
    double objective;     /* final Huber sum of the best start */
    int n_starts, n_converged; /* grid starts, those that L-BFGS reported converged */
    double *residual;     /* per row: ln L_i − ln L̂(N_i, D_i) (n_rows; owned) */
    /* the optimum at the budget from Approach 3 (plan_scaling_optimum) */
    double n_opt, d_opt, tpp, loss_opt;
    double n_opt_ci[2], d_opt_ci[2], tpp_ci[2], loss_opt_ci[2];
    double a_closed, a_closed_ci[2]; /* beta/(alpha+beta): N_opt ∝ C^a */

    FitApproach12 ap1, ap2;

    /* Kaplan forms */
    int kaplan_n_ok, kaplan_c_ok;
    double alpha_n, n_c, alpha_n_ci[2], n_c_ci[2];
    double alpha_c, c_c, alpha_c_ci[2], c_c_ci[2];
    int kaplan_n_points, kaplan_c_points;

    int bootstrap;        /* resamples made */
    int boot_failed;      /* resamples in which an approach could not be fitted (left out of its interval) */
} FitResult;

/* Fits every approach to t (after dropping o->drop_highest rows of t: t is modified) and
 * bootstraps. Errors (ST_ERR_INPUT): fewer than 5 rows for Approach 3 (five constants).
 * fit_result_free releases the residuals. */
Status fit_run(FitTable *t, const FitOptions *o, FitResult *r, Err *err);
void fit_result_free(FitResult *r);

/* Approach 3 alone on rows idx[0..n) of t (idx NULL: all rows), from the given starts (each 5
 * values in the order e, a, b, alpha, beta) or, with nstart == 0, from the grid. Writes the best
 * law and its objective; keep (if non-NULL) receives up to nkeep best distinct final points
 * (same order of values) for later warm starts. Returns the number of converged starts. */
int fit_approach3(const FitTable *t, const size_t *idx, size_t n, double delta, int grid_stride, const double *starts,
                  int nstart, FitLaw *law, double *objective, double *keep, int nkeep);

/* The Huber objective and gradient at p = (e, a, b, alpha, beta) (for tests). */
double fit_objective(const FitTable *t, const size_t *idx, size_t n, double delta, const double p[5], double g[5]);

/* The compute-optimal N, D at budget C for a law (C = 6ND): plan_scaling_optimum's formula. */
void fit_law_optimum(const FitLaw *law, double C, double *N, double *D);
double fit_law_loss(const FitLaw *law, double N, double D);

#endif
