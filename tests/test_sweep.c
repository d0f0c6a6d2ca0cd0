/* test_sweep.c — `scaletrain sweep` (docs/sweep.md) through the real binary.
 *
 * Oracles:
 *   refusals    exit status 2 and exactly one stderr line naming the spec file and the key, for an
 *               unknown top-level key, an unknown base option, a key the sweep owns, a bad grid
 *               kind, missing data, data matching no file, a budget under one batch, and an unknown
 *               vocabulary; the valid spec they were made from is accepted (the control).
 *   table       results.csv / results.jsonl of a 4-run sweep (2 widths × 2 token budgets of a
 *               1-layer model): the header begins run,params,tokens,flops,loss; params ==
 *               model_config_num_params and flops == layout_flops_per_token(model, T) × tokens,
 *               computed here from the shapes (exact), tokens == steps × B × T, loss == the last
 *               val record of the run's log (exact text). Negative control: a row with its FLOPs
 *               from T + 1 must fail the same check.
 *   skip        a re-run trains nothing: every log and done.json byte-identical. Negative control:
 *               a run whose done.json is deleted must be trained again (a fresh log, done.json back)
 *               while the others stay byte-identical. A spec giving the same run ids other settings
 *               (base lr) is refused by the sweep and its dry run, naming done.json and both
 *               settings, nothing touched; a corrupt done.json is refused naming it.
 *   resume      ST_SWEEP_TEST_STOP_AFTER=5 stops the first run after step 5 (no done.json); the
 *               re-run resumes it from step 5 (tu_log_resumed: two starts, steps 1..5 then 6..N)
 *               and its every step's loss and its val losses equal the uninterrupted sweep's,
 *               bit for bit (the logs print doubles round-trip). Negative control: the same with
 *               the checkpoint directory removed before the re-run fails the resume check.
 *   list        each `--list` line, run by the shell, gives the library call's log: every step
 *               record's loss, lr and grad_norm and every val loss equal as text. Negative control:
 *               two different runs' logs compare unequal.
 *   dry-run     --dry-run --json memory_bytes == the start record's plan.memory_total of the run
 *               (the trainer's own plan), exactly; control: the other width's differs. */
#define _POSIX_C_SOURCE 200809L /* strtok_r */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cjson/cJSON.h>

#include "core/fileio.h"
#include "data/shard.h"
#include "model/config.h"
#include "model/layout.h"
#include "testutil.h"

#define BIN ST_BINARY_DIR "/scaletrain"
#define TMP ST_BINARY_DIR "/test_sweep"

