#!/usr/bin/env python3
"""memlens benchmark harness.

Builds the suite in bench/programs natively and with memlens, runs every
program side by side (native, memlens record, valgrind lackey, valgrind
cachegrind), N repetitions each, and reports medians: a markdown table on
stdout and everything (absolute times included) in bench/out/results.json.

Run it through bench/run.sh; see bench/README.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
PROGS = BENCH / "programs"
OUT = BENCH / "out"
BUILD = OUT / "build"

# Pinned third-party sources, fetched with cargo at run time (never committed).
THIRD_PARTY_DEPS = {
    "libsqlite3-sys": '{ version = "=0.30.1", features = ["bundled"] }',
    "zstd-sys": '"=2.1.2"',
    # C programs built with their own Makefiles (kind "make"): the crates vendor them whole.
    "bzip2-sys": '"=0.1.13"',
    "lz4-sys": '"=1.11.1"',
}

ZSTD_INPUT = "@zstd-input"  # placeholder in argument lists: the generated input file
INPUT_4M = "@input-4m"  # its first 4 MiB
INPUT_64K = "@input-64k"  # its first 64 KiB

# name, kind, source, full-size args, small-size args (for lackey).
# Full sizes run 0.2-2 s natively on a 2-core AMD EPYC VM; small sizes make
# about 1-3 M data accesses so that lackey finishes in seconds.
SUITE = [
    dict(name="matmul", kind="c", src="matmul.c", full=["700"], small=["100"],
         what="dense i-j-k double matrix multiply"),
    dict(name="stencil", kind="c", src="stencil.c", full=["1024", "400"], small=["128", "12"],
         what="2D 5-point Jacobi stencil"),
    dict(name="llist", kind="c", src="llist.c", full=["200000", "100"], small=["50000", "10"],
         what="linked list, shuffled node order"),
    dict(name="tree", kind="cxx", src="tree.cpp", full=["300000"], small=["6000"],
         what="std::map inserts, lookups, erases"),
    dict(name="hashtab", kind="c", src="hashtab.c", full=["1000000"], small=["30000"],
         what="open addressing, linear probing"),
    dict(name="sort", kind="c", src="sort.c", full=["2000000"], small=["10000"],
         what="merge sort + qsort of ints"),
    dict(name="alloc", kind="c", src="alloc.c", full=["2000000"], small=["8000"],
         what="malloc/realloc/free churn, 16 B-64 KiB"),
    dict(name="mt", kind="c", src="mt.c", full=["1000000", "40"], small=["10000", "4"],
         what="4 pthreads: private arrays + mutex + atomic"),
    dict(name="rust-collections", kind="rust", src="rust-collections", full=["800000"],
         small=["4000"], what="Rust HashMap, BTreeMap, Vec sort"),
    dict(name="sqlite", kind="sqlite", src="sqlite/driver.c", full=["200000"], small=["400"],
         what="SQLite 3 in-memory: insert, select, group by"),
    dict(name="zstd", kind="zstd", src="zstd/driver.c", full=[ZSTD_INPUT, "-1", "9"],
         small=[ZSTD_INPUT, "32768", "9"], what="zstd -9 of 12 MB of C source"),
    # Real programs nobody here wrote, built by their own Makefiles (`make CC=...`):
    # the source tree is copied out of the fetched crate, since cargo's copy is shared.
    dict(name="bzip2", kind="make", src="bzip2-sys", tree="bzip2-1.0.8", target="bzip2",
         exe="bzip2", full=["-9", "-c", INPUT_4M], small=["-9", "-c", INPUT_64K],
         what="bzip2 1.0.8 -9 of 4 MiB of C source (its own Makefile)"),
    dict(name="lz4", kind="make", src="lz4-sys", tree="liblz4", target="-C programs lz4",
         exe="programs/lz4", full=["-9", "-T1", "-c", ZSTD_INPUT],
         small=["-9", "-T1", "-c", INPUT_64K],
         what="lz4 1.10.0 -9 (HC) of 12 MB of C source (its own Makefile)"),
]
QUICK_PROGRAM = "hashtab"

CACHEGRIND_FULL_LIMIT = 60.0  # seconds; above this cachegrind uses the small input
LACKEY_TIMEOUT = 900.0


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run(cmd, cwd=None, env=None, check=True, capture=True, timeout=None):
    """Runs a build command and returns it; prints output when it fails."""
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, timeout=timeout,
                       stdout=subprocess.PIPE if capture else None,
                       stderr=subprocess.STDOUT if capture else None, text=True)
    if check and r.returncode != 0:
        raise BuildError(f"command failed ({r.returncode}): {' '.join(map(str, cmd))}\n"
                         f"{(r.stdout or '')[-4000:]}")
    return r


class BuildError(Exception):
    pass


def newer(out: Path, inputs, cmd=None) -> bool:
    """True when `out` is missing, older than any input, or was built by another command."""
    if not out.exists():
        return True
    if cmd is not None:
        stamp = Path(str(out) + ".cmd")
        if not stamp.exists() or stamp.read_text() != " ".join(map(str, cmd)):
            return True
    t = out.stat().st_mtime
    return any(Path(i).exists() and Path(i).stat().st_mtime > t for i in inputs)


def build_step(cmd, out: Path, inputs) -> None:
    """Runs cmd when `out` is out of date, and stamps it with the command."""
    if newer(out, inputs, cmd):
        run(cmd)
        Path(str(out) + ".cmd").write_text(" ".join(map(str, cmd)))


# --------------------------------------------------------------------------------------
# Tools


class Tools:
    def __init__(self, args):
        self.memlens = Path(args.memlens).resolve() if args.memlens else ROOT / "target/release/memlens"
        self.runtime = self.memlens.parent / "libmemlens_rt.a"
        self.cc = os.environ.get("MEMLENS_CC") or (
            "clang-22" if shutil.which("clang-22") else "gcc")
        self.cxx = os.environ.get("MEMLENS_CXX") or (
            "clang++-22" if shutil.which("clang++-22") else "g++")
        self.valgrind = shutil.which("valgrind")
        self.memlens_ok = False
        self.memlens_why = ""
        self.dbi_ok = False
        self.dbi_why = ""

    def check_memlens(self) -> None:
        if not self.memlens.is_file():
            self.memlens_why = f"{self.memlens} missing"
        elif not self.runtime.is_file():
            self.memlens_why = f"{self.runtime} missing (runtime not built)"
        else:
            self.memlens_ok = True

    def check_dbi(self) -> None:
        """--dbi needs the memlens binary, its QEMU plugin and guest preload, and QEMU."""
        need = [self.memlens, self.memlens.parent / "libmemlens_dbi.so",
                self.memlens.parent / "libmemlens_dbi_preload.so"]
        missing = [str(p) for p in need if not p.is_file()]
        if missing:
            self.dbi_why = f"{', '.join(missing)} missing"
        elif not shutil.which("qemu-x86_64"):
            self.dbi_why = "qemu-x86_64 not found (apt-get install qemu-user)"
        else:
            self.dbi_ok = True

    def memlens_inputs(self):
        return [self.memlens, self.runtime]


# --------------------------------------------------------------------------------------
# Third-party sources


def fetch_third_party() -> dict:
    """cargo-fetches the pinned -sys crates and returns their source directories."""
    d = OUT / "fetch"
    (d / "src").mkdir(parents=True, exist_ok=True)
    (d / "src/lib.rs").touch()
    deps = "\n".join(f"{k} = {v}" for k, v in THIRD_PARTY_DEPS.items())
    manifest = (
        '[package]\nname = "memlens-bench-thirdparty"\nversion = "0.0.0"\n'
        f'edition = "2021"\npublish = false\n\n[workspace]\n\n[dependencies]\n{deps}\n')
    mpath = d / "Cargo.toml"
    if not mpath.exists() or mpath.read_text() != manifest:
        mpath.write_text(manifest)
    run(["cargo", "fetch", "--quiet", "--manifest-path", mpath])
    meta = json.loads(run(["cargo", "metadata", "--format-version", "1", "--manifest-path",
                           mpath]).stdout)
    dirs = {p["name"]: Path(p["manifest_path"]).parent for p in meta["packages"]}
    sqlite = dirs["libsqlite3-sys"] / "sqlite3"
    zstd = dirs["zstd-sys"] / "zstd" / "lib"
    for p in (sqlite / "sqlite3.c", zstd / "zstd.h"):
        if not p.exists():
            raise BuildError(f"{p} not found in the fetched crate")
    return {"sqlite": sqlite, "zstd": zstd, "dirs": dirs,
            "versions": {p["name"]: p["version"] for p in meta["packages"]
                         if p["name"] in THIRD_PARTY_DEPS}}


def inputs(tp: dict) -> dict:
    """The placeholders of the suite's argument lists and the files they stand for."""
    full = zstd_input(tp)
    out = {ZSTD_INPUT: str(full)}
    for key, size in ((INPUT_4M, 4 << 20), (INPUT_64K, 64 << 10)):
        f = BUILD / f"input-{size}.txt"
        if not f.exists():
            f.write_bytes(full.read_bytes()[:size])
        out[key] = str(f)
    return out


