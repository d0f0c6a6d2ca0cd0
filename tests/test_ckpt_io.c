/* test_ckpt_io.c — weight export/import (Hugging Face safetensors, llm.c .bin, the export
 * command) and the safetensors header parser under hostile input.
 *
 * Oracles: memcmp of the parameters after export → import (lossless); element positions
 * computed independently from llm.c's documented order and from HF's Conv1D transpose; file
 * sizes from llm.c's parameter count; for the parser: each malformed file returns ST_ERR_INPUT
 * with the problem named, and thousands of random header mutations (time-bounded) never crash
 * and always end in an error or a complete load (run under ASan by `make test` with sanitizers);
 * for `export -o`: what is already there (a --ckpt-dir, another file, a foreign config.json) is
 * refused with one line and left as it was, beside controls that replace an earlier export. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "ckpt/safetensors.h"
#include "core/fileio.h"
#include "core/rng.h"
#include "core/timer.h"
#include "testutil.h"

#define TMP ST_BINARY_DIR "/test_ckpt_io_tmp"
#define BIN ST_BINARY_DIR "/scaletrain"

static ModelConfig model_cfg(int L, int C, int V, int maxT) {
    ModelConfig m = {L, 4, C, V, 0, maxT, 0.0f};
    Err e;
    if (model_config_validate(&m, &e) != ST_OK) abort();
    return m;
}

static void model_init(Gpt *g, const ModelConfig *mc, uint64_t seed) {
    Err e;
    if (gpt_init(g, mc, NULL, NULL, &e) != ST_OK) abort();
    gpt_init_params(g, seed);
    /* Non-trivial biases and norms too (init sets them to 0/1). */
    for (int k = 0; k < g->w.layout.ntensors; k++) {
        const TensorInfo *t = &g->w.layout.tensors[k];
        size_t n = (size_t)t->rows_real * (t->ndim == 2 ? (size_t)t->shape[1] : 1);
        for (size_t i = 0; i < n; i++) g->w.params[t->offset + i] += 0.01f * rng_normal(seed, 1000 + (uint64_t)k, i);
    }
}

static int same_params(const Gpt *a, const Gpt *b) {
    return a->w.layout.total == b->w.layout.total && !memcmp(a->w.params, b->w.params, a->w.layout.total * 4);
}

static long fsize(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 ? (long)sb.st_size : -1;
}

static void test_llmc(const ModelConfig *mc) {
    Gpt a = {0}, b = {0};
    model_init(&a, mc, 3);
    Err e = {0};
    const char *path = TMP "/model.bin";
    Status st = ckpt_export_llmc(&a.w, path, &e);
    long L = mc->n_layer, C = mc->n_embd, Vp = mc->vocab_padded, T = mc->max_seq;
    long nparams = Vp * C + T * C + L * (12 * C * C + 13 * C) + 2 * C; /* llm.c's count */
    tu_check(st == ST_OK && fsize(path) == 1024 + 4 * nparams, "llmc_export_size", "%ld bytes (1024 + 4 x %ld)",
             fsize(path), nparams);
    /* Independent position check: qkvw of layer 1, row 2, col 3 in llm.c's stacked order. */
    char *buf;
    size_t len;
    file_read_all(path, &buf, &len, &e);
    const int *hdr = (const int *)buf;
    const float *f = (const float *)(buf + 1024);
    size_t qkvw0 = (size_t)(Vp * C + T * C + L * C * 2); /* wte, wpe, ln1w, ln1b */
    size_t at = qkvw0 + (size_t)(1 * 3 * C * C + 2 * C + 3);
    size_t lnfb = (size_t)(nparams - C);
    ModelConfig peek;
    int ok = hdr[0] == 20240326 && hdr[1] == 3 && hdr[2] == T && hdr[3] == mc->vocab && hdr[4] == L && hdr[6] == C &&
             hdr[7] == Vp && f[at] == a.w.p.blocks[1].qkvw[2 * C + 3] && f[lnfb + 5] == a.w.p.lnfb[5] &&
             ckpt_peek_config(path, &peek, &e) == ST_OK && peek.n_layer == L && peek.vocab == mc->vocab;
    tu_check(ok, "llmc_export_layout", "header words, qkvw[1][2][3] and lnfb[5] at llm.c's offsets, peek config");
    ok = gpt_init(&b, mc, NULL, NULL, &e) == ST_OK && ckpt_init_from(&b.w, path, &e) == ST_OK && same_params(&a, &b);
    tu_check(ok, "llmc_round_trip", "export -> --init-from: params memcmp %s", ok ? "" : e.msg);
    /* Mismatched model, truncated file, bf16 version. */
    ModelConfig other = model_cfg(mc->n_layer + 1, mc->n_embd, mc->vocab, mc->max_seq);
    Gpt c = {0};
    gpt_init(&c, &other, NULL, NULL, &e);
    st = ckpt_init_from(&c.w, path, &e);
    tu_check(st == ST_ERR_INPUT && strstr(e.msg, "layers: file has 2, model has 3"), "llmc_shape_mismatch", "%s", e.msg);
    const void *bb[1] = {buf};
    size_t ll[1] = {len - 4};
    file_write_atomic(TMP "/trunc.bin", bb, ll, 1, &e);
    st = ckpt_init_from(&b.w, TMP "/trunc.bin", &e);
    tu_check(st == ST_ERR_INPUT && strstr(e.msg, "truncated"), "llmc_truncated", "%s", e.msg);
    ((int *)buf)[1] = 5;
    ll[0] = len;
    file_write_atomic(TMP "/bf16.bin", bb, ll, 1, &e);
    st = ckpt_init_from(&b.w, TMP "/bf16.bin", &e);
    tu_check(st == ST_ERR_INPUT && strstr(e.msg, "version 5"), "llmc_version", "%s", e.msg);
    free(buf);
    gpt_free(&a), gpt_free(&b), gpt_free(&c);
}

