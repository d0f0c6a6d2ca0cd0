/* test_device_plan.c — `plan` and the trainer's accounting on a device (issue 25): the bytes the
 * trainer allocates on the device per category against `plan --json`, plan's GPU total with the
 * CUDA backend's private workspace, and the MFU peak measured through the device's own GEMM.
 *
 * Modes: `emu` (CTest): the test-only emulated device (train/devemu.h, ST_TRAIN_TEST_EMULATED_DEVICE=1);
 * `cuda` (make test-gpu): the GPU.
 *
 * Oracles:
 *   memory     `train --device DEV` (GPT-2 2 layers, B 2, T 32, one step, fp32 and bf16): its memory
 *              record's measured bytes of parameters, gradients, master weights, moments,
 *              activations and workspace equal `plan --hardware H100 --json`'s
 *              memory_bytes.by_category exactly (both from model/layout; the device's allocations
 *              counted by its alloc entry).
 *   backend    plan's H100 memory_bytes.backend is BACKEND_CUDA_PRIVATE_BYTES (model/backend.h, what
 *              the CUDA backend allocates), its total is the categories' sum plus it; cpu-zen4-2c has
 *              none (closed forms).
 *   peak       the start record's peak on the device: measured by its GEMM ("GEMM S^3 on <device
 *              name>", no FMA probe); a second start reads it from the cache (", cached"); each
 *              step's MFU is flops_per_token · tokens/s / that peak (rel 1e-9); emu: the device's
 *              GEMM is the CPU's, so its rate is within a factor 3 of the CPU run's GEMM peak;
 *              `--hardware H100 --precision bf16` makes it the preset's 989e12.
 * Negative controls: plan at micro-batch 4 must differ from the B 2 run's bytes; with no GEMM
 * measurement (ST_TRAIN_TEST_PEAK_FAULT=probe-nogemm) a device run has no peak and fails in one
 * line naming --peak-gflops (there is no CPU probe to fall back on). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "model/backend.h"
#include "runcmp.h"
#include "testutil.h"

#define DIR ST_BINARY_DIR "/test_device_plan"
#define MODEL "--layers 2 --heads 2 --channels 32 --max-seq-len 32 --seq-len 32 --threads 1"

static const char *g_bin, *g_dev, *g_env;

static const char *const CATS[6] = {"parameters",     "gradients",   "master_weights",
                                    "optimizer_moments", "activations", "workspace"};

static int train(const char *name, const char *dev, const char *env, const char *extra) {
    char cmd[4096], lg[1200];
    snprintf(lg, sizeof lg, "%s/%s.jsonl", DIR, name);
    remove(lg);
    snprintf(cmd, sizeof cmd, "%s ST_PEAK_CACHE=%s/peaks.json %s %s train --data %s/train.bin " MODEL
             " --micro-batch 2 --steps 2 --lr 1e-3 --warmup 1 --device %s --log %s %s",
             strcmp(dev, "cpu") ? g_env : "", DIR, env ? env : "", g_bin, DIR, dev, lg, extra ? extra : "");
    return rc_run(DIR, name, cmd, NULL);
}

static cJSON *plan_json(const char *hw, const char *extra) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s plan " MODEL " --vocab 97 --micro-batch %s --hardware %s --json", g_bin, extra, hw);
    return rc_command_json(cmd);
}

static double num_at(const cJSON *o, const char *a, const char *b) {
    return rc_num(cJSON_GetObjectItemCaseSensitive(o, a), b);
}

/* 1 if the run's measured bytes equal the plan's by_category in all six categories; detail says. */
static int bytes_match(const cJSON *measured, const cJSON *plan, char *detail, size_t cap) {
    const cJSON *by = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(plan, "memory_bytes"), "by_category");
    size_t o = 0;
    int ok = measured && by;
    detail[0] = '\0';
    for (int i = 0; i < 6 && measured && by; i++) {
        double m = rc_num(measured, CATS[i]), p = rc_num(by, CATS[i]);
        ok &= m == p;
        o += (size_t)snprintf(detail + o, o < cap ? cap - o : 0, "%s%s %.0f%s", i ? ", " : "", CATS[i], m,
                              m == p ? "" : " PLAN DIFFERS");
        if (m != p && o < cap) o += (size_t)snprintf(detail + o, cap - o, " %.0f", p);
    }
    if (!measured || !by) snprintf(detail, cap, "%s", !measured ? "no memory record" : "plan has no by_category");
    return ok;
}

