// page/util.js: formatting, DOM helpers and lookups shared by the other parts of the page.
// All parts of page/ are concatenated (in the order CMakeLists.txt lists them) inside one
// function scope, so a name defined here is visible to the others. No libraries, no network.

const SVGNS = "http://www.w3.org/2000/svg";
const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
                "#17becf", "#bcbd22", "#7f7f7f"];
const UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];

/// v with d decimals as C's printf writes it: like toFixed, but an exact tie goes to the even
/// digit (1.125 -> "1.12", where toFixed gives "1.13"), so that the page and the text table agree.
function fixed(v, d) {
  const s = v * Math.pow(10, d), f = Math.floor(s);
  if (s - f === 0.5 && f % 2 === 0) return (f / Math.pow(10, d)).toFixed(d);
  return v.toFixed(d);
}

/// 1536 -> "1.50 KiB", as the tool's table writes sizes; null/undefined -> "-".
function human(bytes) {
  if (bytes === null || bytes === undefined || !isFinite(bytes)) return "-";
  let v = Math.abs(bytes), u = 0;
  while (v >= 1024 && u < UNITS.length - 1) { v /= 1024; u++; }
  const s = u === 0 ? String(v) : fixed(v, 2);
  return (bytes < 0 ? "-" : "") + s + " " + UNITS[u];
}

/// 12345678 -> "12,345,678".
function grouped(n) {
  return String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
}

/// Microseconds as "1.234 s", "12.5 ms", "830 µs".
function duration(us) {
  if (us === null || us === undefined) return "-";
  if (us >= 1e6) return (us / 1e6).toFixed(us >= 1e8 ? 0 : 3) + " s";
  if (us >= 1e3) return (us / 1e3).toFixed(1) + " ms";
  return Math.round(us) + " µs";
}

/// 0.8316 -> "83.2%", as the tool's table writes shares.
function percent(fraction) {
  return fixed(100 * fraction, 1) + "%";
}

/// "105.1 (87.4-267.2)": a median ns/op and its spread over the repeats, as the table writes it.
function speedText(t) {
  if (!t || t.median === undefined) return "-";
  if (!t.repeats || t.repeats.length < 2) return fixed(t.median, 1);
  return `${fixed(t.median, 1)} (${fixed(t.min, 1)}-${fixed(t.max, 1)})`;
}

/// "external fragmentation of free bytes" as the table writes it: "83.2% of 1.48 MiB".
function externalText(ext, free) {
  return percent(ext) + " of " + human(free);
}

function el(tag, attrs, parent, text) {
  const e = document.createElement(tag);
  for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
  if (text !== undefined && text !== null) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}

function svgEl(tag, attrs, parent, text) {
  const e = document.createElementNS(SVGNS, tag);
  for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}

function clamp(v, lo, hi) {
  return Math.max(lo, Math.min(hi, v));
}

/// Index of the point of `pts` (sorted by p[0]) whose p[0] is nearest to x; -1 when empty.
function nearestIndex(pts, x) {
  if (!pts || pts.length === 0) return -1;
  let lo = 0, hi = pts.length - 1;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (pts[mid][0] < x) lo = mid + 1; else hi = mid;
  }
  if (lo > 0 && Math.abs(pts[lo - 1][0] - x) <= Math.abs(pts[lo][0] - x)) return lo - 1;
  return lo;
}

/// Timeline points are maxima of spans of events, each labeled with its last event: the index of
/// the point whose span holds event x (the first with p[0] >= x; the last past the end); -1: none.
function spanIndex(pts, x) {
  if (!pts || pts.length === 0) return -1;
  return Math.min(pts.length - 1, lowerBound(pts.length, i => pts[i][0], x));
}

/// First index i with key(i) >= x over [0, n).
function lowerBound(n, key, x) {
  let lo = 0, hi = n;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (key(mid) < x) lo = mid + 1; else hi = mid;
  }
  return lo;
}

/// Round tick steps: 1, 2, 5 x 10^k at least `raw`.
function niceStep(raw) {
  const p = Math.pow(10, Math.floor(Math.log10(Math.max(raw, 1e-9))));
  for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}

/// Byte tick steps: a power of two at least `raw` (1 GiB, 512 MiB, 256 KiB ...), so that tick
/// labels in binary units come out round.
function niceByteStep(raw) {
  let step = 1;
  while (step < raw) step *= 2;
  return step;
}

/// Ticks from lo to hi, about `count` of them.
function ticks(lo, hi, count, stepOf) {
  const step = stepOf((hi - lo) / Math.max(1, count));
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + 1e-9; v += step) out.push(v);
  return out;
}

/// Short name of a trace: its file name.
function baseName(path) {
  return String(path || "").split(/[\\/]/).pop();
}

/// The resource's frame texts for an allocation's stack index (innermost first), or [].
function framesOf(trace, stackIndex) {
  if (stackIndex === undefined || stackIndex < 0 || !trace.stacks || !trace.frames) return [];
  const s = trace.stacks[stackIndex] || [];
  return s.map(i => trace.frames[i]).filter(f => f !== undefined);
}
