#!/usr/bin/env bash
# Installs the Debian packages scaletrain needs to build, run and test, if any are missing.
# Usage: scripts/install-deps.sh [--test] [--bench]
#        --test adds what the test suite needs beyond the build: Chromium (test_report opens the
#        HTML report in headless Chromium; `make test` passes --test, `make demo` does not).
#        --bench adds what bench/ needs: PyTorch, NumPy, BLIS, OpenBLAS.
# As root it runs apt-get; otherwise it prints the command to run and exits 1.
set -euo pipefail

pkgs=(build-essential cmake pkg-config libdnnl-dev libcjson-dev libxxhash-dev
      libopenmpi-dev openmpi-bin liblbfgs-dev libgsl-dev liblapack-dev
      zlib1g-dev libzstd-dev)
for arg in "$@"; do
  case "$arg" in
    --test) pkgs+=(chromium) ;;
    --bench) pkgs+=(python3-torch python3-numpy libblis-openmp-dev libopenblas-openmp-dev) ;;
    *) echo "install-deps: unknown option '$arg' (expected --test or --bench)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

echo "install-deps: missing Debian packages: ${missing[*]}"
if [[ $(id -u) -ne 0 ]]; then
  echo "install-deps: not root; run: sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
