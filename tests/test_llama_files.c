/* test_llama_files.c — Hugging Face LlamaForCausalLM files in and out (issue 15).
 *
 * Oracle: tests/fixtures/foreign/llama_reference.bin, the float64 logits that
 * tests/fixtures/gen_llama_ref.py (an independent PyTorch Llama) computes from the weights it wrote
 * into foreign/hf_llama/ (F32), hf_llama_bf16/ (BF16) and hf_llama_sharded/ (two files and
 * model.safetensors.index.json). Checks:
 *   - each folder's config.json gives the model, --init-from's loader fills it, and our training
 *     forward (gpt_logits) matches the reference logits within 1e-5 relative (bf16: against the
 *     logits of the bf16-rounded weights);
 *   - the sharded folder loads the same floats as the single file;
 *   - our export (fp32) loads back bit-exactly and re-exports byte-identical files; bf16 export with
 *     a small --max-shard-size gives a sharded folder that loads to the bf16-rounded weights;
 *   - the broken folders (KV heads not dividing the heads, a tensor missing, k_proj of a wrong shape,
 *     hidden_act gelu) are refused with one line naming the file and the field; neg_llama_ropescaling
 *     (llama3 rope_scaling, refused before issue 27) loads with its RoPE parameters;
 *   - `scaletrain export` of the sharded folder to bf16 gives the bf16 logits; a bad --dtype is one line.
 * Negative control: a copy of hf_llama whose k_proj and v_proj names are swapped (same shapes with
 * KV heads) loads but must fail the logits check. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "ckpt/safetensors.h"
#include "core/fileio.h"
#include "fixture.h"
#include "model/gpt.h"
#include "testutil.h"

#define FOREIGN ST_SOURCE_DIR "/tests/fixtures/foreign"
#define TMP ST_BINARY_DIR "/test_llama_files"
#define BIN ST_BINARY_DIR "/scaletrain"

static Fixture g_ref;
static const FixtureEntry *need(const char *name) {
    const FixtureEntry *e = fixture_get(&g_ref, name);
    if (!e) printf("reference entry %s missing\n", name), exit(1);
    return e;
}

/* Loads folder dir as --init-from does into a model built from its config.json. Returns the
 * status; *g is built on ST_OK (caller frees). */
static Status load(const char *dir, Gpt *g, Err *err) {
    ModelConfig cfg;
    Status st = st_load_hf_config(dir, &cfg, NULL, 0, err);
    if (st != ST_OK) return st;
    GptOptions o = gpt_default_options();
    o.T = cfg.max_seq, o.threads = 2;
    if ((st = gpt_init(g, &cfg, &o, NULL, err)) != ST_OK) return st;
    if ((st = ckpt_init_from(&g->w, dir, err)) != ST_OK) gpt_free(g);
    return st;
}

/* Relative error of our logits for the reference inputs against entry `want`; NaN on failure. */
static double logits_err(const char *dir, const char *want) {
    Gpt g;
    Err e;
    if (load(dir, &g, &e) != ST_OK) {
        printf("%s: %s\n", dir, e.msg);
        return NAN;
    }
    const FixtureEntry *in = need("inputs"), *ref = need(want);
    int T = (int)in->numel, V = g.w.cfg.vocab;
    float *lg = malloc(sizeof(float) * (size_t)T * V);
    double r = gpt_logits(&g, in->data, T, lg, &e) == ST_OK ? tu_rel_err_fd(lg, ref->data, (size_t)T * V) : NAN;
    free(lg);
    gpt_free(&g);
    return r;
}

static int files_equal(const char *a, const char *b) {
    char *x = NULL, *y = NULL;
    size_t nx = 0, ny = 0;
    Err e;
    int ok = file_read_all(a, &x, &nx, &e) == ST_OK && file_read_all(b, &y, &ny, &e) == ST_OK && nx == ny &&
             memcmp(x, y, nx) == 0;
    free(x), free(y);
    return ok;
}

/* config.json's float fields as the decimal that was set: the file we read says "rms_norm_eps":
 * 1e-05; our export must say a number equal to it as a double (a reader in float64, like Python's
 * json, then sees 1e-05, not 9.99999975e-06). Control: the float printed with %.9g, as exports did
 * before, must fail the same comparison. */
