/* optimizers.c — the optimizers study (studies.h; docs/studies.md): the optimizers of OPT_ROWS on
 * the same model, data order, token budget and schedule, each at its own best learning rate.
 * Moved from cli/cmd_study_opt.c (issue 24); the command's flags stay there.
 *
 *   phase 1  per optimizer, a short sweep over its lr grid (sweep engine: DIR/sweep/<name>/; a
 *            re-run skips finished runs, an interrupted one resumes); best lr = the lowest final
 *            validation loss.
 *   phase 2  per optimizer, one full run at its best lr (DIR/final/<name>/), validated every
 *            --val-every steps; its log gives the curves, the final validation loss, and the tokens
 *            and training seconds to reach AdamW's final validation loss (linear interpolation
 *            between evaluations).
 *   phase 3  step times: --timing-rounds rounds, each training every optimizer for --timing-steps
 *            steps in turn (DIR/timing/), so a change of the machine's load falls on all of them
 *            alike; the medians and means of the pooled steps give the step-time overheads. The
 *            full runs' own times are sequential (minutes apart) and show another process's load.
 *
 * DIR/index.html (figures.h) holds the findings generated from those numbers, the table, the
 * curves against tokens and against training seconds and the sweep curves; DIR/summary.json the
 * same numbers. A run that diverges or is refused is recorded and said, never fatal.
 *
 * Definitions the test recomputes from the logs (tests/test_study.c):
 *   final validation loss   the `val` record of the highest step;
 *   tokens of an evaluation `tokens_seen` of the `step` record of its step;
 *   training seconds        the running sum over steps of time_ms.total − time_ms.checkpoint
 *                           (validation and checkpoints excluded: they cost the same for every
 *                           optimizer and are not the optimizer's time);
 *   to reach a target       the first evaluation at or below it, interpolated linearly from the
 *                           evaluation before (the first evaluation itself: its own x). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include <cjson/cJSON.h>

#include "core/fileio.h"
#include "core/stats.h"
#include "report/figures.h"
#include "report/report.h"
#include "study/studies.h"

/* ================================================================ the optimizers */

/* One optimizer of the study. flags are `scaletrain train` flags, "--name value" pairs (a flag
 * without a value stands alone), written into the sweep specs' base. swept is the flag the short
 * sweep varies over grid (study_parse_list syntax: a factor-2 log grid around a usual value). */
typedef struct {
    const char *name;  /* --optimizers name and label */
    const char *flags; /* extra train flags */
    const char *swept; /* "lr", or "muon-lr" (Muon's matrices; its AdamW part runs at AdamW's best lr) */
    const char *grid;  /* the short sweep's values of swept */
} OptRow;

/* AdamW first: it is the reference, and Muon's AdamW part takes its best lr. Sophia's update is
 * at most lr per element (sign-like while its Hessian EMA is small), so its grid sits with Lion's,
 * one step lower (the full study's first grid, 2^-11..2^-7, put its best at 2^-11, the lower edge);
 * its Hessian pass runs every 10 steps (the default), in its step time. */
static const OptRow OPT_ROWS[] = {
    {"adamw", "--optimizer adamw", "lr", "2^-10,2^-9,2^-8,2^-7,2^-6"},
    {"adam", "--optimizer adam", "lr", "2^-10,2^-9,2^-8,2^-7,2^-6"},
    {"sgd", "--optimizer sgd --momentum 0.9", "lr", "2^-5,2^-4,2^-3,2^-2,2^-1"},
    {"lion", "--optimizer lion", "lr", "2^-12,2^-11,2^-10,2^-9,2^-8"},
    {"muon", "--optimizer muon", "muon-lr", "2^-7,2^-6,2^-5,2^-4,2^-3"},
    {"shampoo", "--optimizer shampoo", "lr", "2^-10,2^-9,2^-8,2^-7,2^-6"},
    {"sophia", "--optimizer sophia", "lr", "2^-13,2^-12,2^-11,2^-10,2^-9"},
};
#define NROWS ((int)(sizeof OPT_ROWS / sizeof OPT_ROWS[0]))

/* The shared setup of every run: OsSetup (studies.h). */

/* Everything the study learns about one optimizer. Arrays of the full run are indexed by step
 * 1..steps (a resumed run's later records replace earlier ones). */
typedef struct {
    const OptRow *row;
    int ngrid;
    double grid[STUDY_MAXV];        /* the swept values run */
    double sweep_loss[STUDY_MAXV];  /* their final validation losses (NaN: failed or missing) */
    char sweep_status[STUDY_MAXV][256]; /* "ok", "failed: ...", "missing" */
    int best;                       /* index of the best value, -1 if no run finished */
    double adamw_lr;                /* Muon: the lr of its AdamW part; NaN otherwise */
    char failure[512];              /* why the full run is missing or failed ("" if it finished) */
    int have_log;                   /* the full run's log was read */
    double *loss, *tokens, *ms, *opt_ms, *val, *sec; /* [steps + 1]: see os_read_log */
    long last;                      /* the last step with a record */
    int nval;
    double *vtok, *vsec, *vloss;    /* [steps + 1]: the evaluations in step order */
    double weight_decay;            /* from the full run's start record */
    double final_val, med_ms, med_opt_ms, train_s;
    double mean_ms, mean_opt_ms;    /* means of the same: a periodic cost (Shampoo's roots) moves them, not the medians */
    double t_med_ms, t_mean_ms, t_med_opt_ms; /* phase 3: pooled over the rounds (each run's first step left out) */
    int t_steps;                    /* steps pooled */
    int nslow;                      /* steps that took more than twice the median step */
    long slow_period;               /* > 0: the slow steps are evenly spaced this many steps apart */
    double tok_target, sec_target;  /* to reach AdamW's final validation loss; NaN: not reached */
} OptRes;

/* ================================================================ specs and runs */

/* The model's label: every shape and batch setting, so a run of another setup gets another id. */
static void os_model_name(const OsSetup *su, char *buf, size_t cap) {
    snprintf(buf, cap, "L%dC%dT%dB%d", su->layers, su->width, su->T, su->B);
}

/* Adds row->flags to base as spec keys ("--optimizer muon" → "optimizer": "muon"). */
static void os_add_flags(cJSON *base, const char *flags) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s", flags);
    char *save = NULL, *t = strtok_r(buf, " ", &save);
    while (t) {
        char *next = strtok_r(NULL, " ", &save);
        const char *key = t + (strncmp(t, "--", 2) ? 0 : 2);
        if (next && strncmp(next, "--", 2)) {
            cJSON_AddStringToObject(base, key, next);
            t = strtok_r(NULL, " ", &save);
        } else {
            cJSON_AddBoolToObject(base, key, 1);
            t = next;
        }
    }
}

/* The spec of one optimizer's sweep (phase 1: vals = its grid, no validation before the end) or
 * full run (phase 2: vals = {best}, validated every su->val_every steps). NULL: out of memory. */
