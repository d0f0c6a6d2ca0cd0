# common.sh — sourced by the step benchmarks: configs A, B, C of the core issue and a JSON field reader.
# shellcheck shell=bash

# name L NH C V B T steps
configs=(
  "A 12 12 768 50257 4 64 12"
  "B 6 6 384 50257 8 256 8"
  "C 6 6 384 256 8 256 12"
)
# field JSON NAME: the number after "NAME": in a RESULT line.
field() { sed -n 's/.*"'"$2"'": \([0-9.]*\).*/\1/p' <<<"$1"; }
# PyTorch's CPU matmuls go through the system BLAS (Debian's python3-torch: BLAS_INFO=generic): with the
# reference libblas3 alone they run ~30x slower (measured 2026-11-24), which would make every peer ratio
# meaningless. Refuse unless an optimized BLAS provides libblas.so.3.
require_fast_blas() {
  local cur
  cur=$(update-alternatives --query libblas.so.3-x86_64-linux-gnu 2>/dev/null | sed -n 's/^Value: //p')
  case "$cur" in
    *openblas*|*blis*|*mkl*) ;;
    *) echo "bench: libblas.so.3 is '${cur:-the reference BLAS}', PyTorch would run ~30x slow; run scripts/install-deps.sh --bench" >&2
       exit 1 ;;
  esac
}

# peer_env: `env` arguments for the PyTorch peers, so that the peer runs at its best on this
# machine rather than paying for things that are not PyTorch's arithmetic:
# - OpenBLAS (PyTorch 1.13's fp32 GEMMs) picks its kernels for this CPU: OPENBLAS_CORETYPE and
#   OPENBLAS_L2_SIZE inherited from the environment are removed (a sandbox of 2026-11-27 exported
#   OPENBLAS_CORETYPE=Haswell: AVX2 kernels on an AVX-512 CPU, 144 instead of 223 GFLOP/s on one Zen 5
#   core). Should OpenBLAS's own detection still pick a core without AVX-512 on an AVX-512 CPU,
#   it is told Cooperlake (with avx512_bf16) or SkylakeX. PEER_OPENBLAS_CORETYPE=X forces X.
# - glibc's allocator keeps freed memory (MALLOC_MMAP_MAX_=0, a trim threshold of 64 GiB), as a
#   tuned PyTorch deployment does with jemalloc or tcmalloc. By default each step's large tensors
#   (B's 67 MB logits) are mmap'ed, returned to the kernel and faulted in again next step; on a VM
#   with shadow page tables (the same Zen 5 VM) that was 24% of PyTorch's step in the kernel's fault
#   path and 9% clearing pages. Ours allocates once, so it is not run with these settings.
# PEER_PLAIN=1 runs the peers in the caller's environment unchanged, to see the difference.
peer_env=()
if [[ -z ${PEER_PLAIN:-} ]]; then
  peer_env=(-u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=68719476736)
  if [[ -n ${PEER_OPENBLAS_CORETYPE:-} ]]; then
    peer_env+=("OPENBLAS_CORETYPE=$PEER_OPENBLAS_CORETYPE")
  elif grep -qw avx512f /proc/cpuinfo && grep -qw avx512vl /proc/cpuinfo; then
    core=$(env -u OPENBLAS_CORETYPE OPENBLAS_VERBOSE=2 /usr/bin/python3 -c "import numpy" 2>&1 | sed -n 's/^Core: //p' | head -1)
    case "$core" in
      SkylakeX|Cooperlake|SapphireRapids|"") ;;
      *) if grep -qw avx512_bf16 /proc/cpuinfo; then peer_env+=(OPENBLAS_CORETYPE=Cooperlake); else peer_env+=(OPENBLAS_CORETYPE=SkylakeX); fi
         echo "bench: OpenBLAS detects this AVX-512 CPU as '$core'; the PyTorch peer runs with ${peer_env[-1]}" >&2 ;;
    esac
  fi
  if [[ -n ${OPENBLAS_CORETYPE:-} ]]; then
    echo "bench: OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE in the environment is not passed to the PyTorch peer (PEER_OPENBLAS_CORETYPE to force one)" >&2
  fi
fi
