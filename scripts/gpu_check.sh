#!/usr/bin/env bash
# The whole device check of the CUDA backend in one command (issue 25; docs/cuda.md), for the GPU
# machine (Ubuntu 24.04, 16 cores, one H100/H200, CUDA 13, no network): under 8 minutes.
#
#   1. gpu       nvidia-smi: the card, driver, clocks as found (never changed)
#   2. bundle    unpacks .device-bundle/prefix.tar.xz (scripts/device-bundle.sh, carried) into a prefix
#   3. build     CMake (Ninja if present) with ST_CUDA=ON and the bundle as CMAKE_PREFIX_PATH, then
#                `make test-gpu`: the whole build, then the GPU suite (scripts/test-gpu.sh)
#   4. memcheck  compute-sanitizer --tool memcheck on the GPU suite's executables (short runs)
#   5. racecheck compute-sanitizer --tool racecheck on the same
#   6. bench     interleaved: our kernels at GPT-2 124M shapes (bench/gpu_kernels) and PyTorch's step
#                (bench/torch_gpu_peer.py, eager and torch.compile), B 16 then B 32, T 1024
# A short table is printed last; every step's full log is in OUTDIR (7 files: the device tool
# brings back at most 8). A failed step does not stop the later ones; the exit status is non-zero
# if any failed. GPU_CHECK_SKIP="bench racecheck" skips steps by name; GPU_CHECK_BUDGET (seconds,
# default 560) bounds all steps together: a step gets at most what is left, so the table always prints
# inside the device tool's 600-second command limit.
#   7. server    only with GPU_CHECK_SERVER=1: bench/server.sh, the 16-core CPU comparison against
#                PyTorch (issue 28; docs/performance.md), with what is left of the budget (its
#                stages shrink to fit; skip GPU steps to give it its full 300 s). Its output joins
#                bench.log and its logs come back as server.tar.gz, the 8th file.
#
# usage: scripts/gpu_check.sh OUTDIR
set -uo pipefail
out=${1:?usage: scripts/gpu_check.sh OUTDIR}
mkdir -p "$out"
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
jobs=$(nproc)
build=${GPU_CHECK_BUILD:-build-gpu} # GPU_CHECK_BUILD: another build folder (tests of this script)
prefix=/tmp/st-prefix
skip=" ${GPU_CHECK_SKIP:-} "
[[ ${GPU_CHECK_SERVER:-0} == 1 ]] || skip+="server "
rows=()
fail=0
t_all=$(date +%s)
deadline=$(( t_all + ${GPU_CHECK_BUDGET:-560} )) # seconds for all steps: inside the device tool's 600

# step NAME LOG TIMEOUT_S COMMAND...: runs it with its output in OUTDIR/LOG, records a table row.
step() {
  local name=$1 log=$2 limit=$3; shift 3
  if [[ "$skip" == *" $name "* ]]; then
    local why=GPU_CHECK_SKIP; [[ $name == server && ${GPU_CHECK_SERVER:-0} != 1 ]] && why="off (GPU_CHECK_SERVER=1 runs it)"
    rows+=("$(printf '%-10s %-6s %6s  %s' "$name" SKIP - "$why")"); return
  fi
  local t0 rc rem
  t0=$(date +%s)
  rem=$(( deadline - t0 )) # every step ends inside the budget, so the table is always printed
  if (( rem < 15 )); then rows+=("$(printf '%-10s %-6s %6s  %s' "$name" SKIP - "budget spent")"); fail=1; return; fi
  (( limit > rem )) && limit=$rem
  echo "=== $name: $*" | tee -a "$out/$log"
  timeout "$limit" bash -c '"$@"' step "$@" >> "$out/$log" 2>&1 # the steps are the functions below (exported)
  rc=$?
  local dt=$(( $(date +%s) - t0 )) status=PASS note="log: $log"
  if [[ $rc -ne 0 ]]; then
    status=FAIL; fail=1
    [[ $rc -eq 124 ]] && note="timed out after ${limit}s; $note" || note="exit $rc; $note"
  fi
  echo "=== $name: $status in ${dt}s" | tee -a "$out/$log"
  rows+=("$(printf '%-10s %-6s %5ss  %s' "$name" "$status" "$dt" "$note")")
}

