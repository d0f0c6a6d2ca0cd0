/* cmd_plan.c — `scaletrain plan`: flags → PlanInput → plan_compute → a readable review or, with
 * --json, the JSON object plan_json builds (plan/plan_json.h; schema: docs/plan.md). The math and
 * the JSON live in src/plan (no I/O there).
 *
 * Units in the review: GiB = 2^30 bytes, GB = 10^9 bytes (both printed where published figures
 * use GB); FLOP counts multiply-adds as 2; every memory figure states the precisions it assumes. */
#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/cmds.h"
#include "cli/cmds_plan.h"
#include "cli/hwprobe.h"
#include "train/machine_peak.h"
#include "core/timer.h"
#include "core/fileio.h"
#include "core/mem.h"
#include "model/config.h"
#include "model/layout.h"
#include "model/lora.h"
#include "optim/optim.h"
#include "parallel/schedule.h"
#include "plan/plan.h"
#include "plan/plan_json.h"

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


static void print_review(const PlanInput *in, const PlanResult *r, const PlanSched *ps) {
    const PlanModel *m = &in->model;
    const PlanPrecision *p = &in->prec;
    char a[64], b[64], c[64], d[64];
    /* Which machine priced the plan, first: a default profile is not this machine. */
    if (in->hw_default && !strncmp(in->hw.name, "measured", 8))
        printf("== scaletrain plan, priced on hardware profile %s (the default: this machine as measured, cached per "
               "machine; --hardware PRESET or FILE.json chooses another) ==\n", in->hw.name);
    else if (in->hw_default)
        printf("== scaletrain plan, priced on hardware profile %s (the default: --hardware PRESET or FILE.json "
               "chooses; plan --measure-hardware FILE measures this machine) ==\n", in->hw.name);
    else
        printf("== scaletrain plan, priced on hardware profile %s ==\n", in->hw.name);
    /* Which accounting priced it, second: a GPU plan of our CPU trainer's bytes is not Megatron's. */
    if (in->textbook)
        printf("accounting: megatron (Megatron-LM / DeepSpeed bytes: %d-byte gradients and activations, the ZeRO "
               "paper's states, Korthikanti activations), as asked by --accounting megatron\n", p->grad);
    else if (r->mem.trainer_states || r->act.exact_used)
        printf("accounting: trainer (what this CPU trainer allocates: %d-byte gradients, %s activations%s); for "
               "Megatron-style bytes run plan with --accounting megatron\n",
               p->grad, r->act.exact_used ? "fp32" : "Korthikanti", r->mem.trainer_states ? ", states as its ranks hold them" : "");
    else
        printf("accounting: megatron-style (ZeRO paper states, %s activations): our trainer does not build this model "
               "or layout\n", r->act.exact_used ? "our kernels'" : "Korthikanti");
    /* ---- model ---- */
    if (m->params_override > 0) {
        printf("model: %lld parameters (count only)\n", r->n_params);
    } else {
        printf("model: %s, %s: L=%d heads=%d kv_heads=%d C=%d F=%d V=%d max_seq=%d%s%s\n", m->name,
               m->arch == PLAN_ARCH_LLAMA ? (m->tied_head ? "llama (RMSNorm, SwiGLU, rotary, tied head)"
                                                          : "llama (RMSNorm, SwiGLU, rotary, untied head)")
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
           plan_matmul_rate(&in->hw, p->compute) / r->compute.peak);
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
    if (r->mem.backend > 0)
        printf("  backend      %s  (the CUDA backend's cuBLASLt workspace and reduction scratch, in no category)\n",
               fmt_bytes(a, sizeof a, r->mem.backend));
    printf("  total        %s of %s: %s", fmt_bytes(a, sizeof a, r->mem.total), fmt_bytes(b, sizeof b, r->mem.device),
           r->mem.fits ? "fits" : "does not fit");
    if (r->mem.fits) printf(" (%.2f GiB free)\n", r->mem.margin / GIB);
    else printf(" by %.2f GiB\n", -r->mem.margin / GIB);
    for (int i = 0; i < r->nsuggest; i++) printf("  %s: %s\n", i == 0 ? "cheapest fix" : "or", r->suggest[i]);
    if (!r->mem.fits && r->nsuggest == 0 && r->devices_needed > 0)
        printf("  no single change of zero/recompute/sp/micro-batch/tp/pp on this world of %d makes it fit: add devices, "
               "%lld in all fit (%s)\n", r->world, r->devices_needed, r->devices_layout);
    else if (!r->mem.fits && r->nsuggest == 0)
        printf("  no single change of zero/recompute/sp/micro-batch/tp/pp on this world of %d makes it fit, nor any "
               "layout on up to 4096 times as many devices with the same global batch: shrink the model or the batch\n",
               r->world);
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
    printf("  FLOPs per token: 6N = %.4g, exact with attention = %.4g", r->compute.fpt_6n, r->compute.fpt);
    if (in->doc_mask) /* layout_doc_span_mean: the span the attention term is priced at */
        printf(" (document-masked: attention over %.4g keys per token, mean document %.4g of %d)",
               layout_doc_span_mean(in->seq_len, in->mean_doc_len), in->mean_doc_len, in->seq_len);
    printf("\n");
    if (in->recompute) printf("  with %s recompute: %.4g hardware FLOPs per token\n", plan_recompute_name(in->recompute), r->compute.fpt_hw);
    printf("  total: 6ND = %.4g, exact = %.4g FLOPs\n", r->compute.total_6nd, r->compute.total);
    if (r->compute.t_dropout > 0)
        printf("  dropout %g: %s of factor draws per step (in elementwise below; %.3g draws/s)\n", in->dropout,
               fmt_time(a, sizeof a, r->compute.t_dropout), plan_drop_rate(&in->hw));
    if (r->compute.t_head > 0)
        printf("  LM head softmax, loss and logit gradient: %s per step of passes over the logits at %.3g GB/s (in "
               "elementwise below)\n", fmt_time(a, sizeof a, r->compute.t_head), in->hw.mem_bw / 1e9);
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
        printf("  imbalance: the stages wait for the slowest one %.0f%% of the time, on top of the bubble%s\n",
               100.0 * (1.0 - sum / (S * mx)), r->pp_exact ? " (in the step above: the schedule run with each "
               "rank's own time)" : "");
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
            printf("    rank %d: blocks %s%s%s, %.4gM params, compute %s per step, %d slot%s: states %.2f MiB, activations %.2f MiB, workspace "
                   "%.2f MiB, tied buffer %.2f MiB, total %s%s; sends %.2f MiB per step (%d + %d messages, tied %.2f MiB)\n",
                   q, blocks, k->has_embed ? " +embeddings" : "", k->has_head ? " +head" : "", k->params / 1e6,
                   fmt_time((char[64]){0}, 64, k->t_compute), k->slots,
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
        printf("  TP collectives of our trainer: %s (all-reduce %s, all-gather %s, reduce-scatter %s), %s (%s), "
               "%s of it not hidden by the GEMMs beside the overlapped ones; "
               "textbook 8bsh(t-1)/t per layer x layers x micro-batches: %s\n",
               fmt_bytes(a, sizeof a, r->comm.tp_bytes), fmt_bytes(b, sizeof b, r->comm.by_kind[COMM_TP_ALLREDUCE]),
               fmt_bytes(c, sizeof c, r->comm.by_kind[COMM_TP_ALLGATHER]),
               fmt_bytes(d, sizeof d, r->comm.by_kind[COMM_TP_REDUCE_SCATTER]),
               fmt_time((char[64]){0}, 64, r->comm.tp_time), r->comm.tp_inter ? "inter-node" : "intra-node",
               fmt_time((char[64]){0}, 64, r->comm.tp_exposed), fmt_bytes((char[64]){0}, 64, r->comm.tp_megatron));
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
    printf("  size %s (fp32 weights, the master copy under mixed precision, + moments), write %s at %.3g GB/s x %d node(s)\n",
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

/* Reads approach3.{E, A, B, alpha, beta} of a `fit --json` output into in (has_fit). Errors
 * (ST_ERR_INPUT): one line naming the file and the member missing or out of range: E, A, B in
 * (0, 1e12], the exponents in (0, 10] (published fits: E 1.7, A 406, B 411, alpha 0.34, beta 0.28;
 * an exponent of 1e300 made the compute-optimal N and D print inf and nan). */
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
        double hi = k < 3 ? 1e12 : 10;
        if (!cJSON_IsNumber(x) || !(x->valuedouble > 0 && x->valuedouble <= hi)) {
            char got[48] = "another value";
            if (!x) snprintf(got, sizeof got, "no such member");
            else if (cJSON_IsNumber(x)) snprintf(got, sizeof got, "%g", x->valuedouble);
            cJSON_Delete(j);
            return err_set(err, ST_ERR_INPUT, "--scaling %s: expected approach3.%s in (0, %g], found %s", path, keys[k], hi,
                           got);
        }
        v[k] = x->valuedouble;
    }
    cJSON_Delete(j);
    in->has_fit = 1;
    snprintf(in->fit_source, sizeof in->fit_source, "%s", path);
    in->fit_E = v[0], in->fit_A = v[1], in->fit_B = v[2], in->fit_alpha = v[3], in->fit_beta = v[4];
    return ST_OK;
}

/* A warning when the machine was busy while it was measured (other work using more than
 * MACHINE_OTHERS_DISTURBED of its CPUs during the measurement, `others`; where that share is
 * unknown, a 1-minute load average at or above its CPU count): the figures are then low, and they
 * are cached. Appended to note. The load lags by a minute: after a busy minute a quiet measurement
 * was called busy, and R copies measured at once (--measure-copies) raise it themselves. */
static void warn_if_loaded(double others, char *note, size_t cap) {
    double load = machine_loadavg();
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    size_t o = strlen(note);
    if (others > MACHINE_OTHERS_DISTURBED)
        snprintf(note + o, cap - o, "plan: warning: other work used %.0f%% of the CPUs while this machine was measured, so "
                 "its figures are low; the cached profile is measured again after %.0f minutes (plan --measure-hardware "
                 "FILE measures and replaces it now)\n", 100 * others, HW_REMEASURE_AFTER_S / 60);
    else if (others < 0 && cpus > 0 && load >= (double)cpus) /* the share unknown: the lagging load says it */
        snprintf(note + o, cap - o, "plan: warning: the machine was busy while measured (load %.1f on %ld CPUs), so its "
                 "figures are low; measure again when it is quiet (plan --measure-hardware FILE replaces the cached "
                 "profile)\n", load, cpus);
}

int cmd_plan(int argc, char **argv) {
    char scaling_src[512] = "";
    PlanInput in = plan_default_input();
    char model[64] = "", arch[16] = "gpt2", precision[16] = "fp32", optimizer[16] = "adamw", recompute[16] = "none",
         hardware[1024] = "", acts[16] = "auto", measure[1024] = "", accounting[16] = "trainer";
    int measure_threads = 2, measure_copies = 1;
    int layers = 0, heads = 0, kv_heads = 0, channels = 0, ffn = 0, vocab = 50257, max_seq = 1024, tie = 0;
    double params = 0, peak_tflops = 0, memory_gib = 0, mem_bw_gbs = 0, intra_gbs = 0, inter_gbs = 0, matmul_eff = 0,
           storage_gbs = 0;
    double intra_lat_us = -1, inter_lat_us = -1;
    long global_batch = 0;
    int lora_rank = 0;
    char lora_targets[128] = "", lora_base_prec[16] = "fp32";
    int nodes = 0, dpn = 0, wb = 0, gb = 0, mb = -1, ob = 0, ab = 0, moments = -1, hess_every = 10, json = 0, no_overlap = 0;
    int no_noise = 0;
    char pp_schedule[32] = "", pp_layers[256] = "";
    int pp_print = 0;
    ArgSpec specs[] = {
        {"model", ARG_STR, model, sizeof model, "preset (one table with train's; see below)"},
        {"arch", ARG_STR, arch, sizeof arch, "shape family without --model: gpt2 | llama"},
        {"layers", ARG_INT, &layers, 0, "transformer blocks L"},
        {"heads", ARG_INT, &heads, 0, "attention heads"},
        {"kv-heads", ARG_INT, &kv_heads, 0, "key/value heads (GQA; default: = heads, or a Llama preset's)"},
        {"tie-embeddings", ARG_FLAG, &tie, 0, "llama: the LM head reads the token embedding (default: untied)"},
        {"channels", ARG_INT, &channels, 0, "model width C"},
        {"ffn", ARG_INT, &ffn, 0, "MLP width F (default: 4C for gpt2; Llama's rounded 8C/3 for llama)"},
        {"vocab", ARG_INT, &vocab, 0, "vocabulary size"},
        {"max-seq-len", ARG_INT, &max_seq, 0, "maximum sequence length"},
        {"params", ARG_DOUBLE, &params, 0, "a parameter count alone, e.g. 7e9 (no shape: FLOPs 6N, no activations)"},
        {"micro-batch", ARG_INT, &in.micro_batch, 0, "sequences per micro-batch B"},
        {"seq-len", ARG_INT, &in.seq_len, 0, "tokens per sequence T"},
        {"doc-mask", ARG_FLAG, &in.doc_mask, 0,
         "document masking (train --doc-mask): attention priced per document, from --mean-doc-len"},
        {"mean-doc-len", ARG_DOUBLE, &in.mean_doc_len, 0,
         "--doc-mask: mean document length in tokens (the attention span is min(it, --seq-len))"},
        {"dropout", ARG_DOUBLE, &in.dropout, 0,
         "train --dropout p: its factor draws priced at the hardware's draw rate (0: off)"},
        {"grad-accum", ARG_INT, &in.grad_accum, 0, "micro-batches per optimizer step k"},
        {"global-batch", ARG_LONG, &global_batch, 0, "sequences per step (sets --grad-accum; 0: unused)"},
        {"dp", ARG_INT, &in.dp, 0, "data-parallel ranks (1; with --nodes and no --dp: world / (tp x pp))"},
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
        {"weight-bytes", ARG_INT, &wb, 0, "bytes per weight (default: from --precision)"},
        {"grad-bytes", ARG_INT, &gb, 0, "bytes per gradient (default: from --precision)"},
        {"master-bytes", ARG_INT, &mb, 0, "bytes per master weight, 0 = none (default: from --precision)"},
        {"moment-bytes", ARG_INT, &ob, 0, "bytes per optimizer moment (default: from --precision)"},
        {"act-bytes", ARG_INT, &ab, 0, "bytes per activation element of the paper mode (default: from --precision; given, it selects that mode)"},
        {"optimizer", ARG_STR, optimizer, sizeof optimizer, "adamw | adam (2 moments) | sgd | lion (1 moment) | muon | shampoo (2 + their buffers) | sophia (2, and its Hessian pass)"},
        {"shampoo-block", ARG_INT, &in.shampoo_block, 0, "Shampoo's largest block side (with --optimizer shampoo)"},
        {"precond-every", ARG_INT, &in.precond_every, 0, "Shampoo's steps between inverse roots (with --optimizer shampoo)"},
        {"hess-every", ARG_INT, &hess_every, 0, "Sophia's steps between Hessian passes (with --optimizer sophia; default 10)"},
        {"moments", ARG_INT, &moments, 0, "optimizer moments per parameter, 0..2 (default: from --optimizer)"},
        {"activations", ARG_STR, acts, sizeof acts, "auto | paper (Korthikanti et al.) | exact (our kernels)"},
        {"accounting", ARG_STR, accounting, sizeof accounting,
         "trainer (what this CPU trainer allocates, for the models it builds: fp32 gradients and activations) | "
         "megatron (Megatron-LM / DeepSpeed bytes: 16-bit gradients and activations under bf16/fp16, the ZeRO "
         "paper's states, Korthikanti activations)"},
        {"threads", ARG_INT, &in.threads, 0, "trainer threads per rank (size our attention scratch; default: the trainer's, "
                                               "the grid's ranks sharing this machine's CPUs)"},
        {"hardware", ARG_STR, hardware, sizeof hardware,
         "A100-40GB | A100-80GB | H100 | H200 | cpu-zen4-2c | FILE.json (from --measure-hardware); default: this "
         "machine's measured profile, cached per machine (docs/plan.md)"},
        {"measure-hardware", ARG_STR, measure, sizeof measure,
         "measure this machine (FMA peak, GEMM efficiency, bf16 speed-up, memory bandwidth), write FILE.json, exit"},
        {"measure-threads", ARG_INT, &measure_threads, 0, "threads for --measure-hardware"},
        {"measure-copies", ARG_INT, &measure_copies, 0,
         "--measure-hardware: ranks measured at once, each on its own --measure-threads CPUs (1)"},
        {"nodes", ARG_INT, &nodes, 0, "nodes (world = nodes x devices per node; default: world = dp x tp x pp)"},
        {"devices-per-node", ARG_INT, &dpn, 0, "devices per node (0: the hardware preset's)"},
        {"peak-tflops", ARG_DOUBLE, &peak_tflops, 0, "override the peak TFLOP/s of the matmul dtype (default: the preset's)"},
        {"memory-gib", ARG_DOUBLE, &memory_gib, 0, "override device memory in GiB (default: the preset's)"},
        {"mem-bw-gbs", ARG_DOUBLE, &mem_bw_gbs, 0, "override memory bandwidth in GB/s (default: the preset's)"},
        {"intra-bw-gbs", ARG_DOUBLE, &intra_gbs, 0, "override intra-node GB/s per device (default: the preset's)"},
        {"inter-bw-gbs", ARG_DOUBLE, &inter_gbs, 0, "override inter-node GB/s per device (default: the preset's)"},
        {"intra-lat-us", ARG_DOUBLE, &intra_lat_us, 0, "override the intra-node latency α per message in µs (default: the preset's)"},
        {"inter-lat-us", ARG_DOUBLE, &inter_lat_us, 0,
         "override the inter-node latency α per message in µs (default: the preset's; bench/netsim.sh measures one)"},
        {"matmul-eff", ARG_DOUBLE, &matmul_eff, 0, "override the matmul efficiency (default: the preset's)"},
        {"storage-bw-gbs", ARG_DOUBLE, &storage_gbs, 0, "checkpoint write GB/s per node (default: the preset's)"},
        {"no-overlap", ARG_FLAG, &no_overlap, 0, "DP/ZeRO communication adds to the step (default: it overlaps the backward pass)"},
        {"no-noise-scale", ARG_FLAG, &no_noise, 0, "as train's: the step books no gradient-noise-scale all-gathers"},
        {"tokens", ARG_DOUBLE, &in.budget_tokens, 0, "budget in training tokens"},
        {"flops", ARG_DOUBLE, &in.budget_flops, 0, "budget in training FLOPs"},
        {"days", ARG_DOUBLE, &in.budget_days, 0, "budget in wall-clock days"},
        {"target-days", ARG_DOUBLE, &in.target_days, 0, "finish within this many days: the MFU it requires"},
        {"mtbf", ARG_DOUBLE, &in.mtbf_hours, 0, "mean time between failures of the job, hours"},
        {"scaling", ARG_STR, scaling_src, sizeof scaling_src, "a `scaletrain fit --json` result: its Approach 3 law joins the published ones and judges over-training"},
        {"json", ARG_FLAG, &json, 0, "print one JSON object (schema: docs/plan.md)"},
        {"lora-rank", ARG_INT, &lora_rank, 0, "also price LoRA fine-tuning at this rank on a frozen fp32 base (docs/lora.md)"},
        {"lora-targets", ARG_STR, lora_targets, sizeof lora_targets, "with --lora-rank: the adapted layers (as train's)"},
        {"lora-dropout", ARG_DOUBLE, &in.lora_dropout, 0,
         "with --lora-rank: the adapters' input dropout (as train's), its draws priced in the LoRA step"},
        {"lora-base-precision", ARG_STR, lora_base_prec, sizeof lora_base_prec,
         "with --lora-rank: the frozen base's block storage, fp32 or bf16 (as train's)"},
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
        printf("\n--model presets: %s\n", model_preset_names());
        return 0;
    }
#define SEEN(name) (args_find(specs, n, name)->seen)
    /* An empty value given reads as the option's absence (--pp-layers '' planned the default split,
     * --scaling '' no fit, --model '' beside a shape nothing): refused, as train refuses its own. */
    for (int i = 0; i < n; i++)
        if (specs[i].seen && specs[i].type == ARG_STR && !*(const char *)specs[i].dst) {
            snprintf(err.msg, sizeof err.msg, "--%s: expected a value, found an empty string", specs[i].name);
            return cli_fail("plan", ST_ERR_INPUT, err.msg);
        }
    if (measure[0]) {
        /* Measuring exits without planning: any planning option would be ignored. */
        for (int i = 0; i < n; i++)
            if (specs[i].seen && strcmp(specs[i].name, "measure-hardware") && strcmp(specs[i].name, "measure-threads") &&
                strcmp(specs[i].name, "measure-copies")) {
                snprintf(err.msg, sizeof err.msg,
                         "--measure-hardware: measures this machine and exits; expected no planning option, found --%s",
                         specs[i].name);
                return cli_fail("plan", ST_ERR_INPUT, err.msg);
            }
        int cpus = machine_cpus_allowed();
        if (measure_threads < 1 || measure_threads > cpus) { /* -1 asked libgomp for 962 GB; 1000 clamped nonsense */
            snprintf(err.msg, sizeof err.msg, "--measure-threads: expected 1..%d (the CPUs this process may run on), "
                     "found %d", cpus, measure_threads);
            return cli_fail("plan", ST_ERR_INPUT, err.msg);
        }
        if (measure_copies < 1 || (long)measure_copies * measure_threads > cpus) {
            snprintf(err.msg, sizeof err.msg, "--measure-copies: expected 1..%d (copies x --measure-threads %d within the "
                     "%d CPUs this process may run on), found %d", cpus / measure_threads, measure_threads, cpus,
                     measure_copies);
            return cli_fail("plan", ST_ERR_INPUT, err.msg);
        }
        PlanHardware hw;
        double others;
        char note[600] = "";
        if ((st = hw_measure_copies(&hw, measure_threads, measure_copies, &others, &err)) != ST_OK)
            return cli_fail("plan", st, err.msg);
        warn_if_loaded(others, note, sizeof note);
        fputs(note, stderr);
        cJSON *j = plan_hardware_to_json(&hw);
        char *text = cJSON_Print(j), cache[1024];
        hw_peak_cache_path(cache, sizeof cache); /* and this machine's default profile from now on */
        machine_profile_store(cache, measure_threads, measure_copies, j, others);
        cJSON_Delete(j);
        const void *bufs[2] = {text, "\n"};
        size_t lens[2] = {strlen(text), 1};
        st = file_write_atomic(measure, bufs, lens, 2, &err);
        free(text);
        if (st != ST_OK) return cli_fail("plan", st, err.msg);
        printf("hardware profile %s: fp32 peak %.1f GFLOP/s, GEMM efficiency %.2f; bf16 peak %.1f GFLOP/s, GEMM efficiency "
               "%.2f (bf16 GEMMs %.2fx fp32's); memory bandwidth %.1f GB/s (%d threads%s)\n",
               measure, hw.peak_fp32 / 1e9, hw.matmul_eff, hw.peak_bf16 / 1e9, hw.matmul_eff_bf16,
               plan_matmul_rate(&hw, PLAN_DTYPE_BF16) / plan_matmul_rate(&hw, PLAN_DTYPE_FP32), hw.mem_bw / 1e9,
               measure_threads, measure_copies > 1 ? ", per copy of those measured at once: their mean" : "");
        return 0;
    }
    if (SEEN("measure-threads"))
        return cli_fail("plan", ST_ERR_INPUT, "--measure-threads: expected only with --measure-hardware FILE");
    if (SEEN("measure-copies"))
        return cli_fail("plan", ST_ERR_INPUT, "--measure-copies: expected only with --measure-hardware FILE");
    if (scaling_src[0] && (st = read_scaling(&in, scaling_src, &err)) != ST_OK) return cli_fail("plan", st, err.msg);
    /* ---- model ---- */
    int shape_given = SEEN("layers") || SEEN("heads") || SEEN("channels");
    static const char *const shape_flags[] = {"arch", "layers", "heads", "kv-heads", "channels", "ffn", "vocab", "max-seq-len"};
    if (SEEN("params")) { /* 0 given too: with a model it would have been ignored */
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
        /* A Llama preset keeps its KV heads, as train's preset does (model_flags): --heads on
         * llama3-8b planned 64 KV heads where the trainer builds 8. GPT-2 has no GQA. */
        if (SEEN("heads")) in.model.n_head = heads;
        if (SEEN("heads") && in.model.arch != PLAN_ARCH_LLAMA) in.model.n_kv_head = heads;
        if (SEEN("heads") && !SEEN("kv-heads") && heads >= 1 && in.model.n_kv_head >= 1 && heads % in.model.n_kv_head) {
            snprintf(err.msg, sizeof err.msg, "--heads %d: expected a multiple of --model %s's %d KV heads (or --kv-heads "
                     "dividing it), found %d", heads, model, in.model.n_kv_head, heads);
            return cli_fail("plan", ST_ERR_INPUT, err.msg);
        }
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
            /* Llama's SwiGLU width: 2/3 of 4C rounded up to a multiple of 256, as the trainer's. */
            in.model.d_ff = ffn > 0 || SEEN("ffn") ? ffn : model_llama_ffn(channels, 256);
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
        /* GPT-2's head always reads the token embedding (plan_model_from_config): the flag would change nothing */
        if (in.model.arch != PLAN_ARCH_LLAMA)
            return cli_fail("plan", ST_ERR_INPUT,
                            "--tie-embeddings: would change nothing here (GPT-2 always ties its head); expected a llama model");
        in.model.tied_head = 1;
    }
    /* ---- precision, optimizer, activations, recompute ---- */
    if (!strcmp(accounting, "megatron")) in.textbook = 1;
    else if (strcmp(accounting, "trainer")) {
        snprintf(err.msg, sizeof err.msg, "--accounting: expected trainer or megatron, found '%s'", accounting);
        return cli_fail("plan", ST_ERR_INPUT, err.msg);
    }
    ModelConfig ours_cfg;
    int ours = plan_model_to_config(&in.model, &ours_cfg) && !in.textbook;
    st = ours ? plan_precision_trainer(&in.prec, precision, &err) : plan_precision_preset(&in.prec, precision, &err);
    if (st != ST_OK) return cli_fail("plan", st, err.msg);
    if (SEEN("weight-bytes")) in.prec.weight = wb;
    if (SEEN("grad-bytes")) in.prec.grad = gb;
    if (SEEN("master-bytes") && mb >= 0) in.prec.master = mb;
    else if (SEEN("master-bytes")) in.prec.master = -1; /* rejected by plan_validate */
    if (SEEN("moment-bytes")) in.prec.moment = ob;
    if (SEEN("act-bytes")) in.prec.act = ab;
    /* The moment buffers are the trainer's (optim_num_moments), one source for both. */
    OptimKind okind;
    if ((st = optim_parse_kind(optimizer, &okind, &err)) != ST_OK) return cli_fail("plan", st, err.msg);
    OptimConfig ocfg = optim_default_config(okind);
    in.n_moments = optim_num_moments(&ocfg);
    in.muon = okind == OPT_MUON, in.shampoo = okind == OPT_SHAMPOO;
    if (okind == OPT_SOPHIA) in.hess_every = SEEN("hess-every") ? hess_every : 10;
    if (SEEN("hess-every") && strcmp(optimizer, "sophia"))
        return cli_fail("plan", ST_ERR_INPUT, "--hess-every: would change nothing here; expected --optimizer sophia");
    if ((SEEN("shampoo-block") || SEEN("precond-every")) && okind != OPT_SHAMPOO) {
        snprintf(err.msg, sizeof err.msg, "--%s: would change nothing here; expected --optimizer shampoo",
                 SEEN("shampoo-block") ? "shampoo-block" : "precond-every");
        return cli_fail("plan", ST_ERR_INPUT, err.msg);
    }
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
    if (!(in.dropout >= 0 && in.dropout < 1)) {
        snprintf(err.msg, sizeof err.msg, "--dropout: expected a probability in [0, 1), found %g", in.dropout);
        return cli_fail("plan", ST_ERR_INPUT, err.msg);
    }
    if (SEEN("mean-doc-len") && !in.doc_mask)
        return cli_fail("plan", ST_ERR_INPUT, "--mean-doc-len: would change nothing here; expected --doc-mask");
    if (in.doc_mask && !(in.mean_doc_len >= 1)) {
        snprintf(err.msg, sizeof err.msg, "--mean-doc-len: expected a mean document length >= 1 token with --doc-mask, "
                 "found %g", in.mean_doc_len);
        return cli_fail("plan", ST_ERR_INPUT, err.msg);
    }
    /* The trainer's --threads default (machine_auto_threads) for the grid's ranks on this machine;
     * 0 asks for it as it does of the trainer. */
    if (machine_threads_check(in.threads, &err) != ST_OK) /* train's bound: 1e8 priced 55,147 GiB of scratch */
        return cli_fail("plan", ST_ERR_INPUT, err.msg);
    if (!SEEN("threads") || in.threads == 0) {
        long ranks = (long)in.dp * in.tp * in.pp;
        in.threads = machine_default_threads(ranks > 0 && ranks < 1 << 20 ? (int)ranks : 1);
    }
    /* ---- hardware ---- */
    /* Without --hardware: this machine's measured profile, from the cache (measured and cached on
     * the first call); with no cache (ST_PEAK_CACHE=off, no $HOME) the cpu-zen4-2c preset. */
    char cache[1024], hw_note[1600] = "";
    hw_peak_cache_path(cache, sizeof cache);
    if (SEEN("hardware")) {
        if ((st = hw_resolve(&in.hw, hardware, &err)) != ST_OK) return cli_fail("plan", st, err.msg);
    } else if (cache[0]) {
        /* the profile of the CPUs the run may use: threads beyond them add no FLOP/s (and --threads
         * 20000 measured with 20000 threads, 50000 crashed libgomp) */
        int cpus = machine_cpus_allowed(), nt = in.threads > 0 ? in.threads : 1;
        if (nt > cpus) nt = cpus;
        /* The ranks that share this machine (--devices-per-node of them, at most the world's), each
         * priced by a profile measured with that many copies at once (hw_measure_copies): as many
         * as fit on its CPUs at nt threads each. */
        long world = (long)in.dp * in.tp * in.pp;
        int copies = SEEN("devices-per-node") && dpn > 1 ? dpn : 1;
        if (!SEEN("nodes") && world > 0 && world < copies) copies = (int)world;
        if (copies > cpus / nt) copies = cpus / nt > 0 ? cpus / nt : 1;
        double t0 = timer_ms();
        HwOrigin o;
        if ((st = hw_this_machine(&in.hw, nt, copies, cache, &o, &err)) != ST_OK) return cli_fail("plan", st, err.msg);
        char why[96], who[64];
        if (copies > 1) snprintf(who, sizeof who, "%d ranks of %d threads at once", copies, nt);
        else snprintf(who, sizeof who, "%d threads", nt);
        if (o.was_others > MACHINE_OTHERS_DISTURBED)
            snprintf(why, sizeof why, "while other work used %.0f%% of the CPUs", 100 * o.was_others);
        else if (o.was_others < 0 && o.was_load <= cpus)
            snprintf(why, sizeof why, "without a record of the other work meanwhile");
        else
            snprintf(why, sizeof why, "at load %.1f", o.was_load);
        /* Said on stderr once the plan has gone out: an error stays the one line it is. */
        if (o.measured == 2)
            snprintf(hw_note, sizeof hw_note, "plan: this machine's cached profile (%s) was measured %s; measured "
                     "again in %.1f s, each figure raised where now higher, cached in %s\n", who, why,
                     (timer_ms() - t0) * 1e-3, cache);
        else if (o.measured)
            snprintf(hw_note, sizeof hw_note, "plan: measured this machine's profile (%s) in %.1f s, cached in %s\n",
                     who, (timer_ms() - t0) * 1e-3, cache);
        if (o.measured) warn_if_loaded(o.others, hw_note, sizeof hw_note);
        else if (o.others > MACHINE_OTHERS_DISTURBED)
            snprintf(hw_note, sizeof hw_note, "plan: warning: this machine's cached profile (%s) was measured while "
                     "other work used %.0f%% of the CPUs, so its figures are low; it is measured again %.0f minutes after "
                     "(plan --measure-hardware FILE measures and replaces it now)\n", who, 100 * o.others,
                     HW_REMEASURE_AFTER_S / 60);
        if (!o.measured) { /* a cached profile: how fast the machine runs now against its cached figures */
            MachinePeakOptions po = machine_peak_default_options();
            po.threads = nt, po.bf16 = !strcmp(precision, "bf16"), po.cache_path = cache;
            MachinePeak mp;
            Err pe;
            double sp = machine_peak_resolve(&mp, &po, &pe) == ST_OK ? machine_peak_speed(&mp, mp.check) : 0;
            size_t at = strlen(hw_note);
            if (sp > 0 && sp < MACHINE_SPEED_SLOW)
                snprintf(hw_note + at, sizeof hw_note - at, "plan: this machine runs GEMMs at %.2f of its cached figures "
                         "now (the median 512^3 %s GEMM call against the best cached, %d thread%s): other work, or a "
                         "shared host's slower phase; a run started now would take about 1/%.2f of this plan\n", sp,
                         po.bf16 ? "bf16" : "fp32", nt, nt == 1 ? "" : "s", sp);
        }
    } else if ((st = hw_resolve(&in.hw, "cpu-zen4-2c", &err)) != ST_OK)
        return cli_fail("plan", st, err.msg);
    in.hw_default = !SEEN("hardware");
    /* An override is a positive figure, refused here by its own flag and value as given (the
     * profile check in plan_validate would name the profile and the converted value). */
    const struct { const char *flag; double v; const char *unit; } hwo[] = {
        {"peak-tflops", peak_tflops, "peak in TFLOP/s"}, {"memory-gib", memory_gib, "memory in GiB"},
        {"mem-bw-gbs", mem_bw_gbs, "bandwidth in GB/s"}, {"intra-bw-gbs", intra_gbs, "bandwidth in GB/s"},
        {"inter-bw-gbs", inter_gbs, "bandwidth in GB/s"}, {"matmul-eff", matmul_eff, "fraction"},
        {"storage-bw-gbs", storage_gbs, "bandwidth in GB/s"},
    };
    for (size_t i = 0; i < sizeof hwo / sizeof hwo[0]; i++)
        if (SEEN(hwo[i].flag) && !(hwo[i].v > 0 && isfinite(hwo[i].v))) {
            snprintf(err.msg, sizeof err.msg, "--%s: expected a positive %s, found %g", hwo[i].flag, hwo[i].unit, hwo[i].v);
            return cli_fail("plan", ST_ERR_INPUT, err.msg);
        }
    if (SEEN("devices-per-node") && dpn < 0) {
        snprintf(err.msg, sizeof err.msg, "--devices-per-node: expected 0 (the hardware's) or a positive integer, found %d", dpn);
        return cli_fail("plan", ST_ERR_INPUT, err.msg);
    }
    if (SEEN("devices-per-node") && dpn > 0) in.hw.devices_per_node = dpn;
    /* A peak or an efficiency given replaces the measured bf16 efficiency too (it is a fraction of
     * the measured bf16 peak): matmul_eff then prices every precision. */
    if (SEEN("peak-tflops") || SEEN("matmul-eff")) in.hw.matmul_eff_bf16 = 0;
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
    if ((SEEN("intra-lat-us") && !(intra_lat_us >= 0)) || (SEEN("inter-lat-us") && !(inter_lat_us >= 0))) {
        snprintf(err.msg, sizeof err.msg, "--%s-lat-us: expected a latency >= 0 µs, found %g",
                 SEEN("intra-lat-us") && !(intra_lat_us >= 0) ? "intra" : "inter",
                 SEEN("intra-lat-us") && !(intra_lat_us >= 0) ? intra_lat_us : inter_lat_us);
        return cli_fail("plan", ST_ERR_INPUT, err.msg);
    }
    if (SEEN("intra-lat-us")) in.hw.intra_lat = intra_lat_us * 1e-6;
    if (SEEN("inter-lat-us")) in.hw.inter_lat = inter_lat_us * 1e-6;
    if (SEEN("matmul-eff")) in.hw.matmul_eff = matmul_eff;
    if (SEEN("storage-bw-gbs")) in.hw.storage_bw = storage_gbs * 1e9;
    if (SEEN("nodes")) {
        if (nodes < 1) {
            snprintf(err.msg, sizeof err.msg, "--nodes: expected a positive integer, found %d", nodes);
            return cli_fail("plan", ST_ERR_INPUT, err.msg);
        }
        if (in.hw.devices_per_node < 1) {
            snprintf(err.msg, sizeof err.msg, "--devices-per-node: expected a positive integer with --nodes (the hardware "
                     "%s gives %d), found none", in.hw.name, in.hw.devices_per_node);
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
    /* As train's: with one data-parallel rank there is no DP/ZeRO communication to overlap (after
     * --nodes, which sets dp). */
    if (no_overlap && in.dp == 1)
        return cli_fail("plan", ST_ERR_INPUT, "--no-overlap: would change nothing here; expected data parallelism "
                        "(--dp > 1, or --nodes with a world larger than --tp x --pp), found --dp 1");
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
        if (global_batch / per > INT_MAX) { /* it truncated: 8e10 sequences planned as 1.1e10, exit 0 */
            snprintf(err.msg, sizeof err.msg, "--global-batch %ld: expected at most %d micro-batches per step (--micro-batch "
                     "%d x --dp %d = %ld sequences each), found %ld", global_batch, INT_MAX, in.micro_batch, in.dp, per,
                     global_batch / per);
            return cli_fail("plan", ST_ERR_INPUT, err.msg);
        }
        in.grad_accum = (int)(global_batch / per);
    }
    /* ---- pipeline schedule ---- */
    PlanSched ps;
    memset(&ps, 0, sizeof ps);
    /* --pp-microbatches too: at --pp 1 it would only re-split the batch, which the trainer never does. */
    if ((SEEN("pp-schedule") || pp_print || SEEN("pp-layers") || SEEN("pp-microbatches")) && in.pp <= 1) {
        snprintf(err.msg, sizeof err.msg, "--%s: would change nothing with --pp %d; expected --pp > 1",
                 SEEN("pp-schedule") ? "pp-schedule" : pp_print ? "pp-print-schedule"
                 : SEEN("pp-layers") ? "pp-layers" : "pp-microbatches", in.pp);
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
        if ((st = plan_sched_build(&ps, &in, type, pp_print, &err)) != ST_OK && (pp_schedule[0] || pp_print))
            return cli_fail("plan", st, err.msg);
        if ((st = plan_sched_split(&ps, &in, pp_layers, &err)) != ST_OK) {
            plan_sched_free(&ps);
            return cli_fail("plan", st, err.msg);
        }
    }
    /* ---- LoRA: the per-rank bytes of train --lora-rank (lora_memory_plan: what it allocates) ---- */
    size_t lora_bytes[MEM_NCAT] = {0};
    long long lora_params = 0;
    double lora_local = 0, lora_in = 0; /* the adapter floats one rank's optimizer updates */
    if (SEEN("lora-base-precision") && lora_rank <= 0)
        return cli_fail("plan", ST_ERR_INPUT, "--lora-base-precision: expected --lora-rank > 0 with it, found no --lora-rank");
    if (SEEN("lora-dropout") && lora_rank <= 0)
        return cli_fail("plan", ST_ERR_INPUT, "--lora-dropout: expected --lora-rank > 0 with it, found no --lora-rank");
    if (!(in.lora_dropout >= 0 && in.lora_dropout < 1)) {
        snprintf(err.msg, sizeof err.msg, "--lora-dropout: expected a probability in [0, 1), found %g", in.lora_dropout);
        return cli_fail("plan", ST_ERR_INPUT, err.msg);
    }
    if (in.lora_dropout > 0 && in.tp > 1) {
        snprintf(err.msg, sizeof err.msg, "--lora-dropout %g with --tp %d: expected 0 (train refuses it: the masks of a "
                 "row-parallel layer's column slice are not implemented)", in.lora_dropout, in.tp);
        return cli_fail("plan", ST_ERR_INPUT, err.msg);
    }
    if (SEEN("lora-targets") && lora_rank <= 0)
        return cli_fail("plan", ST_ERR_INPUT, "--lora-targets: expected --lora-rank > 0 with it, found no --lora-rank");
    if (lora_rank != 0) {
        ModelConfig lc;
        if (!plan_model_to_config(&in.model, &lc) || model_config_validate(&lc, &err) != ST_OK)
            return cli_fail("plan", ST_ERR_INPUT, "--lora-rank: expected a model this trainer builds (a shape, not --params)");
        if (strcmp(optimizer, "adamw") && strcmp(optimizer, "adam")) { /* the LoRA loop's (lora_train.c refuse) */
            snprintf(err.msg, sizeof err.msg, "--optimizer %s: not supported with --lora-rank (LoRA trains with adamw or "
                     "adam)", optimizer);
            return cli_fail("plan", ST_ERR_INPUT, err.msg);
        }
        if (in.pp > 1 || in.zero > 3 || in.sp || strcmp(precision, "fp32")) {
            snprintf(err.msg, sizeof err.msg, "--lora-rank: LoRA runs at --pp 1, --zero 0..3, no --sp, "
                     "--precision fp32, found tp %d, pp %d, zero %d, %s", in.tp, in.pp, in.zero, precision);
            return cli_fail("plan", ST_ERR_INPUT, err.msg);
        }
        LoraConfig cfgl = {lora_rank, (float)lora_rank, 0.0f, 0, !strcmp(lora_base_prec, "bf16")};
        if (strcmp(lora_base_prec, "fp32") && !cfgl.base_bf16) {
            snprintf(err.msg, sizeof err.msg, "--lora-base-precision: expected fp32 or bf16, found '%s'", lora_base_prec);
            return cli_fail("plan", ST_ERR_INPUT, err.msg);
        }
        if (!lora_targets[0]) snprintf(lora_targets, sizeof lora_targets, "%s", lc.arch == ARCH_LLAMA ? "q,v" : "q,k,v");
        LoraLayout ll;
        if ((st = lora_parse_targets(lora_targets, &lc, &cfgl.targets, &err)) != ST_OK ||
            (st = lora_layout_init_tp(&ll, &lc, &cfgl, in.dp, in.tp, 0, &err)) != ST_OK)
            return cli_fail("plan", st, err.msg);
        ActOptions ao = layout_act_options(in.micro_batch, in.seq_len, in.threads);
        ao.recompute = (Recompute)in.recompute, ao.tp = in.tp;
        lora_memory_plan(&lc, &ao, &ll, in.n_moments, in.dp, in.zero, lora_bytes);
        lora_local = (double)lora_moment_floats(&ll, in.dp, in.zero);
        LoraLayout whole; /* the adapters of the whole model (tp 1) */
        if ((st = lora_layout_init(&whole, &lc, &cfgl, 1, &err)) != ST_OK) return cli_fail("plan", st, err.msg);
        lora_params = (long long)(whole.block_floats * (size_t)whole.L);
        lora_in = lora_input_width(&whole); /* --lora-dropout's draws: it runs at tp 1 only (refused above) */
    }
#undef SEEN
    PlanResult *r = calloc(1, sizeof *r);
    if (!r) return cli_fail("plan", ST_ERR_RUNTIME, "out of memory");
    if ((st = plan_compute(&in, r, &err)) != ST_OK) {
        free(r);
        plan_sched_free(&ps);
        return cli_fail("plan", st, err.msg);
    }
    /* --no-noise-scale drops the estimator's all-gathers from the trainer's collectives: only where the
     * plan counts them (comm_bytes_by_kind) and the trainer estimates it (plan_noise_scale_on) on
     * more than one rank. */
    if (no_noise && !(r->comm.by_kind_exact && (long)in.dp * in.tp > 1 && plan_noise_scale_on(in.dp, in.pp, in.grad_accum, 0))) {
        snprintf(err.msg, sizeof err.msg, "--no-noise-scale: would change nothing here; expected a plan of our trainer's "
                 "collectives (a model it builds at --pp 1) that estimates the gradient noise scale on several ranks "
                 "(--dp > 1, or --tp > 1 with --grad-accum > 1), found dp %d, tp %d, pp %d, grad-accum %d",
                 in.dp, in.tp, in.pp, in.grad_accum);
        free(r);
        plan_sched_free(&ps);
        return cli_fail("plan", ST_ERR_INPUT, err.msg);
    }
    PlanLoraStep ls;
    if (lora_rank > 0 && (st = plan_lora_step(&in, r, (double)lora_params, lora_local, lora_in, in.zero, &ls, &err)) != ST_OK) {
        free(r);
        plan_sched_free(&ps);
        return cli_fail("plan", st, err.msg);
    }
    if (json) {
        cJSON *o = plan_json(&in, r, &ps);
        if (lora_rank > 0) { /* LoRA: what one rank of train --lora-rank allocates, by category, and its step */
            cJSON *lo = cJSON_AddObjectToObject(o, "lora"), *b = cJSON_AddObjectToObject(lo, "bytes_per_rank");
            cJSON_AddNumberToObject(lo, "rank", lora_rank);
            cJSON_AddStringToObject(lo, "targets", lora_targets);
            cJSON_AddNumberToObject(lo, "adapter_params", (double)lora_params);
            double tot = 0;
            for (int i = 0; i < MEM_NCAT; i++) {
                cJSON_AddNumberToObject(b, mem_category_name(i), (double)lora_bytes[i]);
                tot += (double)lora_bytes[i];
            }
            cJSON_AddNumberToObject(lo, "total_bytes_per_rank", tot);
            cJSON *cs = cJSON_AddObjectToObject(lo, "compute");
            cJSON_AddNumberToObject(cs, "flops_per_token", ls.fpt);
            cJSON_AddNumberToObject(cs, "flops_per_token_hw", ls.fpt_hw);
            cJSON_AddNumberToObject(cs, "t_matmul", ls.t_matmul);
            cJSON_AddNumberToObject(cs, "t_elementwise", ls.t_elementwise);
            cJSON_AddNumberToObject(cs, "t_tp", ls.t_tp);
            cJSON_AddNumberToObject(cs, "t_dp", ls.t_dp);
            cJSON_AddNumberToObject(cs, "t_optimizer", ls.t_optimizer);
            cJSON_AddNumberToObject(cs, "t_dropout", ls.t_dropout); /* inside t_elementwise */
            cJSON_AddNumberToObject(cs, "step", ls.step);
            cJSON_AddNumberToObject(cs, "tokens_per_s", ls.tokens_per_s);
            cJSON_AddNumberToObject(cs, "mfu", ls.mfu);
        }
        char *s = cJSON_Print(o);
        if (s) puts(s);
        free(s);
        cJSON_Delete(o);
    } else {
        print_review(&in, r, &ps);
        if (lora_rank > 0) {
            char b1[32], b2[32], b3[32], b4[32], b5[32], b6[32];
            double tot = 0;
            for (int i = 0; i < MEM_NCAT; i++) tot += (double)lora_bytes[i];
            printf("\nLoRA fine-tuning (rank %d, targets %s, frozen %s base, docs/lora.md): %lld adapter parameters; "
                   "per rank: base + adapters %s, gradients %s, moments %s, activations + workspace %s, total %s\n",
                   lora_rank, lora_targets, strcmp(lora_base_prec, "bf16") ? "fp32" : "bf16-block", lora_params,
                   fmt_bytes(b1, sizeof b1, (double)lora_bytes[MEM_PARAMS]),
                   fmt_bytes(b2, sizeof b2, (double)lora_bytes[MEM_GRADS]), fmt_bytes(b3, sizeof b3, (double)lora_bytes[MEM_MOMENTS]),
                   fmt_bytes(b4, sizeof b4, (double)(lora_bytes[MEM_ACTIVATIONS] + lora_bytes[MEM_WORKSPACE])),
                   fmt_bytes(b5, sizeof b5, tot));
            printf("  step: %.4g FLOPs/token (forward and input gradients; %.2f of full training's %.4g), predicted "
                   "%s (matmul %s + elementwise %s + tp %s + adapters' dp %s + optimizer %s), %.0f tokens/s, MFU %.1f%%\n",
                   ls.fpt, ls.fpt / r->compute.fpt, r->compute.fpt, fmt_time(b1, sizeof b1, ls.step),
                   fmt_time(b2, sizeof b2, ls.t_matmul), fmt_time(b3, sizeof b3, ls.t_elementwise),
                   fmt_time(b4, sizeof b4, ls.t_tp), fmt_time(b5, sizeof b5, ls.t_dp),
                   fmt_time(b6, sizeof b6, ls.t_optimizer), ls.tokens_per_s, 100.0 * ls.mfu);
        }
    }
    plan_sched_free(&ps);
    fflush(stdout);
    int rc = 0;
    if (r->nerrors > 0) {
        const PlanCheck *first = NULL;
        for (int i = 0; i < r->nchecks && !first; i++)
            if (r->checks[i].level == PLAN_CHECK_ERROR) first = &r->checks[i];
        /* A memory error says what fits: the cheapest knob, or how many devices */
        char fix[320] = "";
        if (first && !strncmp(first->msg, "memory:", 7) && r->nsuggest > 0)
            snprintf(fix, sizeof fix, "; cheapest fix: %s", r->suggest[0]);
        else if (first && !strncmp(first->msg, "memory:", 7) && r->devices_needed > 0)
            snprintf(fix, sizeof fix, "; add devices: %lld in all fit (%s)", r->devices_needed, r->devices_layout);
        snprintf(err.msg, sizeof err.msg, "%s%s (%d launch-checklist error%s)", first ? first->msg : "checklist error",
                 fix, r->nerrors, r->nerrors == 1 ? "" : "s");
        rc = cli_fail("plan", ST_ERR_INPUT, err.msg);
    }
    free(r);
    if (rc == 0 && !ferror(stdout)) fputs(hw_note, stderr); /* a failed write gets its own one line (main.c) */
    return rc;
}
