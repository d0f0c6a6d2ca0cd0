/* test_device_sample.c — generation with the KV cache on a device (issue 25): model/infer on a
 * device-resident model, `scaletrain sample --device DEV` and `train --device DEV --sample-every`.
 *
 * Modes: `emu` (CTest): DEV is the test-only emulated device (train/devemu.h: the CPU table whose
 * memory is PROT_NONE outside a table entry, so a host read of the cache or the weights is a
 * SIGSEGV), enabled by ST_TRAIN_TEST_EMULATED_DEVICE=1; `cuda` (make test-gpu): DEV is the GPU.
 *
 * Oracle: the CPU path on the same weights. A GPT-2 (2 layers, 4 heads) and a Llama with 4 query /
 * 2 KV heads, maxT 16, random weights large enough that the logits are far from uniform:
 *   logits     infer_feed over a 56-token history (the window restarts 3 times) on both; each
 *              step's logits: emu bit for bit (max |diff| 0), cuda ||dev - cpu|| / ||cpu|| <= 1e-5.
 *   cli        `sample` of the saved weights, 60 tokens (past maxT: window restarts), greedy and
 *              seeded (--temperature 0.9 --top-k 20 --seed 5): the device's stdout byte-identical
 *              to the CPU's (emu: by construction; cuda: the logit gaps of these weights are far
 *              above the 1e-5 error, so a differing byte means an error, which the logits check
 *              then locates).
 *   train      `train --sample-every 4` (GPT-2 tiny, 8 steps): the device run's sample records
 *              equal the CPU run's (emu: identical ids; cuda: the steps' losses are checked by
 *              test_device_train, here only that the records exist, as many as the CPU's).
 * Negative controls:
 *   the device's last-block MLP output weights x1.01 must fail the logits comparison;
 *   emu: a forked child reading the device KV cache from the host dies by SIGSEGV (the cache is
 *   in device memory); `sample` and `train --sample-every` with ST_PAR_TEST_DEVICE_BYPASS=1 (the
 *   logits copied out by memcpy instead of to_host) die by a signal;
 *   the CPU training run's samples with another --seed differ from the first's (the records
 *   comparison can see a difference). */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "ckpt/safetensors.h"
#include "core/rng.h"
#include "model/backend.h"
#include "model/gpt.h"
#include "model/infer.h"
#include "runcmp.h"
#include "sample_weights.h"
#include "testutil.h"
#include "train/devemu.h"

#define DIR ST_BINARY_DIR "/test_device_sample"
enum { MAXT = 16, HIST = 56, V = 257, GEN = 60 };

static const char *g_bin, *g_dev, *g_env;
static const Backend *g_be;


/* A model on backend be (device_resident unless host-addressable) holding the weights w. */
static int make_model(Gpt *g, const ModelConfig *mc, const Backend *be, const float *w) {
    GptOptions o = gpt_default_options();
    o.backend = be, o.device_resident = !be->host_addressable;
    Err e;
    if (gpt_init(g, mc, &o, NULL, &e) != ST_OK) {
        tu_check(0, "gpt_init", "%s: %s", be->name, e.msg);
        return 0;
    }
    be->from_host(g->w.params, w, g->w.layout.total * sizeof(float));
    return 1;
}

/* The worst per-step difference of the device's logits from the CPU's over the history: emu the
 * largest |diff|, cuda the largest relative error. */
static double logits_diff(Gpt *cpu, Gpt *dev, const int32_t *hist) {
    KvCache a, b;
    Err e;
    double worst = 0;
    if (kv_init(&a, cpu, &e) != ST_OK || kv_init(&b, dev, &e) != ST_OK) {
        tu_check(0, "kv_init", "%s", e.msg);
        return INFINITY;
    }
    for (size_t n = 5; n <= HIST; n++) {
        if (infer_feed(cpu, &a, hist, n, &e) != ST_OK || infer_feed(dev, &b, hist, n, &e) != ST_OK) {
            tu_check(0, "infer_feed", "%s", e.msg);
            worst = INFINITY;
            break;
        }
        double d = strcmp(g_dev, "emu") ? tu_rel_err_f(b.logits, a.logits, V) : tu_max_abs_diff_f(b.logits, a.logits, V);
        if (!(d <= worst)) worst = d;
    }
    kv_free(&a), kv_free(&b);
    return worst;
}

/* emu: a child process reading the device's KV cache from the host must die by SIGSEGV. */
static void host_read_dies(Gpt *dev, const char *tag) {
    KvCache kv;
    Err e;
    if (kv_init(&kv, dev, &e) != ST_OK) {
        tu_check(0, tag, "kv_init: %s", e.msg);
        return;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL);
        volatile float x = kv.k[0] + kv.v[0] + kv.dlogits[0];
        (void)x;
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    int segv = WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV;
    /* ASan may catch the SEGV itself and exit 1 with its report */
    tu_check(segv || (WIFEXITED(status) && WEXITSTATUS(status) != 0), tag,
             "a host read of the device KV cache: %s", segv ? "SIGSEGV (expected)" : WIFEXITED(status) ?
             (WEXITSTATUS(status) ? "exit non-zero (the sanitizer's SEGV report)" : "no fault") : "another signal");
    kv_free(&kv);
}

