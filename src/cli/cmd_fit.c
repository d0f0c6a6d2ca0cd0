/* cmd_fit.c — `scaletrain fit RESULTS.csv`: scaling laws fitted to a table of runs (src/fit/fit.h;
 * docs/fit.md): Chinchilla Approaches 1, 2 and 3 with bootstrap intervals, Kaplan-style power laws
 * and the compute-optimal model at a budget. Human-readable by default, one JSON object with
 * --json (schema in docs/fit.md), an HTML page with --html OUT.
 *
 * Exit codes: 0 ok, 2 bad input (a missing file or column, a bad cell, too few rows: one line
 * naming the file), 1 runtime failure. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/args.h"
#include "cli/cmds.h"
#include "cli/cmds_fit.h"
#include "core/fileio.h"
#include "fit/fit.h"
#include "fit/fit_json.h"
#include "report/report.h"

static void print_ci(const double ci[2], int boot) {
    if (boot && isfinite(ci[0])) printf("  [%.4g, %.4g]", ci[0], ci[1]);
    printf("\n");
}

static void print_approach12(const char *name, const char *what, const FitApproach12 *a, double C, int boot) {
    if (!a->ok) {
        printf("%s: skipped, %s\n", name, a->why);
        return;
    }
    printf("%s (%s, %d budgets):\n", name, what, a->npoints);
    printf("  N_opt ~ C^%.4f", a->n_opt.a);
    print_ci(a->n_opt.a_ci, boot);
    printf("  D_opt ~ C^%.4f", a->d_opt.a);
    print_ci(a->d_opt.a_ci, boot);
    printf("  at C = %.4g: N_opt = %.4g", C, a->n_opt.at_budget);
    if (boot && isfinite(a->n_opt.at_budget_ci[0])) printf(" [%.4g, %.4g]", a->n_opt.at_budget_ci[0], a->n_opt.at_budget_ci[1]);
    printf(", D_opt = %.4g", a->d_opt.at_budget);
    print_ci(a->d_opt.at_budget_ci, boot);
}

static void print_text(const char *path, const FitOptions *o, const FitResult *r) {
    int boot = r->bootstrap > 0;
    printf("scaletrain fit: %s: %zu runs (%s)", path, r->n_rows, r->has_flops ? "C from the flops column" : "C = 6ND");
    if (r->n_dropped) printf(", %zu highest-loss run%s dropped", r->n_dropped, r->n_dropped == 1 ? "" : "s");
    printf(", %d compute budget%s%s\n", r->ngroups, r->ngroups == 1 ? "" : "s",
           r->has_budget ? " (the budget column's)" : "");
    if (r->n_skipped)
        printf("note: %zu run%s without a loss (an empty cell: failed or diverged) left out, the first at line %zu\n",
               r->n_skipped, r->n_skipped == 1 ? "" : "s", r->first_skipped);
    if (boot) printf("intervals: %g%% bootstrap percentiles over %d resamples (seed %llu)\n", 100 * o->ci, r->bootstrap,
                     (unsigned long long)o->seed);
    else printf("intervals: none (--bootstrap 0)\n");
    printf("\nApproach 3: L(N, D) = E + A/N^alpha + B/D^beta (Huber delta %g on ln L, L-BFGS from %d starts, %d "
           "converged; objective %.4g)\n", o->huber_delta, r->n_starts, r->n_converged, r->objective);
    const char *names[5] = {"E", "A", "B", "alpha", "beta"};
    double v[5] = {r->law.E, r->law.A, r->law.B, r->law.alpha, r->law.beta};
    for (int k = 0; k < 5; k++) {
        printf("  %-5s = %-10.5g", names[k], v[k]);
        print_ci(r->law_ci[k], boot);
    }
    double ss = 0, mx = 0;
    for (size_t i = 0; i < r->n_rows; i++) ss += r->residual[i] * r->residual[i], mx = fmax(mx, fabs(r->residual[i]));
    printf("  residuals ln L - ln L_fit: rms %.3g, max |r| %.3g\n", sqrt(ss / (double)r->n_rows), mx);
    printf("\nCompute-optimal at C = %.4g FLOPs (Approach 3, C = 6ND):\n", r->budget);
    printf("  N*       = %.4g", r->n_opt);
    print_ci(r->n_opt_ci, boot);
    printf("  D*       = %.4g", r->d_opt);
    print_ci(r->d_opt_ci, boot);
    printf("  D*/N*    = %.4g tokens per parameter", r->tpp);
    print_ci(r->tpp_ci, boot);
    printf("  loss     = %.4f", r->loss_opt);
    print_ci(r->loss_opt_ci, boot);
    printf("  N* ~ C^(beta/(alpha+beta)) = C^%.4f", r->a_closed);
    print_ci(r->a_closed_ci, boot);
    printf("\n");
    print_approach12("Approach 1", "the lowest loss of each compute budget", &r->ap1, r->budget, boot);
    print_approach12("Approach 2", "IsoFLOP parabolas in ln N", &r->ap2, r->budget, boot);
    for (int g = 0; g < r->ngroups; g++)
        if (r->groups[g].parabola && !r->groups[g].used)
            printf("  budget C = %.3g left out of Approach 2: %s\n", r->groups[g].C, r->groups[g].why);
    printf("\nKaplan forms (least squares in log space):\n");
    if (r->kaplan_n_ok) {
        printf("  L(N) = (N_c/N)^alpha_N on the lowest loss of each of %d model sizes: alpha_N = %.4f", r->kaplan_n_points,
               r->alpha_n);
        if (boot && isfinite(r->alpha_n_ci[0])) printf(" [%.4g, %.4g]", r->alpha_n_ci[0], r->alpha_n_ci[1]);
        printf(", N_c = %.4g\n", r->n_c);
    } else {
        printf("  L(N): skipped, %d distinct model size%s (3 needed)\n", r->kaplan_n_points, r->kaplan_n_points == 1 ? "" : "s");
    }
    if (r->kaplan_c_ok) {
        printf("  L(C) = (C_c/C)^alpha_C on the lowest loss of each of %d budgets: alpha_C = %.4f", r->kaplan_c_points,
               r->alpha_c);
        if (boot && isfinite(r->alpha_c_ci[0])) printf(" [%.4g, %.4g]", r->alpha_c_ci[0], r->alpha_c_ci[1]);
        printf(", C_c = %.4g\n", r->c_c);
    } else {
        printf("  L(C): skipped, %d compute budget%s (3 needed)\n", r->kaplan_c_points, r->kaplan_c_points == 1 ? "" : "s");
    }
    if (boot && r->boot_failed)
        printf("\nnote: %d of %d resamples could not fit every approach; intervals use the resamples that could\n",
               r->boot_failed, r->bootstrap);
}

