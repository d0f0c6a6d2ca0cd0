/* test_data_inputs.c — `scaletrain prepare` and `scaletrain tokenizer` on the inputs an audit
 * (2026-11-29) found mishandled: each case runs the binary and checks the exit code, that stderr is
 * one line naming the file or flag, and that nothing was overwritten; each has a control, the same
 * call made valid, which must succeed (so a check that always fails, or passes, is noticed).
 *
 *   1. tokenizer encode/decode: an option given twice (the last value won silently), -o naming the
 *      input (the text was replaced by its ids);
 *   2. prepare --out D D and tokenizer train --out D D (the second run read its own outputs as
 *      corpus), an output file given as input;
 *   3. standard input given twice (the second "-" read nothing);
 *   4. --skip-bad skipping every record (reported as "empty input"); a key given twice in one
 *      object (text and chat records: the first was taken, Python takes the last);
 *   5. two prepares into one --out (one failed, the other published a mix of both calls' runs with
 *      exit 0): the lock, which must not be OUT/.lock (train holds that one on its cache);
 *   6. tokenizer train short of --vocab-size says so;
 *   7. rank files: shorter than the header, special ids out of order (only the first was compared),
 *      a tokenizer folder whose `pattern` is a directory. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "data/bpe.h"
#include "testutil.h"

static char tmpdir[] = "/tmp/test_data_inputs_XXXXXX";
static char out_text[8192], err_text[8192];

static const char *P(const char *name) {
    static char p[8][600];
    static int k;
    k = (k + 1) % 8;
    snprintf(p[k], sizeof p[k], "%s/%s", tmpdir, name);
    return p[k];
}

static void write_file(const char *name, const char *content, size_t n) {
    FILE *f = fopen(P(name), "wb");
    if (f) fwrite(content, 1, n, f), fclose(f);
}

/* Runs `scaletrain ARGS` in tmpdir (stdin from `in`, or /dev/null); stdout and stderr kept (trimmed). */
static int run(const char *in, const char *args) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd %s && %s/scaletrain %s <%s >out.txt 2>err.txt", tmpdir, ST_BINARY_DIR, args,
             in ? in : "/dev/null");
    int rc = system(cmd);
    char *o = tu_slurp(P("out.txt")), *e = tu_slurp(P("err.txt"));
    snprintf(out_text, sizeof out_text, "%s", o ? o : "");
    snprintf(err_text, sizeof err_text, "%s", e ? e : "");
    free(o), free(e);
    size_t l = strlen(err_text);
    if (l && err_text[l - 1] == '\n') err_text[l - 1] = 0;
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* Exit 2 and one line of stderr holding `want`. */
static void expect_refused(const char *name, const char *in, const char *args, const char *want) {
    int rc = run(in, args);
    tu_check(rc == 2 && !strchr(err_text, '\n') && strstr(err_text, want), name, "rc=%d stderr=[%s] want [%s]", rc,
             err_text, want);
}

static void expect_ok(const char *name, const char *in, const char *args) {
    int rc = run(in, args);
    tu_check(rc == 0, name, "rc=%d stderr=[%.300s]", rc, err_text);
}

static uint64_t fnv1a64(const uint8_t *b, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}

/* The offset of the special-token record (u32 id, u8 length, bytes) whose text is `tok`. */
static size_t special_record(const uint8_t *b, size_t n, const char *tok) {
    size_t l = strlen(tok);
    for (size_t i = n - 8 - l; i >= 5; i--)
        if (b[i - 1] == l && !memcmp(b + i, tok, l)) return i - 5;
    return 0;
}

