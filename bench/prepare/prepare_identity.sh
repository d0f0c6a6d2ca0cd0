#!/usr/bin/env bash
# The same shards at benchmark scale (issue 29): a SIZE-byte corpus (gen_corpus.py, 16 files) prepared
# (a) from the directory with 2 threads, (b) as one file (the 16 concatenated in reverse order) with
# 1 thread, (c) from the 16 files listed in reverse with 4 threads, (d) from standard input through
# zstd compression, (e) killed with SIGKILL part-way and run again (resume), (f) with another seed
# (a control: must differ). Prints each run's shard checksum; exits 1 unless (a)-(e) are equal and
# (f) differs.
# Usage: bench/prepare/prepare_identity.sh [BUILD] [WORK] [SIZE_BYTES]   (defaults: build /tmp/prepare_identity 3e8)
set -euo pipefail
BUILD=${1:-build}
WORK=${2:-/tmp/prepare_identity}
SIZE=${3:-3e8}
here=$(cd "$(dirname "$0")/../.." && pwd)
ST="$BUILD/scaletrain"
flags=(--tokenizer gpt2 --tokenizer-dir "$here/data/gpt2_tokenizer" --val-fraction 0.01 --seq-len 0
       --shard-tokens 20000000 --memory 32)
rm -rf "$WORK"
mkdir -p "$WORK"
python3 "$here/bench/prepare/gen_corpus.py" "$here/data/tinyshakespeare/input.txt" "$WORK/corpus" "$SIZE" 16
mapfile -t files < <(ls "$WORK"/corpus/*.jsonl | sort -r)
cat "${files[@]}" > "$WORK/all.jsonl"
sum() { (cd "$1" && cat train_*.bin val_*.bin | sha256sum | cut -c1-16); }
t0=$(date +%s.%N)
"$ST" prepare --quiet "${flags[@]}" --threads 2 --out "$WORK/a" "$WORK/corpus" >/dev/null
t1=$(date +%s.%N)
"$ST" prepare --quiet "${flags[@]}" --threads 1 --out "$WORK/b" "$WORK/all.jsonl" >/dev/null
"$ST" prepare --quiet "${flags[@]}" --threads 4 --out "$WORK/c" "${files[@]}" >/dev/null
if command -v zstd >/dev/null; then
  zstd -q -1 -c "$WORK/all.jsonl" | "$ST" prepare --quiet "${flags[@]}" --format jsonl --out "$WORK/d" - >/dev/null
else
  gzip -1 -c "$WORK/all.jsonl" | "$ST" prepare --quiet "${flags[@]}" --format jsonl --out "$WORK/d" - >/dev/null
fi
# (e): killed after about half of (a)'s time, then the same command again
half=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", (b - a) / 2 }')
"$ST" prepare --quiet "${flags[@]}" --threads 2 --out "$WORK/e" "$WORK/corpus" >/dev/null &
pid=$!
sleep "$half"
kill -9 "$pid" 2>/dev/null && echo "prepare_identity: killed prepare (pid $pid) after $half s; runs left: $(ls "$WORK/e/.prepare" 2>/dev/null | grep -c run_ || true)"
wait "$pid" 2>/dev/null || true
"$ST" prepare --threads 2 "${flags[@]}" --out "$WORK/e" "$WORK/corpus" 2>/dev/null | grep -E "resumed|documents" || true
"$ST" prepare --quiet "${flags[@]}" --seed 7 --threads 2 --out "$WORK/f" "$WORK/corpus" >/dev/null
ok=1
ref=$(sum "$WORK/a")
for r in a b c d e f; do
  s=$(sum "$WORK/$r")
  echo "prepare_identity: $r $s"
  if [[ $r == f ]]; then [[ $s != "$ref" ]] || ok=0; else [[ $s == "$ref" ]] || ok=0; fi
done
[[ "${KEEP:-0}" == 1 ]] || rm -rf "$WORK"
if [[ $ok == 1 ]]; then echo "prepare_identity: OK (a-e equal, f differs)"; else echo "prepare_identity: FAIL"; exit 1; fi
