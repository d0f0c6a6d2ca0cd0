/* test_plan_inputs.c — `scaletrain plan` on input that was accepted and ignored or mis-planned
 * (the audit of 2026-11-29), each against its own oracle:
 *  - refusals: exit 2 and one stderr line naming the flag (--global-batch whose micro-batch count
 *    overflowed an int, --params 0 beside a model, an empty string for any string option,
 *    --no-overlap at dp 1, --no-noise-scale where the plan books no noise-scale collective,
 *    --heads that a Llama preset's KV heads do not divide, a hardware profile's negative or
 *    fractional figure); each with a control that plans (exit 0) and, where the flag acts, the JSON
 *    field it changes;
 *  - --heads on a Llama preset against the trainer's own config (model_config_preset, the override,
 *    model_config_num_params): the preset's KV heads are kept, as train keeps them;
 *  - plan --help: a value the help names as a sentinel ("(0: ...)") is accepted when given.
 * The runs use --hardware cpu-zen4-2c or ST_PEAK_CACHE=off: nothing here depends on this machine. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "core/fileio.h"
#include "model/config.h"
#include "testutil.h"

#define BIN ST_BINARY_DIR "/scaletrain"
#define TMP ST_BINARY_DIR "/test_plan_inputs"
#define BASE "--model d6 --vocab 257 --micro-batch 4 --seq-len 128 --hardware cpu-zen4-2c"

/* Runs `plan ARGS`, stdout to TMP/out.txt, stderr to TMP/err.txt; the exit code (-1: no exit). */
static int run_plan(const char *args) {
    char cmd[8192];
    /* timeout: a hang fails the check instead of the suite */
    snprintf(cmd, sizeof cmd, "timeout 60 %s plan %s > %s/out.txt 2> %s/err.txt", BIN, args, TMP, TMP);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* 1 if `plan ARGS` exits 2 with one stderr line holding `want`; detail says what came instead. */
static int refused(const char *args, const char *want, char *detail, size_t n) {
    int code = run_plan(args);
    char *text = tu_slurp(TMP "/err.txt");
    int lines = 0;
    for (const char *p = text; p && *p; p++) lines += *p == '\n';
    int ok = code == 2 && lines == 1 && text && strstr(text, want);
    if (text && *text && text[strlen(text) - 1] == '\n') text[strlen(text) - 1] = '\0';
    snprintf(detail, n, "exit=%d lines=%d stderr=\"%s\"", code, lines, text ? text : "");
    free(text);
    return ok;
}

static void expect_error(const char *name, const char *args, const char *want) {
    char d[1200];
    tu_check(refused(args, want, d, sizeof d), name, "%s", d);
}

/* `plan ARGS --json`: its object (caller deletes) or NULL; *code its exit code. */
static cJSON *plan_json(const char *args, int *code) {
    char a[4096];
    snprintf(a, sizeof a, "%s --json", args);
    *code = run_plan(a);
    char *text = tu_slurp(TMP "/out.txt");
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    free(text);
    return j;
}

static double jnum(const cJSON *j, const char *path) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *tok = strtok(buf, "."); tok && j; tok = strtok(NULL, ".")) j = cJSON_GetObjectItemCaseSensitive(j, tok);
    return cJSON_IsNumber(j) ? j->valuedouble : NAN;
}

/* --global-batch: sequences / (B·dp) micro-batches per step in an int. The quotient was truncated:
 * at B 8, 8e10 planned 1.1e10 sequences with exit 0; at B 4, 2e10 became -1474836480, refused as a
 * --grad-accum never given. Control: 8e9 / 4 = 2e9 fits and is planned exactly. */
static void test_global_batch(void) {
    expect_error("--global-batch over INT_MAX micro-batches is refused", BASE " --global-batch 80000000000",
                 "--global-batch 80000000000: expected at most 2147483647 micro-batches per step");
    int code;
    cJSON *j = plan_json(BASE " --global-batch 8000000000", &code);
    double k = jnum(j, "batch.grad_accum"), seqs = jnum(j, "batch.sequences");
    tu_check(code == 0 && k == 2e9 && seqs == 8e9, "control: --global-batch 8e9 plans k = 2e9, 8e9 sequences",
             "exit=%d k=%.17g sequences=%.17g", code, k, seqs);
    cJSON_Delete(j);
}