static int run(const char *cmd) {
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static void spit(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (f) fputs(text, f), fclose(f);
}

static void make_data(void) {
    Err e;
    file_mkdirs(TMP, &e);
    enum { N = 20000 };
    static uint32_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = (uint32_t)((i * 31 + (i / 7) * 5 + (i / 101) * 3) % 97);
    ShardMeta meta = {0, N, 97};
    if (shard_write(TMP "/train.bin", tok, N, &meta, &e) != ST_OK) printf("%s\n", e.msg), exit(1);
    for (int i = 0; i < 4000; i++) tok[i] = (uint32_t)((i * 29 + (i / 5) * 7) % 97);
    if (shard_write(TMP "/val.bin", tok, 4000, &meta, &e) != ST_OK) printf("%s\n", e.msg), exit(1);
}

/* The spec of the tiny sweep; extra is spliced in at the top level (may be ""). */
#define BASE "\"base\": {\"vocab\": 97, \"heads\": 2, \"seq_len\": 32, \"max_seq_len\": 32, \"micro_batch\": 4, " \
             "\"lr\": 0.003, \"threads\": 1, \"peak_gflops\": 100, \"val_batches\": 4, \"ckpt_every\": 5}"
#define GRID "\"grid\": {\"kind\": \"sizes_tokens\", \"models\": [{\"layers\": 1, \"channels\": 16}, " \
             "{\"layers\": 1, \"channels\": 32}], \"tokens\": [1280, 2560]}"
static void write_spec(const char *path, const char *data, const char *base, const char *grid, const char *extra) {
    char buf[4096];
    snprintf(buf, sizeof buf, "{\"name\": \"t\", %s, %s, %s, \"schedule\": {\"warmup_frac\": 0.1}%s}\n", data, base,
             grid, extra);
    spit(path, buf);
}
#define DATA "\"data\": \"" TMP "/train.bin\", \"val_data\": \"" TMP "/val.bin\""

static const char *RUNS[4] = {"L1C16-t1280", "L1C16-t2560", "L1C32-t1280", "L1C32-t2560"};

/* ---- refusals ---- */

static void refusal(const char *name, const char *spec_text, const char *must) {
    char spec[512], cmd[1400];
    snprintf(spec, sizeof spec, TMP "/bad_%s.json", name);
    spit(spec, spec_text);
    snprintf(cmd, sizeof cmd, "%s sweep %s --out " TMP "/bad_out --dry-run >" TMP "/bad.out 2>" TMP "/bad.err", BIN, spec);
    int rc = run(cmd);
    char *err = tu_slurp(TMP "/bad.err");
    int lines = 0;
    for (const char *p = err; p && *p; p++) lines += *p == '\n';
    int ok = rc == 2 && lines == 1 && err && strstr(err, spec) && strstr(err, must);
    char check[96];
    snprintf(check, sizeof check, "sweep_refuses_%s", name);
    char *save = NULL;
    tu_check(ok, check, "exit %d, %d line(s): %s", rc, lines, err ? strtok_r(err, "\n", &save) : "(none)");
    free(err);
}

static void test_refusals(void) {
    char s[4096];
    /* The control: the spec every refusal below is made from is accepted. */
    snprintf(s, sizeof s, "{\"name\": \"t\", %s, %s, %s}\n", DATA, BASE, GRID);
    spit(TMP "/good.json", s);
    int rc = run(BIN " sweep " TMP "/good.json --out " TMP "/good_out --dry-run >" TMP "/good.out 2>&1");
    tu_check(rc == 0, "sweep_accepts_valid_spec", "exit %d (the control of the refusals)", rc);
    snprintf(s, sizeof s, "{\"name\": \"t\", %s, %s, %s, \"seedz\": [1]}\n", DATA, BASE, GRID);
    refusal("unknown_top_key", s, "\"seedz\"");
    snprintf(s, sizeof s, "{\"name\": \"t\", %s, \"base\": {\"vocab\": 97, \"layerz\": 2}, %s}\n", DATA, GRID);
    refusal("unknown_base_option", s, "base.layerz");
    snprintf(s, sizeof s, "{\"name\": \"t\", %s, \"base\": {\"vocab\": 97, \"steps\": 20}, %s}\n", DATA, GRID);
    refusal("owned_key", s, "base.steps");
    snprintf(s, sizeof s, "{\"name\": \"t\", %s, %s, \"grid\": {\"kind\": \"sizes\", \"models\": [\"d2\"], \"tokens\": [1]}}\n",
             DATA, BASE);
    refusal("bad_grid_kind", s, "grid.kind");
    snprintf(s, sizeof s, "{\"name\": \"t\", %s, %s, \"grid\": {\"kind\": \"isoflop\", \"models\": [\"d2\"], \"tokens\": [1]}}\n",
             DATA, BASE);
    refusal("grid_key_of_other_kind", s, "\"tokens\"");
    snprintf(s, sizeof s, "{\"name\": \"t\", %s, %s, \"grid\": {\"kind\": \"sizes_tokens\", \"models\": [{\"layers\": 1, "
             "\"channels\": 16}], \"tokens\": [10]}}\n", DATA, BASE);
    refusal("budget_under_a_batch", s, "grid.tokens[0]");
    snprintf(s, sizeof s, "{\"name\": \"t\", %s, %s}\n", BASE, GRID);
    refusal("missing_data", s, "data:");
    snprintf(s, sizeof s, "{\"name\": \"t\", \"data\": \"" TMP "/nothing_*.bin\", \"val_data\": \"" TMP "/val.bin\", %s, %s}\n",
             BASE, GRID);
    refusal("data_matching_nothing", s, "nothing_*.bin");
    snprintf(s, sizeof s, "{\"name\": \"t\", \"data\": \"" TMP "/train.bin\", %s, %s}\n", BASE, GRID);
    refusal("missing_val_data", s, "val_data");
    snprintf(s, sizeof s, "{\"name\": \"t\", %s, \"base\": {\"heads\": 2}, %s}\n", DATA, GRID);
    refusal("unknown_vocab", s, "vocabulary");
    snprintf(s, sizeof s, "{\"name\": \"t\", %s, %s, %s, \"schedule\": {\"warmup\": 3}}\n", DATA, BASE, GRID);
    refusal("unknown_schedule_key", s, "schedule.\"warmup\"");
    snprintf(s, sizeof s, "{\"name\": \"t\", %s, %s, \"grid\": {\"kind\": \"sizes_tokens\", \"models\": [{\"layers\": "
             "1, \"channels\": 33}], \"tokens\": [1280]}}\n", DATA, BASE);
    refusal("model_shape_names_its_key", s, "grid.models[0] (L1C33): --heads 2 does not divide --channels 33");
    snprintf(s, sizeof s, "{\"name\": \"t\", %s, %s, \"grid\": {\"kind\": \"sizes_tokens\", \"models\": [{\"layers\": "
             "1, \"channels\": 16}], \"tokens\": [1e30]}}\n", DATA, BASE);
    refusal("absurd_token_budget", s, "grid.tokens[0] = 1e+30 gives L1C16 7.81e+27 steps of 128 tokens: --steps: expected 1..");
    /* The sweep's steps limit is train's (TRAIN_MAX_STEPS, cmd_train.c: 1e9), refused up front with
     * the grid value named; the sweep had its own 1e12, so 1e9 < steps <= 1e12 passed the spec and
     * were refused only by train. Control: exactly 1e9 steps (1.28e11 tokens of 128) is accepted. */
    snprintf(s, sizeof s, "{\"name\": \"t\", %s, %s, \"grid\": {\"kind\": \"sizes_tokens\", \"models\": [{\"layers\": "
             "1, \"channels\": 16}], \"tokens\": [128000000128]}}\n", DATA, BASE);
    refusal("steps_over_train_limit", s, "grid.tokens[0] = 1.28e+11 gives L1C16 1000000001 steps of 128 tokens: --steps: "
            "expected 1..1000000000 optimizer steps");
    snprintf(s, sizeof s, "{\"name\": \"t\", %s, %s, \"grid\": {\"kind\": \"sizes_tokens\", \"models\": [{\"layers\": "
             "1, \"channels\": 16}], \"tokens\": [128000000000]}}\n", DATA, BASE);
    spit(TMP "/at_limit.json", s);
    rc = run(BIN " sweep " TMP "/at_limit.json --out " TMP "/at_limit_out --dry-run >" TMP "/at_limit.out 2>&1");
    char *al = tu_slurp(TMP "/at_limit.out");
    tu_check(rc == 0 && al && strstr(al, " 1000000000 "), "sweep_accepts_steps_at_train_limit", "exit %d: %.200s", rc,
             al ? al : "");
    free(al);
    /* what train refused only at the first run's start (2026-11-29): a sequence over the model's
     * maximum, a vocabulary smaller than the shards' tokenizer; and a name that would put the
     * default OUT elsewhere (sweep-<name>) */
    snprintf(s, sizeof s, "{\"name\": \"t\", %s, \"base\": {\"vocab\": 97, \"heads\": 2, \"seq_len\": 64, "
             "\"max_seq_len\": 32, \"micro_batch\": 4, \"threads\": 1}, %s}\n", DATA, GRID);
    refusal("seq_len_over_max", s, "--seq-len: expected 1..32 (the model's --max-seq-len), found 64");
    snprintf(s, sizeof s, "{\"name\": \"t\", %s, \"base\": {\"vocab\": 50, \"heads\": 2, \"seq_len\": 32, "
             "\"max_seq_len\": 32, \"micro_batch\": 4, \"threads\": 1}, %s}\n", DATA, GRID);
    refusal("vocab_under_the_data", s, "a vocabulary of 50: the training shards' tokenizer has 97 ids");
    snprintf(s, sizeof s, "{\"name\": \"../escaped\", %s, %s, %s}\n", DATA, BASE, GRID);
    refusal("name_with_a_slash", s, "name: expected letters, digits");
    /* two runs of one id from a repeated token count (it blamed the model names) */
    snprintf(s, sizeof s, "{\"name\": \"t\", %s, %s, \"grid\": {\"kind\": \"sizes_tokens\", \"models\": [{\"layers\": "
             "1, \"channels\": 16}], \"tokens\": [1280, 1280]}}\n", DATA, BASE);
    refusal("same_run_id", s, "runs 1 and 2 of the grid are both named L1C16-t1280");
    /* a model's shape varied (runs labelled L1C16 with 2 layers), and a key of a model and base with
     * two values (the model's won without a word) */
    snprintf(s, sizeof s, "{\"name\": \"t\", %s, %s, %s, \"vary\": {\"layers\": [1, 2]}}\n", DATA, BASE, GRID);
    refusal("vary_of_a_shape", s, "vary.layers: a model's shape");
    snprintf(s, sizeof s, "{\"name\": \"t\", %s, %s, \"grid\": {\"kind\": \"sizes_tokens\", \"models\": [{\"layers\": "
             "1, \"channels\": 16, \"heads\": 4}], \"tokens\": [1280]}}\n", DATA, BASE);
    refusal("model_and_base_disagree", s, "grid.models[0].heads 4 and base.heads 2: expected one of them");
    /* a key twice in one object: both went to train (--lr 0.1 --lr 0.5) */
    snprintf(s, sizeof s, "{\"name\": \"t\", %s, \"base\": {\"vocab\": 97, \"lr\": 0.1, \"lr\": 0.5}, %s}\n", DATA, GRID);
    refusal("duplicate_key", s, "base.\"lr\": expected each key once, found it twice");
    /* a value train_run refuses (not the flag parser): refused for every run before any trains (the
     * real sweep trained the first run, then stopped at the second) */
    snprintf(s, sizeof s, "{\"name\": \"t\", %s, %s, %s, \"vary\": {\"lr\": [0.001, -1]}}\n", DATA, BASE, GRID);
    refusal("negative_lr_in_vary", s, "--lr: expected a value >= 0, found -1");
    rc = run("rm -rf " TMP "/neg_out && " BIN " sweep " TMP "/bad_negative_lr_in_vary.json --out " TMP "/neg_out >" TMP
             "/neg.out 2>&1");
    int trained = access(TMP "/neg_out", F_OK) == 0; /* a sweep that starts writes OUT/runs/ID/ */
    tu_check(rc == 2 && !trained, "sweep_refuses_before_the_first_run", "exit %d, %s", rc,
             trained ? "OUT written (a run started)" : "nothing written");
}

/* ---- the results table ---- */

/* The FLOPs and parameters of a row's model from its shape, computed here. */
static void model_of(int C, int T, double *fpt, double *params) {
    ModelConfig m = {0};
    m.n_layer = 1, m.n_head = 2, m.n_embd = C, m.vocab = 97, m.max_seq = 32;
    Err e;
    if (model_config_validate(&m, &e) != ST_OK) printf("%s\n", e.msg), exit(1);
    *fpt = layout_flops_per_token(&m, T);
    *params = (double)model_config_num_params(&m);
}

/* 1 if the row's flops == fpt(its model, T) × tokens and params match, exactly. */
static int row_flops_ok(const cJSON *row, int T, char *why, size_t cap) {
    double fpt, params;
    model_of((int)cJSON_GetObjectItem(row, "channels")->valuedouble, T, &fpt, &params);
    double tokens = cJSON_GetObjectItem(row, "tokens")->valuedouble, flops = cJSON_GetObjectItem(row, "flops")->valuedouble;
    double p = cJSON_GetObjectItem(row, "params")->valuedouble, steps = cJSON_GetObjectItem(row, "steps")->valuedouble;
    snprintf(why, cap, "flops %.17g vs %.17g x %.0f = %.17g, params %.0f vs %.0f, tokens %.0f vs %.0f steps x 128", flops,
             fpt, tokens, fpt * tokens, p, params, tokens, steps);
    return flops == fpt * tokens && p == params && tokens == steps * 128;
}

/* The last val loss of a log as text (the log's own digits), "" if none. */
static void last_val_text(const char *log, char *out, size_t cap) {
    out[0] = '\0';
    char *t = tu_slurp(log);
    for (char *p = t; p && (p = strstr(p, "{\"event\":\"val\"")); p++) {
        char *l = strstr(p, "\"loss\":");
        if (l) sscanf(l + 7, "%63[^,}]", out);
    }
    (void)cap;
    free(t);
}

static void test_table(void) {
    write_spec(TMP "/spec.json", DATA, BASE, GRID, "");
    int rc = run(BIN " sweep " TMP "/spec.json --out " TMP "/a >" TMP "/a.out 2>&1");
    tu_check(rc == 0, "sweep_runs", "exit %d (output in " TMP "/a.out)", rc);
    char *csv = tu_slurp(TMP "/a/results.csv");
    int rows = 0;
    for (const char *p = csv; p && *p; p++) rows += *p == '\n';
    tu_check(csv && !strncmp(csv, "run,params,tokens,flops,loss,", 29) && rows == 5, "sweep_results_csv",
             "header \"%.40s...\", %d lines (expected 1 + 4)", csv ? csv : "", rows);
    /* Every JSONL row against the formula and its log; the same rows in the CSV. */
    char *jl = tu_slurp(TMP "/a/results.jsonl");
    int n = 0, flops_ok = 0, loss_ok = 0;
    char why[512] = "";
    cJSON *first = NULL;
    char *save = NULL;
    for (char *line = jl ? strtok_r(jl, "\n", &save) : NULL; line; line = strtok_r(NULL, "\n", &save), n++) {
        cJSON *row = cJSON_Parse(line);
        if (!row) continue;
        flops_ok += row_flops_ok(row, 32, why, sizeof why);
        char log[512], val[64];
        const char *id = cJSON_GetObjectItem(row, "run")->valuestring;
        snprintf(log, sizeof log, TMP "/a/runs/%s/log.jsonl", id);
        last_val_text(log, val, sizeof val);
        double loss = cJSON_GetObjectItem(row, "loss")->valuedouble;
        loss_ok += val[0] && strtod(val, NULL) == loss && n < 4 && !strcmp(id, RUNS[n]) && csv && strstr(csv, id);
        if (!first) first = row;
        else cJSON_Delete(row);
    }
    tu_check(n == 4 && flops_ok == 4, "sweep_flops_formula", "%d of %d rows: flops == layout_flops_per_token x tokens, "
             "params == model_config_num_params, tokens == steps x B x T (last: %s)", flops_ok, n, why);
    tu_check(n == 4 && loss_ok == 4, "sweep_loss_is_final_val", "%d of %d rows: loss == the log's last val record, in grid order",
             loss_ok, n);
    /* Negative control: the FLOPs of the row computed with T + 1 must fail the check. */
    if (first) {
        double fpt, params;
        model_of((int)cJSON_GetObjectItem(first, "channels")->valuedouble, 33, &fpt, &params);
        cJSON_ReplaceItemInObject(first, "flops", cJSON_CreateNumber(fpt * cJSON_GetObjectItem(first, "tokens")->valuedouble));
        tu_check(!row_flops_ok(first, 32, why, sizeof why), "sweep_flops_negative_control",
                 "a row with the FLOPs of T + 1 is caught: %s", why);
    }
    cJSON_Delete(first);
    free(jl);
    free(csv);
    char *page = tu_slurp(TMP "/a/index.html");
    tu_check(page && strstr(page, "\"chart-loss-tokens\"") && strstr(page, "\"chart-loss-flops\"") &&
                 strstr(page, "L1C32-t2560"), "sweep_page", "index.html with the loss charts and the table: %s",
             page ? "present" : "missing");
    free(page);
}

/* ---- skip and retrain ---- */

static void snapshot(const char *out, const char *tag) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "rm -rf %s/snap_%s && mkdir -p %s/snap_%s && for r in %s/runs/*; do b=$(basename $r); "
             "cp $r/log.jsonl %s/snap_%s/$b.log; cp $r/done.json %s/snap_%s/$b.done 2>/dev/null; done",
             TMP, tag, TMP, tag, out, TMP, tag, TMP, tag);
    run(cmd);
}

