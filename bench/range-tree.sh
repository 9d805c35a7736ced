#!/bin/bash
# The viewer's call tree of a range (/api/calltree?x0=&x1=): 1,000 operations at
# 1/10, 5/10 and 9/10 of the run, three requests each (x1 moved by one so the
# server's kept answer is not reused); the index is built first.
#   bash bench/range-tree.sh MEMLENS TRACE
set -eu
M=$1; T=$2
OUT=$(mktemp)
$M view --no-serve $T >/dev/null 2>&1
$M view --port 0 $T > $OUT 2>&1 &
PID=$!
for i in $(seq 1 100); do grep -q "http://" $OUT && break; sleep 0.2; done
URL=$(grep -o "http://[^ ]*" $OUT | head -1)
BASE=${URL%%/?token=*}; TOK=${URL##*token=}
N=$(curl -s "$BASE/api/meta?token=$TOK" | python3 -c "import json,sys; print(json.load(sys.stdin)['ops'])")
echo "ops $N"
for f in 1 5 9; do
  x0=$((N*f/10)); x1=$((x0+1000))
  for r in 1 2 3; do
    s=$(date +%s.%N); curl -s "$BASE/api/calltree?view=top&x0=$x0&x1=$((x1+r))&token=$TOK" >/dev/null; e=$(date +%s.%N)
    echo "x0=$f/10 run $r: $(echo "$e - $s" | bc) s"
  done
done
kill $PID
rm -f $OUT
