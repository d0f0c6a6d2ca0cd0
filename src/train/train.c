/* train.c — the trainer's entry: train_run sets a run up (run_setup: the grid, the data, the resume
 * decision, the model and its parallel state, the log and the plan), repeats train_step (train_step.c)
 * until the last step or a stop, and ends the run (run_finish). Default config, validation of the
 * flags, the Run's release and preemption signals live here too.
 *
 * The trainer's files (one module, src/train; their shared state in train_internal.h):
 *   train.c        train_run, run_setup's order, run_finish, signals
 *   train_setup.c  the grid, the data, the model and its parallel state, the log, the plan, announce
 *   train_ckpt.c   resume (find, load) and checkpoint saves (gathered or by every rank), --out
 *   train_step.c   one optimizer step as named stages, validation and samples
 *
 * One process is the trivial grid: dp = 1 over a single-process Comm, with the same parallel
 * state (src/parallel) as any data-parallel run, so there is one norm and one optimizer path. */
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
#include "train/machine_peak.h"
#include "train/train_internal.h"
#include "train/devemu.h"
#include "train/noise.h"

TrainConfig train_default_config(void) {
    TrainConfig c;
    memset(&c, 0, sizeof c);
    c.model.n_layer = 6, c.model.n_head = 6, c.model.n_embd = 384;
    c.model.vocab = 0, c.model.max_seq = 1024, c.model.dropout = 0.0f;
    c.micro_batch = 8, c.seq_len = 256, c.grad_accum = 1;
    c.optim = optim_default_config(OPT_ADAMW);
    c.sched.kind = SCHED_COSINE, c.sched.lr = 6e-4f, c.sched.min_lr = 6e-5f, c.sched.warmup = 100;
    c.sched.decay_frac = 0.2f, c.sched.decay_shape = DECAY_LINEAR;
    c.grad_clip = 1.0f;
    c.steps = 1000;
    c.seed = 1337, c.data_seed = 42;
    c.threads = 0; /* auto: train_threads */
    snprintf(c.device, sizeof c.device, "cpu");
    c.val_every = 100, c.val_batches = 10;
    c.keep_last = 3;
    c.sample_tokens = 64;
    health_default_options(&c.health);
    c.loss_scale = 65536.0f, c.loss_scale_window = 1000;
    return c;
}

