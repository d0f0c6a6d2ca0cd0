#!/usr/bin/env bash
# optim_bench.sh — issue 17's optimizer benchmark (bench/results/optim.md):
#  1. the optimizer's time per step, Muon against AdamW, on configs A (12/768/50257) and B
#     (6/384/50257), fp32 and bf16 (bench/optim_bench: one process, the computation of
#     par_optim_step at dp 1; AdamW and Muon interleaved in every round, medians), with Muon's
#     Newton–Schulz GFLOP/s against the GEMM ceiling measured in the same process; Shampoo (blocks
#     of 512, fp32 whatever the precision) in the fp32 runs: a step without roots (median, interleaved)
#     and one step with every block's roots, amortised over --precond-every 10;
#  2. tokens to reach AdamW's final loss: `scaletrain train` with AdamW and with Muon on the bundled
#     Tiny Shakespeare bytes, a small model (4 layers, 256 channels, 8 x 128 tokens per step), the same
#     token budget; the first step whose 10-step mean loss reaches AdamW's final 10-step mean.
# The machine's load average is printed before and after (the 2 cores are shared).
#
# Usage: bench/optim_bench.sh [rounds=5] [threads=2] [train_steps=150]   (from anywhere; builds nothing)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
threads=${2:-2}
tsteps=${3:-150}
OB=build/bench/optim_bench
ST=build/scaletrain
[[ -x $OB && -x $ST ]] || { echo "optim_bench: build first (cmake --build build --target optim_bench scaletrain)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
field() { sed -n 's/.*"'"$2"'": \([0-9.]*\).*/\1/p' <<<"$1"; }
shampoo_rows=""
sophia_rows=""
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| config | precision | AdamW ms | Muon ms | Muon / AdamW | of which NS ms (median) | NS GFLOP/s (best round) | GEMM ceiling GFLOP/s | NS / ceiling |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|"
for cfg in "A 12 12 768 50257" "B 6 6 384 50257"; do
  read -r name L NH C V <<<"$cfg"
  for prec in fp32 bf16; do
    sh=""; [[ $prec == fp32 ]] && sh=shampoo
    out=$($OB "$L" "$NH" "$C" "$V" "$rounds" "$threads" "$prec" $sh)
    r=$(grep '^RESULT ' <<<"$out")
    so=$(grep '^RESULT_SOPHIA ' <<<"$out")
    sa=$(grep '^RESULT_SHAMPOO ' <<<"$out" || true) # its own line: RESULT_SOPHIA has a ratio_amortized too
    sophia_rows+="| $name ($L/$C/$V) | $prec | $(field "$r" adamw_ms) | $(field "$so" sophia_ms) | $(field "$so" hess_ema_ms) | $(field "$so" sophia_amortized_ms) | **$(field "$so" ratio_amortized)** |"$'\n'
    [[ -n $sh ]] && shampoo_rows+="| $name ($L/$C/$V) | $(field "$r" adamw_ms) | $(field "$sa" shampoo_ms) | $(field "$sa" shampoo_root_ms) | $(field "$sa" shampoo_amortized_ms) | **$(field "$sa" ratio_amortized)** |"$'\n'

    printf "| %s (%s/%s/%s) | %s | %s | %s | **%s** | %s | %s | %s | %s |\n" "$name" "$L" "$C" "$V" "$prec" \
      "$(field "$r" adamw_ms)" "$(field "$r" muon_ms)" "$(field "$r" ratio)" "$(field "$r" ns_ms)" \
      "$(field "$r" ns_best_gflops)" "$(field "$r" ceiling_gflops)" "$(field "$r" ns_vs_ceiling)"
  done
done
echo
echo "Shampoo (fp32, blocks of 512, roots every 10 steps):"
echo
echo "| config | AdamW ms | Shampoo ms (no roots) | step with roots ms | amortised ms | amortised / AdamW |"
echo "|---|---:|---:|---:|---:|---:|"
printf "%s" "$shampoo_rows"
echo
echo "Sophia (its rule every step; the Hessian EMA on one step in 10; the Hessian pass itself is a"
echo "forward+backward, the trainer's time_ms.hessian, not counted here):"
echo
echo "| config | precision | AdamW ms | Sophia rule ms | Hessian EMA ms | amortised ms | amortised / AdamW |"
echo "|---|---|---:|---:|---:|---:|---:|"
printf "%s" "$sophia_rows"
echo
run() { # name optimizer flags...
  local n=$1; shift
  $ST train --layers 4 --heads 4 --channels 256 --max-seq-len 128 --seq-len 128 --micro-batch 8 --steps "$tsteps" \
    --warmup 10 --val-every 0 --threads "$threads" --quiet --log "$tmp/$n.jsonl" "$@" >/dev/null 2>&1
}
run adamw --optimizer adamw --lr 1e-3 --min-lr 1e-4
run muon --optimizer muon --lr 1e-3 --min-lr 1e-4 --muon-lr 0.02
run shampoo --optimizer shampoo --lr 1e-3 --min-lr 1e-4
run sophia --optimizer sophia --lr 1e-3 --min-lr 1e-4
python3 - "$tmp" "$tsteps" <<'EOF'
import json, sys
d, steps = sys.argv[1], int(sys.argv[2])
def log(n):
    loss, ms, tok = {}, {}, 0
    for l in open(f"{d}/{n}.jsonl"):
        o = json.loads(l)
        if o.get("event") == "step":
            loss[o["step"]] = o["loss"]; ms[o["step"]] = o["time_ms"]["optimizer"]; tok = o["tokens"]
    return loss, ms, tok
def mean10(loss, s):
    xs = [loss[t] for t in range(max(1, s - 9), s + 1) if t in loss]
    return sum(xs) / len(xs)
a, am, tok = log("adamw")
target = mean10(a, steps)
print(f"tokens to reach AdamW's final loss (4 layers, 256 channels, bytes, 8 x 128 tokens/step, {steps} steps, "
      f"10-step mean loss; AdamW lr 1e-3, Muon muon-lr 0.02 + AdamW 1e-3 for the rest, Shampoo lr 1e-3 "
      f"grafted, blocks 512, roots every 10; Sophia lr 1e-3, Hessian every 10; one run each, no lr sweep; "
      f"the lr-swept comparison is `scaletrain study optimizers`):")
print()
print("| optimizer | final 10-step mean loss | first step reaching AdamW's final | tokens | median optimizer ms/step |")
print("|---|---:|---:|---:|---:|")
for n in ("adamw", "muon", "shampoo", "sophia"):
    l, ms, tk = log(n)
    hit = next((s for s in range(10, steps + 1) if mean10(l, s) <= target), None)
    med = sorted(ms.values())[len(ms) // 2]
    print(f"| {n} | {mean10(l, steps):.4f} | {hit if hit else 'not reached'} | "
          f"{hit * tk if hit else '-'} | {med:.1f} |")
EOF
echo
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
