/* test_docs_coverage.c — every option is documented, every documented command runs (issue 26).
 *
 * Commands: those `scaletrain --help` lists, those of the README's command table (its first column's
 * first word), and every `scaletrain WORD` in README.md. Each must answer `WORD --help` with exit 0.
 * Sub-commands: every `scaletrain WORD SUB` (or `WORD a|b|c`) named in a command's help, whose own
 * `--help` exits 0, adds its options too.
 * Options: every `--flag` that starts an option line of those help texts (`  --flag ...` or
 * `  -o, --flag ...`) must appear as `--flag` (not a prefix of a longer flag) in README.md or in a
 * docs/<page>.md page.
 *
 * Oracle: the binary's own --help output against the documentation's text. Negative controls, run
 * here: a made-up flag added to the parsed list must be reported missing; a made-up `scaletrain
 * frobnicate` added to a copy of the README must be reported as a command whose --help fails; the
 * option parser must find the flags of a help text written in the test. Also: the README stays
 * within 260 lines (issue 26: about 250, the reference in docs/), and every relative link
 * `](path)` of README.md and docs/<page>.md names a file of the repository (control: a link to a
 * page that does not exist is reported). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

#define BIN ST_BINARY_DIR "/scaletrain"
#define MAXN 512

typedef struct {
    char name[MAXN][64];
    char where[MAXN][64]; /* the command whose help lists it */
    int n;
} Names;

static int names_has(const Names *s, const char *x) {
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->name[i], x)) return 1;
    return 0;
}

static void names_add(Names *s, const char *x, const char *where) {
    if (s->n < MAXN && !names_has(s, x) && strlen(x) < 64) {
        snprintf(s->name[s->n], 64, "%s", x);
        snprintf(s->where[s->n], 64, "%s", where);
        s->n++;
    }
}

/* Output (stdout + stderr) of `scaletrain ARGS`, its exit status in *rc. Caller frees. */
static char *run(const char *args, int *rc) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s %s 2>&1", BIN, args);
    FILE *f = popen(cmd, "r");
    if (!f) return *rc = -1, NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (size_t k; buf && (k = fread(buf + n, 1, cap - n - 1, f)) > 0;) {
        n += k;
        if (n + 1 == cap) buf = realloc(buf, cap *= 2);
    }
    if (buf) buf[n] = 0;
    int st = pclose(f);
    *rc = st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return buf;
}

static int word_char(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'; }

/* The options of a help text: `--flag` at the start of an indented line, or after `-x, `. */
static void parse_flags(const char *help, const char *where, Names *out) {
    for (const char *l = help; l && *l;) {
        const char *e = strchr(l, '\n');
        const char *p = l;
        if (*p == ' ') {
            while (*p == ' ') p++;
            if (p[0] == '-' && p[1] != '-' && p[1] && p[2] == ',' && p[3] == ' ') p += 4; /* "-o, --out" */
            if (p[0] == '-' && p[1] == '-' && p[2] >= 'a' && p[2] <= 'z') {
                char f[64];
                int k = 0;
                for (p += 2; word_char(*p) && k < 63; p++) f[k++] = *p;
                f[k] = 0;
                names_add(out, f, where);
            }
        }
        l = e ? e + 1 : NULL;
    }
}

/* Words following "scaletrain " in text (lower-case words; `a|b|c` split), for a given first word
 * when first != NULL (then the word after it is collected). */
static void scan_commands(const char *text, const char *first, Names *out) {
    for (const char *p = text; p && (p = strstr(p, "scaletrain ")); p++) {
        const char *q = p + 11;
        if (first) {
            size_t fl = strlen(first);
            if (strncmp(q, first, fl) || q[fl] != ' ') continue;
            q += fl + 1;
        }
        if (!(*q >= 'a' && *q <= 'z')) continue;
        char w[64];
        int k = 0;
        const char *s = q;
        while (((*s >= 'a' && *s <= 'z') || *s == '-' || *s == '|') && k < 63) w[k++] = *s++;
        w[k] = 0;
        if (*s >= '0' && *s <= '9') continue;
        if (*s == '_' || *s == '.' || *s == '/') continue; /* a path or a file name, not a command */
        for (char *t = strtok(w, "|"); t; t = strtok(NULL, "|")) names_add(out, t, first ? first : "README");
    }
}

/* The first column's first word of the table under "## Commands" in the README. */
static void scan_command_table(const char *readme, Names *out) {
    const char *p = readme ? strstr(readme, "\n## Commands") : NULL;
    const char *end = p ? strstr(p + 1, "\n## ") : NULL;
    for (; p && (p = strstr(p, "\n| `")) && (!end || p < end); p++) {
        char w[64];
        int k = 0;
        for (const char *s = p + 4; *s >= 'a' && *s <= 'z' && k < 63; s++) w[k++] = *s;
        w[k] = 0;
        if (k) names_add(out, w, "README table");
    }
}

/* Every `--flag` (whole: not followed by a letter, digit or '-') in text. */
static int documented(const char *text, const char *flag) {
    char pat[80];
    snprintf(pat, sizeof pat, "--%s", flag);
    size_t pl = strlen(pat);
    for (const char *p = text; (p = strstr(p, pat)); p++)
        if (!word_char(p[pl]) && (p == text || p[-1] != '-')) return 1;
    return 0;
}

/* README.md + docs/<page>.md, concatenated. */
static char *docs_text(void) {
    char *all = tu_slurp(ST_SOURCE_DIR "/README.md");
    DIR *d = opendir(ST_SOURCE_DIR "/docs");
    for (struct dirent *e; all && d && (e = readdir(d));) {
        size_t l = strlen(e->d_name);
        if (l < 4 || strcmp(e->d_name + l - 3, ".md")) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/docs/%s", ST_SOURCE_DIR, e->d_name);
        char *t = tu_slurp(path);
        if (!t) continue;
        char *n = realloc(all, strlen(all) + strlen(t) + 2);
        if (n) strcat(strcat(n, "\n"), t), all = n;
        free(t);
    }
    if (d) closedir(d);
    return all;
}


static int path_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || (c && strchr("_./-", c));
}

