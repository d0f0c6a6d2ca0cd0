#!/usr/bin/env bash
# vocab_sweep.sh — which vocabulary learns fastest per second on Tiny Shakespeare (docs/data.md).
#
# Prepares Tiny Shakespeare (speeches split at blank lines, 10% validation) with the byte tokenizer,
# BPE vocabularies of 2k/4k/8k trained on the training split only, and GPT-2's 50257; then trains
# the demo model on each for about SECONDS of training time (steps = SECONDS / measured ms per step)
# and reports the final validation loss in bits per byte:
#     bpb = val_loss / ln 2 × (validation tokens / validation source bytes)
# Usage: bench/tokenizer/vocab_sweep.sh [BUILD_DIR] [WORK_DIR] [SECONDS]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build}
WORK=${2:-/tmp/scaletrain_vocab_sweep}
SECONDS_BUDGET=${3:-90}
ST=$BUILD/scaletrain
TEXT=$ROOT/data/tinyshakespeare/input.txt
MODEL="--layers 4 --heads 4 --channels 256 --max-seq-len 128 --micro-batch 16 --seq-len 128"
OPT="--lr 2e-3 --min-lr 2e-4 --warmup 20 --threads 2 --peak-gflops 100 --quiet"
mkdir -p "$WORK"
cd "$WORK"

# 1. bytes, and the training split as text (EOT -> a separator line) for the BPE trainer
"$ST" prepare --quiet --separator "" --val-fraction 0.1 --tokenizer bytes --out ts_bytes "$TEXT" >/dev/null
tail -c +1025 ts_bytes/train_000000.bin > train.u16
"$ST" tokenizer decode --tokenizer bytes --format u16le train.u16 -o train_raw.txt 2>/dev/null
python3 -c "
s = open('train_raw.txt', 'rb').read()
open('train.txt', 'wb').write(s.replace(b'<|endoftext|>', b'\n<|endoftext|>\n'))"
# 2. trained vocabularies and their shards
for v in 2048 4096 8192; do
  "$ST" tokenizer train --vocab-size "$v" --holdout 0 --out "tok$v" train.txt >/dev/null
  "$ST" prepare --quiet --separator "" --val-fraction 0.1 --tokenizer "$WORK/tok$v" --out "ts_tok$v" "$TEXT" >/dev/null
done
"$ST" prepare --quiet --separator "" --val-fraction 0.1 --tokenizer gpt2 --out ts_gpt2 "$TEXT" >/dev/null

# 3. calibrate ms/step, train for the budget (re-run once or twice with corrected steps when the
#    measured training time misses the budget by more than 15%: other processes share the cores),
#    report the last run
printf "%-8s %6s %7s %7s %8s %9s %8s\n" vocab V steps train_s val_loss tok/byte val_bpb
for t in bytes tok2048 tok4096 tok8192 gpt2; do
  tk=$t; [ "$t" != bytes ] && [ "$t" != gpt2 ] && tk="$WORK/$t"
  "$ST" train --data "ts_$t/train_*.bin" --tokenizer "$tk" $MODEL $OPT --steps 12 --log "cal_$t.jsonl" >/dev/null
  steps=$(python3 -c "
import json, statistics
ev = [json.loads(l) for l in open('cal_$t.jsonl')]
ms = statistics.median(e['time_ms']['total'] for e in ev if e['event'] == 'step')
print(max(10, int($SECONDS_BUDGET * 1000 / ms)))")
  for attempt in 1 2 3; do
    "$ST" train --data "ts_$t/train_*.bin" --val-data "ts_$t/val_*.bin" --tokenizer "$tk" $MODEL $OPT \
      --steps "$steps" --val-every 0 --val-batches 1000 --log "run_$t.jsonl" >/dev/null
    next=$(python3 -c "
import json
end = [json.loads(l) for l in open('run_$t.jsonl')][-1]
w = end['wall_s']
print($steps if abs(w - $SECONDS_BUDGET) <= 0.15 * $SECONDS_BUDGET else max(10, round($steps * $SECONDS_BUDGET / w)))")
    [ "$next" = "$steps" ] && break
    steps=$next
  done
  python3 - "$t" <<'PY'
import json, math, struct, sys, glob
t = sys.argv[1]
ev = [json.loads(l) for l in open(f"run_{t}.jsonl")]
start = next(e for e in ev if e["event"] == "start")
end = next(e for e in ev if e["event"] == "end")
val = [e for e in ev if e["event"] == "val"][-1]["loss"]
tok = byt = 0
for p in glob.glob(f"ts_{t}/val_*.bin"):
    h = struct.unpack("<8i", open(p, "rb").read(32))
    tok += h[2]; byt += (h[5] & 0xffffffff) | (h[6] << 32)
V = start["config"]["model"]["vocab"]
print(f"{t:<8s} {V:6d} {end['steps']:7d} {end['wall_s']:7.1f} {val:8.4f} {tok/byt:9.4f} {val/math.log(2)*tok/byt:8.4f}")
PY
done
