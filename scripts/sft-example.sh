#!/usr/bin/env bash
# sft-example.sh — supervised fine-tuning end to end on a synthetic task, measured by exact match on
# held-out prompts before and after (docs/finetune.md §2).
#
#   bash scripts/sft-example.sh [OUT]          (default OUT = build/sft-example)
#
# Environment: TASK=add|reverse (add), DIGITS (2), STEPS (700), THREADS (2), ST (build/scaletrain).
# Measured figures (and what they say) are in docs/finetune.md §2.
# The base is `make demo`'s model (build/demo/model, its tokenizer build/demo/tok) when it exists;
# otherwise a model of the demo's size (4 layers, 4 heads, 256 channels) trained from scratch, with a
# BPE tokenizer of the demo's recipe (8192 ids on Tiny Shakespeare) made here.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ST=${ST:-$ROOT/build/scaletrain}
OUT=${1:-$ROOT/build/sft-example}
TASK=${TASK:-add}
DIGITS=${DIGITS:-2}
STEPS=${STEPS:-700}
THREADS=${THREADS:-2}
[[ -x "$ST" ]] || { echo "sft-example: expected the scaletrain binary at $ST (make build), found none" >&2; exit 2; }
mkdir -p "$OUT"

python3 "$ROOT/scripts/make-task.py" "$TASK" --digits "$DIGITS" --train 8000 --out "$OUT/task"
if [[ -f "$ROOT/build/demo/model/model.safetensors" ]]; then
  TOK=$ROOT/build/demo/tok
  MODEL=(--init-from "$ROOT/build/demo/model")
  BASE=$ROOT/build/demo/model
else
  TOK=$OUT/tok
  [[ -d "$TOK" ]] || "$ST" tokenizer train --vocab-size 8192 --separator "" --out "$TOK" "$ROOT/data/tinyshakespeare/input.txt"
  MODEL=(--layers 4 --heads 4 --channels 256 --max-seq-len 128)
  BASE=
fi
"$ST" prepare --quiet --tokenizer "$TOK" --format chat --val-docs 100 --out "$OUT/data" "$OUT/task/train.jsonl"
if [[ -n "$BASE" ]]; then
  echo "before (the base model):"
  "$ST" eval "$BASE" --exact-match "$OUT/task/test.jsonl" --max-new-tokens 8 --show 0 --threads "$THREADS" --tokenizer "$TOK"
fi
"$ST" train "${MODEL[@]}" --data "$OUT/data/train_*.bin" --val-data "$OUT/data/val_*.bin" --tokenizer "$TOK" \
  --micro-batch 16 --seq-len 64 --lr 2e-3 --min-lr 2e-4 --warmup 20 --steps "$STEPS" --val-every 100 --val-batches 4 \
  --threads "$THREADS" --log "$OUT/train.jsonl" --out "$OUT/model" --quiet
echo "after $STEPS steps of SFT:"
"$ST" eval "$OUT/model" --exact-match "$OUT/task/test.jsonl" --max-new-tokens 8 --show 3 --threads "$THREADS"
