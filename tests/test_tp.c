/* test_tp.c — tensor (Megatron) and sequence parallelism end to end: `scaletrain train --tp N [--sp]`
 * under mpirun against one process (issue 13). Modelled on test_dp.c.
 *
 * Usage: test_tp MPIEXEC SCALETRAIN TP_WORKER [equiv|mixed|resume|rest|refuse|memory|overlap]
 *
 * Oracle: one process running the same global batch (micro-batch 2 × accumulation 4 = 8 sequences
 * per step; a world of tp ranks runs accumulation 4, dp 2 × tp 2 accumulation 2), 10 steps, fp32,
 * AdamW with clipping at 1. Every comparison covers every step's loss AND its logged gradient norm,
 * that every rank logged the same norm (grad_norm_by_rank: `world` entries bitwise equal to
 * grad_norm), and every final tensor of the `--out` weights (written in full shapes at any tp, read
 * with the one-process layout). Tolerances (issue 13): losses and norms 1e-6 relative per step;
 * weights 1e-5 relative norm per tensor, AdamW runs throughout, the key third of each qkv bias by an
 * absolute 1e-4 instead (its gradient is zero in exact arithmetic, so it holds rounding noise that
 * Adam turns into ±lr steps whose signs follow the summation order; see runcmp.h's rc_weights_rel).
 * Measured (1 thread per rank): losses ≤ 9.3e-9, norms ≤ 1.2e-7, weights ≤ 1.0e-6 over 10 steps
 * (1.6e-6 over the spike runs' 64), key bias ≤ 1.8e-5: the tp fault moves losses 1.3e-2, norms 0.34.
 *   equiv   tp 2, tp 4 (4 heads), tp 2 --sp, dp 2 × tp 2 at ZeRO 0–3, tp 2 --dropout 0.1, tp 2 --sp
 *           --dropout 0.1 --recompute full, tp 2 --recompute selective (each against one process with
 *           the same model, dropout and recompute flags), each validating at steps 1, 5 and 10 on a
 *           val shard: its val records' losses within 1e-6 of the reference's (negative control: tp 2
 *           against a reference validated on other data fails). Negative controls: tp 2 with the test-only
 *           fault ST_PAR_TEST_TP_FAULT=1 (the backward skips its tp all-reduces: Megatron's f
 *           operator missing) must fail the loss/norm comparison; a step record with one rank's
 *           norm one ulp off must be reported unequal.
 *   mixed   tp 2 in bf16 (also with --sp, and dp 2 × tp 2 ZeRO 1) and in fp16 (loss scale 1024)
 *           against one process in the same precision, within 3× the spread that another
 *           micro-batch split (4×2 vs 2×4) shows in one process, losses within 1e-4 (test_dp's
 *           mixed()); norms bitwise equal on every rank. Negative control: the tp fault in each
 *           precision falls outside the spread.
 *   resume  tp 2 stops after step 5 → resumes at tp 1; one process stops after 5 → resumes at tp 2;
 *           dp 2 × tp 2 ZeRO 1 stops after 5 → resumes at tp 4 (4 heads): losses, norms and weights
 *           as the uninterrupted one process, and the log shows the resume (tu_log_resumed: steps
 *           1..5, a start record with resumed_from_step 5 on the new world, then 6..10). Negative
 *           control: a tp 2 resume pointed at an empty --ckpt-dir passes the comparison (a fresh
 *           start reproduces the run) and must be caught by the log check.
 *   rest    --init-from (a one-process run's model.safetensors) at tp 2 equals tp 1 from the same
 *           file (negative control: the tp 2 run without --init-from differs); spike handling
 *           (tp_worker: the test hooks debug_spike_step / debug_nan_step, policies skip, rollback with
 *           a checkpoint every 20 steps, log with NaN gradients; 64 steps) at tp 2 takes the same
 *           actions at the same steps as one process and ends at the same weights (negative
 *           control: the tp 2 skip run's actions against a clean one-process run differ); export:
 *           10 steps at tp 2 and in one process from a trained byte model (200 one-process steps),
 *           the tp 2 run's --out weights and `scaletrain export` of its checkpoint (bit-identical to
 *           --out) load in `eval` and `sample` at tp 1: eval loss within 1e-6 of the one-process
 *           run's weights, greedy text identical (negative control: --out with tp rank 1's half of
 *           layer 0's c_fc weight zeroed, what a save without the gather would hold, fails both).
 *   refuse  --heads 3 with --tp 2, --tp 3 on 2 ranks, --sp with --tp 1, --sp with micro-batch ×
 *           seq-len = 1 × 31 at tp 2, --sample-every 5 with --tp 2: each exits 2 with one error line
 *           (the same on every rank) naming the flag and both numbers, before the model is allocated
 *           (no log file: the log opens after the model). Negative control: the same commands with
 *           valid values (4 heads, 2 ranks, tp 2, 1 × 32, --sample-every 0) run and log.
 *   memory  tp 2, tp 2 --sp, dp 2 × tp 2 ZeRO 1, bf16 tp 2, tp 2 --sp selective recompute, bf16 tp 2
 *           full recompute: the first step's measured activation bytes equal a count made in the
 *           test tensor by tensor from B, T, C, heads, L, tp, sp, recompute and precision
 *           (act_bytes_closed; negative control: the count for tp 1, and without --sp, against the
 *           tp 2 and --sp runs' bytes differ); every rank's state bytes equal the planned
 *           (planned_equals_measured, measured_by_rank), the start record's memory_planned
 *           activations and workspace equal the first step's measured ones, every rank allocated
 *           the same total. Negative control: the tp 2 plan's activations against the --sp run's
 *           measured ones differ. Each rank's resident memory above its baseline within 5% of its
 *           allocated total at tp 2 and at dp 2 × tp 2 ZeRO 1 bf16 on a 50k-vocabulary model
 *           (0.3 GB per rank; release build only, as test_dp). Negative control: the allocation
 *           less the moments fails the 5% check.
 *   overlap the overlapped tp collectives (issue 28) against the blocking path (test switch
 *           ST_PAR_TEST_TP_BLOCKING=1) at tp 2, tp 2 --sp, tp 2 --sp bf16 with dropout and full
 *           recompute: losses, norms and final weights equal to the bit, and every step record's
 *           tp_overlapped equal to the count of overlapped collectives (0 on the blocking
 *           path); the forward's row-parallel sums run in layout_tp_row_chunks pieces (one run with
 *           an odd row count per rank). Negative controls: ST_PAR_TEST_TP_NOWAIT=1 (the overlapped
 *           waits return at once) fails the comparison with one process, with and without --sp;
 *           ST_PAR_TEST_TP_NOWAIT_FWD=1 (only the forward's chunked sums not waited) differs from
 *           the blocking run, with and without --sp. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/safetensors.h"
#include "core/fileio.h"
#include "core/timer.h"
#include "data/shard.h"
#include "model/layout.h"
#include "runcmp.h"
#include "testutil.h"

#define DIR ST_BINARY_DIR "/test_tp"
#define STEPS 10

typedef RcTol Tol; /* losses and norms: max rel per step; weights: per-tensor rel norm; key bias abs */
static const Tol TOL = {1e-6, 1e-6, 1e-5, 1e-4};

static const char *g_mpi, *g_bin, *g_worker;

/* Runs a shell command with output to DIR/name.out; returns the exit code (-1 on a signal). */
static int run(const char *name, const char *cmd, double *secs) { return rc_run(DIR, name, cmd, secs); }

/* mpirun's prefix for np ranks with one thread each, env "VAR=value" (or NULL) set on every rank. */
static void launcher(char *out, size_t cap, int np, const char *env) {
    char var[64] = "";
    if (env) snprintf(var, sizeof var, "%.*s", (int)strcspn(env, "="), env);
    if (np > 0)
        snprintf(out, cap, "%s timeout 150 %s --allow-run-as-root --oversubscribe -np %d -x OMP_NUM_THREADS=1 %s%s ",
                 env ? env : "", g_mpi, np, var[0] ? "-x " : "", var);
    else
        snprintf(out, cap, "%s%s", env ? env : "", env ? " " : "");
}

