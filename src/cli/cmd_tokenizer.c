/* cmd_tokenizer.c — `scaletrain tokenizer train|encode|decode` (docs/tokenizer.md).
 *
 *   tokenizer train  --vocab-size N --out DIR [--pattern gpt2|cl100k|o200k|llama3] [--holdout F] [--threads N] [--separator S] INPUT...
 *   tokenizer encode [--tokenizer gpt2|cl100k|o200k|llama3|bytes|FILE|DIR] [--format txt|u16le|u32le] FILE [-o OUT]
 *   tokenizer decode [same options] FILE [-o OUT]
 * Also the helpers shared with cmd_prepare.c (cmds_data.h). */
#include <errno.h>
#include <limits.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/cmds_data.h"
#include "core/fileio.h"
#include "data/bpe.h"
#include "data/prepare.h"

/* ================================================================== shared helpers */

int cli_parse_u64(const char *s, unsigned long long *out) {
    if (!s || !*s || *s == '-' || *s == '+') return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) return -1;
    *out = v;
    return 0;
}

int cli_parse_double(const char *s, double *out) {
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end) return -1;
    *out = v;
    return 0;
}

Status cli_load_tokenizer(const char *spec, const char *dir, Tokenizer **out, Err *err) {
    char tdir[1024];
    const char *sub = tokenizer_data_subdir(spec);
    args_find_data_dir(dir, sub ? sub : "gpt2_tokenizer", tdir, sizeof tdir);
    return tokenizer_load(out, spec, tdir, err);
}

static const char *format_name(PrepareFormat f) {
    return f == PREP_FORMAT_TEXT ? "text" : f == PREP_FORMAT_JSONL ? "JSON Lines" : f == PREP_FORMAT_WIKITEXT ? "WikiText"
         : f == PREP_FORMAT_CHAT ? "chat" : "auto";
}

int cli_check_flag_format(const PrepareOptions *o, const char *flag, PrepareFormat fmt, char *msg, size_t cap) {
    unsigned formats = 0;
    Err err;
    if (prepare_input_formats(o, &formats, &err)) {
        snprintf(msg, cap, "%s", err.msg);
        return err.status == ST_ERR_INPUT ? 2 : 1;
    }
    if (formats & (1u << fmt)) return 0;
    char found[64] = "";
    for (int f = PREP_FORMAT_TEXT; f <= PREP_FORMAT_CHAT; f++) {
        if (!(formats & (1u << f))) continue;
        size_t l = strlen(found);
        snprintf(found + l, sizeof found - l, "%s%s", l ? " and " : "", format_name((PrepareFormat)f));
    }
    snprintf(msg, cap, "%s: would change nothing: no input is read as %s, found inputs read as %s%s; expected %s",
             flag, format_name(fmt), found,
             o->format == PREP_FORMAT_AUTO ? " (the format follows each file's name under --format auto)" : "",
             fmt == PREP_FORMAT_JSONL ? "a .jsonl or .json input or --format jsonl" : "a text input or --format text");
    return 2;
}

static int has_encoder(const char *dir) {
    char p[PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/encoder.json", dir);
    return access(p, R_OK) == 0;
}

const char *cli_find_gpt2_dir(char *buf, size_t n) {
    const char *env = getenv("ST_GPT2_DIR");
    if (env && has_encoder(env)) {
        snprintf(buf, n, "%s", env);
        return buf;
    }
    char exe[PATH_MAX];
    ssize_t l = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (l > 0) {
        exe[l] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) *slash = 0;
        static const char *rel[] = {"/../data/gpt2_tokenizer", "/../../data/gpt2_tokenizer", "/data/gpt2_tokenizer"};
        for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) {
            char cand[PATH_MAX + 64];
            snprintf(cand, sizeof cand, "%s%s", exe, rel[i]);
            char real[PATH_MAX];
            if (realpath(cand, real) && has_encoder(real)) {
                snprintf(buf, n, "%s", real);
                return buf;
            }
        }
    }
    if (has_encoder("data/gpt2_tokenizer")) {
        snprintf(buf, n, "data/gpt2_tokenizer");
        return buf;
    }
    return NULL;
}

