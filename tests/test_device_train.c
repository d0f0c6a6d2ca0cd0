/* test_device_train.c — `scaletrain train --device DEV` in one process against the CPU path (issue 25):
 * the trainer's device path (moments in device memory, norm and update through the table, checkpoints
 * and --init-from through host copies) end to end.
 *
 * Modes: `emu` (CTest): DEV is the test-only emulated device (train/devemu.h: the CPU table whose
 * memory is mprotect'ed except inside a table entry, so a host dereference of a parameter, gradient
 * or moment is a SIGSEGV), enabled by the fault ST_TRAIN_TEST_EMULATED_DEVICE=1; `cuda` (make
 * test-gpu): DEV is the GPU.
 *
 * Oracle: the CPU run from the same seed on the same batches, for GPT-2 tiny (dropout 0.1, AdamW,
 * clip 1.0, 2 micro-batches per step, validation) and a Llama with 4 query / 2 KV heads (SGD with
 * momentum in emu; AdamW in cuda), 10 steps: each step's loss and gradient norm <= 1e-5 relative,
 * final weights per tensor <= 1e-4 (rc_weights_rel). Resume: 5 steps on the device, then 5 on the
 * CPU from its checkpoint (and the other way round) against the CPU's 10 uninterrupted, with the log
 * showing a real resume (tu_log_resumed), and device to CPU again with the device's checkpoint
 * written by the asynchronous saver (--ckpt-async: its copy out through to_host); --init-from a CPU
 * run's weights, 3 steps, against the CPU.
 * On the emulated device every comparison is expected (and printed) bit for bit or within 1e-15.
 * Negative controls: the device run with its reduced gradients scaled by 1.001 (ST_PAR_TEST_GRAD_SCALE)
 * must fail the norm comparison; emu: the checkpoint copy out reading the parameters with memcpy
 * instead of to_host (ST_PAR_TEST_DEVICE_BYPASS) must be stopped by a signal; --log-layer-stats
 * (3 steps) against the CPU's: gradient and weight norms per block <= 1e-5, update norms <= 1e-3,
 * with the x1.001 gradients as its control; every refused
 * combination says so in one line (--sample-every runs on the device: test_device_sample).
 *
 * Mode `dp MPIEXEC` (CTest test_device_train_dp with emu; make test-gpu with cuda): two ranks under
 * mpirun sharing the one device (dp 2; the gradient collectives staged through host memory,
 * parallel/dev_stage.c), GPT-2 tiny with dropout 0.1, AdamW, clip 1.0, global batch 8 sequences, at
 * ZeRO 0, 1, 2 and 3. Oracle: one process on the CPU and one process on the device with the same
 * global batch, 10 steps, within test_dp's tolerances (losses 1e-8, norms 1e-6, weights 1e-5; cuda
 * against the CPU: the 1e-5 / 1e-4 above), every rank logging the same norm; the dp 2 device
 * checkpoint of step 5 (ZeRO 0 and 3) resumed by one process on the CPU; emu: bf16 at ZeRO 1 and 3
 * against dp 2 on the CPU. Negative control: the reduced first gradient bucket not copied back to the
 * device (ST_PAR_TEST_STAGE_FAULT=1) must fail against the CPU (ZeRO 0 and 3); --pp 2, --tp 2 and
 * --ckpt-async (the sharded writer copies with memcpy) on the device refused in one line. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "model/layout.h"
#include "runcmp.h"
#include "testutil.h"

#define DIR ST_BINARY_DIR "/test_device_train"
#define STEPS 10

static const char *g_bin, *g_dev, *g_env;

static const char *ARCH[2] = {
    "--layers 2 --heads 2 --channels 32 --max-seq-len 32 --dropout 0.1 --grad-accum 2 --val-data " DIR
    "/val.bin --val-every 5",
    "--arch llama --layers 2 --heads 4 --kv-heads 2 --channels 32 --ffn 48 --max-seq-len 32"};

/* One run: device dev ("cpu" or g_dev), extra flags; log DIR/name.jsonl (appended when append). */
static int train(const char *name, int arch, const char *dev, const char *env, const char *extra, int append) {
    char cmd[4096], lg[1200];
    snprintf(lg, sizeof lg, "%s/%s.jsonl", DIR, name);
    if (!append) { /* a run that fails must not be compared by an earlier run's files */
        remove(lg);
        snprintf(cmd, sizeof cmd, "rm -rf %s/%s_out", DIR, name);
        tu_shell(cmd);
    }
    char common[2048];
    snprintf(cmd, sizeof cmd, "%s %s %s train --data %s/train.bin %s %s --device %s --log %s --out %s/%s_out %s",
             strcmp(dev, "cpu") ? g_env : "", env ? env : "", g_bin, DIR, ARCH[arch],
             tu_less_given(common, sizeof common, "--seq-len 32 --micro-batch 2 --lr 2e-3 --min-lr 2e-4 --warmup 3 --threads 1 "
                        "--quiet", extra), dev, lg, DIR, name, extra ? extra : "");
    return rc_run(DIR, name, cmd, NULL);
}

