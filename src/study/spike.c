/* spike.c — the spike study (studies.h; docs/studies.md): a run with too high a learning rate and
 * no warmup or clipping, and the same run with warmup and clipping; the spike detector's events, and
 * the diagnosis around the first one (lr, gradient norm, update/weight ratio per layer from
 * --log-layer-stats). Moved from cli/cmd_study.c (issue 24); the command's flags stay there. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/fileio.h"
#include "core/stats.h"
#include "report/figures.h"
#include "report/report.h"
#include "study/studies.h"

/* ================================================================ spike */

#define SP_MAXSTEPS STUDY_SPIKE_MAXSTEPS
#define SP_MAXG 64    /* layer groups read from layer_stats */
#define SP_MAXSPIKES 256

/* What the spike study reads back from a run's log. */
typedef struct {
    const char *name;
    int n;                                   /* steps read (1..n) */
    double loss[SP_MAXSTEPS + 1], lr[SP_MAXSTEPS + 1], gnorm[SP_MAXSTEPS + 1];
    int ngroups;
    char group[SP_MAXG][24];
    double *ratio;                           /* [(SP_MAXSTEPS + 1) * SP_MAXG]: update/weight per group */
    int nval;
    double val_step[SP_MAXSTEPS], val_loss[SP_MAXSTEPS];
    int nspikes;
    double sp_step[SP_MAXSPIKES], sp_value[SP_MAXSPIKES], sp_median[SP_MAXSPIKES], sp_z[SP_MAXSPIKES];
    char sp_metric[SP_MAXSPIKES][16], sp_action[SP_MAXSPIKES][16];
    char failure[1024];                      /* the run's error ("" if it finished) */
} SpikeRun;

/* The run's log at path (through report_load_run, the one reader of metrics logs; the file's last
 * run when it holds several) into r: per step 1..SP_MAXSTEPS the loss, lr, gradient norm and the
 * update/weight ratio of each layer group; the evaluations; the spike events. A log that cannot
 * be read leaves r empty. */
static void spike_read(SpikeRun *r, const char *path) {
    r->n = 0, r->nval = 0, r->nspikes = 0, r->ngroups = 0;
    ReportRun *rr = study_load_log(path);
    if (!rr) return;
    const ReportRun *x = rr;
    while (x->next) x = x->next;
    r->ngroups = x->ngroups < SP_MAXG ? x->ngroups : SP_MAXG;
    for (int k = 0; k < r->ngroups; k++) snprintf(r->group[k], sizeof r->group[k], "%s", x->group[k]);
    for (size_t i = 0; i < x->step[REP_STEP].n; i++) {
        double sv = x->step[REP_STEP].v[i];
        if (!(sv >= 1 && sv <= SP_MAXSTEPS)) continue;
        int step = (int)sv;
        r->loss[step] = x->step[REP_LOSS].v[i], r->lr[step] = x->step[REP_LR].v[i], r->gnorm[step] = x->step[REP_GNORM].v[i];
        if (step > r->n) r->n = step;
        for (int k = 0; k < r->ngroups; k++) r->ratio[(size_t)step * SP_MAXG + k] = x->group_ratio[k].v[i];
    }
    for (size_t i = 0; i < x->val_step.n && r->nval < SP_MAXSTEPS; i++)
        r->val_step[r->nval] = (int)x->val_step.v[i], r->val_loss[r->nval++] = x->val_loss.v[i];
    for (size_t i = 0; i < x->spike_step.n && r->nspikes < SP_MAXSPIKES; i++) {
        int q = r->nspikes++;
        r->sp_step[q] = (int)x->spike_step.v[i], r->sp_value[q] = x->spike_value.v[i];
        r->sp_median[q] = x->spike_median.v[i], r->sp_z[q] = x->spike_z.v[i];
        snprintf(r->sp_metric[q], sizeof r->sp_metric[q], "%s", x->spike_is_gnorm.v[i] ? "grad_norm" : "loss");
        snprintf(r->sp_action[q], sizeof r->sp_action[q], "%s", x->spike_action.s[i]);
    }
    report_run_free(rr);
    free(rr);
}

/* Trains one run of the spike study through the library: train's own flags, logged to
 * DIR/runs/<name>/log.jsonl. A run that ends in an error after training (divergence past
 * --max-nonfinite) is a result: its message is kept in r->failure. */
