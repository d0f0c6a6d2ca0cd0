/* hwprobe.c — hardware profile measurement and loading (see hwprobe.h). */
#include "cli/hwprobe.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/fileio.h"
#include "core/peak.h"
#include "core/timer.h"
#include "model/kernels.h"
#include "model/matmul.h"
#include "train/machine_peak.h"

/* A rate's timed calls: at least HW_MIN_REPS after one untimed call (which creates the primitive
 * and faults the pages in), then more until HW_MIN_MS have passed, at most HW_MAX_REPS; the best
 * call is the figure (five calls until 2026-11-29). On a quiet 2-core Xeon VM this left one
 * thread's GEMM efficiency as it was, 0.58-0.78 between runs a few seconds apart: the slow phases
 * of the shared host last seconds, longer than any one rate's calls, so a profile measured in one
 * of them is low in every GEMM figure (`plan --measure-hardware` again replaces it; a cached
 * profile only rises). */
#define HW_MIN_REPS 8
#define HW_MAX_REPS 64
#define HW_MIN_MS 250.0

/* The best GFLOP/s of C(M,N) = A(M,K)·op(B) with the given transposes, fp32 or bf16. */
static double gemm_rate(int ta, int tb, int M, int N, int K, int bf16) {
    size_t na = (size_t)M * K, nb = (size_t)K * N, nc = (size_t)M * N;
    float *a = calloc(na, 4), *b = calloc(nb, 4), *c = calloc(nc, 4);
    uint16_t *ah = calloc(na, 2), *bh = calloc(nb, 2);
    double best = 0;
    if (a && b && c && ah && bh) {
        for (size_t i = 0; i < na; i++) a[i] = 0.001f * (float)(i % 97), ah[i] = 0x3c00;
        for (size_t i = 0; i < nb; i++) b[i] = 0.001f * (float)(i % 89), bh[i] = 0x3c00;
        double start = timer_ms();
        for (int rep = 0; rep <= HW_MAX_REPS && (rep <= HW_MIN_REPS || timer_ms() - start < HW_MIN_MS); rep++) {
            double t0 = timer_ms();
            if (bf16)
                mm_gemm_bf16(ta, tb, M, N, K, 1.0f, ah, ta ? M : K, bh, tb ? K : N, 0.0f, c, N);
            else
                mm_sgemm(ta, tb, M, N, K, 1.0f, a, ta ? M : K, b, tb ? K : N, 0.0f, c, N);
            double r = 2.0 * M * N * K / ((timer_ms() - t0) * 1e6);
            if (rep > 0 && r > best) best = r; /* first call creates the primitive */
        }
    }
    free(a), free(b), free(c), free(ah), free(bh);
    return best * 1e9;
}

/* Dropout factors per second on `threads` threads: the trainer's draw and apply (dropout_backward,
 * drop_factors' Philox blocks and one multiply per element) over 4 Mi elements, the best call
 * (HW_MIN_REPS ... as the GEMMs'). */
static double drop_rate(int threads) {
    const size_t n = (size_t)1 << 22;
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    double best = 0;
    if (a && b) {
        for (size_t i = 0; i < n; i++) a[i] = 1.0f;
        Dropout d = {0.1f, 1, 2, 0, 0, 0};
        double start = timer_ms();
        for (int rep = 0; rep <= HW_MAX_REPS && (rep <= HW_MIN_REPS || timer_ms() - start < HW_MIN_MS); rep++) {
            double t0 = timer_ms();
            dropout_backward(b, a, n, d, threads);
            double r = (double)n / ((timer_ms() - t0) * 1e-3);
            if (rep > 0 && r > best) best = r;
        }
    }
    free(a), free(b);
    return best;
}