static void config_numbers_as_given(void) {
    static const char *KEYS[] = {"rms_norm_eps", "rope_theta"};
    char *src = tu_slurp(FOREIGN "/hf_llama/config.json"), *out = tu_slurp(TMP "/out1/config.json");
    cJSON *a = src ? cJSON_Parse(src) : NULL, *b = out ? cJSON_Parse(out) : NULL;
    for (int i = 0; i < 2; i++) {
        const cJSON *va = cJSON_GetObjectItemCaseSensitive(a, KEYS[i]), *vb = cJSON_GetObjectItemCaseSensitive(b, KEYS[i]);
        int ok = cJSON_IsNumber(va) && cJSON_IsNumber(vb) && va->valuedouble == vb->valuedouble;
        char what[128], old[32];
        snprintf(what, sizeof what, "export writes %s as the value read (%s)", KEYS[i], "float64-equal");
        tu_check(ok, what, "read %.17g, written %.17g", va ? va->valuedouble : NAN, vb ? vb->valuedouble : NAN);
        snprintf(old, sizeof old, "%.9g", va ? (float)va->valuedouble : 0.0f);
        if (i == 0)
            tu_check(va && strtod(old, NULL) != va->valuedouble, "negative control: the float printed with %.9g is "
                     "not the value read", "%s vs %.17g", old, va ? va->valuedouble : NAN);
    }
    cJSON_Delete(a), cJSON_Delete(b);
    free(src), free(out);
}

static void round_trip(void) {
    Gpt a, b;
    Err e;
    if (load(FOREIGN "/hf_llama", &a, &e) != ST_OK) {
        tu_check(0, "round trip: load hf_llama", "%s", e.msg);
        return;
    }
    Status st = st_save_hf(&a.w, TMP "/out1", "", &e);
    st = st == ST_OK ? load(TMP "/out1", &b, &e) : st;
    int same = st == ST_OK && memcmp(a.w.params, b.w.params, a.w.layout.total * sizeof(float)) == 0;
    if (st == ST_OK) st = st_save_hf(&b.w, TMP "/out2", "", &e);
    int bytes = st == ST_OK && files_equal(TMP "/out1/model.safetensors", TMP "/out2/model.safetensors") &&
                files_equal(TMP "/out1/config.json", TMP "/out2/config.json");
    tu_check(same && bytes, "our Llama export loads back bit-exactly and re-exports byte-identical files", "%s%s",
             same ? "weights equal" : "weights differ", bytes ? ", files identical" : ", files differ");
    config_numbers_as_given();
    /* Sharded single-file: the same floats. */
    Gpt c;
    st = load(FOREIGN "/hf_llama_sharded", &c, &e);
    int sh = st == ST_OK && memcmp(a.w.params, c.w.params, a.w.layout.total * sizeof(float)) == 0;
    tu_check(sh, "hf_llama_sharded (two files + index) loads the same floats as hf_llama", "%s",
             st == ST_OK ? (sh ? "equal" : "differ") : e.msg);
    if (st == ST_OK) gpt_free(&c);
    /* bf16 export in shards of at most 16 KB, loaded back: every weight is its bf16 rounding. */
    st = st_save_hf_opts(&a.w, TMP "/out_bf16", "", 1, 16000, &e);
    char ix[512];
    snprintf(ix, sizeof ix, "%s/out_bf16/model.safetensors.index.json", TMP);
    int sharded = st == ST_OK && access(ix, F_OK) == 0;
    st = st == ST_OK ? load(TMP "/out_bf16", &c, &e) : st;
    size_t bad = 0;
    for (size_t i = 0; st == ST_OK && i < a.w.layout.total; i++) {
        uint32_t u;
        memcpy(&u, &a.w.params[i], 4);
        u = (u + 0x7fffu + ((u >> 16) & 1)) & 0xffff0000u;
        float r;
        memcpy(&r, &u, 4);
        bad += r != c.w.params[i];
    }
    tu_check(st == ST_OK && sharded && bad == 0, "bf16 export with --max-shard-size 16000: sharded, loads to the bf16 "
             "rounding of every weight", "%s, %zu of %zu differ", sharded ? "index written" : "no index", bad,
             a.w.layout.total);
    if (st == ST_OK) gpt_free(&c);
    /* weight_map lists every tensor of its files: the same folder with one entry dropped is refused
     * (the tensor was read from whichever file held it) */
    {
        char cmd[2048], *text = NULL;
        size_t len;
        snprintf(cmd, sizeof cmd, "rm -rf %s/ix_unlisted && cp -r %s/out_bf16 %s/ix_unlisted", TMP, TMP, TMP);
        int cp = system(cmd) == 0 && file_read_all(TMP "/ix_unlisted/model.safetensors.index.json", &text, &len, &e) == ST_OK;
        cJSON *ixj = cp ? cJSON_ParseWithLength(text, len) : NULL;
        free(text);
        cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(ixj, "weight_map"), "model.norm.weight");
        char *out = ixj ? cJSON_Print(ixj) : NULL;
        FILE *fo = out ? fopen(TMP "/ix_unlisted/model.safetensors.index.json", "wb") : NULL;
        if (fo) fputs(out, fo), fclose(fo);
        free(out), cJSON_Delete(ixj);
        st = fo ? load(TMP "/ix_unlisted", &c, &e) : ST_ERR_RUNTIME;
        tu_check(st == ST_ERR_INPUT && strstr(e.msg, "expected weight_map to list every tensor of its files, found "
                                                      "model.norm.weight in"),
                 "an index whose weight_map leaves out a tensor of its files is refused", "%s", st ? e.msg : "loaded");
        if (st == ST_OK) gpt_free(&c);
    }
    gpt_free(&a);
    gpt_free(&b);
}

