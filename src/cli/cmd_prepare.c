/* cmd_prepare.c — `scaletrain prepare`: text / JSONL / WikiText -> train and val token shards.
 * Option parsing, the progress bar and the summary; the pipeline is data/prepare.c. */
#include <limits.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

static void usage(FILE *f) {
    PrepareOptions d = prepare_default_options();
    fprintf(f,
            "usage: scaletrain prepare --out DIR [options] INPUT...\n"
            "INPUT: text files (documents end at a separator line), .jsonl files (field \"text\"),\n"
            "       WikiText .tokens files (one document per ' = Title = ' article), or directories of them.\n"
            "  --out DIR            output directory for train_NNNNNN.bin / val_NNNNNN.bin    [required]\n"
            "  --tokenizer T        gpt2 | bytes | DIR of a trained tokenizer                  [gpt2]\n"
            "  --tokenizer-dir D    where gpt2's encoder.json/vocab.bpe are  [$ST_GPT2_DIR, <exe>/../data/gpt2_tokenizer, ./data/gpt2_tokenizer]\n"
            "  --format F           auto | text | jsonl | wikitext (auto: by extension)        [auto]\n"
            "  --separator S        document separator line in text files (\"\" = blank line) [%s]\n"
            "  --val-fraction F     fraction of documents for validation, in [0, 1)            [%g]\n"
            "  --val-docs N         exact number of validation documents (overrides fraction)  [unset]\n"
            "  --seed N             seed of the validation choice                              [%llu]\n"
            "  --shard-tokens N     maximum tokens per shard                                   [%zu]\n"
            "  --threads N          encoding threads (0 = all cores)                           [0]\n"
            "  --no-dedup           keep exact duplicate documents                             [dedup on]\n"
            "  --quiet              no progress output                                         [off]\n"
            "  -h, --help           this help\n",
            d.separator, d.val_fraction, (unsigned long long)d.seed, d.shard_tokens);
}

typedef struct {
    int tty;
    int last_decile;
    double t0;
} Progress;

static void progress_cb(void *ctx, uint64_t done, uint64_t total) {
    Progress *p = ctx;
    double el = omp_get_wtime() - p->t0, frac = total ? (double)done / (double)total : 1.0;
    double rate = el > 0 ? (double)done / el / 1e6 : 0;
    double eta = frac > 0 ? el * (1 - frac) / frac : 0;
    if (p->tty) {
        int w = 30, k = (int)(frac * w + 0.5);
        char bar[64];
        for (int i = 0; i < w; i++) bar[i] = i < k ? '#' : '.';
        bar[w] = 0;
        fprintf(stderr, "\rprepare [%s] %5.1f%% %8.1f MB/s  ETA %3d:%02d ", bar, frac * 100, rate, (int)eta / 60,
                (int)eta % 60);
        if (done >= total) fprintf(stderr, "\n");
    } else {
        int dec = (int)(frac * 10);
        if (dec > p->last_decile || done >= total) {
            p->last_decile = dec;
            fprintf(stderr, "prepare: %3.0f%% %llu/%llu bytes, %.1f MB/s, ETA %.0f s\n", frac * 100,
                    (unsigned long long)done, (unsigned long long)total, rate, eta);
        }
    }
}

