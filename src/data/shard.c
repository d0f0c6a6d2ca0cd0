/* shard.c — llm.c-format token shards: crash-safe write, mmap'ed validated read (see shard.h). */
#include "data/shard.h"

#include "core/fileio.h"

#include <errno.h>
#include <glob.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void wr32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8), p[2] = (uint8_t)(v >> 16), p[3] = (uint8_t)(v >> 24);
}

/* ------------------------------------------------------------------ SIGBUS on a mapping (shard.h)
 * A table of the mapped shard and mask files: [lo, hi) and the line to print, written under a mutex
 * at map and unmap time, read by the handler without locks (lo published last, with release order;
 * 0 = a free slot). The handler uses only atomic loads, write(2), sigaction, raise and _exit. */
#define BUS_SLOTS 16384
typedef struct {
    _Atomic uintptr_t lo; /* first byte of the mapping; 0: free */
    uintptr_t hi;         /* one past its last byte */
    char *msg;            /* the whole line, newline included */
    size_t len;
} BusSlot;
static BusSlot bus_slots[BUS_SLOTS];
static atomic_size_t bus_used;                  /* slots [0, bus_used) may be taken */
static pthread_mutex_t bus_mu = PTHREAD_MUTEX_INITIALIZER;
static struct sigaction bus_old;                /* the disposition before ours */
static int bus_installed;
static char bus_prog[128] = "scaletrain";

void shard_set_program(const char *prog) {
    pthread_mutex_lock(&bus_mu);
    snprintf(bus_prog, sizeof bus_prog, "%s", prog && *prog ? prog : "scaletrain");
    pthread_mutex_unlock(&bus_mu);
}

static void on_sigbus(int sig, siginfo_t *si, void *uc) {
    (void)uc;
    /* si_code > 0: raised by the kernel for a fault at si_addr (kill/raise/tgkill give <= 0, and
     * their si_addr is no address) */
    if (si && si->si_code > 0) {
        uintptr_t a = (uintptr_t)si->si_addr;
        size_t n = atomic_load_explicit(&bus_used, memory_order_acquire);
        for (size_t i = 0; i < n && i < BUS_SLOTS; i++) {
            uintptr_t lo = atomic_load_explicit(&bus_slots[i].lo, memory_order_acquire);
            if (!lo || a < lo || a >= bus_slots[i].hi) continue;
            const char *p = bus_slots[i].msg;
            size_t left = bus_slots[i].len;
            while (left > 0) {
                ssize_t w = write(STDERR_FILENO, p, left);
                if (w < 0 && errno == EINTR) continue;
                if (w <= 0) break;
                p += w, left -= (size_t)w;
            }
            _exit(SHARD_BUS_EXIT);
        }
    }
    /* Not ours: what would have happened without this handler. The previous disposition again
     * (the default, unless something such as Open MPI's backtrace printer had one); a fault repeats
     * when the handler returns, a sent signal is sent again. */
    sigaction(sig, &bus_old, NULL);
    if (!si || si->si_code <= 0) raise(sig);
}

/* Registers [map, map + bytes) as the mapping of `path` (what: "shard" or "loss mask"), installing
 * the handler the first time. No slot or no memory for the line: the mapping stays unregistered
 * (a bus error in it then ends the process as it would without this). */
static void bus_register(const void *map, size_t bytes, const char *path, const char *what) {
    pthread_mutex_lock(&bus_mu);
    if (!bus_installed) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_sigbus;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK; /* an alternate stack where the thread has one (train/stop.c) */
        sigemptyset(&sa.sa_mask);
        if (sigaction(SIGBUS, &sa, &bus_old) == 0) bus_installed = 1;
    }
    size_t n = atomic_load(&bus_used), i = 0;
    while (i < n && atomic_load(&bus_slots[i].lo)) i++;
    if (bus_installed && i < BUS_SLOTS) {
        char line[4608]; /* the prefix (128) and a path up to PATH_MAX fit */
        int len = snprintf(line, sizeof line, "%s: %s: the %s changed or shrank while it was being read (a bus error "
                           "reading its mapping); expected %s files unchanged during a run\n", bus_prog, path, what, what);
        char *msg = len > 0 && len < (int)sizeof line ? strdup(line) : NULL;
        if (msg) {
            bus_slots[i].hi = (uintptr_t)map + bytes;
            bus_slots[i].msg = msg;
            bus_slots[i].len = (size_t)len;
            atomic_store_explicit(&bus_slots[i].lo, (uintptr_t)map, memory_order_release);
            if (i == n) atomic_store_explicit(&bus_used, n + 1, memory_order_release);
        }
    }
    pthread_mutex_unlock(&bus_mu);
}

