/* pp.c — the step's micro-batch loop: walks this rank's ops of a schedule (pp.h), over the stage
 * API and point-to-point messages in a pipeline, over the whole model (gpt_forward, gpt_backward)
 * in the trivial schedule of one stage. */
#include "parallel/pp.h"

#include <stdlib.h>
#include <string.h>

#include "core/mem.h"
#include "core/timer.h"

struct PpRun {
    Comm *c;
    Gpt *g;
    Par *par;
    const PipeSchedule *s;
    int whole;           /* pp 1: the whole model, F = gpt_forward, B = gpt_backward, no messages */
    int P, v, S, r;      /* ranks, chunks per rank, virtual stages, this pp rank */
    int nslots;
    int *slot_of;        /* [m·v] slot of (micro-batch, chunk), -1 if none */
    int *busy;           /* [nslots] 1 from a forward to its backward */
    CommReq *sends;      /* [nslots] the slot's activation send (from its last block's output) */
    /* Input gradients on their way back: buffers reused once their send completed, a new one
     * allocated (MEM_COMM) only when every one is still in flight, so that no op ever waits for a
     * send, which could wait for a peer that waits for this rank. */
    float **gbuf;
    CommReq *greq;
    int ngbuf, capgbuf;
    size_t gfloats;
    double sent;
};

static int tag_of(const PpRun *pr, int mb, int vs, int dir) { return ((mb * pr->S + vs) * 2 + dir) & 0x1fffffff; }

static void pp_progress(void *ctx) {
    PpRun *pr = ctx;
    for (int k = 0; k < pr->nslots; k++)
        if (pr->sends[k].active) comm_test(&pr->sends[k]);
    for (int k = 0; k < pr->ngbuf; k++)
        if (pr->greq[k].active) comm_test(&pr->greq[k]);
}

/* A gradient send buffer whose last send completed (a new one if none). NULL when out of memory. */
static float *grad_buffer(PpRun *pr, CommReq **req) {
    for (int k = 0; k < pr->ngbuf; k++)
        if (comm_test(&pr->greq[k])) return *req = &pr->greq[k], pr->gbuf[k];
    if (pr->ngbuf == pr->capgbuf) {
        int cap = pr->capgbuf ? 2 * pr->capgbuf : 4;
        float **b = realloc(pr->gbuf, (size_t)cap * sizeof *b);
        if (b) pr->gbuf = b;
        CommReq *q = realloc(pr->greq, (size_t)cap * sizeof *q);
        if (q) pr->greq = q;
        if (!b || !q) return NULL;
        pr->capgbuf = cap;
    }
    float *buf = mem_alloc(pr->g->mem, MEM_COMM, pr->gfloats * sizeof(float));
    if (!buf) return NULL;
    memset(&pr->greq[pr->ngbuf], 0, sizeof pr->greq[0]);
    pr->gbuf[pr->ngbuf] = buf;
    *req = &pr->greq[pr->ngbuf++];
    return buf;
}

