/* test_pp_plan.c — `plan` against what the trainer allocates and sends per pipeline rank (issue 14,
 * "Accounting").
 *
 * Usage: test_pp_plan MPIEXEC SCALETRAIN [formula|runs]
 *
 *   formula  (no MPI) plan_trainer_pp's per-rank figures against closed forms written by hand from
 *            C, L, V, T (docs/plan.md "Pipeline ranks"), for 1f1b, gpipe, interleaved, dp 2 at ZeRO 1,
 *            tp 2 with --sp, bf16, and gpt2-124m (the worked example). Per rank r of P, with nb its
 *            blocks (the --pp-layers given), N = B·T, Nl = N (N/t under --sp), Vl = V padded to 64·t / t:
 *              layout floats  [r holds block 0](Vl·C + maxT·C) + [r holds block L−1](2C + [not block 0] Vl·C)
 *                             + nb·(12C²/t + 7C/t + 6C)          (C a multiple of 16: no padding)
 *              states         fp32: params 4F, grads 4F, moments 4·2·F (ZeRO 1: /dp); bf16: 2F, 4F, 4F, 8F
 *              slots          1f1b min(P − r, m); gpipe m; interleaved min(2(P − r − 1) + (v − 1)P + 1, m·v)
 *              activations    slots · (4·Nl·C + nb_chunk·A + [head](4(Nl·C + 2Nl + N) + [slots > 1] 4·N·C)),
 *                             A = one block's bytes: N·C(16 + 48/t) + 16N + 4N·a/t (fp32), N·C(12 + 40/t) + ...
 *                             (bf16), (N·C/t)·64 + (N/t)(16 + 4a) (--sp, fp32)
 *              workspace      the whole model's (layout_run_bytes, pp = 1) + 4·Nl·C (the received output
 *                             gradient; sent gradients use the runtime's MEM_COMM pool)
 *              comm           4·min(Vl·C, 2^20) on ranks 0 and P − 1 (the tied buffer), else 0; at ZeRO ≥ 1
 *                             and dp > 1 + 4·8·min(2^20/dp, the rank's largest segment/dp) (the ring's
 *                             receive slots)
 *              p2p per step   4·Nl·C·m·(2v − [r = 0] − [r = P − 1]) + [r ∈ {0, P−1}] 4·Vl·C
 *            exact (integers); plan_compute's memory per device == the worst rank's. Negative controls:
 *            the textbook forms (every stage min(P, m) slots; no head copy of wte; 2m messages on every
 *            rank) must differ from the plan.
 *   runs     `scaletrain train` under mpirun, 3 steps of a tiny model (L=4, 2 heads, C=32, V=97, B=2,
 *            T=32): pp 4 1f1b m 8, pp 4 gpipe m 8, pp 2 interleaved v 2 m 4, pp 2 × dp 2 ZeRO 1, pp 2 ×
 *            tp 2 --sp, pp 2 bf16 --pp-layers 3,1. Oracles: the trainer's own counters.
 *              states     every rank's parameter, gradient, master and moment bytes (the memory
 *                         record's measured_by_rank) == plan --json pipeline.per_rank[its pp rank];
 *              rank 0     its activations, workspace and communication (tied buffer) bytes == per_rank[0];
 *              totals     every rank's allocated total after the first step (allocated_total_by_rank)
 *                         − per_rank's total − the batch buffers (8·m·B·T) == n gradient send buffers of
 *                         4·Nl·C bytes, 1 <= n <= its gradient messages if it sends any, else n = 0
 *                         (pp.c's pool grows with the sends in flight: the one part not plannable);
 *              pp send    every step record's comm_bytes_by_kind["pp send"] (rank 0's) == per_rank[0]'s
 *                         p2p bytes per step;
 *              slots      pp 4 1f1b m 8: stage 0 holds exactly P = 4 slots (measured activation bytes ==
 *                         the closed form with 4 slots; != with 3 or 8: negative control), gpipe m 8: 8.
 *            Negative controls: the run against another plan (gpipe for 1f1b and back, the default split
 *            for --pp-layers 3,1, no --sp for --sp) must fail; a run with the test-only fault
 *            ST_PAR_TEST_PP_FAULT=1 (the tied wte exchange skipped) must fail the pp send check.
 * The plan is told the ranks share one node (--devices-per-node = world) and --threads 1, as the runs. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"
#include "model/config.h"
#include "model/layout.h"
#include "plan/plan.h"
#include "runcmp.h"
#include "testutil.h"

#define DIR ST_BINARY_DIR "/test_pp_plan"
#define STEPS 3
#define MODEL "--layers 4 --heads 2 --channels 32 --max-seq-len 32 --seq-len 32 --micro-batch 2 --threads 1"

static const char *g_mpi, *g_bin;

/* ---------------------------------------------------------------- closed forms */

