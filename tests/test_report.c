/* test_report.c — `scaletrain report`: the tolerant parser, replay de-duplication, the command's
 * exit codes and warning line, and the page itself in headless Chromium.
 *
 * Oracles:
 *   parser      hand-built logs with known content: counts, the kept values of replayed steps
 *               (those of the branch that continued), the line numbers of the damaged lines.
 *   command     exit status and stderr lines of the real binary; the page has no external
 *               resource (no src=/href= to a URL), so it opens without network.
 *   Chromium    the page's own self-check (#st-status: every chart drawn, no error recorded by
 *               window.onerror / console.error, which the page installs before anything else),
 *               Chromium's stderr has no "Uncaught", and a screenshot: the PNG is decoded by a
 *               second page (data: URI → canvas) that counts saturated pixels inside each
 *               chart's plot rectangle (must be > 100) and in an empty margin strip (must be 0,
 *               the negative control). Chromium is a test dependency (`make test` installs it):
 *               without it the check fails with one line saying how to install it. Negative
 *               controls: the test runs its own browser part again (`--browser-only`) with
 *               ST_CHROMIUM naming a file that does not exist, then a fake browser that exits 0
 *               without rendering; both must exit non-zero with the checks failed.
 *   resume      a real resumed log: `train --stop-after 7` with checkpoints every 3 steps, the
 *               step-7 checkpoint removed (as when a run dies before saving it), then
 *               `--resume auto` (from step 6) to step 12 with the same --log. The page's embedded
 *               data must hold one run with steps 1..12, strictly increasing, tokens strictly
 *               increasing, resumed_from [6], step 7 once with the values of the resumed process.
 *               Negative control: the same log with the second start record's resumed_from_step
 *               set to 0 (a new run appended to the file) must be two runs (1..7 and 7..12).
 * ST_CHROMIUM may name the browser binary. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "core/fileio.h"
#include "report/report.h"
#include "testutil.h"

#define BIN ST_BINARY_DIR "/scaletrain"
#define TMP ST_BINARY_DIR "/test_report"

/* ---- helpers ---- */

static double fabs_diff(double a, double b) { return a > b ? a - b : b - a; }

