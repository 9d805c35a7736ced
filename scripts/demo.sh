#!/usr/bin/env bash
# The quick start: install what is missing, build memlens, build the bundled
# example with `memlens cc`, record it, and show what it did with memory.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
# without the SQL engine (DataFusion, the largest part of a build; `cargo build
# --release` adds it): the quick start stays quick
cargo build --release --workspace --exclude memlens-sql --exclude memlens-cluster --no-default-features --quiet
ml=target/release/memlens
out=target/demo
mkdir -p "$out"
"$ml" cc -O2 -pthread examples/hotspots.c -o "$out/hotspots"
"$ml" record -o "$out/hotspots.trace" -- "$out/hotspots"
echo
"$ml" info "$out/hotspots.trace"
echo
echo "== hottest lines"
"$ml" report --top 8 "$out/hotspots.trace"
echo
echo "== allocation sites"
"$ml" report --by alloc --top 5 "$out/hotspots.trace"
echo
echo "== threads"
"$ml" report --by thread "$out/hotspots.trace"
echo
echo "first events:"
"$ml" dump "$out/hotspots.trace" | head -5
echo
echo "== viewer index (memory map, flame chart, source, tables)"
"$ml" view --no-serve "$out/hotspots.trace"
echo "browse it: $ml view --open $out/hotspots.trace   (serves on 127.0.0.1 with a token)"
