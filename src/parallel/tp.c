/* tp.c — tensor parallelism's part of Par (parallel.h, docs/parallel.md "Tensor and sequence
 * parallelism"): the model's tp_* hooks on the tp group's collectives, and the pieces of this
 * rank's owned gradient that the global norm counts on another rank (ParNorm.twice: tensors every
 * tp rank holds whole, and a pipeline head stage's copy of the tied wte).
 *
 * The collectives are blocking; an error is kept for par_grads_finish and the model runs on with
 * garbage, as after a failed GEMM. */
#include <stdlib.h>

#include "parallel/parallel_internal.h"

/* ================================================================ hooks */

static void h_tp_allreduce(void *ctx, float *buf, size_t n, int max) {
    Par *p = ctx;
    if (p->o.faults.tp_skip_backward && p->st.in_bwd) return;
    Err e;
    Status st = comm_tp_allreduce_f32(p->c, buf, n, max ? COMM_MAX : COMM_SUM, &e);
    if (st != ST_OK) par_hook_fail(p, st, &e);
}

static void h_tp_allgather(void *ctx, float *buf, size_t block) {
    Par *p = ctx;
    Err e;
    Status st = comm_tp_allgather_f32(p->c, buf, block, &e);
    if (st != ST_OK) par_hook_fail(p, st, &e);
}

static void h_tp_reduce_scatter(void *ctx, float *buf, size_t block) {
    Par *p = ctx;
    Err e;
    Status st = comm_tp_reduce_scatter_f32(p->c, buf, block, &e);
    if (st != ST_OK) par_hook_fail(p, st, &e);
}

void tp_set_hooks(Par *p) {
    p->g->hooks.tp_allreduce = h_tp_allreduce;
    p->g->hooks.tp_allgather = h_tp_allgather;
    p->g->hooks.tp_reduce_scatter = h_tp_reduce_scatter;
}

/* ================================================================ the norm's replicated pieces */

int tp_norm_init(Par *p) {
    const ParamLayout *pl = p->pl;
    const Comm *c = p->c;
    ParNorm *nm = &p->norm;
    /* Pieces counted elsewhere, subtracted from this rank's norm: replicated tensors on tp ranks
     * other than 0, and the head stage's copy of a tied wte (the embedding stage counts it). */
    int head_copy = p->tied.on && !pl->has_embed;
    if (!((c->tp > 1 && c->tp_rank != 0) || head_copy)) return 1;
    if (!(nm->twice = calloc((size_t)pl->ntensors, sizeof *nm->twice))) return 0;
    for (int i = 0; i < pl->ntensors; i++) {
        const TensorInfo *t = &pl->tensors[i];
        int twice = (c->tp > 1 && c->tp_rank != 0 && t->split == TP_REPLICATED) || (head_copy && t->id == 0);
        if (!twice) continue;
        int s = t->segment;
        size_t a = p->off[s] + (size_t)p->r * p->blk[s], b = a + p->blk[s];
        size_t lo = t->offset > a ? t->offset : a, hi = t->offset + t->numel < b ? t->offset + t->numel : b;
        if (hi <= lo) continue;
        nm->twice[nm->ntwice][0] = (size_t)s, nm->twice[nm->ntwice][1] = lo - a, nm->twice[nm->ntwice][2] = hi - a;
        nm->ntwice++;
    }
    return 1;
}

double tp_norm_subtract(Par *p, double local) {
    for (int i = 0; i < p->norm.ntwice; i++) { /* one piece at a time (a fixed order of roundings) */
        const float *gr = zero_owned_grad(p, (int)p->norm.twice[i][0]);
        double acc = 0;
        for (size_t x = p->norm.twice[i][1]; x < p->norm.twice[i][2]; x++) acc += (double)gr[x] * gr[x];
        local -= acc;
    }
    return local;
}
