// page/bands.js: the trace's allocations as bands over time (like PyTorch memory_viz's active
// memory timeline). Each allocation is a band from the event that made it to the event that freed
// it, as thick as its size; stacked by size (the largest at the bottom; a band moves down when
// one below it is freed) or by address in one stack's memory (its chunks, in address order, laid
// end to end: a band stays where the stack put the block). The events shown follow the timeline's
// zoom. Hover: size, events, times and call stack. Only the BAND_LIMIT allocations with the most
// bytes x events are drawn one by one; by size, the rest are one grey band on top (the top edge
// is the live bytes), by address they are left out; the page says how many.

const BAND_LIMIT = 600;
const BANDS_H = 320, BANDS_M = {l: 84, r: 16, t: 10, b: 24};
const REST_COLOR = "#c8c8c8";

function makeBands(parent, model, hooks) {
  const bd = {model: model, hooks: hooks, width: Math.max(600, (parent.clientWidth || 1200) - 2),
              mode: "size", stack: model.stacks.find(s => Array.isArray(s.r.addresses) && s.r.addresses.length) || null};
  bd.picked = pickBands(model);
  bd.controls = bandControls(parent, bd);
  const chosen = model.stacks.find(s => "address:" + s.index === state.bands);
  if (chosen && Array.isArray(chosen.r.addresses) && chosen.r.addresses.length) {
    bd.mode = "address"; bd.stack = chosen; bd.controls.select.value = state.bands;
  }
  bd.note = el("p", {class: "note", id: "bands-note"}, parent);
  bd.canvas = el("canvas", {class: "bands-canvas", id: "bands"}, parent);
  bd.render = () => renderBands(bd);
  bindBandMouse(bd);
  bd.render();
  return bd;
}

/// The allocations drawn one by one: the BAND_LIMIT with the most bytes x events, in the order
/// they are stacked by size (largest first, then the earlier).
function pickBands(model) {
  const al = model.trace.allocations, end = model.events;
  const life = a => ((a[1] === -1 ? end : a[1]) - a[0]);
  const all = al.map((a, k) => k);
  all.sort((x, y) => al[y][2] * life(al[y]) - al[x][2] * life(al[x]) || x - y);
  const keep = all.slice(0, BAND_LIMIT);
  keep.sort((x, y) => al[y][2] - al[x][2] || al[x][0] - al[y][0] || x - y);
  return {ks: keep, rest: al.length - keep.length};
}

function bandControls(parent, bd) {
  const bar = el("div", {class: "controls"}, parent);
  el("label", {for: "bands-mode"}, bar, "stack the bands ");
  const sel = el("select", {id: "bands-mode"}, bar);
  el("option", {value: "size"}, sel, "by size (largest at the bottom)");
  for (const st of bd.model.stacks) {
    if (Array.isArray(st.r.addresses) && st.r.addresses.length) {
      el("option", {value: "address:" + st.index}, sel, "by address in " + st.r.resource);
    }
  }
  sel.addEventListener("change", () => {
    bd.mode = sel.value === "size" ? "size" : "address";
    if (bd.mode === "address") bd.stack = bd.model.stacks.find(s => "address:" + s.index === sel.value);
    state.bands = sel.value;
    writeHash();
    bd.render();
  });
  el("span", {class: "hint"}, bar, "events as in the timeline above (zoom there) · colour: the call stack " +
     "(as in the table \"live at the peak, by call stack\") · hover: size, events, call stack");
  return {select: sel};
}

// ---- geometry

/// By size: for each drawn band its steps [[event, base], ...] (base: bytes below it), the
/// events of its life, and the drawn bytes after each change (the grey band sits on them).
function sizeLayout(bd) {
  const al = bd.model.trace.allocations, ks = bd.picked.ks, end = bd.model.events;
  const order = new Map(ks.map((k, i) => [k, i]));
  const changes = [];
  for (const k of ks) {
    changes.push([al[k][0], k, 1]);
    if (al[k][1] !== -1) changes.push([al[k][1], k, -1]);
  }
  changes.sort((a, b) => a[0] - b[0] || a[2] - b[2]);
  const live = [], steps = new Map(ks.map(k => [k, []])), below = [];
  let total = 0;
  for (const [e, k, d] of changes) {
    const at = lowerBound(live.length, i => order.get(live[i]), order.get(k));
    if (d > 0) live.splice(at, 0, k); else live.splice(at, 1);
    total += d * al[k][2];
    let base = 0;
    for (let i = 0; i < live.length; i++) {
      if (i >= at) {
        const s = steps.get(live[i]);
        if (!s.length || s[s.length - 1][1] !== base) s.push([e, base]);
      }
      base += al[live[i]][2];
    }
    below.push([e, total]);
  }
  return {steps: steps, below: below, end: end};
}

