/* fileio.c — crash-safe writes (temporary, fsync, rename, fsync dir) and whole-file reads. */
#include "core/fileio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

Status file_fsync_dir(const char *dir, Err *err) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return err_set(err, ST_ERR_RUNTIME, "%s: cannot open directory: %s", dir, strerror(errno));
    int rc = fsync(fd);
    int e = errno; /* close may change it */
    close(fd);
    if (rc != 0) return err_set(err, ST_ERR_RUNTIME, "%s: fsync of the directory failed: %s", dir, strerror(e));
    return ST_OK;
}

/* The directory of path (dirname), fsynced. */
static Status fsync_dir_of(const char *path, Err *err) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    return file_fsync_dir(dirname(buf), err);
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

int file_rm_tree(const char *path) {
    struct stat sb;
    if (lstat(path, &sb) != 0) return errno == ENOENT ? 0 : -1;
    return nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int file_is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

Status file_atomic_open(FileAtomic *f, const char *path, Err *err) {
    f->fd = -1, f->tmp[0] = '\0';
    snprintf(f->path, sizeof f->path, "%s", path);
    struct stat sb, lb;
    int there = stat(path, &sb) == 0;
    if (there && S_ISDIR(sb.st_mode)) return err_set(err, ST_ERR_INPUT, "%s: expected a file name, found a directory", path);
    if (there && !S_ISREG(sb.st_mode)) {
        /* A device, FIFO or socket (-o /dev/stdout, a pipe): written in place. A rename over it
         * would replace the device node itself with a plain file. */
        f->fd = open(path, O_WRONLY | O_TRUNC);
        if (f->fd < 0) return err_set(err, ST_ERR_RUNTIME, "%s: cannot open for writing: %s", path, strerror(errno));
        return ST_OK;
    }
    if (there && lstat(path, &lb) == 0 && S_ISLNK(lb.st_mode)) {
        /* A symbolic link to a file: the file it names is replaced, the link stays a link. */
        char real[PATH_MAX];
        if (!realpath(path, real)) return err_set(err, ST_ERR_RUNTIME, "%s: cannot resolve the link: %s", path, strerror(errno));
        snprintf(f->path, sizeof f->path, "%s", real);
    }
    if (snprintf(f->tmp, sizeof f->tmp, "%s.tmp.%ld", f->path, (long)getpid()) >= (int)sizeof f->tmp)
        return f->tmp[0] = '\0', err_set(err, ST_ERR_INPUT, "%s: path too long", path);
    f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (f->fd < 0) {
        int e = errno;
        f->tmp[0] = '\0';
        if (e == ENOENT || e == ENOTDIR) /* the path names no folder that exists: bad input */
            return err_set(err, ST_ERR_INPUT, "%s: cannot create: expected an existing folder for it, found none (%s)", path,
                           strerror(e));
        return err_set(err, ST_ERR_RUNTIME, "%s: cannot create (writing %s.tmp.%ld first): %s", path, path, (long)getpid(),
                       strerror(e));
    }
    return ST_OK;
}

Status file_write_fd(int fd, const void *buf, size_t n, const char *name, Err *err) {
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return err_set(err, ST_ERR_RUNTIME, "%s: write failed: %s", name, strerror(errno));
        }
        p += w, n -= (size_t)w;
    }
    return ST_OK;
}

Status file_atomic_write(FileAtomic *f, const void *buf, size_t n, Err *err) {
    return file_write_fd(f->fd, buf, n, f->tmp[0] ? f->tmp : f->path, err);
}

/* Removes path's temporaries (path.tmp.<pid>) left by writers that no longer run: a process killed
 * (SIGKILL, the OOM killer, a power loss) while writing leaves its temporary, as large as the file,
 * beside the output, and no later write of that path used to take it away. A pid that runs (this
 * process's own, or another writer's now, or a reused one) keeps its file. */
static void remove_dead_temporaries(const char *path) {
    char dbuf[4096], bbuf[4096];
    snprintf(dbuf, sizeof dbuf, "%s", path), snprintf(bbuf, sizeof bbuf, "%s", path);
    const char *dir = dirname(dbuf), *base = basename(bbuf);
    size_t bl = strlen(base);
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        const char *n = e->d_name, *q = n + bl + 5;
        if (strncmp(n, base, bl) || strncmp(n + bl, ".tmp.", 5) || !*q || strspn(q, "0123456789") != strlen(q)) continue;
        long pid = strtol(q, NULL, 10);
        struct stat sb;
        if (pid <= 0 || pid == (long)getpid() || fstatat(dirfd(d), n, &sb, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(sb.st_mode))
            continue;
        if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) unlinkat(dirfd(d), n, 0);
    }
    closedir(d);
}

