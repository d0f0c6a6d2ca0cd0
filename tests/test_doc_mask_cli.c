/* test_doc_mask_cli.c — `scaletrain train/eval --doc-mask` end to end (docs/doc-mask.md; issue 27).
 *
 * Data: a shard of documents of 2..29 tokens (vocabulary 64, EOT 63 closing each), so every packed
 * row of 32 holds several documents. A small GPT-2 (and a Llama with GQA) trains 6 steps.
 *
 * Oracles:
 *  - Parallel layouts: --doc-mask under mpirun at --tp 2 (with and without --sp), --pp 2 and dp 2 gives the losses of the
 *    one-process --doc-mask run (<= 1e-5 relative per step): the document positions reach every
 *    tensor-parallel rank and pipeline stage. Control: the one-process run without --doc-mask
 *    differs (> 1e-4, ten times the tolerance), so the flag is not ignored.
 *  - MFU's FLOPs: each step's model FLOPs per token, mfu · peak_job / tokens_per_s, is below the
 *    start record's unmasked count (span T) and equal across 1 process and dp 2 (the span summed
 *    over the replicas' rows is the global batch's).
 *  - Resume: stopped after step 3 and resumed with --doc-mask, steps 4..6 equal the uninterrupted
 *    run bit for bit; resuming without --doc-mask is refused with one line naming model.doc_mask.
 *  - eval: weights trained with --doc-mask evaluate masked by default (= eval --doc-mask, bit for
 *    bit) and differently with --no-doc-mask (> 1e-5 relative: 6 steps leave the model near uniform).
 *  - Sampling (byte tokenizer): --doc-mask records EOT 256; the trainer's --sample-every and `sample`
 *    run on the masked weights (a smoke check of the command paths; the KV cache's oracle is
 *    test_doc_mask's).
 *  - Refusals (one line, non-zero exit): --doc-mask with --no-pack; eval --doc-mask --no-doc-mask;
 *    plan --mean-doc-len without --doc-mask. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/fileio.h"
#include "core/rng.h"
#include "core/timer.h"
#include "data/shard.h"
#include "runcmp.h"
#include "testutil.h"

#define DIR ST_BINARY_DIR "/test_doc_mask_cli"
#define STEPS 6
static const char *g_mpi, *g_bin;

static void make_docs(void) {
    Err e;
    file_mkdirs(DIR, &e);
    enum { N = 20000, V = 64 };
    static uint32_t tok[N];
    for (int i = 0, left = 0; i < N; i++) {
        if (left == 0) left = 2 + (int)(rng_uniform(3, 1, (uint64_t)i) * 28); /* document length 2..29 */
        left--;
        tok[i] = left == 0 ? V - 1 : (uint32_t)((i * 31 + (i / 7) * 5) % (V - 1));
    }
    ShardMeta meta = {0, N, V, V, 0}; /* EOT 63 recorded (eot_plus1 64) */
    if (shard_write(DIR "/train.bin", tok, N, &meta, &e) != ST_OK) printf("%s\n", e.msg), exit(1);
}

#define COMMON                                                                                                  \
    "train --data " DIR "/train.bin --layers 2 --heads 4 --channels 32 --max-seq-len 32 --seq-len 32 "          \
    "--lr 2e-3 --min-lr 2e-4 --warmup 2 --threads 1 --peak-gflops 100 --quiet --val-every 0"

/* One run: np 0 = one process. Returns the exit code. */
static int train(const char *name, int np, const char *extra) {
    char cmd[4096], launch[512] = "", rm[1200];
    if (np > 0)
        snprintf(launch, sizeof launch, "timeout 150 %s --allow-run-as-root --oversubscribe -np %d -x OMP_NUM_THREADS=1 ",
                 g_mpi, np);
    snprintf(rm, sizeof rm, "rm -rf %s/%s_out %s/%s.jsonl", DIR, name, DIR, name);
    tu_shell(rm);
    snprintf(cmd, sizeof cmd, "%s%s " COMMON " --steps %d --log %s/%s.jsonl --out %s/%s_out %s", launch, g_bin, STEPS,
             DIR, name, DIR, name, extra);
    int rc = rc_run(DIR, name, cmd, NULL);
    if (rc != 0) tu_check(0, name, "exit %d, see %s/%s.out", rc, DIR, name);
    return rc;
}

static double losses_rel(const RcLog *a, const RcLog *b) {
    if (a->n != STEPS || b->n != STEPS) return INFINITY;
    return rc_max_rel(a->loss, b->loss, STEPS); /* step s at index s - 1 */
}

/* Step s's model FLOPs per token from its record: mfu · peak_job / tokens_per_s. */
static double step_fpt(const RcLog *l, int s) { return l->mfu[s - 1] * l->peak_job / l->tok_s[s - 1]; }

