/* cmd_sweep.c — `scaletrain sweep SPEC.json`: a grid of short trainings (sweep.h, docs/sweep.md).
 *
 *   sweep SPEC [--out DIR]            trains every run not done yet (skips done.json, resumes the rest)
 *   sweep SPEC --dry-run [--json]     the grid with each run's plan (memory, predicted time)
 *   sweep SPEC --list [--list-format train|sweep]
 *                                     one command line per run: `scaletrain train ...` (the exact
 *                                     library call) or `scaletrain sweep SPEC --out DIR --only ID`
 *   sweep SPEC --only RUN_ID          one run (what a Slurm array task or an mpirun per run calls)
 * ST_SWEEP_TEST_STOP_AFTER=k (tests): every run trained stops after step k as if preempted. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/args.h"
#include "cli/cmds.h"
#include "cli/train_flags.h"
#include "core/shellword.h"
#include "study/sweep.h"

/* Prints the grid: each run's params, tokens, steps, FLOPs, planned memory per rank and predicted
 * time (sweep_plan_run: the trainer's own plan), and totals; json: one JSON object per run per line
 * instead (memory_bytes exact). */
static Status print_dry_run(const Sweep *s, const Comm *comm, int json, Err *err) {
    /* Every run planned before anything is printed: a run refused halfway (a damaged done.json) left
     * the table's head on stdout above the error. */
    SweepRunPlan *plans = calloc((size_t)(s->nruns > 0 ? s->nruns : 1), sizeof *plans);
    if (!plans) return err_set(err, ST_ERR_RUNTIME, "out of memory");
    for (int i = 0; i < s->nruns; i++) {
        Status st = sweep_plan_run(s, i, comm, &plans[i], err);
        if (st != ST_OK) {
            free(plans);
            return st;
        }
    }
    if (!json) printf("sweep %s (%s): %d runs in %s/runs/\n", s->name, s->kind, s->nruns, s->out);
    if (!json) printf("%-36s %12s %12s %7s %11s %12s %12s %s\n", "run", "params", "tokens", "steps", "FLOPs", "memory MiB",
           "time (pred.)", "status");
    double tot_flops = 0, tot_s = 0;
    for (int i = 0; i < s->nruns; i++) {
        const SweepRun *r = &s->runs[i];
        const SweepRunPlan p = plans[i];
        double secs = p.predicted_s;
        if (json)
            printf("{\"run\":\"%s\",\"params\":%lld,\"tokens\":%.0f,\"steps\":%ld,\"flops\":%.17g,\"budget\":%.17g,"
                   "\"channels\":%d,\"memory_bytes\":%.0f,\"predicted_s\":%.6g,\"done\":%s}\n", r->id, r->params, r->tokens,
                   r->steps, r->flops, r->budget, r->channels, p.memory_bytes, secs, p.done ? "true" : "false");
        else printf("%-36s %12lld %12.0f %7ld %11.3e %12.2f %11.3gs %s\n", r->id, r->params, r->tokens, r->steps, r->flops,
               p.memory_bytes / 1048576.0, secs, p.done ? "done" : "to run");
        tot_flops += r->flops, tot_s += secs;
    }
    if (!json) printf("total: %.3e FLOPs, predicted %.3g s of training (plan's hardware profile; memory per rank from the "
           "trainer's own plan)\n", tot_flops, tot_s);
    free(plans);
    return ST_OK;
}

