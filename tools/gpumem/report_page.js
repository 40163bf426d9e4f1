// The report page's script: draws memory over time and the results table from the embedded JSON.
// No network, no libraries. Sets data-rendered="ok" on <body> when done (tests check it).
(function () {
  "use strict";
  const NS = "http://www.w3.org/2000/svg";
  const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
                  "#17becf", "#bcbd22", "#7f7f7f"];
  const data = JSON.parse(document.getElementById("gpumem-data").textContent);

  function human(bytes) {
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let v = bytes, u = 0;
    while (v >= 1024 && u < units.length - 1) { v /= 1024; u++; }
    return (u === 0 ? String(v) : v.toFixed(2)) + " " + units[u];
  }
  function el(tag, attrs, parent, text) {
    const e = document.createElement(tag);
    for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }
  function svg(tag, attrs, parent) {
    const e = document.createElementNS(NS, tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function points(timeline, idx, sx, sy) {
    return timeline.map(p => sx(p[0]).toFixed(1) + "," + sy(p[idx]).toFixed(1)).join(" ");
  }

  // One chart: held of each result (colored), live of the trace (black, dashed).
  function chart(parent, trace, results, w, h, withAxes) {
    const m = withAxes ? {l: 70, r: 10, t: 10, b: 30} : {l: 4, r: 4, t: 4, b: 4};
    const s = svg("svg", {width: w, height: h, viewBox: `0 0 ${w} ${h}`, class: "chart"}, parent);
    let ymax = 1;
    for (const r of results) for (const p of r.timeline) ymax = Math.max(ymax, p[1], p[2]);
    const xmax = Math.max(1, trace.events);
    const sx = x => m.l + (w - m.l - m.r) * x / xmax;
    const sy = y => h - m.b - (h - m.t - m.b) * y / ymax;
    if (withAxes) {
      for (let i = 0; i <= 4; i++) {
        const y = ymax * i / 4;
        svg("line", {x1: m.l, x2: w - m.r, y1: sy(y), y2: sy(y), class: "grid"}, s);
        svg("text", {x: m.l - 6, y: sy(y) + 4, "text-anchor": "end", class: "tick"}, s)
          .textContent = human(Math.round(y));
      }
      svg("text", {x: (w + m.l) / 2, y: h - 6, "text-anchor": "middle", class: "tick"}, s)
        .textContent = "event (0 .. " + trace.events + ")";
    }
    results.forEach(r => {
      svg("polyline", {points: points(r.timeline, 2, sx, sy), class: "series held",
                       stroke: r.color, fill: "none"}, s);
    });
    if (results.length > 0) {
      svg("polyline", {points: points(results[0].timeline, 1, sx, sy), class: "series live",
                       stroke: "#000", fill: "none", "stroke-dasharray": "4 3"}, s);
    }
    return s;
  }

  function table(parent, trace) {
    const t = el("table", {}, parent);
    const head = el("tr", {}, el("thead", {}, t));
    for (const c of ["resource", "peak held", "held / peak live", "internal frag.",
                     "external frag.", "largest free @ peak", "ns / op", "status"]) {
      el("th", {}, head, c);
    }
    const body = el("tbody", {}, t);
    for (const r of trace.results) {
      const tr = el("tr", {}, body);
      el("td", {}, tr, r.resource);
      if (r.error) { el("td", {colspan: 7}, tr, "could not be built: " + r.error); continue; }
      const a = r.at_peak;
      el("td", {}, tr, human(r.peak_held_bytes));
      el("td", {}, tr, r.footprint_ratio.toFixed(3));
      el("td", {}, tr, (100 * a.internal_fragmentation).toFixed(1) + "%");
      el("td", {}, tr, a.layout_known ? (100 * a.external_fragmentation).toFixed(1) + "%" : "n/a");
      el("td", {}, tr, a.layout_known ? human(a.largest_free_bytes) : "n/a");
      el("td", {}, tr, r.ns_per_op.toFixed(1));
      el("td", {}, tr, r.failure ? "out of memory at line " + r.failure.line : "ok");
    }
  }

  const root = document.getElementById("traces");
  el("p", {}, document.getElementById("device"), "Device: " + data.device);
  for (const trace of data.traces) {
    const sec = el("section", {}, root);
    el("h2", {}, sec, trace.path.split("/").pop());
    el("p", {}, sec, `${trace.events} events (${trace.allocations} allocations, ${trace.frees} ` +
       `frees), peak live ${human(trace.peak_live_bytes)}, ${trace.threads} thread(s), ` +
       `${trace.streams} stream(s).`);
    const ok = trace.results.filter(r => !r.error && r.timeline && r.timeline.length > 0);
    ok.forEach((r, i) => { r.color = COLORS[i % COLORS.length]; });
    el("h3", {}, sec, "Memory held over time (dashed: live bytes of the trace)");
    chart(sec, trace, ok, 900, 320, true);
    const legend = el("div", {class: "legend"}, sec);
    ok.forEach(r => {
      const item = el("span", {}, legend);
      el("i", {style: "background:" + r.color}, item);
      item.appendChild(document.createTextNode(r.resource));
    });
    el("h3", {}, sec, "Each resource: held (colored) vs live (dashed)");
    const grid = el("div", {class: "grid"}, sec);
    ok.forEach(r => {
      const cell = el("figure", {}, grid);
      chart(cell, trace, [r], 280, 110, false);
      el("figcaption", {}, cell, r.resource + ": peak " + human(r.peak_held_bytes));
    });
    el("h3", {}, sec, "Results");
    table(sec, trace);
  }
  document.body.setAttribute("data-rendered", "ok");
})();
