/* devemu.h — a test-only emulated device backend: the CPU table behind a device's contract
 * (host_addressable 0), so the trainer's device path runs in CTest on a machine without a GPU.
 *
 * Its memory is not host memory the trainer may touch: every allocation is whole pages of one
 * reserved address range, kept PROT_NONE while host code runs, opened (read-write) only for the
 * duration of a table entry (a kernel, a GEMM, copy, zero, to_host, from_host, optim_update, sumsq). A host dereference of a
 * parameter, gradient or moment outside the table is a SIGSEGV, not a silent success. Numbers: the
 * CPU table's kernels and optim/'s update rules, so a run on it equals the CPU run to the bit except
 * where the device path's order of additions differs (the gradient norm per segment).
 *
 * Reachable only as `--device emu` with the test fault ST_TRAIN_TEST_EMULATED_DEVICE=1 (core/fault.h;
 * docs/cuda.md, section 6); without it "emu" gets backend_find's refusal. */
#ifndef ST_TRAIN_DEVEMU_H
#define ST_TRAIN_DEVEMU_H

#include "model/backend.h"

/* The backend the trainer uses for --device `name`: backend_find's, or the emulated device when name
 * is "emu" and `emulated` (Faults.emulated_device, a test's switch) is set. */
Status devemu_find(const char *name, int emulated, const Backend **out, Err *err);

/* Opens a device backend now (device_name opens it), so that a run on a device that cannot open
 * fails at once, before data preparation or any allocation, with ST_ERR_RUNTIME "--device NAME:
 * <why>" (the CUDA backend's reason: no usable GPU, an ST_CUDA_DEVICE out of range, a missing
 * library). ST_OK for a host-addressable backend, which has nothing to open. */
Status devemu_open(const Backend *be, const char *name, Err *err);

/* The emulated device's table (the first call builds it). */
const Backend *devemu_backend(void);

#endif
