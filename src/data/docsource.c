/* docsource.c — streaming document reader: raw bytes -> (gzip | zstd | plain) -> lines ->
 * documents (contract in docsource.h).
 *
 * Contents: 1. UTF-8  2. raw input and decompression  3. lines  4. documents per format. */
#include "data/docsource.h"

#include "data/chat.h"
#include "data/jsonline.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>
#include <zlib.h>
#include <zstd.h>

#define RAW_CAP (1u << 20)
#define CHECK_BYTES (1u << 20) /* the binary check looks at the first MiB */

enum { COMP_PLAIN, COMP_GZIP, COMP_ZSTD };

struct DocReader {
    char path[4096];
    int fd;                     /* 0 for standard input */
    DocReaderOptions o;
    PrepareFormat fmt;
    const char *field;
    /* raw input */
    uint8_t *raw;
    size_t raw_pos, raw_len;
    int raw_eof;
    uint64_t raw_total;
    XXH3_state_t *xx;
    int comp, comp_known;
    z_stream zs;
    int zs_init, gz_end;        /* gz_end: the last member ended (a new one may follow) */
    ZSTD_DCtx *zd;
    size_t zret;                /* last ZSTD_decompressStream result: 0 = a frame is complete */
    /* decoded bytes: buf[pos, len) not yet consumed; buf[0] is decoded offset dec_off */
    uint8_t *buf;
    size_t cap, pos, len, scan;
    int dec_eof, checked;
    uint64_t dec_off;
    uint64_t lineno;            /* lines returned so far */
    /* current document */
    uint8_t *doc;
    size_t dlen, dcap;
    uint64_t doc_line, doc_off; /* first line (1-based) and decoded offset of the document */
    int wiki_seen, done;
    char *jstr;                 /* a JSON document's string, freed at the next call */
    uint8_t *chat;              /* chat: the serialized conversation */
    size_t chat_len, chat_cap;
    DocSkips skips;
    /* line pieces (o.line_pieces): the first document, held until a second one is found */
    int lp;                     /* LP_START, LP_SECOND, LP_PASS or LP_PIECES */
    uint8_t *first;             /* the first document (the buffer taken from doc) */
    size_t flen, fpos;          /* its length; the start of the next piece */
    const uint8_t *second;      /* the second document (in doc), returned at the next call */
    size_t slen;
    uint64_t pieces;            /* pieces returned */
};

enum { LP_START = 0, LP_SECOND, LP_PASS, LP_PIECES };

/* ================================================================== 1. UTF-8 */

