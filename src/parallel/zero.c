/* zero.c — ZeRO stages 0–3 over the dp group (parallel.h's table, docs/parallel.md "Buckets and
 * overlap" and "Pieces"): every collective split into pieces of at most bucket_floats that start
 * through one scheduler (ZeroSched: in queue order, at most ZERO_IN_FLIGHT all-reduces or
 * ZERO_RS_IN_FLIGHT reduce-scatters at once, DEV_STAGE_SLOTS on a device); the gradient
 * collectives of stage 0/1 and the stage 1-2 parameter all-gathers on the full buffers
 * (ZeroBuckets), the stage 2/3 bucket slots and gradient shard (ZeroGrads), the stage 3 parameter
 * gathers (ZeroParams), the dp hooks the model calls around each segment, and parameters and
 * moments in and out of the layout (par_set_full / par_get_full).
 *
 * Contents: views of one segment · the scheduler of pieces · gradients, stage 0/1 · gradients,
 * stage 2/3 · parameters · the hooks · init / free · the step's parts · state in and out. */
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "optim/optim.h"
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

/* ================================================================ the scheduler of pieces */

/* Pieces of a collective covering `span` floats. */
static int npieces(size_t span, size_t piece) { return span ? (int)((span + piece - 1) / piece) : 0; }

/* Each rank's part of a reduce-scatter or all-gather piece of segment s (layout_dp_piece_floats:
 * the floats plan counts the pieces with), or the whole block where comm's ring cannot run the
 * pieces (more than COMM_RING_MAX_RANKS dp ranks, or a block of one piece anyway). */
static size_t rs_piece(const Par *p, int s) {
    size_t q = layout_dp_piece_floats(p->o.bucket_floats, p->dp, p->blk[s]);
    return q ? q : 1; /* an empty block: no pieces anyway */
}

/* The pieces the cap counts now: reductions, and staged pieces (each holds a host slot). */
static int zc_counted(const ZColl *z) { return z->kind != ZC_ALLGATHER || z->staged; }

static int zc_active(const Par *p) {
    int n = 0;
    for (int k = 0; k < p->zs.nall; k++) {
        const ZColl *z = p->zs.all[k];
        if (!zc_counted(z)) continue;
        for (int i = 0; i < z->started; i++) n += z->req[i].active;
    }
    return n;
}

/* A free receive-block slot for a ring reduce-scatter piece of n floats that req will carry, or
 * NULL (no slots: comm allocates one). The cap keeps at most ZERO_RS_IN_FLIGHT such pieces in
 * flight, so one is free whenever the scheduler starts one. */
static float *rs_slot(Par *p, const CommReq *req, size_t n) {
    ZeroSched *zs = &p->zs;
    if (!zs->rs_tmp[0] || n > zs->rs_tmp_floats) return NULL;
    /* req is about to start again: a slot it held for an earlier piece is free (else it would read
     * busy while req runs on another slot, and the cap's last piece would find none) */
    for (int a = 0; a < ZERO_RS_IN_FLIGHT; a++)
        if (zs->rs_tmp_req[a] == req) zs->rs_tmp_req[a] = NULL;
    for (int a = 0; a < ZERO_RS_IN_FLIGHT; a++)
        if (!zs->rs_tmp_req[a] || !zs->rs_tmp_req[a]->active) {
            zs->rs_tmp_req[a] = req;
            return zs->rs_tmp[a];
        }
    ST_CHECK_MSG(0, "more ring reduce-scatter pieces in flight than receive slots");
    return NULL;
}

static void zc_start_piece(Par *p, ZColl *z, int i) {
    z->seq[i] = p->zs.nstarted++;
    size_t off, n;
    zc_piece(z, i, &off, &n);
    Err e;
    Status st;
    if (z->staged) st = stage_piece_start(p, z, i, &e); /* a device: on a host slot */
    else if (z->kind == ZC_ALLREDUCE) st = comm_iallreduce_f32(p->c, z->buf + off, z->buf + off, n, &z->req[i], &e);
    else if (z->kind == ZC_REDUCE_SCATTER) st = comm_ireduce_scatter_piece_tmp_f32(p->c, z->buf + off, z->block, n, rs_slot(p, &z->req[i], n), &z->req[i], &e);
    else st = comm_iallgather_piece_f32(p->c, z->buf + off, z->block, n, &z->req[i], &e);
    if (st != ST_OK) par_hook_fail(p, st, &e);
}

