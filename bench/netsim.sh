#!/usr/bin/env bash
# netsim.sh — two simulated nodes on one machine: the plan's inter-node α-β model against mpirun over
# a shaped TCP link (issue 28).
#
# Builds two network namespaces (st-ns0, st-ns1), a veth pair between them (10.231.0.1 <-> .2) and
# shapes both ends with netem (rate + one-way delay per direction), then runs `scaletrain train`
# under mpirun with one rank per namespace: Open MPI reaches the second "node" through a launcher
# that runs `ip netns exec st-ns1` instead of ssh (plm_rsh_agent), ranks talk over the TCP BTL on the
# veth only (no shared memory: btl tcp,self), each namespace gets its own host name (unshare --uts)
# so Open MPI and our comm layer see two nodes. Each rank runs one thread (the machine has 2 cores).
# Everything it creates (namespaces, veth, qdiscs, /etc/netns/*, the temporary directory) is removed
# on exit by a trap, also on failure or Ctrl-C.
#
# For each link (LINKS: RATE or RATE:DELAY, default "10gbit 1gbit"; a DELAY needs netem) and each
# grid (CONFIGS: dp0-dp3 = dp 2 at ZeRO 0-3 with --no-overlap, so the trainer's comm time is the
# whole collective time; dp0o = dp 2 ZeRO 0 overlapped, with comm's progress thread (on by
# default across nodes); dp0n = the same with ST_COMM_PROGRESS=off (no progress between the
# trainer's own MPI calls: the control); dp0p = dp0n with Open MPI's TCP progress thread instead;
# tp = tp 2; pp = pp 2 with 4 micro-batches) it prints rank 0's measured comm and
# step time (the fastest step of ROUNDS rounds, and the median of the rounds' medians) beside
# `plan --json`'s predictions for the same grid, priced on this machine's profile with the link as
# the inter-node network and devices_per_node 1 (every group crosses the link): once with the
# link's nominal rate and the α comm_bench measures across it, once with the bandwidth comm_bench
# measures (the link as MPI over TCP delivers it). A one-process run of the same per-rank work
# first scales the profile's matmul rate so that the plan's compute equals the measured one: the
# rows then compare the communication model, not the compute model.
#
# Two columns tell the ranks' skew from the link: the fastest step's waits in the world's scalar
# collectives (time_ms.comm_by_kind: a few bytes, so what they wait is mostly the other rank arriving
# later), and the least comm of any rank in that step (time_ms.comm_by_rank: the rank that arrived
# last at each collective waited least, so its comm is the closest to the transfer itself; rank 0's,
# the measured column, also holds what it waited for the other), and that least comm's median over
# every step of every round (the fastest step's comm is one draw: at 10 Gb/s the ranks' random skew,
# tens of ms, is larger than the transfer). LOGDIR=DIR keeps the runs' logs; CALDIR=DIR the comm_bench tables.
# The last line counts the rows within 25 % of the plan (the issue's bar), controls left out.
#
# usage: sudo [ROUNDS=3] [STEPS=6] [LINKS="10gbit 1gbit"] [CONFIGS="dp0 dp1 dp2 dp3 dp0o dp0n dp0p tp pp"]
#   (also dp1o, dp2o, dp3o: ZeRO 1-3 overlapped; beside dpK, the share of its communication hidden)
#             bench/netsim.sh > table.md
# Results: bench/results/netsim.md.
set -euo pipefail
[[ $(id -u) -eq 0 ]] || { echo "netsim: needs root (ip netns, tc); run it with sudo" >&2; exit 1; }
cd "$(dirname "$0")/.."
bin=$(readlink -f "${BIN:-build/scaletrain}")
[[ -x $bin ]] || { echo "netsim: build first (cmake --build build --target scaletrain)" >&2; exit 1; }
for t in ip tc unshare mpirun python3; do
  command -v "$t" >/dev/null || { echo "netsim: '$t' not found" >&2; exit 1; }
