/* train_setup.c — setting a run up, before its first step: the grid and the pipeline schedule, the
 * data, one config on every rank, the model with its parallel state and initial weights, the log,
 * the plan against the allocation, and the start record (announce). Called in run_setup's order
 * (train.c). */
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
#include "train/machine_peak.h"
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
#include "train/devemu.h"
#include "train/noise.h"

/* Pipeline: the schedule (built, then simulated with unit times, which refuses an incomplete or
 * deadlocking one) and the split of the blocks into pp·v virtual stages, before any allocation. */
static Status setup_pipeline(Run *r, int pp, Err *err) {
    TrainConfig *c = &r->cfg;
    int v = c->interleave > 0 ? c->interleave : 1;
    if (!c->pp_schedule[0]) /* not given: plan's rule, so both price and run the same schedule */
        snprintf(c->pp_schedule, sizeof c->pp_schedule, "%s", sched_type_name(sched_default_type(pp > 1 ? v : 1)));
    if (pp == 1) {
        if (v > 1 || c->pp_layers[0] || strcmp(c->pp_schedule, "1f1b") != 0 || c->pp_print_schedule)
            return err_set(err, ST_ERR_INPUT, "--pp-schedule/--pp-layers/--interleave/--pp-print-schedule: expected "
                           "--pp > 1, found --pp 1");
        /* The trivial schedule, F0 B0 F1 B1 …: the step walks it like a pipeline's (pp.h). */
        return sched_build(&r->pipe.sched, SCHED_1F1B, 1, c->grad_accum, 1, err);
    }
    SchedType type;
    Status st = sched_type_parse(c->pp_schedule, &type, err);
    if (st != ST_OK) return st;
    if ((st = sched_build(&r->pipe.sched, type, pp, c->grad_accum, v, err)) != ST_OK) {
        err_prefix(err, "--grad-accum (pipeline micro-batches)");
        return st;
    }
    SchedTimes t = {1.0, 2.0, 0.0, 0.0};
    SchedSim sim;
    if (pp > SCHED_MAX_P) return err_set(err, ST_ERR_INPUT, "--pp %d: expected at most %d stages", pp, SCHED_MAX_P);
    if ((st = sched_simulate(&r->pipe.sched, &t, &sim, err)) != ST_OK) return st;
    int S = pp * v, first[LAYOUT_MAX_CHUNKS * SCHED_MAX_P], last[LAYOUT_MAX_CHUNKS * SCHED_MAX_P];
    if (v > LAYOUT_MAX_CHUNKS)
        return err_set(err, ST_ERR_INPUT, "--interleave %d: expected at most %d chunks per rank", v, LAYOUT_MAX_CHUNKS);
    if ((st = layout_pp_split(&c->model, c->seq_len, S, c->pp_layers, first, last, err)) != ST_OK) {
        if (v > 1) err_prefix(err, "--interleave %d: %d x %d = %d virtual stages", v, pp, v, S);
        return st;
    }
    r->pipe.stage.n = v;
    for (int k = 0; k < S; k++) r->pipe.first[k] = first[k], r->pipe.last[k] = last[k];
    memcpy(r->pipe.peak_inflight, sim.peak_inflight, sizeof r->pipe.peak_inflight);
    if (c->pp_print_schedule && r->comm->rank == 0) {
        printf("pipeline schedule %s, %d ranks, %d micro-batches, %d chunk(s) per rank:\n", c->pp_schedule, pp,
               c->grad_accum, v);
        sched_print(&r->pipe.sched, stdout);
        fflush(stdout);
    }
    return ST_OK;
}

/* This rank's chunks (layout_pp_rank_stage: virtual stage c·pp + pp_rank for chunk c) and slots. */
static void pipeline_rank_stage(Run *r) {
    r->pipe.stage = layout_pp_rank_stage(r->pipe.first, r->pipe.last, r->pp, r->pipe.stage.n, r->pp_rank);
    r->pipe.slots = r->pipe.peak_inflight[r->pp_rank];
}

int train_grid_dp(int world, int dp, int tp, int pp) {
    long long tpp = (long long)(tp > 0 ? tp : 1) * (pp > 0 ? pp : 1);
    if (world <= 1) return 1;
    if (dp > 0) return dp;
    return world % tpp ? 0 : (int)(world / tpp);
}