/* Starts queued pieces, oldest collective first, while fewer counted pieces than the head's cap run
 * (ZERO_IN_FLIGHT all-reduces, ZERO_RS_IN_FLIGHT reduce-scatters; on a device DEV_STAGE_SLOTS).
 * Only the head of the queue starts pieces, so the order is the queue's on every rank. */
static void zc_pump(Par *p) {
    ZeroSched *zs = &p->zs;
    int active = zc_active(p);
    while (zs->count > 0) {
        ZColl *z = zs->fifo[zs->head];
        int cap = p->stage.on ? DEV_STAGE_SLOTS : z->kind == ZC_REDUCE_SCATTER ? ZERO_RS_IN_FLIGHT : ZERO_IN_FLIGHT;
        if (zc_counted(z) && active >= cap) break;
        int i = z->started++;
        if (z->started >= z->n) /* its last piece: out of the queue */
            z->queued = 0, zs->head = (zs->head + 1) % zs->nall, zs->count--;
        if (i == z->hold) continue; /* test fault: started later (gather_fault_release) */
        zc_start_piece(p, z, i);
        /* a piece that completed as it started (one rank: no MPI request) holds no place in the cap;
         * counted, it left the queue's rest unstarted with nothing in flight (zc_wait's check) */
        active += zc_counted(z) && (z->staged || z->req[i].active);
    }
}

/* Queues collective z: kind over buf (dp blocks `block` apart for a reduce-scatter or all-gather)
 * covering `span` floats, in pieces of `piece`. z must be complete (waited). hold: a piece the
 * queue leaves alone (test fault), -1 none. */
static void zc_begin(Par *p, ZColl *z, ZcKind kind, float *buf, size_t block, size_t span, size_t piece,
                     const char *what, int hold) {
    ST_CHECK_MSG(!z->queued, "ZeRO collective queued again before it completed");
    for (int i = 0; i < z->started; i++) ST_CHECK_MSG(!z->req[i].active, "ZeRO collective restarted while pending");
    z->kind = kind, z->buf = buf, z->block = block, z->span = span, z->piece = piece, z->what = what;
    z->n = npieces(span, piece), z->started = 0, z->hold = z->n > 0 ? hold : -1;
    ST_CHECK(z->n <= z->nmax);
    if (z->n == 0) return;
    ZeroSched *zs = &p->zs;
    zs->fifo[(zs->head + zs->count) % zs->nall] = z, zs->count++, z->queued = 1;
    zc_pump(p);
}

/* The counted piece in flight that started first (it frees a place in the cap soonest: pieces finish
 * about in the order they started), or NULL. */
static CommReq *zc_oldest(Par *p, long before) {
    CommReq *best = NULL;
    long bs = before;
    for (int k = 0; k < p->zs.nall; k++) {
        ZColl *o = p->zs.all[k];
        if (!zc_counted(o)) continue;
        for (int i = 0; i < o->started; i++)
            if (o->req[i].active && o->seq[i] < bs) best = &o->req[i], bs = o->seq[i];
    }
    return best;
}

/* Waits until every piece of z (but a held one) is complete (on a device: its result copied back),
 * starting queued pieces as others finish. Each wait is for the oldest piece in flight (z's own
 * first unfinished one, or an older piece of another collective), and the queue is pumped after
 * every completion, so the cap's pieces stay in flight and every rank starts its pieces at the
 * same points of the exchange. (Waiting z's pieces in turn before starting more let the ranks fall
 * out of step: one rank's next piece started while the other still waited, the link idled, ZeRO 1's
 * reduce-scatter ran 1.3-1.5x its line-rate time across 1 Gb/s; bench/results/netsim.md.) Waiting
 * on any started piece cannot deadlock: every rank starts the same pieces in the same order, and
 * one test progresses all of the process's pending collectives. */