/* name against ref: losses and norms per step, final weights per tensor; 1 if within tolerance. */
static int compare(const char *label, const char *name, const char *ref, const ParamLayout *pl, int steps, int quiet) {
    double dl, dn, key = 0;
    RcLog la;
    int ok = rc_log_diffs(DIR, name, ref, steps, &dl, &dn, &la);
    float *a = rc_weights(DIR, name, pl), *b = rc_weights(DIR, ref, pl);
    double dw = a && b ? rc_weights_rel(pl, a, b, &key) : NAN;
    int pass = ok && dl <= 1e-5 && dn <= 1e-5 && dw <= 1e-4 && key <= 1e-4;
    if (!quiet)
        tu_check(pass, label, "%d steps: losses %.3g, norms %.3g (tol 1e-5), weights %.3g, key bias %.3g (tol 1e-4)%s",
                 steps, dl, dn, dw, key, ok ? "" : " [a log lacks steps]");
    else
        printf("  %s: losses %.3g, norms %.3g, weights %.3g\n", label, dl, dn, dw);
    free(a), free(b);
    return pass;
}

static void resumed(const char *label, const char *name, long from) {
    char lg[1200], why[512];
    snprintf(lg, sizeof lg, "%s/%s.jsonl", DIR, name);
    tu_check(tu_log_resumed(lg, from, STEPS, 1, 1, why, sizeof why), label, "%s", why);
}

