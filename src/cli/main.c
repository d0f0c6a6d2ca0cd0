/* main.c — the scaletrain binary: dispatches to the subcommands (DESIGN.md §4). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cli/cmds.h"
#include "core/stopsig.h"
#include "data/shard.h"
#include "cli/cmds_data.h"
#include "cli/cmds_plan.h"
#include "cli/cmds_fit.h"
#include "cli/cmds_ckpt.h"
#include "cli/cmds_report.h"
#include "model/matmul.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: scaletrain <command> [options]   (scaletrain <command> --help for its options)\n\n"
            "commands:\n"
            "  train      train a GPT on token shards\n"
            "  sample     generate text from trained weights\n"
            "  prepare    text / JSON Lines -> token shards (train + validation)\n"
            "  tokenizer  train, encode or decode with a tokenizer\n"
            "  plan       the training-plan review: memory, FLOPs, time, communication, scaling laws\n"
            "  eval       loss, perplexity and bits per byte of saved weights on token shards\n"
            "  export     saved weights -> Hugging Face (safetensors + config.json) or llm.c's .bin\n"
            "  fit        scaling laws (Chinchilla Approaches 1-3, Kaplan) fitted to a CSV of runs\n"
            "  report     an HTML page of charts from metrics logs (train --log)\n"
            "  sweep      a grid of short trainings from a spec (sizes x tokens, IsoFLOP) and their results table\n"
            "  study      training-dynamics studies with an HTML page of findings (spike, lr-transfer, optimizers)\n");
}

/* What a command printed must have reached its output: `eval --json > /dev/full` (a full disk)
 * exited 0 with nothing written. rc, or 1 where it was 0 and the output failed. */
static int output_written(const char *cmd, int rc) {
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "scaletrain %s: standard output: write failed (%s)\n", cmd, strerror(errno));
        return rc ? rc : 1;
    }
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1];
    { /* the prefix of the one line a shard that shrinks under a mapping gets (data/shard.h) */
        char prog[128];
        snprintf(prog, sizeof prog, "scaletrain %s", cmd);
        shard_set_program(prog);
        stopsig_set_program(prog); /* and the line of a second stop signal (core/stopsig.h) */
    }
    Err genv = {0};
    if (mm_gemm_env(&genv) != ST_OK) {
        fprintf(stderr, "scaletrain: %s\n", genv.msg);
        return 2;
    }
    if (!strcmp(cmd, "train") || !strcmp(cmd, "sweep") || !strcmp(cmd, "study")) {
        /* The process grid lives exactly as long as the subcommand: MPI under a launcher (mpirun,
         * srun), otherwise comm's single-process mode. */
        /* Before MPI and OpenMP start threads: the stop signals go to stopsig's waiting thread only
         * (core/stopsig.h); they keep their default actions until a run asks for a graceful stop. */
        stopsig_init();
        Comm *comm = NULL;
        Err err = {0};
        if (comm_init(&comm, &argc, &argv, &err) != ST_OK) {
            fprintf(stderr, "scaletrain %s: %s\n", cmd, err.msg);
            return 1;
        }
        int rc = !strcmp(cmd, "train") ? cmd_train_comm(argc - 2, argv + 2, comm)
                 : !strcmp(cmd, "sweep") ? cmd_sweep(argc - 2, argv + 2, comm)
                                         : cmd_study(argc - 2, argv + 2, comm);
        comm_finalize(comm);
        return output_written(cmd, rc);
    }
    int rc = -1;
    if (!strcmp(cmd, "sample")) rc = cmd_sample(argc - 2, argv + 2);
    else if (!strcmp(cmd, "prepare")) rc = cmd_prepare(argc - 1, argv + 1);
    else if (!strcmp(cmd, "tokenizer")) rc = cmd_tokenizer(argc - 1, argv + 1);
    else if (!strcmp(cmd, "plan")) rc = cmd_plan(argc - 2, argv + 2);
    else if (!strcmp(cmd, "export")) rc = cmd_export(argc - 2, argv + 2);
    else if (!strcmp(cmd, "report")) rc = cmd_report(argc - 2, argv + 2);
    else if (!strcmp(cmd, "eval")) rc = cmd_eval(argc - 2, argv + 2);
    else if (!strcmp(cmd, "fit")) rc = cmd_fit(argc - 2, argv + 2);
    if (rc < 0) {
        fprintf(stderr, "scaletrain: unknown command '%s' (expected train, sample, prepare, tokenizer, plan, eval, export, fit, report, sweep or study; see scaletrain --help)\n", cmd);
        return 2;
    }
    return output_written(cmd, rc);
}