const char *cli_find_tokenizer_dir(const char *spec, char *buf, size_t n) {
    const char *sub = tokenizer_data_subdir(spec);
    if (!sub) return NULL;
    if (!strcmp(spec, "gpt2")) return cli_find_gpt2_dir(buf, n);
    char probe[PATH_MAX + 64];
    if (!args_find_data_dir(NULL, sub, buf, n)) return NULL;
    if (!strcmp(spec, "llama3")) snprintf(probe, sizeof probe, "%s/tokenizer.model", buf);
    else snprintf(probe, sizeof probe, "%s/%s_base.tkr", buf, spec);
    return access(probe, R_OK) == 0 ? buf : NULL;
}

static int fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "scaletrain tokenizer: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return code;
}

static int fail_err(const Err *e) { return fail(e->status == ST_ERR_INPUT ? 2 : 1, "%s", e->msg); }

static void usage(FILE *f) {
    fprintf(f,
            "usage: scaletrain tokenizer train  --vocab-size N --out DIR [options] FILE...\n"
            "       scaletrain tokenizer encode [options] FILE [-o OUT]\n"
            "       scaletrain tokenizer decode [options] FILE [-o OUT]\n"
            "\n"
            "train: learn a byte-level BPE with the pre-tokenizer of --pattern gpt2 | cl100k | o200k | llama3 [gpt2]\n"
            "       (options: tokenizer train --help)\n"
            "encode / decode: FILE is text (encode) or ids (decode); '-' is stdin\n"
            "  --tokenizer T       tokenizer and its pre-tokenizer pattern                 [gpt2]\n"
            "                        gpt2     GPT-2 BPE (encoder.json + vocab.bpe), GPT-2's pattern, 50257 ids\n"
            "                        cl100k   tiktoken cl100k_base (cl100k_base.tkr), cl100k's pattern, 100277 ids\n"
            "                        o200k    tiktoken o200k_base (o200k_base.tkr), o200k's pattern, 200019 ids\n"
            "                        llama3   Meta's Llama 3 (tokenizer.model + 256 special tokens), Llama 3's\n"
            "                                 pattern (= cl100k's), 128256 ids, EOT <|end_of_text|> 128001\n"
            "                        bytes    one id per byte + EOT, 257 ids\n"
            "                        FILE.tkr a rank file: the pattern it names\n"
            "                        DIR      encoder.json + vocab.bpe (+ `pattern`: gpt2 | cl100k | o200k |\n"
            "                                 llama3), or tokenizer.model + `pattern` reading llama3\n"
            "  --tokenizer-dir D   where the named tokenizer's files are [<exe>/../data/gpt2_tokenizer,\n"
            "                      .../data/tokenizers (cl100k, o200k), .../data/tokenizers/llama3 (llama3)]\n"
            "  --format F          ids as txt (decimal, space-separated) | u16le | u32le   [txt]\n"
            "  -o, --output OUT    output file ('-' = stdout)                              [-]\n"
            "  -h, --help          this help\n");
}

/* Reads a whole file ('-' = stdin). */
static int read_input(const char *path, uint8_t **buf, size_t *n) {
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!f) return -1;
    size_t cap = 1 << 16, len = 0;
    uint8_t *b = malloc(cap);
    while (b) {
        len += fread(b + len, 1, cap - len, f);
        if (len < cap) break;
        cap *= 2;
        uint8_t *nb = realloc(b, cap);
        if (!nb) free(b);
        b = nb;
    }
    int bad = ferror(f) || !b;
    if (f != stdin) fclose(f);
    if (bad) {
        free(b);
        return -2;
    }
    b[len] = 0; /* len < cap here: NUL-terminated for messages that quote the input */
    *buf = b;
    *n = len;
    return 0;
}

/* Value of option argv[*i] (advances *i), or NULL if missing. */
static const char *optval(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) return NULL;
    return argv[++*i];
}

/* ================================================================== train */

