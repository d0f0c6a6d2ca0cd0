/* test_newcomer.c — issue 26, "a newcomer's path", the program's side: each message a newcomer meets
 * names its fix, help is generated once from the option tables, and train and plan share one
 * preset table and one set of grid rules.
 *
 * Oracle: the real binary (built beside the tests): its exit status, the number of stderr lines and
 * the words that name the fix (the flag, the command to run, the glob to give).
 * Negative control, per message: the same matcher is run on the message the binary printed before
 * the fix (kept below as a literal, copied from the pre-fix binary), and must reject it — so every
 * check can fail, and fails on the old text. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/fileio.h"
#include "data/shard.h"
#include "testutil.h"

#define BIN ST_BINARY_DIR "/scaletrain"
#define TMP ST_BINARY_DIR "/test_newcomer"

/* The binary under test: the build's, or $ST_NEWCOMER_BIN (to run these checks against a binary
 * built before the fixes: every check of a message must then fail). */
static const char *bin(void) {
    const char *b = getenv("ST_NEWCOMER_BIN");
    return b && *b ? b : BIN;
}

/* `scaletrain args`: exit status; stdout and stderr kept in TMP/out.txt, TMP/err.txt. */
static int run(const char *args) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s %s >" TMP "/out.txt 2>" TMP "/err.txt", bin(), args);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static int count_lines(const char *t) {
    int n = 0;
    for (; t && *t; t++) n += *t == '\n';
    return n;
}

/* Whether text holds every '|'-separated word of want (want "a|b": both a and b). */
static int has_all(const char *text, const char *want) {
    if (!text) return 0;
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", want);
    for (char *w = strtok(buf, "|"); w; w = strtok(NULL, "|"))
        if (!strstr(text, w)) return 0;
    return 1;
}

/* `scaletrain args` must exit `code` with one stderr line holding every word of want; the
 * pre-fix message old (NULL: a new refusal, where the old binary ran on) must not hold them. */
static void expect_msg(const char *name, const char *args, int code, const char *want, const char *old) {
    int rc = run(args);
    char *text = tu_slurp(TMP "/err.txt");
    int lines = count_lines(text);
    int ok = rc == code && lines == 1 && has_all(text, want);
    if (text && *text && text[strlen(text) - 1] == '\n') text[strlen(text) - 1] = '\0';
    tu_check(ok, name, "exit=%d (want %d) lines=%d stderr=\"%s\" want \"%s\"", rc, code, lines, text ? text : "", want);
    if (old) {
        char nc[256];
        snprintf(nc, sizeof nc, "%s: negative control (the pre-fix message fails the matcher)", name);
        tu_check(!has_all(old, want), nc, "old=\"%.120s\"", old);
    }
    free(text);
}

/* A line of help text printing its default twice ("default 512) (default: -2147483647)") or a
 * sentinel: 1 if the text has such a line (named in bad). */
static int help_doubles(const char *text, char *bad, size_t cap) {
    const char *p = text;
    while (p && *p) {
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        char line[1024];
        snprintf(line, sizeof line, "%.*s", (int)(n < sizeof line ? n : sizeof line - 1), p);
        const char *d = strstr(line, "default");
        if ((d && strstr(d + 7, "default")) || strstr(line, "-2147483647")) {
            snprintf(bad, cap, "%s", line);
            return 1;
        }
        /* "(-1: 0.9) (default: -1)": the raw sentinel after the help explained it */
        const char *q = strstr(line, "(default: ");
        if (q) {
            char val[64], own[80];
            snprintf(val, sizeof val, "%.*s", (int)strcspn(q + 10, ")"), q + 10);
            snprintf(own, sizeof own, "(%s:", val);
            if (strstr(line, own)) {
                snprintf(bad, cap, "%s", line);
                return 1;
            }
        }
        p = e ? e + 1 : NULL;
    }
    return 0;
}