static void one_model(int arch, const char *tag, const char *opt) {
    ParamLayout pl;
    ModelConfig mc = {2, arch ? 4 : 2, 32, 97, 0, 32, 0.0f};
    if (arch) mc.arch = ARCH_LLAMA, mc.n_kv_head = 2, mc.ffn = 48, mc.untied = 1; /* the CLI's Llama head: untied */
    Err e;
    if (model_config_validate(&mc, &e) != ST_OK || layout_init(&pl, &mc, 1) != 0) {
        tu_check(0, tag, "layout: %s", e.msg);
        return;
    }
    char n[9][64], lbl[128], extra[1600];
    const char *suffix[9] = {"cpu", "dev", "d2c", "c2d", "init_cpu", "init_dev", "ctl", "bypass", "d2c_async"};
    for (int i = 0; i < 9; i++) snprintf(n[i], sizeof n[i], "%s_%s", tag, suffix[i]);
    snprintf(extra, sizeof extra, "--steps %d %s", STEPS, opt);
    int rc = train(n[0], arch, "cpu", NULL, extra, 0);
    tu_check(rc == 0, tag, "the CPU run exits 0 (got %d)", rc);
    rc = train(n[1], arch, g_dev, NULL, extra, 0);
    snprintf(lbl, sizeof lbl, "%s_device_vs_cpu", tag);
    tu_check(rc == 0, lbl, "the %s run exits 0 (got %d; %s/%s.out)", g_dev, rc, DIR, n[1]);
    compare(lbl, n[1], n[0], &pl, STEPS, 0);
    /* resume both ways: 5 steps on one, the checkpoint, 5 on the other; then device to CPU again
     * with the device's checkpoint written by the asynchronous saver (--ckpt-async) */
    for (int w = 0; w < 3; w++) {
        const char *first = w == 1 ? "cpu" : g_dev, *second = w == 1 ? g_dev : "cpu", *nm = w < 2 ? n[2 + w] : n[8];
        const char *async = w == 2 ? "--ckpt-async" : "";
        char ck[1400], cmd[1500];
        snprintf(ck, sizeof ck, "%s/%s_ckpt", DIR, nm);
        snprintf(cmd, sizeof cmd, "rm -rf %s", ck);
        tu_shell(cmd);
        snprintf(extra, sizeof extra, "--steps %d --stop-after 5 --ckpt-dir %s %s %s", STEPS, ck, async, opt);
        int r1 = train(nm, arch, first, NULL, extra, 0);
        snprintf(extra, sizeof extra, "--steps %d --ckpt-dir %s --resume auto %s", STEPS, ck, opt);
        int r2 = train(nm, arch, second, NULL, extra, 1);
        snprintf(lbl, sizeof lbl, "%s_resume_%s_to_%s%s", tag, first, second, w == 2 ? "_async" : "");
        tu_check(r1 == 0 && r2 == 0, lbl, "both halves exit 0 (got %d, %d)", r1, r2);
        compare(lbl, nm, n[0], &pl, STEPS, 0);
        snprintf(lbl, sizeof lbl, "%s_resume_%s_to_%s%s_is_a_resume", tag, first, second, w == 2 ? "_async" : "");
        resumed(lbl, nm, 5);
    }
    /* --init-from the CPU run's weights */
    char init[1400];
    snprintf(init, sizeof init, "--steps 3 --init-from %s/%s_out/model.safetensors %s", DIR, n[0], opt);
    int i1 = train(n[4], arch, "cpu", NULL, init, 0), i2 = train(n[5], arch, g_dev, NULL, init, 0);
    snprintf(lbl, sizeof lbl, "%s_init_from", tag);
    tu_check(i1 == 0 && i2 == 0, lbl, "both runs exit 0 (got %d, %d)", i1, i2);
    compare(lbl, n[5], n[4], &pl, 3, 0);
    /* eval of the CPU run's weights on both: the loss sum over the validation shard */
    double nats[2] = {NAN, NAN};
    for (int d = 0; d < 2; d++) {
        char cmd[2048];
        snprintf(cmd, sizeof cmd, "%s %s eval %s/%s_out --data %s/val.bin --device %s --json --quiet --threads 1",
                 d ? g_env : "", g_bin, DIR, n[0], DIR, d ? g_dev : "cpu");
        cJSON *o = rc_command_json(cmd);
        nats[d] = o ? rc_num(o, "loss_sum_nats") : NAN;
        cJSON_Delete(o);
    }
    double de = fabs(nats[1] - nats[0]) / fabs(nats[0]);
    snprintf(lbl, sizeof lbl, "%s_eval", tag);
    tu_check(de <= 1e-5, lbl, "eval --device %s: loss sum %.17g vs cpu %.17g, relative %.3g (tol 1e-5)", g_dev, nats[1],
             nats[0], de);
    /* control: the device's reduced gradients x1.001 must fail the comparison */
    snprintf(extra, sizeof extra, "--steps %d %s", STEPS, opt);
    rc = train(n[6], arch, g_dev, "ST_PAR_TEST_GRAD_SCALE=1.001", extra, 0);
    snprintf(lbl, sizeof lbl, "%s_control_grads_x1.001_fails", tag);
    int c = compare(lbl, n[6], n[0], &pl, STEPS, 1);
    tu_check(rc == 0 && !c, lbl, "the scaled run exits 0 (got %d) and fails the comparison", rc);
    /* control (emu): a host memcpy of device parameters is stopped */
    if (!strcmp(g_dev, "emu")) {
        rc = train(n[7], arch, g_dev, "ST_PAR_TEST_DEVICE_BYPASS=1", extra, 0);
        char path[1400];
        snprintf(path, sizeof path, "%s/%s.out", DIR, n[7]);
        char *out = tu_slurp(path);
        /* a SIGSEGV: the shell's 139, rc_run's -1, or ASan's report of it (exit 1) */
        int segv = rc == 139 || rc == -1 || (out && strstr(out, "SEGV"));
        snprintf(lbl, sizeof lbl, "%s_control_host_read_of_device_memory_stopped", tag);
        tu_check(rc != 0 && segv, lbl,
                 "the checkpoint copy reading the parameters without to_host: exit %d, SIGSEGV %s (expected)", rc,
                 segv ? "yes" : "no");
        free(out);
    }
    layout_free(&pl);
}

