/* test_cli_options.c — options of train, sample, export, prepare and tokenizer that would change
 * nothing in a combination are refused, and the options reach the configuration (issue 12: flags
 * that do nothing are defects; plan's options are tested one by one in test_plan).
 *
 * Oracles:
 *  - the real binary on each inert combination: exit 2 and exactly one stderr line
 *    "--FLAG: would change nothing ...";
 *  - negative controls: the same options in combinations where they act are accepted (the runs exit
 *    0), so a refusal that fired regardless of the combination would fail here;
 *  - the `start` record's config of a run that sets the optimizer, schedule, precision and checkpoint
 *    options holds the values given (parsing reaches TrainConfig), and the run's records show them
 *    acting (fp16 loss scale, checkpoints, samples).
 * Not covered here (need MPI): --no-overlap and --comm-timeout accepted under mpirun, --ckpt-async
 * refused under data parallelism (test_dp passes --comm-timeout under mpirun). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "core/fileio.h"
#include "testutil.h"

#define BIN ST_BINARY_DIR "/scaletrain"
#define TMP ST_BINARY_DIR "/test_cli_options"

/* `scaletrain args`: its exit status; stderr kept in TMP/stderr.txt. */
static int run(const char *args) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s %s >" TMP "/stdout.txt 2>" TMP "/stderr.txt", BIN, args);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* Exit 2 and one stderr line containing "--FLAG: would change nothing" (flag = want). */
static void expect_refused(const char *flag, const char *args) {
    int code = run(args);
    char *text = tu_slurp(TMP "/stderr.txt");
    int lines = 0;
    for (const char *p = text; p && *p; p++) lines += *p == '\n';
    char want[96];
    snprintf(want, sizeof want, "--%s: would change nothing", flag);
    int ok = code == 2 && lines == 1 && text && strstr(text, want) != NULL;
    if (text && *text && text[strlen(text) - 1] == '\n') text[strlen(text) - 1] = '\0';
    char name[160];
    size_t n = strlen(args), tail = n > 64 ? n - 64 : 0;
    snprintf(name, sizeof name, "refused --%s (...%s)", flag, args + tail);
    tu_check(ok, name, "exit=%d lines=%d stderr=\"%s\"", code, lines, text ? text : "");
    free(text);
}

static void expect_accepted(const char *name, const char *args) {
    int code = run(args);
    char *text = tu_slurp(TMP "/stderr.txt");
    if (text && *text && text[strlen(text) - 1] == '\n') text[strlen(text) - 1] = '\0';
    tu_check(code == 0, name, "exit=%d stderr=\"%.200s\"", code, text ? text : "");
    free(text);
}

/* The first record of a JSON Lines log with "event" == ev (caller deletes), or NULL. */
static cJSON *log_record(const char *path, const char *ev) {
    cJSON *all = tu_log_records(path), *o, *found = NULL;
    cJSON_ArrayForEach(o, all) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(o, "event");
        if (cJSON_IsString(e) && !strcmp(e->valuestring, ev)) {
            found = cJSON_DetachItemViaPointer(all, o);
            break;
        }
    }
    cJSON_Delete(all);
    return found;
}

static double num(const cJSON *o, const char *k) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(x) ? x->valuedouble : -12345;
}

static const char *str(const cJSON *o, const char *k) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(x) ? x->valuestring : "";
}

/* The words a POSIX shell reads from the line in TMP/line.txt, one "[word]" per line, into buf. */
static int shell_words(char *buf, size_t cap) {
    int rc = system("sh -c 'eval \"set -- $(cat " TMP "/line.txt)\"; for a; do printf \"[%s]\\n\" \"$a\"; done' > " TMP
                    "/words.txt 2>&1");
    char *t = tu_slurp(TMP "/words.txt");
    snprintf(buf, cap, "%s", t ? t : "");
    free(t);
    return rc == 0;
}

/* The command a manifest (and a start record) records runs again as given: prepare with an empty
 * --separator and an --out holding a space and a quote, its manifest's "command" read back by a
 * shell gives the same words (the words were joined by spaces until 2026-11-29: the empty
 * separator vanished, the path split in two), and tokenizer.name is the --tokenizer given.
 * Control: the plain join of the same words does not read back the same. */
