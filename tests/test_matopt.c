/* test_matopt.c — the optimizers beyond Adam (issue 17: Muon, Shampoo, Sophia) end to end: `scaletrain
 * train` under mpirun against one process, resume, memory and refused flags. Sophia runs with its
 * Hessian pass every 3 steps (steps 1, 4, 7, 10: a resume at step 5 reads the saved Hessian EMA) and
 * the denominator's floor --eps 1e-4: at the default 1e-15 a parameter whose gradient is rounding
 * noise (GPT-2's key bias) has h at noise level too, so its update clip(m/ε) is ±lr with the sign
 * of the noise, and one process and dp 2 then differ there by up to 2·lr per step (measured 2e-2
 * on the key bias after 10 steps, and single bias elements 1.7e-6 apart; every other element
 * exact): the rule's amplification of rounding, not the sharding, which this test is about. Shampoo runs with blocks
 * of 24 on C = 32 (whole and partial blocks) and roots every 3 steps (so a resume at step 5 uses
 * roots of step 4 and recomputes them at 7: the saved roots matter); its block state travels in the
 * checkpoint's optimizer-extra.safetensors; its plan figure is the most loaded rank's (compared with
 * the maximum over ranks).
 *
 * Usage: test_matopt MPIEXEC SCALETRAIN OPTIMIZER [equiv|resume|fault|memory|refuse]
 *
 * Oracle: one process running the same global batch (micro-batch 2 × accumulation 4 = 8 sequences
 * per step; dp 2 runs accumulation 2, dp 4 accumulation 1), 10 steps, fp32, 1 thread per process.
 * The dp runs differ from it only by the summation order of the reduced gradients: each hidden
 * matrix is orthogonalised on one owner rank from the same inputs the single process has.
 *   equiv   dp ∈ {2, 4} × ZeRO ∈ {1, 2, 3}: every step's loss and gradient norm within 1e-6
 *           (relative), every rank logged the same norm, final weights within 1e-5 (per-tensor
 *           relative norm; the qkv key bias 1e-4 absolute, see runcmp.h); and a Llama (separate
 *           wq, wk, wv, SwiGLU, 2 query heads over 1 KV head) at dp 2 ZeRO 3 against its one process.
 *   resume  bit-exact: one process stopped after step 5 and resumed equals the uninterrupted one
 *           (every loss printed identically, final weights bit for bit); dp 2 ZeRO 2 likewise against
 *           uninterrupted dp 2 ZeRO 2. Across grids: dp 4 ZeRO 1 stopped after 5 → dp 2 ZeRO 3 resumed
 *           to 10, within the equiv tolerances of the one-process run. Negative control: the resume
 *           with the matrices' state zeroed (ST_PAR_TEST_MATRIX_RESET=1 at the resumed start: Muon's
 *           momentum; Shampoo's moments and block statistics) must not be bit-exact; Shampoo: nor with
 *           only its block state zeroed (=2: what optimizer-extra.safetensors carries).
 *   fault   negative control: ST_PAR_TEST_MATRIX_FAULT=1 (the owners' results are not broadcast, so
 *           the other ranks apply their un-orthogonalised input) at dp 2 ZeRO 1 must fail the equiv
 *           comparison (measured: weights off by far more than 1e-5).
 *   memory  dp 2 ZeRO 2, fp32 and bf16: the run's memory record planned == measured on every rank
 *           (par_planned_bytes with Muon's buffers), and `plan --optimizer muon --json`'s per-rank
 *           bytes equal every rank's allocation. Negative control: `plan --optimizer adamw` differs (Sophia: `lion`, one moment).
 *   refuse  one line and exit 2 each: an unknown --optimizer (the message lists muon and shampoo), the
 *           optimizer with --tp 2 (under mpirun -np 2), --muon-momentum 1, --muon-lr with adamw;
 *           Shampoo: --shampoo-block 0, --precond-every -1, --precond-every with adamw, --ckpt-async. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "model/layout.h"
#include "runcmp.h"
#include "testutil.h"

#define DIR ST_BINARY_DIR "/test_matopt"
#define STEPS 10

static const RcTol TOL = {1e-6, 1e-6, 1e-5, 1e-4};
static const char *g_mpi, *g_bin, *g_opt;
static char g_flags[256];

#define COMMON                                                                                                       \
    "train --data " DIR "/train.bin --layers 2 --heads 2 --channels 32 --max-seq-len 32 --seq-len 32 --micro-batch 2 " \
    "--lr 2e-3 --min-lr 2e-4 --warmup 3 --val-every 0 --threads 1 --peak-gflops 100 --quiet"

/* One run: np 0 = one process without mpirun; env "VAR=value" or NULL; append keeps the log. */
static int train_env(const char *name, int np, int k, int zero, const char *extra, const char *env, int append) {
    char cmd[4096], launch[1024] = "", var[64] = "";
    if (env) snprintf(var, sizeof var, "%.*s", (int)strcspn(env, "="), env);
    if (np > 0)
        snprintf(launch, sizeof launch, "%s timeout 120 %s --allow-run-as-root --oversubscribe -np %d -x OMP_NUM_THREADS=1 %s%s ",
                 env ? env : "", g_mpi, np, var[0] ? "-x " : "", var);
    else if (env)
        snprintf(launch, sizeof launch, "%s ", env);
    snprintf(cmd, sizeof cmd, "%s%s " COMMON " %s --steps %d --grad-accum %d --zero %d --log %s/%s.jsonl --out %s/%s_out %s",
             launch, g_bin, g_flags, STEPS, k, zero, DIR, name, DIR, name, extra ? extra : "");
    char lg[1200];
    snprintf(lg, sizeof lg, "%s/%s.jsonl", DIR, name);
    if (!append) remove(lg);
    double secs;
    int rc = rc_run(DIR, name, cmd, &secs);
    printf("%s: exit %d, %.1f s\n", name, rc, secs);
    return rc;
}

