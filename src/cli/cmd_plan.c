/* cmd_plan.c — `scaletrain plan`: flags → PlanInput → plan_compute → a readable review or, with
 * --json, one JSON object (schema: docs/plan.md). The math lives in src/plan (no I/O there).
 *
 * Units in the review: GiB = 2^30 bytes, GB = 10^9 bytes (both printed where published figures
 * use GB); FLOP counts multiply-adds as 2; every memory figure states the precisions it assumes. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cmds.h"
#include "cli/cmds_plan.h"
#include "cli/hwprobe.h"
#include "core/fileio.h"
#include "core/mem.h"
#include "model/layout.h"
#include "parallel/schedule.h"
#include "plan/plan.h"

#define GIB 1073741824.0

/* "13.04 GiB (14.00 GB)" */
static const char *fmt_bytes(char *buf, size_t n, double b) {
    snprintf(buf, n, "%.2f GiB (%.2f GB)", b / GIB, b / 1e9);
    return buf;
}

/* "1.23 h", "4.5 d" ... */
static const char *fmt_time(char *buf, size_t n, double s) {
    if (!(s >= 0) || !isfinite(s)) snprintf(buf, n, "n/a");
    else if (s < 1e-3) snprintf(buf, n, "%.3g us", s * 1e6);
    else if (s < 1) snprintf(buf, n, "%.3g ms", s * 1e3);
    else if (s < 120) snprintf(buf, n, "%.3g s", s);
    else if (s < 7200) snprintf(buf, n, "%.3g min", s / 60);
    else if (s < 2 * 86400) snprintf(buf, n, "%.3g h", s / 3600);
    else snprintf(buf, n, "%.3g days", s / 86400);
    return buf;
}

/* The pipeline schedule of a plan with pp > 1, as data (parallel/schedule.h): built, checked and
 * simulated with unit op times (F 1, B 2, or B 1 + W 1 for zb-h1) for its bubble and the peak
 * micro-batches of activations stage 0 holds; its ops per rank when printed. */
typedef struct {
    int have;
    SchedType type;
    double bubble;
    int peak0;
    char **lines; /* p lines "rank r: F0 F1 B0 ..." (--pp-print-schedule), else NULL */
    int p;
    /* Our GPT-2 models: the split into S = pp·v virtual stages as the trainer makes it
     * (layout_pp_split: balanced by FLOPs, or --pp-layers with S counts), each virtual stage's FLOPs
     * per token and parameters; rank r holds virtual stages c·pp + r. */
    int have_split, S;
    int first[LAYOUT_MAX_CHUNKS * SCHED_MAX_P], last[LAYOUT_MAX_CHUNKS * SCHED_MAX_P];
    double flops[LAYOUT_MAX_CHUNKS * SCHED_MAX_P];
    long long params[LAYOUT_MAX_CHUNKS * SCHED_MAX_P];
} PlanSched;

