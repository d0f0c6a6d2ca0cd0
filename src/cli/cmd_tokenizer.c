/* cmd_tokenizer.c — `scaletrain tokenizer train|encode|decode` (docs/tokenizer.md).
 *
 *   tokenizer train  --vocab-size N --out DIR [--holdout F] [--threads N] FILE...
 *   tokenizer encode [--tokenizer gpt2|bytes|DIR] [--format txt|u16le|u32le] FILE [-o OUT]
 *   tokenizer decode [--tokenizer gpt2|bytes|DIR] [--format txt|u16le|u32le] FILE [-o OUT]
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

#include "cli/cmds_data.h"
#include "data/bpe.h"

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
            "train: learn a byte-level BPE with GPT-2's pre-tokenization; writes DIR/encoder.json + DIR/vocab.bpe\n"
            "  --vocab-size N      vocabulary incl. 256 bytes and <|endoftext|> (>= 257)   [4096]\n"
            "  --out DIR           output directory (created)                             [required]\n"
            "  --holdout F         last fraction of the corpus held out for bytes/token    [0.1]\n"
            "  --threads N         pre-tokenization threads (0 = all)                      [0]\n"
            "encode / decode: FILE is text (encode) or ids (decode); '-' is stdin\n"
            "  --tokenizer T       gpt2 | bytes | DIR of a trained tokenizer               [gpt2]\n"
            "  --tokenizer-dir D   where gpt2's encoder.json/vocab.bpe are   [<exe>/../data/gpt2_tokenizer]\n"
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

static int cmd_train(int argc, char **argv) {
    unsigned long long vocab = 4096, threads = 0;
    double holdout = 0.1;
    const char *out = NULL;
    const char **files = calloc((size_t)argc, sizeof *files);
    int nfiles = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            free(files);
            return 0;
        } else if (!strcmp(a, "--vocab-size")) {
            if (!(v = optval(argc, argv, &i)) || cli_parse_u64(v, &vocab) || vocab > UINT32_MAX) {
                free(files);
                return fail(2, "--vocab-size: expected an integer >= 257, found %s", v ? v : "nothing");
            }
        } else if (!strcmp(a, "--out")) {
            if (!(out = optval(argc, argv, &i))) {
                free(files);
                return fail(2, "--out: expected a directory, found nothing");
            }
        } else if (!strcmp(a, "--holdout")) {
            if (!(v = optval(argc, argv, &i)) || cli_parse_double(v, &holdout) || !(holdout >= 0 && holdout < 1)) {
                free(files);
                return fail(2, "--holdout: expected a fraction in [0, 1), found %s", v ? v : "nothing");
            }
        } else if (!strcmp(a, "--threads")) {
            if (!(v = optval(argc, argv, &i)) || cli_parse_u64(v, &threads) || threads > 4096) {
                free(files);
                return fail(2, "--threads: expected an integer >= 0, found %s", v ? v : "nothing");
            }
        } else if (a[0] == '-' && a[1]) {
            free(files);
            return fail(2, "unknown option %s for 'tokenizer train' (see --help)", a);
        } else {
            files[nfiles++] = a;
        }
    }
    if (vocab < 257) {
        free(files);
        return fail(2, "--vocab-size: expected an integer >= 257 (256 bytes + <|endoftext|>), found %llu", vocab);
    }
    if (!out) {
        free(files);
        return fail(2, "--out: expected an output directory, found nothing (see --help)");
    }
    if (nfiles == 0) {
        free(files);
        return fail(2, "expected at least one corpus FILE, found none (see --help)");
    }
    uint8_t **bufs = calloc((size_t)nfiles, sizeof *bufs);
    size_t *lens = calloc((size_t)nfiles, sizeof *lens), total = 0;
    int rc = 0;
    for (int f = 0; f < nfiles && !rc; f++) {
        struct stat sb;
        if (strcmp(files[f], "-") && (stat(files[f], &sb) != 0 || S_ISDIR(sb.st_mode)))
            rc = fail(2, "%s: expected a readable text file, found %s", files[f],
                      errno == ENOENT ? "no such file" : S_ISDIR(sb.st_mode) ? "a directory" : strerror(errno));
        else if (read_input(files[f], &bufs[f], &lens[f]))
            rc = fail(2, "%s: cannot read (%s)", files[f], strerror(errno));
        total += lens[f];
    }
    /* Hold out the last `holdout` of the concatenated corpus, cut at a line start. */
    const uint8_t **tt = calloc((size_t)nfiles, sizeof *tt), **ht = calloc((size_t)nfiles, sizeof *ht);
    size_t *tl = calloc((size_t)nfiles, sizeof *tl), *hl = calloc((size_t)nfiles, sizeof *hl);
    size_t ntrain = 0, nhold = 0;
    size_t cut = total - (size_t)((double)total * holdout), pos = 0;
    for (int f = 0; f < nfiles && !rc; f++) {
        size_t c = cut <= pos ? 0 : cut - pos < lens[f] ? cut - pos : lens[f];
        if (c > 0 && c < lens[f]) { /* move the cut to the next line start */
            const uint8_t *nl = memchr(bufs[f] + c, '\n', lens[f] - c);
            c = nl ? (size_t)(nl - bufs[f]) + 1 : lens[f];
        }
        if (c) tt[ntrain] = bufs[f], tl[ntrain++] = c;
        if (c < lens[f]) ht[nhold] = bufs[f] + c, hl[nhold++] = lens[f] - c;
        pos += lens[f];
    }
    if (!rc) {
        BpeTrainOptions o = bpe_train_default_options();
        o.vocab_size = (uint32_t)vocab;
        o.threads = (int)threads;
        BpeTrainStats s;
        Err err;
        Status st = bpe_train(tt, tl, ntrain, &o, out, &s, &err);
        if (st) {
            rc = fail_err(&err);
        } else {
            printf("tokenizer train: %llu bytes trained on, %zu distinct pre-tokens, %zu merges, vocab %u "
                   "(EOT = %u) in %.2f s -> %s/encoder.json, %s/vocab.bpe\n",
                   (unsigned long long)s.corpus_bytes, s.unique_pretokens, s.merges, s.vocab_size, s.vocab_size - 1,
                   s.seconds, out, out);
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
    for (int f = 0; f < nfiles; f++) free(bufs[f]);
    free(bufs);
    free(lens);
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
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--tokenizer") || !strcmp(a, "--tokenizer-dir") || !strcmp(a, "--format") ||
                   !strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (!(v = optval(argc, argv, &i))) return fail(2, "%s: expected a value, found nothing", a);
            if (!strcmp(a, "--tokenizer")) spec = v;
            else if (!strcmp(a, "--tokenizer-dir")) dir = v;
            else if (!strcmp(a, "--format")) format = v;
            else outp = v;
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
    char gdir[PATH_MAX];
    if (!dir && !strcmp(spec, "gpt2") && !(dir = cli_find_gpt2_dir(gdir, sizeof gdir)))
        return fail(2, "tokenizer gpt2: expected encoder.json + vocab.bpe next to the executable "
                       "(../data/gpt2_tokenizer) or in ./data/gpt2_tokenizer, found none: give --tokenizer-dir");
    Err err;
    Tokenizer *t = NULL;
    if (tokenizer_load(&t, spec, dir, &err)) return fail_err(&err);
    uint8_t *buf = NULL;
    size_t n = 0;
    if (read_input(in, &buf, &n)) {
        tokenizer_free(t);
        return fail(2, "%s: expected a readable file, found %s", in, strerror(errno));
    }
    FILE *out = strcmp(outp, "-") == 0 ? stdout : fopen(outp, "wb");
    if (!out) {
        free(buf);
        tokenizer_free(t);
        return fail(2, "%s: cannot create (%s)", outp, strerror(errno));
    }
    int rc = 0;
    uint32_t *ids = NULL;
    size_t nids = 0, cap = 0;
    if (encode) {
        if (tokenizer_encode(t, buf, n, &ids, &nids, &cap, &err)) rc = fail_err(&err);
        if (!rc && fmt == 2 && tokenizer_vocab_size(t) > 65536)
            rc = fail(2, "--format u16le: expected a vocabulary of at most 65536, found %u (use u32le)",
                      tokenizer_vocab_size(t));
        for (size_t i = 0; !rc && i < nids; i++) {
            if (fmt == 0) fprintf(out, i + 1 < nids ? "%u " : "%u\n", ids[i]);
            else if (fmt == 2) fputc(ids[i] & 255, out), fputc(ids[i] >> 8, out);
            else for (int k = 0; k < 4; k++) fputc((ids[i] >> (8 * k)) & 255, out);
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
                if (q == p || v > UINT32_MAX || (q < end && !strchr(" \n\t\r,", *q)))
                    rc = fail(2, "%s: expected decimal token ids, found \"%.20s\" at byte %zu", in, p,
                              (size_t)(p - (char *)buf));
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
        uint8_t *text = NULL;
        size_t len = 0, tcap = 0;
        if (!rc && tokenizer_decode(t, ids, nids, &text, &len, &tcap, &err)) rc = fail(2, "%s: %s", in, err.msg);
        if (!rc && len) fwrite(text, 1, len, out);
        free(text);
    }
    if (fflush(out) != 0 || ferror(out)) rc = rc ? rc : fail(1, "%s: write failed", outp);
    if (out != stdout && fclose(out) != 0 && !rc) rc = fail(1, "%s: write failed", outp);
    if (!rc && outp && strcmp(outp, "-"))
        fprintf(stderr, "tokenizer %s: %zu bytes <-> %zu tokens (%s, vocab %u)\n", encode ? "encode" : "decode", n,
                nids, tokenizer_kind(t), tokenizer_vocab_size(t));
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
