/* test_tp_block.c — tensor and sequence parallelism at the model and kernel level against one
 * process, under mpirun with 2 and 4 ranks (issue 13: "forward and backward of one block at tp 2
 * equal the unsplit block per tensor, and the vocabulary-parallel loss equals the full
 * cross-entropy").
 *
 * Oracle: every rank also builds the WHOLE model (tp 1) with the same weights and runs it on the
 * same batch; the tp slice (tp = world size, this rank's tp_rank, its own hooks calling comm_tp_*)
 * must give, before any optimizer step, fp32, one thread:
 *   - the same loss sums (relative difference <= 1e-6 per micro-batch),
 *   - the same output of every block (s.la[l].res3; under --sp the rank's rows) (relative norm
 *     <= 1e-6 per block),
 *   - every gradient tensor of the slice equal to the same slice of the whole model's gradient
 *     (layout_tp_copy of the full gradients into the slice layout; relative norm <= 1e-6 per tensor),
 * for tp, tp + sp, dropout 0.1 (masks keyed by global element and head, so they must equal one
 * process's), recompute selective and full, and two micro-batches (accumulation). V = 97 does not
 * split: at tp 4 the vocabulary is padded to 256, 64 rows per rank, and ranks 2 and 3 hold no real
 * row (the Vr = 0 path of the embedding and the loss). Weights are GPT-2's init with non-zero biases
 * and LayerNorm parameters (zero biases would hide a row-parallel bias added tp times).
 * In the tp-only case the test also counts the tp all-reduces: Megatron's two per layer forward
 * and two backward, plus the embedding's, the head input gradient's and two per head chunk.
 *
 * Kernel level: head_forward_backward_vp on each rank's rows of wte (reduce callback on
 * comm_tp_allreduce_f32) against head_forward_backward on the whole wte: per-row losses (relative
 * <= 1e-6), the sum over ranks of dx against the full dx, each rank's dwte rows against the
 * matching full rows (relative norm <= 1e-6); masked targets, several chunks (n = 37, chunk 8),
 * overwrite and accumulate.
 *
 * Negative controls (each must FAIL its comparison on every rank, or the test fails):
 *   a  the vocabulary-parallel loss with a reduce callback that does nothing;
 *   b  the model with hooks whose tp_allreduce skips every call of the backward pass (tp; and sp,
 *      where only the LayerNorm gradients use it): the forward still matches, the gradients must not;
 *   c  the slice's gradients against the NEXT rank's slice of the full gradients;
 *   d  a dropout case's full-model loss against the same forward without dropout (the masks are live).
 * Refusals: gpt_init with tp not dividing the heads, and --sp with B·T not divisible by tp, return
 * ST_ERR_INPUT naming the flag and the numbers, without crashing; a dividing tp is accepted.
 *
 * Usage: mpirun -np NP test_tp_block NP (NP >= 2; the world must be NP ranks). A check passes only
 * if it passes on every rank (verdicts all-reduced); rank 0 prints. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "core/rng.h"
#include "core/timer.h"
#include "model/gpt.h"
#include "model/kernels.h"
#include "testutil.h"
#include "worldcheck.h"

#define TOL 1e-6

static Comm *g_c; /* the test's communicator, for world_max/min/ints (tests may use globals) */

/* A check that must hold on every rank (tu_world_check: verdicts all-reduced, rank 0 prints). */
#define check(ok, ...) tu_world_check((ok), __VA_ARGS__)

/* The maximum of v over the world (the reported number of a check is the worst rank's). */
static double world_max(double v) {
    Err err = {0};
    if (v != v) v = INFINITY; /* NaN: the worst */
    if (comm_allreduce_f64(g_c, &v, 1, COMM_MAX, &err) != ST_OK) return INFINITY;
    return v;
}
/* The minimum over the world (a control's number: its best rank); NaN counts as +inf. */
static double world_min(double v) {
    if (v != v) v = INFINITY;
    return -world_max(-v);
}