/* The process grid (dp × tp × pp = world), refused before any allocation. */
Status tr_setup_grid(Run *r, Err *err) {
    TrainConfig *c = &r->cfg;
    if (c->zero < 0 || c->zero > 3) return err_set(err, ST_ERR_INPUT, "--zero: expected 0, 1, 2 or 3, found %d", c->zero);
    r->comm = c->comm;
    if (!r->comm) {
        Status st = comm_init_local(&r->own_comm, err);
        if (st != ST_OK) return st;
        r->comm = r->own_comm;
    }
    int tp = c->tp > 0 ? c->tp : 1, pp = c->pp > 0 ? c->pp : 1, world = r->comm->world;
    if (world == 1 && (tp > 1 || pp > 1 || c->dp > 1)) { /* a grid asked of a process started alone */
        int dp = c->dp > 0 ? c->dp : 1;
        const char *flag = tp > 1 ? "tp" : pp > 1 ? "pp" : "dp";
        return err_set(err, ST_ERR_INPUT, "--%s %d: expected dp x tp x pp = %d x %d x %d = %d processes, found this one "
                       "alone: launch it under MPI, e.g. `mpirun -np %d scaletrain train ...` (docs/parallel.md)",
                       flag, tp > 1 ? tp : pp > 1 ? pp : dp, dp, tp, pp, dp * tp * pp, dp * tp * pp);
    }
    if (world % tp)
        return err_set(err, ST_ERR_INPUT, "--tp %d: expected a divisor of the world size %d (ranks launched), found a "
                       "remainder of %d", tp, world, world % tp);
    if (world % (tp * pp))
        return err_set(err, ST_ERR_INPUT, "--pp %d: expected tp x pp = %d to divide the world size %d (ranks launched), "
                       "found a remainder of %d", pp, tp * pp, world, world % (tp * pp));
    if (c->sp && tp == 1) return err_set(err, ST_ERR_INPUT, "--sp: expected --tp > 1 (sequence parallelism splits "
                                         "inside a tensor-parallel group), found --tp 1");
    Status st = setup_pipeline(r, pp, err);
    if (st != ST_OK) return st;
    int dp = train_grid_dp(world, c->dp, tp, pp);
    if ((st = par_check_grid(c->zero, pp, err)) != ST_OK) return st;
    if ((st = comm_set_grid(r->comm, dp, tp, pp, err)) != ST_OK) return st;
    if (c->comm_timeout > 0) r->comm->timeout_s = c->comm_timeout;
    c->dp = r->dp = dp, r->dp_rank = r->comm->dp_rank, r->world = r->comm->world;
    c->tp = r->tp = tp, r->tp_rank = r->comm->tp_rank;
    c->pp = r->pp = pp, r->pp_rank = r->comm->pp_rank;
    r->sliced = tp > 1 || pp > 1;
    r->local = dp == 1 && !r->sliced && c->zero == 0;
    if (pp > 1) pipeline_rank_stage(r);
    if (c->ckpt_async && c->ckpt_dir[0] && !r->local && r->world == 1)
        return err_set(err, ST_ERR_INPUT, "--ckpt-async: expected ZeRO 0 in one process, found ZeRO %d (a one-process "
                       "save of a sharded state is gathered and written synchronously; drop the flag)", c->zero);
    if (r->sliced && c->sample_every > 0)
        return err_set(err, ST_ERR_INPUT, "--sample-every %d: expected 0 with --tp %d --pp %d (a sample needs the whole "
                       "model on one rank; sample the saved weights with `scaletrain sample`)", c->sample_every, tp, pp);
    r->by_rank = calloc((size_t)r->world, sizeof *r->by_rank);
    r->by_rank2 = calloc((size_t)r->world, sizeof *r->by_rank2);
    r->comm_by_rank = calloc((size_t)r->world, sizeof *r->comm_by_rank);
    r->peak_by_rank = calloc((size_t)r->world, sizeof *r->peak_by_rank);
    r->pipe.idle = calloc((size_t)r->world, sizeof *r->pipe.idle);
    if (!r->by_rank || !r->by_rank2 || !r->comm_by_rank || !r->peak_by_rank || !r->pipe.idle) return err_set(err, ST_ERR_RUNTIME, "out of memory");
    return ST_OK;
}

/* Shards, the model's vocabulary (from their headers when not given) and its validation. */
Status tr_setup_data(Run *r, Err *err) {
    TrainConfig *c = &r->cfg;
    Status st;
    int lflags = LOADER_SHUFFLE | (c->no_pack ? LOADER_NO_PACK : 0);
    if ((st = loader_open_named(&r->train, c->data, c->seq_len, 0, c->tokenizer_hash, c->tokenizer, c->data_seed, lflags,
                                 err)) != ST_OK)
        return st;
    if (c->model.vocab == 0) {
        c->model.vocab = (int)loader_header_vocab(&r->train);
        if (c->model.vocab == 0)
            return err_set(err, ST_ERR_INPUT, "--vocab: not given and the shard headers of %s record no vocabulary size",
                           c->data);
    }
    if (c->model.doc_mask) c->model.doc_eot = (int)loader_header_eot(&r->train); /* documents end with it */
    if ((st = model_config_validate(&c->model, err)) != ST_OK) return st;
    if ((st = loader_check_vocab(&r->train, (uint32_t)c->model.vocab, err)) != ST_OK) return st;
    if (c->val_data[0]) {
        int vflags = c->no_pack ? LOADER_NO_PACK : 0;
        if ((st = loader_open_named(&r->val, c->val_data, c->seq_len, (uint32_t)c->model.vocab, c->tokenizer_hash,
                                     c->tokenizer, 0, vflags,
                              err)) != ST_OK)
            return st;
        if ((st = loader_check_same_tokenizer(&r->train, &r->val, c->val_data, err)) != ST_OK) return st;
        if (c->model.doc_mask && (int)loader_header_eot(&r->val) != c->model.doc_eot)
            return err_set(err, ST_ERR_INPUT, "--val-data %s: --doc-mask expected the training shards' EOT id %d, found %u",
                           c->val_data, c->model.doc_eot, loader_header_eot(&r->val));
        /* --sp splits every forward's rows over tp; a validation set shorter than one micro-batch
         * runs a smaller one, which must split too. */
        if (c->sp && r->val.nwin < (uint64_t)c->micro_batch && (r->val.nwin * (uint64_t)c->seq_len) % (uint64_t)r->tp)
            return err_set(err, ST_ERR_INPUT, "--val-data %s: with --sp, expected at least --micro-batch %d rows or a "
                           "row count x --seq-len divisible by --tp %d, found %llu rows", c->val_data, c->micro_batch,
                           r->tp, (unsigned long long)r->val.nwin);
    }
    c->sched.total = c->steps;
    if ((st = health_validate_options(&c->health, err)) != ST_OK) return st;
    health_init(&r->health);
    scaler_init(&r->scaler, c->loss_scale, c->loss_scale_window);
    return ST_OK;
}

Status train_agree(Comm *c, Status st, const char *stage, Err *err, int *everywhere) {
    if (!c || c->world == 1) return st;
    int64_t v[2] = {st == ST_ERR_INPUT, st != ST_OK && st != ST_ERR_INPUT};
    Err ce;
    if (comm_allreduce_i64(c, v, 2, COMM_SUM, &ce) != ST_OK) return st != ST_OK ? st : (*err = ce, ce.status);
    if (!v[0] && !v[1]) return ST_OK;
    /* Rank 0's message beside this rank's: the same text is a replicated error (rank 0 prints it
     * once); another one is this rank's own finding, which it prints itself (cli/cmd_train.c). */
    char msg0[sizeof err->msg];
    memset(msg0, 0, sizeof msg0);
    if (c->rank == 0 && st != ST_OK) snprintf(msg0, sizeof msg0, "%s", err->msg);
    if (comm_bcast_bytes(c, msg0, sizeof msg0, 0, &ce) != ST_OK) return st != ST_OK ? st : (*err = ce, ce.status);
    if (st != ST_OK) {
        *everywhere = strcmp(msg0, err->msg) == 0;
        return st;
    }
    *everywhere = 1; /* rank 0 says it once; the failing ranks say why */
    return err_set(err, v[1] ? ST_ERR_RUNTIME : ST_ERR_INPUT, "%s: refused on %lld other rank(s) of %d (their messages "
                   "say why)", stage, (long long)(v[0] + v[1]), c->world);
}

