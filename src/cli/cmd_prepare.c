/* cmd_prepare.c — `scaletrain prepare`: text / JSONL / WikiText (plain, .gz, .zst, or standard
 * input) -> train and val token shards. Option parsing, the progress line and the summary; the
 * pipeline is data/prepare.c. */
#include <limits.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/cmds_data.h"
#include "data/bpe.h"
#include "data/prepare.h"

static int fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "scaletrain prepare: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return code;
}

/* The progress line: bytes read, documents, rate and ETA while reading and encoding; documents
 * while merging. On a terminal one line redrawn; otherwise a line every 10% (or 30 s of input of
 * unknown size). */
typedef struct {
    int tty, last_decile, phase;
    int open_line;             /* a terminal line drawn without its newline yet */
    double last_t;
} PrepProgress;

static void prep_progress(void *ctx, const PrepareProgress *p) {
    PrepProgress *pp = ctx;
    if (p->phase != pp->phase) pp->phase = p->phase, pp->last_decile = -1, pp->last_t = 0;
    double frac = p->total ? (double)p->done / (double)p->total : 0;
    int dec = (int)(frac * 10), end = p->total && p->done >= p->total;
    if (p->total == 0 && (p->phase == 2 || p->done == 0)) return; /* nothing to show (empty input) */
    int due = p->total ? dec > pp->last_decile : p->seconds - pp->last_t >= 30;
    if (!pp->tty && !due) return;
    pp->last_decile = dec, pp->last_t = p->seconds;
    char line[256];
    if (p->phase == 1) {
        double rate = p->seconds > 0 ? (double)p->done / p->seconds / 1e6 : 0;
        double eta = frac > 0 ? p->seconds * (1 - frac) / frac : 0;
        if (p->total)
            snprintf(line, sizeof line, "prepare: read %.1f / %.1f MB (%3.0f%%), %llu documents, %.1f MB/s, ETA %d:%02d",
                     p->done / 1e6, p->total / 1e6, frac * 100, (unsigned long long)p->docs, rate, (int)eta / 60,
                     (int)eta % 60);
        else
            snprintf(line, sizeof line, "prepare: read %.1f MB, %llu documents, %.1f MB/s", p->done / 1e6,
                     (unsigned long long)p->docs, rate);
    } else {
        snprintf(line, sizeof line, "prepare: merged %llu / %llu documents into shards (%3.0f%%), %.1f s",
                 (unsigned long long)p->done, (unsigned long long)p->total, frac * 100, p->seconds);
    }
    if (pp->tty) fprintf(stderr, "\r%-100s%s", line, end ? "\n" : ""), pp->open_line = !end;
    else fprintf(stderr, "%s\n", line);
}

