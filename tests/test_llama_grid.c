/* test_llama_grid.c — the Llama architecture (--arch llama: RMSNorm, RoPE, SwiGLU, grouped-query
 * attention with 4 query heads over 2 KV heads, untied head) on every parallel grid against one
 * process, as test_dp, test_tp and test_pp check GPT-2 (issue 15).
 *
 * Oracle: the same global batch in one process (runcmp's rc_compare: losses and gradient norms
 * within 1e-6 relative per step over 10 AdamW steps with clipping, every rank's norm bitwise
 * equal, final weights within 1e-5 per tensor), and resume vs uninterrupted (bit-exact losses).
 * Runs: dp 2 × ZeRO 0-3, tp 2 (with and without --sp), pp 2 (1f1b, zb-h1), pp 2 × tp 2, the tied
 * head at pp 2 (both ends hold wte), recompute selective and full (bit-identical to none), a
 * checkpoint written at pp 2 resumed at dp 2 × ZeRO 3, and one written at tp 2 (the KV heads split)
 * resumed in one process and at dp 2 × ZeRO 1 (steps 6-10 within 1e-6 of the tp 2 run).
 * Negative controls (each must fail the comparison it stands for): the reduced gradients doubled
 * (ST_PAR_TEST_GRAD_SCALE=2), the tp all-reduces of the backward skipped (ST_PAR_TEST_TP_FAULT=1),
 * the tied wte's exchange left out at pp 2 (ST_PAR_TEST_PP_FAULT=1); for the resume, the
 * uninterrupted run's own log (a fresh start with the same steps 6-10) must fail the check that the
 * log resumed from step 5's checkpoint, and a resume from another seed's step 5 must fail the
 * steps 6-10 comparison.
 *
 * Usage: test_llama_grid MPIEXEC SCALETRAIN [grid|resume] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/fileio.h"
#include "core/timer.h"
#include "model/config.h"
#include "model/layout.h"
#include "runcmp.h"
#include "testutil.h"

#define DIR ST_BINARY_DIR "/test_llama_grid"
#define STEPS 10

static const RcTol TOL = {1e-6, 1e-6, 1e-5, 1e-4};
static const char *g_mpi, *g_bin;

#define COMMON                                                                                                  \
    "train --data " DIR "/train.bin --arch llama --layers 4 --heads 4 --kv-heads 2 --channels 32 --ffn 48 "      \
    "--max-seq-len 32 --seq-len 32 --micro-batch 2 --lr 2e-3 --min-lr 2e-4 --warmup 5 --grad-clip 1 "            \
    "--val-every 0 --threads 1 --peak-gflops 100 --quiet"

/* Runs `name` (np 0: one process) for `steps` steps with k micro-batches per rank; env a test-only
 * fault; append keeps the log (a resume). Returns the exit code. */
static int run(const char *name, int np, int k, int steps, const char *extra, const char *env, int append) {
    char cmd[4096], launch[1024] = "";
    const char *var = env ? env : "";
    if (np > 0)
        snprintf(launch, sizeof launch, "%s timeout 170 %s --allow-run-as-root --oversubscribe -np %d -x "
                 "OMP_NUM_THREADS=1 %s%.*s ", var, g_mpi, np, env ? "-x " : "", env ? (int)strcspn(env, "=") : 0, var);
    else if (env)
        snprintf(launch, sizeof launch, "%s ", env);
    char lg[1200];
    snprintf(lg, sizeof lg, "%s/%s.jsonl", DIR, name);
    if (!append) {
        remove(lg);
        char rm[1400];
        snprintf(rm, sizeof rm, "rm -rf %s/%s_out", DIR, name);
        if (!tu_shell(rm)) return -1;
    }
    char common[2048];
    snprintf(cmd, sizeof cmd, "%s%s %s --steps %d --grad-accum %d --log %s --out %s/%s_out %s", launch, g_bin,
             tu_less_given(common, sizeof common, COMMON, extra), steps, k, lg, DIR, name, extra ? extra : "");
    double secs;
    int rc = rc_run(DIR, name, cmd, &secs);
    printf("%s: exit %d, %.1f s\n", name, rc, secs);
    return rc;
}