Status tr_agree_setup(Run *r, Status st, const char *stage, Err *err) {
    return train_agree(r->comm, st, stage, err, &r->res->err_everywhere);
}

/* Threads against CPUs, said by rank 0 once (the run goes on): a rank whose threads exceed the CPUs
 * its affinity allows (mpirun binds each rank to one core at -np 2), else a node whose ranks'
 * threads together exceed its online CPUs. Their OpenMP threads then take turns on the cores, and
 * a waiting thread spins on the core the awaited one needs: 2 ranks x 2 threads unbound on 2 cores
 * ran 2.1x slower per step than 2 x 1 (docs/parallel.md, "Threads and CPUs"). The four arrays hold
 * each rank's threads, allowed CPUs, node key (a hash of its host name) and the node's online CPUs. */
static void warn_oversubscribed(int world, const double *thr, const double *allowed, const double *node,
                                const double *node_cpus) {
    char list[256] = "";
    int over = 0, same = 1;
    for (int i = 0; i < world; i++) {
        if (thr[i] <= allowed[i]) continue;
        same &= thr[i] == thr[0] && allowed[i] == allowed[0];
        if (over++ < 4)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%srank %d %d threads on %d CPU%s",
                     over > 1 ? ", " : "", i, (int)thr[i], (int)allowed[i], allowed[i] == 1 ? "" : "s");
    }
    if (over) {
        if (world == 1)
            printf("warning: %d threads on the %d CPU%s this process may run on: they take turns; give --threads %d\n",
                   (int)thr[0], (int)allowed[0], allowed[0] == 1 ? "" : "s", (int)allowed[0]);
        else if (over == world && same)
            printf("warning: every rank runs %d threads on the %d CPU%s its affinity allows%s: give --threads %d, or "
                   "bind each rank to more cores (--map-by slot:PE=%d)\n", (int)thr[0], (int)allowed[0],
                   allowed[0] == 1 ? "" : "s", allowed[0] == 1 ? " (mpirun binds each rank to one core at -np 2)" : "",
                   (int)allowed[0], (int)thr[0]);
        else
            printf("warning: more threads than the CPUs a rank may run on: %s%s: their threads take turns; give "
                   "--threads at most the CPUs per rank\n", list, over > 4 ? ", ..." : "");
        return;
    }
    for (int i = 0; i < world; i++) {
        int first = 1, ranks = 0;
        double sum = 0;
        for (int j = 0; j < world; j++) {
            if (node[j] != node[i]) continue;
            first &= j >= i;
            ranks++, sum += thr[j];
        }
        if (!first || sum <= node_cpus[i]) continue;
        int fit = (int)node_cpus[i] / ranks; /* threads per rank that would fit */
        char fix[64] = "fewer ranks per node";
        if (fit >= 1) snprintf(fix, sizeof fix, "--threads %d, or fewer ranks per node", fit);
        printf("warning: %d ranks on one node run %.0f threads on its %.0f CPUs: their threads take turns, and waiting "
               "ones spin on the cores others need; give %s\n", ranks, sum, node_cpus[i], fix);
        return;
    }
}

Status train_threads(Comm *comm, int *threads, double *by_rank, const char *grid, int quiet, Err *err) {
    int world = comm->world;
    double *v = calloc(4 * (size_t)world, sizeof *v); /* threads, allowed CPUs, node key, node CPUs */
    if (!v) return err_set(err, ST_ERR_RUNTIME, "out of memory (threads per rank)");
    char host[256] = "";
    if (gethostname(host, sizeof host) != 0) host[0] = '\0';
    host[sizeof host - 1] = '\0';
    double key = (double)(XXH3_64bits(host, strlen(host)) >> 12); /* 52 bits: exact in a double */
    int online = machine_cpus_online(), allowed = machine_cpus_allowed();
    Status st = comm_allgather_f64(comm, allowed, v + world, err);
    if (st == ST_OK) st = comm_allgather_f64(comm, key, v + 2 * world, err);
    if (st == ST_OK) st = comm_allgather_f64(comm, (double)online, v + 3 * world, err);
    if (st == ST_OK && *threads == 0) { /* auto: this rank's share of its node */
        int ranks = 0;
        for (int j = 0; j < world; j++) ranks += v[2 * world + j] == key;
        *threads = machine_auto_threads(allowed, online, ranks);
    }
    if (st == ST_OK) st = comm_allgather_f64(comm, *threads, v, err);
    if (st == ST_OK && by_rank) memcpy(by_rank, v, sizeof *v * (size_t)world);
    if (st == ST_OK && comm->rank == 0 && !quiet) {
        if (grid) {
            printf("%s\nthreads:", grid);
            for (int i = 0; i < world; i++) printf(" rank %d %d%s", i, (int)v[i], i + 1 < world ? "," : "\n");
        }
        warn_oversubscribed(world, v, v + world, v + 2 * world, v + 3 * world);
        fflush(stdout);
    }
    free(v);
    return st;
}

/* Every rank got the same config (hash of its JSON, where --threads is still as given: 0 for auto);
 * the threads are then resolved, the grid and each rank's threads printed; from here on only rank 0
 * prints progress and writes the log. */
Status tr_setup_same_config(Run *r, Err *err) {
    TrainConfig *c = &r->cfg;
    r->config = events_config_json(c);
    cJSON *files = r->config ? tr_data_files_json(&r->train) : NULL;
    if (!files) return err_set(err, ST_ERR_RUNTIME, "out of memory (config)");
    cJSON_AddItemToObject(r->config, "data_files", files);
    char *text = cJSON_PrintUnformatted(r->config);
    if (!text) return err_set(err, ST_ERR_RUNTIME, "out of memory (config text)");
    uint64_t h = XXH3_64bits(text, strlen(text));
    free(text);
    Status st = comm_check_same_u64(r->comm, h, "config hash", err);
    char grid[320] = "", d[256];
    if (st == ST_OK && r->world > 1) {
        comm_describe(r->comm, d, sizeof d);
        snprintf(grid, sizeof grid, "grid: %s, ZeRO stage %d, collective timeout %.0f s", d, c->zero, r->comm->timeout_s);
    }
    r->threads_auto = c->threads == 0;
    if (st == ST_OK) st = train_threads(r->comm, &c->threads, r->by_rank, r->world > 1 ? grid : NULL, c->quiet, err);
    /* the config logged and checkpointed names the threads this rank runs */
    if (st == ST_OK) cJSON_ReplaceItemInObjectCaseSensitive(r->config, "threads", cJSON_CreateNumber(c->threads));
    if (r->comm->rank != 0) c->quiet = 1, c->log_path[0] = 0;
    return st;
}

