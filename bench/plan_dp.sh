#!/usr/bin/env bash
# The plan's predicted step time against the measured one under data parallelism: configs B and C
# (bench/common.sh) on 2 ranks of one thread each, ZeRO 0-3, mpirun --oversubscribe on this machine.
# Each run's end record has the plan's step time and the measured median (step_ms_over_plan is the
# line `plan: predicted ... measured ...`); the start record has the plan. Also prints the measured
# breakdown (rank 0's median forward / backward / exposed comm / optimizer, ms) beside the plan's
# terms (plan --json: matmul, elementwise, dp communication and its part compute cannot hide,
# optimizer, ms), and the fastest step of all rounds (the least disturbed by other load on the
# machine). The last column is the end record's gemm_check (the trainer's GEMM check at start and end
# over this machine's cached figure: under 1, the machine ran slower than the figures that priced
# the plan; 0.00 where the peak was not cached). Results: bench/results/plan_dp.md.
#
# A one-process run of the same per-rank work (one thread) is the reference: what a rank computes
# when it has the machine's other core to itself.
#
# usage: [ROUNDS=2] bench/plan_dp.sh [steps=6] [extra train flags, e.g. --hardware hw.json]
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-6}
rounds=${ROUNDS:-2}
shift || true
extra=("$@")
bin=${BIN:-build/scaletrain}
[[ -x $bin ]] || { echo "plan_dp: build first (make build)" >&2; exit 1; }
source bench/common.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Random-looking token shards of each vocabulary (step time does not depend on the tokens).
shard() { # shard FILE VOCAB
  python3 - "$1" "$2" <<'PY'
import array, struct, sys
path, V, n = sys.argv[1], int(sys.argv[2]), 300000
hdr = [20240520, 1, n, 0, 0, 0, 0, V] + [0] * 248
tok = array.array('H', [(i * 7919 + (i // 13) * 31) % V for i in range(n)])
with open(path, 'wb') as f:
    f.write(struct.pack('<256i', *hdr)); f.write(tok.tobytes())
PY
}

# median of the step records' time_ms.KEY after the first step, and end-record fields
summary() { # summary LOG
  python3 - "$1" <<'PY'
import json, statistics, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
steps = [r for r in recs if r['event'] == 'step'][1:]
end = [r for r in recs if r['event'] == 'end'][-1]
med = lambda k: statistics.median(s['time_ms'][k] for s in steps)
print(f"{end.get('planned_step_ms', 0):.1f} {end['median_step_ms']:.1f} {end.get('step_ms_over_plan', 0):.2f} "
      f"{med('forward'):.1f} {med('backward'):.1f} {med('comm'):.1f} {med('optimizer'):.1f} "
      f"{statistics.median(s['comm_bytes'] for s in steps) / 1e6:.1f} "
      f"{[r for r in recs if r['event'] == 'start'][-1]['peak_flops'] / 1e12:.6f} "
      f"{min(s['time_ms']['total'] for s in steps):.1f} "
      f"{end.get('gemm_check', {}).get('start', 0):.2f}/{end.get('gemm_check', {}).get('end', 0):.2f}")
PY
}

plan_terms() { # plan_terms PLAN-FLAGS...: matmul elementwise dp dp_exposed optimizer (ms) of plan --json
  "$bin" plan "$@" --json | python3 -c '
import json, sys
t = json.load(sys.stdin)["compute"]["time_s"]
print(" ".join(f"{1e3 * t[k]:.1f}" for k in ("matmul", "elementwise", "dp", "dp_exposed", "optimizer")))'
}

# run NAME NP ZERO: one training run (np 1: one process without mpirun), one thread per process.
run() {
  local launch=()
  [[ $2 -gt 1 ]] && launch=(mpirun --allow-run-as-root --oversubscribe -np "$2" -x OMP_NUM_THREADS=1)
  OMP_NUM_THREADS=1 "${launch[@]}" "$bin" train --data "$data" --layers "$L" --heads "$NH" --channels "$C" --vocab "$V" \
    --max-seq-len "$T" --seq-len "$T" --micro-batch "$B" --steps "$steps" --threads 1 --zero "$3" --val-every 0 \
    --quiet --log "$tmp/$1.jsonl" "${extra[@]}" >/dev/null
}

echo "| config | ranks, ZeRO | planned ms | measured median ms | median / planned | fastest step ms | fastest / planned | measured fwd / bwd / exposed comm / opt (ms) | comm MB/step | plan: matmul / elementwise / dp comm (not hidden) / opt (ms) | GEMM check start / end |"
echo "|---|---|---:|---:|---:|---:|---:|---|---:|---|---:|"
for cfg in "${configs[@]}"; do
  read -r name L NH C V B T _ <<<"$cfg"
  [[ $name == A ]] && continue
  data=$tmp/v$V.bin
  [[ -f $data ]] || shard "$data" "$V"
  # Rounds interleave the grids so background load falls on all alike; each row is its best round.
  for ((r = 0; r < rounds; r++)); do
    run "${name}_1_$r" 1 0
    for zero in 0 1 2 3; do run "${name}_2z${zero}_$r" 2 "$zero"; done
  done
  for grid in 1 2z0 2z1 2z2 2z3; do
    best=
    for ((r = 0; r < rounds; r++)); do
      row=$(summary "$tmp/${name}_${grid}_$r.jsonl")
      if [[ -z $best ]] || awk -v a="$row" -v b="$best" 'BEGIN {split(a, x); split(b, y); exit !(x[2] < y[2])}'; then
        best=$row
      fi
    done
    read -r planned measured ratio fwd bwd comm opt mb peak _ check _ <<<"$best"
    fastest=$(for ((r = 0; r < rounds; r++)); do summary "$tmp/${name}_${grid}_$r.jsonl" | awk '{print $10}'; done | sort -g | head -1)
    np=${grid:0:1}; zero=${grid:2:1}; zero=${zero:-0}
    # The trainer's plan: the preset with the peak it measured (or the --hardware profile given).
    hw=(--peak-tflops "$peak")
    for ((i = 0; i < ${#extra[@]}; i++)); do [[ ${extra[i]} == --hardware ]] && hw=(--hardware "${extra[i + 1]}"); done
    read -r tm te td tx to <<<"$(plan_terms --layers "$L" --heads "$NH" --channels "$C" --vocab "$V" --max-seq-len "$T" \
      --seq-len "$T" --micro-batch "$B" --threads 1 --dp "$np" --zero "$zero" "${hw[@]}")"
    printf '| %s (%s/%s/%s, %s×%s) | %s, ZeRO %s | %s | %s | %s | %s | %.2f | %s / %s / %s / %s | %s | %s / %s / %s (%s) / %s | %s |\n' \
      "$name" "$L" "$C" "$V" "$B" "$T" "$np" "$zero" "$planned" "$measured" "$ratio" "$fastest" \
      "$(awk -v a="$fastest" -v b="$planned" 'BEGIN {print a / b}')" "$fwd" "$bwd" "$comm" "$opt" "$mb" "$tm" "$te" "$td" \
      "$tx" "$to" "$check"
  done
done