/* "a,b,c,...": an integer of every rank, in rank order. */
static const char *world_ints(int v, char *buf, size_t cap) {
    double all[64];
    Err err = {0};
    buf[0] = 0;
    if (g_c->world > 64 || comm_allgather_f64(g_c, (double)v, all, &err) != ST_OK) return "?";
    for (int i = 0, o = 0; i < g_c->world && (size_t)o < cap; i++)
        o += snprintf(buf + o, cap - (size_t)o, "%s%d", i ? "," : "", (int)all[i]);
    return buf;
}

/* ================================================================ the test's tp hooks */

enum { FAULT_NONE = 0, FAULT_SKIP_BWD_ALLREDUCE = 1 };

typedef struct {
    Comm *c;
    int fault;       /* FAULT_*: a test-only wrong operator */
    int in_bwd;      /* between before_backward and the next before_forward */
    long allreduce[2], allgather[2], reduce_scatter[2]; /* calls, [0] forward, [1] backward */
    int failed;      /* a collective returned an error */
} TpHooks;

static void th_before_forward(void *ctx, int seg) {
    (void)seg;
    ((TpHooks *)ctx)->in_bwd = 0;
}
static void th_before_backward(void *ctx, int seg) {
    (void)seg;
    ((TpHooks *)ctx)->in_bwd = 1;
}
static void th_allreduce(void *ctx, float *buf, size_t n, int max) {
    TpHooks *h = ctx;
    h->allreduce[h->in_bwd]++;
    if (h->fault == FAULT_SKIP_BWD_ALLREDUCE && h->in_bwd) return; /* every rank skips the same calls */
    Err e;
    if (comm_tp_allreduce_f32(h->c, buf, n, max ? COMM_MAX : COMM_SUM, &e) != ST_OK) h->failed = 1;
}
static void th_allgather(void *ctx, float *buf, size_t block) {
    TpHooks *h = ctx;
    h->allgather[h->in_bwd]++;
    Err e;
    if (comm_tp_allgather_f32(h->c, buf, block, &e) != ST_OK) h->failed = 1;
}
static void th_reduce_scatter(void *ctx, float *buf, size_t block) {
    TpHooks *h = ctx;
    h->reduce_scatter[h->in_bwd]++;
    Err e;
    if (comm_tp_reduce_scatter_f32(h->c, buf, block, &e) != ST_OK) h->failed = 1;
}

/* ================================================================ part 1: the model */

enum { L_ = 2, NH_ = 4, C_ = 64, V_ = 97, MAXT_ = 16, B_ = 2, T_ = 8 };

static ModelConfig test_config(float dropout) {
    ModelConfig cfg = {.n_layer = L_, .n_head = NH_, .n_embd = C_, .vocab = V_, .max_seq = MAXT_, .dropout = dropout};
    Err err;
    ST_CHECK(model_config_validate(&cfg, &err) == ST_OK);
    return cfg;
}

/* GPT-2's init, then non-zero biases and LayerNorm parameters (1-D tensors): with zero biases a
 * row-parallel bias added on every rank would go unnoticed. */
static void init_full(Gpt *g, uint64_t seed) {
    gpt_init_params(g, seed);
    const ParamLayout *pl = &g->w.layout;
    for (int k = 0; k < pl->ntensors; k++) {
        const TensorInfo *t = &pl->tensors[k];
        if (t->ndim != 1) continue;
        float *w = g->w.params + t->offset;
        for (size_t i = 0; i < t->numel; i++) w[i] += 0.1f * rng_normal(seed + 1, (uint64_t)k, i);
    }
}

/* Micro-batch mb: tokens over the whole vocabulary, every 5th target masked (-1). */
static void make_batch(int32_t *inp, int32_t *tgt, int n, int mb) {
    for (int i = 0; i < n; i++) {
        uint64_t z = (uint64_t)(mb * 1000 + i) * 0x9E3779B97F4A7C15ull + 12345;
        z ^= z >> 29, z *= 0xBF58476D1CE4E5B9ull, z ^= z >> 32;
        inp[i] = (int32_t)(z % V_);
        tgt[i] = i % 5 == 3 ? -1 : (int32_t)((z >> 20) % V_);
    }
}