typedef struct {
    int L, a, C, V, maxT, B, T;
} Shape;

/* A case: the shape, the grid and the pipeline; layers are the blocks per virtual stage. */
typedef struct {
    const char *name;
    Shape s;
    int P, v, m, dp, tp, sp, zero, prec;
    const char *sched, *layers;
} Case;

/* Blocks per virtual stage from "2,2,2,2" (n of them). */
static void parse_layers(const char *text, int *n, int cnt[]) {
    *n = 0;
    for (const char *p = text; *p;) {
        cnt[(*n)++] = atoi(p);
        while (*p && *p != ',') p++;
        if (*p) p++;
    }
}

static long long round_up(long long x, long long m) { return (x + m - 1) / m * m; }

/* Rank r's closed forms (see the file header); slots_override > 0 replaces the schedule's count, head_copy
 * 0 leaves out the head's wte copy (a negative control), msgs_all 1 counts 2m messages on every rank. */
typedef struct {
    double floats, states[4], act, tied, p2p;
    int slots, blocks;
} Want;

static Want closed_form(const Case *k, int r, int slots_override, int head_copy, int msgs_all) {
    Want w;
    memset(&w, 0, sizeof w);
    const Shape *s = &k->s;
    int S = k->P * k->v, cnt[64], n;
    parse_layers(k->layers, &n, cnt);
    int start[65];
    start[0] = 0;
    for (int i = 0; i < n; i++) start[i + 1] = start[i] + cnt[i];
    double C = s->C, t = k->tp, N = (double)s->B * s->T, Nl = k->sp ? N / t : N;
    double Vl = (double)round_up(s->V, 64 * k->tp) / k->tp;
    int embed = 0, head = 0, maxchunk = 0;
    for (int c = 0; c < k->v; c++) {
        int vs = c * k->P + r;
        w.blocks += cnt[vs];
        if (cnt[vs] > maxchunk) maxchunk = cnt[vs];
        embed |= vs == 0, head |= vs == S - 1;
    }
    double block = 12 * C * C / t + 7 * C / t + 6 * C;
    w.floats = w.blocks * block + (embed ? Vl * C + s->maxT * C : 0) + (head ? 2 * C + (!embed && head_copy ? Vl * C : 0) : 0);
    double F = w.floats;
    if (k->prec == 0) w.states[0] = 4 * F, w.states[1] = 4 * F, w.states[2] = 0, w.states[3] = 8 * F / (k->zero ? k->dp : 1);
    else w.states[0] = 2 * F, w.states[1] = 4 * F, w.states[2] = 4 * F, w.states[3] = 8 * F / (k->zero ? k->dp : 1);
    /* Slots: the schedules' peaks written out (schedule.h). */
    if (!strcmp(k->sched, "gpipe")) w.slots = k->m;
    else if (!strcmp(k->sched, "interleaved")) {
        int warm = 2 * (k->P - r - 1) + (k->v - 1) * k->P + 1;
        w.slots = warm < k->m * k->v ? warm : k->m * k->v;
    } else w.slots = k->P - r < k->m ? k->P - r : k->m;
    if (slots_override > 0) w.slots = slots_override;
    double a = s->a, A;
    if (k->sp) A = N * C / t * 64 + N / t * (16 + 4 * a);
    else if (k->prec == 1) A = N * C * (12 + 40 / t) + 16 * N + 4 * N * a / t;
    else A = N * C * (16 + 48 / t) + 16 * N + 4 * N * a / t;
    double slot = 4 * Nl * C + maxchunk * A + (head ? 4 * (Nl * C + 2 * Nl + N) + (w.slots > 1 ? 4 * N * C : 0) : 0);
    w.act = w.slots * slot;
    double wte = Vl * C;
    w.tied = embed != head ? 4 * (wte < 1048576.0 ? wte : 1048576.0) : 0;
    /* ZeRO 1-3 at dp > 1: the ring reduce-scatter's 8 receive slots (zero.c), each the largest
     * piece's part of a rank, min(1 Mi floats / dp, segment / dp) over this rank's segments: the
     * embedding's (wte and wpe), the head copy of wte on a last stage without the embedding, a
     * block (the last one with the final LayerNorm). */
    if (k->zero >= 1 && k->dp > 1) {
        double seg = w.blocks ? block + (head ? 2 * C : 0) : 0;
        if (embed && Vl * C + s->maxT * C > seg) seg = Vl * C + s->maxT * C;
        if (!embed && head && head_copy && wte > seg) seg = wte;
        double q = floor(seg / k->dp), cap = floor(1048576.0 / k->dp);
        w.tied += 4 * 8 * (q < cap ? q : cap);
    }
    int msgs = msgs_all ? 2 * k->m * k->v : k->m * (2 * k->v - (r == 0) - (r == k->P - 1));
    w.p2p = 4 * Nl * C * msgs + (embed != head ? 4 * wte : 0);
    return w;
}

