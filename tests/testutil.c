/* testutil.c — check bookkeeping, error norms, file reading and the metrics log's runs for the tests. */
#include "testutil.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/fileio.h"

int tu_failures = 0;

/* ST_TEST_NICE=N (tests/CMakeLists.txt sets 19 for every test without the mpi label): this process
 * and what it starts run at nice N. `make test` runs two tests at a time on 2 cores, and the ranks
 * of an mpirun job wait on each other at every collective: beside a test that computes without
 * pause, a waiting rank's peer got the core only when the other's time slice ended, collective
 * after collective (test_tp_overlap 5.5 s alone, 31.6 s beside test_cuda_model_cuemu; with the
 * latter at nice 19, 8.1 s, and the emulator itself 39 s against 43: docs/testing.md). At a lower
 * priority the test still has every cycle the ranks leave idle. Runs before main, so every test
 * linked with this file obeys it; a value that is not an integer in 0..19 ends the test. */
__attribute__((constructor)) static void tu_nice(void) {
    const char *v = getenv("ST_TEST_NICE");
    if (!v || !*v) return;
    char *end;
    long n = strtol(v, &end, 10);
    if (*end || n < 0 || n > 19) {
        fprintf(stderr, "ST_TEST_NICE: expected an integer 0..19, found '%s'\n", v);
        exit(2);
    }
    if (getpriority(PRIO_PROCESS, 0) < n && setpriority(PRIO_PROCESS, 0, (int)n) != 0)
        perror("ST_TEST_NICE: setpriority");
}

void tu_check(int ok, const char *name, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%s: %s ", name, ok ? "OK" : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    if (!ok) tu_failures++;
}

double tu_rel_err_f(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    if (den == 0) return sqrt(num);
    return sqrt(num / den);
}

double tu_rel_err_fd(const float *a, const double *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += b[i] * b[i];
    }
    if (den == 0) return sqrt(num);
    return sqrt(num / den);
}

double tu_max_abs_diff_f(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= m)) m = d; /* NaN propagates as the max */
    }
    return m;
}

int tu_exit(void) {
    if (tu_failures) printf("%d check(s) failed\n", tu_failures);
    return tu_failures ? 1 : 0;
}

int tu_shell(const char *cmd) {
    int rc = system(cmd);
    int ok = rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 0;
    if (!ok) tu_check(0, "setup command", "exit status %d: %.400s", rc == -1 ? -1 : WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, cmd);
    return ok;
}

int tu_run_in(const char *dir, const char *bin, const char *args, char *err, size_t cap, int *lines) {
    size_t n = strlen(dir) * 3 + strlen(bin) + strlen(args) + 64;
    char *cmd = malloc(n), *path = malloc(strlen(dir) + 16);
    if (!cmd || !path) return free(cmd), free(path), -1;
    snprintf(cmd, n, "cd %s && %s %s >%s/stdout.txt 2>%s/stderr.txt", dir, bin, args, dir, dir);
    int rc = system(cmd);
    sprintf(path, "%s/stderr.txt", dir);
    char *t = tu_slurp(path);
    free(cmd), free(path);
    if (err && cap) {
        snprintf(err, cap, "%s", t ? t : "");
        size_t l = strlen(err);
        if (l && err[l - 1] == '\n') err[l - 1] = '\0';
    }
    if (lines) {
        *lines = 0;
        for (const char *p = t; p && *p; p++) *lines += *p == '\n';
    }
    free(t);
    return rc == -1 ? -1 : WIFEXITED(rc) ? WEXITSTATUS(rc) : WIFSIGNALED(rc) ? 128 + WTERMSIG(rc) : -1;
}

void tu_refused_in(const char *dir, const char *bin, const char *name, const char *args, const char *want) {
    char err[2048];
    int lines, rc = tu_run_in(dir, bin, args, err, sizeof err, &lines);
    tu_check(rc == 2 && lines == 1 && strstr(err, want), name, "exit %d, %d line(s): %s", rc, lines, err);
}

void tu_ran_in(const char *dir, const char *bin, const char *name, const char *args) {
    char err[2048];
    int rc = tu_run_in(dir, bin, args, err, sizeof err, NULL);
    tu_check(rc == 0, name, "exit %d: %s", rc, err);
}

char *tu_slurp(const char *path) {
    char *t;
    size_t n;
    Err e;
    return file_read_all(path, &t, &n, &e) == ST_OK ? t : NULL;
}

int tu_same_file(const char *a, const char *b) {
    char *x, *y;
    size_t nx, ny;
    Err e;
    if (file_read_all(a, &x, &nx, &e) != ST_OK) return 0;
    if (file_read_all(b, &y, &ny, &e) != ST_OK) return free(x), 0;
    int same = nx == ny && !memcmp(x, y, nx);
    free(x), free(y);
    return same;
}

cJSON *tu_log_records(const char *path) {
    char *text = tu_slurp(path);
    if (!text) return NULL;
    cJSON *all = cJSON_CreateArray();
    for (char *line = strtok(text, "\n"); line && all; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        if (!o) cJSON_Delete(all), all = NULL;
        else cJSON_AddItemToArray(all, o);
    }
    free(text);
    return all;
}

static double tu_num(const cJSON *o, const char *k) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(x) ? x->valuedouble : NAN;
}

