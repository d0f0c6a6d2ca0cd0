/* test_tp_plan.c — `plan` against what the trainer allocates and sends at tensor parallelism
 * (issue 13, "Accounting").
 *
 * Usage: test_tp_plan MPIEXEC SCALETRAIN [formula|runs]
 *
 *   formula  (no MPI) plan_trainer_comm's bytes per layer against closed forms written from the
 *            Megatron and Korthikanti accounting in our element sizes (t = 2, 4, 8; N = B·T rows,
 *            C channels, the increment of one more layer per micro-batch):
 *              no --sp, fp32                 8·N·C·(t-1)/t·4           (4 all-reduces of N·C floats)
 *              no --sp, fp32, full recompute 12·N·C·(t-1)/t·4          (6 all-reduces)
 *              --sp, bf16                    8·N·C·(t-1)/t·4 + 32·C·(t-1)/t  (LayerNorm outputs gathered
 *                                            in 2 bytes, their backward re-gather; 2 LayerNorm gradients)
 *              --sp, fp32                    10·N·C·(t-1)/t·4 + 32·C·(t-1)/t (the re-gathers in 4 bytes)
 *            exact (integers). Negative control: the --sp fp32 layer against the textbook form
 *            without the re-gathers differs. And one tp rank's activation bytes per layer
 *            (layout_activations) against docs/plan.md's closed forms: tp sbh(16 + 48/t) + 16sb +
 *            4sba/t (fp32), sbh(12 + 40/t) + ... (bf16); tp+sp (sbh/t)(64 + (16 + 4a)/h) (fp32),
 *            (sbh/t)(52 + ...) (bf16), selective (sbh/t)(40 + ...), full 4sbh/t. Negative control:
 *            Korthikanti's form in 4-byte elements differs.
 *            And ZeRO's pieces (issue 28): GPT-2 124M's shape at dp 8, ZeRO 1 and 2: reduce-scatter and
 *            all-gather bytes == the unsplit segments' ring bytes, calls == sum ceil(blk / (2^20/8)).
 *            Negative control: one call per segment differs.
 *   runs     `scaletrain train` under mpirun, 3 steps of a small model (L=2, 4 heads, C=32, V=97,
 *            B=2, T=32, accumulation 4) at tp 2, tp 2 --sp, dp 2 × tp 2 ZeRO 1, tp 2 bf16 --sp and
 *            tp 2 --recompute full. Oracles: the trainer's own counters.
 *              memory  `plan --json` memory_bytes.by_category == every rank's state bytes (the memory
 *                      record's measured_by_rank), rank 0's activations and workspace (measured), and
 *                      every rank's allocated total (allocated_total_by_rank) == the plan's categories
 *                      plus what the plan does not cover (rank 0's data and staging buffers);
 *              comm    `plan --json` comm_bytes_by_kind == every step record's comm_bytes_by_kind
 *                      after the first, every kind exactly; the first step == plan_trainer_comm with
 *                      first_step (the memory record's two extra all-gathers).
 *              overlap `plan --json` communication.tp_overlapped_calls == every step record's
 *                      tp_overlapped (the collectives the trainer overlapped with GEMMs, issue 28).
 *            Negative controls: the plan of a different tp (tp 1 on the same world), or without --sp
 *            for the --sp runs, must fail all three checks; a run with the test-only fault
 *            ST_PAR_TEST_TP_FAULT=1 (the backward's tp all-reduces skipped) must fail the comm check.
 * The plan is told the ranks share one node (--devices-per-node = world), as they do under mpirun
 * here; the dp group's in-place reduce-scatters are comm's ring there too ((p-1)/p·S). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/config.h"
#include "model/layout.h"
#include "plan/plan.h"
#include "runcmp.h"
#include "testutil.h"

#define DIR ST_BINARY_DIR "/test_tp_plan"
#define STEPS 3
#define MODEL "--layers 2 --heads 4 --channels 32 --max-seq-len 32 --seq-len 32 --micro-batch 2 --grad-accum 4 --threads 1"

static const char *g_mpi, *g_bin;

/* ---------------------------------------------------------------- formula */

