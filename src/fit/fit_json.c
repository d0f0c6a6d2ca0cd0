/* fit_json.c — the fit's JSON object (fit_json.h). Moved from cli/cmd_fit.c (issue 24), member for
 * member. */
#include "fit/fit_json.h"

#include <math.h>

static void add_ci(cJSON *o, const char *key, const double ci[2], int have) {
    if (!have || !isfinite(ci[0]) || !isfinite(ci[1])) {
        cJSON_AddNullToObject(o, key);
        return;
    }
    cJSON *a = cJSON_AddArrayToObject(o, key);
    cJSON_AddItemToArray(a, cJSON_CreateNumber(ci[0]));
    cJSON_AddItemToArray(a, cJSON_CreateNumber(ci[1]));
}

static void add_num(cJSON *o, const char *key, double v) {
    if (isfinite(v)) cJSON_AddNumberToObject(o, key, v);
    else cJSON_AddNullToObject(o, key);
}

static void add_power(cJSON *o, const char *key, const FitPower *p, int boot) {
    cJSON *j = cJSON_AddObjectToObject(o, key);
    add_num(j, "exponent", p->a);
    add_ci(j, "exponent_ci", p->a_ci, boot);
    add_num(j, "log_coefficient", p->k);
    add_num(j, "at_budget", p->at_budget);
    add_ci(j, "at_budget_ci", p->at_budget_ci, boot);
}

static void add_approach12(cJSON *o, const char *key, const FitApproach12 *a, int boot) {
    cJSON *j = cJSON_AddObjectToObject(o, key);
    cJSON_AddBoolToObject(j, "ok", a->ok);
    if (!a->ok) cJSON_AddStringToObject(j, "skipped", a->why);
    cJSON_AddNumberToObject(j, "budgets", a->npoints);
    if (!a->ok) return;
    add_power(j, "n_opt", &a->n_opt, boot);
    add_power(j, "d_opt", &a->d_opt, boot);
}

