/* train_step.c — one optimizer step, read top-down as llm.c's loop: train_step runs its stages,
 * each a function of its own:
 *
 *   step_data           the step's k micro-batches and the global count of their target tokens
 *   step_hessian        Sophia's Hessian pass on its steps (the same loop, sampled labels)
 *   step_micro_batches  forward + backward of each micro-batch: one loop over the schedule (pp_step)
 *   step_grads          gradient collectives done, global loss and norm, fp16 overflow, clip
 *   step_health         spike / non-finite / stall detectors decide: update, skip, roll back, stop
 *   step_update         the optimizer (and ZeRO's parameter all-gather)
 *   step_checkpoint     a checkpoint when due, preempted or at the end
 *   step_report         the progress line and the step record (events.h has the schema)
 *   step_validate       validation and generation samples at their cadence */
#include "train/train.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "ckpt/ckpt.h"
#include "ckpt/safetensors.h"
#include "ckpt/shard.h"
#include "core/mem.h"
#include "core/peak.h"
#include "core/progress.h"
#include "core/stats.h"
#include "core/rng.h"
#include "core/timer.h"
#include "data/bpe.h"
#include "data/loader.h"
#include "model/backend.h"
#include "model/gpt.h"
#include "model/infer.h"
#include "model/layout.h"
#include "model/matmul.h"
#include "parallel/parallel.h"
#include "parallel/pp.h"
#include "parallel/schedule.h"
#include "plan/plan.h"
#include "train/events.h"
#include "train/train_internal.h"
#include "train/noise.h"

/* Mean loss over `batches` sequential micro-batches of the validation stream. With a pipeline
 * (pr non-NULL) the micro-batches go through the stages and the last stage's sum is shared over
 * the world (NaN everywhere if a message failed). */
static double validate_loss(Gpt *g, Loader *val, int batches, int32_t *inp, int32_t *tgt, PpRun *pr, Comm *c,
                            double *tokens) {
    int B = g->s.B, T = g->s.T;
    uint64_t avail = val->nwin / (uint64_t)B;
    if ((uint64_t)batches > avail) batches = (int)(avail ? avail : 1);
    double sum = 0, count = 0;
    for (int j = 0; j < batches; j++) {
        int rows = val->nwin < (uint64_t)B ? (int)val->nwin : B;
        loader_fill(val, (uint64_t)j * B, rows, inp, tgt);
        if (tr_bad_id(inp, tgt, (size_t)rows * T, g->w.cfg.vocab) >= 0) return NAN; /* a validation shard rewritten */
        if (pr) {
            double ls = 0;
            Err e;
            if (pp_eval(pr, inp, tgt, rows, T, &ls, &e) != ST_OK) ls = NAN;
            sum += c->pp_rank == c->pp - 1 && c->tp_rank == 0 && c->dp_rank == 0 ? ls : 0.0;
        } else {
            sum += gpt_forward(g, inp, tgt, rows, T, 0.0f, 0, 0);
        }
        for (int i = 0; i < rows * T; i++) count += tgt[i] >= 0;
    }
    if (pr) {
        Err e;
        if (comm_allreduce_f64(c, &sum, 1, COMM_SUM, &e) != ST_OK) sum = NAN;
    }
    *tokens = count;
    return count > 0 ? sum / count : NAN;
}

/* A generation sample from the current weights (KV cache, temperature 0.8 over the whole
 * vocabulary, seeded by the step so it is reproducible), printed and logged. On a device the KV
 * cache is in its memory (infer.h): only the tokens and the logits cross. */
static void log_sample(Run *r, long step) {
    const TrainConfig *c = &r->cfg;
    if (!r->g.w.params) return; /* ZeRO-3: the full weights are not on this rank */
    KvCache kv;
    Err e;
    if (r->par && par_params_wait(r->par, &e) != ST_OK) return; /* generation runs no forward hooks */
    if (kv_init(&kv, &r->g, &e) != ST_OK) return;
    kv.test_host_read = c->faults.device_bypass; /* the test fault: logits by memcpy (devemu stops it) */
    int n = c->sample_tokens < c->model.max_seq ? c->sample_tokens : c->model.max_seq - 1;
    uint32_t *ids = calloc((size_t)n + 1, sizeof *ids);
    uint32_t he = loader_header_eot(&r->train); /* start from end-of-text (not the last id for cl100k/o200k) */
    int32_t cur = he < (uint32_t)c->model.vocab ? (int32_t)he : c->model.vocab - 1;
    int ok = 1;
    int32_t prev = -1; /* the token fed before cur */
    for (int i = 0; i < n && ids && ok; i++) {
        /* --doc-mask: a token after an EOT starts a document: the cache restarts (positions from 0) */
        if (c->model.doc_mask && prev == c->model.doc_eot) kv.len = 0;
        infer_step(&r->g, &kv, cur);
        prev = cur;
        if (infer_status(&r->g, &e) != ST_OK) { /* a failed GEMM: no sample rather than a garbage one */
            if (!c->quiet) printf("sample %5ld | skipped: %s\n", step, e.msg);
            ok = 0;
            break;
        }
        cur = infer_pick(kv.logits, c->model.vocab, 0.8f, 0, rng_uniform((uint64_t)step, 0x5a3b1e, (uint64_t)i), NULL);
        ids[i] = (uint32_t)cur;
    }
    uint8_t *text = NULL;
    size_t len = 0, cap = 0;
    if (ids && ok && c->sample_tokenizer) tokenizer_decode(c->sample_tokenizer, ids, (size_t)n, &text, &len, &cap, &e);
    char *t = text ? malloc(len + 1) : NULL;
    if (t) {
        memcpy(t, text, len);
        t[len] = 0;
        if (!c->quiet) {
            /* The console line stays one line: newlines are shown as ⏎, other control bytes as spaces. */
            printf("sample %5ld | ", step);
            for (size_t i = 0; i < len; i++) {
                unsigned char ch = (unsigned char)t[i];
                if (ch == '\n') fputs("⏎", stdout);
                else if (ch < 0x20 || ch == 0x7f) putchar(' ');
                else putchar(ch);
            }
            printf("\n");
        }
    }
    if (ok && (t || ids)) ev_sample(&r->log, step, t, ids, n);
    free(t);
    free(text);
    free(ids);
    kv_free(&kv);
}

