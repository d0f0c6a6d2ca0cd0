/* test_plan.c — the training-plan calculator against worked examples and published figures.
 *
 * Oracles (each check names its own):
 *  - closed-form worked examples of issue 7 (7B bf16 bytes, ZeRO stages on 8 ranks, bubble, 6ND,
 *    MFU, effective batch, DP communication overlap cannot hide), exact to 1e-12 relative;
 *  - Rajbhandari et al. 2020 (ZeRO) Figure 1: 7.5B parameters, 64 devices, K = 12 →
 *    120 / 31.4 / 16.6 / 1.9 GB per device, to the paper's one decimal;
 *  - Korthikanti et al. 2022 Table 2 formulas evaluated by hand for their Table 3 models, and their
 *    §4.2.3 claim that the first pipeline stage holds sbhL/t (34 + 5as/h) whatever p is;
 *  - the Chinchilla fits' compute-optimal N, D checked against a numerical minimisation of
 *    L(N, C/6N) (golden section, 1e-6 relative);
 *  - published parameter counts of GPT-2 and Llama 2 / 3.1 (Hugging Face configs);
 *  - our trainer itself: gpt_init's MemStats bytes per category, layout_init, layout_activations,
 *    model_config_num_params and layout_flops_per_token for d2, d6 and gpt2-124m (exact equality);
 *  - the default --threads against this process's affinity mask (sched_getaffinity);
 *  - the scaletrain binary on bad input: exit 2 and one stderr line naming the flag. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/fileio.h"
#include "core/mem.h"
#include "model/gpt.h"
#include "model/layout.h"
#include "model/lora.h"
#include "plan/plan.h"
#include "testutil.h"

#define BIN ST_BINARY_DIR "/scaletrain"
#define TMP ST_BINARY_DIR "/test_plan"

static double rel(double a, double b) { return b == 0 ? fabs(a) : fabs(a - b) / fabs(b); }

/* A count-only model with a precision of weights/grads/master/moment bytes. */
static PlanInput count_input(double P, int w, int g, int master, int moment) {
    PlanInput in = plan_default_input();
    in.model.params_override = (long long)P;
    in.prec = (PlanPrecision){w, g, master, moment, 2, PLAN_DTYPE_BF16};
    in.n_moments = 2;
    plan_hardware_preset(&in.hw, "A100-80GB", NULL);
    in.hw.memory = 1e15; /* these examples are about bytes, not fitting */
    in.micro_batch = 1, in.seq_len = 1;
    return in;
}

static void test_7b_bytes(void) {
    PlanResult r;
    Err e;
    /* The seed's accounting: bf16 weights 2P, bf16 grads 2P, fp32 Adam moments 8P, no master. */
    PlanInput in = count_input(7e9, 2, 2, 0, 4);
    plan_compute(&in, &r, &e);
    tu_check(r.mem.weights == 14e9 && r.mem.grads == 14e9 && r.mem.moments == 56e9 && r.mem.master == 0 &&
                 r.mem.bytes_per_param == 12,
             "7B bf16 2P+2P+8P (no master)", "weights %.4g GB grads %.4g GB moments %.4g GB, %g B/param",
             r.mem.weights / 1e9, r.mem.grads / 1e9, r.mem.moments / 1e9, r.mem.bytes_per_param);
    /* The ZeRO paper's 2+2+12: K = 12 counts fp32 master weights (4) with the two moments (8). */
    in = count_input(7e9, 2, 2, 4, 4);
    plan_compute(&in, &r, &e);
    tu_check(r.mem.bytes_per_param == 16 && r.mem.master + r.mem.moments == 84e9,
             "7B ZeRO paper 2+2+12 (fp32 master counted in K)", "%g B/param, optimizer states %.4g GB",
             r.mem.bytes_per_param, (r.mem.master + r.mem.moments) / 1e9);
}

static void test_zero_world8(void) {
    const double want[4] = {84e9, 35e9, 22.75e9, 10.5e9};
    double worst = 0, got[4];
    for (int z = 0; z < 4; z++) {
        PlanInput in = count_input(7e9, 2, 2, 0, 4);
        in.dp = 8, in.zero = z;
        PlanResult r;
        Err e;
        plan_compute(&in, &r, &e);
        got[z] = r.mem.weights + r.mem.grads + r.mem.master + r.mem.moments;
        double d = rel(got[z], want[z]);
        if (d > worst) worst = d;
    }
    tu_check(worst < 1e-12, "ZeRO 0-3, world 8, 14/14/56 GB", "%.4g %.4g %.4g %.4g GB per rank (want 84 35 22.75 10.5)",
             got[0] / 1e9, got[1] / 1e9, got[2] / 1e9, got[3] / 1e9);
}

/* ZeRO communication with gradient accumulation k = 4 on dp 8 (one A100 node: 300 GB/s, α 5 µs),
 * 1e9 parameters of 2-byte gradients and weights, --params alone (one bucket). Oracle, the closed
 * forms of docs/plan.md: ZeRO 1 reduce-scatters once per step, ZeRO 2-3 once per micro-batch
 * (parallel.h), so rs = (1 or k)·7/8·2e9 B; all-gathers 1 (ZeRO 1-2) or 2k (ZeRO 3) of 7/8·2e9 B;
 * zero_s = (rs + ag)/bw + (rs calls + ag calls)·7·α·2 (α per bucket: --params alone has one block
 * bucket and the embedding's). Before, ZeRO 2-3 counted one reduce-scatter. */
static cJSON *plan_json(const char *args, int *code);
static const cJSON *jpath(const cJSON *j, const char *path);
static double jnum(const cJSON *j, const char *path);

static void test_zero_accum(void) {
    Err me;
    file_mkdirs(TMP, &me);
    const double bw = 300e9, a = 5e-6, one = 7.0 / 8.0 * 2e9;
    int ok = 1;
    char d[512] = "";
    for (int z = 1; z <= 3; z++) {
        PlanInput in = count_input(1e9, 2, 2, 4, 4);
        in.dp = 8, in.zero = z, in.grad_accum = 4;
        PlanResult r;
        Err e;
        plan_compute(&in, &r, &e);
        double nrs = z >= 2 ? 4 : 1, nag = z == 3 ? 8 : 1;
        double rs = nrs * one, ag = nag * one, t = (rs + ag) / bw + (nrs + nag) * 7 * a * 2;
        int zok = rel(r.comm.rs_bytes, rs) < 1e-12 && rel(r.comm.ag_bytes, ag) < 1e-12 && rel(r.comm.zero_time, t) < 1e-12 &&
                  rel(r.compute.t_dp, t) < 1e-12;
        ok &= zok;
        snprintf(d + strlen(d), sizeof d - strlen(d), " z%d rs %.4g (%.4g) ag %.4g (%.4g) s %.6g (%.6g);", z, r.comm.rs_bytes,
                 rs, r.comm.ag_bytes, ag, r.comm.zero_time, t);
    }
    tu_check(ok, "ZeRO 1-3, dp 8, k 4: reduce-scatters once per step (1) or per micro-batch (2-3), closed form", "%s", d);
    /* Our d6 on H100: zero_reduce_scatter_bytes equals the trainer's collectives counted call by
     * call (comm_bytes_by_kind, which test_tp_plan checks against the trainer's step records), 4x the k = 1 figure. */
    cJSON *j1 = plan_json("--model d6 --hardware H100 --dp 8 --zero 2 --grad-accum 1", NULL);
    cJSON *j4 = plan_json("--model d6 --hardware H100 --dp 8 --zero 2 --grad-accum 4", NULL);
    double r1 = jnum(j1, "communication.zero_reduce_scatter_bytes"), r4 = jnum(j4, "communication.zero_reduce_scatter_bytes");
    const cJSON *bk = jpath(j4, "comm_bytes_by_kind");
    const cJSON *k4 = cJSON_GetObjectItemCaseSensitive(bk, "reduce-scatter");
    double s1 = jnum(j1, "compute.time_s.dp"), s4 = jnum(j4, "compute.time_s.dp");
    tu_check(r4 == 4 * r1 && cJSON_IsNumber(k4) && r4 == k4->valuedouble && s4 > s1,
             "plan d6 dp 8 ZeRO 2: grad-accum 4 reduce-scatters 4x, as the trainer's count",
             "k=1 %.0f, k=4 %.0f, by kind %.0f; time_s.dp %.6g -> %.6g", r1, r4, cJSON_IsNumber(k4) ? k4->valuedouble : -1,
             s1, s4);
    cJSON_Delete(j1), cJSON_Delete(j4);
}

static void test_zero_paper_7_5b(void) {
    /* Rajbhandari et al. 2020, Figure 1: Ψ = 7.5B, N_d = 64, K = 12 (mixed-precision Adam). */
    const double paper[4] = {120.0, 31.4, 16.6, 1.9};
    int ok = 1;
    double got[4];
    for (int z = 0; z < 4; z++) {
        PlanInput in = count_input(7.5e9, 2, 2, 4, 4);
        in.dp = 64, in.zero = z;
        PlanResult r;
        Err e;
        plan_compute(&in, &r, &e);
        got[z] = (r.mem.weights + r.mem.grads + r.mem.master + r.mem.moments) / 1e9;
        ok &= fabs(round(got[z] * 10) / 10 - paper[z]) < 1e-9;
    }
    tu_check(ok, "ZeRO paper 7.5B on 64 devices (GB)", "%.5g %.5g %.5g %.5g (paper 120 31.4 16.6 1.9)", got[0], got[1],
             got[2], got[3]);
}

static void test_bubble(void) {
    int ms[4] = {1, 4, 16, 64};
    double worst = 0;
    char buf[200] = "";
    for (int i = 0; i < 4; i++) {
        double b = plan_bubble(8, ms[i], 1), want = 7.0 / (ms[i] + 7.0);
        if (rel(b, want) > worst) worst = rel(b, want);
        snprintf(buf + strlen(buf), sizeof buf - strlen(buf), " m=%d:%.4f", ms[i], b);
    }
    double bi = plan_bubble(8, 16, 2);
    tu_check(worst < 1e-15 && rel(bi, 7.0 / 39.0) < 1e-15 && plan_bubble(1, 4, 1) == 0,
             "bubble (p-1)/(m+p-1), p=8", "%s; interleaved v=2 m=16: %.4f (7/39)", buf, bi);
}

static void test_6nd_and_mfu(void) {
    PlanInput in = count_input(7e9, 2, 2, 4, 4);
    in.budget_tokens = 300e9;
    in.dp = 512, in.target_days = 14; /* A100 bf16 peak 312 TFLOP/s */
    PlanResult r;
    Err e;
    plan_compute(&in, &r, &e);
    tu_check(rel(r.compute.total_6nd, 1.26e22) < 1e-12, "6ND for 7B x 300B tokens", "%.6g FLOPs (want 1.26e22)",
             r.compute.total_6nd);
    double want = 1.26e22 / (14 * 86400.0 * 512 * 312e12);
    tu_check(rel(r.compute.mfu_required, want) < 1e-12 && fabs(r.compute.mfu_required - 0.0652) < 1e-4,
             "MFU for 7B x 300B in 14 days on 512 x 312 TFLOP/s", "%.4f%% (closed form %.4f%%)",
             100 * r.compute.mfu_required, 100 * want);
}

/* --dropout's draws (docs/plan.md "Compute"): d6 (L 6, C 384, 6 heads), B 8, T 256, k 2, fp32, a
 * profile drawing 5e8 factors/s. Closed form: forward draws per token C + L·(2C + H·(T + 1)/2),
 * twice (forward, and again in the backward), × B·T·k / rate; full recompute three times; tp 2 the
 * heads' half (the residual stream whole, without --sp); a GPU preset (rate 0) at one fp32 read and
 * write per draw, 8 bytes / mem_bw. The step's elementwise time carries it. Negative control: the
 * form without the attention rows (3C per layer) is more than 20% short. */
static void test_dropout(void) {
    double C = 384, L = 6, H = 6, T = 256, tok = 8 * 256 * 2, rate = 5e8;
    double fwd = C + L * (2 * C + H * (T + 1) / 2), fwd_tp = C + L * (2 * C + H / 2 * (T + 1) / 2);
    double want[4] = {2 * fwd * tok / rate, 3 * fwd * tok / rate, 2 * fwd_tp * tok / rate, 0};
    double got[4], elem_on[4], elem_off[4];
    for (int i = 0; i < 4; i++) {
        PlanInput in = plan_default_input();
        plan_model_preset(&in.model, "d6", NULL);
        if (i == 3) plan_hardware_preset(&in.hw, "H100", NULL);
        else in.hw.drop_rate = rate;
        in.micro_batch = 8, in.seq_len = 256, in.grad_accum = 2;
        if (i == 1) in.recompute = PLAN_RECOMPUTE_FULL;
        if (i == 2) in.tp = 2;
        PlanResult r;
        Err e;
        plan_compute(&in, &r, &e);
        elem_off[i] = r.compute.t_elementwise;
        in.dropout = 0.1;
        plan_compute(&in, &r, &e);
        got[i] = r.compute.t_dropout, elem_on[i] = r.compute.t_elementwise;
        if (i == 3) want[3] = 2 * fwd * tok * 8 / in.hw.mem_bw;
    }
    int ok = 1;
    for (int i = 0; i < 4; i++) ok &= rel(got[i], want[i]) < 1e-12 && rel(elem_on[i] - elem_off[i], want[i]) < 1e-9;
    double short_form = 2 * (C + L * 3 * C) * tok / rate;
    tu_check(ok, "--dropout: draws priced at the draw rate, inside elementwise", "%.4g / %.4g / %.4g / %.4g s "
             "(closed forms %.4g / %.4g / %.4g / %.4g: none, full recompute, tp 2, H100 at 8 B per draw)", got[0], got[1],
             got[2], got[3], want[0], want[1], want[2], want[3]);
    tu_check(short_form < 0.8 * got[0], "negative control: without the attention rows' draws the price is > 20% short",
             "%.4g s against %.4g", short_form, got[0]);
}

/* The LM head's softmax, loss and logit-gradient passes (layout_head_softmax_bytes, docs/plan.md
 * "Compute"): d6 with GPT-2's vocabulary (V 50257), B 8, T 256, k 2, a profile of 20 GB/s. Closed
 * form: bytes per logit × V × B·T·k / mem_bw, the bytes 8 (fp32), 10 (bf16), 14 (fp16), and on the
 * vocabulary-parallel head of tp 2, over ceil(V/2) rows, 16 (fp32) and 22 (bf16); inside the step's
 * elementwise: the elementwise time grows from V 257 to V 50257 by the closed forms' difference; at
 * pp 2 the head's stage (the last) carries it. Negative control: at tp 2 the one-row-at-a-time
 * form (8 B over V/2 rows) is more than 20% short of the price. */
