/* test_init_foreign.c — `--init-from` on weight files this project did not write.
 *
 * Fixtures: tests/fixtures/foreign/, written by tests/fixtures/gen_foreign_ckpt.py (PyTorch, no
 * scaletrain code): Hugging Face GPT-2 safetensors folders (GPT2LMHeadModel with "transformer."
 * names, U8 attn.bias / attn.masked_bias buffers and a tied lm_head.weight; GPT2Model without
 * prefix and an F32 attn.bias), both in Conv1D layout, and llm.c's gpt2_124M.bin layout
 * (version 3, vocabulary padded to 128) of the same small random GPT-2.
 *
 * Oracle: the logits of every position of a fixed input computed by PyTorch in float64 from the
 * Hugging Face tensors; ours come from ckpt_peek_config + ckpt_init_from + gpt_logits in float32:
 * ||ours - ref|| / ||ref|| <= 1e-5 (float32 rounding of a 2-layer model is ~1e-7).
 * Through the CLI: `scaletrain train --init-from hf_lmhead` on a shard holding the same input: the
 * loss of step 1 equals the mean cross-entropy computed here from the reference logits (1e-5
 * relative), and `--init-from neg_heads` exits 2 with one line naming config.json and n_head.
 * Negative controls:
 *   neg_linear   c_proj stored as nn.Linear (square, so it loads): the logits check must fail;
 *   llm.c header patched (version 5, another head count, a Vp that does not match the data),
 *   a missing tensor, an unused tensor (a third layer), an untied lm_head, a config.json whose
 *   n_head or activation differs: each a one-line ST_ERR_INPUT naming the file and the field or
 *   tensor. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cjson/cJSON.h>

#include "ckpt/ckpt.h"
#include "core/fileio.h"
#include "data/shard.h"
#include "fixture.h"
#include "model/gpt.h"
#include "testutil.h"

#define DIR ST_SOURCE_DIR "/tests/fixtures/foreign"
#define TMP ST_BINARY_DIR "/test_init_foreign"
#define TOL 1e-5

static ModelConfig want;
static const int32_t *inputs;
static const double *ref;
static int T;

/* Loads path into a model of the fixture's shape; logits (T, V) on success. */
static Status load(const char *path, float *logits, Err *e) {
    Gpt g;
    GptOptions go = gpt_default_options();
    go.T = T;
    Status st = gpt_init(&g, &want, &go, NULL, e);
    if (st == ST_OK) st = ckpt_init_from(&g.w, path, e);
    if (st == ST_OK) st = gpt_logits(&g, inputs, T, logits, e);
    gpt_free(&g);
    return st;
}

static void positive(const char *name, const char *path) {
    Err e = {0};
    ModelConfig c;
    Status st = ckpt_peek_config(path, &c, &e);
    int same = st == ST_OK && c.n_layer == want.n_layer && c.n_head == want.n_head && c.n_embd == want.n_embd &&
               c.vocab == want.vocab && c.max_seq == want.max_seq;
    float *lg = malloc(sizeof(float) * (size_t)T * want.vocab);
    if (same) st = load(path, lg, &e);
    double r = st == ST_OK && same ? tu_rel_err_fd(lg, ref, (size_t)T * want.vocab) : 1.0 / 0.0;
    tu_check(same && st == ST_OK && r <= TOL, name, "config %s, rel=%.3g (tol %g) %s", same ? "matches" : "differs", r,
             TOL, st == ST_OK ? "" : e.msg);
    free(lg);
}

/* The source must load but give other logits. */
static void wrong_logits(const char *name, const char *path) {
    Err e = {0};
    float *lg = malloc(sizeof(float) * (size_t)T * want.vocab);
    Status st = load(path, lg, &e);
    double r = st == ST_OK ? tu_rel_err_fd(lg, ref, (size_t)T * want.vocab) : 0;
    tu_check(st == ST_OK && r > 100 * TOL, name, "loads, rel=%.3g must exceed %g %s", r, 100 * TOL,
             st == ST_OK ? "" : e.msg);
    free(lg);
}

