/* events.c — the metrics log's writers; the schema is the table in events.h. */
#include "train/events.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "core/peak.h"
#include "model/layout.h"
#include "model/matmul.h"

Status events_open(EventLog *lg, const char *path, int append, Err *err) {
    lg->f = NULL, lg->err_no = 0, lg->path[0] = '\0';
    if (!path || !path[0]) return ST_OK;
    snprintf(lg->path, sizeof lg->path, "%s", path);
    lg->f = fopen(path, append ? "a" : "w");
    if (!lg->f) return err_set(err, ST_ERR_INPUT, "--log %s: expected a file that can be written, found %s", path, strerror(errno));
    return ST_OK;
}

void events_close(EventLog *lg) {
    if (lg->f) fclose(lg->f);
    lg->f = NULL;
}

Status events_check(const EventLog *lg, Err *err) {
    if (!lg->err_no) return ST_OK;
    return err_set(err, ST_ERR_RUNTIME, "--log %s: expected every record written, found a write that failed (%s): the "
                   "metrics log is incomplete", lg->path, strerror(lg->err_no));
}

/* Writes one record and takes ownership of o. A failed write (a full disk, /dev/full) is said once
 * on stderr and the run goes on (its weights and checkpoints matter more than its log); the run
 * then ends with events_check's error instead of success. */
static void emit(EventLog *lg, cJSON *o) {
    if (lg->f) {
        char *s = cJSON_PrintUnformatted(o);
        if (s) {
            errno = 0;
            int bad = fputs(s, lg->f) == EOF;
            bad |= fputc('\n', lg->f) == EOF;
            bad |= fflush(lg->f) != 0;
            if (bad && !lg->err_no) {
                lg->err_no = errno ? errno : EIO;
                fprintf(stderr, "scaletrain train: --log %s: write failed (%s): the records from here on are lost; "
                        "training goes on\n", lg->path, strerror(lg->err_no));
            }
            free(s);
        }
    }
    cJSON_Delete(o);
}

static cJSON *event(const char *name) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "event", name);
    return o;
}

static void add_num(cJSON *o, const char *k, double v) { cJSON_AddNumberToObject(o, k, v); }

/* A u64 seed: a JSON number while a double holds it exactly (up to 2^53: every config before
 * 2026-12 compares as it did), above that its decimal string, so the record is exact. */
static void add_seed(cJSON *o, const char *k, uint64_t v) {
    if (v <= (1ull << 53)) {
        cJSON_AddNumberToObject(o, k, (double)v);
        return;
    }
    char buf[24];
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)v);
    cJSON_AddStringToObject(o, k, buf);
}

/* A 64-bit hash as its 16 hex digits. */
static void add_hex64(cJSON *o, const char *k, unsigned long long v) {
    char buf[20];
    snprintf(buf, sizeof buf, "%016llx", v);
    cJSON_AddStringToObject(o, k, buf);
}

