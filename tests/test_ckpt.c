/* test_ckpt.c — checkpoint save/load, corruption, truncation, fault injection, kill -9,
 * retention, resolve fallback and asynchronous save.
 *
 * Oracles: memcmp of params, moments and master weights and field-by-field equality of the
 * state after save → load (bit-exact, tolerance 0); every single-byte flip and every truncation
 * of every file is refused with the file named; after a save aborted at any stage (error return,
 * _exit, SIGSTOP + kill -9, and kill -9 at random instants) the newest checkpoint that
 * `resolve auto` returns loads and equals what was saved for that step.
 *
 * Asynchronous save blocking (ckpt_async_blocks_only_for_copy): oracle a plain memcpy of the same
 * state between buffers already mapped, timed here (best of 3); every save, the first included,
 * of the best of 3 savers (each with its own staging) must return within 6 x that + 100 ms (tolerance for the thread start, the meta copy and the
 * load of a shared 2-core machine) while its background write is slowed by 1 s
 * (CkptOptions.faults: stage begin, mode slow). Negative controls, which must exceed the bound: the
 * test-only fault ckpt_async_sync (the save waits for its own write), and what the first save did before
 * issue 12 (allocate fresh staging and copy into it: a page fault per 4 KiB). */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "ckpt/safetensors.h"
#include "core/fileio.h"
#include "core/rng.h"
#include "core/timer.h"
#include "testutil.h"

#define TMP ST_BINARY_DIR "/test_ckpt_tmp"

typedef struct {
    Gpt g;
    float *m, *v, *master;
} State;

static ModelConfig model_cfg(int L, int C, int V) {
    ModelConfig m = {L, 4, C, V, 0, 32, 0.0f};
    Err e;
    if (model_config_validate(&m, &e) != ST_OK) abort();
    return m;
}

static void state_init(State *s, const ModelConfig *mc) {
    Err e;
    memset(s, 0, sizeof *s);
    if (gpt_init(&s->g, mc, NULL, NULL, &e) != ST_OK) abort();
    size_t n = s->g.w.layout.total;
    s->m = calloc(n, 4), s->v = calloc(n, 4), s->master = calloc(n, 4);
}

/* Random values in every real element (padding stays zero, as in training). */
static void state_fill(State *s, uint64_t seed) {
    gpt_init_params(&s->g, seed);
    float *bufs[3] = {s->m, s->v, s->master};
    const ParamLayout *pl = &s->g.w.layout;
    for (int b = 0; b < 3; b++) {
        memset(bufs[b], 0, pl->total * 4);
        for (int k = 0; k < pl->ntensors; k++) {
            const TensorInfo *t = &pl->tensors[k];
            size_t n = (size_t)t->rows_real * (t->ndim == 2 ? (size_t)t->shape[1] : 1);
            for (size_t i = 0; i < n; i++) bufs[b][t->offset + i] = rng_normal(seed + (uint64_t)b, (uint64_t)k, i);
        }
    }
}

static void state_free(State *s) {
    gpt_free(&s->g);
    free(s->m), free(s->v), free(s->master);
}

static int state_equal(const State *a, const State *b) {
    size_t n = a->g.w.layout.total * 4;
    return !memcmp(a->g.w.params, b->g.w.params, n) && !memcmp(a->m, b->m, n) && !memcmp(a->v, b->v, n) &&
           !memcmp(a->master, b->master, n);
}

static CkptOptState opt_of(State *s) { return (CkptOptState){s->m, s->v, s->master}; }

/* The trainer-style config (names as train.c's config_json). */
static cJSON *make_config(void) {
    cJSON *o = cJSON_CreateObject();
    cJSON *m = cJSON_AddObjectToObject(o, "model");
    cJSON_AddNumberToObject(m, "layers", 2);
    cJSON_AddNumberToObject(m, "channels", 32);
    cJSON_AddStringToObject(o, "data", "data/x_*.bin");
    cJSON_AddNumberToObject(o, "lr", 6e-4f);
    cJSON_AddNumberToObject(o, "micro_batch", 4);
    return o;
}

static CkptMeta make_meta(long step) {
    CkptMeta m = {0};
    m.step = step;
    m.tokens_seen = 0xFFFFFFFFFFFFFFF1ull - (uint64_t)step; /* > 2^53: must survive exactly */
    m.sched_step = step;
    m.loader = (LoaderState){42, (uint64_t)step * 8};
    snprintf(m.optimizer, sizeof m.optimizer, "adamw");
    m.optim_step = step;
    m.dp = 1, m.tp = 1, m.pp = 1, m.zero = 0;
    ckpt_meta_set_rng(&m, "init_seed", 1337);
    ckpt_meta_set_rng(&m, "dropout_counter", UINT64_MAX - 7);
    ckpt_meta_set_scaler(&m, "scale", 65536.0);
    ckpt_meta_set_scaler(&m, "growth_interval_frac", 0.1);
    m.config = make_config();
    return m;
}