static void recorded_command(void) {
    char cmd[4096], want[1024], got[2048];
    const char *out = TMP "/o u't";
    snprintf(cmd, sizeof cmd, "prepare --tokenizer bytes --separator '' --val-fraction 0 --quiet --out \"%s\" %s/data/"
             "tinyshakespeare/input.txt > /dev/null", out, ST_SOURCE_DIR);
    int rc = run(cmd);
    snprintf(want, sizeof want, "[scaletrain]\n[prepare]\n[--tokenizer]\n[bytes]\n[--separator]\n[]\n[--val-fraction]\n[0]\n"
             "[--quiet]\n[--out]\n[%s]\n[%s/data/tinyshakespeare/input.txt]\n", out, ST_SOURCE_DIR);
    char path[1024];
    snprintf(path, sizeof path, "%s/manifest.json", out);
    char *text = tu_slurp(path);
    cJSON *m = text ? cJSON_Parse(text) : NULL;
    const cJSON *c = cJSON_GetObjectItem(m, "command"), *nm = cJSON_GetObjectItem(cJSON_GetObjectItem(m, "tokenizer"), "name");
    FILE *f = cJSON_IsString(c) ? fopen(TMP "/line.txt", "w") : NULL;
    if (f) fputs(c->valuestring, f), fclose(f);
    int ok = f && shell_words(got, sizeof got) && !strcmp(got, want);
    tu_check(rc == 0 && ok && cJSON_IsString(nm) && !strcmp(nm->valuestring, "bytes"),
             "prepare's recorded command reads back as given", "command %s; words %s", cJSON_IsString(c) ? c->valuestring : "?",
             got);
    cJSON_Delete(m);
    free(text);
    if ((f = fopen(TMP "/line.txt", "w"))) {
        fprintf(f, "scaletrain prepare --tokenizer bytes --separator  --val-fraction 0 --quiet --out %s %s/data/"
                "tinyshakespeare/input.txt", out, ST_SOURCE_DIR);
        fclose(f);
    }
    int same = f && shell_words(got, sizeof got) && !strcmp(got, want);
    tu_check(f && !same, "control: the plain join does not read back (or no shell reads it)",
             "%s", got);
}

/* Directories given with a trailing slash (as the README writes them: run/, ckpt/), as flags or as
 * eval's weights argument, are the same directories in what is printed: "run/model.safetensors", not "run//model.safetensors" (until
 * 2026-11-29). Control: a path with "//" inside shows it, so the check sees doubled slashes. */
