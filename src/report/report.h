/* report.h — `scaletrain report`: metrics logs (JSON Lines, docs/reference.md "Progress and metrics") → one
 * self-contained HTML page of charts.
 *
 * Two stages, both pure library code (no printing):
 *   report_load_run   parses one log into columns, tolerating damage: a line that is not a JSON
 *                     object with an "event" string, or a truncated last line, is skipped and
 *                     counted as a warning; everything valid is kept. Steps replayed after a
 *                     rollback (or a resume from an older checkpoint appended to the same log) are
 *                     kept once: a `step` record whose step is <= the last kept one drops the kept
 *                     records from that step on (they belong to the abandoned branch), so each step
 *                     appears once, with the values of the trajectory that continued. The same holds
 *                     for `val` records. `spike` records are all kept (they explain the rollback).
 *                     Several `start` records: one with "resumed_from_step" R > 0 continues the
 *                     run (a resume appends to its log; kept records after step R are dropped,
 *                     the resumed process logs them again), one without it (or with 0) after any
 *                     step or val record begins a new run in the same file, chained as r->next.
 *   report_render     writes the page: the vendored uPlot script and stylesheet (embedded in the
 *                     binary at build time, see embed_assets.cmake), the runs' data as one JSON
 *                     object, and the page script (page.js) that draws the charts. The page needs no
 *                     network. Chart list and data schema: docs/report.md. */
#ifndef ST_REPORT_REPORT_H
#define ST_REPORT_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

/* Columns of the per-step table (one entry per kept `step` record). */
enum {
    REP_STEP,       /* optimizer step */
    REP_TOKENS,     /* tokens_seen after the step (or step × effective batch tokens) */
    REP_LOSS,       /* training loss (NaN if the record had null / non-finite) */
    REP_LR,
    REP_GNORM,      /* gradient norm before clipping */
    REP_GNORM_CLIP, /* after clipping */
    REP_TOK_S,      /* tokens per second */
    REP_MFU,        /* model FLOPs utilization, 0..1 */
    REP_T_DATA,     /* time_ms split */
    REP_T_FWD,
    REP_T_BWD,
    REP_T_COMM,
    REP_T_OPT,
    REP_T_CKPT,
    REP_T_TOTAL,
    REP_BATCH,      /* the step's tokens (the batch size in use) */
    REP_NOISE,      /* the smoothed gradient noise scale B_simple, tokens (NaN: not estimated) */
    REP_NCOL
};

/* A growable column of doubles. */
typedef struct {
    double *v;
    size_t n, cap;
} RepCol;

#define REP_MAX_MEM 16   /* memory categories kept per kind */
#define REP_MAX_NOTES 200 /* other events kept verbatim (ckpt, skip, rollback, stall, ...) */
#define REP_MAX_WARN 8   /* detailed warning lines per log */
#define REP_MAX_GROUPS 64 /* layer groups kept from `layer_stats` (--log-layer-stats) */

/* A growable list of short strings (a spike's action). */
typedef struct {
    char (*s)[16];
    size_t n, cap;
} RepStrs;

typedef struct {
    char name[32];
    double bytes;
} RepMem;

typedef struct ReportRun {
    char path[1024];      /* the log file */
    char name[256];       /* label: file name without directory and .jsonl */
    char summary[1024];   /* one line from the start record (model, batch, optimizer, commit) */
    char grid[96];        /* "dp 2 x tp 1 x pp 1, ZeRO 1" (+sp) from the start record's config; "" if absent */
    char precision[16];   /* "fp32" | "bf16" | "fp16" from the start record's config; "" if absent */
    double batch_tokens;  /* effective_batch.tokens from start (0 if unknown) */
    RepCol step[REP_NCOL];
    RepCol val_step, val_tokens, val_loss;
    RepCol spike_step, spike_tokens, spike_value, spike_median, spike_is_gnorm; /* is_gnorm: 0 loss, 1 grad norm */
    RepCol spike_z;       /* the spike's robust z (NaN if absent) */
    RepStrs spike_action; /* the spike's action ("log", "skip", "rollback", ...; "?" if absent) */
    RepCol resumed_from;  /* resumed_from_step of each resume in this run, in log order */
    /* --log-layer-stats: the group names of the step records' layer_stats, and per group a column
     * of update/weight ratios aligned with the step table (NaN where a record has none). */
    int ngroups;
    char group[REP_MAX_GROUPS][24];
    RepCol group_ratio[REP_MAX_GROUPS];
    char *config;         /* the last `start` record's "config" object as JSON text (malloc'd; NULL
                             if none): what the studies read (e.g. weight_decay) */
    int ended;            /* an `end` record was seen (the run finished) */
    RepMem planned[REP_MAX_MEM], measured[REP_MAX_MEM];
    int nplanned, nmeasured;
    char *notes[REP_MAX_NOTES]; /* raw JSON of other events (malloc'd), in log order */
    int nnotes, notes_dropped;
    size_t replayed;      /* step records superseded by a later replay of the same step */
    size_t lines, events; /* non-blank lines, valid events */
    size_t bad_lines;     /* skipped lines */
    char warn[REP_MAX_WARN][256]; /* the first skipped lines: "line N: why" */
    int nwarn;
    /* A new run later in the same file (malloc'd, owned, freed by report_run_free), named
     * "<name>#2", "#3", ...; the file's line counts and warnings stay on the first run. */
    struct ReportRun *next;
} ReportRun;

/* Parses the log at path into r (zeroed by the caller or fresh), and any further runs the file
 * holds into the chain r->next. Damaged lines are skipped and recorded in r->bad_lines / r->warn;
 * a missing or unreadable file is an error naming the path (ST_ERR_INPUT). report_run_free
 * (which frees the chain) is safe on a zeroed or half-built run. */
Status report_load_run(ReportRun *r, const char *path, Err *err);
void report_run_free(ReportRun *r);

/* Parses a log already in memory (text[0..len), need not be NUL-terminated); path is for labels. */
Status report_parse_text(ReportRun *r, const char *path, const char *text, size_t len, Err *err);

/* One warning line for a run with skipped lines, e.g. "run.jsonl: 2 of 310 lines skipped (line 57:
 * truncated last line; ...)"; returns 0 and writes "" when the run had none. */
int report_run_warning(const ReportRun *r, char *buf, size_t len);

/* Renders the page for runs[0..n) and their chains (each a series of its own) into a malloc'd
 * NUL-terminated buffer (*html, *len). title may be NULL. Errors: out of memory (ST_ERR_RUNTIME). */
Status report_render(const ReportRun *runs, int n, const char *title, char **html, size_t *len, Err *err);

/* The scaling page of `scaletrain fit --html` (docs/fit.md): the same page frame, stylesheets,
 * uPlot and self-check protocol (#st-status, ST_ERRORS) as the run report, drawing one `fit
 * --json` object (fit_json: its text) with page_scaling.js: IsoFLOP curves with their parabolas,
 * the compute-optimal frontier N*(C), the residuals of Approach 3. title: the results file.
 * Errors: out of memory (ST_ERR_RUNTIME). */
Status report_render_scaling(const char *fit_json, const char *title, char **html, size_t *len, Err *err);

#endif
