#!/usr/bin/env bash
# run.sh — GPT-2 encode throughput per core: scaletrain's tokenizer_encode vs npm tiktoken 1.0.22
# (node), in the same run, on the bundled corpora, pinned to one core, with an identical-ids check.
# Usage: bench/tokenizer/run.sh [BUILD_DIR] [REPS] [CORE]   (needs node + npm; see setup.sh)
# The extra corpora are in the shared folder beside the repository checkout ($(dirname repo)/shared,
# as ../shared elsewhere in bench/); SHARED=DIR or PUBLIC_DOMAIN=DIR point elsewhere.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build}
REPS=${2:-5}
CORE=${3:-0}
SHARED=${SHARED:-$(dirname "$ROOT")/shared}
PD=${PUBLIC_DOMAIN:-$SHARED/data/public_domain}
[[ -d $PD ]] || { echo "tokenizer bench: corpora not found at $PD (set SHARED=DIR or PUBLIC_DOMAIN=DIR)" >&2; exit 1; }
TIK=${TIKTOKEN_DIR:-/tmp/scaletrain_tiktoken}
WORK=$(mktemp -d /tmp/tok_bench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
bash "$ROOT/bench/tokenizer/setup.sh" "$TIK" >/dev/null
# Our driver, against the static libraries of the build (make sure they are current).
cmake --build "$BUILD" --target st_data >/dev/null
cc -O2 -std=c11 -D_GNU_SOURCE -I"$ROOT/src" "$ROOT/bench/tokenizer/tok_bench.c" \
  "$BUILD/libst_data.a" "$BUILD/libst_core.a" -fopenmp -lcjson -lxxhash -lm -o "$WORK/tok_bench"
GPT2=$ROOT/data/gpt2_tokenizer
FILES="$ROOT/data/tinyshakespeare/input.txt $PD/moby_dick.txt $PD/austen.txt $PD/sotu.txt"
cat $FILES > "$WORK/all.txt"
echo "core $CORE ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), best of $REPS, $(node --version)"
printf "%-14s %10s %9s %12s %12s %7s %s\n" corpus bytes tokens "ours MB/s" "tiktoken MB/s" ratio ids
for f in $FILES "$WORK/all.txt"; do
  a=$(taskset -c "$CORE" "$WORK/tok_bench" "$GPT2" "$f" "$WORK/ours.u32" "$REPS")
  b=$(taskset -c "$CORE" node "$ROOT/bench/tokenizer/tiktoken_encode.cjs" "$TIK" "$f" "$WORK/tik.u32" "$REPS")
  same=$(cmp -s "$WORK/ours.u32" "$WORK/tik.u32" && echo identical || echo DIFFERENT)
  python3 - "$(basename "$f")" "$a" "$b" "$same" <<'PY'
import json, sys
name, a, b, same = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4]
ours, tik = a["bytes"] / a["seconds"] / 1e6, b["bytes"] / b["seconds"] / 1e6
print(f"{name:<14s} {a['bytes']:10d} {a['tokens']:9d} {ours:12.1f} {tik:12.1f} {ours / tik:7.2f} {same}")
PY
done
