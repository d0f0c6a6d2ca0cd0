/* zero.c — ZeRO stages 0–3 over the dp group (parallel.h's table, docs/parallel.md "Buckets and
 * overlap"): the gradient collectives of stage 0/1 on the full buffer (ZeroBuckets), the stage 2/3
 * bucket slots and gradient shard (ZeroGrads), the stage 3 parameter gathers (ZeroParams), the dp
 * hooks the model calls around each segment, and parameters and moments in and out of the
 * layout (par_set_full / par_get_full).
 *
 * Contents: views of one segment · gradients, stage 0/1 · gradients, stage 2/3 · parameters,
 * stage 3 · the hooks · init / free · the step's parts · state in and out. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/parallel_internal.h"

/* ================================================================ views */

/* n floats of a gradient buffer set to zero: the device's memory through its table. */
static void zero_fill(Par *p, float *x, size_t n) {
    if (p->dev) p->dev->zero(x, n * sizeof(float));
    else memset(x, 0, n * sizeof(float));
}

/* ZeRO 2-3's buffers (gradient shard and buckets, parameter shard and gather buffers, their 2-byte
 * copies): bytes of category c, in the device's memory on a device; *ok = 0 when out of memory. */
static void *state_alloc(Par *p, MemCategory c, size_t bytes, int *ok) {
    if (bytes == 0) return NULL;
    void *x = p->dev ? p->dev->alloc(p->mem, c, bytes) : mem_alloc(p->mem, c, bytes);
    if (!x) *ok = 0;
    return x;
}

static void state_free(Par *p, MemCategory c, void *x, size_t bytes) {
    if (p->dev) p->dev->free(p->mem, c, x, bytes);
    else mem_free(p->mem, c, x, bytes);
}

/* Points the views of segment s (params or grads) at buf, which holds that segment. */
static void seg_views(Par *p, ParamViews *v, int s, float *buf) { layout_segment_views(p->pl, s, buf, v); }

/* ================================================================ gradients, stage 0/1 */

/* Stage 0: starts queued buckets while fewer than ZERO_BUCKETS_IN_FLIGHT run. Every rank queues
 * the same buckets in the same order, so the collectives start in one order everywhere. */
static void pump_buckets(Par *p) {
    ZeroBuckets *zb = &p->zb;
    int active = 0;
    for (int i = 0; i < zb->nreq; i++) active += zb->req[i].active;
    while (active < ZERO_BUCKETS_IN_FLIGHT && zb->qhead < zb->qtail) {
        int i = zb->queue[zb->qhead++];
        float *b = p->g->d.grads + zb->req_off[i];
        Err e;
        Status st = p->stage.on ? stage_allreduce(p, i, &e) /* a device: through a host slot */
                                : comm_iallreduce_f32(p->c, b, b, zb->req_n[i], &zb->req[i], &e);
        if (st != ST_OK) {
            par_hook_fail(p, st, &e);
            return;
        }
        active++;
    }
}

/* Segment s's gradients are complete on this rank: stage 0 queues its buckets, stage 1 starts its
 * in-place reduce-scatter. */
static void start_seg_grads(Par *p, int s) {
    ZeroBuckets *zb = &p->zb;
    Err e;
    Status st = ST_OK;
    if (zb->started[s] || p->len[s] == 0) return; /* empty: a block another pipeline stage holds */
    zb->started[s] = 1;
    float *base = p->g->d.grads + p->off[s];
    if (p->zero == 0) {
        for (int q = 0; q < zb->seg_nreq[s]; q++) zb->queue[zb->qtail++] = zb->seg_req0[s] + q;
        pump_buckets(p);
        return;
    }
    if (p->stage.on) st = stage_reduce_scatter(p, s, &e); /* a device: through a host slot */
    else st = comm_ireduce_scatter_f32(p->c, base, base + (size_t)p->r * p->blk[s], p->blk[s], &zb->req[zb->seg_req0[s]], &e);
    if (st != ST_OK) par_hook_fail(p, st, &e);
}

