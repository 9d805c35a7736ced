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
  // tree's share in percent of their row.
  const DEF = { mh: 360, sw: 60, tw: 33 };
  const LIM = { mh: [80, 1200], sw: [15, 85], tw: [10, 70] };
  const L = Object.assign({}, DEF);
  let notify = null;

  const clamp = (k, v) => Math.round(Math.min(LIM[k][1], Math.max(LIM[k][0], v)));

  function apply() {
    const map = $("map"), bottom = $("bottom");
    map.style.height = L.mh + "px";
    // The panes below shrink as the map grows: the page keeps its height.
    bottom.style.height = "calc(100vh - " + (600 + L.mh - DEF.mh) + "px)";
    $("source").style.flex = L.sw + " 1 0";
    $("tables").style.flex = 100 - L.sw + " 1 0";
    $("tree").style.flex = L.tw + " 1 0";
    $("code").style.flex = 100 - L.tw + " 1 0";
    for (const k of Object.keys(L)) document.body.dataset[k] = L[k];
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

  function set(k, v) {
    const c = clamp(k, v);
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
      const start = { x: e.clientX, y: e.clientY, v: L[k], box: s.parentElement.getBoundingClientRect() };
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
    s.addEventListener("dblclick", () => set(k, DEF[k]));
    s.addEventListener("keydown", (e) => {
      const horiz = s.classList.contains("h");
      const dir = { ArrowUp: horiz ? -1 : 0, ArrowDown: horiz ? 1 : 0, ArrowLeft: horiz ? 0 : -1, ArrowRight: horiz ? 0 : 1 }[e.key];
      if (e.key === "Home" || e.key === "Enter") { set(k, DEF[k]); e.preventDefault(); e.stopPropagation(); return; }
      if (!dir) return;
      set(k, L[k] + dir * step);
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
    H().layout = {
      // nav.js: the non-default sizes for the URL, and the restored ones
      params: () => Object.keys(L).filter((k) => L[k] !== DEF[k]).map((k) => [k, String(L[k])]),
      restore: (s) => { let any = false; for (const k of Object.keys(DEF)) if (Number.isInteger(s[k])) { L[k] = clamp(k, s[k]); any = true; } if (any) changed(); },
      set, sizes: () => Object.assign({}, L), defaults: () => Object.assign({}, DEF),
      onChange: (f) => { notify = f; },
    };
  }

  function wait() { if (H() && H().ready) init(); else setTimeout(wait, 30); }
  wait();
})();