/// By address in bd.stack: every chunk it ever held, merged and laid end to end in address
/// order; a block's position is its address's place in them.
function addressLayout(bd) {
  const r = bd.stack.r, ranges = [];
  for (const c of (r.chunks || []).slice().sort((a, b) => a[0] - b[0])) {
    const last = ranges[ranges.length - 1];
    if (last && c[0] <= last.off + last.bytes) last.bytes = Math.max(last.bytes, c[0] + c[1] - last.off);
    else ranges.push({off: c[0], bytes: c[1]});
  }
  let pos = 0;
  for (const g of ranges) { g.pos = pos; pos += g.bytes; }
  const place = off => {
    const g = ranges[lowerBound(ranges.length, i => ranges[i].off, off + 1) - 1];
    return g && off < g.off + g.bytes ? g.pos + off - g.off : null;
  };
  const at = new Map();
  for (const k of bd.picked.ks) {
    const off = r.addresses[k];
    if (off !== undefined && off !== -1 && place(off) !== null) at.set(k, place(off));
  }
  return {at: at, top: Math.max(1, pos)};
}

// ---- drawing

function renderBands(bd) {
  const m = bd.model, al = m.trace.allocations, [lo, hi] = bandRange(bd);
  const dpr = Math.max(1, Math.min(4, window.devicePixelRatio || 1)), cv = bd.canvas;
  cv.width = Math.round(bd.width * dpr); cv.height = Math.round(BANDS_H * dpr);
  cv.style.width = bd.width + "px"; cv.style.height = BANDS_H + "px";
  const g = cv.getContext("2d");
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, bd.width, BANDS_H);
  const geo = bd.mode === "size" ? sizeLayout(bd) : addressLayout(bd);
  let top = 1;
  if (bd.mode === "size") {
    for (let e = Math.max(0, Math.floor(lo)); e <= Math.min(m.events - 1, Math.ceil(hi)); e++) top = Math.max(top, m.exactLive[e]);
  } else {
    top = geo.top;
  }
  const pw = bd.width - BANDS_M.l - BANDS_M.r, ph = BANDS_H - BANDS_M.t - BANDS_M.b;
  bd.sc = {lo: lo, hi: hi, top: top * 1.05, x: e => BANDS_M.l + pw * (e - lo) / (hi - lo),
           ex: px => lo + (px - BANDS_M.l) * (hi - lo) / pw, y: v => BANDS_M.t + ph - ph * v / (top * 1.05),
           vy: py => (BANDS_M.t + ph - py) * (top * 1.05) / ph};
  bd.geo = geo;
  g.save();
  g.beginPath(); g.rect(BANDS_M.l, BANDS_M.t, pw, ph); g.clip();
  // the call stack's colour (as in the by-stack table); without stacks, one colour per allocation
  const color = k => COLORS[(bd.model.trace.stacks && bd.model.trace.stacks.length ? Math.max(0, al[k][3]) : k) % COLORS.length];
  if (bd.mode === "size") {
    for (const k of bd.picked.ks) drawSizeBand(g, bd, k, geo.steps.get(k), color(k));
    drawRest(g, bd, geo);
  } else {
    for (const [k, pos] of geo.at) {
      const a = al[k], x0 = bd.sc.x(a[0]), x1 = bd.sc.x(a[1] === -1 ? m.events : a[1]);
      g.fillStyle = color(k);
      g.fillRect(x0, bd.sc.y(pos + a[2]), Math.max(0.5, x1 - x0), Math.max(0.5, bd.sc.y(pos) - bd.sc.y(pos + a[2])));
    }
  }
  g.restore();
  bandAxes(g, bd, pw, ph);
  const drawn = bd.mode === "size" ? bd.picked.ks.length : geo.at.size;
  bd.canvas.setAttribute("data-mode", bd.mode === "size" ? "size" : "address:" + bd.stack.r.resource);
  bd.canvas.setAttribute("data-bands", String(drawn));
  bd.note.textContent = `${grouped(drawn)} of ${grouped(al.length)} allocations drawn one by one (those with ` +
      `the most bytes × events)` + (bd.picked.rest ? (bd.mode === "size"
      ? `; the other ${grouped(bd.picked.rest)} are the grey band on top, whose top edge is the live bytes.`
      : `; the other ${grouped(bd.picked.rest)} are left out here (stack by size to see them summed).`) : ".");
}

function bandRange(bd) {
  const last = Math.max(1, bd.model.events - 1);
  return state.zoom ? [clamp(state.zoom[0], 0, last), clamp(state.zoom[1], 1, last)] : [0, last];
}