gpu_info() { nvidia-smi && nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,power.limit --format=csv; }
unpack() {
  [[ -f .device-bundle/prefix.tar.xz ]] || { echo "no .device-bundle/prefix.tar.xz: run scripts/device-bundle.sh here first and carry .device-bundle"; return 1; }
  rm -rf "$prefix" && mkdir -p "$prefix" && tar -xJf .device-bundle/prefix.tar.xz -C "$prefix" --strip-components=1
  cat .device-bundle/MANIFEST
}
build_and_test() {
  local gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  [[ -f $build/CMakeCache.txt ]] || cmake -S . -B $build "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DST_CUDA=ON -DST_CUEMU=OFF \
    -DCMAKE_PREFIX_PATH="$prefix" || return 1
  if command -v make >/dev/null; then
    make test-gpu BUILD=$build JOBS="$jobs"
  else # what `make test-gpu` runs
    cmake --build $build -j"$jobs" && bash scripts/test-gpu.sh $build
  fi
}
sanitize() { # TOOL
  local rc=0
  compute-sanitizer --tool "$1" --error-exitcode 99 $build/tests/test_backend_kernels cuda || rc=1
  compute-sanitizer --tool "$1" --error-exitcode 99 $build/tests/test_cuda_optim || rc=1
  return $rc
}
bench() {
  local rc=0
  for B in 16 32; do
    $build/bench/gpu_kernels cuda "$B" 1024 || rc=1
    # PyTorch with the machine's own libraries: the bundle's Debian zlib/zstd/gfortran are not on its path
    LD_LIBRARY_PATH=$orig_ld PYTHONUNBUFFERED=1 python3 bench/torch_gpu_peer.py --B "$B" --T 1024 --steps 15 --warmup 4 || rc=1
  done
  return $rc
}

server() { # SERVER_BUDGET (300 s) or what is left of the check's budget, whichever is less
  local b=$(( deadline - $(date +%s) - 5 )); (( b > ${SERVER_BUDGET:-300} )) && b=${SERVER_BUDGET:-300}
  SERVER_BUDGET=$b SERVER_PREFIX=$prefix bash bench/server.sh "$out"
}

orig_ld=${LD_LIBRARY_PATH:-}
export LD_LIBRARY_PATH="$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export build prefix jobs out deadline orig_ld
export -f gpu_info unpack build_and_test sanitize bench server
step gpu gpu.txt 30 gpu_info
step bundle build.log 60 unpack
step build build.log 300 build_and_test
grep -E "^(== |test-gpu:)|FAIL" "$out/build.log" > "$out/test-gpu.txt" 2>/dev/null
step memcheck memcheck.log 150 sanitize memcheck
step racecheck racecheck.log 150 sanitize racecheck
step bench bench.log 330 bench
step server bench.log 560 server

{
  echo
  echo "=== gpu_check on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo 'no GPU found'), $(git rev-parse --short HEAD 2>/dev/null)"
  printf '%-10s %-6s %6s  %s\n' step status time note
  printf '%s\n' "${rows[@]}"
  echo "--- GPU suite (test-gpu.txt):"
  grep -E "^== .*: (PASS|FAIL)|test-gpu:" "$out/test-gpu.txt" 2>/dev/null | head -8
  grep -h "^[a-z_0-9'.]*: FAIL" "$out/build.log" 2>/dev/null | head -8
  echo "--- sanitizers: $(grep -h "ERROR SUMMARY" "$out/memcheck.log" "$out/racecheck.log" 2>/dev/null | tr '\n' ' ')"
  echo "--- bench (B, peer, ms/step, tokens/s, MFU, peak GiB):"
  python3 bench/gpu_summary.py < "$out/bench.log" 2>&1
  if [[ "$skip" != *" server "* ]]; then # bench/server.sh's table (its logs: server.tar.gz)
    echo "--- server (bench/server.sh):"
    sed -n '/^=== bench\/server.sh/,/^total /p' "$out/bench.log"
  fi
  echo "total $(( $(date +%s) - t_all ))s; logs in $out"
} | tee "$out/summary.txt"
exit $fail
