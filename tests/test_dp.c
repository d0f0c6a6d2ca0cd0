/* test_dp.c — data parallelism and ZeRO 0–3 end to end: `scaletrain train` under mpirun against
 * one process (issue 6; issue 12 made every check able to fail).
 *
 * Usage: test_dp MPIEXEC SCALETRAIN [equiv|scale|mixed|resume|fault|overlap|prefetch|mfu|peak|memory]
 *
 * Oracle: one process running the same global batch (micro-batch 2 × accumulation 4 = 8 sequences
 * per step; dp=2 runs accumulation 2, dp=4 accumulation 1), 20 steps, fp32. Every comparison covers
 * every step's loss AND its logged gradient norm (scale-sensitive: Adam, and clipping when it is
 * active, hide a constant gradient scale from the losses), every final tensor, and that every rank
 * computed the same norm (grad_norm_by_rank: `world` entries, bitwise equal to grad_norm).
 * Tolerances are the measured spread of summation order (20 steps, 1 thread per rank):
 *   AdamW (clip 1, active on 7 of 20 steps)  losses 1e-8 (measured ≤ 8.8e-9), norms 1e-6 (≤ 6.3e-8)
 *   SGD, lr 0.1, no clipping                 losses 2e-8 (measured ≤ 1.2e-8), norms 1e-6 (≤ 1.9e-7)
 *   weights 1e-5 relative norm per tensor (measured ≤ 8e-7); the qkv key bias by max abs diff 1e-4
 * A gradient scale error moves the norm by its factor: far outside 1e-6.
 *   equiv   AdamW: dp ∈ {2, 4} × ZeRO ∈ {0, 1, 2, 3}; every rank's allocated bytes of parameters,
 *           gradients and moments equal par_planned_bytes (the trainer's memory event); and whether
 *           dp=2 equals one process with the same two micro-batches bit for bit (reported).
 *           Negative control: a step record whose rank-1 norm is one ulp off is reported unequal.
 *   scale   SGD without clipping at dp ∈ {2, 4} × ZeRO 0–3, AdamW without clipping at dp 2 and 4.
 *           Negative control (test-only fault ST_PAR_TEST_GRAD_SCALE=2, the reduced gradients
 *           doubled on every rank: a sum-vs-mean error): with AdamW and a clip active on every step
 *           the losses stay within 1e-8 of the reference — the loss check cannot see it — and the
 *           norm check must; with SGD the losses show it too.
 *   mixed   bf16 at ZeRO 0–3, fp16 at ZeRO 1 and 3, dp 2, within 3× the spread a different
 *           micro-batch split shows in one process (see mixed()); norms identical on every rank.
 *   resume  4 ranks ZeRO-1 stop after step 10 → 2 ranks ZeRO-3 resume to 20; 1 process stops after
 *           10 → 2 ranks ZeRO-2 resume: losses and weights as the uninterrupted single process,
 *           and the log shows the resume (tu_log_resumed: the first run's steps 1..10 kept, a start
 *           record with resumed_from_step 10 on the new world, then step 11). Negative control: a
 *           resume pointed at an empty --ckpt-dir passes the comparison and is caught.
 *   fault   --dp 3 on 2 ranks refused naming 3 and 2; one rank with another --lr refused (config
 *           hash); a rank SIGKILLed mid-backward ends the job (non-zero, < 30 s, "signal 9").
 *   memory  per-rank bytes from two sides: `plan --json` (dp 2 and 4 × ZeRO 0–3 × fp32/bf16, the
 *           planner's analytic figure, memory_bytes.by_category) equals every rank's allocation
 *           (the memory record's measured_by_rank, what the ranks' allocators counted); each rank's resident memory above its baseline within 5% of its
 *           allocated total (dp 2 ZeRO 2 fp32, dp 4 ZeRO 3 bf16; 0.3 GB per rank). Negative
 *           controls: the plan of dp 1 differs; RSS against the allocation less the moments fails.
 *   overlap ZeRO's collectives split into pieces (issue 28; ST_PAR_TEST_BUCKET=1000 floats, so every
 *           segment of the test model has 4-13 pieces) and the stage 1-2 parameter all-gathers
 *           waited in the next forward's hooks: at dp 2 ZeRO 1-3 bit-identical (losses and grad
 *           norms as printed) to the same runs unsplit (control: the same comparison against the
 *           one-process run fails); one process in pieces bit-identical to unsplit (its pieces
 *           complete as they start; control: against dp 2 fails); dp 2 × ZeRO 0-3, dp 4 × ZeRO 2-3 and dp 2
 *           ZeRO 2 --no-overlap against the one-process reference (AdamW tolerances). Negative
 *           control (ST_PAR_TEST_GATHER_FAULT=1: the first piece of block 1's gather not waited
 *           before block 1's forward, started after it) at ZeRO 1 and 3: the losses must leave the
 *           tolerance by 10x.
 *   prefetch ZeRO 3 --no-overlap gathers each segment when needed: the step records'
 *           zero_gathers_ahead 0 at every step (overlapped: > 0), losses and grad norms bit-identical
 *           to the overlapped run. Negative control: ST_PAR_TEST_ZERO_PREFETCH=1 (the prefetch under
 *           --no-overlap) fails the zero check.
 *   mfu     MFU under MPI is the job's model FLOP/s over the sum of the ranks' peaks: the dp 2 step
 *           records satisfy mfu = flops_per_token · tokens/s / peak_flops_job with tokens/s the
 *           job's, peak_flops_job ≈ 2 × one rank's, every step below 1; the median within a factor
 *           of one process's (both 1 thread per process). Negative control: the figure with one
 *           rank's peak as denominator (the old bug) fails the peak check. The peak is the best of
 *           the FMA probe and a GEMM (issue 28): a probe that under-reports 10x
 *           (ST_TRAIN_TEST_PEAK_FAULT=probe) leaves MFU below 1, the GEMM named as the peak;
 *           negative control: the same probe with no GEMM measurement logs MFU above 1.
 *   peak    the per-machine peak cache: a second run reads the first's entry (same peak, kind
 *           "cached"); an entry keyed by another host is not used. Negative control: the planted
 *           entry keyed by this machine is used. `plan`'s default hardware: this machine's profile,
 *           measured once into the same cache, read from it (a planted profile is priced on, one
 *           keyed by another host is not), the cpu-zen4-2c preset without a cache.
 *           Threads against CPUs: a process pinned to one CPU (taskset -c 0) with --threads 2
 *           prints "2 threads on 1 CPU" and the warning, and its peak is measured and cached for
 *           1 thread (no 2-thread entry; control: a run on 2 CPUs adds one). mpirun --bind-to
 *           hwthread -np 2 --threads 2 warns for every rank; --bind-to none -np 2 with --threads =
 *           the online CPUs warns for the node. Without --threads (the default, machine_auto_threads,
 *           also against 10 closed forms): 1 thread pinned to one CPU, 2 on two, 1 per rank bound
 *           to a hardware thread, online/2 per rank unbound, none of them warned. Under OpenMP
 *           binding (OMP_PROC_BIND=close OMP_PLACES=cores, two CPUs): 2 threads auto, no warning
 *           with --threads 2, peaks cached for 2 threads only; control: one place gives 1. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/fileio.h"
#include "data/shard.h"
#include "model/layout.h"
#include "runcmp.h"
#include "testutil.h"
#include "train/machine_peak.h"

#define DIR ST_BINARY_DIR "/test_dp"
#define STEPS 20

typedef RcTol Tol; /* losses and norms: max rel per step; weights: per-tensor rel norm; key bias abs */
static const Tol ADAMW_TOL = {1e-8, 1e-6, 1e-5, 1e-4};
static const Tol SGD_TOL = {2e-8, 1e-6, 1e-5, 1e-4};
#define SGD "--optimizer sgd --grad-clip 0 --lr 0.1 --min-lr 0.01"

static const char *g_mpi, *g_bin;

/* Runs a shell command with output to DIR/name.out; returns the exit code (-1 on a signal). */
static int run(const char *name, const char *cmd, double *secs) { return rc_run(DIR, name, cmd, secs); }

/* A flag is given once (a second is refused): an extra with its own --lr (SGD) takes COMMON0. */
#define COMMON0                                                                                                      \
    "train --data " DIR "/train.bin --layers 2 --heads 2 --channels 32 --max-seq-len 32 --seq-len 32 --micro-batch 2 " \
    "--warmup 5 --val-every 0 --threads 1 --peak-gflops 100 --quiet"
#define COMMON_LR " --lr 2e-3 --min-lr 2e-4"
#define COMMON COMMON0 COMMON_LR


/* One training run: np 0 = one process without mpirun. env "VAR=value" (or NULL; several separated
 * by spaces) is set for every rank; append keeps the log (a resumed run continues it), else it is
 * removed first. */
static int train_env(const char *name, int np, int k, int zero, const char *extra, const char *env, int append,
                     double *secs) {
    char cmd[4096], launch[1024] = "", var[256] = "";
    for (const char *e = env; e && *e;) { /* "-x VAR " for each */
        size_t n = strcspn(e, "="), used = strlen(var);
        snprintf(var + used, sizeof var - used, "-x %.*s ", (int)n, e);
        e += strcspn(e, " ");
        e += strspn(e, " ");
    }
    if (np > 0)
        snprintf(launch, sizeof launch, "%s timeout 120 %s --allow-run-as-root --oversubscribe -np %d -x OMP_NUM_THREADS=1 %s",
                 env ? env : "", g_mpi, np, var);
    else if (env)
        snprintf(launch, sizeof launch, "%s ", env);
    char common[2048]; /* an extra's own flags (SGD's --lr, --micro-batch) replace COMMON's */
    snprintf(cmd, sizeof cmd,
             "%s%s %s --steps %d --grad-accum %d --zero %d --log %s/%s.jsonl --out %s/%s_out %s", launch, g_bin,
             tu_less_given(common, sizeof common, COMMON, extra), STEPS, k, zero, DIR, name, DIR, name, extra ? extra : "");
    char lg[1200];
    snprintf(lg, sizeof lg, "%s/%s.jsonl", DIR, name);
    if (!append) remove(lg);
    return run(name, cmd, secs);
}