static int same_as_snapshot(const char *out, const char *tag, const char *id) {
    char a[512], b[512], c[512], d[512];
    snprintf(a, sizeof a, "%s/runs/%s/log.jsonl", out, id);
    snprintf(b, sizeof b, TMP "/snap_%s/%s.log", tag, id);
    snprintf(c, sizeof c, "%s/runs/%s/done.json", out, id);
    snprintf(d, sizeof d, TMP "/snap_%s/%s.done", tag, id);
    return tu_same_file(a, b) && tu_same_file(c, d);
}

static void test_skip(void) {
    snapshot(TMP "/a", "a");
    int rc = run(BIN " sweep " TMP "/spec.json --out " TMP "/a >" TMP "/a2.out 2>&1");
    char *out = tu_slurp(TMP "/a2.out");
    int same = 0;
    for (int i = 0; i < 4; i++) same += same_as_snapshot(TMP "/a", "a", RUNS[i]);
    tu_check(rc == 0 && same == 4 && out && strstr(out, "0 trained, 0 failed, 4 skipped"), "sweep_rerun_skips_finished",
             "exit %d, %d of 4 logs and done.json byte-identical, \"%s\"", rc, same, out && strstr(out, "trained,") ?
             strstr(out, "sweep: 0") ? "0 trained, 0 failed, 4 skipped" : "other counts" : "no summary");
    free(out);
    /* Negative control: without its done.json, run 2 must train again. */
    remove(TMP "/a/runs/L1C16-t2560/done.json");
    rc = run(BIN " sweep " TMP "/spec.json --out " TMP "/a >" TMP "/a3.out 2>&1");
    TuLogRun lr[4];
    int nr = tu_log_runs(TMP "/a/runs/L1C16-t2560/log.jsonl", lr, 4);
    same = 0;
    for (int i = 0; i < 4; i++) same += i != 1 && same_as_snapshot(TMP "/a", "a", RUNS[i]);
    char done[64] = "";
    char *d = tu_slurp(TMP "/a/runs/L1C16-t2560/done.json");
    if (d) snprintf(done, sizeof done, "present");
    free(d);
    tu_check(rc == 0 && nr == 1 && lr[0].resumed_from == 0 && lr[0].first_step == 1 && lr[0].last_step == 20 &&
                 lr[0].consecutive && done[0] && same == 3,
             "sweep_missing_done_retrains", "exit %d, log holds %d run(s) (steps %ld..%ld, resumed_from %ld), done.json %s, "
             "%d of 3 other runs untouched", rc, nr, nr > 0 ? lr[0].first_step : 0, nr > 0 ? lr[0].last_step : 0,
             nr > 0 ? lr[0].resumed_from : -1, done[0] ? "back" : "missing", same);
    /* The same run ids from other settings (the base lr): until 2026-11-29 every run was skipped as
     * done and the table kept the old numbers under the new spec. Now the sweep and its dry run
     * refuse before training, naming the done.json and both settings; nothing is touched. The
     * original spec above (skipped) is the control. */
    snapshot(TMP "/a", "b");
    write_spec(TMP "/spec_lr.json", DATA,
               "\"base\": {\"vocab\": 97, \"heads\": 2, \"seq_len\": 32, \"max_seq_len\": 32, \"micro_batch\": 4, "
               "\"lr\": 0.01, \"threads\": 1, \"peak_gflops\": 100, \"val_batches\": 4, \"ckpt_every\": 5}", GRID, "");
    int r1 = run(BIN " sweep " TMP "/spec_lr.json --out " TMP "/a >" TMP "/lr.out 2>" TMP "/lr.err");
    int r2 = run(BIN " sweep " TMP "/spec_lr.json --out " TMP "/a --dry-run >/dev/null 2>" TMP "/lr_dry.err");
    char *e1 = tu_slurp(TMP "/lr.err"), *e2 = tu_slurp(TMP "/lr_dry.err");
    same = 0;
    for (int i = 0; i < 4; i++) same += same_as_snapshot(TMP "/a", "b", RUNS[i]);
    tu_check(r1 == 2 && r2 == 2 && e1 && strstr(e1, "done.json: run L1C16-t1280 was trained with other settings") &&
                 strstr(e1, "--lr 0.003") && strstr(e1, "--lr 0.01") && e2 && strstr(e2, "other settings") && same == 4,
             "sweep_refuses_done_runs_of_other_settings", "exit %d (dry run %d), %d of 4 runs untouched: %.300s", r1, r2, same,
             e1 ? e1 : "(none)");
    free(e1), free(e2);
    /* A done.json that is no finished run's record: refused at once, naming it and the way out (it
     * was reported as done, then failed the sweep after the other runs). */
    spit(TMP "/a/runs/L1C32-t2560/done.json", "{garbage\n");
    int r3 = run(BIN " sweep " TMP "/spec.json --out " TMP "/a >/dev/null 2>" TMP "/garbage.err");
    char *e3 = tu_slurp(TMP "/garbage.err");
    tu_check(r3 == 2 && e3 && strstr(e3, "L1C32-t2560/done.json: expected a finished run's record") && strstr(e3, "remove it"),
             "sweep_refuses_a_corrupt_done_json", "exit %d: %.200s", r3, e3 ? e3 : "(none)");
    free(e3);
    run("cp " TMP "/snap_b/L1C32-t2560.done " TMP "/a/runs/L1C32-t2560/done.json");
}

