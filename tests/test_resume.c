/* test_resume.c — exact resume: 2N steps uninterrupted vs N steps + resume + N steps.
 *
 * Oracle: the uninterrupted run. Bit-identical per-step losses (the logged values, as text) and
 * bit-identical final weights (memcmp of model.safetensors), with gradient accumulation, across an
 * epoch boundary, with dropout on; the async checkpoint mode too; and a real SIGTERM to the binary
 * mid-run: exit 0 with a checkpoint, then `--resume auto` finishes with the same weights. A changed
 * model field or trajectory field is refused on resume (naming the field); an override lets the
 * trajectory change through.
 *
 * That comparison alone cannot tell a resume from a fresh start (both reproduce the uninterrupted
 * run exactly), so every resume also asserts that it resumed: TrainResult.start_step and the log's
 * second start record (resumed_from_step, resume.found), the first step logged after it being the
 * next one, and the earlier run's records kept in front of it (tu_log_resumed). Negative control:
 * the same resume pointed at an empty --ckpt-dir passes the old comparison and is caught by these
 * checks; its start record says found=false, resumed_from_step 0, with a note.
 *
 * One pass (issue 24): `--resume auto` reads the checkpoint's data once. Oracle: the bytes the process
 * read from finding to loading (TrainResult.resume_read_bytes, /proc/self/io) against the files'
 * sizes: between 0.9x and 1.4x. Control: the test-only fault that verifies before loading (the old
 * double read) must read 1.8x or more. Fallback: a flipped byte in the newest checkpoint's weights is
 * refused on load and the run continues from the one before, equal to the uninterrupted run; control:
 * that checkpoint named explicitly is refused (the load does verify). */
#include <cjson/cJSON.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/fileio.h"
#include "core/rng.h"
#include "core/timer.h"
#include "data/shard.h"
#include "testutil.h"
#include "train/train.h"

#define DIR ST_BINARY_DIR "/test_resume"

static void make_data(void) {
    Err e;
    file_mkdirs(DIR, &e);
    /* 20000 tokens, T=32: 624 windows per epoch; 8 samples per step → epoch 1 ends in step 78. */
    enum { N = 20000 };
    static uint32_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = (uint32_t)((i * 31 + (i / 7) * 5) % 97);
    ShardMeta meta = {0, N, 97};
    if (shard_write(DIR "/train.bin", tok, N, &meta, &e) != ST_OK) printf("%s\n", e.msg), exit(1);
    if (shard_write(DIR "/val.bin", tok, 4000, &meta, &e) != ST_OK) printf("%s\n", e.msg), exit(1);
}

static TrainConfig base(const char *name, long steps) {
    TrainConfig c = train_default_config();
    c.model = (ModelConfig){2, 2, 32, 97, 0, 32, 0.1f};
    snprintf(c.data, sizeof c.data, DIR "/train.bin");
    snprintf(c.val_data, sizeof c.val_data, DIR "/val.bin");
    snprintf(c.ckpt_dir, sizeof c.ckpt_dir, DIR "/%s_ckpt", name);
    snprintf(c.out_dir, sizeof c.out_dir, DIR "/%s_out", name);
    snprintf(c.log_path, sizeof c.log_path, DIR "/%s.jsonl", name);
    c.micro_batch = 4, c.seq_len = 32, c.grad_accum = 2;
    c.steps = steps, c.sched.warmup = 5, c.sched.lr = 2e-3f, c.sched.min_lr = 2e-4f;
    c.val_every = 0, c.val_batches = 2, c.threads = 2, c.quiet = 1, c.peak_flops = 1e11;
    return c;
}

/* "step:loss;" for every step event of a log (later records of a step replace earlier ones). */
static void losses(const char *log, char *out, size_t cap) {
    char *text;
    size_t len;
    Err e;
    out[0] = 0;
    if (file_read_all(log, &text, &len, &e) != ST_OK) return;
    size_t o = 0;
    for (char *p = strstr(text, "\"event\":\"step\""); p; p = strstr(p + 1, "\"event\":\"step\"")) {
        char *l = strstr(p, "\"loss\":"), *end = l ? strchr(l, ',') : NULL;
        if (!end) break;
        size_t n = (size_t)(end - l);
        if (o + n + 2 < cap) memcpy(out + o, l, n), o += n, out[o++] = ';';
    }
    out[o] = 0;
    free(text);
}

