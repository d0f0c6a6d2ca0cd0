/* matopt.c — the optimizers that are not elementwise, sharded over the dp group (parallel.h's
 * par_optim_step contract; docs/optimizers.md "Sharding"): Muon's whole-matrix Newton–Schulz and
 * Shampoo's blocks, each matrix or block on one owner rank (ParMatopt); Sophia's Hessian EMA
 * (elementwise over this rank's pieces); Shampoo's block state in and out of checkpoints.
 *
 * Contents: init / free (owners, buffers) · Muon's step · Shampoo's step · Sophia · the extra
 * state (Shampoo's blocks) in and out. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/matmul.h"
#include "optim/muon.h"
#include "optim/shampoo.h"
#include "parallel/parallel_internal.h"

/* ================================================================ init / free */

/* Muon's matrices, their owners (longest processing time first, par_muon_owner), the per-tensor
 * shape scales and the gather buffer with its scratch. 0 when out of memory. */
static int muon_setup(Par *p) {
    const ParamLayout *pl = p->pl;
    p->mo.nmx = layout_hidden_matrices(pl, NULL);
    p->mo.mx = calloc((size_t)p->mo.nmx + 1, sizeof *p->mo.mx);
    p->mo.owner = calloc((size_t)p->mo.nmx + 1, sizeof(int));
    p->mo.req = calloc((size_t)p->mo.nmx + 1, sizeof(CommReq));
    p->mo.scale_t = calloc((size_t)pl->ntensors, sizeof(float));
    double *cost = calloc((size_t)p->mo.nmx + 1, sizeof(double));
    int ok = p->mo.mx && p->mo.owner && p->mo.req && p->mo.scale_t && cost;
    if (ok) {
        layout_hidden_matrices(pl, p->mo.mx);
        for (int i = 0; i < p->mo.nmx; i++) {
            p->mo.scale_t[p->mo.mx[i].tensor] = muon_shape_scale(p->mo.mx[i].rows, p->mo.mx[i].cols);
            cost[i] = muon_ns_flops(p->mo.mx[i].rows, p->mo.mx[i].cols, MUON_NS_STEPS);
        }
        ok = layout_lpt_assign(cost, p->mo.nmx, p->dp, p->mo.owner) >= 0;
    }
    if (ok) {
        size_t nb = pl->seg_off[p->L + 1] - pl->seg_off[1];
        p->mo.bytes = layout_muon_bytes(pl, p->o.muon_bf16);
        p->mo.buf = mem_alloc(p->mem, MEM_MOMENTS, p->mo.bytes);
        ok = p->mo.buf != NULL;
        if (ok) memset(p->mo.buf, 0, nb * sizeof(float)), p->mo.scratch = p->mo.buf + nb;
    }
    free(cost);
    return ok;
}

/* Shampoo's blocks, owners, the matrix tensors' marks and the buffers. 0 when out of memory. */
static int shampoo_setup(Par *p) {
    const ParamLayout *pl = p->pl;
    int bs = p->o.shampoo_block, ev = p->o.precond_every, L = p->L;
    p->mo.nsb = layout_shampoo_blocks(pl, bs, ev, p->dp, NULL);
    if (p->mo.nsb < 0) return 0;
    p->mo.sb = calloc((size_t)p->mo.nsb + 1, sizeof *p->mo.sb);
    p->mo.sh_state = calloc((size_t)p->mo.nsb + 1, sizeof *p->mo.sh_state);
    p->mo.scale_t = calloc((size_t)pl->ntensors, sizeof(float));
    if (!p->mo.sb || !p->mo.sh_state || !p->mo.scale_t || layout_shampoo_blocks(pl, bs, ev, p->dp, p->mo.sb) != p->mo.nsb) return 0;
    for (int b = 0; b < p->mo.nsb; b++) p->mo.scale_t[p->mo.sb[b].tensor] = 1.0f; /* marks the tensor as Shampoo's */
    p->mo.bytes = layout_shampoo_bytes(pl, bs, ev, p->dp, p->r);
    p->mo.buf = mem_alloc(p->mem, MEM_MOMENTS, p->mo.bytes);
    if (!p->mo.buf) return 0;
    memset(p->mo.buf, 0, p->mo.bytes);
    float *q = p->mo.buf + (pl->seg_off[L + 1] - pl->seg_off[1]);
    for (int b = 0; b < p->mo.nsb; b++) {
        if (p->mo.sb[b].owner != p->r) continue;
        size_t r = (size_t)p->mo.sb[b].r, c = (size_t)p->mo.sb[b].c;
        p->mo.sh_state[b] = q;
        q += 2 * (r * r + c * c) + r * c;
    }
    size_t head = (size_t)((char *)q - (char *)p->mo.buf); /* the scratch holds doubles: 64-byte aligned */
    p->mo.scratch = (char *)p->mo.buf + head + (64 - head % 64) % 64;
    return 1;
}