static cJSON *os_spec(const OsSetup *su, const OptRes *r, const char *phase, const double *vals, int nv, long steps,
                      int val_every) {
    char name[96], model[64];
    snprintf(name, sizeof name, "optimizers-%s-%s", phase, r->row->name);
    cJSON *base, *spec = study_spec_new(name, su->T, su->B, su->threads, su->vb, &base);
    if (!spec) return NULL;
    os_add_flags(base, r->row->flags);
    cJSON_AddNumberToObject(base, "val_every", val_every);
    cJSON *grid = cJSON_AddObjectToObject(spec, "grid");
    cJSON_AddStringToObject(grid, "kind", "sizes_tokens");
    cJSON *m = cJSON_CreateObject();
    os_model_name(su, model, sizeof model);
    cJSON_AddStringToObject(m, "name", model);
    cJSON_AddNumberToObject(m, "layers", su->layers);
    cJSON_AddNumberToObject(m, "channels", su->width);
    cJSON_AddNumberToObject(m, "heads", su->heads);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(grid, "models"), m);
    double tok = (double)steps * su->B * su->T;
    cJSON_AddItemToObject(grid, "tokens", cJSON_CreateDoubleArray(&tok, 1));
    cJSON *sch = cJSON_AddObjectToObject(spec, "schedule");
    cJSON_AddNumberToObject(sch, "warmup_frac", 0.1);
    cJSON_AddNumberToObject(sch, "min_lr_frac", 0.1);
    cJSON *vary = cJSON_AddObjectToObject(spec, "vary");
    /* Muon: its AdamW part's lr is a one-value axis, so it is in the run id: a run made with another
     * AdamW best is not taken for this one. */
    if (strcmp(r->row->swept, "lr")) cJSON_AddItemToObject(vary, "lr", cJSON_CreateDoubleArray(&r->adamw_lr, 1));
    cJSON_AddItemToObject(vary, r->row->swept, cJSON_CreateDoubleArray(vals, nv));
    return spec;
}

/* Runs one spec under DIR/<phase>/<name>/ and reads back each run's done.json: loss[i] (NaN if
 * none) and status[i] in the sweep's run order (the vary values' order). A spec the trainer
 * refuses is a result too: *refused gets its message. Returns errors that stop the study. */
static Status os_sweep(const char *dir, const char *phase, const OsSetup *su, OptRes *r, const double *vals, int nv,
                       long steps, int val_every, Comm *comm, const TrainFlagsParser *tp, double *loss, char (*status)[256],
                       char *logpath,
                       size_t logcap, char *refused, size_t rcap, int *interrupted, Err *err) {
    char sub[1200];
    snprintf(sub, sizeof sub, "%s/%s/%s", dir, phase, r->row->name);
    cJSON *spec = os_spec(su, r, phase, vals, nv, steps, val_every);
    if (!spec) return err_set(err, ST_ERR_RUNTIME, "out of memory");
    Sweep s;
    Status st = study_sweep_run(sub, spec, comm, tp, &s, interrupted, err);
    cJSON_Delete(spec);
    for (int i = 0; i < nv; i++) loss[i] = NAN, snprintf(status[i], 256, "missing");
    if (st == ST_ERR_INPUT) {
        snprintf(refused, rcap, "refused: %.500s", err->msg);
        return ST_OK;
    }
    if (st != ST_OK || *interrupted) {
        if (st == ST_OK) sweep_free(&s);
        return st;
    }
    /* done.json is written by rank 0; every rank reads it after the barrier. */
    if (comm && (st = comm_barrier(comm, err)) != ST_OK) {
        sweep_free(&s);
        return st;
    }
    for (int i = 0; i < s.nruns && i < nv; i++) {
        char path[1300], *text = NULL;
        size_t len;
        Err e;
        snprintf(path, sizeof path, "%s/done.json", s.runs[i].dir);
        if (file_read_all(path, &text, &len, &e) != ST_OK) continue;
        cJSON *o = cJSON_Parse(text);
        const cJSON *stj = cJSON_GetObjectItem(o, "status");
        loss[i] = study_jnum(o, "loss");
        snprintf(status[i], 256, "%s", cJSON_IsString(stj) ? stj->valuestring : "missing");
        cJSON_Delete(o);
        free(text);
        if (logpath) snprintf(logpath, logcap, "%s/log.jsonl", s.runs[i].dir);
    }
    sweep_free(&s);
    return ST_OK;
}

/* ================================================================ reading a full run */

static void os_free(OptRes *r) {
    free(r->loss), free(r->tokens), free(r->ms), free(r->opt_ms), free(r->val), free(r->sec);
    free(r->vtok), free(r->vsec), free(r->vloss);
    r->loss = r->tokens = r->ms = r->opt_ms = r->val = r->sec = r->vtok = r->vsec = r->vloss = NULL;
}

/* The full run's log at path (steps long) into r: per step the training loss, tokens_seen,
 * time_ms.total − checkpoint, time_ms.optimizer and the validation loss; then the running
 * training seconds, the evaluations in step order, the final validation loss, the medians. 0 if
 * the log cannot be read or holds no step. The log is read by report_load_run (the one reader of
 * metrics logs; its last run). */
static int os_read_log(OptRes *r, const char *path, long steps) {
    size_t n = (size_t)steps + 1;
    double **arr[] = {&r->loss, &r->tokens, &r->ms, &r->opt_ms, &r->val, &r->sec, &r->vtok, &r->vsec, &r->vloss};
    for (size_t k = 0; k < sizeof arr / sizeof arr[0]; k++) {
        *arr[k] = malloc(sizeof(double) * n);
        if (!*arr[k]) return 0;
        for (size_t i = 0; i < n; i++) (*arr[k])[i] = NAN;
    }
    ReportRun *rr = study_load_log(path);
    if (!rr) return 0;
    const ReportRun *x = rr; /* the file's last run (a resumed run is one; a fresh start a new one) */
    while (x->next) x = x->next;
    r->last = 0, r->weight_decay = NAN;
    if (x->config) {
        cJSON *cfg = cJSON_Parse(x->config);
        r->weight_decay = study_jnum(cfg, "weight_decay");
        cJSON_Delete(cfg);
    }
    for (size_t i = 0; i < x->step[REP_STEP].n; i++) {
        double sv = x->step[REP_STEP].v[i], ck = x->step[REP_T_CKPT].v[i];
        if (!(sv >= 1 && sv <= (double)steps)) continue;
        long step = (long)sv;
        r->loss[step] = x->step[REP_LOSS].v[i], r->tokens[step] = x->step[REP_TOKENS].v[i];
        r->ms[step] = x->step[REP_T_TOTAL].v[i] - (isfinite(ck) ? ck : 0), r->opt_ms[step] = x->step[REP_T_OPT].v[i];
        if (step > r->last) r->last = step;
    }
    for (size_t i = 0; i < x->val_step.n; i++) {
        double sv = x->val_step.v[i];
        if (sv >= 1 && sv <= (double)steps) r->val[(long)sv] = x->val_loss.v[i];
    }
    report_run_free(rr);
    free(rr);
    if (r->last < 1) return 0;
    double t = 0;
    r->sec[0] = 0;
    for (long i = 1; i <= steps; i++) r->sec[i] = t += isfinite(r->ms[i]) ? r->ms[i] * 1e-3 : 0;
    r->nval = 0, r->final_val = NAN;
    for (long i = 1; i <= steps; i++)
        if (!isnan(r->val[i])) {
            r->vtok[r->nval] = r->tokens[i], r->vsec[r->nval] = r->sec[i], r->vloss[r->nval++] = r->val[i];
            r->final_val = r->val[i];
        }
    r->med_ms = stats_median(r->ms + 1, (size_t)r->last);
    r->med_opt_ms = stats_median(r->opt_ms + 1, (size_t)r->last);
    double sm = 0, so = 0;
    int nm = 0, no = 0;
    long prev = 0, gap = 0;
    r->nslow = 0, r->slow_period = 0;
    for (long i = 1; i <= r->last; i++) {
        if (isfinite(r->ms[i])) sm += r->ms[i], nm++;
        if (isfinite(r->opt_ms[i])) so += r->opt_ms[i], no++;
        if (!(r->ms[i] > 2 * r->med_ms)) continue;
        /* A slow step: the period holds while every gap between slow steps is the same. */
        if (r->nslow == 1) gap = i - prev;
        else if (r->nslow > 1 && i - prev != gap) gap = -1;
        prev = i, r->nslow++;
    }
    r->slow_period = r->nslow >= 3 && gap > 0 ? gap : 0;
    r->mean_ms = nm ? sm / nm : NAN, r->mean_opt_ms = no ? so / no : NAN;
    r->train_s = r->sec[r->last];
    return 1;
}