static void memory(void) {
    static const char *const PREC[2] = {"fp32", "bf16"};
    for (int p = 0; p < 2; p++) {
        char name[64], extra[128], lbl[160], detail[1024];
        snprintf(name, sizeof name, "mem_%s", PREC[p]);
        snprintf(extra, sizeof extra, "--quiet --precision %s", PREC[p]);
        int rc = train(name, g_dev, NULL, extra);
        cJSON *all = rc_records(DIR, name);
        const cJSON *mem = rc_memory_record(all, "measured_by_rank");
        const cJSON *measured = cJSON_GetObjectItemCaseSensitive(mem, "measured");
        char pe[64];
        snprintf(pe, sizeof pe, "2 --precision %s", PREC[p]);
        cJSON *plan = plan_json("H100", pe);
        snprintf(lbl, sizeof lbl, "%s_device_bytes_equal_plan_%s", g_dev, PREC[p]);
        tu_check(rc == 0 && bytes_match(measured, plan, detail, sizeof detail), lbl, "exit %d; %s", rc, detail);
        if (p == 0) { /* control: the plan of another micro-batch */
            cJSON *wrong = plan_json("H100", "4 --precision fp32");
            int caught = !bytes_match(measured, wrong, detail, sizeof detail);
            tu_check(caught, "control_plan_of_micro_batch_4_differs", "%s", detail);
            cJSON_Delete(wrong);
        }
        cJSON_Delete(plan);
        cJSON_Delete(all);
    }
}

static void backend_bytes(void) {
    cJSON *gpu = plan_json("H100", "2"), *cpu = plan_json("cpu-zen4-2c", "2");
    static const char *const PARTS[7] = {"weights", "gradients", "master", "moments", "activations", "workspace", "comm"};
    double sum = 0, be = num_at(gpu, "memory_bytes", "backend"), tot = num_at(gpu, "memory_bytes", "total");
    for (int i = 0; i < 7; i++) sum += num_at(gpu, "memory_bytes", PARTS[i]);
    tu_check(be == (double)BACKEND_CUDA_PRIVATE_BYTES && tot == sum + be, "plan_gpu_total_holds_the_cuda_workspace",
             "H100: backend %.0f (BACKEND_CUDA_PRIVATE_BYTES %zu), total %.0f = categories %.0f + backend", be,
             (size_t)BACKEND_CUDA_PRIVATE_BYTES, tot, sum);
    double cb = num_at(cpu, "memory_bytes", "backend");
    tu_check(cb == 0 && num_at(cpu, "memory_bytes", "total") + be == tot, "plan_cpu_has_no_backend_bytes",
             "cpu-zen4-2c: backend %.0f, total %.0f (H100's minus 64 MiB)", cb, num_at(cpu, "memory_bytes", "total"));
    cJSON_Delete(gpu), cJSON_Delete(cpu);
}

/* The start record's field k (string), "" when absent. */
static const char *start_str(const cJSON *all, const char *k) {
    const cJSON *r;
    cJSON_ArrayForEach(r, all) {
        const char *ev = rc_event(r);
        if (ev && !strcmp(ev, "start")) {
            const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, k));
            return s ? s : "";
        }
    }
    return "";
}

/* The worst relative difference of each step's MFU from flops_per_token · tokens/s / peak. */
static double mfu_err(const char *name) {
    RcLog lg;
    if (!rc_read_log(DIR, name, &lg) || lg.n < 1) return INFINITY;
    double worst = 0;
    for (int s = 0; s < lg.n; s++) {
        double want = lg.flops_per_token * lg.tok_s[s] / lg.peak, d = fabs(lg.mfu[s] - want) / want;
        if (!(d <= worst)) worst = d;
    }
    return worst;
}