static void llama_layout(ParamLayout *pl, int untied) {
    ModelConfig mc = {4, 4, 32, 97, 0, 32, 0};
    mc.arch = ARCH_LLAMA, mc.n_kv_head = 2, mc.ffn = 48, mc.untied = untied;
    Err e;
    if (model_config_validate(&mc, &e) != ST_OK || layout_init(pl, &mc, 1) != 0) {
        printf("llama layout: %s\n", e.msg);
        exit(1);
    }
}

/* Loss records of two runs equal bit for bit (the logs print doubles round-trip exactly). */
static int same_losses(const char *a, const char *b, int steps) {
    RcLog la, lb;
    if (!rc_read_log(DIR, a, &la) || !rc_read_log(DIR, b, &lb) || la.n != steps || lb.n != steps) return 0;
    for (int i = 0; i < steps; i++)
        if (la.loss[i] != lb.loss[i] || la.norm[i] != lb.norm[i]) return 0;
    return 1;
}

/* The run's memory record: every rank's allocated state bytes equal its plan (the layout's count). */
static void mem_matches_plan(const char *name) {
    cJSON *all = rc_records(DIR, name);
    const cJSON *o, *mem = NULL;
    cJSON_ArrayForEach(o, all) {
        const char *ev = rc_event(o);
        if (ev && !strcmp(ev, "memory") && cJSON_GetObjectItemCaseSensitive(o, "planned_equals_measured")) mem = o;
    }
    const cJSON *match = mem ? cJSON_GetObjectItemCaseSensitive(mem, "planned_equals_measured") : NULL;
    char what[160];
    snprintf(what, sizeof what, "llama %s: every rank's allocation equals its plan", name);
    tu_check(cJSON_IsTrue(match), what, "memory record match: %s", match ? (cJSON_IsTrue(match) ? "true" : "false") : "absent");
    cJSON_Delete(all);
}