static void spit(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* Runs a shell command; returns its exit code (-1 if it did not exit normally). */
static int run(const char *cmd) {
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static int count_lines(const char *s) {
    int n = 0;
    for (; s && *s; s++) n += *s == '\n';
    return n;
}

/* Value of attribute name inside the tag that contains position p (searching back to '<' and
 * forward to '>'); writes "" if absent. */

/* A log of steps 1..nsteps (loss falling from 5), val every 10 steps, memory records, a ckpt note
 * and a loss spike at spike_step (0: none). loss_add shifts the loss (to tell branches apart). */
static void log_steps(char *buf, size_t cap, size_t *k, int from, int to, double loss_add, int spike_step) {
    for (int s = from; s <= to; s++) {
        double loss = 5.0 / (1.0 + 0.1 * s) + loss_add + (s == spike_step ? 3.0 : 0.0);
        *k += (size_t)snprintf(buf + *k, cap - *k,
                               "{\"event\":\"step\",\"step\":%d,\"loss\":%.6f,\"lr\":%g,\"grad_norm\":%g,"
                               "\"grad_norm_clipped\":%g,\"tokens\":512,\"tokens_seen\":%d,\"tokens_per_s\":%d,"
                               "\"mfu\":0.%02d,\"noise_scale\":{\"b_simple_ema\":%d},\"time_ms\":{\"total\":60,\"data\":3,\"forward\":20,\"backward\":30,"
                               "\"comm\":1,\"optimizer\":5,\"checkpoint\":%d}}\n",
                               s, loss, 1e-3 * (s < 5 ? s / 5.0 : 1.0), 2.0 / s + 0.2, s < 3 ? 1.0 : 2.0 / s + 0.2,
                               512 * s, 8000 + 10 * s, 30 + s % 10, 100 + 20 * s, s % 10 == 0 ? 2 : 0);
        if (s % 10 == 0)
            *k += (size_t)snprintf(buf + *k, cap - *k, "{\"event\":\"val\",\"step\":%d,\"loss\":%.6f}\n", s,
                                   5.0 / (1.0 + 0.1 * s) + loss_add + 0.2);
        if (s == spike_step)
            *k += (size_t)snprintf(buf + *k, cap - *k,
                                   "{\"event\":\"spike\",\"step\":%d,\"metric\":\"loss\",\"value\":%.6f,\"median\":%.6f,"
                                   "\"action\":\"rollback\"}\n",
                                   s, loss, loss - 3.0);
    }
}

static size_t log_head(char *buf, size_t cap) {
    return (size_t)snprintf(
        buf, cap,
        "{\"event\":\"start\",\"schema_version\":1,\"config\":{\"model\":{\"layers\":2,\"heads\":2,\"channels\":64,"
        "\"vocab\":257},\"optimizer\":\"adamw\",\"lr\":0.001,\"steps\":40},\"effective_batch\":{\"sequences\":8,"
        "\"tokens\":512},\"num_params\":120640,\"memory_planned\":{\"parameters\":4000000,\"gradients\":4000000,"
        "\"optimizer_moments\":8000000,\"activations\":20000000,\"workspace\":1000000}}\n"
        "{\"event\":\"memory\",\"measured\":{\"parameters\":4100000,\"gradients\":4100000,\"optimizer_moments\":8200000,"
        "\"activations\":21000000,\"workspace\":1500000,\"data\":300000}}\n");
}

/* ---- parser ---- */

static void test_parser(void) {
    static char buf[1 << 20];
    size_t k = log_head(buf, sizeof buf);                                  /* lines 1-2 */
    log_steps(buf, sizeof buf, &k, 1, 30, 0.0, 25);                        /* branch A, spike at 25 */
    k += (size_t)snprintf(buf + k, sizeof buf - k, "this is not json\n");  /* a malformed line */
    k += (size_t)snprintf(buf + k, sizeof buf - k, "{\"event\":\"rollback\",\"step\":30,\"to_step\":20}\n");
    log_steps(buf, sizeof buf, &k, 21, 40, 0.5, 0);                        /* branch B replays 21..30 */
    k += (size_t)snprintf(buf + k, sizeof buf - k, "[1,2]\n{\"event\":\"step\",\"loss\":1}\n");
    k += (size_t)snprintf(buf + k, sizeof buf - k, "{\"event\":\"step\",\"step\":41,\"lo"); /* torn */
    ReportRun r = {0};
    Err e = {0};
    Status st = report_parse_text(&r, "dir/run.jsonl", buf, k, &e);
    const RepCol *sc = &r.step[REP_STEP];
    int ascending = 1;
    for (size_t i = 0; i < sc->n; i++) ascending &= sc->v[i] == (double)(i + 1);
    /* Step 25 and 30 must carry branch B's values (loss_add 0.5, no spike). */
    double want25 = 5.0 / (1.0 + 2.5) + 0.5, want30 = 5.0 / 4.0 + 0.5;
    int kept_b = sc->n == 40 && fabs_diff(r.step[REP_LOSS].v[24], want25) < 1e-6 &&
                 fabs_diff(r.step[REP_LOSS].v[29], want30) < 1e-6;
    tu_check(st == ST_OK && sc->n == 40 && ascending, "report_parse_steps_once", "steps=%zu ascending=%d", sc->n,
             ascending);
    tu_check(kept_b && r.replayed == 10, "report_parse_replay_keeps_continuing_branch",
             "replayed=%zu loss[25]=%.6f want %.6f", r.replayed, sc->n >= 25 ? r.step[REP_LOSS].v[24] : -1, want25);
    /* val: 10, 20 (branch A, before the replay point), 30, 40 (branch B). */
    int vals_ok = r.val_step.n == 4 && r.val_step.v[2] == 30 && fabs_diff(r.val_loss.v[2], 5.0 / 4.0 + 0.7) < 1e-6;
    tu_check(vals_ok, "report_parse_val_once", "vals=%zu", r.val_step.n);
    tu_check(r.spike_step.n == 1 && r.spike_step.v[0] == 25 && r.spike_tokens.v[0] == 25 * 512,
             "report_parse_spike_kept", "spikes=%zu", r.spike_step.n);
    tu_check(r.nplanned == 5 && r.nmeasured == 6 && r.batch_tokens == 512, "report_parse_memory",
             "planned=%d measured=%d", r.nplanned, r.nmeasured);
    char w[2048];
    int has = report_run_warning(&r, w, sizeof w);
    int torn_line = count_lines(buf) + 1; /* the last, newline-less line */
    char want_torn[64];
    snprintf(want_torn, sizeof want_torn, "line %d: truncated", torn_line);
    tu_check(has && r.bad_lines == 4 && strstr(w, "not valid JSON") && strstr(w, want_torn) &&
                 strstr(w, "without a numeric \"step\"") && strstr(w, "not an object"),
             "report_parse_warnings", "bad=%zu warning=\"%s\"", r.bad_lines, w);
    char *html = NULL;
    size_t len = 0;
    st = report_render(&r, 1, "t<x>", &html, &len, &e);
    tu_check(st == ST_OK && html && strstr(html, "<title>t&lt;x&gt;</title>") && strstr(html, "uPlot") &&
                 !strstr(html, "<script src") && !strstr(html, "<link"),
             "report_render_self_contained", "len=%zu", len);
    free(html);
    report_run_free(&r);
}

/* ---- the command ---- */

static void write_logs(void) {
    static char buf[1 << 20];
    size_t k = log_head(buf, sizeof buf);
    log_steps(buf, sizeof buf, &k, 1, 40, 0.0, 25);
    k += (size_t)snprintf(buf + k, sizeof buf - k, "{\"event\":\"ckpt\",\"step\":40,\"path\":\"ckpt/step_00000040\"}\n");
    spit(TMP "/good.jsonl", buf);
    k = log_head(buf, sizeof buf);
    log_steps(buf, sizeof buf, &k, 1, 30, 0.3, 0);
    log_steps(buf, sizeof buf, &k, 21, 35, 0.4, 0);
    k += (size_t)snprintf(buf + k, sizeof buf - k, "{oops\n{\"event\":\"step\",\"step\":36,\"loss\":1.");
    spit(TMP "/damaged.jsonl", buf);
    spit(TMP "/garbage.jsonl", "not json\nstill not\n");
}

static void test_command(void) {
    int rc = run(BIN " report " TMP "/good.jsonl " TMP "/damaged.jsonl -o " TMP "/report.html >" TMP
                     "/out.txt 2>" TMP "/err.txt");
    char *err = tu_slurp(TMP "/err.txt"), *html = tu_slurp(TMP "/report.html");
    int warn_ok = err && count_lines(err) == 1 && strstr(err, "scaletrain report: warning: ") &&
                  strstr(err, "damaged.jsonl: 2 of") && strstr(err, "truncated last line");
    tu_check(rc == 0 && warn_ok && html, "report_cmd_damaged_log_warns", "exit=%d stderr=\"%s\"", rc, err ? err : "");
    tu_check(html && !strstr(html, "<script src") && !strstr(html, "<link") && !strstr(html, "@import"),
             "report_cmd_no_external_resources", "bytes=%zu", html ? strlen(html) : 0);
    free(err);
    free(html);
    struct {
        const char *name, *args, *want;
    } bad[] = {
        {"report_cmd_missing_log", TMP "/nope.jsonl -o " TMP "/x.html", "nope.jsonl"},
        {"report_cmd_no_valid_records", TMP "/garbage.jsonl -o " TMP "/x.html", "no valid metrics records"},
        {"report_cmd_no_args", "", "expected at least one metrics log"},
        /* beside a good log, an empty one is refused as it is alone (it was an empty run, exit 0) */
        {"report_cmd_empty_beside_good", TMP "/good.jsonl " TMP "/empty.jsonl -o " TMP "/x.html",
         "empty.jsonl: no valid metrics records"},
        /* -o naming an input, spelled differently (./): it was overwritten with HTML */
        {"report_cmd_out_is_input", TMP "/self.jsonl -o " TMP "/./self.jsonl", "found the log"},
        /* one log named twice (another spelling too): drawn as two runs of the same curves */
        {"report_cmd_log_twice", TMP "/self.jsonl " TMP "/./self.jsonl -o " TMP "/x.html",
         "self.jsonl: expected each metrics log once, found it also as argument 1"},
        /* an empty title gave the default one, as if not given */
        {"report_cmd_empty_title", TMP "/self.jsonl --title '' -o " TMP "/x.html", "--title: expected text, found ''"},
    };
    spit(TMP "/empty.jsonl", "");
    spit(TMP "/self.jsonl", "{\"event\":\"step\",\"step\":1,\"loss\":2.5}\n");
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char cmd[2048];
        snprintf(cmd, sizeof cmd, BIN " report %s >/dev/null 2>" TMP "/err.txt", bad[i].args);
        rc = run(cmd);
        err = tu_slurp(TMP "/err.txt");
        int ok = rc == 2 && err && count_lines(err) == 1 && strstr(err, bad[i].want) &&
                 !strncmp(err, "scaletrain report: ", 19);
        tu_check(ok, bad[i].name, "exit=%d stderr=\"%s\"", rc, err ? err : "");
        free(err);
    }
    char *self = tu_slurp(TMP "/self.jsonl");
    tu_check(self && !strcmp(self, "{\"event\":\"step\",\"step\":1,\"loss\":2.5}\n"), "report_cmd_out_is_input_kept",
             "the log now holds %zu bytes", self ? strlen(self) : 0);
    free(self);
    /* control: the same log to another output is a report */
    rc = run(BIN " report " TMP "/self.jsonl -o " TMP "/self.html >/dev/null 2>&1");
    tu_check(rc == 0, "report_cmd_out_other_control", "exit=%d", rc);
    /* control of report_cmd_log_twice and _empty_title: two distinct logs with the same records, and
     * a title, make a report */
    spit(TMP "/self2.jsonl", "{\"event\":\"step\",\"step\":1,\"loss\":2.5}\n");
    rc = run(BIN " report " TMP "/self.jsonl " TMP "/self2.jsonl --title 'two logs' -o " TMP "/self.html >/dev/null 2>&1");
    tu_check(rc == 0, "report_cmd_two_logs_title_control", "exit=%d", rc);
}

/* ---- the page in headless Chromium ---- */

/* Runs the browser headless on url with extra args; stdout → out_path, stderr → err_path. */
static int chromium_run(const char *bin, const char *extra, const char *url, const char *out_path,
                        const char *err_path, int w, int h) {
    char profile[] = TMP "/profile_XXXXXX";
    if (!mkdtemp(profile)) return -1;
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "timeout 120 '%s' --headless --no-sandbox --disable-gpu --disable-quic --no-first-run "
             "--disable-background-networking --disable-component-update --disable-sync --disable-extensions "
             "--hide-scrollbars --force-device-scale-factor=1 --enable-logging=stderr --v=0 "
             "--user-data-dir=%s --window-size=%d,%d --virtual-time-budget=10000 %s '%s' >%s 2>%s",
             bin, profile, w, h, extra, url, out_path, err_path);
    int rc = run(cmd);
    char rm[600];
    snprintf(rm, sizeof rm, "rm -rf '%s'", profile);
    run(rm);
    return rc;
}

