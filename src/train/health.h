/* health.h — run-health detectors the trainer calls once per optimizer step (issue 8): loss and
 * gradient-norm spikes against a rolling median with a robust (MAD-based) z-score, non-finite
 * steps, stalls, and the policy that turns a detection into an action with a cap.
 *
 * Pure: no I/O, no allocation, no clock. The whole state is one plain, fixed-size struct
 * (HealthState, about 4 KiB) so a checkpoint can hold it; health_state_to_json / _from_json give
 * the form stored in state.json.
 *
 * Definitions (window W = the last K accepted values, oldest dropped first; K = HealthOptions.window):
 *   median(W)   middle value, or the mean of the two middle values when |W| is even;
 *   MAD(W)      median of |w - median(W)| over W;
 *   sigma(W)    1.4826 · MAD(W) (a normal distribution's standard deviation), floored at
 *               HealthOptions.min_sigma so a flat window does not turn noise into infinite z;
 *   z(x)        (x - median(W)) / sigma(W).
 * A value x is tested against the window BEFORE it is added. It is a spike when |W| >= min_history
 * and (abs_threshold > 0 and x > median + abs_threshold) or (z_threshold > 0 and z(x) > z_threshold).
 * Only upward excursions count: a loss or norm that drops is never a spike.
 *
 * Which values enter the window: a finite value that is not a spike always; a spike only under the
 * `log` policy (the update was applied, so it is history); never a non-finite value, nor a spike
 * whose update was skipped or rolled back (so a burst of spikes is judged against the pre-spike
 * baseline).
 *
 * Stall: the rolling loss median (once |W| >= min_history) must improve on its best so far by more
 * than stall_min_delta within stall_window steps; otherwise the step is flagged as a stall, at most
 * once per stall_window steps. Off when stall_window is 0.
 *
 * Actions (HealthVerdict.action), in this order of precedence:
 *   non-finite loss or gradient norm → HEALTH_ACT_SKIP whatever the policy (non-finite values never
 *       reach the weights); after max_nonfinite consecutive non-finite steps → HEALTH_ACT_STOP;
 *   a loss or gradient-norm spike → the policy: HEALTH_ACT_LOG (apply the update, log the spike),
 *       HEALTH_ACT_SKIP or HEALTH_ACT_ROLLBACK; skip and rollback count as consecutive actions and
 *       the (max_actions + 1)-th in a row is HEALTH_ACT_STOP;
 *   otherwise HEALTH_ACT_NONE, which resets both consecutive counters.
 * A STOP verdict carries a one-line diagnosis in `why`. */
#ifndef ST_TRAIN_HEALTH_H
#define ST_TRAIN_HEALTH_H

#include <stdint.h>

#include <cjson/cJSON.h>

#include "core/status.h"

#define HEALTH_WINDOW_MAX 256 /* largest K */
#define HEALTH_STATE_VERSION 1

typedef enum { HEALTH_POLICY_LOG = 0, HEALTH_POLICY_SKIP = 1, HEALTH_POLICY_ROLLBACK = 2 } HealthPolicy;

typedef enum {
    HEALTH_ACT_NONE = 0,     /* healthy step: apply the update */
    HEALTH_ACT_LOG = 1,      /* spike under policy log: apply the update, write a spike event */
    HEALTH_ACT_SKIP = 2,     /* discard the update (no optimizer step, schedule and Adam t stay) */
    HEALTH_ACT_ROLLBACK = 3, /* reload the last checkpoint, skip the batches up to this one */
    HEALTH_ACT_STOP = 4,     /* stop the run with `why` (name the last good checkpoint) */
} HealthAction;

/* One detector (loss or gradient norm). A threshold of 0 turns that test off. */
typedef struct {
    double abs_threshold; /* spike if x > median + abs_threshold (units of the metric) */
    double z_threshold;   /* spike if robust z > z_threshold */
} HealthDetector;