done
# No per-machine peak or profile cache (train/machine_peak.h): the runs measure under the benchmark's
# load, and `plan --measure-hardware` below must not replace the user's cached profile.
export ST_PEAK_CACHE=off
rounds=${ROUNDS:-3}
steps=${STEPS:-6}
links=${LINKS:-"10gbit 1gbit"}
configs=${CONFIGS:-"dp0 dp1 dp2 dp3 dp0o dp0n dp0p tp pp"}
NS0=st-ns0 NS1=st-ns1 V0=st-veth0 V1=st-veth1 IP0=10.231.0.1 IP1=10.231.0.2
# Model: config C of bench/common.sh with a shorter sequence (6/384/256, 8 x 128 per rank), so a
# step is ~0.5 s and the dp gradient all-reduce (43 MB) is 10-50% of it at 10 Gb/s and 1 Gb/s.
MODEL=(--layers 6 --heads 6 --channels 384 --vocab 256 --max-seq-len 128 --seq-len 128 --micro-batch 8)

tmp=$(mktemp -d)
cleanup() {
  # Processes still inside the namespaces (an interrupted mpirun, its orted and ranks) are ours.
  local ns pids
  for ns in "$NS0" "$NS1"; do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [[ -n $pids ]] && kill $pids 2>/dev/null || true
  done
  sleep 0.5
  for ns in "$NS0" "$NS1"; do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [[ -n $pids ]] && kill -9 $pids 2>/dev/null || true
  done
  ip netns del "$NS0" 2>/dev/null || true # deleting a namespace deletes its veth end and qdisc,
  ip netns del "$NS1" 2>/dev/null || true # and the peer with it
  ip link del "$V0" 2>/dev/null || true
  rm -rf /etc/netns/"$NS0" /etc/netns/"$NS1" "$tmp"
  [[ -n ${made_etc_netns:-} ]] && rmdir /etc/netns 2>/dev/null || true # the folder too, where this run made it
}
trap cleanup EXIT
trap 'exit 130' INT TERM
for ns in "$NS0" "$NS1"; do
  if ip netns list | grep -qw "$ns"; then echo "netsim: namespace $ns exists (another run?); remove it with ip netns del $ns" >&2; trap - EXIT; rm -rf "$tmp"; exit 1; fi
done

# ---- the two nodes ----
ip netns add "$NS0"
ip netns add "$NS1"
ip link add "$V0" type veth peer name "$V1"
ip link set "$V0" netns "$NS0"
ip link set "$V1" netns "$NS1"
ip -n "$NS0" addr add "$IP0/24" dev "$V0"
ip -n "$NS1" addr add "$IP1/24" dev "$V1"
for ns in "$NS0" "$NS1"; do ip -n "$ns" link set lo up; done
ip -n "$NS0" link set "$V0" up
ip -n "$NS1" link set "$V1" up
# `ip netns exec` bind-mounts /etc/netns/NS/hosts over /etc/hosts: the node names resolve inside.
[[ -d /etc/netns ]] || made_etc_netns=1
for ns in "$NS0" "$NS1"; do
  mkdir -p /etc/netns/"$ns"
  printf '127.0.0.1 localhost\n%s st-node0\n%s st-node1\n' "$IP0" "$IP1" >/etc/netns/"$ns"/hosts
done

# Open MPI's launcher for the second node: called as `agent [ssh options] HOST COMMAND...` (COMMAND
# is a shell command line, as ssh would pass it), it runs COMMAND in that host's namespace under
# its own host name.
cat >"$tmp/rsh" <<EOF
#!/bin/sh
while [ \$# -gt 0 ]; do case "\$1" in -*) shift ;; *) break ;; esac; done
host=\$1; shift
case "\$host" in st-node0|$IP0) ns=$NS0 ;; st-node1|$IP1) ns=$NS1 ;; *) echo "netsim rsh: unknown host \$host" >&2; exit 1 ;; esac
exec ip netns exec "\$ns" unshare --uts sh -c "hostname \$host; \$*"
EOF
chmod +x "$tmp/rsh"
printf 'st-node0 slots=1\nst-node1 slots=1\n' >"$tmp/hosts"