static void test_head_softmax(void) {
    const double tok = 8 * 256 * 2, bw = 20e9, V = 50257, Vh = 25129;
    struct { const char *prec; int tp, pp; double bytes, rows; } cs[] = {
        {"fp32", 1, 1, 8, V}, {"bf16", 1, 1, 10, V}, {"fp16", 1, 1, 14, V}, {"fp32", 2, 1, 16, Vh}, {"bf16", 2, 1, 22, Vh},
        {"fp32", 1, 2, 8, V},
    };
    int ok = 1;
    char got[512] = "";
    double tp2 = 0;
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        double t[2], elem[2], last[2];
        for (int j = 0; j < 2; j++) {
            PlanInput in = plan_default_input();
            plan_model_preset(&in.model, "d6", NULL);
            in.model.vocab = j ? 50257 : 257;
            in.hw.mem_bw = bw;
            in.micro_batch = 8, in.seq_len = 256, in.grad_accum = 2, in.tp = cs[i].tp, in.pp = cs[i].pp;
            Err e;
            if (plan_precision_trainer(&in.prec, cs[i].prec, &e) != ST_OK) ok = 0;
            PlanResult r;
            if (plan_compute(&in, &r, &e) != ST_OK) ok = 0;
            t[j] = r.compute.t_head, elem[j] = r.compute.t_elementwise;
            last[j] = cs[i].pp > 1 ? r.pp_rank[cs[i].pp - 1].t_compute : 0;
        }
        double want = cs[i].bytes * cs[i].rows * tok / bw, want0 = cs[i].bytes * (cs[i].tp > 1 ? 129 : 257) * tok / bw;
        int good = rel(t[1], want) < 1e-12 && rel(t[0], want0) < 1e-12;
        if (cs[i].pp == 1) good &= rel(elem[1] - elem[0], want - want0) < 1e-9;
        else good &= last[1] - last[0] > want - want0;
        ok &= good;
        if (cs[i].tp == 2 && !strcmp(cs[i].prec, "fp32")) tp2 = t[1];
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%s tp %d pp %d: %.4g ms (closed form %.4g)%s",
                 i ? "; " : "", cs[i].prec, cs[i].tp, cs[i].pp, 1e3 * t[1], 1e3 * want, good ? "" : " WRONG");
    }
    tu_check(ok, "the LM head's softmax passes priced per logit, inside elementwise and on the head's stage", "%s", got);
    double short_form = 8 * Vh * tok / bw;
    tu_check(short_form < 0.8 * tp2, "negative control: the vocabulary-parallel head priced as one row at a time is > 20% short",
             "%.4g ms against %.4g", 1e3 * short_form, 1e3 * tp2);
}

/* DP communication that overlap cannot hide (docs/plan.md): gpt2-124m in bf16 on 8 A100s of one
 * node (300 GB/s, 5 us), embedding E = 50257·768 + 1024·768 = 39,383,808 parameters of 2 bytes.
 * ZeRO 0: its ring all-reduce 2·(7/8)·2E/bw + 2·7·lat, plus the first block's (ready last, like
 * the embedding's): a twelfth of the other gradients' 2·(7/8)·(P−E)·2/bw, + 2·7·lat for its
 * bucket; ZeRO 3: the embedding's reduce-scatter and gather, the first block's reduce-scatter
 * (7/8)·(P−E)·2/bw/12 + 7·lat; ZeRO 1: the embedding's and first block's reduce-scatters plus the
 * whole parameter all-gather after the update. On this link every block's collective is far
 * shorter than its backward (no lag). The step is max(compute, dp − exposed) + exposed +
 * optimizer. Negative control: the old max(compute, dp) + optimizer is below the prediction by
 * the exposed time. */
static void test_dp_exposed(void) {
    double E = 50257.0 * 768 + 1024.0 * 768, want0 = 2 * 0.875 * 2 * E / 300e9 + 2 * 7 * 5e-6;
    PlanResult r[4];
    for (int z = 0; z <= 3; z++) {
        PlanInput in = plan_default_input();
        plan_model_preset(&in.model, "gpt2-124m", NULL);
        plan_precision_preset(&in.prec, "bf16", NULL);
        plan_hardware_preset(&in.hw, "A100-80GB", NULL);
        in.micro_batch = 8, in.seq_len = 1024, in.dp = 8, in.zero = z;
        Err e;
        plan_compute(&in, &r[z], &e);
    }
    /* The first block's collective: the rest of the gradient bytes over 12 blocks, one bucket's α. */
    double blk0 = (r[0].comm.dp_bytes - 2 * 0.875 * 2 * E) / 300e9 / 12 + 2 * 7 * 5e-6;
    double blk1 = (r[1].comm.rs_bytes - 0.875 * 2 * E) / 300e9 / 12 + 7 * 5e-6;
    double want3 = want0 + (r[3].comm.rs_bytes - 0.875 * 2 * E) / 300e9 / 12 + 7 * 5e-6;
    want0 += blk0;
    double want1 = 0.875 * 2 * E / 300e9 + 7 * 5e-6 + blk1 + r[1].comm.ag_bytes / 300e9 + 7 * 5e-6 * 13;
    double worst = 0, old_gap = INFINITY;
    for (int z = 0; z <= 3; z++) {
        const PlanResult *q = &r[z];
        double comp = q->compute.t_matmul + q->compute.t_elementwise, hid = q->compute.t_dp - q->compute.t_dp_exposed;
        double step = (comp > hid ? comp : hid) + q->compute.t_dp_exposed + q->compute.t_optimizer;
        double old = (comp > q->compute.t_dp ? comp : q->compute.t_dp) + q->compute.t_optimizer;
        worst = rel(q->compute.step_overlap, step) > worst ? rel(q->compute.step_overlap, step) : worst;
        old_gap = q->compute.step_overlap - old < old_gap ? q->compute.step_overlap - old : old_gap;
    }
    tu_check(rel(r[0].compute.t_dp_exposed, want0) < 1e-12 && rel(r[3].compute.t_dp_exposed, want3) < 1e-12 &&
                 rel(r[1].compute.t_dp_exposed, want1) < 1e-12 && rel(r[2].compute.t_dp_exposed, want1) < 1e-12 &&
                 worst < 1e-12 && old_gap > 0.9 * fmin(want0, want3),
             "dp comm not hidden: gpt2-124m bf16, 8 A100 of one node", "ZeRO 0 %.1f us (closed form %.1f), ZeRO 3 "
             "%.1f us (%.1f), ZeRO 1/2 %.1f us (%.1f); step max(compute, dp - exposed) + exposed + optimizer (rel "
             "%.1e); above the old max(compute, dp) + optimizer by >= %.1f us",
             1e6 * r[0].compute.t_dp_exposed, 1e6 * want0, 1e6 * r[3].compute.t_dp_exposed, 1e6 * want3,
             1e6 * r[1].compute.t_dp_exposed, 1e6 * want1, worst, 1e6 * old_gap);
}

/* plan_overlap_exposed against hand values (times in ms): a link faster than the backward leaves
 * the last two collectives (first block 50, embedding 5) exposed, whatever the block count; a
 * slower one adds each other block's lag: 5 + 100 + 5·(100 − 60) = 305; no blocks: the embedding
 * alone. Then the netsim model (6 blocks of 1.77 M parameters, 384 channels, vocabulary 256) on a
 * 1 Gb/s link (125 MB/s, 20 us), dp 2 ZeRO 0: exposed = the embedding's all-reduce
 * (256+128)·384·4 B/bw + 2·lat plus the first block's, a sixth of the rest (measured over TCP with
 * the progress thread: 66 ms, bench/results/netsim.md); and at 10 Mb/s, where every block's
 * all-reduce outlasts its backward, each block's lag is exposed too. Negative control: the
 * embedding-only form (before the first block's term) is more than 30 ms short at 1 Gb/s. */
static void test_overlap_exposed(void) {
    double a = plan_overlap_exposed(6, 50, 100, 5), b = plan_overlap_exposed(12, 50, 100, 5),
           c = plan_overlap_exposed(6, 100, 60, 5), d = plan_overlap_exposed(0, 100, 60, 5);
    tu_check(a == 55 && b == 55 && c == 305 && d == 5, "overlap exposed: closed forms", "%g %g %g %g (want 55 55 305 5)",
             a, b, c, d);
    double got[2], want[2], emb_only = 0;
    int lagged = 0;
    for (int i = 0; i < 2; i++) {
        double bw = i == 0 ? 125e6 : 1.25e6, lat = 20e-6;
        PlanInput in = plan_default_input();
        plan_model_preset(&in.model, "d6", NULL); /* 6 layers, 6 heads, 384 channels */
        in.model.vocab = 256, in.model.max_seq = 128;
        in.micro_batch = 8, in.seq_len = 128, in.dp = 2, in.zero = 0;
        in.hw.devices_per_node = 1, in.hw.inter_bw = bw, in.hw.inter_lat = lat; /* the default CPU profile */
        PlanResult r;
        Err e;
        if (plan_compute(&in, &r, &e) != ST_OK) {
            tu_check(0, "overlap exposed: netsim model plans", "%s", e.msg);
            return;
        }
        double emb = (256.0 + 128) * 384 * 4 / bw + 2 * lat; /* 2·(1/2)·S/bw + 2·lat */
        double x = (r.comm.dp_time - emb) / 6;
        double tb = 2.0 / 3.0 * (r.compute.t_matmul + r.compute.t_elementwise) / 6;
        want[i] = emb + x + 5 * (x > tb ? x - tb : 0);
        got[i] = r.compute.t_dp_exposed;
        if (i == 0) emb_only = emb;
        if (i == 1) lagged = x > tb;
        want[i] = want[i] < r.comm.dp_time ? want[i] : r.comm.dp_time;
    }
    tu_check(rel(got[0], want[0]) < 1e-12 && rel(got[1], want[1]) < 1e-12 && lagged,
             "overlap exposed: netsim model, dp 2 at 1 Gb/s and 10 Mb/s",
             "%.2f ms (closed form %.2f), %.1f ms (%.1f)", 1e3 * got[0], 1e3 * want[0], 1e3 * got[1], 1e3 * want[1]);
    tu_check(got[0] - emb_only > 0.030, "negative control: the embedding-only exposure is short by the first block's",
             "%.2f ms vs %.2f ms", 1e3 * emb_only, 1e3 * got[0]);
}

static void test_effective_batch(void) {
    PlanInput in = plan_default_input();
    plan_model_preset(&in.model, "llama-7b", NULL);
    in.micro_batch = 2, in.seq_len = 4096, in.grad_accum = 64, in.dp = 8;
    PlanResult r;
    Err e;
    Status st = plan_compute(&in, &r, &e);
    tu_check(st == ST_OK && r.batch_tokens == 4194304 && r.batch_seqs == 1024, "effective batch 2 x 4096 x 64 x 8",
             "%lld tokens, %lld sequences", r.batch_tokens, r.batch_seqs);
}

static void test_korthikanti(void) {
    /* Their Table 3 models (s = 2048, t = 8): heads, hidden, layers. */
    const struct { const char *name; double a, h, L; } M[] = {
        {"22B", 64, 6144, 48}, {"175B", 96, 12288, 96}, {"530B", 128, 20480, 105}, {"1T", 160, 25600, 128}};
    double s = 2048, b = 1, t = 8, worst = 0, ratio_lo = 1, ratio_hi = 0;
    for (int i = 0; i < 4; i++) {
        double a = M[i].a, h = M[i].h, sbh = s * b * h;
        double want[6] = {
            sbh * (34 + 5 * a * s / h),                  /* no parallelism (eq. 1) */
            sbh * (10 + 24 / t + 5 * a * s / (h * t)),   /* tensor parallel (eq. 2) */
            sbh / t * (34 + 5 * a * s / h),              /* tensor + sequence parallel (eq. 3) */
            sbh * (10 + 24 / t),                         /* tensor parallel + selective recompute */
            sbh * 34 / t,                                /* tensor + sequence + selective */
            2 * sbh,                                     /* full recompute */
        };
        double got[6] = {
            plan_act_korthikanti(s, b, h, a, 4, 1, 0, 1, 0, PLAN_RECOMPUTE_NONE, 2),
            plan_act_korthikanti(s, b, h, a, 4, 1, 0, 8, 0, PLAN_RECOMPUTE_NONE, 2),
            plan_act_korthikanti(s, b, h, a, 4, 1, 0, 8, 1, PLAN_RECOMPUTE_NONE, 2),
            plan_act_korthikanti(s, b, h, a, 4, 1, 0, 8, 0, PLAN_RECOMPUTE_SELECTIVE, 2),
            plan_act_korthikanti(s, b, h, a, 4, 1, 0, 8, 1, PLAN_RECOMPUTE_SELECTIVE, 2),
            plan_act_korthikanti(s, b, h, a, 4, 1, 0, 1, 0, PLAN_RECOMPUTE_FULL, 2),
        };
        for (int k = 0; k < 6; k++)
            if (rel(got[k], want[k]) > worst) worst = rel(got[k], want[k]);
        double ratio = got[4] / got[1]; /* SP + selective vs the TP baseline: the paper's "5x" */
        if (ratio < ratio_lo) ratio_lo = ratio;
        if (ratio > ratio_hi) ratio_hi = ratio;
        printf("  korthikanti %-4s per layer (b=1): none %.3f GiB, tp %.3f, tp+sp %.3f, tp+sel %.3f, tp+sp+sel %.3f, "
               "full %.3f\n",
               M[i].name, got[0] / 1073741824.0, got[1] / 1073741824.0, got[2] / 1073741824.0, got[3] / 1073741824.0,
               got[4] / 1073741824.0, got[5] / 1073741824.0);
    }
    tu_check(worst < 1e-12, "Korthikanti Table 2 formulas, Table 3 models", "max rel diff %.2g", worst);
    /* e bytes per activation element: 4 elements of sbh replicated, 12 split (f = 4), 2 of the attention core,
     * plus the 1-byte masks (2 sbh and as²b): e = 4 gives sbh(66 + 9as/h) and full recompute 4sbh. */
    {
        double a = 96, h = 12288, sbh = s * b * h;
        double e4 = plan_act_korthikanti(s, b, h, a, 4, 1, 0, 1, 0, PLAN_RECOMPUTE_NONE, 4);
        double f4 = plan_act_korthikanti(s, b, h, a, 4, 1, 0, 1, 0, PLAN_RECOMPUTE_FULL, 4);
        double e2 = plan_act_korthikanti(s, b, h, a, 4, 1, 0, 1, 0, PLAN_RECOMPUTE_NONE, 2);
        tu_check(rel(e2, sbh * (66 + 9 * a * s / h)) > 0.1, "negative control: 2-byte activations differ from the 4-byte form",
                 "rel diff %.3f", rel(e2, sbh * (66 + 9 * a * s / h)));
        tu_check(rel(e4, sbh * (66 + 9 * a * s / h)) < 1e-12 && rel(f4, 4 * sbh) < 1e-12,
                 "Korthikanti with 4-byte activations: sbh(66 + 9as/h), full 4sbh", "%.6g GiB, full %.6g GiB",
                 e4 / 1073741824.0, f4 / 1073741824.0);
    }
    tu_check(ratio_lo > 0.15 && ratio_hi < 0.21, "Korthikanti: SP + selective cuts TP activations ~5x",
             "ratio %.3f..%.3f", ratio_lo, ratio_hi);
    /* §4.2.3: with 1F1B the first stage holds p micro-batches of L/p layers = sbhL/t (34 + 5as/h). */
    PlanInput in = plan_default_input();
    ModelConfig c = {96, 96, 12288, 51200, 0, 2048, 0};
    plan_model_from_config(&in.model, &c);
    in.micro_batch = 1, in.seq_len = 2048, in.tp = 8, in.pp = 8, in.sp = 1, in.grad_accum = 64;
    in.prec = (PlanPrecision){2, 2, 4, 4, 2, PLAN_DTYPE_BF16};
    plan_hardware_preset(&in.hw, "A100-80GB", NULL);
    PlanResult r;
    Err e;
    plan_compute(&in, &r, &e);
    double sbh = 2048.0 * 12288, want = sbh * 96 / 8 * (34 + 5 * 96 * 2048.0 / 12288);
    tu_check(rel(r.mem.activations, want) < 1e-12, "Korthikanti eq. 4: 175B first stage, t=8 p=8 +SP",
             "%.3f GiB (sbhL/t(34+5as/h) = %.3f GiB)", r.mem.activations / 1073741824.0, want / 1073741824.0);
}

