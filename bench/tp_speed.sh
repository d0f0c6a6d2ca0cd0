#!/usr/bin/env bash
# tp_speed.sh — tensor parallelism on this 2-core machine (issues 13 and 28): `scaletrain train` at
# tp 2 (two ranks of one thread, mpirun) with and without --sp, the blocking tp collectives
# ("before") against the overlapped ones ("after", issue 28), and one process of two threads, on
# configs B and C of common.sh (6 layers, 6 heads, 384 channels, 8 x 256; vocab 50257 and 257),
# interleaved run by run so all see the same machine (other sessions load it: the load average is
# recorded beside every run).
#
# "before" is BASE (an earlier binary: main before issue 28, or before its row-parallel forward
# chunks) when set, else this binary with the test switch ST_PAR_TEST_TP_BLOCKING=1, which takes the
# blocking path; the *_blocking modes are always this binary with that switch.
#
# Per run: the median step time (end record), tokens/s, and from the step records after the first
# the median exposed tp communication per step (time_ms.comm_tp: time blocked in the tp collectives,
# which includes waiting for the slower rank, plus the progress calls of the overlapped ones), the
# collectives overlapped per step (tp_overlapped) and the tp bytes per step (comm_bytes_by_kind).
# Beside them the plan's α-β time of the same collectives (communication.tp_s of `plan --json` with
# the cpu-zen4-2c preset on one node: 10 GB/s, 1 µs; docs/comm.md measured 8-10 GB/s and 1-2 µs for
# the in-place all-reduce up to 4 MiB), exposed / α-β, and the plan's byte count, which must equal
# the measured one.
#
# Both configs train on the bundled Tiny Shakespeare bytes (ids < 257); B sets --vocab 50257 (the
# head's cost), C --vocab 257 (common.sh's 256 plus the end-of-text id).
# TPR (threads per rank, default 1): with more, the overlapped GEMMs keep the rank's OpenMP team and
# the overlap worker polls (model/gpt.c's overlap_run); the one-process row then has 2 x TPR threads.
# Usage: [BASE=/path/to/main/scaletrain] [TPR=1] bench/tp_speed.sh [rounds=3] [steps=8] [configs="B C"]
#        (from anywhere; builds nothing; needs mpirun)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
steps=${2:-8}
cfgs=${3:-B C}
ST=$PWD/build/scaletrain
[[ -x $ST ]] || { echo "tp_speed: build first (make build)" >&2; exit 2; }
[[ -z ${BASE:-} || -x $BASE ]] || { echo "tp_speed: BASE=$BASE: expected an executable scaletrain" >&2; exit 2; }
command -v mpirun >/dev/null || { echo "tp_speed: mpirun not found" >&2; exit 2; }
tmp=$(mktemp -d /tmp/tp_speed.XXXXXX)
[[ -n ${KEEP:-} ]] || trap 'rm -rf "$tmp"' EXIT # KEEP=1: the logs stay in $tmp
tpr=${TPR:-1}
MPI="mpirun --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS=$tpr"
# median of the numbers on stdin
med() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
# step records after the first: field extractors
after_first() { grep '"event":"step"' "$1" | tail -n +2; }
comm_tp() { after_first "$1" | sed -n 's/.*"comm_tp":\([0-9.e+-]*\).*/\1/p'; }
overlapped() { after_first "$1" | head -1 | sed -n 's/.*"tp_overlapped":\([0-9.e+-]*\).*/\1/p'; }
# per step after the first: the overlapped collectives a progress call saw complete before their wait
done_early() { after_first "$1" | sed -n 's/.*"tp_overlapped_done":\([0-9.e+-]*\).*/\1/p'; }
tp_bytes() {
  after_first "$1" | head -1 | python3 -c 'import json,sys; k=json.loads(sys.stdin.read())["comm_bytes_by_kind"]; print(int(sum(v for n,v in k.items() if n.startswith("tp "))))'
}
plan_field() { python3 -c 'import json,sys; j=json.load(sys.stdin); print(eval(sys.argv[1]))' "$1"; }
load1() { cut -d' ' -f1 /proc/loadavg; }