static void layouts(const char *arch, const char *shape) {
    char ex[512], name[64];
    RcLog ref, un, lg;
    snprintf(name, sizeof name, "%s_ref", arch);
    snprintf(ex, sizeof ex, "%s --micro-batch 2 --doc-mask", shape);
    if (train(name, 0, ex) || !rc_read_log(DIR, name, &ref)) return;
    snprintf(name, sizeof name, "%s_nomask", arch);
    snprintf(ex, sizeof ex, "%s --micro-batch 2", shape);
    if (train(name, 0, ex) == 0 && rc_read_log(DIR, name, &un)) {
        double d = losses_rel(&un, &ref);
        char what[128];
        snprintf(what, sizeof what, "%s: control: without --doc-mask the losses differ", arch);
        tu_check(d > 1e-4, what, "max rel %.3g (must be > 1e-4, 10x the layouts' tolerance)", d);
    }
    static const struct { const char *tag, *grid; } G[] = {
        {"tp2", "--micro-batch 2 --tp 2"}, {"tp2sp", "--micro-batch 2 --tp 2 --sp"}, {"pp2", "--micro-batch 2 --pp 2"},
        {"dp2", "--micro-batch 1 --dp 2"}};
    for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof name, "%s_%s", arch, G[i].tag);
        snprintf(ex, sizeof ex, "%s %s --doc-mask", shape, G[i].grid);
        if (train(name, 2, ex) || !rc_read_log(DIR, name, &lg)) continue;
        double d = losses_rel(&lg, &ref);
        char what[160];
        snprintf(what, sizeof what, "%s --doc-mask %s = one process (losses per step)", arch, G[i].tag);
        tu_check(d <= 1e-5, what, "max rel %.3g (tol 1e-5)", d);
        if (!strcmp(G[i].tag, "dp2")) {
            double worst = 0, below = 1;
            for (int s = 1; s <= STEPS; s++) {
                double a = step_fpt(&ref, s), b = step_fpt(&lg, s), r = fabs(a - b) / a;
                worst = r > worst ? r : worst;
                below = below && a < ref.flops_per_token && a > 0;
            }
            snprintf(what, sizeof what, "%s: MFU's FLOPs/token at the step's documents: 1 process = dp 2, below span T",
                     arch);
            tu_check(worst < 1e-9 && below, what, "max rel %.3g between layouts; step 1 %.6g vs unmasked %.6g", worst,
                     step_fpt(&ref, 1), ref.flops_per_token);
        }
    }
}

static void resume_and_eval(void) {
    const char *shape = "--micro-batch 2 --doc-mask --ckpt-dir " DIR "/ck";
    char ex[1024], rm[256];
    snprintf(rm, sizeof rm, "rm -rf %s/ck", DIR);
    tu_shell(rm);
    RcLog full, part;
    if (train("gpt2_ref", 0, "--micro-batch 2 --doc-mask") || !rc_read_log(DIR, "gpt2_ref", &full)) return;
    snprintf(ex, sizeof ex, "%s --stop-after 3", shape);
    if (train("ck_part", 0, ex)) return;
    /* without --doc-mask: refused */
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s " COMMON " --steps %d --micro-batch 2 --ckpt-dir %s/ck --resume auto", g_bin, STEPS,
             DIR);
    int rc = rc_run(DIR, "ck_refused", cmd, NULL);
    char *out = tu_slurp(DIR "/ck_refused.out");
    tu_check(rc != 0 && out && strstr(out, "model.doc_mask"), "resume without --doc-mask is refused naming model.doc_mask",
             "exit %d: %s", rc, out ? out : "(no output)");
    free(out);
    /* with it: continues, steps 4..6 as the uninterrupted run */
    snprintf(cmd, sizeof cmd, "%s " COMMON " --steps %d %s --resume auto --log %s/ck_part.jsonl", g_bin, STEPS, shape,
             DIR);
    rc = rc_run(DIR, "ck_resume", cmd, NULL);
    int same = rc == 0 && rc_read_log(DIR, "ck_part", &part) && part.n == STEPS;
    for (int s = 4; s <= STEPS && same; s++) same = part.loss[s - 1] == full.loss[s - 1];
    tu_check(same, "--doc-mask resumed after step 3 = uninterrupted (steps 4..6, bit for bit)", "exit %d, step 6 %.17g vs %.17g",
             rc, part.loss[STEPS - 1], full.loss[STEPS - 1]);

    /* eval: default = --doc-mask, --no-doc-mask differs */
    double l[3] = {NAN, NAN, NAN};
    static const char *const F[3] = {"", "--doc-mask", "--no-doc-mask"};
    for (int i = 0; i < 3; i++) {
        snprintf(cmd, sizeof cmd, "%s eval %s/gpt2_ref_out --data %s/train.bin --tokens 2048 --seq-len 32 --json --quiet %s",
                 g_bin, DIR, DIR, F[i]);
        cJSON *j = rc_command_json(cmd);
        l[i] = j ? rc_num(j, "loss") : NAN;
        cJSON_Delete(j);
    }
    /* --doc-mask on weights trained with it would change nothing: refused (no loss), as the test's
     * eval_json returns none; the default is the masked loss, --no-doc-mask another */
    snprintf(cmd, sizeof cmd, "%s eval %s/gpt2_ref_out --data %s/train.bin --tokens 2048 --seq-len 32 --quiet --doc-mask "
             ">/dev/null 2>%s/dm_refused.err", g_bin, DIR, DIR, DIR);
    int drc = system(cmd);
    char dpath[600];
    snprintf(dpath, sizeof dpath, "%s/dm_refused.err", DIR);
    char *dtext = tu_slurp(dpath);
    tu_check(isnan(l[1]) && WIFEXITED(drc) && WEXITSTATUS(drc) == 2 && dtext && strstr(dtext, "--doc-mask: would change nothing") &&
                 isfinite(l[0]) && fabs(l[2] - l[0]) > 1e-5 * l[0],
             "eval of --doc-mask weights: masked by default, --doc-mask refused as changing nothing, --no-doc-mask differs",
             "default %.9g, --no-doc-mask %.9g: %s", l[0], l[2], dtext ? dtext : "(no stderr)");
    free(dtext);
}

