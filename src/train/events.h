/* events.h — the metrics log: its JSON Lines schema and one writer per event (DESIGN.md §5).
 *
 * One JSON object per line, "event" first. Every field of every event is written here and nowhere
 * else, so this table is the schema (METRICS_SCHEMA_VERSION in train.h). Times are milliseconds,
 * memory bytes, rates per second; NaN is written as null.
 *
 *   start     schema_version, config{...}, build{git_commit, compiler, gemm, threads, command},
 *             effective_batch{sequences, tokens}, num_params, flops_per_token, world,
 *             peak_flops (this rank), peak_flops_job (sum over ranks: the MFU denominator),
 *             peak_flops_by_rank[] (each rank's, world entries, summed in rank order),
 *             peak_source, peak_kind, peak_probe_flops and peak_gemm_flops (this rank's two
 *             measurements, peak_flops their max; 0 when given), [gemm_check (a cached peak: the
 *             short GEMM check's rate now over the cached GEMM figure, at most 1; under 0.9 the
 *             machine runs slower than the figures that price the plan and MFU),] data_utilization, loss_masks (the
 *             training shards carry loss masks, docs/finetune.md), resumed_from_step,
 *             resume{requested, found, checkpoint, note}, plan{step_ms, tokens_per_s, mfu,
 *             num_params, memory_total}, memory_planned{category: bytes}
 *   memory    (at start) measured{category: bytes}, planned{4 state categories}, measured_by_rank
 *             {category: [bytes per rank]}, zero, dp, tp, sp, planned_equals_measured
 *   memory    (after the first step) step, measured{category}, allocated_total,
 *             rss_anon_above_baseline, rss_unaccounted, allocated_total_by_rank[],
 *             rss_anon_above_baseline_by_rank[]
 *   step      step, batch, loss, lr, grad_norm, grad_norm_clipped, grad_norm_by_rank[], applied,
 *             loss_scale (fp16), tokens (the step's trained targets: the loss denominator, below
 *             the batch's tokens with loss masks or no-pack padding), tokens_seen (batch tokens
 *             times steps), tokens_per_s, mfu, elapsed_s, eta_s,
 *             comm_bytes, comm_bytes_by_kind{kind: bytes}, [tp_overlapped (tp > 1: the tp collectives
 *             started nonblocking and overlapped with a GEMM, docs/parallel.md "Overlap"),
 *             tp_overlapped_done (of those, the ones seen complete by a progress call before
 *             their wait: wholly hidden),] [zero_gathers_ahead (ZeRO 3: parameter gathers started
 *             ahead of the segment that needs them, the prefetch behind compute; 0 with --no-overlap),]
 *             step_ms_max, step_ms_median,
 *             time_ms{total, data, forward, backward, comm, comm_dp, comm_tp[, tp_progress][, dp_progress]
 *             [, comm_by_kind{kind: ms}][, comm_by_rank[]], optimizer, checkpoint[, hessian]} (comm = comm_dp + comm_tp: exposed waits in the dp/world collectives and
 *             in the tensor-parallel ones; at tp > 1 tp_progress: the time the overlapped tp
 *             collectives' progress calls took on the calling thread while a GEMM ran on another,
 *             not exposed and in no other part; with several processes dp_progress: the time the
 *             progress calls of the other collectives took (ZeRO's pieces tested between segments,
 *             pipeline messages), inside forward and backward, not in comm (bench/zero_overlap.sh
 *             prints it); with several processes comm_by_kind: comm split by collective kind (the
 *             scalar collectives' waits are mostly the ranks' skew: bench/netsim.sh) and comm_by_rank:
 *             every rank's comm before the step report's own gathers (the smallest is the closest to
 *             the transfer time: the rank that arrived last waited least); the kinds are comm_kind_name's; a checkpoint save's
 *             gathers are left out of the step's communication: they are its checkpoint time),
 *             pipeline{...} (pp > 1), noise_scale{b_big, b_small, g2_small, g2, trace_sigma,
 *             b_simple, b_simple_ema, g2_small_by_replica[]} (when estimated: train/noise.h),
 *             hessian{loss, tokens, comm_bytes, skipped} (Sophia, on steps with its Hessian pass:
 *             time_ms.hessian is that pass — its forward, backward, collectives and EMA — and is
 *             in no other part; the step's comm leaves out its collectives; mfu counts its FLOPs)
 *             [, layer_stats{groups[], grad_norm[], weight_norm[], update_norm[], update_ratio[]}]
 *             (--log-layer-stats, applied steps only: per layout segment "embeddings", "block0"..,
 *             "final_norm", the raw gradient's L2 norm (before clipping, fp16 unscaled), the
 *             weights' norm before the update, the norm of the update w_after - w_before, and
 *             update_norm / weight_norm)
 *   val       step, loss, perplexity, tokens (the validated targets: with loss masks the trained
 *             ones, the loss is their mean), time_ms
 *   spike | nonfinite   step, batch, metric, value, median, z, action, tokens_seen
 *   stall     step, why
 *   peak      step, peak_flops_job (the MFU denominator from this step on), previous_peak_flops_job,
 *             achieved_flops (the step's model FLOP/s, which beat the previous peak: the measured or
 *             given peak was low, e.g. measured under load; MFU is bounded by 1, docs/plan.md)
 *   skip      step, batch
 *   rollback  step, to_step, batch, checkpoint
 *   overflow  step, batch, loss_scale, new_loss_scale
 *   ckpt      step, mode, time_ms [, path, bytes, pruned] (synchronous saves)
 *   sample    step, text | ids[]
 *   end       steps, preempted, spikes, skips, rollbacks [, overflows, loss_scale], final_loss,
 *             final_val_loss, median_step_ms, tokens_per_s, wall_s [, planned_step_ms,
 *             step_ms_over_plan], [gemm_check{start, end} (the check again after the last step)],
 *             memory_measured{category: peak bytes}
 *
 * A LoRA run (train --lora-rank, train/lora.h) writes its own start, memory, step and end records
 * (each with "lora": true or a lora{} object) and the val and ckpt records above (ckpt's mode
 * "lora"):
 *   start     config{...}, effective_batch{sequences, tokens}, loss_masks, lora{rank, alpha, dropout,
 *             targets, adapter_params, base_params (the model's parameter count), base_precision ("fp32" or
 *             "bf16"), base_xxh3, base_local_xxh3}, world, dp, tp, zero,
 *             resumed_from_step [, doc_mask{eot}], flops_per_token, peak_flops, peak_flops_job,
 *             peak_kind [, plan{step_ms, tokens_per_s, mfu}]
 *   memory    lora, measured{category: bytes}, planned{category: bytes}, planned_equals_measured
 *   step      step, loss, lr, grad_norm, grad_norm_clipped, tokens, tokens_seen, mfu, lora, time_ms{total}
 *   end       steps, final_loss, base_local_xxh3_after (the frozen base's hash at the end: equal
 *             to the start's base_local_xxh3), median_step_ms, tokens_per_s [, planned_step_ms]
 *
 * A resumed run appends to the same log: its start record has resumed_from_step > 0, and its
 * step records continue from the checkpoint's step (docs/report.md: how `report` joins them). */
