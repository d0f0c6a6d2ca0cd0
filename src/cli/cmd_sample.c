/* cmd_sample.c — `scaletrain sample DIR`: text generation from saved weights with a KV cache. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "ckpt/safetensors.h"
#include "cli/args.h"
#include "cli/cmds.h"
#include "cli/cmds_ckpt.h"
#include "cli/cmds_data.h"
#include "cli/faults.h"
#include "core/rng.h"
#include "data/bpe.h"
#include "model/backend.h"
#include "model/infer.h"
#include "train/devemu.h"

int cmd_sample(int argc, char **argv) {
    char prompt[4096] = "", tokenizer[256] = "", tok_dir[1024] = "", device[16] = "cpu";
    int tokens = 256, top_k = 40;
    float temperature = 0.8f;
    uint64_t seed = 1;
    ArgSpec specs[] = {
        {"prompt", ARG_STR, prompt, sizeof prompt, "text to continue (empty: start from end-of-text)"},
        {"tokens", ARG_INT, &tokens, 0,
         "tokens to generate (past the model's max sequence length the context restarts on its last half)"},
        {"temperature", ARG_FLOAT, &temperature, 0, "softmax temperature (0: greedy, the most likely token every step)"},
        {"top-k", ARG_INT, &top_k, 0, "sample among the k most likely tokens (0: all; 1: greedy)"},
        {"seed", ARG_U64, &seed, 0, "sampling seed"},
        {"tokenizer", ARG_STR, tokenizer, sizeof tokenizer, "gpt2 | cl100k | o200k | llama3 | bytes | FILE.tkr | DIR (default: recorded with the weights)"},
        {"tokenizer-dir", ARG_DIR, tok_dir, sizeof tok_dir, "where the named tokenizer's files are (gpt2: encoder.json, vocab.bpe; cl100k, o200k: NAME_base.tkr; llama3: tokenizer.model)"},
        {"device", ARG_STR, device, sizeof device, "where the model and its KV cache compute: cpu (cuda only in a build with CUDA)"},
    };
    int n = (int)(sizeof specs / sizeof specs[0]), npos = 0, help = 0;
    char *pos[1];
    Err err = {0};
    Status st = args_parse(specs, n, argc, argv, pos, 1, &npos, &help, &err);
    if (st != ST_OK) return cli_fail("sample", st, err.msg);
    if (help || npos != 1) {
        printf("usage: scaletrain sample WEIGHTS [options]\n\nGenerates text from WEIGHTS: a folder of model.safetensors + config.json (train --out),\na checkpoint step_NNNNNNNN/ or a --ckpt-dir (its newest valid checkpoint), as eval and export take it.\n\n");
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
    /* --top-k 1 keeps one token: greedy whatever the temperature, drawing nothing */
    if (top_k == 1 && temperature > 0 && args_find(specs, n, "seed")->seen)
        return cli_fail("sample", ST_ERR_INPUT, "--seed: would change nothing with --top-k 1 (one token kept: greedy); "
                        "expected --top-k 0 or > 1");
    if (top_k == 1 && temperature > 0 && args_find(specs, n, "temperature")->seen)
        return cli_fail("sample", ST_ERR_INPUT, "--temperature: would change nothing with --top-k 1 (one token kept: "
                        "greedy); expected --top-k 0 or > 1, or --temperature 0 alone");
    GptOptions go = gpt_default_options();
    Faults faults;
    if ((st = cli_faults_from_env(&faults, &err)) != ST_OK) return cli_fail("sample", st, err.msg);
    if ((st = devemu_find(device, faults.emulated_device, &go.backend, &err)) != ST_OK)
        return cli_fail("sample", st, err.msg);
    /* A device: the whole model there (one token's activations), the weights copied in, the KV
     * cache in its memory (infer.h); only tokens go in and logits come out. */
    go.device_resident = !go.backend->host_addressable;
    /* WEIGHTS as eval and export take it: a weights folder, a checkpoint or a --ckpt-dir */
    char dir[4096];
    int plain = 0;
    args_trim_dir(pos[0]); /* "run/" prints as "run", its files as "run/model.safetensors" */
    if ((st = cli_resolve_weights("sample", pos[0], dir, sizeof dir, &plain, 0, &err)) != ST_OK)
        return cli_fail("sample", st, err.msg);
    ModelConfig cfg;
    char recorded[256];
    if ((st = st_load_hf_config(dir, &cfg, recorded, sizeof recorded, &err)) != ST_OK)
        return cli_fail("sample", st, err.msg);
    if (!tokenizer[0]) snprintf(tokenizer, sizeof tokenizer, "%s", recorded);
    if (!tokenizer[0])
        return cli_fail("sample", ST_ERR_INPUT, "--tokenizer: expected gpt2, cl100k, o200k, llama3, bytes, FILE or DIR (none recorded with the weights)");
    if (tok_dir[0] && !tokenizer_data_subdir(tokenizer)) {
        snprintf(err.msg, sizeof err.msg, "--tokenizer-dir: would change nothing for tokenizer '%s'; expected it only with gpt2, cl100k, o200k or llama3",
                 tokenizer);
        return cli_fail("sample", ST_ERR_INPUT, err.msg);
    }
    Tokenizer *tk = NULL;
    if ((st = cli_load_tokenizer(tokenizer, tok_dir, &tk, &err)) != ST_OK) {
        err_prefix(&err, "--tokenizer %s", tokenizer);
        return cli_fail("sample", st, err.msg);
    }
    if ((int)tokenizer_vocab_size(tk) != cfg.vocab) {
        snprintf(err.msg, sizeof err.msg, "--tokenizer %s: has %u ids, the model in %.600s expects %d", tokenizer,
                 tokenizer_vocab_size(tk), dir, cfg.vocab);
        tokenizer_free(tk);
        return cli_fail("sample", ST_ERR_INPUT, err.msg);
    }
    if (cfg.doc_mask && tokenizer_eot(tk) != (uint32_t)cfg.doc_eot) {
        snprintf(err.msg, sizeof err.msg, "--tokenizer %s: EOT id %u, the weights in %.600s were trained with document "
                 "masking at EOT id %d", tokenizer, tokenizer_eot(tk), dir, cfg.doc_eot);
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
    if ((st = gpt_init(&g, &cfg, &go, NULL, &err)) != ST_OK) goto fail;
    if ((st = cli_load_weights(&g, dir, &err)) != ST_OK) goto fail;
    if ((st = kv_init(&kv, &g, &err)) != ST_OK) goto fail;
    kv.test_host_read = faults.device_bypass;
    if ((st = tokenizer_encode(tk, (const uint8_t *)prompt, strlen(prompt), &ids, &nids, &cap, &err)) != ST_OK)
        goto fail;
    if (nids == 0) {
        uint32_t eot = tokenizer_eot(tk);
        ids = realloc(ids, sizeof *ids);
        ids[0] = eot, nids = 1;
    }
    if ((int)nids > cfg.max_seq) { /* a prompt that fills the window predicts its next token; the cache slides after */
        st = err_set(&err, ST_ERR_INPUT, "--prompt: %zu tokens, expected at most the model's max sequence length %d",
                     nids, cfg.max_seq);
        goto fail;
    }
    work = malloc(sizeof(float) * cfg.vocab);
    /* The token history the cache reads, from its window's first token (kv.start) on: when full it
     * moves that window to its front, so it holds at most two windows, whatever --tokens is (it was
     * sized by --tokens: 8 GB reserved for 2^31). */
    size_t hist_cap = 2 * (size_t)cfg.max_seq + 2, nh = nids;
    int32_t *hist = malloc(hist_cap * sizeof *hist);
    if (!work || !hist) {
        free(hist);
        st = err_set(&err, ST_ERR_RUNTIME, "out of memory for %d tokens", tokens);
        goto fail;
    }
    for (size_t i = 0; i < nids; i++) hist[i] = (int32_t)ids[i];
    fputs(prompt, stdout);
    uint32_t eot = tokenizer_eot(tk);
    for (int i = 0; i < tokens; i++) {
        if ((st = infer_feed(&g, &kv, hist, nh, &err)) != ST_OK) {
            free(hist);
            goto fail;
        }
        if (nh == hist_cap) { /* infer_feed left nh - kv.start <= max_seq: kv.start > max_seq here */
            memmove(hist, hist + kv.start, (nh - kv.start) * sizeof *hist);
            nh -= kv.start, kv.start = 0;
        }
        float u = rng_uniform(seed, 0x5a3f1e, (uint64_t)i);
        uint32_t id = (uint32_t)infer_pick(kv.logits, cfg.vocab, temperature, top_k, u, work);
        hist[nh++] = (int32_t)id;
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
