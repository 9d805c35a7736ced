#!/usr/bin/env bash
# Per-hit cost of memlens live probes: a program calls an empty function CALLS times
# (default 1M) and times the loop itself; the probed runs minus the unprobed one,
# divided by CALLS, is the cost of one hit. Kernel probes (uprobes) on a plain gcc
# build; pad probes (in-process) on the same program built with memlens cc.
#   bench/live-probe-cost.sh [CALLS]        (needs root or CAP_PERFMON; MEMLENS=path)
set -euo pipefail
calls=${1:-1000000}
root=$(cd "$(dirname "$0")/.." && pwd)
memlens=${MEMLENS:-${CARGO_TARGET_DIR:-$root/target}/debug/memlens}
[ -x "$memlens" ] || { echo "build memlens first (cargo build -p memlens) or set MEMLENS" >&2; exit 2; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat > "$dir/empty.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
__attribute__((noipa)) void empty(void) { __asm__ volatile(""); }
int main(int argc, char **argv) {
    long n = atol(argv[1]);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < n; i++)
        empty();
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("%ld\n", (b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec));
    return 0;
}
C
gcc -O1 -g "$dir/empty.c" -o "$dir/empty"
best() { # the fastest of 3 runs of "$@", in ns
    local m=
    for _ in 1 2 3; do
        local t; t=$("$@" | tail -1)
        if [ -z "$m" ] || [ "$t" -lt "$m" ]; then m=$t; fi
    done
    echo "$m"
}
base=$(best "$dir/empty" "$calls")
count=$(best "$memlens" live --no-gui --probe count:empty -- "$dir/empty" "$calls")
timer=$(best "$memlens" live --no-gui --probe timer:empty --json-stream "$dir/s.jsonl" -- "$dir/empty" "$calls")
lost=$(tail -1 "$dir/s.jsonl" | grep -o '"lost":[0-9]*' || true)
echo "calls: $calls ($(nproc) CPUs, kernel $(uname -r))"
echo "no probe:     $((base / calls)) ns/call"
echo "count probe:  $(((count - base) / calls)) ns/hit  (uprobe)"
echo "timer probe:  $(((timer - base) / calls)) ns/hit  (uprobe + uretprobe, sampled; ${lost:-lost:?})"
# pads: the memlens-built program (noinline: clang ignores noipa)
MEMLENS_QUIET=1 "$memlens" cc -O1 -g -Dnoipa=noinline "$dir/empty.c" -o "$dir/empty-ml"
pbase=$(best "$dir/empty-ml" "$calls")
pcount=$(best "$memlens" live --no-gui --probe count:empty -- "$dir/empty-ml" "$calls")
ptimer=$(best "$memlens" live --no-gui --probe timer:empty -- "$dir/empty-ml" "$calls")
echo "memlens-built, no probe: $((pbase / calls)) ns/call"
echo "count probe:  $(((pcount - pbase) / calls)) ns/hit  (pad)"
echo "timer probe:  $(((ptimer - pbase) / calls)) ns/hit  (pad, entry and return)"
