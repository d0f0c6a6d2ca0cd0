/* machine_peak.h — the peak FLOP/s that MFU divides by: the best of the FMA probe and a measured
 * GEMM of the run's precision, cached per machine (docs/plan.md, "Peak and MFU").
 *
 * Why both: the FMA probe (core/peak.c) measures what a register-resident loop of fused
 * multiply-adds reaches; oneDNN's GEMMs can beat it (AMX tiles for bf16, AVX-512 bf16 dot products,
 * or a probe slowed by instrumentation), and MFU over a peak that the GEMMs beat passes 1 (issue
 * 28: 1.24–3.0 seen on a Xeon). The GEMM rate of a compute-bound shape through model/matmul's API,
 * with the run's thread count, is what the step's matmuls can reach at best; the larger of the
 * two is the peak, so MFU stays below 1 whichever measurement under-reports.
 *
 * The cache: one JSON file (format in docs/plan.md) of entries keyed by host name, CPU model,
 * online CPU count, the binary's ISA level, threads and precision, so another machine (or another
 * build target) never reads an entry measured elsewhere. A hit costs a file read and a short GEMM
 * check, 31–72 ms at load 11 (the cached GEMM figure only rises: a start on a quieter machine raises
 * an entry measured under load), instead of the 345–547 ms of measurement. */
#ifndef ST_TRAIN_MACHINE_PEAK_H
#define ST_TRAIN_MACHINE_PEAK_H

#include "core/status.h"

struct Backend;

typedef struct {
    int threads;            /* threads the run uses (the probe's and the GEMM library's) */
    int bf16;               /* 1: the bf16 peak (bf16 probe, bf16 GEMM, and the fp32 probe as a floor) */
    const char *cache_path; /* the cache file; NULL or "" = no cache (measure every time) */
    int remeasure;          /* 1: measure even on a cache hit, and replace the entry */
    /* Test-only faults (core/fault.h: peak_probe_scale, peak_no_gemm, peak_gemm_scale); any set
     * bypasses the cache so a faulty figure is neither read nor written. */
    double probe_scale;     /* the probe's result times this (0 or 1: unchanged) */
    int no_gemm;            /* 1: no GEMM measurement (the peak is the probe's alone) */
    double gemm_scale;      /* the GEMM's result times this (0 or 1: unchanged) */
    /* A device backend (host_addressable 0; NULL: this CPU): the peak is the rate of its own GEMM
     * (matmul_forward in fp32, matmul_forward_lp in bf16: cuBLASLt on a GPU) on its memory, timed
     * between `sync`s, the size doubled from 512 while one call takes under 2 ms (up to 8192), so
     * a GPU is measured at a compute-bound shape; no FMA probe. Cached like the CPU's, keyed by the
     * host and the backend's device_name. */
    const struct Backend *device;
} MachinePeakOptions;

MachinePeakOptions machine_peak_default_options(void);

typedef struct {
    double probe;     /* FLOP/s of the FMA (fp32) or dot-product (bf16; max with fp32) probe */
    double gemm;      /* FLOP/s of the compute-bound GEMM of the precision (0: not measured) */
    double best;      /* max(probe, gemm): the peak */
    int cached;       /* 1: probe and gemm came from the cache */
    double check;     /* a cached CPU peak: the median call of the GEMM check this time, FLOP/s (gemm
                         was raised to the check's best call when that was higher); 0 when measured
                         afresh or on a device */
    char kind[160];   /* what gave `best`, e.g. "fp32 GEMM 512^3", "fp32 FMA probe" or "bf16 GEMM
                         8192^3 on NVIDIA H100 80GB HBM3" (+ ", cached") */
} MachinePeak;

/* Measures (or reads from the cache) this machine's peak for o's precision and threads. The GEMM
 * runs through model/matmul on o->threads threads (set for the measurement, then restored).
 * A cache that cannot be read or parsed is measured over; one that cannot be written leaves the
 * measurement in use. Errors: ST_ERR_RUNTIME only when nothing could be measured. */
Status machine_peak_resolve(MachinePeak *out, const MachinePeakOptions *o, Err *err);

/* The GEMM check of a cached CPU peak (3 calls and 100 ms at least, what machine_peak_resolve runs on
 * a cache hit), run again now with o's options: its median call's FLOP/s; 0 when nothing ran or on a
 * device. */
double machine_peak_check(const MachinePeakOptions *o);

/* How fast this machine runs now against its cached figure: check (a median call) / p->gemm (the
 * best call ever seen), at most 1; 0 when p was not cached or either figure is missing. The cached
 * figures, and the profiles that price `plan`, keep best calls so that other jobs' load does not
 * lower them; a quiet dedicated machine's median call is within a few % of its best, but a shared
 * host's guest runs fast and slow phases that no load figure inside it shows (another tenant on
 * the physical core, the clock): on a 2-core Xeon VM, 2026-11-30, 512^3 GEMM calls back to back
 * flickered between about 250 and 320 GFLOP/s, the median of 100 ms of them 0.68-0.78 of the best,
 * and the trainer's steps ran 1.40x a plan priced on the cached profile. */
double machine_peak_speed(const MachinePeak *p, double check);