static void test_help(void) {
    /* scaletrain --help lists every command main dispatches */
    int rc = run("--help");
    char *out = tu_slurp(TMP "/out.txt");
    static const char *const cmds[] = {"train", "sample", "prepare", "tokenizer", "plan", "eval", "export",
                                       "fit", "report", "sweep", "study"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char want[32], name[64];
        snprintf(want, sizeof want, "\n  %s ", cmds[i]);
        snprintf(name, sizeof name, "--help lists %s", cmds[i]);
        tu_check(rc == 0 && out && strstr(out, want), name, "exit=%d", rc);
    }
    const char *old_usage = "commands:\n  train      train\n  eval       loss\n  fit        scaling\n";
    tu_check(!strstr(old_usage, "\n  export "), "--help lists export: negative control", "pre-fix usage lacks it");
    free(out);
    /* defaults once, never a sentinel, in every subcommand's help */
    static const char *const helps[] = {"train --help", "plan --help", "sample --help", "eval --help",
                                        "export --help", "prepare --help", "report --help", "fit --help"};
    for (size_t i = 0; i < sizeof helps / sizeof helps[0]; i++) {
        rc = run(helps[i]);
        out = tu_slurp(TMP "/out.txt");
        char bad[1024] = "", name[96];
        snprintf(name, sizeof name, "%s: each default once, no sentinel", helps[i]);
        tu_check(rc == 0 && out && !help_doubles(out, bad, sizeof bad), name, "exit=%d line \"%s\"", rc, bad);
        free(out);
    }
    char bad[1024];
    tu_check(help_doubles("  --shampoo-block    Shampoo: largest block side (default 512) (default: -2147483647)\n", bad,
                          sizeof bad) &&
                 help_doubles("  --beta1            first-moment decay (-1: 0.9; sophia 0.965) (default: -1)\n", bad,
                              sizeof bad),
             "help defaults: negative control (pre-fix lines are caught)", " ");
    rc = run("train --help");
    out = tu_slurp(TMP "/out.txt");
    tu_check(rc == 0 && out && strstr(out, "zb-h1"), "train --help names zb-h1", "exit=%d", rc);
    free(out);
    rc = run("tokenizer --help");
    out = tu_slurp(TMP "/out.txt");
    tu_check(rc == 0 && out && strstr(out, "cl100k") && !strstr(out, "with GPT-2's pre-tokenization"),
             "tokenizer --help: train learns any --pattern, not GPT-2's only", "exit=%d", rc);
    free(out);
    /* One preset table: every name the issue found in only one of plan and train passes both.
     * The model flags are parsed before --precision / --recompute, so a bogus value there stops
     * the command right after the preset was accepted (nothing is built). */
    static const char *const presets[] = {"llama3-8b", "llama-d4", "d1", "d3", "gpt2-1.5b", "llama-405b", "gpt2-1558m"};
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        char args[256], name[96];
        snprintf(args, sizeof args, "train --model %s --precision fp64", presets[i]);
        snprintf(name, sizeof name, "train accepts --model %s", presets[i]);
        expect_msg(name, args, 2, "--precision: expected fp32", NULL);
        snprintf(args, sizeof args, "plan --model %s --recompute sometimes", presets[i]);
        snprintf(name, sizeof name, "plan accepts --model %s", presets[i]);
        expect_msg(name, args, 2, "--recompute: expected none", NULL);
    }
    expect_msg("unknown preset lists the table", "train --model gpt5", 2,
               "--model: expected a preset|llama-405b|gpt2-1.5b|llama3-8b|found 'gpt5'",
               "scaletrain train: --model: expected a preset (d1..d64, gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1558m, "
               "llama-d1..llama-d64, llama-7b, llama-13b, llama-70b, llama3-8b, llama3.1-8b, llama3.2-1b, "
               "llama3.2-3b), found 'gpt5'");
}

#define SHAPE "--layers 1 --heads 2 --channels 32 --max-seq-len 64 --seq-len 32 --micro-batch 2 --steps 2 --quiet"

