/* dev_stage.c — data parallelism on a device backend (one that is not host-addressable, e.g. CUDA;
 * docs/cuda.md §6, "Several processes"): the dp collectives of zero.c run on host copies of the
 * device's buffers, through the backend's to_host / from_host only, so `comm` (host MPI) never sees
 * a device pointer and any MPI works.
 *
 * The staging buffers are DEV_STAGE_SLOTS host slots (MEM_COMM, counted in no plan line: they are
 * the transport's, like the MPI library's temporaries). Each piece of a staged collective (zero.c's
 * ZColl: ZeRO 0's all-reduce buckets, ZeRO 1's reduce-scatter pieces, ZeRO 1-2's parameter
 * all-gather pieces) takes a free slot when the scheduler starts it: the piece's device ranges are
 * copied into the slot packed (rank k's part of a reduce-scatter or all-gather piece at k·n), the
 * whole collective runs in place on the slot (so a reduce-scatter piece is comm's ring over the
 * packed blocks, the same summation order as the unsplit segment), and when it is complete the
 * result is copied back (all of it for an all-reduce, the owned part for a reduce-scatter, every
 * rank's part for an all-gather). The scheduler caps staged pieces in flight at DEV_STAGE_SLOTS, so
 * the overlap of the CPU path is kept: ZeRO 0-1's pieces still start from the grads_ready hooks as
 * each segment's backward finishes and are progressed between segments; only the copies are added.
 * A slot holds the largest piece: bucket_floats, or a whole segment where pieces are not split.
 *
 * ZeRO 2 and 3 keep their device buffers (gradient buckets, parameter gather buffers) and give each
 * a host twin of its size: the collective's pieces run on the twin, and its result goes back into
 * the buffer when zero.c has waited for all of them.
 *
 * Not here: device pointers handed to a CUDA-aware MPI (the MPIs of the project's machines,
 * Debian's and Ubuntu's Open MPI, are not built with CUDA), NCCL, pinned host buffers (the backend
 * table has no pinned allocation). */
#include <string.h>

#include "parallel/parallel_internal.h"

/* The floats a slot must hold: the largest piece of any staged collective (zero.c's grad[s] at
 * ZeRO 0-1 and param[s] at ZeRO 1-2), packed. */
static size_t slot_need(const Par *p) {
    size_t n = 0;
    for (int s = 0; s < p->nseg; s++) {
        const ZColl *z[2] = {&p->zb.grad[s], &p->zb.param[s]};
        for (int k = 0; k < 2; k++) {
            if (!z[k]->staged || z[k]->nmax == 0) continue;
            size_t m = z[k]->kind == ZC_ALLREDUCE ? z[k]->piece : z[k]->piece * (size_t)p->dp;
            if (m > n) n = m;
        }
    }
    return n;
}

int stage_init(Par *p) {
    DevStage *ds = &p->stage;
    for (int k = 0; k < 3; k++) ds->gather_seg[k] = -1;
    if (!ds->on) return 1; /* set by zero_init, which marks the staged collectives */
    ds->slot_floats = slot_need(p);
    int ok = 1;
    for (int a = 0; a < DEV_STAGE_SLOTS; a++) ds->slot[a] = par_alloc_f(p, MEM_COMM, ds->slot_floats, &ok);
    if (p->zero >= 2) { /* the host twins of ZeroGrads' device buckets */
        ds->hb0 = par_alloc_f(p, MEM_COMM, p->E, &ok);
        for (int a = 0; a < 2; a++) ds->hbuf[a] = par_alloc_f(p, MEM_COMM, p->X, &ok);
    }
    if (p->zero >= 3) { /* and of ZeroParams' gather buffers */
        ds->hp0 = par_alloc_f(p, MEM_COMM, p->E, &ok);
        for (int a = 0; a < 2; a++) ds->hpbuf[a] = par_alloc_f(p, MEM_COMM, p->X, &ok);
    }
    return ok;
}

void stage_free(Par *p) {
    DevStage *ds = &p->stage;
    for (int a = 0; a < DEV_STAGE_SLOTS; a++) mem_free(p->mem, MEM_COMM, ds->slot[a], ds->slot_floats * sizeof(float));
    mem_free(p->mem, MEM_COMM, ds->hb0, p->E * sizeof(float));
    mem_free(p->mem, MEM_COMM, ds->hp0, p->E * sizeof(float));
    for (int a = 0; a < 2; a++) {
        mem_free(p->mem, MEM_COMM, ds->hbuf[a], p->X * sizeof(float));
        mem_free(p->mem, MEM_COMM, ds->hpbuf[a], p->X * sizeof(float));
    }
}

/* Slot a's piece is complete (or is waited for when `wait`): its result goes back to the device and
 * the slot is free. ST_PAR_TEST_STAGE_FAULT: the copy back of the first piece of segment 0's
 * gradient collective is skipped (the device keeps this rank's own gradients there). */