static ModelConfig config_of(const Shape *s) {
    ModelConfig c = {s->L, s->a, s->C, s->V, 0, s->maxT, 0};
    Err e;
    model_config_validate(&c, &e);
    return c;
}

static int plan_case(const Case *k, PlanPpRank out[], Err *e) {
    ModelConfig cfg = config_of(&k->s);
    PlanTrainerPipe p = {k->s.B, k->s.T, k->m, k->dp, k->tp, k->sp, k->zero, k->P, k->v, k->sched, k->layers,
                         RECOMPUTE_NONE, k->prec, 2, 1};
    return plan_trainer_pp(&cfg, &p, out, e) == ST_OK;
}

/* The whole model's workspace bytes (one process, pp = 1) of the case. */
static double whole_workspace(const Case *k) {
    ModelConfig cfg = config_of(&k->s);
    size_t b[MEM_NCAT] = {0};
    ActOptions ao = {k->s.B, k->s.T, 1, RECOMPUTE_NONE, k->prec, k->tp, k->sp, NULL};
    layout_run_bytes(&cfg, &ao, b);
    return (double)b[MEM_WORKSPACE];
}

static void formula(void) {
    static const Case K[] = {
        {"pp 4 1f1b m 8", {8, 4, 64, 1000, 64, 2, 64}, 4, 1, 8, 1, 1, 0, 0, 0, "1f1b", "2,2,2,2"},
        {"pp 4 gpipe m 8", {8, 4, 64, 1000, 64, 2, 64}, 4, 1, 8, 1, 1, 0, 0, 0, "gpipe", "1,2,2,3"},
        {"pp 2 interleaved v 2 m 4", {8, 4, 64, 1000, 64, 2, 64}, 2, 2, 4, 1, 1, 0, 0, 0, "interleaved", "2,2,1,3"},
        {"pp 4 interleaved v 2 m 8", {8, 4, 64, 1000, 64, 2, 64}, 4, 2, 8, 1, 1, 0, 0, 0, "interleaved", "1,1,1,1,1,1,1,1"},
        {"pp 2 x dp 2 ZeRO 1 m 3", {8, 4, 64, 1000, 64, 2, 64}, 2, 1, 3, 2, 1, 0, 1, 0, "1f1b", "3,5"},
        {"pp 2 x tp 2 --sp m 4", {8, 4, 64, 1000, 64, 2, 64}, 2, 1, 4, 1, 2, 1, 0, 0, "1f1b", "4,4"},
        {"pp 2 bf16 m 4", {8, 4, 64, 1000, 64, 2, 64}, 2, 1, 4, 1, 1, 0, 0, 1, "1f1b", "5,3"},
        {"gpt2-124m pp 4 1f1b m 8", {12, 12, 768, 50257, 1024, 8, 1024}, 4, 1, 8, 1, 1, 0, 0, 0, "1f1b", "3,4,4,1"},
    };
    int ok = 1, nranks = 0, nb_caught = 1, head_caught = 1, msg_caught = 1, worst_ok = 1;
    char detail[512] = "";
    for (size_t i = 0; i < sizeof K / sizeof K[0]; i++) {
        const Case *k = &K[i];
        PlanPpRank out[PLAN_MAX_PP];
        Err e;
        if (!plan_case(k, out, &e)) {
            if (ok) snprintf(detail, sizeof detail, "%s: plan_trainer_pp refused: %.300s", k->name, e.msg);
            ok = 0;
            continue;
        }
        double ws = whole_workspace(k), Nl = (double)k->s.B * k->s.T / (k->sp ? k->tp : 1);
        for (int r = 0; r < k->P; r++, nranks++) {
            Want w = closed_form(k, r, 0, 1, 0);
            const PlanPpRank *o = &out[r];
            static const int cats[4] = {MEM_PARAMS, MEM_GRADS, MEM_MASTER, MEM_MOMENTS};
            int same = o->layout_floats == (long long)w.floats && o->slots == w.slots && o->blocks == w.blocks &&
                       o->bytes[MEM_ACTIVATIONS] == w.act && o->bytes[MEM_WORKSPACE] == ws + 4 * Nl * k->s.C &&
                       o->bytes[MEM_COMM] == w.tied && o->p2p == w.p2p;
            for (int c = 0; c < 4; c++) same = same && o->bytes[cats[c]] == w.states[c];
            if (!same && ok)
                snprintf(detail, sizeof detail, "%s rank %d: floats %lld/%.0f, slots %d/%d, activations %.0f/%.0f, "
                         "workspace %.0f/%.0f, tied %.0f/%.0f, p2p %.0f/%.0f, moments %.0f/%.0f (plan/closed form)",
                         k->name, r, o->layout_floats, w.floats, o->slots, w.slots, o->bytes[MEM_ACTIVATIONS], w.act,
                         o->bytes[MEM_WORKSPACE], ws + 4 * Nl * k->s.C, o->bytes[MEM_COMM], w.tied, o->p2p, w.p2p,
                         o->bytes[MEM_MOMENTS], w.states[3]);
            ok &= same;
            /* Negative controls: the textbook forms. */
            if (i == 0 && r > 0) nb_caught &= closed_form(k, r, k->P < k->m ? k->P : k->m, 1, 0).act != o->bytes[MEM_ACTIVATIONS];
            if (r == k->P - 1) head_caught &= (long long)closed_form(k, r, 0, 0, 0).floats != o->layout_floats;
            if (r == 0) msg_caught &= closed_form(k, r, 0, 1, 1).p2p != o->p2p;
        }
        /* plan_compute: the memory per device is the worst rank's. */
        PlanInput in = plan_default_input();
        ModelConfig cfg = config_of(&k->s);
        plan_model_from_config(&in.model, &cfg);
        in.micro_batch = k->s.B, in.seq_len = k->s.T, in.grad_accum = k->m, in.threads = 1;
        in.dp = k->dp, in.tp = k->tp, in.sp = k->sp, in.pp = k->P, in.zero = k->zero, in.interleave = k->v;
        snprintf(in.pp_schedule, sizeof in.pp_schedule, "%s", k->sched);
        snprintf(in.pp_layers, sizeof in.pp_layers, "%s", k->layers);
        plan_precision_trainer(&in.prec, k->prec ? "bf16" : "fp32", &e);
        PlanResult *res = calloc(1, sizeof *res);
        int wk = res && plan_compute(&in, res, &e) == ST_OK && res->pp_exact;
        double mx = 0;
        for (int r = 0; wk && r < k->P; r++) mx = out[r].total > mx ? out[r].total : mx;
        wk = wk && res->mem.total == mx && res->mem.activations == out[res->pp_worst].bytes[MEM_ACTIVATIONS] &&
             res->mem.comm == out[res->pp_worst].bytes[MEM_COMM];
        if (!wk && worst_ok)
            snprintf(detail + strlen(detail), sizeof detail - strlen(detail), " [%s: plan_compute total %.0f, worst rank %.0f%s]",
                     k->name, res ? res->mem.total : -1, mx, res && !res->pp_exact ? res->pp_note : "");
        worst_ok &= wk;
        free(res);
    }
    tu_check(ok, "per-rank plan (plan_trainer_pp) == closed forms: layout floats, states, slots, activations, "
             "workspace, tied buffer, p2p bytes", "%s", ok ? "exact on every rank of 8 configurations" : detail);
    if (ok) printf("  (%d ranks: 1f1b, gpipe, interleaved v 2 at pp 2 and 4, dp 2 ZeRO 1, tp 2 --sp, bf16, gpt2-124m)\n", nranks);
    tu_check(worst_ok, "plan_compute: memory per device == the worst rank's total", "%s", worst_ok ? "every case" : detail);
    tu_check(nb_caught && head_caught && msg_caught,
             "negative controls: textbook forms (min(P, m) slots on every stage; no head copy of wte; 2m messages on "
             "every rank) differ from the plan",
             "slots %s, head copy %s, messages %s", nb_caught ? "differ" : "EQUAL", head_caught ? "differs" : "EQUAL",
             msg_caught ? "differ" : "EQUAL");
}

