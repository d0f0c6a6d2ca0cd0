/* cmd_study.c — `scaletrain study lr-transfer | spike` (and the dispatch to `study optimizers`,
 * cmd_study_opt.c): flags → the study's options → the study (src/study, studies.h) → its findings
 * and the files it wrote printed. docs/studies.md.
 *
 *   lr-transfer   learning-rate sweeps at several widths under the standard parameterization and
 *                 under muP (study/lr_transfer.c).
 *   spike         a run with too high a learning rate and no warmup or clipping, and the same run
 *                 with warmup and clipping (study/spike.c).
 * --quick shrinks either to a tiny model and a few steps (for tests). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cmds.h"
#include "cli/cmds_study.h"
#include "cli/train_flags.h"
#include "study/studies.h"
#include "train/train.h"

int study_finish(const char *study, const char *out, const Comm *comm, Status st, StudyOutcome *res, Err *err) {
    int root = !comm || comm->rank == 0;
    char cmd[64];
    snprintf(cmd, sizeof cmd, "study %s", study);
    if (res->findings) fputs(res->findings, stdout);
    study_outcome_free(res);
    if (st != ST_OK) return cli_fail(cmd, st, err->msg);
    if (res->interrupted) {
        if (root) printf("study %s: interrupted; run the same command again to resume\n", study);
        return 0;
    }
    if (root) printf("study %s: wrote %s/index.html and %s/summary.json\n", study, out, out);
    return 0;
}

static int cmd_lr_transfer(int argc, char **argv, Comm *comm) {
    char out[1024] = "study-lr-transfer", widths[256] = "128,256,512", lrs[512] = "2^-12,2^-11,2^-10,2^-9,2^-8,2^-7";
    long steps = 150;
    int layers = 2, T = 64, B = 8, threads = 1, quick = 0, vb = 16;
    ArgSpec specs[] = {
        {"out", ARG_DIR, out, sizeof out, "output directory: sp/, mup/ (two sweeps), index.html, summary.json"},
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
    /* --quick's presets fill only what was not given: an explicit flag wins. */
#define UNSEEN(name) (!args_find(specs, n, name)->seen)
    if (quick) {
        if (UNSEEN("widths")) snprintf(widths, sizeof widths, "32,64");
        if (UNSEEN("lrs")) snprintf(lrs, sizeof lrs, "2^-8,2^-6,2^-4");
        if (UNSEEN("layers")) layers = 1;
        if (UNSEEN("steps")) steps = 8;
        if (UNSEEN("seq-len")) T = 32;
        if (UNSEEN("micro-batch")) B = 4;
        if (UNSEEN("val-batches")) vb = 2;
    }
    LrTransferOptions *o = calloc(1, sizeof *o);
    if (!o) return cli_fail("study lr-transfer", ST_ERR_RUNTIME, "out of memory");
    snprintf(o->out, sizeof o->out, "%s", out);
    if ((st = study_parse_list("widths", widths, o->widths, &o->nw, &err)) != ST_OK ||
        (st = study_parse_list("lrs", lrs, o->lrs, &o->nlr, &err)) != ST_OK) {
        free(o);
        return cli_fail("study lr-transfer", st, err.msg);
    }
    if (o->nw < 2) {
        snprintf(err.msg, sizeof err.msg, "--widths: expected at least two widths (a shift from one to another), found %d", o->nw);
        free(o);
        return cli_fail("study lr-transfer", ST_ERR_INPUT, err.msg);
    }
    if (o->nlr < 3) {
        snprintf(err.msg, sizeof err.msg, "--lrs: expected at least three learning rates (a best one between two others), "
                 "found %d", o->nlr);
        free(o);
        return cli_fail("study lr-transfer", ST_ERR_INPUT, err.msg);
    }
    for (int i = 1; i < o->nw || i < o->nlr; i++) { /* ascending, distinct: grid steps are index steps */
        const char *bad = i < o->nw && !(o->widths[i] > o->widths[i - 1]) ? "--widths" : i < o->nlr && !(o->lrs[i] > o->lrs[i - 1]) ? "--lrs" : NULL;
        if (!bad) continue;
        snprintf(err.msg, sizeof err.msg, "%s: expected values in increasing order, found %g after %g", bad,
                 bad[2] == 'w' ? o->widths[i] : o->lrs[i], bad[2] == 'w' ? o->widths[i - 1] : o->lrs[i - 1]);
        free(o);
        return cli_fail("study lr-transfer", ST_ERR_INPUT, err.msg);
    }
    if (steps < 1 || steps > TRAIN_MAX_STEPS)
        snprintf(err.msg, sizeof err.msg, "--steps: expected 1..%ld optimizer steps, found %ld", TRAIN_MAX_STEPS, (long)steps);
    else if (layers < 1) snprintf(err.msg, sizeof err.msg, "--layers: expected >= 1, found %d", layers);
    else if (T < 1) snprintf(err.msg, sizeof err.msg, "--seq-len: expected >= 1, found %d", T);
    else if (B < 1) snprintf(err.msg, sizeof err.msg, "--micro-batch: expected >= 1, found %d", B);
    else if (vb < 1) snprintf(err.msg, sizeof err.msg, "--val-batches: expected >= 1, found %d", vb);
    else if (threads < 0) snprintf(err.msg, sizeof err.msg, "--threads: expected >= 0 (0: auto), found %d", threads);
    if (!err.msg[0]) study_check_out(out, &err);
    if (err.msg[0]) { /* named here, not as the study's generated spec (grid.tokens[0] ...) */
        free(o);
        return cli_fail("study lr-transfer", ST_ERR_INPUT, err.msg);
    }
    for (int w = 0; w < o->nw; w++) /* heads of 32 at every width, as study optimizers' --width */
        if (!(o->widths[w] >= 32) || fmod(o->widths[w], 32) != 0) {
            snprintf(err.msg, sizeof err.msg, "--widths: expected multiples of 32 (heads of 32), found %g", o->widths[w]);
            free(o);
            return cli_fail("study lr-transfer", ST_ERR_INPUT, err.msg);
        }
    o->steps = steps, o->layers = layers, o->T = T, o->B = B, o->vb = vb, o->threads = threads;
    StudyOutcome res;
    st = study_lr_transfer(o, comm, cli_train_flags(), &res, &err);
    free(o);
    return study_finish("lr-transfer", out, comm, st, &res, &err);
}

