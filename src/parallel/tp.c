/* tp.c — tensor parallelism's part of Par (parallel.h, docs/parallel.md "Tensor and sequence
 * parallelism"): the model's tp_* hooks on the tp group's collectives, the pieces of this rank's
 * owned gradient that the global norm counts on another rank (ParNorm.twice: tensors every tp rank
 * holds whole, and a pipeline head stage's copy of the tied wte), and whole tensors assembled from
 * every rank's slices for the gathered checkpoint and the final weights (par_full_tensors).
 *
 * The collectives are blocking (tp_allreduce, tp_allgather, tp_reduce_scatter) or nonblocking
 * (tp_start / tp_wait / tp_progress, issue 28: the model overlaps the column-parallel layers'
 * collectives with their independent GEMMs, and the row-parallel layers' sums chunk by chunk,
 * docs/parallel.md "Overlap"); an error is kept for
 * par_grads_finish and the model runs on with garbage, as after a failed GEMM. */
#include <stdlib.h>
#include <string.h>

#include "parallel/parallel_internal.h"

/* ================================================================ hooks */

/* Faults.tp_nowait: the waits the fault skipped, done now (before the next tp collective starts,
 * so every rank starts its collectives in the same order and none is left open). */
static void flush_deferred(Par *p) {
    for (int i = 0; i < PAR_TP_REQS; i++) {
        if (!p->tp.deferred[i]) continue;
        Err e;
        Status st = comm_wait(&p->tp.req[i], p->c->timeout_s, "tp overlapped (deferred)", p->c->step, &e);
        if (st != ST_OK) par_hook_fail(p, st, &e);
        p->tp.deferred[i] = p->tp.busy[i] = 0;
    }
}

static void h_tp_allreduce(void *ctx, float *buf, size_t n, int max) {
    Par *p = ctx;
    flush_deferred(p);
    if (p->o.faults.tp_skip_backward && p->st.in_bwd) return;
    Err e;
    Status st = comm_tp_allreduce_f32(p->c, buf, n, max ? COMM_MAX : COMM_SUM, &e);
    if (st != ST_OK) par_hook_fail(p, st, &e);
}

static void h_tp_allgather(void *ctx, float *buf, size_t block) {
    Par *p = ctx;
    flush_deferred(p);
    Err e;
    Status st = comm_tp_allgather_f32(p->c, buf, block, &e);
    if (st != ST_OK) par_hook_fail(p, st, &e);
}

static void h_tp_reduce_scatter(void *ctx, float *buf, size_t block) {
    Par *p = ctx;
    flush_deferred(p);
    Err e;
    Status st = comm_tp_reduce_scatter_f32(p->c, buf, block, &e);
    if (st != ST_OK) par_hook_fail(p, st, &e);
}

/* Starts the collective `kind` (GPT_TP_*) on buf into a free request; returns its index, or -1 when
 * nothing is left to wait for (the tp fault's skipped sum, an error, tp 1). */
static int h_tp_start(void *ctx, int kind, float *buf, size_t n) {
    Par *p = ctx;
    flush_deferred(p);
    if (kind == GPT_TP_ALLREDUCE && p->o.faults.tp_skip_backward && p->st.in_bwd) return -1;
    int i = 0;
    while (i < PAR_TP_REQS && p->tp.busy[i]) i++;
    ST_CHECK_MSG(i < PAR_TP_REQS, "more tp collectives in flight than ParTp holds");
    Err e;
    CommReq *q = &p->tp.req[i];
    Status st = kind == GPT_TP_ALLREDUCE   ? comm_tp_iallreduce_f32(p->c, buf, n, COMM_SUM, q, &e)
                : kind == GPT_TP_ALLGATHER ? comm_tp_iallgather_f32(p->c, buf, n, q, &e)
                                           : comm_tp_ireduce_scatter_f32(p->c, buf, n, q, &e);
    if (st != ST_OK) {
        par_hook_fail(p, st, &e);
        return -1;
    }
    if (!q->active) return -1;
    p->tp.busy[i] = 1;
    p->tp.fwd_sum[i] = kind != GPT_TP_ALLGATHER && !p->st.in_bwd;
    return i;
}

static void h_tp_wait(void *ctx, int h) {
    Par *p = ctx;
    if (h < 0) return;
    ST_CHECK(h < PAR_TP_REQS && p->tp.busy[h]);
    if (p->o.faults.tp_nowait || (p->o.faults.tp_nowait_fwd && p->tp.fwd_sum[h])) {
        /* test-only: the buffer is read before the collective completed */
        p->tp.deferred[h] = 1;
        return;
    }
    Err e;
    Status st = comm_wait(&p->tp.req[h], p->c->timeout_s, "tp overlapped", p->c->step, &e);
    if (st != ST_OK) par_hook_fail(p, st, &e);
    p->tp.busy[h] = 0;
}

