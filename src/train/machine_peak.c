/* machine_peak.c — the best of the FMA probe and a measured GEMM, cached per machine
 * (machine_peak.h; the cache format is in docs/plan.md). */
#include "train/machine_peak.h"

#include <cjson/cJSON.h>
#include <omp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "core/fileio.h"
#include "core/peak.h"
#include "core/stats.h"
#include "core/timer.h"
#include "model/backend.h"
#include "model/matmul.h"

/* The GEMM: C (S, S) = A (S, S) · B^T (S, S), a linear layer's forward form. S = 512 is
 * compute-bound (S/6 = 85 FLOP per byte of fp32 operands, all in L2) and short (0.27 GFLOP: about
 * 2.5 ms on one Zen 5 core), so on a shared machine the best of many calls finds one that no other
 * job interrupted. Measured on the 2-core Zen 5 against 1024^3, 2048^3 and training shapes (best of
 * 12 calls, load 5): 512^3 was the fastest of them at 1 and 2 threads, fp32 and bf16 (fp32 1 thread
 * 113 GFLOP/s against 108 at 1024^3; 2 threads 224 against 208; bf16 2 threads 440 against 232). */
#define GEMM_S 512
#define GEMM_MIN_REPS 10
#define GEMM_MIN_MS 100.0
/* The check on a cache hit: 3 calls and 100 ms at least. 100, not 20: the check's median call is
 * also the machine's speed now (machine_peak_speed), and on a 2-core Xeon VM (2026-11-30) the
 * median of 20 ms of calls moved 0.46-0.94 of the cached figure between checks a second apart, of
 * 100 ms 0.68-0.78 (the best call of each 0.73-1.0). */
#define GEMM_CHECK_MS 100.0
#define GEMM_MAX_KEPT 4096 /* calls whose rates the median takes (the first ones) */

MachinePeakOptions machine_peak_default_options(void) {
    MachinePeakOptions o = {.threads = 1, .bf16 = 0, .cache_path = NULL, .remeasure = 0, .probe_scale = 1, .no_gemm = 0,
                             .gemm_scale = 1};
    return o;
}

/* Best rate over at least min_reps timed calls and min_ms after one untimed call (which
 * creates oneDNN's primitive), on `threads` threads: the count the probe ran and the cache keys,
 * whatever the caller's OpenMP count (restored after). A GEMM on more threads than the key once
 * raised a 1-thread entry to the machine's rate, and every later 1-thread run's MFU halved. 0 when
 * memory runs out or a GEMM fails. *median (when not NULL): the median call's rate (of the first
 * GEMM_MAX_KEPT), what the machine sustains rather than its best moment. */
static double gemm_peak(int bf16, int threads, double min_ms, int min_reps, double *median) {
    const int prev = omp_get_max_threads();
    if (threads > 0) mm_set_threads(threads);
    const int S = GEMM_S;
    size_t n = (size_t)S * S;
    float *a = malloc(n * 4), *b = malloc(n * 4), *c = malloc(n * 4);
    uint16_t *ah = malloc(n * 2), *bh = malloc(n * 2);
    double best = 0, *kept = median ? malloc(GEMM_MAX_KEPT * sizeof *kept) : NULL;
    int nkept = 0;
    if (median) *median = 0;
    if (a && b && c && ah && bh && (!median || kept)) {
        /* Small normal values (no denormals, no overflow over K = 1024 terms). */
        for (size_t i = 0; i < n; i++) {
            a[i] = 0.001f * (float)(i % 97), b[i] = 0.001f * (float)(i % 89);
            ah[i] = 0x3c00 + (uint16_t)(i % 7), bh[i] = 0x3c00 + (uint16_t)(i % 5); /* ~2^-7 */
        }
        double t_end = 0;
        for (int rep = 0;; rep++) {
            double t0 = timer_ms();
            if (bf16) mm_gemm_bf16(0, 1, S, S, S, 1.0f, ah, S, bh, S, 0.0f, c, S);
            else mm_sgemm(0, 1, S, S, S, 1.0f, a, S, b, S, 0.0f, c, S);
            double t1 = timer_ms();
            if (rep == 0) {
                t_end = t1 + min_ms;
                continue;
            }
            double r = 2.0 * S * S * (double)S / ((t1 - t0) * 1e-3);
            if (r > best) best = r;
            if (kept && nkept < GEMM_MAX_KEPT) kept[nkept++] = r;
            if (rep >= min_reps && t1 >= t_end) break;
        }
        Err e;
        if (mm_take_error(&e) != ST_OK) best = 0, nkept = 0; /* a GEMM that did not run measured nothing */
        if (nkept > 0) *median = stats_median_inplace(kept, (size_t)nkept);
    }
    free(a), free(b), free(c), free(ah), free(bh), free(kept);
    mm_set_threads(prev);
    return best;
}

