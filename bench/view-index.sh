#!/bin/bash
# The viewer index's build time (issue 22): records a set of traces once with NEW's
# runtime, then builds each trace's index with every memlens given, one after the
# other, ROUNDS times (interleaved: this 2-core VM changes speed for minutes at a
# time), and prints per trace and binary the median wall and CPU seconds, the peak
# RSS, operations per wall second, and whether every index file is the first
# binary's byte for byte (meta.json but its trace path).
#
#   bash bench/view-index.sh ROUNDS NEW [BASE ...]        # e.g. 3 target/release/memlens /tmp/old/memlens
#   TRACES="mm370 ht" bash bench/view-index.sh 3 NEW      # a subset (names below)
#
# Traces (bench/programs and crates/view/bench built by `NEW cc -O2 -g`):
#   hs     examples/hotspots.c, 5 threads, 167 k events
#   ht     hashtab 2000000: 26 M random operations over a million lines
#   mt     mt 200000 40: 4 threads, 1.3 x 10^8 operations
#   mm370  matmul 370: 10^8 operations, loops recorded as runs
#   mm800  matmul 800: 10^9 operations, loops recorded as runs
#   big    crates/view/bench/big.c 1175: 10^9 operations, half sweeps, half random
# WORK (default /tmp/memlens-view-index) keeps the programs and traces between runs.
set -eu
if [ $# -lt 2 ]; then
    sed -n '2,20p' "$0" >&2
    exit 2
fi
rounds=$1
shift
bins=("$@")
new=${bins[0]}
root=$(cd "$(dirname "$0")/.." && pwd)
work=${WORK:-/tmp/memlens-view-index}
traces=${TRACES:-hs ht mt mm370 mm800 big}
mkdir -p "$work"
cd "$work"

build() { # name source [flags]
    [ -x "$1" ] || "$new" cc -O2 -g -pthread -I "$root/bench/programs" "$2" -o "$1" -lm
}
record() { # trace program args
    [ -f "$1.trace" ] || "$new" record -q -o "$1.trace" -- "./$2" "${@:3}" >/dev/null
}
for t in $traces; do
    case $t in
        hs) build hotspots "$root/examples/hotspots.c"; record hs hotspots ;;
        ht) build hashtab "$root/bench/programs/hashtab.c"; record ht hashtab 2000000 ;;
        mt) build mt "$root/bench/programs/mt.c"; record mt mt 200000 40 ;;
        mm370) build matmul "$root/bench/programs/matmul.c"; record mm370 matmul 370 ;;
        mm800) build matmul "$root/bench/programs/matmul.c"; record mm800 matmul 800 ;;
        big) build big "$root/crates/view/bench/big.c"; record big big 1175 ;;
        *) echo "unknown trace $t" >&2; exit 2 ;;
    esac
done

declare -A wall cpu rss
for _ in $(seq "$rounds"); do
    for t in $traces; do
        for i in "${!bins[@]}"; do
            out=$(/usr/bin/time -f "%e %U %S %M" "${bins[$i]}" view --no-serve --reindex "$t.trace" 2>&1 >/dev/null | tail -1)
            read -r w u s m <<<"$out"
            wall[$t.$i]+="$w "
            cpu[$t.$i]+="$(echo "$u + $s" | bc) "
            rss[$t.$i]+="$m "
            rm -rf "$t.$i.mlview"
            mv "$t.trace.mlview" "$t.$i.mlview"
        done
    done
done

median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
same() { # the index dirs of binaries 0 and $2 of trace $1
    local a=$1.0.mlview b=$1.$2.mlview f
    for f in $(ls "$a"); do
        if [ "$f" = meta.json ]; then
            python3 -c "import json,sys
a,b=(json.load(open(p)) for p in sys.argv[1:]); a.pop('trace'); b.pop('trace'); sys.exit(a!=b)" "$a/$f" "$b/$f" || return 1
        else
            cmp -s "$a/$f" "$b/$f" || return 1
        fi
    done
}
printf '%-6s %-4s %9s %9s %9s %12s  %s\n' trace bin "wall s" "cpu s" "rss MB" "M ops/s" files
for t in $traces; do
    ops=$(python3 -c "import json;print(json.load(open('$t.0.mlview/meta.json'))['ops'])")
    for i in "${!bins[@]}"; do
        w=$(echo "${wall[$t.$i]}" | median)
        c=$(echo "${cpu[$t.$i]}" | median)
        m=$(echo "${rss[$t.$i]}" | median)
        files=first
        [ "$i" = 0 ] || { same "$t" "$i" && files=identical || files=DIFFERENT; }
        printf '%-6s %-4s %9s %9s %9s %12.1f  %s   [%s]\n' "$t" "$i" "$w" "$c" "$((m / 1024))" \
            "$(echo "$ops / $w / 1000000" | bc -l)" "$files" "${wall[$t.$i]}"
    done
done