/* The worst relative difference between two runs' step records' layer_stats array `key` (all steps,
 * all groups); INFINITY when a record or an array is missing or their counts differ. */
static double layer_stats_diff(const char *a, const char *b, const char *key) {
    cJSON *ra = rc_records(DIR, a), *rb = rc_records(DIR, b);
    double worst = 0;
    int steps = 0;
    const cJSON *x, *y = NULL;
    cJSON_ArrayForEach(x, ra) {
        if (!rc_event(x) || strcmp(rc_event(x), "step")) continue;
        do y = y ? y->next : (rb ? rb->child : NULL);
        while (y && (!rc_event(y) || strcmp(rc_event(y), "step")));
        const cJSON *ax = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(x, "layer_stats"), key);
        const cJSON *ay = y ? cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(y, "layer_stats"), key)
                            : NULL;
        if (!cJSON_IsArray(ax) || !cJSON_IsArray(ay) || cJSON_GetArraySize(ax) != cJSON_GetArraySize(ay) ||
            cJSON_GetArraySize(ax) < 2) {
            worst = INFINITY;
            break;
        }
        for (int i = 0; i < cJSON_GetArraySize(ax); i++) {
            double u = cJSON_GetArrayItem(ax, i)->valuedouble, v = cJSON_GetArrayItem(ay, i)->valuedouble;
            double d = fabs(u - v) / (fabs(v) > 0 ? fabs(v) : 1.0);
            if (!(d <= worst)) worst = isnan(d) ? INFINITY : d;
        }
        steps++;
    }
    cJSON_Delete(ra), cJSON_Delete(rb);
    return steps ? worst : INFINITY;
}

/* --log-layer-stats on the device (gradients and weights copied to the host) against the CPU's,
 * 3 steps of GPT-2: the per-block gradient and weight norms <= 1e-5 relative, the update norms
 * (differences of weights a few ulps apart) <= 1e-3; control: the device's gradients x1.001 must
 * move the gradient norms past 1e-5. */
static void layer_stats(void) {
    const char *f = "--steps 3 --log-layer-stats";
    int r0 = train("ls_cpu", 0, "cpu", NULL, f, 0), r1 = train("ls_dev", 0, g_dev, NULL, f, 0);
    int r2 = train("ls_ctl", 0, g_dev, "ST_PAR_TEST_GRAD_SCALE=1.001", f, 0);
    double g = layer_stats_diff("ls_dev", "ls_cpu", "grad_norm"), w = layer_stats_diff("ls_dev", "ls_cpu", "weight_norm");
    double u = layer_stats_diff("ls_dev", "ls_cpu", "update_norm"), gc = layer_stats_diff("ls_ctl", "ls_cpu", "grad_norm");
    tu_check(r0 == 0 && r1 == 0 && g <= 1e-5 && w <= 1e-5 && u <= 1e-3, "layer_stats_device_vs_cpu",
             "exit %d, %d; worst relative difference: gradient norms %.3g, weight norms %.3g (tol 1e-5), update norms "
             "%.3g (tol 1e-3)",
             r0, r1, g, w, u);
    tu_check(r2 == 0 && gc > 1e-5 && isfinite(gc), "layer_stats_control_grads_x1.001",
             "gradient norms %.3g from the CPU's (must exceed 1e-5)", gc);
}