/* Before munmap: the slot of the mapping at map is freed. */
static void bus_unregister(const void *map) {
    pthread_mutex_lock(&bus_mu);
    size_t n = atomic_load(&bus_used);
    for (size_t i = 0; i < n; i++)
        if (atomic_load(&bus_slots[i].lo) == (uintptr_t)map) {
            atomic_store_explicit(&bus_slots[i].lo, 0, memory_order_release);
            free(bus_slots[i].msg);
            bus_slots[i].msg = NULL, bus_slots[i].len = 0, bus_slots[i].hi = 0;
            break;
        }
    while (n > 0 && !atomic_load(&bus_slots[n - 1].lo)) n--;
    atomic_store_explicit(&bus_used, n, memory_order_release);
    pthread_mutex_unlock(&bus_mu);
}

void shard_close(Shard *s) {
    if (s->map) bus_unregister(s->map), munmap(s->map, s->map_bytes);
    if (s->mask_map) bus_unregister(s->mask_map), munmap(s->mask_map, s->mask_map_bytes);
    s->mask_map = NULL;
    s->mask_map_bytes = 0;
    s->mask = NULL;
    s->mask_trained = 0;
    s->map = NULL;
    s->map_bytes = 0;
    s->tokens = NULL;
    s->ntok = 0;
}

/* Whether the first bytes of a file read as text (no NUL, control characters only as whitespace):
 * a token shard's header starts with its magic, whose bytes hold a NUL. */
static int looks_like_text(const uint8_t *b, size_t n) {
    if (n == 0) return 0;
    for (size_t i = 0; i < n; i++)
        if (b[i] == 0 || (b[i] < 32 && b[i] != '\n' && b[i] != '\r' && b[i] != '\t' && b[i] != '\f')) return 0;
    return 1;
}

/* The fix for a file that is not a shard but text: prepare it first. */
#define TEXT_HINT ": make token shards from it first with `scaletrain prepare --out DIR %s` and pass --data 'DIR/train_*.bin'"

/* A directory given where shards are expected: the glob to give instead (the shards prepare wrote
 * in it when there are some). */
static Status refuse_directory(const char *path, Err *err) {
    char pat[1100];
    const char *pick = "*.bin";
    static const char *const pref[] = {"train_*.bin", "val_*.bin", "*.bin"};
    for (size_t i = 0; i < sizeof pref / sizeof pref[0]; i++) {
        glob_t gl;
        snprintf(pat, sizeof pat, "%s/%s", path, pref[i]);
        int rc = glob(pat, 0, NULL, &gl);
        if (rc == 0) globfree(&gl);
        if (rc == 0) {
            pick = pref[i];
            break;
        }
    }
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    return err_set(err, ST_ERR_INPUT,
                   "%s: a directory, expected a token shard or a glob of them: give '%.*s/%s' (quoted, so that "
                   "scaletrain expands it)", path, (int)n, path, pick);
}