/* ---- interrupt and resume ---- */

/* "loss,lr,grad_norm" of every step record and the loss of every val record, as the log wrote
 * them (doubles round-trip), the last occurrence of each step kept (a resumed run logs steps after
 * its checkpoint again). */
enum { MAXS = 64 };
typedef struct {
    char step[MAXS + 1][200], val[MAXS + 1][64];
} LogNums;

static int log_numbers(const char *path, LogNums *n) {
    memset(n, 0, sizeof *n);
    cJSON *all = tu_log_records(path), *r;
    if (!all) return 0;
    cJSON_ArrayForEach(r, all) {
        const cJSON *ev = cJSON_GetObjectItem(r, "event"), *st = cJSON_GetObjectItem(r, "step");
        if (!cJSON_IsString(ev) || !cJSON_IsNumber(st) || st->valueint < 0 || st->valueint > MAXS) continue;
        if (!strcmp(ev->valuestring, "step"))
            snprintf(n->step[st->valueint], sizeof n->step[0], "%.17g,%.17g,%.17g",
                     cJSON_GetObjectItem(r, "loss")->valuedouble, cJSON_GetObjectItem(r, "lr")->valuedouble,
                     cJSON_GetObjectItem(r, "grad_norm")->valuedouble);
        if (!strcmp(ev->valuestring, "val"))
            snprintf(n->val[st->valueint], sizeof n->val[0], "%.17g", cJSON_GetObjectItem(r, "loss")->valuedouble);
    }
    cJSON_Delete(all);
    return 1;
}