/* plan_trainer_comm's tp bytes per step of cfg at tp t (one micro-batch, no dp). */
static double tp_bytes(const ModelConfig *cfg, int B, int T, int t, int sp, int rc, int prec) {
    PlanTrainerStep s = {B, T, 1, 1, t, sp, 0, rc, prec, 0};
    PlanCommKinds o;
    Err e;
    if (plan_trainer_comm(cfg, &s, 1e9, 1e-6, &o, &e) != ST_OK) return -1;
    return o.bytes[COMM_TP_ALLREDUCE] + o.bytes[COMM_TP_ALLGATHER] + o.bytes[COMM_TP_REDUCE_SCATTER];
}

/* ZeRO's pieces (issue 28) in plan_trainer_comm: GPT-2 124M's shape (L 12, C 768, V 50257) at dp 8,
 * ZeRO 1 and 2 (k = 2). Closed forms from the layout's segment lengths: the reduce-scatter and
 * all-gather bytes are the unsplit segments' ring bytes, sum (p-1)/p·4·len (the pieces add up
 * exactly), and the calls are sum ceil(blk / (2^20 / 8)) per collective (each rank's part of a piece
 * is 4 MiB / dp). Negative control: one call per segment (the count before the pieces) differs. */
static void zero_pieces(void) {
    ModelConfig cfg = {12, 12, 768, 50257, 0, 1024, 0.0f};
    Err e;
    ParamLayout pl;
    const int dp = 8;
    if (model_config_validate(&cfg, &e) != ST_OK || layout_init_tp(&pl, &cfg, dp, 1, 0) != 0) {
        tu_check(0, "zero_pieces_layout", "%s", e.msg);
        return;
    }
    double bytes = 0, calls = 0, segs = 0;
    for (int g = 0; g < pl.nseg; g++) {
        uint64_t len = pl.seg_off[g + 1] - pl.seg_off[g], blk = len / dp, q = ((uint64_t)1 << 20) / dp;
        if (!len) continue;
        bytes += (double)(4 * len * (dp - 1) / dp);
        calls += (double)((blk + q - 1) / q);
        segs += 1;
    }
    layout_free(&pl);
    for (int z = 1; z <= 2; z++) {
        PlanTrainerStep st = {4, 1024, 2, dp, 1, 0, z, 0, 0, 0};
        PlanCommKinds o;
        Status rc = plan_trainer_comm(&cfg, &st, 1e9, 1e-6, &o, &e);
        double k = z == 2 ? 2 : 1; /* ZeRO 2 reduce-scatters every micro-batch */
        int ok = rc == ST_OK && o.bytes[COMM_REDUCE_SCATTER] == k * bytes && o.bytes[COMM_ALLGATHER] == bytes &&
                 o.calls[COMM_REDUCE_SCATTER] == k * calls && o.calls[COMM_ALLGATHER] == calls;
        char name[64];
        snprintf(name, sizeof name, "zero%d_dp8_pieces_bytes_and_calls", z);
        tu_check(ok, name, "reduce-scatter %.0f B in %.0f calls (closed form %.0f B, %.0f), all-gather %.0f B in %.0f calls (%.0f, %.0f)",
                 o.bytes[COMM_REDUCE_SCATTER], o.calls[COMM_REDUCE_SCATTER], k * bytes, k * calls, o.bytes[COMM_ALLGATHER],
                 o.calls[COMM_ALLGATHER], bytes, calls);
        if (z == 1)
            tu_check(rc == ST_OK && o.calls[COMM_REDUCE_SCATTER] != segs, "zero1_dp8_pieces_control_one_call_per_segment",
                     "%.0f segments must differ from the %.0f calls counted", segs, o.calls[COMM_REDUCE_SCATTER]);
    }
}