typedef struct {
    const char *name;
    int sp;
    float dropout;
    Recompute rc;
    int nmb; /* micro-batches (the first overwrites the gradients, the next accumulate) */
} ModelCase;

typedef struct {
    double loss;         /* max over micro-batches of |loss_tp - loss| / |loss| */
    double res3;         /* max over blocks of the relative norm of the block output's difference */
    double grad;         /* max over tensors of the gradient's relative norm difference */
    char worst[48];      /* the tensor of `grad` */
    double wrong;        /* control c: max over tensors against the next rank's slice */
    double nodrop;       /* control d: |loss without dropout - loss| / |loss| (full model) */
    int vr, vl;          /* the slice's real and held vocabulary rows */
    int chunks;          /* head chunks of one forward */
    long ar[2], ag[2], rs[2]; /* collective calls of the last micro-batch, forward and backward */
    int status_ok;       /* both models' gpt_status OK, no collective failed */
} ModelResult;

/* Builds the whole model and this rank's slice with the same weights, runs k->nmb training
 * micro-batches on both and compares them (see the file header). fault: the slice's hooks. */
static int model_case(Comm *c, const ModelCase *k, int fault, ModelResult *res) {
    int W = c->tp, r = c->tp_rank, N = B_ * T_;
    memset(res, 0, sizeof *res);
    ModelConfig cfg = test_config(k->dropout);
    Err err = {0};
    Gpt gf = {0}, gs = {0};
    GptOptions of = gpt_default_options();
    of.B = B_, of.T = T_, of.threads = 1, of.recompute = k->rc;
    GptOptions os = of;
    os.tp = W, os.tp_rank = r, os.sp = k->sp;
    int64_t bad = gpt_init(&gf, &cfg, &of, NULL, &err) != ST_OK || gpt_init(&gs, &cfg, &os, NULL, &err) != ST_OK;
    if (bad) fprintf(stderr, "rank %d: gpt_init: %s\n", c->rank, err.msg);
    if (comm_allreduce_i64(c, &bad, 1, COMM_MAX, &err) != ST_OK || bad) { /* no rank enters the collectives alone */
        gpt_free(&gf), gpt_free(&gs);
        return -1;
    }
    init_full(&gf, 1234);
    layout_tp_copy(&gs.w.layout, gs.w.params, &gf.w.layout, gf.w.params, 0, 1);
    gf.s.dropout_seed = gs.s.dropout_seed = 0xd509u;
    TpHooks th = {.c = c, .fault = fault};
    gs.hooks = (GptHooks){.ctx = &th, .before_forward = th_before_forward, .before_backward = th_before_backward,
                          .tp_allreduce = th_allreduce, .tp_allgather = th_allgather,
                          .tp_reduce_scatter = th_reduce_scatter};
    res->vr = gs.s.Vr, res->vl = gs.s.dim.Vl;
    res->chunks = (N + gs.s.head_chunk - 1) / gs.s.head_chunk;

    int32_t inp[B_ * T_], tgt[B_ * T_];
    float dscale = 1.0f / (float)(N * k->nmb);
    for (int mb = 0; mb < k->nmb; mb++) {
        make_batch(inp, tgt, N, mb);
        uint64_t counter = 7 + (uint64_t)mb;
        if (mb == 0 && k->dropout > 0) { /* control d: the same forward without dropout */
            double l0 = gpt_forward(&gf, inp, tgt, B_, T_, 0.0f, 0, counter);
            double l1 = gpt_forward(&gf, inp, tgt, B_, T_, 0.0f, 1, counter);
            res->nodrop = fabs(l0 - l1) / fabs(l1);
        }
        if (mb == 0) gpt_overwrite_grads(&gf), gpt_overwrite_grads(&gs);
        double lf = gpt_forward(&gf, inp, tgt, B_, T_, dscale, 1, counter);
        gpt_backward(&gf);
        memset(th.allreduce, 0, sizeof th.allreduce), memset(th.allgather, 0, sizeof th.allgather);
        memset(th.reduce_scatter, 0, sizeof th.reduce_scatter);
        double ls = gpt_forward(&gs, inp, tgt, B_, T_, dscale, 1, counter);
        gpt_backward(&gs);
        double d = fabs(ls - lf) / fabs(lf);
        if (!(d <= res->loss)) res->loss = d; /* NaN stays */
    }
    memcpy(res->ar, th.allreduce, sizeof res->ar), memcpy(res->ag, th.allgather, sizeof res->ag);
    memcpy(res->rs, th.reduce_scatter, sizeof res->rs);
    res->status_ok = gpt_status(&gf, &err) == ST_OK && gpt_status(&gs, &err) == ST_OK && !th.failed;

    /* Block outputs of the last micro-batch: the rank's rows under --sp. */
    size_t nl = k->sp ? (size_t)N / W : (size_t)N, row0 = k->sp ? (size_t)r * nl : 0;
    for (int l = 0; l < L_; l++) {
        double e = tu_rel_err_f(gs.s.la[l].res3, gf.s.la[l].res3 + row0 * C_, nl * C_);
        if (!(e <= res->res3)) res->res3 = e;
    }

    /* Every gradient tensor against the same slice of the full gradients, then (control c)
     * against the next rank's slice. */
    const ParamLayout *pl = &gs.w.layout;
    ParamLayout wl;
    float *ref = calloc(pl->total, sizeof(float)), *wref = NULL;
    ST_CHECK(ref != NULL);
    layout_tp_copy(pl, ref, &gf.w.layout, gf.d.grads, 0, 1);
    ST_CHECK(layout_init_tp(&wl, &cfg, 1, W, (r + 1) % W) == 0 && wl.total == pl->total);
    ST_CHECK((wref = calloc(wl.total, sizeof(float))) != NULL);
    layout_tp_copy(&wl, wref, &gf.w.layout, gf.d.grads, 0, 1);
    for (int t = 0; t < pl->ntensors; t++) {
        const TensorInfo *ti = &pl->tensors[t];
        double e = tu_rel_err_f(gs.d.grads + ti->offset, ref + ti->offset, ti->numel);
        if (!(e <= res->grad)) res->grad = e, snprintf(res->worst, sizeof res->worst, "%s", ti->name);
        double w = tu_rel_err_f(gs.d.grads + ti->offset, wref + wl.tensors[t].offset, ti->numel);
        if (!(w <= res->wrong)) res->wrong = w;
    }
    free(ref), free(wref), layout_free(&wl);
    gpt_free(&gf), gpt_free(&gs);
    return 0;
}

