# Milliseconds per /api/tiles chunk (256 buckets, fields=draw, as the page asks) at each level.
import subprocess, sys, json, urllib.request, re, time, random
binary, trace = sys.argv[1], sys.argv[2]
p = subprocess.Popen([binary, "view", "--port", "0", trace], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
url = p.stdout.readline().strip().split(": ", 1)[1]
port = int(re.search(r":(\d+)/", url).group(1)); tok = url.split("token=")[1]
get = lambda q: urllib.request.urlopen(f"http://127.0.0.1:{port}{q}&token={tok}").read()
meta = json.loads(get("/api/meta?x=1"))
random.seed(1)
for l, lv in enumerate(meta["levels"]):
    ts = []
    for _ in range(10):
        b0 = random.randrange(0, max(1, lv["buckets"] - 256))
        t = time.perf_counter(); n = len(get(f"/api/tiles?level={l}&b0={b0}&b1={b0+256}&fields=draw")); ts.append((time.perf_counter() - t) * 1e3)
    ts.sort()
    print(f"level {l} bucket {lv['bucket']}: median {ts[5]:.1f} ms, max {ts[-1]:.1f} ms per 256-bucket chunk ({n} B)")
p.kill()