/* 1 for a file `tokenizer train` writes into its --out directory. */
static int tokenizer_output_name(const char *name) {
    return !strcmp(name, "encoder.json") || !strcmp(name, "vocab.bpe") || !strcmp(name, "pattern") ||
           !strcmp(name, BPE_FILES_STAMP);
}

static int cmd_train(int argc, char **argv) {
    PrepareOptions po = prepare_default_options();
    long vocab = 4096;
    double holdout = 0.1;
    int threads = 0;
    char out[1024] = "", format[16] = "auto", sep[256], pattern[32] = "gpt2", field[128] = "text";
    int skip_bad = 0;
    snprintf(sep, sizeof sep, "%s", po.separator);
    ArgSpec specs[] = {
        {"vocab-size", ARG_LONG, &vocab, 0, "vocabulary incl. 256 bytes and <|endoftext|> (>= 257)"},
        {"pattern", ARG_STR, pattern, sizeof pattern, "pre-tokenizer: gpt2 | cl100k | o200k | llama3 (recorded in DIR/pattern)"},
        {"out", ARG_DIR, out, sizeof out, "output directory for encoder.json + vocab.bpe (required)"},
        {"holdout", ARG_DOUBLE, &holdout, 0, "last fraction of the corpus held out for the bytes/token report"},
        {"threads", ARG_INT, &threads, 0, "pre-token counting threads (0 = all cores)"},
        {"format", ARG_STR, format, sizeof format, "auto | text | jsonl | wikitext (as in prepare)"},
        {"separator", ARG_STR, sep, sizeof sep, "document separator line in text files (\"\" = blank line)"},
        {"field", ARG_STR, field, sizeof field, "JSON Lines: the string field holding each document's text (as in prepare)"},
        {"skip-bad", ARG_FLAG, &skip_bad, 0, "count and skip bad JSON Lines records (not JSON, no --field) instead of "
                                             "stopping at the first (as in prepare)"},
    };
    int n = (int)(sizeof specs / sizeof specs[0]), nfiles = 0, help = 0;
    char **files = calloc((size_t)argc + 1, sizeof *files);
    Err err;
    Status st = args_parse(specs, n, argc - 1, argv + 1, files, argc, &nfiles, &help, &err);
    int rc = st ? fail_err(&err) : 0;
    if (!rc && help) {
        printf("usage: scaletrain tokenizer train --vocab-size N --out DIR [options] INPUT...\n"
               "Learns a byte-level BPE with the --pattern pre-tokenization on the documents of INPUT (text, .jsonl,\n"
               "WikiText or directories, split into documents as by prepare; pre-tokens never cross documents).\n\n");
        args_print_help(specs, n);
        free(files);
        return 0;
    }
    if (!rc && (vocab < 257 || vocab > (1L << 30))) /* a model's vocabulary bound (model_config_validate) */
        rc = fail(2, "--vocab-size: expected an integer in 257..2^30 (256 bytes + <|endoftext|> at least), found %ld",
                  vocab);
    if (!rc && strpbrk(sep, "\r\n")) /* documents are cut at whole lines: a line break never matches */
        rc = fail(2, "--separator: expected one line's text, found a line break in it");
    if (!rc && !(holdout >= 0 && holdout < 1)) rc = fail(2, "--holdout: expected a fraction in [0, 1), found %g", holdout);
    BpePattern pat = BPE_PATTERN_GPT2;
    if (!rc && bpe_pattern_parse(pattern, &pat)) rc = fail(2, "--pattern: expected gpt2, cl100k, o200k or llama3, found '%s'", pattern);
    if (!rc && (threads < 0 || threads > 4096)) rc = fail(2, "--threads: expected 0..4096, found %d", threads);
    if (!rc && !out[0]) rc = fail(2, "--out: expected an output directory, found nothing (see --help)");
    if (!rc && nfiles == 0) rc = fail(2, "expected at least one corpus INPUT, found none (see --help)");
    if (!rc && args_find(specs, n, "separator")->seen && (!strcmp(format, "jsonl") || !strcmp(format, "wikitext")))
        rc = fail(2, "--separator: would change nothing with --format %s; expected --format text or auto", format);
    if (!rc && args_find(specs, n, "field")->seen && (!strcmp(format, "text") || !strcmp(format, "wikitext")))
        rc = fail(2, "--field: would change nothing with --format %s; expected --format jsonl or auto", format);
    if (!rc && !field[0]) rc = fail(2, "--field: expected a field name, found ''");
    if (!rc) {
        if (!strcmp(format, "auto")) po.format = PREP_FORMAT_AUTO;
        else if (!strcmp(format, "text")) po.format = PREP_FORMAT_TEXT;
        else if (!strcmp(format, "jsonl")) po.format = PREP_FORMAT_JSONL;
        else if (!strcmp(format, "wikitext")) po.format = PREP_FORMAT_WIKITEXT;
        else rc = fail(2, "--format: expected auto, text, jsonl or wikitext, found '%s'", format);
    }
    PrepareDocs docs = {0};
    po.inputs = (const char *const *)files;
    po.ninputs = (size_t)nfiles;
    po.separator = sep;
    po.field = field, po.skip_bad = skip_bad;
    char msg[1200];
    int code;
    if (!rc && args_find(specs, n, "separator")->seen &&
        (code = cli_check_flag_format(&po, "--separator", PREP_FORMAT_TEXT, msg, sizeof msg)) != 0)
        rc = fail(code, "%s", msg);
    if (!rc && args_find(specs, n, "field")->seen &&
        (code = cli_check_flag_format(&po, "--field", PREP_FORMAT_JSONL, msg, sizeof msg)) != 0)
        rc = fail(code, "%s", msg);
    if (!rc && skip_bad && (code = cli_check_flag_format(&po, "--skip-bad", PREP_FORMAT_JSONL, msg, sizeof msg)) != 0)
        rc = fail(code, "%s", msg);
    /* `tokenizer train --out d d` read its own encoder.json and vocab.bpe as corpus the next time */
    if (!rc && prepare_check_inputs_not_outputs(po.inputs, po.ninputs, out, tokenizer_output_name,
                                                "encoder.json, vocab.bpe, pattern and " BPE_FILES_STAMP, &err))
        rc = fail_err(&err);
    if (!rc && (st = prepare_read_documents(&po, &docs, &err)) != ST_OK) rc = fail_err(&err);
    if (!rc && docs.skips.bad_json + docs.skips.missing_field)
        printf("tokenizer train: skipped (--skip-bad): %llu lines not JSON objects, %llu without a string \"%s\" (or with "
               "a NUL in it)\n", (unsigned long long)docs.skips.bad_json, (unsigned long long)docs.skips.missing_field, field);
    size_t total = 0;
    for (size_t d = 0; d < docs.n; d++) total += docs.len[d];
    /* Hold out the last `holdout` of the corpus (in document order), cut at a line start. */
    const uint8_t **tt = calloc(docs.n + 1, sizeof *tt), **ht = calloc(docs.n + 1, sizeof *ht);
    size_t *tl = calloc(docs.n + 1, sizeof *tl), *hl = calloc(docs.n + 1, sizeof *hl);
    size_t ntrain = 0, nhold = 0;
    size_t cut = total - (size_t)((double)total * holdout), pos = 0;
    for (size_t f = 0; f < docs.n && !rc; f++) {
        size_t len = docs.len[f];
        const uint8_t *b = docs.text[f];
        size_t c = cut <= pos ? 0 : cut - pos < len ? cut - pos : len;
        if (c > 0 && c < len) { /* move the cut to the next line start */
            const uint8_t *nl = memchr(b + c, '\n', len - c);
            c = nl ? (size_t)(nl - b) + 1 : len;
        }
        if (c) tt[ntrain] = b, tl[ntrain++] = c;
        if (c < len) ht[nhold] = b + c, hl[nhold++] = len - c;
        pos += len;
    }
    /* --holdout holds out the text from the first line start at or after the cut; with none there
     * (the last document has no line end after the cut, or the fraction is under one byte) nothing
     * would be held out and no report printed: a given --holdout is refused rather than ignored, the
     * default says so and trains on everything */
    int given = args_find(specs, n, "holdout")->seen;
    if (!rc && holdout > 0 && nhold == 0 && !given)
        printf("tokenizer train: nothing held out (no line begins after byte %zu of the %zu-byte corpus): all of it "
               "trained on, no held-out report\n", cut, total);
    else if (!rc && holdout > 0 && nhold == 0)
        rc = fail(2, "--holdout %g: expected text to hold out from the first line start after byte %zu of the "
                     "%zu-byte corpus (its last %g%%), found none (%s); give --holdout 0 to train on all of it",
                  holdout, cut, total, holdout * 100,
                  cut == total ? "that share is under one byte" : "no line begins after that byte");
    if (!rc) {
        BpeTrainOptions o = bpe_train_default_options();
        o.vocab_size = (uint32_t)vocab;
        o.threads = threads;
        o.pattern = pat;
        BpeTrainStats s;
        st = bpe_train(tt, tl, ntrain, &o, out, &s, &err);
        if (st) {
            rc = fail_err(&err);
        } else {
            printf("tokenizer train: %zu documents in %zu files, %llu bytes trained on, %zu distinct pre-tokens, "
                   "%zu merges, vocab %u (EOT = %u), pattern %s in %.2f s -> %s/encoder.json, %s/vocab.bpe\n",
                   docs.n, docs.files, (unsigned long long)s.corpus_bytes, s.unique_pretokens, s.merges, s.vocab_size,
                   s.vocab_size - 1, pattern, s.seconds, out, out);
            if (s.vocab_size < (uint32_t)vocab) /* no silent shortfall: --vocab-size was not reached */
                printf("tokenizer train: notice: vocab %u, not the %ld of --vocab-size: no pair of adjacent tokens was "
                       "left to merge (a larger corpus gives more)\n", s.vocab_size, vocab);
            Tokenizer *t = NULL;
            if (nhold && tokenizer_load(&t, out, NULL, &err) == ST_OK) {
                uint32_t *ids = NULL;
                size_t nids = 0, cap = 0, hb = 0;
                for (size_t h = 0; h < nhold; h++) {
                    tokenizer_encode(t, ht[h], hl[h], &ids, &nids, &cap, &err);
                    hb += hl[h];
                }
                printf("tokenizer train: held-out %zu bytes (last %.0f%%) -> %zu tokens, %.3f bytes/token\n", hb,
                       holdout * 100, nids, nids ? (double)hb / (double)nids : 0.0);
                char gdir[PATH_MAX];
                Tokenizer *g = NULL;
                if (cli_find_gpt2_dir(gdir, sizeof gdir) && tokenizer_load(&g, "gpt2", gdir, &err) == ST_OK) {
                    size_t ng = 0;
                    for (size_t h = 0; h < nhold; h++) {
                        size_t before = nids;
                        tokenizer_encode(g, ht[h], hl[h], &ids, &nids, &cap, &err);
                        ng += nids - before;
                    }
                    printf("tokenizer train: (gpt2 on the same held-out text: %zu tokens, %.3f bytes/token)\n", ng,
                           ng ? (double)hb / (double)ng : 0.0);
                    tokenizer_free(g);
                }
                free(ids);
                tokenizer_free(t);
            } else if (nhold) {
                rc = fail_err(&err);
            }
        }
    }
    prepare_docs_free(&docs);
    free(tt);
    free(ht);
    free(tl);
    free(hl);
    free(files);
    return rc;
}