static Status zc_wait(Par *p, ZColl *z, Err *err) {
    Status st;
    for (;;) {
        zc_pump(p);
        if ((st = par_hook_status(p, err)) != ST_OK) return st;
        CommReq *mine = NULL;
        long mine_seq = LONG_MAX;
        for (int i = 0; i < z->started && !mine; i++)
            if (i != z->hold && z->req[i].active) mine = &z->req[i], mine_seq = z->seq[i];
        if (!mine && !z->queued) break;
        CommReq *w = zc_oldest(p, mine_seq);
        if (!w) w = mine;
        /* z still queued with nothing in flight cannot happen (the pump starts its head); say so
         * rather than spin */
        ST_CHECK_MSG(w != NULL, "ZeRO collective queued with no piece in flight");
        if ((st = comm_wait(w, p->c->timeout_s, z->what, p->c->step, err)) != ST_OK) return st;
        if (p->stage.on && (st = stage_reap(p, 0, err)) != ST_OK) return st;
    }
    if (z->staged && (st = stage_reap(p, 0, err)) != ST_OK) return st; /* its last results back */
    return par_hook_status(p, err);
}

/* Some piece of z not complete yet. */
static int zc_pending(const ZColl *z) {
    if (z->queued) return 1;
    for (int i = 0; i < z->started; i++)
        if (z->req[i].active) return 1;
    return 0;
}

/* A hook's wait: an error is kept for par_grads_finish. */
static void zc_wait_hook(Par *p, ZColl *z) {
    Err e;
    Status st = zc_wait(p, z, &e);
    if (st != ST_OK) par_hook_fail(p, st, &e);
}

/* Tests every piece in flight (Open MPI and the ring progress only inside MPI calls), copies back a
 * device's finished pieces and starts queued ones in the places that freed up. Called between
 * segments in the forward and the backward. */
static void progress(Par *p) {
    if (p->progress_fn) p->progress_fn(p->progress_ctx);
    for (int k = 0; k < p->zs.nall; k++) { /* a collective's pieces finish about in order */
        ZColl *z = p->zs.all[k];
        for (int i = 0; i < z->started; i++)
            if (z->req[i].active && !comm_test(&z->req[i])) break;
    }
    if (p->stage.on) { /* a device: the results complete so far go back now */
        Err e;
        Status st = stage_reap(p, 0, &e);
        if (st != ST_OK) par_hook_fail(p, st, &e);
    }
    zc_pump(p);
}

/* ================================================================ gradients, stage 0/1 */

/* Segment s's gradients are complete on this rank: stage 0 queues its all-reduce buckets, stage 1
 * its in-place reduce-scatter pieces. */
static void start_seg_grads(Par *p, int s) {
    ZeroBuckets *zb = &p->zb;
    if (zb->started[s] || p->len[s] == 0) return; /* empty: a block another pipeline stage holds */
    zb->started[s] = 1;
    float *base = p->g->d.grads + p->off[s];
    if (p->zero == 0) zc_begin(p, &zb->grad[s], ZC_ALLREDUCE, base, 0, p->len[s], p->o.bucket_floats, "grad bucket", -1);
    else zc_begin(p, &zb->grad[s], ZC_REDUCE_SCATTER, base, p->blk[s], p->blk[s], rs_piece(p, s), "grad reduce-scatter", -1);
}

/* ================================================================ gradients, stage 2/3 */

/* Waits for slot a's reduce-scatter and adds the owned block into the gradient shard. */
static Status gslot_finish(Par *p, int a, Err *err) {
    ZeroGrads *zg = &p->zg;
    if (!zg->slot_pending[a]) return ST_OK;
    int s = zg->slot_seg[a];
    Status st = zc_wait(p, &zg->slot_rs[a], err);
    if (st != ST_OK) return st;
    if (p->stage.on) stage_bucket_rs_finish(p, zg->buf[a], s); /* a device: through its host twin */
    else par_add_into(zg->shard + p->soff[s], zg->buf[a] + (size_t)p->r * p->blk[s], p->blk[s], p->o.nt);
    zg->slot_pending[a] = 0;
    return ST_OK;
}