/* ---------------------------------------------------------------- a device's GEMM */

#define DEV_GEMM_S0 512
#define DEV_GEMM_SMAX 8192
#define DEV_GEMM_GROW_MS 2.0 /* one call under this: the shape is too small to be compute-bound */

/* n elements of backend memory filled with a repeating pattern of `row` (rlen elements of esz bytes,
 * n a multiple of rlen): the row copied in once, then the filled part doubled by `copy`. */
static int dev_fill(const Backend *be, void *dst, const void *row, size_t rlen, size_t n, size_t esz) {
    be->from_host(dst, row, rlen * esz);
    for (size_t done = rlen; done < n;) {
        size_t m = done < n - done ? done : n - done;
        be->copy((char *)dst + done * esz, dst, m * esz);
        done += m;
    }
    return 1;
}

/* One timed call of the S^3 GEMM of the precision on be (ms), between syncs. */
static double dev_gemm_call(const Backend *be, int bf16, int S, float *c, const float *a, const float *b,
                            const uint16_t *ah, const uint16_t *bh, int nt) {
    be->sync();
    double t0 = timer_ms();
    if (bf16) be->matmul_forward_lp(c, ah, bh, NULL, S, S, S);
    else be->matmul_forward(c, a, b, NULL, S, S, S, nt);
    be->sync();
    return timer_ms() - t0;
}

/* The best rate of be's GEMM (docs: MachinePeakOptions.device) over at least min_reps calls and
 * min_ms; *size the S it settled on. 0 when memory runs out or a GEMM fails. */
static double device_gemm_peak(const Backend *be, int bf16, int nt, double min_ms, int min_reps, int *size) {
    double best = 0;
    *size = 0;
    for (int S = DEV_GEMM_S0; S <= DEV_GEMM_SMAX; S *= 2) {
        size_t n = (size_t)S * S;
        float *a = NULL, *b = NULL, *c = be->alloc(NULL, MEM_WORKSPACE, n * 4);
        uint16_t *ah = NULL, *bh = NULL;
        if (bf16) ah = be->alloc(NULL, MEM_WORKSPACE, n * 2), bh = be->alloc(NULL, MEM_WORKSPACE, n * 2);
        else a = be->alloc(NULL, MEM_WORKSPACE, n * 4), b = be->alloc(NULL, MEM_WORKSPACE, n * 4);
        float *ra = malloc((size_t)S * 4), *rb = malloc((size_t)S * 4);
        uint16_t *rah = malloc((size_t)S * 2), *rbh = malloc((size_t)S * 2);
        int ok = c && (bf16 ? ah && bh : a && b) && ra && rb && rah && rbh;
        double grow = 0, rate = 0;
        if (ok) {
            /* small normal values, as gemm_peak's (no denormals, no overflow) */
            for (int i = 0; i < S; i++) {
                ra[i] = 0.001f * (float)(i % 97), rb[i] = 0.001f * (float)(i % 89);
                rah[i] = 0x3c00 + (uint16_t)(i % 7), rbh[i] = 0x3c00 + (uint16_t)(i % 5);
            }
            if (bf16) dev_fill(be, ah, rah, (size_t)S, n, 2), dev_fill(be, bh, rbh, (size_t)S, n, 2);
            else dev_fill(be, a, ra, (size_t)S, n, 4), dev_fill(be, b, rb, (size_t)S, n, 4);
            dev_gemm_call(be, bf16, S, c, a, b, ah, bh, nt); /* untimed: plans, library load */
            grow = dev_gemm_call(be, bf16, S, c, a, b, ah, bh, nt);
            if (grow >= DEV_GEMM_GROW_MS || S == DEV_GEMM_SMAX) {
                double t_end = timer_ms() + min_ms;
                for (int rep = 0; rep < min_reps || timer_ms() < t_end; rep++) {
                    double ms = dev_gemm_call(be, bf16, S, c, a, b, ah, bh, nt);
                    double r = 2.0 * S * S * (double)S / (ms * 1e-3);
                    if (r > rate) rate = r;
                }
            }
            Err e;
            if (be->take_error(&e) != ST_OK) ok = 0, rate = 0; /* a GEMM that did not run measured nothing */
        }
        be->free(NULL, MEM_WORKSPACE, c, n * 4);
        be->free(NULL, MEM_WORKSPACE, a, n * 4), be->free(NULL, MEM_WORKSPACE, b, n * 4);
        be->free(NULL, MEM_WORKSPACE, ah, n * 2), be->free(NULL, MEM_WORKSPACE, bh, n * 2);
        free(ra), free(rb), free(rah), free(rbh);
        if (!ok) break; /* out of memory at this size: the last size's rate stands */
        if (rate > 0) {
            best = rate, *size = S;
            break;
        }
    }
    return best;
}

