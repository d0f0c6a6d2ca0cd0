#!/usr/bin/env bash
# Before/after training-step benchmark: two step_bench binaries (a base built from main, and this
# tree's) run interleaved on the configs of bench/common.sh, so background load hits both alike.
# Each run measures the peak of its precision in the same process (train/machine_peak: the best of
# the dot-product probe and a 512^3 GEMM, no cache), so the MFU of every run is against the peak
# measured under the same load. Also the process CPU time of a step (cpu_ms) and, with 1 thread,
# cpu_mfu: model FLOPs per CPU second against a 512^3 GEMM timed in CPU seconds in the same process,
# which a loaded machine disturbs far less than the wall clock of a 2-thread step (step_bench.c).
# Prints one line per run (with the load average) and a Markdown table of medians: tokens/s, MFU,
# the peak, CPU ms per step, cpu_mfu (1 thread), and new / base, both as the ratio of the medians and
# as the median of each round's own ratio (the two runs of a round are adjacent, so a slow window
# that spans a round moves both; which binary runs first alternates by round).
#
# usage: BASE=/tmp/base/build/bench/step_bench bench/step_ab.sh [rounds=3] [threads=2] [precision=bf16] [configs=ABC]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
threads=${2:-2}
prec=${3:-bf16}
want=${4:-ABC}
base=${BASE:?set BASE to the step_bench built from main}
new=${NEW:-build/bench/step_bench}
for b in "$base" "$new"; do [[ -x $b ]] || { echo "step_ab: $b is not an executable step_bench" >&2; exit 1; }; done
case "$prec" in fp32|bf16) ;; *) echo "step_ab: precision: expected fp32 or bf16, found '$prec'" >&2; exit 1 ;; esac
source bench/common.sh
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

declare -A tok mfu peak cms cmfu pair last
echo "# $(date -u '+%F %T') UTC, $(nproc) CPUs, $threads threads, $prec, $rounds rounds; base $base, new $new"
for ((r = 0; r < rounds; r++)); do
  for cfg in "${configs[@]}"; do
    read -r name L NH C V B T steps <<<"$cfg"
    [[ $want == *"$name"* ]] || continue
    order="base new"; ((r % 2)) && order="new base" # neither binary always runs first
    for which in $order; do
      bin=$base; [[ $which == new ]] && bin=$new
      load=$(cut -d' ' -f1 /proc/loadavg)
      out=$(OMP_NUM_THREADS=$threads "$bin" "$L" "$NH" "$C" "$V" "$B" "$T" "$steps" "$threads" "$prec" | grep '^RESULT')
      t=$(field "$out" tokens_per_s); m=$(field "$out" mfu); p=$(field "$out" peak_gflops)
      echo "round $r $name $which: $t tok/s, MFU $m, peak $p GFLOP/s, fwd $(field "$out" forward_ms) bwd $(field "$out" backward_ms) opt $(field "$out" optimizer_ms) ms;" \
        "CPU ms $(field "$out" cpu_ms) (fwd $(field "$out" cpu_forward_ms) bwd $(field "$out" cpu_backward_ms) opt $(field "$out" cpu_optimizer_ms))," \
        "cpu_mfu $(field "$out" cpu_mfu), cpu peak $(field "$out" cpu_peak_gflops); load $load"
      tok[$name.$which]+="$t "; mfu[$name.$which]+="$m "; peak[$name.$which]+="$p "
      cms[$name.$which]+="$(field "$out" cpu_ms) "; cmfu[$name.$which]+="$(field "$out" cpu_mfu) "
      last[$which]=$t
    done
    pair[$name]+="$(awk -v a="${last[new]}" -v b="${last[base]}" 'BEGIN {print a / b}') "
  done
done
med() { tr ' ' '\n' <<<"$1" | grep . | median; }
echo
echo "| config | base tok/s | new tok/s | new / base | paired new / base | base MFU | new MFU | peak GFLOP/s (base / new runs) | CPU ms/step base | new | base / new | cpu_mfu base | new |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for cfg in "${configs[@]}"; do
  read -r name _ <<<"$cfg"
  [[ $want == *"$name"* ]] || continue
  tb=$(med "${tok[$name.base]}"); tn=$(med "${tok[$name.new]}")
  cb=$(med "${cms[$name.base]}"); cn=$(med "${cms[$name.new]}")
  printf '| %s | %.0f | %.0f | %.3f | %.3f | %.3f | %.3f | %.0f / %.0f | %.0f | %.0f | %.3f | %.3f | %.3f |\n' "$name" "$tb" "$tn" \
    "$(awk -v a="$tn" -v b="$tb" 'BEGIN {print a / b}')" "$(med "${pair[$name]}")" \
    "$(med "${mfu[$name.base]}")" "$(med "${mfu[$name.new]}")" "$(med "${peak[$name.base]}")" "$(med "${peak[$name.new]}")" \
    "$cb" "$cn" "$(awk -v a="$cb" -v b="$cn" 'BEGIN {print a / b}')" "$(med "${cmfu[$name.base]}")" "$(med "${cmfu[$name.new]}")"
done
