"""`bench/run.sh --agree`: every command names variables as `report --by variable` does.

For each suite program, the trace of its small input is named four ways — `report --by
variable`, `analyze cachesim`'s by-variable table, the viewer's index (`variables.json`,
every variable) and `analyze sharing`'s by-variable table (the variables two threads
touched) — and every variable's loads and stores must be equal (issue 23: one namer).
crates/cli/tests/e2e/agree.rs checks the same on the C and C++ programs in
bench/programs; this covers the whole suite, vendored libraries built by their own build
systems and the Rust program included.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path


def _json(memlens, *args):
    r = subprocess.run([str(memlens), *map(str, args)], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"memlens {' '.join(map(str, args))}: {r.stderr.strip()[-500:]}")
    return json.loads(r.stdout)


def named_counts(memlens, trace: Path) -> dict:
    """variable -> {namer: (loads, stores)} for the four namers."""
    out: dict = {}

    def put(namer, var, loads, stores):
        e = out.setdefault(var, {}).setdefault(namer, [0, 0])
        e[0] += loads
        e[1] += stores

    for r in _json(memlens, "report", "--by", "variable", "--top", "0", "--format", "json", trace):
        put("report", r["variable"], r["loads"], r["stores"])
    sim = _json(memlens, "analyze", "cachesim", "--top", "0", "--format", "json", trace)
    for r in sim["by_variable"]:
        put("cachesim", r["variable"], r["accesses"] - r["stores"], r["stores"])
    r = subprocess.run([str(memlens), "view", "--no-serve", "--reindex", str(trace)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"memlens view: {r.stderr.strip()[-500:]}")
    index = Path(str(trace) + ".mlview")
    for r in json.loads((index / "variables.json").read_text()):
        put("viewer", r["variable"], r["loads"], r["stores"])
    for r in _json(memlens, "analyze", "sharing", "--top", "0", "--format", "json",
                   trace)["by_variable"]:
        put("sharing", r["variable"], r["loads"], r["stores"])
    return out


def disagreements(counts: dict) -> list[str]:
    """What differs from report's row, one line per variable (empty: all agree)."""
    bad = []
    for var, by in sorted(counts.items()):
        want = by.get("report")
        for namer in ("cachesim", "viewer", "sharing"):
            got = by.get(namer)
            # sharing lists only what two threads touched
            if namer == "sharing" and got is None:
                continue
            if got != want:
                bad.append(f"{var}: report {want}, {namer} {got}")
    return bad


def agree_program(memlens, trace: Path) -> tuple[int, list[str]]:
    """(variables named, disagreements) for a recorded trace."""
    counts = named_counts(memlens, trace)
    return len(counts), disagreements(counts)
