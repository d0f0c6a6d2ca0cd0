#!/usr/bin/env bash
# llama_kernels.sh — the GQA attention against the GPT-2 attention it generalizes, and the Llama
# elementwise kernels (issue 15). Three parts:
#   1. bit identity: attention_forward/_backward's outputs on a fixed list of shapes (fp32, bf16,
#      dropout, 1 and 2 threads) from this tree and from BASE's kernels.c must be the same bytes;
#   2. speed, (a) before/after: BASE's attention (its kernels.c compiled into the same binary, symbols
#      renamed), this tree's attention_forward/_backward (now a wrapper) and attention_gqa at KV = NH,
#      called in turn within each of REPS repetitions, so the machine's load hits all three alike:
#      median ms and the median of the per-repetition ratios to the base; (b) GQA at the same FLOPs
#      (6 query heads on 6, 2, 1 KV heads), also in turn within each repetition, ratios to KV = 6.
#      Shapes: config B's attention (B 8, T 256, 6 heads of 64) and T 1024 (B 2), fp32 and bf16;
#   3. the elementwise kernels on config B's rows (N 2048, C 384, F 1024).
# Usage: bench/llama_kernels.sh [THREADS=2] [REPS=51] [BASE=the commit before attention_gqa]
# (part 1 held against the default BASE when issue 15 landed; the kernels have changed their arithmetic
# since, so today it prints DIFFERENT there: give a recent commit as BASE to check a change bit for bit.
# The base's attention is compiled from its kernels.c, or its kernels_attention.c where it has one)
# (medians are robust to the other users of this 2-core machine only up to a point: run it quiet)
# Needs the build directory `build` (cmake -S . -B build -DCMAKE_BUILD_TYPE=Release).
set -euo pipefail
cd "$(dirname "$0")/.."
NT=${1:-2}
REPS=${2:-51}
# (sed, not head: head would close the pipe on git log, whose SIGPIPE fails the pipeline under pipefail)
BASE=${3:-$(git log --format=%H --reverse -S attention_gqa_forward -- src/model/kernels.c | sed -n 1p)^}
BUILD=build
WORK=$(mktemp -d /tmp/llama_kernels.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

cmake --build "$BUILD" -j1 --target llama_kernels st_model >/dev/null
FLAGS="-O3 -march=native -fno-math-errno -fopenmp -std=c11 -D_GNU_SOURCE -Isrc"
LIBS="$BUILD/libst_model.a $BUILD/libst_core.a -ldnnl -lcjson -lxxhash -lgomp -lpthread -lm"
# The base's kernels.c is compiled against the base's own headers (its src/ tree, unpacked in WORK):
# this tree's kernels.h declares kernels whose signatures have changed since (encoder_forward,
# cast_bf16_colsum, ...), which the base's definitions would conflict with. Only the attention
# entry points cross between the two sides, and their signatures are unchanged.
mkdir -p "$WORK/base"
git archive "$BASE" src | tar -x -C "$WORK/base"
# the attention lives in kernels.c up to 89527bd, in kernels_attention.c since
asrc=src/model/kernels.c
[[ -f $WORK/base/src/model/kernels_attention.c ]] && asrc=src/model/kernels_attention.c
cp "$WORK/base/$asrc" "$WORK/kernels_base.c"
BFLAGS="${FLAGS/-Isrc/-I$WORK/base/src}"
# The base's kernels.o is linked before the library, so its attention is the one used; the bench
# is compiled with LK_MHA_ONLY (only the GPT-2 entry points) for both sides of the identity check.
cc $BFLAGS -c "$WORK/kernels_base.c" -o "$WORK/kernels_base.o"
cc $FLAGS -DLK_MHA_ONLY bench/llama_kernels.c "$WORK/kernels_base.o" $LIBS -o "$WORK/lk_base"
cc $FLAGS -DLK_MHA_ONLY bench/llama_kernels.c $LIBS -o "$WORK/lk_mha"
# The same base in the timing binary: its attention renamed base_attention_*, every other symbol
# made local so that it does not clash with this tree's kernels.
cc $BFLAGS -Dattention_forward=base_attention_forward -Dattention_backward=base_attention_backward \
    -c "$WORK/kernels_base.c" -o "$WORK/kb.o"
objcopy --keep-global-symbol=base_attention_forward --keep-global-symbol=base_attention_backward \
    "$WORK/kb.o" "$WORK/kb_local.o"
cc $FLAGS -DLK_BASE bench/llama_kernels.c "$WORK/kb_local.o" $LIBS -o "$WORK/lk_cmp"
NEW="$BUILD/bench/llama_kernels"

echo "## 1. attention_forward/_backward bit identity, base $(git rev-parse --short "$BASE") vs $(git rev-parse --short HEAD) (work tree)"
"$WORK/lk_base" dump "$WORK/base.bin"
"$WORK/lk_mha" dump "$WORK/new.bin"
if cmp -s "$WORK/base.bin" "$WORK/new.bin"; then
    echo "identical: $(stat -c %s "$WORK/base.bin") bytes of out, lse and dqkv"
else
    echo "DIFFERENT: $(cmp "$WORK/base.bin" "$WORK/new.bin" | head -1)"
fi

echo
echo "## 2a. attention before/after, $NT threads, $REPS repetitions each; $(uptime | sed 's/.*load/load/')"
SHAPES=("8 256" "2 1024")
for shape in "${SHAPES[@]}"; do
    for prec in fp32 bf16; do
        "$WORK/lk_cmp" cmp $shape 6 64 "$prec" "$REPS" "$NT"
    done
done

echo
echo "## 2b. GQA at the same FLOPs (6 query heads on 6, 2, 1 KV heads), $NT threads, $REPS repetitions each"
for shape in "${SHAPES[@]}"; do
    for prec in fp32 bf16; do
        read -r b t <<<"$shape"
        "$NEW" att "$b" "$t" 6 6,2,1 64 "$prec" "$REPS" "$NT"
    done
done
echo
echo "## 3. elementwise kernels"
"$NEW" elem 2048 384 1024 51 "$NT"
