/* lora_train.c — LoRA fine-tuning (docs/lora.md): the base model frozen (no gradients, no optimizer
 * state), adapters (model/lora.h) trained with their own AdamW state, data-parallel over the
 * adapters' gradients; checkpoints of the adapters and their moments (ckpt/lora_ckpt.h).
 *
 * One step, as the full trainer's (DESIGN.md §2) but over the adapters only:
 *   fill the rank's k micro-batches; count the step's unmasked targets (one all-reduce)
 *   adapter grads = 0; per micro-batch j: forward (dscale 1/tokens, dropout counter
 *     ((step − 1)·dp + rank)·k + j, as the full trainer), backward (adapter grads +=)
 *   all-reduce the adapter gradients (sum) and the loss over dp
 *   global norm of the adapter gradients → clip factor → AdamW on the adapters (decay on A and B)
 * The loop is its own (not train_step.c's) because the full trainer's Par owns the base's
 * gradients, moments and ZeRO shards, which a frozen base does not have; what it shares with it
 * is the model, the loader, the optimizer, the schedule and the data order. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "ckpt/ckpt.h"
#include "ckpt/lora_ckpt.h"
#include "core/half.h"
#include "core/mem.h"
#include "core/stats.h"
#include "core/timer.h"
#include "model/gpt.h"
#include "model/lora.h"
#include "model/matmul.h"
#include "plan/plan.h"
#include "train/events.h"
#include "train/stop.h"
#include "train/train.h"
#include "train/train_internal.h"

typedef struct {
    TrainConfig cfg;
    Comm *comm, *own_comm;
    int dp, rank;           /* data-parallel group and this rank's place in it (dp_rank) */
    int tp, tp_rank;        /* tensor-parallel group: the base's and the adapters' slice held */
    LoraLayout full_lay;    /* tp > 1: the whole adapters' layout (checkpoints, --out) */
    Err hook_err;           /* the first failure of a tp collective inside forward/backward */
    uint64_t local_hash;    /* XXH3 of this rank's base buffer at start: the frozen check at the end */
    int in_backward;        /* test-only fault (ST_PAR_TEST_TP_FAULT): the tp sums of the backward skipped */
    int stop;               /* a SIGTERM/SIGINT reached some rank (agreed in the step's token count) */
    MemStats mem;
    Loader train, val;
    Gpt g;
    Lora lo;
    float *m, *v;           /* AdamW moments (MEM_MOMENTS): of every adapter float, or at ZeRO >= 1 of
                               this rank's shard [rank·S, (rank + 1)·S), S = total/dp */
    size_t mfloats;         /* floats of m and of v */
    int zero;
    /* ZeRO 3 (lora_moment_floats): the rank's piece of every block's adapters and of their gradient
     * sums (L · pc floats each); lo holds one block's window (dp · pc) that the model's hooks fill by an
     * all-gather before the block's forward and backward and reduce-scatter into sg after its backward. */
    size_t pc;
    float *sp, *sg;
    /* --lora-base-precision bf16 (LoraConfig.base_bf16): the blocks of this rank's base in bf16 (b16,
     * nb values), the embeddings and final norm in fp32 (b32: segment 0, then segment L + 1), and
     * the fp32 window (nwin) that the hooks widen a block into and point its views at. */
    int bf16;
    uint16_t *b16;
    float *b32, *win;
    size_t nb, n32, nwin;
    int32_t *inp, *tgt;     /* the step's k micro-batches (MEM_DATA) */
    size_t batch_ints;
    uint64_t base_hash;
    EventLog log;
    cJSON *config;          /* the run's config (events_config_json): in every checkpoint, checked on resume */
    /* MFU and the plan (docs/lora.md "Compute"): acct's fpt is LoRA's count (layout_lora_flops_per_token),
     * its peak the full trainer's (tr_peak_and_plan_input); plan_lora_step's prediction when have_plan. */
    RunAccounting acct;
    int threads_auto;
    PlanLoraStep plan;
    int have_plan;
    double *step_ms;        /* the loop's step times (step_cap), for the median */
    long nmeasured, step_cap;
    long step;
    long loop_step0;        /* the step the loop started at (a resume's), for the ETA */
    double loop_t0;         /* when it started (timer_ms) */
    int ckpt_lock;          /* --ckpt-dir's lock (tr_claim_outputs), -1 none */
    char resumed[4096];     /* the checkpoint resumed ("" none) */
    char last_ckpt[4200];   /* the newest checkpoint of this run, or the one it resumed ("" none) */
} LoraRun;

/* The whole model's adapter parameters (every tp rank's slices together). */
static size_t adapter_params(const LoraRun *r) { return r->full_lay.block_floats * (size_t)r->full_lay.L; }

/* Flags the LoRA loop does not implement: refused with one line each instead of ignored. */
static Status refuse(const TrainConfig *c, int world, Err *err) {
    TrainConfig d = train_default_config();
    const char *bad = NULL;
    if (c->pp > 1) bad = "--pp";
    else if (c->sp) bad = "--sp";
    else if (c->bf16 || c->fp16) bad = "--precision bf16/fp16 (LoRA runs an fp32 base)";
    else if (c->optim.kind != OPT_ADAMW && c->optim.kind != OPT_ADAM) bad = "--optimizer other than adamw or adam";
    else if (c->sample_every > 0) bad = "--sample-every";
    else if (c->log_layer_stats) bad = "--log-layer-stats";
    else if (c->ckpt_async) bad = "--ckpt-async";
    else if (c->health.policy != d.health.policy) bad = "--spike-policy skip/rollback";
    else if (c->keep_last != d.keep_last || c->keep_every != d.keep_every) bad = "--keep-last/--keep-every";
    else if (c->pp_schedule[0] || c->pp_layers[0] || c->interleave > 1 || c->pp_print_schedule) /* printed nothing */
        bad = "--pp-schedule/--pp-layers/--interleave/--pp-print-schedule";
    else if (c->mtbf_hours > 0) bad = "--mtbf";
    else if (memcmp(&c->health, &d.health, sizeof d.health)) bad = "--spike-*/--gnorm-spike-*/--max-nonfinite/--stall-window";
    else if (c->no_overlap || c->comm_timeout > 0) bad = "--no-overlap/--comm-timeout";
    else if (c->no_noise_scale) bad = "--no-noise-scale (no noise scale is estimated)";
    if (bad) return err_set(err, ST_ERR_INPUT, "%s: not supported with --lora-rank (LoRA) yet", bad);
    if (c->tp > 1 && c->lora.dropout > 0) /* lora_layout_init_tp's refusal, here where every rank agrees on it */
        return err_set(err, ST_ERR_INPUT, "--lora-dropout %g with --tp %d: expected 0 (the masks of a row-parallel layer's "
                       "column slice are not implemented)", c->lora.dropout, c->tp);
    int tp = c->tp > 1 ? c->tp : 1;
    if (world % tp || (c->dp != 0 && c->dp * tp != world))
        return err_set(err, ST_ERR_INPUT, "--dp %d --tp %d: with LoRA expected dp x tp = the world of %d ranks", c->dp, tp,
                       world);
    return ST_OK;
}

/* The adapters' configuration checked (lora_layout_init: rank within the narrowest targeted layer,
 * alpha, dropout, targets) before anything is allocated. */
static Status check_rank(const TrainConfig *c, Err *err) {
    LoraLayout ll;
    return lora_layout_init(&ll, &c->model, &c->lora, 1, err);
}