/* The step's pipelined compute (docs/plan.md "Pipeline time"): a head-heavy model (config B's
 * shape: L 6, C 384, V 50257, T 256, B 8) at pp 2, m 4, blocks 5,1. Closed forms: a stage's FLOPs
 * per token nb·(72C² + 12CT) + [last] 6VC; rank r's matmul time W_mat = flops_r·B·T·m / rate, its
 * elementwise time proportional to its blocks, rank 1's plus the head's softmax passes S = 8 bytes
 * per logit × V·B·T·m / mem_bw (layout_head_softmax_bytes, fp32). Op times: rank 0 u_0 = W_0/(3m),
 * F = u_0, B = 2u_0 (zb-h1: F = B = W = u_0); rank 1 runs the head and loss fused in its forward
 * (their gradients too), so with H = 6VC·B·T·m / rate its blocks' u_1 = (W_1 − H − S)/(3m),
 * F_1 = u_1 + (H + S)/m, B_1 = 2u_1
 * (zb-h1: B_1 = W_1op = u_1). Rank 1, the slower, never waits after its first input:
 *   1f1b   u_0 + m(F_1 + B_1) + 2u_0 = W_1 + W_0/m;
 *   gpipe  rank 1's forwards, then its light backwards, and rank 0's backwards (2u_0 each, each
 *          after rank 1's of that micro-batch): u_0 + m·F_1 + B_1 + 2u_0 + (m − 1)·max(2u_0, B_1);
 *   zb-h1  rank 1 ends on its deferred W's (…B3 W2 W3), rank 0 on B3 W3 after rank 1's B3:
 *          u_0 + m(F_1 + 2u_1) + max(0, 2u_0 − 2u_1).
 * The plan's matmul + elementwise + bubble must equal the makespan. Negative control: the mean
 * stage plus the textbook bubble, (ΣW/2)(1 + 1/m), is more than 10% short. */
