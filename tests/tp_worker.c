/* tp_worker.c — one training run with the trainer's health test hooks, under mpirun, for test_tp's
 * spike checks (the hooks are TrainConfig fields with no command-line flag).
 *
 * Usage (under mpirun): tp_worker DIR NAME TP POLICY SPIKE_STEP NAN_STEP CKPT_EVERY [PP]
 *   train_run with the job's Comm (dp = world / TP), test_health_train's small model and detector
 *   settings on DIR/health.bin (vocabulary 64), 64 steps, one thread per rank; log DIR/NAME.jsonl,
 *   weights DIR/NAME_out, checkpoints (CKPT_EVERY > 0) in DIR/NAME_ck. POLICY: log, skip or
 *   rollback; SPIKE_STEP / NAN_STEP: the attempt whose batch gets random targets / whose gradients
 *   get a NaN (0: none); PP: pipeline stages (default 1; test_pp). Exit 0 if the run succeeded. */
#include <stdio.h>
#include <stdlib.h>

#include "comm/comm.h"
#include "train/train.h"

int main(int argc, char **argv) {
    Comm *c = NULL;
    Err err;
    if (comm_init(&c, &argc, &argv, &err) != ST_OK) {
        fprintf(stderr, "tp_worker: %s\n", err.msg);
        return 1;
    }
    if (argc != 8 && argc != 9) {
        fprintf(stderr, "usage: tp_worker DIR NAME TP POLICY SPIKE_STEP NAN_STEP CKPT_EVERY [PP]\n");
        comm_finalize(c);
        return 2;
    }
    const char *dir = argv[1], *name = argv[2];
    TrainConfig t = train_default_config();
    t.model = (ModelConfig){2, 2, 32, 64, 0, 32, 0.0f};
    snprintf(t.data, sizeof t.data, "%s/health.bin", dir);
    snprintf(t.out_dir, sizeof t.out_dir, "%s/%s_out", dir, name);
    snprintf(t.log_path, sizeof t.log_path, "%s/%s.jsonl", dir, name);
    t.micro_batch = 4, t.seq_len = 32, t.grad_accum = 1;
    t.steps = 64, t.sched.warmup = 5, t.sched.lr = 3e-3f, t.sched.min_lr = 3e-4f;
    t.val_every = 0, t.threads = 1, t.quiet = 1, t.peak_flops = 1e11;
    t.health.window = 16, t.health.min_history = 8; /* as test_health_train: early descent out of the median */
    t.comm = c, t.tp = atoi(argv[3]), t.pp = argc > 8 ? atoi(argv[8]) : 1;
    int rc = health_policy_parse(argv[4], &t.health.policy) != 0 ? 2 : 0;
    t.debug_spike_step = atol(argv[5]), t.debug_nan_step = atol(argv[6]), t.ckpt_every = atoi(argv[7]);
    if (t.ckpt_every > 0) snprintf(t.ckpt_dir, sizeof t.ckpt_dir, "%s/%s_ck", dir, name);
    TrainResult r;
    if (rc == 0 && train_run(&t, &r, &err) != ST_OK) {
        fprintf(stderr, "tp_worker: run %s: %s\n", name, err.msg);
        rc = 1;
    }
    comm_finalize(c);
    return rc;
}
