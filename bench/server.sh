#!/usr/bin/env bash
# The CPU comparison on a many-core server in one command (issue 28; docs/performance.md, "On a
# 16-core server"). Made for the GPU test machine's 16-core Xeon (Ubuntu 24.04, PyTorch 2.x under
# python3, Open MPI, no oneDNN / cJSON / liblbfgs / GSL, no network) inside one device call.
#
#   bench/server.sh --pack   HERE. Builds a portable binary in build-portable/ (ST_ARCH_FLAGS
#       "-march=x86-64-v4 -mavx512bf16": AVX-512 and bf16 dot products, which Zen 4/5 and Sapphire
#       Rapids both run; oneDNN still picks AMX at run time; no CUDA) and packs into .device-bundle/
#       what the server lacks: scripts/device-bundle.sh's prefix (oneDNN, cJSON, liblbfgs, GSL,
#       LAPACK/BLAS, ... as shared libraries; remade only when that script is newer than it) and
#       server/: scaletrain, step_bench, the PyTorch peer (../shared/peers/torch_gpt2_bench.py, which
#       does not travel with the checkout) and BUILD (commit, compiler, flags). The device call then
#       carries only .device-bundle.
#   bench/server.sh OUTDIR   THERE. Five stages, each bounded in time, then a short table, last:
#       env    the machine (lscpu, NUMA nodes, memory, load), PyTorch's version and build, the ISA
#              oneDNN dispatches to, the build record
#       peer   ours (step_bench) against PyTorch (peer fp32, and bench/torch_bf16_peer.py's bf16
#              autocast) on configs A, B, C (bench/common.sh) at N threads (the largest of
#              SERVER_THREADS); the four programs interleaved in each round, medians over rounds
#              (and, where scripts/gpu_check.sh built build-gpu/ there, its -march=native step_bench
#              on B beside the portable one: what the portable flags cost)
#       scale  our step on config B, fp32 and bf16, at each of SERVER_THREADS: forward / backward /
#              optimizer, speedup and parallel efficiency per phase against the fewest threads
#       place  the trainer (d6: config B's shape; global batch 64 sequences of 256, random tokens):
#              1 process x N threads (OpenMP threads unpinned, then pinned to cores) and mpirun dp R x
#              N/R threads (R = SERVER_DP, 8): unbound, each rank bound to its own N/R cores, unbound
#              without --threads (the default: N/R each, "Rxauto none"), ranks
#              spread round-robin over NUMA nodes, and one rank per NUMA node (the last two where there
#              are several nodes); tokens/s, the step's split, the logged MFU (must stay <= 1), and
#              the step against the trainer's own plan, priced by profiles measured first (1 x N
#              threads, and R copies of N/R threads at once: plan --measure-copies)
#       tp     the trainer (the same d6, one micro-batch of 8 x 256) at tp 2 x N/2 threads, each rank
#              bound to its cores, without and with --sp: the overlapped tp collectives against the
#              blocking path (ST_PAR_TEST_TP_BLOCKING=1), exposed tp time per step beside plan's
#              alpha-beta time
#       zero   bench/zero_overlap.sh R N/R B "2 3" 4 1, where it exists (ZeRO-2/3 communication
#              hiding: config B, with and without overlap), with what is left of the budget
#   All logs, the raw results and the table go into OUTDIR/server.tar.gz (one file: the device tool
#   brings back at most 8, and scripts/gpu_check.sh's stage "server" adds only this one).
#
# Settings (environment): SERVER_THREADS ("1 2 4 8 16": the powers of two up to nproc, and nproc),
# SERVER_ROUNDS (2), SERVER_STEPS (every program's step count; default per config and thread
# count), SERVER_BUDGET (300 s for all stages; each stage has its share, the table always prints),
# SERVER_SKIP (stage names), SERVER_DP (8), SERVER_GLOBAL_BATCH (64 sequences: place),
# SERVER_PLACE_MODEL (d6: the trainer's preset in place), SERVER_ZERO_CONFIGS (B),
# SERVER_ZERO_STAGES ("2 3"), SERVER_ZERO_STEPS (4), SERVER_CONFIGS (other shapes: below),
# SERVER_NATIVE_BIN (build-gpu/bench/step_bench), SERVER_PREFIX (/tmp/st-prefix), SERVER_PYTHON (python3), SERVER_BIN (a folder holding scaletrain
# and step_bench or bench/step_bench; default .device-bundle/server/bin), SERVER_PEER (the peer
# script), SERVER_SLOW_BLAS_OK=1 (run a PyTorch on the reference BLAS anyway: its figures marked).
set -uo pipefail
cd "$(dirname "$0")/.."
arch_flags="-march=x86-64-v4 -mavx512bf16"

