/* test_prepare.c — corpus -> shards, and the shard format.
 *
 * Oracle: a small corpus built here whose documents, duplicates and byte counts are known exactly;
 * with the byte tokenizer every document's ids are its bytes, so the shards can be checked token
 * by token: counts, EOT positions, header words (magic, version, count, tokenizer hash, source
 * bytes, vocab), uint16 vs uint32, thread-count independence, crash-safe replacement, bad input. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "data/bpe.h"
#include "data/prepare.h"
#include "data/shard.h"
#include "testutil.h"

#include <xxhash.h>

static char tmpdir[] = "/tmp/test_prepare_XXXXXX";

static void write_file(const char *name, const char *content) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", tmpdir, name);
    FILE *f = fopen(p, "wb");
    fputs(content, f);
    fclose(f);
}

/* A copy that outlives path()'s four rotating buffers (an output directory kept in options). */
static const char *keep(const char *p) {
    static char k[16][512];
    static int n;
    n = (n + 1) % 16;
    snprintf(k[n], sizeof k[n], "%s", p);
    return k[n];
}

static char *path(const char *name) {
    static char p[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", tmpdir, name);
    return p[k];
}

/* Reads all shards <prefix>_NNNNNN.bin of dir: concatenated tokens, shard count, summed source bytes. */
static uint32_t *read_split(const char *dir, const char *prefix, size_t *ntok, size_t *nshards, uint64_t *src,
                            uint64_t hash, int *hdr_ok, int *elem) {
    uint32_t *all = NULL;
    *ntok = *nshards = 0;
    *src = 0;
    for (size_t i = 0;; i++) {
        char p[600];
        snprintf(p, sizeof p, "%s/%s_%06zu.bin", dir, prefix, i);
        if (access(p, F_OK)) break;
        Shard s;
        Err err;
        if (shard_open(&s, p, &err)) {
            *hdr_ok = 0;
            break;
        }
        *hdr_ok &= s.meta.tokenizer_hash == hash && s.meta.vocab_size == 257;
        *elem = s.elem_bytes;
        all = realloc(all, (*ntok + s.ntok) * sizeof *all);
        for (size_t k = 0; k < s.ntok; k++) all[*ntok + k] = shard_token(&s, k);
        *ntok += s.ntok;
        *src += s.meta.source_bytes;
        (*nshards)++;
        shard_close(&s);
    }
    return all;
}

/* Splits tokens at EOT (256) into documents; returns 1 if each is one of want[] (as bytes), and
 * counts them. */
static int docs_match(const uint32_t *t, size_t n, const char *const *want, int nwant, int *ndocs) {
    *ndocs = 0;
    size_t start = 0;
    for (size_t i = 0; i < n; i++) {
        if (t[i] != 256) continue;
        int found = 0;
        for (int w = 0; w < nwant && !found; w++) {
            size_t l = strlen(want[w]);
            if (l != i - start) continue;
            found = 1;
            for (size_t k = 0; k < l && found; k++) found = t[start + k] == (uint8_t)want[w][k];
        }
        if (!found) return 0;
        (*ndocs)++;
        start = i + 1;
    }
    return start == n; /* the stream ends with EOT */
}

/* Runs `scaletrain ARGS`; returns 1 when it exits 2 with exactly one stderr line containing want. */
static int cli_fails(const char *name, const char *args, const char *want) {
    char cmd[4096], errp[600];
    snprintf(errp, sizeof errp, "%s/stderr.txt", tmpdir);
    snprintf(cmd, sizeof cmd, "%s/scaletrain %s >/dev/null 2>%s", ST_BINARY_DIR, args, errp);
    int rc = system(cmd);
    int code = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    char text[2048] = "";
    FILE *f = fopen(errp, "rb");
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    text[n] = 0;
    int lines = 0;
    for (size_t i = 0; i < n; i++) lines += text[i] == '\n';
    int ok = code == 2 && lines == 1 && strstr(text, want) != NULL;
    if (n && text[n - 1] == '\n') text[n - 1] = 0;
    tu_check(ok, name, "exit=%d lines=%d stderr=\"%s\"", code, lines, text);
    return ok;
}

/* A tokenizer directory with 256 byte tokens + 65280 two-byte tokens + EOT = 65537 ids (ids up to
 * 65536 do not fit uint16) and no merges: tokenizer_load accepts it. */
static void write_big_vocab(const char *dir) {
    char p[3100];
    snprintf(p, sizeof p, "%s/encoder.json", dir);
    FILE *f = fopen(p, "wb");
    fputc('{', f);
    int id = 0;
    for (int b = 0; b < 256; b++) fprintf(f, "%s\"\\u%04x\": %d", id ? ", " : "", bpe_byte_to_unicode((uint8_t)b), id), id++;
    for (int a = 0; a < 256 && id < 65536; a++)
        for (int b = 0; b < 256 && id < 65536; b++)
            fprintf(f, ", \"\\u%04x\\u%04x\": %d", bpe_byte_to_unicode((uint8_t)a), bpe_byte_to_unicode((uint8_t)b), id++);
    fprintf(f, ", \"<|endoftext|>\": %d}", id);
    fclose(f);
    snprintf(p, sizeof p, "%s/vocab.bpe", dir);
    f = fopen(p, "wb");
    fputs("#version: 0.2\n", f);
    fclose(f);
}

/* ---- line pieces (issue 26: the quick start on any plain text file) ---- */

/* The rule of docs/data.md §6 computed from whole lines, as the docs state it: a piece takes lines
 * until it holds at least n bytes, and ends there unless fewer than n bytes would be left (then it
 * takes the rest). Returns the number of pieces; their offsets and lengths go to off/len. */
static size_t oracle_pieces(const char *t, size_t total, size_t n, size_t *off, size_t *len, size_t cap) {
    size_t k = 0, start = 0, pos = 0;
    while (pos < total) {
        const char *nl = memchr(t + pos, '\n', total - pos);
        pos = nl ? (size_t)(nl - t) + 1 : total; /* the end of the next line */
        if ((pos - start >= n && total - pos >= n) || pos == total) {
            if (k < cap) off[k] = start, len[k] = pos - start;
            k++;
            start = pos;
        }
    }
    return k;
}

typedef struct {
    const uint8_t *p;
    size_t n;
} Doc;
static int cmp_docs(const void *a, const void *b) {
    const Doc *x = a, *y = b;
    size_t m = x->n < y->n ? x->n : y->n;
    int c = memcmp(x->p, y->p, m);
    return c ? c : (x->n > y->n) - (x->n < y->n);
}

/* 1 when the documents of the byte-token stream t (EOT 256 after each) are exactly the pieces
 * (off, len) of text, as multisets. */
static int same_docs(const uint32_t *t, size_t nt, const char *text, const size_t *off, const size_t *len, size_t np) {
    uint8_t *bytes = malloc(nt + 1);
    Doc *got = malloc((nt + 1) * sizeof *got), *want = malloc((np + 1) * sizeof *want);
    size_t ng = 0, start = 0;
    int ok = bytes && got && want;
    for (size_t i = 0; ok && i < nt; i++) {
        if (t[i] == 256) {
            got[ng++] = (Doc){bytes + start, i - start};
            start = i + 1;
        } else {
            ok = t[i] < 256;
            bytes[i] = (uint8_t)t[i];
        }
    }
    ok = ok && start == nt && ng == np;
    for (size_t i = 0; ok && i < np; i++) want[i] = (Doc){(const uint8_t *)text + off[i], len[i]};
    if (ok) {
        qsort(got, ng, sizeof *got, cmp_docs);
        qsort(want, np, sizeof *want, cmp_docs);
        for (size_t i = 0; ok && i < np; i++) ok = cmp_docs(&got[i], &want[i]) == 0;
    }
    free(bytes), free(got), free(want);
    return ok;
}

/* Both splits of dir as one byte-token stream (train then val). */
static uint32_t *read_both(const char *dir, const Tokenizer *bt, size_t *n) {
    size_t ntr, nva, sh;
    uint64_t src;
    int hdr = 1, elem = 0;
    uint32_t *tr = read_split(dir, "train", &ntr, &sh, &src, tokenizer_hash(bt), &hdr, &elem);
    uint32_t *va = read_split(dir, "val", &nva, &sh, &src, tokenizer_hash(bt), &hdr, &elem);
    uint32_t *all = malloc((ntr + nva + 1) * sizeof *all);
    if (ntr) memcpy(all, tr, ntr * sizeof *all);
    if (nva) memcpy(all + ntr, va, nva * sizeof *all);
    free(tr), free(va);
    *n = ntr + nva;
    return all;
}

/* A text without blank lines (and without separator lines), --separator "", a validation split:
 * cut into pieces at line ends (docs/data.md §6). Oracle: the pieces computed from the lines here;
 * the split by the keyed rule on those pieces; the same shards from 1 thread and small runs as from
 * 3 threads. Boundaries: no cut without a validation split, with a blank line, with two inputs;
 * a text too short for two pieces and the default separator are refused in one line. Negative
 * control: pieces of another size do not match. */
static void test_line_pieces(const Tokenizer *bt) {
    enum { TOTAL_MAX = 48000, MAXP = 64 };
    static char text[TOTAL_MAX + 8];
    size_t total = 0;
    uint64_t x = 2026;
    static const char *frag[] = {"the ", "mill ", "caf\xc3\xa9 ", "river ", "\xe2\x80\x94 ", "stones ", "light "};
    for (int line = 0; total < 40000; line++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        size_t want = line == 17 ? 6000 : 1 + (size_t)(x >> 33) % 180; /* one line longer than a piece */
        size_t start = total;
        while (total - start < want) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            const char *f = frag[(x >> 40) % 7];
            memcpy(text + total, f, strlen(f));
            total += strlen(f);
        }
        text[total++] = '\n';
    }
    text[--total] = 0; /* the last line without its newline */
    write_file("pieces.txt", text);
    size_t off[MAXP], len[MAXP];
    size_t np = oracle_pieces(text, total, PREP_LINE_PIECE_BYTES, off, len, MAXP);
    int sizes_ok = np >= 5 && np <= MAXP;
    for (size_t i = 0; i < np && i < MAXP; i++)
        sizes_ok &= len[i] >= PREP_LINE_PIECE_BYTES && (text[off[i] + len[i] - 1] == '\n' || i == np - 1);
    tu_check(sizes_ok, "line_pieces_oracle_sane", "%zu pieces of %zu bytes", np, total);

    Err err;
    const char *in1[1] = {keep(path("pieces.txt"))};
    PrepareOptions o = prepare_default_options();
    o.inputs = in1, o.ninputs = 1, o.tok = bt, o.seed = 7;
    o.separator = "", o.val_fraction = 0.1, o.threads = 3;
    o.out_dir = keep(path("lp1"));
    PrepareStats s;
    Status st = prepare_run(&o, &s, &err);
    size_t nt = 0;
    uint32_t *all = st ? NULL : read_both(o.out_dir, bt, &nt);
    size_t want_val = 0;
    for (size_t i = 0; i < np; i++)
        want_val += XXH3_128bits_withSeed(text + off[i], len[i], 7).high64 <
                    (uint64_t)((long double)0.1 * 18446744073709551616.0L);
    if (want_val == 0) want_val = 1;
    tu_check(!st && s.line_pieces == np && s.docs == np && s.val_docs == want_val && s.train_docs == np - want_val &&
                 s.bytes == total && all && same_docs(all, nt, text, off, len, np),
             "line_pieces_cut", "%s pieces %llu (oracle %zu), docs %zu, val %zu (rule %zu), bytes %llu of %zu",
             st ? err.msg : "", (unsigned long long)s.line_pieces, np, s.docs, s.val_docs, want_val,
             (unsigned long long)s.bytes, total);
    /* negative control: pieces of another size are another set */
    size_t off2[MAXP * 2], len2[MAXP * 2];
    size_t np2 = oracle_pieces(text, total, PREP_LINE_PIECE_BYTES / 2, off2, len2, MAXP * 2);
    tu_check(all && !same_docs(all, nt, text, off2, len2, np2 < MAXP * 2 ? np2 : MAXP * 2),
             "control_line_pieces_other_size", "pieces of %d bytes (%zu) must not match", PREP_LINE_PIECE_BYTES / 2, np2);

    /* the same shards from 1 thread and runs of 4 KiB (many batches and runs) */
    o.threads = 1, o.run_bytes = 4096, o.out_dir = keep(path("lp2"));
    st = prepare_run(&o, &s, &err);
    size_t nt2 = 0;
    uint32_t *all2 = st ? NULL : read_both(o.out_dir, bt, &nt2);
    tu_check(!st && all && all2 && nt2 == nt && memcmp(all, all2, nt * sizeof *all) == 0 && s.runs > 1,
             "line_pieces_threads_memory", "%s tokens %zu vs %zu, runs %zu", st ? err.msg : "", nt2, nt, s.runs);
    /* interrupted after 2 runs (mid-input) and after 1 shard (the journal then carries the piece
     * count), each resumed: the same shards, the same count */
    o.out_dir = keep(path("lp2r")), o.fault_after_runs = 2;
    Status st1 = prepare_run(&o, &s, &err);
    o.fault_after_runs = 0;
    st = prepare_run(&o, &s, &err);
    uint32_t *all3 = st ? NULL : read_both(o.out_dir, bt, &nt2);
    tu_check(st1 == ST_ERR_RUNTIME && !st && s.line_pieces == np && all && all3 && nt2 == nt &&
                 memcmp(all, all3, nt * sizeof *all) == 0,
             "line_pieces_resume_reading", "first %d, %s pieces %llu, tokens %zu", (int)st1, st ? err.msg : "",
             (unsigned long long)s.line_pieces, nt2);
    free(all3);
    /* a journal naming a run that is gone (a kill while .prepare was cleared, which removed runs
     * before the journal until 2026-11-29: every later call failed "cannot open a run"): a fresh
     * start, the same shards */
    o.out_dir = keep(path("lp2g")), o.fault_after_runs = 2;
    st1 = prepare_run(&o, &s, &err);
    o.fault_after_runs = 0;
    char gone[1200];
    snprintf(gone, sizeof gone, "%s/.prepare/run_000001.bin", o.out_dir);
    int rm = remove(gone);
    st = prepare_run(&o, &s, &err);
    all3 = st ? NULL : read_both(o.out_dir, bt, &nt2);
    tu_check(st1 == ST_ERR_RUNTIME && rm == 0 && !st && all && all3 && nt2 == nt && memcmp(all, all3, nt * sizeof *all) == 0,
             "prepare_journal_naming_a_missing_run_starts_afresh", "first %d, run removed %d, %s tokens %zu", (int)st1, rm,
             st ? err.msg : "", nt2);
    free(all3);
    o.out_dir = keep(path("lp2m")), o.shard_tokens = 4000, o.fault_after_shards = 1;
    st1 = prepare_run(&o, &s, &err);
    o.fault_after_shards = 0;
    st = prepare_run(&o, &s, &err);
    tu_check(st1 == ST_ERR_RUNTIME && !st && s.line_pieces == np && s.docs == np && s.train_tokens + s.val_tokens == nt,
             "line_pieces_resume_merge", "first %d, %s pieces %llu, docs %zu", (int)st1, st ? err.msg : "",
             (unsigned long long)s.line_pieces, s.docs);
    o.shard_tokens = 100000000;
    free(all), free(all2);
    o.threads = 2, o.run_bytes = (size_t)256 << 20;

    /* no validation split: one document, as before */
    o.val_fraction = 0, o.out_dir = keep(path("lp3"));
    st = prepare_run(&o, &s, &err);
    tu_check(!st && s.docs == 1 && s.line_pieces == 0 && s.bytes == total, "line_pieces_not_without_val",
             "%s docs %zu pieces %llu", st ? err.msg : "", s.docs, (unsigned long long)s.line_pieces);
    o.val_fraction = 0.1;

    /* a blank line: blank-line documents, as before (the newline before it belongs to neither) */
    size_t cut = off[np / 2];
    static char text2[TOTAL_MAX + 8];
    memcpy(text2, text, cut);
    text2[cut] = '\n';
    memcpy(text2 + cut + 1, text + cut, total - cut + 1);
    write_file("pieces_blank.txt", text2);
    in1[0] = keep(path("pieces_blank.txt"));
    o.out_dir = keep(path("lp4"));
    st = prepare_run(&o, &s, &err);
    size_t boff[2] = {0, cut + 1}, blen[2] = {cut - 1, total - cut};
    all = st ? NULL : read_both(o.out_dir, bt, &nt);
    tu_check(!st && s.docs == 2 && s.line_pieces == 0 && all && same_docs(all, nt, text2, boff, blen, 2),
             "line_pieces_not_with_blank_line", "%s docs %zu pieces %llu", st ? err.msg : "", s.docs,
             (unsigned long long)s.line_pieces);
    free(all);

    /* two inputs (the text cut in two at a line end): two documents, as before */
    static char half[TOTAL_MAX + 8];
    memcpy(half, text, cut), half[cut] = 0;
    write_file("half1.txt", half);
    write_file("half2.txt", text + cut);
    const char *in2[2] = {keep(path("half1.txt")), keep(path("half2.txt"))};
    o.inputs = in2, o.ninputs = 2, o.out_dir = keep(path("lp5"));
    st = prepare_run(&o, &s, &err);
    tu_check(!st && s.docs == 2 && s.line_pieces == 0, "line_pieces_not_with_two_inputs", "%s docs %zu pieces %llu",
             st ? err.msg : "", s.docs, (unsigned long long)s.line_pieces);
    o.inputs = in1, o.ninputs = 1;

    /* too short for two pieces: refused, naming the rule */
    memcpy(half, text, 8000), half[8000] = 0;
    char *nl = strrchr(half, '\n');
    if (nl) nl[1] = 0;
    write_file("short.txt", half);
    in1[0] = keep(path("short.txt"));
    o.out_dir = keep(path("lp6"));
    st = prepare_run(&o, &s, &err);
    tu_check(st == ST_ERR_INPUT && strstr(err.msg, "short.txt") && strstr(err.msg, "1 piece,") &&
                 strstr(err.msg, "at least 8192 bytes") && strstr(err.msg, "--val-fraction 0"),
             "line_pieces_too_short_refused", "%s", st ? err.msg : "accepted");

    /* a split that leaves no training document: one document under the --val-fraction threshold is
     * the "found 1" error (not --val-docs'), two of them name --val-fraction */
    o.val_fraction = 0.999999, o.out_dir = keep(path("lp10"));
    st = prepare_run(&o, &s, &err);
    tu_check(st == ST_ERR_INPUT && strstr(err.msg, "at least 2 distinct documents") && strstr(err.msg, "found 1") &&
                 !strstr(err.msg, "--val-docs"),
             "split_single_document_in_val", "%s", st ? err.msg : "accepted");
    write_file("two.txt", "first document\n\nsecond document\n");
    in1[0] = keep(path("two.txt"));
    o.out_dir = keep(path("lp11"));
    st = prepare_run(&o, &s, &err);
    tu_check(st == ST_ERR_INPUT && strstr(err.msg, "--val-fraction 0.999999: expected at least one training document") &&
                 strstr(err.msg, "all 2 distinct"),
             "split_all_in_val_fraction", "%s", st ? err.msg : "accepted");
    o.val_fraction = 0.1;

    /* the default separator: one document, refused as before (the hint names --separator "") */
    in1[0] = keep(path("pieces.txt"));
    o.separator = "<|endoftext|>", o.out_dir = keep(path("lp7"));
    st = prepare_run(&o, &s, &err);
    tu_check(st == ST_ERR_INPUT && strstr(err.msg, "--separator \"\"") && strstr(err.msg, "found 1"),
             "line_pieces_not_with_separator_line", "%s", st ? err.msg : "accepted");

    /* the binary: one notice line when it cuts, none with a blank line */
    char cmd[3000];
    snprintf(cmd, sizeof cmd, "%s/scaletrain prepare --quiet --tokenizer bytes --separator \"\" --val-fraction 0.1 "
             "--out %s %s > %s 2>&1", ST_BINARY_DIR, path("lp8"), path("pieces.txt"), path("lp8.out"));
    int rc = system(cmd);
    char *out = tu_slurp(path("lp8.out"));
    int notices = 0;
    for (const char *q = out; q && (q = strstr(q, "prepare: notice:")); q++) notices++;
    char want[64];
    snprintf(want, sizeof want, "into %zu documents of at least %d bytes", np, PREP_LINE_PIECE_BYTES);
    tu_check(rc == 0 && notices == 1 && strstr(out, want) && strstr(out, "--val-fraction 0"), "cli_line_pieces_notice",
             "exit %d, %d notice(s): %.400s", rc, notices, out ? out : "(none)");
    free(out);
    snprintf(cmd, sizeof cmd, "%s/scaletrain prepare --quiet --tokenizer bytes --separator \"\" --val-fraction 0.1 "
             "--out %s %s > %s 2>&1", ST_BINARY_DIR, path("lp9"), path("pieces_blank.txt"), path("lp9.out"));
    rc = system(cmd);
    out = tu_slurp(path("lp9.out"));
    tu_check(rc == 0 && out && !strstr(out, "notice"), "cli_no_notice_with_blank_line", "exit %d: %.300s", rc,
             out ? out : "(none)");
    free(out);
}