#define COMMON                                                                                                \
    "train --data " DIR "/train.bin --layers 2 --channels 32 --max-seq-len 32 --seq-len 32 --micro-batch 2 "    \
    "--lr 2e-3 --min-lr 2e-4 --warmup 5 --threads 1 --peak-gflops 100 --quiet"

/* Validation for the runs of a part that compares it (g_val): the val shard, at steps 1, 5 and 10 on
 * 2 micro-batches; otherwise none. */
#define VAL_ON "--val-data " DIR "/val.bin --val-every 5 --val-batches 2"
static int g_val;
static const char *val_flags(void) { return g_val ? VAL_ON : "--val-every 0"; }


/* One training run of the small model with `heads` heads: np 0 = one process without mpirun. extra
 * holds the grid (--tp, --sp, --zero) and anything else; append keeps the log (a resumed run
 * continues it), else it is removed first. */
static int train_steps_env(const char *name, int np, int heads, int k, int steps, const char *extra, const char *env,
                           int append, double *secs) {
    char cmd[4096], launch[1024];
    launcher(launch, sizeof launch, np, env);
    const char *vf = val_flags(); /* an extra's own --val-data replaces VAL_ON's (a flag is given once) */
    if (g_val && extra && strstr(extra, "--val-data ")) vf = "--val-every 5 --val-batches 2";
    char base[2048], common[2048];
    snprintf(base, sizeof base, COMMON " %s --heads %d --steps %d --grad-accum %d", vf, heads, steps, k);
    snprintf(cmd, sizeof cmd, "%s%s %s --log %s/%s.jsonl --out %s/%s_out %s", launch, g_bin,
             tu_less_given(common, sizeof common, base, extra), DIR, name, DIR, name, extra ? extra : "");
    char lg[1200], rm[1400];
    snprintf(lg, sizeof lg, "%s/%s.jsonl", DIR, name);
    snprintf(rm, sizeof rm, "rm -rf %s/%s_out", DIR, name);
    /* A new run starts without the log and weights of an earlier test run (never compared stale). */
    if (!append && (remove(lg), !tu_shell(rm))) return -1;
    return run(name, cmd, secs);
}

static int train_env(const char *name, int np, int heads, int k, const char *extra, const char *env, int append,
                     double *secs) {
    return train_steps_env(name, np, heads, k, STEPS, extra, env, append, secs);
}

/* A run of `steps` steps that must succeed: prints its time; a failure is reported and returns 0. */
static int train_steps_ok(const char *name, int np, int heads, int k, int steps, const char *extra) {
    double secs;
    int rc = train_steps_env(name, np, heads, k, steps, extra, NULL, 0, &secs);
    printf("%s: %.1f s\n", name, secs);
    if (rc != 0) tu_check(0, name, "exit %d, see %s/%s.out", rc, DIR, name);
    return rc == 0;
}

/* A run that must succeed: prints its time; a failure is reported and returns 0. */
static int train_ok(const char *name, int np, int heads, int k, const char *extra) {
    double secs;
    int rc = train_env(name, np, heads, k, extra, NULL, 0, &secs);
    printf("%s: %.1f s\n", name, secs);
    if (rc != 0) tu_check(0, name, "exit %d, see %s/%s.out", rc, DIR, name);
    return rc == 0;
}

/* ---------------------------------------------------------------- the metrics log */

/* The step records of a run (runcmp.h; the spike runs log 64 steps, within RC_MAXSTEPS). */
typedef RcLog Log;

static double num(const cJSON *o, const char *k) { return rc_num(o, k); }
static const char *event_of(const cJSON *o) { return rc_event(o); }
static cJSON *records(const char *name) { return rc_records(DIR, name); }
static int read_log(const char *name, Log *lg) { return rc_read_log(DIR, name, lg); }

/* Every step 1..steps's loss and grad_norm of run `name` against `ref` (max relative difference);
 * 1 if both logs hold exactly `steps` steps. */
static int log_diffs(const char *name, const char *ref, int steps, double *loss, double *norm, Log *la) {
    return rc_log_diffs(DIR, name, ref, steps, loss, norm, la);
}

/* ---------------------------------------------------------------- weights */

/* The one-process layout of the model (L=2 C=32, `heads` heads, vocabulary V) for reading weights. */
static void test_layout(ParamLayout *pl, int heads, int vocab) {
    ModelConfig mc = {2, heads, 32, vocab, 0, 32, 0};
    Err e;
    model_config_validate(&mc, &e);
    layout_init(pl, &mc, 1);
}

/* Final weights of a run (DIR/<name>_out/model.safetensors) in the one-process layout. */
static float *weights(const char *name, const ParamLayout *pl) { return rc_weights(DIR, name, pl); }

/* Run `name` against `ref` over `steps` steps: losses, gradient norms, per-rank norms, final weights.
 * Prints one table row (the measured maxima). */
static void compare_tol(const char *name, const char *ref, int steps, const ParamLayout *pl, Tol t) {
    float *wref = weights(ref, pl);
    Tol got;
    rc_compare(DIR, name, ref, steps, pl, wref, t, &got);
    printf("| %-22s | %-14s | %8.1e | %8.1e | %8.1e | %8.1e |\n", name, ref, got.loss, got.norm, got.w, got.key);
    free(wref);
}

/* ---------------------------------------------------------------- the grid a run used */

/* Whether run `name` ran on dp × tp (sp: with sequence parallelism), from its last start record
 * (config dp, tp, sp and world) and its last step record's comm_bytes_by_kind: tp > 1 moves tp
 * all-reduce bytes (with --sp: tp all-gather and reduce-scatter bytes), tp 1 none, dp > 1 moves
 * dp bytes. A run that ignored --tp (every rank a dp replica) equals one process too: this tells
 * them apart. detail says what was found. */
static int grid_ok(const char *name, int dp, int tp, int sp, char *detail, size_t cap) {
    cJSON *all = records(name);
    const cJSON *o, *start = NULL, *step = NULL;
    cJSON_ArrayForEach(o, all) {
        const char *ev = event_of(o);
        if (ev && !strcmp(ev, "start")) start = o;
        if (ev && !strcmp(ev, "step")) step = o;
    }
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(start, "config");
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(step, "comm_bytes_by_kind");
    double gdp = num(cfg, "dp"), gtp = num(cfg, "tp"), world = num(start, "world");
    int gsp = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cfg, "sp")) || num(cfg, "sp") == 1;
    double ar = num(kind, "tp all-reduce"), ag = num(kind, "tp all-gather"), rs = num(kind, "tp reduce-scatter");
    double dpb = num(kind, "all-reduce") + num(kind, "reduce-scatter") + num(kind, "all-gather");
    snprintf(detail, cap, "start: dp %.0f tp %.0f sp %d world %.0f; step bytes: tp all-reduce %.0f, tp all-gather %.0f, "
             "tp reduce-scatter %.0f, dp %.0f", gdp, gtp, gsp, world, ar, ag, rs, dpb);
    int ok = start && step && gdp == dp && gtp == tp && gsp == sp && world == dp * tp;
    ok = ok && (tp == 1 ? ar == 0 && ag == 0 && rs == 0 : sp ? ag > 0 && rs > 0 : ar > 0 && ag == 0 && rs == 0);
    ok = ok && (dp > 1) == (dpb > 0);
    cJSON_Delete(all);
    return ok;
}

static void check_grid(const char *name, int dp, int tp, int sp) {
    char detail[512], what[160];
    snprintf(what, sizeof what, "%s: ran on dp %d x tp %d%s", name, dp, tp, sp ? " with --sp" : "");
    tu_check(grid_ok(name, dp, tp, sp, detail, sizeof detail), what, "%s", detail);
}

/* ---------------------------------------------------------------- equiv */