static void test_hf(const ModelConfig *mc) {
    Gpt a = {0}, b = {0};
    model_init(&a, mc, 4);
    Err e = {0};
    Status st = st_save_hf(&a.w, TMP "/hf", "bytes", &e);
    int ok = st == ST_OK && gpt_init(&b, mc, NULL, NULL, &e) == ST_OK &&
             ckpt_init_from(&b.w, TMP "/hf", &e) == ST_OK && same_params(&a, &b);
    tu_check(ok, "hf_round_trip_dir", "st_save_hf -> --init-from DIR: memcmp %s", ok ? "" : e.msg);
    memset(b.w.params, 0, b.w.layout.total * 4);
    ok = ckpt_init_from(&b.w, TMP "/hf/model.safetensors", &e) == ST_OK && same_params(&a, &b);
    ModelConfig peek;
    ok = ok && ckpt_peek_config(TMP "/hf/model.safetensors", &peek, &e) == ST_OK && peek.n_embd == mc->n_embd;
    tu_check(ok, "hf_round_trip_file", "--init-from FILE.safetensors: memcmp; peek config from config.json beside it");
    /* Conv1D layout: HF c_attn.weight (C, 3C)[i][j] == ours qkvw (3C, C)[j][i]; wte unpadded. */
    char *buf;
    size_t len;
    StFile f;
    file_read_all(TMP "/hf/model.safetensors", &buf, &len, &e);
    ok = st_parse(&f, "hf", buf, len, &e) == ST_OK;
    const StEntry *w = ok ? st_find(&f, "h.1.attn.c_attn.weight") : NULL;
    const StEntry *wte = ok ? st_find(&f, "wte.weight") : NULL;
    int C = mc->n_embd;
    float x;
    if (w) memcpy(&x, f.data + w->begin + 4 * (size_t)(5 * 3 * C + 7), 4);
    ok = w && wte && w->shape[0] == C && w->shape[1] == 3 * C && x == a.w.p.blocks[1].qkvw[7 * C + 5] &&
         wte->shape[0] == mc->vocab;
    tu_check(ok, "hf_conv1d_layout", "c_attn.weight (C, 3C) is the transpose of qkvw; wte has V=%d rows", mc->vocab);
    st_file_free(&f);
    free(buf);
    gpt_free(&a), gpt_free(&b);
}