#ifndef ST_TRAIN_EVENTS_H
#define ST_TRAIN_EVENTS_H

#include <stdio.h>

#include "core/mem.h"
#include "core/status.h"
#include "train/train.h"

#define LAYER_STATS_MAX 1026 /* segments logged by --log-layer-stats (embeddings + 1024 blocks + final) */

typedef struct {
    FILE *f;         /* NULL: events are dropped (no --log, or not rank 0) */
    char path[1024];
    int err_no;      /* the first failed write's errno (0: none): said at once, the run's error at its end */
} EventLog;

/* Opens path for appending (a resumed run) or truncating (a new one); "" opens nothing. */
Status events_open(EventLog *lg, const char *path, int append, Err *err);
void events_close(EventLog *lg);
/* ST_OK, or the first write that failed ("--log PATH: ..."): the records from it on are lost. */
Status events_check(const EventLog *lg, Err *err);

/* The resolved configuration as recorded in `start` and in checkpoints (the config hash and the
 * resume check read it too). Caller frees with cJSON_Delete. */
struct cJSON *events_config_json(const TrainConfig *c);

typedef struct {
    const struct cJSON *config; /* borrowed */
    int threads;
    const char *command;        /* may be NULL */
    const char *comm;           /* comm_describe's line (grid, MPI thread level, progress thread); may be NULL */
    long long batch_seqs, batch_tokens, num_params;
    double flops_per_token, peak_flops, peak_flops_job, data_utilization;
    const double *peak_flops_by_rank; /* world entries; peak_flops_job is their sum */
    double peak_probe_flops, peak_gemm_flops; /* train/machine_peak.h */
    double gemm_check;                        /* machine_peak_speed at start (0: none, left out) */
    int world, peak_given;
    int loss_masks;             /* the training data has loss masks (SFT): step tokens = trained targets */
    const char *peak_kind;
    long resumed_from_step;
    const char *resume_requested, *resume_checkpoint, *resume_note;
    double resume_read_bytes;   /* bytes read from finding to loading the checkpoint (one pass over its data) */
    int have_plan;
    double plan_step_ms, plan_tokens_per_s, plan_mfu, plan_num_params, plan_memory_total;
    const char *plan_hardware; /* what priced the plan (RunAccounting.plan_hw) */
    size_t planned[MEM_NCAT];   /* state categories and activations/workspace; data, comm and
                                   staging are not planned here */
} StartEvent;
void ev_start(EventLog *lg, const StartEvent *e);

