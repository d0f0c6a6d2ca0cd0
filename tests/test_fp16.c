/* test_fp16.c — fp16 mixed precision with dynamic loss scaling.
 *
 * Oracles: the loss scaler's closed-form behaviour (halve and skip on overflow, double after N clean
 * steps); a forced overflow (initial scale 2^40) in a real run: the first steps are skipped with the
 * scale halving each time, the run recovers, the weights stay finite, the skips and the scale are
 * logged; fp16 gradients against the float64 PyTorch fixture (5e-3 per tensor). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileio.h"
#include "data/shard.h"
#include "fixture.h"
#include "model/gpt.h"
#include "optim/optim.h"
#include "testutil.h"
#include "train/train.h"

#define DIR ST_BINARY_DIR "/test_fp16"

static void scaler_closed_form(void) {
    LossScaler s;
    scaler_init(&s, 1024.0f, 3);
    int ok = scaler_update(&s, 0) == 0 && s.scale == 512.0f && s.skips == 1;
    ok &= scaler_update(&s, 1) && scaler_update(&s, 1) && s.scale == 512.0f;
    ok &= scaler_update(&s, 1) && s.scale == 1024.0f; /* third clean step doubles */
    ok &= scaler_update(&s, 0) == 0 && s.scale == 512.0f && s.good == 0;
    tu_check(ok, "loss scaler: halve+skip on overflow, double after 3 clean steps", "scale %g skips %ld", s.scale, s.skips);
}

static void fp16_vs_reference(void) {
    char path[1024], msg[512];
    snprintf(path, sizeof path, "%s/tests/fixtures/gpt2_medium.bin", ST_SOURCE_DIR);
    Fixture f;
    if (fixture_load(&f, path, msg, sizeof msg) != 0) printf("%s\n", msg), exit(1);
    const int32_t *cv = fixture_get(&f, "config")->data;
    ModelConfig mc = {cv[0], cv[1], cv[2], cv[3], 0, cv[4], 0.0f};
    int B = cv[5], T = cv[6];
    Err e;
    model_config_validate(&mc, &e);
    Gpt g;
    GptOptions o = gpt_default_options();
    o.B = B, o.T = T, o.threads = 2, o.precision = GPT_FP16;
    gpt_init(&g, &mc, &o, NULL, &e);
    for (int k = 0; k < g.w.layout.ntensors; k++) {
        const TensorInfo *t = &g.w.layout.tensors[k];
        const double *d = fixture_get(&f, t->name)->data;
        for (size_t i = 0; i < (size_t)t->rows_real * t->shape[1]; i++) g.w.params[t->offset + i] = (float)d[i];
    }
    gpt_sync_lp(&g);
    const int32_t *inp = fixture_get(&f, "inputs")->data, *tgt = fixture_get(&f, "targets")->data;
    long ntok = 0;
    for (int i = 0; i < B * T; i++) ntok += tgt[i] >= 0;
    gpt_zero_grads(&g);
    float S = 1024.0f; /* a loss scale, as training uses; gradients are unscaled below */
    double loss = gpt_forward(&g, inp, tgt, B, T, S / ntok, 1, 0) / ntok;
    gpt_backward(&g);
    double worst = 0;
    const char *wn = "";
    for (int k = 0; k < g.w.layout.ntensors; k++) {
        const TensorInfo *t = &g.w.layout.tensors[k];
        char name[96];
        snprintf(name, sizeof name, "grad.%s", t->name);
        const FixtureEntry *fe = fixture_get(&f, name);
        for (size_t i = 0; i < t->numel; i++) g.d.grads[t->offset + i] /= S;
        double r = tu_rel_err_fd(g.d.grads + t->offset, fe->data, fe->numel);
        if (!(r <= worst)) worst = r, wn = t->name;
    }
    double ref = ((const double *)fixture_get(&f, "loss")->data)[0];
    tu_check(fabs(loss - ref) / ref <= 1e-3 && worst <= 5e-3, "fp16 loss and gradients vs float64 reference",
             "loss %.6f ref %.6f, worst gradient rel_err %.3g in %s (tol 5e-3)", loss, ref, worst, wn);
    gpt_free(&g);
    fixture_free(&f);
}

static void forced_overflow(void) {
    Err e;
    file_mkdirs(DIR, &e);
    enum { N = 20000 };
    static uint32_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = (uint32_t)((i % 13) * 5 + (i / 130) % 3);
    ShardMeta meta = {0, N, 64};
    shard_write(DIR "/train.bin", tok, N, &meta, &e);
    TrainConfig c = train_default_config();
    c.model = (ModelConfig){2, 2, 32, 64, 0, 32, 0.0f};
    snprintf(c.data, sizeof c.data, DIR "/train.bin");
    snprintf(c.log_path, sizeof c.log_path, DIR "/run.jsonl");
    snprintf(c.out_dir, sizeof c.out_dir, DIR "/out");
    c.micro_batch = 4, c.seq_len = 32, c.steps = 40, c.val_every = 0, c.quiet = 1, c.peak_flops = 1e11;
    c.sched.warmup = 5, c.sched.lr = 3e-3f, c.fp16 = 1, c.loss_scale = 1099511627776.0f /* 2^40 */;
    c.loss_scale_window = 10;
    TrainResult r;
    Status st = train_run(&c, &r, &e);
    char *text = NULL;
    size_t len = 0;
    file_read_all(c.log_path, &text, &len, &e);
    int logged = text && strstr(text, "\"event\":\"overflow\"") && strstr(text, "\"loss_scale\":");
    /* Each overflow halves: the first clean scale is 2^40 / 2^overflows; growth doubles it later. */
    tu_check(st == ST_OK && r.overflows >= 3 && r.steps_done == 40 && r.last_loss < r.first_loss && logged,
             "forced overflow: steps skipped with the scale halving, then recovery", "%ld overflows, final scale %g, "
             "loss %.3f -> %.3f, events logged: %s", r.overflows, r.final_loss_scale, r.first_loss, r.last_loss,
             logged ? "yes" : "no");
    char *w = NULL;
    size_t wn = 0;
    file_read_all(DIR "/out/model.safetensors", &w, &wn, &e);
    int finite = w != NULL;
    if (w) {
        uint64_t h;
        memcpy(&h, w, 8);
        for (size_t i = 8 + h; i + 4 <= wn; i += 4) {
            float x;
            memcpy(&x, w + i, 4);
            finite &= isfinite(x);
        }
    }
    tu_check(finite, "fp16: overflowed gradients never reach the weights", "all %zu weights finite", wn / 4);
    free(text);
    free(w);
}

int main(void) {
    system("rm -rf " DIR);
    scaler_closed_form();
    fp16_vs_reference();
    forced_overflow();
    return tu_exit();
}
