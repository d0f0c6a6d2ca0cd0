/* plan.c — the training-plan calculator (see plan.h; the math and its sources: docs/plan.md).
 *
 * Contents: model presets and parameter counts · hardware and precision presets · the formulas
 * (activations, bubble, collectives, scaling laws, Young/Daly) · the review (plan_core) ·
 * the knob search for plans that do not fit. */
#include "plan/plan.h"

#include <cjson/cJSON.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "model/backend.h"
#include "model/layout.h"
#include "parallel/schedule.h"

/* ================================================================ model ============== */

Status plan_model_preset(PlanModel *m, const char *name, Err *err) {
    /* One preset table for train and plan (model_config_preset): a name one accepts, the other does. */
    ModelConfig cfg = {0};
    cfg.vocab = 50257, cfg.max_seq = 1024; /* GPT-2's, for the presets that leave them */
    Status st = model_config_preset(&cfg, name, err);
    if (st != ST_OK) return st;
    plan_model_from_config(m, &cfg);
    snprintf(m->name, sizeof m->name, "%s", name);
    return ST_OK;
}

void plan_model_from_config(PlanModel *m, const ModelConfig *cfg) {
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "custom");
    if (cfg->arch == ARCH_LLAMA) {
        m->arch = PLAN_ARCH_LLAMA;
        m->n_layer = cfg->n_layer, m->n_head = cfg->n_head;
        m->n_kv_head = cfg->n_kv_head ? cfg->n_kv_head : cfg->n_head;
        m->d_model = cfg->n_embd, m->d_ff = cfg->ffn;
        m->vocab = cfg->vocab, m->max_seq = cfg->max_seq;
        m->tied_head = !cfg->untied, m->learned_pos = 0, m->norm_bias = 0, m->linear_bias = 0, m->gated_mlp = 1;
        if (m->d_ff == 0) { /* not validated yet: the default width */
            ModelConfig c = *cfg;
            Err e;
            if (model_config_validate(&c, &e) == ST_OK) m->d_ff = c.ffn;
        }
        return;
    }
    m->arch = PLAN_ARCH_GPT2;
    m->n_layer = cfg->n_layer, m->n_head = cfg->n_head, m->n_kv_head = cfg->n_head;
    m->d_model = cfg->n_embd, m->d_ff = 4 * cfg->n_embd;
    m->vocab = cfg->vocab, m->max_seq = cfg->max_seq;
    m->tied_head = 1, m->learned_pos = 1, m->norm_bias = 1, m->linear_bias = 1, m->gated_mlp = 0;
}

int plan_model_to_config(const PlanModel *m, ModelConfig *cfg) {
    if (m->params_override > 0) return 0;
    if (m->arch == PLAN_ARCH_LLAMA) { /* our Llama: RMSNorm, rotary, SwiGLU, no biases */
        if (m->learned_pos || m->norm_bias || m->linear_bias || !m->gated_mlp) return 0;
        ModelConfig c = {0};
        c.arch = ARCH_LLAMA;
        c.n_layer = m->n_layer, c.n_head = m->n_head, c.n_kv_head = m->n_kv_head, c.n_embd = m->d_model;
        c.ffn = m->d_ff, c.untied = !m->tied_head, c.vocab = m->vocab, c.max_seq = m->max_seq;
        Err e;
        if (model_config_validate(&c, &e) != ST_OK) return 0;
        *cfg = c;
        return 1;
    }
    if (m->arch != PLAN_ARCH_GPT2) return 0;
    if (m->n_kv_head != m->n_head || m->d_ff != 4 * m->d_model || !m->tied_head || !m->learned_pos ||
        !m->norm_bias || !m->linear_bias || m->gated_mlp)
        return 0;
    ModelConfig c = {0};
    c.n_layer = m->n_layer, c.n_head = m->n_head, c.n_embd = m->d_model;
    c.vocab = m->vocab, c.max_seq = m->max_seq;
    Err e;
    if (model_config_validate(&c, &e) != ST_OK) return 0;
    *cfg = c;
    return 1;
}

/* Parameter counts of one block, split by how tensor parallelism treats them. */
typedef struct {
    double mat;      /* weight matrices: split over tp */
    double colbias;  /* biases of column-parallel linears (qkv, fc / gate+up): split over tp */
    double rowbias;  /* biases of row-parallel linears (attention out, mlp down): replicated */
    double norms;    /* the two norms' weights (and biases): replicated */
} BlockCount;

static BlockCount block_count(const PlanModel *m) {
    double h = m->d_model, F = m->d_ff, hs = (double)m->d_model / m->n_head;
    double kvdim = hs * m->n_kv_head;
    BlockCount b;
    b.mat = h * h + 2 * h * kvdim + h * h + (m->gated_mlp ? 3 : 2) * h * F;
    b.colbias = m->linear_bias ? h + 2 * kvdim + (m->gated_mlp ? 2 * F : F) : 0;
    b.rowbias = m->linear_bias ? 2 * h : 0;
    b.norms = 2 * h * (m->norm_bias ? 2 : 1);
    return b;
}

long long plan_model_num_params(const PlanModel *m) {
    if (m->params_override > 0) return m->params_override;
    long long h = m->d_model, V = m->vocab, L = m->n_layer;
    long long hs = h / m->n_head, kvdim = hs * m->n_kv_head, F = m->d_ff;
    long long layer = h * h + 2 * h * kvdim + h * h + (m->gated_mlp ? 3 : 2) * h * F + 2 * h * (m->norm_bias ? 2 : 1);
    if (m->linear_bias) layer += h + 2 * kvdim + (m->gated_mlp ? 2 * F : F) + 2 * h;
    long long emb = V * h + (m->learned_pos ? (long long)m->max_seq * h : 0);
    long long head = m->tied_head ? 0 : V * h;
    return emb + L * layer + head + h * (m->norm_bias ? 2 : 1);
}

/* ============================================================ presets ================ */

Status plan_hardware_preset(PlanHardware *hw, const char *name, Err *err) {
    /* Dense peaks and bandwidths from the vendors' data sheets (docs/plan.md lists them);
     * interconnect per device and direction: NVLink total / 2; one 200 (HDR) or 400 (NDR) Gb/s
     * NIC per GPU. Latencies and matmul efficiency are planning assumptions. */
    static const PlanHardware P[] = {
        {"A100-40GB", 19.5e12, 312e12, 312e12, 40.0 * 1073741824.0, 1.555e12, 300e9, 25e9, 5e-6, 10e-6, 8, 0.70, 2e9},
        {"A100-80GB", 19.5e12, 312e12, 312e12, 80.0 * 1073741824.0, 2.039e12, 300e9, 25e9, 5e-6, 10e-6, 8, 0.70, 2e9},
        {"H100", 67e12, 989e12, 989e12, 80.0 * 1073741824.0, 3.35e12, 450e9, 50e9, 5e-6, 10e-6, 8, 0.70, 4e9},
        {"H200", 67e12, 989e12, 989e12, 141e9, 4.8e12, 450e9, 50e9, 5e-6, 10e-6, 8, 0.70, 4e9},
        /* This machine (2 Zen 4 cores): FMA peaks measured by core/peak (fp32) and the AVX-512
         * BF16 dot product (2x); no native fp16 FMA, so fp16 runs at the fp32 rate. */
        {"cpu-zen4-2c", 230e9, 456e9, 230e9, 24.0 * 1073741824.0, 30e9, 10e9, 1.25e9, 1e-6, 30e-6, 1, 0.70, 0.5e9},
    };
    for (size_t i = 0; i < sizeof P / sizeof P[0]; i++) {
        if (strcasecmp(name, P[i].name) == 0) {
            *hw = P[i];
            /* a GPU runs our CUDA backend, which holds its workspace besides the layout's bytes */
            hw->backend_bytes = strncasecmp(name, "cpu", 3) ? (double)BACKEND_CUDA_PRIVATE_BYTES : 0.0;
            /* dropout factors per second: on the CPU the trainer's drop_factors on 2 threads as
             * measured on the 2-core Xeon (2026-11-29; Zen 4 not measured); a GPU's 0: one fp32
             * read and write per factor at mem_bw */
            hw->drop_rate = strncasecmp(name, "cpu", 3) ? 0.0 : PLAN_CPU_DROP_RATE;
            return ST_OK;
        }
    }
    return err_set(err, ST_ERR_INPUT,
                   "--hardware: expected a preset (A100-40GB, A100-80GB, H100, H200, cpu-zen4-2c), found '%s'", name);
}

Status plan_precision_preset(PlanPrecision *p, const char *name, Err *err) {
    if (!strcmp(name, "fp32")) {
        *p = (PlanPrecision){4, 4, 0, 4, 4, PLAN_DTYPE_FP32};
        return ST_OK;
    }
    if (!strcmp(name, "bf16") || !strcmp(name, "fp16")) {
        /* DESIGN §7: 16-bit weights, activations and gradients, fp32 master weights and moments. */
        *p = (PlanPrecision){2, 2, 4, 4, 2, name[0] == 'b' ? PLAN_DTYPE_BF16 : PLAN_DTYPE_FP16};
        return ST_OK;
    }
    return err_set(err, ST_ERR_INPUT, "--precision: expected fp32, bf16 or fp16, found '%s'", name);
}

Status plan_precision_trainer(PlanPrecision *p, const char *name, Err *err) {
    Status st = plan_precision_preset(p, name, err);
    if (st != ST_OK) return st;
    StateBytes b = layout_state_bytes(p->compute == PLAN_DTYPE_FP32 ? 0 : 1);
    /* Only the weights have a 2-byte copy; activations are fp32 but for the bf16 LayerNorm and GELU
     * outputs, which the exact activation mode counts. */
    p->weight = b.weight, p->grad = b.grad, p->master = b.master, p->moment = b.moment, p->act = 4;
    return ST_OK;
}

const char *plan_recompute_name(PlanRecompute r) {
    return r == PLAN_RECOMPUTE_FULL ? "full" : r == PLAN_RECOMPUTE_SELECTIVE ? "selective" : "none";
}

const char *plan_dtype_name(PlanDtype d) { return d == PLAN_DTYPE_BF16 ? "bf16" : d == PLAN_DTYPE_FP16 ? "fp16" : "fp32"; }

Status plan_parse_recompute(const char *s, PlanRecompute *r, Err *err) {
    if (!strcmp(s, "none")) *r = PLAN_RECOMPUTE_NONE;
    else if (!strcmp(s, "selective")) *r = PLAN_RECOMPUTE_SELECTIVE;
    else if (!strcmp(s, "full")) *r = PLAN_RECOMPUTE_FULL;
    else return err_set(err, ST_ERR_INPUT, "--recompute: expected none, selective or full, found '%s'", s);
    return ST_OK;
}

PlanInput plan_default_input(void) {
    PlanInput in;
    memset(&in, 0, sizeof in);
    in.micro_batch = 8, in.seq_len = 256, in.grad_accum = 1;
    in.dp = in.tp = in.pp = 1;
    in.interleave = 1;
    in.prec = (PlanPrecision){4, 4, 0, 4, 4, PLAN_DTYPE_FP32};
    in.n_moments = 2;
    in.shampoo_block = 512, in.precond_every = 10;
    in.threads = 2;
    plan_hardware_preset(&in.hw, "cpu-zen4-2c", NULL);
    in.overlap = 1;
    in.mtbf_hours = 24;
    return in;
}

/* =========================================================== formulas ================ */

double plan_act_korthikanti(double s, double b, double h, double a, double f, double r, int gated, int t, int sp,
                            PlanRecompute rc, double e) {
    double sbh = s * b * h;
    /* Korthikanti et al. 2022 §4.1 counts e = 2-byte activations and 1-byte dropout masks; here an
     * activation element takes e bytes. Outside the TP region (replicated unless sequence parallel):
     * two LayerNorm inputs, the QKV input and the MLP input (4 elements of sbh), two dropout masks. */
    double replicated = (4.0 * e + 2.0) * sbh;
    /* Inside the TP region: Q, K and V (K and V scaled by kv/a), the attention-out projection input;
     * MLP: GELU input and output, sbF each (SwiGLU: gate, up and product). */
    double split = ((2.0 + 2.0 * r) + (gated ? 3.0 : 2.0) * f) * e * sbh;
    /* Attention core: softmax output and dropout output (as²b elements each), the dropout mask. */
    double core = (2.0 * e + 1.0) * a * s * s * b;
    double rep_div = sp ? t : 1;
    switch (rc) {
    case PLAN_RECOMPUTE_FULL: return e * sbh / rep_div; /* §4.3: only each layer's input */
    case PLAN_RECOMPUTE_SELECTIVE: return replicated / rep_div + split / t;  /* §5: core recomputed */
    default: return replicated / rep_div + split / t + core / t;
    }
}

/* ---- our trainer's collectives (plan_trainer_comm) ---- */

/* Books `times` calls of kind k on a buffer of `total` bytes over p ranks, as comm.c does: the
 * ring formula per call (integer bytes), and for the tp kinds their α-β time. */
typedef struct {
    PlanCommKinds *o;
    double bw, lat; /* the tp group's link */
} CommBook;

static void book(CommBook *b, CommKind k, uint64_t total, int p, double times) {
    b->o->bytes[k] += times * (double)comm_ring_bytes(k, total, p);
    b->o->calls[k] += times;
    if (k == COMM_TP_ALLREDUCE) b->o->tp_time += times * plan_ring_allreduce((double)total, p, b->bw, b->lat);
    else if (k == COMM_TP_ALLGATHER || k == COMM_TP_REDUCE_SCATTER)
        b->o->tp_time += times * plan_ring_half((double)total, p, b->bw, b->lat);
}

/* Books `times` reduce-scatters or all-gathers of a segment's dp blocks of `blk` floats as zero.c
 * runs them: in pieces of layout_dp_piece_floats per rank, each booked as the collective of its dp
 * parts (so the bytes are the whole segment's, and the calls the pieces'). */