if [[ ${1:-} == --pack ]]; then
  set -e
  cmake -S . -B build-portable -DCMAKE_BUILD_TYPE=Release -DST_CUDA=OFF "-DST_ARCH_FLAGS=$arch_flags" >/dev/null
  cmake --build build-portable -j"$(nproc)" --target scaletrain step_bench
  if [[ ! -f .device-bundle/prefix.tar.xz || scripts/device-bundle.sh -nt .device-bundle/prefix.tar.xz ]]; then
    bash scripts/device-bundle.sh .device-bundle
  fi
  s=.device-bundle/server
  rm -rf "$s" && mkdir -p "$s/bin"
  cp build-portable/scaletrain build-portable/bench/step_bench "$s/bin/"
  strip "$s"/bin/*
  peer=${SERVER_PEER:-../shared/peers/torch_gpt2_bench.py}
  [[ -f $peer ]] || { echo "server --pack: PyTorch peer not found at $peer (set SERVER_PEER=...)" >&2; exit 1; }
  cp "$peer" "$s/torch_gpt2_bench.py"
  # The server runs glibc 2.39: the binaries must need no newer symbol version (device-bundle.sh
  # checks the libraries the same way).
  for b in "$s"/bin/*; do
    g=$(objdump -T "$b" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -1)
    [[ "$(printf '%s\n2.39\n' "$g" | sort -V | tail -1)" == 2.39 ]] || { echo "server --pack: $b needs GLIBC_$g (> 2.39)" >&2; exit 1; }
  done
  {
    echo "commit $(git rev-parse --short=12 HEAD 2>/dev/null)$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
    echo "packed $(date -u +%FT%TZ) on $(. /etc/os-release; echo "$PRETTY_NAME"), $(ldd --version | head -1)"
    echo "compiler $(gcc --version | head -1); Release flags: -O3 $arch_flags -fno-math-errno; ST_CUDA=OFF"
    echo "needs $(readelf -d "$s/bin/scaletrain" | sed -n 's/.*NEEDED.*\[\(.*\)\]/\1/p' | tr '\n' ' ')"
  } > "$s/BUILD"
  cat "$s/BUILD"
  echo "server --pack: .device-bundle $(du -sh .device-bundle | cut -f1) (prefix $(du -h .device-bundle/prefix.tar.xz | cut -f1)," \
       "binaries $(du -ch "$s"/bin/* | tail -1 | cut -f1)); the device call carries [\".device-bundle\"] (64 MiB with the checkout)"
  exit 0
fi

out=${1:?usage: bench/server.sh OUTDIR | --pack}
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d /tmp/st-server.XXXXXX)
trap 'rm -rf "$work"' EXIT
t_all=$(date +%s)
budget=${SERVER_BUDGET:-300}
deadline=$(( t_all + budget ))
skip=" ${SERVER_SKIP:-} "
py=${SERVER_PYTHON:-python3}
rounds=${SERVER_ROUNDS:-2}
ncpu=$(nproc)
if [[ -n ${SERVER_THREADS:-} ]]; then
  threads=$SERVER_THREADS
else
  threads=""; for ((t = 1; t <= ncpu && t <= 16; t *= 2)); do threads+="$t "; done
  (( ncpu > 16 || (ncpu & (ncpu - 1)) != 0 )) && threads+="$ncpu"
fi
N=$(tr ' ' '\n' <<<"$threads" | sort -n | tail -1)
dp=${SERVER_DP:-8}; (( dp > N )) && dp=$N
tpr=$(( N / dp )) # threads per rank
prefix=${SERVER_PREFIX:-/tmp/st-prefix} # where scripts/gpu_check.sh unpacks the bundle too
source bench/common.sh
# SERVER_CONFIGS="NAME L NH C V B T STEPS; ...": other shapes than A, B, C (smoke tests on small machines)
if [[ -n ${SERVER_CONFIGS:-} ]]; then IFS=';' read -r -a configs <<<"$SERVER_CONFIGS"; fi
scfg=${configs[1]:-${configs[0]}} # the scaling stage's shape: B
res=$work/results.tsv
: > "$res"

# The binaries: SERVER_BIN, else the packed ones, else this checkout's build-portable.
bindir=${SERVER_BIN:-}
if [[ -z $bindir ]]; then
  for d in .device-bundle/server/bin build-portable; do [[ -x $d/scaletrain ]] && { bindir=$d; break; }; done
fi
st=${bindir:-none}/scaletrain
sb=${bindir:-none}/step_bench; [[ -x $sb ]] || sb=$bindir/bench/step_bench
# A -march=native step_bench built on the server (scripts/gpu_check.sh's build-gpu), where there is
# one: the peer stage times it on B beside the portable one (what the portable flags cost).
nsb=${SERVER_NATIVE_BIN:-build-gpu/bench/step_bench}
[[ -x $nsb ]] || nsb=""
peer=${SERVER_PEER:-}
[[ -n $peer ]] || for p in .device-bundle/server/torch_gpt2_bench.py ../shared/peers/torch_gpt2_bench.py; do
  [[ -f $p ]] && { peer=$p; break; }; done

# The libraries the binaries lack: the bundle's prefix (kept when scripts/gpu_check.sh already
# unpacked it), for our programs only, so that PyTorch runs on its own libraries.
if [[ -f .device-bundle/prefix.tar.xz && ! -f $prefix/lib/libdnnl.so.2 ]]; then
  rm -rf "$prefix" && mkdir -p "$prefix" && tar -xJf .device-bundle/prefix.tar.xz -C "$prefix" --strip-components=1
fi
ourlib=$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
[[ -d $prefix/lib ]] || ourlib=${LD_LIBRARY_PATH:-}
export ST_PEAK_CACHE=$work/peaks.json # the trainer's measured peaks, kept with the logs
mpi=(mpirun)
[[ $(id -u) -eq 0 ]] && mpi+=(--allow-run-as-root)
hwt=$(lscpu | sed -n 's/^Thread(s) per core: *//p'); [[ ${hwt:-1} -gt 1 ]] && mpi+=(--use-hwthread-cpus)
numa=$(lscpu | sed -n 's/^NUMA node(s): *//p'); numa=${numa:-1}
# place: every run trains the same global batch (micro-batch 8 x ranks x accumulation); one that the
# ranks cannot split evenly would be changed silently, and the runs' losses would not compare.
gbs=${SERVER_GLOBAL_BATCH:-64}
for r in "$dp" "$numa"; do
  if ! [[ $gbs =~ ^[0-9]+$ ]] || (( gbs < 8 * r || gbs % (8 * r) )); then
    echo "server: SERVER_GLOBAL_BATCH: expected a multiple of 8 x $r ranks (micro-batch 8; SERVER_DP $dp, NUMA nodes $numa), found '$gbs'" >&2
    exit 1
  fi
