/* train.c — the step loop: data, forward, backward, clip, optimizer, validation, metrics. */
#include "train/train.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/safetensors.h"
#include "core/mem.h"
#include "core/peak.h"
#include "core/timer.h"
#include "data/loader.h"
#include "model/gpt.h"
#include "model/layout.h"
#include "model/matmul.h"

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
    c.threads = 2;
    c.val_every = 100, c.val_batches = 10;
    return c;
}

double train_flops_per_token(const ModelConfig *m, int T) {
    double L = m->n_layer, C = m->n_embd, V = m->vocab;
    return 6.0 * (L * 12.0 * C * C + V * C) + 12.0 * L * T * C;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, long n) {
    if (n <= 0) return NAN;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* One JSON Lines record; "event" first. Takes ownership of o. */
static void log_event(FILE *f, cJSON *o) {
    if (f) {
        char *s = cJSON_PrintUnformatted(o);
        if (s) {
            fputs(s, f);
            fputc('\n', f);
            fflush(f);
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

static cJSON *config_json(const TrainConfig *c) {
    cJSON *o = cJSON_CreateObject();
    cJSON *m = cJSON_AddObjectToObject(o, "model");
    cJSON_AddNumberToObject(m, "layers", c->model.n_layer);
    cJSON_AddNumberToObject(m, "heads", c->model.n_head);
    cJSON_AddNumberToObject(m, "channels", c->model.n_embd);
    cJSON_AddNumberToObject(m, "vocab", c->model.vocab);
    cJSON_AddNumberToObject(m, "vocab_padded", c->model.vocab_padded);
    cJSON_AddNumberToObject(m, "max_seq_len", c->model.max_seq);
    cJSON_AddNumberToObject(m, "dropout", c->model.dropout);
    cJSON_AddStringToObject(o, "data", c->data);
    cJSON_AddStringToObject(o, "val_data", c->val_data);
    cJSON_AddStringToObject(o, "tokenizer", c->tokenizer);
    cJSON_AddNumberToObject(o, "micro_batch", c->micro_batch);
    cJSON_AddNumberToObject(o, "seq_len", c->seq_len);
    cJSON_AddNumberToObject(o, "grad_accum", c->grad_accum);
    cJSON_AddStringToObject(o, "optimizer", optim_kind_name(c->optim.kind));
    cJSON_AddNumberToObject(o, "beta1", c->optim.beta1);
    cJSON_AddNumberToObject(o, "beta2", c->optim.beta2);
    cJSON_AddNumberToObject(o, "eps", c->optim.eps);
    cJSON_AddNumberToObject(o, "weight_decay", c->optim.weight_decay);
    cJSON_AddNumberToObject(o, "momentum", c->optim.momentum);
    cJSON_AddStringToObject(o, "schedule", sched_kind_name(c->sched.kind));
    cJSON_AddNumberToObject(o, "lr", c->sched.lr);
    cJSON_AddNumberToObject(o, "min_lr", c->sched.min_lr);
    cJSON_AddNumberToObject(o, "warmup", (double)c->sched.warmup);
    cJSON_AddNumberToObject(o, "decay_frac", c->sched.decay_frac);
    cJSON_AddStringToObject(o, "decay_shape", sched_shape_name(c->sched.decay_shape));
    cJSON_AddNumberToObject(o, "grad_clip", c->grad_clip);
    cJSON_AddNumberToObject(o, "steps", (double)c->steps);
    cJSON_AddNumberToObject(o, "seed", (double)c->seed);
    cJSON_AddNumberToObject(o, "data_seed", (double)c->data_seed);
    cJSON_AddNumberToObject(o, "threads", c->threads);
    cJSON_AddNumberToObject(o, "val_every", c->val_every);
    cJSON_AddNumberToObject(o, "val_batches", c->val_batches);
    cJSON_AddStringToObject(o, "log", c->log_path);
    cJSON_AddStringToObject(o, "out", c->out_dir);
    return o;
}

static Status validate(const TrainConfig *c, Err *err) {
    if (c->micro_batch < 1)
        return err_set(err, ST_ERR_INPUT, "--micro-batch: expected a positive integer, found %d", c->micro_batch);
    if (c->seq_len < 1) return err_set(err, ST_ERR_INPUT, "--seq-len: expected a positive integer, found %d", c->seq_len);
    if (c->grad_accum < 1)
        return err_set(err, ST_ERR_INPUT, "--grad-accum: expected a positive integer, found %d", c->grad_accum);
    if (c->steps < 1) return err_set(err, ST_ERR_INPUT, "--steps: expected a positive integer, found %ld", c->steps);
    if (c->threads < 1 || c->threads > 1024)
        return err_set(err, ST_ERR_INPUT, "--threads: expected 1..1024, found %d", c->threads);
    if (!(c->sched.lr >= 0)) return err_set(err, ST_ERR_INPUT, "--lr: expected a value >= 0, found %g", c->sched.lr);
    if (!(c->sched.min_lr >= 0 && c->sched.min_lr <= c->sched.lr))
        return err_set(err, ST_ERR_INPUT, "--min-lr: expected a value in [0, --lr=%g], found %g", c->sched.lr,
                       c->sched.min_lr);
    if (c->sched.warmup < 0) return err_set(err, ST_ERR_INPUT, "--warmup: expected >= 0, found %ld", c->sched.warmup);
    if (!(c->sched.decay_frac >= 0 && c->sched.decay_frac <= 1))
        return err_set(err, ST_ERR_INPUT, "--decay-frac: expected a value in [0, 1], found %g", c->sched.decay_frac);
    if (!(c->optim.beta1 >= 0 && c->optim.beta1 < 1))
        return err_set(err, ST_ERR_INPUT, "--beta1: expected a value in [0, 1), found %g", c->optim.beta1);
    if (!(c->optim.beta2 >= 0 && c->optim.beta2 < 1))
        return err_set(err, ST_ERR_INPUT, "--beta2: expected a value in [0, 1), found %g", c->optim.beta2);
    if (!(c->optim.eps >= 0)) return err_set(err, ST_ERR_INPUT, "--eps: expected a value >= 0, found %g", c->optim.eps);
    if (!(c->optim.weight_decay >= 0))
        return err_set(err, ST_ERR_INPUT, "--weight-decay: expected a value >= 0, found %g", c->optim.weight_decay);
    if (c->val_batches < 1)
        return err_set(err, ST_ERR_INPUT, "--val-batches: expected a positive integer, found %d", c->val_batches);
    if (c->val_every < 0) return err_set(err, ST_ERR_INPUT, "--val-every: expected >= 0, found %d", c->val_every);
    if (!c->data[0]) return err_set(err, ST_ERR_INPUT, "--data: expected a token shard path or glob, found none");
    return ST_OK;
}

/* Mean loss over `batches` sequential micro-batches of the validation stream. */
static double validate_loss(Gpt *g, Loader *val, int batches, int32_t *inp, int32_t *tgt) {
    int B = g->B, T = g->T;
    uint64_t avail = val->nwin / (uint64_t)B;
    if ((uint64_t)batches > avail) batches = (int)(avail ? avail : 1);
    double sum = 0, count = 0;
    for (int j = 0; j < batches; j++) {
        int rows = val->nwin < (uint64_t)B ? (int)val->nwin : B;
        loader_fill(val, (uint64_t)j * B, rows, inp, tgt);
        sum += gpt_forward(g, inp, tgt, rows, T, 0.0f, 0, 0);
        for (int i = 0; i < rows * T; i++) count += tgt[i] >= 0;
    }
    return count > 0 ? sum / count : NAN;
}

Status train_run(const TrainConfig *cfg_in, TrainResult *res, Err *err) {
    TrainConfig cfg = *cfg_in;
    Status st = validate(&cfg, err);
    if (st != ST_OK) return st;
    memset(res, 0, sizeof *res);
    res->first_val = res->last_val = NAN;

    MemStats mem = {0};
    Loader train = {0}, val = {0};
    Gpt g = {0};
    float *m = NULL, *v = NULL;
    int32_t *inp = NULL, *tgt = NULL;
    OptimRange *ranges = NULL;
    double *step_ms = NULL;
    FILE *log = NULL;
    int B = cfg.micro_batch, T = cfg.seq_len, k = cfg.grad_accum, nt = cfg.threads;
    size_t moment_bytes = 0;

    if ((st = loader_open(&train, cfg.data, T, 0, cfg.tokenizer_hash, cfg.data_seed, 1, err)) != ST_OK) goto done;
    if (cfg.model.vocab == 0) {
        cfg.model.vocab = (int)loader_header_vocab(&train);
        if (cfg.model.vocab == 0) {
            st = err_set(err, ST_ERR_INPUT, "--vocab: not given and the shard headers of %s record no vocabulary size",
                         cfg.data);
            goto done;
        }
    }
    if ((st = model_config_validate(&cfg.model, err)) != ST_OK) goto done;
    if ((st = loader_check_vocab(&train, (uint32_t)cfg.model.vocab, err)) != ST_OK) goto done;
    if (cfg.val_data[0]) {
        if ((st = loader_open(&val, cfg.val_data, T, (uint32_t)cfg.model.vocab, cfg.tokenizer_hash, 0, 0, err)) != ST_OK)
            goto done;
    }
    cfg.sched.total = cfg.steps;

    mm_set_threads(nt);
    if ((st = gpt_init(&g, &cfg.model, B, T, nt, 1, &mem, err)) != ST_OK) goto done;
    gpt_init_params(&g, cfg.seed);
    g.dropout_seed = cfg.seed ^ 0xd509u;

    size_t total = g.layout.total;
    moment_bytes = total * sizeof(float);
    m = mem_alloc(&mem, MEM_MOMENTS, moment_bytes);
    if (optim_num_moments(&cfg.optim) == 2) v = mem_alloc(&mem, MEM_MOMENTS, moment_bytes);
    inp = mem_alloc(&mem, MEM_DATA, (size_t)k * B * T * sizeof(int32_t));
    tgt = mem_alloc(&mem, MEM_DATA, (size_t)k * B * T * sizeof(int32_t));
    ranges = calloc((size_t)g.layout.ntensors, sizeof *ranges);
    step_ms = calloc((size_t)cfg.steps, sizeof *step_ms);
    if (!m || (optim_num_moments(&cfg.optim) == 2 && !v) || !inp || !tgt || !ranges || !step_ms) {
        st = err_set(err, ST_ERR_RUNTIME, "out of memory allocating optimizer state and batches");
        goto done;
    }
    for (int i = 0; i < g.layout.ntensors; i++) {
        const TensorInfo *t = &g.layout.tensors[i];
        ranges[i] = (OptimRange){t->offset, t->numel, t->decay};
    }
    if (cfg.log_path[0]) {
        log = fopen(cfg.log_path, "w");
        if (!log) {
            st = err_set(err, ST_ERR_INPUT, "--log %s: cannot open for writing", cfg.log_path);
            goto done;
        }
    }

    double peak = cfg.peak_flops > 0 ? cfg.peak_flops : peak_measure_fp32(nt, 200.0);
    double fpt = train_flops_per_token(&cfg.model, T);
    long long nparams = model_config_num_params(&cfg.model);
    res->num_params = nparams;
    long long batch_seqs = (long long)B * k, batch_tokens = batch_seqs * T;
    ActSizes as = layout_activations(&cfg.model, B, T, nt);
    if (!cfg.quiet) {
        printf("model: L=%d NH=%d C=%d V=%d (padded %d) maxT=%d, %lld parameters\n", cfg.model.n_layer,
               cfg.model.n_head, cfg.model.n_embd, cfg.model.vocab, cfg.model.vocab_padded, cfg.model.max_seq,
               nparams);
        printf("data: %zu train tokens in %d shard(s), %llu windows of %d+1%s\n", train.total_tokens, train.nshards,
               (unsigned long long)train.nwin, T, val.nshards ? "" : ", no validation data");
        printf("batch: micro-batch %d x seq %d x accumulation %d = %lld sequences = %lld tokens per step\n", B, T, k,
               batch_seqs, batch_tokens);
        printf("memory: params %.1f MiB, grads %.1f MiB, moments %.1f MiB, activations %.1f MiB, workspace %.1f MiB\n",
               mem.bytes[MEM_PARAMS] / 1048576.0, mem.bytes[MEM_GRADS] / 1048576.0, mem.bytes[MEM_MOMENTS] / 1048576.0,
               mem.bytes[MEM_ACTIVATIONS] / 1048576.0, mem.bytes[MEM_WORKSPACE] / 1048576.0);
        printf("compute: %.3g FLOP/token, peak %.1f GFLOP/s (%s), %d threads, %s\n", fpt, peak / 1e9,
               cfg.peak_flops > 0 ? "given" : "measured", nt, mm_backend_info());
        fflush(stdout);
    }
    {
        cJSON *o = event("start");
        cJSON_AddNumberToObject(o, "schema_version", METRICS_SCHEMA_VERSION);
        cJSON_AddItemToObject(o, "config", config_json(&cfg));
        cJSON *b = cJSON_AddObjectToObject(o, "build");
        cJSON_AddStringToObject(b, "git_commit", build_git_commit());
        cJSON_AddStringToObject(b, "compiler", build_compiler());
        cJSON_AddStringToObject(b, "gemm", mm_backend_info());
        cJSON_AddNumberToObject(b, "threads", nt);
        if (cfg.argv_joined) cJSON_AddStringToObject(b, "command", cfg.argv_joined);
        cJSON *eb = cJSON_AddObjectToObject(o, "effective_batch");
        cJSON_AddNumberToObject(eb, "sequences", (double)batch_seqs);
        cJSON_AddNumberToObject(eb, "tokens", (double)batch_tokens);
        cJSON_AddNumberToObject(o, "num_params", (double)nparams);
        cJSON_AddNumberToObject(o, "flops_per_token", fpt);
        cJSON_AddNumberToObject(o, "peak_flops", peak);
        cJSON_AddStringToObject(o, "peak_source", cfg.peak_flops > 0 ? "given" : "measured");
        cJSON *mp = cJSON_AddObjectToObject(o, "memory_planned");
        cJSON_AddNumberToObject(mp, "parameters", (double)total * 4);
        cJSON_AddNumberToObject(mp, "gradients", (double)total * 4);
        cJSON_AddNumberToObject(mp, "optimizer_moments", (double)moment_bytes * optim_num_moments(&cfg.optim));
        cJSON_AddNumberToObject(mp, "activations", (double)as.total * 4);
        cJSON_AddNumberToObject(mp, "workspace", (double)as.scratch * 4);
        log_event(log, o);
    }
    {
        cJSON *o = event("memory");
        cJSON *mm = cJSON_AddObjectToObject(o, "measured");
        for (int c = 0; c < MEM_NCAT; c++) cJSON_AddNumberToObject(mm, mem_category_name((MemCategory)c), (double)mem.bytes[c]);
        log_event(log, o);
    }

    double ms_total = 0;
    for (long step = 1; step <= cfg.steps; step++) {
        double t0 = timer_ms();
        /* Data: the samples of this step, then its unmasked-token count (the loss denominator). */
        loader_fill(&train, (uint64_t)(step - 1) * (uint64_t)(B * k), B * k, inp, tgt);
        long ntok = 0;
        for (size_t i = 0; i < (size_t)k * B * T; i++) ntok += tgt[i] >= 0;
        double t1 = timer_ms();
        gpt_zero_grads(&g);
        g.ms_fwd = g.ms_bwd = 0;
        double loss_sum = 0;
        float dscale = ntok > 0 ? 1.0f / (float)ntok : 0.0f;
        for (int j = 0; j < k; j++) {
            size_t off = (size_t)j * B * T;
            loss_sum += gpt_forward(&g, inp + off, tgt + off, B, T, dscale, 1, (uint64_t)(step - 1) * k + j);
            gpt_backward(&g);
        }
        double loss = ntok > 0 ? loss_sum / ntok : 0.0;
        double t2 = timer_ms();
        double norm = optim_l2_norm(g.grads, total, nt);
        float scale = optim_clip_scale(norm, cfg.grad_clip);
        float lr = sched_lr(&cfg.sched, step);
        if (!isfinite(loss) || !isfinite(norm)) {
            st = err_set(err, ST_ERR_RUNTIME, "step %ld: loss %g, gradient norm %g: training diverged (lower --lr?)",
                         step, loss, norm);
            goto done;
        }
        optim_step(&cfg.optim, g.params, g.grads, m, v, ranges, g.layout.ntensors, step, lr, scale, nt);
        double t3 = timer_ms();
        double dt = t3 - t0;
        step_ms[step - 1] = dt;
        ms_total += dt;
        double tok_s = batch_tokens / (dt * 1e-3);
        double mfu = fpt * tok_s / peak;
        if (step == 1) res->first_loss = loss;
        res->last_loss = loss;
        res->steps_done = step;
        if (!cfg.quiet) {
            printf("step %5ld/%ld | loss %.4f | lr %.2e | norm %.3f -> %.3f | %7.1f ms | %6.0f tok/s | MFU %4.1f%%\n",
                   step, cfg.steps, loss, lr, norm, norm * scale, dt, tok_s, 100 * mfu);
            fflush(stdout);
        }
        cJSON *o = event("step");
        cJSON_AddNumberToObject(o, "step", (double)step);
        cJSON_AddNumberToObject(o, "loss", loss);
        cJSON_AddNumberToObject(o, "lr", lr);
        cJSON_AddNumberToObject(o, "grad_norm", norm);
        cJSON_AddNumberToObject(o, "grad_norm_clipped", norm * scale);
        cJSON_AddNumberToObject(o, "tokens", (double)ntok);
        cJSON_AddNumberToObject(o, "tokens_seen", (double)batch_tokens * step);
        cJSON_AddNumberToObject(o, "tokens_per_s", tok_s);
        cJSON_AddNumberToObject(o, "mfu", mfu);
        cJSON *tm = cJSON_AddObjectToObject(o, "time_ms");
        cJSON_AddNumberToObject(tm, "total", dt);
        cJSON_AddNumberToObject(tm, "data", t1 - t0);
        cJSON_AddNumberToObject(tm, "forward", g.ms_fwd);
        cJSON_AddNumberToObject(tm, "backward", (t2 - t1) - g.ms_fwd);
        cJSON_AddNumberToObject(tm, "comm", 0);
        cJSON_AddNumberToObject(tm, "optimizer", t3 - t2);
        cJSON_AddNumberToObject(tm, "checkpoint", 0);
        log_event(log, o);

        int last = step == cfg.steps;
        if (val.nshards && ((cfg.val_every > 0 && (step % cfg.val_every == 0 || step == 1)) || last)) {
            double tv = timer_ms();
            double vl = validate_loss(&g, &val, cfg.val_batches, inp, tgt);
            double vms = timer_ms() - tv;
            if (isnan(res->first_val)) res->first_val = vl;
            res->last_val = vl;
            if (!cfg.quiet) {
                printf("val   %5ld | loss %.4f | perplexity %.2f | %.0f ms\n", step, vl, exp(vl), vms);
                fflush(stdout);
            }
            cJSON *ov = event("val");
            cJSON_AddNumberToObject(ov, "step", (double)step);
            cJSON_AddNumberToObject(ov, "loss", vl);
            cJSON_AddNumberToObject(ov, "perplexity", exp(vl));
            cJSON_AddNumberToObject(ov, "time_ms", vms);
            log_event(log, ov);
        }
    }
    res->median_step_ms = median(step_ms + (cfg.steps > 1), cfg.steps - (cfg.steps > 1));
    res->tokens_per_s = batch_tokens / (res->median_step_ms * 1e-3);
    if (cfg.out_dir[0]) {
        if ((st = st_save_hf(&g, cfg.out_dir, cfg.tokenizer, err)) != ST_OK) goto done;
        if (!cfg.quiet) printf("saved weights to %s/model.safetensors\n", cfg.out_dir);
    }
    {
        cJSON *o = event("end");
        cJSON_AddNumberToObject(o, "steps", (double)res->steps_done);
        cJSON_AddNumberToObject(o, "final_loss", res->last_loss);
        cJSON_AddNumberToObject(o, "final_val_loss", res->last_val);
        cJSON_AddNumberToObject(o, "median_step_ms", res->median_step_ms);
        cJSON_AddNumberToObject(o, "tokens_per_s", res->tokens_per_s);
        cJSON_AddNumberToObject(o, "wall_s", ms_total * 1e-3);
        log_event(log, o);
    }
    if (!cfg.quiet)
        printf("done: %ld steps, median %.1f ms/step, %.0f tokens/s\n", res->steps_done, res->median_step_ms,
               res->tokens_per_s);
done:
    if (log) fclose(log);
    free(ranges);
    free(step_ms);
    mem_free(&mem, MEM_DATA, inp, (size_t)k * B * T * sizeof(int32_t));
    mem_free(&mem, MEM_DATA, tgt, (size_t)k * B * T * sizeof(int32_t));
    mem_free(&mem, MEM_MOMENTS, m, moment_bytes);
    mem_free(&mem, MEM_MOMENTS, v, moment_bytes);
    gpt_free(&g);
    loader_close(&train);
    loader_close(&val);
    return st;
}