/* The x at which the curve (x[i], y[i]), i < n, first reaches y <= target: interpolated linearly
 * between the point before and the first point at or below it (the first point: its own x). NaN
 * if it never does (or the target is NaN). */
static double os_reach(const double *x, const double *y, int n, double target) {
    for (int i = 0; i < n && isfinite(target); i++) {
        if (!(y[i] <= target)) continue;
        if (i == 0 || !isfinite(y[i - 1])) return x[i];
        return x[i - 1] + (y[i - 1] - target) / (y[i - 1] - y[i]) * (x[i] - x[i - 1]);
    }
    return NAN;
}

/* ================================================================ findings */

typedef struct {
    char head[2048], time[2048], loss[1536], sweep[3072], setup[2048];
} OsText;

/* A run's status without its details: up to the first " (" or ";" ("failed: step 12: 1
 * consecutive non-finite steps"), at most cap - 1 characters. */
static const char *os_short(const char *status, char *buf, size_t cap) {
    size_t n = strcspn(status, "(;");
    while (n > 0 && status[n - 1] == ' ') n--;
    snprintf(buf, cap, "%.*s", (int)(n < cap ? n : cap - 1), status);
    return buf;
}

/* Indices 0..n-1 in ascending order of key, non-finite last, ties by index (insertion sort: n is
 * at most NROWS). */
static void os_order(const double *key, int n, int *idx) {
    for (int i = 0; i < n; i++) {
        int j = i;
        for (; j > 0; j--) {
            double x = key[idx[j - 1]], y = key[i];
            int after = isfinite(x) ? (isfinite(y) && y < x) : isfinite(y); /* i goes before idx[j-1] */
            if (!after) break;
            idx[j] = idx[j - 1];
        }
        idx[j] = i;
    }
}

/* "lr 2^-8" or "muon-lr 2^-5 (AdamW part: lr 2^-8)". */
static void os_best_str(const OptRes *r, char *buf, size_t cap) {
    char a[32], b[32];
    if (r->best < 0) {
        snprintf(buf, cap, "none");
        return;
    }
    study_lr_str(r->grid[r->best], a, sizeof a);
    if (isfinite(r->adamw_lr)) {
        study_lr_str(r->adamw_lr, b, sizeof b);
        snprintf(buf, cap, "%s %s (AdamW part: lr %s)", r->row->swept, a, b);
    } else snprintf(buf, cap, "%s %s", r->row->swept, a);
}

/* The findings from the measured numbers: tokens to AdamW's final loss (the headline), training
 * seconds and step-time overheads, final losses, the sweeps (edges, failures), the setup. */
