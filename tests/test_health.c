/* test_health.c — the run-health detectors (src/train/health.h) against closed forms.
 *
 * Oracles: medians, MADs and robust z-scores computed by hand for small sets; known sequences with
 * the step of the expected detection worked out on paper (comments give the arithmetic); no
 * detection on a smooth decreasing curve with bounded noise; the checkpoint JSON round trip gives
 * the same verdicts as the uninterrupted state. Tolerance 1e-9 relative for z-scores. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "testutil.h"
#include "train/health.h"

static int close_to(double a, double b) { return fabs(a - b) <= 1e-9 * fmax(1.0, fabs(b)); }

static void test_stats(void) {
    double a[] = {4, 1, 100, 3, 2}; /* sorted 1 2 3 4 100: median 3; |x-3| = 1 1 0 2 97 → MAD 1 */
    double z = health_robust_z(a, 5, 10, 1e-3);
    tu_check(health_median(a, 5) == 3 && health_mad(a, 5) == 1 && close_to(z, 7 / 1.4826), "health_stats_odd",
             "median=%g mad=%g z(10)=%.12g want %.12g", health_median(a, 5), health_mad(a, 5), z, 7 / 1.4826);
    double b[] = {1, 2, 3, 4}; /* median 2.5; deviations 1.5 .5 .5 1.5 → MAD 1 */
    z = health_robust_z(b, 4, 5, 1e-3);
    tu_check(health_median(b, 4) == 2.5 && health_mad(b, 4) == 1 && close_to(z, 2.5 / 1.4826), "health_stats_even",
             "median=%g mad=%g z(5)=%.12g", health_median(b, 4), health_mad(b, 4), z);
    double c[] = {2, 2, 2, 2}; /* MAD 0: sigma floored at min_sigma = 0.01 → z(2.5) = 50 */
    z = health_robust_z(c, 4, 2.5, 0.01);
    tu_check(close_to(z, 50), "health_stats_sigma_floor", "z=%g want 50", z);
}

/* Baseline: steps 1..50 with loss 2.00 + 0.01·(s mod 3) and grad norm 1.0 + 0.1·(s mod 2). */
static void baseline(HealthState *h, const HealthOptions *o, int *bad) {
    for (int s = 1; s <= 50; s++) {
        HealthVerdict v = health_step(h, o, s, 2.0 + 0.01 * (s % 3), 1.0 + 0.1 * (s % 2));
        if (v.action != HEALTH_ACT_NONE || !v.accepted) (*bad)++;
    }
}

static void test_spike_log(void) {
    HealthOptions o;
    health_default_options(&o);
    HealthState h;
    health_init(&h);
    int bad = 0;
    baseline(&h, &o, &bad);
    /* Window (50 values): 16×2.00, 17×2.01, 17×2.02 → median 2.01 (25th and 26th are 2.01);
     * deviations: 17 zeros and 33×0.01 → MAD 0.01, sigma 0.014826; z(2.5) = 0.49 / 0.014826. */
    HealthVerdict v = health_step(&h, &o, 51, 2.5, 1.05);
    double want_z = (2.5 - 2.01) / (1.4826 * 0.01);
    tu_check(bad == 0 && v.loss_spike && !v.gnorm_spike && v.action == HEALTH_ACT_LOG && v.accepted &&
                 close_to(v.loss_median, 2.01) && fabs(v.loss_z - want_z) < 1e-6,
             "health_loss_spike_at_step_51", "baseline actions=%d action=%s median=%.12g z=%.9g want %.9g", bad,
             health_action_name(v.action), v.loss_median, v.loss_z, want_z);
    /* Grad norm window (51 values now; 1.05 was accepted with the logged spike): 25×1.0, 25×1.1,
     * 1×1.05 → median 1.05, every deviation 0.05 but one 0 → MAD 0.05, sigma 0.07413.
     * z(1.8) = 0.75 / 0.07413 = 10.12 > 10: spike; z(1.7) = 8.77: not. */
    HealthState h2 = h; /* the state is a plain value: each candidate against the same window */
    HealthVerdict v17 = health_step(&h2, &o, 52, 2.01, 1.7);
    HealthVerdict v18 = health_step(&h, &o, 52, 2.01, 1.8);
    tu_check(!v17.gnorm_spike && v18.gnorm_spike && !v18.loss_spike && close_to(v18.gnorm_median, 1.05) &&
                 fabs(v18.gnorm_z - 0.75 / (1.4826 * 0.05)) < 1e-6,
             "health_gnorm_spike_z10", "z(1.7)=%.4f z(1.8)=%.4f median=%.6g", v17.gnorm_z, v18.gnorm_z,
             v18.gnorm_median);
}