static int meta_equal(const CkptMeta *a, const CkptMeta *b) {
    if (a->step != b->step || a->tokens_seen != b->tokens_seen || a->sched_step != b->sched_step ||
        a->loader.seed != b->loader.seed || a->loader.consumed != b->loader.consumed || strcmp(a->optimizer, b->optimizer) ||
        a->optim_step != b->optim_step || a->dp != b->dp || a->tp != b->tp || a->pp != b->pp || a->zero != b->zero ||
        a->nrng != b->nrng || a->nscaler != b->nscaler)
        return 0;
    for (int i = 0; i < a->nrng; i++)
        if (strcmp(a->rng[i].name, b->rng[i].name) || a->rng[i].value != b->rng[i].value) return 0;
    for (int i = 0; i < a->nscaler; i++)
        if (strcmp(a->scaler[i].name, b->scaler[i].name) || memcmp(&a->scaler[i].value, &b->scaler[i].value, 8)) return 0;
    return cJSON_Compare(a->config, b->config, 1);
}

static void sh(const char *fmt, const char *arg) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, fmt, arg);
    if (system(cmd) != 0) fprintf(stderr, "command failed: %s\n", cmd);
}

/* The test fault save() passes on (core/fault.h; zero: none). */
static Faults g_faults;

/* Sets the save fault: the save torn at `stage` ("" = none), mode 0 error, 1 _exit(3), 2 SIGSTOP,
 * 3 a sleep (Faults.ckpt_fail_mode; 1 s unless Faults.ckpt_slow_ms). */
static void fail_at(Faults *f, const char *stage, int mode) {
    snprintf(f->ckpt_fail_stage, sizeof f->ckpt_fail_stage, "%s", stage);
    f->ckpt_fail_mode = mode;
}

static Status save(State *s, const char *dir, long step, int keep_last, int keep_every, Err *e) {
    CkptMeta m = make_meta(step);
    CkptOptions o = ckpt_default_options();
    o.dir = dir, o.keep_last = keep_last, o.keep_every = keep_every, o.tokenizer = "bytes";
    o.faults = g_faults;
    CkptOptState op = opt_of(s);
    Status st = ckpt_save(&s->g.w, &op, &m, &o, NULL, e);
    ckpt_meta_free(&m);
    return st;
}

/* Loads path into a fresh state and compares it with the state seeded `seed`. */
static int loads_as(const ModelConfig *mc, const char *path, uint64_t seed, long step) {
    State want, got;
    state_init(&want, mc);
    state_fill(&want, seed);
    state_init(&got, mc);
    CkptOptState op = opt_of(&got);
    CkptMeta meta, ref = make_meta(step);
    Err e = {0};
    int ok = ckpt_load(path, &got.g.w, &op, &meta, &e) == ST_OK;
    if (!ok) printf("  load %s: %s\n", path, e.msg);
    ok = ok && state_equal(&want, &got) && meta_equal(&meta, &ref);
    if (ok) ckpt_meta_free(&meta);
    ckpt_meta_free(&ref);
    state_free(&want);
    state_free(&got);
    return ok;
}

static const char *const FILES4[] = {"model.safetensors", "config.json", "optimizer.safetensors", "state.json"};

typedef struct {
    int calls, monotone;
    uint64_t last_done, total;
} LoadCount;

static void count_progress(void *ctx, uint64_t done, uint64_t total) {
    LoadCount *c = ctx;
    if (c->calls == 0) c->monotone = 1;
    if (done < c->last_done || done > total || (c->calls && total != c->total)) c->monotone = 0;
    c->calls++, c->last_done = done, c->total = total;
}

