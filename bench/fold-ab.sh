#!/usr/bin/env bash
# Loop folding (trace format 3), A/B on the C and C++ suite programs with one
# binary: recording with MEMLENS_FOLD=0 and =1 interleaved (bench/ab.sh, wall ms,
# median), the traces' sizes, and reading them back (decode_bench: read +
# decompress, events, columns; M events per CPU-second) and `report --by
# variable` (user CPU s).
#   bench/fold-ab.sh [REPS]          default 5
# Uses the release build in ${CARGO_TARGET_DIR:-target}; builds it first.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${1:-5}
T=${CARGO_TARGET_DIR:-$PWD/target}
cargo build --release -j2 -p memlens --no-default-features -p memlens-rt
cargo build --release -j2 -p memlens-format --example decode_bench
M=$T/release/memlens
W=$(mktemp -d /tmp/memlens-fold-ab.XXXXXX)
trap 'rm -rf "$W"' EXIT
progs=("matmul 700" "stencil 1024 400" "llist 200000 100" "hashtab 1000000" "sort 2000000"
    "alloc 2000000" "mt 1000000 40" "tree 300000")
for p in "${progs[@]}"; do
    set -- $p
    name=$1
    shift
    src=bench/programs/$name.c
    cc=cc
    [ -f "$src" ] || { src=bench/programs/$name.cpp; cc=c++; }
    "$M" "$cc" -O2 -g -pthread "$src" -o "$W/$name" -lm
    echo "== $name $*"
    bench/ab.sh "$REPS" "native:$W/$name $*" \
        "fold0:MEMLENS_FOLD=0 $M record -q -o $W/$name.0.trace -- $W/$name $*" \
        "fold1:MEMLENS_FOLD=1 $M record -q -o $W/$name.1.trace -- $W/$name $*"
    for f in 0 1; do
        echo "fold$f trace: $(stat -c %s "$W/$name.$f.trace") bytes"
        "$T/release/examples/decode_bench" "$W/$name.$f.trace" 3 | sed "s/^/fold$f /"
        /usr/bin/time -f "fold$f report --by variable: %U s user, %e s wall" \
            "$M" report --by variable "$W/$name.$f.trace" >"$W/$name.$f.vars"
    done
    cmp -s "$W/$name.0.vars" "$W/$name.1.vars" && echo "report --by variable: identical" ||
        echo "report --by variable: DIFFERENT"
done
