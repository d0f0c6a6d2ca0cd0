/* cmd_study.c — `scaletrain study lr-transfer | spike`: training-dynamics studies, each one command
 * that trains through the library (train_run, via the sweep engine or study_train), then
 * writes DIR/index.html (figures.h: charts inline) with a paragraph of findings generated from the
 * measured numbers, and DIR/summary.json with the same numbers. docs/studies.md.
 *
 *   lr-transfer   learning-rate sweeps at several widths under the standard parameterization and
 *                 under muP (two sweeps: DIR/sp/, DIR/mup/; re-running skips finished runs), the
 *                 best lr per width per parameterization and how far it moves with width.
 *   spike         a run with too high a learning rate and no warmup or clipping, and the same run
 *                 with warmup and clipping; the spike detector's events, and the diagnosis around
 *                 the first one (lr, gradient norm, update/weight ratio per layer from
 *                 --log-layer-stats).
 * --quick shrinks either to a tiny model and a few steps (for tests). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli/args.h"
#include "cli/cmds.h"
#include "cli/sweep.h"
#include "cli/study_common.h"
#include "core/fileio.h"
#include "report/figures.h"

#define MAXV STUDY_MAXV

/* ================================================================ lr-transfer */

typedef struct {
    int nw, nlr;
    double widths[MAXV], lrs[MAXV];
    double loss[2][MAXV][MAXV]; /* [param][width][lr]: final validation loss, NaN if diverged or missing */
    int best[2][MAXV];          /* index of the best lr, -1 if none */
} LrGrid;

static const char *const PARAM[2] = {"sp", "mup"};
static const char *const PARAM_NAME[2] = {"the standard parameterization (SP)", "muP"};

/* One parameterization's sweep: the spec written to DIR/<param>/spec.json and run. */
static Status lr_sweep(const char *dir, int param, const LrGrid *g, int layers, int T, int B, long steps, int threads,
                       int vb, Comm *comm, int *interrupted, Err *err) {
    cJSON *base, *grid, *models, *vary, *lrs;
    char name[64], sub[1100];
    snprintf(name, sizeof name, "lr-transfer-%s", PARAM[param]);
    cJSON *spec = study_spec_new(name, T, B, threads, vb, &base);
    if (!spec) return err_set(err, ST_ERR_RUNTIME, "out of memory");
    if (param == 1) {
        cJSON_AddStringToObject(base, "param", "mup");
        cJSON_AddNumberToObject(base, "mup_base_width", g->widths[0]);
    }
    grid = cJSON_AddObjectToObject(spec, "grid");
    cJSON_AddStringToObject(grid, "kind", "sizes_tokens");
    models = cJSON_AddArrayToObject(grid, "models");
    for (int w = 0; w < g->nw; w++) {
        cJSON *m = cJSON_CreateObject();
        char mn[32];
        snprintf(mn, sizeof mn, "w%.0f", g->widths[w]);
        cJSON_AddStringToObject(m, "name", mn);
        cJSON_AddNumberToObject(m, "layers", layers);
        cJSON_AddNumberToObject(m, "channels", g->widths[w]);
        int heads = (int)g->widths[w] / 32; /* head dimension 32 at every width */
        cJSON_AddNumberToObject(m, "heads", heads < 1 ? 1 : heads);
        cJSON_AddItemToArray(models, m);
    }
    double tok = (double)steps * B * T;
    cJSON_AddItemToObject(grid, "tokens", cJSON_CreateDoubleArray(&tok, 1));
    cJSON *sch = cJSON_AddObjectToObject(spec, "schedule");
    cJSON_AddNumberToObject(sch, "warmup_frac", 0.1);
    cJSON_AddNumberToObject(sch, "min_lr_frac", 0.1);
    vary = cJSON_AddObjectToObject(spec, "vary");
    lrs = cJSON_AddArrayToObject(vary, "lr");
    for (int i = 0; i < g->nlr; i++) cJSON_AddItemToArray(lrs, cJSON_CreateNumber(g->lrs[i]));
    snprintf(sub, sizeof sub, "%s/%s", dir, PARAM[param]);
    Sweep s;
    Status st = study_sweep_run(sub, spec, comm, &s, interrupted, err);
    cJSON_Delete(spec);
    if (st == ST_OK) sweep_free(&s);
    return st;
}