static void progress(Par *p) {
    if (p->progress_fn) p->progress_fn(p->progress_ctx);
    for (int i = 0; i < p->zb.nreq; i++)
        if (p->zb.req[i].active) comm_test(&p->zb.req[i]);
    if (p->stage.on) { /* a device: the results complete so far go back now */
        Err e;
        Status st = stage_reap(p, 0, &e);
        if (st != ST_OK) par_hook_fail(p, st, &e);
    }
    if (p->zero == 0) pump_buckets(p);
    for (int a = 0; a < 2; a++)
        if (p->zg.slot_req[a].active) comm_test(&p->zg.slot_req[a]);
    if (p->zg.b0_req.active) comm_test(&p->zg.b0_req);
}

/* ================================================================ gradients, stage 2/3 */

/* Waits for slot a's reduce-scatter and adds the owned block into the gradient shard. */
static Status gslot_finish(Par *p, int a, Err *err) {
    ZeroGrads *zg = &p->zg;
    if (!zg->slot_pending[a]) return ST_OK;
    int s = zg->slot_seg[a];
    Status st = comm_wait(&zg->slot_req[a], p->c->timeout_s, "grad reduce-scatter", p->c->step, err);
    if (st != ST_OK) return st;
    if (p->stage.on) stage_bucket_rs_finish(p, zg->buf[a], s); /* a device: through its host twin */
    else par_add_into(zg->shard + p->soff[s], zg->buf[a] + (size_t)p->r * p->blk[s], p->blk[s], p->o.nt);
    zg->slot_pending[a] = 0;
    return ST_OK;
}

static Status g0_finish(Par *p, Err *err) {
    ZeroGrads *zg = &p->zg;
    if (!zg->b0_pending) return ST_OK;
    Status st = comm_wait(&zg->b0_req, p->c->timeout_s, "grad reduce-scatter", p->c->step, err);
    if (st != ST_OK) return st;
    if (p->stage.on) stage_bucket_rs_finish(p, zg->b0, 0);
    else par_add_into(zg->shard + p->soff[0], zg->b0 + (size_t)p->r * p->blk[0], p->blk[0], p->o.nt);
    zg->b0_pending = 0;
    return ST_OK;
}

static void start_bucket_rs(Par *p, float *buf, int s, CommReq *req) {
    Err e;
    Status st = p->stage.on ? stage_bucket_rs_start(p, buf, s, req, &e) /* a device: through a host twin */
                            : comm_ireduce_scatter_f32(p->c, buf, buf + (size_t)p->r * p->blk[s], p->blk[s], req, &e);
    if (st != ST_OK) par_hook_fail(p, st, &e);
}

/* ================================================================ parameters, stage 3 */

/* Starts the all-gather of segment s into buf (own block copied in first, then in place). */
static void start_gather(Par *p, int s, float *buf, CommReq *req) {
    ZeroParams *zp = &p->zp;
    if (buf == zp->b0) zp->lb0_ok = 0;
    for (int a = 0; a < 2; a++)
        if (buf == zp->buf[a]) zp->lslot_ok[a] = 0;
    size_t b = p->blk[s];
    Err e;
    Status st;
    if (p->stage.on) { /* a device: on the buffer's host twin, copied back by wait_gather */
        st = stage_gather_start(p, s, buf, req, &e);
    } else {
        memcpy(buf + (size_t)p->r * b, zp->shard + p->soff[s], b * sizeof(float));
        st = comm_iallgather_f32(p->c, buf + (size_t)p->r * b, buf, b, req, &e);
    }
    if (st != ST_OK) par_hook_fail(p, st, &e);
}

static void wait_req(Par *p, CommReq *req, const char *what) {
    Err e;
    Status st = comm_wait(req, p->c->timeout_s, what, p->c->step, &e);
    if (st != ST_OK) par_hook_fail(p, st, &e);
}

/* The gather into buf (started by start_gather) complete and its result in buf: on a device, copied
 * back from the host twin (once per gather). */
static void wait_gather(Par *p, CommReq *req, float *buf) {
    wait_req(p, req, "param all-gather");
    if (p->stage.on) stage_gather_finish(p, buf);
}