Status shard_open(Shard *s, const char *path, Err *err) {
    memset(s, 0, sizeof *s);
    snprintf(s->path, sizeof s->path, "%s", path);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return err_set(err, ST_ERR_INPUT, "%s: expected a token shard, found %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        close(fd);
        return refuse_directory(path, err);
    }
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return err_set(err, ST_ERR_INPUT, "%s: expected a regular file", path);
    }
    /* The first bytes tell text from a shard, for the message of either check below. */
    uint8_t head[512];
    ssize_t got = pread(fd, head, sizeof head, 0);
    int text = got > 0 && looks_like_text(head, (size_t)got);
    size_t hdr = SHARD_HEADER_INTS * 4;
    if ((size_t)sb.st_size < hdr) {
        close(fd);
        if (text)
            return err_set(err, ST_ERR_INPUT, "%s: expected a token shard, found %lld bytes of text" TEXT_HINT, path,
                           (long long)sb.st_size, path);
        return err_set(err, ST_ERR_INPUT, "%s: expected at least a %zu-byte shard header, found %lld bytes", path,
                       hdr, (long long)sb.st_size);
    }
    void *map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return err_set(err, ST_ERR_RUNTIME, "%s: mmap failed (%s)", path, strerror(errno));
    bus_register(map, (size_t)sb.st_size, path, "shard");
    s->map = map;
    s->map_bytes = (size_t)sb.st_size;
    const uint8_t *h = map;
    uint32_t magic = rd32(h), version = rd32(h + 4), count = rd32(h + 8);
    if (magic == SHARD_MAGIC_U16 && version == SHARD_VERSION_U16) s->elem_bytes = 2;
    else if (magic == SHARD_MAGIC_U32 && version == SHARD_VERSION_U32) s->elem_bytes = 4;
    else {
        shard_close(s);
        if (text)
            return err_set(err, ST_ERR_INPUT, "%s: expected a token shard (magic %d or %d), found text" TEXT_HINT, path,
                           SHARD_MAGIC_U16, SHARD_MAGIC_U32, path);
        return err_set(err, ST_ERR_INPUT,
                       "%s: expected magic/version %d/%d (uint16) or %d/%d (uint32), found %u/%u", path,
                       SHARD_MAGIC_U16, SHARD_VERSION_U16, SHARD_MAGIC_U32, SHARD_VERSION_U32, magic, version);
    }
    size_t want = hdr + (size_t)count * (size_t)s->elem_bytes;
    if (want != s->map_bytes) {
        shard_close(s);
        return err_set(err, ST_ERR_INPUT, "%s: header says %u tokens (%zu bytes), found a file of %lld bytes", path,
                       count, want, (long long)sb.st_size);
    }
    s->ntok = count;
    s->tokens = h + hdr;
    s->meta.tokenizer_hash = (uint64_t)rd32(h + 12) | (uint64_t)rd32(h + 16) << 32;
    s->meta.source_bytes = (uint64_t)rd32(h + 20) | (uint64_t)rd32(h + 24) << 32;
    s->meta.vocab_size = rd32(h + 28);
    s->meta.eot_plus1 = rd32(h + 32);
    s->meta.version = version;
    /* header words a writer of this format never produces: a damaged or foreign header (llm.c's writers
     * and ours leave words 9..255 zero, docs/formats.md) */
    for (int i = 9; i < SHARD_HEADER_INTS; i++)
        if (rd32(h + 4 * i) != 0) {
            uint32_t v = rd32(h + 4 * i);
            shard_close(s);
            return err_set(err, ST_ERR_INPUT, "%s: expected 0 in the reserved header word %d, found %u (a damaged or "
                           "foreign header)", path, i, v);
        }
    if (s->meta.vocab_size > (1u << 30) || (s->meta.eot_plus1 && s->meta.vocab_size && s->meta.eot_plus1 > s->meta.vocab_size)) {
        uint32_t v = s->meta.vocab_size, e = s->meta.eot_plus1;
        shard_close(s);
        if (v > (1u << 30))
            return err_set(err, ST_ERR_INPUT, "%s: expected a vocabulary size of at most 2^30 in header word 7, found %u",
                           path, v);
        return err_set(err, ST_ERR_INPUT, "%s: expected an EOT id below the vocabulary size %u (header words 7, 8), "
                       "found %u", path, v, e - 1);
    }
    return ST_OK;
}

size_t shard_find_token_at_least(const Shard *s, uint32_t vocab) {
    for (size_t i = 0; i < s->ntok; i++)
        if (shard_token(s, i) >= vocab) return i;
    return SIZE_MAX;
}

