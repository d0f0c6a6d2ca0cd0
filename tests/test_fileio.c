/* test_fileio.c — the crash-safe writer (core/fileio.h) on what a user's -o may name.
 *
 * Oracles (the file system's own answer: lstat, readlink, a reader on the other end):
 *   link     writing to a symbolic link replaces the file it names: the link is still a link to the
 *            same target, the target holds the new bytes, no temporary is left.
 *   fifo     writing to a FIFO writes through it: a reader (a child) receives the bytes, and the FIFO
 *            is still a FIFO (a rename over it replaced it with a plain file; so were /dev/null and
 *            device nodes, found by an audit on 2026-11-29 as root).
 *   dir      a directory is refused as bad input (ST_ERR_INPUT) naming it, not renamed over.
 *   create   a path in a folder that does not exist is refused as bad input naming the user's path first.
 *   regular  a plain file is replaced whole (the control of the three cases above: its inode changes,
 *            as a rename gives).
 *   stale    a commit removes the path's temporary of a pid that no longer runs (a writer killed
 *            mid-write); control: a running pid's and a non-numeric suffix's are kept.
 * Negative control: the detector of a replaced link and FIFO, applied after a plain rename over
 * them (what the writer did before), must report both replaced. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/fileio.h"
#include "testutil.h"

#define TMP ST_BINARY_DIR "/test_fileio_tmp"

static int is_link_to(const char *p, const char *target) {
    struct stat sb;
    char buf[4096];
    ssize_t n = readlink(p, buf, sizeof buf - 1);
    if (lstat(p, &sb) != 0 || !S_ISLNK(sb.st_mode) || n < 0) return 0;
    buf[n] = 0;
    return !strcmp(buf, target);
}

static int is_fifo(const char *p) {
    struct stat sb;
    return lstat(p, &sb) == 0 && S_ISFIFO(sb.st_mode);
}

static Status write_text(const char *path, const char *text, Err *e) {
    const void *b[1] = {text};
    size_t l[1] = {strlen(text)};
    return file_write_atomic(path, b, l, 1, e);
}

/* Writes text to the FIFO while a child reads it into out; returns the writer's status. */
static Status through_fifo(const char *fifo, const char *text, const char *out, Err *e) {
    pid_t pid = fork();
    if (pid == 0) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "cat %s > %s", fifo, out);
        _exit(system(cmd) == 0 ? 0 : 1);
    }
    Status st = write_text(fifo, text, e);
    int ws = 0;
    waitpid(pid, &ws, 0);
    return st;
}

