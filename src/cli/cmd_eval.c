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
 * has no source byte count, bits per byte is not reported.
 *
 * --exact-match FILE.jsonl (chat JSON Lines, docs/finetune.md): for each conversation, the prompt is
 * EOT (as in training, where every conversation follows one) then its chat-template rendering up to
 * where the last assistant message's content starts, the model
 * generates greedily (argmax, KV cache) until the template's end of turn (plain: EOT; llama3:
 * <|eot_id|>) or --max-new-tokens, and the decoded answer, stripped of ASCII white space, is compared
 * byte for byte with that message's (stripped) content. Reports matches / conversations. */
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
#include "cli/cmds_data.h"
#include "core/fileio.h"
#include "core/progress.h"
#include "cli/cmds_report.h"
#include "cli/faults.h"
#include "core/rng.h"
#include "data/bpe.h"
#include "data/chat.h"
#include "data/docsource.h"
#include "data/loader.h"
#include "model/infer.h"
#include "model/backend.h"
#include "model/gpt.h"
#include "model/matmul.h"
#include "train/devemu.h"
#include "train/machine_peak.h"

static int is_ws(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

/* [*p, *p + *n) without leading and trailing ASCII white space. */
static void strip_ws(const uint8_t **p, size_t *n) {
    while (*n && is_ws((*p)[0])) ++*p, --*n;
    while (*n && is_ws((*p)[*n - 1])) --*n;
}

/* Greedy answers to the conversations of `file` against their last assistant message (see the file
 * comment). *matches / *total; up to `show` mismatches printed (prompt's answer vs generated). */
static Status exact_match(const Gpt *g, const ModelConfig *mc, const Tokenizer *tk, const ChatFormat *f, const char *file,
                          int max_new, int show, int quiet, long *matches, long *total, Err *err) {
    /* eval has no --skip-bad / --allow-invalid-utf8: the line is to be fixed in the file */
    DocReaderOptions ro = {.format = PREP_FORMAT_CHAT, .separator = "", .no_hints = 1};
    DocReader *dr = NULL;
    Status st = docreader_open(&dr, file, &ro, err);
    KvCache kv = {0};
    uint32_t *ids = NULL;
    uint8_t *mask = NULL, *text = NULL;
    size_t cap = 0, mcap = 0, tcap = 0;
    int32_t *hist = NULL;
    int maxT = mc->max_seq, V = mc->vocab;
    uint32_t stop = chat_stop_id(f, tk);
    *matches = *total = 0;
    if (st == ST_OK) st = kv_init(&kv, g, err);
    if (st == ST_OK && !(hist = malloc(sizeof *hist * (size_t)maxT)))
        st = err_set(err, ST_ERR_RUNTIME, "out of memory");
    while (st == ST_OK) {
        const uint8_t *doc;
        size_t n, nids = 0, tlen = 0;
        if ((st = docreader_next(dr, &doc, &n, err)) != ST_OK || !doc) break;
        const uint8_t *want;
        size_t wlen;
        chat_last_answer(doc, n, &want, &wlen); /* the reader refuses a conversation without one */
        int eot;
        if ((st = chat_render(f, tk, doc, n, 1, &ids, &nids, &cap, &mask, &mcap, &eot, err)) != ST_OK) break;
        /* in size_t: an int sum wrapped past INT_MAX for --max-new-tokens 2147483647 and the answers
         * were written past the history's maxT slots (a crash) */
        if (nids + 1 + (size_t)max_new > (size_t)maxT) {
            st = err_set(err, ST_ERR_INPUT, "%s: conversation %ld: a prompt of %zu tokens + EOT + --max-new-tokens %d exceeds "
                         "the model's max sequence length %d", file, *total + 1, nids, max_new, maxT);
            break;
        }
        /* In training every conversation follows an EOT (the previous one's in packed rows, the row's
         * synthetic one with --no-pack): the prompt does too. */
        hist[0] = (int32_t)tokenizer_eot(tk);
        for (size_t i = 0; i < nids; i++) hist[i + 1] = (int32_t)ids[i];
        size_t nh = nids + 1, first = nh;
        kv.len = 0, kv.start = 0;
        for (int t = 0; t < max_new; t++) {
            if ((st = infer_feed(g, &kv, hist, nh, err)) != ST_OK) break;
            uint32_t id = (uint32_t)infer_pick(kv.logits, V, 0.0f, 0, 0.0f, NULL);
            if (id == stop || id == tokenizer_eot(tk)) break;
            hist[nh++] = (int32_t)id;
        }
        if (st != ST_OK) break;
        for (size_t i = first; i < nh && st == ST_OK; i++) {
            uint32_t id = (uint32_t)hist[i];
            st = tokenizer_decode(tk, &id, 1, &text, &tlen, &tcap, err);
        }
        const uint8_t *gp = text;
        size_t gl = text ? tlen : 0;
        strip_ws(&gp, &gl);
        strip_ws(&want, &wlen);
        int ok = gl == wlen && (wlen == 0 || memcmp(gp, want, wlen) == 0);
        *matches += ok, ++*total;
        if (!ok && show > 0 && !quiet) {
            printf("mismatch %ld: expected \"%.*s\", generated \"%.*s\"\n", *total, (int)wlen, (const char *)want, (int)gl,
                   (const char *)gp);
            show--;
        }
    }
    if (st == ST_OK && *total == 0) st = err_set(err, ST_ERR_INPUT, "%s: expected at least one conversation, found none", file);
    free(hist);
    free(ids);
    free(mask);
    free(text);
    kv_free(&kv);
    docreader_close(dr);
    return st;
}

int cmd_eval(int argc, char **argv) {
    char data[4096] = "";
    long tokens = 0;
    int B = 8, T = 0, threads = 0, json = 0, quiet = 0, doc_mask = 0, no_doc_mask = 0;
    char device[16] = "cpu", em_file[4096] = "", chat_template[16] = "auto", tokenizer[256] = "", tok_dir[1024] = "";
    int max_new = 32, show = 3;
    ArgSpec specs[] = {
        {"exact-match", ARG_STR, em_file, sizeof em_file,
         "chat JSON Lines: greedy answers to each conversation's prompt against its last assistant message "
         "(docs/finetune.md); instead of --data"},
        {"chat-template", ARG_STR, chat_template, sizeof chat_template, "--exact-match: auto | llama3 | plain"},
        {"max-new-tokens", ARG_INT, &max_new, 0, "--exact-match: tokens generated at most per answer"},
        {"show", ARG_INT, &show, 0, "--exact-match: mismatches printed"},
        {"tokenizer", ARG_STR, tokenizer, sizeof tokenizer, "--exact-match: the tokenizer (default: recorded with the weights)"},
        {"tokenizer-dir", ARG_DIR, tok_dir, sizeof tok_dir, "--exact-match: where a named tokenizer's files are"},
        {"data", ARG_STR, data, sizeof data, "token shards: path, glob or comma list (one dataset, no weights)"},
        {"tokens", ARG_LONG, &tokens, 0, "evaluate about this many target tokens (whole rows of T; 0: all)"},
        {"micro-batch", ARG_INT, &B, 0, "rows per forward pass B"},
        {"seq-len", ARG_INT, &T, 0, "tokens per row T (0: the model's max sequence length)"},
        {"threads", ARG_INT, &threads, 0, "threads for our kernels and the GEMM library (0: the CPUs this process may run on)"},
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
        printf("usage: scaletrain eval WEIGHTS --data SHARDS [options]\n"
               "       scaletrain eval WEIGHTS --exact-match CHATS.jsonl [options]\n\n"
               "Loss, perplexity and bits per byte of saved weights (a weights folder, a checkpoint or a\n"
               "--ckpt-dir) on token shards, read in order (on shards with loss masks: the trained targets);\n"
               "or the share of chat prompts answered exactly by greedy generation (docs/finetune.md).\n\n");
        args_print_help(specs, n);
        return help ? 0 : cli_fail("eval", ST_ERR_INPUT, "expected one weights directory, found none");
    }
#define SEEN(name) (args_find(specs, n, name)->seen)
    if (em_file[0] && data[0])
        return cli_fail("eval", ST_ERR_INPUT, "--exact-match and --data: expected one of the two, found both");
    if (em_file[0]) {
        /* generation feeds one conversation's prompt, one document: document masking has nothing to mask */
        const char *inert[] = {"tokens", "micro-batch", "seq-len", "doc-mask", "no-doc-mask"};
        for (int i = 0; i < 5; i++)
            if (SEEN(inert[i])) {
                snprintf(err.msg, sizeof err.msg, "--%s: would change nothing with --exact-match; expected it only with --data",
                         inert[i]);
                return cli_fail("eval", ST_ERR_INPUT, err.msg);
            }
    } else {
        const char *inert[] = {"chat-template", "max-new-tokens", "show", "tokenizer", "tokenizer-dir"};
        for (int i = 0; i < 5; i++)
            if (SEEN(inert[i])) {
                snprintf(err.msg, sizeof err.msg, "--%s: would change nothing without --exact-match", inert[i]);
                return cli_fail("eval", ST_ERR_INPUT, err.msg);
            }
    }
#undef SEEN
    if (!data[0] && !em_file[0])
        return cli_fail("eval", ST_ERR_INPUT, "--data: expected token shards (or --exact-match FILE.jsonl), found nothing");
    if (em_file[0] && file_is_dir(em_file)) {
        err_set(&err, ST_ERR_INPUT, "--exact-match %s: expected a chat JSON Lines file, found a directory", em_file);
        return cli_fail("eval", ST_ERR_INPUT, err.msg);
    }
    ChatTemplate tmpl;
    if (chat_template_parse(chat_template, &tmpl))
        return cli_fail("eval", ST_ERR_INPUT, "--chat-template: expected auto, llama3 or plain");
    if (max_new < 1) {
        err_set(&err, ST_ERR_INPUT, "--max-new-tokens: expected >= 1, found %d", max_new);
        return cli_fail("eval", ST_ERR_INPUT, err.msg);
    }
    if (show < 0) {
        err_set(&err, ST_ERR_INPUT, "--show: expected >= 0, found %d", show);
        return cli_fail("eval", ST_ERR_INPUT, err.msg);
    }
    const Backend *be;
    Faults faults;
    if ((st = cli_faults_from_env(&faults, &err)) != ST_OK) return cli_fail("eval", st, err.msg);
    if ((st = devemu_find(device, faults.emulated_device, &be, &err)) != ST_OK) return cli_fail("eval", st, err.msg);
    if (tokens < 0) {
        err_set(&err, ST_ERR_INPUT, "--tokens: expected >= 0, found %ld", (long)tokens);
        return cli_fail("eval", ST_ERR_INPUT, err.msg);
    }
    if (B < 1) {
        err_set(&err, ST_ERR_INPUT, "--micro-batch: expected >= 1, found %d", B);
        return cli_fail("eval", ST_ERR_INPUT, err.msg);
    }
    if (T < 0) {
        err_set(&err, ST_ERR_INPUT, "--seq-len: expected >= 0, found %d", T);
        return cli_fail("eval", ST_ERR_INPUT, err.msg);
    }
    if (machine_threads_check(threads, &err) != ST_OK) return cli_fail("eval", ST_ERR_INPUT, err.msg);
    if (threads == 0) threads = machine_default_threads(1);
    if (doc_mask && no_doc_mask)
        return cli_fail("eval", ST_ERR_INPUT, "--doc-mask / --no-doc-mask: expected at most one, found both");

    /* The weights: a plain folder, else a checkpoint (verified) or the newest one of a --ckpt-dir. */
    char src[4096];
    int plain = 0;
    args_trim_dir(pos[0]); /* "run/" prints as "run", its files as "run/model.safetensors" */
    if ((st = cli_resolve_weights("eval", pos[0], src, sizeof src, &plain, quiet, &err)) != ST_OK)
        return cli_fail("eval", st, err.msg);
    ModelConfig cfg;
    char recorded[256] = "";
    if ((st = st_load_hf_config(src, &cfg, recorded, sizeof recorded, &err)) != ST_OK) return cli_fail("eval", st, err.msg);
    if (em_file[0]) {
        if (!be->host_addressable) { /* generation's KV cache (model/infer.c) computes on the host */
            snprintf(err.msg, sizeof err.msg, "--exact-match: generation runs on the CPU only (as sample does); "
                     "expected --device cpu, found --device %s", device);
            return cli_fail("eval", ST_ERR_INPUT, err.msg);
        }
        if (!tokenizer[0]) snprintf(tokenizer, sizeof tokenizer, "%s", recorded);
        if (!tokenizer[0])
            return cli_fail("eval", ST_ERR_INPUT, "--tokenizer: expected one (none recorded with the weights)");
        if (tok_dir[0] && !tokenizer_data_subdir(tokenizer)) { /* as sample: a folder no file is read from */
            snprintf(err.msg, sizeof err.msg, "--tokenizer-dir: would change nothing for tokenizer '%s'; expected it only "
                     "with gpt2, cl100k, o200k or llama3", tokenizer);
            return cli_fail("eval", ST_ERR_INPUT, err.msg);
        }
        Tokenizer *tk = NULL;
        if ((st = cli_load_tokenizer(tokenizer, tok_dir, &tk, &err)) != ST_OK) {
            err_prefix(&err, "--tokenizer %s", tokenizer);
            return cli_fail("eval", st, err.msg);
        }
        ChatFormat f;
        Gpt g;
        memset(&g, 0, sizeof g);
        long hits = 0, total = 0;
        mm_set_threads(threads);
        omp_set_num_threads(threads);
        GptOptions go = gpt_default_options();
        go.threads = threads, go.backend = be;
        double t0 = omp_get_wtime();
        if ((int)tokenizer_vocab_size(tk) != cfg.vocab)
            st = err_set(&err, ST_ERR_INPUT, "--tokenizer %s: has %u ids, the model in %s expects %d", tokenizer,
                         tokenizer_vocab_size(tk), src, cfg.vocab);
        if (st == ST_OK) st = chat_format_init(&f, tmpl, tk, &err);
        if (st == ST_OK) st = gpt_init(&g, &cfg, &go, NULL, &err);
        if (st == ST_OK) st = cli_load_weights(&g, src, &err);
        if (st == ST_OK) st = exact_match(&g, &cfg, tk, &f, em_file, max_new, show, quiet || json, &hits, &total, &err);
        gpt_free(&g);
        tokenizer_free(tk);
        if (st != ST_OK) return cli_fail("eval", st, err.msg);
        double acc = (double)hits / (double)total;
        if (json)
            printf("{\"weights\":\"%s\",\"exact_match_file\":\"%s\",\"chat_template\":\"%s\",\"conversations\":%ld,"
                   "\"exact_matches\":%ld,\"exact_match\":%.6f,\"seconds\":%.3f}\n", src, em_file,
                   chat_template_name(f.t), total, hits, acc, omp_get_wtime() - t0);
        else
            printf("eval: %s on %s: exact match %ld / %ld = %.1f%% (greedy, template %s, %.1f s)\n", src, em_file, hits,
                   total, 100 * acc, chat_template_name(f.t), omp_get_wtime() - t0);
        return 0;
    }
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
    /* The shards against the tokenizer recorded with the weights (as train --init-from does): ids of
     * another tokenizer of the same size would be scored without complaint. */
    uint64_t want_hash = 0;
    if (recorded[0]) {
        Tokenizer *tk = NULL;
        Err te;
        if (cli_load_tokenizer(recorded, "", &tk, &te) == ST_OK) want_hash = tokenizer_hash(tk);
        else if (!quiet)
            fprintf(stderr, "eval: the weights' tokenizer %s could not be loaded (%s): the shards are checked by "
                    "vocabulary size only\n", recorded, te.msg);
        tokenizer_free(tk);
    }
    if ((st = loader_open_named(&ld, data, T, (uint32_t)cfg.vocab, want_hash, recorded, 0, LOADER_FOR_WEIGHTS, &err)) != ST_OK) {
        if (strncmp(err.msg, "--data", 6)) err_prefix(&err, "--data"); /* the spec's own errors name it already */
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
    if ((no_doc_mask && !cfg.doc_mask) || (doc_mask && cfg.doc_mask)) {
        st = err_set(&err, ST_ERR_INPUT, "--%s: would change nothing: the weights in %s were trained %s document masking "
                     "(config.json), which eval follows without the flag", no_doc_mask ? "no-doc-mask" : "doc-mask", src,
                     cfg.doc_mask ? "with" : "without");
        goto fail;
    }
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
    /* A batch never holds more rows than are evaluated: the extra rows were allocated and never read
     * (--micro-batch 100000000 on 1805 rows ran out of memory); the result does not depend on B. */
    if ((uint64_t)B > rows && rows > 0) B = (int)rows;
    GptOptions go = gpt_default_options();
    go.B = B, go.T = T, go.threads = threads, go.backend = be;
    go.device_resident = !be->host_addressable; /* a device: the whole model there, the weights copied in */
    if ((st = gpt_init(&g, &cfg, &go, NULL, &err)) != ST_OK) {
        if (strstr(err.msg, "out of memory")) err_prefix(&err, "--micro-batch %d, --seq-len %d", B, T); /* what sizes it */
        goto fail;
    }
    /* on a device: read into host memory, then one copy to the device */
    if ((st = cli_load_weights(&g, src, &err)) != ST_OK) goto fail;
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
    /* Bits per byte needs the bytes the scored targets stand for: the shards' mean bytes per token
     * is that only when every token is scored. Under loss masks (chat shards) the template tokens,
     * which have no source bytes, count in the mean and the masked ones not in the loss: 18 bits per
     * byte for a 6.8-nat byte-tokenizer loss. Not reported there. */
    double bytes_per_token = ld.source_bytes && !ld.masked ? (double)ld.source_bytes / (double)ld.total_tokens : 0;
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
            if (ld.source_bytes) cJSON_AddNumberToObject(o, "source_bytes", (double)ld.source_bytes);
            else cJSON_AddNullToObject(o, "source_bytes");
            cJSON_AddNullToObject(o, "bytes_covered");
            cJSON_AddNullToObject(o, "bits_per_byte");
        }
        cJSON_AddNumberToObject(o, "seconds", el);
        char *t = cJSON_PrintUnformatted(o);
        if (t) printf("%s\n", t);
        cJSON_free(t);
        cJSON_Delete(o);
    } else {
        printf("eval: %s on %s: %llu tokens (%llu row%s of %d%s) of %zu in %d shard%s, %.1f s\n", src, data,
               (unsigned long long)targets, (unsigned long long)rows, rows == 1 ? "" : "s", T,
               cfg.doc_mask ? ", document-masked" : "",
               ld.total_tokens, ld.nshards, ld.nshards == 1 ? "" : "s", el);
        printf("loss %.4f nats/token | perplexity %.3f | ", loss, ppl);
        if (bytes_per_token > 0)
            printf("bits/byte %.4f (%.3f source bytes/token)\n", bpb, bytes_per_token);
        else if (ld.masked)
            printf("bits/byte n/a (loss-masked shards: the scored targets' source bytes are not recorded)\n");
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
