#!/usr/bin/env python3
"""An independent count of heap accesses by the block live at each of them, for a
one-thread trace: `memlens dump --format json T | python3 bench/heap-truth.py [LINE...]`.

It keeps the live blocks in a sorted list (alloc, realloc and free events in stream
order) and prints, per (allocating line, accessing line, read/write), the accesses
that fall in a live block (allocating line None: in none). With LINE arguments only
accesses at those source lines are counted (faster). Compare with `memlens report
--by variable --format json T`: each `heap(FILE:LINE FUNC)` row's `lines`."""
import bisect
import collections
import json
import sys

only = {f'"line":{int(a)},' for a in sys.argv[1:]}
starts, blocks = [], {}  # start -> (end, allocating line)
count = collections.Counter()
for raw in sys.stdin:
    if '"event":"read"' in raw or '"event":"write"' in raw:
        if only and not any(o in raw for o in only):
            continue
        e = json.loads(raw)
        a = int(e["addr"], 16)
        k = bisect.bisect_right(starts, a) - 1
        site = None
        if k >= 0 and a < blocks[starts[k]][0]:
            site = blocks[starts[k]][1]
        count[(site, e.get("line"), e["event"])] += 1
    elif '"event":"alloc"' in raw or '"event":"realloc"' in raw or '"event":"free"' in raw:
        e = json.loads(raw)
        a = int(e["addr"], 16)
        gone = a if e["event"] == "free" else int(e.get("old", "0x0"), 16)
        if e["event"] != "alloc" and gone in blocks:
            del blocks[gone]
            starts.pop(bisect.bisect_left(starts, gone))
        if e["event"] != "free" and a:
            if a in blocks:
                starts.pop(bisect.bisect_left(starts, a))
            blocks[a] = (a + max(e["size"], 1), e.get("line"))
            bisect.insort(starts, a)
for k, v in sorted(count.items(), key=str):
    print(*k, v)