/* Every document of tmpdir/name read by a DocReader with ro: joined by '|' into out (cap bytes), how
 * many, and the skips. Returns the status (err set on error). */
static Status read_docs(const char *name, const DocReaderOptions *ro, char *out, size_t cap, int *ndocs,
                        DocSkips *skips, Err *err) {
    DocReader *r = NULL;
    *ndocs = 0;
    out[0] = 0;
    Status st = docreader_open(&r, path(name), ro, err);
    size_t used = 0;
    for (;;) {
        const uint8_t *d;
        size_t n;
        if (st || (st = docreader_next(r, &d, &n, err)) != ST_OK || !d) break;
        used += (size_t)snprintf(out + used, used < cap ? cap - used : 0, "%s%.*s", *ndocs ? "|" : "", (int)n,
                                 (const char *)d);
        (*ndocs)++;
    }
    if (r) *skips = *docreader_skips(r);
    docreader_close(r);
    return st;
}

/* Record and line edges of the reader. Oracle: the documents written by hand for each file.
 * JSON Lines: a line holding two objects or text after its object is refused at its line (skipped
 * and counted as bad JSON with skip_bad), as is a "text" holding \u0000 (cJSON's C string ended
 * there: the document was cut); \\u0000 (a backslash, then u0000) is text, and \u0000 in another
 * field, or in a duplicate key cJSON does not take, does not matter. Text: a UTF-8 BOM at the start
 * is dropped (it hid the separator line after it and became tokens), one only; a CRLF text gives the
 * documents of its LF copy with \r\n for \n (the \r before a separator line was kept); the same for
 * blank-line separation. WikiText: a BOM before the first heading. */
