#!/usr/bin/env bash
# Regenerates fuzz/corpus/{reader,decoder}/: a synthetic trace and two real
# recordings (tests/programs/threads.c and counts.c, built with `memlens cc`),
# each whole, cut and bit-flipped, and their chunks. `cargo test -p memlens-format
# --test fuzz_smoke` runs the fuzz targets over it (fuzz/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q -p memlens -p memlens-rt
target=${CARGO_TARGET_DIR:-target}
memlens=$target/debug/memlens
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for p in threads counts; do
  "$memlens" cc -O2 -pthread "tests/programs/$p.c" -o "$tmp/$p"
  (cd "$tmp" && "$memlens" record -q -o "$p.trace" -- "./$p" >/dev/null)
done
# inputs that once crashed a target (regress-*) stay
find fuzz/corpus -type f ! -name "regress-*" -delete
cargo run -q -p memlens-format --example fuzz_corpus -- fuzz/corpus "$tmp/threads.trace" "$tmp/counts.trace"
