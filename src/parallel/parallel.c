/* parallel.c — data parallelism and ZeRO 0–3 driven from the model's hooks (see parallel.h and
 * docs/parallel.md).
 *
 * Contents: layout bookkeeping and the memory plan · views of one segment · gradient buckets
 * (stage 0/1 on the full buffer, stage 2/3 in bucket slots) · parameter gathers (stage 3) · the
 * hooks · the step (finish, norm, optimizer, parameter sync) · state in and out. */
#include "parallel/parallel.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/timer.h"
#include "model/matmul.h"
#include "optim/muon.h"
#include "optim/shampoo.h"

#define NORM_CHUNK 4096 /* fixed partition of the norm's partial sums (thread-count independent) */

typedef struct {
    size_t p_off, g_off, m_off, n; /* offsets from the param / grad / moment bases of the piece */
    int decay;
    float lr_mult;  /* its tensor's (muP) */
    size_t flat;    /* flat offset of its first element (the Muon gather buffer's coordinates) */
    float mx_scale; /* Muon's shape scale of its tensor's matrices; 0: a flat (AdamW) range */
} Piece;

struct Par {
    Comm *c;
    Gpt *g;
    ParOptions o;
    MemStats *mem;
    const ParamLayout *pl;
    int dp, r, zero, nseg, L;
    size_t *off, *len, *blk, *soff; /* per segment: flat offset, length, block = len/dp, shard offset */
    size_t S, E, X;                 /* shard floats, embedding segment floats, largest other segment */

    float *m, *v;        /* moments: full layout (stage 0) or shard order */
    size_t mom_floats;

    /* Stage 0/1: requests on the full gradient buffer; seg_req0[s] .. + seg_nreq[s]. */
    CommReq *req;
    int nreq, *seg_req0, *seg_nreq;

    /* Stage 2/3 gradients: shard, the embedding bucket, two bucket slots for the other segments. */
    float *gshard, *gb0, *gbuf[2];
    int gslot_seg[2], gslot_pending[2], gnext, g0_pending;
    CommReq gslot_req[2], g0_req;
    int *seg_gslot; /* slot holding segment s's gradients during its backward */

    /* Stage 3 parameters: shard, the embedding gather buffer, two gather slots. Mixed precision:
     * each gathered buffer also has its 2-byte working copy (plb0, plbuf), rounded once per gather. */
    float *pshard, *pb0, *pbuf[2];
    int pslot_seg[2], p0_valid;
    CommReq pslot_req[2], p0_req;
    uint16_t *plb0, *plbuf[2];
    int plslot_ok[2], pl0_ok;

    Piece *pieces; /* optimizer pieces of the owned range (stage >= 1) */
    int npieces;
    OptimRange *ranges; /* stage 0: every tensor of the flat rule (Muon's matrices left out) */
    int nranges;

    /* Muon (ParOptions.muon; docs/optimizers.md): the hidden matrices, their owner ranks, the
     * gather buffer (segments 1..L, flat coordinates from off[1]) and Newton–Schulz scratch, one
     * MEM_MOMENTS allocation of layout_muon_bytes. */
    LayoutMatrix *mx;
    int nmx, *mx_owner;
    float *mx_scale_t;  /* per tensor: Muon's shape scale, 0 for the flat ranges */
    float *mu_buf;
    void *mu_scratch;
    size_t mu_bytes;
    CommReq *mx_req;
    int muon_fault;     /* test hook ST_PAR_TEST_MATRIX_FAULT=1: the owners' results (Muon, Shampoo) are
                           not shared */
    int muon_reset;     /* test hook ST_PAR_TEST_MATRIX_RESET=1 (Sophia: its Hessian EMA too): the first update of this process zeroes the
                           matrices' optimizer state (Muon's momentum; Shampoo's moments and block
                           state): a resume that lost it; =2 Shampoo's block state only (the part
                           that travels in the checkpoint's extra file) */
    /* Shampoo (ParOptions.shampoo): the blocks and their owners, and in the same MEM_MOMENTS
     * allocation (mu_buf, mu_bytes: layout_shampoo_bytes) the gather buffer, the owned blocks' state
     * (L, R, P_L, P_R, D at sh_state[b]) and scratch. */
    LayoutBlock *sb;
    int nsb;
    float **sh_state; /* per block: its state when owned here, else NULL */

    size_t *chunk_seg, *chunk_start; /* norm partition over the owned slices */
    double *partials;
    size_t nchunks;
    /* Tensor parallelism: tensors every tp rank holds whole (LayerNorms, wpe, row-parallel
     * biases) count once in the global norm, on tp rank 0; the others subtract these pieces
     * (segment, start, end in the owned block's coordinates). */
    size_t (*repl)[3];
    int nrepl;

    int k, j, last, in_step;
    double noise_sumsq; /* ParOptions.noise: this step's first micro-batch, summed per segment */
    int kill_rank;  /* test hook ST_PAR_TEST_KILL=RANK:STEP: that rank SIGKILLs itself mid-backward */
    long kill_step;
    float grad_fault; /* test hook ST_PAR_TEST_GRAD_SCALE=F: reduced gradients times F (a sum-vs-mean
                         fault that Adam and clipping hide from the losses; 0 = off) */
    int tp_fault;     /* test hook ST_PAR_TEST_TP_FAULT=1: the tp all-reduces of the backward pass are
                         skipped (Megatron's f operator missing: the forward, and so the first
                         loss, stay right; every gradient below the head is wrong) */
    int in_bwd;       /* between the backward's first hook and the next forward */
    int *started;     /* stage 0/1: segment s's gradient collective started this step */
    /* Pipeline: a rank holding wte at one end of a pp > 1 pipeline sums its wte gradient with the
     * other end's (the tied embedding and head) before the dp reduction, through tied_buf. */
    int tied, tied_peer;
    float *tied_buf;
    size_t tied_floats;
    void (*progress_fn)(void *);
    void *progress_ctx;
    Status hook_st;
    Err hook_err;
};

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

/* ================================================================ views */

/* Points the views of segment s (params or grads) at buf, which holds that segment. */
static void seg_views(Par *p, ParamViews *v, int s, float *buf) {
    const ParamLayout *pl = p->pl;
    for (int i = 0; i < pl->ntensors; i++) {
        const TensorInfo *t = &pl->tensors[i];
        if (t->segment != s) continue;
        float *q = buf + (t->offset - p->off[s]);
        int K = layout_block_tensors(&pl->cfg), llama = pl->cfg.arch == ARCH_LLAMA;
        if (s == 0) {
            if (t->id == 0) v->wte = q;
            else if (llama) v->lm_head = q;
            else v->wpe = q;
        } else if (s == p->L + 1) {
            if (t->id == 2 + p->L * K) v->lnfw = q;
            else v->lnfb = q;
        } else if (llama) {
            /* wk, wv and wup follow wq and wgate in the same buffer: no views of their own */
            BlockParams *b = &v->blocks[s - 1];
            float **f[LB_COUNT] = {&b->ln1w, &b->qkvw, NULL, NULL, &b->attprojw, &b->ln2w, &b->fcw, NULL, &b->fcprojw};
            float **dst = f[t->id - 2 - (s - 1) * K];
            if (dst) *dst = q;
        } else {
            BlockParams *b = &v->blocks[s - 1];
            float **f[BT_COUNT] = {&b->ln1w, &b->ln1b, &b->qkvw, &b->qkvb, &b->attprojw, &b->attprojb,
                                   &b->ln2w, &b->ln2b, &b->fcw, &b->fcb, &b->fcprojw, &b->fcprojb};
            *f[t->id - 2 - (s - 1) * K] = q;
        }
    }
    if (s == 0 && pl->has_head) v->head = pl->cfg.untied ? v->lm_head : v->wte;
}