/* Mixed precision: rounds a gathered fp32 segment into its working copy, once per gather. */
static void round_gathered(Par *p, const float *buf, uint16_t *lp, size_t n, int *ok) {
    if (p->g->w.prec == GPT_FP32 || *ok) return;
    gpt_round_lp(p->g, lp, buf, n);
    *ok = 1;
}

/* Segment s (>= 1) gathered and its views set; then the gather of `next` (if >= 1) started in the
 * other slot. */
static void ensure_params(Par *p, int s, int next) {
    ZeroParams *zp = &p->zp;
    int a = zp->slot_seg[0] == s ? 0 : zp->slot_seg[1] == s ? 1 : -1;
    if (a < 0) {
        a = zp->slot_seg[0] == next ? 1 : 0;
        if (zp->slot_req[a].active) wait_req(p, &zp->slot_req[a], "param all-gather");
        zp->slot_seg[a] = s;
        start_gather(p, s, zp->buf[a], &zp->slot_req[a]);
    }
    wait_gather(p, &zp->slot_req[a], zp->buf[a]);
    round_gathered(p, zp->buf[a], zp->lbuf[a], p->len[s], &zp->lslot_ok[a]);
    seg_views(p, &p->g->w.p, s, zp->buf[a]);
    if (next >= 1 && next <= p->L + 1 && zp->slot_seg[a ^ 1] != next) {
        if (zp->slot_req[a ^ 1].active) wait_req(p, &zp->slot_req[a ^ 1], "param all-gather");
        zp->slot_seg[a ^ 1] = next;
        start_gather(p, next, zp->buf[a ^ 1], &zp->slot_req[a ^ 1]);
    }
}

/* ================================================================ hooks */

static void h_before_forward(void *ctx, int s) {
    Par *p = ctx;
    ZeroParams *zp = &p->zp;
    p->st.in_bwd = 0;
    if (p->zero >= 3) {
        if (s == 0) {
            /* wte is also the LM head: the embedding segment stays gathered until the update. */
            if (!zp->b0_valid) {
                start_gather(p, 0, zp->b0, &zp->b0_req);
                zp->b0_valid = 1;
            }
            wait_gather(p, &zp->b0_req, zp->b0);
            round_gathered(p, zp->b0, zp->lb0, p->len[0], &zp->lb0_ok);
            seg_views(p, &p->g->w.p, 0, zp->b0);
            if (zp->slot_seg[0] != 1 && zp->slot_seg[1] != 1) {
                int a = zp->slot_req[0].active ? 1 : 0;
                if (zp->slot_req[a].active) wait_req(p, &zp->slot_req[a], "param all-gather");
                zp->slot_seg[a] = 1;
                start_gather(p, 1, zp->buf[a], &zp->slot_req[a]);
            }
        } else {
            ensure_params(p, s, s + 1);
        }
    }
    if (p->zero >= 2 && s == p->L + 1) {
        /* The fused LM head writes wte's gradient during the forward: the embedding bucket must be
         * free (previous micro-batch's reduce-scatter done) and zero from here on. */
        Err e;
        Status st = g0_finish(p, &e);
        if (st != ST_OK) par_hook_fail(p, st, &e);
        zero_fill(p, p->zg.b0, p->E);
        seg_views(p, &p->g->d.g, 0, p->zg.b0);
    }
}

static void h_before_backward(void *ctx, int s) {
    Par *p = ctx;
    ZeroGrads *zg = &p->zg;
    p->st.in_bwd = 1;
    progress(p);
    if (p->zero >= 3 && s >= 1) ensure_params(p, s, s - 1);
    if (p->zero >= 2 && s >= 1) {
        int a = zg->next;
        zg->next ^= 1;
        Err e;
        Status st = gslot_finish(p, a, &e);
        if (st != ST_OK) par_hook_fail(p, st, &e);
        zero_fill(p, zg->buf[a], p->len[s]);
        zg->slot_seg[a] = s;
        zg->seg_slot[s] = a;
        seg_views(p, &p->g->d.g, s, zg->buf[a]);
    }
}

