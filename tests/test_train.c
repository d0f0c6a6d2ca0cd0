/* test_train.c — accumulation, masking, determinism and the smoke run of the trainer.
 *
 * Oracles: one batch of k·B vs k accumulated micro-batches of B (per-tensor relative norm
 * <= 1e-6); a sequence whose last positions are masked vs the same sequence truncated before
 * them (causality: identical loss and gradients, 1e-6); two runs with the same seeds and threads
 * (memcmp of the saved weights and of every logged loss); 100 steps on Tiny Shakespeare (bytes)
 * end below where they start; a GEMM that fails (matmul's test-only fault) ends train_run with
 * ST_ERR_RUNTIME naming the GEMM's shape instead of aborting, where the same run without the
 * fault succeeds. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileio.h"
#include "core/rng.h"
#include "data/shard.h"
#include "model/gpt.h"
#include "model/matmul.h"
#include "testutil.h"
#include "train/train.h"

static ModelConfig small_cfg(float dropout) {
    ModelConfig m = {2, 4, 32, 97, 0, 32, dropout};
    Err e;
    model_config_validate(&m, &e);
    return m;
}

static void fill_tokens(int32_t *x, int n, uint64_t stream, int V) {
    for (int i = 0; i < n; i++) x[i] = (int32_t)rng_below(5, stream, (uint64_t)i, (uint64_t)V);
}

static void test_accumulation(float dropout) {
    ModelConfig mc = small_cfg(dropout);
    int B = 2, k = 3, T = 16;
    Gpt big, small;
    Err e;
    GptOptions o = gpt_default_options();
    o.B = B * k, o.T = T, o.threads = 2;
    gpt_init(&big, &mc, &o, NULL, &e);
    o.B = B;
    gpt_init(&small, &mc, &o, NULL, &e);
    gpt_init_params(&big, 11);
    gpt_init_params(&small, 11);
    int32_t inp[6 * 16], tgt[6 * 16];
    fill_tokens(inp, B * k * T, 1, mc.vocab);
    fill_tokens(tgt, B * k * T, 2, mc.vocab);
    tgt[5] = tgt[40] = -1;
    long ntok = B * k * T - 2;
    gpt_zero_grads(&big);
    double lb = gpt_forward(&big, inp, tgt, B * k, T, 1.0f / ntok, 1, 0);
    gpt_backward(&big);
    gpt_zero_grads(&small);
    double ls = 0;
    for (int j = 0; j < k; j++) {
        ls += gpt_forward(&small, inp + j * B * T, tgt + j * B * T, B, T, 1.0f / ntok, 1, 0);
        gpt_backward(&small);
    }
    double worst = 0;
    for (int t = 0; t < big.w.layout.ntensors; t++) {
        const TensorInfo *ti = &big.w.layout.tensors[t];
        double r = tu_rel_err_f(small.d.grads + ti->offset, big.d.grads + ti->offset, ti->numel);
        if (!(r <= worst)) worst = r;
    }
    char name[128];
    if (dropout > 0) {
        /* With dropout the masks of a micro-batch depend on its slot, so only the loss scale is
         * comparable; check the accumulated gradient is finite and non-zero instead. */
        double n = 0;
        for (size_t i = 0; i < small.w.layout.total; i++) n += (double)small.d.grads[i] * small.d.grads[i];
        tu_check(isfinite(n) && n > 0, "accumulation with dropout runs", "grad norm^2=%.3g", n);
    } else {
        snprintf(name, sizeof name, "accumulation 3x2 == 1x6 gradients");
        tu_check(worst <= 1e-6, name, "worst per-tensor rel_err=%.3g (tol 1e-6)", worst);
        tu_check(fabs(lb - ls) / lb <= 1e-6, "accumulation loss", "one batch %.9f, accumulated %.9f", lb / ntok,
                 ls / ntok);
    }
    gpt_free(&big);
    gpt_free(&small);
}


/* Recompute: selective and full give bit-identical gradients to none (dropout on, so the masks
 * must be regenerated exactly), and allocate exactly the planned activation bytes, fewer each; in
 * fp32 and in bf16, where the LayerNorm and GELU outputs are stored (and recomputed) as bf16. */
