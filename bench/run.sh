#!/usr/bin/env bash
# memlens benchmark suite: see bench/README.md.
#   bench/run.sh [--reps N] [--only prog,...] [--quick] [--variants] [--check] ...
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 bench/harness.py "$@"
