// page/tables.js: the verdict panel and the results table of a trace.

/// The verdict of the report (v2), or one the page works out from the table (older reports).
function verdictOf(model, simulated) {
  const v = model.trace.verdict;
  if (v) return {v: v, derived: false};
  const ok = model.trace.results.filter(r => !r.error && !r.failure);
  if (!ok.length) return {v: {notes: ["No stack replayed the whole trace."]}, derived: true};
  // older reports: no verdict, so the page works one out from the table
  const lean = ok.reduce((a, b) => (b.footprint_ratio < a.footprint_ratio ? b : a));
  const fast = ok.reduce((a, b) => (b.ns_per_op < a.ns_per_op ? b : a));
  return {derived: true, v: {leanest: lean.resource, leanest_ratio: lean.footprint_ratio,
                             fastest: fast.resource, fastest_ns_per_op: fast.ns_per_op,
                             speed_basis: simulated ? "host bookkeeping only (simulated device)" : "GPU",
                             suggestion: null, notes: []}};
}

function verdictPanel(parent, model, simulated) {
  const {v, derived} = verdictOf(model, simulated);
  const box = el("div", {class: "verdict", id: "verdict"}, parent);
  el("h3", {}, box, "Verdict" + (derived ? " (worked out by the page: this report has none)" : ""));
  const dl = el("dl", {}, box);
  const item = (k, val) => { el("dt", {}, dl, k); return el("dd", {}, dl, val); };
  if (v.leanest) {
    item("leanest", "").appendChild(code(v.leanest));
    dl.lastChild.appendChild(document.createTextNode(
        ` holds ${Number(v.leanest_ratio).toFixed(3)}× the trace's peak live bytes`));
  }
  if (v.fastest) {
    item("fastest", "").appendChild(code(v.fastest));
    dl.lastChild.appendChild(document.createTextNode(
        ` ${Number(v.fastest_ns_per_op).toFixed(1)} ns per operation — ${v.speed_basis || ""}`));
  }
  if (v.suggestion) {
    const dd = item("suggestion", ""), sg = v.suggestion;
    dd.appendChild(code(sg.spec));
    const measured = sg.peak_held_bytes !== undefined
        ? ` (replayed: holds ${human(sg.peak_held_bytes)}, ${Number(sg.footprint_ratio).toFixed(3)}× peak live)` : "";
    dd.appendChild(document.createTextNode(measured + " — " + (sg.why || "")));
  }
  if (v.notes && v.notes.length) {
    const ul = el("ul", {}, item("notes", ""));
    for (const n of v.notes) el("li", {}, ul, n);
  }
}

function code(text) {
  return el("code", {}, null, text);
}

/// The table's columns; internal fragmentation is of the live blocks' memory from report v2 on,
/// of held memory before.
function tableColumns(version) {
  return ["resource", "peak held", "held / peak live",
          "internal frag. @ peak (of " + (version >= 2 ? "live blocks)" : "held)"),
          "external frag. @ peak (of free bytes)", "largest free @ peak", "ns / op", "status"];
}

function resultsTable(parent, model, simulated, version) {
  const tr = model.trace, t = el("table", {class: "results"}, parent);
  const head = el("tr", {}, el("thead", {}, t));
  for (const c of tableColumns(version)) el("th", {}, head, c);
  head.lastChild.previousSibling.appendChild(el("div", {class: "sub"}, null,
      simulated ? "host bookkeeping only" : "GPU, per call"));
  const body = el("tbody", {}, t);
  tr.results.forEach((r, i) => resultRow(body, tr, r, model.stacks.find(s => s.index === i)));
}

function resultRow(body, trace, r, st) {
  const row = el("tr", {"data-stack": r.resource}, body);
  const name = el("td", {}, row);
  if (st) el("i", {class: "swatch", style: "background:" + st.color}, name);
  name.appendChild(document.createTextNode(r.resource));
  if (r.error) { el("td", {colspan: 7, class: "error"}, row, "could not be built: " + r.error); return; }
  const peak = el("td", {}, row, human(r.peak_held_bytes));
  if (r.reservation && r.reservation.note) {
    el("div", {class: "sub res-note"}, peak, (r.reservation.bytes ? human(r.reservation.bytes) + " of it: " : "") +
       r.reservation.note);
  } else if (r.held_at_start) {
    el("div", {class: "sub res-note"}, peak, human(r.held_at_start) + " held before the first event");
  }
  el("td", {}, row, r.footprint_ratio.toFixed(3));
  atPeakCells(row, trace, r);
  const ns = el("td", {}, row, r.ns_per_op.toFixed(1));
  if (r.ns_per_op_basis) ns.title = r.ns_per_op_basis;
  el("td", {class: r.failure ? "oom" : ""}, row, r.failure
     ? "out of memory at event " + grouped(r.failure.event) + " (line " + grouped(r.failure.line) +
       ", allocating " + human(r.failure.bytes) + ")" : "ok");
}

/// Internal, external fragmentation and largest free at the peak; "-" when the replay failed
/// before it, "n/a" when the layout is not known.
function atPeakCells(row, trace, r) {
  const a = r.at_peak;
  const failedBefore = r.failure && r.failure.event <= trace.peak_live_event;
  if (failedBefore || !a) {
    for (let i = 0; i < 3; i++) el("td", {class: "dash", title: "the replay failed before the peak"}, row, "-");
    return;
  }
  el("td", {title: "bytes handed to live blocks beyond what they asked for (rounding, bin slack)"}, row,
     percent(a.internal_fragmentation) + (a.internal_bytes ? " (" + human(a.internal_bytes) + ")" : ""));
  if (!a.layout_known) { el("td", {}, row, "n/a"); el("td", {}, row, "n/a"); return; }
  el("td", {}, row, percent(a.external_fragmentation) + " of " + human(a.free_bytes));
  el("td", {}, row, human(a.largest_free_bytes));
}