/* What the tp overlap hides (issue 28, plan_tp_exposed): GPT-2 shape L 3, C 128, 8 heads, B 4,
 * T 64 (N 256) at tp 2, fp32, no --sp. Closed form: per block the two column-parallel input-gradient
 * all-reduces of the (N, C) buffer, xs = 2(t-1)/t·4NC/bw + 2(t-1)α each, beside their weight-gradient
 * GEMMs of 2NC·3C/t (qkv) and 2NC·4C/t (fc) FLOPs; the two row-parallel forward sums in 2 row chunks
 * of N/2 rows, xh each, chunk 0's beside chunk 1's GEMM (2·(N/2)·(C/t)·C, 2·(N/2)·(4C/t)·C FLOPs),
 * chunk 1's beside chunk 0's elementwise tail (6 and 5 passes of (N/2)·C floats at the memory
 * bandwidth). exposed = tp_time − L·Σ min(x, FLOPs/rate + bytes/mem_bw) at matmul rates where the
 * GEMMs are far shorter than, around and far longer than their collectives; the groups' Σ calls·x ==
 * tp_overlap_time. Negative controls: all tp time exposed (the plan before) differs, so does every
 * overlapped call hidden whole, and so does the tail left out (the last chunk's sum exposed). */
static void tp_hidden(void) {
    ModelConfig c = {3, 8, 128, 1000, 0, 64, 0};
    Err e;
    model_config_validate(&c, &e);
    const int B = 4, T = 64, t = 2, L = 3;
    double N = (double)B * T, C = 128, bw = 1e9, lat = 1e-5, mbw = 20e9;
    PlanTrainerStep s = {B, T, 1, 1, t, 0, 0, RECOMPUTE_NONE, 0, 0};
    PlanCommKinds o;
    if (plan_trainer_comm(&c, &s, bw, lat, &o, &e) != ST_OK) {
        tu_check(0, "plan_trainer_comm tp 2", "%s", e.msg);
        return;
    }
    double xs = 2.0 * (t - 1) / t * 4 * N * C / bw + 2.0 * (t - 1) * lat;
    double xh = 2.0 * (t - 1) / t * 4 * (N / 2) * C / bw + 2.0 * (t - 1) * lat;
    double fl[6] = {2 * N * C * 3 * C / t, 2 * N * C * 4 * C / t, 2 * (N / 2) * (C / t) * C, 2 * (N / 2) * (4 * C / t) * C, 0, 0};
    double by[6] = {0, 0, 0, 0, 6 * (N / 2) * C * 4, 5 * (N / 2) * C * 4};
    double xx[6] = {xs, xs, xh, xh, xh, xh};
    double ovl = L * (2 * xs + 4 * xh);
    int ok = fabs(o.tp_overlap_time - ovl) <= 1e-12 * ovl;
    char d[300];
    snprintf(d, sizeof d, "tp_overlap_time %.9g, closed form %.9g", o.tp_overlap_time, ovl);
    /* GEMMs at 1e15 FLOP/s hide almost nothing, at 1e6 every one outlasts its collective, at 3e10
     * some do (the row chunks' 8 us GEMMs against their 66 us sums) and some do not. */
    double rates[3] = {1e15, 3e10, 1e6}, got[3], want[3], notail = 0;
    for (int i = 0; i < 3; i++) {
        double hid = 0, hid_notail = 0;
        for (int g = 0; g < 6; g++) {
            hid += L * fmin(xx[g], fl[g] / rates[i] + by[g] / mbw);
            hid_notail += L * fmin(xx[g], fl[g] / rates[i]);
        }
        want[i] = o.tp_time - hid, got[i] = plan_tp_exposed(&o, rates[i], mbw);
        if (i == 0) notail = o.tp_time - hid_notail;
        if (fabs(got[i] - want[i]) > 1e-12 * o.tp_time && ok)
            ok = 0, snprintf(d, sizeof d, "rate %g: exposed %.9g s, closed form %.9g", rates[i], got[i], want[i]);
    }
    if (ok) snprintf(d, sizeof d, "tp_time %.6g s; exposed %.6g / %.6g / %.6g s at 1e15 / 3e10 / 1e6 FLOP/s", o.tp_time, got[0],
                     got[1], got[2]);
    tu_check(ok, "plan_tp_exposed == tp_time - L x sum min(x, GEMM or tail beside) (tp 2, fp32, 2 row chunks)", "%s", d);
    double whole = o.tp_time - ovl; /* every overlapped collective hidden whole, the last chunk's sum too */
    tu_check(fabs(got[2] - o.tp_time) > 0.1 * o.tp_time && fabs(got[2] - whole) > 0.05 * o.tp_time &&
                 fabs(got[0] - notail) > 0.01 * o.tp_time,
             "negative control: all tp time exposed (the plan before), every overlapped call hidden whole, and the "
             "tail left out, differ",
             "at 1e6 FLOP/s: %.6g s vs %.6g (all exposed), %.6g (all hidden); at 1e15: %.6g vs %.6g (no tail)", got[2],
             o.tp_time, whole, got[0], notail);
}

