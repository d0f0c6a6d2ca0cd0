/* test_fp16.c — fp16 mixed precision with dynamic loss scaling.
 *
 * Oracles: the loss scaler on a scripted overflow/clean sequence against scales worked out by hand
 * (halve and skip on overflow, restart the count, double after N clean steps, floor 2^-16), with
 * broken rules as negative controls; the trainer's logged scale of every step against a replay of
 * that rule over its logged outcomes; a forced overflow (initial scale 2^40) in a real run: the first steps are skipped with the
 * scale halving each time, the run recovers, the weights stay finite, the skips and the scale are
 * logged; fp16 gradients against the float64 PyTorch fixture (5e-3 per tensor). */
#include <cjson/cJSON.h>
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

/* ---- The loss scaler's sequence ----
 * Reference rule (written here, PyTorch GradScaler's): an overflowed step is skipped, the scale
 * halves (floored at 2^-16) and the clean-step counter restarts; the `window`-th clean step in a
 * row doubles the scale and restarts the counter. Broken variants for the negative controls. */
typedef enum { SV_EXACT, SV_NO_RESET, SV_LATE_GROWTH, SV_NO_FLOOR, SV_KEEP_COUNT, SV_COUNT } ScalerVariant;
static const char *const SV_NAME[SV_COUNT] = {"exact", "counter not reset on overflow", "doubling one clean step late",
                                              "no floor", "counter not reset on doubling"};

typedef struct {
    double scale;
    long good;
} RefScaler;

/* One outcome under variant v; returns whether the update is applied. */
static int ref_scaler_update(RefScaler *s, int finite, int window, ScalerVariant v) {
    if (!finite) {
        s->scale *= 0.5;
        if (v != SV_NO_FLOOR && s->scale < 0x1p-16) s->scale = 0x1p-16;
        if (v != SV_NO_RESET) s->good = 0;
        return 0;
    }
    s->good++;
    if (s->good >= window + (v == SV_LATE_GROWTH)) {
        s->scale *= 2;
        if (v != SV_KEEP_COUNT) s->good = 0;
    }
    return 1;
}

/* A scripted outcome sequence (0 = overflow) and the scales after each step, worked out by hand:
 * from 1024 with a window of 3, then from 2^-15 into the floor and out of it. */