done

# pack: the logs so far into OUTDIR/server.tar.gz (after each stage, so a killed run still returns them)
pack() { tar -C "$work" -czf "$out/server.tar.gz.tmp" --exclude='*.bin' . && mv "$out/server.tar.gz.tmp" "$out/server.tar.gz"; }
left() { echo $(( sdl - $(date +%s) )); }
# rec STAGE TAG LOG CMD...: runs CMD with what is left of the stage's time, its output appended to
# LOG; its RESULT line (or, for the trainer, "log FILE") goes to results.tsv tagged STAGE and TAG.
# Returns non-zero when the stage's time is spent.
rec() {
  local stage=$1 tag=$2 log=$3; shift 3
  local rem; rem=$(left)
  if (( rem < 5 )); then echo "skipped (stage time spent): $tag" >> "$work/$log"; return 1; fi
  echo "\$ $*" >> "$work/$log"
  local t0=$SECONDS o rc
  o=$(timeout "$rem" "$@" 2>&1); rc=$?
  printf '%s\n' "$o" >> "$work/$log"
  echo "# $tag: exit $rc in $(( SECONDS - t0 ))s" >> "$work/$log"
  local r; r=$(grep -m1 '^RESULT ' <<<"$o" | sed 's/^RESULT //')
  if [[ $rc -eq 0 && -n $r ]]; then printf '%s\t%s\t%s\n' "$stage" "$tag" "$r" >> "$res"
  elif [[ $rc -eq 0 ]]; then printf '%s\t%s\t%s\n' "$stage" "$tag" '{}' >> "$res"
  else printf '%s\t%s\t{"failed": %d}\n' "$stage" "$tag" "$rc" >> "$res"; fi
  [[ $rc -ne 124 ]]
}
# stage NAME SECONDS: starts a stage with at most SECONDS (and never past the budget); false if skipped.
stage() {
  if [[ "$skip" == *" $1 "* ]]; then echo "server: $1 skipped (SERVER_SKIP)"; printf '%s\t-\t{"skipped": "SERVER_SKIP"}\n' "$1" >> "$res"; return 1; fi
  local now; now=$(date +%s)
  sdl=$(( now + $2 )); (( sdl > deadline )) && sdl=$deadline
  if (( sdl - now < 10 )); then echo "server: $1 skipped (budget spent)"; printf '%s\t-\t{"skipped": "budget"}\n' "$1" >> "$res"; return 1; fi
  echo "server: $1 ($(( sdl - now ))s at most, $(( now - t_all ))s elapsed)"
}
# PyTorch runs on its own libraries: LD_LIBRARY_PATH without the bundle (gpu_check.sh exports it).
pyld=$(tr ':' '\n' <<<"${LD_LIBRARY_PATH:-}" | grep -vxF "$prefix/lib" | paste -sd: -)
ours=(env LD_LIBRARY_PATH="$ourlib") # our programs' command prefix (timeout runs it: no shell function)
steps_for() { echo "${SERVER_STEPS:-$1}"; }