static void equiv(void) {
    ParamLayout p2, p4;
    test_layout(&p2, 2, 97), test_layout(&p4, 4, 97);
    /* The one-process references: the same model, dropout and recompute, 2 × 4 micro-batches. */
    static const struct {
        const char *name, *extra;
        int heads;
    } REF[] = {{"ref", "", 2}, {"ref_h4", "", 4}, {"ref_drop", "--dropout 0.1", 2},
               {"ref_drop_full", "--dropout 0.1 --recompute full", 2}, {"ref_sel", "--recompute selective", 2}};
    g_val = 1; /* every run of this part validates: the eval path under tp against one process */
    for (size_t i = 0; i < sizeof REF / sizeof REF[0]; i++) train_ok(REF[i].name, 0, REF[i].heads, 4, REF[i].extra);
    static const struct {
        const char *name, *ref, *extra;
        int np, heads, k, dp, tp, sp;
    } RUN[] = {
        {"tp2", "ref", "--tp 2", 2, 2, 4, 1, 2, 0},
        {"tp4", "ref_h4", "--tp 4", 4, 4, 4, 1, 4, 0},
        {"tp2_sp", "ref", "--tp 2 --sp", 2, 2, 4, 1, 2, 1},
        {"dp2_tp2_zero0", "ref", "--tp 2 --zero 0", 4, 2, 2, 2, 2, 0},
        {"dp2_tp2_zero1", "ref", "--tp 2 --zero 1", 4, 2, 2, 2, 2, 0},
        {"dp2_tp2_zero2", "ref", "--tp 2 --zero 2", 4, 2, 2, 2, 2, 0},
        {"dp2_tp2_zero3", "ref", "--tp 2 --zero 3", 4, 2, 2, 2, 2, 0},
        {"tp2_drop", "ref_drop", "--tp 2 --dropout 0.1", 2, 2, 4, 1, 2, 0},
        {"tp2_sp_drop_full", "ref_drop_full", "--tp 2 --sp --dropout 0.1 --recompute full", 2, 2, 4, 1, 2, 1},
        {"tp2_sel", "ref_sel", "--tp 2 --recompute selective", 2, 2, 4, 1, 2, 0},
    };
    printf("| run                    | reference      | loss     | norm     | weights  | key abs  |\n");
    for (size_t i = 0; i < sizeof RUN / sizeof RUN[0]; i++)
        if (train_ok(RUN[i].name, RUN[i].np, RUN[i].heads, RUN[i].k, RUN[i].extra)) {
            compare_tol(RUN[i].name, RUN[i].ref, STEPS, RUN[i].heads == 4 ? &p4 : &p2, TOL);
            check_grid(RUN[i].name, RUN[i].dp, RUN[i].tp, RUN[i].sp);
            rc_check_val(DIR, RUN[i].name, RUN[i].ref, 3, TOL.loss);
        }
    /* Negative control of the validation comparison: the reference validated on other data. */
    if (train_ok("ref_otherval", 0, 2, 4, "--val-data " DIR "/val_other.bin")) {
        double vw = NAN;
        int vn = 0, same = rc_val_diffs(DIR, "tp2", "ref_otherval", 3, &vw, &vn);
        tu_check(same && vw > TOL.loss, "negative control: tp 2's validation losses against a reference validated on "
                 "other data fail", "%d records, max rel %.2e (tol %g)", vn, vw, TOL.loss);
    }
    /* Negative control of the grid check: the one-process reference is no tp 2 run. */
    char detail[512];
    tu_check(!grid_ok("ref", 1, 2, 0, detail, sizeof detail), "negative control: one process is not taken for tp 2",
             "%s", detail);

    /* The dropout references are not vacuous: dropout changes the one-process trajectory. */
    double dl = NAN, dn = NAN;
    Log ld;
    int both = log_diffs("ref_drop", "ref", STEPS, &dl, &dn, &ld);
    tu_check(both && dl > 1e3 * TOL.loss, "--dropout 0.1 changes the one-process losses (the dropout runs test dropout)",
             "ref_drop vs ref: losses max rel %.2e", dl);

    /* Negative control: the backward without its tp all-reduces (the f operator's). */
    double secs, lw = NAN, nw = NAN;
    Log la;
    int rc = train_env("tp2_fault", 2, 2, 4, "--tp 2", "ST_PAR_TEST_TP_FAULT=1", 0, &secs);
    int all = rc == 0 && log_diffs("tp2_fault", "ref", STEPS, &lw, &nw, &la);
    tu_check(all && (lw > TOL.loss || nw > TOL.norm), "negative control: tp 2 without the backward's tp all-reduces "
             "fails the comparison", "exit %d; losses max rel %.2e, grad_norm max rel %.2e (tol %g)", rc, lw, nw, TOL.norm);

    /* Negative control of the per-rank norm check: the last rank's norm of a real record one ulp off. */
    rc_check_norm_control(DIR, "tp4", 4);
    g_val = 0;
    layout_free(&p2), layout_free(&p4);
}

/* ---------------------------------------------------------------- mixed */

/* Mixed precision at tp 2 against one process in the same precision. The fp32 masters differ only
 * by summation order, but a master on the other side of a rounding boundary moves its 2-byte copy
 * by 2^-8 (bf16) relative, and training carries that on: the oracle is the spread the precision
 * shows for another summation order in one process (4×2 against 2×4 and 1×8 micro-batches, the
 * same global batch; the mean of the two). Within 3× that spread (weights, key bias, norms), losses within 1e-4, as test_dp. */
static void mixed(void) {
    ParamLayout pl;
    test_layout(&pl, 2, 97);
    const char *prec[2] = {"--precision bf16", "--precision fp16 --loss-scale 1024"};
    const char *tag[2] = {"bf16", "fp16"};
    for (int k = 0; k < 2; k++) {
        char ref[64], alt[64], name[64], extra[128];
        char alt8[64];
        snprintf(ref, sizeof ref, "mref_%s", tag[k]), snprintf(alt, sizeof alt, "mref_mb4_%s", tag[k]);
        snprintf(alt8, sizeof alt8, "mref_mb8_%s", tag[k]);
        snprintf(name, sizeof name, "tp2_%s", tag[k]);
        snprintf(extra, sizeof extra, "%s --micro-batch 4", prec[k]);
        if (!train_ok(ref, 0, 2, 4, prec[k]) || !train_ok(alt, 0, 2, 2, extra)) continue;
        snprintf(extra, sizeof extra, "%s --micro-batch 8", prec[k]);
        if (!train_ok(alt8, 0, 2, 1, extra)) continue;
        /* The spread of one reordering is one draw of a chaotic quantity (bf16: 1.2e-3 to 1.5e-3
         * between builds of the same code, 2026-11-28), so it is the mean over two: 2x4 and 1x8
         * micro-batches against 4x2. */
        Tol sp, sp8;
        rc_spread(DIR, alt, ref, STEPS, &pl, tag[k], &sp);
        rc_spread(DIR, alt8, ref, STEPS, &pl, tag[k], &sp8);
        sp = (Tol){0, (sp.norm + sp8.norm) / 2, (sp.w + sp8.w) / 2, (sp.key + sp8.key) / 2};
        snprintf(extra, sizeof extra, "--tp 2 %s", prec[k]);
        Tol t = {1e-4, 3 * sp.norm, 3 * sp.w, 3 * sp.key};
        if (train_ok(name, 2, 2, 4, extra)) compare_tol(name, ref, STEPS, &pl, t), check_grid(name, 1, 2, 0);
        if (k == 0) { /* bf16 with --sp, and dp 2 × tp 2 at ZeRO 1 */
            char more[160];
            snprintf(more, sizeof more, "--tp 2 --sp %s", prec[k]);
            if (train_ok("tp2_sp_bf16", 2, 2, 4, more))
                compare_tol("tp2_sp_bf16", ref, STEPS, &pl, t), check_grid("tp2_sp_bf16", 1, 2, 1);
            snprintf(more, sizeof more, "--tp 2 --zero 1 %s", prec[k]);
            if (train_ok("dp2_tp2_zero1_bf16", 4, 2, 2, more))
                compare_tol("dp2_tp2_zero1_bf16", ref, STEPS, &pl, t), check_grid("dp2_tp2_zero1_bf16", 2, 2, 0);
        }
        /* Negative control: the backward's tp all-reduces skipped, in this precision. */
        double secs, lw = NAN, nw = NAN;
        Log la;
        char fault[64], what[160];
        snprintf(fault, sizeof fault, "tp2_%s_fault", tag[k]);
        int rc = train_env(fault, 2, 2, 4, extra, "ST_PAR_TEST_TP_FAULT=1", 0, &secs);
        int all = rc == 0 && log_diffs(fault, ref, STEPS, &lw, &nw, &la);
        snprintf(what, sizeof what, "negative control: %s tp 2 without the backward's tp all-reduces is outside the "
                 "spread", tag[k]);
        tu_check(all && (lw > t.loss || nw > t.norm), what, "exit %d; losses max rel %.2e (tol %g), grad_norm max rel "
                 "%.2e (tol %.2e)", rc, lw, t.loss, nw, t.norm);
    }
    layout_free(&pl);
}