static Status g0_finish(Par *p, Err *err) {
    ZeroGrads *zg = &p->zg;
    if (!zg->b0_pending) return ST_OK;
    Status st = zc_wait(p, &zg->b0_rs, err);
    if (st != ST_OK) return st;
    if (p->stage.on) stage_bucket_rs_finish(p, zg->b0, 0);
    else par_add_into(zg->shard + p->soff[0], zg->b0 + (size_t)p->r * p->blk[0], p->blk[0], p->o.nt);
    zg->b0_pending = 0;
    return ST_OK;
}

/* Queues the reduce-scatter of the bucket buf holding segment s (a device: on its host twin). */
static void start_bucket_rs(Par *p, float *buf, int s, ZColl *z) {
    float *h = p->stage.on ? stage_bucket_rs_host(p, buf, s) : buf;
    zc_begin(p, z, ZC_REDUCE_SCATTER, h, p->blk[s], p->blk[s], rs_piece(p, s), "grad reduce-scatter", -1);
}

/* ================================================================ parameters */

/* Test fault (Faults.gather_late): the piece of block 1's gather for a forward that the queue
 * leaves alone (the first), or -1. */
static int gather_fault_hold(const Par *p, int s, int fwd) { return p->o.faults.gather_late && fwd && s == 1 ? 0 : -1; }

/* ...started (and completed) after that forward, from the next segment's hook. */
static void gather_fault_release(Par *p, ZColl *z) {
    if (z->hold < 0) return;
    int i = z->hold;
    z->hold = -1;
    zc_start_piece(p, z, i);
    Err e;
    Status st = comm_wait(&z->req[i], p->c->timeout_s, z->what, p->c->step, &e);
    if (st == ST_OK && z->staged) st = stage_reap(p, 0, &e);
    if (st != ST_OK) par_hook_fail(p, st, &e);
}

/* Stage 3: starts the all-gather of segment s into buf (own block copied in first, then in place;
 * a device: on the buffer's host twin, copied back by wait_gather); fwd: for a forward (the test
 * fault's). */
static void start_gather(Par *p, int s, float *buf, ZColl *z, int fwd) {
    ZeroParams *zp = &p->zp;
    if (buf == zp->b0) zp->lb0_ok = 0;
    for (int a = 0; a < 2; a++)
        if (buf == zp->buf[a]) zp->lslot_ok[a] = 0;
    size_t b = p->blk[s];
    float *h = buf;
    if (p->stage.on) h = stage_gather_host(p, s, buf);
    else memcpy(buf + (size_t)p->r * b, zp->shard + p->soff[s], b * sizeof(float));
    zc_begin(p, z, ZC_ALLGATHER, h, b, b, rs_piece(p, s), "param all-gather", gather_fault_hold(p, s, fwd));
}

/* The gather into buf (started by start_gather) complete and its result in buf: on a device, copied
 * back from the host twin (once per gather). */
static void wait_gather(Par *p, ZColl *z, float *buf) {
    zc_wait_hook(p, z);
    if (p->stage.on) stage_gather_finish(p, buf);
}

/* Mixed precision: rounds a gathered fp32 segment into its working copy, once per gather. */
static void round_gathered(Par *p, const float *buf, uint16_t *lp, size_t n, int *ok) {
    if (p->g->w.prec == GPT_FP32 || *ok) return;
    gpt_round_lp(p->g, lp, buf, n);
    *ok = 1;
}

/* The segment to gather ahead after `next` is needed, or -1: with overlap the two-slot prefetch
 * gathers the next segment behind this one's compute; --no-overlap gathers each segment when it is
 * needed, blocking (a flag does what it says: with comm's progress thread a prefetched gather's
 * bytes would move during compute, and `plan --no-overlap` prices every gather as exposed). Test
 * fault Faults.zero_prefetch: the prefetch also under --no-overlap (test_dp's control). */
static int prefetch_seg(const Par *p, int next) { return p->o.overlap || p->o.faults.zero_prefetch ? next : -1; }

/* Segment s (>= 1) gathered and its views set; then the gather of `next` (if >= 1) started in the
 * other slot. */