/* --params given as 0: beside a model it was ignored (the model planned, exit 0). */
static void test_params_zero(void) {
    expect_error("--params 0 with --model is refused", BASE " --params 0", "--params: expected either --params or a model");
    expect_error("--params 0 alone is refused by its own flag", "--params 0 --hardware cpu-zen4-2c",
                 "--params: expected a positive whole parameter count, found 0");
}

/* A flag's bound, as train's: above it refused (want), at it planned (the control). --lora-rank
 * above min(in, out) of the narrowest targeted layer (plan priced 27 GiB at 3000000 on d6; train
 * refuses it in lora_layout_init), --threads above 1024 (plan priced 1e8 threads' attention scratch,
 * 55,147 GiB). */
static void test_bounds(void) {
    static const struct { const char *over, *want, *at; } B[] = {
        {" --lora-rank 3000000", "--lora-rank: expected 1..384 (min(in, out) = min(384, 1152) of the targeted layer "
                                 "attn.c_attn", " --lora-rank 384"},
        {" --threads 100000000", "--threads: expected 0 (auto) or 1..1024, found 100000000", " --threads 1024"},
    };
    for (size_t i = 0; i < sizeof B / sizeof B[0]; i++) {
        char args[256], name[160];
        snprintf(args, sizeof args, "%s%s", BASE, B[i].over);
        snprintf(name, sizeof name, "%s, above the bound, is refused", B[i].over + 1);
        expect_error(name, args, B[i].want);
        snprintf(args, sizeof args, "%s%s", BASE, B[i].at);
        int code;
        cJSON *j = plan_json(args, &code);
        snprintf(name, sizeof name, "control: %s (the bound) plans", B[i].at + 1);
        tu_check(code == 0 && j, name, "exit=%d", code);
        cJSON_Delete(j);
    }
}

/* Every string option given '' read as absent: --pp-layers '' planned the default split, --scaling ''
 * no fit, --model '' beside a shape the shape, --lora-targets '' the default targets. */
static void test_empty_strings(void) {
    static const struct { const char *flag, *context; } S[] = {
        {"model", "--layers 2 --heads 2 --channels 64 --hardware cpu-zen4-2c"},
        {"arch", "--layers 2 --heads 2 --channels 64 --hardware cpu-zen4-2c"},
        {"pp-layers", BASE " --pp 2 --grad-accum 2"},
        {"pp-schedule", BASE " --pp 2 --grad-accum 2"},
        {"scaling", BASE},
        {"lora-targets", BASE " --lora-rank 4"},
        {"lora-base-precision", BASE " --lora-rank 4"},
        {"precision", BASE},
        {"optimizer", BASE},
        {"recompute", BASE},
        {"activations", BASE},
        {"accounting", BASE},
        {"hardware", "--model d6"},
        {"measure-hardware", ""},
    };
    int bad = 0;
    char first[1400] = "";
    for (size_t i = 0; i < sizeof S / sizeof S[0]; i++) {
        char args[1024], want[128], d[1200];
        snprintf(args, sizeof args, "%s --%s ''", S[i].context, S[i].flag);
        snprintf(want, sizeof want, "--%s: expected a", S[i].flag);
        if (!refused(args, want, d, sizeof d)) {
            if (!bad) snprintf(first, sizeof first, "--%s: %s", S[i].flag, d);
            bad++;
        }
    }
    tu_check(bad == 0, "an empty string for each string option is refused naming it", "%zu options, %d accepted%s%s",
             sizeof S / sizeof S[0], bad, bad ? ": " : "", first);
    /* controls: the contexts plan without the empty value */
    int c1 = run_plan(BASE " --pp 2 --grad-accum 2 --pp-layers 3,3"), c2 = run_plan(BASE " --lora-rank 4");
    tu_check(c1 == 0 && c2 == 0, "control: --pp-layers 3,3 and --lora-rank 4 plan", "exit %d, %d", c1, c2);
}