static void step_time(void) {
    Shape sh = {6, 6, 384, 50257, 256, 8, 256};
    ModelConfig cfg = config_of(&sh);
    const char *scheds[3] = {"1f1b", "gpipe", "zb-h1"};
    int m = 4, ok = 1, caught = 1;
    char detail[600] = "";
    double C = sh.C, T = sh.T, flops[2] = {5 * (72 * C * C + 12 * C * T), 1 * (72 * C * C + 12 * C * T) + 6.0 * sh.V * C};
    for (int i = 0; i < 3; i++) {
        PlanInput in = plan_default_input();
        plan_model_from_config(&in.model, &cfg);
        in.micro_batch = sh.B, in.seq_len = sh.T, in.grad_accum = m, in.threads = 1, in.pp = 2;
        snprintf(in.pp_schedule, sizeof in.pp_schedule, "%s", scheds[i]);
        snprintf(in.pp_layers, sizeof in.pp_layers, "5,1");
        Err e;
        PlanResult *r = calloc(1, sizeof *r);
        if (!r || plan_compute(&in, r, &e) != ST_OK || !r->pp_exact) {
            snprintf(detail, sizeof detail, "%s: plan_compute failed or no per-rank figures: %s", scheds[i],
                     r ? r->pp_note : "out of memory");
            ok = 0, free(r);
            break;
        }
        double rate = plan_matmul_rate(&in.hw, in.prec.compute), W[2], mat[2];
        for (int q = 0; q < 2; q++) W[q] = r->pp_rank[q].t_compute, mat[q] = flops[q] * sh.B * T * m / rate;
        double S = 8.0 * sh.V * sh.B * T * m / in.hw.mem_bw, e0 = (W[0] - mat[0]) / 5, e1 = W[1] - mat[1] - S;
        double H = 6.0 * sh.V * C * sh.B * T * m / rate, u0 = W[0] / (3.0 * m), u1 = (W[1] - H - S) / (3.0 * m),
               F1 = u1 + (H + S) / m;
        double make = i == 0   ? W[1] + W[0] / m
                      : i == 1 ? u0 + m * F1 + 2 * u1 + 2 * u0 + (m - 1) * fmax(2 * u0, 2 * u1)
                               : u0 + m * (F1 + 2 * u1) + fmax(0.0, 2 * u0 - 2 * u1);
        double got = r->compute.t_matmul + r->compute.t_elementwise + r->compute.t_bubble;
        double old = (W[0] + W[1]) / 2 * (1.0 + 1.0 / m);
        int good = fabs(r->pp_rank[0].flops - flops[0]) <= 1e-9 * flops[0] &&
                   fabs(r->pp_rank[1].flops - flops[1]) <= 1e-9 * flops[1] && fabs(e0 - e1) <= 1e-9 * e1 && e1 > 0 &&
                   fabs(r->compute.t_head - S) <= 1e-12 * S &&
                   fabs(r->compute.t_matmul - mat[1]) <= 1e-9 * mat[1] && fabs(got - make) <= 1e-9 * make &&
                   3 * u0 <= F1 + 2 * u1 && u0 <= F1;
        snprintf(detail + strlen(detail), sizeof detail - strlen(detail),
                 "%s%s: plan %.4f s, closed form %.4f s (W %.4f, %.4f; elementwise per block %.3g/%.3g s), "
                 "mean stage + bubble %.4f s", i ? "; " : "", scheds[i], got, make, W[0], W[1], e0, e1, old);
        ok &= good;
        caught &= old < 0.9 * make;
        free(r);
    }
    tu_check(ok, "plan step of a pipeline == its schedule run with each rank's work (pp 2, blocks 5,1 + head, m 4)",
             "%s", detail);
    tu_check(caught, "negative control: the mean stage plus the textbook bubble is > 10% short of the closed form",
             "%s", caught ? "every schedule" : detail);
}

/* ---------------------------------------------------------------- runs */

static const cJSON *get(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }
static double num(const cJSON *o, const char *k) {
    const cJSON *x = get(o, k);
    return cJSON_IsNumber(x) ? x->valuedouble : -1.0;
}