/* ---------------------------------------------------------------- resume */

typedef struct {
    int np, k;         /* ranks (0: one process without mpirun) and accumulation */
    const char *grid;  /* --tp / --zero flags */
} Grid;

/* Trains `name` to step 5 on grid a (--stop-after 5) with checkpoints in DIR/<name>_ck, then runs
 * grid b with --resume auto from `from_ck` (NULL: the same directory) to step 10, appending to the
 * log; 1 if both parts exit 0. */
static int stop_then(const char *name, int heads, Grid a, Grid b, const char *from_ck) {
    char cmd[1400], ex[1400], ck[1200];
    double s1, s2;
    snprintf(ck, sizeof ck, "%s/%s_ck", DIR, name);
    snprintf(cmd, sizeof cmd, "rm -rf %s", ck);
    if (!tu_shell(cmd)) return 0;
    snprintf(ex, sizeof ex, "--ckpt-dir %s --stop-after 5 %s", ck, a.grid);
    int rc1 = train_env(name, a.np, heads, a.k, ex, NULL, 0, &s1);
    snprintf(ex, sizeof ex, "--ckpt-dir %s --resume auto %s", from_ck ? from_ck : ck, b.grid);
    int rc2 = train_env(name, b.np, heads, b.k, ex, NULL, 1, &s2);
    printf("%s: %.1f s + %.1f s\n", name, s1, s2);
    tu_check(rc1 == 0 && rc2 == 0, name, "stop at 5 on %d rank(s) '%s', resume on %d '%s': exit %d, %d", a.np ? a.np : 1,
             a.grid, b.np ? b.np : 1, b.grid, rc1, rc2);
    return rc1 == 0 && rc2 == 0;
}

/* Stop at 5 and resume; the log must show the resume. */
static int stop_and_resume(const char *name, int heads, Grid a, Grid b) {
    if (!stop_then(name, heads, a, b, NULL)) return 0;
    char lg[1200], why[512], what[256];
    snprintf(lg, sizeof lg, "%s/%s.jsonl", DIR, name);
    snprintf(what, sizeof what, "%s: resumed from step 5 on %d rank(s) '%s', the log continues", name, b.np ? b.np : 1,
             b.grid);
    tu_check(tu_log_resumed(lg, 5, STEPS, a.np ? a.np : 1, b.np ? b.np : 1, why, sizeof why), what, "%s", why);
    return 1;
}

static void resume(void) {
    ParamLayout p2, p4;
    test_layout(&p2, 2, 97), test_layout(&p4, 4, 97);
    train_ok("rref", 0, 2, 4, ""), train_ok("rref_h4", 0, 4, 4, "");
    Grid one = {0, 4, ""}, tp2 = {2, 4, "--tp 2"};
    printf("| run                    | reference      | loss     | norm     | weights  | key abs  |\n");
    if (stop_and_resume("res_tp2_tp1", 2, tp2, one))
        compare_tol("res_tp2_tp1", "rref", STEPS, &p2, TOL), check_grid("res_tp2_tp1", 1, 1, 0);
    if (stop_and_resume("res_tp1_tp2", 2, one, tp2))
        compare_tol("res_tp1_tp2", "rref", STEPS, &p2, TOL), check_grid("res_tp1_tp2", 1, 2, 0);
    if (stop_and_resume("res_dp2tp2_tp4", 4, (Grid){4, 2, "--tp 2 --zero 1"}, (Grid){4, 4, "--tp 4"}))
        compare_tol("res_dp2tp2_tp4", "rref_h4", STEPS, &p4, TOL), check_grid("res_dp2tp2_tp4", 1, 4, 0);
    /* Negative control: a resume pointed at an empty --ckpt-dir (emptied first: the fresh start
     * saves its final checkpoint there) starts afresh; the comparison passes, the log check must not. */
    if (!tu_shell("rm -rf " DIR "/empty_ck") || file_mkdirs(DIR "/empty_ck", &(Err){0}) != ST_OK)
        tu_check(0, "empty checkpoint directory", "cannot make %s/empty_ck", DIR);
    if (stop_then("res_empty", 2, tp2, tp2, DIR "/empty_ck")) {
        double lw = NAN, nw = NAN;
        Log la;
        float *w = weights("res_empty", &p2), *wref = weights("rref", &p2);
        double kabs = INFINITY, ww = w && wref ? rc_weights_rel(&p2, w, wref, &kabs) : INFINITY;
        int old_pass = log_diffs("res_empty", "rref", STEPS, &lw, &nw, &la) && lw <= TOL.loss && nw <= TOL.norm &&
                       ww <= TOL.w && kabs <= TOL.key;
        char why[512];
        int caught = !tu_log_resumed(DIR "/res_empty.jsonl", 5, STEPS, 2, 2, why, sizeof why);
        tu_check(old_pass && caught, "negative control: a tp 2 resume from an empty --ckpt-dir passes the comparison, "
                 "the log check catches it", "losses %.2e, norms %.2e, weights %.2e vs the uninterrupted run; %s", lw, nw,
                 ww, why);
        free(w), free(wref);
    }
    layout_free(&p2), layout_free(&p4);
}

/* ---------------------------------------------------------------- rest: init-from, spikes, export */

/* Byte tokens (vocabulary 257: 256 bytes and end-of-text) for `sample --tokenizer bytes`. */
static void make_byte_data(void) {
    Err e;
    enum { N = 30000 };
    static uint32_t tok[N];
    static const char text[] = "the quick brown fox jumps over the lazy dog; pack my box with five dozen liquor jugs. ";
    for (int i = 0; i < N; i++) tok[i] = (uint8_t)text[(i + i / 997) % (sizeof text - 1)];
    ShardMeta meta = {0, N, 257};
    if (shard_write(DIR "/bytes.bin", tok, N, &meta, &e) != ST_OK) printf("%s\n", e.msg), exit(1);
}

/* tp_worker's run (64 steps, test_health_train's model) on np ranks at tp. */
static int worker(const char *name, int np, int tp, const char *policy, int spike, int nan_step, int ckpt_every) {
    char cmd[2048], launch[1024];
    double secs;
    snprintf(cmd, sizeof cmd, "rm -rf %s/%s_ck %s/%s_out", DIR, name, DIR, name);
    if (!tu_shell(cmd)) return 0;
    char lg[1200];
    snprintf(lg, sizeof lg, "%s/%s.jsonl", DIR, name);
    remove(lg);
    launcher(launch, sizeof launch, np, NULL);
    snprintf(cmd, sizeof cmd, "%s%s %s %s %d %s %d %d %d", launch, g_worker, DIR, name, tp, policy, spike, nan_step,
             ckpt_every);
    int rc = run(name, cmd, &secs);
    printf("%s: %.1f s\n", name, secs);
    if (rc != 0) tu_check(0, name, "exit %d, see %s/%s.out", rc, DIR, name);
    return rc == 0;
}

/* Eval of a weights folder on the byte data: the loss, NAN on failure. */
static double eval_loss(const char *name, const char *weights_dir) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s eval %s --data %s/bytes.bin --seq-len 32 --micro-batch 8 --threads 1 --json --quiet",
             g_bin, weights_dir, DIR);
    if (run(name, cmd, NULL) != 0) return NAN;
    char path[1200];
    snprintf(path, sizeof path, "%s/%s.out", DIR, name);
    char *t = tu_slurp(path);
    cJSON *o = t ? cJSON_Parse(t) : NULL;
    double l = num(o, "loss");
    cJSON_Delete(o), free(t);
    return l;
}

/* Greedy text of a weights folder (caller frees), NULL on failure. */
static char *greedy(const char *name, const char *weights_dir) {
    char cmd[2048], path[1200];
    snprintf(cmd, sizeof cmd, "%s sample %s --prompt 'the quick' --tokens 48 --temperature 0 2>/dev/null", g_bin,
             weights_dir);
    if (run(name, cmd, NULL) != 0) return NULL;
    snprintf(path, sizeof path, "%s/%s.out", DIR, name);
    return tu_slurp(path);
}

