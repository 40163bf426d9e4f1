// page/timeline.js: memory over time. Held bytes of every stack and the trace's live bytes (dashed,
// from the trace, so it stays after a stack runs out of memory) on ONE y scale; axes with ticks;
// a readout of the values at the event under the cursor; zoom (wheel, drag-select), pan
// (shift+drag, buttons), reset (button, double-click); out-of-memory markers; a legend that
// toggles stacks. Where the report has the allocations and a stack's chunks, every line is exact
// at every event (model.exactLive, stack.exact): the overview draws each pixel column's least and
// most (so a peak is drawn at its own event), and zoomed in to two events a pixel or fewer, every
// event. Otherwise the lines are the JSON's samples (each the most over a span of events).

const TL_MARGIN = {l: 84, r: 16, t: 14, b: 48};
// Held lines are drawn LINE_GAP px apart (stack i of n shifted by (i - (n-1)/2) * LINE_GAP), so
// stacks that hold the same bytes show as parallel stripes instead of one hiding the other.
const LINE_GAP = 2;

function makeTimeline(parent, model, hooks) {
  const tl = {model: model, hooks: hooks, width: Math.max(600, (parent.clientWidth || 1200) - 330),
              height: 400};
  tl.controls = timelineControls(parent, tl);
  tl.box = el("div", {class: "tl-box"}, parent);
  tl.svg = svgEl("svg", {class: "chart timeline", width: tl.width, height: tl.height}, tl.box);
  tl.readout = el("div", {class: "readout", id: "readout"}, tl.box);
  tl.legend = el("div", {class: "legend"}, parent);
  buildLegend(tl);
  tl.render = () => renderTimeline(tl);
  tl.render();
  return tl;
}

// ---- scales

function viewRange(tl) {
  const last = tl.model.events - 1;
  if (!state.zoom) return [0, Math.max(1, last)];
  return [clamp(state.zoom[0], 0, last), clamp(state.zoom[1], 1, Math.max(1, last))];
}

function visibleMax(tl, lo, hi) {
  let top = 1;
  const scan = (pts, idx) => {
    const a = Math.max(0, nearestIndex(pts, lo) - 1), b = Math.min(pts.length, nearestIndex(pts, hi) + 2);
    for (let i = a; i < b; i++) top = Math.max(top, pts[i][idx]);
  };
  const scanExact = v => {
    for (let e = Math.max(0, Math.floor(lo)); e <= Math.min(v.length - 1, Math.ceil(hi)); e++) top = Math.max(top, v[e]);
  };
  if (tl.model.exactLive) scanExact(tl.model.exactLive); else scan(tl.model.live, 1);
  for (const s of tl.model.stacks) {
    if (isHidden(s)) continue;
    if (s.exact) scanExact(s.exact); else scan(s.r.timeline, 2);
  }
  const cap = tl.model.capacity;
  if (cap && cap <= 1.5 * top) top = Math.max(top, cap);  // the device's size, when it is near
  return top * 1.08;
}

function scales(tl) {
  const [lo, hi] = viewRange(tl);
  const top = visibleMax(tl, lo, hi);
  const m = TL_MARGIN, pw = tl.width - m.l - m.r, ph = tl.height - m.t - m.b;
  return {lo: lo, hi: hi, top: top, pw: pw,
          x: e => m.l + pw * (e - lo) / (hi - lo),
          ex: px => lo + (px - m.l) * (hi - lo) / pw,
          y: v => m.t + ph - ph * v / top};
}

// ---- drawing

