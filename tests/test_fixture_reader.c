/* test_fixture_reader — the STFX0001 reader against the generated fixtures.
 * Oracles: the configs written by gen_gpt2_ref.py; an independent float64 recomputation of the
 * masked mean cross-entropy from "logits" and "targets" (log-sum-exp); softmax normalisation;
 * refusal of truncated / corrupted copies. Also the harness's ST_TEST_NICE (testutil.c): this
 * program run with ST_TEST_NICE=19 reports nice 19 in its child, and without it this process's own
 * priority (the control: CTest runs this test un-niced); 'abc' and 20 are refused with one line and
 * exit 2. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture.h"
#include "testutil.h"

static const char *param_suffix[12] = {"ln1w", "ln1b", "qkvw",   "qkvb",   "attprojw", "attprojb",
                                       "ln2w", "ln2b", "fcw",    "fcb",    "fcprojw",  "fcprojb"};

static int shape_is(const FixtureEntry *e, int dtype, int ndim, const uint64_t *dims) {
    if (!e || e->dtype != dtype || e->ndim != ndim) return 0;
    for (int i = 0; i < ndim; i++)
        if (e->dims[i] != dims[i]) return 0;
    return 1;
}

/* Checks one parameter (and its grad./adamw_final. twins) has the expected shape. */
static int check_param(const Fixture *f, const char *name, int ndim, uint64_t d0, uint64_t d1) {
    uint64_t dims[2] = {d0, d1};
    char buf[160];
    const char *pre[3] = {"", "grad.", "adamw_final."};
    for (int k = 0; k < 3; k++) {
        snprintf(buf, sizeof buf, "%s%s", pre[k], name);
        const FixtureEntry *e = fixture_get(f, buf);
        if (!shape_is(e, FIXTURE_F64, ndim, dims)) {
            printf("  bad or missing entry %s\n", buf);
            return 0;
        }
        const double *x = e->data;
        for (size_t i = 0; i < e->numel; i++)
            if (!isfinite(x[i])) {
                printf("  non-finite value in %s\n", buf);
                return 0;
            }
        /* initial parameter values are float32 numbers, so an fp32 model starts identical */
        if (k == 0)
            for (size_t i = 0; i < e->numel; i++)
                if ((double)(float)x[i] != x[i]) {
                    printf("  %s[%zu] not representable in float32\n", buf, i);
                    return 0;
                }
    }
    return 1;
}

static void write_bytes(const char *path, const unsigned char *b, size_t n) {
    FILE *fp = fopen(path, "wb");
    if (!fp) {
        perror(path);
        exit(1);
    }
    fwrite(b, 1, n, fp);
    fclose(fp);
}