/* The step's k micro-batches of this rank, and the global count of their target tokens: the
 * loss denominator, so that accumulation and data parallelism give the loss of one batch. The
 * same small all-reduce agrees on preemption. */
static Status step_data(Run *r, Step *s, Err *err) {
    const TrainConfig *c = &r->cfg;
    int B = c->micro_batch, T = c->seq_len, k = c->grad_accum;
    s->t0 = timer_ms();
    for (int j = 0; j < k; j++)
        loader_fill_rank(&r->train, r->dp_rank, r->dp, j, B, k, r->inp + (size_t)j * B * T, r->tgt + (size_t)j * B * T);
    loader_step_done(&r->train, r->dp, B, k);
    long bad = tr_bad_id(r->inp, r->tgt, r->batch_ints, c->model.vocab); /* agreed below */
    if (r->attempt == c->debug_spike_step) /* test hook: a corrupted batch (random targets) */
        for (size_t i = 0; i < r->batch_ints; i++)
            r->tgt[i] = (int32_t)rng_below(99, 0xbad, i, (uint64_t)c->model.vocab);
    long ntok = 0; /* counted once per dp replica: its tp ranks and pipeline stages share the batch */
    for (size_t i = 0; i < r->batch_ints && r->tp_rank == 0 && r->pp_rank == 0; i++) ntok += r->tgt[i] >= 0;
    s->ntok0 = 0;
    for (size_t i = 0; i < (size_t)B * T; i++) s->ntok0 += r->tgt[i] >= 0;
    s->comm_ms0 = r->comm->stats.wait_ms_total, s->comm_b0 = tr_comm_bytes_total(r->comm), s->cs0 = r->comm->stats;
    s->ahead0 = par_zero_gathers_ahead(r->par);
    /* --doc-mask: Σ L_i² over the documents of the replica's rows (an integer: exact in the sum) */
    int dm = c->model.doc_mask;
    double span = dm && r->tp_rank == 0 && r->pp_rank == 0 ? layout_doc_span(r->inp, B * k, T, c->model.doc_eot) : 0;
    int64_t v[3] = {ntok, tr_stop_word(tr_stop_pending(), bad), (int64_t)llround(span * (double)B * k * T)};
    Status st = comm_allreduce_i64(r->comm, v, dm ? 3 : 2, COMM_SUM, err);
    s->ntok = (long)v[0], s->stop = tr_word_stop(v[1]);
    s->span = dm ? (double)v[2] / (double)r->acct.batch_tokens : c->seq_len;
    s->t1 = timer_ms();
    return st == ST_OK ? tr_word_bad_ids(v[1], c, r->inp, r->tgt, bad, err) : st;
}

/* The step's micro-batches: this rank's ops of the schedule (pp.h; one process walks the trivial
 * one, F0 B0 F1 B1 …), micro-batch j's dropout counter its index in the global step (rank-major,
 * as one process), each loss divided by the step's token count (times the fp16 loss scale) so the
 * accumulated gradients are those of the whole step; labels (NULL: the targets) for Sophia's pass.
 * Errors: out of memory, a failed point-to-point; GEMM failures stay in the model (gpt_status). */
static Status step_walk(Run *r, const Step *s, float dscale, const PpLabels *labels, double *loss_sum, PpStats *ps,
                        Err *err) {
    const TrainConfig *c = &r->cfg;
    int k = c->grad_accum;
    uint64_t drop0 = ((uint64_t)(r->attempt - 1) * r->dp + r->dp_rank) * k;
    uint64_t *drop = malloc((size_t)k * sizeof *drop);
    if (!drop) return err_set(err, ST_ERR_RUNTIME, "out of memory");
    for (int j = 0; j < k; j++) drop[j] = drop0 + (uint64_t)j;
    Status st = pp_step(r->pipe.run, r->inp, r->tgt, c->micro_batch, c->seq_len, dscale, drop, labels, loss_sum, ps, err);
    free(drop);
    return st;
}

/* Forward and backward of each micro-batch (step_walk). A GEMM that failed on the way is kept in
 * s->gemm (gpt_status) for step_grads, which makes every rank stop on it before anything uses the
 * result. */
static void step_micro_batches(Run *r, Step *s) {
    const TrainConfig *c = &r->cfg;
    par_step_begin(r->par, c->grad_accum, s->next); /* the first micro-batch writes the gradients, the others add */
    r->g.s.ms_fwd = r->g.s.ms_bwd = 0;
    s->lscale = c->fp16 ? r->scaler.scale : 1.0f;
    float dscale = s->ntok > 0 ? s->lscale / (float)s->ntok : 0.0f;
    Status st = step_walk(r, s, dscale, NULL, &s->loss_sum, &r->pipe.stats, &s->gemm_err);
    if (r->attempt == c->debug_nan_step && r->g.d.grads) { /* test hook */
        float nan = NAN;
        r->g.be->from_host(r->g.d.grads + r->g.w.layout.tensors[2].offset, &nan, sizeof nan);
    }
    s->gemm_st = gpt_status(&r->g, st == ST_OK ? &s->gemm_err : NULL);
    if (st != ST_OK) s->gemm_st = st;
}

/* The collectives since `before` are some other part's cost (a checkpoint's gathers, Sophia's
 * Hessian pass): the step record's communication (bytes, by kind, waits) leaves them out. */
static void step_comm_exclude(Run *r, Step *s, const CommStats *before) {
    const CommStats *now = &r->comm->stats;
    for (int k = 0; k < COMM_NKIND; k++) {
        s->cs0.bytes[k] += now->bytes[k] - before->bytes[k];
        s->cs0.wait_ms[k] += now->wait_ms[k] - before->wait_ms[k];
        s->cs0.test_ms_by_kind[k] += now->test_ms_by_kind[k] - before->test_ms_by_kind[k];
        s->cs0.test_done[k] += now->test_done[k] - before->test_done[k];
        s->comm_b0 += (double)(now->bytes[k] - before->bytes[k]);
    }
    s->comm_ms0 += now->wait_ms_total - before->wait_ms_total;
    s->cs0.tp_nonblocking += now->tp_nonblocking - before->tp_nonblocking;
}

