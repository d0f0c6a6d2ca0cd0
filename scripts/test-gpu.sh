#!/usr/bin/env bash
# The GPU test suite (issue 25; docs/cuda.md), run by `make test-gpu`: every executable built for it,
# on the CUDA backend. It fails, never skips: a build without the CUDA backend (ST_CUDA off), a
# missing executable or a machine without a usable GPU is a failure with one line saying which.
# Usage: scripts/test-gpu.sh BUILD_DIR
set -uo pipefail
build=${1:?usage: scripts/test-gpu.sh BUILD_DIR}
if [[ ! -x "$build/scaletrain" ]]; then
  echo "test-gpu: $build/scaletrain is missing: FAIL" >&2
  exit 1
fi
if ! grep -q '^ST_CUDA:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null; then
  echo "test-gpu: $build was not configured with ST_CUDA=ON (no CUDA backend): FAIL" >&2
  exit 1
fi
fail=0
run() { # name, then the command
  local name=$1; shift
  echo "== $name: $*"
  if "$@"; then echo "== $name: PASS"; else echo "== $name: FAIL (exit $?)"; fail=1; fi
}
for exe in test_backend_kernels test_cuda_optim test_cuda_model test_device_train; do
  if [[ ! -x "$build/tests/$exe" ]]; then
    echo "test-gpu: $build/tests/$exe is missing: FAIL" >&2
    fail=1
  fi
done
run backend_kernels "$build/tests/test_backend_kernels" cuda
run cuda_optim "$build/tests/test_cuda_optim"
run cuda_model "$build/tests/test_cuda_model"
run device_train "$build/tests/test_device_train" "$build/scaletrain" cuda
# dp 2: two ranks under mpirun sharing the one GPU (host-staged collectives; docs/cuda.md §6)
mpiexec=$(sed -n 's/^MPIEXEC_EXECUTABLE:[A-Z]*=//p' "$build/CMakeCache.txt")
run device_train_dp "$build/tests/test_device_train" "$build/scaletrain" cuda dp "${mpiexec:-mpirun}"
if [[ $fail -ne 0 ]]; then echo "test-gpu: FAILED"; exit 1; fi
echo "test-gpu: all passed"