static void run_free(LoraRun *r) {
    events_close(&r->log);
    if (r->ckpt_lock >= 0) close(r->ckpt_lock), r->ckpt_lock = -1;
    cJSON_Delete(r->config);
    free(r->step_ms);
    mem_free(&r->mem, MEM_PARAMS, r->sp, r->mfloats * sizeof(float));
    mem_free(&r->mem, MEM_PARAMS, r->b16, r->nb * sizeof(uint16_t));
    mem_free(&r->mem, MEM_PARAMS, r->b32, r->n32 * sizeof(float));
    mem_free(&r->mem, MEM_PARAMS, r->win, r->nwin * sizeof(float));
    mem_free(&r->mem, MEM_GRADS, r->sg, r->mfloats * sizeof(float));
    mem_free(&r->mem, MEM_DATA, r->inp, r->batch_ints * sizeof(int32_t));
    mem_free(&r->mem, MEM_DATA, r->tgt, r->batch_ints * sizeof(int32_t));
    mem_free(&r->mem, MEM_MOMENTS, r->m, r->mfloats * sizeof(float));
    mem_free(&r->mem, MEM_MOMENTS, r->v, r->mfloats * sizeof(float));
    lora_free(&r->lo);
    gpt_free(&r->g);
    loader_close(&r->train);
    loader_close(&r->val);
    comm_finalize(r->own_comm);
}

/* XXH3 of the base as this rank stores it: its fp32 buffer, or under bf16 storage the bf16 blocks
 * then (seeded by their hash) the fp32 rest. */
static uint64_t lora_base_hash(const LoraRun *r) {
    if (!r->bf16) return XXH3_64bits(r->g.w.params, r->g.w.layout.total * sizeof(float));
    return XXH3_64bits_withSeed(r->b32, r->n32 * sizeof(float), XXH3_64bits(r->b16, r->nb * sizeof(uint16_t)));
}

/* The model's tp hooks over the tp group (the first failure is kept for the step to report). */
static void hook_allreduce(void *ctx, float *buf, size_t n, int max) {
    LoraRun *r = ctx;
    Err e;
    if (r->in_backward && r->cfg.faults.tp_skip_backward) return;
    if (comm_tp_allreduce_f32(r->comm, buf, n, max ? COMM_MAX : COMM_SUM, &e) != ST_OK && r->hook_err.status == ST_OK)
        r->hook_err = e;
}
static void hook_allgather(void *ctx, float *buf, size_t block) {
    LoraRun *r = ctx;
    Err e;
    if (comm_tp_allgather_f32(r->comm, buf, block, &e) != ST_OK && r->hook_err.status == ST_OK) r->hook_err = e;
}
static void hook_reduce_scatter(void *ctx, float *buf, size_t block) {
    LoraRun *r = ctx;
    Err e;
    if (comm_tp_reduce_scatter_f32(r->comm, buf, block, &e) != ST_OK && r->hook_err.status == ST_OK) r->hook_err = e;
}

/* ZeRO 3: block seg - 1's adapters gathered into the window (forward, and again for the backward,
 * whose gradient window starts at zero); its gradients reduce-scattered into the rank's piece of the
 * sums after its backward. Segments 0 and L + 1 (embeddings, head) have no adapters. */
static void z3_gather(LoraRun *r, int seg) {
    Err e;
    float *w = r->lo.params + (size_t)r->rank * r->pc;
    memcpy(w, r->sp + (size_t)(seg - 1) * r->pc, r->pc * sizeof(float));
    if (comm_allgather_f32(r->comm, w, r->lo.params, r->pc, &e) != ST_OK && r->hook_err.status == ST_OK) r->hook_err = e;
}
/* bf16 base: block seg - 1 widened into the window, its views pointed there (exact: bf16 → fp32). */
static void widen_block(LoraRun *r, int seg) {
    const ParamLayout *pl = &r->g.w.layout;
    size_t o = pl->seg_off[seg] - pl->seg_off[1], n = pl->seg_off[seg + 1] - pl->seg_off[seg];
    const uint16_t *h = r->b16 + o;
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)h[i] << 16;
        memcpy(&r->win[i], &u, sizeof u);
    }
    layout_segment_views(pl, seg, r->win, &r->g.w.p);
}
static void hook_before_forward(void *ctx, int seg) {
    LoraRun *r = ctx;
    if (seg < 1 || seg > r->lo.lay.L) return;
    if (r->bf16) widen_block(r, seg);
    if (r->zero >= 3) z3_gather(r, seg);
}
static void hook_before_backward(void *ctx, int seg) {
    LoraRun *r = ctx;
    if (seg < 1 || seg > r->lo.lay.L) return;
    if (r->bf16) widen_block(r, seg);
    if (r->zero < 3) return;
    z3_gather(r, seg);
    memset(r->lo.grads, 0, r->lo.pfloats * sizeof(float));
}
static void hook_grads_ready(void *ctx, int seg) {
    LoraRun *r = ctx;
    if (seg < 1 || seg > r->lo.lay.L || r->zero < 3) return;
    Err e;
    float *own = r->lo.grads + (size_t)r->rank * r->pc, *sum = r->sg + (size_t)(seg - 1) * r->pc;
    if (comm_reduce_scatter_f32(r->comm, r->lo.grads, own, r->pc, &e) != ST_OK && r->hook_err.status == ST_OK) r->hook_err = e;
    for (size_t i = 0; i < r->pc; i++) sum[i] += own[i];
}
/* ZeRO 3: the whole adapters-layout buffer from every rank's pieces (all ranks call; uses the
 * window, so only between steps), and a rank's pieces of a whole one. */
static Status z3_to_whole(LoraRun *r, const float *pieces, float *whole, Err *err) {
    const LoraLayout *ll = &r->lo.lay;
    Status st = ST_OK;
    memset(whole, 0, ll->total * sizeof(float));
    for (int l = 0; l < ll->L && st == ST_OK; l++) {
        float *w = r->lo.params + (size_t)r->rank * r->pc;
        memcpy(w, pieces + (size_t)l * r->pc, r->pc * sizeof(float));
        if ((st = comm_allgather_f32(r->comm, w, r->lo.params, r->pc, err)) == ST_OK)
            memcpy(whole + (size_t)l * ll->block_floats, r->lo.params, ll->block_floats * sizeof(float));
    }
    return st;
}
static void z3_from_whole(LoraRun *r, const float *whole, float *pieces) {
    const LoraLayout *ll = &r->lo.lay;
    for (int l = 0; l < ll->L; l++)
        for (size_t i = 0; i < r->pc; i++) {
            size_t j = (size_t)r->rank * r->pc + i;
            pieces[(size_t)l * r->pc + i] = j < ll->block_floats ? whole[(size_t)l * ll->block_floats + j] : 0.0f;
        }
}

/* tp > 1: the whole adapters-layout buffer (full_lay) of a local one, assembled from every tp rank's
 * (all ranks call; out: full_lay.total floats). */
static Status gather_full(LoraRun *r, const float *local, float *out, Err *err) {
    size_t T = r->lo.lay.total;
    float *g = mem_alloc(&r->mem, MEM_CKPT_STAGING, (size_t)r->tp * T * sizeof(float));
    if (!g) return err_set(err, ST_ERR_RUNTIME, "out of memory (LoRA tp gather)");
    memcpy(g + (size_t)r->tp_rank * T, local, T * sizeof(float));
    Status st = comm_tp_allgather_f32(r->comm, g, T, err);
    memset(out, 0, r->full_lay.total * sizeof(float));
    for (int k = 0; st == ST_OK && k < r->tp; k++) {
        LoraLayout lk;
        if ((st = lora_layout_init_tp(&lk, &r->cfg.model, &r->cfg.lora, r->dp, r->tp, k, err)) == ST_OK)
            lora_tp_copy(&lk, g + (size_t)k * T, &r->full_lay, out, 1);
    }
    mem_free(&r->mem, MEM_CKPT_STAGING, g, (size_t)r->tp * T * sizeof(float));
    return st;
}