/* Sophia's Hessian estimate (Liu et al. 2023, Gauss-Newton-Bartlett): a forward and backward of
 * the step's own micro-batches with labels drawn from the model's softmax (the model's sampling
 * mode; the draw of each row is keyed by its global position in the run, rank-major like the
 * dropout counter, so any dp × accumulation split draws the same labels), the gradients reduced as
 * a step's, then h ← β2·h + (1 − β2)·B·ĝ² on the owned shard (B: the step's token count; ĝ: the
 * sampled loss's mean gradient). Runs before the step's own pass at steps 1, k+1, 2k+1, ... so the
 * update of that step already reads the new h (paper's Algorithm 1). Its communication is its own
 * (s->hess_bytes), not the step's; a non-finite estimate (fp16 overflow) leaves h as it was. */
static Status step_hessian(Run *r, Step *s, Err *err) {
    const TrainConfig *c = &r->cfg;
    int B = c->micro_batch, T = c->seq_len, k = c->grad_accum;
    double t0 = timer_ms(), cb0 = tr_comm_bytes_total(r->comm);
    CommStats cs0 = r->comm->stats;
    float lscale = c->fp16 ? r->scaler.scale : 1.0f;
    float dscale = s->ntok > 0 ? lscale / (float)s->ntok : 0.0f;
    uint64_t drop0 = ((uint64_t)(r->attempt - 1) * r->dp + r->dp_rank) * k;
    /* test fault hess_rank_local: the draws keyed by rank-local rows */
    uint64_t row0 = c->faults.hess_rank_local ? (uint64_t)(r->attempt - 1) * k * B * T : drop0 * (uint64_t)B * T;
    for (size_t i = 0; i < r->batch_ints; i++) r->hess_u[i] = rng_uniform(c->seed, 0x50f1a, row0 + i);
    par_step_begin(r->par, k, s->next);
    double lsum = 0;
    PpLabels labels = {r->hess_u, r->hess_y};
    PpStats ps; /* the step's own pipeline record stays the step's */
    Err gerr = {0};
    Status wst = step_walk(r, s, dscale, &labels, &lsum, &ps, &gerr);
    Status gst = gpt_status(&r->g, wst == ST_OK ? &gerr : NULL);
    if (wst != ST_OK) gst = wst; /* counted with a GEMM failure below, so every rank stops */
    Status st = par_grads_finish(r->par, err);
    double sums[2] = {r->tp_rank == 0 ? lsum : 0.0, gst != ST_OK};
    if (st == ST_OK) st = comm_allreduce_f64(r->comm, sums, 2, COMM_SUM, err);
    if (st != ST_OK) return st;
    if (gst != ST_OK) return *err = gerr, gst;
    if (sums[1] > 0)
        return err_set(err, ST_ERR_RUNTIME, "step %ld: a GEMM of Sophia's Hessian pass failed on %.0f other rank(s)",
                       s->next, sums[1]);
    double norm;
    if ((st = par_grad_norm(r->par, &norm, err)) != ST_OK) return st;
    s->hess_skipped = !isfinite(norm);
    if (!s->hess_skipped) par_hess_update(r->par, &c->optim, (float)s->ntok / (lscale * lscale));
    s->hess_loss = s->ntok > 0 ? sums[0] / s->ntok : NAN;
    s->hess_ms = timer_ms() - t0;
    s->hess_bytes = tr_comm_bytes_total(r->comm) - cb0;
    step_comm_exclude(r, s, &cs0); /* the pass's collectives are its own cost */
    return ST_OK;
}

/* The gradient noise scale (train/noise.h): each replica's first micro-batch gradient (its tp ranks'
 * squared parts summed) against the step's; the small batch's |G|² is the replicas' mean, its size
 * their mean token count. Collective. */
static Status step_noise(Run *r, Step *s, Err *err) {
    double *part = r->by_rank, *tok = r->by_rank2;
    Status st = comm_allgather_f64(r->comm, par_noise_sumsq(r->par), part, err);
    if (st == ST_OK) st = comm_allgather_f64(r->comm, (double)s->ntok0, tok, err);
    if (st != ST_OK) return st;
    for (int i = 0; i < 6; i++) s->noise[i] = NAN;
    double g2s = 0, bs = 0, ls = s->lscale;
    for (int d = 0; d < r->dp; d++) { /* ranks: tp fastest, then dp (pp is 1 here) */
        double sq = 0, nt = tok[d * r->tp];
        for (int t = 0; t < r->tp; t++) sq += part[d * r->tp + t];
        if (!(nt > 0)) return ST_OK; /* a replica's micro-batch without targets: no estimate */
        double f = (double)s->ntok / (ls * nt); /* the gradient buffer holds sum / (ntok / lscale) */
        r->ns.rep[d] = sq * f * f;
        g2s += sq * f * f / r->dp, bs += nt / r->dp;
    }
    double g2, trs;
    s->noise[0] = bs, s->noise[1] = g2s;
    if (s->overflow || !noise_estimate(g2s, bs, s->norm * s->norm, (double)s->ntok, &g2, &trs)) return ST_OK;
    s->noise[2] = g2, s->noise[3] = trs, s->noise[4] = trs / g2;
    s->noise[5] = noise_update(&r->ns.avg, g2, trs);
    return ST_OK;
}

/* Gradient collectives finished; the global loss, and whether a GEMM failed on any rank (every
 * rank stops then, the failing one with its message); the global norm (and each rank's value of
 * it, logged to show they agree); fp16 overflow; the clip factor and the learning rate. */