/* ---------------------------------------------------------------- the machine's key */

static void cpu_model(char *buf, int n) {
    snprintf(buf, n, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10)) continue;
        char *v = strchr(line, ':');
        if (!v) continue;
        v++;
        while (*v == ' ' || *v == '\t') v++;
        v[strcspn(v, "\n")] = '\0';
        snprintf(buf, n, "%s", v);
        break;
    }
    fclose(f);
}

/* The instruction level this binary's probes were compiled for: the same host measured by a
 * -march=native and a generic build gives different probe figures. */
static const char *isa_level(void) {
#if defined(__AVX512BF16__)
    return "avx512bf16";
#elif defined(__AVX512F__)
    return "avx512";
#elif defined(__AVX2__)
    return "avx2";
#else
    return "base";
#endif
}

typedef struct {
    char host[256], cpu[256];
    int cpus;
    char device[256]; /* a device backend's device_name ("": the CPU's own peak) */
} MachineKey;

static void machine_key(MachineKey *k) {
    k->device[0] = '\0';
    if (gethostname(k->host, sizeof k->host) != 0) snprintf(k->host, sizeof k->host, "unknown");
    k->host[sizeof k->host - 1] = '\0';
    cpu_model(k->cpu, sizeof k->cpu);
    k->cpus = (int)sysconf(_SC_NPROCESSORS_ONLN);
}

int machine_cpus_online(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int machine_cpus_allowed(void) {
    /* With OpenMP binding on (OMP_PROC_BIND, or OMP_PLACES alone), libgomp pins this initial thread
     * to the first place at startup: its mask then shows one place's CPUs, while the team runs on
     * every place of the partition (made from the process's mask before the pinning). */
    if (omp_get_proc_bind() != omp_proc_bind_false) {
        int np = omp_get_partition_num_places(), n = 0;
        int *ids = np > 0 ? malloc(sizeof *ids * (size_t)np) : NULL;
        if (ids) {
            omp_get_partition_place_nums(ids);
            for (int i = 0; i < np; i++) n += omp_get_place_num_procs(ids[i]);
            free(ids);
        }
        if (n > 0) return n;
    }
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    return machine_cpus_online();
}

Status machine_threads_check(int threads, Err *err) {
    if (threads >= 0 && threads <= MACHINE_MAX_THREADS) return ST_OK;
    return err_set(err, ST_ERR_INPUT, "--threads: expected 0 (auto) or 1..%d, found %d", MACHINE_MAX_THREADS, threads);
}

int machine_auto_threads(int allowed, int node_cpus, int node_ranks) {
    int share = node_cpus / (node_ranks > 0 ? node_ranks : 1);
    int t = allowed < share ? allowed : share;
    return t > MACHINE_MAX_THREADS ? MACHINE_MAX_THREADS : t > 0 ? t : 1;
}

int machine_default_threads(int node_ranks) {
    return machine_auto_threads(machine_cpus_allowed(), machine_cpus_online(), node_ranks);
}

void machine_peak_describe(char *buf, int n) {
    MachineKey k;
    machine_key(&k);
    snprintf(buf, n, "%s | %s | %d cpus | %s", k.host, k.cpu, k.cpus, isa_level());
}

/* ---------------------------------------------------------------- the cache file */

/* 2 since 2026-11-29: the fp32 probe runs real FMAs. */
enum { PEAK_CACHE_VERSION = 2 };

/* 1 when entry e is this machine's for `threads` (and precision `prec`; NULL: a profile entry,
 * which has none). */
/* copies: how many measured at once (a profile's "copies", absent in every other entry: 1). */
static int entry_matches(const cJSON *e, const MachineKey *k, int threads, int copies, const char *prec) {
    const cJSON *d = cJSON_GetObjectItem(e, "device");
    if (k->device[0] ? !cJSON_IsString(d) || strcmp(d->valuestring, k->device) : d != NULL) return 0;
    const cJSON *h = cJSON_GetObjectItem(e, "host"), *c = cJSON_GetObjectItem(e, "cpu"),
                *n = cJSON_GetObjectItem(e, "cpus"), *i = cJSON_GetObjectItem(e, "isa"),
                *t = cJSON_GetObjectItem(e, "threads"), *p = cJSON_GetObjectItem(e, "precision"),
                *r = cJSON_GetObjectItem(e, "copies");
    if (r ? !cJSON_IsNumber(r) || r->valueint != copies : copies != 1) return 0;
    return cJSON_IsString(h) && !strcmp(h->valuestring, k->host) && cJSON_IsString(c) && !strcmp(c->valuestring, k->cpu) &&
           cJSON_IsNumber(n) && n->valueint == k->cpus && cJSON_IsString(i) && !strcmp(i->valuestring, isa_level()) &&
           cJSON_IsNumber(t) && t->valueint == threads &&
           (prec ? cJSON_IsString(p) && !strcmp(p->valuestring, prec) : !p);
}

/* A new entry holding this machine's key fields. */
static cJSON *entry_new(const MachineKey *k, int threads) {
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "host", k->host);
    cJSON_AddStringToObject(e, "cpu", k->cpu);
    cJSON_AddNumberToObject(e, "cpus", k->cpus);
    cJSON_AddStringToObject(e, "isa", isa_level());
    cJSON_AddNumberToObject(e, "threads", threads);
    if (k->device[0]) cJSON_AddStringToObject(e, "device", k->device);
    return e;
}

