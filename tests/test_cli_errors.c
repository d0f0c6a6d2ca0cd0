/* test_cli_errors.c — bad input to the scaletrain binary: each case must exit with code 2 and
 * print exactly one line on stderr that names the flag or file and what was expected/found.
 *
 * Oracle: the exit status and the stderr text of the real binary (built beside the tests). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/fileio.h"
#include "data/shard.h"
#include "testutil.h"

#define BIN ST_BINARY_DIR "/scaletrain"
#define TMP ST_BINARY_DIR "/test_cli_errors"

/* Runs `scaletrain args`, checks exit code 2, one stderr line containing `want`. */
static void expect_error(const char *name, const char *args, const char *want) {
    char cmd[4096], errpath[512];
    snprintf(errpath, sizeof errpath, TMP "/stderr.txt");
    snprintf(cmd, sizeof cmd, "%s %s >/dev/null 2>%s", BIN, args, errpath);
    int rc = system(cmd);
    int code = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    char *text = NULL;
    size_t len = 0;
    Err e;
    file_read_all(errpath, &text, &len, &e);
    int lines = 0;
    for (size_t i = 0; i < len; i++) lines += text[i] == '\n';
    int ok = code == 2 && lines == 1 && text && strstr(text, want) != NULL;
    if (text && len && text[len - 1] == '\n') text[len - 1] = '\0';
    tu_check(ok, name, "exit=%d lines=%d stderr=\"%s\"", code, lines, text ? text : "");
    free(text);
}

/* Runs `scaletrain args` and checks that it succeeds (exit 0): the controls beside the refusals. */
static void expect_ok(const char *name, const char *args) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s %s >/dev/null 2>&1", BIN, args);
    int rc = system(cmd);
    tu_check(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, name, "exit=%d", WIFEXITED(rc) ? WEXITSTATUS(rc) : -1);
}

#ifdef ST_HAVE_CUDA
/* 1 when a failed `train --device cuda` said only why the device could not open: one line naming
 * --device, nothing about the bundled corpus (which it was about to prepare). */
static int open_failure_only(const char *text) {
    int lines = 0;
    for (const char *p = text; *p; p++) lines += *p == '\n';
    return lines == 1 && strstr(text, "--device cuda: CUDA backend: ") && !strstr(text, "bundled");
}

/* A device that cannot open fails before any work: without --data, before the bundled corpus is
 * prepared into the cache (until 2026-11-29 it was prepared, then the model's allocation failed
 * with no flag named). ST_CUDA_DEVICE=99 makes the open fail with a GPU (an index out of range)
 * as without one ("no usable GPU"). Oracle: exit 1, the line, and an empty cache directory.
 * Control: the predicate refuses the old output (the bundled notice, then the allocation error). */
static void device_open_fails_first(void) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "rm -rf %s/devhome && mkdir -p %s/devhome", TMP, TMP);
    if (!tu_shell(cmd)) return;
    snprintf(cmd, sizeof cmd, "env -u XDG_CACHE_HOME HOME=%s/devhome ST_CUDA_DEVICE=99 %s train --device cuda --steps 1 "
             "--out %s/devout >/dev/null 2>%s/stderr.txt", TMP, BIN, TMP, TMP);
    int rc = system(cmd), code = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    char *text = tu_slurp(TMP "/stderr.txt");
    snprintf(cmd, sizeof cmd, "%s/devhome/.cache/scaletrain/tinyshakespeare-bytes", TMP);
    int prepared = access(cmd, F_OK) == 0;
    tu_check(code == 1 && text && open_failure_only(text) && !prepared, "--device cuda that cannot open fails first",
             "exit=%d bundled corpus prepared=%d stderr=\"%s\"", code, prepared, text ? text : "");
    free(text);
    const char *old = "data: no --data given, using the bundled Tiny Shakespeare (bytes) prepared in /x\n"
                      "scaletrain train: allocating the model (L=6 C=384 V=257 B=8 T=256) on cuda: CUDA backend: no "
                      "usable GPU (cudaGetDeviceCount: no CUDA-capable device is detected, 0 devices)\n";
    tu_check(!open_failure_only(old), "control: the old output fails the device-open check", "refused");
}
#endif

/* common (words "--flag value" or "--quiet") without flag and its value, in a static buffer (one
 * call per command line). */