/* The export command on a real checkpoint directory, both formats. */
static void test_export_cmd(const ModelConfig *mc) {
    Gpt a = {0}, b = {0};
    model_init(&a, mc, 5);
    Err e = {0};
    CkptMeta m = {0};
    m.step = 20;
    snprintf(m.optimizer, sizeof m.optimizer, "sgd");
    CkptOptions o = ckpt_default_options();
    o.dir = TMP "/ck";
    o.tokenizer = "bytes";
    Status st = ckpt_save(&a.w, NULL, &m, &o, NULL, &e);
    gpt_init(&b, mc, NULL, NULL, &e);
    int rc1 = system(BIN " export " TMP "/ck --format llmc -o " TMP "/exp.bin >/dev/null");
    int ok1 = st == ST_OK && rc1 == 0 && ckpt_init_from(&b.w, TMP "/exp.bin", &e) == ST_OK && same_params(&a, &b);
    memset(b.w.params, 0, b.w.layout.total * 4);
    int rc2 = system(BIN " export " TMP "/ck/step_00000020 --format hf --out " TMP "/exp_hf >/dev/null");
    char tok[64] = "";
    ModelConfig cfg;
    int ok2 = rc2 == 0 && ckpt_init_from(&b.w, TMP "/exp_hf", &e) == ST_OK && same_params(&a, &b) &&
              st_load_hf_config(TMP "/exp_hf", &cfg, tok, sizeof tok, &e) == ST_OK && !strcmp(tok, "bytes");
    tu_check(ok1 && ok2, "export_cmd_round_trip", "scaletrain export --format llmc | hf, then --init-from: memcmp "
             "(rc %d %d) %s", rc1, rc2, e.msg);
    int rc3 = system(BIN " export " TMP "/nothing --format hf -o " TMP "/x 2>/dev/null");
    tu_check(WIFEXITED(rc3) && WEXITSTATUS(rc3) == 2, "export_cmd_bad_input", "missing checkpoint exits 2");
    /* Exporting again into the same folder: a sharded bf16 export, then a single fp32 one. The
     * shards and index of the first are gone, and the folder reads back as the fp32 weights (it
     * kept both, and the reader took the stale bf16 shards). Control: after the first export alone
     * the folder holds the shards. */
    int r4 = system(BIN " export " TMP "/ck -o " TMP "/re --dtype bf16 --max-shard-size 20KB >/dev/null");
    int shards = system("ls " TMP "/re/model-00001-of-*.safetensors >/dev/null 2>&1") == 0;
    int r5 = system(BIN " export " TMP "/ck -o " TMP "/re >/dev/null");
    int left = system("ls " TMP "/re/model-0* " TMP "/re/model.safetensors.index.json >/dev/null 2>&1") == 0;
    memset(b.w.params, 0, b.w.layout.total * 4);
    int same = ckpt_init_from(&b.w, TMP "/re", &e) == ST_OK && same_params(&a, &b);
    tu_check(r4 == 0 && shards && r5 == 0 && !left && same, "export_again_replaces_the_earlier_files",
             "sharded export %s, then single: shards or index left %d, reads back the fp32 weights %d", shards ? "sharded" : "NOT sharded",
             left, same);
    /* -o inside what is read, and a tokenizer that cannot be the weights': refused, nothing written */
    int r6 = system(BIN " export " TMP "/ck/step_00000020 -o " TMP "/ck/step_00000020 --dtype bf16 2>/dev/null");
    int r7 = system(BIN " export " TMP "/ck -o " TMP "/tokbad --tokenizer nope 2>/dev/null");
    int intact = ckpt_init_from(&b.w, TMP "/ck/step_00000020", &e) == ST_OK && same_params(&a, &b);
    tu_check(WIFEXITED(r6) && WEXITSTATUS(r6) == 2 && WIFEXITED(r7) && WEXITSTATUS(r7) == 2 && intact &&
                 access(TMP "/tokbad", F_OK) != 0, "export_refuses_its_own_source_and_an_unknown_tokenizer",
             "-o the checkpoint: exit %d (checkpoint intact %d); --tokenizer nope: exit %d", WEXITSTATUS(r6), intact,
             WEXITSTATUS(r7));
    gpt_free(&a), gpt_free(&b);
}

