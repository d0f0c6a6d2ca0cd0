/* testutil.h — tiny helpers shared by the test executables.
 *
 * Each test names its oracle and tolerance and prints "name: OK maxdiff=..." or FAIL; any
 * failure makes the executable exit non-zero (TU_EXIT). */
#ifndef ST_TESTUTIL_H
#define ST_TESTUTIL_H

#include <stddef.h>

extern int tu_failures;

/* Records a check: prints "name: OK <detail>" or "name: FAIL <detail>". */
void tu_check(int ok, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ||a - b|| / ||b|| in double (b = reference); 0 if both are zero. */
double tu_rel_err_f(const float *a, const float *b, size_t n);
double tu_rel_err_fd(const float *a, const double *b, size_t n);
double tu_max_abs_diff_f(const float *a, const float *b, size_t n);

/* Runs a shell command the test needs to set up or clean (rm, cp, mkdir): 1 if it exited 0, else
 * records a failed check naming the command and its status and returns 0, so a failed setup
 * never turns a test into a silent pass. */
int tu_shell(const char *cmd);

/* Runs `bin args` in the folder dir, its stdout into dir/stdout.txt and its stderr into
 * dir/stderr.txt; returns the exit code (128 + the signal of one killed, -1 unknown). err (when cap
 * > 0) gets stderr without its last newline, *lines (when not NULL) its number of lines. */
int tu_run_in(const char *dir, const char *bin, const char *args, char *err, size_t cap, int *lines);
/* tu_run_in as a check: a refusal (exit 2, one stderr line holding want), or a run that succeeds. */
void tu_refused_in(const char *dir, const char *bin, const char *name, const char *args, const char *want);
void tu_ran_in(const char *dir, const char *bin, const char *name, const char *args);

/* The whole file as a NUL-terminated string (caller frees), or NULL if it cannot be read. */
char *tu_slurp(const char *path);

/* 1 if both files can be read and hold the same bytes. */
int tu_same_file(const char *a, const char *b);

/* For a test whose AVX512_BF16 kernels (`what`) this build lacks: records a check that fails where
 * the CPU has avx512bf16 (the build lost -march=native: ST_ARCH_FLAGS) and passes otherwise, saying
 * what runs instead (`instead`). The caller then ends the test (tu_exit). */
void tu_bf16_kernels_missing(const char *what, const char *instead);

/* ---- the metrics log (src/train/events.h) ---- */

/* Every record of a JSON Lines log, in file order, as one cJSON array (caller deletes); NULL if
 * the file cannot be read or a line is not JSON. */
struct cJSON *tu_log_records(const char *path);

/* One run within a log: a start record and the records up to the next start. */
typedef struct {
    long resumed_from;        /* the start record's resumed_from_step */
    int found;                /* its resume.found */
    int world;                /* its world */
    long first_step, last_step, nsteps; /* of its step records (0 when it has none) */
    int consecutive;          /* every step record's step is the previous one's + 1 */
} TuLogRun;

/* The runs of a log in order; returns how many start records it holds (at most max are filled),
 * or -1 if it cannot be read. */
int tu_log_runs(const char *path, TuLogRun *runs, int max);

/* Whether the log of an interrupted and resumed run shows a real resume: exactly two runs, the
 * first a fresh start logging steps 1..from (from < 0: whatever step it stopped at), the second a
 * start record with resume.found and resumed_from_step == from whose first step record is from + 1
 * and last is last, both consecutive; worlds w1 and w2 (0: not checked). 1 if so; why says what was
 * found either way. */
int tu_log_resumed(const char *path, long from, long last, int w1, int w2, char *why, size_t cap);

/* Returns the process exit status for main: 0 if no check failed. */
/* Headless Chromium for the page tests: $ST_CHROMIUM when set (it must be executable), else the first
 * chromium, chromium-browser, google-chrome or google-chrome-stable on PATH, into out. Returns 0 when
 * there is none, with why saying so and how to install one (a missing browser fails a page test). */
int tu_find_chromium(char *out, size_t len, char *why, size_t wlen);

/* The value of attribute `name` of the HTML tag around position p of doc ("" if absent), into out. */
void tu_tag_attr(const char *doc, const char *p, const char *name, char *out, size_t len);

/* common (a string of flags) less each flag that extra also gives, with its value, into out: a
 * command line where every flag is given once (a flag given twice is refused), extra's value
 * standing alone. Returns out. */
const char *tu_less_given(char *out, size_t cap, const char *common, const char *extra);

int tu_exit(void);

#endif
