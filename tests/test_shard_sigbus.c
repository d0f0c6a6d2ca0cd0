/* test_shard_sigbus.c — a shard (or loss mask) truncated while it is mapped: the read past its new
 * end is a bus error, which must end the process with one line naming the file and exit code
 * SHARD_BUS_EXIT, not "Bus error" and status 135 (data/shard.h).
 *
 * Oracle: the kernel and the header's documented text. Each case runs in a child (fork) whose
 * stderr goes to a file: the child maps a shard through shard_open (a mask through shard_mask_open),
 * truncates the file to 5000 bytes with truncate(2) and reads a token beyond the new end (on the main
 * thread, and on a second thread as the OpenMP readers do). The parent checks the exit status and
 * that stderr is exactly the line the header documents, built here from its text and the path.
 * Negative controls, run here: (1) in a child with a shard mapped, raise(SIGBUS) (an address in no
 * mapping) still kills the child by SIGBUS with nothing on stderr; (2) a plain mmap of another file,
 * truncated and read past its end the same way, also dies by SIGBUS silently: a real fault outside
 * the registered mappings keeps the default action (and the truncation really faults); (3) after
 * shard_close, a fault in a plain mapping is not blamed on the closed shard. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "data/shard.h"
#include "testutil.h"

#define TMP ST_BINARY_DIR "/test_shard_sigbus"
#define NTOK 100000 /* 201 KiB as uint16: far past the 5000 bytes left after truncation */
#define PROG "scaletrain train"

static uint32_t tokens[NTOK];

/* ST_SANITIZE builds: src/core/sanitize.c's ASan defaults leave SIGBUS alone (handle_sigbus=0), so
 * the controls see the default action, as in a plain build. */

static void write_shard(const char *path) {
    for (size_t i = 0; i < NTOK; i++) tokens[i] = (uint32_t)((i * 7919u) % 257u);
    ShardMeta m = {0};
    m.vocab_size = 257;
    Err e;
    if (shard_write(path, tokens, NTOK, &m, &e) != ST_OK) tu_check(0, "setup: shard_write", "%s", e.msg);
}

static volatile uint32_t sink;

typedef struct {
    const Shard *s;
    size_t i;
} ReadArg;
static void *read_token(void *arg) {
    ReadArg *a = arg;
    sink = shard_token(a->s, a->i);
    return NULL;
}

/* Child bodies: the process exit (or death) is the result. */
enum { READ_MAIN, READ_THREAD, READ_MASK, RAISE, PLAIN_MAP, AFTER_CLOSE };

static int child(int what, const char *path) {
    shard_set_program(PROG);
    Shard s;
    Err e;
    if (shard_open(&s, path, &e) != ST_OK) return 90;
    if (shard_token(&s, NTOK - 1) != tokens[NTOK - 1]) return 91; /* readable before the truncation */
    if (what == READ_MASK) {
        if (shard_mask_open(&s, &e) != ST_OK || !s.mask) return 92;
        char mp[600];
        shard_mask_path(mp, sizeof mp, path);
        if (truncate(mp, 100) != 0) return 93;
        sink = (uint32_t)shard_mask_bit(&s, NTOK - 1);
        return 0; /* not reached when the handler works */
    }
    if (what == RAISE) {
        raise(SIGBUS);
        return 0;
    }
    if (what == PLAIN_MAP || what == AFTER_CLOSE) {
        if (what == AFTER_CLOSE) shard_close(&s);
        char other[600];
        snprintf(other, sizeof other, "%s.plain", path);
        int fd = open(other, O_RDONLY);
        struct stat sb;
        if (fd < 0 || fstat(fd, &sb) != 0) return 94;
        const volatile uint8_t *m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        close(fd);
        if (m == MAP_FAILED) return 95;
        if (truncate(other, 5000) != 0) return 96;
        sink = m[sb.st_size - 1];
        return 0;
    }
    if (truncate(path, 5000) != 0) return 97;
    if (what == READ_THREAD) {
        pthread_t t;
        ReadArg a = {&s, NTOK - 1};
        if (pthread_create(&t, NULL, read_token, &a) != 0) return 98;
        pthread_join(t, NULL);
        return 0;
    }
    sink = shard_token(&s, NTOK - 1);
    return 0;
}

