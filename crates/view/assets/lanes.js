// memlens view: the wall-clock lanes, one per thread, as Perfetto and Tracy draw them.
// Each thread's `Time` stamps carry the memory operations done by then (in the
// merged order and its own); between two stamps the operations are spread evenly
// over the time between them. Needs app.js's hooks (api, st, setRange, meta).
"use strict";
(function () {
  const H = () => window.memlens;
  const $ = (id) => document.getElementById(id);
  const GUT = 160; // label gutter
  const BAR = 24, FR = 5, LH = BAR + 3 * FR + 8;
  // A collapsed lane keeps its name and a thin activity bar (Perfetto's collapsed track).
  const CBAR = 6, CLH = 18;
  const L = { t0: 0, t1: 1, data: null, spans: [], sel: null, drag: null, byThread: new Map(), collapsed: new Set() };
  // Lane k's top and height, collapsed lanes being short.
  function laneBoxes() {
    let y = 2;
    return meta.lanes.map((ln) => {
      const hgt = L.collapsed.has(ln.thread) ? CLH : LH;
      const b = { top: y, height: hgt - 2, collapsed: hgt === CLH };
      y += hgt;
      return b;
    });
  }
  const laneAt = (y) => laneBoxes().findIndex((b) => y >= b.top - 2 && y < b.top + b.height);
  let meta = null, T0 = 0, TEND = 1, offset = null, gen = 0;

  function wait() { if (H() && H().ready) init(); else setTimeout(wait, 30); }

  function init() {
    meta = H().meta;
    const x = $("xmode");
    H().lanes = { mode: x.value, draws: 0, drawn: [], selection: null, note: "" };
    if (!meta.time || !meta.lanes || !meta.lanes.length) {
      x.value = "order";
      x.querySelector('option[value="time"]').disabled = true;
      $("timelanes").classList.add("off");
      const n = $("timenote");
      n.hidden = false;
      n.textContent = "No wall-clock stamps in this trace (recorded before memlens stamped time): the axis is the merged order of operations.";
      Object.assign(H().lanes, { mode: "order", note: n.textContent });
      return;
    }
    T0 = meta.time.t0; TEND = meta.time.t1; offset = meta.time.clock_offset;
    L.t0 = T0; L.t1 = TEND;
    x.addEventListener("change", () => {
      H().lanes.mode = x.value;
      $("timelanes").classList.toggle("off", x.value !== "time");
      if (x.value === "time") load();
    });
    H().lanesSelect = selectTime; // tests select a range by ns
    setup();
    window.addEventListener("resize", () => { if (x.value === "time") load(); });
    load();
  }

  const plotW = () => Math.max(50, $("lanes").clientWidth - GUT);
  const xOf = (ns) => GUT + ((ns - L.t0) / (L.t1 - L.t0)) * plotW();
  const tOf = (x) => L.t0 + ((x - GUT) / plotW()) * (L.t1 - L.t0);
  function fmtT(ns) {
    const d = (ns - T0) / 1e6, span = (L.t1 - L.t0) / 1e6;
    return "+" + d.toFixed(span < 0.1 ? 4 : span < 10 ? 3 : 1) + " ms";
  }
  function wall(ns) {
    if (offset === null || offset === undefined) return "";
    return new Date((ns + offset) / 1e6).toISOString().slice(11, 23);
  }
  // Column j of stamps S at the point where column k equals v (linear in between).
  function interp(S, k, v, j) {
    if (!S || !S.length) return null;
    let lo = 0, hi = S.length - 1;
    if (v <= S[0][k]) return S[0][j];
    if (v >= S[hi][k]) return S[hi][j];
    while (hi - lo > 1) { const m = (lo + hi) >> 1; if (S[m][k] <= v) lo = m; else hi = m; }
    const a = S[lo], b = S[hi];
    return b[k] === a[k] ? a[j] : a[j] + ((v - a[k]) / (b[k] - a[k])) * (b[j] - a[j]);
  }

  async function load() {
    const my = ++gen;
    const W = plotW();
    const r = await (await H().api("api/lanes", { t0: Math.floor(L.t0), t1: Math.ceil(L.t1), n: 2 * W })).json();
    if (my !== gen) return;
    L.data = r;
    L.byThread = new Map(r.lanes.map((l) => [l.thread, l.stamps]));
    // the functions of the operations in view
    let g0 = Infinity, g1 = 0;
    for (const l of r.lanes) for (const s of l.stamps) { g0 = Math.min(g0, s[1]); g1 = Math.max(g1, s[1]); }
    let spans = [];
    if (g1 > g0) {
      const min = Math.floor((g1 - g0) / W / 2);
      try { spans = await (await H().api("api/flame", { t0: Math.floor(g0), t1: Math.ceil(g1), min })).json(); } catch (e) { spans = []; }
    }
    if (my !== gen) return;
    L.spans = spans.filter((s) => s[4] < 3);
    draw();
  }

  function draw() {
    const cv = $("lanes");
    const lanes = meta.lanes, W = plotW();
    const boxes = laneBoxes();
    const h = boxes.reduce((s, b) => s + b.height + 2, 0) + 4;
    if (cv.style.height !== h + "px") cv.style.height = h + "px";
    const dpr = window.devicePixelRatio || 1;
    cv.width = Math.round(cv.clientWidth * dpr); cv.height = Math.round(h * dpr);
    const g = cv.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, cv.clientWidth, h);
    // operations per pixel column, per lane
    const cols = lanes.map((ln) => {
      const S = L.byThread.get(ln.thread) || [], c = new Float64Array(W);
      for (let i = 0; i + 1 < S.length; i++) {
        const a = S[i], b = S[i + 1], ops = b[2] - a[2];
        if (ops <= 0) continue;
        const x0 = xOf(a[0]) - GUT, x1 = xOf(b[0]) - GUT;
        if (x1 < 0 || x0 >= W) continue;
        if (x1 - x0 < 1e-6) { const p = Math.floor(x0); if (p >= 0 && p < W) c[p] += ops; continue; }
        const per = ops / (x1 - x0);
        for (let p = Math.max(0, Math.floor(x0)); p < Math.min(W, Math.ceil(x1)); p++) {
          const ov = Math.min(p + 1, x1) - Math.max(p, x0);
          if (ov > 0) c[p] += per * ov;
        }
      }
      return c;
    });
    // bar scale: the 95th percentile of the busy columns (a few dense pixels would
    // flatten everything else); taller columns are clipped and drawn brighter
    const busy = [];
    for (const c of cols) for (const v of c) if (v > 0) busy.push(v);
    busy.sort((a, b) => a - b);
    const max = Math.max(1e-9, busy.length ? busy[Math.floor(0.95 * (busy.length - 1))] : 1);
    const drawn = [];
    g.font = "11px sans-serif";
    lanes.forEach((ln, k) => {
      const { top: y, height: lh, collapsed } = boxes[k], c = cols[k], bar = collapsed ? CBAR : BAR;
      g.fillStyle = k % 2 ? "#15151d" : "#101017";
      g.fillRect(0, y, cv.clientWidth, lh);
      g.fillStyle = "#ddd";
      g.fillText((collapsed ? "▸ " : "▾ ") + (ln.name || "thread") + (collapsed ? " · T" + ln.thread : ""), 6, y + 13);
      if (!collapsed) {
        g.fillStyle = "#999";
        g.fillText("tid " + ln.tid + " · T" + ln.thread, 6, y + 27);
      }
      let first = -1, last = -1;
      for (let p = 0; p < W; p++) {
        if (c[p] <= 0) continue;
        if (first < 0) first = p;
        last = p;
        const hh = Math.max(1, Math.min(1, c[p] / max) * bar);
        g.fillStyle = c[p] > max ? "#8fe0b0" : "#4fa07a";
        g.fillRect(GUT + p, y + (collapsed ? lh - 2 : bar) - hh, 1, hh);
      }
      // the thread's active time: from the first stamp after which it did operations
      // to the stamp that ends its last such segment
      const S = L.byThread.get(ln.thread) || [];
      let a0 = null, a1 = null;
      for (let i = 0; i + 1 < S.length; i++) if (S[i + 1][2] > S[i][2]) { if (a0 === null) a0 = S[i][0]; a1 = S[i + 1][0]; }
      drawn.push({ thread: ln.thread, tid: ln.tid, name: ln.name, top: y, height: lh, collapsed, x0: first < 0 ? null : GUT + first, x1: last < 0 ? null : GUT + last + 1, active: a0 === null ? null : [a0, a1], ops: c.reduce((s, v) => s + v, 0) });
    });
    const laneOf = new Map(lanes.map((ln, k) => [ln.thread, k]));
    const names = new Set();
    for (const [s, e, f, th, d] of L.spans) {
      const k = laneOf.get(th), S = L.byThread.get(th);
      if (k === undefined || !S || !S.length || boxes[k].collapsed) continue;
      const x0 = Math.max(GUT, xOf(interp(S, 1, s, 0))), x1 = Math.min(GUT + W, xOf(interp(S, 1, e, 0)));
      if (x1 < GUT || x0 > GUT + W) continue;
      g.fillStyle = H().funcColor(f);
      g.fillRect(x0, boxes[k].top + BAR + 2 + d * FR, Math.max(1, x1 - x0), FR - 1);
      names.add(meta.functions[f]);
    }
    const band = (a, b, colour) => { g.fillStyle = colour; g.fillRect(Math.min(a, b), 0, Math.abs(b - a), h); };
    if (L.sel) band(xOf(L.sel.t0), xOf(L.sel.t1), "rgba(255,255,255,0.15)");
    if (L.drag && L.drag.moved) band(L.drag.x0, L.drag.x, "rgba(255,255,255,0.2)");
    drawAxis(W);
    Object.assign(H().lanes, { drawn, draws: H().lanes.draws + 1, window: [L.t0, L.t1], functions: [...names].sort() });
    cv.dataset.lanes = lanes.map((l) => l.name + " " + l.tid).join(",");
  }

  function drawAxis(W) {
    const ax = $("laxis");
    ax.replaceChildren();
    for (let k = 0; k <= 6; k++) {
      const s = document.createElement("span");
      const x = GUT + (k / 6) * W;
      s.style.left = Math.min(GUT + W - 80, x) + "px";
      s.textContent = fmtT(tOf(x));
      ax.appendChild(s);
    }
  }

  function hover(e) {
    const tip = $("tip"), k = laneAt(e.offsetY), ln = meta.lanes[k];
    if (ln && e.offsetX < GUT) {
      tip.hidden = false;
      tip.textContent = (ln.name || "thread") + " (tid " + ln.tid + ", T" + ln.thread + "): click to " + (L.collapsed.has(ln.thread) ? "expand" : "collapse") + " the lane";
      tip.style.left = e.clientX + 14 + "px"; tip.style.top = e.clientY + 14 + "px";
      return;
    }
    if (!ln) { tip.hidden = true; return; }
    const t = tOf(e.offsetX), S = L.byThread.get(ln.thread) || [];
    const ns = (L.t1 - L.t0) / plotW();
    const ops = interp(S, 0, t + ns / 2, 2) - interp(S, 0, t - ns / 2, 2);
    tip.hidden = false;
    tip.textContent = (ln.name || "thread") + " (tid " + ln.tid + ", T" + ln.thread + ")\n" + fmtT(t) + (wall(t) ? "  " + wall(t) + " UTC" : "") + "\n" +
      (ops > 0 ? H().fmt(Math.round(ops)) + " memory operations in this pixel (" + (ns / 1e3).toFixed(1) + " µs)" : "no memory operations here");
    tip.style.left = e.clientX + 14 + "px"; tip.style.top = e.clientY + 14 + "px";
  }

  // A time range selects, in each thread, the operations it did then; the map and
  // the source metrics take the merged-order range that spans them all.
  async function selectTime(t0, t1) {
    let g0 = Infinity, g1 = -Infinity;
    for (const S of L.byThread.values()) {
      const a = interp(S, 0, t0, 1), b = interp(S, 0, t1, 1), oa = interp(S, 0, t0, 2), ob = interp(S, 0, t1, 2);
      if (a === null || ob - oa <= 0) continue;
      g0 = Math.min(g0, a); g1 = Math.max(g1, b);
    }
    L.sel = { t0, t1 };
    H().lanes.selection = { t0, t1, g0: null, g1: null };
    draw();
    if (!(g1 > g0)) return;
    const a = Math.floor(g0), b = Math.ceil(g1);
    H().lanes.selection = { t0, t1, g0: a, g1: b };
    H().st.t0 = a; H().st.t1 = Math.max(b, a + 1);
    await H().setRange(a, b);
  }

  // Collapses or expands thread `t`'s lane; the set is kept in the URL (`cl`).
  function toggleLane(t, on) {
    const c = on === undefined ? !L.collapsed.has(t) : on;
    if (c) L.collapsed.add(t); else L.collapsed.delete(t);
    H().lanes.collapsed = [...L.collapsed].sort((a, b) => a - b);
    draw();
    if (H().stateChanged) H().stateChanged();
    window.dispatchEvent(new Event("resize"));
  }

  function setup() {
    H().lanesToggle = toggleLane;
    H().lanes.collapsed = [];
    const cv = $("lanes");
    cv.addEventListener("mousedown", (e) => {
      if (e.offsetX >= GUT) { L.drag = { x0: e.offsetX, x: e.offsetX, moved: false }; return; }
      // the label gutter: collapse or expand the lane
      const ln = meta.lanes[laneAt(e.offsetY)];
      if (ln) toggleLane(ln.thread);
    });
    cv.addEventListener("mousemove", (e) => {
      if (L.drag) { L.drag.x = e.offsetX; if (Math.abs(L.drag.x - L.drag.x0) > 3) L.drag.moved = true; draw(); return; }
      hover(e);
    });
    cv.addEventListener("mouseleave", () => { $("tip").hidden = true; });
    window.addEventListener("mouseup", () => {
      const d = L.drag;
      if (!d) return;
      L.drag = null;
      if (d.moved) selectTime(tOf(Math.min(d.x0, d.x)), tOf(Math.max(d.x0, d.x)));
      else { L.sel = null; H().lanes.selection = null; draw(); }
    });
    cv.addEventListener("wheel", (e) => {
      e.preventDefault();
      const t = tOf(Math.max(GUT, e.offsetX)), f = e.deltaY > 0 ? 1.25 : 0.8;
      let span = Math.min(TEND - T0, Math.max(1000, (L.t1 - L.t0) * f));
      let a = t - (t - L.t0) * (span / (L.t1 - L.t0));
      a = Math.min(Math.max(T0, a), TEND - span);
      L.t0 = a; L.t1 = a + span;
      load();
    }, { passive: false });
    cv.addEventListener("dblclick", () => { L.t0 = T0; L.t1 = TEND; load(); });
  }

  wait();
})();
