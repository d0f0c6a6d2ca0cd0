/* parallel.c — the composition of src/parallel's mechanisms into Par (parallel.h,
 * docs/parallel.md): the segment bookkeeping and memory plan, par_init / par_free calling each
 * part's init and free, the moments and the optimizer's pieces of the owned range, the norm's
 * partition, and the public step functions, which call into the parts: zero.c (ZeRO 0–3 and the
 * dp hooks), tp.c (tp hooks, the norm's replicated pieces), pp_tied.c (the pipeline's tied wte),
 * matopt.c (Muon, Shampoo, Sophia). Their shared state: parallel_internal.h.
 *
 * Contents: options · layout and plan · shared helpers · init / free · the step. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/parallel_internal.h"

/* ================================================================ options */

ParOptions par_default_options(void) {
    ParOptions o;
    memset(&o, 0, sizeof o);
    o.zero = 0, o.bucket_floats = PAR_DEFAULT_BUCKET_FLOATS, o.overlap = 1, o.n_moments = 2, o.nt = 1;
    return o;
}

void par_gpt_options(int dp, int zero, GptOptions *o) {
    o->shard_multiple = dp;
    o->external_grads = zero >= 2;
    o->external_params = zero >= 3;
}

/* ================================================================ layout and plan */

static void seg_sizes(const ParamLayout *pl, size_t *E, size_t *X) {
    *E = pl->seg_off[1] - pl->seg_off[0];
    *X = 0;
    for (int s = 1; s < pl->nseg; s++) {
        size_t n = pl->seg_off[s + 1] - pl->seg_off[s];
        if (n > *X) *X = n;
    }
}

void par_planned_bytes(const ParamLayout *pl, int dp, int rank, const ParOptions *o, int lowp, size_t bytes[MEM_NCAT]) {
    layout_zero_bytes(pl, dp, o->zero, o->n_moments, layout_state_bytes(lowp ? 1 : 0), bytes);
    if (o->muon) bytes[MEM_MOMENTS] += layout_muon_bytes(pl, lowp == GPT_BF16);
    if (o->shampoo) bytes[MEM_MOMENTS] += layout_shampoo_bytes(pl, o->shampoo_block, o->precond_every, dp, rank);
}

/* ================================================================ shared helpers */

void par_hook_fail(Par *p, Status st, const Err *e) {
    if (p->hook_st == ST_OK) p->hook_st = st, p->hook_err = *e;
}