Status pp_init(PpRun **out, Comm *c, Gpt *g, Par *par, const PipeSchedule *s, Err *err) {
    *out = NULL;
    if (s->split_backward != g->s.split_backward)
        return err_set(err, ST_ERR_INPUT, "--pp-schedule %s: the schedule %s weight-gradient passes, the model was "
                       "built %s a split backward", sched_type_name(s->type), s->split_backward ? "has" : "has no",
                       g->s.split_backward ? "with" : "without");
    if (s->p != c->pp)
        return err_set(err, ST_ERR_INPUT, "pipeline: the schedule has %d ranks, the grid --pp %d", s->p, c->pp);
    if (c->pp == 1) { /* one process's schedule: nothing to send, no slots */
        if (s->v != 1 || s->split_backward)
            return err_set(err, ST_ERR_INPUT, "pipeline: one stage runs F and B of the whole model, the schedule has %d "
                           "chunks%s", s->v, s->split_backward ? " and weight passes" : "");
        PpRun *pr = calloc(1, sizeof *pr);
        if (!pr) return err_set(err, ST_ERR_RUNTIME, "out of memory (pipeline state)");
        pr->c = c, pr->g = g, pr->par = par, pr->s = s, pr->whole = 1;
        pr->P = 1, pr->v = 1, pr->S = 1, pr->r = 0;
        *out = pr;
        return ST_OK;
    }
    const StageBlocks *sb = &g->w.layout.stage;
    if (sb->n != s->v)
        return err_set(err, ST_ERR_INPUT, "pipeline: the schedule has %d chunks per rank, the model holds %d", s->v, sb->n);
    PpRun *pr = calloc(1, sizeof *pr);
    if (!pr) return err_set(err, ST_ERR_RUNTIME, "out of memory (pipeline state)");
    pr->c = c, pr->g = g, pr->par = par, pr->s = s;
    pr->P = s->p, pr->v = s->v, pr->S = s->p * s->v, pr->r = c->pp_rank, pr->nslots = g->s.nslots;
    size_t N = (size_t)g->s.B * g->s.T;
    pr->gfloats = (g->s.sp ? N / (size_t)g->s.tp : N) * (size_t)g->w.cfg.n_embd;
    pr->slot_of = malloc((size_t)s->m * s->v * sizeof *pr->slot_of);
    pr->busy = calloc((size_t)pr->nslots, sizeof *pr->busy);
    pr->sends = calloc((size_t)pr->nslots, sizeof *pr->sends);
    if (!pr->slot_of || !pr->busy || !pr->sends) {
        pp_free(pr);
        return err_set(err, ST_ERR_RUNTIME, "out of memory (pipeline state)");
    }
    par_set_progress(par, pp_progress, pr);
    *out = pr;
    return ST_OK;
}

void pp_free(PpRun *pr) {
    if (!pr) return;
    if (pr->par && !pr->whole) par_set_progress(pr->par, NULL, NULL);
    for (int k = 0; k < pr->ngbuf; k++) mem_free(pr->g->mem, MEM_COMM, pr->gbuf[k], pr->gfloats * sizeof(float));
    free(pr->gbuf), free(pr->greq);
    free(pr->slot_of), free(pr->busy), free(pr->sends);
    free(pr);
}

/* Waits for request q, adding the time to the idle sum. */
static Status wait_idle(PpRun *pr, CommReq *q, const char *what, PpStats *st, Err *err) {
    double t0 = timer_ms();
    Status s = comm_wait(q, pr->c->timeout_s, what, pr->c->step, err);
    st->idle_ms += timer_ms() - t0;
    return s;
}

/* A free slot whose sends are done (waiting for the oldest free one's if none is). */
static Status take_slot(PpRun *pr, int *slot, PpStats *st, Err *err) {
    int pick = -1;
    for (int k = 0; k < pr->nslots && pick < 0; k++)
        if (!pr->busy[k]) pick = k;
    if (pick < 0)
        return err_set(err, ST_ERR_RUNTIME, "pipeline: every one of the %d activation slots is in use (the schedule "
                       "holds more micro-batches in flight than planned)", pr->nslots);
    /* Its activation send completed: the next stage received it before the gradient came back. */
    Status s = wait_idle(pr, &pr->sends[pick], "pipeline send", st, err);
    if (s != ST_OK) return s;
    pr->busy[pick] = 1;
    *slot = pick;
    return ST_OK;
}

/* An op of this rank took dt ms: its kind's and its chunk's totals. */
static void op_done(PpStats *st, PipeOpKind k, int chunk, double dt) {
    double *ms[3] = {&st->f_ms, &st->b_ms, &st->w_ms};
    int *n[3] = {&st->nf, &st->nb, &st->nw};
    st->busy_ms += dt, *ms[k] += dt, (*n[k])++;
    st->chunk_ms[k][chunk] += dt, st->chunk_ops[k][chunk]++;
}

/* The trivial schedule of one stage (pp 1): F(j) is micro-batch j's forward through the whole
 * model (par_micro_begin first, so the hooks know the micro-batch; the sampled labels when given),
 * B(j) its backward; the loss sums add in op order. */