/* Text where shards belong, a directory where a glob belongs, another tokenizer's shards. */
static void test_data(void) {
    /* 3000 and 500 bytes of the bundled corpus: text, above and below the 1024-byte header */
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "head -c 3000 %s/data/tinyshakespeare/input.txt > " TMP "/corpus.txt && "
             "head -c 500 %s/data/tinyshakespeare/input.txt > " TMP "/short.txt && rm -rf " TMP "/shards",
             ST_SOURCE_DIR, ST_SOURCE_DIR);
    if (!tu_shell(cmd)) return;
    expect_msg("text file as --data", "train --data " TMP "/corpus.txt " SHAPE, 2,
               "corpus.txt|found text|scaletrain prepare --out DIR|--data 'DIR/train_*.bin'",
               "scaletrain train: corpus.txt: expected magic/version 20240520/1 (uint16) or 20240801/7 (uint32), found "
               "1936877894/1766006900");
    expect_msg("short text file as --data", "train --data " TMP "/short.txt " SHAPE, 2,
               "short.txt|text|scaletrain prepare --out DIR",
               "scaletrain train: short.txt: expected at least a 1024-byte shard header, found 500 bytes");
    /* control: a binary file of the wrong magic keeps the magic message, without the text hint */
    FILE *f = fopen(TMP "/zeros.bin", "wb");
    static const int32_t hdr[256] = {12345, 1, 0};
    if (f) fwrite(hdr, 4, 256, f), fclose(f);
    expect_msg("binary non-shard: no text hint", "train --data " TMP "/zeros.bin " SHAPE, 2,
               "expected magic/version|found 12345/1", NULL);
    char *t = tu_slurp(TMP "/err.txt");
    tu_check(t && !strstr(t, "prepare"), "binary non-shard: the text hint is not given", "stderr=\"%.*s\"",
             t ? (int)strcspn(t, "\n") : 0, t ? t : "");
    free(t);
    if (!tu_shell(BIN " prepare --tokenizer bytes --separator \"\" --out " TMP "/shards " TMP "/corpus.txt >/dev/null 2>&1")) return;
    expect_msg("directory as --data", "train --data " TMP "/shards " SHAPE, 2,
               "shards: a directory|'" TMP "/shards/train_*.bin'", "scaletrain train: shards: expected a regular file");
    expect_msg("another tokenizer's shards: names, not hashes", "train --data '" TMP "/shards/train_*.bin' --tokenizer gpt2 " SHAPE, 2,
               "prepared with tokenizer bytes|--tokenizer gpt2|train with --tokenizer bytes",
               "scaletrain train: shards/train_000000.bin: made with tokenizer hash c068a593b15c7392, expected "
               "1bf434d25c46b296 (the --tokenizer of this run)");
    /* control: the same shards with their own tokenizer train */
    int rc = run("train --data '" TMP "/shards/train_*.bin' --tokenizer bytes " SHAPE);
    tu_check(rc == 0, "control: the shards train with their own --tokenizer", "exit=%d", rc);
}

/* plan and train: one rule for the grid, the accounting said first, devices counted. */
static void test_plan(void) {
    /* 6 blocks on 4 stages: train splits them by FLOPs (layout_pp_split); plan now says the same */
    int rc = run("plan --model d6 --pp 4 --grad-accum 4");
    char *t = tu_slurp(TMP "/err.txt");
    tu_check(rc == 0 && t && !*t, "plan --model d6 --pp 4 passes, as train runs it", "exit=%d stderr=\"%.200s\"", rc,
             t ? t : "");
    free(t);
    tu_check(strstr("scaletrain plan: --layers 6 is not divisible by --pp 4 (1 launch-checklist error)", "--layers 6") != NULL,
             "plan d6 --pp 4: negative control (the pre-fix plan refused it, exit 2)", " ");
    expect_msg("plan --model d6 --pp 8: the trainer's refusal", "plan --model d6 --pp 8", 2,
               "--pp 8: expected at most the 6 layers", NULL);
    /* zb-h1 with recompute: the pre-fix plan printed a review and exited 0 */
    expect_msg("plan zb-h1 with --recompute full is refused as train refuses it",
               "plan --model d6 --pp 2 --grad-accum 4 --pp-schedule zb-h1 --recompute full", 2,
               "--pp-schedule zb-h1: expected --recompute none", NULL);
    /* the accounting, on the first lines */
    rc = run("plan --model llama-70b --hardware H100 --precision bf16 --dp 64 --tp 8 --zero 3 --recompute full --micro-batch 1");
    char *out = tu_slurp(TMP "/out.txt");
    const char *l2 = out ? strchr(out, '\n') : NULL;
    tu_check(l2 && !strncmp(l2 + 1, "accounting: trainer", 19) && strstr(l2, "--accounting megatron"),
             "plan says its accounting on line 2 and how to ask for Megatron's", "exit=%d line 2 \"%.160s\"", rc,
             l2 ? l2 + 1 : "");
    free(out);
    const char *old_head = "== scaletrain plan, priced on hardware profile H100 ==\nmodel: llama-70b, llama";
    tu_check(!strstr(old_head, "accounting:"), "accounting line: negative control (the pre-fix review had none)", " ");
    rc = run("plan --model llama-70b --hardware H100 --precision bf16 --dp 64 --tp 8 --zero 3 --recompute full "
             "--micro-batch 1 --accounting megatron --json");
    out = tu_slurp(TMP "/out.txt");
    tu_check(out && strstr(out, "\"accounting\":\t\"megatron\"") && strstr(out, "\"states\":\t\"zero_paper\""),
             "--accounting megatron prices the ZeRO paper's states", "exit=%d", rc);
    free(out);
    /* does not fit and no knob helps: how many devices, and that layout fits (oracle: plan itself) */
    expect_msg("plan: add devices says how many", "plan --model llama-70b --hardware H100 --precision bf16", 2,
               "does not fit|add devices: |in all fit (--dp ",
               "scaletrain plan: memory: 1227.82 GiB per device does not fit in 80.00 GiB (over by 1147.82 GiB) (1 "
               "launch-checklist error)");
    t = tu_slurp(TMP "/err.txt");
    const char *lay = t ? strstr(t, "in all fit (") : NULL;
    if (lay) {
        char flags[256], args[512];
        snprintf(flags, sizeof flags, "%.*s", (int)strcspn(lay + 12, ":"), lay + 12);
        snprintf(args, sizeof args, "plan --model llama-70b --hardware H100 --precision bf16 %s", flags);
        rc = run(args);
        char *o = tu_slurp(TMP "/out.txt");
        tu_check(o && strstr(o, ": fits ("), "the devices plan names fit", "plan %s: exit %d", flags, rc);
        free(o);
    } else {
        tu_check(0, "the devices plan names fit", "no layout in \"%s\"", t ? t : "");
    }
    free(t);
}

