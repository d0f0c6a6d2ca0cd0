#!/usr/bin/env bash
# tp_speed.sh — tensor parallelism on this 2-core machine (issue 13, Speed): `scaletrain train` at
# tp 2 (two ranks of one thread, mpirun) with and without --sp, against one process of two threads,
# on configs B and C of common.sh (6 layers, 6 heads, 384 channels, 8 x 256; vocab 50257 and 256),
# interleaved round by round so all see the same machine.
#
# Per run: the median step time (end record), tokens/s, and from the step records after the first
# the median exposed tp communication per step (time_ms.comm_tp: time blocked in the tp collectives,
# which includes waiting for the slower rank) and the tp bytes per step (comm_bytes_by_kind). Beside
# them the plan's α-β time of the same collectives (compute.time_s.tp of `plan --json` with the
# cpu-zen4-2c preset on one node: 10 GB/s, 1 µs; docs/comm.md measured 8-10 GB/s and 1-2 µs for the
# in-place all-reduce up to 4 MiB) and its byte count (comm_bytes_by_kind), which must equal the
# measured one.
#
# Both configs train on the bundled Tiny Shakespeare bytes (ids < 257); B sets --vocab 50257 (the
# head's cost), C --vocab 257 (common.sh's 256 plus the end-of-text id).
# Usage: bench/tp_speed.sh [rounds=3] [steps=8]   (from anywhere; builds nothing; needs mpirun)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
steps=${2:-8}
ST=build/scaletrain
[[ -x $ST ]] || { echo "tp_speed: build first (make build)" >&2; exit 2; }
command -v mpirun >/dev/null || { echo "tp_speed: mpirun not found" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
MPI="mpirun --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS=1"
# median of the numbers on stdin
med() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
# step records after the first: field extractors
after_first() { grep '"event":"step"' "$1" | tail -n +2; }
comm_tp() { after_first "$1" | sed -n 's/.*"comm_tp":\([0-9.e+-]*\).*/\1/p'; }
tp_bytes() {
  after_first "$1" | head -1 | python3 -c 'import json,sys; k=json.loads(sys.stdin.read())["comm_bytes_by_kind"]; print(int(sum(v for n,v in k.items() if n.startswith("tp "))))'
}
plan_field() { python3 -c 'import json,sys; j=json.load(sys.stdin); print(eval(sys.argv[1]))' "$1"; }

echo "| config | run | step ms (median) | tokens/s | vs 1 process | exposed tp comm ms/step (median) | plan α-β tp ms/step | tp MB/step measured = planned |"
echo "|---|---|---:|---:|---:|---:|---:|---|"
for cfg in B C; do
  V=$([[ $cfg == B ]] && echo 50257 || echo 257) # C: the bundled bytes and their end-of-text id
  shape="--layers 6 --heads 6 --channels 384 --vocab $V --max-seq-len 256 --seq-len 256 --micro-batch 8"
  for mode in one tp2 tp2sp; do : >"$tmp/$cfg.$mode.ms"; : >"$tmp/$cfg.$mode.comm"; done
  for ((r = 0; r < rounds; r++)); do
    for mode in one tp2 tp2sp; do
      log="$tmp/$cfg.$mode.$r.jsonl"
      case $mode in
        one) $ST train $shape --steps "$steps" --val-every 0 --threads 2 --quiet --log "$log" >/dev/null ;;
        tp2) $MPI $ST train $shape --steps "$steps" --val-every 0 --threads 1 --tp 2 --quiet --log "$log" >/dev/null ;;
        tp2sp) $MPI $ST train $shape --steps "$steps" --val-every 0 --threads 1 --tp 2 --sp --quiet --log "$log" >/dev/null ;;
      esac
      grep '"event":"end"' "$log" | sed -n 's/.*"median_step_ms":\([0-9.e+-]*\).*/\1/p' >>"$tmp/$cfg.$mode.ms"
      comm_tp "$log" >>"$tmp/$cfg.$mode.comm"
      cp "$log" "$tmp/$cfg.$mode.last.jsonl"
    done
  done
  one=$(med <"$tmp/$cfg.one.ms")
  for mode in one tp2 tp2sp; do
    ms=$(med <"$tmp/$cfg.$mode.ms")
    if [[ $mode == one ]]; then
      awk -v c="$cfg" -v m="$ms" 'BEGIN {printf "| %s | 1 process, 2 threads | %.1f | %.0f | 1 | - | - | - |\n", c, m, 2048 / (m * 1e-3)}'
      continue
    fi
    sp=$([[ $mode == tp2sp ]] && echo "--sp" || echo "")
    pj=$($ST plan $shape --grad-accum 1 --threads 1 --tp 2 $sp --devices-per-node 2 --json)
    ptp=$(plan_field 'j["compute"]["time_s"]["tp"]*1e3' <<<"$pj")
    pbytes=$(plan_field 'int(sum(v for n,v in j["comm_bytes_by_kind"].items() if n.startswith("tp ")))' <<<"$pj")
    mbytes=$(tp_bytes "$tmp/$cfg.$mode.last.jsonl")
    comm=$(med <"$tmp/$cfg.$mode.comm")
    awk -v c="$cfg" -v md="tp 2${sp:+ --sp}, 1 thread per rank" -v m="$ms" -v o="$one" -v cm="$comm" -v p="$ptp" \
        -v mb="$mbytes" -v pb="$pbytes" \
      'BEGIN {printf "| %s | %s | %.1f | %.0f | %.2f | %.1f | %.1f | %.1f %s %.1f |\n", c, md, m, 2048 / (m * 1e-3), o / m, cm, p,
              mb / 1e6, (mb == pb) ? "=" : "!=", pb / 1e6}'
  done
done
echo
echo "rounds $rounds, $steps steps per run; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