static int train(const char *name, int np, int k, int zero, const char *extra) {
    int rc = train_env(name, np, k, zero, extra, NULL, 0);
    if (rc != 0) tu_check(0, name, "exit %d, see %s/%s.out", rc, DIR, name);
    return rc == 0;
}

static void test_layout(ParamLayout *pl) {
    ModelConfig mc = {2, 2, 32, 97, 0, 32, 0};
    Err e;
    model_config_validate(&mc, &e);
    layout_init(pl, &mc, 1);
}

/* The reference (one process, k = 4) and its weights. */
static float *reference(const ParamLayout *pl) {
    static float *w;
    if (!w && train("ref", 0, 4, 0, NULL)) w = rc_weights(DIR, "ref", pl);
    return w;
}

#define LLAMA "--arch llama --kv-heads 1"

static void equiv(void) {
    ParamLayout pl;
    test_layout(&pl);
    float *wref = reference(&pl);
    for (int np = 2; np <= 4; np += 2)
        for (int z = 1; z <= 3; z++) {
            char name[64];
            snprintf(name, sizeof name, "dp%d_z%d", np, z);
            if (wref && train(name, np, 4 / np, z, NULL)) rc_compare(DIR, name, "ref", STEPS, &pl, wref, TOL, NULL);
        }
    layout_free(&pl);
    /* Llama (separate q, k, v; gate, up, down; 2 query heads over 1 KV head): dp 2 ZeRO 3 */
    ModelConfig mc;
    Err e = {0};
    if (!train("llama_ref", 0, 4, 0, LLAMA)) return;
    /* the layout of the model the run built (its config.json beside the weights) */
    if (ckpt_peek_config(DIR "/llama_ref_out", &mc, &e) != ST_OK || layout_init(&pl, &mc, 1) != 0) {
        tu_check(0, "llama layout", "%s", e.msg);
        return;
    }
    float *wl = rc_weights(DIR, "llama_ref", &pl);
    if (!wl) tu_check(0, "llama_ref weights", "cannot read %s/llama_ref_out", DIR);
    if (wl && train("llama_dp2_z3", 2, 2, 3, LLAMA)) rc_compare(DIR, "llama_dp2_z3", "llama_ref", STEPS, &pl, wl, TOL, NULL);
    free(wl);
    layout_free(&pl);
}