static void formula(void) {
    zero_pieces();
    tp_hidden();
    const int B = 4, T = 64, C = 128, tps[3] = {2, 4, 8};
    int ok = 1, caught = 1;
    char detail[256] = "";
    for (int i = 0; i < 3; i++) {
        int t = tps[i];
        ModelConfig c2 = {2, 8, C, 1000, 0, T, 0}, c3 = c2;
        c3.n_layer = 3;
        Err e;
        model_config_validate(&c2, &e), model_config_validate(&c3, &e);
        double N = (double)B * T, f = (double)(t - 1) / t, mf = 8 * N * C * f * 4, ln = 32.0 * C * f;
        struct { const char *what; int sp, rc, prec; double want; } K[4] = {
            {"no sp fp32", 0, RECOMPUTE_NONE, 0, mf},
            {"no sp fp32 full recompute", 0, RECOMPUTE_FULL, 0, 1.5 * mf},
            {"sp bf16", 1, RECOMPUTE_NONE, 1, mf + ln},
            {"sp fp32", 1, RECOMPUTE_SELECTIVE, 0, 1.25 * mf + ln},
        };
        for (int k = 0; k < 4; k++) {
            double layer = tp_bytes(&c3, B, T, t, K[k].sp, K[k].rc, K[k].prec) -
                           tp_bytes(&c2, B, T, t, K[k].sp, K[k].rc, K[k].prec);
            if (layer != K[k].want && ok) {
                snprintf(detail, sizeof detail, "t=%d %s: %.0f bytes per layer, closed form %.0f", t, K[k].what, layer,
                         K[k].want);
                ok = 0;
            }
        }
        /* Negative control: Korthikanti's 8·N·C(t-1)/t·4 (all-gather + reduce-scatter for each
         * all-reduce) without our backward re-gathers of the fp32 LayerNorm outputs. */
        double sp32 = tp_bytes(&c3, B, T, t, 1, RECOMPUTE_NONE, 0) - tp_bytes(&c2, B, T, t, 1, RECOMPUTE_NONE, 0);
        caught &= sp32 != mf + ln;
    }
    tu_check(ok, "tp bytes per layer == closed forms (8bsh(t-1)/t in fp32 elements; sp, bf16, full recompute; t=2,4,8)",
             "%s", ok ? "exact" : detail);
    tu_check(caught, "negative control: --sp fp32 against the form without the LayerNorm re-gathers differs",
             "%s", caught ? "differs for t=2,4,8" : "equal");

    /* Activation bytes per layer of one tp rank (layout_activations, what gpt_init allocates)
     * against docs/plan.md's closed forms in s, b, h, a, t (here N = sb rows): */
    int aok = 1, korth_caught = 1;
    char ad[256] = "";
    for (int i = 0; i < 3; i++) {
        int t = tps[i], a = 8;
        ModelConfig c = {2, a, C, 1000, 0, T, 0};
        Err e;
        model_config_validate(&c, &e);
        double N = (double)B * T, h = C, sbh = N * h, sb = N;
        struct { const char *what; int rc, bf16, sp; double want; } A[6] = {
            {"tp fp32", RECOMPUTE_NONE, 0, 0, sbh * (16 + 48.0 / t) + 16 * sb + 4 * sb * a / t},
            {"tp bf16", RECOMPUTE_NONE, 1, 0, sbh * (12 + 40.0 / t) + 16 * sb + 4 * sb * a / t},
            {"tp+sp fp32", RECOMPUTE_NONE, 0, 1, sbh / t * (64 + (16 + 4.0 * a) / h)},
            {"tp+sp bf16", RECOMPUTE_NONE, 1, 1, sbh / t * (52 + (16 + 4.0 * a) / h)},
            {"tp+sp selective fp32", RECOMPUTE_SELECTIVE, 0, 1, sbh / t * (40 + (16 + 4.0 * a) / h)},
            {"tp+sp full", RECOMPUTE_FULL, 0, 1, 4 * sbh / t},
        };
        for (int k = 0; k < 6; k++) {
            ActOptions ao = {B, T, 1, (Recompute)A[k].rc, A[k].bf16, t, A[k].sp, NULL};
            double got = 4.0 * layout_activations(&c, &ao).per_layer;
            if (got != A[k].want && aok) {
                snprintf(ad, sizeof ad, "t=%d %s: %.0f bytes, closed form %.0f", t, A[k].what, got, A[k].want);
                aok = 0;
            }
        }
        /* Negative control: Korthikanti's (sbh/t)(34 + 5as/h) in 4-byte elements, (sbh/t)(66 + 9as/h). */
        ActOptions ao32 = {B, T, 1, RECOMPUTE_NONE, 0, t, 1, NULL};
        double sp32 = 4.0 * layout_activations(&c, &ao32).per_layer;
        korth_caught &= sp32 != sbh / t * (66 + 9.0 * a * T / h);
    }
    tu_check(aok, "activation bytes per layer (layout_activations) == docs/plan.md's closed forms (t=2,4,8)", "%s",
             aok ? "exact: tp, tp+sp in fp32 and bf16, selective and full recompute" : ad);
    tu_check(korth_caught, "negative control: Korthikanti's (sbh/t)(66 + 9as/h) (4-byte elements) differs from ours",
             "%s", korth_caught ? "differs for t=2,4,8" : "equal");
}