int cmd_prepare(int argc, char **argv) {
    PrepareOptions o = prepare_default_options();
    char out[1024] = "", spec[1024] = "gpt2", dirbuf[1024] = "", format[16] = "auto", sep[256], version[8] = "auto";
    snprintf(sep, sizeof sep, "%s", o.separator);
    double val_fraction = o.val_fraction;
    long val_docs = -1, shard_tokens = (long)o.shard_tokens;
    int threads = 0, no_dedup = 0, quiet = 0, skip_bad = 0, allow_bad_utf8 = 0;
    long memory_mb = (long)(o.run_bytes >> 20);
    char field[256] = "text", chat_template[16] = "auto";
    ArgSpec specs[] = {
        {"out", ARG_DIR, out, sizeof out, "output directory for train_NNNNNN.bin / val_NNNNNN.bin (required)"},
        {"tokenizer", ARG_STR, spec, sizeof spec, "gpt2 | cl100k | o200k | llama3 | bytes | FILE.tkr | DIR of a trained tokenizer or of llama3"},
        {"tokenizer-dir", ARG_DIR, dirbuf, sizeof dirbuf,
         "where the named tokenizer's files are (none: gpt2: $ST_GPT2_DIR, <exe>/../data/gpt2_tokenizer, ./data/...; "
         "cl100k, o200k: <exe>/../data/tokenizers, ./data/tokenizers; llama3: .../data/tokenizers/llama3 with Meta's "
         "tokenizer.model)"},
        {"format", ARG_STR, format, sizeof format,
         "auto | text | jsonl | wikitext | chat (auto: by extension, .gz/.zst removed; chat: only when named, "
         "docs/finetune.md)"},
        {"chat-template", ARG_STR, chat_template, sizeof chat_template,
         "--format chat: auto | llama3 | plain (auto: llama3 for the Llama 3 tokenizer, plain for any other)"},
        {"field", ARG_STR, field, sizeof field, "JSON Lines: the string field holding each document's text"},
        {"skip-bad", ARG_FLAG, &skip_bad, 0,
         "count and skip bad records (not JSON, no --field, invalid UTF-8) instead of stopping at the first"},
        {"allow-invalid-utf8", ARG_FLAG, &allow_bad_utf8, 0, "keep documents with invalid UTF-8 (encoded as bytes)"},
        {"separator", ARG_STR, sep, sizeof sep, "document separator line in text files (\"\" = blank line)"},
        {"val-fraction", ARG_DOUBLE, &val_fraction, 0, "share of documents for validation, each by its key (docs/data.md §6), in [0, 1)"},
        {"val-docs", ARG_LONG, &val_docs, 0, "exactly this many validation documents, those of smallest key (-1: use --val-fraction)"},
        {"seed", ARG_U64, &o.seed, 0, "key of each document's hash: the validation split and the order in shards"},
        {"shard-tokens", ARG_LONG, &shard_tokens, 0, "maximum tokens per shard"},
        {"shard-version", ARG_STR, version, sizeof version,
         "auto | 1 (uint16 ids) | 7 (uint32 ids, llm.c's format for large vocabularies)"},
        {"seq-len", ARG_INT, &o.seq_len, 0, "T of the --no-pack utilization report (0: no report)"},
        {"threads", ARG_INT, &threads, 0, "encoding threads (0 = all cores)"},
        {"memory", ARG_LONG, &memory_mb, 0, "MiB of encoded documents held before a sorted run goes to disk"},
        {"no-dedup", ARG_FLAG, &no_dedup, 0, "keep exact duplicate documents (dedup: equal 128-bit keys; a unique document is dropped with probability <= n^2/2^129)"},
        {"quiet", ARG_FLAG, &quiet, 0, "no progress output"},
    };
    int n = (int)(sizeof specs / sizeof specs[0]), nin = 0, help = 0;
    char **inputs = calloc((size_t)argc + 1, sizeof *inputs);
    Err err;
    Status st = args_parse(specs, n, argc - 1, argv + 1, inputs, argc, &nin, &help, &err);
    int rc = 0;
    if (st) rc = fail(st == ST_ERR_INPUT ? 2 : 1, "%s", err.msg);
    if (!rc && help) {
        printf("usage: scaletrain prepare --out DIR [options] INPUT...\n"
               "INPUT: text files (documents end at a separator line), .jsonl files (field \"text\"),\n"
               "       WikiText .tokens files (one document per ' = Title = ' article), directories of them,\n"
               "       or - (standard input); gzip and zstd are read as such (.jsonl.gz, .jsonl.zst).\n"
               "Chat (SFT): --format chat reads {\"messages\": [...]} or {\"prompt\", \"response\"} lines and writes a\n"
               "       loss mask beside each shard (docs/finetune.md).\n"
               "Parquet: scripts/parquet2jsonl FILE.parquet | scaletrain prepare --format jsonl ... -\n"
               "The split and the order are by a keyed hash of each document (docs/data.md); an interrupted\n"
               "prepare with the same inputs and options resumes.\n\n");
        args_print_help(specs, n);
        free(inputs);
        return 0;
    }
    o.separator = sep;
    o.dedup = !no_dedup;
    o.field = field;
    o.skip_bad = skip_bad;
    o.allow_invalid_utf8 = allow_bad_utf8;
    if (!rc) {
        if (!strcmp(format, "auto")) o.format = PREP_FORMAT_AUTO;
        else if (!strcmp(format, "text")) o.format = PREP_FORMAT_TEXT;
        else if (!strcmp(format, "jsonl")) o.format = PREP_FORMAT_JSONL;
        else if (!strcmp(format, "wikitext")) o.format = PREP_FORMAT_WIKITEXT;
        else if (!strcmp(format, "chat")) o.format = PREP_FORMAT_CHAT;
        else rc = fail(2, "--format: expected auto, text, jsonl, wikitext or chat, found '%s'", format);
    }
    if (!rc && chat_template_parse(chat_template, &o.chat_template))
        rc = fail(2, "--chat-template: expected auto, llama3 or plain, found '%s'", chat_template);
    if (!rc && !(val_fraction >= 0 && val_fraction < 1))
        rc = fail(2, "--val-fraction: expected a number in [0, 1), found %g", val_fraction);
    if (!rc && val_docs < -1) rc = fail(2, "--val-docs: expected an integer >= 0 (or -1), found %ld", val_docs);
    if (!rc && (shard_tokens < 1 || shard_tokens > (long)(UINT32_MAX / 4)))
        rc = fail(2, "--shard-tokens: expected an integer in 1..%u, found %ld", UINT32_MAX / 4, shard_tokens);
    if (!rc && (threads < 0 || threads > 4096)) rc = fail(2, "--threads: expected 0..4096, found %d", threads);
    if (!rc && (memory_mb < 1 || memory_mb > (1L << 20)))
        rc = fail(2, "--memory: expected MiB in 1..1048576, found %ld", memory_mb);
    if (!rc && !field[0]) rc = fail(2, "--field: expected a field name, found an empty string");
    /* Options that would change nothing in this combination (issue 12). */
#define SEEN(name) (args_find(specs, n, name)->seen)
    if (!rc && SEEN("val-fraction") && val_docs >= 0)
        rc = fail(2, "--val-fraction: would change nothing with --val-docs %ld; expected one of the two", val_docs);
    /* --seed is never inert: besides the split it keys the order of the documents in the shards */
    if (!rc && SEEN("tokenizer-dir") && !tokenizer_data_subdir(spec))
        rc = fail(2, "--tokenizer-dir: would change nothing for tokenizer '%s'; expected it only with --tokenizer gpt2, "
                     "cl100k, o200k or llama3", spec);
    if (!rc && SEEN("chat-template") && strcmp(format, "chat"))
        rc = fail(2, "--chat-template: would change nothing with --format %s; expected --format chat", format);
    if (!rc && strpbrk(sep, "\r\n")) /* documents are cut at whole lines: a line break never matches */
        rc = fail(2, "--separator: expected one line's text, found a line break in it");
    if (!rc && SEEN("separator") && (!strcmp(format, "jsonl") || !strcmp(format, "wikitext") || !strcmp(format, "chat")))
        rc = fail(2, "--separator: would change nothing with --format %s; expected --format text or auto", format);
    if (!rc && SEEN("field") && (!strcmp(format, "text") || !strcmp(format, "wikitext") || !strcmp(format, "chat")))
        rc = fail(2, "--field: would change nothing with --format %s; expected --format jsonl or auto", format);
#undef SEEN
    if (!rc && o.seq_len < 0) rc = fail(2, "--seq-len: expected an integer >= 0, found %d", o.seq_len);
    if (!rc) {
        if (!strcmp(version, "auto")) o.shard_version = 0;
        else if (!strcmp(version, "1")) o.shard_version = 1;
        else if (!strcmp(version, "7")) o.shard_version = 7;
        else rc = fail(2, "--shard-version: expected auto, 1 or 7, found '%s'", version);
    }
    o.val_fraction = val_fraction;
    o.val_docs = val_docs;
    o.shard_tokens = (size_t)shard_tokens;
    o.threads = threads;
    o.run_bytes = (size_t)memory_mb << 20;
    if (!rc && !out[0]) rc = fail(2, "--out: expected an output directory, found nothing (see --help)");
    if (!rc && nin == 0) rc = fail(2, "expected at least one INPUT file or directory, found none (see --help)");
    o.inputs = (const char *const *)inputs;
    o.ninputs = (size_t)nin;
    /* the same for --field and --separator when the inputs' names decide the format (auto) */
    char msg[1200];
    int code;
    if (!rc && args_find(specs, n, "field")->seen &&
        (code = cli_check_flag_format(&o, "--field", PREP_FORMAT_JSONL, msg, sizeof msg)) != 0)
        rc = fail(code, "%s", msg);
    if (!rc && args_find(specs, n, "separator")->seen &&
        (code = cli_check_flag_format(&o, "--separator", PREP_FORMAT_TEXT, msg, sizeof msg)) != 0)
        rc = fail(code, "%s", msg);
    /* --skip-bad skips bad JSON Lines records, bad conversations and invalid UTF-8: with text inputs
     * only and invalid UTF-8 kept (--allow-invalid-utf8) it has nothing to skip */
    unsigned fmts = 0;
    Err ferr;
    if (!rc && skip_bad && allow_bad_utf8 && prepare_input_formats(&o, &fmts, &ferr) == ST_OK &&
        !(fmts & ((1u << PREP_FORMAT_JSONL) | (1u << PREP_FORMAT_CHAT))))
        rc = fail(2, "--skip-bad: would change nothing with --allow-invalid-utf8 and no JSON Lines input (invalid UTF-8 is "
                     "kept; text has no records to skip); expected one of the two");
    o.out_dir = out;
    const char *dir = dirbuf[0] ? dirbuf : NULL;
    char gdir[PATH_MAX];
    const char *sub = tokenizer_data_subdir(spec);
    if (!rc && !dir && sub && !(dir = cli_find_tokenizer_dir(spec, gdir, sizeof gdir)))
        rc = fail(2, "tokenizer %s: expected its files next to the executable (../data/%s) or in ./data/%s, found "
                     "none: give --tokenizer-dir%s", spec, sub, sub,
                     strcmp(spec, "llama3") ? "" : " (scripts/fetch-llama3-tokenizer.sh fetches Meta's tokenizer.model)");
    Tokenizer *tok = NULL;
    if (!rc && tokenizer_load(&tok, spec, dir, &err)) rc = fail(err.status == ST_ERR_INPUT ? 2 : 1, "%s", err.msg);
    if (rc) {
        free(inputs);
        return rc;
    }
    PrepProgress pr = {isatty(2), -1, 0, 0, 0};
    char cmdline[2048];
    args_join_quoted(cmdline, sizeof cmdline, "scaletrain", argc, argv);
    o.argv_line = cmdline;
    o.tokenizer_arg = spec;
    o.tok = tok;
    if (!quiet) {
        o.progress = prep_progress;
        o.progress_ctx = &pr;
    }
    PrepareStats s;
    st = prepare_run(&o, &s, &err);
    if (st) {
        if (pr.open_line) fputc('\n', stderr); /* the error on a line of its own */
        rc = fail(st == ST_ERR_INPUT ? 2 : 1, "%s", err.msg);
    } else {
        uint64_t toks = s.train_tokens + s.val_tokens;
        printf("prepare: tokenizer %s (vocab %u, hash %016llx), %zu files\n", tokenizer_kind(tok),
               tokenizer_vocab_size(tok), (unsigned long long)tokenizer_hash(tok), s.files);
        if (s.line_pieces >= 2) /* no silent behaviour: the documents are not the user's paragraphs */
            printf("prepare: notice: %s has no blank line between text, so with --separator \"\" it is one document "
                   "and a validation split needs two: cut at line ends into %llu documents of at least %d bytes; "
                   "put blank lines between documents to choose them yourself, or give --val-fraction 0 to keep it "
                   "whole\n", strcmp(inputs[0], "-") ? inputs[0] : "standard input", (unsigned long long)s.line_pieces,
                   PREP_LINE_PIECE_BYTES);
        if (s.finished_publish && !quiet) /* OUT held the earlier call's shards for a moment: say why */
            printf("prepare: finished first the publish of an interrupted earlier prepare into %s (its shards were "
                   "moved in, then replaced by this call's)\n", o.out_dir);
        if (s.resumed_files)
            printf("prepare: resumed: %zu of %zu inputs were finished by an interrupted call and skipped\n",
                   s.resumed_files, s.files);
        printf("prepare: documents %zu read, %zu duplicates dropped, %zu train + %zu val\n", s.docs, s.duplicates,
               s.train_docs, s.val_docs);
        if (o.format == PREP_FORMAT_CHAT) {
            if (s.skips.bad_json + s.skips.missing_field + s.skips.bad_utf8 + s.skips.bad_chat)
                fprintf(stderr, "scaletrain prepare: warning: skipped (--skip-bad): %llu lines not JSON objects, %llu "
                        "with neither \"messages\" nor \"prompt\"/\"response\", %llu bad conversations (role, "
                        "content, nothing to train), %llu with invalid UTF-8\n", (unsigned long long)s.skips.bad_json,
                        (unsigned long long)s.skips.missing_field, (unsigned long long)s.skips.bad_chat,
                        (unsigned long long)s.skips.bad_utf8);
            printf("prepare: chat template %s; trained targets (loss mask): %llu train, %llu val; a .mask beside each "
                   "shard\n", chat_template_name(s.chat_template), (unsigned long long)s.train_trained,
                   (unsigned long long)s.val_trained);
        } else if (s.skips.bad_json + s.skips.missing_field + s.skips.bad_utf8)
            printf("prepare: skipped (--skip-bad): %llu lines not JSON objects, %llu without a string \"%s\" (or with "
                   "a NUL in it), %llu documents with invalid UTF-8\n", (unsigned long long)s.skips.bad_json,
                   (unsigned long long)s.skips.missing_field, field, (unsigned long long)s.skips.bad_utf8);
        printf("prepare: %llu input bytes; %llu text bytes -> %llu tokens (%llu train + %llu val, EOT included), "
               "%.3f bytes/token\n", (unsigned long long)s.input_bytes,
               (unsigned long long)s.bytes, (unsigned long long)toks, (unsigned long long)s.train_tokens,
               (unsigned long long)s.val_tokens, toks ? (double)s.bytes / (double)toks : 0.0);
        int wide = o.shard_version == 7 || (o.shard_version == 0 && tokenizer_vocab_size(tok) > 65536);
        int nt = threads > 0 ? threads : omp_get_max_threads();
        printf("prepare: shards written: %zu train + %zu val in %s (version %d, %s tokens), manifest.json beside them; "
               "%zu sorted runs, %.2f s, %.1f MB/s (%.1f MB/s per thread, %d threads)\n",
               s.train_shards, s.val_shards, o.out_dir, wide ? 7 : 1, wide ? "uint32" : "uint16", s.runs, s.seconds,
               s.seconds > 0 ? (double)s.bytes / s.seconds / 1e6 : 0.0,
               s.seconds > 0 ? (double)s.bytes / s.seconds / 1e6 / nt : 0.0, nt);
        if (o.seq_len > 0 && s.nopack_rows)
            printf("prepare: packing at T=%d: packed rows (default) use 100%% of target slots; --no-pack would take "
                   "%llu rows, utilization %.1f%%\n",
                   o.seq_len, (unsigned long long)s.nopack_rows, 100.0 * s.nopack_utilization);
    }
    tokenizer_free(tok);
    free(inputs);
    return rc;
}
