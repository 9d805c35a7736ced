#!/usr/bin/env bash
# Cost of the live `trace` probe (docs/live.md "trace"), in ns per call of bump()
# (`counter++`: a function entry and exit, one load, one store; tests/programs/
# livewatch.c `t N`, which times its own loop), fastest of RUNS runs each:
#  - run plainly (no memlens live: the runtime inactive, as before this probe existed);
#  - under `memlens live` with no probe (a trace could start any time);
#  - trace:get_limit (a function the loop never calls: every event is outside the extent);
#  - trace:bump (every event inside the extent: a full recording);
#  - trace:now (everything recorded).
# With BASE_RT=dir (a directory holding another build's libmemlens_rt.a, e.g. main's:
# `CARGO_TARGET_DIR=/tmp/base cargo build -p memlens-rt` in its checkout) the first
# two rows are also measured with that runtime, to see that nothing changed.
#   bench/live-trace-cost.sh [N] [RUNS]        (MEMLENS=path, MEMLENS_CC as for memlens cc)
set -euo pipefail
n=${1:-2000000}
runs=${2:-5}
root=$(cd "$(dirname "$0")/.." && pwd)
memlens=${MEMLENS:-${CARGO_TARGET_DIR:-$root/target}/debug/memlens}
[ -x "$memlens" ] || { echo "build memlens first (cargo build -p memlens -p memlens-rt) or set MEMLENS" >&2; exit 2; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export XDG_RUNTIME_DIR=$dir
cd "$dir"
MEMLENS_QUIET=1 "$memlens" cc -O1 -g -pthread "$root/tests/programs/livewatch.c" -o "$dir/prog"
if [ -n "${BASE_RT:-}" ]; then
    MEMLENS_RUNTIME_DIR=$BASE_RT MEMLENS_QUIET=1 "$memlens" cc -O1 -g -pthread "$root/tests/programs/livewatch.c" -o "$dir/base"
fi
best() { # the fastest "done t NS" of $runs runs of "$@"
    local m=
    for _ in $(seq "$runs"); do
        rm -f "$dir"/*.trace
        local t; t=$(printf 't %s\nq\n' "$n" | "$@" 2>/dev/null | awk '/^done t/ {print $3}')
        if [ -z "$m" ] || [ "$t" -lt "$m" ]; then m=$t; fi
    done
    echo "$m"
}
echo "ns per bump() call ($n calls, fastest of $runs):"
if [ -n "${BASE_RT:-}" ]; then
    echo "  BASE_RT, not under live       $(best "$dir/base")"
    echo "  BASE_RT, under live, no probe $(best "$memlens" live --no-gui -- "$dir/base")"
fi
echo "  not under live                $(best "$dir/prog")"
echo "  under live, no probe          $(best "$memlens" live --no-gui -- "$dir/prog")"
echo "  trace:get_limit (outside)     $(best "$memlens" live --no-gui --probe trace:get_limit:t.trace -- "$dir/prog")"
echo "  trace:bump (inside)           $(best "$memlens" live --no-gui --probe trace:bump:t.trace -- "$dir/prog")"
echo "  trace:now                     $(best "$memlens" live --no-gui --probe trace:now:t.trace -- "$dir/prog")"
