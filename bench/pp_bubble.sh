#!/usr/bin/env bash
# pp_bubble.sh — pipeline parallelism on this 2-core machine (issue 14, Speed): `scaletrain train
# --pp 2` (two ranks of one thread, mpirun) on config B or C of common.sh (6 layers, 6 heads, 384
# channels, seq 256; B: vocab 50257, whose head makes the last stage the slow one; C: vocab 257,
# balanced stages) with m = 2, 4, 8, 16 micro-batches per step and each schedule (interleaved with
# 3 chunks per rank), against one process of two threads on the same global batch.
#
# Per run, from the step records after the first: the median measured bubble (pipeline.bubble: the
# world's idle time inside the schedule over its ranks' time there), the formula's
# (p−1)/(v·m+p−1) and the one simulated from the schedule with the measured op times, and the
# median tokens/s against one process's, and the median step against `plan`'s prediction for that
# run (the end record's step_ms_over_plan: the schedule simulated with each rank's own work).
# Usage: bench/pp_bubble.sh [config=B] [steps=5] [micro_batch=8] ["2 4 8 16" micro-batch counts]
# (builds nothing; needs mpirun)
set -euo pipefail
cd "$(dirname "$0")/.."
cfg=${1:-B}
steps=${2:-5}
mb=${3:-8}
ms=${4:-2 4 8 16}
V=$([[ $cfg == B ]] && echo 50257 || echo 257)
ST=build/scaletrain
[[ -x $ST ]] || { echo "pp_bubble: build first (make build)" >&2; exit 2; }
command -v mpirun >/dev/null || { echo "pp_bubble: mpirun not found" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
MPI="mpirun --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS=1"
shape="--layers 6 --heads 6 --channels 384 --vocab $V --max-seq-len 256 --seq-len 256 --micro-batch $mb"
$ST prepare --quiet --out "$tmp/sh" --tokenizer bytes --val-fraction 0 data/tinyshakespeare/input.txt >/dev/null
shape="$shape --data $tmp/sh/train_000000.bin --tokenizer bytes"
med() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
field() { # median over the step records after the first of a python expression on record r
  grep '"event":"step"' "$1" | tail -n +2 | python3 -c 'import json,sys
for l in sys.stdin:
  r=json.loads(l); print(eval(sys.argv[1]))' "$2" | med
}
echo "| config | m | schedule | bubble measured | formula | simulated (per-stage times) | tokens/s | vs 1 process | step / plan |"
echo "|---|---:|---|---:|---:|---:|---:|---:|---:|"
for m in $ms; do
  $ST train $shape --grad-accum "$m" --steps "$steps" --val-every 0 --threads 2 --quiet --log "$tmp/one.$m.jsonl" >/dev/null
  one=$(field "$tmp/one.$m.jsonl" 'r["tokens_per_s"]')
  for sch in gpipe 1f1b interleaved zb-h1; do
    extra="--pp 2 --pp-schedule $sch"
    [[ $sch == interleaved ]] && extra="$extra --interleave 3"
    log="$tmp/$sch.$m.jsonl"
    $MPI $ST train $shape --grad-accum "$m" --steps "$steps" --val-every 0 --threads 1 $extra --quiet --log "$log" >/dev/null
    b=$(field "$log" 'r["pipeline"]["bubble"]')
    f=$(field "$log" 'r["pipeline"]["bubble_formula"]')
    s=$(field "$log" 'r["pipeline"]["bubble_simulated"]')
    t=$(field "$log" 'r["tokens_per_s"]')
    o=$(grep '"event":"end"' "$log" | python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["step_ms_over_plan"])')
    printf "| %s | %d | %s | %.3f | %.3f | %.3f | %.0f | %.2f | %.2f |\n" "$cfg" "$m" "$sch" "$b" "$f" "$s" "$t" \
      "$(echo "$t / $one" | bc -l)" "$o"
  done
done