# shape RATE [DELAY]: both veth ends shaped to RATE per direction, plus a one-way DELAY with netem
# where the kernel has it. Without netem (CONFIG_NET_SCH_NETEM off, as on the machine of
# bench/results/netsim.md) a token bucket (tbf) shapes the rate alone and the latency is the
# link's own, measured below; a DELAY then is refused rather than silently dropped. The bucket
# holds 1 ms at RATE (at least 128 KiB: a 64 KiB GSO packet must fit) so it paces rather than drops.
have_netem=0
if tc -n "$NS0" qdisc add dev "$V0" root netem delay 1us 2>/dev/null; then
  have_netem=1
  tc -n "$NS0" qdisc del dev "$V0" root
fi
shape() {
  local rate=$1 delay=${2:-} bits
  bits=$(python3 -c "import sys; s=sys.argv[1].lower(); m={'k':1e3,'m':1e6,'g':1e9}
u=s.rstrip('bit'); print(int(float(u[:-1])*m[u[-1]]) if u[-1] in m else int(u))" "$rate")
  local burst=$(( bits / 8 / 1000 > 131072 ? bits / 8 / 1000 : 131072 ))
  for pair in "$NS0 $V0" "$NS1 $V1"; do
    read -r ns dev <<<"$pair"
    if [[ -n $delay && $delay != 0 ]]; then
      [[ $have_netem == 1 ]] || { echo "netsim: LINKS asks for a delay ($delay) but this kernel has no netem qdisc; give RATE alone" >&2; exit 1; }
      tc -n "$ns" qdisc replace dev "$dev" root netem delay "$delay" rate "$rate" limit 100000
    else
      tc -n "$ns" qdisc replace dev "$dev" root tbf rate "$rate" burst "$burst" latency 50ms
    fi
  done
}

# A synthetic shard (step time does not depend on the tokens).
python3 - "$tmp/train.bin" 256 <<'PY'
import array, struct, sys
path, V, n = sys.argv[1], int(sys.argv[2]), 300000
hdr = [20240520, 1, n, 0, 0, 0, 0, V] + [0] * 248
tok = array.array('H', [(i * 7919 + (i // 13) * 31) % V for i in range(n)])
with open(path, 'wb') as f:
    f.write(struct.pack('<256i', *hdr)); f.write(tok.tobytes())
PY

# grid flags of a config name
grid() {
  case $1 in
    one) echo "" ;;
    dp0) echo "--dp 2 --zero 0 --no-overlap" ;; dp1) echo "--dp 2 --zero 1 --no-overlap" ;;
    dp2) echo "--dp 2 --zero 2 --no-overlap" ;; dp3) echo "--dp 2 --zero 3 --no-overlap" ;;
    dp0o|dp0n|dp0p) echo "--dp 2 --zero 0" ;; tp) echo "--dp 1 --tp 2" ;; pp) echo "--dp 1 --pp 2 --grad-accum 4" ;;
    dp1o) echo "--dp 2 --zero 1" ;; dp2o) echo "--dp 2 --zero 2" ;; dp3o) echo "--dp 2 --zero 3" ;;
    *) echo "netsim: unknown config $1" >&2; exit 1 ;;
  esac
}

# --no-noise-scale where the trainer would estimate the gradient noise scale (dp 2: its two scalar
# all-gathers are left out of the measured comm); tp 2 and pp 2 at dp 1 estimate none, and the
# trainer refuses the flag there (it would change nothing)
noise() { case $1 in dp*) echo "--no-noise-scale" ;; esac; }

# Open MPI options of a config: without a progress thread a nonblocking collective's bytes move
# only while a rank is inside an MPI call, so the gradient all-reduce cannot overlap the backward
# pass (the plan assumes it does). dp0n turns comm's thread off; dp0p replaces it with the TCP
# transport's own progress thread.
mpi_extra() {
  case $1 in
    dp0n) echo "-x ST_COMM_PROGRESS=off" ;;
    dp0p) echo "-x ST_COMM_PROGRESS=off --mca btl_tcp_progress_thread 1" ;;
  esac
}