/* sample takes a --ckpt-dir as eval and export do (one resolution, cli_resolve_weights). */
static void test_weights_arg(void) {
    if (!tu_shell("rm -rf " TMP "/ck && " BIN " train --data '" TMP "/shards/train_*.bin' --tokenizer bytes " SHAPE
                  " --ckpt-dir " TMP "/ck >/dev/null 2>&1"))
        return;
    int rc = run("sample " TMP "/ck --tokens 8 --temperature 0");
    char *t = tu_slurp(TMP "/err.txt");
    tu_check(rc == 0, "sample CKPT_DIR (its newest checkpoint)", "exit=%d stderr=\"%.200s\"", rc, t ? t : "");
    free(t);
    /* oracle: the same greedy text from the checkpoint directory itself */
    char *a = tu_slurp(TMP "/out.txt");
    rc = run("sample " TMP "/ck/step_00000002 --tokens 8 --temperature 0");
    char *b = tu_slurp(TMP "/out.txt");
    tu_check(rc == 0 && a && b && !strcmp(a, b) && strlen(a) > 1, "sample CKPT_DIR = sample CKPT_DIR/step_00000002",
             "exit=%d", rc);
    free(a), free(b);
    rc = run("eval " TMP "/ck --data '" TMP "/shards/train_*.bin' --quiet");
    tu_check(rc == 0, "control: eval takes the same CKPT_DIR", "exit=%d", rc);
    /* the pre-fix sample: "ck/config.json: ... No such file" (exit 2), which rc == 0 above rejects */
    expect_msg("sample of a missing path names the three forms", "sample " TMP "/nowhere", 2,
               "nowhere: expected a weights folder|checkpoint|--ckpt-dir",
               "scaletrain sample: nowhere/config.json: cannot open (No such file or directory)");
}

/* --init-from: says what it loaded, takes the file's shape with the flags given on top, and keeps
 * the tokenizer recorded with the weights. */