static Status step_grads(Run *r, Step *s, Err *err) {
    const TrainConfig *c = &r->cfg;
    Status st = par_grads_finish(r->par, err);
    /* Every tp rank of the last pipeline stage computed the whole loss of its replica's batch: tp
     * rank 0 contributes it, and the world sum gives every rank (every stage) the same loss, so
     * spike detection and the NaN guard decide alike everywhere. */
    double sums[2] = {r->tp_rank == 0 && r->pp_rank == r->pp - 1 ? s->loss_sum : 0.0, s->gemm_st != ST_OK};
    if (st == ST_OK) st = comm_allreduce_f64(r->comm, sums, 2, COMM_SUM, err);
    if (st != ST_OK) return st;
    if (s->gemm_st != ST_OK) return *err = s->gemm_err, s->gemm_st;
    if (sums[1] > 0)
        return err_set(err, ST_ERR_RUNTIME, "step %ld: a GEMM failed on %.0f other rank(s) (their messages say why)",
                       s->next, sums[1]);
    s->loss_sum = sums[0];
    s->loss = s->ntok > 0 ? s->loss_sum / s->ntok : 0.0;
    s->t2 = timer_ms();
    if ((st = par_grad_norm(r->par, &s->norm, err)) != ST_OK) return st;
    if (c->fp16) {
        /* Loss scaling: inf/nan in the scaled gradients means the scale overflowed fp16 — skip the
         * step and halve; otherwise unscale the norm (the update is unscaled in step_update). */
        float before = r->scaler.scale;
        s->overflow = !isfinite(s->norm);
        if (!s->overflow) s->norm /= s->lscale;
        scaler_update(&r->scaler, !s->overflow);
        if (s->overflow) {
            ev_overflow(&r->log, s->next, r->attempt, before, r->scaler.scale);
            r->res->overflows++;
            if (!c->quiet)
                printf("fp16: gradients overflowed at step %ld with loss scale %g: step skipped, scale %g\n", s->next,
                       before, r->scaler.scale);
        }
    }
    if (r->ns.on && (st = step_noise(r, s, err)) != ST_OK) return st;
    s->scale = optim_clip_scale(s->norm, c->grad_clip);
    s->lr = sched_lr(&c->sched, s->next);
    return comm_allgather_f64(r->comm, s->norm, r->by_rank, err);
}

/* Rolls back to the last checkpoint; the loader keeps its position, so the batches that led to
 * the spike are skipped. The health windows stay as they are (the cap counts on). Returns 0 when
 * there is nothing to roll back to. */
static int health_rollback(Run *r, Step *s, Status *st, Err *err) {
    const TrainConfig *c = &r->cfg;
    char path[4096] = "", note[256];
    /* Several ranks saving in the background: commit the last save first (every rank decides the
     * rollback alike, so all of them are here), so that it is the one rolled back to. */
    if (r->ck.sasync && (*st = ckpt_shard_async_wait(r->ck.sasync, r->comm, NULL, err)) != ST_OK) return 1;
    if (!c->ckpt_dir[0] || ckpt_resolve(c->ckpt_dir, "auto", path, sizeof path, note, sizeof note, err) != ST_OK ||
        !path[0])
        return 0;
    CkptMeta back;
    LoaderState keep = loader_get_state(&r->train);
    if ((*st = tr_run_load_ckpt(r, path, &back, err)) != ST_OK) return 1;
    loader_set_state(&r->train, keep);
    if (!c->quiet) printf("health: rolled back to %s (step %ld)\n", path, back.step);
    ev_rollback(&r->log, s->next, back.step, r->attempt, path);
    r->step = back.step;
    ckpt_meta_free(&back);
    r->res->rollbacks++;
    s->rolled_back = 1;
    return 1;
}

/* The detectors decide whether this update happens (log, skip, roll back or stop). A loss
 * scaler overflow is not the model's divergence: it skips without touching the detectors. */
static Status step_health(Run *r, Step *s, Err *err) {
    const TrainConfig *c = &r->cfg;
    HealthVerdict hv;
    if (s->overflow) {
        memset(&hv, 0, sizeof hv);
        hv.action = HEALTH_ACT_SKIP;
    } else {
        hv = health_step(&r->health, &c->health, s->next, s->loss, s->norm);
    }
    if (hv.loss_spike || hv.gnorm_spike || hv.nonfinite) {
        int g = hv.gnorm_spike && !hv.loss_spike;
        SpikeEvent e = {.step = s->next, .batch = r->attempt, .nonfinite = hv.nonfinite,
                        .metric = g ? "grad_norm" : "loss", .action = health_action_name(hv.action),
                        .value = g ? s->norm : s->loss, .median = g ? hv.gnorm_median : hv.loss_median,
                        .z = g ? hv.gnorm_z : hv.loss_z, .tokens_seen = (double)r->attempt * r->acct.batch_tokens};
        ev_spike(&r->log, &e);
        r->res->spikes++;
        if (!c->quiet)
            printf("health: %s at step %ld (batch %ld): %s -> %s\n", hv.nonfinite ? "non-finite values" : "spike",
                   s->next, r->attempt, hv.why, health_action_name(hv.action));
    }
    if (hv.stall) {
        ev_stall(&r->log, s->next, hv.why);
        if (!c->quiet) printf("health: stall at step %ld: %s\n", s->next, hv.why);
    }
    if (hv.action == HEALTH_ACT_STOP) {
        char last_good[4096] = "", note[256];
        Err e2;
        if (c->ckpt_dir[0]) ckpt_resolve(c->ckpt_dir, "auto", last_good, sizeof last_good, note, sizeof note, &e2);
        return err_set(err, ST_ERR_RUNTIME, "step %ld: %s; the weights were not updated; last good checkpoint: %s",
                       s->next, hv.why, last_good[0] ? last_good : c->ckpt_dir[0] ? "none yet in --ckpt-dir" : "none (no --ckpt-dir)");
    }
    Status st = ST_OK;
    if (hv.action == HEALTH_ACT_ROLLBACK && !health_rollback(r, s, &st, err)) {
        hv.action = HEALTH_ACT_SKIP; /* nothing to roll back to: skip the update instead */
        if (!c->quiet) printf("health: no checkpoint to roll back to, skipping the update instead\n");
    }
    if (st != ST_OK) return st;
    if (hv.action == HEALTH_ACT_SKIP) {
        ev_skip(&r->log, s->next, r->attempt);
        if (r->rs.nskipped < SKIP_RECORD_MAX) r->rs.skipped[r->rs.nskipped++] = r->attempt;
        r->res->skips++;
    }
    s->updated = hv.action == HEALTH_ACT_NONE || hv.action == HEALTH_ACT_LOG;
    return ST_OK;
}