/* Minimises L(N, C/(6N)) over log N by golden section. */
static double numeric_nopt(const PlanScaling *s, double C) {
    double lo = log(1e3), hi = log(1e15), g = (sqrt(5.0) - 1) / 2;
    for (int i = 0; i < 300; i++) {
        double x1 = hi - g * (hi - lo), x2 = lo + g * (hi - lo);
        double f1 = plan_scaling_loss(s, exp(x1), C / (6 * exp(x1)));
        double f2 = plan_scaling_loss(s, exp(x2), C / (6 * exp(x2)));
        if (f1 < f2) hi = x2;
        else lo = x1;
    }
    return exp(0.5 * (lo + hi));
}

static void test_scaling(void) {
    const double budgets[4] = {1e19, 1e21, 5.76e23, 1e25};
    double worst = 0, tpp_lo = 1e9, tpp_hi = 0;
    for (int f = 0; f < 2; f++) {
        PlanScaling s;
        plan_scaling_fit(&s, f);
        for (int i = 0; i < 4; i++) {
            double N, D;
            plan_scaling_optimum(&s, budgets[i], &N, &D);
            double Nn = numeric_nopt(&s, budgets[i]);
            double d = rel(N, Nn);
            if (d > worst) worst = d;
            if (rel(6 * N * D, budgets[i]) > worst) worst = rel(6 * N * D, budgets[i]);
            if (f == 1 && budgets[i] >= 1e21) {
                if (D / N < tpp_lo) tpp_lo = D / N;
                if (D / N > tpp_hi) tpp_hi = D / N;
            }
            printf("  %s C=%.3g: N_opt=%.4g D_opt=%.4g (%.1f tokens/param) loss %.4f\n", s.name, budgets[i], N, D, D / N,
                   plan_scaling_loss(&s, N, D));
        }
    }
    tu_check(worst < 1e-6, "Chinchilla optimum: closed form vs numerical minimum", "max rel diff %.2g", worst);
    /* Besiroglu et al. 2024: their refit agrees with Hoffmann's approaches 1 and 2 (~20 tokens/param). */
    tu_check(tpp_lo > 15 && tpp_hi < 30, "Besiroglu refit: ~20 tokens/param at 1e21..1e25 FLOPs", "%.1f..%.1f", tpp_lo,
             tpp_hi);
    /* Chinchilla itself: 70B on 1.4T tokens. */
    PlanScaling h;
    plan_scaling_fit(&h, 0);
    double L = plan_scaling_loss(&h, 70e9, 1.4e12);
    tu_check(rel(L, 1.69 + 406.4 / pow(70e9, 0.34) + 410.7 / pow(1.4e12, 0.28)) < 1e-15 && L > 1.9 && L < 2.0,
             "Hoffmann L(70B, 1.4T)", "%.4f", L);
    tu_check(rel(plan_young_daly(60, 86400), sqrt(2 * 60 * 86400.0)) < 1e-15, "Young/Daly sqrt(2 delta M)",
             "delta 60 s, M 24 h: %.1f s", plan_young_daly(60, 86400));
}

static void test_param_counts(void) {
    const struct { const char *name; long long want; } P[] = {
        {"gpt2-124m", 124439808LL}, {"gpt2-350m", 354823168LL}, {"gpt2-774m", 774030080LL},
        {"gpt2-1558m", 1557611200LL}, {"llama-7b", 6738415616LL}, {"llama-13b", 13015864320LL},
        {"llama-70b", 68976648192LL}, {"llama-405b", 405853388800LL},
        /* Llama 3 (Hugging Face configs): 8B untied, 3.2 1B and 3B tied heads */
        {"llama3-8b", 8030261248LL}, {"llama3.1-8b", 8030261248LL}, {"llama3.2-1b", 1235814400LL},
        {"llama3.2-3b", 3212749824LL},
    };
    for (size_t i = 0; i < sizeof P / sizeof P[0]; i++) {
        PlanModel m;
        Err e;
        Status st = plan_model_preset(&m, P[i].name, &e);
        long long n = st == ST_OK ? plan_model_num_params(&m) : -1;
        char name[80];
        snprintf(name, sizeof name, "parameters %s (published count)", P[i].name);
        tu_check(n == P[i].want, name, "%lld (want %lld)", n, P[i].want);
    }
}

/* Plan vs the trainer's own allocation for one of our models (rc: the recompute level; at tp 1 the
 * plan counts the trainer's activations at every level). */
static void test_vs_trainer(const char *preset, int vocab, int B, int T, Recompute rc) {
    PlanInput in = plan_default_input();
    Err e;
    plan_model_preset(&in.model, preset, &e);
    in.model.vocab = vocab;
    in.micro_batch = B, in.seq_len = T, in.threads = 2;
    in.recompute = rc == RECOMPUTE_FULL ? PLAN_RECOMPUTE_FULL : rc == RECOMPUTE_SELECTIVE ? PLAN_RECOMPUTE_SELECTIVE
                                                                                          : PLAN_RECOMPUTE_NONE;
    PlanResult r;
    Status st = plan_compute(&in, &r, &e);
    ModelConfig cfg = {0};
    cfg.vocab = vocab, cfg.max_seq = 1024;
    model_config_preset(&cfg, strcmp(preset, "gpt2-1.5b") ? preset : "gpt2-1558m", &e);
    model_config_validate(&cfg, &e);
    MemStats mem = {0};
    Gpt g;
    GptOptions go = gpt_default_options();
    go.B = B, go.T = T, go.threads = 2, go.recompute = rc;
    Status gs = gpt_init(&g, &cfg, &go, &mem, &e);
    ParamLayout pl;
    layout_init(&pl, &cfg, 1);
    ActOptions ao = layout_act_options(B, T, 2);
    ao.recompute = rc;
    ActSizes as = layout_activations(&cfg, &ao);
    /* The trainer allocates moments as layout.total floats per moment (train.c). */
    double moments = 2.0 * pl.total * sizeof(float);
    int ok = st == ST_OK && gs == ST_OK && r.exact_layout && r.act.exact_used &&
             r.n_params == model_config_num_params(&cfg) && r.layout_floats == (long long)pl.total &&
             r.mem.weights == (double)mem.bytes[MEM_PARAMS] && r.mem.grads == (double)mem.bytes[MEM_GRADS] &&
             r.mem.moments == moments && r.mem.master == 0 &&
             r.mem.activations == (double)mem.bytes[MEM_ACTIVATIONS] &&
             r.mem.workspace == (double)mem.bytes[MEM_WORKSPACE] && r.mem.activations == 4.0 * as.total &&
             r.compute.fpt == layout_flops_per_token(&cfg, T);
    char name[96];
    snprintf(name, sizeof name, "plan == trainer for %s (V=%d, B=%d, T=%d, recompute %s)", preset, vocab, B, T,
             layout_recompute_name(rc));
    tu_check(ok, name,
             "params %lld (trainer %lld), floats %lld, weights %.0f/%zu grads %.0f/%zu acts %.0f/%zu ws %.0f/%zu B, "
             "FLOP/token %.6g/%.6g",
             r.n_params, model_config_num_params(&cfg), r.layout_floats, r.mem.weights, mem.bytes[MEM_PARAMS],
             r.mem.grads, mem.bytes[MEM_GRADS], r.mem.activations, mem.bytes[MEM_ACTIVATIONS], r.mem.workspace,
             mem.bytes[MEM_WORKSPACE], r.compute.fpt, layout_flops_per_token(&cfg, T));
    layout_free(&pl);
    gpt_free(&g);
}

/* ---- the shared formulas (model/layout), checked once against hand arithmetic ----
 * The tiny model: L = 1, NH = 1, C = 16, V = 60 (Vp = 64), maxT = 9. By hand: segment 0 holds wte
 * 64·16 = 1024 and wpe 9·16 = 144 floats (1168); the block 12C² + 13C = 3280 (every tensor a multiple
 * of 16 floats, so no alignment gaps); the final norm 2C = 32. Each segment is rounded up to 16·dp
 * floats: dp 1 → 1168 + 3280 + 32 = 4480; dp 2 (32) → 1184 + 3296 + 32 = 4512; dp 4 (64) →
 * 1216 + 3328 + 64 = 4608. */
static const int TINY_DP[3] = {1, 2, 4};
static const size_t TINY_T[3] = {4480, 4512, 4608}, TINY_E[3] = {1168, 1184, 1216}, TINY_X[3] = {3280, 3296, 3328};

static ModelConfig tiny_config(void) {
    ModelConfig c = {0};
    c.n_layer = 1, c.n_head = 1, c.n_embd = 16, c.vocab = 60, c.max_seq = 9;
    Err e;
    model_config_validate(&c, &e);
    return c;
}

/* Per-rank bytes by the documented closed form (docs/parallel.md), Adam (2 moments), precision 0
 * fp32 (4/4/0/4) or 1, 2 mixed (2/4/4/4), for dp index i: parameters, gradients, master, moments. */
static void tiny_hand_bytes(int i, int zero, int lowp, double out[4]) {
    double T = (double)TINY_T[i], S = T / TINY_DP[i], E = (double)TINY_E[i], X = (double)TINY_X[i];
    double w = lowp ? 2 : 4, m = lowp ? 4 : 0;
    out[0] = zero < 3 ? w * T : lowp ? (4 + 2) * (E + 2 * X) : 4 * (S + E + 2 * X);
    out[1] = 4 * (zero >= 2 ? S + E + 2 * X : T);
    out[2] = m * (zero >= 3 ? S : T);
    out[3] = 2 * 4 * (zero >= 1 ? S : T);
}

static void test_shared_formulas(void) {
    ModelConfig c = tiny_config();
    /* FLOPs per token, T = 8, by hand: blocks 2·1·12·16² = 6144, attention 4·1·8·16 = 512,
     * head 2·60·16 = 1920; 3 × 8576 = 25728 = 6·(12·16² + 60·16) + 12·8·16. */
    TokenFlops f = layout_token_flops(12.0 * 16 * 16, 1, 16, 60, 8);
    double fpt = layout_flops_per_token(&c, 8);
    tu_check(fpt == 25728 && f.train == 25728 && f.blocks == 6144 && f.attention == 512 && f.head == 1920,
             "layout_flops_per_token: tiny model by hand (25728)", "%.17g (blocks %g attention %g head %g)", fpt,
             f.blocks, f.attention, f.head);
    /* Negative control: the padded vocabulary (64) in the head must be told apart. */
    double padded = layout_token_flops(12.0 * 16 * 16, 1, 16, c.vocab_padded, 8).train;
    tu_check(padded != 25728, "negative control: FLOPs with the padded vocabulary differ from the hand value",
             "%.17g vs 25728", padded);

    /* ZeRO bytes: the literal numbers of three cases, then the whole grid against the closed form. */
    int ok = 1, nbad_ctrl = 0;
    char detail[256] = "";
    for (int i = 0; i < 3; i++) {
        ParamLayout pl;
        layout_init(&pl, &c, TINY_DP[i]);
        ok &= pl.total == TINY_T[i];
        for (int lowp = 0; lowp <= 1; lowp++) {
            for (int z = 0; z < 4; z++) {
                size_t b[MEM_NCAT];
                layout_zero_bytes(&pl, TINY_DP[i], z, 2, layout_state_bytes(lowp), b);
                double want[4];
                tiny_hand_bytes(i, z, lowp, want);
                int same = b[MEM_PARAMS] == want[0] && b[MEM_GRADS] == want[1] && b[MEM_MASTER] == want[2] &&
                           b[MEM_MOMENTS] == want[3];
                if (!same && detail[0] == 0)
                    snprintf(detail, sizeof detail, "dp %d zero %d %s: %zu %zu %zu %zu, hand %.0f %.0f %.0f %.0f",
                             TINY_DP[i], z, lowp ? "bf16" : "fp32", b[MEM_PARAMS], b[MEM_GRADS], b[MEM_MASTER],
                             b[MEM_MOMENTS], want[0], want[1], want[2], want[3]);
                ok &= same;
            }
        }
        layout_free(&pl);
    }
    size_t b2[MEM_NCAT], b2l[MEM_NCAT], b4l[MEM_NCAT];
    ParamLayout p2, p4;
    layout_init(&p2, &c, 2);
    layout_init(&p4, &c, 4);
    layout_zero_bytes(&p2, 2, 3, 2, layout_state_bytes(0), b2);
    layout_zero_bytes(&p2, 2, 3, 2, layout_state_bytes(1), b2l);
    layout_zero_bytes(&p4, 4, 3, 2, layout_state_bytes(2), b4l);
    /* dp 2: S + E + 2X = 2256 + 1184 + 6592 = 10032, E + 2X = 7776; dp 4: 1152 + 1216 + 6656 = 9024, 7872. */
    int lit = b2[MEM_PARAMS] == 40128 && b2[MEM_GRADS] == 40128 && b2[MEM_MASTER] == 0 && b2[MEM_MOMENTS] == 18048 &&
              b2l[MEM_PARAMS] == 46656 && b2l[MEM_GRADS] == 40128 && b2l[MEM_MASTER] == 9024 &&
              b2l[MEM_MOMENTS] == 18048 && b4l[MEM_PARAMS] == 47232 && b4l[MEM_GRADS] == 36096 &&
              b4l[MEM_MASTER] == 4608 && b4l[MEM_MOMENTS] == 9216;
    tu_check(ok && lit, "layout_zero_bytes: tiny model, dp 1/2/4 x ZeRO 0-3 x fp32/bf16 by hand",
             "%s; dp 2 ZeRO 3 fp32 %zu/%zu/%zu/%zu, bf16 %zu/%zu/%zu/%zu", detail[0] ? detail : "all equal",
             b2[MEM_PARAMS], b2[MEM_GRADS], b2[MEM_MASTER], b2[MEM_MOMENTS], b2l[MEM_PARAMS], b2l[MEM_GRADS],
             b2l[MEM_MASTER], b2l[MEM_MOMENTS]);
    /* Negative control: a layout not split for dp (shard_multiple 1, as plan built it before for
     * ZeRO 0) must not match dp 2's hand numbers. */
    ParamLayout p1;
    layout_init(&p1, &c, 1);
    for (int z = 0; z < 4; z++) {
        size_t b[MEM_NCAT];
        double want[4];
        layout_zero_bytes(&p1, 2, z, 2, layout_state_bytes(0), b);
        tiny_hand_bytes(1, z, 0, want);
        nbad_ctrl += !(b[MEM_PARAMS] == want[0] && b[MEM_GRADS] == want[1] && b[MEM_MOMENTS] == want[3]);
    }
    tu_check(nbad_ctrl == 4, "negative control: a layout not split for dp 2 differs from the hand bytes at every stage",
             "%d of 4 stages differ", nbad_ctrl);
    layout_free(&p1);
    layout_free(&p2);
    layout_free(&p4);
}