Status shard_write(const char *path, const uint32_t *tokens, size_t n, const ShardMeta *meta, Err *err) {
    if (n > UINT32_MAX / 4) /* llm.c's header holds the count in an int32 */
        return err_set(err, ST_ERR_INPUT, "%s: expected at most %u tokens per shard, found %zu", path,
                       UINT32_MAX / 4, n);
    int wide = meta && meta->vocab_size > 65536;
    size_t big = SIZE_MAX;
    for (size_t i = 0; i < n && big == SIZE_MAX; i++)
        if (tokens[i] > 65535) big = i;
    uint32_t version = meta ? meta->version : 0;
    if (version == SHARD_VERSION_U16 && (wide || big != SIZE_MAX)) {
        if (wide)
            return err_set(err, ST_ERR_INPUT,
                           "%s: shard version 1 holds uint16 ids, but the vocabulary has %u ids (expected <= 65536; "
                           "use version 7)", path, meta->vocab_size);
        return err_set(err, ST_ERR_INPUT, "%s: shard version 1 holds uint16 ids, found id %u at position %zu "
                       "(use version 7)", path, tokens[big], big);
    }
    if (version != 0 && version != SHARD_VERSION_U16 && version != SHARD_VERSION_U32)
        return err_set(err, ST_ERR_INPUT, "%s: expected shard version 1 or 7, found %u", path, version);
    wide = version == SHARD_VERSION_U32 || wide || big != SIZE_MAX;
    uint8_t hdr[SHARD_HEADER_INTS * 4];
    memset(hdr, 0, sizeof hdr);
    wr32(hdr, wide ? SHARD_MAGIC_U32 : SHARD_MAGIC_U16);
    wr32(hdr + 4, wide ? SHARD_VERSION_U32 : SHARD_VERSION_U16);
    wr32(hdr + 8, (uint32_t)n);
    if (meta) {
        wr32(hdr + 12, (uint32_t)meta->tokenizer_hash);
        wr32(hdr + 16, (uint32_t)(meta->tokenizer_hash >> 32));
        wr32(hdr + 20, (uint32_t)meta->source_bytes);
        wr32(hdr + 24, (uint32_t)(meta->source_bytes >> 32));
        wr32(hdr + 28, meta->vocab_size);
        wr32(hdr + 32, meta->eot_plus1);
    }
    FileAtomic f;
    Status st = file_atomic_open(&f, path, err);
    if (st != ST_OK) {
        file_atomic_abort(&f);
        if (err) err->status = ST_ERR_INPUT; /* an output path that cannot be created is bad input */
        return ST_ERR_INPUT;
    }
    uint8_t buf[1 << 16];
    size_t per = sizeof buf / (wide ? 4 : 2);
    st = file_atomic_write(&f, hdr, sizeof hdr, err);
    for (size_t i = 0; i < n && st == ST_OK; i += per) {
        size_t k = n - i < per ? n - i : per;
        for (size_t j = 0; j < k; j++) {
            uint32_t v = tokens[i + j];
            if (wide) wr32(buf + 4 * j, v);
            else buf[2 * j] = (uint8_t)v, buf[2 * j + 1] = (uint8_t)(v >> 8);
        }
        st = file_atomic_write(&f, buf, k * (wide ? 4 : 2), err);
    }
    if (st == ST_OK) st = file_atomic_commit(&f, err);
    file_atomic_abort(&f);
    return st;
}

/* ------------------------------------------------------------------ streaming writer */

static void header_bytes(uint8_t *hdr, int wide, size_t n, const ShardMeta *m) {
    memset(hdr, 0, SHARD_HEADER_INTS * 4);
    wr32(hdr, wide ? SHARD_MAGIC_U32 : SHARD_MAGIC_U16);
    wr32(hdr + 4, wide ? SHARD_VERSION_U32 : SHARD_VERSION_U16);
    wr32(hdr + 8, (uint32_t)n);
    wr32(hdr + 12, (uint32_t)m->tokenizer_hash);
    wr32(hdr + 16, (uint32_t)(m->tokenizer_hash >> 32));
    wr32(hdr + 20, (uint32_t)m->source_bytes);
    wr32(hdr + 24, (uint32_t)(m->source_bytes >> 32));
    wr32(hdr + 28, m->vocab_size);
    wr32(hdr + 32, m->eot_plus1);
}

Status shard_writer_open(ShardWriter *w, const char *path, const ShardMeta *meta, Err *err) {
    w->f.fd = -1;
    w->f.tmp[0] = '\0';
    w->meta = *meta;
    w->n = w->nbuf = 0;
    if (meta->version != 0 && meta->version != SHARD_VERSION_U16 && meta->version != SHARD_VERSION_U32)
        return err_set(err, ST_ERR_INPUT, "%s: expected shard version 1 or 7, found %u", path, meta->version);
    if (meta->version == SHARD_VERSION_U16 && meta->vocab_size > 65536)
        return err_set(err, ST_ERR_INPUT, "%s: shard version 1 holds uint16 ids, but the vocabulary has %u ids (expected "
                       "<= 65536; use version 7)", path, meta->vocab_size);
    w->wide = meta->version == SHARD_VERSION_U32 || meta->vocab_size > 65536;
    Status st = file_atomic_open(&w->f, path, err);
    if (st != ST_OK) {
        file_atomic_abort(&w->f);
        if (err) err->status = ST_ERR_INPUT; /* an output path that cannot be created is bad input */
        return ST_ERR_INPUT;
    }
    uint8_t hdr[SHARD_HEADER_INTS * 4]; /* a placeholder; commit writes the real one */
    memset(hdr, 0, sizeof hdr);
    return file_atomic_write(&w->f, hdr, sizeof hdr, err);
}

