#!/usr/bin/env bash
# Llama against GPT-2 at the same FLOPs per token (issue 15), and against a PyTorch Llama of the same
# shape, in one run: config B (GPT-2: 6 layers, 6 heads, C 384, V 50257, 8 × 256) beside B-llama
# (6 layers, 6 query heads over 2 KV heads, C 384, F 1194, untied head, V 50257, 8 × 256), whose
# block matmul weights C·(C + 2·KV·hs) + C² + 3·C·F = 1768704 are 0.04 % under B's 12C² = 1769472
# (the RESULT lines print both FLOPs per token). Programs are interleaved per round so background load
# affects all alike; medians over rounds. MFU is each step's model FLOP/s over the peak of the GEMM
# precision measured by step_bench in the same process.
#
# usage: bench/llama_step.sh [rounds=3] [threads=2]     (needs Debian's python3-torch)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
threads=${2:-2}
bin=${BIN:-build/bench/step_bench}
gpeer=${PEER:-../shared/peers/torch_gpt2_bench.py}
lpeer=bench/torch_llama_peer.py
[[ -x $bin ]] || { echo "bench: build first (make build)" >&2; exit 1; }
/usr/bin/python3 -c "import torch" 2>/dev/null || { echo "bench: run scripts/install-deps.sh --bench" >&2; exit 1; }
source bench/common.sh
require_fast_blas
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
L=6 NH=6 C=384 V=50257 B=8 T=256 KV=2 F=1194 steps=8
declare -A tok mfu
for ((r = 0; r < rounds; r++)); do
  for prec in fp32 bf16; do
    out=$(OMP_NUM_THREADS=$threads "$bin" $L $NH $C $V $B $T $steps $threads $prec none gpt2 | grep '^RESULT')
    tok[gpt2_$prec]+="$(field "$out" tokens_per_s) "; mfu[gpt2_$prec]+="$(field "$out" mfu) "
    out=$(OMP_NUM_THREADS=$threads "$bin" $L $NH $C $V $B $T $steps $threads $prec none llama $KV $F | grep '^RESULT')
    tok[llama_$prec]+="$(field "$out" tokens_per_s) "; mfu[llama_$prec]+="$(field "$out" mfu) "
  done
  out=$(env "${peer_env[@]}" OMP_NUM_THREADS=$threads /usr/bin/python3 "$gpeer" --V $V --L $L --NH $NH --C $C --B $B --T $T --steps $steps \
        --threads $threads | grep '^RESULT')
  tok[torch_gpt2_fp32]+="$(field "$out" tokens_per_s) "
  for prec in fp32 bf16; do
    flag=""; [[ $prec == bf16 ]] && flag="--bf16"
    out=$(env "${peer_env[@]}" OMP_NUM_THREADS=$threads /usr/bin/python3 "$lpeer" --V $V --L $L --NH $NH --KV $KV --C $C --F $F --B $B --T $T \
          --steps $steps --threads $threads $flag | grep '^RESULT')
    tok[torch_llama_$prec]+="$(field "$out" tokens_per_s) "
  done
done
med() { tr ' ' '\n' <<<"${tok[$1]}" | grep . | median; }
medm() { tr ' ' '\n' <<<"${mfu[$1]}" | grep . | median; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
echo "| precision | GPT-2 B tok/s (MFU) | Llama B tok/s (MFU) | Llama / GPT-2 | PyTorch Llama tok/s | ours / PyTorch (Llama) |"
echo "|---|---:|---:|---:|---:|---:|"
for prec in fp32 bf16; do
  g=$(med gpt2_$prec); l=$(med llama_$prec); p=$(med torch_llama_$prec)
  printf '| %s | %.0f (%.1f%%) | %.0f (%.1f%%) | %s× | %.0f | %s× |\n' $prec "$g" "$(awk -v m="$(medm gpt2_$prec)" 'BEGIN{print 100*m}')" \
    "$l" "$(awk -v m="$(medm llama_$prec)" 'BEGIN{print 100*m}')" "$(ratio "$l" "$g")" "$p" "$(ratio "$l" "$p")"
done
printf 'PyTorch GPT-2 B fp32 (same run): %.0f tok/s\n' "$(med torch_gpt2_fp32)"