int main(void) {
    if (!mkdtemp(tmpdir)) return 1;
    char corpus[4096] = "", cmd[1024];
    for (int i = 0; i < 30; i++) {
        size_t l = strlen(corpus);
        snprintf(corpus + l, sizeof corpus - l, "Document %d tells of river and stone.\n\n", i);
    }
    write_file("a.txt", corpus, strlen(corpus));
    write_file("h.txt", "hello world\n", 12);

    /* 1. encode / decode options */
    expect_refused("codec_option_twice", NULL, "tokenizer encode --format txt --format u16le h.txt",
                   "--format: given twice (txt, then u16le)");
    expect_refused("codec_output_twice", NULL, "tokenizer encode -o x.ids --output y.ids h.txt", "--output: given twice");
    expect_ok("codec_option_once_control", NULL, "tokenizer encode --format=u16le -o x.ids h.txt");
    struct stat sb;
    tu_check(stat(P("x.ids"), &sb) == 0 && sb.st_size == 6, "codec_equals_form", "x.ids: 3 u16 ids expected, %lld bytes",
             stat(P("x.ids"), &sb) == 0 ? (long long)sb.st_size : -1LL);
    expect_refused("codec_output_is_input", NULL, "tokenizer encode h.txt -o h.txt",
                   "--output h.txt: expected a file other than the input, found the input h.txt itself");
    char *h = tu_slurp(P("h.txt"));
    tu_check(h && !strcmp(h, "hello world\n"), "codec_input_kept", "h.txt now [%s]", h ? h : "(unreadable)");
    free(h);
    if (tu_shell((snprintf(cmd, sizeof cmd, "ln -s h.txt %s", P("link.txt")), cmd)))
        expect_refused("codec_output_is_input_link", NULL, "tokenizer encode link.txt -o h.txt", "found the input link.txt");
    expect_ok("codec_output_other_control", NULL, "tokenizer encode h.txt -o h.ids");

    /* 2. outputs as inputs */
    tu_shell((snprintf(cmd, sizeof cmd, "mkdir -p %s && cp %s %s", P("corp"), P("a.txt"), P("corp/")), cmd));
    expect_refused("prepare_out_is_input_dir", NULL, "prepare --quiet --separator '' --out corp corp",
                   "corp: expected an input directory other than the output directory corp");
    expect_refused("prepare_out_is_input_dir_spelled", NULL, "prepare --quiet --separator '' --out corp/ ./corp/.",
                   "expected an input directory other than the output directory");
    expect_ok("prepare_out_below_input_control", NULL, "prepare --quiet --separator '' --out corp/sub corp");
    expect_refused("prepare_output_file_as_input", NULL, "prepare --quiet --out corp/sub corp/sub/train_000000.bin",
                   "corp/sub/train_000000.bin: expected an input that is not an output of this command");
    expect_refused("tokenizer_train_out_is_input", NULL, "tokenizer train --vocab-size 300 --out corp corp",
                   "expected an input directory other than the output directory corp");
    expect_ok("tokenizer_train_control", NULL, "tokenizer train --vocab-size 300 --out tok a.txt");
    expect_refused("tokenizer_train_output_as_input", NULL, "tokenizer train --vocab-size 300 --out tok tok/vocab.bpe",
                   "tok/vocab.bpe: expected an input that is not an output of this command");

    /* 3. standard input twice */
    snprintf(cmd, sizeof cmd, "%s", P("a.txt"));
    expect_refused("prepare_stdin_twice", cmd, "prepare --quiet --separator '' --out s2 - -",
                   "-: expected standard input once among the inputs, found it given twice");
    expect_ok("prepare_stdin_once_control", cmd, "prepare --quiet --separator '' --out s1 -");
    tu_check(strstr(out_text, "documents 30 read") != NULL, "prepare_stdin_once_docs", "[%.200s]", out_text);

    /* 4. --skip-bad skipping everything is not "empty input" */
    const char *bad = "{\"text\": 5}\nnot json\n{\"other\": \"x\"}\n";
    write_file("bad.jsonl", bad, strlen(bad));
    expect_refused("prepare_all_skipped", NULL, "prepare --quiet --skip-bad --out sk bad.jsonl",
                   "found none (--skip-bad skipped 3 records: 1 not JSON objects, 2 without the field");
    expect_refused("tokenizer_train_all_skipped", NULL, "tokenizer train --skip-bad --out sk2 bad.jsonl",
                   "--skip-bad skipped 3 records");
    write_file("empty.jsonl", "\n", 1);
    expect_refused("prepare_empty_control", NULL, "prepare --quiet --skip-bad --out sk empty.jsonl",
                   "found none (empty input)");

    /* 4b. a key given twice in one object: cJSON's lookup took the first ("a"), Python's json the
     * last ("b"); refused naming the key, in text records and in chat messages. Control: the same
     * lines without the second key prepare. */
    const char *dup = "{\"text\": \"a\", \"text\": \"b\"}\n{\"text\": \"c\"}\n";
    write_file("dup.jsonl", dup, strlen(dup));
    expect_refused("prepare_duplicate_key", NULL, "prepare --quiet --val-fraction 0 --out dk dup.jsonl",
                   "dup.jsonl:1: expected a JSON object with a string \"text\" field, found the key \"text\" given twice");
    const char *dupc = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\", \"content\": \"x\"}, "
                       "{\"role\": \"assistant\", \"content\": \"yo\"}]}\n";
    write_file("dupc.jsonl", dupc, strlen(dupc));
    expect_refused("prepare_chat_duplicate_key", NULL, "prepare --quiet --format chat --val-fraction 0 --out dkc dupc.jsonl",
                   "found the key \"content\" given twice in one object");
    const char *once = "{\"text\": \"a\"}\n{\"text\": \"c\"}\n";
    write_file("once.jsonl", once, strlen(once));
    expect_ok("prepare_key_once_control", NULL, "prepare --quiet --val-fraction 0 --out dk1 once.jsonl");

    /* 5. one prepare at a time per --out: the lock held here as another prepare would hold it */
    expect_ok("prepare_lock_first", NULL, "prepare --quiet --separator '' --out lk a.txt");
    int fd = open(P("lk/.prepare.lock"), O_RDWR);
    int held = fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0;
    tu_check(held, "prepare_lock_file", "lk/.prepare.lock: expected a file prepare left unlocked, fd %d", fd);
    if (held) {
        if (pwrite(fd, "4242\n", 5, 0) != 5) { /* the pid in the message only */ }
        expect_refused("prepare_lock_refused", NULL, "prepare --quiet --separator '' --out lk a.txt",
                       "--out lk: expected an output directory no other prepare is writing, found it in use by process "
                       "4242");
        close(fd);
        expect_ok("prepare_lock_released_control", NULL, "prepare --quiet --separator '' --out lk a.txt");
    }
    /* train holds OUT/.lock of the bundled corpus's cache while it prepares into it: not prepare's lock */
    tu_shell((snprintf(cmd, sizeof cmd, "mkdir -p %s", P("lk2")), cmd));
    int tfd = open(P("lk2/.lock"), O_RDWR | O_CREAT, 0644);
    tu_check(tfd >= 0 && flock(tfd, LOCK_EX | LOCK_NB) == 0, "train_cache_lock_taken", "lk2/.lock fd %d", tfd);
    expect_ok("prepare_beside_train_cache_lock", NULL, "prepare --quiet --separator '' --out lk2 a.txt");
    if (tfd >= 0) close(tfd);

    /* 6. a vocabulary short of --vocab-size is said */
    expect_ok("tokenizer_train_short", NULL, "tokenizer train --vocab-size 100000 --out tok2 a.txt");
    tu_check(strstr(out_text, "notice: vocab ") && strstr(out_text, "not the 100000 of --vocab-size"),
             "tokenizer_train_short_notice", "[%.400s]", out_text);
    expect_ok("tokenizer_train_reached", NULL, "tokenizer train --vocab-size 280 --out tok3 a.txt");
    tu_check(!strstr(out_text, "notice:"), "tokenizer_train_reached_no_notice", "[%.400s]", out_text);

    /* 7. rank files and tokenizer folders */
    write_file("short.tkr", "STTIKRK1", 8);
    expect_refused("ranks_short", NULL, "tokenizer encode --tokenizer short.tkr h.txt",
                   "short.tkr: expected a rank file of at least 28 bytes (header and checksum), found 8 bytes");
    size_t n = 0;
    uint8_t *b = NULL;
    FILE *f = fopen(ST_SOURCE_DIR "/data/tokenizers/cl100k_base.tkr", "rb");
    if (f && fseek(f, 0, SEEK_END) == 0 && (n = (size_t)ftell(f)) > 64 && fseek(f, 0, SEEK_SET) == 0 &&
        (b = malloc(n)) && fread(b, 1, n, f) != n)
        n = 0;
    if (f) fclose(f);
    size_t mid = b && n ? special_record(b, n, "<|fim_middle|>") : 0, suf = b && n ? special_record(b, n, "<|fim_suffix|>") : 0;
    tu_check(mid && suf, "ranks_fixture", "cl100k_base.tkr: %zu bytes, <|fim_middle|> at %zu, <|fim_suffix|> at %zu", n, mid, suf);
    if (mid && suf) {
        write_file("good.tkr", (const char *)b, n);
        expect_ok("ranks_unchanged_control", NULL, "tokenizer encode --tokenizer good.tkr h.txt");
        uint8_t t[4]; /* swap the two ids: 100257, 100258, 100260, 100259, 100276 */
        memcpy(t, b + mid, 4), memcpy(b + mid, b + suf, 4), memcpy(b + suf, t, 4);
        uint64_t sum = fnv1a64(b, n - 8);
        for (int k = 0; k < 8; k++) b[n - 8 + k] = (uint8_t)(sum >> (8 * k));
        write_file("swapped.tkr", (const char *)b, n);
        expect_refused("ranks_specials_out_of_order", NULL, "tokenizer encode --tokenizer swapped.tkr h.txt",
                       "swapped.tkr: special token 3: expected an id above the ranks (>= 100256) and not repeated, "
                       "found 100259");
    }
    free(b);
    tu_shell((snprintf(cmd, sizeof cmd, "cp -r %s %s && mkdir %s", P("tok3"), P("tokp"), P("tokp/pattern")), cmd));
    expect_refused("tokenizer_pattern_dir", NULL, "tokenizer encode --tokenizer tokp h.txt",
                   "tokp/pattern: expected a file, found a directory");

    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    tu_shell(cmd);
    return tu_exit();
}