function renderTimeline(tl) {
  const s = tl.svg, sc = scales(tl), m = TL_MARGIN;
  while (s.firstChild) s.removeChild(s.firstChild);
  tl.sc = sc;
  const clip = svgEl("clipPath", {id: "tl-clip"}, svgEl("defs", {}, s));
  svgEl("rect", {x: m.l, y: m.t, width: sc.pw, height: tl.height - m.t - m.b}, clip);
  drawAxes(tl, sc);
  const plot = svgEl("g", {"clip-path": "url(#tl-clip)"}, s);
  tl.model.stacks.forEach(st => {
    if (isHidden(st)) return;
    const dy = lineOffset(tl, st);
    svgEl("path", {d: st.exact ? exactPath(st.exact, sc) : seriesPath(st.r.timeline, 2, sc),
                   class: "series held", stroke: st.color,
                   transform: `translate(0 ${dy.toFixed(1)})`, "data-stack": st.r.resource}, plot);
  });
  const ex = tl.model.exactLive;
  svgEl("path", {d: ex ? exactPath(ex, sc) : seriesPath(tl.model.live, 1, sc), class: "series live",
                 "data-exact": ex ? "1" : "0"}, plot);
  drawMarkers(tl, sc, plot);
  tl.cross = svgEl("line", {class: "cross", y1: m.t, y2: tl.height - m.b, visibility: "hidden"}, s);
  tl.dots = svgEl("g", {class: "hover-dots"}, s);
  tl.sel = svgEl("rect", {class: "drag-select", y: m.t, height: tl.height - m.t - m.b, width: 0,
                          visibility: "hidden"}, s);
  tl.hit = svgEl("rect", {class: "hit", x: m.l, y: m.t, width: sc.pw,
                          height: tl.height - m.t - m.b}, s);
  bindTimelineMouse(tl);
  showReadout(tl, state.event !== null ? state.event : tl.model.trace.peak_live_event, true);
  tl.controls.zoomText.textContent = state.zoom
      ? "events " + grouped(Math.round(sc.lo)) + " – " + grouped(Math.round(sc.hi)) : "all events";
}

/// The vertical shift of a stack's held line (see LINE_GAP).
function lineOffset(tl, st) {
  const n = tl.model.stacks.length;
  return (tl.model.stacks.indexOf(st) - (n - 1) / 2) * LINE_GAP;
}

/// Dots on the points the readout shows (hovering only).
function hoverDots(tl, v) {
  const g = tl.dots;
  while (g.firstChild) g.removeChild(g.firstChild);
  const dot = (e, y, color, cls) => svgEl("circle", {cx: tl.sc.x(e), cy: y, r: 3.5, fill: color, class: cls}, g);
  if (v.live !== null) dot(v.event, tl.sc.y(v.live), "#000", "dot live");
  for (const row of v.rows) {
    if (row.held !== undefined) dot(row.at, tl.sc.y(row.held) + lineOffset(tl, row.st), row.st.color, "dot");
  }
}

/// Path through the points in view; more than two a pixel -> min and max of each pixel column.
function seriesPath(pts, idx, sc) {
  if (!pts.length) return "";
  const a = Math.max(0, nearestIndex(pts, sc.lo) - 1);
  const b = Math.min(pts.length - 1, nearestIndex(pts, sc.hi) + 1);
  const out = [];
  if (b - a + 1 <= 2 * sc.pw) {
    for (let i = a; i <= b; i++) out.push(sc.x(pts[i][0]).toFixed(1) + "," + sc.y(pts[i][idx]).toFixed(1));
    return "M" + out.join("L");
  }
  let col = null, mn = 0, mx = 0, first = 0, last = 0;
  const flush = () => {
    if (col === null) return;
    const lo = sc.y(mn).toFixed(1), hi = sc.y(mx).toFixed(1);
    const f = sc.y(first).toFixed(1), l = sc.y(last).toFixed(1);
    out.push(col + "," + f, col + "," + (first <= last ? lo : hi), col + "," + (first <= last ? hi : lo),
             col + "," + l);
  };
  for (let i = a; i <= b; i++) {
    const c = Math.round(sc.x(pts[i][0])), v = pts[i][idx];
    if (c !== col) { flush(); col = c; mn = mx = first = v; }
    mn = Math.min(mn, v); mx = Math.max(mx, v); last = v;
  }
  flush();
  return "M" + out.join("L");
}