/* `scaletrain train` on np ranks (env "VAR=1" or NULL); 0 on success. */
static int train(const char *name, int np, int k, const char *flags, const char *env) {
    char cmd[4096], var[64] = "";
    if (env) snprintf(var, sizeof var, "-x %.*s", (int)strcspn(env, "="), env);
    snprintf(cmd, sizeof cmd,
             "%s timeout 120 %s --allow-run-as-root --oversubscribe -np %d -x OMP_NUM_THREADS=1 %s %s train --data "
             DIR "/train.bin " MODEL " --grad-accum %d --steps %d --lr 2e-3 --val-every 0 --peak-gflops 100 --quiet "
             "--log " DIR "/%s.jsonl %s",
             env ? env : "", g_mpi, np, var, g_bin, k, STEPS, name, flags);
    char lg[512];
    snprintf(lg, sizeof lg, DIR "/%s.jsonl", name);
    remove(lg);
    double secs = 0;
    int rc = rc_run(DIR, name, cmd, &secs);
    printf("%s: exit %d, %.1f s\n", name, rc, secs);
    return rc;
}

/* `scaletrain plan --json` of the run's model on np ranks of one node. */
static cJSON *plan_json(int np, int k, const char *flags) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s plan " MODEL " --vocab 97 --grad-accum %d --devices-per-node %d %s --json", g_bin, k, np,
             flags);
    return rc_command_json(cmd);
}

/* The first record with event ev holding field, or NULL. */
static const cJSON *record(const cJSON *all, const char *ev, const char *field) {
    const cJSON *o;
    cJSON_ArrayForEach(o, all) {
        const char *e = cJSON_GetStringValue(get(o, "event"));
        if (e && !strcmp(e, ev) && get(o, field)) return o;
    }
    return NULL;
}

typedef struct {
    const char *name;
    int np, k, P, dp, tp, sp;
    const char *flags;       /* train and plan */
    const char *wrong;       /* plan flags of the negative control */
} Run;

static const char *const STATES[4] = {"parameters", "gradients", "master_weights", "optimizer_moments"};