/* Every step's numbers equal, and every val loss of the reference ref present and equal in log a
 * (a resumed run validates also where it stopped and right after resuming: extra val records). */
static int logs_equal(const char *a, const char *ref) {
    static LogNums x, y;
    if (!log_numbers(a, &x) || !log_numbers(ref, &y)) return 0;
    int nsteps = 0;
    for (int s = 0; s <= MAXS; s++) {
        if (strcmp(x.step[s], y.step[s])) return 0;
        if (y.val[s][0] && strcmp(x.val[s], y.val[s])) return 0;
        nsteps += y.step[s][0] != 0;
    }
    return nsteps > 0;
}

/* Interrupts the first run of a fresh sweep in dir after step 5, optionally removes its
 * checkpoints, re-runs; returns 1 if the run shows a real resume and its numbers equal the
 * uninterrupted sweep's (TMP/a). */
static int interrupted(const char *dir, int remove_ckpt, char *why, size_t cap) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "rm -rf %s && ST_SWEEP_TEST_STOP_AFTER=5 %s sweep " TMP "/spec.json --out %s >%s.out1 2>&1",
             dir, BIN, dir, dir);
    int rc1 = run(cmd);
    char done[600], ck[600], log[600], ref[600];
    snprintf(done, sizeof done, "%s/runs/L1C16-t1280/done.json", dir);
    char *d = tu_slurp(done);
    int stopped = rc1 == 0 && d == NULL;
    free(d);
    snprintf(ck, sizeof ck, "rm -rf %s/runs/L1C16-t1280/ckpt", dir);
    if (remove_ckpt) run(ck);
    snprintf(cmd, sizeof cmd, "%s sweep " TMP "/spec.json --out %s >%s.out2 2>&1", BIN, dir, dir);
    int rc2 = run(cmd);
    snprintf(log, sizeof log, "%s/runs/L1C16-t1280/log.jsonl", dir);
    snprintf(ref, sizeof ref, TMP "/a/runs/L1C16-t1280/log.jsonl");
    char rwhy[300] = "";
    int resumed = tu_log_resumed(log, 5, 10, 0, 0, rwhy, sizeof rwhy);
    int equal = logs_equal(log, ref);
    snprintf(why, cap, "stopped without done.json: %s, re-run exit %d, resume: %s (%s), numbers %s the uninterrupted run's",
             stopped ? "yes" : "no", rc2, resumed ? "yes" : "no", rwhy, equal ? "equal to" : "differ from");
    return stopped && rc2 == 0 && resumed && equal;
}

static void test_resume(void) {
    char why[600];
    int ok = interrupted(TMP "/b", 0, why, sizeof why);
    tu_check(ok, "sweep_interrupted_run_resumes_bit_exact", "%s", why);
    /* The other runs of the resumed sweep equal the uninterrupted ones too. */
    int eq = 0;
    for (int i = 1; i < 4; i++) {
        char a[512], b[512];
        snprintf(a, sizeof a, TMP "/b/runs/%s/log.jsonl", RUNS[i]);
        snprintf(b, sizeof b, TMP "/a/runs/%s/log.jsonl", RUNS[i]);
        eq += logs_equal(a, b);
    }
    tu_check(eq == 3, "sweep_resumed_sweep_other_runs", "%d of 3 runs equal to the uninterrupted sweep", eq);
    ok = interrupted(TMP "/c", 1, why, sizeof why);
    tu_check(!ok, "sweep_resume_negative_control", "checkpoints removed before the re-run: the check fails (%s)", why);
}

/* ---- --list ---- */