/// Path of a value known at every event (v[e]: after event e). Two events a pixel or fewer:
/// steps through every event; more: per pixel column its first, least, most and last value, so
/// that no peak is lost and each is drawn in the column of its own event.
function exactPath(v, sc) {
  if (!v.length) return "";
  const a = clamp(Math.floor(sc.lo), 0, v.length - 1), b = clamp(Math.ceil(sc.hi), 0, v.length - 1);
  const out = [], pt = (e, val) => out.push(sc.x(e).toFixed(1) + "," + sc.y(val).toFixed(1));
  if (b - a + 1 <= 2 * sc.pw) {
    pt(a, v[a]);
    for (let e = a + 1; e <= b; e++) { pt(e, v[e - 1]); pt(e, v[e]); }
    return "M" + out.join("L");
  }
  let col = null, mn = 0, mx = 0, first = 0, last = 0, argMn = 0, argMx = 0;
  const flush = () => {
    if (col === null) return;
    const order = argMn <= argMx ? [mn, mx] : [mx, mn];
    for (const val of [first, order[0], order[1], last]) out.push(col + "," + sc.y(val).toFixed(1));
  };
  for (let e = a; e <= b; e++) {
    const c = Math.round(sc.x(e)), val = v[e];
    if (c !== col) { flush(); col = c; mn = mx = first = val; argMn = argMx = e; }
    if (val < mn) { mn = val; argMn = e; }
    if (val > mx) { mx = val; argMx = e; }
    last = val;
  }
  flush();
  return "M" + out.join("L");
}

function drawAxes(tl, sc) {
  const s = tl.svg, m = TL_MARGIN, bottom = tl.height - m.b;
  svgEl("rect", {x: m.l, y: m.t, width: sc.pw, height: bottom - m.t, class: "plot-bg"}, s);
  for (const v of ticks(0, sc.top, 6, niceByteStep)) {
    svgEl("line", {x1: m.l, x2: m.l + sc.pw, y1: sc.y(v), y2: sc.y(v), class: "gridline"}, s);
    svgEl("text", {x: m.l - 6, y: sc.y(v) + 4, "text-anchor": "end", class: "tick"}, s, human(v));
  }
  for (const e of ticks(sc.lo, sc.hi, 8, niceStep)) {
    if (e !== Math.round(e)) continue;
    svgEl("line", {x1: sc.x(e), x2: sc.x(e), y1: m.t, y2: bottom + 4, class: "gridline"}, s);
    const anchor = sc.x(e) > m.l + sc.pw - 24 ? "end" : "middle";
    svgEl("text", {x: sc.x(e), y: bottom + 16, "text-anchor": anchor, class: "tick"}, s, grouped(e));
    const t = timeAt(tl.model, e);
    if (t !== null) {
      svgEl("text", {x: sc.x(e), y: bottom + 29, "text-anchor": anchor, class: "tick time"}, s, duration(t));
    }
  }
  svgEl("text", {x: m.l + sc.pw / 2, y: tl.height - 4, "text-anchor": "middle", class: "axis-title"},
        s, "event" + (tl.model.time ? " (time since the first event below)" : ""));
  svgEl("text", {x: 14, y: m.t + (bottom - m.t) / 2, "text-anchor": "middle", class: "axis-title",
                 transform: `rotate(-90 14 ${m.t + (bottom - m.t) / 2})`}, s, "bytes");
}

