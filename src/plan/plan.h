/* plan.h — the training-plan calculator: pure math over a model shape, a batch, a parallel
 * layout, precisions, an optimizer, a hardware profile and a budget (issue 7, docs/plan.md).
 *
 * No I/O: plan_compute fills a PlanResult; plan_json.h builds its JSON object; cli/cmd_plan.c prints
 * the review or that object.
 * Units: bytes are plain bytes (double; the CLI prints GiB = 2^30 and GB = 10^9), times are
 * seconds, FLOPs are floating-point operations (a multiply-add is 2), bandwidths are bytes/s
 * per device in one direction. For our own GPT-2 models the parameter count and the memory of
 * each state kind come from model/layout (layout_init, layout_activations), the same functions
 * the trainer allocates from, so plan and trainer cannot drift apart.
 *
 * Dimension letters: L layers, a heads, kv KV heads, h = C channels, F MLP width, V vocabulary,
 * s = T sequence length, b = B micro-batch, k grad-accumulation steps, t tp, p pp, d dp,
 * m pipeline micro-batches, v interleaved chunks per stage. */
#ifndef ST_PLAN_PLAN_H
#define ST_PLAN_PLAN_H

#include "core/collective.h"
#include "core/mem.h"
#include "core/status.h"
#include "model/config.h"
#include "model/layout.h"

/* ---------------------------------------------------------------- model ---------------- */

typedef enum {
    PLAN_ARCH_GPT2 = 0,  /* pre-LN, LayerNorm with bias, GELU MLP, learned positions, tied head */
    PLAN_ARCH_LLAMA = 1, /* pre-RMSNorm, SwiGLU MLP, rotary positions, GQA, untied head, no bias */
} PlanArch;

/* A model shape general enough for both families. Built by plan_model_preset or
 * plan_model_from_config, or field by field. */
typedef struct {
    char name[32];         /* preset name or "custom" */
    PlanArch arch;
    int n_layer;           /* L */
    int n_head;            /* a: query heads */
    int n_kv_head;         /* kv: key/value heads (GQA); == n_head for multi-head attention */
    int d_model;           /* h = C */
    int d_ff;              /* F: MLP hidden width (4h for GPT-2; SwiGLU width for Llama) */
    int vocab;             /* V as the tokenizer sees it (unpadded) */
    int max_seq;           /* longest trained sequence (learned-position table rows for GPT-2) */
    int tied_head;         /* 1: the LM head reuses the token embedding (counted once) */
    int learned_pos;       /* 1: a learned (max_seq, h) position table; 0: rotary (no params) */
    int norm_bias;         /* 1: LayerNorm weight+bias; 0: RMSNorm weight only */
    int linear_bias;       /* 1: every Linear has a bias */
    int gated_mlp;         /* 1: SwiGLU (gate, up: h->F; down: F->h); 0: fc h->F, proj F->h */
    long long params_override; /* > 0: only the count is known (--params N); shape fields unused */
} PlanModel;

/* Fills m from a preset of model/config's one table (model_config_preset: the names train accepts,
 * model_preset_names); presets that leave vocab and max_seq get GPT-2's 50257 and 1024.
 * ST_ERR_INPUT naming --model and the known presets on an unknown name. */
Status plan_model_preset(PlanModel *m, const char *name, Err *err);

/* Our trainer's model as a PlanModel: GPT-2 (F = 4h, tied, learned positions) or Llama (RMSNorm,
 * rotary, SwiGLU of width cfg->ffn, KV heads, tied or not, no biases). */
void plan_model_from_config(PlanModel *m, const ModelConfig *cfg);

/* 1 when m is exactly a model our trainer builds (so model/layout sizes apply), and then fills
 * cfg (validated, vocab_padded derived). */
int plan_model_to_config(const PlanModel *m, ModelConfig *cfg);

/* Exact parameter count of the architecture (unpadded vocabulary, tied head counted once). For
 * our GPT-2 models it equals model_config_num_params. */
long long plan_model_num_params(const PlanModel *m);

/* ------------------------------------------------------------- hardware --------------- */