static char *base64(const unsigned char *p, size_t n) {
    static const char T[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *o = malloc(4 * ((n + 2) / 3) + 1), *q = o;
    if (!o) return NULL;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)p[i] << 16 | (i + 1 < n ? (unsigned)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        *q++ = T[v >> 18 & 63];
        *q++ = T[v >> 12 & 63];
        *q++ = i + 1 < n ? T[v >> 6 & 63] : '=';
        *q++ = i + 2 < n ? T[v & 63] : '=';
    }
    *q = '\0';
    return o;
}

#define MAX_CHARTS 32

static void test_browser(void) {
    char bin[1024], why[512];
    if (!tu_find_chromium(bin, sizeof bin, why, sizeof why)) {
        tu_check(0, "report_chromium", "%s", why);
        return;
    }
    const int W = 1200, H0 = 6000;
    int rc = chromium_run(bin, "--dump-dom", "file://" TMP "/report.html", TMP "/dom.html", TMP "/chrome_err.txt", W, H0);
    char *dom = tu_slurp(TMP "/dom.html"), *cerr = tu_slurp(TMP "/chrome_err.txt");
    const char *stp = dom ? strstr(dom, "id=\"st-status\"") : NULL;
    char state[32] = "", charts[16] = "", drawn[16] = "", errors[16] = "", height[16] = "";
    if (stp) {
        tu_tag_attr(dom, stp, "data-state", state, sizeof state);
        tu_tag_attr(dom, stp, "data-charts", charts, sizeof charts);
        tu_tag_attr(dom, stp, "data-drawn", drawn, sizeof drawn);
        tu_tag_attr(dom, stp, "data-errors", errors, sizeof errors);
        tu_tag_attr(dom, stp, "data-height", height, sizeof height);
    }
    /* Two runs: loss, lr, grad_norm, noise scale, throughput + a time and a memory chart per run. */
    int nch = atoi(charts), uncaught = cerr && strstr(cerr, "Uncaught") != NULL;
    tu_check(rc == 0 && !strcmp(state, "ok") && nch == 9 && atoi(drawn) == 9 && !strcmp(errors, "0") && !uncaught,
             "report_chromium_page_ok", "exit=%d state=%s charts=%s drawn=%s errors=%s uncaught=%d", rc, state, charts,
             drawn, errors, uncaught);
    /* Per-chart canvas pixels and plot rectangles. */
    int rects[MAX_CHARTS][4], n = 0, min_px = 1 << 30;
    char ids[MAX_CHARTS][32];
    for (const char *p = dom; p && (p = strstr(p, "data-chart=\"")) && n < MAX_CHARTS; p++) {
        char px[32], rect[64];
        tu_tag_attr(dom, p, "data-chart", ids[n], sizeof ids[n]);
        tu_tag_attr(dom, p, "data-pixels", px, sizeof px);
        tu_tag_attr(dom, p, "data-rect", rect, sizeof rect);
        if (atoi(px) < min_px) min_px = atoi(px);
        if (sscanf(rect, "%d,%d,%d,%d", &rects[n][0], &rects[n][1], &rects[n][2], &rects[n][3]) == 4) n++;
    }
    tu_check(n == 9 && min_px > 100, "report_chromium_canvas_pixels", "charts with rects=%d min pixels=%d", n, min_px);
    free(dom);
    free(cerr);
    /* Screenshot of the whole page, then count saturated pixels per plot rectangle in it. */
    int H = atoi(height) > 0 && atoi(height) < 16000 ? atoi(height) : H0;
    char extra[600];
    snprintf(extra, sizeof extra, "--screenshot=%s", TMP "/shot.png");
    remove(TMP "/shot.png");
    rc = chromium_run(bin, extra, "file://" TMP "/report.html", "/dev/null", TMP "/chrome_err.txt", W, H);
    char *png = NULL;
    size_t png_len = 0;
    Err e;
    if (file_read_all(TMP "/shot.png", &png, &png_len, &e) != ST_OK || png_len < 1000) {
        tu_check(0, "report_chromium_screenshot", "no screenshot written (exit=%d)", rc);
        free(png);
        return;
    }
    char *b64 = base64((const unsigned char *)png, png_len);
    free(png);
    size_t cap = strlen(b64) + 8192, k = 0;
    char *page = malloc(cap);
    k += (size_t)snprintf(page + k, cap - k,
                          "<!DOCTYPE html><html><body><div id=\"out\" data-state=\"loading\"></div><script>\n"
                          "var R = [");
    for (int i = 0; i < n; i++)
        k += (size_t)snprintf(page + k, cap - k, "[%d,%d,%d,%d],", rects[i][0], rects[i][1], rects[i][2], rects[i][3]);
    /* The negative control: a strip of the right margin, beside every chart, holds no data. */
    k += (size_t)snprintf(page + k, cap - k, "[%d,0,%d,%d]];\n", W - 50, 40, H);
    k += (size_t)snprintf(
        page + k, cap - k,
        "var img = new Image();\n"
        "img.onload = function () {\n"
        "  var c = document.createElement('canvas'); c.width = img.width; c.height = img.height;\n"
        "  var x = c.getContext('2d'); x.drawImage(img, 0, 0);\n"
        "  var res = R.map(function (r) { var d = x.getImageData(r[0], r[1], r[2], r[3]).data, n = 0;\n"
        "    for (var i = 0; i < d.length; i += 4) { var a = d[i], b = d[i+1], e = d[i+2];\n"
        "      if (Math.max(a, b, e) - Math.min(a, b, e) > 50) n++; } return n; });\n"
        "  var o = document.getElementById('out'); o.setAttribute('data-counts', res.join(','));\n"
        "  o.setAttribute('data-size', img.width + 'x' + img.height); o.setAttribute('data-state', 'ok'); };\n"
        "img.onerror = function () { document.getElementById('out').setAttribute('data-state', 'error'); };\n"
        "img.src = 'data:image/png;base64,");
    memcpy(page + k, b64, strlen(b64));
    k += strlen(b64);
    snprintf(page + k, cap - k, "';\n</script></body></html>\n");
    free(b64);
    spit(TMP "/shotcheck.html", page);
    free(page);
    rc = chromium_run(bin, "--dump-dom", "file://" TMP "/shotcheck.html", TMP "/shotdom.html", TMP "/chrome_err2.txt",
                      400, 300);
    dom = tu_slurp(TMP "/shotdom.html");
    const char *o = dom ? strstr(dom, "id=\"out\"") : NULL;
    char counts[1024] = "", size[64] = "", st2[16] = "";
    if (o) {
        tu_tag_attr(dom, o, "data-counts", counts, sizeof counts);
        tu_tag_attr(dom, o, "data-size", size, sizeof size);
        tu_tag_attr(dom, o, "data-state", st2, sizeof st2);
    }
    int vals[MAX_CHARTS + 1], nv = 0, min_shot = 1 << 30;
    for (char *p = counts; *p && nv <= MAX_CHARTS;) {
        vals[nv++] = (int)strtol(p, &p, 10);
        if (*p == ',') p++;
        else break;
    }
    for (int i = 0; i < nv - 1; i++) min_shot = vals[i] < min_shot ? vals[i] : min_shot;
    int control = nv ? vals[nv - 1] : -1;
    tu_check(!strcmp(st2, "ok") && nv == n + 1 && min_shot > 100 && control == 0, "report_chromium_screenshot",
             "png %s, saturated pixels per chart: min %d (need > 100), empty margin control %d (need 0)", size,
             min_shot, control);
    free(dom);
}