/* The whole of a model buffer readable on the host: itself, or on a device its copy in ls.host
 * (NULL after recording a device error). */
static const float *layer_stats_host(Run *r, const float *buf, Err *err) {
    if (r->g.be->host_addressable) return buf;
    return tr_to_host(r->g.be, r->ls.host, buf, r->g.w.layout.total * sizeof(float), err) == ST_OK ? r->ls.host : NULL;
}

/* --log-layer-stats, before the update: per segment the raw gradient's norm (unscaled by the fp16
 * loss scale, before clipping) and the weights' norm, and a copy of the weights. Segments are the
 * layout's (embeddings, block 0..L-1, final norm); their padding is zero in both buffers. On a
 * device the gradients and the weights come to the host first (a diagnostic's cost). */
static Status layer_stats_before(Run *r, float lscale, Err *err) {
    const ParamLayout *pl = &r->g.w.layout;
    const float *g = layer_stats_host(r, r->g.d.grads, err), *w = r->ls.prev;
    if (!g) return ST_ERR_RUNTIME;
    size_t bytes = pl->total * sizeof(float);
    if (r->g.be->host_addressable) memcpy(r->ls.prev, r->g.w.params, bytes);
    else if (tr_to_host(r->g.be, r->ls.prev, r->g.w.params, bytes, err) != ST_OK) return ST_ERR_RUNTIME;
    for (int k = 0; k < r->ls.nseg; k++) {
        double gs = 0, ws = 0;
        for (size_t i = pl->seg_off[k]; i < pl->seg_off[k + 1]; i++) gs += (double)g[i] * g[i], ws += (double)w[i] * w[i];
        r->ls.grad[k] = sqrt(gs) / lscale, r->ls.weight[k] = sqrt(ws);
    }
    return ST_OK;
}

/* After the update: the norm of the change of each segment's weights. */
static Status layer_stats_after(Run *r, Err *err) {
    const ParamLayout *pl = &r->g.w.layout;
    const float *w = layer_stats_host(r, r->g.w.params, err);
    if (!w) return ST_ERR_RUNTIME;
    for (int k = 0; k < r->ls.nseg; k++) {
        double us = 0;
        for (size_t i = pl->seg_off[k]; i < pl->seg_off[k + 1]; i++) {
            double d = (double)w[i] - r->ls.prev[i];
            us += d * d;
        }
        r->ls.update[k] = sqrt(us);
    }
    return ST_OK;
}

/* This rank's part of the update (clip and fp16 unscale folded into the gradient scale), then
 * ZeRO's parameter all-gather. */
static Status step_update(Run *r, Step *s, Err *err) {
    Status st = ST_OK;
    if (s->updated && r->ls.nseg && (st = layer_stats_before(r, s->lscale, err)) != ST_OK) return st;
    if (s->updated) {
        /* Muon's matrices follow the schedule's shape at their own peak (--muon-lr); Shampoo's are
         * grafted to Adam and use the run's learning rate. */
        float mlr = r->cfg.sched.lr > 0 ? r->cfg.optim.muon_lr * (s->lr / r->cfg.sched.lr) : 0.0f;
        st = par_optim_step(r->par, &r->cfg.optim, s->next, s->lr, mlr, s->scale / s->lscale, err);
        if (st == ST_OK && r->ls.nseg) st = layer_stats_after(r, err);
        if (st == ST_OK) st = par_params_sync(r->par, err);
        r->step = s->next;
    }
    s->t3 = timer_ms();
    return st;
}

/* A checkpoint when due, at the end, and when stopping (signal or --stop-after). */
static Status step_checkpoint(Run *r, Step *s, Err *err) {
    const TrainConfig *c = &r->cfg;
    s->last = s->updated && r->step == c->steps;
    /* One process reads the flag now; under MPI every rank acts on the agreed one. */
    int signalled = s->stop || (r->world == 1 && tr_stop_pending() != 0);
    s->stopping = signalled || (c->stop_after > 0 && r->step >= c->stop_after && !s->last);
    int due = s->updated && c->ckpt_every > 0 && r->step % c->ckpt_every == 0;
    if (!c->ckpt_dir[0] || s->rolled_back || !(s->last || s->stopping || due)) return ST_OK;
    CkptSaveInfo info;
    CommStats before = r->comm->stats;
    Status st = tr_save_checkpoint(r, r->step, &s->ckpt_ms, &info, err);
    if (st != ST_OK) return st;
    /* A save's gathers are the checkpoint's cost (time_ms.checkpoint), not the step's. */
    step_comm_exclude(r, s, &before);
    ev_ckpt(&r->log, r->step, s->ckpt_ms, r->ck.async || r->ck.sasync ? NULL : info.path, (double)info.bytes, info.pruned);
    /* Young/Daly needs the full write time: for async saves, the background write's. */
    if (!r->ck.async && !r->ck.sasync) tr_note_write_time(r, &info);
    return ST_OK;
}

/* A step's MFU: its model FLOP/s `rate` over the job's peak. No step can beat the peak: one that
 * did shows the peak was measured low (under load at start, or given low), so the achieved rate
 * becomes the denominator from then on (a peak record, and a console note once when `say`), and
 * MFU never passes 1. */
double tr_step_mfu(RunAccounting *a, EventLog *log, const TrainConfig *c, long step, double rate, int say) {
    if (rate > a->peak_job && !c->faults.peak_no_guard) {
        if (say && !a->peak_raised)
            printf("note: step %ld ran at %.1f GFLOP/s, above the %s peak of %.1f GFLOP/s (measured under load? "
                   "--remeasure-peak on a quiet machine); MFU is against the achieved rate from here on\n",
                   step, rate * 1e-9, c->peak_flops > 0 ? "given" : "measured", a->peak_job * 1e-9);
        ev_peak(log, step, rate, a->peak_job, rate);
        a->peak_job = rate, a->peak_raised = 1;
    }
    return rate / a->peak_job;
}