static void grid(void) {
    ParamLayout pl, plt;
    llama_layout(&pl, 1);
    llama_layout(&plt, 0);
    run("ref", 0, 4, STEPS, "", NULL, 0);
    run("ref8", 0, 8, STEPS, "", NULL, 0);
    run("ref_tied", 0, 4, STEPS, "--tie-embeddings", NULL, 0);
    float *w4 = rc_weights(DIR, "ref", &pl), *w8 = rc_weights(DIR, "ref8", &pl), *wt = rc_weights(DIR, "ref_tied", &plt);
    tu_check(w4 && w8 && wt, "the one-process references ran and their weights load", "ref %s, ref8 %s, ref_tied %s",
             w4 ? "ok" : "missing", w8 ? "ok" : "missing", wt ? "ok" : "missing");
    static const struct {
        const char *name, *ref, *extra;
        int np, k;
    } RUN[] = {
        {"dp2_zero0", "ref8", "--zero 0", 2, 4},         {"dp2_zero1", "ref8", "--zero 1", 2, 4},
        {"dp2_zero2", "ref8", "--zero 2", 2, 4},         {"dp2_zero3", "ref8", "--zero 3", 2, 4},
        {"tp2", "ref", "--tp 2", 2, 4},                  {"tp2_sp", "ref", "--tp 2 --sp", 2, 4},
        {"pp2_1f1b", "ref", "--pp 2", 2, 4},             {"pp2_zbh1", "ref", "--pp 2 --pp-schedule zb-h1", 2, 4},
        {"pp2_tp2", "ref", "--pp 2 --tp 2", 4, 4},       {"pp2_tied", "ref_tied", "--pp 2 --tie-embeddings", 2, 4},
    };
    printf("| run        | reference | loss     | norm     | weights  |\n");
    for (size_t i = 0; i < sizeof RUN / sizeof RUN[0]; i++) {
        int rc = run(RUN[i].name, RUN[i].np, RUN[i].k, STEPS, RUN[i].extra, NULL, 0);
        char what[160];
        snprintf(what, sizeof what, "llama %s ran", RUN[i].name);
        tu_check(rc == 0, what, "exit %d (%s)", rc, RUN[i].extra);
        if (rc != 0) continue;
        int tied = !strcmp(RUN[i].ref, "ref_tied");
        const float *wr = tied ? wt : !strcmp(RUN[i].ref, "ref") ? w4 : w8;
        RcTol got;
        rc_compare(DIR, RUN[i].name, RUN[i].ref, STEPS, tied ? &plt : &pl, wr, TOL, &got);
        printf("| %-10s | %-9s | %8.1e | %8.1e | %8.1e |\n", RUN[i].name, RUN[i].ref, got.loss, got.norm, got.w);
        mem_matches_plan(RUN[i].name);
    }
    mem_matches_plan("ref");
    /* Recompute changes what is saved, never a result. */
    static const char *const RC[] = {"selective", "full"};
    for (int i = 0; i < 2; i++) {
        char name[64], extra[64], what[160];
        snprintf(name, sizeof name, "rc_%s", RC[i]);
        snprintf(extra, sizeof extra, "--recompute %s", RC[i]);
        int rc = run(name, 0, 4, STEPS, extra, NULL, 0);
        snprintf(what, sizeof what, "llama --recompute %s: losses and norms bit-identical to none", RC[i]);
        tu_check(rc == 0 && same_losses(name, "ref", STEPS), what, "exit %d", rc);
    }
    /* Negative controls. */
    double l = NAN, n = NAN;
    RcLog la;
    int rc = run("dp2_fault", 2, 4, STEPS, "--zero 1", "ST_PAR_TEST_GRAD_SCALE=2", 0);
    int ok = rc == 0 && rc_log_diffs(DIR, "dp2_fault", "ref8", STEPS, &l, &n, &la);
    tu_check(ok && (l > TOL.loss || n > TOL.norm), "negative control: dp 2 with doubled reduced gradients fails",
             "exit %d; losses max rel %.2e, norms max rel %.2e", rc, l, n);
    rc = run("tp2_fault", 2, 4, STEPS, "--tp 2", "ST_PAR_TEST_TP_FAULT=1", 0);
    ok = rc == 0 && rc_log_diffs(DIR, "tp2_fault", "ref", STEPS, &l, &n, &la);
    tu_check(ok && (l > TOL.loss || n > TOL.norm), "negative control: tp 2 without the backward's all-reduces fails",
             "exit %d; losses max rel %.2e, norms max rel %.2e", rc, l, n);
    rc = run("pp2_tied_fault", 2, 4, STEPS, "--pp 2 --tie-embeddings", "ST_PAR_TEST_PP_FAULT=1", 0);
    ok = rc == 0 && rc_log_diffs(DIR, "pp2_tied_fault", "ref_tied", STEPS, &l, &n, &la);
    tu_check(ok && (l > TOL.loss || n > TOL.norm), "negative control: tied pp 2 without the wte exchange fails",
             "exit %d; losses max rel %.2e, norms max rel %.2e", rc, l, n);
    ok = rc_log_diffs(DIR, "rc_full", "ref_tied", STEPS, &l, &n, &la);
    tu_check(ok && (l > TOL.loss || n > TOL.norm), "negative control: the untied model against the tied reference differs",
             "losses max rel %.2e, norms max rel %.2e", l, n);
    /* Refusals: one line naming the flag, before any allocation. */
    static const struct { const char *name, *extra, *want; int np; } BAD[] = {
        {"bad_tp4", "--tp 4", "--tp 4: expected a divisor of the 2 KV heads", 4},
        {"bad_kv", "--kv-heads 3", "--kv-heads 3: expected a divisor of the 4 attention heads", 0},
        {"bad_gpt_kv", "--arch gpt2 --kv-heads 2", "--kv-heads: expected a Llama", 0},
    };
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        rc = run(BAD[i].name, BAD[i].np, 4, 2, BAD[i].extra, NULL, 0);
        char path[1200], *text = NULL, what[200];
        snprintf(path, sizeof path, "%s/%s.out", DIR, BAD[i].name);
        size_t len = 0;
        Err e;
        int found = file_read_all(path, &text, &len, &e) == ST_OK && strstr(text, BAD[i].want) != NULL;
        snprintf(what, sizeof what, "refused with one line: %s", BAD[i].extra);
        tu_check(rc != 0 && found, what, "exit %d, %s", rc, found ? "message found" : "message missing");
        free(text);
    }
    free(w4), free(w8), free(wt);
    layout_free(&pl), layout_free(&plt);
}