static void book_pieces(CommBook *b, CommKind k, uint64_t blk, int dp, double times) {
    uint64_t q = layout_dp_piece_floats(LAYOUT_BUCKET_FLOATS, dp, (size_t)blk);
    if (q == 0) return;
    uint64_t full = blk / q, rest = blk % q;
    if (full) book(b, k, q * (uint64_t)dp * 4, dp, times * (double)full);
    if (rest) book(b, k, rest * (uint64_t)dp * 4, dp, times);
}

/* One group of overlapped tp collectives (PlanCommKinds.tp_ovl): `calls` of x seconds each, `flops`
 * of GEMM beside each; counted into tp_overlap_calls and tp_overlap_time. */
static void tp_ovl(PlanCommKinds *o, double calls, double x, double flops, double bytes) {
    if (calls <= 0) return;
    o->tp_overlap_calls += calls;
    o->tp_overlap_time += calls * x;
    if (o->tp_novl < PLAN_TP_OVL_MAX) {
        o->tp_ovl[o->tp_novl].calls = calls, o->tp_ovl[o->tp_novl].x = x;
        o->tp_ovl[o->tp_novl].flops = flops, o->tp_ovl[o->tp_novl].bytes = bytes;
        o->tp_novl++;
    }
}

double plan_tp_exposed(const PlanCommKinds *ck, double flops_per_s, double mem_bw) {
    double hidden = 0;
    for (int i = 0; i < ck->tp_novl && flops_per_s > 0; i++) {
        double g = ck->tp_ovl[i].flops / flops_per_s + (mem_bw > 0 ? ck->tp_ovl[i].bytes / mem_bw : 0);
        hidden += ck->tp_ovl[i].calls * (ck->tp_ovl[i].x < g ? ck->tp_ovl[i].x : g);
    }
    double e = ck->tp_time - hidden;
    return e > 0 ? e : 0;
}

Status plan_trainer_comm(const ModelConfig *cfg, const PlanTrainerStep *s, double bw_tp, double lat_tp,
                         PlanCommKinds *out, Err *err) {
    memset(out, 0, sizeof *out);
    int t = s->tp < 1 ? 1 : s->tp, dp = s->dp < 1 ? 1 : s->dp, L = cfg->n_layer, world = dp * t;
    Status st = layout_tp_check(cfg, t, err);
    if (st != ST_OK) return st;
    uint64_t N = (uint64_t)s->B * (uint64_t)s->T, C = (uint64_t)cfg->n_embd;
    int sp = s->sp && t > 1;
    if (sp && N % (uint64_t)t)
        return err_set(err, ST_ERR_INPUT, "--sp: expected --micro-batch x --seq-len = %llu divisible by --tp %d",
                       (unsigned long long)N, t);
    CommBook b = {out, bw_tp, lat_tp};
    double k = s->k, Lf = L, rerun = s->recompute == RECOMPUTE_FULL ? Lf : 0; /* blocks run forward again */
    uint64_t NC4 = N * C * 4; /* the (N, C) fp32 buffer every tp collective of a block works on */
    /* The block forward's two row-parallel sums (and the recomputed forward's): whole, or where the
     * trainer overlaps them (gpt.c tp_overlap: not in fp16) in layout_tp_row_chunks pieces of the
     * rows held, chunk c's sum over its m_c rows of every rank's block: m_c·C·4 bytes per rank block. */
    int rowpar_chunked = s->precision != 2;
    int rows = (int)(sp ? N / (uint64_t)t : N), nrc = rowpar_chunked ? layout_tp_row_chunks(rows) : 1;
    double rowpar = k * 2 * (Lf + rerun);
    if (t > 1) {
        CommKind rk = sp ? COMM_TP_REDUCE_SCATTER : COMM_TP_ALLREDUCE;
        for (int c = 0; c < nrc; c++) {
            uint64_t m = (uint64_t)(rowpar_chunked ? layout_tp_row_start(rows, c + 1) - layout_tp_row_start(rows, c)
                                                   : rows);
            uint64_t bytes = m * C * 4 * (sp ? (uint64_t)t : 1);
            book(&b, rk, bytes, t, rowpar);
        }
        if (!sp) {
            /* Embedding, head input, 2 per block backward (the forward's sums above). */
            book(&b, COMM_TP_ALLREDUCE, NC4, t, k * (2 + 2 * Lf));
        } else {
            /* The LayerNorm outputs are gathered in their storage type: bf16 as half as many floats. */
            uint64_t ln = s->precision == 1 ? N * C * 2 : NC4;
            book(&b, COMM_TP_REDUCE_SCATTER, NC4, t, k * (2 + 2 * Lf)); /* embedding, head input, backward */
            book(&b, COMM_TP_ALLGATHER, ln, t, k * (4 * Lf + 2 * rerun)); /* forward and backward's re-gather */
            book(&b, COMM_TP_ALLGATHER, NC4, t, k * (2 + 2 * Lf)); /* lnf, residual and embedding gradients */
            uint64_t norm_params = cfg->arch == ARCH_LLAMA ? C : 2 * C; /* RMSNorm: weight; LayerNorm: + bias */
            book(&b, COMM_TP_ALLREDUCE, norm_params * 4, t, k * (2 * Lf + 1)); /* the norms' parameter gradients */
        }
        /* What the trainer overlaps (gpt.c tp_overlap: not in fp16): the column-parallel layers'
         * input-gradient sums (2 per block backward), under --sp their LayerNorm outputs' gathers
         * (2 per block forward, recomputed forward included, and 2 backward), the row-parallel
         * layers' output-gradient gathers and one LayerNorm gradient sum per block, and the
         * row-parallel layers' chunked sums above. */
        if (rowpar_chunked) {
            /* Grouped by what runs beside them (PlanCommKinds.tp_ovl, priced by plan_tp_exposed):
             * the GEMM's FLOPs on this rank. Per block: qkv's output width (C + 2·KV·hd)/t, the
             * MLP's first layer F/t (SwiGLU's gate and up: 2F/t), the row-parallel layers' input
             * widths C/t (attention projection) and F/t (down projection). */
            double Nd = (double)N, Cd = (double)C, Nl = sp ? Nd / t : Nd;
            double hd = Cd / cfg->n_head, kv = cfg->n_kv_head > 0 ? cfg->n_kv_head : cfg->n_head;
            double F = cfg->ffn > 0 ? cfg->ffn : 4.0 * Cd;
            double oc[2] = {(Cd + 2.0 * kv * hd) / t, (cfg->arch == ARCH_LLAMA ? 2.0 * F : F) / t}; /* qkv, fc */
            double kin[2] = {Cd / t, F / t};                                                         /* attproj, fcproj */
            double x_sum = sp ? plan_ring_half((double)NC4, t, bw_tp, lat_tp) : plan_ring_allreduce((double)NC4, t, bw_tp, lat_tp);
            for (int l = 0; l < 2; l++) {
                /* colpar_backward: the input gradient's sum (reduce-scatter under --sp) beside dW. */
                tp_ovl(out, k * Lf, x_sum, 2.0 * Nd * Cd * oc[l], 0);
                if (!sp) continue;
                uint64_t ln = s->precision == 1 ? N * C * 2 : NC4;
                double x_ln = plan_ring_half((double)ln, t, bw_tp, lat_tp);
                /* sp_colpar_forward: the pre-norm output's gather beside the own rows' GEMM (every
                 * forward, the recomputed one included); colpar_backward: its re-gather beside the
                 * input-gradient GEMM over all N rows; sp_rowpar_backward: the output gradient's
                 * gather beside the own rows' input-gradient GEMM. */
                tp_ovl(out, k * (Lf + rerun), x_ln, 2.0 * Nl * Cd * oc[l], 0);
                tp_ovl(out, k * Lf, x_ln, 2.0 * Nd * Cd * oc[l], 0);
                tp_ovl(out, k * Lf, plan_ring_half((double)NC4, t, bw_tp, lat_tp), 2.0 * Nl * kin[l] * Cd, 0);
            }
            /* rowpar_forward: chunk c's sum beside chunk c+1's GEMM (its rows of every rank block
             * under --sp); the last chunk's beside the previous chunk's tail on the rows held, an
             * elementwise pass over its m rows: after the attention bias, residual and the second
             * LayerNorm (6 passes of m·C floats: bias read and write, residual inputs read, sum and
             * normalized output written), after the MLP bias and residual (5). */
            for (int l = 0; l < 2; l++)
                for (int c = 0; c < nrc; c++) {
                    uint64_t m = (uint64_t)(layout_tp_row_start(rows, c + 1) - layout_tp_row_start(rows, c));
                    uint64_t bytes = m * C * 4 * (sp ? (uint64_t)t : 1);
                    double x = sp ? plan_ring_half((double)bytes, t, bw_tp, lat_tp) : plan_ring_allreduce((double)bytes, t, bw_tp, lat_tp);
                    double m1 = c + 1 < nrc ? layout_tp_row_start(rows, c + 2) - layout_tp_row_start(rows, c + 1) : 0;
                    double m0 = c > 0 ? layout_tp_row_start(rows, c) - layout_tp_row_start(rows, c - 1) : 0;
                    double tail = c + 1 == nrc && c > 0 ? (l == 0 ? 6.0 : 5.0) * m0 * Cd * 4 : 0;
                    tp_ovl(out, k * (Lf + rerun), x, 2.0 * m1 * (sp ? t : 1) * kin[l] * Cd, tail);
                }
            /* --sp: the second LayerNorm's parameter-gradient sum (1 per block backward): priced
             * exposed (what runs beside it is not modelled). */
            if (sp) tp_ovl(out, k * Lf, plan_ring_allreduce((double)((cfg->arch == ARCH_LLAMA ? C : 2 * C) * 4), t, bw_tp, lat_tp), 0, 0);
        }
        /* The vocabulary-parallel loss: row max (m floats) and the two sums (2m) per head chunk. */
        uint64_t chunk = (uint64_t)layout_head_chunk_rows(cfg, s->B, s->T);
        for (uint64_t r0 = 0; r0 < N; r0 += chunk) {
            uint64_t m = N - r0 < chunk ? N - r0 : chunk;
            book(&b, COMM_TP_ALLREDUCE, m * 4, t, k);
            book(&b, COMM_TP_ALLREDUCE, 2 * m * 4, t, k);
        }
    }
    /* The dp group: segments of the tp slice's layout, split over dp (shard_multiple = dp). */
    ParamLayout pl;
    if (layout_init_tp(&pl, cfg, dp, t, 0) != 0) return err_set(err, ST_ERR_RUNTIME, "out of memory building the layout");
    for (int g = 0; g < pl.nseg; g++) {
        uint64_t len = pl.seg_off[g + 1] - pl.seg_off[g];
        if (s->zero == 0) {
            for (uint64_t done = 0; done < len; done += LAYOUT_BUCKET_FLOATS) {
                uint64_t n = len - done < LAYOUT_BUCKET_FLOATS ? len - done : LAYOUT_BUCKET_FLOATS;
                book(&b, COMM_ALLREDUCE, n * 4, dp, 1);
            }
            continue;
        }
        /* comm's in-place ring over the segment's dp blocks, in pieces (zero.c): (p-1)/p of each. */
        uint64_t blk = len / (uint64_t)dp;
        double rs = s->zero >= 2 ? k : 1;
        book_pieces(&b, COMM_REDUCE_SCATTER, blk, dp, rs);
        if (s->zero <= 2) {
            book_pieces(&b, COMM_ALLGATHER, blk, dp, 1); /* the updated parameters after the optimizer */
            continue;
        }
        /* ZeRO 3 (parallel.c's two gather slots, invalidated after each update): the first micro-batch
         * gathers the embedding, blocks 1..L and the final norm forward and blocks L-1..1 backward (L
         * and the final norm are still held); every later one finds blocks 1 and 2 held, so gathers
         * 3..L+1 forward and L-1..1 backward. */
        double first = g == 0 ? 1 : g <= L - 1 ? 2 : 1;   /* segment g in the first micro-batch */
        double later = (g >= 3 ? 1 : 0) + (g >= 1 && g <= L - 1 ? 1 : 0);
        book_pieces(&b, COMM_ALLGATHER, blk, dp, first + (k - 1) * later);
    }
    layout_free(&pl);
    /* The world's scalars: token count and stop flag (2 int64), loss and GEMM flag (2 doubles); the
     * all-gathers of one double each (comm_allgather_f64 books the ring all-gather of world doubles):
     * the norm's partial sums, the per-rank norms, the step times, the per-rank communication times,
     * and in the first step the memory record's two. */
    book(&b, COMM_SCALAR, 16, world, 2);
    double gathers = 4 + (s->first_step ? 2 : 0) + (s->noise ? 2 : 0); /* noise: sums of squares, tokens */
    out->bytes[COMM_SCALAR] += gathers * (double)comm_ring_bytes(COMM_ALLGATHER, 8 * (uint64_t)world, world);
    out->calls[COMM_SCALAR] += gathers;
    return ST_OK;
}

int plan_noise_scale_on(int dp, int pp, int k, int off) { return !off && pp == 1 && (dp >= 2 || k >= 2); }

/* The trainer's comm memory for ZeRO's ring reduce-scatter receive slots (zero.c): LAYOUT_RS_IN_FLIGHT
 * slots of the largest piece's per-rank part, in fp32. */
static double rs_slots_bytes(const ParamLayout *pl, int dp, int zero) {
    return 4.0 * LAYOUT_RS_IN_FLIGHT * (double)layout_dp_rs_slot_floats(pl, dp, zero, LAYOUT_BUCKET_FLOATS);
}

/* ---- our trainer's pipeline ranks (plan_trainer_pp) ---- */

