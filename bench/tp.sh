#!/usr/bin/env bash
# tp.sh — tensor parallelism on this machine: tp 2 (two MPI ranks, one thread each) against one
# process with two threads, configs B and C of common.sh, with and without --sp, interleaved in
# one run so every figure sees the same machine.
#
# Per configuration and mode: the median step time (the end record's median_step_ms), tokens/s and
# their ratio to the one process; the median exposed tensor-parallel communication per step
# (time_ms.comm_tp of the step records: wall time blocked in tp collectives) and the bytes a rank
# sends per step in them (comm_bytes_by_kind); and `scaletrain plan`'s α-β prediction of that
# communication time for the same run (plan --json: time_s.tp, with the hardware profile given by
# --hardware, default the measured profile in $PROFILE if present, else plan's cpu preset).
#
# Training data: the bundled Tiny Shakespeare bytes (ids < 256 are valid for config B's 50257
# vocabulary too), prepared by a first one-process run.
#
# Usage: bench/tp.sh [rounds=3] [steps=10]   (from anywhere; builds nothing)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
rounds=${1:-3}
steps=${2:-10}
ST=build/scaletrain
MPI=${MPIEXEC:-mpirun}
[[ -x $ST ]] || { echo "tp.sh: build first (make build)" >&2; exit 2; }
command -v "$MPI" >/dev/null || { echo "tp.sh: $MPI not found (install openmpi-bin)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
med() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "nan"; else print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
# the end record's median step time of a log
end_ms() { grep '"event":"end"' "$1" | sed -n 's/.*"median_step_ms":\([0-9.e+-]*\).*/\1/p'; }
# per-step values of a field of the step records, steps 3.. (the first steps warm up)
step_field() {
  /usr/bin/python3 - "$1" "$2" <<'EOF'
import json, sys
path, key = sys.argv[1], sys.argv[2]
for line in open(path):
    r = json.loads(line)
    if r.get("event") != "step" or r["step"] < 3: continue
    if key == "comm_tp_ms": print(r["time_ms"]["comm_tp"])
    elif key == "tp_bytes":
        k = r["comm_bytes_by_kind"]
        print(k["tp all-reduce"] + k["tp all-gather"] + k["tp reduce-scatter"])
EOF
}

$ST train --steps 1 --val-every 0 --quiet --log "$tmp/warm.jsonl" >/dev/null # prepares the bundled data

echo "| config | mode | step ms | tokens/s | vs 1 proc x 2 threads | exposed tp comm ms/step | tp MB sent/step/rank | plan α-β tp ms |"
echo "|---|---|---:|---:|---:|---:|---:|---:|"
for cfg in B C; do
  for line in "${configs[@]}"; do
    read -r name L NH C V B T _ <<<"$line"
    [[ $name == "$cfg" ]] && break
  done
  vocab="--vocab $V"; ((V < 257)) && vocab="" # the bytes shards record 257 ids: config C uses theirs
  shape="--layers $L --heads $NH --channels $C $vocab --max-seq-len $T --seq-len $T --micro-batch $B"
  common="train $shape --steps $steps --val-every 0 --quiet --peak-gflops 100"
  for mode in one tp2 tp2sp; do : >"$tmp/$mode.ms"; : >"$tmp/$mode.comm"; : >"$tmp/$mode.bytes"; done
  for ((r = 0; r < rounds; r++)); do
    $ST $common --threads 2 --log "$tmp/one.jsonl" >/dev/null
    end_ms "$tmp/one.jsonl" >>"$tmp/one.ms"
    for mode in tp2 tp2sp; do
      sp=""; [[ $mode == tp2sp ]] && sp="--sp"
      $MPI --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS=1 \
        $ST $common --threads 1 --tp 2 $sp --log "$tmp/$mode.jsonl" >/dev/null
      end_ms "$tmp/$mode.jsonl" >>"$tmp/$mode.ms"
      step_field "$tmp/$mode.jsonl" comm_tp_ms >>"$tmp/$mode.comm"
      step_field "$tmp/$mode.jsonl" tp_bytes >>"$tmp/$mode.bytes"
    done
  done
  one=$(med <"$tmp/one.ms")
  tokens=$((B * T))
  for mode in one tp2 tp2sp; do
    ms=$(med <"$tmp/$mode.ms")
    if [[ $mode == one ]]; then
      awk -v c="$cfg" -v m=$ms -v t=$tokens 'BEGIN {printf "| %s | 1 process x 2 threads | %.1f | %.0f | 1 | – | – | – |\n", c, m, t * 1000 / m}'
      continue
    fi
    sp=""; [[ $mode == tp2sp ]] && sp="--sp"
    pred=$($ST plan $shape --tp 2 $sp --threads 1 --json 2>/dev/null | /usr/bin/python3 -c \
      'import json,sys; j=json.load(sys.stdin); print(1e3*j["time_s"].get("tp", float("nan")))' 2>/dev/null || echo nan)
    awk -v c="$cfg" -v md="$mode" -v m=$ms -v o=$one -v t=$tokens -v cm="$(med <"$tmp/$mode.comm")" \
      -v by="$(med <"$tmp/$mode.bytes")" -v p="$pred" 'BEGIN {
        printf "| %s | tp 2%s, 2 ranks x 1 thread | %.1f | %.0f | %.2f | %.1f | %.1f | %s |\n", c,
          (md == "tp2sp" ? " --sp" : ""), m, t * 1000 / m, o / m, cm, by / 1e6, (p == "nan" ? "–" : sprintf("%.1f", p)) }'
  done
done