/// Out-of-memory markers, the trace's peak of live bytes and the event the layout shows.
function drawMarkers(tl, sc, plot) {
  const m = TL_MARGIN, bottom = tl.height - m.b, tr = tl.model.trace;
  const vline = (e, cls, attrs) => svgEl("line", Object.assign({x1: sc.x(e), x2: sc.x(e), y1: m.t,
                                                                  y2: bottom, class: cls}, attrs), plot);
  const cap = tl.model.capacity;
  if (cap && sc.y(cap) >= m.t) {
    svgEl("line", {x1: m.l, x2: m.l + sc.pw, y1: sc.y(cap), y2: sc.y(cap), class: "capacity-line"}, plot);
    svgEl("text", {x: m.l + 4, y: sc.y(cap) - 4, class: "marker-label"}, plot, "device: " + human(cap));
  }
  vline(tr.peak_live_event, "peak-line", {});
  svgEl("text", {x: sc.x(tr.peak_live_event) + 4, y: m.t + 12, class: "marker-label"}, plot, "peak live");
  if (state.event !== null) {
    vline(state.event, "pick-line", {});
    svgEl("text", {x: sc.x(state.event) + 4, y: bottom - 6, class: "marker-label pick"}, plot,
          "layout @ " + grouped(state.event));
  }
  let k = 0;
  for (const st of tl.model.stacks) {
    if (st.failEvent === null || isHidden(st)) continue;
    const pts = st.r.timeline, last = pts.length ? pts[pts.length - 1][2] : 0;
    const x = sc.x(st.failEvent), y = sc.y(last), left = x > m.l + sc.pw / 2;
    const g = svgEl("g", {class: "oom-marker", "data-stack": st.r.resource}, plot);
    vline(st.failEvent, "oom-line", {stroke: st.color});
    svgEl("path", {d: `M${x - 6},${y - 6}L${x + 6},${y + 6}M${x - 6},${y + 6}L${x + 6},${y - 6}`,
                   class: "oom-x"}, g);
    const label = svgEl("text", {x: left ? x - 8 : x + 8, y: m.t + 28 + 16 * k++, class: "oom-label",
                                 fill: st.color, "text-anchor": left ? "end" : "start"}, g,
                        "✕ out of memory: " + st.r.resource + " @ " + grouped(st.failEvent));
    labelBackground(g, label);
  }
}

/// A white box behind a label, so that lines do not run through it.
function labelBackground(g, label) {
  const b = label.getBBox();
  if (!b.width) return;
  g.insertBefore(svgEl("rect", {x: b.x - 2, y: b.y, width: b.width + 4, height: b.height,
                                class: "label-bg"}), label);
}

// ---- readout

/// The values at `event`: exact where the line is known at every event (the event under the
/// cursor, rounded), else the JSON point whose span holds it (the most over that span); a stack
/// past its failure reads as out of memory.
function readoutValues(tl, event) {
  const m = tl.model;
  if (m.exactLive) {
    const e = clamp(Math.round(event), 0, m.exactLive.length - 1);
    const rows = m.stacks.filter(s => !isHidden(s)).map(st => {
      if (st.failEvent !== null && e > st.failEvent) return {st: st, oom: true};
      if (st.exact) return e < st.exact.length ? {st: st, held: st.exact[e], at: e} : {st: st};
      const i = spanIndex(st.r.timeline, e);
      return i < 0 ? {st: st} : {st: st, held: st.r.timeline[i][2], at: st.r.timeline[i][0]};
    });
    return {x: event, event: e, from: e, live: m.exactLive[e], time: timeAt(m, e), rows: rows};
  }
  const li = spanIndex(tl.model.live, event);
  const shown = li >= 0 ? tl.model.live[li][0] : Math.round(event);
  const rows = tl.model.stacks.filter(s => !isHidden(s)).map(st => {
    if (st.failEvent !== null && event > st.failEvent) return {st: st, oom: true};
    const i = spanIndex(st.r.timeline, event);
    return i < 0 ? {st: st} : {st: st, held: st.r.timeline[i][2], at: st.r.timeline[i][0]};
  });
  const from = li > 0 ? tl.model.live[li - 1][0] + 1 : li === 0 ? 0 : null;
  return {x: event, event: shown, from: from, live: li >= 0 ? tl.model.live[li][1] : null,
          time: timeAt(tl.model, shown), rows: rows};
}