/* Sum of squares of segment s's gradient as this rank's backward left it (no reduction has
 * touched it yet), each tensor once per tp group: replicated tensors count on tp rank 0. */
static double seg_local_sumsq(const Par *p, int s) {
    const float *base = p->zero >= 2 ? (s == 0 ? p->zg.b0 : p->zg.buf[p->zg.seg_slot[s]]) : p->g->d.grads + p->off[s];
    const ParamLayout *pl = p->pl;
    double acc = 0;
    for (int k = 0; k < pl->ntensors; k++) {
        const TensorInfo *t = &pl->tensors[k];
        if (t->segment != s || (pl->tp_rank > 0 && t->split == TP_REPLICATED)) continue;
        const float *x = base + (t->offset - p->off[s]);
        long n = (long)t->numel;
        if (p->dev) { /* the device's Σ x² */
            acc += p->dev->sumsq(x, (size_t)n);
            continue;
        }
        double a = 0;
#pragma omp parallel for reduction(+ : a) num_threads(p->o.nt) schedule(static)
        for (long i = 0; i < n; i++) a += (double)x[i] * x[i];
        acc += a;
    }
    return acc;
}

static void h_grads_ready(void *ctx, int s) {
    Par *p = ctx;
    const Faults *f = &p->o.faults;
    if (!p->st.in_step) return;
    if (p->o.noise && p->st.j == 0) p->st.noise_sumsq += seg_local_sumsq(p, s); /* before this segment's reduction */
    if (f->kill_step > 0 && p->c->step == f->kill_step && p->c->rank == f->kill_rank && s == 1) raise(SIGKILL);
    if (p->zero >= 2) {
        ZeroGrads *zg = &p->zg;
        if (s == 0) {
            start_bucket_rs(p, zg->b0, 0, &zg->b0_req);
            zg->b0_pending = 1;
            if (!p->o.overlap) {
                Err e;
                Status st = g0_finish(p, &e);
                if (st != ST_OK) par_hook_fail(p, st, &e);
            }
        } else {
            int a = zg->seg_slot[s];
            start_bucket_rs(p, zg->buf[a], s, &zg->slot_req[a]);
            zg->slot_pending[a] = 1;
            if (!p->o.overlap) {
                Err e;
                Status st = gslot_finish(p, a, &e);
                if (st != ST_OK) par_hook_fail(p, st, &e);
            }
        }
    } else if (p->st.last && p->o.overlap && !(s == 0 && p->tied.on)) {
        start_seg_grads(p, s); /* a tied wte waits for the pipeline's exchange (par_grads_finish) */
    }
}

void zero_set_hooks(Par *p) {
    p->g->hooks.before_forward = h_before_forward;
    p->g->hooks.before_backward = h_before_backward;
    p->g->hooks.grads_ready = h_grads_ready;
}

/* ================================================================ init / free */