typedef struct {
    char name[32];
    double peak_fp32;      /* FLOP/s per device, dense fp32 (CUDA cores / FMA units) */
    double peak_bf16;      /* FLOP/s per device, dense bf16 (tensor cores / AVX-512 BF16) */
    double peak_fp16;      /* FLOP/s per device, dense fp16 */
    double memory;         /* bytes of device memory */
    double mem_bw;         /* bytes/s of device memory bandwidth */
    double intra_bw;       /* bytes/s per device, one direction, between devices of a node */
    double inter_bw;       /* bytes/s per device, one direction, between nodes */
    double intra_lat;      /* seconds per message inside a node (alpha) */
    double inter_lat;      /* seconds per message across nodes */
    int devices_per_node;
    double matmul_eff;     /* fraction of peak that the model's matmuls achieve */
    double storage_bw;     /* bytes/s a node writes checkpoints at */
    double backend_bytes;  /* device memory the compute backend keeps outside every category: the GPU
                              presets BACKEND_CUDA_PRIVATE_BYTES (model/backend.h: the CUDA backend's
                              cuBLASLt workspace and reduction scratch), 0 on a CPU */
    double matmul_eff_bf16; /* fraction of peak_bf16 that bf16 matmuls achieve; 0: matmul_eff (presets). A
                              measured CPU profile has its own: peak_bf16 is the machine's ceiling (the
                              trainer's MFU peak), and where bf16 GEMMs are slow (Intel without AMX)
                              they reach a smaller fraction of it than fp32 ones of peak_fp32 */
    double drop_rate;      /* dropout factors per second one device draws (the trainer's drop_factors,
                              Philox4x32-10, one block per 4 factors); 0 (the GPU presets): one fp32
                              read and write per factor at mem_bw */
} PlanHardware;

/* The cpu-zen4-2c preset's dropout factors per second (PlanHardware.drop_rate): drop_factors with
 * its apply on 2 threads, as `plan --measure-hardware` measured it on the 2-core Xeon of 2026-11-29. */
#define PLAN_CPU_DROP_RATE 6.3e8

/* Dropout factors per second on hw: its drop_rate, or (0: the GPU presets) one fp32 read and write
 * per factor at mem_bw. The plan's one source of a draw's time (--dropout, --lora-dropout). */
double plan_drop_rate(const PlanHardware *hw);

/* FLOP/s the model's matmuls run at in dtype d: its peak times its efficiency (matmul_eff_bf16 for
 * bf16 where set). The plan's one source of a GEMM's time. */
double plan_matmul_rate(const PlanHardware *hw, int dtype);

/* Presets: "A100-40GB", "A100-80GB", "H100" (SXM), "H200", "cpu-zen4-2c" (this machine:
 * 2 cores, fp32 230e9, bf16 456e9, 24 GiB, 30 GB/s). Case-insensitive. ST_ERR_INPUT naming
 * --hardware on an unknown name. Sources of each number: docs/plan.md. */
Status plan_hardware_preset(PlanHardware *hw, const char *name, Err *err);

/* A hardware profile as JSON (the fields of PlanHardware by name, SI units); `from` starts from
 * the cpu-zen4-2c preset and overrides the fields present. Written by `plan --measure-hardware`. */
struct cJSON;
struct cJSON *plan_hardware_to_json(const PlanHardware *hw);
Status plan_hardware_from_json(PlanHardware *hw, const struct cJSON *j, Err *err);

/* --------------------------------------------------------------- input ---------------- */

typedef enum { PLAN_RECOMPUTE_NONE = 0, PLAN_RECOMPUTE_SELECTIVE = 1, PLAN_RECOMPUTE_FULL = 2 } PlanRecompute;
typedef enum { PLAN_DTYPE_FP32 = 0, PLAN_DTYPE_BF16 = 1, PLAN_DTYPE_FP16 = 2 } PlanDtype;
typedef enum {
    PLAN_ACT_AUTO = 0,        /* exact for our models when the trainer can run them, else paper */
    PLAN_ACT_KORTHIKANTI = 1, /* Korthikanti et al. 2022 per-layer formulas (16-bit, dropout masks) */
    PLAN_ACT_EXACT = 2,       /* our kernels' saved floats from layout_activations (our models only) */
} PlanActMode;

/* Bytes per element of each state kind. Mixed precision bf16 in DESIGN §7: 2/2/4/4/2. */
typedef struct {
    int weight;            /* working weights used by the matmuls */
    int grad;              /* gradients */
    int master;            /* master weights kept beside the moments; 0 = none (weights are master) */
    int moment;            /* each optimizer moment */
    int act;               /* activations in the paper mode and the TP/PP messages (the exact mode counts the
                              trainer's own: fp32, with bf16 LayerNorm and GELU outputs when compute is bf16) */
    PlanDtype compute;     /* matmul dtype: picks the hardware peak */
} PlanPrecision;

/* Fills p for "fp32" (4/4/0/4/4), "bf16" or "fp16" (2/2/4/4/2: 16-bit weights, gradients and
 * activations with fp32 master and moments, as Megatron-LM and DeepSpeed train). ST_ERR_INPUT
 * naming --precision. */
Status plan_precision_preset(PlanPrecision *p, const char *name, Err *err);
/* Our trainer's precisions, for the models it builds: fp32 as the preset; bf16 and fp16 keep only a
 * 2-byte weight copy beside fp32 gradients, master and moments (layout_state_bytes), and fp32
 * activations (2/4/4/4/4; the exact activation mode counts its bf16 LayerNorm and GELU outputs). */
Status plan_precision_trainer(PlanPrecision *p, const char *name, Err *err);