/* The final losses from DIR/<param>/results.jsonl into g. */
static void lr_read(const char *dir, int param, LrGrid *g) {
    for (int w = 0; w < g->nw; w++)
        for (int i = 0; i < g->nlr; i++) g->loss[param][w][i] = NAN;
    char path[1200], *text = NULL;
    size_t len;
    Err e;
    snprintf(path, sizeof path, "%s/%s/results.jsonl", dir, PARAM[param]);
    if (file_read_all(path, &text, &len, &e) != ST_OK) return;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        cJSON *o = cJSON_Parse(line);
        const cJSON *c = cJSON_GetObjectItem(o, "channels"), *lr = cJSON_GetObjectItem(o, "lr"), *l = cJSON_GetObjectItem(o, "loss");
        for (int w = 0; c && lr && w < g->nw; w++)
            for (int i = 0; i < g->nlr; i++)
                if (c->valuedouble == g->widths[w] && fabs(lr->valuedouble / g->lrs[i] - 1) < 1e-6 && cJSON_IsNumber(l))
                    g->loss[param][w][i] = l->valuedouble;
        cJSON_Delete(o);
    }
    free(text);
}

static int lr_best(const LrGrid *g, int p, int w) {
    int b = -1;
    for (int i = 0; i < g->nlr; i++)
        if (isfinite(g->loss[p][w][i]) && (b < 0 || g->loss[p][w][i] < g->loss[p][w][b])) b = i;
    return b;
}

/* The paragraph on one parameterization, and its shift in grid steps (log2 of the lr ratio). */
static double lr_paragraph(const LrGrid *g, int p, char *buf, size_t cap) {
    size_t k = (size_t)snprintf(buf, cap, "Under %s the best learning rate is", PARAM_NAME[p]);
    for (int w = 0; w < g->nw; w++) {
        char l[32];
        int b = g->best[p][w];
        if (b >= 0) study_lr_str(g->lrs[b], l, sizeof l);
        else snprintf(l, sizeof l, "none (every run diverged)");
        k += (size_t)snprintf(buf + k, cap - k, "%s %s at width %.0f (loss %.4f)", w == 0 ? "" : w == g->nw - 1 ? " and" : ",",
                              l, g->widths[w], b >= 0 ? g->loss[p][w][b] : NAN);
    }
    int b0 = g->best[p][0], b1 = g->best[p][g->nw - 1];
    double shift = NAN;
    if (b0 >= 0 && b1 >= 0) {
        shift = log2(g->lrs[b1] / g->lrs[b0]);
        double steps = fabs(shift); /* grid steps of a factor-2 grid */
        k += (size_t)snprintf(buf + k, cap - k,
                              ": from width %.0f to width %.0f it moves by %+.3g grid step%s of a factor 2 (x%.3g)%s", g->widths[0],
                              g->widths[g->nw - 1], shift, fabs(steps - 1) < 1e-9 ? "" : "s", pow(2.0, shift),
                              steps <= 1 + 1e-9 ? ", within one grid step: the learning rate transfers" :
                                                   ", more than one grid step: it does not transfer");
        int edge = b0 == 0 || b0 == g->nlr - 1 || b1 == 0 || b1 == g->nlr - 1;
        if (edge) k += (size_t)snprintf(buf + k, cap - k, " (a best value lies at the edge of the grid, so the true optimum may lie beyond it)");
    } else {
        k += (size_t)snprintf(buf + k, cap - k, ": no shift can be measured (a width has no finished run)");
    }
    snprintf(buf + k, cap - k, ".");
    return shift;
}

/* The findings of the lr-transfer study as text, and the shifts they state. */
typedef struct {
    char para[2][2048];  /* per parameterization (PARAM order) */
    char intro[1024], head[1024];
    double shift[2];     /* log2(best lr at the widest / at the narrowest width); NaN if unmeasured */
    int ok_mup;          /* muP's shift is within one grid step */
} LrText;

/* The findings of the lr-transfer study from the grid's losses: per parameterization a paragraph and
 * the shift of the best lr from the narrowest to the widest width, the setup, the headline. */
