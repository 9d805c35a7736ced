// memlens view: resizable panes, as in KCachegrind and Perfetto — three splitters:
// under the timeline (the map's height; the panes below give or take the same), between
// the source and the tables, and between the file tree and the code. Drag, arrow keys
// on a focused splitter, double-click resets. Sizes go into the URL (nav.js: mh, sw, tw)
// and the canvases redraw at the new size (one window "resize" after each change).
"use strict";
(function () {
  const H = () => window.memlens;
  const $ = (id) => document.getElementById(id);
  // Defaults and limits: the map's height in CSS px, the source pane's and the file
  // tree's share in percent of their row. The map's default is "fit": FIT of the height
  // the map and the panes below share (the page is one window high, style.css), so
  // mh leaves the URL while it fits; its upper limit leaves the panes below their
  // min-height, so dragging never makes the page scroll.
  const DEF = { mh: null, sw: 60, tw: 33 };
  const LIM = { mh: [80, 1200], sw: [15, 85], tw: [10, 70] };
  const FIT = 0.4;
  const L = Object.assign({}, DEF);
  let notify = null;

  // The height the map and the panes below share, and the least the panes keep.
  function room() {
    const b = $("bottom");
    return { both: $("map").getBoundingClientRect().height + b.getBoundingClientRect().height, min: parseFloat(getComputedStyle(b).minHeight) || 0 };
  }
  function hi(k) {
    if (k !== "mh") return LIM[k][1];
    const r = room();
    return Math.max(LIM.mh[0], Math.min(LIM.mh[1], r.both - r.min));
  }
  const clamp = (k, v) => Math.round(Math.min(hi(k), Math.max(LIM[k][0], v)));
  const fit = () => clamp("mh", FIT * room().both);
  // A height from the URL is kept as asked (within LIM) but shown at most as high as
  // the window allows now: the lanes and the flame chart settle after the restore.
  const mh = () => (L.mh === null ? fit() : clamp("mh", L.mh));

  function apply() {
    // The panes below (flex: 1) shrink as the map grows: the page keeps its height.
    $("map").style.height = mh() + "px";
    $("source").style.flex = L.sw + " 1 0";
    $("tables").style.flex = 100 - L.sw + " 1 0";
    $("tree").style.flex = L.tw + " 1 0";
    $("code").style.flex = 100 - L.tw + " 1 0";
    const d = document.body.dataset;
    d.mh = mh(); d.sw = L.sw; d.tw = L.tw; d.fit = L.mh === null ? "1" : "0";
  }

  // Redraws at most once per frame while dragging (the map, lanes and heap chart
  // listen to the window's resize), and tells nav.js once the size settled.
  let frame = 0;
  function changed() {
    apply();
    if (!frame) frame = requestAnimationFrame(() => { frame = 0; window.dispatchEvent(new Event("resize")); });
    if (notify) notify();
    const h = H();
    if (h) h.layoutChanges = (h.layoutChanges || 0) + 1;
  }

  // set(k, null) resets k to its default (for mh: fit the window again).
  function set(k, v) {
    const c = v === null ? DEF[k] : clamp(k, v);
    if (c === L[k]) return false;
    L[k] = c;
    changed();
    return true;
  }

  // Splitter `id` changes key `k`; `toValue(dx, dy, start)` maps the pointer's move.
  function splitter(id, k, toValue, step) {
    const s = $(id);
    s.tabIndex = 0;
    s.setAttribute("role", "separator");
    s.addEventListener("mousedown", (e) => {
      e.preventDefault();
      const start = { x: e.clientX, y: e.clientY, v: k === "mh" ? mh() : L[k], box: s.parentElement.getBoundingClientRect() };
      s.classList.add("drag");
      const move = (ev) => set(k, toValue(ev.clientX - start.x, ev.clientY - start.y, start));
      const up = () => {
        s.classList.remove("drag");
        window.removeEventListener("mousemove", move, true);
        window.removeEventListener("mouseup", up, true);
      };
      window.addEventListener("mousemove", move, true);
      window.addEventListener("mouseup", up, true);
    });
    s.addEventListener("dblclick", () => set(k, null));
    s.addEventListener("keydown", (e) => {
      const horiz = s.classList.contains("h");
      const dir = { ArrowUp: horiz ? -1 : 0, ArrowDown: horiz ? 1 : 0, ArrowLeft: horiz ? 0 : -1, ArrowRight: horiz ? 0 : 1 }[e.key];
      if (e.key === "Home" || e.key === "Enter") { set(k, null); e.preventDefault(); e.stopPropagation(); return; }
      if (!dir) return;
      set(k, (k === "mh" ? mh() : L[k]) + dir * step);
      e.preventDefault();
      e.stopPropagation(); // not the page's keys
    });
  }

  function init() {
    // px of the pointer → percent of the row the two panes share
    const pct = (dx, start) => start.v + (100 * dx) / Math.max(1, start.box.width);
    splitter("split-main", "mh", (dx, dy, start) => start.v + dy, 20);
    splitter("split-src", "sw", (dx, dy, start) => pct(dx, start), 2);
    splitter("split-tree", "tw", (dx, dy, start) => pct(dx, start), 2);
    apply();
    // The map follows the window and the timeline above it (the lanes and the flame
    // chart settle their heights after their first fetch).
    let last = mh();
    const refit = () => { const m = mh(); if (m !== last) { last = m; changed(); } };
    window.addEventListener("resize", refit);
    if (window.ResizeObserver) {
      const ro = new ResizeObserver(refit);
      for (const id of ["timelanes", "flame", "bottom"]) ro.observe($(id));
    }
    H().layout = {
      // nav.js: the non-default sizes for the URL, and the restored ones
      params: () => Object.keys(L).filter((k) => L[k] !== DEF[k]).map((k) => [k, String(L[k])]),
      restore: (s) => {
        let any = false;
        for (const k of Object.keys(DEF)) if (Number.isInteger(s[k])) { L[k] = Math.min(LIM[k][1], Math.max(LIM[k][0], s[k])); any = true; }
        if (any) changed();
      },
      set, sizes: () => Object.assign({}, L, { mh: mh() }), defaults: () => Object.assign({}, DEF, { mh: fit() }),
      fits: () => L.mh === null, maxMh: () => hi("mh"),
      onChange: (f) => { notify = f; },
    };
  }

  function wait() { if (H() && H().ready) init(); else setTimeout(wait, 30); }
  wait();
})();