/* The cache's entries array (a fresh document when the file is absent or not ours). */
static cJSON *cache_load(const char *path) {
    char *text = NULL;
    size_t len;
    Err e;
    cJSON *doc = NULL;
    if (file_read_all(path, &text, &len, &e) == ST_OK) {
        doc = cJSON_Parse(text);
        free(text);
        const cJSON *fmt = cJSON_GetObjectItem(doc, "format"), *ver = cJSON_GetObjectItem(doc, "version");
        /* Version 1 files hold fp32 probes of a multiply and an add, not an FMA (half the peak on
         * Intel cores, core/peak.c): they are measured over, as a file not ours. */
        if (doc && (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "scaletrain-peaks") || !cJSON_IsNumber(ver) ||
                    ver->valuedouble != PEAK_CACHE_VERSION || !cJSON_IsArray(cJSON_GetObjectItem(doc, "entries"))))
            cJSON_Delete(doc), doc = NULL;
    }
    if (!doc) {
        doc = cJSON_CreateObject();
        cJSON_AddStringToObject(doc, "format", "scaletrain-peaks");
        cJSON_AddNumberToObject(doc, "version", PEAK_CACHE_VERSION);
        cJSON_AddItemToObject(doc, "entries", cJSON_CreateArray());
    }
    if (!cJSON_IsArray(cJSON_GetObjectItem(doc, "profiles"))) {
        cJSON_DeleteItemFromObject(doc, "profiles");
        cJSON_AddItemToObject(doc, "profiles", cJSON_CreateArray());
    }
    return doc;
}

/* Writes doc atomically, creating the directory. Failures are ignored (the measurement stays in
 * use; the next run measures again). */
static void cache_write(const char *path, const cJSON *doc) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    Err err;
    if (slash && slash != dir) {
        *slash = '\0';
        if (file_mkdirs(dir, &err) != ST_OK) return;
    }
    char *text = cJSON_Print(doc);
    if (!text) return;
    const void *bufs[2] = {text, "\n"};
    size_t lens[2] = {strlen(text), 1};
    (void)file_write_atomic(path, bufs, lens, 2, &err);
    free(text);
}

double machine_loadavg(void) {
    double load = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &load) != 1) load = -1;
        fclose(f);
    }
    return load;
}