static void test_init_from(void) {
    const char *data = "--data '" TMP "/shards/train_*.bin' --seq-len 16 --micro-batch 2 --steps 1 --quiet";
    char args[2048];
    snprintf(args, sizeof args, "train %s --tokenizer bytes --arch llama --layers 1 --heads 2 --kv-heads 1 --channels 32 "
             "--max-seq-len 64 --out " TMP "/wl", data);
    if (run(args) != 0) {
        tu_check(0, "init-from: the Llama weights to start from", "train exit != 0");
        return;
    }
    /* what was loaded: the numbers are the file's config.json (written by the run above) */
    snprintf(args, sizeof args, "train %s --init-from " TMP "/wl", data);
    int rc = run(args);
    char *out = tu_slurp(TMP "/out.txt");
    tu_check(rc == 0 && out &&
                 strstr(out, "init: weights from " TMP "/wl: llama L=1 heads=2 kv_heads=1 C=32 untied V=257 max_seq=64") &&
                 strstr(out, "tokenizer bytes"),
             "--init-from says what it loaded (file, shape, tokenizer)", "exit=%d stdout=\"%.300s\"", rc, out ? out : "");
    free(out);
    tu_check(!strstr("step 1 loss ...", "init: weights from"), "init-from line: negative control (the pre-fix run printed none)", " ");
    /* one shape flag: the file's shape, the flag on top (RoPE: no weight depends on --max-seq-len) */
    snprintf(args, sizeof args, "train %s --init-from " TMP "/wl --max-seq-len 128", data);
    rc = run(args);
    out = tu_slurp(TMP "/out.txt");
    char *err = tu_slurp(TMP "/err.txt");
    tu_check(rc == 0 && out && strstr(out, "llama L=1 heads=2 kv_heads=1 C=32 untied V=257 max_seq=128"),
             "--init-from with one shape flag keeps the file's shape", "exit=%d stderr=\"%.200s\"", rc, err ? err : "");
    free(out), free(err);
    /* pre-fix: "--init-from: wl/config.json: model_type: the file holds a llama, this run builds a gpt2" (exit 2) */
    /* another tokenizer's shards: refused without --tokenizer, naming both */
    if (!tu_shell(BIN " prepare --tokenizer gpt2 --separator \"\" --out " TMP "/gshards " TMP "/corpus.txt >/dev/null 2>&1")) return;
    expect_msg("--init-from weights of bytes on gpt2 shards (no --tokenizer)",
               "train --data '" TMP "/gshards/train_*.bin' --seq-len 16 --micro-batch 2 --steps 1 --quiet --init-from " TMP
               "/wl",
               2, "prepared with tokenizer gpt2|this run's tokenizer is bytes|--init-from", NULL);
    expect_msg("--init-from weights of bytes with --tokenizer gpt2",
               "train --data '" TMP "/gshards/train_*.bin' --seq-len 16 --micro-batch 2 --steps 1 --quiet --init-from " TMP
               "/wl --tokenizer gpt2",
               2, "--tokenizer gpt2|trained with tokenizer bytes|expected --tokenizer bytes", NULL);
}

/* The report's runs table shows each run's grid and precision: the page's embedded data for the run
 * of log holds them as the run's flags say, and the table's header names the two columns. */
static void check_report(const char *name, const char *log, const char *grid, const char *prec) {
    char args[1024];
    snprintf(args, sizeof args, "report %s -o " TMP "/report.html", log);
    int rc = run(args);
    char *html = tu_slurp(TMP "/report.html");
    char want[256];
    snprintf(want, sizeof want, "\"grid\":\"%s\",\"precision\":\"%s\"", grid, prec);
    tu_check(rc == 0 && html && strstr(html, want) && strstr(html, "'configuration', 'grid', 'precision'"), name,
             "exit=%d, want %s", rc, want);
    free(html);
}

static const char *g_mpi; /* mpiexec, from CMake (argv[1]) */

/* Step records in a metrics log, and the last one's step. */
static int log_steps(const char *path, long *last) {
    char *t = tu_slurp(path);
    int n = 0;
    for (const char *p = t; p && (p = strstr(p, "\"event\":\"step\"")); p++) {
        const char *q = strstr(p, "\"step\":");
        if (q) *last = strtol(q + 7, NULL, 10);
        n++;
    }
    free(t);
    return n;
}

/* A 2-rank train under `launcher` (scripts/launch or plain mpirun) whose checkpoint save takes 3 s
 * (ST_CKPT_FAIL_AT=begin:slow3: longer than mpirun's 1 s between its SIGTERM and SIGKILL to the
 * ranks), sent SIGTERM after 3 step records. Returns the launcher's exit status (-1: killed, -2:
 * did not end in 60 s), *last the last logged step. */
