#!/usr/bin/env bash
# prepare at scale (issue 29): generates a JSON Lines corpus of SIZE bytes (gen_corpus.py: tagged,
# shuffled copies of Tiny Shakespeare's speeches, 1% exact duplicates, 16 files), prepares it with
# the GPT-2 tokenizer and records wall time, CPU time, peak RSS and the load average.
# Usage: bench/prepare/prepare_scale.sh [BUILD] [WORK] [SIZE_BYTES] [THREADS]
#   defaults: build /tmp/prepare_scale 5e9 2. Needs about 2.3 x SIZE of free disk in WORK
#   (corpus, runs, shards); WORK is removed at the end unless KEEP=1.
# Prints one Markdown table row for bench/results/prepare.md.
set -euo pipefail
BUILD=${1:-build}
WORK=${2:-/tmp/prepare_scale}
SIZE=${3:-5e9}
THREADS=${4:-2}
ST=$BUILD/scaletrain
here=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$WORK"
mkdir -p "$WORK"
python3 "$here/bench/prepare/gen_corpus.py" "$here/data/tinyshakespeare/input.txt" "$WORK/corpus" "$SIZE" 16
in_bytes=$(du -sb "$WORK/corpus" | cut -f1)
load0=$(cut -d' ' -f1-3 /proc/loadavg)
/usr/bin/time -v -o "$WORK/time.txt" "$ST" prepare --tokenizer gpt2 --tokenizer-dir "$here/data/gpt2_tokenizer" \
  --threads "$THREADS" --val-fraction 0.01 --out "$WORK/out" "$WORK/corpus" >"$WORK/prepare.txt" 2>"$WORK/progress.txt"
load1=$(cut -d' ' -f1-3 /proc/loadavg)
cat "$WORK/prepare.txt"
tail -n 3 "$WORK/progress.txt"
rss_kb=$(awk -F': ' '/Maximum resident/ {print $2}' "$WORK/time.txt")
wall=$(awk -F': ' '/Elapsed \(wall/ {split($2, t, ":"); s = 0; for (i = 1; i <= length(t); i++) s = s * 60 + t[i]; print s}' "$WORK/time.txt")
user=$(awk -F': ' '/User time/ {print $2}' "$WORK/time.txt")
sys=$(awk -F': ' '/System time/ {print $2}' "$WORK/time.txt")
shard_bytes=$(du -cb "$WORK"/out/*.bin | tail -n 1 | cut -f1)
awk -v ib="$in_bytes" -v w="$wall" -v u="$user" -v s="$sys" -v r="$rss_kb" -v t="$THREADS" -v l0="$load0" -v l1="$load1" \
    -v sb="$shard_bytes" -v d="$(date -u +%Y-%m-%dT%H:%MZ)" 'BEGIN {
  printf "| %s | %.2f GB | %d | %.0f s | %.1f MB/s | %.1f MB/s | %.1f MB/s | %.0f MB | %.2f GB | %s -> %s |\n",
         d, ib / 1e9, t, w, ib / w / 1e6, ib / w / 1e6 / t, ib / (u + s) / 1e6, r / 1024, sb / 1e9, l0, l1 }'
[[ "${KEEP:-0}" == 1 ]] || rm -rf "$WORK"