static TrainResult run_or_die(TrainConfig *c) {
    TrainResult r;
    Err e;
    if (train_run(c, &r, &e) != ST_OK) {
        printf("train_run failed: %s\n", e.msg);
        exit(1);
    }
    return r;
}

static void copy_file(const char *from, const char *to) {
    char *t = tu_slurp(from);
    FILE *f = fopen(to, "w");
    if (f && t) fputs(t, f);
    if (f) fclose(f);
    free(t);
}

/* What the start record of a run (the last one in the log) says about --resume. */
static void last_start_resume(const char *log, long *from, int *found, char *note, size_t cap) {
    cJSON *all = tu_log_records(log);
    const cJSON *o, *start = NULL;
    cJSON_ArrayForEach(o, all) {
        const cJSON *ev = cJSON_GetObjectItemCaseSensitive(o, "event");
        if (cJSON_IsString(ev) && !strcmp(ev->valuestring, "start")) start = o;
    }
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(start, "resume");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(start, "resumed_from_step");
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(rs, "note");
    *from = cJSON_IsNumber(f) ? (long)f->valuedouble : -1;
    *found = cJSON_IsBool(cJSON_GetObjectItemCaseSensitive(rs, "found"))
                 ? cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rs, "found")) : -1;
    snprintf(note, cap, "%s", cJSON_IsString(n) ? n->valuestring : "(none)");
    cJSON_Delete(all);
}

static void test_split(const char *name, int async, int bf16) {
    char n1[64], n2[64];
    snprintf(n1, sizeof n1, "%s_full", name);
    snprintf(n2, sizeof n2, "%s_split", name);
    TrainConfig full = base(n1, 100);
    full.ckpt_async = async, full.bf16 = bf16;
    run_or_die(&full);
    TrainConfig half = base(n2, 100);
    half.stop_after = 50;
    half.ckpt_async = async, half.bf16 = bf16;
    half.ckpt_every = 20;
    run_or_die(&half);
    char neg_log[256];
    snprintf(neg_log, sizeof neg_log, DIR "/%s_empty.jsonl", name);
    copy_file(half.log_path, neg_log); /* the first half's records, for the negative control */
    TrainConfig rest = base(n2, 100);
    rest.ckpt_async = async, rest.bf16 = bf16;
    snprintf(rest.resume, sizeof rest.resume, "auto");
    TrainResult rr = run_or_die(&rest);
    static char a[1 << 16], b[1 << 16];
    losses(full.log_path, a, sizeof a);
    losses(rest.log_path, b, sizeof b);
    char wa[1200], wb[1200], name_buf[128];
    snprintf(wa, sizeof wa, "%s/model.safetensors", full.out_dir);
    snprintf(wb, sizeof wb, "%s/model.safetensors", rest.out_dir);
    int sw = tu_same_file(wa, wb);
    snprintf(name_buf, sizeof name_buf, "resume %s%s: 100 steps == 50 + resume + 50 (accumulation 2, dropout, epoch crossed)",
             async ? "async checkpoints" : "sync checkpoints", bf16 ? ", bf16" : "");
    tu_check(!strcmp(a, b) && strlen(a) > 100 && sw, name_buf, "losses %s, final weights memcmp %s",
             strcmp(a, b) ? "DIFFER" : "identical", sw ? "identical" : "DIFFER");
    char why[512];
    int resumed = tu_log_resumed(rest.log_path, 50, 100, 1, 1, why, sizeof why);
    snprintf(name_buf, sizeof name_buf, "resume %s%s: resumed from step 50, steps 51.. follow the first run's 1..50 in the log",
             async ? "async checkpoints" : "sync checkpoints", bf16 ? ", bf16" : "");
    tu_check(resumed && rr.start_step == 50, name_buf, "TrainResult.start_step %ld; %s", rr.start_step, why);
    if (async || bf16) return;

    /* Negative control: the same resume pointed at an empty --ckpt-dir starts afresh, which the
     * comparison above cannot tell from a resume; the resume checks must. */
    TrainConfig neg = base("sync_empty", 100);
    snprintf(neg.log_path, sizeof neg.log_path, "%s", neg_log);
    snprintf(neg.resume, sizeof neg.resume, "auto");
    Err e;
    file_mkdirs(neg.ckpt_dir, &e);
    TrainResult nr = run_or_die(&neg);
    losses(neg.log_path, b, sizeof b);
    snprintf(wb, sizeof wb, "%s/model.safetensors", neg.out_dir);
    int old_pass = !strcmp(a, b) && tu_same_file(wa, wb);
    int caught = !tu_log_resumed(neg.log_path, 50, 100, 1, 1, why, sizeof why) && nr.start_step != 50;
    tu_check(old_pass && caught, "negative control: a resume from an empty --ckpt-dir passes losses+weights, "
             "the resume checks catch it", "losses and weights %s the uninterrupted run's; start_step %ld; %s",
             old_pass ? "equal" : "DIFFER from", nr.start_step, why);
    long from;
    int found;
    char note[512];
    last_start_resume(neg.log_path, &from, &found, note, sizeof note);
    tu_check(from == 0 && found == 0 && strstr(note, "no checkpoint"),
             "--resume auto with nothing to resume says so in the start record",
             "resumed_from_step %ld, resume.found %d, note \"%s\"", from, found, note);
}

