/* test_noise.c — the gradient noise scale (issue 16; McCandlish et al. 2018, appendix A.1).
 *
 * Estimator (train/noise.h) against the closed form on synthetic gradients with known statistics:
 * d = 512 coordinates, a true gradient G with |G|² known, per-example noise with covariance σ²·I
 * (tr Σ = d·σ²). The mean gradient over b examples is then exactly G + N(0, σ²/b) per coordinate, so
 * 4000 draws of a small (b 8) and a big (b 64) batch give estimates whose means must equal |G|² and
 * tr Σ within 4 standard errors, and the smoothed B_simple (EMA 0.95, the trainer's) must be within
 * 10% of tr Σ / |G|² averaged over the last 2000 draws. Negative controls: the uncorrected estimate
 * (|G_big|² taken as |G|², what a trainer that logs only its norm would use) is biased outside the
 * same bound; the batch sizes given the wrong way round are refused; a wrong small batch size
 * (twice the true one) moves tr Σ outside the bound.
 *
 * Trainer (end to end; argv: MPIEXEC SCALETRAIN): the logged small-batch |G|² is the first
 * micro-batch's gradient, the logged |G|² comes from the step's norm. Oracles: a one-process run
 * with --micro-batch 4 --grad-accum 1, whose step-1 batch is exactly micro-batch 0 of a run with
 * --grad-accum 2, logs grad_norm² = the latter's g2_small (relative 1e-6; two code paths: the global
 * norm after the step, and the hooks' per-segment sums before any reduction); the same micro-batch
 * is replica 0's at dp 2 (ZeRO 0 and ZeRO 2, where it is reduce-scattered per segment) and is split
 * over tp 2 (replicated tensors counted once); b_big equals the step's tokens; the small and big
 * estimates satisfy the estimator's formulas. Control: a run with --no-noise-scale logs none, and a
 * run with one micro-batch on one process (no smaller batch) logs none. The same grad-accum 2 run at
 * --threads 2 logs g2_small bit-equal to 1 thread's (control: the comparison tells dp 2's apart). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/rng.h"
#include "runcmp.h"
#include "testutil.h"
#include "train/noise.h"

#define DIR ST_BINARY_DIR "/test_noise"

enum { D = 512, DRAWS = 4000, BS = 8, BB = 64 };

/* Draws the mean gradients of a small and a big batch; returns |G_small|², |G_big|². */
static void draw(const double *G, double sigma, uint64_t i, double *g2s, double *g2b) {
    double a = 0, b = 0;
    for (int k = 0; k < D; k++) {
        double xs = G[k] + sigma / sqrt((double)BS) * rng_normal(5, 2 * i, (uint64_t)k);
        double xb = G[k] + sigma / sqrt((double)BB) * rng_normal(5, 2 * i + 1, (uint64_t)k);
        a += xs * xs, b += xb * xb;
    }
    *g2s = a, *g2b = b;
}

typedef struct {
    double mean, se; /* mean and standard error over the draws */
} Stat;

static Stat stat_of(const double *x, int n) {
    double m = 0, v = 0;
    for (int i = 0; i < n; i++) m += x[i] / n;
    for (int i = 0; i < n; i++) v += (x[i] - m) * (x[i] - m) / (n - 1);
    return (Stat){m, sqrt(v / n)};
}

