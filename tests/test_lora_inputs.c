/* test_lora_inputs.c — `train --lora-rank` on input it crashed on, ignored or resumed wrongly (the
 * fine-tuning audit of 2026-11-29).
 *
 * Oracle: the real binary's exit status and its one stderr line, the log's step records (which step
 * a run started at) and the checkpoints' bytes (a resumed run's final adapters against the
 * uninterrupted run's).
 *   rank      --lora-rank above min(in, out) of the narrowest targeted layer is refused, exit 2, one
 *             line naming the bound: GPT-2 c_attn (32 wide: 33 refused) and a Llama's k_proj (8 wide
 *             with one KV head of 8: 9 refused); 3000000 on GPT-2 refused at once (it was allocated
 *             until the kernel killed the run: exit 137). Control: the bound itself trains (exit 0).
 *             --lora-alpha 1e39 (inf once stored as a float: NaN losses, exit 0) refused, exit 2.
 *   inert     --pp-print-schedule with LoRA (it printed nothing, exit 0) refused naming it.
 *   auto      --resume auto of a --ckpt-dir holding steps 1..6 of a 9-step run: with the newest's
 *             state.json not JSON, and with it missing, the run resumes from step 5 (it was refused,
 *             `latest` naming a non-checkpoint), says it skipped step 6, and its step-9 adapters equal
 *             the uninterrupted run's byte for byte; with `latest` deleted it resumes from step 6, the
 *             newest (it started from step 0), its log's first step 7. A run without --resume into a
 *             copy is refused naming its checkpoints (it started over them). Control: a fresh run into
 *             a new folder logs from step 1, and with every checkpoint damaged the resume is refused.
 *   explicit  --resume PATH that is not a LoRA checkpoint says what it is (a state.json that is not
 *             JSON, an ordinary checkpoint, a directory of checkpoints) in one line, exit 2; control:
 *             an intact step directory resumes.
 *   out       --out naming a LoRA or an ordinary checkpoint folder is refused (the adapter files replaced
 *             the checkpoint's: it no longer verified). Control: that checkpoint still resumes; --out
 *             to a new folder runs.
 *   init-from --init-from of a missing file names the flag once (it said "--init-from: --init-from"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "testutil.h"

#define BIN ST_BINARY_DIR "/scaletrain"
#define DIR ST_BINARY_DIR "/test_lora_inputs"
#define T "--data sh/train_000000.bin --tokenizer bytes --seq-len 16 --micro-batch 2 --threads 1 --quiet"
#define LORA0 T " --init-from base --lr 1e-3 --warmup 2 --lora-alpha 8 --lora-dropout 0.1" /* a --lora-rank to add */
#define LORA LORA0 " --lora-rank 4"

/* Runs `scaletrain ARGS` in DIR (testutil's tu_run_in). */
static int st(const char *args, char *err, size_t cap, int *lines) { return tu_run_in(DIR, BIN, args, err, cap, lines); }

/* Refused with exit 2, one line containing want; or run with exit 0. */
static void refused(const char *name, const char *args, const char *want) { tu_refused_in(DIR, BIN, name, args, want); }
static void ran(const char *name, const char *args) { tu_ran_in(DIR, BIN, name, args); }

/* The first step record's step of log DIR/name (-1: none, or the log unreadable). */
static long first_step(const char *name) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", DIR, name);
    TuLogRun runs[2];
    int n = tu_log_runs(p, runs, 2);
    return n == 1 && runs[0].nsteps > 0 ? runs[0].first_step : -1;
}