static void test_config_kinds(void) {
    TrainResult r;
    Err e;
    TrainConfig c = base("kinds", 30);
    c.ckpt_every = 10;
    run_or_die(&c);
    TrainConfig m = base("kinds", 40);
    snprintf(m.resume, sizeof m.resume, "auto");
    m.model.n_embd = 64;
    Status st = train_run(&m, &r, &e);
    tu_check(st == ST_ERR_INPUT && strstr(e.msg, "model.channels"), "resume refuses a changed model field", "%s", e.msg);
    TrainConfig t = base("kinds", 40);
    snprintf(t.resume, sizeof t.resume, "auto");
    t.sched.lr = 1e-3f;
    st = train_run(&t, &r, &e);
    tu_check(st == ST_ERR_INPUT && strstr(e.msg, "lr"), "resume refuses a changed trajectory field", "%s", e.msg);
    snprintf(t.overrides, sizeof t.overrides, "lr");
    st = train_run(&t, &r, &e);
    tu_check(st == ST_OK && r.start_step == 30, "an explicit --override lets it through", "status %d, started after %ld", st,
             r.start_step);
    TrainConfig f = base("kinds", 50);
    snprintf(f.resume, sizeof f.resume, "auto");
    snprintf(f.overrides, sizeof f.overrides, "lr");
    f.sched.lr = 1e-3f;
    f.threads = 1; /* free field */
    st = train_run(&f, &r, &e);
    tu_check(st == ST_OK && r.start_step == 40, "a free field (threads) may change, --steps extends", "status %d: %s", st,
             st ? e.msg : "ok");
    /* The refused resumes wrote nothing; the two accepted ones continue the log. */
    TuLogRun lr[4];
    int n = tu_log_runs(c.log_path, lr, 4);
    int ok = n == 3;
    static const long from[3] = {0, 30, 40}, last[3] = {30, 40, 50};
    for (int i = 0; ok && i < 3; i++)
        ok = lr[i].resumed_from == from[i] && lr[i].found == (i > 0) && lr[i].first_step == from[i] + 1 &&
             lr[i].last_step == last[i] && lr[i].consecutive;
    tu_check(ok, "resumes with an override and with --steps extended: each resumed where the last stopped",
             "%d runs in the log: resumed_from_step %ld/%ld/%ld, steps %ld..%ld, %ld..%ld, %ld..%ld", n,
             lr[0].resumed_from, n > 1 ? lr[1].resumed_from : -1, n > 2 ? lr[2].resumed_from : -1, lr[0].first_step,
             lr[0].last_step, n > 1 ? lr[1].first_step : -1, n > 1 ? lr[1].last_step : -1, n > 2 ? lr[2].first_step : -1,
             n > 2 ? lr[2].last_step : -1);
}

