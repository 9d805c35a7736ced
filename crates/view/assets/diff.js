// memlens view A B: the difference of two traces per source line, function and
// variable, and on the source. Plain JS, no build step; every request carries the
// page's token. Data (file, function, variable names, source text) only ever
// reaches the page as textContent, never as HTML.
"use strict";
(function () {
  const { $, api, fmt, base, el } = window.memlensUi;
  const signed = (d) => (d > 0 ? "+" + fmt(d) : d < 0 ? "−" + fmt(-d) : "0");
  const cls = (d) => (d > 0 ? "pos" : d < 0 ? "neg" : "zero");
  // Rows per table the page asks for (the largest changes; the caption says how many there are).
  const LIMIT = 2000;

  const hooks = { ready: false, error: null };
  window.memlens = hooks;
  // Fetches in flight, for tests: idle() resolves when none are left.
  let pending = 0;
  const waiters = [];
  const track = (p) => {
    pending++;
    return p.finally(() => {
      if (--pending === 0) waiters.splice(0).forEach((f) => f(0));
    });
  };
  hooks.idle = () => (pending === 0 ? Promise.resolve(0) : new Promise((res) => waiters.push(res)));

  // ---------- tables ----------
  const NUM = [
    ["a_loads", "A loads", "grp-a"], ["a_stores", "A stores", "grp-a"],
    ["b_loads", "B loads", "grp-b"], ["b_stores", "B stores", "grp-b"], ["delta", "Δ", ""],
  ];
  // Lines and functions also have bytes and, with a cache simulation, misses
  // (added once the summary says whether either trace has them).
  const BYTES = [["delta_bytes", "Δ bytes", ""]];
  const MISSES = [["a_misses", "A misses", "grp-a"], ["b_misses", "B misses", "grp-b"], ["delta_misses", "Δ misses", ""]];
  const tables = {
    lines: { cols: [["name", "source line", "t"], ["function", "function", "t"]].concat(NUM, BYTES) },
    functions: { cols: [["name", "function", "t"]].concat(NUM, BYTES) },
    variables: { cols: [["name", "variable", "t"]].concat(NUM) },
    // heaptrack --diff: per allocation site, bytes allocated, the site's peak and leaks
    heap: { cols: [["name", "allocation site", "t"], ["a_bytes", "A bytes", "grp-a"], ["b_bytes", "B bytes", "grp-b"],
      ["delta", "Δ bytes", ""], ["a_peak", "A peak", "grp-a"], ["b_peak", "B peak", "grp-b"], ["delta_peak", "Δ peak", ""],
      ["delta_leaked", "Δ leaked", ""]] },
  };
  for (const t of Object.values(tables)) Object.assign(t, { rows: [], total: 0, sort: { key: null, desc: true } });
  const isDelta = (key) => key === "delta" || key.startsWith("delta_");

  // The server's order (largest |Δ| first) until a header is clicked.
  function sorted(t) {
    const { key, desc } = t.sort;
    if (!key) return t.rows;
    const dir = desc ? -1 : 1;
    return t.rows.slice().sort((x, y) => {
      const a = x[key], b = y[key];
      const c = typeof a === "number" ? a - b : String(a || "").localeCompare(String(b || ""));
      return dir * c || Math.abs(y.delta) - Math.abs(x.delta) || x.name.localeCompare(y.name);
    });
  }
  function label(name, r, key) {
    if (key === "name" && name === "lines") return base(r.file) + ":" + r.line;
    if (key === "name" && name === "heap" && r.file) return base(r.file) + ":" + r.line + " (" + r.function + ")";
    return r[key] === undefined ? "" : String(r[key]);
  }
  function draw(name) {
    const t = tables[name];
    const box = $("t-" + name);
    box.querySelector(".count").textContent = t.rows.length < t.total ? "largest " + t.rows.length + " changes of " + t.total : t.total + " rows";
    const tbl = el("table");
    const hr = el("tr");
    for (const [key, title, c] of t.cols) {
      const arrow = t.sort.key === key ? (t.sort.desc ? " ▾" : " ▴") : "";
      const th = el("th", (c === "t" ? "t " : "") + (c !== "t" ? c : ""), title + arrow);
      th.dataset.key = key;
      th.addEventListener("click", () => sortBy(name, key));
      hr.appendChild(th);
    }
    tbl.appendChild(hr);
    for (const r of sorted(t)) {
      const tr = el("tr", "row");
      tr.dataset.name = r.name;
      for (const [key, , c] of t.cols) {
        let td;
        if (isDelta(key)) td = el("td", cls(r[key]), signed(r[key]));
        else if (c === "t") { td = el("td", "t", label(name, r, key)); td.title = td.title || r[key] || ""; }
        else td = el("td", c, fmt(r[key]));
        td.dataset.key = key;
        tr.appendChild(td);
      }
      if (name === "heap") tr.title = "A: " + r.a_blocks + " blocks, " + r.a_leaked + " bytes leaked\nB: " + r.b_blocks + " blocks, " + r.b_leaked + " bytes leaked";
      tr.addEventListener("click", () => {
        box.querySelectorAll("tr.sel").forEach((e) => e.classList.remove("sel"));
        tr.classList.add("sel");
        if (r.file && r.line) track(showFile(r.file, r.line));
      });
      tbl.appendChild(tr);
    }
    box.querySelector(".scroll").replaceChildren(tbl);
  }
  // First click on a column: largest first (names: A to Z); again: the other way.
  function sortBy(name, key) {
    const t = tables[name];
    if (t.sort.key === key) t.sort.desc = !t.sort.desc;
    else t.sort = { key, desc: key !== "name" && key !== "function" };
    draw(name);
  }
  hooks.sortBy = sortBy;
  hooks.rows = (name) => sorted(tables[name]).map((r) => r.name);

  // ---------- call trees ----------
  // Both traces' top-down trees merged by call path (/api/diff/calltree), and both
  // inverted trees merged by name (/api/diff/bottomup: a function, then its
  // callers): a row per path, expanded on demand; the largest change first.
  const acc = (c) => c[0] + c[1];
  const trees = {
    tree: {
      cols: [["a_calls", "A calls", "grp-a"], ["b_calls", "B calls", "grp-b"],
        ["a_incl", "A incl.", "grp-a"], ["b_incl", "B incl.", "grp-b"], ["delta", "Δ incl.", ""],
        ["a_excl", "A excl.", "grp-a"], ["b_excl", "B excl.", "grp-b"], ["delta_excl", "Δ excl.", ""]],
      head: "call path",
      root: 0,
      fetch: async (node) => {
        const v = await (await api("api/diff/calltree", { node })).json();
        return { more: v.more, rows: v.rows.map((r) => Object.assign(r, { key: r.node, kids: r.children > 0 })) };
      },
    },
    callers: {
      cols: [["a_calls", "A calls", "grp-a"], ["b_calls", "B calls", "grp-b"],
        ["a_excl", "A excl.", "grp-a"], ["b_excl", "B excl.", "grp-b"], ["delta_excl", "Δ excl.", ""]],
      head: "function ← its callers",
      root: [],
      fetch: async (path) => {
        const v = await (await api("api/diff/bottomup", { path: JSON.stringify(path) })).json();
        return { more: v.more, rows: v.rows.map((r) => Object.assign(r, { key: path.concat([r.name]), kids: !r.root })) };
      },
    },
  };
  for (const t of Object.values(trees)) Object.assign(t, { body: null, keys: new Map() });
  function treeRow(t, r, depth) {
    const tr = el("tr", "row");
    t.keys.set(tr, r.key);
    tr.dataset.name = r.name;
    tr.dataset.depth = depth;
    const name = el("td", "t");
    name.style.paddingLeft = 4 + 14 * depth + "px";
    const tog = el("span", "tog", r.kids ? "▸" : "");
    name.append(tog, document.createTextNode(r.name));
    name.title = r.name;
    tr.appendChild(name);
    for (const [key, , c] of t.cols) {
      const v = Array.isArray(r[key]) ? acc(r[key]) : r[key];
      const td = isDelta(key) ? el("td", cls(v), signed(v)) : el("td", c, fmt(v));
      td.dataset.key = key;
      tr.appendChild(td);
    }
    const side = (k) => (r[k + "_incl"] ? "inclusive " + r[k + "_incl"][0] + " loads, " + r[k + "_incl"][1] + " stores; " : "") +
      "exclusive " + r[k + "_excl"][0] + " loads, " + r[k + "_excl"][1] + " stores";
    tr.title = "A: " + r.a_calls + " calls, " + side("a") + "\nB: " + r.b_calls + " calls, " + side("b");
    if (r.kids) tog.addEventListener("click", (e) => { e.stopPropagation(); track(toggleNode(t, tr)); });
    tr.addEventListener("click", () => {
      t.body.querySelectorAll("tr.sel").forEach((e) => e.classList.remove("sel"));
      tr.classList.add("sel");
      // the function's source, where the flat table opens it
      const f = tables.functions.rows.find((x) => x.name === r.name);
      if (f && f.file && f.line) track(showFile(f.file, f.line));
    });
    return tr;
  }
  // Opens (or closes) a row: its children's rows go right below it.
  async function toggleNode(t, tr) {
    const depth = Number(tr.dataset.depth);
    const tog = tr.querySelector(".tog");
    if (tog.textContent === "▾") {
      let n = tr.nextSibling;
      while (n && Number(n.dataset.depth) > depth) {
        const next = n.nextSibling;
        n.remove();
        n = next;
      }
      tog.textContent = "▸";
      return null;
    }
    tog.textContent = "▾";
    const v = await t.fetch(t.keys.get(tr));
    let after = tr;
    for (const r of v.rows) {
      const row = treeRow(t, r, depth + 1);
      after.after(row);
      after = row;
    }
    if (v.more) {
      const m = el("tr", "more");
      m.dataset.depth = depth + 1;
      const td = el("td", "t", "… " + v.more + " more with smaller changes");
      td.colSpan = t.cols.length + 1;
      m.appendChild(td);
      after.after(m);
    }
    return v;
  }
  async function showTree(name) {
    const t = trees[name];
    if (t.body) return;
    const tbl = el("table");
    const hr = el("tr");
    hr.appendChild(el("th", "t", t.head));
    for (const [, title, c] of t.cols) hr.appendChild(el("th", c, title));
    tbl.appendChild(hr);
    t.body = tbl;
    const v = await t.fetch(t.root);
    for (const r of v.rows) tbl.appendChild(treeRow(t, r, 0));
    document.querySelector("#t-functions .scroll." + name).replaceChildren(tbl);
    // open the path that changed most, a few levels down
    let tr = tbl.querySelector("tr.row");
    for (let k = 0; tr && k < 6 && tr.querySelector(".tog").textContent; k++) {
      const w = await toggleNode(t, tr);
      if (!w || !w.rows.length || (w.rows[0].delta ?? w.rows[0].delta_excl) === 0) break;
      tr = tr.nextSibling;
    }
  }
  function mode(m) {
    const box = $("t-functions");
    box.querySelectorAll(".modes button").forEach((b) => b.classList.toggle("on", b.dataset.mode === m));
    for (const s of box.querySelectorAll(".scroll")) s.hidden = !s.classList.contains(m);
    box.querySelector(".count").hidden = m !== "flat";
    hooks.mode = m;
    return trees[m] ? showTree(m) : Promise.resolve();
  }
  document.querySelectorAll("#t-functions .modes button").forEach((b) =>
    b.addEventListener("click", () => track(mode(b.dataset.mode))));
  hooks.mode = "flat";
  hooks.treeMode = (m) => track(mode(m));
  hooks.treeRows = (m) => [...document.querySelectorAll("#t-functions .scroll." + (m || "tree") + " tr.row")].map((tr) =>
    [Number(tr.dataset.depth), tr.dataset.name].concat([...tr.querySelectorAll("td[data-key]")].map((td) => td.textContent)));

  // ---------- source ----------
  const sources = new Map();
  const fileRows = new Map();
  async function showFile(file, focus) {
    $("file").value = file;
    let text = sources.get(file);
    if (text === undefined) {
      try { text = await (await api("api/source", { file })).text(); } catch (e) { text = null; }
      sources.set(file, text);
    }
    let rows = fileRows.get(file);
    if (!rows) {
      rows = (await (await api("api/diff/lines", { file })).json()).rows;
      fileRows.set(file, rows);
    }
    // One source line may hold several functions' rows (inlining): summed here.
    const by = new Map();
    for (const r of rows) {
      const e = by.get(r.line) || { al: 0, as: 0, bl: 0, bs: 0 };
      e.al += r.a_loads; e.as += r.a_stores; e.bl += r.b_loads; e.bs += r.b_stores;
      by.set(r.line, e);
    }
    const code = $("dcode");
    code.replaceChildren();
    const head = el("div", "srcline head");
    for (const [c, t] of [["m a", "A"], ["m b", "B"], ["m", "Δ"], ["n", "#"], ["", file]]) head.appendChild(el("span", c, t));
    code.appendChild(head);
    const lines = text === null
      ? [...by.keys()].sort((a, b) => a - b).map((l) => [l, "(source not readable)"])
      : text.split("\n").map((t, k) => [k + 1, t]);
    let at = null;
    for (const [n, t] of lines) {
      const d = el("div", "srcline");
      const m = by.get(n);
      if (m) {
        const a = m.al + m.as, b = m.bl + m.bs;
        d.append(el("span", "m a", fmt(a)), el("span", "m b", fmt(b)), el("span", "m " + cls(b - a), signed(b - a)));
        d.title = "A: " + m.al + " loads, " + m.as + " stores\nB: " + m.bl + " loads, " + m.bs + " stores";
        d.dataset.line = n;
        d.dataset.delta = b - a;
      } else {
        d.append(el("span", "m", ""), el("span", "m", ""), el("span", "m", ""));
      }
      d.append(el("span", "n", String(n)), el("span", "", t));
      if (n === focus) { d.classList.add("sel"); at = d; }
      code.appendChild(d);
    }
    if (at) at.scrollIntoView({ block: "center" });
    hooks.file = file;
  }
  hooks.showFile = (file, line) => track(showFile(file, line));

  // ---------- start ----------
  function totals(s) {
    const keys = [["events", "events"], ["ops", "memory operations"], ["loads", "loads"], ["stores", "stores"], ["accesses", "accesses"], ["bytes", "bytes"]];
    if (s.a.cachesim || s.b.cachesim) keys.push(["misses", "simulated misses"]);
    keys.push(["threads", "threads"], ["heap.bytes", "heap bytes allocated"], ["heap.peak", "heap peak"], ["heap.leaked", "leaked at exit"]);
    const tbl = el("table");
    const hr = el("tr");
    hr.appendChild(el("th", "t", ""));
    for (const [, t] of keys) hr.appendChild(el("th", "", t));
    tbl.appendChild(hr);
    for (const [side, tag] of [["a", "A"], ["b", "B"], ["delta", "Δ (B − A)"]]) {
      const tr = el("tr");
      tr.dataset.side = side;
      tr.appendChild(el("td", "t", tag));
      for (const [k] of keys) {
        const v = k.split(".").reduce((o, p) => o[p], s[side]);
        const td = side === "delta" ? el("td", cls(v), signed(v)) : el("td", "grp-" + side, fmt(v));
        td.dataset.key = k;
        tr.appendChild(td);
      }
      tbl.appendChild(tr);
    }
    $("totals").replaceChildren(tbl);
  }
  async function start() {
    const s = await (await api("api/diff/summary")).json();
    hooks.summary = s;
    // Long paths keep their end (the file names), the whole path in the tooltip.
    const short = (p) => (p.length > 56 ? "…" + p.slice(-55) : p);
    for (const [id, t] of [["atrace", s.a.trace], ["btrace", s.b.trace]]) {
      $(id).textContent = short(t);
      $(id).title = t;
    }
    totals(s);
    if (s.a.cachesim || s.b.cachesim) for (const n of ["lines", "functions"]) tables[n].cols = tables[n].cols.concat(MISSES);
    const sel = $("file");
    for (const f of s.files) {
      const o = el("option", "", (base(f.file) || "(no source)") + "  Δ " + signed(f.delta));
      o.value = f.file;
      o.title = f.file;
      sel.appendChild(o);
    }
    sel.addEventListener("change", () => track(showFile(sel.value)));
    await Promise.all(Object.keys(tables).map(async (name) => {
      const v = await (await api("api/diff/" + name, { limit: LIMIT })).json();
      Object.assign(tables[name], { rows: v.rows, total: v.total });
      draw(name);
    }));
    // The largest change's source first.
    const top = tables.lines.rows.find((r) => r.file);
    if (top) await showFile(top.file, top.line);
    hooks.ready = true;
    document.body.dataset.ready = "1";
  }
  track(start()).catch((e) => { $("status").textContent = "error: " + e.message; hooks.error = String(e); });
})();