static int train(const char *name, int np, int k, int zero, const char *extra, double *secs) {
    return train_env(name, np, k, zero, extra, NULL, 0, secs);
}

/* ---------------------------------------------------------------- the metrics log */

typedef RcLog Log; /* the step records of a run (runcmp.h) */

static double num(const cJSON *o, const char *k) { return rc_num(o, k); }
static cJSON *records(const char *name) { return rc_records(DIR, name); }
static int read_log(const char *name, Log *lg) { return rc_read_log(DIR, name, lg); }

/* Every step's loss and grad_norm of run `name` against `ref` (max relative difference); 1 if both
 * logs hold all STEPS steps. */
static int log_diffs(const char *name, const char *ref, double *loss, double *norm, Log *la) {
    return rc_log_diffs(DIR, name, ref, STEPS, loss, norm, la);
}

/* Every step record's "key" printed the same (as text: every bit) in logs a and b. */
static int field_text_equal(const char *a, const char *b, const char *key) {
    char pa[1200], pb[1200], k[64];
    snprintf(k, sizeof k, "\"%s\":", key);
    snprintf(pa, sizeof pa, "%s/%s.jsonl", DIR, a), snprintf(pb, sizeof pb, "%s/%s.jsonl", DIR, b);
    char *x = tu_slurp(pa), *y = tu_slurp(pb);
    int same = x && y;
    char *p = x, *q = y;
    while (same) {
        p = strstr(p, k), q = strstr(q, k);
        if (!p || !q) {
            same = !p && !q;
            break;
        }
        size_t np = strcspn(p, ","), nq = strcspn(q, ",");
        same = np == nq && !memcmp(p, q, np);
        p += np, q += nq;
    }
    free(x), free(y);
    return same;
}

static int loss_text_equal(const char *a, const char *b) { return field_text_equal(a, b, "loss"); }

/* Final weights of a run in the one-process layout (rc_weights). */
static float *weights(const char *name, const ParamLayout *pl) { return rc_weights(DIR, name, pl); }

/* Run `name` against `ref`: losses, gradient norms and per-rank norms at every step, final weights. */
static void compare_tol(const char *name, const char *ref, const ParamLayout *pl, const float *wref, Tol t) {
    rc_compare(DIR, name, ref, STEPS, pl, wref, t, NULL);
}

static void compare(const char *name, const char *ref, const ParamLayout *pl, const float *wref) {
    compare_tol(name, ref, pl, wref, ADAMW_TOL);
}

static void check_memory(const char *name) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s.jsonl", DIR, name);
    char *t = tu_slurp(path);
    char *m = t ? strstr(t, "\"event\":\"memory\"") : NULL;
    int ok = m && strstr(m, "\"planned_equals_measured\":true");
    char detail[512] = "no memory event";
    if (m) {
        char *pl = strstr(m, "\"planned\":"), *end = pl ? strstr(pl, "}") : NULL;
        if (pl && end) snprintf(detail, sizeof detail, "%.*s", (int)(end - pl + 1), pl);
    }
    char what[128];
    snprintf(what, sizeof what, "%s: per-rank bytes == planned", name);
    tu_check(ok, what, "%s", detail);
    free(t);
}

/* The layout of the test model (L=2 C=32 V=97, one process's padding) for reading weights. */
static void test_layout(ParamLayout *pl) {
    ModelConfig mc = {2, 2, 32, 97, 0, 32, 0};
    Err e;
    model_config_validate(&mc, &e);
    layout_init(pl, &mc, 1);
}

/* A dp run that must succeed: prints its time; a failure is reported and returns 0. */
static int train_ok(const char *name, int np, int k, int zero, const char *extra) {
    double secs;
    int rc = train(name, np, k, zero, extra, &secs);
    printf("%s: %.1f s\n", name, secs);
    if (rc != 0) tu_check(0, name, "exit %d, see %s/%s.out", rc, DIR, name);
    return rc == 0;
}

static void equiv(void) {
    ParamLayout pl;
    test_layout(&pl);
    double secs;
    if (train("ref_k4", 0, 4, 0, NULL, &secs) != 0) tu_check(0, "reference run", "see %s/ref_k4.out", DIR);
    float *wref = weights("ref_k4", &pl);
    for (int dp = 2; dp <= 4; dp += 2)
        for (int z = 0; z <= 3; z++) {
            char name[64];
            snprintf(name, sizeof name, "dp%d_zero%d", dp, z);
            if (!train_ok(name, dp, 4 / dp, z, NULL)) continue;
            compare(name, "ref_k4", &pl, wref);
            check_memory(name);
        }
    /* Negative control of the per-rank norm check: the last rank's norm of a real record one ulp off. */
    rc_check_norm_control(DIR, "dp4_zero0", 4);
    /* dp=2 against one process with the same two micro-batches (k=2): bit-exact? (reported) */
    train("ref_k2", 0, 2, 0, NULL, &secs);
    train("dp2_k1", 2, 1, 0, NULL, &secs);
    float *w1 = weights("ref_k2", &pl), *w2 = weights("dp2_k1", &pl);
    int same_w = w1 && w2 && !memcmp(w1, w2, pl.total * sizeof(float));
    int same_l = loss_text_equal("ref_k2", "dp2_k1");
    printf("dp=2 vs one process with the same two micro-batches: losses %s, weights %s\n",
           same_l ? "bit-identical" : "differ", same_w ? "bit-identical" : "differ");
    compare("dp2_k1", "ref_k2", &pl, w1);
    free(w1), free(w2), free(wref);
    layout_free(&pl);
}

/* Optimizers and clipping that do not hide a gradient scale, and the fault that Adam would hide. */
static void scale(void) {
    ParamLayout pl;
    test_layout(&pl);
    double secs;
    /* SGD without clipping: the update is proportional to the gradient. */
    if (train("ref_sgd", 0, 4, 0, SGD, &secs) != 0) tu_check(0, "reference run", "see %s/ref_sgd.out", DIR);
    float *wref = weights("ref_sgd", &pl);
    for (int dp = 2; dp <= 4; dp += 2)
        for (int z = 0; z <= 3; z++) {
            char name[64];
            snprintf(name, sizeof name, "sgd_dp%d_zero%d", dp, z);
            if (train_ok(name, dp, 4 / dp, z, SGD)) compare_tol(name, "ref_sgd", &pl, wref, SGD_TOL);
        }
    free(wref);
    /* AdamW without clipping. */
    if (train("ref_noclip", 0, 4, 0, "--grad-clip 0", &secs) != 0) tu_check(0, "reference run", "see %s/ref_noclip.out", DIR);
    wref = weights("ref_noclip", &pl);
    if (train_ok("noclip_dp2_zero1", 2, 2, 1, "--grad-clip 0")) compare("noclip_dp2_zero1", "ref_noclip", &pl, wref);
    if (train_ok("noclip_dp4_zero3", 4, 1, 3, "--grad-clip 0")) compare("noclip_dp4_zero3", "ref_noclip", &pl, wref);
    free(wref);

    /* Negative control: every rank's reduced gradients doubled (a sum where a mean was meant). With
     * AdamW and a clip of 0.5, below every norm of this run (>= 0.8), every step is clipped in both
     * runs, so both feed Adam the same unit-norm direction: the losses cannot show the fault. */
    const char *fault = "ST_PAR_TEST_GRAD_SCALE=2";
    double lw = NAN, nw = NAN;
    Log la;
    int ok1 = train("ref_clip05", 0, 4, 0, "--grad-clip 0.5", &secs) == 0;
    ok1 = ok1 && train_env("fault_clip05", 2, 2, 1, "--grad-clip 0.5", fault, 0, &secs) == 0;
    int all = ok1 && log_diffs("fault_clip05", "ref_clip05", &lw, &nw, &la);
    tu_check(all && lw <= ADAMW_TOL.loss && nw > 0.5, "negative control: gradients x2 under AdamW + clipping: losses "
             "pass, the norm check catches it", "losses max rel %.2e (within tol %g: the loss check alone passes), "
             "grad_norm max rel %.2f (tol %g)", lw, ADAMW_TOL.loss, nw, ADAMW_TOL.norm);
    /* The same fault under SGD without clipping changes the trajectory itself. */
    int ok2 = train_env("fault_sgd", 2, 2, 1, SGD, fault, 0, &secs) == 0;
    all = ok2 && log_diffs("fault_sgd", "ref_sgd", &lw, &nw, &la);
    tu_check(all && lw > 100 * SGD_TOL.loss && nw > 0.5, "negative control: gradients x2 under SGD: the losses catch it too",
             "losses max rel %.2e (tol %g), grad_norm max rel %.2f", lw, SGD_TOL.loss, nw);
    layout_free(&pl);
}

/* Pieces and deferred gathers (issue 28): every ZeRO collective split into pieces (ST_PAR_TEST_BUCKET
 * = 1000 floats: 500 per rank at dp 2, so each segment of the test model has 4-13 pieces) and the
 * stage 1-2 parameter all-gathers waited in the next forward's hooks. Oracles: at dp 2 the losses
 * and gradient norms of ZeRO 1-3 in pieces are bit-identical (as printed) to the same runs unsplit
 * (the ring's summation order per element is the segment's; control: the same comparison against
 * the one-process run, a few 1e-9 away, fails); dp 2 ZeRO 0-3, dp 4 ZeRO 2-3 and dp 2 ZeRO 2
 * --no-overlap against the one-process reference (AdamW tolerances). Negative control
 * (ST_PAR_TEST_GATHER_FAULT=1: the first piece of block 1's gather not waited before block 1's
 * forward but started after it) at ZeRO 1 and 3: the losses must leave the tolerance by 10x. */