cJSON *fit_json(const char *path, const FitTable *t, const FitOptions *o, const FitResult *r) {
    int boot = r->bootstrap > 0;
    cJSON *j = cJSON_CreateObject();
    cJSON *d = cJSON_AddObjectToObject(j, "data");
    cJSON_AddStringToObject(d, "file", path);
    cJSON_AddNumberToObject(d, "rows", (double)r->n_rows);
    cJSON_AddNumberToObject(d, "dropped_highest", (double)r->n_dropped);
    cJSON_AddNumberToObject(d, "skipped_without_loss", (double)r->n_skipped);
    cJSON_AddBoolToObject(d, "budget_groups", r->has_budget);
    cJSON_AddStringToObject(d, "compute", r->has_flops ? "flops column" : "6ND");
    cJSON_AddNumberToObject(d, "budgets", r->ngroups);
    cJSON *pts = cJSON_AddArrayToObject(d, "points");
    for (size_t i = 0; i < t->n; i++) {
        cJSON *p = cJSON_CreateObject();
        cJSON_AddNumberToObject(p, "params", t->N[i]);
        cJSON_AddNumberToObject(p, "tokens", t->D[i]);
        cJSON_AddNumberToObject(p, "flops", t->C[i]);
        cJSON_AddNumberToObject(p, "loss", t->L[i]);
        add_num(p, "residual", r->residual[i]);
        cJSON_AddItemToArray(pts, p);
    }
    /* Approach 3's N*(C), D*(C) over the data's compute range and the budget (for the scaling page). */
    double clo = INFINITY, chi = r->budget;
    for (size_t i = 0; i < t->n; i++) clo = fmin(clo, t->C[i]), chi = fmax(chi, t->C[i]);
    cJSON *fr = cJSON_AddArrayToObject(d, "frontier");
    for (int k = 0; k <= 32 && clo > 0; k++) {
        double C = exp(log(clo / 2) + (log(chi * 2) - log(clo / 2)) * k / 32.0), N, D;
        fit_law_optimum(&r->law, C, &N, &D);
        cJSON *p = cJSON_CreateObject();
        cJSON_AddNumberToObject(p, "flops", C);
        add_num(p, "n_opt", N);
        add_num(p, "d_opt", D);
        cJSON_AddItemToArray(fr, p);
    }
    cJSON *gs = cJSON_AddArrayToObject(d, "groups");
    for (int g = 0; g < r->ngroups; g++) {
        const FitGroup *G = &r->groups[g];
        cJSON *p = cJSON_CreateObject();
        cJSON_AddNumberToObject(p, "flops", G->C);
        cJSON_AddNumberToObject(p, "rows", G->nrows);
        cJSON_AddNumberToObject(p, "distinct_params", G->ndistinct);
        cJSON_AddNumberToObject(p, "best_params", t->N[G->best]);
        cJSON_AddNumberToObject(p, "best_tokens", t->D[G->best]);
        cJSON_AddNumberToObject(p, "best_loss", t->L[G->best]);
        if (G->parabola) {
            cJSON *q = cJSON_AddArrayToObject(p, "parabola");
            cJSON_AddItemToArray(q, cJSON_CreateNumber(G->p0));
            cJSON_AddItemToArray(q, cJSON_CreateNumber(G->p1));
            cJSON_AddItemToArray(q, cJSON_CreateNumber(G->p2));
        }
        cJSON_AddBoolToObject(p, "used_by_approach2", G->used);
        if (G->used) cJSON_AddNumberToObject(p, "vertex_params", G->n_vertex);
        else cJSON_AddStringToObject(p, "not_used", G->why);
        cJSON_AddItemToArray(gs, p);
    }

    cJSON *a3 = cJSON_AddObjectToObject(j, "approach3");
    const char *names[5] = {"E", "A", "B", "alpha", "beta"};
    double v[5] = {r->law.E, r->law.A, r->law.B, r->law.alpha, r->law.beta};
    for (int k = 0; k < 5; k++) add_num(a3, names[k], v[k]);
    cJSON *ci = cJSON_AddObjectToObject(a3, "ci");
    for (int k = 0; k < 5; k++) add_ci(ci, names[k], r->law_ci[k], boot);
    cJSON_AddNumberToObject(a3, "huber_delta", o->huber_delta);
    cJSON_AddNumberToObject(a3, "objective", r->objective);
    cJSON_AddNumberToObject(a3, "starts", r->n_starts);
    cJSON_AddNumberToObject(a3, "converged", r->n_converged);
    add_approach12(j, "approach1", &r->ap1, boot);
    add_approach12(j, "approach2", &r->ap2, boot);

    cJSON *kp = cJSON_AddObjectToObject(j, "kaplan");
    cJSON *ln = cJSON_AddObjectToObject(kp, "L_N");
    cJSON_AddBoolToObject(ln, "ok", r->kaplan_n_ok);
    cJSON_AddNumberToObject(ln, "points", r->kaplan_n_points);
    if (r->kaplan_n_ok) {
        add_num(ln, "alpha_N", r->alpha_n), add_ci(ln, "alpha_N_ci", r->alpha_n_ci, boot);
        add_num(ln, "N_c", r->n_c), add_ci(ln, "N_c_ci", r->n_c_ci, boot);
    }
    cJSON *lc = cJSON_AddObjectToObject(kp, "L_C");
    cJSON_AddBoolToObject(lc, "ok", r->kaplan_c_ok);
    cJSON_AddNumberToObject(lc, "points", r->kaplan_c_points);
    if (r->kaplan_c_ok) {
        add_num(lc, "alpha_C", r->alpha_c), add_ci(lc, "alpha_C_ci", r->alpha_c_ci, boot);
        add_num(lc, "C_c", r->c_c), add_ci(lc, "C_c_ci", r->c_c_ci, boot);
    }

    cJSON *b = cJSON_AddObjectToObject(j, "budget");
    cJSON_AddNumberToObject(b, "flops", r->budget);
    add_num(b, "n_opt", r->n_opt), add_ci(b, "n_opt_ci", r->n_opt_ci, boot);
    add_num(b, "d_opt", r->d_opt), add_ci(b, "d_opt_ci", r->d_opt_ci, boot);
    add_num(b, "tokens_per_param", r->tpp), add_ci(b, "tokens_per_param_ci", r->tpp_ci, boot);
    add_num(b, "loss", r->loss_opt), add_ci(b, "loss_ci", r->loss_opt_ci, boot);
    add_num(b, "n_opt_exponent", r->a_closed), add_ci(b, "n_opt_exponent_ci", r->a_closed_ci, boot);

    cJSON *bs = cJSON_AddObjectToObject(j, "bootstrap");
    cJSON_AddNumberToObject(bs, "resamples", r->bootstrap);
    cJSON_AddNumberToObject(bs, "seed", (double)o->seed);
    cJSON_AddNumberToObject(bs, "ci", o->ci);
    cJSON_AddNumberToObject(bs, "incomplete", r->boot_failed);
    return j;
}