/* muP (issue 16) on the grid: its per-tensor learning rates travel with ZeRO's flat shards, its
 * multipliers with tp's and pp's pieces of the model. A muP Llama (base width 16, so m = 2; input
 * alpha 1.5, output alpha 0.5) at dp 2 × ZeRO 3, tp 2 with --sp and pp 2 against one process within
 * the grid tolerance; control: the muP reference differs from the standard one (the flags act). */
static void mup(void) {
    ParamLayout pl;
    llama_layout(&pl, 1);
    const char *M = "--param mup --mup-base-width 16 --mup-input-alpha 1.5 --mup-output-alpha 0.5";
    char extra[512];
    run("ref", 0, 4, STEPS, "", NULL, 0);
    run("mup_ref", 0, 4, STEPS, M, NULL, 0);
    run("mup_ref8", 0, 8, STEPS, M, NULL, 0);
    float *w4 = rc_weights(DIR, "mup_ref", &pl), *w8 = rc_weights(DIR, "mup_ref8", &pl);
    tu_check(w4 && w8, "muP: the one-process references ran and their weights load", "ref %s, ref8 %s",
             w4 ? "ok" : "missing", w8 ? "ok" : "missing");
    static const struct { const char *name, *ref, *extra; int np; } RUN[] = {
        {"mup_dp2_zero3", "mup_ref8", "--zero 3", 2},
        {"mup_tp2_sp", "mup_ref", "--tp 2 --sp", 2},
        {"mup_pp2", "mup_ref", "--pp 2", 2},
    };
    for (size_t i = 0; i < sizeof RUN / sizeof RUN[0] && w4 && w8; i++) {
        snprintf(extra, sizeof extra, "%s %s", M, RUN[i].extra);
        int rc = run(RUN[i].name, RUN[i].np, 4, STEPS, extra, NULL, 0);
        char what[160];
        snprintf(what, sizeof what, "llama %s ran", RUN[i].name);
        tu_check(rc == 0, what, "exit %d (%s)", rc, extra);
        if (rc != 0) continue;
        RcTol got;
        rc_compare(DIR, RUN[i].name, RUN[i].ref, STEPS, &pl, !strcmp(RUN[i].ref, "mup_ref") ? w4 : w8, TOL, &got);
        printf("| %-13s | %-8s | %8.1e | %8.1e | %8.1e |\n", RUN[i].name, RUN[i].ref, got.loss, got.norm, got.w);
    }
    double l = NAN, n = NAN;
    RcLog la;
    int ok = rc_log_diffs(DIR, "mup_ref", "ref", STEPS, &l, &n, &la);
    tu_check(ok && l > 1e-3, "negative control: the muP run differs from the standard one",
             "losses max rel %.2e, norms max rel %.2e (losses must differ by more than 1e-3)", l, n);
    free(w4), free(w8);
    layout_free(&pl);
}

/* Whether run `name`'s log shows a resume from checkpoint `ck` (a path ending in step_0000000<from>):
 * exactly one start record, with resumed_from_step == from, resume.found and resume.checkpoint
 * naming ck, on `world` ranks, and step records from + 1 .. last, consecutive. A fresh start that
 * reproduces the same later steps fails it (its first step record is 1, resumed_from_step 0). */
