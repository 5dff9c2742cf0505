// DeepContext viewer, the findings panel: the analyzer's findings as a list; a click jumps to the
// finding's node in the flame graph. Every text from the profile goes through textContent.
"use strict";
const DCFindings = (function () {
  const SEVERITIES = ["error", "warning", "note", "critical", "high", "medium", "low", "info"];

  // env: {D, el, base, fmt, jumpTo} from the page.
  function show(env) {
    const { D, el, base, fmt, jumpTo } = env;
    const list = document.getElementById("dc-findings-list"), fs = D.findings || [];
    document.getElementById("dc-findings-status").textContent =
      fs.length ? "(" + fs.length + ")" : (D.findingsStatus || "none");
    fs.forEach((fd, k) => {
      const li = el("li");
      li.dataset.index = String(k);
      const sev = String(fd.severity || "").toLowerCase();
      const head = el("div");
      head.appendChild(el("span", sev || "note", "dc-sev dc-sev-" + (SEVERITIES.includes(sev) ? sev : "other")));
      head.appendChild(el("strong", fd.title || fd.rule || "finding"));
      li.appendChild(head);
      if (fd.message) li.appendChild(el("div", fd.message, "dc-finding-msg"));
      const loc = fd.location;
      const gain = fd.estimated_gain;
      const bits = [];
      if (loc && loc.file) bits.push(base(String(loc.file)) + ":" + (loc.line || "?") + (loc.function ? " " + loc.function : ""));
      if (gain && typeof gain.seconds === "number") bits.push("gain up to " + fmt(gain.seconds, "s") +
        (typeof gain.fraction === "number" ? " (" + (100 * gain.fraction).toFixed(1) + "%)" : ""));
      if (fd.category) bits.push(String(fd.category));
      if (bits.length) li.appendChild(el("div", bits.join(" \u00b7 "), "dc-muted"));
      if (fd.suggestion) li.appendChild(el("div", fd.suggestion, "dc-finding-fix"));
      if (gain && gain.method) li.appendChild(el("div", "estimate: " + gain.method, "dc-muted"));
      li.addEventListener("click", () => jumpTo(fd.node));
      list.appendChild(li);
    });
  }

  return { show };
})();
