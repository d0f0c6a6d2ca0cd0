/* dp_memory_worker.c — several short training runs in one MPI job, for test_dp's memory part.
 *
 * Usage (under mpirun): dp_memory_worker DIR RUN...
 *   RUN = name:data:layers:heads:channels:vocab:seq:micro_batch:zero:precision:steps
 * Each run is train_run with the job's Comm (dp = world), one thread, logging to DIR/name.jsonl; the
 * test reads the logs. One job for many configurations saves a launch per configuration. Only the
 * first run's resident memory is clean: later runs reuse heap the earlier ones freed, so the test
 * reads RSS from the first run only. Exit 0 if every run succeeded. */
#include <stdio.h>
#include <string.h>

#include "comm/comm.h"
#include "train/train.h"

int main(int argc, char **argv) {
    Comm *c = NULL;
    Err err;
    if (comm_init(&c, &argc, &argv, &err) != ST_OK) {
        fprintf(stderr, "dp_memory_worker: %s\n", err.msg);
        return 1;
    }
    int rc = argc < 3 ? 2 : 0;
    for (int i = 2; i < argc && rc == 0; i++) {
        char name[64], data[512], prec[8];
        int L, H, C, V, T, B, zero;
        long steps;
        if (sscanf(argv[i], "%63[^:]:%511[^:]:%d:%d:%d:%d:%d:%d:%d:%7[^:]:%ld", name, data, &L, &H, &C, &V, &T, &B, &zero,
                   prec, &steps) != 11) {
            fprintf(stderr, "dp_memory_worker: run %s: expected name:data:L:H:C:V:T:B:zero:precision:steps\n", argv[i]);
            rc = 2;
            break;
        }
        TrainConfig t = train_default_config();
        t.model = (ModelConfig){L, H, C, V, 0, T, 0.0f};
        snprintf(t.data, sizeof t.data, "%s", data);
        snprintf(t.log_path, sizeof t.log_path, "%s/%s.jsonl", argv[1], name);
        t.micro_batch = B, t.seq_len = T, t.grad_accum = 1, t.steps = steps;
        t.val_every = 0, t.quiet = 1, t.peak_flops = 1e11, t.threads = 1;
        t.comm = c, t.zero = zero, t.bf16 = !strcmp(prec, "bf16"), t.fp16 = !strcmp(prec, "fp16");
        TrainResult r;
        if (train_run(&t, &r, &err) != ST_OK) {
            fprintf(stderr, "dp_memory_worker: run %s: %s\n", name, err.msg);
            rc = 1;
        }
    }
    comm_finalize(c);
    return rc;
}