static void test_list(void) {
    /* a mode's flags without it: refused (the sweep trained as without them; --list --json printed
     * the plain list) */
    static const char *const INERT[4][2] = {{"--json", "--json: would change nothing without --dry-run"},
                                            {"--list --json", "--json: would change nothing without --dry-run"},
                                            {"--list-format sweep", "--list-format: would change nothing without --list"},
                                            {"--dry-run --verbose", "--verbose: would change nothing with --dry-run"}};
    int inert_ok = 1;
    for (int i = 0; i < 4; i++) {
        char c[1024];
        snprintf(c, sizeof c, BIN " sweep " TMP "/spec.json --out " TMP "/inert %s >/dev/null 2>" TMP "/inert.err", INERT[i][0]);
        int irc = run(c);
        char *e = tu_slurp(TMP "/inert.err");
        if (!(irc == 2 && e && strstr(e, INERT[i][1]))) printf("  sweep %s: exit %d, %s", INERT[i][0], irc, e ? e : "(none)\n"), inert_ok = 0;
        free(e);
    }
    tu_check(inert_ok && access(TMP "/inert", F_OK) != 0, "sweep_refuses_flags_of_another_mode",
             "--json, --list --json, --list-format, --dry-run --verbose: exit 2 naming the flag, nothing written");
    /* --only '' trained the whole grid; --out naming a file failed at the first run's --ckpt-dir. */
    spit(TMP "/a_file", "x");
    static const char *const EMPTY[2][2] = {{"--out " TMP "/inert --only ''", "--only: expected a run id"},
                                            {"--out " TMP "/a_file", "--out " TMP "/a_file: expected a folder (or a path to "
                                             "create one at), found a file"}};
    int empty_ok = 1;
    for (int i = 0; i < 2; i++) {
        char c[1024];
        snprintf(c, sizeof c, BIN " sweep " TMP "/spec.json %s >" TMP "/inert.out 2>" TMP "/inert.err", EMPTY[i][0]);
        int irc = run(c);
        char *e = tu_slurp(TMP "/inert.err"), *o = tu_slurp(TMP "/inert.out");
        if (!(irc == 2 && e && strstr(e, EMPTY[i][1]) && o && !o[0]))
            printf("  sweep %s: exit %d, %s", EMPTY[i][0], irc, e ? e : "(none)\n"), empty_ok = 0;
        free(e), free(o);
    }
    tu_check(empty_ok && access(TMP "/inert", F_OK) != 0, "sweep_refuses_empty_only_and_file_out",
             "--only '', --out FILE: exit 2 naming the flag, nothing trained or printed");
    int rc = run(BIN " sweep " TMP "/spec.json --out " TMP "/l --list >" TMP "/list.txt 2>" TMP "/list.err");
    char *t = tu_slurp(TMP "/list.txt");
    int n = 0, ran = 0;
    char *save = NULL;
    for (char *line = t ? strtok_r(t, "\n", &save) : NULL; line; line = strtok_r(NULL, "\n", &save), n++) {
        if (strncmp(line, "scaletrain train ", 17)) continue;
        char cmd[8192];
        snprintf(cmd, sizeof cmd, "mkdir -p " TMP "/l/runs/%s && %s %s >" TMP "/list_run.out 2>&1", n < 4 ? RUNS[n] : "x", BIN,
                 line + 11);
        ran += run(cmd) == 0;
    }
    free(t);
    int eq = 0;
    for (int i = 0; i < 4; i++) {
        char a[512], b[512];
        snprintf(a, sizeof a, TMP "/l/runs/%s/log.jsonl", RUNS[i]);
        snprintf(b, sizeof b, TMP "/a/runs/%s/log.jsonl", RUNS[i]);
        eq += logs_equal(a, b);
    }
    tu_check(rc == 0 && n == 4 && ran == 4 && eq == 4, "sweep_list_lines_equal_library_call",
             "exit %d, %d lines, %d ran, %d of 4 logs equal (losses, lr, norms, val) to the sweep's", rc, n, ran, eq);
    tu_check(!logs_equal(TMP "/l/runs/L1C16-t1280/log.jsonl", TMP "/a/runs/L1C32-t1280/log.jsonl"),
             "sweep_list_negative_control", "another run's log compares unequal");
    rc = run(BIN " sweep " TMP "/spec.json --out " TMP "/l --list --list-format sweep >" TMP "/list2.txt 2>&1");
    char *t2 = tu_slurp(TMP "/list2.txt");
    tu_check(rc == 0 && t2 && strstr(t2, "--only L1C32-t2560\n"), "sweep_list_format_sweep", "exit %d: %.120s", rc, t2 ? t2 : "");
    free(t2);
    /* The lines run as the shell reads them back with a quote and a blank in the paths (they were
     * written as '%s', so a quote ended the word). The first line is run: it must train that run
     * into the quoted --out. Control: the path without its quoting does not name the spec. */
    run("mkdir -p \"" TMP "/it's here\" && cp " TMP "/spec.json \"" TMP "/it's here/spec.json\"");
    rc = run(BIN " sweep \"" TMP "/it's here/spec.json\" --out \"" TMP "/it's here/o\" --list --list-format sweep >" TMP
             "/list3.txt 2>&1");
    char *t3 = tu_slurp(TMP "/list3.txt"), cmd3[4096] = "";
    if (t3 && !strncmp(t3, "scaletrain ", 11)) snprintf(cmd3, sizeof cmd3, "%s %.*s >" TMP "/list3.out 2>&1", BIN,
                                                         (int)strcspn(t3 + 11, "\n"), t3 + 11);
    int rc3 = cmd3[0] ? run(cmd3) : -1;
    int logged = logs_equal(TMP "/it's here/o/runs/L1C16-t1280/log.jsonl", TMP "/a/runs/L1C16-t1280/log.jsonl");
    rc = run(BIN " sweep " TMP "/it's here/spec.json --dry-run >/dev/null 2>&1");
    tu_check(rc3 == 0 && logged && rc != 0, "sweep_list_format_sweep_quotes_paths",
             "listing exit %d, first line run: exit %d, its log %s the sweep's; control unquoted: exit %d (want != 0): %.160s",
             rc3, rc3, logged ? "equals" : "differs from", rc, t3 ? t3 : "");
    free(t3);
    /* --only trains that one run and nothing else. */
    rc = run("rm -rf " TMP "/o && " BIN " sweep " TMP "/spec.json --out " TMP "/o --only L1C32-t1280 >" TMP "/o.out 2>&1");
    int only_ok = logs_equal(TMP "/o/runs/L1C32-t1280/log.jsonl", TMP "/a/runs/L1C32-t1280/log.jsonl");
    char *other = tu_slurp(TMP "/o/runs/L1C16-t1280/log.jsonl"), *csv = tu_slurp(TMP "/o/results.csv");
    int rows = 0;
    for (const char *p = csv; p && *p; p++) rows += *p == '\n';
    tu_check(rc == 0 && only_ok && !other && rows == 2, "sweep_only_one_run",
             "exit %d, its log %s, other runs %s, results rows %d", rc, only_ok ? "equal" : "differs",
             other ? "trained" : "untouched", rows - 1);
    free(other), free(csv);
}

/* ---- --dry-run ---- */

static double plan_memory_of(const char *log) {
    cJSON *all = tu_log_records(log), *r;
    double m = NAN;
    cJSON_ArrayForEach(r, all) {
        const cJSON *ev = cJSON_GetObjectItem(r, "event"), *pl = cJSON_GetObjectItem(r, "plan");
        if (cJSON_IsString(ev) && !strcmp(ev->valuestring, "start") && pl)
            m = cJSON_GetObjectItem(pl, "memory_total")->valuedouble;
    }
    cJSON_Delete(all);
    return m;
}

