/* test_dp.c — data parallelism and ZeRO 0–3 end to end: `scaletrain train` under mpirun against
 * one process (issue 6).
 *
 * Usage: test_dp MPIEXEC SCALETRAIN [equiv|resume|fault]
 *
 * Oracle: one process running the same global batch (micro-batch 2 × accumulation 4 = 8 sequences
 * per step; dp=2 runs accumulation 2, dp=4 accumulation 1), 20 steps, fp32:
 *   equiv   for dp ∈ {2, 4} × ZeRO ∈ {0, 1, 2, 3}: every step's loss within 1e-5 relative, every
 *           final tensor within 1e-5 relative norm; every rank's allocated bytes of parameters,
 *           gradients and moments equal par_planned_bytes (the trainer's memory event); and whether
 *           dp=2 equals one process with the same two micro-batches bit for bit (reported).
 *   resume  4 ranks ZeRO-1 stop after step 10 → 2 ranks ZeRO-3 resume to 20; 1 process stops after
 *           10 → 2 ranks ZeRO-2 resume: losses and weights as the uninterrupted single process.
 *   fault   --dp 3 on 2 ranks refused naming 3 and 2; one rank with another --lr refused (config
 *           hash); a rank SIGKILLed mid-backward ends the job (non-zero, < 30 s, "signal 9"). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "ckpt/safetensors.h"
#include "core/fileio.h"
#include "core/timer.h"
#include "data/shard.h"
#include "model/layout.h"
#include "testutil.h"

#define DIR ST_BINARY_DIR "/test_dp"
#define STEPS 20
#define TOL 1e-5

static const char *g_mpi, *g_bin;

static void make_data(void) {
    Err e;
    file_mkdirs(DIR, &e);
    enum { N = 30000 };
    static uint32_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = (uint32_t)((i * 31 + (i / 7) * 5 + (i / 101) * 3) % 97);
    ShardMeta meta = {0, N, 97};
    if (shard_write(DIR "/train.bin", tok, N, &meta, &e) != ST_OK) printf("%s\n", e.msg), exit(1);
}

/* Runs a shell command with output to DIR/name.out; returns the exit code (-1 on a signal). */
static int run(const char *name, const char *cmd, double *secs) {
    char full[8192];
    snprintf(full, sizeof full, "%s > %s/%s.out 2>&1", cmd, DIR, name);
    double t0 = timer_ms();
    int rc = system(full);
    if (secs) *secs = (timer_ms() - t0) * 1e-3;
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

#define COMMON                                                                                                       \
    "train --data " DIR "/train.bin --layers 2 --heads 2 --channels 32 --max-seq-len 32 --seq-len 32 --micro-batch 2 " \
    "--lr 2e-3 --min-lr 2e-4 --warmup 5 --val-every 0 --threads 1 --peak-gflops 100 --quiet"

/* One training run: np 0 = one process without mpirun. */
static int train(const char *name, int np, int k, int zero, const char *extra, double *secs) {
    char cmd[4096], launch[1024] = "";
    if (np > 0)
        snprintf(launch, sizeof launch, "timeout 120 %s --allow-run-as-root --oversubscribe -np %d -x OMP_NUM_THREADS=1 ",
                 g_mpi, np);
    snprintf(cmd, sizeof cmd,
             "%s%s " COMMON " --steps %d --grad-accum %d --zero %d --log %s/%s.jsonl --out %s/%s_out %s", launch, g_bin,
             STEPS, k, zero, DIR, name, DIR, name, extra ? extra : "");
    char lg[1200];
    snprintf(lg, sizeof lg, "%s/%s.jsonl", DIR, name);
    remove(lg);
    return run(name, cmd, secs);
}

/* The "loss" of every step event in order (later records of a step replace earlier ones). */
static int losses(const char *name, double *out) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s.jsonl", DIR, name);
    char *t = tu_slurp(path);
    int n = 0;
    for (char *p = t ? strstr(t, "\"event\":\"step\"") : NULL; p; p = strstr(p + 1, "\"event\":\"step\"")) {
        char *s = strstr(p, "\"step\":"), *l = strstr(p, "\"loss\":");
        if (!s || !l) break;
        int step = atoi(s + 7);
        if (step >= 1 && step <= STEPS) out[step - 1] = strtod(l + 7, NULL), n = step > n ? step : n;
    }
    free(t);
    return n;
}