Status plan_trainer_pp(const ModelConfig *cfg, const PlanTrainerPipe *s, PlanPpRank out[], Err *err) {
    int pp = s->pp, v = s->v < 1 ? 1 : s->v, tp = s->tp < 1 ? 1 : s->tp, dp = s->dp < 1 ? 1 : s->dp;
    if (pp < 2 || pp > PLAN_MAX_PP || pp > SCHED_MAX_P)
        return err_set(err, ST_ERR_INPUT, "--pp %d: expected 2..%d pipeline ranks", pp, PLAN_MAX_PP);
    if (v > LAYOUT_MAX_CHUNKS)
        return err_set(err, ST_ERR_INPUT, "--interleave %d: expected at most %d chunks per rank", v, LAYOUT_MAX_CHUNKS);
    if (s->zero > 1)
        return err_set(err, ST_ERR_INPUT, "--zero %d with --pp %d: expected ZeRO 0 or 1 (the trainer refuses ZeRO 2-3 "
                       "with a pipeline)", s->zero, pp);
    Status st = layout_tp_check(cfg, tp, err);
    if (st != ST_OK) return st;
    size_t N = (size_t)s->B * (size_t)s->T, Nl = s->sp && tp > 1 ? N / (size_t)tp : N, C = (size_t)cfg->n_embd;
    if (s->sp && tp > 1 && N % (size_t)tp)
        return err_set(err, ST_ERR_INPUT, "--sp: expected --micro-batch x --seq-len = %zu divisible by --tp %d", N, tp);
    /* The schedule exactly as setup_pipeline builds it; its per-rank peak is the rank's slot count
     * (an op list's in-flight count does not depend on the op times). */
    SchedType type = sched_default_type(v);
    if (s->schedule && s->schedule[0] && (st = sched_type_parse(s->schedule, &type, err)) != ST_OK) return st;
    PipeSchedule sc;
    if ((st = sched_build(&sc, type, pp, s->m, v, err)) != ST_OK) return st;
    SchedTimes t = {1.0, type == SCHED_ZB_H1 ? 1.0 : 2.0, type == SCHED_ZB_H1 ? 1.0 : 0.0, 0.0};
    SchedSim sim;
    st = sched_simulate(&sc, &t, &sim, err);
    sched_free(&sc);
    if (st != ST_OK) return st;
    int S = pp * v, first[LAYOUT_MAX_CHUNKS * SCHED_MAX_P], last[LAYOUT_MAX_CHUNKS * SCHED_MAX_P];
    if ((st = layout_pp_split(cfg, s->T, S, s->layers && s->layers[0] ? s->layers : NULL, first, last, err)) != ST_OK)
        return st;
    StateBytes sb = layout_state_bytes(s->precision);
    for (int r = 0; r < pp; r++) {
        PlanPpRank *o = &out[r];
        memset(o, 0, sizeof *o);
        o->stage = layout_pp_rank_stage(first, last, pp, v, r);
        ParamLayout pl;
        if (layout_init_stage(&pl, cfg, dp, tp, 0, &o->stage) != 0)
            return err_set(err, ST_ERR_RUNTIME, "out of memory building pipeline rank %d's layout", r);
        o->has_embed = pl.has_embed, o->has_head = pl.has_head;
        o->layout_floats = (long long)pl.total;
        for (int c = 0; c < o->stage.n; c++) o->blocks += o->stage.last[c] - o->stage.first[c];
        for (int c = 0; c < o->stage.n; c++) o->params += layout_pp_stage_params(cfg, first, last, c * pp + r, S);
        for (int c = 0; c < o->stage.n; c++)
            o->flops += o->chunk_flops[c] = layout_pp_stage_flops(cfg, s->T, first, last, c * pp + r, S);
        size_t zb[MEM_NCAT], rb[MEM_NCAT] = {0};
        layout_zero_bytes(&pl, dp, s->zero, s->n_moments, sb, zb);
        o->slots = sim.peak_inflight[r];
        ActStage ast = layout_act_stage(&pl, o->slots);
        ActOptions ao = {s->B, s->T, s->threads, (Recompute)s->recompute, s->precision, tp, s->sp && tp > 1, &ast};
        layout_run_bytes(cfg, &ao, rb);
        size_t tied = layout_pp_tied_floats(&pl, pp);
        double rs_slots = rs_slots_bytes(&pl, dp, s->zero);
        layout_free(&pl);
        for (int c = 0; c < MEM_NCAT; c++) o->bytes[c] = (double)zb[c];
        o->bytes[MEM_ACTIVATIONS] = (double)rb[MEM_ACTIVATIONS], o->bytes[MEM_WORKSPACE] = (double)rb[MEM_WORKSPACE];
        o->bytes[MEM_COMM] = 4.0 * (double)(tied < LAYOUT_BUCKET_FLOATS ? tied : LAYOUT_BUCKET_FLOATS) + rs_slots;
        for (int c = 0; c < MEM_NCAT; c++) o->total += o->bytes[c];
        /* Every forward but the last virtual stage's sends its output on; every backward but
         * virtual stage 0's sends its input gradient back (pp.c). */
        o->sends_act = s->m * (v - (r == pp - 1)), o->sends_grad = s->m * (v - (r == 0));
        o->p2p_act = 4.0 * (double)(Nl * C) * o->sends_act, o->p2p_grad = 4.0 * (double)(Nl * C) * o->sends_grad;
        o->p2p_tied = 4.0 * (double)tied;
        o->p2p = o->p2p_act + o->p2p_grad + o->p2p_tied;
    }
    return ST_OK;
}

double plan_bubble(int p, int m, int v) {
    if (p <= 1 || m <= 0) return 0;
    if (v < 1) v = 1;
    return (double)(p - 1) / ((double)v * m + p - 1);
}

double plan_ring_allreduce(double S, int n, double bw, double lat) {
    if (n <= 1) return 0;
    return 2.0 * (n - 1) / n * S / bw + 2.0 * (n - 1) * lat;
}

double plan_ring_half(double S, int n, double bw, double lat) {
    if (n <= 1) return 0;
    return (double)(n - 1) / n * S / bw + (double)(n - 1) * lat;
}

double plan_overlap_exposed(int nblocks, double x_block, double t_block, double x_last) {
    if (nblocks < 1) return x_last;
    double lag = x_block > t_block ? x_block - t_block : 0.0;
    return x_last + x_block + (nblocks - 1) * lag;
}

void plan_scaling_fit(PlanScaling *s, int fit) {
    memset(s, 0, sizeof *s);
    if (fit == 0) {
        /* Hoffmann et al. 2022, §3.3 eq. (10) / Appendix D.2. */
        s->name = "hoffmann2022", s->E = 1.69, s->A = 406.4, s->B = 410.7, s->alpha = 0.34, s->beta = 0.28;
    } else {
        /* Besiroglu et al. 2024 (arXiv:2404.10102), their refit of Approach 3 (eq. 4). */
        s->name = "besiroglu2024", s->E = 1.82, s->A = 482.01, s->B = 2085.43, s->alpha = 0.3478, s->beta = 0.3658;
    }
}

double plan_scaling_loss(const PlanScaling *s, double N, double D) {
    return s->E + s->A / pow(N, s->alpha) + s->B / pow(D, s->beta);
}

void plan_scaling_optimum(const PlanScaling *s, double C, double *N, double *D) {
    /* Minimise L(N, D) subject to 6ND = C (Hoffmann et al. 2022, eq. (4) and Appendix D.2). */
    double ab = s->alpha + s->beta;
    double G = pow(s->alpha * s->A / (s->beta * s->B), 1.0 / ab);
    *N = G * pow(C / 6.0, s->beta / ab);
    *D = pow(C / 6.0, s->alpha / ab) / G;
}

double plan_young_daly(double write_s, double mtbf_s) {
    if (write_s <= 0 || mtbf_s <= 0) return 0;
    return sqrt(2.0 * write_s * mtbf_s);
}

/* ========================================================= validation ================ */

