#!/usr/bin/env bash
# Collector memory with 1,000 live probes (issue 19): a plain gcc program with
# 1,000 noinline functions called in a loop, `memlens live --pid` attached, then
# 1,000 separate `memlens probe add count:fN` (uprobes: root or CAP_PERFMON).
# Prints the collector's RSS, the add time and the probes' hit range.
#   bench/live-1000-probes.sh [MEMLENS]      default: target/debug/memlens
set -euo pipefail
M=$(realpath "${1:-target/debug/memlens}")
W=$(mktemp -d /tmp/memlens-1000.XXXXXX)
cd "$W"
python3 - <<'PY'
n = 1000
with open("many.c", "w") as f:
    f.write("#include <stdio.h>\n#include <unistd.h>\nvolatile long sink;\n")
    for i in range(n):
        f.write(f"__attribute__((noinline)) void f{i}(long x) {{ sink += x + {i}; }}\n")
    f.write('int main(void) { printf("ready %d\\n", getpid()); fflush(stdout);\n for (;;) {\n')
    for i in range(n):
        f.write(f"  f{i}({i});\n")
    f.write("  usleep(1000); }\n}\n")
PY
gcc -O1 -g many.c -o many
./many >/dev/null & PID=$!
"$M" live --pid $PID --no-gui 2>live.err & LIVE=$!
trap 'kill -INT $LIVE 2>/dev/null; sleep 1; kill $PID 2>/dev/null; rm -rf "$W"' EXIT
sleep 2
t0=$(date +%s.%N)
for i in $(seq 0 999); do "$M" probe --pid $PID add count:f$i >/dev/null; done
t1=$(date +%s.%N)
sleep 3
"$M" probe --pid $PID list --format json >list.json
python3 -c "import json; p=json.load(open('list.json')); c=[x['count'] for x in p]; print(len(p), 'probes, hits', min(c), 'to', max(c))"
echo "add 1000: $(echo "$t1 - $t0" | bc) s"
grep -E 'VmRSS|VmHWM' /proc/$LIVE/status
echo "descriptors: $(ls /proc/$LIVE/fd | wc -l)"