static void test_recompute(int bf16) {
    ModelConfig mc = small_cfg(0.1f);
    int B = 3, T = 20;
    int32_t inp[60], tgt[60];
    fill_tokens(inp, B * T, 7, mc.vocab);
    fill_tokens(tgt, B * T, 8, mc.vocab);
    float *ref = NULL;
    double ref_loss = 0;
    size_t prev_bytes = 0;
    const char *prec = bf16 ? "bf16" : "fp32";
    for (int rc = RECOMPUTE_NONE; rc <= RECOMPUTE_FULL; rc++) {
        Gpt g;
        Err e;
        MemStats ms = {0};
        GptOptions o = gpt_default_options();
        o.B = B, o.T = T, o.threads = 2, o.recompute = (Recompute)rc, o.precision = bf16 ? GPT_BF16 : GPT_FP32;
        gpt_init(&g, &mc, &o, &ms, &e);
        gpt_init_params(&g, 21);
        gpt_sync_lp(&g);
        gpt_zero_grads(&g);
        double loss = gpt_forward(&g, inp, tgt, B, T, 1.0f / (B * T), 1, 5);
        gpt_backward(&g);
        ActSizes as = layout_activations_prec(&mc, B, T, 2, (Recompute)rc, bf16);
        char name[96];
        if (rc == RECOMPUTE_NONE) {
            ref = malloc(g.w.layout.total * 4);
            memcpy(ref, g.d.grads, g.w.layout.total * 4);
            ref_loss = loss;
        } else {
            snprintf(name, sizeof name, "%s recompute %s: gradients bit-identical to none", prec,
                     layout_recompute_name(rc));
            tu_check(!memcmp(ref, g.d.grads, g.w.layout.total * 4) && loss == ref_loss, name, "memcmp over %zu floats",
                     g.w.layout.total);
        }
        snprintf(name, sizeof name, "%s recompute %s: activation bytes allocated == planned", prec,
                 layout_recompute_name(rc));
        tu_check(ms.bytes[MEM_ACTIVATIONS] == as.total * 4 && (rc == 0 || ms.bytes[MEM_ACTIVATIONS] < prev_bytes),
                 name, "allocated %zu, planned %zu, previous level %zu", ms.bytes[MEM_ACTIVATIONS], as.total * 4,
                 prev_bytes);
        prev_bytes = ms.bytes[MEM_ACTIVATIONS];
        gpt_free(&g);
    }
    free(ref);
    if (bf16) {
        /* bf16 stores 6·N·C fewer floats' worth per layer than fp32: half of ln1, ln2 and the GELU output. */
        ActSizes a32 = layout_activations_prec(&mc, B, T, 2, RECOMPUTE_NONE, 0);
        ActSizes a16 = layout_activations_prec(&mc, B, T, 2, RECOMPUTE_NONE, 1);
        size_t want = (size_t)mc.n_layer * 3 * B * T * mc.n_embd;
        tu_check(a32.total - a16.total == want, "bf16 activations: LayerNorm and GELU outputs in 2 bytes",
                 "fp32 %zu floats, bf16 %zu, difference %zu (expected L·3·N·C = %zu)", a32.total, a16.total,
                 a32.total - a16.total, want);
    }
}

static void test_mask(void) {
    ModelConfig mc = small_cfg(0);
    int T = 16, Tcut = 11;
    Gpt a, b;
    Err e;
    GptOptions o = gpt_default_options();
    o.T = T, o.threads = 2;
    gpt_init(&a, &mc, &o, NULL, &e);
    o.T = Tcut;
    gpt_init(&b, &mc, &o, NULL, &e);
    gpt_init_params(&a, 3);
    gpt_init_params(&b, 3);
    int32_t inp[16], tgt[16];
    fill_tokens(inp, T, 3, mc.vocab);
    fill_tokens(tgt, T, 4, mc.vocab);
    for (int t = Tcut; t < T; t++) tgt[t] = -1; /* masked: must change nothing */
    gpt_zero_grads(&a);
    double la = gpt_forward(&a, inp, tgt, 1, T, 1.0f / Tcut, 1, 0) / Tcut;
    gpt_backward(&a);
    gpt_zero_grads(&b);
    double lb = gpt_forward(&b, inp, tgt, 1, Tcut, 1.0f / Tcut, 1, 0) / Tcut;
    gpt_backward(&b);
    double worst = 0;
    for (int t = 0; t < a.w.layout.ntensors; t++) {
        const TensorInfo *ti = &a.w.layout.tensors[t];
        double r = tu_rel_err_f(a.d.grads + ti->offset, b.d.grads + ti->offset, ti->numel);
        if (!(r <= worst)) worst = r;
    }
    tu_check(fabs(la - lb) <= 1e-6 * lb && worst <= 1e-6, "masked targets change nothing",
             "loss %.9f vs truncated %.9f, worst grad rel_err=%.3g (tol 1e-6)", la, lb, worst);
    /* Per-token losses: masked positions contribute exactly 0, the others equal the truncated run's. */
    int zero = 1;
    double worst_tok = 0;
    for (int t = Tcut; t < T; t++) zero &= a.s.losses[t] == 0.0f;
    for (int t = 0; t < Tcut; t++) {
        double d = fabs((double)a.s.losses[t] - b.s.losses[t]);
        if (!(d <= worst_tok)) worst_tok = d;
    }
    tu_check(zero && worst_tok <= 1e-5, "masked positions contribute nothing to the loss",
             "masked losses all 0: %s, unmasked max diff %.3g", zero ? "yes" : "no", worst_tok);
    gpt_free(&a);
    gpt_free(&b);
}