static Status whole_step(PpRun *pr, const int32_t *inp, const int32_t *tgt, int B, int T, float dscale,
                         const uint64_t *drop, const PpLabels *labels, double *loss_sum, PpStats *st, Err *err) {
    const PipeSchedule *s = pr->s;
    Gpt *g = pr->g;
    size_t N = (size_t)B * T;
    for (int i = 0; i < s->n[0]; i++) {
        SchedOp op = s->ops[0][i];
        size_t off = (size_t)op.mb * N;
        double t0 = timer_ms();
        if (op.kind == SCHED_F) {
            par_micro_begin(pr->par, op.mb);
            if (labels) gpt_set_label_sampling(g, labels->u + off, labels->y + off);
            *loss_sum += gpt_forward(g, inp + off, tgt + off, B, T, dscale, 1, drop[op.mb]);
            op_done(st, SCHED_F, 0, timer_ms() - t0);
        } else if (op.kind == SCHED_B) {
            gpt_backward(g);
            op_done(st, SCHED_B, 0, timer_ms() - t0);
        } else {
            return err_set(err, ST_ERR_RUNTIME, "pipeline: a weight pass in the schedule of the whole model");
        }
    }
    if (labels) gpt_set_label_sampling(g, NULL, NULL);
    return ST_OK;
}

Status pp_step(PpRun *pr, const int32_t *inp, const int32_t *tgt, int B, int T, float dscale, const uint64_t *drop,
               const PpLabels *labels, double *loss_sum, PpStats *st, Err *err) {
    const PipeSchedule *s = pr->s;
    Gpt *g = pr->g;
    memset(st, 0, sizeof *st);
    *loss_sum = 0;
    if (pr->whole) return whole_step(pr, inp, tgt, B, T, dscale, drop, labels, loss_sum, st, err);
    if (labels) return err_set(err, ST_ERR_INPUT, "pipeline: sampled labels need the whole model (pp 1)");
    for (int i = 0; i < s->m * s->v; i++) pr->slot_of[i] = -1;
    size_t N = (size_t)B * T, Nl = g->s.sp ? N / (size_t)g->s.tp : N, n = Nl * (size_t)g->w.cfg.n_embd;
    Status rc = ST_OK;
    for (int i = 0; i < s->n[pr->r] && rc == ST_OK; i++) {
        SchedOp op = s->ops[pr->r][i];
        int vs = op.chunk * pr->P + pr->r, key = op.mb * s->v + op.chunk;
        const int32_t *x = inp + (size_t)op.mb * N, *y = tgt + (size_t)op.mb * N;
        CommReq rq;
        memset(&rq, 0, sizeof rq);
        if (op.kind == SCHED_F) {
            int slot = -1;
            if ((rc = take_slot(pr, &slot, st, err)) != ST_OK) break;
            pr->slot_of[key] = slot;
            if (vs > 0) {
                rc = comm_pp_irecv_f32(pr->c, gpt_stage_input(g, slot), n, (vs - 1) % pr->P, tag_of(pr, op.mb, vs, 0),
                                       &rq, err);
                if (rc == ST_OK) rc = wait_idle(pr, &rq, "pipeline activations", st, err);
                if (rc != ST_OK) break;
            }
            double t0 = timer_ms();
            double ls = gpt_forward_stage(g, slot, op.chunk, x, y, B, T, dscale, 1, drop[op.mb]);
            op_done(st, SCHED_F, op.chunk, timer_ms() - t0);
            if (vs == pr->S - 1) *loss_sum += ls;
            else {
                rc = comm_pp_isend_f32(pr->c, gpt_stage_output(g, slot, op.chunk), n, (vs + 1) % pr->P,
                                       tag_of(pr, op.mb, vs + 1, 0), &pr->sends[slot], err);
                pr->sent += (double)n * sizeof(float), st->sent_bytes += (double)n * sizeof(float);
            }
        } else if (op.kind == SCHED_B) {
            int slot = pr->slot_of[key];
            if (slot < 0) {
                rc = err_set(err, ST_ERR_RUNTIME, "pipeline: backward of micro-batch %d chunk %d before its forward",
                             op.mb, op.chunk);
                break;
            }
            const float *dout = NULL;
            if (vs < pr->S - 1) {
                rc = comm_pp_irecv_f32(pr->c, g->s.pp_gin, n, (vs + 1) % pr->P, tag_of(pr, op.mb, vs, 1), &rq, err);
                if (rc == ST_OK) rc = wait_idle(pr, &rq, "pipeline gradients", st, err);
                if (rc != ST_OK) break;
                dout = g->s.pp_gin;
            }
            par_micro_begin(pr->par, op.mb);
            double t0 = timer_ms();
            gpt_backward_stage(g, slot, op.chunk, dout);
            op_done(st, SCHED_B, op.chunk, timer_ms() - t0);
            if (vs > 0) {
                CommReq *q = NULL;
                float *buf = grad_buffer(pr, &q);
                if (!buf) {
                    rc = err_set(err, ST_ERR_RUNTIME, "out of memory (pipeline gradient buffer)");
                    break;
                }
                memcpy(buf, gpt_stage_dinput(g), n * sizeof(float));
                rc = comm_pp_isend_f32(pr->c, buf, n, (vs - 1) % pr->P, tag_of(pr, op.mb, vs - 1, 1), q, err);
                pr->sent += (double)n * sizeof(float), st->sent_bytes += (double)n * sizeof(float);
            }
            if (!s->split_backward) pr->busy[slot] = 0, pr->slot_of[key] = -1;
        } else { /* W: the weight GEMMs of an earlier B; the slot is free after them */
            int slot = pr->slot_of[key];
            if (slot < 0) {
                rc = err_set(err, ST_ERR_RUNTIME, "pipeline: weight pass of micro-batch %d chunk %d before its forward",
                             op.mb, op.chunk);
                break;
            }
            par_micro_begin(pr->par, op.mb);
            double t0 = timer_ms();
            gpt_weight_stage(g, slot, op.chunk);
            op_done(st, SCHED_W, op.chunk, timer_ms() - t0);
            pr->busy[slot] = 0, pr->slot_of[key] = -1;
        }
    }
    /* Every send of the step completes inside it (the next step reuses the slots and buffers). */
    for (int k = 0; k < pr->nslots && rc == ST_OK; k++) rc = wait_idle(pr, &pr->sends[k], "pipeline send", st, err);
    for (int k = 0; k < pr->ngbuf && rc == ST_OK; k++) rc = wait_idle(pr, &pr->greq[k], "pipeline send", st, err);
    /* The tail of the bubble: a rank done early waits here for the last one (it would wait in the
     * next collective anyway), so the idle time is the schedule's makespan less the busy time. */
    if (rc == ST_OK) {
        double t0 = timer_ms();
        rc = comm_barrier(pr->c, err);
        st->idle_ms += timer_ms() - t0;
    }
    return rc;
}

