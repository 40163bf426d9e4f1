// page/state.js: the page's state (which trace, event, zoom, view, hidden stacks) and its URL hash,
// e.g. #trace=0&event=123&zoom=100-2000&azoom=0-1073741824&view=layout&hide=1,3&bands=address:2
// so that a link or a screenshot shows a chosen state (#hover=EVENT: the readout at EVENT, as if
// the mouse were there; read only, not written back). Also the model of each trace: its stacks
// with colors, its live line, its time lookup.

const STATE_DEFAULTS = {trace: 0, event: null, zoom: null, azoom: null, view: "timeline", hide: [],
                        hover: null, selftest: false, bands: "size"};
const state = Object.assign({}, STATE_DEFAULTS);

function parseRange(text) {
  const m = /^(-?\d+(?:\.\d+)?)-(\d+(?:\.\d+)?)$/.exec(text || "");
  if (!m) return null;
  const a = Number(m[1]), b = Number(m[2]);
  return b > a ? [a, b] : null;
}

function readHash() {
  Object.assign(state, STATE_DEFAULTS, {hide: []});
  const h = location.hash.replace(/^#/, "");
  for (const part of h.split("&")) {
    const [k, v] = part.split("=");
    if (k === "trace") state.trace = Math.max(0, parseInt(v, 10) || 0);
    else if (k === "event" && /^\d+$/.test(v || "")) state.event = parseInt(v, 10);
    else if (k === "zoom") state.zoom = parseRange(v);
    else if (k === "azoom") state.azoom = parseRange(v);
    else if (k === "view" && (v === "layout" || v === "timeline")) state.view = v;
    else if (k === "hide" && v) state.hide = v.split(",").map(Number).filter(n => n >= 0);
    else if (k === "hover" && /^\d+$/.test(v || "")) state.hover = parseInt(v, 10);
    else if (k === "selftest") state.selftest = true;
    else if (k === "bands" && /^(size|address:\d+)$/.test(v || "")) state.bands = v;
  }
}

function writeHash() {
  const parts = ["trace=" + state.trace];
  if (state.event !== null) parts.push("event=" + state.event);
  if (state.zoom) parts.push("zoom=" + state.zoom.map(Math.round).join("-"));
  if (state.azoom) parts.push("azoom=" + state.azoom.map(Math.round).join("-"));
  if (state.view !== "timeline") parts.push("view=" + state.view);
  if (state.hide.length) parts.push("hide=" + state.hide.join(","));
  if (state.bands !== "size") parts.push("bands=" + state.bands);
  if (state.selftest) parts.push("selftest");
  history.replaceState(null, "", "#" + parts.join("&"));
}

/// The trace with what the page derives from it: stacks (results that ran) with colors, the live
/// line (the trace's live_timeline; for the old shape, the live of a stack that did not fail),
/// the time lookup and whether a layout can be drawn.
function modelOf(trace) {
  const stacks = [];
  trace.results.forEach((r, i) => {
    if (r.error || !r.timeline) return;
    stacks.push({r: r, index: i, color: COLORS[stacks.length % COLORS.length],
                 failEvent: r.failure ? r.failure.event : null, grant: grantOf(r)});
  });
  const hasLayout = Array.isArray(trace.allocations) && trace.allocations.length > 0;
  const events = Math.max(1, trace.events);
  for (const st of stacks) st.exact = hasLayout ? exactHeld(st, events) : null;
  return {trace: trace, stacks: stacks, live: liveLineOf(trace, stacks), capacity: data.capacity_bytes || 0,
          time: trace.time_us && trace.time_us.length ? trace.time_us : null,
          hasLayout: hasLayout, events: events, exactLive: hasLayout ? exactLive(trace, events) : null};
}

/// Live bytes after each event, from the trace's allocations (exact at every event; the JSON's
/// live_timeline is a sample of it: each point the most over a span of events).
function exactLive(trace, events) {
  const v = new Float64Array(events + 1);
  for (const a of trace.allocations) {
    v[a[0]] += a[2];
    if (a[1] !== -1) v[a[1]] -= a[2];
  }
  for (let e = 1; e < events; e++) v[e] += v[e - 1];
  return v.subarray(0, events);
}

/// Held bytes of a stack after each event, from the chunks it held (taken at from_event, given
/// back at to_event), up to its failure; null when its layout is not known.
function exactHeld(st, events) {
  const r = st.r;
  if (!r.layout_known || !Array.isArray(r.chunks) || !r.chunks.length) return null;
  const n = st.failEvent !== null ? Math.min(events, st.failEvent + 1) : events;
  const v = new Float64Array(n + 1);
  for (const c of r.chunks) {
    if (c[2] < n) v[c[2]] += c[1];
    if (c[3] !== -1 && c[3] < n) v[c[3]] -= c[1];
  }
  for (let e = 1; e < n; e++) v[e] += v[e - 1];
  return v.subarray(0, n);
}

/// The bytes the stack gives a request of `size`: results.json's "granted" where it differs from
/// the size rounded up to 256 B, as the replay measures internal fragmentation.
function grantOf(r) {
  const m = new Map(r.granted || []);
  return size => (m.has(size) ? m.get(size) : Math.ceil(size / 256) * 256);
}

/// [[event, live], ...]: the trace's own when present, else from a stack that did not fail
/// (the replay's live equals the trace's while the stack has not failed), else the longest.
function liveLineOf(trace, stacks) {
  if (trace.live_timeline && trace.live_timeline.length) return trace.live_timeline;
  const whole = stacks.find(s => !s.r.failure) ||
                stacks.slice().sort((a, b) => b.r.timeline.length - a.r.timeline.length)[0];
  return whole ? whole.r.timeline.map(p => [p[0], p[1]]) : [];
}

/// Microseconds since the first event: exact at the samples (time_us), interpolated between them
/// (event 0 is at 0), or null without times.
function timeAt(model, event) {
  const t = model.time;
  if (!t) return null;
  const i = lowerBound(t.length, k => t[k][0], event);
  if (i < t.length && t[i][0] === event) return t[i][1];
  if (i >= t.length) return t[t.length - 1][1];
  const [e0, t0] = i > 0 ? t[i - 1] : [0, 0], [e1, t1] = t[i];
  return e1 > e0 ? t0 + (t1 - t0) * (event - e0) / (e1 - e0) : t1;
}

function isHidden(stack) {
  return state.hide.indexOf(stack.index) >= 0;
}