/* Every "loss" text of two logs equal (the logs print doubles round-trip exactly). */
static int losses_identical(const char *a, const char *b) {
    char pa[1200], pb[1200];
    snprintf(pa, sizeof pa, "%s/%s.jsonl", DIR, a), snprintf(pb, sizeof pb, "%s/%s.jsonl", DIR, b);
    char *x = tu_slurp(pa), *y = tu_slurp(pb), *p = x, *q = y;
    int same = x && y, n = 0;
    while (same) {
        p = strstr(p, "\"loss\":"), q = strstr(q, "\"loss\":");
        if (!p || !q) {
            same = !p && !q;
            break;
        }
        size_t lp = strcspn(p, ","), lq = strcspn(q, ",");
        same = lp == lq && !memcmp(p, q, lp);
        p += lp, q += lq, n++;
    }
    free(x), free(y);
    return same && n >= STEPS;
}

/* Stop after step 5 on (np1, z1), resume on (np2, z2) to STEPS; env applies to the resumed part. */
static int stop_resume(const char *name, int np1, int z1, int np2, int z2, const char *env) {
    char ex[1400], cmd[1400];
    snprintf(cmd, sizeof cmd, "rm -rf %s/%s_ck", DIR, name);
    if (system(cmd) != 0) return 0;
    snprintf(ex, sizeof ex, "--ckpt-dir %s/%s_ck --stop-after 5", DIR, name);
    int rc1 = train_env(name, np1, 4 / (np1 ? np1 : 1), z1, ex, NULL, 0);
    snprintf(ex, sizeof ex, "--ckpt-dir %s/%s_ck --resume auto", DIR, name);
    int rc2 = train_env(name, np2, 4 / (np2 ? np2 : 1), z2, ex, env, 1);
    if (rc1 || rc2) tu_check(0, name, "stop at 5 on %d rank(s), resume on %d: exit %d, %d", np1, np2, rc1, rc2);
    return !rc1 && !rc2;
}

static int bit_equal(const char *a, const char *b, const ParamLayout *pl) {
    float *x = rc_weights(DIR, a, pl), *y = rc_weights(DIR, b, pl);
    int same = x && y && !memcmp(x, y, pl->total * sizeof(float));
    free(x), free(y);
    return same && losses_identical(a, b);
}

static void resume(void) {
    ParamLayout pl;
    test_layout(&pl);
    float *wref = reference(&pl);
    if (stop_resume("res1", 0, 0, 0, 0, NULL))
        tu_check(bit_equal("res1", "ref", &pl), "resume bit-exact: one process stopped at 5, resumed to 10",
                 "every loss and every final weight identical to the uninterrupted run");
    if (train("ref_dp2", 2, 2, 2, NULL) && stop_resume("res2", 2, 2, 2, 2, NULL))
        tu_check(bit_equal("res2", "ref_dp2", &pl), "resume bit-exact: dp 2 ZeRO 2 stopped at 5, resumed to 10",
                 "every loss and every final weight identical to the uninterrupted dp 2 run");
    if (stop_resume("res_reset", 0, 0, 0, 0, "ST_PAR_TEST_MATRIX_RESET=1"))
        tu_check(!bit_equal("res_reset", "ref", &pl), "negative control: a resume with the matrices' optimizer state zeroed",
                 "must not be bit-exact");
    if (!strcmp(g_opt, "shampoo") && stop_resume("res_reset2", 0, 0, 0, 0, "ST_PAR_TEST_MATRIX_RESET=2"))
        tu_check(!bit_equal("res_reset2", "ref", &pl), "negative control: a resume with only Shampoo's block state zeroed",
                 "must not be bit-exact (the extra file's content matters)");
    if (wref && stop_resume("res42", 4, 1, 2, 3, NULL)) {
        char why[512];
        tu_check(tu_log_resumed(DIR "/res42.jsonl", 5, STEPS, 4, 2, why, sizeof why),
                 "res42: the log shows the resume from step 5 on 2 ranks", "%s", why);
        rc_compare(DIR, "res42", "ref", STEPS, &pl, wref, TOL, NULL);
    }
    layout_free(&pl);
}