Status matopt_init(Par *p, Err *err) {
    const Comm *c = p->c;
    const ParOptions *o = &p->o;
    p->mo.reset = o->faults.matrix_reset;
    if (o->muon) {
        if (c->tp > 1 || c->pp > 1)
            return err_set(err, ST_ERR_INPUT, "parallel: Muon needs whole matrices on one dp group: expected tp 1 and pp 1, "
                           "found tp %d pp %d", c->tp, c->pp);
        if (!muon_setup(p)) return ST_ERR_RUNTIME;
    }
    if (o->shampoo) {
        if (c->tp > 1 || c->pp > 1)
            return err_set(err, ST_ERR_INPUT, "parallel: Shampoo needs whole matrices on one dp group: expected tp 1 and pp "
                           "1, found tp %d pp %d", c->tp, c->pp);
        if (o->shampoo_block < 1 || o->precond_every < 1)
            return err_set(err, ST_ERR_INPUT, "parallel: Shampoo needs a block >= 1 and an interval >= 1, found %d and %d",
                           o->shampoo_block, o->precond_every);
        if (!shampoo_setup(p)) return ST_ERR_RUNTIME;
    }
    return ST_OK;
}

void matopt_free(Par *p) {
    ParMatopt *mo = &p->mo;
    mem_free(p->mem, MEM_MOMENTS, mo->buf, mo->bytes);
    free(mo->mx), free(mo->owner), free(mo->scale_t), free(mo->req), free(mo->sb), free(mo->sh_state);
}

/* ================================================================ Muon and Shampoo */

int par_muon_owner(const Par *p, int i) { return p->mo.mx && i >= 0 && i < p->mo.nmx ? p->mo.owner[i] : -1; }

/* Muon's matrices (par_optim_step's steps 1-4). */
static Status muon_step(Par *p, const OptimConfig *oc, float lr, float gs, Err *err) {
    const ParamLayout *pl = p->pl;
    float *U = p->mo.buf - p->off[1]; /* flat coordinates */
    const float beta = oc->muon_momentum;
    const int nt = p->o.nt;
    Status st = ST_OK;
    if (p->mo.reset) { /* test hook: the momentum of every matrix lost */
        p->mo.reset = 0;
        for (int i = 0; i < pl->ntensors && p->zero == 0; i++)
            if (p->mo.scale_t[i] != 0) memset(p->m + pl->tensors[i].offset, 0, pl->tensors[i].numel * sizeof(float));
        for (int i = 0; i < p->npieces; i++)
            if (p->pieces[i].mx_scale != 0) memset(p->m + p->pieces[i].m_off, 0, p->pieces[i].n * sizeof(float));
    }
    /* 1. momentum and the Nesterov input of this rank's part of each matrix */
    if (p->zero == 0) {
        for (int i = 0; i < pl->ntensors; i++) {
            const TensorInfo *t = &pl->tensors[i];
            if (p->mo.scale_t[i] != 0)
                muon_momentum(p->m + t->offset, p->g->d.grads + t->offset, U + t->offset, t->numel, beta, gs, nt);
        }
    } else {
        const float *G = p->zero >= 2 ? p->zg.shard : p->g->d.grads;
        for (int i = 0; i < p->npieces; i++) {
            const Piece *q = &p->pieces[i];
            if (q->mx_scale != 0) muon_momentum(p->m + q->m_off, G + q->g_off, U + q->flat, q->n, beta, gs, nt);
        }
        for (int s = 1; s <= p->L && st == ST_OK; s++)
            if (p->blk[s])
                st = comm_allgather_f32(p->c, U + p->off[s] + (size_t)p->r * p->blk[s], U + p->off[s], p->blk[s], err);
        if (st != ST_OK) return st;
    }
    /* 2. the owned matrices orthogonalised in place */
    MuonGemm mg = muon_gemm(mm_sgemm, mm_gemm_bf16, p->o.muon_bf16);
    for (int i = 0; i < p->mo.nmx; i++) {
        const LayoutMatrix *x = &p->mo.mx[i];
        if (p->mo.owner[i] == p->r)
            muon_ns(&mg, U + x->offset, U + x->offset, x->rows, x->cols, p->mo.scratch, nt);
    }
    if ((st = mm_take_error(err)) != ST_OK) return st;
    /* 3. every matrix from its owner */
    if (p->dp > 1 && !p->o.faults.matrix_no_share) {
        for (int i = 0; i < p->mo.nmx && st == ST_OK; i++)
            st = comm_ibcast_f32(p->c, U + p->mo.mx[i].offset, (size_t)p->mo.mx[i].rows * p->mo.mx[i].cols, p->mo.owner[i],
                                 &p->mo.req[i], err);
        if (st == ST_OK) st = comm_wait_all(p->mo.req, p->mo.nmx, p->c->timeout_s, "muon update", p->c->step, err);
        if (st != ST_OK) return st;
    }
    /* 4. this rank's part of the parameters */
    if (p->zero == 0) {
        OptimLowp lk = p->g->w.prec == GPT_FP16 ? OPTIM_LOWP_FP16 : p->g->w.prec == GPT_BF16 ? OPTIM_LOWP_BF16 : OPTIM_LOWP_NONE;
        for (int i = 0; i < pl->ntensors; i++) {
            const TensorInfo *t = &pl->tensors[i];
            if (p->mo.scale_t[i] == 0) continue;
            uint16_t *lp = p->g->w.params_lp ? p->g->w.params_lp + t->offset : NULL;
            muon_apply(p->g->w.params + t->offset, U + t->offset, t->numel, lr, t->decay ? oc->weight_decay : 0.0f,
                       p->mo.scale_t[i], lp, lk, nt);
        }
    } else {
        float *P = p->zero >= 3 ? p->zp.shard : p->g->w.params;
        for (int i = 0; i < p->npieces; i++) {
            const Piece *q = &p->pieces[i];
            if (q->mx_scale != 0)
                muon_apply(P + q->p_off, U + q->flat, q->n, lr, q->decay ? oc->weight_decay : 0.0f, q->mx_scale, NULL,
                           OPTIM_LOWP_NONE, nt);
        }
    }
    return ST_OK;
}