/* --no-overlap at dp 1 and --no-noise-scale where nothing books the estimator's collectives changed
 * no figure of the plan (train refuses both there). Controls: where they act, the field differs. */
static void test_inert_flags(void) {
    expect_error("--no-overlap at --dp 1 is refused", BASE " --no-overlap",
                 "--no-overlap: would change nothing here; expected data parallelism");
    expect_error("--no-noise-scale at dp 1, k 1 is refused", BASE " --no-noise-scale",
                 "--no-noise-scale: would change nothing here");
    expect_error("--no-noise-scale with a pipeline is refused", BASE " --dp 2 --pp 2 --grad-accum 2 --no-noise-scale",
                 "--no-noise-scale: would change nothing here");
    expect_error("--no-noise-scale with --params is refused", "--params 1e9 --dp 2 --hardware cpu-zen4-2c --no-noise-scale",
                 "--no-noise-scale: would change nothing here");
    int ca, cb, cc, cd;
    cJSON *a = plan_json(BASE " --dp 2", &ca), *b = plan_json(BASE " --dp 2 --no-overlap", &cb);
    double sa = jnum(a, "compute.step_s"), sb = jnum(b, "compute.step_s");
    tu_check(ca == 0 && cb == 0 && sb > sa, "control: --no-overlap at --dp 2 lengthens the step", "%.9g -> %.9g s", sa, sb);
    cJSON_Delete(a), cJSON_Delete(b);
    /* dp from --nodes: the check runs after --nodes sets it */
    a = plan_json(BASE " --nodes 2 --no-overlap", &ca);
    tu_check(ca == 0 && jnum(a, "layout.dp") == 2, "control: --nodes 2 --no-overlap plans (dp 2 from the world)",
             "exit=%d dp=%g", ca, jnum(a, "layout.dp"));
    cJSON_Delete(a);
    a = plan_json(BASE " --tp 2 --grad-accum 2", &cc), b = plan_json(BASE " --tp 2 --grad-accum 2 --no-noise-scale", &cd);
    double na = jnum(a, "comm_bytes_by_kind.scalar collective"), nb = jnum(b, "comm_bytes_by_kind.scalar collective");
    tu_check(cc == 0 && cd == 0 && na > nb, "control: --no-noise-scale at tp 2, k 2 drops the estimator's all-gathers",
             "scalar collective %.17g -> %.17g bytes", na, nb);
    cJSON_Delete(a), cJSON_Delete(b);
}

/* --heads on a Llama preset: the trainer keeps the preset's KV heads (cmd_train model_flags); plan
 * set them to --heads (llama3-8b --heads 64 planned 64 KV heads, where the trainer builds 8). Oracle:
 * model_config_num_params of the preset's config with n_head overridden. Control: a GPT-2 preset's
 * KV heads follow --heads (it has no GQA). */
static void test_llama_heads(void) {
    ModelConfig c = {0};
    Err e;
    int ok = model_config_preset(&c, "llama3-8b", &e) == ST_OK;
    c.n_head = 64;
    ok = ok && model_config_validate(&c, &e) == ST_OK;
    double want = ok ? (double)model_config_num_params(&c) : -1;
    int code;
    cJSON *j = plan_json("--model llama3-8b --heads 64 --hardware H100 --memory-gib 1000", &code);
    double kv = jnum(j, "model.kv_heads"), n = jnum(j, "parameters.total");
    tu_check(code == 0 && kv == c.n_kv_head && kv == 8 && n == want,
             "--model llama3-8b --heads 64 plans the trainer's model (8 KV heads, its parameter count)",
             "exit=%d kv_heads=%g (trainer %d), parameters %.17g (trainer %.17g)", code, kv, c.n_kv_head, n, want);
    cJSON_Delete(j);
    /* negative control of the oracle: with 64 KV heads the count differs */
    c.n_kv_head = 64;
    double mha = model_config_validate(&c, &e) == ST_OK ? (double)model_config_num_params(&c) : -1;
    tu_check(mha != want && mha > 0, "negative control: 64 KV heads give another count", "%.17g vs %.17g", mha, want);
    j = plan_json(BASE " --heads 3", &code);
    tu_check(code == 0 && jnum(j, "model.kv_heads") == 3, "control: --model d6 --heads 3 has 3 KV heads", "exit=%d kv=%g",
             code, jnum(j, "model.kv_heads"));
    cJSON_Delete(j);
    expect_error("--heads not a multiple of the preset's KV heads is refused naming --heads",
                 "--model llama-7b --heads 16 --hardware H100",
                 "--heads 16: expected a multiple of --model llama-7b's 32 KV heads");
}