static void fault(void) {
    ParamLayout pl;
    test_layout(&pl);
    float *wref = reference(&pl);
    /* Sophia: the Hessian pass's labels drawn from rank-local row numbers (every replica draws the
     * same u sequence), so the estimate is not one process's */
    const char *env = !strcmp(g_opt, "sophia") ? "ST_TRAIN_TEST_HESS_FAULT=1" : "ST_PAR_TEST_MATRIX_FAULT=1";
    const char *what = !strcmp(g_opt, "sophia") ? "negative control: dp 2 ZeRO 1 with rank-local label draws"
                                                : "negative control: dp 2 ZeRO 1 without the owners' broadcast";
    if (wref && train_env("fault", 2, 2, 1, NULL, env, 0) == 0) {
        double lw = NAN, nw = NAN, kabs = INFINITY;
        RcLog la;
        float *w = rc_weights(DIR, "fault", &pl);
        double ww = w ? rc_weights_rel(&pl, w, wref, &kabs) : INFINITY;
        int logs = rc_log_diffs(DIR, "fault", "ref", STEPS, &lw, &nw, &la);
        int pass = logs && lw <= TOL.loss && nw <= TOL.norm && ww <= TOL.w && kabs <= TOL.key;
        tu_check(!pass, what, "must fail the comparison: losses %.2e, norms %.2e, weights %.2e", lw, nw, ww);
        free(w);
    } else {
        tu_check(0, what, "the run did not complete");
    }
    layout_free(&pl);
}

static const char *const MEM_CAT[4] = {"parameters", "gradients", "master_weights", "optimizer_moments"};

/* Every rank's bytes of the four state categories == plan's (Shampoo's moments: plan's figure is the
 * most loaded rank's, so == the maximum over ranks); detail names them. */
static int plan_matches(const cJSON *plan, const cJSON *mem, int world, char *detail, size_t cap) {
    const cJSON *pm = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(plan, "memory_bytes"), "by_category");
    const cJSON *by = cJSON_GetObjectItemCaseSensitive(mem, "measured_by_rank");
    if (!pm || !by) return snprintf(detail, cap, "%s", !pm ? "no plan by_category" : "no measured_by_rank"), 0;
    size_t o = 0;
    int all = 1;
    for (int c = 0; c < 4; c++) {
        double p = rc_num(pm, MEM_CAT[c]);
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(by, MEM_CAT[c]);
        int same = cJSON_GetArraySize(a) == world;
        if (c == 3 && !strcmp(g_opt, "shampoo")) {
            double mx = 0;
            for (int q = 0; same && q < world; q++)
                if (cJSON_GetArrayItem(a, q)->valuedouble > mx) mx = cJSON_GetArrayItem(a, q)->valuedouble;
            same = same && mx == p;
        } else {
            for (int q = 0; same && q < world; q++) same = cJSON_GetArrayItem(a, q)->valuedouble == p;
        }
        all &= same;
        o += (size_t)snprintf(detail + o, o < cap ? cap - o : 0, "%s%s %.0f%s", c ? ", " : "", MEM_CAT[c], p,
                              same ? "" : " DIFFERS");
    }
    return all;
}

