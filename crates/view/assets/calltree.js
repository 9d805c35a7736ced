// memlens view: the call tree, as KCachegrind and heaptrack show it — top-down,
// inverted (bottom-up) and the callers and callees of one function — from
// /api/calltree. Expandable rows, sortable columns; names only ever as textContent.
"use strict";
(function () {
  const H = () => window.memlens;
  const $ = (id) => document.getElementById(id);
  // [key, header, tooltip, column of the cost arrays (loads, stores, bytes, misses)]
  const COLS = [
    ["calls", "calls", "Calls along this path (bottom-up, top level: all calls of the function)", -1],
    ["il", "incl. loads", "Inclusive loads: done in this function and everything it called (along this path)", 0],
    ["is", "incl. stores", "Inclusive stores: done in this function and everything it called", 1],
    ["ib", "incl. bytes", "Inclusive bytes loaded and stored", 2],
    ["im", "incl. misses", "Inclusive L1 misses (from the cachesim annotation)", 3],
    ["el", "self loads", "Exclusive loads: done in this function itself (bottom-up: reached through this call path)", 0],
    ["es", "self stores", "Exclusive stores: done in this function itself", 1],
    ["eb", "self bytes", "Exclusive bytes loaded and stored", 2],
    ["em", "self misses", "Exclusive L1 misses (from the cachesim annotation)", 3],
  ];
  const C = { mode: "top", misses: false, sort: "il", desc: true, roots: [], fn: null, rendered: 0, names: [], loads: 0 };

  function wait() { if (H() && H().ready) init(); else setTimeout(wait, 30); }

  function init() {
    H().callTree = { show, stale: () => !sameRange(C.range, H().st.range), range: () => C.range, mode: () => C.mode, fn: () => C.fn, rows: () => C.rendered, names: () => C.names.slice(), expand, loads: () => C.loads, data: () => C.data };
    $("ctmode").addEventListener("change", (e) => show(e.target.value));
  }

  // With a time range selected, every request of one tree asks for that range's
  // tree (x0, x1: merged operations), the one show() started with.
  function get(params) {
    C.loads++;
    if (C.range) params = Object.assign({ x0: C.range.t0, x1: C.range.t1 }, params);
    return H().api("api/calltree", params).then((r) => r.json());
  }
  const sameRange = (a, b) => (!a && !b) || (a && b && a.t0 === b.t0 && a.t1 === b.t1);
  // Above the tree: which part of the run it counts.
  function note() {
    const el = $("ctnote");
    el.replaceChildren();
    el.hidden = !C.range;
    if (!C.range) return;
    const t = document.createElement("span");
    t.textContent = "call tree of the selected range: operations " + H().fmt(C.range.t0) + " .. " + H().fmt(C.range.t1) +
      " (costs inside it; calls: entered in it) ";
    const b = document.createElement("button");
    b.textContent = "clear selection: whole run";
    b.addEventListener("click", () => $("clearsel").click());
    el.append(t, b);
  }

  // One row of the model: {key, name, fid, calls, incl, excl, kids: null (not fetched) | [], open, more, fetch}
  function rowOf(r, fetchKids) {
    return { name: r.name, fid: r.function, calls: r.calls, incl: r.incl, excl: r.excl, kids: null, open: false, hasKids: fetchKids !== null, fetch: fetchKids };
  }

  async function show(mode, arg) {
    const r = H().st.range;
    C.range = r ? { t0: r.t0, t1: r.t1 } : null;
    note();
    C.mode = mode;
    $("ctmode").value = mode;
    C.roots = [];
    if (mode === "top") {
      const r = await get({ view: "top", node: 0 });
      C.misses = r.misses;
      const root = rowOf(r.self, () => topKids(0));
      root.name = "(whole program; self: outside any function)";
      root.kids = await merge(r.rows.map(topRow), root);
      await settle(root.kids);
      root.open = true;
      C.roots = [root];
    } else if (mode === "bottom") {
      const r = await get({ view: "bottom", path: "" });
      C.misses = r.misses;
      C.roots = shown(r.rows).map((x) => bottomRow(x, [x.function]));
    } else {
      let f = arg === undefined ? C.fn : arg;
      if (f === null || f === undefined) {
        // the function with the most inclusive loads and stores below the root
        const r = await get({ view: "top", node: 0 });
        f = r.rows.length ? r.rows[0].function : null;
      }
      C.fn = f;
      if (f !== null) {
        const r = await get({ view: "function", function: f });
        C.misses = r.misses;
        const head = (t) => ({ head: t });
        const callers = shown(r.callers).map((x) => Object.assign(rowOf(x, null), { excl: null }));
        const me = Object.assign(rowOf(r, null), { self: true });
        const callees = shown(r.callees).map((x) => Object.assign(rowOf(x, null), { excl: null }));
        C.roots = [head("callers of " + r.name), ...callers, head("the function"), me, head("called by " + r.name), ...callees];
      }
    }
    render();
    if (H().stateChanged) H().stateChanged(); // the mode and function go into the URL
  }

  function topRow(x) {
    const r = rowOf(x, x.children ? (parent) => topKids(x.node, parent) : null);
    r.node = x.node;
    return r;
  }
  async function topKids(node, parent) {
    const r = await get({ view: "top", node });
    return merge(r.rows.map(topRow), parent);
  }
  // "hide library frames": a library function's row goes, its own cost joins the
  // nearest shown caller's self cost and its callees take its place (at most
  // MERGE_FETCHES requests per expansion; past that the library rows stay).
  const MERGE_FETCHES = 500;
  async function merge(rows, parent, budget) {
    if (!H().st.hideLib || !parent) return rows;
    budget = budget || { n: MERGE_FETCHES };
    const out = [];
    for (const r of rows) {
      if (!H().isLibFunc(r.name) || (r.hasKids && budget.n <= 0)) { out.push(r); continue; }
      if (r.excl && parent.excl) parent.excl = parent.excl.map((v, k) => v + (r.excl[k] || 0));
      if (r.hasKids) {
        budget.n--;
        const g = await get({ view: "top", node: r.node });
        out.push(...(await merge(g.rows.map(topRow), parent, budget)));
      }
    }
    return out;
  }
  // With library rows merged, a row's self cost is final only once its children are
  // fetched: rows on screen fetch theirs (one level ahead) before they are drawn.
  async function settle(rows) {
    if (!H().st.hideLib || C.mode !== "top") return;
    for (const r of rows) {
      if (!r.hasKids || r.kids !== null) continue;
      r.kids = await r.fetch(r);
      r.hasKids = r.kids.length > 0;
    }
  }
  const shown = (rows) => (H().st.hideLib ? rows.filter((x) => !H().isLibFunc(x.name)) : rows);
  function bottomRow(x, path) {
    const r = rowOf(x, x.root ? null : () => bottomKids(path));
    if (path.length > 1) r.calls = x.calls;
    return r;
  }
  async function bottomKids(path) {
    const r = await get({ view: "bottom", path: path.join(",") });
    return shown(r.rows).map((x) => bottomRow(x, path.concat([x.function])));
  }

  async function toggle(row) {
    if (!row.hasKids) return;
    if (!row.open && row.kids === null) row.kids = await row.fetch(row);
    row.open = !row.open;
    if (row.open) await settle(row.kids);
    render();
  }
  // Opens every row down to `depth` levels (tests, and a quick look).
  async function expand(depth) {
    const go = async (rows, d) => {
      for (const r of rows) {
        if (!r.hasKids) continue;
        if (d >= depth) { await settle([r]); continue; }
        if (r.kids === null) r.kids = await r.fetch(r);
        r.open = true;
        await settle(r.kids);
        await go(r.kids, d + 1);
      }
    };
    await go(C.roots.filter((r) => !r.head), 0);
    render();
    return C.rendered;
  }

  function val(r, key) {
    if (key === "calls") return r.calls;
    const c = COLS.find((x) => x[0] === key);
    const arr = key[0] === "i" ? r.incl : r.excl;
    return arr ? arr[c[3]] : null;
  }
  function sorted(rows) {
    if (C.mode === "function") return rows; // sections keep their order
    const k = C.sort, s = C.desc ? -1 : 1;
    return rows.slice().sort((a, b) => s * ((val(a, k) || 0) - (val(b, k) || 0)));
  }

  function render() {
    const el = $("ctable");
    el.replaceChildren();
    const cols = COLS.filter((c) => C.misses || c[3] !== 3);
    const tbl = document.createElement("table");
    const hr = document.createElement("tr");
    const th0 = document.createElement("th");
    th0.className = "t";
    th0.textContent = "function";
    th0.title = C.mode === "bottom" ? "Each function where memory was accessed, then who called it, and who called that" : C.mode === "top" ? "Every call path from the program's entry" : "Callers, the function, and what it called";
    hr.appendChild(th0);
    for (const [key, title, tip] of cols) {
      const th = document.createElement("th");
      th.textContent = title + (C.sort === key ? (C.desc ? " ▾" : " ▴") : "");
      th.title = tip + " — click to sort";
      th.dataset.key = key;
      th.className = "sortable";
      th.addEventListener("click", () => { if (C.sort === key) C.desc = !C.desc; else { C.sort = key; C.desc = true; } render(); });
      hr.appendChild(th);
    }
    tbl.appendChild(hr);
    const names = new Set(), data = [];
    let n = 0;
    const emit = (r, depth) => {
      const tr = document.createElement("tr");
      if (r.head) {
        tr.className = "cthead";
        const td = document.createElement("td");
        td.className = "t";
        td.colSpan = cols.length + 1;
        td.textContent = r.head;
        tr.appendChild(td);
        tbl.appendChild(tr);
        return;
      }
      tr.className = "row ctrow" + (r.self ? " sel" : "");
      const td = document.createElement("td");
      td.className = "t ctname";
      td.style.paddingLeft = 4 + depth * 14 + "px";
      const tog = document.createElement("span");
      tog.className = "tog";
      tog.textContent = r.hasKids ? (r.open ? "▾ " : "▸ ") : "  ";
      tog.addEventListener("click", (e) => { e.stopPropagation(); toggle(r); });
      td.appendChild(tog);
      const nm = document.createElement("span");
      nm.textContent = r.name;
      nm.title = r.fid ? "show the callers and callees of " + r.name : "";
      td.appendChild(nm);
      td.dataset.function = r.name;
      tr.appendChild(td);
      for (const [key] of cols) {
        const c = document.createElement("td");
        const v = val(r, key);
        c.textContent = v === null || v === undefined ? "" : H().fmt(v);
        if (v !== null && v !== undefined) c.title = String(v);
        tr.appendChild(c);
      }
      tr.addEventListener("click", () => { if (r.fid) show("function", r.fid); });
      tbl.appendChild(tr);
      names.add(r.name);
      data.push({ name: r.name, fid: r.fid, depth, incl: r.incl, excl: r.excl });
      n++;
      if (r.open && r.kids) for (const k of sorted(r.kids)) emit(k, depth + 1);
    };
    for (const r of C.mode === "function" ? C.roots : sorted(C.roots)) emit(r, 0);
    el.appendChild(tbl);
    if (!n) {
      const d = document.createElement("div");
      d.className = "hint";
      d.textContent = "no calls recorded";
      el.appendChild(d);
    }
    C.rendered = n;
    C.names = [...names];
    C.data = data; // the rows as drawn (tests)
    $("ctable").dataset.rows = n;
  }

  wait();
})();