/* `scaletrain plan ARGS --json` parsed (NULL if no JSON came out); *code gets the exit status. */
static cJSON *plan_json(const char *args, int *code) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s plan %s --json > %s/plan_out.json 2>%s/plan_err.txt", BIN, args, TMP, TMP);
    int rc = system(cmd);
    if (code) *code = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    char *text = tu_slurp(TMP "/plan_out.json");
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    free(text);
    return j;
}

/* The item at a dotted path ("memory_bytes.by_category.gradients"), or NULL. */
static const cJSON *jpath(const cJSON *j, const char *path) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *tok = strtok(buf, "."); tok && j; tok = strtok(NULL, ".")) j = cJSON_GetObjectItemCaseSensitive(j, tok);
    return j;
}

static double jnum(const cJSON *j, const char *path) {
    const cJSON *x = jpath(j, path);
    return cJSON_IsNumber(x) ? x->valuedouble : NAN;
}

/* plan --json per-rank bytes for the tiny model on a dp grid: equal to the hand arithmetic above
 * and to layout_zero_bytes over layout_init(dp) (the numbers the trainer's allocation is built
 * from; its MPI test compares them with every rank's allocation). */
static int plan_grid_matches(int i, int zero, const char *prec, const char *extra, char *detail, size_t n) {
    char args[512];
    snprintf(args, sizeof args,
             "--layers 1 --heads 1 --channels 16 --vocab 60 --max-seq-len 9 --seq-len 8 --micro-batch 1 --dp %d "
             "--zero %d --precision %s %s",
             TINY_DP[i], zero, prec, extra);
    int code;
    cJSON *j = plan_json(args, &code);
    int lowp = strcmp(prec, "fp32") != 0;
    double want[4];
    tiny_hand_bytes(i, zero, lowp, want);
    ModelConfig c = tiny_config();
    ParamLayout pl;
    layout_init(&pl, &c, TINY_DP[i]);
    size_t lb[MEM_NCAT];
    layout_zero_bytes(&pl, TINY_DP[i], zero, 2, layout_state_bytes(!strcmp(prec, "fp16") ? 2 : lowp), lb);
    layout_free(&pl);
    static const char *const K[4] = {"parameters", "gradients", "master_weights", "optimizer_moments"};
    const MemCategory C[4] = {MEM_PARAMS, MEM_GRADS, MEM_MASTER, MEM_MOMENTS};
    const cJSON *st = jpath(j, "memory_bytes.states");
    int ok = j && code == 0 && cJSON_IsString(st) && !strcmp(st->valuestring, "trainer");
    for (int k = 0; k < 4; k++) {
        char path[96];
        snprintf(path, sizeof path, "memory_bytes.by_category.%s", K[k]);
        double got = jnum(j, path);
        if (!(got == want[k] && got == (double)lb[C[k]])) {
            if (ok) snprintf(detail, n, "dp %d zero %d %s %s: %s %.0f, hand %.0f, layout_zero_bytes %zu", TINY_DP[i], zero,
                             prec, extra, K[k], got, want[k], lb[C[k]]);
            ok = 0;
        }
    }
    cJSON_Delete(j);
    return ok;
}

static void test_plan_per_rank(void) {
    static const char *const P[3] = {"fp32", "bf16", "fp16"};
    int ok = 1, runs = 0;
    char detail[256] = "";
    for (int i = 0; i < 3; i++)
        for (int z = 0; z < 4; z++)
            for (int p = 0; p < 3; p++, runs++) ok &= plan_grid_matches(i, z, P[p], "", detail, ok ? sizeof detail : 0);
    tu_check(ok, "plan --json per-rank bytes == hand arithmetic == layout_zero_bytes (dp 1/2/4, ZeRO 0-3, 3 precisions)",
             "%d plans; %s", runs, ok ? "all equal" : detail);
    /* Activations and workspace under each precision: layout_memory_plan's, which test_memory checks
     * against the trainer's allocation (so plan == trainer by transitivity). */
    ModelConfig c = tiny_config();
    int wok = 1, wctrl = 0;
    char wd[200] = "";
    for (int p = 0; p < 3; p++) {
        char args[256];
        snprintf(args, sizeof args, "--layers 1 --heads 1 --channels 16 --vocab 60 --max-seq-len 9 --seq-len 8 "
                 "--micro-batch 1 --threads 2 --precision %s", P[p]);
        cJSON *j = plan_json(args, NULL);
        size_t mb[MEM_NCAT];
        ActOptions ao = layout_act_options(1, 8, 2);
        ao.precision = p;
        layout_memory_plan(&c, &ao, 2, mb);
        double ws = jnum(j, "memory_bytes.workspace"), ac = jnum(j, "memory_bytes.activations");
        if (ws != (double)mb[MEM_WORKSPACE] || ac != (double)mb[MEM_ACTIVATIONS]) {
            wok = 0;
            snprintf(wd, sizeof wd, "%s: workspace %.0f vs %zu, activations %.0f vs %zu", P[p], ws, mb[MEM_WORKSPACE], ac,
                     mb[MEM_ACTIVATIONS]);
        }
        /* Negative control: another precision's figures must not match. */
        ao.precision = (p + 1) % 3;
        layout_memory_plan(&c, &ao, 2, mb);
        wctrl += ws != (double)mb[MEM_WORKSPACE];
        cJSON_Delete(j);
    }
    tu_check(wok, "plan --json activations and workspace == layout_memory_plan (fp32, bf16, fp16)", "%s",
             wok ? "equal" : wd);
    tu_check(wctrl == 3, "negative control: another precision's workspace differs", "%d of 3 differ", wctrl);
    /* Negative control: 2-byte gradients (not what the trainer allocates) must be detected. */
    char d2[256] = "";
    int bad = !plan_grid_matches(1, 2, "bf16", "--grad-bytes 2", d2, sizeof d2);
    tu_check(bad, "negative control: plan with --grad-bytes 2 differs from the trainer's bytes", "%s", d2);
}

/* ---- every plan option changes what it should (issue 12: flags that do nothing are defects) ----
 * Oracle: for each option, the JSON field it drives differs between a baseline plan and the plan with
 * the option changed (exact comparison of the printed values). Every option `plan --help` lists must
 * be in the table or among the three checked separately below (--json, --measure-hardware,
 * --measure-threads), so a new option without an effect test fails the completeness check. Negative
 * controls: the same comparison on a variant equal to the baseline, and on an option that by design
 * does not touch the field (--mtbf vs the memory total), must report "unchanged". */
#define PB "--model d6 --vocab 257 --micro-batch 4 --seq-len 128"
#define PLLAMA "--model llama-7b --micro-batch 1 --seq-len 512"
typedef struct { const char *option, *base, *variant, *field; } OptionEffect;
static const OptionEffect OPTION_EFFECTS[] = {
    {"model", PB, "--model d4 --vocab 257 --micro-batch 4 --seq-len 128", "parameters.total"}, /* flags once each */
    {"arch", "--layers 2 --heads 2 --channels 128 --seq-len 128", "--layers 2 --heads 2 --channels 128 --seq-len 128 --arch llama",
     "model.arch"},
    {"layers", PB, PB " --layers 4", "parameters.total"},
    {"heads", PB, PB " --heads 3", "activations.per_layer_exact"},
    {"kv-heads", PB, PB " --kv-heads 3", "parameters.total"},
    {"tie-embeddings", PLLAMA, PLLAMA " --tie-embeddings", "parameters.total"},
    {"channels", PB, PB " --channels 192", "parameters.total"},
    {"ffn", PB, PB " --ffn 1024", "parameters.total"},
    {"vocab", PB, "--model d6 --vocab 300 --micro-batch 4 --seq-len 128", "parameters.total"},
    {"max-seq-len", PB, PB " --max-seq-len 512", "parameters.total"},
    {"params", "--params 1e9", "--params 2e9", "parameters.total"},
    {"micro-batch", PB, "--model d6 --vocab 257 --micro-batch 2 --seq-len 128", "batch.tokens"},
    {"seq-len", PB, "--model d6 --vocab 257 --micro-batch 4 --seq-len 64", "batch.tokens"},
    {"grad-accum", PB, PB " --grad-accum 2", "batch.tokens"},
    {"global-batch", PB, PB " --global-batch 8", "batch.grad_accum"},
    {"dp", PB, PB " --dp 2", "batch.tokens"},
    {"tp", PB, PB " --tp 2", "parameters.per_device"},
    {"pp", PB, PB " --pp 2", "parameters.per_device"},
    {"sp", PB " --tp 2", PB " --tp 2 --sp", "activations.per_layer_korthikanti"},
    {"zero", PB " --dp 2", PB " --dp 2 --zero 1", "memory_bytes.moments"},
    {"lora-rank", PB " --lora-rank 4", PB " --lora-rank 8", "lora.adapter_params"},
    {"lora-targets", PB " --lora-rank 4", PB " --lora-rank 4 --lora-targets all", "lora.total_bytes_per_rank"},
    {"lora-base-precision", PB " --lora-rank 4", PB " --lora-rank 4 --lora-base-precision bf16", "lora.total_bytes_per_rank"},
    {"lora-dropout", PB " --lora-rank 4", PB " --lora-rank 4 --lora-dropout 0.1", "lora.compute.t_dropout"},
    {"recompute", PB, PB " --recompute full", "compute.hw_flops_per_token"},
    {"recompute", PB, PB " --recompute selective", "memory_bytes.activations"}, /* exact at tp 1 too */
    {"pp-microbatches", PB " --pp 2 --grad-accum 4", PB " --pp 2 --grad-accum 4 --pp-microbatches 2", "pipeline.bubble"},
    {"interleave", PB " --pp 2 --grad-accum 4", PB " --pp 2 --grad-accum 4 --interleave 3", "pipeline.bubble_interleaved"},
    {"pp-schedule", PB " --pp 2 --grad-accum 4", PB " --pp 2 --grad-accum 4 --pp-schedule zb-h1", "pipeline.bubble_schedule"},
    {"pp-schedule", PB " --pp 2 --grad-accum 4", PB " --pp 2 --grad-accum 4 --pp-schedule gpipe", "pipeline.peak_inflight_stage0"},
    {"pp-print-schedule", PB " --pp 2 --grad-accum 4", PB " --pp 2 --grad-accum 4 --pp-print-schedule", "pipeline.schedule_print"},
    {"pp-layers", PB " --pp 2 --grad-accum 4", PB " --pp 2 --grad-accum 4 --pp-layers 1,5", "pipeline.stages"},
    {"precision", PB, PB " --precision bf16", "memory_bytes.weights"},
    {"precision", PB, PB " --precision bf16", "memory_bytes.activations"},          /* exact: bf16 LN/GELU outputs */
    {"precision", PLLAMA, PLLAMA " --precision bf16", "memory_bytes.activations"},  /* paper: 4 → 2-byte activations */
    {"weight-bytes", PB, PB " --weight-bytes 2", "memory_bytes.weights"},
    {"grad-bytes", PB, PB " --grad-bytes 2", "memory_bytes.gradients"},
    {"accounting", PB " --precision bf16", PB " --precision bf16 --accounting megatron", "memory_bytes.gradients"},
    {"master-bytes", PB, PB " --master-bytes 4", "memory_bytes.master"},
    {"moment-bytes", PB, PB " --moment-bytes 2", "memory_bytes.moments"},
    {"act-bytes", PB " --activations paper", PB " --activations paper --act-bytes 2", "memory_bytes.activations"},
    {"act-bytes", PLLAMA, PLLAMA " --act-bytes 1", "memory_bytes.activations"},
    {"optimizer", PB, PB " --optimizer sgd", "memory_bytes.moments"},
    {"shampoo-block", PB " --optimizer shampoo", PB " --optimizer shampoo --shampoo-block 64", "memory_bytes.moments"},
    {"precond-every", PB " --optimizer shampoo", PB " --optimizer shampoo --precond-every 1", "compute.time_s.optimizer"},
    {"hess-every", PB " --optimizer sophia", PB " --optimizer sophia --hess-every 2", "compute.time_s.hessian"},
    {"moments", PB, PB " --moments 1", "memory_bytes.moments"},
    {"activations", PB, PB " --activations paper", "activations.mode"},
    {"threads", PB " --threads 1", PB " --threads 8", "memory_bytes.workspace"},
    {"hardware", PB, PB " --hardware H100", "hardware.name"},
    {"nodes", PB, PB " --nodes 2", "layout.world"},
    {"devices-per-node", PB " --dp 2", PB " --dp 2 --devices-per-node 2", "layout.nodes"},
    {"peak-tflops", PB, PB " --peak-tflops 1", "compute.peak_flops"},
    {"memory-gib", PB, PB " --memory-gib 1", "memory_bytes.device"},
    {"mem-bw-gbs", PB, PB " --mem-bw-gbs 100", "compute.time_s.elementwise"},
    {"intra-bw-gbs", PB " --dp 2 --devices-per-node 2", PB " --dp 2 --devices-per-node 2 --intra-bw-gbs 1",
     "communication.dp_allreduce_s"},
    {"inter-bw-gbs", PB " --dp 2", PB " --dp 2 --inter-bw-gbs 1", "communication.dp_allreduce_s"},
    {"intra-lat-us", PB " --dp 2 --devices-per-node 2", PB " --dp 2 --devices-per-node 2 --intra-lat-us 500",
     "communication.dp_allreduce_s"},
    {"inter-lat-us", PB " --dp 2", PB " --dp 2 --inter-lat-us 500", "communication.dp_allreduce_s"},
    {"matmul-eff", PB, PB " --matmul-eff 0.5", "compute.time_s.matmul"},
    {"storage-bw-gbs", PB, PB " --storage-bw-gbs 5", "checkpoint.write_s"},
    {"no-overlap", PB " --dp 2", PB " --dp 2 --no-overlap", "compute.step_s"},
    {"no-noise-scale", PB " --dp 2", PB " --dp 2 --no-noise-scale", "comm_bytes_by_kind.scalar collective"},
    {"tokens", PB, PB " --tokens 1e9", "batch.budget_tokens"},
    {"flops", PB, PB " --flops 1e15", "batch.budget_tokens"},
    {"flops", PB, PB " --flops 1e15", "scaling.hoffmann2022.budget_flops"},
    {"scaling", PB, PB " --scaling " TMP "/fit.json", "scaling.overtrained_by"},
    {"days", PB, PB " --days 1", "batch.budget_tokens"},
    {"target-days", PB, PB " --target-days 1", "compute.mfu_required"},
    {"mtbf", PB, PB " --mtbf 1", "checkpoint.interval_s"},
    {"dropout", PB, PB " --dropout 0.1", "compute.time_s.dropout"},
    {"doc-mask", PB, PB " --doc-mask --mean-doc-len 64", "compute.flops_per_token"},
    {"mean-doc-len", PB " --doc-mask --mean-doc-len 64", PB " --doc-mask --mean-doc-len 32", "compute.flops_per_token"},
    {"config", PB, PB " --config " TMP "/dp2.json", "layout.dp"},
};

