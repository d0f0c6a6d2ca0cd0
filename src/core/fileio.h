/* fileio.h — crash-safe file writes and whole-file reads.
 *
 * file_write_atomic writes `path.tmp`, fsyncs it, renames it over `path` and fsyncs the
 * directory (redis rdb.c's recipe): a crash leaves either the old file or the new one. */
#ifndef ST_CORE_FILEIO_H
#define ST_CORE_FILEIO_H

#include <stddef.h>

#include "core/status.h"

/* A file written in pieces with the same guarantee: `path.tmp.<pid>` is created, written,
 * fsynced, renamed over `path`, and the directory fsynced. Until commit, `path` is untouched;
 * abort (safe after commit or a failed open) removes the temporary; a commit also removes the
 * `path.tmp.<pid>` files of processes that no longer run (killed while writing it). A path that is a symbolic link
 * replaces the file it names (the link stays); a device, FIFO or socket (-o /dev/stdout) is written
 * in place (tmp ""), never replaced by a plain file; a directory is refused (ST_ERR_INPUT). */
typedef struct {
    int fd;
    char path[4096];
    char tmp[4200];
} FileAtomic;

Status file_atomic_open(FileAtomic *f, const char *path, Err *err);
Status file_atomic_write(FileAtomic *f, const void *buf, size_t n, Err *err);
Status file_atomic_commit(FileAtomic *f, Err *err);
void file_atomic_abort(FileAtomic *f);

/* Writes all n bytes of buf to the open descriptor fd (retrying short writes and EINTR), the one
 * write loop of the project. Errors (ST_ERR_RUNTIME): "<name>: write failed: <errno text>". */
Status file_write_fd(int fd, const void *buf, size_t n, const char *name, Err *err);

/* Writes the concatenation of n buffers. Errors name the path. */
Status file_write_atomic(const char *path, const void *const *bufs, const size_t *lens, int n, Err *err);

/* Reads a whole file into a malloc'd buffer with a terminating NUL (not counted in *len). */
Status file_read_all(const char *path, char **data, size_t *len, Err *err);

/* fsyncs the directory dir itself (after a rename or an unlink in it, so the entry is durable).
 * Errors (ST_ERR_RUNTIME): "<dir>: cannot open directory: ..." or "<dir>: fsync of the directory
 * failed: ...". */
Status file_fsync_dir(const char *dir, Err *err);

/* rm -rf path (no symlink is followed); 0 when done or path is absent, -1 otherwise. */
int file_rm_tree(const char *path);

/* An exclusive lock on the folder dir for this process (creating dir): a non-blocking flock on
 * dir/name, which then holds this pid (for the refusal's message only); *fd stays open until the
 * caller closes it or the process exits. Returns 1 when locked; 0 when another process holds it
 * (*fd = -1, holder gets its pid as text, "?" when unknown); -1 on an error (err: the folder cannot
 * be created, or the lock file opened or locked, with the reason). The one recipe of train's
 * --ckpt-dir and prepare's --out, so two writers of one folder are refused alike. */
int file_lock_dir(const char *dir, const char *name, int *fd, char *holder, size_t cap, Err *err);

/* 1 if path names a directory (symlinks followed), 0 otherwise. */
int file_is_dir(const char *path);

/* mkdir -p; ok if it exists. */
Status file_mkdirs(const char *dir, Err *err);

/* Bytes this process has read through read-like calls so far (/proc/self/io's rchar; the page cache
 * counts too); 0 where the kernel does not say. For checking how often a file set is read. */
unsigned long long file_process_read_bytes(void);

#endif