static int links_checked; /* relative links seen by broken_links */

/* Relative links `](target)` of text (a file in directory dir, relative to the source root) whose
 * target does not exist, appended to bad; returns how many. */
static int broken_links(const char *text, const char *dir, const char *fname, char *bad, size_t cap) {
    int n = 0;
    for (const char *p = text; p && (p = strstr(p, "](")); p++) {
        const char *q = p + 2, *e = q;
        if (!strncmp(q, "http://", 7) || !strncmp(q, "https://", 8) || !strncmp(q, "mailto:", 7)) continue;
        int dot = 0; /* a path: [A-Za-z0-9_./-]+ with a '.' or '/', ended by ')' or '#' (not formulas like (2C)) */
        for (; path_char(*e); e++) dot |= *e == '.' || *e == '/';
        if (e == q || !dot || (*e != ')' && *e != '#')) continue;
        links_checked++;
        char rel[600], path[1400];
        snprintf(rel, sizeof rel, "%s%s%.*s", dir, *dir ? "/" : "", (int)(e - q), q);
        snprintf(path, sizeof path, "%s/%s", ST_SOURCE_DIR, rel);
        if (access(path, F_OK) == 0) continue;
        n++;
        if (strlen(bad) + strlen(rel) + strlen(fname) + 8 < cap)
            snprintf(bad + strlen(bad), cap - strlen(bad), "%s: %s; ", fname, rel);
    }
    return n;
}

/* Commands whose --help does not exit 0, space-separated, into bad. */
static void check_commands(const Names *cmds, char *bad, size_t cap) {
    bad[0] = 0;
    for (int i = 0; i < cmds->n; i++) {
        char a[128];
        int rc;
        snprintf(a, sizeof a, "%s --help", cmds->name[i]);
        free(run(a, &rc));
        if (rc != 0 && strlen(bad) + strlen(cmds->name[i]) + 16 < cap)
            snprintf(bad + strlen(bad), cap - strlen(bad), "%s(exit %d) ", cmds->name[i], rc);
    }
}