static int preempt_run(const char *launcher, const char *dir, long *last) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", dir, dir);
    if (!tu_shell(cmd)) return -3;
    snprintf(cmd, sizeof cmd,
             "exec %s --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS=1 -x ST_CKPT_FAIL_AT %s train "
             "--data '" TMP "/shards/train_*.bin' --tokenizer bytes --layers 2 --heads 2 --channels 64 --max-seq-len 64 "
             "--seq-len 64 --micro-batch 4 --steps 100000 --threads 1 --ckpt-dir %s/ck --log %s/log.jsonl >%s/out.txt 2>&1",
             launcher, bin(), dir, dir, dir);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("ST_CKPT_FAIL_AT", "begin:slow3", 1);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    char lg[600];
    snprintf(lg, sizeof lg, "%s/log.jsonl", dir);
    *last = -1;
    for (int i = 0; i < 600 && log_steps(lg, last) < 3; i++) usleep(100000);
    kill(pid, SIGTERM);
    int status = 0;
    for (int i = 0; i < 600; i++, usleep(100000))
        if (waitpid(pid, &status, WNOHANG) == pid) {
            log_steps(lg, last);
            return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -2;
}

/* Preemption under mpirun: SIGTERM to the documented launch line saves at the current step and
 * exits 0; to a plain mpirun, the save is lost (Open MPI SIGKILLs the ranks 1 s after its SIGTERM). */
static void test_preempt(void) {
    if (!g_mpi || !g_mpi[0]) {
        tu_check(0, "preemption under mpirun", "no mpiexec given to the test (MPI missing)");
        return;
    }
    long last = -1;
    char want[64], *latest;
    int rc = preempt_run(ST_SOURCE_DIR "/scripts/launch", TMP "/pre_launch", &last);
    latest = tu_slurp(TMP "/pre_launch/ck/latest");
    if (latest) latest[strcspn(latest, "\n")] = '\0';
    snprintf(want, sizeof want, "step_%08ld", last);
    int saved = latest && last > 0 && !strncmp(latest, want, strlen(want));
    char state[256];
    snprintf(state, sizeof state, TMP "/pre_launch/ck/%s/state.json", want);
    char *st = tu_slurp(state);
    tu_check(rc == 0 && saved && st, "SIGTERM to scripts/launch (mpirun -np 2): checkpoint at the current step, exit 0",
             "exit=%d last step %ld, latest=%s, state.json %s", rc, last, latest ? latest : "(none)", st ? "present" : "missing");
    free(latest), free(st);
    check_report("report: the run's grid and precision (mpirun -np 2)", TMP "/pre_launch/log.jsonl",
                 "dp 2 x tp 1 x pp 1, ZeRO 0", "fp32");
    /* negative control: the same job under plain mpirun loses the save and exits non-zero */
    rc = preempt_run(g_mpi, TMP "/pre_mpirun", &last);
    latest = tu_slurp(TMP "/pre_mpirun/ck/latest");
    tu_check(rc != 0 && !latest, "negative control: SIGTERM to plain mpirun loses the save (Open MPI's SIGKILL)",
             "exit=%d last step %ld, latest=%s", rc, last, latest ? latest : "(none)");
    free(latest);
}

/* Launching: a grid without mpirun, --zero on one process, one copy of a replicated error. */
static void test_launch(void) {
    const char *data = "--data '" TMP "/shards/train_*.bin' --tokenizer bytes " SHAPE;
    char args[2048];
    snprintf(args, sizeof args, "train %s --tp 2", data);
    expect_msg("--tp 2 without mpirun", args, 2, "--tp 2|2 processes|mpirun -np 2",
               "scaletrain train: --tp 2: expected a divisor of the world size 1 (ranks launched), found a remainder of 1");
    snprintf(args, sizeof args, "train %s --pp 2", data);
    expect_msg("--pp 2 without mpirun", args, 2, "--pp 2|2 processes|mpirun -np 2",
               "scaletrain train: --pp 2: expected tp x pp = 2 to divide the world size 1 (ranks launched), found a "
               "remainder of 1");
    /* the pre-fix binary ran this to the end (exit 0): the exit status check fails on it */
    snprintf(args, sizeof args, "train %s --zero 1", data);
    expect_msg("--zero 1 on one process is refused", args, 2, "--zero: would change nothing|mpirun -np N", NULL);
    snprintf(args, sizeof args, "train %s --zero 0", data);
    int rc = run(args);
    tu_check(rc == 0, "control: --zero 0 on one process runs", "exit=%d", rc);
    /* one line of a replicated error under mpirun, not one per rank */
    if (!g_mpi || !g_mpi[0]) {
        tu_check(0, "one copy of a replicated error under mpirun", "no mpiexec given to the test (MPI missing)");
        return;
    }
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "timeout 60 %s --allow-run-as-root --oversubscribe -np 2 %s train %s --lr abc >" TMP
             "/out.txt 2>" TMP "/err.txt", g_mpi, bin(), data);
    rc = system(cmd);
    char *t = tu_slurp(TMP "/err.txt");
    int copies = 0;
    for (const char *p = t; p && (p = strstr(p, "scaletrain train: --lr: expected a number")); p++) copies++;
    tu_check(WIFEXITED(rc) && WEXITSTATUS(rc) == 2 && copies == 1, "one copy of a replicated error under mpirun",
             "exit=%d copies=%d", WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, copies);
    free(t);
    const char *old = "scaletrain train: --lr: expected a number, found 'abc'\nscaletrain train: --lr: expected a number, "
                      "found 'abc'\n";
    copies = 0;
    for (const char *p = old; (p = strstr(p, "scaletrain train: --lr: expected a number")); p++) copies++;
    tu_check(copies != 1, "one copy under mpirun: negative control (the pre-fix stderr had one per rank)", "copies=%d",
             copies);
}

