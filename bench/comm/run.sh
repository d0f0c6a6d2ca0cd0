#!/usr/bin/env bash
# Builds bench/comm/comm_bench (the build's comm_bench target) and runs it with 2 ranks for
# each malloc setting; the markdown tables go to bench/comm/results/*.md (copied into docs/comm.md).
# Usage: [OUT=DIR] [BUILD=DIR] bench/comm/run.sh [--quick] [--max-mb N]
#   OUT: where the tables go instead of bench/comm/results (a trial run that leaves the recorded ones alone)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${OUT:-$root/bench/comm/results}"
build="${BUILD:-$root/build}"
bin="$build/bench/comm_bench"
mkdir -p "$out"
# The build's comm_bench target (bench/CMakeLists.txt) links exactly what src/comm needs.
cmake --build "$build" --target comm_bench >/dev/null
run="mpirun --oversubscribe -np 2 --bind-to core"
[[ $(id -u) -eq 0 ]] && run="mpirun --allow-run-as-root --oversubscribe -np 2 --bind-to core"
for m in default threshold nommap; do
  echo "== malloc=$m"
  OMP_NUM_THREADS=1 $run "$bin" --malloc "$m" "$@" | tee "$out/comm_bench_$m.md"
done
# The environment-variable form of the threshold (no code change): glibc reads it at start-up.
echo "== malloc=env MALLOC_MMAP_THRESHOLD_=33554432"
OMP_NUM_THREADS=1 $run -x MALLOC_MMAP_THRESHOLD_=33554432 -x MALLOC_TRIM_THRESHOLD_=1073741824 "$bin" "$@" \
  | tee "$out/comm_bench_env.md"
