#!/usr/bin/env bash
# Recording cost per access with 1, 2, 16 and 64 busy threads on this machine
# (issue 24: "the writer must not become a lock"). The same total work is split over
# the threads; for each count, ROUNDS interleaved runs of the native program and of
# `memlens record`, and the median CPU time (user + sys, all threads) per recorded
# access, minus the native program's CPU per access.
# usage: bash bench/threads-scale.sh [TOTAL_ACCESSES] [ROUNDS] [MEMLENS]
set -euo pipefail
cd "$(dirname "$0")/.."
TOTAL=${1:-100000000}
ROUNDS=${2:-3}
M=${3:-target/release/memlens}
[ -x "$M" ] || { echo "threads-scale: $M not found (cargo build --release -p memlens -p memlens-rt)" >&2; exit 2; }
OUT=bench/out/scale
mkdir -p "$OUT"
CC=$(command -v clang-22 || command -v clang || echo gcc)
"$CC" -O2 -pthread -Ibench/programs bench/programs/scale.c -o "$OUT/scale-native"
"$M" cc -O2 -g -pthread -Ibench/programs bench/programs/scale.c -o "$OUT/scale-memlens"
cpu() { # CPU seconds (user + sys) of a command, its output discarded
  /usr/bin/time -f "%U %S" -o "$OUT/time" "$@" > /dev/null 2> "$OUT/err" || { cat "$OUT/err" >&2; exit 1; }
  awk '{print $1 + $2}' "$OUT/time"
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
echo "| threads | native CPU s | record CPU s | accesses | dropped | record CPU-ns / access | over native, ns / access |"
echo "|---:|---:|---:|---:|---:|---:|---:|"
for T in 1 2 16 64; do
  : > "$OUT/n"; : > "$OUT/r"
  for _ in $(seq "$ROUNDS"); do
    cpu "$OUT/scale-native" "$T" "$TOTAL" >> "$OUT/n"
    cpu "$M" record -q -o "$OUT/t.trace" -- "$OUT/scale-memlens" "$T" "$TOTAL" >> "$OUT/r"
  done
  n=$(median < "$OUT/n"); r=$(median < "$OUT/r")
  read -r acc dropped < <("$M" info --format json "$OUT/t.trace" | python3 -c \
    'import json,sys; d=json.load(sys.stdin); print(d["loads"] + d["stores"], d["dropped"])')
  awk -v t="$T" -v n="$n" -v r="$r" -v a="$acc" -v d="$dropped" 'BEGIN {
    printf "| %d | %.2f | %.2f | %d | %s | %.2f | %.2f |\n", t, n, r, a, d, r * 1e9 / a, (r - n) * 1e9 / a }'
done
rm -f "$OUT/t.trace"