static void trailing_slashes(void) {
    char cmd[4096];
    int any[2];
    for (int k = 0; k < 2; k++) {
        snprintf(cmd, sizeof cmd, "rm -rf %s/sl && %s prepare --tokenizer bytes --val-fraction 0 --quiet --out %s/sl/sh/ "
                 "%s/data/tinyshakespeare/input.txt > /dev/null 2>&1 && %s train --data '%s/sl/sh/train_*.bin' --layers 1 "
                 "--heads 2 --channels 32 --max-seq-len 32 --seq-len 32 --micro-batch 2 --steps 2 --ckpt-every 1 "
                 "--ckpt-dir %s/sl/ck/ --out %s/sl%srun/ > %s/sl.out 2>&1 && %s train --data '%s/sl/sh/train_*.bin' "
                 "--layers 1 --heads 2 --channels 32 --max-seq-len 32 --seq-len 32 --micro-batch 2 --steps 3 --ckpt-dir "
                 "%s/sl/ck/ --resume auto >> %s/sl.out 2>&1 && %s eval %s/sl/ck/ --data '%s/sl/sh/train_*.bin' --quiet "
                 ">> %s/sl.out 2>&1", TMP, BIN, TMP, ST_SOURCE_DIR, BIN, TMP, TMP, TMP, k ? "//" : "/", TMP, BIN, TMP, TMP,
                 TMP, BIN, TMP, TMP, TMP);
        int ok = tu_shell(cmd);
        char *t = tu_slurp(TMP "/sl.out");
        any[k] = ok && t && strstr(t, k ? "saved weights to " TMP "/sl//run/model.safetensors"
                                        : "saved weights to " TMP "/sl/run/model.safetensors") && strstr(t, "resume: continuing") &&
                     strstr(t, "eval: " TMP "/sl/ck/step_00000003 on")
                     ? strstr(t, "//") != NULL : -1;
        free(t);
    }
    tu_check(any[0] == 0, "trailing slashes: no doubled slash printed", "see %s/sl.out", TMP);
    /* --resume auto over an empty --ckpt-dir says it starts from scratch once (it said it twice) */
    snprintf(cmd, sizeof cmd, "%s train --data '%s/sl/sh/train_*.bin' --layers 1 --heads 2 --channels 32 --max-seq-len 32 "
             "--seq-len 32 --micro-batch 2 --steps 1 --ckpt-dir %s/sl/empty --resume auto > %s/sl2.out 2>&1", BIN, TMP, TMP,
             TMP);
    int ok = tu_shell(cmd), n = 0;
    char *t = tu_slurp(TMP "/sl2.out");
    for (const char *p = t; p && (p = strstr(p, "starting from scratch")); p++) n++;
    tu_check(ok && n == 1, "--resume auto with nothing to resume says so once", "%d times", n);
    free(t);
    tu_check(any[1] == 1, "control: a path with // inside is printed with it", "%d", any[1]);
}