typedef struct {
    size_t measured[MEM_NCAT];
    size_t planned[MEM_NCAT];            /* per rank: parameters, gradients, master, moments */
    const double *by_rank[4];            /* each rank's bytes of those four categories */
    int world, dp, tp, sp, zero, match;
} MemoryEvent;
void ev_memory(EventLog *lg, const MemoryEvent *e);

typedef struct {
    long step;
    size_t measured[MEM_NCAT];
    double allocated_total, rss_above, rss_unaccounted;
    const double *allocated_by_rank, *rss_above_by_rank; /* world entries */
    int world;
} MemoryStepEvent;
void ev_memory_step(EventLog *lg, const MemoryStepEvent *e);

typedef struct {
    long step, batch;
    double loss, lr, grad_norm, grad_norm_clipped;
    const double *grad_norm_by_rank; /* world entries */
    int world, applied, fp16;
    double loss_scale, tokens, tokens_seen, tokens_per_s, mfu, elapsed_s, eta_s;
    double comm_bytes, step_ms_max, step_ms_median;
    const double *comm_bytes_by_kind; /* COMM_NKIND entries (NULL: omitted) */
    /* Pipeline (pp > 1; omitted otherwise): this rank's idle and busy time inside the schedule, the
     * measured bubble (the world's idle over its ranks' schedule time), the formula's and the one
     * simulated from the schedule with the measured op times. */
    int pp;
    double pp_idle_ms, pp_busy_ms, pp_f_ms, pp_b_ms, pp_w_ms, pp_bubble, pp_bubble_formula, pp_bubble_sim;
    const double *pp_idle_by_rank;
    /* pp entries each (NULL: omitted): every stage's mean forward, backward and weight-pass time
     * (ms per op, what bubble_simulated used at v = 1) and its number of each op in the step. */
    const double *pp_stage_ms[3], *pp_stage_ops[3];
    /* interleaved: pp_vstages (S = p·v; 0 otherwise) virtual stages' mean F times (ms per op), then
     * their S B times, then their S W times */
    const double *pp_vstage_ms;
    int pp_vstages;
    /* The gradient noise scale (NULL: not estimated): b_small (tokens), |G_small|², |G|², tr(Σ),
     * B_simple of this step, smoothed B_simple (train/noise.h). */
    const double *noise;
    const double *noise_by_replica; /* dp entries: each replica's |G_small|² */
    int dp;
    /* --log-layer-stats: per segment of the layout (embeddings, each block, the final norm), norms of
     * the step's raw gradient, of the weights before the update and of the update (nseg 0: absent). */
    int nseg;
    const double *seg_grad, *seg_weight, *seg_update;
    double ms_total, ms_data, ms_forward, ms_backward, ms_comm, ms_comm_dp, ms_comm_tp, ms_optimizer, ms_checkpoint;
    const double *ms_comm_by_kind; /* world > 1: comm's exposed waits this step per collective kind
                               (CommStats.wait_ms; their sum is ms_comm); NULL: not written */
    const double *ms_comm_by_rank; /* world > 1: each rank's exposed communication this step up to
                               the step report (world values); NULL: not written */
    double ms_tp_progress;  /* tp > 1: time in the progress calls of the overlapped tp collectives */
    double ms_dp_progress;  /* world > 1: time in the progress calls of the other kinds (ZeRO's pieces,
                               pipeline messages); < 0: not written (one process) */
    double tp_overlapped;   /* tp > 1: tp collectives started nonblocking and overlapped with GEMMs this
                               step (CommStats.tp_nonblocking); < 0: not written (tp 1) */
    double tp_overlapped_done; /* of those, the ones a progress call saw complete before their wait
                               (hidden behind the GEMM; CommStats.test_done of the tp kinds) */
    double zero_gathers_ahead; /* ZeRO 3: parameter gathers started before the hook that needs them this
                               step (the overlap's prefetch; 0 under --no-overlap); < 0: not written */
    int sophia;                 /* the run's optimizer is Sophia: time_ms.hessian and hessian{} are written */
    double ms_hessian;          /* its Hessian pass (0 on steps without one) */
    double hess_loss, hess_bytes, hess_tokens; /* the pass's sampled-label loss, collective bytes, tokens */
    int hess_skipped;
} StepEvent;
void ev_step(EventLog *lg, const StepEvent *e);