/* The four checks of a run against a plan (see the file header); ok[4] and one detail line each. */
static void compare(const Run *R, const cJSON *plan, const cJSON *all, int ok[4], char det[4][400]) {
    const cJSON *pr = get(get(plan, "pipeline"), "per_rank");
    const cJSON *start = record(all, "memory", "measured_by_rank"), *step1 = record(all, "memory", "allocated_total_by_rank");
    for (int i = 0; i < 4; i++) ok[i] = 0, snprintf(det[i], 400, "%s", !cJSON_IsArray(pr) ? "plan has no per_rank" : "no memory records");
    if (!cJSON_IsArray(pr) || cJSON_GetArraySize(pr) != R->P || !start || !step1) return;
    int world = R->np, group = R->dp * R->tp;
    /* states of every rank */
    ok[0] = 1, det[0][0] = 0;
    const cJSON *by = get(start, "measured_by_rank");
    for (int q = 0; q < world; q++) {
        const cJSON *mb = get(cJSON_GetArrayItem(pr, q / group), "memory_bytes");
        for (int c = 0; c < 4; c++) {
            double m = cJSON_GetArrayItem(get(by, STATES[c]), q) ? cJSON_GetArrayItem(get(by, STATES[c]), q)->valuedouble : -1;
            if (m != num(mb, STATES[c]) && ok[0])
                snprintf(det[0], 400, "rank %d (pp rank %d) %s: measured %.0f, planned %.0f", q, q / group, STATES[c], m,
                         num(mb, STATES[c])), ok[0] = 0;
        }
    }
    if (ok[0]) {
        size_t o = 0;
        for (int p = 0; p < R->P; p++)
            o += (size_t)snprintf(det[0] + o, o < 400 ? 400 - o : 0, "%spp rank %d %.0f", p ? ", " : "bytes of params+grads+master+moments: ", p,
                                  num(get(cJSON_GetArrayItem(pr, p), "memory_bytes"), "parameters") +
                                      num(get(cJSON_GetArrayItem(pr, p), "memory_bytes"), "gradients") +
                                      num(get(cJSON_GetArrayItem(pr, p), "memory_bytes"), "master_weights") +
                                      num(get(cJSON_GetArrayItem(pr, p), "memory_bytes"), "optimizer_moments"));
    }
    /* rank 0's activations, workspace and tied buffer */
    const cJSON *m0 = get(start, "measured"), *p0 = cJSON_GetArrayItem(pr, 0), *pm0 = get(p0, "memory_bytes");
    static const char *const RUN[3] = {"activations", "workspace", "communication"};
    ok[1] = 1;
    for (int c = 0; c < 3; c++)
        if (num(m0, RUN[c]) != num(pm0, RUN[c]) && ok[1])
            snprintf(det[1], 400, "%s: measured %.0f, planned %.0f (%d slots)", RUN[c], num(m0, RUN[c]), num(pm0, RUN[c]),
                     (int)num(p0, "activation_slots")), ok[1] = 0;
    if (ok[1])
        snprintf(det[1], 400, "activations %.0f (%d slots), workspace %.0f, tied buffer %.0f", num(m0, "activations"),
                 (int)num(p0, "activation_slots"), num(m0, "workspace"), num(m0, "communication"));
    /* every rank's total after the first step */
    const cJSON *tot = get(step1, "allocated_total_by_rank");
    double data = 8.0 * R->k * 2 * 32, gbuf = 4.0 * (R->sp ? 64 / R->tp : 64) * 32;
    ok[2] = num(m0, "data") == data && cJSON_GetArraySize(tot) == world;
    snprintf(det[2], 400, "rank 0's data %.0f, expected 8·m·B·T = %.0f; %d totals", num(m0, "data"), data, cJSON_GetArraySize(tot));
    size_t o = 0;
    for (int q = 0; ok[2] && q < world; q++) {
        const cJSON *pq = cJSON_GetArrayItem(pr, q / group);
        double rest = cJSON_GetArrayItem(tot, q)->valuedouble - num(get(pq, "memory_bytes"), "total") - data;
        double n = rest / gbuf, sends = num(get(pq, "p2p_messages_per_step"), "gradients");
        int good = rest >= 0 && n == (double)(long)n && (sends > 0 ? n >= 1 && n <= sends : n == 0);
        if (!good) {
            snprintf(det[2], 400, "rank %d: allocated %.0f - planned %.0f - data %.0f = %.0f, not a count of %.0f-byte "
                     "gradient buffers within [%d, %.0f]", q, cJSON_GetArrayItem(tot, q)->valuedouble,
                     num(get(pq, "memory_bytes"), "total"), data, rest, gbuf, sends > 0, sends);
            ok[2] = 0;
        } else {
            o += (size_t)snprintf(det[2] + o, o < 400 ? 400 - o : 0, "%s%.0f", q ? " " : "gradient buffers per rank: ", n);
        }
    }
    /* pp send of rank 0, every step */
    const cJSON *r;
    int nsteps = 0;
    double want = num(get(p0, "p2p_bytes_per_step"), "total");
    ok[3] = 1;
    cJSON_ArrayForEach(r, all) {
        const char *e = cJSON_GetStringValue(get(r, "event"));
        if (!e || strcmp(e, "step")) continue;
        nsteps++;
        double got = num(get(r, "comm_bytes_by_kind"), "pp send");
        if (got != want && ok[3])
            snprintf(det[3], 400, "step %d: measured %.0f, planned %.0f", (int)num(r, "step"), got, want), ok[3] = 0;
    }
    if (nsteps != STEPS) snprintf(det[3], 400, "%d step records, expected %d", nsteps, STEPS), ok[3] = 0;
    if (ok[3])
        snprintf(det[3], 400, "%.0f bytes per step on each of %d steps (activations %.0f, gradients %.0f, tied wte %.0f)", want,
                 nsteps, num(get(p0, "p2p_bytes_per_step"), "activations"), num(get(p0, "p2p_bytes_per_step"), "gradients"),
                 num(get(p0, "p2p_bytes_per_step"), "tied_wte"));
}

/* Rank 0's activation bytes with `slots` slots of this tiny model at pp P (one block per stage, fp32). */
static double rank0_acts(int P, int slots) {
    Case k = {"", {4, 2, 32, 97, 32, 2, 32}, P, 1, 8, 1, 1, 0, 0, 0, "1f1b", P == 4 ? "1,1,1,1" : "2,2"};
    return closed_form(&k, 0, slots, 1, 0).act;
}