/* 1 when a bf16 peak's GEMM ran under 0.6 of its probe, the fp32 FMA rate where that is the larger:
 * fp32 GEMMs reach 0.65-0.93 of the FMA probe on the CPUs measured, so bf16 GEMMs are then likely
 * slower than fp32 ones, as on Intel cores without AMX, whose bf16 dot products run at half their
 * FMA rate (bf16 steps 0.57-0.73x fp32 on a 2-core Xeon, 2026-11-29). 0 without a GEMM figure. */
int machine_peak_bf16_slow(const MachinePeak *p);

/* The 1-minute load average now (/proc/loadavg; -1 where unreadable): stored with each cache
 * entry, since a loaded machine measures low. */
double machine_loadavg(void);

/* CPU time used so far on the CPUs this process may run on (/proc/stat: user, nice, system, irq,
 * softirq and steal) and by this process itself (getrusage, every thread), and the wall clock. Two
 * marks around a measurement tell how much of the machine other work took meanwhile, which the
 * 1-minute load average, lagging a minute behind, does not: a profile measured at load 1.4 of 2
 * CPUs while another job ran came out at half its GEMM efficiency and bandwidth (2026-11-29). */
typedef struct {
    double machine_s; /* CPU seconds used on the allowed CPUs (-1: /proc/stat unreadable) */
    double self_s;    /* this process's CPU seconds */
    double wall_s;
    int cpus;         /* the allowed CPUs counted */
} MachineCpuMark;
MachineCpuMark machine_cpu_mark(void);
/* CPU seconds (user + system) of this process (children 0), or of its waited-for children (1). */
double machine_rusage_s(int children);
/* The share of the allowed CPUs' time between a and b that other processes (and the hypervisor's
 * steal) used: ((machine_b − machine_a) − (self_b − self_a)) / ((wall_b − wall_a) · cpus), clamped
 * to [0, 1]; -1 when unknown (no /proc/stat, no time elapsed). */
double machine_others_share(const MachineCpuMark *a, const MachineCpuMark *b);
/* Above this share a measurement is disturbed: its figures are low, and the profile is measured
 * again (hwprobe.h). */
#define MACHINE_OTHERS_DISTURBED 0.10

/* machine_peak_speed under this: the machine runs slower than its cached figures by more than a
 * quiet machine's checks spread, and the trainer and `plan` say so. */
#define MACHINE_SPEED_SLOW 0.9

/* This machine's hardware profile for `threads` in the cache (`plan`'s default hardware; the
 * profile is plan_hardware_to_json's object, the entry keyed like the peaks' and by `copies`, how
 * many ranks of `threads` threads were measured at once, each on its own CPUs: hwprobe.h's
 * hw_measure_copies; 1 for one process alone, the entries before 2026-11-29): a copy the caller
 * deletes, or NULL when the cache has none (or cache_path is NULL or ""). *loadavg (if not NULL):
 * the 1-minute load average when it was measured (-1 unknown); *others (if not NULL): the share of
 * the CPUs other work used while it was measured (machine_others_share; -1 unknown, as in entries
 * written before 2026-11-29); *age_s (if not NULL): seconds since it was measured (-1 unknown). */
struct cJSON;
struct cJSON *machine_profile_load(const char *cache_path, int threads, int copies, double *loadavg, double *others,
                                   double *age_s);
/* Stores (replaces) it with the others share of its measurement (-1: unknown, not stored); a cache
 * that cannot be written is left as it was. */
void machine_profile_store(const char *cache_path, int threads, int copies, const struct cJSON *profile, double others);

/* The key fields of this machine as the cache stores them (for messages and tests): host, CPU
 * model, online CPUs and ISA level, "host | cpu | N cpus | isa". */
void machine_peak_describe(char *buf, int n);

/* The CPUs this process may run on (its affinity mask: mpirun binds each rank to one core at
 * -np 2, Slurm to its --cpus-per-task; under OpenMP binding, OMP_PROC_BIND or OMP_PLACES, the
 * processors of the places the team runs on, since libgomp pins the initial thread to one place),
 * at least 1; the online CPU count where neither can be read. A run's threads beyond it take turns
 * on those CPUs, so the peak is measured (and keyed in the cache) for min(threads, this). */
int machine_cpus_allowed(void);

/* The most threads a run's --threads takes (train, eval and plan refuse more; the automatic count
 * is capped there). */
#define MACHINE_MAX_THREADS 1024
/* ST_OK for a --threads of 0 (auto) or 1..MACHINE_MAX_THREADS, else ST_ERR_INPUT naming the flag. */
Status machine_threads_check(int threads, Err *err);

/* `--threads 0` (the default of train, eval and plan): the CPUs a process may run on, shared
 * among the node_ranks processes of its node that run on its node_cpus online CPUs:
 * min(allowed, node_cpus / node_ranks), at least 1 and at most 1024. One process gets every CPU its
 * affinity allows; mpirun's ranks bound to one core each get 1; 8 ranks unbound on 16 CPUs get 2
 * each. */
int machine_auto_threads(int allowed, int node_cpus, int node_ranks);
/* The online CPUs of this machine, at least 1. */
int machine_cpus_online(void);
/* machine_auto_threads for this process with node_ranks processes on this machine (eval: 1; plan:
 * its grid's ranks). The trainer gathers every rank's figures and calls machine_auto_threads. */
int machine_default_threads(int node_ranks);

#endif
