/* cmd_sample.c — `scaletrain sample DIR`: text generation from saved weights with a KV cache. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/safetensors.h"
#include "cli/args.h"
#include "cli/cmds.h"
#include "core/rng.h"
#include "data/bpe.h"
#include "model/infer.h"

/* Index of the next token: greedy when temperature is 0, else softmax(logits / temperature)
 * restricted to the top_k largest (0 = all), drawn with uniform u in [0, 1). */
static int pick(const float *logits, int V, float temperature, int top_k, float u, float *work) {
    int best = 0;
    for (int i = 1; i < V; i++) best = logits[i] > logits[best] ? i : best;
    if (temperature <= 0) return best;
    float kth = -INFINITY;
    if (top_k > 0 && top_k < V) {
        memcpy(work, logits, sizeof(float) * V);
        /* k-th largest by partial selection (V is small enough for this per token). */
        for (int r = 0; r < top_k; r++) {
            int m = r;
            for (int i = r + 1; i < V; i++) m = work[i] > work[m] ? i : m;
            float t = work[r];
            work[r] = work[m], work[m] = t;
        }
        kth = work[top_k - 1];
    }
    double s = 0;
    for (int i = 0; i < V; i++) s += logits[i] >= kth ? exp((logits[i] - logits[best]) / temperature) : 0.0;
    double target = u * s, acc = 0;
    for (int i = 0; i < V; i++) {
        if (logits[i] < kth) continue;
        acc += exp((logits[i] - logits[best]) / temperature);
        if (acc >= target) return i;
    }
    return best;
}