static void os_findings(const OptRes *res, int n, int ref, const OsSetup *su, OsText *t) {
    const OptRes *a = ref >= 0 ? &res[ref] : NULL;
    double target = a ? a->final_val : NAN, budget = (double)su->steps * su->B * su->T;
    double tok[NROWS], sec[NROWS], fin[NROWS];
    int idx[NROWS];
    for (int i = 0; i < n; i++) tok[i] = res[i].tok_target, sec[i] = res[i].sec_target, fin[i] = res[i].final_val;
    size_t k;
    /* Headline: tokens. */
    if (!isfinite(target)) {
        snprintf(t->head, sizeof t->head, "Headline: AdamW has no final validation loss (%s), so the tokens to reach it "
                 "cannot be measured.", a && a->failure[0] ? a->failure : "its full run did not finish");
    } else {
        os_order(tok, n, idx);
        k = (size_t)snprintf(t->head, sizeof t->head, "Headline: on a budget of %.0f tokens, AdamW ended at a validation "
                             "loss of %.4f. Tokens to reach it:", budget, target);
        for (int j = 0; j < n && k < sizeof t->head; j++) {
            const OptRes *r = &res[idx[j]];
            if (isfinite(r->tok_target))
                k += (size_t)snprintf(t->head + k, sizeof t->head - k, "%s %s %.0f (%.2fx AdamW's)", j ? "," : "",
                                      r->row->name, r->tok_target, r->tok_target / a->tok_target);
            else if (isfinite(r->final_val))
                k += (size_t)snprintf(t->head + k, sizeof t->head - k, "%s %s not reached (final %.4f)", j ? "," : "",
                                      r->row->name, r->final_val);
            else k += (size_t)snprintf(t->head + k, sizeof t->head - k, "%s %s no full run", j ? "," : "", r->row->name);
        }
        if (k < sizeof t->head) {
            const OptRes *w = &res[idx[0]];
            if (isfinite(w->tok_target))
                snprintf(t->head + k, sizeof t->head - k, ". Fewest tokens: %s.", w->row->name);
            else snprintf(t->head + k, sizeof t->head - k, ".");
        }
    }
    /* Step times (phase 3), time to AdamW's final loss at those step times, and as measured. */
    k = 0;
    t->time[0] = '\0';
    double est[NROWS];
    for (int i = 0; i < n; i++)
        est[i] = a ? res[i].tok_target * res[i].t_mean_ms / (a->tok_target * a->t_mean_ms) : NAN;
    if (a && isfinite(a->t_med_ms)) {
        k += (size_t)snprintf(t->time, sizeof t->time, "Step time, measured in %d interleaved rounds of %d steps per "
                              "optimizer: AdamW's median %.3g ms (mean %.3g, optimizer part %.3g ms);", su->timing_rounds,
                              su->timing_steps, a->t_med_ms, a->t_mean_ms, a->t_med_opt_ms);
        int first = 1;
        for (int i = 0; i < n && k < sizeof t->time; i++) {
            const OptRes *r = &res[i];
            if (r == a || !isfinite(r->t_med_ms)) continue;
            k += (size_t)snprintf(t->time + k, sizeof t->time - k, "%s %s %.2fx (%.3g ms; mean %.2fx; optimizer part %.3g ms)",
                                  first ? "" : ",", r->row->name, r->t_med_ms / a->t_med_ms, r->t_med_ms,
                                  r->t_mean_ms / a->t_mean_ms, r->t_med_opt_ms);
            first = 0;
        }
        if (k < sizeof t->time) k += (size_t)snprintf(t->time + k, sizeof t->time - k, "%s", first ? " no other optimizer ran." : ".");
    }
    if (isfinite(target) && k < sizeof t->time) {
        int itok[NROWS];
        os_order(tok, n, itok);
        os_order(est, n, idx);
        const OptRes *w = &res[idx[0]], *wt = &res[itok[0]];
        if (isfinite(est[idx[0]]))
            k += (size_t)snprintf(t->time + k, sizeof t->time - k, " At those mean step times (tokens ratio x step-time ratio), "
                                  "the first to reach AdamW's final loss is %s, in %.2fx AdamW's time, %s:", w->row->name,
                                  est[idx[0]], w == wt ? "the same optimizer as on tokens" :
                                  "not the one that needed the fewest tokens");
        for (int j = 0; j < n && k < sizeof t->time; j++) {
            const OptRes *r = &res[idx[j]];
            if (isfinite(est[idx[j]])) k += (size_t)snprintf(t->time + k, sizeof t->time - k, "%s %s %.2fx", j ? "," : "", r->row->name, est[idx[j]]);
            else k += (size_t)snprintf(t->time + k, sizeof t->time - k, "%s %s not reached", j ? "," : "", r->row->name);
        }
        os_order(sec, n, idx);
        if (k < sizeof t->time)
            k += (size_t)snprintf(t->time + k, sizeof t->time - k, ". Measured in the full runs (one after another, so "
                                  "with whatever else ran on the machine then; validation and checkpoints excluded):");
        for (int j = 0; j < n && k < sizeof t->time; j++) {
            const OptRes *r = &res[idx[j]];
            if (isfinite(r->sec_target))
                k += (size_t)snprintf(t->time + k, sizeof t->time - k, "%s %s %.3g s (%.2fx)", j ? "," : "", r->row->name,
                                      r->sec_target, r->sec_target / a->sec_target);
            else k += (size_t)snprintf(t->time + k, sizeof t->time - k, "%s %s not reached", j ? "," : "", r->row->name);
        }
        if (k < sizeof t->time) k += (size_t)snprintf(t->time + k, sizeof t->time - k, ".");
    }
    /* Where a full run's mean step moved away from its median: slow steps, periodic or not. */
    for (int i = 0; i < n && k < sizeof t->time; i++) {
        const OptRes *r = &res[i];
        if (!(r->mean_ms > 1.1 * r->med_ms)) continue;
        char where[96];
        if (r->slow_period > 0) snprintf(where, sizeof where, "one every %ld steps, a periodic cost", r->slow_period);
        else snprintf(where, sizeof where, "at irregular steps, not a periodic cost");
        k += (size_t)snprintf(t->time + k, sizeof t->time - k, " In its full run, %s's mean step (%.3g ms) is %.2fx its "
                              "median: %d of %ld steps took more than twice the median (%s).", r->row->name, r->mean_ms,
                              r->mean_ms / r->med_ms, r->nslow, r->last, where);
    }
    /* Final losses. */
    os_order(fin, n, idx);
    k = (size_t)snprintf(t->loss, sizeof t->loss, "Final validation loss after the full budget:");
    for (int j = 0; j < n && k < sizeof t->loss; j++) {
        const OptRes *r = &res[idx[j]];
        if (isfinite(r->final_val)) k += (size_t)snprintf(t->loss + k, sizeof t->loss - k, "%s %s %.4f", j ? "," : "", r->row->name, r->final_val);
        else {
            char f[160];
            k += (size_t)snprintf(t->loss + k, sizeof t->loss - k, "%s %s none (%s)", j ? "," : "", r->row->name,
                                  r->failure[0] ? os_short(r->failure, f, sizeof f) : "no full run");
        }
    }
    if (k < sizeof t->loss && isfinite(fin[idx[0]]) && isfinite(target))
        snprintf(t->loss + k, sizeof t->loss - k, ". Lowest: %s, %+.4f against AdamW.", res[idx[0]].row->name, fin[idx[0]] - target);
    else if (k < sizeof t->loss) snprintf(t->loss + k, sizeof t->loss - k, ".");
    /* The sweeps: best values, edges, failures. */
    k = (size_t)snprintf(t->sweep, sizeof t->sweep, "Best learning rates from the short sweeps (%ld steps each):", su->sweep_steps);
    for (int i = 0; i < n && k < sizeof t->sweep; i++) {
        char b[96];
        os_best_str(&res[i], b, sizeof b);
        k += (size_t)snprintf(t->sweep + k, sizeof t->sweep - k, "%s %s %s", i ? "," : "", res[i].row->name, b);
    }
    int edges = 0, fails = 0;
    for (int i = 0; i < n && k < sizeof t->sweep; i++) {
        const OptRes *r = &res[i];
        if (r->best < 0 || (r->best != 0 && r->best != r->ngrid - 1)) continue;
        char v[32], lo[32], hi[32];
        study_lr_str(r->grid[r->best], v, sizeof v), study_lr_str(r->grid[0], lo, sizeof lo);
        study_lr_str(r->grid[r->ngrid - 1], hi, sizeof hi);
        k += (size_t)snprintf(t->sweep + k, sizeof t->sweep - k, "%s %s (%s, the %s end of %s..%s)",
                              edges ? "," : ". At the edge of its grid, so the optimum may lie beyond it:", r->row->name, v,
                              r->best == 0 ? "lower" : "upper", lo, hi);
        edges++;
    }
    if (!edges && k < sizeof t->sweep) k += (size_t)snprintf(t->sweep + k, sizeof t->sweep - k, ". Every best value lies inside its grid");
    for (int i = 0; i < n && k < sizeof t->sweep; i++) {
        const OptRes *r = &res[i];
        for (int g = 0; g < r->ngrid && k < sizeof t->sweep; g++) {
            /* A sweep refused or not run as a whole is said once, by its failure below. */
            if (!strcmp(r->sweep_status[g], "ok") || !strncmp(r->sweep_status[g], "refused", 7) ||
                !strncmp(r->sweep_status[g], "not run", 7))
                continue;
            char v[32], f[160];
            study_lr_str(r->grid[g], v, sizeof v);
            k += (size_t)snprintf(t->sweep + k, sizeof t->sweep - k, "%s %s at %s %s in the sweep (%s)",
                                  fails ? ";" : ". Diverged or failed:", r->row->name, r->row->swept, v,
                                  os_short(r->sweep_status[g], f, sizeof f));
            fails++;
        }
        if (r->failure[0] && k < sizeof t->sweep) {
            char f[160];
            k += (size_t)snprintf(t->sweep + k, sizeof t->sweep - k, "%s %s's full run: %s", fails ? ";" : ". Diverged or failed:",
                                  r->row->name, os_short(r->failure, f, sizeof f));
            fails++;
        }
    }
    if (k < sizeof t->sweep) snprintf(t->sweep + k, sizeof t->sweep - k, fails ? "." : ". No run diverged or failed.");
    /* Setup. */
    k = (size_t)snprintf(t->setup, sizeof t->setup,
                         "Every run is the same %d-layer GPT-2 (width %d, %d head%s of 32) on the bundled Tiny Shakespeare "
                         "(bytes), with the same initialisation and data order, batches of %d x %d tokens, a cosine schedule "
                         "with 10%% warmup to 10%% of the peak, gradient clipping 1.0 and each optimizer's default "
                         "hyper-parameters otherwise (weight decay:", su->layers, su->width, su->heads, su->heads == 1 ? "" : "s",
                         su->B, su->T);
    for (int i = 0; i < n && k < sizeof t->setup; i++)
        k += (size_t)snprintf(t->setup + k, sizeof t->setup - k, "%s %s %.3g", i ? "," : "", res[i].row->name, res[i].weight_decay);
    /* The rows' flags beyond --optimizer NAME (SGD's momentum). */
    for (int i = 0, first = 1; i < n && k < sizeof t->setup; i++) {
        char want[64];
        snprintf(want, sizeof want, "--optimizer %s", res[i].row->name);
        const char *extra = res[i].row->flags;
        if (!strncmp(extra, want, strlen(want))) extra += strlen(want);
        while (*extra == ' ') extra++;
        if (!*extra) continue;
        k += (size_t)snprintf(t->setup + k, sizeof t->setup - k, "%s %s %s", first ? "; flags:" : ",", res[i].row->name, extra);
        first = 0;
    }
    if (k < sizeof t->setup)
        k += (size_t)snprintf(t->setup + k, sizeof t->setup - k, "). Phase 1: per optimizer a sweep of %ld-step runs over a "
                              "factor-2 grid; the best value has the lowest final validation loss.", su->sweep_steps);
    for (int i = 0; i < n && k < sizeof t->setup; i++)
        if (strcmp(res[i].row->swept, "lr"))
            k += (size_t)snprintf(t->setup + k, sizeof t->setup - k, " %s's sweep varies --%s (its hidden matrices) while "
                                  "its AdamW part (embeddings, norms, biases) keeps AdamW's best lr.", res[i].row->name,
                                  res[i].row->swept);
    if (k < sizeof t->setup)
        snprintf(t->setup + k, sizeof t->setup - k,
                 " Phase 2: one run of %ld steps (%.0f tokens) "
                 "per optimizer at its best value, validated every %d steps on %d micro-batches; the tokens and seconds to "
                 "reach AdamW's final validation loss are interpolated linearly between evaluations. Phase 3: %d rounds, "
                 "each training every optimizer in turn for %d timed steps (after one untimed) at its best value; the "
                 "step times (without checkpoints) pooled over the rounds give each optimizer's median and mean, so a "
                 "change of the machine's load falls on every optimizer alike. The full runs ran one after another: their "
                 "own seconds include whatever else ran then.", su->steps, budget, su->val_every, su->vb, su->timing_rounds,
                 su->timing_steps);
}