/* One MPI_Test per request in flight (completed ones stay busy until tp_wait). Returns how many are
 * still incomplete. */
static int h_tp_progress(void *ctx) {
    Par *p = ctx;
    if (p->o.faults.tp_nowait) return 0; /* the fault's requests move only at the next tp hook */
    int left = 0;
    for (int i = 0; i < PAR_TP_REQS; i++)
        if (p->tp.busy[i] && !p->tp.deferred[i] && !comm_test(&p->tp.req[i])) left++;
    return left;
}

Status tp_finish(Par *p, Err *err) {
    flush_deferred(p);
    if (p->hook_st != ST_OK) return ST_OK; /* par_grads_finish reports the hook's error */
    for (int i = 0; i < PAR_TP_REQS; i++)
        if (p->tp.busy[i]) return err_set(err, ST_ERR_RUNTIME, "tp collective %d started and never waited", i);
    return ST_OK;
}

void tp_set_hooks(Par *p) {
    GptHooks *h = &p->g->hooks;
    h->tp_allreduce = h_tp_allreduce;
    h->tp_allgather = h_tp_allgather;
    h->tp_reduce_scatter = h_tp_reduce_scatter;
    if (p->o.faults.tp_blocking) return; /* test-only: the blocking path as before issue 28 */
    h->tp_start = h_tp_start;
    h->tp_wait = h_tp_wait;
    h->tp_progress = p->o.faults.tp_no_progress ? NULL : h_tp_progress;
    h->tp_progress_threaded = comm_serialized(p->c);
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

/* ================================================================ whole tensors (checkpoints) */

/* Pipeline: stage 0 of the replica holding world rank 0 (dp rank 0, tp rank 0) gets the sum of
 * every stage's buf (n floats), through pipeline point-to-point in chunks of 4M floats. */
static Status pp_sum_to_first(Par *p, float *buf, size_t n, long step, Err *err) {
    Comm *c = p->c;
    if (c->dp_rank != 0 || c->tp_rank != 0) return ST_OK;
    const size_t chunk = (size_t)1 << 22;
    Status st = ST_OK;
    float *tmp = c->pp_rank == 0 ? mem_alloc(p->mem, MEM_CKPT_STAGING, chunk * sizeof(float)) : NULL;
    if (c->pp_rank == 0 && !tmp) return err_set(err, ST_ERR_RUNTIME, "out of memory (checkpoint staging)");
    for (size_t done = 0, tag = 0; done < n && st == ST_OK; done += chunk, tag++) {
        size_t m = n - done < chunk ? n - done : chunk;
        CommReq q;
        memset(&q, 0, sizeof q);
        if (c->pp_rank != 0) {
            st = comm_pp_isend_f32(c, buf + done, m, 0, (int)(0x20000000 + tag), &q, err);
            if (st == ST_OK) st = comm_wait(&q, c->timeout_s, "checkpoint gather", step, err);
            continue;
        }
        for (int s = 1; s < c->pp && st == ST_OK; s++) {
            st = comm_pp_irecv_f32(c, tmp, m, s, (int)(0x20000000 + tag), &q, err);
            if (st == ST_OK) st = comm_wait(&q, c->timeout_s, "checkpoint gather", step, err);
            for (size_t i = 0; i < m && st == ST_OK; i++) buf[done + i] += tmp[i];
        }
    }
    if (tmp) mem_free(p->mem, MEM_CKPT_STAGING, tmp, chunk * sizeof(float));
    return st;
}

Status par_full_tensors(Par *p, const ParamLayout *full, float *local, float *fbuf, int nb, long step, Err *err) {
    const ParamLayout *pl = p->pl;
    const Comm *c = p->c;
    size_t n = pl->total;
    Status st = ST_OK;
    /* Each tp rank writes its slices into zeros (tp rank 0 the replicated tensors too) and the tp
     * group sums them; then the pipeline stages' (the head stage's copy of the tied wte left out)
     * are summed on stage 0. */
    int head_copy = c->pp > 1 && pl->has_head && !pl->has_embed;
    for (int i = 0; i < nb; i++) {
        float *f = fbuf + i * full->total;
        layout_tp_copy(pl, local + i * n, full, f, 1, c->tp_rank == 0);
        if (head_copy) memset(f + full->tensors[0].offset, 0, full->tensors[0].numel * sizeof(float));
    }
    if (c->tp > 1) st = comm_tp_allreduce_f32(p->c, fbuf, (size_t)nb * full->total, COMM_SUM, err);
    if (st == ST_OK && c->pp > 1) st = pp_sum_to_first(p, fbuf, (size_t)nb * full->total, step, err);
    return st;
}