/* The fp16 loss scaler's and the health detectors' options are trajectory fields: a resume that
 * changes them is refused (they used to be missing from the config record, so --loss-scale-window
 * changed the run silently and --loss-scale was ignored), --override lets them through and the
 * override acts (the scale restarts at the given value). Control: the same options resume. */
static void test_scaler_health_kinds(void) {
    TrainResult r;
    Err e;
    TrainConfig c = base("scalerkinds", 20);
    c.fp16 = 1, c.ckpt_every = 10, c.loss_scale_window = 500;
    run_or_die(&c);
    TrainConfig same = c;
    same.steps = 25;
    snprintf(same.resume, sizeof same.resume, "auto");
    Status st = train_run(&same, &r, &e);
    tu_check(st == ST_OK && r.start_step == 20, "control: fp16 resumes with the same scaler options", "%s",
             st ? e.msg : "ok");
    TrainConfig w = same;
    w.steps = 30, w.loss_scale_window = 2;
    st = train_run(&w, &r, &e);
    tu_check(st == ST_ERR_INPUT && strstr(e.msg, "loss_scale_window"), "resume refuses a changed --loss-scale-window",
             "%s", st ? e.msg : "accepted");
    TrainConfig ls = same;
    ls.steps = 30, ls.loss_scale = 8;
    st = train_run(&ls, &r, &e);
    tu_check(st == ST_ERR_INPUT && strstr(e.msg, "loss_scale"), "resume refuses a changed --loss-scale", "%s",
             st ? e.msg : "accepted");
    snprintf(ls.overrides, sizeof ls.overrides, "loss_scale");
    st = train_run(&ls, &r, &e);
    tu_check(st == ST_OK && r.start_step == 25 && r.final_loss_scale == 8.0f,
             "--override loss_scale restarts the scale at the given value", "%s, final scale %g (65536 kept: ignored)",
             st ? e.msg : "ok", r.final_loss_scale);
    TrainConfig h = ls; /* the checkpoint at 30 records loss scale 8 */
    h.steps = 40, h.overrides[0] = 0;
    h.health.policy = HEALTH_POLICY_SKIP;
    st = train_run(&h, &r, &e);
    tu_check(st == ST_ERR_INPUT && strstr(e.msg, "config field health"), "resume refuses a changed --spike-policy", "%s",
             st ? e.msg : "accepted");
    snprintf(h.overrides, sizeof h.overrides, "health"); /* the name the refusal gives */
    st = train_run(&h, &r, &e);
    tu_check(st == ST_OK && r.start_step == 30, "--override health lets it through", "%s", st ? e.msg : "ok");
}