/* ================================================================ page and summary */

/* The main table's cells of one optimizer (OS_COLS columns, hdr in os_page). */
#define OS_COLS 14
static void os_row_cells(const OptRes *r, const OptRes *a, char (*c)[64]) {
    int fin = isfinite(r->final_val), have_a = a && isfinite(a->final_val);
    double est = a ? r->tok_target * r->t_mean_ms / (a->tok_target * a->t_mean_ms) : NAN;
    snprintf(c[0], 64, "%s", r->row->name);
    snprintf(c[1], 64, "%s", r->row->swept);
    if (r->best >= 0) study_lr_str(r->grid[r->best], c[2], 64);
    else snprintf(c[2], 64, "-");
    snprintf(c[3], 64, fin ? "%.4f" : "-", r->final_val);
    if (isfinite(r->tok_target)) snprintf(c[4], 64, "%.0f", r->tok_target);
    else snprintf(c[4], 64, fin && have_a ? "not reached" : "-");
    snprintf(c[5], 64, isfinite(r->tok_target) && a ? "%.2fx" : "-", a ? r->tok_target / a->tok_target : 0.0);
    snprintf(c[6], 64, isfinite(r->t_med_ms) ? "%.3g" : "-", r->t_med_ms);
    snprintf(c[7], 64, a && isfinite(r->t_med_ms / a->t_med_ms) ? "%.2fx" : "-", a ? r->t_med_ms / a->t_med_ms : 0.0);
    snprintf(c[8], 64, isfinite(r->t_mean_ms) ? "%.3g" : "-", r->t_mean_ms);
    snprintf(c[9], 64, a && isfinite(r->t_mean_ms / a->t_mean_ms) ? "%.2fx" : "-", a ? r->t_mean_ms / a->t_mean_ms : 0.0);
    snprintf(c[10], 64, isfinite(est) ? "%.2fx" : fin && have_a ? "not reached" : "-", est);
    snprintf(c[11], 64, isfinite(r->sec_target) ? "%.3g" : "-", r->sec_target);
    snprintf(c[12], 64, isfinite(r->t_med_opt_ms) ? "%.3g" : "-", r->t_med_opt_ms);
    os_short(r->failure[0] ? r->failure : "ok", c[13], 64);
}

/* The page: findings, the table, the curves against tokens and training seconds, the sweeps. */
static FigPage *os_page(const OptRes *res, int n, int ref, const OsSetup *su, const OsText *t) {
    const OptRes *a = ref >= 0 ? &res[ref] : NULL;
    FigPage *page = fig_page_new("Optimizers at their best learning rates, same model, data and token budget",
                                 "scaletrain study optimizers");
    fig_heading(page, "h-findings", "Findings");
    fig_paragraph(page, "findings", t->head);
    fig_paragraph(page, "findings-time", t->time);
    fig_paragraph(page, "findings-loss", t->loss);
    fig_paragraph(page, "findings-sweep", t->sweep);
    fig_paragraph(page, "setup", t->setup);
    {
        const char *hdr[OS_COLS] = {"optimizer", "swept flag", "best value", "final val loss", "tokens to AdamW's final loss",
                                    "x AdamW's tokens", "median step ms", "median step x AdamW", "mean step ms",
                                    "mean step x AdamW", "time to AdamW's final loss x AdamW's (at mean step times)",
                                    "seconds to AdamW's final loss (full run)", "median optimizer ms", "status"};
        char cells[NROWS][OS_COLS][64];
        const char *cp[NROWS * OS_COLS];
        for (int i = 0; i < n; i++) {
            os_row_cells(&res[i], a, cells[i]);
            for (int c = 0; c < OS_COLS; c++) cp[i * OS_COLS + c] = cells[i][c];
        }
        fig_table(page, "optimizers", hdr, OS_COLS, cp, n);
    }
    /* Curves of the full runs. */
    double target = a ? a->final_val : NAN;
    FigChart *cv = fig_chart(page, "chart-val-tokens", "Validation loss vs tokens",
                             "Each optimizer's full run at its best lr; the flat line is AdamW's final validation loss.",
                             "tokens", "validation loss", 0, 0);
    FigChart *ct = fig_chart(page, "chart-train-tokens", "Training loss (smoothed) vs tokens",
                             "Exponential moving average of the step losses, bias-corrected.", "tokens", "training loss", 0, 0);
    FigChart *cs = fig_chart(page, "chart-val-time", "Validation loss vs training seconds",
                             "Training seconds: the running sum of step times (validation and checkpoints excluded).",
                             "seconds", "validation loss", 0, 0);
    double xmax_tok = 0, xmax_s = 0, xmin_tok = INFINITY, xmin_s = INFINITY;
    double beta = 1.0 - 50.0 / (double)su->steps; /* an averaging window of about steps / 50 */
    beta = beta < 0 ? 0 : beta > 0.98 ? 0.98 : beta;
    long every = su->steps / 200 > 1 ? su->steps / 200 : 1;
    double *sx = malloc(sizeof(double) * ((size_t)su->steps + 1)), *sy = malloc(sizeof(double) * ((size_t)su->steps + 1));
    for (int i = 0; i < n && sx && sy; i++) {
        const OptRes *r = &res[i];
        if (!r->have_log) continue;
        fig_series(cv, r->row->name, r->vtok, r->vloss, (size_t)r->nval, 0);
        fig_series(cs, r->row->name, r->vsec, r->vloss, (size_t)r->nval, 0);
        for (int j = 0; j < r->nval; j++) {
            xmax_tok = fmax(xmax_tok, r->vtok[j]), xmin_tok = fmin(xmin_tok, r->vtok[j]);
            xmax_s = fmax(xmax_s, r->vsec[j]), xmin_s = fmin(xmin_s, r->vsec[j]);
        }
        double ema = 0, w = 0;
        size_t m = 0;
        for (long s = 1; s <= r->last; s++) {
            if (!isfinite(r->loss[s])) break; /* a diverged run's curve ends where it diverged */
            ema = beta * ema + (1 - beta) * r->loss[s], w = beta * w + (1 - beta);
            if ((s % every) == 0 || s == r->last) sx[m] = r->tokens[s], sy[m++] = ema / w;
        }
        fig_series(ct, r->row->name, sx, sy, m, 0);
    }
    free(sx), free(sy);
    if (isfinite(target) && xmax_tok > 0) {
        double tx[2] = {xmin_tok, xmax_tok}, sxs[2] = {xmin_s, xmax_s}, ty[2] = {target, target};
        fig_series(cv, "AdamW's final loss", tx, ty, 2, 0);
        fig_series(cs, "AdamW's final loss", sxs, ty, 2, 0);
    }
    /* The sweeps. */
    FigChart *cw = fig_chart(page, "chart-sweep", "Short sweeps: final validation loss vs learning rate",
                             "One line per optimizer over its swept flag (Muon: --muon-lr); missing points diverged.",
                             "learning rate", "validation loss", 1, 0);
    for (int i = 0; i < n; i++) fig_series(cw, res[i].row->name, res[i].grid, res[i].sweep_loss, (size_t)res[i].ngrid, 0);
    {
        const char *hdr[5] = {"optimizer", "swept flag", "value", "final val loss", "status"};
        int rows = 0;
        for (int i = 0; i < n; i++) rows += res[i].ngrid;
        char (*cells)[5][96] = calloc((size_t)rows + 1, sizeof *cells);
        const char **cp = calloc((size_t)rows * 5 + 1, sizeof *cp);
        int q = 0;
        for (int i = 0; i < n && cells && cp; i++)
            for (int g = 0; g < res[i].ngrid; g++, q++) {
                snprintf(cells[q][0], 96, "%s", res[i].row->name);
                snprintf(cells[q][1], 96, "%s", res[i].row->swept);
                study_lr_str(res[i].grid[g], cells[q][2], 96);
                snprintf(cells[q][3], 96, isfinite(res[i].sweep_loss[g]) ? "%.4f%s" : "-", res[i].sweep_loss[g],
                         g == res[i].best ? " (best)" : "");
                os_short(res[i].sweep_status[g], cells[q][4], 96);
                for (int c = 0; c < 5; c++) cp[q * 5 + c] = cells[q][c];
            }
        fig_heading(page, "h-sweeps", "Short sweeps");
        if (cells && cp) fig_table(page, "sweeps", hdr, 5, cp, q);
        free(cells), free(cp);
    }
    return page;
}