static void test_dry_run(void) {
    int rc = run(BIN " sweep " TMP "/spec.json --out " TMP "/a --dry-run --json >" TMP "/dry.txt 2>&1");
    char *t = tu_slurp(TMP "/dry.txt");
    int n = 0, eq = 0, done = 0;
    double mem[4] = {0};
    char *save = NULL;
    for (char *line = t ? strtok_r(t, "\n", &save) : NULL; line; line = strtok_r(NULL, "\n", &save)) {
        cJSON *o = cJSON_Parse(line);
        if (!o || n >= 4) {
            cJSON_Delete(o);
            continue;
        }
        char log[512];
        snprintf(log, sizeof log, TMP "/a/runs/%s/log.jsonl", cJSON_GetObjectItem(o, "run")->valuestring);
        mem[n] = cJSON_GetObjectItem(o, "memory_bytes")->valuedouble;
        eq += mem[n] == plan_memory_of(log);
        done += cJSON_IsTrue(cJSON_GetObjectItem(o, "done"));
        n++;
        cJSON_Delete(o);
    }
    free(t);
    tu_check(rc == 0 && n == 4 && eq == 4 && done == 4, "sweep_dry_run_memory_equals_plan",
             "exit %d, %d runs, %d memory_bytes == the start record's plan.memory_total, %d marked done", rc, n, eq, done);
    /* A run refused halfway (a damaged done.json of the 2nd run): exit 2 and nothing on stdout (the
     * table's head and first row were printed above the error). Control: the intact copy prints. */
    rc = run("rm -rf " TMP "/dmg && mkdir -p " TMP "/dmg/runs/" "L1C16-t2560 && cp " TMP "/a/runs/L1C16-t2560/done.json " TMP
             "/dmg/runs/L1C16-t2560/ && " BIN " sweep " TMP "/spec.json --out " TMP "/dmg --dry-run >" TMP "/dmg.out 2>&1");
    char *ctl = tu_slurp(TMP "/dmg.out");
    spit(TMP "/dmg/runs/L1C16-t2560/done.json", "{\"run\":");
    int rcd = run(BIN " sweep " TMP "/spec.json --out " TMP "/dmg --dry-run >" TMP "/dmg.out 2>" TMP "/dmg.err");
    char *o2 = tu_slurp(TMP "/dmg.out"), *e2 = tu_slurp(TMP "/dmg.err");
    tu_check(rc == 0 && ctl && strstr(ctl, "L1C16-t2560") && rcd == 2 && o2 && !o2[0] && e2 && strstr(e2, "done.json"),
             "sweep_dry_run_refusal_prints_nothing", "control exit %d; damaged: exit %d, stdout %zu bytes: %s", rc, rcd,
             o2 ? strlen(o2) : 0, e2 ? e2 : "");
    free(ctl), free(o2), free(e2);
    /* Without base.threads (auto): the dry run passed threads 0 to the plan, which refused it
     * ("--threads: expected an integer >= 1, found 0"); now resolved as the trainer does. Oracle:
     * the start record of the same run, trained, whose threads train_threads resolved. */
    spit(TMP "/nothr.json", "{\"name\": \"nothr\", " DATA ", \"base\": {\"vocab\": 97, \"heads\": 2, \"seq_len\": 32, "
         "\"max_seq_len\": 32, \"micro_batch\": 2, \"val_batches\": 1}, \"grid\": {\"kind\": \"sizes_tokens\", "
         "\"models\": [{\"layers\": 1, \"channels\": 16}], \"tokens\": [640]}}\n");
    rc = run("rm -rf " TMP "/nothr && " BIN " sweep " TMP "/nothr.json --out " TMP "/nothr --dry-run --json >" TMP
             "/nothr_dry.txt 2>" TMP "/nothr_dry.err");
    t = tu_slurp(TMP "/nothr_dry.txt");
    cJSON *nj = t ? cJSON_Parse(t) : NULL;
    double nm = nj ? cJSON_GetNumberValue(cJSON_GetObjectItem(nj, "memory_bytes")) : NAN;
    int rc2 = run(BIN " sweep " TMP "/nothr.json --out " TMP "/nothr >" TMP "/nothr.out 2>&1");
    double trained = plan_memory_of(TMP "/nothr/runs/L1C16-t640/log.jsonl");
    tu_check(rc == 0 && rc2 == 0 && nm == trained, "sweep_dry_run_auto_threads",
             "dry run exit %d, memory_bytes %.0f; trained exit %d, its plan.memory_total %.0f", rc, nm, rc2, trained);
    cJSON_Delete(nj);
    free(t);
    double other = plan_memory_of(TMP "/a/runs/L1C32-t1280/log.jsonl");
    tu_check(mem[0] != other, "sweep_dry_run_negative_control", "width 16's %.0f bytes != width 32's plan %.0f", mem[0], other);
    rc = run(BIN " sweep " TMP "/spec.json --out " TMP "/a --dry-run >" TMP "/dry2.txt 2>&1");
    t = tu_slurp(TMP "/dry2.txt");
    tu_check(rc == 0 && t && strstr(t, "memory MiB") && strstr(t, "L1C32-t2560") && strstr(t, "total:"),
             "sweep_dry_run_table", "exit %d", rc);
    free(t);
}

/* ---- IsoFLOP ---- */

static void test_isoflop(void) {
    write_spec(TMP "/iso.json", DATA, BASE,
               "\"grid\": {\"kind\": \"isoflop\", \"models\": [{\"layers\": 1, \"channels\": 16}, "
               "{\"layers\": 1, \"channels\": 32}], \"budgets\": [2e8, 8e8]}", "");
    int rc = run(BIN " sweep " TMP "/iso.json --out " TMP "/iso --dry-run --json >" TMP "/iso.txt 2>&1");
    char *t = tu_slurp(TMP "/iso.txt"), *save = NULL;
    int n = 0, ok = 0;
    char why[300] = "";
    for (char *line = t ? strtok_r(t, "\n", &save) : NULL; line; line = strtok_r(NULL, "\n", &save)) {
        cJSON *o = cJSON_Parse(line);
        if (!o) continue;
        double fpt, params, C = cJSON_GetObjectItem(o, "budget")->valuedouble;
        model_of(cJSON_GetObjectItem(o, "channels")->valueint, 32, &fpt, &params);
        double steps = cJSON_GetObjectItem(o, "steps")->valuedouble, tokens = cJSON_GetObjectItem(o, "tokens")->valuedouble;
        double flops = cJSON_GetObjectItem(o, "flops")->valuedouble;
        int good = steps == (double)llround(C / fpt / 128) && tokens == steps * 128 && flops == fpt * tokens &&
                   fabs(flops - C) <= fpt * 64;
        ok += good;
        snprintf(why, sizeof why, "C %.3g: steps %.0f (round(C / %.0f / 128) = %lld), flops %.6g", C, steps, fpt,
                 llround(C / fpt / 128), flops);
        n++;
        cJSON_Delete(o);
    }
    free(t);
    tu_check(rc == 0 && n == 4 && ok == 4, "sweep_isoflop_tokens", "exit %d, %d of %d runs: D = C / FLOPs per token "
             "rounded to whole steps, flops within half a batch of C (last: %s)", rc, ok, n, why);
}

/* ---- under mpirun ---- */

/* Two ranks run the same sweep: dp 2 doubles the batch (so half the steps), the logs say world 2,
 * and only rank 0 prints and writes (one summary line, one row per run). */