# run LOG [--mpi "MCA OPTIONS"] FLAGS...: one 2-rank job across the link (rank 0 in st-ns0, rank 1
# in st-ns1).
run2() {
  local log=$1 extra=(); shift
  if [[ ${1:-} == --mpi ]]; then read -ra extra <<<"$2"; shift 2; fi
  ip netns exec "$NS0" unshare --uts sh -c 'hostname st-node0; exec "$@"' sh \
    timeout 600 mpirun --allow-run-as-root -np 2 --hostfile "$tmp/hosts" --map-by node --bind-to none \
    --mca plm_rsh_agent "$tmp/rsh" --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include 10.231.0.0/24 \
    --mca oob_tcp_if_include 10.231.0.0/24 "${extra[@]}" -x OMP_NUM_THREADS=1 -x ST_PEAK_CACHE=off \
    "$bin" train --data "$tmp/train.bin" "${MODEL[@]}" --steps "$steps" --threads 1 --val-every 0 --quiet \
    --log "$log" "$@" >"$log.out" 2>&1 || { echo "netsim: run failed, see below" >&2; cat "$log.out" >&2; exit 1; }
}

# The link as MPI sees it: comm_bench's all-reduce through the comm API (what the trainer calls)
# across the two namespaces at 4 KiB and 16 MiB (best of its timed calls). For 2 ranks the plan's
# all-reduce is 2α + S/bw, so α = T(4 KiB)/2 and bw = 16 MiB / (T(16 MiB) − 2α). Prints "α_s bw_Bps".
# (the build's comm_bench target: it links exactly what comm needs)
cmake --build "$(dirname "$bin")" --target comm_bench >/dev/null \
  || { echo "netsim: cannot build comm_bench in $(dirname "$bin")" >&2; exit 1; }
cp "$(dirname "$bin")/bench/comm_bench" "$tmp/comm_bench"
calibrate() {
  local out=$tmp/cal.out sweep=--quick
  [[ -n ${BENCH_FULL:-} ]] && sweep=
  # shellcheck disable=SC2086
  ip netns exec "$NS0" unshare --uts sh -c 'hostname st-node0; exec "$@"' sh \
    timeout 300 mpirun --allow-run-as-root -np 2 --hostfile "$tmp/hosts" --map-by node --bind-to none \
    --mca plm_rsh_agent "$tmp/rsh" --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include 10.231.0.0/24 \
    --mca oob_tcp_if_include 10.231.0.0/24 -x OMP_NUM_THREADS=1 "$tmp/comm_bench" --only 0 \
    $sweep --max-mb 16 >"$out" 2>&1 \
    || { echo "netsim: comm_bench failed" >&2; cat "$out" >&2; exit 1; }
  # CALDIR=DIR keeps each link's comm_bench table (every all-reduce form at 4 KiB, 64 KiB, 1 and 16
  # MiB, or with BENCH_FULL=1 every 4x from 4 KiB to 16 MiB) as DIR/comm_bench_RATE.md.
  if [[ -n ${CALDIR:-} ]]; then mkdir -p "$CALDIR" && cp "$out" "$CALDIR/comm_bench_$rate.md"; fi
  awk -F'|' '/^\| all-reduce \| comm API/ && NF == 9 { gsub(/ /, "", $4); gsub(/ /, "", $5); t[$4] = $5 * 1e-6 }
    END { a = t["4096"] / 2; printf "%.3e %.4e\n", a, 16777216 / (t["16777216"] - 2 * a) }' "$out"
}

