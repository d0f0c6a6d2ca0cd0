#!/usr/bin/env bash
# ckpt_shard.sh — a save of gpt2-124m-sized state (fp32 params + m + v, 124M parameters each) from 2
# ranks (tp 2: each holds half of every split tensor), sharded (every rank writes its slices) against
# the gather to rank 0 then ckpt_save that the trainer used before: wall time and rank 0's peak RSS,
# median of REPS runs each (one mpirun per run, so VmHWM is that run's). Writes a table to stdout.
# usage: bench/ckpt_shard.sh [BUILD_DIR] [REPS]
set -euo pipefail
build=${1:-build}
reps=${2:-3}
bin=$build/bench/ckpt_shard_bench
mpiexec=${MPIEXEC:-mpirun}
dir=$(mktemp -d /tmp/ckpt_shard_bench.XXXXXX)
trap 'rm -rf "$dir"' EXIT
field() { sed -n 's/.*"'"$2"'": \([0-9.]*\).*/\1/p' <<<"$1"; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
echo "| method | save ms (runs) | median ms | rank-0 peak RSS MiB (median) | bytes written |"
echo "|---|---|---|---|---|"
for method in shard gather; do
  ms=() rss=() bytes=0
  for ((i = 0; i < reps; i++)); do
    rm -rf "${dir:?}"/*
    sync
    line=$("$mpiexec" --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS=1 "$bin" "$method" "$dir/ck" 2 | grep '"method"')
    ms+=("$(field "$line" ms)")
    rss+=("$(field "$line" vmhwm_kb)")
    bytes=$(field "$line" bytes)
  done
  mmed=$(printf '%s\n' "${ms[@]}" | median)
  rmed=$(printf '%s\n' "${rss[@]}" | median)
  echo "| $method | ${ms[*]} | $mmed | $(awk -v k="$rmed" 'BEGIN {printf "%.0f", k / 1024}') | $bytes |"
done