static Status plan_split(PlanSched *ps, const PlanInput *in, const char *layers, Err *err) {
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

static void plan_sched_free(PlanSched *ps) {
    for (int i = 0; ps->lines && i < ps->p; i++) free(ps->lines[i]);
    free(ps->lines);
}

static Status plan_sched(PlanSched *ps, const PlanInput *in, SchedType type, int want_lines, Err *err) {
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

static void print_review(const PlanInput *in, const PlanResult *r, const PlanSched *ps) {
    const PlanModel *m = &in->model;
    const PlanPrecision *p = &in->prec;
    char a[64], b[64], c[64], d[64];
    printf("== scaletrain plan ==\n");
    /* ---- model ---- */
    if (m->params_override > 0) {
        printf("model: %lld parameters (count only)\n", r->n_params);
    } else {
        printf("model: %s, %s: L=%d heads=%d kv_heads=%d C=%d F=%d V=%d max_seq=%d%s%s\n", m->name,
               m->arch == PLAN_ARCH_LLAMA ? "llama (RMSNorm, SwiGLU, rotary, untied head)"
                                          : "gpt2 (LayerNorm, GELU, learned positions, tied head)",
               m->n_layer, m->n_head, m->n_kv_head, m->d_model, m->d_ff, m->vocab, m->max_seq,
               m->gated_mlp && m->arch != PLAN_ARCH_LLAMA ? " gated" : "", m->tied_head ? "" : " untied");
        printf("parameters: %lld exact (embeddings %lld, per block %lld)\n", r->n_params, r->n_params_embedding,
               r->n_params_layer);
        if (r->exact_layout)
            printf("  our trainer's layout: %lld floats per buffer (padded vocabulary, 64-byte alignment)\n",
                   r->layout_floats);
    }
    printf("precisions (bytes/element): weights %d, gradients %d, master %d, moments %d x %d, activations %d; "
           "matmuls in %s\n",
           p->weight, p->grad, p->master, in->n_moments, p->moment, p->act, plan_dtype_name(p->compute));
    printf("hardware: %s: peak %.4g TFLOP/s (%s), %s, mem bw %.4g GB/s, link %.4g/%.4g GB/s intra/inter, %d per "
           "node, matmul efficiency %.2f\n",
           in->hw.name, r->compute.peak / 1e12, plan_dtype_name(p->compute), fmt_bytes(a, sizeof a, in->hw.memory),
           in->hw.mem_bw / 1e9, in->hw.intra_bw / 1e9, in->hw.inter_bw / 1e9, in->hw.devices_per_node,
           in->hw.matmul_eff);
    printf("layout: dp=%d tp=%d pp=%d%s zero=%d recompute=%s, pipeline micro-batches %d, interleave %d; world %d on "
           "%d node(s)\n",
           in->dp, in->tp, in->pp, in->sp ? " +sp" : "", in->zero, plan_recompute_name(in->recompute), r->microbatches,
           in->interleave, r->world, r->nodes);

    /* ---- memory ---- */
    printf("\n-- memory per device --\n");
    printf("  params held before ZeRO: %.6g elements (%d of %d layers)\n", r->params_per_device, r->layers_per_device,
           m->n_layer);
    printf("  bytes per parameter, unsharded: %g (= %d + %d + %d + %d x %d)\n", r->mem.bytes_per_param, p->weight,
           p->grad, p->master, in->n_moments, p->moment);
    if (r->mem.trainer_states)
        printf("  states as our trainer allocates them per rank (ZeRO %d over dp %d; buffers included)\n", in->zero, in->dp);
    printf("  weights      %s\n", fmt_bytes(a, sizeof a, r->mem.weights));
    printf("  gradients    %s\n", fmt_bytes(a, sizeof a, r->mem.grads));
    printf("  master       %s\n", fmt_bytes(a, sizeof a, r->mem.master));
    printf("  moments      %s\n", fmt_bytes(a, sizeof a, r->mem.moments));
    printf("  activations  %s  (%s, %s per layer per micro-batch x %d layers x %.3g in flight)\n",
           fmt_bytes(a, sizeof a, r->mem.activations),
           r->act.exact_used ? "our kernels, fp32, model/layout" : "Korthikanti et al. 2022",
           fmt_bytes(b, sizeof b, r->act.per_layer), r->layers_per_device, r->act.inflight);
    printf("  workspace    %s\n", fmt_bytes(a, sizeof a, r->mem.workspace));
    printf("  comm buffers %s\n", fmt_bytes(a, sizeof a, r->mem.comm));
    printf("  total        %s of %s: %s", fmt_bytes(a, sizeof a, r->mem.total), fmt_bytes(b, sizeof b, r->mem.device),
           r->mem.fits ? "fits" : "does not fit");
    if (r->mem.fits) printf(" (%.2f GiB free)\n", r->mem.margin / GIB);
    else printf(" by %.2f GiB\n", -r->mem.margin / GIB);
    for (int i = 0; i < r->nsuggest; i++) printf("  %s: %s\n", i == 0 ? "cheapest fix" : "or", r->suggest[i]);
    if (!r->mem.fits && r->nsuggest == 0)
        printf("  no single change of zero/recompute/sp/micro-batch/tp/pp on this world makes it fit: add devices\n");
    if (m->params_override == 0) {
        printf("  activations per layer per micro-batch (b=%d s=%d): paper sbh(34+5as/h) = %s; this layout = %s",
               in->micro_batch, in->seq_len, fmt_bytes(a, sizeof a, r->act.korth_plain),
               fmt_bytes(b, sizeof b, r->act.korth));
        if (r->act.exact_layer > 0) printf("; our kernels = %s", fmt_bytes(c, sizeof c, r->act.exact_layer));
        printf("\n");
    }

    /* ---- batch and compute ---- */
    printf("\n-- batch --\n");
    printf("  effective batch: %d x %d x %d x %d = %lld sequences, %lld tokens per step\n", in->micro_batch,
           in->seq_len, in->grad_accum, in->dp, r->batch_seqs, r->batch_tokens);
    printf("  budget (%s): %.4g tokens = %lld steps\n", r->budget_source, r->tokens, r->steps);
    printf("\n-- compute --\n");
    printf("  FLOPs per token: 6N = %.4g, exact with attention = %.4g\n", r->compute.fpt_6n, r->compute.fpt);
    if (in->recompute) printf("  with %s recompute: %.4g hardware FLOPs per token\n", plan_recompute_name(in->recompute), r->compute.fpt_hw);
    printf("  total: 6ND = %.4g, exact = %.4g FLOPs\n", r->compute.total_6nd, r->compute.total);
    printf("  step: matmul %s + elementwise %s + bubble %s + tp %s + pp %s; dp/zero comm %s (%s not hidden by "
           "compute); optimizer %s%s%s\n",
           fmt_time(a, sizeof a, r->compute.t_matmul), fmt_time(b, sizeof b, r->compute.t_elementwise),
           fmt_time(c, sizeof c, r->compute.t_bubble), fmt_time(d, sizeof d, r->compute.t_tp),
           fmt_time((char[64]){0}, 64, r->compute.t_pp), fmt_time((char[64]){0}, 64, r->compute.t_dp),
           fmt_time((char[64]){0}, 64, r->compute.t_dp_exposed), fmt_time((char[64]){0}, 64, r->compute.t_optimizer),
           in->hess_every > 0 ? "; Sophia's Hessian pass (amortised) " : "",
           in->hess_every > 0 ? fmt_time((char[64]){0}, 64, r->compute.t_hessian) : "");
    printf("  predicted step: %s with overlap (max), %s without (sum); %.4g tokens/s\n",
           fmt_time(a, sizeof a, r->compute.step_overlap), fmt_time(b, sizeof b, r->compute.step_serial),
           r->compute.tokens_per_s);
    printf("  implied MFU %.1f%% (HFU %.1f%%); training time %s\n", 100 * r->compute.mfu, 100 * r->compute.hfu,
           fmt_time(a, sizeof a, r->compute.train_seconds));
    if (r->compute.target_seconds > 0)
        printf("  to finish in %s on %d devices: MFU %.1f%% required\n", fmt_time(a, sizeof a, r->compute.target_seconds),
               r->world, 100 * r->compute.mfu_required);

    /* ---- pipeline and communication ---- */
    printf("\n-- pipeline --\n");
    printf("  bubble (p-1)/(m+p-1) = %.4f", r->bubble);
    if (in->interleave > 1) printf(", interleaved (p-1)/(v m+p-1) = %.4f", r->bubble_interleaved);
    printf("\n");
    if (ps->have) {
        printf("  schedule %s: simulated bubble %.4f (unit F, B = 2F), stage 0 holds %d micro-batches of activations\n",
               sched_type_name(ps->type), ps->bubble, ps->peak0);
        for (int i = 0; ps->lines && i < ps->p; i++) printf("    %s\n", ps->lines[i] ? ps->lines[i] : "");
    }
    if (ps->have_split) {
        double mx = 0, sum = 0;
        int S = ps->S;
        for (int st = 0; st < S; st++) mx = ps->flops[st] > mx ? ps->flops[st] : mx, sum += ps->flops[st];
        printf("  %sstages (blocks [first, last), FLOPs per token relative to the mean, parameters):",
               S > in->pp ? "virtual " : "");
        for (int st = 0; st < S; st++)
            printf(" [%d,%d) %.2f %.3gM%s", ps->first[st], ps->last[st], ps->flops[st] * S / sum, ps->params[st] / 1e6,
                   st + 1 < S ? ";" : "\n");
        printf("  imbalance: the stages wait for the slowest one %.0f%% of the time, on top of the bubble\n",
               100.0 * (1.0 - sum / (S * mx)));
    }
    if (r->pp_exact) {
        printf("  per rank, as our trainer allocates and sends (memory at start; the gradient send buffers pp.c adds "
               "while sends are in flight are not counted):\n");
        for (int q = 0; q < in->pp; q++) {
            const PlanPpRank *k = &r->pp_rank[q];
            char blocks[128] = "";
            size_t o = 0;
            for (int c = 0; c < k->stage.n; c++)
                o += (size_t)snprintf(blocks + o, o < sizeof blocks ? sizeof blocks - o : 0, "%s[%d,%d)", c ? " " : "",
                                      k->stage.first[c], k->stage.last[c]);
            printf("    rank %d: blocks %s%s%s, %.4gM params, %d slot%s: states %.2f MiB, activations %.2f MiB, workspace "
                   "%.2f MiB, tied buffer %.2f MiB, total %s%s; sends %.2f MiB per step (%d + %d messages, tied %.2f MiB)\n",
                   q, blocks, k->has_embed ? " +embeddings" : "", k->has_head ? " +head" : "", k->params / 1e6, k->slots,
                   k->slots == 1 ? "" : "s",
                   (k->bytes[MEM_PARAMS] + k->bytes[MEM_GRADS] + k->bytes[MEM_MASTER] + k->bytes[MEM_MOMENTS]) / 1048576.0,
                   k->bytes[MEM_ACTIVATIONS] / 1048576.0, k->bytes[MEM_WORKSPACE] / 1048576.0, k->bytes[MEM_COMM] / 1048576.0,
                   fmt_bytes(a, sizeof a, k->total), q == r->pp_worst ? " (the worst: memory per device above)" : "",
                   k->p2p / 1048576.0, k->sends_act, k->sends_grad, k->p2p_tied / 1048576.0);
        }
    } else if (r->pp_note[0]) {
        printf("  per rank: not computed (%s)\n", r->pp_note);
    }
    printf("\n-- communication per step per device --\n");
    if (in->dp > 1 && in->zero == 0)
        printf("  DP ring all-reduce: %s, %s (%s)\n", fmt_bytes(a, sizeof a, r->comm.dp_bytes),
               fmt_time(b, sizeof b, r->comm.dp_time), r->comm.dp_inter ? "inter-node" : "intra-node");
    if (in->dp > 1 && in->zero > 0)
        printf("  ZeRO-%d reduce-scatter %s + all-gather %s: %s (%s)\n", in->zero,
               fmt_bytes(a, sizeof a, r->comm.rs_bytes), fmt_bytes(b, sizeof b, r->comm.ag_bytes),
               fmt_time(c, sizeof c, r->comm.zero_time), r->comm.dp_inter ? "inter-node" : "intra-node");
    if (in->tp > 1 && r->comm.tp_exact)
        printf("  TP collectives of our trainer: %s (all-reduce %s, all-gather %s, reduce-scatter %s), %s (%s); "
               "textbook 8bsh(t-1)/t per layer x layers x micro-batches: %s\n",
               fmt_bytes(a, sizeof a, r->comm.tp_bytes), fmt_bytes(b, sizeof b, r->comm.by_kind[COMM_TP_ALLREDUCE]),
               fmt_bytes(c, sizeof c, r->comm.by_kind[COMM_TP_ALLGATHER]),
               fmt_bytes(d, sizeof d, r->comm.by_kind[COMM_TP_REDUCE_SCATTER]),
               fmt_time((char[64]){0}, 64, r->comm.tp_time), r->comm.tp_inter ? "inter-node" : "intra-node",
               fmt_bytes((char[64]){0}, 64, r->comm.tp_megatron));
    else if (in->tp > 1)
        printf("  TP all-reduces: %s, %s (%s)\n", fmt_bytes(a, sizeof a, r->comm.tp_bytes),
               fmt_time(b, sizeof b, r->comm.tp_time), r->comm.tp_inter ? "inter-node" : "intra-node");
    if (in->pp > 1)
        printf("  PP send/recv: %s, %s (%s)\n", fmt_bytes(a, sizeof a, r->comm.pp_bytes),
               fmt_time(b, sizeof b, r->comm.pp_time), r->comm.pp_inter ? "inter-node" : "intra-node");
    if (in->dp == 1 && in->tp == 1 && in->pp == 1) printf("  none (one device)\n");

    /* ---- scaling laws ---- */
    if (in->budget_flops > 0) printf("\n-- scaling laws (C = the --flops budget = %.4g FLOPs) --\n", r->scaling[0].budget_flops);
    else printf("\n-- scaling laws (C = 6ND = %.4g FLOPs) --\n", r->compute.total_6nd);
    for (int i = 0; i < r->nscaling; i++) {
        const PlanScaling *s = &r->scaling[i];
        printf("  %-13s E=%g A=%g B=%g alpha=%g beta=%g: optimum N=%.4g D=%.4g (%.1f tokens/param) loss %.4f; "
               "this plan's loss %.4f\n",
               s->name, s->E, s->A, s->B, s->alpha, s->beta, s->n_opt, s->d_opt, s->tokens_per_param_opt, s->loss_opt,
               s->loss_plan);
    }
    if (r->nscaling > 2) printf("  fit: from --scaling %s (approach3 of `scaletrain fit --json`); it judges over-training\n", in->fit_source);
    printf("  tokens per parameter: %.1f (Chinchilla rule ~20)%s\n", r->tokens_per_param,
           r->overtrained ? ": over-trains a smaller model; worth it if inference cost matters (more training "
                            "compute per unit of loss, a cheaper model to serve)"
           : r->tokens_per_param < 10 ? ": under-trained for its size" : "");

    /* ---- checkpointing ---- */
    printf("\n-- checkpointing --\n");
    printf("  size %s (fp32 weights + master + moments), write %s at %.3g GB/s x %d node(s)\n",
           fmt_bytes(a, sizeof a, r->ckpt.bytes), fmt_time(b, sizeof b, r->ckpt.write_s), in->hw.storage_bw / 1e9,
           r->nodes);
    printf("  MTBF %s: Young/Daly interval sqrt(2 x write x MTBF) = %s (every %.0f steps), overhead %.2f%%\n",
           fmt_time(a, sizeof a, r->ckpt.mtbf_s), fmt_time(b, sizeof b, r->ckpt.interval_s),
           r->compute.step > 0 ? floor(r->ckpt.interval_s / r->compute.step) : 0, 100 * r->ckpt.overhead);

    /* ---- checklist ---- */
    printf("\n-- launch checklist: %d error(s), %d warning(s) --\n", r->nerrors, r->nwarnings);
    for (int i = 0; i < r->nchecks; i++)
        printf("  %s: %s\n", r->checks[i].level == PLAN_CHECK_ERROR ? "ERROR" : "warning", r->checks[i].msg);
    if (r->nchecks == 0) printf("  ok\n");
}

static cJSON *json_plan(const PlanInput *in, const PlanResult *r, const PlanSched *ps) {
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
    cJSON_AddNumberToObject(jl, "pp_microbatches", r->microbatches);
    cJSON_AddNumberToObject(jl, "interleave", in->interleave);
    cJSON_AddNumberToObject(jl, "world", r->world);
    cJSON_AddNumberToObject(jl, "nodes", r->nodes);
    cJSON *jh = cJSON_AddObjectToObject(o, "hardware");
    cJSON_AddStringToObject(jh, "name", in->hw.name);
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
    cJSON_AddNumberToObject(jh, "storage_bw", in->hw.storage_bw);
    cJSON *je = cJSON_AddObjectToObject(o, "memory_bytes");
    cJSON_AddNumberToObject(je, "weights", r->mem.weights);
    cJSON_AddNumberToObject(je, "gradients", r->mem.grads);
    cJSON_AddNumberToObject(je, "master", r->mem.master);
    cJSON_AddNumberToObject(je, "moments", r->mem.moments);
    cJSON_AddNumberToObject(je, "activations", r->mem.activations);
    cJSON_AddNumberToObject(je, "workspace", r->mem.workspace);
    cJSON_AddNumberToObject(je, "comm", r->mem.comm);
    cJSON_AddNumberToObject(je, "total", r->mem.total);
    cJSON_AddNumberToObject(je, "device", r->mem.device);
    cJSON_AddNumberToObject(je, "margin", r->mem.margin);
    cJSON_AddBoolToObject(je, "fits", r->mem.fits);
    cJSON_AddNumberToObject(je, "bytes_per_param", r->mem.bytes_per_param);
    /* The states per rank under the trainer's category names (its `memory` event), and which model
     * gave them: "trainer" (layout_zero_bytes: what each rank of our trainer allocates) or "zero_paper". */
    cJSON_AddStringToObject(je, "states", r->mem.trainer_states ? "trainer" : "zero_paper");
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

/* Reads approach3.{E, A, B, alpha, beta} of a `fit --json` output into in (has_fit). Errors
 * (ST_ERR_INPUT): one line naming the file and the member missing or not a positive number. */
static Status read_scaling(PlanInput *in, const char *path, Err *err) {
    char *text = NULL;
    size_t len = 0;
    Status st = file_read_all(path, &text, &len, err);
    if (st != ST_OK) return err_prefix(err, "--scaling");
    cJSON *j = cJSON_ParseWithLength(text, len);
    free(text);
    const cJSON *a3 = cJSON_GetObjectItemCaseSensitive(j, "approach3");
    if (!cJSON_IsObject(a3)) {
        cJSON_Delete(j);
        return err_set(err, ST_ERR_INPUT, "--scaling %s: expected a `scaletrain fit --json` object with an approach3 member, "
                       "found %s", path, j ? "none" : "invalid JSON");
    }
    static const char *const keys[5] = {"E", "A", "B", "alpha", "beta"};
    double v[5];
    for (int k = 0; k < 5; k++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(a3, keys[k]);
        if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble) || !(x->valuedouble > 0)) {
            cJSON_Delete(j);
            return err_set(err, ST_ERR_INPUT, "--scaling %s: expected approach3.%s to be a positive number, found %s", path,
                           keys[k], x ? "another value" : "no such member");
        }
        v[k] = x->valuedouble;
    }
    cJSON_Delete(j);
    in->has_fit = 1;
    snprintf(in->fit_source, sizeof in->fit_source, "%s", path);
    in->fit_E = v[0], in->fit_A = v[1], in->fit_B = v[2], in->fit_alpha = v[3], in->fit_beta = v[4];
    return ST_OK;
}

int cmd_plan(int argc, char **argv) {
    char scaling_src[512] = "";
    PlanInput in = plan_default_input();
    char model[64] = "", arch[16] = "gpt2", precision[16] = "fp32", optimizer[16] = "adamw", recompute[16] = "none",
         hardware[1024] = "cpu-zen4-2c", acts[16] = "auto", measure[1024] = "";
    int measure_threads = 2;
    int layers = 0, heads = 0, kv_heads = 0, channels = 0, ffn = 0, vocab = 50257, max_seq = 1024, tie = 0;
    double params = 0, peak_tflops = 0, memory_gib = 0, mem_bw_gbs = 0, intra_gbs = 0, inter_gbs = 0, matmul_eff = 0,
           storage_gbs = 0;
    long global_batch = 0;
    int nodes = 0, dpn = 0, wb = 0, gb = 0, mb = -1, ob = 0, ab = 0, moments = -1, hess_every = 10, json = 0, no_overlap = 0;
    int no_noise = 0;
    char pp_schedule[32] = "", pp_layers[256] = "";
    int pp_print = 0;
    ArgSpec specs[] = {
        {"model", ARG_STR, model, sizeof model,
         "preset: d2..d64, gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1558m, llama-7b, llama-13b, llama-70b, llama-405b"},
        {"arch", ARG_STR, arch, sizeof arch, "shape family without --model: gpt2 | llama"},
        {"layers", ARG_INT, &layers, 0, "transformer blocks L"},
        {"heads", ARG_INT, &heads, 0, "attention heads"},
        {"kv-heads", ARG_INT, &kv_heads, 0, "key/value heads (GQA; 0: = heads)"},
        {"tie-embeddings", ARG_FLAG, &tie, 0, "llama: the LM head reads the token embedding (default: untied)"},
        {"channels", ARG_INT, &channels, 0, "model width C"},
        {"ffn", ARG_INT, &ffn, 0, "MLP width F (0: 4C for gpt2; Llama's rounded 8C/3 for llama)"},
        {"vocab", ARG_INT, &vocab, 0, "vocabulary size"},
        {"max-seq-len", ARG_INT, &max_seq, 0, "maximum sequence length"},
        {"params", ARG_DOUBLE, &params, 0, "a parameter count alone, e.g. 7e9 (no shape: FLOPs 6N, no activations)"},
        {"micro-batch", ARG_INT, &in.micro_batch, 0, "sequences per micro-batch B"},
        {"seq-len", ARG_INT, &in.seq_len, 0, "tokens per sequence T"},
        {"grad-accum", ARG_INT, &in.grad_accum, 0, "micro-batches per optimizer step k"},
        {"global-batch", ARG_LONG, &global_batch, 0, "sequences per step (sets --grad-accum; 0: unused)"},
        {"dp", ARG_INT, &in.dp, 0, "data-parallel ranks (default: world / (tp x pp) when --nodes is given)"},
        {"tp", ARG_INT, &in.tp, 0, "tensor-parallel ranks"},
        {"pp", ARG_INT, &in.pp, 0, "pipeline stages"},
        {"sp", ARG_FLAG, &in.sp, 0, "sequence parallelism inside the TP group"},
        {"zero", ARG_INT, &in.zero, 0, "ZeRO stage 0..3"},
        {"recompute", ARG_STR, recompute, sizeof recompute, "none | selective | full"},
        {"pp-microbatches", ARG_INT, &in.pp_microbatches, 0, "pipeline micro-batches m (0: = grad-accum)"},
        {"interleave", ARG_INT, &in.interleave, 0, "model chunks per pipeline stage v"},
        {"pp-schedule", ARG_STR, pp_schedule, sizeof pp_schedule,
         "gpipe | 1f1b | interleaved | zb-h1 (default 1f1b, interleaved with --interleave > 1)"},
        {"pp-print-schedule", ARG_FLAG, &pp_print, 0, "print each stage's ops (F/B/W, micro-batch[.chunk]) in order"},
        {"pp-layers", ARG_STR, pp_layers, sizeof pp_layers,
         "blocks per pipeline stage, e.g. 4,4,3,3 (default: balanced by FLOPs, the head on the last stage)"},
        {"precision", ARG_STR, precision, sizeof precision,
         "fp32 | bf16 | fp16 (sets the byte counts below; for our GPT-2 models the trainer's: fp32 gradients)"},
        {"weight-bytes", ARG_INT, &wb, 0, "bytes per weight (0: from --precision)"},
        {"grad-bytes", ARG_INT, &gb, 0, "bytes per gradient (0: from --precision)"},
        {"master-bytes", ARG_INT, &mb, 0, "bytes per master weight, 0 = none (-1: from --precision)"},
        {"moment-bytes", ARG_INT, &ob, 0, "bytes per optimizer moment (0: from --precision)"},
        {"act-bytes", ARG_INT, &ab, 0, "bytes per activation element of the paper mode (0: from --precision; selects it)"},
        {"optimizer", ARG_STR, optimizer, sizeof optimizer, "adamw | adam (2 moments) | sgd | lion (1 moment) | muon | shampoo (2 + their buffers) | sophia (2, and its Hessian pass)"},
        {"shampoo-block", ARG_INT, &in.shampoo_block, 0, "Shampoo's largest block side (with --optimizer shampoo)"},
        {"precond-every", ARG_INT, &in.precond_every, 0, "Shampoo's steps between inverse roots (with --optimizer shampoo)"},
        {"hess-every", ARG_INT, &hess_every, 0, "Sophia's steps between Hessian passes (with --optimizer sophia; default 10)"},
        {"moments", ARG_INT, &moments, 0, "optimizer moments per parameter (-1: from --optimizer)"},
        {"activations", ARG_STR, acts, sizeof acts, "auto | paper (Korthikanti et al.) | exact (our kernels)"},
        {"threads", ARG_INT, &in.threads, 0, "trainer threads (size our attention scratch)"},
        {"hardware", ARG_STR, hardware, sizeof hardware,
         "A100-40GB | A100-80GB | H100 | H200 | cpu-zen4-2c | FILE.json (from --measure-hardware)"},
        {"measure-hardware", ARG_STR, measure, sizeof measure,
         "measure this machine (FMA peak, GEMM efficiency, bf16 speed-up, memory bandwidth), write FILE.json, exit"},
        {"measure-threads", ARG_INT, &measure_threads, 0, "threads for --measure-hardware"},
        {"nodes", ARG_INT, &nodes, 0, "nodes (world = nodes x devices per node; 0: world = dp x tp x pp)"},
        {"devices-per-node", ARG_INT, &dpn, 0, "devices per node (0: the hardware preset's)"},
        {"peak-tflops", ARG_DOUBLE, &peak_tflops, 0, "override the peak TFLOP/s of the matmul dtype (0: preset)"},
        {"memory-gib", ARG_DOUBLE, &memory_gib, 0, "override device memory in GiB (0: preset)"},
        {"mem-bw-gbs", ARG_DOUBLE, &mem_bw_gbs, 0, "override memory bandwidth in GB/s (0: preset)"},
        {"intra-bw-gbs", ARG_DOUBLE, &intra_gbs, 0, "override intra-node GB/s per device (0: preset)"},
        {"inter-bw-gbs", ARG_DOUBLE, &inter_gbs, 0, "override inter-node GB/s per device (0: preset)"},
        {"matmul-eff", ARG_DOUBLE, &matmul_eff, 0, "override the matmul efficiency (0: preset)"},
        {"storage-bw-gbs", ARG_DOUBLE, &storage_gbs, 0, "checkpoint write GB/s per node (0: preset)"},
        {"no-overlap", ARG_FLAG, &no_overlap, 0, "DP/ZeRO communication adds to the step (default: it overlaps the backward pass)"},
        {"no-noise-scale", ARG_FLAG, &no_noise, 0, "as train's: the step books no gradient-noise-scale all-gathers"},
        {"tokens", ARG_DOUBLE, &in.budget_tokens, 0, "budget in training tokens"},
        {"flops", ARG_DOUBLE, &in.budget_flops, 0, "budget in training FLOPs"},
        {"days", ARG_DOUBLE, &in.budget_days, 0, "budget in wall-clock days"},
        {"target-days", ARG_DOUBLE, &in.target_days, 0, "finish within this many days: the MFU it requires"},
        {"mtbf", ARG_DOUBLE, &in.mtbf_hours, 0, "mean time between failures of the job, hours"},
        {"scaling", ARG_STR, scaling_src, sizeof scaling_src, "a `scaletrain fit --json` result: its Approach 3 law joins the published ones and judges over-training"},
        {"json", ARG_FLAG, &json, 0, "print one JSON object (schema: docs/plan.md)"},
    };
    int n = (int)(sizeof specs / sizeof specs[0]), npos = 0, help = 0;
    char *pos[1];
    Err err = {0};
    Status st = args_parse(specs, n, argc, argv, pos, 0, &npos, &help, &err);
    if (st != ST_OK) return cli_fail("plan", st, err.msg);
    if (help) {
        printf("usage: scaletrain plan (--model PRESET | --layers L --heads H --channels C ... | --params N) [options]\n\n"
               "The training-plan review: parameters, memory per device, batch, FLOPs and step time, pipeline\n"
               "bubble, communication, scaling laws, checkpointing and the launch checklist (docs/plan.md).\n"
               "Exit 2 on bad input or a launch-checklist error.\n\n");
        args_print_help(specs, n);
        return 0;
    }
#define SEEN(name) (args_find(specs, n, name)->seen)
    if (measure[0]) {
        /* Measuring exits without planning: any planning option would be ignored. */
        for (int i = 0; i < n; i++)
            if (specs[i].seen && strcmp(specs[i].name, "measure-hardware") && strcmp(specs[i].name, "measure-threads")) {
                snprintf(err.msg, sizeof err.msg,
                         "--measure-hardware: measures this machine and exits; expected no planning option, found --%s",
                         specs[i].name);
                return cli_fail("plan", ST_ERR_INPUT, err.msg);
            }
        PlanHardware hw;
        if ((st = hw_measure(&hw, measure_threads, &err)) != ST_OK) return cli_fail("plan", st, err.msg);
        cJSON *j = plan_hardware_to_json(&hw);
        char *text = cJSON_Print(j);
        cJSON_Delete(j);
        const void *bufs[2] = {text, "\n"};
        size_t lens[2] = {strlen(text), 1};
        st = file_write_atomic(measure, bufs, lens, 2, &err);
        free(text);
        if (st != ST_OK) return cli_fail("plan", st, err.msg);
        printf("hardware profile %s: fp32 peak %.1f GFLOP/s, GEMM efficiency %.2f, bf16 GEMM %.2fx, memory bandwidth %.1f GB/s "
               "(%d threads)\n",
               measure, hw.peak_fp32 / 1e9, hw.matmul_eff, hw.peak_bf16 / hw.peak_fp32, hw.mem_bw / 1e9, measure_threads);
        return 0;
    }
    if (SEEN("measure-threads"))
        return cli_fail("plan", ST_ERR_INPUT, "--measure-threads: expected only with --measure-hardware FILE");
    if (scaling_src[0] && (st = read_scaling(&in, scaling_src, &err)) != ST_OK) return cli_fail("plan", st, err.msg);
    /* ---- model ---- */
    int shape_given = SEEN("layers") || SEEN("heads") || SEEN("channels");
    static const char *const shape_flags[] = {"arch", "layers", "heads", "kv-heads", "channels", "ffn", "vocab", "max-seq-len"};
    if (params != 0) {
        if (model[0])
            return cli_fail("plan", ST_ERR_INPUT, "--params: expected either --params or a model (--model / --layers ...), found both");
        for (size_t i = 0; i < sizeof shape_flags / sizeof shape_flags[0]; i++)
            if (SEEN(shape_flags[i])) {
                snprintf(err.msg, sizeof err.msg,
                         "--params: a parameter count alone has no shape; expected no --%s with it (give a model instead)",
                         shape_flags[i]);
                return cli_fail("plan", ST_ERR_INPUT, err.msg);
            }
        if (!(params >= 1) || params != floor(params) || params > 9e18) {
            snprintf(err.msg, sizeof err.msg, "--params: expected a positive whole parameter count, found %g", params);
            return cli_fail("plan", ST_ERR_INPUT, err.msg);
        }
        in.model.params_override = (long long)params;
        snprintf(in.model.name, sizeof in.model.name, "params");
    } else if (model[0]) {
        if (SEEN("arch"))
            return cli_fail("plan", ST_ERR_INPUT,
                            "--arch: a --model preset fixes the family; expected --arch only with --layers/--heads/--channels");
        if ((st = plan_model_preset(&in.model, model, &err)) != ST_OK) return cli_fail("plan", st, err.msg);
        if (SEEN("layers")) in.model.n_layer = layers;
        if (SEEN("heads")) in.model.n_head = in.model.n_kv_head = heads;
        if (SEEN("kv-heads")) in.model.n_kv_head = kv_heads;
        if (SEEN("channels")) {
            in.model.d_model = channels;
            if (in.model.arch == PLAN_ARCH_GPT2 && !SEEN("ffn")) in.model.d_ff = 4 * channels;
        }
        if (SEEN("ffn")) in.model.d_ff = ffn;
        if (SEEN("vocab")) in.model.vocab = vocab;
        if (SEEN("max-seq-len")) in.model.max_seq = max_seq;
    } else if (shape_given) {
        if (!strcmp(arch, "gpt2")) {
            ModelConfig c = {0};
            c.n_layer = layers, c.n_head = heads, c.n_embd = channels, c.vocab = vocab, c.max_seq = max_seq;
            plan_model_from_config(&in.model, &c);
            if (SEEN("ffn")) in.model.d_ff = ffn;
        } else if (!strcmp(arch, "llama")) {
            plan_model_preset(&in.model, "llama-7b", NULL);
            snprintf(in.model.name, sizeof in.model.name, "custom");
            in.model.n_layer = layers, in.model.n_head = heads, in.model.d_model = channels;
            in.model.vocab = vocab, in.model.max_seq = max_seq;
            /* Llama's SwiGLU width: 2/3 of 4C rounded up to a multiple of 256. */
            in.model.d_ff = ffn > 0 || SEEN("ffn") ? ffn : (int)((((long long)8 * channels / 3) + 255) / 256 * 256);
        } else {
            snprintf(err.msg, sizeof err.msg, "--arch: expected gpt2 or llama, found '%s'", arch);
            return cli_fail("plan", ST_ERR_INPUT, err.msg);
        }
        in.model.n_kv_head = SEEN("kv-heads") ? kv_heads : heads;
    } else {
        return cli_fail("plan", ST_ERR_INPUT,
                        "expected a model: --model PRESET, --layers/--heads/--channels, or --params N (see --help)");
    }
    if (tie) {
        if (in.model.params_override > 0)
            return cli_fail("plan", ST_ERR_INPUT, "--tie-embeddings: expected a model shape, found --params alone");
        in.model.tied_head = 1; /* GPT-2's already is */
    }
    /* ---- precision, optimizer, activations, recompute ---- */
    ModelConfig ours_cfg;
    int ours = plan_model_to_config(&in.model, &ours_cfg);
    st = ours ? plan_precision_trainer(&in.prec, precision, &err) : plan_precision_preset(&in.prec, precision, &err);
    if (st != ST_OK) return cli_fail("plan", st, err.msg);
    if (SEEN("weight-bytes")) in.prec.weight = wb;
    if (SEEN("grad-bytes")) in.prec.grad = gb;
    if (SEEN("master-bytes") && mb >= 0) in.prec.master = mb;
    else if (SEEN("master-bytes")) in.prec.master = -1; /* rejected by plan_validate */
    if (SEEN("moment-bytes")) in.prec.moment = ob;
    if (SEEN("act-bytes")) in.prec.act = ab;
    if (!strcmp(optimizer, "adamw") || !strcmp(optimizer, "adam")) in.n_moments = 2;
    else if (!strcmp(optimizer, "muon")) in.n_moments = 2, in.muon = 1;
    else if (!strcmp(optimizer, "shampoo")) in.n_moments = 2, in.shampoo = 1;
    else if (!strcmp(optimizer, "sophia")) in.n_moments = 2, in.hess_every = SEEN("hess-every") ? hess_every : 10;
    else if (!strcmp(optimizer, "sgd") || !strcmp(optimizer, "lion")) in.n_moments = 1;
    else {
        snprintf(err.msg, sizeof err.msg, "--optimizer: expected adamw, adam, sgd, lion, muon, shampoo or sophia, found '%s'",
                 optimizer);
        return cli_fail("plan", ST_ERR_INPUT, err.msg);
    }
    if (SEEN("hess-every") && strcmp(optimizer, "sophia"))
        return cli_fail("plan", ST_ERR_INPUT, "--hess-every: would change nothing here; expected --optimizer sophia");
    if (SEEN("hess-every") && hess_every < 1) {
        snprintf(err.msg, sizeof err.msg, "--hess-every: expected an integer >= 1, found %d", hess_every);
        return cli_fail("plan", ST_ERR_INPUT, err.msg);
    }
    if (SEEN("moments")) in.n_moments = moments;
    if (!strcmp(acts, "auto")) in.act_mode = PLAN_ACT_AUTO;
    else if (!strcmp(acts, "paper")) in.act_mode = PLAN_ACT_KORTHIKANTI;
    else if (!strcmp(acts, "exact")) in.act_mode = PLAN_ACT_EXACT;
    else {
        snprintf(err.msg, sizeof err.msg, "--activations: expected auto, paper or exact, found '%s'", acts);
        return cli_fail("plan", ST_ERR_INPUT, err.msg);
    }
    if (SEEN("act-bytes")) {
        /* The exact mode counts what our kernels store; another element size is the paper mode's. */
        if (in.act_mode == PLAN_ACT_EXACT)
            return cli_fail("plan", ST_ERR_INPUT,
                            "--act-bytes: --activations exact counts our kernels' own sizes (fp32; bf16 LayerNorm and "
                            "GELU outputs under bf16); expected --activations paper or auto with --act-bytes");
        in.act_mode = PLAN_ACT_KORTHIKANTI;
    }
    in.overlap = !no_overlap;
    in.no_noise_scale = no_noise;
    if ((st = plan_parse_recompute(recompute, &in.recompute, &err)) != ST_OK) return cli_fail("plan", st, err.msg);
    /* ---- hardware ---- */
    if ((st = hw_resolve(&in.hw, hardware, &err)) != ST_OK) return cli_fail("plan", st, err.msg);
    if (SEEN("devices-per-node")) in.hw.devices_per_node = dpn;
    if (SEEN("peak-tflops")) {
        double pk = peak_tflops * 1e12;
        if (in.prec.compute == PLAN_DTYPE_BF16) in.hw.peak_bf16 = pk;
        else if (in.prec.compute == PLAN_DTYPE_FP16) in.hw.peak_fp16 = pk;
        else in.hw.peak_fp32 = pk;
    }
    if (SEEN("memory-gib")) in.hw.memory = memory_gib * GIB;
    if (SEEN("mem-bw-gbs")) in.hw.mem_bw = mem_bw_gbs * 1e9;
    if (SEEN("intra-bw-gbs")) in.hw.intra_bw = intra_gbs * 1e9;
    if (SEEN("inter-bw-gbs")) in.hw.inter_bw = inter_gbs * 1e9;
    if (SEEN("matmul-eff")) in.hw.matmul_eff = matmul_eff;
    if (SEEN("storage-bw-gbs")) in.hw.storage_bw = storage_gbs * 1e9;
    if (SEEN("nodes")) {
        if (nodes < 1 || in.hw.devices_per_node < 1) {
            snprintf(err.msg, sizeof err.msg, "--nodes: expected a positive integer, found %d", nodes);
            return cli_fail("plan", ST_ERR_INPUT, err.msg);
        }
        in.world = nodes * in.hw.devices_per_node;
        if (!SEEN("dp")) {
            /* DESIGN §4: dp defaults to what the world leaves after tp and pp. */
            if (in.tp < 1 || in.pp < 1 || in.world % (in.tp * in.pp)) {
                snprintf(err.msg, sizeof err.msg,
                         "--nodes %d x --devices-per-node %d = %d devices are not divisible by --tp %d x --pp %d", nodes,
                         in.hw.devices_per_node, in.world, in.tp, in.pp);
                return cli_fail("plan", ST_ERR_INPUT, err.msg);
            }
            in.dp = in.world / (in.tp * in.pp);
        }
    }
    /* ---- batch ---- */
    if (global_batch != 0) {
        long per = (long)in.micro_batch * in.dp;
        if (global_batch < 0 || per <= 0 || global_batch % per != 0) {
            snprintf(err.msg, sizeof err.msg,
                     "--global-batch %ld: global batch not divisible: expected a positive multiple of --micro-batch %d x "
                     "--dp %d = %ld",
                     global_batch, in.micro_batch, in.dp, per);
            return cli_fail("plan", ST_ERR_INPUT, err.msg);
        }
        if (SEEN("grad-accum") && in.grad_accum != global_batch / per) {
            snprintf(err.msg, sizeof err.msg, "--global-batch %ld implies --grad-accum %ld, but --grad-accum %d was given",
                     global_batch, global_batch / per, in.grad_accum);
            return cli_fail("plan", ST_ERR_INPUT, err.msg);
        }
        in.grad_accum = (int)(global_batch / per);
    }
    /* ---- pipeline schedule ---- */
    PlanSched ps;
    memset(&ps, 0, sizeof ps);
    if ((SEEN("pp-schedule") || pp_print || SEEN("pp-layers")) && in.pp <= 1) {
        snprintf(err.msg, sizeof err.msg, "--%s: would change nothing with --pp %d; expected --pp > 1",
                 SEEN("pp-schedule") ? "pp-schedule" : pp_print ? "pp-print-schedule" : "pp-layers", in.pp);
        return cli_fail("plan", ST_ERR_INPUT, err.msg);
    }
    snprintf(in.pp_schedule, sizeof in.pp_schedule, "%s", pp_schedule);
    snprintf(in.pp_layers, sizeof in.pp_layers, "%s", pp_layers);
    if (in.pp > 1) {
        SchedType type = sched_default_type(in.interleave);
        if (pp_schedule[0] && (st = sched_type_parse(pp_schedule, &type, &err)) != ST_OK)
            return cli_fail("plan", st, err.msg);
        /* A schedule that cannot be built for this m, v is the checklist's to report (below); one
         * asked for by name is refused here. */
        if ((st = plan_sched(&ps, &in, type, pp_print, &err)) != ST_OK && (pp_schedule[0] || pp_print))
            return cli_fail("plan", st, err.msg);
        if ((st = plan_split(&ps, &in, pp_layers, &err)) != ST_OK) {
            plan_sched_free(&ps);
            return cli_fail("plan", st, err.msg);
        }
    }
#undef SEEN
    PlanResult *r = calloc(1, sizeof *r);
    if (!r) return cli_fail("plan", ST_ERR_RUNTIME, "out of memory");
    if ((st = plan_compute(&in, r, &err)) != ST_OK) {
        free(r);
        plan_sched_free(&ps);
        return cli_fail("plan", st, err.msg);
    }
    if (json) {
        cJSON *o = json_plan(&in, r, &ps);
        char *s = cJSON_Print(o);
        if (s) puts(s);
        free(s);
        cJSON_Delete(o);
    } else {
        print_review(&in, r, &ps);
    }
    plan_sched_free(&ps);
    fflush(stdout);
    int rc = 0;
    if (r->nerrors > 0) {
        const PlanCheck *first = NULL;
        for (int i = 0; i < r->nchecks && !first; i++)
            if (r->checks[i].level == PLAN_CHECK_ERROR) first = &r->checks[i];
        snprintf(err.msg, sizeof err.msg, "%s (%d launch-checklist error%s)", first ? first->msg : "checklist error",
                 r->nerrors, r->nerrors == 1 ? "" : "s");
        rc = cli_fail("plan", ST_ERR_INPUT, err.msg);
    }
    free(r);
    return rc;
}
