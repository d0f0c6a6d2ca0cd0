/* plan_json.c — a plan's pipeline schedule summary and the plan as JSON (plan_json.h).
 *
 * Moved from cli/cmd_plan.c (issue 24): the schema stays docs/plan.md's, member for member. */
#include "plan/plan_json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"

Status plan_sched_split(PlanSched *ps, const PlanInput *in, const char *layers, Err *err) {
    ModelConfig cfg;
    int v = in->interleave > 1 ? in->interleave : 1, S = in->pp * v;
    if (!plan_model_to_config(&in->model, &cfg) || in->pp > SCHED_MAX_P || v > LAYOUT_MAX_CHUNKS) {
        if (layers[0]) return err_set(err, ST_ERR_INPUT, "--pp-layers: expected one of our GPT-2 models (a preset or "
                                      "--layers/--heads/--channels), found a model the trainer cannot build");
        return ST_OK;
    }
    Status st = layout_pp_split(&cfg, in->seq_len, S, layers[0] ? layers : NULL, ps->first, ps->last, err);
    if (st != ST_OK) return st;
    for (int s = 0; s < S; s++) {
        ps->flops[s] = layout_pp_stage_flops(&cfg, in->seq_len, ps->first, ps->last, s, S);
        ps->params[s] = layout_pp_stage_params(&cfg, ps->first, ps->last, s, S);
    }
    ps->have_split = 1, ps->S = S;
    return ST_OK;
}

void plan_sched_free(PlanSched *ps) {
    for (int i = 0; ps->lines && i < ps->p; i++) free(ps->lines[i]);
    free(ps->lines);
}

Status plan_sched_build(PlanSched *ps, const PlanInput *in, SchedType type, int want_lines, Err *err) {
    memset(ps, 0, sizeof *ps);
    int m = in->pp_microbatches > 0 ? in->pp_microbatches : in->grad_accum;
    PipeSchedule sc;
    Status st = sched_build(&sc, type, in->pp, m, in->interleave, err);
    if (st != ST_OK) return st;
    SchedTimes t = {1.0, type == SCHED_ZB_H1 ? 1.0 : 2.0, type == SCHED_ZB_H1 ? 1.0 : 0.0, 0.0};
    SchedSim sim;
    if ((st = sched_simulate(&sc, &t, &sim, err)) != ST_OK) {
        sched_free(&sc);
        return st;
    }
    ps->have = 1, ps->type = type, ps->bubble = sim.bubble, ps->peak0 = sim.peak_inflight[0], ps->p = sc.p;
    if (want_lines && (ps->lines = calloc((size_t)sc.p, sizeof *ps->lines))) {
        for (int r = 0; r < sc.p; r++) {
            size_t cap = 16 + (size_t)sc.n[r] * 16, len = 0;
            char *line = malloc(cap);
            if (!line) break;
            len += (size_t)snprintf(line, cap, "rank %d:", r);
            for (int i = 0; i < sc.n[r] && len + 16 < cap; i++) {
                line[len++] = ' ';
                len += (size_t)sched_op_format(&sc, sc.ops[r][i], line + len, cap - len);
            }
            ps->lines[r] = line;
        }
    }
    sched_free(&sc);
    return ST_OK;
}