static void test_round_trip(const ModelConfig *mc) {
#define RT TMP "/rt"
    const char *dir = RT;
    State a;
    state_init(&a, mc);
    state_fill(&a, 7);
    Err e = {0};
    Status st = save(&a, dir, 100, 3, 0, &e);
    tu_check(st == ST_OK, "ckpt_save", "%s", st == ST_OK ? "" : e.msg);
    tu_check(loads_as(mc, RT "/step_00000100", 7, 100), "ckpt_round_trip_bitexact",
             "params, m, v, master memcmp; step, tokens, loader, rng, scaler, parallel, config equal");
    char *text;
    size_t len;
    int ok = file_read_all(RT "/latest", &text, &len, &e) == ST_OK && !strcmp(text, "step_00000100\n");
    if (ok) free(text);
    tu_check(ok, "ckpt_latest_pointer", "latest = step_00000100");
    /* The folder also opens as plain Hugging Face weights. */
    State b;
    state_init(&b, mc);
    ok = st_load_hf_weights(&b.g.w, RT "/step_00000100", &e) == ST_OK &&
         !memcmp(a.g.w.params, b.g.w.params, a.g.w.layout.total * 4);
    tu_check(ok, "ckpt_model_is_hf_folder", "st_load_hf_weights on the checkpoint directory, memcmp");
    /* Load progress: calls in order, ending at the sizes on disk of the model and optimizer files. */
    {
        LoadCount lc = {0};
        State p;
        state_init(&p, mc);
        CkptOptState pop = opt_of(&p);
        Status pst = ckpt_load_progress(RT "/step_00000100", &p.g.w, &pop, NULL, count_progress, &lc, &e);
        uint64_t want = 0;
        for (int i = 0; i < 3; i += 2) {
            char fp[256];
            struct stat sb;
            snprintf(fp, sizeof fp, RT "/step_00000100/%s", FILES4[i]);
            if (stat(fp, &sb) == 0) want += (uint64_t)sb.st_size;
        }
        tu_check(pst == ST_OK && lc.calls >= 2 && lc.monotone && lc.last_done == want && lc.total == want &&
                     !memcmp(p.g.w.params, a.g.w.params, a.g.w.layout.total * 4),
                 "ckpt_load_progress", "%d calls, last %llu of %llu, files %llu bytes, %s", lc.calls,
                 (unsigned long long)lc.last_done, (unsigned long long)lc.total, (unsigned long long)want,
                 lc.monotone ? "monotone" : "NOT monotone");
        state_free(&p);
    }
    /* Wrong model shape is refused naming the tensor. */
    ModelConfig other = model_cfg(mc->n_layer, mc->n_embd, mc->vocab + 1);
    State c;
    state_init(&c, &other);
    CkptOptState op = opt_of(&c);
    st = ckpt_load(RT "/step_00000100", &c.g.w, &op, NULL, &e);
    tu_check(st == ST_ERR_INPUT && strstr(e.msg, "wte.weight") && strstr(e.msg, "expected shape"),
             "ckpt_load_wrong_shape", "%s", e.msg);
    state_free(&a), state_free(&b), state_free(&c);
}


static void test_corruption(const ModelConfig *mc) {
    const char *dir = TMP "/rt/step_00000100";
    int flips = 0, detected = 0, named = 0;
    char path[1024], first_bad[1500] = "";
    for (int f = 0; f < 4; f++) {
        snprintf(path, sizeof path, "%s/%s", dir, FILES4[f]);
        char *buf;
        size_t len;
        Err e = {0};
        if (file_read_all(path, &buf, &len, &e) != ST_OK) continue;
        size_t pos[16];
        int np = 0;
        pos[np++] = 0, pos[np++] = 7, pos[np++] = 8, pos[np++] = len / 2, pos[np++] = len - 1, pos[np++] = len - 2;
        pos[np++] = len - 20, pos[np++] = len - 30;
        for (int r = 0; r < 8; r++) pos[np++] = (size_t)rng_below(3, (uint64_t)f, (uint64_t)r, len);
        for (int i = 0; i < np; i++) {
            FILE *fp = fopen(path, "r+b");
            unsigned char byte = (unsigned char)buf[pos[i]] ^ 0x01; /* the smallest flip: one bit */
            fseek(fp, (long)pos[i], SEEK_SET), fputc(byte, fp), fclose(fp);
            flips++;
            Status st = ckpt_verify(dir, &e);
            if (st != ST_OK) detected++;
            if (st != ST_OK && strstr(e.msg, FILES4[f])) named++;
            else if (!first_bad[0])
                snprintf(first_bad, sizeof first_bad, "%s@%zu: %.900s", FILES4[f], pos[i], st ? e.msg : "accepted");
            fp = fopen(path, "r+b");
            fseek(fp, (long)pos[i], SEEK_SET), fputc((unsigned char)buf[pos[i]], fp), fclose(fp);
        }
        if (f == 0) {
            /* One flip must also stop ckpt_load (not only ckpt_verify). */
            FILE *fp = fopen(path, "r+b");
            fseek(fp, (long)len / 2, SEEK_SET), fputc((unsigned char)buf[len / 2] ^ 0x80, fp), fclose(fp);
            State s;
            state_init(&s, mc);
            CkptOptState op = opt_of(&s);
            Status st = ckpt_load(dir, &s.g.w, &op, NULL, &e);
            tu_check(st == ST_ERR_INPUT && strstr(e.msg, "model.safetensors") && strstr(e.msg, "mismatch"),
                     "ckpt_load_refuses_flip", "%s", e.msg);
            state_free(&s);
            fp = fopen(path, "r+b");
            fseek(fp, (long)len / 2, SEEK_SET), fputc((unsigned char)buf[len / 2], fp), fclose(fp);
        }
        free(buf);
    }
    Err e = {0};
    tu_check(flips == detected && detected == named && ckpt_verify(dir, &e) == ST_OK, "ckpt_byte_flip_detected",
             "%d/%d flips over 4 files refused naming the file; restored copy verifies %s", named, flips, first_bad);
    /* Truncation: minus one byte, half, empty. */
    int cases = 0, refused = 0;
    char sample[1100] = "";
    for (int f = 0; f < 4; f++) {
        snprintf(path, sizeof path, "%s/%s", dir, FILES4[f]);
        char *buf;
        size_t len;
        file_read_all(path, &buf, &len, &e);
        size_t cut[3] = {len - 1, len / 2, 0};
        for (int c = 0; c < 3; c++) {
            if (truncate(path, (off_t)cut[c]) != 0) continue;
            cases++;
            Status st = ckpt_verify(dir, &e);
            if (st == ST_ERR_INPUT && strstr(e.msg, FILES4[f])) refused++;
            if (f == 0 && c == 0) snprintf(sample, sizeof sample, "%.1000s", e.msg);
            const void *b[1] = {buf};
            size_t l[1] = {len};
            file_write_atomic(path, b, l, 1, &e);
        }
        free(buf);
    }
    tu_check(cases == 12 && refused == cases && ckpt_verify(dir, &e) == ST_OK, "ckpt_truncation_refused",
             "%d/%d truncations refused naming the file, e.g. \"%s\"", refused, cases, sample);
}