/* The binary, SIGTERM mid-run: exit 0 with a checkpoint; --resume auto finishes identically. */
static void test_sigterm(void) {
    const char *args = "--layers 2 --heads 2 --channels 32 --vocab 97 --max-seq-len 32 --seq-len 32 --micro-batch 4 "
                       "--grad-accum 2 --dropout 0.1 --lr 2e-3 --min-lr 2e-4 --warmup 5 --val-every 0 "
                       "--peak-gflops 100 --quiet --steps 400 --data " DIR "/train.bin";
    char cmd[2048];
    snprintf(cmd, sizeof cmd, ST_BINARY_DIR "/scaletrain train %s --ckpt-dir " DIR "/sig_ref_ckpt --out " DIR
             "/sig_ref_out >/dev/null 2>&1", args);
    int rc = system(cmd);
    pid_t pid = fork();
    if (pid == 0) {
        char *argv[64];
        int n = 0;
        static char buf[2048];
        snprintf(buf, sizeof buf, "%s --ckpt-dir " DIR "/sig_ckpt --out " DIR "/sig_out --log " DIR "/sig.jsonl", args);
        argv[n++] = ST_BINARY_DIR "/scaletrain";
        argv[n++] = "train";
        for (char *t = strtok(buf, " "); t && n < 62; t = strtok(NULL, " ")) argv[n++] = t;
        argv[n] = NULL;
        freopen("/dev/null", "w", stdout);
        execv(argv[0], argv);
        _exit(127);
    }
    /* Wait until training is under way (the log has a step record), then SIGTERM. */
    double t0 = timer_ms();
    for (;;) {
        char *text;
        size_t len;
        Err e;
        int started = 0;
        if (file_read_all(DIR "/sig.jsonl", &text, &len, &e) == ST_OK) {
            started = strstr(text, "\"event\":\"step\",\"step\":20,") != NULL;
            free(text);
        }
        if (started || timer_ms() - t0 > 60000) break;
        usleep(20000);
    }
    kill(pid, SIGTERM);
    int status = 0;
    waitpid(pid, &status, 0);
    char *text = NULL;
    size_t len = 0;
    Err e;
    file_read_all(DIR "/sig.jsonl", &text, &len, &e);
    int preempted = text && strstr(text, "\"preempted\":true") != NULL;
    free(text);
    tu_check(rc == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0 && preempted,
             "SIGTERM: the step finishes, a checkpoint is saved, exit 0", "exit=%d preempted=%d",
             WIFEXITED(status) ? WEXITSTATUS(status) : -1, preempted);
    snprintf(cmd, sizeof cmd, ST_BINARY_DIR "/scaletrain train %s --ckpt-dir " DIR "/sig_ckpt --out " DIR
             "/sig_out --log " DIR "/sig.jsonl --resume auto >/dev/null 2>&1", args);
    rc = system(cmd);
    int same = tu_same_file(DIR "/sig_ref_out/model.safetensors", DIR "/sig_out/model.safetensors");
    tu_check(rc == 0 && same, "SIGTERM + resume == uninterrupted (final weights memcmp)", "resume exit=%d weights %s",
             WEXITSTATUS(rc), same ? "identical" : "DIFFER");
    /* The step it stopped at is the last one logged before the signal (>= 20, when it was sent). */
    char why[512];
    TuLogRun lr[2];
    int resumed = tu_log_resumed(DIR "/sig.jsonl", -1, 400, 1, 1, why, sizeof why);
    int n = tu_log_runs(DIR "/sig.jsonl", lr, 2);
    tu_check(resumed && n == 2 && lr[0].last_step >= 20, "SIGTERM + --resume auto: resumed from the step it stopped at",
             "%s", why);
}

/* "loss;" of the step records of log with step >= from. */
static void losses_from(const char *log, long from, char *out, size_t cap) {
    cJSON *all = tu_log_records(log);
    const cJSON *o;
    size_t n = 0;
    out[0] = 0;
    cJSON_ArrayForEach(o, all) {
        const cJSON *ev = cJSON_GetObjectItemCaseSensitive(o, "event"), *st = cJSON_GetObjectItemCaseSensitive(o, "step");
        const cJSON *l = cJSON_GetObjectItemCaseSensitive(o, "loss");
        if (cJSON_IsString(ev) && !strcmp(ev->valuestring, "step") && cJSON_IsNumber(st) && st->valuedouble >= from &&
            cJSON_IsNumber(l) && n + 40 < cap)
            n += (size_t)snprintf(out + n, cap - n, "%ld:%.17g;", (long)st->valuedouble, l->valuedouble);
    }
    cJSON_Delete(all);
}

static unsigned long long dir_bytes(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "du -sb --apparent-size '%s' 2>/dev/null", dir);
    FILE *f = popen(cmd, "r");
    unsigned long long b = 0;
    if (f && fscanf(f, "%llu", &b) != 1) b = 0;
    if (f) pclose(f);
    return b;
}