static int loss_text_equal(const char *a, const char *b) {
    char pa[1200], pb[1200];
    snprintf(pa, sizeof pa, "%s/%s.jsonl", DIR, a), snprintf(pb, sizeof pb, "%s/%s.jsonl", DIR, b);
    char *x = tu_slurp(pa), *y = tu_slurp(pb);
    int same = x && y;
    char *p = x, *q = y;
    while (same) {
        p = strstr(p, "\"loss\":"), q = strstr(q, "\"loss\":");
        if (!p || !q) {
            same = !p && !q;
            break;
        }
        size_t np = strcspn(p, ","), nq = strcspn(q, ",");
        same = np == nq && !memcmp(p, q, np);
        p += np, q += nq;
    }
    free(x), free(y);
    return same;
}

/* Final weights of a run in the one-process layout. */
static float *weights(const char *name, const ParamLayout *pl) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s_out/model.safetensors", DIR, name);
    char *buf;
    size_t len;
    Err e;
    if (file_read_all(path, &buf, &len, &e) != ST_OK) return NULL;
    StFile f = {0};
    float *w = calloc(pl->total, sizeof(float));
    if (st_parse(&f, path, buf, len, &e) != ST_OK || st_hf_read_model(&f, pl, w, &e) != ST_OK) free(w), w = NULL;
    st_file_free(&f);
    free(buf);
    return w;
}

/* Max over tensors of ||a - b|| / ||b||. The key third of each qkv bias is compared apart: its
 * gradient is zero in exact arithmetic (a key bias shifts every score of a query row alike, and
 * softmax ignores shifts), so in fp32 it is rounding noise (~1e-10) that Adam normalizes into
 * lr-sized steps whose signs follow the summation order: any change of order (threads, ranks)
 * makes it differ by ~100 % of its tiny norm (~1e-5). It is checked by max abs difference
 * (*key_abs), the Q and V thirds by relative norm like every other tensor. */
static double weights_rel(const ParamLayout *pl, const float *a, const float *b, double *key_abs) {
    double worst = 0;
    *key_abs = 0;
    for (int i = 0; i < pl->ntensors; i++) {
        const TensorInfo *t = &pl->tensors[i];
        double r;
        if (strstr(t->name, ".qkvb")) {
            size_t C = t->numel / 3;
            double q = tu_rel_err_f(a + t->offset, b + t->offset, C);
            double v = tu_rel_err_f(a + t->offset + 2 * C, b + t->offset + 2 * C, C);
            double k = tu_max_abs_diff_f(a + t->offset + C, b + t->offset + C, C);
            r = q > v ? q : v;
            *key_abs = k > *key_abs ? k : *key_abs;
        } else {
            r = tu_rel_err_f(a + t->offset, b + t->offset, t->numel);
        }
        worst = r > worst ? r : worst;
    }
    return worst;
}

static void compare_tol(const char *name, const char *ref, const ParamLayout *pl, const float *wref, int from, double tol,
                        double wtol, double ktol) {
    double a[STEPS] = {0}, b[STEPS] = {0};
    int na = losses(name, a), nb = losses(ref, b);
    double lw = 0;
    for (int i = from; i < STEPS; i++) {
        double r = fabs(a[i] - b[i]) / fabs(b[i]);
        lw = r > lw ? r : lw;
    }
    float *w = weights(name, pl);
    double kabs = INFINITY, ww = w && wref ? weights_rel(pl, w, wref, &kabs) : INFINITY;
    char what[256];
    snprintf(what, sizeof what, "%s vs %s: losses", name, ref);
    tu_check(na == STEPS && nb == STEPS && lw <= tol, what, "max rel %.2e over steps %d..%d (tol %g)", lw, from + 1,
             STEPS, tol);
    snprintf(what, sizeof what, "%s vs %s: weights", name, ref);
    tu_check(ww <= wtol && kabs <= ktol, what,
             "max per-tensor rel norm %.2e (tol %.2g); key bias (zero-gradient, noise) max abs diff %.1e (tol %.2g)", ww,
             wtol, kabs, ktol);
    free(w);
}