/* A hardware profile FILE: a negative latency or backend figure, a fractional or zero
 * devices_per_node (2.5 was truncated to 2; 0 was refused as the --devices-per-node flag). */
static void test_profile_file(void) {
    static const struct { const char *edit, *want; } P[] = {
        {"\"devices_per_node\": 2.5", "hardware profile: devices_per_node: expected a whole number 1..1000000, found 2.5"},
        {"\"devices_per_node\": 0", "hardware profile: devices_per_node: expected a whole number 1..1000000, found 0"},
        {"\"backend_bytes\": -5", "hardware profile: backend_bytes: expected a number >= 0, found -5"},
        {"\"intra_lat\": -1", "hardware profile: intra_lat: expected a number >= 0, found -1"},
        /* a misspelt key was ignored: the preset's figure priced the plan */
        {"\"memroy\": 5e9", "hardware profile: unknown key 'memroy' (expected peak_fp32, "},
        {"\"memory\": 5e9, \"memory_bytes\": 5e9", "hardware profile: expected one of memory and memory_bytes, found both"},
        {"\"devices_per_node\": 4", NULL}, /* control: a whole count is taken */
    };
    for (size_t i = 0; i < sizeof P / sizeof P[0]; i++) {
        char path[512], args[1024], name[256];
        snprintf(path, sizeof path, TMP "/hw%zu.json", i);
        FILE *f = fopen(path, "w");
        if (f) fprintf(f, "{\"name\": \"test\", \"peak_fp32\": 1e12, \"mem_bw\": 1e11, \"matmul_eff\": 0.5, %s}\n", P[i].edit),
            fclose(f);
        snprintf(args, sizeof args, "--model d6 --vocab 257 --micro-batch 4 --seq-len 128 --hardware %s", path);
        if (P[i].want) {
            snprintf(name, sizeof name, "profile with %s is refused naming the key", P[i].edit);
            expect_error(name, args, P[i].want);
        } else {
            int code;
            cJSON *j = plan_json(args, &code);
            tu_check(code == 0 && jnum(j, "hardware.devices_per_node") == 4, "control: profile with devices_per_node 4",
                     "exit=%d devices_per_node=%g", code, jnum(j, "hardware.devices_per_node"));
            cJSON_Delete(j);
        }
    }
}

/* `plan --json`'s "hardware" object, saved as a file, is a profile that prices the same plan (its
 * memory_bytes is read as memory: a copy of it used to price on the preset's memory). Negative
 * control: the object with its memory_bytes renamed is refused. */
