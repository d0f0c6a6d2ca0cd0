/* study_common.c — the helpers the study commands share (study_common.h). */
#include "study/study_common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "core/fileio.h"
#include "report/report.h"
#include "study/studies.h"
#include "train/train.h"

Status study_parse_list(const char *flag, const char *s, double *v, int *n, Err *err) {
    *n = 0;
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        char *end = NULL;
        double x;
        if (!strncmp(t, "2^", 2)) x = pow(2.0, strtod(t + 2, &end));
        else x = strtod(t, &end);
        if (!end || *end || end == t || (end == t + 2 && t[0] == '2' && t[1] == '^') || !(x > 0) || !isfinite(x) || *n >= STUDY_MAXV)
            return err_set(err, ST_ERR_INPUT, "--%s: expected up to %d positive numbers (or 2^k) separated by commas, "
                           "found '%s'", flag, STUDY_MAXV, s);
        v[(*n)++] = x;
    }
    if (*n == 0) return err_set(err, ST_ERR_INPUT, "--%s: expected a list of numbers, found nothing", flag);
    return ST_OK;
}

Status study_check_out(const char *out, Err *err) {
    if (!out[0]) return err_set(err, ST_ERR_INPUT, "--out: expected a folder, found ''");
    struct stat sb;
    if (stat(out, &sb) == 0 && !S_ISDIR(sb.st_mode))
        return err_set(err, ST_ERR_INPUT, "--out %s: expected a folder (or a path to create one at), found a file", out);
    return ST_OK;
}

void study_lr_str(double lr, char *buf, size_t cap) {
    double e = log2(lr);
    if (fabs(e - round(e)) < 1e-6) snprintf(buf, cap, "2^%d", (int)round(e));
    else snprintf(buf, cap, "%.3g", lr);
}

Status study_write_text(const char *path, const char *text, size_t len, Err *err) {
    const void *b[1] = {text};
    size_t l[1] = {len};
    return file_write_atomic(path, b, l, 1, err);
}

Status study_write_page(const char *dir, const FigPage *page, const cJSON *summary, Err *err) {
    char *html = NULL, path[1200];
    size_t len = 0;
    Status st = fig_render(page, &html, &len, err);
    if (st == ST_OK) {
        snprintf(path, sizeof path, "%s/index.html", dir);
        st = study_write_text(path, html, len, err);
    }
    free(html);
    char *js = st == ST_OK ? cJSON_Print(summary) : NULL;
    if (st == ST_OK && !js) st = err_set(err, ST_ERR_RUNTIME, "out of memory");
    if (st == ST_OK) {
        snprintf(path, sizeof path, "%s/summary.json", dir);
        st = study_write_text(path, js, strlen(js), err);
    }
    free(js);
    return st;
}

double study_jnum(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItem(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

cJSON *study_spec_new(const char *name, int T, int B, int threads, int vb, cJSON **base) {
    cJSON *spec = cJSON_CreateObject();
    if (!spec) return NULL;
    cJSON_AddStringToObject(spec, "name", name);
    cJSON_AddStringToObject(spec, "data", "bundled");
    cJSON *b = cJSON_AddObjectToObject(spec, "base");
    if (!b) {
        cJSON_Delete(spec);
        return NULL;
    }
    cJSON_AddNumberToObject(b, "seq_len", T);
    cJSON_AddNumberToObject(b, "max_seq_len", T);
    cJSON_AddNumberToObject(b, "micro_batch", B);
    cJSON_AddNumberToObject(b, "threads", threads);
    cJSON_AddNumberToObject(b, "peak_gflops", 100); /* MFU is not studied: skip the peak measurement */
    cJSON_AddNumberToObject(b, "val_batches", vb);
    cJSON_AddNumberToObject(b, "max_nonfinite", 1); /* a diverged run stops at once; its loss is missing */
    *base = b;
    return spec;
}

Status study_sweep_run(const char *sub, const cJSON *spec, Comm *comm, const TrainFlagsParser *tp, Sweep *s, int *interrupted,
                       Err *err) {
    char path[1200];
    memset(s, 0, sizeof *s);
    *interrupted = 0;
    Status st = file_mkdirs(sub, err);
    char *text = st == ST_OK ? cJSON_Print(spec) : NULL;
    if (st == ST_OK && !text) st = err_set(err, ST_ERR_RUNTIME, "out of memory");
    snprintf(path, sizeof path, "%s/spec.json", sub);
    if (st == ST_OK) st = study_write_text(path, text, strlen(text), err);
    free(text);
    if (st == ST_OK) st = sweep_load(s, path, sub, comm, tp, err);
    if (st != ST_OK) return st;
    SweepExecOptions o = {.only = -1};
    SweepExecResult res;
    st = sweep_execute(s, comm, &o, &res, err);
    *interrupted = res.interrupted;
    if (st != ST_OK) sweep_free(s);
    return st;
}

Status study_train(const char *study, const char *name, char *const *flags, int nflags, const char *log, Comm *comm,
                   const TrainFlagsParser *tp, char *failure, size_t cap, Err *err) {
    char *argv[128];
    int argc = 0;
    failure[0] = '\0';
    if (nflags > 124) return err_set(err, ST_ERR_INPUT, "%s: %s: %d train flags, expected at most 124", study, name, nflags);
    for (int i = 0; i < nflags; i++) argv[argc++] = flags[i];
    argv[argc++] = "--log", argv[argc++] = (char *)log;
    TrainFlags tf = {0}, *ta = &tf;
    Status st = tp->parse(argc, argv, comm, ta, err);
    if (st == ST_OK) {
        TrainConfig c = *ta->cfg;
        c.comm = comm;
        TrainResult res;
        memset(&res, 0, sizeof res);
        if (!comm || comm->rank == 0) {
            printf("%s: %s: %s\n", study, name, ta->joined);
            fflush(stdout);
        }
        st = train_run(&c, &res, err);
        if (st == ST_ERR_RUNTIME && res.steps_done > 0) snprintf(failure, cap, "%s", err->msg), st = ST_OK;
    }
    tp->release(ta);
    return st;
}

/* Joins n strings as lines into a malloc'd text (NULL when out of memory). */
char *study_lines(const char *const *s, int n) {
    size_t len = 1;
    for (int i = 0; i < n; i++) len += strlen(s[i]) + 1;
    char *t = malloc(len);
    if (!t) return NULL;
    size_t k = 0;
    for (int i = 0; i < n; i++) k += (size_t)snprintf(t + k, len - k, "%s\n", s[i]);
    return t;
}

void study_outcome_free(StudyOutcome *o) {
    free(o->findings);
    o->findings = NULL;
}

ReportRun *study_load_log(const char *path) {
    ReportRun *rr = calloc(1, sizeof *rr);
    Err e;
    if (!rr || report_load_run(rr, path, &e) != ST_OK) {
        if (rr) report_run_free(rr);
        free(rr);
        return NULL;
    }
    return rr;
}