Status hw_measure(PlanHardware *hw, int threads, double *others, Err *err) {
    if (others) *others = -1;
    Status st = plan_hardware_preset(hw, "cpu-zen4-2c", err);
    if (st != ST_OK) return st;
    MachineCpuMark m0 = machine_cpu_mark();
    mm_set_threads(threads);
    snprintf(hw->name, sizeof hw->name, "measured-%dt", threads);
    /* The fp32 peak as the trainer's MFU takes it: the best of the FMA probe and a 1024^3 GEMM
     * (train/machine_peak.h), measured now (no cache: this command is the measurement). */
    MachinePeakOptions po = machine_peak_default_options();
    po.threads = threads;
    MachinePeak mp;
    if ((st = machine_peak_resolve(&mp, &po, err)) != ST_OK) return st;
    hw->peak_fp32 = mp.best;
    /* The three GEMMs of a linear layer at a training shape (N = 2048 rows, C 384 → 4C). */
    const int N = 2048, C = 384, OC = 1536;
    double f = (gemm_rate(0, 1, N, OC, C, 0) + gemm_rate(0, 0, N, C, OC, 0) + gemm_rate(1, 0, OC, C, N, 0)) / 3;
    double h = (gemm_rate(0, 1, N, OC, C, 1) + gemm_rate(0, 0, N, C, OC, 1) + gemm_rate(1, 0, OC, C, N, 1)) / 3;
    hw->matmul_eff = f / hw->peak_fp32;
    if (hw->matmul_eff > 1) hw->matmul_eff = 1;
    /* The bf16 peak as the trainer's MFU takes it (the best of both probes and a bf16 GEMM), and the
     * fraction of it the bf16 GEMMs reach, their own: without AMX an Intel core's bf16 dot products
     * run at half its FMA rate, so there bf16 GEMMs reach 0.44 of a peak the fp32 FMA sets (a 2-core
     * Xeon, 2026-11-29). Until then the profile held one efficiency and a bf16 peak scaled by the
     * bf16/fp32 GEMM ratio, raised to at least 1: a bf16 step priced as an fp32 one there (1.53x
     * optimistic), and an MFU over another peak than the trainer's. */
    po.bf16 = 1;
    if ((st = machine_peak_resolve(&mp, &po, err)) != ST_OK) return st;
    hw->peak_bf16 = mp.best;
    hw->matmul_eff_bf16 = h > 0 ? fmin(1.0, h / hw->peak_bf16) : 0;
    hw->peak_fp16 = hw->peak_fp32; /* fp16 is emulated: its GEMMs run in fp32 */
    hw->mem_bw = peak_measure_bandwidth(threads, (size_t)512 << 20);
    hw->drop_rate = drop_rate(threads);
    MachineCpuMark m1 = machine_cpu_mark();
    if (others) *others = machine_others_share(&m0, &m1);
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    if (pages > 0 && psz > 0) hw->memory = (double)pages * (double)psz;
    return ST_OK;
}

/* Copy i's file `ext` ("json": its profile, "err": its stderr) in the copies' folder dir. */
static void copy_path(char *buf, size_t cap, const char *dir, int i, const char *ext) {
    snprintf(buf, cap, "%s/copy%d.%s", dir, i, ext);
}

/* The first line of file path (its error, when a copy failed), into buf. */
static void first_line(const char *path, char *buf, size_t cap) {
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f) return;
    if (fgets(buf, (int)cap, f)) buf[strcspn(buf, "\n")] = '\0';
    fclose(f);
}

