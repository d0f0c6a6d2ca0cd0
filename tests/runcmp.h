/* runcmp.h — running `scaletrain` from a test and comparing a run against a reference run, shared
 * by the end-to-end parallelism tests (test_dp, test_tp, test_tp_plan).
 *
 * Each test keeps its runs in one directory `dir`: run NAME writes its shell output to
 * dir/NAME.out, its metrics log to dir/NAME.jsonl and its --out weights to dir/NAME_out/. */
#ifndef ST_RUNCMP_H
#define ST_RUNCMP_H

#include <stddef.h>

#include "model/layout.h"

struct cJSON;

/* ---- runs ---- */

/* The dp/tp tests' training shard: dir/train.bin, 30000 tokens of a vocabulary of 97 in a
 * repeating but not periodic pattern (dir is created). Exits the test if it cannot be written. */
void rc_make_data(const char *dir);

/* A validation shard dir/name: 4096 tokens of the same vocabulary in another pattern than
 * train.bin's; variant 1 gives other tokens again (the validation comparison's negative control). */
void rc_make_val_data(const char *dir, const char *name, int variant);

/* Runs a shell command with output to dir/name.out; returns the exit code (-1 on a signal) and, if
 * secs is not NULL, the wall time in seconds. A run whose output shows that Open MPI could not start
 * the job (rc_mpi_start_failure) is run once more, the first output kept as name.out.mpi-start-failed. */
int rc_run(const char *dir, const char *name, const char *cmd, double *secs);

/* The phrase of Open MPI's by which out (a job's output) says the job could not start (launch,
 * run-time or MPI_Init failed), NULL if none. */
const char *rc_mpi_start_failure(const char *out);

/* A shell command's standard output (up to 128 KiB) parsed as one JSON value (caller deletes), NULL if
 * it cannot be run or is not JSON: `scaletrain plan --json`. */
struct cJSON *rc_command_json(const char *cmd);

/* test_health_train's learnable data for the spike runs through tp_worker: dir/health.bin, 30000
 * tokens of a vocabulary of 64. Exits the test if it cannot be written. */
void rc_make_health_data(const char *dir);

/* ---- the metrics log ---- */

/* A record's number field k, NAN if absent or not a number. */
double rc_num(const struct cJSON *o, const char *k);

/* A record's "event", or NULL. */
const char *rc_event(const struct cJSON *o);

/* The health actions of run `name`'s log as text: each spike/nonfinite record's step, metric and
 * action, each skip's step and batch, each rollback's step, target step and batch ("(no log)" if
 * unreadable): two runs took the same actions iff the texts are equal. */
void rc_health_actions(const char *dir, const char *name, char *out, size_t cap);

/* Every record of dir/name.jsonl (tu_log_records; caller deletes), NULL if unreadable. */
struct cJSON *rc_records(const char *dir, const char *name);

/* The first "memory" record of a log that holds `field` (the start-time one has measured_by_rank,
 * the first step's allocated_total_by_rank and rss_anon_above_baseline_by_rank), or NULL. */
const struct cJSON *rc_memory_record(const struct cJSON *all, const char *field);

/* 1 if a step record's grad_norm_by_rank holds `world` values bitwise equal to its grad_norm (the
 * log prints doubles round-trip exactly, so equal bits print as equal text and parse back equal).
 * A non-finite norm is logged as null: then every rank's must be null. */
int rc_norms_identical(const struct cJSON *step, int world);

/* Negative control of the per-rank norm check: the first step record of run `name` (on `world`
 * ranks) must pass rc_norms_identical, and fail it with its last rank's norm one ulp off. */
void rc_check_norm_control(const char *dir, const char *name, int world);

#define RC_MAXSTEPS 64 /* the longest run the tests log (test_tp's spike runs) */

/* The step records of a run (a later record of a step replaces an earlier one: a resume or a
 * rollback repeats steps); steps above RC_MAXSTEPS are ignored. */
