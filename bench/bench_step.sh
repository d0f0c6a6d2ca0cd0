#!/usr/bin/env bash
# Side-by-side training-step benchmark: scaletrain (bench/step_bench) vs the PyTorch peer
# (../shared/peers/torch_gpt2_bench.py, Debian python3-torch), same shapes, same threads, random
# tokens, in one run: fp32 against fp32, and bf16 (--precision bf16) against PyTorch's bf16 autocast
# (bench/torch_bf16_peer.py). Prints a Markdown table of median tokens/s and the ratios.
#
# usage: bench/bench_step.sh [rounds=2] [threads=2]     (needs: scripts/install-deps.sh --bench)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-2}
threads=${2:-2}
peer=${PEER:-../shared/peers/torch_gpt2_bench.py}
bin=${BIN:-build/bench/step_bench}
[[ -x $bin ]] || { echo "bench: build first (make build)" >&2; exit 1; }
[[ -f $peer ]] || { echo "bench: PyTorch peer not found at $peer (set PEER=...)" >&2; exit 1; }
/usr/bin/python3 -c "import torch" 2>/dev/null || { echo "bench: run scripts/install-deps.sh --bench" >&2; exit 1; }

source bench/common.sh
require_fast_blas
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

echo "| config | shape (L/C/V, B×T) | PyTorch fp32 tok/s | scaletrain fp32 tok/s | ratio | PyTorch bf16 autocast tok/s | scaletrain bf16 tok/s | ratio | bf16 / fp32 (ours) |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|"
for cfg in "${configs[@]}"; do
  read -r name L NH C V B T steps <<<"$cfg"
  pt=(); st=(); pb=(); sb=()
  for ((r = 0; r < rounds; r++)); do
    # Interleave the programs so background load affects all alike.
    out=$(env "${peer_env[@]}" OMP_NUM_THREADS=$threads /usr/bin/python3 "$peer" --V "$V" --L "$L" --NH "$NH" --C "$C" --B "$B" --T "$T" \
          --steps "$steps" --threads "$threads" | grep '^RESULT')
    pt+=("$(field "$out" tokens_per_s)")
    out=$(OMP_NUM_THREADS=$threads "$bin" "$L" "$NH" "$C" "$V" "$B" "$T" "$steps" "$threads" fp32)
    st+=("$(field "$out" tokens_per_s)")
    out=$(env "${peer_env[@]}" OMP_NUM_THREADS=$threads /usr/bin/python3 bench/torch_bf16_peer.py --peer "$peer" --V "$V" --L "$L" \
          --NH "$NH" --C "$C" --B "$B" --T "$T" --steps "$steps" --threads "$threads" | grep '^RESULT')
    pb+=("$(field "$out" tokens_per_s)")
    out=$(OMP_NUM_THREADS=$threads "$bin" "$L" "$NH" "$C" "$V" "$B" "$T" "$steps" "$threads" bf16)
    sb+=("$(field "$out" tokens_per_s)")
  done
  p=$(printf '%s\n' "${pt[@]}" | median); s=$(printf '%s\n' "${st[@]}" | median)
  q=$(printf '%s\n' "${pb[@]}" | median); b=$(printf '%s\n' "${sb[@]}" | median)
  ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
  printf '| %s | %s/%s/%s, %s×%s | %.0f | %.0f | %s× | %.0f | %.0f | %s× | %s× |\n' "$name" "$L" "$C" "$V" "$B" "$T" \
    "$p" "$s" "$(ratio "$s" "$p")" "$q" "$b" "$(ratio "$b" "$q")" "$(ratio "$b" "$s")"
done