/* Copies weights folder src to dst with the output half of layer 0's c_fc weight zeroed: what a tp
 * 2 save that wrote only tp rank 0's columns would hold. 1 on success. */
static int break_copy(const char *src, const char *dst) {
    char cmd[2600], path[1200];
    snprintf(cmd, sizeof cmd, "rm -rf %s && cp -r %s %s", dst, src, dst);
    if (!tu_shell(cmd)) return 0;
    snprintf(path, sizeof path, "%s/model.safetensors", dst);
    char *buf;
    size_t len;
    Err e;
    if (file_read_all(path, &buf, &len, &e) != ST_OK) return 0;
    StFile f = {0};
    int ok = 0;
    if (st_parse(&f, path, buf, len, &e) == ST_OK)
        for (int i = 0; i < f.n && !ok; i++) {
            const StEntry *t = &f.entries[i];
            if (!strstr(t->name, "h.0.mlp.c_fc.weight") || t->ndim != 2 || strcmp(t->dtype, "F32")) continue;
            /* Hugging Face's Conv1D layout (in, out) = (C, 4C): the out columns 2C..4C of every row. */
            float *w = (float *)(buf + ((const char *)f.data - buf) + t->begin);
            int64_t rows = t->shape[0], cols = t->shape[1];
            for (int64_t r = 0; r < rows; r++) memset(w + r * cols + cols / 2, 0, (size_t)(cols / 2) * sizeof(float));
            ok = 1;
        }
    st_file_free(&f);
    FILE *out = ok ? fopen(path, "wb") : NULL;
    ok = out && fwrite(buf, 1, len, out) == len;
    if (out) ok = fclose(out) == 0 && ok;
    free(buf);
    return ok;
}

static void rest(void) {
    ParamLayout p2, ph;
    test_layout(&p2, 2, 97), test_layout(&ph, 2, 64);
    /* --init-from a one-process run's weights. */
    printf("| run                    | reference      | loss     | norm     | weights  | key abs  |\n");
    if (train_ok("init_src", 0, 2, 4, "--seed 7")) {
        const char *init = "--init-from " DIR "/init_src_out/model.safetensors";
        char ex[1400];
        snprintf(ex, sizeof ex, "--tp 2 %s", init);
        if (train_ok("init_tp1", 0, 2, 4, init) && train_ok("init_tp2", 2, 2, 4, ex)) {
            compare_tol("init_tp2", "init_tp1", STEPS, &p2, TOL), check_grid("init_tp2", 1, 2, 0);
            /* Negative control: without --init-from the tp 2 run starts from the seed's weights. */
            double lw = NAN, nw = NAN;
            Log la;
            int ok = train_ok("noinit_tp2", 2, 2, 4, "--tp 2") && log_diffs("noinit_tp2", "init_tp1", STEPS, &lw, &nw, &la);
            tu_check(ok && lw > 1e3 * TOL.loss, "negative control: tp 2 without --init-from differs from tp 1 with it",
                     "losses max rel %.2e (tol %g)", lw, TOL.loss);
        }
    }

    /* Spike handling (test hooks through tp_worker): the same actions as one process. */
    rc_make_health_data(DIR);
    static const struct {
        const char *name, *policy;
        int spike, nan_step, ckpt_every;
    } SP[] = {{"skip", "skip", 50, 0, 0}, {"rollback", "rollback", 55, 0, 20}, {"nan", "log", 0, 30, 0}};
    for (size_t i = 0; i < sizeof SP / sizeof SP[0]; i++) {
        char n1[64], n2[64], a1[512], a2[512], what[160];
        snprintf(n1, sizeof n1, "spike_%s_tp1", SP[i].name), snprintf(n2, sizeof n2, "spike_%s_tp2", SP[i].name);
        if (!worker(n1, 1, 1, SP[i].policy, SP[i].spike, SP[i].nan_step, SP[i].ckpt_every) ||
            !worker(n2, 2, 2, SP[i].policy, SP[i].spike, SP[i].nan_step, SP[i].ckpt_every))
            continue;
        rc_health_actions(DIR, n1, a1, sizeof a1), rc_health_actions(DIR, n2, a2, sizeof a2);
        snprintf(what, sizeof what, "%s: tp 2 takes one process's health actions", SP[i].name);
        tu_check(a1[0] && !strcmp(a1, a2), what, "one process: %s; tp 2: %s", a1, a2);
        compare_tol(n2, n1, 64, &ph, TOL), check_grid(n2, 1, 2, 0);
    }
    if (worker("spike_clean_tp1", 1, 1, "skip", 0, 0, 0)) {
        char a1[512], a2[512];
        rc_health_actions(DIR, "spike_clean_tp1", a1, sizeof a1), rc_health_actions(DIR, "spike_skip_tp2", a2, sizeof a2);
        tu_check(strcmp(a1, a2) != 0, "negative control: the tp 2 skip run's actions against a clean one-process run",
                 "clean: '%s'; tp 2 with the corrupted batch: '%s'", a1, a2);
    }

    /* Export: a tp 2 run's weights load at tp 1 in eval and sample. */
    make_byte_data();
    /* Both runs continue for 10 steps from one process's 200 steps at lr 1e-2, a model that has
     * learnt the text (loss ~0.1): its greedy continuation is the sentence, not one repeated byte
     * (as after 10 steps from the seed), so a change of the weights shows in it. (200 steps at lr
     * 1e-2 compared directly would amplify summation-order noise to ~5e-3: that run is the start,
     * not the comparison.) */
    const char *bytes = "--data " DIR "/bytes.bin --tokenizer bytes";
    char ex[1400];
    snprintf(ex, sizeof ex, "%s --lr 1e-2 --min-lr 1e-3", bytes);
    if (!tu_shell("rm -rf " DIR "/exp_tp2_ck " DIR "/exp_hf") || !train_steps_ok("exp_base", 0, 2, 4, 200, ex)) return;
    snprintf(ex, sizeof ex, "%s --init-from %s/exp_base_out/model.safetensors", bytes, DIR);
    if (!train_ok("exp_tp1", 0, 2, 4, ex)) return;
    snprintf(ex, sizeof ex, "%s --init-from %s/exp_base_out/model.safetensors --tp 2 --ckpt-dir %s/exp_tp2_ck", bytes,
             DIR, DIR);
    if (train_ok("exp_tp2", 2, 2, 4, ex)) {
        /* Reported, not checked (equiv checks the trajectories): at loss ~0.1 the gradients are small
         * and summation order alone moves losses and norms by up to ~7e-7 in 10 steps (measured: one
         * process with 4×2 micro-batches 6.5e-7 / 4.5e-7, dp 2 3.5e-7 / 3.8e-7, tp 2 4.3e-7 / 7.8e-7). */
        double lw = NAN, nw = NAN;
        Log la;
        log_diffs("exp_tp2", "exp_tp1", STEPS, &lw, &nw, &la);
        printf("exp_tp2 vs exp_tp1 (trained regime): losses max rel %.2e, norms %.2e\n", lw, nw);
        check_grid("exp_tp2", 1, 2, 0);
        char cmd[2048];
        snprintf(cmd, sizeof cmd, "%s export %s/exp_tp2_ck --format hf -o %s/exp_hf", g_bin, DIR, DIR);
        int rc = run("export", cmd, NULL);
        tu_check(rc == 0 && tu_same_file(DIR "/exp_hf/model.safetensors", DIR "/exp_tp2_out/model.safetensors"),
                 "export of the tp 2 checkpoint == the tp 2 run's --out weights", "exit %d; model.safetensors %s", rc,
                 rc == 0 ? "compared byte for byte" : "missing");
        double l1 = eval_loss("eval_tp1", DIR "/exp_tp1_out"), l2 = eval_loss("eval_tp2", DIR "/exp_tp2_out");
        double lx = eval_loss("eval_hf", DIR "/exp_hf");
        double r2 = fabs(l2 - l1) / l1, rx = fabs(lx - l1) / l1;
        tu_check(r2 <= TOL.loss && rx <= TOL.loss, "eval at tp 1 of the tp 2 weights (--out and export) == of the "
                 "one-process weights", "loss %.9f (one process), %.9f (tp 2 --out), %.9f (export): rel %.1e, %.1e "
                 "(tol %g)", l1, l2, lx, r2, rx, TOL.loss);
        char *g1 = greedy("sample_tp1", DIR "/exp_tp1_out"), *g2 = greedy("sample_tp2", DIR "/exp_tp2_out");
        char *gx = greedy("sample_hf", DIR "/exp_hf");
        tu_check(g1 && g2 && gx && g1[0] && !strcmp(g1, g2) && !strcmp(g1, gx),
                 "sample at tp 1 of the tp 2 weights: the one-process run's greedy text", "%zu bytes: %s",
                 g1 ? strlen(g1) : 0, g1 && g2 && gx && !strcmp(g1, g2) && !strcmp(g1, gx) ? "identical" : "DIFFER");
        free(g2), free(gx);
        /* Negative control: tp rank 1's half of one c_fc weight missing from the file. */
        double lb = break_copy(DIR "/exp_tp2_out", DIR "/exp_broken") ? eval_loss("eval_broken", DIR "/exp_broken") : NAN;
        char *gb = greedy("sample_broken", DIR "/exp_broken");
        tu_check(fabs(lb - l1) / l1 > 1e3 * TOL.loss && g1 && gb && strcmp(g1, gb),
                 "negative control: the weights with one c_fc half zeroed fail the eval and sample comparisons",
                 "loss %.9f vs %.9f: rel %.1e; greedy text %s", lb, l1, fabs(lb - l1) / l1,
                 g1 && gb && strcmp(g1, gb) ? "differs" : "THE SAME");
        free(g1), free(gb);
    }
    layout_free(&p2), layout_free(&ph);
}