/* One input of Shampoo's owners: this rank's flat part of every Shampoo tensor written into the
 * gather buffer U (flat coordinates), which = 0 the gradient times gs (updating Adam's moments
 * there first), 1 the bias-corrected first moment, 2 Adam's update m̂/(√v̂ + eps); then the block
 * segments all-gathered (ZeRO >= 1; at ZeRO 0 every rank wrote all of it). */
static Status shampoo_input(Par *p, float *U, int which, const OptimConfig *oc, float gs, float bc1, float bc2, Err *err) {
    const ParamLayout *pl = p->pl;
    const float b1 = oc->beta1, b2 = oc->beta2, eps = oc->eps;
    const float *G0 = p->zero >= 2 ? p->zg.shard : p->g->d.grads;
    int n = p->zero == 0 ? pl->ntensors : p->npieces;
    for (int k = 0; k < n; k++) {
        size_t mo, go, fo, len;
        if (p->zero == 0) {
            const TensorInfo *t = &pl->tensors[k];
            if (p->mo.scale_t[k] == 0) continue;
            mo = go = fo = t->offset, len = t->numel;
        } else {
            const Piece *q = &p->pieces[k];
            if (q->mx_scale == 0) continue;
            mo = q->m_off, go = q->g_off, fo = q->flat, len = q->n;
        }
        float *m = p->m + mo, *v = p->v + mo, *u = U + fo;
        const float *g = G0 + go;
        long N = (long)len;
        if (which == 0) {
#pragma omp parallel for simd num_threads(p->o.nt) schedule(static)
            for (long i = 0; i < N; i++) {
                float gi = g[i] * gs;
                m[i] = b1 * m[i] + (1.0f - b1) * gi;
                v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
                u[i] = gi;
            }
        } else if (which == 1) {
#pragma omp parallel for simd num_threads(p->o.nt) schedule(static)
            for (long i = 0; i < N; i++) u[i] = m[i] / bc1;
        } else {
#pragma omp parallel for simd num_threads(p->o.nt) schedule(static)
            for (long i = 0; i < N; i++) u[i] = (m[i] / bc1) / (sqrtf(v[i] / bc2) + eps);
        }
    }
    Status st = ST_OK;
    if (p->zero >= 1)
        for (int s = 1; s <= p->L && st == ST_OK; s++)
            if (p->blk[s])
                st = comm_allgather_f32(p->c, U + p->off[s] + (size_t)p->r * p->blk[s], U + p->off[s], p->blk[s], err);
    return st;
}