int cmd_prepare(int argc, char **argv) {
    PrepareOptions o = prepare_default_options();
    const char *spec = "gpt2", *dir = NULL;
    int quiet = 0;
    const char **inputs = calloc((size_t)argc + 1, sizeof *inputs);
    size_t nin = 0;
    int rc = 0;
    for (int i = 1; i < argc && !rc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            free(inputs);
            return 0;
        }
        if (!strcmp(a, "--no-dedup")) {
            o.dedup = 0;
            continue;
        }
        if (!strcmp(a, "--quiet")) {
            quiet = 1;
            continue;
        }
        if (a[0] != '-' || !a[1]) {
            inputs[nin++] = a;
            continue;
        }
        static const char *valued[] = {"--out", "--tokenizer", "--tokenizer-dir", "--format", "--separator",
                                       "--val-fraction", "--val-docs", "--seed", "--shard-tokens", "--threads"};
        int known = 0;
        for (size_t k = 0; k < sizeof valued / sizeof *valued; k++) known |= !strcmp(a, valued[k]);
        if (!known) {
            rc = fail(2, "unknown option %s (see --help)", a);
            break;
        }
        if (i + 1 >= argc) {
            rc = fail(2, "%s: expected a value, found nothing", a);
            break;
        }
        const char *v = argv[++i];
        unsigned long long u;
        double x;
        if (!strcmp(a, "--out")) o.out_dir = v;
        else if (!strcmp(a, "--tokenizer")) spec = v;
        else if (!strcmp(a, "--tokenizer-dir")) dir = v;
        else if (!strcmp(a, "--separator")) o.separator = v;
        else if (!strcmp(a, "--format")) {
            if (!strcmp(v, "auto")) o.format = PREP_FORMAT_AUTO;
            else if (!strcmp(v, "text")) o.format = PREP_FORMAT_TEXT;
            else if (!strcmp(v, "jsonl")) o.format = PREP_FORMAT_JSONL;
            else if (!strcmp(v, "wikitext")) o.format = PREP_FORMAT_WIKITEXT;
            else rc = fail(2, "--format: expected auto, text, jsonl or wikitext, found %s", v);
        } else if (!strcmp(a, "--val-fraction")) {
            if (cli_parse_double(v, &x) || !(x >= 0 && x < 1))
                rc = fail(2, "--val-fraction: expected a number in [0, 1), found %s", v);
            o.val_fraction = x;
        } else if (!strcmp(a, "--val-docs")) {
            if (cli_parse_u64(v, &u) || u > LONG_MAX) rc = fail(2, "--val-docs: expected an integer >= 0, found %s", v);
            o.val_docs = (long)u;
        } else if (!strcmp(a, "--seed")) {
            if (cli_parse_u64(v, &u)) rc = fail(2, "--seed: expected an integer >= 0, found %s", v);
            o.seed = u;
        } else if (!strcmp(a, "--shard-tokens")) {
            if (cli_parse_u64(v, &u) || u == 0 || u > UINT32_MAX / 4)
                rc = fail(2, "--shard-tokens: expected an integer in 1..%u, found %s", UINT32_MAX / 4, v);
            o.shard_tokens = (size_t)u;
        } else if (!strcmp(a, "--threads")) {
            if (cli_parse_u64(v, &u) || u > 4096) rc = fail(2, "--threads: expected an integer >= 0, found %s", v);
            o.threads = (int)u;
        }
    }
    if (!rc && !o.out_dir) rc = fail(2, "--out: expected an output directory, found nothing (see --help)");
    if (!rc && nin == 0) rc = fail(2, "expected at least one INPUT file or directory, found none (see --help)");
    char gdir[PATH_MAX];
    if (!rc && !dir && !strcmp(spec, "gpt2") && !(dir = cli_find_gpt2_dir(gdir, sizeof gdir)))
        rc = fail(2, "tokenizer gpt2: expected encoder.json + vocab.bpe next to the executable "
                     "(../data/gpt2_tokenizer) or in ./data/gpt2_tokenizer, found none: give --tokenizer-dir");
    Tokenizer *tok = NULL;
    Err err;
    if (!rc && tokenizer_load(&tok, spec, dir, &err)) rc = fail(err.status == ST_ERR_INPUT ? 2 : 1, "%s", err.msg);
    if (rc) {
        free(inputs);
        return rc;
    }
    Progress pr = {isatty(2), -1, omp_get_wtime()};
    o.inputs = inputs;
    o.ninputs = nin;
    o.tok = tok;
    if (!quiet) {
        o.progress = progress_cb;
        o.progress_ctx = &pr;
    }
    PrepareStats s;
    Status st = prepare_run(&o, &s, &err);
    if (st) {
        rc = fail(st == ST_ERR_INPUT ? 2 : 1, "%s", err.msg);
    } else {
        uint64_t toks = s.train_tokens + s.val_tokens;
        printf("prepare: tokenizer %s (vocab %u, hash %016llx), %zu files\n", tokenizer_kind(tok),
               tokenizer_vocab_size(tok), (unsigned long long)tokenizer_hash(tok), s.files);
        printf("prepare: documents %zu read, %zu duplicates dropped, %zu train + %zu val\n", s.docs, s.duplicates,
               s.train_docs, s.val_docs);
        printf("prepare: %llu bytes -> %llu tokens (%llu train + %llu val, EOT included), %.3f bytes/token\n",
               (unsigned long long)s.bytes, (unsigned long long)toks, (unsigned long long)s.train_tokens,
               (unsigned long long)s.val_tokens, toks ? (double)s.bytes / (double)toks : 0.0);
        printf("prepare: shards written: %zu train + %zu val in %s (%s tokens), %.2f s, %.1f MB/s\n", s.train_shards,
               s.val_shards, o.out_dir, tokenizer_vocab_size(tok) <= 65536 ? "uint16" : "uint32", s.seconds,
               s.seconds > 0 ? (double)s.bytes / s.seconds / 1e6 : 0.0);
    }
    tokenizer_free(tok);
    free(inputs);
    return rc;
}
