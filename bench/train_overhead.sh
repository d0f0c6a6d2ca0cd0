#!/usr/bin/env bash
# train_overhead.sh — what the trainer adds to the bare training step: `scaletrain train`'s median
# step time against step_bench's (forward, backward, AdamW on the model alone) for the same shape,
# threads and precision, interleaved in one run so both see the same machine.
#
# Config C of common.sh (6 layers, 384 channels, vocab 256, 8 x 256) trains on the bundled Tiny
# Shakespeare bytes (vocab 256), so no data preparation is needed. The trainer's step includes
# what step_bench leaves out: the loader, the token count, the (single-process) collectives, the
# global norm, clipping, the health detectors and the metrics record.
#
# Usage: bench/train_overhead.sh [rounds=3] [threads=2]   (from anywhere; builds nothing)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
threads=${2:-2}
ST=build/scaletrain
SB=build/bench/step_bench
[[ -x $ST && -x $SB ]] || { echo "train_overhead: build first (make build)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# median of the numbers on stdin
med() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

echo "| precision | step_bench ms | scaletrain train ms | train / step_bench |"
echo "|---|---:|---:|---:|"
for prec in fp32 bf16; do
  : >"$tmp/sb" ; : >"$tmp/tr"
  for ((r = 0; r < rounds; r++)); do
    line=$($SB 6 6 384 256 8 256 12 "$threads" "$prec" none | grep '^RESULT')
    sed -n 's/.*"median_ms": \([0-9.]*\).*/\1/p' <<<"$line" >>"$tmp/sb"
    $ST train --layers 6 --heads 6 --channels 384 --max-seq-len 256 --seq-len 256 --micro-batch 8 \
      --steps 12 --val-every 0 --threads "$threads" --precision "$prec" --quiet --log "$tmp/log.jsonl" >/dev/null
    grep '"event":"end"' "$tmp/log.jsonl" | sed -n 's/.*"median_step_ms":\([0-9.e+-]*\).*/\1/p' >>"$tmp/tr"
  done
  sb=$(med <"$tmp/sb"); tr=$(med <"$tmp/tr")
  awk -v p="$prec" -v a="$sb" -v b="$tr" 'BEGIN {printf "| %s | %.1f | %.1f | %.3f |\n", p, a, b, b / a}'
done