static const char *const STAGES[] = {"begin", "model", "config", "optimizer", "state", "sync", "rename", "latest", "prune"};
enum { NSTAGES = 9 };

/* After an interrupted save of step 2 over a completed step 1: resolve auto gives step 1 (or the
 * complete step 2 for stages after the rename), and it loads bit-exactly. */
static int previous_loadable(const ModelConfig *mc, const char *dir, int stage, char *why, size_t n) {
    char out[4096], note[1024];
    Err e = {0};
    if (ckpt_resolve(dir, "auto", out, sizeof out, note, sizeof note, &e) != ST_OK) {
        snprintf(why, n, "resolve: %.900s", e.msg);
        return 0;
    }
    long want = stage >= 7 ? 2 : 1;
    char expect[1024];
    snprintf(expect, sizeof expect, "%s/step_%08ld", dir, want);
    if (strcmp(out, expect)) {
        snprintf(why, n, "resolved %.500s, expected %.400s", out, expect);
        return 0;
    }
    snprintf(expect, sizeof expect, "%s/step_00000001", dir);
    if (!loads_as(mc, expect, 1, 1) || (want == 2 && !loads_as(mc, out, 2, 2))) {
        snprintf(why, n, "load failed");
        return 0;
    }
    return 1;
}

static void test_faults(const ModelConfig *mc) {
    State s1, s2;
    state_init(&s1, mc), state_fill(&s1, 1);
    state_init(&s2, mc), state_fill(&s2, 2);
    char dir[512], why[1024];
    /* 1. error return at each stage */
    int ok_all = 1;
    for (int i = 0; i < NSTAGES; i++) {
        snprintf(dir, sizeof dir, TMP "/fault_%s", STAGES[i]);
        sh("rm -rf %s", dir);
        Err e = {0};
        save(&s1, dir, 1, 5, 0, &e);
        fail_at(&g_faults, STAGES[i], 0);
        Status st = save(&s2, dir, 2, 5, 0, &e);
        fail_at(&g_faults, "", 0);
        int ok = st == ST_ERR_RUNTIME && strstr(e.msg, STAGES[i]) && previous_loadable(mc, dir, i, why, sizeof why);
        /* The failed save removed its partial copy (it used to stay until the next save: on a full
         * disk, holding the space that save needs), and the next save succeeds. */
        char tmpdir[600];
        snprintf(tmpdir, sizeof tmpdir, "%s/.tmp-step_00000002", dir);
        ok = ok && access(tmpdir, F_OK) != 0;
        ok = ok && save(&s2, dir, 3, 5, 0, &e) == ST_OK;
        if (!ok) printf("  stage %s: %s | %s\n", STAGES[i], e.msg, why);
        ok_all &= ok;
    }
    tu_check(ok_all, "ckpt_fault_error_each_stage", "%d stages: save returns the error, previous checkpoint loads", NSTAGES);
    /* 2. _exit(3) at each stage (a forked child), and 3. SIGSTOP + kill -9 at each stage */
    for (int mode = 0; mode < 2; mode++) {
        ok_all = 1;
        for (int i = 0; i < NSTAGES; i++) {
            snprintf(dir, sizeof dir, TMP "/%s_%s", mode ? "kill" : "exit", STAGES[i]);
            sh("rm -rf %s", dir);
            Err e = {0};
            save(&s1, dir, 1, 5, 0, &e);
            pid_t pid = fork();
            if (pid == 0) {
                fail_at(&g_faults, STAGES[i], mode ? 2 : 1);
                save(&s2, dir, 2, 5, 0, &e);
                _exit(0);
            }
            int status = 0, ok;
            if (mode == 0) {
                waitpid(pid, &status, 0);
                ok = WIFEXITED(status) && WEXITSTATUS(status) == 3;
            } else {
                waitpid(pid, &status, WUNTRACED);
                ok = WIFSTOPPED(status);
                kill(pid, SIGKILL);
                waitpid(pid, &status, 0);
                ok = ok && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
            }
            ok = ok && previous_loadable(mc, dir, i, why, sizeof why);
            if (!ok) printf("  %s at %s: %s\n", mode ? "kill" : "exit", STAGES[i], why);
            ok_all &= ok;
        }
        tu_check(ok_all, mode ? "ckpt_kill9_each_stage" : "ckpt_exit_each_stage",
                 "%d stages: child %s mid-save, previous checkpoint resolves and loads bit-exactly", NSTAGES,
                 mode ? "SIGSTOPped then kill -9ed" : "_exit(3)s");
    }
    Err e = {0};
    fail_at(&g_faults, "no_such_stage", 0);
    Status st = save(&s2, TMP "/fault_begin", 4, 5, 0, &e);
    fail_at(&g_faults, "", 0);
    tu_check(st == ST_ERR_INPUT && strstr(e.msg, "unknown stage"), "ckpt_fault_unknown_stage", "%s", e.msg);
    state_free(&s1), state_free(&s2);
}