static void overlap(void) {
    ParamLayout pl;
    test_layout(&pl);
    double secs;
    const char *bucket = "ST_PAR_TEST_BUCKET=1000";
    if (train("ref_k4", 0, 4, 0, NULL, &secs) != 0) tu_check(0, "reference run", "see %s/ref_k4.out", DIR);
    float *wref = weights("ref_k4", &pl);
    static const int runs[][4] = {{2, 0, 1, 0}, {2, 1, 1, 1}, {2, 2, 1, 1}, {2, 3, 1, 1}, {4, 2, 1, 0}, {4, 3, 1, 0}, {2, 2, 0, 0}};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        int dp = runs[i][0], z = runs[i][1], ov = runs[i][2], bits = runs[i][3];
        char name[64], whole[64];
        snprintf(name, sizeof name, "pieces_dp%d_zero%d%s", dp, z, ov ? "" : "_nooverlap");
        int rc = train_env(name, dp, 4 / dp, z, ov ? NULL : "--no-overlap", bucket, 0, &secs);
        printf("%s: %.1f s\n", name, secs);
        if (rc != 0) {
            tu_check(0, name, "exit %d, see %s/%s.out", rc, DIR, name);
            continue;
        }
        compare(name, "ref_k4", &pl, wref);
        if (!bits) continue;
        snprintf(whole, sizeof whole, "whole_dp%d_zero%d", dp, z);
        rc = train_env(whole, dp, 4 / dp, z, NULL, NULL, 0, &secs);
        int same = rc == 0 && field_text_equal(name, whole, "loss") && field_text_equal(name, whole, "grad_norm");
        char what[160];
        snprintf(what, sizeof what, "%s_bit_identical_to_unsplit", name);
        tu_check(same, what, "losses and grad norms as printed, pieces vs one collective per segment (exit %d)", rc);
        if (z == 1) { /* control of the comparison: the one-process run differs in the last bits */
            snprintf(what, sizeof what, "%s_control_differs_from_one_process", name);
            tu_check(!field_text_equal(name, "ref_k4", "loss"), what, "the same text comparison against ref_k4 must fail");
        }
    }
    /* One process in pieces: its all-reduce pieces complete as they start (no MPI request), and the
     * scheduler once counted them as in flight, leaving the rest queued with nothing to wait on (an
     * internal error whenever a segment had more than ZERO_IN_FLIGHT pieces: a d2 model with a
     * 97281-token vocabulary at the default bucket). Must equal the unsplit run bit for bit;
     * control: the same comparison against dp 2 (a few 1e-9 away) fails. */
    {
        int rc = train_env("pieces_dp1", 0, 4, 0, NULL, bucket, 0, &secs);
        int same = rc == 0 && field_text_equal("pieces_dp1", "ref_k4", "loss") &&
                   field_text_equal("pieces_dp1", "ref_k4", "grad_norm");
        tu_check(same, "pieces_dp1_bit_identical_to_unsplit", "exit %d, losses and grad norms as printed (see %s/%s.out)",
                 rc, DIR, "pieces_dp1");
        tu_check(rc == 0 && !field_text_equal("pieces_dp1", "pieces_dp2_zero1", "loss"), "pieces_dp1_control_differs_from_dp2",
                 "the same text comparison against pieces_dp2_zero1 must fail");
    }
    /* Negative control: block 1's first gather piece read before it arrived (the previous step's
     * values at ZeRO 1, the slot's old contents at ZeRO 3). */
    for (int z = 1; z <= 3; z += 2) {
        char name[64];
        snprintf(name, sizeof name, "gather_fault_zero%d", z);
        double lw = NAN, nw = NAN;
        Log la;
        int ok = train_env(name, 2, 2, z, NULL, "ST_PAR_TEST_BUCKET=1000 ST_PAR_TEST_GATHER_FAULT=1", 0, &secs) == 0;
        ok = ok && log_diffs(name, "ref_k4", &lw, &nw, &la);
        tu_check(ok && lw > 10 * ADAMW_TOL.loss, name, "negative control: losses max rel %.2e must exceed 10x tol %g",
                 lw, ADAMW_TOL.loss);
    }
    free(wref);
    layout_free(&pl);
}

/* Each step record's zero_gathers_ahead of run `name`: *n steps read, *steps_with the ones carrying
 * the field, *lo and *hi its range. */
static void gathers_ahead(const char *name, int *n, int *with, double *lo, double *hi) {
    cJSON *all = records(name);
    *n = *with = 0, *lo = INFINITY, *hi = -INFINITY;
    const cJSON *r;
    cJSON_ArrayForEach(r, all) {
        const cJSON *ev = cJSON_GetObjectItem(r, "event"), *v = cJSON_GetObjectItem(r, "zero_gathers_ahead");
        if (!cJSON_IsString(ev) || strcmp(ev->valuestring, "step")) continue;
        (*n)++;
        if (!cJSON_IsNumber(v)) continue;
        (*with)++;
        if (v->valuedouble < *lo) *lo = v->valuedouble;
        if (v->valuedouble > *hi) *hi = v->valuedouble;
    }
    cJSON_Delete(all);
}

/* ZeRO 3 under --no-overlap gathers each segment when it is needed, blocking (issue 28: its
 * two-slot prefetch ran under --no-overlap too, so with comm's progress thread those bytes moved
 * behind the compute while `plan --no-overlap` prices every gather as exposed). Oracle: the step
 * records' zero_gathers_ahead (gathers started before the hook that needs them) is 0 at every step
 * of dp 2 ZeRO 3 --no-overlap and > 0 at every step of the same run overlapped (the counter
 * counts); the two runs' losses and grad norms are bit-identical as printed (a gather copies bytes:
 * when it runs changes nothing). Negative control: ST_PAR_TEST_ZERO_PREFETCH=1 (the old prefetch
 * under --no-overlap) must fail the zero check, with the same losses. */
static void prefetch(void) {
    double secs, lo, hi;
    int n, with;
    static const char *names[] = {"ahead_zero3_nooverlap", "ahead_zero3_overlap", "ahead_zero3_nooverlap_fault"};
    static const char *extra[] = {"--no-overlap", NULL, "--no-overlap"};
    static const char *env[] = {NULL, NULL, "ST_PAR_TEST_ZERO_PREFETCH=1"};
    int ok[3];
    for (int i = 0; i < 3; i++) {
        ok[i] = train_env(names[i], 2, 2, 3, extra[i], env[i], 0, &secs) == 0;
        printf("%s: %.1f s\n", names[i], secs);
        if (!ok[i]) tu_check(0, names[i], "exit non-zero, see %s/%s.out", DIR, names[i]);
    }
    if (ok[0]) {
        gathers_ahead(names[0], &n, &with, &lo, &hi);
        tu_check(n == STEPS && with == n && lo == 0 && hi == 0, "zero3_nooverlap_gathers_when_needed",
                 "%d steps, %d with zero_gathers_ahead, range %g..%g (want %d, all 0)", n, with, lo, hi, STEPS);
    }
    if (ok[1]) {
        gathers_ahead(names[1], &n, &with, &lo, &hi);
        tu_check(n == STEPS && with == n && lo > 0, "zero3_overlap_prefetches",
                 "%d steps, %d with zero_gathers_ahead, range %g..%g (want every step > 0)", n, with, lo, hi);
    }
    if (ok[0] && ok[1])
        tu_check(field_text_equal(names[0], names[1], "loss") && field_text_equal(names[0], names[1], "grad_norm"),
                 "zero3_nooverlap_bit_identical_to_overlap", "losses and grad norms as printed");
    if (ok[2]) {
        gathers_ahead(names[2], &n, &with, &lo, &hi);
        tu_check(n == STEPS && with == n && hi > 0, "negative_control_prefetch_under_nooverlap_caught",
                 "ST_PAR_TEST_ZERO_PREFETCH=1: zero_gathers_ahead range %g..%g must leave 0", lo, hi);
        tu_check(field_text_equal(names[0], names[2], "loss"), "negative_control_same_losses",
                 "the prefetch changes timing, not values");
    }
}

/* Trains `name` to step 10 on grid 1 (--stop-after) with checkpoints in DIR/<name>_ck, then runs
 * grid 2 with --resume auto from `from_ck` (NULL: the same directory) to the end, appending to the
 * log; 1 if both parts exit 0. */
static int stop_then(const char *name, int np1, int k1, int z1, int np2, int k2, int z2, const char *extra,
                     const char *from_ck) {
    char cmd[1400], ex[1400], ck[1200];
    double secs;
    snprintf(ck, sizeof ck, "%s/%s_ck", DIR, name);
    snprintf(cmd, sizeof cmd, "rm -rf %s", ck);
    if (system(cmd) != 0) return 0;
    snprintf(ex, sizeof ex, "--ckpt-dir %s --stop-after 10 %s", ck, extra ? extra : "");
    int rc1 = train(name, np1, k1, z1, ex, &secs);
    snprintf(ex, sizeof ex, "--ckpt-dir %s --resume auto %s", from_ck ? from_ck : ck, extra ? extra : "");
    int rc2 = train_env(name, np2, k2, z2, ex, NULL, 1, &secs);
    tu_check(rc1 == 0 && rc2 == 0, name, "stop at 10 on %d rank(s) ZeRO %d, resume on %d ZeRO %d: exit %d, %d",
             np1 ? np1 : 1, z1, np2 ? np2 : 1, z2, rc1, rc2);
    return rc1 == 0 && rc2 == 0;
}

/* Stop at 10 and resume; the log must show the resume (the first run's steps 1..10, then a start
 * record on grid 2 with resumed_from_step 10 and step 11 next). */
static int stop_and_resume(const char *name, int np1, int k1, int z1, int np2, int k2, int z2, const char *extra) {
    if (!stop_then(name, np1, k1, z1, np2, k2, z2, extra, NULL)) return 0;
    char lg[1200], why[512], what[256];
    snprintf(lg, sizeof lg, "%s/%s.jsonl", DIR, name);
    snprintf(what, sizeof what, "%s: resumed from step 10 on %d rank(s), the log continues", name, np2 ? np2 : 1);
    tu_check(tu_log_resumed(lg, 10, STEPS, np1 ? np1 : 1, np2 ? np2 : 1, why, sizeof why), what, "%s", why);
    return 1;
}

