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