static void test_estimator(void) {
    double G[D], G2 = 0;
    for (int k = 0; k < D; k++) G[k] = 0.05 * rng_normal(4, 0, (uint64_t)k), G2 += G[k] * G[k];
    /* σ so that the noise's share of the big batch's norm is half the signal: tr Σ / b_big = G2 / 2. */
    double trs_true = 0.5 * G2 * BB, sigma = sqrt(trs_true / D), bsimple = trs_true / G2;
    double *g2 = malloc(DRAWS * sizeof(double)), *trs = malloc(DRAWS * sizeof(double));
    double *naive = malloc(DRAWS * sizeof(double)), *wrong = malloc(DRAWS * sizeof(double));
    NoiseScale ns;
    noise_init(&ns, NOISE_EMA_BETA);
    double ema_sum = 0;
    int refused = 0;
    for (int i = 0; i < DRAWS; i++) {
        double a, b, g, t, x;
        draw(G, sigma, (uint64_t)i, &a, &b);
        noise_estimate(a, BS, b, BB, &g2[i], &trs[i]);
        noise_estimate(a, 2 * BS, b, BB, &x, &wrong[i]); /* control: the small batch's size doubled */
        naive[i] = b;
        refused += !noise_estimate(b, BB, a, BS, &g, &t); /* control: sizes the wrong way round */
        double e = noise_update(&ns, g2[i], trs[i]);
        if (i >= DRAWS / 2) ema_sum += e / (DRAWS / 2);
    }
    Stat sg = stat_of(g2, DRAWS), st = stat_of(trs, DRAWS), sn = stat_of(naive, DRAWS), sw = stat_of(wrong, DRAWS);
    printf("  |G|² %.6g: estimate %.6g ± %.2g; tr Σ %.6g: estimate %.6g ± %.2g; B_simple %.4g, smoothed %.4g\n", G2,
           sg.mean, sg.se, trs_true, st.mean, st.se, bsimple, ema_sum);
    tu_check(fabs(sg.mean - G2) <= 4 * sg.se, "noise_g2_unbiased", "mean %.6g vs %.6g: %.2f standard errors (bound 4)",
             sg.mean, G2, fabs(sg.mean - G2) / sg.se);
    tu_check(fabs(st.mean - trs_true) <= 4 * st.se, "noise_trace_unbiased",
             "mean %.6g vs %.6g: %.2f standard errors (bound 4)", st.mean, trs_true, fabs(st.mean - trs_true) / st.se);
    tu_check(fabs(ema_sum / bsimple - 1) <= 0.1, "noise_b_simple_smoothed", "%.4g vs tr Σ/|G|² = %.4g (bound 10%%)",
             ema_sum, bsimple);
    tu_check(fabs(sn.mean - G2) > 4 * sn.se, "noise_negative_control_uncorrected",
             "|G_big|² as |G|²: mean %.6g vs %.6g, %.1f standard errors (must exceed 4)", sn.mean, G2,
             fabs(sn.mean - G2) / sn.se);
    tu_check(fabs(sw.mean - trs_true) > 4 * sw.se, "noise_negative_control_wrong_batch",
             "b_small doubled: tr Σ %.6g vs %.6g, %.1f standard errors (must exceed 4)", sw.mean, trs_true,
             fabs(sw.mean - trs_true) / sw.se);
    tu_check(refused == DRAWS, "noise_refuses_sizes_reversed", "%d of %d refused", refused, DRAWS);
    free(g2), free(trs), free(naive), free(wrong);
}

static const char *g_mpi, *g_bin;

static int run(const char *name, int np, const char *extra) {
    char cmd[4096], launch[512] = "", lg[600];
    if (np > 0)
        snprintf(launch, sizeof launch, "timeout 170 %s --allow-run-as-root --oversubscribe -np %d -x OMP_NUM_THREADS=1 ",
                 g_mpi, np);
    snprintf(lg, sizeof lg, "%s/%s.jsonl", DIR, name);
    remove(lg);
    snprintf(cmd, sizeof cmd, "%s%s train --data %s/train.bin --layers 2 --heads 2 --channels 64 --vocab 97 "
             "--max-seq-len 64 --seq-len 64 --micro-batch 4%s --lr 1e-3%s --peak-gflops 100 --quiet --log %s %s", launch,
             g_bin, DIR, strstr(extra, "--steps ") ? "" : " --steps 3", strstr(extra, "--threads ") ? "" : " --threads 1", lg,
             extra); /* a flag once: extra's --steps or --threads instead of the default */
    double secs;
    int rc = rc_run(DIR, name, cmd, &secs);
    printf("%s: exit %d, %.1f s\n", name, rc, secs);
    return rc;
}

/* Step `step`'s record of run `name` (caller deletes *all). */
static const cJSON *step_rec(const char *name, int step, cJSON **all) {
    *all = rc_records(DIR, name);
    const cJSON *o;
    cJSON_ArrayForEach(o, *all) {
        const char *ev = rc_event(o);
        if (ev && !strcmp(ev, "step") && rc_num(o, "step") == step) return o;
    }
    return NULL;
}

static double noise_field(const cJSON *o, const char *k) {
    return rc_num(cJSON_GetObjectItemCaseSensitive(o, "noise_scale"), k);
}

static double replica(const cJSON *o, int i) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "noise_scale"),
                                                      "g2_small_by_replica");
    const cJSON *x = cJSON_GetArrayItem(a, i);
    return cJSON_IsNumber(x) ? x->valuedouble : NAN;
}

