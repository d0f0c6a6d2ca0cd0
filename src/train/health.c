/* health.c — spike, non-finite and stall detectors and the action policy (contracts in health.h). */
#include "train/health.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/stats.h"

/* ------------------------------------------------------------------------------------------------
 * Options
 * ---------------------------------------------------------------------------------------------- */

void health_default_options(HealthOptions *o) {
    memset(o, 0, sizeof *o);
    o->window = 64;
    o->min_history = 16;
    o->min_sigma = 1e-3;
    o->loss.abs_threshold = 0;
    o->loss.z_threshold = 6;
    o->gnorm.abs_threshold = 0;
    o->gnorm.z_threshold = 10;
    o->policy = HEALTH_POLICY_LOG;
    o->max_actions = 3;
    o->max_nonfinite = 5;
    o->stall_window = 0;
    o->stall_min_delta = 1e-3;
}

Status health_validate_options(const HealthOptions *o, Err *err) {
    if (o->window < 3 || o->window > HEALTH_WINDOW_MAX)
        return err_set(err, ST_ERR_INPUT, "--spike-window: expected 3..%d, found %d", HEALTH_WINDOW_MAX, o->window);
    if (o->min_history < 3 || o->min_history > o->window)
        return err_set(err, ST_ERR_INPUT, "--spike-min-history: expected 3..%d (the window), found %d", o->window,
                       o->min_history);
    if (!(o->min_sigma > 0)) return err_set(err, ST_ERR_INPUT, "--spike-min-sigma: expected > 0, found %g", o->min_sigma);
    const struct { const char *flag; double v; } T[] = {
        {"spike-abs", o->loss.abs_threshold}, {"gnorm-spike-abs", o->gnorm.abs_threshold},
        {"spike-z", o->loss.z_threshold}, {"gnorm-spike-z", o->gnorm.z_threshold},
    };
    for (int i = 0; i < 4; i++)
        if (!(T[i].v >= 0)) return err_set(err, ST_ERR_INPUT, "--%s: expected >= 0 (0 = off), found %g", T[i].flag, T[i].v);
    if (o->policy < HEALTH_POLICY_LOG || o->policy > HEALTH_POLICY_ROLLBACK)
        return err_set(err, ST_ERR_INPUT, "--spike-policy: expected log, skip or rollback, found policy %d", (int)o->policy);
    if (o->max_actions < 1)
        return err_set(err, ST_ERR_INPUT, "--spike-max-actions: expected >= 1, found %d", o->max_actions);
    if (o->max_nonfinite < 1)
        return err_set(err, ST_ERR_INPUT, "--max-nonfinite: expected >= 1, found %d", o->max_nonfinite);
    if (o->stall_window < 0)
        return err_set(err, ST_ERR_INPUT, "--stall-window: expected >= 0 (0 = off), found %d", o->stall_window);
    if (!(o->stall_min_delta >= 0))
        return err_set(err, ST_ERR_INPUT, "--stall-min-delta: expected >= 0, found %g", o->stall_min_delta);
    return ST_OK;
}

static const char *const POLICY[] = {"log", "skip", "rollback"};
static const char *const ACTION[] = {"none", "log", "skip", "rollback", "stop"};

int health_policy_parse(const char *s, HealthPolicy *p) {
    for (int i = 0; i < 3; i++)
        if (!strcmp(s, POLICY[i])) {
            *p = (HealthPolicy)i;
            return 0;
        }
    return -1;
}

const char *health_policy_name(HealthPolicy p) { return p >= 0 && p <= 2 ? POLICY[p] : "?"; }
const char *health_action_name(HealthAction a) { return a >= 0 && a <= 4 ? ACTION[a] : "?"; }

/* ------------------------------------------------------------------------------------------------
 * Statistics
 * ---------------------------------------------------------------------------------------------- */

double health_median(const double *x, int n) {
    double t[HEALTH_WINDOW_MAX]; /* a copy on the stack: no allocation in the step loop */
    ST_CHECK(n >= 1 && n <= HEALTH_WINDOW_MAX);
    memcpy(t, x, sizeof(double) * (size_t)n);
    return stats_median_inplace(t, (size_t)n);
}