def zstd_input(tp: dict) -> Path:
    """The zstd workload's input: sqlite3.c followed by the zstd library sources."""
    out = BUILD / "zstd-input.txt"
    if not out.exists():
        files = [tp["sqlite"] / "sqlite3.c"] + sorted(tp["zstd"].glob("*/*.[ch]"))
        with open(out, "wb") as f:
            for p in files:
                f.write(p.read_bytes())
    return out


# --------------------------------------------------------------------------------------
# Builds


class Builder:
    """Builds one program in one flavour: 'native' or 'memlens'."""

    def __init__(self, tools: Tools, flavour: str, tp: dict | None, jobs: int):
        self.t = tools
        self.flavour = flavour
        self.tp = tp
        self.jobs = jobs
        self.dir = BUILD / flavour
        self.dir.mkdir(parents=True, exist_ok=True)

    def cc(self, lang="c"):
        if self.flavour == "memlens":
            return [self.t.memlens, "cc" if lang == "c" else "c++"]
        return [self.t.cc if lang == "c" else self.t.cxx]

    def g(self):
        # Native builds carry no debug info: valgrind 3.19 cannot read clang-22's
        # DWARF 5 ("unhandled dwarf2 abbrev form", then gives up). memlens needs it.
        return ["-g"] if self.flavour == "memlens" else []

    def extra_inputs(self):
        return self.t.memlens_inputs() if self.flavour == "memlens" else []

    def build(self, p: dict) -> Path:
        kind = p["kind"]
        if kind in ("c", "cxx"):
            return self.build_simple(p)
        if kind == "rust":
            return self.build_rust(p)
        if kind == "sqlite":
            return self.build_sqlite(p)
        if kind == "zstd":
            return self.build_zstd(p)
        if kind == "make":
            return self.build_make(p)
        raise ValueError(kind)

    def build_simple(self, p):
        src = PROGS / p["src"]
        out = self.dir / p["name"]
        lang = "c" if p["kind"] == "c" else "cxx"
        build_step([*self.cc(lang), "-O2", *self.g(), "-pthread", f"-I{PROGS}", src, "-o", out,
                    "-lm"], out, [src, PROGS / "common.h", *self.extra_inputs()])
        return out

    def build_rust(self, p):
        proj = PROGS / p["src"]
        tdir = BUILD / f"rust-{self.flavour}"
        m = proj / "Cargo.toml"
        if self.flavour == "memlens":
            out = tdir / "x86_64-unknown-linux-gnu/release" / p["name"]
            # cargo does not see the runtime it links change: rebuild the package
            if out.exists() and newer(out, self.extra_inputs()):
                run(["cargo", "clean", "--quiet", "--release", "-p", p["name"],
                     "--target", "x86_64-unknown-linux-gnu", "--manifest-path", m,
                     "--target-dir", tdir], cwd=proj)
            run([self.t.memlens, "cargo", "build", "--release", "--quiet", "--manifest-path", m,
                 "--target-dir", tdir], cwd=proj)
            return out
        run(["cargo", "build", "--release", "--quiet", "--manifest-path", m, "--target-dir", tdir],
            cwd=proj)
        return tdir / "release" / p["name"]

    def compile_objects(self, jobs):
        """jobs: list of (cmd, out, inputs); runs those out of date, in parallel."""
        todo = [(c, o, i) for c, o, i in jobs if newer(o, i, c)]
        if not todo:
            return
        with ThreadPoolExecutor(max_workers=self.jobs) as ex:
            for f in [ex.submit(build_step, c, o, i) for c, o, i in todo]:
                f.result()

    def build_sqlite(self, p):
        s = self.tp["sqlite"]
        defs = ["-DSQLITE_THREADSAFE=0", "-DSQLITE_OMIT_LOAD_EXTENSION",
                "-DSQLITE_DEFAULT_MEMSTATUS=0"]
        obj = self.dir / "sqlite3.o"
        self.compile_objects([([*self.cc(), "-O2", *self.g(), *defs, f"-I{s}", "-c",
                                s / "sqlite3.c", "-o", obj], obj,
                               [s / "sqlite3.c", *self.extra_inputs()])])
        out = self.dir / p["name"]
        src = PROGS / p["src"]
        build_step([*self.cc(), "-O2", *self.g(), f"-I{s}", src, obj, "-o", out, "-lm",
                    "-lpthread"], out, [src, obj])
        return out

    def build_make(self, p):
        """`make CC=... CFLAGS=...` in a copy of the program's own source tree."""
        src = self.tp["dirs"][p["src"]] / p["tree"]
        tree = self.dir / f"{p['name']}-src"
        out = tree / p["exe"]
        # make runs in the copy: a memlens given by a relative path must be made absolute
        c0 = self.cc()[0]
        c0 = Path(c0).resolve() if "/" in str(c0) else c0
        cc = " ".join(map(str, [c0, *self.cc()[1:]]))
        flags = " ".join(["-O2", *self.g()])
        cmd = ["make", f"-j{self.jobs}", *p["target"].split(), f"CC={cc}", f"CFLAGS={flags}",
               "MOREFLAGS="]
        # the stamp is `newer`'s, as for every other build: the make line without its
        # job count names the compiler and flags
        stamped = [c for c in cmd if not c.startswith("-j")]
        if not newer(out, self.extra_inputs(), stamped):
            return out
        if tree.exists():
            shutil.rmtree(tree)
        shutil.copytree(src, tree)
        for f in tree.rglob("*"):
            f.chmod(f.stat().st_mode | 0o200)
        run(cmd, cwd=tree)
        if not out.exists():
            raise BuildError(f"make did not build {out}")
        Path(str(out) + ".cmd").write_text(" ".join(map(str, stamped)))
        return out

    def build_zstd(self, p):
        z = self.tp["zstd"]
        odir = self.dir / "zstd-obj"
        odir.mkdir(exist_ok=True)
        srcs = sorted(z.glob("common/*.c")) + sorted(z.glob("compress/*.c")) + sorted(
            z.glob("decompress/*.c")) + [PROGS / p["src"]]
        flags = ["-O2", *self.g(), "-DZSTD_DISABLE_ASM", f"-I{z}", f"-I{z}/common"]
        jobs, objs = [], []
        for i, sfile in enumerate(srcs):
            o = odir / f"{i:02d}-{sfile.stem}.o"
            objs.append(o)
            jobs.append(([*self.cc(), *flags, "-c", sfile, "-o", o], o,
                         [sfile, *self.extra_inputs()]))
        self.compile_objects(jobs)
        out = self.dir / p["name"]
        link = [*self.cc(), *self.g(), odir / "combined.o", "-o", out, "-lpthread"]
        if newer(out, objs, link):
            # One relocatable object with only `main` global: the memlens runtime
            # carries its own (uninstrumented) zstd, and the two must not clash.
            combined = odir / "combined.o"
            run(["ld", "-r", "-o", combined, *objs])
            run(["objcopy", "-G", "main", combined])
            run(link)
            Path(str(out) + ".cmd").write_text(" ".join(map(str, link)))
        return out


