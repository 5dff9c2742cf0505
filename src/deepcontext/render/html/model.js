// DeepContext viewer, data model: the calling context tree as typed-array columns, inclusive
// sums, child order, the bottom-up inverse and value formatting. No DOM here.
"use strict";
const DCModel = (function () {
  // Names from the profile become object keys (metrics, files): keep "__proto__" and friends
  // ordinary keys by using prototype-less maps and own-property lookups.
  const dict = () => Object.create(null);
  const own = (obj, key) => (Object.prototype.hasOwnProperty.call(obj, key) ? obj[key] : undefined);

  // A tree is columns: parent[i] < i, frame[i] indexes the frame table, excl[metric][i].
  function makeTree(parent, frame, excl) {
    const n = parent.length;
    const start = new Int32Array(n + 1);
    for (let i = 1; i < n; i++) start[parent[i] + 1]++;
    for (let i = 0; i < n; i++) start[i + 1] += start[i];
    const kids = new Int32Array(Math.max(n - 1, 0));
    const fill = start.slice(0, n);
    for (let i = 1; i < n; i++) kids[fill[parent[i]]++] = i;
    const depth = new Int32Array(n);
    for (let i = 1; i < n; i++) depth[i] = depth[parent[i]] + 1;
    return { n, parent, frame, excl, start, kids, depth, inc: dict(), sortedBy: null, maxDepth: dict() };
  }

  function inclusive(t, m) {
    if (!t.inc[m]) {
      const inc = Float64Array.from(t.excl[m]);
      for (let i = t.n - 1; i > 0; i--) inc[t.parent[i]] += inc[i];
      let md = 0;
      for (let i = 0; i < t.n; i++) if (inc[i] > 0 && t.depth[i] > md) md = t.depth[i];
      t.inc[m] = inc;
      t.maxDepth[m] = md;
    }
    return t.inc[m];
  }

  function sortChildren(t, m) {  // widest child first, so drawing can stop at the first tiny one
    if (t.sortedBy === m) return;
    const inc = inclusive(t, m);
    for (let i = 0; i < t.n; i++) {
      const a = t.start[i], b = t.start[i + 1];
      if (b - a > 1) t.kids.subarray(a, b).sort((x, y) => inc[y] - inc[x] || x - y);
    }
    t.sortedBy = m;
  }

  // Bottom-up: every context with a value, its path reversed (leaf first) and interned, so a
  // node's inclusive value is the total of all contexts ending in its reversed path.
  function invert(top, metricNames, frameCount) {
    const parent = [-1], frame = [0], index = new Map(), excl = dict();
    metricNames.forEach((m) => { excl[m] = [0]; });
    for (let i = 1; i < top.n; i++) {
      let any = false;
      for (const m of metricNames) if (top.excl[m][i]) { any = true; break; }
      if (!any) continue;
      let cur = 0;
      for (let j = i; j > 0; j = top.parent[j]) {
        const key = cur * frameCount + top.frame[j];
        let id = index.get(key);
        if (id === undefined) {
          id = parent.length;
          index.set(key, id);
          parent.push(cur);
          frame.push(top.frame[j]);
          metricNames.forEach((m) => excl[m].push(0));
        }
        cur = id;
      }
      for (const m of metricNames) excl[m][cur] += top.excl[m][i];
    }
    const ex = dict();
    metricNames.forEach((m) => { ex[m] = Float64Array.from(excl[m]); });
    return makeTree(Int32Array.from(parent), Int32Array.from(frame), ex);
  }

  // Matched nodes' summed share: a match below another match is already inside it.
  function matchShare(t, inc, matchFrame) {
    const covered = new Uint8Array(t.n);
    let count = 0, sum = 0;
    for (let i = 1; i < t.n; i++) {
      const p = t.parent[i];
      covered[i] = covered[p] || (p > 0 && matchFrame[t.frame[p]]) ? 1 : 0;
      if (matchFrame[t.frame[i]]) {
        if (inc[i]) count++;
        if (!covered[i]) sum += inc[i];
      }
    }
    return { count, sum };
  }

  function fmt(v, unit) {  // as deepcontext.tree.metrics.format_value
    const a = Math.abs(v);
    const g = (x) => Number(x.toPrecision(3)).toString();
    if (unit === "s") {
      if (a >= 1) return g(v) + "s";
      if (a >= 1e-3) return g(v * 1e3) + "ms";
      if (a >= 1e-6) return g(v * 1e6) + "us";
      return v ? g(v * 1e9) + "ns" : "0s";
    }
    if (unit === "bytes") {
      if (a >= 1073741824) return g(v / 1073741824) + "GiB";
      if (a >= 1048576) return g(v / 1048576) + "MiB";
      if (a >= 1024) return g(v / 1024) + "KiB";
      return Math.round(v) + "B";
    }
    return Number.isInteger(v) ? v.toLocaleString("en-US") : g(v);
  }
  function pct(part, whole) { return whole ? (100 * part / whole).toFixed(1) + "%" : "-"; }

  return { dict, own, makeTree, inclusive, sortChildren, invert, matchShare, fmt, pct };
})();