static void compare(const char *name, const char *ref, const ParamLayout *pl, const float *wref, int from) {
    compare_tol(name, ref, pl, wref, from, TOL, TOL, 1e-4);
}

static void check_memory(const char *name) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s.jsonl", DIR, name);
    char *t = tu_slurp(path);
    char *m = t ? strstr(t, "\"event\":\"memory\"") : NULL;
    int ok = m && strstr(m, "\"planned_equals_measured\":true");
    char detail[512] = "no memory event";
    if (m) {
        char *pl = strstr(m, "\"planned\":"), *end = pl ? strstr(pl, "}") : NULL;
        if (pl && end) snprintf(detail, sizeof detail, "%.*s", (int)(end - pl + 1), pl);
    }
    char what[128];
    snprintf(what, sizeof what, "%s: per-rank bytes == planned", name);
    tu_check(ok, what, "%s", detail);
    free(t);
}

/* The layout of the test model (L=2 C=32 V=97, one process's padding) for reading weights. */
static void test_layout(ParamLayout *pl) {
    ModelConfig mc = {2, 2, 32, 97, 0, 32, 0};
    Err e;
    model_config_validate(&mc, &e);
    layout_init(pl, &mc, 1);
}

/* A dp run that must succeed: prints its time; a failure is reported and returns 0. */
static int train_ok(const char *name, int np, int k, int zero, const char *extra) {
    double secs;
    int rc = train(name, np, k, zero, extra, &secs);
    printf("%s: %.1f s\n", name, secs);
    if (rc != 0) tu_check(0, name, "exit %d, see %s/%s.out", rc, DIR, name);
    return rc == 0;
}

static void equiv(void) {
    ParamLayout pl;
    test_layout(&pl);
    double secs;
    if (train("ref_k4", 0, 4, 0, NULL, &secs) != 0) tu_check(0, "reference run", "see %s/ref_k4.out", DIR);
    float *wref = weights("ref_k4", &pl);
    for (int dp = 2; dp <= 4; dp += 2)
        for (int z = 0; z <= 3; z++) {
            char name[64];
            snprintf(name, sizeof name, "dp%d_zero%d", dp, z);
            if (!train_ok(name, dp, 4 / dp, z, NULL)) continue;
            compare(name, "ref_k4", &pl, wref, 0);
            check_memory(name);
        }
    /* dp=2 against one process with the same two micro-batches (k=2): bit-exact? (reported) */
    train("ref_k2", 0, 2, 0, NULL, &secs);
    train("dp2_k1", 2, 1, 0, NULL, &secs);
    float *w1 = weights("ref_k2", &pl), *w2 = weights("dp2_k1", &pl);
    int same_w = w1 && w2 && !memcmp(w1, w2, pl.total * sizeof(float));
    int same_l = loss_text_equal("ref_k2", "dp2_k1");
    printf("dp=2 vs one process with the same two micro-batches: losses %s, weights %s\n",
           same_l ? "bit-identical" : "differ", same_w ? "bit-identical" : "differ");
    compare("dp2_k1", "ref_k2", &pl, w1, 0);
    free(w1), free(w2), free(wref);
    layout_free(&pl);
}

/* Trains `name` to step 10 on grid 1 (--stop-after), resumes to the end on grid 2 from the
 * checkpoint in DIR/<name>_ck, and joins the two logs; 1 if both parts exit 0. */