/* Initial weights: seeded, or --init-from (path non-NULL). Every element depends on (seed, tensor,
 * index) only, so every grid starts from the same weights. */
static Status run_init_weights(Run *r, const char *path, Err *err) {
    if (r->sliced) { /* the whole network's weights, then this rank's slices */
        float *full = tr_run_staging(r, &r->full, 1), *mine = tr_run_staging(r, &r->g.w.layout, 1);
        Status st = ST_OK;
        if (!full || !mine) st = err_set(err, ST_ERR_RUNTIME, "out of memory (initial weights)");
        GptWeights view = r->g.w;
        view.layout = r->full, view.params = full;
        if (st == ST_OK && path) st = ckpt_init_from(&view, path, err);
        else if (st == ST_OK) gpt_init_params_buf(&r->full, full, r->cfg.seed, r->g.s.nt);
        if (st == ST_OK) {
            tr_slices_from_full(r, mine, full, 1);
            par_set_full(r->par, mine, NULL, NULL);
        }
        tr_run_staging_free(r, &r->full, full, 1);
        tr_run_staging_free(r, &r->g.w.layout, mine, 1);
        return st;
    }
    if (r->cfg.zero < 3 && r->g.be->host_addressable) {
        if (!path) gpt_init_params(&r->g, r->cfg.seed);
        Status st = path ? ckpt_init_from(&r->g.w, path, err) : ST_OK;
        gpt_sync_lp(&r->g);
        return st;
    }
    float *full = tr_run_staging(r, &r->g.w.layout, 1);
    if (!full) return err_set(err, ST_ERR_RUNTIME, "out of memory (initial weights)");
    Status st = ST_OK;
    GptWeights view = r->g.w; /* ckpt reads the layout and writes view.params */
    view.params = full;
    if (path) st = ckpt_init_from(&view, path, err);
    else gpt_init_params_buf(&r->g.w.layout, full, r->cfg.seed, r->g.s.nt);
    if (st == ST_OK) par_set_full(r->par, full, NULL, NULL);
    tr_run_staging_free(r, &r->g.w.layout, full, 1);
    return st;
}

/* The model (its layout padded for the dp group), the parallel state that owns the moments and
 * the collectives, the initial weights, and the batch buffers. */
Status tr_setup_model(Run *r, Err *err) {
    TrainConfig *c = &r->cfg;
    int B = c->micro_batch, T = c->seq_len, k = c->grad_accum, nt = c->threads;
    mm_set_threads(nt);
    GptOptions go = gpt_default_options();
    Status st = devemu_find(c->device, c->faults.emulated_device, &go.backend, err);
    if (st != ST_OK) return st;
    /* A device backend: the whole model in its memory; the host reaches it only through staging
     * (par_set_full / par_get_full), so the in-place checkpoint paths of `local` are not taken. */
    go.device_resident = !go.backend->host_addressable;
    if (go.device_resident) r->local = 0;
    go.B = B, go.T = T, go.threads = nt, go.recompute = c->recompute;
    go.precision = c->fp16 ? GPT_FP16 : c->bf16 ? GPT_BF16 : GPT_FP32;
    go.tp = r->tp, go.tp_rank = r->tp_rank, go.sp = c->sp;
    if (r->pp > 1) go.stage = r->pipe.stage, go.slots = r->pipe.slots, go.split_backward = r->pipe.sched.split_backward;
    par_gpt_options(r->dp, c->zero, &go);
    st = gpt_init(&r->g, &c->model, &go, &r->mem, err);
    if (st != ST_OK) return st;
    if (r->sliced && layout_init(&r->full, &c->model, 1) != 0)
        return err_set(err, ST_ERR_RUNTIME, "out of memory (the full layout)");
    ParOptions po = par_default_options();
    po.zero = c->zero, po.overlap = !c->no_overlap, po.n_moments = optim_num_moments(&c->optim), po.nt = nt;
    po.muon = c->optim.kind == OPT_MUON, po.muon_bf16 = go.precision == GPT_BF16;
    po.shampoo = c->optim.kind == OPT_SHAMPOO, po.shampoo_block = c->optim.shampoo_block;
    po.precond_every = c->optim.precond_every, po.shampoo_eps = c->optim.shampoo_eps;
    po.faults = c->faults;
    /* The noise scale needs a batch smaller than the step's (a micro-batch of one replica) and a
     * gradient whole on the stage that computed it (no pipeline: a tied wte is split there). */
    r->ns.on = plan_noise_scale_on(r->dp, r->pp, k, c->no_noise_scale);
    po.noise = r->ns.on;
    noise_init(&r->ns.avg, NOISE_EMA_BETA);
    if (r->ns.on && !(r->ns.rep = calloc((size_t)r->dp, sizeof *r->ns.rep)))
        return err_set(err, ST_ERR_RUNTIME, "out of memory (noise scale)");
    if ((st = par_init(&r->par, r->comm, &r->g, &po, &r->mem, err)) != ST_OK) return st;
    if ((st = pp_init(&r->pipe.run, r->comm, &r->g, r->par, &r->pipe.sched, err)) != ST_OK) return st;
    if ((st = run_init_weights(r, NULL, err)) != ST_OK) return st;
    r->g.s.dropout_seed = c->seed ^ 0xd509u;
    if (c->init_from[0] && !r->rs.path[0] && (st = run_init_weights(r, c->init_from, err)) != ST_OK) {
        err_prefix(err, "--init-from");
        return st;
    }
    if (c->init_from[0] && !r->rs.path[0] && r->comm->rank == 0) tr_print_init_from(c);
    r->batch_ints = (size_t)k * B * T;
    r->inp = mem_alloc(&r->mem, MEM_DATA, r->batch_ints * sizeof(int32_t));
    r->tgt = mem_alloc(&r->mem, MEM_DATA, r->batch_ints * sizeof(int32_t));
    r->step_cap = tr_step_cap(c->steps);
    r->step_ms = calloc((size_t)r->step_cap, sizeof *r->step_ms);
    if (!r->inp || !r->tgt || !r->step_ms) return err_set(err, ST_ERR_RUNTIME, "out of memory allocating the batches");
    if (c->optim.kind == OPT_SOPHIA) {
        r->hess_u = mem_alloc(&r->mem, MEM_DATA, r->batch_ints * sizeof(float));
        r->hess_y = mem_alloc(&r->mem, MEM_DATA, r->batch_ints * sizeof(int32_t));
        if (!r->hess_u || !r->hess_y) return err_set(err, ST_ERR_RUNTIME, "out of memory (Sophia's sampled labels)");
    }
    return ST_OK;
}