static double rel(double a, double b) { return fabs(a - b) / fmax(fabs(b), 1e-300); }

static void test_trainer(void) {
    rc_make_data(DIR);
    int rc = run("k1", 0, "--grad-accum 1") | run("k2", 0, "--grad-accum 2") | run("dp2", 2, "--grad-accum 1") |
             run("dp2_zero2", 2, "--grad-accum 1 --zero 2") | run("tp2", 2, "--grad-accum 2 --tp 2") |
             run("off", 0, "--grad-accum 2 --no-noise-scale") | run("k2_t2", 0, "--grad-accum 2 --threads 2");
    tu_check(rc == 0, "noise runs ran", "exit codes OR-ed: %d", rc);
    cJSON *a1, *a2, *ad, *az, *at, *ao;
    const cJSON *k1 = step_rec("k1", 1, &a1), *k2 = step_rec("k2", 1, &a2), *dp = step_rec("dp2", 1, &ad);
    const cJSON *z2 = step_rec("dp2_zero2", 1, &az), *tp = step_rec("tp2", 1, &at), *off = step_rec("off", 1, &ao);
    if (!k1 || !k2 || !dp || !z2 || !tp || !off) {
        tu_check(0, "noise step records", "a run logged no step 1");
        return;
    }
    double ref = pow(rc_num(k1, "grad_norm"), 2);
    double e_k2 = rel(noise_field(k2, "g2_small"), ref), e_dp = rel(replica(dp, 0), ref);
    double e_z2 = rel(replica(z2, 0), ref), e_tp = rel(noise_field(tp, "g2_small"), ref);
    tu_check(e_k2 <= 1e-6 && e_dp <= 1e-6 && e_z2 <= 1e-6 && e_tp <= 1e-6, "noise_small_batch_is_micro_batch_0",
             "|G|² of micro-batch 0 (one process, its own step) %.9g: grad-accum 2 rel %.1e, dp 2 replica 0 %.1e, "
             "dp 2 ZeRO 2 %.1e, tp 2 %.1e (tol 1e-6)", ref, e_k2, e_dp, e_z2, e_tp);
    /* The big batch and the formulas, on the grad-accum 2 run. */
    double bb = noise_field(k2, "b_big"), bs = noise_field(k2, "b_small"), gs = noise_field(k2, "g2_small");
    double gb = pow(rc_num(k2, "grad_norm"), 2), g2, trs;
    int ok = noise_estimate(gs, bs, gb, bb, &g2, &trs);
    double e_g = rel(noise_field(k2, "g2"), g2), e_t = rel(noise_field(k2, "trace_sigma"), trs);
    tu_check(ok && bb == rc_num(k2, "tokens") && bs == bb / 2 && e_g <= 1e-9 && e_t <= 1e-9 &&
                 rel(noise_field(k2, "b_simple"), trs / g2) <= 1e-9,
             "noise_record_formulas", "b_big %g (step tokens %g), b_small %g; |G|² rel %.1e, tr Σ rel %.1e", bb,
             rc_num(k2, "tokens"), bs, e_g, e_t);
    double by1 = replica(dp, 1);
    tu_check(rel(noise_field(dp, "g2_small"), (replica(dp, 0) + by1) / 2) <= 1e-12 && rel(by1, replica(z2, 1)) <= 1e-6,
             "noise_replicas_averaged", "dp 2: g2_small %.9g = mean of %.9g and %.9g; ZeRO 2's replica 1 %.9g",
             noise_field(dp, "g2_small"), replica(dp, 0), by1, replica(z2, 1));
    tu_check(!cJSON_GetObjectItemCaseSensitive(off, "noise_scale") && !cJSON_GetObjectItemCaseSensitive(k1, "noise_scale"),
             "noise_not_logged_without_a_smaller_batch", "--no-noise-scale: %s; one micro-batch on one process: %s",
             cJSON_GetObjectItemCaseSensitive(off, "noise_scale") ? "logged" : "none",
             cJSON_GetObjectItemCaseSensitive(k1, "noise_scale") ? "logged" : "none");
    /* Control: another micro-batch's norm (replica 1's) is not micro-batch 0's. */
    tu_check(rel(by1, ref) > 1e-3, "noise_negative_control_other_micro_batch", "replica 1 %.9g vs micro-batch 0 %.9g",
             by1, ref);
    /* The per-segment sums do not depend on the thread count (fixed chunks, not an OpenMP
     * reduction's per-thread partials): 2 threads log the bits of 1. Control: the same comparison
     * between two runs whose figures differ (dp 2's mean of two replicas) tells them apart. */
    cJSON *a3;
    const cJSON *t2 = step_rec("k2_t2", 1, &a3);
    double s1 = noise_field(k2, "g2_small"), s2 = t2 ? noise_field(t2, "g2_small") : NAN;
    tu_check(isfinite(s1) && s1 == s2, "noise_small_batch_thread_independent",
             "g2_small at 1 thread %.17g, at 2 threads %.17g (bit-equal)", s1, s2);
    tu_check(isfinite(s1) && s1 != noise_field(dp, "g2_small"), "noise_negative_control_thread_check_discriminates",
             "grad-accum 2 %.17g vs dp 2 %.17g", s1, noise_field(dp, "g2_small"));
    cJSON_Delete(a3);
    cJSON_Delete(a1), cJSON_Delete(a2), cJSON_Delete(ad), cJSON_Delete(az), cJSON_Delete(at), cJSON_Delete(ao);
}

