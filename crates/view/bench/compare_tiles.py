# usage: compare_tiles.py OLD_MEMLENS NEW_MEMLENS OLD_TRACE_COPY NEW_TRACE_COPY (two copies of one trace)
# Compares every tile two memlens view servers answer for the same trace.
import subprocess, sys, json, urllib.request, re, hashlib
def start(binary, trace):
    p = subprocess.Popen([binary, "view", "--port", "0", trace], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    url = p.stdout.readline().strip().split(": ", 1)[1]
    port = int(re.search(r":(\d+)/", url).group(1)); tok = url.split("token=")[1]
    return p, port, tok
def get(port, tok, path):
    return urllib.request.urlopen(f"http://127.0.0.1:{port}{path}{'&' if '?' in path else '?'}token={tok}").read()
old = start(sys.argv[1], sys.argv[3]); new = start(sys.argv[2], sys.argv[4])
mo = json.loads(get(old[1], old[2], "/api/meta")); mn = json.loads(get(new[1], new[2], "/api/meta"))
lo, ln = mo["levels"], mn["levels"]
off = len(lo) - len(ln)  # the new index may leave out the finest levels
print("levels old", [l["bucket"] for l in lo], "new", [l["bucket"] for l in ln])
for k in ["vars", "pcs", "functions", "bands", "source", "tables", "max_rows", "distinct_lines", "ops"]:
    assert mo[k] == mn[k], k
same = 0
for i, l in enumerate(ln):
    assert lo[i + off]["bucket"] == l["bucket"] and lo[i + off]["buckets"] == l["buckets"]
    for mode in ["ws", "addr"]:
        for fields in ["all", "draw", "detail"]:
            b = 0
            while b < l["buckets"]:
                b1 = min(l["buckets"], b + 1024)
                q = f"/api/tiles?level={{}}&b0={b}&b1={b1}&mode={mode}&fields={fields}"
                x = get(old[1], old[2], q.format(i + off)); y = get(new[1], new[2], q.format(i))
                assert x == y, (i, mode, fields, b)
                same += len(x); b = b1
    for t in range(0, mo["ops"], max(1, mo["ops"] // 7)):
        q = f"/api/range?t0={t}&t1={t + mo['ops'] // 5}"
        assert json.loads(get(old[1], old[2], q))["pcs"] == json.loads(get(new[1], new[2], q))["pcs"], q
print("identical tiles:", same, "bytes over", len(ln), "levels; range sums identical")
old[0].kill(); new[0].kill()