/* The base: initialised from the seed, then --init-from's weights; its hash. */
static Status setup_model(LoraRun *r, Err *err) {
    TrainConfig *c = &r->cfg;
    GptOptions go = gpt_default_options();
    go.B = c->micro_batch, go.T = c->seq_len, go.threads = c->threads, go.recompute = c->recompute;
    go.frozen = 1; /* the base is never sharded over dp: ZeRO 0 */
    go.tp = r->tp, go.tp_rank = r->tp_rank;
    r->bf16 = c->lora.base_bf16;
    go.external_params = r->bf16; /* bf16 storage: this loop holds the base and points the views */
    Status st = gpt_init(&r->g, &c->model, &go, &r->mem, err);
    if (st != ST_OK) return st;
    r->g.hooks.ctx = r, r->g.hooks.tp_allreduce = hook_allreduce;
    r->g.hooks.tp_allgather = hook_allgather, r->g.hooks.tp_reduce_scatter = hook_reduce_scatter;
    /* The whole base (seed, then --init-from) and its hash; at tp > 1 then this rank's slices. */
    ParamLayout full;
    if (layout_init(&full, &c->model, 1) != 0) return err_set(err, ST_ERR_RUNTIME, "out of memory (the full layout)");
    int staged = r->tp > 1 || r->bf16;
    float *fbuf = staged ? mem_alloc(&r->mem, MEM_CKPT_STAGING, full.total * sizeof(float)) : r->g.w.params;
    if (!fbuf) st = err_set(err, ST_ERR_RUNTIME, "out of memory (the whole base)");
    GptWeights view = r->g.w;
    view.layout = full, view.params = fbuf;
    if (st == ST_OK) gpt_init_params_buf(&full, fbuf, c->seed, c->threads);
    if (st == ST_OK && c->init_from[0] && (st = ckpt_init_from(&view, c->init_from, err)) != ST_OK) err_prefix(err, "--init-from");
    if (st == ST_OK) r->base_hash = XXH3_64bits(fbuf, full.total * sizeof(float));
    /* lbuf: this rank's base in fp32 (its tp slices), in the model's buffer, or with bf16 storage
     * staged here to be rounded from. */
    const ParamLayout *pl = &r->g.w.layout;
    float *lbuf = r->tp == 1 ? fbuf : r->bf16 ? NULL : r->g.w.params;
    if (st == ST_OK && r->tp > 1 && r->bf16 && !(lbuf = mem_alloc(&r->mem, MEM_CKPT_STAGING, pl->total * sizeof(float))))
        st = err_set(err, ST_ERR_RUNTIME, "out of memory (this rank's slice of the base)");
    if (st == ST_OK && r->tp > 1) layout_tp_copy(pl, lbuf, &full, fbuf, 0, 1);
    if (st == ST_OK && r->bf16) { /* the blocks rounded to bf16 (nearest even), the rest kept in fp32 */
        int L = pl->cfg.n_layer;
        size_t b0 = pl->seg_off[1], b1 = pl->seg_off[L + 1];
        r->nb = b1 - b0, r->n32 = pl->total - r->nb, r->nwin = lora_base_window_floats(pl);
        r->b16 = mem_alloc(&r->mem, MEM_PARAMS, r->nb * sizeof(uint16_t));
        r->b32 = mem_alloc(&r->mem, MEM_PARAMS, r->n32 * sizeof(float));
        r->win = mem_alloc(&r->mem, MEM_PARAMS, r->nwin * sizeof(float));
        if (!r->b16 || !r->b32 || !r->win) st = err_set(err, ST_ERR_RUNTIME, "out of memory (the bf16 base)");
        for (size_t i = 0; st == ST_OK && i < r->nb; i++) r->b16[i] = half_bf16(lbuf[b0 + i]);
        if (st == ST_OK) {
            memcpy(r->b32, lbuf, b0 * sizeof(float));
            memcpy(r->b32 + b0, lbuf + b1, (pl->total - b1) * sizeof(float));
            memset(r->win, 0, r->nwin * sizeof(float));
            layout_segment_views(pl, 0, r->b32, &r->g.w.p);
            layout_segment_views(pl, L + 1, r->b32 + b0, &r->g.w.p);
            r->g.hooks.before_forward = hook_before_forward, r->g.hooks.before_backward = hook_before_backward;
        }
    }
    if (r->tp > 1 && r->bf16) mem_free(&r->mem, MEM_CKPT_STAGING, lbuf, pl->total * sizeof(float));
    if (staged) mem_free(&r->mem, MEM_CKPT_STAGING, fbuf, full.total * sizeof(float));
    layout_free(&full);
    if (st != ST_OK) return st;
    r->local_hash = lora_base_hash(r);
    r->g.s.dropout_seed = c->seed ^ 0xd509u;
    LoraLayout ll;
    if ((st = lora_layout_init_tp(&ll, &c->model, &c->lora, r->dp, r->tp, r->tp_rank, err)) != ST_OK) return st;
    if ((st = lora_layout_init(&r->full_lay, &c->model, &c->lora, 1, err)) != ST_OK) return st;
    size_t N = (size_t)c->micro_batch * c->seq_len;
    r->mfloats = lora_moment_floats(&ll, r->dp, r->zero);
    if (r->zero >= 3) {
        r->pc = lora_zero3_piece(&ll, r->dp);
        if ((st = lora_init_window(&r->lo, &ll, N, c->threads, (size_t)r->dp * r->pc, &r->mem, err)) != ST_OK) return st;
        r->sp = mem_alloc(&r->mem, MEM_PARAMS, r->mfloats * sizeof(float));
        r->sg = mem_alloc(&r->mem, MEM_GRADS, r->mfloats * sizeof(float));
        float *w = mem_alloc(&r->mem, MEM_CKPT_STAGING, ll.total * sizeof(float));
        if (!r->sp || !r->sg || !w) {
            mem_free(&r->mem, MEM_CKPT_STAGING, w, ll.total * sizeof(float));
            return err_set(err, ST_ERR_RUNTIME, "out of memory (LoRA ZeRO 3 pieces)");
        }
        lora_init_params_buf(&ll, w, c->seed);
        z3_from_whole(r, w, r->sp);
        memset(r->sg, 0, r->mfloats * sizeof(float));
        mem_free(&r->mem, MEM_CKPT_STAGING, w, ll.total * sizeof(float));
        r->g.hooks.before_forward = hook_before_forward, r->g.hooks.before_backward = hook_before_backward;
        r->g.hooks.grads_ready = hook_grads_ready;
    } else {
        if ((st = lora_init(&r->lo, &ll, N, c->threads, &r->mem, err)) != ST_OK) return st;
        lora_init_params(&r->lo, c->seed);
    }
    gpt_set_lora(&r->g, &r->lo);
    r->m = mem_alloc(&r->mem, MEM_MOMENTS, r->mfloats * sizeof(float));
    r->v = mem_alloc(&r->mem, MEM_MOMENTS, r->mfloats * sizeof(float));
    r->batch_ints = (size_t)c->grad_accum * c->micro_batch * c->seq_len;
    r->inp = mem_alloc(&r->mem, MEM_DATA, r->batch_ints * sizeof(int32_t));
    r->tgt = mem_alloc(&r->mem, MEM_DATA, r->batch_ints * sizeof(int32_t));
    if (!r->m || !r->v || !r->inp || !r->tgt) return err_set(err, ST_ERR_RUNTIME, "out of memory (LoRA moments, batches)");
    memset(r->m, 0, r->mfloats * sizeof(float)), memset(r->v, 0, r->mfloats * sizeof(float));
    return ST_OK;
}