static void resume(void) {
    ParamLayout pl;
    test_layout(&pl);
    double secs;
    if (train("rref_k4", 0, 4, 0, NULL, &secs) != 0) tu_check(0, "reference run", "see %s/rref_k4.out", DIR);
    float *wref = weights("rref_k4", &pl);
    /* N=4 (ZeRO-1) -> M=2 (ZeRO-3); M=1 -> N=2 (ZeRO-2) */
    if (stop_and_resume("res42", 4, 1, 1, 2, 2, 3, NULL)) compare("res42", "rref_k4", &pl, wref);
    if (stop_and_resume("res12", 0, 4, 0, 2, 2, 2, NULL)) compare("res12", "rref_k4", &pl, wref);
    /* Negative control: the resume pointed at an empty --ckpt-dir starts afresh on 2 ranks. The
     * comparison with the uninterrupted run passes (a fresh start reproduces it); the log check must not. */
    /* (emptied first: the fresh start saves its final checkpoint there) */
    if (system("rm -rf " DIR "/empty_ck") != 0 || file_mkdirs(DIR "/empty_ck", &(Err){0}) != ST_OK)
        tu_check(0, "empty checkpoint directory", "cannot make %s/empty_ck", DIR);
    if (stop_then("res_empty", 2, 2, 1, 2, 2, 1, NULL, DIR "/empty_ck")) {
        double lw = NAN, nw = NAN;
        Log la;
        float *w = weights("res_empty", &pl);
        double kabs = INFINITY, ww = w ? rc_weights_rel(&pl, w, wref, &kabs) : INFINITY;
        int old_pass = log_diffs("res_empty", "rref_k4", &lw, &nw, &la) && lw <= ADAMW_TOL.loss &&
                       ww <= ADAMW_TOL.w && kabs <= ADAMW_TOL.key;
        char why[512];
        int caught = !tu_log_resumed(DIR "/res_empty.jsonl", 10, STEPS, 2, 2, why, sizeof why);
        tu_check(old_pass && caught, "negative control: a dp 2 resume from an empty --ckpt-dir passes the comparison, "
                 "the log check catches it", "losses %.2e, weights %.2e vs the uninterrupted run; %s", lw, ww, why);
        free(w);
    }
    free(wref);
    layout_free(&pl);
}

static void fault(void) {
    double secs;
    char cmd[4096];
    /* Grid product != world. */
    int rc = train("grid", 2, 2, 0, "--dp 3", &secs);
    char *out = tu_slurp(DIR "/grid.out");
    tu_check(rc == 2 && out && strstr(out, "--dp 3: expected dp x tp x pp = the world size 2 (ranks launched), found 3 x 1 x 1 = 3"), "grid dp 3 on 2 ranks refused",
             "exit %d: %.200s", rc, out && strstr(out, "scaletrain train:") ? strstr(out, "scaletrain train:") : "");
    free(out);
    /* One rank with another config (MPMD: rank 1 gets --lr 3e-3). */
    snprintf(cmd, sizeof cmd,
             "timeout 60 %s --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1 -np 1 %s " COMMON
             " --steps 2 : -np 1 %s " COMMON0 " --steps 2 --lr 3e-3 --min-lr 2e-4",
             g_mpi, g_bin, g_bin);
    rc = run("hash", cmd, &secs);
    out = tu_slurp(DIR "/hash.out");
    tu_check(rc == 2 && out && strstr(out, "config hash differs across ranks") && strstr(out, "rank 1 has"),
             "a rank with a different config refused", "exit %d in %.1f s", rc, secs);
    free(out);
    /* A rank killed mid-step. */
    snprintf(cmd, sizeof cmd, "ST_PAR_TEST_KILL=1:3 timeout 90 %s --allow-run-as-root --oversubscribe -np 2 "
             "-x OMP_NUM_THREADS=1 -x ST_PAR_TEST_KILL %s " COMMON " --steps 20 --comm-timeout 20", g_mpi, g_bin);
    rc = run("kill", cmd, &secs);
    out = tu_slurp(DIR "/kill.out");
    tu_check(rc != 0 && rc != 124 && secs < 30 && out && (strstr(out, "signal 9") || strstr(out, "Killed")),
             "rank 1 SIGKILLed at step 3: the job ends", "exit %d after %.1f s: %.160s", rc, secs,
             out && strstr(out, "mpirun noticed") ? strstr(out, "mpirun noticed") : "");
    free(out);
}

/* Mixed precision under data parallelism: bf16 at ZeRO 0-3 and fp16 (loss scaling) at ZeRO 1 and 3 on 2
 * ranks against one bf16/fp16 process with the same global batch. The fp32 masters differ only by
 * summation order, but a master that lands on the other side of a rounding boundary moves its
 * 2-byte working copy by 2^-8 (bf16) relative, which training then carries on. So the oracle is
 * the spread the precision itself shows: one process with another micro-batch split (4×2 vs 2×4,
 * also the same global batch, another summation order). Every dp run must stay within 3× that
 * spread in its weights and gradient norms (and the losses within 1e-4); per-rank memory equals
 * the plan (master, working copies). */
static void mixed(void) {
    ParamLayout pl;
    test_layout(&pl);
    double secs;
    const char *prec[2] = {"--precision bf16", "--precision fp16 --loss-scale 1024"};
    const char *tag[2] = {"bf16", "fp16"};
    double bf16_wspread = 0, bf16_kspread = 0, bf16_nspread = 0;
    for (int k = 0; k < 2; k++) {
        char ref[64], alt[64], extra[128];
        snprintf(ref, sizeof ref, "ref_k4_%s", tag[k]);
        snprintf(alt, sizeof alt, "ref_k2mb4_%s", tag[k]);
        snprintf(extra, sizeof extra, "%s --micro-batch 4", prec[k]);
        if (train(ref, 0, 4, 0, prec[k], &secs) != 0 || train(alt, 0, 2, 0, extra, &secs) != 0)
            tu_check(0, ref, "see %s/%s.out and %s.out", DIR, ref, alt);
        Tol sp;
        rc_spread(DIR, alt, ref, STEPS, &pl, tag[k], &sp);
        double wspread = sp.w, kspread = sp.key, nspread = sp.norm;
        float *wref = weights(ref, &pl);
        if (k == 0) bf16_wspread = wspread, bf16_kspread = kspread, bf16_nspread = nspread;
        for (int z = k; z <= 3; z += 1 + k) { /* bf16: 0, 1, 2, 3; fp16: 1, 3 */
            char name[64];
            snprintf(name, sizeof name, "dp2_zero%d_%s", z, tag[k]);
            if (!train_ok(name, 2, 2, z, prec[k])) continue;
            compare_tol(name, ref, &pl, wref, (Tol){1e-4, 3 * nspread, 3 * wspread, 3 * kspread});
            check_memory(name);
        }
        free(wref);
    }
    /* bf16, 2 ranks ZeRO 1: stop at 10 and resume equals the uninterrupted run bit for bit. */
    if (stop_and_resume("res_zero1_bf16", 2, 2, 1, 2, 2, 1, prec[0])) {
        float *a = weights("res_zero1_bf16", &pl), *b = weights("dp2_zero1_bf16", &pl);
        tu_check(a && b && !memcmp(a, b, pl.total * sizeof(float)) && loss_text_equal("res_zero1_bf16", "dp2_zero1_bf16"),
                 "bf16 dp 2 ZeRO 1: stop + resume == uninterrupted", "weights memcmp and every step's loss text equal");
        free(a), free(b);
    }
    /* bf16 checkpoint of 2 ranks at ZeRO 1 resumed at ZeRO 3: the same trajectory, within the spread. */
    if (stop_and_resume("res_z13_bf16", 2, 2, 1, 2, 2, 3, prec[0])) {
        float *wref = weights("ref_k4_bf16", &pl);
        compare_tol("res_z13_bf16", "ref_k4_bf16", &pl, wref,
                    (Tol){1e-4, 3 * bf16_nspread, 3 * bf16_wspread, 3 * bf16_kspread});
        free(wref);
    }
    layout_free(&pl);
}

/* MFU under MPI. Both runs measure their peak (1 thread per process) and train the same per-rank
 * work: 4 sequences of 128 tokens per micro-batch, one micro-batch per rank per step. */
#define MFU_MODEL "--layers 4 --heads 4 --channels 256 --max-seq-len 128 --seq-len 128 --micro-batch 4 --grad-accum 1"
#define MFU_STEPS 8

static double median_of(double *v, int n) {
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double t = v[j];
            v[j] = v[j - 1], v[j - 1] = t;
        }
    return n ? (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2])) : NAN;
}

/* Median over steps 2.. of the logged MFU, and the worst relative difference between the logged MFU
 * and the one computed here: PaLM's model FLOPs per token 6·(12·L·C² + V·C) + 12·L·T·C, times the
 * job's tokens per step over the step's time, over `peak` (the job's peak as this test estimates it). */
static double mfu_check_steps(const Log *lg, int np, const double *peak, double *worst, double *maxmfu) {
    double L = 4, C = 256, V = 97, T = 128, fpt = 6 * (12 * L * C * C + V * C) + 12 * L * T * C;
    double tokens = (double)np * 4 * T, v[MFU_STEPS];
    *worst = 0, *maxmfu = 0;
    for (int i = 0; i < MFU_STEPS; i++) {
        double mine = fpt * tokens / (lg->ms[i] * 1e-3) / peak[i], r = fabs(lg->mfu[i] - mine) / mine;
        *worst = r > *worst || isnan(r) ? r : *worst;
        *maxmfu = lg->mfu[i] > *maxmfu || isnan(lg->mfu[i]) ? lg->mfu[i] : *maxmfu;
        v[i] = lg->mfu[i];
    }
    return median_of(v + 1, MFU_STEPS - 1);
}

/* The same with one peak for every step. */
static double mfu_check(const Log *lg, int np, double peak, double *worst, double *maxmfu) {
    double pk[MFU_STEPS];
    for (int i = 0; i < MFU_STEPS; i++) pk[i] = peak;
    return mfu_check_steps(lg, np, pk, worst, maxmfu);
}

/* The MFU denominator in force at each step of run `name`: the start record's peak_flops_job, then
 * each "peak" record's from its step on (the achieved-rate guard, events.h). Returns the number of
 * peak records; peak[i] is step i+1's. */