/* The asynchronous saver's copy of a device's buffer into its host staging (the save blocks
 * training only for this copy, as on the CPU; the write runs behind it). */
static int device_copy_out(void *ctx, float *dst, const float *src, size_t n, Err *err) {
    return tr_to_host(ctx, dst, src, n * sizeof(float), err) != ST_OK;
}

/* The asynchronous checkpoint writer (its copy of the state) and the metrics log. */
Status tr_setup_outputs(Run *r, Err *err) {
    TrainConfig *c = &r->cfg;
    if (c->ckpt_dir[0] && r->world > 1) { /* every rank writes its share of the tensors */
        const ParamLayout *pl = &r->g.w.layout;
        if (!(r->ck.write = calloc((size_t)pl->ntensors, 1))) return err_set(err, ST_ERR_RUNTIME, "out of memory");
        ckpt_shard_assign(pl, r->dp, r->dp_rank, r->ck.write);
        if (c->ckpt_async) {
            float probe = 0; /* async_init reads which buffers exist, not their contents */
            CkptShardSrc src = {pl, &probe, &probe, par_moment(r->par, 1) ? &probe : NULL, r->ck.write};
            Status st = ckpt_shard_async_init(&r->ck.sasync, &src, &r->mem, err);
            if (st != ST_OK) return st;
        }
    } else if (c->ckpt_dir[0] && c->ckpt_async) { /* one process: tr_setup_grid allows it only at ZeRO 0 */
        CkptOptState opt = {par_moment(r->par, 0), par_moment(r->par, 1), NULL};
        Status st = ckpt_async_init(&r->ck.async, &r->g.w, &opt, &r->mem, err);
        if (st != ST_OK) return st;
        if (!r->g.be->host_addressable) ckpt_async_set_copy(r->ck.async, device_copy_out, (void *)r->g.be);
    }
    if (c->log_layer_stats) {
        const ParamLayout *pl = &r->g.w.layout;
        if (r->dp != 1 || r->sliced || c->zero != 0 || !r->g.d.grads) /* `local`, a device's run included */
            return err_set(err, ST_ERR_INPUT, "--log-layer-stats: expected one process at ZeRO 0 (dp, tp, pp 1), found "
                           "world %d, ZeRO %d", r->world, c->zero);
        r->ls.nseg = pl->nseg < LAYER_STATS_MAX ? pl->nseg : LAYER_STATS_MAX;
        r->ls.prev = malloc(pl->total * sizeof(float));
        r->ls.grad = calloc((size_t)r->ls.nseg * 3, sizeof(double));
        if (!r->g.be->host_addressable) r->ls.host = malloc(pl->total * sizeof(float));
        if (!r->ls.prev || !r->ls.grad || (!r->g.be->host_addressable && !r->ls.host))
            return err_set(err, ST_ERR_RUNTIME, "out of memory (--log-layer-stats)");
        r->ls.weight = r->ls.grad + r->ls.nseg, r->ls.update = r->ls.weight + r->ls.nseg;
    }
    /* A resumed run appends to its log; a new run starts it. */
    return events_open(&r->log, c->log_path, r->rs.step > 0, err);
}

/* Per-rank planned bytes of parameters, gradients, master weights and moments. */
static void run_state_plan(const Run *r, size_t plan[MEM_NCAT]) {
    ParOptions po = par_default_options();
    const OptimConfig *oc = &r->cfg.optim;
    po.zero = r->cfg.zero, po.n_moments = optim_num_moments(oc), po.muon = oc->kind == OPT_MUON;
    po.shampoo = oc->kind == OPT_SHAMPOO, po.shampoo_block = oc->shampoo_block, po.precond_every = oc->precond_every;
    par_planned_bytes(&r->g.w.layout, r->dp, r->dp_rank, &po, (int)r->g.w.prec, plan);
}

