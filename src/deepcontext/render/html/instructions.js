// DeepContext viewer, the instruction pane: a kernel's sampled instructions (the pc layer's
// `instruction` frames under a `kernel` node) in program order, each with its SASS, its source
// line and its stall breakdown, and the same samples summed per source line. Built from the
// DOM helpers the page passes in; every name is shown through textContent.
"use strict";
const DCInstructions = (function () {
  const TOP_REASONS = 3;  // stall reasons named per row; the rest are in the tooltip

  // The sampled instructions under kernel node `k` of tree `t`: [{id, pc, sass, source, samples,
  // stalls: [[reason, samples]...] widest first}], in PC order.
  function rows(env, t, k) {
    const { D, inclusive, extraOf } = env;
    const stallMetrics = D.metrics.map((m) => m.name).filter((m) => m.startsWith("stall."));
    const samples = inclusive(t, "pc.samples");
    const out = [];
    for (let j = t.start[k]; j < t.start[k + 1]; j++) {
      const id = t.kids[j], f = t.frame[id];
      if (D.kinds[D.frames.kind[f]] !== "instruction" || !(samples[id] > 0)) continue;
      const stalls = [];
      for (const m of stallMetrics) {
        const v = inclusive(t, m)[id];
        if (v > 0) stalls.push([m.slice("stall.".length), v]);
      }
      stalls.sort((a, b) => b[1] - a[1]);
      const pc = extraOf(f, "pc") || D.strings[D.frames.name[f]].split(" ")[0];
      out.push({ id, pc, sass: extraOf(f, "sass"),
                 source: extraOf(f, "source"), samples: samples[id], stalls });
    }
    out.sort((a, b) => parseInt(a.pc, 16) - parseInt(b.pc, 16));
    return out;
  }

  // "file:line" -> [file, line]; a file name may itself hold colons.
  function splitSource(source) {
    const k = source.lastIndexOf(":");
    return k < 0 ? [source, 0] : [source.slice(0, k), Number(source.slice(k + 1)) || 0];
  }

  function stallText(stalls, total, n) {
    return stalls.slice(0, n).map(([r, v]) => r + " " + Math.round(100 * v / total) + "%").join(", ");
  }

  function table(env, heads, cls) {
    const t = env.el("table", undefined, cls), tr = env.el("tr");
    heads.forEach((h) => tr.appendChild(env.el("th", h)));
    t.appendChild(tr);
    return t;
  }

  // The pane for kernel node `k` (null when it has no sampled instruction). `current`: the
  // instruction node to mark, if one was selected.
  function pane(env, t, k, current) {
    const list = rows(env, t, k);
    if (!list.length) return null;
    const { el, base } = env;
    const total = list.reduce((s, r) => s + r.samples, 0);
    const hottest = Math.max(...list.map((r) => r.samples));
    const wrap = el("div", undefined, "dc-instr");
    wrap.appendChild(el("h3", "Sampled instructions (" + list.length + ", " + total + " samples)"));
    const byPc = table(env, ["pc", "samples", "", "SASS", "source", "stalls"], "dc-instr-pcs");
    for (const r of list) {
      const tr = el("tr", undefined, (r.id === current ? "dc-current " : "") +
                    (r.samples === hottest ? "dc-hot" : ""));
      tr.dataset.node = String(r.id);
      tr.appendChild(el("td", r.pc));
      tr.appendChild(el("td", Math.round(r.samples)));
      const bar = el("td", undefined, "dc-bar"), fill = el("i");
      fill.style.width = Math.round(48 * r.samples / hottest) + "px";
      bar.appendChild(fill);
      tr.appendChild(bar);
      tr.appendChild(el("td", r.sass, "dc-sass"));
      const [file, line] = r.source ? splitSource(r.source) : ["", 0];
      const src = el("td", file ? base(file) + ":" + line : "");
      if (file) {
        src.className = "dc-link";
        src.title = r.source;
        src.addEventListener("click", () => env.showSourceAt(file, line));
      }
      tr.appendChild(src);
      const st = el("td", stallText(r.stalls, r.samples, TOP_REASONS), "dc-stalls");
      st.title = stallText(r.stalls, r.samples, r.stalls.length);
      tr.appendChild(st);
      byPc.appendChild(tr);
    }
    wrap.appendChild(byPc);
    const lines = new Map();
    for (const r of list) {
      if (!r.source) continue;
      const e = lines.get(r.source) || { samples: 0, stalls: new Map() };
      e.samples += r.samples;
      for (const [reason, v] of r.stalls) e.stalls.set(reason, (e.stalls.get(reason) || 0) + v);
      lines.set(r.source, e);
    }
    if (lines.size) {
      wrap.appendChild(el("h3", "By source line"));
      const byLine = table(env, ["source", "samples", "share", "stalls"], "dc-instr-lines");
      [...lines.entries()].sort((a, b) => b[1].samples - a[1].samples).forEach(([source, e]) => {
        const tr = el("tr"), [file, line] = splitSource(source);
        const td = el("td", base(file) + ":" + line, "dc-link");
        td.title = source;
        td.addEventListener("click", () => env.showSourceAt(file, line));
        tr.appendChild(td);
        tr.appendChild(el("td", Math.round(e.samples)));
        tr.appendChild(el("td", Math.round(100 * e.samples / total) + "%"));
        const stalls = [...e.stalls.entries()].sort((a, b) => b[1] - a[1]);
        tr.appendChild(el("td", stallText(stalls, e.samples, TOP_REASONS), "dc-stalls"));
        byLine.appendChild(tr);
      });
      wrap.appendChild(byLine);
    }
    return wrap;
  }

  // The pane for the selected node `id` of tree `t`: a kernel's, or the kernel of a selected
  // instruction (that row marked). Top-down only: bottom-up, instructions are the roots.
  function forSelection(env, t, id, topdown) {
    const kinds = env.D.kinds, FK = env.D.frames.kind;
    if (!topdown || id <= 0 || !env.D.metrics.some((m) => m.name === "pc.samples")) return null;
    const isInstr = kinds[FK[t.frame[id]]] === "instruction";
    const kernel = isInstr ? t.parent[id] : id;
    if (kernel <= 0 || kinds[FK[t.frame[kernel]]] !== "kernel") return null;
    return pane(env, t, kernel, isInstr ? id : -1);
  }

  // pc.samples per source line of `file` over the whole tree `t` (the source pane's values).
  function lineSamples(env, t, file) {
    const { D, inclusive, extraOf } = env;
    const inc = inclusive(t, "pc.samples"), out = new Map();
    for (let i = 1; i < t.n; i++) {
      const f = t.frame[i];
      if (D.kinds[D.frames.kind[f]] !== "instruction" || !inc[i]) continue;
      const source = extraOf(f, "source");
      if (!source) continue;
      const [at, line] = splitSource(source);
      if (at === file) out.set(line, (out.get(line) || 0) + inc[i]);
    }
    return out;
  }

  return { pane, rows, forSelection, lineSamples, splitSource };
})();