static int peaks_in_force(const char *name, double start_peak, double *peak) {
    for (int i = 0; i < MFU_STEPS; i++) peak[i] = start_peak;
    cJSON *all = records(name);
    int n = 0;
    const cJSON *r;
    cJSON_ArrayForEach(r, all) {
        const cJSON *ev = cJSON_GetObjectItem(r, "event"), *st = cJSON_GetObjectItem(r, "step"),
                    *pj = cJSON_GetObjectItem(r, "peak_flops_job");
        if (!cJSON_IsString(ev) || strcmp(ev->valuestring, "peak") || !cJSON_IsNumber(st) || !cJSON_IsNumber(pj)) continue;
        n++;
        for (int i = st->valueint - 1; i >= 0 && i < MFU_STEPS; i++) peak[i] = pj->valuedouble;
    }
    cJSON_Delete(all);
    return n;
}

/* The start record's string field k of run `name` ("" when absent). */
static void start_string(const char *name, const char *k, char *out, size_t n) {
    cJSON *all = records(name);
    out[0] = '\0';
    const cJSON *r;
    cJSON_ArrayForEach(r, all) {
        const cJSON *ev = cJSON_GetObjectItem(r, "event"), *v = cJSON_GetObjectItem(r, k);
        if (cJSON_IsString(ev) && !strcmp(ev->valuestring, "start") && cJSON_IsString(v)) snprintf(out, n, "%s", v->valuestring);
    }
    cJSON_Delete(all);
}

/* The start record's numeric array k of run `name` into out (at most n); returns its length, -1 if absent. */
static int start_array(const char *name, const char *k, double *out, int n) {
    cJSON *all = records(name);
    int len = -1;
    const cJSON *r;
    cJSON_ArrayForEach(r, all) {
        const cJSON *ev = cJSON_GetObjectItem(r, "event"), *v = cJSON_GetObjectItem(r, k);
        if (!cJSON_IsString(ev) || strcmp(ev->valuestring, "start") || !cJSON_IsArray(v)) continue;
        len = 0;
        const cJSON *x;
        cJSON_ArrayForEach(x, v) {
            if (len < n) out[len] = cJSON_IsNumber(x) ? x->valuedouble : NAN;
            len++;
        }
    }
    cJSON_Delete(all);
    return len;
}

/* One process, MFU_MODEL, measured peak (no cache), with `env` ("VAR=value" or ""). */
static int mfu_one(const char *name, const char *env, Log *lg) {
    char cmd[4096];
    double secs;
    snprintf(cmd, sizeof cmd, "ST_PEAK_CACHE=off %s %s train --data %s/train.bin " MFU_MODEL " --steps %d --threads 1 "
             "--val-every 0 --quiet --log %s/%s.jsonl", env, g_bin, DIR, MFU_STEPS, DIR, name);
    int rc = run(name, cmd, &secs);
    return rc == 0 && read_log(name, lg) && lg->n == MFU_STEPS;
}

static void mfu(void) {
    char cmd[4096];
    double secs;
    Log one, two;
    int ok1 = mfu_one("mfu_1", "", &one);
    snprintf(cmd, sizeof cmd, "ST_PEAK_CACHE=off timeout 120 %s --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS=1 "
             "-x ST_PEAK_CACHE %s train --data %s/train.bin " MFU_MODEL " --steps %d --threads 1 --val-every 0 --quiet "
             "--log %s/mfu_dp2.jsonl", g_mpi, g_bin, DIR, MFU_STEPS, DIR);
    int rc2 = run("mfu_dp2", cmd, &secs);
    int ok = ok1 && rc2 == 0 && read_log("mfu_dp2", &two) && two.n == MFU_STEPS;
    if (!ok) {
        tu_check(0, "MFU runs", "see %s/mfu_1.out and mfu_dp2.out", DIR);
        return;
    }
    /* The job's peak is the sum of the ranks' own peaks, each as its start record gives it (rank
     * 0's peak_flops and every rank's peak_flops_by_rank): the two ranks measure at the same moment
     * on two shared cores, so each reads 0.6-1.0 of what a lone process reads, and a comparison with
     * 2 x the one-process peak (the test before) failed about once in 5 ASan runs. Each rank's
     * peak must still be that of this machine: within 4x of the one process's (the peak is the best
     * of the FMA probe and a 1024^3 GEMM, train/machine_peak.h, so this holds under ASan too).
     * The sum is compared to a relative 1e-12, not exactly: cJSON writes a number with 15 digits
     * whenever they read back within one DBL_EPSILON, so the logged addends and the logged sum are
     * each rounded on their own (CI failed once on an exact ==, 2026-11-27). */
    double w1, w2, wbug, m1, m2, mbug, pr[4] = {0};
    int npr = start_array("mfu_dp2", "peak_flops_by_rank", pr, 4), npr1 = start_array("mfu_1", "peak_flops_by_rank", pr + 2, 2);
    double sum = pr[0] + pr[1], lo = one.peak / 4, hi = one.peak * 4;
    double med1 = mfu_check(&one, 1, one.peak, &w1, &m1);
    double med2 = mfu_check(&two, 2, two.peak_job, &w2, &m2);
    tu_check(w1 <= 1e-6 && one.peak_job == one.peak && npr1 == 1 && pr[2] == one.peak && m1 < 1,
             "one process: logged MFU == model FLOP/s / peak, below 1", "max rel diff %.1e; peak %.1f GFLOP/s (by "
             "rank: %d entries); max MFU %.3f", w1, one.peak * 1e-9, npr1, m1);
    tu_check(npr == 2 && pr[0] == two.peak && fabs(two.peak_job - sum) <= 1e-12 * sum && pr[1] > lo && pr[1] < hi && pr[0] > lo && pr[0] < hi,
             "dp 2: the job's peak is the sum of the two ranks' peaks, each this machine's",
             "%d entries: rank 0 %.1f (peak_flops %.1f), rank 1 %.1f GFLOP/s; sum %.1f, peak_flops_job %.1f; one "
             "process %.1f", npr, pr[0] * 1e-9, two.peak * 1e-9, pr[1] * 1e-9, sum * 1e-9, two.peak_job * 1e-9,
             one.peak * 1e-9);
    tu_check(w2 <= 1e-6 && m2 < 1, "dp 2: logged MFU == the job's model FLOP/s / the job's peak, below 1",
             "max rel diff %.1e; max MFU %.3f", w2, m2);
    /* Negative control: the old denominator (one rank's peak) doubles the figure. */
    Log bug = two;
    for (int i = 0; i < MFU_STEPS; i++) bug.mfu[i] *= two.peak_job / two.peak;
    mfu_check(&bug, 2, two.peak_job, &wbug, &mbug);
    tu_check(wbug > 1e-6, "negative control: MFU over one rank's peak is caught", "max rel diff %.2f (tol 1e-6)", wbug);
    /* Close to the one-process figure: each rank does the one process's work at its speed, less the
     * all-reduce and the wait for the slower rank: measured 0.88 on a quiet machine. On a machine
     * shared with other jobs the two ranks are slowed more than one process (two ranks on two cores
     * have no spare core, and each step waits for the slower): 0.35-0.42 at a load of 4-6. Hence
     * the factor 4; the one-rank-peak error (2x) is caught above, not here. */
    double r = med2 / med1;
    tu_check(r > 0.25 && r < 4, "dp 2 MFU close to one process's (within 4x)",
             "median MFU dp 2 %.3f, one process %.3f: ratio %.2f", med2, med1, r);

    /* A probe that under-reports 10x (ST_TRAIN_TEST_PEAK_FAULT=probe) must not raise MFU above 1:
     * the GEMM's measurement takes over as the peak. Negative control: with the GEMM measurement
     * disabled too (=probe-nogemm, the peak as it was before issue 28) the same run logs MFU > 1,
     * so the bound above can fail. */
    Log low, bare;
    char kind[128], kind_bare[128];
    int okl = mfu_one("mfu_probe_low", "ST_TRAIN_TEST_PEAK_FAULT=probe", &low);
    int okb = mfu_one("mfu_probe_low_nogemm", "ST_TRAIN_TEST_PEAK_FAULT=probe-nogemm", &bare);
    start_string("mfu_probe_low", "peak_kind", kind, sizeof kind);
    start_string("mfu_probe_low_nogemm", "peak_kind", kind_bare, sizeof kind_bare);
    double wl, ml, wb, mb;
    if (okl) mfu_check(&low, 1, low.peak, &wl, &ml);
    if (okb) mfu_check(&bare, 1, bare.peak, &wb, &mb);
    tu_check(okl && ml < 1 && wl <= 1e-6 && strstr(kind, "GEMM"), "probe under-reporting 10x: the GEMM peak takes over, MFU < 1",
             "peak %.1f GFLOP/s (%s), max MFU %.3f", okl ? low.peak * 1e-9 : 0, kind, okl ? ml : 0);
    tu_check(okb && mb > 1 && strstr(kind_bare, "probe"), "negative control: the same probe without the GEMM gives MFU > 1",
             "peak %.1f GFLOP/s (%s), max MFU %.3f", okb ? bare.peak * 1e-9 : 0, kind_bare, okb ? mb : 0);

    /* A peak measured low as a whole (probe and GEMM at a hundredth: what a start under heavy load
     * measures; ST_TRAIN_TEST_PEAK_FAULT=low): the first step beats it, and the achieved-rate guard
     * makes that step's model FLOP/s the denominator from there on (a "peak" record), so MFU stays
     * <= 1 and every step's MFU is its rate over the peak then in force. Negative control
     * (=low-noguard): the same low peak without the guard logs MFU > 1. */
    Log glow, gbare;
    int okg = mfu_one("mfu_low", "ST_TRAIN_TEST_PEAK_FAULT=low", &glow);
    int okn = mfu_one("mfu_low_noguard", "ST_TRAIN_TEST_PEAK_FAULT=low-noguard", &gbare);
    double pk[MFU_STEPS], gw = 0, gm = 0, nw, nm = 0;
    int nraise = okg ? peaks_in_force("mfu_low", glow.peak_job, pk) : 0;
    if (okg) mfu_check_steps(&glow, 1, pk, &gw, &gm);
    tu_check(okg && nraise >= 1 && gm <= 1 + 1e-9 && gw <= 1e-6,
             "peak measured 100x low: a step's achieved rate becomes the peak, MFU <= 1",
             "%d peak records; max MFU %.3f; max rel diff to rate / peak in force %.1e", nraise, gm, gw);
    if (okn) mfu_check(&gbare, 1, gbare.peak_job, &nw, &nm);
    tu_check(okn && nm > 1 && peaks_in_force("mfu_low_noguard", gbare.peak_job, pk) == 0,
             "negative control: the same low peak without the guard logs MFU > 1", "max MFU %.3f", okn ? nm : 0);
}