/* `plan ARGS --json` once per distinct ARGS: the table's 72 rows (144 commands) hold about 80
 * distinct ones (15 baselines), and each run of the binary costs 0.1 s under ASan (the 144 took
 * 19 s, 2026-11-27). plan's JSON is a function of its arguments (the tests run without the
 * measured-profile cache), so a repeat would print the same. */
static struct {
    const char *args;
    cJSON *j;
} g_plans[160];
static int g_nplans;

static const cJSON *plan_json_once(const char *args) {
    for (int i = 0; i < g_nplans; i++)
        if (!strcmp(g_plans[i].args, args)) return g_plans[i].j;
    cJSON *j = plan_json(args, NULL);
    if (g_nplans < (int)(sizeof g_plans / sizeof g_plans[0])) g_plans[g_nplans].args = args, g_plans[g_nplans++].j = j;
    else cJSON_Delete(j), j = NULL; /* over the table: the row reads as missing and fails, not silently passes */
    return j;
}

static void plans_forget(void) {
    for (int i = 0; i < g_nplans; i++) cJSON_Delete(g_plans[i].j);
    g_nplans = 0;
}

/* The field's printed value in the baseline and the variant plan; 1 if they differ (and both exist). */
static int option_changes(const OptionEffect *o, char *detail, size_t n) {
    const cJSON *a = plan_json_once(o->base), *b = plan_json_once(o->variant);
    const cJSON *fa = jpath(a, o->field), *fb = jpath(b, o->field);
    char *sa = fa ? cJSON_PrintUnformatted(fa) : NULL, *sb = fb ? cJSON_PrintUnformatted(fb) : NULL;
    int changed = sa && sb && strcmp(sa, sb) != 0;
    snprintf(detail, n, "--%s: %s %s -> %s", o->option, o->field, sa ? sa : "(missing)", sb ? sb : "(missing)");
    free(sa);
    free(sb);
    return changed;
}

static void test_option_effects(void) {
    Err e;
    file_mkdirs(TMP, &e);
    FILE *f = fopen(TMP "/dp2.json", "w");
    if (f) fputs("{\"dp\": 2}\n", f), fclose(f);
    /* A `fit --json` result for --scaling (only approach3 is read). */
    f = fopen(TMP "/fit.json", "w");
    if (f) fputs("{\"approach3\": {\"E\": 1.8, \"A\": 500, \"B\": 1000, \"alpha\": 0.35, \"beta\": 0.36}}\n", f), fclose(f);
    size_t nt = sizeof OPTION_EFFECTS / sizeof OPTION_EFFECTS[0];
    int inert = 0;
    char first[320] = "";
    for (size_t i = 0; i < nt; i++) {
        char d[320];
        if (!option_changes(&OPTION_EFFECTS[i], d, sizeof d)) {
            if (!inert) snprintf(first, sizeof first, "%s", d);
            inert++;
        }
    }
    tu_check(inert == 0, "plan: every option in the table changes its field", "%zu entries, %d without effect%s%s", nt,
             inert, inert ? ": " : "", first);
    /* Completeness: every option of `plan --help` is in the table or checked below. */
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s plan --help > %s/help.txt", BIN, TMP);
    int rc = system(cmd);
    char *help = tu_slurp(TMP "/help.txt");
    static const char *const separately[] = {"json", "measure-hardware", "measure-threads", "measure-copies"};
    int nopt = 0, missing = 0;
    char miss[256] = "";
    for (char *line = help; rc == 0 && line && *line;) {
        char *nl = strchr(line, '\n');
        char name[64];
        if (sscanf(line, "  --%63[a-z0-9-]", name) == 1) {
            int found = 0;
            for (size_t i = 0; i < nt; i++) found |= !strcmp(OPTION_EFFECTS[i].option, name);
            for (size_t i = 0; i < sizeof separately / sizeof separately[0]; i++) found |= !strcmp(separately[i], name);
            nopt++;
            if (!found) {
                missing++;
                snprintf(miss + strlen(miss), sizeof miss - strlen(miss), " --%s", name);
            }
        }
        line = nl ? nl + 1 : NULL;
    }
    free(help);
    tu_check(rc == 0 && nopt > 40 && missing == 0, "plan: every option of --help has an effect test",
             "%d options, %d missing%s", nopt, missing, miss);
    /* Negative controls of the comparison itself. */
    char d1[320], d2[320];
    OptionEffect same = {"micro-batch", PB, "--model d6 --vocab 257 --seq-len 128 --micro-batch 4", "batch.tokens"};
    OptionEffect byd = {"mtbf", PB, PB " --mtbf 1", "memory_bytes.total"};
    int c1 = option_changes(&same, d1, sizeof d1), c2 = option_changes(&byd, d2, sizeof d2);
    tu_check(!c1 && !c2, "negative control: the baseline's own value and an option that does not drive the field "
             "report no change", "%s; %s", d1, d2);
    plans_forget();
    /* The values, where the option fixes them exactly: --flops F budgets F. */
    cJSON *j = plan_json(PB " --flops 1e15", NULL);
    double tot = jnum(j, "compute.total_flops"), sb = jnum(j, "scaling.hoffmann2022.budget_flops"),
           tok = jnum(j, "batch.budget_tokens"), fpt = jnum(j, "compute.flops_per_token");
    tu_check(tot == 1e15 && sb == 1e15 && rel(tok * fpt, 1e15) < 1e-15, "plan --flops 1e15 budgets 1e15 FLOPs",
             "exact total %.17g, scaling C %.17g, tokens x FLOP/token %.17g", tot, sb, tok * fpt);
    cJSON_Delete(j);
    /* --json: without it the review is text. */
    snprintf(cmd, sizeof cmd, "%s plan " PB " > %s/review.txt", BIN, TMP);
    rc = system(cmd);
    char *text = tu_slurp(TMP "/review.txt");
    cJSON *pj = text ? cJSON_Parse(text) : NULL;
    tu_check(rc == 0 && text && !pj && strstr(text, "== scaletrain plan") == text, "plan: --json (text without it)",
             "%zu bytes of text", text ? strlen(text) : 0);
    /* The first line names the profile that priced the plan, and says when it is only the default. */
    const char *dflt = "== scaletrain plan, priced on hardware profile cpu-zen4-2c (the default:";
    tu_check(text && strncmp(text, dflt, strlen(dflt)) == 0, "plan: the first line names the default profile",
             "%.120s", text ? text : "(none)");
    cJSON_Delete(pj);
    free(text);
    snprintf(cmd, sizeof cmd, "%s plan " PB " --hardware H100 > %s/review_h100.txt", BIN, TMP);
    rc = system(cmd);
    text = tu_slurp(TMP "/review_h100.txt");
    const char *h100 = "== scaletrain plan, priced on hardware profile H100 ==\n";
    tu_check(rc == 0 && text && strncmp(text, h100, strlen(h100)) == 0 && !strstr(text, "(the default"),
             "plan --hardware H100: the first line names H100, not a default (control for the check above)", "%.120s",
             text ? text : "(none)");
    free(text);
    cJSON *jd = plan_json(PB, NULL), *jh = plan_json(PB " --hardware H100", NULL);
    const cJSON *hd1 = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(jd, "hardware"), "default");
    const cJSON *hd2 = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(jh, "hardware"), "default");
    tu_check(cJSON_IsTrue(hd1) && cJSON_IsFalse(hd2), "plan --json: hardware.default true without --hardware, false with it",
             "%s / %s", cJSON_IsTrue(hd1) ? "true" : "not true", cJSON_IsFalse(hd2) ? "false" : "not false");
    cJSON_Delete(jd), cJSON_Delete(jh);
}

/* plan's --threads default (and --threads 0) is the trainer's for one rank: the CPUs this process
 * may run on, as its affinity mask counts them here. Control: one thread more prices another
 * workspace (the attention scratch is per thread). */
static void test_default_threads(void) {
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;
    int allowed = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : (int)online;
    int k = allowed < online ? allowed : (int)online;
    k = k < 1 ? 1 : k > 1023 ? 1023 : k;
    char a[160], b[160];
    snprintf(a, sizeof a, PB " --threads %d", k);
    snprintf(b, sizeof b, PB " --threads %d", k + 1);
    cJSON *jd = plan_json(PB, NULL), *j0 = plan_json(PB " --threads 0", NULL), *jk = plan_json(a, NULL), *jk1 = plan_json(b, NULL);
    double wd = jnum(jd, "memory_bytes.workspace"), w0 = jnum(j0, "memory_bytes.workspace"),
           wk = jnum(jk, "memory_bytes.workspace"), wk1 = jnum(jk1, "memory_bytes.workspace");
    tu_check(jd && j0 && jk && wd == wk && w0 == wk, "plan: no --threads and --threads 0 price this process's CPUs",
             "workspace %.0f / %.0f B, at --threads %d (CPUs allowed %d, online %ld) %.0f B", wd, w0, k, allowed, online, wk);
    tu_check(jk1 && wk1 != wk, "control: one thread more prices another workspace", "--threads %d: %.0f B, %d: %.0f B", k,
             wk, k + 1, wk1);
    cJSON_Delete(jd), cJSON_Delete(j0), cJSON_Delete(jk), cJSON_Delete(jk1);
}

/* A bf16 matmul costs FLOPs / (peak_bf16 x matmul_eff_bf16) where the profile has that efficiency
 * (a measured CPU profile since 2026-11-29: on a Xeon without AMX bf16 GEMMs reach 0.43 of a peak
 * the fp32 FMA sets), and the implied MFU divides by peak_bf16, the trainer's MFU peak. Closed forms
 * over plan_predict_step's own FLOPs per token; control: the same profile without the bf16
 * efficiency prices bf16 at matmul_eff (its t_matmul is the 0.43/0.65 fraction of the first). Also
 * the profile's JSON: the field round-trips, and a profile written before it reads as 0. */
static void test_bf16_efficiency(void) {
    PlanInput in = plan_default_input();
    Err e;
    plan_model_preset(&in.model, "d6", &e);
    in.model.vocab = 50257;
    plan_precision_trainer(&in.prec, "bf16", &e);
    in.hw.peak_fp32 = 355e9, in.hw.peak_bf16 = 355e9, in.hw.matmul_eff = 0.65, in.hw.matmul_eff_bf16 = 0.43;
    PlanResult r, r0;
    Status s1 = plan_predict_step(&in, &r, &e);
    double tokens = (double)in.micro_batch * in.seq_len * in.grad_accum;
    double want = r.compute.fpt_hw * tokens / (355e9 * 0.43), mfu = r.compute.fpt * r.compute.tokens_per_s / 355e9;
    tu_check(s1 == ST_OK && rel(r.compute.t_matmul, want) < 1e-12 && rel(r.compute.mfu, mfu) < 1e-12,
             "bf16 matmuls at peak_bf16 x matmul_eff_bf16, MFU over peak_bf16", "t_matmul %.6g s (closed form %.6g), "
             "MFU %.4f (closed form %.4f)", r.compute.t_matmul, want, r.compute.mfu, mfu);
    in.hw.matmul_eff_bf16 = 0;
    Status s0 = plan_predict_step(&in, &r0, &e);
    tu_check(s0 == ST_OK && rel(r0.compute.t_matmul / r.compute.t_matmul, 0.43 / 0.65) < 1e-12,
             "control: without matmul_eff_bf16, bf16 is priced at matmul_eff", "t_matmul %.6g s against %.6g s",
             r0.compute.t_matmul, r.compute.t_matmul);
    in.hw.matmul_eff_bf16 = 0.43;
    cJSON *j = plan_hardware_to_json(&in.hw);
    PlanHardware back, old;
    Status sj = plan_hardware_from_json(&back, j, &e);
    cJSON_DeleteItemFromObject(j, "matmul_eff_bf16");
    Status so = plan_hardware_from_json(&old, j, &e);
    cJSON_Delete(j);
    tu_check(sj == ST_OK && back.matmul_eff_bf16 == 0.43 && so == ST_OK && old.matmul_eff_bf16 == 0,
             "matmul_eff_bf16 in the profile's JSON", "read back %g; a profile without it: %g", back.matmul_eff_bf16,
             old.matmul_eff_bf16);
}

/* LoRA's step (plan_lora_step) from the full plan of the same input, in closed forms: the matmul
 * time scaled by LoRA's FLOPs per token over full training's (layout_lora_flops_per_token, whose
 * count test_lora checks against the GEMMs a frozen step runs), elementwise and tp as full's,
 * the adapters' fp32 gradients over dp 4 as one ring all-reduce 2·3/4·S/bw + 2·3·lat (S: 4 bytes per
 * adapter parameter of the tp rank), AdamW's 28 bytes per updated float, MFU over world · peak.
 * Control: ZeRO 1 adds exactly one ring all-gather of S (its updated shards), 3/4·S/bw + 3·lat. */
static void test_lora_step(void) {
    PlanInput in = plan_default_input();
    Err e;
    plan_model_preset(&in.model, "d6", &e);
    in.model.vocab = 50257;
    in.dp = 4, in.world = 4;
    PlanResult r;
    Status s = plan_predict_step(&in, &r, &e);
    ModelConfig mc;
    int okc = plan_model_to_config(&in.model, &mc) && model_config_validate(&mc, &e) == ST_OK;
    double P = 73728, local = P, fpt = okc ? layout_lora_flops_per_token(&mc, in.seq_len, P) : 0;
    PlanLoraStep l0, l1;
    Status s0 = plan_lora_step(&in, &r, P, local, 0, 0, &l0, &e), s1 = plan_lora_step(&in, &r, P, local / 4, 0, 1, &l1, &e);
    const PlanHardware *hw = &in.hw;
    double S = 4.0 * P, bw = r.comm.dp_inter ? hw->inter_bw : hw->intra_bw, lat = r.comm.dp_inter ? hw->inter_lat : hw->intra_lat;
    double ar = 2.0 * 3 / 4 * S / bw + 2.0 * 3 * lat, ag = 3.0 / 4 * S / bw + 3 * lat;
    double step = r.compute.t_matmul * fpt / r.compute.fpt_hw + r.compute.t_elementwise + r.compute.t_tp + ar + local * 28 / hw->mem_bw;
    double tok = (double)r.batch_tokens / step, mfu = fpt * tok / (4 * r.compute.peak);
    tu_check(s == ST_OK && s0 == ST_OK && okc && l0.fpt == fpt && rel(l0.t_dp, ar) < 1e-12 && rel(l0.step, step) < 1e-12 &&
                 rel(l0.mfu, mfu) < 1e-12 && l0.fpt < r.compute.fpt,
             "plan_lora_step: LoRA FLOPs, the full plan's rates, the adapters' all-reduce, AdamW over them",
             "fpt %.4g (full %.4g), step %.6g s (closed form %.6g), dp %.3g s (%.3g), MFU %.4f (%.4f)", l0.fpt, r.compute.fpt,
             l0.step, step, l0.t_dp, ar, l0.mfu, mfu);
    tu_check(s1 == ST_OK && rel(l1.t_dp - l0.t_dp, ag) < 1e-9, "control: ZeRO 1 adds the all-gather of the updated shards",
             "ZeRO 1 %.6g s, ZeRO 0 %.6g s, all-gather %.6g s", l1.t_dp, l0.t_dp, ag);
    /* --lora-dropout: the adapters' inputs (GPT-2 d6, all targets: c_attn, attn c_proj, c_fc C wide,
     * the MLP's c_proj 4C: 7·C per block) drawn three times per token (forward; backward for A's
     * gradient and through the mask) at the profile's rate; without --lora-dropout none. */
    LoraConfig lc = {4, 8.0f, 0.0f, 0, 0};
    LoraLayout ll;
    int okl = okc && lora_parse_targets("all", &mc, &lc.targets, &e) == ST_OK && lora_layout_init(&ll, &mc, &lc, 1, &e) == ST_OK;
    double W = okl ? lora_input_width(&ll) : 0, want_w = 7.0 * 384 * 6;
    in.lora_dropout = 0.1, in.hw.drop_rate = 5e8;
    PlanLoraStep l2;
    Status s2 = plan_lora_step(&in, &r, P, local, W, 0, &l2, &e);
    double want_t = 3.0 * want_w * in.micro_batch * in.seq_len * in.grad_accum / 5e8;
    tu_check(okl && W == want_w && s2 == ST_OK && rel(l2.t_dropout, want_t) < 1e-12 &&
                 rel(l2.t_elementwise - l0.t_elementwise, want_t) < 1e-9 && l0.t_dropout == 0,
             "--lora-dropout: 3 draws per adapter input per token, inside elementwise",
             "input width %.0f (7CL %.0f), %.4g s (closed form %.4g); none without it: %g", W, want_w, l2.t_dropout, want_t,
             l0.t_dropout);
}

