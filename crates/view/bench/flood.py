# Server memory under a flood: 200 concurrent requests of the largest kinds (16384-bucket
# tiles, all and detail columns, whole-trace range sums and flame frames) whose readers stall
# 5 s before draining; prints the server's peak RSS (VmHWM). 127.0.0.1 only, one round.
# usage: python3 crates/view/bench/flood.py TRACE   (server: $MEMLENS or target/release/memlens)
# The index must exist (memlens view --no-serve TRACE).
import json, os, socket, subprocess, sys, threading, time
srv = subprocess.Popen([os.environ.get("MEMLENS", "target/release/memlens"), "view", "--port", "0", sys.argv[1]], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
url = srv.stdout.readline().strip().split(": ", 1)[1]
port, token = int(url.split(":")[2].split("/")[0]), url.split("token=")[1]
def hwm():
    for l in open(f"/proc/{srv.pid}/status"):
        if l.startswith("VmHWM:"):
            return int(l.split()[1]) // 1024
def get(path):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode())
    return s
try:
    meta = json.loads(get(f"/api/meta?token={token}").makefile("rb").read().split(b"\r\n\r\n", 1)[1])
    nb, ops = meta["levels"][0]["buckets"], meta["ops"]
    paths = []
    for k in range(200):
        b0 = (k * 331) % max(1, nb - 16384)
        tiles = f"/api/tiles?token={token}&level=0&b0={b0}&b1={b0 + 16384}"
        paths.append([tiles + "&fields=all", tiles + "&fields=all", tiles + "&fields=detail&mode=addr",
                      f"/api/range?token={token}&t0=0&t1={ops}", f"/api/flame?token={token}&t0=0&t1={ops}"][k % 5])
    t, start = time.time(), hwm()
    conns = [get(p) for p in paths]
    time.sleep(5)
    total = []
    def drain(s):
        n = 0
        while b := s.recv(1 << 20):
            n += len(b)
        total.append(n)
    th = [threading.Thread(target=drain, args=(s,)) for s in conns]
    [x.start() for x in th]
    [x.join() for x in th]
    print(f"{len(paths)} requests, {sum(total) >> 20} MB answered in {time.time() - t:.1f} s; server peak RSS {hwm()} MB (at start {start} MB)")
finally:
    srv.terminate()
