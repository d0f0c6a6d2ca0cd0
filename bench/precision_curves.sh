#!/usr/bin/env bash
# bf16 vs fp32 on a fixed 1000-step run of a small model (issue 5): the mean training loss of the last
# 100 steps must agree within 0.02 nats. Writes both logs and an overlay report of the two curves.
# usage: [STEPS=1000] bench/precision_curves.sh [outdir=bench/results]
#   STEPS (at least 100) shortens both runs for a smoke test; the issue's comparison is at 1000.
#   The default outdir overwrites the recorded bench/results/bf16_vs_fp32.html: give another one to try it.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/results}
steps=${STEPS:-1000}
[[ $steps =~ ^[0-9]+$ && $steps -ge 100 ]] || { echo "precision_curves: STEPS must be a number >= 100 (the last 100 steps are compared), got '$steps'" >&2; exit 2; }
mkdir -p "$out"
for p in fp32 bf16; do
  build/scaletrain train --layers 4 --heads 4 --channels 256 --max-seq-len 128 --seq-len 128 --micro-batch 16 \
    --lr 2e-3 --min-lr 2e-4 --warmup 50 --steps "$steps" --val-every 0 --precision "$p" --quiet --log "$out/curve_$p.jsonl"
done
/usr/bin/env python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
means = {}
for p in ("fp32", "bf16"):
    loss = [json.loads(l)["loss"] for l in open(f"{out}/curve_{p}.jsonl") if '"event":"step"' in l]
    means[p] = sum(loss[-100:]) / 100
    print(f"{p}: mean loss of the last 100 steps {means[p]:.4f}")
print(f"difference {abs(means['fp32'] - means['bf16']):.4f} nats (target <= 0.02)")
PY
build/scaletrain report "$out/curve_fp32.jsonl" "$out/curve_bf16.jsonl" -o "$out/bf16_vs_fp32.html"