int main(void) {
    Err e;
    char cmd[4096], args[4096];
    snprintf(cmd, sizeof cmd, "rm -rf " TMP);
    if (system(cmd) != 0) return 1;
    file_mkdirs(TMP, &e);
    recorded_command();
    trailing_slashes();
    /* A small corpus: 40 documents separated by "@@" lines. */
    FILE *f = fopen(TMP "/corpus.txt", "w");
    for (int d = 0; d < 40 && f; d++)
        fprintf(f, "%sdocument %d: the quick brown fox jumps over the lazy dog, again and again.\n", d ? "@@\n" : "", d);
    if (f) fclose(f);

    /* ---- prepare ---- */
    expect_refused("val-fraction", "prepare --tokenizer bytes --val-docs 3 --val-fraction 0.2 --out " TMP "/p0 " TMP "/corpus.txt");
    /* --seed without a validation split is not inert since issue 29: it also sets the order in the shards */
    expect_refused("field", "prepare --tokenizer bytes --format text --field body --out " TMP "/p0 " TMP "/corpus.txt");
    expect_refused("tokenizer-dir", "prepare --tokenizer bytes --tokenizer-dir " TMP " --out " TMP "/p0 " TMP "/corpus.txt");
    expect_refused("separator", "prepare --tokenizer bytes --format jsonl --separator @@ --out " TMP "/p0 " TMP "/corpus.txt");
    /* under --format auto (the default) the inputs' names decide: refused when no input is read
     * where the flag acts (a text file for --field, JSON Lines for --separator, "-" is text) */
    f = fopen(TMP "/docs.jsonl", "w");
    for (int d = 0; d < 4 && f; d++) fprintf(f, "{\"text\": \"json document %d\", \"body\": \"b%d\"}\n", d, d);
    if (f) fclose(f);
    file_mkdirs(TMP "/textdir", &e);
    tu_shell("cp " TMP "/corpus.txt " TMP "/textdir/");
    expect_refused("field", "prepare --tokenizer bytes --field body --out " TMP "/p0 " TMP "/corpus.txt");
    expect_refused("field", "prepare --tokenizer bytes --field body --out " TMP "/p0 " TMP "/textdir");
    expect_refused("field", "prepare --tokenizer bytes --field body --out " TMP "/p0 - < " TMP "/docs.jsonl");
    expect_refused("separator", "prepare --tokenizer bytes --separator '' --out " TMP "/p0 " TMP "/docs.jsonl");
    expect_refused("skip-bad", "prepare --tokenizer bytes --skip-bad --allow-invalid-utf8 --out " TMP "/p0 " TMP "/corpus.txt");
    expect_accepted("control: prepare --skip-bad --allow-invalid-utf8 with a JSON Lines input",
                    "prepare --quiet --tokenizer bytes --skip-bad --allow-invalid-utf8 --val-fraction 0.2 --out " TMP "/psb " TMP
                    "/docs.jsonl");
    expect_accepted("control: prepare --field body with a JSON Lines input",
                    "prepare --quiet --tokenizer bytes --field body --val-fraction 0.2 --out " TMP "/pf " TMP "/docs.jsonl");
    expect_accepted("control: prepare --separator @@ with mixed inputs (it acts on the text one)",
                    "prepare --quiet --tokenizer bytes --separator @@ --val-fraction 0.2 --out " TMP "/pm " TMP
                    "/docs.jsonl " TMP "/corpus.txt");
    expect_accepted("control: prepare --format text --separator @@ --val-fraction 0.2 --seed 5",
                    "prepare --quiet --tokenizer bytes --format text --separator @@ --val-fraction 0.2 --seed 5 --out " TMP
                    "/data " TMP "/corpus.txt");

    /* ---- tokenizer ---- */
    expect_refused("separator", "tokenizer train --vocab-size 260 --format wikitext --separator @@ --out " TMP "/tok " TMP
                                "/corpus.txt");
    expect_refused("separator", "tokenizer train --vocab-size 260 --separator '' --out " TMP "/tok " TMP "/docs.jsonl");
    expect_refused("tokenizer-dir", "tokenizer encode --tokenizer bytes --tokenizer-dir " TMP " " TMP "/corpus.txt");
    expect_accepted("control: tokenizer train --format text --separator @@",
                    "tokenizer train --vocab-size 260 --format text --separator @@ --out " TMP "/tok " TMP "/corpus.txt");
    /* --field and --skip-bad as prepare's (tokenizer train's JSON error named --skip-bad, which it refused
     * as unknown; a .jsonl whose text is not in "text" could not be trained on) */
    expect_refused("field", "tokenizer train --vocab-size 260 --field body --out " TMP "/tok " TMP "/corpus.txt");
    expect_refused("skip-bad", "tokenizer train --vocab-size 260 --skip-bad --out " TMP "/tok " TMP "/corpus.txt");
    expect_accepted("control: tokenizer train --field body on JSON Lines",
                    "tokenizer train --vocab-size 260 --holdout 0 --field body --out " TMP "/tokf " TMP "/docs.jsonl");
    char *tf = tu_slurp(TMP "/stdout.txt");
    tu_check(tf && strstr(tf, "4 documents in 1 files, 8 bytes trained on"), "tokenizer train --field body trains on that field",
             "\"%.160s\"", tf ? tf : "(none)");
    free(tf);
    f = fopen(TMP "/bad.jsonl", "w");
    if (f) fputs("{\"text\": \"good one\"}\nnot json\n{\"body\": \"no text\"}\n{\"text\": \"good two\"}\n", f), fclose(f);
    expect_accepted("control: tokenizer train --skip-bad on JSON Lines",
                    "tokenizer train --vocab-size 260 --holdout 0 --skip-bad --out " TMP "/tokb " TMP "/bad.jsonl");
    tf = tu_slurp(TMP "/stdout.txt");
    tu_check(tf && strstr(tf, "skipped (--skip-bad): 1 lines not JSON objects, 1 without a string \"text\"") &&
                 strstr(tf, "2 documents in 1 files"), "tokenizer train --skip-bad skips and says so", "\"%.200s\"", tf ? tf : "(none)");
    free(tf);
    expect_accepted("control: tokenizer encode --tokenizer bytes", "tokenizer encode --tokenizer bytes " TMP "/corpus.txt");

    /* ---- train ---- */
    /* each flag once (a second is refused): TR0 for the runs that give their own --steps; no --val-every
     * (without --val-data nothing is validated) for the cases that give it */
#define TR0 "train --data " TMP "/data/train_*.bin --tokenizer bytes --layers 1 --heads 1 --channels 16 --max-seq-len 16 " \
            "--seq-len 8 --micro-batch 2 --peak-gflops 10 --threads 1"
#define TR TR0 " --steps 2"
    static const struct { const char *flag, *args; } TRAIN_INERT[] = {
        {"loss-scale", TR " --loss-scale 1024"},
        {"loss-scale-window", TR " --precision bf16 --loss-scale-window 10"},
        {"decay-frac", TR " --decay-frac 0.5"},
        {"decay-shape", TR " --schedule cosine --decay-shape 1-sqrt"},
        {"min-lr", TR " --schedule constant --min-lr 1e-4"},
        {"momentum", TR " --momentum 0.5"},
        {"beta1", TR " --optimizer sgd --beta1 0.8"},
        {"beta2", TR " --optimizer sgd --beta2 0.8"},
        {"eps", TR " --optimizer lion --eps 1e-6"},
        {"ckpt-every", TR " --ckpt-every 1"},
        {"keep-last", TR " --keep-last 2"},
        {"keep-every", TR " --keep-every 2"},
        {"ckpt-async", TR " --ckpt-async"},
        {"mtbf", TR " --mtbf 24"},
        {"mtbf", TR " --ckpt-dir " TMP "/never --mtbf 24 --quiet"},
        {"override", TR " --override lr"},
        {"sample-tokens", TR " --sample-tokens 8"},
        {"tokenizer-dir", TR " --tokenizer-dir " TMP},
        {"no-overlap", TR " --no-overlap"},
        {"comm-timeout", TR " --comm-timeout 30"},
        {"val-every", TR " --val-every 5"},
        {"val-batches", TR " --val-batches 3"},
        {"log-layer-stats", TR " --log-layer-stats"},                  /* no --log: the statistics go nowhere */
        {"stop-after", TR " --ckpt-dir " TMP "/never --stop-after 5"}, /* the run ends at --steps 2 first */
        {"stop-after", TR " --ckpt-dir " TMP "/never --stop-after 2"},
    };
    for (size_t i = 0; i < sizeof TRAIN_INERT / sizeof TRAIN_INERT[0]; i++)
        expect_refused(TRAIN_INERT[i].flag, TRAIN_INERT[i].args);
    /* Control A: the same options where they act, in one run; its start record holds them. */
    snprintf(args, sizeof args,
             TR " --precision fp16 --loss-scale 1024 --loss-scale-window 10 --schedule wsd --decay-frac 0.5 "
                "--decay-shape 1-sqrt --min-lr 1e-4 --optimizer adamw --beta1 0.8 --beta2 0.9 --eps 1e-7 --ckpt-dir " TMP
                "/ck --ckpt-every 1 --keep-last 2 --keep-every 2 --ckpt-async --mtbf 24 --sample-every 1 --sample-tokens 3 "
                "--out " TMP "/model --log " TMP "/a.jsonl");
    expect_accepted("control A: fp16 loss scale, wsd, adamw betas/eps, checkpoints, mtbf, samples", args);
    char *out = tu_slurp(TMP "/stdout.txt");
    tu_check(out && strstr(out, "checkpoint interval for MTBF 24.0 h") != NULL, "control A: --mtbf prints the Young/Daly interval",
             "%s", out && strstr(out, "checkpoint interval") ? "printed" : "missing");
    free(out);
    cJSON *st = log_record(TMP "/a.jsonl", "start"), *step = log_record(TMP "/a.jsonl", "step");
    cJSON *ck = log_record(TMP "/a.jsonl", "ckpt"), *smp = log_record(TMP "/a.jsonl", "sample");
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(st, "config");
    int cfg_ok = c && !strcmp(str(c, "precision"), "fp16") && !strcmp(str(c, "schedule"), "wsd") &&
                 num(c, "decay_frac") == 0.5 && !strcmp(str(c, "decay_shape"), "1-sqrt") && (float)num(c, "min_lr") == 1e-4f &&
                 (float)num(c, "beta1") == 0.8f && (float)num(c, "beta2") == 0.9f && (float)num(c, "eps") == 1e-7f &&
                 num(c, "ckpt_every") == 1 && num(c, "keep_last") == 2 && num(c, "keep_every") == 2 &&
                 cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "ckpt_async"));
    tu_check(cfg_ok && num(step, "loss_scale") == 1024 && ck && smp,
             "control A: the options reach the config and act (start.config, loss_scale 1024, checkpoint and sample records)",
             "config %s, first step loss_scale %g, checkpoint %s, sample %s", cfg_ok ? "as given" : "DIFFERENT",
             num(step, "loss_scale"), ck ? "logged" : "missing", smp ? "logged" : "missing");
    cJSON_Delete(st), cJSON_Delete(step), cJSON_Delete(ck), cJSON_Delete(smp);
    /* Control B: sgd's momentum, and --override with --resume. */
    expect_accepted("control B: --optimizer sgd --momentum 0.5, --val-every and --val-batches with --val-data",
                    TR " --optimizer sgd --momentum 0.5 --val-data " TMP "/data/val_*.bin --val-every 1 --val-batches 1 "
                       "--log " TMP "/b.jsonl");
    cJSON *val = log_record(TMP "/b.jsonl", "val");
    tu_check(val != NULL, "control B: validation records with --val-data --val-every 1", "%s", val ? "logged" : "missing");
    cJSON_Delete(val);
    st = log_record(TMP "/b.jsonl", "start");
    c = cJSON_GetObjectItemCaseSensitive(st, "config");
    tu_check(c && !strcmp(str(c, "optimizer"), "sgd") && (float)num(c, "momentum") == 0.5f, "control B: momentum in the config",
             "optimizer %s momentum %g", str(c, "optimizer"), num(c, "momentum"));
    cJSON_Delete(st);
    expect_accepted("control C: a run with checkpoints", TR " --ckpt-dir " TMP "/ck2");
    expect_accepted("control C: --resume with --override lr",
                    TR0 " --ckpt-dir " TMP "/ck2 --resume auto --steps 3 --lr 1e-3 --override lr");

    /* --quiet drops the per-step lines, not the notice that the run stopped early (it was silent) */
    expect_accepted("--quiet --stop-after 1", TR " --quiet --stop-after 1 --ckpt-dir " TMP "/ck3");
    char *qerr = tu_slurp(TMP "/stderr.txt");
    tu_check(qerr && strstr(qerr, "stopped after step 1 (--stop-after); checkpoint saved, resume with --resume auto"),
             "--quiet: the stop is still said (stderr)", "stderr \"%.200s\"", qerr ? qerr : "(unread)");
    free(qerr);

    /* ---- sample and export, from control A's weights ---- */
    expect_refused("seed", "sample " TMP "/model --tokens 2 --temperature 0 --seed 3");
    expect_refused("top-k", "sample " TMP "/model --tokens 2 --temperature 0 --top-k 5");
    expect_refused("tokenizer-dir", "sample " TMP "/model --tokens 2 --tokenizer-dir " TMP);
    expect_accepted("control: sample --temperature 0.5 --seed 3 --top-k 5", "sample " TMP "/model --tokens 2 --temperature 0.5 --seed 3 --top-k 5");
    expect_accepted("control: sample --temperature 0 (greedy)", "sample " TMP "/model --tokens 2 --temperature 0");
    expect_refused("tokenizer", "export " TMP "/model --format llmc --tokenizer bytes -o " TMP "/m.bin");
    expect_accepted("control: export --format hf --tokenizer bytes", "export " TMP "/model --format hf --tokenizer bytes -o " TMP "/hf");
    /* -o DIR/ names the folder as DIR (it printed "DIR/", and a path joined to it "DIR//...") */
    expect_accepted("export -o DIR/", "export " TMP "/model --format hf -o " TMP "/hf2/");
    char *eout = tu_slurp(TMP "/stdout.txt");
    tu_check(eout && strstr(eout, "to " TMP "/hf2\n") && !strstr(eout, "//"), "export -o DIR/: the folder named without its slash",
             "stdout \"%.200s\"", eout ? eout : "(unread)");
    free(eout);
    return tu_exit();
}