static void memory(void) {
    static const char *const PREC[2] = {"fp32", "bf16"};
    /* Sophia's m and h are AdamW's two moments: its wrong plan is a one-moment optimizer's */
    const char *wrong_opt = !strcmp(g_opt, "sophia") ? "lion" : "adamw";
    for (int p = 0; p < 2; p++) {
        char name[64], extra[128], cmd[2048], detail[512], what[160];
        snprintf(name, sizeof name, "mem_%s", PREC[p]);
        snprintf(extra, sizeof extra, "--precision %s", PREC[p]);
        if (!train(name, 2, 1, 2, extra)) continue;
        cJSON *all = rc_records(DIR, name);
        const cJSON *rec = rc_memory_record(all, "measured_by_rank");
        char *t = cJSON_PrintUnformatted(rec);
        snprintf(what, sizeof what, "dp 2 ZeRO 2 %s: the run's memory record planned == measured", PREC[p]);
        tu_check(t && strstr(t, "\"planned_equals_measured\":true"), what, "%.300s", t ? t : "no memory record");
        free(t);
        for (int wrong = 0; wrong < 2; wrong++) {
            snprintf(cmd, sizeof cmd, "%s plan --layers 2 --heads 2 --channels 32 --vocab 97 --max-seq-len 32 --seq-len 32 "
                     "--micro-batch 2 --grad-accum 1 --threads 1 --dp 2 --zero 2 --precision %s --optimizer %s %s --json",
                     g_bin, PREC[p], wrong ? wrong_opt : g_opt,
                     !wrong && !strcmp(g_opt, "shampoo") ? "--shampoo-block 24 --precond-every 3" : "");
            cJSON *plan = rc_command_json(cmd);
            int ok = plan_matches(plan, rec, 2, detail, sizeof detail);
            snprintf(what, sizeof what, "%sdp 2 ZeRO 2 %s: plan --optimizer %s per-rank bytes %s every rank's allocation",
                     wrong ? "negative control: " : "", PREC[p], wrong ? wrong_opt : g_opt, wrong ? "differ from" : "==");
            tu_check(wrong ? !ok : ok, what, "%s", detail);
            cJSON_Delete(plan);
        }
        cJSON_Delete(all);
    }
}

/* Sophia's Hessian pass in the step records of the reference run (k = 3): time_ms.hessian > 0 and a
 * hessian{} object exactly on steps 1, 4, 7, 10, with the step's tokens; MFU counting the pass's
 * FLOPs (mfu·total·peak_job / (fpt·batch tokens) = 2 on those steps, 1 on the others: the negative
 * control is that factor-1 formula, which must fail on the Hessian steps); and the time parts
 * (data, forward, backward, optimizer, checkpoint, hessian) summing to the step's total within 2% + 0.2 ms
 * (the pass is in no other part). Then plan: with --optimizer sophia --hess-every 4 the predicted
 * step is AdamW's plus (compute + dp comm)/4 and its MFU 1.25× at the same step time. */