/// One band by size: its top edge forward, its bottom edge back, step by step.
function drawSizeBand(g, bd, k, steps, color) {
  const a = bd.model.trace.allocations[k], sc = bd.sc, end = a[1] === -1 ? bd.model.events : a[1];
  if (!steps.length || end < sc.lo || a[0] > sc.hi) return;
  const xs = steps.map(s => s[0]).concat([end]);
  g.beginPath();
  g.moveTo(sc.x(xs[0]), sc.y(steps[0][1] + a[2]));
  for (let i = 0; i < steps.length; i++) {
    g.lineTo(sc.x(xs[i]), sc.y(steps[i][1] + a[2]));
    g.lineTo(sc.x(xs[i + 1]), sc.y(steps[i][1] + a[2]));
  }
  for (let i = steps.length - 1; i >= 0; i--) {
    g.lineTo(sc.x(xs[i + 1]), sc.y(steps[i][1]));
    g.lineTo(sc.x(xs[i]), sc.y(steps[i][1]));
  }
  g.closePath();
  g.fillStyle = color;
  g.fill();
}

/// The allocations not drawn one by one: from the drawn bands' top to the live bytes, per pixel
/// column (its most).
function drawRest(g, bd, geo) {
  if (!bd.picked.rest) return;
  const sc = bd.sc, live = bd.model.exactLive, below = geo.below;
  g.fillStyle = REST_COLOR;
  let bi = 0, drawnBelow = 0;
  for (let e = Math.max(0, Math.floor(sc.lo)); e <= Math.min(live.length - 1, Math.ceil(sc.hi)); e++) {
    while (bi < below.length && below[bi][0] <= e) drawnBelow = below[bi++][1];
    if (live[e] <= drawnBelow) continue;
    const x0 = sc.x(e), x1 = sc.x(e + 1);
    g.fillRect(x0, sc.y(live[e]), Math.max(0.5, x1 - x0), sc.y(drawnBelow) - sc.y(live[e]));
  }
}

function bandAxes(g, bd, pw, ph) {
  const sc = bd.sc;
  g.strokeStyle = "#ccc"; g.strokeRect(BANDS_M.l, BANDS_M.t, pw, ph);
  g.fillStyle = "#444"; g.font = "11px system-ui, sans-serif"; g.textAlign = "right";
  for (const v of ticks(0, sc.top, 5, niceByteStep)) g.fillText(human(v), BANDS_M.l - 6, sc.y(v) + 4);
  g.textAlign = "center";
  for (const e of ticks(sc.lo, sc.hi, 8, niceStep)) if (e === Math.round(e)) g.fillText(grouped(e), sc.x(e), BANDS_H - 8);
}

// ---- hover

/// The allocation under (event, bytes), or "rest" (the grey band), or null.
function bandAt(bd, event, bytes) {
  const al = bd.model.trace.allocations, e = Math.floor(event);
  const liveAt = k => al[k][0] <= e && (al[k][1] === -1 || e < al[k][1]);
  if (bd.mode === "address") {
    for (const [k, pos] of bd.geo.at) if (liveAt(k) && bytes >= pos && bytes < pos + al[k][2]) return k;
    return null;
  }
  let base = 0;
  for (const k of bd.picked.ks) {
    if (!liveAt(k)) continue;
    if (bytes >= base && bytes < base + al[k][2]) return k;
    base += al[k][2];
  }
  return bd.picked.rest && bytes >= base && e >= 0 && bytes < bd.model.exactLive[e] ? "rest" : null;
}

function bandLines(bd, k, event) {
  const m = bd.model, al = m.trace.allocations;
  if (k === "rest") {
    return [`${grouped(bd.picked.rest)} smaller allocations, summed (not drawn one by one)`,
            `live bytes after event ${grouped(Math.floor(event))}: ${human(m.exactLive[Math.floor(event)])}`];
  }
  const a = al[k], when = e => { const t = timeAt(m, e); return grouped(e) + (t !== null ? " (" + duration(t) + ")" : ""); };
  const out = [`allocation ${grouped(k)}: ${human(a[2])} (${grouped(a[2])} B)`,
               "allocated at event " + when(a[0]) + (a[1] === -1 ? ", never freed" : ", freed at event " + when(a[1]))];
  if (bd.mode === "address") out.push("in " + bd.stack.r.resource + " at " + addressText(bd.stack.r, bd.stack.r.addresses[k]));
  const frames = framesOf(m.trace, a[3]);
  if (frames.length) { out.push("stack (innermost first):"); for (const f of frames) out.push("  " + f); }
  return out;
}

function bindBandMouse(bd) {
  const cv = bd.canvas;
  cv.addEventListener("mousemove", e => {
    const box = cv.getBoundingClientRect(), ev = bd.sc.ex(e.clientX - box.left), v = bd.sc.vy(e.clientY - box.top);
    const k = bandAt(bd, ev, v);
    cv.setAttribute("data-hover", k === null ? "" : String(k));
    if (k === null) bd.hooks.tooltip.hide(); else bd.hooks.tooltip.show(e, bandLines(bd, k, ev));
  });
  cv.addEventListener("mouseleave", () => bd.hooks.tooltip.hide());
}
