#!/usr/bin/env bash
# zero_overlap.sh — how much of ZeRO's data-parallel communication the overlap hides (issue 28).
#
# For each config and ZeRO stage it trains twice, interleaved in one loop so both see the same
# machine: with overlap (the default) and with --no-overlap (every gradient collective starts after
# the backward pass, the stage 1-2 parameter all-gathers are waited right after the optimizer), and
# prints rank 0's medians over steps 2..N of
#   exposed comm   time_ms.comm: time blocked in comm_wait (in the critical path for sure)
#   progress       time_ms.dp_progress (time_ms.comm_test of older binaries, else 0): time inside
#                  the progress calls between segments (comm_test of ZeRO's pieces; the ring adds
#                  its received blocks there). Open MPI moves a nonblocking collective's bytes only
#                  inside MPI calls, so without spare cores or a progress thread this is where
#                  "hidden" communication went: off the exposed figure, not necessarily off the step
#   step           time_ms.total
#   hidden         1 - exposed(overlap) / exposed(no overlap): the share of the communication the
#                  overlap took off the critical path (issue 28's goal: >= 80 % for ZeRO 2 and 3 at dp 8)
# and the step-time ratio overlap / no-overlap (below 1: overlap made the step faster). After the
# table, one line per ZeRO stage: "# hidden ZeRO-Z: H % (config: h %, ...)", H over the configs'
# summed exposed times (bench/server.sh copies these lines into its summary).
#
# Usage: bench/zero_overlap.sh RANKS [THREADS=1] [CONFIGS="B C"] [ZEROS="0 1 2 3"] [STEPS=5] [ROUNDS=1]
#   RANKS    dp size (mpirun -np); THREADS per rank (--threads). With RANKS x THREADS above the
#            cores it runs oversubscribed and says so (then ranks time-share cores: the figures
#            describe scheduling, not the network).
#   CONFIGS  from bench/common.sh: A, B, C (C with V 257: the bundled bytes corpus, whose
#            end-of-text is 256; A and B keep V 50257: 64 % of B's parameters are the embedding)
# Environment: BIN (default build/scaletrain), BASE (another binary, e.g. one built from an older
# commit: its runs are interleaved with BIN's in every round, rows labelled "base"), MPIRUN (default
# mpirun), MPI_EXTRA (more mpirun options), OUT (keep the logs in this directory).
# The 16-core server: bench/zero_overlap.sh 8 2 "B C" "2 3" 6 2   (dp 8 x 2 threads, the issue's grid)
#   (bench/server.sh runs it as bench/zero_overlap.sh DP N/DP B "2 3" 4 1, DP = SERVER_DP (8), N its threads:
#   8 2 B "2 3" 4 1 on 16 cores; SERVER_ZERO_CONFIGS, SERVER_ZERO_STAGES, SERVER_ZERO_STEPS change the rest)
set -euo pipefail
cd "$(dirname "$0")/.."
ranks=${1:?usage: bench/zero_overlap.sh RANKS [THREADS] [CONFIGS] [ZEROS] [STEPS] [ROUNDS]}
threads=${2:-1}
cfgs=${3:-B C}
zeros=${4:-0 1 2 3}
steps=${5:-5}
rounds=${6:-1}
BIN=${BIN:-build/scaletrain}
MPIRUN=${MPIRUN:-mpirun}
[[ -x $BIN ]] || { echo "zero_overlap: $BIN not found: build first (cmake --build build --target scaletrain)" >&2; exit 2; }
bins=("new:$BIN")
if [[ -n ${BASE:-} ]]; then
  [[ -x $BASE ]] || { echo "zero_overlap: BASE=$BASE is not an executable" >&2; exit 2; }
  bins=("base:$BASE" "new:$BIN")
fi
[[ $ranks =~ ^[0-9]+$ && $ranks -ge 2 ]] || { echo "zero_overlap: RANKS must be a number >= 2, got '$ranks'" >&2; exit 2; }
[[ $threads =~ ^[0-9]+$ && $threads -ge 1 ]] || { echo "zero_overlap: THREADS must be a number >= 1, got '$threads'" >&2; exit 2; }
[[ $steps =~ ^[0-9]+$ && $steps -ge 3 ]] || { echo "zero_overlap: STEPS must be >= 3 (medians over steps 2..N), got '$steps'" >&2; exit 2; }
# shellcheck source=bench/common.sh
source bench/common.sh
tmp=${OUT:-$(mktemp -d)}
mkdir -p "$tmp"
[[ -n ${OUT:-} ]] || trap 'rm -rf "$tmp"' EXIT
for b in "${bins[@]}"; do : >"$tmp/${b%%:*}.hidden"; done
cores=$(nproc)
if ((ranks * threads <= cores)); then
  place=(--map-by "slot:PE=$threads" --bind-to core); note="bound, $((ranks * threads)) of $cores cores"
else
  place=(--oversubscribe --bind-to none); note="OVERSUBSCRIBED: $((ranks * threads)) threads on $cores cores"