double machine_rusage_s(int children) {
    struct rusage ru;
    if (getrusage(children ? RUSAGE_CHILDREN : RUSAGE_SELF, &ru) != 0) return 0;
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
           1e-6 * (double)ru.ru_stime.tv_usec;
}

MachineCpuMark machine_cpu_mark(void) {
    MachineCpuMark m = {-1, machine_rusage_s(0), timer_ms() * 1e-3, 0};
    /* The CPUs this process may use; all of them when OpenMP binds its threads (this thread's mask
     * is then one place's, machine_cpus_allowed). */
    cpu_set_t set;
    int all = omp_get_proc_bind() != omp_proc_bind_false || sched_getaffinity(0, sizeof set, &set) != 0;
    FILE *f = fopen("/proc/stat", "r");
    long hz = sysconf(_SC_CLK_TCK);
    if (!f || hz <= 0) {
        if (f) fclose(f);
        return m;
    }
    char line[512];
    unsigned long long busy = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long long v[8];
        int id;
        if (strncmp(line, "cpu", 3) || line[3] < '0' || line[3] > '9') continue; /* per-CPU lines only */
        if (sscanf(line + 3, "%d %llu %llu %llu %llu %llu %llu %llu %llu", &id, &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                   &v[6], &v[7]) != 9)
            continue;
        if (!all && (id < 0 || id >= CPU_SETSIZE || !CPU_ISSET(id, &set))) continue;
        busy += v[0] + v[1] + v[2] + v[5] + v[6] + v[7]; /* user nice system irq softirq steal (not idle, iowait) */
        m.cpus++;
    }
    fclose(f);
    if (m.cpus > 0) m.machine_s = (double)busy / (double)hz;
    return m;
}

double machine_others_share(const MachineCpuMark *a, const MachineCpuMark *b) {
    double wall = b->wall_s - a->wall_s;
    if (a->machine_s < 0 || b->machine_s < 0 || a->cpus != b->cpus || b->cpus < 1 || !(wall > 0)) return -1;
    double x = ((b->machine_s - a->machine_s) - (b->self_s - a->self_s)) / (wall * b->cpus);
    return x < 0 ? 0 : x > 1 ? 1 : x;
}

/* Replaces this machine's entries in doc's array `arr` (for threads, prec) by e (taken), writes. */
static void cache_put(const char *path, cJSON *doc, const char *arr, const MachineKey *k, int threads, int copies,
                      const char *prec, cJSON *e) {
    cJSON *entries = cJSON_GetObjectItem(doc, arr);
    for (int i = cJSON_GetArraySize(entries) - 1; i >= 0; i--)
        if (entry_matches(cJSON_GetArrayItem(entries, i), k, threads, copies, prec))
            cJSON_DeleteItemFromArray(entries, i);
    cJSON_AddNumberToObject(e, "measured_unix", (double)time(NULL));
    /* the 1-minute load average when measured: a loaded machine measures low */
    cJSON_AddNumberToObject(e, "loadavg", machine_loadavg());
    cJSON_AddItemToArray(entries, e);
    cache_write(path, doc);
}

static void cache_store(const char *path, cJSON *doc, const MachineKey *k, int threads, const char *prec,
                        double probe, const char *probe_kind, double gemm) {
    cJSON *e = entry_new(k, threads);
    cJSON_AddStringToObject(e, "precision", prec);
    cJSON_AddNumberToObject(e, "probe_flops", probe);
    cJSON_AddStringToObject(e, "probe_kind", probe_kind);
    cJSON_AddNumberToObject(e, "gemm_flops", gemm);
    cache_put(path, doc, "entries", k, threads, 1, prec, e);
}

cJSON *machine_profile_load(const char *cache_path, int threads, int copies, double *loadavg, double *others,
                            double *age_s) {
    if (loadavg) *loadavg = -1;
    if (others) *others = -1;
    if (age_s) *age_s = -1;
    if (!cache_path || !cache_path[0]) return NULL;
    MachineKey k;
    machine_key(&k);
    cJSON *doc = cache_load(cache_path), *found = NULL;
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(doc, "profiles")) {
        const cJSON *p = cJSON_GetObjectItem(e, "profile"), *l = cJSON_GetObjectItem(e, "loadavg");
        if (entry_matches(e, &k, threads, copies, NULL) && cJSON_IsObject(p)) {
            found = cJSON_Duplicate(p, 1);
            if (loadavg && cJSON_IsNumber(l)) *loadavg = l->valuedouble;
            const cJSON *o = cJSON_GetObjectItem(e, "others_cpu"), *t = cJSON_GetObjectItem(e, "measured_unix");
            if (others && cJSON_IsNumber(o)) *others = o->valuedouble;
            if (age_s && cJSON_IsNumber(t)) *age_s = (double)time(NULL) - t->valuedouble;
            break;
        }
    }
    cJSON_Delete(doc);
    return found;
}

