// DeepContext viewer, a merged multi-rank profile's per-rank values (docs/multi-rank.md): each
// rank's own inclusive value per node of the top-down tree (the bottom-up tree has other ids),
// and the details' per-rank table. D.ranks is {rank: {metric: [nodes, exclusive values]}}.
"use strict";
const DCRanks = (function () {
  function make(D, TOP, model) {
    const { dict, own } = model;
    const ids = Object.keys(D.ranks || {}).map(Number).sort((a, b) => a - b);
    const cache = dict();
    function inclusive(r, m) {
      const key = r + "\u0000" + m;
      if (!cache[key]) {
        const inc = new Float64Array(TOP.n), sparse = own(own(D.ranks, String(r)) || dict(), m);
        if (sparse) sparse[0].forEach((node, k) => { if (node >= 0 && node < TOP.n) inc[node] += sparse[1][k]; });
        for (let i = TOP.n - 1; i > 0; i--) inc[TOP.parent[i]] += inc[i];
        cache[key] = inc;
      }
      return cache[key];
    }
    // env: {el, fmt, pct}; each rank's inclusive value of metric `m` (in `unit`) at node `id`.
    function table(env, id, m, unit) {
      const { el, fmt, pct } = env;
      const t = el("table", undefined, "dc-ranks"), head = el("tr");
      ["rank", m, "share"].forEach((h) => head.appendChild(el("th", h)));
      t.appendChild(head);
      for (const r of ids) {
        const inc = inclusive(r, m), tr = el("tr");
        tr.appendChild(el("td", "rank " + r));
        tr.appendChild(el("td", fmt(inc[id], unit)));
        tr.appendChild(el("td", pct(inc[id], inc[0])));
        t.appendChild(tr);
      }
      return t;
    }
    return { ids, inclusive, table };
  }
  return { make };
})();