int tu_log_runs(const char *path, TuLogRun *runs, int max) {
    cJSON *all = tu_log_records(path);
    if (!all) return -1;
    int n = 0;
    TuLogRun *cur = NULL, spare;
    const cJSON *o;
    cJSON_ArrayForEach(o, all) {
        const cJSON *ev = cJSON_GetObjectItemCaseSensitive(o, "event");
        if (!cJSON_IsString(ev)) continue;
        if (!strcmp(ev->valuestring, "start")) {
            cur = n < max ? &runs[n] : &spare;
            n++;
            memset(cur, 0, sizeof *cur);
            cur->consecutive = 1;
            cur->resumed_from = (long)tu_num(o, "resumed_from_step");
            cur->world = (int)tu_num(o, "world");
            cur->found = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(
                cJSON_GetObjectItemCaseSensitive(o, "resume"), "found"));
        } else if (!strcmp(ev->valuestring, "step") && cur) {
            long s = (long)tu_num(o, "step");
            if (cur->nsteps == 0) cur->first_step = s;
            else if (s != cur->last_step + 1) cur->consecutive = 0;
            cur->last_step = s;
            cur->nsteps++;
        }
    }
    cJSON_Delete(all);
    return n;
}

int tu_log_resumed(const char *path, long from, long last, int w1, int w2, char *why, size_t cap) {
    TuLogRun r[2];
    int n = tu_log_runs(path, r, 2);
    if (n != 2) {
        snprintf(why, cap, "%d start record(s) in %s, expected 2 (the run and its resume)", n, path);
        return 0;
    }
    if (from < 0) from = r[0].last_step;
    snprintf(why, cap,
             "before the resume: resumed_from_step %ld, steps %ld..%ld%s, world %d; after: resumed_from_step %ld "
             "(expected %ld), found %s, steps %ld..%ld%s (expected %ld..%ld), world %d",
             r[0].resumed_from, r[0].first_step, r[0].last_step, r[0].consecutive ? "" : " with gaps", r[0].world,
             r[1].resumed_from, from, r[1].found ? "true" : "false", r[1].first_step, r[1].last_step,
             r[1].consecutive ? "" : " with gaps", from + 1, last, r[1].world);
    return from > 0 && r[0].resumed_from == 0 && r[0].first_step == 1 && r[0].last_step == from && r[0].consecutive &&
           r[1].resumed_from == from && r[1].found && r[1].first_step == from + 1 && r[1].last_step == last &&
           r[1].consecutive && (!w1 || r[0].world == w1) && (!w2 || r[1].world == w2);
}

#define TU_INSTALL_CHROMIUM "install it: apt-get install chromium, or make deps-test"

int tu_find_chromium(char *out, size_t len, char *why, size_t wlen) {
    const char *env = getenv("ST_CHROMIUM");
    if (env && env[0]) {
        snprintf(out, len, "%s", env);
        if (access(out, X_OK) == 0) return 1;
        snprintf(why, wlen, "ST_CHROMIUM=%s is not an executable file (unset it to search PATH, and if there is no "
                            "browser: %s)", env, TU_INSTALL_CHROMIUM);
        return 0;
    }
    snprintf(why, wlen, "no chromium, chromium-browser, google-chrome or google-chrome-stable in PATH (%s)",
             TU_INSTALL_CHROMIUM);
    const char *names[] = {"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"};
    const char *path = getenv("PATH");
    for (size_t i = 0; path && i < sizeof names / sizeof names[0]; i++) {
        const char *p = path;
        while (*p) {
            const char *c = strchr(p, ':');
            size_t n = c ? (size_t)(c - p) : strlen(p);
            snprintf(out, len, "%.*s/%s", (int)n, p, names[i]);
            if (n && access(out, X_OK) == 0) return 1;
            p += n + (c ? 1 : 0);
        }
    }
    return 0;
}

void tu_tag_attr(const char *doc, const char *p, const char *name, char *out, size_t len) {
    out[0] = '\0';
    const char *a = p;
    while (a > doc && *a != '<') a--;
    const char *b = strchr(p, '>');
    if (!b) return;
    char key[64];
    snprintf(key, sizeof key, " %s=\"", name);
    const char *k = strstr(a, key);
    if (!k || k > b) return;
    k += strlen(key);
    const char *q = strchr(k, '"');
    if (!q) return;
    size_t n = (size_t)(q - k) < len - 1 ? (size_t)(q - k) : len - 1;
    memcpy(out, k, n);
    out[n] = '\0';
}

void tu_bf16_kernels_missing(const char *what, const char *instead) {
    __builtin_cpu_init();
    int cpu = __builtin_cpu_supports("avx512bf16");
    char name[160];
    snprintf(name, sizeof name, "%s in this build", what);
    tu_check(!cpu, name, "%s%s", cpu ? "missing, but this CPU has AVX512_BF16: the build lost -march=native (ST_ARCH_FLAGS)"
                                     : "not built (no AVX512_BF16 on this CPU/target): ", cpu ? "" : instead);
}

const char *tu_less_given(char *out, size_t cap, const char *common, const char *extra) {
    char buf[2048];
    snprintf(buf, sizeof buf, "%s", common);
    out[0] = '\0';
    char *save = NULL, *w = strtok_r(buf, " ", &save);
    while (w) {
        char *next = strtok_r(NULL, " ", &save), *val = NULL;
        if (!strncmp(w, "--", 2) && next && strncmp(next, "--", 2)) val = next, next = strtok_r(NULL, " ", &save);
        char key[160];
        snprintf(key, sizeof key, "%s ", w);
        size_t kl = strlen(w);
        const char *hit = extra ? strstr(extra, key) : NULL;
        int given = !strncmp(w, "--", 2) && extra &&
                    (hit || (strlen(extra) >= kl && !strcmp(extra + strlen(extra) - kl, w)));
        if (!given) {
            size_t l = strlen(out);
            snprintf(out + l, cap - l, "%s%s%s%s", l ? " " : "", w, val ? " " : "", val ? val : "");
        }
        w = next;
    }
    return out;
}