/* A copy of hf_llama with k_proj and v_proj swapped (names only). */
static void make_swapped(void) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "rm -rf %s/swapped && mkdir -p %s/swapped && cp %s/hf_llama/config.json %s/swapped/",
             TMP, TMP, FOREIGN, TMP);
    if (system(cmd) != 0) return;
    char *buf;
    size_t len;
    Err e;
    if (file_read_all(FOREIGN "/hf_llama/model.safetensors", &buf, &len, &e) != ST_OK) return;
    /* Same-length names: swap the letters k and v in "self_attn.k_proj" / "self_attn.v_proj" of the header. */
    uint64_t hl;
    memcpy(&hl, buf, 8);
    for (size_t i = 8; i + 16 < 8 + hl; i++) {
        if (!memcmp(buf + i, "self_attn.k_proj", 16)) buf[i + 10] = 'v';
        else if (!memcmp(buf + i, "self_attn.v_proj", 16)) buf[i + 10] = 'k';
    }
    FILE *f = fopen(TMP "/swapped/model.safetensors", "wb");
    if (f) fwrite(buf, 1, len, f), fclose(f);
    free(buf);
}

static void negatives(void) {
    static const struct { const char *dir, *want; } N[] = {
        {"neg_llama_kv", "num_key_value_heads"},
        {"neg_llama_missing", "model.layers.1.mlp.up_proj.weight missing"},
        {"neg_llama_kshape", "model.layers.0.self_attn.k_proj.weight: expected shape"},
        {"neg_llama_act", "hidden_act"},
    };
    for (size_t i = 0; i < sizeof N / sizeof N[0]; i++) {
        char dir[1024], what[256];
        snprintf(dir, sizeof dir, "%s/%s", FOREIGN, N[i].dir);
        Gpt g;
        Err e = {0};
        Status st = load(dir, &g, &e);
        if (st == ST_OK) gpt_free(&g);
        int named = st != ST_OK && strstr(e.msg, N[i].want) && strstr(e.msg, N[i].dir) && !strchr(e.msg, '\n');
        snprintf(what, sizeof what, "%s refused with one line naming the file and %s", N[i].dir, N[i].want);
        tu_check(named, what, "%s", st == ST_OK ? "loaded" : e.msg);
    }
    /* neg_llama_ropescaling (transformers 4's llama3 rope_scaling) was refused before llama3 RoPE
     * existed (issue 27); it now loads with its parameters (test_hf_config checks the frequencies). */
    ModelConfig c;
    Err e = {0};
    Status st = st_load_hf_config(FOREIGN "/neg_llama_ropescaling", &c, NULL, 0, &e);
    tu_check(st == ST_OK && c.rope_type == ROPE_LLAMA3 && c.rope_factor == 8.0f && c.rope_low_freq_factor == 1.0f &&
             c.rope_high_freq_factor == 4.0f && c.rope_orig_max_seq == 8192 && c.rope_theta == 10000.0f,
             "neg_llama_ropescaling (rope_scaling llama3) loads as llama3 RoPE, factor 8, 1, 4, 8192", "%s %s factor %g",
             st == ST_OK ? "" : e.msg, model_rope_type_name(c.rope_type), st == ST_OK ? c.rope_factor : 0.0f);
}