Status shard_writer_append(ShardWriter *w, const uint32_t *tokens, size_t n, Err *err) {
    int b = w->wide ? 4 : 2;
    if (w->n + n > UINT32_MAX / 4)
        return err_set(err, ST_ERR_INPUT, "%s: expected at most %u tokens per shard, found %zu", w->f.path, UINT32_MAX / 4,
                       w->n + n);
    for (size_t i = 0; i < n; i++) {
        if (w->nbuf + 4 > sizeof w->buf) {
            Status st = file_atomic_write(&w->f, w->buf, w->nbuf, err);
            if (st) return st;
            w->nbuf = 0;
        }
        uint32_t v = tokens[i];
        if (b == 4) wr32(w->buf + w->nbuf, v);
        else w->buf[w->nbuf] = (uint8_t)v, w->buf[w->nbuf + 1] = (uint8_t)(v >> 8);
        w->nbuf += (size_t)b;
    }
    w->n += n;
    return ST_OK;
}

Status shard_writer_commit(ShardWriter *w, uint64_t source_bytes, Err *err) {
    Status st = w->nbuf ? file_atomic_write(&w->f, w->buf, w->nbuf, err) : ST_OK;
    w->nbuf = 0;
    if (st) return st;
    w->meta.source_bytes = source_bytes;
    uint8_t hdr[SHARD_HEADER_INTS * 4];
    header_bytes(hdr, w->wide, w->n, &w->meta);
    if (pwrite(w->f.fd, hdr, sizeof hdr, 0) != (ssize_t)sizeof hdr)
        return err_set(err, ST_ERR_RUNTIME, "%s: header write failed: %s", w->f.tmp, strerror(errno));
    return file_atomic_commit(&w->f, err);
}

void shard_writer_abort(ShardWriter *w) { file_atomic_abort(&w->f); }

/* ------------------------------------------------------------------ loss masks */

static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }
static void wr64(uint8_t *p, uint64_t v) { wr32(p, (uint32_t)v), wr32(p + 4, (uint32_t)(v >> 32)); }

void shard_mask_path(char *out, size_t cap, const char *shard_path) {
    size_t n = strlen(shard_path);
    if (n >= 4 && !strcmp(shard_path + n - 4, ".bin")) snprintf(out, cap, "%.*s.mask", (int)(n - 4), shard_path);
    else snprintf(out, cap, "%s.mask", shard_path);
}

uint64_t shard_tokens_hash(const Shard *s) { return XXH3_64bits(s->tokens, s->ntok * (size_t)s->elem_bytes); }

uint64_t shard_fingerprint(const Shard *s) {
    enum { BLOCKS = 16, BLOCK = 4096 }; /* 16 reads per shard: a thousand shards on a cold disk cost seconds, not minutes */
    /* each piece hashed with the previous piece's hash as its seed: a chain over the pieces */
    uint64_t h = XXH3_64bits(s->map, SHARD_HEADER_INTS * sizeof(int32_t));
    const uint8_t *t = s->tokens;
    size_t n = s->ntok * (size_t)s->elem_bytes;
    if (n <= (size_t)BLOCKS * BLOCK) h = XXH3_64bits_withSeed(t, n, h);
    else
        for (size_t i = 0; i < BLOCKS; i++) h = XXH3_64bits_withSeed(t + i * (n - BLOCK) / (BLOCKS - 1), BLOCK, h);
    if (s->mask_map) h = XXH3_64bits_withSeed(s->mask_map, SHARD_MASK_HEADER, h);
    return h;
}

static uint64_t popcount_bytes(const uint8_t *b, size_t nbytes) {
    uint64_t c = 0;
    for (size_t i = 0; i < nbytes; i++) c += (uint64_t)__builtin_popcount(b[i]);
    return c;
}