# summarize LOG: rank 0's comm (time_ms.comm: every wait in a collective or, at pp, a point-to-point
# transfer, the pipeline's idle time included) and step total, over the steps after the first: their
# medians, then the fastest step's (the least disturbed by other jobs on a shared machine).
summarize() {
  python3 - "$1" <<'PY'
import json, statistics, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
steps = [r for r in recs if r['event'] == 'step'][1:]
med = lambda f: statistics.median(f(s) for s in steps)
fast = min(steps, key=lambda s: s['time_ms']['total'])  # the step least disturbed by other load
# the fastest step's waits in the world's scalar collectives (token count, loss, norms, times): their
# bytes are nothing, so they are mostly the ranks' skew (time_ms.comm_by_kind; -1 without it)
sc = fast['time_ms'].get('comm_by_kind', {}).get('scalar collective', -1)
# the least comm of any rank in that step (time_ms.comm_by_rank): the rank that arrived last at the
# collectives waited least, so this is the closest to the transfer itself (-1 without it)
lo = min(fast['time_ms'].get('comm_by_rank', [-1]))
# and over every step, the median of that least comm: the fastest step's comm is one draw, and
# random skew between the ranks moves rank 0's comm by more than a fast link's transfer
mlo = med(lambda s: min(s['time_ms'].get('comm_by_rank', [-1])))
print(f"{med(lambda s: s['time_ms']['comm']):.2f} {med(lambda s: s['time_ms']['total']):.2f} "
      f"{fast['time_ms']['comm']:.2f} {fast['time_ms']['total']:.2f} {sc:.2f} {lo:.2f} {mlo:.2f}")
PY
}

# plan_row CONFIG HW: the plan's communication and step time (ms) for the grid, priced on HW.
# Communication: dp + tp + pp terms with --no-overlap (all of it exposed); overlapped dp: what the
# step cannot hide (step − compute − optimizer); pp: the pp term + the bubble (what the pipeline
# waits for, the trainer's idle time).
plan_row() {
  # shellcheck disable=SC2046
  "$bin" plan "${MODEL[@]}" --threads 1 --hardware "$2" $(grid "$1") --json | python3 -c '
import json, sys
c = json.load(sys.stdin)["compute"]; t = c["time_s"]
comp = t["matmul"] + t["elementwise"]
overlapped = sys.argv[1] in ("dp0o", "dp0n", "dp0p", "dp1o", "dp2o", "dp3o")
comm = c["step_s"] - comp - t["optimizer"] - t["bubble"] if overlapped else t["dp"] + t["tp"] + t["pp"] + t["bubble"]
st = c["step_s"]
print(f"{1e3 * comm:.2f} {1e3 * st:.2f}")' "$1"
}

# ---- this machine's profile (one thread: what each rank has) ----
"$bin" plan --measure-hardware "$tmp/hw.json" --measure-threads 1 >/dev/null
echo "# netsim $(date -u +%Y-%m-%dT%H:%MZ): $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# $bin train ${MODEL[*]} --steps $steps --threads 1, 2 ranks (one per namespace), $rounds rounds; netem: $have_netem"
python3 -c 'import json,sys; h=json.load(open(sys.argv[1])); print("# profile: fp32 peak %.1f GFLOP/s, matmul eff %.2f, mem bw %.1f GB/s" % (h["peak_fp32"]/1e9, h["matmul_eff"], h["mem_bw"]/1e9))' "$tmp/hw.json"
# Compute calibration: one process of one thread doing one rank's dp work (no mpirun, no link);
# the profile's matmul rate is scaled so that the plan's step equals its fastest step, so
# the rows below compare the communication model, not the compute model (printed: the factor).
for ((r = 0; r < rounds; r++)); do
  OMP_NUM_THREADS=1 ST_PEAK_CACHE=off "$bin" train --data "$tmp/train.bin" "${MODEL[@]}" --steps "$steps" --threads 1 \
    --val-every 0 --quiet --log "$tmp/one.$r.jsonl" >"$tmp/one.$r.out" 2>&1 \
    || { echo "netsim: one-process run failed" >&2; cat "$tmp/one.$r.out" >&2; exit 1; }
  summarize "$tmp/one.$r.jsonl" >"$tmp/one.$r.sum"