typedef struct {
    int n;        /* the highest step 1..RC_MAXSTEPS read */
    double loss[RC_MAXSTEPS], norm[RC_MAXSTEPS], mfu[RC_MAXSTEPS], tok_s[RC_MAXSTEPS], ms[RC_MAXSTEPS],
        tokens[RC_MAXSTEPS];
    int world;    /* the (last) start record's */
    long unequal; /* step records whose ranks' norms are not all grad_norm */
    double flops_per_token, peak, peak_job, batch_tokens; /* the (last) start record's */
} RcLog;

/* Reads dir/name.jsonl into lg (zeroed first); 1 if the log could be read. */
int rc_read_log(const char *dir, const char *name, RcLog *lg);

/* Max over i < n of |a[i] - b[i]| / |b[i]| (b = reference); NaN if any term is NaN. */
double rc_max_rel(const double *a, const double *b, int n);

/* Every step 1..steps's loss and grad_norm of run `name` against `ref` (max relative difference);
 * la receives name's log. 1 if both logs hold exactly `steps` steps. */
int rc_log_diffs(const char *dir, const char *name, const char *ref, int steps, double *loss, double *norm, RcLog *la);

/* The validation records ("val": step, loss) of run `name` against those of `ref`: both logs must
 * hold the same steps, at least want of them (the end's among them); *worst gets the max relative
 * difference of the losses (NaN when the steps differ or a log is unreadable), *n the count.
 * Returns 1 if both logs hold the same >= want steps. */
int rc_val_diffs(const char *dir, const char *name, const char *ref, int want, double *worst, int *n);

/* rc_val_diffs within tol as a check named "<name>: validation losses ..." (and against `ref`). */
void rc_check_val(const char *dir, const char *name, const char *ref, int want, double tol);

/* ---- weights ---- */

/* Final weights of run `name` (dir/name_out/model.safetensors, written in full shapes at any grid)
 * read into the one-process layout pl (caller frees), NULL if missing or unreadable. */
float *rc_weights(const char *dir, const char *name, const ParamLayout *pl);

/* Max over tensors of ||a - b|| / ||b||. The key third of each qkv bias is compared apart: its
 * gradient is zero in exact arithmetic (a key bias shifts every score of a query row alike, and
 * softmax ignores shifts), so in fp32 it is rounding noise (~1e-10) that Adam normalizes into
 * lr-sized steps whose signs follow the summation order: any change of order (threads, ranks)
 * makes it differ by ~100 % of its tiny norm (~1e-5). It is checked by max abs difference
 * (*key_abs), the Q and V thirds by relative norm like every other tensor. */
double rc_weights_rel(const ParamLayout *pl, const float *a, const float *b, double *key_abs);

/* ---- a run against its reference ---- */

/* Tolerances (or measured differences) of a comparison: losses and norms max relative difference
 * per step, weights max per-tensor relative norm, the key bias max abs difference. */
typedef struct {
    double loss, norm, w, key;
} RcTol;

/* Run `name` against `ref` over `steps` steps, three checks: losses and gradient norms within t,
 * every rank logged the same norm, final weights (against wref, ref's, in layout pl) within t.
 * got (if not NULL) receives the measured differences. */
void rc_compare(const char *dir, const char *name, const char *ref, int steps, const ParamLayout *pl, const float *wref,
                RcTol t, RcTol *got);

/* The spread one precision shows for another summation order in one process: run `alt` (another
 * micro-batch split of the same global batch) against `ref`, printed as one line labelled tag;
 * the measured differences in *spread (norm NaN unless both logs hold `steps` steps). */
void rc_spread(const char *dir, const char *alt, const char *ref, int steps, const ParamLayout *pl, const char *tag,
               RcTol *spread);

/* ---- resident memory ---- */

/* Resident anonymous memory above the run's baseline (the record's rss_anon_above_baseline_by_rank)
 * against `allocated` on every rank, within 5%; the worst relative difference in *worst. */
int rc_rss_within(const struct cJSON *rec, int world, const double *allocated, double *worst);

/* The RSS checks of a run's log on np ranks: every rank's RSS above baseline within 5% of its
 * allocated total (named "<label>: every rank's RSS ..."), and the negative control that the
 * allocation less the optimizer moments fails it ("negative control: <control> RSS ..."). */
void rc_check_rss(const struct cJSON *all, int np, const char *label, const char *control);

#endif