static void test_model(Comm *c) {
    int W = c->tp, r = c->tp_rank;
    static const ModelCase cases[] = {
        {"tp", 0, 0.0f, RECOMPUTE_NONE, 1},
        {"tp_sp", 1, 0.0f, RECOMPUTE_NONE, 1},
        {"tp_dropout", 0, 0.1f, RECOMPUTE_NONE, 1},
        {"tp_sp_dropout", 1, 0.1f, RECOMPUTE_NONE, 1},
        {"tp_recompute_full", 0, 0.1f, RECOMPUTE_FULL, 1},
        {"tp_sp_recompute_full", 1, 0.1f, RECOMPUTE_FULL, 1},
        {"tp_sp_recompute_selective", 1, 0.1f, RECOMPUTE_SELECTIVE, 1},
        {"tp_accumulate", 0, 0.1f, RECOMPUTE_NONE, 2},
        {"tp_sp_accumulate", 1, 0.1f, RECOMPUTE_FULL, 2},
    };
    /* Independent of the layout: V rounded up to 64·tp, split in equal blocks; rows past V padding. */
    int vl = (V_ + 64 * W - 1) / (64 * W) * 64, vr = V_ - r * vl;
    vr = vr < 0 ? 0 : vr > vl ? vl : vr;
    if (c->rank == 0) printf("model: L=%d NH=%d C=%d V=%d B=%d T=%d tp=%d: %d vocabulary rows per rank\n", L_, NH_, C_,
                             V_, B_, T_, W, vl);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const ModelCase *k = &cases[i];
        ModelResult m;
        char name[96];
        int rc = model_case(c, k, FAULT_NONE, &m);
        snprintf(name, sizeof name, "model_%s_np%d", k->name, W);
        double loss = world_max(m.loss), res3 = world_max(m.res3), grad = world_max(m.grad);
        int ok = rc == 0 && m.status_ok && m.loss <= TOL && m.res3 <= TOL && m.grad <= TOL && m.vr == vr && m.vl == vl;
        char rows[128];
        world_ints(m.vr, rows, sizeof rows);
        check(ok, name, "loss_rel=%.2e res3_rel=%.2e grad_rel=%.2e (rank 0's worst %s); real vocabulary rows per rank "
              "%s of %d", loss, res3, grad, m.worst, rows, m.vl);
        if (i == 2) { /* tp_dropout: its masks change the loss */
            snprintf(name, sizeof name, "control_d_dropout_live_np%d", W);
            check(rc == 0 && m.nodrop > 1e-4, name, "full model, loss without dropout differs by %.2e rel", m.nodrop);
        }
        snprintf(name, sizeof name, "control_c_wrong_rank_slice_fails_%s_np%d", k->name, W);
        double wrong = world_min(m.wrong);
        check(rc == 0 && m.wrong > TOL, name, "grad_rel against rank %d's slice = %.2e (min over ranks %.2e)",
              (r + 1) % W, m.wrong, wrong);
        if (i == 0) { /* tp, no recompute, one micro-batch */
            /* Megatron's operator count: forward = embedding + 2 per layer + 2 per head chunk (max, then
             * sums and target logits), backward = the head input gradient + 2 per layer. */
            long fw = 1 + 2 * L_ + 2 * m.chunks, bw = 1 + 2 * L_;
            snprintf(name, sizeof name, "tp_allreduce_count_np%d", W);
            check(m.ar[0] == fw && m.ar[1] == bw && m.ag[0] + m.ag[1] + m.rs[0] + m.rs[1] == 0, name,
                  "forward %ld (want %ld) backward %ld (want %ld), all-gathers %ld, reduce-scatters %ld", m.ar[0], fw,
                  m.ar[1], bw, m.ag[0] + m.ag[1], m.rs[0] + m.rs[1]);
        }
        if (i == 1 && c->rank == 0)
            printf("  sp collectives per micro-batch: forward all-reduce %ld all-gather %ld reduce-scatter %ld; "
                   "backward %ld %ld %ld\n", m.ar[0], m.ag[0], m.rs[0], m.ar[1], m.ag[1], m.rs[1]);
    }

    /* Control b: the backward's tp all-reduces skipped (tp: the region entries and the head input
     * gradient; sp: the LayerNorm parameter gradients). The forward is untouched, so the loss must
     * still match; the gradients must not. */
    for (int sp = 0; sp <= 1; sp++) {
        ModelCase k = {sp ? "tp_sp" : "tp", sp, 0.0f, RECOMPUTE_NONE, 1};
        ModelResult m;
        char name[96];
        int rc = model_case(c, &k, FAULT_SKIP_BWD_ALLREDUCE, &m);
        snprintf(name, sizeof name, "control_b_skipped_backward_allreduce_fails_%s_np%d", k.name, W);
        double grad = world_min(m.grad);
        check(rc == 0 && m.loss <= TOL && m.res3 <= TOL && m.grad > TOL, name,
              "forward still equal: loss_rel=%.2e res3_rel=%.2e; grad_rel=%.2e (worst %s; min over ranks %.2e), "
              "%ld backward all-reduces skipped", m.loss, m.res3, m.grad, m.worst, grad, m.ar[1]);
    }
}

