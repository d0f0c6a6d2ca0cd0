/* lr_transfer.c — the lr-transfer study (studies.h; docs/studies.md): learning-rate sweeps at
 * several widths under the standard parameterization and under muP (two sweeps: DIR/sp/, DIR/mup/;
 * re-running skips finished runs), the best lr per width per parameterization and how far it moves
 * with width. Moved from cli/cmd_study.c (issue 24); the command's flags stay there. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/fileio.h"
#include "report/figures.h"
#include "study/studies.h"

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
                       int vb, Comm *comm, const TrainFlagsParser *tp, int *interrupted, Err *err) {
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
    Status st = study_sweep_run(sub, spec, comm, tp, &s, interrupted, err);
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

/* The paragraph on one parameterization, and its shift in steps of the --lrs grid (the index of
 * the best lr at the widest width less that at the narrowest; until 2026-11-29 log2 of their ratio,
 * which counted one step of a factor-4 grid as two and called it "does not transfer"). */
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
        shift = (double)(b1 - b0);
        double steps = fabs(shift);
        k += (size_t)snprintf(buf + k, cap - k,
                              ": from width %.0f to width %.0f it moves by %+.0f step%s of the learning-rate grid (x%.3g)%s",
                              g->widths[0], g->widths[g->nw - 1], shift, steps == 1 ? "" : "s", g->lrs[b1] / g->lrs[b0],
                              steps <= 1 ? ", within one grid step: the learning rate transfers" :
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
    double shift[2];     /* grid steps from the best lr at the narrowest width to that at the widest; NaN if unmeasured */
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
        snprintf(t->head, sizeof t->head, "Headline: from width %.0f to width %.0f the best learning rate moves by %+.0f grid steps "
                 "under muP (%s) and by %+.0f grid steps under SP.", g->widths[0], g->widths[g->nw - 1], t->shift[1],
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
        int b0 = g->best[p][0], b1 = g->best[p][g->nw - 1];
        if (isfinite(t->shift[p])) {
            cJSON_AddNumberToObject(o, "shift_grid_steps", t->shift[p]);
            cJSON_AddNumberToObject(o, "shift_factor", g->lrs[b1] / g->lrs[b0]);
        } else {
            cJSON_AddNullToObject(o, "shift_grid_steps");
            cJSON_AddNullToObject(o, "shift_factor");
        }
    }
    cJSON_AddBoolToObject(sum, "mup_transfer_within_one_step", t->ok_mup);
    cJSON_AddStringToObject(sum, "findings", t->head);
    return sum;
}

Status study_lr_transfer(const LrTransferOptions *o, Comm *comm, const TrainFlagsParser *tp, StudyOutcome *res, Err *err) {
    memset(res, 0, sizeof *res);
    LrGrid *g = calloc(1, sizeof *g);
    if (!g) return err_set(err, ST_ERR_RUNTIME, "out of memory");
    g->nw = o->nw, g->nlr = o->nlr;
    memcpy(g->widths, o->widths, sizeof g->widths);
    memcpy(g->lrs, o->lrs, sizeof g->lrs);
    int root = !comm || comm->rank == 0;
    Status st = ST_OK;
    for (int p = 0; p < 2; p++) {
        int intr = 0;
        if (root) printf("study lr-transfer: %s sweep (%d widths x %d learning rates, %ld steps each)\n", PARAM[p], g->nw,
                         g->nlr, o->steps);
        st = lr_sweep(o->out, p, g, o->layers, o->T, o->B, o->steps, o->threads, o->vb, comm, tp, &intr, err);
        if (st != ST_OK || intr) {
            free(g);
            res->interrupted = intr;
            return st;
        }
        lr_read(o->out, p, g);
        for (int w = 0; w < g->nw; w++) g->best[p][w] = lr_best(g, p, w);
    }
    if (!root) {
        free(g);
        return ST_OK;
    }
    LrText *t = calloc(1, sizeof *t);
    if (!t) return free(g), err_set(err, ST_ERR_RUNTIME, "out of memory");
    lr_findings(g, o->layers, o->steps, o->B, o->T, t);
    FigPage *page = lr_page(g, t);
    cJSON *sum = lr_summary(g, t, o->steps, o->layers);
    st = study_write_page(o->out, page, sum, err);
    fig_page_free(page);
    cJSON_Delete(sum);
    const char *lines[3] = {t->head, t->para[1], t->para[0]};
    res->findings = study_lines(lines, 3);
    free(t);
    free(g);
    return st;
}
