/* test_health_train.c — the trainer's health actions end to end.
 *
 * Oracles: a run with one corrupted batch (random targets, injected by a test hook) is flagged
 * at exactly that step; under `skip` its final weights equal (memcmp) a run that never trained on
 * that batch; injected NaN gradients are skipped under any policy and the weights equal the same
 * "without that batch" run; `rollback` reloads the last checkpoint and skips the batches since,
 * giving the weights of a run that dropped those batches after the checkpoint. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileio.h"
#include "data/shard.h"
#include "testutil.h"
#include "train/train.h"

#define DIR ST_BINARY_DIR "/test_health_train"

static void make_data(void) {
    Err e;
    file_mkdirs(DIR, &e);
    enum { N = 30000 };
    static uint32_t tok[N];
    /* Learnable: a repeating pattern with a little variety. */
    for (int i = 0; i < N; i++) tok[i] = (uint32_t)((i % 17) * 3 + (i / 170) % 5);
    ShardMeta meta = {0, N, 64};
    if (shard_write(DIR "/train.bin", tok, N, &meta, &e) != ST_OK) printf("%s\n", e.msg), exit(1);
}

static TrainConfig base(const char *name) {
    TrainConfig c = train_default_config();
    c.model = (ModelConfig){2, 2, 32, 64, 0, 32, 0.0f};
    snprintf(c.data, sizeof c.data, DIR "/train.bin");
    snprintf(c.out_dir, sizeof c.out_dir, DIR "/%s_out", name);
    snprintf(c.log_path, sizeof c.log_path, DIR "/%s.jsonl", name);
    c.micro_batch = 4, c.seq_len = 32, c.grad_accum = 1;
    c.steps = 64, c.sched.warmup = 5, c.sched.lr = 3e-3f, c.sched.min_lr = 3e-4f;
    c.val_every = 0, c.threads = 2, c.quiet = 1, c.peak_flops = 1e11;
    /* A short window: early training's fast descent must not dominate the median. */
    c.health.window = 16, c.health.min_history = 8;
    return c;
}

static TrainResult run(TrainConfig *c) {
    TrainResult r;
    Err e;
    if (train_run(c, &r, &e) != ST_OK) printf("train_run: %s\n", e.msg), exit(1);
    return r;
}

static int same_weights(const char *a, const char *b) {
    char pa[512], pb[512], *x, *y;
    size_t nx, ny;
    Err e;
    snprintf(pa, sizeof pa, DIR "/%s_out/model.safetensors", a);
    snprintf(pb, sizeof pb, DIR "/%s_out/model.safetensors", b);
    if (file_read_all(pa, &x, &nx, &e) != ST_OK) return 0;
    if (file_read_all(pb, &y, &ny, &e) != ST_OK) return free(x), 0;
    int same = nx == ny && !memcmp(x, y, nx);
    free(x), free(y);
    return same;
}

/* The step of the first event `kind` in a log, -1 if none. */
static long first_event_step(const char *name, const char *kind) {
    char path[512], *text, pat[64];
    size_t len;
    Err e;
    snprintf(path, sizeof path, DIR "/%s.jsonl", name);
    if (file_read_all(path, &text, &len, &e) != ST_OK) return -1;
    snprintf(pat, sizeof pat, "{\"event\":\"%s\",\"step\":", kind);
    char *p = strstr(text, pat);
    long s = p ? atol(p + strlen(pat)) : -1;
    free(text);
    return s;
}

int main(void) {
    system("rm -rf " DIR);
    make_data();
    TrainConfig clean = base("clean");
    run(&clean);
    tu_check(first_event_step("clean", "spike") == -1, "no false spike on a clean run", "first spike %ld",
             first_event_step("clean", "spike"));

    TrainConfig logp = base("log");
    logp.debug_spike_step = 50;
    TrainResult rl = run(&logp);
    tu_check(first_event_step("log", "spike") == 50 && rl.spikes == 1, "corrupted batch flagged at its step (policy log)",
             "first spike at step %ld, %ld spikes", first_event_step("log", "spike"), rl.spikes);

    TrainConfig skip = base("skip");
    skip.debug_spike_step = 50;
    skip.health.policy = HEALTH_POLICY_SKIP;
    TrainResult rs = run(&skip);
    TrainConfig without = base("without50");
    without.debug_drop_first = without.debug_drop_last = 50;
    run(&without);
    tu_check(rs.skips == 1 && same_weights("skip", "without50"), "skip == a run without that batch (memcmp)",
             "skips %ld, weights %s", rs.skips, same_weights("skip", "without50") ? "identical" : "DIFFER");

    TrainConfig nan = base("nan");
    nan.debug_nan_step = 50;
    TrainResult rn = run(&nan);
    tu_check(rn.skips == 1 && same_weights("nan", "without50") && first_event_step("nan", "nonfinite") == 50,
             "NaN gradients never reach the weights (policy log)", "skips %ld, weights %s", rn.skips,
             same_weights("nan", "without50") ? "identical to the run without that batch" : "DIFFER");

    TrainConfig rb = base("rollback");
    rb.debug_spike_step = 55;
    rb.health.policy = HEALTH_POLICY_ROLLBACK;
    rb.ckpt_every = 20;
    snprintf(rb.ckpt_dir, sizeof rb.ckpt_dir, DIR "/rollback_ckpt");
    TrainResult rr = run(&rb);
    TrainConfig drop = base("drop41_55");
    drop.debug_drop_first = 41, drop.debug_drop_last = 55;
    run(&drop);
    tu_check(rr.rollbacks == 1 && first_event_step("rollback", "rollback") == 55 && same_weights("rollback", "drop41_55"),
             "rollback to step 40 skips batches 41..55 (== a run without them)", "rollbacks %ld, weights %s",
             rr.rollbacks, same_weights("rollback", "drop41_55") ? "identical" : "DIFFER");

    TrainConfig stop = base("stop");
    stop.debug_nan_step = 30;
    stop.health.max_nonfinite = 1;
    TrainResult rst;
    Err e;
    Status s = train_run(&stop, &rst, &e);
    tu_check(s == ST_ERR_RUNTIME && strstr(e.msg, "last good checkpoint"), "non-finite cap stops with a diagnosis",
             "%s", e.msg);
    return tu_exit();
}