/* The checkpoint's size against a checkpoint the trainer writes (fp32 and bf16, the files of its
 * step directory summed): within 2% (safetensors and JSON headers), and the bf16 size equal to the
 * fp32 one (the fp32 weights are the master copy; a master term priced bf16 4 bytes/param over,
 * 1.33x: that is the control, the old formula computed here must miss by more than 20%). */
static void test_ckpt_size(void) {
    const char *shape = "--layers 2 --heads 2 --channels 64 --max-seq-len 64 --seq-len 64 --micro-batch 2";
    double plan[2] = {0, 0}, disk[2] = {0, 0}, moments = 0, n = 0;
    for (int b = 0; b < 2; b++) {
        char args[512], cmd[1024];
        const char *prec = b ? "bf16" : "fp32";
        snprintf(args, sizeof args, "%s --vocab 257 --precision %s", shape, prec);
        cJSON *j = plan_json(args, NULL);
        plan[b] = jnum(j, "checkpoint.bytes"), n = jnum(j, "parameters.total"), moments = jnum(j, "precision.moments");
        cJSON_Delete(j);
        snprintf(cmd, sizeof cmd, "rm -rf " TMP "/cks && %s train %s --precision %s --steps 1 --val-every 0 --quiet "
                 "--ckpt-dir " TMP "/cks >/dev/null 2>&1 && du -cb " TMP "/cks/step_00000001/* | tail -1 | cut -f1 > " TMP
                 "/cks.size", BIN, shape, prec);
        char *t = system(cmd) == 0 ? tu_slurp(TMP "/cks.size") : NULL;
        disk[b] = t ? atof(t) : -1;
        free(t);
    }
    double old_bf16 = n * (4.0 + 4.0 + moments * 4.0); /* the formula before: + a 4-byte master */
    tu_check(fabs(plan[0] / disk[0] - 1) < 0.02 && fabs(plan[1] / disk[1] - 1) < 0.02 && plan[0] == plan[1] &&
                 fabs(old_bf16 / disk[1] - 1) > 0.2,
             "plan's checkpoint size = what the trainer writes, fp32 and bf16", "plan %.0f / %.0f bytes, on disk %.0f / %.0f; "
             "the formula with a master term %.0f", plan[0], plan[1], disk[0], disk[1], old_bf16);
}

/* The trainer's GEMM check of a cached peak (machine_peak_speed): the start record's gemm_check and
 * the end record's gemm_check{start, end} are the median 512^3 call's rate over the cached GEMM
 * figure, and under 0.9 the console says so ("machine: GEMMs ran at ..."). Oracle: the cache
 * test_trainer_cached_profile left (a real measurement of this machine), its bf16 1-thread entry's
 * GEMM figure planted at 1e15 FLOP/s (no CPU runs a 512^3 GEMM at 1 PFLOP/s): both figures < 1e-2
 * and the line printed. Controls: planted at 1e6 (under anything measured: the check raises it to
 * its best call, so the median over it is in (0.2, 1]: not the planted one), and without a cache
 * (ST_PEAK_CACHE=off: measured afresh, no check) neither field is written. `plan` on the same caches
 * (its default profile, the cached one) notes 0.00 against 1e15, and above 0.2 or nothing against 1e6. */
static void test_trainer_speed_check(void) {
    const char *shape = "--layers 2 --heads 2 --channels 64 --vocab 257 --max-seq-len 64 --micro-batch 4 --seq-len 64 "
                        "--threads 1 --precision bf16";
    double start[3] = {-1, -1, -1}, end_s[3] = {-1, -1, -1}, end_e[3] = {-1, -1, -1};
    int line[3] = {0, 0, 0}, planted = 0;
    double plan_speed[2] = {-1, -1};
    for (int k = 0; k < 3; k++) {
        char cmd[4096], cache[256] = "off";
        if (k < 2) { /* the cache with the bf16 1-thread entry's GEMM figure replaced */
            char *text = tu_slurp(TMP "/pc.json");
            cJSON *doc = text ? cJSON_Parse(text) : NULL, *e;
            free(text);
            cJSON_ArrayForEach(e, cJSON_GetObjectItem(doc, "entries")) {
                const cJSON *pr = cJSON_GetObjectItem(e, "precision"), *th = cJSON_GetObjectItem(e, "threads");
                if (cJSON_IsString(pr) && !strcmp(pr->valuestring, "bf16") && cJSON_IsNumber(th) && th->valueint == 1)
                    cJSON_ReplaceItemInObject(e, "gemm_flops", cJSON_CreateNumber(k == 0 ? 1e15 : 1e6)), planted++;
            }
            char *out = doc ? cJSON_Print(doc) : NULL;
            FILE *f = out ? fopen(TMP "/pcs.json", "w") : NULL;
            if (f) fputs(out, f), fclose(f);
            free(out), cJSON_Delete(doc);
            snprintf(cache, sizeof cache, "%s", TMP "/pcs.json");
        }
        snprintf(cmd, sizeof cmd, "rm -f %s/sc.jsonl && ST_PEAK_CACHE=%s %s train --data '%s/sh/train_*.bin' %s "
                 "--steps 1 --log %s/sc.jsonl > %s/sc.out 2>&1", TMP, cache, BIN, TMP, shape, TMP, TMP);
        cJSON *all = tu_shell(cmd) ? tu_log_records(TMP "/sc.jsonl") : NULL, *o;
        cJSON_ArrayForEach(o, all) {
            const char *ev = cJSON_GetObjectItem(o, "event")->valuestring;
            if (!strcmp(ev, "start")) start[k] = cJSON_GetObjectItem(o, "gemm_check") ? jnum(o, "gemm_check") : 0;
            if (!strcmp(ev, "end")) {
                end_s[k] = cJSON_GetObjectItem(o, "gemm_check") ? jnum(o, "gemm_check.start") : 0;
                end_e[k] = cJSON_GetObjectItem(o, "gemm_check") ? jnum(o, "gemm_check.end") : 0;
            }
        }
        cJSON_Delete(all);
        char *con = tu_slurp(TMP "/sc.out");
        line[k] = con && strstr(con, "machine: GEMMs ran at 0.00 of this machine's cached figures at start; 0.00 at the end");
        free(con);
        if (k < 2) { /* `plan` on the same cache: its note's figure, or 1 without a note */
            snprintf(cmd, sizeof cmd, "ST_PEAK_CACHE=%s %s plan %s > /dev/null 2> %s/sp.err", cache, BIN, shape, TMP);
            char *pe = tu_shell(cmd) ? tu_slurp(TMP "/sp.err") : NULL;
            const char *at = pe ? strstr(pe, "plan: this machine runs GEMMs at ") : NULL;
            plan_speed[k] = !pe ? -1 : at ? atof(at + strlen("plan: this machine runs GEMMs at ")) : 1;
            free(pe);
        }
    }
    /* planted 2: the one entry, in each of the two caches */
    tu_check(planted == 2 && start[0] > 0 && start[0] < 1e-2 && end_s[0] == start[0] && end_e[0] > 0 && end_e[0] < 1e-2 &&
                 line[0],
             "the trainer's GEMM check against a cached figure no CPU reaches (1e15): start and end records, console line",
             "planted %d, start %g, end {%g, %g}, line %d", planted, start[0], end_s[0], end_e[0], line[0]);
    tu_check(start[1] > 0.2 && start[1] <= 1 && end_e[1] > 0.2 && end_e[1] <= 1,
             "control: a cached figure under the machine's (1e6) is raised, the check reads this machine's speed",
             "start %g, end %g", start[1], end_e[1]);
    tu_check(start[2] == 0 && end_s[2] == 0 && !line[2], "control: a peak measured afresh (no cache) has no check",
             "start %g, end %g, line %d", start[2], end_s[2], line[2]);
    tu_check(plan_speed[0] == 0 && plan_speed[1] > 0.2, "plan on the cached profile says how fast the machine runs now: "
             "0.00 against the 1e15 figure, above 0.2 (or no note) against the 1e6 one (control)", "%g, %g",
             plan_speed[0], plan_speed[1]);
}

/* The trainer's own plan (the start record's plan.step_ms) prices on this machine's cached profile
 * when it has one, as `plan` does by default: a profile planted in a private cache (ST_PEAK_CACHE)
 * for 1 thread, a bf16 run at --threads 1, and `plan --hardware` of the same profile and shape must
 * give the same step time to 1e-12 (two builders of the plan's input over one function).
 * Until 2026-11-29 the trainer priced on the Zen 4 preset's efficiency and bf16 peak with its
 * measured peak: a bf16 step on a Xeon without AMX 2.2x too fast. Control: with no cache
 * (ST_PEAK_CACHE=off) the start record's step time is another. */
static void test_trainer_cached_profile(void) {
    char cmd[4096];
    const char *shape = "--layers 2 --heads 2 --channels 64 --vocab 257 --max-seq-len 64 --micro-batch 4 --seq-len 64 "
                        "--threads 1 --precision bf16";
    FILE *f = fopen(TMP "/planted.json", "w");
    if (f)
        fputs("{\"name\": \"planted\", \"peak_fp32\": 1e11, \"peak_bf16\": 1e11, \"peak_fp16\": 1e11, \"memory\": 25e9, "
              "\"mem_bw\": 2e10, \"intra_bw\": 1e10, \"inter_bw\": 1.25e9, \"intra_lat\": 1e-6, \"inter_lat\": 3e-5, "
              "\"matmul_eff\": 0.5, \"matmul_eff_bf16\": 0.25, \"storage_bw\": 5e8, \"backend_bytes\": 0, "
              "\"devices_per_node\": 1}\n", f),
            fclose(f);
    /* this machine's key fields in the cache come from a real (1-thread) measurement; its profile is then replaced */
    snprintf(cmd, sizeof cmd, "rm -f %s/pc.json && ST_PEAK_CACHE=%s/pc.json %s plan --measure-hardware %s/m.json "
             "--measure-threads 1 > /dev/null 2>&1 && %s prepare --tokenizer bytes --val-fraction 0 --quiet --out %s/sh "
             "%s/data/tinyshakespeare/input.txt > /dev/null 2>&1", TMP, TMP, BIN, TMP, BIN, TMP, ST_SOURCE_DIR);
    int ok = f && tu_shell(cmd);
    char *text = ok ? tu_slurp(TMP "/pc.json") : NULL, *ptext = ok ? tu_slurp(TMP "/planted.json") : NULL;
    cJSON *cache = text ? cJSON_Parse(text) : NULL, *e;
    int planted = 0;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(cache, "profiles")) {
        cJSON_ReplaceItemInObject(e, "profile", cJSON_Parse(ptext));
        planted++;
    }
    char *out = cache ? cJSON_Print(cache) : NULL;
    if ((f = out ? fopen(TMP "/pc.json", "w") : NULL)) fputs(out, f), fclose(f);
    free(out), free(text), free(ptext), cJSON_Delete(cache);
    double want = 0, got[2] = {0, 0};
    if (planted == 1) {
        char args[1024];
        snprintf(args, sizeof args, "%s --hardware %s/planted.json", shape, TMP);
        cJSON *pj = plan_json(args, NULL);
        want = jnum(pj, "compute.step_s") * 1e3;
        cJSON_Delete(pj);
        for (int off = 0; off < 2; off++) {
            snprintf(cmd, sizeof cmd, "rm -f %s/tr.jsonl && ST_PEAK_CACHE=%s %s train --data '%s/sh/train_*.bin' %s "
                     "--steps 1 --quiet --log %s/tr.jsonl > /dev/null 2>&1", TMP, off ? "off" : TMP "/pc.json", BIN, TMP,
                     shape, TMP);
            cJSON *all = tu_shell(cmd) ? tu_log_records(TMP "/tr.jsonl") : NULL, *o;
            cJSON_ArrayForEach(o, all)
                if (!strcmp(cJSON_GetObjectItem(o, "event")->valuestring, "start")) got[off] = jnum(o, "plan.step_ms");
            cJSON_Delete(all);
        }
    }
    /* 1e-12: plan --json prints seconds and the trainer milliseconds, each the shortest decimal of
     * its double, so the same step time can read back one ulp apart after the test's × 1e3 */
    tu_check(planted == 1 && want > 0 && rel(got[0], want) < 1e-12, "the trainer plans on this machine's cached profile",
             "plan --hardware planted: %.9g ms; trainer with the planted cache: %.9g ms", want, got[0]);
    tu_check(got[1] > 0 && got[1] != want, "control: without a cache the trainer's plan is another",
             "%.9g ms against %.9g", got[1], want);
}

/* --measure-hardware writes a profile (about 5 s); --measure-threads names the threads it used. */
static void test_measure_hardware(void) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s plan --measure-hardware %s/hw.json --measure-threads 1 > /dev/null", BIN, TMP);
    int rc = system(cmd);
    char *text = tu_slurp(TMP "/hw.json");
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(j, "name");
    double peak = jnum(j, "peak_fp32");
    tu_check(rc == 0 && cJSON_IsString(name) && !strcmp(name->valuestring, "measured-1t") && peak > 1e9,
             "plan --measure-hardware F --measure-threads 1", "name %s (default threads 2 would be measured-2t), fp32 peak %.3g",
             cJSON_IsString(name) ? name->valuestring : "?", peak);
    cJSON_Delete(j);
    free(text);
}