typedef struct {
    PlanModel model;
    /* batch */
    int micro_batch;       /* B sequences per micro-batch per data-parallel replica */
    int seq_len;           /* T */
    int grad_accum;        /* k micro-batches per optimizer step per replica */
    int doc_mask;          /* 1: document masking (docs/doc-mask.md): attention priced at span
                              layout_doc_span_mean(T, mean_doc_len) instead of T (layout_token_flops),
                              and the trainer's per-slot document positions in the activations */
    double mean_doc_len;   /* doc_mask: mean document length in tokens (> 0); 0: T (no saving) */
    double dropout;        /* train --dropout (0: off): its factors' draws priced at hw drop_rate
                              (layout_dropout_draws), inside t_elementwise */
    double lora_dropout;   /* train --lora-dropout (0: off): the adapters' input dropout, priced by
                              plan_lora_step (3 draws per adapter input element per token) */
    /* parallel layout */
    int dp, tp, pp;
    int sp;                /* 1: Megatron sequence parallelism inside the TP group */
    int zero;              /* 0..3: ZeRO stage over the dp group */
    PlanRecompute recompute;
    int pp_microbatches;   /* m; 0 = grad_accum (a step's micro-batches fill the pipeline) */
    int interleave;        /* v model chunks per pipeline stage (1 = plain 1F1B) */
    char pp_schedule[32];  /* gpipe | 1f1b | interleaved | zb-h1; "": 1f1b (interleaved when v > 1) */
    char pp_layers[256];   /* blocks per virtual stage (pp·v counts, as the trainer's --pp-layers); "": balanced */
    int world;             /* devices available; 0 = dp*tp*pp */
    /* precision and optimizer */
    PlanPrecision prec;
    int n_moments;         /* 2 Adam family (and Muon), 1 SGD momentum or Lion, 0 plain SGD */
    int muon;              /* 1: Muon's gather buffer and Newton–Schulz scratch (layout_muon_bytes) are
                              moments too, on every rank (our layout; --optimizer muon) */
    int shampoo;           /* 1: Shampoo's buffers and block state (layout_shampoo_bytes) are moments too;
                              the figure is the most loaded dp rank's (--optimizer shampoo) */
    int shampoo_block, precond_every; /* Shampoo's block side and root interval (512, 10) */
    int hess_every;        /* Sophia: its Hessian pass (a second forward and backward of the step's
                              batch) every k steps; 0: not Sophia */
    PlanActMode act_mode;
    int threads;           /* our trainer's threads (sizes its attention scratch) */
    /* hardware */
    PlanHardware hw;
    int hw_default;          /* 1: --hardware was not given and hw is the default preset (said on the
                                review's first line and as hardware.default in the JSON) */
    int textbook;          /* 1: --accounting megatron: price every model as Megatron-LM / DeepSpeed
                              would (zero_paper states, the paper's activations, equal pipeline
                              stages), even one our trainer builds; 0: our trainer's allocation
                              where it applies */
    int overlap;           /* 1: DP/ZeRO communication overlaps compute (max), 0: it adds (sum) */
    int no_noise_scale;    /* 1: the trainer's --no-noise-scale (its two all-gathers per step not booked) */
    /* budget: at most one of tokens, flops, days > 0; none = 20 tokens per parameter */
    double budget_tokens;
    double budget_flops;
    double budget_days;
    double target_days;    /* > 0: wall time to hit; gives the MFU it requires (0: budget_days) */
    double mtbf_hours;     /* mean time between failures of the whole job (Young/Daly) */
    /* scaling law from our own runs (`plan --scaling FIT.json`, a `fit --json` output): when
     * has_fit, a third law "fit" is reported and judges over-training in place of Hoffmann's */
    int has_fit;
    double fit_E, fit_A, fit_B, fit_alpha, fit_beta;
    char fit_source[512];  /* where the fit came from (the --scaling file), for printing */
} PlanInput;

/* Defaults: micro-batch 8, seq 256, k 1, dp=tp=pp=1, no ZeRO, no recompute, fp32, AdamW (2
 * moments), cpu-zen4-2c, overlap on, MTBF 24 h. The model is left empty (n_layer 0). */
PlanInput plan_default_input(void);

/* -------------------------------------------------------------- result ---------------- */

#define PLAN_MAX_PP 64 /* pipeline ranks with per-rank figures (SCHED_MAX_P) */