Status file_atomic_commit(FileAtomic *f, Err *err) {
    if (!f->tmp[0]) { /* written in place (a device or FIFO): nothing to sync or rename */
        int rc = close(f->fd);
        f->fd = -1;
        return rc == 0 ? ST_OK : err_set(err, ST_ERR_RUNTIME, "%s: close failed: %s", f->path, strerror(errno));
    }
    if (fsync(f->fd) != 0) return err_set(err, ST_ERR_RUNTIME, "%s: fsync failed: %s", f->tmp, strerror(errno));
    int rc = close(f->fd);
    f->fd = -1;
    if (rc != 0) return err_set(err, ST_ERR_RUNTIME, "%s: close failed: %s", f->tmp, strerror(errno));
    if (rename(f->tmp, f->path) != 0)
        return err_set(err, ST_ERR_RUNTIME, "%s: cannot rename from %s: %s", f->path, f->tmp, strerror(errno));
    f->tmp[0] = '\0'; /* nothing left to remove */
    remove_dead_temporaries(f->path);
    return fsync_dir_of(f->path, err);
}

int file_lock_dir(const char *dir, const char *name, int *fd, char *holder, size_t cap, Err *err) {
    *fd = -1;
    if (cap) holder[0] = '\0';
    if (file_mkdirs(dir, err) != ST_OK) return -1;
    char path[4200];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
        return err_set(err, ST_ERR_INPUT, "%s: path too long", dir), -1;
    int f = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (f < 0) return err_set(err, ST_ERR_RUNTIME, "%s: cannot open the lock %s: %s", dir, path, strerror(errno)), -1;
    if (flock(f, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char pid[32] = "";
        ssize_t n = pread(f, pid, sizeof pid - 1, 0);
        close(f);
        if (e != EWOULDBLOCK) return err_set(err, ST_ERR_RUNTIME, "%s: cannot lock %s: %s", dir, path, strerror(e)), -1;
        if (n > 0) pid[n] = '\0', pid[strcspn(pid, "\n")] = '\0';
        snprintf(holder, cap, "%s", pid[0] ? pid : "?");
        return 0;
    }
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(f, 0) != 0 || pwrite(f, pid, (size_t)n, 0) != n) { /* the pid is for the message only */ }
    *fd = f;
    return 1;
}

void file_atomic_abort(FileAtomic *f) {
    if (f->fd >= 0) close(f->fd);
    f->fd = -1;
    if (f->tmp[0]) unlink(f->tmp);
    f->tmp[0] = '\0';
}

Status file_write_atomic(const char *path, const void *const *bufs, const size_t *lens, int n, Err *err) {
    FileAtomic f;
    Status st = file_atomic_open(&f, path, err);
    for (int i = 0; i < n && st == ST_OK; i++) st = file_atomic_write(&f, bufs[i], lens[i], err);
    if (st == ST_OK) st = file_atomic_commit(&f, err);
    file_atomic_abort(&f);
    return st;
}

/* A regular file is read at its size; a pipe or FIFO (`<(cmd)`, /dev/stdin) in chunks to its end. A
 * directory is refused by name (fopen opens one, and its "size" read as 2^63 - 1 bytes). */
Status file_read_all(const char *path, char **data, size_t *len, Err *err) {
    *data = NULL, *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return err_set(err, ST_ERR_INPUT, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0) goto rerr;
    if (S_ISDIR(sb.st_mode)) {
        fclose(f);
        return err_set(err, ST_ERR_INPUT, "%s: expected a file, found a directory", path);
    }
    size_t cap = S_ISREG(sb.st_mode) ? (size_t)sb.st_size + 1 : 1u << 16, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) {
            fclose(f);
            return err_set(err, ST_ERR_RUNTIME, "%s: out of memory reading %zu bytes", path, cap);
        }
        n += fread(buf + n, 1, cap - 1 - n, f);
        if (n < cap - 1) break; /* the end, or an error (below) */
        char *nb = realloc(buf, 2 * cap);
        if (!nb) free(buf);
        buf = nb, cap *= 2;
    }
    if (ferror(f)) {
        free(buf);
        goto rerr;
    }
    buf[n] = '\0';
    fclose(f);
    *data = buf, *len = n;
    return ST_OK;
rerr:
    fclose(f);
    return err_set(err, ST_ERR_INPUT, "%s: read failed", path);
}

/* A folder that cannot be made for a reason in the path the user gave (a file in the way, no
 * permission, a read-only or pseudo file system such as /proc) is bad input (exit 2); a full or
 * failing disk is a runtime error. */
static Status mkdir_failed(const char *path, int e, Err *err) {
    int input = e == ENOENT || e == ENOTDIR || e == EACCES || e == EPERM || e == EROFS || e == ENAMETOOLONG || e == ELOOP;
    return err_set(err, input ? ST_ERR_INPUT : ST_ERR_RUNTIME, "%s: cannot create directory: %s", path, strerror(e));
}

Status file_mkdirs(const char *dir, Err *err) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", dir);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) return mkdir_failed(buf, errno, err);
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) return mkdir_failed(buf, errno, err);
    /* EEXIST is also a file of that name: not the folder asked for */
    struct stat sb;
    if (stat(buf, &sb) == 0 && !S_ISDIR(sb.st_mode))
        return err_set(err, ST_ERR_INPUT, "%s: expected a directory, found a file", buf);
    return ST_OK;
}

unsigned long long file_process_read_bytes(void) {
    FILE *f = fopen("/proc/self/io", "r");
    unsigned long long v = 0;
    char line[128];
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "rchar: %llu", &v) == 1) break;
    if (f) fclose(f);
    return v;
}
