// memlens view: memory map, flame chart, source browser and tables on one time axis.
// Plain JS, no build step; every request carries the page's token. Data (file, function,
// variable names) only ever reaches the page as textContent, never as HTML.
"use strict";
(function () {
  const { $, api, fmt } = window.memlensUi;
  const hex = (n) => "0x" + n.toString(16);
  // The "hide library frames" filter's test (common.js).
  const isLibFile = window.memlensUi.isLibrary;
  let ROOT = ""; // the longest common directory of the program's own source files, with "/"
  // "a/b/../c" shown as "a/c" (gcc names its C++ headers so).
  const tidy = (f) => { const o = []; for (const p of f.split("/")) { if (p === ".." && o.length > 1 && o[o.length - 1] !== "..") o.pop(); else if (p !== ".") o.push(p); } return o.join("/"); };
  const rel = (f) => (f && ROOT && f.startsWith(ROOT) ? f.slice(ROOT.length) : tidy(f || ""));
  // Scrolls `el` to the middle of its scrolling box `box` only (scrollIntoView would
  // also scroll the page and hide the header).
  const centerIn = (box, el) => {
    const b = box.getBoundingClientRect(), e = el.getBoundingClientRect();
    box.scrollTop = Math.max(0, box.scrollTop + e.top - b.top - (box.clientHeight - e.height) / 2);
  };
  function findRoot(files) {
    const own = files.filter((f) => !isLibFile(f) && f.startsWith("/"));
    if (!own.length) return "";
    let dir = own[0].slice(0, own[0].lastIndexOf("/") + 1);
    for (const f of own) while (dir && !f.startsWith(dir)) dir = dir.slice(0, dir.lastIndexOf("/", dir.length - 2) + 1);
    return dir;
  }
  // A function's source file: its entry's (indexes since function_files), else the one
  // where most of its operations are.
  const funcFile = new Map();
  function buildFuncFiles() {
    const ff = Array.isArray(meta.function_files) ? meta.function_files : [];
    meta.functions.forEach((f, k) => { if (typeof ff[k] === "string" && ff[k]) funcFile.set(f, ff[k]); });
    const best = new Map(), fromEntry = new Set(funcFile.keys());
    for (const r of meta.source) {
      const n = r.loads + r.stores, b = best.get(r.function);
      if (fromEntry.has(r.function)) continue;
      if (b === undefined || n > b) { best.set(r.function, n); funcFile.set(r.function, r.file); }
    }
  }
  const isLibFunc = (name) => isLibFile(funcFile.get(name));
  // Each thread's frames without the library ones; their callees move up into their place.
  function collapseLib(spans) {
    const out = [], stacks = new Map();
    const sorted = spans.slice().sort((a, b) => a[3] - b[3] || a[0] - b[0] || a[4] - b[4]);
    for (const s of sorted) {
      if (!stacks.has(s[3])) stacks.set(s[3], []);
      const stk = stacks.get(s[3]);
      while (stk.length && stk[stk.length - 1].d >= s[4]) stk.pop();
      const lib = isLibFunc(meta.functions[s[2]]);
      const hidden = stk.length ? stk[stk.length - 1].hidden : 0;
      stk.push({ d: s[4], hidden: hidden + (lib ? 1 : 0) });
      if (!lib) out.push([s[0], s[1], s[2], s[3], s[4] - hidden]);
    }
    return out;
  }

  let meta = null;
  // The page's state changed: nav.js writes it to the URL.
  const changed = () => { if (hooks.stateChanged) hooks.stateChanged(); };
  // The shared state: one time axis, one selection.
  const st = {
    t0: 0, t1: 1, ymode: "ws", click: "line",
    sel: null, // {kind:"line", addr} | {kind:"instant", bucket} | {kind:"src", file, line, pcs:Set} | {kind:"var", variable}
    range: null, // {t0, t1}: a flame frame or a dragged range filters the source metrics
    tiles: null, // the tiles on screen
    spans: [], allSpans: [], hideLib: false, flameHi: -1,
    file: null,
  };
  const hooks = {
    ready: false, rowsDrawn: 0, linesDrawn: 0, highlighted: 0, level: -1, firstPaintMs: 0, lastRedrawMs: 0, lastPreviewMs: 0, previewLevel: -1, previews: 0, draws: 0,
    lastLoadMs: 0, lastMapMs: 0, lastFlameMs: 0,
  };
  window.memlens = hooks;

  // ---------- tiles ----------
  // /api/tiles?fields=draw answers with one little-endian column per field (row, line
  // rank, bytes used, age, flags): the page views them as typed arrays, no decoding.
  // The hover/selection fields (fields=detail) come per chunk when first needed.
  function header(u32) {
    const nb = u32[0], bnum = u32.subarray(1, 1 + nb), starts = u32.subarray(1 + nb, 2 + 2 * nb);
    const buckets = [], byBucket = new Map();
    for (let i = 0; i < nb; i++) {
      const bk = { b: bnum[i], start: starts[i], n: starts[i + 1] - starts[i] };
      buckets.push(bk); byBucket.set(bk.b, bk);
    }
    return { buckets, byBucket, n: starts[nb], words: 2 + 2 * nb };
  }
  function parseDraw(buf, level, bsize) {
    const u32 = new Uint32Array(buf);
    const h = header(u32), n = h.n;
    let o = h.words;
    const T = { level, bsize, buckets: h.buckets, byBucket: h.byBucket, n, det: null, detP: null };
    T.row = u32.subarray(o, o + n); o += n;
    T.rank = u32.subarray(o, o + n); o += n;
    const b = o * 4;
    T.used = new Uint8Array(buf, b, n); T.age = new Uint8Array(buf, b + n, n); T.flags = new Uint8Array(buf, b + 2 * n, n);
    return T;
  }
  function parseDetail(buf) {
    const u32 = new Uint32Array(buf);
    const h = header(u32), n = h.n;
    let o = h.words;
    const lo = u32.subarray(o, o + n), hi = u32.subarray(o + n, o + 2 * n);
    const d = { pc: u32.subarray(o + 2 * n, o + 3 * n), vr: u32.subarray(o + 3 * n, o + 4 * n) };
    const b = (o + 4 * n) * 4;
    d.loads = new Uint16Array(buf, b, n); d.stores = new Uint16Array(buf, b + 2 * n, n);
    d.thread = new Uint8Array(buf, b + 4 * n, n); d.off = new Uint8Array(buf, b + 5 * n, n);
    d.addr = (i) => lo[i] + hi[i] * 4294967296;
    return d;
  }

  function pickLevel(width, t0, t1) {
    // The finest level that shows the range in at most one bucket per pixel.
    const span = (t1 === undefined ? st.t1 : t1) - (t0 === undefined ? st.t0 : t0);
    for (let l = 0; l < meta.levels.length; l++) {
      if (span / meta.levels[l].bucket <= width) return l;
    }
    return meta.levels.length - 1;
  }

  // Tiles come in chunks of 256 buckets, cached: a pan fetches only the new chunks.
  const CHUNK = 256, MAX_CHUNKS = 64;
  const chunkCache = new Map();
  function chunk(level, c, mode, touch) {
    const key = level + ":" + c + ":" + mode;
    let p = chunkCache.get(key);
    if (!p) {
      const bs = meta.levels[level].bucket;
      const b0 = c * CHUNK, b1 = Math.min(meta.levels[level].buckets, b0 + CHUNK);
      p = api("api/tiles", { level, b0, b1, mode, fields: "draw" }).then((r) => r.arrayBuffer()).then((buf) => {
        const T = parseDraw(buf, level, bs);
        T.query = { level, b0, b1, mode };
        p.T = T; // settled: a preview may draw it without waiting
        return T;
      });
      p.catch(() => chunkCache.delete(key));
    } else if (touch === false) {
      return p;
    } else {
      chunkCache.delete(key);
    }
    chunkCache.set(key, p); // most recently used last
    while (chunkCache.size > MAX_CHUNKS) chunkCache.delete(chunkCache.keys().next().value);
    return p;
  }
  function details(T) {
    if (!T.detP) {
      T.detP = api("api/tiles", Object.assign({ fields: "detail" }, T.query)).then((r) => r.arrayBuffer()).then((buf) => { T.det = parseDetail(buf); return T.det; });
      T.detP.catch(() => { T.detP = null; });
    }
    return T.detP;
  }
  // Details of every chunk on screen (hover, source and variable selection need them).
  function detailsOnScreen() {
    return st.tiles ? Promise.all(st.tiles.chunks.map(details)) : Promise.resolve([]);
  }

  function chunksFor(level, t0, t1) {
    const bs = meta.levels[level].bucket;
    const b0 = Math.max(0, Math.floor(t0 / bs)), b1 = Math.min(meta.levels[level].buckets, Math.ceil(t1 / bs));
    const cs = [];
    for (let c = Math.floor(b0 / CHUNK); c * CHUNK < Math.max(b1, b0 + 1); c++) cs.push(c);
    return { b0, b1, cs };
  }

  // Chunks of `level` covering [t0, t1) that have arrived, or null if one is missing.
  function cachedAt(level, t0, t1, mode) {
    const { b0, b1, cs } = chunksFor(level, t0, t1);
    const chunks = [];
    for (const c of cs) {
      const p = chunkCache.get(level + ":" + c + ":" + mode);
      if (!p || !p.T) return null;
      chunks.push(p.T);
    }
    return { key: level + ":" + b0 + ":" + b1 + ":" + mode, level, bsize: meta.levels[level].bucket, chunks };
  }
  // For a view whose tiles are not all here: the finest coarser level that is (a zoom
  // in has the level it came from; a zoom out or a jump often has the prefetched
  // coarser one). Drawn at once, then replaced when the right tiles land.
  function previewTiles() {
    const level = pickLevel($("map").clientWidth || 800);
    if (cachedAt(level, st.t0, st.t1, st.ymode)) return null;
    for (let l = level + 1; l < meta.levels.length; l++) {
      const T = cachedAt(l, st.t0, st.t1, st.ymode);
      if (T) { T.preview = true; return T; }
    }
    return null;
  }

  let fetchSeq = 0;
  async function loadTiles() {
    const cv = $("map");
    const level = pickLevel(cv.clientWidth || 800);
    const { b0, b1, cs } = chunksFor(level, st.t0, st.t1);
    const key = level + ":" + b0 + ":" + b1 + ":" + st.ymode;
    if (st.tiles && st.tiles.key === key) return;
    const seq = ++fetchSeq;
    const mode = st.ymode;
    const chunks = await Promise.all(cs.map((c) => chunk(level, c, mode)));
    if (seq !== fetchSeq) return;
    st.tiles = { key, level, bsize: meta.levels[level].bucket, chunks };
  }

  // While the user looks, fetch what the next pan or zoom needs: the chunks either side,
  // the finer level under the middle of the view (a zoom in) and the coarser level (a zoom
  // out); then the details of the chunks on screen. A new redraw cancels the rest.
  let prefetchTimer = null, prefetchGen = 0, idleWaiters = [];
  const PREFETCH_DELAY = 150;
  function schedulePrefetch() {
    clearTimeout(prefetchTimer);
    const gen = ++prefetchGen;
    prefetchTimer = setTimeout(() => prefetch(gen), PREFETCH_DELAY);
  }
  async function prefetch(gen) {
    const w = $("map").clientWidth || 800, mode = st.ymode, span = st.t1 - st.t0;
    const level = pickLevel(w);
    const jobs = [];
    const { cs } = chunksFor(level, st.t0, st.t1);
    const nc = Math.ceil(meta.levels[level].buckets / CHUNK);
    for (const c of [cs[0] - 1, cs[cs.length - 1] + 1]) if (c >= 0 && c < nc) jobs.push([level, c]);
    const mid = (st.t0 + st.t1) / 2;
    const fine = pickLevel(w, mid - span / 8, mid + span / 8);
    if (fine !== level) for (const c of chunksFor(fine, mid - span / 8, mid + span / 8).cs) jobs.push([fine, c]);
    const coarse = Math.min(meta.levels.length - 1, level + 1);
    if (coarse !== level) for (const c of chunksFor(coarse, Math.max(0, mid - 2 * span), mid + 2 * span).cs) jobs.push([coarse, c]);
    for (const [l, c] of jobs.slice(0, 12)) {
      if (gen !== prefetchGen) return;
      try { await chunk(l, c, mode, false); } catch (e) { /* a later redraw retries */ }
    }
    if (gen !== prefetchGen) return;
    try { await detailsOnScreen(); } catch (e) { /* hover fetches again */ }
    if (gen !== prefetchGen) return;
    const ws = idleWaiters; idleWaiters = [];
    ws.forEach((f) => f());
  }
  // Resolves once the prefetch after the last redraw is done (tests and bench/perf.py).
  hooks.idle = () => new Promise((res) => { idleWaiters.push(res); schedulePrefetch(); }).then(() => pendingSelect).then(() => hooks.highlighted);

  async function loadSpans() {
    const w = $("flame").clientWidth || 800;
    const min = Math.floor((st.t1 - st.t0) / w / 2);
    const r = await (await api("api/flame", { t0: Math.floor(st.t0), t1: Math.ceil(st.t1), min })).json();
    st.allSpans = r;
    st.spans = st.hideLib ? collapseLib(r) : r;
  }
  function setHideLib(on) {
    st.hideLib = !!on;
    $("hidelib").checked = st.hideLib;
    st.spans = st.hideLib ? collapseLib(st.allSpans) : st.allSpans;
    drawFlame();
    changed();
    const ct = hooks.callTree;
    return ct && ct.shown ? ct.show(ct.mode()) : Promise.resolve();
  }

  // ---------- geometry ----------
  function rowCount() {
    return st.ymode === "ws" ? Math.max(1, meta.max_rows) : Math.max(1, meta.distinct_lines);
  }
  function xOf(t) { const w = $("map").clientWidth; return ((t - st.t0) / (st.t1 - st.t0)) * w; }
  function tOf(x) { const w = $("map").clientWidth; return st.t0 + (x / w) * (st.t1 - st.t0); }
  function yOfRow(r) { return (r + 0.5) * ($("map").clientHeight / rowCount()); }

  // Opaque colours over the background, packed as canvas pixels (RGBA bytes, little-endian).
  function hslRgb(h, sat, l) {
    const a = sat * Math.min(l, 1 - l);
    const f = (n) => { const k = (n + h / 30) % 12; return l - a * Math.max(-1, Math.min(k - 3, 9 - k, 1)); };
    return [f(0), f(8), f(4)];
  }
  const BG = [12, 12, 16];
  const PALETTE = new Uint32Array(65 * 2 * 16);
  for (let u = 0; u <= 64; u++) for (let t = 0; t < 2; t++) for (let a = 0; a < 16; a++) {
    const [r, g, b] = hslRgb(280 - (u / 64) * 160, 0.8, t ? 0.55 : 0.32);
    const al = t ? 1 : 0.06 + 0.4 * (a / 15);
    const mix = (c, k) => Math.round(c * 255 * al + BG[k] * (1 - al));
    PALETTE[(u * 2 + t) * 16 + a] = (255 << 24) | (mix(b, 2) << 16) | (mix(g, 1) << 8) | mix(r, 0);
  }
  const STORE = (255 << 24) | (0x00 << 16) | (0xb0 << 8) | 0xff;
  const EMPTY = (255 << 24) | (BG[2] << 16) | (BG[1] << 8) | BG[0];

  function isHighlighted(i, T, bk) {
    const s = st.sel;
    if (!s) return false;
    if (s.kind === "line" && s.rank !== undefined) return T.rank[i] === s.rank;
    if (s.kind === "instant") return bk.b === s.bucket && T.level === s.level && (T.flags[i] & 1);
    const d = T.det; // the other selections need the chunk's details (select() fetches them)
    if (!d) return false;
    if (s.kind === "line") return d.addr(i) === s.addr;
    if (s.kind === "src") return (T.flags[i] & 1) && s.pcs.has(d.pc[i]);
    if (s.kind === "var") return meta.vars[d.vr[i]] && meta.vars[d.vr[i]][1] === s.variable;
    return false;
  }

  // ---------- drawing ----------
  function setupCanvas(cv) {
    const dpr = window.devicePixelRatio || 1;
    const w = cv.clientWidth, h = cv.clientHeight;
    if (cv.width !== Math.round(w * dpr) || cv.height !== Math.round(h * dpr)) {
      cv.width = Math.round(w * dpr); cv.height = Math.round(h * dpr);
    }
    const g = cv.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, h);
    return [g, w, h];
  }

  let lineStamp = null, stampGen = 0;
  function drawMap() {
    const cv = $("map");
    const [g, w, h] = setupCanvas(cv);
    const TS = st.tiles;
    if (!TS) return;
    const rows = rowCount(), rh = h / rows;
    // Rows are small integers: a mark array is much cheaper than a Set per cell.
    const rowMark = new Uint8Array(rows), rowsOver = new Set();
    // Distinct lines: a stamp per line rank, reused across redraws.
    if (!lineStamp || lineStamp.length < meta.distinct_lines) lineStamp = new Uint32Array(meta.distinct_lines);
    const gen = ++stampGen;
    let rowsSeen = 0, linesSeen = 0;
    let hl = 0;
    const bw = (TS.bsize / (st.t1 - st.t0)) * w;
    const hlCells = [];
    // Cells go straight into a pixel buffer: one write per pixel, no path per cell.
    const W = cv.width, H = cv.height, sx = W / w, sy = H / h;
    const img = g.createImageData(W, H);
    const px = new Uint32Array(img.data.buffer);
    px.fill(EMPTY);
    for (const T of TS.chunks) for (const bk of T.buckets) {
      if (bk.b * T.bsize >= st.t1 || (bk.b + 1) * T.bsize <= st.t0) continue;
      const x = xOf(bk.b * T.bsize);
      const X0 = Math.max(0, Math.floor(x * sx)), X1 = Math.min(W, Math.max(X0 + 1, Math.floor((x + bw) * sx)));
      for (let k = 0; k < bk.n; k++) {
        const i = bk.start + k;
        const y = T.row[i] * rh;
        const Y0 = Math.min(H - 1, Math.floor(y * sy)), Y1 = Math.min(H, Math.max(Y0 + 1, Math.floor((y + rh) * sy)));
        const touched = T.flags[i] & 1;
        const c = PALETTE[(T.used[i] * 2 + touched) * 16 + (T.age[i] >> 4)];
        const ys = (T.flags[i] & 3) === 3 ? Y0 + Math.max(1, Math.floor((Y1 - Y0) / 3)) : Y0;
        for (let Y = Y0; Y < Y1; Y++) {
          const col = Y < ys ? STORE : c;
          const base = Y * W;
          for (let X = X0; X < X1; X++) px[base + X] = col;
        }
        const r = T.row[i];
        if (r < rows) { if (!rowMark[r]) { rowMark[r] = 1; rowsSeen++; } } else if (!rowsOver.has(r)) { rowsOver.add(r); rowsSeen++; }
        const lr = T.rank[i];
        if (lineStamp[lr] !== gen) { lineStamp[lr] = gen; linesSeen++; }
        if (st.sel && isHighlighted(i, T, bk)) { hl++; if (hlCells.length < 50000) hlCells.push([x, y]); }
      }
    }
    g.putImageData(img, 0, 0);
    g.strokeStyle = "#fff"; g.lineWidth = 1;
    for (const [x, y] of hlCells) g.strokeRect(x + 0.5, y + 0.5, Math.max(bw, 2) - 1, Math.max(rh, 2) - 1);
    if (st.ymode === "addr") {
      // Bands: one per variable (consecutive lines of one variable).
      meta.bands.forEach((bd, k) => {
        const v = meta.vars[bd[2]];
        g.fillStyle = k % 2 ? "rgba(80,120,255,0.10)" : "rgba(80,120,255,0.05)";
        g.fillRect(0, bd[0] * rh, w, Math.max(1, (bd[1] - bd[0]) * rh));
        if ((bd[1] - bd[0]) * rh >= 10) {
          g.fillStyle = "#8af"; g.font = "10px sans-serif";
          g.fillText((v && v[1]) || "?", 2, bd[0] * rh + 10);
        }
      });
    }
    if (st.range) {
      g.fillStyle = "rgba(255,255,255,0.08)";
      const a = xOf(st.range.t0), b = xOf(st.range.t1);
      g.fillRect(a, 0, Math.max(1, b - a), h);
    }
    hooks.rowsDrawn = rowsSeen; hooks.linesDrawn = linesSeen; hooks.highlighted = hl; hooks.level = TS.level;
    cv.dataset.rowsDrawn = rowsSeen; cv.dataset.linesDrawn = linesSeen; cv.dataset.highlighted = hl; cv.dataset.level = TS.level;
    drawAxis(w);
  }

  function drawAxis(w) {
    const ax = $("axis");
    ax.replaceChildren();
    for (let k = 0; k <= 8; k++) {
      const s = document.createElement("span");
      s.style.left = Math.min(w - 60, (k / 8) * w) + "px";
      s.textContent = fmt(Math.round(tOf((k / 8) * w)));
      ax.appendChild(s);
    }
  }

  const funcColor = (f) => "hsl(" + ((f * 67) % 360) + ",45%,42%)";
  // One lane per thread, max_depth + 1 frames high; the canvas grows to show every lane
  // (up to 18 % of the window, at least 140 px, at most 480: the page fits the window),
  // then the frames get thinner.
  let LANE = 15;
  function laneTop(k) { return k * ((meta.max_depth + 1) * LANE + 6); }
  function fitLanes(cv) {
    const n = Math.max(1, meta.threads.length), need = n * ((meta.max_depth + 1) * 15 + 6);
    const cap = Math.max(140, Math.min(480, Math.round(0.18 * window.innerHeight)));
    const h = Math.max(140, Math.min(cap, need));
    if (cv.style.height !== h + "px") cv.style.height = h + "px";
    LANE = need <= h ? 15 : Math.max(2, (h / n - 6) / (meta.max_depth + 1));
  }
  function drawFlame() {
    const cv = $("flame");
    fitLanes(cv);
    const [g, w] = setupCanvas(cv);
    const threads = meta.threads.map((t) => t[0]);
    const lanes = new Map(threads.map((t, k) => [t, laneTop(k)]));
    const names = new Set(), perLane = new Map();
    g.font = "11px sans-serif";
    for (const [s, e, f, th, d] of st.spans) {
      const x0 = Math.max(0, xOf(s)), x1 = Math.min(w, xOf(e));
      const y = (lanes.get(th) || 0) + d * LANE;
      const ww = Math.max(1, x1 - x0);
      g.fillStyle = st.range && s === st.range.t0 && e === st.range.t1 ? "#a86" : funcColor(f);
      g.fillRect(x0, y, ww, LANE - 1);
      if (f === st.flameHi) { g.strokeStyle = "#fff"; g.lineWidth = 2; g.strokeRect(x0 + 1, y + 1, Math.max(1, ww - 2), LANE - 3); }
      names.add(meta.functions[f]);
      if (!perLane.has(th)) perLane.set(th, new Set());
      perLane.get(th).add(meta.functions[f]);
      if (ww > 30 && LANE >= 10) {
        g.fillStyle = "#fff";
        g.save(); g.beginPath(); g.rect(x0, y, ww, LANE); g.clip();
        g.fillText(meta.functions[f], x0 + 2, y + 11);
        g.restore();
      }
    }
    if (drag && drag.flame && drag.moved) {
      g.fillStyle = "rgba(255,255,255,0.2)";
      g.fillRect(Math.min(drag.x0, drag.x), 0, Math.abs(drag.x - drag.x0), cv.clientHeight);
    }
    hooks._flameNames = [...names].sort();
    // Per thread: the functions drawn in its lane and where the lane is.
    hooks._flameLanes = threads.map((t, k) => ({ thread: t, top: lanes.get(t), height: (meta.max_depth + 1) * LANE, functions: [...(perLane.get(t) || [])].sort() }));
    cv.dataset.functions = hooks._flameNames.join(",");
  }

  let pending = null;
  async function redraw() {
    const t = performance.now();
    const my = (pending = {});
    const pv = previewTiles();
    const loads = Promise.all([loadTiles(), loadSpans()]);
    hooks.lastPreviewMs = 0;
    if (pv) {
      // coarse frame first (the map and the flame chart on the new time axis)
      st.tiles = pv;
      drawMap();
      drawFlame();
      hooks.lastPreviewMs = performance.now() - t; hooks.previewLevel = pv.level; hooks.previews++;
    }
    await loads;
    if (my !== pending) return;
    // Where a redraw's time goes (bench/perf.py prints it): fetch + decode, map pixels, flame.
    const tl = performance.now();
    drawMap();
    const tm = performance.now();
    drawFlame();
    const tf = performance.now();
    hooks.lastLoadMs = tl - t; hooks.lastMapMs = tm - tl; hooks.lastFlameMs = tf - tm;
    if (needsDetails(st.sel)) select(st.sel);
    schedulePrefetch();
    hooks.lastRedrawMs = tf - t; hooks.draws++;
    changed();
    // What the user is looking at, in their terms (the index level and redraw time
    // are in window.memlens for tests and bench/perf.py).
    const on = Math.max(0, Math.round(st.t0)), off = Math.min(meta.ops, Math.round(st.t1));
    $("status").textContent = "showing operations " + fmt(on) + " .. " + fmt(off) + " of " + fmt(meta.ops) +
      (st.range ? " · selected: " + fmt(Math.round(st.range.t0)) + " .. " + fmt(Math.round(st.range.t1)) + " (the source and tables count these)" : "");
    $("status").title = $("status").textContent; // cut to the header's width
  }

  // ---------- hover / click ----------
  function cellAt(x, y) {
    if (!st.tiles) return null;
    const b = Math.floor(tOf(x) / st.tiles.bsize);
    const T = st.tiles.chunks.find((c) => c.byBucket.has(b));
    if (!T) return null;
    const bk = T.byBucket.get(b);
    const row = Math.floor(y / ($("map").clientHeight / rowCount()));
    for (let k = 0; k < bk.n; k++) {
      if (T.row[bk.start + k] === row) return { i: bk.start + k, bk, T };
    }
    return null;
  }

  function cellInfo(c) {
    const { i, bk, T } = c;
    const touched = (T.flags[i] & 1) === 1;
    const info = { bucket: bk.b, ops: [bk.b * T.bsize, (bk.b + 1) * T.bsize], row: T.row[i], touched, bytes_used: T.used[i], age: T.age[i] };
    const d = T.det;
    if (!d) return Object.assign(info, { pending: true });
    const v = meta.vars[d.vr[i]] || ["", ""];
    const p = touched ? meta.pcs[d.pc[i]] : null;
    const a = d.addr(i);
    return Object.assign(info, {
      address: hex(a + (touched ? d.off[i] : 0)), line_address: hex(a), variable: v[0], site: v[1], loads: d.loads[i], stores: d.stores[i],
      thread: d.thread[i] === 255 ? null : d.thread[i], function: p ? p[0] : null, file: p ? p[1] : null, line: p ? p[2] : null,
    });
  }

  function showTip(info, cx, cy) {
    const tip = $("tip");
    if (!info) { tip.hidden = true; return; }
    tip.hidden = false;
    if (info.pending) { tip.textContent = "…"; tip.style.left = cx + 14 + "px"; tip.style.top = cy + 14 + "px"; return; }
    tip.textContent =
      info.address + " (line " + info.line_address + ")\n" +
      (info.variable ? info.variable + (info.site && info.site !== info.variable ? "  [" + info.site + "]" : "") : "(unnamed)") + "\n" +
      (info.touched ? rel(info.file) + ":" + info.line + " " + info.function + "\n" + info.loads + " loads, " + info.stores + " stores" : "not touched here (age " + info.age + "/255)") + "\n" +
      "bytes used " + info.bytes_used + "/64, thread " + info.thread + ", ops " + fmt(info.ops[0]) + ".." + fmt(info.ops[1]);
    tip.style.left = cx + 14 + "px"; tip.style.top = cy + 14 + "px";
    tip.dataset.file = info.file || ""; tip.dataset.line = info.line || "";
  }

  let lastHover = null;
  hooks.hoverAt = function (x, y) {
    const c = cellAt(x, y);
    const info = c ? cellInfo(c) : null;
    const r = $("map").getBoundingClientRect();
    showTip(info, r.left + x, r.top + y);
    const me = (lastHover = [x, y]);
    // Details not here yet: fetch this chunk's, then show the tip if the mouse stayed.
    if (info && info.pending) details(c.T).then(() => { if (lastHover === me) hooks.hoverAt(x, y); });
    return info;
  };
  hooks.xOf = (t) => xOf(t);
  hooks.yOfRow = (r) => yOfRow(r);
  hooks.flameFunctions = () => hooks._flameNames || [];
  hooks.flameLanes = () => ({ lanes: hooks._flameLanes || [], canvasHeight: $("flame").clientHeight });
  hooks.view = () => ({ t0: st.t0, t1: st.t1, ymode: st.ymode });
  // Tests: drop the cached chunks of levels finer than `level` (a zoom then has to fetch).
  hooks.forgetFinerThan = (level) => {
    for (const k of [...chunkCache.keys()]) if (+k.split(":")[0] < level) chunkCache.delete(k);
  };
  hooks.setView = async (t0, t1) => { st.t0 = t0; st.t1 = t1; await redraw(); return hooks.lastRedrawMs; };
  hooks.setYMode = async (m) => { st.ymode = m; $("ymode").value = m; await redraw(); return hooks.rowsDrawn; };

  // A selection by source line, variable or address needs the details of the chunks on
  // screen: it draws at once and again when they are here (the answer is then a promise).
  const needsDetails = (sel) => sel && (sel.kind === "src" || sel.kind === "var" || (sel.kind === "line" && sel.rank === undefined));
  let pendingSelect = null;
  function select(sel) {
    st.sel = sel;
    drawMap();
    if (needsDetails(sel) && st.tiles && st.tiles.chunks.some((T) => !T.det)) {
      const tiles = st.tiles;
      pendingSelect = detailsOnScreen().then(() => { if (st.sel === sel && st.tiles === tiles) drawMap(); return hooks.highlighted; });
      return pendingSelect;
    }
    return hooks.highlighted;
  }
  hooks.selectSourceLine = function (file, line) {
    const pcs = new Set();
    meta.pcs.forEach((p, k) => { if (p[1] === file && p[2] === line) pcs.add(k); });
    document.querySelectorAll(".srcline.sel, .node.sel").forEach((e) => e.classList.remove("sel"));
    document.querySelectorAll('[data-file="' + CSS.escape(file) + '"][data-line="' + line + '"]').forEach((e) => e.classList.add("sel"));
    st.file = file; st.line = line;
    changed();
    return select({ kind: "src", file, line, pcs });
  };
  hooks.selectVariable = (variable) => select({ kind: "var", variable });
  hooks.selectAddress = (addr) => select({ kind: "line", addr });

  // ---------- interaction ----------
  let drag = null;
  function setupInteraction() {
    const map = $("map"), flame = $("flame");
    map.addEventListener("mousemove", (e) => {
      if (drag && !drag.flame) {
        const dx = e.offsetX - drag.x;
        if (Math.abs(e.offsetX - drag.x0) > 3) drag.moved = true;
        const dt = (dx / map.clientWidth) * (st.t1 - st.t0);
        drag.x = e.offsetX;
        pan(-dt);
        return;
      }
      hooks.hoverAt(e.offsetX, e.offsetY);
    });
    map.addEventListener("mouseleave", () => showTip(null));
    map.addEventListener("mousedown", (e) => { drag = { x0: e.offsetX, x: e.offsetX, moved: false }; });
    window.addEventListener("mouseup", (e) => {
      if (!drag) return;
      const d = drag; drag = null;
      if (d.flame) {
        if (d.moved) {
          const a = tOf(Math.min(d.x0, d.x)), b = tOf(Math.max(d.x0, d.x));
          setRange(Math.floor(a), Math.ceil(b));
        } else {
          flameClick(d.x0, d.y0);
        }
        return;
      }
      if (!d.moved && e.target === map) mapClick(e.offsetX, e.offsetY);
    });
    map.addEventListener("dblclick", () => { st.t0 = 0; st.t1 = Math.max(1, meta.ops); redraw(); });
    const wheel = (e) => { e.preventDefault(); zoom(e.deltaY > 0 ? 1.25 : 0.8, tOf(e.offsetX)); };
    map.addEventListener("wheel", wheel, { passive: false });
    flame.addEventListener("wheel", wheel, { passive: false });
    flame.addEventListener("mousedown", (e) => { drag = { flame: true, x0: e.offsetX, y0: e.offsetY, x: e.offsetX, moved: false }; });
    flame.addEventListener("mousemove", (e) => {
      if (drag && drag.flame) { drag.x = e.offsetX; if (Math.abs(drag.x - drag.x0) > 3) drag.moved = true; drawFlame(); return; }
      const s = spanAt(e.offsetX, e.offsetY);
      const tip = $("tip");
      if (!s) { tip.hidden = true; return; }
      tip.hidden = false;
      tip.textContent = meta.functions[s[2]] + "\nthread " + s[3] + ", ops " + fmt(s[0]) + ".." + fmt(s[1]) + " (" + fmt(s[1] - s[0]) + ")";
      tip.style.left = e.clientX + 14 + "px"; tip.style.top = e.clientY + 14 + "px";
    });
    flame.addEventListener("mouseleave", () => showTip(null));
    $("ymode").addEventListener("change", (e) => { st.ymode = e.target.value; redraw(); });
    $("clickmode").addEventListener("change", (e) => { st.click = e.target.value; });
    $("reset").addEventListener("click", () => { st.t0 = 0; st.t1 = Math.max(1, meta.ops); setRange(null); });
    $("clearsel").addEventListener("click", () => { st.flameHi = -1; select(null); setRange(null); });
    window.addEventListener("resize", () => redraw());
  }

  // Scales the view by f around operation t (the wheel, and the w/s keys).
  function zoom(f, t) {
    let span = Math.max(8, (st.t1 - st.t0) * f);
    span = Math.min(span, Math.max(1, meta.ops));
    st.t0 = Math.max(0, t - (t - st.t0) * (span / (st.t1 - st.t0)));
    st.t1 = Math.min(meta.ops, st.t0 + span);
    st.t0 = Math.max(0, st.t1 - span);
    return redraw();
  }
  function pan(dt) {
    const span = st.t1 - st.t0;
    st.t0 = Math.min(Math.max(0, st.t0 + dt), Math.max(0, meta.ops - span));
    st.t1 = st.t0 + span;
    return redraw();
  }

  function mapClick(x, y) {
    const c = cellAt(x, y);
    if (!c) return select(null);
    if (st.click === "instant" || (window.event && window.event.shiftKey)) {
      return select({ kind: "instant", bucket: c.bk.b, level: c.T.level });
    }
    return select({ kind: "line", rank: c.T.rank[c.i] });
  }

  function spanAt(x, y) {
    const threads = meta.threads.map((t) => t[0]);
    for (const s of st.spans) {
      const k = threads.indexOf(s[3]);
      const y0 = laneTop(k) + s[4] * LANE;
      if (y >= y0 && y < y0 + LANE && x >= xOf(s[0]) - 1 && x <= xOf(s[1]) + 1) return s;
    }
    return null;
  }

  function flameClick(x, y) {
    const s = spanAt(x, y);
    if (!s) return;
    // A frame selects its time range: the map zooms to it and the source metrics follow.
    const pad = Math.max(1, (s[1] - s[0]) * 0.05);
    st.t0 = Math.max(0, s[0] - pad); st.t1 = Math.min(meta.ops, s[1] + pad);
    setRange(s[0], s[1]);
  }
  hooks.selectFrame = (name) => {
    const s = st.spans.find((x) => meta.functions[x[2]] === name);
    if (!s) return false;
    st.t0 = s[0]; st.t1 = Math.max(s[1], s[0] + 1);
    return setRange(s[0], s[1]).then(() => true);
  };

  async function setRange(t0, t1) {
    if (t0 === null || t0 === undefined) {
      st.range = null;
      rangeMetrics = null;
    } else {
      st.range = { t0, t1 };
      const r = await (await api("api/range", { t0, t1 })).json();
      rangeMetrics = new Map();
      // [pc, loads, stores, bytes, shared, misses, mem]; old indexes give loads and stores only.
      const F = ["loads", "stores", "bytes", "shared", "misses", "mem_misses"];
      for (const row of r.pcs) {
        const p = meta.pcs[row[0]];
        const key = p[1] + ":" + p[2];
        let m = rangeMetrics.get(key);
        if (!m) { m = {}; F.forEach((f, k) => { m[f] = k + 1 < row.length ? 0 : NaN; }); rangeMetrics.set(key, m); }
        F.forEach((f, k) => { if (k + 1 < row.length) m[f] += row[k + 1]; });
      }
      hooks.rangeWindow = [r.t0, r.t1];
    }
    buildTree();
    if (st.file) showFile(st.file);
    // the heap chart and the call tree follow the selection
    const follow = st.view === "heap" && hooks.heapView ? hooks.heapView.show() : st.view === "calls" && hooks.callTree && hooks.callTree.shown ? hooks.callTree.show(hooks.callTree.mode()) : null;
    await redraw();
    // a range's tree is computed by the server: its failure is shown, the rest stays
    if (follow) await follow.catch((e) => { $("status").textContent = "error: " + e.message; });
  }
  hooks.setRange = setRange;

  // ---------- source browser ----------
  let rangeMetrics = null;
  const COLS = () => (meta.cachesim ? ["loads", "stores", "bytes", "misses", "miss%", "shared"] : ["loads", "stores", "bytes", "shared"]);
  function metricsOf(r) {
    if (rangeMetrics) {
      return rangeMetrics.get(r.file + ":" + r.line) || { loads: 0, stores: 0, bytes: 0, misses: 0, shared: 0, mem_misses: 0 };
    }
    return r;
  }
  function sum(rows) {
    const s = { loads: 0, stores: 0, bytes: 0, misses: 0, shared: 0 };
    for (const r of rows) { const m = metricsOf(r); for (const k in s) s[k] += m[k] || 0; }
    return s;
  }
  function colText(m, c) {
    if (c === "miss%") return m.loads + m.stores && !Number.isNaN(m.misses) ? ((100 * m.misses) / (m.loads + m.stores)).toFixed(1) : "";
    if (Number.isNaN(m[c])) return ""; // not known for this window (an index without window sums)
    return fmt(m[c] || 0);
  }
  function buildTree() {
    const tree = $("tree");
    tree.replaceChildren();
    const files = new Map();
    for (const r of meta.source) {
      if (!files.has(r.file)) files.set(r.file, new Map());
      const fns = files.get(r.file);
      if (!fns.has(r.function)) fns.set(r.function, []);
      fns.get(r.function).push(r);
    }
    const node = (lvl, text, m, extra) => {
      const d = document.createElement("div");
      d.className = "node lvl" + lvl;
      d.textContent = text;
      const s = document.createElement("span");
      s.className = "m";
      s.textContent = COLS().map((c) => c + " " + colText(m, c)).join("  ");
      d.appendChild(s);
      Object.assign(d.dataset, extra || {});
      tree.appendChild(d);
      return d;
    };
    const all = meta.source;
    node(0, "program", sum(all));
    const sorted = [...files.entries()].sort((a, b) => sum([].concat(...b[1].values())).loads + sum([].concat(...b[1].values())).stores - sum([].concat(...a[1].values())).loads - sum([].concat(...a[1].values())).stores);
    for (const [file, fns] of sorted) {
      const rows = [].concat(...fns.values());
      const fd = node(1, rel(file) || "(no source)", sum(rows), { fileNode: file });
      fd.title = file;
      fd.addEventListener("click", () => showFile(file));
      for (const [fn, lines] of fns) {
        const d = node(2, fn, sum(lines));
        d.addEventListener("click", () => { showFile(file); });
        for (const r of lines.slice().sort((a, b) => a.line - b.line)) {
          const ld = node(3, "line " + r.line, metricsOf(r), { file: r.file, line: r.line });
          ld.addEventListener("click", () => { showFile(file, r.line); hooks.selectSourceLine(r.file, r.line); });
        }
      }
    }
  }

  const sourceCache = new Map();
  async function showFile(file, focusLine) {
    st.file = file;
    if (focusLine !== undefined) st.line = focusLine;
    changed();
    const code = $("code");
    let text = sourceCache.get(file);
    if (text === undefined) {
      try { text = await (await api("api/source", { file })).text(); } catch (e) { text = null; }
      sourceCache.set(file, text);
    }
    const byLine = new Map(meta.source.filter((r) => r.file === file).map((r) => [r.line, r]));
    code.replaceChildren();
    const head = document.createElement("div");
    head.className = "srcline srchead";
    const span = (cls, text) => { const e = document.createElement("span"); if (cls) e.className = cls; e.textContent = text; head.appendChild(e); };
    for (const c of COLS()) span("m", c);
    span("n", "#");
    span("", rel(file));
    head.lastChild.title = file;
    head.lastChild.className = "path";
    code.appendChild(head);
    const lines = text === null ? [...byLine.keys()].sort((a, b) => a - b).map((l) => [l, "(source not readable)"]) : text.split("\n").map((t, k) => [k + 1, t]);
    let focus = null;
    for (const [n, t] of lines) {
      const d = document.createElement("div");
      d.className = "srcline";
      const r = byLine.get(n);
      const m = r ? metricsOf(r) : null;
      for (const c of COLS()) {
        const s = document.createElement("span");
        s.className = "m" + (m && (m.loads + m.stores) > 0 ? " hot" : "");
        s.textContent = m ? colText(m, c) : "";
        d.appendChild(s);
      }
      const ns = document.createElement("span"); ns.className = "n"; ns.textContent = n; d.appendChild(ns);
      const ts = document.createElement("span"); ts.textContent = t; d.appendChild(ts);
      if (r) {
        d.dataset.file = file; d.dataset.line = n;
        d.addEventListener("click", () => hooks.selectSourceLine(file, n));
      }
      if (st.sel && st.sel.kind === "src" && st.sel.file === file && st.sel.line === n) d.classList.add("sel");
      if (n === focusLine) focus = d;
      code.appendChild(d);
    }
    if (focus) centerIn(code, focus);
  }
  hooks.showFile = showFile;

  // ---------- tables ----------
  function tableSections() {
    const out = [["variables", "top variables", meta.tables.variables]];
    // the kernels' JSON sections under the names a reader looks for
    const TITLES = {
      "sharing.by_address": "shared cache lines", "sharing.by_variable": "shared variables",
      "false_sharing.cache_lines": "false sharing: lines", "false_sharing.predicted": "false sharing: predicted",
      "heap.at_peak": "heap: live at the peak", "heap.leaks": "heap: leaked at exit",
      "heap.sites": "heap: allocation sites", "heap.summary": "heap: summary",
    };
    const add = (key, title) => {
      const t = meta.tables[key] || {};
      for (const sec of Object.keys(t)) {
        const k = key + "." + sec;
        out.push([k, TITLES[k] || title + ": " + sec.replace(/_/g, " "), t[sec]]);
      }
    };
    add("sharing", "sharing"); add("false_sharing", "false sharing"); add("heap", "heap sites");
    return out;
  }
  function showTable(key) {
    const secs = tableSections();
    const [, , rows] = secs.find((s) => s[0] === key) || secs[0];
    st.tab = key;
    changed();
    document.querySelectorAll("#tabs button").forEach((b) => b.classList.toggle("on", b.dataset.key === key));
    const el = $("table");
    el.replaceChildren();
    if (!rows || !rows.length) {
      const d = document.createElement("div");
      d.className = "hint";
      d.textContent = "nothing";
      el.appendChild(d);
      return;
    }
    const cols = Object.keys(rows[0]).filter((c) => c !== "var");
    const tbl = document.createElement("table");
    const hr = document.createElement("tr");
    for (const c of cols) { const th = document.createElement("th"); th.className = "t"; th.textContent = c.replace(/_/g, " "); hr.appendChild(th); }
    tbl.appendChild(hr);
    for (const r of rows) {
      const tr = document.createElement("tr");
      tr.className = "row";
      for (const c of cols) {
        const td = document.createElement("td");
        const v = r[c];
        td.className = typeof v === "number" ? "" : "t";
        td.textContent = v === null || v === undefined ? "" : typeof v === "object" ? JSON.stringify(v).slice(0, 80) : typeof v === "number" ? fmt(v) : String(v);
        if (c === "file" && typeof v === "string") {
          // relative to the project root, the full path on hover
          const full = fullPath(v);
          td.textContent = rel(full); td.title = full; td.classList.add("path");
        }
        tr.appendChild(td);
      }
      if (typeof r.variable === "string") tr.dataset.variable = r.variable;
      tr.addEventListener("click", () => {
        document.querySelectorAll("tr.sel").forEach((e) => e.classList.remove("sel"));
        tr.classList.add("sel");
        rowLink(r);
      });
      tbl.appendChild(tr);
    }
    el.appendChild(tbl);
  }
  // A table row links to its source line (file/line) and to its map rows (variable or line address).
  function rowLink(r) {
    const file = r.file || (r.site && r.site.file), line = r.line || (r.site && r.site.line);
    if (typeof r.line_addr === "string" || typeof r.line_addr === "number") {
      const a = typeof r.line_addr === "number" ? r.line_addr : parseInt(r.line_addr, 16);
      select({ kind: "line", addr: a });
    } else if (r.variable) {
      select({ kind: "var", variable: r.variable });
    }
    if (file && line) {
      const full = meta.source.find((s) => s.file === fullPath(file));
      if (full) { showFile(full.file, line); if (!r.variable) hooks.selectSourceLine(full.file, line); }
    }
  }
  // A file as the tables name it (maybe shortened) → the trace's full path.
  function fullPath(f) {
    const r = meta.source.find((s) => s.file === f) || meta.source.find((s) => s.file.endsWith("/" + f));
    return r ? r.file : f;
  }
  hooks.clickTableRow = (key, k) => { const s = tableSections().find((x) => x[0] === key); if (s && s[2][k]) rowLink(s[2][k]); return hooks.highlighted; };
  function buildTabs() {
    const nav = $("tabs");
    for (const [key, title, rows] of tableSections()) {
      const b = document.createElement("button");
      b.textContent = title + " (" + (rows ? rows.length : 0) + ")";
      b.dataset.key = key;
      b.addEventListener("click", () => showTable(key));
      nav.appendChild(b);
    }
    showTable("variables");
  }

  // ---------- bottom views: source & tables | call tree (calltree.js) | heap (heap.js) ----------
  async function showView(v) {
    hooks.view = v;
    st.view = v;
    changed();
    document.querySelectorAll("#views button").forEach((b) => b.classList.toggle("on", b.dataset.view === v));
    $("source").hidden = $("tables").hidden = $("split-src").hidden = v !== "source";
    $("calltree").hidden = v !== "calls";
    $("heapview").hidden = v !== "heap";
    if (v === "calls" && hooks.callTree && !hooks.callTree.shown) { hooks.callTree.shown = true; await hooks.callTree.show("top"); }
    else if (v === "calls" && hooks.callTree && hooks.callTree.stale()) await hooks.callTree.show(hooks.callTree.mode());
    if (v === "heap" && hooks.heapView) await hooks.heapView.show();
  }
  hooks.showView = showView;

  // ---------- start ----------
  async function start() {
    const t = performance.now();
    meta = await (await api("api/meta")).json();
    st.t1 = Math.max(1, meta.ops);
    ROOT = findRoot([...new Set(meta.source.map((r) => r.file))]);
    buildFuncFiles();
    // compact (the header is one row at 1600 px); the words in the tooltip
    const nt = meta.threads.length, nf = meta.functions.length;
    $("summary").textContent = fmt(meta.ops) + " ops · " + fmt(meta.distinct_lines) + " lines · " + nt + (nt === 1 ? " thread · " : " threads · ") + nf + (nf === 1 ? " function" : " functions");
    $("summary").title = fmt(meta.ops) + " memory operations, " + fmt(meta.distinct_lines) + " distinct cache lines, " + nt + " thread(s), " + nf + " functions";
    setupInteraction();
    await redraw();
    hooks.firstPaintMs = performance.now() - t;
    buildTree();
    buildTabs();
    document.querySelectorAll("#views button").forEach((b) => b.addEventListener("click", () => showView(b.dataset.view)));
    $("xmode").addEventListener("change", () => { if (hooks.view === "heap") showView("heap"); });
    hooks.meta = meta;
    // for lanes.js (the wall-clock lanes): the shared state and helpers
    Object.assign(hooks, { api, st, fmt, redraw, funcColor, rel, centerIn, isLibFile, isLibFunc, funcFile, setHideLib, showTable, rowLink, select, pan, zoom, drawFlame });
    hooks.root = () => ROOT;
    $("hidelib").addEventListener("change", (e) => setHideLib(e.target.checked));
    hooks.ready = true;
    document.body.dataset.ready = "1";
  }
  start().catch((e) => { $("status").textContent = "error: " + e.message; hooks.error = String(e); });
})();