/* The peak cache (train/machine_peak.h, docs/plan.md): a run with an empty cache measures and
 * writes this machine's entry; the next run reads it (peak_kind says cached, the same peak); an
 * entry keyed by another host is never used, one keyed by this machine is, even when absurd (1e18
 * FLOP/s, planted: the negative control that shows the planted entry would have been read). */
static void peak_cache(void) {
    char cmd[4096], cache[1200], kind[128];
    double secs;
    snprintf(cache, sizeof cache, "%s/peaks.json", DIR);
    remove(cache);
    Log a, b;
    int ok = 1;
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd, "ST_PEAK_CACHE=%s %s train --data %s/train.bin " MFU_MODEL " --steps 1 --threads 1 "
                 "--val-every 0 --quiet --log %s/cache_%d.jsonl", cache, g_bin, DIR, DIR, i);
        char nm[32];
        snprintf(nm, sizeof nm, "cache_%d", i);
        ok = ok && run(nm, cmd, &secs) == 0 && read_log(nm, i ? &b : &a);
    }
    start_string("cache_1", "peak_kind", kind, sizeof kind);
    /* >=: a start's GEMM check raises a cached figure it beats (machine_peak.h), never lowers it. */
    tu_check(ok && a.peak > 0 && b.peak >= a.peak && strstr(kind, "cached"), "peak cache: the second run reads the first's figure",
             "peaks %.2f and %.2f GFLOP/s, second kind '%s'", ok ? a.peak * 1e-9 : 0, ok ? b.peak * 1e-9 : 0, kind);
    /* Rewrite every entry with 1e18 FLOP/s: once keyed by another host, once as written. */
    char *text = tu_slurp(cache);
    int planted[2] = {0, 0};
    double peaks[2] = {0, 0};
    for (int other = 1; other >= 0 && text; other--) {
        cJSON *doc = cJSON_Parse(text), *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItem(doc, "entries")) {
            cJSON_ReplaceItemInObject(e, "probe_flops", cJSON_CreateNumber(1e18));
            if (other) cJSON_ReplaceItemInObject(e, "host", cJSON_CreateString("another-machine"));
            planted[other]++;
        }
        char *out = cJSON_Print(doc);
        FILE *f = fopen(cache, "w");
        if (f && out) fputs(out, f);
        if (f) fclose(f);
        free(out), cJSON_Delete(doc);
        snprintf(cmd, sizeof cmd, "ST_PEAK_CACHE=%s %s train --data %s/train.bin " MFU_MODEL " --steps 1 --threads 1 "
                 "--val-every 0 --quiet --log %s/cache_planted%d.jsonl", cache, g_bin, DIR, DIR, other);
        char nm[32];
        snprintf(nm, sizeof nm, "cache_planted%d", other);
        Log p;
        if (run(nm, cmd, &secs) == 0 && read_log(nm, &p)) peaks[other] = p.peak;
    }
    free(text);
    tu_check(planted[1] > 0 && peaks[1] > 0 && peaks[1] < 1e17, "peak cache: another host's entry is not used",
             "%d entries planted, peak %.3g FLOP/s", planted[1], peaks[1]);
    tu_check(planted[0] > 0 && peaks[0] == 1e18, "negative control: this machine's planted entry is used",
             "peak %.3g FLOP/s", peaks[0]);

    /* plan's default hardware: this machine's profile from the same cache. The first call measures
     * and stores it (name measured-1t); a planted profile for this machine (peak 1.234e12) is what
     * the next call prices on; keyed by another host it is not (measured again); without a cache
     * (ST_PEAK_CACHE=off) the default is the cpu-zen4-2c preset. A profile of this machine planted
     * low (peak 1e9, matmul efficiency 0.01, 1 MB/s; bf16 peak 1e15, above anything measured) as
     * measured at load 1e6 is measured again and raised figure by figure (peak and bandwidth up, the
     * bf16 peak kept); the same plant at load 0.5 is used as it is (the control). The same low plant
     * at load 0.5 but measured while other work used 50% of the CPUs (others_cpu 0.5) 20 minutes ago
     * is measured again (6), and so is one that does not record others_cpu (7: written before it was
     * recorded); controls: others_cpu 0.5 measured just now (8) and others_cpu 0 20 minutes ago (9)
     * are used as they are. Every profile the cache stores records its others_cpu in [0, 1]. */
    remove(cache);
    double pk[10] = {0}, bw[10] = {0}, pb[10] = {0}, others_stored = -2;
    char name[10][64] = {"", "", "", "", "", "", "", "", "", ""};
    for (int i = 0; i < 10; i++) {
        if (i == 1 || i == 2 || i >= 4) { /* plant */
            char *t = tu_slurp(cache);
            cJSON *doc = t ? cJSON_Parse(t) : NULL, *e;
            free(t);
            cJSON_ArrayForEach(e, cJSON_GetObjectItem(doc, "profiles")) {
                cJSON *prof = cJSON_GetObjectItem(e, "profile");
                cJSON_ReplaceItemInObject(prof, "peak_fp32", cJSON_CreateNumber(i >= 4 ? 1e9 : 1.234e12));
                if (i == 2) cJSON_ReplaceItemInObject(e, "host", cJSON_CreateString("another-machine"));
                if (i >= 4) {
                    cJSON_ReplaceItemInObject(prof, "matmul_eff", cJSON_CreateNumber(0.01));
                    cJSON_ReplaceItemInObject(prof, "mem_bw", cJSON_CreateNumber(1e6));
                    cJSON_ReplaceItemInObject(prof, "peak_bf16", cJSON_CreateNumber(1e15));
                    cJSON_ReplaceItemInObject(e, "loadavg", cJSON_CreateNumber(i == 4 ? 1e6 : 0.5));
                }
                if (i >= 6) {
                    cJSON_DeleteItemFromObject(e, "others_cpu");
                    if (i != 7) cJSON_AddNumberToObject(e, "others_cpu", i == 9 ? 0.0 : 0.5);
                    cJSON_ReplaceItemInObject(e, "measured_unix", cJSON_CreateNumber((double)time(NULL) - (i == 8 ? 0 : 1200)));
                }
            }
            char *out = doc ? cJSON_Print(doc) : NULL;
            FILE *f = fopen(cache, "w");
            if (f && out) fputs(out, f);
            if (f) fclose(f);
            free(out), cJSON_Delete(doc);
        }
        snprintf(cmd, sizeof cmd, "ST_PEAK_CACHE=%s %s plan --model d2 --threads 1 --json 2>/dev/null", i == 3 ? "off" : cache,
                 g_bin);
        cJSON *doc = rc_command_json(cmd);
        const cJSON *hw = cJSON_GetObjectItem(doc, "hardware"), *nmj = cJSON_GetObjectItem(hw, "name");
        pk[i] = num(hw, "peak_fp32"), bw[i] = num(hw, "mem_bw"), pb[i] = num(hw, "peak_bf16");
        if (cJSON_IsString(nmj)) snprintf(name[i], sizeof name[i], "%s", nmj->valuestring);
        cJSON_Delete(doc);
        if (i == 6) { /* what the re-measurement stored */
            char *t = tu_slurp(cache);
            cJSON *d = t ? cJSON_Parse(t) : NULL, *e;
            free(t);
            cJSON_ArrayForEach(e, cJSON_GetObjectItem(d, "profiles")) {
                const cJSON *o = cJSON_GetObjectItem(e, "others_cpu");
                others_stored = cJSON_IsNumber(o) ? o->valuedouble : -1;
            }
            cJSON_Delete(d);
        }
    }
    tu_check(pk[6] > 1e10 && bw[6] > 1e8 && pk[7] > 1e10 && bw[7] > 1e8,
             "plan's default: a profile measured while other work used 50% of the CPUs (20 min ago) is measured again, "
             "and so is one without that record", "peak %.3g and %.3g (planted 1e9), mem bw %.3g and %.3g (1e6)", pk[6], pk[7],
             bw[6], bw[7]);
    tu_check(pk[8] == 1e9 && bw[8] == 1e6 && pk[9] == 1e9 && bw[9] == 1e6,
             "controls: the disturbed profile measured just now, and an undisturbed one 20 min old, are used as they are",
             "peak %.3g and %.3g, mem bw %.3g and %.3g", pk[8], pk[9], bw[8], bw[9]);
    tu_check(others_stored >= 0 && others_stored <= 1, "the re-measured profile records the others' share of its "
             "measurement", "others_cpu %.3f", others_stored);
    tu_check(pk[4] > 1e10 && bw[4] > 1e8 && pb[4] == 1e15, "plan's default: a profile measured at load 1e6 is measured "
             "again, each figure raised", "peak %.3g (planted 1e9), mem bw %.3g (1e6), bf16 peak %.3g (1e15 kept)", pk[4],
             bw[4], pb[4]);
    tu_check(pk[5] == 1e9 && bw[5] == 1e6, "control: the same profile measured at load 0.5 is used as it is",
             "peak %.3g, mem bw %.3g", pk[5], bw[5]);
    tu_check(!strcmp(name[0], "measured-1t") && pk[0] > 0 && pk[0] < 1e12, "plan's default: this machine measured (and cached)",
             "profile '%s', peak %.3g FLOP/s", name[0], pk[0]);
    tu_check(pk[1] == 1.234e12, "plan's default: the cached profile of this machine is used", "peak %.4g FLOP/s", pk[1]);
    tu_check(!strcmp(name[2], "measured-1t") && pk[2] > 0 && pk[2] < 1e12, "plan's default: another host's profile is not used",
             "profile '%s', peak %.3g FLOP/s", name[2], pk[2]);
    tu_check(!strcmp(name[3], "cpu-zen4-2c"), "plan's default without a cache: the cpu-zen4-2c preset", "profile '%s'", name[3]);
}