static void check_fixture(const char *file, const int expect_cfg[7], int n_entries) {
    char path[512], err[512], name[160];
    snprintf(path, sizeof path, "%s/tests/fixtures/%s", ST_SOURCE_DIR, file);
    Fixture f;
    int rc = fixture_load(&f, path, err, sizeof err);
    tu_check(rc == 0, file, "load: %s (%d entries)", rc ? err : "ok", f.n);
    if (rc) return;
    tu_check(f.n == n_entries, "entry count", "%d (expected %d)", f.n, n_entries);
    tu_check(fixture_get(&f, "no.such.entry") == NULL, "fixture_get absent", "NULL");

    const FixtureEntry *cfg = fixture_get(&f, "config");
    int cfg_ok = cfg && cfg->dtype == FIXTURE_I32 && cfg->ndim == 1 && cfg->dims[0] == 7;
    if (cfg_ok)
        for (int i = 0; i < 7; i++) cfg_ok &= ((const int32_t *)cfg->data)[i] == expect_cfg[i];
    tu_check(cfg_ok, "config", "L=%d NH=%d C=%d V=%d maxT=%d B=%d T=%d", expect_cfg[0],
             expect_cfg[1], expect_cfg[2], expect_cfg[3], expect_cfg[4], expect_cfg[5],
             expect_cfg[6]);
    if (!cfg_ok) {
        fixture_free(&f);
        return;
    }
    const int L = expect_cfg[0], C = expect_cfg[2], V = expect_cfg[3], maxT = expect_cfg[4];
    const int B = expect_cfg[5], T = expect_cfg[6];

    /* parameters, grads and AdamW finals: names and shapes */
    int pok = check_param(&f, "wte", 2, V, C) && check_param(&f, "wpe", 2, maxT, C) &&
              check_param(&f, "lnfw", 1, C, 0) && check_param(&f, "lnfb", 1, C, 0);
    for (int l = 0; l < L && pok; l++) {
        const uint64_t d0[12] = {C, C, 3 * C, 3 * C, C, C, C, C, 4 * C, 4 * C, C, C};
        const uint64_t d1[12] = {0, 0, C, 0, C, 0, 0, 0, C, 0, 4 * C, 0};
        for (int k = 0; k < 12 && pok; k++) {
            snprintf(name, sizeof name, "h.%d.%s", l, param_suffix[k]);
            pok = check_param(&f, name, d1[k] ? 2 : 1, d0[k], d1[k]);
        }
    }
    tu_check(pok, "parameter/grad/adamw_final entries", "%d layers, shapes ok, fp32-exact", L);

    /* inputs / targets */
    uint64_t bt[2] = {B, T}, btv[3] = {B, T, V}, one[1] = {1}, vv[1] = {V};
    const FixtureEntry *in = fixture_get(&f, "inputs"), *tg = fixture_get(&f, "targets");
    const FixtureEntry *lg = fixture_get(&f, "logits"), *ls = fixture_get(&f, "loss");
    const FixtureEntry *pr = fixture_get(&f, "lm_probs_row0");
    int sok = shape_is(in, FIXTURE_I32, 2, bt) && shape_is(tg, FIXTURE_I32, 2, bt) &&
              shape_is(lg, FIXTURE_F64, 3, btv) && shape_is(ls, FIXTURE_F64, 1, one) &&
              shape_is(pr, FIXTURE_F64, 1, vv);
    tu_check(sok, "inputs/targets/logits/loss/lm_probs_row0 shapes", "B=%d T=%d V=%d", B, T, V);
    if (!sok) {
        fixture_free(&f);
        return;
    }
    const int32_t *x = in->data, *y = tg->data;
    int range_ok = 1, nmask = 0, tailmask = 0;
    for (int i = 0; i < B * T; i++) {
        range_ok &= x[i] >= 0 && x[i] < V && y[i] >= -1 && y[i] < V;
        nmask += y[i] == -1;
    }
    /* targets are the next token: targets[b, t] == inputs[b, t+1] where unmasked */
    for (int b = 0; b < B; b++)
        for (int t = 0; t + 1 < T; t++)
            range_ok &= y[b * T + t] == -1 || y[b * T + t] == x[b * T + t + 1];
    for (int b = 0; b < B; b++) {
        int all = 1;
        for (int t = T - 4; t < T; t++) all &= y[b * T + t] == -1;
        tailmask |= all;
    }
    tu_check(range_ok && tailmask && nmask > 0, "inputs/targets",
             "in range, shifted, %d/%d masked, a row tail of 4 masked: %s", nmask, B * T,
             tailmask ? "yes" : "no");

    /* independent masked-mean cross-entropy in float64 */
    const double *z = lg->data;
    double sum = 0.0;
    int cnt = 0;
    for (int i = 0; i < B * T; i++) {
        if (y[i] == -1) continue;
        const double *row = z + (size_t)i * V;
        double mx = row[0];
        for (int v = 1; v < V; v++) mx = row[v] > mx ? row[v] : mx;
        double se = 0.0;
        for (int v = 0; v < V; v++) se += exp(row[v] - mx);
        sum += mx + log(se) - row[y[i]];
        cnt++;
    }
    double myloss = sum / cnt, ref = ((const double *)ls->data)[0];
    tu_check(fabs(myloss - ref) <= 1e-12, "loss vs C recomputation", "%.15f vs %.15f diff=%.3g (%d targets)",
             myloss, ref, fabs(myloss - ref), cnt);

    const FixtureEntry *al = fixture_get(&f, "adamw_losses"), *hp = fixture_get(&f, "adamw_hparams");
    uint64_t ten[1] = {10}, five[1] = {5};
    int aok = shape_is(al, FIXTURE_F64, 1, ten) && shape_is(hp, FIXTURE_F64, 1, five);
    if (aok) {
        const double *a = al->data, *h = hp->data;
        aok = a[0] == ref && a[9] < a[0] && h[0] == 1e-3 && h[1] == 0.9 && h[2] == 0.95 &&
              h[3] == 1e-8 && h[4] == 0.1;
    }
    tu_check(aok, "adamw_losses/hparams", "losses[0]==loss, decreasing over 10 steps, hparams ok");

    /* lm_probs_row0 = softmax(logits[0,0,:]) */
    const double *p = pr->data;
    double ps = 0.0, mx = z[0], se = 0.0, md = 0.0;
    for (int v = 0; v < V; v++) ps += p[v];
    for (int v = 1; v < V; v++) mx = z[v] > mx ? z[v] : mx;
    for (int v = 0; v < V; v++) se += exp(z[v] - mx);
    for (int v = 0; v < V; v++) md = fmax(md, fabs(exp(z[v] - mx) / se - p[v]));
    tu_check(fabs(ps - 1.0) <= 1e-12 && md <= 1e-15, "lm_probs_row0", "sum-1=%.3g maxdiff vs softmax=%.3g",
             ps - 1.0, md);
    fixture_free(&f);

    /* corrupted copies must be refused, with a message naming the file */
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        tu_check(0, "reopen", "%s", path);
        return;
    }
    fseek(fp, 0, SEEK_END);
    size_t len = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    unsigned char *buf = malloc(len + 1);
    size_t got = fread(buf, 1, len, fp);
    fclose(fp);
    if (got != len) {
        tu_check(0, "reread", "%s", path);
        free(buf);
        return;
    }
    char tmp[256];
    snprintf(tmp, sizeof tmp, "/tmp/st_fixture_bad_%d_%s", (int)getpid(), file);
    const size_t cuts[] = {0, 5, 10, 20, 100, len / 2, len - 9, len - 1};
    int refused = 0, named = 0, ncase = 0;
    for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++, ncase++) {
        write_bytes(tmp, buf, cuts[k]);
        Fixture g;
        err[0] = '\0';
        int r = fixture_load(&g, tmp, err, sizeof err);
        refused += r != 0 && g.n == 0 && g.entries == NULL;
        named += strstr(err, tmp) != NULL;
        if (k == sizeof cuts / sizeof cuts[0] - 1) printf("  truncated to %zu bytes: %s\n", cuts[k], err);
        if (r == 0) fixture_free(&g);
    }
    /* trailing byte */
    buf[len] = 0;
    write_bytes(tmp, buf, len + 1);
    {
        Fixture g;
        int r = fixture_load(&g, tmp, err, sizeof err);
        refused += r != 0;
        named += strstr(err, tmp) != NULL;
        ncase++;
        if (r == 0) fixture_free(&g);
    }
    /* bad magic */
    buf[7] = '2';
    write_bytes(tmp, buf, len);
    {
        Fixture g;
        int r = fixture_load(&g, tmp, err, sizeof err);
        refused += r != 0;
        named += strstr(err, tmp) != NULL;
        ncase++;
        printf("  bad magic: %s\n", err);
        if (r == 0) fixture_free(&g);
    }
    /* missing file */
    remove(tmp);
    {
        Fixture g;
        int r = fixture_load(&g, tmp, err, sizeof err);
        refused += r != 0;
        named += strstr(err, tmp) != NULL;
        ncase++;
    }
    tu_check(refused == ncase && named == ncase, "corrupted copies refused",
             "%d/%d refused, %d/%d messages name the file", refused, ncase, named, ncase);
    free(buf);
}