int main(void) {
    tu_shell("rm -rf " TMP " && mkdir -p " TMP);
    Err e;
    /* link */
    tu_shell("echo old > " TMP "/target.txt && ln -s target.txt " TMP "/link.txt");
    Status s1 = write_text(TMP "/link.txt", "new bytes\n", &e);
    char *t = tu_slurp(TMP "/target.txt");
    int left = system("ls " TMP "/*.tmp.* >/dev/null 2>&1") == 0;
    tu_check(s1 == ST_OK && is_link_to(TMP "/link.txt", "target.txt") && t && !strcmp(t, "new bytes\n") && !left,
             "a symbolic link: its target replaced, the link kept", "status %d, link %s, target \"%s\", temporary left %d",
             (int)s1, is_link_to(TMP "/link.txt", "target.txt") ? "kept" : "REPLACED", t ? t : "(none)", left);
    free(t);
    /* fifo */
    int mk = mkfifo(TMP "/fifo", 0644);
    Status s2 = mk == 0 ? through_fifo(TMP "/fifo", "through the pipe\n", TMP "/fifo.out", &e) : ST_ERR_RUNTIME;
    t = tu_slurp(TMP "/fifo.out");
    tu_check(mk == 0 && s2 == ST_OK && is_fifo(TMP "/fifo") && t && !strcmp(t, "through the pipe\n"),
             "a FIFO: written through, still a FIFO", "mkfifo %d, status %d, %s, reader got \"%s\"", mk, (int)s2,
             is_fifo(TMP "/fifo") ? "a FIFO" : "REPLACED", t ? t : "(none)");
    free(t);
    /* dir */
    tu_shell("mkdir -p " TMP "/adir");
    Status s3 = write_text(TMP "/adir", "x", &e);
    tu_check(s3 == ST_ERR_INPUT && strstr(e.msg, TMP "/adir: expected a file name, found a directory") &&
                 system("test -d " TMP "/adir") == 0,
             "a directory: refused as bad input, naming it", "status %d: %s", (int)s3, s3 ? e.msg : "(written)");
    /* create */
    Status s4 = write_text(TMP "/no/such/dir/x.txt", "x", &e);
    tu_check(s4 == ST_ERR_INPUT && !strncmp(e.msg, TMP "/no/such/dir/x.txt: cannot create", strlen(TMP "/no/such/dir/x.txt: cannot create")),
             "a missing folder: bad input, the error starts with the user's path", "status %d: %s", (int)s4, s4 ? e.msg : "(written)");
    /* regular (control: replaced by a rename, a new inode) */
    tu_shell("echo one > " TMP "/plain.txt");
    struct stat a, b;
    stat(TMP "/plain.txt", &a);
    Status s5 = write_text(TMP "/plain.txt", "two\n", &e);
    stat(TMP "/plain.txt", &b);
    t = tu_slurp(TMP "/plain.txt");
    tu_check(s5 == ST_OK && a.st_ino != b.st_ino && t && !strcmp(t, "two\n"), "control: a plain file is replaced by a rename",
             "inode %llu -> %llu, \"%s\"", (unsigned long long)a.st_ino, (unsigned long long)b.st_ino, t ? t : "(none)");
    free(t);
    /* stale: a writer killed mid-write left plain.txt.tmp.<pid>; the next commit of plain.txt removes
     * it, and keeps the temporary of a pid that runs (the parent of this test: its control, a sweep
     * of every .tmp.* fails it) and a name that only looks like one */
    pid_t child = fork();
    if (child == 0) _exit(0);
    waitpid(child, NULL, 0); /* child's pid now runs nothing */
    char dead[256], live[256];
    snprintf(dead, sizeof dead, TMP "/plain.txt.tmp.%ld", (long)child);
    snprintf(live, sizeof live, TMP "/plain.txt.tmp.%ld", (long)getppid());
    char cmd[700];
    snprintf(cmd, sizeof cmd, "echo half > '%s' && echo other > '%s' && echo keep > " TMP "/plain.txt.tmp.12x", dead, live);
    tu_shell(cmd);
    Status s6 = write_text(TMP "/plain.txt", "three\n", &e);
    int dead_gone = access(dead, F_OK) != 0, live_kept = access(live, F_OK) == 0,
        odd_kept = access(TMP "/plain.txt.tmp.12x", F_OK) == 0;
    tu_check(s6 == ST_OK && dead_gone, "a dead writer's temporary is removed by the next commit", "%s %s", dead,
             dead_gone ? "removed" : "LEFT");
    tu_check(live_kept && odd_kept, "control: a running pid's temporary and a non-pid suffix are kept", "%s %s, .tmp.12x %s",
             live, live_kept ? "kept" : "REMOVED", odd_kept ? "kept" : "REMOVED");
    /* negative control: what a rename over them (the old writer) leaves, the checks above must see */
    tu_shell("echo x > " TMP "/r1 && echo x > " TMP "/r2 && ln -s target.txt " TMP "/link2 && mkfifo " TMP "/fifo2 && mv " TMP
             "/r1 " TMP "/link2 && mv " TMP "/r2 " TMP "/fifo2");
    tu_check(!is_link_to(TMP "/link2", "target.txt") && !is_fifo(TMP "/fifo2"),
             "negative control: a rename over a link and a FIFO is seen as replacing them", "link %s, fifo %s",
             is_link_to(TMP "/link2", "target.txt") ? "kept" : "replaced", is_fifo(TMP "/fifo2") ? "kept" : "replaced");
    return tu_exit();
}
