/* test_pp_stage.c — pipeline stages of the model in one process against the whole model (issue 14).
 *
 * Oracle: the whole model (every block, one slot) on m micro-batches, gradients accumulated. The
 * same weights split over P "ranks" built in this process (GptOptions.stage, .slots = m), each
 * holding its chunks of blocks: contiguous stages (P = 2, blocks 0-1 | 2-3) and interleaved chunks
 * (P = 2, v = 2: rank 0 holds blocks 0 and 2, rank 1 blocks 1 and 3, virtual stage s on rank s % P,
 * chunk s / P). The test moves activations and gradients between them by hand: all forwards in
 * virtual-stage order (every micro-batch in flight at once: the slots must keep them apart), then
 * the backwards in reverse order of micro-batches (slots released out of their filling order).
 * Checks, fp32, one thread, dropout 0.1 (masks keyed by the global micro-batch and layer):
 *   - each micro-batch's loss sum equal to the whole model's (relative <= 1e-6);
 *   - every gradient tensor of every rank equal to the whole model's same tensor (relative norm
 *     <= 1e-5), wte as the SUM of the embedding rank's and the head rank's parts (the tied weight's
 *     exchange the trainer does between the first and last stage);
 *   - the activation bytes each rank allocated equal layout_run_bytes's (plan's function).
 * Negative controls (each must fail its comparison): (a) the backward of micro-batch 0 given
 * micro-batch 1's output gradient; (b) the head rank's wte gradient alone (the exchange skipped);
 * (c) virtual stage 1 given micro-batch 0's activations for micro-batch 1; (w, split backward)
 * micro-batch 1's weight pass skipped on virtual stage 0.
 * Split backward (zb-h1's B and W): the same cases with GptOptions.split_backward, every weight pass
 * run after all the input-gradient passes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"
#include "core/rng.h"
#include "model/gpt.h"
#include "testutil.h"

enum { L = 4, C = 64, NH = 4, V = 97, T = 16, B = 2, M = 3 };

static ModelConfig cfg_make(void) {
    ModelConfig c;
    memset(&c, 0, sizeof c);
    c.n_layer = L, c.n_embd = C, c.n_head = NH, c.vocab = V, c.max_seq = T, c.dropout = 0.1f;
    Err err;
    if (model_config_validate(&c, &err) != ST_OK) {
        fprintf(stderr, "test_pp_stage: %s\n", err.msg);
        exit(1);
    }
    return c;
}

/* Non-trivial weights: GPT-2's init plus small random biases and LayerNorm parameters. */
static void init_weights(Gpt *g) {
    gpt_init_params(g, 7);
    const ParamLayout *pl = &g->w.layout;
    for (int k = 0; k < pl->ntensors; k++) {
        const TensorInfo *t = &pl->tensors[k];
        if (t->ndim != 1) continue;
        for (size_t i = 0; i < t->numel; i++) g->w.params[t->offset + i] += 0.05f * rng_normal(11, (uint64_t)k, i);
    }
}

typedef struct {
    Gpt g[4];
    int P, v, split;
} Pipe;

/* Rank and chunk of virtual stage s (Megatron's layout: stage s on rank s % P, chunk s / P). */
static int vs_rank(const Pipe *p, int s) { return s % p->P; }
static int vs_chunk(const Pipe *p, int s) { return s / p->P; }

/* Blocks of virtual stage s when L blocks split evenly over P·v stages. */
static Status pipe_init(Pipe *p, int P, int v, int split, const ModelConfig *cfg, const Gpt *whole, MemStats *mem,
                        Err *err) {
    memset(p, 0, sizeof *p);
    p->P = P, p->v = v, p->split = split;
    int S = P * v, per = L / S;
    for (int r = 0; r < P; r++) {
        GptOptions o = gpt_default_options();
        o.B = B, o.T = T, o.slots = M * v, o.split_backward = split;
        o.stage.n = v;
        for (int c = 0; c < v; c++) o.stage.first[c] = (c * P + r) * per, o.stage.last[c] = (c * P + r + 1) * per;
        Status st = gpt_init(&p->g[r], cfg, &o, &mem[r], err);
        if (st != ST_OK) return st;
        layout_tp_copy(&p->g[r].w.layout, p->g[r].w.params, &whole->w.layout, whole->w.params, 0, 1);
        p->g[r].s.dropout_seed = whole->s.dropout_seed;
        gpt_zero_grads(&p->g[r]);
    }
    return ST_OK;
}

static void pipe_free(Pipe *p) {
    for (int r = 0; r < p->P; r++) gpt_free(&p->g[r]);
}

/* Runs the m micro-batches through the pipe; loss[j] gets each loss sum. Micro-batch j of chunk c
 * lives in slot c·M + j. fault 'a': the backward of micro-batch 0 through the last non-head stage
 * gets micro-batch 1's output gradient; 'c': virtual stage 1 receives micro-batch 0's activations
 * in place of micro-batch 1's (a mixed-up receive). */