/* The source must be refused with one line naming `file` and containing `what`. */
static void refused(const char *name, const char *path, const char *file, const char *what) {
    Err e = {0};
    float *lg = malloc(sizeof(float) * (size_t)T * want.vocab);
    Status st = load(path, lg, &e);
    int ok = st == ST_ERR_INPUT && strstr(e.msg, file) && strstr(e.msg, what) && !strchr(e.msg, '\n');
    tu_check(ok, name, "%s", st == ST_OK ? "loaded" : e.msg);
    free(lg);
}

/* A copy of the llm.c file with header word i set to v. */
static const char *patched_llmc(int i, int v) {
    static char path[512];
    char *buf;
    size_t len;
    Err e;
    snprintf(path, sizeof path, TMP "/llmc_h%d_%d.bin", i, v);
    if (file_read_all(DIR "/gpt2_llmc.bin", &buf, &len, &e) != ST_OK) return "missing";
    memcpy(buf + 4 * i, &v, 4);
    const void *b[1] = {buf};
    size_t l[1] = {len};
    Status st = file_write_atomic(path, b, l, 1, &e);
    free(buf);
    return st == ST_OK ? path : "unwritable";
}

static int run(const char *cmd) {
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* `scaletrain train` with --init-from src for one step on the reference input; returns the exit
 * code, the logged loss of step 1 in *loss. */
static int train_cli(const char *src, double *loss) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             ST_BINARY_DIR "/scaletrain train --data " TMP "/ref.bin --layers %d --heads %d --channels %d --vocab %d "
                           "--max-seq-len %d --seq-len %d --micro-batch 1 --steps 1 --threads 1 --init-from %s --log " TMP
                           "/train.jsonl --quiet >/dev/null 2>" TMP "/err.txt",
             want.n_layer, want.n_head, want.n_embd, want.vocab, want.max_seq, T - 1, src);
    remove(TMP "/train.jsonl");
    int rc = run(cmd);
    *loss = NAN;
    cJSON *all = tu_log_records(TMP "/train.jsonl"), *o;
    cJSON_ArrayForEach(o, all) {
        const cJSON *ev = cJSON_GetObjectItemCaseSensitive(o, "event"), *l = cJSON_GetObjectItemCaseSensitive(o, "loss");
        if (cJSON_IsString(ev) && !strcmp(ev->valuestring, "step") && cJSON_IsNumber(l) && isnan(*loss))
            *loss = l->valuedouble;
    }
    cJSON_Delete(all);
    return rc;
}

static void cli(void) {
    Err e;
    uint32_t *tok = malloc(sizeof *tok * (size_t)T);
    for (int t = 0; tok && t < T; t++) tok[t] = (uint32_t)inputs[t];
    ShardMeta meta = {0, 0, (uint32_t)want.vocab, 0};
    if (!tok) snprintf(e.msg, sizeof e.msg, "out of memory");
    Status st = tok ? shard_write(TMP "/ref.bin", tok, (size_t)T, &meta, &e) : ST_ERR_RUNTIME;
    free(tok);
    if (st != ST_OK) {
        tu_check(0, "cli_shard", "%s", e.msg);
        return;
    }
    /* Mean cross-entropy of inputs[t+1] under the reference logits of position t. */
    int V = want.vocab;
    double want_loss = 0;
    for (int t = 0; t + 1 < T; t++) {
        const double *row = ref + (size_t)t * V;
        double mx = row[0], s = 0;
        for (int v = 1; v < V; v++) mx = row[v] > mx ? row[v] : mx;
        for (int v = 0; v < V; v++) s += exp(row[v] - mx);
        want_loss += mx + log(s) - row[inputs[t + 1]];
    }
    want_loss /= T - 1;
    double loss;
    int rc = train_cli(DIR "/hf_lmhead", &loss);
    double r = fabs(loss - want_loss) / want_loss;
    tu_check(rc == 0 && r <= TOL, "cli_train_init_from", "step 1 loss %.9f, PyTorch %.9f, rel=%.3g (tol %g)", loss,
             want_loss, r, TOL);
    rc = train_cli(DIR "/neg_heads", &loss);
    char *err = tu_slurp(TMP "/err.txt");
    int lines = 0;
    for (char *p = err; p && *p; p++) lines += *p == '\n';
    tu_check(rc == 2 && lines == 1 && strstr(err, "--init-from") && strstr(err, "neg_heads/config.json") &&
                 strstr(err, "n_head"),
             "neg_cli_train_heads", "exit %d: %s", rc, err ? err : "");
    free(err);
}