void machine_profile_store(const char *cache_path, int threads, int copies, const cJSON *profile, double others) {
    if (!cache_path || !cache_path[0]) return;
    MachineKey k;
    machine_key(&k);
    cJSON *doc = cache_load(cache_path), *e = entry_new(&k, threads);
    cJSON_AddItemToObject(e, "profile", cJSON_Duplicate(profile, 1));
    /* the share of the CPUs other work used while it was measured (machine_others_share) */
    if (others >= 0) cJSON_AddNumberToObject(e, "others_cpu", others);
    if (copies > 1) cJSON_AddNumberToObject(e, "copies", copies);
    cache_put(cache_path, doc, "profiles", &k, threads, copies, NULL, e);
    cJSON_Delete(doc);
}

/* ---------------------------------------------------------------- the peak */

/* A device's peak: its GEMM's measured rate (cached by device name), no probe. */
static Status device_peak_resolve(MachinePeak *out, const MachinePeakOptions *o, Err *err) {
    const Backend *be = o->device;
    const char *prec = o->bf16 ? "bf16" : "fp32";
    int use_cache = o->cache_path && o->cache_path[0] && !o->no_gemm && !(o->probe_scale > 0 && o->probe_scale != 1) &&
                    !(o->gemm_scale > 0 && o->gemm_scale != 1);
    MachineKey k;
    machine_key(&k);
    snprintf(k.device, sizeof k.device, "%s", be->device_name ? be->device_name() : be->name);
    cJSON *doc = use_cache ? cache_load(o->cache_path) : NULL;
    int size = 0, raised = 0;
    if (doc && !o->remeasure) {
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItem(doc, "entries")) {
            const cJSON *g = cJSON_GetObjectItem(e, "gemm_flops"), *sz = cJSON_GetObjectItem(e, "gemm_size");
            if (entry_matches(e, &k, o->threads, 1, prec) && cJSON_IsNumber(g) && g->valuedouble > 0) {
                out->gemm = g->valuedouble, out->cached = 1;
                size = cJSON_IsNumber(sz) ? sz->valueint : 0;
                break;
            }
        }
        if (out->cached) { /* the short check: a cached floor only rises, as the CPU's (still "cached") */
            int s2;
            double now = device_gemm_peak(be, o->bf16, o->threads, GEMM_CHECK_MS, 3, &s2);
            if (now > out->gemm) out->gemm = now, size = s2, raised = 1;
        }
    }
    if (!out->cached && !(out->gemm > 0) && !o->no_gemm)
        out->gemm = device_gemm_peak(be, o->bf16, o->threads, GEMM_MIN_MS, GEMM_MIN_REPS, &size);
    if (!out->cached && o->gemm_scale > 0) out->gemm *= o->gemm_scale;
    if (use_cache && (!out->cached || raised) && out->gemm > 0) {
        cJSON *e = entry_new(&k, o->threads);
        cJSON_AddStringToObject(e, "precision", prec);
        cJSON_AddNumberToObject(e, "probe_flops", 0);
        cJSON_AddNumberToObject(e, "gemm_flops", out->gemm);
        cJSON_AddNumberToObject(e, "gemm_size", size);
        cache_put(o->cache_path, doc, "entries", &k, o->threads, 1, prec, e);
    }
    cJSON_Delete(doc);
    out->best = out->gemm;
    snprintf(out->kind, sizeof out->kind, "%s GEMM %d^3 on %.100s%s", prec, size, k.device, out->cached ? ", cached" : "");
    if (!(out->best > 0))
        return err_set(err, ST_ERR_RUNTIME, "peak FLOP/s: the %s GEMM on %s measured nothing (give --peak-gflops or "
                       "--hardware PRESET)", prec, k.device);
    return ST_OK;
}