/* Every combination the device path does not have is refused with one line naming it. */
static void refusals(void) {
    static const char *flag[][2] = {{"--optimizer muon", "--optimizer muon"}, {"--optimizer sophia", "--optimizer sophia"},
                                    {"--optimizer shampoo", "--optimizer shampoo"}, {"--lora-rank 2", "--lora-rank"}};
    for (size_t i = 0; i < sizeof flag / sizeof flag[0]; i++) {
        char extra[256], path[1400], nm[32];
        snprintf(nm, sizeof nm, "refuse%zu", i);
        snprintf(extra, sizeof extra, "--steps 2 %s", flag[i][0]);
        int rc = train(nm, 0, g_dev, NULL, extra, 0);
        snprintf(path, sizeof path, "%s/%s.out", DIR, nm);
        char *out = tu_slurp(path);
        int lines = 0;
        for (char *p = out; p && *p; p++) lines += *p == '\n';
        tu_check(rc != 0 && out && strstr(out, flag[i][1]) && strstr(out, "--device") && lines == 1, nm,
                 "%s on the device: exit %d, one line naming it: %.300s", flag[i][0], rc, out ? out : "(no output)");
        free(out);
    }
}

/* ---------------------------------------------------------------- dp: several processes on one device */

/* test_dp's tolerances (summation order across ranks; AdamW, clip 1.0): losses, norms, weights, key bias:
 * dp 2 against one process on the same backend, and on emu (the CPU's kernels) against the CPU. A GPU
 * against the CPU: this file's device tolerances (its kernels are not the CPU's). */
static const RcTol DP_TOL = {1e-8, 1e-6, 1e-5, 1e-4}, DEV_TOL = {1e-5, 1e-5, 1e-4, 1e-4};
static const char *g_mpi;

#define DP_MODEL "--layers 2 --heads 2 --channels 32 --max-seq-len 32 --dropout 0.1"

/* One dp run: np 0 = one process without a launcher, else np ranks under mpirun sharing the device
 * (each rank takes micro-batch 2 x accumulation 4/np: the global batch is 8 sequences at any np). env
 * "VAR=value" (or NULL) goes to every rank; append keeps the log (a resumed run continues it). */
static int dp_train(const char *name, int np, const char *dev, const char *env, const char *extra, int append) {
    char cmd[4096], launch[1024] = "", pre[256] = "", lg[1200];
    snprintf(lg, sizeof lg, "%s/%s.jsonl", DIR, name);
    if (!append) {
        remove(lg);
        snprintf(cmd, sizeof cmd, "rm -rf %s/%s_out", DIR, name);
        tu_shell(cmd);
    }
    const char *denv = strcmp(dev, "cpu") ? g_env : "";
    snprintf(pre, sizeof pre, "%s %s", denv, env ? env : "");
    if (np > 0) { /* -x passes each variable set above to the ranks */
        char xs[256] = "";
        const char *vars[2] = {denv, env ? env : ""};
        for (int i = 0; i < 2; i++)
            if (vars[i][0])
                snprintf(xs + strlen(xs), sizeof xs - strlen(xs), " -x %.*s", (int)strcspn(vars[i], "="), vars[i]);
        snprintf(launch, sizeof launch, "timeout 120 %s --allow-run-as-root --oversubscribe -np %d -x OMP_NUM_THREADS=1%s",
                 g_mpi, np, xs);
    }
    snprintf(cmd, sizeof cmd,
             "%s %s %s train --data %s/train.bin " DP_MODEL " --seq-len 32 --micro-batch 2 --grad-accum %d --lr 2e-3 "
             "--min-lr 2e-4 --warmup 3 --threads 1 --quiet --device %s --log %s --out %s/%s_out %s",
             pre, launch, g_bin, DIR, 4 / (np > 0 ? np : 1), dev, lg, DIR, name, extra ? extra : "");
    return rc_run(DIR, name, cmd, NULL);
}