int main(void) {
    Fixture fx;
    char msg[256];
    if (fixture_load(&fx, DIR "/reference.bin", msg, sizeof msg) != 0) {
        tu_check(0, "fixture", "%s (regenerate: /usr/bin/python3 tests/fixtures/gen_foreign_ckpt.py)", msg);
        return tu_exit();
    }
    const FixtureEntry *cf = fixture_get(&fx, "config"), *in = fixture_get(&fx, "inputs"), *lg = fixture_get(&fx, "logits");
    if (!cf || !in || !lg) {
        tu_check(0, "fixture", "reference.bin lacks config, inputs or logits");
        return tu_exit();
    }
    const int32_t *k = cf->data;
    want = (ModelConfig){.n_layer = k[0], .n_head = k[1], .n_embd = k[2], .vocab = k[3], .max_seq = k[4]};
    T = k[5];
    inputs = in->data, ref = lg->data;
    Err e;
    if (model_config_validate(&want, &e) != ST_OK || file_mkdirs(TMP, &e) != ST_OK) {
        tu_check(0, "setup", "%s", e.msg);
        return tu_exit();
    }

    positive("hf_lmhead_dir", DIR "/hf_lmhead");
    positive("hf_lmhead_file", DIR "/hf_lmhead/model.safetensors");
    positive("hf_base_dir", DIR "/hf_base");
    positive("llmc_v3", DIR "/gpt2_llmc.bin");

    wrong_logits("neg_conv1d_read_as_linear", DIR "/neg_linear");
    refused("neg_missing_tensor", DIR "/neg_missing", "neg_missing/model.safetensors", "h.1.ln_2.bias");
    refused("neg_unused_tensor", DIR "/neg_extra", "neg_extra/model.safetensors", "h.2.");
    refused("neg_untied_head", DIR "/neg_untied", "neg_untied/model.safetensors", "lm_head.weight");
    refused("neg_config_heads", DIR "/neg_heads", "neg_heads/config.json", "n_head");
    refused("neg_config_activation", DIR "/neg_gelu", "neg_gelu/config.json", "activation_function");
    refused("neg_llmc_version5", patched_llmc(1, 5), "llmc_h1_5.bin", "version 5");
    refused("neg_llmc_heads", patched_llmc(5, 2), "llmc_h5_2.bin", "heads");
    refused("neg_llmc_vp", patched_llmc(7, 64), "llmc_h7_64.bin", "expected");
    { /* read as a configuration (train --init-from's first look): the check names the header word,
       * not train's --layers flag */
        ModelConfig pc;
        Err pe = {0};
        Status ps = ckpt_peek_config(patched_llmc(4, 2147483647), &pc, &pe);
        tu_check(ps == ST_ERR_INPUT && strstr(pe.msg, "llmc_h4_2147483647.bin: llm.c header: layers (word [4]): expected "
                                             "1..1024, found 2147483647"), "neg_llmc_layers_named_by_word", "%s", pe.msg);
    }
    cli();
    fixture_free(&fx);
    return tu_exit();
}