/* After the first step every buffer and the libraries' scratch are live: measured memory by
 * category, and resident anonymous memory above the start of the run, on every rank. Collective. */
static Status report_memory(Run *r, Step *s, Err *err) {
    size_t rss = mem_rss_anon(), allocated = 0;
    for (int c = 0; c < MEM_NCAT; c++) allocated += r->mem.bytes[c];
    MemoryStepEvent e = {.step = s->next, .allocated_total = (double)allocated, .world = r->world,
                         .rss_above = rss > r->acct.rss_base ? (double)(rss - r->acct.rss_base) : 0.0,
                         .rss_unaccounted = rss > r->acct.rss_base + allocated ? (double)(rss - r->acct.rss_base - allocated) : 0.0};
    memcpy(e.measured, r->mem.bytes, sizeof e.measured);
    double *all = calloc((size_t)r->world * 2, sizeof *all);
    if (!all) return err_set(err, ST_ERR_RUNTIME, "out of memory");
    Status st = comm_allgather_f64(r->comm, e.allocated_total, all, err);
    if (st == ST_OK) st = comm_allgather_f64(r->comm, e.rss_above, all + r->world, err);
    e.allocated_by_rank = all, e.rss_above_by_rank = all + r->world;
    if (st == ST_OK) ev_memory_step(&r->log, &e);
    free(all);
    return st;
}

/* The step's pipeline bubble: measured (the world's idle time over its ranks' time inside the
 * schedule), the formula's ((p − 1)/(v·m + p − 1): the (p − 1)/v stages' worth of idle time of
 * GPipe, 1F1B and interleaved over the step, which assumes equal stages), and the schedule
 * simulated with each stage's measured mean forward, backward and weight-pass times (the uneven
 * stages included). pp_idle gets each rank's idle time. */
static Status pipeline_bubble(Run *r, Step *s, double out[3], Err *err) {
    const PpStats *p = &r->pipe.stats;
    double v[2] = {p->idle_ms, p->idle_ms + p->busy_ms};
    Status st = comm_allreduce_f64(r->comm, v, 2, COMM_SUM, err);
    if (st == ST_OK) st = comm_allgather_f64(r->comm, p->idle_ms, r->pipe.idle, err);
    /* Each pipeline rank's mean op times (the world's ranks are pp-major: pp rank q's times are
     * those of world rank q·dp·tp, the first of its stage). */
    double *all = calloc((size_t)r->world * 3, sizeof *all), f[SCHED_MAX_P], b[SCHED_MAX_P], w[SCHED_MAX_P];
    if (!all) return err_set(err, ST_ERR_RUNTIME, "out of memory");
    double mine[3] = {p->nf ? p->f_ms / p->nf : 0, p->nb ? p->b_ms / p->nb : 0, p->nw ? p->w_ms / p->nw : 0};
    for (int i = 0; i < 3 && st == ST_OK; i++) st = comm_allgather_f64(r->comm, mine[i], all + (size_t)i * r->world, err);
    for (int q = 0; q < r->pp; q++) {
        int wr = q * r->dp * r->tp;
        f[q] = all[wr], b[q] = all[r->world + wr], w[q] = all[2 * r->world + wr];
        r->pipe.stage_ms[0][q] = f[q], r->pipe.stage_ms[1][q] = b[q], r->pipe.stage_ms[2][q] = w[q];
    }
    /* The op counts, for the record only (the tests' check that every W pass ran): their gathers
     * are the record's cost, not the step's communication. */
    CommStats before = r->comm->stats;
    double cnt[3] = {p->nf, p->nb, p->nw};
    for (int i = 0; i < 3 && st == ST_OK; i++) st = comm_allgather_f64(r->comm, cnt[i], all + (size_t)i * r->world, err);
    for (int q = 0; q < r->pp && st == ST_OK; q++)
        for (int i = 0; i < 3; i++) r->pipe.stage_ops[i][q] = all[(size_t)i * r->world + (size_t)q * r->dp * r->tp];
    /* Interleaved: each virtual stage's own mean times (chunk c of pp rank q at c·P + q, from the
     * stage's first rank), since the rank's mean over its chunks hides the head's heavier chunk.
     * Also for the record only. */
    int S = r->pp * r->pipe.sched.v;
    double *vs = r->pipe.sched.v > 1 ? r->pipe.vstage_ms : NULL;
    if (vs && st == ST_OK) {
        memset(vs, 0, (size_t)S * 3 * sizeof *vs);
        int q = r->comm->rank / (r->dp * r->tp);
        for (int c = 0; c < r->pipe.sched.v && r->comm->rank % (r->dp * r->tp) == 0; c++)
            for (int i = 0; i < 3; i++)
                vs[(size_t)i * S + (size_t)c * r->pp + q] = p->chunk_ops[i][c] ? p->chunk_ms[i][c] / p->chunk_ops[i][c] : 0;
        st = comm_allreduce_f64(r->comm, vs, 3 * S, COMM_SUM, err);
    }
    step_comm_exclude(r, s, &before);
    free(all);
    if (st != ST_OK) return st;
    double m = r->pipe.sched.m, P = r->pp, vv = r->pipe.sched.v;
    out[0] = v[1] > 0 ? v[0] / v[1] : 0;
    SchedTimes t = {1, 2, 0, 0, f, b, r->pipe.sched.split_backward ? w : NULL, NULL, NULL, NULL};
    if (vs) t.stage_f = vs, t.stage_b = vs + S, t.stage_w = r->pipe.sched.split_backward ? vs + 2 * S : NULL;
    SchedSim sim;
    Err e;
    out[2] = sched_simulate(&r->pipe.sched, &t, &sim, &e) == ST_OK ? sim.bubble : NAN;
    /* zb-h1 has no closed form: its figure is the schedule's own timeline with the measured F, B, W. */
    out[1] = r->pipe.sched.split_backward ? out[2] : (P - 1) / (vv * m + P - 1);
    return ST_OK;
}

/* The progress line and the step record. MFU is the job's model FLOP/s over the sum of the ranks'
 * peaks. Collective (step times of every rank). */
