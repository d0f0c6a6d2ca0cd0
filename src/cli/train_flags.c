/* train_flags.c — train's flag parser handed to the study engines (train_flags.h). */
#include "cli/train_flags.h"

#include <stdlib.h>
#include <string.h>

#include "cli/train_args.h"

static Status tf_parse(int argc, char **argv, const Comm *comm, TrainFlags *f, Err *err) {
    memset(f, 0, sizeof *f);
    TrainArgs *a = calloc(1, sizeof *a); /* large (paths): on the heap */
    if (!a) return err_set(err, ST_ERR_RUNTIME, "out of memory");
    f->owner = a;
    Status st = train_args_parse(argc, argv, comm, a, err);
    f->cfg = &a->cfg, f->joined = a->joined, f->help = a->help;
    return st;
}

static void tf_release(TrainFlags *f) {
    if (f->owner) {
        train_args_free(f->owner);
        free(f->owner);
    }
    memset(f, 0, sizeof *f);
}

static const TrainFlagsParser PARSER = {tf_parse, tf_release, train_args_option};

const TrainFlagsParser *cli_train_flags(void) { return &PARSER; }