/* The checkpoint against this run: its LoRA settings, document masking, base, run length and (where
 * state.json records it, since 2026-11-29) every trajectory field of its config, --override naming
 * the ones allowed to change, as the full trainer's resume (an lr, batch or data changed was taken). */
static Status resume_check(LoraRun *r, const char *path, const LoraCkptMeta *meta, const LoraConfig *lc,
                           const ModelConfig *mc, Err *err) {
    TrainConfig *c = &r->cfg;
    const LoraConfig *cur = &r->lo.lay.cfg;
    if (lc->rank != cur->rank || lc->alpha != cur->alpha || lc->dropout != cur->dropout || lc->targets != cur->targets ||
        lc->base_bf16 != cur->base_bf16) {
        char t0[64], t1[64];
        lora_targets_string(lc->targets, t0, sizeof t0), lora_targets_string(cur->targets, t1, sizeof t1);
        return err_set(err, ST_ERR_INPUT, "--resume %s: the checkpoint has LoRA rank %d alpha %g dropout %g targets %s base "
                       "%s, this run rank %d alpha %g dropout %g targets %s base %s", path, lc->rank, lc->alpha, lc->dropout,
                       t0, lc->base_bf16 ? "bf16" : "fp32", cur->rank, cur->alpha, cur->dropout, t1,
                       cur->base_bf16 ? "bf16" : "fp32");
    }
    if (mc->doc_mask != c->model.doc_mask || (mc->doc_mask && mc->doc_eot != c->model.doc_eot))
        return err_set(err, ST_ERR_INPUT, "--resume %s: model.doc_mask: the checkpoint was trained %s, this run %s", path,
                       mc->doc_mask ? "with --doc-mask" : "without --doc-mask",
                       c->model.doc_mask ? "with it (or another EOT)" : "without it");
    if (meta->base_hash != r->base_hash)
        return err_set(err, ST_ERR_INPUT, "--resume %s: the base weights differ from the checkpoint's (XXH3 %016llx, "
                       "checkpoint %016llx from %s): give the same --init-from / --seed", path,
                       (unsigned long long)r->base_hash, (unsigned long long)meta->base_hash,
                       meta->init_from[0] ? meta->init_from : "a random base");
    if (meta->step >= c->steps)
        return err_set(err, ST_ERR_INPUT, "--steps %ld: the checkpoint %s is already at step %ld (extend --steps)", c->steps,
                       path, meta->step);
    if (!meta->config) return ST_OK; /* a checkpoint from before its config was recorded */
    char buf[512], report[2048] = "";
    snprintf(buf, sizeof buf, "%s", c->overrides);
    const char *ov[32];
    int nov = tr_split_list(buf, ov, 32);
    Status st = ckpt_check_override_names(meta->config, r->config, ov, nov, err);
    if (st == ST_OK) st = ckpt_check_config(meta->config, r->config, ov, nov, report, sizeof report, err);
    if (st != ST_OK) return err_prefix(err, "--resume %s", path), st;
    if (report[0] && r->comm->rank == 0 && !c->quiet) printf("resume: %s\n", report);
    return ST_OK;
}

/* --resume: the adapters, their moments, the step and the data order; the base must be the one the
 * checkpoint was trained on (its hash). */
static Status resume(LoraRun *r, Err *err) {
    TrainConfig *c = &r->cfg;
    if (!c->resume[0]) return ST_OK;
    if (!strcmp(c->resume, "auto") && !c->ckpt_dir[0])
        return err_set(err, ST_ERR_INPUT, "--resume auto: expected --ckpt-dir to search, found none");
    char path[4096];
    int is_auto = !strcmp(c->resume, "auto");
    Status st = ckpt_lora_resolve(c->ckpt_dir, c->resume, path, sizeof path, err);
    /* auto with `latest` naming a damaged one (no state.json, not JSON): path is set, the fallbacks below */
    if ((st != ST_OK && !(is_auto && path[0])) || !path[0]) return st;
    LoraCkptMeta meta;
    LoraConfig lc;
    ModelConfig mc;
    /* auto: the newest checkpoint that verifies, the ones skipped said (a damaged newest one failed
     * the resume with older good ones beside it) */
    if (st == ST_OK) st = ckpt_lora_read_meta(path, &meta, &lc, &mc, err);
    if (st != ST_OK && is_auto) {
        long steps[256];
        int n = ckpt_lora_steps(c->ckpt_dir, steps, 256);
        char first[sizeof err->msg];
        snprintf(first, sizeof first, "%s", err->msg);
        for (int i = 0; i < n && st != ST_OK; i++) {
            char cand[4096];
            snprintf(cand, sizeof cand, "%s/step_%08ld", c->ckpt_dir, steps[i]);
            if (!strcmp(cand, path)) continue;
            if ((st = ckpt_lora_read_meta(cand, &meta, &lc, &mc, err)) == ST_OK) {
                if (r->comm->rank == 0 && !c->quiet) printf("resume: skipped %s (%s)\n", path, first);
                else if (r->comm->rank == 0) fprintf(stderr, "scaletrain train: resume: skipped %s (%s)\n", path, first);
                snprintf(path, sizeof path, "%s", cand);
            }
        }
        if (st != ST_OK) return err_set(err, ST_ERR_INPUT, "--resume auto: no LoRA checkpoint in %s verifies (the newest: %s)",
                                        c->ckpt_dir, first);
    }
    if (st != ST_OK) return st;
    st = resume_check(r, path, &meta, &lc, &mc, err);
    ckpt_lora_meta_free(&meta);
    if (st != ST_OK) return st;
    /* The whole adapters and moments (the file's layout), then this rank's tp slices, then its
     * ZeRO shard of the moments. */
    size_t total = r->lo.lay.total;
    const LoraLayout *fl = r->tp > 1 ? &r->full_lay : &r->lo.lay;
    size_t F = fl->total, nst = 3 * F + 3 * total;
    float *f = mem_alloc(&r->mem, MEM_CKPT_STAGING, nst * sizeof(float));
    if (!f) return err_set(err, ST_ERR_RUNTIME, "out of memory (LoRA resume staging)");
    float *lp = f + 3 * F, *lm = lp + total, *lv = lm + total; /* this rank's tp slice, whole over dp */
    if ((st = ckpt_lora_load(path, fl, f, f + F, f + 2 * F, err)) == ST_OK) {
        if (r->tp > 1) {
            lora_tp_copy(&r->lo.lay, lp, fl, f, 0);
            lora_tp_copy(&r->lo.lay, lm, fl, f + F, 0), lora_tp_copy(&r->lo.lay, lv, fl, f + 2 * F, 0);
        } else {
            memcpy(lp, f, total * sizeof(float));
            memcpy(lm, f + F, total * sizeof(float)), memcpy(lv, f + 2 * F, total * sizeof(float));
        }
        size_t off = r->mfloats < total ? (size_t)r->rank * r->mfloats : 0;
        if (r->zero >= 3) { /* the rank's pieces */
            z3_from_whole(r, lp, r->sp), z3_from_whole(r, lm, r->m), z3_from_whole(r, lv, r->v);
        } else {
            memcpy(r->lo.params, lp, total * sizeof(float));
            memcpy(r->m, lm + off, r->mfloats * sizeof(float)), memcpy(r->v, lv + off, r->mfloats * sizeof(float));
        }
    }
    mem_free(&r->mem, MEM_CKPT_STAGING, f, nst * sizeof(float));
    if (st != ST_OK) return st;
    loader_set_state(&r->train, meta.loader);
    r->step = meta.step;
    snprintf(r->resumed, sizeof r->resumed, "%s", path);
    snprintf(r->last_ckpt, sizeof r->last_ckpt, "%s", path);
    if (r->comm->rank == 0 && !c->quiet) printf("lora: resumed from %s (step %ld)\n", path, meta.step);
    return ST_OK;
}

