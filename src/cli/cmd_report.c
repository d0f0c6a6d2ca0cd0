/* cmd_report.c — `scaletrain report RUN.jsonl [more.jsonl ...] -o report.html`: one self-contained
 * HTML page of charts from metrics logs (src/report/report.h; docs/report.md).
 *
 * A damaged log (truncated or malformed lines) still gives a report of what is valid, plus one
 * warning line per damaged log on stderr ("scaletrain report: warning: ..."); exit 0. A log that
 * cannot be read, a log with no valid record (alone or beside others), a log named twice, -o naming
 * one of the logs, or an empty --title are bad input (exit 2). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/args.h"
#include "cli/cmds.h"
#include "cli/cmds_report.h"
#include "core/fileio.h"
#include "report/report.h"

#define REPORT_MAX_RUNS 64

int cmd_report(int argc, char **argv) {
    char out[1024] = "report.html", title[256] = "";
    ArgSpec specs[] = {
        {"out", ARG_STR, out, sizeof out, "the HTML file to write (-o is accepted)"},
        {"title", ARG_STR, title, sizeof title, "page title (default: scaletrain report)"},
    };
    int n = (int)(sizeof specs / sizeof specs[0]), npos = 0, help = 0;
    /* -o is the one short option: rewrite it to --out for the shared parser. */
    char **av = calloc((size_t)argc + 1, sizeof *av);
    if (!av) return cli_fail("report", ST_ERR_RUNTIME, "out of memory");
    for (int i = 0; i < argc; i++) av[i] = strcmp(argv[i], "-o") ? argv[i] : (char *)"--out";
    char *pos[REPORT_MAX_RUNS];
    Err err = {0};
    Status st = args_parse(specs, n, argc, av, pos, REPORT_MAX_RUNS, &npos, &help, &err);
    if (st != ST_OK) {
        free(av);
        return cli_fail("report", st, err.msg);
    }
    if (help || npos < 1) {
        free(av);
        printf("usage: scaletrain report RUN.jsonl [more.jsonl ...] -o report.html\n\n"
               "Writes one self-contained HTML page (no network needed) charting metrics logs written by\n"
               "`train --log`: loss, learning rate, gradient norm, throughput and MFU, time decomposition,\n"
               "memory; several logs overlay.\n\n");
        args_print_help(specs, n);
        return help ? 0 : cli_fail("report", ST_ERR_INPUT, "expected at least one metrics log (.jsonl), found none");
    }
    if (!out[0]) {
        free(av);
        return cli_fail("report", ST_ERR_INPUT, "-o/--out: expected an output path, found none");
    }
    if (args_find(specs, n, "title")->seen && !title[0]) { /* it gave the default title, as if not given */
        free(av);
        return cli_fail("report", ST_ERR_INPUT, "--title: expected text, found ''");
    }
    ReportRun *runs = calloc((size_t)npos, sizeof *runs);
    char *html = NULL;
    size_t len = 0;
    int rc = 0;
    if (!runs) {
        st = err_set(&err, ST_ERR_RUNTIME, "out of memory");
        goto fail;
    }
    /* The page replaces -o: a log named as the output would be overwritten by HTML (compared by
     * device and inode, so another spelling of the same file is caught too). */
    struct stat so;
    if (stat(out, &so) == 0)
        for (int i = 0; i < npos; i++) {
            struct stat si;
            if (stat(pos[i], &si) == 0 && si.st_dev == so.st_dev && si.st_ino == so.st_ino) {
                st = err_set(&err, ST_ERR_INPUT, "-o/--out %s: expected a file other than the metrics logs, found the "
                             "log %s (writing the page would overwrite it)", out, pos[i]);
                goto fail;
            }
        }
    /* A log named twice (however spelled) was drawn as two runs of identical curves. */
    for (int i = 0; i < npos; i++) {
        struct stat si, sj;
        if (stat(pos[i], &si) != 0) continue; /* report_load_run names what is wrong with it */
        for (int j = 0; j < i; j++)
            if (stat(pos[j], &sj) == 0 && si.st_dev == sj.st_dev && si.st_ino == sj.st_ino) {
                st = err_set(&err, ST_ERR_INPUT, "%s: expected each metrics log once, found it also as argument %d (%s)",
                             pos[i], j + 1, pos[j]);
                goto fail;
            }
    }
    for (int i = 0; i < npos; i++) {
        if ((st = report_load_run(&runs[i], pos[i], &err)) != ST_OK) goto fail;
        size_t ev = 0;
        for (const ReportRun *r = &runs[i]; r; r = r->next) ev += r->events;
        /* Each log, as one alone: a log with nothing to chart is bad input, beside others too. */
        if (ev == 0) {
            st = err_set(&err, ST_ERR_INPUT, "%s: no valid metrics records (expected JSON Lines records of train --log: "
                         "an \"event\" and its fields, e.g. a step record's numeric \"step\" and \"loss\"; found none whole)",
                         pos[i]);
            goto fail;
        }
    }
    if ((st = report_render(runs, npos, title, &html, &len, &err)) != ST_OK) goto fail;
    const void *bufs[1] = {html};
    if ((st = file_write_atomic(out, bufs, &len, 1, &err)) != ST_OK) goto fail;
    for (int i = 0; i < npos; i++) {
        char w[4096];
        if (report_run_warning(&runs[i], w, sizeof w)) fprintf(stderr, "scaletrain report: warning: %s\n", w);
    }
    size_t steps = 0, replayed = 0;
    int nruns = 0; /* a log may hold several runs (a new start record without resume info) */
    for (int i = 0; i < npos; i++)
        for (const ReportRun *r = &runs[i]; r; r = r->next) steps += r->step[REP_STEP].n, replayed += r->replayed, nruns++;
    printf("report: %s (%d run%s, %zu steps", out, nruns, nruns == 1 ? "" : "s", steps);
    if (replayed) printf(", %zu replayed steps shown once", replayed);
    printf(", %.1f KiB)\n", len / 1024.0);
    goto cleanup;
fail:
    rc = cli_fail("report", st, err.msg);
cleanup:
    if (runs)
        for (int i = 0; i < npos; i++) report_run_free(&runs[i]);
    free(runs);
    free(html);
    free(av);
    return rc;
}