fi
read -ra extra <<<"${MPI_EXTRA:-}"
echo "# $(date -u '+%Y-%m-%d %H:%M UTC') $(uname -n); $(lscpu | sed -n 's/^Model name: *//p'), $cores cores"
echo "# $($MPIRUN --version 2>/dev/null | head -1); dp $ranks x $threads threads ($note); $steps steps, medians of steps 2..$steps, $rounds round(s)"
echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# $MPIRUN -np $ranks ${place[*]} ${extra[*]} BINARY train <config> --zero Z --threads $threads --steps $steps --val-every 0 --no-noise-scale [--no-overlap]"
echo "# binaries: ${bins[*]}"
echo
echo "| binary | config | ZeRO | step ms, overlap | step ms, --no-overlap | step ratio | exposed comm ms, overlap | exposed comm ms, --no-overlap | progress ms, overlap | hidden |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
# summary LOG: medians over steps >= 2 of time_ms.total, comm, dp_progress (rank 0's record)
summary() {
  python3 - "$1" <<'PY'
import json, sys, statistics as st
recs = [json.loads(l) for l in open(sys.argv[1]) if '"event":"step"' in l]
recs = [r for r in recs if r["step"] >= 2]
med = lambda k: st.median(r["time_ms"].get(k, 0.0) for r in recs)
prog = "dp_progress" if any("dp_progress" in r["time_ms"] for r in recs) else "comm_test"
print(f'{med("total"):.1f} {med("comm"):.1f} {med(prog):.1f}')
PY
}
for name in $cfgs; do
  line=""
  for c in "${configs[@]}"; do [[ ${c%% *} == "$name" ]] && line=$c; done
  [[ -n $line ]] || { echo "zero_overlap: unknown config '$name' (A, B or C)" >&2; exit 2; }
  read -r _ L NH C V B T _ <<<"$line"
  ((V == 256)) && V=257 # the bundled bytes corpus has its end-of-text at 256
  model=(--layers "$L" --heads "$NH" --channels "$C" --vocab "$V" --max-seq-len "$T" --seq-len "$T" --micro-batch "$B")
  for z in $zeros; do
    for b in "${bins[@]}"; do : >"$tmp/${b%%:*}.ov"; : >"$tmp/${b%%:*}.no"; done
    for ((r = 0; r < rounds; r++)); do
      for b in "${bins[@]}"; do
        for mode in ov no; do # interleaved: each round runs every binary in both modes, back to back
          flag=(); [[ $mode == no ]] && flag=(--no-overlap)
          log="$tmp/$name.z$z.${b%%:*}.$mode.$r.jsonl"
          OMP_NUM_THREADS=$threads ST_PEAK_CACHE=off timeout 1800 "$MPIRUN" --allow-run-as-root -np "$ranks" "${place[@]}" \
            "${extra[@]}" -x OMP_NUM_THREADS -x ST_PEAK_CACHE "${b#*:}" train "${model[@]}" --zero "$z" --threads "$threads" \
            --steps "$steps" --val-every 0 --no-noise-scale --quiet --log "$log" "${flag[@]}" >"$log.out" 2>&1 \
            || { echo "zero_overlap: run failed (${b%%:*} $name ZeRO $z $mode), see below" >&2; cat "$log.out" >&2; exit 1; }
          summary "$log" >>"$tmp/${b%%:*}.$mode"
        done
      done
    done
    # medians over rounds of each column
    m() { awk -v k="$2" '{print $k}' "$tmp/$1" | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
    for b in "${bins[@]}"; do
      l=${b%%:*}
      echo "$z $name $(m "$l.ov" 2) $(m "$l.no" 2)" >>"$tmp/$l.hidden"
      awk -v bin="$l" -v c="$name" -v z="$z" -v so="$(m "$l.ov" 1)" -v sn="$(m "$l.no" 1)" -v eo="$(m "$l.ov" 2)" \
        -v en="$(m "$l.no" 2)" -v to="$(m "$l.ov" 3)" \
        'BEGIN { h = en > 0 ? sprintf("%.0f %%", 100 * (1 - eo / en)) : "n/a";
                 printf "| %s | %s | %s | %.0f | %.0f | %.3f | %.1f | %.1f | %.1f | %s |\n", bin, c, z, so, sn, so / sn, eo, en, to, h }'
    done
  done
done
echo
# The hidden fraction per binary and ZeRO stage, over the configs: 1 - sum exposed(overlap) / sum
# exposed(no overlap), each config's beside it.
for b in "${bins[@]}"; do
  l=${b%%:*}
  awk -v bin="$l" '{ z = $1; eo[z] += $3; en[z] += $4; if (!(z in seen)) { seen[z] = 1; order[++n] = z }
      part[z] = part[z] sprintf("%s%s: %s", part[z] == "" ? "" : ", ", $2, $4 > 0 ? sprintf("%.0f %%", 100 * (1 - $3 / $4)) : "n/a") }
    END { for (i = 1; i <= n; i++) { z = order[i];
            h = en[z] > 0 ? sprintf("%.0f %%", 100 * (1 - eo[z] / en[z])) : "n/a";
            printf "# hidden ZeRO-%s (%s): %s = 1 - %.1f / %.1f ms exposed (%s)%s\n", z, bin, h, eo[z], en[z], part[z],
                   (z >= 2 && en[z] > 0) ? ((1 - eo[z] / en[z] >= 0.8) ? "; goal >= 80 %: met" : "; goal >= 80 %: not met") : "" } }' \
    "$tmp/$l.hidden"
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