static Status save_files(LoraRun *r, const LoraLayout *ll, const float *p, const float *m, const float *v, Err *err);

static Status save_ranks(LoraRun *r, Err *err);

/* Every rank saves (collectives inside) and notes the checkpoint (the non-finite stop names it). */
static Status save(LoraRun *r, Err *err) {
    Status st = save_ranks(r, err);
    if (st == ST_OK && r->cfg.ckpt_dir[0])
        snprintf(r->last_ckpt, sizeof r->last_ckpt, "%s/step_%08ld", r->cfg.ckpt_dir, r->step);
    return st;
}

static Status save_ranks(LoraRun *r, Err *err) {
    TrainConfig *c = &r->cfg;
    if (!c->ckpt_dir[0]) return ST_OK;
    size_t total = r->lo.lay.total;
    float *m = r->m, *v = r->v, *mv = NULL;
    Status st = ST_OK;
    if (r->zero >= 3) { /* the tp slice's adapters and moments from every dp rank's pieces (all ranks call) */
        size_t F = r->tp > 1 ? r->full_lay.total : 0, n = 3 * total + 3 * F;
        float *f = mem_alloc(&r->mem, MEM_CKPT_STAGING, n * sizeof(float)), *g = f + 3 * total;
        if (!f) return err_set(err, ST_ERR_RUNTIME, "out of memory (LoRA checkpoint staging)");
        st = z3_to_whole(r, r->sp, f, err);
        if (st == ST_OK) st = z3_to_whole(r, r->m, f + total, err);
        if (st == ST_OK) st = z3_to_whole(r, r->v, f + 2 * total, err);
        for (int i = 0; st == ST_OK && r->tp > 1 && i < 3; i++) /* then the whole adapters over tp */
            st = gather_full(r, f + (size_t)i * total, g + (size_t)i * F, err);
        if (st == ST_OK && r->comm->rank == 0)
            st = r->tp > 1 ? save_files(r, &r->full_lay, g, g + F, g + 2 * F, err)
                           : save_files(r, &r->lo.lay, f, f + total, f + 2 * total, err);
        mem_free(&r->mem, MEM_CKPT_STAGING, f, n * sizeof(float));
        return st;
    }
    if (r->mfloats < total) { /* ZeRO >= 1: every dp rank's shard of the moments gathered (all ranks call) */
        if (!(mv = mem_alloc(&r->mem, MEM_CKPT_STAGING, 2 * total * sizeof(float))))
            return err_set(err, ST_ERR_RUNTIME, "out of memory (LoRA moments staging)");
        m = mv, v = mv + total;
        st = comm_allgather_f32(r->comm, r->m, m, r->mfloats, err);
        if (st == ST_OK) st = comm_allgather_f32(r->comm, r->v, v, r->mfloats, err);
    }
    if (st == ST_OK && r->tp > 1) { /* every tp rank's slices assembled (all ranks call) */
        size_t F = r->full_lay.total;
        float *f = mem_alloc(&r->mem, MEM_CKPT_STAGING, 3 * F * sizeof(float));
        if (!f) st = err_set(err, ST_ERR_RUNTIME, "out of memory (LoRA checkpoint staging)");
        if (st == ST_OK) st = gather_full(r, r->lo.params, f, err);
        if (st == ST_OK) st = gather_full(r, m, f + F, err);
        if (st == ST_OK) st = gather_full(r, v, f + 2 * F, err);
        if (st == ST_OK && r->comm->rank == 0) st = save_files(r, &r->full_lay, f, f + F, f + 2 * F, err);
        mem_free(&r->mem, MEM_CKPT_STAGING, f, 3 * F * sizeof(float));
    } else if (st == ST_OK && r->comm->rank == 0) {
        st = save_files(r, &r->lo.lay, r->lo.params, m, v, err);
    }
    mem_free(&r->mem, MEM_CKPT_STAGING, mv, 2 * total * sizeof(float));
    return st;
}

/* Rank 0 writes the checkpoint of the adapters p and the whole moments m, v (layout ll). */
static Status save_files(LoraRun *r, const LoraLayout *ll, const float *p, const float *m, const float *v, Err *err) {
    TrainConfig *c = &r->cfg;
    LoraCkptMeta meta;
    memset(&meta, 0, sizeof meta);
    meta.step = r->step, meta.loader = loader_get_state(&r->train);
    snprintf(meta.init_from, sizeof meta.init_from, "%s", c->init_from);
    snprintf(meta.tokenizer, sizeof meta.tokenizer, "%s", c->tokenizer);
    meta.base_seed = c->seed, meta.base_hash = r->base_hash;
    meta.config = r->config;
    char out[4200];
    double t0 = timer_ms();
    Status st = ckpt_lora_save(c->ckpt_dir, &c->model, ll, &meta, p, m, v, out, sizeof out, err);
    if (st == ST_OK) ev_ckpt_lora(&r->log, r->step, timer_ms() - t0, out);
    return st;
}

/* The global batch in tokens: B · k · dp sequences of T (the full trainer's effective_batch). */
static long long batch_tokens(const LoraRun *r) {
    const TrainConfig *c = &r->cfg;
    return (long long)c->micro_batch * c->grad_accum * r->dp * c->seq_len;
}

/* The full trainer's val record (events.h) and its console line. */
static void log_val(LoraRun *r, double vl, long vtok, double ms) {
    ev_val(&r->log, r->step, vl, (double)vtok, ms);
    if (r->comm->rank == 0 && !r->cfg.quiet)
        printf("val   %5ld | loss %.4f | perplexity %.2f | %.0f ms | lora\n", r->step, vl, exp(vl), ms);
}

/* The validation loss over --val-batches, logged (val record and console line) when it succeeds. */
static Status validation(LoraRun *r, double *loss, Err *err) {
    TrainConfig *c = &r->cfg;
    double t0 = timer_ms();
    *loss = NAN;
    int B = c->micro_batch, T = c->seq_len;
    double sum = 0;
    long ntok = 0;
    for (int j = 0; j < c->val_batches; j++) {
        uint64_t first = (uint64_t)j * B;
        if (first >= r->val.nwin) break;
        int rows = (uint64_t)B < r->val.nwin - first ? B : (int)(r->val.nwin - first);
        loader_fill(&r->val, first, rows, r->inp, r->tgt);
        if (tr_bad_id(r->inp, r->tgt, (size_t)rows * T, c->model.vocab) >= 0) /* a validation shard rewritten */
            return err_set(err, ST_ERR_INPUT, "--val-data %s: a token id not below the vocabulary size %d (was a shard "
                           "rewritten during the run?)", c->val_data, c->model.vocab);
        for (size_t i = 0; i < (size_t)rows * T; i++) ntok += r->tgt[i] >= 0;
        sum += gpt_forward(&r->g, r->inp, r->tgt, rows, T, 0.0f, 0, 0);
    }
    Status st = gpt_status(&r->g, err);
    *loss = ntok ? sum / ntok : NAN;
    if (st == ST_OK) log_val(r, *loss, ntok, timer_ms() - t0);
    return st;
}

