// memlens live: the source browser over a running collector. No module-specific
// code: the columns and the menu come from what each module registers. No
// innerHTML: every text from the program goes in through textContent.

'use strict';
(() => {
  const { $, el } = window.memlensUi;
  const token = window.memlensUi.TOKEN;
  // Not the program's own files (common.js).
  const isSystem = window.memlensUi.isLibrary;
  const POLL_MS = 200;
  const HISTORY = 120;
  const S = {
    ready: false, error: null, polls: 0, state: null, modules: [], columns: [],
    file: null, lines: new Map(), rows: new Map(), history: new Map(), removed: new Map(),
    pending: null, sorts: new Map(), shown: new Map(), shapes: new Map(),
  };
  window.memlens = S;

  async function call(req) {
    const r = await fetch('api/call?token=' + token, {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(req),
    });
    const v = await r.json();
    if (!v.ok) throw new Error(v.error);
    return v.result;
  }
  const status = (msg) => { $('status').textContent = msg || ''; };

  // Every data column of every usable module, in module order.
  function setModules(mods) {
    S.modules = mods.filter((m) => m.available);
    S.columns = [];
    for (const m of S.modules) {
      for (const c of m.columns) S.columns.push({ module: m.name, name: c.name, unit: c.unit });
    }
  }

  // The program's files (from DWARF) as a collapsible tree.
  function buildTree(files) {
    const root = { dirs: new Map(), files: [] };
    for (const f of files) {
      const parts = f.split('/').filter((p) => p);
      let n = root;
      for (const d of parts.slice(0, -1)) {
        if (!n.dirs.has(d)) n.dirs.set(d, { dirs: new Map(), files: [] });
        n = n.dirs.get(d);
      }
      n.files.push({ name: parts[parts.length - 1] || f, path: f });
    }
    const render = (n, parent) => {
      for (const [name, d] of [...n.dirs].sort()) {
        let label = name;
        let dd = d;
        while (dd.files.length === 0 && dd.dirs.size === 1) {
          const [k, v] = [...dd.dirs][0];
          label += '/' + k;
          dd = v;
        }
        const det = el('details');
        // System headers and library crates start folded: the program's own files
        // are what one probes.
        det.open = !(parent === $('tree') && isSystem('/' + label + '/'));
        det.append(el('summary', null, label + '/'));
        render(dd, det);
        parent.append(det);
      }
      for (const f of n.files.sort((a, b) => (a.name < b.name ? -1 : 1))) {
        const a = el('span', 'file', f.name);
        a.dataset.path = f.path;
        a.title = f.path;
        a.addEventListener('click', () => openFile(f.path).catch((e) => status(e.message)));
        parent.append(a);
      }
    };
    $('tree').replaceChildren();
    render(root, $('tree'));
  }

  async function openFile(path) {
    const src = await call({ cmd: 'source', file: path });
    S.file = path;
    S.lines = new Map(src.lines.map(([l, f]) => [l, f]));
    for (const e of document.querySelectorAll('#tree .file')) {
      e.classList.toggle('open', e.dataset.path === path);
    }
    const t = $('code');
    const body = el('tbody');
    const head = el('tr');
    head.append(el('th', null, '#'));
    head.append(el('th', 'src', path));
    for (const c of S.columns) {
      const th = el('th', 'm', c.module + ' ' + c.name);
      th.title = c.unit;
      head.append(th);
    }
    body.append(head);
    S.rows = new Map();
    const text = src.text.split('\n');
    if (text.length && text[text.length - 1] === '') text.pop();
    let prevFn = null;
    text.forEach((s, i) => {
      const ln = i + 1;
      const tr = el('tr');
      tr.dataset.line = String(ln);
      tr.append(el('td', 'n', String(ln)));
      const code = el('td', 'src', s);
      code.title = s;
      tr.append(code);
      for (let k = 0; k < S.columns.length; k++) tr.append(el('td', 'm', ''));
      if (S.lines.has(ln)) {
        tr.classList.add('code');
        const f = S.lines.get(ln);
        if (f && f !== prevFn) tr.classList.add('fn');
        prevFn = f;
      }
      S.rows.set(ln, tr);
      body.append(tr);
    });
    t.replaceChildren(body);
    render();
  }

  const probes = () => (S.state ? S.state.probes : []);
  const atLine = (p, file, line) => (p.lines || []).some(([f, l]) => f === file && l === line);
  const inFile = (p, file) => (p.lines || []).some(([f]) => f === file);
  const inFunc = (p, file, fn) =>
    (p.lines || []).some(([f, l]) => f === file && S.lines.get(l) === fn);

  // Per data column, the sum over `ps` of the probes' values.
  function sums(ps) {
    return S.columns.map((c) => {
      let v = null;
      for (const p of ps) {
        if (p.module === c.module && typeof p[c.name] === 'number') v = (v || 0) + p[c.name];
      }
      return v;
    });
  }
  const fmt = (v) => (v === null ? '' : String(v));

  function render() {
    const ps = probes();
    for (const [ln, tr] of S.rows) {
      const here = ps.filter((p) => atLine(p, S.file, ln));
      tr.classList.toggle('probed', here.length > 0);
      const cells = tr.querySelectorAll('td.m');
      sums(here).forEach((v, k) => { if (cells[k].textContent !== fmt(v)) cells[k].textContent = fmt(v); });
    }
    renderTotals(ps);
    renderProbes(ps);
    renderPanels(ps);
  }

  // The tables probes publish (`tables` in state): a panel each, sortable by any
  // column (a click on its header; again to reverse), redrawn at every poll.
  function renderPanels(ps) {
    const box = $('panels');
    const want = [];
    const all = ps.map((p) => [p, false]).concat([...S.removed.values()].map((p) => [p, true]));
    for (const [p, gone] of all) {
      (p.tables || []).forEach((t, i) => want.push({ key: p.id + '/' + i, p, t, gone }));
    }
    const have = new Map([...box.children].map((d) => [d.dataset.key, d]));
    const keep = new Set(want.map((w) => w.key));
    for (const [k, d] of have) {
      if (!keep.has(k)) {
        d.remove();
        S.shown.delete(k);
        S.shapes.delete(k);
      }
    }
    for (const w of want) {
      let d = have.get(w.key);
      if (!d) {
        d = el('div', 'panel');
        d.dataset.key = w.key;
        d.dataset.probe = String(w.p.id);
        d.dataset.module = w.p.module;
        d.append(el('div', 'title'), el('table'));
        box.append(d);
      }
      d.classList.toggle('removed', w.gone);
      d.dataset.title = w.t.title;
      d.firstChild.textContent = '#' + w.p.id + ' ' + w.p.spec + ': ' + w.t.title + (w.gone ? ' (removed)' : '');
      fillTable(d.lastChild, w.key, w.t);
    }
  }

  const cellText = (v) => (v === null || v === undefined ? '' : String(v));
  function compare(a, b) {
    if (a === b) return 0;
    if (a === null || a === undefined) return 1;
    if (b === null || b === undefined) return -1;
    if (typeof a === 'number' && typeof b === 'number') return a - b;
    return String(a).localeCompare(String(b));
  }

  // A "series" column's cells are [[ms, value], ...]: only pairs of finite numbers
  // are drawn, anything else is ignored.
  const points = (v) => (Array.isArray(v) ? v : []).filter((p) =>
    Array.isArray(p) && p.length === 2 && Number.isFinite(p[0]) && Number.isFinite(p[1]));
  const lastValue = (v) => {
    const p = points(v);
    return p.length ? p[p.length - 1][1] : null;
  };
  const SVG_NS = 'http://www.w3.org/2000/svg';
  const SPARK_W = 120;
  const SPARK_H = 18;

  // An inline sparkline, built from numbers only: x from t0 to t1 (the column's
  // time span, so rows line up), y from 0 to the row's highest value.
  function sparkline(pts, t0, t1) {
    const svg = document.createElementNS(SVG_NS, 'svg');
    svg.setAttribute('class', 'spark');
    svg.setAttribute('width', String(SPARK_W));
    svg.setAttribute('height', String(SPARK_H));
    svg.setAttribute('viewBox', '0 0 ' + SPARK_W + ' ' + SPARK_H);
    if (!pts.length) return svg;
    const max = Math.max(1, ...pts.map((p) => p[1]));
    const span = Math.max(1, t1 - t0);
    const xy = pts.map(([t, v]) => [
      1 + ((t - t0) / span) * (SPARK_W - 4),
      SPARK_H - 2 - (Math.max(0, v) / max) * (SPARK_H - 4),
    ]);
    const line = document.createElementNS(SVG_NS, 'polyline');
    line.setAttribute('points', xy.map(([x, y]) => x.toFixed(1) + ',' + y.toFixed(1)).join(' '));
    const [lx, ly] = xy[xy.length - 1];
    const dot = document.createElementNS(SVG_NS, 'circle');
    dot.setAttribute('cx', lx.toFixed(1));
    dot.setAttribute('cy', ly.toFixed(1));
    dot.setAttribute('r', '1.5');
    svg.append(line, dot);
    return svg;
  }

  function fillTable(table, key, t) {
    const sort = S.sorts.get(key) || { col: t.sort === null ? -1 : t.sort, desc: true };
    // Unchanged: keep the elements (a click or a selection in them stays valid).
    const shown = JSON.stringify([t, sort]);
    if (S.shown.get(key) === shown) return;
    S.shown.set(key, shown);
    const series = t.columns.map((c) => c.kind === 'series');
    // A series sorts by its last value.
    const sortKey = (r, k) => (series[k] ? lastValue(r.cells[k]) : r.cells[k]);
    const rows = t.rows.slice();
    if (sort.col >= 0 && sort.col < t.columns.length) {
      // Stable: ties keep the probe's own order.
      rows.sort((a, b) => {
        const [x, y] = [sortKey(a, sort.col), sortKey(b, sort.col)];
        const c = compare(x, y);
        const nulls = x === null || y === null;
        return sort.desc && !nulls ? -c : c;
      });
    }
    const numeric = t.columns.map((_, k) => t.rows.every((r) => typeof r.cells[k] !== 'string'));
    // Each series column's time span, shared by its rows.
    const spans = t.columns.map((_, k) => {
      const ts = series[k] ? t.rows.flatMap((r) => points(r.cells[k]).map((p) => p[0])) : [];
      return ts.length ? [Math.min(...ts), Math.max(...ts)] : [0, 0];
    });
    const body = el('tbody');
    const head = el('tr');
    t.columns.forEach((c, k) => {
      const th = el('th', numeric[k] ? null : 's', c.name + (k === sort.col ? (sort.desc ? ' \u25BC' : ' \u25B2') : ''));
      if (k === sort.col) th.classList.add('sorted');
      th.title = c.unit;
      th.dataset.col = String(k);
      th.addEventListener('click', () => {
        S.sorts.set(key, { col: k, desc: k === sort.col ? !sort.desc : true });
        fillTable(table, key, t);
      });
      head.append(th);
    });
    body.append(head);
    for (const r of rows) {
      const tr = el('tr');
      r.cells.forEach((v, k) => {
        if (series[k]) {
          const td = el('td', 'series');
          const pts = points(v);
          const svg = sparkline(pts, spans[k][0], spans[k][1]);
          const line = svg.querySelector('polyline');
          td.dataset.points = line ? line.getAttribute('points') : '';
          td.append(svg);
          if (pts.length) {
            const max = Math.max(...pts.map((p) => p[1]));
            const secs = Math.round((pts[pts.length - 1][0] - pts[0][0]) / 1000);
            td.title = 'now ' + pts[pts.length - 1][1] + ', max ' + max + ' over ' + secs + ' s (' + t.columns[k].unit + ')';
          }
          tr.append(td);
          return;
        }
        const td = el('td', numeric[k] ? null : 's', cellText(v));
        td.title = cellText(v);
        // The row's source line: its first text cell opens it.
        if (r.at && typeof v === 'string' && !tr.querySelector('td.at')) {
          td.classList.add('at');
          td.title = r.at[0] + ':' + r.at[1];
          td.addEventListener('click', () => showLine(r.at[0], r.at[1]).catch((e) => status(e.message)));
        }
        tr.append(td);
      });
      body.append(tr);
    }
    // The same columns, sort and rows in the same order: the cells change in place,
    // so the elements stay (a click or a selection in them stays valid while the
    // numbers and sparklines move at every sample).
    const shape = JSON.stringify([t.columns, sort, numeric,
      rows.map((r) => [r.at, r.cells.filter((c) => typeof c === 'string')])]);
    const old = table.firstChild;
    if (old && S.shapes.get(key) === shape) patch(old, body);
    else table.replaceChildren(body);
    S.shapes.set(key, shape);
  }

  // Copies the cells of `fresh` (a tbody of the same shape) into `old`.
  function patch(old, fresh) {
    [...fresh.rows].forEach((tr, i) => {
      [...tr.cells].forEach((td, k) => {
        const o = old.rows[i].cells[k];
        if (td.classList.contains('series')) {
          if (o.dataset.points !== td.dataset.points) {
            o.replaceChildren(...td.childNodes);
            o.dataset.points = td.dataset.points;
          }
        } else if (o.textContent !== td.textContent) {
          o.textContent = td.textContent;
        }
        if (o.title !== td.title) o.title = td.title;
      });
    });
  }

  async function showLine(file, line) {
    if (S.file !== file) await openFile(file);
    for (const tr of document.querySelectorAll('#code tr.hit')) tr.classList.remove('hit');
    const tr = S.rows.get(line);
    if (!tr) return;
    tr.classList.add('hit');
    tr.scrollIntoView({ block: 'center' });
  }

  // Aggregates: the program, the open file, and each function of it.
  function renderTotals(ps) {
    const t = $('totals');
    const rows = [['program', ps]];
    if (S.file) {
      rows.push(['file ' + S.file.split('/').pop(), ps.filter((p) => inFile(p, S.file))]);
      const fns = [...new Set([...S.lines.values()].filter((f) => f))];
      for (const f of fns) {
        const fp = ps.filter((p) => inFunc(p, S.file, f));
        if (fp.length) rows.push(['function ' + f, fp]);
      }
    }
    const body = el('tbody');
    const head = el('tr');
    head.append(el('th', null, ''));
    for (const c of S.columns) head.append(el('th', null, c.module + ' ' + c.name));
    body.append(head);
    for (const [label, group] of rows) {
      const tr = el('tr');
      tr.dataset.scope = label;
      tr.append(el('td', null, label));
      for (const v of sums(group)) tr.append(el('td', 'm', fmt(v)));
      body.append(tr);
    }
    t.replaceChildren(body);
  }

  const valueText = (p) => Object.entries(p)
    .filter(([k, v]) => !['id', 'spec', 'module', 'location', 'lines', 'tables'].includes(k) && typeof v === 'number')
    .map(([k, v]) => k + '=' + v).join(' ');

  // The first column a probe's module registered, as a rate per second over time.
  function sample(p, t) {
    const col = S.columns.find((c) => c.module === p.module);
    const v = col ? p[col.name] : undefined;
    if (typeof v !== 'number') return;
    const h = S.history.get(p.id) || [];
    h.push([t, v]);
    if (h.length > HISTORY) h.shift();
    S.history.set(p.id, h);
  }

  function spark(canvas, h) {
    const w = (canvas.width = 300);
    const hh = (canvas.height = 28);
    const g = canvas.getContext('2d');
    g.clearRect(0, 0, w, hh);
    const rates = [];
    for (let i = 1; i < h.length; i++) {
      const dt = Math.max(1, h[i][0] - h[i - 1][0]);
      rates.push(((h[i][1] - h[i - 1][1]) * 1000) / dt);
    }
    if (!rates.length) return;
    const max = Math.max(1, ...rates);
    g.strokeStyle = '#d50';
    g.beginPath();
    rates.forEach((r, i) => {
      const x = (i / Math.max(1, HISTORY - 2)) * w;
      const y = hh - 2 - (r / max) * (hh - 4);
      if (i) g.lineTo(x, y); else g.moveTo(x, y);
    });
    g.stroke();
    canvas.title = 'last: ' + Math.round(rates[rates.length - 1]) + '/s, peak ' + Math.round(max) + '/s';
  }

  function probeBox(p, gone) {
    const d = el('div', 'probe');
    d.dataset.id = String(p.id);
    if (gone) d.classList.add('removed');
    d.append(el('div', 'spec', '#' + p.id + ' ' + p.spec + (gone ? ' (removed)' : '')));
    d.append(el('div', 'loc', p.location));
    d.append(el('div', 'vals', valueText(p)));
    const c = el('canvas');
    spark(c, S.history.get(p.id) || []);
    d.append(c);
    if (!gone) {
      const b = el('button', null, 'remove');
      b.dataset.rm = String(p.id);
      b.addEventListener('click', () => act({ rm: p.id }));
      d.append(b);
    }
    return d;
  }

  function renderProbes(ps) {
    const box = $('probes');
    const live = new Set(ps.map((p) => p.id));
    // A probe that left keeps its last values, frozen, marked removed.
    for (const d of box.querySelectorAll('.probe:not(.removed)')) {
      const id = Number(d.dataset.id);
      if (!live.has(id) && S.last && S.last.has(id)) S.removed.set(id, S.last.get(id));
    }
    S.last = new Map(ps.map((p) => [p.id, p]));
    const items = ps.map((p) => probeBox(p, false));
    for (const [, p] of [...S.removed].sort((a, b) => a[0] - b[0])) items.push(probeBox(p, true));
    box.replaceChildren(...items);
  }

  async function poll() {
    const st = await call({ cmd: 'state' });
    S.state = st;
    S.polls++;
    $('target').textContent = 'PID ' + st.pid + ' ' + st.exe;
    for (const p of st.probes) sample(p, st.time_ms);
    render();
  }

  async function loop() {
    try {
      await poll();
    } catch (e) {
      status(e.message);
    }
    setTimeout(loop, POLL_MS);
  }

  // The menu: every action of every usable module, placed at this line or its function.
  function menuItems(line) {
    const here = S.file + ':' + line;
    const fn = S.lines.get(line);
    const groups = [];
    if (S.pending) {
      groups.push(['pending', [{ label: S.pending.label + ': stop here', spec: S.pending.spec.split('{stop}').join(here) }]]);
    }
    for (const m of S.modules) {
      const items = [];
      for (const a of m.actions) {
        const s = a.spec;
        if (s.includes('{start}')) {
          items.push({ label: a.label, start: s.split('{start}').join(here), text: a.label });
        } else if (s.includes('{loc}')) {
          items.push({ label: a.label + ' (line ' + line + ')', spec: s.split('{loc}').join(here) });
          if (fn) items.push({ label: a.label + ' (function ' + fn + ')', spec: s.split('{loc}').join(fn) });
        } else if (s.includes('{func}')) {
          if (fn) items.push({ label: a.label + ' (function ' + fn + ')', spec: s.split('{func}').join(fn) });
        } else {
          items.push({ label: a.label, spec: s });
        }
      }
      if (items.length) groups.push([m.name, items]);
    }
    const rm = probes().filter((p) => atLine(p, S.file, line))
      .map((p) => ({ label: 'remove probe ' + p.id + ' (' + p.spec + ')', rm: p.id }));
    if (rm.length) groups.push(['probes here', rm]);
    return groups;
  }

  function showMenu(x, y, line) {
    const menu = $('menu');
    menu.replaceChildren();
    for (const [name, items] of menuItems(line)) {
      menu.append(el('div', 'head', name));
      for (const it of items) {
        const d = el('div', 'item', it.label);
        if (it.spec) d.dataset.spec = it.spec;
        if (it.rm) d.dataset.rm = String(it.rm);
        if (it.start) d.dataset.start = it.start;
        d.addEventListener('click', () => act(it));
        menu.append(d);
      }
    }
    menu.style.left = x + 'px';
    menu.style.top = y + 'px';
    menu.hidden = false;
  }
  const hideMenu = () => { $('menu').hidden = true; };

  async function act(it) {
    hideMenu();
    try {
      if (it.start) {
        S.pending = { label: it.text, spec: it.start };
        $('pending').textContent = it.text + ': right-click the stop line (Esc cancels)';
        return;
      }
      if (it.rm) {
        await call({ cmd: 'rm', id: it.rm });
        status('removed probe ' + it.rm);
      } else {
        const id = await call({ cmd: 'add', spec: it.spec });
        status('probe ' + id + ': ' + it.spec);
        if (it.spec.includes('..')) S.pending = null;
        $('pending').textContent = '';
      }
      await poll();
    } catch (e) {
      status(e.message);
    }
  }

  $('code').addEventListener('contextmenu', (ev) => {
    const tr = ev.target.closest('tr.code');
    if (!tr) return;
    ev.preventDefault();
    showMenu(ev.clientX, ev.clientY, Number(tr.dataset.line));
  });
  document.addEventListener('click', (ev) => { if (!ev.target.closest('#menu')) hideMenu(); });
  document.addEventListener('keydown', (ev) => {
    if (ev.key === 'Escape') {
      hideMenu();
      S.pending = null;
      $('pending').textContent = '';
    }
  });

  S.openFile = openFile;
  S.showLine = showLine;
  S.menu = (line) => showMenu(10, 10, line);
  (async () => {
    try {
      setModules(await call({ cmd: 'modules' }));
      const files = await call({ cmd: 'files' });
      buildTree(files);
      await poll();
      // Open where the first probe is, else the program's first own file.
      const probed = probes().find((p) => p.lines && p.lines.length);
      const first = probed ? probed.lines[0][0] : files.find((f) => !isSystem(f));
      if (first) await openFile(first);
      S.ready = true;
      setTimeout(loop, POLL_MS);
    } catch (e) {
      S.error = e.message;
      status(e.message);
    }
  })();
})();
