/* hwprobe.h — measuring this machine into a plan hardware profile, and reading profiles.
 *
 * `plan --measure-hardware FILE` writes one; `plan --hardware FILE.json` and
 * `train --hardware FILE.json` read it, so the plan's predicted step time uses measured peak,
 * GEMM efficiency and memory bandwidth instead of a preset. */
#ifndef ST_CLI_HWPROBE_H
#define ST_CLI_HWPROBE_H

#include <stddef.h>

#include "core/status.h"
#include "plan/plan.h"

/* Measures fp32 FMA peak, GEMM efficiency on training-shaped matmuls (oneDNN, fp32), the bf16
 * matmul speed-up, and memory bandwidth, with `threads` threads; the rest from cpu-zen4-2c.
 * *others (if not NULL): the share of the CPUs other work used meanwhile (machine_others_share;
 * above MACHINE_OTHERS_DISTURBED the figures are low). */
Status hw_measure(PlanHardware *hw, int threads, double *others, Err *err);

/* The profile of one of `copies` ranks of `threads` threads sharing this machine: copies
 * processes (this program's `plan --measure-hardware`) measure at once, copy i bound to the i-th
 * block of `threads` of the CPUs this process may run on (the CPUs of ranks bound to cores, as
 * docs/parallel.md places them), and each figure is the copies' mean; memory is the machine's over
 * the copies (each rank's share), *others the largest copy's. A rank measured alone has the memory
 * bandwidth and the turbo clock to itself: 8 ranks of 2 threads share one memory system. copies 1
 * is hw_measure. ST_ERR_INPUT when copies × threads exceeds those CPUs. */
Status hw_measure_copies(PlanHardware *hw, int threads, int copies, double *others, Err *err);

/* Where hw_this_machine's profile came from. */
typedef struct {
    int measured;      /* 0 cached, 1 measured now, 2 cached and measured again */
    double was_load;   /* the cached entry's 1-minute load when measured (-1 none) */
    double was_others; /* the cached entry's others share when measured (-1 none or unknown) */
    double others;     /* the profile in use: the others share of its (last) measurement (-1 unknown) */
} HwOrigin;

/* Re-measure a disturbed cached profile once it is this old (seconds): a machine that stays busy
 * pays the 2 s measurement at most this often. */
#define HW_REMEASURE_AFTER_S 600.0

/* This machine's measured profile for `threads` threads, `copies` ranks of them at once
 * (hw_measure_copies; `plan`'s default): from the cache file
 * cache_path (train/machine_peak.h) when it holds one for this machine, else measured now
 * (hw_measure, about 2 s) and stored there. A cached profile is measured again, each figure the
 * larger of the two (a best achievable rate only rises), when it was measured at a load above the
 * CPU count and the load has fallen below 3/4 of that, or when other work used more than
 * MACHINE_OTHERS_DISTURBED of the CPUs while it was measured (or the entry, older, does not say)
 * and it is HW_REMEASURE_AFTER_S old. */
Status hw_this_machine(PlanHardware *hw, int threads, int copies, const char *cache_path, HwOrigin *origin, Err *err);

/* The measured peaks' cache file (train/machine_peak.h) from the environment: $ST_PEAK_CACHE (a
 * path, or "off" for none), else $XDG_CACHE_HOME/scaletrain/peaks.json, else
 * $HOME/.cache/scaletrain/peaks.json; "" when none applies. */
void hw_peak_cache_path(char *buf, size_t n);

/* A preset name, or a JSON profile file (a value containing '/' or ending in .json). */
Status hw_resolve(PlanHardware *hw, const char *name_or_file, Err *err);

#endif