int train_plan_input(const TrainConfig *c, int dp, int tp, int pp, int node_ranks, double peak, PlanInput *out) {
    PlanInput pi = plan_default_input();
    plan_model_from_config(&pi.model, &c->model);
    pi.micro_batch = c->micro_batch, pi.seq_len = c->seq_len, pi.grad_accum = c->grad_accum, pi.threads = c->threads;
    /* --threads 0 (auto), before train_threads resolved it (sweep's dry run): the trainer's default
     * for the grid's ranks sharing this machine, machine_auto_threads as train_threads calls it. */
    if (pi.threads == 0) pi.threads = machine_default_threads(dp * tp * pp);
    pi.dp = dp, pi.tp = tp, pi.sp = c->sp, pi.zero = c->zero, pi.overlap = !c->no_overlap;
    pi.no_noise_scale = c->no_noise_scale;
    pi.pp = pp, pi.interleave = c->interleave > 0 ? c->interleave : 1;
    snprintf(pi.pp_schedule, sizeof pi.pp_schedule, "%s", c->pp_schedule);
    snprintf(pi.pp_layers, sizeof pi.pp_layers, "%s", c->pp_layers);
    pi.n_moments = optim_num_moments(&c->optim);
    pi.muon = c->optim.kind == OPT_MUON;
    pi.shampoo = c->optim.kind == OPT_SHAMPOO;
    pi.shampoo_block = c->optim.shampoo_block, pi.precond_every = c->optim.precond_every;
    pi.hess_every = c->optim.kind == OPT_SOPHIA ? c->optim.hess_every : 0;
    pi.recompute = (PlanRecompute)c->recompute;
    pi.doc_mask = c->model.doc_mask; /* priced at span T (mean_doc_len 0): the documents are not known yet */
    pi.dropout = c->model.dropout;
    /* The hardware: --hardware; else, on the CPU, this machine's profile where `plan` has cached one
     * for these threads (measured GEMM efficiencies, bf16's its own: the preset's efficiency with
     * the run's peak priced a bf16 step 2.2x too fast on a Xeon whose bf16 GEMMs run at half its FMA
     * rate); else the preset with the run's measured peak, whichever precision. */
    int cached = 0;
    if (c->have_hw) pi.hw = c->hw;
    else if (!strcmp(c->device, "cpu")) {
        /* node_ranks > 1: the profile of that many ranks measured at once (`plan --devices-per-node
         * N` or --measure-copies N caches it), else the one of a rank alone (3: its memory
         * bandwidth and clock are not shared, so the plan is optimistic) */
        int cpus = machine_cpus_allowed(), nt = pi.threads < cpus ? pi.threads : cpus;
        double others;
        cJSON *j = node_ranks > 1 ? machine_profile_load(c->peak_cache, nt, node_ranks, NULL, &others, NULL) : NULL;
        int alone = node_ranks > 1 && !j;
        if (!j) j = machine_profile_load(c->peak_cache, nt, 1, NULL, &others, NULL);
        Err he;
        cached = j && plan_hardware_from_json(&pi.hw, j, &he) == ST_OK;
        if (cached && others > MACHINE_OTHERS_DISTURBED) cached = 2; /* measured while other work ran: low figures */
        else if (cached && alone) cached = 3;
        cJSON_Delete(j);
    }
    if (!c->have_hw && !cached && peak > 0) pi.hw.peak_fp32 = pi.hw.peak_bf16 = peak;
    /* This trainer's precisions. fp16 is emulated, so its GEMMs run at the fp32 rate: the fp16 peak
     * is the fp32 one. The precision itself stays fp16, so that the plan sizes what fp16 allocates
     * (its mixed-precision GEMM scratch in the workspace, layout_memory_plan) and runs (no tp overlap). */
    Err pe;
    plan_precision_trainer(&pi.prec, c->fp16 ? "fp16" : c->bf16 ? "bf16" : "fp32", &pe);
    if (c->fp16) pi.hw.peak_fp16 = pi.hw.peak_fp32;
    *out = pi;
    return cached;
}

/* This rank's peak FLOP/s for MFU (a->peak, a->peak_kind, a->mpeak): --peak-gflops, a device's
 * --hardware peak, else machine_peak_resolve's for the precision the GEMMs run in. */
static Status tr_resolve_peak(const TrainConfig *c, const Backend *be, RunAccounting *a, Err *err) {
    int nt = c->threads;
    a->peak = c->peak_flops;
    a->peak_kind = "given";
    if (!(a->peak > 0) && !be->host_addressable && c->have_hw) {
        /* A device with --hardware: the preset's (or profile's) dense peak of the precision */
        a->peak = c->bf16 && !c->fp16 ? c->hw.peak_bf16 : c->hw.peak_fp32;
        snprintf(a->mpeak.kind, sizeof a->mpeak.kind, "%s %s dense peak (--hardware)", c->hw.name,
                 c->bf16 && !c->fp16 ? "bf16" : "fp32");
        a->mpeak.best = a->peak, a->peak_kind = a->mpeak.kind;
    }
    if (!(a->peak > 0)) {
        /* The best of the FMA probe and a compute-bound GEMM of the precision the GEMMs run in
         * (fp16 is emulated in fp32), so MFU stays below 1 (train/machine_peak.h); on a device its
         * own GEMM's rate (cuBLASLt on a GPU), cached by the device's name. */
        MachinePeakOptions po = machine_peak_default_options();
        /* threads beyond the CPUs this rank may run on add no FLOP/s: the peak of those CPUs */
        int cpus = machine_cpus_allowed();
        po.threads = nt < cpus ? nt : cpus;
        po.bf16 = c->bf16 && !c->fp16, po.cache_path = c->peak_cache, po.remeasure = c->remeasure_peak;
        po.probe_scale = c->faults.peak_probe_scale, po.no_gemm = c->faults.peak_no_gemm;
        po.gemm_scale = c->faults.peak_gemm_scale;
        po.device = be->host_addressable ? NULL : be;
        Status pst = machine_peak_resolve(&a->mpeak, &po, err);
        if (pst != ST_OK) return pst;
        a->peak = a->mpeak.best, a->peak_kind = a->mpeak.kind;
        a->po = po, a->speed[0] = machine_peak_speed(&a->mpeak, a->mpeak.check);
    }
    return ST_OK;
}

void tr_recheck_speed(RunAccounting *a) {
    if (a->speed[0] > 0) a->speed[1] = machine_peak_speed(&a->mpeak, machine_peak_check(&a->po));
}

/* The console note of a machine slower than its cached figures (what the plan and MFU price) by
 * more than the spread of a quiet machine's checks (MACHINE_SPEED_SLOW). */
void tr_print_speed(const RunAccounting *a) {
    double s0 = a->speed[0], s1 = a->speed[1];
    if (!(s0 > 0) || (s0 >= MACHINE_SPEED_SLOW && !(s1 > 0 && s1 < MACHINE_SPEED_SLOW))) return;
    char end[64] = "";
    if (s1 > 0) snprintf(end, sizeof end, "; %.2f at the end", s1);
    printf("machine: GEMMs ran at %.2f of this machine's cached figures at start%s (the median 512^3 %s GEMM call "
           "against the best cached): other work, or a shared host's slower phases that no load figure shows; steps "
           "take about 1/%.2f of a plan priced on the cached profile\n", s0, end, a->po.bf16 ? "bf16" : "fp32",
           s1 > 0 ? (s0 + s1) / 2 : s0);
}

/* The peak FLOP/s that MFU divides by (this rank's, measured for the precision in use unless
 * given, summed over ranks), and the plan of this run from the same layout function
 * (docs/plan.md): its step time and memory, compared with the measurements at the end. */