# MODES (environment) picks the runs; tp2_noprog / tp2sp_noprog: overlapped without progress calls
# (ST_PAR_TEST_TP_NOPROGRESS=1: a collective moves only at its start and its wait); tp2_blocking /
# tp2sp_blocking: this binary's blocking path (ST_PAR_TEST_TP_BLOCKING=1) beside a BASE "before".
modes=${MODES:-one tp2_before tp2_after tp2sp_before tp2sp_after}
echo "| config | run | step ms (median) | tokens/s | vs 1 process | exposed tp ms/step (median) | plan α-β tp ms/step | exposed / α-β | plan exposed ms/step | overlapped per step (done before the wait, median) | tp MB/step measured = planned | load (1 min) |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"
for cfg in $cfgs; do
  V=$([[ $cfg == B ]] && echo 50257 || echo 257) # C: the bundled bytes and their end-of-text id
  shape="--layers 6 --heads 6 --channels 384 --vocab $V --max-seq-len 256 --seq-len 256 --micro-batch 8"
  for mode in $modes; do : >"$tmp/$cfg.$mode.ms"; : >"$tmp/$cfg.$mode.comm"; : >"$tmp/$cfg.$mode.load"; : >"$tmp/$cfg.$mode.done"; done
  for ((r = 0; r < rounds; r++)); do
    for mode in $modes; do
      log="$tmp/$cfg.$mode.$r.jsonl"
      sp=""; [[ $mode == tp2sp* ]] && sp="--sp"
      bin=$ST; env=""
      if [[ $mode == *_before ]]; then
        if [[ -n ${BASE:-} ]]; then bin=$BASE; else env="-x ST_PAR_TEST_TP_BLOCKING=1"; fi
      fi
      [[ $mode == *_noprog ]] && env="-x ST_PAR_TEST_TP_NOPROGRESS=1"
      [[ $mode == *_blocking ]] && env="-x ST_PAR_TEST_TP_BLOCKING=1"
      load1 >>"$tmp/$cfg.$mode.load"
      rc=0
      if [[ $mode == one ]]; then
        $ST train $shape --steps "$steps" --val-every 0 --threads $((2 * tpr)) --quiet --log "$log" >/dev/null || rc=$?
      else
        # shellcheck disable=SC2086
        $MPI $env $bin train $shape --steps "$steps" --val-every 0 --threads "$tpr" --tp 2 $sp \
          --quiet --log "$log" >/dev/null || rc=$?
      fi
      if [[ $rc != 0 ]] || ! grep -q '"event":"end"' "$log"; then
        echo "tp_speed: $cfg $mode round $r failed (exit $rc), left out" >&2
        continue
      fi
      grep '"event":"end"' "$log" | sed -n 's/.*"median_step_ms":\([0-9.e+-]*\).*/\1/p' >>"$tmp/$cfg.$mode.ms"
      comm_tp "$log" >>"$tmp/$cfg.$mode.comm"
      done_early "$log" >>"$tmp/$cfg.$mode.done"
      cp "$log" "$tmp/$cfg.$mode.last.jsonl"
    done
  done
  set +e # the table: a missing figure prints as empty rather than ending the script
  one=""
  [[ -s $tmp/$cfg.one.ms ]] && one=$(med <"$tmp/$cfg.one.ms")
  for mode in $modes; do
    ms=$(med <"$tmp/$cfg.$mode.ms")
    ld=$(sort -g "$tmp/$cfg.$mode.load" | awk 'NR==1{a=$1} {b=$1} END {printf "%.1f–%.1f", a, b}')
    if [[ $mode == one ]]; then
      awk -v c="$cfg" -v m="$ms" -v l="$ld" \
        -v t=$((2 * tpr)) 'BEGIN {printf "| %s | 1 process, %d threads | %.1f | %.0f | 1 | - | - | - | - | - | %s |\n", c, t, m, 2048 / (m * 1e-3), l}'
      continue
    fi
    sp=$([[ $mode == tp2sp* ]] && echo "--sp" || echo "")
    case $mode in
      *_before) when=$([[ -n ${BASE:-} ]] && echo "BASE binary (before)" || echo "blocking (before)") ;;
      *_blocking) when="blocking" ;;
      *_noprog) when="overlapped, no progress calls" ;;
      *) when="overlapped (after)" ;;
    esac
    pj=$($ST plan $shape --grad-accum 1 --threads "$tpr" --tp 2 $sp --devices-per-node 2 --json)
    # communication.tp_s: the α-β time of every tp collective; compute.time_s.tp (= tp_exposed_s) is
    # what the plan leaves exposed after the overlap, printed beside it
    ptp=$(plan_field 'j["communication"]["tp_s"]*1e3' <<<"$pj")
    pexp=$(plan_field 'j["communication"]["tp_exposed_s"]*1e3' <<<"$pj")
    pbytes=$(plan_field 'int(sum(v for n,v in j["comm_bytes_by_kind"].items() if n.startswith("tp ")))' <<<"$pj")
    mbytes=$(tp_bytes "$tmp/$cfg.$mode.last.jsonl")
    ovl=$(overlapped "$tmp/$cfg.$mode.last.jsonl")
    [[ -s $tmp/$cfg.$mode.done ]] && ovl="$ovl ($(med <"$tmp/$cfg.$mode.done"))"
    comm=$(med <"$tmp/$cfg.$mode.comm")
    awk -v c="$cfg" -v md="tp 2${sp:+ --sp}, $when" -v m="$ms" -v o="$one" -v cm="$comm" -v p="$ptp" -v pe="$pexp" \
        -v mb="$mbytes" -v pb="$pbytes" -v ov="${ovl:--}" -v l="$ld" \
      'BEGIN {printf "| %s | %s | %.1f | %.0f | %s | %.1f | %.1f | %.1f | %.1f | %s | %.1f %s %.1f | %s |\n", c, md, m, 2048 / (m * 1e-3),
              (o == "") ? "-" : sprintf("%.2f", o / m),
              cm, p, cm / p, pe, ov, mb / 1e6, (mb == pb) ? "=" : "!=", pb / 1e6, l}'
  done
done
echo
# The same runs before and after, compared as text: every step's loss and gradient norms.
for f in "$tmp"/*.tp2*_before.last.jsonl; do
  [[ -e $f ]] || continue
  for g in "${f/_before./_after.}" "${f/_before./_noprog.}" "${f/_before./_blocking.}"; do
    [[ -e $g ]] || continue
    a=$(grep '"event":"step"' "$f" | grep -o '"\(loss\|grad_norm\|grad_norm_clipped\)":[^,]*' | md5sum | cut -c1-12)
    b=$(grep '"event":"step"' "$g" | grep -o '"\(loss\|grad_norm\|grad_norm_clipped\)":[^,]*' | md5sum | cut -c1-12)
    n=$(grep -c '"event":"step"' "$g")
    echo "$(basename "$g" .last.jsonl) vs before: $n steps' loss and norms $([[ $a == "$b" ]] && echo "identical to the bit" || echo "DIFFER")"
  done
done
echo "rounds $rounds, $steps steps per run, $tpr thread(s) per rank, before = ${BASE:-this binary with ST_PAR_TEST_TP_BLOCKING=1}; $(date -u '+%F %H:%M UTC'); load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