/* ================================================================ part 2: the vocabulary-parallel loss */

typedef struct {
    Comm *c;
    int noop; /* control a: the reduction is missing */
} ReduceCtx;

static void head_reduce(void *ctx, float *buf, size_t n, int max) {
    ReduceCtx *rc = ctx;
    if (rc->noop) return;
    Err e;
    if (comm_tp_allreduce_f32(rc->c, buf, n, max ? COMM_MAX : COMM_SUM, &e) != ST_OK)
        for (size_t i = 0; i < n; i++) buf[i] = NAN; /* fails the comparison */
}

typedef struct {
    double loss, dx, dwte; /* per-row relative (max), relative norms */
    int vr;
} HeadResult;

static void head_case(Comm *c, int acc, int noop, HeadResult *res) {
    enum { n = 37, C = 48, chunk = 8 };
    int V = V_, Vp = 128, W = c->tp, r = c->tp_rank;
    int Vl = (V + 64 * W - 1) / (64 * W) * 64, v0 = r * Vl, Vr = V - v0;
    Vr = Vr < 0 ? 0 : Vr > Vl ? Vl : Vr;
    float dscale = 1.0f / n;
    float *x = malloc(sizeof(float) * n * C), *wte = calloc((size_t)Vp * C, sizeof(float));
    float *lf = malloc(sizeof(float) * n), *dxf = malloc(sizeof(float) * n * C);
    float *dwf = malloc(sizeof(float) * Vp * C), *logf_ = malloc(sizeof(float) * chunk * Vp);
    float *wl = calloc((size_t)Vl * C, sizeof(float)), *ll = malloc(sizeof(float) * n);
    float *dxl = malloc(sizeof(float) * n * C), *dwl = malloc(sizeof(float) * Vl * C);
    float *logl = malloc(sizeof(float) * chunk * Vl), *stats = malloc(sizeof(float) * 3 * chunk);
    int32_t tgt[n];
    ST_CHECK(x && wte && lf && dxf && dwf && logf_ && wl && ll && dxl && dwl && logl && stats);
    for (size_t i = 0; i < (size_t)n * C; i++) x[i] = rng_normal(5, 0, i);
    for (size_t i = 0; i < (size_t)V * C; i++) wte[i] = 0.3f * rng_normal(5, 1, i);
    for (size_t i = 0; i < (size_t)Vp * C; i++) dwf[i] = rng_normal(5, 2, i); /* acc: added to */
    for (int i = 0; i < n; i++) tgt[i] = i % 6 == 4 ? -1 : (int32_t)(((uint64_t)i * 2654435761u + 17) % (uint64_t)V);
    memcpy(wl, wte + (size_t)v0 * C, sizeof(float) * Vr * C);
    memcpy(dwl, dwf + (size_t)v0 * C, sizeof(float) * (size_t)(Vr > 0 ? Vr : 0) * C);
    head_forward_backward(lf, dxf, dwf, logf_, x, wte, tgt, n, C, V, Vp, dscale, chunk, acc, 1, NULL, NULL, NULL);
    ReduceCtx rc = {c, noop};
    head_forward_backward_vp(NULL, ll, dxl, dwl, logl, stats, x, wl, NULL, tgt, n, C, v0, Vr, Vl, dscale, chunk, acc, 1,
                             head_reduce, &rc, NULL, NULL);
    res->loss = 0;
    for (int i = 0; i < n; i++) {
        double d = fabs((double)ll[i] - lf[i]) / (lf[i] != 0 ? fabs(lf[i]) : 1.0);
        if (!(d <= res->loss)) res->loss = d;
    }
    Err e;
    if (comm_tp_allreduce_f32(c, dxl, (size_t)n * C, COMM_SUM, &e) != ST_OK) dxl[0] = NAN;
    res->dx = tu_rel_err_f(dxl, dxf, (size_t)n * C);
    res->dwte = Vr > 0 ? tu_rel_err_f(dwl, dwf + (size_t)v0 * C, (size_t)Vr * C) : 0.0;
    res->vr = Vr;
    free(x), free(wte), free(lf), free(dxf), free(dwf), free(logf_), free(wl), free(ll), free(dxl), free(dwl);
    free(logl), free(stats);
}