Status tr_peak_and_plan_input(const TrainConfig *c, const Backend *be, Comm *comm, int dp, int tp, int pp,
                              RunAccounting *a, double *by_rank, PlanInput *pi, Err *err) {
    Status st = tr_resolve_peak(c, be, a, err);
    /* every rank's peak, summed in rank order: the same job peak on every rank, and the start
     * record shows which rank measured what */
    if (st == ST_OK) st = comm_allgather_f64(comm, a->peak, by_rank, err);
    if (st != ST_OK) return st;
    a->peak_job = 0;
    for (int i = 0; i < comm->world; i++) a->peak_job += by_rank[i];
    int cached = train_plan_input(c, dp, tp, pp, comm->node_ranks, a->peak, pi);
    a->plan_hw = c->have_hw ? c->hw.name
                 : cached == 2 ? "this machine's cached profile, measured while other work ran: its figures are low; "
                                 "`plan` measures it again"
                 : cached == 3 ? "this machine's cached profile of one rank alone (the ranks sharing this node were not "
                                 "measured together: `plan --devices-per-node N` measures them, N the ranks per node)"
                 : cached      ? "this machine's cached profile"
                               : "the preset's efficiency at the measured peak";
    /* Every rank on one node (comm found them so): dp and tp collectives go over shared memory. */
    if (comm->one_node && comm->world > pi->hw.devices_per_node) pi->hw.devices_per_node = comm->world;
    return ST_OK;
}

Status tr_setup_accounting(Run *r, Err *err) {
    TrainConfig *c = &r->cfg;
    int B = c->micro_batch, T = c->seq_len, k = c->grad_accum;
    PlanInput pi;
    Status st = tr_peak_and_plan_input(c, r->g.be, r->comm, r->dp, r->tp, r->pp, &r->acct, r->peak_by_rank, &pi, err);
    if (st != ST_OK) return st;
    r->acct.fpt = layout_flops_per_token(&c->model, T);
    r->acct.batch_seqs = (long long)B * k * r->dp, r->acct.batch_tokens = r->acct.batch_seqs * T;
    Err perr;
    r->acct.have_plan = plan_predict_step(&pi, &r->acct.plan, &perr) == ST_OK;
    return ST_OK;
}

/* The start's console lines that the full trainer and the LoRA loop share (rank 0 prints them). */
void tr_print_init_from(const TrainConfig *c) { /* what --init-from loaded: file, shape, tokenizer */
    const ModelConfig *m = &c->model;
    printf("init: weights from %s: %s L=%d heads=%d kv_heads=%d C=%d%s V=%d max_seq=%d, %lld parameters; tokenizer "
           "%s\n", c->init_from, model_arch_name(m->arch), m->n_layer, m->n_head, m->n_kv_head ? m->n_kv_head : m->n_head,
           m->n_embd, m->arch == ARCH_LLAMA ? (m->untied ? " untied" : " tied") : "", m->vocab, m->max_seq,
           model_config_num_params(m), c->tokenizer[0] ? c->tokenizer : "not recorded with the weights (none checked)");
    fflush(stdout);
}

void tr_print_data(const TrainConfig *c, const Loader *train, const Loader *val) {
    printf("data: %zu train tokens in %d shard(s), %llu rows of %d+1 (%s, utilization %.1f%%)%s%s\n",
           train->total_tokens, train->nshards, (unsigned long long)train->nwin, c->seq_len,
           c->no_pack ? "one document per row, padding masked"
           : c->model.doc_mask ? "packed, document-masked: attention within each EOT-closed document"
                               : "packed",
           100 * loader_utilization(train),
           train->masked ? ", loss masks: only trained targets count (the loss is their mean over the step)" : "",
           val->nshards ? "" : ", no validation data");
}

void tr_print_batch(const TrainConfig *c, int dp, long long seqs, long long tokens) {
    printf("batch: micro-batch %d x seq %d x accumulation %d%s = %lld sequences = %lld tokens per step\n", c->micro_batch,
           c->seq_len, c->grad_accum, dp > 1 ? " x dp" : "", seqs, tokens);
}

void tr_print_memory(const MemStats *mem) {
    printf("memory:");
    for (int mc = 0; mc < MEM_NCAT; mc++)
        if (mem->bytes[mc]) printf(" %s %.1f MiB", mem_category_name((MemCategory)mc), mem->bytes[mc] / 1048576.0);
    printf("\n");
}

void tr_print_compute(const TrainConfig *c, const RunAccounting *a, int threads_auto, const char *what) {
    int nt = c->threads, cpus = machine_cpus_allowed();
    char on[48] = "";
    if (cpus < nt) snprintf(on, sizeof on, " on %d CPU%s", cpus, cpus == 1 ? "" : "s");
    printf("compute: %.3g FLOP/token%s%s, peak %.1f GFLOP/s per rank (%s), %d thread%s%s%s, %s\n", a->fpt, what,
           c->model.doc_mask ? " at span T (--doc-mask: each step's MFU counts its documents' spans)" : "",
           a->peak / 1e9, c->peak_flops > 0 ? "given" : a->peak_kind, nt, nt == 1 ? "" : "s",
           threads_auto ? " (auto)" : "", on, mm_backend_info());
}