typedef struct {
    long step, batch;
    int nonfinite;
    const char *metric, *action;
    double value, median, z, tokens_seen;
} SpikeEvent;
void ev_spike(EventLog *lg, const SpikeEvent *e);

void ev_val(EventLog *lg, long step, double loss, double tokens, double ms);
void ev_stall(EventLog *lg, long step, const char *why);
void ev_peak(EventLog *lg, long step, double peak_job, double previous, double achieved);
void ev_skip(EventLog *lg, long step, long batch);
void ev_rollback(EventLog *lg, long step, long to_step, long batch, const char *checkpoint);
void ev_overflow(EventLog *lg, long step, long batch, double scale, double new_scale);
/* path NULL: an asynchronous save (path, bytes and pruning are known only to the writer). */
void ev_ckpt(EventLog *lg, long step, double ms, const char *path, double bytes, int pruned);
/* A LoRA checkpoint's save (ckpt_lora_save): mode "lora", its path. */
void ev_ckpt_lora(EventLog *lg, long step, double ms, const char *path);

/* The LoRA run's records (the table above). */
typedef struct {
    const TrainConfig *cfg;
    long long batch_seqs, batch_tokens;
    int loss_masks;
    const char *targets;
    size_t adapter_params, base_params;
    unsigned long long base_xxh3, base_local_xxh3;
    int world, dp, tp, zero;
    long resumed_from_step;
    int doc_mask, doc_eot;
    double flops_per_token;              /* layout_lora_flops_per_token at span T */
    double peak_flops, peak_flops_job;   /* this rank's peak and the sum over ranks (MFU's denominator) */
    const char *peak_kind;
    double plan_step_ms, plan_tokens_per_s, plan_mfu; /* plan_lora_step; step_ms 0: no plan */
} LoraStartEvent;
void ev_lora_start(EventLog *lg, const LoraStartEvent *e);
void ev_lora_memory(EventLog *lg, const size_t measured[MEM_NCAT], const size_t planned[MEM_NCAT], int equal);
void ev_lora_step(EventLog *lg, long step, double loss, double lr, double norm, double norm_clipped, long long tokens,
                  long long tokens_seen, double ms, double mfu);
/* planned_step_ms <= 0: no plan (its field left out) */
void ev_lora_end(EventLog *lg, long steps, double final_loss, unsigned long long base_local_xxh3_after,
                 double median_step_ms, double tokens_per_s, double planned_step_ms);
/* text NULL: the ids are logged instead (no tokenizer to decode them). */
void ev_sample(EventLog *lg, long step, const char *text, const unsigned *ids, int n);

typedef struct {
    const TrainResult *res;
    int fp16;
    double loss_scale, wall_s;
    int have_plan;
    double planned_step_ms;
    double gemm_check[2]; /* machine_peak_speed at start and at the end (0: none, left out) */
    size_t peak[MEM_NCAT];
} EndEvent;
void ev_end(EventLog *lg, const EndEvent *e);

#endif