static int stop_and_resume(const char *name, int np1, int k1, int z1, int np2, int k2, int z2, const char *extra) {
    char cmd[1400], ex[1400], lg[1200];
    double secs;
    snprintf(cmd, sizeof cmd, "rm -rf %s/%s_ck", DIR, name);
    if (system(cmd) != 0) return 0;
    snprintf(ex, sizeof ex, "--ckpt-dir %s/%s_ck --stop-after 10 %s", DIR, name, extra ? extra : "");
    int rc1 = train(name, np1, k1, z1, ex, &secs);
    snprintf(lg, sizeof lg, "%s/%s.jsonl", DIR, name);
    char *first = tu_slurp(lg); /* train() truncates the log of the second part: keep the first */
    snprintf(ex, sizeof ex, "--ckpt-dir %s/%s_ck --resume auto %s", DIR, name, extra ? extra : "");
    int rc2 = train(name, np2, k2, z2, ex, &secs);
    char *second = tu_slurp(lg);
    FILE *f = fopen(lg, "w");
    if (f && first && second) fputs(first, f), fputs(second, f);
    if (f) fclose(f);
    free(first), free(second);
    tu_check(rc1 == 0 && rc2 == 0, name, "stop at 10 on %d rank(s) ZeRO %d, resume on %d ZeRO %d: exit %d, %d",
             np1 ? np1 : 1, z1, np2 ? np2 : 1, z2, rc1, rc2);
    return rc1 == 0 && rc2 == 0;
}

static void resume(void) {
    ParamLayout pl;
    test_layout(&pl);
    double secs;
    if (train("rref_k4", 0, 4, 0, NULL, &secs) != 0) tu_check(0, "reference run", "see %s/rref_k4.out", DIR);
    float *wref = weights("rref_k4", &pl);
    /* N=4 (ZeRO-1) -> M=2 (ZeRO-3); M=1 -> N=2 (ZeRO-2) */
    if (stop_and_resume("res42", 4, 1, 1, 2, 2, 3, NULL)) compare("res42", "rref_k4", &pl, wref, 0);
    if (stop_and_resume("res12", 0, 4, 0, 2, 2, 2, NULL)) compare("res12", "rref_k4", &pl, wref, 0);
    free(wref);
    layout_free(&pl);
}

static void fault(void) {
    double secs;
    char cmd[4096];
    /* Grid product != world. */
    int rc = train("grid", 2, 2, 0, "--dp 3", &secs);
    char *out = tu_slurp(DIR "/grid.out");
    tu_check(rc == 2 && out && strstr(out, "= 3 does not equal the world size 2"), "grid dp 3 on 2 ranks refused",
             "exit %d: %.200s", rc, out && strstr(out, "scaletrain train:") ? strstr(out, "scaletrain train:") : "");
    free(out);
    /* One rank with another config (MPMD: rank 1 gets --lr 3e-3). */
    snprintf(cmd, sizeof cmd,
             "timeout 60 %s --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1 -np 1 %s " COMMON
             " --steps 2 : -np 1 %s " COMMON " --steps 2 --lr 3e-3",
             g_mpi, g_bin, g_bin);
    rc = run("hash", cmd, &secs);
    out = tu_slurp(DIR "/hash.out");
    tu_check(rc == 2 && out && strstr(out, "config hash differs across ranks") && strstr(out, "rank 1 has"),
             "a rank with a different config refused", "exit %d in %.1f s", rc, secs);
    free(out);
    /* A rank killed mid-step. */
    snprintf(cmd, sizeof cmd, "ST_PAR_TEST_KILL=1:3 timeout 90 %s --allow-run-as-root --oversubscribe -np 2 "
             "-x OMP_NUM_THREADS=1 -x ST_PAR_TEST_KILL %s " COMMON " --steps 20 --comm-timeout 20", g_mpi, g_bin);
    rc = run("kill", cmd, &secs);
    out = tu_slurp(DIR "/kill.out");
    tu_check(rc != 0 && rc != 124 && secs < 30 && out && (strstr(out, "signal 9") || strstr(out, "Killed")),
             "rank 1 SIGKILLed at step 3: the job ends", "exit %d after %.1f s: %.160s", rc, secs,
             out && strstr(out, "mpirun noticed") ? strstr(out, "mpirun noticed") : "");
    free(out);
}