static void add_array(cJSON *o, const char *k, const double *v, int n) {
    cJSON *a = cJSON_AddArrayToObject(o, k);
    for (int i = 0; v && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
}

static void add_array_u(cJSON *o, const unsigned *v, int n) {
    cJSON *a = cJSON_AddArrayToObject(o, "ids");
    for (int i = 0; v && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
}

static void add_categories(cJSON *o, const char *k, const size_t *bytes) {
    cJSON *m = cJSON_AddObjectToObject(o, k);
    for (int c = 0; c < MEM_NCAT; c++) add_num(m, mem_category_name((MemCategory)c), (double)bytes[c]);
}

cJSON *events_config_json(const TrainConfig *c) {
    cJSON *o = cJSON_CreateObject();
    cJSON *m = cJSON_AddObjectToObject(o, "model");
    add_num(m, "layers", c->model.n_layer);
    add_num(m, "heads", c->model.n_head);
    add_num(m, "channels", c->model.n_embd);
    add_num(m, "vocab", c->model.vocab);
    add_num(m, "vocab_padded", c->model.vocab_padded);
    add_num(m, "max_seq_len", c->model.max_seq);
    add_num(m, "dropout", c->model.dropout);
    /* GPT-2 runs write no arch (their checkpoints from before Llama carry none, and resume compares). */
    if (c->model.arch == ARCH_LLAMA) {
        cJSON_AddStringToObject(m, "arch", model_arch_name(c->model.arch));
        add_num(m, "kv_heads", c->model.n_kv_head);
        add_num(m, "ffn", c->model.ffn);
        add_num(m, "norm_eps", c->model.norm_eps);
        add_num(m, "rope_theta", c->model.rope_theta);
        if (c->model.rope_type != ROPE_DEFAULT) { /* plain RoPE writes none (its checkpoints compare as before) */
            cJSON_AddStringToObject(m, "rope_type", model_rope_type_name(c->model.rope_type));
            add_num(m, "rope_factor", c->model.rope_factor);
            if (c->model.rope_type == ROPE_LLAMA3) {
                add_num(m, "rope_low_freq_factor", c->model.rope_low_freq_factor);
                add_num(m, "rope_high_freq_factor", c->model.rope_high_freq_factor);
                add_num(m, "rope_original_max_seq_len", c->model.rope_orig_max_seq);
            }
        }
        cJSON_AddBoolToObject(m, "tie_embeddings", !c->model.untied);
    }
    if (c->model.param == PARAM_MUP) { /* standard runs write none (their checkpoints compare as before) */
        cJSON_AddStringToObject(m, "param", model_param_name(c->model.param));
        add_num(m, "mup_base_width", c->model.mup_base_width);
        add_num(m, "mup_input_alpha", c->model.mup_input_alpha);
        add_num(m, "mup_output_alpha", c->model.mup_output_alpha);
    }
    if (c->model.doc_mask) { /* runs without it write none (their checkpoints compare as before); a trajectory
                                field on resume (ckpt_field_kind) */
        cJSON_AddBoolToObject(m, "doc_mask", 1);
        add_num(m, "doc_eot", c->model.doc_eot);
    }
    cJSON_AddStringToObject(o, "data", c->data);
    cJSON_AddStringToObject(o, "val_data", c->val_data);
    cJSON_AddStringToObject(o, "tokenizer", c->tokenizer);
    add_num(o, "micro_batch", c->micro_batch);
    add_num(o, "seq_len", c->seq_len);
    add_num(o, "grad_accum", c->grad_accum);
    add_num(o, "dp", c->dp > 0 ? c->dp : 1);
    add_num(o, "tp", c->tp > 0 ? c->tp : 1);
    add_num(o, "sp", c->sp);
    add_num(o, "pp", c->pp > 0 ? c->pp : 1);
    cJSON_AddStringToObject(o, "device", c->device);
    cJSON_AddStringToObject(o, "pp_schedule", c->pp_schedule);
    cJSON_AddStringToObject(o, "pp_layers", c->pp_layers);
    add_num(o, "interleave", c->interleave > 0 ? c->interleave : 1);
    add_num(o, "zero", c->zero);
    cJSON_AddStringToObject(o, "optimizer", optim_kind_name(c->optim.kind));
    add_num(o, "beta1", c->optim.beta1);
    add_num(o, "beta2", c->optim.beta2);
    add_num(o, "eps", c->optim.eps);
    add_num(o, "weight_decay", c->optim.weight_decay);
    add_num(o, "momentum", c->optim.momentum);
    if (c->optim.kind == OPT_MUON) { /* only then: other runs' config (and its hash) stay as they were */
        add_num(o, "muon_lr", c->optim.muon_lr);
        add_num(o, "muon_momentum", c->optim.muon_momentum);
    }
    if (c->optim.kind == OPT_SHAMPOO) {
        add_num(o, "shampoo_block", c->optim.shampoo_block);
        add_num(o, "precond_every", c->optim.precond_every);
        add_num(o, "shampoo_eps", c->optim.shampoo_eps);
    }
    if (c->optim.kind == OPT_SOPHIA) {
        add_num(o, "sophia_gamma", c->optim.sophia_gamma);
        add_num(o, "hess_every", c->optim.hess_every);
    }
    cJSON_AddStringToObject(o, "schedule", sched_kind_name(c->sched.kind));
    add_num(o, "lr", c->sched.lr);
    add_num(o, "min_lr", c->sched.min_lr);
    add_num(o, "warmup", (double)c->sched.warmup);
    add_num(o, "decay_frac", c->sched.decay_frac);
    cJSON_AddStringToObject(o, "decay_shape", sched_shape_name(c->sched.decay_shape));
    add_num(o, "grad_clip", c->grad_clip);
    add_num(o, "steps", (double)c->steps);
    add_seed(o, "seed", c->seed);
    add_seed(o, "data_seed", c->data_seed);
    add_num(o, "threads", c->threads);
    add_num(o, "val_every", c->val_every);
    add_num(o, "val_batches", c->val_batches);
    add_hex64(o, "tokenizer_hash", (unsigned long long)c->tokenizer_hash);
    cJSON_AddBoolToObject(o, "no_pack", c->no_pack);
    cJSON_AddStringToObject(o, "recompute", layout_recompute_name(c->recompute));
    cJSON_AddStringToObject(o, "precision", c->fp16 ? "fp16" : c->bf16 ? "bf16" : "fp32");
    /* The loss scaler's and the health detectors' options change what a run does (a skipped step, a
     * scale that doubles sooner): trajectory fields on resume (ckpt_field_kind). Written only where
     * they differ from the defaults, so the config (and the checkpoints that compare against it) of
     * a run that never set them stays as before. */
    const TrainConfig d = train_default_config();
    if (c->fp16 && (c->loss_scale != d.loss_scale || c->loss_scale_window != d.loss_scale_window)) {
        add_num(o, "loss_scale", c->loss_scale);
        add_num(o, "loss_scale_window", c->loss_scale_window);
    }
    const HealthOptions *h = &c->health, *hd = &d.health;
    if (h->window != hd->window || h->min_history != hd->min_history || h->min_sigma != hd->min_sigma ||
        h->loss.abs_threshold != hd->loss.abs_threshold || h->loss.z_threshold != hd->loss.z_threshold ||
        h->gnorm.abs_threshold != hd->gnorm.abs_threshold || h->gnorm.z_threshold != hd->gnorm.z_threshold ||
        h->policy != hd->policy || h->max_actions != hd->max_actions || h->max_nonfinite != hd->max_nonfinite ||
        h->stall_window != hd->stall_window || h->stall_min_delta != hd->stall_min_delta) {
        cJSON *hj = cJSON_AddObjectToObject(o, "health");
        cJSON_AddStringToObject(hj, "policy", health_policy_name(h->policy));
        add_num(hj, "window", h->window);
        add_num(hj, "min_history", h->min_history);
        add_num(hj, "min_sigma", h->min_sigma);
        add_num(hj, "loss_abs", h->loss.abs_threshold);
        add_num(hj, "loss_z", h->loss.z_threshold);
        add_num(hj, "gnorm_abs", h->gnorm.abs_threshold);
        add_num(hj, "gnorm_z", h->gnorm.z_threshold);
        add_num(hj, "max_actions", h->max_actions);
        add_num(hj, "max_nonfinite", h->max_nonfinite);
        add_num(hj, "stall_window", h->stall_window);
        add_num(hj, "stall_min_delta", h->stall_min_delta);
    }
    cJSON_AddStringToObject(o, "log", c->log_path);
    cJSON_AddStringToObject(o, "out", c->out_dir);
    cJSON_AddStringToObject(o, "ckpt_dir", c->ckpt_dir);
    add_num(o, "ckpt_every", c->ckpt_every);
    add_num(o, "keep_last", c->keep_last);
    add_num(o, "keep_every", c->keep_every);
    cJSON_AddBoolToObject(o, "ckpt_async", c->ckpt_async);
    cJSON_AddStringToObject(o, "init_from", c->init_from);
    return o;
}

void ev_start(EventLog *lg, const StartEvent *e) {
    cJSON *o = event("start");
    add_num(o, "schema_version", METRICS_SCHEMA_VERSION);
    cJSON_AddItemReferenceToObject(o, "config", (cJSON *)e->config);
    cJSON *b = cJSON_AddObjectToObject(o, "build");
    cJSON_AddStringToObject(b, "git_commit", build_git_commit());
    cJSON_AddStringToObject(b, "compiler", build_compiler());
    cJSON_AddStringToObject(b, "gemm", mm_backend_info());
    add_num(b, "threads", e->threads);
    if (e->command) cJSON_AddStringToObject(b, "command", e->command);
    if (e->comm) cJSON_AddStringToObject(b, "comm", e->comm);
    cJSON *eb = cJSON_AddObjectToObject(o, "effective_batch");
    add_num(eb, "sequences", (double)e->batch_seqs);
    add_num(eb, "tokens", (double)e->batch_tokens);
    add_num(o, "num_params", (double)e->num_params);
    add_num(o, "flops_per_token", e->flops_per_token);
    add_num(o, "world", e->world);
    add_num(o, "peak_flops", e->peak_flops);
    add_num(o, "peak_flops_job", e->peak_flops_job);
    if (e->peak_flops_by_rank) add_array(o, "peak_flops_by_rank", e->peak_flops_by_rank, e->world);
    cJSON_AddStringToObject(o, "peak_source", e->peak_given ? "given" : "measured");
    cJSON_AddStringToObject(o, "peak_kind", e->peak_given ? "given" : e->peak_kind);
    add_num(o, "peak_probe_flops", e->peak_probe_flops);
    add_num(o, "peak_gemm_flops", e->peak_gemm_flops);
    if (e->gemm_check > 0) add_num(o, "gemm_check", e->gemm_check);
    add_num(o, "data_utilization", e->data_utilization);
    cJSON_AddBoolToObject(o, "loss_masks", e->loss_masks);
    add_num(o, "resumed_from_step", (double)e->resumed_from_step);
    cJSON *rs = cJSON_AddObjectToObject(o, "resume");
    cJSON_AddStringToObject(rs, "requested", e->resume_requested ? e->resume_requested : "");
    cJSON_AddBoolToObject(rs, "found", e->resume_checkpoint && e->resume_checkpoint[0]);
    cJSON_AddStringToObject(rs, "checkpoint", e->resume_checkpoint ? e->resume_checkpoint : "");
    cJSON_AddStringToObject(rs, "note", e->resume_note ? e->resume_note : "");
    if (e->resume_read_bytes > 0) cJSON_AddNumberToObject(rs, "bytes_read", e->resume_read_bytes);
    if (e->have_plan) {
        cJSON *pl = cJSON_AddObjectToObject(o, "plan");
        add_num(pl, "step_ms", e->plan_step_ms);
        add_num(pl, "tokens_per_s", e->plan_tokens_per_s);
        add_num(pl, "mfu", e->plan_mfu);
        add_num(pl, "num_params", e->plan_num_params);
        add_num(pl, "memory_total", e->plan_memory_total);
        if (e->plan_hardware) cJSON_AddStringToObject(pl, "hardware", e->plan_hardware);
    }
    cJSON *mp = cJSON_AddObjectToObject(o, "memory_planned");
    for (int c = 0; c < MEM_NCAT; c++)
        if (c != MEM_DATA && c != MEM_COMM && c != MEM_CKPT_STAGING)
            add_num(mp, mem_category_name((MemCategory)c), (double)e->planned[c]);
    emit(lg, o);
}

void ev_memory(EventLog *lg, const MemoryEvent *e) {
    static const MemCategory cats[4] = {MEM_PARAMS, MEM_GRADS, MEM_MASTER, MEM_MOMENTS};
    cJSON *o = event("memory");
    add_categories(o, "measured", e->measured);
    cJSON *pl = cJSON_AddObjectToObject(o, "planned");
    cJSON *br = cJSON_AddObjectToObject(o, "measured_by_rank");
    for (int i = 0; i < 4; i++) {
        add_num(pl, mem_category_name(cats[i]), (double)e->planned[cats[i]]);
        add_array(br, mem_category_name(cats[i]), e->by_rank[i], e->world);
    }
    add_num(o, "zero", e->zero);
    add_num(o, "dp", e->dp);
    add_num(o, "tp", e->tp);
    add_num(o, "sp", e->sp);
    cJSON_AddBoolToObject(o, "planned_equals_measured", e->match);
    emit(lg, o);
}

void ev_memory_step(EventLog *lg, const MemoryStepEvent *e) {
    cJSON *o = event("memory");
    add_num(o, "step", (double)e->step);
    add_categories(o, "measured", e->measured);
    add_num(o, "allocated_total", e->allocated_total);
    add_num(o, "rss_anon_above_baseline", e->rss_above);
    add_num(o, "rss_unaccounted", e->rss_unaccounted);
    add_array(o, "allocated_total_by_rank", e->allocated_by_rank, e->world);
    add_array(o, "rss_anon_above_baseline_by_rank", e->rss_above_by_rank, e->world);
    emit(lg, o);
}

void ev_step(EventLog *lg, const StepEvent *e) {
    cJSON *o = event("step");
    add_num(o, "step", (double)e->step);
    add_num(o, "batch", (double)e->batch);
    add_num(o, "loss", e->loss);
    add_num(o, "lr", e->lr);
    add_num(o, "grad_norm", e->grad_norm);
    add_num(o, "grad_norm_clipped", e->grad_norm_clipped);
    add_array(o, "grad_norm_by_rank", e->grad_norm_by_rank, e->world);
    cJSON_AddBoolToObject(o, "applied", e->applied);
    if (e->fp16) add_num(o, "loss_scale", e->loss_scale);
    add_num(o, "tokens", e->tokens);
    add_num(o, "tokens_seen", e->tokens_seen);
    add_num(o, "tokens_per_s", e->tokens_per_s);
    add_num(o, "mfu", e->mfu);
    add_num(o, "elapsed_s", e->elapsed_s);
    add_num(o, "eta_s", e->eta_s);
    add_num(o, "comm_bytes", e->comm_bytes);
    if (e->comm_bytes_by_kind) {
        if (e->tp_overlapped >= 0) add_num(o, "tp_overlapped", e->tp_overlapped);
        if (e->tp_overlapped >= 0) add_num(o, "tp_overlapped_done", e->tp_overlapped_done);
        if (e->zero_gathers_ahead >= 0) add_num(o, "zero_gathers_ahead", e->zero_gathers_ahead);
        cJSON *k = cJSON_AddObjectToObject(o, "comm_bytes_by_kind");
        for (int i = 0; i < COMM_NKIND; i++) add_num(k, comm_kind_name((CommKind)i), e->comm_bytes_by_kind[i]);
    }
    add_num(o, "step_ms_max", e->step_ms_max);
    add_num(o, "step_ms_median", e->step_ms_median);
    if (e->pp > 1) {
        cJSON *pj = cJSON_AddObjectToObject(o, "pipeline");
        add_num(pj, "idle_ms", e->pp_idle_ms);
        add_num(pj, "busy_ms", e->pp_busy_ms);
        add_num(pj, "forward_ms", e->pp_f_ms);
        add_num(pj, "backward_ms", e->pp_b_ms);
        add_num(pj, "weight_ms", e->pp_w_ms);
        add_num(pj, "bubble", e->pp_bubble);
        add_num(pj, "bubble_formula", e->pp_bubble_formula);
        add_num(pj, "bubble_simulated", e->pp_bubble_sim);
        if (e->pp_idle_by_rank) add_array(pj, "idle_ms_by_rank", e->pp_idle_by_rank, e->world);
        static const char *const MS[3] = {"forward_ms_by_stage", "backward_ms_by_stage", "weight_ms_by_stage"};
        static const char *const OPS[3] = {"forward_ops_by_stage", "backward_ops_by_stage", "weight_ops_by_stage"};
        for (int i = 0; i < 3; i++) {
            if (e->pp_stage_ms[i]) add_array(pj, MS[i], e->pp_stage_ms[i], e->pp);
            if (e->pp_stage_ops[i]) add_array(pj, OPS[i], e->pp_stage_ops[i], e->pp);
        }
        static const char *const VMS[3] = {"forward_ms_by_virtual_stage", "backward_ms_by_virtual_stage",
                                           "weight_ms_by_virtual_stage"};
        for (int i = 0; i < 3 && e->pp_vstages > 0 && e->pp_vstage_ms; i++)
            add_array(pj, VMS[i], e->pp_vstage_ms + (size_t)i * e->pp_vstages, e->pp_vstages);
    }
    if (e->noise) {
        static const char *const K[6] = {"b_small", "g2_small", "g2", "trace_sigma", "b_simple", "b_simple_ema"};
        cJSON *nj = cJSON_AddObjectToObject(o, "noise_scale");
        add_num(nj, "b_big", e->tokens);
        for (int i = 0; i < 6; i++) add_num(nj, K[i], e->noise[i]);
        if (e->noise_by_replica) add_array(nj, "g2_small_by_replica", e->noise_by_replica, e->dp);
    }
    if (e->nseg > 0) {
        cJSON *ls = cJSON_AddObjectToObject(o, "layer_stats");
        cJSON *names = cJSON_AddArrayToObject(ls, "groups");
        for (int i = 0; i < e->nseg; i++) {
            char nm[32];
            if (i == 0) snprintf(nm, sizeof nm, "embeddings");
            else if (i == e->nseg - 1) snprintf(nm, sizeof nm, "final_norm");
            else snprintf(nm, sizeof nm, "block%d", i - 1);
            cJSON_AddItemToArray(names, cJSON_CreateString(nm));
        }
        add_array(ls, "grad_norm", e->seg_grad, e->nseg);
        add_array(ls, "weight_norm", e->seg_weight, e->nseg);
        add_array(ls, "update_norm", e->seg_update, e->nseg);
        double ratio[LAYER_STATS_MAX];
        for (int i = 0; i < e->nseg && i < LAYER_STATS_MAX; i++)
            ratio[i] = e->seg_weight[i] > 0 ? e->seg_update[i] / e->seg_weight[i] : NAN;
        add_array(ls, "update_ratio", ratio, e->nseg < LAYER_STATS_MAX ? e->nseg : LAYER_STATS_MAX);
    }
    cJSON *tm = cJSON_AddObjectToObject(o, "time_ms");
    add_num(tm, "total", e->ms_total);
    add_num(tm, "data", e->ms_data);
    add_num(tm, "forward", e->ms_forward);
    add_num(tm, "backward", e->ms_backward);
    add_num(tm, "comm", e->ms_comm);
    add_num(tm, "comm_dp", e->ms_comm_dp);
    add_num(tm, "comm_tp", e->ms_comm_tp);
    if (e->tp_overlapped >= 0) add_num(tm, "tp_progress", e->ms_tp_progress);
    if (e->ms_dp_progress >= 0) add_num(tm, "dp_progress", e->ms_dp_progress);
    if (e->ms_comm_by_kind) {
        cJSON *k = cJSON_AddObjectToObject(tm, "comm_by_kind");
        for (int i = 0; i < COMM_NKIND; i++) add_num(k, comm_kind_name((CommKind)i), e->ms_comm_by_kind[i]);
    }
    if (e->ms_comm_by_rank) add_array(tm, "comm_by_rank", e->ms_comm_by_rank, e->world);
    add_num(tm, "optimizer", e->ms_optimizer);
    add_num(tm, "checkpoint", e->ms_checkpoint);
    if (e->sophia) add_num(tm, "hessian", e->ms_hessian);
    if (e->sophia && e->ms_hessian > 0) {
        cJSON *h = cJSON_AddObjectToObject(o, "hessian");
        add_num(h, "loss", e->hess_loss);
        add_num(h, "tokens", e->hess_tokens);
        add_num(h, "comm_bytes", e->hess_bytes);
        cJSON_AddBoolToObject(h, "skipped", e->hess_skipped);
    }
    emit(lg, o);
}

void ev_spike(EventLog *lg, const SpikeEvent *e) {
    cJSON *o = event(e->nonfinite ? "nonfinite" : "spike");
    add_num(o, "step", (double)e->step);
    add_num(o, "batch", (double)e->batch);
    cJSON_AddStringToObject(o, "metric", e->metric);
    add_num(o, "value", e->value);
    add_num(o, "median", e->median);
    add_num(o, "z", e->z);
    cJSON_AddStringToObject(o, "action", e->action);
    add_num(o, "tokens_seen", e->tokens_seen);
    emit(lg, o);
}

void ev_val(EventLog *lg, long step, double loss, double tokens, double ms) {
    cJSON *o = event("val");
    add_num(o, "step", (double)step);
    add_num(o, "loss", loss);
    add_num(o, "perplexity", exp(loss));
    add_num(o, "tokens", tokens);
    add_num(o, "time_ms", ms);
    emit(lg, o);
}

void ev_stall(EventLog *lg, long step, const char *why) {
    cJSON *o = event("stall");
    add_num(o, "step", (double)step);
    cJSON_AddStringToObject(o, "why", why);
    emit(lg, o);
}

void ev_peak(EventLog *lg, long step, double peak_job, double previous, double achieved) {
    cJSON *o = event("peak");
    add_num(o, "step", (double)step);
    add_num(o, "peak_flops_job", peak_job);
    add_num(o, "previous_peak_flops_job", previous);
    add_num(o, "achieved_flops", achieved);
    emit(lg, o);
}

void ev_skip(EventLog *lg, long step, long batch) {
    cJSON *o = event("skip");
    add_num(o, "step", (double)step);
    add_num(o, "batch", (double)batch);
    emit(lg, o);
}

void ev_rollback(EventLog *lg, long step, long to_step, long batch, const char *checkpoint) {
    cJSON *o = event("rollback");
    add_num(o, "step", (double)step);
    add_num(o, "to_step", (double)to_step);
    add_num(o, "batch", (double)batch);
    cJSON_AddStringToObject(o, "checkpoint", checkpoint);
    emit(lg, o);
}

void ev_overflow(EventLog *lg, long step, long batch, double scale, double new_scale) {
    cJSON *o = event("overflow");
    add_num(o, "step", (double)step);
    add_num(o, "batch", (double)batch);
    add_num(o, "loss_scale", scale);
    add_num(o, "new_loss_scale", new_scale);
    emit(lg, o);
}

void ev_ckpt(EventLog *lg, long step, double ms, const char *path, double bytes, int pruned) {
    cJSON *o = event("ckpt");
    add_num(o, "step", (double)step);
    cJSON_AddStringToObject(o, "mode", path ? "sync" : "async");
    add_num(o, "time_ms", ms);
    if (path) {
        cJSON_AddStringToObject(o, "path", path);
        add_num(o, "bytes", bytes);
        add_num(o, "pruned", pruned);
    }
    emit(lg, o);
}

void ev_ckpt_lora(EventLog *lg, long step, double ms, const char *path) {
    cJSON *o = event("ckpt");
    add_num(o, "step", (double)step);
    cJSON_AddStringToObject(o, "mode", "lora");
    add_num(o, "time_ms", ms);
    cJSON_AddStringToObject(o, "path", path);
    emit(lg, o);
}

void ev_lora_start(EventLog *lg, const LoraStartEvent *e) {
    const TrainConfig *c = e->cfg;
    cJSON *o = event("start");
    cJSON_AddItemToObject(o, "config", events_config_json(c));
    cJSON *b = cJSON_AddObjectToObject(o, "effective_batch");
    add_num(b, "sequences", (double)e->batch_seqs);
    add_num(b, "tokens", (double)e->batch_tokens);
    cJSON_AddBoolToObject(o, "loss_masks", e->loss_masks);
    cJSON *l = cJSON_AddObjectToObject(o, "lora");
    add_num(l, "rank", c->lora.rank);
    add_num(l, "alpha", c->lora.alpha);
    add_num(l, "dropout", c->lora.dropout);
    cJSON_AddStringToObject(l, "targets", e->targets);
    add_num(l, "adapter_params", (double)e->adapter_params);
    add_num(l, "base_params", (double)e->base_params);
    cJSON_AddStringToObject(l, "base_precision", c->lora.base_bf16 ? "bf16" : "fp32");
    add_hex64(l, "base_xxh3", e->base_xxh3);
    add_hex64(l, "base_local_xxh3", e->base_local_xxh3);
    add_num(o, "world", e->world);
    add_num(o, "dp", e->dp);
    add_num(o, "tp", e->tp);
    add_num(o, "zero", e->zero);
    add_num(o, "resumed_from_step", (double)e->resumed_from_step);
    if (e->doc_mask) add_num(cJSON_AddObjectToObject(o, "doc_mask"), "eot", e->doc_eot);
    add_num(o, "flops_per_token", e->flops_per_token);
    add_num(o, "peak_flops", e->peak_flops);
    add_num(o, "peak_flops_job", e->peak_flops_job);
    cJSON_AddStringToObject(o, "peak_kind", e->peak_kind ? e->peak_kind : "");
    if (e->plan_step_ms > 0) {
        cJSON *pl = cJSON_AddObjectToObject(o, "plan");
        add_num(pl, "step_ms", e->plan_step_ms);
        add_num(pl, "tokens_per_s", e->plan_tokens_per_s);
        add_num(pl, "mfu", e->plan_mfu);
    }
    emit(lg, o);
}

void ev_lora_memory(EventLog *lg, const size_t measured[MEM_NCAT], const size_t planned[MEM_NCAT], int equal) {
    cJSON *o = event("memory");
    cJSON_AddTrueToObject(o, "lora");
    add_categories(o, "measured", measured);
    add_categories(o, "planned", planned);
    cJSON_AddBoolToObject(o, "planned_equals_measured", equal);
    emit(lg, o);
}

void ev_lora_step(EventLog *lg, long step, double loss, double lr, double norm, double norm_clipped, long long tokens,
                  long long tokens_seen, double ms, double mfu) {
    cJSON *o = event("step");
    add_num(o, "step", (double)step);
    add_num(o, "loss", loss);
    add_num(o, "lr", lr);
    add_num(o, "grad_norm", norm);
    add_num(o, "grad_norm_clipped", norm_clipped);
    add_num(o, "tokens", (double)tokens);
    add_num(o, "tokens_seen", (double)tokens_seen);
    add_num(o, "mfu", mfu);
    cJSON_AddTrueToObject(o, "lora");
    add_num(cJSON_AddObjectToObject(o, "time_ms"), "total", ms);
    emit(lg, o);
}

void ev_lora_end(EventLog *lg, long steps, double final_loss, unsigned long long base_local_xxh3_after,
                 double median_step_ms, double tokens_per_s, double planned_step_ms) {
    cJSON *o = event("end");
    add_num(o, "steps", (double)steps);
    add_num(o, "final_loss", final_loss);
    add_hex64(o, "base_local_xxh3_after", base_local_xxh3_after);
    add_num(o, "median_step_ms", median_step_ms);
    add_num(o, "tokens_per_s", tokens_per_s);
    if (planned_step_ms > 0) add_num(o, "planned_step_ms", planned_step_ms);
    emit(lg, o);
}

void ev_sample(EventLog *lg, long step, const char *text, const unsigned *ids, int n) {
    cJSON *o = event("sample");
    add_num(o, "step", (double)step);
    if (text) cJSON_AddStringToObject(o, "text", text);
    else add_array_u(o, ids, n);
    emit(lg, o);
}

void ev_end(EventLog *lg, const EndEvent *e) {
    const TrainResult *r = e->res;
    cJSON *o = event("end");
    add_num(o, "steps", (double)r->steps_done);
    cJSON_AddBoolToObject(o, "preempted", r->preempted);
    add_num(o, "spikes", (double)r->spikes);
    add_num(o, "skips", (double)r->skips);
    add_num(o, "rollbacks", (double)r->rollbacks);
    if (e->fp16) {
        add_num(o, "overflows", (double)r->overflows);
        add_num(o, "loss_scale", e->loss_scale);
    }
    add_num(o, "final_loss", r->last_loss);
    add_num(o, "final_val_loss", r->last_val);
    add_num(o, "median_step_ms", r->median_step_ms);
    add_num(o, "tokens_per_s", r->tokens_per_s);
    add_num(o, "wall_s", e->wall_s);
    if (e->have_plan) {
        add_num(o, "planned_step_ms", e->planned_step_ms);
        add_num(o, "step_ms_over_plan", r->median_step_ms / e->planned_step_ms);
    }
    if (e->gemm_check[0] > 0 && e->gemm_check[1] > 0) {
        cJSON *g = cJSON_AddObjectToObject(o, "gemm_check");
        add_num(g, "start", e->gemm_check[0]);
        add_num(g, "end", e->gemm_check[1]);
    }
    add_categories(o, "memory_measured", e->peak);
    emit(lg, o);
}