void par_add_into(float *dst, const float *src, size_t n, int nt) {
#pragma omp parallel for schedule(static) num_threads(nt)
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

float *par_alloc_f(Par *p, MemCategory c, size_t n, int *ok) {
    if (n == 0) return NULL;
    float *q = mem_alloc(p->mem, c, n * sizeof(float));
    if (!q) *ok = 0;
    return q;
}

/* ================================================================ init / free */

Status par_check_grid(int zero, int pp, Err *err) {
    if (pp > 1 && zero >= 2)
        return err_set(err, ST_ERR_INPUT, "--zero %d with --pp %d: expected ZeRO 0 or 1 (ZeRO-2 reduce-scatters each "
                       "micro-batch's gradients and ZeRO-3 gathers the parameters for every micro-batch's forward and "
                       "backward: with m pipeline micro-batches per step that is m times the traffic; DeepSpeed refuses "
                       "the same combination)", zero, pp);
    return ST_OK;
}

Status par_init(Par **out, Comm *c, Gpt *g, const ParOptions *o, MemStats *mem, Err *err) {
    *out = NULL;
    const ParamLayout *pl = &g->w.layout;
    if (o->zero < 0 || o->zero > 3) return err_set(err, ST_ERR_INPUT, "--zero: expected 0, 1, 2 or 3, found %d", o->zero);
    if (pl->tp != c->tp || pl->tp_rank != c->tp_rank)
        return err_set(err, ST_ERR_INPUT, "parallel: the model holds tp slice %d of %d, the grid has tp rank %d of %d",
                       pl->tp_rank, pl->tp, c->tp_rank, c->tp);
    if (pl->shard_multiple % c->dp != 0)
        return err_set(err, ST_ERR_INPUT, "parallel: the model layout is padded for %d ranks, the dp group has %d",
                       pl->shard_multiple, c->dp);
    Status gst = par_check_grid(o->zero, c->pp, err);
    if (gst != ST_OK) return gst;
    if ((g->w.params == NULL) != (o->zero >= 3) || (g->d.grads == NULL) != (o->zero >= 2))
        return err_set(err, ST_ERR_INPUT, "parallel: the model was not built with the flags of ZeRO stage %d", o->zero);
    Par *p = calloc(1, sizeof *p);
    if (!p) return err_set(err, ST_ERR_RUNTIME, "out of memory (parallel state)");
    p->c = c, p->g = g, p->o = *o, p->mem = mem, p->pl = pl;
    p->dev = g->be->host_addressable ? NULL : g->be;
    /* A device: data parallelism only (its collectives staged through host memory, dev_stage.c), with
     * the optimizers the device's entries run. */
    if (p->dev && (c->tp > 1 || c->pp > 1 || o->muon || o->shampoo || !p->dev->optim_update ||
                   !p->dev->sumsq)) {
        free(p);
        return err_set(err, ST_ERR_INPUT, "--device %s: expected data parallelism only (tp 1, pp 1) with "
                       "AdamW, Adam, SGD or Lion (the device's optimizer entries), found tp %d, pp %d, ZeRO %d%s",
                       g->be->name, c->tp, c->pp, o->zero, o->muon ? ", Muon" : o->shampoo ? ", Shampoo" : "");
    }
    p->dp = c->dp, p->r = c->dp_rank, p->zero = o->zero, p->nseg = pl->nseg, p->L = g->w.cfg.n_layer;
    if (p->o.bucket_floats == 0) p->o.bucket_floats = PAR_DEFAULT_BUCKET_FLOATS;
    if (o->faults.bucket_floats > 0) p->o.bucket_floats = (size_t)o->faults.bucket_floats; /* test-only */
    if (p->o.nt < 1) p->o.nt = 1;
    int ns = p->nseg, ok = 1;
    p->off = calloc((size_t)ns, sizeof(size_t)), p->len = calloc((size_t)ns, sizeof(size_t));
    p->blk = calloc((size_t)ns, sizeof(size_t)), p->soff = calloc((size_t)ns, sizeof(size_t));
    if (!p->off || !p->len || !p->blk || !p->soff) goto oom;
    size_t S = 0;
    for (int s = 0; s < ns; s++) {
        p->off[s] = pl->seg_off[s], p->len[s] = pl->seg_off[s + 1] - pl->seg_off[s];
        p->blk[s] = p->len[s] / (size_t)p->dp, p->soff[s] = S;
        S += p->blk[s];
    }
    p->S = S;
    seg_sizes(pl, &p->E, &p->X);

    /* Moments, then each mechanism's state. */
    p->mom_floats = p->zero >= 1 ? S : pl->total;
    if (p->dev) { /* the moments live beside the parameters, in the device's memory */
        size_t b = p->mom_floats * sizeof(float);
        p->m = p->dev->alloc(mem, MEM_MOMENTS, b), ok = p->m != NULL || b == 0;
        if (o->n_moments >= 2) p->v = p->dev->alloc(mem, MEM_MOMENTS, b), ok = ok && (p->v || b == 0);
    } else {
        p->m = par_alloc_f(p, MEM_MOMENTS, p->mom_floats, &ok);
        if (o->n_moments >= 2) p->v = par_alloc_f(p, MEM_MOMENTS, p->mom_floats, &ok);
    }
    if (!ok || !zero_init(p) || !tied_init(p) || !stage_init(p)) goto oom;
    Status mst = matopt_init(p, err);
    if (mst == ST_ERR_INPUT) {
        par_free(p);
        return mst;
    }
    if (mst != ST_OK) goto oom;
    /* Optimizer pieces: each tensor intersected with the owned block of its segment. */
    const float *scale_t = p->mo.scale_t; /* the matrix optimizer's tensors (NULL: none) */
    if (p->zero == 0) {
        if (!(p->ranges = calloc((size_t)pl->ntensors, sizeof *p->ranges))) goto oom;
        for (int i = 0; i < pl->ntensors; i++)
            if (!scale_t || scale_t[i] == 0)
                p->ranges[p->nranges++] = (OptimRange){pl->tensors[i].offset, pl->tensors[i].numel,
                                                       pl->tensors[i].decay, pl->tensors[i].lr_mult};
    } else {
        if (!(p->pieces = calloc((size_t)pl->ntensors, sizeof *p->pieces))) goto oom;
        for (int i = 0; i < pl->ntensors; i++) {
            const TensorInfo *t = &pl->tensors[i];
            int s = t->segment;
            size_t a = p->off[s] + (size_t)p->r * p->blk[s], b = a + p->blk[s];
            size_t lo = t->offset > a ? t->offset : a, hi = t->offset + t->numel < b ? t->offset + t->numel : b;
            if (hi <= lo) continue;
            Piece *q = &p->pieces[p->npieces++];
            q->n = hi - lo, q->decay = t->decay, q->lr_mult = t->lr_mult, q->flat = lo;
            q->mx_scale = scale_t ? scale_t[i] : 0.0f;
            q->m_off = p->soff[s] + (lo - a);
            q->p_off = p->zero >= 3 ? q->m_off : lo;
            q->g_off = p->zero >= 2 ? q->m_off : lo;
        }
    }
    /* Norm partition: fixed chunks of every owned slice; the pieces another rank counts (tp.c). */
    ParNorm *nm = &p->norm;
    for (int s = 0; s < ns; s++) nm->nchunks += (p->blk[s] + NORM_CHUNK - 1) / NORM_CHUNK;
    nm->chunk_seg = calloc(nm->nchunks + 1, sizeof(size_t)), nm->chunk_start = calloc(nm->nchunks + 1, sizeof(size_t));
    nm->partials = calloc(nm->nchunks + 1, sizeof(double));
    if (!nm->chunk_seg || !nm->chunk_start || !nm->partials) goto oom;
    size_t ci = 0;
    for (int s = 0; s < ns; s++)
        for (size_t x = 0; x < p->blk[s]; x += NORM_CHUNK) nm->chunk_seg[ci] = (size_t)s, nm->chunk_start[ci++] = x;
    if (!tp_norm_init(p)) goto oom;

    g->hooks.ctx = p;
    zero_set_hooks(p);
    tp_set_hooks(p);
    *out = p;
    return ST_OK;
oom:
    par_free(p);
    return err_set(err, ST_ERR_RUNTIME, "out of memory allocating the ZeRO-%d state (shard of %zu floats)", o->zero,
                   pl->total / (size_t)c->dp);
}

void par_set_progress(Par *p, void (*fn)(void *ctx), void *ctx) {
    p->progress_fn = fn, p->progress_ctx = ctx;
}

void par_free(Par *p) {
    if (!p) return;
    MemStats *ms = p->mem;
    Err e;
    if (p->zb.param && p->hook_st == ST_OK) (void)zero_params_wait(p, &e); /* the last step's gathers write into params */
    zero_free(p);
    stage_free(p);
    tied_free(p);
    matopt_free(p);
    if (p->dev) {
        p->dev->free(ms, MEM_MOMENTS, p->m, p->mom_floats * sizeof(float));
        p->dev->free(ms, MEM_MOMENTS, p->v, p->mom_floats * sizeof(float));
    } else {
        mem_free(ms, MEM_MOMENTS, p->m, p->mom_floats * sizeof(float));
        mem_free(ms, MEM_MOMENTS, p->v, p->mom_floats * sizeof(float));
    }
    if (p->g && p->g->hooks.ctx == p) memset(&p->g->hooks, 0, sizeof p->g->hooks);
    free(p->off), free(p->len), free(p->blk), free(p->soff), free(p->pieces), free(p->ranges);
    free(p->norm.chunk_seg), free(p->norm.chunk_start), free(p->norm.partials), free(p->norm.twice);
    free(p);
}

float *par_moment(Par *p, int which) { return which == 0 ? p->m : p->v; }

Status par_hook_status(const Par *p, Err *err) {
    if (p->hook_st != ST_OK && err) *err = p->hook_err;
    return p->hook_st;
}

/* ================================================================ the step */

void par_step_begin(Par *p, int k, long step) {
    p->st.k = k, p->st.in_step = 1, p->st.j = 0, p->st.noise_sumsq = 0;
    p->c->step = step;
    zero_step_begin(p);
}

void par_micro_begin(Par *p, int j) {
    p->st.j = j;
    p->st.last = j == p->st.k - 1;
}

double par_noise_sumsq(const Par *p) { return p->st.noise_sumsq; }

long par_zero_gathers_ahead(const Par *p) { return p && p->zero >= 3 ? p->zp.ahead : -1; }

Status par_grads_finish(Par *p, Err *err) {
    Status st;
    if (p->tied.on && p->zero <= 1 && (st = tied_exchange(p, err)) != ST_OK) return st;
    if ((st = tp_finish(p, err)) != ST_OK) return st;
    if ((st = zero_grads_finish(p, err)) != ST_OK) return st;
    p->st.in_step = 0;
    float gscale = p->o.faults.grad_scale;
    if (gscale != 0.0f) { /* test fault: every rank's reduced gradients scaled alike */
        float *G = zero_grads(p);
        size_t n = p->zero >= 2 ? p->S : p->pl->total;
        if (p->dev) p->dev->scale_inplace(G, n, gscale, 1);
        else
            for (size_t i = 0; i < n; i++) G[i] *= gscale;
    }
    return par_hook_status(p, err);
}

/* A device's part of the norm: Σ x² of each owned block through the table (its chunks of
 * NORM_CHUNK restart at each block, as the partition below), the blocks added in order. The
 * per-rank sums are then added as the CPU's (par_grad_norm). */
static double dev_grad_sumsq(Par *p) {
    double sum = 0;
    for (int s = 0; s < p->nseg; s++)
        if (p->blk[s]) sum += p->dev->sumsq(zero_owned_grad(p, s), p->blk[s]);
    return sum;
}

/* The CPU's part of the norm: the fixed chunks of the owned blocks, in parallel, added in order. */
static double host_grad_sumsq(Par *p) {
    const ParNorm *nm = &p->norm;
    long nc = (long)nm->nchunks;
    /* Eight chunks at a time (optim_chunk_sumsq8: the same sums, the eight chains side by side)
     * where all eight are whole; the others (a block's last chunk, the last group) one by one. */
    long ngroup = (nc + 7) / 8;
#pragma omp parallel for schedule(static) num_threads(p->o.nt)
    for (long gi = 0; gi < ngroup; gi++) {
        long c0 = gi * 8, c1 = c0 + 8 < nc ? c0 + 8 : nc;
        const float *x[8];
        size_t len[8];
        int whole = c1 - c0 == 8;
        for (long ci = c0; ci < c1; ci++) {
            int s = (int)nm->chunk_seg[ci];
            size_t x0 = nm->chunk_start[ci], x1 = x0 + NORM_CHUNK < p->blk[s] ? x0 + NORM_CHUNK : p->blk[s];
            x[ci - c0] = zero_owned_grad(p, s) + x0, len[ci - c0] = x1 - x0;
            whole &= len[ci - c0] == NORM_CHUNK;
        }
        if (whole) optim_chunk_sumsq8(x, NORM_CHUNK, nm->partials + c0);
        else
            for (long ci = c0; ci < c1; ci++) nm->partials[ci] = optim_chunk_sumsq(x[ci - c0], len[ci - c0]);
    }
    double local = 0;
    for (size_t ci = 0; ci < nm->nchunks; ci++) local += nm->partials[ci];
    return local;
}

Status par_grad_norm(Par *p, double *norm, Err *err) {
    double local = p->dev ? dev_grad_sumsq(p) : host_grad_sumsq(p);
    local = tp_norm_subtract(p, local); /* tp rank > 0: the replicated tensors count on rank 0 */
    /* Fixed order across ranks: every rank adds the same per-rank sums in rank order. */
    double *all = calloc((size_t)p->c->world, sizeof(double));
    if (!all) return err_set(err, ST_ERR_RUNTIME, "out of memory (norm)");
    Status st = comm_allgather_f64(p->c, local, all, err);
    double sum = 0;
    for (int i = 0; i < p->c->world; i++) sum += all[i];
    free(all);
    *norm = sqrt(sum);
    return st;
}

Status par_optim_step(Par *p, const OptimConfig *oc, long step, float lr, float matrix_lr, float grad_scale, Err *err) {
    Status wst = zero_params_wait(p, err); /* a forward normally waited for them all already */
    if (wst != ST_OK) return wst;
    matopt_sophia_reset(p, oc);
    if (p->dev) { /* optim_step_lowp's rule per range through the table (par_init: ZeRO 0 or 1, no matrices) */
        if ((int)oc->kind != BACKEND_OPT_ADAMW && (int)oc->kind != BACKEND_OPT_ADAM && (int)oc->kind != BACKEND_OPT_SGD &&
            (int)oc->kind != BACKEND_OPT_LION)
            return err_set(err, ST_ERR_INPUT, "--device %s: optimizer %s does not run on the device", p->dev->name,
                           optim_kind_name(oc->kind));
        const float bc1 = 1.0f - powf(oc->beta1, (float)step), bc2 = 1.0f - powf(oc->beta2, (float)step);
        int lk = p->g->w.prec == GPT_FP16 ? 2 : p->g->w.prec == GPT_BF16 ? 1 : 0;
        for (int i = 0; i < p->nranges; i++) { /* ZeRO 0: every tensor whole */
            const OptimRange *rg = &p->ranges[i];
            BackendOptStep s = {(int)oc->kind, lr * rg->lr_mult, rg->decay ? oc->weight_decay : 0.0f, grad_scale,
                                oc->beta1, oc->beta2, oc->eps, oc->momentum, bc1, bc2, step, lk};
            p->dev->optim_update(&s, p->g->w.params + rg->offset, p->g->d.grads + rg->offset, p->m + rg->offset,
                                 p->v ? p->v + rg->offset : NULL,
                                 p->g->w.params_lp ? p->g->w.params_lp + rg->offset : NULL, rg->n);
        }
        float *P = zero_params(p);      /* ZeRO 3: the parameter shard (the master) */
        const float *G = zero_grads(p); /* ZeRO 2-3: the gradient shard */
        for (int i = 0; i < p->npieces; i++) { /* ZeRO 1-3: the owned pieces; the working copy after the gather */
            const Piece *q = &p->pieces[i];
            BackendOptStep s = {(int)oc->kind, lr * q->lr_mult, q->decay ? oc->weight_decay : 0.0f, grad_scale,
                                oc->beta1, oc->beta2, oc->eps, oc->momentum, bc1, bc2, step, 0};
            p->dev->optim_update(&s, P + q->p_off, G + q->g_off, p->m + q->m_off,
                                 p->v ? p->v + q->m_off : NULL, NULL, q->n);
        }
        return ST_OK;
    }
    if (p->zero == 0) { /* mixed precision: the working copy follows the master in the same pass */
        OptimLowp lk = p->g->w.prec == GPT_FP16 ? OPTIM_LOWP_FP16 : p->g->w.prec == GPT_BF16 ? OPTIM_LOWP_BF16 : OPTIM_LOWP_NONE;
        optim_step_lowp(oc, p->g->w.params, p->g->d.grads, p->m, p->v, p->ranges, p->nranges, step, lr, grad_scale,
                        p->g->w.params_lp, lk, p->o.nt);
    } else {
        float *P = zero_params(p);
        const float *G = zero_grads(p);
        for (int i = 0; i < p->npieces; i++) {
            const Piece *q = &p->pieces[i];
            if (q->mx_scale != 0) continue; /* the matrix optimizer's */
            OptimRange rg = {0, q->n, q->decay, q->lr_mult};
            optim_step(oc, P + q->p_off, G + q->g_off, p->m + q->m_off, p->v ? p->v + q->m_off : NULL, &rg, 1, step, lr,
                       grad_scale, p->o.nt);
        }
    }
    return matopt_step(p, oc, step, matrix_lr, lr, grad_scale, err);
}

Status par_params_sync(Par *p, Err *err) { return zero_params_sync(p, err); }

Status par_params_wait(Par *p, Err *err) { return zero_params_wait(p, err); }