/* Shampoo's blocks (par_optim_step). */
static Status shampoo_step(Par *p, const OptimConfig *oc, long step, float lr, float gs, Err *err) {
    const ParamLayout *pl = p->pl;
    float *U = p->mo.buf - p->off[1];
    const float bc1 = 1.0f - powf(oc->beta1, (float)step), bc2 = 1.0f - powf(oc->beta2, (float)step);
    const int nt = p->o.nt;
    Status st;
    if (p->mo.reset) { /* test hook: the matrices' state lost */
        int n = p->mo.reset == 1 ? (p->zero == 0 ? pl->ntensors : p->npieces) : 0;
        p->mo.reset = 0;
        for (int k = 0; k < n; k++) {
            int mine = p->zero == 0 ? p->mo.scale_t[k] != 0 : p->pieces[k].mx_scale != 0;
            size_t mo = p->zero == 0 ? pl->tensors[k].offset : p->pieces[k].m_off;
            size_t len = p->zero == 0 ? pl->tensors[k].numel : p->pieces[k].n;
            if (mine) memset(p->m + mo, 0, len * sizeof(float)), memset(p->v + mo, 0, len * sizeof(float));
        }
        for (int b = 0; b < p->mo.nsb; b++)
            if (p->mo.sh_state[b])
                memset(p->mo.sh_state[b], 0, shampoo_block_state_floats(p->mo.sb[b].r, p->mo.sb[b].c) * sizeof(float));
    }
    /* 1. the gradient: statistics, and the roots when due */
    if ((st = shampoo_input(p, U, 0, oc, gs, bc1, bc2, err)) != ST_OK) return st;
    for (int b = 0; b < p->mo.nsb; b++) {
        const LayoutBlock *x = &p->mo.sb[b];
        if (!p->mo.sh_state[b]) continue;
        float *L = p->mo.sh_state[b], *R = L + (size_t)x->r * x->r, *PL = R + (size_t)x->c * x->c, *PR = PL + (size_t)x->r * x->r;
        shampoo_stats(L, R, U + x->offset, x->r, x->c, x->ld, oc->beta2, mm_sgemm, nt);
        if ((step - 1) % p->o.precond_every == 0) {
            if ((st = shampoo_root(PL, L, x->r, p->o.shampoo_eps, mm_sgemm, p->mo.scratch, err)) != ST_OK ||
                (st = shampoo_root(PR, R, x->c, p->o.shampoo_eps, mm_sgemm, p->mo.scratch, err)) != ST_OK)
                return st;
        }
    }
    /* 2. m̂: the preconditioned direction D of each owned block */
    if ((st = shampoo_input(p, U, 1, oc, gs, bc1, bc2, err)) != ST_OK) return st;
    for (int b = 0; b < p->mo.nsb; b++) {
        const LayoutBlock *x = &p->mo.sb[b];
        if (!p->mo.sh_state[b]) continue;
        size_t rr = (size_t)x->r * x->r, cc = (size_t)x->c * x->c;
        float *PL = p->mo.sh_state[b] + rr + cc, *PR = PL + rr, *D = PR + cc;
        shampoo_precondition(D, PL, U + x->offset, x->ld, PR, x->r, x->c, mm_sgemm, p->mo.scratch);
    }
    if ((st = mm_take_error(err)) != ST_OK) return st;
    /* 3. Adam's update: each owned block's norm, then the grafted result into a zeroed buffer */
    if ((st = shampoo_input(p, U, 2, oc, gs, bc1, bc2, err)) != ST_OK) return st;
    double *a2 = calloc((size_t)p->mo.nsb + 1, sizeof(double));
    if (!a2) return err_set(err, ST_ERR_RUNTIME, "out of memory (Shampoo)");
    for (int b = 0; b < p->mo.nsb; b++) {
        const LayoutBlock *x = &p->mo.sb[b];
        if (!p->mo.sh_state[b]) continue;
        double s = 0;
        for (int i = 0; i < x->r; i++)
            for (int j = 0; j < x->c; j++) {
                double a = U[x->offset + (size_t)i * x->ld + j];
                s += a * a;
            }
        a2[b] = s;
    }
    size_t nb = pl->seg_off[p->L + 1] - pl->seg_off[1];
    if (p->dp > 1) memset(p->mo.buf, 0, nb * sizeof(float));
    for (int b = 0; b < p->mo.nsb; b++) {
        const LayoutBlock *x = &p->mo.sb[b];
        if (!p->mo.sh_state[b]) continue;
        size_t rr = (size_t)x->r * x->r, cc = (size_t)x->c * x->c;
        const float *D = p->mo.sh_state[b] + 2 * (rr + cc);
        shampoo_graft(U + x->offset, x->ld, D, x->r, x->c, a2[b], nt);
    }
    free(a2);
    /* 4. every block from its owner (exact: the others add zeros), then this rank's part applied */
    st = ST_OK;
    if (p->dp > 1 && !p->o.faults.matrix_no_share)
        for (int s = 1; s <= p->L && st == ST_OK; s++)
            if (p->len[s]) st = comm_allreduce_f32(p->c, U + p->off[s], U + p->off[s], p->len[s], err);
    if (st != ST_OK) return st;
    int n = p->zero == 0 ? pl->ntensors : p->npieces;
    float *P = p->zero >= 3 ? p->zp.shard : p->g->w.params;
    OptimLowp lk = p->zero == 0 && p->g->w.prec == GPT_FP16   ? OPTIM_LOWP_FP16
                   : p->zero == 0 && p->g->w.prec == GPT_BF16 ? OPTIM_LOWP_BF16
                                                              : OPTIM_LOWP_NONE;
    for (int k = 0; k < n; k++) {
        size_t po, fo, len;
        int decay;
        if (p->zero == 0) {
            const TensorInfo *t = &pl->tensors[k];
            if (p->mo.scale_t[k] == 0) continue;
            po = fo = t->offset, len = t->numel, decay = t->decay;
        } else {
            const Piece *q = &p->pieces[k];
            if (q->mx_scale == 0) continue;
            po = q->p_off, fo = q->flat, len = q->n, decay = q->decay;
        }
        uint16_t *lp = lk != OPTIM_LOWP_NONE && p->g->w.params_lp ? p->g->w.params_lp + po : NULL;
        muon_apply(P + po, U + fo, len, lr, decay ? oc->weight_decay : 0.0f, 1.0f, lp, lk, nt);
    }
    return ST_OK;
}