static void ensure_params(Par *p, int s, int next, int fwd) {
    ZeroParams *zp = &p->zp;
    int a = zp->slot_seg[0] == s ? 0 : zp->slot_seg[1] == s ? 1 : -1;
    if (a < 0) {
        a = zp->slot_seg[0] == next ? 1 : 0;
        zc_wait_hook(p, &zp->slot_ag[a]); /* the slot's old gather done (its contents are dropped) */
        zp->slot_seg[a] = s;
        start_gather(p, s, zp->buf[a], &zp->slot_ag[a], fwd);
    }
    wait_gather(p, &zp->slot_ag[a], zp->buf[a]);
    round_gathered(p, zp->buf[a], zp->lbuf[a], p->len[s], &zp->lslot_ok[a]);
    seg_views(p, &p->g->w.p, s, zp->buf[a]);
    if (next >= 1 && next <= p->L + 1 && zp->slot_seg[a ^ 1] != next) {
        zc_wait_hook(p, &zp->slot_ag[a ^ 1]);
        zp->slot_seg[a ^ 1] = next;
        start_gather(p, next, zp->buf[a ^ 1], &zp->slot_ag[a ^ 1], fwd);
        zp->ahead++;
    }
}

/* Stage 1-2: segment s's parameters gathered (the all-gather zero_params_sync started) and, with
 * mixed precision, its working copy rounded from them. */
static Status params_ready(Par *p, int s, Err *err) {
    ZeroBuckets *zb = &p->zb;
    Status st = zc_wait(p, &zb->param[s], err);
    if (st != ST_OK) return st;
    if (zb->lp_stale[s]) {
        if (p->g->w.params_lp) gpt_round_lp(p->g, p->g->w.params_lp + p->off[s], p->g->w.params + p->off[s], p->len[s]);
        zb->lp_stale[s] = 0;
    }
    return ST_OK;
}

/* ================================================================ hooks */