static Status step_report(Run *r, Step *s, Err *err) {
    const TrainConfig *c = &r->cfg;
    TrainResult *res = r->res;
    double dt = timer_ms() - s->t0;
    int first = r->attempt == r->rs.attempt + 1;
    Status st = first ? report_memory(r, s, err) : ST_OK;
    if (st == ST_OK) st = comm_allgather_f64(r->comm, dt, r->by_rank2, err);
    /* Each rank's exposed communication so far this step: the rank that arrived last at the
     * collectives waited least, so the smallest is closest to the transfer time itself and the
     * spread is the ranks' skew (bench/netsim.sh). */
    if (st == ST_OK) st = comm_allgather_f64(r->comm, r->comm->stats.wait_ms_total - s->comm_ms0, r->comm_by_rank, err);
    if (st != ST_OK) return st;
    double mx = 0;
    for (int i = 0; i < r->world; i++) mx = r->by_rank2[i] > mx ? r->by_rank2[i] : mx;
    if (r->nmeasured < r->step_cap) r->step_ms[r->nmeasured++] = dt;
    r->ms_total += dt;
    /* The model FLOPs of the step: its batch, and the same batch again in Sophia's Hessian pass. */
    /* --doc-mask: the attention term at the step's own document lengths (layout_doc_span) */
    double fpt = c->model.doc_mask ? layout_flops_per_token_span(&c->model, s->span) : r->acct.fpt;
    double tok_s = r->acct.batch_tokens / (dt * 1e-3), rate = fpt * tok_s * (s->hess_ms > 0 ? 2 : 1);
    double mfu = tr_step_mfu(&r->acct, &r->log, c, s->next, rate, !c->quiet);
    double elapsed = (timer_ms() - r->loop_t0) * 1e-3;
    long done = r->attempt - r->rs.attempt, left = c->steps - r->step;
    double eta = done > 0 ? elapsed / done * left : NAN;
    if (first) res->first_loss = s->loss;
    res->last_loss = s->loss;
    res->steps_done = r->step;
    if (!c->quiet) {
        char el[32], et[32];
        tr_fmt_duration(elapsed, el, sizeof el), tr_fmt_duration(eta, et, sizeof et);
        printf("step %5ld/%ld | loss %.4f | lr %.2e | norm %.3f -> %.3f | %7.1f ms | %6.0f tok/s | MFU %4.1f%% | "
               "%s, ETA %s%s%s\n",
               s->next, c->steps, s->loss, s->lr, s->norm, s->norm * s->scale, dt, tok_s, 100 * mfu, el, et,
               s->ckpt_ms > 0 ? " | ckpt" : "", s->updated ? "" : " | not applied");
        fflush(stdout);
    }
    double pipe[4] = {0, 0, 0, 0}; /* pp > 1: bubble measured, formula, simulated; idle of this rank */
    if (r->pp > 1 && (st = pipeline_bubble(r, s, pipe, err)) != ST_OK) return st;
    /* tp's exposed time: its waits; apart, the progress calls made for its overlapped collectives
     * (comm_test on the calling thread while a GEMM runs on another, model/gpt.c overlap_run). */
    double comm_ms = r->comm->stats.wait_ms_total - s->comm_ms0, by_kind[COMM_NKIND], tp_ms = 0, tp_test_ms = 0;
    double dp_test_ms = 0; /* the other kinds' progress calls (ZeRO's pieces between segments) */
    double wait_by_kind[COMM_NKIND]; /* the exposed waits per kind (netsim tells skew from transfer) */
    for (int k = 0; k < COMM_NKIND; k++) {
        by_kind[k] = (double)(r->comm->stats.bytes[k] - s->cs0.bytes[k]);
        wait_by_kind[k] = r->comm->stats.wait_ms[k] - s->cs0.wait_ms[k];
        double test_ms = r->comm->stats.test_ms_by_kind[k] - s->cs0.test_ms_by_kind[k];
        if (comm_kind_is_tp((CommKind)k)) {
            tp_ms += r->comm->stats.wait_ms[k] - s->cs0.wait_ms[k];
            tp_test_ms += test_ms;
        } else {
            dp_test_ms += test_ms;
        }
    }
    double tp_nb = (double)(r->comm->stats.tp_nonblocking - s->cs0.tp_nonblocking), tp_early = 0;
    for (int k = 0; k < COMM_NKIND; k++)
        if (comm_kind_is_tp((CommKind)k)) tp_early += (double)(r->comm->stats.test_done[k] - s->cs0.test_done[k]);
    StepEvent e = {.step = s->next, .batch = r->attempt, .loss = s->loss, .lr = s->lr, .grad_norm = s->norm,
                   .grad_norm_clipped = s->norm * s->scale, .grad_norm_by_rank = r->by_rank, .world = r->world,
                   .applied = s->updated, .fp16 = c->fp16, .loss_scale = s->lscale, .tokens = (double)s->ntok,
                   .tokens_seen = (double)r->acct.batch_tokens * r->attempt, .tokens_per_s = tok_s, .mfu = mfu,
                   .elapsed_s = elapsed, .eta_s = eta, .comm_bytes = tr_comm_bytes_total(r->comm) - s->comm_b0,
                   .step_ms_max = mx, .step_ms_median = stats_median_inplace(r->by_rank2, (size_t)r->world), .ms_total = dt,
                   .ms_data = s->t1 - s->t0, .ms_forward = r->g.s.ms_fwd,
                   .ms_backward = (s->t2 - s->t1) - r->g.s.ms_fwd - s->hess_ms,
                   .ms_comm = comm_ms, .ms_comm_dp = comm_ms - tp_ms, .ms_comm_tp = tp_ms, .ms_tp_progress = tp_test_ms,
                   .ms_comm_by_kind = r->world > 1 ? wait_by_kind : NULL, .ms_comm_by_rank = r->world > 1 ? r->comm_by_rank : NULL,
                   .ms_dp_progress = r->world > 1 ? dp_test_ms : -1,
                   .tp_overlapped = r->comm->tp > 1 ? tp_nb : -1, .tp_overlapped_done = tp_early,
                   .zero_gathers_ahead = s->ahead0 >= 0 ? (double)(par_zero_gathers_ahead(r->par) - s->ahead0) : -1,
                   .comm_bytes_by_kind = by_kind, .ms_optimizer = s->t3 - s->t2, .ms_checkpoint = s->ckpt_ms,
                   .pp = r->pp, .pp_idle_ms = r->pipe.stats.idle_ms, .pp_busy_ms = r->pipe.stats.busy_ms, .pp_f_ms = r->pipe.stats.f_ms,
                   .pp_b_ms = r->pipe.stats.b_ms, .pp_w_ms = r->pipe.stats.w_ms, .pp_bubble = pipe[0], .pp_bubble_formula = pipe[1], .pp_bubble_sim = pipe[2],
                   .pp_idle_by_rank = r->pp > 1 ? r->pipe.idle : NULL,
                   .pp_stage_ms = {r->pipe.stage_ms[0], r->pipe.stage_ms[1], r->pipe.stage_ms[2]},
                   .pp_stage_ops = {r->pipe.stage_ops[0], r->pipe.stage_ops[1], r->pipe.stage_ops[2]},
                   .pp_vstage_ms = r->pipe.vstage_ms, .pp_vstages = r->pipe.sched.v > 1 ? r->pp * r->pipe.sched.v : 0, .noise = r->ns.on ? s->noise : NULL,
                   .noise_by_replica = r->ns.rep, .dp = r->dp,
                   .nseg = r->ls.nseg && s->updated ? r->ls.nseg : 0, .seg_grad = r->ls.grad, .seg_weight = r->ls.weight,
                   .seg_update = r->ls.update, .sophia = c->optim.kind == OPT_SOPHIA, .ms_hessian = s->hess_ms,
                   .hess_loss = s->hess_loss, .hess_bytes = s->hess_bytes, .hess_tokens = (double)s->ntok,
                   .hess_skipped = s->hess_skipped};
    ev_step(&r->log, &e);
    return ST_OK;
}