double health_mad(const double *x, int n) {
    double d[HEALTH_WINDOW_MAX], m = health_median(x, n);
    for (int i = 0; i < n; i++) d[i] = fabs(x[i] - m);
    return health_median(d, n);
}

double health_robust_z(const double *x, int n, double value, double min_sigma) {
    double sigma = 1.4826 * health_mad(x, n);
    if (sigma < min_sigma) sigma = min_sigma;
    return (value - health_median(x, n)) / sigma;
}

int health_series_values(const HealthSeries *s, double *out) {
    /* The oldest value sits at head - n (mod the ring size). */
    for (int i = 0; i < s->n; i++) out[i] = s->v[(s->head - s->n + i + HEALTH_WINDOW_MAX) % HEALTH_WINDOW_MAX];
    return s->n;
}

/* Appends x, dropping the oldest beyond `window` values. */
static void series_push(HealthSeries *s, double x, int window) {
    s->v[s->head] = x;
    s->head = (s->head + 1) % HEALTH_WINDOW_MAX;
    if (s->n < window) s->n++;
}

/* Median and z of x against s; returns 1 (spike) / 0, or 0 with NaNs when the window is short. */
static int detect(const HealthSeries *s, const HealthOptions *o, const HealthDetector *d, double x, double *median,
                  double *z) {
    *median = NAN, *z = NAN;
    if (s->n < o->min_history) return 0;
    double w[HEALTH_WINDOW_MAX];
    int n = health_series_values(s, w);
    *median = health_median(w, n);
    *z = health_robust_z(w, n, x, o->min_sigma);
    return (d->abs_threshold > 0 && x > *median + d->abs_threshold) || (d->z_threshold > 0 && *z > d->z_threshold);
}

/* ------------------------------------------------------------------------------------------------
 * The step
 * ---------------------------------------------------------------------------------------------- */

void health_init(HealthState *h) {
    memset(h, 0, sizeof *h);
    h->version = HEALTH_STATE_VERSION;
    h->best_median = INFINITY;
    h->best_step = -1;
    h->last_stall_step = -1;
}

/* A NaN prints as "nan" (printf's "-nan" for the NaN a 0/0 makes reads like a sign that means something). */
static double unsigned_nan(double x) { return isnan(x) ? NAN : x; }

