#!/usr/bin/env bash
# The recorder's per-access encoding inlined, called, and as a bare store, on the
# vectorised stencil (bench/encode-proto/stencil_encode.c; issue 24). Prints each
# variant's wall seconds per round and the median, and the native stencil's.
# usage: bash bench/encode-proto.sh [ROUNDS] [N] [ITERS]   (defaults 3 1024 200)
set -euo pipefail
cd "$(dirname "$0")"
rounds=${1:-3} n=${2:-1024} iters=${3:-200}
cc=${CC:-clang-22}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for m in 0 1 2; do
  "$cc" -O2 -DMODE=$m encode-proto/stencil_encode.c -o "$out/m$m"
done
"$cc" -O2 programs/stencil.c -o "$out/native" -lm
declare -A t
for ((r = 0; r < rounds; r++)); do
  for v in m0 m1 m2 native; do
    s=$( { /usr/bin/time -f "%e" "$out/$v" "$n" "$iters" >/dev/null; } 2>&1 | tail -1)
    t[$v]="${t[$v]:-} $s"
  done
done
for v in m0 m1 m2 native; do
  case $v in m0) name="inline encoding";; m1) name="called encoding";; m2) name="bare store";; native) name="native (no events)";; esac
  med=$(tr ' ' '\n' <<<"${t[$v]}" | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  printf '%-20s median %6s s   (%s )\n' "$name" "$med" "${t[$v]}"
done