/* Sampling with the byte tokenizer (EOT 256): the trainer's --sample-every and `sample` run on --doc-mask
 * weights (their KV-cache restart after EOT is checked against the masked forward in test_doc_mask:
 * here the command paths, the recorded EOT and the tokenizer check). */
static void sampling(void) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s prepare --tokenizer bytes --separator \"\" --val-fraction 0 --seq-len 32 --out %s/bytes "
             "%s/data/tinyshakespeare/input.txt", g_bin, DIR, ST_SOURCE_DIR);
    int rc = rc_run(DIR, "bytes_prepare", cmd, NULL);
    if (rc != 0) {
        tu_check(0, "prepare bytes shards", "exit %d, see %s/bytes_prepare.out", rc, DIR);
        return;
    }
    snprintf(cmd, sizeof cmd, "%s train --data '%s/bytes/train_*.bin' --tokenizer bytes --layers 1 --heads 2 --channels 16 "
             "--max-seq-len 32 --seq-len 32 --micro-batch 2 --steps 2 --threads 1 --peak-gflops 100 --val-every 0 "
             "--sample-every 2 --sample-tokens 40 --doc-mask --log %s/bytes.jsonl --out %s/bytes_out",
             g_bin, DIR, DIR, DIR);
    rc = rc_run(DIR, "bytes_train", cmd, NULL);
    char *log = tu_slurp(DIR "/bytes.jsonl");
    tu_check(rc == 0 && log && strstr(log, "\"event\":\"sample\"") && strstr(log, "\"doc_eot\":256"),
             "--doc-mask with --tokenizer bytes: EOT 256 recorded, the trainer's sample logged", "exit %d", rc);
    free(log);
    snprintf(cmd, sizeof cmd, "%s sample %s/bytes_out --prompt 'ROMEO:' --tokens 40 --temperature 0", g_bin, DIR);
    rc = rc_run(DIR, "bytes_sample", cmd, NULL);
    char *out = tu_slurp(DIR "/bytes_sample.out");
    tu_check(rc == 0 && out && !strncmp(out, "ROMEO:", 6), "sample of --doc-mask weights runs (KV cache restarting at EOT)",
             "exit %d, output starts \"%.6s\"", rc, out ? out : "");
    free(out);
}

static void refusals(void) {
    static const struct { const char *name, *args, *want; } R[] = {
        {"ref_nopack", "train --data " DIR "/train.bin --layers 1 --heads 1 --channels 8 --seq-len 8 --max-seq-len 8 "
                       "--steps 1 --doc-mask --no-pack", "--doc-mask"},
        {"ref_eval", "eval " DIR "/gpt2_ref_out --data " DIR "/train.bin --doc-mask --no-doc-mask", "--doc-mask"},
        {"ref_plan", "plan --model d2 --mean-doc-len 64", "--mean-doc-len"},
    };
    for (size_t i = 0; i < sizeof R / sizeof R[0]; i++) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "%s %s", g_bin, R[i].args);
        int rc = rc_run(DIR, R[i].name, cmd, NULL);
        char path[512];
        snprintf(path, sizeof path, "%s/%s.out", DIR, R[i].name);
        char *out = tu_slurp(path);
        int lines = 0;
        for (char *p = out; p && *p; p++) lines += *p == '\n';
        char what[160];
        snprintf(what, sizeof what, "refused in one line: scaletrain %.60s", R[i].args);
        tu_check(rc != 0 && out && lines == 1 && strstr(out, R[i].want), what, "exit %d: %s", rc, out ? out : "");
        free(out);
    }
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: test_doc_mask_cli MPIEXEC SCALETRAIN\n");
        return 2;
    }
    g_mpi = argv[1], g_bin = argv[2];
    double t0 = timer_ms();
    make_docs();
    layouts("gpt2", "");
    layouts("llama", "--arch llama --kv-heads 2");
    resume_and_eval();
    sampling();
    refusals();
    printf("test_doc_mask_cli: %.1f s\n", (timer_ms() - t0) * 1e-3);
    return tu_exit();
}