/* --html checked before the fit (which can take minutes): a path that names a folder, lies in no
 * existing folder, or is the results table itself (by device and inode, however spelled: the page
 * replaced the CSV) is refused here, with nothing printed. Empty: refused (it wrote no page). */
static Status check_html(const char *html, const char *table, Err *err) {
    if (!html[0]) return err_set(err, ST_ERR_INPUT, "--html: expected a file path for the page, found ''");
    struct stat sh, st;
    if (stat(html, &sh) == 0) {
        if (S_ISDIR(sh.st_mode)) return err_set(err, ST_ERR_INPUT, "--html %s: expected a file name, found a directory", html);
        if (stat(table, &st) == 0 && st.st_dev == sh.st_dev && st.st_ino == sh.st_ino)
            return err_set(err, ST_ERR_INPUT, "--html %s: expected a file other than the results table, found the table %s "
                           "(writing the page would overwrite it)", html, table);
        return ST_OK;
    }
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", html);
    char *slash = strrchr(dir, '/');
    if (!slash) return ST_OK; /* the current folder */
    slash[slash == dir] = '\0'; /* "/x.html": the root */
    if (!file_is_dir(dir))
        return err_set(err, ST_ERR_INPUT, "--html %s: expected an existing folder for it, found no folder %s", html, dir);
    return ST_OK;
}