int main(void) {
    char *readme = tu_slurp(ST_SOURCE_DIR "/README.md");
    char *docs = docs_text();
    tu_check(readme && docs, "docs_read", "README.md and docs/<page>.md");
    if (!readme || !docs) return tu_exit();

    static Names cmds, flags;
    int rc;
    char *top = run("--help", &rc);
    tu_check(rc == 0 && top, "top_help_exit0", "scaletrain --help exit %d", rc);
    const char *c = top ? strstr(top, "commands:") : NULL;
    for (const char *l = c; l && (l = strchr(l, '\n'));) { /* "  NAME   description" */
        l++;
        if (l[0] == ' ' && l[1] == ' ' && l[2] >= 'a' && l[2] <= 'z') {
            char w[64];
            int k = 0;
            for (const char *s = l + 2; word_char(*s) && k < 63; s++) w[k++] = *s;
            w[k] = 0;
            names_add(&cmds, w, "scaletrain --help");
        }
    }
    int listed = cmds.n;
    scan_command_table(readme, &cmds);
    scan_commands(readme, NULL, &cmds);
    tu_check(listed >= 10, "commands_listed", "%d commands in scaletrain --help, %d with the README's", listed, cmds.n);

    char bad[2048];
    check_commands(&cmds, bad, sizeof bad);
    tu_check(!bad[0], "readme_commands_run", "%d commands (--help, README table, `scaletrain WORD` in README) answer "
             "--help with exit 0%s%s", cmds.n, bad[0] ? "; failing: " : "", bad);

    /* options of every command and sub-command */
    int nsub = 0;
    for (int i = 0; i < cmds.n; i++) {
        char a[128];
        snprintf(a, sizeof a, "%s --help", cmds.name[i]);
        char *h = run(a, &rc);
        if (rc != 0 || !h) {
            free(h);
            continue;
        }
        parse_flags(h, cmds.name[i], &flags);
        static Names subs;
        subs.n = 0;
        scan_commands(h, cmds.name[i], &subs);
        for (int k = 0; k < subs.n; k++) {
            char b[160], where[128];
            snprintf(b, sizeof b, "%s %s --help", cmds.name[i], subs.name[k]);
            char *hs = run(b, &rc);
            if (rc == 0 && hs) {
                snprintf(where, sizeof where, "%s %s", cmds.name[i], subs.name[k]);
                parse_flags(hs, where, &flags), nsub++;
            }
            free(hs);
        }
        free(h);
    }
    char missing[8192] = "";
    int nmiss = 0;
    for (int i = 0; i < flags.n; i++)
        if (!documented(docs, flags.name[i])) {
            nmiss++;
            if (strlen(missing) + 140 < sizeof missing)
                snprintf(missing + strlen(missing), sizeof missing - strlen(missing), "--%s (%s) ", flags.name[i],
                         flags.where[i]);
        }
    tu_check(flags.n >= 150 && nmiss == 0, "every_option_documented",
             "%d options of %d commands and %d sub-commands; %d not in README.md or docs/<page>.md%s%s", flags.n, cmds.n,
             nsub, nmiss, nmiss ? ": " : "", missing);

    /* negative controls */
    Names fake = flags;
    names_add(&fake, "no-such-option-zq", "control");
    int caught = 0;
    for (int i = 0; i < fake.n; i++) caught += !documented(docs, fake.name[i]);
    tu_check(caught == nmiss + 1, "control_made_up_flag_missing", "%d undocumented with a made-up flag added (want %d)",
             caught, nmiss + 1);
    static Names c2;
    c2 = cmds;
    scan_commands("see `scaletrain frobnicate --help`", NULL, &c2);
    check_commands(&c2, bad, sizeof bad);
    tu_check(strstr(bad, "frobnicate(exit") != NULL, "control_made_up_command_fails", "failing: %s", bad);
    static Names pf;
    parse_flags("usage: x\n  --alpha   a\n  -o, --beta-two B   b\n  text --not-this\n  --gamma3\n", "control", &pf);
    tu_check(pf.n == 3 && names_has(&pf, "alpha") && names_has(&pf, "beta-two") && names_has(&pf, "gamma3"),
             "control_option_parser", "%d options parsed (want alpha, beta-two, gamma3)", pf.n);
    tu_check(!documented("--val-fraction-x and ---val-fraction", "val-fraction"), "control_whole_flag",
             "a longer flag does not document a shorter one");

    /* links */
    char lbad[4096] = "";
    int nbroken = broken_links(readme, "", "README.md", lbad, sizeof lbad), npages = 0;
    DIR *d = opendir(ST_SOURCE_DIR "/docs");
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t l = strlen(e->d_name);
        if (l < 4 || strcmp(e->d_name + l - 3, ".md")) continue;
        char path[1024], name[600];
        snprintf(path, sizeof path, "%s/docs/%s", ST_SOURCE_DIR, e->d_name);
        snprintf(name, sizeof name, "docs/%s", e->d_name);
        char *t = tu_slurp(path);
        if (t) nbroken += broken_links(t, "docs", name, lbad, sizeof lbad), npages++;
        free(t);
    }
    if (d) closedir(d);
    tu_check(nbroken == 0 && npages >= 10 && links_checked >= 40, "links_resolve",
             "%d of %d relative links in README.md and %d docs pages broken%s%s", nbroken, links_checked, npages,
             nbroken ? ": " : "", lbad);
    char cbad[512] = "";
    int nc = broken_links("see [x](docs/no-such-page.md) and [y](README.md#top) and [z](https://example.org/a)", "",
                          "control", cbad, sizeof cbad);
    tu_check(nc == 1 && strstr(cbad, "docs/no-such-page.md"), "control_broken_link", "%d reported: %s", nc, cbad);

    int lines = 0;
    for (const char *p = readme; *p; p++) lines += *p == '\n';
    tu_check(lines <= 260, "readme_length", "%d lines (want about 250, at most 260; reference material in docs/)", lines);
    free(top);
    free(readme);
    free(docs);
    return tu_exit();
}