HealthVerdict health_step(HealthState *h, const HealthOptions *o, int64_t step, double loss, double grad_norm) {
    HealthVerdict v;
    memset(&v, 0, sizeof v);
    v.loss_median = v.loss_z = v.gnorm_median = v.gnorm_z = NAN;
    if (!isfinite(loss) || !isfinite(grad_norm)) {
        v.nonfinite = 1;
        h->nonfinite++;
        h->consecutive_nonfinite++;
        if (h->consecutive_nonfinite >= o->max_nonfinite) {
            v.action = HEALTH_ACT_STOP;
            snprintf(v.why, sizeof v.why, "%d consecutive non-finite steps (step %lld: loss %g, grad norm %g)",
                     h->consecutive_nonfinite, (long long)step, unsigned_nan(loss), unsigned_nan(grad_norm));
        } else {
            v.action = HEALTH_ACT_SKIP;
            h->skips++;
            snprintf(v.why, sizeof v.why, "non-finite step %lld (loss %g, grad norm %g): update skipped", (long long)step,
                     unsigned_nan(loss), unsigned_nan(grad_norm));
        }
        return v;
    }
    h->consecutive_nonfinite = 0;
    v.loss_spike = detect(&h->loss, o, &o->loss, loss, &v.loss_median, &v.loss_z);
    v.gnorm_spike = detect(&h->gnorm, o, &o->gnorm, grad_norm, &v.gnorm_median, &v.gnorm_z);
    if (v.loss_spike || v.gnorm_spike) {
        h->spikes++;
        const char *what = v.loss_spike ? "loss" : "grad norm";
        double x = v.loss_spike ? loss : grad_norm, m = v.loss_spike ? v.loss_median : v.gnorm_median;
        double z = v.loss_spike ? v.loss_z : v.gnorm_z;
        if (o->policy == HEALTH_POLICY_LOG) {
            v.action = HEALTH_ACT_LOG;
            snprintf(v.why, sizeof v.why, "%s spike at step %lld: %g vs median %g (robust z %.1f)", what,
                     (long long)step, x, m, z);
        } else if (h->consecutive_actions >= o->max_actions) {
            v.action = HEALTH_ACT_STOP;
            snprintf(v.why, sizeof v.why,
                     "%s spike at step %lld (%g vs median %g, robust z %.1f) after %d consecutive %ss: the run is "
                     "not recovering",
                     what, (long long)step, x, m, z, h->consecutive_actions, health_policy_name(o->policy));
        } else {
            h->consecutive_actions++;
            v.action = o->policy == HEALTH_POLICY_SKIP ? HEALTH_ACT_SKIP : HEALTH_ACT_ROLLBACK;
            if (v.action == HEALTH_ACT_SKIP) h->skips++;
            else h->rollbacks++;
            snprintf(v.why, sizeof v.why, "%s spike at step %lld: %g vs median %g (robust z %.1f): %s", what,
                     (long long)step, x, m, z, health_policy_name(o->policy));
        }
        if (v.action != HEALTH_ACT_LOG) return v; /* the update is discarded: keep the baseline clean */
    } else {
        h->consecutive_actions = 0;
    }
    series_push(&h->loss, loss, o->window);
    series_push(&h->gnorm, grad_norm, o->window);
    v.accepted = 1;
    /* Stall: the rolling median must keep improving. */
    if (o->stall_window > 0 && h->loss.n >= o->min_history) {
        double w[HEALTH_WINDOW_MAX];
        int n = health_series_values(&h->loss, w);
        double m = health_median(w, n);
        if (!isfinite(h->best_median) || m < h->best_median - o->stall_min_delta) {
            h->best_median = m;
            h->best_step = step;
        } else if (step - h->best_step >= o->stall_window &&
                   (h->last_stall_step < 0 || step - h->last_stall_step >= o->stall_window)) {
            v.stall = 1;
            h->stalls++;
            h->last_stall_step = step;
            if (!v.why[0])
                snprintf(v.why, sizeof v.why, "stall: the loss median %g has not improved on %g (step %lld) for %lld steps",
                         m, h->best_median, (long long)h->best_step, (long long)(step - h->best_step));
        }
    }
    return v;
}

/* ------------------------------------------------------------------------------------------------
 * Checkpoint form
 * ---------------------------------------------------------------------------------------------- */

static cJSON *series_json(const HealthSeries *s) {
    double w[HEALTH_WINDOW_MAX];
    int n = health_series_values(s, w);
    return cJSON_CreateDoubleArray(w, n);
}

cJSON *health_state_to_json(const HealthState *h) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddNumberToObject(o, "version", h->version);
    cJSON_AddItemToObject(o, "loss_window", series_json(&h->loss));
    cJSON_AddItemToObject(o, "grad_norm_window", series_json(&h->gnorm));
    if (isfinite(h->best_median)) cJSON_AddNumberToObject(o, "best_median", h->best_median);
    else cJSON_AddNullToObject(o, "best_median");
    cJSON_AddNumberToObject(o, "best_step", (double)h->best_step);
    cJSON_AddNumberToObject(o, "last_stall_step", (double)h->last_stall_step);
    cJSON_AddNumberToObject(o, "consecutive_actions", h->consecutive_actions);
    cJSON_AddNumberToObject(o, "consecutive_nonfinite", h->consecutive_nonfinite);
    cJSON_AddNumberToObject(o, "spikes", (double)h->spikes);
    cJSON_AddNumberToObject(o, "nonfinite", (double)h->nonfinite);
    cJSON_AddNumberToObject(o, "skips", (double)h->skips);
    cJSON_AddNumberToObject(o, "rollbacks", (double)h->rollbacks);
    cJSON_AddNumberToObject(o, "stalls", (double)h->stalls);
    return o;
}