done
one_ms=$(cat "$tmp"/one.*.sum | python3 -c 'import sys; print(min(float(l.split()[3]) for l in sys.stdin))')
"$bin" plan "${MODEL[@]}" --threads 1 --hardware "$tmp/hw.json" --json >"$tmp/one_plan.json"
python3 - "$tmp/hw.json" "$tmp/one_plan.json" "$one_ms" <<'PY'
import json, sys
h = json.load(open(sys.argv[1])); c = json.load(open(sys.argv[2]))["compute"]; t = c["time_s"]; meas = float(sys.argv[3]) / 1e3
rest = c["step_s"] - t["matmul"]  # elementwise + optimizer: kept as the profile prices them
f = t["matmul"] / max(meas - rest, 1e-9)
print(f"# compute calibration: one process (no link), fastest step {1e3 * meas:.1f} ms, plan {1e3 * c['step_s']:.1f}: "
      f"fp32 peak x matmul efficiency ({h['peak_fp32'] / 1e9:.1f} GFLOP/s x {h['matmul_eff']:.3f}) scaled by {f:.3f}")
h["peak_fp32"] *= f  # peak x efficiency prices the matmuls; the peak, not the efficiency (<= 1), is scaled
json.dump(h, open(sys.argv[1], "w"))
PY
echo
echo "Measured: rank 0, fastest step of all rounds (median of the rounds' medians in brackets); ratios are fastest / plan."
echo
echo "| link | config | measured comm ms | plan comm ms | comm ratio | measured step ms | plan step ms | step ratio | plan on the link as measured: comm / step ms | ratios | of the comm: scalar-collective waits ms | least comm of any rank ms (/ plan) | median over steps of the least comm ms (/ plan) |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for link in $links; do
  rate=${link%%:*} delay=
  [[ $link == *:* ]] && delay=${link#*:}
  shape "$rate" "$delay"
  read -r alpha bwcal < <(calibrate)
  bits=$(python3 -c "import sys; s=sys.argv[1].lower(); m={'k':1e3,'m':1e6,'g':1e9}
u=s.rstrip('bit'); print(int(float(u[:-1])*m[u[-1]]) if u[-1] in m else int(u))" "$rate")
  # Two profiles: the link as shaped (rate, α measured) and as MPI measured it (comm_bench's bw).
  python3 - "$tmp/hw.json" "$tmp/hw_link.json" "$tmp/hw_cal.json" "$bits" "$alpha" "$bwcal" <<'PY'
import json, sys
h = json.load(open(sys.argv[1])); bits, alpha, bwcal = float(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
h.update(inter_bw=bits / 8, inter_lat=alpha, devices_per_node=1, name="netsim")
json.dump(h, open(sys.argv[2], "w"))
h.update(inter_bw=min(bwcal, bits / 8)); json.dump(h, open(sys.argv[3], "w"))
PY
  echo "| $link | (MPI all-reduce across it: α $(python3 -c "print(f'{float(\"$alpha\")*1e6:.1f}')") µs, $(python3 -c "print(f'{float(\"$bwcal\")/1e9:.3f}')") GB/s) | | | | | | | | | | | |"
  for ((r = 0; r < rounds; r++)); do
    for cfg in $configs; do
      # shellcheck disable=SC2046
      run2 "$tmp/$rate.$cfg.$r.jsonl" --mpi "$(mpi_extra "$cfg")" $(grid "$cfg") $(noise "$cfg")
      # The start record's build.comm says whether comm's progress thread ran: on for every run
      # across the link except dp0n and dp0p (a wrong host setup would make it one node).
      python3 - "$tmp/$rate.$cfg.$r.jsonl" "$cfg" <<'PY' >&2
import json, sys
line = json.loads(open(sys.argv[1]).readline()).get("build", {}).get("comm", "")
want = sys.argv[2] not in ("dp0n", "dp0p")
if ("progress thread" in line) != want:
    print(f"netsim: warning: {sys.argv[2]} ran with comm's progress thread {'off' if want else 'on'}: {line!r}")
PY
      summarize "$tmp/$rate.$cfg.$r.jsonl" >"$tmp/$rate.$cfg.$r.sum"
      # LOGDIR=DIR keeps each run's metrics log (rank 0's step records) as DIR/RATE.CONFIG.ROUND.jsonl.
      if [[ -n ${LOGDIR:-} ]]; then mkdir -p "$LOGDIR" && cp "$tmp/$rate.$cfg.$r.jsonl" "$LOGDIR/"; fi
    done
  done
  for cfg in $configs; do
    read -r mc ms mcm msm msc mlo mml < <(cat "$tmp/$rate.$cfg".*.sum | python3 -c '
import statistics, sys
rows = [list(map(float, l.split())) for l in sys.stdin]
fast = min(rows, key=lambda r: r[3])
print(f"{fast[2]:.1f} {fast[3]:.1f}", *(f"{statistics.median(r[i] for r in rows):.1f}" for i in (0, 1)), f"{fast[4]:.1f} {fast[5]:.1f}",
      f"{statistics.median(r[6] for r in rows):.1f}")')
    read -r pc ps < <(plan_row "$cfg" "$tmp/hw_link.json")
    read -r cc cs < <(plan_row "$cfg" "$tmp/hw_cal.json")
    python3 -c 'import sys; l, c, mc, pc, ms, ps, cc, cs, mcm, msm, msc, mlo, mml = sys.argv[1:3] + list(map(float, sys.argv[3:]))
r = lambda a, b: f"{a / b:.2f}" if b > 0 else "-"
print(f"| {l} | {c} | {mc:.1f} ({mcm:.1f}) | {pc:.1f} | {r(mc, pc)} | {ms:.1f} ({msm:.1f}) | {ps:.1f} | {r(ms, ps)} | "
      f"{cc:.1f} / {cs:.1f} | {r(mc, cc)} / {r(ms, cs)} | {msc:.1f} | {mlo:.1f} ({r(mlo, pc)}) | {mml:.1f} ({r(mml, pc)}) |")' \
      "$link" "$cfg" "$mc" "$pc" "$ms" "$ps" "$cc" "$cs" "$mcm" "$msm" "$msc" "$mlo" "$mml" | tee -a "$tmp/rows.md"
  done
done
echo
# How much of each ZeRO stage's communication its overlap hides: the overlapped row's exposed comm
# (dpKo) against the same stage's whole comm with --no-overlap (dpK), both rank 0's fastest step.
python3 - "$tmp/rows.md" <<'PY'
import sys
rows = [[c.strip() for c in l.strip().strip("|").split("|")] for l in open(sys.argv[1])]
comm = {(r[0], r[1]): float(r[2].split()[0]) for r in rows}
for (link, cfg), exposed in comm.items():
    if cfg.endswith("o") and (link, cfg[:-1]) in comm:
        whole = comm[(link, cfg[:-1])]
        print(f"{link} ZeRO {cfg[2]}: overlap hides {100 * (1 - exposed / whole):.0f} % of its communication "
              f"(exposed {exposed:.1f} ms of {whole:.1f} ms without overlap)")
PY
echo
# The issue's bar (within 25 % of the plan), counted over the rows that are not controls (dp0n, dp0p).
python3 - "$tmp/rows.md" <<'PY'
import sys
rows = [[c.strip() for c in l.strip().strip('|').split('|')] for l in open(sys.argv[1]) if l.startswith('|')]
rows = [r for r in rows if r[1] not in ('dp0n', 'dp0p')]
ok = lambda x: x not in ('-', '') and abs(float(x) - 1) <= 0.25
least = [r[11].split('(')[-1].rstrip(')') for r in rows]
mleast = [r[12].split('(')[-1].rstrip(')') for r in rows]
print(f"Within 25 % of the plan, {len(rows)} rows (controls dp0n, dp0p not counted): comm (rank 0) "
      f"{sum(ok(r[4]) for r in rows)}, comm (least of any rank) {sum(ok(x) for x in least)}, "
      f"comm (median over steps of the least) {sum(ok(x) for x in mleast)}, "
      f"step {sum(ok(r[7]) for r in rows)}.")
PY
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