int zero_init(Par *p) {
    ZeroBuckets *zb = &p->zb;
    ZeroGrads *zg = &p->zg;
    ZeroParams *zp = &p->zp;
    Gpt *g = p->g;
    int ns = p->nseg, ok = 1;
    zb->seg_req0 = calloc((size_t)ns, sizeof(int)), zb->seg_nreq = calloc((size_t)ns, sizeof(int));
    zg->seg_slot = calloc((size_t)ns, sizeof(int));
    zb->started = calloc((size_t)ns, sizeof(int));
    if (!zb->started || !zb->seg_req0 || !zb->seg_nreq || !zg->seg_slot) return 0;
    /* Requests: stage 0 all-reduce buckets of <= bucket_floats; otherwise one per segment (the
     * reduce-scatter of stage 1, the parameter all-gather of stages 1-2). */
    for (int s = 0; s < ns; s++) {
        zb->seg_req0[s] = zb->nreq;
        zb->seg_nreq[s] = p->zero == 0 ? (int)((p->len[s] + p->o.bucket_floats - 1) / p->o.bucket_floats) : 1;
        if (zb->seg_nreq[s] < 1) zb->seg_nreq[s] = 1;
        zb->nreq += zb->seg_nreq[s];
    }
    if (!(zb->req = calloc((size_t)zb->nreq, sizeof(CommReq)))) return 0;
    zb->queue = calloc((size_t)zb->nreq, sizeof(int));
    zb->req_off = calloc((size_t)zb->nreq, sizeof(size_t)), zb->req_n = calloc((size_t)zb->nreq, sizeof(size_t));
    if (!zb->queue || !zb->req_off || !zb->req_n) return 0;
    for (int s = 0; s < ns; s++) /* stage 0's bucket ranges */
        for (int q = 0, i = zb->seg_req0[s]; q < zb->seg_nreq[s]; q++, i++) {
            size_t done = (size_t)q * p->o.bucket_floats;
            zb->req_off[i] = p->off[s] + done;
            zb->req_n[i] = p->len[s] - done < p->o.bucket_floats ? p->len[s] - done : p->o.bucket_floats;
        }
    if (p->zero >= 2) {
        zg->shard = state_alloc(p, MEM_GRADS, p->S * sizeof(float), &ok);
        zg->b0 = state_alloc(p, MEM_GRADS, p->E * sizeof(float), &ok);
        zg->buf[0] = state_alloc(p, MEM_GRADS, p->X * sizeof(float), &ok);
        zg->buf[1] = state_alloc(p, MEM_GRADS, p->X * sizeof(float), &ok);
    }
    if (p->zero >= 3) {
        /* Mixed precision: the shard is the fp32 master; the gathered buffers and their 2-byte
         * copies are the parameters the model reads. */
        zp->shard = state_alloc(p, g->w.prec != GPT_FP32 ? MEM_MASTER : MEM_PARAMS, p->S * sizeof(float), &ok);
        zp->b0 = state_alloc(p, MEM_PARAMS, p->E * sizeof(float), &ok);
        zp->buf[0] = state_alloc(p, MEM_PARAMS, p->X * sizeof(float), &ok);
        zp->buf[1] = state_alloc(p, MEM_PARAMS, p->X * sizeof(float), &ok);
        if (g->w.prec != GPT_FP32 && ok) {
            zp->lb0 = state_alloc(p, MEM_PARAMS, p->E * sizeof(uint16_t), &ok);
            zp->lbuf[0] = state_alloc(p, MEM_PARAMS, p->X * sizeof(uint16_t), &ok);
            zp->lbuf[1] = state_alloc(p, MEM_PARAMS, p->X * sizeof(uint16_t), &ok);
            if (ok) {
                gpt_map_lp(g, 0, zp->b0, zp->lb0, p->E);
                gpt_map_lp(g, 1, zp->buf[0], zp->lbuf[0], p->X);
                gpt_map_lp(g, 2, zp->buf[1], zp->lbuf[1], p->X);
            }
        }
    }
    zg->slot_seg[0] = zg->slot_seg[1] = zp->slot_seg[0] = zp->slot_seg[1] = -1;
    return ok;
}

void zero_free(Par *p) {
    ZeroGrads *zg = &p->zg;
    ZeroParams *zp = &p->zp;
    free(p->zb.started), free(p->zb.seg_req0), free(p->zb.seg_nreq), free(p->zb.req), free(zg->seg_slot);
    free(p->zb.queue), free(p->zb.req_off), free(p->zb.req_n);
    state_free(p, MEM_GRADS, zg->shard, p->S * sizeof(float));
    state_free(p, MEM_GRADS, zg->b0, p->E * sizeof(float));
    state_free(p, p->g && p->g->w.prec != GPT_FP32 ? MEM_MASTER : MEM_PARAMS, zp->shard, p->S * sizeof(float));
    state_free(p, MEM_PARAMS, zp->b0, p->E * sizeof(float));
    state_free(p, MEM_PARAMS, zp->lb0, p->E * sizeof(uint16_t));
    for (int a = 0; a < 2; a++) {
        state_free(p, MEM_GRADS, zg->buf[a], p->X * sizeof(float));
        state_free(p, MEM_PARAMS, zp->buf[a], p->X * sizeof(float));
        state_free(p, MEM_PARAMS, zp->lbuf[a], p->X * sizeof(uint16_t));
    }
}