static void peak(void) {
    int emu = !strcmp(g_dev, "emu");
    char path[1200];
    snprintf(path, sizeof path, "%s/peaks.json", DIR);
    remove(path);
    int r1 = train("peak1", g_dev, NULL, "--quiet"), r2 = train("peak2", g_dev, NULL, "--quiet");
    cJSON *a1 = rc_records(DIR, "peak1"), *a2 = rc_records(DIR, "peak2");
    const char *k1 = start_str(a1, "peak_kind"), *k2 = start_str(a2, "peak_kind");
    RcLog l1;
    rc_read_log(DIR, "peak1", &l1);
    const char *name = emu ? "on emulated device" : "on ";
    int measured = strstr(k1, "fp32 GEMM") && strstr(k1, name) && !strstr(k1, "cached") &&
                   (emu || !strstr(k1, "emulated device")) && l1.peak > 0; /* not devemu's table */
    tu_check(r1 == 0 && measured, "peak_measured_by_the_device_gemm", "exit %d: peak %.4g FLOP/s (%s)", r1, l1.peak, k1);
    char *cache = tu_slurp(path);
    tu_check(r2 == 0 && strstr(k2, "cached") && cache && strstr(cache, "\"device\""), "peak_cached_by_device_name",
             "second start: %s; cache %s a device entry", k2, cache && strstr(cache, "\"device\"") ? "holds" : "lacks");
    free(cache);
    double me = mfu_err("peak1");
    tu_check(me <= 1e-9, "progress_mfu_uses_the_device_peak", "each step's MFU against fpt·tok/s/peak: %.3g (tol 1e-9)", me);
    if (emu) { /* the emulated device's GEMM is the CPU's */
        int rc = train("peak_cpu", "cpu", NULL, "--quiet");
        cJSON *ac = rc_records(DIR, "peak_cpu");
        RcLog lc;
        rc_read_log(DIR, "peak_cpu", &lc);
        double gc = 0;
        const cJSON *r;
        cJSON_ArrayForEach(r, ac) if (rc_event(r) && !strcmp(rc_event(r), "start")) gc = rc_num(r, "peak_gemm_flops");
        double ratio = l1.peak / gc;
        tu_check(rc == 0 && ratio > 1.0 / 3 && ratio < 3, "emu_peak_is_the_cpu_gemm_rate",
                 "emu %.4g FLOP/s, the CPU's GEMM %.4g: ratio %.3g (within 3x)", l1.peak, gc, ratio);
        cJSON_Delete(ac);
    }
    int r3 = train("peak_preset", g_dev, NULL, "--quiet --hardware H100 --precision bf16");
    RcLog l3;
    rc_read_log(DIR, "peak_preset", &l3);
    cJSON *a3 = rc_records(DIR, "peak_preset");
    tu_check(r3 == 0 && l3.peak == 989e12 && strstr(start_str(a3, "peak_kind"), "--hardware"), "peak_from_hardware_preset",
             "--hardware H100 --precision bf16: peak %.4g (%s)", l3.peak, start_str(a3, "peak_kind"));
    /* control: no GEMM measurement leaves a device without a peak */
    int r4 = train("peak_nogemm", g_dev, "ST_TRAIN_TEST_PEAK_FAULT=probe-nogemm", "--quiet");
    char out[1400];
    snprintf(out, sizeof out, "%s/peak_nogemm.out", DIR);
    char *o = tu_slurp(out);
    int lines = 0;
    for (char *p = o; p && *p; p++) lines += *p == '\n';
    tu_check(r4 != 0 && o && strstr(o, "--peak-gflops") && lines == 1, "control_no_device_gemm_no_peak",
             "exit %d: %.300s", r4, o ? o : "(no output)");
    free(o);
    cJSON_Delete(a1), cJSON_Delete(a2), cJSON_Delete(a3);
}

int main(int argc, char **argv) {
    if (argc < 3 || (strcmp(argv[2], "emu") && strcmp(argv[2], "cuda"))) {
        fprintf(stderr, "usage: test_device_plan SCALETRAIN emu|cuda\n");
        return 2;
    }
    g_bin = argv[1], g_dev = argv[2];
    g_env = !strcmp(g_dev, "emu") ? "ST_TRAIN_TEST_EMULATED_DEVICE=1" : "";
    rc_make_data(DIR);
    printf("test_device_plan: --device %s\n", g_dev);
    memory();
    backend_bytes();
    peak();
    return tu_exit();
}
