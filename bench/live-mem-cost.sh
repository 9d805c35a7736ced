#!/usr/bin/env bash
# Cost of the in-process memory probes (docs/live.md "Memory probes"):
#  - heap: ns per malloc(64)+free pair (tests/programs/liveheap.c `t N`) with no probe
#    and with a heap probe in;
#  - watch: ns per `counter++` (one load, one store; tests/programs/livewatch.c `t N`)
#    with no probe, another variable watched, and `counter` watched.
# The loops time themselves; the fastest of RUNS runs each (the programs are built by
# memlens cc -O1, launched by `memlens live` so the probe is in before main).
#   bench/live-mem-cost.sh [N] [RUNS]        (MEMLENS=path, MEMLENS_CC as for memlens cc)
set -euo pipefail
n=${1:-2000000}
runs=${2:-5}
root=$(cd "$(dirname "$0")/.." && pwd)
memlens=${MEMLENS:-${CARGO_TARGET_DIR:-$root/target}/debug/memlens}
[ -x "$memlens" ] || { echo "build memlens first (cargo build -p memlens -p memlens-rt) or set MEMLENS" >&2; exit 2; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export XDG_RUNTIME_DIR=$dir
for p in liveheap livewatch; do
    MEMLENS_QUIET=1 "$memlens" cc -O1 -g -pthread "$root/tests/programs/$p.c" -o "$dir/$p"
done
best() { # the fastest "done t NS" of $runs runs of "$@"
    local m=
    for _ in $(seq "$runs"); do
        local t; t=$(printf 't %s\nq\n' "$n" | "$@" 2>/dev/null | awk '/^done t/ {print $3}')
        if [ -z "$m" ] || [ "$t" -lt "$m" ]; then m=$t; fi
    done
    echo "$m"
}
live() { "$memlens" live --no-gui "$@"; }
echo "heap, ns per malloc(64)+free ($n pairs, fastest of $runs):"
echo "  no probe            $(best live -- "$dir/liveheap")"
echo "  heap probe          $(best live --probe heap -- "$dir/liveheap")"
echo "watch, ns per counter++ ($n, fastest of $runs):"
echo "  no probe            $(best live -- "$dir/livewatch")"
echo "  cfg.limit watched   $(best live --probe watch:cfg.limit -- "$dir/livewatch")"
echo "  counter watched     $(best live --probe watch:counter -- "$dir/livewatch")"