Status tr_word_bad_ids(int64_t w, const TrainConfig *c, const int32_t *inp, const int32_t *tgt, long bad, Err *err) {
    if ((w >> 32) <= 0) return ST_OK;
    if (bad >= 0) /* every rank stops; the one that read it says what */
        return err_set(err, ST_ERR_INPUT, "--data %s: token id %d (input) / %d (target) in this step's batch is not below "
                       "the vocabulary size %d; expected the shards' ids as checked when they opened (was a shard rewritten "
                       "during the run?)", c->data, inp[bad], tgt[bad], c->model.vocab);
    return err_set(err, ST_ERR_INPUT, "--data %s: another rank's batch holds a token id not below the vocabulary size %d "
                   "(was a shard rewritten during the run?)", c->data, c->model.vocab);
}

int tr_val_due(long step, int val_every) { return val_every > 0 && (step % val_every == 0 || step == 1); }

/* Validation every val_every steps, at the end, when stopping, and right after a resume (so a bad
 * resume shows at once); generation samples every sample_every steps and at the end. */
static void step_validate(Run *r, Step *s) {
    const TrainConfig *c = &r->cfg;
    int after_resume = r->rs.step > 0 && r->attempt == r->rs.attempt + 1;
    int due = s->updated && tr_val_due(r->step, c->val_every);
    if (r->val.nshards && (due || s->last || after_resume || s->stopping)) {
        double tv = timer_ms();
        double vtok = 0;
        double vl = validate_loss(&r->g, &r->val, c->val_batches, r->inp, r->tgt, r->pp > 1 ? r->pipe.run : NULL, r->comm,
                                  &vtok);
        double vms = timer_ms() - tv;
        if (isnan(r->res->first_val)) r->res->first_val = vl;
        r->res->last_val = vl;
        if (!c->quiet) {
            printf("val   %5ld | loss %.4f | perplexity %.2f | %.0f ms\n", r->step, vl, exp(vl), vms);
            fflush(stdout);
        }
        ev_val(&r->log, r->step, vl, vtok, vms);
    }
    if (c->sample_every > 0 && s->updated && (r->step % c->sample_every == 0 || s->last)) log_sample(r, r->step);
}

/* One optimizer step through its stages; *stop is set when the run must end after it. */
Status tr_train_step(Run *r, int *stop, Err *err) {
    const TrainConfig *c = &r->cfg;
    Step s;
    memset(&s, 0, sizeof s);
    r->attempt++;
    s.next = r->step + 1;
    if (r->attempt >= c->debug_drop_first && r->attempt <= c->debug_drop_last) { /* test hook */
        loader_step_done(&r->train, r->dp, c->micro_batch, c->grad_accum);
        return ST_OK;
    }
    Status st;
    if ((st = step_data(r, &s, err)) != ST_OK) return st;
    s.hess_loss = NAN;
    if (optim_hess_due(&c->optim, s.next) && (st = step_hessian(r, &s, err)) != ST_OK) return st;
    step_micro_batches(r, &s);
    if ((st = step_grads(r, &s, err)) != ST_OK) return st;
    if ((st = step_health(r, &s, err)) != ST_OK) return st;
    if ((st = step_update(r, &s, err)) != ST_OK) return st;
    if ((st = step_checkpoint(r, &s, err)) != ST_OK) return st;
    if ((st = step_report(r, &s, err)) != ST_OK) return st;
    step_validate(r, &s);
    if (s.stopping) {
        r->res->preempted = 1, *stop = 1;
        /* Said by rank 0 (the others run quiet) even under --quiet ("no per-step lines"), on stderr
         * there: a run that stops early and exits 0 must say so and where it resumes (it was silent). */
        FILE *o = c->quiet ? stderr : stdout;
        if (r->comm->rank == 0) {
            if (tr_stop_pending()) fprintf(o, "stopped by signal %d after step %ld", tr_stop_pending(), r->step);
            else if (s.stop) fprintf(o, "stopped by a signal on another rank after step %ld", r->step);
            else fprintf(o, "stopped after step %ld (--stop-after)", r->step);
            fprintf(o, "%s\n", c->ckpt_dir[0] ? "; checkpoint saved, resume with --resume auto" : " (no --ckpt-dir: not saved)");
        }
    }
    return ST_OK;
}
