/* cmd_eval.c — `scaletrain eval WEIGHTS --data SHARDS`: loss, perplexity and bits per byte of saved
 * weights on token shards (docs/report.md "Evaluation").
 *
 * WEIGHTS is a weights folder (model.safetensors + config.json, e.g. `train --out`), a checkpoint
 * directory or a --ckpt-dir (its newest valid checkpoint). The shards are read in order, as packed
 * rows of T+1 tokens (row w = tokens [w·T, w·T + T], the loader's unshuffled order), every target
 * counted once; --tokens N stops after ceil(N / T) rows. Forward only (train = 0), in fp32.
 *
 *   loss        = sum of per-token cross-entropy (nats) / targets evaluated
 *   perplexity  = exp(loss)
 *   bits/byte   = loss / ln 2 / (source_bytes / total_tokens)
 * where source_bytes and total_tokens are those of all the shards given (shard header words [5],[6]
 * and [2]): each token stands for the dataset's average number of source bytes, so evaluating a
 * part of the shards attributes to it bytes in proportion to the tokens evaluated. When any shard
 * has no source byte count, bits per byte is not reported. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "ckpt/ckpt.h"
#include "ckpt/safetensors.h"
#include "cli/args.h"
#include "cli/cmds.h"
#include "cli/cmds_ckpt.h"
#include "core/progress.h"
#include "cli/cmds_report.h"
#include "data/loader.h"
#include "model/backend.h"
#include "model/gpt.h"
#include "model/matmul.h"

int cmd_eval(int argc, char **argv) {
    char data[4096] = "";
    long tokens = 0;
    int B = 8, T = 0, threads = 2, json = 0, quiet = 0, doc_mask = 0, no_doc_mask = 0;
    char device[16] = "cpu";
    ArgSpec specs[] = {
        {"data", ARG_STR, data, sizeof data, "token shards: path, glob or comma list (one dataset, no weights)"},
        {"tokens", ARG_LONG, &tokens, 0, "evaluate about this many target tokens (whole rows of T; 0: all)"},
        {"micro-batch", ARG_INT, &B, 0, "rows per forward pass B"},
        {"seq-len", ARG_INT, &T, 0, "tokens per row T (0: the model's max sequence length)"},
        {"threads", ARG_INT, &threads, 0, "threads for our kernels and the GEMM library"},
        {"device", ARG_STR, device, sizeof device, "where the model computes: cpu (cuda only in a build with CUDA)"},
        {"doc-mask", ARG_FLAG, &doc_mask, 0,
         "document masking (docs/doc-mask.md) even if the weights were trained without it (default: as trained)"},
        {"no-doc-mask", ARG_FLAG, &no_doc_mask, 0, "no document masking even if the weights were trained with it"},
        {"json", ARG_FLAG, &json, 0, "print the result as one JSON object"},
        {"quiet", ARG_FLAG, &quiet, 0, "no progress output"},
    };
    int n = (int)(sizeof specs / sizeof specs[0]), npos = 0, help = 0;
    char *pos[1];
    Err err = {0};
    Status st = args_parse(specs, n, argc, argv, pos, 1, &npos, &help, &err);
    if (st != ST_OK) return cli_fail("eval", st, err.msg);
    if (help || npos != 1) {
        printf("usage: scaletrain eval WEIGHTS --data SHARDS [options]\n\n"
               "Loss, perplexity and bits per byte of saved weights (a weights folder, a checkpoint or a\n"
               "--ckpt-dir) on token shards, read in order.\n\n");
        args_print_help(specs, n);
        return help ? 0 : cli_fail("eval", ST_ERR_INPUT, "expected one weights directory, found none");
    }
    if (!data[0]) return cli_fail("eval", ST_ERR_INPUT, "--data: expected token shards, found nothing");
    const Backend *be;
    if ((st = backend_find(device, &be, &err)) != ST_OK) return cli_fail("eval", st, err.msg);
    if (tokens < 0) return cli_fail("eval", ST_ERR_INPUT, "--tokens: expected >= 0");
    if (B < 1) return cli_fail("eval", ST_ERR_INPUT, "--micro-batch: expected >= 1");
    if (T < 0) return cli_fail("eval", ST_ERR_INPUT, "--seq-len: expected >= 0");
    if (threads < 1 || threads > 1024) return cli_fail("eval", ST_ERR_INPUT, "--threads: expected 1..1024");
    if (doc_mask && no_doc_mask)
        return cli_fail("eval", ST_ERR_INPUT, "--doc-mask / --no-doc-mask: expected at most one, found both");

    /* The weights: a plain folder, else a checkpoint (verified) or the newest one of a --ckpt-dir. */
    char src[4096];
    int plain = 0;
    if ((st = cli_resolve_weights("eval", pos[0], src, sizeof src, &plain, quiet, &err)) != ST_OK)
        return cli_fail("eval", st, err.msg);
    ModelConfig cfg;
    if ((st = st_load_hf_config(src, &cfg, NULL, 0, &err)) != ST_OK) return cli_fail("eval", st, err.msg);
    if (T == 0) T = cfg.max_seq;
    if (T > cfg.max_seq) {
        snprintf(err.msg, sizeof err.msg, "--seq-len: expected <= %d (the model's max sequence length), found %d",
                 cfg.max_seq, T);
        return cli_fail("eval", ST_ERR_INPUT, err.msg);
    }

    Loader ld;
    memset(&ld, 0, sizeof ld);
    Gpt g;
    memset(&g, 0, sizeof g);
    int32_t *inp = NULL, *tgt = NULL;
    int rc = 0;
    if ((st = loader_open(&ld, data, T, (uint32_t)cfg.vocab, 0, 0, 0, &err)) != ST_OK) {
        err_prefix(&err, "--data");
        goto fail;
    }
    if (ld.nsets != 1) {
        st = err_set(&err, ST_ERR_INPUT, "--data: a weighted mixture of %d datasets; eval takes one dataset", ld.nsets);
        goto fail;
    }
    uint32_t hv = loader_header_vocab(&ld);
    if (hv && hv != (uint32_t)cfg.vocab) {
        st = err_set(&err, ST_ERR_INPUT, "--data %s: the shards' tokenizer has %u ids, the model in %s expects %d", data,
                     hv, src, cfg.vocab);
        goto fail;
    }
    /* Document masking: as the weights were trained (config.json), unless a flag says otherwise; the
     * documents end with the shards' EOT, which must be the one the weights were trained with. */
    uint32_t seot = loader_header_eot(&ld);
    if (no_doc_mask) cfg.doc_mask = 0;
    else if (doc_mask && !cfg.doc_mask) cfg.doc_mask = 1, cfg.doc_eot = (int)seot;
    if (cfg.doc_mask && (uint32_t)cfg.doc_eot != seot) {
        st = err_set(&err, ST_ERR_INPUT, "--data %s: document masking expected EOT id %d (the weights in %s), the "
                     "shards' header says %u", data, cfg.doc_eot, src, seot);
        goto fail;
    }
    uint64_t rows = ld.nwin;
    if (tokens > 0) {
        uint64_t want = ((uint64_t)tokens + (uint64_t)T - 1) / (uint64_t)T;
        if (want < rows) rows = want;
    }
    mm_set_threads(threads);
    omp_set_num_threads(threads);
    GptOptions go = gpt_default_options();
    go.B = B, go.T = T, go.threads = threads, go.backend = be;
    if ((st = gpt_init(&g, &cfg, &go, NULL, &err)) != ST_OK) goto fail;
    if ((st = ckpt_load_weights(&g.w, src, &err)) != ST_OK) goto fail;
    inp = malloc(sizeof *inp * (size_t)B * (size_t)T);
    tgt = malloc(sizeof *tgt * (size_t)B * (size_t)T);
    if (!inp || !tgt) {
        st = err_set(&err, ST_ERR_RUNTIME, "out of memory for a %d x %d batch", B, T);
        goto fail;
    }
    Progress pr;
    progress_init(&pr, "eval", "tokens", "tok/s", 1.0);
    double nats = 0;
    uint64_t targets = 0, total_targets = rows * (uint64_t)T;
    for (uint64_t r = 0; r < rows; r += (uint64_t)B) {
        int cnt = (int)(rows - r < (uint64_t)B ? rows - r : (uint64_t)B);
        loader_fill(&ld, r, cnt, inp, tgt);
        nats += gpt_forward(&g, inp, tgt, cnt, T, 1.0f, 0, 0);
        if ((st = gpt_status(&g, &err)) != ST_OK) goto fail;
        for (size_t i = 0; i < (size_t)cnt * (size_t)T; i++) targets += tgt[i] >= 0;
        if (!quiet) progress_update(&pr, (r + (uint64_t)cnt) * (uint64_t)T, total_targets);
    }
    double el = omp_get_wtime() - pr.t0;
    double loss = targets ? nats / (double)targets : NAN, ppl = exp(loss);
    double bytes_per_token = ld.source_bytes ? (double)ld.source_bytes / (double)ld.total_tokens : 0;
    double bpb = bytes_per_token > 0 ? loss / log(2.0) / bytes_per_token : NAN;
    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "weights", src);
        cJSON_AddStringToObject(o, "data", data);
        cJSON_AddNumberToObject(o, "rows", (double)rows);
        cJSON_AddNumberToObject(o, "seq_len", T);
        if (cfg.doc_mask) cJSON_AddBoolToObject(o, "doc_mask", 1);
        cJSON_AddNumberToObject(o, "targets", (double)targets);
        cJSON_AddNumberToObject(o, "loss_sum_nats", nats);
        cJSON_AddNumberToObject(o, "loss", loss);
        cJSON_AddNumberToObject(o, "perplexity", ppl);
        cJSON_AddNumberToObject(o, "total_tokens", (double)ld.total_tokens);
        if (bytes_per_token > 0) {
            cJSON_AddNumberToObject(o, "source_bytes", (double)ld.source_bytes);
            cJSON_AddNumberToObject(o, "bytes_covered", bytes_per_token * (double)targets);
            cJSON_AddNumberToObject(o, "bits_per_byte", bpb);
        } else {
            cJSON_AddNullToObject(o, "source_bytes");
            cJSON_AddNullToObject(o, "bits_per_byte");
        }
        cJSON_AddNumberToObject(o, "seconds", el);
        char *t = cJSON_PrintUnformatted(o);
        if (t) printf("%s\n", t);
        cJSON_free(t);
        cJSON_Delete(o);
    } else {
        printf("eval: %s on %s: %llu tokens (%llu rows of %d%s) of %zu in %d shard%s, %.1f s\n", src, data,
               (unsigned long long)targets, (unsigned long long)rows, T, cfg.doc_mask ? ", document-masked" : "",
               ld.total_tokens, ld.nshards, ld.nshards == 1 ? "" : "s", el);
        printf("loss %.4f nats/token | perplexity %.3f | ", loss, ppl);
        if (bytes_per_token > 0)
            printf("bits/byte %.4f (%.3f source bytes/token)\n", bpb, bytes_per_token);
        else
            printf("bits/byte n/a (the shards do not record their source byte count)\n");
    }
    goto cleanup;
fail:
    rc = cli_fail("eval", st, err.msg);
cleanup:
    free(inp);
    free(tgt);
    gpt_free(&g);
    loader_close(&ld);
    return rc;
}