/* `sample DIR/tag --tokens GEN args` on dev, its output into DIR/tag_<dev><k>.txt (out); exit code. */
static int sample_cli(const char *tag, const char *dev, const char *env, const char *args, int k, char *out, size_t cap) {
    char cmd[2048];
    snprintf(out, cap, "%s/%s_%s%d.txt", DIR, tag, dev, k);
    snprintf(cmd, sizeof cmd, "%s %s %s sample %s/%s --tokens %d --device %s --tokenizer bytes %s > %s 2>&1",
             strcmp(dev, "cpu") ? g_env : "", env ? env : "", g_bin, DIR, tag, GEN, dev, args, out);
    int r = system(cmd);
    return WIFEXITED(r) ? WEXITSTATUS(r) : -1;
}

/* The size of a file in bytes (-1 if unreadable). */
static long file_size(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    return n;
}

static void one_model(const char *tag, ModelConfig mc) {
    Err e;
    if (model_config_validate(&mc, &e) != ST_OK) {
        tu_check(0, tag, "config: %s", e.msg);
        return;
    }
    Gpt cpu, dev;
    GptOptions o = gpt_default_options();
    if (gpt_init(&cpu, &mc, &o, NULL, &e) != ST_OK) {
        tu_check(0, tag, "gpt_init cpu: %s", e.msg);
        return;
    }
    sample_fill_weights(&cpu.w.layout, cpu.w.params, 11);
    if (!make_model(&dev, &mc, g_be, cpu.w.params)) return;
    int32_t hist[HIST];
    for (int i = 0; i < HIST; i++) hist[i] = (int32_t)(rng_uniform(5, 1, (uint64_t)i) * (V - 1));
    int emu = !strcmp(g_dev, "emu");
    char lbl[128];

    double d = logits_diff(&cpu, &dev, hist);
    snprintf(lbl, sizeof lbl, "%s_logits_%s_vs_cpu", tag, g_dev);
    if (emu) tu_check(d == 0, lbl, "%d steps, 3 window restarts: max |diff| %.3g (expected 0: bit for bit)", HIST - 4, d);
    else tu_check(d <= 1e-5, lbl, "%d steps, 3 window restarts: max relative error %.3g (tol 1e-5)", HIST - 4, d);

    /* control: the last block's MLP output weights x1.01 on the device */
    const float *fp = cpu.w.p.blocks[mc.n_layer - 1].fcprojw;
    size_t off = (size_t)(fp - cpu.w.params), nfp = (size_t)mc.ffn * mc.n_embd; /* (C, F) */
    float *pert = malloc(cpu.w.layout.total * sizeof(float));
    memcpy(pert, cpu.w.params, cpu.w.layout.total * sizeof(float));
    for (size_t i = 0; i < nfp; i++) pert[off + i] *= 1.01f;
    g_be->from_host(dev.w.params, pert, cpu.w.layout.total * sizeof(float));
    double dc = logits_diff(&cpu, &dev, hist);
    snprintf(lbl, sizeof lbl, "%s_control_weights_x1.01_fails", tag);
    tu_check(emu ? dc > 0 : dc > 1e-5, lbl, "the perturbed device model: %.3g (must fail the comparison)", dc);
    g_be->from_host(dev.w.params, cpu.w.params, cpu.w.layout.total * sizeof(float));
    free(pert);

    if (emu) {
        snprintf(lbl, sizeof lbl, "%s_control_host_read_of_device_cache_dies", tag);
        host_read_dies(&dev, lbl);
    }

    /* the command line: the CPU's weights saved, sampled on both */
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/%s", DIR, tag);
    if (st_save_hf(&cpu.w, dir, "bytes", &e) != ST_OK) {
        tu_check(0, tag, "st_save_hf: %s", e.msg);
    } else {
        const char *args[2] = {"--temperature 0", "--temperature 0.9 --top-k 20 --seed 5"};
        for (int k = 0; k < 2; k++) {
            char pa[1400], pb[1400];
            int ra = sample_cli(tag, "cpu", NULL, args[k], k, pa, sizeof pa);
            int rb = sample_cli(tag, g_dev, NULL, args[k], k, pb, sizeof pb);
            long na = file_size(pa), nb = file_size(pb);
            int same = tu_same_file(pa, pb);
            snprintf(lbl, sizeof lbl, "%s_cli_%s", tag, k ? "seeded" : "greedy");
            tu_check(ra == 0 && rb == 0 && same && na > GEN / 2, lbl,
                     "sample %s, %d tokens: cpu exit %d, %s exit %d, %ld vs %ld bytes, %s", args[k], GEN, ra, g_dev, rb,
                     na, nb, same ? "identical" : "DIFFERENT");
        }
        if (emu) {
            char pb[1400];
            int rc = sample_cli(tag, g_dev, "ST_PAR_TEST_DEVICE_BYPASS=1", args[0], 9, pb, sizeof pb);
            char *s = tu_slurp(pb);
            int segv = rc == -1 || rc == 139 || (s && strstr(s, "SEGV"));
            snprintf(lbl, sizeof lbl, "%s_control_cli_logits_without_to_host_die", tag);
            tu_check(rc != 0 && segv, lbl, "sample with the logits read by memcpy: exit %d, SIGSEGV %s (expected)", rc,
                     segv ? "yes" : "no");
            free(s);
        }
    }
    gpt_free(&dev);
    gpt_free(&cpu);
}