int main(void) {
    char msg[512];
    if (fixture_load(&g_ref, FOREIGN "/llama_reference.bin", msg, sizeof msg) != 0) {
        printf("%s\n", msg);
        return 1;
    }
    if (system("rm -rf " TMP " && mkdir -p " TMP) != 0) return 1;
    double f32 = logits_err(FOREIGN "/hf_llama", "logits");
    tu_check(f32 <= 1e-5, "hf_llama (F32) through --init-from: logits match the float64 PyTorch Llama", "rel_err %.3g "
             "(tol 1e-5)", f32);
    double bf = logits_err(FOREIGN "/hf_llama_bf16", "logits_bf16");
    tu_check(bf <= 1e-5, "hf_llama_bf16 (BF16 tensors): logits match the reference of the bf16-rounded weights",
             "rel_err %.3g (tol 1e-5)", bf);
    double sh = logits_err(FOREIGN "/hf_llama_sharded", "logits");
    tu_check(sh <= 1e-5, "hf_llama_sharded: logits match", "rel_err %.3g (tol 1e-5)", sh);
    make_swapped();
    double sw = logits_err(TMP "/swapped", "logits");
    tu_check(sw > 1e-3, "negative control: k_proj and v_proj swapped fails the logits check", "rel_err %.3g", sw);
    round_trip();
    negatives();
    /* The CLI: export of a Hugging Face folder, and a bad --dtype refused with one line. */
    int rc = system(BIN " export " FOREIGN "/hf_llama_sharded -o " TMP "/cli_export --dtype bf16 > " TMP "/cli.out 2>&1");
    double ce = rc == 0 ? logits_err(TMP "/cli_export", "logits_bf16") : NAN;
    tu_check(rc == 0 && ce <= 1e-5, "scaletrain export hf_llama_sharded --dtype bf16: the folder gives the bf16 logits",
             "exit %d, rel_err %.3g", rc, ce);
    rc = system(BIN " export " FOREIGN "/hf_llama -o " TMP "/cli_bad --dtype fp8 > " TMP "/cli_bad.out 2>&1");
    char *text = NULL;
    size_t len = 0;
    Err e;
    int ok = file_read_all(TMP "/cli_bad.out", &text, &len, &e) == ST_OK;
    tu_check(ok && WEXITSTATUS(rc) == 2 && strstr(text, "--dtype") && len == strlen(text) &&
             strchr(text, '\n') == text + len - 1, "export --dtype fp8 refused with one line naming --dtype",
             "exit %d: %.200s", WEXITSTATUS(rc), ok ? text : "");
    free(text);
    /* The Llama flags with --init-from of a Llama folder and no --arch: the run is a Llama, so they are
     * checked against the file (the same value trains; they were refused as "expected --arch llama"
     * before the file was read); on a GPT-2 they are still refused. A hand-written llm.c shard of
     * ids below hf_llama's 61. */
    {
        int32_t hdr[256] = {20240520, 1, 400};
        uint16_t ids[400];
        for (int i = 0; i < 400; i++) ids[i] = (uint16_t)(i * 7 % 61);
        FILE *f = fopen(TMP "/v61.bin", "wb");
        if (f) fwrite(hdr, 4, 256, f), fwrite(ids, 2, 400, f), fclose(f);
        const char *args = " --data " TMP "/v61.bin --seq-len 8 --micro-batch 2 --steps 1 --threads 1 --quiet";
        char cmd[2048];
        snprintf(cmd, sizeof cmd, BIN " train --init-from " FOREIGN "/hf_llama --norm-eps 1e-5 --kv-heads 2 --rope-theta "
                 "10000%s > " TMP "/lflags.out 2>&1", args);
        rc = system(cmd);
        char *lt = tu_slurp(TMP "/lflags.out");
        tu_check(rc == 0, "train --init-from a Llama folder with --norm-eps/--kv-heads/--rope-theta equal to its config: "
                 "trains", "exit %d: %.300s", WEXITSTATUS(rc), lt ? lt : "");
        free(lt);
        snprintf(cmd, sizeof cmd, BIN " train --init-from " FOREIGN "/hf_llama --rope-theta 500000%s > " TMP
                 "/lflags2.out 2>&1", args);
        rc = system(cmd);
        lt = tu_slurp(TMP "/lflags2.out");
        tu_check(WEXITSTATUS(rc) == 2 && lt && strstr(lt, "rope_theta 10000: expected this run's"),
                 "... another --rope-theta is checked against the file and refused", "exit %d: %.300s", WEXITSTATUS(rc),
                 lt ? lt : "");
        free(lt);
        snprintf(cmd, sizeof cmd, BIN " train --layers 1 --heads 2 --channels 16 --vocab 61 --max-seq-len 8 --rope-theta "
                 "500000%s > " TMP "/lflags3.out 2>&1", args);
        rc = system(cmd);
        lt = tu_slurp(TMP "/lflags3.out");
        tu_check(WEXITSTATUS(rc) == 2 && lt && strstr(lt, "--rope-theta: expected a Llama"),
                 "control: --rope-theta on a GPT-2 is refused", "exit %d: %.300s", WEXITSTATUS(rc), lt ? lt : "");
        free(lt);
    }
    fixture_free(&g_ref);
    return tu_exit();
}