Status plan_validate(const PlanInput *in, Err *err) {
    const PlanModel *m = &in->model;
    if (m->params_override < 0)
        return err_set(err, ST_ERR_INPUT, "--params: expected a positive count, found %lld", m->params_override);
    if (m->params_override == 0) {
        if (m->n_layer < 1)
            return err_set(err, ST_ERR_INPUT, "--layers: expected a positive integer, found %d", m->n_layer);
        if (m->n_head < 1)
            return err_set(err, ST_ERR_INPUT, "--heads: expected a positive integer, found %d", m->n_head);
        if (m->n_kv_head < 1 || m->n_kv_head > m->n_head || m->n_head % m->n_kv_head)
            return err_set(err, ST_ERR_INPUT, "--kv-heads: expected a divisor of --heads %d, found %d", m->n_head,
                           m->n_kv_head);
        if (m->d_model < 1)
            return err_set(err, ST_ERR_INPUT, "--channels: expected a positive integer, found %d", m->d_model);
        if (m->d_model % m->n_head)
            return err_set(err, ST_ERR_INPUT,
                           "--heads %d does not divide --channels %d (expected channels a multiple of heads)",
                           m->n_head, m->d_model);
        if (m->d_ff < 1) return err_set(err, ST_ERR_INPUT, "--ffn: expected a positive integer, found %d", m->d_ff);
        if (m->vocab < 2) return err_set(err, ST_ERR_INPUT, "--vocab: expected at least 2, found %d", m->vocab);
        if (m->max_seq < 1)
            return err_set(err, ST_ERR_INPUT, "--max-seq-len: expected a positive integer, found %d", m->max_seq);
    }
    struct { const char *flag; int v; int lo; } ints[] = {
        {"--micro-batch", in->micro_batch, 1}, {"--seq-len", in->seq_len, 1}, {"--grad-accum", in->grad_accum, 1},
        {"--dp", in->dp, 1}, {"--tp", in->tp, 1}, {"--pp", in->pp, 1}, {"--interleave", in->interleave, 1},
        {"--pp-microbatches", in->pp_microbatches, 0}, {"--world", in->world, 0}, {"--threads", in->threads, 1},
        /* as train's (train.c): a block side < 1 would never advance layout_shampoo_blocks' walk */
        {"--shampoo-block", in->shampoo_block, 1}, {"--precond-every", in->precond_every, 1},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (ints[i].v < ints[i].lo)
            return err_set(err, ST_ERR_INPUT, "%s: expected an integer >= %d, found %d", ints[i].flag, ints[i].lo,
                           ints[i].v);
    if (in->zero < 0 || in->zero > 3) return err_set(err, ST_ERR_INPUT, "--zero: expected 0, 1, 2 or 3, found %d", in->zero);
    if (in->n_moments < 0 || in->n_moments > 2)
        return err_set(err, ST_ERR_INPUT, "--moments: expected 0, 1 or 2, found %d", in->n_moments);
    struct { const char *flag; int v; int lo; } bytes[] = {
        {"--weight-bytes", in->prec.weight, 1}, {"--grad-bytes", in->prec.grad, 1},
        {"--master-bytes", in->prec.master, 0}, {"--moment-bytes", in->prec.moment, 1}, {"--act-bytes", in->prec.act, 1},
    };
    for (size_t i = 0; i < sizeof bytes / sizeof bytes[0]; i++)
        if (bytes[i].v < bytes[i].lo || bytes[i].v > 8)
            return err_set(err, ST_ERR_INPUT, "%s: expected %d..8 bytes per element, found %d", bytes[i].flag,
                           bytes[i].lo, bytes[i].v);
    const PlanHardware *hw = &in->hw;
    struct { const char *what; double v; } hwv[] = {
        {"peak fp32 FLOP/s", hw->peak_fp32}, {"peak bf16 FLOP/s", hw->peak_bf16}, {"peak fp16 FLOP/s", hw->peak_fp16},
        {"memory", hw->memory}, {"memory bandwidth", hw->mem_bw}, {"intra-node bandwidth", hw->intra_bw},
        {"inter-node bandwidth", hw->inter_bw}, {"matmul efficiency", hw->matmul_eff}, {"storage bandwidth", hw->storage_bw},
    };
    for (size_t i = 0; i < sizeof hwv / sizeof hwv[0]; i++)
        if (!(hwv[i].v > 0) || !isfinite(hwv[i].v))
            return err_set(err, ST_ERR_INPUT, "--hardware %s: expected a positive %s, found %g", hw->name, hwv[i].what,
                           hwv[i].v);
    if (hw->matmul_eff > 1)
        return err_set(err, ST_ERR_INPUT, "--matmul-eff: expected a fraction in (0, 1], found %g", hw->matmul_eff);
    if (!(hw->matmul_eff_bf16 >= 0 && hw->matmul_eff_bf16 <= 1))
        return err_set(err, ST_ERR_INPUT, "--hardware %s: expected matmul_eff_bf16 in [0, 1] (0: matmul_eff), found %g",
                       hw->name, hw->matmul_eff_bf16);
    if (hw->devices_per_node < 1)
        return err_set(err, ST_ERR_INPUT, "--devices-per-node: expected a positive integer, found %d", hw->devices_per_node);
    if (hw->intra_lat < 0 || hw->inter_lat < 0)
        return err_set(err, ST_ERR_INPUT, "--hardware %s: expected non-negative latencies", hw->name);
    struct { const char *flag; double v; } bud[] = {
        {"--tokens", in->budget_tokens}, {"--flops", in->budget_flops}, {"--days", in->budget_days},
        {"--target-days", in->target_days}, {"--mtbf", in->mtbf_hours},
    };
    for (size_t i = 0; i < sizeof bud / sizeof bud[0]; i++)
        if (!isfinite(bud[i].v) || bud[i].v < 0)
            return err_set(err, ST_ERR_INPUT, "%s: expected a positive number, found %g", bud[i].flag, bud[i].v);
    /* 0 leaves a budget unset; an MTBF of 0 would make the Young/Daly interval 0 */
    if (!(in->mtbf_hours > 0))
        return err_set(err, ST_ERR_INPUT, "--mtbf: expected a positive number of hours, found %g", in->mtbf_hours);
    int nb = (in->budget_tokens > 0) + (in->budget_flops > 0) + (in->budget_days > 0);
    if (nb > 1) return err_set(err, ST_ERR_INPUT, "budget: expected at most one of --tokens, --flops, --days, found %d", nb);
    if (in->act_mode < PLAN_ACT_AUTO || in->act_mode > PLAN_ACT_EXACT)
        return err_set(err, ST_ERR_INPUT, "--activations: expected auto, paper or exact");
    return ST_OK;
}

/* ============================================================ the review ============== */

static void check_add(PlanResult *r, int level, int input, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void check_add(PlanResult *r, int level, int input, const char *fmt, ...) {
    if (level == PLAN_CHECK_ERROR) r->nerrors++;
    else r->nwarnings++;
    if (r->nchecks >= PLAN_MAX_CHECKS) return;
    PlanCheck *c = &r->checks[r->nchecks++];
    c->level = level, c->input = input;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->msg, sizeof c->msg, fmt, ap);
    va_end(ap);
}

static double peak_of(const PlanHardware *hw, PlanDtype d) {
    return d == PLAN_DTYPE_BF16 ? hw->peak_bf16 : d == PLAN_DTYPE_FP16 ? hw->peak_fp16 : hw->peak_fp32;
}

double plan_drop_rate(const PlanHardware *hw) { return hw->drop_rate > 0 ? hw->drop_rate : hw->mem_bw / 8.0; }

double plan_matmul_rate(const PlanHardware *hw, int dtype) {
    double eff = dtype == PLAN_DTYPE_BF16 && hw->matmul_eff_bf16 > 0 ? hw->matmul_eff_bf16 : hw->matmul_eff;
    return peak_of(hw, (PlanDtype)dtype) * eff;
}

/* What plan_core should fill: everything, or the step prediction only. */
enum { CORE_STEP = 0, CORE_FULL = 1 };

/* What the plan's stages share: the input (in and its parts), its dimensions and batch (core_init),
 * and what a stage derives for later ones: our trainer's config and precision index, whether our
 * trainer's tp slice applies, blocks and parameters per device and per block (core_params), the
 * parameter count and the peak (core_compute), the dp link and bucket count (core_comm), the
 * devices used (core_step). Stages read it through local names of the same spelling. */
typedef struct {
    const PlanInput *in;
    const PlanModel *m;
    const PlanPrecision *pr;
    const PlanHardware *hw;
    int shaped;             /* the model has a shape (not --params alone) */
    int dp, tp, pp, v;      /* the grid and the interleave */
    int L;                  /* layers (0 with --params alone) */
    double h, V;            /* width and vocabulary */
    int k, B, T, mb;        /* accumulation, micro-batch, sequence length, pipeline micro-batches */
    double b_pipe;          /* sequences per pipeline micro-batch */
    ModelConfig cfg;        /* our trainer's config of the model (when ours) */
    int ours, prec_i, tp_ours; /* our trainer runs this model; its precision (0/1/2); its tp slice applies */
    int Lp;                 /* blocks per device */
    double layer_dev, P;    /* parameters of one block, and in all, on one device */
    double N;               /* the parameter count */
    double peak;            /* the hardware's peak FLOP/s at the matmul precision */
    int dpn;                /* devices per node */
    double bw_dp, lat_dp;   /* the dp group's link */
    int nbuckets;           /* gradient buckets per step */
    double rs_last;         /* ZeRO >= 1: bytes of one gradient reduce-scatter (the last micro-batch's) */
    int used;               /* devices the grid uses */
} Core;

/* The input's dimensions and the batch: the replica's B·k sequences go through the pipeline as m
 * micro-batches. */
static Status core_init(Core *c, const PlanInput *in, PlanResult *r, Err *err) {
    Status st = plan_validate(in, err);
    if (st != ST_OK) return st;
    memset(r, 0, sizeof *r);
    const PlanModel *m = &in->model;
    const PlanPrecision *pr = &in->prec;
    const PlanHardware *hw = &in->hw;
    int shaped = m->params_override == 0;
    int dp = in->dp, tp = in->tp, pp = in->pp, v = in->interleave;
    int L = shaped ? m->n_layer : 0;
    double h = m->d_model, V = m->vocab;
    r->world = in->world > 0 ? in->world : dp * tp * pp;
    r->nodes = (r->world + hw->devices_per_node - 1) / hw->devices_per_node;

    /* ---- batch: the replica's B·k sequences go through the pipeline as m micro-batches ---- */
    int k = in->grad_accum, B = in->micro_batch, T = in->seq_len;
    int mb = in->pp_microbatches > 0 ? in->pp_microbatches : k;
    double b_pipe = B; /* sequences per pipeline micro-batch */
    if (mb != k) {
        if (((long long)B * k) % mb != 0)
            check_add(r, PLAN_CHECK_ERROR, 1,
                      "global batch not divisible: --micro-batch %d x --grad-accum %d = %lld sequences per replica do "
                      "not split into --pp-microbatches %d",
                      B, k, (long long)B * k, mb);
        b_pipe = (double)B * k / mb;
    }
    r->microbatches = mb;
    r->batch_seqs = (long long)B * k * dp;
    r->batch_tokens = r->batch_seqs * T;

    c->in = in, c->m = m, c->pr = pr, c->hw = hw, c->shaped = shaped;
    c->dp = dp, c->tp = tp, c->pp = pp, c->v = v, c->L = L, c->h = h, c->V = V;
    c->k = k, c->B = B, c->T = T, c->mb = mb, c->b_pipe = b_pipe;
    return ST_OK;
}

/* The parameters: the count, per block and embedding, and per device (our trainer's layout where it applies: padding, alignment, a tp rank's slice, the dp split). */
static Status core_params(Core *c, PlanResult *r, Err *err) {
    const PlanInput *in = c->in;
    const PlanModel *m = c->m;
    const PlanPrecision *pr = c->pr;
    int shaped = c->shaped, dp = c->dp, tp = c->tp, pp = c->pp, L = c->L, k = c->k, B = c->B, T = c->T, mb = c->mb;
    double h = c->h, V = c->V;
    /* ---- parameters ---- */
    r->n_params = plan_model_num_params(m);
    ModelConfig cfg;
    int ours = plan_model_to_config(m, &cfg) && !in->textbook; /* --accounting megatron: never ours */
    if (ours && in->doc_mask) cfg.doc_mask = 1, cfg.doc_eot = 0; /* the slots' document positions (layout) */
    if (shaped) {
        BlockCount bc = block_count(m);
        r->n_params_layer = (long long)(bc.mat + bc.colbias + bc.rowbias + bc.norms + 0.5);
        r->n_params_embedding = (long long)V * m->d_model + (m->learned_pos ? (long long)m->max_seq * m->d_model : 0) +
                                (m->tied_head ? 0 : (long long)V * m->d_model);
    }
    r->layers_per_device = shaped ? (L + pp - 1) / pp : 0;
    int Lp = r->layers_per_device;
    r->layout_floats = r->n_params;
    double layer_dev = 0; /* parameters of one block on one device */
    /* Our trainer at tp > 1 (pp 1): what it would run, so that its layout, allocation and collectives
     * apply; the checklist below reports the other cases against the generic formulas. */
    int prec_i = pr->compute == PLAN_DTYPE_BF16 ? 1 : pr->compute == PLAN_DTYPE_FP16 ? 2 : 0;
    int tp_ours = 0;
    if (ours && tp > 1 && pp == 1 && mb == k) {
        Err te;
        long rows = (long)B * T;
        tp_ours = layout_tp_check(&cfg, tp, &te) == ST_OK && (!in->sp || rows % tp == 0) &&
                  !(in->sp && prec_i == 1 && (rows / tp * m->d_model) % 2);
    }
    if (ours && (tp == 1 || tp_ours)) {
        /* Our trainer's layout (at tp > 1 one tp rank's slice: every rank's has the same size):
         * padding and alignment included, segments split evenly over dp (the trainer builds it with
         * shard_multiple = dp whatever the ZeRO stage). */
        ParamLayout pl;
        if (layout_init_tp(&pl, &cfg, dp, tp, 0) != 0)
            return err_set(err, ST_ERR_RUNTIME, "out of memory building the parameter layout");
        r->exact_layout = 1;
        r->layout_floats = (long long)pl.total;
        if (pp == 1) {
            r->params_per_device = (double)pl.total;
            /* The states exactly as the trainer allocates them on each rank. */
            size_t zb[MEM_NCAT];
            StateBytes sb = {pr->weight, pr->grad, pr->master, pr->moment};
            layout_zero_bytes(&pl, dp, in->zero, in->n_moments, sb, zb);
            r->mem.comm = rs_slots_bytes(&pl, dp, in->zero);
            if (in->muon) zb[MEM_MOMENTS] += layout_muon_bytes(&pl, pr->compute == PLAN_DTYPE_BF16);
            if (in->shampoo) { /* the most loaded rank's owned block state */
                size_t worst = 0;
                for (int q = 0; q < dp; q++) {
                    size_t b = layout_shampoo_bytes(&pl, in->shampoo_block, in->precond_every, dp, q);
                    if (b > worst) worst = b;
                }
                zb[MEM_MOMENTS] += worst;
            }
            r->mem.trainer_states = 1;
            r->mem.weights = (double)zb[MEM_PARAMS], r->mem.grads = (double)zb[MEM_GRADS];
            r->mem.master = (double)zb[MEM_MASTER], r->mem.moments = (double)zb[MEM_MOMENTS];
        } else {
            int l1 = Lp < L ? Lp : L;
            double first = (double)pl.seg_off[1 + l1];
            double last = (double)(pl.seg_off[pl.nseg] - pl.seg_off[1 + L - l1]) + (double)pl.tensors[0].numel;
            r->params_per_device = first > last ? first : last;
        }
        layer_dev = L > 0 ? (double)(pl.seg_off[2] - pl.seg_off[1]) : 0;
        layout_free(&pl);
    } else if (shaped) {
        BlockCount bc = block_count(m);
        layer_dev = (bc.mat + bc.colbias) / tp + bc.rowbias + bc.norms;
        double emb = V * h / tp + (m->learned_pos ? (double)m->max_seq * h : 0);
        double fin = h * (m->norm_bias ? 2 : 1);
        double head = m->tied_head ? (pp > 1 ? V * h / tp : 0) : V * h / tp; /* tied + pp: a copy on the last stage */
        if (pp == 1) {
            r->params_per_device = emb + L * layer_dev + head + fin;
        } else {
            double first = emb + Lp * layer_dev, last = Lp * layer_dev + fin + head;
            r->params_per_device = first > last ? first : last;
        }
    } else {
        r->params_per_device = (double)r->n_params / ((double)tp * pp);
    }
    double P = r->params_per_device;
    c->ours = ours;
    c->prec_i = prec_i;
    c->tp_ours = tp_ours;
    c->Lp = Lp;
    c->layer_dev = layer_dev;
    c->P = P;
    c->cfg = cfg;
    return ST_OK;
}

/* The states per device: the ZeRO paper's accounting unless our trainer's exact bytes are known. */
static void core_states(Core *c, PlanResult *r) {
    const PlanInput *in = c->in;
    const PlanPrecision *pr = c->pr;
    int dp = c->dp;
    double P = c->P;
    /* ---- memory per device: states, divided by ZeRO over dp ---- */
    if (!r->mem.trainer_states) {
        /* The ZeRO paper's accounting (Rajbhandari et al. 2020; DeepSpeed): stage 1 shards the
         * optimizer states (master weights and moments), stage 2 also the gradients, stage 3 also the
         * weights; buffers are the comm category below. Our trainer differs (layout_zero_bytes). */
        r->mem.weights = P * pr->weight / (in->zero >= 3 ? dp : 1);
        r->mem.grads = P * pr->grad / (in->zero >= 2 ? dp : 1);
        r->mem.master = P * pr->master / (in->zero >= 1 ? dp : 1);
        r->mem.moments = P * in->n_moments * pr->moment / (in->zero >= 1 ? dp : 1);
    }
    r->mem.bytes_per_param = pr->weight + pr->grad + pr->master + (double)in->n_moments * pr->moment;
}

/* Activations and workspace: our trainer's exact sizes where they apply, else Korthikanti et al.'s forms. */
static void core_activations(Core *c, PlanResult *r) {
    const PlanInput *in = c->in;
    const PlanModel *m = c->m;
    const PlanPrecision *pr = c->pr;
    int shaped = c->shaped, tp = c->tp, pp = c->pp, v = c->v, k = c->k, B = c->B, T = c->T, mb = c->mb;
    double h = c->h, V = c->V, b_pipe = c->b_pipe;
    const ModelConfig *cfgp = &c->cfg;
    int ours = c->ours, prec_i = c->prec_i, tp_ours = c->tp_ours, Lp = c->Lp;
    /* ---- activations ---- */
    /* One device holding the whole model (tp 1, pp 1): the trainer's sizes at every recompute level,
     * as at tp > 1; with pipeline stages, at --recompute none only. */
    int whole = ours && tp == 1 && pp == 1 && !in->sp && mb == k;
    int exact_ok = whole || (ours && tp == 1 && !in->sp && in->recompute == PLAN_RECOMPUTE_NONE && mb == k);
    if (in->act_mode == PLAN_ACT_EXACT && !exact_ok && !tp_ours)
        check_add(r, PLAN_CHECK_ERROR, 1,
                  "--activations exact: our kernels' sizes apply only to our GPT-2 models with --pp-microbatches = "
                  "--grad-accum, at --tp 1 without --sp (with --pp > 1: and --recompute none), or at a --tp > 1 the "
                  "trainer can split the model by (--pp 1)");
    r->act.inflight = 1;
    if (pp > 1) {
        /* 1F1B: the first stage holds min(p, m) micro-batches; interleaving multiplies that by
         * 1 + (p-1)/(p v) (Korthikanti et al. 2022 §4.2.3). */
        r->act.inflight = (mb < pp ? mb : pp) * (v > 1 ? 1.0 + (double)(pp - 1) / ((double)pp * v) : 1.0);
    }
    if (shaped) {
        double f = (double)m->d_ff / h, rr = (double)m->n_kv_head / m->n_head;
        /* The paper's own figure (16-bit activations) as the reference; this plan's uses pr->act. */
        r->act.korth_plain = plan_act_korthikanti(T, b_pipe, h, m->n_head, f, rr, m->gated_mlp, 1, 0, PLAN_RECOMPUTE_NONE, 2);
        r->act.korth = plan_act_korthikanti(T, b_pipe, h, m->n_head, f, rr, m->gated_mlp, tp, in->sp, in->recompute, pr->act);
        if (tp_ours || whole) {
            /* One tp rank's saved tensors and scratch as gpt_init allocates them (the whole model at
             * tp 1), at every recompute level and with --sp (pp = 1); exact_* without recompute. */
            ActOptions ao = {B, T, in->threads, (Recompute)in->recompute, prec_i, tp, in->sp, NULL}, ao0 = ao;
            ao.device = in->hw.backend_bytes > 0; /* a GPU profile: none of the CPU kernels' scratch */
            ao0.recompute = RECOMPUTE_NONE;
            ActSizes a0 = layout_activations(cfgp, &ao0), as = layout_activations(cfgp, &ao);
            r->act.exact_layer = 4.0 * a0.per_layer;
            r->act.exact_total = 4.0 * a0.total;
            r->act.exact_scratch = 4.0 * a0.scratch;
            if (in->act_mode != PLAN_ACT_KORTHIKANTI) {
                size_t rb[MEM_NCAT] = {0};
                layout_run_bytes(cfgp, &ao, rb);
                r->act.exact_used = 1;
                r->act.per_layer = 4.0 * as.per_layer;
                r->mem.activations = (double)rb[MEM_ACTIVATIONS];
                r->mem.workspace = (double)rb[MEM_WORKSPACE];
            }
        } else if (ours) {
            /* The trainer's sizes at the plan's precision (fp16 stores fp32 activations, as fp32). */
            ActOptions ao = layout_act_options((int)b_pipe, T, in->threads);
            ao.precision = prec_i;
            ActSizes as = layout_activations(cfgp, &ao);
            r->act.exact_layer = 4.0 * as.per_layer;
            r->act.exact_total = 4.0 * as.total;
            r->act.exact_scratch = 4.0 * as.scratch;
            if (exact_ok && in->act_mode != PLAN_ACT_KORTHIKANTI) {
                r->act.exact_used = 1;
                r->act.per_layer = r->act.exact_layer;
                if (pp == 1) r->mem.activations = r->act.exact_total;
                else r->mem.activations = (4.0 * as.encoded + Lp * r->act.exact_layer) * r->act.inflight;
                /* The trainer's workspace: the kernels' scratch plus the mixed-precision GEMM scratch. */
                size_t mb_[MEM_NCAT];
                layout_memory_plan(cfgp, &ao, in->n_moments, mb_);
                r->mem.workspace = (double)mb_[MEM_WORKSPACE];
            }
        }
        if (!r->act.exact_used) {
            r->act.per_layer = r->act.korth;
            r->mem.activations = r->act.per_layer * Lp * r->act.inflight;
            /* fp32 logits of the LM head (on the single or last stage), split over tp. */
            r->mem.workspace = 4.0 * b_pipe * T * V / tp;
        }
    } else {
        check_add(r, PLAN_CHECK_WARNING, 0,
                  "--params alone: activations are not counted and FLOPs are 6N (give --model or a shape)");
    }
}

/* Our trainer's pipeline rank by rank (plan_trainer_pp), the communication buffers, the total per device. */
static void core_pipeline(Core *c, PlanResult *r) {
    const PlanInput *in = c->in;
    const PlanPrecision *pr = c->pr;
    const PlanHardware *hw = c->hw;
    int dp = c->dp, tp = c->tp, pp = c->pp, v = c->v, k = c->k, B = c->B, T = c->T, mb = c->mb;
    const ModelConfig *cfgp = &c->cfg;
    int ours = c->ours, prec_i = c->prec_i;
    double layer_dev = c->layer_dev;
    /* ---- our trainer's pipeline, rank by rank (plan_trainer_pp): each rank's own layout, slots and
     * tied buffer; the memory per device is the worst rank's ---- */
    if (ours && pp > 1 && in->act_mode != PLAN_ACT_KORTHIKANTI) {
        PlanTrainerPipe tpp = {B, T, k, dp, tp, in->sp && tp > 1, in->zero, pp, v, in->pp_schedule, in->pp_layers,
                               (int)in->recompute, prec_i, in->n_moments, in->threads};
        Err pe;
        StateBytes tb = layout_state_bytes(prec_i);
        if (pr->weight != tb.weight || pr->grad != tb.grad || pr->master != tb.master || pr->moment != tb.moment ||
            pr->act != 4)
            snprintf(r->pp_note, sizeof r->pp_note, "element sizes %d/%d/%d/%d/%d (weight/grad/master/moment/activation) "
                     "are not the trainer's %d/%d/%d/%d/4", pr->weight, pr->grad, pr->master, pr->moment, pr->act,
                     tb.weight, tb.grad, tb.master, tb.moment);
        else if (mb != k)
            snprintf(r->pp_note, sizeof r->pp_note, "--pp-microbatches %d: the trainer's pipeline micro-batches are its "
                     "--grad-accum %d steps", mb, k);
        else if (plan_trainer_pp(cfgp, &tpp, r->pp_rank, &pe) == ST_OK)
            r->pp_exact = 1;
        else
            snprintf(r->pp_note, sizeof r->pp_note, "%.200s", pe.msg);
        if (!r->pp_exact)
            check_add(r, PLAN_CHECK_WARNING, 0, "pipeline: no per-rank figures of our trainer (%.150s); memory by "
                      "the textbook forms", r->pp_note);
    }
    if (r->pp_exact) {
        const PlanPpRank *q = r->pp_rank;
        int w = 0, maxb = 0, maxs = 0;
        double maxf = 0;
        for (int i = 0; i < pp; i++) {
            if (q[i].total > q[w].total) w = i;
            if (q[i].blocks > maxb) maxb = q[i].blocks;
            if (q[i].slots > maxs) maxs = q[i].slots;
            if ((double)q[i].layout_floats > maxf) maxf = (double)q[i].layout_floats;
        }
        r->pp_worst = w;
        r->mem.trainer_states = 1;
        r->mem.weights = q[w].bytes[MEM_PARAMS], r->mem.grads = q[w].bytes[MEM_GRADS];
        r->mem.master = q[w].bytes[MEM_MASTER], r->mem.moments = q[w].bytes[MEM_MOMENTS];
        r->mem.activations = q[w].bytes[MEM_ACTIVATIONS], r->mem.workspace = q[w].bytes[MEM_WORKSPACE];
        r->mem.comm = q[w].bytes[MEM_COMM];
        r->act.exact_used = 1;
        ActOptions ao = {B, T, in->threads, (Recompute)in->recompute, prec_i, tp, in->sp && tp > 1, NULL};
        ActSizes as = layout_activations(cfgp, &ao);
        r->act.per_layer = 4.0 * as.per_layer;
        r->act.inflight = maxs;
        r->layers_per_device = maxb;
        r->params_per_device = maxf;
    }
    /* Communication buffers: a double-buffered per-block gradient bucket; ZeRO-3 gathers two blocks.
     * (Our trainer's buckets and gather slots are inside its gradients and weights.) */
    if (dp > 1 && !r->mem.trainer_states) r->mem.comm = 2.0 * layer_dev * pr->grad;
    if (dp > 1 && in->zero == 3 && !r->mem.trainer_states) r->mem.comm += 2.0 * layer_dev * pr->weight;
    r->mem.backend = hw->backend_bytes;
    r->mem.total = r->mem.weights + r->mem.grads + r->mem.master + r->mem.moments + r->mem.activations +
                   r->mem.workspace + r->mem.comm + r->mem.backend;
    r->mem.device = hw->memory;
    r->mem.margin = hw->memory - r->mem.total;
    r->mem.fits = r->mem.margin >= 0;
}

/* Our trainer's pipeline: each virtual stage computes its own blocks (their share of the FLOPs per
 * token, their elementwise passes and dropout draws, elem_block + drop_block seconds per block per
 * step; the embedding's draws, drop_embed, on the first) and the last one the
 * head (its GEMMs and its softmax passes, head_ew), in its forward ops; the step is the
 * schedule run with those times (sched_simulate, as setup_pipeline builds it), not the mean stage
 * plus the textbook bubble: a head-heavy last stage or an uneven split sets the pace. The busiest
 * rank's matmul and elementwise time become the step's, the rest of the makespan its bubble
 * (docs/plan.md "Pipeline time"). Returns 0 (the caller keeps the formula) if the schedule does
 * not build, which plan_trainer_pp has already ruled out. */
static int pipeline_times(Core *c, PlanResult *r, double elem_block, double drop_block, double drop_embed,
                          double head_ew) {
    const PlanInput *in = c->in;
    int pp = c->pp, v = c->v, mb = c->mb, S = pp * v;
    double rate = plan_matmul_rate(c->hw, c->pr->compute), tok = (double)c->B * c->T * c->k / c->tp, sum = 0;
    for (int i = 0; i < pp; i++) sum += r->pp_rank[i].flops;
    if (!(sum > 0) || mb < 1 || S > LAYOUT_MAX_CHUNKS * SCHED_MAX_P) return 0;
    SchedType type = sched_default_type(v);
    if (in->pp_schedule[0] && sched_type_parse(in->pp_schedule, &type, &(Err){0}) != ST_OK) return 0;
    /* Recompute reruns blocks only (fpt_hw − fpt): by the stage's share of the blocks. A forward
     * op's share of a stage's work: 1 of 3 (backward 2 F), 1 of 4 under full recompute (the
     * backward runs the forward again); zb-h1 splits the backward into B and W of one F each. */
    double extra = r->compute.fpt_hw - r->compute.fpt, bwd = in->recompute == PLAN_RECOMPUTE_FULL ? 3.0 : 2.0;
    /* The LM head and the loss run fused in the last virtual stage's forward op, their gradients
     * included (kernels_head): its 3 x 2VC FLOPs per token are all in that F, none in its B. */
    double head = 3.0 * layout_token_flops(layout_block_matmul_weights(&c->cfg), 0, c->cfg.n_embd, c->cfg.vocab, c->T).head;
    double mat[PLAN_MAX_PP] = {0}, ele[PLAN_MAX_PP] = {0};
    double *f = calloc(3 * (size_t)S, sizeof *f), *b = f + S, *w = f + 2 * S;
    if (!f) return 0;
    for (int i = 0; i < pp; i++) {
        PlanPpRank *q = &r->pp_rank[i];
        for (int ch = 0; ch < q->stage.n && ch < v; ch++) {
            int nb = q->stage.last[ch] - q->stage.first[ch];
            int vs = ch * pp + i;
            double hf = vs == S - 1 ? head : 0.0, scale = r->compute.fpt / sum * tok / rate;
            double mt = (q->chunk_flops[ch] - hf) * scale + extra * nb / c->L * tok / rate, mh = hf * scale;
            /* the blocks' work splits over F, B (and W); the head's GEMMs and passes are all in F */
            double el = (elem_block + drop_block) * nb + (vs == 0 ? drop_embed : 0.0), hs = vs == S - 1 ? head_ew : 0.0;
            double u = (mt + el) / ((double)mb * (1.0 + bwd));
            f[vs] = u + (mh + hs) / mb, b[vs] = type == SCHED_ZB_H1 ? u : bwd * u, w[vs] = type == SCHED_ZB_H1 ? u : 0.0;
            mat[i] += mt + mh, ele[i] += el + hs;
        }
        q->t_compute = mat[i] + ele[i];
    }
    PipeSchedule sc;
    SchedSim sim;
    Status st = sched_build(&sc, type, pp, mb, v, &(Err){0});
    if (st == ST_OK) {
        SchedTimes t = {f[0], b[0], w[0], 0.0, NULL, NULL, NULL, f, b, w};
        st = sched_simulate(&sc, &t, &sim, &(Err){0});
        sched_free(&sc);
    }
    free(f);
    if (st != ST_OK) return 0;
    int s = 0;
    for (int i = 1; i < pp; i++)
        if (r->pp_rank[i].t_compute > r->pp_rank[s].t_compute) s = i;
    r->compute.t_matmul = mat[s], r->compute.t_elementwise = ele[s];
    r->compute.t_dropout = drop_block * r->pp_rank[s].blocks + (r->pp_rank[s].has_embed ? drop_embed : 0.0);
    r->compute.t_bubble = sim.makespan > r->pp_rank[s].t_compute ? sim.makespan - r->pp_rank[s].t_compute : 0.0;
    return 1;
}

/* FLOPs per token and the compute time of a step: matmuls at the peak times the efficiency, elementwise passes at the memory bandwidth, the pipeline bubble. */
static void core_compute(Core *c, PlanResult *r) {
    const PlanInput *in = c->in;
    const PlanModel *m = c->m;
    const PlanPrecision *pr = c->pr;
    const PlanHardware *hw = c->hw;
    int shaped = c->shaped, tp = c->tp, pp = c->pp, v = c->v, L = c->L, k = c->k, B = c->B, T = c->T, mb = c->mb,
        Lp = c->Lp;
    double h = c->h, b_pipe = c->b_pipe;
    /* ---- compute ---- */
    double N = (double)r->n_params;
    r->compute.fpt_6n = 6.0 * N;
    if (shaped) {
        /* --doc-mask: each document is charged its own L_i² scores (layout.h): span min(mean length, T) */
        double span = in->doc_mask && in->mean_doc_len > 0 ? layout_doc_span_mean(T, in->mean_doc_len) : (double)T;
        TokenFlops tf = layout_token_flops(block_count(m).mat, L, m->d_model, m->vocab, span);
        r->compute.fpt = tf.train;
        /* Recompute reruns forward work (Korthikanti's levels): full the blocks, selective the attention core. */
        r->compute.fpt_hw = r->compute.fpt + (in->recompute == PLAN_RECOMPUTE_FULL ? tf.blocks + tf.attention
                                              : in->recompute == PLAN_RECOMPUTE_SELECTIVE ? tf.attention : 0);
    } else {
        r->compute.fpt = r->compute.fpt_hw = r->compute.fpt_6n;
    }
    double peak = peak_of(hw, pr->compute);
    r->compute.peak = peak;
    double tok_replica = (double)B * T * k;
    r->compute.t_matmul = r->compute.fpt_hw * tok_replica / ((double)tp * pp) / plan_matmul_rate(hw, pr->compute);
    /* Elementwise work streams each saved activation about four times (written in the forward,
     * read in the backward, its gradient written and read); full recompute writes it once more. */
    double act_nrc = 0;
    if (shaped) {
        double f = (double)m->d_ff / h, rr = (double)m->n_kv_head / m->n_head;
        act_nrc = r->act.exact_used ? r->act.exact_layer
                                    : plan_act_korthikanti(T, b_pipe, h, m->n_head, f, rr, m->gated_mlp, tp, in->sp,
                                                           PLAN_RECOMPUTE_NONE, pr->act);
    }
    double passes = 4.0 + (in->recompute == PLAN_RECOMPUTE_FULL ? 1.0 : 0.0);
    r->compute.t_elementwise = passes * act_nrc * Lp * mb / hw->mem_bw;
    /* --dropout: its factors drawn in the forward, again in the backward, and once more in full
     * recompute's forward (layout_dropout_draws), at the measured draw rate (a GPU preset's: one
     * fp32 read and write per factor). Per block, as the pipeline splits them; the embedding's on
     * the first stage. */
    double drop_block = 0, drop_embed = 0;
    if (shaped && in->dropout > 0) {
        double span = in->doc_mask && in->mean_doc_len > 0 ? layout_doc_span_mean(T, in->mean_doc_len) : (double)T;
        DropDraws dd = layout_dropout_draws(m->d_model, m->n_head, span, tp, in->sp);
        double rate = plan_drop_rate(hw), times = in->recompute == PLAN_RECOMPUTE_FULL ? 3.0 : 2.0;
        double tok = (double)B * T * k;
        drop_block = times * dd.block * tok / rate, drop_embed = times * dd.embed * tok / rate;
        r->compute.t_dropout = drop_block * Lp + drop_embed;
        r->compute.t_elementwise += r->compute.t_dropout;
    }
    r->bubble = plan_bubble(pp, mb, 1);
    r->bubble_interleaved = plan_bubble(pp, mb, v);
    /* The LM head's softmax, loss and logit-gradient passes (layout_head_softmax_bytes), over the
     * rank's vocabulary rows (V/t on the vocabulary-parallel head of tp > 1), on the head's stage. */
    if (shaped) {
        int vp = tp > 1;
        double rows = vp ? ceil((double)m->vocab / tp) : (double)m->vocab;
        r->compute.t_head = layout_head_softmax_bytes(c->prec_i, vp) * rows * tok_replica / hw->mem_bw;
        r->compute.t_elementwise += r->compute.t_head;
    }
    if (pp > 1 && !(r->pp_exact && pipeline_times(c, r, passes * act_nrc * mb / hw->mem_bw, drop_block, drop_embed,
                                                  r->compute.t_head)))
        r->compute.t_bubble = (r->compute.t_matmul + r->compute.t_elementwise) * (pp - 1) / ((double)v * mb);
    c->N = N;
    c->peak = peak;
}

/* Communication of a step: tp, pp and dp bytes and times (our trainer's collectives call by call where it applies). */
static void core_comm(Core *c, PlanResult *r) {
    const PlanInput *in = c->in;
    const PlanPrecision *pr = c->pr;
    const PlanHardware *hw = c->hw;
    int shaped = c->shaped, dp = c->dp, tp = c->tp, pp = c->pp, v = c->v, k = c->k, B = c->B, T = c->T, mb = c->mb;
    double h = c->h, b_pipe = c->b_pipe;
    const ModelConfig *cfgp = &c->cfg;
    int ours = c->ours, prec_i = c->prec_i, tp_ours = c->tp_ours, Lp = c->Lp;
    double P = c->P;
    /* ---- communication: tp innermost, then dp, then pp (Megatron's rank order) ---- */
    int dpn = hw->devices_per_node;
    r->comm.tp_inter = tp > dpn;
    r->comm.dp_inter = dp > 1 && tp * dp > dpn;
    r->comm.pp_inter = pp > 1 && tp * dp * pp > dpn;
    double bw_tp = r->comm.tp_inter ? hw->inter_bw : hw->intra_bw, lat_tp = r->comm.tp_inter ? hw->inter_lat : hw->intra_lat;
    double bw_dp = r->comm.dp_inter ? hw->inter_bw : hw->intra_bw, lat_dp = r->comm.dp_inter ? hw->inter_lat : hw->intra_lat;
    double bw_pp = r->comm.pp_inter ? hw->inter_bw : hw->intra_bw, lat_pp = r->comm.pp_inter ? hw->inter_lat : hw->intra_lat;
    double act_msg = b_pipe * T * h * pr->act; /* one micro-batch's hidden states */
    if (tp > 1 && shaped)
        r->comm.tp_megatron = 8.0 * act_msg * (tp - 1) / tp * (in->recompute == PLAN_RECOMPUTE_FULL ? 1.5 : 1.0) * Lp * mb;
    if (ours && pp == 1 && mb == k && (tp == 1 || tp_ours)) {
        /* Our trainer's collectives, call by call (a step after the first); at tp > 1 they are the tp
         * time. */
        PlanTrainerStep ts = {B, T, k, dp, tp, in->sp && tp > 1, in->zero, (int)in->recompute, prec_i,
                              0, plan_noise_scale_on(dp, pp, k, in->no_noise_scale)};
        PlanCommKinds ck;
        Err ce;
        if (plan_trainer_comm(cfgp, &ts, bw_tp, lat_tp, &ck, &ce) == ST_OK) {
            r->comm.by_kind_exact = 1;
            memcpy(r->comm.by_kind, ck.bytes, sizeof r->comm.by_kind);
            if (tp > 1) {
                r->comm.tp_exact = 1;
                r->comm.tp_bytes = 0;
                for (int kk = 0; kk < COMM_NKIND; kk++)
                    if (comm_kind_is_tp((CommKind)kk)) r->comm.tp_bytes += ck.bytes[kk];
                r->comm.tp_time = ck.tp_time;
                r->comm.tp_overlap_calls = ck.tp_overlap_calls, r->comm.tp_overlap_time = ck.tp_overlap_time;
                /* What the overlap hides: each overlapped collective up to the GEMM beside it. Its
                 * bytes move during that GEMM at any thread count: gpt.c's overlap_run progresses
                 * them from a second thread (the calling one at --threads 1, the overlap worker
                 * with more; MPI_THREAD_SERIALIZED, which comm asks for), and across nodes comm's
                 * progress thread does too. */
                r->comm.tp_exposed = plan_tp_exposed(&ck, plan_matmul_rate(hw, c->pr->compute), hw->mem_bw);
            }
        }
    }
    if (tp > 1 && shaped && !r->comm.tp_exact) {
        /* Megatron: 2 all-reduces per layer forward, 2 backward (+2 for a full-recompute forward);
         * with SP each becomes an all-gather + reduce-scatter of the same volume. */
        double n_ar = 4.0 + (in->recompute == PLAN_RECOMPUTE_FULL ? 2.0 : 0.0);
        double one = plan_ring_allreduce(act_msg, tp, bw_tp, lat_tp);
        r->comm.tp_bytes = n_ar * Lp * mb * 2.0 * (tp - 1) / tp * act_msg;
        r->comm.tp_time = n_ar * Lp * mb * one;
    }
    if (r->pp_exact) {
        /* The busiest rank's sends (plan_trainer_pp): its activations, gradients and tied wte. */
        for (int i = 0; i < pp; i++) {
            const PlanPpRank *q = &r->pp_rank[i];
            double msgs = q->sends_act + q->sends_grad + (q->p2p_tied > 0 ? ceil(q->p2p_tied / 4.0 / LAYOUT_BUCKET_FLOATS) : 0);
            double t = q->p2p / bw_pp + msgs * lat_pp;
            if (q->p2p > r->comm.pp_bytes) r->comm.pp_bytes = q->p2p;
            if (t > r->comm.pp_time) r->comm.pp_time = t;
        }
    } else if (pp > 1 && shaped) {
        double msg = act_msg / (in->sp ? tp : 1);
        r->comm.pp_bytes = 2.0 * mb * v * msg;
        r->comm.pp_time = 2.0 * mb * v * (msg / bw_pp + lat_pp);
    }
    r->compute.t_tp = r->comm.tp_exact ? r->comm.tp_exposed : r->comm.tp_time;
    r->compute.t_pp = r->comm.pp_time;
    int nbuckets = (Lp > 0 ? Lp : 1) + 1;
    double Sg = P * pr->grad, Sw = P * pr->weight;
    if (dp > 1) {
        if (in->zero == 0) {
            r->comm.dp_bytes = 2.0 * (dp - 1) / dp * Sg;
            r->comm.dp_time = 2.0 * (dp - 1) / dp * Sg / bw_dp + 2.0 * (dp - 1) * lat_dp * nbuckets;
        } else {
            /* Reduce-scatter the gradients once per step (ZeRO-1: after accumulation) or once per
             * micro-batch (ZeRO-2/3: each micro-batch's bucket is reduce-scattered and added to the
             * shard, parallel.h); all-gather the updated weights (ZeRO-1/2) or gather them for
             * every micro-batch's forward and backward (ZeRO-3). */
            double scatters = in->zero >= 2 ? (double)mb : 1.0, gathers = in->zero == 3 ? 2.0 * mb : 1.0;
            r->comm.rs_bytes = scatters * (dp - 1) / dp * Sg;
            r->comm.ag_bytes = gathers * (dp - 1) / dp * Sw;
            r->comm.zero_time = (r->comm.rs_bytes + r->comm.ag_bytes) / bw_dp +
                                (scatters + gathers) * (dp - 1) * lat_dp * nbuckets;
            c->rs_last = (double)(dp - 1) / dp * Sg; /* the last micro-batch's (or the step's one) */
        }
    }
    r->compute.t_dp = r->comm.dp_time + r->comm.zero_time;
    c->dpn = dpn;
    c->bw_dp = bw_dp;
    c->lat_dp = lat_dp;
    c->nbuckets = nbuckets;
}

/* The step time: what overlap cannot hide, the optimizer, Sophia's Hessian pass; tokens/s, MFU and HFU. */
static void core_step(Core *c, PlanResult *r) {
    const PlanInput *in = c->in;
    const PlanPrecision *pr = c->pr;
    const PlanHardware *hw = c->hw;
    int dp = c->dp, tp = c->tp, pp = c->pp, nbuckets = c->nbuckets;
    double P = c->P, peak = c->peak, bw_dp = c->bw_dp, lat_dp = c->lat_dp;
    /* What overlap cannot hide. The embedding's gradient (the tied LM head's, completed by the
     * token lookup) is the last one ready in the backward pass: its collective has no compute left
     * to run behind. ZeRO 1-2 all-gather the updated parameters after the optimizer (as DeepSpeed
     * does), before the next forward; ZeRO 3 gathers the embedding before the first forward. */
    if (dp > 1) {
        double Se = (double)r->n_params_embedding, f = (double)(dp - 1) / dp;
        double t_emb = (in->zero == 0 ? 2.0 : 1.0) * f * Se * pr->grad / bw_dp + (in->zero == 0 ? 2.0 : 1.0) * (dp - 1) * lat_dp;
        double t_ag = in->zero == 1 || in->zero == 2 ? r->comm.ag_bytes / bw_dp + (dp - 1) * lat_dp * nbuckets
                      : in->zero == 3 ? f * Se * pr->weight / bw_dp + (dp - 1) * lat_dp : 0.0;
        /* The gradient collectives of the blocks, ready one block's backward apart in the last
         * micro-batch (ZeRO 0: all-reduce; 1-3: reduce-scatter, the rest of t_dp): the first
         * block's is ready last and, like the embedding's, has no compute left to hide behind
         * (netsim over TCP with comm's progress thread: 66 ms exposed at 1 Gb/s, the first
         * block's 7 MB all-reduce and the embedding's). A block's backward is 2/3 of its share of
         * a micro-batch's compute (3/4 when full recompute runs its forward again). */
        /* ZeRO-2/3: only the last micro-batch's reduce-scatter is in this tail; the earlier ones
         * run behind the later micro-batches' compute (in t_dp, the part overlap may hide). */
        double t_grad = in->zero == 0 ? r->comm.dp_time
                                      : c->rs_last / bw_dp + (dp - 1) * lat_dp * nbuckets;
        int Lb = c->Lp > 0 ? c->Lp : 0;
        double x_block = Lb > 0 && t_grad > t_emb ? (t_grad - t_emb) / Lb : 0.0;
        double bwd = in->recompute == PLAN_RECOMPUTE_FULL ? 0.75 : 2.0 / 3.0;
        double t_block = Lb > 0 ? bwd * (r->compute.t_matmul + r->compute.t_elementwise) / (c->mb > 0 ? c->mb : 1) / Lb : 0.0;
        double exposed = plan_overlap_exposed(Lb, x_block, t_block, t_emb) + t_ag;
        r->compute.t_dp_exposed = exposed < r->compute.t_dp ? exposed : r->compute.t_dp;
    }
    /* Optimizer: read the gradient, read+write master and moments, write the working weights. */
    double Popt = P / (in->zero >= 1 ? dp : 1);
    double opt_bytes = pr->grad + 2.0 * pr->master + 2.0 * in->n_moments * pr->moment + (pr->master ? 1.0 : 2.0) * pr->weight;
    r->compute.t_optimizer = Popt * opt_bytes / hw->mem_bw;
    /* Muon and Shampoo: the most loaded rank's matrix work (layout_matrix_opt_flops) at the matmul rate. */
    if (in->muon || in->shampoo) {
        ModelConfig mc;
        ParamLayout pl;
        if (plan_model_to_config(&in->model, &mc) && model_config_validate(&mc, &(Err){0}) == ST_OK &&
            layout_init(&pl, &mc, dp) == 0) {
            double f = layout_matrix_opt_flops(&pl, in->muon, in->shampoo_block, in->precond_every, dp);
            if (f > 0) r->compute.t_optimizer += f / plan_matmul_rate(hw, c->pr->compute);
            layout_free(&pl);
        }
    }
    double t_comp = r->compute.t_matmul + r->compute.t_elementwise + r->compute.t_bubble + r->compute.t_tp + r->compute.t_pp;
    double t_hidden = r->compute.t_dp - r->compute.t_dp_exposed;
    /* Sophia's Hessian pass: the step's forward, backward and gradient collectives once more every
     * k steps (train/train.c step_hessian), without overlap credit. */
    r->compute.t_hessian = in->hess_every > 0 ? (t_comp + r->compute.t_dp) / in->hess_every : 0.0;
    r->compute.step_overlap = (t_comp > t_hidden ? t_comp : t_hidden) + r->compute.t_dp_exposed + r->compute.t_optimizer +
                              r->compute.t_hessian;
    r->compute.step_serial = t_comp + r->compute.t_dp + r->compute.t_optimizer + r->compute.t_hessian;
    r->compute.step = in->overlap ? r->compute.step_overlap : r->compute.step_serial;
    r->compute.tokens_per_s = r->batch_tokens / r->compute.step;
    int used = dp * tp * pp;
    double hess = in->hess_every > 0 ? 1.0 + 1.0 / in->hess_every : 1.0;
    r->compute.mfu = hess * r->compute.fpt * r->compute.tokens_per_s / (used * peak);
    r->compute.hfu = hess * r->compute.fpt_hw * r->compute.tokens_per_s / (used * peak);
    c->used = used;
}

/* The token budget and the run's length. */
static void core_budget(Core *c, PlanResult *r) {
    const PlanInput *in = c->in;
    double N = c->N, peak = c->peak;
    /* ---- budget ---- */
    if (in->budget_tokens > 0) r->tokens = in->budget_tokens, r->budget_source = "tokens";
    else if (in->budget_flops > 0) r->tokens = in->budget_flops / r->compute.fpt, r->budget_source = "flops";
    else if (in->budget_days > 0) r->tokens = in->budget_days * 86400.0 * r->compute.tokens_per_s, r->budget_source = "days";
    else r->tokens = 20.0 * N, r->budget_source = "20 tokens/param";
    double steps_d = ceil(r->tokens / (double)r->batch_tokens);
    if (!(steps_d <= 1e15)) { /* a cast past 2^63 gave -9223372036854775808 steps and negative time */
        check_add(r, PLAN_CHECK_ERROR, 1, "budget: %.3g tokens (%s) are %.3g steps of %lld tokens: expected at most 1e15 steps",
                  r->tokens, r->budget_source, steps_d, r->batch_tokens);
        steps_d = 0;
    }
    r->steps = (long long)steps_d;
    r->compute.total_6nd = 6.0 * N * r->tokens;
    r->compute.total = r->compute.fpt * r->tokens;
    r->compute.train_seconds = r->steps * r->compute.step;
    double target = in->target_days > 0 ? in->target_days : in->budget_days;
    if (target > 0) {
        r->compute.target_seconds = target * 86400.0;
        r->compute.mfu_required = r->compute.total / (r->compute.target_seconds * r->world * peak);
    }
}

/* The launch checklist: what cannot run, and warnings. */
static void core_checks(Core *c, PlanResult *r) {
    const PlanInput *in = c->in;
    const PlanModel *m = c->m;
    const PlanHardware *hw = c->hw;
    int shaped = c->shaped, dp = c->dp, tp = c->tp, pp = c->pp, v = c->v, L = c->L, B = c->B, T = c->T, mb = c->mb,
        ours = c->ours, prec_i = c->prec_i, dpn = c->dpn, used = c->used;
    /* ---- launch checklist ---- */
    if (in->world > 0 && used != in->world)
        check_add(r, PLAN_CHECK_ERROR, 1, "--dp %d x --tp %d x --pp %d = %d devices, expected the world size %d", dp, tp,
                  pp, used, in->world);
    if (shaped) {
        if (m->n_head % tp)
            check_add(r, PLAN_CHECK_ERROR, 1, "--heads %d is not divisible by --tp %d", m->n_head, tp);
        if (m->n_kv_head % tp)
            check_add(r, PLAN_CHECK_ERROR, 1, "--kv-heads %d is not divisible by --tp %d", m->n_kv_head, tp);
        if (m->d_ff % tp) check_add(r, PLAN_CHECK_ERROR, 1, "--ffn %d is not divisible by --tp %d", m->d_ff, tp);
        if (ours && pp * v > 1) {
            /* The trainer's rule, from its own function (one rule for plan and train): blocks split
             * by FLOPs into pp x v stages of at least one block each, or as --pp-layers says. */
            int S = pp * v, *first = malloc(2 * (size_t)S * sizeof *first);
            Err pe;
            if (first && layout_pp_split(&c->cfg, T, S, in->pp_layers[0] ? in->pp_layers : NULL, first, first + S,
                                         &pe) != ST_OK) {
                if (v > 1) err_prefix(&pe, "--interleave %d: %d x %d = %d virtual stages", v, pp, v, S); /* as train's */
                check_add(r, PLAN_CHECK_ERROR, 1, "%s", pe.msg);
            }
            free(first);
        } else if (L % pp) {
            /* Megatron-style models (not ours): equal stages */
            check_add(r, PLAN_CHECK_ERROR, 1, "--layers %d is not divisible by --pp %d", L, pp);
        } else if (v > 1 && L % (pp * v)) {
            check_add(r, PLAN_CHECK_ERROR, 1, "--layers %d is not divisible by --pp %d x --interleave %d = %d", L, pp, v,
                      pp * v);
        }
        /* --pp-schedule zb-h1 splits the backward: the trainer's rule (layout_check_split_backward) */
        Err ze;
        if (!strcmp(in->pp_schedule, "zb-h1") && layout_check_split_backward((Recompute)in->recompute, in->sp, &ze) != ST_OK)
            check_add(r, PLAN_CHECK_ERROR, 1, "%s", ze.msg);
        if (T > m->max_seq)
            check_add(r, PLAN_CHECK_ERROR, 1, "--seq-len %d is over the model's --max-seq-len %d", T, m->max_seq);
        /* Our trainer splits the micro-batch's B·T rows (gpt.c); Megatron splits the sequence. */
        if (in->sp && tp > 1 && ours && ((long)B * T) % tp)
            check_add(r, PLAN_CHECK_ERROR, 1, "--sp: --micro-batch %d x --seq-len %d = %ld rows are not divisible by --tp %d",
                      B, T, (long)B * T, tp);
        else if (in->sp && tp > 1 && ours && prec_i == 1 && ((long)B * T / tp * m->d_model) % 2)
            check_add(r, PLAN_CHECK_ERROR, 1, "--sp with bf16: %ld rows x %d channels per rank is odd (bf16 rows are "
                      "gathered as floats)", (long)B * T / tp, m->d_model);
        else if (in->sp && !ours && T % tp)
            check_add(r, PLAN_CHECK_ERROR, 1, "--sp: --seq-len %d is not divisible by --tp %d", T, tp);
        if (m->vocab % tp)
            check_add(r, PLAN_CHECK_WARNING, 0, "--vocab %d is not divisible by --tp %d: the embedding is padded", m->vocab,
                      tp);
    }
    if (pp > 1 && mb < pp)
        check_add(r, PLAN_CHECK_WARNING, 0,
                  "%d pipeline micro-batches for %d stages: fewer micro-batches than stages, bubble %.0f%%", mb, pp,
                  100 * r->bubble_interleaved);
    if (v > 1 && pp == 1) check_add(r, PLAN_CHECK_WARNING, 0, "--interleave %d without --pp has no effect", v);
    if (v > 1 && pp > 1 && mb % pp)
        check_add(r, PLAN_CHECK_ERROR, 1, "--interleave %d: %d micro-batches are not a multiple of --pp %d", v, mb, pp);
    if (in->sp && tp == 1) check_add(r, PLAN_CHECK_WARNING, 0, "--sp without --tp > 1 has no effect");
    /* Warnings (the plan is still priced) of layouts the trainer refuses (par_check_grid; --zero in
     * one process) or that shard nothing: marked input, so no suggestion proposes them. */
    if (in->zero >= 2 && pp > 1)
        check_add(r, PLAN_CHECK_WARNING, 1,
                  "--zero %d with --pp %d: gradients are reduce-scattered every micro-batch; the trainer refuses it "
                  "(DeepSpeed allows only ZeRO-1 with pipelines)",
                  in->zero, pp);
    if (in->zero > 0 && dp == 1) check_add(r, PLAN_CHECK_WARNING, 1, "--zero %d with --dp 1 shards nothing", in->zero);
    if (tp > dpn)
        check_add(r, PLAN_CHECK_WARNING, 0, "--tp %d spans nodes (%d devices per node): TP all-reduces go over the slow link",
                  tp, dpn);
    if (!r->mem.fits)
        check_add(r, PLAN_CHECK_ERROR, 0, "memory: %.2f GiB per device does not fit in %.2f GiB (over by %.2f GiB)",
                  r->mem.total / 1073741824.0, hw->memory / 1073741824.0, -r->mem.margin / 1073741824.0);
}

/* The scaling laws' optimum for the budget and the planned run's loss. */
static void core_scaling(Core *c, PlanResult *r) {
    const PlanInput *in = c->in;
    double N = c->N;
    /* ---- scaling laws ---- */
    r->nscaling = in->has_fit ? 3 : 2;
    r->scaling_judge = in->has_fit ? 2 : 0;
    for (int i = 0; i < r->nscaling; i++) {
        PlanScaling *s = &r->scaling[i];
        if (i < 2) plan_scaling_fit(s, i);
        else
            *s = (PlanScaling){.name = "fit", .E = in->fit_E, .A = in->fit_A, .B = in->fit_B, .alpha = in->fit_alpha,
                               .beta = in->fit_beta};
        /* A FLOP budget is the compute to spend: its optimum is for C = F (in Chinchilla's C = 6ND);
         * otherwise the planned run's 6ND. */
        s->budget_flops = in->budget_flops > 0 ? in->budget_flops : r->compute.total_6nd;
        plan_scaling_optimum(s, s->budget_flops, &s->n_opt, &s->d_opt);
        s->loss_opt = plan_scaling_loss(s, s->n_opt, s->d_opt);
        s->loss_plan = plan_scaling_loss(s, N, r->tokens);
        s->tokens_per_param_opt = s->d_opt / s->n_opt;
    }
    r->tokens_per_param = r->tokens / N;
    r->overtrained = r->tokens_per_param > 2.0 * 20.0 && r->tokens_per_param > 2.0 * r->scaling[r->scaling_judge].tokens_per_param_opt;
}

/* Checkpoint size and write time, and the Young/Daly interval. */
static void core_ckpt(Core *c, PlanResult *r) {
    const PlanInput *in = c->in;
    const PlanPrecision *pr = c->pr;
    const PlanHardware *hw = c->hw;
    double N = c->N;
    /* ---- checkpointing ---- */
    /* our checkpoint (DESIGN §5): the fp32 weights, which under mixed precision are the master copy
     * (model.safetensors holds them; docs/checkpoint.md), and the moments: a master term beside them
     * priced a bf16 checkpoint 4 bytes a parameter over what it writes */
    r->ckpt.bytes = N * (4.0 + (double)in->n_moments * pr->moment);
    r->ckpt.write_s = r->ckpt.bytes / (hw->storage_bw * r->nodes);
    r->ckpt.mtbf_s = in->mtbf_hours * 3600.0;
    r->ckpt.interval_s = plan_young_daly(r->ckpt.write_s, r->ckpt.mtbf_s);
    if (r->ckpt.interval_s > 0)
        r->ckpt.overhead = r->ckpt.write_s / r->ckpt.interval_s + r->ckpt.interval_s / (2.0 * r->ckpt.mtbf_s);
}

/* The plan, stage by stage over one Core; CORE_STEP stops after the checklist (the knob search and
 * plan_predict_step need no scaling law or checkpoint figures). */
static Status plan_core(const PlanInput *in, PlanResult *r, int what, Err *err) {
    Core c;
    memset(&c, 0, sizeof c);
    Status st = core_init(&c, in, r, err);
    if (st == ST_OK) st = core_params(&c, r, err);
    if (st != ST_OK) return st;
    core_states(&c, r);
    core_activations(&c, r);
    core_pipeline(&c, r);
    core_compute(&c, r);
    core_comm(&c, r);
    core_step(&c, r);
    core_budget(&c, r);
    core_checks(&c, r);
    if (what == CORE_STEP) return ST_OK;
    core_scaling(&c, r);
    core_ckpt(&c, r);
    return ST_OK;
}

/* ========================================================== knob search ============== */

/* Tries the knobs that keep the world size and the global batch: ZeRO stage, recompute, SP,
 * smaller micro-batches (more accumulation), more TP or PP (less DP). Keeps the variants that
 * fit with no input error, ordered by predicted step time. */
static void suggest_knobs(const PlanInput *in, PlanResult *r) {
    typedef struct { double step; double total; PlanInput v; } Cand;
    Cand best[PLAN_MAX_SUGGEST];
    int nbest = 0;
    int pps[] = {1, 2, 4, 8, 16, 32, 64}, tps[] = {1, 2, 4, 8};
    PlanResult *t = malloc(sizeof *t);
    if (!t) return;
    for (int ti = 0; ti < 4; ti++) {
        for (int pi = 0; pi < 7; pi++) {
            int tp = tps[ti], pp = pps[pi];
            if (tp < in->tp || pp < in->pp || (in->dp * in->tp * in->pp) % (tp * pp)) continue;
            int dp = in->dp * in->tp * in->pp / (tp * pp);
            if (dp < 1 || (in->grad_accum * in->dp) % dp) continue;
            for (int z = in->zero; z <= 3; z++) {
                for (int rc = in->recompute; rc <= PLAN_RECOMPUTE_FULL; rc++) {
                    for (int sp = in->sp; sp <= (tp > 1); sp++) {
                        for (int B = in->micro_batch; B >= 1; B /= 2) {
                            if (in->micro_batch % B) continue;
                            PlanInput v = *in;
                            v.tp = tp, v.pp = pp, v.dp = dp, v.zero = z, v.recompute = (PlanRecompute)rc, v.sp = sp;
                            v.micro_batch = B;
                            v.grad_accum = (int)((long long)in->grad_accum * in->dp * (in->micro_batch / B) / dp);
                            v.pp_microbatches = 0;
                            v.act_mode = PLAN_ACT_AUTO;
                            Err e;
                            if (plan_core(&v, t, CORE_STEP, &e) != ST_OK || !t->mem.fits) continue;
                            int bad = 0;
                            for (int c = 0; c < t->nchecks; c++) bad |= t->checks[c].input;
                            if (bad) continue;
                            Cand c = {t->compute.step, t->mem.total, v};
                            int pos = nbest;
                            while (pos > 0 && best[pos - 1].step > c.step) pos--;
                            if (pos >= PLAN_MAX_SUGGEST) continue;
                            int end = nbest < PLAN_MAX_SUGGEST ? nbest : PLAN_MAX_SUGGEST - 1;
                            for (int q = end; q > pos; q--) best[q] = best[q - 1];
                            best[pos] = c;
                            if (nbest < PLAN_MAX_SUGGEST) nbest++;
                            break; /* the largest micro-batch that fits is the fastest */
                        }
                    }
                }
            }
        }
    }
    free(t);
    for (int i = 0; i < nbest; i++) {
        const PlanInput *v = &best[i].v;
        char buf[200] = "";
        size_t n = 0;
#define ADD(...) n += (size_t)snprintf(buf + n, n < sizeof buf ? sizeof buf - n : 0, __VA_ARGS__)
        if (v->zero != in->zero) ADD(" --zero %d", v->zero);
        if (v->recompute != in->recompute) ADD(" --recompute %s", plan_recompute_name(v->recompute));
        if (v->sp != in->sp) ADD(" --sp");
        if (v->tp != in->tp) ADD(" --tp %d", v->tp);
        if (v->pp != in->pp) ADD(" --pp %d", v->pp);
        if (v->dp != in->dp) ADD(" --dp %d", v->dp);
        if (v->micro_batch != in->micro_batch) ADD(" --micro-batch %d", v->micro_batch);
        if (v->grad_accum != in->grad_accum) ADD(" --grad-accum %d", v->grad_accum);
        ADD(": %.2f GiB, step %.4g s (%+.0f%%)", best[i].total / 1073741824.0, best[i].step,
            100.0 * (best[i].step / r->compute.step - 1.0));
#undef ADD
        snprintf(r->suggest[i], sizeof r->suggest[i], "%s", buf[0] == ' ' ? buf + 1 : buf);
    }
    r->nsuggest = nbest;
}

/* No knob fits on this world: the fewest devices that would. Doubles the data-parallel degree (the
 * world times 2, 4, ... 4096) at the most frugal settings the trainer runs (ZeRO 3; ZeRO 1 with a
 * pipeline, none at dp 1; full recompute, --sp when tp > 1,
 * the smallest micro-batch that keeps the global batch), trying tp 1..8 and pp 1..64 at each world;
 * the first world with a layout that fits and has no input error is the answer. */
static void suggest_devices(const PlanInput *in, PlanResult *r) {
    PlanResult *t = malloc(sizeof *t);
    if (!t) return;
    int pps[] = {1, 2, 4, 8, 16, 32, 64}, tps[] = {1, 2, 4, 8};
    long long world0 = (long long)in->dp * in->tp * in->pp, seqs = (long long)in->micro_batch * in->grad_accum * in->dp;
    for (long long mult = 2; mult <= 4096 && !r->devices_needed; mult *= 2) {
        long long world = world0 * mult;
        for (int ti = 0; ti < 4 && !r->devices_needed; ti++) {
            for (int pi = 0; pi < 7 && !r->devices_needed; pi++) {
                int tp = tps[ti] > in->tp ? tps[ti] : in->tp, pp = pps[pi] > in->pp ? pps[pi] : in->pp;
                if (world % ((long long)tp * pp) || world / ((long long)tp * pp) > 1 << 20) continue;
                int dp = (int)(world / ((long long)tp * pp));
                if (seqs % dp) continue; /* the global batch must split over the replicas */
                PlanInput v = *in;
                /* the most ZeRO the trainer runs here: 3, 1 with a pipeline (par_check_grid), none at dp 1 */
                v.tp = tp, v.pp = pp, v.dp = dp, v.zero = dp == 1 ? 0 : pp > 1 ? 1 : 3;
                v.recompute = PLAN_RECOMPUTE_FULL, v.sp = tp > 1;
                v.micro_batch = 1, v.grad_accum = (int)(seqs / dp), v.pp_microbatches = 0, v.act_mode = PLAN_ACT_AUTO;
                v.world = 0;
                Err e;
                if (plan_core(&v, t, CORE_STEP, &e) != ST_OK || !t->mem.fits) continue;
                int bad = 0;
                for (int c = 0; c < t->nchecks; c++) bad |= t->checks[c].input;
                if (bad) continue;
                r->devices_needed = world;
                snprintf(r->devices_layout, sizeof r->devices_layout,
                         "--dp %d --tp %d --pp %d --zero %d --recompute full%s --micro-batch 1 --grad-accum %d: %.2f GiB",
                         dp, tp, pp, v.zero, tp > 1 ? " --sp" : "", v.grad_accum, t->mem.total / 1073741824.0);
            }
        }
    }
    free(t);
}

Status plan_compute(const PlanInput *in, PlanResult *r, Err *err) {
    Status st = plan_core(in, r, CORE_FULL, err);
    if (st != ST_OK) return st;
    if (!r->mem.fits) suggest_knobs(in, r);
    if (!r->mem.fits && r->nsuggest == 0) suggest_devices(in, r);
    return ST_OK;
}

Status plan_predict_step(const PlanInput *in, PlanResult *r, Err *err) { return plan_core(in, r, CORE_STEP, err); }

Status plan_lora_step(const PlanInput *in, const PlanResult *full, double adapter_params, double adapter_local,
                      double adapter_in, int zero, PlanLoraStep *out, Err *err) {
    memset(out, 0, sizeof *out);
    ModelConfig mc;
    if (!plan_model_to_config(&in->model, &mc) || model_config_validate(&mc, &(Err){0}) != ST_OK || in->pp > 1)
        return err_set(err, ST_ERR_INPUT, "LoRA step: expected a model this trainer builds at --pp 1");
    const PlanHardware *hw = &in->hw;
    int T = in->seq_len, dp = in->dp > 0 ? in->dp : 1, tp = in->tp > 0 ? in->tp : 1;
    double span = in->doc_mask && in->mean_doc_len > 0 ? layout_doc_span_mean(T, in->mean_doc_len) : (double)T;
    TokenFlops tf = layout_token_flops(layout_block_matmul_weights(&mc), mc.n_layer, mc.n_embd, mc.vocab, span);
    out->fpt = layout_lora_flops_per_token(&mc, span, adapter_params);
    out->fpt_hw = out->fpt + (in->recompute == PLAN_RECOMPUTE_FULL ? tf.blocks + tf.attention
                              : in->recompute == PLAN_RECOMPUTE_SELECTIVE ? tf.attention : 0);
    out->t_matmul = full->compute.fpt_hw > 0 ? full->compute.t_matmul * out->fpt_hw / full->compute.fpt_hw : 0;
    out->t_elementwise = full->compute.t_elementwise;
    if (in->lora_dropout > 0 && adapter_in > 0) {
        double rate = plan_drop_rate(hw);
        double tok = (double)in->micro_batch * in->seq_len * (in->grad_accum > 0 ? in->grad_accum : 1);
        out->t_dropout = (in->recompute == PLAN_RECOMPUTE_FULL ? 4.0 : 3.0) * adapter_in * tok / rate;
        out->t_elementwise += out->t_dropout;
    }
    out->t_tp = full->compute.t_tp;
    /* The adapters' gradients in fp32 over dp: ZeRO 0-1 one all-reduce (ZeRO 1 then all-gathers the
     * updated shard), ZeRO 2 a reduce-scatter and that all-gather, ZeRO 3 per block and micro-batch an
     * all-gather before its forward and its backward and a reduce-scatter after it (lora_train.c). */
    double bw = full->comm.dp_inter ? hw->inter_bw : hw->intra_bw, lat = full->comm.dp_inter ? hw->inter_lat : hw->intra_lat;
    double S = 4.0 * adapter_params / tp; /* one tp rank's adapters, bytes */
    if (dp > 1) {
        if (zero <= 1) out->t_dp = plan_ring_allreduce(S, dp, bw, lat) + (zero == 1 ? plan_ring_half(S, dp, bw, lat) : 0);
        else if (zero == 2) out->t_dp = 2.0 * plan_ring_half(S, dp, bw, lat);
        else out->t_dp = 3.0 * (in->grad_accum > 0 ? in->grad_accum : 1) * mc.n_layer * plan_ring_half(S / mc.n_layer, dp, bw, lat);
    }
    out->t_optimizer = adapter_local * 28.0 / hw->mem_bw; /* grad read, weight and two moments read and written */
    out->step = out->t_matmul + out->t_elementwise + out->t_tp + out->t_dp + out->t_optimizer;
    out->tokens_per_s = out->step > 0 ? (double)full->batch_tokens / out->step : 0;
    double peak = full->compute.peak;
    out->mfu = peak > 0 ? out->fpt * out->tokens_per_s / ((double)dp * tp * peak) : 0;
    return ST_OK;
}

/* ------------------------------------------------------------ hardware profiles ------- */

#define HW_FIELDS(X)                                                                        \
    X(peak_fp32) X(peak_bf16) X(peak_fp16) X(memory) X(mem_bw) X(intra_bw) X(inter_bw)     \
    X(intra_lat) X(inter_lat) X(matmul_eff) X(matmul_eff_bf16) X(storage_bw) X(backend_bytes) X(drop_rate)

cJSON *plan_hardware_to_json(const PlanHardware *hw) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", hw->name);
#define ADD(f) cJSON_AddNumberToObject(o, #f, hw->f);
    HW_FIELDS(ADD)
#undef ADD
    cJSON_AddNumberToObject(o, "devices_per_node", hw->devices_per_node);
    return o;
}