/* Runs child(what) on a fresh copy of the shard (and its mask) at TMP/name; returns its wait
 * status, its stderr in *err (caller frees). */
static int run(int what, const char *name, char *path, size_t cap, char **err) {
    snprintf(path, cap, TMP "/%s", name);
    write_shard(path);
    char extra[800];
    if (what == READ_MASK) {
        uint8_t bits[(NTOK + 7) / 8];
        memset(bits, 0xff, sizeof bits);
        if (NTOK % 8) bits[sizeof bits - 1] = (uint8_t)((1u << (NTOK % 8)) - 1);
        Err e;
        if (shard_mask_write(path, bits, NTOK, &e) != ST_OK) tu_check(0, "setup: shard_mask_write", "%s", e.msg);
    }
    if (what == PLAIN_MAP || what == AFTER_CLOSE) {
        snprintf(extra, sizeof extra, "cp '%s' '%s.plain'", path, path);
        tu_shell(extra);
    }
    fflush(stdout);
    pid_t k = fork();
    if (k == 0) {
        int fd = open(TMP "/stderr.txt", O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || dup2(fd, 2) < 0) _exit(99);
        _exit(child(what, path));
    }
    int st = 0;
    while (waitpid(k, &st, 0) < 0 && errno == EINTR) {}
    *err = tu_slurp(TMP "/stderr.txt");
    return st;
}

static void expect_line(const char *name, int what, const char *file, const char *kind) {
    char path[600], want[2048];
    char *err = NULL;
    int st = run(what, file, path, sizeof path, &err);
    char target[700];
    if (what == READ_MASK) shard_mask_path(target, sizeof target, path);
    else snprintf(target, sizeof target, "%s", path);
    snprintf(want, sizeof want,
             PROG ": %s: the %s changed or shrank while it was being read (a bus error reading its mapping); "
                  "expected %s files unchanged during a run\n", target, kind, kind);
    int ok = WIFEXITED(st) && WEXITSTATUS(st) == SHARD_BUS_EXIT && err && !strcmp(err, want);
    tu_check(ok, name, "status 0x%x (exit %d, signal %d), stderr \"%s\"", st, WIFEXITED(st) ? WEXITSTATUS(st) : -1,
             WIFSIGNALED(st) ? WTERMSIG(st) : 0, err ? err : "(unreadable)");
    free(err);
}

static void expect_signal(const char *name, int what, const char *file) {
    char path[600];
    char *err = NULL;
    int st = run(what, file, path, sizeof path, &err);
    int ok = WIFSIGNALED(st) && WTERMSIG(st) == SIGBUS && err && !*err;
    tu_check(ok, name, "status 0x%x (signal %d, exit %d), stderr \"%s\"", st, WIFSIGNALED(st) ? WTERMSIG(st) : 0,
             WIFEXITED(st) ? WEXITSTATUS(st) : -1, err ? err : "(unreadable)");
    free(err);
}

int main(void) {
    if (!tu_shell("rm -rf " TMP " && mkdir -p " TMP)) return tu_exit();
    tu_check(SHARD_BUS_EXIT != 0 && SHARD_BUS_EXIT != 128 + SIGBUS, "sigbus: exit code documented and not a signal's",
             "SHARD_BUS_EXIT %d", SHARD_BUS_EXIT);
    expect_line("sigbus: truncated shard read on the main thread: one line, exit SHARD_BUS_EXIT", READ_MAIN,
                "main.bin", "shard");
    expect_line("sigbus: truncated shard read on another thread: the same line", READ_THREAD, "thread.bin", "shard");
    expect_line("sigbus: truncated loss mask: the line names the mask file", READ_MASK, "masked.bin", "loss mask");
    expect_signal("control: raise(SIGBUS) with a shard mapped still dies by the signal, silently", RAISE, "raise.bin");
    expect_signal("control: a truncated plain mapping (no shard) dies by SIGBUS, silently", PLAIN_MAP, "plain.bin");
    expect_signal("control: after shard_close the shard's entry is gone (a plain mapping's fault dies by SIGBUS)",
                  AFTER_CLOSE, "closed.bin");
    tu_shell("rm -rf " TMP);
    return tu_exit();
}
