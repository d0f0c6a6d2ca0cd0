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
 * matmul speed-up, and memory bandwidth, with `threads` threads; the rest from cpu-zen4-2c. */
Status hw_measure(PlanHardware *hw, int threads, Err *err);

/* This machine's measured profile for `threads` threads (`plan`'s default): from the cache file
 * cache_path (train/machine_peak.h) when it holds one for this machine, else measured now
 * (hw_measure, about 2 s) and stored there. A cached profile measured at a load above the CPU
 * count is measured again when the load has fallen below 3/4 of that, each figure the larger of
 * the two. *measured: 0 cached, 1 measured, 2 re-measured; *was_load (if not NULL): the cached
 * entry's load when measured (-1 none). */
Status hw_this_machine(PlanHardware *hw, int threads, const char *cache_path, int *measured, double *was_load,
                       Err *err);

/* The measured peaks' cache file (train/machine_peak.h) from the environment: $ST_PEAK_CACHE (a
 * path, or "off" for none), else $XDG_CACHE_HOME/scaletrain/peaks.json, else
 * $HOME/.cache/scaletrain/peaks.json; "" when none applies. */
void hw_peak_cache_path(char *buf, size_t n);

/* A preset name, or a JSON profile file (a value containing '/' or ending in .json). */
Status hw_resolve(PlanHardware *hw, const char *name_or_file, Err *err);

#endif