static void test_abs_threshold_and_history(void) {
    HealthOptions o;
    health_default_options(&o);
    o.loss.z_threshold = 0; /* absolute only: spike iff loss > 2.01 + 0.3 */
    o.loss.abs_threshold = 0.3;
    o.gnorm.z_threshold = 0;
    HealthState h;
    health_init(&h);
    int bad = 0;
    baseline(&h, &o, &bad);
    HealthVerdict a = health_step(&h, &o, 51, 2.30, 1.0);
    HealthVerdict b = health_step(&h, &o, 52, 2.32, 1.0);
    tu_check(bad == 0 && !a.loss_spike && b.loss_spike, "health_abs_threshold", "2.30: %d, 2.32: %d", a.loss_spike,
             b.loss_spike);
    /* Before min_history (16) values there is no detection at all, however large the value. */
    health_init(&h);
    int early = 0;
    for (int s = 1; s <= 15; s++) early += health_step(&h, &o, s, s == 15 ? 100.0 : 2.0, 1.0).loss_spike;
    HealthVerdict c = health_step(&h, &o, 16, 100.0, 1.0); /* window has 15 values: still short */
    HealthVerdict d = health_step(&h, &o, 17, 100.0, 1.0); /* 16 values, median 2: spike */
    tu_check(early == 0 && !c.loss_spike && isnan(c.loss_median) && d.loss_spike, "health_min_history",
             "early=%d step16=%d step17=%d", early, c.loss_spike, d.loss_spike);
}

static void test_smooth_no_false_positive(void) {
    HealthOptions o;
    health_default_options(&o);
    o.policy = HEALTH_POLICY_SKIP;
    HealthState h;
    health_init(&h);
    int detections = 0, actions = 0;
    for (int s = 1; s <= 3000; s++) {
        /* Decreasing curve plus bounded deterministic noise (±0.02 for the loss, ±5% for the norm). */
        double noise = ((s * 7919) % 101) / 100.0 - 0.5;
        double loss = 1.0 + 9.0 * exp(-s / 300.0) + 0.04 * noise;
        double gn = (0.3 + 2.0 * exp(-s / 200.0)) * (1 + 0.1 * noise);
        HealthVerdict v = health_step(&h, &o, s, loss, gn);
        detections += v.loss_spike + v.gnorm_spike;
        actions += v.action != HEALTH_ACT_NONE;
    }
    tu_check(detections == 0 && actions == 0 && h.spikes == 0, "health_smooth_curve_no_false_positive",
             "3000 steps: detections=%d actions=%d", detections, actions);
}

static void test_policy_cap(void) {
    HealthOptions o;
    health_default_options(&o);
    o.policy = HEALTH_POLICY_SKIP;
    o.max_actions = 3;
    HealthState h;
    health_init(&h);
    int bad = 0;
    baseline(&h, &o, &bad);
    HealthAction seq[5];
    int accepted = 0;
    for (int i = 0; i < 4; i++) {
        HealthVerdict v = health_step(&h, &o, 51, 5.0, 1.0); /* skip: the same step is retried with the next batch */
        seq[i] = v.action;
        accepted += v.accepted;
    }
    tu_check(bad == 0 && seq[0] == HEALTH_ACT_SKIP && seq[1] == HEALTH_ACT_SKIP && seq[2] == HEALTH_ACT_SKIP &&
                 seq[3] == HEALTH_ACT_STOP && accepted == 0 && h.loss.n == 50 && h.skips == 3,
             "health_skip_cap_stops_on_4th", "actions %s %s %s %s, window %d", health_action_name(seq[0]),
             health_action_name(seq[1]), health_action_name(seq[2]), health_action_name(seq[3]), h.loss.n);
    /* A healthy step between spikes resets the count. */
    health_init(&h);
    baseline(&h, &o, &bad);
    seq[0] = health_step(&h, &o, 51, 5.0, 1.0).action;
    seq[1] = health_step(&h, &o, 51, 5.0, 1.0).action;
    seq[2] = health_step(&h, &o, 51, 2.01, 1.0).action;
    seq[3] = health_step(&h, &o, 52, 5.0, 1.0).action;
    tu_check(seq[0] == HEALTH_ACT_SKIP && seq[1] == HEALTH_ACT_SKIP && seq[2] == HEALTH_ACT_NONE &&
                 seq[3] == HEALTH_ACT_SKIP && h.consecutive_actions == 1,
             "health_skip_count_resets", "consecutive=%d", h.consecutive_actions);
    o.policy = HEALTH_POLICY_ROLLBACK;
    health_init(&h);
    baseline(&h, &o, &bad);
    HealthVerdict r = health_step(&h, &o, 51, 5.0, 1.0);
    tu_check(r.action == HEALTH_ACT_ROLLBACK && h.rollbacks == 1 && !r.accepted && strstr(r.why, "step 51"),
             "health_rollback_policy", "action=%s why=\"%s\"", health_action_name(r.action), r.why);
}