/* --config takes the option names with hyphens or underscores. */
static void test_config(void) {
    FILE *f = fopen(TMP "/under.json", "w");
    if (f) {
        fputs("{\"layers\": 1, \"heads\": 2, \"channels\": 32, \"max_seq_len\": 64, \"seq_len\": 32, "
              "\"micro_batch\": 2, \"steps\": 2, \"quiet\": true, \"tokenizer\": \"bytes\", \"precision\": \"bf16\"}\n", f);
        fclose(f);
    }
    int rc = run("train --data '" TMP "/shards/train_*.bin' --config " TMP "/under.json --log " TMP "/under.jsonl");
    char *log = tu_slurp(TMP "/under.jsonl");
    tu_check(rc == 0 && log && strstr(log, "\"max_seq_len\":64") , "--config with underscore keys", "exit=%d", rc);
    if (rc) {
        char *t = tu_slurp(TMP "/err.txt");
        printf("  stderr: %s", t ? t : "");
        free(t);
    }
    free(log);
    /* the report of that run (bf16 from the config file): grid and precision columns */
    check_report("report: the run's grid and precision (one process, bf16)", TMP "/under.jsonl",
                 "dp 1 x tp 1 x pp 1, ZeRO 0", "bf16");
    /* the pre-fix parser: "--config under.json: unknown option 'max_seq_len'" (exit 2), which rc == 0 rejects */
    f = fopen(TMP "/twice.json", "w");
    if (f) fputs("{\"max_seq_len\": 64, \"max-seq-len\": 32}\n", f), fclose(f);
    expect_msg("--config with both spellings of a key", "train --config " TMP "/twice.json", 2,
               "twice.json|max-seq-len|given twice", NULL);
    f = fopen(TMP "/typo.json", "w");
    if (f) fputs("{\"max_seq_length\": 64}\n", f), fclose(f);
    expect_msg("--config unknown key says how keys are spelled", "train --config " TMP "/typo.json", 2,
               "unknown option 'max_seq_length'|without the dashes", "scaletrain train: --config typo.json: unknown option 'max_seq_length'");
}

/* argv[1]: mpiexec; argv[2]: "preempt" runs the mpirun preemption part alone (a CTest of its own,
 * so that each stays near 10 s), anything else the messages. */
int main(int argc, char **argv) {
    g_mpi = argc > 1 ? argv[1] : NULL;
    Err e;
    file_mkdirs(TMP, &e);
    if (argc > 2 && !strcmp(argv[2], "preempt")) {
        if (tu_shell("head -c 3000 " ST_SOURCE_DIR "/data/tinyshakespeare/input.txt > " TMP "/pcorpus.txt && rm -rf " TMP
                     "/shards && " BIN " prepare --tokenizer bytes --separator \"\" --out " TMP "/shards " TMP "/pcorpus.txt >/dev/null 2>&1"))
            test_preempt();
        return tu_exit();
    }
    test_help();
    test_data();
    test_launch();
    test_config();
    test_plan();
    test_weights_arg();
    test_init_from();
    return tu_exit();
}