/// Fills the readout for `event`; `pinned`: not the cursor's but the layout's event.
function showReadout(tl, event, pinned) {
  const v = readoutValues(tl, event), r = tl.readout;
  r.textContent = "";
  r.setAttribute("data-x", String(event));
  r.setAttribute("data-event", String(v.event));
  if (pinned) el("div", {class: "sub"}, r, "at the layout's event (hover the chart for others)");
  el("div", {class: "ro-head"}, r, "event " + grouped(v.event) +
     (v.time !== null ? " · " + duration(v.time) : ""));
  if (v.from !== null && v.from < v.event) {
    el("div", {class: "sub"}, r, "each value: the most over events " + grouped(v.from) + "–" + grouped(v.event));
  }
  const t = el("table", {}, r);
  const live = el("tr", {class: "ro-live"}, t);
  el("td", {}, live, "live (trace)");
  el("td", {"data-bytes": v.live === null ? "" : String(v.live)}, live, human(v.live));
  for (const row of v.rows) {
    const tr = el("tr", {"data-stack": row.st.r.resource}, t);
    const name = el("td", {}, tr);
    el("i", {class: "swatch", style: "background:" + row.st.color}, name);
    name.appendChild(document.createTextNode(row.st.r.resource));
    if (row.oom) {
      el("td", {class: "ro-oom", "data-bytes": ""}, tr, "out of memory @ " + grouped(row.st.failEvent));
    } else {
      el("td", {"data-bytes": String(row.held), "data-at": String(row.at)}, tr,
         human(row.held) + (row.at !== v.event ? " @" + grouped(row.at) : ""));
    }
  }
  return v;
}

// ---- mouse: hover, click picks the layout event, drag selects, shift+drag pans, wheel zooms

function bindTimelineMouse(tl) {
  const hit = tl.hit;
  const evAt = e => tl.sc.ex(e.clientX - tl.svg.getBoundingClientRect().left);
  let drag = null;
  hit.addEventListener("mousemove", e => {
    const ev = evAt(e);
    tl.cross.setAttribute("x1", tl.sc.x(ev)); tl.cross.setAttribute("x2", tl.sc.x(ev));
    tl.cross.setAttribute("visibility", "visible");
    hoverDots(tl, showReadout(tl, ev));
    if (drag) dragMove(tl, drag, ev, e.shiftKey);
  });
  hit.addEventListener("mouseleave", () => {
    drag = null;
    tl.sel.setAttribute("visibility", "hidden");
    tl.cross.setAttribute("visibility", "hidden");
    hoverDots(tl, {live: null, rows: []});
    showReadout(tl, state.event !== null ? state.event : tl.model.trace.peak_live_event, true);
  });
  hit.addEventListener("mousedown", e => { drag = {start: evAt(e), zoom: viewRange(tl)}; e.preventDefault(); });
  hit.addEventListener("mouseup", e => { const d = drag; drag = null; if (d) dragEnd(tl, d, evAt(e), e.shiftKey); });
  hit.addEventListener("dblclick", () => setZoom(tl, null));
  hit.addEventListener("wheel", e => {
    e.preventDefault();
    const f = e.deltaY > 0 ? 1.25 : 0.8, c = evAt(e), [lo, hi] = viewRange(tl);
    setZoom(tl, [c - (c - lo) * f, c + (hi - c) * f]);
  }, {passive: false});
}

/// Moves a synthetic mouse over the chart at `event` (the self-test; #hover=EVENT in the URL).
function hoverTimeline(tl, event) {
  const box = tl.svg.getBoundingClientRect();
  tl.hit.dispatchEvent(new MouseEvent("mousemove", {clientX: box.left + tl.sc.x(event),
                                                    clientY: box.top + TL_MARGIN.t + 20, bubbles: true}));
}

function dragMove(tl, drag, ev, pan) {
  if (pan) return;
  const a = tl.sc.x(Math.min(drag.start, ev)), b = tl.sc.x(Math.max(drag.start, ev));
  tl.sel.setAttribute("x", a); tl.sel.setAttribute("width", b - a);
  tl.sel.setAttribute("visibility", "visible");
}