static void scaler_sequence(void) {
    enum { N1 = 15, N2 = 7 };
    static const int out1[N1] = {0, 1, 1, 0, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1};
    static const double want1[N1] = {512, 512, 512, 256 /* reset: two clean steps did not count */, 256, 256, 512,
                                     512, 512, 1024, 512, 256, 256, 256, 512};
    static const int out2[N2] = {0, 0, 0, 1, 1, 1, 1};
    static const double want2[N2] = {0x1p-16, 0x1p-16 /* floor */, 0x1p-16, 0x1p-16, 0x1p-16, 0x1p-15, 0x1p-15};
    const int *outs[2] = {out1, out2};
    const double *wants[2] = {want1, want2}, init[2] = {1024, 0x1p-15};
    const int n[2] = {N1, N2};
    /* The implementation against the hand-written sequence (exact: powers of two). */
    int bad = 0, applied_bad = 0;
    long skips = 0;
    LossScaler s;
    for (int q = 0; q < 2; q++) {
        scaler_init(&s, (float)init[q], 3);
        for (int i = 0; i < n[q]; i++) {
            applied_bad += scaler_update(&s, outs[q][i]) != outs[q][i];
            bad += s.scale != (float)wants[q][i];
            skips += !outs[q][i];
        }
        skips -= s.skips;
    }
    tu_check(bad == 0 && applied_bad == 0 && skips == 0, "loss scaler: scripted overflow/clean sequence, exact scales",
             "%d of %d scales differ from the hand-written sequence, %d wrong skip verdicts, skip count off by %ld", bad,
             N1 + N2, applied_bad, skips);
    /* The hand-written sequence tells the reference rule from each broken one. */
    for (int v = 0; v < SV_COUNT; v++) {
        int differ = 0;
        for (int q = 0; q < 2; q++) {
            RefScaler r = {init[q], 0};
            for (int i = 0; i < n[q]; i++) {
                ref_scaler_update(&r, outs[q][i], 3, (ScalerVariant)v);
                differ += r.scale != wants[q][i];
            }
        }
        char name[128];
        snprintf(name, sizeof name, v ? "loss scaler negative control (%s)" : "loss scaler reference rule (%s)",
                 SV_NAME[v]);
        tu_check(v ? differ > 0 : differ == 0, name, "%d of %d scales differ from the hand-written sequence", differ,
                 N1 + N2);
    }
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

/* ---- The scale sequence through the trainer ----
 * A 24-step fp16 run from 2^24 with a window of 3 (the first steps overflow, then the scale climbs
 * back until it overflows again) and a NaN forced into the gradients of batch 9 (an overflow in the
 * middle of a clean stretch, at a scale that is otherwise clean). Oracle: replaying the reference rule over the logged outcomes (each
 * step record's `applied`) gives exactly the `loss_scale` each step record logs, the overflow events
 * name exactly the non-applied batches with the halved scale, and the run's final scale is the
 * replay's. Negative controls: replaying each broken rule over the same log must disagree. */
#define SEQ_STEPS 24
#define SEQ_NAN_BATCH 9

typedef struct {
    long n;
    long batch[4 * SEQ_STEPS];
    double scale[4 * SEQ_STEPS];
    int applied[4 * SEQ_STEPS];
} ScaleLog;

/* Counts the step records whose logged scale differs from the replay of rule v; *final_out: the
 * replay's scale after the last record. */
static int replay_scale_log(const ScaleLog *lg, double init, int window, ScalerVariant v, double *final_out) {
    RefScaler r = {init, 0};
    int differ = 0;
    for (long i = 0; i < lg->n; i++) {
        differ += lg->scale[i] != r.scale;
        ref_scaler_update(&r, lg->applied[i], window, v);
    }
    *final_out = r.scale;
    return differ;
}

static void scale_sequence_in_trainer(void) {
    TrainConfig c = train_default_config();
    c.model = (ModelConfig){2, 2, 32, 64, 0, 32, 0.0f};
    snprintf(c.data, sizeof c.data, DIR "/train.bin");
    snprintf(c.log_path, sizeof c.log_path, DIR "/seq.jsonl");
    snprintf(c.out_dir, sizeof c.out_dir, DIR "/seq_out");
    c.micro_batch = 4, c.seq_len = 32, c.steps = SEQ_STEPS, c.val_every = 0, c.quiet = 1, c.peak_flops = 1e11;
    c.sched.warmup = 5, c.sched.lr = 3e-3f, c.fp16 = 1, c.loss_scale = 0x1p24f, c.loss_scale_window = 3;
    c.debug_nan_step = SEQ_NAN_BATCH;
    TrainResult res;
    Err e;
    Status st = train_run(&c, &res, &e);
    static ScaleLog lg;
    lg.n = 0;
    long nover = 0, over_bad = 0;
    cJSON *all = tu_log_records(c.log_path), *o;
    cJSON_ArrayForEach(o, all) {
        const char *ev = cJSON_GetStringValue(cJSON_GetObjectItem(o, "event"));
        if (ev && !strcmp(ev, "step") && lg.n < 4 * SEQ_STEPS) {
            lg.batch[lg.n] = (long)cJSON_GetNumberValue(cJSON_GetObjectItem(o, "batch"));
            lg.scale[lg.n] = cJSON_GetNumberValue(cJSON_GetObjectItem(o, "loss_scale"));
            lg.applied[lg.n] = cJSON_IsTrue(cJSON_GetObjectItem(o, "applied"));
            lg.n++;
        } else if (ev && !strcmp(ev, "overflow")) {
            /* Each overflow event follows its batch's computation and precedes its step record. */
            long b = (long)cJSON_GetNumberValue(cJSON_GetObjectItem(o, "batch"));
            double before = cJSON_GetNumberValue(cJSON_GetObjectItem(o, "loss_scale"));
            double after = cJSON_GetNumberValue(cJSON_GetObjectItem(o, "new_loss_scale"));
            over_bad += b != lg.n + 1 || !(after == fmax(before / 2, 0x1p-16));
            nover++;
        }
    }
    cJSON_Delete(all);
    long nskip = 0, nan_skipped = 0, order_bad = 0, after_growth = 0;
    RefScaler r = {0x1p24, 0};
    for (long i = 0; i < lg.n; i++) {
        nskip += !lg.applied[i];
        nan_skipped += lg.batch[i] == SEQ_NAN_BATCH && !lg.applied[i] && r.good > 0;
        order_bad += lg.batch[i] != i + 1;
        after_growth += !lg.applied[i] && r.good > 0; /* an overflow that must restart the counter */
        ref_scaler_update(&r, lg.applied[i], 3, SV_EXACT);
    }
    double fin;
    int differ = replay_scale_log(&lg, 0x1p24, 3, SV_EXACT, &fin);
    tu_check(st == ST_OK && lg.n == SEQ_STEPS + nskip && order_bad == 0 && differ == 0 && nover == nskip &&
                 over_bad == 0 && nan_skipped == 1 && after_growth > 0 && (float)fin == res.final_loss_scale,
             "fp16 trainer: logged loss scale of every step == replay of the halve/double rule",
             "%ld step records, %ld overflows (%ld events, %ld inconsistent), %ld restarting the counter (NaN batch "
             "%d among them: %s), %d scales differ, final %g (replay %g)",
             lg.n, nskip, nover, over_bad, after_growth, SEQ_NAN_BATCH, nan_skipped == 1 ? "yes" : "no", differ, res.final_loss_scale, fin);
    for (int v = 1; v < SV_COUNT; v++) {
        if (v == SV_NO_FLOOR) continue; /* the run never reaches the floor */
        differ = replay_scale_log(&lg, 0x1p24, 3, (ScalerVariant)v, &fin);
        char name[128];
        snprintf(name, sizeof name, "fp16 trainer negative control (replay with %s)", SV_NAME[v]);
        tu_check(differ > 0, name, "detected: %d of %ld logged scales differ", differ, lg.n);
    }
}

int main(void) {
    system("rm -rf " DIR);
    scaler_sequence();
    fp16_vs_reference();
    forced_overflow();
    scale_sequence_in_trainer();
    return tu_exit();
}
