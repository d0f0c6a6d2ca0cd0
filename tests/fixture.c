/* fixture.c — reader for STFX0001 reference fixtures (format in fixture.h). */
#include "fixture.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const unsigned char *p;
    size_t len, off;
} Cursor;

static void set_err(char *err, size_t errlen, const char *path, const char *fmt, ...) {
    if (!err || errlen == 0) return;
    int k = snprintf(err, errlen, "fixture %s: ", path);
    if (k < 0 || (size_t)k >= errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + k, errlen - (size_t)k, fmt, ap);
    va_end(ap);
}

static int take(Cursor *c, void *dst, size_t n) {
    if (c->len - c->off < n) return -1;
    memcpy(dst, c->p + c->off, n);
    c->off += n;
    return 0;
}

static uint32_t le32(const unsigned char b[4]) {
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static uint64_t le64(const unsigned char b[8]) {
    return (uint64_t)le32(b) | (uint64_t)le32(b + 4) << 32;
}

static int take_u32(Cursor *c, uint32_t *v) {
    unsigned char b[4];
    if (take(c, b, 4)) return -1;
    *v = le32(b);
    return 0;
}

static int take_u64(Cursor *c, uint64_t *v) {
    unsigned char b[8];
    if (take(c, b, 8)) return -1;
    *v = le64(b);
    return 0;
}

static int read_file(const char *path, unsigned char **buf, size_t *len, char *err, size_t errlen) {
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        set_err(err, errlen, path, "cannot open");
        return -1;
    }
    size_t cap = 1 << 16, n = 0;
    unsigned char *b = malloc(cap);
    for (;;) {
        if (!b) {
            fclose(fp);
            set_err(err, errlen, path, "out of memory");
            return -1;
        }
        n += fread(b + n, 1, cap - n, fp);
        if (n < cap) break;
        unsigned char *nb = realloc(b, cap * 2);
        if (!nb) free(b);
        b = nb;
        cap *= 2;
    }
    int bad = ferror(fp);
    fclose(fp);
    if (bad) {
        free(b);
        set_err(err, errlen, path, "read error");
        return -1;
    }
    *buf = b;
    *len = n;
    return 0;
}

static int parse(Fixture *f, const char *path, const unsigned char *buf, size_t len, char *err,
                 size_t errlen) {
    Cursor c = {buf, len, 0};
    char magic[8];
    if (take(&c, magic, 8) || memcmp(magic, "STFX0001", 8) != 0) {
        set_err(err, errlen, path, "bad magic (expected \"STFX0001\")");
        return -1;
    }
    uint32_t count;
    if (take_u32(&c, &count)) {
        set_err(err, errlen, path, "truncated in header (%zu bytes)", len);
        return -1;
    }
    /* every entry needs at least 4+1+4+4+8 bytes: bound count before allocating */
    if (count > (len - c.off) / 21) {
        set_err(err, errlen, path, "truncated: entry count %u exceeds file size %zu", count, len);
        return -1;
    }
    f->entries = calloc(count ? count : 1, sizeof(FixtureEntry));
    if (!f->entries) {
        set_err(err, errlen, path, "out of memory");
        return -1;
    }
    for (uint32_t i = 0; i < count; i++) {
        FixtureEntry *e = &f->entries[i];
        uint32_t nlen, dtype, ndim;
        if (take_u32(&c, &nlen)) goto trunc;
        if (nlen == 0 || nlen >= sizeof e->name) {
            set_err(err, errlen, path, "entry %u: bad name length %u", i, nlen);
            return -1;
        }
        if (take(&c, e->name, nlen)) goto trunc;
        e->name[nlen] = '\0';
        if (memchr(e->name, '\0', nlen)) {
            set_err(err, errlen, path, "entry %u: NUL in name", i);
            return -1;
        }
        if (take_u32(&c, &dtype) || take_u32(&c, &ndim)) goto trunc;
        if (dtype != FIXTURE_F64 && dtype != FIXTURE_I32) {
            set_err(err, errlen, path, "entry '%s': bad dtype %u", e->name, dtype);
            return -1;
        }
        if (ndim < 1 || ndim > 4) {
            set_err(err, errlen, path, "entry '%s': bad ndim %u", e->name, ndim);
            return -1;
        }
        e->dtype = (int)dtype;
        e->ndim = (int)ndim;
        size_t esz = dtype == FIXTURE_F64 ? 8 : 4;
        uint64_t numel = 1;
        for (uint32_t d = 0; d < ndim; d++) {
            if (take_u64(&c, &e->dims[d])) goto trunc;
            if (e->dims[d] != 0 && numel > (uint64_t)(len / esz) / e->dims[d]) {
                set_err(err, errlen, path, "entry '%s': truncated (dims exceed file size)", e->name);
                return -1;
            }
            numel *= e->dims[d];
        }
        e->numel = (size_t)numel;
        size_t nbytes = e->numel * esz;
        if (len - c.off < nbytes) {
            set_err(err, errlen, path, "entry '%s': truncated (needs %zu data bytes, %zu left)",
                    e->name, nbytes, len - c.off);
            return -1;
        }
        e->data = malloc(nbytes ? nbytes : 1);
        if (!e->data) {
            set_err(err, errlen, path, "out of memory");
            return -1;
        }
        f->n = (int)i + 1; /* so fixture_free releases what was allocated so far */
        if (dtype == FIXTURE_F64) {
            uint64_t *dst = e->data;
            for (size_t k = 0; k < e->numel; k++) dst[k] = le64(c.p + c.off + 8 * k);
        } else {
            uint32_t *dst = e->data;
            for (size_t k = 0; k < e->numel; k++) dst[k] = le32(c.p + c.off + 4 * k);
        }
        c.off += nbytes;
        for (uint32_t j = 0; j < i; j++)
            if (strcmp(f->entries[j].name, e->name) == 0) {
                set_err(err, errlen, path, "duplicate entry '%s'", e->name);
                return -1;
            }
        continue;
    trunc:
        set_err(err, errlen, path, "truncated in entry %u header (offset %zu of %zu bytes)", i,
                c.off, len);
        return -1;
    }
    if (c.off != len) {
        set_err(err, errlen, path, "%zu trailing bytes after %u entries", len - c.off, count);
        return -1;
    }
    return 0;
}

int fixture_load(Fixture *f, const char *path, char *err, size_t errlen) {
    f->entries = NULL;
    f->n = 0;
    if (err && errlen) err[0] = '\0';
    unsigned char *buf;
    size_t len;
    if (read_file(path, &buf, &len, err, errlen)) return -1;
    int rc = parse(f, path, buf, len, err, errlen);
    free(buf);
    if (rc) fixture_free(f);
    return rc;
}

const FixtureEntry *fixture_get(const Fixture *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->entries[i].name, name) == 0) return &f->entries[i];
    return NULL;
}

void fixture_free(Fixture *f) {
    if (f->entries)
        for (int i = 0; i < f->n; i++) free(f->entries[i].data);
    free(f->entries);
    f->entries = NULL;
    f->n = 0;
}