static void pipe_run(Pipe *p, const int32_t *inp, const int32_t *tgt, float dscale, double *loss, char fault) {
    int S = p->P * p->v;
    size_t NC = (size_t)B * T * C;
    static float dout[B * T * C], keep[B * T * C];
    for (int j = 0; j < M; j++) {
        const int32_t *x = inp + (size_t)j * B * T, *y = tgt + (size_t)j * B * T;
        for (int s = 0; s < S; s++) {
            Gpt *g = &p->g[vs_rank(p, s)];
            int slot = vs_chunk(p, s) * M + j;
            if (s > 0) {
                const Gpt *prev = &p->g[vs_rank(p, s - 1)];
                int from = fault == 'c' && j == 1 && s == 1 ? 0 : j; /* 'c': micro-batch 0's activations */
                memcpy(gpt_stage_input(g, slot), gpt_stage_output(prev, vs_chunk(p, s - 1) * M + from, vs_chunk(p, s - 1)),
                       NC * sizeof(float));
            }
            double ls = gpt_forward_stage(g, slot, vs_chunk(p, s), x, y, B, T, dscale, 1, (uint64_t)j);
            if (s == S - 1) loss[j] = ls;
        }
    }
    for (int j = M - 1; j >= 0; j--) /* out of the slots' filling order */
        for (int s = S - 1; s >= 0; s--) {
            Gpt *g = &p->g[vs_rank(p, s)];
            const float *d = s < S - 1 ? dout : NULL;
            if (s == S - 2 && j == 1) memcpy(keep, dout, sizeof keep);
            if (s == S - 2 && j == 0 && fault == 'a') d = keep;
            gpt_backward_stage(g, vs_chunk(p, s) * M + j, vs_chunk(p, s), d);
            if (s > 0) memcpy(dout, gpt_stage_dinput(g), NC * sizeof(float));
        }
    /* Split backward: the weight passes after every input-gradient pass, in yet another order
     * (their output gradients must have been kept per slot). Fault 'w': one weight pass skipped. */
    for (int j = 0; p->split && j < M; j++)
        for (int s = 0; s < S; s++)
            if (!(fault == 'w' && j == 1 && s == 0)) gpt_weight_stage(&p->g[vs_rank(p, s)], vs_chunk(p, s) * M + j, vs_chunk(p, s));
}

/* Worst relative norm error over every tensor of every rank against the whole model's gradients;
 * wte = the embedding rank's part + (unless skip_exchange) the head rank's. */
static double grad_err(const Pipe *p, const Gpt *whole, int skip_exchange, char *worst, size_t cap) {
    const ParamLayout *wl = &whole->w.layout;
    double e = 0;
    snprintf(worst, cap, "-");
    for (int r = 0; r < p->P; r++) {
        const ParamLayout *pl = &p->g[r].w.layout;
        for (int k = 0; k < pl->ntensors; k++) {
            const TensorInfo *t = &pl->tensors[k];
            const TensorInfo *f = &wl->tensors[layout_find_id(wl, t->id)];
            size_t n = (size_t)t->rows_real * t->shape[1];
            float *sum = malloc(n * sizeof(float));
            memcpy(sum, p->g[r].d.grads + t->offset, n * sizeof(float));
            if (t->id == 0) { /* wte: add the other end's part */
                for (int q = 0; q < p->P; q++) {
                    if (q == r || skip_exchange) continue;
                    const ParamLayout *ql = &p->g[q].w.layout;
                    int qk = layout_find_id(ql, 0);
                    if (qk < 0) continue;
                    for (size_t i = 0; i < n; i++) sum[i] += p->g[q].d.grads[ql->tensors[qk].offset + i];
                }
            }
            double d = tu_rel_err_f(sum, whole->d.grads + f->offset, n);
            if (!(d <= e)) e = d, snprintf(worst, cap, "rank %d %s", r, t->name);
            free(sum);
        }
    }
    return e;
}

static double loss_err(const double *a, const double *b) {
    double e = 0;
    for (int j = 0; j < M; j++) {
        double d = fabs(a[j] - b[j]) / fabs(b[j]);
        if (!(d <= e)) e = d;
    }
    return e;
}