/* One pipeline rank of our trainer (plan_trainer_pp): what it holds, allocates and sends. */
typedef struct {
    StageBlocks stage;       /* its chunks of blocks (layout_pp_rank_stage) */
    int blocks;              /* blocks held, all chunks */
    int has_embed, has_head; /* wte + wpe (block 0 held); lnf + the head's copy of wte (block L-1) */
    long long params;        /* elements of its tensors, unpadded, before the tp split (the virtual
                                stages' layout_pp_stage_params summed) */
    long long layout_floats; /* its flat buffer, padding included (layout_init_stage, shard_multiple dp) */
    int slots;               /* activation sets: the schedule's peak in flight on this rank */
    double bytes[MEM_NCAT];  /* allocated at start per category: parameters, gradients, master, moments
                                (layout_zero_bytes), activations, workspace (layout_run_bytes),
                                communication (the tied wte buffer); others 0 */
    double total;            /* sum of bytes[] */
    int sends_act, sends_grad; /* messages per step: activations forward, input gradients back */
    double p2p_act, p2p_grad, p2p_tied; /* bytes sent per step: Nl·C·4 per message; the tied wte's gradient */
    double p2p;              /* their sum: what comm books as "pp send" on this rank per step */
    double flops;            /* training FLOPs per token of its stages (layout_pp_stage_flops summed) */
    double chunk_flops[LAYOUT_MAX_CHUNKS]; /* each chunk's (stage.n of them) */
    double t_compute;        /* plan_compute: its matmuls and elementwise passes per step, the time its
                                schedule's ops take (0 before plan_compute prices the step) */
} PlanPpRank;

enum { PLAN_CHECK_ERROR = 2, PLAN_CHECK_WARNING = 1 };
#define PLAN_MAX_CHECKS 24
#define PLAN_MAX_SUGGEST 4

typedef struct {
    int level;             /* PLAN_CHECK_ERROR or PLAN_CHECK_WARNING */
    int input;             /* 1: the input itself is inconsistent (layout, divisibility), or (a warning)
                            * a layout the trainer refuses or that shards nothing: no suggestion has one */
    char msg[240];         /* one line naming the flags and the numbers */
} PlanCheck;

typedef struct {
    const char *name;      /* "hoffmann2022", "besiroglu2024" or "fit" (PlanInput.has_fit) */
    double E, A, B, alpha, beta;
    double budget_flops;   /* C used for the optimum: the --flops budget, else the plan's 6ND */
    double n_opt, d_opt;   /* compute-optimal parameters and tokens for C (C = 6ND) */
    double loss_opt;       /* L(n_opt, d_opt) */
    double loss_plan;      /* L(N, D) of the planned run */
    double tokens_per_param_opt; /* d_opt / n_opt */
} PlanScaling;