static Status finish_slot(Par *p, int a, int wait, Err *err) {
    DevStage *ds = &p->stage;
    const ZColl *z = ds->z[a];
    if (!z) return ST_OK;
    int i = ds->piece[a];
    CommReq *rq = &z->req[i];
    if (rq->active && !wait) return ST_OK;
    Status st = comm_wait(rq, p->c->timeout_s, z->what, p->c->step, err);
    if (st != ST_OK) return st;
    size_t off, n;
    zc_piece(z, i, &off, &n);
    if (z->kind == ZC_ALLREDUCE) {
        if (!(p->o.faults.stage_skip && z == &p->zb.grad[0] && i == 0))
            p->dev->from_host(z->buf + off, ds->slot[a], n * sizeof(float));
    } else if (z->kind == ZC_REDUCE_SCATTER) {
        if (!(p->o.faults.stage_skip && z == &p->zb.grad[0] && i == 0))
            p->dev->from_host(z->buf + (size_t)p->r * z->block + off, ds->slot[a] + (size_t)p->r * n, n * sizeof(float));
    } else {
        for (int k = 0; k < p->dp; k++)
            p->dev->from_host(z->buf + (size_t)k * z->block + off, ds->slot[a] + (size_t)k * n, n * sizeof(float));
    }
    ds->z[a] = NULL;
    return ST_OK;
}

Status stage_reap(Par *p, int wait, Err *err) {
    Status st = ST_OK;
    for (int a = 0; a < DEV_STAGE_SLOTS && st == ST_OK; a++) st = finish_slot(p, a, wait, err);
    return st;
}

/* A free slot: the first one free after reaping the complete ones, else the oldest one waited for. */
static int take_slot(Par *p, Err *err, Status *st) {
    DevStage *ds = &p->stage;
    if ((*st = stage_reap(p, 0, err)) != ST_OK) return -1;
    for (int a = 0; a < DEV_STAGE_SLOTS; a++)
        if (!ds->z[a]) return a;
    int a = ds->oldest;
    if ((*st = finish_slot(p, a, 1, err)) != ST_OK) return -1;
    return a;
}

Status stage_piece_start(Par *p, const ZColl *z, int i, Err *err) {
    DevStage *ds = &p->stage;
    Status st;
    int a = take_slot(p, err, &st);
    if (a < 0) return st;
    size_t off, n;
    zc_piece(z, i, &off, &n);
    float *h = ds->slot[a];
    size_t own = (size_t)p->r * n;
    ST_CHECK(n * (z->kind == ZC_ALLREDUCE ? 1 : (size_t)p->dp) <= ds->slot_floats);
    if (z->kind == ZC_ALLREDUCE) {
        p->dev->to_host(h, z->buf + off, n * sizeof(float));
        st = comm_iallreduce_f32(p->c, h, h, n, &z->req[i], err);
    } else if (z->kind == ZC_REDUCE_SCATTER) {
        for (int k = 0; k < p->dp; k++) p->dev->to_host(h + (size_t)k * n, z->buf + (size_t)k * z->block + off, n * sizeof(float));
        st = comm_ireduce_scatter_f32(p->c, h, h + own, n, &z->req[i], err);
    } else {
        p->dev->to_host(h + own, z->buf + (size_t)p->r * z->block + off, n * sizeof(float));
        st = comm_iallgather_f32(p->c, h + own, h, n, &z->req[i], err);
    }
    if (st != ST_OK) return st;
    ds->z[a] = z, ds->piece[a] = i, ds->oldest = a ^ 1;
    return ST_OK;
}

/* ZeRO 2: the host twin of a ZeroGrads bucket (the embedding bucket or slot a). */
static float *twin(Par *p, const float *bucket) {
    return bucket == p->zg.b0 ? p->stage.hb0 : bucket == p->zg.buf[0] ? p->stage.hbuf[0] : p->stage.hbuf[1];
}

float *stage_bucket_rs_host(Par *p, float *bucket, int s) {
    float *h = twin(p, bucket);
    p->dev->to_host(h, bucket, p->len[s] * sizeof(float));
    return h;
}

void stage_bucket_rs_finish(Par *p, float *bucket, int s) {
    size_t own = (size_t)p->r * p->blk[s];
    if (!(p->o.faults.stage_skip && s == 0)) /* the test fault: the embedding's reduced block stays on the host */
        p->dev->from_host(bucket + own, twin(p, bucket) + own, p->blk[s] * sizeof(float));
    p->dev->add_or_set(p->zg.shard + p->soff[s], bucket + own, p->blk[s], 1);
}

/* ZeRO 3: a gather buffer's index (0 the embedding buffer, 1 + a slot a). */
static int gather_index(const Par *p, const float *buf) { return buf == p->zp.b0 ? 0 : buf == p->zp.buf[0] ? 1 : 2; }

float *stage_gather_host(Par *p, int s, float *buf) {
    DevStage *ds = &p->stage;
    int k = gather_index(p, buf);
    float *h = k == 0 ? ds->hp0 : ds->hpbuf[k - 1];
    size_t own = (size_t)p->r * p->blk[s];
    p->dev->to_host(h + own, p->zp.shard + p->soff[s], p->blk[s] * sizeof(float));
    ds->gather_seg[k] = s;
    return h;
}

void stage_gather_finish(Par *p, float *buf) {
    DevStage *ds = &p->stage;
    int k = gather_index(p, buf), s = ds->gather_seg[k];
    if (s < 0) return; /* copied back already (the buffer is reused without a new gather) */
    p->dev->from_host(buf, k == 0 ? ds->hp0 : ds->hpbuf[k - 1], p->len[s] * sizeof(float));
    ds->gather_seg[k] = -1;
}