/* ---------------------------------------------------------------- refuse */

/* A 2-step run of the small model on np ranks with extra flags, logging to lg (DIR/name.jsonl,
 * removed first): a command that must be refused, or its control. Returns the exit code. */
static int short_run(const char *name, int np, const char *extra, char *lg, size_t cap) {
    char cmd[4096], launch[1024];
    double secs;
    snprintf(lg, cap, "%s/%s.jsonl", DIR, name);
    remove(lg);
    launcher(launch, sizeof launch, np, NULL);
    char common[2048];
    snprintf(cmd, sizeof cmd, "%s%s %s --steps 2 --log %s %s", launch, g_bin,
             tu_less_given(common, sizeof common, COMMON, extra), lg, extra);
    return run(name, cmd, &secs);
}

/* A command that must be refused: exit 2, one distinct error line (each rank prints it) containing
 * every string of want, and no log file (refused before the model is allocated). */
static void refused(const char *name, int np, const char *extra, const char *const *want, int nwant) {
    char lg[1200];
    int rc = short_run(name, np, extra, lg, sizeof lg);
    char path[1200];
    snprintf(path, sizeof path, "%s/%s.out", DIR, name);
    char *out = tu_slurp(path), *line = NULL;
    int lines = 0, same = 1, has = 1;
    for (char *p = out; p && *p;) {
        size_t n = strcspn(p, "\n");
        if (!strncmp(p, "scaletrain train: ", 18)) {
            lines++;
            if (!line) line = p;
            same = same && strcspn(line, "\n") == n && !strncmp(line, p, n);
        }
        p += n + (p[n] == '\n');
    }
    char msg[512] = "";
    if (line) snprintf(msg, sizeof msg, "%.*s", (int)strcspn(line, "\n"), line);
    for (int i = 0; i < nwant; i++) has = has && strstr(msg, want[i]);
    FILE *lf = fopen(lg, "r");
    int nolog = lf == NULL;
    if (lf) fclose(lf);
    char what[256];
    snprintf(what, sizeof what, "%s refused before allocation", name);
    /* Every rank refuses on its own; mpirun may end the others before they print: 1..np lines. */
    tu_check(rc == 2 && lines >= 1 && lines <= (np ? np : 1) && same && has && nolog, what,
             "exit %d, %d error line(s) (%s), names the numbers: %s, log %s: %s", rc, lines,
             same ? "one message" : "DIFFERENT messages", has ? "yes" : "NO", nolog ? "not created" : "CREATED", msg);
    free(out);
}

/* The negative control of a refusal: the same command with valid values runs and logs. */
static void accepted(const char *name, int np, const char *extra) {
    char lg[1200];
    int rc = short_run(name, np, extra, lg, sizeof lg);
    Log l;
    int logged = read_log(name, &l) && l.n == 2;
    char what[256];
    snprintf(what, sizeof what, "negative control: %s with valid values runs", name);
    tu_check(rc == 0 && logged, what, "exit %d, %d steps logged (%s)", rc, l.n, extra);
}

static void refuse(void) {
    refused("heads3_tp2", 2, "--heads 3 --channels 48 --tp 2", (const char *[]){"--tp 2", "3 attention heads"}, 2);
    accepted("heads4_tp2", 2, "--heads 4 --channels 48 --tp 2");
    refused("tp3_np2", 2, "--heads 2 --tp 3", (const char *[]){"--tp 3", "world size 2"}, 2);
    accepted("tp2_np2", 2, "--heads 2 --tp 2");
    refused("sp_tp1", 0, "--heads 2 --sp", (const char *[]){"--sp", "--tp 1"}, 2);
    accepted("sp_tp2", 2, "--heads 2 --sp --tp 2");
    refused("sp_bt", 2, "--heads 2 --sp --tp 2 --micro-batch 1 --seq-len 31",
            (const char *[]){"--sp", "1 x 31", "--tp 2"}, 3);
    accepted("sp_bt_ok", 2, "--heads 2 --sp --tp 2 --micro-batch 1 --seq-len 32");
    refused("sample_tp2", 2, "--heads 2 --tp 2 --sample-every 5", (const char *[]){"--sample-every 5", "--tp 2"}, 2);
    accepted("sample0_tp2", 2, "--heads 2 --tp 2 --sample-every 0");
}

/* ---------------------------------------------------------------- memory */

/* The memory records of a log: the start-time one (measured_by_rank) and the first step's. */
static const cJSON *memory_record(const cJSON *all, const char *field) { return rc_memory_record(all, field); }

static const cJSON *start_record(const cJSON *all) {
    const cJSON *o;
    cJSON_ArrayForEach(o, all) if (event_of(o) && !strcmp(event_of(o), "start")) return o;
    return NULL;
}

/* Whether the planned activations and workspace of run `plan_of` equal what run `name` measured
 * after its first step; detail holds both. */
static int act_matches(const char *plan_of, const char *name, char *detail, size_t cap) {
    cJSON *pa = records(plan_of), *ma = records(name);
    const cJSON *mp = cJSON_GetObjectItemCaseSensitive(start_record(pa), "memory_planned");
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(memory_record(ma, "allocated_total_by_rank"), "measured");
    double pact = num(mp, "activations"), pws = num(mp, "workspace");
    double mact = num(ms, "activations"), mws = num(ms, "workspace");
    snprintf(detail, cap, "activations planned %.0f measured %.0f, workspace planned %.0f measured %.0f", pact, mact, pws,
             mws);
    cJSON_Delete(pa), cJSON_Delete(ma);
    return pact == mact && pws == mws && pact > 0;
}

/* The activation bytes a tp rank of the memory runs' GPT-2 (B 2, T 32, C 32, 2 heads, 2 layers)
 * holds, counted here tensor by tensor from what each block's forward saves (independent of
 * model/layout.c): N = B·T rows, Nl = N/tp rows of the residual stream under --sp (N without);
 * a tp rank has 1/tp of the heads and of the MLP's 4C columns.
 *   block input (the embedding, block 0's):  Nl·C
 *   per block: ln1 out Nl·C, its mean and rstd 2·Nl; qkv N·3C/tp; the attention's log-sum-exp per
 *              (row, local head) N·(NH/tp); the attention output N·C/tp; res2 Nl·C; ln2 out Nl·C,
 *              mean and rstd 2·Nl; fc out N·4C/tp; GELU out N·4C/tp; res3 Nl·C
 *   the end:   lnf out Nl·C, its mean and rstd 2·Nl, the per-row losses N
 * bf16 stores the two LayerNorm outputs and the GELU output in 2 bytes (rounded up to whole
 * floats); selective recompute keeps those three in one shared copy instead of one per block;
 * full recompute keeps only res3 per block and one shared copy of the rest. Floats × 4. */