static void test_json_hardware_roundtrip(void) {
    int code;
    cJSON *j = plan_json("--model d6 --vocab 257 --micro-batch 4 --seq-len 128 --hardware H100 --memory-gib 7", &code);
    cJSON *hw = cJSON_DetachItemFromObjectCaseSensitive(j, "hardware");
    double peak = hw ? cJSON_GetObjectItemCaseSensitive(hw, "peak_bf16")->valuedouble : 0;
    char *text = hw ? cJSON_Print(hw) : NULL;
    FILE *f = text ? fopen(TMP "/hwjson.json", "w") : NULL;
    if (f) fputs(text, f), fclose(f);
    free(text);
    cJSON *back = plan_json("--model d6 --vocab 257 --micro-batch 4 --seq-len 128 --hardware " TMP "/hwjson.json", &code);
    tu_check(code == 0 && jnum(back, "hardware.memory_bytes") == 7.0 * 1073741824.0 && jnum(back, "hardware.peak_bf16") == peak,
             "plan --json's hardware object read back as a profile keeps its memory", "exit=%d memory %.17g, peak %g vs %g",
             code, jnum(back, "hardware.memory_bytes"), jnum(back, "hardware.peak_bf16"), peak);
    cJSON_Delete(back);
    if (hw) { /* negative control */
        cJSON_AddItemToObject(hw, "memory_byte", cJSON_DetachItemFromObjectCaseSensitive(hw, "memory_bytes"));
        char *t2 = cJSON_Print(hw);
        FILE *g = t2 ? fopen(TMP "/hwjson2.json", "w") : NULL;
        if (g) fputs(t2, g), fclose(g);
        free(t2);
    }
    expect_error("negative control: the object with memory_bytes misspelt is refused",
                 "--model d6 --vocab 257 --micro-batch 4 --seq-len 128 --hardware " TMP "/hwjson2.json",
                 "hardware profile: unknown key 'memory_byte'");
    cJSON_Delete(hw);
    cJSON_Delete(j);
}

/* plan --help: a value named as a sentinel, "(N: meaning)", is accepted when given (the help said
 * "--weight-bytes ... (0: from --precision)" and 0 was refused). Negative control: the check on
 * such a value (--weight-bytes 0) reports it. */
static int sentinel_accepted(const char *flag, long v, char *d, size_t n) {
    char args[512];
    /* a context where every option applies: a pipeline (--pp-microbatches) and dp 2 */
    snprintf(args, sizeof args, BASE " --pp 2 --dp 2 --grad-accum 2 --%s %ld", flag, v);
    int code = run_plan(args);
    snprintf(d, n, "--%s %ld: exit %d", flag, v, code);
    return code == 0;
}

static void test_help_sentinels(void) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s plan --help > %s/help.txt", BIN, TMP);
    int rc = system(cmd);
    char *help = tu_slurp(TMP "/help.txt");
    int nsent = 0, bad = 0;
    char first[256] = "";
    for (char *line = help; rc == 0 && line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        char flag[64];
        if (sscanf(line, "  --%63[a-z0-9-]", flag) == 1)
            for (char *p = line + 1; *p; p++) {
                if (p[-1] != '(' && p[-1] != ' ') continue;
                char *end;
                long v = strtol(p, &end, 10);
                if (end == p || *end != ':' || (*p != '-' && (*p < '0' || *p > '9'))) continue;
                char d[256];
                nsent++;
                if (!sentinel_accepted(flag, v, d, sizeof d) && !bad++) snprintf(first, sizeof first, "%s", d);
            }
        line = nl ? nl + 1 : NULL;
    }
    free(help);
    tu_check(rc == 0 && nsent >= 3 && bad == 0, "plan --help: every '(N: ...)' value is accepted", "%d sentinels, %d refused%s%s",
             nsent, bad, bad ? ": " : "", first);
    char d[256];
    tu_check(!sentinel_accepted("weight-bytes", 0, d, sizeof d), "negative control: --weight-bytes 0 is refused", "%s", d);
}

int main(void) {
    setenv("ST_PEAK_CACHE", "off", 1); /* no measured profile: the same plans on every machine */
    Err e;
    if (file_mkdirs(TMP, &e) != ST_OK) {
        tu_check(0, "mkdir " TMP, "%s", e.msg);
        return tu_exit();
    }
    test_global_batch();
    test_params_zero();
    test_bounds();
    test_empty_strings();
    test_inert_flags();
    test_llama_heads();
    test_profile_file();
    test_json_hardware_roundtrip();
    test_help_sentinels();
    return tu_exit();
}