static int resumed_from(const char *name, const char *ck, long from, long last, int world, char *why, size_t cap) {
    char lg[1200];
    snprintf(lg, sizeof lg, "%s/%s.jsonl", DIR, name);
    TuLogRun r[2];
    int n = tu_log_runs(lg, r, 2);
    cJSON *all = tu_log_records(lg);
    const cJSON *o, *start = NULL;
    cJSON_ArrayForEach(o, all) if (!start && rc_event(o) && !strcmp(rc_event(o), "start")) start = o;
    const char *named = cJSON_GetStringValue(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(start, "resume"), "checkpoint"));
    const char *tail = strrchr(ck, '/') ? strrchr(ck, '/') + 1 : ck;
    int names = named && strstr(named, tail) != NULL;
    snprintf(why, cap, "%d start record(s); resumed_from_step %ld (want %ld), found %s, checkpoint '%s' (want %s), world %d "
             "(want %d), steps %ld..%ld%s (want %ld..%ld)", n, n > 0 ? r[0].resumed_from : -1, from,
             n > 0 && r[0].found ? "true" : "false", named ? named : "(none)", tail, n > 0 ? r[0].world : 0, world,
             n > 0 ? r[0].first_step : 0, n > 0 ? r[0].last_step : 0, n > 0 && !r[0].consecutive ? " with gaps" : "",
             from + 1, last);
    int ok = n == 1 && r[0].resumed_from == from && r[0].found && names && r[0].world == world &&
             r[0].first_step == from + 1 && r[0].last_step == last && r[0].consecutive;
    cJSON_Delete(all);
    return ok;
}

/* Steps from+1..last of run a bit-identical (losses and norms) to those of run b. */
static int same_tail(const char *a, const char *b, int from, int last) {
    RcLog la, lb;
    if (!rc_read_log(DIR, a, &la) || !rc_read_log(DIR, b, &lb) || la.n != last || lb.n != last) return 0;
    for (int i = from; i < last; i++)
        if (la.loss[i] != lb.loss[i] || la.norm[i] != lb.norm[i]) return 0;
    return 1;
}

/* A checkpoint at step 5 of a pp 2 run, resumed at dp 2 × ZeRO 3 (another grid, another layout):
 * the log shows the resume from that checkpoint (its only start record resumed from step 5 naming
 * step_00000005, its step records 6-10) and the last five steps equal the uninterrupted pp 2 run's
 * within the grid tolerance; resumed on its own grid they equal it bit for bit.
 * Controls, one per half of the check: the uninterrupted run's own log (a fresh start that
 * reproduces steps 6-10) passes the step comparison and must fail the resume check; a resume from
 * step 5 of a run with another seed (other weights at step 5) passes the resume check and must
 * fail the step comparison. */