int cmd_sample(int argc, char **argv) {
    char prompt[4096] = "", tokenizer[256] = "", tok_dir[1024] = "";
    int tokens = 256, top_k = 40;
    float temperature = 0.8f;
    uint64_t seed = 1;
    ArgSpec specs[] = {
        {"prompt", ARG_STR, prompt, sizeof prompt, "text to continue (empty: start from end-of-text)"},
        {"tokens", ARG_INT, &tokens, 0, "tokens to generate (the context slides past the max sequence length)"},
        {"temperature", ARG_FLOAT, &temperature, 0, "softmax temperature (0: greedy)"},
        {"top-k", ARG_INT, &top_k, 0, "sample among the k most likely tokens (0: all)"},
        {"seed", ARG_U64, &seed, 0, "sampling seed"},
        {"tokenizer", ARG_STR, tokenizer, sizeof tokenizer, "gpt2 | bytes | DIR (default: recorded with the weights)"},
        {"tokenizer-dir", ARG_STR, tok_dir, sizeof tok_dir, "where gpt2's encoder.json and vocab.bpe are"},
    };
    int n = (int)(sizeof specs / sizeof specs[0]), npos = 0, help = 0;
    char *pos[1];
    Err err = {0};
    Status st = args_parse(specs, n, argc, argv, pos, 1, &npos, &help, &err);
    if (st != ST_OK) return cli_fail("sample", st, err.msg);
    if (help || npos != 1) {
        printf("usage: scaletrain sample DIR [options]\n\nGenerates text from DIR/model.safetensors + config.json.\n\n");
        args_print_help(specs, n);
        return help ? 0 : cli_fail("sample", ST_ERR_INPUT, "expected one weights directory, found none");
    }
    if (tokens < 0) return cli_fail("sample", ST_ERR_INPUT, "--tokens: expected >= 0");
    if (!(temperature >= 0)) return cli_fail("sample", ST_ERR_INPUT, "--temperature: expected >= 0");
    if (top_k < 0) return cli_fail("sample", ST_ERR_INPUT, "--top-k: expected >= 0");
    /* Greedy decoding draws nothing: a seed or a top-k would change nothing (issue 12). */
    if (temperature == 0 && args_find(specs, n, "seed")->seen)
        return cli_fail("sample", ST_ERR_INPUT, "--seed: would change nothing with --temperature 0 (greedy); expected a temperature > 0");
    if (temperature == 0 && args_find(specs, n, "top-k")->seen)
        return cli_fail("sample", ST_ERR_INPUT, "--top-k: would change nothing with --temperature 0 (greedy); expected a temperature > 0");
    const char *dir = pos[0];
    ModelConfig cfg;
    char recorded[256];
    if ((st = st_load_hf_config(dir, &cfg, recorded, sizeof recorded, &err)) != ST_OK)
        return cli_fail("sample", st, err.msg);
    if (!tokenizer[0]) snprintf(tokenizer, sizeof tokenizer, "%s", recorded);
    if (!tokenizer[0])
        return cli_fail("sample", ST_ERR_INPUT, "--tokenizer: expected gpt2, bytes or DIR (none recorded with the weights)");
    if (tok_dir[0] && strcmp(tokenizer, "gpt2")) {
        snprintf(err.msg, sizeof err.msg, "--tokenizer-dir: would change nothing for tokenizer '%s'; expected it only with gpt2",
                 tokenizer);
        return cli_fail("sample", ST_ERR_INPUT, err.msg);
    }
    char tdir[1024];
    args_find_data_dir(tok_dir, "gpt2_tokenizer", tdir, sizeof tdir);
    Tokenizer *tk = NULL;
    if ((st = tokenizer_load(&tk, tokenizer, tdir, &err)) != ST_OK) {
        err_prefix(&err, "--tokenizer %s", tokenizer);
        return cli_fail("sample", st, err.msg);
    }
    if ((int)tokenizer_vocab_size(tk) != cfg.vocab) {
        snprintf(err.msg, sizeof err.msg, "--tokenizer %s: has %u ids, the model in %s expects %d", tokenizer,
                 tokenizer_vocab_size(tk), dir, cfg.vocab);
        tokenizer_free(tk);
        return cli_fail("sample", ST_ERR_INPUT, err.msg);
    }
    Gpt g;
    KvCache kv = {0};
    uint32_t *ids = NULL;
    size_t nids = 0, cap = 0;
    uint8_t *text = NULL;
    size_t tlen = 0, tcap = 0;
    float *work = NULL;
    int rc = 0;
    if ((st = gpt_init(&g, &cfg, 1, 1, 1, 1, NULL, &err)) != ST_OK) goto fail;
    if ((st = st_load_hf_weights(&g, dir, &err)) != ST_OK) goto fail;
    if ((st = kv_init(&kv, &g, &err)) != ST_OK) goto fail;
    if ((st = tokenizer_encode(tk, (const uint8_t *)prompt, strlen(prompt), &ids, &nids, &cap, &err)) != ST_OK)
        goto fail;
    if (nids == 0) {
        uint32_t eot = tokenizer_eot(tk);
        ids = realloc(ids, sizeof *ids);
        ids[0] = eot, nids = 1;
    }
    if ((int)nids >= cfg.max_seq) {
        st = err_set(&err, ST_ERR_INPUT, "--prompt: %zu tokens, expected fewer than the model's max sequence length %d",
                     nids, cfg.max_seq);
        goto fail;
    }
    work = malloc(sizeof(float) * cfg.vocab);
    /* The whole token history, so the context can slide when the model's window is full. */
    size_t hist_cap = nids + (size_t)tokens + 1, nh = nids;
    uint32_t *hist = malloc(hist_cap * sizeof *hist);
    if (!work || !hist) {
        free(hist);
        st = err_set(&err, ST_ERR_RUNTIME, "out of memory for %d tokens", tokens);
        goto fail;
    }
    memcpy(hist, ids, nids * sizeof *hist);
    fputs(prompt, stdout);
    for (size_t i = 0; i + 1 < nids; i++) infer_step(&g, &kv, (int32_t)hist[i]);
    uint32_t eot = tokenizer_eot(tk);
    for (int i = 0; i < tokens; i++) {
        if (kv.len >= cfg.max_seq) {
            /* Window full: restart the cache on the last half of the history (recomputed once). */
            int keep = cfg.max_seq / 2;
            kv.len = 0;
            for (size_t j = nh - (size_t)keep; j + 1 < nh; j++) infer_step(&g, &kv, (int32_t)hist[j]);
        }
        infer_step(&g, &kv, (int32_t)hist[nh - 1]);
        float u = rng_uniform(seed, 0x5a3f1e, (uint64_t)i);
        uint32_t id = (uint32_t)pick(kv.logits, cfg.vocab, temperature, top_k, u, work);
        hist[nh++] = id;
        if (id == eot) {
            fputs("\n\n", stdout); /* end of a document: shown as a blank line */
        } else {
            tlen = 0;
            if (tokenizer_decode(tk, &id, 1, &text, &tlen, &tcap, &err) == ST_OK) fwrite(text, 1, tlen, stdout);
        }
        fflush(stdout);
    }
    free(hist);
    fputc('\n', stdout);
    goto cleanup;
fail:
    rc = cli_fail("sample", st, err.msg);
cleanup:
    free(work);
    free(ids);
    free(text);
    kv_free(&kv);
    gpt_free(&g);
    tokenizer_free(tk);
    return rc;
}