static Status json_series(HealthSeries *s, const cJSON *j, const char *key, int window, Err *err) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!cJSON_IsArray(a)) return err_set(err, ST_ERR_INPUT, "health.%s: expected an array of numbers", key);
    int n = cJSON_GetArraySize(a), skip = n > window ? n - window : 0, i = 0;
    memset(s, 0, sizeof *s);
    const cJSON *x;
    cJSON_ArrayForEach(x, a) {
        if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble))
            return err_set(err, ST_ERR_INPUT, "health.%s[%d]: expected a finite number", key, i);
        if (i++ >= skip) series_push(s, x->valuedouble, window);
    }
    return ST_OK;
}

/* A whole number in [lo, hi] (steps -1 for none, counters >= 0): 1e300 was cast to an integer
 * (undefined), 2.5 truncated and a counter of -1 kept. */
static Status json_int(const cJSON *j, const char *key, double lo, double hi, int64_t *out, Err *err) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!cJSON_IsNumber(x) || !(x->valuedouble >= lo && x->valuedouble <= hi) || x->valuedouble != floor(x->valuedouble))
        return err_set(err, ST_ERR_INPUT, "health.%s: expected a whole number in [%.0f, %.0f], found %s", key, lo, hi,
                       cJSON_IsNumber(x) ? "another number" : x ? "another value" : "none");
    *out = (int64_t)x->valuedouble;
    return ST_OK;
}

Status health_state_from_json(HealthState *h, const cJSON *j, int window, Err *err) {
    if (!cJSON_IsObject(j)) return err_set(err, ST_ERR_INPUT, "health: expected an object");
    if (window < 1 || window > HEALTH_WINDOW_MAX) window = HEALTH_WINDOW_MAX;
    HealthState t;
    health_init(&t);
    int64_t ver = 0, ca = 0, cn = 0;
    Status st;
    const double big = 9007199254740992.0, i32 = 2147483647.0; /* 2^53: where doubles stop counting */
    if ((st = json_int(j, "version", 0, i32, &ver, err)) != ST_OK) return st;
    if (ver != HEALTH_STATE_VERSION)
        return err_set(err, ST_ERR_INPUT, "health.version: expected %d, found %lld", HEALTH_STATE_VERSION, (long long)ver);
    if ((st = json_series(&t.loss, j, "loss_window", window, err)) != ST_OK) return st;
    if ((st = json_series(&t.gnorm, j, "grad_norm_window", window, err)) != ST_OK) return st;
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(j, "best_median");
    if (cJSON_IsNumber(b)) t.best_median = b->valuedouble;
    else if (!cJSON_IsNull(b)) return err_set(err, ST_ERR_INPUT, "health.best_median: expected a number or null");
    if ((st = json_int(j, "best_step", -1, big, &t.best_step, err)) != ST_OK ||
        (st = json_int(j, "last_stall_step", -1, big, &t.last_stall_step, err)) != ST_OK ||
        (st = json_int(j, "consecutive_actions", 0, i32, &ca, err)) != ST_OK ||
        (st = json_int(j, "consecutive_nonfinite", 0, i32, &cn, err)) != ST_OK ||
        (st = json_int(j, "spikes", 0, big, &t.spikes, err)) != ST_OK ||
        (st = json_int(j, "nonfinite", 0, big, &t.nonfinite, err)) != ST_OK ||
        (st = json_int(j, "skips", 0, big, &t.skips, err)) != ST_OK ||
        (st = json_int(j, "rollbacks", 0, big, &t.rollbacks, err)) != ST_OK ||
        (st = json_int(j, "stalls", 0, big, &t.stalls, err)) != ST_OK)
        return st;
    t.consecutive_actions = (int32_t)ca;
    t.consecutive_nonfinite = (int32_t)cn;
    *h = t;
    return ST_OK;
}