/* ================================================================== encode / decode */

static int cmd_codec(int argc, char **argv, int encode) {
    const char *spec = "gpt2", *dir = NULL, *format = "txt", *in = NULL, *outp = "-";
    /* the option each value came from (NULL: not given): one given twice is refused, as args_parse
     * refuses it for every other command (the last value used to win silently: `--format txt
     * --format u16le` wrote u16le) */
    static const char *const names[] = {"--tokenizer", "--tokenizer-dir", "--format", "--output"};
    const char **vals[] = {&spec, &dir, &format, &outp};
    const char *given[4] = {NULL, NULL, NULL, NULL};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        char name[32] = "";
        const char *eq = a[0] == '-' && a[1] == '-' ? strchr(a, '=') : NULL; /* --name=value, as args_parse takes */
        snprintf(name, sizeof name, "%.*s", eq ? (int)(eq - a) : (int)strlen(a), a);
        int k = -1;
        for (int j = 0; j < 4; j++)
            if (!strcmp(name, names[j])) k = j;
        if (!strcmp(name, "-o")) k = 3;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (k >= 0) {
            if (eq) v = eq + 1;
            else if (!(v = optval(argc, argv, &i))) return fail(2, "%s: expected a value, found nothing", a);
            if (given[k])
                return fail(2, "%s: given twice (%s, then %s); expected it once", names[k], given[k], v);
            given[k] = v;
            *vals[k] = v;
        } else if (a[0] == '-' && a[1]) {
            return fail(2, "unknown option %s for 'tokenizer %s' (see --help)", a, encode ? "encode" : "decode");
        } else if (in) {
            return fail(2, "expected one input FILE, found a second one: %s", a);
        } else {
            in = a;
        }
    }
    int fmt = !strcmp(format, "txt") ? 0 : !strcmp(format, "u16le") ? 2 : !strcmp(format, "u32le") ? 4 : -1;
    if (fmt < 0) return fail(2, "--format: expected txt, u16le or u32le, found %s", format);
    if (!in) return fail(2, "expected an input FILE (or -), found none (see --help)");
    /* -o naming the input file itself (or a link to it) would replace the text by its ids (or the
     * ids by their text): refused before anything is read or written */
    struct stat si, so;
    if (strcmp(in, "-") && strcmp(outp, "-") && stat(in, &si) == 0 && S_ISREG(si.st_mode) && stat(outp, &so) == 0 &&
        si.st_dev == so.st_dev && si.st_ino == so.st_ino)
        return fail(2, "--output %s: expected a file other than the input, found the input %s itself (it would be "
                       "overwritten)", outp, in);
    const char *sub = tokenizer_data_subdir(spec);
    if (dir && !sub)
        return fail(2, "--tokenizer-dir: would change nothing for tokenizer '%s'; expected it only with --tokenizer "
                       "gpt2, cl100k, o200k or llama3", spec);
    char gdir[PATH_MAX];
    if (!dir && sub && !(dir = cli_find_tokenizer_dir(spec, gdir, sizeof gdir)))
        return fail(2, "tokenizer %s: expected its files next to the executable (../data/%s) or in ./data/%s, found "
                       "none: give --tokenizer-dir%s", spec, sub, sub,
                     strcmp(spec, "llama3") ? "" : " (scripts/fetch-llama3-tokenizer.sh fetches Meta's tokenizer.model)");
    Err err;
    Tokenizer *t = NULL;
    if (tokenizer_load(&t, spec, dir, &err)) return fail_err(&err);
    uint8_t *buf = NULL;
    size_t n = 0;
    if (read_input(in, &buf, &n)) {
        tokenizer_free(t);
        return fail(2, "%s: expected a readable file, found %s", in, strerror(errno));
    }
    /* -o FILE: written to FILE.tmp.<pid> and renamed over FILE only once all is well, so an error
     * (a bad id, an unreadable input) leaves an existing FILE as it was */
    int to_file = strcmp(outp, "-") != 0;
    FileAtomic fa = {.fd = -1};
    if (to_file && file_atomic_open(&fa, outp, &err)) {
        free(buf);
        tokenizer_free(t);
        return fail(2, "%s", err.msg);
    }
    int rc = 0;
    uint32_t *ids = NULL;
    size_t nids = 0, cap = 0;
    uint8_t *res = NULL; /* what goes out: ids (encode) or text (decode) */
    size_t rlen = 0, rcap = 0;
    if (encode) {
        if (tokenizer_encode(t, buf, n, &ids, &nids, &cap, &err)) rc = fail_err(&err);
        if (!rc && fmt == 2 && tokenizer_vocab_size(t) > 65536)
            rc = fail(2, "--format u16le: expected a vocabulary of at most 65536, found %u (use u32le)",
                      tokenizer_vocab_size(t));
        if (!rc && !(res = malloc(nids * 11 + 1))) rc = fail(1, "out of memory (%zu ids)", nids);
        for (size_t i = 0; !rc && i < nids; i++) {
            if (fmt == 0) rlen += (size_t)sprintf((char *)res + rlen, i + 1 < nids ? "%u " : "%u\n", ids[i]);
            else for (int k = 0; k < fmt; k++) res[rlen++] = (uint8_t)(ids[i] >> (8 * k));
        }
    } else {
        /* parse ids */
        if (fmt == 0) {
            char *p = (char *)buf, *end = (char *)buf + n;
            ids = malloc((n / 2 + 1) * sizeof *ids);
            while (p < end && !rc) {
                while (p < end && (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r' || *p == ',')) p++;
                if (p >= end) break;
                char *q = p;
                unsigned long v = 0;
                while (q < end && *q >= '0' && *q <= '9' && v <= UINT32_MAX) v = v * 10 + (unsigned long)(*q++ - '0');
                if (q == p || v > UINT32_MAX || (q < end && !strchr(" \n\t\r,", *q))) {
                    int w = 0; /* quote the bad word only: a line break inside would split the error line */
                    while (p + w < end && w < 20 && !strchr(" \n\t\r,", p[w])) w++;
                    rc = fail(2, "%s: expected decimal token ids, found \"%.*s\" at byte %zu", in, w, p,
                              (size_t)(p - (char *)buf));
                }
                ids[nids++] = (uint32_t)v;
                p = q;
            }
        } else {
            if (n % (size_t)fmt)
                rc = fail(2, "%s: expected a multiple of %d bytes for %s, found %zu bytes", in, fmt, format, n);
            nids = n / (size_t)fmt;
            ids = malloc((nids + 1) * sizeof *ids);
            for (size_t i = 0; !rc && i < nids; i++)
                ids[i] = fmt == 2 ? (uint32_t)buf[2 * i] | (uint32_t)buf[2 * i + 1] << 8
                                  : (uint32_t)buf[4 * i] | (uint32_t)buf[4 * i + 1] << 8 |
                                        (uint32_t)buf[4 * i + 2] << 16 | (uint32_t)buf[4 * i + 3] << 24;
        }
        if (!rc && tokenizer_decode(t, ids, nids, &res, &rlen, &rcap, &err)) rc = fail(2, "%s: %s", in, err.msg);
    }
    if (!rc && to_file && (file_atomic_write(&fa, res, rlen, &err) || file_atomic_commit(&fa, &err)))
        rc = fail_err(&err);
    if (!rc && !to_file && ((rlen && fwrite(res, 1, rlen, stdout) != rlen) || fflush(stdout) != 0))
        rc = fail(1, "standard output: write failed (%s)", strerror(errno));
    file_atomic_abort(&fa); /* removes the temporary unless committed */
    /* the text's bytes: the input's for encode, the output's for decode */
    if (!rc && to_file)
        fprintf(stderr, "tokenizer %s: %zu bytes <-> %zu tokens (%s, vocab %u)\n", encode ? "encode" : "decode",
                encode ? n : rlen, nids, tokenizer_kind(t), tokenizer_vocab_size(t));
    free(res);
    free(ids);
    free(buf);
    tokenizer_free(t);
    return rc;
}

int cmd_tokenizer(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "train")) return cmd_train(argc - 1, argv + 1);
    if (!strcmp(argv[1], "encode")) return cmd_codec(argc - 1, argv + 1, 1);
    if (!strcmp(argv[1], "decode")) return cmd_codec(argc - 1, argv + 1, 0);
    return fail(2, "expected train, encode or decode, found '%s' (see --help)", argv[1]);
}
