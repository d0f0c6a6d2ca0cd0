#!/usr/bin/env bash
# bitcheck.sh — is a refactor behaviour-preserving? Runs one fixed set of training runs with two
# binaries and compares, as exact strings, every step record's loss and gradient norms and every
# validation loss. Any difference in any bit of a printed value fails.
#
#   bash scripts/bitcheck.sh BASE_BINARY NEW_BINARY [WORKDIR]
#
# The runs cover the step's paths: one process in fp32, bf16 and fp16, recompute, dropout, muP,
# accumulation, Llama (GQA), and under mpirun dp 2 with ZeRO 0-3, tp 2 (+ sp), pp 2 with 1F1B,
# zb-h1 and interleaved, dp 2 x pp 2, and the matrix optimizers (Muon, Shampoo, Sophia) at dp 2.
# Exits 0 when every run agrees, 1 on the first difference (it prints the run, step and values).
# Negative control: EXTRA_NEW="--seed 7" bash scripts/bitcheck.sh BIN BIN must fail on every run.
set -euo pipefail
BASE=${1:?usage: bitcheck.sh BASE NEW [WORKDIR]}
NEW=${2:?usage: bitcheck.sh BASE NEW [WORKDIR]}
WORK=${3:-$(mktemp -d /tmp/bitcheck.XXXXXX)}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MPI="mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1"
mkdir -p "$WORK"
"$NEW" prepare --tokenizer bytes --separator "" --val-fraction 0.1 --seq-len 32 --out "$WORK/data" \
  "$ROOT/data/tinyshakespeare/input.txt" >/dev/null
COMMON="--data $WORK/data/train_*.bin --val-data $WORK/data/val_*.bin --layers 4 --heads 4 --channels 64 \
 --max-seq-len 32 --seq-len 32 --micro-batch 4 --lr 2e-3 --min-lr 2e-4 --warmup 3 --steps 8 \
 --val-every 4 --val-batches 2 --threads 1 --peak-gflops 100 --quiet"
RUNS=(
  "1|fp32|"
  "1|bf16|--precision bf16 --grad-accum 2"
  "1|fp16|--precision fp16"
  "1|recompute|--recompute full --dropout 0.1"
  "1|selective|--recompute selective --precision bf16"
  "1|mup|--param mup --mup-base-width 32"
  "1|llama|--arch llama --kv-heads 2"
  "1|llama_bf16|--arch llama --kv-heads 2 --precision bf16"
  "1|sophia|--optimizer sophia --hess-every 3"
  "2|dp2_z0|--grad-accum 2"
  "2|dp2_z1|--zero 1"
  "2|dp2_z2|--zero 2 --grad-accum 2"
  "2|dp2_z3|--zero 3 --precision bf16"
  "2|tp2|--tp 2"
  "2|tp2_sp|--tp 2 --sp --arch llama --kv-heads 2"
  "2|pp2_1f1b|--pp 2 --grad-accum 4"
  "2|pp2_zbh1|--pp 2 --grad-accum 4 --pp-schedule zb-h1"
  "2|pp2_zbh1_bf16|--pp 2 --grad-accum 4 --pp-schedule zb-h1 --precision bf16 --arch llama --kv-heads 2"
  "2|tp2_sp_bf16|--tp 2 --sp --precision bf16 --dropout 0.1"
  "2|pp2_int|--pp 2 --grad-accum 4 --pp-schedule interleaved --interleave 2"
  "4|dp2_pp2|--pp 2 --grad-accum 4 --zero 1"
  "2|muon|--optimizer muon --zero 1"
  "2|shampoo|--optimizer shampoo --zero 2"
  "2|sophia_dp2|--optimizer sophia --hess-every 3 --zero 3"
)
fail=0
for spec in "${RUNS[@]}"; do
  IFS='|' read -r np name extra <<<"$spec"
  for which in base new; do
    bin=$BASE; more=""; [ "$which" = new ] && bin=$NEW && more=${EXTRA_NEW:-}
    launch=""; [ "$np" -gt 1 ] && launch="$MPI -np $np"
    log="$WORK/$name.$which.jsonl"
    rm -f "$log"
    # shellcheck disable=SC2086
    if ! $launch "$bin" train $COMMON $extra $more --log "$log" >"$WORK/$name.$which.out" 2>&1; then
      echo "bitcheck: $name ($which) failed: $(tail -1 "$WORK/$name.$which.out")"; fail=1; continue 2
    fi
  done
  if ! /usr/bin/python3 - "$WORK/$name.base.jsonl" "$WORK/$name.new.jsonl" "$name" <<'EOF'
import json, re, sys
def records(path):
    out = []
    for line in open(path):
        ev = json.loads(line)
        if ev.get("event") == "step":
            out.append(("step", ev["step"], repr(ev.get("loss")), repr(ev.get("grad_norm")), repr(ev.get("grad_norm_clipped"))))
        elif ev.get("event") == "val":
            out.append(("val", ev.get("step"), repr(ev.get("loss")), repr(ev.get("val_loss")), ""))
    return out
a, b = records(sys.argv[1]), records(sys.argv[2])
if not a or len(a) != len(b):
    print(f"bitcheck: {sys.argv[3]}: {len(a)} records in base, {len(b)} in new"); sys.exit(1)
for x, y in zip(a, b):
    if x != y:
        print(f"bitcheck: {sys.argv[3]}: differs at {x[0]} {x[1]}: base {x[2:]} new {y[2:]}"); sys.exit(1)
print(f"bitcheck: {sys.argv[3]}: {len(a)} records equal to the bit")
EOF
  then fail=1; fi
done
[ $fail -eq 0 ] && echo "bitcheck: all ${#RUNS[@]} runs equal to the bit" || echo "bitcheck: FAILED"
exit $fail