Status pp_eval(PpRun *pr, const int32_t *inp, const int32_t *tgt, int B, int T, double *loss_sum, Err *err) {
    Gpt *g = pr->g;
    size_t N = (size_t)B * T, Nl = g->s.sp ? N / (size_t)g->s.tp : N, n = Nl * (size_t)g->w.cfg.n_embd;
    *loss_sum = 0;
    Status rc = ST_OK;
    for (int c = 0; c < pr->v && rc == ST_OK; c++) {
        int vs = c * pr->P + pr->r;
        CommReq q;
        memset(&q, 0, sizeof q);
        if (vs > 0) {
            rc = comm_pp_irecv_f32(pr->c, gpt_stage_input(g, 0), n, (vs - 1) % pr->P, tag_of(pr, 0, vs, 0), &q, err);
            if (rc == ST_OK) rc = comm_wait(&q, pr->c->timeout_s, "pipeline activations (eval)", pr->c->step, err);
            if (rc != ST_OK) break;
        }
        double ls = gpt_forward_stage(g, 0, c, inp, tgt, B, T, 0.0f, 0, 0);
        if (vs == pr->S - 1) *loss_sum = ls;
        else {
            rc = comm_pp_isend_f32(pr->c, gpt_stage_output(g, 0, c), n, (vs + 1) % pr->P, tag_of(pr, 0, vs + 1, 0), &q,
                                   err);
            if (rc == ST_OK) rc = comm_wait(&q, pr->c->timeout_s, "pipeline activations (eval)", pr->c->step, err);
        }
    }
    return rc;
}