/* The cache's entries keyed for `threads` (any precision). */
static int cache_entries(const char *path, int threads) {
    char *t = tu_slurp(path);
    cJSON *doc = t ? cJSON_Parse(t) : NULL, *e;
    free(t);
    int n = 0;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(doc, "entries")) {
        const cJSON *th = cJSON_GetObjectItem(e, "threads");
        n += cJSON_IsNumber(th) && th->valueint == threads;
    }
    cJSON_Delete(doc);
    return n;
}

/* 1 when run `name`'s output holds `what`. */
static int out_has(const char *name, const char *what) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s.out", DIR, name);
    char *t = tu_slurp(path);
    int has = t && strstr(t, what);
    free(t);
    return has;
}

#define CPU_MODEL "--layers 2 --heads 2 --channels 32 --max-seq-len 32 --seq-len 32 --micro-batch 2 --steps 1 --val-every 0"

/* Threads against the CPUs a rank may run on (train_setup.c, warn_oversubscribed; the peak for
 * min(threads, CPUs)), and the default without --threads (machine_auto_threads: the rank's share
 * of its node). taskset is util-linux's, on every Debian: a missing one fails the runs. */
static void threads_cpus(void) {
    char cmd[4096], cache[1200];
    double secs;
    long online = sysconf(_SC_NPROCESSORS_ONLN);

    /* The default's closed form first. */
    int forms[][4] = {{2, 2, 1, 2}, {1, 2, 2, 1}, {16, 16, 8, 2}, {2, 16, 8, 2}, {16, 16, 1, 16}, {32, 32, 4, 8},
                      {16, 32, 4, 8}, {1, 1, 4, 1}, {4096, 4096, 1, 1024}, {3, 3, 0, 3}};
    char detail[160] = "all equal";
    int bad = 0;
    for (int i = 0; i < (int)(sizeof forms / sizeof *forms); i++) {
        int got = machine_auto_threads(forms[i][0], forms[i][1], forms[i][2]);
        if (got != forms[i][3] && !bad++)
            snprintf(detail, sizeof detail, "allowed %d, node %d, ranks %d -> %d (want %d)", forms[i][0], forms[i][1],
                     forms[i][2], got, forms[i][3]);
    }
    tu_check(!bad, "threads: auto = min(allowed CPUs, node CPUs / node ranks), 1..1024 (10 closed forms)", "%s", detail);

    /* One process: --threads 2 on one CPU; no --threads on one CPU (auto: 1) and on two (auto: 2,
     * measuring the 2-thread peak: the control that a fitting count adds its own cache entry). */
    snprintf(cache, sizeof cache, "%s/peaks_cpus.json", DIR);
    remove(cache);
    const char *names[3] = {"cpus_pinned2", "cpus_auto1", "cpus_auto2"}, *sets[3] = {"0", "0", "0,1"},
               *flags[3] = {"--threads 2", "", ""};
    int rc[3] = {-1, -1, -1}, e1[3] = {0}, e2[3] = {0};
    for (int i = 0; i < 3; i++) {
        if (i == 2 && online < 2) break;
        snprintf(cmd, sizeof cmd, "ST_PEAK_CACHE=%s taskset -c %s %s train --data %s/train.bin " CPU_MODEL " %s", cache,
                 sets[i], g_bin, DIR, flags[i]);
        rc[i] = run(names[i], cmd, &secs);
        e1[i] = cache_entries(cache, 1), e2[i] = cache_entries(cache, 2);
    }
    tu_check(rc[0] == 0 && out_has(names[0], "2 threads on 1 CPU,") &&
                 out_has(names[0], "warning: 2 threads on the 1 CPU this process may run on") && e1[0] >= 1 && e2[0] == 0,
             "threads: --threads 2 on one CPU says so, warns, and its peak is the 1-thread one (cached as such)",
             "exit %d, cache entries for 1 thread %d, for 2 threads %d (%s/%s.out)", rc[0], e1[0], e2[0], DIR, names[0]);
    tu_check(rc[1] == 0 && out_has(names[1], ", 1 thread (auto),") && !out_has(names[1], "warning:") &&
                 !out_has(names[1], " on 1 CPU"),
             "threads: no --threads on one CPU runs 1 (auto) and warns of nothing", "exit %d (%s/%s.out)", rc[1], DIR,
             names[1]);
    if (online >= 2)
        tu_check(rc[2] == 0 && out_has(names[2], ", 2 threads (auto),") && !out_has(names[2], "warning:") && e2[2] > e2[1],
                 "negative control: no --threads on two CPUs runs 2 (auto), adds a 2-thread cache entry, no warning",
                 "exit %d, 2-thread entries %d -> %d (%s/%s.out)", rc[2], e2[1], e2[2], DIR, names[2]);

    /* OpenMP binding: libgomp pins the initial thread to its first place, so that thread's mask shows
     * one CPU while the team has all of them. On two CPUs with OMP_PROC_BIND=close OMP_PLACES=cores:
     * no --threads runs 2 (auto), --threads 2 warns of nothing, and the peaks are cached for 2 threads
     * only (the bug: 1 thread auto; with --threads 2 a "2 threads on 1 CPU" warning and a 1-thread
     * entry holding the 2-thread GEMM, which later 1-thread runs took as their peak). Control: one
     * place ({0}) is one CPU, 1 thread (auto), a 1-thread entry. */
    if (online >= 2) {
        const char *bn[3] = {"cpus_bind_auto", "cpus_bind_threads2", "cpus_bind_oneplace"},
                   *benv[3] = {"OMP_PROC_BIND=close OMP_PLACES=cores", "OMP_PROC_BIND=close OMP_PLACES=cores",
                               "OMP_PROC_BIND=close OMP_PLACES='{0}'"},
                   *bfl[3] = {"", "--threads 2", ""};
        int brc[3], b1[3], b2[3];
        for (int i = 0; i < 3; i++) {
            snprintf(cache, sizeof cache, "%s/peaks_bind%d.json", DIR, i);
            remove(cache);
            snprintf(cmd, sizeof cmd, "ST_PEAK_CACHE=%s %s taskset -c 0,1 %s train --data %s/train.bin " CPU_MODEL " %s",
                     cache, benv[i], g_bin, DIR, bfl[i]);
            brc[i] = run(bn[i], cmd, &secs);
            b1[i] = cache_entries(cache, 1), b2[i] = cache_entries(cache, 2);
        }
        tu_check(brc[0] == 0 && out_has(bn[0], ", 2 threads (auto),") && !out_has(bn[0], "warning:") && b2[0] >= 1 &&
                     b1[0] == 0,
                 "threads: OMP_PROC_BIND=close OMP_PLACES=cores on two CPUs, no --threads: 2 (auto), no warning, "
                 "peaks cached for 2 threads only", "exit %d, entries for 1 thread %d, for 2 %d (%s/%s.out)", brc[0],
                 b1[0], b2[0], DIR, bn[0]);
        tu_check(brc[1] == 0 && out_has(bn[1], ", 2 threads,") && !out_has(bn[1], "warning:") &&
                     !out_has(bn[1], " on 1 CPU") && b2[1] >= 1 && b1[1] == 0,
                 "threads: the same with --threads 2: no warning, no \"on 1 CPU\", peaks cached for 2 threads only",
                 "exit %d, entries for 1 thread %d, for 2 %d (%s/%s.out)", brc[1], b1[1], b2[1], DIR, bn[1]);
        tu_check(brc[2] == 0 && out_has(bn[2], ", 1 thread (auto),") && b1[2] >= 1 && b2[2] == 0,
                 "negative control: OMP_PLACES={0} (one place) runs 1 thread (auto), a 1-thread entry",
                 "exit %d, entries for 1 thread %d, for 2 %d (%s/%s.out)", brc[2], b1[2], b2[2], DIR, bn[2]);
    }

    /* Ranks: bound to one hardware thread each (hwthread, not core: one CPU on SMT machines too) with
     * 2 threads and without --threads (auto: 1); unbound with the node's CPUs each and without
     * --threads (auto: online/2 each). A given peak: nothing measured, the lines are the check. */
    const char *rflags[4] = {"--threads 2", "", "", ""}, *bind[4] = {"hwthread", "hwthread", "none", "none"},
               *rn[4] = {"cpus_mpi_hwthread2", "cpus_mpi_auto_hwthread", "cpus_mpi_none_all", "cpus_mpi_auto_none"};
    char allf[32];
    snprintf(allf, sizeof allf, "--threads %ld", online);
    rflags[2] = allf;
    int rrc[4] = {-1, -1, -1, -1};
    for (int i = 0; i < 4; i++) {
        snprintf(cmd, sizeof cmd, "timeout 120 %s --allow-run-as-root --bind-to %s -np 2 %s train --data %s/train.bin "
                 CPU_MODEL " %s --peak-gflops 100", g_mpi, bind[i], g_bin, DIR, rflags[i]);
        rrc[i] = run(rn[i], cmd, &secs);
    }
    char want[256], want2[96];
    snprintf(want, sizeof want, "warning: 2 ranks on one node run %ld threads on its %ld CPUs", 2 * online, online);
    int half = online / 2 > 1 ? (int)(online / 2) : 1;
    snprintf(want2, sizeof want2, "threads: rank 0 %d, rank 1 %d\n", half, half);
    tu_check(rrc[0] == 0 && out_has(rn[0], "warning: every rank runs 2 threads on the 1 CPU its affinity allows") &&
                 out_has(rn[0], "threads: rank 0 2, rank 1 2\n"),
             "threads: mpirun --bind-to hwthread -np 2 --threads 2 warns for every rank", "exit %d (%s/%s.out)", rrc[0], DIR,
             rn[0]);
    tu_check(rrc[1] == 0 && out_has(rn[1], "threads: rank 0 1, rank 1 1\n") && !out_has(rn[1], "warning:"),
             "threads: the same launch without --threads runs 1 per rank and warns of nothing (the run above is its "
             "control)", "exit %d (%s/%s.out)", rrc[1], DIR, rn[1]);
    tu_check(rrc[2] == 0 && out_has(rn[2], want), "threads: mpirun --bind-to none -np 2 with all CPUs each warns for the node",
             "exit %d, want '%s' (%s/%s.out)", rrc[2], want, DIR, rn[2]);
    tu_check(rrc[3] == 0 && out_has(rn[3], want2) && !out_has(rn[3], "warning:"),
             "threads: the same launch without --threads shares the node's CPUs and warns of nothing",
             "exit %d, want '%.40s' (%s/%s.out)", rrc[3], want2, DIR, rn[3]);
}