static void rank(void) {
    refused("--lora-rank 33 on a 32-wide GPT-2 is refused", "train " LORA0 " --steps 2 --lora-rank 33",
            "--lora-rank: expected 1..32 (min(in, out) = min(32, 96) of the targeted layer attn.c_attn");
    refused("--lora-rank 3000000 is refused at once, not allocated", "train " LORA0 " --steps 2 --lora-rank 3000000",
            "--lora-rank: expected 1..32");
    ran("control: --lora-rank 32 (the bound) trains", "train " LORA0 " --steps 2 --lora-rank 32");
    /* a float alpha parsed past FLT_MAX became inf: every loss NaN, exit 0 */
    refused("--lora-alpha 1e39 (inf as a float) is refused", "train " T " --init-from base --steps 2 --lora-rank 4 "
            "--lora-alpha 1e39", "--lora-alpha: expected a number within single precision (|x| <= 3.4e38), found '1e39'");
    const char *llama = "train " T " --arch llama --layers 2 --heads 4 --kv-heads 1 --channels 32 --vocab 257 "
                        "--max-seq-len 16 --steps 2 --lora-targets q,k";
    char a[1024];
    snprintf(a, sizeof a, "%s --lora-rank 9", llama);
    refused("--lora-rank 9 on a Llama whose k_proj is 8 wide is refused naming it", a,
            "expected 1..8 (min(in, out) = min(32, 8) of the targeted layer k_proj");
    snprintf(a, sizeof a, "%s --lora-rank 8", llama);
    ran("control: --lora-rank 8 on that Llama trains", a);
}

static void inert(void) {
    refused("--pp-print-schedule with LoRA is refused", "train " LORA " --steps 2 --pp-print-schedule",
            "--pp-print-schedule: not supported with --lora-rank");
}

/* A copy of the checkpoints of the run stopped at 6 as DIR/dst, with `how` done to it (run in DIR/dst). */
static int copy_ck(const char *dst, const char *how) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cd %s && rm -rf %s && cp -r ck %s && cd %s && %s", DIR, dst, dst, dst, how);
    return tu_shell(cmd);
}

static void resume_auto(void) {
    ran("the uninterrupted run, 9 steps", "train " LORA " --steps 9 --ckpt-dir cku");
    ran("a run checkpointed at every step, stopped at 6", "train " LORA " --steps 9 --ckpt-dir ck --ckpt-every 1 "
        "--stop-after 6");
    static const struct { const char *name, *how; } D[] = {
        {"the newest state.json not JSON", "echo '{' > step_00000006/state.json"},
        {"the newest state.json missing", "rm step_00000006/state.json"},
    };
    for (int i = 0; i < 2; i++) {
        char dst[32], log[64], a[1024], name[256], err[2048];
        snprintf(dst, sizeof dst, "ckd%d", i);
        snprintf(log, sizeof log, "%s.jsonl", dst);
        if (!copy_ck(dst, D[i].how)) continue;
        snprintf(a, sizeof a, "train " LORA " --steps 9 --ckpt-dir %s --resume auto --log %s", dst, log);
        int rc = st(a, err, sizeof err, NULL);
        long f = first_step(log);
        snprintf(name, sizeof name, "%s: --resume auto falls back to step 5, saying it skipped step 6", D[i].name);
        tu_check(rc == 0 && strstr(err, "skipped") && strstr(err, "step_00000006") && f == 6, name,
                 "exit %d, first step %ld: %s", rc, f, err);
        char p1[512], p2[512];
        snprintf(p1, sizeof p1, "%s/%s/step_00000009/adapter_model.safetensors", DIR, dst);
        snprintf(p2, sizeof p2, "%s/cku/step_00000009/adapter_model.safetensors", DIR);
        snprintf(name, sizeof name, "%s: the resumed step-9 adapters equal the uninterrupted run's", D[i].name);
        tu_check(tu_same_file(p1, p2), name, "%s against %s", p1, p2);
    }
    if (copy_ck("ckl", "rm latest")) {
        ran("without `latest`, --resume auto", "train " LORA " --steps 9 --ckpt-dir ckl --resume auto --log ckl.jsonl");
        tu_check(first_step("ckl.jsonl") == 7, "without `latest` it resumes from step 6, the newest", "first step %ld",
                 first_step("ckl.jsonl"));
        tu_check(tu_same_file(DIR "/ckl/step_00000009/adapter_model.safetensors",
                              DIR "/cku/step_00000009/adapter_model.safetensors"),
                 "without `latest`: the step-9 adapters equal the uninterrupted run's", "compared");
    }
    if (copy_ck("ckf", "true")) /* it started from step 0 over the copy's checkpoints */
        refused("a run without --resume into a copy is refused naming its checkpoints",
                "train " LORA " --steps 9 --ckpt-dir ckf --log ckf.jsonl", "--ckpt-dir ckf: expected a folder without "
                "checkpoints for a run that does not resume, found ckf/");
    ran("control: a fresh run into a new --ckpt-dir", "train " LORA " --steps 9 --ckpt-dir ckn --log ckn.jsonl");
    tu_check(first_step("ckn.jsonl") == 1, "control: the fresh run logs from step 1", "first step %ld",
             first_step("ckn.jsonl"));
    if (copy_ck("cka", "for d in step_*; do echo '{' > $d/state.json; done"))
        refused("control: every checkpoint damaged, --resume auto is refused",
                "train " LORA " --steps 9 --ckpt-dir cka --resume auto", "which is not a LoRA checkpoint");
}