/* ================================================================ the step's parts */

void zero_step_begin(Par *p) {
    /* Stage 0: the first micro-batch writes the gradients (the all-reduce leaves padding at zero).
     * Stage 1's in-place reduce-scatter may leave partial sums outside the owned block, so its
     * buffer, like stage 2's shard, is zeroed. */
    memset(p->zb.started, 0, (size_t)p->nseg * sizeof(int));
    p->zb.qhead = p->zb.qtail = 0;
    if (p->zero >= 2) zero_fill(p, p->zg.shard, p->S);
    else if (p->zero == 1 || p->c->pp > 1) zero_fill(p, p->g->d.grads, p->pl->total);
    else gpt_overwrite_grads(p->g); /* (a pipeline's several micro-batches in flight add from zero) */
}

Status zero_grads_finish(Par *p, Err *err) {
    Status st;
    /* Segments not started from the hooks: without overlap all of them; in a pipeline the tied wte
     * and a head stage's embedding segment (no embedding backward runs there). */
    if (p->zero <= 1)
        for (int s = p->nseg - 1; s >= 0; s--) start_seg_grads(p, s);
    /* Stage 0: the queued buckets, each started when one in flight is done (oldest first). */
    for (ZeroBuckets *zb = &p->zb; p->zero == 0 && zb->qhead < zb->qtail;) {
        CommReq *oldest = NULL;
        for (int k = 0; k < zb->qhead && !oldest; k++)
            if (zb->req[zb->queue[k]].active) oldest = &zb->req[zb->queue[k]];
        if (oldest && (st = comm_wait_all(oldest, 1, p->c->timeout_s, "grad bucket", p->c->step, err)) != ST_OK)
            return st;
        pump_buckets(p);
        if ((st = par_hook_status(p, err)) != ST_OK) return st;
    }
    if (p->zero <= 1) {
        if ((st = comm_wait_all(p->zb.req, p->zb.nreq, p->c->timeout_s, "grad bucket", p->c->step, err)) != ST_OK)
            return st;
        if (p->stage.on && (st = stage_reap(p, 1, err)) != ST_OK) return st; /* a device: the last results back */
    } else {
        for (int a = 0; a < 2; a++)
            if ((st = gslot_finish(p, a, err)) != ST_OK) return st;
        if ((st = g0_finish(p, err)) != ST_OK) return st;
    }
    return ST_OK;
}

float *zero_grads(Par *p) { return p->zero >= 2 ? p->zg.shard : p->g->d.grads; }

float *zero_params(Par *p) { return p->zero >= 3 ? p->zp.shard : p->g->w.params; }

const float *zero_owned_grad(const Par *p, int s) {
    return p->zero >= 2 ? p->zg.shard + p->soff[s] : p->g->d.grads + p->off[s] + (size_t)p->r * p->blk[s];
}

Status zero_params_sync(Par *p, Err *err) {
    Status st = ST_OK;
    ZeroBuckets *zb = &p->zb;
    ZeroParams *zp = &p->zp;
    if ((p->zero == 1 || p->zero == 2) && p->stage.on) { /* a device: each segment through a host slot */
        for (int s = 0; s < p->nseg && st == ST_OK; s++)
            if (p->blk[s]) st = stage_allgather_params(p, s, err);
        if (st == ST_OK) st = stage_reap(p, 1, err);
        if (st == ST_OK) gpt_sync_lp(p->g);
    } else if (p->zero == 1 || p->zero == 2) {
        float *P = p->g->w.params;
        for (int s = 0; s < p->nseg && st == ST_OK; s++)
            if (p->blk[s]) st = comm_iallgather_f32(p->c, P + p->off[s] + (size_t)p->r * p->blk[s], P + p->off[s], p->blk[s],
                                     &zb->req[zb->seg_req0[s]], err);
        if (st == ST_OK) st = comm_wait_all(zb->req, zb->nreq, p->c->timeout_s, "param all-gather", p->c->step, err);
        if (st == ST_OK) gpt_sync_lp(p->g); /* mixed precision: the working copy of the gathered master */
    } else if (p->zero == 3) {
        /* The shard changed: every gathered copy is stale. */
        for (int a = 0; a < 2; a++) {
            if (zp->slot_req[a].active && st == ST_OK)
                st = comm_wait(&zp->slot_req[a], p->c->timeout_s, "param all-gather", p->c->step, err);
            zp->slot_seg[a] = -1;
        }
        if (zp->b0_req.active && st == ST_OK)
            st = comm_wait(&zp->b0_req, p->c->timeout_s, "param all-gather", p->c->step, err);
        zp->b0_valid = 0;
    }
    return st;
}