static void lr_findings(const LrGrid *g, int layers, long steps, int B, int T, LrText *t) {
    for (int p = 0; p < 2; p++) t->shift[p] = lr_paragraph(g, p, t->para[p], sizeof t->para[p]);
    char l0[32], l1[32];
    study_lr_str(g->lrs[0], l0, sizeof l0), study_lr_str(g->lrs[g->nlr - 1], l1, sizeof l1);
    snprintf(t->intro, sizeof t->intro,
             "Each point is one run: a %d-layer GPT-2 (head dimension 32) trained for %ld steps of %d x %d tokens on the "
             "bundled Tiny Shakespeare (bytes), AdamW with a cosine schedule to the run's end (10%% warmup, min lr 10%%), "
             "gradient clipping 1.0; its final validation loss. Learning rates %s to %s; muP's base width is %.0f, where "
             "its learning rate and init equal SP's (attention still scales by 1/head_dim instead of 1/sqrt(head_dim)).",
             layers, steps, B, T, l0, l1, g->widths[0]);
    t->ok_mup = isfinite(t->shift[1]) && fabs(t->shift[1]) <= 1 + 1e-9;
    if (isfinite(t->shift[0]) && isfinite(t->shift[1]))
        snprintf(t->head, sizeof t->head, "Headline: from width %.0f to width %.0f the best learning rate moves by %+.3g grid steps "
                 "under muP (%s) and by %+.3g grid steps under SP.", g->widths[0], g->widths[g->nw - 1], t->shift[1],
                 t->ok_mup ? "within one grid step: transfer holds" : "more than one grid step: transfer fails", t->shift[0]);
    else snprintf(t->head, sizeof t->head, "Headline: the shift could not be measured (a width has no finished run).");
}

/* The lr-transfer page: findings, the best-lr table, both parameterizations on the same axes and
 * each alone. */
static FigPage *lr_page(const LrGrid *g, const LrText *t) {
    FigPage *page = fig_page_new("Learning-rate transfer: SP vs muP", "scaletrain study lr-transfer");
    fig_heading(page, "h-findings", "Findings");
    fig_paragraph(page, "findings", t->head);
    fig_paragraph(page, "findings-mup", t->para[1]);
    fig_paragraph(page, "findings-sp", t->para[0]);
    fig_paragraph(page, "setup", t->intro);
    /* Table: best lr per width per parameterization. */
    const char *hdr[4] = {"parameterization", "width", "best lr", "best loss"};
    char cells[2 * MAXV][4][48];
    const char *cp[2 * MAXV * 4];
    int rows = 0;
    for (int p = 1; p >= 0; p--)
        for (int w = 0; w < g->nw; w++, rows++) {
            int b = g->best[p][w];
            snprintf(cells[rows][0], 48, "%s", PARAM[p]);
            snprintf(cells[rows][1], 48, "%.0f", g->widths[w]);
            if (b >= 0) study_lr_str(g->lrs[b], cells[rows][2], 48);
            else snprintf(cells[rows][2], 48, "-");
            snprintf(cells[rows][3], 48, b >= 0 ? "%.4f" : "-", b >= 0 ? g->loss[p][w][b] : 0.0);
            for (int c = 0; c < 4; c++) cp[rows * 4 + c] = cells[rows][c];
        }
    fig_table(page, "best-lr", hdr, 4, cp, rows);
    /* Charts: both parameterizations on the same axes, then each alone. */
    FigChart *all = fig_chart(page, "chart-lr-transfer", "Final validation loss vs learning rate, SP and muP",
                              "One line per width and parameterization, on the same axes; missing points diverged.",
                              "learning rate", "validation loss", 1, 0);
    FigChart *one[2];
    one[1] = fig_chart(page, "chart-mup", "muP", "Best learning rate marked by the lowest point of each line.",
                       "learning rate", "validation loss", 1, 0);
    one[0] = fig_chart(page, "chart-sp", "Standard parameterization", NULL, "learning rate", "validation loss", 1, 0);
    for (int p = 1; p >= 0; p--)
        for (int w = 0; w < g->nw; w++) {
            char label[64];
            snprintf(label, sizeof label, "%s width %.0f", PARAM[p], g->widths[w]);
            fig_series(all, label, g->lrs, g->loss[p][w], (size_t)g->nlr, 0);
            snprintf(label, sizeof label, "width %.0f", g->widths[w]);
            fig_series(one[p], label, g->lrs, g->loss[p][w], (size_t)g->nlr, 0);
        }
    return page;
}

