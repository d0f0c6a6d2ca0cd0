/* fileio.c — crash-safe writes (temporary, fsync, rename, fsync dir) and whole-file reads. */
#include "core/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static Status fsync_dir_of(const char *path, Err *err) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    const char *dir = dirname(buf);
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return err_set(err, ST_ERR_RUNTIME, "%s: cannot open directory: %s", dir, strerror(errno));
    int rc = fsync(fd);
    close(fd);
    if (rc != 0) return err_set(err, ST_ERR_RUNTIME, "%s: fsync of the directory failed: %s", dir, strerror(errno));
    return ST_OK;
}

Status file_write_atomic(const char *path, const void *const *bufs, const size_t *lens, int n, Err *err) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return err_set(err, ST_ERR_RUNTIME, "%s: cannot create: %s", tmp, strerror(errno));
    for (int i = 0; i < n; i++) {
        const char *p = bufs[i];
        size_t left = lens[i];
        while (left > 0) {
            ssize_t w = write(fd, p, left);
            if (w < 0) {
                if (errno == EINTR) continue;
                goto werr;
            }
            p += w, left -= (size_t)w;
        }
    }
    if (fsync(fd) != 0) goto werr;
    if (close(fd) != 0) {
        fd = -1;
        goto werr;
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return err_set(err, ST_ERR_RUNTIME, "%s: cannot rename from %s: %s", path, tmp, strerror(e));
    }
    return fsync_dir_of(path, err);
werr: {
    int e = errno;
    if (fd >= 0) close(fd);
    unlink(tmp);
    return err_set(err, ST_ERR_RUNTIME, "%s: write failed: %s", tmp, strerror(e));
}
}

Status file_read_all(const char *path, char **data, size_t *len, Err *err) {
    *data = NULL, *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return err_set(err, ST_ERR_INPUT, "%s: cannot open: %s", path, strerror(errno));
    if (fseek(f, 0, SEEK_END) != 0) goto rerr;
    long n = ftell(f);
    if (n < 0 || fseek(f, 0, SEEK_SET) != 0) goto rerr;
    char *buf = malloc((size_t)n + 1);
    if (!buf) {
        fclose(f);
        return err_set(err, ST_ERR_RUNTIME, "%s: out of memory reading %ld bytes", path, n);
    }
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        goto rerr;
    }
    buf[n] = '\0';
    fclose(f);
    *data = buf, *len = (size_t)n;
    return ST_OK;
rerr:
    fclose(f);
    return err_set(err, ST_ERR_INPUT, "%s: read failed", path);
}

Status file_mkdirs(const char *dir, Err *err) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", dir);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return err_set(err, ST_ERR_RUNTIME, "%s: cannot create directory: %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        return err_set(err, ST_ERR_RUNTIME, "%s: cannot create directory: %s", buf, strerror(errno));
    return ST_OK;
}