typedef struct {
    /* parameters */
    long long n_params;          /* exact count (model_config_num_params for our models) */
    long long n_params_embedding;/* token (+ position) embeddings (+ untied head) */
    long long n_params_layer;    /* one transformer block */
    int exact_layout;            /* 1: the model is ours and model/layout sizes are used */
    long long layout_floats;     /* our layout's buffer length (padding included), else n_params */
    double params_per_device;    /* elements one device holds before ZeRO (after TP, largest PP stage) */
    int layers_per_device;       /* L / pp */

    /* memory per device, bytes (ZeRO divides over dp as its stage says) */
    struct {
        double weights, grads, master, moments;  /* states */
        double activations;      /* saved activations of the in-flight micro-batches */
        double workspace;        /* backward scratch and logits (exact mode: layout scratch) */
        double comm;             /* gradient buckets, ZeRO-3 gathered blocks */
        double backend;          /* the backend's private memory (PlanHardware.backend_bytes): in the
                                    total, in no category (the trainer's MemStats do not see it) */
        double total;
        double device;           /* hardware memory */
        double margin;           /* device - total (negative: does not fit by -margin) */
        int fits;
        double bytes_per_param;  /* weights+grads+master+moments per parameter, unsharded */
        int trainer_states;      /* 1: weights..moments are what our trainer allocates per rank
                                    (layout_zero_bytes over its layout: our model, pp = 1, a tp that
                                    splits it); 0: the ZeRO paper's accounting, buffers in comm */
    } mem;

    /* activations, bytes per layer per micro-batch on one device */
    struct {
        int exact_used;          /* 1: totals come from layout_activations (at tp > 1: layout_run_bytes,
                                    every recompute level, --sp) */
        double korth_plain;      /* sbh(34 + 5as/h): the paper (16-bit), no parallelism, no recompute (eq. 1) */
        double korth;            /* with this plan's tp, sp, recompute and activation bytes (Table 2 row) */
        double exact_layer;      /* our kernels: layout_activations().per_layer * 4 (0 if n/a), without
                                    recompute; at tp > 1 the tp rank's (layout_activations) */
        double exact_total;      /* layout_activations().total * 4: all saved floats of a micro-batch */
        double exact_scratch;    /* layout_activations().scratch * 4 */
        double per_layer;        /* the one used (exact at tp > 1: at the plan's recompute level) */
        double inflight;         /* micro-batches whose activations a stage holds (1F1B: min(p, m)) */
    } act;

    /* batch */
    long long batch_seqs;        /* B * k * dp */
    long long batch_tokens;      /* B * T * k * dp */
    double tokens;               /* the budget in tokens */
    long long steps;             /* ceil(tokens / batch_tokens) */
    const char *budget_source;   /* "tokens", "flops", "days" or "20 tokens/param" */

    /* compute */
    struct {
        double fpt_6n;           /* 6 N FLOPs per token */
        double fpt;              /* exact model FLOPs per token, attention included (3 x forward) */
        double fpt_hw;           /* with recompute (hardware FLOPs per token) */
        double total_6nd;        /* 6 N D */
        double total;            /* fpt * D */
        double peak;             /* per-device peak of the compute dtype */
        double t_matmul;         /* seconds per step per device: model + recompute FLOPs at peak*eff */
        double t_elementwise;    /* memory-bound elementwise traffic at mem_bw, + t_dropout + t_head */
        double t_dropout;        /* --dropout's factor draws (layout_dropout_draws at hw drop_rate) */
        double t_head;           /* the LM head's softmax, loss and logit-gradient passes
                                    (layout_head_softmax_bytes at mem_bw), inside t_elementwise */
        double t_bubble;         /* pipeline idle time */
        double t_tp, t_pp;       /* exposed TP collectives (comm.tp_exposed for our trainer, else all of
                                    tp_time) and PP point-to-point */
        double t_dp;             /* DP all-reduce or ZeRO collectives (all of them) */
        double t_dp_exposed;     /* the part of t_dp no compute hides (plan_overlap_exposed): the
                                    collectives of the first block's and the embedding's gradients
                                    (ready last in the backward pass), what the others outlast
                                    their block's backward, ZeRO 1-2's parameter all-gather after the
                                    update, ZeRO 3's embedding gather before the first forward */
        double t_optimizer;      /* optimizer step, memory-bound */
        double t_hessian;        /* Sophia: its Hessian pass amortised, (compute + dp comm) / hess_every */
        double step_overlap;     /* max(compute, dp comm - exposed) + exposed + optimizer + hessian */
        double step_serial;      /* compute + dp comm + optimizer + hessian */
        double step;             /* the prediction: overlap ? step_overlap : step_serial */
        double tokens_per_s;     /* batch_tokens / step */
        double mfu;              /* fpt * tokens_per_s / (world * peak), times 1 + 1/hess_every
                                    under Sophia (its Hessian pass's model FLOPs count) */
        double hfu;              /* fpt_hw instead of fpt */
        double train_seconds;    /* steps * step */
        double target_seconds;   /* 0 if no target */
        double mfu_required;     /* MFU the target time requires (0 if none) */
    } compute;

    /* pipeline */
    int pp_exact;                /* 1: pp_rank[0..pp) hold our trainer's per-rank figures (plan_trainer_pp)
                                    and the memory above is the worst rank's */
    int pp_worst;                /* the rank whose total is the largest (the memory above) */
    char pp_note[240];           /* why the per-rank figures are absent, when they are ("" if present) */
    PlanPpRank pp_rank[PLAN_MAX_PP];
    double bubble;               /* (p-1)/(m+p-1) */
    double bubble_interleaved;   /* (p-1)/(v m + p-1) */
    int microbatches;            /* m */

    /* communication, per step per device */
    struct {
        double dp_bytes, dp_time;            /* ring all-reduce of gradients (ZeRO 0) */
        double rs_bytes, ag_bytes, zero_time;/* ZeRO reduce-scatter + all-gather(s) */
        double tp_bytes, tp_time;            /* TP all-reduces (or SP all-gather + reduce-scatter); for our
                                                trainer at tp > 1 its exact bytes and their α-β time */
        double tp_overlap_calls, tp_overlap_time; /* our trainer: PlanCommKinds' (0 otherwise) */
        double tp_exposed;                   /* our trainer: tp_time less what its overlap hides
                                                (plan_tp_exposed; = tp_time at threads > 1 inside a
                                                node, where the bytes move only at the wait) */
        int tp_exact;                        /* 1: tp_bytes, tp_time from plan_trainer_comm */
        double tp_megatron;                  /* the textbook form: 8·b·s·h·(t-1)/t bytes of act-byte
                                                elements per layer per micro-batch (+50% with full
                                                recompute), × layers × micro-batches */
        int by_kind_exact;                   /* 1: by_kind holds our trainer's step (plan_trainer_comm) */
        double by_kind[COMM_NKIND];          /* bytes one rank sends per step per collective kind
                                                (comm_kind_name), a step after the first */
        double pp_bytes, pp_time;            /* PP activations and gradients sent */
        int dp_inter, tp_inter, pp_inter;    /* 1: the group crosses nodes */
    } comm;

    /* scaling laws */
    PlanScaling scaling[3];      /* the published laws, then "fit" when the input has one */
    int nscaling;                /* 2, or 3 with a fit */
    int scaling_judge;           /* the law over-training is judged by: the fit if any, else Hoffmann */
    double tokens_per_param;     /* D / N */
    int overtrained;             /* D/N well above the judging law's optimum: inference-aware choice */

    /* checkpointing */
    struct {
        double bytes;            /* fp32 weights + master + moments */
        double write_s;          /* bytes / (storage_bw * nodes) */
        double mtbf_s;
        double interval_s;       /* Young/Daly sqrt(2 * write_s * mtbf) */
        double overhead;         /* write_s / interval + interval / (2 mtbf) */
    } ckpt;

    int nodes;
    int world;

    /* launch checklist */
    int nchecks, nerrors, nwarnings;
    PlanCheck checks[PLAN_MAX_CHECKS];

    /* the cheapest knob changes that make a non-fitting plan fit, by predicted step time */
    int nsuggest;
    char suggest[PLAN_MAX_SUGGEST][200];
    /* when no knob fits on this world: the fewest devices (the world times a power of 2, up to
     * 4096x) on which a layout of the same global batch fits, and that layout's flags; 0 / "" if
     * none does */
    long long devices_needed;
    char devices_layout[200];
} PlanResult;