static void runs(void) {
    rc_make_data(DIR);
    static const Run R[] = {
        {"pp4_1f1b", 4, 8, 4, 1, 1, 0, "--pp 4 --pp-schedule 1f1b", "--pp 4 --pp-schedule gpipe"},
        {"pp4_gpipe", 4, 8, 4, 1, 1, 0, "--pp 4 --pp-schedule gpipe", "--pp 4 --pp-schedule 1f1b"},
        /* --interleave without --pp-schedule: train and plan apply one rule (sched_default_type), interleaved. */
        {"pp2_interleaved", 2, 4, 2, 1, 1, 0, "--pp 2 --interleave 2", "--pp 2 --pp-schedule 1f1b"},
        {"pp2_dp2_zero1", 4, 4, 2, 2, 1, 0, "--pp 2 --dp 2 --zero 1", "--pp 2 --dp 2 --zero 0"},
        {"pp2_tp2_sp", 4, 4, 2, 1, 2, 1, "--pp 2 --tp 2 --sp", "--pp 2 --tp 2"},
        {"pp2_bf16_layers31", 2, 4, 2, 1, 1, 0, "--pp 2 --precision bf16 --pp-layers 3,1", "--pp 2 --precision bf16"},
    };
    static const char *const WHAT[4] = {"every rank's params, grads, master, moments == plan per_rank",
                                        "rank 0's activations, workspace, tied buffer == plan per_rank[0]",
                                        "every rank's allocated total == plan per_rank + batch + gradient send buffers",
                                        "step records' pp send (rank 0) == plan per_rank[0] p2p bytes"};
    for (size_t i = 0; i < sizeof R / sizeof R[0]; i++) {
        const Run *r = &R[i];
        char what[256], lg[512];
        int rc = train(r->name, r->np, r->k, r->flags, NULL);
        snprintf(lg, sizeof lg, DIR "/%s.jsonl", r->name);
        cJSON *all = rc == 0 ? tu_log_records(lg) : NULL;
        cJSON *plan = plan_json(r->np, r->k, r->flags), *wrong = plan_json(r->np, r->k, r->wrong);
        if (!all || !plan) {
            snprintf(what, sizeof what, "%s: train and plan", r->name);
            tu_check(0, what, "exit %d, plan %s; see " DIR "/%s.out", rc, plan ? "ok" : "not JSON", r->name);
            cJSON_Delete(all), cJSON_Delete(plan), cJSON_Delete(wrong);
            continue;
        }
        int ok[4], bad[4];
        char det[4][400], wdet[4][400];
        compare(r, plan, all, ok, det);
        for (int c = 0; c < 4; c++) {
            snprintf(what, sizeof what, "%s: %s", r->name, WHAT[c]);
            tu_check(ok[c], what, "%s", det[c]);
        }
        /* Negative control: the same run against another plan. */
        compare(r, wrong, all, bad, wdet);
        int caught = !bad[0] || !bad[1] || !bad[2] || !bad[3];
        snprintf(what, sizeof what, "negative control: %s against the plan of %s fails", r->name, r->wrong);
        tu_check(caught, what, "%s", !bad[0] ? wdet[0] : !bad[1] ? wdet[1] : !bad[3] ? wdet[3] : !bad[2] ? wdet[2] : "every check passed");
        if (i <= 1) {
            /* Stage 0's slots: P for 1f1b, m for gpipe, against closed forms with other counts. */
            const cJSON *m0 = get(record(all, "memory", "measured_by_rank"), "measured");
            double got = num(m0, "activations");
            int want = i == 0 ? 4 : 8, slots0 = (int)num(cJSON_GetArrayItem(get(get(plan, "pipeline"), "per_rank"), 0),
                                                          "activation_slots");
            snprintf(what, sizeof what, "%s: stage 0 holds exactly %d activation slots (measured bytes == closed form)",
                     r->name, want);
            tu_check(got == rank0_acts(4, want) && slots0 == want, what, "measured %.0f, closed form %.0f, plan's slots %d",
                     got, rank0_acts(4, want), slots0);
            int o1 = i == 0 ? 3 : 4, o2 = i == 0 ? 8 : 7;
            snprintf(what, sizeof what, "negative control: %s with %d or %d slots differs from the measured bytes", r->name,
                     o1, o2);
            tu_check(got != rank0_acts(4, o1) && got != rank0_acts(4, o2), what, "%.0f and %.0f vs measured %.0f",
                     rank0_acts(4, o1), rank0_acts(4, o2), got);
        }
        if (i == 0) {
            /* Negative control of the measurement: the tied exchange skipped must show in pp send. */
            int frc = train("pp4_1f1b_fault", r->np, r->k, r->flags, "ST_PAR_TEST_PP_FAULT=1");
            cJSON *fall = frc == 0 ? tu_log_records(DIR "/pp4_1f1b_fault.jsonl") : NULL;
            int fok[4];
            char fdet[4][400];
            if (fall) compare(r, plan, fall, fok, fdet);
            tu_check(fall && !fok[3], "negative control: pp 4 with ST_PAR_TEST_PP_FAULT=1 (tied wte exchange skipped) "
                     "fails the pp send check", "exit %d; %s", frc, fall ? fdet[3] : "no log");
            cJSON_Delete(fall);
        }
        cJSON_Delete(all), cJSON_Delete(plan), cJSON_Delete(wrong);
    }
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: test_pp_plan MPIEXEC SCALETRAIN [formula|runs]\n");
        return 2;
    }
    g_mpi = argv[1], g_bin = argv[2];
    const char *what = argc > 3 ? argv[3] : "all";
    if (!strcmp(what, "formula") || !strcmp(what, "all")) formula(), step_time();
    if (!strcmp(what, "runs") || !strcmp(what, "all")) runs();
    return tu_exit();
}