/* kill -9 at random instants of a child saving in a loop (a bigger model so a save takes long). */
static void test_random_kill(void) {
    ModelConfig mc = model_cfg(4, 192, 2000);
    State s;
    state_init(&s, &mc);
    state_fill(&s, 5);
    const char *dir = TMP "/randkill";
    sh("rm -rf %s", dir);
    Err e = {0};
    double t0 = timer_ms();
    save(&s, dir, 1, 2, 0, &e);
    double ms = timer_ms() - t0;
    int kills = 0, mid = 0, ok_all = 1;
    long next = 2;
    for (int it = 0; it < 12; it++) {
        pid_t pid = fork();
        if (pid == 0) {
            for (long st = next;; st++) save(&s, dir, st, 2, 0, &e);
        }
        long delay_us = (long)(rng_below(9, 0, (uint64_t)it, 1000) * ms * 2.5); /* 0 .. 2.5 saves */
        usleep((useconds_t)delay_us);
        kill(pid, SIGKILL);
        int status;
        waitpid(pid, &status, 0);
        kills++;
        DIR *d = opendir(dir);
        struct dirent *de;
        while (d && (de = readdir(d)))
            if (!strncmp(de->d_name, ".tmp-", 5)) mid++;
        if (d) closedir(d);
        char out[4096], note[1024];
        int ok = ckpt_resolve(dir, "auto", out, sizeof out, note, sizeof note, &e) == ST_OK && out[0];
        State g;
        state_init(&g, &mc);
        CkptOptState op = opt_of(&g);
        ok = ok && ckpt_load(out, &g.g.w, &op, NULL, &e) == ST_OK && state_equal(&s, &g);
        state_free(&g);
        if (!ok) printf("  kill %d: %s\n", it, e.msg);
        ok_all &= ok;
        next += 1000;
    }
    tu_check(ok_all && mid > 0, "ckpt_kill9_random", "%d kills at random instants (save %.1f ms), %d landed mid-write; "
             "resolve auto + load bit-exact after each", kills, ms, mid);
    state_free(&s);
}

static void test_retention(const ModelConfig *mc) {
    State s;
    state_init(&s, mc), state_fill(&s, 1);
    const char *dir = TMP "/retention";
    sh("rm -rf %s", dir);
    Err e = {0};
    for (long st = 1; st <= 12; st++) save(&s, dir, st, 2, 5, &e);
    char got[256] = "";
    for (long st = 1; st <= 12; st++) {
        char p[512];
        snprintf(p, sizeof p, "%s/step_%08ld", dir, st);
        if (access(p, F_OK) == 0) snprintf(got + strlen(got), sizeof got - strlen(got), "%ld ", st);
    }
    tu_check(!strcmp(got, "5 10 11 12 "), "ckpt_retention", "keep_last 2, keep_every 5 after steps 1..12: kept %s(expected 5 10 11 12)", got);
    state_free(&s);
}

static void flip(const char *path, long pos) {
    FILE *f = fopen(path, "r+b");
    fseek(f, pos, SEEK_SET);
    int c = fgetc(f);
    fseek(f, pos, SEEK_SET);
    fputc(c ^ 0x10, f);
    fclose(f);
}