static void test_reader_edges(void) {
    DocReaderOptions ro = {PREP_FORMAT_AUTO, "<|endoftext|>", NULL, 0, 0, 0};
    char got[512];
    int nd;
    DocSkips sk;
    Err err;
    Status st;

    write_file("two.jsonl", "{\"text\":\"first\"}{\"text\":\"second\"}\n{\"text\":\"third\"} junk\n{\"text\":\"fourth\"}\n");
    st = read_docs("two.jsonl", &ro, got, sizeof got, &nd, &sk, &err);
    tu_check(st == ST_ERR_INPUT && strstr(err.msg, "two.jsonl:1: expected a JSON object") &&
                 strstr(err.msg, "more text after the object at byte 17"),
             "jsonl_two_objects_on_a_line_refused", "%s", st ? err.msg : got);
    ro.skip_bad = 1;
    st = read_docs("two.jsonl", &ro, got, sizeof got, &nd, &sk, &err);
    tu_check(!st && !strcmp(got, "fourth") && sk.bad_json == 2, "jsonl_junk_after_object_skipped_as_bad_json",
             "%s docs \"%s\" bad_json=%llu", st ? err.msg : "", got, (unsigned long long)sk.bad_json);
    ro.skip_bad = 0;
    write_file("ws.jsonl", "\xEF\xBB\xBF{\"text\":\"bom\"}\n{\"text\":\"crlf\"} \t\r\n"); /* control: white space */
    st = read_docs("ws.jsonl", &ro, got, sizeof got, &nd, &sk, &err);
    tu_check(!st && !strcmp(got, "bom|crlf"), "control_jsonl_trailing_space_and_bom_accepted", "%s \"%s\"",
             st ? err.msg : "", got);

    write_file("nul.jsonl", "{\"text\":\"ok\"}\n{\"id\":\"x\",\"text\":\"a\\u0000b\"}\n");
    st = read_docs("nul.jsonl", &ro, got, sizeof got, &nd, &sk, &err);
    tu_check(st == ST_ERR_INPUT && strstr(err.msg, "nul.jsonl:2:") && strstr(err.msg, "NUL character"),
             "jsonl_nul_in_text_refused", "%s", st ? err.msg : got);
    write_file("nul2.jsonl", "{\"text\":\"a\\\\\\u0000b\"}\n");
    st = read_docs("nul2.jsonl", &ro, got, sizeof got, &nd, &sk, &err);
    tu_check(st == ST_ERR_INPUT && strstr(err.msg, "nul2.jsonl:1:") && strstr(err.msg, "NUL character"),
             "jsonl_nul_after_escaped_backslash_refused", "%s", st ? err.msg : got);
    /* (a third line, {"text":"d","text":"\u0000"}, read "d" here until 2026-11-29: a key given twice
     * is now refused, test_data_inputs) */
    write_file("nul3.jsonl", "{\"text\":\"a\\\\u0000b\"}\n{\"m\":{\"k\":[\"\\u0000\",1,true,null]},\"text\":\"c\"}\n");
    st = read_docs("nul3.jsonl", &ro, got, sizeof got, &nd, &sk, &err);
    tu_check(!st && !strcmp(got, "a\\u0000b|c"), "control_jsonl_backslash_u0000_and_nul_elsewhere_kept",
             "%s \"%s\"", st ? err.msg : "", got);
    ro.skip_bad = 1;
    st = read_docs("nul.jsonl", &ro, got, sizeof got, &nd, &sk, &err);
    tu_check(!st && !strcmp(got, "ok") && sk.missing_field == 1, "jsonl_nul_skipped_and_counted",
             "%s \"%s\" missing_field=%llu", st ? err.msg : "", got, (unsigned long long)sk.missing_field);
    ro.skip_bad = 0;

    write_file("bom.txt", "\xEF\xBB\xBF<|endoftext|>\nfirst\n<|endoftext|>\nsecond\n");
    st = read_docs("bom.txt", &ro, got, sizeof got, &nd, &sk, &err);
    tu_check(!st && !strcmp(got, "first|second\n"), "text_bom_dropped_separator_seen", "%s \"%s\"", st ? err.msg : "",
             got);
    write_file("bom2.txt", "\xEF\xBB\xBF\xEF\xBB\xBFx\n");
    st = read_docs("bom2.txt", &ro, got, sizeof got, &nd, &sk, &err);
    tu_check(!st && !strcmp(got, "\xEF\xBB\xBFx\n"), "text_only_one_bom_dropped", "%s \"%s\"", st ? err.msg : "", got);
    write_file("bom.tokens", "\xEF\xBB\xBF = A = \n x \n = B = \n y \n");
    st = read_docs("bom.tokens", &ro, got, sizeof got, &nd, &sk, &err);
    tu_check(!st && !strcmp(got, " = A = \n x \n| = B = \n y \n"), "wikitext_bom_dropped_heading_seen", "%s \"%s\"",
             st ? err.msg : "", got);

    write_file("crlf.txt", "one\r\nline\r\n<|endoftext|>\r\ntwo\r\n");
    st = read_docs("crlf.txt", &ro, got, sizeof got, &nd, &sk, &err);
    tu_check(!st && !strcmp(got, "one\r\nline|two\r\n"), "text_crlf_no_cr_before_separator", "%s \"%s\"",
             st ? err.msg : "", got);
    ro.separator = "";
    write_file("crlf2.txt", "a\r\nb\r\n\r\nc\r\n");
    st = read_docs("crlf2.txt", &ro, got, sizeof got, &nd, &sk, &err);
    tu_check(!st && !strcmp(got, "a\r\nb|c\r\n"), "text_crlf_blank_line_separation", "%s \"%s\"", st ? err.msg : "",
             got);
    write_file("lf2.txt", "a\nb\n\nc\n"); /* control: the LF copy */
    st = read_docs("lf2.txt", &ro, got, sizeof got, &nd, &sk, &err);
    tu_check(!st && !strcmp(got, "a\nb|c\n"), "control_text_lf_blank_line_separation", "%s \"%s\"", st ? err.msg : "",
             got);
}