cJSON *plan_json(const PlanInput *in, const PlanResult *r, const PlanSched *ps) {
    const PlanModel *m = &in->model;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "schema_version", 1);
    cJSON *jm = cJSON_AddObjectToObject(o, "model");
    cJSON_AddStringToObject(jm, "name", m->params_override > 0 ? "params" : m->name);
    cJSON_AddStringToObject(jm, "arch", m->params_override > 0 ? "unknown" : m->arch == PLAN_ARCH_LLAMA ? "llama" : "gpt2");
    if (m->params_override == 0) {
        cJSON_AddNumberToObject(jm, "layers", m->n_layer);
        cJSON_AddNumberToObject(jm, "heads", m->n_head);
        cJSON_AddNumberToObject(jm, "kv_heads", m->n_kv_head);
        cJSON_AddNumberToObject(jm, "channels", m->d_model);
        cJSON_AddNumberToObject(jm, "ffn", m->d_ff);
        cJSON_AddNumberToObject(jm, "vocab", m->vocab);
        cJSON_AddNumberToObject(jm, "max_seq_len", m->max_seq);
        cJSON_AddBoolToObject(jm, "tied_head", m->tied_head);
    }
    cJSON *jp = cJSON_AddObjectToObject(o, "parameters");
    cJSON_AddNumberToObject(jp, "total", (double)r->n_params);
    cJSON_AddNumberToObject(jp, "embedding", (double)r->n_params_embedding);
    cJSON_AddNumberToObject(jp, "per_layer", (double)r->n_params_layer);
    cJSON_AddBoolToObject(jp, "exact_layout", r->exact_layout);
    cJSON_AddNumberToObject(jp, "layout_floats", (double)r->layout_floats);
    cJSON_AddNumberToObject(jp, "per_device", r->params_per_device);
    cJSON *jx = cJSON_AddObjectToObject(o, "precision");
    cJSON_AddNumberToObject(jx, "weight_bytes", in->prec.weight);
    cJSON_AddNumberToObject(jx, "grad_bytes", in->prec.grad);
    cJSON_AddNumberToObject(jx, "master_bytes", in->prec.master);
    cJSON_AddNumberToObject(jx, "moment_bytes", in->prec.moment);
    cJSON_AddNumberToObject(jx, "moments", in->n_moments);
    cJSON_AddNumberToObject(jx, "act_bytes", in->prec.act);
    cJSON_AddStringToObject(jx, "compute", plan_dtype_name(in->prec.compute));
    cJSON *jl = cJSON_AddObjectToObject(o, "layout");
    cJSON_AddNumberToObject(jl, "dp", in->dp);
    cJSON_AddNumberToObject(jl, "tp", in->tp);
    cJSON_AddNumberToObject(jl, "pp", in->pp);
    cJSON_AddBoolToObject(jl, "sp", in->sp);
    cJSON_AddNumberToObject(jl, "zero", in->zero);
    cJSON_AddStringToObject(jl, "recompute", plan_recompute_name(in->recompute));
    if (in->doc_mask) { /* only then: other plans' JSON as before */
        cJSON_AddBoolToObject(jl, "doc_mask", 1);
        cJSON_AddNumberToObject(jl, "mean_doc_len", in->mean_doc_len);
    }
    cJSON_AddNumberToObject(jl, "pp_microbatches", r->microbatches);
    cJSON_AddNumberToObject(jl, "interleave", in->interleave);
    cJSON_AddNumberToObject(jl, "world", r->world);
    cJSON_AddNumberToObject(jl, "nodes", r->nodes);
    cJSON *jh = cJSON_AddObjectToObject(o, "hardware");
    cJSON_AddStringToObject(jh, "name", in->hw.name);
    cJSON_AddBoolToObject(jh, "default", in->hw_default);
    cJSON_AddNumberToObject(jh, "peak_fp32", in->hw.peak_fp32);
    cJSON_AddNumberToObject(jh, "peak_bf16", in->hw.peak_bf16);
    cJSON_AddNumberToObject(jh, "peak_fp16", in->hw.peak_fp16);
    cJSON_AddNumberToObject(jh, "memory_bytes", in->hw.memory);
    cJSON_AddNumberToObject(jh, "mem_bw", in->hw.mem_bw);
    cJSON_AddNumberToObject(jh, "intra_bw", in->hw.intra_bw);
    cJSON_AddNumberToObject(jh, "inter_bw", in->hw.inter_bw);
    cJSON_AddNumberToObject(jh, "intra_lat", in->hw.intra_lat);
    cJSON_AddNumberToObject(jh, "inter_lat", in->hw.inter_lat);
    cJSON_AddNumberToObject(jh, "devices_per_node", in->hw.devices_per_node);
    cJSON_AddNumberToObject(jh, "matmul_eff", in->hw.matmul_eff);
    cJSON_AddNumberToObject(jh, "matmul_eff_bf16", in->hw.matmul_eff_bf16);
    cJSON_AddNumberToObject(jh, "storage_bw", in->hw.storage_bw);
    cJSON_AddNumberToObject(jh, "backend_bytes", in->hw.backend_bytes);
    cJSON *je = cJSON_AddObjectToObject(o, "memory_bytes");
    cJSON_AddNumberToObject(je, "weights", r->mem.weights);
    cJSON_AddNumberToObject(je, "gradients", r->mem.grads);
    cJSON_AddNumberToObject(je, "master", r->mem.master);
    cJSON_AddNumberToObject(je, "moments", r->mem.moments);
    cJSON_AddNumberToObject(je, "activations", r->mem.activations);
    cJSON_AddNumberToObject(je, "workspace", r->mem.workspace);
    cJSON_AddNumberToObject(je, "comm", r->mem.comm);
    cJSON_AddNumberToObject(je, "backend", r->mem.backend); /* the CUDA backend's workspace on a GPU */
    cJSON_AddNumberToObject(je, "total", r->mem.total);
    cJSON_AddNumberToObject(je, "device", r->mem.device);
    cJSON_AddNumberToObject(je, "margin", r->mem.margin);
    cJSON_AddBoolToObject(je, "fits", r->mem.fits);
    cJSON_AddNumberToObject(je, "bytes_per_param", r->mem.bytes_per_param);
    /* The states per rank under the trainer's category names (its `memory` event), and which model
     * gave them: "trainer" (layout_zero_bytes: what each rank of our trainer allocates) or "zero_paper". */
    cJSON_AddStringToObject(je, "states", r->mem.trainer_states ? "trainer" : "zero_paper");
    /* --accounting: "trainer" (our trainer's allocation where it applies) or "megatron" (asked for) */
    cJSON_AddStringToObject(je, "accounting", in->textbook ? "megatron" : "trainer");
    cJSON *jcat = cJSON_AddObjectToObject(je, "by_category");
    cJSON_AddNumberToObject(jcat, mem_category_name(MEM_PARAMS), r->mem.weights);
    cJSON_AddNumberToObject(jcat, mem_category_name(MEM_GRADS), r->mem.grads);
    cJSON_AddNumberToObject(jcat, mem_category_name(MEM_MASTER), r->mem.master);
    cJSON_AddNumberToObject(jcat, mem_category_name(MEM_MOMENTS), r->mem.moments);
    if (r->act.exact_used) { /* our kernels' allocation (layout_run_bytes at tp > 1) */
        cJSON_AddNumberToObject(jcat, mem_category_name(MEM_ACTIVATIONS), r->mem.activations);
        cJSON_AddNumberToObject(jcat, mem_category_name(MEM_WORKSPACE), r->mem.workspace);
    }
    cJSON *js = cJSON_AddArrayToObject(je, "fixes");
    for (int i = 0; i < r->nsuggest; i++) cJSON_AddItemToArray(js, cJSON_CreateString(r->suggest[i]));
    if (r->devices_needed > 0) { /* no knob fits on this world: the fewest devices that fit */
        cJSON_AddNumberToObject(je, "devices_needed", (double)r->devices_needed);
        cJSON_AddStringToObject(je, "devices_layout", r->devices_layout);
    }
    cJSON *ja = cJSON_AddObjectToObject(o, "activations");
    cJSON_AddStringToObject(ja, "mode", r->act.exact_used ? "exact" : "korthikanti");
    cJSON_AddNumberToObject(ja, "per_layer_used", r->act.per_layer);
    cJSON_AddNumberToObject(ja, "per_layer_korthikanti_plain", r->act.korth_plain);
    cJSON_AddNumberToObject(ja, "per_layer_korthikanti", r->act.korth);
    cJSON_AddNumberToObject(ja, "per_layer_exact", r->act.exact_layer);
    cJSON_AddNumberToObject(ja, "exact_total", r->act.exact_total);
    cJSON_AddNumberToObject(ja, "exact_scratch", r->act.exact_scratch);
    cJSON_AddNumberToObject(ja, "layers_per_device", r->layers_per_device);
    cJSON_AddNumberToObject(ja, "inflight_microbatches", r->act.inflight);
    cJSON *jb = cJSON_AddObjectToObject(o, "batch");
    cJSON_AddNumberToObject(jb, "micro_batch", in->micro_batch);
    cJSON_AddNumberToObject(jb, "seq_len", in->seq_len);
    cJSON_AddNumberToObject(jb, "grad_accum", in->grad_accum);
    cJSON_AddNumberToObject(jb, "sequences", (double)r->batch_seqs);
    cJSON_AddNumberToObject(jb, "tokens", (double)r->batch_tokens);
    cJSON_AddNumberToObject(jb, "budget_tokens", r->tokens);
    cJSON_AddStringToObject(jb, "budget_source", r->budget_source);
    cJSON_AddNumberToObject(jb, "steps", (double)r->steps);
    cJSON *jc = cJSON_AddObjectToObject(o, "compute");
    cJSON_AddNumberToObject(jc, "flops_per_token_6n", r->compute.fpt_6n);
    cJSON_AddNumberToObject(jc, "flops_per_token", r->compute.fpt);
    cJSON_AddNumberToObject(jc, "hw_flops_per_token", r->compute.fpt_hw);
    cJSON_AddNumberToObject(jc, "total_flops_6nd", r->compute.total_6nd);
    cJSON_AddNumberToObject(jc, "total_flops", r->compute.total);
    cJSON_AddNumberToObject(jc, "peak_flops", r->compute.peak);
    cJSON *jt = cJSON_AddObjectToObject(jc, "time_s");
    cJSON_AddNumberToObject(jt, "matmul", r->compute.t_matmul);
    cJSON_AddNumberToObject(jt, "elementwise", r->compute.t_elementwise);
    cJSON_AddNumberToObject(jt, "dropout", r->compute.t_dropout); /* inside elementwise */
    cJSON_AddNumberToObject(jt, "head_softmax", r->compute.t_head); /* inside elementwise */
    cJSON_AddNumberToObject(jt, "bubble", r->compute.t_bubble);
    cJSON_AddNumberToObject(jt, "tp", r->compute.t_tp);
    cJSON_AddNumberToObject(jt, "pp", r->compute.t_pp);
    cJSON_AddNumberToObject(jt, "dp", r->compute.t_dp);
    cJSON_AddNumberToObject(jt, "dp_exposed", r->compute.t_dp_exposed);
    cJSON_AddNumberToObject(jt, "optimizer", r->compute.t_optimizer);
    if (in->hess_every > 0) cJSON_AddNumberToObject(jt, "hessian", r->compute.t_hessian);
    cJSON_AddNumberToObject(jc, "step_s_overlap", r->compute.step_overlap);
    cJSON_AddNumberToObject(jc, "step_s_serial", r->compute.step_serial);
    cJSON_AddNumberToObject(jc, "step_s", r->compute.step);
    cJSON_AddNumberToObject(jc, "tokens_per_s", r->compute.tokens_per_s);
    cJSON_AddNumberToObject(jc, "mfu", r->compute.mfu);
    cJSON_AddNumberToObject(jc, "hfu", r->compute.hfu);
    cJSON_AddNumberToObject(jc, "train_s", r->compute.train_seconds);
    cJSON_AddNumberToObject(jc, "target_s", r->compute.target_seconds);
    cJSON_AddNumberToObject(jc, "mfu_required", r->compute.mfu_required);
    cJSON *jpp = cJSON_AddObjectToObject(o, "pipeline");
    cJSON_AddNumberToObject(jpp, "bubble", r->bubble);
    cJSON_AddNumberToObject(jpp, "bubble_interleaved", r->bubble_interleaved);
    if (ps->have) {
        cJSON_AddStringToObject(jpp, "schedule", sched_type_name(ps->type));
        cJSON_AddNumberToObject(jpp, "bubble_schedule", ps->bubble);
        cJSON_AddNumberToObject(jpp, "peak_inflight_stage0", ps->peak0);
        if (ps->have_split) {
            cJSON *a = cJSON_AddArrayToObject(jpp, "stages");
            for (int st = 0; st < ps->S; st++) {
                cJSON *o2 = cJSON_CreateObject();
                cJSON_AddNumberToObject(o2, "first", ps->first[st]);
                cJSON_AddNumberToObject(o2, "last", ps->last[st]);
                cJSON_AddNumberToObject(o2, "flops_per_token", ps->flops[st]);
                cJSON_AddNumberToObject(o2, "params", (double)ps->params[st]);
                cJSON_AddItemToArray(a, o2);
            }
        }
        if (r->pp_exact) {
            /* Each pipeline rank of our trainer (plan_trainer_pp; docs/plan.md "Pipeline ranks"). */
            cJSON_AddNumberToObject(jpp, "worst_rank", r->pp_worst);
            cJSON *a = cJSON_AddArrayToObject(jpp, "per_rank");
            for (int q = 0; q < in->pp; q++) {
                const PlanPpRank *k = &r->pp_rank[q];
                cJSON *o2 = cJSON_CreateObject();
                cJSON_AddNumberToObject(o2, "rank", q);
                cJSON *ch = cJSON_AddArrayToObject(o2, "chunks");
                for (int c = 0; c < k->stage.n; c++) {
                    int fl[2] = {k->stage.first[c], k->stage.last[c]};
                    cJSON_AddItemToArray(ch, cJSON_CreateIntArray(fl, 2));
                }
                cJSON_AddNumberToObject(o2, "blocks", k->blocks);
                cJSON_AddBoolToObject(o2, "embeddings", k->has_embed);
                cJSON_AddBoolToObject(o2, "head", k->has_head);
                cJSON_AddNumberToObject(o2, "params", (double)k->params);
                cJSON_AddNumberToObject(o2, "layout_floats", (double)k->layout_floats);
                cJSON_AddNumberToObject(o2, "activation_slots", k->slots);
                cJSON_AddNumberToObject(o2, "flops_per_token", k->flops);
                cJSON_AddNumberToObject(o2, "compute_s", k->t_compute);
                cJSON *mb = cJSON_AddObjectToObject(o2, "memory_bytes");
                for (int c = 0; c < MEM_NCAT; c++)
                    if (c == MEM_PARAMS || c == MEM_GRADS || c == MEM_MASTER || c == MEM_MOMENTS || c == MEM_ACTIVATIONS ||
                        c == MEM_WORKSPACE || c == MEM_COMM)
                        cJSON_AddNumberToObject(mb, mem_category_name((MemCategory)c), k->bytes[c]);
                cJSON_AddNumberToObject(mb, "total", k->total);
                cJSON *pb = cJSON_AddObjectToObject(o2, "p2p_bytes_per_step");
                cJSON_AddNumberToObject(pb, "activations", k->p2p_act);
                cJSON_AddNumberToObject(pb, "gradients", k->p2p_grad);
                cJSON_AddNumberToObject(pb, "tied_wte", k->p2p_tied);
                cJSON_AddNumberToObject(pb, "total", k->p2p);
                cJSON *pm = cJSON_AddObjectToObject(o2, "p2p_messages_per_step");
                cJSON_AddNumberToObject(pm, "activations", k->sends_act);
                cJSON_AddNumberToObject(pm, "gradients", k->sends_grad);
                cJSON_AddItemToArray(a, o2);
            }
        } else {
            cJSON_AddNullToObject(jpp, "per_rank");
            if (r->pp_note[0]) cJSON_AddStringToObject(jpp, "per_rank_note", r->pp_note);
        }
        if (ps->lines) {
            cJSON *a = cJSON_AddArrayToObject(jpp, "schedule_print");
            for (int i = 0; i < ps->p; i++) cJSON_AddItemToArray(a, cJSON_CreateString(ps->lines[i] ? ps->lines[i] : ""));
        } else {
            cJSON_AddNullToObject(jpp, "schedule_print");
        }
    }
    cJSON *jco = cJSON_AddObjectToObject(o, "communication");
    cJSON_AddNumberToObject(jco, "dp_allreduce_bytes", r->comm.dp_bytes);
    cJSON_AddNumberToObject(jco, "dp_allreduce_s", r->comm.dp_time);
    cJSON_AddNumberToObject(jco, "zero_reduce_scatter_bytes", r->comm.rs_bytes);
    cJSON_AddNumberToObject(jco, "zero_all_gather_bytes", r->comm.ag_bytes);
    cJSON_AddNumberToObject(jco, "zero_s", r->comm.zero_time);
    cJSON_AddNumberToObject(jco, "tp_bytes", r->comm.tp_bytes);
    cJSON_AddNumberToObject(jco, "tp_s", r->comm.tp_time);
    cJSON_AddBoolToObject(jco, "tp_exact", r->comm.tp_exact);
    cJSON_AddNumberToObject(jco, "tp_overlapped_calls", r->comm.tp_overlap_calls);
    cJSON_AddNumberToObject(jco, "tp_overlapped_s", r->comm.tp_overlap_time);
    cJSON_AddNumberToObject(jco, "tp_exposed_s", r->comm.tp_exact ? r->comm.tp_exposed : r->comm.tp_time);
    cJSON_AddNumberToObject(jco, "tp_bytes_megatron_form", r->comm.tp_megatron);
    cJSON_AddNumberToObject(jco, "pp_bytes", r->comm.pp_bytes);
    cJSON_AddNumberToObject(jco, "pp_s", r->comm.pp_time);
    cJSON_AddBoolToObject(jco, "dp_inter_node", r->comm.dp_inter);
    cJSON_AddBoolToObject(jco, "tp_inter_node", r->comm.tp_inter);
    cJSON_AddBoolToObject(jco, "pp_inter_node", r->comm.pp_inter);
    /* Our trainer's bytes per rank per step by collective kind, named as in its step record (a step
     * after the first; plan_trainer_comm); absent for models or layouts it does not run. */
    if (r->comm.by_kind_exact) {
        cJSON *jk = cJSON_AddObjectToObject(o, "comm_bytes_by_kind");
        for (int k = 0; k < COMM_NKIND; k++) cJSON_AddNumberToObject(jk, comm_kind_name((CommKind)k), r->comm.by_kind[k]);
    }
    cJSON *jsc = cJSON_AddObjectToObject(o, "scaling");
    cJSON_AddNumberToObject(jsc, "tokens_per_param", r->tokens_per_param);
    cJSON_AddBoolToObject(jsc, "overtrained", r->overtrained);
    cJSON_AddStringToObject(jsc, "overtrained_by", r->scaling[r->scaling_judge].name);
    for (int i = 0; i < r->nscaling; i++) {
        const PlanScaling *s = &r->scaling[i];
        cJSON *f = cJSON_AddObjectToObject(jsc, s->name);
        if (i == 2) cJSON_AddStringToObject(f, "source", in->fit_source);
        cJSON_AddNumberToObject(f, "E", s->E);
        cJSON_AddNumberToObject(f, "A", s->A);
        cJSON_AddNumberToObject(f, "B", s->B);
        cJSON_AddNumberToObject(f, "alpha", s->alpha);
        cJSON_AddNumberToObject(f, "beta", s->beta);
        cJSON_AddNumberToObject(f, "budget_flops", s->budget_flops);
        cJSON_AddNumberToObject(f, "n_opt", s->n_opt);
        cJSON_AddNumberToObject(f, "d_opt", s->d_opt);
        cJSON_AddNumberToObject(f, "loss_opt", s->loss_opt);
        cJSON_AddNumberToObject(f, "loss_plan", s->loss_plan);
    }
    cJSON *jk = cJSON_AddObjectToObject(o, "checkpoint");
    cJSON_AddNumberToObject(jk, "bytes", r->ckpt.bytes);
    cJSON_AddNumberToObject(jk, "write_s", r->ckpt.write_s);
    cJSON_AddNumberToObject(jk, "mtbf_s", r->ckpt.mtbf_s);
    cJSON_AddNumberToObject(jk, "interval_s", r->ckpt.interval_s);
    cJSON_AddNumberToObject(jk, "overhead", r->ckpt.overhead);
    cJSON *jck = cJSON_AddArrayToObject(o, "checklist");
    for (int i = 0; i < r->nchecks; i++) {
        cJSON *c = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "level", r->checks[i].level == PLAN_CHECK_ERROR ? "error" : "warning");
        cJSON_AddStringToObject(c, "message", r->checks[i].msg);
        cJSON_AddItemToArray(jck, c);
    }
    return o;
}