/* Exit status of a shell command and its stderr in TMP/err.txt; 1 in *one_line when stderr is one line. */
static int run_err(const char *cmd, int *one_line, char *msg, size_t cap) {
    char full[2048];
    snprintf(full, sizeof full, "%s >/dev/null 2>" TMP "/err.txt", cmd);
    int rc = system(full);
    char *t = tu_slurp(TMP "/err.txt");
    int lines = 0;
    for (char *q = t; q && *q; q++) lines += *q == '\n';
    *one_line = lines == 1;
    snprintf(msg, cap, "%s", t ? t : "");
    if (lines && msg[0]) msg[strcspn(msg, "\n")] = '\0';
    free(t);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* `export -o` against what is already there (the audit of 2026-11-30), each refusal with its
 * control: an hf export into a --ckpt-dir made the folder read as those weights (eval TMP/ck then
 * took the exported step, not the newest checkpoint), one named step_* there was taken for a
 * checkpoint, an llmc export wrote over any file (a token shard), a config.json of something else
 * was replaced, an hf -o naming a file failed with exit 1 on "OUT/model.safetensors.tmp", and
 * --max-shard-size 1e400 converted inf to uint64 (undefined) and 1.5 took 1 byte. Needs TMP/ck of
 * test_export_cmd. */
static void test_export_outputs(void) {
    char msg[1024];
    int one;
    int rc = run_err(BIN " export " TMP "/ck/step_00000020 -o " TMP "/ck", &one, msg, sizeof msg);
    tu_check(rc == 2 && one && strstr(msg, "found a checkpoint or a --ckpt-dir") && access(TMP "/ck/config.json", F_OK) != 0,
             "export_refuses_a_ckpt_dir_as_output", "exit %d: %s", rc, msg);
    rc = run_err(BIN " export " TMP "/ck/step_00000020 -o " TMP "/ck/step_00000099", &one, msg, sizeof msg);
    tu_check(rc == 2 && one && strstr(msg, "other than step_*") && access(TMP "/ck/step_00000099", F_OK) != 0,
             "export_refuses_a_step_name_in_a_ckpt_dir", "exit %d: %s", rc, msg);
    rc = run_err(BIN " export " TMP "/ck/step_00000020 -o " TMP "/ck/exported", &one, msg, sizeof msg);
    tu_check(rc == 0 && access(TMP "/ck/exported/model.safetensors", F_OK) == 0, "control_export_to_a_new_folder_in_a_ckpt_dir",
             "exit %d %s", rc, msg);
    /* llmc over a file that is not an earlier llm.c export: refused, the file unchanged */
    FILE *f = fopen(TMP "/shard.bin", "wb");
    if (f) fputs("not weights, 32 bytes of a shard", f), fclose(f);
    rc = run_err(BIN " export " TMP "/ck --format llmc -o " TMP "/shard.bin", &one, msg, sizeof msg);
    tu_check(rc == 2 && one && strstr(msg, "expected a new file or an earlier llm.c export") && fsize(TMP "/shard.bin") == 32,
             "export_llmc_refuses_to_overwrite_another_file", "exit %d, %ld bytes left: %s", rc, fsize(TMP "/shard.bin"), msg);
    rc = run_err(BIN " export " TMP "/ck --format llmc -o " TMP "/exp.bin", &one, msg, sizeof msg); /* test_export_cmd's */
    tu_check(rc == 0, "control_export_llmc_replaces_an_earlier_export", "exit %d %s", rc, msg);
    rc = run_err(BIN " export " TMP "/ck -o " TMP "/shard.bin", &one, msg, sizeof msg);
    tu_check(rc == 2 && one && strstr(msg, "--format hf writes a folder") && fsize(TMP "/shard.bin") == 32,
             "export_hf_refuses_a_file_as_output", "exit %d: %s", rc, msg);
    /* a config.json that is not a model's: refused and kept; control: an earlier export's is replaced */
    if (!tu_shell("mkdir -p " TMP "/proj && printf '{\"lr\": 1}' > " TMP "/proj/config.json")) return;
    rc = run_err(BIN " export " TMP "/ck -o " TMP "/proj", &one, msg, sizeof msg);
    char *kept = tu_slurp(TMP "/proj/config.json");
    tu_check(rc == 2 && one && strstr(msg, "not a Hugging Face model's") && kept && !strcmp(kept, "{\"lr\": 1}") &&
                 access(TMP "/proj/model.safetensors", F_OK) != 0,
             "export_refuses_to_replace_a_foreign_config_json", "exit %d: %s", rc, msg);
    free(kept);
    rc = run_err(BIN " export " TMP "/ck -o " TMP "/exp_hf", &one, msg, sizeof msg);
    tu_check(rc == 0, "control_export_hf_replaces_an_earlier_export", "exit %d %s", rc, msg);
    static const char *const BAD[] = {"1e400", "1e30", "1.5", "0.0005KB"};
    for (int i = 0; i < 4; i++) {
        char cmd[512], name[96];
        snprintf(cmd, sizeof cmd, BIN " export " TMP "/ck -o " TMP "/shsz --max-shard-size %s", BAD[i]);
        rc = run_err(cmd, &one, msg, sizeof msg);
        snprintf(name, sizeof name, "export_refuses_max_shard_size_%s", BAD[i]);
        tu_check(rc == 2 && one && strstr(msg, "--max-shard-size: expected a positive whole number of bytes"), name,
                 "exit %d: %s", rc, msg);
    }
    rc = run_err(BIN " export " TMP "/ck -o " TMP "/shsz --max-shard-size 1.5KB", &one, msg, sizeof msg);
    tu_check(rc == 0 && access(TMP "/shsz/model.safetensors.index.json", F_OK) == 0, "control_export_max_shard_size_1.5KB",
             "exit %d %s", rc, msg);
}

/* The header after its JSON object may hold only padding (the safetensors library's rule; a NUL or
 * another object after it was ignored), and __metadata__ is a map of strings. Control: the same
 * header padded with spaces, and a string __metadata__, parse. Also: a .bin that is neither llm.c's
 * nor safetensors is named as such (it was refused as "DIR/config.json: cannot open"), and
 * st_check_finite names the tensor holding a NaN (control: the finite weights pass). */
static void test_header_rules(const ModelConfig *mc) {
    static const struct { const char *hdr; const char *want; } H[] = {
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}      ", NULL},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}\0     ", "found byte 0x00"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}{\"b\":1}", "found byte 0x7b"},
        {"{\"__metadata__\":{\"format\":\"pt\"},\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", NULL},
        {"{\"__metadata__\":5,\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", "__metadata__: expected"},
        {"{\"__metadata__\":{\"n\":1},\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", "__metadata__: expected"},
    };
    /* the second holds a NUL: its length by hand (the object's 54 bytes, the NUL, 5 spaces) */
    static const size_t HL[] = {0, 60, 0, 0, 0, 0};
    Err e = {0};
    for (int c = 0; c < 6; c++) {
        uint64_t hl = HL[c] ? HL[c] : strlen(H[c].hdr);
        size_t n = 8 + hl + 4;
        char *buf = calloc(1, n);
        memcpy(buf, &hl, 8), memcpy(buf + 8, H[c].hdr, hl);
        StFile f;
        Status ps = st_parse(&f, "hdr.safetensors", buf, n, &e);
        char name[64];
        snprintf(name, sizeof name, H[c].want ? "st_parse_refuses_header_%d" : "control_st_parse_header_%d", c);
        tu_check(H[c].want ? ps == ST_ERR_INPUT && strstr(e.msg, H[c].want) && strstr(e.msg, "hdr.safetensors") : ps == ST_OK,
                 name, "%s", ps == ST_OK ? "parsed" : e.msg);
        if (ps == ST_OK) st_file_free(&f);
        free(buf);
    }
    FILE *fb = fopen(TMP "/other.bin", "wb");
    if (fb) fputs("0123456789abcdef: not weights", fb), fclose(fb);
    ModelConfig got;
    Status st = ckpt_peek_config(TMP "/other.bin", &got, &e);
    tu_check(st == ST_ERR_INPUT && strstr(e.msg, "other.bin: expected llm.c weights (magic 20240326) or a safetensors file"),
             "init_from_a_bin_of_neither_format_named", "%s", e.msg);
    Gpt a = {0};
    model_init(&a, mc, 9);
    st = st_check_finite(&a.w.layout, a.w.params, "w", &e);
    int k = layout_find(&a.w.layout, "h.1.fcw");
    a.w.params[a.w.layout.tensors[k].offset + 5] = 0.0f / 0.0f;
    Status st2 = st_check_finite(&a.w.layout, a.w.params, "w", &e);
    tu_check(st == ST_OK && st2 == ST_ERR_INPUT && strstr(e.msg, "w: tensor h.1.mlp.c_fc.weight: expected finite weights, "
             "found 1 of its"), "check_finite_names_the_tensor", "finite: %s; one NaN: %s", st == ST_OK ? "passes" : "refused",
             e.msg);
    gpt_free(&a);
}