Status plan_hardware_from_json(PlanHardware *hw, const cJSON *j, Err *err) {
    Status st = plan_hardware_preset(hw, "cpu-zen4-2c", err);
    if (st != ST_OK) return st;
    if (!cJSON_IsObject(j)) return err_set(err, ST_ERR_INPUT, "hardware profile: expected a JSON object");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(j, "name");
    if (cJSON_IsString(name)) snprintf(hw->name, sizeof hw->name, "%s", name->valuestring);
    /* Every key is one the profile has (a misspelt one priced on the preset's figure silently);
     * `plan --json`'s "hardware" object reads back as it is: its "memory_bytes" is "memory", its
     * "default" says nothing of the hardware. */
#define NAME(f) #f,
    static const char *const known[] = {HW_FIELDS(NAME) "name", "devices_per_node", "memory_bytes", "default"};
#undef NAME
    for (const cJSON *k = j->child; k; k = k->next) {
        size_t i = 0;
        while (i < sizeof known / sizeof known[0] && strcmp(k->string, known[i])) i++;
        if (i < sizeof known / sizeof known[0]) continue;
        char list[512] = "";
        for (size_t q = 0, n = 0; q + 2 < sizeof known / sizeof known[0]; q++) /* the profile's own keys */
            n += (size_t)snprintf(list + n, n < sizeof list ? sizeof list - n : 0, "%s%s", q ? ", " : "", known[q]);
        return err_set(err, ST_ERR_INPUT, "hardware profile: unknown key '%s' (expected %s)", k->string, list);
    }
    const cJSON *mb = cJSON_GetObjectItemCaseSensitive(j, "memory_bytes");
    if (mb && cJSON_GetObjectItemCaseSensitive(j, "memory"))
        return err_set(err, ST_ERR_INPUT, "hardware profile: expected one of memory and memory_bytes, found both");
    if (mb && !(cJSON_IsNumber(mb) && mb->valuedouble >= 0 && isfinite(mb->valuedouble)))
        return err_set(err, ST_ERR_INPUT, "hardware profile: memory_bytes: expected a number >= 0");
    if (mb) hw->memory = mb->valuedouble;
#define GET(f)                                                                                                     \
    {                                                                                                              \
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, #f);                                                 \
        if (x && !cJSON_IsNumber(x)) return err_set(err, ST_ERR_INPUT, "hardware profile: %s: expected a number", #f); \
        if (x && !(x->valuedouble >= 0 && isfinite(x->valuedouble)))                                              \
            return err_set(err, ST_ERR_INPUT, "hardware profile: %s: expected a number >= 0, found %g", #f,          \
                           x->valuedouble);                                                                        \
        if (x) hw->f = x->valuedouble;                                                                             \
    }
    HW_FIELDS(GET)
#undef GET
    /* A whole count, named by the profile's key: 2.5 was truncated to 2, and 0 was refused as the
     * --devices-per-node flag, which had not been given. */
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(j, "devices_per_node");
    if (d && !cJSON_IsNumber(d))
        return err_set(err, ST_ERR_INPUT, "hardware profile: devices_per_node: expected a number");
    if (d && (!(d->valuedouble >= 1 && d->valuedouble <= 1e6) || d->valuedouble != floor(d->valuedouble)))
        return err_set(err, ST_ERR_INPUT, "hardware profile: devices_per_node: expected a whole number 1..1000000, found %g",
                       d->valuedouble);
    if (d) hw->devices_per_node = (int)d->valuedouble;
    if (!(hw->peak_fp32 > 0) || !(hw->mem_bw > 0) || !(hw->matmul_eff > 0 && hw->matmul_eff <= 1))
        return err_set(err, ST_ERR_INPUT,
                       "hardware profile: expected peak_fp32 > 0, mem_bw > 0 and matmul_eff in (0, 1], found %g, %g, %g",
                       hw->peak_fp32, hw->mem_bw, hw->matmul_eff);
    /* bounded as plan_validate bounds it: the trainer prices its cached profile without that check */
    if (hw->matmul_eff_bf16 > 1)
        return err_set(err, ST_ERR_INPUT, "hardware profile: matmul_eff_bf16: expected a fraction in [0, 1] (0: matmul_eff), "
                       "found %g", hw->matmul_eff_bf16);
    return ST_OK;
}
