#!/usr/bin/env bash
# vocab_sweep.sh — which vocabulary learns fastest per second on Tiny Shakespeare (docs/data.md).
#
# Prepares Tiny Shakespeare (speeches split at blank lines, 10% validation) with the byte tokenizer,
# BPE vocabularies of 2k/4k/8k trained on the training split only, and GPT-2's 50257; then trains
# the demo model on each for SECONDS of idle-machine training time (steps = SECONDS / the step time
# estimated from CPU time, see 3.) and reports the final validation loss in bits per byte:
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
# absolute paths: the script works inside WORK, and BUILD_DIR or WORK_DIR may be given relative
ST=$(cd "$BUILD" && pwd)/scaletrain
WORK=$(cd "$WORK" && pwd)
[[ -x $ST ]] || { echo "vocab_sweep: $ST not found: build first (make build)" >&2; exit 2; }
cd "$WORK"

# 1. bytes, and the training split as text for the BPE trainer (EOT -> a blank line, as in the source)
"$ST" prepare --quiet --separator "" --val-fraction 0.1 --tokenizer bytes --out ts_bytes "$TEXT" >/dev/null
tail -c +1025 ts_bytes/train_000000.bin > train.u16
"$ST" tokenizer decode --tokenizer bytes --format u16le train.u16 -o train_raw.txt 2>/dev/null
python3 -c "
s = open('train_raw.txt', 'rb').read()
open('train.txt', 'wb').write(s.replace(b'<|endoftext|>', b'\n\n'))"
# 2. trained vocabularies and their shards
for v in 2048 4096 8192; do
  "$ST" tokenizer train --vocab-size "$v" --holdout 0 --out "tok$v" train.txt >/dev/null
  "$ST" prepare --quiet --separator "" --val-fraction 0.1 --tokenizer "$WORK/tok$v" --out "ts_tok$v" "$TEXT" >/dev/null
done
"$ST" prepare --quiet --separator "" --val-fraction 0.1 --tokenizer gpt2 --out ts_gpt2 "$TEXT" >/dev/null

# 3. step cost of each vocabulary in CPU seconds, which other processes sharing the cores barely
#    change (wall time on this shared VM varied 3x): CPU time of a 12-step run minus a 4-step run,
#    with passive OpenMP waiting (no spinning), divided by 8 steps and by the 2 threads = the step
#    time of an idle 2-core machine at perfect parallel efficiency.
VOCABS="bytes tok2048 tok4096 tok8192 gpt2"
tokspec() { case $1 in bytes|gpt2) echo "$1" ;; *) echo "$WORK/$1" ;; esac; }
cpu_of() { # steps -> user+sys seconds
  OMP_WAIT_POLICY=passive /usr/bin/time -f "%U %S" -o cpu.txt "$ST" train --data "ts_$1/train_*.bin" \
    --tokenizer "$(tokspec $1)" $MODEL $OPT --steps "$2" >/dev/null
  awk '{print $1 + $2}' cpu.txt
}
for t in $VOCABS; do
  c4=$(cpu_of "$t" 4); c12=$(cpu_of "$t" 12)
  python3 -c "print(($c12 - $c4) / 8 / 2 * 1000)" > "ms_$t.txt"
done
# 4. train each for SECONDS of idle-machine time (steps = SECONDS / step time of 3.); validate on the
#    whole validation split at the end
printf "%-8s %6s %8s %6s %8s %8s %9s %8s\n" vocab V cpu_ms steps wall_s val_loss tok/byte val_bpb
for t in $VOCABS; do
  ms=$(cat "ms_$t.txt")
  steps=$(python3 -c "print(max(10, round($SECONDS_BUDGET * 1000 / $ms)))")
  "$ST" train --data "ts_$t/train_*.bin" --val-data "ts_$t/val_*.bin" --tokenizer "$(tokspec $t)" $MODEL $OPT \
    --steps "$steps" --val-every 0 --val-batches 1000 --log "run_$t.jsonl" >/dev/null
  python3 - "$t" "$ms" <<'PY'
import json, math, struct, sys, glob
t, ms = sys.argv[1], float(sys.argv[2])
ev = [json.loads(l) for l in open(f"run_{t}.jsonl")]
start = next(e for e in ev if e["event"] == "start")
end = next(e for e in ev if e["event"] == "end")
val = [e for e in ev if e["event"] == "val"][-1]["loss"]
tok = byt = 0
for p in glob.glob(f"ts_{t}/val_*.bin"):
    h = struct.unpack("<8i", open(p, "rb").read(32))
    tok += h[2]; byt += (h[5] & 0xffffffff) | (h[6] << 32)
V = start["config"]["model"]["vocab"]
print(f"{t:<8s} {V:6d} {ms:8.1f} {end['steps']:6d} {end['wall_s']:8.1f} {val:8.4f} {tok/byt:9.4f} {val/math.log(2)*tok/byt:8.4f}")
PY
done