static void test_head(Comm *c) {
    int W = c->tp;
    for (int acc = 0; acc <= 1; acc++) {
        HeadResult h;
        char name[96];
        head_case(c, acc, 0, &h);
        snprintf(name, sizeof name, "vocab_parallel_loss_%s_np%d", acc ? "accumulate" : "overwrite", W);
        double loss = world_max(h.loss), dx = world_max(h.dx), dw = world_max(h.dwte);
        char rows[128];
        world_ints(h.vr, rows, sizeof rows);
        check(h.loss <= TOL && h.dx <= TOL && h.dwte <= TOL, name,
              "n=37 chunk=8 V=97: loss_rel=%.2e dx_sum_rel=%.2e dwte_rel=%.2e; real rows per rank %s", loss, dx, dw,
              rows);
    }
    HeadResult h;
    char name[96];
    head_case(c, 0, 1, &h);
    snprintf(name, sizeof name, "control_a_missing_reduce_fails_np%d", W);
    double loss = world_min(h.loss);
    check(!(h.loss <= TOL), name, "loss_rel=%.2e (min over ranks %.2e) dx_sum_rel=%.2e", h.loss, loss, h.dx);
}

/* ================================================================ refusals */

static void test_refusals(Comm *c) {
    ModelConfig cfg = test_config(0.0f);
    GptOptions o = gpt_default_options();
    o.B = 1, o.T = 3;
    Gpt g;
    Err err = {0};
    o.tp = 3; /* 4 heads */
    Status st = gpt_init(&g, &cfg, &o, NULL, &err);
    int ok = st == ST_ERR_INPUT && strstr(err.msg, "--tp 3") && strstr(err.msg, "4 attention heads") &&
             strstr(err.msg, "remainder of 1");
    gpt_free(&g);
    check(ok, "refuse_tp_not_dividing_heads", "status %d msg='%s'", (int)st, err.msg);

    o.tp = 2, o.sp = 1; /* B·T = 3 rows */
    err.msg[0] = 0;
    st = gpt_init(&g, &cfg, &o, NULL, &err);
    ok = st == ST_ERR_INPUT && strstr(err.msg, "--sp") && strstr(err.msg, "1 x 3 = 3") && strstr(err.msg, "--tp 2");
    gpt_free(&g);
    check(ok, "refuse_sp_rows_not_dividing", "status %d msg='%s'", (int)st, err.msg);

    /* The same model at a dividing tp is accepted: the refusals are about the numbers. */
    o.tp = c->tp, o.tp_rank = c->tp_rank, o.sp = 0;
    st = gpt_init(&g, &cfg, &o, NULL, &err);
    gpt_free(&g);
    check(st == ST_OK, "accept_tp_dividing_heads", "tp %d: status %d %s", o.tp, (int)st, st ? err.msg : "");
}

