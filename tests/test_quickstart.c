/* test_quickstart.c — the README's quick start, run as written on a plain text file (issue 26).
 *
 * The commands are read from README.md between the markers <!-- quickstart --> and
 * <!-- /quickstart --> (backslash continuations joined), so the test runs what a newcomer copies.
 * It runs twice: on a small plain text file of paragraphs separated by blank lines, with no
 * separator line, and on the same lines with no blank line at all (in its own directory), which
 * prepare cuts into pieces of at least 4096 bytes at line ends (docs/data.md §6). Only sizes change, by a table of substitutions each of which must apply (a README edit that
 * drops one fails here, so the table follows the README): the corpus path, the binary's path, the
 * step count, the evaluation and checkpoint intervals, the sample length.
 *
 * Oracle: every command exits 0; the files each step promises exist (train and val shards, the
 * checkpoints, the weights, the log with its validation records, the report page); prepare's
 * summary gives at least one validation document (one document per paragraph; for the text without
 * blank lines at least 2, and one notice line naming as many); sample prints text after its prompt
 * and eval a loss. Negative controls, run here: (1) the old quick start's prepare (no --separator "",
 * no --val-fraction) on the same file must fail with exit 2 and one line naming both remedies, and
 * leave no shard; (2) on the train-only shards the old prepare wrote (now `--val-fraction 0`), the
 * README's train command must fail naming val_*.bin; (3) the extractor must find nothing in a copy of
 * the README without its markers, and a substitution whose text is absent must be reported; (4) the
 * README's prepare on a text without blank lines too short for two pieces (under 8192 bytes) must
 * fail with exit 2, one line naming --val-fraction 0, and no shard. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "testutil.h"

#define TMP ST_BINARY_DIR "/test_quickstart_tmp"
#define MAXCMD 16
#define NPARA 200 /* enough that 10% of it (GPT-2 tokens) holds a sequence of 256 */

/* The quick start's commands: the lines of the code block between the markers, continuations
 * joined. Returns how many (0 when the markers or the block are missing). */
static int extract(const char *readme, char cmds[][2048], int max) {
    const char *a = readme ? strstr(readme, "<!-- quickstart -->") : NULL;
    const char *b = a ? strstr(a, "<!-- /quickstart -->") : NULL;
    if (!a || !b) return 0;
    int n = 0;
    char cur[2048] = "";
    for (const char *p = a; p < b && n < max;) {
        const char *e = memchr(p, '\n', (size_t)(b - p));
        if (!e) e = b;
        char line[2048];
        size_t len = (size_t)(e - p) < sizeof line - 1 ? (size_t)(e - p) : sizeof line - 1;
        memcpy(line, p, len);
        line[len] = 0;
        p = e + 1;
        if (!strncmp(line, "```", 3) || !strncmp(line, "<!--", 4)) continue;
        char *s = line;
        while (*s == ' ') s++;
        size_t l = strlen(s);
        int cont = l > 0 && s[l - 1] == '\\';
        if (cont) s[--l] = 0;
        if (strlen(cur) + l + 2 < sizeof cur) strcat(cur, s);
        if (!cont && cur[0]) snprintf(cmds[n++], sizeof cmds[0], "%s", cur), cur[0] = 0;
    }
    return n;
}

/* Replaces every occurrence of from by to in s (cap bytes); returns how many. */
static int subst(char *s, size_t cap, const char *from, const char *to) {
    int k = 0;
    size_t fl = strlen(from), tl = strlen(to);
    for (char *p = strstr(s, from); p; p = strstr(p + tl, from)) {
        if (strlen(s) - fl + tl + 1 > cap) return -1;
        memmove(p + tl, p + fl, strlen(p + fl) + 1);
        memcpy(p, to, tl);
        k++;
    }
    return k;
}

typedef struct {
    const char *from, *to;
} Sub;

/* The sizes the test shrinks; each must occur in the README's block. */
static const Sub SUBS[] = {
    {"build/scaletrain ", ST_BINARY_DIR "/scaletrain "},
    {" corpus.txt", " " TMP "/corpus.txt"},
    {"--model d4", "--model d4 --threads 1"}, /* one thread: no barrier spinning on a loaded machine */
    {"--seq-len 256", "--seq-len 64"},
    {"--micro-batch 8", "--micro-batch 2"},
    {"--steps 300", "--steps 2"},
    {"--val-every 100", "--val-every 1 --val-batches 1"},
    {"--ckpt-every 100", "--ckpt-every 2"}, /* one save (~190 MB with fsync), at the end */
    {"eval run/", "eval run/ --threads 1"},
    {"--tokens 100", "--tokens 12"},
};
#define NSUBS ((int)(sizeof SUBS / sizeof SUBS[0]))