size_t utf8_first_invalid(const uint8_t *p, size_t n) {
    size_t i = 0;
    while (i < n) {
        if (i + 8 <= n) { /* ASCII fast path */
            uint64_t w;
            memcpy(&w, p + i, 8);
            if (!(w & 0x8080808080808080ULL)) {
                i += 8;
                continue;
            }
        }
        uint8_t c = p[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t k;
        uint8_t lo = 0x80, hi = 0xBF; /* range of the second byte */
        if (c >= 0xC2 && c <= 0xDF) k = 1;
        else if (c >= 0xE0 && c <= 0xEF) k = 2, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
        else if (c >= 0xF0 && c <= 0xF4) k = 3, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
        else return i;
        if (i + k >= n) return i; /* a sequence cut by the end */
        if (p[i + 1] < lo || p[i + 1] > hi) return i;
        for (size_t j = 2; j <= k; j++)
            if ((p[i + j] & 0xC0) != 0x80) return i;
        i += k + 1;
    }
    return SIZE_MAX;
}

/* ================================================================== 2. raw input, decompression */

static Status read_raw(DocReader *r, Err *err) {
    if (r->raw_pos < r->raw_len) {
        memmove(r->raw, r->raw + r->raw_pos, r->raw_len - r->raw_pos);
        r->raw_len -= r->raw_pos;
    } else {
        r->raw_len = 0;
    }
    r->raw_pos = 0;
    while (!r->raw_eof && r->raw_len < RAW_CAP) {
        ssize_t k = read(r->fd, r->raw + r->raw_len, RAW_CAP - r->raw_len);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return err_set(err, ST_ERR_INPUT, "%s: read error after %llu bytes (%s)", r->path,
                                  (unsigned long long)r->raw_total, strerror(errno));
        if (k == 0) {
            r->raw_eof = 1;
            break;
        }
        XXH3_64bits_update(r->xx, r->raw + r->raw_len, (size_t)k);
        r->raw_len += (size_t)k;
        r->raw_total += (uint64_t)k;
        if (r->comp_known) break; /* after the sniff, one read at a time is enough */
    }
    return ST_OK;
}

/* Offset in the compressed file of the next unread raw byte. */
static unsigned long long raw_at(const DocReader *r) {
    return (unsigned long long)(r->raw_total - (r->raw_len - r->raw_pos));
}

/* One inflate step into buf[len, cap); at the end of the input, dec_eof or a truncation error.
 * Members follow each other (gzip -c a b > ab). */
static Status inflate_some(DocReader *r, size_t before, Err *err) {
    size_t av = r->raw_len - r->raw_pos, room = r->cap - r->len;
    if (r->gz_end && av > 0) { /* another member follows */
        inflateReset(&r->zs);
        r->gz_end = 0;
    }
    if (!r->gz_end) {
        r->zs.next_in = r->raw + r->raw_pos, r->zs.avail_in = (uInt)av;
        r->zs.next_out = r->buf + r->len, r->zs.avail_out = (uInt)room;
        int zr = inflate(&r->zs, Z_NO_FLUSH);
        r->raw_pos += av - r->zs.avail_in;
        r->len += room - r->zs.avail_out;
        if (zr == Z_STREAM_END) r->gz_end = 1;
        else if (zr != Z_OK && zr != Z_BUF_ERROR)
            return err_set(err, ST_ERR_INPUT, "%s: expected gzip data, found corrupt data near compressed byte %llu (%s)",
                           r->path, raw_at(r), r->zs.msg ? r->zs.msg : "inflate error");
    }
    if (r->len == before && r->raw_pos == r->raw_len && r->raw_eof) { /* nothing more will come */
        if (!r->gz_end)
            return err_set(err, ST_ERR_INPUT, "%s: expected a complete gzip stream, found it truncated after %llu "
                           "compressed bytes (%llu bytes decoded)", r->path, raw_at(r),
                           (unsigned long long)(r->dec_off + r->len));
        r->dec_eof = 1;
    }
    return ST_OK;
}

/* The same for zstd (frames may follow each other). */
static Status zstd_some(DocReader *r, size_t before, Err *err) {
    size_t av = r->raw_len - r->raw_pos, room = r->cap - r->len;
    if (av == 0 && r->raw_eof && r->zret == 0) { /* the last frame ended and nothing follows */
        r->dec_eof = 1;
        return ST_OK;
    }
    ZSTD_inBuffer in = {r->raw + r->raw_pos, av, 0};
    ZSTD_outBuffer out = {r->buf + r->len, room, 0};
    size_t zr = ZSTD_decompressStream(r->zd, &out, &in);
    if (ZSTD_isError(zr))
        return err_set(err, ST_ERR_INPUT, "%s: expected zstd data, found corrupt data near compressed byte %llu (%s)",
                       r->path, raw_at(r), ZSTD_getErrorName(zr));
    r->zret = zr;
    r->raw_pos += in.pos;
    r->len += out.pos;
    if (r->len == before && r->raw_pos == r->raw_len && r->raw_eof) { /* nothing more will come */
        if (r->zret != 0)
            return err_set(err, ST_ERR_INPUT, "%s: expected a complete zstd frame, found it truncated after %llu "
                           "compressed bytes (%llu bytes decoded)", r->path, raw_at(r),
                           (unsigned long long)(r->dec_off + r->len));
        r->dec_eof = 1;
    }
    return ST_OK;
}

/* gzip (1f 8b), zstd (28 b5 2f fd) or plain, from the first raw bytes; sets up the decoder. */
static Status sniff_compression(DocReader *r, Err *err) {
    const uint8_t *b = r->raw + r->raw_pos;
    size_t av = r->raw_len - r->raw_pos;
    r->comp = av >= 2 && b[0] == 0x1f && b[1] == 0x8b                                 ? COMP_GZIP
            : av >= 4 && b[0] == 0x28 && b[1] == 0xb5 && b[2] == 0x2f && b[3] == 0xfd ? COMP_ZSTD
                                                                                      : COMP_PLAIN;
    r->comp_known = 1;
    if (r->comp == COMP_GZIP) {
        if (inflateInit2(&r->zs, 15 + 16) != Z_OK) return err_set(err, ST_ERR_RUNTIME, "%s: zlib init failed", r->path);
        r->zs_init = 1;
    } else if (r->comp == COMP_ZSTD) {
        if (!(r->zd = ZSTD_createDCtx())) return err_set(err, ST_ERR_RUNTIME, "%s: zstd init failed", r->path);
        r->zret = 1; /* a frame has begun */
    }
    return ST_OK;
}

/* Appends decoded bytes to buf[len, cap); sets dec_eof at the end of the input. */
static Status decode_some(DocReader *r, Err *err) {
    size_t before = r->len;
    while (r->len == before && !r->dec_eof) {
        if (r->raw_pos == r->raw_len && !r->raw_eof) {
            Status st = read_raw(r, err);
            if (st) return st;
        }
        if (!r->comp_known) { /* sniff the compression from the first bytes */
            if (r->raw_len - r->raw_pos < 4 && !r->raw_eof) {
                Status st = read_raw(r, err);
                if (st) return st;
                continue;
            }
            Status st = sniff_compression(r, err);
            if (st) return st;
        }
        size_t av = r->raw_len - r->raw_pos, room = r->cap - r->len;
        if (r->comp == COMP_PLAIN) {
            if (av == 0 && r->raw_eof) {
                r->dec_eof = 1;
                break;
            }
            size_t k = av < room ? av : room;
            memcpy(r->buf + r->len, r->raw + r->raw_pos, k);
            r->len += k, r->raw_pos += k;
        } else {
            Status st = r->comp == COMP_GZIP ? inflate_some(r, before, err) : zstd_some(r, before, err);
            if (st) return st;
        }
    }
    const uint8_t *z = memchr(r->buf + before, 0, r->len - before);
    if (z)
        return err_set(err, ST_ERR_INPUT, "%s: expected text (UTF-8) or JSON Lines, found binary data (NUL byte at offset %llu)",
                       r->path, (unsigned long long)(r->dec_off + (size_t)(z - r->buf)));
    return ST_OK;
}

/* The first MiB: more than a quarter control bytes or invalid UTF-8 means binary, not text. */
static Status check_binary(DocReader *r, Err *err) {
    const uint8_t *b = r->buf;
    size_t m = r->len < CHECK_BYTES ? r->len : CHECK_BYTES, bad = 0;
    for (size_t i = 0; i < m;) {
        uint8_t c = b[i];
        if (c < 0x80) {
            bad += (c < 0x20 && !(c >= 9 && c <= 13) && c != 27) || c == 127;
            i++;
            continue;
        }
        size_t k = c >= 0xC2 && c <= 0xDF ? 1 : c >= 0xE0 && c <= 0xEF ? 2 : c >= 0xF0 && c <= 0xF4 ? 3 : 0;
        size_t j = 1;
        while (j <= k && i + j < m && (b[i + j] & 0xC0) == 0x80) j++;
        if (k == 0 || j != k + 1) bad++, i++;
        else i += j;
    }
    if (m >= 512 && bad * 4 > m)
        return err_set(err, ST_ERR_INPUT,
                       "%s: expected text (UTF-8) or JSON Lines, found binary data (%zu of the first %zu bytes are "
                       "control bytes or invalid UTF-8)", r->path, bad, m);
    return ST_OK;
}

/* ================================================================== 3. lines */

/* The next line, its '\n' included (the last line may lack it); *line = NULL at the end. */
static Status next_line(DocReader *r, const uint8_t **line, size_t *n, Err *err) {
    for (;;) {
        const uint8_t *nl = r->scan < r->len ? memchr(r->buf + r->scan, '\n', r->len - r->scan) : NULL;
        if (nl || (r->dec_eof && r->pos < r->len)) {
            size_t end = nl ? (size_t)(nl - r->buf) + 1 : r->len;
            *line = r->buf + r->pos;
            *n = end - r->pos;
            r->pos = r->scan = end;
            r->lineno++;
            return ST_OK;
        }
        if (r->dec_eof) {
            *line = NULL;
            *n = 0;
            return ST_OK;
        }
        r->scan = r->len;
        if (r->pos > 0) { /* drop consumed bytes */
            memmove(r->buf, r->buf + r->pos, r->len - r->pos);
            r->len -= r->pos, r->scan -= r->pos, r->dec_off += r->pos;
            r->pos = 0;
        }
        if (r->len == r->cap) { /* one line longer than the buffer */
            uint8_t *nb = realloc(r->buf, r->cap * 2);
            if (!nb) return err_set(err, ST_ERR_RUNTIME, "%s: out of memory (a line of over %zu bytes)", r->path, r->cap);
            r->buf = nb;
            r->cap *= 2;
        }
        Status st = decode_some(r, err);
        if (st) return st;
    }
}

/* ================================================================== 4. documents */

static int doc_append(DocReader *r, const uint8_t *p, size_t n) {
    if (r->dlen + n > r->dcap) {
        size_t nc = r->dcap ? r->dcap : 4096;
        while (nc < r->dlen + n) nc *= 2;
        uint8_t *nd = realloc(r->doc, nc);
        if (!nd) return -1;
        r->doc = nd;
        r->dcap = nc;
    }
    memcpy(r->doc + r->dlen, p, n);
    r->dlen += n;
    return 0;
}

static int ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

PrepareFormat docsource_format_of(const char *path, PrepareFormat format) {
    if (format != PREP_FORMAT_AUTO) return format;
    char base[4096];
    snprintf(base, sizeof base, "%s", path);
    size_t bl = strlen(base);
    if (ends_with(base, ".gz")) base[bl - 3] = 0;
    else if (ends_with(base, ".zst")) base[bl - 4] = 0;
    return ends_with(base, ".jsonl") || ends_with(base, ".json") ? PREP_FORMAT_JSONL
         : ends_with(base, ".tokens")                            ? PREP_FORMAT_WIKITEXT
                                                                 : PREP_FORMAT_TEXT;
}

Status docreader_open(DocReader **out, const char *path, const DocReaderOptions *o, Err *err) {
    *out = NULL;
    DocReader *r = calloc(1, sizeof *r);
    if (!r) return err_set(err, ST_ERR_RUNTIME, "out of memory");
    snprintf(r->path, sizeof r->path, "%s", strcmp(path, "-") ? path : "<stdin>");
    r->o = *o;
    r->field = o->field && o->field[0] ? o->field : "text";
    r->raw = malloc(RAW_CAP);
    r->cap = CHECK_BYTES + (1u << 16);
    r->buf = malloc(r->cap);
    r->xx = XXH3_createState();
    if (!r->raw || !r->buf || !r->xx) {
        docreader_close(r);
        return err_set(err, ST_ERR_RUNTIME, "out of memory");
    }
    XXH3_64bits_reset(r->xx);
    if (!strcmp(path, "-")) {
        r->fd = 0;
    } else if ((r->fd = open(path, O_RDONLY)) < 0) {
        Status st = err_set(err, ST_ERR_INPUT, "%s: expected a readable input file, found %s", path, strerror(errno));
        docreader_close(r);
        return st;
    }
    r->fmt = docsource_format_of(path, o->format);
    *out = r;
    return ST_OK;
}

/* An error at the reader's finding, ended by prepare's way out (`hint`, e.g. "--skip-bad skips such
 * lines") unless the caller has no such flag (DocReaderOptions.no_hints). */
static Status bad_input(const DocReader *r, Err *err, const char *hint, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static Status bad_input(const DocReader *r, Err *err, const char *hint, const char *fmt, ...) {
    char msg[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return r->o.no_hints ? err_set(err, ST_ERR_INPUT, "%s", msg) : err_set(err, ST_ERR_INPUT, "%s (%s)", msg, hint);
}

/* A document that is not valid UTF-8: an error, a counted skip (returns 1), or kept (0). */
static Status check_doc_utf8(DocReader *r, const uint8_t *p, size_t n, int *skip, Err *err) {
    *skip = 0;
    if (r->o.allow_invalid_utf8) return ST_OK;
    size_t bad = utf8_first_invalid(p, n);
    if (bad == SIZE_MAX) return ST_OK;
    if (r->o.skip_bad) {
        r->skips.bad_utf8++;
        *skip = 1;
        return ST_OK;
    }
    if (r->fmt == PREP_FORMAT_JSONL)
        return bad_input(r, err, "--skip-bad skips such records, --allow-invalid-utf8 keeps them", "%s:%llu: expected "
                         "valid UTF-8 in field \"%s\", found byte 0x%02x at offset %zu of its text", r->path,
                         (unsigned long long)r->doc_line, r->field, p[bad], bad);
    uint64_t line = r->doc_line;
    for (size_t i = 0; i < bad; i++) line += p[i] == '\n';
    return bad_input(r, err, "--skip-bad skips such documents, --allow-invalid-utf8 keeps them", "%s:%llu: expected valid "
                     "UTF-8 text, found byte 0x%02x at byte offset %llu", r->path, (unsigned long long)line, p[bad],
                     (unsigned long long)(r->doc_off + bad));
}

/* The next non-blank line (a JSON Lines record or a conversation), r->doc_line set to its number;
 * *l NULL at the end of the input. */
static Status next_record_line(DocReader *r, const uint8_t **l, size_t *ll, Err *err) {
    for (;;) {
        Status st = next_line(r, l, ll, err);
        if (st || !*l) return st;
        int blank = 1;
        for (size_t k = 0; k < *ll && blank; k++)
            blank = (*l)[k] == ' ' || (*l)[k] == '\t' || (*l)[k] == '\r' || (*l)[k] == '\n';
        if (blank) continue;
        r->doc_line = r->lineno;
        return ST_OK;
    }
}

static Status next_jsonl(DocReader *r, const uint8_t **doc, size_t *n, Err *err) {
    for (;;) {
        const uint8_t *l;
        size_t ll;
        Status st = next_record_line(r, &l, &ll, err);
        if (st) return st;
        if (!l) return ST_OK;
        size_t extra;
        cJSON *o = jsonline_parse((const char *)l, ll, &extra);
        cJSON *t = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, r->field) : NULL;
        /* JSON strings may hold NUL (\u0000), which cJSON's C string loses with all after it: refused
         * as a NUL byte is in text input */
        int nul = cJSON_IsString(t) && jsonline_has_nul((const char *)l, ll, o, t);
        const char *dup = jsonline_duplicate_key(o);
        if (!o || !cJSON_IsObject(o) || !cJSON_IsString(t) || nul || dup) {
            int json_bad = !o || !cJSON_IsObject(o) || dup;
            char found[160];
            if (dup)
                snprintf(found, sizeof found, "the key \"%.60s\" given twice in one object (which one is meant?)", dup);
            else if (extra != SIZE_MAX)
                snprintf(found, sizeof found, "more text after the object at byte %zu of the line (one object per "
                         "line)", extra + 1);
            else if (nul)
                snprintf(found, sizeof found, "a NUL character (\\u0000) in \"%s\"", r->field);
            else
                snprintf(found, sizeof found, !o ? "invalid JSON" : !cJSON_IsObject(o) ? "a JSON non-object"
                                              : !t ? "an object without \"%s\"" : "a non-string \"%s\"", r->field);
            cJSON_Delete(o);
            if (r->o.skip_bad) {
                if (json_bad) r->skips.bad_json++;
                else r->skips.missing_field++;
                continue;
            }
            return bad_input(r, err, "--skip-bad skips such lines", "%s:%llu: expected a JSON object with a string \"%s\" "
                             "field, found %s", r->path, (unsigned long long)r->lineno, r->field, found);
        }
        char *s = t->valuestring;
        t->valuestring = NULL; /* detach: freed at the next call */
        cJSON_Delete(o);
        size_t sl = strlen(s);
        int skip;
        if ((st = check_doc_utf8(r, (const uint8_t *)s, sl, &skip, err)) != ST_OK) {
            free(s);
            return st;
        }
        if (skip || sl == 0) {
            free(s);
            continue;
        }
        r->jstr = s;
        *doc = (const uint8_t *)s;
        *n = sl;
        return ST_OK;
    }
}

/* Chat: each non-blank line one conversation (chat.h), serialized into r->chat. */
static Status next_chat(DocReader *r, const uint8_t **doc, size_t *n, Err *err) {
    for (;;) {
        const uint8_t *l;
        size_t ll;
        Status st = next_record_line(r, &l, &ll, err);
        if (st) return st;
        if (!l) return ST_OK;
        char found[200];
        int rc = chat_parse((const char *)l, ll, &r->chat, &r->chat_len, &r->chat_cap, found, sizeof found);
        if (rc < 0) return err_set(err, ST_ERR_RUNTIME, "%s:%llu: out of memory", r->path, (unsigned long long)r->lineno);
        if (rc != CHAT_OK) {
            if (r->o.skip_bad) {
                if (rc == CHAT_BAD_JSON) r->skips.bad_json++;
                else if (rc == CHAT_NO_SCHEMA) r->skips.missing_field++;
                else r->skips.bad_chat++;
                continue;
            }
            return bad_input(r, err, "--skip-bad skips such lines", "%s:%llu: expected a chat object ({\"messages\": "
                             "[{\"role\", \"content\"}, ...]} or {\"prompt\", \"response\"}), found %s", r->path,
                             (unsigned long long)r->lineno, found);
        }
        if (!r->o.allow_invalid_utf8) {
            size_t bad = utf8_first_invalid(r->chat, r->chat_len);
            if (bad != SIZE_MAX) {
                if (r->o.skip_bad) {
                    r->skips.bad_utf8++;
                    continue;
                }
                return bad_input(r, err, "--skip-bad skips such lines, --allow-invalid-utf8 keeps them",
                                 "%s:%llu: expected valid UTF-8 in the messages, found byte 0x%02x", r->path,
                                 (unsigned long long)r->lineno, r->chat[bad]);
            }
        }
        *doc = r->chat;
        *n = r->chat_len;
        return ST_OK;
    }
}

/* Text and WikiText: lines accumulate into r->doc until a boundary. */
static Status next_lines_doc(DocReader *r, const uint8_t **doc, size_t *n, Err *err) {
    const char *sep = r->o.separator ? r->o.separator : "";
    size_t sl = strlen(sep);
    while (!r->done) {
        const uint8_t *l;
        size_t ll;
        uint64_t off = r->dec_off + r->pos;
        Status st = next_line(r, &l, &ll, err);
        if (st) return st;
        int emit = 0, keep_line = 1;
        if (!l) {
            r->done = 1;
            emit = 1, keep_line = 0;
        } else if (r->fmt == PREP_FORMAT_WIKITEXT) {
            size_t e = ll - (l[ll - 1] == '\n');
            /* a top-level heading is " = Title = " (one '=' each side, not " = = Sub = = ") */
            int head = e >= 7 && l[0] == ' ' && l[1] == '=' && l[2] == ' ' && l[3] != '=' && l[e - 1] == ' ' &&
                       l[e - 2] == '=' && l[e - 3] == ' ' && l[e - 4] != '=';
            if (head && r->wiki_seen) emit = 1; /* text before the first heading stays with the first article */
            if (head) r->wiki_seen = 1;
        } else {
            size_t e = ll - (l[ll - 1] == '\n');
            if (e && l[e - 1] == '\r') e--;
            if (e == sl && (sl == 0 || memcmp(l, sep, sl) == 0)) {
                emit = 1, keep_line = 0;
                /* the line end before the separator line belongs to no document: its '\n', and the
                 * '\r' before it in a CRLF text (else "doc\r" and "doc" would differ by the file's
                 * line ends) */
                if (r->dlen) r->dlen--;
                if (r->dlen && r->doc[r->dlen - 1] == '\r') r->dlen--;
            }
        }
        size_t dl = r->dlen;
        if (emit && dl) {
            int skip;
            if ((st = check_doc_utf8(r, r->doc, dl, &skip, err)) != ST_OK) return st;
            if (skip) dl = 0;
        }
        /* the line that triggered the emit starts the next document */
        int fresh = emit;
        if (emit) {
            *doc = r->doc, *n = dl;
            if (dl) {
                /* the document is returned from r->doc: keep the line for the next call */
                if (keep_line) {
                    r->pos -= ll; /* unread the heading line (still in buf) */
                    r->scan = r->pos;
                    r->lineno--;
                    r->wiki_seen = 1;
                }
                r->dlen = 0;
                r->doc_line = 0;
                return ST_OK;
            }
            r->dlen = 0;
        }
        if (keep_line && l) {
            if (r->dlen == 0 || fresh) r->doc_line = r->lineno, r->doc_off = off;
            if (doc_append(r, l, ll)) return err_set(err, ST_ERR_RUNTIME, "%s: out of memory (a document of %zu bytes)",
                                                     r->path, r->dlen);
        }
    }
    *doc = NULL;
    *n = 0;
    return ST_OK;
}

/* Line pieces (docsource.h): the first document is held while the next one is read; when there is
 * none, the first is returned piece by piece (each the first line end >= N bytes on, unless fewer
 * than N bytes would be left). */
static Status next_piece_doc(DocReader *r, const uint8_t **doc, size_t *n, Err *err) {
    Status st;
    switch (r->lp) {
    case LP_START: {
        const uint8_t *d;
        size_t dn;
        if ((st = next_lines_doc(r, &d, &dn, err)) != ST_OK) return st;
        if (!d) {
            r->lp = LP_PASS;
            return ST_OK;
        }
        r->first = r->doc, r->flen = dn, r->fpos = 0; /* take the buffer: the second one reads into a new one */
        r->doc = NULL, r->dlen = r->dcap = 0;
        if ((st = next_lines_doc(r, &d, &dn, err)) != ST_OK) return st;
        if (d) { /* several documents: the input is read as usual */
            r->second = d, r->slen = dn, r->lp = LP_SECOND;
            *doc = r->first, *n = r->flen;
            return ST_OK;
        }
        r->lp = LP_PIECES;
    } /* fall through */
    case LP_PIECES: {
        size_t a = r->fpos, e = r->flen, np = r->o.line_pieces;
        if (a == e) return ST_OK;
        if (e - a >= 2 * np) {
            const uint8_t *nl = memchr(r->first + a + np - 1, '\n', e - (a + np - 1));
            size_t c = nl ? (size_t)(nl - r->first) + 1 : e;
            if (e - c >= np) e = c;
        }
        *doc = r->first + a, *n = e - a;
        r->fpos = e;
        r->pieces++;
        return ST_OK;
    }
    case LP_SECOND:
        *doc = r->second, *n = r->slen;
        r->lp = LP_PASS;
        return ST_OK;
    default:
        return next_lines_doc(r, doc, n, err);
    }
}

Status docreader_next(DocReader *r, const uint8_t **doc, size_t *n, Err *err) {
    *doc = NULL;
    *n = 0;
    free(r->jstr);
    r->jstr = NULL;
    if (!r->checked) { /* decode the first MiB (or all) and look at it before any document */
        while (!r->dec_eof && r->len < CHECK_BYTES) {
            Status st = decode_some(r, err);
            if (st) return st;
        }
        r->checked = 1;
        Status st = check_binary(r, err);
        if (st) return st;
        /* A UTF-8 byte order mark (EF BB BF) at the very start is not text: kept, it became tokens
         * and hid a separator or heading on the first line. One only, as editors write one. (JSON
         * lines had it skipped by cJSON already.) Offsets still count it: they are the file's. */
        if (r->len - r->pos >= 3 && !memcmp(r->buf + r->pos, "\xEF\xBB\xBF", 3)) r->pos += 3, r->scan = r->pos;
    }
    if (r->fmt == PREP_FORMAT_JSONL) return next_jsonl(r, doc, n, err);
    if (r->fmt == PREP_FORMAT_CHAT) return next_chat(r, doc, n, err);
    if (r->fmt == PREP_FORMAT_TEXT && r->o.line_pieces && !(r->o.separator && r->o.separator[0]))
        return next_piece_doc(r, doc, n, err);
    return next_lines_doc(r, doc, n, err);
}

uint64_t docreader_raw_bytes(const DocReader *r) { return r->raw_total; }
uint64_t docreader_checksum(const DocReader *r) { return XXH3_64bits_digest(r->xx); }
const DocSkips *docreader_skips(const DocReader *r) { return &r->skips; }
uint64_t docreader_line_pieces(const DocReader *r) { return r->pieces; }

void docreader_close(DocReader *r) {
    if (!r) return;
    if (r->fd > 0) close(r->fd);
    if (r->zs_init) inflateEnd(&r->zs);
    if (r->zd) ZSTD_freeDCtx(r->zd);
    if (r->xx) XXH3_freeState(r->xx);
    free(r->raw);
    free(r->buf);
    free(r->doc);
    free(r->first);
    free(r->jstr);
    free(r->chat);
    free(r);
}
