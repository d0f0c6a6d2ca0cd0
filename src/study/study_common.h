/* study_common.h — what the studies share (lr_transfer.c, spike.c, optimizers.c; their commands
 * are cli/cmd_study.c and cli/cmd_study_opt.c): learning-rate lists and their labels, a sweep spec
 * of the bundled corpus written and run through the sweep engine, the page and summary written
 * atomically, and small readers of the metrics log's JSON records. Library code of src/study
 * (issue 24: moved from cli/): errors are a Status with an Err; rank 0 prints progress lines only;
 * nothing exits. */
#ifndef ST_STUDY_STUDY_COMMON_H
#define ST_STUDY_STUDY_COMMON_H

#include <stddef.h>

#include "study/sweep.h"
#include "comm/comm.h"
#include "core/status.h"
#include "report/figures.h"

struct cJSON;

#define STUDY_MAXV 32 /* values in a list flag (--widths, --lrs, an optimizer's lr grid) */

/* "128,256" or "2^-7,0.01" → v[0..*n), every value > 0, at most STUDY_MAXV. Errors (ST_ERR_INPUT)
 * name --flag, what was expected and what was found. */
Status study_parse_list(const char *flag, const char *s, double *v, int *n, Err *err);

/* The study's --out, checked before anything is written: empty (the study wrote into "/":
 * "/index.html", "/runs/") or an existing file is ST_ERR_INPUT naming --out. */
Status study_check_out(const char *out, Err *err);

/* lr as "2^k" when it is a power of two (within 1e-6 in the exponent), else "%.3g". */
void study_lr_str(double lr, char *buf, size_t cap);

/* text[0..len) to path, atomically (file_write_atomic). */
Status study_write_text(const char *path, const char *text, size_t len, Err *err);

/* DIR/index.html (page rendered by fig_render) and DIR/summary.json (summary printed), each atomic. */
Status study_write_page(const char *dir, const FigPage *page, const struct cJSON *summary, Err *err);

/* The number o[k], NaN when absent or not a number. */
double study_jnum(const struct cJSON *o, const char *k);

/* A metrics log read by report_load_run (the one reader of logs) into a new ReportRun (free with
 * report_run_free, then free); NULL when it cannot be read. */
struct ReportRun *study_load_log(const char *path);


/* A new sweep spec (caller deletes) on the bundled corpus: name, and a base of seq_len T (also
 * max_seq_len), micro_batch B, threads, val_batches vb, peak_gflops 100 (MFU is not studied: no
 * peak measurement) and max_nonfinite 1 (a diverged run stops at once, recorded as failed, no
 * loss). *base points at the base object, for the caller's own keys. NULL when out of memory. */
struct cJSON *study_spec_new(const char *name, int T, int B, int threads, int vb, struct cJSON **base);

/* Writes spec to sub/spec.json (sub is created) and trains every run of it not done yet through
 * the sweep engine (sweep_load, sweep_execute: finished runs are skipped, interrupted ones resume).
 * On ST_OK, *s holds the loaded sweep (caller frees with sweep_free) and *interrupted says whether
 * a run was stopped by a signal; on an error *s is freed. */
Status study_sweep_run(const char *sub, const struct cJSON *spec, Comm *comm, const TrainFlagsParser *tp, Sweep *s,
                       int *interrupted, Err *err);

/* Trains one run through the library with `scaletrain train`'s flags (train_args_parse, then
 * train_run on comm), logged to log (appended to if it exists). Rank 0 prints "<study>: <name>:
 * <command line>". A run that fails after training some steps (divergence past --max-nonfinite) is
 * a result: ST_OK, with its message in failure[0..cap) ("" when it finished). Other errors (a
 * refused flag: ST_ERR_INPUT) are returned. */
Status study_train(const char *study, const char *name, char *const *flags, int nflags, const char *log, Comm *comm,
                   const TrainFlagsParser *tp, char *failure, size_t cap, Err *err);

/* Joins s[0..n) as lines ("s0\ns1\n...") into a malloc'd text; NULL when out of memory. */
char *study_lines(const char *const *s, int n);

#endif