/* Applies SUBS to the commands; the names of the substitutions that matched nothing go to missing. */
static void apply_subs(char cmds[][2048], int n, char *missing, size_t cap) {
    missing[0] = 0;
    for (int k = 0; k < NSUBS; k++) {
        int hits = 0;
        for (int i = 0; i < n; i++) hits += subst(cmds[i], sizeof cmds[0], SUBS[k].from, SUBS[k].to);
        if (hits <= 0 && strlen(missing) + strlen(SUBS[k].from) + 4 < cap)
            strcat(missing, "'"), strcat(missing, SUBS[k].from), strcat(missing, "' ");
    }
}

static int exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

static double last_secs; /* wall time of the last run_in_tmp */

/* Runs cmd in TMP with its output in TMP/<name>.out; returns the exit status. name may start with
 * a subdirectory of TMP ("plain/cmd0"), which is then the working directory. */
static int run_in_tmp(const char *name, const char *cmd) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    char sh[6000], dir[1200];
    const char *slash = strrchr(name, '/');
    snprintf(dir, sizeof dir, "%s/%.*s", TMP, slash ? (int)(slash - name) : 0, name);
    snprintf(sh, sizeof sh, "cd %s && %s > %s/%s.out 2>&1", dir, cmd, TMP, name);
    int rc = system(sh);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    last_secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    return rc != -1 && WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static char *out_of(const char *name) {
    char p[1200];
    snprintf(p, sizeof p, "%s/%s.out", TMP, name);
    return tu_slurp(p);
}

/* A plain text corpus (~45 KB): NPARA paragraphs of three lines, blank lines between them unless
 * !blank, no separator line; or only the first `lines` lines when lines > 0. */
static void write_corpus(const char *path, int blank, int lines) {
    static const char *w[] = {"the", "river", "ran", "past", "a", "quiet", "mill", "and", "every", "morning",
                              "light", "fell", "on", "stones", "where", "children", "counted", "boats", "under",
                              "grey", "clouds", "while", "old", "bells", "rang"};
    FILE *f = fopen(path, "w");
    if (!f) return;
    unsigned s = 12345;
    for (int p = 0, k = 0; p < NPARA; p++) {
        if (p && blank) fputc('\n', f);
        for (int l = 0; l < 3 && (lines <= 0 || k < lines); l++, k++) {
            for (int i = 0; i < 12; i++) {
                s = s * 1103515245u + 12345u;
                fprintf(f, "%s%s", i ? " " : "", w[(s >> 16) % (sizeof w / sizeof w[0])]);
            }
            fputs(".\n", f);
        }
    }
    fclose(f);
}

/* Runs the quick start's commands in TMP/<sub> (sub "" or "dir/") and checks what each promises;
 * paras > 0: the corpus has that many paragraphs (one document each), 0: it has no blank line, so
 * prepare cuts it into pieces and says so in one notice line. */
