#!/usr/bin/env bash
# SQL on a Ballista cluster against the embedded engine (issue 20's figure: within
# 1.5x on this machine). Records a bench program four times (four traces), starts a
# scheduler and two executors on 127.0.0.1, then times each query embedded and on
# the cluster, interleaved, REPS times, and prints the medians and their ratio.
#   bench/cluster-bench.sh [PROGRAM ARGS...]   default: hashtab 2000000 (4 x ~26 M accesses)
# Env: REPS (default 5), TASKS (tasks per executor, default 1: two executors on two cores).
# Uses the release build in ${CARGO_TARGET_DIR:-target} (built first), or $MEMLENS.
set -euo pipefail
cd "$(dirname "$0")/.."
T=${CARGO_TARGET_DIR:-$PWD/target}
if [ -z "${MEMLENS:-}" ]; then
    cargo build --release -j2 -p memlens -p memlens-rt
fi
M=${MEMLENS:-$T/release/memlens}
W=$(mktemp -d /tmp/memlens-cluster-bench.XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$W"
}
trap cleanup EXIT
prog=${1:-hashtab}
[ $# -gt 0 ] && shift
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(2000000)
REPS=${REPS:-5}
TASKS=${TASKS:-1}
"$M" cc -O2 -g -pthread "bench/programs/$prog.c" -o "$W/$prog" -lm
mkdir -p "$W/set"
for i in 0 1 2 3; do
    "$M" record -q -o "$W/set/t$i.trace" -- "$W/$prog" "${args[@]}" >/dev/null
done
"$M" sql --format csv -e "SELECT count(*) FROM accesses" "$W/set" | tail -1 | sed 's/^/accesses: /'
du -sb "$W/set" | sed 's/^/trace bytes: /'

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 300); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.1; done; echo "port $1 never opened" >&2; exit 1; }
S=$(free_port)
"$M" cluster scheduler --bind "127.0.0.1:$S" 2>"$W/scheduler.log" & pids+=($!)
wait_port "$S"
for e in 0 1; do
    F=$(free_port); G=$(free_port)
    mkdir -p "$W/work$e"
    "$M" cluster executor --scheduler "127.0.0.1:$S" --bind "127.0.0.1:$F" --grpc-port "$G" \
        --tasks "$TASKS" --work-dir "$W/work$e" 2>"$W/executor$e.log" & pids+=($!)
    wait_port "$F"; wait_port "$G"
done
sleep 1

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
run() { # MODE QUERY -> wall seconds
    local mode=$1 q=$2 t0 t1
    local extra=()
    [ "$mode" = cluster ] && extra=(--cluster "df://127.0.0.1:$S")
    t0=$(date +%s.%N)
    "$M" sql --format csv "${extra[@]}" -e "$q" "$W/set" > "$W/out.$mode"
    t1=$(date +%s.%N)
    python3 -c "print(f'{$t1 - $t0:.3f}')"
}
echo "| query | embedded runs (s) | median | cluster runs (s) | median | cluster ÷ embedded |"
echo "|---|---|---|---|---|---|"
for q in "SELECT trace, line(pc, trace) l, count(*) n FROM accesses GROUP BY 1, 2" \
         "SELECT count(*) FROM accesses" \
         "SELECT trace, thread, kind, count(*), sum(size) FROM accesses GROUP BY 1, 2, 3"; do
    e=(); c=()
    for _ in $(seq "$REPS"); do
        e+=("$(run embedded "$q")")
        c+=("$(run cluster "$q")")
        if ! cmp -s <(sort "$W/out.embedded") <(sort "$W/out.cluster"); then
            echo "results differ: $q" >&2; exit 1
        fi
    done
    me=$(printf '%s\n' "${e[@]}" | median); mc=$(printf '%s\n' "${c[@]}" | median)
    printf '| `%s` | %s | %.2f | %s | %.2f | **%.2f** |\n' "$q" \
        "$(printf '%.2f ' "${e[@]}")" "$me" "$(printf '%.2f ' "${c[@]}")" "$mc" "$(python3 -c "print($mc / $me)")"
done
