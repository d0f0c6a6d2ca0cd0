/* cmd_study_opt.c — `scaletrain study optimizers` (docs/studies.md): flags → OptStudyOptions →
 * study_optimizers (src/study/optimizers.c: the sweeps, full runs, timing, findings and page) →
 * its findings printed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cmds.h"
#include "cli/cmds_study.h"
#include "cli/train_flags.h"
#include "study/studies.h"

int cmd_study_optimizers(int argc, char **argv, Comm *comm) {
    char out[1024] = "study-optimizers", opts[256] = "";
    study_optimizers_all(opts, sizeof opts); /* the default: every row of the table */
    OsSetup su = {.layers = 4, .width = 128, .T = 128, .B = 16, .threads = 1, .vb = 16, .val_every = 0,
                  .steps = 600, .sweep_steps = 200, .timing_rounds = 3, .timing_steps = 40};
    double lr_scale = 1;
    ArgSpec specs[] = {
        {"out", ARG_DIR, out, sizeof out, "output directory: sweep/<optimizer>/, final/<optimizer>/, index.html, summary.json"},
        {"optimizers", ARG_STR, opts, sizeof opts, "comma-separated subset of the optimizers (adamw required)"},
        {"steps", ARG_LONG, &su.steps, 0, "steps of each full run (the token budget: steps x micro-batch x seq-len)"},
        {"sweep-steps", ARG_LONG, &su.sweep_steps, 0, "steps of each run of the short lr sweeps"},
        {"layers", ARG_INT, &su.layers, 0, "transformer blocks"},
        {"width", ARG_INT, &su.width, 0, "model width C, a multiple of 32 (heads of 32)"},
        {"seq-len", ARG_INT, &su.T, 0, "tokens per sequence"},
        {"micro-batch", ARG_INT, &su.B, 0, "sequences per step"},
        {"val-every", ARG_INT, &su.val_every, 0, "steps between evaluations of the full runs (0: steps / 25)"},
        {"val-batches", ARG_INT, &su.vb, 0, "validation micro-batches per evaluation"},
        {"timing-rounds", ARG_INT, &su.timing_rounds, 0, "rounds of the interleaved step timing (each optimizer once per round)"},
        {"timing-steps", ARG_INT, &su.timing_steps, 0, "timed steps per optimizer per round"},
        {"lr-scale", ARG_DOUBLE, &lr_scale, 0, "multiplies every optimizer's lr grid (another model size or batch)"},
        {"threads", ARG_INT, &su.threads, 0, "threads per run"},
        {"quick", ARG_FLAG, &su.quick, 0,
         "tiny: 2 layers of 32, 2 lrs per optimizer, 8-step sweeps, 24-step runs, 2 timing rounds of 4 steps (tests)"},
    };
    int n = (int)(sizeof specs / sizeof specs[0]), npos = 0, help = 0;
    Err err = {0};
    Status st = args_parse(specs, n, argc, argv, NULL, 0, &npos, &help, &err);
    if (st != ST_OK) return cli_fail("study optimizers", st, err.msg);
    if (help) {
        printf("usage: scaletrain study optimizers [options]\n\nEach optimizer at its own best learning rate (a short sweep "
               "each), then one full run each on the same model, data and token budget: tokens and seconds to reach "
               "AdamW's final validation loss, step-time overheads (docs/studies.md).\n\n");
        args_print_help(specs, n);
        return 0;
    }
    if (su.quick) { /* presets for what was not given: an explicit flag wins */
#define UNSEEN(name) (!args_find(specs, n, name)->seen)
        if (UNSEEN("layers")) su.layers = 2;
        if (UNSEEN("width")) su.width = 32;
        if (UNSEEN("seq-len")) su.T = 32;
        if (UNSEEN("micro-batch")) su.B = 4;
        if (UNSEEN("val-batches")) su.vb = 2;
        if (UNSEEN("steps")) su.steps = 24;
        if (UNSEEN("sweep-steps")) su.sweep_steps = 8;
        if (UNSEEN("val-every")) su.val_every = 3;
        if (UNSEEN("timing-rounds")) su.timing_rounds = 2;
        if (UNSEEN("timing-steps")) su.timing_steps = 4;
#undef UNSEEN
    }
    char msg[256] = "";
    if (su.steps < 4 || su.steps > 1000000) snprintf(msg, sizeof msg, "--steps: expected 4..1000000, found %ld", su.steps);
    else if (su.sweep_steps < 1 || su.sweep_steps > 1000000)
        snprintf(msg, sizeof msg, "--sweep-steps: expected 1..1000000, found %ld", su.sweep_steps);
    else if (su.layers < 1 || su.layers > 256) snprintf(msg, sizeof msg, "--layers: expected 1..256, found %d", su.layers);
    else if (su.width < 32 || su.width % 32) snprintf(msg, sizeof msg, "--width: expected a multiple of 32 (heads of 32), found %d", su.width);
    else if (su.T < 2 || su.T > 65536) snprintf(msg, sizeof msg, "--seq-len: expected 2..65536, found %d", su.T);
    else if (su.B < 1 || su.B > 65536) snprintf(msg, sizeof msg, "--micro-batch: expected 1..65536, found %d", su.B);
    else if (su.val_every < 0 || su.val_every > su.steps)
        snprintf(msg, sizeof msg, "--val-every: expected 0..--steps (%ld), found %d", su.steps, su.val_every);
    else if (su.vb < 1) snprintf(msg, sizeof msg, "--val-batches: expected >= 1, found %d", su.vb);
    else if (su.threads < 1) snprintf(msg, sizeof msg, "--threads: expected >= 1, found %d", su.threads);
    else if (su.timing_rounds < 1 || su.timing_rounds > 100)
        snprintf(msg, sizeof msg, "--timing-rounds: expected 1..100, found %d", su.timing_rounds);
    else if (su.timing_steps < 2 || su.timing_steps > 100000)
        snprintf(msg, sizeof msg, "--timing-steps: expected 2..100000, found %d", su.timing_steps);
    else if (!(lr_scale > 0) || !isfinite(lr_scale)) snprintf(msg, sizeof msg, "--lr-scale: expected a number > 0, found %g", lr_scale);
    if (msg[0]) return cli_fail("study optimizers", ST_ERR_INPUT, msg);
    if (study_check_out(out, &err) != ST_OK) return cli_fail("study optimizers", ST_ERR_INPUT, err.msg);
    if (su.val_every == 0) su.val_every = su.steps / 25 > 1 ? (int)(su.steps / 25) : 1;
    su.heads = su.width / 32;
    OptStudyOptions *o = calloc(1, sizeof *o);
    if (!o) return cli_fail("study optimizers", ST_ERR_RUNTIME, "out of memory");
    snprintf(o->out, sizeof o->out, "%s", out);
    snprintf(o->optimizers, sizeof o->optimizers, "%s", opts);
    o->lr_scale = lr_scale, o->su = su;
    StudyOutcome res;
    st = study_optimizers(o, comm, cli_train_flags(), &res, &err);
    free(o);
    return study_finish("optimizers", out, comm, st, &res, &err);
}