static void hook_fail(Par *p, Status st, const Err *e) {
    if (p->hook_st == ST_OK) p->hook_st = st, p->hook_err = *e;
}

static void add_into(float *dst, const float *src, size_t n, int nt) {
#pragma omp parallel for schedule(static) num_threads(nt)
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

/* ================================================================ gradients, stage 0/1 */

static void start_seg_grads(Par *p, int s) {
    Err e;
    Status st = ST_OK;
    if (p->started[s] || p->len[s] == 0) return; /* empty: a block another pipeline stage holds */
    p->started[s] = 1;
    float *base = p->g->d.grads + p->off[s];
    if (p->zero == 0) {
        size_t done = 0;
        for (int q = 0; q < p->seg_nreq[s]; q++) {
            size_t n = p->len[s] - done < p->o.bucket_floats ? p->len[s] - done : p->o.bucket_floats;
            if ((st = comm_iallreduce_f32(p->c, base + done, base + done, n, &p->req[p->seg_req0[s] + q], &e)))
                break;
            done += n;
        }
    } else {
        st = comm_ireduce_scatter_f32(p->c, base, base + (size_t)p->r * p->blk[s], p->blk[s], &p->req[p->seg_req0[s]],
                                      &e);
    }
    if (st != ST_OK) hook_fail(p, st, &e);
}

static void progress(Par *p) {
    if (p->progress_fn) p->progress_fn(p->progress_ctx);
    for (int i = 0; i < p->nreq; i++)
        if (p->req[i].active) comm_test(&p->req[i]);
    for (int a = 0; a < 2; a++)
        if (p->gslot_req[a].active) comm_test(&p->gslot_req[a]);
    if (p->g0_req.active) comm_test(&p->g0_req);
}

/* ================================================================ gradients, stage 2/3 */

/* Waits for slot a's reduce-scatter and adds the owned block into the gradient shard. */
static Status gslot_finish(Par *p, int a, Err *err) {
    if (!p->gslot_pending[a]) return ST_OK;
    int s = p->gslot_seg[a];
    Status st = comm_wait(&p->gslot_req[a], p->c->timeout_s, "grad reduce-scatter", p->c->step, err);
    if (st != ST_OK) return st;
    add_into(p->gshard + p->soff[s], p->gbuf[a] + (size_t)p->r * p->blk[s], p->blk[s], p->o.nt);
    p->gslot_pending[a] = 0;
    return ST_OK;
}

static Status g0_finish(Par *p, Err *err) {
    if (!p->g0_pending) return ST_OK;
    Status st = comm_wait(&p->g0_req, p->c->timeout_s, "grad reduce-scatter", p->c->step, err);
    if (st != ST_OK) return st;
    add_into(p->gshard + p->soff[0], p->gb0 + (size_t)p->r * p->blk[0], p->blk[0], p->o.nt);
    p->g0_pending = 0;
    return ST_OK;
}

static void start_bucket_rs(Par *p, float *buf, int s, CommReq *req) {
    Err e;
    Status st = comm_ireduce_scatter_f32(p->c, buf, buf + (size_t)p->r * p->blk[s], p->blk[s], req, &e);
    if (st != ST_OK) hook_fail(p, st, &e);
}

/* ================================================================ parameters, stage 3 */

/* Starts the all-gather of segment s into buf (own block copied in first, then in place). */
static void start_gather(Par *p, int s, float *buf, CommReq *req) {
    if (buf == p->pb0) p->pl0_ok = 0;
    for (int a = 0; a < 2; a++)
        if (buf == p->pbuf[a]) p->plslot_ok[a] = 0;
    size_t b = p->blk[s];
    memcpy(buf + (size_t)p->r * b, p->pshard + p->soff[s], b * sizeof(float));
    Err e;
    Status st = comm_iallgather_f32(p->c, buf + (size_t)p->r * b, buf, b, req, &e);
    if (st != ST_OK) hook_fail(p, st, &e);
}

static void wait_req(Par *p, CommReq *req, const char *what) {
    Err e;
    Status st = comm_wait(req, p->c->timeout_s, what, p->c->step, &e);
    if (st != ST_OK) hook_fail(p, st, &e);
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
    int a = p->pslot_seg[0] == s ? 0 : p->pslot_seg[1] == s ? 1 : -1;
    if (a < 0) {
        a = p->pslot_seg[0] == next ? 1 : 0;
        if (p->pslot_req[a].active) wait_req(p, &p->pslot_req[a], "param all-gather");
        p->pslot_seg[a] = s;
        start_gather(p, s, p->pbuf[a], &p->pslot_req[a]);
    }
    wait_req(p, &p->pslot_req[a], "param all-gather");
    round_gathered(p, p->pbuf[a], p->plbuf[a], p->len[s], &p->plslot_ok[a]);
    seg_views(p, &p->g->w.p, s, p->pbuf[a]);
    if (next >= 1 && next <= p->L + 1 && p->pslot_seg[a ^ 1] != next) {
        if (p->pslot_req[a ^ 1].active) wait_req(p, &p->pslot_req[a ^ 1], "param all-gather");
        p->pslot_seg[a ^ 1] = next;
        start_gather(p, next, p->pbuf[a ^ 1], &p->pslot_req[a ^ 1]);
    }
}

/* ================================================================ hooks */

static void h_before_forward(void *ctx, int s) {
    Par *p = ctx;
    p->in_bwd = 0;
    if (p->zero >= 3) {
        if (s == 0) {
            /* wte is also the LM head: the embedding segment stays gathered until the update. */
            if (!p->p0_valid) {
                start_gather(p, 0, p->pb0, &p->p0_req);
                p->p0_valid = 1;
            }
            wait_req(p, &p->p0_req, "param all-gather");
            round_gathered(p, p->pb0, p->plb0, p->len[0], &p->pl0_ok);
            seg_views(p, &p->g->w.p, 0, p->pb0);
            if (p->pslot_seg[0] != 1 && p->pslot_seg[1] != 1) {
                int a = p->pslot_req[0].active ? 1 : 0;
                if (p->pslot_req[a].active) wait_req(p, &p->pslot_req[a], "param all-gather");
                p->pslot_seg[a] = 1;
                start_gather(p, 1, p->pbuf[a], &p->pslot_req[a]);
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
        if (st != ST_OK) hook_fail(p, st, &e);
        memset(p->gb0, 0, p->E * sizeof(float));
        seg_views(p, &p->g->d.g, 0, p->gb0);
    }
}

static void h_before_backward(void *ctx, int s) {
    Par *p = ctx;
    p->in_bwd = 1;
    progress(p);
    if (p->zero >= 3 && s >= 1) ensure_params(p, s, s - 1);
    if (p->zero >= 2 && s >= 1) {
        int a = p->gnext;
        p->gnext ^= 1;
        Err e;
        Status st = gslot_finish(p, a, &e);
        if (st != ST_OK) hook_fail(p, st, &e);
        memset(p->gbuf[a], 0, p->len[s] * sizeof(float));
        p->gslot_seg[a] = s;
        p->seg_gslot[s] = a;
        seg_views(p, &p->g->d.g, s, p->gbuf[a]);
    }
}

/* Sum of squares of segment s's gradient as this rank's backward left it (no reduction has
 * touched it yet), each tensor once per tp group: replicated tensors count on tp rank 0. */
static double seg_local_sumsq(const Par *p, int s) {
    const float *base = p->zero >= 2 ? (s == 0 ? p->gb0 : p->gbuf[p->seg_gslot[s]]) : p->g->d.grads + p->off[s];
    const ParamLayout *pl = p->pl;
    double acc = 0;
    for (int k = 0; k < pl->ntensors; k++) {
        const TensorInfo *t = &pl->tensors[k];
        if (t->segment != s || (pl->tp_rank > 0 && t->split == TP_REPLICATED)) continue;
        const float *x = base + (t->offset - p->off[s]);
        long n = (long)t->numel;
        double a = 0;
#pragma omp parallel for reduction(+ : a) num_threads(p->o.nt) schedule(static)
        for (long i = 0; i < n; i++) a += (double)x[i] * x[i];
        acc += a;
    }
    return acc;
}

double par_noise_sumsq(const Par *p) { return p->noise_sumsq; }

static void h_grads_ready(void *ctx, int s) {
    Par *p = ctx;
    if (!p->in_step) return;
    if (p->o.noise && p->j == 0) p->noise_sumsq += seg_local_sumsq(p, s); /* before this segment's reduction */
    if (p->kill_step > 0 && p->c->step == p->kill_step && p->c->rank == p->kill_rank && s == 1) raise(SIGKILL);
    if (p->zero >= 2) {
        if (s == 0) {
            start_bucket_rs(p, p->gb0, 0, &p->g0_req);
            p->g0_pending = 1;
            if (!p->o.overlap) {
                Err e;
                Status st = g0_finish(p, &e);
                if (st != ST_OK) hook_fail(p, st, &e);
            }
        } else {
            int a = p->seg_gslot[s];
            start_bucket_rs(p, p->gbuf[a], s, &p->gslot_req[a]);
            p->gslot_pending[a] = 1;
            if (!p->o.overlap) {
                Err e;
                Status st = gslot_finish(p, a, &e);
                if (st != ST_OK) hook_fail(p, st, &e);
            }
        }
    } else if (p->last && p->o.overlap && !(s == 0 && p->tied)) {
        start_seg_grads(p, s); /* a tied wte waits for the pipeline's exchange (par_grads_finish) */
    }
}

/* Tensor parallelism: the model's collectives over the tp group (blocking; an error is kept for
 * par_grads_finish and the model runs on with garbage, as after a failed GEMM). */
static void h_tp_allreduce(void *ctx, float *buf, size_t n, int max) {
    Par *p = ctx;
    if (p->tp_fault && p->in_bwd) return;
    Err e;
    Status st = comm_tp_allreduce_f32(p->c, buf, n, max ? COMM_MAX : COMM_SUM, &e);
    if (st != ST_OK) hook_fail(p, st, &e);
}

static void h_tp_allgather(void *ctx, float *buf, size_t block) {
    Par *p = ctx;
    Err e;
    Status st = comm_tp_allgather_f32(p->c, buf, block, &e);
    if (st != ST_OK) hook_fail(p, st, &e);
}

static void h_tp_reduce_scatter(void *ctx, float *buf, size_t block) {
    Par *p = ctx;
    Err e;
    Status st = comm_tp_reduce_scatter_f32(p->c, buf, block, &e);
    if (st != ST_OK) hook_fail(p, st, &e);
}

/* ================================================================ init / free */

static float *alloc_f(Par *p, MemCategory c, size_t n, int *ok) {
    if (n == 0) return NULL;
    float *q = mem_alloc(p->mem, c, n * sizeof(float));
    if (!q) *ok = 0;
    return q;
}

/* Muon's matrices, their owners (longest processing time first, par_muon_owner), the per-tensor
 * shape scales and the gather buffer with its scratch. 0 when out of memory. */
static int muon_setup(Par *p) {
    const ParamLayout *pl = p->pl;
    p->nmx = layout_hidden_matrices(pl, NULL);
    p->mx = calloc((size_t)p->nmx + 1, sizeof *p->mx);
    p->mx_owner = calloc((size_t)p->nmx + 1, sizeof(int));
    p->mx_req = calloc((size_t)p->nmx + 1, sizeof(CommReq));
    p->mx_scale_t = calloc((size_t)pl->ntensors, sizeof(float));
    double *cost = calloc((size_t)p->nmx + 1, sizeof(double));
    int ok = p->mx && p->mx_owner && p->mx_req && p->mx_scale_t && cost;
    if (ok) {
        layout_hidden_matrices(pl, p->mx);
        for (int i = 0; i < p->nmx; i++) {
            p->mx_scale_t[p->mx[i].tensor] = muon_shape_scale(p->mx[i].rows, p->mx[i].cols);
            cost[i] = muon_ns_flops(p->mx[i].rows, p->mx[i].cols, MUON_NS_STEPS);
        }
        ok = layout_lpt_assign(cost, p->nmx, p->dp, p->mx_owner) >= 0;
    }
    if (ok) {
        size_t nb = pl->seg_off[p->L + 1] - pl->seg_off[1];
        p->mu_bytes = layout_muon_bytes(pl, p->o.muon_bf16);
        p->mu_buf = mem_alloc(p->mem, MEM_MOMENTS, p->mu_bytes);
        ok = p->mu_buf != NULL;
        if (ok) memset(p->mu_buf, 0, nb * sizeof(float)), p->mu_scratch = p->mu_buf + nb;
    }
    free(cost);
    return ok;
}

/* Shampoo's blocks, owners, the matrix tensors' marks and the buffers. 0 when out of memory. */
static int shampoo_setup(Par *p) {
    const ParamLayout *pl = p->pl;
    int bs = p->o.shampoo_block, ev = p->o.precond_every, L = p->L;
    p->nsb = layout_shampoo_blocks(pl, bs, ev, p->dp, NULL);
    if (p->nsb < 0) return 0;
    p->sb = calloc((size_t)p->nsb + 1, sizeof *p->sb);
    p->sh_state = calloc((size_t)p->nsb + 1, sizeof *p->sh_state);
    p->mx_scale_t = calloc((size_t)pl->ntensors, sizeof(float));
    if (!p->sb || !p->sh_state || !p->mx_scale_t || layout_shampoo_blocks(pl, bs, ev, p->dp, p->sb) != p->nsb) return 0;
    for (int b = 0; b < p->nsb; b++) p->mx_scale_t[p->sb[b].tensor] = 1.0f; /* marks the tensor as Shampoo's */
    p->mu_bytes = layout_shampoo_bytes(pl, bs, ev, p->dp, p->r);
    p->mu_buf = mem_alloc(p->mem, MEM_MOMENTS, p->mu_bytes);
    if (!p->mu_buf) return 0;
    memset(p->mu_buf, 0, p->mu_bytes);
    float *q = p->mu_buf + (pl->seg_off[L + 1] - pl->seg_off[1]);
    for (int b = 0; b < p->nsb; b++) {
        if (p->sb[b].owner != p->r) continue;
        size_t r = (size_t)p->sb[b].r, c = (size_t)p->sb[b].c;
        p->sh_state[b] = q;
        q += 2 * (r * r + c * c) + r * c;
    }
    size_t head = (size_t)((char *)q - (char *)p->mu_buf); /* the scratch holds doubles: 64-byte aligned */
    p->mu_scratch = (char *)p->mu_buf + head + (64 - head % 64) % 64;
    return 1;
}

int par_muon_owner(const Par *p, int i) { return p->mx && i >= 0 && i < p->nmx ? p->mx_owner[i] : -1; }

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
    p->dp = c->dp, p->r = c->dp_rank, p->zero = o->zero, p->nseg = pl->nseg, p->L = g->w.cfg.n_layer;
    if (p->o.bucket_floats == 0) p->o.bucket_floats = PAR_DEFAULT_BUCKET_FLOATS;
    if (p->o.nt < 1) p->o.nt = 1;
    int ns = p->nseg, ok = 1;
    p->off = calloc((size_t)ns, sizeof(size_t)), p->len = calloc((size_t)ns, sizeof(size_t));
    p->blk = calloc((size_t)ns, sizeof(size_t)), p->soff = calloc((size_t)ns, sizeof(size_t));
    p->seg_req0 = calloc((size_t)ns, sizeof(int)), p->seg_nreq = calloc((size_t)ns, sizeof(int));
    p->seg_gslot = calloc((size_t)ns, sizeof(int));
    p->started = calloc((size_t)ns, sizeof(int));
    if (!p->started || !p->off || !p->len || !p->blk || !p->soff || !p->seg_req0 || !p->seg_nreq || !p->seg_gslot) goto oom;
    size_t S = 0;
    for (int s = 0; s < ns; s++) {
        p->off[s] = pl->seg_off[s], p->len[s] = pl->seg_off[s + 1] - pl->seg_off[s];
        p->blk[s] = p->len[s] / (size_t)p->dp, p->soff[s] = S;
        S += p->blk[s];
    }
    p->S = S;
    seg_sizes(pl, &p->E, &p->X);

    /* Requests: stage 0 all-reduce buckets of <= bucket_floats; otherwise one per segment (the
     * reduce-scatter of stage 1, the parameter all-gather of stages 1-2). */
    for (int s = 0; s < ns; s++) {
        p->seg_req0[s] = p->nreq;
        p->seg_nreq[s] = p->zero == 0 ? (int)((p->len[s] + p->o.bucket_floats - 1) / p->o.bucket_floats) : 1;
        if (p->seg_nreq[s] < 1) p->seg_nreq[s] = 1;
        p->nreq += p->seg_nreq[s];
    }
    if (!(p->req = calloc((size_t)p->nreq, sizeof(CommReq)))) goto oom;

    /* Moments. */
    p->mom_floats = p->zero >= 1 ? S : pl->total;
    p->m = alloc_f(p, MEM_MOMENTS, p->mom_floats, &ok);
    if (o->n_moments >= 2) p->v = alloc_f(p, MEM_MOMENTS, p->mom_floats, &ok);
    if (p->zero >= 2) {
        p->gshard = alloc_f(p, MEM_GRADS, S, &ok);
        p->gb0 = alloc_f(p, MEM_GRADS, p->E, &ok);
        p->gbuf[0] = alloc_f(p, MEM_GRADS, p->X, &ok), p->gbuf[1] = alloc_f(p, MEM_GRADS, p->X, &ok);
    }
    if (p->zero >= 3) {
        /* Mixed precision: the shard is the fp32 master; the gathered buffers and their 2-byte
         * copies are the parameters the model reads. */
        p->pshard = alloc_f(p, g->w.prec != GPT_FP32 ? MEM_MASTER : MEM_PARAMS, S, &ok);
        p->pb0 = alloc_f(p, MEM_PARAMS, p->E, &ok);
        p->pbuf[0] = alloc_f(p, MEM_PARAMS, p->X, &ok), p->pbuf[1] = alloc_f(p, MEM_PARAMS, p->X, &ok);
        if (g->w.prec != GPT_FP32 && ok) {
            p->plb0 = mem_alloc(mem, MEM_PARAMS, p->E * sizeof(uint16_t));
            p->plbuf[0] = mem_alloc(mem, MEM_PARAMS, p->X * sizeof(uint16_t));
            p->plbuf[1] = mem_alloc(mem, MEM_PARAMS, p->X * sizeof(uint16_t));
            ok = p->plb0 && p->plbuf[0] && p->plbuf[1];
            if (ok) {
                gpt_map_lp(g, 0, p->pb0, p->plb0, p->E);
                gpt_map_lp(g, 1, p->pbuf[0], p->plbuf[0], p->X);
                gpt_map_lp(g, 2, p->pbuf[1], p->plbuf[1], p->X);
            }
        }
    }
    size_t tied = layout_pp_tied_floats(pl, c->pp);
    if (tied) {
        p->tied = 1, p->tied_peer = pl->has_embed ? c->pp - 1 : 0;
        p->tied_floats = tied < p->o.bucket_floats ? tied : p->o.bucket_floats;
        p->tied_buf = alloc_f(p, MEM_COMM, p->tied_floats, &ok);
    }
    if (!ok) goto oom;
    p->gslot_seg[0] = p->gslot_seg[1] = p->pslot_seg[0] = p->pslot_seg[1] = -1;

    if (o->muon) {
        if (c->tp > 1 || c->pp > 1) {
            par_free(p);
            return err_set(err, ST_ERR_INPUT, "parallel: Muon needs whole matrices on one dp group: expected tp 1 and pp 1, "
                           "found tp %d pp %d", c->tp, c->pp);
        }
        if (!muon_setup(p)) goto oom;
    }
    if (o->shampoo) {
        if (c->tp > 1 || c->pp > 1) {
            par_free(p);
            return err_set(err, ST_ERR_INPUT, "parallel: Shampoo needs whole matrices on one dp group: expected tp 1 and pp "
                           "1, found tp %d pp %d", c->tp, c->pp);
        }
        if (o->shampoo_block < 1 || o->precond_every < 1) {
            par_free(p);
            return err_set(err, ST_ERR_INPUT, "parallel: Shampoo needs a block >= 1 and an interval >= 1, found %d and %d",
                           o->shampoo_block, o->precond_every);
        }
        if (!shampoo_setup(p)) goto oom;
    }
    /* Optimizer pieces: each tensor intersected with the owned block of its segment. */
    if (p->zero == 0) {
        if (!(p->ranges = calloc((size_t)pl->ntensors, sizeof *p->ranges))) goto oom;
        for (int i = 0; i < pl->ntensors; i++)
            if (!p->mx_scale_t || p->mx_scale_t[i] == 0)
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
            q->mx_scale = p->mx_scale_t ? p->mx_scale_t[i] : 0.0f;
            q->m_off = p->soff[s] + (lo - a);
            q->p_off = p->zero >= 3 ? q->m_off : lo;
            q->g_off = p->zero >= 2 ? q->m_off : lo;
        }
    }
    /* Norm partition: fixed chunks of every owned slice. */
    for (int s = 0; s < ns; s++) p->nchunks += (p->blk[s] + NORM_CHUNK - 1) / NORM_CHUNK;
    p->chunk_seg = calloc(p->nchunks + 1, sizeof(size_t)), p->chunk_start = calloc(p->nchunks + 1, sizeof(size_t));
    p->partials = calloc(p->nchunks + 1, sizeof(double));
    if (!p->chunk_seg || !p->chunk_start || !p->partials) goto oom;
    size_t ci = 0;
    for (int s = 0; s < ns; s++)
        for (size_t x = 0; x < p->blk[s]; x += NORM_CHUNK) p->chunk_seg[ci] = (size_t)s, p->chunk_start[ci++] = x;

    /* Pieces counted elsewhere, subtracted from this rank's norm: replicated tensors on tp ranks
     * other than 0, and the head stage's copy of a tied wte (the embedding stage counts it). */
    int head_copy = p->tied && !pl->has_embed;
    if ((c->tp > 1 && c->tp_rank != 0) || head_copy) {
        if (!(p->repl = calloc((size_t)pl->ntensors, sizeof *p->repl))) goto oom;
        for (int i = 0; i < pl->ntensors; i++) {
            const TensorInfo *t = &pl->tensors[i];
            int twice = (c->tp > 1 && c->tp_rank != 0 && t->split == TP_REPLICATED) || (head_copy && t->id == 0);
            if (!twice) continue;
            int s = t->segment;
            size_t a = p->off[s] + (size_t)p->r * p->blk[s], b = a + p->blk[s];
            size_t lo = t->offset > a ? t->offset : a, hi = t->offset + t->numel < b ? t->offset + t->numel : b;
            if (hi <= lo) continue;
            p->repl[p->nrepl][0] = (size_t)s, p->repl[p->nrepl][1] = lo - a, p->repl[p->nrepl][2] = hi - a;
            p->nrepl++;
        }
    }
    const char *mf = getenv("ST_PAR_TEST_MATRIX_FAULT"), *mr = getenv("ST_PAR_TEST_MATRIX_RESET");
    p->muon_fault = mf && atoi(mf) == 1;
    p->muon_reset = mr ? atoi(mr) : 0;
    const char *kill = getenv("ST_PAR_TEST_KILL");
    if (!kill || sscanf(kill, "%d:%ld", &p->kill_rank, &p->kill_step) != 2) p->kill_step = 0;
    const char *fault = getenv("ST_PAR_TEST_GRAD_SCALE");
    p->grad_fault = fault ? strtof(fault, NULL) : 0.0f;
    const char *tpf = getenv("ST_PAR_TEST_TP_FAULT");
    p->tp_fault = tpf && atoi(tpf) == 1;
    g->hooks.ctx = p;
    g->hooks.before_forward = h_before_forward;
    g->hooks.before_backward = h_before_backward;
    g->hooks.grads_ready = h_grads_ready;
    g->hooks.tp_allreduce = h_tp_allreduce;
    g->hooks.tp_allgather = h_tp_allgather;
    g->hooks.tp_reduce_scatter = h_tp_reduce_scatter;
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
    free(p->started);
    mem_free(ms, MEM_COMM, p->tied_buf, p->tied_floats * sizeof(float));
    mem_free(ms, MEM_MOMENTS, p->m, p->mom_floats * sizeof(float));
    mem_free(ms, MEM_MOMENTS, p->v, p->mom_floats * sizeof(float));
    mem_free(ms, MEM_GRADS, p->gshard, p->S * sizeof(float));
    mem_free(ms, MEM_GRADS, p->gb0, p->E * sizeof(float));
    mem_free(ms, p->g && p->g->w.prec != GPT_FP32 ? MEM_MASTER : MEM_PARAMS, p->pshard, p->S * sizeof(float));
    mem_free(ms, MEM_PARAMS, p->pb0, p->E * sizeof(float));
    mem_free(ms, MEM_PARAMS, p->plb0, p->E * sizeof(uint16_t));
    for (int a = 0; a < 2; a++) {
        mem_free(ms, MEM_GRADS, p->gbuf[a], p->X * sizeof(float));
        mem_free(ms, MEM_PARAMS, p->pbuf[a], p->X * sizeof(float));
        mem_free(ms, MEM_PARAMS, p->plbuf[a], p->X * sizeof(uint16_t));
    }
    if (p->g && p->g->hooks.ctx == p) memset(&p->g->hooks, 0, sizeof p->g->hooks);
    free(p->off), free(p->len), free(p->blk), free(p->soff), free(p->seg_req0), free(p->seg_nreq);
    free(p->seg_gslot), free(p->req), free(p->pieces), free(p->ranges);
    free(p->chunk_seg), free(p->chunk_start), free(p->partials), free(p->repl);
    mem_free(ms, MEM_MOMENTS, p->mu_buf, p->mu_bytes);
    free(p->mx), free(p->mx_owner), free(p->mx_scale_t), free(p->mx_req), free(p->sb), free(p->sh_state);
    free(p);
}

float *par_moment(Par *p, int which) { return which == 0 ? p->m : p->v; }

Status par_hook_status(const Par *p, Err *err) {
    if (p->hook_st != ST_OK && err) *err = p->hook_err;
    return p->hook_st;
}

/* ================================================================ the step */

void par_step_begin(Par *p, int k, long step) {
    p->k = k, p->in_step = 1, p->j = 0, p->noise_sumsq = 0;
    p->c->step = step;
    /* Stage 0: the first micro-batch writes the gradients (the all-reduce leaves padding at zero).
     * Stage 1's in-place reduce-scatter may leave partial sums outside the owned block, so its
     * buffer, like stage 2's shard, is zeroed. */
    memset(p->started, 0, (size_t)p->nseg * sizeof(int));
    if (p->zero >= 2) memset(p->gshard, 0, p->S * sizeof(float));
    else if (p->zero == 1 || p->c->pp > 1) memset(p->g->d.grads, 0, p->pl->total * sizeof(float));
    else gpt_overwrite_grads(p->g); /* (a pipeline's several micro-batches in flight add from zero) */
}

void par_micro_begin(Par *p, int j) {
    p->j = j;
    p->last = j == p->k - 1;
}

/* The tied wte of a pipeline's two ends: each sends its gradient part to the other and adds the
 * other's (a + b == b + a in floating point: both copies get bit-identical sums), chunk by chunk. */
static Status tied_exchange(Par *p, Err *err) {
    const char *fault = getenv("ST_PAR_TEST_PP_FAULT"); /* test hook: =1 skips the exchange */
    if (fault && atoi(fault) == 1) return ST_OK;
    const TensorInfo *t = &p->pl->tensors[layout_find_id(p->pl, 0)];
    float *g = p->g->d.grads + t->offset;
    Status st = ST_OK;
    for (size_t done = 0; done < t->numel && st == ST_OK; done += p->tied_floats) {
        size_t n = t->numel - done < p->tied_floats ? t->numel - done : p->tied_floats;
        CommReq rq[2];
        memset(rq, 0, sizeof rq);
        st = comm_pp_irecv_f32(p->c, p->tied_buf, n, p->tied_peer, PAR_TIED_TAG, &rq[0], err);
        if (st == ST_OK) st = comm_pp_isend_f32(p->c, g + done, n, p->tied_peer, PAR_TIED_TAG, &rq[1], err);
        if (st == ST_OK) st = comm_wait_all(rq, 2, p->c->timeout_s, "tied wte gradient", p->c->step, err);
        if (st == ST_OK) add_into(g + done, p->tied_buf, n, p->o.nt);
    }
    return st;
}

Status par_grads_finish(Par *p, Err *err) {
    Status st;
    if (p->tied && p->zero <= 1 && (st = tied_exchange(p, err)) != ST_OK) return st;
    /* Segments not started from the hooks: without overlap all of them; in a pipeline the tied wte
     * and a head stage's embedding segment (no embedding backward runs there). */
    if (p->zero <= 1)
        for (int s = p->nseg - 1; s >= 0; s--) start_seg_grads(p, s);
    if (p->zero <= 1) {
        if ((st = comm_wait_all(p->req, p->nreq, p->c->timeout_s, "grad bucket", p->c->step, err)) != ST_OK) return st;
    } else {
        for (int a = 0; a < 2; a++)
            if ((st = gslot_finish(p, a, err)) != ST_OK) return st;
        if ((st = g0_finish(p, err)) != ST_OK) return st;
    }
    p->in_step = 0;
    if (p->grad_fault != 0.0f) { /* test hook: every rank's reduced gradients scaled alike */
        float *G = p->zero >= 2 ? p->gshard : p->g->d.grads;
        size_t n = p->zero >= 2 ? p->S : p->pl->total;
        for (size_t i = 0; i < n; i++) G[i] *= p->grad_fault;
    }
    return par_hook_status(p, err);
}

static const float *owned_grad(Par *p, int s) {
    return p->zero >= 2 ? p->gshard + p->soff[s] : p->g->d.grads + p->off[s] + (size_t)p->r * p->blk[s];
}

Status par_grad_norm(Par *p, double *norm, Err *err) {
    long nc = (long)p->nchunks;
#pragma omp parallel for schedule(static) num_threads(p->o.nt)
    for (long ci = 0; ci < nc; ci++) {
        int s = (int)p->chunk_seg[ci];
        size_t x0 = p->chunk_start[ci], x1 = x0 + NORM_CHUNK < p->blk[s] ? x0 + NORM_CHUNK : p->blk[s];
        const float *gr = owned_grad(p, s);
        double acc = 0;
        for (size_t x = x0; x < x1; x++) acc += (double)gr[x] * gr[x];
        p->partials[ci] = acc;
    }
    double local = 0;
    for (size_t ci = 0; ci < p->nchunks; ci++) local += p->partials[ci];
    for (int i = 0; i < p->nrepl; i++) { /* tp rank > 0: the replicated tensors count on rank 0 */
        const float *gr = owned_grad(p, (int)p->repl[i][0]);
        double acc = 0;
        for (size_t x = p->repl[i][1]; x < p->repl[i][2]; x++) acc += (double)gr[x] * gr[x];
        local -= acc;
    }
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

/* Muon's matrices (par_optim_step's steps 1-4). */
static Status muon_step(Par *p, const OptimConfig *oc, float lr, float gs, Err *err) {
    const ParamLayout *pl = p->pl;
    float *U = p->mu_buf - p->off[1]; /* flat coordinates */
    const float beta = oc->muon_momentum;
    const int nt = p->o.nt;
    Status st = ST_OK;
    if (p->muon_reset) { /* test hook: the momentum of every matrix lost */
        p->muon_reset = 0;
        for (int i = 0; i < pl->ntensors && p->zero == 0; i++)
            if (p->mx_scale_t[i] != 0) memset(p->m + pl->tensors[i].offset, 0, pl->tensors[i].numel * sizeof(float));
        for (int i = 0; i < p->npieces; i++)
            if (p->pieces[i].mx_scale != 0) memset(p->m + p->pieces[i].m_off, 0, p->pieces[i].n * sizeof(float));
    }
    /* 1. momentum and the Nesterov input of this rank's part of each matrix */
    if (p->zero == 0) {
        for (int i = 0; i < pl->ntensors; i++) {
            const TensorInfo *t = &pl->tensors[i];
            if (p->mx_scale_t[i] != 0)
                muon_momentum(p->m + t->offset, p->g->d.grads + t->offset, U + t->offset, t->numel, beta, gs, nt);
        }
    } else {
        const float *G = p->zero >= 2 ? p->gshard : p->g->d.grads;
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
    for (int i = 0; i < p->nmx; i++) {
        const LayoutMatrix *x = &p->mx[i];
        if (p->mx_owner[i] == p->r)
            muon_ns(&mg, U + x->offset, U + x->offset, x->rows, x->cols, p->mu_scratch, nt);
    }
    if ((st = mm_take_error(err)) != ST_OK) return st;
    /* 3. every matrix from its owner */
    if (p->dp > 1 && !p->muon_fault) {
        for (int i = 0; i < p->nmx && st == ST_OK; i++)
            st = comm_ibcast_f32(p->c, U + p->mx[i].offset, (size_t)p->mx[i].rows * p->mx[i].cols, p->mx_owner[i],
                                 &p->mx_req[i], err);
        if (st == ST_OK) st = comm_wait_all(p->mx_req, p->nmx, p->c->timeout_s, "muon update", p->c->step, err);
        if (st != ST_OK) return st;
    }
    /* 4. this rank's part of the parameters */
    if (p->zero == 0) {
        OptimLowp lk = p->g->w.prec == GPT_FP16 ? OPTIM_LOWP_FP16 : p->g->w.prec == GPT_BF16 ? OPTIM_LOWP_BF16 : OPTIM_LOWP_NONE;
        for (int i = 0; i < pl->ntensors; i++) {
            const TensorInfo *t = &pl->tensors[i];
            if (p->mx_scale_t[i] == 0) continue;
            uint16_t *lp = p->g->w.params_lp ? p->g->w.params_lp + t->offset : NULL;
            muon_apply(p->g->w.params + t->offset, U + t->offset, t->numel, lr, t->decay ? oc->weight_decay : 0.0f,
                       p->mx_scale_t[i], lp, lk, nt);
        }
    } else {
        float *P = p->zero >= 3 ? p->pshard : p->g->w.params;
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
    const float *G0 = p->zero >= 2 ? p->gshard : p->g->d.grads;
    int n = p->zero == 0 ? pl->ntensors : p->npieces;
    for (int k = 0; k < n; k++) {
        size_t mo, go, fo, len;
        if (p->zero == 0) {
            const TensorInfo *t = &pl->tensors[k];
            if (p->mx_scale_t[k] == 0) continue;
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
    float *U = p->mu_buf - p->off[1];
    const float bc1 = 1.0f - powf(oc->beta1, (float)step), bc2 = 1.0f - powf(oc->beta2, (float)step);
    const int nt = p->o.nt;
    Status st;
    if (p->muon_reset) { /* test hook: the matrices' state lost */
        int n = p->muon_reset == 1 ? (p->zero == 0 ? pl->ntensors : p->npieces) : 0;
        p->muon_reset = 0;
        for (int k = 0; k < n; k++) {
            int mine = p->zero == 0 ? p->mx_scale_t[k] != 0 : p->pieces[k].mx_scale != 0;
            size_t mo = p->zero == 0 ? pl->tensors[k].offset : p->pieces[k].m_off;
            size_t len = p->zero == 0 ? pl->tensors[k].numel : p->pieces[k].n;
            if (mine) memset(p->m + mo, 0, len * sizeof(float)), memset(p->v + mo, 0, len * sizeof(float));
        }
        for (int b = 0; b < p->nsb; b++)
            if (p->sh_state[b])
                memset(p->sh_state[b], 0, shampoo_block_state_floats(p->sb[b].r, p->sb[b].c) * sizeof(float));
    }
    /* 1. the gradient: statistics, and the roots when due */
    if ((st = shampoo_input(p, U, 0, oc, gs, bc1, bc2, err)) != ST_OK) return st;
    for (int b = 0; b < p->nsb; b++) {
        const LayoutBlock *x = &p->sb[b];
        if (!p->sh_state[b]) continue;
        float *L = p->sh_state[b], *R = L + (size_t)x->r * x->r, *PL = R + (size_t)x->c * x->c, *PR = PL + (size_t)x->r * x->r;
        shampoo_stats(L, R, U + x->offset, x->r, x->c, x->ld, oc->beta2, mm_sgemm, nt);
        if ((step - 1) % p->o.precond_every == 0) {
            if ((st = shampoo_root(PL, L, x->r, p->o.shampoo_eps, mm_sgemm, p->mu_scratch, err)) != ST_OK ||
                (st = shampoo_root(PR, R, x->c, p->o.shampoo_eps, mm_sgemm, p->mu_scratch, err)) != ST_OK)
                return st;
        }
    }
    /* 2. m̂: the preconditioned direction D of each owned block */
    if ((st = shampoo_input(p, U, 1, oc, gs, bc1, bc2, err)) != ST_OK) return st;
    for (int b = 0; b < p->nsb; b++) {
        const LayoutBlock *x = &p->sb[b];
        if (!p->sh_state[b]) continue;
        size_t rr = (size_t)x->r * x->r, cc = (size_t)x->c * x->c;
        float *PL = p->sh_state[b] + rr + cc, *PR = PL + rr, *D = PR + cc;
        shampoo_precondition(D, PL, U + x->offset, x->ld, PR, x->r, x->c, mm_sgemm, p->mu_scratch);
    }
    if ((st = mm_take_error(err)) != ST_OK) return st;
    /* 3. Adam's update: each owned block's norm, then the grafted result into a zeroed buffer */
    if ((st = shampoo_input(p, U, 2, oc, gs, bc1, bc2, err)) != ST_OK) return st;
    double *a2 = calloc((size_t)p->nsb + 1, sizeof(double));
    if (!a2) return err_set(err, ST_ERR_RUNTIME, "out of memory (Shampoo)");
    for (int b = 0; b < p->nsb; b++) {
        const LayoutBlock *x = &p->sb[b];
        if (!p->sh_state[b]) continue;
        double s = 0;
        for (int i = 0; i < x->r; i++)
            for (int j = 0; j < x->c; j++) {
                double a = U[x->offset + (size_t)i * x->ld + j];
                s += a * a;
            }
        a2[b] = s;
    }
    size_t nb = pl->seg_off[p->L + 1] - pl->seg_off[1];
    if (p->dp > 1) memset(p->mu_buf, 0, nb * sizeof(float));
    for (int b = 0; b < p->nsb; b++) {
        const LayoutBlock *x = &p->sb[b];
        if (!p->sh_state[b]) continue;
        size_t rr = (size_t)x->r * x->r, cc = (size_t)x->c * x->c;
        const float *D = p->sh_state[b] + 2 * (rr + cc);
        shampoo_graft(U + x->offset, x->ld, D, x->r, x->c, a2[b], nt);
    }
    free(a2);
    /* 4. every block from its owner (exact: the others add zeros), then this rank's part applied */
    st = ST_OK;
    if (p->dp > 1 && !p->muon_fault)
        for (int s = 1; s <= p->L && st == ST_OK; s++)
            if (p->len[s]) st = comm_allreduce_f32(p->c, U + p->off[s], U + p->off[s], p->len[s], err);
    if (st != ST_OK) return st;
    int n = p->zero == 0 ? pl->ntensors : p->npieces;
    float *P = p->zero >= 3 ? p->pshard : p->g->w.params;
    OptimLowp lk = p->zero == 0 && p->g->w.prec == GPT_FP16   ? OPTIM_LOWP_FP16
                   : p->zero == 0 && p->g->w.prec == GPT_BF16 ? OPTIM_LOWP_BF16
                                                              : OPTIM_LOWP_NONE;
    for (int k = 0; k < n; k++) {
        size_t po, fo, len;
        int decay;
        if (p->zero == 0) {
            const TensorInfo *t = &pl->tensors[k];
            if (p->mx_scale_t[k] == 0) continue;
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

Status par_optim_step(Par *p, const OptimConfig *oc, long step, float lr, float matrix_lr, float grad_scale, Err *err) {
    if (p->muon_reset && oc->kind == OPT_SOPHIA) { /* test hook: Sophia's Hessian EMA lost */
        p->muon_reset = 0;
        for (int i = 0; i < p->nranges; i++) memset(p->v + p->ranges[i].offset, 0, p->ranges[i].n * sizeof(float));
        for (int i = 0; i < p->npieces; i++) memset(p->v + p->pieces[i].m_off, 0, p->pieces[i].n * sizeof(float));
    }
    if (p->zero == 0) { /* mixed precision: the working copy follows the master in the same pass */
        OptimLowp lk = p->g->w.prec == GPT_FP16 ? OPTIM_LOWP_FP16 : p->g->w.prec == GPT_BF16 ? OPTIM_LOWP_BF16 : OPTIM_LOWP_NONE;
        optim_step_lowp(oc, p->g->w.params, p->g->d.grads, p->m, p->v, p->ranges, p->nranges, step, lr, grad_scale,
                        p->g->w.params_lp, lk, p->o.nt);
    } else {
        float *P = p->zero >= 3 ? p->pshard : p->g->w.params;
        const float *G = p->zero >= 2 ? p->gshard : p->g->d.grads;
        for (int i = 0; i < p->npieces; i++) {
            const Piece *q = &p->pieces[i];
            if (q->mx_scale != 0) continue; /* Muon's */
            OptimRange rg = {0, q->n, q->decay, q->lr_mult};
            optim_step(oc, P + q->p_off, G + q->g_off, p->m + q->m_off, p->v ? p->v + q->m_off : NULL, &rg, 1, step, lr,
                       grad_scale, p->o.nt);
        }
    }
    if (p->nsb) return shampoo_step(p, oc, step, lr, grad_scale, err);
    return p->nmx ? muon_step(p, oc, matrix_lr, grad_scale, err) : ST_OK;
}

void par_hess_update(Par *p, const OptimConfig *oc, float scale) {
    if (p->zero == 0) {
        optim_hess_update(oc, p->v, p->g->d.grads, p->ranges, p->nranges, scale, p->o.nt);
        return;
    }
    const float *G = p->zero >= 2 ? p->gshard : p->g->d.grads;
    for (int i = 0; i < p->npieces; i++) {
        const Piece *q = &p->pieces[i];
        OptimRange rg = {0, q->n, q->decay, q->lr_mult};
        optim_hess_update(oc, p->v + q->m_off, G + q->g_off, &rg, 1, scale, p->o.nt);
    }
}

Status par_params_sync(Par *p, Err *err) {
    Status st = ST_OK;
    if (p->zero == 1 || p->zero == 2) {
        float *P = p->g->w.params;
        for (int s = 0; s < p->nseg && st == ST_OK; s++)
            if (p->blk[s]) st = comm_iallgather_f32(p->c, P + p->off[s] + (size_t)p->r * p->blk[s], P + p->off[s], p->blk[s],
                                     &p->req[p->seg_req0[s]], err);
        if (st == ST_OK) st = comm_wait_all(p->req, p->nreq, p->c->timeout_s, "param all-gather", p->c->step, err);
        if (st == ST_OK) gpt_sync_lp(p->g); /* mixed precision: the working copy of the gathered master */
    } else if (p->zero == 3) {
        /* The shard changed: every gathered copy is stale. */
        for (int a = 0; a < 2; a++) {
            if (p->pslot_req[a].active && st == ST_OK)
                st = comm_wait(&p->pslot_req[a], p->c->timeout_s, "param all-gather", p->c->step, err);
            p->pslot_seg[a] = -1;
        }
        if (p->p0_req.active && st == ST_OK)
            st = comm_wait(&p->p0_req, p->c->timeout_s, "param all-gather", p->c->step, err);
        p->p0_valid = 0;
    }
    return st;
}

/* ================================================================ state in and out */

size_t par_extra_state_floats(const Par *p) {
    size_t n = 0;
    for (int b = 0; b < p->nsb; b++) n += shampoo_block_state_floats(p->sb[b].r, p->sb[b].c);
    return n;
}

const char *par_extra_state_name(const Par *p) { return p->nsb ? "shampoo.blocks" : NULL; }

Status par_get_extra_state(Par *p, float *buf, Err *err) {
    size_t n = par_extra_state_floats(p), o = 0;
    if (!n) return ST_OK;
    memset(buf, 0, n * sizeof(float));
    for (int b = 0; b < p->nsb; b++) {
        size_t k = shampoo_block_state_floats(p->sb[b].r, p->sb[b].c);
        if (p->sh_state[b]) memcpy(buf + o, p->sh_state[b], k * sizeof(float));
        o += k;
    }
    return p->dp > 1 ? comm_allreduce_f32(p->c, buf, buf, n, err) : ST_OK;
}

void par_set_extra_state(Par *p, const float *buf) {
    size_t o = 0;
    for (int b = 0; b < p->nsb; b++) {
        size_t k = shampoo_block_state_floats(p->sb[b].r, p->sb[b].c);
        if (p->sh_state[b]) memcpy(p->sh_state[b], buf + o, k * sizeof(float));
        o += k;
    }
}

static void copy_owned(Par *p, float *shard, const float *full) {
    for (int s = 0; s < p->nseg; s++)
        memcpy(shard + p->soff[s], full + p->off[s] + (size_t)p->r * p->blk[s], p->blk[s] * sizeof(float));
}

void par_set_full(Par *p, const float *params, const float *m, const float *v) {
    size_t T = p->pl->total;
    if (params) {
        if (p->zero >= 3) copy_owned(p, p->pshard, params);
        else memcpy(p->g->w.params, params, T * sizeof(float)), gpt_sync_lp(p->g);
    }
    float *mine[2] = {p->m, p->v};
    const float *src[2] = {m, v};
    for (int b = 0; b < 2; b++) {
        if (!mine[b]) continue;
        if (!src[b]) memset(mine[b], 0, p->mom_floats * sizeof(float));
        else if (p->zero >= 1) copy_owned(p, mine[b], src[b]);
        else memcpy(mine[b], src[b], T * sizeof(float));
    }
    p->p0_valid = 0, p->pslot_seg[0] = p->pslot_seg[1] = -1;
}

/* full gets every rank's blocks of a shard-ordered buffer (all-gather per segment, in place). */
static Status gather_shard(Par *p, const float *shard, float *full, Err *err) {
    Status st = ST_OK;
    for (int s = 0; s < p->nseg && st == ST_OK; s++) {
        if (!p->blk[s]) continue;
        float *mine = full + p->off[s] + (size_t)p->r * p->blk[s];
        memcpy(mine, shard + p->soff[s], p->blk[s] * sizeof(float));
        st = comm_allgather_f32(p->c, mine, full + p->off[s], p->blk[s], err);
    }
    return st;
}

Status par_get_full(Par *p, float *params, float *m, float *v, Err *err) {
    size_t T = p->pl->total;
    Status st = ST_OK;
    if (params) {
        if (p->zero >= 3) st = gather_shard(p, p->pshard, params, err);
        else memcpy(params, p->g->w.params, T * sizeof(float));
    }
    float *dst[2] = {m, v}, *mine[2] = {p->m, p->v};
    for (int b = 0; b < 2 && st == ST_OK; b++) {
        if (!dst[b]) continue;
        if (!mine[b]) memset(dst[b], 0, T * sizeof(float));
        else if (p->zero >= 1) st = gather_shard(p, mine[b], dst[b], err);
        else memcpy(dst[b], mine[b], T * sizeof(float));
    }
    return st;
}