/* Mixed precision under data parallelism: bf16 at ZeRO 0-3 and fp16 (loss scaling) at ZeRO 1 and 3 on 2
 * ranks against one bf16/fp16 process with the same global batch. The fp32 masters differ only by
 * summation order, but a master that lands on the other side of a rounding boundary moves its
 * 2-byte working copy by 2^-8 (bf16) relative, which training then carries on. So the oracle is
 * the spread the precision itself shows: one process with another micro-batch split (4×2 vs 2×4,
 * also the same global batch, another summation order). Every dp run must stay within 3× that
 * spread (and the losses within 1e-4); per-rank memory equals the plan (master, working copies). */
static void mixed(void) {
    ParamLayout pl;
    test_layout(&pl);
    double secs;
    const char *prec[2] = {"--precision bf16", "--precision fp16 --loss-scale 1024"};
    const char *tag[2] = {"bf16", "fp16"};
    double bf16_wspread = 0, bf16_kspread = 0;
    for (int k = 0; k < 2; k++) {
        char ref[64], alt[64], extra[128];
        snprintf(ref, sizeof ref, "ref_k4_%s", tag[k]);
        snprintf(alt, sizeof alt, "ref_k2mb4_%s", tag[k]);
        snprintf(extra, sizeof extra, "%s --micro-batch 4", prec[k]);
        if (train(ref, 0, 4, 0, prec[k], &secs) != 0 || train(alt, 0, 2, 0, extra, &secs) != 0)
            tu_check(0, ref, "see %s/%s.out and %s.out", DIR, ref, alt);
        float *wref = weights(ref, &pl), *walt = weights(alt, &pl);
        double kspread = INFINITY, wspread = wref && walt ? weights_rel(&pl, walt, wref, &kspread) : INFINITY;
        printf("%s: one process, 4x2 vs 2x4 micro-batches: weights %.2e, key bias %.2e\n", tag[k], wspread, kspread);
        if (k == 0) bf16_wspread = wspread, bf16_kspread = kspread;
        for (int z = k; z <= 3; z += 1 + k) { /* bf16: 0, 1, 2, 3; fp16: 1, 3 */
            char name[64];
            snprintf(name, sizeof name, "dp2_zero%d_%s", z, tag[k]);
            if (!train_ok(name, 2, 2, z, prec[k])) continue;
            compare_tol(name, ref, &pl, wref, 0, 1e-4, 3 * wspread, 3 * kspread);
            check_memory(name);
        }
        free(wref), free(walt);
    }
    /* bf16, 2 ranks ZeRO 1: stop at 10 and resume equals the uninterrupted run bit for bit. */
    if (stop_and_resume("res_zero1_bf16", 2, 2, 1, 2, 2, 1, prec[0])) {
        float *a = weights("res_zero1_bf16", &pl), *b = weights("dp2_zero1_bf16", &pl);
        tu_check(a && b && !memcmp(a, b, pl.total * sizeof(float)) && loss_text_equal("res_zero1_bf16", "dp2_zero1_bf16"),
                 "bf16 dp 2 ZeRO 1: stop + resume == uninterrupted", "weights memcmp and every step's loss text equal");
        free(a), free(b);
    }
    /* bf16 checkpoint of 2 ranks at ZeRO 1 resumed at ZeRO 3: the same trajectory, within the spread. */
    if (stop_and_resume("res_z13_bf16", 2, 2, 1, 2, 2, 3, prec[0])) {
        float *wref = weights("ref_k4_bf16", &pl);
        compare_tol("res_z13_bf16", "ref_k4_bf16", &pl, wref, 0, 1e-4, 3 * bf16_wspread, 3 * bf16_kspread);
        free(wref);
    }
    layout_free(&pl);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: test_dp MPIEXEC SCALETRAIN [equiv|mixed|resume|fault]\n");
        return 2;
    }
    g_mpi = argv[1], g_bin = argv[2];
    const char *what = argc > 3 ? argv[3] : "all";
    make_data();
    if (!strcmp(what, "equiv") || !strcmp(what, "all")) equiv();
    if (!strcmp(what, "mixed") || !strcmp(what, "all")) mixed();
    if (!strcmp(what, "resume") || !strcmp(what, "all")) resume();
    if (!strcmp(what, "fault") || !strcmp(what, "all")) fault();
    return tu_exit();
}