/* Writes Tiny Shakespeare as byte tokens (EOT 256) into train/val shards under dir. */
static void write_byte_shards(const char *dir) {
    char path[1024], *text;
    size_t len;
    Err e;
    snprintf(path, sizeof path, "%s/data/tinyshakespeare/input.txt", ST_SOURCE_DIR);
    if (file_read_all(path, &text, &len, &e) != ST_OK) {
        printf("%s\n", e.msg);
        exit(1);
    }
    file_mkdirs(dir, &e);
    size_t nval = len / 10, ntr = len - nval;
    uint32_t *tok = malloc((len + 2) * sizeof(uint32_t));
    for (size_t i = 0; i < len; i++) tok[i] = (uint8_t)text[i];
    ShardMeta meta = {0, ntr, 257};
    snprintf(path, sizeof path, "%s/train.bin", dir);
    if (shard_write(path, tok, ntr, &meta, &e) != ST_OK) printf("%s\n", e.msg), exit(1);
    meta.source_bytes = nval;
    snprintf(path, sizeof path, "%s/val.bin", dir);
    if (shard_write(path, tok + ntr, nval, &meta, &e) != ST_OK) printf("%s\n", e.msg), exit(1);
    free(tok);
    free(text);
}

static TrainConfig tiny_run(const char *dir, const char *out, const char *log, long steps) {
    TrainConfig c = train_default_config();
    c.model = (ModelConfig){2, 4, 64, 0, 0, 64, 0.0f};
    snprintf(c.data, sizeof c.data, "%s/train.bin", dir);
    snprintf(c.val_data, sizeof c.val_data, "%s/val.bin", dir);
    snprintf(c.out_dir, sizeof c.out_dir, "%s", out);
    snprintf(c.log_path, sizeof c.log_path, "%s", log);
    c.micro_batch = 8, c.seq_len = 64, c.grad_accum = 2;
    c.steps = steps, c.sched.warmup = 10, c.sched.lr = 3e-3f, c.sched.min_lr = 3e-4f;
    c.val_every = 50, c.val_batches = 4, c.threads = 2, c.quiet = 1, c.peak_flops = 1e11;
    return c;
}

/* The "loss" values of the step events of a metrics log, in order. */
static int read_losses(const char *log, char *buf, size_t cap) {
    char *text;
    size_t len;
    Err e;
    if (file_read_all(log, &text, &len, &e) != ST_OK) return 0;
    size_t o = 0;
    int n = 0;
    for (char *p = strstr(text, "\"event\":\"step\""); p; p = strstr(p + 1, "\"event\":\"step\"")) {
        char *l = strstr(p, "\"loss\":");
        char *end = l ? strchr(l, ',') : NULL;
        if (!end) break;
        size_t k = (size_t)(end - l);
        if (o + k + 1 < cap) memcpy(buf + o, l, k), o += k, buf[o++] = ';', n++;
    }
    buf[o] = 0;
    free(text);
    return n;
}