Status machine_peak_resolve(MachinePeak *out, const MachinePeakOptions *o, Err *err) {
    memset(out, 0, sizeof *out);
    if (o->device && !o->device->host_addressable) return device_peak_resolve(out, o, err);
    const char *prec = o->bf16 ? "bf16" : "fp32";
    const char *probe_kind = "fp32 FMA"; /* which probe gave out->probe (bf16: the larger of two) */
    int faulty = (o->probe_scale > 0 && o->probe_scale != 1) || o->no_gemm || (o->gemm_scale > 0 && o->gemm_scale != 1);
    int use_cache = o->cache_path && o->cache_path[0] && !faulty;
    MachineKey k;
    machine_key(&k);
    cJSON *doc = use_cache ? cache_load(o->cache_path) : NULL;
    if (doc && !o->remeasure) {
        const cJSON *e, *entries = cJSON_GetObjectItem(doc, "entries");
        cJSON_ArrayForEach(e, entries) {
            if (!entry_matches(e, &k, o->threads, 1, prec)) continue;
            const cJSON *p = cJSON_GetObjectItem(e, "probe_flops"), *g = cJSON_GetObjectItem(e, "gemm_flops");
            if (cJSON_IsNumber(p) && cJSON_IsNumber(g) && p->valuedouble > 0 && g->valuedouble >= 0) {
                const cJSON *pk = cJSON_GetObjectItem(e, "probe_kind");
                out->probe = p->valuedouble, out->gemm = g->valuedouble, out->cached = 1;
                if (cJSON_IsString(pk) && !strcmp(pk->valuestring, "bf16 dot product")) probe_kind = "bf16 dot product";
                break;
            }
        }
        /* A short GEMM check (3 calls, 20 ms at least): the cached figure is a floor that only rises, so an entry
         * measured on a loaded machine (low, and MFU over it could pass 1 once the machine is
         * quiet) is raised by the first quieter start. */
        if (out->cached) {
            double now = gemm_peak(o->bf16, o->threads, GEMM_CHECK_MS, 3, &out->check);
            if (now > out->gemm) {
                out->gemm = now;
                cache_store(o->cache_path, doc, &k, o->threads, prec, out->probe, probe_kind, out->gemm);
            }
        }
    }
    if (!out->cached) {
        out->probe = peak_measure_fp32(o->threads, 200.0);
        if (o->bf16) {
            /* A bf16 run's peak is at least the fp32 one (its non-GEMM work is fp32). */
            double pb = peak_measure_bf16(o->threads, 200.0);
            if (pb > out->probe) out->probe = pb, probe_kind = "bf16 dot product";
        }
        if (o->probe_scale > 0) out->probe *= o->probe_scale;
        out->gemm = o->no_gemm ? 0 : gemm_peak(o->bf16, o->threads, GEMM_MIN_MS, GEMM_MIN_REPS, NULL);
        if (o->gemm_scale > 0) out->gemm *= o->gemm_scale;
        if (use_cache && out->probe > 0)
            cache_store(o->cache_path, doc, &k, o->threads, prec, out->probe, probe_kind, out->gemm);
    }
    cJSON_Delete(doc);
    if (out->gemm > out->probe) {
        out->best = out->gemm;
        snprintf(out->kind, sizeof out->kind, "%s GEMM %d^3%s", prec, GEMM_S, out->cached ? ", cached" : "");
    } else {
        out->best = out->probe;
        snprintf(out->kind, sizeof out->kind, "%s probe%s", probe_kind, out->cached ? ", cached" : "");
    }
    if (!(out->best > 0))
        return err_set(err, ST_ERR_RUNTIME, "peak FLOP/s: neither the FMA probe nor the %s GEMM measured anything "
                       "(give --peak-gflops)", prec);
    return ST_OK;
}

double machine_peak_check(const MachinePeakOptions *o) {
    if (o->device && !o->device->host_addressable) return 0; /* a device's cached peak has no check figure */
    double median = 0;
    gemm_peak(o->bf16, o->threads, GEMM_CHECK_MS, 3, &median);
    return median;
}

double machine_peak_speed(const MachinePeak *p, double check) {
    if (!p->cached || !(p->gemm > 0) || !(check > 0)) return 0;
    return check < p->gemm ? check / p->gemm : 1.0;
}

int machine_peak_bf16_slow(const MachinePeak *p) { return p->gemm > 0 && p->gemm < 0.6 * p->probe; }