static cJSON *num_or_null(double v) { return isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull(); }

/* summary.json: the setup, per optimizer its sweep and its full run's numbers, the findings. */
static cJSON *os_summary(const OptRes *res, int n, int ref, const OsSetup *su, const OsText *t) {
    const OptRes *a = ref >= 0 ? &res[ref] : NULL;
    cJSON *sum = cJSON_CreateObject();
    cJSON_AddNumberToObject(sum, "layers", su->layers);
    cJSON_AddNumberToObject(sum, "width", su->width);
    cJSON_AddNumberToObject(sum, "seq_len", su->T);
    cJSON_AddNumberToObject(sum, "micro_batch", su->B);
    cJSON_AddNumberToObject(sum, "steps", (double)su->steps);
    cJSON_AddNumberToObject(sum, "sweep_steps", (double)su->sweep_steps);
    cJSON_AddNumberToObject(sum, "val_every", su->val_every);
    cJSON_AddNumberToObject(sum, "timing_rounds", su->timing_rounds);
    cJSON_AddNumberToObject(sum, "timing_steps", su->timing_steps);
    cJSON_AddNumberToObject(sum, "budget_tokens", (double)su->steps * su->B * su->T);
    cJSON_AddItemToObject(sum, "target_loss", num_or_null(a ? a->final_val : NAN));
    cJSON *arr = cJSON_AddArrayToObject(sum, "optimizers");
    for (int i = 0; i < n; i++) {
        const OptRes *r = &res[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", r->row->name);
        cJSON_AddStringToObject(o, "flags", r->row->flags);
        cJSON_AddStringToObject(o, "swept", r->row->swept);
        cJSON_AddItemToObject(o, "grid", cJSON_CreateDoubleArray(r->grid, r->ngrid));
        cJSON *sl = cJSON_AddArrayToObject(o, "sweep_loss"), *ss = cJSON_AddArrayToObject(o, "sweep_status");
        for (int g = 0; g < r->ngrid; g++) {
            cJSON_AddItemToArray(sl, num_or_null(r->sweep_loss[g]));
            cJSON_AddItemToArray(ss, cJSON_CreateString(r->sweep_status[g]));
        }
        cJSON_AddItemToObject(o, "best_lr", num_or_null(r->best >= 0 ? r->grid[r->best] : NAN));
        cJSON_AddBoolToObject(o, "best_at_edge", r->best >= 0 && (r->best == 0 || r->best == r->ngrid - 1));
        if (isfinite(r->adamw_lr)) cJSON_AddNumberToObject(o, "adamw_part_lr", r->adamw_lr);
        cJSON_AddItemToObject(o, "final_val_loss", num_or_null(r->final_val));
        cJSON_AddItemToObject(o, "tokens_to_target", num_or_null(r->tok_target));
        cJSON_AddItemToObject(o, "tokens_ratio", num_or_null(a ? r->tok_target / a->tok_target : NAN));
        cJSON_AddItemToObject(o, "median_step_ms", num_or_null(r->t_med_ms));
        cJSON_AddItemToObject(o, "median_step_ratio", num_or_null(a ? r->t_med_ms / a->t_med_ms : NAN));
        cJSON_AddItemToObject(o, "mean_step_ms", num_or_null(r->t_mean_ms));
        cJSON_AddItemToObject(o, "mean_step_ratio", num_or_null(a ? r->t_mean_ms / a->t_mean_ms : NAN));
        cJSON_AddItemToObject(o, "median_optimizer_ms", num_or_null(r->t_med_opt_ms));
        cJSON_AddNumberToObject(o, "timed_steps", r->t_steps);
        cJSON_AddItemToObject(o, "time_ratio_at_mean_step",
                              num_or_null(a ? r->tok_target * r->t_mean_ms / (a->tok_target * a->t_mean_ms) : NAN));
        cJSON_AddItemToObject(o, "seconds_to_target", num_or_null(r->sec_target));
        cJSON_AddItemToObject(o, "seconds_ratio", num_or_null(a ? r->sec_target / a->sec_target : NAN));
        cJSON_AddItemToObject(o, "full_run_median_step_ms", num_or_null(r->med_ms));
        cJSON_AddItemToObject(o, "full_run_mean_step_ms", num_or_null(r->mean_ms));
        cJSON_AddNumberToObject(o, "slow_steps", r->nslow);
        cJSON_AddNumberToObject(o, "slow_step_period", (double)r->slow_period);
        cJSON_AddItemToObject(o, "train_seconds", num_or_null(r->have_log ? r->train_s : NAN));
        cJSON_AddItemToObject(o, "weight_decay", num_or_null(r->weight_decay));
        cJSON_AddStringToObject(o, "status", r->failure[0] ? r->failure : "ok");
        cJSON_AddItemToArray(arr, o);
    }
    cJSON_AddStringToObject(sum, "findings", t->head);
    return sum;
}

/* ================================================================ step timing (phase 3) */

/* The step times of a timing log (steps >= 2: the first step allocates and warms up) appended to
 * ms[*n] and opt[*n] (at most cap). Returns 1 when the log's last run has an end record (it
 * finished); report_load_run reads it. */
static int os_timing_read(const char *path, double *ms, double *opt, int *n, int cap) {
    ReportRun *rr = study_load_log(path);
    if (!rr) return 0;
    const ReportRun *x = rr; /* the file's last run */
    while (x->next) x = x->next;
    int ended = x->ended, n0 = *n;
    for (size_t i = 0; i < x->step[REP_STEP].n && *n < cap; i++) {
        if (!(x->step[REP_STEP].v[i] >= 2)) continue;
        double ck = x->step[REP_T_CKPT].v[i];
        ms[*n] = x->step[REP_T_TOTAL].v[i] - (isfinite(ck) ? ck : 0), opt[(*n)++] = x->step[REP_T_OPT].v[i];
    }
    report_run_free(rr);
    free(rr);
    if (!ended) *n = n0;
    return ended;

}

/* One timing run: r's optimizer at its best value for timing_steps + 1 steps, logged to
 * DIR/timing/<name>-r<round>-<hash of its flags>.jsonl, its steps pooled into ms/opt. A log that finished before is
 * read, not trained again (a re-run of the study rewrites the same numbers); an unfinished one is
 * removed and trained again. A divergence is not an error here (its steps still took their time). */
static Status os_time_one(const char *out, const OsSetup *su, const OptRes *r, int round, Comm *comm,
                          const TrainFlagsParser *tp, double *ms, double *opt, int *n, int cap, Err *err) {
    char dir[1200], log[1400], name[64];
    char v[12][48], flagbuf[512];
    snprintf(v[0], 48, "%d", su->layers), snprintf(v[1], 48, "%d", su->heads), snprintf(v[2], 48, "%d", su->width);
    snprintf(v[3], 48, "%d", su->T), snprintf(v[4], 48, "%d", su->B), snprintf(v[5], 48, "%d", su->timing_steps + 1);
    snprintf(v[6], 48, "%d", su->threads);
    int swept_lr = !strcmp(r->row->swept, "lr");
    snprintf(v[7], 48, "%.7g", swept_lr ? r->grid[r->best] : r->adamw_lr);
    snprintf(v[8], 48, "--%s", r->row->swept), snprintf(v[9], 48, "%.7g", r->grid[r->best]);
    char *flags[64] = {"--layers", v[0], "--heads", v[1], "--channels", v[2], "--max-seq-len", v[3], "--seq-len", v[3],
                       "--micro-batch", v[4], "--steps", v[5], "--threads", v[6], "--lr", v[7], "--min-lr", "0",
                       "--warmup", "0", "--peak-gflops", "100", "--val-every", "0", "--val-batches", "1", "--quiet"};
    int nf = 29;
    if (!swept_lr) flags[nf++] = v[8], flags[nf++] = v[9];
    /* The row's own flags, split at spaces (flagbuf keeps the words). */
    snprintf(flagbuf, sizeof flagbuf, "%s", r->row->flags);
    for (char *save = NULL, *t = strtok_r(flagbuf, " ", &save); t && nf < 64; t = strtok_r(NULL, " ", &save)) flags[nf++] = t;
    /* The log's name carries a hash of these flags: a re-run with other settings (--width, --steps,
     * a best value that moved) times afresh instead of reading the old settings' steps. */
    XXH3_state_t *hs = XXH3_createState();
    if (!hs) return err_set(err, ST_ERR_RUNTIME, "out of memory");
    XXH3_64bits_reset(hs);
    for (int i = 0; i < nf; i++) XXH3_64bits_update(hs, flags[i], strlen(flags[i]) + 1);
    unsigned long long key = (unsigned long long)XXH3_64bits_digest(hs);
    XXH3_freeState(hs);
    snprintf(dir, sizeof dir, "%s/timing", out);
    snprintf(log, sizeof log, "%s/%s-r%d-%08llx.jsonl", dir, r->row->name, round, key & 0xffffffffULL);
    Status st = file_mkdirs(dir, err);
    if (st != ST_OK || os_timing_read(log, ms, opt, n, cap)) return st;
    if (comm && (st = comm_barrier(comm, err)) != ST_OK) return st;
    if (!comm || comm->rank == 0) remove(log);
    if (comm && (st = comm_barrier(comm, err)) != ST_OK) return st;
    char failure[512];
    snprintf(name, sizeof name, "%s round %d", r->row->name, round);
    st = study_train("study optimizers: timing", name, flags, nf, log, comm, tp, failure, sizeof failure, err);
    if (st == ST_OK) os_timing_read(log, ms, opt, n, cap);
    return st;
}

/* Phase 3 over every optimizer with a best value: rounds of one timing run each, in table order,
 * then each one's median and mean step time and median optimizer time over its pooled steps. */
static Status os_timing(const char *out, const OsSetup *su, OptRes *res, int nres, Comm *comm, const TrainFlagsParser *tp,
                        Err *err) {
    int cap = su->timing_rounds * su->timing_steps;
    double *ms = malloc(sizeof(double) * (size_t)nres * (size_t)cap), *opt = malloc(sizeof(double) * (size_t)nres * (size_t)cap);
    int *n = calloc((size_t)nres, sizeof *n);
    Status st = ms && opt && n ? ST_OK : err_set(err, ST_ERR_RUNTIME, "out of memory");
    if (st == ST_OK && (!comm || comm->rank == 0)) {
        printf("study optimizers: step timing, %d rounds of %d steps per optimizer, interleaved\n", su->timing_rounds,
               su->timing_steps);
        fflush(stdout);
    }
    for (int k = 0; k < su->timing_rounds && st == ST_OK; k++)
        for (int i = 0; i < nres && st == ST_OK; i++)
            if (res[i].best >= 0 && !res[i].failure[0])
                st = os_time_one(out, su, &res[i], k, comm, tp, ms + (size_t)i * cap, opt + (size_t)i * cap, &n[i], cap, err);
    for (int i = 0; i < nres && st == ST_OK; i++) {
        OptRes *r = &res[i];
        const double *m = ms + (size_t)i * cap, *o = opt + (size_t)i * cap;
        double sum = 0;
        int nm = 0;
        for (int j = 0; j < n[i]; j++)
            if (isfinite(m[j])) sum += m[j], nm++;
        r->t_steps = n[i];
        r->t_med_ms = stats_median(m, (size_t)n[i]), r->t_med_opt_ms = stats_median(o, (size_t)n[i]);
        r->t_mean_ms = nm ? sum / nm : NAN;
    }
    free(ms), free(opt), free(n);
    return st;
}

/* ================================================================ the study */

/* --optimizers "adamw,muon" → use[row] = 1, in OPT_ROWS' order. AdamW is required (the reference). */
static Status os_parse_optimizers(const char *s, int *use, Err *err) {
    char buf[512], names[256] = "";
    snprintf(buf, sizeof buf, "%s", s);
    for (int i = 0; i < NROWS; i++) {
        use[i] = 0;
        size_t k = strlen(names);
        snprintf(names + k, sizeof names - k, "%s%s", i ? ", " : "", OPT_ROWS[i].name);
    }
    int any = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int f = -1;
        for (int i = 0; i < NROWS; i++)
            if (!strcmp(t, OPT_ROWS[i].name)) f = i;
        if (f < 0) return err_set(err, ST_ERR_INPUT, "--optimizers: expected names among %s, found '%s'", names, t);
        if (use[f]) return err_set(err, ST_ERR_INPUT, "--optimizers: expected each name once, found '%s' twice", t);
        use[f] = any = 1;
    }
    if (!any) return err_set(err, ST_ERR_INPUT, "--optimizers: expected a comma-separated list among %s, found '%s'", names, s);
    if (!use[0]) return err_set(err, ST_ERR_INPUT, "--optimizers: expected a list that includes adamw (the reference), found '%s'", s);
    return ST_OK;
}