/* name against ref within t, without checks of its own: 1 if it passes (the controls' comparison). */
static int dp_close(const char *name, const char *ref, const ParamLayout *pl, RcTol t, RcTol *got) {
    double dl, dn, key = INFINITY;
    RcLog la;
    int ok = rc_log_diffs(DIR, name, ref, STEPS, &dl, &dn, &la);
    float *a = rc_weights(DIR, name, pl), *b = rc_weights(DIR, ref, pl);
    double dw = a && b ? rc_weights_rel(pl, a, b, &key) : INFINITY;
    free(a), free(b);
    if (got) *got = (RcTol){dl, dn, dw, key};
    return ok && dl <= t.loss && dn <= t.norm && dw <= t.w && key <= t.key;
}

/* The dp 2 device checkpoint of step 5 at ZeRO `zero` resumed by one process on the CPU, against the
 * CPU's uninterrupted run (weights wcpu) within t; the log must show the resume. */
static void dp_resume(int zero, const ParamLayout *pl, const float *wcpu, RcTol t) {
    char rn[32], ck[1400], cmd[1500], lg[1200], why[512], extra[1600], lbl[160];
    snprintf(rn, sizeof rn, "dp_d2c_z%d", zero);
    snprintf(ck, sizeof ck, "%s/%s_ckpt", DIR, rn);
    snprintf(cmd, sizeof cmd, "rm -rf %s", ck);
    tu_shell(cmd);
    snprintf(extra, sizeof extra, "--steps %d --zero %d --stop-after 5 --ckpt-dir %s", STEPS, zero, ck);
    int a = dp_train(rn, 2, g_dev, NULL, extra, 0);
    snprintf(extra, sizeof extra, "--steps %d --ckpt-dir %s --resume auto", STEPS, ck);
    int b = dp_train(rn, 0, "cpu", NULL, extra, 1);
    snprintf(lbl, sizeof lbl, "%s_runs", rn);
    tu_check(a == 0 && b == 0, lbl, "dp 2 on %s to step 5, then one process on cpu: exit %d, %d", g_dev, a, b);
    rc_compare(DIR, rn, "dp_cpu1", STEPS, pl, wcpu, t, NULL);
    snprintf(lg, sizeof lg, "%s/%s.jsonl", DIR, rn);
    snprintf(lbl, sizeof lbl, "%s_is_a_resume", rn);
    tu_check(tu_log_resumed(lg, 5, STEPS, 2, 1, why, sizeof why), lbl, "%s", why);
}