static void test_resolve(const ModelConfig *mc) {
    State s;
    state_init(&s, mc), state_fill(&s, 1);
    const char *dir = TMP "/resolve";
    sh("rm -rf %s", dir);
    Err e = {0};
    char out[4096], note[1024];
    Status st = ckpt_resolve(dir, "auto", out, sizeof out, note, sizeof note, &e);
    tu_check(st == ST_OK && !out[0], "ckpt_resolve_empty", "no checkpoint: start from scratch (%s)", note);
    for (long k = 1; k <= 3; k++) save(&s, dir, k, 0, 0, &e);
    st = ckpt_resolve(dir, "auto", out, sizeof out, note, sizeof note, &e);
    tu_check(st == ST_OK && strstr(out, "step_00000003") && !note[0], "ckpt_resolve_newest", "%s", out);
    flip(TMP "/resolve/step_00000003/model.safetensors", 1000);
    st = ckpt_resolve(dir, "auto", out, sizeof out, note, sizeof note, &e);
    tu_check(st == ST_OK && strstr(out, "step_00000002") && strstr(note, "step_00000003/model.safetensors") &&
                 strstr(note, "falling back"), "ckpt_resolve_fallback", "%s | note: %s", out, note);
    flip(TMP "/resolve/step_00000002/state.json", 10);
    st = ckpt_resolve(dir, "auto", out, sizeof out, note, sizeof note, &e);
    tu_check(st == ST_OK && strstr(out, "step_00000001") && strstr(note, "2 newer"), "ckpt_resolve_fallback_twice",
             "%s | note: %s", out, note);
    st = ckpt_resolve(dir, TMP "/resolve/step_00000003", out, sizeof out, note, sizeof note, &e);
    tu_check(st == ST_ERR_INPUT && strstr(e.msg, "model.safetensors"), "ckpt_resolve_explicit_corrupt", "%s", e.msg);
    st = ckpt_resolve(NULL, dir, out, sizeof out, note, sizeof note, &e);
    tu_check(st == ST_OK && strstr(out, "step_00000001"), "ckpt_resolve_path_is_ckpt_dir", "%s", out);
    st = ckpt_resolve(TMP "/resolve/step_00000002", "auto", out, sizeof out, note, sizeof note, &e);
    tu_check(st == ST_ERR_INPUT && strstr(e.msg, "step_00000002/state.json"), "ckpt_resolve_dir_is_checkpoint",
             "a checkpoint directory as dir is explicit (no fallback): %s", e.msg);
    st = ckpt_resolve(TMP "/resolve/step_00000001", "auto", out, sizeof out, note, sizeof note, &e);
    tu_check(st == ST_OK && strstr(out, "resolve/step_00000001"), "ckpt_resolve_dir_is_checkpoint_ok", "%s", out);
    truncate(TMP "/resolve/step_00000001/optimizer.safetensors", 100);
    st = ckpt_resolve(dir, "auto", out, sizeof out, note, sizeof note, &e);
    tu_check(st == ST_ERR_INPUT && !strncmp(e.msg, "no valid checkpoint in ", 23), "ckpt_resolve_all_corrupt", "%s", e.msg);
    /* The library names paths, never a command's flag: train says "--resume ...", the weights argument
     * of eval/sample/export the path alone (until 2026-11-29 every message began "--resume ", which
     * the weights argument cut off again). */
    Err e1, e2;
    Status s1 = ckpt_resolve(dir, TMP "/resolve/step_00000003", out, sizeof out, note, sizeof note, &e1);
    Status s2 = ckpt_resolve(NULL, TMP "/resolve/nothing_here", out, sizeof out, note, sizeof note, &e2);
    tu_check(st != ST_OK && s1 != ST_OK && s2 != ST_OK && !strstr(e.msg, "--resume") && !strstr(e1.msg, "--resume") &&
                 !strncmp(e1.msg, TMP "/resolve/step_00000003: ", strlen(TMP "/resolve/step_00000003: ")) &&
                 !strstr(e2.msg, "--resume") && strstr(e2.msg, "resolve/nothing_here: expected a checkpoint directory"),
             "ckpt_resolve errors name no flag", "%s | %s | %s", e.msg, e1.msg, e2.msg);
    state_free(&s);
}