# --------------------------------------------------------------------------------------
# Running


CPU_LOG: list = []  # (argv0, wall, user+sys CPU of the process and its threads)


def timed(cmd, env=None, timeout=None):
    """Runs cmd; returns (wall seconds, returncode, stdout, stderr). The CPU time
    (user + sys, all threads) is appended to CPU_LOG."""
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    try:
        r = subprocess.run([str(c) for c in cmd], env=env, timeout=timeout,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except subprocess.TimeoutExpired:
        return time.perf_counter() - t0, None, b"", b"timeout"
    dt = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU_LOG.append(dt and (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime))
    return dt, r.returncode, r.stdout, r.stderr


def cpu_of_last():
    return CPU_LOG[-1] if CPU_LOG else None


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def percentile(xs, q):
    """Linear-interpolated percentile (numpy's default) of the non-None values."""
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def ratio(a, b):
    return a / b if a is not None and b else None


def lackey_counts(path: Path) -> dict:
    """Counts lines in a lackey log: instruction (I), data (L/S/M), total bytes."""
    instr = data = 0
    with open(path, "rb") as f:
        prev = b"\n"
        while True:
            buf = f.read(1 << 24)
            if not buf:
                break
            chunk = prev[-1:] + buf
            instr += chunk.count(b"\nI ")
            data += chunk.count(b"\n L") + chunk.count(b"\n S") + chunk.count(b"\n M")
            prev = buf
    return {"log_bytes": path.stat().st_size, "instr_lines": instr, "data_lines": data}


def memlens_info(tools: Tools, trace: Path) -> dict:
    r = run([tools.memlens, "info", "--fast", "--format", "json", trace])
    return json.loads(r.stdout)


def nthreads(info: dict) -> int:
    t = info.get("threads", 1)
    if isinstance(t, list):
        return len(t)
    return int(t or 1)


def bench_program(p, exe_native, exe_ml, tools, args, argmap):
    """All the measurements for one program; returns its JSON record."""
    full = [argmap.get(a, a) for a in p["full"]]
    small = [argmap.get(a, a) for a in p["small"]]
    rec = {"name": p["name"], "kind": p["kind"], "what": p["what"],
           "full_args": p["full"], "small_args": p["small"], "times": {},
           "loadavg_before": os.getloadavg()}
    T = rec["times"]
    C = rec["cpu_times"] = {}
    for k in ("native", "memlens_record", "native_small", "lackey", "cachegrind",
              "memlens_report", "memlens_by_variable", "dbi_record"):
        T[k] = []
        C[k] = []
    tracedir = OUT / "traces"
    tracedir.mkdir(parents=True, exist_ok=True)
    trace = tracedir / f"{p['name']}.trace"
    dbi_trace = tracedir / f"{p['name']}.dbi.trace"
    lackey_log = OUT / "lackey" / f"{p['name']}.log"
    lackey_log.parent.mkdir(parents=True, exist_ok=True)
    cg_input = "full"
    native_out = None
    problems = []
    env = dict(os.environ)

    for rep in range(args.reps):
        log(f"  [{p['name']}] rep {rep + 1}/{args.reps}")
        # native, full input
        dt, rc, so, se = timed([exe_native, *full], env=env)
        if rc != 0:
            raise RuntimeError(f"{p['name']} native failed ({rc}): {se.decode()[-2000:]}")
        T["native"].append(dt)
        C["native"].append(cpu_of_last())
        native_out = so
        # memlens record, full input, to a real file
        if exe_ml is not None and not args.no_memlens:
            if trace.exists():
                trace.unlink()
            dt, rc, so, se = timed([tools.memlens, "record", "--quiet", "-o", trace, "--",
                                    exe_ml, *full], env=env)
            if rc != 0:
                problems.append(f"memlens record exited {rc}: {se.decode(errors='replace')[-500:]}")
                exe_ml = None
            else:
                T["memlens_record"].append(dt)
                C["memlens_record"].append(cpu_of_last())
                if so != native_out:
                    problems.append("instrumented output differs from native output")
        # the native binary under QEMU with the memlens plugin, full input
        if args.dbi and tools.dbi_ok:
            dbi_trace.unlink(missing_ok=True)
            dt, rc, so, se = timed([tools.memlens, "record", "--quiet", "--dbi", "-o", dbi_trace,
                                    "--", exe_native, *full], env=env)
            if rc != 0:
                problems.append(f"memlens record --dbi exited {rc}: "
                                f"{se.decode(errors='replace')[-500:]}")
            else:
                T["dbi_record"].append(dt)
                C["dbi_record"].append(cpu_of_last())
                if so != native_out:
                    problems.append("--dbi output differs from native output")
        # native and lackey on the small input
        if tools.valgrind and not args.no_valgrind:
            dt, rc, so, se = timed([exe_native, *small], env=env)
            T["native_small"].append(dt)
            if not args.no_lackey:
                dt, rc, so, se = timed([tools.valgrind, "--tool=lackey", "--trace-mem=yes",
                                        f"--log-file={lackey_log}", exe_native, *small],
                                       env=env, timeout=LACKEY_TIMEOUT)
                if rc == 0:
                    T["lackey"].append(dt)
                    if rep == 0:
                        rec["lackey"] = lackey_counts(lackey_log)
                else:
                    problems.append(f"lackey failed or timed out ({rc})")
                lackey_log.unlink(missing_ok=True)
            # cachegrind, full input unless that takes more than the limit
            cg_args = full if cg_input == "full" else small
            dt, rc, so, se = timed([tools.valgrind, "--tool=cachegrind", "--cache-sim=no",
                                    "--cachegrind-out-file=/dev/null", exe_native, *cg_args],
                                   env=env, timeout=CACHEGRIND_FULL_LIMIT if cg_input == "full"
                                   else LACKEY_TIMEOUT)
            if rc is None and cg_input == "full":
                log(f"  [{p['name']}] cachegrind > {CACHEGRIND_FULL_LIMIT:.0f} s on the full "
                    "input: using the small input")
                cg_input = "small"
                dt, rc, so, se = timed([tools.valgrind, "--tool=cachegrind", "--cache-sim=no",
                                        "--cachegrind-out-file=/dev/null", exe_native, *small],
                                       env=env, timeout=LACKEY_TIMEOUT)
            if rc == 0:
                T["cachegrind"].append(dt)
            else:
                problems.append(f"cachegrind failed ({rc})")

    rec["cachegrind_input"] = cg_input
    M = {k: med(v) for k, v in T.items()}
    rec["median"] = M
    rec["cpu_median"] = {k: med(v) for k, v in C.items()}
    rec["loadavg_after"] = os.getloadavg()
    rec["ratios"] = {
        "memlens": ratio(M["memlens_record"], M["native"]),
        "lackey_small": ratio(M["lackey"], M["native_small"]),
        "cachegrind": ratio(M["cachegrind"],
                            M["native"] if cg_input == "full" else M["native_small"]),
    }
    rec["ratios"]["memlens_cpu"] = ratio(rec["cpu_median"]["memlens_record"],
                                         rec["cpu_median"]["native"])
    rec["ratios"]["dbi"] = ratio(M["dbi_record"], M["native"])
    if T["dbi_record"] and dbi_trace.exists():
        info = memlens_info(tools, dbi_trace)
        acc = int(info.get("loads", 0)) + int(info.get("stores", 0))
        rec["dbi_info"] = info
        rec["dbi_accesses"] = acc
        rec["dbi_bytes_per_access"] = info.get("bytes_on_disk", 0) / acc if acc else None
        if not args.keep_traces:
            dbi_trace.unlink(missing_ok=True)
    if T["memlens_record"] and trace.exists():
        info = memlens_info(tools, trace)
        rec["info"] = info
        loads, stores = int(info.get("loads", 0)), int(info.get("stores", 0))
        acc = loads + stores
        th = nthreads(info)
        events = int(info.get("events", 0))
        rec["accesses"] = acc
        rec["threads"] = th
        rec["bytes_per_access"] = info.get("bytes_on_disk", 0) / acc if acc else None
        rec["records_per_s_per_thread"] = events / M["memlens_record"] / th
        rec["dropped"] = info.get("dropped", 0)
        if not args.no_report:
            # per line (decoding and code names), and per variable (every access named)
            for key, cmd in (("memlens_report", ["report"]),
                             ("memlens_by_variable", ["report", "--by", "variable"])):
                for _ in range(args.report_reps or args.reps):
                    dt, rc, so, se = timed([tools.memlens, *cmd, trace])
                    if rc != 0:
                        problems.append(f"memlens {' '.join(cmd)} failed ({rc}): "
                                        f"{se.decode(errors='replace')[-300:]}")
                        break
                    T[key].append(dt)
                M[key] = med(T[key])
            rec["ratios"]["report_vs_record"] = ratio(M["memlens_report"], M["memlens_record"])
            rec["ratios"]["by_variable_vs_record"] = ratio(M["memlens_by_variable"],
                                                           M["memlens_record"])
            # decoding alone, one core (the format crate's example, built beside memlens by
            # `cargo build --release -p memlens-format --example decode_bench`)
            db = tools.memlens.parent / "examples" / "decode_bench"
            if db.is_file():
                dt, rc, so, se = timed([db, trace, "3"])
                m = re.search(r"columns \(decode_columns\).*?([\d.]+) M/CPU-s", so.decode())
                if rc == 0 and m:
                    rec["decode_m_per_cpu_s"] = float(m.group(1))
        if args.variants:
            rec["variants"] = run_variants(p, exe_ml, full, tools, args, trace)
        if not args.keep_traces:
            trace.unlink(missing_ok=True)
    rec["problems"] = problems
    for pr in problems:
        log(f"  [{p['name']}] problem: {pr}")
    return rec


def agree_check(p, exe_ml, tools, argmap):
    """bench/agree.py on the program's small input; raises RuntimeError on a difference."""
    from agree import agree_program

    small = [argmap.get(a, a) for a in p["small"]]
    trace = OUT / "traces" / f"{p['name']}.agree.trace"
    trace.parent.mkdir(parents=True, exist_ok=True)
    dt, rc, so, se = timed([tools.memlens, "record", "--quiet", "-o", trace, "--", exe_ml, *small])
    if rc != 0:
        raise RuntimeError(f"agree: record failed ({rc}): {se.decode()[-1000:]}")
    n, bad = agree_program(tools.memlens, trace)
    if bad:
        raise RuntimeError(f"agree: {len(bad)} variables named differently: " + "; ".join(bad[:5]))
    log(f"  [{p['name']}] agree: {n} variables, report = cachesim = viewer = sharing")


def run_variants(p, exe_ml, full, tools, args, trace):
    """Where the time goes: the instrumented binary with the runtime inactive (no
    MEMLENS_OUTPUT: callbacks only), and recordings without compression and/or to tmpfs."""
    out = {}
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMLENS_")}
    times = []
    for _ in range(args.reps):
        dt, rc, so, se = timed([exe_ml, *full], env=env)
        if rc != 0:
            break
        times.append(dt)
    out["inactive"] = {"times": times, "median": med(times), "bytes_on_disk": None}
    shm = Path("/dev/shm") / f"memlens-bench-{os.getpid()}.trace"
    variants = {
        "zstd0_disk": (["--zstd-level", "0"], trace),
        "default_tmpfs": ([], shm),
        "zstd0_tmpfs": (["--zstd-level", "0"], shm),
    }
    for name, (flags, path) in variants.items():
        times = []
        for _ in range(args.reps):
            path.unlink(missing_ok=True)
            dt, rc, so, se = timed([tools.memlens, "record", "--quiet", *flags, "-o", path, "--",
                                    exe_ml, *full])
            if rc != 0:
                break
            times.append(dt)
        info = memlens_info(tools, path) if times else {}
        out[name] = {"times": times, "median": med(times),
                     "bytes_on_disk": info.get("bytes_on_disk")}
        path.unlink(missing_ok=True)
    return out


# --------------------------------------------------------------------------------------
# Output


def fmt(x, spec="{:.1f}", suffix=""):
    return "—" if x is None else spec.format(x) + suffix


def fmt_count(n):
    if n is None:
        return "—"
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= div:
            return f"{n / div:.1f}{unit}"
    return str(n)


def dbi_table(results):
    """The --dbi column: the native binaries under `memlens record --dbi` (needs --dbi)."""
    rows = [r for r in results if r["ratios"].get("dbi") is not None]
    if not rows:
        return ""
    lines = [
        "| program | --dbi × | --dbi CPU × | memlens record × | accesses (--dbi) | "
        "B/access (--dbi) | threads |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        R = r["ratios"]
        cpu = ratio(r["cpu_median"].get("dbi_record"), r["cpu_median"].get("native"))
        lines.append(
            f"| {r['name']} | {fmt(R.get('dbi'), '{:.2f}', '×')} | {fmt(cpu, '{:.2f}', '×')} | "
            f"{fmt(R.get('memlens'), '{:.2f}', '×')} | {fmt_count(r.get('dbi_accesses'))} | "
            f"{fmt(r.get('dbi_bytes_per_access'), '{:.3f}')} | "
            f"{nthreads(r['dbi_info']) if r.get('dbi_info') else '—'} |")
    return "\n".join(lines)


def table(results):
    lines = [
        "| program | what | memlens record × | memlens CPU × | lackey × (small) | cachegrind × | accesses | "
        "B/access | M rec/s/thread | threads | report / record | by variable / record | "
        "decode M ev/CPU-s |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        R = r["ratios"]
        cg = fmt(R.get("cachegrind"), "{:.1f}", "×")
        if r.get("cachegrind_input") == "small" and R.get("cachegrind") is not None:
            cg += " (small)"
        rps = r.get("records_per_s_per_thread")
        lines.append(
            f"| {r['name']} | {r['what']} | {fmt(R.get('memlens'), '{:.2f}', '×')} | "
            f"{fmt(R.get('memlens_cpu'), '{:.2f}', '×')} | "
            f"{fmt(R.get('lackey_small'), '{:,.0f}', '×')} | {cg} | "
            f"{fmt_count(r.get('accesses'))} | {fmt(r.get('bytes_per_access'), '{:.3f}')} | "
            f"{fmt(rps / 1e6 if rps else None, '{:.0f}')} | {r.get('threads', '—')} | "
            f"{fmt(R.get('report_vs_record'), '{:.2f}', '×')} | "
            f"{fmt(R.get('by_variable_vs_record'), '{:.2f}', '×')} | "
            f"{fmt(r.get('decode_m_per_cpu_s'), '{:.0f}')} |")
    return "\n".join(lines)


def variants_table(results):
    """Where the time goes, as slowdowns vs native (needs --variants)."""
    rows = [r for r in results if r.get("variants")]
    if not rows:
        return ""
    lines = [
        "| program | instrumented, runtime inactive × | record, zstd 0, tmpfs × | "
        "record, zstd 1, tmpfs × | record, zstd 0, disk × | record, zstd 1, disk (default) × | "
        "raw B/access (zstd 0) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        V, n = r["variants"], r["median"]["native"]
        raw = V.get("zstd0_disk", {}).get("bytes_on_disk")
        lines.append(
            f"| {r['name']} | {fmt(ratio(V['inactive']['median'], n), '{:.2f}', '×')} | "
            f"{fmt(ratio(V['zstd0_tmpfs']['median'], n), '{:.2f}', '×')} | "
            f"{fmt(ratio(V['default_tmpfs']['median'], n), '{:.2f}', '×')} | "
            f"{fmt(ratio(V['zstd0_disk']['median'], n), '{:.2f}', '×')} | "
            f"{fmt(r['ratios'].get('memlens'), '{:.2f}', '×')} | "
            f"{fmt(raw / r['accesses'] if raw and r.get('accesses') else None, '{:.2f}')} |")
    return "\n".join(lines)


def summary(results):
    sl = [r["ratios"].get("memlens") for r in results]
    bpa = [r.get("bytes_per_access") for r in results]
    s = {
        "memlens_slowdown_median": med(sl),
        "memlens_slowdown_p90": percentile(sl, 0.9),
        "bytes_per_access_median": med(bpa),
        "lackey_slowdown_median": med([r["ratios"].get("lackey_small") for r in results]),
        "cachegrind_slowdown_median": med([r["ratios"].get("cachegrind") for r in results]),
        "report_vs_record_median": med([r["ratios"].get("report_vs_record") for r in results]),
        "by_variable_vs_record_median": med([r["ratios"].get("by_variable_vs_record")
                                             for r in results]),
        "dbi_slowdown_median": med([r["ratios"].get("dbi") for r in results]),
        "dbi_slowdown_p90": percentile([r["ratios"].get("dbi") for r in results], 0.9),
        "dbi_bytes_per_access_median": med([r.get("dbi_bytes_per_access") for r in results]),
        "programs": len(results),
        "targets": {"slowdown_median_max": 5.0, "slowdown_p90_max": 10.0,
                    "bytes_per_access_median_max": 1.5, "dbi_slowdown_median_max": 15.0},
    }
    return s


def summary_lines(s):
    def ok(v, lim):
        return "" if v is None else (" ✓" if v <= lim else " ✗")

    dbi = []
    if s.get("dbi_slowdown_median") is not None:
        dbi = [f"- --dbi slowdown: median {fmt(s['dbi_slowdown_median'], '{:.2f}', '×')} "
               f"(target ≤ 15×{ok(s['dbi_slowdown_median'], 15)}), "
               f"p90 {fmt(s['dbi_slowdown_p90'], '{:.2f}', '×')}; "
               f"B/access median {fmt(s['dbi_bytes_per_access_median'], '{:.3f}')}"]
    return "\n".join(dbi + [
        f"- memlens slowdown: median {fmt(s['memlens_slowdown_median'], '{:.2f}', '×')} "
        f"(target ≤ 5×{ok(s['memlens_slowdown_median'], 5)}), "
        f"p90 {fmt(s['memlens_slowdown_p90'], '{:.2f}', '×')} "
        f"(target ≤ 10×{ok(s['memlens_slowdown_p90'], 10)})",
        f"- trace bytes per access: median {fmt(s['bytes_per_access_median'], '{:.3f}')} "
        f"(target ≤ 1.5{ok(s['bytes_per_access_median'], 1.5)})",
        f"- for comparison: lackey median {fmt(s['lackey_slowdown_median'], '{:,.0f}', '×')} "
        f"(small inputs), cachegrind median {fmt(s['cachegrind_slowdown_median'], '{:.1f}', '×')}; "
        f"memlens report / record median {fmt(s['report_vs_record_median'], '{:.2f}', '×')}, "
        f"report --by variable / record median "
        f"{fmt(s['by_variable_vs_record_median'], '{:.2f}', '×')}",
    ])


def machine():
    m = {"nproc": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version()}
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                m["cpu"] = line.split(":", 1)[1].strip()
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
            m["memory_gib"] = round(kb / 2**20, 1)
    except OSError:
        pass
    return m


def tool_versions(tools):
    v = {}
    for name, cmd in (("cc", [tools.cc, "--version"]), ("cxx", [tools.cxx, "--version"]),
                      ("rustc", ["rustc", "--version"]), ("valgrind", ["valgrind", "--version"])):
        try:
            v[name] = subprocess.run(cmd, capture_output=True, text=True).stdout.splitlines()[0]
        except (OSError, IndexError):
            v[name] = None
    if tools.memlens_ok:
        v["memlens"] = subprocess.run([tools.memlens, "--version"], capture_output=True,
                                      text=True).stdout.strip()
    try:
        v["memlens_git"] = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                                          capture_output=True, text=True).stdout.strip()
    except OSError:
        pass
    return v


# --------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3, help="repetitions per measurement (median)")
    ap.add_argument("--only", help="comma-separated program names")
    ap.add_argument("--quick", action="store_true",
                    help=f"CI smoke run: {QUICK_PROGRAM} only, one repetition, no thresholds")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 when the suite misses the targets (median ≤ 5×, p90 ≤ 10×, "
                         "≤ 1.5 B/access)")
    ap.add_argument("--memlens", help="memlens binary (default target/release/memlens)")
    ap.add_argument("--no-cargo-build", action="store_true",
                    help="do not run `cargo build --release --workspace` first")
    ap.add_argument("--no-memlens", action="store_true", help="skip the memlens columns")
    ap.add_argument("--no-valgrind", action="store_true", help="skip lackey and cachegrind")
    ap.add_argument("--no-lackey", action="store_true", help="skip lackey")
    ap.add_argument("--no-report", action="store_true", help="skip timing memlens report")
    ap.add_argument("--report-reps", type=int, help="repetitions of memlens report (default --reps)")
    ap.add_argument("--variants", action="store_true",
                    help="also record with --zstd-level 0 and to tmpfs (where the time goes)")
    ap.add_argument("--dbi", action="store_true",
                    help="also run the native binaries under `memlens record --dbi` (QEMU)")
    ap.add_argument("--agree", action="store_true",
                    help="instead of timing: check that report, cachesim, the viewer and sharing name "
                         "every variable's accesses alike on each program's small input "
                         "(bench/agree.py); non-zero exit on a difference")
    ap.add_argument("--keep-traces", action="store_true", help="keep bench/out/traces/*.trace")
    ap.add_argument("--jobs", type=int, default=2, help="parallel compiles")
    ap.add_argument("--json", default=str(OUT / "results.json"), help="where to write the JSON")
    args = ap.parse_args()

    if args.quick:
        args.reps = 1
        args.only = args.only or QUICK_PROGRAM
    suite = SUITE
    if args.only:
        names = args.only.split(",")
        unknown = set(names) - {p["name"] for p in SUITE}
        if unknown:
            ap.error(f"unknown programs: {', '.join(sorted(unknown))} "
                     f"(known: {', '.join(p['name'] for p in SUITE)})")
        suite = [p for p in SUITE if p["name"] in names]

    OUT.mkdir(parents=True, exist_ok=True)
    tools = Tools(args)
    if not args.no_memlens and not args.memlens and not args.no_cargo_build:
        log("== cargo build --release --workspace")
        r = run(["cargo", "build", "--release", "--workspace", "--quiet"], cwd=ROOT, check=False)
        if r.returncode != 0:
            log("warning: cargo build failed; using whatever target/release holds\n"
                + r.stdout[-2000:])
    tools.check_memlens()
    if args.no_memlens:
        tools.memlens_ok = False
        tools.memlens_why = "--no-memlens"
    if args.dbi:
        tools.check_dbi()
        if not tools.dbi_ok:
            log(f"warning: --dbi column skipped: {tools.dbi_why}")
    if not tools.memlens_ok:
        log(f"warning: memlens columns skipped: {tools.memlens_why}")
        args.no_memlens = True
    if not tools.valgrind and not args.no_valgrind:
        log("warning: valgrind not found: lackey and cachegrind columns skipped")

    tp = None
    if any(p["kind"] in ("sqlite", "zstd", "make") for p in suite):
        log("== fetching third-party sources (cargo fetch)")
        tp = fetch_third_party()
    BUILD.mkdir(parents=True, exist_ok=True)
    argmap = inputs(tp) if tp else {}

    native = Builder(tools, "native", tp, args.jobs)
    ml = Builder(tools, "memlens", tp, args.jobs) if tools.memlens_ok else None
    results, failed = [], {}
    for p in suite:
        log(f"== {p['name']}: build")
        try:
            exe_n = native.build(p)
        except BuildError as e:
            log(f"  native build failed: {e}")
            failed[p["name"]] = f"native build: {str(e)[:2000]}"
            continue
        exe_m = None
        if ml:
            try:
                exe_m = ml.build(p)
            except BuildError as e:
                log(f"  memlens build failed: {e}")
                failed[p["name"]] = f"memlens build: {str(e)[:2000]}"
        if args.agree and exe_m is not None:
            try:
                agree_check(p, exe_m, tools, argmap)
            except RuntimeError as e:
                log(f"  {e}")
                failed[p["name"]] = str(e)
            continue
        log(f"== {p['name']}: run")
        try:
            results.append(bench_program(p, exe_n, exe_m, tools, args, argmap))
        except RuntimeError as e:
            log(f"  failed: {e}")
            failed[p["name"]] = str(e)

    if args.agree:
        # no timings: results.json (a benchmark's) is left as it is
        for k, v in failed.items():
            print(f"- {k}: FAILED: {v.splitlines()[0]}")
        print(f"agree: {len(suite) - len(failed)} of {len(suite)} programs name every variable alike")
        return 1 if failed else 0

    s = summary(results)
    doc = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": "bench/run.sh " + " ".join(sys.argv[1:]),
        "machine": machine(),
        "tools": tool_versions(tools),
        "third_party": tp["versions"] if tp else {},
        "reps": args.reps,
        "notes": "times are wall-clock seconds of the whole process, median of `reps`; "
                 "lackey runs the small input and its ratio is against native on that input; "
                 "cachegrind runs the full input unless that exceeds 60 s",
        "memlens_skipped": None if tools.memlens_ok else tools.memlens_why,
        "programs": results,
        "failed": failed,
        "summary": s,
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(doc, indent=2, default=str) + "\n")
    print(table(results))
    dt = dbi_table(results)
    if dt:
        print()
        print(dt)
    print()
    print(summary_lines(s))
    vt = variants_table(results)
    if vt:
        print()
        print(vt)
    if failed:
        print()
        for k, v in failed.items():
            print(f"- {k}: FAILED: {v.splitlines()[0]}")
    log(f"JSON: {args.json}")
    if args.check and not args.quick:
        bad = (s["memlens_slowdown_median"] is None or s["memlens_slowdown_median"] > 5
               or (s["memlens_slowdown_p90"] or 99) > 10
               or (s["bytes_per_access_median"] or 99) > 1.5)
        return 1 if bad or failed else 0
    return 1 if failed and (args.quick or args.agree) else 0


if __name__ == "__main__":
    sys.exit(main())
