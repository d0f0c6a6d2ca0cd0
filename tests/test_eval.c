/* test_eval.c — `scaletrain eval`: loss, perplexity and bits per byte of saved weights on shards.
 *
 * Oracles:
 *   loss        the same model's gpt_forward called directly, one row at a time (the binary batches
 *               3 rows with a partial last batch), summed in double: relative difference < 1e-5;
 *   formulas    perplexity = exp(loss), bits/byte = loss / ln 2 / (source_bytes / total_tokens) and
 *               bytes covered = targets · source_bytes / total_tokens, computed here by hand from the
 *               numbers written into the shard header (1e-12 relative);
 *   --tokens    rows = ceil(N / T);
 *   masks       loss-masked shards: bits_per_byte and bytes_covered null (the average bytes per token
 *               is not the scored targets'), the loss over the trained targets only;
 *   bad input   exit 2 and one stderr line naming the problem (missing folder, shard vocabulary
 *               different from the model's, shards of another tokenizer than the one recorded
 *               with the weights, token id out of range, --seq-len too long; weights holding a NaN,
 *               half a weights folder, --exact-match's --max-new-tokens 2147483647 (a crash before),
 *               --tokenizer-dir for bytes, a directory for --exact-match), each beside a control that
 *               runs; --micro-batch above the rows gives the direct loss (it ran out of memory). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cjson/cJSON.h>

#include "ckpt/safetensors.h"
#include "core/fileio.h"
#include "data/bpe.h"
#include "data/shard.h"
#include "model/gpt.h"
#include "testutil.h"

#define BIN ST_BINARY_DIR "/scaletrain"
#define TMP ST_BINARY_DIR "/test_eval"

enum { V = 61, NTOK = 1000, T = 16 };
#define SRC_BYTES 2345u

static int run(const char *cmd) {
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static double jnum(const cJSON *o, const char *k) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(x) ? x->valuedouble : NAN;
}

static cJSON *eval_json(const char *args) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, BIN " eval %s --json --quiet >" TMP "/out.json 2>" TMP "/err.txt", args);
    if (run(cmd) != 0) return NULL;
    char *t = tu_slurp(TMP "/out.json");
    cJSON *o = t ? cJSON_Parse(t) : NULL;
    free(t);
    return o;
}

static void expect_error(const char *name, const char *args, const char *want) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, BIN " eval %s >/dev/null 2>" TMP "/err.txt", args);
    int rc = run(cmd);
    char *e = tu_slurp(TMP "/err.txt");
    int lines = 0;
    for (char *p = e; p && *p; p++) lines += *p == '\n';
    int ok = rc == 2 && lines == 1 && e && !strncmp(e, "scaletrain eval: ", 17) && strstr(e, want);
    if (e && lines) e[strlen(e) - 1] = '\0';
    tu_check(ok, name, "exit=%d lines=%d stderr=\"%s\"", rc, lines, e ? e : "");
    free(e);
}

int main(void) {
    Err e = {0};
    file_mkdirs(TMP, &e);
    ModelConfig cfg = {.n_layer = 2, .n_head = 2, .n_embd = 32, .vocab = V, .max_seq = 32};
    Gpt g;
    memset(&g, 0, sizeof g);
    GptOptions go = gpt_default_options();
    go.T = T;
    if (model_config_validate(&cfg, &e) != ST_OK || gpt_init(&g, &cfg, &go, NULL, &e) != ST_OK) {
        tu_check(0, "eval_setup", "%s", e.msg);
        return tu_exit();
    }
    gpt_init_params(&g, 7);
    if (st_save_hf(&g.w, TMP "/model", "bytes", &e) != ST_OK) tu_check(0, "eval_save", "%s", e.msg);
    /* A shard of NTOK tokens from a repeating pattern (the model is random, any ids will do). */
    uint32_t tok[NTOK];
    for (int i = 0; i < NTOK; i++) tok[i] = (uint32_t)((i * 17 + i / 7) % V);
    ShardMeta meta = {0, SRC_BYTES, V, 0};
    shard_write(TMP "/good.bin", tok, NTOK, &meta, &e);

    /* The oracle: row w = tokens [w·T, w·T + T], one row per forward. (NTOK - 1) / T full rows. */
    int rows = (NTOK - 1) / T;
    double nats = 0;
    int32_t inp[T], tgt[T];
    for (int w = 0; w < rows; w++) {
        for (int t = 0; t < T; t++) inp[t] = (int32_t)tok[w * T + t], tgt[t] = (int32_t)tok[w * T + t + 1];
        nats += gpt_forward(&g, inp, tgt, 1, T, 1.0f, 0, 0);
    }
    double targets = (double)rows * T, loss = nats / targets;

    char args[1024];
    snprintf(args, sizeof args, TMP "/model --data " TMP "/good.bin --seq-len %d --micro-batch 3 --threads 2", T);
    cJSON *o = eval_json(args);
    double got = jnum(o, "loss_sum_nats");
    tu_check(o && jnum(o, "rows") == rows && jnum(o, "targets") == targets && fabs(got - nats) <= 1e-5 * fabs(nats),
             "eval_loss_matches_direct_forward", "rows=%g targets=%g sum=%.9g direct=%.9g rel=%.2e", jnum(o, "rows"),
             jnum(o, "targets"), got, nats, fabs(got - nats) / fabs(nats));
    /* Formulas by hand from the binary's own loss (so only the formula is under test here). */
    double l = jnum(o, "loss"), bpt = (double)SRC_BYTES / NTOK;
    double want_bpb = l / log(2.0) / bpt, want_cov = targets * SRC_BYTES / NTOK;
    tu_check(fabs(l - loss) <= 1e-5 * loss && fabs(jnum(o, "perplexity") - exp(l)) <= 1e-12 * exp(l) &&
                 fabs(jnum(o, "bits_per_byte") - want_bpb) <= 1e-12 * want_bpb &&
                 fabs(jnum(o, "bytes_covered") - want_cov) <= 1e-9 * want_cov && jnum(o, "source_bytes") == SRC_BYTES,
             "eval_ppl_bpb_formula", "loss=%.6f ppl=%.6f bpb=%.9f want %.9f covered=%.3f want %.3f", l,
             jnum(o, "perplexity"), jnum(o, "bits_per_byte"), want_bpb, jnum(o, "bytes_covered"), want_cov);
    cJSON_Delete(o);

    /* --tokens 100 at T = 16: ceil(100 / 16) = 7 rows, the first 7 rows' loss. */
    double nats7 = 0;
    for (int w = 0; w < 7; w++) {
        for (int t = 0; t < T; t++) inp[t] = (int32_t)tok[w * T + t], tgt[t] = (int32_t)tok[w * T + t + 1];
        nats7 += gpt_forward(&g, inp, tgt, 1, T, 1.0f, 0, 0);
    }
    snprintf(args, sizeof args, TMP "/model --data " TMP "/good.bin --seq-len %d --tokens 100", T);
    o = eval_json(args);
    tu_check(o && jnum(o, "rows") == 7 && jnum(o, "targets") == 7 * T &&
                 fabs(jnum(o, "loss_sum_nats") - nats7) <= 1e-5 * nats7,
             "eval_tokens_limit", "rows=%g sum=%.9g direct=%.9g", jnum(o, "rows"), jnum(o, "loss_sum_nats"), nats7);
    cJSON_Delete(o);

    /* Shards without a source byte count: bits per byte is null, the rest still reported. */
    ShardMeta nometa = {0, 0, V, 0};
    shard_write(TMP "/nobytes.bin", tok, NTOK, &nometa, &e);
    snprintf(args, sizeof args, TMP "/model --data " TMP "/nobytes.bin --seq-len %d", T);
    o = eval_json(args);
    const cJSON *bpb = o ? cJSON_GetObjectItemCaseSensitive(o, "bits_per_byte") : NULL;
    tu_check(o && cJSON_IsNull(bpb) && fabs(jnum(o, "loss") - loss) <= 1e-5 * loss, "eval_unknown_bytes",
             "bits_per_byte null, loss %.6f", jnum(o, "loss"));
    cJSON_Delete(o);

    /* Loss-masked shards (chat data): the shards' mean bytes per token is not that of the scored
     * targets (template tokens have no source bytes), so bits per byte is null, not a number 2x off
     * (18 bits/byte for a 6.8-nat byte-tokenizer loss until 2026-11-29); the loss is over the
     * trained targets. Control: the same tokens without the mask report a number. */
    {
        ShardMeta mm = {0, SRC_BYTES, V, 0};
        shard_write(TMP "/masked.bin", tok, NTOK, &mm, &e);
        uint8_t bits[(NTOK + 7) / 8];
        for (size_t i = 0; i < sizeof bits; i++) bits[i] = 0xF0; /* half of the targets trained */
        Status ms = shard_mask_write(TMP "/masked.bin", bits, NTOK, &e);
        snprintf(args, sizeof args, TMP "/model --data " TMP "/masked.bin --seq-len %d", T);
        o = eval_json(args);
        const cJSON *mb = o ? cJSON_GetObjectItemCaseSensitive(o, "bits_per_byte") : NULL;
        const cJSON *mc = o ? cJSON_GetObjectItemCaseSensitive(o, "bytes_covered") : NULL;
        tu_check(ms == ST_OK && o && cJSON_IsNull(mb) && cJSON_IsNull(mc) && jnum(o, "targets") > 0 &&
                     jnum(o, "targets") < jnum(o, "rows") * T,
                 "eval_masked_shards_no_bits_per_byte", "%s, bits_per_byte %s, targets %g of %g", ms ? e.msg : "mask written",
                 mb && cJSON_IsNull(mb) ? "null" : "a number", jnum(o, "targets"), jnum(o, "rows") * T);
        cJSON_Delete(o);
    }

    /* Bad input. */
    ShardMeta bigv = {0, SRC_BYTES, V + 10, 0};
    shard_write(TMP "/vocab.bin", tok, NTOK, &bigv, &e);
    uint32_t bad[NTOK];
    memcpy(bad, tok, sizeof bad);
    bad[500] = V + 3;
    ShardMeta unknown = {0, SRC_BYTES, 0, 0};
    shard_write(TMP "/oov.bin", bad, NTOK, &unknown, &e);
    /* The shards against the tokenizer recorded with the weights ("bytes"): a header of another
     * tokenizer with the model's vocabulary is refused; control: bytes' own hash is scored. */
    {
        Tokenizer *tk = NULL;
        uint64_t hb = tokenizer_load(&tk, "bytes", "", &e) == ST_OK ? tokenizer_hash(tk) : 0;
        tokenizer_free(tk);
        ShardMeta other = {hb ^ 0x5a5a5a5aull, SRC_BYTES, V, 0}, own = {hb, SRC_BYTES, V, 0};
        shard_write(TMP "/other_tok.bin", tok, NTOK, &other, &e);
        shard_write(TMP "/own_tok.bin", tok, NTOK, &own, &e);
        expect_error("eval_shards_of_another_tokenizer", TMP "/model --data " TMP "/other_tok.bin --seq-len 16",
                     "prepared with another tokenizer (no manifest.json beside the shard names it), the weights were "
                     "trained on bytes (recorded with them");
        snprintf(args, sizeof args, TMP "/model --data " TMP "/own_tok.bin --seq-len %d", T);
        o = eval_json(args);
        tu_check(hb && o && fabs(jnum(o, "loss") - loss) <= 1e-5 * loss, "control_eval_shards_of_the_weights_tokenizer",
                 "bytes hash %016llx, loss %.6f", (unsigned long long)hb, o ? jnum(o, "loss") : NAN);
        cJSON_Delete(o);
    }
    /* --no-doc-mask on weights trained without document masking would change nothing: refused */
    expect_error("eval_no_doc_mask_on_unmasked_weights", TMP "/model --data " TMP "/good.bin --seq-len 16 --no-doc-mask",
                 "--no-doc-mask: would change nothing: the weights in");
    expect_error("eval_file_for_weights", TMP "/good.bin --data " TMP "/good.bin", "good.bin: expected a weights folder "
                 "(train --out), a checkpoint or a --ckpt-dir, found a file");
    expect_error("eval_missing_dir", TMP "/nope --data " TMP "/good.bin", "does not exist");
    expect_error("eval_missing_data", TMP "/model", "--data");
    expect_error("eval_shard_vocab_mismatch", TMP "/model --data " TMP "/vocab.bin --seq-len 16", "expects 61");
    expect_error("eval_token_out_of_range", TMP "/model --data " TMP "/oov.bin --seq-len 16", "oov.bin");
    expect_error("eval_seq_len_too_long", TMP "/model --data " TMP "/good.bin --seq-len 64", "--seq-len");
    expect_error("eval_no_shards", TMP "/model --data " TMP "/none_*.bin", "none_");

    /* The audit of 2026-11-30. A batch larger than the rows evaluated: the same result, where it ran
     * out of memory (exit 1) allocating rows never read. */
    snprintf(args, sizeof args, TMP "/model --data " TMP "/good.bin --seq-len %d --micro-batch 1000000000", T);
    o = eval_json(args);
    tu_check(o && jnum(o, "rows") == rows && fabs(jnum(o, "loss_sum_nats") - nats) <= 1e-5 * fabs(nats),
             "eval_micro_batch_above_the_rows", "rows=%g sum=%.9g direct=%.9g", jnum(o, "rows"), jnum(o, "loss_sum_nats"), nats);
    cJSON_Delete(o);
    /* Weights holding a NaN: refused naming the tensor (the loss was NaN, exit 0). Control: the same
     * folder before the NaN is scored (above). */
    {
        int k = layout_find(&g.w.layout, "h.0.qkvw");
        g.w.params[g.w.layout.tensors[k].offset + 3] = NAN;
        Status ns = st_save_hf(&g.w, TMP "/nan_model", "bytes", &e);
        tu_check(ns == ST_OK, "eval_nan_setup", "%s", ns == ST_OK ? "" : e.msg);
        expect_error("eval_refuses_non_finite_weights", TMP "/nan_model --data " TMP "/good.bin --seq-len 16",
                     "nan_model: tensor h.0.attn.c_attn.weight: expected finite weights, found 1 of its");
    }
    /* Half a weights folder, named as such (config.json alone read as "none of these"; weights alone
     * as "config.json: cannot open") */
    if (tu_shell("rm -rf " TMP "/half_cfg " TMP "/half_w && mkdir -p " TMP "/half_cfg " TMP "/half_w && cp " TMP
                 "/model/config.json " TMP "/half_cfg/ && cp " TMP "/model/model.safetensors " TMP "/half_w/")) {
        expect_error("eval_config_without_weights", TMP "/half_cfg --data " TMP "/good.bin",
                     "half_cfg: expected model.safetensors (or model.safetensors.index.json) beside config.json, found none");
        expect_error("eval_weights_without_config", TMP "/half_w --data " TMP "/good.bin",
                     "half_w: expected config.json beside the weights");
    }
    /* --exact-match with a byte-level model: --max-new-tokens 2147483647 wrapped the length check in
     * int and wrote the answer past the history (a segfault); --tokenizer-dir for bytes was accepted
     * and ignored; a directory was "read error after 0 bytes". Control: --max-new-tokens 8 runs. */
    {
        ModelConfig bc = {.n_layer = 1, .n_head = 2, .n_embd = 32, .vocab = 257, .max_seq = 32};
        Gpt bg;
        memset(&bg, 0, sizeof bg);
        Status bs = model_config_validate(&bc, &e);
        if (bs == ST_OK) bs = gpt_init(&bg, &bc, NULL, NULL, &e);
        if (bs == ST_OK) gpt_init_params(&bg, 3), bs = st_save_hf(&bg.w, TMP "/bytes_model", "bytes", &e);
        gpt_free(&bg);
        FILE *cf = fopen(TMP "/chats.jsonl", "w");
        if (cf) fputs("{\"prompt\": \"ab\", \"response\": \"ba\"}\n", cf), fclose(cf);
        tu_check(bs == ST_OK && cf, "eval_exact_match_setup", "%s", bs == ST_OK ? "" : e.msg);
        expect_error("eval_exact_match_max_new_tokens_int_max", TMP "/bytes_model --exact-match " TMP
                     "/chats.jsonl --max-new-tokens 2147483647", "--max-new-tokens 2147483647 exceeds the model's max "
                     "sequence length 32");
        expect_error("eval_exact_match_tokenizer_dir_for_bytes", TMP "/bytes_model --exact-match " TMP
                     "/chats.jsonl --tokenizer-dir " TMP, "--tokenizer-dir: would change nothing for tokenizer 'bytes'");
        expect_error("eval_exact_match_directory", TMP "/bytes_model --exact-match " TMP,
                     "--exact-match " TMP ": expected a chat JSON Lines file, found a directory");
        int erc = run(BIN " eval " TMP "/bytes_model --exact-match " TMP "/chats.jsonl --max-new-tokens 8 --quiet >/dev/null");
        tu_check(erc == 0, "control_eval_exact_match_runs", "exit %d", erc);
    }
    gpt_free(&g);
    return tu_exit();
}