Status matopt_step(Par *p, const OptimConfig *oc, long step, float matrix_lr, float lr, float gs, Err *err) {
    if (p->mo.nsb) return shampoo_step(p, oc, step, lr, gs, err);
    return p->mo.nmx ? muon_step(p, oc, matrix_lr, gs, err) : ST_OK;
}

/* ================================================================ Sophia */

void matopt_sophia_reset(Par *p, const OptimConfig *oc) {
    if (!p->mo.reset || oc->kind != OPT_SOPHIA) return; /* test fault: Sophia's Hessian EMA lost */
    p->mo.reset = 0;
    for (int i = 0; i < p->nranges; i++) memset(p->v + p->ranges[i].offset, 0, p->ranges[i].n * sizeof(float));
    for (int i = 0; i < p->npieces; i++) memset(p->v + p->pieces[i].m_off, 0, p->pieces[i].n * sizeof(float));
}

void par_hess_update(Par *p, const OptimConfig *oc, float scale) {
    if (p->zero == 0) {
        optim_hess_update(oc, p->v, p->g->d.grads, p->ranges, p->nranges, scale, p->o.nt);
        return;
    }
    const float *G = p->zero >= 2 ? p->zg.shard : p->g->d.grads;
    for (int i = 0; i < p->npieces; i++) {
        const Piece *q = &p->pieces[i];
        OptimRange rg = {0, q->n, q->decay, q->lr_mult};
        optim_hess_update(oc, p->v + q->m_off, G + q->g_off, &rg, 1, scale, p->o.nt);
    }
}

/* ================================================================ extra state (Shampoo's blocks) */

size_t par_extra_state_floats(const Par *p) {
    size_t n = 0;
    for (int b = 0; b < p->mo.nsb; b++) n += shampoo_block_state_floats(p->mo.sb[b].r, p->mo.sb[b].c);
    return n;
}

const char *par_extra_state_name(const Par *p) { return p->mo.nsb ? "shampoo.blocks" : NULL; }

Status par_get_extra_state(Par *p, float *buf, Err *err) {
    size_t n = par_extra_state_floats(p), o = 0;
    if (!n) return ST_OK;
    memset(buf, 0, n * sizeof(float));
    for (int b = 0; b < p->mo.nsb; b++) {
        size_t k = shampoo_block_state_floats(p->mo.sb[b].r, p->mo.sb[b].c);
        if (p->mo.sh_state[b]) memcpy(buf + o, p->mo.sh_state[b], k * sizeof(float));
        o += k;
    }
    return p->dp > 1 ? comm_allreduce_f32(p->c, buf, buf, n, err) : ST_OK;
}

void par_set_extra_state(Par *p, const float *buf) {
    size_t o = 0;
    for (int b = 0; b < p->mo.nsb; b++) {
        size_t k = shampoo_block_state_floats(p->mo.sb[b].r, p->mo.sb[b].c);
        if (p->mo.sh_state[b]) memcpy(p->mo.sh_state[b], buf + o, k * sizeof(float));
        o += k;
    }
}