# --- env --------------------------------------------------------------------------------------
sdl=$deadline
{
  echo "date $(date -u +%FT%TZ); $(uptime)"
  echo "threads: $threads (N = $N); dp $dp x $tpr threads; rounds $rounds; budget ${budget}s; numa nodes $numa"
  lscpu
  command -v numactl >/dev/null && numactl --hardware
  free -g
  echo "--- build: ${bindir:-none}"; cat .device-bundle/server/BUILD 2>/dev/null
  echo "--- ldd $st"; env LD_LIBRARY_PATH="$ourlib" ldd "$st" 2>&1
  echo "--- mpirun: $(mpirun --version 2>&1 | head -1)"
  echo "--- $py: $(command -v "$py")"
  timeout 60 env LD_LIBRARY_PATH="$pyld" "$py" -c 'import torch, sys
print("torch", torch.__version__, "python", sys.version.split()[0], "threads", torch.get_num_threads())
cap = getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", None)
print("cpu capability:", cap() if cap else "n/a", "| mkldnn:", torch.backends.mkldnn.is_available())
try:
    import numpy
    print("numpy", numpy.__version__)
except ImportError:
    print("numpy: missing")
print(torch.__config__.show())
print(torch.__config__.parallel_info())' > "$work/torch.txt" 2>&1
  cat "$work/torch.txt"
  echo "--- oneDNN ISA (a bf16 step of config C, DNNL_VERBOSE=1):"
  timeout 60 "${ours[@]}" OMP_NUM_THREADS="$N" DNNL_VERBOSE=1 ONEDNN_VERBOSE=1 "$sb" 6 6 384 256 8 256 3 "$N" bf16 2>&1 | grep -m3 -E "info,cpu|isa" || true
} > "$work/env.txt" 2>&1
tv=$(sed -n 's/^torch \([^ ]*\) python.*/\1/p' "$work/torch.txt"); tv=${tv:-none}
echo "server: $(lscpu | sed -n 's/^Model name: *//p'), $ncpu cpus, $numa NUMA node(s); PyTorch $tv under $py; binaries ${bindir:-none}"
ok=1
# refuse MESSAGE: no stage runs; the message is printed now and in the table.
refuse() { echo "server: $1" | tee -a "$work/env.txt"; printf 'env\terror\t{"error": "%s"}\n' "${1//\"/\'}" >> "$res"; ok=0; }
[[ -x $st && -x $sb ]] || refuse "no scaletrain/step_bench in ${bindir:-.device-bundle/server/bin} (run 'bash bench/server.sh --pack' here and carry .device-bundle, or set SERVER_BIN)"
if [[ $ok -eq 1 ]] && env LD_LIBRARY_PATH="$ourlib" ldd "$st" | grep -q "not found"; then
  refuse "$st lacks libraries: $(env LD_LIBRARY_PATH="$ourlib" ldd "$st" | grep 'not found' | awk '{print $1}' | tr '\n' ' ')(carry .device-bundle)"
