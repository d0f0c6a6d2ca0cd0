/* dev_stage.c — data parallelism on a device backend (one that is not host-addressable, e.g. CUDA;
 * docs/cuda.md §6, "Several processes"): the dp collectives of zero.c run on host copies of the
 * device's buffers, through the backend's to_host / from_host only, so `comm` (host MPI) never sees
 * a device pointer and any MPI works.
 *
 * The staging buffers are DEV_STAGE_SLOTS host slots (MEM_COMM, counted in no plan line: they are
 * the transport's, like the MPI library's temporaries). A collective of zero.c's request i takes a
 * free slot: the device range is copied into it (to_host), the collective runs in place on the slot,
 * and when it is complete the result is copied back (from_host: all of it for ZeRO 0's all-reduce,
 * the owned block for ZeRO 1's reduce-scatter, the segment for the parameter all-gather). So the
 * overlap of the CPU path is kept: ZeRO 0's buckets are still started from the grads_ready hooks as
 * each segment's backward finishes and progressed between segments; only the copies are added.
 *
 * Slots: stage 0 holds bucket_floats (ZERO_BUCKETS_IN_FLIGHT buckets run at once, one slot each);
 * stage 1 holds the largest segment (its reduce-scatter is one collective per segment, not split:
 * a rank's block must stay contiguous), and a segment waiting for a slot waits for the older one.
 *
 * ZeRO 2 and 3 keep their device buffers (gradient buckets, parameter gather buffers) and give each
 * a host twin of its size: the collective runs on the twin, and its result goes back into the
 * buffer when zero.c waits for it.
 *
 * Not here: device pointers handed to a CUDA-aware MPI (the MPIs of the project's machines,
 * Debian's and Ubuntu's Open MPI, are not built with CUDA), NCCL, pinned host buffers (the backend
 * table has no pinned allocation). */
#include <string.h>

#include "parallel/parallel_internal.h"