static Status spike_train(const char *dir, SpikeRun *r, char **flags, int nflags, Comm *comm, const TrainFlagsParser *tp,
                          Err *err) {
    char rdir[1200], log[1300];
    snprintf(rdir, sizeof rdir, "%s/runs/%s", dir, r->name);
    snprintf(log, sizeof log, "%s/log.jsonl", rdir);
    Status st = file_mkdirs(rdir, err);
    if (st != ST_OK) return st;
    st = study_train("study spike", r->name, flags, nflags, log, comm, tp, r->failure, sizeof r->failure, err);
    if (st == ST_OK) spike_read(r, log);
    return st;
}

/* " (loss at step 4, grad_norm at step 7, ...)" for the first events of a run ("" if none). */
static size_t spike_list(const SpikeRun *r, char *buf, size_t cap) {
    size_t k = 0;
    buf[0] = '\0';
    for (int q = 0; q < r->nspikes && q < 6 && k < cap; q++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%s at step %.0f", q ? ", " : " (", r->sp_metric[q], r->sp_step[q]);
    if (r->nspikes > 6 && k < cap) k += (size_t)snprintf(buf + k, cap - k, ", ...");
    if (r->nspikes && k < cap) k += (size_t)snprintf(buf + k, cap - k, ")");
    return k < cap ? k : cap - 1;
}

static double last_val(const SpikeRun *r) { return r->nval ? r->val_loss[r->nval - 1] : NAN; }

/* The findings of the spike study, as text, and the numbers the page and summary reuse. */
typedef struct {
    char head[1024], unstable[2048], stable[2048], diagnosis[2048];
    int at;             /* the step of the diagnosis */
    double u_max, s_max; /* each run's highest loss after step 1 */
    int u_at, s_at;      /* and its step */
} SpikeText;

/* The findings of the spike study from its two runs' numbers (run[0] unstable, run[1] stable):
 * four paragraphs into t, and the step the diagnosis looks at (the unstable run's first event, or
 * its loss maximum when none was flagged). */
static void spike_findings(const SpikeRun *run, double lr, long warm, double clip, SpikeText *t) {
    const SpikeRun *u = &run[0], *s = &run[1];
    /* The numbers of the findings. */
    double u_max = -INFINITY, s_max = -INFINITY;
    int u_at = 0, s_at = 0;
    for (int i = 2; i <= u->n; i++)
        if (u->loss[i] > u_max || !isfinite(u->loss[i])) u_max = u->loss[i], u_at = i;
    for (int i = 2; i <= s->n; i++)
        if (s->loss[i] > s_max) s_max = s->loss[i], s_at = i;
    char *f1 = t->unstable, *f2 = t->stable, *f3 = t->diagnosis, *head = t->head;
    size_t k = (size_t)snprintf(f1, sizeof t->unstable,
                                "Without warmup or clipping at lr %.3g, the loss went from %.3f at step 1 to %.3f at step %d "
                                "(%s its starting value)", lr, u->loss[1], u_max, u_at,
                                u_max > u->loss[1] ? "above" : "below");
    if (u->failure[0]) k += (size_t)snprintf(f1 + k, sizeof t->unstable - k, " and the run stopped: %s", u->failure);
    else k += (size_t)snprintf(f1 + k, sizeof t->unstable - k, "; it ended at a validation loss of %.4f after %d steps", last_val(u), u->n);
    k += (size_t)snprintf(f1 + k, sizeof t->unstable - k, ". The spike detector logged %d event%s", u->nspikes, u->nspikes == 1 ? "" : "s");
    k += spike_list(u, f1 + k, sizeof t->unstable - k);
    if (u->nspikes)
        k += (size_t)snprintf(f1 + k, sizeof t->unstable - k, "; the first: %s %.3f against a rolling median of %.3f (robust z %.1f)",
                              u->sp_metric[0], u->sp_value[0], u->sp_median[0], u->sp_z[0]);
    snprintf(f1 + k, sizeof t->unstable - k, ".");
    char s_events[512] = "";
    spike_list(s, s_events, sizeof s_events);
    snprintf(f2, sizeof t->stable,
             "The same run with %ld warmup steps and clipping at %.3g: its loss peaked at %.3f (step %d) after step 1's %.3f, "
             "the detector logged %d event%s%s, and it ended at a validation loss of %.4f, %s the unstable run's %.4f (%+.4f).",
             warm, clip, s_max, s_at, s->loss[1], s->nspikes, s->nspikes == 1 ? "" : "s", s_events, last_val(s),
             last_val(s) < last_val(u) ? "below" : "not below", last_val(u), last_val(s) - last_val(u));
    /* Diagnosis around the first spike (or the loss maximum when none was flagged). */
    int at = u->nspikes ? (int)u->sp_step[0] : u_at;
    if (at < 1) at = 1;
    double before[64];
    int nb = 0;
    for (int i = at - 8; i < at; i++)
        if (i >= 1) before[nb++] = u->gnorm[i];
    double g_med = stats_median(before, (size_t)nb);
    int worst_g = -1;
    double worst = -1;
    for (int g = 0; g < u->ngroups; g++) {
        double x = u->ratio[(size_t)at * SP_MAXG + g];
        if (isfinite(x) && x > worst) worst = x, worst_g = g;
    }
    double s_same = worst_g >= 0 && at <= s->n ? s->ratio[(size_t)at * SP_MAXG + worst_g] : NAN;
    if (worst_g >= 0) {
        /* The largest update/weight ratio of any group over steps 1..at, in each run. */
        double pk[2] = {-1, -1};
        int pk_step[2] = {0, 0}, pk_g[2] = {0, 0};
        for (int r = 0; r < 2; r++)
            for (int i = 1; i <= at && i <= run[r].n; i++)
                for (int q = 0; q < run[r].ngroups; q++) {
                    double v = run[r].ratio[(size_t)i * SP_MAXG + q];
                    if (isfinite(v) && v > pk[r]) pk[r] = v, pk_step[r] = i, pk_g[r] = q;
                }
        double ratio_x = isfinite(s_same) && s_same > 0 ? worst / s_same : NAN;
        snprintf(f3, sizeof t->diagnosis,
                 "Diagnosis at step %d of the unstable run: lr %.3g (the stable run's %.3g), gradient norm %.3g against a "
                 "median of %.3g over the steps before it (%.1fx), and the largest update/weight ratio in %s: %.3g (%.2gx "
                 "the stable run's %.3g in that group at the same step). Over steps 1 to %d the largest update/weight "
                 "ratio of any layer was %.3g in the unstable run (%s, step %d) and %.3g in the stable run (%s, step %d): "
                 "%.2gx.",
                 at, u->lr[at], at <= s->n ? s->lr[at] : NAN, u->gnorm[at], g_med, u->gnorm[at] / g_med,
                 u->group[worst_g], worst, ratio_x, s_same, at, pk[0], u->group[pk_g[0]], pk_step[0], pk[1],
                 s->group[pk_g[1]], pk_step[1], pk[1] > 0 ? pk[0] / pk[1] : NAN);
    }
    else snprintf(f3, sizeof t->diagnosis, "No per-layer statistics were logged at step %d.", at);
    snprintf(head, sizeof t->head, "Headline: without warmup or clipping the loss rose to %.3f (step %d) with %d spike event%s; "
             "with warmup and clipping its highest loss after step 1 was %.3f, with %d event%s, and it ended at a validation loss of "
             "%.4f (vs %.4f).", u_max, u_at, u->nspikes, u->nspikes == 1 ? "" : "s", s_max, s->nspikes, s->nspikes == 1 ? "" : "s",
             last_val(s), last_val(u));

    t->at = at, t->u_max = u_max, t->u_at = u_at, t->s_max = s_max, t->s_at = s_at;
}

/* The spike study's page: findings, the diagnosis table around step t->at, the events of both runs,
 * and the charts (loss, gradient norm, lr, update/weight ratio per layer of each run). */
static FigPage *spike_page(const SpikeRun *run, const SpikeText *t) {
    const SpikeRun *u = &run[0], *s = &run[1];
    FigPage *page = fig_page_new("Loss spikes: too high a learning rate, without and with warmup and clipping",
                                 "scaletrain study spike");
    fig_heading(page, "h-findings", "Findings");
    fig_paragraph(page, "findings", t->head);
    fig_paragraph(page, "findings-unstable", t->unstable);
    fig_paragraph(page, "findings-stable", t->stable);
    fig_heading(page, "h-diagnosis", "Diagnosis");
    fig_paragraph(page, "diagnosis", t->diagnosis);
    /* Table: around the spike, both runs. */
    {
        const char *hdr[6] = {"step", "lr (unstable)", "grad norm (unstable)", "loss (unstable)", "max update/weight (unstable)",
                              "max update/weight (stable)"};
        static char cells[24][6][48];
        const char *cp[24 * 6];
        int rows = 0;
        for (int i = t->at - 3; i <= t->at + 5 && rows < 24; i++) {
            if (i < 1 || i > u->n) continue;
            double mu = -1, ms = -1;
            int gu = -1, gs = -1;
            for (int g = 0; g < u->ngroups; g++) {
                double x = u->ratio[(size_t)i * SP_MAXG + g], y = i <= s->n ? s->ratio[(size_t)i * SP_MAXG + g] : NAN;
                if (isfinite(x) && x > mu) mu = x, gu = g;
                if (isfinite(y) && y > ms) ms = y, gs = g;
            }
            snprintf(cells[rows][0], 48, "%d", i);
            snprintf(cells[rows][1], 48, "%.3g", u->lr[i]);
            snprintf(cells[rows][2], 48, "%.4g", u->gnorm[i]);
            snprintf(cells[rows][3], 48, "%.4f", u->loss[i]);
            snprintf(cells[rows][4], 48, gu >= 0 ? "%.3g (%s)" : "-", mu, gu >= 0 ? u->group[gu] : "");
            snprintf(cells[rows][5], 48, gs >= 0 ? "%.3g (%s)" : "-", ms, gs >= 0 ? s->group[gs] : "");
            for (int c = 0; c < 6; c++) cp[rows * 6 + c] = cells[rows][c];
            rows++;
        }
        fig_table(page, "diagnosis-table", hdr, 6, cp, rows);
    }
    /* Table: the detector's events of both runs. */
    {
        const char *hdr[7] = {"run", "step", "metric", "value", "median", "z", "action"};
        static char cells[2 * SP_MAXSPIKES][7][32];
        const char *cp[2 * SP_MAXSPIKES * 7];
        int rows = 0;
        for (int r = 0; r < 2; r++)
            for (int q = 0; q < run[r].nspikes; q++, rows++) {
                snprintf(cells[rows][0], 32, "%s", run[r].name);
                snprintf(cells[rows][1], 32, "%.0f", run[r].sp_step[q]);
                snprintf(cells[rows][2], 32, "%s", run[r].sp_metric[q]);
                snprintf(cells[rows][3], 32, "%.4g", run[r].sp_value[q]);
                snprintf(cells[rows][4], 32, "%.4g", run[r].sp_median[q]);
                snprintf(cells[rows][5], 32, "%.3g", run[r].sp_z[q]);
                snprintf(cells[rows][6], 32, "%s", run[r].sp_action[q]);
                for (int c = 0; c < 7; c++) cp[rows * 7 + c] = cells[rows][c];
            }
        fig_heading(page, "h-spikes", "Spike detector events");
        fig_table(page, "spikes", hdr, 7, cp, rows);
    }
    /* Charts. */
    double *x = malloc(sizeof(double) * (SP_MAXSTEPS + 1)), *y = malloc(sizeof(double) * (SP_MAXSTEPS + 1));
    for (int i = 0; i <= SP_MAXSTEPS; i++) x[i] = i;
    FigChart *cl = fig_chart(page, "chart-loss", "Training loss", "Red lines: the unstable run's spike events.", "step",
                             "loss", 0, 0);
    FigChart *cg = fig_chart(page, "chart-gnorm", "Gradient norm (before clipping)", NULL, "step", "grad norm", 0, 1);
    FigChart *cr = fig_chart(page, "chart-lr", "Learning rate", NULL, "step", "lr", 0, 0);
    for (int r = 0; r < 2; r++) {
        fig_series(cl, run[r].name, x + 1, run[r].loss + 1, (size_t)run[r].n, 0);
        fig_series(cg, run[r].name, x + 1, run[r].gnorm + 1, (size_t)run[r].n, 0);
        fig_series(cr, run[r].name, x + 1, run[r].lr + 1, (size_t)run[r].n, 0);
    }
    fig_markers(cl, u->sp_step, (size_t)u->nspikes);
    fig_markers(cg, u->sp_step, (size_t)u->nspikes);
    for (int r = 0; r < 2; r++) {
        char id[64], title[128];
        snprintf(id, sizeof id, "chart-ratio-%s", run[r].name);
        snprintf(title, sizeof title, "Update / weight norm ratio per layer, %s run", run[r].name);
        FigChart *c = fig_chart(page, id, title, "||w after - w before|| / ||w before|| of each group at each step.", "step",
                                "update / weight", 0, 1);
        for (int g = 0; g < run[r].ngroups; g++) {
            for (int i = 1; i <= run[r].n; i++) y[i] = run[r].ratio[(size_t)i * SP_MAXG + g];
            fig_series(c, run[r].group[g], x + 1, y + 1, (size_t)run[r].n, 0);
        }
        if (r == 0) fig_markers(c, u->sp_step, (size_t)u->nspikes);
    }
    free(x), free(y);
    return page;
}

/* summary.json of the spike study: each run's numbers and the findings' headline. */
static cJSON *spike_summary(const SpikeRun *run, const SpikeText *t, double lr, long warm, double clip) {
    cJSON *sum = cJSON_CreateObject();
    for (int r = 0; r < 2; r++) {
        cJSON *o = cJSON_AddObjectToObject(sum, run[r].name);
        cJSON_AddNumberToObject(o, "steps", run[r].n);
        cJSON_AddNumberToObject(o, "first_loss", run[r].loss[1]);
        cJSON_AddNumberToObject(o, "max_loss", r ? t->s_max : t->u_max);
        cJSON_AddNumberToObject(o, "max_loss_step", r ? t->s_at : t->u_at);
        if (isfinite(last_val(&run[r]))) cJSON_AddNumberToObject(o, "final_val_loss", last_val(&run[r]));
        else cJSON_AddNullToObject(o, "final_val_loss");
        cJSON_AddNumberToObject(o, "spikes", run[r].nspikes);
        cJSON_AddItemToObject(o, "spike_steps", cJSON_CreateDoubleArray(run[r].sp_step, run[r].nspikes));
        cJSON_AddStringToObject(o, "failure", run[r].failure);
    }
    cJSON_AddNumberToObject(sum, "lr", lr);
    cJSON_AddNumberToObject(sum, "warmup_steps", (double)warm);
    cJSON_AddNumberToObject(sum, "clip", clip);
    cJSON_AddNumberToObject(sum, "diagnosis_step", t->at);
    cJSON_AddStringToObject(sum, "findings", t->head);
    return sum;
}

Status study_spike(const SpikeOptions *o, Comm *comm, const TrainFlagsParser *tp, StudyOutcome *res, Err *err) {
    memset(res, 0, sizeof *res);
    SpikeRun *run = calloc(2, sizeof *run);
    double *ratios = calloc((size_t)2 * (SP_MAXSTEPS + 1) * SP_MAXG, sizeof *ratios);
    if (!run || !ratios) return free(run), free(ratios), err_set(err, ST_ERR_RUNTIME, "out of memory");
    for (size_t i = 0; i < (size_t)2 * (SP_MAXSTEPS + 1) * SP_MAXG; i++) ratios[i] = NAN;
    run[0].name = "unstable", run[1].name = "stable";
    run[0].ratio = ratios, run[1].ratio = ratios + (size_t)(SP_MAXSTEPS + 1) * SP_MAXG;
    long steps = o->steps, warm = (long)llround(o->warmup_frac * (double)steps);
    double lr = o->lr, clip = o->clip;
    Status st = ST_OK;
    for (int k = 0; k < 2 && st == ST_OK; k++) {
        char v[10][32];
        snprintf(v[0], 32, "%d", o->layers), snprintf(v[1], 32, "%d", o->heads), snprintf(v[2], 32, "%d", o->channels);
        snprintf(v[3], 32, "%d", o->T), snprintf(v[4], 32, "%d", o->B), snprintf(v[5], 32, "%ld", steps);
        snprintf(v[6], 32, "%d", o->threads), snprintf(v[7], 32, "%.7g", lr), snprintf(v[8], 32, "%.7g", lr / 10);
        snprintf(v[9], 32, "%ld", steps / 10 > 0 ? steps / 10 : 1);
        char wbuf[32], cbuf[32];
        snprintf(wbuf, sizeof wbuf, "%ld", k ? warm : 0L);
        snprintf(cbuf, sizeof cbuf, "%.7g", k ? clip : 0.0);
        char *flags[] = {"--layers", v[0], "--heads", v[1], "--channels", v[2], "--max-seq-len", v[3], "--seq-len", v[3],
                         "--micro-batch", v[4], "--steps", v[5], "--threads", v[6], "--peak-gflops", "100", "--lr", v[7],
                         "--min-lr", v[8], "--warmup", wbuf, "--grad-clip", cbuf, "--val-every", v[9], "--val-batches", "8",
                         "--log-layer-stats", "--spike-window", "16", "--spike-min-history", "3", "--spike-abs", "1", "--quiet"};
        st = spike_train(o->out, &run[k], flags, (int)(sizeof flags / sizeof flags[0]), comm, tp, err);
    }
    if (st != ST_OK || (comm && comm->rank != 0)) {
        free(run), free(ratios);
        return st;
    }
    SpikeText *t = calloc(1, sizeof *t);
    if (!t) return free(run), free(ratios), err_set(err, ST_ERR_RUNTIME, "out of memory");
    spike_findings(run, lr, warm, clip, t);
    FigPage *page = spike_page(run, t);
    cJSON *sum = spike_summary(run, t, lr, warm, clip);
    st = study_write_page(o->out, page, sum, err);
    fig_page_free(page);
    cJSON_Delete(sum);
    const char *lines[4] = {t->head, t->unstable, t->stable, t->diagnosis};
    res->findings = study_lines(lines, 4);
    free(t);
    free(run), free(ratios);
    return st;
}