int cmd_fit(int argc, char **argv) {
    FitOptions o = fit_default_options();
    int json = 0;
    long drop = 0;
    long seed = (long)o.seed;
    char html[1024] = "";
    ArgSpec specs[] = {
        {"bootstrap", ARG_INT, &o.bootstrap, 0, "bootstrap resamples of the runs for the intervals (0: none)"},
        {"drop-highest", ARG_LONG, &drop, 0, "drop the K runs with the highest loss before fitting"},
        {"budget-flops", ARG_DOUBLE, &o.budget_flops, 0, "compute budget C for N*, D*, loss (0: the largest C in the data)"},
        {"seed", ARG_LONG, &seed, 0, "seed of the bootstrap resampling"},
        {"ci", ARG_DOUBLE, &o.ci, 0, "central mass of the intervals (0.95: 2.5 and 97.5 percentiles)"},
        {"huber-delta", ARG_DOUBLE, &o.huber_delta, 0, "delta of the Huber loss on ln L (Hoffmann et al.: 1e-3)"},
        {"grid-stride", ARG_INT, &o.grid_stride, 0, "1: Hoffmann's full grid of 5400 starts; s: every s-th value per axis"},
        {"boot-starts", ARG_INT, &o.boot_starts, 0, "starts of each bootstrap refit: the best distinct minima of the full fit"},
        {"json", ARG_FLAG, &json, 0, "print one JSON object (schema: docs/fit.md)"},
        {"html", ARG_STR, html, sizeof html, "also write the scaling page (IsoFLOP curves, frontier, residuals) here"},
    };
    int n = (int)(sizeof specs / sizeof specs[0]), npos = 0, help = 0;
    char *pos[1];
    Err err = {0};
    Status st = args_parse(specs, n, argc, argv, pos, 1, &npos, &help, &err);
    if (st != ST_OK) return cli_fail("fit", st, err.msg);
    if (help || npos != 1) {
        printf("usage: scaletrain fit RESULTS.csv [options]\n\n"
               "Fits scaling laws to a table of runs: a CSV with a header naming at least the columns\n"
               "params, tokens and loss (flops optional: else C = 6 N D; other columns are ignored).\n"
               "Chinchilla Approach 3 (Huber + L-BFGS from Hoffmann et al.'s grid), Approaches 1 and 2,\n"
               "Kaplan-style L(N) and L(C), the compute-optimal N*, D* at a budget, bootstrap intervals.\n"
               "`plan --scaling FIT.json` uses a --json result (docs/fit.md).\n\n");
        args_print_help(specs, n);
        return help ? 0 : cli_fail("fit", ST_ERR_INPUT, "expected one results table (CSV), found none");
    }
    if (o.bootstrap < 0 || o.bootstrap > FIT_MAX_BOOTSTRAP) {
        snprintf(err.msg, sizeof err.msg, "--bootstrap: expected 0 to %d resamples, found %d", FIT_MAX_BOOTSTRAP, o.bootstrap);
        return cli_fail("fit", ST_ERR_INPUT, err.msg);
    }
    /* The resampling's own options do nothing without resamples. */
    static const char *const boot_only[] = {"boot-starts", "seed", "ci"};
    for (size_t i = 0; o.bootstrap == 0 && i < sizeof boot_only / sizeof boot_only[0]; i++)
        if (args_find(specs, n, boot_only[i])->seen) {
            snprintf(err.msg, sizeof err.msg, "--%s: would change nothing with --bootstrap 0; expected --bootstrap N > 0",
                     boot_only[i]);
            return cli_fail("fit", ST_ERR_INPUT, err.msg);
        }
    /* each with the value found */
    if (drop < 0) snprintf(err.msg, sizeof err.msg, "--drop-highest: expected 0 or more runs, found %ld", drop);
    else if (seed < 0) snprintf(err.msg, sizeof err.msg, "--seed: expected a non-negative integer, found %ld", seed);
    else if (!(o.ci > 0 && o.ci < 1)) snprintf(err.msg, sizeof err.msg, "--ci: expected a number in (0, 1), found %g", o.ci);
    else if (!(o.huber_delta > 0))
        snprintf(err.msg, sizeof err.msg, "--huber-delta: expected a positive number, found %g", o.huber_delta);
    else if (o.grid_stride < 1 || o.grid_stride > 5)
        snprintf(err.msg, sizeof err.msg, "--grid-stride: expected 1 to 5, found %d", o.grid_stride);
    else if (o.boot_starts < 1) snprintf(err.msg, sizeof err.msg, "--boot-starts: expected 1 or more, found %d", o.boot_starts);
    else if (o.budget_flops < 0)
        snprintf(err.msg, sizeof err.msg, "--budget-flops: expected a positive number of FLOPs, found %g", o.budget_flops);
    if (err.msg[0]) return cli_fail("fit", ST_ERR_INPUT, err.msg);
    if (args_find(specs, n, "html")->seen && (st = check_html(html, pos[0], &err)) != ST_OK) return cli_fail("fit", st, err.msg);
    o.drop_highest = (size_t)drop;
    o.seed = (uint64_t)seed;

    FitTable t;
    FitResult r = {0};
    if ((st = fit_table_load(&t, pos[0], &err)) != ST_OK) return cli_fail("fit", st, err.msg);
    if ((st = fit_run(&t, &o, &r, &err)) != ST_OK) {
        err_prefix(&err, "%s", pos[0]);
        fit_table_free(&t);
        return cli_fail("fit", st, err.msg);
    }
    cJSON *j = fit_json(pos[0], &t, &o, &r);
    int rc = 0;
    /* the results first: a page that cannot be written then fails after them, not instead of them */
    if (json) {
        char *s = cJSON_Print(j);
        printf("%s\n", s ? s : "null");
        free(s);
    } else {
        print_text(pos[0], &o, &r);
    }
    if (html[0]) {
        char *data = cJSON_PrintUnformatted(j), *page = NULL;
        size_t len = 0;
        st = data ? report_render_scaling(data, pos[0], &page, &len, &err) : err_set(&err, ST_ERR_RUNTIME, "out of memory");
        const void *bufs[1] = {page};
        if (st == ST_OK) st = file_write_atomic(html, bufs, &len, 1, &err);
        free(data), free(page);
        if (st != ST_OK) {
            fflush(stdout);
            err_prefix(&err, "--html");
            rc = cli_fail("fit", st, err.msg);
        } else if (!json) {
            printf("\nscaling page: %s\n", html);
        }
    }
    cJSON_Delete(j);
    fit_result_free(&r);
    fit_table_free(&t);
    return rc;
}