static void resume(void) {
    char extra[1400], ck5[1200], why[768];
    snprintf(extra, sizeof extra, "--pp 2 --ckpt-every 5 --ckpt-dir %s/ck_pp2", DIR);
    snprintf(ck5, sizeof ck5, "%s/ck_pp2/step_00000005", DIR);
    char rm[1400];
    snprintf(rm, sizeof rm, "rm -rf %s/ck_pp2 %s/ck_seed2", DIR, DIR);
    if (!tu_shell(rm)) return;
    int rc = run("full_pp2", 2, 4, STEPS, extra, NULL, 0);
    tu_check(rc == 0, "llama pp 2 with checkpoints ran", "exit %d", rc);
    /* Same grid: steps 6-10 from step 5's checkpoint (the log holds those steps only). */
    snprintf(extra, sizeof extra, "--pp 2 --resume %s", ck5);
    rc = run("same", 2, 4, STEPS, extra, NULL, 0);
    int res = rc == 0 && resumed_from("same", ck5, 5, STEPS, 2, why, sizeof why);
    tu_check(res, "llama pp 2 resume: the log's run starts from step 5's checkpoint", "exit %d; %s", rc, why);
    tu_check(rc == 0 && same_tail("same", "full_pp2", 5, STEPS),
             "llama pp 2 resumed from step 5: steps 6-10 bit-identical to the uninterrupted run", "exit %d", rc);
    /* Another grid. */
    snprintf(extra, sizeof extra, "--zero 3 --resume %s", ck5);
    rc = run("other", 2, 2, STEPS, extra, NULL, 0);
    RcLog a, b;
    int ok = rc == 0 && rc_read_log(DIR, "other", &a) && rc_read_log(DIR, "full_pp2", &b) && a.n == STEPS;
    double worst = ok ? 0 : NAN;
    for (int i = 5; ok && i < STEPS; i++) {
        double r = fabs(a.loss[i] - b.loss[i]) / fabs(b.loss[i]);
        if (!(r <= worst)) worst = r;
    }
    res = rc == 0 && resumed_from("other", ck5, 5, STEPS, 2, why, sizeof why);
    tu_check(res, "llama checkpoint of pp 2 resumed at dp 2 x ZeRO 3: the log's run starts from step 5's checkpoint",
             "exit %d; %s", rc, why);
    tu_check(ok && worst <= TOL.loss, "llama checkpoint of pp 2 resumed at dp 2 x ZeRO 3: steps 6-10 within 1e-6",
             "exit %d, max rel loss diff %.2e", rc, worst);
    /* A model field changed on resume is refused with one line naming it. */
    snprintf(extra, sizeof extra, "--pp 2 --kv-heads 4 --resume %s", ck5);
    rc = run("kvchange", 2, 4, STEPS, extra, NULL, 0);
    {
        char path[1200], *text = NULL;
        size_t len = 0;
        Err e;
        snprintf(path, sizeof path, "%s/kvchange.out", DIR);
        int found = file_read_all(path, &text, &len, &e) == ST_OK && strstr(text, "model.kv_heads") != NULL;
        tu_check(rc != 0 && found, "resume with another --kv-heads refused, naming model.kv_heads", "exit %d, %s", rc,
                 found ? "named" : "not named");
        free(text);
    }
    /* Negative control 1: a fresh start reproduces steps 6-10 (the uninterrupted run itself): the
     * step comparison cannot tell, the resume check must. */
    int tail_passes = same_tail("full_pp2", "full_pp2", 5, STEPS);
    int caught = !resumed_from("full_pp2", ck5, 5, STEPS, 2, why, sizeof why);
    tu_check(tail_passes && caught, "negative control: a fresh start with the same steps 6-10 is reported not resumed",
             "steps 6-10 comparison %s; resume check %s (%s)", tail_passes ? "passes" : "FAILS",
             caught ? "fails" : "PASSES", why);
    /* Negative control 2: other weights at step 5 (a run with another seed, its checkpoint at step 5
     * resumed the same way): the resume check passes, steps 6-10 must differ. */
    char ck2[1200];
    snprintf(ck2, sizeof ck2, "%s/ck_seed2/step_00000005", DIR);
    snprintf(extra, sizeof extra, "--pp 2 --seed 2 --ckpt-every 5 --ckpt-dir %s/ck_seed2", DIR);
    rc = run("seed2", 2, 4, 5, extra, NULL, 0);
    snprintf(extra, sizeof extra, "--pp 2 --seed 2 --resume %s", ck2);
    int rc2 = rc == 0 ? run("wrong", 2, 4, STEPS, extra, NULL, 0) : -1;
    res = rc2 == 0 && resumed_from("wrong", ck2, 5, STEPS, 2, why, sizeof why);
    int differs = rc2 == 0 && !same_tail("wrong", "full_pp2", 5, STEPS);
    tu_check(res && differs, "negative control: a resume from another run's step 5 (other weights) fails the steps 6-10 "
             "comparison", "exit %d, %d; resume check %s (%s); steps 6-10 %s", rc, rc2, res ? "passes" : "FAILS", why,
             differs ? "differ" : "EQUAL");

    /* Across tp (GQA: the 2 KV heads split over tp 2, then whole): a tp 2 checkpoint at step 5
     * resumed in one process and at dp 2 x ZeRO 1 continues the uninterrupted tp 2 run (steps 6-10
     * within the grid tolerance; tp changes the summation order, so not bit for bit). Control: the
     * other seed's continuation ("wrong") against the same run fails the same comparison. */
    char ckt[1200];
    snprintf(ckt, sizeof ckt, "%s/ck_tp2/step_00000005", DIR);
    snprintf(rm, sizeof rm, "rm -rf %s/ck_tp2", DIR);
    snprintf(extra, sizeof extra, "--tp 2 --ckpt-every 5 --ckpt-dir %s/ck_tp2", DIR);
    rc = tu_shell(rm) ? run("full_tp2", 2, 4, STEPS, extra, NULL, 0) : -1;
    tu_check(rc == 0, "llama tp 2 with checkpoints ran", "exit %d", rc);
    static const struct { const char *name, *grid; int np, k, world; } TO[] = {
        {"tp2_to_1", "", 0, 4, 1}, {"tp2_to_dp2", "--zero 1", 2, 2, 2}};
    for (size_t i = 0; i < sizeof TO / sizeof TO[0]; i++) {
        snprintf(extra, sizeof extra, "%s --resume %s", TO[i].grid, ckt);
        rc = run(TO[i].name, TO[i].np, TO[i].k, STEPS, extra, NULL, 0);
        char what[200];
        res = rc == 0 && resumed_from(TO[i].name, ckt, 5, STEPS, TO[i].world, why, sizeof why);
        snprintf(what, sizeof what, "llama checkpoint of tp 2 resumed %s: the log's run starts from step 5's checkpoint",
                 TO[i].np ? "at dp 2 x ZeRO 1" : "in one process");
        tu_check(res, what, "exit %d; %s", rc, why);
        double wl = NAN, wn = NAN;
        ok = rc == 0 && rc_read_log(DIR, TO[i].name, &a) && rc_read_log(DIR, "full_tp2", &b) && a.n == STEPS && b.n == STEPS;
        if (ok) wl = rc_max_rel(a.loss + 5, b.loss + 5, STEPS - 5), wn = rc_max_rel(a.norm + 5, b.norm + 5, STEPS - 5);
        snprintf(what, sizeof what, "llama checkpoint of tp 2 resumed %s: steps 6-10 within 1e-6 of the tp 2 run",
                 TO[i].np ? "at dp 2 x ZeRO 1" : "in one process");
        tu_check(ok && wl <= TOL.loss && wn <= TOL.norm, what, "exit %d; losses max rel %.2e, norms %.2e", rc, wl, wn);
    }
    ok = rc_read_log(DIR, "wrong", &a) && rc_read_log(DIR, "full_tp2", &b) && a.n == STEPS && b.n == STEPS;
    double cl = ok ? rc_max_rel(a.loss + 5, b.loss + 5, STEPS - 5) : NAN;
    tu_check(ok && cl > TOL.loss, "negative control: another seed's steps 6-10 against the tp 2 run fail the comparison",
             "losses max rel %.2e (tol %g)", cl, TOL.loss);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: test_llama_grid MPIEXEC SCALETRAIN [grid|resume|mup]\n");
        return 2;
    }
    g_mpi = argv[1], g_bin = argv[2];
    const char *what = argc > 3 ? argv[3] : "all";
    double t0 = timer_ms();
    rc_make_data(DIR);
    if (!strcmp(what, "grid") || !strcmp(what, "all")) grid();
    if (!strcmp(what, "resume") || !strcmp(what, "all")) resume();
    if (!strcmp(what, "mup") || !strcmp(what, "all")) mup();
    printf("test_llama_grid %s: %.1f s\n", what, (timer_ms() - t0) * 1e-3);
    return tu_exit();
}