static void test_one_pass(void) {
    TrainConfig ref = base("onepass_ref", 12);
    ref.ckpt_dir[0] = 0;
    run_or_die(&ref);
    TrainConfig half = base("onepass", 12);
    half.ckpt_every = 4, half.stop_after = 8;
    run_or_die(&half); /* checkpoints at steps 4 and 8 */
    if (!tu_shell("cd " DIR " && rm -rf op_a op_b op_bad && cp -r onepass_ckpt op_a && cp -r onepass_ckpt op_b && "
            "cp -r onepass_ckpt op_bad"))
        return;
    /* A byte flipped near the end of step 8's weights (tensor data, not the header). */
    FILE *f = fopen(DIR "/op_bad/step_00000008/model.safetensors", "r+b");
    int flipped = f && fseek(f, -16, SEEK_END) == 0;
    int ch = flipped ? fgetc(f) : EOF;
    flipped = flipped && ch != EOF && fseek(f, -16, SEEK_END) == 0 && fputc(ch ^ 0x40, f) != EOF;
    if (f) fclose(f);
    tu_check(flipped, "setup: a byte flipped in step 8's model.safetensors", "%s", flipped ? "done" : "failed");
    char want[4096], got[4096];
    losses_from(ref.log_path, 9, want, sizeof want);

    unsigned long long ck = dir_bytes(DIR "/op_a/step_00000008");
    TrainConfig a = base("op_a", 12);
    snprintf(a.ckpt_dir, sizeof a.ckpt_dir, DIR "/op_a");
    snprintf(a.resume, sizeof a.resume, "auto");
    TrainResult ra = run_or_die(&a);
    losses_from(a.log_path, 9, got, sizeof got);
    double x = ck ? (double)ra.resume_read_bytes / (double)ck : 0;
    tu_check(ra.start_step == 8 && !strcmp(got, want) && strlen(want) > 20 && x >= 0.9 && x <= 1.4,
             "resume reads the checkpoint's data once", "start_step %ld, steps 9-12 %s the uninterrupted run's; read %llu "
             "bytes for a checkpoint of %llu (%.2fx, want 0.9-1.4)", ra.start_step, strcmp(got, want) ? "DIFFER from" : "equal",
             ra.resume_read_bytes, ck, x);
    TrainConfig b = base("op_b", 12);
    snprintf(b.ckpt_dir, sizeof b.ckpt_dir, DIR "/op_b");
    snprintf(b.resume, sizeof b.resume, "auto");
    b.faults.resume_verify_first = 1;
    TrainResult rb = run_or_die(&b);
    double xb = ck ? (double)rb.resume_read_bytes / (double)ck : 0;
    tu_check(xb >= 1.8, "negative control: verifying before loading (the old resume) reads 1.8x or more",
             "%.2fx (%llu bytes)", xb, rb.resume_read_bytes);

    TrainConfig c = base("op_bad", 12);
    snprintf(c.ckpt_dir, sizeof c.ckpt_dir, DIR "/op_bad");
    snprintf(c.resume, sizeof c.resume, "auto");
    TrainResult rc = run_or_die(&c);
    losses_from(ref.log_path, 5, want, sizeof want);
    losses_from(c.log_path, 5, got, sizeof got);
    long from;
    int found;
    char note[1024];
    last_start_resume(c.log_path, &from, &found, note, sizeof note);
    tu_check(rc.start_step == 4 && from == 4 && !strcmp(got, want) && strstr(note, "refused on load") &&
                 strstr(note, "falling back") && strstr(note, "step_00000004"),
             "a checkpoint whose data fails verification on load is refused; the run continues from the one before",
             "start_step %ld, steps 5-12 %s the uninterrupted run's; note: %s", rc.start_step,
             strcmp(got, want) ? "DIFFER from" : "equal", note);
    TrainConfig d = base("op_bad_explicit", 12);
    snprintf(d.resume, sizeof d.resume, DIR "/op_bad/step_00000008");
    d.ckpt_dir[0] = 0;
    TrainResult rd;
    Err e;
    Status st = train_run(&d, &rd, &e);
    tu_check(st == ST_ERR_INPUT && strstr(e.msg, "model.safetensors") && strstr(e.msg, "checksum"),
             "control: the corrupt checkpoint named explicitly is refused on load, naming the file", "%s",
             st == ST_OK ? "loaded" : e.msg);
}

int main(void) {
    system("rm -rf " DIR);
    make_data();
    test_split("sync", 0, 0);
    test_split("async", 1, 0);
    test_split("bf16", 0, 1);
    test_config_kinds();
    test_scaler_health_kinds();
    test_sigterm();
    test_one_pass();
    return tu_exit();
}