static void accounting(void) {
    ParamLayout pl;
    test_layout(&pl);
    float *w = reference(&pl);
    layout_free(&pl);
    if (!w) return;
    cJSON *all = rc_records(DIR, "ref");
    const cJSON *rec;
    double fpt = NAN, peak = NAN, bt = NAN;
    int due_ok = 1, nh = 0, mfu_ok = 1, parts_ok = 1, control_fails = 0;
    char why[256] = "";
    cJSON_ArrayForEach(rec, all) {
        const char *ev = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(rec, "event"));
        if (ev && !strcmp(ev, "start")) {
            fpt = rc_num(rec, "flops_per_token"), peak = rc_num(rec, "peak_flops_job");
            bt = rc_num(cJSON_GetObjectItemCaseSensitive(rec, "effective_batch"), "tokens");
        }
        if (!ev || strcmp(ev, "step")) continue;
        int step = (int)rc_num(rec, "step"), due = (step - 1) % 3 == 0;
        const cJSON *tm = cJSON_GetObjectItemCaseSensitive(rec, "time_ms"), *h = cJSON_GetObjectItemCaseSensitive(rec, "hessian");
        double hm = rc_num(tm, "hessian"), tot = rc_num(tm, "total");
        int has = hm > 0 && h && rc_num(h, "tokens") == rc_num(rec, "tokens");
        if (has != due) due_ok = 0, snprintf(why, sizeof why, "step %d: hessian %.3f ms, record %s", step, hm, h ? "present" : "absent");
        nh += has;
        double f = rc_num(rec, "mfu") * tot * 1e-3 * peak / (fpt * bt);
        if (fabs(f - (due ? 2.0 : 1.0)) > 1e-9) mfu_ok = 0;
        if (due && fabs(f - 1.0) > 1e-9) control_fails++;
        double sum = 0;
        static const char *const P[6] = {"data", "forward", "backward", "optimizer", "checkpoint", "hessian"};
        for (int i = 0; i < 6; i++) sum += rc_num(tm, P[i]);
        if (!(fabs(sum - tot) <= 0.02 * tot + 0.2)) parts_ok = 0; /* 0.2 ms: the gap before the record */
    }
    cJSON_Delete(all);
    tu_check(due_ok && nh == 4, "sophia: the Hessian pass on steps 1, 4, 7, 10 only, with the step's tokens", "%d passes %s", nh, why);
    tu_check(mfu_ok, "sophia: MFU counts the pass's FLOPs (factor 2 on its steps, 1 elsewhere)", "%s", mfu_ok ? "all steps" : "DIFFERS");
    tu_check(control_fails == 4, "sophia negative control: MFU without the pass's FLOPs fails on its steps",
             "%d of 4 steps", control_fails);
    tu_check(parts_ok, "sophia: the time parts (hessian its own) sum to the step's total within 2%", "%s",
             parts_ok ? "every step" : "NOT every step");
    double step_s[2], mfu[2], hess = NAN, comp = 0;
    for (int q = 0; q < 2; q++) {
        char cmd[2048];
        snprintf(cmd, sizeof cmd, "%s plan --layers 2 --heads 2 --channels 32 --vocab 97 --max-seq-len 32 --seq-len 32 "
                 "--micro-batch 2 --grad-accum 1 --threads 1 --dp 2 --optimizer %s --json", g_bin,
                 q ? "sophia --hess-every 4" : "adamw");
        cJSON *plan = rc_command_json(cmd);
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(plan, "compute");
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(c, "time_s");
        step_s[q] = rc_num(c, "step_s"), mfu[q] = rc_num(c, "mfu");
        if (q) hess = rc_num(t, "hessian");
        else {
            static const char *const K[6] = {"matmul", "elementwise", "bubble", "tp", "pp", "dp"};
            for (int i = 0; i < 6; i++) comp += rc_num(t, K[i]);
        }
        cJSON_Delete(plan);
    }
    double want = comp / 4;
    tu_check(fabs(hess - want) <= 1e-12 * want && fabs(step_s[1] - step_s[0] - hess) <= 1e-9 * step_s[0] &&
                 fabs(mfu[1] * step_s[1] / (mfu[0] * step_s[0]) - 1.25) < 1e-9,
             "sophia plan: the Hessian pass amortised ((compute + dp comm)/4) in the step and its FLOPs in MFU",
             "hessian %.4g s (want %.4g), step %.4g vs %.4g s, MFU·step ratio %.6f (want 1.25)", hess, want, step_s[1],
             step_s[0], mfu[1] * step_s[1] / (mfu[0] * step_s[0]));
}

/* A command that must exit 2 with `want` in its one-line message. */
static void refused(const char *name, const char *cmd, const char *want) {
    double secs;
    int rc = rc_run(DIR, name, cmd, &secs);
    char path[1200];
    snprintf(path, sizeof path, "%s/%s.out", DIR, name);
    char *out = tu_slurp(path);
    const char *line = out ? strstr(out, "scaletrain train:") : NULL;
    tu_check(rc == 2 && line && strstr(line, want), name, "exit %d: %.*s", rc, line ? (int)strcspn(line, "\n") : 4,
             line ? line : "none");
    free(out);
}

/* One refused command: under mpirun -np 2 (mpi) or one process; `flags` 1 puts the optimizer's own
 * flags (g_flags) before args. */
typedef struct {
    const char *name;
    int mpi, flags;
    const char *args, *want;
} Refusal;