static void test_async(const ModelConfig *mc) {
    State s, ref;
    state_init(&s, mc), state_fill(&s, 11);
    state_init(&ref, mc), state_fill(&ref, 11);
    const char *dir = TMP "/async";
    sh("rm -rf %s", dir);
    MemStats ms = {0};
    CkptAsync *a = NULL;
    Err e = {0};
    CkptOptState op = opt_of(&s);
    Status st = ckpt_async_init(&a, &s.g.w, &op, &ms, &e);
    CkptMeta m = make_meta(11);
    CkptOptions o = ckpt_default_options();
    o.dir = dir;
    st = st ? st : ckpt_async_save(a, &s.g.w, &op, &m, &o, &e);
    /* Training goes on: the live buffers change while the write is in flight. */
    for (size_t i = 0; i < s.g.w.layout.total; i++) s.g.w.params[i] += 1.0f, s.m[i] -= 1.0f;
    CkptSaveInfo info;
    st = st ? st : ckpt_async_wait(a, &info, &e);
    size_t staged = ms.bytes[MEM_CKPT_STAGING];
    int ok = st == ST_OK && loads_as(mc, info.path, 11, 11) && staged == 4 * s.g.w.layout.total * 4;
    tu_check(ok, "ckpt_async_snapshot", "write of the state as of the call while the buffers change: bit-exact; "
             "staging %zu bytes; copy %.2f ms, write %.2f ms %s", staged, info.ms_copy, info.ms_write, st ? e.msg : "");
    /* A failing background write surfaces at the next wait. */
    fail_at(&o.faults, "state", 0);
    m.step = 12;
    st = ckpt_async_save(a, &s.g.w, &op, &m, &o, &e);
    Status st2 = ckpt_async_wait(a, &info, &e);
    fail_at(&o.faults, "", 0);
    tu_check(st == ST_OK && st2 == ST_ERR_RUNTIME && strstr(e.msg, "state"), "ckpt_async_error", "%s", e.msg);
    ckpt_async_free(a);
    tu_check(ms.bytes[MEM_CKPT_STAGING] == 0, "ckpt_async_free", "staging released");
    ckpt_meta_free(&m);
    state_free(&s), state_free(&ref);
}

/* Milliseconds that copying the state into fresh buffers takes: what ckpt_async_save's first call
 * did when it allocated its staging buffers (mem_alloc zero-fills, so every page faults there). */
/* Minor page faults of this process so far: the count a copy into unmapped memory raises by one
 * per page, whatever the machine's speed at serving them. */
static long minor_faults(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}

static double fresh_copy_ms(const State *s, long *faults) {
    size_t bytes = s->g.w.layout.total * sizeof(float);
    const float *src[4] = {s->g.w.params, s->m, s->v, s->master};
    MemStats ms = {0};
    float *dst[4] = {0};
    long f0 = minor_faults();
    double t0 = timer_ms();
    for (int i = 0; i < 4; i++)
        if ((dst[i] = mem_alloc(&ms, MEM_CKPT_STAGING, bytes))) {
            memcpy(dst[i], src[i], bytes);
            __asm__ volatile("" : : "r"(dst[i]) : "memory");
        }
    double t = timer_ms() - t0;
    *faults = minor_faults() - f0;
    for (int i = 0; i < 4; i++) mem_free(&ms, MEM_CKPT_STAGING, dst[i], bytes);
    return t;
}