static double act_bytes_closed(int tp, int sp, int bf16, int recompute) {
    const double B = 2, T = 32, C = 32, NH = 2, L = 2, N = B * T, Nl = sp ? N / tp : N;
    double ln = bf16 ? ceil(Nl * C / 2) : Nl * C, gelu = bf16 ? ceil(N * 4 * C / tp / 2) : N * 4 * C / tp;
    double cheap = 2 * ln + gelu;
    double block = 2 * ln + 2 * 2 * Nl + N * 3 * C / tp + N * (NH / tp) + N * C / tp + Nl * C + N * 4 * C / tp + gelu +
                   Nl * C;
    double per = block, shared = 0;
    if (recompute == 1) per = block - cheap, shared = cheap;
    if (recompute == 2) per = Nl * C, shared = block - Nl * C;
    return 4 * (Nl * C + L * per + (Nl * C + 2 * Nl + N) + shared);
}

/* The first step's measured activation bytes of run `name` (NaN if absent). */
static double act_measured(const char *name) {
    cJSON *all = records(name);
    double v = num(cJSON_GetObjectItemCaseSensitive(memory_record(all, "allocated_total_by_rank"), "measured"),
                   "activations");
    cJSON_Delete(all);
    return v;
}

/* The small-model checks of one run (see the header). */
static void check_memory(const char *name, int world) {
    cJSON *all = records(name);
    const cJSON *m0 = memory_record(all, "measured_by_rank"), *m1 = memory_record(all, "allocated_total_by_rank");
    const cJSON *by = cJSON_GetObjectItemCaseSensitive(m0, "measured_by_rank");
    const cJSON *match = cJSON_GetObjectItemCaseSensitive(m0, "planned_equals_measured");
    int nrank = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(by, "parameters"));
    char what[160], detail[256];
    snprintf(what, sizeof what, "%s: every rank's state bytes == planned", name);
    tu_check(cJSON_IsTrue(match) && nrank == world, what, "planned_equals_measured %s on %d of %d ranks; parameters %.0f",
             cJSON_IsTrue(match) ? "true" : "FALSE", nrank, world, num(cJSON_GetObjectItemCaseSensitive(m0, "planned"),
                                                                      "parameters"));
    snprintf(what, sizeof what, "%s: planned activations and workspace == measured", name);
    tu_check(act_matches(name, name, detail, sizeof detail), what, "%s", detail);
    const cJSON *at = cJSON_GetObjectItemCaseSensitive(m1, "allocated_total_by_rank");
    int same = cJSON_GetArraySize(at) == world;
    for (int q = 0; same && q < world; q++) same = cJSON_GetArrayItem(at, q)->valuedouble == num(m1, "allocated_total");
    snprintf(what, sizeof what, "%s: every rank allocated rank 0's total", name);
    tu_check(same, what, "%d ranks, rank 0 %.0f bytes", cJSON_GetArraySize(at), num(m1, "allocated_total"));
    cJSON_Delete(all);
}

/* A 50k vocabulary at C=768 (one block, B=1, T=32): the tied embedding dominates, 0.3 GB of state
 * per rank at tp 2 in fp32 (bf16 dp 2 × tp 2 at ZeRO 1: about 0.23 GB), little compute. */
#define BIG "--layers 1 --heads 12 --channels 768 --max-seq-len 32 --seq-len 32 --micro-batch 1 --grad-accum 1 " \
            "--steps 1 --val-every 0 --threads 1 --peak-gflops 100 --quiet"

static void memory(void) {
    static const struct {
        const char *name, *extra;
        int np;
        int sp, bf16, recompute;
    } RUN[] = {{"mem_tp2", "--tp 2", 2, 0, 0, 0},
               {"mem_tp2_sp", "--tp 2 --sp", 2, 1, 0, 0},
               {"mem_dp2_tp2_zero1", "--tp 2 --zero 1", 4, 0, 0, 0},
               {"mem_tp2_bf16", "--tp 2 --precision bf16", 2, 0, 1, 0},
               {"mem_tp2_sp_sel", "--tp 2 --sp --recompute selective", 2, 1, 0, 1},
               {"mem_tp2_bf16_full", "--tp 2 --precision bf16 --recompute full", 2, 0, 1, 2}};
    for (size_t i = 0; i < sizeof RUN / sizeof RUN[0]; i++) {
        double secs;
        int rc = train_env(RUN[i].name, RUN[i].np, 2, 1, RUN[i].extra, NULL, 0, &secs);
        printf("%s: %.1f s\n", RUN[i].name, secs);
        if (rc != 0) {
            tu_check(0, RUN[i].name, "exit %d, see %s/%s.out", rc, DIR, RUN[i].name);
            continue;
        }
        check_memory(RUN[i].name, RUN[i].np);
        double want = act_bytes_closed(2, RUN[i].sp, RUN[i].bf16, RUN[i].recompute), got = act_measured(RUN[i].name);
        char what[160];
        snprintf(what, sizeof what, "%s: measured activations == the tensor-by-tensor count of a tp rank's", RUN[i].name);
        tu_check(got == want, what, "measured %.0f bytes, counted %.0f", got, want);
    }
    char detail[256];
    int caught = !act_matches("mem_tp2", "mem_tp2_sp", detail, sizeof detail);
    tu_check(caught, "negative control: the tp 2 plan's activations against the --sp run's measured ones", "%s", detail);
    /* Controls of the count: the whole model's (tp 1) against tp 2's measured bytes, and the count
     * without --sp against the --sp run's, must both differ. */
    double m2 = act_measured("mem_tp2"), msp = act_measured("mem_tp2_sp");
    double c1 = act_bytes_closed(1, 0, 0, 0), cnosp = act_bytes_closed(2, 0, 0, 0);
    tu_check(m2 == m2 && m2 != c1 && msp == msp && msp != cnosp,
             "negative control: the count for tp 1 against tp 2's measured activations, and without --sp against the "
             "--sp run's, both differ", "tp 2 measured %.0f vs tp 1 count %.0f; --sp measured %.0f vs no-sp count %.0f",
             m2, c1, msp, cnosp);

    /* RSS per rank on the big model. */
    Err e;
    enum { N = 40000 };
    uint32_t *t32 = malloc(N * sizeof *t32);
    for (int i = 0; t32 && i < N; i++) t32[i] = (uint32_t)((i * 7919 + (i / 13) * 31) % 50257);
    ShardMeta meta = {0, N, 50257};
    if (!t32 || shard_write(DIR "/v50k.bin", t32, N, &meta, &e) != ST_OK) printf("v50k.bin: %s\n", e.msg), exit(1);
    free(t32);
    static const struct {
        const char *name, *extra;
        int np;
    } BIGRUN[] = {{"rss_tp2", "--tp 2", 2}, {"rss_dp2_tp2_zero1_bf16", "--tp 2 --zero 1 --precision bf16", 4}};
#if defined(__SANITIZE_ADDRESS__)
    /* AddressSanitizer maps shadow memory and quarantines frees: RSS is not the program's (as in
     * test_memory), and these large runs serve the RSS check alone; the release build runs them. */
    for (size_t i = 0; i < sizeof BIGRUN / sizeof BIGRUN[0]; i++)
        printf("%s: run and RSS check skipped: built with AddressSanitizer\n", BIGRUN[i].name);
#else
    for (size_t i = 0; i < sizeof BIGRUN / sizeof BIGRUN[0]; i++) {
        char cmd[4096], launch[1024];
        double secs;
        launcher(launch, sizeof launch, BIGRUN[i].np, NULL);
        snprintf(cmd, sizeof cmd, "%s%s train --data %s/v50k.bin " BIG " --log %s/%s.jsonl %s", launch, g_bin, DIR, DIR,
                 BIGRUN[i].name, BIGRUN[i].extra);
        int rc = run(BIGRUN[i].name, cmd, &secs);
        printf("%s: %.1f s\n", BIGRUN[i].name, secs);
        if (rc != 0) {
            tu_check(0, BIGRUN[i].name, "exit %d, see %s/%s.out", rc, DIR, BIGRUN[i].name);
            continue;
        }
        cJSON *all = records(BIGRUN[i].name);
        rc_check_rss(all, BIGRUN[i].np, BIGRUN[i].name, BIGRUN[i].name);
        cJSON_Delete(all);
    }
#endif
}