/* ---------------------------------------------------------------- runs */

/* `scaletrain train` on np ranks with extra flags (env "VAR=1" or NULL for every rank); 0 on success. */
static int train(const char *name, int np, const char *extra, const char *env) {
    char cmd[4096], var[64] = "";
    if (env) snprintf(var, sizeof var, "-x %.*s", (int)strcspn(env, "="), env);
    snprintf(cmd, sizeof cmd,
             "%s timeout 120 %s --allow-run-as-root --oversubscribe -np %d -x OMP_NUM_THREADS=1 %s %s train --data "
             DIR "/train.bin " MODEL " --steps %d --val-every 0 --peak-gflops 100 --quiet --log " DIR "/%s.jsonl %s",
             env ? env : "", g_mpi, np, var, g_bin, STEPS, name, extra);
    char lg[512];
    snprintf(lg, sizeof lg, DIR "/%s.jsonl", name);
    remove(lg);
    return rc_run(DIR, name, cmd, NULL);
}

/* `scaletrain plan --json` of the run's model on dp × tp ranks of one node, with extra flags. */
static cJSON *plan_json(int dp, int tp, const char *extra) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s plan " MODEL " --vocab 97 --dp %d --tp %d --devices-per-node %d %s --json", g_bin, dp,
             tp, dp * tp, extra);
    return rc_command_json(cmd);
}

