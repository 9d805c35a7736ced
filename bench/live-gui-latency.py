#!/usr/bin/env python3
"""Insert/remove latency at memlens live's GUI API (what the page does on a menu click).

Launches `memlens live --port 0 -- ticker` (tests/programs/ticker.c, gcc -O1 -g: tick()
about every ms), then N times: POST add count:ticker.c:LINE, poll state until the probe
shows a count > 0 (insert latency: click to first value); POST rm, poll state until it is
gone (remove latency), then waits PAUSE s (default 1). Prints median and max in ms.
    python3 bench/live-gui-latency.py [N [PAUSE]]   (needs root or CAP_PERFMON; MEMLENS=path)
"""
import json, os, re, shutil, statistics, subprocess, sys, tempfile, time, urllib.request

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
memlens = os.environ.get("MEMLENS") or os.path.join(
    os.environ.get("CARGO_TARGET_DIR", os.path.join(root, "target")), "debug", "memlens")
n = int(sys.argv[1]) if len(sys.argv) > 1 else 20
pause = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
d = tempfile.mkdtemp()
try:
    src = os.path.join(d, "ticker.c")
    shutil.copy(os.path.join(root, "tests/programs/ticker.c"), src)
    exe = os.path.join(d, "ticker")
    subprocess.run(["gcc", "-O1", "-g", src, "-o", exe], check=True)
    line = next(i + 1 for i, l in enumerate(open(src)) if l.rstrip().endswith("// @tick"))
    env = dict(os.environ, XDG_RUNTIME_DIR=d)
    p = subprocess.Popen([memlens, "live", "--port", "0", "--", exe], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = target = None
    while url is None or target is None:
        l = p.stderr.readline()
        if not l:
            sys.exit("memlens live ended early")
        if m := re.search(r"GUI (http://\S+)", l):
            url = m.group(1)
        if m := re.search(r"launched PID (\d+)", l):
            target = int(m.group(1))
    base, token = url.split("/?token=")

    def call(req):
        r = urllib.request.Request(f"{base}/api/call?token={token}", json.dumps(req).encode(),
                                   {"Content-Type": "application/json"})
        v = json.load(urllib.request.urlopen(r))
        assert v["ok"], v
        return v["result"]

    ins, add, rem = [], [], []
    for _ in range(n):
        # Let the previous removal's kernel events finish closing (docs/live.md, Cost).
        time.sleep(pause)
        t = time.monotonic()
        pid = call({"cmd": "add", "spec": f"count:{src}:{line}"})
        add.append((time.monotonic() - t) * 1e3)
        while not any(q["id"] == pid and q["count"] > 0 for q in call({"cmd": "state"})["probes"]):
            pass
        ins.append((time.monotonic() - t) * 1e3)
        t = time.monotonic()
        call({"cmd": "rm", "id": pid})
        while any(q["id"] == pid for q in call({"cmd": "state"})["probes"]):
            pass
        rem.append((time.monotonic() - t) * 1e3)
    p.terminate()
    p.wait()
    os.kill(target, 9)
    print(f"{n} add requests: median {statistics.median(add):.1f} ms, max {max(add):.1f} ms "
          "(the probe is in place when it answers)")
    print(f"{n} inserts: median {statistics.median(ins):.1f} ms, max {max(ins):.1f} ms "
          "(click to first counted value)")
    print(f"{n} removals: median {statistics.median(rem):.1f} ms, max {max(rem):.1f} ms "
          "(click to gone from the page's state)")
finally:
    shutil.rmtree(d, ignore_errors=True)