/* ------------------------------------------------------------ functions --------------- */

/* Checks the input for values no plan can have (zero or negative sizes, zero stage outside 0..3,
 * precisions outside 1..8 bytes, ...): ST_ERR_INPUT with a message naming the flag. Layouts that
 * do not divide are not errors here: they are checklist errors of plan_compute. */
Status plan_validate(const PlanInput *in, Err *err);

/* The whole review: validates, then fills r. Returns ST_ERR_INPUT (and a message) only for input
 * plan_validate rejects; inconsistencies of the layout become r->checks. */
Status plan_compute(const PlanInput *in, PlanResult *r, Err *err);

/* For the trainer: the predicted step time of in on in->hw (r->compute.step, .t_*, .mfu), the
 * parameter count and the per-device memory (r->mem, r->act); skips scaling laws, knob search and
 * checkpointing. Same errors as plan_compute. */
Status plan_predict_step(const PlanInput *in, PlanResult *r, Err *err);

/* LoRA fine-tuning's step (train --lora-rank; docs/lora.md "Compute"), from the full plan of the
 * same run (full: plan_predict_step or plan_compute of in, which must be shaped and at pp 1).
 * adapter_params: the whole model's adapter parameters; adapter_local: the floats one rank's
 * optimizer updates (its tp slice, its ZeRO shard at ZeRO >= 1); zero: the LoRA run's stage. */
typedef struct {
    double fpt;            /* model FLOPs per token (layout_lora_flops_per_token) */
    double fpt_hw;         /* with recompute's forward work again */
    double t_matmul;       /* full's matmul time scaled by fpt_hw / full's fpt_hw (the same GEMM rate) */
    double t_elementwise;  /* full's: the activations stream as often (saved, read, their gradients) */
    double t_tp;           /* full's: the forward's and the input gradients' tp collectives are all there */
    double t_dp;           /* the adapters' gradient collectives over dp (ring α-β, not overlapped) */
    double t_optimizer;    /* AdamW over adapter_local floats, memory-bound (28 bytes each) */
    double t_dropout;      /* --lora-dropout's draws (inside t_elementwise): each adapter's input
                              dropped in the forward, again in the backward for A's gradient, and the
                              input gradient through the same mask; full recompute's forward once more */
    double step;           /* the sum: the LoRA loop overlaps nothing */
    double tokens_per_s;   /* the global batch's tokens / step */
    double mfu;            /* fpt · tokens_per_s / (world · peak) */
} PlanLoraStep;
/* adapter_in: the adapters' input widths summed over every adapter of every block on one rank
 * (lora_input_width), what --lora-dropout draws per token. */
Status plan_lora_step(const PlanInput *in, const PlanResult *full, double adapter_params, double adapter_local,
                      double adapter_in, int zero, PlanLoraStep *out, Err *err);

/* ---------------------------------------------------------- the formulas -------------- */

/* Korthikanti et al. 2022 activation bytes per transformer layer for one micro-batch (s, b, h,
 * a heads, tp t, sp, recompute) with e bytes per activation element: their Table 2 (GPT-3 block,
 * 1-byte dropout masks). f = F/h and r = kv/a generalise the MLP and GQA terms; with e = 2, f = 4,
 * r = 1, ungated, it is exactly the paper's formula (16-bit activations). */
double plan_act_korthikanti(double s, double b, double h, double a, double f, double r, int gated, int t, int sp,
                            PlanRecompute rc, double e);

/* ---------------------------------------------------------- our trainer's collectives ------- */

#define PLAN_TP_OVL_MAX 16 /* PlanCommKinds.tp_ovl's groups */

/* One optimizer step of our trainer (train/train.c) as its communication sees it. */
typedef struct {
    int B, T, k;             /* micro-batch, sequence length, micro-batches per step */
    int dp, tp, sp, zero;    /* grid (world = dp·tp, tp fastest) and ZeRO stage over the dp group */
    int recompute;           /* Recompute level (model/layout.h) */
    int precision;           /* 0 fp32, 1 bf16, 2 fp16 (bf16 gathers its LayerNorm outputs in 2 bytes) */
    int first_step;          /* 1: the run's first step, which also gathers the memory record */
    int noise;               /* 1: the gradient noise scale is estimated (plan_noise_scale_on) */
} PlanTrainerStep;