static const cJSON *get(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

/* The first record with event ev holding field, or NULL. */
static const cJSON *record(const cJSON *all, const char *ev, const char *field) {
    const cJSON *o;
    cJSON_ArrayForEach(o, all) {
        const char *e = cJSON_GetStringValue(get(o, "event"));
        if (e && !strcmp(e, ev) && get(o, field)) return o;
    }
    return NULL;
}

/* The plan's memory_bytes.by_category against the run's memory records (see the file header). */
static int memory_matches(const cJSON *plan, const cJSON *all, int world, char *detail, size_t cap) {
    static const char *const STATES[4] = {"parameters", "gradients", "master_weights", "optimizer_moments"};
    static const char *const RUN[2] = {"activations", "workspace"};
    const cJSON *pm = get(get(plan, "memory_bytes"), "by_category");
    const char *states = cJSON_GetStringValue(get(get(plan, "memory_bytes"), "states"));
    const cJSON *start = record(all, "memory", "measured_by_rank"), *step1 = record(all, "memory", "allocated_total_by_rank");
    const cJSON *by = get(start, "measured_by_rank"), *meas = get(step1, "measured"), *tot = get(step1, "allocated_total_by_rank");
    snprintf(detail, cap, "%s", !pm ? "plan has no by_category" : !states || strcmp(states, "trainer") ? "plan's states are not the trainer's"
                                : !by || !meas || !tot ? "no memory records" : "");
    if (detail[0]) return 0;
    size_t o = 0;
    int ok = 1;
    double planned = 0;
    for (int c = 0; c < 4; c++) {
        double p = cJSON_GetNumberValue(get(pm, STATES[c]));
        const cJSON *a = get(by, STATES[c]);
        int same = cJSON_GetArraySize(a) == world;
        for (int q = 0; same && q < world; q++) same = cJSON_GetArrayItem(a, q)->valuedouble == p;
        planned += p;
        if (!same) ok = 0, o += (size_t)snprintf(detail + o, o < cap ? cap - o : 0, "%s %.0f vs rank 0 %.0f; ", STATES[c], p,
                                                 cJSON_GetArraySize(a) ? cJSON_GetArrayItem(a, 0)->valuedouble : -1);
    }
    for (int c = 0; c < 2; c++) {
        const cJSON *pj = get(pm, RUN[c]);
        double p = cJSON_GetNumberValue(pj), m = cJSON_GetNumberValue(get(meas, RUN[c]));
        planned += p;
        if (!cJSON_IsNumber(pj)) ok = 0, o += (size_t)snprintf(detail + o, o < cap ? cap - o : 0, "%s not planned; ", RUN[c]);
        else if (p != m) ok = 0, o += (size_t)snprintf(detail + o, o < cap ? cap - o : 0, "%s %.0f vs %.0f; ", RUN[c], p, m);
    }
    /* Every rank's total: the planned categories plus the ones the plan does not model. */
    double other = 0;
    static const char *const OTHER[3] = {"communication", "checkpoint_staging", "data"};
    for (int c = 0; c < 3; c++) other += cJSON_GetNumberValue(get(meas, OTHER[c]));
    int tsame = cJSON_GetArraySize(tot) == world;
    for (int q = 0; tsame && q < world; q++) tsame = cJSON_GetArrayItem(tot, q)->valuedouble == planned + other;
    if (!tsame && planned == planned) /* (a category not planned was named above) */
        ok = 0, o += (size_t)snprintf(detail + o, o < cap ? cap - o : 0, "total %.0f + %.0f vs rank 0 %.0f; ", planned, other,
                                      cJSON_GetArraySize(tot) ? cJSON_GetArrayItem(tot, 0)->valuedouble : -1);
    if (ok) snprintf(detail, cap, "%.0f bytes planned per rank (activations %.0f, workspace %.0f)", planned,
                     cJSON_GetNumberValue(get(pm, "activations")), cJSON_GetNumberValue(get(pm, "workspace")));
    return ok;
}

/* Every step record's comm_bytes_by_kind against the plan's (steps >= 2) and want1 (step 1). */
static int comm_matches(const cJSON *plan, const double *want1, const cJSON *all, char *detail, size_t cap) {
    const cJSON *pk = get(plan, "comm_bytes_by_kind"), *o;
    snprintf(detail, cap, "%s", pk ? "" : "plan has no comm_bytes_by_kind");
    if (!pk) return 0;
    int nsteps = 0, ok = 1;
    cJSON_ArrayForEach(o, all) {
        const char *e = cJSON_GetStringValue(get(o, "event"));
        if (!e || strcmp(e, "step")) continue;
        int step = (int)cJSON_GetNumberValue(get(o, "step"));
        const cJSON *mk = get(o, "comm_bytes_by_kind");
        nsteps++;
        for (int k = 0; k < COMM_NKIND; k++) {
            const char *name = comm_kind_name((CommKind)k);
            double want = step == 1 ? want1[k] : cJSON_GetNumberValue(get(pk, name));
            const cJSON *m = get(mk, name);
            if (!cJSON_IsNumber(m) || m->valuedouble != want) {
                if (ok) snprintf(detail, cap, "step %d %s: measured %.0f, planned %.0f", step, name,
                                 cJSON_IsNumber(m) ? m->valuedouble : -1.0, want);
                ok = 0;
            }
        }
    }
    if (nsteps != STEPS) return snprintf(detail, cap, "%d step records, expected %d", nsteps, STEPS), 0;
    if (ok)
        snprintf(detail, cap, "%d steps x %d kinds; per step: tp all-reduce %.0f, tp all-gather %.0f, tp reduce-scatter "
                 "%.0f, dp %.0f + %.0f + %.0f, scalar %.0f bytes", STEPS, COMM_NKIND,
                 cJSON_GetNumberValue(get(pk, "tp all-reduce")), cJSON_GetNumberValue(get(pk, "tp all-gather")),
                 cJSON_GetNumberValue(get(pk, "tp reduce-scatter")), cJSON_GetNumberValue(get(pk, "all-reduce")),
                 cJSON_GetNumberValue(get(pk, "reduce-scatter")), cJSON_GetNumberValue(get(pk, "all-gather")),
                 cJSON_GetNumberValue(get(pk, "scalar collective")));
    return ok;
}

/* Every step record's tp_overlapped (the collectives the trainer overlapped with GEMMs, issue 28)
 * against the plan's communication.tp_overlapped_calls; 1 if all equal and non-zero. */
static int overlap_matches(const cJSON *plan, const cJSON *all, char *detail, size_t cap) {
    const cJSON *pc = get(get(plan, "communication"), "tp_overlapped_calls"), *o;
    double want = cJSON_IsNumber(pc) ? pc->valuedouble : -1;
    int n = 0, ok = want > 0;
    snprintf(detail, cap, "plan: %.0f overlapped calls per step", want);
    cJSON_ArrayForEach(o, all) {
        const char *e = cJSON_GetStringValue(get(o, "event"));
        if (!e || strcmp(e, "step")) continue;
        const cJSON *m = get(o, "tp_overlapped");
        n++;
        if (!cJSON_IsNumber(m) || m->valuedouble != want) {
            if (ok) snprintf(detail, cap, "step %d: tp_overlapped %.0f, planned %.0f", n, cJSON_IsNumber(m) ? m->valuedouble : -1,
                             want);
            ok = 0;
        }
    }
    return ok && n == STEPS;
}

typedef struct {
    const char *name, *flags; /* flags of both train and plan beyond MODEL, --dp and --tp */
    int dp, tp, sp, zero, rc, prec;
} Run;

static void runs(void) {
    rc_make_data(DIR);
    static const Run R[] = {
        {"tp2", "", 1, 2, 0, 0, RECOMPUTE_NONE, 0},
        {"tp2_sp", "--sp", 1, 2, 1, 0, RECOMPUTE_NONE, 0},
        {"dp2_tp2_zero1", "--zero 1", 2, 2, 0, 1, RECOMPUTE_NONE, 0},
        {"tp2_sp_bf16", "--sp --precision bf16", 1, 2, 1, 0, RECOMPUTE_NONE, 1},
        {"tp2_full", "--recompute full", 1, 2, 0, 0, RECOMPUTE_FULL, 0},
    };
    for (size_t i = 0; i < sizeof R / sizeof R[0]; i++) {
        const Run *r = &R[i];
        int world = r->dp * r->tp;
        char what[192], detail[640], lg[512], tflags[256];
        snprintf(tflags, sizeof tflags, "--dp %d --tp %d %s", r->dp, r->tp, r->flags);
        int rc = train(r->name, world, tflags, NULL);
        snprintf(lg, sizeof lg, DIR "/%s.jsonl", r->name);
        cJSON *all = rc == 0 ? tu_log_records(lg) : NULL;
        if (!all) {
            snprintf(what, sizeof what, "%s: train", r->name);
            tu_check(0, what, "exit %d, see " DIR "/%s.out", rc, r->name);
            continue;
        }
        cJSON *plan = plan_json(r->dp, r->tp, r->flags);
        /* The first step: the library's figure with the memory record's all-gathers. */
        ModelConfig cfg = {2, 4, 32, 97, 0, 32, 0};
        Err e;
        model_config_validate(&cfg, &e);
        PlanTrainerStep ts = {2, 32, 4, r->dp, r->tp, r->sp, r->zero, r->rc, r->prec, 1,
                              plan_noise_scale_on(r->dp, 1, 4, 0)};
        PlanCommKinds first;
        Status st = plan_trainer_comm(&cfg, &ts, 1e9, 1e-6, &first, &e);
        int mem_ok = memory_matches(plan, all, world, detail, sizeof detail);
        snprintf(what, sizeof what, "%s: plan --json by_category == every rank's allocation", r->name);
        tu_check(mem_ok, what, "%s", detail);
        int comm_ok = st == ST_OK && comm_matches(plan, first.bytes, all, detail, sizeof detail);
        snprintf(what, sizeof what, "%s: plan --json comm_bytes_by_kind == every step record's", r->name);
        tu_check(comm_ok, what, "%s", st == ST_OK ? detail : e.msg);
        snprintf(what, sizeof what, "%s: plan --json tp_overlapped_calls == every step record's tp_overlapped", r->name);
        tu_check(overlap_matches(plan, all, detail, sizeof detail), what, "%s", detail);
        /* Negative controls: the plan without --sp, or of tp 1 on the same world. */
        char wrong_flags[256];
        snprintf(wrong_flags, sizeof wrong_flags, "%s", r->flags);
        char *spf = strstr(wrong_flags, "--sp");
        if (spf) memcpy(spf, "    ", 4);
        cJSON *wrong = r->sp ? plan_json(r->dp, r->tp, wrong_flags) : plan_json(world, 1, r->flags);
        char d1[640], d2[640];
        int m_caught = !memory_matches(wrong, all, world, d1, sizeof d1);
        int c_caught = !comm_matches(wrong, first.bytes, all, d2, sizeof d2);
        char d3[256];
        int o_caught = !overlap_matches(wrong, all, d3, sizeof d3);
        snprintf(what, sizeof what, "negative control: %s against the plan %s", r->name,
                 r->sp ? "without --sp" : "of tp 1 on the same world");
        tu_check(m_caught && c_caught && o_caught, what, "memory: %s | comm: %s | overlap: %s", d1, d2, d3);
        if (i == 0) {
            /* Negative control of the measurement: the backward's tp all-reduces skipped. */
            int frc = train("tp2_fault", world, tflags, "ST_PAR_TEST_TP_FAULT=1");
            cJSON *fall = frc == 0 ? tu_log_records(DIR "/tp2_fault.jsonl") : NULL;
            int caught = fall && !comm_matches(plan, first.bytes, fall, detail, sizeof detail);
            tu_check(caught, "negative control: tp 2 with ST_PAR_TEST_TP_FAULT=1 (backward tp all-reduces skipped)",
                     "exit %d; %s", frc, fall ? detail : "no log");
            cJSON_Delete(fall);
        }
        cJSON_Delete(wrong), cJSON_Delete(plan), cJSON_Delete(all);
    }
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: test_tp_plan MPIEXEC SCALETRAIN [formula|runs]\n");
        return 2;
    }
    g_mpi = argv[1], g_bin = argv[2];
    const char *what = argc > 3 ? argv[3] : "all";
    if (!strcmp(what, "formula") || !strcmp(what, "all")) formula();
    if (!strcmp(what, "runs") || !strcmp(what, "all")) runs();
    return tu_exit();
}