function dragEnd(tl, drag, ev, pan) {
  tl.sel.setAttribute("visibility", "hidden");
  const px = Math.abs(tl.sc.x(ev) - tl.sc.x(drag.start));
  if (px < 4) { tl.hooks.pick(Math.round(clamp(ev, 0, tl.model.events - 1))); return; }
  if (pan) {
    const d = drag.start - ev;
    setZoom(tl, [drag.zoom[0] + d, drag.zoom[1] + d]);
  } else {
    setZoom(tl, [Math.min(drag.start, ev), Math.max(drag.start, ev)]);
  }
}

/// Zoom to [lo, hi] events (kept inside the trace, at least 8 events wide); null: everything.
function setZoom(tl, range) {
  const last = tl.model.events - 1;
  if (range) {
    let [lo, hi] = range;
    const w = Math.max(8, Math.min(hi - lo, last));
    if (lo < 0) lo = 0;
    if (lo + w > last) lo = last - w;
    range = [Math.max(0, lo), Math.max(0, lo) + w];
    if (range[0] <= 0 && range[1] >= last) range = null;
  }
  state.zoom = range;
  writeHash();
  tl.render();
  if (tl.hooks.zoomChanged) tl.hooks.zoomChanged();
}

function timelineControls(parent, tl) {
  const bar = el("div", {class: "controls"}, parent);
  const button = (text, title, fn) => {
    const b = el("button", {type: "button", title: title}, bar, text);
    b.addEventListener("click", fn);
    return b;
  };
  const pan = f => { const [lo, hi] = viewRange(tl); setZoom(tl, [lo + f * (hi - lo), hi + f * (hi - lo)]); };
  button("◀", "pan left", () => pan(-0.5));
  button("▶", "pan right", () => pan(0.5));
  button("zoom in", "zoom in around the middle", () => { const [lo, hi] = viewRange(tl), q = (hi - lo) / 4; setZoom(tl, [lo + q, hi - q]); });
  button("zoom out", "zoom out", () => { const [lo, hi] = viewRange(tl), q = (hi - lo) / 2; setZoom(tl, [lo - q, hi + q]); });
  button("reset", "show all events", () => setZoom(tl, null));
  const zoomText = el("span", {class: "zoom-text"}, bar);
  el("span", {class: "hint"}, bar, "drag: zoom to a range · wheel: zoom · shift+drag: pan · " +
     "double-click: reset · click: show the memory layout at that event · equal values are drawn " +
     LINE_GAP + " px apart (hover for exact values)");
  return {bar: bar, zoomText: zoomText};
}

// ---- legend: click toggles a stack, hover highlights it

function buildLegend(tl) {
  const lg = tl.legend;
  const live = el("span", {class: "item live"}, lg);
  el("i", {class: "swatch dashed"}, live);
  live.appendChild(document.createTextNode("live bytes of the trace"));
  for (const st of tl.model.stacks) {
    const item = el("span", {class: "item" + (isHidden(st) ? " off" : ""), "data-stack": st.r.resource,
                             title: "click: show/hide; hover: highlight"}, lg);
    el("i", {class: "swatch", style: "background:" + st.color}, item);
    item.appendChild(document.createTextNode(st.r.resource + (st.failEvent !== null ? " (out of memory)" : "")));
    item.addEventListener("click", () => toggleStack(tl, st, item));
    item.addEventListener("mouseenter", () => highlight(tl, st.r.resource));
    item.addEventListener("mouseleave", () => highlight(tl, null));
  }
}

function toggleStack(tl, st, item) {
  const i = state.hide.indexOf(st.index);
  if (i >= 0) state.hide.splice(i, 1); else state.hide.push(st.index);
  item.classList.toggle("off", i < 0);
  writeHash();
  tl.render();
  tl.hooks.stacksChanged();
}

function highlight(tl, name) {
  tl.svg.classList.toggle("dim", name !== null);
  for (const p of tl.svg.querySelectorAll(".series.held")) {
    p.classList.toggle("focus", p.getAttribute("data-stack") === name);
  }
}