Status shard_mask_open(Shard *s, Err *err) {
    char path[1100];
    shard_mask_path(path, sizeof path, s->path);
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        if (errno == ENOENT) return ST_OK; /* no mask: every target is trained */
        return err_set(err, ST_ERR_INPUT, "%s: expected a readable mask file, found %s", path, strerror(errno));
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return err_set(err, ST_ERR_INPUT, "%s: expected a regular file (a loss mask)", path);
    }
    size_t want = SHARD_MASK_HEADER + (s->ntok + 7) / 8;
    if ((size_t)sb.st_size < SHARD_MASK_HEADER) {
        close(fd);
        return err_set(err, ST_ERR_INPUT, "%s: expected a %d-byte mask header, found a file of %lld bytes", path,
                       SHARD_MASK_HEADER, (long long)sb.st_size);
    }
    void *map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return err_set(err, ST_ERR_RUNTIME, "%s: mmap failed (%s)", path, strerror(errno));
    bus_register(map, (size_t)sb.st_size, path, "loss mask");
    const uint8_t *h = map;
    uint32_t magic = rd32(h), version = rd32(h + 4), bits = rd32(h + 32);
    uint64_t count = rd64(h + 8), hash = rd64(h + 16), trained = rd64(h + 24);
    Status st = ST_OK;
    int reserved = 36; /* bytes 36..63: reserved, 0 (docs/formats.md); the first one that is not */
    while (reserved < SHARD_MASK_HEADER && h[reserved] == 0) reserved++;
    if (magic != SHARD_MASK_MAGIC || version != SHARD_MASK_VERSION || bits != 1)
        st = err_set(err, ST_ERR_INPUT, "%s: expected mask magic/version/bits %d/%d/1, found %u/%u/%u", path,
                     SHARD_MASK_MAGIC, SHARD_MASK_VERSION, magic, version, bits);
    else if (reserved < SHARD_MASK_HEADER)
        st = err_set(err, ST_ERR_INPUT, "%s: expected the reserved header bytes 36..63 zero, found 0x%02x at byte %d "
                     "(a damaged or foreign header)", path, h[reserved], reserved);
    else if (count != s->ntok)
        st = err_set(err, ST_ERR_INPUT, "%s: expected a mask of %zu tokens (its shard %s), found %llu", path, s->ntok,
                     s->path, (unsigned long long)count);
    else if ((size_t)sb.st_size != want)
        st = err_set(err, ST_ERR_INPUT, "%s: expected %zu bytes for %zu tokens, found a file of %lld bytes", path, want,
                     s->ntok, (long long)sb.st_size);
    else if (hash != shard_tokens_hash(s))
        st = err_set(err, ST_ERR_INPUT, "%s: expected the hash of its shard's tokens %016llx, found %016llx (the mask "
                     "was written for other tokens)", path, (unsigned long long)shard_tokens_hash(s),
                     (unsigned long long)hash);
    else if (popcount_bytes(h + SHARD_MASK_HEADER, (s->ntok + 7) / 8) != trained ||
             (s->ntok % 8 && (h[want - 1] >> (s->ntok % 8)) != 0))
        st = err_set(err, ST_ERR_INPUT, "%s: expected %llu trained tokens (header) and zero padding bits, found %llu bits "
                     "set (a corrupt mask)", path, (unsigned long long)trained,
                     (unsigned long long)popcount_bytes(h + SHARD_MASK_HEADER, (s->ntok + 7) / 8));
    if (st != ST_OK) {
        bus_unregister(map);
        munmap(map, (size_t)sb.st_size);
        return st;
    }
    s->mask_map = map;
    s->mask_map_bytes = (size_t)sb.st_size;
    s->mask = h + SHARD_MASK_HEADER;
    s->mask_trained = trained;
    return ST_OK;
}

Status shard_mask_write(const char *shard_path, const uint8_t *bits, size_t n, Err *err) {
    Shard sh;
    Status st = shard_open(&sh, shard_path, err);
    if (st) return st;
    char path[1100];
    shard_mask_path(path, sizeof path, shard_path);
    if (sh.ntok != n) {
        shard_close(&sh);
        return err_set(err, ST_ERR_INPUT, "%s: expected a mask of %zu tokens (its shard's), found %zu", path, sh.ntok, n);
    }
    size_t nb = (n + 7) / 8;
    if (n % 8 && (bits[nb - 1] >> (n % 8)) != 0) {
        shard_close(&sh);
        return err_set(err, ST_ERR_INPUT, "%s: expected zero padding bits after token %zu, found some set", path, n);
    }
    uint64_t trained = popcount_bytes(bits, nb);
    uint8_t hdr[SHARD_MASK_HEADER];
    memset(hdr, 0, sizeof hdr);
    wr32(hdr, SHARD_MASK_MAGIC);
    wr32(hdr + 4, SHARD_MASK_VERSION);
    wr64(hdr + 8, n);
    wr64(hdr + 16, shard_tokens_hash(&sh));
    wr64(hdr + 24, trained);
    wr32(hdr + 32, 1);
    shard_close(&sh);
    const void *bufs[2] = {hdr, bits};
    size_t lens[2] = {sizeof hdr, nb};
    return file_write_atomic(path, bufs, lens, 2, err);
}