static void h_before_forward(void *ctx, int s) {
    Par *p = ctx;
    ZeroParams *zp = &p->zp;
    p->st.in_bwd = 0;
    progress(p);
    if (p->zero == 1 || p->zero == 2) {
        Err e;
        Status st = ST_OK;
        /* The previous segment's held piece (test fault) completes after that segment's forward. */
        if (s >= 2) gather_fault_release(p, &p->zb.param[s - 1]);
        /* The head reads wte (segment 0) again: on a pipeline's last stage no embedding forward ran. */
        if (s == p->L + 1) st = params_ready(p, 0, &e);
        if (st == ST_OK) st = params_ready(p, s, &e);
        if (st != ST_OK) par_hook_fail(p, st, &e);
    }
    if (p->zero >= 3) {
        if (s >= 2) gather_fault_release(p, &zp->slot_ag[0]), gather_fault_release(p, &zp->slot_ag[1]);
        if (s == 0) {
            /* wte is also the LM head: the embedding segment stays gathered until the update. */
            if (!zp->b0_valid) {
                start_gather(p, 0, zp->b0, &zp->b0_ag, 1);
                zp->b0_valid = 1;
            }
            wait_gather(p, &zp->b0_ag, zp->b0);
            round_gathered(p, zp->b0, zp->lb0, p->len[0], &zp->lb0_ok);
            seg_views(p, &p->g->w.p, 0, zp->b0);
            if (prefetch_seg(p, 1) == 1 && zp->slot_seg[0] != 1 && zp->slot_seg[1] != 1) {
                int a = zc_pending(&zp->slot_ag[0]) ? 1 : 0;
                zc_wait_hook(p, &zp->slot_ag[a]);
                zp->slot_seg[a] = 1;
                start_gather(p, 1, zp->buf[a], &zp->slot_ag[a], 1);
                zp->ahead++;
            }
        } else {
            ensure_params(p, s, prefetch_seg(p, s + 1), 1);
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
    if (p->zero >= 3 && s >= 1) ensure_params(p, s, prefetch_seg(p, s - 1), 0);
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
        /* fixed chunks: the same figure at any thread count (an OpenMP reduction's partial sums
         * follow the threads) */
        acc += optim_sumsq(x, (size_t)n, p->o.nt);
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
            start_bucket_rs(p, zg->b0, 0, &zg->b0_rs);
            zg->b0_pending = 1;
            if (!p->o.overlap) {
                Err e;
                Status st = g0_finish(p, &e);
                if (st != ST_OK) par_hook_fail(p, st, &e);
            }
        } else {
            int a = zg->seg_slot[s];
            start_bucket_rs(p, zg->buf[a], s, &zg->slot_rs[a]);
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
    if (p->o.overlap) progress(p);
}

void zero_set_hooks(Par *p) {
    p->g->hooks.before_forward = h_before_forward;
    p->g->hooks.before_backward = h_before_backward;
    p->g->hooks.grads_ready = h_grads_ready;
}

/* ================================================================ init / free */

/* A collective of up to nmax pieces, registered with the scheduler. */
static int zc_init(Par *p, ZColl *z, int nmax, int staged) {
    z->nmax = nmax, z->hold = -1, z->staged = staged;
    p->zs.all[p->zs.nall++] = z; /* first: zero_free frees what was allocated */
    if (nmax > 0) {
        z->req = calloc((size_t)nmax, sizeof(CommReq)), z->seq = calloc((size_t)nmax, sizeof(long));
        if (!z->req || !z->seq) return 0;
    }
    return 1;
}

int zero_init(Par *p) {
    ZeroBuckets *zb = &p->zb;
    ZeroGrads *zg = &p->zg;
    ZeroParams *zp = &p->zp;
    Gpt *g = p->g;
    int ns = p->nseg, ok = 1;
    /* A device: the dp collectives go through host memory (dev_stage.c). One process at ZeRO 0 (the
     * device's fast path) runs none; at ZeRO >= 1 its in-place collectives over one rank still go
     * through the host, as no MPI may see device memory. */
    p->stage.on = p->dev != NULL && (p->dp > 1 || p->zero >= 1);
    zb->grad = calloc((size_t)ns, sizeof(ZColl)), zb->param = calloc((size_t)ns, sizeof(ZColl));
    zg->seg_slot = calloc((size_t)ns, sizeof(int));
    zb->started = calloc((size_t)ns, sizeof(int)), zb->lp_stale = calloc((size_t)ns, sizeof(int));
    int ncoll = 2 * ns + 6; /* grad and param per segment; stage 2/3 slots and embedding, both kinds */
    p->zs.all = calloc((size_t)ncoll, sizeof(ZColl *)), p->zs.fifo = calloc((size_t)ncoll, sizeof(ZColl *));
    if (!zb->started || !zb->lp_stale || !zb->grad || !zb->param || !zg->seg_slot || !p->zs.all || !p->zs.fifo) return 0;
    /* Stage 0: all-reduce buckets of <= bucket_floats; otherwise pieces of rs_piece per rank. Staged
     * on a device: stages 0-1's gradients and stages 1-2's parameters (on the device's buffers). */
    for (int s = 0; s < ns; s++) {
        int ng = p->zero == 0 ? npieces(p->len[s], p->o.bucket_floats) : npieces(p->blk[s], rs_piece(p, s));
        int np_ = p->zero == 1 || p->zero == 2 ? npieces(p->blk[s], rs_piece(p, s)) : 0;
        if (!zc_init(p, &zb->grad[s], p->zero <= 1 ? ng : 0, p->stage.on)) return 0;
        if (!zc_init(p, &zb->param[s], np_, p->stage.on)) return 0;
        /* what a staged piece's slot must hold (dev_stage.c's slot_need) */
        zb->grad[s].kind = p->zero == 0 ? ZC_ALLREDUCE : ZC_REDUCE_SCATTER;
        zb->grad[s].piece = p->zero == 0 ? (p->len[s] < p->o.bucket_floats ? p->len[s] : p->o.bucket_floats) : rs_piece(p, s);
        zb->param[s].kind = ZC_ALLGATHER, zb->param[s].piece = rs_piece(p, s);
    }
    /* Stage 2-3's slots take any segment >= 1 in turn: as many pieces as the most any has. */
    int most = 0;
    for (int s = 1; s < ns; s++)
        if (npieces(p->blk[s], rs_piece(p, s)) > most) most = npieces(p->blk[s], rs_piece(p, s));
    int n0 = npieces(p->blk[0], rs_piece(p, 0));
    if (p->zero >= 2) {
        for (int a = 0; a < 2; a++)
            if (!zc_init(p, &zg->slot_rs[a], most, 0)) return 0;
        if (!zc_init(p, &zg->b0_rs, n0, 0)) return 0;
    }
    if (p->zero >= 3) {
        for (int a = 0; a < 2; a++)
            if (!zc_init(p, &zp->slot_ag[a], most, 0)) return 0;
        if (!zc_init(p, &zp->b0_ag, n0, 0)) return 0;
    }
    /* The ring pieces' receive blocks (layout_dp_rs_slot_floats: comm's ring, dp 2 ..
     * COMM_RING_MAX_RANKS; not on a device, whose pieces run on its host slots). */
    if (!p->stage.on) {
        size_t q = layout_dp_rs_slot_floats(p->pl, p->dp, p->zero, p->o.bucket_floats);
        p->zs.rs_tmp_floats = q;
        for (int a = 0; a < ZERO_RS_IN_FLIGHT && q; a++) p->zs.rs_tmp[a] = par_alloc_f(p, MEM_COMM, q, &ok);
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
    for (int k = 0; k < p->zs.nall; k++) free(p->zs.all[k]->req), free(p->zs.all[k]->seq);
    free(p->zs.all), free(p->zs.fifo);
    for (int a = 0; a < ZERO_RS_IN_FLIGHT; a++) mem_free(p->mem, MEM_COMM, p->zs.rs_tmp[a], p->zs.rs_tmp_floats * sizeof(float));
    free(p->zb.started), free(p->zb.lp_stale), free(p->zb.grad), free(p->zb.param), free(zg->seg_slot);
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
    if (p->zero <= 1) {
        for (int s = p->nseg - 1; s >= 0; s--) /* in the order they were queued */
            if ((st = zc_wait(p, &p->zb.grad[s], err)) != ST_OK) return st;
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
    if (p->zero == 1 || p->zero == 2) {
        /* In forward order, so the gathers of later segments run behind earlier segments' forward
         * (each waited in its before_forward). --no-overlap waits here, as before issue 28; so does
         * a device (its pieces hold host slots, and a step books its own gathers' bytes). */
        float *P = p->g->w.params;
        for (int s = 0; s < p->nseg; s++) {
            if (!p->blk[s]) continue;
            zc_begin(p, &zb->param[s], ZC_ALLGATHER, P + p->off[s], p->blk[s], p->blk[s], rs_piece(p, s), "param all-gather",
                     gather_fault_hold(p, s, 1));
            zb->lp_stale[s] = 1;
        }
        if ((st = par_hook_status(p, err)) != ST_OK) return st;
        if (!p->o.overlap || p->stage.on) st = zero_params_wait(p, err);
    } else if (p->zero == 3) {
        /* The shard changed: every gathered copy is stale. */
        for (int a = 0; a < 2; a++) {
            if (st == ST_OK) st = zc_wait(p, &zp->slot_ag[a], err);
            zp->slot_seg[a] = -1;
        }
        if (st == ST_OK) st = zc_wait(p, &zp->b0_ag, err);
        zp->b0_valid = 0;
        for (int k = 0; k < 3; k++) p->stage.gather_seg[k] = -1; /* a device: nothing left to copy back */
    }
    return st;
}

Status zero_params_wait(Par *p, Err *err) {
    Status st = ST_OK;
    if (p->zero != 1 && p->zero != 2) return ST_OK;
    for (int s = 0; s < p->nseg && st == ST_OK; s++) {
        gather_fault_release(p, &p->zb.param[s]);
        st = params_ready(p, s, err);
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
    Err e;
    Status st = zero_params_wait(p, &e); /* no all-gather may still write the parameters */
    if (st != ST_OK) par_hook_fail(p, st, &e);
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
    Status st = zero_params_wait(p, err); /* the last update's gathers complete */
    if (params && st == ST_OK) {
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