/* Phase 1 and 2 of one optimizer. Returns errors that stop the study; a refused or diverged run
 * is recorded in r. */
static Status os_run_one(const char *out, const OsSetup *su, OptRes *r, const OptRes *adamw, Comm *comm,
                         const TrainFlagsParser *tp, int *intr, Err *err) {
    int root = !comm || comm->rank == 0;
    char refused[600] = "", log[1400] = "";
    r->best = -1;
    if (strcmp(r->row->swept, "lr")) {
        /* Muon: its AdamW part runs at AdamW's best lr. */
        r->adamw_lr = adamw->best >= 0 ? adamw->grid[adamw->best] : NAN;
        if (!isfinite(r->adamw_lr)) {
            snprintf(r->failure, sizeof r->failure, "not run: its AdamW part needs AdamW's best lr, and AdamW's sweep has none");
            for (int g = 0; g < r->ngrid; g++) r->sweep_loss[g] = NAN, snprintf(r->sweep_status[g], 256, "not run");
            return ST_OK;
        }
    }
    if (root) {
        printf("study optimizers: %s: sweep of %s over %d values, %ld steps each\n", r->row->name, r->row->swept, r->ngrid,
               su->sweep_steps);
        fflush(stdout);
    }
    Status st = os_sweep(out, "sweep", su, r, r->grid, r->ngrid, su->sweep_steps, 0, comm, tp, r->sweep_loss, r->sweep_status,
                         NULL, 0, refused, sizeof refused, intr, err);
    if (st != ST_OK || *intr) return st;
    if (refused[0] && r == adamw) {
        /* Without the reference nothing is comparable; a refusal of AdamW is a refusal of the setup
         * (data, sizes), so the study stops with it. */
        char m[600];
        snprintf(m, sizeof m, "%s", refused + strlen("refused: "));
        return err_set(err, ST_ERR_INPUT, "%s", m);
    }
    if (refused[0]) {
        snprintf(r->failure, sizeof r->failure, "%s", refused);
        for (int g = 0; g < r->ngrid; g++) snprintf(r->sweep_status[g], 256, "%.255s", refused);
        return ST_OK;
    }
    for (int g = 0; g < r->ngrid; g++)
        if (isfinite(r->sweep_loss[g]) && (r->best < 0 || r->sweep_loss[g] < r->sweep_loss[r->best])) r->best = g;
    if (r->best < 0) {
        snprintf(r->failure, sizeof r->failure, "not run: no run of its sweep finished");
        return ST_OK;
    }
    char b[96];
    os_best_str(r, b, sizeof b);
    if (root) {
        printf("study optimizers: %s: best %s (loss %.4f); full run of %ld steps\n", r->row->name, b, r->sweep_loss[r->best],
               su->steps);
        fflush(stdout);
    }
    double fl;
    char fs[1][256];
    st = os_sweep(out, "final", su, r, &r->grid[r->best], 1, su->steps, su->val_every, comm, tp, &fl, fs, log, sizeof log, refused,
                  sizeof refused, intr, err);
    if (st != ST_OK || *intr) return st;
    if (refused[0]) snprintf(r->failure, sizeof r->failure, "%s", refused);
    else if (strcmp(fs[0], "ok")) snprintf(r->failure, sizeof r->failure, "%.500s", fs[0]);
    if (log[0]) r->have_log = os_read_log(r, log, su->steps);
    if (r->failure[0]) r->final_val = NAN; /* a failed run's last evaluation is not a final loss */
    return ST_OK;
}

