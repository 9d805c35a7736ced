#!/bin/bash
# Interleaved A/B timing: runs every command once per round, REPS rounds, and prints
# each label's median wall time in ms with all its times sorted. On a noisy machine
# (this project's 2-core VM changes speed for minutes at a time) only configurations
# measured in the same rounds can be compared.
#
#   bench/ab.sh REPS "label:command" ["label:command" ...]
#   bench/ab.sh 9 "none:memlens record -q --order none -o m.trace -- ./inc add 8 16000000" \
#                 "sync:memlens record -q -o m.trace -- ./inc add 8 16000000"
#
# Commands run through `eval` with their output discarded.
set -u
if [ $# -lt 2 ]; then
    echo "usage: $0 REPS \"label:command\" ..." >&2
    exit 2
fi
reps=$1
shift
declare -A times
for _ in $(seq "$reps"); do
    for spec in "$@"; do
        label=${spec%%:*}
        cmd=${spec#*:}
        s=$(date +%s%N)
        eval "$cmd" >/dev/null 2>&1 || echo "$label: command failed: $cmd" >&2
        e=$(date +%s%N)
        times[$label]+="$(((e - s) / 1000000)) "
    done
done
for spec in "$@"; do
    label=${spec%%:*}
    sorted=$(echo "${times[$label]}" | tr ' ' '\n' | grep . | sort -n | tr '\n' ' ')
    n=$(echo "$sorted" | wc -w)
    median=$(echo "$sorted" | cut -d' ' -f$(((n + 1) / 2)))
    echo "$label median ${median}ms  [$sorted]"
done
