#!/usr/bin/env bash
# sft-example.sh — supervised fine-tuning end to end on a synthetic task, measured by exact match on
# held-out prompts before and after, with full fine-tuning and with LoRA from the same base
# (docs/finetune.md §2, where the measured figures are).
#
#   bash scripts/sft-example.sh [OUT]          (default OUT = build/sft-example)
#
# Environment: MODE=both|full|lora (both), TASK=upper|copy|add|reverse (upper), LETTERS (4),
#   DIGITS (2, TASK=add), STEPS (500), LORA_STEPS (500), THREADS (1), ST (build/scaletrain),
#   BASE (a weights folder with the bytes tokenizer to start from; default: made here, see below).
# The task: "Upper: eszy" -> "ESZY" (4 random lowercase letters), 8000 training conversations and 200
# held-out prompts that appear nowhere in training, bytes tokenizer, plain chat template.
# The base: unless BASE is given, a byte-level model of the `make demo` model's size (GPT-2, 4 layers,
# 4 heads, 256 channels) pretrained with the demo's recipe on Tiny Shakespeare for 200 steps (kept in
# OUT/base and reused by later runs). The demo's own model (build/demo/model) uses its 8192-id BPE,
# which splits random letter strings irregularly; the byte tokenizer keeps one letter per token.
# Full fine-tuning uses --doc-mask: every conversation of a packed row attends only to itself and
# starts at position 0 (docs/doc-mask.md); LoRA uses --no-pack (one conversation per row).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ST=${ST:-$ROOT/build/scaletrain}
OUT=${1:-$ROOT/build/sft-example}
MODE=${MODE:-both}
TASK=${TASK:-upper}
LETTERS=${LETTERS:-4}
DIGITS=${DIGITS:-2}
STEPS=${STEPS:-500}
LORA_STEPS=${LORA_STEPS:-500}
THREADS=${THREADS:-1}
[[ -x "$ST" ]] || { echo "sft-example: expected the scaletrain binary at $ST (make build), found none" >&2; exit 2; }
case "$MODE" in both|full|lora) ;; *) echo "sft-example: MODE: expected both, full or lora, found '$MODE'" >&2; exit 2;; esac
mkdir -p "$OUT"

if [[ -z "${BASE:-}" ]]; then
  BASE=$OUT/base/model
  if [[ ! -f "$BASE/model.safetensors" ]]; then
    echo "pretraining the base (bytes, demo size, Tiny Shakespeare, 200 steps):"
    "$ST" prepare --quiet --tokenizer bytes --separator "" --val-fraction 0.1 --seq-len 128 --out "$OUT/base/data" \
      "$ROOT/data/tinyshakespeare/input.txt"
    "$ST" train --data "$OUT/base/data/train_*.bin" --val-data "$OUT/base/data/val_*.bin" --tokenizer bytes \
      --layers 4 --heads 4 --channels 256 --max-seq-len 128 --micro-batch 16 --seq-len 128 \
      --lr 2e-3 --min-lr 2e-4 --warmup 20 --steps 200 --val-every 50 --val-batches 20 \
      --threads "$THREADS" --log "$OUT/base/train.jsonl" --out "$BASE" --quiet
  fi
fi

python3 "$ROOT/scripts/make-task.py" "$TASK" --letters "$LETTERS" --digits "$DIGITS" --train 8000 --out "$OUT/task"
"$ST" prepare --quiet --tokenizer bytes --format chat --val-docs 100 --out "$OUT/data" "$OUT/task/train.jsonl"
EM=(--exact-match "$OUT/task/test.jsonl" --max-new-tokens 16 --threads "$THREADS")
SFT=(--init-from "$BASE" --data "$OUT/data/train_*.bin" --val-data "$OUT/data/val_*.bin" --tokenizer bytes
     --micro-batch 16 --seq-len 64 --warmup 20 --val-every 100 --val-batches 4 --threads "$THREADS" --quiet)

echo "before (the base model):"
"$ST" eval "$BASE" "${EM[@]}" --show 0
if [[ "$MODE" != lora ]]; then
  "$ST" train "${SFT[@]}" --doc-mask --lr 2e-3 --min-lr 2e-4 --steps "$STEPS" --log "$OUT/full.jsonl" --out "$OUT/full"
  echo "after $STEPS steps of full fine-tuning:"
  "$ST" eval "$OUT/full" "${EM[@]}" --show 3
fi
if [[ "$MODE" != full ]]; then
  # --no-pack, not --doc-mask: the LoRA loop does not apply document masking (docs/finetune.md §2);
  # one conversation per row starts at position 0 as well. eval needs a weights folder: merge first.
  rm -rf "$OUT/lora-ckpt" # a fresh run each time: train refuses to start over another run's checkpoints
  "$ST" train "${SFT[@]}" --no-pack --lora-rank 16 --lora-alpha 32 --lora-targets all --lr 2e-3 --min-lr 2e-4 \
    --steps "$LORA_STEPS" --log "$OUT/lora.jsonl" --out "$OUT/lora" --ckpt-dir "$OUT/lora-ckpt" --ckpt-every "$LORA_STEPS"
  "$ST" export "$OUT/lora-ckpt" --merge -o "$OUT/lora-merged"
  echo "after $LORA_STEPS steps of LoRA (rank 16, all targets; merged into the base):"
  "$ST" eval "$OUT/lora-merged" "${EM[@]}" --show 3
fi
