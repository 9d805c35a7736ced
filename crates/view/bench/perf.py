# Viewer latency: first paint and redraws in headless chromium via chromedriver, server RSS.
# usage: python3 crates/view/bench/perf.py TRACE [--pause S]   (server: $MEMLENS or target/release/memlens)
#   --pause S: wait S seconds after each redraw, as a user looking at the view would; the page
#              prefetches neighbouring and next-level tiles meanwhile (default 0: back to back).
# The index must exist (memlens view --no-serve TRACE); its build is not timed here.
import json, os, socket, subprocess, sys, time, urllib.request
args = sys.argv[1:]
pause = 0.0
if "--pause" in args:
    k = args.index("--pause"); pause = float(args[k + 1]); del args[k:k + 2]
trace = args[0]
srv = subprocess.Popen([os.environ.get("MEMLENS", "target/release/memlens"), "view", "--port", "0", trace], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
url = srv.stdout.readline().strip().split(": ", 1)[1]
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
drv = subprocess.Popen(["chromedriver", f"--port={port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
def req(method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    r = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method, headers={"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(r, timeout=300))["value"]
def rss():
    return " ".join(l.split()[0] + l.split()[1] + "kB" for l in open(f"/proc/{srv.pid}/status") if l.startswith(("VmHWM", "VmRSS")))
try:
    for _ in range(100):
        try: urllib.request.urlopen(f"http://127.0.0.1:{port}/status"); break
        except Exception: time.sleep(0.1)
    sid = req("POST", "/session", {"capabilities": {"alwaysMatch": {"goog:chromeOptions": {"binary": "/usr/bin/chromium", "args": ["--headless=new", "--no-sandbox", "--disable-background-networking", "--disable-gpu", "--window-size=1400,1000"]}}}})["sessionId"]
    js = lambda src: req("POST", f"/session/{sid}/execute/sync", {"script": src, "args": []})
    jsa = lambda src: req("POST", f"/session/{sid}/execute/async", {"script": src, "args": []})
    req("POST", f"/session/{sid}/timeouts", {"script": 120000})
    t = time.time()
    req("POST", f"/session/{sid}/url", {"url": url})
    while not js("return !!(window.memlens && window.memlens.ready)"):
        time.sleep(0.02)
    print("navigate->ready %.0f ms, firstPaintMs (meta fetch + tiles + flame + draw) %.0f ms, level %s, rows %s" % ((time.time()-t)*1000, js("return memlens.firstPaintMs"), js("return memlens.level"), js("return memlens.rowsDrawn")))
    print("server after first paint:", rss())
    ops = js("return memlens.meta.ops")
    views = [(0, ops), (0, ops//4), (ops//8, ops//8+ops//4), (ops//2, ops//2+ops//64), (ops//2+ops//128, ops//2+ops//128+ops//64), (1000000, 1000000 + 20000), (1005000, 1025000), (0, ops)]
    # A wheel session: five zoom steps of 0.8 around 0.6 of the trace, then four pans by a quarter.
    a, b = 0, ops
    for _ in range(5):
        c = a + (b - a) * 0.6; a, b = int(c - (c - a) * 0.8), int(c + (b - c) * 0.8); views.append((a, b))
    for _ in range(4):
        d = (b - a) // 4; a, b = a + d, b + d; views.append((a, b))
    worst = worst_first = 0
    for (a, b) in views:
        if pause: time.sleep(pause)
        ms = jsa(f"const d = arguments[0]; memlens.setView({a}, {b}).then(ms => d([ms, memlens.level, memlens.rowsDrawn, memlens.lastLoadMs, memlens.lastMapMs, memlens.lastFlameMs, memlens.lastPreviewMs, memlens.previewLevel]))")
        worst = max(worst, ms[0])
        # the first frame on screen: the coarse one when the tiles had to be fetched
        first = ms[6] if ms[6] > 0 else ms[0]
        worst_first = max(worst_first, first)
        pv = (", coarse frame %.0f ms from level %d" % (ms[6], ms[7])) if ms[6] > 0 else ""
        print("view %d..%d: redraw %.0f ms (level %d, %d rows; fetch+decode %.0f, map %.0f, flame %.0f)%s" % (a, b, *ms[:6], pv))
    print("worst redraw %.0f ms, worst first frame %.0f ms (pause %.2f s)" % (worst, worst_first, pause))
    print("server after the session:", rss())
    req("DELETE", f"/session/{sid}")
finally:
    drv.kill(); srv.kill()