fi
slowblas=0
if grep -q "BLAS_INFO=generic" "$work/torch.txt"; then
  # Debian's torch calls the system libblas.so.3: the reference one makes it ~30x slow (bench/common.sh).
  if ! (require_fast_blas) 2>>"$work/env.txt"; then
    [[ ${SERVER_SLOW_BLAS_OK:-0} == 1 ]] || refuse "PyTorch ($py) would run on the reference BLAS, ~30x slow (SERVER_SLOW_BLAS_OK=1 for a smoke test)"
    slowblas=1
  fi
fi
[[ "$tv" != none ]] || refuse "no PyTorch under $py (SERVER_PYTHON=...): $(tail -1 "$work/torch.txt")"
grep -q "^numpy: missing" "$work/torch.txt" && refuse "the PyTorch peer needs numpy, which $py lacks"
[[ -f $peer ]] || refuse "no PyTorch peer (carry .device-bundle from 'bench/server.sh --pack', or SERVER_PEER=)"
printf 'env\tinfo\t{"model": "%s", "torch": "%s", "python": "%s", "N": %d, "dp": %d, "tpr": %d, "numa": %d, "ncpu": %d, "slow_blas": %d, "gb": %d, "cpu": "%s", "load": "%s", "date": "%s", "build": "%s"}\n' \
  "${SERVER_PLACE_MODEL:-d6}" "$tv" "$py" "$N" "$dp" "$tpr" "$numa" "$ncpu" "$slowblas" "${SERVER_GLOBAL_BATCH:-64}" "$(lscpu | sed -n 's/^Model name: *//p' | tr -d '"')" \
  "$(cut -d' ' -f1-3 /proc/loadavg)" "$(date -u +%FT%TZ)" "$(head -1 .device-bundle/server/BUILD 2>/dev/null | tr -d '"')" >> "$res"
pack

# --- peer: ours vs PyTorch at N threads, interleaved ---------------------------------------------
if [[ $ok -eq 1 ]] && stage peer $(( budget * 36 / 100 )); then
  for ((r = 0; r < rounds; r++)); do
    for cfg in "${configs[@]}"; do
      read -r name L NH C V B T steps <<<"$cfg"
      steps=$(steps_for "$steps")
      shape=(--V "$V" --L "$L" --NH "$NH" --C "$C" --B "$B" --T "$T" --steps "$steps" --threads "$N")
      rec peer "$name torch fp32" peer.log env "${peer_env[@]}" LD_LIBRARY_PATH="$pyld" OMP_NUM_THREADS="$N" "$py" "$peer" "${shape[@]}" &&
      rec peer "$name ours fp32" peer.log "${ours[@]}" OMP_NUM_THREADS="$N" "$sb" "$L" "$NH" "$C" "$V" "$B" "$T" "$steps" "$N" fp32 &&
      rec peer "$name torch bf16" peer.log env "${peer_env[@]}" LD_LIBRARY_PATH="$pyld" OMP_NUM_THREADS="$N" "$py" bench/torch_bf16_peer.py --peer "$peer" "${shape[@]}" &&
      rec peer "$name ours bf16" peer.log "${ours[@]}" OMP_NUM_THREADS="$N" "$sb" "$L" "$NH" "$C" "$V" "$B" "$T" "$steps" "$N" bf16 || break 2
      if [[ -n $nsb && $name == B ]]; then
        rec peer "$name native fp32" peer.log "${ours[@]}" OMP_NUM_THREADS="$N" "$nsb" "$L" "$NH" "$C" "$V" "$B" "$T" "$steps" "$N" fp32 &&
        rec peer "$name native bf16" peer.log "${ours[@]}" OMP_NUM_THREADS="$N" "$nsb" "$L" "$NH" "$C" "$V" "$B" "$T" "$steps" "$N" bf16 || break 2
      fi
    done
  done
  pack
fi

# --- scale: our step on config B at each thread count, per phase --------------------------------
if [[ $ok -eq 1 ]] && stage scale $(( budget * 26 / 100 )); then
  read -r name L NH C V B T _ <<<"$scfg"
  # Most threads first, so that a budget cut loses the slow few-thread runs, not the 16-thread one.
  for t in $(tr ' ' '\n' <<<"$threads" | sort -rn); do
    s=$(steps_for $(( t == 1 ? 3 : t == 2 ? 4 : 6 ))) # step_bench times the steps after 2 warm-up ones
    rec scale "$t fp32" scale.log "${ours[@]}" OMP_NUM_THREADS="$t" "$sb" "$L" "$NH" "$C" "$V" "$B" "$T" "$s" "$t" fp32 &&
    rec scale "$t bf16" scale.log "${ours[@]}" OMP_NUM_THREADS="$t" "$sb" "$L" "$NH" "$C" "$V" "$B" "$T" "$s" "$t" bf16 || break
  done
  pack