/* ST_TEST_NICE through this program's own --nice mode, which prints its priority. */
static int sh(const char *cmd) {
    int rc = system(cmd);
    return rc != -1 && WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}
#define NICE_OUT ST_BINARY_DIR "/test_fixture_nice.out"
static void check_nice(const char *self) {
    char cmd[1200], *out, want[128];
    int mine = getpriority(PRIO_PROCESS, 0); /* CTest runs this test un-niced (tests/CMakeLists.txt) */
    snprintf(cmd, sizeof cmd, "ST_TEST_NICE=19 %s --nice > " NICE_OUT " 2>&1", self);
    int rc = sh(cmd);
    out = tu_slurp(NICE_OUT);
    tu_check(rc == 0 && out && !strcmp(out, "nice 19\n"), "ST_TEST_NICE=19: the process runs at nice 19",
             "exit %d, printed '%s'", rc, out ? out : "(nothing)");
    free(out);
    /* Control: without the variable the child keeps this process's priority, which must differ
     * from 19 for the check above to have shown anything (run under nice 19, it cannot). */
    snprintf(cmd, sizeof cmd, "env -u ST_TEST_NICE %s --nice > " NICE_OUT " 2>&1", self);
    rc = sh(cmd);
    out = tu_slurp(NICE_OUT);
    snprintf(want, sizeof want, "nice %d\n", mine);
    if (mine == 19)
        tu_check(1, "control: without ST_TEST_NICE the child keeps the parent's priority",
                 "(this process already runs at nice 19: only the refusals below can show anything)");
    else
        tu_check(rc == 0 && out && !strcmp(out, want), "control: without ST_TEST_NICE the child keeps the parent's priority",
                 "exit %d, printed '%s', expected nice %d", rc, out ? out : "(nothing)", mine);
    free(out);
    const char *bad[2] = {"abc", "20"};
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd, "ST_TEST_NICE=%s %s --nice > " NICE_OUT " 2>&1", bad[i], self);
        rc = sh(cmd);
        out = tu_slurp(NICE_OUT);
        char what[96];
        snprintf(want, sizeof want, "ST_TEST_NICE: expected an integer 0..19, found '%s'\n", bad[i]);
        snprintf(what, sizeof what, "ST_TEST_NICE=%s refused in one line, exit 2", bad[i]);
        tu_check(rc == 2 && out && !strcmp(out, want), what, "exit %d, printed '%s'", rc, out ? out : "(nothing)");
        free(out);
    }
    remove(NICE_OUT);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--nice")) {
        printf("nice %d\n", getpriority(PRIO_PROCESS, 0));
        return 0;
    }
    check_nice(argv[0]);
    /* entries: config, inputs, targets, 3 x params, logits, loss, lm_probs_row0,
     * adamw_hparams, adamw_losses; params = 2 + 12 L + 2 */
    const int small[7] = {2, 4, 32, 67, 16, 3, 11};
    const int medium[7] = {3, 6, 48, 300, 32, 2, 32};
    check_fixture("gpt2_small.bin", small, 8 + 3 * (4 + 12 * 2));
    check_fixture("gpt2_medium.bin", medium, 8 + 3 * (4 + 12 * 3));
    return tu_exit();
}
