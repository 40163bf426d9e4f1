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
  const sp = model.trace.verdict_spread || null;
  const box = el("div", {class: "verdict", id: "verdict"}, parent);
  el("h3", {}, box, "Verdict" + (derived ? " (worked out by the page: this report has none)" : ""));
  const dl = el("dl", {}, box);
  const item = (k, val) => { el("dt", {}, dl, k); return el("dd", {}, dl, val); };
  const words = (dd, text) => dd.appendChild(document.createTextNode(text));
  if (v.leanest) {
    const dd = item("leanest", "");
    dd.id = "verdict-leanest";
    const ru = sp && sp.leanest_runner_up;
    if (sp && !sp.leanest_clear) {
      words(dd, "no clear winner: ");
      dd.appendChild(code(v.leanest)); words(dd, " and "); dd.appendChild(code(ru.spec));
      words(dd, ` both hold ${fixed(Number(v.leanest_ratio), 3)}× the trace's peak live bytes`);
    } else {
      dd.appendChild(code(v.leanest));
      words(dd, ` holds ${fixed(Number(v.leanest_ratio), 3)}× the trace's peak live bytes`);
      if (ru) { words(dd, "; next "); dd.appendChild(code(ru.spec)); words(dd, ` ${fixed(ru.footprint_ratio, 3)}×`); }
    }
  }
  if (v.fastest) {
    const dd = item("fastest", "");
    dd.id = "verdict-fastest";
    const ru = sp && sp.fastest_runner_up, best = sp ? sp.fastest_ns_per_op : null;
    const speed = t => t ? ` ${speedText(t)} ns per operation (median, smallest-largest of ${t.repeats.length})`
                         : ` ${fixed(Number(v.fastest_ns_per_op), 1)} ns per operation`;
    if (sp && !sp.fastest_clear) {
      words(dd, "no clear winner: ");
      dd.appendChild(code(v.fastest)); words(dd, speed(best) + " and ");
      dd.appendChild(code(ru.spec)); words(dd, speed(ru.ns_per_op) + " overlap");
    } else {
      dd.appendChild(code(v.fastest)); words(dd, speed(best));
      if (ru) { words(dd, "; next "); dd.appendChild(code(ru.spec)); words(dd, speed(ru.ns_per_op)); }
    }
    words(dd, " — " + (v.speed_basis || ""));
  }
  if (v.suggestion) {
    const dd = item("suggestion", ""), sg = v.suggestion;
    dd.appendChild(code(sg.spec));
    const measured = sg.peak_held_bytes !== undefined
        ? ` (replayed: holds ${human(sg.peak_held_bytes)}, ${fixed(Number(sg.footprint_ratio), 3)}× peak live)` : "";
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

/// A result's figures as results.json gives them ("figures": the numbers the tool's table and CSV
/// show, defined once); for older reports, taken from the fields they had.
function figuresOf(r) {
  if (r.figures) return r.figures;
  const f = {peak_held_bytes: r.peak_held_bytes, footprint_ratio: r.footprint_ratio,
             ns_per_op: {median: r.ns_per_op, min: r.ns_per_op, max: r.ns_per_op, repeats: [r.ns_per_op]}};
  const a = r.at_peak;
  if (a) {
    Object.assign(f, {internal_fragmentation: a.internal_fragmentation, external_fragmentation:
                      a.external_fragmentation, free_bytes: a.free_bytes, largest_free_bytes:
                      a.largest_free_bytes, internal_bytes: a.internal_bytes, layout_known: a.layout_known});
  }
  return f;
}

function resultRow(body, trace, r, st) {
  const row = el("tr", {"data-stack": r.resource}, body);
  const name = el("td", {}, row);
  if (st) el("i", {class: "swatch", style: "background:" + st.color}, name);
  name.appendChild(document.createTextNode(r.resource));
  if (r.error) { el("td", {colspan: 7, class: "error"}, row, "could not be built: " + r.error); return; }
  const f = figuresOf(r);
  const peak = el("td", {class: "peak-held"}, row, human(f.peak_held_bytes));
  if (r.reservation && r.reservation.note) {
    el("div", {class: "sub res-note"}, peak, (r.reservation.bytes ? human(r.reservation.bytes) + " of it: " : "") +
       r.reservation.note);
  } else if (r.held_at_start) {
    el("div", {class: "sub res-note"}, peak, human(r.held_at_start) + " held before the first event");
  }
  el("td", {class: "ratio"}, row, fixed(f.footprint_ratio, 3));
  atPeakCells(row, trace, r, f);
  const ns = el("td", {class: "ns"}, row, speedText(f.ns_per_op));
  ns.title = "median over " + f.ns_per_op.repeats.length + " timed replay(s), smallest-largest in parentheses" +
      (r.ns_per_op_basis ? "; " + r.ns_per_op_basis : "");
  el("td", {class: r.failure ? "oom" : ""}, row, r.failure
     ? "out of memory at event " + grouped(r.failure.event) + " (line " + grouped(r.failure.line) +
       ", allocating " + human(r.failure.bytes) + ")" : "ok");
}

/// Internal, external fragmentation and largest free at the peak; "-" when the replay failed
/// before it, "n/a" when the layout is not known.
function atPeakCells(row, trace, r, f) {
  const failedBefore = r.failure && r.failure.event <= trace.peak_live_event;
  if (failedBefore || f.internal_fragmentation === undefined) {
    for (let i = 0; i < 3; i++) el("td", {class: "dash", title: "the replay failed before the peak"}, row, "-");
    return;
  }
  el("td", {class: "internal", title: "bytes handed to live blocks beyond what they asked for (rounding, bin slack)"},
     row, percent(f.internal_fragmentation) + (f.internal_bytes ? " (" + human(f.internal_bytes) + ")" : ""));
  if (!f.layout_known) { el("td", {}, row, "n/a"); el("td", {}, row, "n/a"); return; }
  el("td", {class: "external"}, row, externalText(f.external_fragmentation, f.free_bytes));
  el("td", {class: "largest"}, row, human(f.largest_free_bytes));
}

/// What is live at the trace's peak of live bytes, grouped by the call stack that allocated it,
/// most bytes first (results.json's live_at_peak_by_stack).
function byStackTable(parent, model) {
  const tr = model.trace, rows = tr.live_at_peak_by_stack;
  const box = el("section", {class: "by-stack", id: "by-stack"}, parent);
  el("h3", {}, box, "Live at the peak, by call stack — event " + grouped(tr.peak_live_event) + ", " +
     human(tr.peak_live_bytes) + " live");
  if (!Array.isArray(rows)) { el("p", {class: "note"}, box, "This report has no by-stack figures (made by an older gpumem)."); return; }
  if (!rows.length) {
    el("p", {class: "note"}, box, tr.allocations_omitted
       ? "The trace has more than 2,000,000 allocations: the report leaves them out, and with them this table."
       : "Nothing is live at the peak.");
    return;
  }
  if (!tr.stacks || !tr.stacks.length) {
    el("p", {class: "note"}, box, "The trace records no call stacks (no Frames column): every block is in one row. " +
       "gpumem convert keeps the frames of a PyTorch memory snapshot recorded with stacks.");
  }
  const t = el("table", {class: "results by-stack-table"}, box);
  const head = el("tr", {}, el("thead", {}, t));
  for (const c of ["call stack (innermost frame first; hover for all)", "bytes live", "share", "blocks"]) el("th", {}, head, c);
  const body = el("tbody", {}, t);
  for (const r of rows) {
    const row = el("tr", {"data-stack-index": String(r.stack), "data-bytes": String(r.bytes),
                          "data-blocks": String(r.blocks)}, body);
    const frames = framesOf(tr, r.stack);
    const cell = el("td", {class: "frames"}, row);
    el("i", {class: "swatch", title: "its colour in the bands", style: "background:" + COLORS[Math.max(0, r.stack) % COLORS.length]}, cell);
    cell.appendChild(document.createTextNode(frames.length ? frames[0] : "(no call stack recorded)"));
    if (frames.length > 1) {
      cell.title = frames.join("\n");
      el("div", {class: "sub"}, cell, frames.slice(1, 3).join(" ← ") + (frames.length > 3 ? " ← …" : ""));
    }
    el("td", {}, row, human(r.bytes));
    el("td", {}, row, percent(r.bytes / Math.max(1, tr.peak_live_bytes)));
    el("td", {}, row, grouped(r.blocks));
  }
  const o = tr.live_at_peak_other_stacks;
  if (o && o.stacks) {
    el("p", {class: "note"}, box, `${grouped(o.stacks)} more call stack(s) with ${human(o.bytes)} in ` +
       `${grouped(o.blocks)} block(s) are summed here, not listed (the report lists the first 100).`);
  }
}