static int cmd_study_spike(int argc, char **argv, Comm *comm) {
    char out[1024] = "study-spike";
    long steps = 150;
    double lr = 0.03, warmup_frac = 0.25, clip = 1.0;
    int layers = 4, channels = 256, heads = 4, T = 64, B = 8, threads = 1, quick = 0;
    ArgSpec specs[] = {
        {"out", ARG_DIR, out, sizeof out, "output directory: runs/unstable, runs/stable, index.html, summary.json"},
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
    if (quick) { /* presets for what was not given: an explicit flag wins */
        if (UNSEEN("layers")) layers = 2;
        if (UNSEEN("channels")) channels = 64;
        if (UNSEEN("heads")) heads = 2;
        if (UNSEEN("seq-len")) T = 32;
        if (UNSEEN("micro-batch")) B = 4;
        if (UNSEEN("steps")) steps = 30;
        if (UNSEEN("lr")) lr = 0.3;
    }
    /* each its own line, with what was found (they shared one line naming four flags) */
    if (steps < 8 || steps > STUDY_SPIKE_MAXSTEPS)
        snprintf(err.msg, sizeof err.msg, "--steps: expected 8..%d (a warmup and a spike to find), found %ld",
                 STUDY_SPIKE_MAXSTEPS, steps);
    else if (!(lr > 0)) snprintf(err.msg, sizeof err.msg, "--lr: expected a value > 0, found %g", lr);
    else if (!(warmup_frac >= 0 && warmup_frac < 1))
        snprintf(err.msg, sizeof err.msg, "--warmup-frac: expected a fraction in [0, 1), found %g", warmup_frac);
    else if (!(clip > 0)) snprintf(err.msg, sizeof err.msg, "--clip: expected a norm > 0, found %g", clip);
    else if (layers < 1 || channels < 1 || heads < 1 || channels % heads || T < 1 || B < 1 || threads < 0)
        snprintf(err.msg, sizeof err.msg, "--layers %d --channels %d --heads %d --seq-len %d --micro-batch %d --threads %d: "
                 "expected positive sizes, heads dividing channels, threads >= 0", layers, channels, heads, T, B, threads);
    if (!err.msg[0]) study_check_out(out, &err);
    if (err.msg[0]) return cli_fail("study spike", ST_ERR_INPUT, err.msg);
    SpikeOptions o = {.steps = steps, .lr = lr, .warmup_frac = warmup_frac, .clip = clip, .layers = layers,
                      .channels = channels, .heads = heads, .T = T, .B = B, .threads = threads};
    snprintf(o.out, sizeof o.out, "%s", out);
    StudyOutcome res;
    st = study_spike(&o, comm, cli_train_flags(), &res, &err);
    return study_finish("spike", out, comm, st, &res, &err);
}

#undef UNSEEN

int cmd_study(int argc, char **argv, Comm *comm) {
    if (argc < 1 || !strcmp(argv[0], "--help") || !strcmp(argv[0], "-h")) {
        printf("usage: scaletrain study spike|lr-transfer|optimizers [options]   (study NAME --help for its options)\n\n"
               "  spike        a run with too high a learning rate and no warmup or clipping, and the same run with both:\n"
               "               spike events and the per-layer diagnosis (index.html)\n"
               "  lr-transfer  learning-rate sweeps at several widths under SP and muP: how far the best lr moves\n"
               "  optimizers   each optimizer at its own best lr on one token budget: tokens and seconds to AdamW's final loss\n");
        return argc < 1 ? cli_fail("study", ST_ERR_INPUT, "expected a study (spike, lr-transfer or optimizers), found none") : 0;
    }
    if (!strcmp(argv[0], "lr-transfer")) return cmd_lr_transfer(argc - 1, argv + 1, comm);
    if (!strcmp(argv[0], "spike")) return cmd_study_spike(argc - 1, argv + 1, comm);
    if (!strcmp(argv[0], "optimizers")) return cmd_study_optimizers(argc - 1, argv + 1, comm);
    char msg[256];
    snprintf(msg, sizeof msg, "expected a study (spike, lr-transfer or optimizers), found '%s'", argv[0]);
    return cli_fail("study", ST_ERR_INPUT, msg);
}