/* ---- the browser check's negative controls ---- */

/* Runs this executable's browser part alone with ST_CHROMIUM=chromium; returns its exit code and
 * its output in *out (caller frees). */
static int browser_only(const char *chromium, char **out) {
    char self[1024];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = '\0';
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "ST_CHROMIUM='%s' '%s' --browser-only >" TMP "/neg_out.txt 2>&1", chromium, self);
    int rc = run(cmd);
    *out = tu_slurp(TMP "/neg_out.txt");
    return rc;
}

static void test_browser_negative(void) {
    char *out = NULL;
    int rc = browser_only(TMP "/no-such-chromium", &out);
    tu_check(rc != 0 && out && strstr(out, "report_chromium: FAIL") && strstr(out, "no-such-chromium") &&
                 strstr(out, "apt-get install chromium") && !strstr(out, "report_chromium_page_ok"),
             "report_chromium_missing_fails", "ST_CHROMIUM naming no file: exit %d, output \"%s\"", rc, out ? out : "");
    free(out);
    /* A "browser" that exits 0 and renders nothing: every page check must fail. */
    spit(TMP "/fake-chromium", "#!/bin/sh\nexit 0\n");
    chmod(TMP "/fake-chromium", 0755);
    rc = browser_only(TMP "/fake-chromium", &out);
    int failed = out && strstr(out, "report_chromium_page_ok: FAIL") && strstr(out, "report_chromium_canvas_pixels: FAIL") &&
                 strstr(out, "report_chromium_screenshot: FAIL") && !strstr(out, ": OK");
    tu_check(rc != 0 && failed, "report_chromium_fake_browser_fails", "a browser that renders nothing: exit %d, %s", rc,
             failed ? "all three page checks failed" : out ? out : "(no output)");
    free(out);
}