static void dp_mode(void) {
    ParamLayout pl;
    ModelConfig mc = {2, 2, 32, 97, 0, 32, 0.0f};
    Err e;
    if (model_config_validate(&mc, &e) != ST_OK || layout_init(&pl, &mc, 1) != 0) {
        tu_check(0, "dp_layout", "layout: %s", e.msg);
        return;
    }
    char steps[64], extra[1600], lbl[160];
    snprintf(steps, sizeof steps, "--steps %d", STEPS);
    /* the references: one process on the CPU and on the device, the same global batch */
    int r0 = dp_train("dp_cpu1", 0, "cpu", NULL, steps, 0), r1 = dp_train("dp_dev1", 0, g_dev, NULL, steps, 0);
    tu_check(r0 == 0 && r1 == 0, "dp_references", "one process on cpu and on %s exit 0 (got %d, %d)", g_dev, r0, r1);
    float *wcpu = rc_weights(DIR, "dp_cpu1", &pl), *wdev = rc_weights(DIR, "dp_dev1", &pl);
    RcTol tcpu = strcmp(g_dev, "emu") ? DEV_TOL : DP_TOL; /* against the CPU */
    for (int zero = 0; zero <= 3; zero++) {
        char nm[32];
        snprintf(nm, sizeof nm, "dp_dev2_z%d", zero);
        snprintf(extra, sizeof extra, "%s --zero %d", steps, zero);
        int rc = dp_train(nm, 2, g_dev, NULL, extra, 0);
        snprintf(lbl, sizeof lbl, "%s_runs", nm);
        tu_check(rc == 0, lbl, "mpirun -np 2 train --device %s --zero %d exits 0 (got %d; %s/%s.out)", g_dev, zero, rc,
                 DIR, nm);
        rc_compare(DIR, nm, "dp_cpu1", STEPS, &pl, wcpu, tcpu, NULL);
        rc_compare(DIR, nm, "dp_dev1", STEPS, &pl, wdev, DP_TOL, NULL);
        /* ZeRO 0's whole state and ZeRO 3's shards of parameters and moments (ZeRO 1-2's moments are
         * gathered as ZeRO 3's) */
        if (zero == 0 || zero == 3) dp_resume(zero, &pl, wcpu, tcpu);
        /* control: the reduced first bucket not copied back to the device must fail; run at ZeRO 0 (the
         * slots, also ZeRO 1's) and ZeRO 3 (the bucket twins, also ZeRO 2's) */
        if (zero == 1 || zero == 2) continue;
        char cn[32];
        snprintf(cn, sizeof cn, "dp_ctl_z%d", zero);
        snprintf(extra, sizeof extra, "%s --zero %d", steps, zero);
        rc = dp_train(cn, 2, g_dev, "ST_PAR_TEST_STAGE_FAULT=1", extra, 0);
        RcTol got;
        int pass = dp_close(cn, "dp_cpu1", &pl, tcpu, &got);
        snprintf(lbl, sizeof lbl, "%s_skipped_copy_back_fails", cn);
        tu_check(rc == 0 && !pass, lbl, "exit %d; against one process: losses %.3g, norms %.3g, weights %.3g (must fail)",
                 rc, got.loss, got.norm, got.w);
    }
    /* Pieces on the device (issue 28): every dp collective split at 1000 floats (ST_PAR_TEST_BUCKET):
     * ZeRO 1 runs its gradient and parameter pieces on the host slots, ZeRO 2 its reduce-scatter
     * pieces on the bucket twins; the final weights must equal the same device runs unsplit bit for
     * bit (the ring's summation order is the segment's). Control of the comparison: the same memcmp
     * against the one-process device run must see a difference. */
    for (int zero = 1; zero <= 2; zero++) {
        char nm[32], whole[32];
        snprintf(nm, sizeof nm, "dp_dev2_z%d_pieces", zero);
        snprintf(whole, sizeof whole, "dp_dev2_z%d", zero);
        snprintf(extra, sizeof extra, "%s --zero %d", steps, zero);
        int rc = dp_train(nm, 2, g_dev, "ST_PAR_TEST_BUCKET=1000", extra, 0);
        float *wp = rc_weights(DIR, nm, &pl), *ww = rc_weights(DIR, whole, &pl);
        int same = rc == 0 && wp && ww && !memcmp(wp, ww, pl.total * sizeof(float));
        snprintf(lbl, sizeof lbl, "%s_bit_identical_to_unsplit", nm);
        tu_check(same, lbl, "exit %d; final weights in pieces vs one collective per segment, memcmp", rc);
        if (zero == 1) {
            snprintf(lbl, sizeof lbl, "%s_control_differs_from_one_process", nm);
            tu_check(wp && wdev && memcmp(wp, wdev, pl.total * sizeof(float)), lbl,
                     "the same memcmp against dp_dev1 must see a difference");
        }
        free(wp), free(ww);
    }
    /* emu, bf16 at ZeRO 1 and 3: dp 2 on the device against dp 2 on the CPU (the same grid, so the same
     * summation order: the working copy re-rounded on the device after ZeRO 1's parameter all-gather
     * and after each of ZeRO 3's gathers is checked against the CPU's; expected bit for bit). On a GPU bf16 has no such twin (its kernels round
     * elsewhere than the CPU's): not run there. */
    for (int zero = 1; zero <= 3 && !strcmp(g_dev, "emu"); zero += 2) {
        char nc[32], nd[32];
        snprintf(nc, sizeof nc, "dp_bf16_cpu2_z%d", zero);
        snprintf(nd, sizeof nd, "dp_bf16_dev2_z%d", zero);
        snprintf(extra, sizeof extra, "%s --zero %d --precision bf16", steps, zero);
        int a = dp_train(nc, 2, "cpu", NULL, extra, 0), b = dp_train(nd, 2, g_dev, NULL, extra, 0);
        snprintf(lbl, sizeof lbl, "%s_runs", nd);
        tu_check(a == 0 && b == 0, lbl, "bf16 dp 2 on cpu and on %s at ZeRO %d exit 0 (got %d, %d)", g_dev, zero, a, b);
        float *wc = rc_weights(DIR, nc, &pl), *wd = rc_weights(DIR, nd, &pl);
        rc_compare(DIR, nd, nc, STEPS, &pl, wc, DP_TOL, NULL);
        printf("  %s: final weights %s the CPU's bit for bit\n", nd,
               wc && wd && !memcmp(wc, wd, pl.total * sizeof(float)) ? "equal" : "NOT equal");
        free(wc), free(wd);
    }
    /* what the device does not run under dp: refused in one line naming the flag */
    static const char *flag[][2] = {{"--pp 2", "--pp"}, {"--tp 2", "--tp"},
                                    {"--ckpt-async --ckpt-dir " DIR "/dp_refuse_ckpt", "--ckpt-async"}};
    for (int i = 0; i < 3; i++) {
        char nm[32], path[1400];
        snprintf(nm, sizeof nm, "dp_refuse%d", i);
        snprintf(extra, sizeof extra, "--steps 2 %s", flag[i][0]);
        int rc = dp_train(nm, 2, g_dev, NULL, extra, 0);
        snprintf(path, sizeof path, "%s/%s.out", DIR, nm);
        char *out = tu_slurp(path), *line = out ? strstr(out, "scaletrain train:") : NULL;
        int one = line && strstr(line, flag[i][1]) && strstr(line, "--device") &&
                  (!strchr(line, '\n') || !strstr(strchr(line, '\n'), "scaletrain train:"));
        tu_check(rc != 0 && one, nm, "mpirun -np 2 %s on the device: exit %d, one line naming it: %.*s", flag[i][0], rc,
                 line ? (int)strcspn(line, "\n") : 6, line ? line : "(none)");
        free(out);
    }
    free(wcpu), free(wdev);
    layout_free(&pl);
}