/* "42s", "3m05s", "2h07m": durations on the progress line. */
void tr_fmt_duration(double s, char *buf, size_t len) {
    if (!(s >= 0) || s > 1e8) snprintf(buf, len, "?");
    else if (s < 60) snprintf(buf, len, "%.0fs", s);
    else if (s < 3600) snprintf(buf, len, "%dm%02ds", (int)(s / 60), (int)s % 60);
    else snprintf(buf, len, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
}

/* c's --device backend, and on a device backend (not host-addressable) what its path does not have,
 * refused whole (docs/cuda.md, section 6); the grid (data parallelism only) is checked by par_init. */
static Status find_device(const TrainConfig *c, const Backend **out, Err *err) {
    const Backend *be;
    if (devemu_find(c->device, c->faults.emulated_device, &be, err) != ST_OK) return ST_ERR_INPUT;
    *out = be;
    if (!be->host_addressable) {
        if (c->optim.kind != OPT_ADAMW && c->optim.kind != OPT_ADAM && c->optim.kind != OPT_SGD && c->optim.kind != OPT_LION)
            return err_set(err, ST_ERR_INPUT, "--optimizer %s: expected adamw, adam, sgd or lion with --device %s (the "
                           "device's optimizer entries)", optim_kind_name(c->optim.kind), c->device);
        const char *no = c->lora.rank > 0 ? "--lora-rank (LoRA trains on the CPU)"
                         /* the sharded asynchronous writer copies its shares with memcpy */
                         : c->ckpt_async && c->comm && c->comm->world > 1 ? "--ckpt-async with more than one process"
                         : c->tp > 1 ? "--tp"
                         : c->pp > 1 ? "--pp"
                                       : NULL;
        if (no) return err_set(err, ST_ERR_INPUT, "--device %s: %s is not supported on a device backend yet", c->device, no);
    }
    return ST_OK;
}

Status train_open_device(const TrainConfig *c, Err *err) {
    const Backend *be;
    Status st = find_device(c, &be, err);
    return st != ST_OK ? st : devemu_open(be, c->device, err);
}

Status train_validate(const TrainConfig *c, Err *err) {
    const Backend *be;
    Status st = find_device(c, &be, err);
    if (st != ST_OK) return st;
    if (c->micro_batch < 1)
        return err_set(err, ST_ERR_INPUT, "--micro-batch: expected a positive integer, found %d", c->micro_batch);
    if (c->seq_len < 1) return err_set(err, ST_ERR_INPUT, "--seq-len: expected a positive integer, found %d", c->seq_len);
    if (c->model.max_seq > 0 && c->seq_len > c->model.max_seq) /* known before the weights (gpt_init says it too) */
        return err_set(err, ST_ERR_INPUT, "--seq-len: expected 1..%d (the model's --max-seq-len), found %d", c->model.max_seq,
                       c->seq_len);
    if (c->grad_accum < 1)
        return err_set(err, ST_ERR_INPUT, "--grad-accum: expected a positive integer, found %d", c->grad_accum);
    if (c->steps < 1) return err_set(err, ST_ERR_INPUT, "--steps: expected a positive integer, found %ld", c->steps);
    if (machine_threads_check(c->threads, err) != ST_OK) return ST_ERR_INPUT;
    if (!(c->sched.lr >= 0)) return err_set(err, ST_ERR_INPUT, "--lr: expected a value >= 0, found %g", c->sched.lr);
    /* min_lr is inert under a constant schedule (a given --min-lr is refused there by the CLI): its
     * default used to refuse --schedule constant --lr 1e-5 with a flag the user never gave */
    if (c->sched.kind != SCHED_CONSTANT && !(c->sched.min_lr >= 0 && c->sched.min_lr <= c->sched.lr))
        return err_set(err, ST_ERR_INPUT, "--min-lr: expected a value in [0, --lr=%g], found %g", c->sched.lr,
                       c->sched.min_lr);
    if (c->sched.warmup < 0) return err_set(err, ST_ERR_INPUT, "--warmup: expected >= 0, found %ld", c->sched.warmup);
    if (!(c->sched.decay_frac >= 0 && c->sched.decay_frac <= 1))
        return err_set(err, ST_ERR_INPUT, "--decay-frac: expected a value in [0, 1], found %g", c->sched.decay_frac);
    if (!(c->optim.beta1 >= 0 && c->optim.beta1 < 1))
        return err_set(err, ST_ERR_INPUT, "--beta1: expected a value in [0, 1), found %g", c->optim.beta1);
    if (!(c->optim.beta2 >= 0 && c->optim.beta2 < 1))
        return err_set(err, ST_ERR_INPUT, "--beta2: expected a value in [0, 1), found %g", c->optim.beta2);
    /* eps 0: AdamW divides 0 by 0 where a second moment is 0 (NaN weights at step 2) */
    if (!(c->optim.eps > 0)) return err_set(err, ST_ERR_INPUT, "--eps: expected a value > 0, found %g", c->optim.eps);
    if (!(c->optim.momentum >= 0 && c->optim.momentum < 1))
        return err_set(err, ST_ERR_INPUT, "--momentum: expected a value in [0, 1), found %g", c->optim.momentum);
    if (!(c->optim.weight_decay >= 0))
        return err_set(err, ST_ERR_INPUT, "--weight-decay: expected a value >= 0, found %g", c->optim.weight_decay);
    if (!(c->optim.muon_lr >= 0)) return err_set(err, ST_ERR_INPUT, "--muon-lr: expected a value >= 0, found %g", c->optim.muon_lr);
    if (!(c->optim.muon_momentum >= 0 && c->optim.muon_momentum < 1))
        return err_set(err, ST_ERR_INPUT, "--muon-momentum: expected a value in [0, 1), found %g", c->optim.muon_momentum);
    if (c->optim.shampoo_block < 1)
        return err_set(err, ST_ERR_INPUT, "--shampoo-block: expected an integer >= 1, found %d", c->optim.shampoo_block);
    if (c->optim.precond_every < 1)
        return err_set(err, ST_ERR_INPUT, "--precond-every: expected an integer >= 1, found %d", c->optim.precond_every);
    if (!(c->optim.shampoo_eps > 0))
        return err_set(err, ST_ERR_INPUT, "--shampoo-eps: expected a value > 0, found %g", c->optim.shampoo_eps);
    if (c->optim.kind == OPT_SHAMPOO && c->ckpt_async)
        return err_set(err, ST_ERR_INPUT, "--ckpt-async with --optimizer shampoo: expected synchronous checkpoints "
                       "(the background writer does not copy Shampoo's block state), found --ckpt-async");
    if (!(c->optim.sophia_gamma > 0))
        return err_set(err, ST_ERR_INPUT, "--sophia-gamma: expected a value > 0, found %g", c->optim.sophia_gamma);
    if (c->optim.hess_every < 1)
        return err_set(err, ST_ERR_INPUT, "--hess-every: expected an integer >= 1, found %d", c->optim.hess_every);
    if (c->optim.kind == OPT_SOPHIA && (c->tp > 1 || c->pp > 1))
        return err_set(err, ST_ERR_INPUT, "--optimizer sophia: expected --tp 1 and --pp 1 (its label sampling needs "
                       "the whole vocabulary's softmax and one pass through the model; not implemented across tp "
                       "slices or pipeline stages), found --tp %d --pp %d", c->tp > 1 ? c->tp : 1, c->pp > 1 ? c->pp : 1);
    if (optim_is_matrix(c->optim.kind) && (c->tp > 1 || c->pp > 1))
        return err_set(err, ST_ERR_INPUT, "--optimizer %s: expected --tp 1 and --pp 1 (it updates whole "
                       "matrices; gathering tp slices or pipeline stages is not implemented), found --tp %d --pp %d",
                       optim_kind_name(c->optim.kind), c->tp > 1 ? c->tp : 1, c->pp > 1 ? c->pp : 1);
    /* Negative values were accepted and acted as 0 (off, or no thinning): refused with their meaning. */
    if (!(c->grad_clip >= 0))
        return err_set(err, ST_ERR_INPUT, "--grad-clip: expected a norm >= 0 (0: off), found %g", c->grad_clip);
    if (c->ckpt_every < 0)
        return err_set(err, ST_ERR_INPUT, "--ckpt-every: expected >= 0 steps (0: at the end only), found %d", c->ckpt_every);
    if (c->keep_last < 0)
        return err_set(err, ST_ERR_INPUT, "--keep-last: expected >= 0 checkpoints (0: all), found %d", c->keep_last);
    if (c->keep_every < 0)
        return err_set(err, ST_ERR_INPUT, "--keep-every: expected >= 0 steps (0: none kept for it), found %d", c->keep_every);
    if (c->stop_after < 0)
        return err_set(err, ST_ERR_INPUT, "--stop-after: expected a step >= 0 (0: off), found %ld", c->stop_after);
    if (c->val_batches < 1)
        return err_set(err, ST_ERR_INPUT, "--val-batches: expected a positive integer, found %d", c->val_batches);
    if (c->val_every < 0) return err_set(err, ST_ERR_INPUT, "--val-every: expected >= 0, found %d", c->val_every);
    if (!c->data[0]) return err_set(err, ST_ERR_INPUT, "--data: expected a token shard path or glob, found none");
    return ST_OK;
}

/* Splits "a,b,c" into at most max pointers into buf (modified). */
int tr_split_list(char *buf, const char **out, int max) {
    int n = 0;
    for (char *tok = strtok(buf, ","); tok && n < max; tok = strtok(NULL, ",")) out[n++] = tok;
    return n;
}

static void run_free(Run *r) {
    if (r->ck.async) {
        Err e;
        ckpt_async_wait(r->ck.async, NULL, &e);
        ckpt_async_free(r->ck.async);
    }
    ckpt_shard_async_free(r->ck.sasync); /* an uncommitted save stays invisible (run_finish commits it) */
    free(r->ck.write);
    events_close(&r->log);
    if (r->ckpt_lock >= 0) close(r->ckpt_lock), r->ckpt_lock = -1;
    free(r->step_ms);
    free(r->by_rank);
    free(r->by_rank2);
    free(r->comm_by_rank);
    free(r->peak_by_rank);
    free(r->pipe.idle);
    free(r->ns.rep);
    free(r->ls.prev);
    free(r->ls.host);
    free(r->ls.grad);
    mem_free(&r->mem, MEM_DATA, r->inp, r->batch_ints * sizeof(int32_t));
    mem_free(&r->mem, MEM_DATA, r->tgt, r->batch_ints * sizeof(int32_t));
    mem_free(&r->mem, MEM_DATA, r->hess_u, r->hess_u ? r->batch_ints * sizeof(float) : 0);
    mem_free(&r->mem, MEM_DATA, r->hess_y, r->hess_y ? r->batch_ints * sizeof(int32_t) : 0);
    pp_free(r->pipe.run);
    sched_free(&r->pipe.sched);
    par_free(r->par);
    gpt_free(&r->g);
    layout_free(&r->full);
    loader_close(&r->train);
    loader_close(&r->val);
    cJSON_Delete(r->config);
    comm_finalize(r->own_comm);
}

double tr_comm_bytes_total(const Comm *c) {
    double b = 0;
    for (int k = 0; k < COMM_NKIND; k++) b += (double)c->stats.bytes[k];
    return b;
}

static Status run_setup(Run *r, Err *err) {
    Status st;
    if ((st = tr_setup_grid(r, err)) != ST_OK) { /* a wrong grid is refused before any allocation */
        r->res->err_everywhere = st == ST_ERR_INPUT; /* flags and world size: the same on every rank */
        return st;
    }
    /* Each rank opens the shards and reads --init-from itself: agreed on before the next collective. */
    if ((st = tr_agree_setup(r, tr_setup_data(r, err), "data", err)) != ST_OK) return st;
    if ((st = tr_setup_same_config(r, err)) != ST_OK) {
        r->res->err_everywhere = st == ST_ERR_INPUT; /* every rank compared every rank's hash */
        return st;
    }
    if ((st = tr_resume_find(r, err)) != ST_OK) return st;
    if ((st = tr_agree_setup(r, tr_setup_model(r, err), "model setup", err)) != ST_OK) return st;
    if ((st = tr_resume_load(r, err)) != ST_OK) return st;
    if ((st = tr_claim_outputs(r->comm, &r->cfg, &r->train, &r->val, r->rs.path, &r->ckpt_lock, &r->res->err_everywhere,
                               err)) != ST_OK)
        return st;
    if ((st = tr_setup_outputs(r, err)) != ST_OK) return st;
    if ((st = tr_setup_accounting(r, err)) != ST_OK) return st;
    if ((st = tr_announce(r, err)) != ST_OK) return st;
    r->step = r->rs.step, r->attempt = r->rs.attempt;
    r->res->start_step = r->rs.step;
    return ST_OK;
}

static void signals_install(Run *r) {
    if (r->cfg.handle_signals) tr_signals_on(&r->sig);
}

static void signals_restore(Run *r) { tr_signals_off(&r->sig); }

/* The last asynchronous write, the medians, the Young/Daly interval, the final weights, the end
 * record and the plan against the measurement. */
static Status run_finish(Run *r, Err *err) {
    const TrainConfig *c = &r->cfg;
    TrainResult *res = r->res;
    Status st;
    if (r->ck.async || r->ck.sasync) {
        CkptSaveInfo info;
        st = r->ck.async ? ckpt_async_wait(r->ck.async, &info, err) : ckpt_shard_async_wait(r->ck.sasync, r->comm, &info, err);
        if (st != ST_OK) return st;
        tr_note_write_time(r, &info);
        if (!c->quiet && info.path[0])
            printf("checkpoint: last asynchronous write %s took %.0f ms in the background\n", info.path, info.ms_write);
    }
    tr_recheck_speed(&r->acct); /* after the background write, which would share the cores */
    res->final_loss_scale = r->scaler.scale;
    long n = r->nmeasured;
    res->median_step_ms = stats_median_inplace(r->step_ms + (n > 1), (size_t)(n - (n > 1)));
    res->tokens_per_s = r->acct.batch_tokens / (res->median_step_ms * 1e-3);
    if (c->mtbf_hours > 0 && r->ck.first_ms > 0 && !c->quiet) {
        /* Young/Daly: the interval minimizing expected lost work + checkpoint overhead. */
        double interval_s = sqrt(2.0 * r->ck.first_ms * 1e-3 * c->mtbf_hours * 3600.0);
        printf("checkpoint interval for MTBF %.1f h (Young/Daly sqrt(2 * %.2f s * MTBF)): %.0f s = every %.0f steps\n",
               c->mtbf_hours, r->ck.first_ms * 1e-3, interval_s, interval_s / (res->median_step_ms * 1e-3));
    }
    if (c->out_dir[0] && !res->preempted) {
        if ((st = tr_save_weights(r, c->out_dir, err)) != ST_OK) return st;
        if (!c->quiet) printf("saved weights to %s/model.safetensors\n", c->out_dir);
    }
    double plan_ms = r->acct.have_plan ? r->acct.plan.compute.step * 1e3 : 0;
    EndEvent e = {.res = res, .fp16 = c->fp16, .loss_scale = r->scaler.scale, .wall_s = r->ms_total * 1e-3,
                  .have_plan = r->acct.have_plan, .planned_step_ms = plan_ms,
                  .gemm_check = {r->acct.speed[0], r->acct.speed[1]}};
    memcpy(e.peak, r->mem.peak, sizeof e.peak);
    ev_end(&r->log, &e);
    if (!c->quiet) tr_print_end(&r->acct, plan_ms, res, "");
    return events_check(&r->log, err);
}

void tr_print_end(const RunAccounting *a, double plan_ms, const TrainResult *res, const char *tail) {
    if (plan_ms > 0)
        printf("plan: predicted %.1f ms/step (%s), measured median %.1f ms/step (%.2fx)\n", plan_ms, a->plan_hw,
               res->median_step_ms, res->median_step_ms / plan_ms);
    if (a->speed[1] > 0) tr_print_speed(a);
    printf("done: %ld steps, median %.1f ms/step, %.0f tokens/s%s\n", res->steps_done, res->median_step_ms,
           res->tokens_per_s, tail);
}

Status train_run(const TrainConfig *cfg, TrainResult *res, Err *err) {
    memset(res, 0, sizeof *res);
    res->first_val = res->last_val = NAN;
    Status st = train_validate(cfg, err);
    if (st != ST_OK) {
        res->err_everywhere = 1; /* the flags alone: the same on every rank */
        return st;
    }
    if (cfg->lora.rank > 0) return lora_train_run(cfg, res, err);
    Run run;
    memset(&run, 0, sizeof run);
    Run *r = &run;
    r->ckpt_lock = -1;
    r->acct.rss_base = mem_rss_anon(); /* before anything of this run is allocated */
    r->cfg = *cfg, r->res = res;
    if ((st = run_setup(r, err)) == ST_OK) {
        signals_install(r);
        r->loop_t0 = timer_ms();
        int stop = 0;
        while (st == ST_OK && !stop && r->step < r->cfg.steps) st = tr_train_step(r, &stop, err);
        if (st == ST_OK) st = run_finish(r, err);
        signals_restore(r);
    }
    run_free(r);
    return st;
}
