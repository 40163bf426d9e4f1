// page/selftest.js: with "selftest" in the URL hash, the page moves a synthetic mouse over its own
// timeline, reads back its readout, and writes what it displayed as JSON lines into
// <pre id="selftest">; plus the layout's block count per stack and the out-of-memory markers.
// The test (tests/page_check.py), not the page, compares these with results.json.

function runSelftest(page) {
  const lines = [];
  const tl = page.timeline;
  if (tl) {
    for (const ev of selftestEvents(tl)) lines.push(JSON.stringify(hoverAt(tl, ev)));
    lines.push(JSON.stringify(markersShown(tl)));
    for (const line of zoomedHovers(tl)) lines.push(JSON.stringify(line));
  }
  lines.push(JSON.stringify(figuresShown(page)));
  lines.push(JSON.stringify(byStackShown()));
  if (page.layout) {
    lines.push(JSON.stringify(layoutShown(page.layout)));
    const h = layoutHover(page.layout);
    if (h) lines.push(JSON.stringify(h));
    if (tl) lines.push(JSON.stringify(clickPick(tl, page.layout)));
    lines.push(JSON.stringify(typedEvent(page.layout)));
  }
  if (page.bands) for (const line of bandsShown(page.bands, tl)) lines.push(JSON.stringify(line));
  if (tl) lines.push(JSON.stringify(legendToggle(tl)));
  lines.push(JSON.stringify({kind: "verdict", shown: !!document.getElementById("verdict")}));
  lines.push(JSON.stringify(Object.assign({kind: "timing", allocations: Array.isArray(page.model.trace.allocations) ? page.model.trace.allocations.length : 0,
                                           events: page.model.trace.events}, page.timing)));
  el("pre", {id: "selftest"}, document.body, lines.join("\n"));
}

/// Events to hover: spread over the view, the peak of live bytes, and just after each failure.
function selftestEvents(tl) {
  const sc = tl.sc, out = [0.02, 0.25, 0.5, 0.75, 0.98].map(f => sc.lo + f * (sc.hi - sc.lo));
  out.push(tl.model.trace.peak_live_event);
  for (const st of tl.model.stacks) {
    if (st.failEvent !== null) out.push(Math.min(sc.hi, st.failEvent + 0.03 * (sc.hi - sc.lo)));
  }
  return out;
}

/// Dispatches a mouse move over the chart at `event` and reads the readout as displayed.
function hoverAt(tl, event) {
  hoverTimeline(tl, event);
  const r = tl.readout, held = {}, at = {};
  for (const row of r.querySelectorAll("tr[data-stack]")) {
    const cell = row.lastChild, name = row.getAttribute("data-stack");
    held[name] = cell.getAttribute("data-bytes") === "" ? null : Number(cell.getAttribute("data-bytes"));
    at[name] = cell.hasAttribute("data-at") ? Number(cell.getAttribute("data-at")) : null;
  }
  const live = r.querySelector("tr.ro-live td[data-bytes]").getAttribute("data-bytes");
  return {kind: "hover", x: Number(r.getAttribute("data-x")), event: Number(r.getAttribute("data-event")),
          live: live === "" ? null : Number(live), held: held, at: at};
}

/// The out-of-memory markers drawn and the last event the live line reaches.
function markersShown(tl) {
  const path = tl.svg.querySelector("path.series.live").getAttribute("d");
  const xs = path.match(/[ML](-?[\d.]+),/g) || [];
  const lastX = xs.length ? parseFloat(xs[xs.length - 1].slice(1)) : null;
  const oom = Array.prototype.map.call(tl.svg.querySelectorAll("g.oom-marker"),
                                       g => g.getAttribute("data-stack"));
  return {kind: "markers", oom: oom, live_last_event: lastX === null ? null : tl.sc.ex(lastX),
          live_points: xs.length, plot_px: tl.sc.pw, lo: tl.sc.lo, hi: tl.sc.hi,
          exact: !!tl.model.exactLive, peaks: peaksDrawn(tl)};
}

/// Where each drawn line reaches its highest point in view (the first such point): the event
/// under it, and the bytes it stands for.
function peaksDrawn(tl) {
  const at = path => {
    let best = null;
    for (const m of (path.getAttribute("d") || "").matchAll(/(-?[\d.]+),(-?[\d.]+)/g)) {
      const x = parseFloat(m[1]), y = parseFloat(m[2]);
      if (best === null || y < best.y - 1e-9) best = {x: x, y: y};
    }
    return best && {event: tl.sc.ex(best.x)};
  };
  const out = {live: at(tl.svg.querySelector("path.series.live"))};
  for (const p of tl.svg.querySelectorAll("path.series.held")) out[p.getAttribute("data-stack")] = at(p);
  return out;
}