int main(int argc, char **argv) {
    if (argc < 3 || (strcmp(argv[2], "emu") && strcmp(argv[2], "cuda")) ||
        (argc > 3 && (argc != 5 || strcmp(argv[3], "dp")))) {
        fprintf(stderr, "usage: test_device_train SCALETRAIN emu|cuda [dp MPIEXEC]\n");
        return 2;
    }
    g_bin = argv[1], g_dev = argv[2];
    g_env = !strcmp(g_dev, "emu") ? "ST_TRAIN_TEST_EMULATED_DEVICE=1" : "";
    rc_make_data(DIR);
    rc_make_val_data(DIR, "val.bin", 0);
    if (argc == 5) {
        g_mpi = argv[4];
        printf("test_device_train dp: mpirun -np 2 train --device %s (ranks sharing the device) against one process "
               "on cpu and on %s, %d steps\n", g_dev, g_dev, STEPS);
        dp_mode();
        return tu_exit();
    }
    printf("test_device_train: --device %s against --device cpu, %d steps\n", g_dev, STEPS);
    one_model(0, "gpt2", "");
    one_model(1, "llama_gqa", !strcmp(g_dev, "emu") ? "--optimizer sgd --grad-clip 0 --lr 0.1 --min-lr 0.01" : "");
    layer_stats();
    refusals();
    return tu_exit();
}