/* The console summary and the start and memory records. Collective (memory per rank). */
Status tr_announce(Run *r, Err *err) {
    TrainConfig *c = &r->cfg;
    int B = c->micro_batch, T = c->seq_len, nt = c->threads;
    double util = loader_utilization(&r->train);
    long long nparams = model_config_num_params(&c->model);
    r->res->num_params = nparams;
    if (!c->quiet) {
        const ModelConfig *m = &c->model;
        if (m->arch == ARCH_LLAMA)
        {
            char rope[96] = ""; /* plain RoPE prints as before */
            if (m->rope_type != ROPE_DEFAULT)
                snprintf(rope, sizeof rope, " rope=%s factor=%g", model_rope_type_name(m->rope_type), m->rope_factor);
            printf("model: llama L=%d NH=%d KV=%d C=%d F=%d V=%d (padded %d) maxT=%d theta=%g%s %s head, %lld "
                   "parameters\n", m->n_layer, m->n_head, m->n_kv_head, m->n_embd, m->ffn, m->vocab, m->vocab_padded,
                   m->max_seq, m->rope_theta, rope, m->untied ? "untied" : "tied", nparams);
        }
        else
            printf("model: L=%d NH=%d C=%d V=%d (padded %d) maxT=%d, %lld parameters\n", m->n_layer, m->n_head,
                   m->n_embd, m->vocab, m->vocab_padded, m->max_seq, nparams);
        if (r->ns.on)
            printf("noise scale: each replica's first micro-batch (%d x %d tokens) against the step's: logged as "
                   "noise_scale\n", B, T);
        else if (!c->no_noise_scale)
            printf("noise scale: not estimated (it needs a batch smaller than the step's: --grad-accum >= 2 or "
                   "dp >= 2, and no --pp)\n");
        if (m->param == PARAM_MUP)
            printf("muP: width multiplier m = %g (C %d / base %g): hidden matrices lr x %.4g and init variance x %.4g, "
                   "logits x %.4g, embeddings x %g, attention 1/hs\n", model_width_mult(m), m->n_embd,
                   m->mup_base_width, 1.0 / model_width_mult(m), 1.0 / model_width_mult(m), model_logit_mult(m),
                   m->mup_input_alpha);
        tr_print_data(c, &r->train, &r->val);
        tr_print_batch(c, r->dp, r->acct.batch_seqs, r->acct.batch_tokens);
        tr_print_memory(&r->mem);
        tr_print_compute(c, &r->acct, r->threads_auto, "");
        tr_print_speed(&r->acct);
        if (c->bf16 && !c->fp16 && r->g.be->host_addressable && machine_peak_bf16_slow(&r->acct.mpeak))
            printf("precision: bf16 GEMMs ran at %.0f GFLOP/s here, under 0.6 of the %.0f GFLOP/s probe peak (Intel "
                   "cores without AMX run bf16 dot products at half their FMA rate): --precision fp32 may train "
                   "faster on this CPU\n", r->acct.mpeak.gemm / 1e9, r->acct.mpeak.probe / 1e9);
        fflush(stdout);
    }
    size_t state[MEM_NCAT];
    run_state_plan(r, state);
    char comm_line[256];
    comm_describe(r->comm, comm_line, sizeof comm_line);
    StartEvent se = {.config = r->config, .threads = nt, .command = c->argv_joined, .comm = comm_line,
                     .batch_seqs = r->acct.batch_seqs,
                     .batch_tokens = r->acct.batch_tokens, .num_params = nparams, .flops_per_token = r->acct.fpt,
                     .peak_flops = r->acct.peak, .peak_flops_job = r->acct.peak_job,
                     .peak_flops_by_rank = r->peak_by_rank, .data_utilization = util,
                     .loss_masks = r->train.masked, .world = r->world, .peak_given = c->peak_flops > 0, .peak_kind = r->acct.peak_kind,
                     .peak_probe_flops = r->acct.mpeak.probe, .peak_gemm_flops = r->acct.mpeak.gemm,
                     .gemm_check = r->acct.speed[0],
                     .resumed_from_step = r->rs.step, .resume_requested = c->resume,
                     .resume_checkpoint = r->rs.path, .resume_note = r->rs.note,
                     .resume_read_bytes = (double)r->res->resume_read_bytes, .have_plan = r->acct.have_plan};
    if (r->acct.have_plan) {
        se.plan_step_ms = r->acct.plan.compute.step * 1e3, se.plan_tokens_per_s = r->acct.plan.compute.tokens_per_s;
        se.plan_mfu = r->acct.plan.compute.mfu, se.plan_num_params = (double)r->acct.plan.n_params;
        se.plan_hardware = r->acct.plan_hw;
        se.plan_memory_total = r->acct.plan.mem.total;
    }
    memset(se.planned, 0, sizeof se.planned);
    ActStage ast = layout_act_stage(&r->g.w.layout, r->g.s.nslots);
    ActOptions ao = {B, T, nt, c->recompute, c->fp16 ? 2 : c->bf16 ? 1 : 0, r->tp, c->sp, &ast};
    layout_run_bytes(&c->model, &ao, se.planned);
    static const MemCategory cats[4] = {MEM_PARAMS, MEM_GRADS, MEM_MASTER, MEM_MOMENTS};
    for (int i = 0; i < 4; i++) se.planned[cats[i]] = state[cats[i]];
    ev_start(&r->log, &se);

    /* Planned against measured state bytes on every rank (each against its own plan: pipeline
     * stages hold different tensors). */
    MemoryEvent me = {.world = r->world, .dp = r->dp, .tp = r->tp, .sp = c->sp, .zero = c->zero, .match = 1};
    memcpy(me.measured, r->mem.bytes, sizeof me.measured);
    memcpy(me.planned, state, sizeof me.planned);
    double *all = calloc((size_t)r->world * 5, sizeof *all), *planned = all + (size_t)r->world * 4;
    if (!all) return err_set(err, ST_ERR_RUNTIME, "out of memory");
    Status st = ST_OK;
    for (int i = 0; i < 4 && st == ST_OK; i++) {
        me.by_rank[i] = all + (size_t)i * r->world;
        st = comm_allgather_f64(r->comm, (double)r->mem.bytes[cats[i]], all + (size_t)i * r->world, err);
        if (st == ST_OK) st = comm_allgather_f64(r->comm, (double)state[cats[i]], planned, err);
        for (int q = 0; q < r->world; q++) me.match = me.match && me.by_rank[i][q] == planned[q];
    }
    if (st == ST_OK) ev_memory(&r->log, &me);
    free(all);
    if (st == ST_OK && r->world > 1 && !c->quiet)
        printf("memory per rank (dp %d, tp %d%s, pp %d, ZeRO %d): params %.2f MiB, grads %.2f MiB, moments %.2f MiB "
               "planned here; measured on every rank against its plan: %s\n",
               r->dp, r->tp, c->sp ? " + sp" : "", r->pp, c->zero, state[MEM_PARAMS] / 1048576.0, state[MEM_GRADS] / 1048576.0,
               state[MEM_MOMENTS] / 1048576.0, me.match ? "equal" : "DIFFERENT (see the memory event)");
    return st;
}