int cmd_sweep(int argc, char **argv, Comm *comm) {
    char out[1024] = "", only[160] = "", fmt[16] = "train";
    int dry = 0, list = 0, verbose = 0, json = 0;
    ArgSpec specs[] = {
        {"out", ARG_DIR, out, sizeof out, "output directory: runs/<id>/, results.csv, results.jsonl (default: sweep-<name>)"},
        {"dry-run", ARG_FLAG, &dry, 0, "print the grid with each run's params, tokens, steps, FLOPs, planned memory and time"},
        {"json", ARG_FLAG, &json, 0, "--dry-run: one JSON object per run (exact memory bytes) instead of the table"},
        {"list", ARG_FLAG, &list, 0, "print one command line per run (for a Slurm array or mpirun per run)"},
        {"list-format", ARG_STR, fmt, sizeof fmt, "train (the exact scaletrain train call) | sweep (sweep SPEC --only ID)"},
        {"only", ARG_STR, only, sizeof only, "train only this run id (skipped if done)"},
        {"verbose", ARG_FLAG, &verbose, 0, "per-step progress lines of each run (default: one line per run)"},
    };
    int n = (int)(sizeof specs / sizeof specs[0]), npos = 0, help = 0;
    char *pos[1];
    Err err = {0};
    Status st = args_parse(specs, n, argc, argv, pos, 1, &npos, &help, &err);
    if (st != ST_OK) return cli_fail("sweep", st, err.msg);
    if (help) {
        printf("usage: scaletrain sweep SPEC.json [options]\n\nA grid of short trainings from one spec (docs/sweep.md).\n\n");
        args_print_help(specs, n);
        return 0;
    }
    if (npos != 1) return cli_fail("sweep", ST_ERR_INPUT, "expected a sweep spec SPEC.json, found none");
    if (strcmp(fmt, "train") && strcmp(fmt, "sweep")) {
        snprintf(err.msg, sizeof err.msg, "--list-format: expected train or sweep, found '%s'", fmt);
        return cli_fail("sweep", ST_ERR_INPUT, err.msg);
    }
    if (dry + list + (only[0] != 0) > 1)
        return cli_fail("sweep", ST_ERR_INPUT, "--dry-run, --list and --only: expected at most one of them");
    /* flags of one mode given without it would change nothing (they ran the sweep as without them) */
    if (json && !dry) return cli_fail("sweep", ST_ERR_INPUT, "--json: would change nothing without --dry-run; expected --dry-run --json");
    if (args_find(specs, n, "list-format")->seen && !list)
        return cli_fail("sweep", ST_ERR_INPUT, "--list-format: would change nothing without --list; expected --list --list-format F");
    if (verbose && (dry || list))
        return cli_fail("sweep", ST_ERR_INPUT, "--verbose: would change nothing with --dry-run or --list (nothing trains)");
    if (args_find(specs, n, "out")->seen && !out[0])
        return cli_fail("sweep", ST_ERR_INPUT, "--out: expected a folder, found ''");
    if (args_find(specs, n, "only")->seen && !only[0]) /* it trained the whole grid */
        return cli_fail("sweep", ST_ERR_INPUT, "--only: expected a run id (sweep --list --list-format sweep lists them), found ''");
    struct stat so;
    if (out[0] && stat(out, &so) == 0 && !S_ISDIR(so.st_mode)) {
        snprintf(err.msg, sizeof err.msg, "--out %s: expected a folder (or a path to create one at), found a file", out);
        return cli_fail("sweep", ST_ERR_INPUT, err.msg);
    }
    /* The output directory is needed to name the runs' files: read the name first if not given. */
    Sweep s;
    if (!out[0]) {
        if ((st = sweep_load(&s, pos[0], "sweep-out", comm, cli_train_flags(), &err)) != ST_OK) return cli_fail("sweep", st, err.msg);
        snprintf(out, sizeof out, "sweep-%s", s.name);
        sweep_free(&s);
    }
    if ((st = sweep_load(&s, pos[0], out, comm, cli_train_flags(), &err)) != ST_OK) return cli_fail("sweep", st, err.msg);
    int root = !comm || comm->rank == 0, rc = 0;
    if (dry) {
        if (root && (st = print_dry_run(&s, comm, json, &err)) != ST_OK) rc = cli_fail("sweep", st, err.msg);
    } else if (list) {
        static char line[16384];
        for (int i = 0; i < s.nruns && root; i++) {
            if (!strcmp(fmt, "train")) sweep_command_line(&s.runs[i], "scaletrain", line, sizeof line);
            else { /* quoted as the shell reads them back ('%s' broke on a path holding a quote) */
                snprintf(line, sizeof line, "scaletrain sweep");
                const char *w[5] = {pos[0], "--out", out, "--only", s.runs[i].id};
                for (int k = 0; k < 5; k++) shell_word_append(line, sizeof line, w[k]);
            }
            printf("%s\n", line);
        }
    } else {
        SweepExecOptions o = {.only = -1, .verbose = verbose};
        const char *stop = getenv("ST_SWEEP_TEST_STOP_AFTER");
        if (stop && stop[0]) o.test_stop_after = atol(stop);
        if (only[0] && (o.only = sweep_find(&s, only)) < 0) {
            snprintf(err.msg, sizeof err.msg, "--only %s: expected a run id of %s (sweep --list-format sweep lists them), "
                     "found none", only, pos[0]);
            sweep_free(&s);
            return cli_fail("sweep", ST_ERR_INPUT, err.msg);
        }
        SweepExecResult res;
        st = sweep_execute(&s, comm, &o, &res, &err);
        /* The page of whatever is done, also after an interruption. */
        if (st == ST_OK && root) st = sweep_write_page(&s, &err);
        if (st != ST_OK) rc = cli_fail("sweep", st, err.msg);
        else if (root && res.interrupted)
            printf("sweep: stopped during run %s (its checkpoint is saved): run the same command again to resume it\n",
                   res.interrupted_id);
        else if (root)
            printf("sweep: %d trained, %d failed, %d skipped (done), %d retrained; results in %s/results.csv, results.jsonl, "
                   "index.html\n", res.trained, res.failed, res.skipped, res.restarted, out);
    }
    sweep_free(&s);
    return rc;
}