static void explicit(void) {
    if (copy_ck("cke", "echo '{' > step_00000006/state.json")) {
        refused("--resume of a state.json that is not JSON says so", "train " LORA " --steps 9 --resume "
                "cke/step_00000006", "found a state.json that is not JSON");
        /* export called it a PEFT adapter folder (a run's --out) */
        refused("export --merge of that checkpoint says it is a damaged LoRA checkpoint", "export cke/step_00000006 "
                "--merge -o merged_bad", "found a LoRA checkpoint whose state.json is missing or does not read as one");
        ran("control: export --merge of the intact checkpoint", "export ck/step_00000006 --merge -o merged_ok");
    }
    /* a version-2 state.json edited to say version 1 (which has no checksum) and another step: the
     * checksum is still checked (the version alone skipped it, so the edit loaded) */
    if (copy_ck("ckv", "sed -i 's/\"version\":\t2/\"version\":\t1/; s/\"step\":\t6/\"step\":\t4/' "
                       "step_00000006/state.json && grep -q '\"version\":\t1' step_00000006/state.json"))
        refused("a version-2 state.json edited to version 1 and step 4 fails its checksum",
                "train " LORA " --steps 9 --resume ckv/step_00000006", "xxh3 checksum mismatch");
    ran("an ordinary checkpoint", "train " T " --layers 2 --heads 2 --channels 32 --vocab 257 --max-seq-len 16 --steps 2 "
        "--ckpt-dir full");
    refused("--resume of an ordinary checkpoint with --lora-rank says so", "train " LORA " --steps 9 --resume "
            "full/step_00000002", "found an ordinary checkpoint");
    refused("--resume of a --ckpt-dir says so", "train " LORA " --steps 9 --resume ck",
            "found a directory of checkpoints (give --ckpt-dir ck --resume auto");
    ran("control: the intact step directory resumes", "train " LORA " --steps 9 --resume ck/step_00000006 --ckpt-dir ckx");
}

/* --out naming a checkpoint folder: the adapter files replaced its own (checksums then failed). */
static void out_over_ckpt(void) {
    refused("--out naming a LoRA checkpoint is refused", "train " LORA " --steps 2 --out ck/step_00000003",
            "--out ck/step_00000003: expected a folder for the adapter");
    refused("--out naming an ordinary checkpoint is refused", "train " LORA " --steps 2 --out full/step_00000002",
            "found a checkpoint (full/step_00000002/state.json)");
    ran("control: that checkpoint still resumes", "train " LORA " --steps 9 --resume ck/step_00000003 --ckpt-dir cko");
    ran("control: --out to a new folder", "train " LORA " --steps 2 --out adapter");
}

static void init_from(void) {
    char err[2048];
    int lines, rc = st("train " T " --init-from nonexist --steps 2", err, sizeof err, &lines);
    tu_check(rc == 2 && lines == 1 && strstr(err, "--init-from nonexist: cannot open") &&
                 !strstr(err, "--init-from: --init-from"),
             "--init-from of a missing file names the flag once", "exit %d, %d line(s): %s", rc, lines, err);
}

int main(void) {
    if (system("rm -rf " DIR " && mkdir -p " DIR " && cd " DIR " && " BIN " prepare --out sh --tokenizer bytes --separator "
               "'' --val-fraction 0.1 --quiet " ST_SOURCE_DIR "/data/tinyshakespeare/input.txt >/dev/null 2>&1") != 0) {
        tu_check(0, "prepare the shards", "failed");
        return tu_exit();
    }
    ran("the base", "train " T " --layers 2 --heads 2 --channels 32 --vocab 257 --max-seq-len 16 --steps 2 --out base");
    rank();
    inert();
    resume_auto();
    explicit();
    out_over_ckpt();
    init_from();
    return tu_exit();
}