/* 1 when our trainer estimates the gradient noise scale (train/noise.h): it needs a batch smaller
 * than the step's inside it (dp >= 2 or k >= 2 micro-batches) and the gradient whole on the stage
 * that computed it (pp 1), unless off (--no-noise-scale). The trainer and plan_trainer_comm both ask. */
int plan_noise_scale_on(int dp, int pp, int k, int off);

typedef struct {
    double bytes[COMM_NKIND]; /* bytes one rank sends per step: comm_ring_bytes of each call, summed */
    double calls[COMM_NKIND]; /* collectives started per step (tp ones only at tp > 1, as comm.c) */
    double tp_time;           /* α-β time of the tp collectives per step: plan_ring_allreduce (all-reduce)
                                 or plan_ring_half (all-gather, reduce-scatter) of each call's buffer */
    double tp_overlap_calls;  /* of those, the ones the trainer starts nonblocking and overlaps with an
                                 independent GEMM (issue 28; the step record's tp_overlapped): per block
                                 and micro-batch the two column-parallel input-gradient sums, the
                                 row-parallel layers' forward sums in layout_tp_row_chunks pieces each,
                                 and under --sp the two forward all-gathers (and the recomputed
                                 forward's, with its chunked sums), the two backward re-gathers, the
                                 two row-parallel output-gradient gathers and the second LayerNorm's
                                 parameter-gradient sum; none in fp16 */
    double tp_overlap_time;   /* their α-β time: what the overlap can hide at most (it hides all of it
                                 where each GEMM outlasts its collective) */
    int tp_novl;              /* groups in tp_ovl */
    struct {
        double calls;         /* collectives of the group per step */
        double x;             /* α-β time of one */
        double flops;         /* the GEMM beside one (gpt.c overlap_run's job), in FLOPs */
        double bytes;         /* the elementwise work beside one (a row chunk's tail), in bytes of
                                 memory traffic; a group with neither is exposed */
    } tp_ovl[PLAN_TP_OVL_MAX];/* the overlapped calls by what runs beside them (Σ calls·x = tp_overlap_time) */
} PlanCommKinds;

/* What every rank of our trainer sends in one optimizer step (a step without a checkpoint or a
 * validation pass), per collective kind, call by call as src/model/gpt.c, src/parallel/parallel.c
 * and src/train/train.c issue them and comm.c books them (docs/plan.md lists the calls):
 *   tp group   per micro-batch: the embedding's and the head input's sums, two per block forward and
 *              two backward (all-reduces; reduce-scatters under --sp), two more per block under full
 *              recompute; under --sp the LayerNorm outputs' all-gathers (forward, backward and full
 *              recompute; 2-byte elements under bf16), the residual gradients', the final LayerNorm's
 *              and the embedding gradient's all-gathers, and an all-reduce of 2C per LayerNorm; the
 *              vocabulary-parallel loss: per head chunk of m rows an all-reduce of m and one of 2m;
 *   dp group   ZeRO 0: the gradient all-reduce per segment in buckets of LAYOUT_BUCKET_FLOATS;
 *              1: a reduce-scatter per segment, 2-3: per segment and micro-batch; 1-2: the parameter
 *              all-gather per segment; 3: the segment gathers of the two-slot prefetch; stages 1-3
 *              split each reduce-scatter and all-gather into pieces of layout_dp_piece_floats per
 *              rank (a call each; the bytes are the segment's);
 *   world      the scalar collectives of the step (token count, loss, norm, per-rank norms, times and comm;
 *              the first step adds the memory record's two; the noise scale two more).
 * bw_tp, lat_tp: the tp group's link for tp_time. ST_ERR_INPUT when the trainer would refuse the
 * step (tp does not split cfg; --sp rows not divisible by tp), ST_ERR_RUNTIME out of memory. */
Status plan_trainer_comm(const ModelConfig *cfg, const PlanTrainerStep *s, double bw_tp, double lat_tp,
                         PlanCommKinds *out, Err *err);

/* One step of our trainer's pipeline (train.c setup_pipeline, parallel/pp.c, parallel.c's tied wte). */
typedef struct {
    int B, T, m;             /* micro-batch, sequence length, pipeline micro-batches (= --grad-accum) */
    int dp, tp, sp, zero;    /* the grid around the pipeline; ZeRO 0 or 1 (the trainer refuses 2-3 with pp) */
    int pp, v;               /* pipeline ranks, model chunks per rank (--interleave) */
    const char *schedule;    /* --pp-schedule; NULL or "": 1f1b, interleaved when v > 1 */
    const char *layers;      /* --pp-layers over the pp·v virtual stages; NULL or "": balanced by FLOPs */
    int recompute;           /* Recompute level (model/layout.h) */
    int precision;           /* 0 fp32, 1 bf16, 2 fp16 */
    int n_moments, threads;
} PlanTrainerPipe;