/* ---- a resumed run's log ---- */

/* The runs of the page's embedded data (ST_DATA), parsed; NULL if the page has none. */
static cJSON *page_runs(const char *html, cJSON **root) {
    *root = NULL;
    const char *a = html ? strstr(html, "var ST_DATA = ") : NULL;
    const char *b = a ? strstr(a, ";\n</script>") : NULL;
    if (!b) return NULL;
    a += strlen("var ST_DATA = ");
    *root = cJSON_ParseWithLength(a, (size_t)(b - a));
    return cJSON_GetObjectItemCaseSensitive(*root, "runs");
}

static cJSON *steps_col(const cJSON *run, const char *key) {
    return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(run, "steps"), key);
}

/* 1 if run's steps are exactly from..to in order and its tokens strictly increase. */
static int steps_are(const cJSON *run, int from, int to) {
    const cJSON *st = steps_col(run, "step"), *tok = steps_col(run, "tokens");
    if (cJSON_GetArraySize(st) != to - from + 1 || cJSON_GetArraySize(tok) != to - from + 1) return 0;
    double prev = -1;
    for (int i = 0; i < to - from + 1; i++) {
        double t = cJSON_GetArrayItem(tok, i)->valuedouble;
        if (cJSON_GetArrayItem(st, i)->valuedouble != from + i || !(t > prev)) return 0;
        prev = t;
    }
    return 1;
}