void study_optimizers_all(char *buf, size_t cap) {
    buf[0] = '\0';
    for (int i = 0; i < NROWS; i++) snprintf(buf + strlen(buf), cap - strlen(buf), "%s%s", i ? "," : "", OPT_ROWS[i].name);
}

Status study_optimizers(const OptStudyOptions *o, Comm *comm, const TrainFlagsParser *tp, StudyOutcome *out_res, Err *err) {
    memset(out_res, 0, sizeof *out_res);
    const OsSetup *su = &o->su;
    const char *out = o->out;
    int use[NROWS];
    Status st = os_parse_optimizers(o->optimizers, use, err);
    if (st != ST_OK) return st;
    OptRes *res = calloc(NROWS, sizeof *res);
    if (!res) return err_set(err, ST_ERR_RUNTIME, "out of memory");
    int nres = 0, ref = -1;
    for (int i = 0; i < NROWS && st == ST_OK; i++) {
        if (!use[i]) continue;
        OptRes *r = &res[nres++];
        r->row = &OPT_ROWS[i];
        r->adamw_lr = r->final_val = r->med_ms = r->med_opt_ms = r->mean_ms = r->mean_opt_ms = NAN;
        r->tok_target = r->sec_target = r->weight_decay = r->t_med_ms = r->t_mean_ms = r->t_med_opt_ms = NAN;
        double g[STUDY_MAXV];
        int ng = 0;
        char flag[64];
        snprintf(flag, sizeof flag, "optimizers (the grid of %s)", r->row->name);
        st = study_parse_list(flag, r->row->grid, g, &ng, err); /* the table is ours: a failure is a bug here */
        if (su->quick && ng >= 2) r->grid[0] = g[(ng - 1) / 2], r->grid[1] = g[(ng - 1) / 2 + 1], r->ngrid = 2;
        else memcpy(r->grid, g, sizeof(double) * (size_t)ng), r->ngrid = ng;
        for (int q = 0; q < r->ngrid; q++) r->grid[q] *= o->lr_scale;
        if (!strcmp(r->row->name, "adamw")) ref = nres - 1;
    }
    int root = !comm || comm->rank == 0, intr = 0;
    for (int i = 0; i < nres && st == ST_OK && !intr; i++) st = os_run_one(out, su, &res[i], &res[ref], comm, tp, &intr, err);
    if (st == ST_OK && !intr) st = os_timing(out, su, res, nres, comm, tp, err);
    if (st != ST_OK || intr || !root) {
        for (int i = 0; i < nres; i++) os_free(&res[i]);
        free(res);
        out_res->interrupted = intr;
        return st;
    }
    /* Tokens and seconds to AdamW's final validation loss. */
    double target = res[ref].final_val;
    for (int i = 0; i < nres; i++) {
        OptRes *r = &res[i];
        if (!r->have_log || r->failure[0]) continue;
        r->tok_target = os_reach(r->vtok, r->vloss, r->nval, target);
        r->sec_target = os_reach(r->vsec, r->vloss, r->nval, target);
    }
    OsText *t = calloc(1, sizeof *t);
    if (!t) st = err_set(err, ST_ERR_RUNTIME, "out of memory");
    if (st == ST_OK) {
        os_findings(res, nres, ref, su, t);
        FigPage *page = os_page(res, nres, ref, su, t);
        cJSON *sum = os_summary(res, nres, ref, su, t);
        st = study_write_page(out, page, sum, err);
        fig_page_free(page);
        cJSON_Delete(sum);
        const char *lines[4] = {t->head, t->time, t->loss, t->sweep};
        out_res->findings = study_lines(lines, 4);
    }
    free(t);
    for (int i = 0; i < nres; i++) os_free(&res[i]);
    free(res);
    return st;
}