static void test_mpi(const char *mpiexec) {
    char cmd[2048];
    /* Open MPI's own allocations outlive MPI_Finalize: no leak detection for this one (as tests/CMakeLists.txt
     * does for every MPI test). */
    snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=detect_leaks=0 %s --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS=1 "
             "-x ASAN_OPTIONS %s sweep " TMP
             "/spec.json --out " TMP "/mpi >" TMP "/mpi.out 2>&1", mpiexec, BIN);
    int rc = run(cmd);
    char *out = tu_slurp(TMP "/mpi.out"), *csv = tu_slurp(TMP "/mpi/results.csv");
    int summaries = 0, rows = 0, half = 0;
    for (const char *p = out; p && (p = strstr(p, "sweep: 4 trained")); p++) summaries++;
    char *save = NULL;
    for (char *line = csv ? strtok_r(csv, "\n", &save) : NULL; line; line = strtok_r(NULL, "\n", &save)) {
        if (!strncmp(line, "run,", 4)) continue;
        rows++;
        half += strstr(line, ",256,") != NULL; /* batch_tokens: 2 ranks x 4 x 32 */
    }
    TuLogRun lr[2];
    int n = tu_log_runs(TMP "/mpi/runs/L1C16-t2560/log.jsonl", lr, 2);
    tu_check(rc == 0 && summaries == 1 && rows == 4 && half == 4 && n == 1 && lr[0].world == 2 && lr[0].last_step == 10,
             "sweep_mpi_rank0_writes", "exit %d, %d summary line(s), %d rows with batch 256 of %d, log world %d steps "
             "..%ld (20-step run at dp 2: 10)", rc, summaries, half, rows, n > 0 ? lr[0].world : 0, n > 0 ? lr[0].last_step : 0);
    free(out), free(csv);
}

/* A run that diverges (lr 1e30, --max-nonfinite 1) is a result: its done.json says failed, with the
 * steps and tokens it trained (it claimed the planned 10 steps and their tokens and FLOPs), and the
 * failure names the checkpoint folder the sweep gave it ("none (no --ckpt-dir)" it said). */
static void test_failed(void) {
    char sp[4096];
    snprintf(sp, sizeof sp, "{\"name\": \"div\", %s, \"base\": {\"vocab\": 97, \"heads\": 2, \"seq_len\": 32, "
             "\"max_seq_len\": 32, \"micro_batch\": 4, \"lr\": 1e30, \"threads\": 1, \"max_nonfinite\": 1, "
             "\"ckpt_every\": 5}, \"grid\": {\"kind\": \"sizes_tokens\", \"models\": [{\"layers\": 1, \"channels\": 16}], "
             "\"tokens\": [1280]}}\n", DATA);
    spit(TMP "/div.json", sp);
    int rc = run("rm -rf " TMP "/div && " BIN " sweep " TMP "/div.json --out " TMP "/div >" TMP "/div.out 2>&1");
    char *d = tu_slurp(TMP "/div/runs/L1C16-t1280/done.json");
    cJSON *o = d ? cJSON_Parse(d) : NULL;
    const cJSON *stt = o ? cJSON_GetObjectItem(o, "status") : NULL;
    double steps = o ? cJSON_GetNumberValue(cJSON_GetObjectItem(o, "steps")) : -1;
    double tokens = o ? cJSON_GetNumberValue(cJSON_GetObjectItem(o, "tokens")) : -1;
    double bt = o ? cJSON_GetNumberValue(cJSON_GetObjectItem(o, "batch_tokens")) : -1;
    tu_check(rc == 0 && cJSON_IsString(stt) && !strncmp(stt->valuestring, "failed: ", 8) &&
                 strstr(stt->valuestring, "none yet in --ckpt-dir") && steps >= 1 && steps < 10 && tokens == steps * bt,
             "sweep_failed_run_records_what_it_trained", "exit %d, steps %g of 10, tokens %g (%g per step): %s", rc, steps,
             tokens, bt, cJSON_IsString(stt) ? stt->valuestring : "(no status)");
    cJSON_Delete(o);
    free(d);
}

/* A vary value replaces base's: vary lr [0.001] over base's 0.003, vary no_pack [false, true] over
 * base's true (false removes it). Oracle: each run's start record's config (lr, no_pack). Before
 * 2026-11-29 the layers were appended (train took the last --lr; a false vary left base's
 * --no-pack on); with each flag given once they were refused. Control: the base alone keeps 0.003
 * and no_pack on. */
static void test_layers(void) {
    char spec[512], cmd[1600];
    const char *base = "\"base\": {\"vocab\": 97, \"heads\": 2, \"seq_len\": 32, \"max_seq_len\": 32, \"micro_batch\": 4, "
                       "\"lr\": 0.003, \"threads\": 1, \"no_pack\": true}";
    const char *grid = "\"grid\": {\"kind\": \"sizes_tokens\", \"models\": [{\"layers\": 1, \"channels\": 16}], \"tokens\": [256]}";
    double lr[3] = {0};
    int np[3] = {-1, -1, -1};
    for (int i = 0; i < 2; i++) {
        snprintf(spec, sizeof spec, TMP "/layers%d.json", i);
        write_spec(spec, DATA, base, grid, i ? ", \"vary\": {\"lr\": [0.001], \"no_pack\": [false, true]}" : "");
        snprintf(cmd, sizeof cmd, "rm -rf " TMP "/layers_out%d && %s sweep %s --out " TMP "/layers_out%d >/dev/null 2>&1", i,
                 BIN, spec, i);
        int rc = run(cmd);
        const char *ids[2][2] = {{"L1C16-t256", NULL}, {"L1C16-t256-lr0.001-no-packoff", "L1C16-t256-lr0.001-no-packon"}};
        for (int j = 0; j < 2 && rc == 0; j++) {
            if (!ids[i][j]) continue;
            char lg[512];
            snprintf(lg, sizeof lg, TMP "/layers_out%d/runs/%s/log.jsonl", i, ids[i][j]);
            cJSON *all = tu_log_records(lg), *o;
            cJSON_ArrayForEach(o, all) {
                const cJSON *ev = cJSON_GetObjectItem(o, "event"), *c = cJSON_GetObjectItem(o, "config");
                if (!cJSON_IsString(ev) || strcmp(ev->valuestring, "start") || !c) continue;
                int k = i ? 1 + j : 0;
                lr[k] = cJSON_GetNumberValue(cJSON_GetObjectItem(c, "lr"));
                np[k] = cJSON_IsTrue(cJSON_GetObjectItem(c, "no_pack"));
            }
            cJSON_Delete(all);
        }
    }
    tu_check(fabs(lr[1] - 0.001) < 1e-9 && fabs(lr[2] - 0.001) < 1e-9 && np[1] == 0 && np[2] == 1,
             "sweep: a vary value replaces base's (lr; no_pack false removes base's true)",
             "lr %g and %g (want 0.001), no_pack %d and %d (want 0 and 1)", lr[1], lr[2], np[1], np[2]);
    tu_check(fabs(lr[0] - 0.003) < 1e-9 && np[0] == 1, "control: the base alone keeps lr 0.003 and no_pack",
             "lr %g, no_pack %d", lr[0], np[0]);
}

int main(int argc, char **argv) {
    run("rm -rf " TMP);
    make_data();
    test_refusals();
    test_table();
    test_skip();
    test_resume();
    test_list();
    test_dry_run();
    test_isoflop();
    test_failed();
    test_layers();
    if (argc > 1) test_mpi(argv[1]);
    return tu_exit();
}