/* Ranks sharing this machine are priced by a profile measured with as many copies at once
 * (hw_measure_copies, docs/plan.md "Hardware profiles"). A real `--measure-copies 2` at one thread
 * (where this machine has 2 CPUs): its profile is named measured-1t-x2, its memory is the
 * machine's over the copies, and the cache keys it by threads 1 and copies 2. Planted in a private
 * cache beside a copies-1 profile of other figures, `plan --dp 2 --devices-per-node 2 --threads 1`
 * prices with the copies-2 one (== `--hardware` of it) and `--dp 1` with the copies-1 one.
 * Control: the two planted profiles price the shape differently (the check can tell them apart).
 * Refusals: copies 0, copies x threads over the CPUs, --measure-copies without --measure-hardware.
 * Writes TMP/pcc.json (the cache), TMP/pA.json and TMP/pB.json: test_node_profile (the trainer
 * under mpirun) reads them. Returns 1 when planted. */
static const char *NODE_SHAPE = "--layers 2 --heads 2 --channels 64 --vocab 257 --max-seq-len 64 --micro-batch 4 "
                                "--seq-len 64 --threads 1";

static int plant_copies_cache(void) {
    char cmd[2048];
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    snprintf(cmd, sizeof cmd, "rm -f %s/pcc.json %s/hwc.json && ST_PEAK_CACHE=%s/pcc.json %s plan --measure-hardware "
             "%s/hwc.json --measure-threads 1 --measure-copies 2 > /dev/null 2> %s/hwc.err", TMP, TMP, TMP, BIN, TMP, TMP);
    int rc = system(cmd);
    cpu_set_t set;
    int allowed = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : (int)cpus;
    if (allowed < 2) { /* one CPU: the refusal, and nothing to plant */
        char *e = tu_slurp(TMP "/hwc.err");
        tu_check(rc != 0 && e && strstr(e, "--measure-copies: expected 1..1"), "--measure-copies 2 on one CPU refused",
                 "%s", e ? e : "(none)");
        free(e);
        return 0;
    }
    char *text = tu_slurp(TMP "/hwc.json"), *ctext = tu_slurp(TMP "/pcc.json");
    cJSON *j = text ? cJSON_Parse(text) : NULL, *cache = ctext ? cJSON_Parse(ctext) : NULL;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(j, "name");
    double mem = jnum(j, "memory"), ram = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    cJSON *entry = NULL, *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(cache, "profiles"))
        if (jnum(e, "copies") == 2 && jnum(e, "threads") == 1) entry = e;
    tu_check(WIFEXITED(rc) && WEXITSTATUS(rc) == 0 && cJSON_IsString(name) && !strcmp(name->valuestring, "measured-1t-x2") &&
                 fabs(mem - ram / 2) <= 1 && entry && jnum(j, "mem_bw") > 0 && jnum(j, "matmul_eff") > 0,
             "plan --measure-hardware F --measure-threads 1 --measure-copies 2",
             "name %s, memory %.4g of %.4g bytes, cache entry with copies 2 %s",
             cJSON_IsString(name) ? name->valuestring : "?", mem, ram, entry ? "found" : "MISSING");
    int planted = 0;
    if (entry) {
        /* B (copies 2): slow memory and GEMMs; A (copies 1): the same entry without "copies" */
        const char *pb = "{\"name\": \"plantedB\", \"peak_fp32\": 1e11, \"peak_bf16\": 1e11, \"peak_fp16\": 1e11, "
                         "\"memory\": 12e9, \"mem_bw\": 5e9, \"intra_bw\": 1e10, \"inter_bw\": 1.25e9, \"intra_lat\": 1e-6, "
                         "\"inter_lat\": 3e-5, \"matmul_eff\": 0.25, \"matmul_eff_bf16\": 0.2, \"storage_bw\": 5e8, "
                         "\"backend_bytes\": 0, \"devices_per_node\": 1}";
        const char *pa = "{\"name\": \"plantedA\", \"peak_fp32\": 1e11, \"peak_bf16\": 1e11, \"peak_fp16\": 1e11, "
                         "\"memory\": 24e9, \"mem_bw\": 2e10, \"intra_bw\": 1e10, \"inter_bw\": 1.25e9, \"intra_lat\": 1e-6, "
                         "\"inter_lat\": 3e-5, \"matmul_eff\": 0.5, \"matmul_eff_bf16\": 0.4, \"storage_bw\": 5e8, "
                         "\"backend_bytes\": 0, \"devices_per_node\": 1}";
        cJSON_ReplaceItemInObject(entry, "profile", cJSON_Parse(pb));
        cJSON_DeleteItemFromObject(entry, "others_cpu"); /* the planted figures are not disturbed ones */
        cJSON_AddNumberToObject(entry, "others_cpu", 0);
        cJSON *a = cJSON_Duplicate(entry, 1);
        cJSON_DeleteItemFromObject(a, "copies");
        cJSON_ReplaceItemInObject(a, "profile", cJSON_Parse(pa));
        cJSON_AddItemToArray(cJSON_GetObjectItem(cache, "profiles"), a);
        char *out = cJSON_Print(cache);
        FILE *f = fopen(TMP "/pcc.json", "w"), *fa = fopen(TMP "/pA.json", "w"), *fb = fopen(TMP "/pB.json", "w");
        if (f && fa && fb && out) fputs(out, f), fputs(pa, fa), fputs(pb, fb), planted = 1;
        if (f) fclose(f);
        if (fa) fclose(fa);
        if (fb) fclose(fb);
        free(out);
    }
    cJSON_Delete(j), cJSON_Delete(cache), free(text), free(ctext);
    return planted;
}

static void test_measure_copies(void) {
    int planted = plant_copies_cache();
    /* the measure refusals run without plan_json's --json (refused beside --measure-hardware) */
    char cmd[1024], *e[3];
    int c[3];
    const char *args3[3] = {"--measure-hardware " TMP "/x.json --measure-copies 0",
                            "--measure-hardware " TMP "/x.json --measure-threads 1 --measure-copies 4096",
                            "--model d6 --measure-copies 2"};
    for (int i = 0; i < 3; i++) {
        snprintf(cmd, sizeof cmd, "%s plan %s > /dev/null 2> %s/mc_err.txt", BIN, args3[i], TMP);
        int rc = system(cmd);
        c[i] = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
        e[i] = tu_slurp(TMP "/mc_err.txt");
    }
    tu_check(c[0] == 2 && e[0] && strstr(e[0], "--measure-copies: expected 1..") && strstr(e[0], "found 0") && c[1] == 2 &&
                 e[1] && strstr(e[1], "found 4096") && c[2] == 2 && e[2] &&
                 strstr(e[2], "--measure-copies: expected only with --measure-hardware FILE"),
             "--measure-copies refusals: 0, more than the CPUs, without --measure-hardware", "exit %d/%d/%d: %s | %s | %s",
             c[0], c[1], c[2], e[0] ? e[0] : "", e[1] ? e[1] : "", e[2] ? e[2] : "");
    for (int i = 0; i < 3; i++) free(e[i]);
    if (!planted) return;
    char args[1024];
    double st[4];
    const char *runs[4] = {"--dp 2 --devices-per-node 2", "--dp 2 --devices-per-node 2 --hardware " TMP "/pB.json",
                           "", "--hardware " TMP "/pA.json"};
    setenv("ST_PEAK_CACHE", TMP "/pcc.json", 1);
    for (int i = 0; i < 4; i++) {
        snprintf(args, sizeof args, "%s %s", NODE_SHAPE, runs[i]);
        cJSON *pj = plan_json(args, NULL);
        st[i] = jnum(pj, "compute.step_s");
        cJSON_Delete(pj);
    }
    setenv("ST_PEAK_CACHE", "off", 1);
    tu_check(st[0] > 0 && st[0] == st[1] && st[2] > 0 && st[2] == st[3],
             "ranks sharing the machine priced by the profile of as many copies at once",
             "dp 2 on one node %.6g s (--hardware of the copies-2 profile %.6g); one process %.6g s (copies-1 %.6g)", st[0],
             st[1], st[2], st[3]);
    snprintf(args, sizeof args, "%s --dp 2 --devices-per-node 2 --hardware %s/pA.json", NODE_SHAPE, TMP);
    cJSON *pj = plan_json(args, NULL);
    double a2 = jnum(pj, "compute.step_s");
    cJSON_Delete(pj);
    tu_check(a2 > 0 && fabs(a2 - st[1]) > 0.2 * st[1], "control: the two planted profiles price dp 2 differently",
             "copies-1 profile %.6g s, copies-2 profile %.6g s", a2, st[1]);
}

/* The trainer under mpirun, two ranks on this machine (dp 2, one thread each), with the private
 * cache of test_measure_copies: its start record's plan is the copies-2 profile's (== `plan --dp 2
 * --devices-per-node 2 --hardware pB.json`, as the trainer's plan counts its ranks on one node)
 * and says it measured the ranks together. Control: with the copies-2 entry taken out of the cache
 * the plan is the copies-1 profile's and says it is one rank's alone. */
static void test_node_profile(const char *mpiexec) {
    Err me;
    file_mkdirs(TMP, &me);
    if (!plant_copies_cache()) return;
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s prepare --tokenizer bytes --val-fraction 0 --quiet --out %s/nsh "
             "%s/data/tinyshakespeare/input.txt > /dev/null 2>&1", BIN, TMP, ST_SOURCE_DIR);
    int ok = tu_shell(cmd);
    double want[2] = {0, 0}, got[2] = {0, 0};
    char hw[2][512] = {"", ""};
    for (int alone = 0; ok && alone < 2; alone++) {
        if (alone) { /* the cache without its copies-2 entry */
            char *t = tu_slurp(TMP "/pcc.json");
            cJSON *c = t ? cJSON_Parse(t) : NULL, *e;
            cJSON *arr = cJSON_GetObjectItem(c, "profiles");
            for (int i = cJSON_GetArraySize(arr) - 1; i >= 0; i--)
                if (jnum((e = cJSON_GetArrayItem(arr, i)), "copies") == 2) cJSON_DeleteItemFromArray(arr, i);
            char *out = c ? cJSON_Print(c) : NULL;
            FILE *f = out ? fopen(TMP "/pcc.json", "w") : NULL;
            if (f) fputs(out, f), fclose(f);
            free(out), free(t), cJSON_Delete(c);
        }
        char args[1024];
        snprintf(args, sizeof args, "%s --dp 2 --devices-per-node 2 --hardware %s/%s", NODE_SHAPE, TMP,
                 alone ? "pA.json" : "pB.json");
        cJSON *pj = plan_json(args, NULL);
        want[alone] = jnum(pj, "compute.step_s") * 1e3;
        cJSON_Delete(pj);
        snprintf(cmd, sizeof cmd, "rm -f %s/ntr.jsonl && %s --allow-run-as-root --oversubscribe -np 2 -x ST_PEAK_CACHE=%s/pcc.json "
                 "%s train --data '%s/nsh/train_*.bin' %s --steps 1 --quiet --log %s/ntr.jsonl > /dev/null 2>&1",
                 TMP, mpiexec, TMP, BIN, TMP, NODE_SHAPE, TMP);
        cJSON *all = tu_shell(cmd) ? tu_log_records(TMP "/ntr.jsonl") : NULL, *o;
        cJSON_ArrayForEach(o, all)
            if (!strcmp(cJSON_GetObjectItem(o, "event")->valuestring, "start")) {
                got[alone] = jnum(o, "plan.step_ms");
                const cJSON *h = jpath(o, "plan.hardware");
                snprintf(hw[alone], sizeof hw[alone], "%s", cJSON_IsString(h) ? h->valuestring : "");
            }
        cJSON_Delete(all);
    }
    tu_check(ok && want[0] > 0 && rel(got[0], want[0]) < 1e-12 && strcmp(hw[0], "this machine's cached profile") == 0,
             "mpirun dp 2: the trainer's plan uses the profile of two ranks measured together",
             "trainer %.9g ms, plan --hardware of it %.9g ms; \"%s\"", got[0], want[0], hw[0]);
    tu_check(want[1] > 0 && rel(got[1], want[1]) < 1e-12 && strstr(hw[1], "of one rank alone") && rel(got[1], got[0]) > 0.1,
             "control: without it, the one-rank profile, and the start record says so",
             "trainer %.9g ms, plan --hardware of the copies-1 profile %.9g ms; \"%s\"", got[1], want[1], hw[1]);
}

static void test_checklist(void) {
    Err e;
    PlanResult r;
    PlanInput in = plan_default_input();
    plan_model_preset(&in.model, "gpt2-124m", &e);
    /* pp 13 > 12 blocks: the trainer's split (layout_pp_split) has no block for a stage; 12 on 5
     * stages is fine, as train runs it (issue 26: one rule for plan and train). */
    in.tp = 5, in.pp = 13, in.seq_len = 2048, in.world = 8;
    plan_compute(&in, &r, &e);
    int heads = 0, layers = 0, seq = 0, world = 0;
    for (int i = 0; i < r.nchecks; i++) {
        heads |= strstr(r.checks[i].msg, "--heads 12 is not divisible by --tp 5") != NULL;
        layers |= strstr(r.checks[i].msg, "--pp 13: expected at most the 12 layers") != NULL;
        seq |= strstr(r.checks[i].msg, "--seq-len 2048 is over") != NULL;
        world |= strstr(r.checks[i].msg, "= 65 devices, expected the world size 8") != NULL;
    }
    tu_check(heads && layers && seq && world, "checklist: tp, pp, seq, world errors", "%d errors, %d warnings",
             r.nerrors, r.nwarnings);
    in = plan_default_input();
    plan_model_preset(&in.model, "llama-70b", &e);
    in.tp = 16, in.pp = 4, in.interleave = 3, in.grad_accum = 2;
    plan_compute(&in, &r, &e);
    int kv = 0, pv = 0, few = 0;
    for (int i = 0; i < r.nchecks; i++) {
        kv |= strstr(r.checks[i].msg, "--kv-heads 8 is not divisible by --tp 16") != NULL;
        few |= strstr(r.checks[i].msg, "fewer micro-batches than stages") != NULL;
    }
    /* 80 blocks on 4 x 3 virtual stages split unevenly, as train does; 6 blocks on 4 x 2 cannot */
    PlanInput iv = plan_default_input();
    plan_model_preset(&iv.model, "d6", &e);
    iv.pp = 4, iv.interleave = 2, iv.grad_accum = 4;
    PlanResult rv;
    plan_compute(&iv, &rv, &e);
    for (int i = 0; i < rv.nchecks; i++) pv |= strstr(rv.checks[i].msg, "--interleave 2: 4 x 2 = 8 virtual stages") != NULL;
    tu_check(kv && pv && few, "checklist: kv heads, pp x v, fewer micro-batches", "%d errors, %d warnings", r.nerrors,
             r.nwarnings);
    /* Over budget: says by how much and finds a cheaper layout that fits. */
    in = plan_default_input();
    plan_model_preset(&in.model, "llama-7b", &e);
    in.prec = (PlanPrecision){2, 2, 4, 4, 2, PLAN_DTYPE_BF16};
    plan_hardware_preset(&in.hw, "A100-80GB", &e);
    in.dp = 8, in.micro_batch = 4, in.seq_len = 4096;
    plan_compute(&in, &r, &e);
    tu_check(!r.mem.fits && r.nsuggest > 0 && r.nerrors == 1, "7B bf16 on 8 x A100-80GB, b=4 s=4096: does not fit",
             "over by %.2f GiB; cheapest fix: %s", -r.mem.margin / 1073741824.0, r.nsuggest ? r.suggest[0] : "none");
    /* Library errors name the flag. */
    in = plan_default_input();
    plan_model_preset(&in.model, "d6", &e);
    in.micro_batch = 0;
    Status st = plan_compute(&in, &r, &e);
    tu_check(st == ST_ERR_INPUT && strstr(e.msg, "--micro-batch") != NULL, "library: zero micro-batch", "%s", e.msg);
    st = plan_model_preset(&in.model, "gpt5", &e);
    tu_check(st == ST_ERR_INPUT && strstr(e.msg, "'gpt5'") != NULL, "library: unknown preset", "%s", e.msg);
}