static void test_async_blocking(void) {
    /* 12.6 M floats: each buffer above glibc's 32 MiB mmap threshold, so fresh memory is fresh. */
    ModelConfig mc = model_cfg(4, 512, 97);
    State s;
    state_init(&s, &mc);
    size_t bytes = s.g.w.layout.total * sizeof(float);
    /* Values do not matter here, mapped pages do (calloc leaves them unmapped). */
    memset(s.m, 1, bytes), memset(s.v, 2, bytes), memset(s.master, 3, bytes);
    memset(s.g.w.params, 4, bytes); /* the weights too: a first read of untouched pages faults them in */
    /* The oracle: four copies of one buffer between mapped buffers (scratch is mapped by its
     * first copy; the best of three repetitions is the machine's copy speed). */
    float *scratch = malloc(bytes);
    double copy_ms = 1e30;
    memcpy(scratch, s.m, bytes);
    for (int rep = 0; rep < 3; rep++) {
        double t0 = timer_ms();
        for (int i = 0; i < 4; i++) {
            memcpy(scratch, i & 1 ? s.v : s.m, bytes);
            __asm__ volatile("" : : "r"(scratch) : "memory"); /* every copy happens */
        }
        double t = timer_ms() - t0;
        copy_ms = t < copy_ms ? t : copy_ms;
    }
    free(scratch);
    double bound = 6.0 * copy_ms + 100.0;

    const char *dir = TMP "/async_block";
    sh("rm -rf %s", dir);
    CkptOptState op = opt_of(&s);
    CkptMeta m = make_meta(1);
    CkptOptions o = ckpt_default_options();
    o.dir = dir;
    /* every background write slowed by twice the bound (at least 300 ms): a save that waited for
     * its write (the negative control below) blocks past the bound by that margin */
    fail_at(&o.faults, "begin", 3);
    o.faults.ckpt_slow_ms = (int)(2 * bound) > 300 ? (int)(2 * bound) : 300;
    /* Three savers, each with its own staging, as three runs would: the slowest of a saver's two
     * saves, best saver kept (the oracle is a best of three too). The first copy into staging
     * that init mapped varies from run to run on this VM (50-230 ms for 200 MB, seen with the
     * same binary), while the fault this guards against (staging mapped by the first save) makes
     * every first save slow: 600+ ms. */
    double worst = 1e30, t[3] = {0}, best_t[2] = {0};
    long worst_faults = 0; /* the most minor faults of any save: staging mapped at init has none to raise */
    size_t staged = 0;
    Status st = ST_OK, stw = ST_OK;
    Err e = {0};
    CkptAsync *a = NULL;
    MemStats ms[3] = {{{0}}}; /* one per saver: a saver counts into its MemStats until freed */
    for (int run = 0; run < 3 && st == ST_OK; run++) {
        ckpt_async_free(a), a = NULL;
        if ((st = ckpt_async_init(&a, &s.g.w, &op, &ms[run], &e)) != ST_OK) break;
        staged = ms[run].bytes[MEM_CKPT_STAGING];
        double w = 0;
        for (int k = 0; k < 2 && st == ST_OK; k++) {
            m.step = 3 * run + k + 1;
            /* The previous write (slowed) is waited for outside the timed call, as the trainer does
             * before a save. */
            if ((st = ckpt_async_wait(a, NULL, &e)) != ST_OK) break;
            long f0 = minor_faults();
            double t0 = timer_ms();
            st = ckpt_async_save(a, &s.g.w, &op, &m, &o, &e);
            t[k] = timer_ms() - t0;
            long f = minor_faults() - f0;
            worst_faults = f > worst_faults ? f : worst_faults;
            w = t[k] > w ? t[k] : w;
        }
        if (w < worst) worst = w, best_t[0] = t[0], best_t[1] = t[1];
    }
    /* Negative control: a save that waits for its own write. */
    if (st == ST_OK && (st = ckpt_async_wait(a, NULL, &e)) == ST_OK) {
        o.faults.ckpt_async_sync = 1;
        m.step = 10;
        double t0 = timer_ms();
        st = ckpt_async_save(a, &s.g.w, &op, &m, &o, &e);
        t[2] = timer_ms() - t0;
        o.faults.ckpt_async_sync = 0;
    }
    CkptSaveInfo info;
    if (a) stw = ckpt_async_wait(a, &info, &e);
    fail_at(&o.faults, "", 0);
    tu_check(st == ST_OK && stw == ST_OK && staged == 4 * bytes, "ckpt_async_staging_at_init",
             "%zu bytes of staging allocated by ckpt_async_init (want %zu) %s", staged, 4 * bytes,
             st || stw ? e.msg : "");
    tu_check(st == ST_OK && worst <= bound, "ckpt_async_blocks_only_for_copy",
             "state %.0f MB, best of 3 savers: save 1 (the first) blocked %.1f ms, save 2 %.1f ms; bound 6 x copy "
             "%.1f ms + 100 = %.1f ms",
             4.0 * bytes / 1e6, best_t[0], best_t[1], copy_ms, bound);
    /* The fault the first check guards against (staging mapped by the first save) shows in time on
     * some machines (600+ ms) but not on all (90-130 ms for 200 MB on a Zen 5 VM, under the bound
     * above): it always shows in page faults, one per 4 KiB page of staging touched for the first
     * time, so the page-fault count is the check that holds on every machine. */
    long fresh_faults = 0;
    double fresh = fresh_copy_ms(&s, &fresh_faults);
    long pages = (long)(4 * bytes / 4096), fault_bound = pages / 8;
    tu_check(st == ST_OK && worst_faults <= fault_bound, "ckpt_async_save_maps_nothing",
             "the most minor page faults during a save: %ld (staging is %ld pages; bound %ld)", worst_faults, pages,
             fault_bound);
    tu_check(t[2] > bound && fresh_faults > fault_bound, "ckpt_async_blocking_negative_controls",
             "a save that waits for its write (fault ckpt_async_sync) blocked %.1f ms (must exceed %.1f ms); a copy "
             "into fresh staging (the first save before issue 12) took %.1f ms and raised %ld page faults (must "
             "exceed %ld)", t[2], bound, fresh, fresh_faults, fault_bound);
    ckpt_async_free(a);
    ckpt_meta_free(&m);
    state_free(&s);
}

int main(void) {
    sh("rm -rf %s", TMP);
    ModelConfig mc = model_cfg(2, 32, 97);
    test_round_trip(&mc);
    test_corruption(&mc);
    test_faults(&mc);
    test_retention(&mc);
    test_resolve(&mc);
    test_async(&mc);
    test_async_blocking();
    test_random_kill();
    if (tu_failures == 0) sh("rm -rf %s", TMP);
    return tu_exit();
}