/* The ids of every "sample" record of run name's log as one string ("" when none). */
static char *sample_ids(const char *name, int *count) {
    cJSON *all = rc_records(DIR, name), *r;
    size_t cap = 1 << 16, len = 0;
    char *s = calloc(1, cap);
    *count = 0;
    cJSON_ArrayForEach(r, all) {
        const char *ev = rc_event(r);
        if (!ev || strcmp(ev, "sample")) continue;
        char *t = cJSON_PrintUnformatted(r);
        if (t && len + strlen(t) + 2 < cap) len += (size_t)snprintf(s + len, cap - len, "%s\n", t);
        free(t);
        (*count)++;
    }
    cJSON_Delete(all);
    return s;
}

static int train(const char *name, const char *dev, const char *env, const char *extra) {
    char cmd[4096], lg[1200];
    snprintf(lg, sizeof lg, "%s/%s.jsonl", DIR, name);
    remove(lg);
    snprintf(cmd, sizeof cmd,
             "%s %s %s train --data %s/train.bin --layers 2 --heads 2 --channels 32 --max-seq-len 32 --seq-len 32 "
             "--micro-batch 2 --steps 8 --lr 2e-3 --warmup 2 --threads 1 --quiet --sample-every 4 --device %s --log %s %s",
             strcmp(dev, "cpu") ? g_env : "", env ? env : "", g_bin, DIR, dev, lg, extra ? extra : "");
    return rc_run(DIR, name, cmd, NULL);
}

static void train_samples(void) {
    int emu = !strcmp(g_dev, "emu"), nc = 0, nd = 0, ns = 0;
    int rc = train("train_cpu", "cpu", NULL, NULL), rd = train("train_dev", g_dev, NULL, NULL);
    int rs = train("train_cpu_seed2", "cpu", NULL, "--seed 2");
    char *c = sample_ids("train_cpu", &nc), *d = sample_ids("train_dev", &nd), *s2 = sample_ids("train_cpu_seed2", &ns);
    int same = c && d && !strcmp(c, d);
    tu_check(rc == 0 && rd == 0 && nc == 2 && nd == 2 && (same || !emu), "train_sample_every_device_vs_cpu",
             "train --sample-every 4, 8 steps: exits %d/%d, %d/%d sample records, %s%s", rc, rd, nc, nd,
             same ? "identical" : "different", emu ? "" : " (cuda: not required to be identical)");
    tu_check(rs == 0 && ns == 2 && c && s2 && strcmp(c, s2) != 0, "train_control_other_seed_differs",
             "the CPU run with --seed 2: %d records, %s", ns, c && s2 && strcmp(c, s2) ? "different (expected)" : "SAME");
    free(c), free(d), free(s2);
    if (emu) {
        int rb = train("train_bypass", g_dev, "ST_PAR_TEST_DEVICE_BYPASS=1", NULL);
        char path[1400];
        snprintf(path, sizeof path, "%s/train_bypass.out", DIR);
        char *out = tu_slurp(path);
        int segv = rb == 139 || rb == -1 || (out && strstr(out, "SEGV"));
        tu_check(rb != 0 && segv, "train_control_sample_logits_without_to_host_die",
                 "train --sample-every with the logits read by memcpy: exit %d, SIGSEGV %s (expected)", rb,
                 segv ? "yes" : "no");
        free(out);
    }
}

int main(int argc, char **argv) {
    if (argc < 3 || (strcmp(argv[2], "emu") && strcmp(argv[2], "cuda"))) {
        fprintf(stderr, "usage: test_device_sample SCALETRAIN emu|cuda\n");
        return 2;
    }
    g_bin = argv[1], g_dev = argv[2];
    g_env = !strcmp(g_dev, "emu") ? "ST_TRAIN_TEST_EMULATED_DEVICE=1" : "";
    Err e;
    if (devemu_find(g_dev, 1, &g_be, &e) != ST_OK) {
        tu_check(0, "backend", "--device %s: %s", g_dev, e.msg);
        return tu_exit();
    }
    char cmd[512];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", DIR);
    tu_shell(cmd);
    rc_make_data(DIR);
    printf("test_device_sample: --device %s against --device cpu\n", g_dev);
    ModelConfig gpt2 = {2, 4, 32, V, 0, MAXT, 0.0f};
    one_model("gpt2", gpt2);
    ModelConfig llama = {2, 4, 32, V, 0, MAXT, 0.0f};
    llama.arch = ARCH_LLAMA, llama.n_kv_head = 2, llama.ffn = 48;
    one_model("llama_gqa", llama);
    train_samples();
    return tu_exit();
}
