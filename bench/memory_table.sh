#!/usr/bin/env bash
# Memory table: configs A, B, C of bench_step.sh × precision (fp32, bf16) × recompute (none,
# selective, full). For each: scaletrain's median step time, the bytes it allocates (equal to the
# layout function's plan, which test_memory checks) and its peak RSS (/usr/bin/time, so libraries
# and the runtime are included); then the PyTorch peer's peak RSS for the same fp32 step.
# Prints a Markdown table.
#
# usage: bench/memory_table.sh [threads=2] [steps=4]     (needs: scripts/install-deps.sh --bench)
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-2}
steps=${2:-4}
peer=${PEER:-../shared/peers/torch_gpt2_bench.py}
bin=${BIN:-build/bench/step_bench}
[[ -x $bin ]] || { echo "memory_table: build first (make build)" >&2; exit 1; }
[[ -x /usr/bin/time ]] || { echo "memory_table: needs /usr/bin/time (apt-get install time)" >&2; exit 1; }

source bench/common.sh
require_fast_blas
mib() { awk -v b="$1" 'BEGIN {printf "%.0f", b / 1048576}'; }
rss_mib() { awk '{printf "%.0f", $1 / 1024}' "$1"; } # /usr/bin/time %M is in KiB

tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
echo "| config | precision | recompute none / selective / full: step ms | allocated MiB | peak RSS MiB | PyTorch fp32 peak RSS MiB |"
echo "|---|---|---|---|---|---:|"
for cfg in "${configs[@]}"; do
  read -r name L NH C V B T _ <<<"$cfg"
  pt=""
  if [[ -f $peer ]] && /usr/bin/python3 -c "import torch" 2>/dev/null; then
    OMP_NUM_THREADS=$threads /usr/bin/time -f "%M" -o "$tmp" /usr/bin/python3 "$peer" --V "$V" --L "$L" --NH "$NH" \
      --C "$C" --B "$B" --T "$T" --steps "$steps" --threads "$threads" >/dev/null
    pt=$(rss_mib "$tmp")
  fi
  for prec in fp32 bf16; do
    ms=(); al=(); rs=()
    for rc in none selective full; do
      out=$(OMP_NUM_THREADS=$threads /usr/bin/time -f "%M" -o "$tmp" "$bin" "$L" "$NH" "$C" "$V" "$B" "$T" "$steps" \
            "$threads" "$prec" "$rc")
      ms+=("$(printf '%.0f' "$(field "$out" median_ms)")")
      al+=("$(mib "$(field "$out" allocated_bytes)")")
      rs+=("$(rss_mib "$tmp")")
    done
    printf '| %s | %s | %s / %s / %s | %s / %s / %s | %s / %s / %s | %s |\n' "$name" "$prec" "${ms[@]}" "${al[@]}" \
      "${rs[@]}" "${pt:-n/a}"
  done
done