int main(void) {
    if (!mkdtemp(tmpdir)) return 1;
    Err err;
    Tokenizer *bt = NULL;
    tokenizer_load(&bt, "bytes", NULL, &err);

    /* Corpus: a.txt has 4 documents (one a duplicate), b.jsonl 3 (one duplicates a.txt's), in dir/. */
    char sub[600];
    snprintf(sub, sizeof sub, "%s/in", tmpdir);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", sub);
    if (system(cmd) != 0) return 1;
    write_file("in/a.txt", "Hello world\n<|endoftext|>\nSecond doc\nline two\n<|endoftext|>\nHello world\n"
                           "<|endoftext|>\nThird \xff\xfe invalid\n");
    write_file("in/b.jsonl", "{\"text\": \"json one\", \"id\": 1}\n\n{\"text\": \"Second doc\\nline two\"}\n"
                             "{\"text\": \"caf\\u00e9\"}\n");
    const char *want[] = {"Hello world", "Second doc\nline two", "Third \xff\xfe invalid\n", "json one", "caf\xc3\xa9"};
    uint64_t want_bytes = 11 + 19 + 17 + 8 + 5;

    const char *inputs[1] = {sub};
    PrepareOptions o = prepare_default_options();
    o.inputs = inputs;
    o.ninputs = 1;
    o.out_dir = keep(path("out1"));
    o.tok = bt;
    o.val_docs = 1;
    o.seed = 7;
    o.allow_invalid_utf8 = 1; /* a.txt's third document has invalid bytes: kept as bytes (test below: refused by default) */
    o.shard_tokens = 16;
    o.threads = 2;
    PrepareStats s;
    Status st = prepare_run(&o, &s, &err);
    tu_check(st == ST_OK && s.files == 2 && s.docs == 7 && s.duplicates == 2 && s.train_docs == 4 && s.val_docs == 1 &&
                 s.bytes == want_bytes && s.train_tokens + s.val_tokens == want_bytes + 5,
             "prepare_counts", "%s files=%zu docs=%zu dup=%zu train=%zu val=%zu bytes=%llu tokens=%llu", st ? err.msg : "",
             s.files, s.docs, s.duplicates, s.train_docs, s.val_docs, (unsigned long long)s.bytes,
             (unsigned long long)(s.train_tokens + s.val_tokens));
    size_t ntr, nva, shtr, shva;
    uint64_t srctr, srcva;
    int hdr_ok = 1, elem = 0, ndtr = 0, ndva = 0;
    uint32_t *tr = read_split(o.out_dir, "train", &ntr, &shtr, &srctr, tokenizer_hash(bt), &hdr_ok, &elem);
    uint32_t *va = read_split(o.out_dir, "val", &nva, &shva, &srcva, tokenizer_hash(bt), &hdr_ok, &elem);
    int ok_tr = docs_match(tr, ntr, want, 5, &ndtr), ok_va = docs_match(va, nva, want, 5, &ndva);
    tu_check(ok_tr && ok_va && ndtr == 4 && ndva == 1 && ntr == s.train_tokens && nva == s.val_tokens,
             "prepare_eot_positions", "train docs=%d tokens=%zu, val docs=%d tokens=%zu", ndtr, ntr, ndva, nva);
    tu_check(hdr_ok && elem == 2 && srctr + srcva == want_bytes && shtr == (ntr + 15) / 16 && shtr == s.train_shards &&
                 shva == (nva + 15) / 16 && shva == s.val_shards,
             "prepare_header_words", "hash+vocab ok=%d elem=%d source bytes=%llu shards=%zu+%zu", hdr_ok, elem,
             (unsigned long long)(srctr + srcva), shtr, shva);

    /* the same with 1 thread: identical shards; and no temporary file left behind */
    o.out_dir = keep(path("out2"));
    o.threads = 1;
    st = prepare_run(&o, &s, &err);
    size_t n2, sh2;
    uint64_t src2;
    uint32_t *tr2 = read_split(o.out_dir, "train", &n2, &sh2, &src2, tokenizer_hash(bt), &hdr_ok, &elem);
    tu_check(!st && n2 == ntr && memcmp(tr, tr2, ntr * sizeof *tr) == 0, "prepare_thread_independent", "tokens=%zu", n2);
    int tmp_left = 0;
    DIR *d = opendir(o.out_dir);
    for (struct dirent *e; d && (e = readdir(d));) tmp_left += strstr(e->d_name, ".tmp") != NULL;
    if (d) closedir(d);
    tu_check(tmp_left == 0, "prepare_no_temp_files", "left=%d", tmp_left);
    free(tr);
    free(va);
    free(tr2);

    /* fraction split: a document is validation when the high 64 bits of XXH3-128(bytes, seed) are
     * below fraction * 2^64 (docs/data.md §6); oracle: the rule computed here on the 5 unique docs */
    o.out_dir = keep(path("out3"));
    o.val_docs = -1;
    o.val_fraction = 0.5;
    o.shard_tokens = 1000;
    st = prepare_run(&o, &s, &err);
    size_t want_val = 0;
    for (int w = 0; w < 5; w++) want_val += XXH3_128bits_withSeed(want[w], strlen(want[w]), 7).high64 < (1ULL << 63);
    if (want_val == 0) want_val = 1; /* a fraction > 0 gives validation at least the smallest key */
    tu_check(!st && s.val_docs == want_val && s.train_docs == 5 - want_val && s.val_shards == 1,
             "prepare_val_fraction", "val=%zu (rule: %zu) train=%zu", s.val_docs, want_val, s.train_docs);

    /* WikiText: split at top-level headings only */
    write_file("w.tokens", " \n = Alpha = \n\n text one \n\n = = Sub = = \n\n more \n = Beta = \n\n b text \n");
    const char *win[1] = {path("w.tokens")};
    o.inputs = win;
    o.out_dir = keep(path("out4"));
    o.val_fraction = 0;
    st = prepare_run(&o, &s, &err);
    tu_check(!st && s.docs == 2 && s.train_tokens == strlen(" \n = Alpha = \n\n text one \n\n = = Sub = = \n\n more \n") +
                                                    strlen(" = Beta = \n\n b text \n") + 2,
             "prepare_wikitext_articles", "docs=%zu tokens=%llu", s.docs, (unsigned long long)s.train_tokens);

    /* bad inputs: missing file, bad JSON line (file:line), non-string text */
    const char *miss[1] = {path("nope.txt")};
    o.inputs = miss;
    st = prepare_run(&o, &s, &err);
    tu_check(st == ST_ERR_INPUT && strstr(err.msg, "nope.txt"), "prepare_missing_file", "%s", err.msg);
    write_file("bad.jsonl", "{\"text\": \"fine\"}\n{\"text\": \"broken\n{\"text\": 3}\n");
    const char *bad[1] = {path("bad.jsonl")};
    o.inputs = bad;
    st = prepare_run(&o, &s, &err);
    tu_check(st == ST_ERR_INPUT && strstr(err.msg, "bad.jsonl:2:"), "prepare_bad_jsonl_line", "%s", err.msg);
    write_file("bad2.jsonl", "{\"text\": \"fine\"}\n{\"text\": 3}\n");
    bad[0] = path("bad2.jsonl");
    st = prepare_run(&o, &s, &err);
    tu_check(st == ST_ERR_INPUT && strstr(err.msg, "bad2.jsonl:2:") && strstr(err.msg, "non-string"),
             "prepare_jsonl_text_not_string", "%s", err.msg);

    /* shard format: uint16 vs uint32 choice */
    uint32_t toks[4] = {1, 65535, 7, 256};
    ShardMeta m = {0x1122334455667788ULL, 123456789012ULL, 50257};
    Shard sh;
    st = shard_write(path("u16.bin"), toks, 4, &m, &err);
    st = st ? st : shard_open(&sh, path("u16.bin"), &err);
    tu_check(!st && sh.elem_bytes == 2 && sh.ntok == 4 && shard_token(&sh, 1) == 65535 &&
                 sh.meta.tokenizer_hash == m.tokenizer_hash && sh.meta.source_bytes == m.source_bytes &&
                 sh.meta.vocab_size == 50257 && sh.map_bytes == 1024 + 8,
             "shard_u16", "elem=%d bytes=%zu", sh.elem_bytes, sh.map_bytes);
    m.vocab_size = 100277;
    uint32_t big[2] = {100276, 3};
    st = shard_write(path("u32.bin"), big, 2, &m, &err);
    Shard s32;
    st = st ? st : shard_open(&s32, path("u32.bin"), &err);
    const uint32_t *hw = s32.map;
    tu_check(!st && s32.elem_bytes == 4 && hw[0] == SHARD_MAGIC_U32 && hw[1] == SHARD_VERSION_U32 && hw[2] == 2 &&
                 shard_token(&s32, 0) == 100276 && shard_find_token_at_least(&s32, 100000) == 0,
             "shard_u32", "magic=%u version=%u", hw[0], hw[1]);
    shard_close(&s32);

    /* crash-safe replacement: the old mapping keeps the old contents (rename, not truncate) */
    uint32_t other[3] = {9, 9, 9};
    m.vocab_size = 257;
    st = shard_write(path("u16.bin"), other, 3, &m, &err);
    Shard fresh;
    Status st2 = shard_open(&fresh, path("u16.bin"), &err);
    tu_check(!st && !st2 && sh.ntok == 4 && shard_token(&sh, 1) == 65535 && fresh.ntok == 3 &&
                 shard_token(&fresh, 0) == 9,
             "shard_atomic_replace", "old ntok=%zu new ntok=%zu", sh.ntok, fresh.ntok);
    shard_close(&sh);
    shard_close(&fresh);
    st = shard_write(path("no/such/dir/x.bin"), other, 3, &m, &err);
    tu_check(st != ST_OK && strstr(err.msg, "no/such/dir"), "shard_write_bad_dir", "%s", err.msg);

    /* shard_open refusals: truncated file, bad magic, missing */
    FILE *f = fopen(path("trunc.bin"), "wb");
    int32_t hdr[256] = {SHARD_MAGIC_U16, SHARD_VERSION_U16, 10};
    fwrite(hdr, 4, 256, f);
    fwrite(toks, 2, 3, f);
    fclose(f);
    st = shard_open(&sh, path("trunc.bin"), &err);
    tu_check(st == ST_ERR_INPUT && strstr(err.msg, "trunc.bin") && strstr(err.msg, "10 tokens"), "shard_open_truncated",
             "%s", err.msg);
    shard_close(&sh);
    hdr[0] = 12345;
    f = fopen(path("magic.bin"), "wb");
    fwrite(hdr, 4, 256, f);
    fclose(f);
    st = shard_open(&sh, path("magic.bin"), &err);
    tu_check(st == ST_ERR_INPUT && strstr(err.msg, "magic.bin") && strstr(err.msg, "12345"), "shard_open_bad_magic",
             "%s", err.msg);
    st = shard_open(&sh, path("missing.bin"), &err);
    tu_check(st == ST_ERR_INPUT && strstr(err.msg, "missing.bin"), "shard_open_missing", "%s", err.msg);

    /* empty input and a binary file: library errors */
    write_file("empty.txt", "");
    const char *emp[1] = {path("empty.txt")};
    o.inputs = emp;
    st = prepare_run(&o, &s, &err);
    tu_check(st == ST_ERR_INPUT && strstr(err.msg, "empty.txt") && strstr(err.msg, "empty input"), "prepare_empty_input",
             "%s", err.msg);
    {
        FILE *bf = fopen(path("blob.txt"), "wb");
        for (int i = 0; i < 4096; i++) fputc((i * 131 + 7) & 255, bf); /* has NULs and invalid UTF-8 */
        fclose(bf);
        bf = fopen(path("noise.txt"), "wb");
        uint64_t x = 99;
        for (int i = 0; i < 4096; i++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            fputc((int)(x >> 56) | 1, bf); /* no NUL byte: caught by the invalid-UTF-8 share */
        }
        fclose(bf);
    }
    const char *blob[1] = {path("blob.txt")};
    o.inputs = blob;
    st = prepare_run(&o, &s, &err);
    tu_check(st == ST_ERR_INPUT && strstr(err.msg, "blob.txt") && strstr(err.msg, "binary data (NUL byte"),
             "prepare_binary_nul", "%s", err.msg);
    blob[0] = path("noise.txt");
    st = prepare_run(&o, &s, &err);
    tu_check(st == ST_ERR_INPUT && strstr(err.msg, "noise.txt") && strstr(err.msg, "invalid UTF-8"),
             "prepare_binary_noise", "%s", err.msg);

    /* the same through the binary: one line on stderr, exit 2 */
    char args[3000];
    snprintf(args, sizeof args, "prepare --tokenizer bytes --out %s %s", path("cli"), path("empty.txt"));
    cli_fails("cli_prepare_empty_input", args, "empty input");
    snprintf(args, sizeof args, "prepare --tokenizer bytes --out %s %s", path("cli"), path("blob.txt"));
    cli_fails("cli_prepare_binary_file", args, "expected text (UTF-8) or JSON Lines, found binary data");
    write_file("notext.jsonl", "{\"text\": \"fine\"}\n{\"body\": \"no text here\"}\n");
    snprintf(args, sizeof args, "prepare --tokenizer bytes --out %s %s", path("cli"), path("notext.jsonl"));
    cli_fails("cli_prepare_jsonl_without_text", args, "notext.jsonl:2: expected a JSON object with a string \"text\"");
    snprintf(args, sizeof args, "train --data %s --layers 1 --heads 1 --channels 8 --vocab 257 --seq-len 4 --steps 1 "
             "--peak-gflops 1 --quiet", path("trunc.bin"));
    cli_fails("cli_shard_size_disagrees_with_header", args, "trunc.bin: header says 10 tokens");
    snprintf(args, sizeof args, "%s/big", tmpdir);
    mkdir(args, 0755);
    write_big_vocab(args);
    write_file("small.txt", "a tiny document\n");
    char bigdir[700];
    snprintf(bigdir, sizeof bigdir, "%s/big", tmpdir);
    snprintf(args, sizeof args, "prepare --tokenizer %s --shard-version 1 --out %s %s", bigdir, path("cli"),
             path("small.txt"));
    cli_fails("cli_vocab_over_65536_in_version_1", args, "--shard-version 1: expected a vocabulary of at most 65536 ids");
    /* control: the same vocabulary with the automatic version writes uint32 shards (version 7) */
    snprintf(cmd, sizeof cmd, "%s/scaletrain prepare --quiet --tokenizer %s --val-fraction 0 --out %s %s >/dev/null 2>&1",
             ST_BINARY_DIR, bigdir, path("cli7"), path("small.txt"));
    int rc7 = system(cmd);
    Shard s7;
    Status st7 = shard_open(&s7, path("cli7/train_000000.bin"), &err);
    tu_check(rc7 == 0 && !st7 && s7.meta.version == 7 && s7.elem_bytes == 4 && s7.meta.vocab_size == 65537 &&
                 shard_token(&s7, s7.ntok - 1) == 65536,
             "cli_vocab_over_65536_auto_version_7", "exit=%d version=%u elem=%d last=%u", rc7, st7 ? 0 : s7.meta.version,
             st7 ? 0 : s7.elem_bytes, st7 ? 0 : shard_token(&s7, s7.ntok - 1));
    if (!st7) shard_close(&s7);

    test_line_pieces(bt);
    test_reader_edges();

    tokenizer_free(bt);
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) printf("note: could not remove %s\n", tmpdir);
    return tu_exit();
}