static void test_nonfinite(void) {
    HealthOptions o;
    health_default_options(&o);
    o.max_nonfinite = 3;
    HealthState h;
    health_init(&h);
    int bad = 0;
    baseline(&h, &o, &bad);
    HealthAction a0 = health_step(&h, &o, 51, NAN, 1.0).action;
    HealthAction a1 = health_step(&h, &o, 51, 2.0, INFINITY).action;
    HealthAction a2 = health_step(&h, &o, 51, 2.0, 1.0).action; /* healthy: resets */
    HealthAction b0 = health_step(&h, &o, 52, INFINITY, 1.0).action;
    HealthAction b1 = health_step(&h, &o, 52, NAN, NAN).action;
    HealthVerdict b2 = health_step(&h, &o, 52, -INFINITY, 1.0);
    tu_check(a0 == HEALTH_ACT_SKIP && a1 == HEALTH_ACT_SKIP && a2 == HEALTH_ACT_NONE && b0 == HEALTH_ACT_SKIP &&
                 b1 == HEALTH_ACT_SKIP && b2.action == HEALTH_ACT_STOP && h.nonfinite == 5 && h.loss.n == 51 &&
                 strstr(b2.why, "3 consecutive non-finite"),
             "health_nonfinite_skip_then_stop", "actions %s %s %s %s %s %s, why=\"%s\"", health_action_name(a0),
             health_action_name(a1), health_action_name(a2), health_action_name(b0), health_action_name(b1),
             health_action_name(b2.action), b2.why);
}

static void test_stall(void) {
    HealthOptions o;
    health_default_options(&o);
    o.window = 10;
    o.min_history = 5;
    o.stall_window = 20;
    HealthState h;
    health_init(&h);
    /* Loss 3 - 0.05·s for s <= 30 (1.5 at 30), then flat 1.5. The median of the last 10 reaches 1.5
     * at step 35 (six values of 1.5: steps 30..35), after 1.525 at step 34: best at step 35. No
     * improvement after that: stalls at 35 + 20 = 55 and 75, not in between. */
    int stalls[4], ns = 0;
    for (int s = 1; s <= 90; s++) {
        HealthVerdict v = health_step(&h, &o, s, s <= 30 ? 3 - 0.05 * s : 1.5, 1.0);
        if (v.stall && ns < 4) stalls[ns++] = s;
    }
    tu_check(ns == 2 && stalls[0] == 55 && stalls[1] == 75 && h.best_step == 35, "health_stall_at_55_75",
             "stalls=%d first=%d second=%d best_step=%lld", ns, ns > 0 ? stalls[0] : -1, ns > 1 ? stalls[1] : -1,
             (long long)h.best_step);
}

static void test_json_round_trip(void) {
    HealthOptions o;
    health_default_options(&o);
    o.policy = HEALTH_POLICY_SKIP;
    o.stall_window = 30;
    o.window = 40;
    HealthState a, b;
    health_init(&a);
    for (int s = 1; s <= 100; s++) health_step(&a, &o, s, 2.0 + 0.01 * (s % 7) + (s == 77 ? 3 : 0), 1.0 + 0.01 * (s % 5));
    cJSON *j = health_state_to_json(&a);
    char *text = cJSON_PrintUnformatted(j);
    cJSON *back = cJSON_Parse(text);
    Err e = {0};
    Status st = health_state_from_json(&b, back, o.window, &e);
    int same = st == ST_OK && b.spikes == a.spikes && b.skips == a.skips && b.loss.n == a.loss.n;
    for (int s = 101; s <= 200 && same; s++) {
        double loss = 2.0 + 0.01 * (s % 7) + (s % 50 == 0 ? 3 : 0), gn = 1.0 + 0.01 * (s % 5);
        HealthVerdict va = health_step(&a, &o, s, loss, gn), vb = health_step(&b, &o, s, loss, gn);
        same = va.action == vb.action && va.stall == vb.stall && va.loss_z == vb.loss_z && va.gnorm_z == vb.gnorm_z;
    }
    tu_check(same, "health_json_round_trip", "status=%d spikes=%lld; same verdicts for 100 more steps", st,
             (long long)a.spikes);
    cJSON_ReplaceItemInObject(back, "loss_window", cJSON_CreateString("x"));
    st = health_state_from_json(&b, back, o.window, &e);
    tu_check(st == ST_ERR_INPUT && strstr(e.msg, "health.loss_window"), "health_json_bad_field", "%s", e.msg);
    cJSON_Delete(j);
    cJSON_Delete(back);
    cJSON_free(text);
}

static void test_options(void) {
    HealthOptions o;
    health_default_options(&o);
    Err e = {0};
    int ok = health_validate_options(&o, &e) == ST_OK;
    o.window = 2;
    int w = health_validate_options(&o, &e) == ST_ERR_INPUT && strstr(e.msg, "--spike-window");
    health_default_options(&o);
    o.min_history = 100;
    int m = health_validate_options(&o, &e) == ST_ERR_INPUT && strstr(e.msg, "--spike-min-history");
    HealthPolicy p;
    int parse = health_policy_parse("rollback", &p) == 0 && p == HEALTH_POLICY_ROLLBACK && health_policy_parse("x", &p) == -1;
    tu_check(ok && w && m && parse, "health_options", "defaults ok=%d window=%d history=%d parse=%d", ok, w, m, parse);
}

int main(void) {
    test_stats();
    test_spike_log();
    test_abs_threshold_and_history();
    test_smooth_no_false_positive();
    test_policy_cap();
    test_nonfinite();
    test_stall();
    test_json_round_trip();
    test_options();
    printf("sizeof(HealthState) = %zu bytes\n", sizeof(HealthState));
    return tu_exit();
}