/* summary.json of the lr-transfer study: the grid, every loss, the best lr per width, the shifts. */
static cJSON *lr_summary(const LrGrid *g, const LrText *t, long steps, int layers) {
    /* summary.json: the same numbers. */
    cJSON *sum = cJSON_CreateObject();
    cJSON_AddItemToObject(sum, "widths", cJSON_CreateDoubleArray(g->widths, g->nw));
    cJSON_AddItemToObject(sum, "lrs", cJSON_CreateDoubleArray(g->lrs, g->nlr));
    cJSON_AddNumberToObject(sum, "steps", (double)steps);
    cJSON_AddNumberToObject(sum, "layers", layers);
    for (int p = 0; p < 2; p++) {
        cJSON *o = cJSON_AddObjectToObject(sum, PARAM[p]);
        cJSON *best = cJSON_AddArrayToObject(o, "best_lr"), *loss = cJSON_AddArrayToObject(o, "loss");
        for (int w = 0; w < g->nw; w++) {
            int b = g->best[p][w];
            cJSON_AddItemToArray(best, b >= 0 ? cJSON_CreateNumber(g->lrs[b]) : cJSON_CreateNull());
            cJSON *row = cJSON_CreateArray();
            for (int i = 0; i < g->nlr; i++)
                cJSON_AddItemToArray(row, isfinite(g->loss[p][w][i]) ? cJSON_CreateNumber(g->loss[p][w][i]) : cJSON_CreateNull());
            cJSON_AddItemToArray(loss, row);
        }
        if (isfinite(t->shift[p])) cJSON_AddNumberToObject(o, "shift_grid_steps", t->shift[p]);
        else cJSON_AddNullToObject(o, "shift_grid_steps");
    }
    cJSON_AddBoolToObject(sum, "mup_transfer_within_one_step", t->ok_mup);
    cJSON_AddStringToObject(sum, "findings", t->head);
    return sum;
}

static int cmd_lr_transfer(int argc, char **argv, Comm *comm) {
    char out[1024] = "study-lr-transfer", widths[256] = "128,256,512", lrs[512] = "2^-12,2^-11,2^-10,2^-9,2^-8,2^-7";
    long steps = 150;
    int layers = 2, T = 64, B = 8, threads = 1, quick = 0, vb = 16;
    ArgSpec specs[] = {
        {"out", ARG_STR, out, sizeof out, "output directory: sp/, mup/ (two sweeps), index.html, summary.json"},
        {"widths", ARG_STR, widths, sizeof widths, "model widths C (the first is muP's base width; head dimension 32)"},
        {"lrs", ARG_STR, lrs, sizeof lrs, "learning rates (numbers or 2^k), the same at every width"},
        {"steps", ARG_LONG, &steps, 0, "optimizer steps per run (cosine to the end, 10% warmup, min lr 10%)"},
        {"layers", ARG_INT, &layers, 0, "transformer blocks"},
        {"seq-len", ARG_INT, &T, 0, "tokens per sequence"},
        {"micro-batch", ARG_INT, &B, 0, "sequences per step"},
        {"val-batches", ARG_INT, &vb, 0, "validation micro-batches for each run's final loss"},
        {"threads", ARG_INT, &threads, 0, "threads per run"},
        {"quick", ARG_FLAG, &quick, 0, "tiny: widths 32,64, lrs 2^-8,2^-6,2^-4, 1 layer, 8 steps (tests)"},
    };
    int n = (int)(sizeof specs / sizeof specs[0]), npos = 0, help = 0;
    Err err = {0};
    Status st = args_parse(specs, n, argc, argv, NULL, 0, &npos, &help, &err);
    if (st != ST_OK) return cli_fail("study lr-transfer", st, err.msg);
    if (help) {
        printf("usage: scaletrain study lr-transfer [options]\n\nLearning-rate sweeps at several widths, standard "
               "parameterization and muP, on the bundled corpus (docs/studies.md).\n\n");
        args_print_help(specs, n);
        return 0;
    }
    if (quick) {
        snprintf(widths, sizeof widths, "32,64");
        snprintf(lrs, sizeof lrs, "2^-8,2^-6,2^-4");
        layers = 1, steps = 8, T = 32, B = 4, vb = 2;
    }
    LrGrid *g = calloc(1, sizeof *g);
    if (!g) return cli_fail("study lr-transfer", ST_ERR_RUNTIME, "out of memory");
    if ((st = study_parse_list("widths", widths, g->widths, &g->nw, &err)) != ST_OK ||
        (st = study_parse_list("lrs", lrs, g->lrs, &g->nlr, &err)) != ST_OK) {
        free(g);
        return cli_fail("study lr-transfer", st, err.msg);
    }
    if (g->nw < 2 || steps < 1) {
        free(g);
        return cli_fail("study lr-transfer", ST_ERR_INPUT, "--widths / --steps: expected at least two widths and >= 1 step");
    }
    int root = !comm || comm->rank == 0;
    for (int p = 0; p < 2; p++) {
        int intr = 0;
        if (root) printf("study lr-transfer: %s sweep (%d widths x %d learning rates, %ld steps each)\n", PARAM[p], g->nw,
                         g->nlr, steps);
        st = lr_sweep(out, p, g, layers, T, B, steps, threads, vb, comm, &intr, &err);
        if (st != ST_OK || intr) {
            free(g);
            if (st != ST_OK) return cli_fail("study lr-transfer", st, err.msg);
            if (root) printf("study lr-transfer: interrupted; run the same command again to resume\n");
            return 0;
        }
        lr_read(out, p, g);
        for (int w = 0; w < g->nw; w++) g->best[p][w] = lr_best(g, p, w);
    }
    if (!root) {
        free(g);
        return 0;
    }
    LrText *t = calloc(1, sizeof *t);
    if (!t) return free(g), cli_fail("study lr-transfer", ST_ERR_RUNTIME, "out of memory");
    lr_findings(g, layers, steps, B, T, t);
    FigPage *page = lr_page(g, t);
    cJSON *sum = lr_summary(g, t, steps, layers);
    st = study_write_page(out, page, sum, &err);
    fig_page_free(page);
    cJSON_Delete(sum);
    printf("%s\n%s\n%s\n", t->head, t->para[1], t->para[0]);
    free(t);
    if (st == ST_OK) printf("study lr-transfer: wrote %s/index.html and %s/summary.json\n", out, out);
    free(g);
    return st == ST_OK ? 0 : cli_fail("study lr-transfer", st, err.msg);
}