static void run_block(char cmds[][2048], int n, const char *sub, int paras) {
    char shards[1200];
    for (int i = 0; i < n; i++) {
        char name[64];
        snprintf(name, sizeof name, "%scmd%d", sub, i);
        int rc = run_in_tmp(name, cmds[i]);
        char *o = out_of(name);
        const char *tail = o && strlen(o) > 300 ? o + strlen(o) - 300 : o;
        tu_check(rc == 0, "quickstart_command_runs", "exit %d, %.1f s: %.120s ... output tail: %s", rc, last_secs,
                 cmds[i], tail ? tail : "(none)");
        if (strstr(cmds[i], "scaletrain prepare ")) {
            const char *d = o ? strstr(o, "prepare: documents ") : NULL;
            size_t rd = 0, dup = 0, tr = 0, va = 0;
            int got = d && sscanf(d, "prepare: documents %zu read, %zu duplicates dropped, %zu train + %zu val", &rd,
                                  &dup, &tr, &va) == 4;
            snprintf(shards, sizeof shards, "%s/%sshards/val_000000.bin", TMP, sub);
            int val_bin = exists(shards);
            snprintf(shards, sizeof shards, "%s/%sshards/train_000000.bin", TMP, sub);
            int train_bin = exists(shards);
            /* the notice names the document count: "... into N documents of at least 4096 bytes" */
            const char *nt = o ? strstr(o, "prepare: notice: ") : NULL;
            const char *into = nt ? strstr(nt, " into ") : NULL;
            size_t cut = 0;
            int notices = 0;
            for (const char *q = o; q && (q = strstr(q, "prepare: notice: ")); q++) notices++;
            if (into) sscanf(into, " into %zu documents", &cut);
            int docs_ok = paras > 0 ? rd == (size_t)paras && notices == 0 : rd >= 2 && notices == 1 && cut == rd;
            tu_check(got && docs_ok && va >= 1 && tr >= 1 && train_bin && val_bin,
                     paras > 0 ? "quickstart_val_split" : "quickstart_val_split_no_blank_line",
                     "documents %zu (want %s), notice lines %d (cut into %zu), %zu train + %zu val; val_000000.bin %d",
                     rd, paras > 0 ? "one per paragraph, no notice" : ">= 2 pieces named by one notice", notices, cut,
                     tr, va, val_bin);
        }
        if (strstr(cmds[i], "scaletrain sample ")) {
            const char *p = o ? strstr(o, "Once upon a time") : NULL;
            tu_check(p && strlen(p) > strlen("Once upon a time") + 4, "quickstart_sample_text", "%.200s",
                     o ? o : "(none)");
        }
        if (strstr(cmds[i], "scaletrain eval "))
            tu_check(o && strstr(o, "loss"), "quickstart_eval_loss", "%.200s", o ? o : "(none)");
        free(o);
    }
    char p[1200], w[1200], c[1200], r[1200];
    snprintf(p, sizeof p, "%s/%srun.jsonl", TMP, sub);
    snprintf(w, sizeof w, "%s/%srun/model.safetensors", TMP, sub);
    snprintf(c, sizeof c, "%s/%sckpt/latest", TMP, sub);
    snprintf(r, sizeof r, "%s/%sreport.html", TMP, sub);
    char *log = tu_slurp(p);
    int vals = 0;
    for (const char *q = log; q && (q = strstr(q, "\"event\":\"val\"")); q++) vals++;
    char cfg[1200];
    snprintf(cfg, sizeof cfg, "%s/%srun/config.json", TMP, sub);
    tu_check(vals >= 2 && exists(w) && exists(cfg) && exists(c) && exists(r), "quickstart_outputs",
             "%s: val records %d (want >= 2), weights %d, config %d, checkpoint %d, report %d",
             sub[0] ? sub : "paragraphs", vals, exists(w), exists(cfg), exists(c), exists(r));
    free(log);
}