int stage_init(Par *p) {
    DevStage *ds = &p->stage;
    /* One process at ZeRO 0 (the device's fast path) runs no collective at all; at ZeRO >= 1 its
     * in-place collectives over one rank still go through the host, as no MPI may see device memory. */
    ds->on = p->dev != NULL && (p->dp > 1 || p->zero >= 1);
    for (int a = 0; a < DEV_STAGE_SLOTS; a++) ds->req[a] = -1;
    for (int k = 0; k < 3; k++) ds->gather_seg[k] = -1;
    if (!ds->on) return 1;
    size_t n = p->E > p->X ? p->E : p->X; /* the largest segment */
    if (p->zero == 0 && n > p->o.bucket_floats) n = p->o.bucket_floats;
    ds->slot_floats = n;
    int ok = 1;
    for (int a = 0; a < DEV_STAGE_SLOTS; a++) ds->slot[a] = par_alloc_f(p, MEM_COMM, n, &ok);
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

/* Slot a's collective is complete (or is waited for when `wait`): its result goes back to the device
 * and the slot is free. ST_PAR_TEST_STAGE_FAULT: request 0's copy back is skipped (the device keeps
 * this rank's own gradients for that bucket). */
static Status finish_slot(Par *p, int a, int wait, Err *err) {
    DevStage *ds = &p->stage;
    int i = ds->req[a];
    if (i < 0) return ST_OK;
    CommReq *rq = &p->zb.req[i];
    if (rq->active && !wait) return ST_OK;
    Status st = comm_wait(rq, p->c->timeout_s, ds->what[a], p->c->step, err);
    if (st != ST_OK) return st;
    if (!(p->o.faults.stage_skip && i == 0 && ds->kind[a] != STAGE_PARAMS))
        p->dev->from_host(ds->back_dev[a], ds->slot[a] + ds->back_off[a], ds->back_n[a] * sizeof(float));
    ds->req[a] = -1;
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
        if (ds->req[a] < 0) return a;
    int a = ds->oldest;
    if ((*st = finish_slot(p, a, 1, err)) != ST_OK) return -1;
    return a;
}

Status stage_allreduce(Par *p, int i, Err *err) {
    DevStage *ds = &p->stage;
    Status st;
    int a = take_slot(p, err, &st);
    if (a < 0) return st;
    size_t n = p->zb.req_n[i];
    float *dev = p->g->d.grads + p->zb.req_off[i];
    p->dev->to_host(ds->slot[a], dev, n * sizeof(float));
    if ((st = comm_iallreduce_f32(p->c, ds->slot[a], ds->slot[a], n, &p->zb.req[i], err)) != ST_OK) return st;
    ds->req[a] = i, ds->oldest = a ^ 1, ds->what[a] = "grad bucket", ds->kind[a] = STAGE_ALLREDUCE;
    ds->back_dev[a] = dev, ds->back_off[a] = 0, ds->back_n[a] = n;
    return ST_OK;
}

Status stage_reduce_scatter(Par *p, int s, Err *err) {
    DevStage *ds = &p->stage;
    Status st;
    int a = take_slot(p, err, &st), i = p->zb.seg_req0[s];
    if (a < 0) return st;
    size_t own = (size_t)p->r * p->blk[s];
    float *dev = p->g->d.grads + p->off[s];
    p->dev->to_host(ds->slot[a], dev, p->len[s] * sizeof(float));
    if ((st = comm_ireduce_scatter_f32(p->c, ds->slot[a], ds->slot[a] + own, p->blk[s], &p->zb.req[i], err)) != ST_OK)
        return st;
    ds->req[a] = i, ds->oldest = a ^ 1, ds->what[a] = "grad reduce-scatter", ds->kind[a] = STAGE_REDUCE_SCATTER;
    ds->back_dev[a] = dev + own, ds->back_off[a] = own, ds->back_n[a] = p->blk[s];
    return ST_OK;
}

Status stage_allgather_params(Par *p, int s, Err *err) {
    DevStage *ds = &p->stage;
    Status st;
    int a = take_slot(p, err, &st), i = p->zb.seg_req0[s];
    if (a < 0) return st;
    size_t own = (size_t)p->r * p->blk[s];
    float *dev = p->g->w.params + p->off[s];
    p->dev->to_host(ds->slot[a] + own, dev + own, p->blk[s] * sizeof(float));
    if ((st = comm_iallgather_f32(p->c, ds->slot[a] + own, ds->slot[a], p->blk[s], &p->zb.req[i], err)) != ST_OK)
        return st;
    ds->req[a] = i, ds->oldest = a ^ 1, ds->what[a] = "param all-gather", ds->kind[a] = STAGE_PARAMS;
    ds->back_dev[a] = dev, ds->back_off[a] = 0, ds->back_n[a] = p->len[s];
    return ST_OK;
}

/* ZeRO 2: the host twin of a ZeroGrads bucket (the embedding bucket or slot a). */
static float *twin(Par *p, const float *bucket) {
    return bucket == p->zg.b0 ? p->stage.hb0 : bucket == p->zg.buf[0] ? p->stage.hbuf[0] : p->stage.hbuf[1];
}

Status stage_bucket_rs_start(Par *p, float *bucket, int s, CommReq *req, Err *err) {
    float *h = twin(p, bucket);
    p->dev->to_host(h, bucket, p->len[s] * sizeof(float));
    return comm_ireduce_scatter_f32(p->c, h, h + (size_t)p->r * p->blk[s], p->blk[s], req, err);
}

void stage_bucket_rs_finish(Par *p, float *bucket, int s) {
    size_t own = (size_t)p->r * p->blk[s];
    if (!(p->o.faults.stage_skip && s == 0)) /* the test fault: the embedding's reduced block stays on the host */
        p->dev->from_host(bucket + own, twin(p, bucket) + own, p->blk[s] * sizeof(float));
    p->dev->add_or_set(p->zg.shard + p->soff[s], bucket + own, p->blk[s], 1);
}

/* ZeRO 3: a gather buffer's index (0 the embedding buffer, 1 + a slot a). */
static int gather_index(const Par *p, const float *buf) { return buf == p->zp.b0 ? 0 : buf == p->zp.buf[0] ? 1 : 2; }

Status stage_gather_start(Par *p, int s, float *buf, CommReq *req, Err *err) {
    DevStage *ds = &p->stage;
    int k = gather_index(p, buf);
    float *h = k == 0 ? ds->hp0 : ds->hpbuf[k - 1];
    size_t own = (size_t)p->r * p->blk[s];
    p->dev->to_host(h + own, p->zp.shard + p->soff[s], p->blk[s] * sizeof(float));
    ds->gather_seg[k] = -1; /* nothing to copy back until the gather has started */
    Status st = comm_iallgather_f32(p->c, h + own, h, p->blk[s], req, err);
    if (st == ST_OK) ds->gather_seg[k] = s;
    return st;
}

void stage_gather_finish(Par *p, float *buf) {
    DevStage *ds = &p->stage;
    int k = gather_index(p, buf), s = ds->gather_seg[k];
    if (s < 0) return; /* copied back already (the buffer is reused without a new gather) */
    p->dev->from_host(buf, k == 0 ? ds->hp0 : ds->hpbuf[k - 1], p->len[s] * sizeof(float));
    ds->gather_seg[k] = -1;
}