/* ---- header fuzz ---- */

typedef struct {
    char *p;
    size_t n, cap;
} Mem;

static Status mem_sink(void *ctx, const void *p, size_t n, Err *err) {
    Mem *m = ctx;
    if (m->n + n > m->cap) {
        m->cap = (m->n + n) * 2;
        m->p = realloc(m->p, m->cap);
    }
    memcpy(m->p + m->n, p, n);
    m->n += n;
    return ST_OK;
}

static Status load_image(Gpt *g, const char *img, size_t n, Err *e) {
    StFile f;
    Status st = st_parse(&f, "fuzz.safetensors", img, n, e);
    if (st == ST_OK) st = st_hf_read_model(&f, &g->w.layout, g->w.params, e);
    st_file_free(&f);
    return st;
}

static void test_fuzz(const ModelConfig *mc) {
    Gpt a = {0};
    model_init(&a, mc, 6);
    Mem img = {0};
    Err e = {0};
    st_hf_write_model(&a.w.layout, a.w.params, mem_sink, &img, &e);
    uint64_t hlen;
    memcpy(&hlen, img.p, 8);
    char *work = malloc(img.n);
    /* Missing tensor: rename one key (same length keeps every offset valid). */
    memcpy(work, img.p, img.n);
    char *k = memmem(work, 8 + hlen, "h.1.mlp.c_fc.weight", 19);
    if (k) k[10] = 'x';
    Status st = load_image(&a, work, img.n, &e);
    tu_check(k && st == ST_ERR_INPUT && strstr(e.msg, "tensor h.1.mlp.c_fc.weight missing"), "fuzz_missing_tensor", "%s", e.msg);
    /* Wrong shape: the image of a model with one vocabulary row fewer. */
    ModelConfig small = model_cfg(mc->n_layer, mc->n_embd, mc->vocab - 1, mc->max_seq);
    Gpt s = {0};
    model_init(&s, &small, 1);
    Mem img2 = {0};
    st_hf_write_model(&s.w.layout, s.w.params, mem_sink, &img2, &e);
    st = load_image(&a, img2.p, img2.n, &e);
    tu_check(st == ST_ERR_INPUT && strstr(e.msg, "wte.weight: expected shape [97, 32], found [96, 32]"), "fuzz_wrong_shape",
             "%s", e.msg);
    /* Header length past the end of the file. */
    memcpy(work, img.p, img.n);
    uint64_t big = img.n;
    memcpy(work, &big, 8);
    st = load_image(&a, work, img.n, &e);
    tu_check(st == ST_ERR_INPUT && strstr(e.msg, "exceeds the file size"), "fuzz_header_past_eof", "%s", e.msg);
    st = load_image(&a, img.p, img.n - 4, &e);
    tu_check(st == ST_ERR_INPUT && strstr(e.msg, "outside the"), "fuzz_truncated_data", "%s", e.msg);
    st = load_image(&a, img.p, 5, &e);
    tu_check(st == ST_ERR_INPUT && strstr(e.msg, "at least 8 bytes"), "fuzz_tiny_file", "%s", e.msg);
    /* The byte ranges must tile the data section (the format's rule): two tensors over the same
     * bytes loaded the wrong weights silently, and a hole is refused as the safetensors library
     * does. Hand-made two-tensor files; control: the tiled one parses. */
    {
        static const struct { const char *hdr; size_t data; const char *want; } T[] = {
            {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 16, NULL},
            {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "overlapping tensor a [0, 8)"},
            {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}", 20, "a hole in the data"},
            {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12, "cover the 12 data bytes, found 8"},
        };
        for (int c = 0; c < 4; c++) {
            uint64_t hl = strlen(T[c].hdr);
            size_t n = 8 + hl + T[c].data;
            char *buf = calloc(1, n);
            memcpy(buf, &hl, 8), memcpy(buf + 8, T[c].hdr, hl);
            StFile f;
            Status ps = st_parse(&f, "tile.safetensors", buf, n, &e);
            char name[64];
            snprintf(name, sizeof name, c ? "fuzz_tiling_refused_%d" : "control_fuzz_tiled_parses", c);
            tu_check(T[c].want ? ps == ST_ERR_INPUT && strstr(e.msg, T[c].want) : ps == ST_OK, name, "%s",
                     ps ? e.msg : "parsed");
            if (ps == ST_OK) st_file_free(&f);
            free(buf);
        }
    }
    /* A tensor in two files of one folder: which is meant? Refused (the first file's copy was read
     * whatever weight_map said). Control: one file loads. */
    {
        StFile two[2];
        Status p0 = st_parse(&two[0], "a.safetensors", img.p, img.n, &e), p1 = st_parse(&two[1], "b.safetensors", img.p, img.n, &e);
        st = p0 || p1 ? ST_ERR_RUNTIME : st_hf_read_files(two, 2, &a.w.layout, a.w.params, &e);
        tu_check(st == ST_ERR_INPUT && strstr(e.msg, "is also in b.safetensors: expected each tensor in one file"),
                 "fuzz_tensor_in_two_files", "%s", st ? e.msg : "loaded");
        st = p0 ? p0 : st_hf_read_files(two, 1, &a.w.layout, a.w.params, &e);
        tu_check(st == ST_OK, "control_fuzz_one_file_loads", "%s", st ? e.msg : "ok");
        if (!p0) st_file_free(&two[0]);
        if (!p1) st_file_free(&two[1]);
    }
    /* Random mutations of the header bytes (and of the length word), time-bounded. */
    const char *alphabet = "{}[]\",:0123456789-+.eE \\u\x00\xff";
    int iters = 0, errors = 0, loads = 0, bad = 0;
    double t0 = timer_ms();
    for (; iters < 20000 && timer_ms() - t0 < 20000; iters++) {
        memcpy(work, img.p, img.n);
        int nm = 1 + (int)rng_below(77, 0, (uint64_t)iters, 4);
        for (int j = 0; j < nm; j++) {
            uint64_t r = rng_below(77, 1, (uint64_t)iters * 8 + j, 1000000);
            size_t pos = rng_below(77, 2, (uint64_t)iters * 8 + j, 8 + hlen);
            if (r % 10 == 0 && pos >= 8) pos = rng_below(77, 3, (uint64_t)iters, 8); /* the length word */
            work[pos] = r % 2 ? alphabet[r / 2 % 27] : (char)(r >> 3);
        }
        size_t n = img.n;
        if (iters % 7 == 0) n -= rng_below(77, 4, (uint64_t)iters, 64); /* also shorten the data */
        st = load_image(&a, work, n, &e);
        if (st == ST_OK) loads++;
        else if (st == ST_ERR_INPUT && e.msg[0]) errors++;
        else bad++;
    }
    tu_check(bad == 0 && errors + loads == iters && iters >= 1000, "fuzz_header_mutations",
             "%d mutations in %.1f s: %d refused with a message, %d loaded, 0 crashes", iters, (timer_ms() - t0) / 1e3,
             errors, loads);
    free(work), free(img.p), free(img2.p);
    gpt_free(&a), gpt_free(&s);
}

int main(void) {
    if (system("rm -rf " TMP " && mkdir -p " TMP) != 0) return 1;
    ModelConfig mc = model_cfg(2, 32, 97, 24);
    test_llmc(&mc);
    test_hf(&mc);
    test_export_cmd(&mc);
    test_export_outputs();
    test_header_rules(&mc);
    test_fuzz(&mc);
    if (tu_failures == 0 && system("rm -rf " TMP) != 0) return 1;
    return tu_exit();
}