/* time_ms.total of the last `step` record for step s in the log text (the resumed process's). */
static double last_total_ms(const char *log, int s) {
    char key[64];
    snprintf(key, sizeof key, "{\"event\":\"step\",\"step\":%d,", s);
    double v = -1;
    for (const char *p = log; (p = strstr(p, key)); p++) {
        const char *t = strstr(p, "\"total\":");
        if (t) v = atof(t + 8);
    }
    return v;
}

static void test_resume_log(void) {
    const char *dir = TMP "/resume";
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", dir, dir);
    run(cmd);
    const char *args = "train --layers 2 --heads 2 --channels 32 --max-seq-len 32 --seq-len 32 --micro-batch 2 "
                       "--vocab 257 --steps 12 --warmup 2 --val-every 4 --val-batches 2 --peak-gflops 100 --quiet "
                       "--ckpt-dir " TMP "/resume/ck --ckpt-every 3 --log " TMP "/resume/run.jsonl";
    snprintf(cmd, sizeof cmd, "%s %s --stop-after 7 >%s/train1.txt 2>&1 && rm -rf %s/ck/step_00000007 && "
             "%s %s --resume auto >%s/train2.txt 2>&1 && %s report %s/run.jsonl -o %s/resumed.html >/dev/null",
             BIN, args, dir, dir, BIN, args, dir, BIN, dir, dir);
    int rc = run(cmd);
    char *log = tu_slurp(TMP "/resume/run.jsonl"), *html = tu_slurp(TMP "/resume/resumed.html");
    cJSON *root;
    const cJSON *runs = page_runs(html, &root), *r0 = cJSON_GetArrayItem(runs, 0);
    const cJSON *from = cJSON_GetObjectItemCaseSensitive(r0, "resumed_from");
    const cJSON *tot = steps_col(r0, "total");
    double kept7 = cJSON_GetArraySize(tot) >= 7 ? cJSON_GetArrayItem(tot, 6)->valuedouble : -1;
    double want7 = log ? last_total_ms(log, 7) : -2;
    int starts = 0;
    for (const char *p = log; p && (p = strstr(p, "\"event\":\"start\"")); p++) starts++;
    int one = cJSON_GetArraySize(runs) == 1 && steps_are(r0, 1, 12) && cJSON_GetArraySize(from) == 1 &&
              cJSON_GetArrayItem(from, 0)->valuedouble == 6;
    tu_check(rc == 0 && starts == 2 && one && fabs_diff(kept7, want7) <= 1e-6 * want7,
             "report_resumed_log_one_series",
             "exit %d, %d start records, %d run(s) in the page, steps 1..12 once each: %s, resumed_from [6]: %s, "
             "step 7 from the resumed process: %.4f ms (want %.4f)",
             rc, starts, cJSON_GetArraySize(runs), r0 && steps_are(r0, 1, 12) ? "yes" : "no",
             cJSON_GetArraySize(from) == 1 ? "yes" : "no", kept7, want7);
    cJSON_Delete(root);
    free(html);
    /* Negative control: the second start record without resume info is a new run in the file. */
    char *p = log ? strstr(log, "\"resumed_from_step\":6,") : NULL;
    if (p) {
        memcpy(p, "\"resumed_from_step\":0,", strlen("\"resumed_from_step\":0,"));
        spit(TMP "/resume/newrun.jsonl", log);
    }
    rc = run(BIN " report " TMP "/resume/newrun.jsonl -o " TMP "/resume/newrun.html >/dev/null");
    html = tu_slurp(TMP "/resume/newrun.html");
    runs = page_runs(html, &root);
    const cJSON *a = cJSON_GetArrayItem(runs, 0), *b = cJSON_GetArrayItem(runs, 1);
    int one_neg = cJSON_GetArraySize(runs) == 1 && steps_are(a, 1, 12);
    int two = cJSON_GetArraySize(runs) == 2 && steps_are(a, 1, 7) && steps_are(b, 7, 12);
    tu_check(p && rc == 0 && !one_neg && two, "report_new_run_in_log_is_second_series",
             "resumed_from_step 0 in the second start record: %d run(s), the one-series check %s, steps 1..7 and 7..12: %s",
             cJSON_GetArraySize(runs), one_neg ? "PASSED (not detected)" : "fails (detected)", two ? "yes" : "no");
    cJSON_Delete(root);
    free(html);
    free(log);
}

int main(int argc, char **argv) {
    Err e;
    file_mkdirs(TMP, &e);
    if (argc > 1 && !strcmp(argv[1], "--browser-only")) { /* the negative controls' child */
        test_browser();
        return tu_exit();
    }
    test_parser();
    write_logs();
    test_command();
    test_resume_log();
    test_browser();
    test_browser_negative();
    return tu_exit();
}
