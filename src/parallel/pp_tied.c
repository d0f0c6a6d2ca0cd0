/* pp_tied.c — the pipeline's tied embedding (parallel.h, "Pipeline"; docs/parallel.md "Pipeline
 * parallelism"): the first stage holds wte as the embedding, the last as the LM head, each with its
 * own gradient part. par_grads_finish sums the two parts between the two ends (point-to-point over
 * the pp group, tag PAR_TIED_TAG, in chunks through a MEM_COMM buffer) before the dp reduction,
 * so both copies stay identical. The pipeline runtime itself (the schedule's sends and receives)
 * is pp.c. */
#include <string.h>

#include "parallel/parallel_internal.h"

int tied_init(Par *p) {
    size_t tied = layout_pp_tied_floats(p->pl, p->c->pp);
    if (!tied) return 1;
    ParTied *t = &p->tied;
    t->on = 1, t->peer = p->pl->has_embed ? p->c->pp - 1 : 0;
    t->floats = tied < p->o.bucket_floats ? tied : p->o.bucket_floats;
    t->buf = mem_alloc(p->mem, MEM_COMM, t->floats * sizeof(float));
    return t->buf != NULL;
}

void tied_free(Par *p) { mem_free(p->mem, MEM_COMM, p->tied.buf, p->tied.floats * sizeof(float)); }

/* Each end sends its gradient part to the other and adds the other's (a + b == b + a in floating
 * point: both copies get bit-identical sums), chunk by chunk. */
Status tied_exchange(Par *p, Err *err) {
    if (p->o.faults.pp_skip_tied) return ST_OK;
    const ParTied *tp = &p->tied;
    const TensorInfo *t = &p->pl->tensors[layout_find_id(p->pl, 0)];
    float *g = p->g->d.grads + t->offset;
    Status st = ST_OK;
    for (size_t done = 0; done < t->numel && st == ST_OK; done += tp->floats) {
        size_t n = t->numel - done < tp->floats ? t->numel - done : tp->floats;
        CommReq rq[2];
        memset(rq, 0, sizeof rq);
        st = comm_pp_irecv_f32(p->c, tp->buf, n, tp->peer, PAR_TIED_TAG, &rq[0], err);
        if (st == ST_OK) st = comm_pp_isend_f32(p->c, g + done, n, tp->peer, PAR_TIED_TAG, &rq[1], err);
        if (st == ST_OK) st = comm_wait_all(rq, 2, p->c->timeout_s, "tied wte gradient", p->c->step, err);
        if (st == ST_OK) par_add_into(g + done, tp->buf, n, p->o.nt);
    }
    return st;
}