static void case_run(int P, int v, int split, const ModelConfig *cfg, Gpt *whole, const int32_t *inp,
                     const int32_t *tgt, float dscale, const double *want) {
    char name[64], worst[96];
    snprintf(name, sizeof name, "P=%d v=%d%s", P, v, split ? " split backward" : "");
    MemStats mem[4];
    memset(mem, 0, sizeof mem);
    Pipe p;
    Err err = {0};
    Status st = pipe_init(&p, P, v, split, cfg, whole, mem, &err);
    tu_check(st == ST_OK, name, "stages built (%s)", st == ST_OK ? "ok" : err.msg);
    if (st != ST_OK) {
        pipe_free(&p);
        return;
    }
    double loss[M];
    pipe_run(&p, inp, tgt, dscale, loss, 0);
    char n2[96];
    snprintf(n2, sizeof n2, "%s losses", name);
    double le = loss_err(loss, want);
    tu_check(le <= 1e-6, n2, "max relative difference of the %d micro-batch loss sums %.2e (<= 1e-6)", M, le);
    double ge = grad_err(&p, whole, 0, worst, sizeof worst);
    snprintf(n2, sizeof n2, "%s gradients", name);
    tu_check(ge <= 1e-5, n2, "worst tensor %s: relative norm error %.2e (<= 1e-5)", worst, ge);
    double ce = grad_err(&p, whole, 1, worst, sizeof worst);
    snprintf(n2, sizeof n2, "%s control b (no wte exchange)", name);
    tu_check(ce > 1e-3, n2, "the head rank's wte part alone: error %.2e must exceed 1e-3", ce);
    /* Activation bytes as planned. */
    for (int r = 0; r < P; r++) {
        size_t want_b[MEM_NCAT] = {0};
        ActStage ast = layout_act_stage(&p.g[r].w.layout, M * v);
        ast.split = split;
        ActOptions ao = layout_act_options(B, T, 1);
        ao.stage = &ast;
        layout_run_bytes(cfg, &ao, want_b);
        snprintf(n2, sizeof n2, "%s rank %d activation bytes", name, r);
        tu_check(mem[r].bytes[MEM_ACTIVATIONS] == want_b[MEM_ACTIVATIONS] &&
                     mem[r].bytes[MEM_WORKSPACE] == want_b[MEM_WORKSPACE],
                 n2, "allocated %zu + %zu workspace, planned %zu + %zu", mem[r].bytes[MEM_ACTIVATIONS],
                 mem[r].bytes[MEM_WORKSPACE], want_b[MEM_ACTIVATIONS], want_b[MEM_WORKSPACE]);
    }
    /* Controls a and c on fresh gradients. */
    const char faults[3] = {'a', 'c', 'w'};
    for (int f = 0; f < (split ? 3 : 2); f++) {
        for (int r = 0; r < P; r++) gpt_zero_grads(&p.g[r]);
        pipe_run(&p, inp, tgt, dscale, loss, faults[f]);
        double e = grad_err(&p, whole, 0, worst, sizeof worst);
        if (faults[f] == 'c') e = fmax(e, loss_err(loss, want));
        snprintf(n2, sizeof n2, "%s control %c", name, faults[f]);
        tu_check(e > 1e-3, n2, "%s: error %.2e must exceed 1e-3",
                 faults[f] == 'a'   ? "micro-batch 1's output gradient for micro-batch 0"
                 : faults[f] == 'c' ? "micro-batch 0's activations for micro-batch 1"
                                    : "micro-batch 1's weight pass skipped on virtual stage 0", e);
    }
    pipe_free(&p);
}

int main(void) {
    ModelConfig cfg = cfg_make();
    GptOptions o = gpt_default_options();
    o.B = B, o.T = T;
    Gpt whole;
    Err err = {0};
    if (gpt_init(&whole, &cfg, &o, NULL, &err) != ST_OK) {
        fprintf(stderr, "test_pp_stage: %s\n", err.msg);
        return 1;
    }
    init_weights(&whole);
    whole.s.dropout_seed = 99;
    int32_t inp[M * B * T], tgt[M * B * T];
    for (int i = 0; i < M * B * T; i++) {
        inp[i] = (int32_t)rng_below(3, 1, (uint64_t)i, V);
        tgt[i] = i % 11 == 5 ? -1 : (int32_t)rng_below(3, 2, (uint64_t)i, V); /* some masked targets */
    }
    long ntok = 0;
    for (int i = 0; i < M * B * T; i++) ntok += tgt[i] >= 0;
    float dscale = 1.0f / (float)ntok;
    double want[M];
    gpt_zero_grads(&whole);
    for (int j = 0; j < M; j++) {
        want[j] = gpt_forward(&whole, inp + (size_t)j * B * T, tgt + (size_t)j * B * T, B, T, dscale, 1, (uint64_t)j);
        gpt_backward(&whole);
    }
    case_run(2, 1, 0, &cfg, &whole, inp, tgt, dscale, want);
    case_run(2, 2, 0, &cfg, &whole, inp, tgt, dscale, want);
    case_run(4, 1, 0, &cfg, &whole, inp, tgt, dscale, want);
    case_run(2, 1, 1, &cfg, &whole, inp, tgt, dscale, want);
    case_run(4, 1, 1, &cfg, &whole, inp, tgt, dscale, want);
    gpt_free(&whole);
    return tu_exit();
}