/* One optimizer step over the adapters. */
static Status step(LoraRun *r, TrainResult *res, Err *err) {
    TrainConfig *c = &r->cfg;
    int B = c->micro_batch, T = c->seq_len, k = c->grad_accum;
    double t0 = timer_ms();
    for (int j = 0; j < k; j++)
        loader_fill_rank(&r->train, r->rank, r->dp, j, B, k, r->inp + (size_t)j * B * T, r->tgt + (size_t)j * B * T);
    loader_step_done(&r->train, r->dp, B, k);
    /* tokens counted once per dp replica (its tp ranks share the batch); --doc-mask: the batch's
     * attention span (layout_doc_span) for the step's FLOPs, as the full trainer counts it */
    int dm = c->model.doc_mask;
    double span = dm && r->tp_rank == 0 ? layout_doc_span(r->inp, B * k, T, c->model.doc_eot) : 0;
    long bad = tr_bad_id(r->inp, r->tgt, r->batch_ints, c->model.vocab);
    int64_t v[3] = {0, tr_stop_word(tr_stop_pending(), bad), (int64_t)llround(span * (double)B * k * T)};
    for (size_t i = 0; i < r->batch_ints && r->tp_rank == 0; i++) v[0] += r->tgt[i] >= 0;
    Status st = comm_allreduce_i64(r->comm, v, 3, COMM_SUM, err);
    if (st == ST_OK) st = tr_word_bad_ids(v[1], c, r->inp, r->tgt, bad, err);
    if (st != ST_OK) return st;
    int64_t ntok = v[0];
    r->stop = tr_word_stop(v[1]);
    long next = r->step + 1;
    float dscale = ntok > 0 ? 1.0f / (float)ntok : 0.0f;
    if (r->zero >= 3) memset(r->sg, 0, r->mfloats * sizeof(float)); /* the hooks add every micro-batch's sums */
    else memset(r->lo.grads, 0, r->lo.lay.total * sizeof(float));
    double loss_sum = 0;
    uint64_t drop0 = ((uint64_t)(next - 1) * r->dp + r->rank) * k;
    for (int j = 0; j < k; j++) {
        size_t off = (size_t)j * B * T;
        loss_sum += gpt_forward(&r->g, r->inp + off, r->tgt + off, B, T, dscale, 1, drop0 + j);
        r->in_backward = 1;
        gpt_backward(&r->g);
        r->in_backward = 0;
    }
    if ((st = gpt_status(&r->g, err)) != ST_OK) return st;
    if (r->hook_err.status != ST_OK) return *err = r->hook_err, r->hook_err.status;
    if (r->tp_rank != 0) loss_sum = 0; /* every tp rank computed every row's loss: count it once */
    /* The update's range: every adapter float, or at ZeRO >= 1 this rank's shard [off, off + S). */
    size_t total = r->lo.lay.total, S = r->mfloats, off = S < total && r->zero < 3 ? (size_t)r->rank * S : 0;
    float *gr = r->zero >= 3 ? r->sg : r->lo.grads + off, *pr = r->zero >= 3 ? r->sp : r->lo.params + off;
    double norm;
    if (r->comm->world > 1 && (st = comm_allreduce_f64(r->comm, &loss_sum, 1, COMM_SUM, err)) != ST_OK) return st;
    if (r->zero >= 3) { /* the pieces hold the dp sums already (the hooks); norm from their squares */
        if (c->faults.grad_scale != 0)
            for (size_t i = 0; i < S; i++) gr[i] *= c->faults.grad_scale;
        double sq;
        if (r->tp == 1) {
            sq = optim_l2_norm(gr, S, c->threads);
            sq *= sq;
        } else { /* the pieces' split elements, and their replicated ones from tp rank 0 only */
            double sp, rp;
            lora_norm_sq_zero3(&r->lo.lay, gr, r->dp, r->rank, &sp, &rp);
            sq = sp + (r->tp_rank == 0 ? rp : 0.0);
        }
        if ((st = comm_allreduce_f64(r->comm, &sq, 1, COMM_SUM, err)) != ST_OK) return st;
        norm = sqrt(sq);
    } else if (r->dp > 1 && r->zero >= 2) { /* the shard's sums only, and the norm from the shards' squares */
        if ((st = comm_reduce_scatter_f32(r->comm, r->lo.grads, gr, S, err)) != ST_OK) return st;
        if (c->faults.grad_scale != 0) /* test-only (ST_PAR_TEST_GRAD_SCALE): a wrong reduction */
            for (size_t i = 0; i < S; i++) gr[i] *= c->faults.grad_scale;
        double sq;
        if (r->tp == 1) {
            sq = optim_l2_norm(gr, S, c->threads);
            sq *= sq;
        } else { /* the shard's split elements, and its replicated ones from tp rank 0 only */
            double sp, rp;
            lora_norm_sq(&r->lo.lay, r->lo.grads, off, off + S, &sp, &rp);
            sq = sp + (r->tp_rank == 0 ? rp : 0.0);
        }
        if ((st = comm_allreduce_f64(r->comm, &sq, 1, COMM_SUM, err)) != ST_OK) return st;
        norm = sqrt(sq);
    } else {
        if (r->dp > 1 && (st = comm_allreduce_f32(r->comm, r->lo.grads, r->lo.grads, total, err)) != ST_OK) return st;
        if (c->faults.grad_scale != 0)
            for (size_t i = 0; i < total; i++) r->lo.grads[i] *= c->faults.grad_scale;
        if (r->tp == 1) {
            norm = optim_l2_norm(r->lo.grads, total, c->threads);
        } else { /* the split tensors' squares from every tp rank, the replicated ones once */
            double sp, rp;
            lora_norm_sq(&r->lo.lay, r->lo.grads, 0, total, &sp, &rp);
            double sq = r->rank == 0 ? sp + (r->tp_rank == 0 ? rp : 0.0) : 0.0;
            if ((st = comm_allreduce_f64(r->comm, &sq, 1, COMM_SUM, err)) != ST_OK) return st;
            norm = sqrt(sq);
        }
    }
    float scale = optim_clip_scale(norm, c->grad_clip), lr = sched_lr(&c->sched, next);
    /* A non-finite loss or norm (an lr or alpha too large) is not applied and ends the run: applied, it
     * made every adapter NaN, and the run went on to save them to its checkpoints and --out, exit 0.
     * Every rank agrees (loss and norm are the job's); the full trainer's skip policy (--max-nonfinite)
     * is refused with LoRA. */
    if (!isfinite(loss_sum) || !isfinite(norm)) {
        double loss = ntok > 0 ? loss_sum / (double)ntok : 0.0, ms = timer_ms() - t0;
        ev_lora_step(&r->log, next, loss, lr, norm, NAN, (long long)ntok, (long long)next * batch_tokens(r), ms, 0.0);
        /* NaN printed as "nan": printf's "-nan" for 0/0 reads like a sign that means something */
        double pl = isnan(loss) ? fabs(loss) : loss, pn = isnan(norm) ? fabs(norm) : norm;
        if (r->comm->rank == 0 && !c->quiet)
            printf("step %5ld/%ld | loss %.4f | lr %.2e | norm %.3f | not applied | lora\n", next, c->steps, pl, lr, pn),
                fflush(stdout);
        return err_set(err, ST_ERR_RUNTIME, "step %ld: non-finite loss or gradient norm (loss %g, grad norm %g): the "
                       "adapters were not updated and the run stops (lower --lr or --lora-alpha); last good checkpoint: "
                       "%s", next, pl, pn,
                       r->last_ckpt[0] ? r->last_ckpt : c->ckpt_dir[0] ? "none yet" : "none (no --ckpt-dir)");
    }
    OptimRange all = {0, S, 1, 1.0f}; /* decay on A and B (PEFT under HF Trainer) */
    optim_step(&c->optim, pr, gr, r->m, r->v, &all, 1, next, lr, scale, c->threads);
    if (r->zero < 3 && S < total && (st = comm_allgather_f32(r->comm, r->lo.params + off, r->lo.params, S, err)) != ST_OK) return st;
    r->step = next;
    double loss = ntok > 0 ? loss_sum / (double)ntok : 0.0, ms = timer_ms() - t0;
    if (res->steps_done == 0) res->first_loss = loss;
    res->last_loss = loss, res->steps_done++;
    if (r->nmeasured < r->step_cap) r->step_ms[r->nmeasured++] = ms;
    /* MFU: the model FLOPs of LoRA's step (at the batch's span under --doc-mask) over the job's peak */
    double fpt = dm ? layout_lora_flops_per_token(&c->model, (double)v[2] / (double)batch_tokens(r),
                                                  (double)adapter_params(r))
                    : r->acct.fpt;
    double tok_s = (double)batch_tokens(r) / (ms * 1e-3);
    double mfu = tr_step_mfu(&r->acct, &r->log, c, next, fpt * tok_s, r->comm->rank == 0 && !c->quiet);
    ev_lora_step(&r->log, next, loss, lr, norm, norm * scale, (long long)ntok, (long long)next * batch_tokens(r), ms, mfu);
    if (r->comm->rank == 0 && !c->quiet) { /* the full trainer's progress line */
        double elapsed = (timer_ms() - r->loop_t0) * 1e-3, done = (double)(next - r->loop_step0);
        char el[32], et[32];
        tr_fmt_duration(elapsed, el, sizeof el), tr_fmt_duration(elapsed / done * (double)(c->steps - next), et, sizeof et);
        printf("step %5ld/%ld | loss %.4f | lr %.2e | norm %.3f -> %.3f | %7.1f ms | %6.0f tok/s | MFU %4.1f%% | %s, ETA %s "
               "| lora\n", next, c->steps, loss, lr, norm, norm * scale, ms, tok_s, 100.0 * mfu, el, et);
        fflush(stdout);
    }
    return ST_OK;
}

