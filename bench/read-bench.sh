#!/usr/bin/env bash
# Reading and analysing speed: records bench programs once, then times decoding,
# the counts kernel (1 core and all cores, wall and CPU) and `memlens report`.
#   bench/read-bench.sh [PROGRAM ARGS...]      default: matmul 400 and hashtab 1000000
# Uses the release build in ${CARGO_TARGET_DIR:-target}; builds it first.
set -euo pipefail
cd "$(dirname "$0")/.."
T=${CARGO_TARGET_DIR:-$PWD/target}
# two builds: `--example` would limit the first to examples (no memlens binary)
cargo build --release -j2 -p memlens -p memlens-rt
cargo build --release -j2 -p memlens-analysis --example read_bench
M=$T/release/memlens
W=$(mktemp -d /tmp/memlens-read-bench.XXXXXX)
trap 'rm -rf "$W"' EXIT
run() {
    local prog=$1
    shift
    "$M" cc -O2 -g -pthread "bench/programs/$prog.c" -o "$W/$prog" -lm
    /usr/bin/time -f "record: %e s wall, %U+%S s CPU" "$M" record -q -o "$W/$prog.trace" -- "$W/$prog" "$@" >/dev/null
    "$T/release/examples/read_bench" "$W/$prog.trace" 3
    for by in line function variable; do
        /usr/bin/time -f "report --by $by: %e s wall, %U+%S s CPU" "$M" report --by "$by" "$W/$prog.trace" >/dev/null
    done
}
if [ $# -gt 0 ]; then
    run "$@"
else
    run matmul 400
    run hashtab 1000000
fi