static const char *without(const char *common, const char *flag) {
    static char out[2048];
    char buf[2048];
    snprintf(buf, sizeof buf, "%s", common);
    out[0] = '\0';
    for (char *save = NULL, *w = strtok_r(buf, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
        int has_value = strcmp(w, "--quiet") != 0;
        char *v = has_value ? strtok_r(NULL, " ", &save) : NULL;
        if (!strcmp(w, flag)) continue;
        size_t l = strlen(out);
        snprintf(out + l, sizeof out - l, "%s%s%s%s", l ? " " : "", w, v ? " " : "", v ? v : "");
    }
    return out;
}

typedef struct {
    const char *flags, *want;
} FlagCase;

/* `train` on the good shard with each case's flags: exit 2 and one line holding its want. LoRA
 * refuses --peak-gflops (no MFU): the --lora- cases run on common_lora, without it, so only the
 * flag under test is wrong. */
static void expect_train_errors(const char *what, const FlagCase *c, size_t n, const char *common,
                                const char *common_lora) {
    for (size_t i = 0; i < n; i++) {
        char args[2048], name[160];
        /* a flag of the case replaces common's (a flag given twice is refused) */
        const char *base = strstr(c[i].flags, "--lora-") ? common_lora : common;
        char words[512];
        snprintf(words, sizeof words, "%s", c[i].flags);
        for (char *save = NULL, *w = strtok_r(words, " ", &save); w; w = strtok_r(NULL, " ", &save))
            if (!strncmp(w, "--", 2)) base = without(base, w);
        snprintf(args, sizeof args, "train --data %s/good.bin %s %s", TMP, base, c[i].flags);
        snprintf(name, sizeof name, "%s: %s", what, c[i].flags);
        expect_error(name, args, c[i].want);
    }
}

static void write_raw(const char *path, const int32_t *hdr, const void *tok, size_t tok_bytes) {
    FILE *f = fopen(path, "wb");
    fwrite(hdr, 4, 256, f);
    if (tok_bytes) fwrite(tok, 1, tok_bytes, f);
    fclose(f);
}

int main(void) {
    Err e;
    file_mkdirs(TMP, &e);
    /* A good shard to vary from: 2000 byte tokens. */
    uint32_t tok[2000];
    for (int i = 0; i < 2000; i++) tok[i] = (uint32_t)(i * 7 % 256);
    ShardMeta meta = {0, 2000, 257};
    shard_write(TMP "/good.bin", tok, 2000, &meta, &e);
    /* Truncated: header says 2000 tokens, file holds 1500. */
    int32_t hdr[256] = {SHARD_MAGIC_U16, SHARD_VERSION_U16, 2000};
    uint16_t t16[2000];
    for (int i = 0; i < 2000; i++) t16[i] = (uint16_t)tok[i];
    write_raw(TMP "/truncated.bin", hdr, t16, 1500 * 2);
    /* Wrong magic. */
    int32_t bad[256] = {12345, 1, 2000};
    write_raw(TMP "/magic.bin", bad, t16, 2000 * 2);
    /* Token id above the vocabulary. */
    t16[777] = 300;
    write_raw(TMP "/bigtok.bin", hdr, t16, 2000 * 2);
    FILE *f = fopen(TMP "/bad.json", "w");
    fputs("{\"lr\": ", f);
    fclose(f);

    /* A flag is given once (a second one is refused): the cases that set --steps (or another of
     * common's flags) take common1, or common without that flag (without()). */
#define COMMON1 "--layers 1 --heads 2 --channels 32 --vocab 257 --max-seq-len 64 --seq-len 32 --micro-batch 2 " \
                "--peak-gflops 100 --quiet"
    const char *common1 = COMMON1, *common = COMMON1 " --steps 1";
    const char *common_lora = "--layers 1 --heads 2 --channels 32 --vocab 257 --max-seq-len 64 --seq-len 32 "
                              "--micro-batch 2 --steps 1 --quiet";
    char args[2048];
    snprintf(args, sizeof args, "train --data %s/missing.bin %s", TMP, common);
    expect_error("missing shard", args, "missing.bin: no such file");
    snprintf(args, sizeof args, "train --data %s/truncated.bin %s", TMP, common);
    expect_error("truncated shard", args, "truncated.bin");
    snprintf(args, sizeof args, "train --data %s/magic.bin %s", TMP, common);
    expect_error("wrong magic", args, "magic");
    snprintf(args, sizeof args, "train --data %s/bigtok.bin %s", TMP, common);
    expect_error("token id >= vocabulary", args, "token id 300 at position 777 is not below the vocabulary size 257");
#ifdef ST_HAVE_CUDA /* a CUDA build (ST_CUDA): the trainer runs on it in one process (test_device_train);
                     * what its device path lacks is refused before the GPU is touched, on any machine */
    snprintf(args, sizeof args, "train --data %s/good.bin %s --device cuda --lora-rank 2", TMP, common);
    expect_error("--device cuda with a host-only flag", args,
                 "--device cuda: --lora-rank (LoRA trains on the CPU) is not supported on a device backend yet");
    /* sample runs on the device (its KV cache there): no refusal, the weights argument is checked */
    expect_error("sample --device cuda reaches the weights", "sample /nonexistent --device cuda", "/nonexistent");
    device_open_fails_first();
#define ST_DEVICES "cpu, cuda"
#else
    snprintf(args, sizeof args, "train --data %s/good.bin %s --device cuda", TMP, common);
    expect_error("--device cuda in a build without CUDA", args, "--device: expected one of cpu, found cuda: this build has no CUDA backend");
#define ST_DEVICES "cpu"
#endif
    snprintf(args, sizeof args, "train --data %s/good.bin %s --device tpu", TMP, common);
    expect_error("unknown --device", args, "--device: expected one of " ST_DEVICES ", found 'tpu'");
    expect_error("eval --device tpu", "eval /nonexistent --data x.bin --device tpu",
                 "--device: expected one of " ST_DEVICES ", found 'tpu'");
    expect_error("eval --micro-batch 0 says what it found", "eval /nonexistent --data x.bin --micro-batch 0",
                 "--micro-batch: expected >= 1, found 0");
    expect_error("sample --device tpu", "sample /nonexistent --device tpu", "--device: expected one of " ST_DEVICES ", found 'tpu'");
    snprintf(args, sizeof args, "train --data %s/good.bin %s --seq-len 128", TMP, without(common, "--seq-len"));
    expect_error("T above max sequence length", args, "--seq-len: expected 1..64");
    snprintf(args, sizeof args, "train --data %s/good.bin %s --heads 5", TMP, without(common, "--heads"));
    expect_error("heads not dividing channels", args, "--heads 5 does not divide --channels 32");
    snprintf(args, sizeof args, "train --data %s/good.bin %s --frobnicate 3", TMP, common);
    expect_error("unknown flag", args, "unknown option --frobnicate");
    snprintf(args, sizeof args, "train --data %s/good.bin %s --lr abc", TMP, common);
    expect_error("non-numeric value", args, "--lr: expected a number, found 'abc'");
    /* the health monitor's two thresholds (docs/report.md): flags of their own, checked */
    snprintf(args, sizeof args, "train --data %s/good.bin %s --spike-min-sigma 0", TMP, common);
    expect_error("--spike-min-sigma 0", args, "--spike-min-sigma: expected > 0, found 0");
    snprintf(args, sizeof args, "train --data %s/good.bin %s --stall-min-delta -1", TMP, common);
    expect_error("--stall-min-delta -1", args, "--stall-min-delta: expected >= 0, found -1");
    snprintf(args, sizeof args, "train --data %s/good.bin %s --steps 1.5", TMP, common1);
    expect_error("non-integer value", args, "--steps: expected an integer, found '1.5'");
    snprintf(args, sizeof args, "train --data %s/good.bin %s --optimizer adagrad", TMP, common);
    expect_error("unknown optimizer", args, "--optimizer: expected adamw, adam, sgd, lion, muon, shampoo or sophia, found 'adagrad'");
    snprintf(args, sizeof args, "train --data %s/good.bin %s --config %s/bad.json", TMP, common, TMP);
    expect_error("bad config file", args, "bad.json");
    snprintf(args, sizeof args, "train --data %s/good.bin %s --vocab 200", TMP, without(common, "--vocab"));
    expect_error("vocabulary smaller than the data", args, "not below the vocabulary size 200");
    /* Out-of-range optimizer values are refused with their range; they used to be replaced by the
     * optimizer's default silently (weight_decay 0.1 in the log); -1 is the documented default. */
    static const FlagCase RANGE[] = {
        {"--weight-decay -0.5", "--weight-decay: expected a value >= 0, found -0.5"},
        {"--beta1 -0.5", "--beta1: expected a value in [0, 1), found -0.5"},
        {"--beta2 -7", "--beta2: expected a value in [0, 1), found -7"},
        {"--eps -3", "--eps: expected a value > 0, found -3"},
        {"--eps 0", "--eps: expected a value > 0, found 0"},
        {"--optimizer sgd --momentum -0.2", "--momentum: expected a value in [0, 1), found -0.2"},
        {"--optimizer sgd --momentum 1", "--momentum: expected a value in [0, 1), found 1"},
        {"--lora-rank -1", "--lora-rank: expected 0 (off) or a positive rank, found -1"},
        {"--lora-rank 2 --lora-alpha -1", "--lora-alpha: expected a positive number (not given: alpha = r), found -1"},
        {"--lora-rank 2 --lora-alpha 0", "--lora-alpha: expected a positive number (not given: alpha = r), found 0"},
    };
    snprintf(args, sizeof args, "train --data %s/good.bin %s --lora-rank 2 --lora-alpha 4", TMP, common_lora);
    expect_ok("control: the LoRA cases' command line trains with --lora-alpha 4", args);
    expect_train_errors("out of range", RANGE, sizeof RANGE / sizeof RANGE[0], common, common_lora);
    /* --schedule constant ignores min-lr: its default (6e-05) no longer refuses a smaller --lr; a decaying
     * schedule names the default at fault, not a --min-lr the user never gave. */
    snprintf(args, sizeof args, "train --data %s/good.bin %s --schedule constant --lr 1e-5", TMP, common);
    expect_ok("--schedule constant --lr 1e-5 trains (min-lr inert)", args);
    snprintf(args, sizeof args, "train --data %s/good.bin %s --schedule constant --lr 0", TMP, common);
    expect_ok("--schedule constant --lr 0 trains", args);
    snprintf(args, sizeof args, "train --data %s/good.bin %s --lr 1e-5", TMP, common);
    expect_error("cosine --lr below the default --min-lr", args,
                 "--lr 1e-05: expected a value >= the default --min-lr 6e-05 that --schedule cosine decays to");
    snprintf(args, sizeof args, "train --data %s/good.bin %s --lr 1e-5 --min-lr 2e-5", TMP, common);
    expect_error("--min-lr above --lr", args, "--min-lr: expected a value in [0, --lr=1e-05], found 2e-05");
    /* Values that were accepted and then acted as 0 or as the default: refused in one line. */
    static const FlagCase NONSENSE[] = {
        {"--tie-embeddings", "--tie-embeddings: expected a Llama (--arch llama, a llama preset or --init-from of a "
                             "Llama folder; a Llama option, and GPT-2's head always reads wte)"},
        {"--stop-after -1", "--stop-after: expected a step >= 0 (0: off), found -1"},
        {"--ckpt-dir " TMP "/never --ckpt-every -1", "--ckpt-every: expected >= 0 steps (0: at the end only), found -1"},
        {"--ckpt-dir " TMP "/never --keep-every -3", "--keep-every: expected >= 0 steps (0: none kept for it), found -3"},
        {"--ckpt-dir " TMP "/never --keep-last -1", "--keep-last: expected >= 0 checkpoints (0: all), found -1"},
        {"--batch-tokens -64", "--batch-tokens: expected a positive token count (0: unused), found -64"},
        {"--peak-gflops -5", "--peak-gflops: expected a positive GFLOP/s (0: measured), found -5"},
        {"--grad-clip -1", "--grad-clip: expected a norm >= 0 (0: off), found -1"},
        {"--lora-rank 2 --lora-targets ''", "--lora-targets: expected at least one target, found ''"},
        /* a trailing comma was taken, a leading one refused */
        {"--lora-rank 2 --lora-targets attn,", "--lora-targets: expected names from q,k,v,o,gate,up,down,attn,mlp,all "
                                               "separated by commas, found 'attn,'"},
        {"--lora-rank 2 --lora-targets ,attn", "--lora-targets: expected names from q,k,v,o,gate,up,down,attn,mlp,all "
                                               "separated by commas, found ',attn'"},
    };
    tu_shell("rm -rf " TMP "/never");
    expect_train_errors("refused", NONSENSE, sizeof NONSENSE / sizeof NONSENSE[0], common, common_lora);
    /* The audit of 2026-11-29: values that fell back to a default or ran out of memory naming
     * nothing, and flags that changed nothing in the run they were given to. */
    static const FlagCase AUDIT[] = {
        {"--dp -1", "--dp -1: expected a positive number of data-parallel ranks (0: the world size), found -1"},
        {"--tp -5", "--tp -5: expected a positive number of tensor-parallel ranks, found -5"},
        {"--pp -3", "--pp -3: expected a positive number of pipeline stages, found -3"},
        {"--interleave -2", "--interleave -2: expected a positive number of model chunks per pipeline rank, found -2"},
        /* 0 given: what an absent flag reads as, one rank (2026-11-29: it ran as one) */
        {"--tp 0", "--tp 0: expected a positive number of tensor-parallel ranks, found 0"},
        {"--pp 0", "--pp 0: expected a positive number of pipeline stages, found 0"},
        {"--interleave 0", "--interleave 0: expected a positive number of model chunks per pipeline rank, found 0"},
        {"--comm-timeout -1", "--comm-timeout -1: expected seconds > 0 (0: 600), found -1"},
        /* dp 1 (here one process; under mpirun a grid whose tp x pp is the world): nothing to shard */
        {"--zero 1", "--zero: would change nothing here; expected data parallelism (dp > 1"},
        {"--no-overlap", "--no-overlap: would change nothing here; expected data parallelism (dp > 1"},
        /* the health monitor's flags with nothing for them to act on */
        {"--spike-z 0 --gnorm-spike-z 0 --spike-policy skip", "--spike-policy: would change nothing here; expected a "
                                                              "spike detector on"},
        {"--spike-z 0 --gnorm-spike-z 0 --spike-window 8", "--spike-window: would change nothing here"},
        {"--spike-z 0 --gnorm-spike-z 0 --spike-min-history 5", "--spike-min-history: would change nothing here"},
        {"--spike-z 0 --gnorm-spike-z 0 --spike-max-actions 4", "--spike-max-actions: would change nothing here"},
        {"--spike-z 0 --gnorm-spike-z 0 --spike-abs 1 --spike-min-sigma 0.1",
         "--spike-min-sigma: would change nothing here; expected a z-score detector on"},
        {"--spike-policy log --spike-max-actions 9", "--spike-max-actions: would change nothing here; expected "
                                                     "--spike-policy skip or rollback"},
        {"--spike-policy rollback", "--spike-policy rollback: expected --ckpt-dir (the checkpoints it rolls back to), "
                                    "found none"},
        {"--stall-min-delta 0.1", "--stall-min-delta: would change nothing here; expected --stall-window N > 0"},
        {"--spike-z -1", "--spike-z: expected >= 0 (0 = off), found -1"},
        {"--gnorm-spike-abs -2", "--gnorm-spike-abs: expected >= 0 (0 = off), found -2"},
        {"--arch llama --ffn 64 --ffn-multiple 32", "--ffn-multiple 32: would change nothing here; expected the default "
                                                    "MLP width (no --ffn: 8C/3 rounded up to it), found F = 64 from --ffn"},
        {"--out ''", "--out: expected a path, found an empty string"},
        {"--log ''", "--log: expected a path, found an empty string"},
        {"--resume ''", "--resume: expected auto or a checkpoint directory, found an empty string"},
        {"--init-from ''", "--init-from: expected a path, found an empty string"},
        {"--model ''", "--model: expected a preset name, found an empty string"},
        {"--hardware ''", "--hardware: expected a plan preset or a profile FILE.json, found an empty string"},
        {"--param sp --mup-base-width 0", "--param sp: expected no --mup-base-width, --mup-input-alpha or "
                                          "--mup-output-alpha (they are muP's; use --param mup), found --mup-base-width 0"},
        {"--no-noise-scale", "--no-noise-scale: would change nothing here; expected a run that estimates the gradient "
                             "noise scale"},
        {"--ckpt-dir " TMP "/never --keep-last 0 --keep-every 2", "--keep-every: would change nothing here; expected "
                                                                  "--keep-last K > 0"},
        {"--grad-accum 2147483647", "--grad-accum: expected 1..65536 micro-batches per step, found 2147483647"},
        {"--lr -0", "--lr: expected a value >= 0, found -0"},
        /* past FLT_MAX a float flag became inf: --lr 1e39 trained with lr inf */
        {"--lr 1e39", "--lr: expected a number within single precision (|x| <= 3.4e38), found '1e39'"},
        {"--lr 0", "--lr 0: expected a value >= the default --min-lr 6e-05 that --schedule cosine decays to, found a "
                   "smaller one; give --min-lr 0 (or --schedule constant)"},
    };
    expect_train_errors("audit", AUDIT, sizeof AUDIT / sizeof AUDIT[0], common, common_lora);
    snprintf(args, sizeof args, "train --data %s/good.bin %s --steps 3 --steps 5", TMP, common1);
    expect_error("a flag given twice", args, "--steps: given twice (3, then 5)");
    snprintf(args, sizeof args, "train --data %s/good.bin %s --steps 1 --quiet", TMP, common1);
    expect_error("a value-less flag given twice", args, "--quiet: given twice");
    expect_error("plan: a flag given twice", "plan --model d6 --model d2", "--model: given twice (d6, then d2)");
    /* one too many: "expected 64 positional arguments" told report's user to give 64 logs */
    expect_error("a positional argument too many", "sample w1 w2", "unexpected argument 'w2' (expected at most 1 "
                                                                   "positional argument)");
    snprintf(args, sizeof args, "train --data %s/good.bin %s --steps 2147483648", TMP, common1);
    expect_error("--steps beyond a run", args, "--steps: expected 1..1000000000 optimizer steps, found 2147483648");
    snprintf(args, sizeof args, "train --data '' %s", common);
    expect_error("--data ''", args, "--data: expected a path or glob of token shards, found an empty string");
    /* controls: --no-noise-scale where the noise scale is estimated, --ffn-multiple on the default width */
    snprintf(args, sizeof args, "train --data %s/good.bin %s --grad-accum 2 --no-noise-scale", TMP, common);
    expect_ok("control: --grad-accum 2 --no-noise-scale trains", args);
    snprintf(args, sizeof args, "train --data %s/good.bin %s --arch llama --ffn-multiple 32", TMP, common);
    expect_ok("control: --arch llama --ffn-multiple 32 trains", args);
    /* What the LoRA loop does not implement is refused, the line starting with the flag (until
     * 2026-11-29 each began "--lora-rank: ", whatever the flag); the control above trains. */
    static const FlagCase LORA_NO[] = {
        {"--lora-rank 2 --keep-last 2 --ckpt-dir " TMP "/lora_ck", ": --keep-last/--keep-every: not supported with --lora-rank (LoRA) yet"},
        {"--lora-rank 2 --sample-every 5", ": --sample-every: not supported with --lora-rank"},
        {"--lora-rank 2 --precision bf16", ": --precision bf16/fp16 (LoRA runs an fp32 base): not supported with --lora-rank"},
        {"--lora-rank 2 --optimizer lion", ": --optimizer other than adamw or adam: not supported with --lora-rank"},
        {"--lora-rank 2 --log-layer-stats --log " TMP "/lora.jsonl", ": --log-layer-stats: not supported with --lora-rank"},
        {"--lora-rank 2 --ckpt-async --ckpt-dir " TMP "/lora_ck", ": --ckpt-async: not supported with --lora-rank"},
    };
    expect_train_errors("LoRA refuses", LORA_NO, sizeof LORA_NO / sizeof LORA_NO[0], common, common_lora);
    /* export --format llmc writes a file: a directory for -o was an exit 1 about "OUT/.tmp.PID" */
    expect_error("export --format llmc -o DIR/", "export /nonexistent --format llmc -o " TMP "/",
                 "-o " TMP "/: --format llmc writes one file; expected a file name (e.g. " TMP "/model.bin), found a directory name");
    expect_error("export --format llmc -o DIR", "export /nonexistent --format llmc -o " TMP,
                 "-o " TMP ": --format llmc writes one file; expected a file name (e.g. " TMP "/model.bin), found a directory");
    tu_check(access(TMP "/never", F_OK) != 0, "refusals leave no --ckpt-dir behind", "%s", TMP "/never");
    /* --override names a trajectory field; a typo was accepted and never reported */
    snprintf(args, sizeof args, "train --data %s/good.bin %s --steps 2 --ckpt-dir %s/ovck", TMP, common1, TMP);
    tu_shell("rm -rf " TMP "/ovck");
    expect_ok("control: a run with checkpoints for --override", args);
    snprintf(args, sizeof args, "train --data %s/good.bin %s --steps 3 --ckpt-dir %s/ovck --resume auto --override "
             "lr,bogus_field", TMP, common1, TMP);
    expect_error("--override with a field that does not exist", args,
                 "--override bogus_field: expected a trajectory field of the config (all, global_batch, ");
    snprintf(args, sizeof args, "train --data %s/good.bin %s --steps 3 --ckpt-dir %s/ovck --resume auto --override "
             "threads", TMP, common1, TMP);
    expect_error("--override with a free field", args, "--override threads: expected a trajectory field of the config");
    snprintf(args, sizeof args, "train --data %s/good.bin %s --steps 3 --ckpt-dir %s/ovck --resume auto --override "
             "lr,model.dropout --lr 1e-3", TMP, common1, TMP);
    expect_ok("control: --override lr,model.dropout resumes", args);
    /* Seeds are decimal (strtoull base 0 read 010 as 8 and took hex) and recorded exactly: above 2^53
     * as a decimal string, compared exactly on resume (a different large seed resumed silently). */
    snprintf(args, sizeof args, "train --data %s/good.bin %s --seed 0x10", TMP, common);
    expect_error("hexadecimal --seed", args, "--seed: expected a non-negative decimal integer below 2^64, found '0x10'");
    snprintf(args, sizeof args, "train --data %s/good.bin %s --seed ' 5'", TMP, common);
    expect_error("--seed with a space", args, "--seed: expected a non-negative decimal integer below 2^64, found ' 5'");
    struct { const char *flags, *logged; } SEEDS[] = {
        {"--seed 010 --steps 1", "\"seed\":10,"}, /* 8 before */
        {"--seed 08 --steps 1", "\"seed\":8,"},   /* refused before */
        {"--seed 18446744073709551000 --ckpt-dir " TMP "/seedck --steps 2", "\"seed\":\"18446744073709551000\","},
    };
    tu_shell("rm -rf " TMP "/seedck");
    for (int i = 0; i < 3; i++) {
        snprintf(args, sizeof args, "rm -f %s/seed.jsonl; %s train --data %s/good.bin %s %s --log %s/seed.jsonl "
                 ">/dev/null 2>&1", TMP, BIN, TMP, common1, SEEDS[i].flags, TMP);
        int src = system(args);
        char *log = tu_slurp(TMP "/seed.jsonl");
        tu_check(WIFEXITED(src) && WEXITSTATUS(src) == 0 && log && strstr(log, SEEDS[i].logged), SEEDS[i].flags,
                 "exit=%d, start record's config has %s: %s", WIFEXITED(src) ? WEXITSTATUS(src) : -1, SEEDS[i].logged,
                 log && strstr(log, SEEDS[i].logged) ? "yes" : "no");
        free(log);
    }
    snprintf(args, sizeof args, "train --data %s/good.bin %s --seed 18446744073709551001 --ckpt-dir %s/seedck --steps 3 "
             "--resume auto", TMP, common1, TMP);
    expect_error("resume with another seed above 2^53", args,
                 "config field seed (a trajectory field) changed: checkpoint has 18446744073709551000, this run has "
                 "18446744073709551001");
    snprintf(args, sizeof args, "train --data %s/good.bin %s --seed 18446744073709551000 --ckpt-dir %s/seedck "
             "--steps 3 --resume auto", TMP, common1, TMP);
    expect_ok("control: the same large seed resumes", args);
    /* --config: a JSON number above 2^53 is a rounded double: refused, the string form taken exactly */
    FILE *sf = fopen(TMP "/seednum.json", "w");
    if (sf) fputs("{\"seed\": 12345678901234567}", sf), fclose(sf);
    sf = fopen(TMP "/seedstr.json", "w");
    if (sf) fputs("{\"seed\": \"12345678901234567891\"}", sf), fclose(sf);
    snprintf(args, sizeof args, "train --data %s/good.bin %s --config %s/seednum.json", TMP, common, TMP);
    expect_error("--config seed above 2^53 as a number", args,
                 "option 'seed': expected an integer up to 2^53 as a JSON number, found 12345678901234568 (rounded by "
                 "JSON); write it as a string");
    snprintf(args, sizeof args, "rm -f %s/seed.jsonl; %s train --data %s/good.bin %s --config %s/seedstr.json --log "
             "%s/seed.jsonl >/dev/null 2>&1", TMP, BIN, TMP, common, TMP, TMP);
    int rrc = system(args);
    char *slog = tu_slurp(TMP "/seed.jsonl");
    tu_check(WIFEXITED(rrc) && WEXITSTATUS(rrc) == 0 && slog && strstr(slog, "\"seed\":\"12345678901234567891\""),
             "control: --config seed as a string is exact", "exit=%d", WIFEXITED(rrc) ? WEXITSTATUS(rrc) : -1);
    free(slog);
    /* --config: the whole file is the object (text after it was ignored), a flag is true/false or 1/0
     * exactly (0.5 meant false) */
    static const struct { const char *file, *text, *want; } CONFIGS[] = {
        {"trailing.json", "{\"steps\": 2} trailing", "trailing.json: expected a JSON object of options, found invalid JSON "
                                                     "(or text after the object)"},
        {"half.json", "{\"quiet\": 0.5}", "half.json: option 'quiet': expected true or false (or 1 or 0), found 0.5"},
    };
    for (int i = 0; i < 2; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", TMP, CONFIGS[i].file);
        FILE *cf = fopen(path, "w");
        if (cf) fputs(CONFIGS[i].text, cf), fclose(cf);
        snprintf(args, sizeof args, "train --data %s/good.bin %s --config %s", TMP, common, path);
        expect_error(CONFIGS[i].text, args, CONFIGS[i].want);
    }
    FILE *qf = fopen(TMP "/one.json", "w");
    if (qf) fputs("{\"quiet\": 1, \"steps\": 1}\n", qf), fclose(qf);
    snprintf(args, sizeof args, "train --data %s/good.bin %s --config %s/one.json", TMP, common, TMP);
    expect_ok("control: --config {\"quiet\": 1} with a final newline", args);
    /* a second --config overrode the first's keys silently (its control: the run just above) */
    snprintf(args, sizeof args, "train --data %s/good.bin %s --config %s/one.json --config=%s/one.json", TMP, common, TMP,
             TMP);
    expect_error("--config given twice", args, "--config: given twice (" TMP "/one.json, then " TMP "/one.json)");
    /* --ckpt-dir and --out are checked before training (they failed at the first save, or after the
     * last step); the check leaves nothing behind when the run is refused later. */
    snprintf(args, sizeof args, "train --data %s/good.bin %s --ckpt-dir /dev/null --ckpt-every 2", TMP, common);
    expect_error("--ckpt-dir /dev/null", args,
                 "--ckpt-dir /dev/null: expected a directory or a path one can be created at, found /dev/null, which is "
                 "not a directory");
    snprintf(args, sizeof args, "train --data %s/good.bin %s --out /proc/x", TMP, common);
    expect_error("--out /proc/x", args, "--out /proc/x: expected a directory this process can write in, found /proc not writable");
    tu_shell("rm -rf " TMP "/litter");
    snprintf(args, sizeof args, "train --data %s/good.bin %s --out %s/litter/a/b --ckpt-dir %s/litter/ck --eps 0", TMP,
             common, TMP, TMP);
    expect_error("--out and --ckpt-dir checked, the run refused later", args, "--eps: expected a value > 0, found 0");
    snprintf(args, sizeof args, "ls -a %s | grep -c scaletrain-probe >/dev/null", TMP);
    tu_check(access(TMP "/litter", F_OK) != 0 && system(args) != 0, "the writability check leaves no directory behind",
             "%s/litter %s", TMP, access(TMP "/litter", F_OK) != 0 ? "absent" : "created");
    /* An explicit --resume with nothing there: the error alone (stdout also said "starting from scratch") */
    snprintf(args, sizeof args, "train --data %s/good.bin %s --resume %s/nonexist", TMP, common_lora, TMP);
    expect_error("--resume at a missing path", args, "nonexist: expected a checkpoint, found none");
    /* A corrupt checkpoint: the checkpoint library's message (the path's), said once as --resume's */
    snprintf(args, sizeof args, "mkdir -p %s/badck/step_00000001 && echo '{' > %s/badck/step_00000001/state.json", TMP, TMP);
    if (tu_shell(args)) {
        snprintf(args, sizeof args, "train --data %s/good.bin %s --resume auto --ckpt-dir %s/badck", TMP, common_lora, TMP);
        expect_error("--resume auto over a corrupt checkpoint", args, ": --resume auto: no valid checkpoint in " TMP "/badck (1 found");
        snprintf(args, sizeof args, "train --data %s/good.bin %s --resume %s/badck/step_00000001", TMP, common_lora, TMP);
        expect_error("--resume at a corrupt checkpoint", args,
                     ": --resume " TMP "/badck/step_00000001: step_00000001/state.json");
        expect_error("eval of a corrupt checkpoint names its path, no flag", "eval " TMP "/badck --data " TMP "/good.bin",
                     "scaletrain eval: no valid checkpoint in " TMP "/badck (1 found");
    }
    snprintf(args, sizeof args, "%s train --data %s/good.bin --layers 1 --heads 2 --channels 32 --max-seq-len 64 "
             "--seq-len 32 --micro-batch 2 --steps 1 --resume %s/nonexist >%s/resume.out 2>/dev/null", BIN, TMP, TMP, TMP);
    if (system(args) == -1) tu_check(0, "run --resume", "system failed");
    char *rout = tu_slurp(TMP "/resume.out");
    tu_check(rout && !strstr(rout, "starting from scratch"), "--resume at a missing path: stdout does not say it starts",
             "stdout \"%.200s\"", rout ? rout : "(unread)");
    free(rout);
    /* muP's flags (issue 16). */
    snprintf(args, sizeof args, "train --data %s/good.bin %s --param mu", TMP, common);
    expect_error("unknown parameterization", args, "--param: expected sp or mup, found 'mu'");
    snprintf(args, sizeof args, "train --data %s/good.bin %s --param mup", TMP, common);
    expect_error("muP without a base width", args, "--mup-base-width: expected the base model's width");
    snprintf(args, sizeof args, "train --data %s/good.bin %s --mup-base-width 16", TMP, common);
    expect_error("muP flag without --param mup", args, "--param sp: expected no --mup-base-width");
    snprintf(args, sizeof args, "train --data %s/good.bin %s --param mup --mup-base-width 16 --mup-output-alpha -1",
             TMP, common);
    expect_error("negative muP multiplier", args, "--mup-output-alpha: expected a positive number, found -1");
    /* A muP model's weights: refused by llm.c's format and by a standard run's --init-from. */
    char mcmd[4096];
    snprintf(mcmd, sizeof mcmd, "%s train --data %s/good.bin %s --param mup --mup-base-width 16 --out %s/mupout "
             ">/dev/null 2>&1", BIN, TMP, common, TMP);
    tu_check(system(mcmd) == 0, "muP model trains", "%s", mcmd);
    expect_error("muP model to llm.c", "export " TMP "/mupout --format llmc -o " TMP "/mup.bin",
                 "llm.c's format has no place for muP's multipliers");
    /* a standard run says --param sp: without it the run takes the file's model, muP included */
    snprintf(args, sizeof args, "train --data %s/good.bin %s --param sp --init-from %s/mupout", TMP, common, TMP);
    expect_error("muP weights into a standard run", args, "scaletrain.mup: the file's model is mup (base width 16");
    expect_error("unknown command", "frobnicate", "unknown command 'frobnicate'");
    expect_error("sample without weights", "sample " TMP "/nothing-here", "nothing-here: expected a weights folder");
    /* ST_BF16_GEMM (matmul.h, mm_gemm_env): a bad value refused before any command runs; "packed"
     * reaches the trainer (its start record's build.gemm names the packed GEMMs) where the build has
     * the kernels. */
    setenv("ST_BF16_GEMM", "sometimes", 1);
    expect_error("bad ST_BF16_GEMM", "plan --model d6", "ST_BF16_GEMM: expected onednn or packed, found 'sometimes'");
    setenv("ST_BF16_GEMM", "packed", 1);
    char gcmd[4096];
    snprintf(gcmd, sizeof gcmd, "rm -f %s/gemm_env.jsonl; %s train --data %s/good.bin %s --precision bf16 --log %s/gemm_env.jsonl "
             ">/dev/null 2>%s/gemm_env.err", TMP, BIN, TMP, common, TMP, TMP);
    int grc = system(gcmd);
    unsetenv("ST_BF16_GEMM");
    int kernels = __builtin_cpu_supports("avx512bf16");
    char *gtext = tu_slurp(kernels ? TMP "/gemm_env.jsonl" : TMP "/gemm_env.err");
    int named = gtext && strstr(gtext, "bf16 layer GEMMs on matmul_pack.c") != NULL;
    int refused = gtext && strstr(gtext, "ST_BF16_GEMM=packed: this build has no AVX512_BF16 kernels") != NULL;
    tu_check(WIFEXITED(grc) && (kernels ? WEXITSTATUS(grc) == 0 && named : WEXITSTATUS(grc) == 2 && refused),
             "ST_BF16_GEMM=packed: the run says so (or, without the kernels, is refused in one line)",
             "exit=%d, avx512bf16 %d, named %d, refused %d", WIFEXITED(grc) ? WEXITSTATUS(grc) : -1, kernels, named,
             refused);
    free(gtext);
    /* ... and ST_BF16_GEMM=onednn turns it off (the default where the CPU has AVX512_BF16 and no AMX
     * is on: without this the variable could be ignored and the check above still pass). */
    setenv("ST_BF16_GEMM", "onednn", 1);
    grc = system(gcmd);
    unsetenv("ST_BF16_GEMM");
    gtext = tu_slurp(TMP "/gemm_env.jsonl");
    tu_check(WIFEXITED(grc) && WEXITSTATUS(grc) == 0 && gtext && strstr(gtext, "\"gemm\"") &&
                 !strstr(gtext, "bf16 layer GEMMs on matmul_pack.c"),
             "ST_BF16_GEMM=onednn: the run's GEMMs are oneDNN's alone", "exit=%d, start record %s",
             WIFEXITED(grc) ? WEXITSTATUS(grc) : -1, gtext ? "read" : "missing");
    free(gtext);
    /* a --separator with a line break (documents are cut at whole lines: it never matched) and a
     * --vocab-size beyond a model's 2^30 (it ran out of memory naming nothing) */
    expect_error("prepare --separator with a line break", "prepare --separator 'a\nb' --out " TMP "/sep_out " TMP
                 "/good.bin", "--separator: expected one line's text, found a line break in it");
    expect_error("tokenizer train --separator with a line break", "tokenizer train --vocab-size 300 --separator 'a\nb' "
                 "--out " TMP "/sep_tok " TMP "/good.bin", "--separator: expected one line's text, found a line break");
    expect_error("tokenizer train --vocab-size beyond 2^30", "tokenizer train --vocab-size 4294967295 --out " TMP
                 "/sep_tok " TMP "/good.bin", "--vocab-size: expected an integer in 257..2^30");
    /* A directory where a file is expected: named (it read as "out of memory reading 2^63 bytes");
     * a file from a pipe (/dev/stdin) is read to its end (it read as "read failed"). */
    expect_error("a directory as fit's CSV", "fit " TMP, "test_cli_errors: expected a file, found a directory");
    expect_error("a directory as plan's --config", "plan --config " TMP, "expected a file, found a directory");
    {
        FILE *pf = fopen(TMP "/plan_cfg.json", "wb");
        fputs("{\"model\": \"d2\", \"vocab\": 257, \"hardware\": \"cpu-zen4-2c\"}\n", pf);
        fclose(pf);
        char pcmd[2048];
        snprintf(pcmd, sizeof pcmd, "cat %s/plan_cfg.json | %s plan --config /dev/stdin --json > %s/plan_pipe.json 2>&1",
                 TMP, BIN, TMP);
        int prc = system(pcmd);
        char *pt = tu_slurp(TMP "/plan_pipe.json");
        tu_check(WIFEXITED(prc) && WEXITSTATUS(prc) == 0 && pt && strstr(pt, "\"vocab\":\t257"),
                 "plan --config from a pipe is read", "exit=%d: %.200s", WIFEXITED(prc) ? WEXITSTATUS(prc) : -1,
                 pt ? pt : "");
        free(pt);
    }
    /* A --log whose writes fail (a full disk: /dev/full): said at once on stderr, training goes on
     * and saves its weights, the run ends with exit 1 naming --log (it used to end with 0 and no
     * metrics). The control below (the same run with a writable log) exits 0. */
    {
        char lcmd[4096];
        snprintf(lcmd, sizeof lcmd, "rm -rf %s/logfull_out; %s train --data %s/good.bin %s --log /dev/full --out "
                 "%s/logfull_out >/dev/null 2>%s/logfull.err", TMP, BIN, TMP, common, TMP, TMP);
        int lrc = system(lcmd);
        char *ltext = tu_slurp(TMP "/logfull.err");
        int lines = 0;
        for (char *q = ltext; q && *q; q++) lines += *q == '\n';
        int saved = access(TMP "/logfull_out/model.safetensors", F_OK) == 0;
        tu_check(WIFEXITED(lrc) && WEXITSTATUS(lrc) == 1 && lines == 2 && ltext &&
                     strstr(ltext, "--log /dev/full: write failed (No space left on device)") &&
                     strstr(ltext, "the metrics log is incomplete") && saved,
                 "a --log that cannot be written: said, the weights saved, exit 1", "exit=%d, %d lines, saved %d: %s",
                 WIFEXITED(lrc) ? WEXITSTATUS(lrc) : -1, lines, saved, ltext ? ltext : "");
        free(ltext);
    }
    /* tokenizer decode: a bad word in the ids is quoted alone (a line break inside the quote split the
     * error over three lines), and -o FILE keeps FILE as it was on error (it was truncated first) */
    f = fopen(TMP "/bad.ids", "w");
    fputs("1 2 x\n3\n4", f);
    fclose(f);
    f = fopen(TMP "/keep.txt", "w");
    fputs("keep me\n", f);
    fclose(f);
    expect_error("decode quotes the bad word only", "tokenizer decode --tokenizer bytes " TMP "/bad.ids",
                 "expected decimal token ids, found \"x\" at byte 4");
    expect_error("decode -o FILE with a bad id", "tokenizer decode --tokenizer bytes " TMP "/bad.ids -o " TMP "/keep.txt",
                 "found \"x\" at byte 4");
    char *kept = tu_slurp(TMP "/keep.txt");
    int tmp_left = system("ls " TMP "/keep.txt.tmp.* >/dev/null 2>&1") == 0;
    tu_check(kept && !strcmp(kept, "keep me\n") && !tmp_left, "decode -o FILE: FILE unchanged after an error",
             "FILE holds \"%s\", temporary left %d", kept ? kept : "(gone)", tmp_left);
    free(kept);
    /* control, and the byte count of the summary line: the decoded text's (the oracle: the text
     * written here), not the id file's */
    const char *text = "Decoded text of a known length: 45 bytes.\nok\n";
    f = fopen(TMP "/text.txt", "w");
    fputs(text, f);
    fclose(f);
    char dcmd[4096];
    snprintf(dcmd, sizeof dcmd, "%s tokenizer encode --tokenizer bytes %s/text.txt -o %s/text.ids 2>/dev/null && "
             "%s tokenizer decode --tokenizer bytes %s/text.ids -o %s/keep.txt 2>%s/decode.err", BIN, TMP, TMP, BIN, TMP,
             TMP, TMP);
    int drc = system(dcmd);
    char *dec = tu_slurp(TMP "/keep.txt"), *derr = tu_slurp(TMP "/decode.err"), want[128];
    snprintf(want, sizeof want, "tokenizer decode: %zu bytes <-> %zu tokens", strlen(text), strlen(text));
    tu_check(drc == 0 && dec && !strcmp(dec, text) && derr && strstr(derr, want),
             "control: decode -o FILE replaces FILE and counts the text's bytes", "exit=%d, want \"%s\", stderr \"%s\"",
             WIFEXITED(drc) ? WEXITSTATUS(drc) : -1, want, derr ? derr : "");
    free(dec);
    free(derr);
    /* tokenizer train --holdout: a one-line corpus has no line start after the cut, so nothing was
     * held out and the flag silently did nothing */
    f = fopen(TMP "/oneline.txt", "w");
    fputs("a corpus of one line without a line break after the cut point", f);
    fclose(f);
    expect_error("tokenizer train --holdout with no line after the cut",
                 "tokenizer train --vocab-size 260 --holdout 0.5 --out " TMP "/tok " TMP "/oneline.txt",
                 "--holdout 0.5: expected text to hold out from the first line start after byte 31");
    /* ... while the default fraction, not given, trains on all of it and says so */
    snprintf(dcmd, sizeof dcmd, "%s tokenizer train --vocab-size 260 --out %s/tok1 %s/oneline.txt >%s/train1.out 2>&1",
             BIN, TMP, TMP, TMP);
    drc = system(dcmd);
    char *t1 = tu_slurp(TMP "/train1.out");
    tu_check(drc == 0 && t1 && strstr(t1, "nothing held out") && strstr(t1, "61 bytes trained on"),
             "tokenizer train's default --holdout with no line after the cut: said, all trained on", "exit=%d: %s",
             WIFEXITED(drc) ? WEXITSTATUS(drc) : -1, t1 ? t1 : "");
    free(t1);
    f = fopen(TMP "/lines.txt", "w");
    fputs("a corpus of three lines\nwith a line break after\nthe cut point\n", f);
    fclose(f);
    snprintf(dcmd, sizeof dcmd, "%s tokenizer train --vocab-size 260 --holdout 0.5 --out %s/tok %s/lines.txt "
             ">%s/train.out 2>&1", BIN, TMP, TMP, TMP);
    drc = system(dcmd);
    char *tout = tu_slurp(TMP "/train.out");
    tu_check(drc == 0 && tout && strstr(tout, "held-out 14 bytes (last 50%)"),
             "control: tokenizer train --holdout 0.5 on lines holds out the last line", "exit=%d: %s",
             WIFEXITED(drc) ? WEXITSTATUS(drc) : -1, tout ? tout : "");
    free(tout);
    /* The good shard trains (so the failures above are about the bad input, not the setup). */
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s train --data %s/good.bin %s >/dev/null 2>&1", BIN, TMP, common);
    int rc = system(cmd);
    tu_check(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "control: the good shard trains", "exit=%d",
             WIFEXITED(rc) ? WEXITSTATUS(rc) : -1);
    /* plan's ranges (2026-11-29): a thread count for the measurement outside the CPUs, a LoRA plan of
     * an optimizer LoRA does not run, a budget whose step count overflowed */
    expect_error("plan --measure-threads -1", "plan --measure-hardware " TMP "/hw.json --measure-threads -1",
                 "--measure-threads: expected 1..");
    expect_error("plan --lora-rank with sgd", "plan --model d6 --lora-rank 4 --optimizer sgd",
                 "--optimizer sgd: not supported with --lora-rank");
    snprintf(cmd, sizeof cmd, "%s plan --model d6 --tokens 1e30 >/dev/null 2>%s/tok.err", BIN, TMP);
    int trc = system(cmd);
    char *terr = tu_slurp(TMP "/tok.err");
    tu_check(WIFEXITED(trc) && WEXITSTATUS(trc) == 2 && terr && strstr(terr, "expected at most 1e15 steps"),
             "plan --tokens 1e30: refused (the step count overflowed to -2^63)", "exit %d: %s", WEXITSTATUS(trc), terr ? terr : "");
    free(terr);
    snprintf(cmd, sizeof cmd, "%s plan --model d6 --devices-per-node 0 >/dev/null 2>&1", BIN);
    int prc = system(cmd);
    tu_check(WIFEXITED(prc) && WEXITSTATUS(prc) == 0, "plan --devices-per-node 0 is the hardware's (its help says so)",
             "exit %d", WEXITSTATUS(prc));
    /* Output that cannot be written (a full disk: /dev/full) is an error, exit 1 and one line (eval
     * --json and sample exited 0 having written nothing); control: the same to /dev/null exits 0. */
    int full = 1;
    for (int i = 0; i < 2; i++) {
        const char *args = i ? "plan --layers 2 --heads 2 --channels 32" : "eval --help";
        snprintf(cmd, sizeof cmd, "%s %s >/dev/full 2>%s/full.err", BIN, args, TMP);
        int frc = system(cmd);
        char *ft = tu_slurp(TMP "/full.err");
        int lines = 0;
        for (const char *p = ft; p && *p; p++) lines += *p == '\n';
        if (!(WIFEXITED(frc) && WEXITSTATUS(frc) == 1 && lines == 1 && strstr(ft, "standard output: write failed")))
            printf("  %s > /dev/full: exit %d, %s\n", args, WIFEXITED(frc) ? WEXITSTATUS(frc) : -1, ft ? ft : "(no stderr)"), full = 0;
        free(ft);
    }
    snprintf(cmd, sizeof cmd, "%s eval --help >/dev/null 2>&1", BIN);
    int nrc = system(cmd);
    tu_check(full && WIFEXITED(nrc) && WEXITSTATUS(nrc) == 0, "output to a full device: exit 1, one line (control: /dev/null 0)",
             "eval --help and plan to /dev/full");
    return tu_exit();
}
