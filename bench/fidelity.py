#!/usr/bin/env python3
"""Fidelity benchmark: does `memlens cc` record every access the machine makes?

For each C/C++ suite program (small inputs) and for bzip2 1.0.8 built with its own
Makefile (sources from the bzip2-sys crate, fetched with cargo), this builds the
program twice with the same compiler and flags: with `memlens cc` (the compiled
path) and plainly (run under `memlens record --dbi`, which sees every load and
store the CPU executes). It then compares, per function of the program's own code,
the bytes read and written, split into stack and non-stack bytes.

The compiled path records what the optimised IR does; --dbi additionally sees what
the code generator adds: register spills and reloads, pushes and pops of saved
registers, the return addresses of call/ret, and constant-pool loads. Those are all
stack accesses except the constant pool, so the *non-stack* bytes must agree; the
stack gap is the code generator's own traffic.

Usage: python3 bench/fidelity.py [--memlens PATH] [--cc clang-22|gcc] [--only a,b]
       (writes bench/out/fidelity.json and prints a markdown table)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
OUT = BENCH / "out" / "fidelity"

SIMPLE = [
    ("matmul", "matmul.c", ["100"]),
    ("stencil", "stencil.c", ["128", "12"]),
    ("llist", "llist.c", ["50000", "10"]),
    ("hashtab", "hashtab.c", ["30000"]),
    ("sort", "sort.c", ["10000"]),
    ("alloc", "alloc.c", ["8000"]),
    ("tree", "tree.cpp", ["6000"]),
]


def run(cmd, **kw):
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, errors="replace", **kw)
    if r.returncode != 0:
        sys.exit(f"fidelity: {' '.join(map(str, cmd))} failed:\n{r.stderr[-2000:]}")
    return r


def fetch_bzip2() -> Path:
    d = OUT / "fetch"
    (d / "src").mkdir(parents=True, exist_ok=True)
    (d / "src/lib.rs").touch()
    (d / "Cargo.toml").write_text(
        '[package]\nname = "memlens-fidelity-thirdparty"\nversion = "0.0.0"\nedition = "2021"\n'
        'publish = false\n\n[workspace]\n\n[dependencies]\nbzip2-sys = "=0.1.13"\n')
    run(["cargo", "fetch", "--quiet", "--manifest-path", d / "Cargo.toml"])
    meta = json.loads(run(["cargo", "metadata", "--format-version", "1", "--manifest-path",
                           d / "Cargo.toml"]).stdout)
    for p in meta["packages"]:
        if p["name"] == "bzip2-sys":
            return Path(p["manifest_path"]).parent / "bzip2-1.0.8"
    sys.exit("fidelity: bzip2-sys not found")


def per_function(memlens: str, trace: Path, own: set[str] | None):
    """function -> [stack bytes, other bytes] (reads + writes), streaming `dump`.
    Stack bytes: inside the accessing thread's stack (its thread_start bounds)."""
    acc = defaultdict(lambda: [0, 0])
    stacks = {}
    p = subprocess.Popen([memlens, "dump", "--format", "json", str(trace)],
                         stdout=subprocess.PIPE, text=True, bufsize=1 << 20)
    for line in p.stdout:
        if '"event":"thread_start"' in line:
            e = json.loads(line)
            stacks[e["thread"]] = (int(e["stack_lo"], 16), int(e["stack_hi"], 16))
            continue
        if '"event":"read"' not in line and '"event":"write"' not in line \
                and '"event":"range' not in line:
            continue
        e = json.loads(line)
        f = (e.get("function") or "?").split("(")[0]
        if own is not None and f not in own:
            # libc's mem*/str* work, which the compiled path records at the call site
            if f.startswith(("__mem", "__str", "__GI_mem", "__GI_str", "memcpy", "memset",
                             "memmove", "__nss_database_lookup")):
                f = "[libc mem*/str*]"
            else:
                continue
        n = e.get("size") or e.get("len") or 0
        lo, hi = stacks.get(e.get("thread"), (0, 0))
        stack = lo <= int(e["addr"], 16) < hi
        acc[f][0 if stack else 1] += n
    p.wait()
    return acc


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--memlens", default=str(ROOT / "target/release/memlens"))
    ap.add_argument("--cc", default="clang-22")
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    only = set(filter(None, a.only.split(",")))
    cxx = {"clang-22": "clang++-22", "gcc": "g++"}.get(a.cc, a.cc)
    OUT.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, MEMLENS_CC=a.cc, MEMLENS_CXX=cxx, MEMLENS_QUIET="1")
    jobs = []
    for name, src, args in SIMPLE:
        if only and name not in only:
            continue
        comp = cxx if src.endswith(".cpp") else a.cc
        drv = "c++" if src.endswith(".cpp") else "cc"
        ml, nat = OUT / f"{name}.memlens", OUT / f"{name}.plain"
        s = BENCH / "programs" / src
        run([a.memlens, drv, "-O2", "-g", "-pthread", s, "-o", ml], env=env)
        run([comp, "-O2", "-g", "-pthread", s, "-o", nat])
        jobs.append((name, ml, nat, args))
    if not only or "bzip2" in only:
        src = fetch_bzip2()
        for flavour, cc in (("memlens", f"{a.memlens} cc"), ("plain", a.cc)):
            d = OUT / f"bzip2-{flavour}"
            shutil.rmtree(d, ignore_errors=True)
            shutil.copytree(src, d)
            run(["make", "-s", "-C", d, f"CC={cc}", "bzip2"], env=env)
        inp = OUT / "bzip2-input"
        inp.write_bytes(Path(a.memlens).read_bytes()[:60_000])
        jobs.append(("bzip2", OUT / "bzip2-memlens/bzip2", OUT / "bzip2-plain/bzip2",
                     ["-9", "-k", "-c", str(inp)]))
    rows, result = [], {}
    for name, ml, nat, args in jobs:
        tm, td = OUT / f"{name}.trace", OUT / f"{name}.dbi.trace"
        run([a.memlens, "record", "-q", "-o", tm, "--", ml, *args])
        tl = OUT / f"{name}.dbi-all.trace"
        run([a.memlens, "record", "-q", "--dbi", "-o", td, "--", nat, *args])
        # libc's share: a second run over every module, mem*/str* functions only
        run([a.memlens, "record", "-q", "--dbi", "--dbi-filter", "all", "-o", tl, "--", nat,
             *args])
        m = per_function(a.memlens, tm, None)
        own = set(m)  # the program's own functions: the compiled path names only those
        d = per_function(a.memlens, td, own)
        libc = per_function(a.memlens, tl, set()).get("[libc mem*/str*]", [0, 0])
        tot = {k: [sum(v[0] for v in x.values()), sum(v[1] for v in x.values())]
               for k, x in (("memlens", m), ("dbi", d))}
        tot["dbi_libc_mem"] = libc
        fn = []
        for f in sorted(own | set(d), key=lambda f: -sum(d.get(f, [0, 0]))):
            mm, dd = m.get(f, [0, 0]), d.get(f, [0, 0])
            fn.append(dict(function=f, memlens_stack=mm[0], memlens_other=mm[1],
                           dbi_stack=dd[0], dbi_other=dd[1]))
        result[name] = dict(args=args, totals=tot, functions=fn)
        mo, do = tot["memlens"][1], tot["dbi"][1]
        ms, ds = tot["memlens"][0], tot["dbi"][0]
        lb = libc[0] + libc[1]
        rows.append(f"| {name} | {mo:,} | {do:,} | {100.0 * (mo - do) / max(do, 1):+.2f} % "
                    f"| {lb:,} | {ms:,} | {ds:,} |")
        for f in fn[:3]:
            rows.append(f"| &nbsp; {f['function']} | {f['memlens_other']:,} | {f['dbi_other']:,} "
                        f"| {100.0 * (f['memlens_other'] - f['dbi_other']) / max(f['dbi_other'], 1):+.2f} % "
                        f"| | {f['memlens_stack']:,} | {f['dbi_stack']:,} |")
    (BENCH / "out" / "fidelity.json").write_text(json.dumps(result, indent=1))
    print(f"compiler: {a.cc}; bytes read + written by the program's own functions\n")
    print("| program / top functions | memlens cc, non-stack B | --dbi, non-stack B | gap "
          "| --dbi, libc mem*/str* B (all callers) "
          "| memlens cc, stack B | --dbi, stack B (+ spills, pushes, call/ret) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