Status hw_measure_copies(PlanHardware *hw, int threads, int copies, double *others, Err *err) {
    if (copies <= 1) return hw_measure(hw, threads, others, err);
    if (others) *others = -1;
    cpu_set_t allowed;
    int ids[CPU_SETSIZE], n = 0;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0)
        return err_set(err, ST_ERR_RUNTIME, "--measure-copies: cannot read this process's CPUs: %s", strerror(errno));
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &allowed)) ids[n++] = c;
    if ((long)copies * threads > n)
        return err_set(err, ST_ERR_INPUT, "--measure-copies %d x --measure-threads %d: expected at most the %d CPUs this "
                       "process may run on, found %ld", copies, threads, n, (long)copies * threads);
    char self[4096];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0) return err_set(err, ST_ERR_RUNTIME, "--measure-copies: cannot find this program (/proc/self/exe)");
    self[sl] = '\0';
    const char *tmp = getenv("TMPDIR");
    char dirbuf[4200];
    snprintf(dirbuf, sizeof dirbuf, "%s/scaletrain-measure-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dirbuf))
        return err_set(err, ST_ERR_RUNTIME, "--measure-copies: cannot make a folder for the copies' profiles (%s): %s",
                       dirbuf, strerror(errno));
    MachineCpuMark m0 = machine_cpu_mark();
    double kids0 = machine_rusage_s(1);
    pid_t pids[CPU_SETSIZE];
    char tstr[16];
    snprintf(tstr, sizeof tstr, "%d", threads);
    /* The copies' environment, built before fork: after fork in a process with threads only
     * async-signal-safe calls are allowed, which setenv (malloc) is not. ST_PEAK_CACHE=off: no
     * cache (the parent stores the mean). */
    extern char **environ;
    size_t ne = 0;
    while (environ[ne]) ne++;
    char **envp = malloc((ne + 2) * sizeof *envp);
    if (!envp) {
        rmdir(dirbuf);
        return err_set(err, ST_ERR_RUNTIME, "--measure-copies: out of memory");
    }
    size_t k = 0;
    for (size_t i = 0; i < ne; i++)
        if (strncmp(environ[i], "ST_PEAK_CACHE=", 14) != 0) envp[k++] = environ[i];
    envp[k++] = "ST_PEAK_CACHE=off", envp[k] = NULL;
    int started = 0;
    Status st = ST_OK;
    for (int i = 0; i < copies; i++) {
        char out[4300], log[4300];
        copy_path(out, sizeof out, dirbuf, i, "json"), copy_path(log, sizeof log, dirbuf, i, "err");
        pid_t pid = fork();
        if (pid == 0) {
            /* the copy's own CPUs, its own threads, no output */
            cpu_set_t set;
            CPU_ZERO(&set);
            for (int t = 0; t < threads; t++) CPU_SET(ids[i * threads + t], &set);
            sched_setaffinity(0, sizeof set, &set);
            int nul = open("/dev/null", O_WRONLY), ef = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (nul >= 0) dup2(nul, 1);
            if (ef >= 0) dup2(ef, 2);
            char *argv[] = {self, "plan", "--measure-hardware", out, "--measure-threads", tstr, NULL};
            execve(self, argv, envp);
            _exit(127);
        }
        if (pid < 0) {
            st = err_set(err, ST_ERR_RUNTIME, "--measure-copies: cannot start copy %d: %s", i, strerror(errno));
            break;
        }
        pids[started++] = pid;
    }
    free(envp);
    int failed = -1, wstatus = 0;
    for (int i = 0; i < started; i++) {
        int ws = 0;
        if (waitpid(pids[i], &ws, 0) < 0 || !WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
            if (failed < 0) failed = i, wstatus = ws;
    }
    MachineCpuMark m1 = machine_cpu_mark();
    m1.self_s += machine_rusage_s(1) - kids0; /* the copies are this measurement, not other work */
    PlanHardware sum = {0};
    double rate = 0, rate16 = 0, bw = 0, drop = 0, pk = 0, pk16 = 0;
    for (int i = 0; st == ST_OK && i < copies; i++) {
        char out[4300], log[4300], line[600];
        copy_path(out, sizeof out, dirbuf, i, "json"), copy_path(log, sizeof log, dirbuf, i, "err");
        if (failed == i) {
            first_line(log, line, sizeof line);
            st = err_set(err, ST_ERR_RUNTIME, "--measure-copies: copy %d of %d failed (wait status %d): %s", i, copies,
                         wstatus, line[0] ? line : "no message");
            break;
        }
        PlanHardware h;
        if ((st = hw_resolve(&h, out, err)) != ST_OK) break;
        if (i == 0) sum = h;
        pk += h.peak_fp32, pk16 += h.peak_bf16, rate += plan_matmul_rate(&h, PLAN_DTYPE_FP32);
        rate16 += plan_matmul_rate(&h, PLAN_DTYPE_BF16), bw += h.mem_bw, drop += h.drop_rate;
    }
    for (int i = 0; i < copies; i++) {
        char path[4300];
        copy_path(path, sizeof path, dirbuf, i, "json"), unlink(path);
        copy_path(path, sizeof path, dirbuf, i, "err"), unlink(path);
    }
    rmdir(dirbuf);
    if (st != ST_OK) return st;
    *hw = sum;
    snprintf(hw->name, sizeof hw->name, "measured-%dt-x%d", threads, copies);
    hw->peak_fp32 = pk / copies, hw->peak_bf16 = pk16 / copies, hw->peak_fp16 = hw->peak_fp32;
    hw->matmul_eff = fmin(1.0, rate / copies / hw->peak_fp32);
    hw->matmul_eff_bf16 = fmin(1.0, rate16 / copies / hw->peak_bf16);
    hw->mem_bw = bw / copies, hw->drop_rate = drop / copies;
    hw->memory = sum.memory / copies;
    if (others) *others = machine_others_share(&m0, &m1);
    return ST_OK;
}

/* A profile measured on a busy machine is low in every figure (the GEMMs and the memory stream
 * share the cores with other work: matmul efficiency 0.23 at load 6.9 where 0.85 is this machine's
 * quiet figure, 2026-11-26). Each figure is a best achievable rate, so a later, quieter measurement
 * can only raise it: the refreshed profile keeps the larger of old and new per figure. */
static void profile_raise(PlanHardware *hw, const PlanHardware *old) {
    double rate = fmax(hw->matmul_eff * hw->peak_fp32, old->matmul_eff * old->peak_fp32);
    double rate16 = fmax(plan_matmul_rate(hw, PLAN_DTYPE_BF16), plan_matmul_rate(old, PLAN_DTYPE_BF16));
    hw->peak_fp32 = fmax(hw->peak_fp32, old->peak_fp32);
    hw->peak_bf16 = fmax(hw->peak_bf16, old->peak_bf16);
    hw->peak_fp16 = fmax(hw->peak_fp16, old->peak_fp16);
    hw->matmul_eff = fmin(1.0, rate / hw->peak_fp32);
    hw->matmul_eff_bf16 = fmin(1.0, rate16 / hw->peak_bf16);
    hw->mem_bw = fmax(hw->mem_bw, old->mem_bw);
    hw->drop_rate = fmax(hw->drop_rate, old->drop_rate);
}

Status hw_this_machine(PlanHardware *hw, int threads, int copies, const char *cache_path, HwOrigin *o, Err *err) {
    *o = (HwOrigin){0, -1, -1, -1};
    double now = machine_loadavg(), age = -1;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    cJSON *j = machine_profile_load(cache_path, threads, copies, &o->was_load, &o->was_others, &age);
    PlanHardware old;
    int have_old = j && plan_hardware_from_json(&old, j, err) == ST_OK; /* an unreadable entry is measured over */
    cJSON_Delete(j);
    /* Measured while more work than cores ran, and the machine is quieter now; or while other work
     * took a share of the CPUs (or, written before that share was recorded, not known), long
     * enough ago: measure again. */
    double was = o->was_load;
    int stale = have_old && ((cpus > 0 && was > (double)cpus && now >= 0 && now < 0.75 * was) ||
                             ((o->was_others > MACHINE_OTHERS_DISTURBED || o->was_others < 0) && age >= HW_REMEASURE_AFTER_S));
    if (have_old && !stale) {
        *hw = old;
        o->others = o->was_others;
        return ST_OK;
    }
    Status st = hw_measure_copies(hw, threads, copies, &o->others, err);
    if (st != ST_OK) return st;
    if (have_old) profile_raise(hw, &old);
    o->measured = have_old ? 2 : 1;
    j = plan_hardware_to_json(hw);
    machine_profile_store(cache_path, threads, copies, j, o->others);
    cJSON_Delete(j);
    return ST_OK;
}

void hw_peak_cache_path(char *buf, size_t n) {
    const char *e = getenv("ST_PEAK_CACHE"), *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    buf[0] = '\0';
    if (e && *e) {
        if (strcmp(e, "off")) snprintf(buf, n, "%s", e);
    } else if (x && *x) snprintf(buf, n, "%s/scaletrain/peaks.json", x);
    else if (h && *h) snprintf(buf, n, "%s/.cache/scaletrain/peaks.json", h);
}

Status hw_resolve(PlanHardware *hw, const char *v, Err *err) {
    size_t n = strlen(v);
    if (!strchr(v, '/') && !(n > 5 && !strcmp(v + n - 5, ".json"))) return plan_hardware_preset(hw, v, err);
    char *text;
    size_t len;
    Status st = file_read_all(v, &text, &len, err);
    if (st != ST_OK) return err_prefix(err, "--hardware");
    cJSON *j = cJSON_Parse(text);
    free(text);
    if (!j) return err_set(err, ST_ERR_INPUT, "--hardware %s: expected a JSON hardware profile, found invalid JSON", v);
    st = plan_hardware_from_json(hw, j, err);
    cJSON_Delete(j);
    if (st != ST_OK) return err_prefix(err, "--hardware %s", v);
    return ST_OK;
}