/* ================================================================ spike */

#define SP_MAXSTEPS 4096
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

static void spike_read(SpikeRun *r, const char *path) {
    char *text = NULL;
    size_t len;
    Err e;
    r->n = 0, r->nval = 0, r->nspikes = 0, r->ngroups = 0;
    if (file_read_all(path, &text, &len, &e) != ST_OK) return;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        cJSON *o = cJSON_Parse(line);
        const cJSON *ev = cJSON_GetObjectItem(o, "event");
        if (!cJSON_IsString(ev)) {
            cJSON_Delete(o);
            continue;
        }
        int step = (int)study_jnum(o, "step");
        if (!strcmp(ev->valuestring, "step") && step >= 1 && step <= SP_MAXSTEPS) {
            r->loss[step] = study_jnum(o, "loss"), r->lr[step] = study_jnum(o, "lr"), r->gnorm[step] = study_jnum(o, "grad_norm");
            if (step > r->n) r->n = step;
            const cJSON *ls = cJSON_GetObjectItem(o, "layer_stats"), *gr = cJSON_GetObjectItem(ls, "groups");
            const cJSON *ra = cJSON_GetObjectItem(ls, "update_ratio");
            int k = 0;
            for (const cJSON *g = gr ? gr->child : NULL; g && k < SP_MAXG; g = g->next, k++)
                snprintf(r->group[k], sizeof r->group[k], "%s", g->valuestring);
            if (k > r->ngroups) r->ngroups = k;
            k = 0;
            for (const cJSON *v = ra ? ra->child : NULL; v && k < SP_MAXG; v = v->next, k++)
                r->ratio[(size_t)step * SP_MAXG + k] = cJSON_IsNumber(v) ? v->valuedouble : NAN;
        } else if (!strcmp(ev->valuestring, "val") && r->nval < SP_MAXSTEPS) {
            r->val_step[r->nval] = step, r->val_loss[r->nval++] = study_jnum(o, "loss");
        } else if (!strcmp(ev->valuestring, "spike") && r->nspikes < SP_MAXSPIKES) {
            int q = r->nspikes++;
            const cJSON *m = cJSON_GetObjectItem(o, "metric"), *a = cJSON_GetObjectItem(o, "action");
            r->sp_step[q] = step, r->sp_value[q] = study_jnum(o, "value"), r->sp_median[q] = study_jnum(o, "median"), r->sp_z[q] = study_jnum(o, "z");
            snprintf(r->sp_metric[q], sizeof r->sp_metric[q], "%s", cJSON_IsString(m) ? m->valuestring : "?");
            snprintf(r->sp_action[q], sizeof r->sp_action[q], "%s", cJSON_IsString(a) ? a->valuestring : "?");
        }
        cJSON_Delete(o);
    }
    free(text);
}

