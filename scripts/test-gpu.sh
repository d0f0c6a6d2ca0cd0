#!/usr/bin/env bash
# The GPU test suite (issue 25; docs/cuda.md), run by `make test-gpu`: every executable built for it,
# on the CUDA backend. It fails, never skips: a build without the CUDA backend (ST_CUDA off), a
# missing executable or a machine without a usable GPU is a failure with one line saying which.
# Usage: scripts/test-gpu.sh BUILD_DIR
#        CUEMU=1 scripts/test-gpu.sh BUILD_DIR   (make test-cuemu: the same suite, dp 2 included, on the
#        CPU emulation of CUDA, tests/cuemu: the *_cuemu programs and scaletrain_cuemu; limits x4)
set -uo pipefail
build=${1:?usage: scripts/test-gpu.sh BUILD_DIR}
sfx= st=scaletrain
if [[ ${CUEMU:-0} == 1 ]]; then
  sfx=_cuemu st=tests/scaletrain_cuemu
  : "${TEST_GPU_TIMEOUT_SCALE:=4}"
  if ! grep -q '^ST_CUEMU:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null; then
    echo "test-gpu: $build was not configured with ST_CUEMU=ON (no CUDA emulation): FAIL" >&2
    exit 1
  fi
fi
if [[ ! -x "$build/$st" ]]; then
  echo "test-gpu: $build/$st is missing: FAIL" >&2
  exit 1
fi
if ! grep -q '^ST_CUDA:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null; then
  echo "test-gpu: $build was not configured with ST_CUDA=ON (no CUDA backend): FAIL" >&2
  exit 1
fi
fail=0
# Each executable runs under its own time limit (seconds; TEST_GPU_TIMEOUT_SCALE, an integer,
# multiplies them, e.g. 3 under compute-sanitizer): a hang (a kernel that never ends, a rank waiting
# for the other) fails that one test with exit 124 instead of eating the time of every test after it.
scale=${TEST_GPU_TIMEOUT_SCALE:-1}
run() { # name, limit_s, then the command
  local name=$1 limit=$(( $2 * scale )) rc; shift 2
  echo "== $name: $*"
  timeout "$limit" "$@"
  rc=$?
  if [[ $rc -eq 0 ]]; then echo "== $name: PASS"
  elif [[ $rc -eq 124 ]]; then echo "== $name: FAIL (timed out after ${limit}s)"; fail=1
  else echo "== $name: FAIL (exit $rc)"; fail=1; fi
}
for exe in test_backend_kernels$sfx test_cuda_optim$sfx test_cuda_model$sfx test_device_train test_device_sample$sfx test_device_plan; do
  if [[ ! -x "$build/tests/$exe" ]]; then
    echo "test-gpu: $build/tests/$exe is missing: FAIL" >&2
    fail=1
  fi
done
run backend_kernels 60 "$build/tests/test_backend_kernels$sfx" cuda
run cuda_optim 30 "$build/tests/test_cuda_optim$sfx"
run cuda_model 90 "$build/tests/test_cuda_model$sfx"
run device_train 150 "$build/tests/test_device_train" "$build/$st" cuda
# dp 2: two ranks under mpirun sharing the one GPU (host-staged collectives; docs/cuda.md §6)
mpiexec=$(sed -n 's/^MPIEXEC_EXECUTABLE:[A-Z]*=//p' "$build/CMakeCache.txt")
run device_train_dp 150 "$build/tests/test_device_train" "$build/$st" cuda dp "${mpiexec:-mpirun}"
run device_sample 60 "$build/tests/test_device_sample$sfx" "$build/$st" cuda
run device_plan 60 "$build/tests/test_device_plan" "$build/$st" cuda
if [[ $fail -ne 0 ]]; then echo "test-gpu: FAILED"; exit 1; fi
echo "test-gpu: all passed"