/* MFU's numerator and denominator and the plan of this run (docs/lora.md "Compute"): LoRA's FLOPs
 * per token, the full trainer's peak (tr_peak_and_plan_input, summed over ranks), and plan_lora_step on
 * the hardware the full trainer's plan would use (train_plan_input). Collective. */
static Status setup_accounting(LoraRun *r, Err *err) {
    TrainConfig *c = &r->cfg;
    double *by = calloc((size_t)r->comm->world, sizeof *by);
    if (!by) return err_set(err, ST_ERR_RUNTIME, "out of memory (peaks per rank)");
    PlanInput pi;
    Status st = tr_peak_and_plan_input(c, r->g.be, r->comm, r->dp, r->tp, 1, &r->acct, by, &pi, err);
    free(by);
    if (st != ST_OK) return st;
    pi.lora_dropout = c->lora.dropout;
    double adapters = (double)adapter_params(r);
    r->acct.fpt = layout_lora_flops_per_token(&c->model, c->seq_len, adapters);
    r->acct.batch_seqs = (long long)c->micro_batch * c->grad_accum * r->dp, r->acct.batch_tokens = batch_tokens(r);
    r->step_cap = tr_step_cap(c->steps);
    if (!(r->step_ms = calloc((size_t)r->step_cap, sizeof *r->step_ms)))
        return err_set(err, ST_ERR_RUNTIME, "out of memory (step times)");
    PlanResult *full = calloc(1, sizeof *full);
    Err pe;
    r->have_plan = full && plan_predict_step(&pi, full, &pe) == ST_OK &&
                   plan_lora_step(&pi, full, adapters, (double)r->mfloats, lora_input_width(&r->lo.lay), r->zero, &r->plan,
                                  &pe) == ST_OK && r->plan.step > 0;
    free(full);
    return ST_OK;
}