/// The figures as the results table and the layout rows (at the layout's event) display them.
function figuresShown(page) {
  const text = (row, cls) => { const c = row.querySelector("td." + cls); return c ? c.textContent : null; };
  const table = {};
  for (const row of document.querySelectorAll("table.results:not(.by-stack-table) tbody tr[data-stack]")) {
    table[row.getAttribute("data-stack")] = {peak_held: text(row, "peak-held") && row.querySelector("td.peak-held").firstChild.textContent,
      ratio: text(row, "ratio"), internal: text(row, "internal"), external: text(row, "external"),
      largest: text(row, "largest"), ns: text(row, "ns")};
  }
  const layout = {};
  if (page.layout) {
    for (const row of page.layout.body.querySelectorAll(".layout-row")) {
      const ext = row.querySelector("span.ext"), cv = row.querySelector("canvas.layout-canvas");
      if (!ext || !cv) continue;
      const lay = cv.gmLayout;
      layout[row.getAttribute("data-stack")] = {external: ext.textContent, free: lay.free, largest: lay.largest,
                                                internal: lay.internal, held: lay.held};
    }
  }
  const v = document.getElementById("verdict");
  return {kind: "figures", layout_event: page.layout ? page.layout.event : null, table: table, layout: layout,
          leanest: textOf("verdict-leanest"), fastest: textOf("verdict-fastest"), verdict: v ? v.textContent : null};
}

function textOf(id) {
  const e = document.getElementById(id);
  return e ? e.textContent : null;
}

/// The rows of the "live at the peak, by call stack" table.
function byStackShown() {
  const rows = Array.prototype.map.call(document.querySelectorAll("#by-stack tbody tr"), r => ({
    stack: Number(r.getAttribute("data-stack-index")), bytes: Number(r.getAttribute("data-bytes")),
    blocks: Number(r.getAttribute("data-blocks")), text: r.textContent}));
  return {kind: "by-stack", shown: !!document.getElementById("by-stack"), rows: rows};
}

function layoutShown(ly) {
  const blocks = {}, other = {};
  for (const row of ly.body.querySelectorAll(".layout-row")) {
    const name = row.getAttribute("data-stack");
    if (row.hasAttribute("data-blocks")) blocks[name] = Number(row.getAttribute("data-blocks"));
    else other[name] = row.textContent;
  }
  return {kind: "layout", event: ly.event, blocks: blocks, not_drawn: other};
}

/// Drags over a narrow range around the peak (zooms in), hovers there, then resets the zoom.
function zoomedHovers(tl) {
  const p = tl.model.trace.peak_live_event, w = Math.max(40, (tl.sc.hi - tl.sc.lo) / 40);
  const box = tl.svg.getBoundingClientRect(), y = box.top + TL_MARGIN.t + 20;
  const mouse = (type, ev) => tl.hit.dispatchEvent(new MouseEvent(type, {clientX: box.left + tl.sc.x(ev),
                                                                           clientY: y, bubbles: true}));
  mouse("mousedown", p - w); mouse("mousemove", p + w); mouse("mouseup", p + w);
  const zoom = state.zoom ? state.zoom.slice() : null, out = [];
  for (const f of [0.1, 0.5, 0.9]) {
    const line = hoverAt(tl, tl.sc.lo + f * (tl.sc.hi - tl.sc.lo));
    line.zoom = zoom;
    out.push(line);
  }
  const m = markersShown(tl);
  out.push({kind: "zoomed-live", zoom: zoom, lo: tl.sc.lo, hi: tl.sc.hi, live_points: m.live_points,
            exact: m.exact, peaks: m.peaks, plot_px: tl.sc.pw});
  setZoom(tl, null);
  return out;
}

/// Hovers the middle of the largest block of the first row drawn and reads the tooltip.
function layoutHover(ly) {
  const cv = ly.body.querySelector("canvas.layout-canvas");
  if (!cv || !cv.gmLayout || !cv.gmLayout.blocks.length) return null;
  const lay = cv.gmLayout;
  const b = lay.blocks.reduce((x, y) => (y.pos !== null && y.size > x.size ? y : x));
  const box = cv.getBoundingClientRect();
  const px = (b.pos + b.size / 2 - ly.range[0]) * ly.width / (ly.range[1] - ly.range[0]);
  cv.dispatchEvent(new MouseEvent("mousemove", {clientX: box.left + px, clientY: box.top + 10, bubbles: true}));
  const tip = document.getElementById("tooltip");
  const line = {kind: "layout-hover", stack: cv.parentNode.getAttribute("data-stack"), allocation: b.k,
                text: tip.textContent};
  cv.dispatchEvent(new MouseEvent("mouseleave", {bubbles: true}));
  return line;
}