/* ================================================================ state in and out */

/* The owned blocks of a full host buffer into a shard (on a device: through from_host). */
static void copy_owned(Par *p, float *shard, const float *full) {
    for (int s = 0; s < p->nseg; s++) {
        const float *src = full + p->off[s] + (size_t)p->r * p->blk[s];
        if (p->dev) p->dev->from_host(shard + p->soff[s], src, p->blk[s] * sizeof(float));
        else memcpy(shard + p->soff[s], src, p->blk[s] * sizeof(float));
    }
}

void par_set_full(Par *p, const float *params, const float *m, const float *v) {
    size_t T = p->pl->total;
    if (params) {
        if (p->zero >= 3) copy_owned(p, p->zp.shard, params);
        else if (p->dev) p->dev->from_host(p->g->w.params, params, T * sizeof(float)), gpt_sync_lp(p->g);
        else memcpy(p->g->w.params, params, T * sizeof(float)), gpt_sync_lp(p->g);
    }
    float *mine[2] = {p->m, p->v};
    const float *src[2] = {m, v};
    for (int b = 0; b < 2; b++) {
        if (!mine[b]) continue;
        if (p->dev && !src[b]) p->dev->zero(mine[b], p->mom_floats * sizeof(float));
        else if (!src[b]) memset(mine[b], 0, p->mom_floats * sizeof(float));
        else if (p->zero >= 1) copy_owned(p, mine[b], src[b]);
        else if (p->dev) p->dev->from_host(mine[b], src[b], T * sizeof(float));
        else memcpy(mine[b], src[b], T * sizeof(float));
    }
    p->zp.b0_valid = 0, p->zp.slot_seg[0] = p->zp.slot_seg[1] = -1;
}

/* full gets every rank's blocks of a shard-ordered buffer (all-gather per segment, in place). */
static Status gather_shard(Par *p, const float *shard, float *full, Err *err) {
    Status st = ST_OK;
    for (int s = 0; s < p->nseg && st == ST_OK; s++) {
        if (!p->blk[s]) continue;
        float *mine = full + p->off[s] + (size_t)p->r * p->blk[s];
        if (p->dev) p->dev->to_host(mine, shard + p->soff[s], p->blk[s] * sizeof(float)); /* a device's shard */
        else memcpy(mine, shard + p->soff[s], p->blk[s] * sizeof(float));
        st = comm_allgather_f32(p->c, mine, full + p->off[s], p->blk[s], err);
    }
    return st;
}

Status par_get_full(Par *p, float *params, float *m, float *v, Err *err) {
    size_t T = p->pl->total;
    Status st = ST_OK;
    if (params) {
        if (p->zero >= 3) st = gather_shard(p, p->zp.shard, params, err);
        else if (p->dev && !p->o.faults.device_bypass) p->dev->to_host(params, p->g->w.params, T * sizeof(float));
        else memcpy(params, p->g->w.params, T * sizeof(float));
    }
    float *dst[2] = {m, v}, *mine[2] = {p->m, p->v};
    for (int b = 0; b < 2 && st == ST_OK; b++) {
        if (!dst[b]) continue;
        if (!mine[b]) memset(dst[b], 0, T * sizeof(float));
        else if (p->zero >= 1) st = gather_shard(p, mine[b], dst[b], err);
        else if (p->dev) p->dev->to_host(dst[b], mine[b], T * sizeof(float));
        else memcpy(dst[b], mine[b], T * sizeof(float));
    }
    return st;
}