Status lora_train_run(const TrainConfig *cfg, TrainResult *res, Err *err) {
    LoraRun run;
    memset(&run, 0, sizeof run);
    LoraRun *r = &run;
    r->ckpt_lock = -1;
    r->cfg = *cfg;
    TrainConfig *c = &r->cfg;
    memset(res, 0, sizeof *res);
    res->first_val = res->last_val = NAN;
    Status st = ST_OK;
    r->comm = c->comm;
    if (!r->comm && (st = comm_init_local(&r->own_comm, err)) != ST_OK) return st;
    if (!r->comm) r->comm = r->own_comm;
    int world = r->comm->world;
    /* the flags' refusals: the same on every rank (the config is), printed once by rank 0 */
    if ((st = refuse(c, world, err)) != ST_OK) {
        res->err_everywhere = 1;
        goto done;
    }
    r->zero = c->zero;
    r->tp = c->tp > 1 ? c->tp : 1, r->dp = world / r->tp;
    if ((st = comm_set_grid(r->comm, r->dp, r->tp, 1, err)) != ST_OK) goto done;
    r->rank = r->comm->dp_rank, r->tp_rank = r->comm->tp_rank;
    r->threads_auto = c->threads == 0;
    if ((st = train_threads(r->comm, &c->threads, NULL, NULL, c->quiet, err)) != ST_OK) goto done;
    mm_set_threads(c->threads);
    int lflags = LOADER_SHUFFLE | (c->no_pack ? LOADER_NO_PACK : 0);
    if ((st = loader_open(&r->train, c->data, c->seq_len, 0, c->tokenizer_hash, c->data_seed, lflags, err)) != ST_OK) goto done;
    if (c->model.vocab == 0) c->model.vocab = (int)loader_header_vocab(&r->train);
    /* --doc-mask: documents end with the shards' EOT, as the full trainer (train_setup.c); set before
     * gpt_init (setup_model) reads it and before the checkpoints' config.json record it. */
    if (c->model.doc_mask) c->model.doc_eot = (int)loader_header_eot(&r->train);
    if ((st = model_config_validate(&c->model, err)) != ST_OK) goto done;
    if ((st = check_rank(c, err)) != ST_OK) {
        res->err_everywhere = 1; /* the flags and the model: the same on every rank */
        goto done;
    }
    if ((st = loader_check_vocab(&r->train, (uint32_t)c->model.vocab, err)) != ST_OK) goto done;
    if (c->val_data[0] && (st = loader_open(&r->val, c->val_data, c->seq_len, (uint32_t)c->model.vocab, c->tokenizer_hash,
                                            0, c->no_pack ? LOADER_NO_PACK : 0, err)) != ST_OK)
        goto done;
    if (c->val_data[0] && (st = loader_check_same_tokenizer(&r->train, &r->val, c->val_data, err)) != ST_OK) goto done;
    if (c->val_data[0] && c->model.doc_mask && (int)loader_header_eot(&r->val) != c->model.doc_eot) {
        st = err_set(err, ST_ERR_INPUT, "--val-data %s: --doc-mask expected the training shards' EOT id %d, found %u",
                     c->val_data, c->model.doc_eot, loader_header_eot(&r->val));
        goto done;
    }
    c->sched.total = c->steps;
    cJSON *files = NULL;
    if (!(r->config = events_config_json(c)) || !(files = tr_data_files_json(&r->train))) {
        st = err_set(err, ST_ERR_RUNTIME, "out of memory (the run's config)");
        goto done;
    }
    cJSON_AddItemToObject(r->config, "data_files", files);
    /* the grid as run (dp from the world when not given): the global batch the resume compares */
    cJSON_DeleteItemFromObjectCaseSensitive(r->config, "dp");
    cJSON_AddNumberToObject(r->config, "dp", r->dp);
    if ((st = setup_model(r, err)) != ST_OK) goto done;
    if ((st = resume(r, err)) != ST_OK) goto done;
    if ((st = setup_accounting(r, err)) != ST_OK) goto done;
    res->start_step = r->step;
    if ((st = tr_claim_outputs(r->comm, c, &r->train, &r->val, r->resumed, &r->ckpt_lock, &res->err_everywhere, err)) !=
        ST_OK)
        goto done;
    if ((st = events_open(&r->log, r->comm->rank == 0 ? c->log_path : "", r->step > 0, err)) != ST_OK) goto done;
    {
        char tg[64];
        lora_targets_string(r->lo.lay.cfg.targets, tg, sizeof tg);
        size_t plan[MEM_NCAT] = {0};
        ActOptions ao = layout_act_options(c->micro_batch, c->seq_len, c->threads);
        ao.recompute = c->recompute, ao.tp = r->tp;
        lora_memory_plan(&c->model, &ao, &r->lo.lay, optim_num_moments(&c->optim), r->dp, r->zero, plan);
        plan[MEM_DATA] = 2 * r->batch_ints * sizeof(int32_t);
        int equal = 1;
        for (int i = 0; i < MEM_NCAT; i++)
            if (i != MEM_COMM) equal &= plan[i] == r->mem.bytes[i];
        /* the full trainer's config, batch and mask fields first (report and the docs read them); the
         * model's own EOT (what it masks at) only under --doc-mask */
        LoraStartEvent se = {c, (long long)c->micro_batch * c->grad_accum * r->dp, batch_tokens(r), r->train.masked, tg,
                             adapter_params(r), (size_t)model_config_num_params(&c->model),
                             r->base_hash, r->local_hash,
                             world, r->dp, r->tp, r->zero, r->step, r->g.s.doc_mask, (int)r->g.s.doc_eot,
                             r->acct.fpt, r->acct.peak, r->acct.peak_job, c->peak_flops > 0 ? "given" : r->acct.peak_kind,
                             r->have_plan ? r->plan.step * 1e3 : 0, r->plan.tokens_per_s, r->plan.mfu};
        ev_lora_start(&r->log, &se);
        ev_lora_memory(&r->log, r->mem.bytes, plan, equal);
        if (r->comm->rank == 0 && !c->quiet) {
            if (c->init_from[0]) tr_print_init_from(c);
            tr_print_data(c, &r->train, &r->val);
            tr_print_batch(c, r->dp, r->acct.batch_seqs, r->acct.batch_tokens);
            tr_print_memory(&r->mem);
            tr_print_compute(c, &r->acct, r->threads_auto, " (LoRA: forward and input gradients, docs/lora.md)");
            tr_print_speed(&r->acct);
            printf("lora: rank %d alpha %g dropout %g targets %s: %zu adapter parameters on a frozen %sbase of %lld "
                   "(%.3f%%), dp %d tp %d zero %d\n", c->lora.rank, c->lora.alpha, c->lora.dropout, tg,
                   adapter_params(r), c->lora.base_bf16 ? "bf16-block " : "",
                   model_config_num_params(&c->model),
                   100.0 * (double)adapter_params(r) / (double)model_config_num_params(&c->model),
                   r->dp, r->tp, r->zero);
            fflush(stdout);
        }
    }
    long stop_at = c->stop_after > 0 && c->stop_after < c->steps ? c->stop_after : c->steps;
    TrSignals sig = {0};
    if (c->handle_signals) tr_signals_on(&sig); /* SIGTERM/SIGINT/SIGUSR1: finish the step, save, end */
    r->loop_step0 = r->step, r->loop_t0 = timer_ms();
    while (st == ST_OK && r->step < stop_at && !r->stop) {
        st = step(r, res, err);
        /* the full trainer's schedule (train_step.c step_validate): every --val-every steps and at
         * step 1, at the last step or a stop, and right after a resume (it validated only every
         * --val-every steps, or only at the end with --val-every 0) */
        int due = tr_val_due(r->step, c->val_every);
        int last = r->step >= stop_at || r->stop, after_resume = res->start_step > 0 && r->step == res->start_step + 1;
        if (st == ST_OK && c->val_data[0] && (due || last || after_resume)) {
            double vl;
            if ((st = validation(r, &vl, err)) == ST_OK) {
                if (isnan(res->first_val)) res->first_val = vl;
                res->last_val = vl;
            }
        }
        if (st == ST_OK && c->ckpt_every > 0 && r->step % c->ckpt_every == 0 && r->step < stop_at && !r->stop)
            st = save(r, err);
    }
    tr_signals_off(&sig);
    if (st == ST_OK && r->stop && r->comm->rank == 0 && !c->quiet)
        printf("lora: stop signal: saving step %ld and ending\n", r->step);
    if (st == ST_OK && res->steps_done > 0) st = save(r, err); /* the last step (or --stop-after's) */
    /* The base must be unchanged: the adapters are all this run trained (each rank its slice). */
    if (st == ST_OK && lora_base_hash(r) != r->local_hash)
        st = err_set(err, ST_ERR_RUNTIME, "lora: the frozen base changed during training (XXH3 differs)");
    if (st == ST_OK && c->out_dir[0] && r->step >= c->steps) {
        const LoraLayout *ll = &r->lo.lay;
        float *p = r->lo.params;
        float *zs = NULL; /* ZeRO 3: the tp slice assembled from the pieces first */
        if (r->zero >= 3) {
            if (!(zs = mem_alloc(&r->mem, MEM_CKPT_STAGING, r->lo.lay.total * sizeof(float))))
                st = err_set(err, ST_ERR_RUNTIME, "out of memory (LoRA --out staging)");
            else st = z3_to_whole(r, r->sp, zs, err);
            p = zs;
        }
        if (st == ST_OK && r->tp > 1) { /* the whole adapters (all ranks call) */
            ll = &r->full_lay;
            if (!(p = mem_alloc(&r->mem, MEM_CKPT_STAGING, ll->total * sizeof(float))))
                st = err_set(err, ST_ERR_RUNTIME, "out of memory (LoRA --out staging)");
            else st = gather_full(r, zs ? zs : r->lo.params, p, err);
        }
        if (st == ST_OK && r->comm->rank == 0) st = ckpt_lora_write_adapter(c->out_dir, ll, p, c->init_from, err);
        if (st == ST_OK && r->comm->rank == 0 && !c->quiet) printf("saved the LoRA adapter to %s/adapter_model.safetensors\n", c->out_dir);
        if (p != r->lo.params && p != zs) mem_free(&r->mem, MEM_CKPT_STAGING, p, ll->total * sizeof(float));
        mem_free(&r->mem, MEM_CKPT_STAGING, zs, r->lo.lay.total * sizeof(float));
    }
    if (st == ST_OK) { /* the median step (the first left out when there are more: warm-up), the plan beside it */
        long n = r->nmeasured;
        res->median_step_ms = n > 0 ? stats_median_inplace(r->step_ms + (n > 1), (size_t)(n - (n > 1))) : 0;
        res->tokens_per_s = res->median_step_ms > 0 ? (double)batch_tokens(r) / (res->median_step_ms * 1e-3) : 0;
        double plan_ms = r->have_plan ? r->plan.step * 1e3 : 0;
        tr_recheck_speed(&r->acct);
        ev_lora_end(&r->log, r->step, res->last_loss, (unsigned long long)lora_base_hash(r), res->median_step_ms,
                    res->tokens_per_s, plan_ms);
        if (r->comm->rank == 0 && !c->quiet && n > 0) tr_print_end(&r->acct, plan_ms, res, " | lora");
    }
    if (st == ST_OK) st = events_check(&r->log, err); /* a record lost: said at once, the run's error now */
    res->preempted = r->step < c->steps;
    res->num_params = (long long)adapter_params(r);
done:
    run_free(r);
    return st;
}