typedef struct {
    int window;             /* K: accepted values kept per metric, 3..HEALTH_WINDOW_MAX (default 64) */
    int min_history;        /* no detection before the window holds this many, 3..window (default 16) */
    double min_sigma;       /* floor of the robust sigma, > 0 (default 1e-3) */
    HealthDetector loss;    /* default: abs off, z 6 */
    HealthDetector gnorm;   /* default: abs off, z 10 (norms are heavier-tailed than losses) */
    HealthPolicy policy;    /* default log */
    int max_actions;        /* consecutive skip/rollback actions allowed (default 3) */
    int max_nonfinite;      /* consecutive non-finite steps before STOP (default 5) */
    int stall_window;       /* steps without improvement of the loss median → stall; 0 off (default 0) */
    double stall_min_delta; /* an improvement must exceed this (nats; default 1e-3) */
} HealthOptions;

/* A rolling window: ring buffer of the last n accepted values. */
typedef struct {
    double v[HEALTH_WINDOW_MAX];
    int32_t n;    /* values held, <= window */
    int32_t head; /* index where the next value goes */
} HealthSeries;

/* Everything the detectors remember; save it in checkpoints, restore it on resume. */
typedef struct {
    int32_t version;           /* HEALTH_STATE_VERSION */
    HealthSeries loss, gnorm;  /* accepted values */
    double best_median;        /* best rolling loss median so far (+inf before the first) */
    int64_t best_step;         /* step where it was reached (or where tracking began) */
    int64_t last_stall_step;   /* last step flagged as a stall (-1 none) */
    int32_t consecutive_actions;   /* skip/rollback verdicts in a row */
    int32_t consecutive_nonfinite; /* non-finite steps in a row */
    int64_t spikes, nonfinite, skips, rollbacks, stalls; /* totals over the run */
} HealthState;

/* What health_step decided for one step. */
typedef struct {
    HealthAction action;
    int nonfinite;                     /* loss or grad norm was NaN or infinite */
    int loss_spike, gnorm_spike;       /* detections (before the policy) */
    int stall;                         /* flag a stall this step (log a "stall" event) */
    int accepted;                      /* the values entered the windows */
    double loss_median, loss_z;        /* of the loss window before this step; NaN if too short */
    double gnorm_median, gnorm_z;      /* same for the gradient norm */
    char why[256];                     /* diagnosis for STOP; a description for spikes and stalls */
} HealthVerdict;

void health_default_options(HealthOptions *o);

/* Checks ranges; errors name the option (--spike-window, --spike-z, ...; see docs/report.md). */
Status health_validate_options(const HealthOptions *o, Err *err);

/* "log" | "skip" | "rollback" → policy; 0 on success, -1 if unknown. */
int health_policy_parse(const char *s, HealthPolicy *p);
const char *health_policy_name(HealthPolicy p);
const char *health_action_name(HealthAction a);

/* Fresh state (empty windows, best = +inf). */
void health_init(HealthState *h);

/* Evaluates step `step` with its loss and pre-clip global gradient norm, updates h and returns
 * the verdict (see the rules above). Call once per optimizer step attempt, after the gradient norm
 * and before clipping and the optimizer; o must be valid. */
HealthVerdict health_step(HealthState *h, const HealthOptions *o, int64_t step, double loss, double grad_norm);

/* ---- the pure statistics (exposed for tests and for the report) ---- */

/* Median of x[0..n) (n >= 1; x is not modified). */
double health_median(const double *x, int n);
/* Median absolute deviation around the median. */
double health_mad(const double *x, int n);
/* Robust z of value against the window x[0..n): (value - median) / max(1.4826·MAD, min_sigma). */
double health_robust_z(const double *x, int n, double value, double min_sigma);
/* The window's values, oldest first, into out (s->n values); returns s->n. */
int health_series_values(const HealthSeries *s, double *out);

/* ---- checkpoint form ---- */

/* The state as a JSON object (windows oldest first; +inf as null). NULL on out of memory. */
cJSON *health_state_to_json(const HealthState *h);
/* Restores from health_state_to_json's object. Errors (ST_ERR_INPUT) name the bad field; window
 * lengths above `window` keep the newest values. */
Status health_state_from_json(HealthState *h, const cJSON *j, int window, Err *err);

#endif
