#!/usr/bin/env bash
# SQL and Parquet speed (issue 20's figures): records a bench program once, then
# times, side by side in one run, the recording, `memlens sql` with the line
# query, a variable query, and `export --format parquet` (wall, CPU, peak RSS,
# bytes per access).
#   bench/sql-bench.sh [PROGRAM ARGS...]     default: hashtab 8000000 (~10^8 accesses)
# Uses the release build in ${CARGO_TARGET_DIR:-target}; builds it first.
set -euo pipefail
cd "$(dirname "$0")/.."
T=${CARGO_TARGET_DIR:-$PWD/target}
cargo build --release -j2 -p memlens -p memlens-rt
M=$T/release/memlens
W=$(mktemp -d /tmp/memlens-sql-bench.XXXXXX)
trap 'rm -rf "$W"' EXIT
prog=${1:-hashtab}
[ $# -gt 0 ] && shift
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(8000000)
"$M" cc -O2 -g -pthread "bench/programs/$prog.c" -o "$W/$prog" -lm
fmt="%e s wall, %U+%S s CPU, %M KB peak"
/usr/bin/time -f "record: $fmt" "$M" record -q -o "$W/t.trace" -- "$W/$prog" "${args[@]}" >/dev/null
"$M" info "$W/t.trace" | grep -E 'loads|stores|size|bytes' | head -4
q() {
    /usr/bin/time -f "sql $1: $fmt" "$M" sql --format csv -e "$2" "$W/t.trace" | tail -n +2 | wc -l | sed 's/^/  result rows: /'
}
q "line" "SELECT line(pc), count(*) FROM accesses GROUP BY 1"
q "count" "SELECT count(*) FROM accesses"
q "variable" "SELECT variable(address) v, count(*) FROM accesses GROUP BY v ORDER BY 2 DESC"
/usr/bin/time -f "export parquet: $fmt" "$M" export --format parquet "$W/pq" "$W/t.trace"
du -sb "$W/pq/accesses" | sed 's/^/  accesses bytes: /'