static const Refusal REFUSE_COMMON[] = {
    {"refuse_unknown", 0, 0, "--optimizer adafactor", "expected adamw, adam, sgd, lion, muon, shampoo or sophia, found 'adafactor'"},
};
static const Refusal REFUSE_MUON[] = {
    {"refuse_tp", 1, 1, "--tp 2", "expected --tp 1 and --pp 1"},
    {"refuse_momentum", 0, 0, "--optimizer muon --muon-momentum 1", "--muon-momentum: expected a value in [0, 1), found 1"},
    {"refuse_inert", 0, 0, "--muon-lr 0.1", "--muon-lr: would change nothing here"},
};
static const Refusal REFUSE_SHAMPOO[] = {
    {"refuse_tp", 1, 1, "--tp 2", "expected --tp 1 and --pp 1"},
    {"refuse_block", 0, 0, "--optimizer shampoo --shampoo-block 0", "--shampoo-block: expected an integer >= 1, found 0"},
    {"refuse_every", 0, 0, "--optimizer shampoo --precond-every -1", "--precond-every: expected an integer >= 1, found -1"},
    {"refuse_inert", 0, 0, "--precond-every 5", "--precond-every: would change nothing here"},
    {"refuse_async", 0, 1, "--ckpt-dir " DIR "/sh_ck --ckpt-async",
     "--ckpt-async with --optimizer shampoo: expected synchronous checkpoints"},
};
static const Refusal REFUSE_SOPHIA[] = {
    {"refuse_tp", 1, 1, "--tp 2", "--optimizer sophia: expected --tp 1 and --pp 1"},
    {"refuse_pp", 1, 1, "--pp 2", "--optimizer sophia: expected --tp 1 and --pp 1"},
    {"refuse_every", 0, 0, "--optimizer sophia --hess-every 0", "--hess-every: expected an integer >= 1, found 0"},
    {"refuse_gamma", 0, 0, "--optimizer sophia --sophia-gamma 0", "--sophia-gamma: expected a value > 0, found 0"},
    {"refuse_inert", 0, 0, "--hess-every 5", "--hess-every: would change nothing here"},
    {"refuse_inert2", 0, 0, "--optimizer muon --sophia-gamma 0.1", "--sophia-gamma: would change nothing here"},
};

static void refuse_list(const Refusal *r, size_t n) {
    for (size_t i = 0; i < n; i++) {
        char cmd[2048], launch[1024] = "";
        if (r[i].mpi)
            snprintf(launch, sizeof launch, "timeout 60 %s --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS=1 ",
                     g_mpi);
        snprintf(cmd, sizeof cmd, "%s%s " COMMON " --steps 2 %s %s", launch, g_bin, r[i].flags ? g_flags : "", r[i].args);
        refused(r[i].name, cmd, r[i].want);
    }
}

#define REFUSE(list) refuse_list(list, sizeof list / sizeof list[0])

static void refuse(void) {
    REFUSE(REFUSE_COMMON);
    if (!strcmp(g_opt, "sophia")) REFUSE(REFUSE_SOPHIA);
    else if (!strcmp(g_opt, "shampoo")) REFUSE(REFUSE_SHAMPOO);
    else REFUSE(REFUSE_MUON);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: test_matopt MPIEXEC SCALETRAIN OPTIMIZER [equiv|resume|fault|memory|refuse]\n");
        return 2;
    }
    g_mpi = argv[1], g_bin = argv[2], g_opt = argv[3];
    if (!strcmp(g_opt, "muon")) snprintf(g_flags, sizeof g_flags, "--optimizer muon --muon-lr 0.02");
    else if (!strcmp(g_opt, "sophia")) snprintf(g_flags, sizeof g_flags, "--optimizer sophia --hess-every 3 --eps 1e-4");
    else snprintf(g_flags, sizeof g_flags, "--optimizer shampoo --shampoo-block 24 --precond-every 3");
    const char *what = argc > 4 ? argv[4] : "all";
    rc_make_data(DIR);
    if (!strcmp(what, "equiv") || !strcmp(what, "all")) equiv();
    if (!strcmp(what, "resume") || !strcmp(what, "all")) resume();
    if (!strcmp(what, "fault") || !strcmp(what, "all")) fault();
    if (!strcmp(what, "memory") || !strcmp(what, "all")) memory();
    if ((!strcmp(what, "memory") || !strcmp(what, "all")) && !strcmp(g_opt, "sophia")) accounting();
    if (!strcmp(what, "refuse") || !strcmp(what, "all")) refuse();
    return tu_exit();
}
