#!/usr/bin/env bash
# setup.sh — installs the peer tokenizer of the benchmark, npm tiktoken 1.0.22 (WASM build of
# tiktoken's Rust core), into a scratch directory outside the repository (default
# /tmp/scaletrain_tiktoken; node_modules is never committed). Usage: setup.sh [DIR]
set -euo pipefail
DIR=${1:-${TIKTOKEN_DIR:-/tmp/scaletrain_tiktoken}}
mkdir -p "$DIR"
if [ ! -f "$DIR/node_modules/tiktoken/package.json" ]; then
  npm install --silent --no-audit --no-fund --prefix "$DIR" tiktoken@1.0.22 >/dev/null
fi
node -e "console.log('tiktoken', require('$DIR/node_modules/tiktoken/package.json').version, 'in $DIR')"
