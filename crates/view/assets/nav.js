// memlens view: navigation as Perfetto and KCachegrind users expect it — the view's
// state in the URL (location.hash), a search box over functions, files and variables,
// keys, and a help overlay. Needs app.js's hooks. Values from the trace or the URL only
// ever reach the page as textContent or are compared against the trace's own names.
"use strict";
(function () {
  const H = () => window.memlens;
  const $ = (id) => document.getElementById(id);
  const MAX_HITS = 20;
  let restoring = true, writeTimer = null, items = [], hits = [], active = 0;

  function wait() {
    const h = H();
    // lanes.js and calltree.js hook in after app.js is ready: restore after them.
    if (h && h.ready && h.lanes && h.callTree && h.layout) init(); else setTimeout(wait, 30);
  }

  // ---------- the URL ----------
  // #t0=&t1= (operations on screen) &r0=&r1= (the selected range) &file=&line= &view=
  // &tab= &x= (time or order) &q= (the search text) &lib=1 (library frames hidden)
  // &ct= (the call tree's mode: bottom or function; top when absent) &ctf= (its function)
  // &mh= &sw= &tw= (pane sizes: the map's height, the source's and the file tree's share)
  // &cl= (collapsed thread lanes, comma-separated thread numbers)
  function stateParams() {
    const h = H(), st = h.st, p = new URLSearchParams();
    p.set("t0", String(Math.round(st.t0)));
    p.set("t1", String(Math.round(st.t1)));
    if (st.range) { p.set("r0", String(st.range.t0)); p.set("r1", String(st.range.t1)); }
    if (st.file) {
      p.set("file", st.file);
      if (Number.isInteger(st.line)) p.set("line", String(st.line));
    }
    if (st.view && st.view !== "source") p.set("view", st.view);
    const ct = h.callTree;
    if (st.view === "calls" && ct && ct.mode() !== "top") {
      p.set("ct", ct.mode());
      if (ct.mode() === "function" && Number.isInteger(ct.fn())) p.set("ctf", String(ct.fn()));
    }
    if (st.tab && st.tab !== "variables") p.set("tab", st.tab);
    p.set("x", $("xmode").value);
    if ($("search").value) p.set("q", $("search").value);
    if (st.hideLib) p.set("lib", "1");
    const cl = h.lanes && h.lanes.collapsed;
    if (cl && cl.length) p.set("cl", cl.join(","));
    for (const [k, v] of h.layout.params()) p.set(k, v);
    return p;
  }
  function write() {
    clearTimeout(writeTimer);
    writeTimer = null;
    if (restoring) return;
    const hash = "#" + stateParams().toString();
    if (hash !== location.hash) history.replaceState(null, "", location.pathname + location.search + hash);
    H().hash = location.hash;
  }
  function changed() {
    if (restoring || writeTimer) return;
    writeTimer = setTimeout(write, 50);
  }

  // Every value is checked against what the trace has; anything else is ignored.
  function parseHash() {
    let p;
    try { p = new URLSearchParams(location.hash.replace(/^#/, "")); } catch (e) { return {}; }
    const meta = H().meta, ops = Math.max(1, meta.ops), out = {};
    const int = (k) => { const v = p.get(k); return v !== null && /^\d{1,16}$/.test(v) ? Number(v) : null; };
    const t0 = int("t0"), t1 = int("t1");
    if (t0 !== null && t1 !== null && t0 < t1 && t1 <= ops) { out.t0 = t0; out.t1 = t1; }
    const r0 = int("r0"), r1 = int("r1");
    if (r0 !== null && r1 !== null && r0 < r1 && r1 <= ops) { out.r0 = r0; out.r1 = r1; }
    const file = p.get("file");
    if (file !== null && meta.source.some((r) => r.file === file)) {
      out.file = file;
      const line = int("line");
      if (line !== null && line > 0) out.line = line;
    }
    const view = p.get("view");
    if (["source", "calls", "heap"].includes(view)) out.view = view;
    const ct = p.get("ct");
    if (ct === "bottom" || ct === "function") out.ct = ct;
    const ctf = int("ctf");
    if (ctf !== null) out.ctf = ctf;
    const tab = p.get("tab");
    if (tab !== null && [...document.querySelectorAll("#tabs button")].some((b) => b.dataset.key === tab)) out.tab = tab;
    const x = p.get("x");
    if (x === "time" || x === "order") out.x = x;
    const q = p.get("q");
    if (q !== null) out.q = q.slice(0, 200);
    if (p.get("lib") === "1") out.lib = true;
    const cl = p.get("cl");
    if (cl) out.cl = cl.split(",").slice(0, 4096).map(Number).filter((n) => Number.isInteger(n) && n >= 0);
    // pane sizes: layout.js clamps them to its limits
    out.layout = {};
    for (const k of ["mh", "sw", "tw"]) { const v = int(k); if (v !== null) out.layout[k] = v; }
    return out;
  }

  async function restore() {
    const h = H(), st = h.st, s = parseHash();
    try {
      if (s.x) {
        const opt = [...$("xmode").options].find((o) => o.value === s.x);
        if (opt && !opt.disabled && $("xmode").value !== s.x) {
          $("xmode").value = s.x;
          $("xmode").dispatchEvent(new Event("change"));
        }
      }
      if (s.lib) h.setHideLib(true);
      if (s.cl && h.lanesToggle) for (const t of s.cl) if (h.meta.lanes && h.meta.lanes.some((l) => l.thread === t)) h.lanesToggle(t, true);
      h.layout.restore(s.layout);
      if (s.t0 !== undefined) { st.t0 = s.t0; st.t1 = s.t1; }
      if (s.r0 !== undefined) await h.setRange(s.r0, s.r1);
      else if (s.t0 !== undefined) await h.redraw();
      if (s.tab) h.showTable(s.tab);
      if (s.view) await h.showView(s.view);
      if (s.view === "calls" && s.ct) {
        // a function id the trace does not have is refused by the server: stay top-down
        try { await h.callTree.show(s.ct, s.ct === "function" ? s.ctf : undefined); } catch (e) { await h.callTree.show("top"); }
      }
      if (s.file) {
        await h.showFile(s.file, s.line);
        if (s.line && h.meta.source.some((r) => r.file === s.file && r.line === s.line)) await h.selectSourceLine(s.file, s.line);
      }
      if (s.q) $("search").value = s.q;
    } finally {
      restoring = false;
      write();
      h.restored = true;
    }
  }

  // ---------- search ----------
  function buildItems() {
    const meta = H().meta, seen = new Set();
    const add = (kind, name, label, title) => {
      if (typeof name !== "string" || !name || seen.has(kind + "\0" + name)) return;
      seen.add(kind + "\0" + name);
      items.push({ kind, name, label: label || name, title: title || name, lower: (label || name).toLowerCase() });
    };
    for (const f of meta.functions) add("function", f);
    for (const r of meta.source) add("function", r.function);
    for (const r of meta.source) add("file", r.file, H().rel(r.file), r.file);
    for (const r of meta.tables.variables || []) add("variable", r.variable);
    for (const v of meta.vars) add("variable", v[1]);
  }
  const KIND_ORDER = { function: 0, file: 1, variable: 2 };
  function search(q) {
    q = q.trim().toLowerCase();
    if (!q) return [];
    const scored = [];
    for (const it of items) {
      const i = it.lower.indexOf(q);
      if (i < 0) continue;
      const score = it.lower === q ? 0 : i === 0 ? 1 : /[^a-z0-9_]/.test(it.lower[i - 1]) ? 2 : 3;
      scored.push([score, it]);
    }
    scored.sort((a, b) => a[0] - b[0] || KIND_ORDER[a[1].kind] - KIND_ORDER[b[1].kind] || a[1].label.length - b[1].label.length);
    return scored.slice(0, MAX_HITS).map((x) => x[1]);
  }
  function showHits() {
    const box = $("searchres");
    box.replaceChildren();
    hits = search($("search").value);
    active = 0;
    if (!$("search").value.trim()) { box.hidden = true; return; }
    if (!hits.length) {
      const d = document.createElement("div");
      d.className = "none";
      d.textContent = "no function, file or variable matches";
      box.appendChild(d);
    }
    hits.forEach((it, k) => {
      const d = document.createElement("div");
      d.className = "hit" + (k === active ? " on" : "");
      d.title = it.title;
      d.dataset.kind = it.kind;
      const kind = document.createElement("span");
      kind.className = "kind";
      kind.textContent = it.kind;
      const name = document.createElement("span");
      name.className = "name";
      name.textContent = it.label;
      d.append(kind, name);
      d.addEventListener("mousedown", (e) => { e.preventDefault(); open(it); });
      box.appendChild(d);
    });
    box.hidden = false;
  }
  function moveActive(dk) {
    if (!hits.length) return;
    active = Math.max(0, Math.min(hits.length - 1, active + dk));
    $("searchres").querySelectorAll(".hit").forEach((d, k) => d.classList.toggle("on", k === active));
    const on = $("searchres").querySelector(".hit.on");
    if (on) on.scrollIntoView({ block: "nearest" });
  }
  function closeHits() { $("searchres").hidden = true; }

  // A function opens at its first hot line (and is outlined in the flame chart), a
  // file at its hottest line, a variable at its row in the variables table.
  async function open(it) {
    const h = H(), meta = h.meta;
    closeHits();
    $("search").blur();
    h.lastOpened = { kind: it.kind, name: it.name };
    if (it.kind === "function") {
      h.st.flameHi = meta.functions.indexOf(it.name);
      h.drawFlame();
      const rows = meta.source.filter((r) => r.function === it.name && r.loads + r.stores > 0).sort((a, b) => a.line - b.line);
      if (rows.length) await openLine(rows[0].file, rows[0].line);
    } else if (it.kind === "file") {
      const rows = meta.source.filter((r) => r.file === it.name);
      rows.sort((a, b) => b.loads + b.stores - (a.loads + a.stores) || a.line - b.line);
      if (rows.length) await openLine(it.name, rows[0].line);
    } else {
      await h.showView("source");
      h.showTable("variables");
      const k = (meta.tables.variables || []).findIndex((r) => r.variable === it.name);
      const tr = k >= 0 ? document.querySelectorAll("#table tr.row")[k] : null;
      if (tr) {
        document.querySelectorAll("tr.sel").forEach((e) => e.classList.remove("sel"));
        tr.classList.add("sel");
        h.centerIn($("tables"), tr);
        h.rowLink(meta.tables.variables[k]);
      } else {
        h.select({ kind: "var", variable: it.name });
      }
    }
    changed();
  }
  async function openLine(file, line) {
    const h = H();
    await h.showView("source");
    await h.showFile(file, line);
    await h.selectSourceLine(file, line);
  }

  // ---------- keys ----------
  function typing(e) {
    const t = e.target;
    return t && (t.tagName === "INPUT" || t.tagName === "SELECT" || t.tagName === "TEXTAREA" || t.isContentEditable);
  }
  function hotStep(dir) {
    const h = H(), st = h.st;
    const lines = [...document.querySelectorAll("#code .srcline[data-line]")]
      .filter((d) => d.querySelector(".m.hot"))
      .map((d) => Number(d.dataset.line));
    if (!lines.length || !st.file) return;
    const cur = Number.isInteger(st.line) ? st.line : dir > 0 ? -Infinity : Infinity;
    const next = dir > 0 ? lines.find((l) => l > cur) : [...lines].reverse().find((l) => l < cur);
    if (next === undefined) return;
    h.selectSourceLine(st.file, next);
    const d = [...document.querySelectorAll("#code .srcline[data-line]")].find((e) => Number(e.dataset.line) === next);
    if (d) h.centerIn($("code"), d);
  }
  function onKey(e) {
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    const h = H(), st = h.st;
    if (e.target === $("search")) {
      if (e.key === "Escape") { $("search").value = ""; closeHits(); $("search").blur(); changed(); e.preventDefault(); }
      else if (e.key === "ArrowDown") { moveActive(1); e.preventDefault(); }
      else if (e.key === "ArrowUp") { moveActive(-1); e.preventDefault(); }
      else if (e.key === "Enter") { if (hits[active]) open(hits[active]); e.preventDefault(); }
      return;
    }
    if (typing(e)) return;
    const span = st.t1 - st.t0, mid = (st.t0 + st.t1) / 2;
    switch (e.key) {
      case "/": $("search").focus(); $("search").select(); break;
      case "Escape": $("help").hidden = true; closeHits(); break;
      case "?": $("help").hidden = !$("help").hidden; break;
      case "w": h.zoom(0.8, mid); break;
      case "s": h.zoom(1.25, mid); break;
      case "a": h.pan(-0.2 * span); break;
      case "d": h.pan(0.2 * span); break;
      case "j": hotStep(1); break;
      case "k": hotStep(-1); break;
      default: return;
    }
    e.preventDefault();
  }

  function init() {
    const h = H();
    buildItems();
    h.stateChanged = changed;
    h.search = (q) => { $("search").value = q; showHits(); return hits.map((it) => [it.kind, it.label]); };
    h.writeHash = write;
    h.layout.onChange(changed);
    $("search").addEventListener("input", () => { showHits(); changed(); });
    $("search").addEventListener("focus", () => { if ($("search").value) showHits(); });
    $("search").addEventListener("blur", closeHits);
    $("helpbtn").addEventListener("click", () => { $("help").hidden = !$("help").hidden; });
    $("xmode").addEventListener("change", changed);
    document.addEventListener("keydown", onKey);
    restore();
  }

  wait();
})();