/* ---------------------------------------------------------------- memory per rank */

/* The state categories, named as in the memory record and in `plan --json`'s memory_bytes.by_category. */
static const char *const MEM_CAT[4] = {"parameters", "gradients", "master_weights", "optimizer_moments"};

/* The small model of the plan comparison (L=2 C=32 V=97, B=2, T=32) and the RSS model: a 50k
 * vocabulary with one block, 0.2-0.4 GB per rank (the runtime's ~6 MB of its own stay below 5%)
 * for little compute (B=1, T=32). */
#define MEM_SMALL "2:2:32:97:32:2"
#define MEM_BIG "1:6:384:50257:32:1"

/* `scaletrain plan --json` for the small model on dp ranks at ZeRO zero in precision prec. */
static cJSON *plan_json(int dp, int zero, const char *prec) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s plan --layers 2 --heads 2 --channels 32 --vocab 97 --max-seq-len 32 --seq-len 32 "
             "--micro-batch 2 --grad-accum 1 --threads 1 --dp %d --zero %d --precision %s --json", g_bin, dp, zero, prec);
    return rc_command_json(cmd);
}

/* The start-time memory record of a run (the one with measured_by_rank), or NULL. */
static const cJSON *memory_record(const cJSON *all, const char *field) { return rc_memory_record(all, field); }

/* Whether every rank's measured bytes of each state category equal the plan's per-rank figure;
 * detail names the first difference. */
static int plan_matches(const cJSON *plan, const cJSON *mem, int world, char *detail, size_t cap) {
    const cJSON *mb = cJSON_GetObjectItemCaseSensitive(plan, "memory_bytes");
    const cJSON *pm = cJSON_GetObjectItemCaseSensitive(mb, "by_category");
    const cJSON *by = cJSON_GetObjectItemCaseSensitive(mem, "measured_by_rank");
    const char *states = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(mb, "states"));
    snprintf(detail, cap, "%s", !pm ? "plan --json has no memory_bytes.by_category" : !by ? "no measured_by_rank"
                                : !states || strcmp(states, "trainer") ? "plan's states are not the trainer's" : "");
    if (detail[0]) return 0;
    size_t o = 0;
    for (int c = 0; c < 4; c++) {
        double p = num(pm, MEM_CAT[c]);
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(by, MEM_CAT[c]);
        int same = cJSON_GetArraySize(a) == world;
        for (int q = 0; same && q < world; q++) same = cJSON_GetArrayItem(a, q)->valuedouble == p;
        o += (size_t)snprintf(detail + o, o < cap ? cap - o : 0, "%s%s %.0f%s", c ? ", " : "", MEM_CAT[c], p,
                              same ? "" : " DIFFERS from rank 0's");
        if (!same && o < cap) o += (size_t)snprintf(detail + o, cap - o, " %.0f", a ? cJSON_GetArrayItem(a, 0)->valuedouble : -1);
    }
    return !strstr(detail, "DIFFERS");
}

/* Per-rank bytes from two independent sides: `plan --json` (the planner's analytic figure) against
 * what every rank allocated, dp 2 and 4 × ZeRO 0–3 × fp32/bf16 (16 runs of one step, 8 per job);
 * and each rank's resident memory against its allocated total. Negative controls: the plan of the
 * wrong grid (dp 1) must differ; RSS against the allocation without the moments must fail. */
static void memory(void) {
    Err e;
    enum { N = 40000 };
    static uint16_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = (uint16_t)((i * 7919 + (i / 13) * 31) % 50257);
    uint32_t *t32 = malloc(N * sizeof *t32);
    for (int i = 0; t32 && i < N; i++) t32[i] = tok[i];
    ShardMeta meta = {0, N, 50257};
    if (!t32 || shard_write(DIR "/v50k.bin", t32, N, &meta, &e) != ST_OK) printf("v50k.bin: %s\n", e.msg), exit(1);
    free(t32);
    static const char *const PREC[2] = {"fp32", "bf16"};
    for (int np = 2; np <= 4; np += 2) {
        /* The RSS run first (a clean heap), then the plan grid. ZeRO 0's RSS has a job of its own
         * below: Open MPI's nonblocking all-reduce mallocs a temporary buffer per bucket in flight
         * and glibc keeps the freed heap (its mmap threshold rises after the first large free), which
         * held +5-14% on C=384-512, V=50k while every bucket started at once; at most
         * ZERO_BUCKETS_IN_FLIGHT run now (parallel/zero.c). */
        int rz = np == 2 ? 2 : 3;
        const char *rp = np == 2 ? "fp32" : "bf16";
        char cmd[8192], name[64];
        int runs = 0;
        int o = snprintf(cmd, sizeof cmd, "timeout 300 %s --allow-run-as-root --oversubscribe -np %d -x OMP_NUM_THREADS=1 %s %s",
                         g_mpi, np, ST_BINARY_DIR "/tests/dp_memory_worker", DIR);
#if !defined(__SANITIZE_ADDRESS__) /* the RSS run serves the RSS check alone, which ASan's shadow voids (below) */
        o += snprintf(cmd + o, sizeof cmd - (size_t)o, " rss%d:%s/v50k.bin:" MEM_BIG ":%d:%s:2", np, DIR, rz, rp);
        runs++;
#else
        (void)rz, (void)rp;
#endif
        for (int z = 0; z <= 3; z++)
            for (int p = 0; p < 2; p++, runs++)
                o += snprintf(cmd + o, sizeof cmd - (size_t)o, " mem%d_z%d_%s:%s/train.bin:" MEM_SMALL ":%d:%s:1", np, z,
                              PREC[p], DIR, z, PREC[p]);
        snprintf(name, sizeof name, "memory_np%d", np);
        double secs;
        int rc = run(name, cmd, &secs);
        printf("%s: %d runs in one job, %.1f s\n", name, runs, secs);
        if (rc != 0) {
            tu_check(0, name, "exit %d, see %s/%s.out", rc, DIR, name);
            continue;
        }
        for (int z = 0; z <= 3; z++)
            for (int p = 0; p < 2; p++) {
                snprintf(name, sizeof name, "mem%d_z%d_%s", np, z, PREC[p]);
                cJSON *all = records(name), *plan = plan_json(np, z, PREC[p]);
                char detail[512], what[128];
                int ok = plan_matches(plan, memory_record(all, "measured_by_rank"), np, detail, sizeof detail);
                snprintf(what, sizeof what, "dp %d ZeRO %d %s: plan --json per-rank bytes == every rank's allocation", np,
                         z, PREC[p]);
                tu_check(ok, what, "%s", detail);
                if (z == 1 && p == 0) { /* negative control: the plan of one process */
                    cJSON *wrong = plan_json(1, z, PREC[p]);
                    int caught = !plan_matches(wrong, memory_record(all, "measured_by_rank"), np, detail, sizeof detail);
                    snprintf(what, sizeof what, "negative control: the plan of dp 1 against dp %d ZeRO 1's allocation", np);
                    tu_check(caught, what, "%s", detail);
                    cJSON_Delete(wrong);
                }
                cJSON_Delete(plan), cJSON_Delete(all);
            }
#if defined(__SANITIZE_ADDRESS__)
        /* AddressSanitizer maps shadow memory and quarantines frees: RSS is not the program's (as
         * in test_memory); the release build runs this check, and its large RSS runs. */
        printf("dp %d RSS check and its run skipped: built with AddressSanitizer\n", np);
#else
        snprintf(name, sizeof name, "rss%d", np);
        cJSON *all = records(name);
        char label[96], control[16];
        snprintf(label, sizeof label, "dp %d ZeRO %d %s", np, rz, rp), snprintf(control, sizeof control, "dp %d", np);
        rc_check_rss(all, np, label, control);
        cJSON_Delete(all);
        if (np == 2) { /* ZeRO 0: the all-reduce buckets in flight are bounded, and so their temporaries */
            snprintf(cmd, sizeof cmd, "timeout 300 %s --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS=1 %s %s "
                     "rss2z0:%s/v50k.bin:" MEM_BIG ":0:fp32:2", g_mpi, ST_BINARY_DIR "/tests/dp_memory_worker", DIR, DIR);
            rc = run("memory_rss_zero0", cmd, &secs);
            all = rc == 0 ? records("rss2z0") : NULL;
            tu_check(rc == 0 && all, "dp 2 ZeRO 0 RSS run", "exit %d", rc);
            if (all) rc_check_rss(all, 2, "dp 2 ZeRO 0 fp32", "dp 2 ZeRO 0");
            cJSON_Delete(all);
        }
#endif
    }
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: test_dp MPIEXEC SCALETRAIN [equiv|scale|mixed|resume|fault|overlap|prefetch|mfu|peak|memory]\n");
        return 2;
    }
    g_mpi = argv[1], g_bin = argv[2];
    const char *what = argc > 3 ? argv[3] : "all";
    rc_make_data(DIR);
    if (!strcmp(what, "equiv") || !strcmp(what, "all")) equiv();
    if (!strcmp(what, "scale") || !strcmp(what, "all")) scale();
    if (!strcmp(what, "mixed") || !strcmp(what, "all")) mixed();
    if (!strcmp(what, "resume") || !strcmp(what, "all")) resume();
    if (!strcmp(what, "fault") || !strcmp(what, "all")) fault();
    if (!strcmp(what, "overlap") || !strcmp(what, "all")) overlap();
    if (!strcmp(what, "prefetch") || !strcmp(what, "all")) prefetch();
    if (!strcmp(what, "mfu") || !strcmp(what, "all")) mfu();
    if (!strcmp(what, "peak") || !strcmp(what, "all")) peak_cache(), threads_cpus();
    if (!strcmp(what, "memory") || !strcmp(what, "all")) memory();
    return tu_exit();
}