int main(int argc, char **argv) {
    Comm *c = tu_world_init(&argc, &argv);
    Err err = {0};
    g_c = c;
    char *end;
    long want = argc > 1 ? strtol(argv[1], &end, 10) : 0;
    if (argc < 2 || *end || want < 2) {
        if (c->rank == 0)
            fprintf(stderr, "test_tp_block: expected the world size the launcher was asked for (>= 2) as the "
                            "argument, found '%s'\n", argc > 1 ? argv[1] : "");
        comm_finalize(c);
        return 1;
    }
    check(c->world == want, "world_equals_launched_np", "expected np=%ld", want);
    if (c->world != want) { /* a job of independent single-process worlds would compare tp 1 with tp 1 */
        comm_finalize(c);
        return tu_exit();
    }
    Status st = comm_set_grid(c, 1, c->world, 1, &err);
    check(st == ST_OK && c->tp == c->world && c->tp_rank == c->rank, "grid_tp_equals_world", "%s", st ? err.msg : "");
    if (st != ST_OK) {
        comm_finalize(c);
        return tu_exit();
    }
    double t0 = timer_ms();
    test_refusals(c);
    test_head(c);
    test_model(c);
    if (c->rank == 0) printf("test_tp_block: %.0f ms\n", timer_ms() - t0);
    comm_finalize(c);
    return tu_exit();
}