int main(void) {
    if (!tu_shell("rm -rf " TMP " && mkdir -p " TMP)) return tu_exit();
    write_corpus(TMP "/corpus.txt", 1, 0);
    char *readme = tu_slurp(ST_SOURCE_DIR "/README.md");
    static char cmds[MAXCMD][2048];
    int n = extract(readme, cmds, MAXCMD);
    int has[4] = {0};
    static const char *want[4] = {"scaletrain prepare ", "scaletrain train ", "scaletrain sample ", "scaletrain eval "};
    for (int i = 0; i < n; i++)
        for (int k = 0; k < 4; k++) has[k] |= strstr(cmds[i], want[k]) != NULL;
    tu_check(n >= 4 && has[0] && has[1] && has[2] && has[3], "quickstart_extracted",
             "%d commands between the README's markers (prepare %d, train %d, sample %d, eval %d)", n, has[0], has[1],
             has[2], has[3]);
    char missing[512];
    apply_subs(cmds, n, missing, sizeof missing);
    tu_check(!missing[0], "quickstart_substitutions", "every size the test shrinks is in the README's block%s%s",
             missing[0] ? "; not found: " : "", missing);

    /* negative control (1) first, in its own directory: the old quick start's prepare */
    char old[2048] = "";
    int ntrain = -1;
    for (int i = 0; i < n; i++) {
        if (strstr(cmds[i], "scaletrain prepare ")) {
            memcpy(old, cmds[i], sizeof old);
            subst(old, sizeof old, " --separator \"\"", "");
            subst(old, sizeof old, " --val-fraction 0.1", "");
            subst(old, sizeof old, "--out shards/", "--out oldshards/");
        }
        if (strstr(cmds[i], "scaletrain train ")) ntrain = i;
    }
    int orc = old[0] ? run_in_tmp("old_prepare", old) : -1;
    char *oout = out_of("old_prepare");
    int lines = 0; /* error lines (the progress lines are not errors) */
    for (const char *p = oout; p && (p = strstr(p, "scaletrain prepare:")); p++) lines++;
    tu_check(orc == 2 && oout && strstr(oout, "--separator \"\"") && strstr(oout, "--val-fraction 0") && lines == 1 &&
                 !exists(TMP "/oldshards/train_000000.bin") && !exists(TMP "/oldshards/val_000000.bin"),
             "control_old_quickstart_refused", "exit %d (want 2), %d line(s), shards written %d: %.300s", orc, lines,
             exists(TMP "/oldshards/train_000000.bin"), oout ? oout : "(no output)");
    free(oout);
    /* negative control (2): what the old prepare wrote (train shards only, as --val-fraction 0 does
     * now) makes the README's train fail naming val_*.bin: the checks above catch issue 26's bug */
    if (ntrain >= 0 && old[0]) {
        char t[2048], p0[2048];
        memcpy(p0, old, sizeof p0);
        subst(p0, sizeof p0, " --out ", " --val-fraction 0 --out ");
        int prc = run_in_tmp("old_prepare_noval", p0);
        tu_check(prc == 0 && exists(TMP "/oldshards/train_000000.bin") && !exists(TMP "/oldshards/val_000000.bin"),
                 "control_setup_train_only_shards", "exit %d", prc);
        memcpy(t, cmds[ntrain], sizeof t);
        subst(t, sizeof t, "'shards/", "'oldshards/");
        int trc = run_in_tmp("old_train", t);
        char *tout = out_of("old_train");
        tu_check(trc != 0 && tout && strstr(tout, "val_*.bin"), "control_train_without_val_split",
                 "exit %d (want non-zero) naming val_*.bin: %.200s", trc, tout ? tout : "(no output)");
        free(tout);
    }

    /* the quick start itself: on paragraphs, then on the same lines without a blank line */
    run_block(cmds, n, "", NPARA);
    char plain[MAXCMD][2048];
    memcpy(plain, cmds, sizeof plain);
    for (int i = 0; i < n; i++) subst(plain[i], sizeof plain[0], TMP "/corpus.txt", TMP "/plain/corpus.txt");
    if (tu_shell("mkdir -p " TMP "/plain")) {
        write_corpus(TMP "/plain/corpus.txt", 0, 0);
        run_block(plain, n, "plain/", 0);
    }

    /* negative control (4): a text without blank lines too short for two pieces */
    for (int i = 0; i < n; i++)
        if (strstr(cmds[i], "scaletrain prepare ") && tu_shell("mkdir -p " TMP "/short")) {
            write_corpus(TMP "/short/corpus.txt", 0, 150); /* ~11 KB: 150 lines */
            /* its first whole lines under 8000 bytes */
            tu_shell("head -c 8000 " TMP "/short/corpus.txt | sed '$d' > " TMP "/short/short.txt");
            char c[2048];
            memcpy(c, cmds[i], sizeof c);
            subst(c, sizeof c, TMP "/corpus.txt", TMP "/short/short.txt");
            int rc = run_in_tmp("short/prepare", c);
            char *o = out_of("short/prepare");
            int lines = 0;
            for (const char *p = o; p && (p = strstr(p, "scaletrain prepare:")); p++) lines++;
            tu_check(rc == 2 && o && lines == 1 && strstr(o, "short.txt") && strstr(o, "--val-fraction 0") &&
                         strstr(o, "4096 bytes") && !exists(TMP "/short/shards/train_000000.bin") &&
                         !exists(TMP "/short/shards/val_000000.bin"),
                     "control_short_plain_text_refused", "exit %d (want 2), %d line(s): %.400s", rc, lines,
                     o ? o : "(no output)");
            free(o);
        }

    /* negative control (3): the extractor and the substitution check can fail */
    char *copy = readme ? strdup(readme) : NULL;
    if (copy) subst(copy, strlen(copy) + 1, "<!-- quickstart -->", "<!-- qs -->");
    static char none[MAXCMD][2048];
    int n0 = extract(copy, none, MAXCMD);
    static char one[1][2048] = {"build/scaletrain train --steps 301"};
    apply_subs(one, 1, missing, sizeof missing);
    tu_check(n0 == 0 && strstr(missing, "--steps 300") && strstr(missing, "corpus.txt"), "control_extractor",
             "%d commands without the markers (want 0); unmatched substitutions reported: %s", n0, missing);
    free(copy);
    free(readme);
    if (!tu_failures) tu_shell("rm -rf " TMP);
    return tu_exit();
}
