#!/usr/bin/env bash
# bench/fuzz.sh SECONDS [TARGET] — libFuzzer campaigns over the readers of untrusted files.
#
# Builds tests/fuzz's targets (one per reader of tests/fuzz/fuzz_readers.c, the harness the CTest
# test_fuzz_readers replays) with clang -fsanitize=fuzzer,address,undefined in build-fuzz/ (or
# $FUZZ_BUILD), then runs each target (or TARGET alone: a reader's name, e.g. safetensors) for
# SECONDS, one at a time, from its seed and the corpus of earlier runs. Per target under
# build-fuzz/fuzz/TARGET/: corpus/ (kept between runs), crashes/ (libFuzzer's crash-, leak-, timeout-
# and oom- files: each an input to replay with build-fuzz/tests/fuzz/fuzz_TARGET FILE), log.txt. Prints
# a table: target, seconds, execs, corpus, crashes. Exit 1 when any target left a crash file.
# Not part of `make test` (bench/README.md). A crash found here becomes a named case of
# test_fuzz_readers once fixed (docs/testing.md).
set -euo pipefail
secs=${1:?usage: bench/fuzz.sh SECONDS [TARGET]}
only=${2:-}
root=$(cd "$(dirname "$0")/.." && pwd)
build=${FUZZ_BUILD:-$root/build-fuzz}
command -v clang >/dev/null || { echo "fuzz.sh: clang not found (apt-get install clang)" >&2; exit 2; }

readers=$(sed -n '/^set(FZ_READERS/,/)/p' "$root/tests/fuzz/CMakeLists.txt" | tr -d '()' | tr ' ' '\n' |
          grep -v -e '^set$' -e '^FZ_READERS$' -e '^$')
if [ -n "$only" ]; then
  echo "$readers" | grep -qx "$only" || { echo "fuzz.sh: no target $only (one of: $(echo $readers))" >&2; exit 2; }
  readers=$only
fi

gen=""; [ -f "$build/CMakeCache.txt" ] || ! command -v ninja >/dev/null || gen="-G Ninja"
# -O1 -g: libFuzzer's usual; the sanitizers on every library the readers link, not only the target
cmake -S "$root" -B "$build" $gen -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g -march=native" \
  "-DCMAKE_C_FLAGS=-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
  -DST_FUZZ=ON -DST_BENCH=OFF -DST_CUDA=OFF >/dev/null
targets=$(for r in $readers; do printf 'fuzz_%s ' "$r"; done)
cmake --build "$build" --target $targets -j"${JOBS:-2}" >/dev/null

printf '| target | seconds | execs | corpus | crashes |\n|---|---:|---:|---:|---:|\n'
status=0
for r in $readers; do
  d=$build/fuzz/$r
  mkdir -p "$d/corpus" "$d/crashes" "$d/work"
  rm -rf "$d/work"/*
  # the seed is written into the corpus by the target itself (ST_FUZZ_SEED_DIR); -timeout: a hang of
  # 30 s is a crash; leaks are reported (ASan's LeakSanitizer, on by default)
  set +e
  ST_FUZZ_WORK=$d/work ST_FUZZ_SEED_DIR=$d/corpus ST_SOURCE_DIR=$root OMP_NUM_THREADS=1 \
    ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
    "$build/tests/fuzz/fuzz_$r" -max_total_time="$secs" -timeout=30 -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="$d/crashes/" "$d/corpus" > "$d/log.txt" 2>&1
  set -e
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$d/log.txt" | tail -1)
  ncorpus=$(find "$d/corpus" -type f | wc -l)
  ncrash=$(find "$d/crashes" -type f | wc -l)
  [ "$ncrash" -eq 0 ] || status=1
  printf '| %s | %s | %s | %s | %s |\n' "$r" "$secs" "${execs:-?}" "$ncorpus" "$ncrash"
  rm -rf "$d/work"
done
[ $status -eq 0 ] || echo "fuzz.sh: crash files under $build/fuzz/*/crashes (replay: $build/tests/fuzz/fuzz_TARGET FILE)" >&2
exit $status