static void test_runs(void) {
    const char *dir = ST_BINARY_DIR "/test_train_data";
    write_byte_shards(dir);
    Err e;
    TrainResult r1, r2;
    TrainConfig c1 = tiny_run(dir, ST_BINARY_DIR "/test_train_out1", ST_BINARY_DIR "/test_train_1.jsonl", 100);
    c1.sample_every = 50, c1.sample_tokens = 8; /* samples must not disturb training (determinism below) */
    Status s1 = train_run(&c1, &r1, &e);
    if (s1 != ST_OK) printf("%s\n", e.msg);
    tu_check(s1 == ST_OK && r1.last_loss < r1.first_loss - 1.0 && r1.last_val < r1.first_val - 0.5,
             "smoke: 100 steps lower the loss", "train %.4f -> %.4f, val %.4f -> %.4f", r1.first_loss, r1.last_loss,
             r1.first_val, r1.last_val);
    TrainConfig c2 = tiny_run(dir, ST_BINARY_DIR "/test_train_out2", ST_BINARY_DIR "/test_train_2.jsonl", 100);
    Status s2 = train_run(&c2, &r2, &e);
    char *w1, *w2;
    size_t n1, n2;
    file_read_all(ST_BINARY_DIR "/test_train_out1/model.safetensors", &w1, &n1, &e);
    file_read_all(ST_BINARY_DIR "/test_train_out2/model.safetensors", &w2, &n2, &e);
    static char l1[1 << 16], l2[1 << 16];
    int k1 = read_losses(c1.log_path, l1, sizeof l1), k2 = read_losses(c2.log_path, l2, sizeof l2);
    char *l1text = NULL;
    size_t l1len = 0;
    file_read_all(c1.log_path, &l1text, &l1len, &e);
    int nsamples = 0;
    for (char *q = l1text ? strstr(l1text, "\"event\":\"sample\"") : NULL; q; q = strstr(q + 1, "\"event\":\"sample\""))
        nsamples++;
    free(l1text);
    tu_check(nsamples == 2, "generation samples at the cadence are logged", "%d sample events (expected 2)", nsamples);
    tu_check(s2 == ST_OK && w1 && w2 && n1 == n2 && !memcmp(w1, w2, n1) && k1 == 100 && k2 == 100 && !strcmp(l1, l2),
             "determinism: two identical runs", "weights %zu bytes memcmp %s, %d logged losses %s", n1,
             (w1 && w2 && n1 == n2 && !memcmp(w1, w2, n1)) ? "equal" : "DIFFER", k1, strcmp(l1, l2) ? "DIFFER" : "equal");
    free(w1), free(w2);
    /* A different data seed must change the trajectory (the check above could not pass vacuously). */
    TrainConfig c3 = tiny_run(dir, "", ST_BINARY_DIR "/test_train_3.jsonl", 5);
    TrainConfig c4 = c3;
    c4.data_seed = 7;
    snprintf(c4.log_path, sizeof c4.log_path, "%s", ST_BINARY_DIR "/test_train_4.jsonl");
    train_run(&c3, &r1, &e);
    train_run(&c4, &r2, &e);
    tu_check(r1.last_loss != r2.last_loss, "another data seed changes the losses", "%.6f vs %.6f", r1.last_loss,
             r2.last_loss);
}

/* The trainer's side of gpt_status: the first GEMM of step 1 (block 0's qkv, N = 8·64 rows) fails. */
static void test_gemm_failure(void) {
    const char *dir = ST_BINARY_DIR "/test_train_data";
    Err e = {0};
    TrainResult r;
    TrainConfig c = tiny_run(dir, "", ST_BINARY_DIR "/test_train_gemm.jsonl", 2);
    Status clean = train_run(&c, &r, &e);
    long clean_steps = r.steps_done;
    mm_fail_after(1);
    Status st = train_run(&c, &r, &e);
    mm_fail_after(0);
    tu_check(clean == ST_OK && clean_steps == 2 && st == ST_ERR_RUNTIME &&
                 !strcmp(e.msg, "GEMM 512x192x64 (MxNxK, fp32, A*B^T + bias): oneDNN out_of_memory creating the primitive (test fault)"),
             "a failing GEMM ends the run with a Status", "without the fault: status %d after %ld steps; with it: status %d \"%s\"",
             clean, clean_steps, st, st ? e.msg : "");
}

int main(void) {
    test_accumulation(0.0f);
    test_accumulation(0.1f);
    test_mask();
    test_recompute(0);
    test_recompute(1);
    test_runs();
    test_gemm_failure();
    return tu_exit();
}