/* Resume: the smoothed B_simple goes on as if the run had not stopped. "full" runs 6 steps with a
 * checkpoint every 3; "stop" runs 3 steps into its own folder and "resumed" continues it to 6. Oracle:
 * b_simple_ema of steps 4-6 equal the uninterrupted run's exactly (the step estimates themselves,
 * b_simple, must equal too: same data and weights), and the resumed log is a real resume (its start
 * record found the step-3 checkpoint, its first step is 4). Control: what a resume without the saved
 * averages logs at step 4 (an average of one estimate: that step's own b_simple) must fail the
 * same equality. */
static double ema_at(const char *name, int step) {
    cJSON *all;
    const cJSON *o = step_rec(name, step, &all);
    double v = o ? noise_field(o, "b_simple_ema") : NAN;
    cJSON_Delete(all);
    return v;
}

static void test_resume(void) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s/ck_full %s/ck_stop", DIR, DIR); /* a run without --resume needs them empty */
    int rc = system(cmd);
    rc |= run("full", 0, "--grad-accum 2 --steps 6 --ckpt-dir " DIR "/ck_full --ckpt-every 3");
    rc |= run("stop", 0, "--grad-accum 2 --steps 3 --ckpt-dir " DIR "/ck_stop --ckpt-every 3");
    rc |= run("resumed", 0, "--grad-accum 2 --steps 6 --ckpt-dir " DIR "/ck_stop --resume auto");
    tu_check(rc == 0, "noise resume runs ran", "exit codes OR-ed %d", rc);
    TuLogRun lr[2];
    int nr = tu_log_runs(DIR "/resumed.jsonl", lr, 2);
    int resumed = nr == 1 && lr[0].found && lr[0].resumed_from == 3 && lr[0].first_step == 4 && lr[0].last_step == 6;
    double worst = 0;
    int all = 1;
    for (int s = 4; s <= 6; s++) {
        double a = ema_at("full", s), b = ema_at("resumed", s);
        all = all && isfinite(a) && a == b;
        if (isfinite(a) && isfinite(b)) worst = fmax(worst, fabs(a - b));
    }
    tu_check(resumed && all, "noise_ema_resumes_exactly", "b_simple_ema steps 4-6 equal the uninterrupted run's: %s "
             "(max |diff| %.3g); resumed log: %d start record(s), from step %ld, steps %ld-%ld", all ? "yes" : "NO",
             worst, nr, nr > 0 ? lr[0].resumed_from : -1, nr > 0 ? lr[0].first_step : -1, nr > 0 ? lr[0].last_step : -1);
    cJSON *a;
    const cJSON *r4 = step_rec("resumed", 4, &a);
    double c4 = r4 ? noise_field(r4, "b_simple") : NAN, f4 = ema_at("full", 4);
    cJSON_Delete(a);
    tu_check(isfinite(c4) && isfinite(f4) && c4 != f4, "noise_negative_control_state_dropped",
             "step 4 without the saved averages would log %.9g vs %.9g (must differ)", c4, f4);
}

int main(int argc, char **argv) {
    test_estimator();
    if (argc < 3) {
        tu_check(0, "test_noise arguments", "usage: test_noise MPIEXEC SCALETRAIN (the trainer checks need both)");
        return tu_exit();
    }
    g_mpi = argv[1], g_bin = argv[2];
    test_trainer();
    test_resume();
    return tu_exit();
}