/* ---------------------------------------------------------------- overlap */

/* Every step record of run `name` has tp_overlapped == want; 1 if so (steps records at least). */
static int overlapped_is(const char *name, double want, char *detail, size_t cap) {
    cJSON *all = records(name);
    const cJSON *o;
    int n = 0, ok = all != NULL;
    double seen = NAN;
    cJSON_ArrayForEach(o, all) {
        if (strcmp(event_of(o), "step")) continue;
        seen = num(o, "tp_overlapped");
        n++;
        if (seen != want) ok = 0;
    }
    snprintf(detail, cap, "%d step records, tp_overlapped %g (want %g)", n, seen, want);
    cJSON_Delete(all);
    return ok && n == STEPS;
}

/* The overlapped tp collectives (issue 28) against the blocking path they replace (the test switch
 * ST_PAR_TEST_TP_BLOCKING=1): the same GEMMs on the same operands, so every step's loss and norm
 * and every final weight are the same bits (exact equality), at tp 2 (one and two kernel threads
 * per rank: the two progress designs of model/gpt.c's overlap_run), tp 2 --sp, and tp 2 --sp in
 * bf16 with dropout and full recompute; each step record counts the collectives that were
 * overlapped (per block and micro-batch without --sp: the column-parallel layers' 2 input-gradient
 * sums and the row-parallel layers' 2 forward sums of layout_tp_row_chunks pieces each; with --sp
 * also 2 forward gathers, 2 backward re-gathers, the row-parallel layers' 2 output-gradient
 * gathers and the second LayerNorm's parameter-gradient sum; the recomputed forward's gathers and chunked sums again), and the blocking runs 0 (so
 * the overlap path is what ran). Negative control:
 * ST_PAR_TEST_TP_NOWAIT=1 (an overlapped collective's wait returns at once: the model reads the
 * buffer before the sum or gather arrived) must fail the equivalence comparison with one process
 * at the equiv part's tolerances, with and without --sp. */
static void overlap(void) {
    ParamLayout pl;
    test_layout(&pl, 2, 97);
    const int k = 4, L = 2;
    /* The row-parallel sums' chunks per layer: N = 2 x 32 rows without --sp, 32 per rank with it;
     * the odd run N = 2 x 29, 29 rows per rank (uneven chunks of 14 and 15). */
    int cn = layout_tp_row_chunks(64), cs = layout_tp_row_chunks(32), co = layout_tp_row_chunks(29);
    struct {
        const char *name, *extra;
        int per; /* overlapped collectives per block and micro-batch */
    } R[] = {{"ovl_tp2", "--tp 2", 2 + 2 * cn},
             {"ovl_tp2_sp", "--tp 2 --sp", 9 + 2 * cs},
             {"ovl_tp2_sp_bf16", "--tp 2 --sp --precision bf16 --dropout 0.1 --recompute full", 11 + 4 * cs},
             {"ovl_tp2_sp_odd", "--tp 2 --sp --seq-len 29 --dropout 0.1", 9 + 2 * co},
             /* two kernel threads per rank: the GEMM on the caller's team while the worker polls */
             {"ovl_tp2_t2", "--tp 2 --threads 2", 2 + 2 * cn}};
    for (size_t i = 0; i < sizeof R / sizeof R[0]; i++) {
        char blk[64], detail[256], what[200];
        snprintf(blk, sizeof blk, "%s_blocking", R[i].name);
        double secs;
        int rc = train_env(blk, 2, 2, k, R[i].extra, "ST_PAR_TEST_TP_BLOCKING=1", 0, &secs);
        printf("%s: %.1f s\n", blk, secs);
        if (rc != 0) {
            tu_check(0, blk, "exit %d, see %s/%s.out", rc, DIR, blk);
            continue;
        }
        if (!train_ok(R[i].name, 2, 2, k, R[i].extra)) continue;
        double lw = NAN, nw = NAN;
        Log la;
        int all = log_diffs(R[i].name, blk, STEPS, &lw, &nw, &la);
        float *wa = weights(R[i].name, &pl), *wb = weights(blk, &pl);
        int same_w = wa && wb && !memcmp(wa, wb, pl.total * sizeof(float));
        free(wa), free(wb);
        snprintf(what, sizeof what, "%s: overlapped equals blocking to the bit (losses, norms, weights)", R[i].name);
        tu_check(all && lw == 0 && nw == 0 && same_w, what, "losses max rel %.2e, norms %.2e, weights %s", lw, nw,
                 same_w ? "identical" : "differ");
        snprintf(what, sizeof what, "%s: every step overlapped %d collectives", R[i].name, R[i].per * L * k);
        tu_check(overlapped_is(R[i].name, R[i].per * L * k, detail, sizeof detail), what, "%s", detail);
        snprintf(what, sizeof what, "%s: the blocking path overlapped none", blk);
        tu_check(overlapped_is(blk, 0, detail, sizeof detail), what, "%s", detail);
    }
    /* Negative control of the forward's chunked row-parallel sums alone: their waits skipped
     * (ST_PAR_TEST_TP_NOWAIT_FWD=1: the bias, residual and LayerNorm read a chunk before its sum
     * arrived), against the blocking run of the same grid, which they must no longer equal. */
    for (int i = 0; i < 2; i++) {
        char name[64], blk[64];
        snprintf(name, sizeof name, "%s_nowait_fwd", R[i].name);
        snprintf(blk, sizeof blk, "%s_blocking", R[i].name);
        double secs, lw = NAN, nw = NAN;
        Log la;
        int rc = train_env(name, 2, 2, k, R[i].extra, "ST_PAR_TEST_TP_NOWAIT_FWD=1", 0, &secs);
        int all = rc == 0 && log_diffs(name, blk, STEPS, &lw, &nw, &la);
        char what[160];
        snprintf(what, sizeof what, "negative control: %s (the forward's overlapped sums not waited) differs from "
                 "the blocking run", name);
        tu_check(all && (lw > 0 || nw > 0), what, "exit %d; losses max rel %.2e, grad_norm max rel %.2e", rc, lw, nw);
    }
    /* Negative control: waits skipped, against one process at the equivalence tolerances. */
    if (train_ok("ovl_ref", 0, 2, k, ""))
        for (int sp = 0; sp < 2; sp++) {
            const char *name = sp ? "ovl_tp2_sp_nowait" : "ovl_tp2_nowait";
            double secs, lw = NAN, nw = NAN;
            Log la;
            int rc = train_env(name, 2, 2, k, sp ? "--tp 2 --sp" : "--tp 2", "ST_PAR_TEST_TP_NOWAIT=1", 0, &secs);
            int all = rc == 0 && log_diffs(name, "ovl_ref", STEPS, &lw, &nw, &la);
            char what[160];
            snprintf(what, sizeof what, "negative control: %s (overlapped waits skipped) fails the comparison", name);
            tu_check(all && (lw > TOL.loss || nw > TOL.norm), what, "exit %d; losses max rel %.2e, grad_norm max rel "
                     "%.2e (tol %g)", rc, lw, nw, TOL.norm);
        }
    layout_free(&pl);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: test_tp MPIEXEC SCALETRAIN TP_WORKER [equiv|mixed|resume|rest|refuse|memory|overlap]\n");
        return 2;
    }
    g_mpi = argv[1], g_bin = argv[2], g_worker = argv[3];
    const char *what = argc > 4 ? argv[4] : "all";
    double t0 = timer_ms();
    rc_make_data(DIR);
    rc_make_val_data(DIR, "val.bin", 0), rc_make_val_data(DIR, "val_other.bin", 1);
    if (!strcmp(what, "equiv") || !strcmp(what, "all")) equiv();
    if (!strcmp(what, "mixed") || !strcmp(what, "all")) mixed();
    if (!strcmp(what, "resume") || !strcmp(what, "all")) resume();
    if (!strcmp(what, "rest") || !strcmp(what, "all")) rest();
    if (!strcmp(what, "refuse") || !strcmp(what, "all")) refuse();
    if (!strcmp(what, "memory") || !strcmp(what, "all")) memory();
    if (!strcmp(what, "overlap") || !strcmp(what, "all")) overlap();
    printf("test_tp %s: %.1f s\n", what, (timer_ms() - t0) * 1e-3);
    return tu_exit();
}