/* The dp, pp and ZeRO stage a suggestion sets ("--zero 3 --pp 2 ...: 79 GiB"), the input's where it
 * says nothing; 1 if the trainer would run it. The trainer's rules: par_check_grid (parallel.c)
 * refuses ZeRO 2-3 with pp > 1; ZeRO at dp 1 shards nothing (train refuses --zero in one process). */
static int suggestion_runs(const PlanInput *in, const char *s, char *why, size_t n) {
    int dp = in->dp, pp = in->pp, zero = in->zero;
    const char *p;
    if ((p = strstr(s, "--dp "))) dp = atoi(p + 5);
    if ((p = strstr(s, "--pp "))) pp = atoi(p + 5);
    if ((p = strstr(s, "--zero "))) zero = atoi(p + 7);
    int ok = !(pp > 1 && zero >= 2) && !(dp == 1 && zero > 0);
    if (!ok) snprintf(why, n, "%.200s", s);
    return ok;
}

/* plan's suggestions are layouts the trainer runs. llama3-8b at T 8192 on one H100 suggested
 * "--dp 1 --tp 1 --pp 2 --zero 3" (ZeRO 3 with a pipeline is refused; at dp 1 it shards nothing). */
static void test_suggestions_run(void) {
    static const struct { const char *model, *hw; int prec, dp, B, T, k; } C[] = {
        {"llama3-8b", "H100", 0, 1, 8, 8192, 1},      {"llama-7b", "A100-40GB", 1, 4, 4, 4096, 1},
        {"llama-7b", "A100-80GB", 1, 2, 2, 4096, 2}, {"llama-13b", "A100-40GB", 1, 8, 2, 4096, 1},
        {"gpt2-1558m", "A100-40GB", 1, 1, 32, 1024, 1},
    };
    int bad = 0, total = 0;
    char why[256] = "";
    for (size_t i = 0; i < sizeof C / sizeof C[0]; i++) {
        PlanInput in = plan_default_input();
        Err e;
        plan_model_preset(&in.model, C[i].model, &e);
        plan_hardware_preset(&in.hw, C[i].hw, &e);
        if (C[i].prec) plan_precision_preset(&in.prec, "bf16", &e);
        in.dp = C[i].dp, in.micro_batch = C[i].B, in.seq_len = C[i].T, in.grad_accum = C[i].k;
        PlanResult *r = calloc(1, sizeof *r);
        if (!r || plan_compute(&in, r, &e) != ST_OK) {
            bad++, snprintf(why, sizeof why, "%s: %.200s", C[i].model, r ? e.msg : "out of memory");
            free(r);
            continue;
        }
        for (int q = 0; q < r->nsuggest; q++) total++, bad += !suggestion_runs(&in, r->suggest[q], why, sizeof why);
        if (r->devices_needed) total++, bad += !suggestion_runs(&in, r->devices_layout, why, sizeof why);
        free(r);
    }
    tu_check(bad == 0 && total > 0, "plan: every suggested layout is one the trainer runs (no ZeRO 2-3 with pp, no ZeRO at dp 1)",
             "%d of %d suggestions%s%s", bad, total, bad ? ", e.g. " : "", why);
}

/* Runs `scaletrain plan args`: exit 2 and exactly one stderr line containing want. */
static void expect_error(const char *name, const char *args, const char *want) {
    char cmd[4096];
    /* timeout: a hang (--shampoo-block 0 looped forever) fails the check instead of the suite */
    snprintf(cmd, sizeof cmd, "timeout 60 %s plan %s >/dev/null 2>%s/stderr.txt", BIN, args, TMP);
    int rc = system(cmd);
    int code = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    char *text = NULL;
    size_t len = 0;
    Err e;
    file_read_all(TMP "/stderr.txt", &text, &len, &e);
    int lines = 0;
    for (size_t i = 0; i < len; i++) lines += text[i] == '\n';
    int ok = code == 2 && lines == 1 && text && strstr(text, want) != NULL;
    if (text && len && text[len - 1] == '\n') text[len - 1] = '\0';
    tu_check(ok, name, "exit=%d lines=%d stderr=\"%s\"", code, lines, text ? text : "");
    free(text);
}

static void test_cli(void) {
    Err e;
    file_mkdirs(TMP, &e);
    expect_error("cli: unknown preset", "--model gpt2-9b", "--model: expected a preset");
    expect_error("cli: unknown hardware", "--model d6 --hardware tpu-v9", "--hardware: expected a preset");
    expect_error("cli: no model", "--micro-batch 4", "expected a model");
    expect_error("cli: negative latency", "--model d6 --dp 2 --inter-lat-us -5", "--inter-lat-us: expected a latency >= 0 µs, found -5");
    expect_error("cli: zero micro-batch", "--model d6 --micro-batch 0", "--micro-batch: expected an integer >= 1, found 0");
    expect_error("cli: negative layers", "--model d6 --layers -3", "--layers: expected a positive integer, found -3");
    expect_error("cli: negative params", "--params -5", "--params: expected a positive whole parameter count");
    expect_error("cli: zero stage 4", "--model d6 --zero 4", "--zero: expected 0, 1, 2 or 3, found 4");
    expect_error("cli: heads not divisible by tp", "--model gpt2-124m --tp 5", "--heads 12 is not divisible by --tp 5");
    expect_error("cli: more stages than layers", "--model gpt2-124m --pp 13", "--pp 13: expected at most the 12 layers");
    expect_error("cli: world mismatch", "--model d6 --dp 2 --nodes 1 --devices-per-node 1",
                 "expected the world size 1");
    expect_error("cli: global batch not divisible", "--model d6 --micro-batch 8 --global-batch 100",
                 "global batch not divisible");
    expect_error("cli: seq over max", "--model gpt2-124m --seq-len 2048", "--seq-len 2048 is over");
    expect_error("cli: bad precision", "--model d6 --precision fp8", "--precision: expected fp32, bf16 or fp16");
    /* Options that would change nothing in these combinations are refused (issue 12). */
    expect_error("cli: --params with a shape flag", "--params 7e9 --vocab 1000",
                 "--params: a parameter count alone has no shape; expected no --vocab");
    expect_error("cli: --arch with a preset", "--model d6 --arch llama", "--arch: a --model preset fixes the family");
    expect_error("cli: --measure-threads alone", "--model d6 --measure-threads 2",
                 "--measure-threads: expected only with --measure-hardware");
    /* --scaling: a `fit --json` object's approach3, each member in range */
    {
        static const char *const bad[3] = {"{\"approach1\": {}}", "{\"approach3\": {\"E\": 1.8, \"A\": 500, \"B\": 1000, "
                                           "\"alpha\": 1e300, \"beta\": 0.36}}", "{\"approach3\": {\"E\": 1.8, \"A\": 500, "
                                           "\"B\": 1000, \"alpha\": 0.35}}"};
        static const char *const want[3] = {"expected a `scaletrain fit --json` object with an approach3 member, found none",
                                            "expected approach3.alpha in (0, 10], found 1e+300",
                                            "expected approach3.beta in (0, 10], found no such member"};
        for (int k = 0; k < 3; k++) {
            FILE *f = fopen(TMP "/badfit.json", "w");
            if (f) fputs(bad[k], f), fclose(f);
            char name[96];
            snprintf(name, sizeof name, "cli: --scaling refuses a bad fit file (%d of 3)", k + 1);
            expect_error(name, "--model d6 --scaling " TMP "/badfit.json", want[k]);
        }
        expect_error("cli: --scaling of a missing file", "--model d6 --scaling " TMP "/nofit.json", "--scaling");
    }
    expect_error("cli: --measure-hardware with a planning option", "--measure-hardware " TMP "/never.json --model d6",
                 "--measure-hardware: measures this machine and exits; expected no planning option, found --model");
    expect_error("cli: --pp-schedule without a pipeline", "--model d6 --pp-schedule gpipe",
                 "--pp-schedule: would change nothing with --pp 1; expected --pp > 1");
    expect_error("cli: --pp-layers without a pipeline", "--model d6 --pp-layers 3,3",
                 "--pp-layers: would change nothing with --pp 1; expected --pp > 1");
    expect_error("cli: --pp-layers with the wrong count", "--model d6 --pp 2 --grad-accum 4 --pp-layers 2,2,2",
                 "--pp-layers 2,2,2: expected 2 counts (--pp 2), found 3");
    expect_error("cli: --pp-layers with the wrong sum", "--model d6 --pp 2 --grad-accum 4 --pp-layers 3,4",
                 "--pp-layers 3,4");
    expect_error("cli: --pp-schedule with an unknown name", "--model d6 --pp 2 --grad-accum 4 --pp-schedule zigzag",
                 "zigzag");
    expect_error("cli: --pp-schedule interleaved with micro-batches not a multiple of --pp",
                 "--model d6 --pp 4 --grad-accum 6 --interleave 2 --pp-schedule interleaved", "--pp 4");
    expect_error("cli: --act-bytes with --activations exact", "--model d6 --activations exact --act-bytes 2",
                 "--act-bytes: --activations exact counts our kernels' own sizes");
    expect_error("cli: --grad-accum contradicting --global-batch", "--model d6 --micro-batch 4 --global-batch 16 --grad-accum 2",
                 "--global-batch 16 implies --grad-accum 4, but --grad-accum 2 was given");
    /* A Shampoo block side < 1 looped forever (layout_shampoo_blocks' walk never advanced); train
     * refuses both with these words. */
    expect_error("cli: --shampoo-block 0", "--model d6 --vocab 257 --hardware cpu-zen4-2c --optimizer shampoo --shampoo-block 0",
                 "--shampoo-block: expected an integer >= 1, found 0");
    expect_error("cli: --shampoo-block -5", "--model d6 --vocab 257 --hardware cpu-zen4-2c --optimizer shampoo --shampoo-block -5",
                 "--shampoo-block: expected an integer >= 1, found -5");
    expect_error("cli: --precond-every 0", "--model d6 --vocab 257 --optimizer shampoo --precond-every 0",
                 "--precond-every: expected an integer >= 1, found 0");
    /* Inert combinations, refused as --pp-layers at pp 1 and --hess-every without sophia are. */
    expect_error("cli: --shampoo-block without shampoo", "--model d6 --shampoo-block 64",
                 "--shampoo-block: would change nothing here; expected --optimizer shampoo");
    expect_error("cli: --precond-every without shampoo", "--model d6 --precond-every 3",
                 "--precond-every: would change nothing here; expected --optimizer shampoo");
    expect_error("cli: --pp-microbatches without a pipeline", "--model d6 --pp-microbatches 4",
                 "--pp-microbatches: would change nothing with --pp 1; expected --pp > 1");
    expect_error("cli: --tie-embeddings on GPT-2", "--model d6 --tie-embeddings",
                 "--tie-embeddings: would change nothing here (GPT-2 always ties its head)");
    /* Overrides named by their own flag and value as given (the message named the profile, in bytes). */
    expect_error("cli: --mtbf 0", "--model d6 --mtbf 0", "--mtbf: expected a positive number of hours, found 0");
    expect_error("cli: --memory-gib -1", "--model d6 --hardware cpu-zen4-2c --memory-gib -1",
                 "--memory-gib: expected a positive memory in GiB, found -1");
    expect_error("cli: --peak-tflops -1", "--model d6 --hardware cpu-zen4-2c --peak-tflops -1",
                 "--peak-tflops: expected a positive peak in TFLOP/s, found -1");
    expect_error("cli: --overlap is gone (overlap is the default; --no-overlap turns it off)", "--model d6 --overlap",
                 "unknown option --overlap");
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s plan --model d6 --vocab 257 >/dev/null 2>&1", BIN);
    int rc = system(cmd);
    tu_check(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "cli control: d6 plans (exit 0)", "exit=%d",
             WIFEXITED(rc) ? WEXITSTATUS(rc) : -1);
    snprintf(cmd, sizeof cmd,
             "%s plan --model llama-70b --precision bf16 --hardware H100 --nodes 8 --tp 8 --pp 4 --sp --zero 1 "
             "--micro-batch 1 --seq-len 4096 --global-batch 512 --recompute selective --json > %s/plan.json",
             BIN, TMP);
    rc = system(cmd);
    char *text = NULL;
    size_t len = 0;
    file_read_all(TMP "/plan.json", &text, &len, &e);
    int ok = WIFEXITED(rc) && WEXITSTATUS(rc) == 0 && text && strstr(text, "\"schema_version\":") &&
             strstr(text, "\"memory_bytes\":") && strstr(text, "\"checklist\":");
    tu_check(ok, "cli: --json for llama-70b on 64 x H100", "exit=%d, %zu bytes", WIFEXITED(rc) ? WEXITSTATUS(rc) : -1,
             len);
    free(text);
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "node")) { /* the mpirun part (test_plan_node, labelled mpi) */
        test_node_profile(argv[2]);
        return tu_exit();
    }
    test_7b_bytes();
    test_zero_world8();
    test_zero_paper_7_5b();
    test_zero_accum();
    test_bubble();
    test_6nd_and_mfu();
    test_effective_batch();
    test_dp_exposed();
    test_dropout();
    test_head_softmax();
    test_overlap_exposed();
    test_korthikanti();
    test_scaling();
    test_param_counts();
    test_vs_trainer("d2", 257, 4, 64, RECOMPUTE_NONE);
    test_vs_trainer("d6", 257, 4, 128, RECOMPUTE_NONE);
    test_vs_trainer("d6", 50257, 2, 64, RECOMPUTE_NONE);
    test_vs_trainer("gpt2-124m", 50257, 2, 64, RECOMPUTE_NONE);
    test_vs_trainer("d6", 257, 4, 128, RECOMPUTE_SELECTIVE);
    test_vs_trainer("gpt2-124m", 50257, 2, 64, RECOMPUTE_FULL);
    test_shared_formulas();
    test_checklist();
    test_suggestions_run();
    test_cli();
    test_plan_per_rank();
    test_option_effects();
    test_default_threads();
    test_measure_hardware();
    test_measure_copies();
    test_bf16_efficiency();
    test_lora_step();
    test_ckpt_size();
    test_trainer_cached_profile();
    test_trainer_speed_check(); /* reads the cache test_trainer_cached_profile wrote */
    return tu_exit();
}