/* Each pipeline rank r < pp of our trainer (out[pp]), computed by the functions the trainer
 * allocates with: the schedule (sched_build, and sched_simulate's peak_inflight[r] = the rank's
 * activation slots), the split of the L blocks into pp·v virtual stages (layout_pp_split), the
 * rank's chunks (layout_pp_rank_stage), its layout (layout_init_stage, tp rank 0's slice: every tp
 * rank's has the same size; shard_multiple = dp), its states (layout_zero_bytes), its activations
 * and workspace (layout_run_bytes with layout_act_stage(slots)), its tied wte buffer
 * (min(layout_pp_tied_floats, LAYOUT_BUCKET_FLOATS) floats) and what it sends per step:
 *   activations  m·(v − [r = pp−1]) messages of Nl·C floats (every forward but the last virtual stage's)
 *   gradients    m·(v − [r = 0]) messages of Nl·C floats (every backward but virtual stage 0's)
 *   tied wte     the local wte gradient, vocab_local·C floats, on ranks 0 and pp−1 (ZeRO 0-1)
 * (Nl = B·T, or B·T/tp under --sp). Not counted: the pool of gradient send buffers (MEM_COMM) that
 * pp.c grows while sends are in flight — how many depends on timing; each is Nl·C floats, and rank 0
 * at v = 1 sends no gradients, so has none. ST_ERR_INPUT (one line naming the flag) when the trainer
 * would refuse: tp that does not split the model, --sp rows not divisible, ZeRO 2-3, a schedule
 * that cannot be built or deadlocks, a split that does not fit (--pp-layers, pp·v > L), pp > PLAN_MAX_PP. */
Status plan_trainer_pp(const ModelConfig *cfg, const PlanTrainerPipe *s, PlanPpRank out[], Err *err);

/* The tp time a step cannot hide (docs/plan.md "Overlap"): ck->tp_time less, for each overlapped
 * group of ck->tp_ovl, calls · min(x, flops / flops_per_s + bytes / mem_bw): each collective is
 * hidden up to the time of the work the trainer runs beside it (gpt.c overlap_run: a GEMM, or a row
 * chunk's elementwise tail), the rule plan_overlap_exposed applies to the dp collectives behind the
 * backward. flops_per_s: one rank's matmul rate (peak x efficiency), mem_bw its memory bandwidth;
 * flops_per_s <= 0: nothing hidden (the bytes do not move beside the work). */
double plan_tp_exposed(const PlanCommKinds *ck, double flops_per_s, double mem_bw);

/* Pipeline bubble fraction (p-1)/(v m + p-1); 0 when p == 1. */
double plan_bubble(int p, int m, int v);

/* Ring all-reduce of S bytes over n ranks: 2(n-1)/n S/bw + 2(n-1) lat; 0 when n <= 1. */
double plan_ring_allreduce(double S, int n, double bw, double lat);
/* Ring reduce-scatter or all-gather: (n-1)/n S/bw + (n-1) lat. */
double plan_ring_half(double S, int n, double bw, double lat);

/* The exposed part of the per-block gradient collectives overlapped with the backward pass, on one
 * link that carries them in the order they become ready (docs/plan.md "Overlap"): nblocks blocks'
 * collectives of x_block seconds each become ready t_block apart (each block's backward), the
 * first block's last, when only the embedding's lookup gradient is left to compute (~0), and
 * then the embedding's of x_last. The first block's and the embedding's collectives have nothing
 * left to run behind; each of the other nblocks-1 adds what its transfer outlasts a block's
 * backward: x_last + x_block + (nblocks-1)·max(0, x_block - t_block). nblocks < 1: x_last. */
double plan_overlap_exposed(int nblocks, double x_block, double t_block, double x_last);

/* Chinchilla parametric fit L(N, D) = E + A/N^alpha + B/D^beta, and the compute-optimal
 * allocation for C = 6 N D: N = G (C/6)^(beta/(alpha+beta)), D = (C/6)^(alpha/(alpha+beta)) / G,
 * G = (alpha A / (beta B))^(1/(alpha+beta)). fit 0: Hoffmann 2022, 1: Besiroglu 2024. */
void plan_scaling_fit(PlanScaling *s, int fit);
double plan_scaling_loss(const PlanScaling *s, double N, double D);
void plan_scaling_optimum(const PlanScaling *s, double C, double *N, double *D);

/* Young/Daly optimal checkpoint interval sqrt(2 delta M) for write time delta and MTBF M. */
double plan_young_daly(double write_s, double mtbf_s);

/* Names for printing. */
const char *plan_recompute_name(PlanRecompute r);
const char *plan_dtype_name(PlanDtype d);
/* Parses "none|selective|full"; ST_ERR_INPUT naming --recompute. */
Status plan_parse_recompute(const char *s, PlanRecompute *r, Err *err);

#endif
