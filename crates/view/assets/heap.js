// memlens view: the heap over time, as heaptrack and DHAT show it — bytes in use and
// the allocation rate on the page's X axis (wall-clock when the trace has stamps,
// else the merged order), the peak (t-gmax) marked, the allocation sites live at the
// peak and those still live at exit — from /api/heap (the `analyze heap` kernel).
"use strict";
(function () {
  const H = () => window.memlens;
  const $ = (id) => document.getElementById(id);
  const GUT = 70; // y-axis labels
  const P = { data: null, axis: "order", draws: 0 };

  function wait() { if (H() && H().ready) init(); else setTimeout(wait, 30); }

  function init() {
    H().heapView = { show, data: () => P.data, draws: () => P.draws, query: () => P.query, note: () => ($("heapnote").hidden ? "" : $("heapnote").textContent) };
    window.addEventListener("resize", () => { if (P.data && !$("heapview").hidden) draw(); });
    $("heapchart").addEventListener("mousemove", hover);
    $("heapchart").addEventListener("mouseleave", () => { $("tip").hidden = true; });
  }

  const bytes = (n) => (n >= 1 << 30 ? (n / (1 << 30)).toFixed(2) + " GiB" : n >= 1 << 20 ? (n / (1 << 20)).toFixed(2) + " MiB" : n >= 1 << 10 ? (n / (1 << 10)).toFixed(1) + " KiB" : n + " B");
  function xLabel(x) {
    const d = P.data;
    if (d.axis === "time") return "+" + ((x - H().meta.time.t0) / 1e6).toFixed(3) + " ms";
    return "op " + H().fmt(Math.round(x));
  }

  // The page's time selection, on the chart's axis: a range selected on the
  // wall-clock lanes keeps its ns; one from the flame chart or the URL is merged
  // operations (the server maps them to ns on the time axis).
  function selection(time) {
    const st = H().st, r = st.range;
    if (!r) return null;
    const ls = H().lanes && H().lanes.selection;
    if (time && ls && ls.g0 === r.t0 && ls.g1 === r.t1) return { x0: Math.floor(ls.t0), x1: Math.ceil(ls.t1) };
    return { op0: r.t0, op1: r.t1 };
  }

  let seq = 0;
  async function show() {
    const meta = H().meta, my = ++seq;
    const time = $("xmode").value === "time" && meta.time && meta.lanes && meta.lanes.length;
    const W = Math.max(100, $("heapchart").clientWidth - GUT);
    const q = { axis: time ? "time" : "order", n: Math.min(4096, Math.round(W)) };
    const sel = selection(time);
    if (sel) Object.assign(q, sel);
    const r = await (await H().api("api/heap", q)).json();
    if (my !== seq) return; // a newer selection asked again
    P.data = r;
    P.query = q;
    P.range = !!sel;
    note(r);
    draw();
    tables(r);
  }

  // Above the chart: which part of the run it shows.
  function note(r) {
    const el = $("heapnote");
    el.replaceChildren();
    el.hidden = !P.range;
    if (!P.range) return;
    const t = document.createElement("span");
    t.textContent = "showing the selected range " + xLabel(r.x0) + " .. " + xLabel(r.x1) + " (the tables: whole run) ";
    const b = document.createElement("button");
    b.textContent = "clear selection: whole run";
    b.addEventListener("click", () => $("clearsel").click());
    el.append(t, b);
  }

  function draw() {
    const d = P.data, cv = $("heapchart");
    const dpr = window.devicePixelRatio || 1;
    const w = cv.clientWidth, h = cv.clientHeight;
    cv.width = Math.round(w * dpr); cv.height = Math.round(h * dpr);
    const g = cv.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, h);
    const W = w - GUT, top = 14, liveH = Math.round((h - top - 18) * 0.68), rateY = top + liveH + 6, rateH = h - rateY - 16;
    const bins = d.bins, maxLive = Math.max(1, d.peak.bytes, ...bins.map((b) => b[2]));
    const maxRate = Math.max(1, ...bins.map((b) => b[4]));
    const xOf = (x) => GUT + ((x - d.x0) / (d.x1 - d.x0)) * W;
    g.font = "10px sans-serif";
    // bytes in use: the most live in each bin (area), and at its end (line)
    g.fillStyle = "rgba(79,160,122,0.55)";
    for (const b of bins) {
      const x0 = xOf(b[0]), x1 = Math.max(x0 + 1, xOf(b[1]));
      const hh = (b[2] / maxLive) * liveH;
      g.fillRect(x0, top + liveH - hh, x1 - x0, hh);
    }
    g.strokeStyle = "#8fe0b0"; g.lineWidth = 1;
    g.beginPath();
    bins.forEach((b, k) => { const y = top + liveH - (b[3] / maxLive) * liveH; if (k) g.lineTo(xOf(b[0]), y); else g.moveTo(xOf(b[0]), y); g.lineTo(xOf(b[1]), y); });
    g.stroke();
    // allocation rate: bytes allocated per bin (orange), freed (grey) below it
    for (const b of bins) {
      const x0 = xOf(b[0]), x1 = Math.max(x0 + 1, xOf(b[1]));
      const a = (b[4] / maxRate) * rateH, f = Math.min(rateH, (b[5] / maxRate) * rateH);
      g.fillStyle = "#d9902a"; g.fillRect(x0, rateY + rateH - a, x1 - x0, a);
      g.fillStyle = "rgba(160,160,180,0.5)"; g.fillRect(x0, rateY + rateH - f, x1 - x0, Math.max(0, f - a));
    }
    // the peak
    // the whole run's peak, where it falls inside the shown range
    const pk = d.axis === "time" ? d.peak.ns : d.peak.op;
    const px = xOf(pk);
    g.fillStyle = "#ff8080";
    if (pk >= d.x0 && pk <= d.x1) {
      g.strokeStyle = "#ff5d5d"; g.setLineDash([4, 3]);
      g.beginPath(); g.moveTo(px, top - 2); g.lineTo(px, rateY + rateH); g.stroke();
      g.setLineDash([]);
      const label = "peak " + bytes(d.peak.bytes) + " at " + xLabel(pk);
      g.fillText(label, Math.min(Math.max(GUT, px + 4), w - g.measureText(label).width - 4), top - 3);
    } else {
      g.fillText("the whole run's peak (" + bytes(d.peak.bytes) + " at " + xLabel(pk) + ") is outside this range", GUT, top - 3);
    }
    // axes
    g.fillStyle = "#999";
    g.fillText(bytes(maxLive), 2, top + 8);
    g.fillText("0", 2, top + liveH);
    g.fillText("alloc/bin", 2, rateY + 10);
    g.fillText(bytes(maxRate), 2, rateY + 22);
    for (let k = 0; k <= 4; k++) {
      const x = d.x0 + ((d.x1 - d.x0) * k) / 4, t = xLabel(x);
      g.fillText(t, Math.min(GUT + (W * k) / 4, w - g.measureText(t).width - 2), h - 3);
    }
    P.draws++;
    cv.dataset.peak = d.peak.bytes;
    cv.dataset.axis = d.axis;
    cv.dataset.x0 = d.x0;
    cv.dataset.x1 = d.x1;
  }

  function hover(e) {
    const d = P.data, tip = $("tip");
    if (!d || e.offsetX < GUT) { tip.hidden = true; return; }
    const W = $("heapchart").clientWidth - GUT;
    const x = d.x0 + ((e.offsetX - GUT) / W) * (d.x1 - d.x0);
    const b = d.bins.find((q) => x >= q[0] && x < q[1]);
    if (!b) { tip.hidden = true; return; }
    tip.hidden = false;
    tip.textContent = xLabel(b[0]) + " .. " + xLabel(b[1]) + "\nin use: " + bytes(b[3]) + " (most " + bytes(b[2]) + ")\nallocated " + bytes(b[4]) + " in " + b[6] + " blocks, freed " + bytes(b[5]) + " in " + b[7];
    tip.style.left = e.clientX + 14 + "px"; tip.style.top = e.clientY + 14 + "px";
  }

  // The sites live at the peak and at exit; a row opens its source line.
  function tables(r) {
    const el = $("heapsites");
    el.replaceChildren();
    const s = r.summary || {};
    const sum = document.createElement("div");
    sum.className = "hsum";
    sum.textContent = (P.range ? "whole run: " : "") + "peak " + bytes(r.peak.bytes) + " (t-gmax) · " + H().fmt(s.blocks || 0) + " blocks, " + bytes(s.bytes || 0) + " allocated · leaked at exit " + bytes(s.leaked_bytes || 0);
    el.appendChild(sum);
    const one = (title, rows, bk, nk, id) => {
      const h = document.createElement("div");
      h.className = "hsec";
      h.textContent = title + " (" + (rows ? rows.length : 0) + ")";
      el.appendChild(h);
      const tbl = document.createElement("table");
      tbl.id = id;
      const hr = document.createElement("tr");
      for (const [t, tip] of [["site", "Allocation site (and function)"], ["bytes", "Bytes of the site's blocks live then"], ["blocks", "Blocks live then"]]) {
        const th = document.createElement("th"); th.textContent = t; th.title = tip; th.className = t === "site" ? "t" : ""; hr.appendChild(th);
      }
      tbl.appendChild(hr);
      for (const row of rows || []) {
        const tr = document.createElement("tr");
        tr.className = "row";
        // file name, line and function; the full path and the call stack on hover
        const a = document.createElement("td"); a.className = "t";
        a.textContent = row.file ? (row.file.split("/").pop() + ":" + row.line + " (" + row.function + ")") : row.site;
        a.title = row.site + "\n" + (row.stack || []).join("\n"); a.dataset.site = row.site; tr.appendChild(a);
        const b = document.createElement("td"); b.textContent = bytes(row[bk]); b.title = String(row[bk]); tr.appendChild(b);
        const c = document.createElement("td"); c.textContent = H().fmt(row[nk]); tr.appendChild(c);
        tr.addEventListener("click", () => {
          const full = H().meta.source.find((x) => x.file === row.file || x.file.endsWith("/" + row.file));
          if (full && row.line) { H().showView("source"); H().showFile(full.file, row.line); }
        });
        tbl.appendChild(tr);
      }
      el.appendChild(tbl);
    };
    const whole = P.range ? " — whole run" : "";
    one("live at the peak" + whole, r.at_peak, "at_peak_bytes", "at_peak_blocks", "hpeak");
    one("live at exit (leaks)" + whole, r.leaks, "live_bytes_at_end", "live_at_end", "hleaks");
  }

  wait();
})();