fi

# The trainer's data (place and tp): random-looking tokens of config B's vocabulary (step time does
# not depend on them), made once.
data=$work/tokens.bin
mkdata() {
  [[ -f $data ]] || "$py" - "$data" 50257 <<'PY'
import array, struct, sys
path, V, n = sys.argv[1], int(sys.argv[2]), 400000
hdr = [20240520, 1, n, 0, 0, 0, 0, V] + [0] * 248
tok = array.array('H', [(i * 7919 + (i // 13) * 31) % V for i in range(n)])
with open(path, 'wb') as f:
    f.write(struct.pack('<256i', *hdr)); f.write(tok.tobytes())
PY
}

# --- place: the trainer, 1 process x N threads and mpirun dp x N/dp, placements ------------------
if [[ $ok -eq 1 ]] && stage place $(( budget * 24 / 100 )); then
  mkdata
  gb=${SERVER_GLOBAL_BATCH:-64}
  s=$(steps_for 5)
  train=(--data "$data" --model "${SERVER_PLACE_MODEL:-d6}" --seq-len 256 --max-seq-len 256 --micro-batch 8 --steps "$s" --val-every 0
         --warmup 2 --quiet --no-noise-scale)
  tr1() { # tr1 TAG OMP-ENV...: one process, N threads, global batch by accumulation
    local tag=$1; shift
    rec place "$tag" place.log "${ours[@]}" OMP_NUM_THREADS="$N" "$@" "$st" train "${train[@]}" --threads "$N" --grad-accum $(( gb / 8 )) \
      --log "$work/place-${tag// /_}.jsonl"
  }
  trn() { # trn TAG RANKS THREADS MPIRUN-PLACEMENT...: mpirun, global batch = ranks x 8 x accumulation; THREADS
    local tag=$1 np=$2 t=$3; shift 3 # "auto": no --threads (the default: each rank's share of the node)
    local acc=$(( gb / (8 * np) )); (( acc < 1 )) && acc=1
    local th=(--threads "$t") ompt=(-x OMP_NUM_THREADS="$t")
    [[ $t == auto ]] && th=() ompt=()
    rec place "$tag" place.log "${mpi[@]}" -np "$np" "$@" --report-bindings -x LD_LIBRARY_PATH="$ourlib" "${ompt[@]}" \
      -x ST_PEAK_CACHE "$st" train "${train[@]}" "${th[@]}" --grad-accum "$acc" --log "$work/place-${tag// /_}.jsonl"
  }
  pin=(OMP_PLACES=cores OMP_PROC_BIND=close)
  # This machine's profiles as these runs share it (the trainer's start record prices with them:
  # docs/plan.md, "Ranks sharing the machine"): one process of N threads, dp ranks measured at once.
  rec place "profile 1x$N" place.log "${ours[@]}" "$st" plan --measure-hardware "$work/hw-1x$N.json" \
    --measure-threads "$N" &&
  rec place "profile ${dp}x$tpr" place.log "${ours[@]}" "$st" plan --measure-hardware "$work/hw-${dp}x$tpr.json" \
    --measure-threads "$tpr" --measure-copies "$dp" &&
  tr1 "1x$N" OMP_PROC_BIND=false &&
  trn "${dp}x$tpr none" "$dp" "$tpr" --bind-to none &&
  trn "${dp}x$tpr cores" "$dp" "$tpr" --map-by "core:PE=$tpr" --bind-to core -x OMP_PLACES=cores -x OMP_PROC_BIND=close &&
  tr1 "1x$N pinned" "${pin[@]}" &&
  trn "${dp}xauto none" "$dp" auto --bind-to none && # the default threads: N/dp each, as "none" above
  if (( numa > 1 )); then
    trn "${dp}x$tpr numa" "$dp" "$tpr" --map-by "numa:PE=$tpr" --bind-to core -x OMP_PLACES=cores -x OMP_PROC_BIND=close &&
    trn "${numa}x$(( N / numa )) per-numa" "$numa" $(( N / numa )) --map-by "numa:PE=$(( N / numa ))" --bind-to core \
      -x OMP_PLACES=cores -x OMP_PROC_BIND=close
  fi
  pack
fi

# --- tp: tp 2 x N/2 threads, the overlapped collectives against the blocking path ----------------
if [[ $ok -eq 1 ]] && (( N >= 2 )) && stage tp $(( budget * 10 / 100 )); then
  mkdata
  h=$(( N / 2 ))
  tpargs=(--data "$data" --model "${SERVER_PLACE_MODEL:-d6}" --seq-len 256 --max-seq-len 256 --micro-batch 8
          --steps "$(steps_for 4)" --val-every 0 --warmup 2 --quiet --tp 2 --threads "$h")
  # (no --no-noise-scale: at tp 2, dp 1 and one micro-batch the trainer estimates no noise scale and
  # refuses the flag, which would change nothing)
  # plan's alpha-beta time of every tp collective (communication.tp_s) for the same grid on one node
  for sp in "" --sp; do
    "${ours[@]}" "$st" plan --model "${SERVER_PLACE_MODEL:-d6}" --seq-len 256 --max-seq-len 256 --micro-batch 8 --grad-accum 1 --tp 2 $sp \
      --threads "$h" --devices-per-node 2 --json > "$work/tp-plan${sp:+-sp}.json" 2>> "$work/tp.log"
  done
  for mode in overlapped blocking overlapped-sp blocking-sp; do
    tenv=(); [[ $mode == blocking* ]] && tenv=(-x ST_PAR_TEST_TP_BLOCKING=1)
    sp=(); [[ $mode == *-sp ]] && sp=(--sp)
    rec tp "tp2x$h $mode" tp.log "${mpi[@]}" -np 2 --map-by "core:PE=$h" --bind-to core -x OMP_PLACES=cores \
      -x OMP_PROC_BIND=close "${tenv[@]}" -x LD_LIBRARY_PATH="$ourlib" -x OMP_NUM_THREADS="$h" -x ST_PEAK_CACHE \
      "$st" train "${tpargs[@]}" "${sp[@]}" --log "$work/tp-$mode.jsonl" || break
  done
  pack
fi

# --- zero: ZeRO-2/3 communication hiding (bench/zero_overlap.sh, where it exists) ---------------
if [[ -f bench/zero_overlap.sh && $ok -eq 1 ]] && stage zero $(( deadline - $(date +%s) )); then
  # dp R x N/R on config B, ZeRO 2 and 3, with and without overlap: 4 trainer runs of 4 steps
  zargs=("$dp" "$tpr" "${SERVER_ZERO_CONFIGS:-B}" "${SERVER_ZERO_STAGES:-2 3}" "${SERVER_ZERO_STEPS:-4}" 1)
  echo "\$ BIN=$st bash bench/zero_overlap.sh ${zargs[*]}" >> "$work/zero.log"
  (
    export LD_LIBRARY_PATH="$ourlib" BIN=$st OUT=$work/zero
    [[ ${hwt:-1} -gt 1 ]] && export MPI_EXTRA="--use-hwthread-cpus ${MPI_EXTRA:-}"
    timeout "$(left)" bash bench/zero_overlap.sh "${zargs[@]}"
  ) >> "$work/zero.log" 2>&1
  printf 'zero\tdone\t{"rc": %d}\n' $? >> "$res"
elif [[ ! -f bench/zero_overlap.sh ]]; then
  printf 'zero\t-\t{"skipped": "no bench/zero_overlap.sh"}\n' >> "$res"
fi

# --- the table --------------------------------------------------------------------------------
"$py" bench/server_summary.py "$work" > "$work/summary.txt" 2>&1 || python3 bench/server_summary.py "$work" > "$work/summary.txt" 2>&1
[[ -f $work/zero.log ]] && { echo "--- zero (bench/zero_overlap.sh ${zargs[*]}), its table:"; grep -E '^(\||# dp|# hidden|zero_overlap:)' "$work/zero.log"; } >> "$work/summary.txt"
echo "total $(( $(date +%s) - t_all ))s; logs in $out/server.tar.gz" >> "$work/summary.txt"
pack
echo
cat "$work/summary.txt"
# Non-zero when nothing could run or a program failed (a stage cut by the budget is not a failure).
[[ $ok -eq 1 ]] && awk -F'"failed": ' 'NF > 1 && $2 + 0 != 124 { bad = 1 } END { exit bad }' "$res"