/// Clicks the timeline at 30 % of its width: the layout shows that event.
function clickPick(tl, ly) {
  const box = tl.svg.getBoundingClientRect(), ev = tl.sc.lo + 0.3 * (tl.sc.hi - tl.sc.lo);
  const opts = {clientX: box.left + tl.sc.x(ev), clientY: box.top + TL_MARGIN.t + 20, bubbles: true};
  tl.hit.dispatchEvent(new MouseEvent("mousedown", opts));
  tl.hit.dispatchEvent(new MouseEvent("mouseup", opts));
  const shown = layoutShown(ly);
  return {kind: "pick", x: ev, event: shown.event, blocks: shown.blocks, not_drawn: shown.not_drawn};
}

/// Types an event into the layout's input field.
function typedEvent(ly) {
  const input = document.getElementById("event-input"), want = Math.floor(ly.model.events / 3);
  input.value = String(want);
  input.dispatchEvent(new Event("change", {bubbles: true}));
  const shown = layoutShown(ly);
  return {kind: "typed", typed: want, event: shown.event, blocks: shown.blocks};
}

/// The bands: what is drawn, a hover on the largest band by size and by address, and the events
/// shown after a zoom of the timeline.
function bandsShown(bd, tl) {
  const al = bd.model.trace.allocations, out = [];
  const hover = (k, bytesAt) => {
    const a = al[k], end = a[1] === -1 ? bd.model.events : a[1], ev = Math.floor((a[0] + end) / 2);
    const box = bd.canvas.getBoundingClientRect();
    // the mouse is at whole pixels: the point read back is where it really is
    const cx = Math.round(box.left + bd.sc.x(ev + 0.5)), cy = Math.round(box.top + bd.sc.y(bytesAt(ev) + a[2] / 2));
    bd.canvas.dispatchEvent(new MouseEvent("mousemove", {clientX: cx, clientY: cy, bubbles: true}));
    const line = {kind: "bands-hover", mode: bd.canvas.getAttribute("data-mode"), target: k,
                  event: Math.floor(bd.sc.ex(cx - box.left)), bytes: bd.sc.vy(cy - box.top),
                  hovered: bd.canvas.getAttribute("data-hover"),
                  text: document.getElementById("tooltip").textContent};
    bd.canvas.dispatchEvent(new MouseEvent("mouseleave", {bubbles: true}));
    return line;
  };
  out.push({kind: "bands", mode: bd.canvas.getAttribute("data-mode"), drawn: Number(bd.canvas.getAttribute("data-bands")),
            note: bd.note.textContent, limit: BAND_LIMIT});
  const base = k => ev => { let b = 0; for (const s of bd.geo.steps.get(k)) if (s[0] <= ev) b = s[1]; return b; };
  for (const k of [bd.picked.ks[0], bd.picked.ks[Math.floor(bd.picked.ks.length / 2)]]) out.push(hover(k, base(k)));
  const sel = bd.controls.select, opt = sel.querySelector("option[value^='address:']");
  if (opt) {
    sel.value = opt.value;
    sel.dispatchEvent(new Event("change", {bubbles: true}));
    out.push({kind: "bands", mode: bd.canvas.getAttribute("data-mode"), drawn: Number(bd.canvas.getAttribute("data-bands")),
              note: bd.note.textContent, limit: BAND_LIMIT});
    const k = bd.picked.ks.find(x => bd.geo.at.has(x));
    if (k !== undefined) out.push(hover(k, () => bd.geo.at.get(k)));
    sel.value = "size";
    sel.dispatchEvent(new Event("change", {bubbles: true}));
  }
  if (tl) {
    const [lo, hi] = [Math.floor(tl.model.events / 4), Math.floor(tl.model.events / 2)];
    setZoom(tl, [lo, hi]);
    out.push({kind: "bands-zoom", timeline: [tl.sc.lo, tl.sc.hi], bands: [bd.sc.lo, bd.sc.hi]});
    setZoom(tl, null);
  }
  return out;
}

/// Clicks the first stack of the legend twice: its line goes, then comes back.
function legendToggle(tl) {
  const count = () => tl.svg.querySelectorAll("path.series.held").length;
  const item = tl.legend.querySelector(".item[data-stack]"), before = count();
  item.click();
  const hidden = count(), hash = location.hash;
  item.click();
  return {kind: "legend", stack: item.getAttribute("data-stack"), before: before, hidden: hidden,
          after: count(), hash_while_hidden: hash};
}