/* Trains one run of the spike study through the library: train's own flags, logged to
 * DIR/runs/<name>/log.jsonl. A run that ends in an error after training (divergence past
 * --max-nonfinite) is a result: its message is kept in r->failure. */
static Status spike_train(const char *dir, SpikeRun *r, char **flags, int nflags, Comm *comm, Err *err) {
    char rdir[1200], log[1300];
    snprintf(rdir, sizeof rdir, "%s/runs/%s", dir, r->name);
    snprintf(log, sizeof log, "%s/log.jsonl", rdir);
    Status st = file_mkdirs(rdir, err);
    if (st != ST_OK) return st;
    st = study_train("study spike", r->name, flags, nflags, log, comm, r->failure, sizeof r->failure, err);
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
    double g_med = study_median(before, nb);
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

static int cmd_study_spike(int argc, char **argv, Comm *comm) {
    char out[1024] = "study-spike";
    long steps = 150;
    double lr = 0.03, warmup_frac = 0.25, clip = 1.0;
    int layers = 4, channels = 256, heads = 4, T = 64, B = 8, threads = 1, quick = 0;
    ArgSpec specs[] = {
        {"out", ARG_STR, out, sizeof out, "output directory: runs/unstable, runs/stable, index.html, summary.json"},
        {"lr", ARG_DOUBLE, &lr, 0, "the (too high) peak learning rate of both runs"},
        {"steps", ARG_LONG, &steps, 0, "optimizer steps of each run (cosine to the end, min lr 10%)"},
        {"warmup-frac", ARG_DOUBLE, &warmup_frac, 0, "the stable run's warmup as a fraction of its steps"},
        {"clip", ARG_DOUBLE, &clip, 0, "the stable run's gradient clipping (global L2 norm)"},
        {"layers", ARG_INT, &layers, 0, "transformer blocks"},
        {"channels", ARG_INT, &channels, 0, "model width"},
        {"heads", ARG_INT, &heads, 0, "attention heads"},
        {"seq-len", ARG_INT, &T, 0, "tokens per sequence"},
        {"micro-batch", ARG_INT, &B, 0, "sequences per step"},
        {"threads", ARG_INT, &threads, 0, "threads per run"},
        {"quick", ARG_FLAG, &quick, 0, "tiny: 2 layers of 64, lr 0.3, 30 steps (tests)"},
    };
    int n = (int)(sizeof specs / sizeof specs[0]), npos = 0, help = 0;
    Err err = {0};
    Status st = args_parse(specs, n, argc, argv, NULL, 0, &npos, &help, &err);
    if (st != ST_OK) return cli_fail("study spike", st, err.msg);
    if (help) {
        printf("usage: scaletrain study spike [options]\n\nA run with too high a learning rate and no warmup or clipping, "
               "and the same run with both, on the bundled corpus (docs/studies.md).\n\n");
        args_print_help(specs, n);
        return 0;
    }
    if (quick) layers = 2, channels = 64, heads = 2, T = 32, B = 4, steps = 30, lr = 0.3;
    if (steps < 8 || steps > SP_MAXSTEPS || !(lr > 0) || warmup_frac < 0 || warmup_frac >= 1 || !(clip > 0))
        return cli_fail("study spike", ST_ERR_INPUT, "--steps / --lr / --warmup-frac / --clip: expected 8..4096 steps, "
                        "lr > 0, a fraction in [0, 1) and clip > 0");
    SpikeRun *run = calloc(2, sizeof *run);
    double *ratios = calloc((size_t)2 * (SP_MAXSTEPS + 1) * SP_MAXG, sizeof *ratios);
    if (!run || !ratios) return free(run), free(ratios), cli_fail("study spike", ST_ERR_RUNTIME, "out of memory");
    for (size_t i = 0; i < (size_t)2 * (SP_MAXSTEPS + 1) * SP_MAXG; i++) ratios[i] = NAN;
    run[0].name = "unstable", run[1].name = "stable";
    run[0].ratio = ratios, run[1].ratio = ratios + (size_t)(SP_MAXSTEPS + 1) * SP_MAXG;
    long warm = (long)llround(warmup_frac * (double)steps);
    for (int k = 0; k < 2 && st == ST_OK; k++) {
        char v[10][32];
        snprintf(v[0], 32, "%d", layers), snprintf(v[1], 32, "%d", heads), snprintf(v[2], 32, "%d", channels);
        snprintf(v[3], 32, "%d", T), snprintf(v[4], 32, "%d", B), snprintf(v[5], 32, "%ld", steps);
        snprintf(v[6], 32, "%d", threads), snprintf(v[7], 32, "%.7g", lr), snprintf(v[8], 32, "%.7g", lr / 10);
        snprintf(v[9], 32, "%ld", steps / 10 > 0 ? steps / 10 : 1);
        char wbuf[32], cbuf[32];
        snprintf(wbuf, sizeof wbuf, "%ld", k ? warm : 0L);
        snprintf(cbuf, sizeof cbuf, "%.7g", k ? clip : 0.0);
        char *flags[] = {"--layers", v[0], "--heads", v[1], "--channels", v[2], "--max-seq-len", v[3], "--seq-len", v[3],
                         "--micro-batch", v[4], "--steps", v[5], "--threads", v[6], "--peak-gflops", "100", "--lr", v[7],
                         "--min-lr", v[8], "--warmup", wbuf, "--grad-clip", cbuf, "--val-every", v[9], "--val-batches", "8",
                         "--log-layer-stats", "--spike-window", "16", "--spike-min-history", "3", "--spike-abs", "1", "--quiet"};
        st = spike_train(out, &run[k], flags, (int)(sizeof flags / sizeof flags[0]), comm, &err);
    }
    if (st != ST_OK || (comm && comm->rank != 0)) {
        free(run), free(ratios);
        return st == ST_OK ? 0 : cli_fail("study spike", st, err.msg);
    }
    SpikeText *t = calloc(1, sizeof *t);
    if (!t) return free(run), free(ratios), cli_fail("study spike", ST_ERR_RUNTIME, "out of memory");
    spike_findings(run, lr, warm, clip, t);
    FigPage *page = spike_page(run, t);
    cJSON *sum = spike_summary(run, t, lr, warm, clip);
    st = study_write_page(out, page, sum, &err);
    fig_page_free(page);
    cJSON_Delete(sum);
    printf("%s\n%s\n%s\n%s\n", t->head, t->unstable, t->stable, t->diagnosis);
    free(t);
    if (st == ST_OK) printf("study spike: wrote %s/index.html and %s/summary.json\n", out, out);
    free(run), free(ratios);
    return st == ST_OK ? 0 : cli_fail("study spike", st, err.msg);
}

int cmd_study(int argc, char **argv, Comm *comm) {
    if (argc < 1 || !strcmp(argv[0], "--help") || !strcmp(argv[0], "-h")) {
        printf("usage: scaletrain study spike|lr-transfer|optimizers [options]   (study NAME --help for its options)\n\n"
               "  spike        a run with too high a learning rate and no warmup or clipping, and the same run with both:\n"
               "               spike events and the per-layer diagnosis (index.html)\n"
               "  lr-transfer  learning-rate sweeps at several widths under SP and muP: how far the best lr moves\n"
               "  optimizers   each optimizer at its own best lr on one token budget: tokens and seconds to AdamW's final loss\n");
        return argc < 1 ? 2 : 0;
    }
    if (!strcmp(argv[0], "lr-transfer")) return cmd_lr_transfer(argc - 1, argv + 1, comm);
    if (!strcmp(argv[0], "spike")) return cmd_study_spike(argc - 1, argv + 1, comm);
    if (!strcmp(argv[0], "optimizers")) return cmd_study_optimizers(argc - 1, argv + 1, comm);
    char msg[256];
    snprintf(msg, sizeof msg, "expected a study (spike, lr-transfer or optimizers), found '%s'", argv[0]);
    return cli_fail("study", ST_ERR_INPUT, msg);
}
