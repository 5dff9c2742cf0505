// DeepContext viewer, page: a canvas flame graph (icicle) of the calling context tree, its bottom-up
// inverse, search, findings and source. Every name from the profile is data: it reaches the page
// only through textContent or canvas text, never as markup.
"use strict";
(function () {
  const D = JSON.parse(document.getElementById("dc-data").textContent);
  const $ = (id) => document.getElementById(id);
  const ROW = 18;          // px per tree level
  const MIN_W = 0.5;       // nodes narrower than this (px) are skipped with their subtrees
  const LABEL_MIN_W = 28;  // px needed before a box gets text
  const KIND_COLOURS = {
    root: "#9e9e9e", thread: "#b0bec5", marker: "#ce93d8", python: "#66bb6a", module: "#26a69a",
    op: "#42a5f5", native: "#ab47bc", kernel: "#ffa726", memcpy: "#ef5350", memset: "#ec407a",
    sync: "#8d6e63", instruction: "#ffee58", hook: "#d4e157",
  };
  const MATCH_COLOUR = "#e040fb";
  const S = D.strings, FK = D.frames.kind, FN = D.frames.name, FF = D.frames.file, FL = D.frames.line;
  const NF = FK.length;
  const { dict, own, makeTree, inclusive, sortChildren, fmt, pct } = DCModel;

  const metricNames = D.metrics.map((m) => m.name);
  const unitOf = dict();
  D.metrics.forEach((m) => { unitOf[m.name] = m.unit; });
  const topExcl = dict();
  metricNames.forEach((m) => { topExcl[m] = Float64Array.from(D.values[m]); });
  const TOP = makeTree(Int32Array.from(D.nodes.parent), Int32Array.from(D.nodes.frame), topExcl);
  let INV = null;

  const RANKS = DCRanks.make(D, TOP, DCModel);  // a merged job's per-rank values

  function invertedTree() {
    if (!INV) INV = DCModel.invert(TOP, metricNames, NF);
    return INV;
  }

  // ---- formatting -------------------------------------------------------------------------
  function base(path) { const k = path.lastIndexOf("/"); return k < 0 ? path : path.slice(k + 1); }
  function extraOf(f, key) {
    const pairs = own(D.frames.extra, String(f)) || [];
    for (const [k, v] of pairs) if (k === key) return v;
    return "";
  }
  function frameLabel(f) {
    const kind = D.kinds[FK[f]], name = S[FN[f]], file = S[FF[f]];
    if (kind === "python" && file) return name + " (" + base(file) + ":" + FL[f] + ")";
    if (kind === "native" && file) return name + " [" + base(file) + "]";
    if (kind === "module") {
      const cls = extraOf(f, "class");
      if (cls && cls !== name) return name + " (" + cls + ")";
    }
    return name;
  }
  // Shorter forms of a label, most informative first: a box too narrow for the full label shows
  // the innermost part of a name (`__init__.<listcomp>`, `mlp.act`), never a cut-off prefix.
  function shortName(f) {
    const kind = D.kinds[FK[f]], name = S[FN[f]];
    if (kind === "python") return name.replace(/\.<locals>\./g, ".").split(".").slice(-2).join(".");
    if (kind === "module") return name.split(".").slice(-2).join(".");
    if (kind === "native" || kind === "op") return name.split("::").slice(-1)[0];
    return name;
  }
  function labelForms(f) {
    const full = frameLabel(f), name = S[FN[f]], short = shortName(f);
    const kind = D.kinds[FK[f]], file = S[FF[f]];
    const forms = [full];
    if (kind === "python" && file) forms.push(short + " (" + base(file) + ":" + FL[f] + ")");
    forms.push(name, short);
    return forms;
  }
  function fitLabel(f, room) {
    const forms = labelForms(f);
    for (const form of forms) if (form.length <= room) return form;
    const last = forms[forms.length - 1];
    return room > 1 ? "\u2026" + last.slice(last.length - room + 1) : "";
  }
  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }

  // ---- state ------------------------------------------------------------------------------
  const state = {
    metric: metricNames.includes(D.defaultMetric) ? D.defaultMetric : (metricNames[0] || ""),
    mode: "topdown", zoom: 0, selected: -1, hover: -1,
    matchFrame: null, query: "", searchText: "",
  };
  function tree() { return state.mode === "topdown" ? TOP : invertedTree(); }

  const flame = $("dc-flame"), canvas = $("dc-canvas"), ctx = canvas.getContext("2d");
  let cssW = 0, cssH = 0, drawn = [], charW = 7, pending = false;

  function resize() {
    const dpr = window.devicePixelRatio || 1;
    cssW = flame.clientWidth;
    cssH = Math.max(flame.clientHeight, ROW);
    canvas.width = Math.round(cssW * dpr);
    canvas.height = Math.round(cssH * dpr);
    canvas.style.height = cssH + "px";
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.font = "12px system-ui, sans-serif";
    ctx.textBaseline = "middle";
    charW = ctx.measureText("abcdefghijklmnopqrstuvwxyz_ABCDEF").width / 33 || 7;
    layoutSpacer();
    draw();
  }
  function layoutSpacer() {
    const t = tree();
    if (!state.metric) return;
    inclusive(t, state.metric);
    const rows = t.maxDepth[state.metric] - t.depth[state.zoom] + 2;
    $("dc-spacer").style.height = Math.max(0, rows * ROW - cssH) + "px";
  }
  function schedule() {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => { pending = false; draw(); });
  }

  // ---- drawing ----------------------------------------------------------------------------
  function draw() {
    const t = tree(), m = state.metric;
    ctx.clearRect(0, 0, cssW, cssH);
    drawn = [];
    if (!m) { message("This profile has no metrics."); return; }
    sortChildren(t, m);
    const inc = inclusive(t, m), z = state.zoom, total = inc[z];
    if (!(total > 0)) { message("No " + m + " under this frame."); return; }
    const top = flame.scrollTop, scale = cssW / total;
    const lastRow = Math.ceil((top + cssH) / ROW), firstRow = Math.floor(top / ROW);
    const match = state.matchFrame;
    const stack = [z, 0, 0];
    while (stack.length) {
      const row = stack.pop(), x = stack.pop(), id = stack.pop();
      const w = inc[id] * scale;
      if (row >= firstRow) box(t, id, x, row, row * ROW - top, w, match);
      if (row + 1 > lastRow) continue;
      let cx = x;
      for (let k = t.start[id]; k < t.start[id + 1]; k++) {
        const c = t.kids[k], cw = inc[c] * scale;
        if (cw < MIN_W) break;  // sorted widest first: the rest are narrower still
        stack.push(c, cx, row + 1);
        cx += cw;
      }
    }
  }
  function box(t, id, x, row, y, w, match) {
    const f = t.frame[id], kind = D.kinds[FK[f]];
    const hit = match && match[f];
    ctx.globalAlpha = match && !hit ? 0.28 : 1;
    ctx.fillStyle = hit ? MATCH_COLOUR : (KIND_COLOURS[kind] || "#cccccc");
    ctx.fillRect(x, y, w > 2 ? w - 1 : w, ROW - 1);
    if (id === state.selected || id === state.hover) {
      ctx.globalAlpha = 1;
      ctx.strokeStyle = id === state.selected ? "#1d2330" : "#ffffff";
      ctx.lineWidth = 1.5;
      ctx.strokeRect(x + 0.75, y + 0.75, Math.max(w - 2.5, 0), ROW - 2.5);
    }
    if (w >= LABEL_MIN_W) {
      const room = Math.floor((w - 6) / charW);
      const text = id === 0 ? (state.mode === "topdown" ? "all" : "all (bottom-up)") : fitLabel(f, room);
      ctx.fillStyle = "#111111";
      ctx.globalAlpha = match && !hit ? 0.5 : 1;
      ctx.fillText(text, x + 3, y + ROW / 2);
    }
    ctx.globalAlpha = 1;
    drawn.push([id, x, w, row]);
  }
  function message(text) {
    ctx.fillStyle = "#7b8496";
    ctx.fillText(text, 10, ROW);
  }

  // The node under a point: walk down from the zoom root through the child under x.
  function hitTest(mx, my) {
    const t = tree(), m = state.metric;
    if (!m) return -1;
    const inc = inclusive(t, m), total = inc[state.zoom];
    if (!(total > 0) || mx < 0 || mx > cssW) return -1;
    const scale = cssW / total, row = Math.floor((my + flame.scrollTop) / ROW);
    let id = state.zoom, x = 0;
    for (let r = 0; r < row; r++) {
      let cx = x, next = -1;
      for (let k = t.start[id]; k < t.start[id + 1]; k++) {
        const c = t.kids[k], w = inc[c] * scale;
        if (w < MIN_W) break;
        if (mx >= cx && mx < cx + w) { next = c; break; }
        cx += w;
      }
      if (next < 0) return -1;
      id = next; x = cx;
    }
    return id;
  }

  // ---- panels -----------------------------------------------------------------------------
  function metricsTable(t, id) {
    const table = el("table"), head = el("tr");
    ["metric", "inclusive", "self", "share"].forEach((h) => head.appendChild(el("th", h)));
    table.appendChild(head);
    for (const m of metricNames) {
      const inc = inclusive(t, m), v = inc[id];
      if (!v && !t.excl[m][id]) continue;
      const tr = el("tr", undefined, m === state.metric ? "dc-cur" : "");
      tr.appendChild(el("td", m));
      tr.appendChild(el("td", fmt(v, unitOf[m])));
      tr.appendChild(el("td", fmt(t.excl[m][id], unitOf[m])));
      tr.appendChild(el("td", pct(v, inc[0])));
      table.appendChild(tr);
    }
    return table;
  }
  function frameBlock(t, id) {
    const wrap = el("div"), f = t.frame[id];
    wrap.appendChild(el("div", id === 0 ? "all" : S[FN[f]], "dc-name"));
    const kind = D.kinds[FK[f]];
    let where = kind;
    if (S[FF[f]]) where += " \u00b7 " + S[FF[f]] + (kind === "python" ? ":" + FL[f] : "");
    wrap.appendChild(el("div", where, "dc-muted"));
    const extra = own(D.frames.extra, String(f));
    if (extra) wrap.appendChild(el("div", extra.map((kv) => kv[0] + "=" + kv[1]).join("  "), "dc-muted"));
    wrap.appendChild(metricsTable(t, id));
    if (RANKS.ids.length > 1 && t === TOP) wrap.appendChild(RANKS.table({ el, fmt, pct }, id, state.metric, unitOf[state.metric]));
    return wrap;
  }
  const tooltip = $("dc-tooltip");
  function showTooltip(id, ev) {
    if (id < 0) { tooltip.hidden = true; return; }
    tooltip.replaceChildren(frameBlock(tree(), id));
    tooltip.hidden = false;
    const x = Math.min(ev.clientX + 14, window.innerWidth - tooltip.offsetWidth - 4);
    const y = ev.clientY + 16 + tooltip.offsetHeight > window.innerHeight ? ev.clientY - tooltip.offsetHeight - 8 : ev.clientY + 16;
    tooltip.style.left = Math.max(0, x) + "px";
    tooltip.style.top = Math.max(0, y) + "px";
  }
  function showDetails(id) {
    const body = $("dc-details-body"), t = tree();
    body.className = "";
    body.replaceChildren(frameBlock(t, id));
    const pane = DCInstructions.forSelection(instrEnv, t, id, state.mode === "topdown");
    if (pane) body.appendChild(pane);
  }
  const instrEnv = {  // the instruction pane's view of the page
    D, el, base, inclusive, extraOf,
    showSourceAt: (file, line) => showSourceAt(file, line, DCInstructions.lineSamples(instrEnv, TOP, file),
                                               unitOf["pc.samples"]),
  };

  function crumbs() {
    const nav = $("dc-crumbs"), t = tree(), path = [];
    for (let j = state.zoom; j > 0; j = t.parent[j]) path.push(j);
    path.push(0);
    path.reverse();
    nav.replaceChildren();
    const shown = path.length > 14 ? [path[0], -1].concat(path.slice(-12)) : path;
    shown.forEach((id, k) => {
      if (k) nav.appendChild(el("span", "\u203a", "dc-sep"));
      if (id < 0) { nav.appendChild(el("span", "\u2026", "dc-sep")); return; }
      const b = el("button", id === 0 ? "all" : fitLabel(t.frame[id], 40));
      b.type = "button";
      b.title = id === 0 ? "all" : frameLabel(t.frame[id]);
      b.addEventListener("click", () => zoomTo(id));
      nav.appendChild(b);
    });
  }

  function showTotal() {
    const m = state.metric;
    $("dc-total").textContent = m ? "total " + m + " = " + fmt(inclusive(TOP, m)[0], unitOf[m]) : "";
  }

  // ---- source pane ------------------------------------------------------------------------
  function lineValues(file, m) {  // inclusive per line, each recursive context counted once
    const inc = inclusive(TOP, m), out = new Map();
    for (let i = 1; i < TOP.n; i++) {
      const f = TOP.frame[i];
      if (S[FF[f]] !== file || D.kinds[FK[f]] !== "python" || !inc[i]) continue;
      let dup = false;
      for (let j = TOP.parent[i]; j > 0; j = TOP.parent[j]) if (TOP.frame[j] === f) { dup = true; break; }
      if (!dup) out.set(FL[f], (out.get(FL[f]) || 0) + inc[i]);
    }
    return out;
  }
  function showSource(f) {
    const kind = D.kinds[FK[f]], file = S[FF[f]];
    const at = kind === "instruction" ? extraOf(f, "source") : "";
    if (at) return instrEnv.showSourceAt(...DCInstructions.splitSource(at));
    if (kind !== "python" || !file) {
      $("dc-source-file").textContent = "";
      $("dc-source-body").className = "dc-muted";
      $("dc-source-body").textContent = "Not a Python frame: no source line.";
      return;
    }
    showSourceAt(file, FL[f], lineValues(file, state.metric), unitOf[state.metric]);
  }
  // `file` around `line`, each line with its value in `vals` (a Map line -> value, in `unit`).
  function showSourceAt(file, line, vals, unit) {
    const body = $("dc-source-body");
    $("dc-source-file").textContent = base(file) + ":" + line;
    body.replaceChildren();
    const src = own(D.sources.files, file);
    if (!src) {
      body.className = "dc-muted";
      body.textContent = "Source of " + file + " is not in this page: " +
        (own(D.sources.missing, file) || "only the program's own source files (.py, .cu) are embedded");
      return;
    }
    body.className = "";
    if (D.meta.start_time && src.mtime > D.meta.start_time) {
      body.appendChild(el("div", "Note: the file changed after the run; lines may not match.", "dc-muted"));
    }
    let max = 0;
    vals.forEach((v) => { if (v > max) max = v; });
    let current = null, prevEnd = 0;
    for (const [start, lines] of src.chunks) {
      if (start > prevEnd + 1) body.appendChild(el("div", "\u22ef", "dc-gap"));
      lines.forEach((text, k) => {
        const n = start + k, v = vals.get(n) || 0;
        const row = el("div", undefined, "dc-line" + (n === line ? " dc-current" : ""));
        row.appendChild(el("span", n, "dc-ln"));
        row.appendChild(el("span", v ? fmt(v, unit) : "", "dc-val"));
        const bar = el("span", undefined, "dc-bar"), fill = el("i");
        fill.style.width = (max ? Math.round(48 * v / max) : 0) + "px";
        bar.appendChild(fill);
        row.appendChild(bar);
        row.appendChild(el("span", text, "dc-code"));
        body.appendChild(row);
        if (n === line) current = row;
      });
      prevEnd = start + lines.length - 1;
    }
    if (current) current.scrollIntoView({ block: "center" });
  }

  // ---- findings ---------------------------------------------------------------------------
  function showFindings() { DCFindings.show({ D, el, base, fmt, jumpTo }); }
  function jumpTo(node) {
    if (!Number.isInteger(node) || node < 0 || node >= TOP.n) return;
    if (state.mode !== "topdown") setMode("topdown");
    zoomTo(node > 0 ? TOP.parent[node] : 0);
    select(node);
    const row = TOP.depth[node] - TOP.depth[state.zoom];
    flame.scrollTop = Math.max(0, row * ROW - cssH / 3);
    schedule();
  }

  // ---- actions ----------------------------------------------------------------------------
  function zoomTo(id) {
    state.zoom = id;
    flame.scrollTop = 0;
    crumbs();
    layoutSpacer();
    schedule();
  }
  function select(id) {
    state.selected = id;
    if (id >= 0) {
      showDetails(id);
      if (id > 0) showSource(tree().frame[id]);
    }
    schedule();
  }
  function setMetric(m) {
    if (!metricNames.includes(m)) return;
    state.metric = m;
    $("dc-metric").value = m;
    showTotal();
    layoutSpacer();
    runSearch();
    if (state.selected >= 0) select(state.selected);
    schedule();
  }
  function setMode(mode) {
    if (mode === state.mode) return;
    state.mode = mode;
    state.zoom = 0; state.selected = -1; state.hover = -1;
    $("dc-mode-topdown").classList.toggle("dc-on", mode === "topdown");
    $("dc-mode-bottomup").classList.toggle("dc-on", mode !== "topdown");
    flame.scrollTop = 0;
    crumbs();
    layoutSpacer();
    runSearch();
    schedule();
  }
  function compileQuery(q) {
    if (q.length > 2 && q.startsWith("/") && q.endsWith("/")) {
      try { const rx = new RegExp(q.slice(1, -1), "i"); return (s) => rx.test(s); } catch (e) { return null; }
    }
    const low = q.toLowerCase();
    return (s) => s.toLowerCase().includes(low);
  }
  function runSearch() {
    const q = state.query, out = $("dc-search-result");
    if (!q) { state.matchFrame = null; state.searchText = ""; out.textContent = ""; schedule(); return; }
    const test = compileQuery(q);
    if (!test) { state.matchFrame = null; out.textContent = "invalid regular expression"; schedule(); return; }
    const mf = new Uint8Array(NF);
    for (let f = 0; f < NF; f++) {
      if (D.kinds[FK[f]] === "root") continue;
      if (test(S[FN[f]]) || test(S[FF[f]]) || test(frameLabel(f))) mf[f] = 1;
    }
    state.matchFrame = mf;
    const t = tree(), m = state.metric, inc = inclusive(t, m);
    const { count, sum } = DCModel.matchShare(t, inc, mf);
    state.searchText = count + " match" + (count === 1 ? "" : "es") + " \u00b7 " + pct(sum, inc[0]) + " of " + m;
    out.textContent = state.searchText;
    schedule();
  }

  // ---- wiring -----------------------------------------------------------------------------
  function init() {
    const cmd = D.meta.command;
    const title = Array.isArray(cmd) ? cmd.join(" ") : (cmd ? String(cmd) : "profile");
    $("dc-title").textContent = title;
    document.title = "DeepContext: " + title.slice(0, 80);
    const notes = [];
    if (D.meta.complete === false) notes.push("incomplete: the program ended before the final flush");
    if (RANKS.ids.length > 1) notes.push(RANKS.ids.length + " ranks (" + RANKS.ids.join(", ") + "): values are their sum, each rank's own in the details");
    (Array.isArray(D.meta.notes) ? D.meta.notes : []).forEach((n) => notes.push(String(n)));
    $("dc-status").textContent = notes.join(" \u00b7 ");
    const sel = $("dc-metric");
    metricNames.forEach((m) => {
      const o = el("option", m + " (" + fmt(inclusive(TOP, m)[0], unitOf[m]) + ")");
      o.value = m;
      sel.appendChild(o);
    });
    sel.value = state.metric;
    sel.addEventListener("change", () => setMetric(sel.value));
    const legend = $("dc-legend"), used = new Set();
    for (let f = 0; f < NF; f++) used.add(D.kinds[FK[f]]);
    D.kinds.forEach((k) => {
      if (!used.has(k) || k === "root") return;
      const item = el("span"), sw = el("i");
      sw.style.background = KIND_COLOURS[k] || "#cccccc";
      item.appendChild(sw);
      item.appendChild(document.createTextNode(k));
      legend.appendChild(item);
    });
    $("dc-mode-topdown").addEventListener("click", () => setMode("topdown"));
    $("dc-mode-bottomup").addEventListener("click", () => setMode("bottomup"));
    $("dc-reset").addEventListener("click", () => zoomTo(0));
    let timer = 0;
    $("dc-search").addEventListener("input", (e) => {
      clearTimeout(timer);
      timer = setTimeout(() => { state.query = e.target.value.trim(); runSearch(); }, 120);
    });
    canvas.addEventListener("mousemove", (ev) => {
      const r = canvas.getBoundingClientRect(), id = hitTest(ev.clientX - r.left, ev.clientY - r.top);
      if (id !== state.hover) { state.hover = id; schedule(); }
      showTooltip(id, ev);
    });
    canvas.addEventListener("mouseleave", () => { state.hover = -1; tooltip.hidden = true; schedule(); });
    canvas.addEventListener("click", (ev) => {
      const r = canvas.getBoundingClientRect(), id = hitTest(ev.clientX - r.left, ev.clientY - r.top);
      if (id < 0) return;
      select(id);
      zoomTo(id);
    });
    flame.addEventListener("scroll", schedule);
    // The flame's own size, not the window's: a notebook iframe can get its width after the
    // viewer starts, and the header can wrap to more rows, with no resize event on the window.
    new ResizeObserver(() => {
      if (flame.clientWidth !== cssW || Math.max(flame.clientHeight, ROW) !== cssH) resize();
    }).observe(flame);
    document.addEventListener("keydown", (ev) => {
      if (ev.target instanceof HTMLInputElement || ev.target instanceof HTMLSelectElement) return;
      if (ev.key === "Escape") zoomTo(0);
      if (ev.key === "/") { ev.preventDefault(); $("dc-search").focus(); }
    });
    showTotal();
    showFindings();
    crumbs();
    resize();
  }

  // Read-only hooks for tests and for scripting the page from the console.
  window.deepcontextViewer = {
    nodeCount: () => TOP.n,
    drawn: () => { if (pending) draw(); return drawn.map((d) => d.slice()); },  // current boxes
    state: () => ({ metric: state.metric, mode: state.mode, zoom: state.zoom, selected: state.selected,
                    search: state.searchText }),
    label: (id) => (id === 0 ? "all" : frameLabel(tree().frame[id])),
    fitLabel: (id, room) => fitLabel(tree().frame[id], room),
    name: (id) => S[FN[tree().frame[id]]],
    findNode: (name) => { for (let i = 1; i < tree().n; i++) if (S[FN[tree().frame[i]]] === name) return i; return -1; },
    inclusive: (id, m) => inclusive(tree(), m || state.metric)[id],
    ranks: () => RANKS.ids.slice(),
    rankInclusive: (id, r, m) => RANKS.inclusive(r, m || state.metric)[id],
    zoom: zoomTo, setMetric, setMode, select, jumpTo,
    snapshot: () => {  // the shown tree (top-down or bottom-up) with the chosen metric
      const t = tree(), inc = inclusive(t, state.metric);
      return { parent: Array.from(t.parent), kind: Array.from(t.frame, (f) => D.kinds[FK[f]]),
               name: Array.from(t.frame, (f) => S[FN[f]]), inclusive: Array.from(inc) };
    },
    drawNow: () => { const t0 = performance.now(); draw(); return performance.now() - t0; },
  };
  init();
})();
