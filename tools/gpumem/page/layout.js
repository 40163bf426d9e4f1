// page/layout.js: the memory layout at one event, every stack side by side. Each row is a stack's
// held memory (its chunks from upstream, in address order, laid end to end on one byte scale
// shared by all rows): live blocks dark, free gaps orange, the largest free gap mint — so
// fragmentation shows as orange slivers. Drawn on canvas per pixel column (blocks smaller than a
// pixel are aggregated), so millions of blocks cost one pass. Hover a block: size, allocating
// event, address, stack frames. Drag or wheel on a row zooms the address axis.

const LAYOUT_ROW_H = 30;
const RGB = {block: [44, 62, 110], slack: [150, 160, 190], free: [245, 150, 60], largest: [140, 215, 180],
             none: [255, 255, 255]};

function makeLayout(parent, model, hooks) {
  const ly = {model: model, hooks: hooks, width: Math.max(600, (parent.clientWidth || 1200) - 2)};
  ly.head = el("div", {class: "layout-head"}, parent);
  ly.body = el("div", {class: "layout-body", id: "layout"}, parent);
  ly.tip = hooks.tooltip;
  layoutControls(ly);
  ly.render = () => renderLayout(ly);
  return ly;
}

function layoutControls(ly) {
  const bar = el("div", {class: "controls"}, ly.head);
  el("label", {for: "event-input"}, bar, "event ");
  const input = el("input", {type: "number", id: "event-input", min: 0, max: ly.model.events - 1}, bar);
  input.addEventListener("change", () => {
    const v = parseInt(input.value, 10);
    if (v >= 0) ly.hooks.pick(clamp(v, 0, ly.model.events - 1));
  });
  const button = (text, title, fn) => el("button", {type: "button", title: title}, bar, text)
      .addEventListener("click", fn);
  jumpSelect(ly, bar);
  button("reset address zoom", "show every stack's whole held memory", () => setAzoom(ly, null));
  button(state.view === "layout" ? "timeline on top" : "layout on top", "which view comes first (view= in the URL)",
         () => { state.view = state.view === "layout" ? "timeline" : "layout"; writeHash(); ly.hooks.rebuild(); });
  ly.input = input;
  ly.caption = el("span", {class: "zoom-text"}, bar);
  el("span", {class: "hint"}, bar, "drag on a row: zoom the address axis · wheel: zoom · " +
     "hover: block details");
  const key = el("div", {class: "legend layout-key"}, ly.head);
  for (const [name, c] of [["live block", RGB.block], ["slack (granted, not asked for)", RGB.slack], ["free gap", RGB.free],
                           ["largest free gap", RGB.largest]]) {
    const item = el("span", {class: "item"}, key);
    el("i", {class: "swatch", style: `background:rgb(${c.join(",")})`}, item);
    item.appendChild(document.createTextNode(name));
  }
  el("span", {class: "hint"}, key, "chunks laid end to end in address order (thin black lines: " +
     "chunk boundaries); one byte scale for all stacks; a block's slack is the rounding or bin it " +
     "was given beyond what it asked for, counted as the table counts it (internal, not free)");
}

/// "jump to": the peak of live bytes, and per stack its peak of held bytes and its failure.
function jumpSelect(ly, bar) {
  const sel = el("select", {id: "jump", title: "show the layout at a notable event"}, bar);
  el("option", {value: ""}, sel, "jump to…");
  el("option", {value: ly.model.trace.peak_live_event}, sel, "peak of live bytes");
  for (const st of ly.model.stacks) {
    if (st.r.peak_held_event !== undefined) {
      el("option", {value: st.r.peak_held_event}, sel, st.r.resource + ": peak held");
    }
    if (st.failEvent !== null) el("option", {value: st.failEvent}, sel, st.r.resource + ": out of memory");
  }
  sel.addEventListener("change", () => {
    if (sel.value !== "") ly.hooks.pick(Number(sel.value));
    sel.value = "";
  });
}

function layoutEvent(ly) {
  return state.event !== null ? state.event : ly.model.trace.peak_live_event;
}

// ---- the data at one event

/// Indices of the trace's allocations live at `event` (alloc_event <= event < free_event).
function liveAllocations(trace, event) {
  const out = [], al = trace.allocations;
  for (let k = 0; k < al.length && al[k][0] <= event; k++) {
    if (al[k][1] === -1 || event < al[k][1]) out.push(k);
  }
  return out;
}

/// One stack's layout at `event`: chunks held, blocks placed in the chunks laid end to end.
function stackLayout(model, st, live, event) {
  const r = st.r;
  if (!r.layout_known || !Array.isArray(r.addresses) || !r.addresses.length) return {unknown: true};
  if (st.failEvent !== null && event > st.failEvent) return {oom: true};
  const al = model.trace.allocations;
  const blocks = live.filter(k => r.addresses[k] !== -1 && r.addresses[k] !== undefined)
      .map(k => ({k: k, off: r.addresses[k], size: al[k][2]}))
      .sort((a, b) => a.off - b.off);
  let chunks = (r.chunks || []).filter(c => c[2] <= event && (c[3] === -1 || event < c[3]))
      .map(c => ({off: c[0], bytes: c[1], from: c[2], to: c[3]})).sort((a, b) => a.off - b.off);
  if (r.chunks_join) chunks = joinTouching(chunks);
  if (!chunks.length && blocks.length) {
    const end = blocks[blocks.length - 1].off + blocks[blocks.length - 1].size;
    chunks = [{off: blocks[0].off, bytes: end - blocks[0].off, from: null, to: null}];
  }
  let pos = 0;
  for (const c of chunks) { c.pos = pos; pos += c.bytes; }
  placeBlocks(blocks, chunks);
  const liveBytes = blocks.reduce((n, b) => n + b.size, 0);
  return Object.assign({blocks: blocks, chunks: chunks, held: pos}, freeGaps(blocks, chunks, st.grant, pos, liveBytes));
}

/// "7 chunk(s)", or for joined mappings "1 range(s) of 768 mapping(s)".
function heldPieces(r, chunks) {
  if (!r.chunks_join) return `${grouped(chunks.length)} chunk(s)`;
  const mappings = chunks.reduce((n, c) => n + (c.mappings || 1), 0);
  return `${grouped(chunks.length)} range(s) of ${grouped(mappings)} mapping(s)`;
}

/// Virtual-memory mappings that touch are one range of addresses: the stack may hand out a block
/// across them (results.json's chunks_join), so they are laid out, and their gaps measured, as one.
function joinTouching(chunks) {
  const out = [];
  for (const c of chunks) {
    const last = out[out.length - 1];
    if (last && last.off + last.bytes === c.off) {
      last.bytes += c.bytes;
      last.mappings += 1;
    } else {
      out.push(Object.assign({mappings: 1}, c));
    }
  }
  return out;
}

function placeBlocks(blocks, chunks) {
  let c = 0;
  for (const b of blocks) {
    while (c < chunks.length && b.off >= chunks[c].off + chunks[c].bytes) c++;
    b.pos = c < chunks.length && b.off >= chunks[c].off ? chunks[c].pos + b.off - chunks[c].off : null;
  }
}

/// The figures of the layout, defined as the replay defines them at the peak (docs/tool.md): each
/// live block takes its slack up to the bytes the stack grants it (`grant`), bounded by the next
/// block and its chunk's end (internal); free = held - live - internal; the largest free is the
/// longest run of a chunk not covered by a block and its slack; external = 1 - largest / free.
function freeGaps(blocks, chunks, grant, held, live) {
  let largest = 0, largestPos = null, count = 0, internal = 0, bi = 0;
  for (const c of chunks) {
    let at = c.pos;
    const end = c.pos + c.bytes;
    const gap = to => {
      if (to > at) { count++; if (to - at > largest) { largest = to - at; largestPos = at; } }
    };
    while (bi < blocks.length && (blocks[bi].pos === null || blocks[bi].pos < end)) {
      const b = blocks[bi++];
      if (b.pos === null || b.pos < at) continue;  // outside the chunks, or overlapping: not counted
      gap(b.pos);
      let n = bi;
      while (n < blocks.length && blocks[n].pos === null) n++;
      const following = n < blocks.length ? Math.min(blocks[n].pos, end) : end;
      b.slack = Math.min(Math.max(grant(b.size), b.size) - b.size, Math.max(0, following - b.pos - b.size));
      internal += b.slack;
      at = b.pos + b.size + b.slack;
    }
    gap(end);
  }
  const free = Math.max(0, held - live - internal);
  return {free: free, largest: largest, largestPos: largestPos, gaps: count, internal: internal,
          external: free === 0 ? 0 : 1 - largest / free};
}

// ---- drawing

function renderLayout(ly) {
  const m = ly.model, event = layoutEvent(ly), start = performance.now();
  ly.body.textContent = "";
  ly.input.value = String(event);
  ly.event = event;
  ly.body.setAttribute("data-event", String(event));
  const t = timeAt(m, event);
  ly.caption.textContent = "layout at event " + grouped(event) + (t !== null ? " (" + duration(t) + ")" : "") +
      (event === m.trace.peak_live_event ? " — the peak of live bytes" : "");
  const live = liveAllocations(m.trace, event);
  const rows = m.stacks.filter(s => !isHidden(s)).map(st => ({st: st, lay: stackLayout(m, st, live, event)}));
  const top = Math.max(1, ...rows.map(r => r.lay.held || 0));
  const range = state.azoom ? [clamp(state.azoom[0], 0, top), clamp(state.azoom[1], 1, top)] : [0, top];
  ly.range = range[1] > range[0] ? range : [0, top];
  if (rows.some(r => r.lay.held)) layoutAxis(ly);
  for (const row of rows) layoutRow(ly, row.st, row.lay);
  ly.lastMs = performance.now() - start;
}

function layoutAxis(ly) {
  const [a, b] = ly.range, w = ly.width;
  const s = svgEl("svg", {class: "layout-axis", width: w, height: 22}, ly.body);
  for (const v of ticks(a, b, 8, niceByteStep)) {
    const x = (v - a) / (b - a) * (w - 1);
    svgEl("line", {x1: x, x2: x, y1: 16, y2: 22, class: "gridline dark"}, s);
    svgEl("text", {x: clamp(x, 24, w - 30), y: 12, "text-anchor": "middle", class: "tick"}, s, human(v));
  }
}

function layoutRow(ly, st, lay) {
  const row = el("div", {class: "layout-row", "data-stack": st.r.resource}, ly.body);
  const label = el("div", {class: "layout-label"}, row);
  el("i", {class: "swatch", style: "background:" + st.color}, label);
  el("b", {}, label, st.r.resource);
  if (lay.unknown) { el("span", {class: "note"}, label, " — layout not known (this stack bypasses the meter)"); return; }
  if (lay.oom) {
    el("span", {class: "note oom"}, label, " — ran out of memory at event " + grouped(st.failEvent) +
       "; nothing after it (pick an earlier event)");
    return;
  }
  row.setAttribute("data-blocks", String(lay.blocks.length));
  const stats = el("span", {class: "stats"}, label, ` ${grouped(lay.blocks.length)} live blocks · held ${human(lay.held)} in ` +
     heldPieces(st.r, lay.chunks) + ` · slack ${human(lay.internal)} · free ${human(lay.free)} in ${grouped(lay.gaps)} ` +
     `gap(s), largest ${human(lay.largest)} · external fragmentation `);
  el("span", {class: "ext"}, stats, externalText(lay.external, lay.free));
  if (st.failEvent === ly.event) stats.appendChild(document.createTextNode(" · "));
  if (st.failEvent === ly.event) {
    el("span", {class: "note oom"}, label, "ran out of memory here: asked for " + human(st.r.failure.bytes) +
       ", the largest free gap is " + human(lay.largest));
  }
  // drawn per device pixel (sharp on high-density screens), sized in CSS pixels
  const dpr = Math.max(1, Math.min(4, window.devicePixelRatio || 1));
  const cv = el("canvas", {width: Math.round(ly.width * dpr), height: Math.round(LAYOUT_ROW_H * dpr),
                           class: "layout-canvas", style: `width:${ly.width}px;height:${LAYOUT_ROW_H}px`}, row);
  cv.gmLayout = lay;
  drawRow(ly, cv, lay);
  bindRowMouse(ly, cv, st, lay);
}

/// Per pixel column: the share of held bytes that are live, free, or in the largest free gap.
function drawRow(ly, cv, lay) {
  const w = cv.width, [a, b] = ly.range, k = w / (b - a);
  const held = new Float64Array(w), live = new Float64Array(w), big = new Float64Array(w);
  const slack = new Float64Array(w);
  for (const c of lay.chunks) cover(held, c.pos, c.pos + c.bytes, a, k);
  for (const bl of lay.blocks) {
    if (bl.pos === null) continue;
    cover(live, bl.pos, bl.pos + bl.size, a, k);
    if (bl.slack) cover(slack, bl.pos + bl.size, bl.pos + bl.size + bl.slack, a, k);
  }
  if (lay.largestPos !== null) cover(big, lay.largestPos, lay.largestPos + lay.largest, a, k);
  const g = cv.getContext("2d"), pad = Math.round(cv.height / 10);
  g.fillStyle = "#fff";
  g.fillRect(0, 0, w, cv.height);
  for (let x = 0; x < w; x++) {
    if (held[x] <= 0) continue;
    const h = Math.min(1, held[x]), l = Math.min(h, live[x]), sl = Math.min(h - l, slack[x]);
    const gr = Math.min(h - l - sl, big[x]);
    g.fillStyle = mixColor(l, sl, gr, h - l - sl - gr);
    g.fillRect(x, pad, 1, cv.height - 2 * pad);
  }
  drawBoundaries(g, lay, a, k, w, cv.height);
}

/// Adds to arr[x] the fraction of pixel x covered by [from, to) (bytes, window start a, px/byte k).
function cover(arr, from, to, a, k) {
  const x0 = Math.max(0, (from - a) * k), x1 = Math.min(arr.length, (to - a) * k);
  for (let x = Math.floor(x0); x < x1; x++) arr[x] += Math.min(x + 1, x1) - Math.max(x, x0);
}

/// The color of a pixel column from the shares of it that are live, slack, largest gap, other
/// free; the rest (not held) is white.
function mixColor(live, slack, big, free) {
  const none = Math.max(0, 1 - live - slack - big - free);
  const c = [0, 1, 2].map(i => Math.round(RGB.block[i] * live + RGB.slack[i] * slack + RGB.largest[i] * big +
                                          RGB.free[i] * Math.max(0, free) + RGB.none[i] * none));
  return `rgb(${c.join(",")})`;
}

/// Black lines between chunks and light lines between blocks, where they are at least 3 px apart.
function drawBoundaries(g, lay, a, k, w, h) {
  const line = (pos, style) => {
    const x = Math.round((pos - a) * k);
    if (x > 0 && x < w) { g.fillStyle = style; g.fillRect(x, 0, 1, h); }
  };
  for (const c of lay.chunks) if (c.bytes * k >= 3) line(c.pos, "#000");
  for (const bl of lay.blocks) if (bl.pos !== null && bl.size * k >= 3) line(bl.pos, "rgba(255,255,255,0.8)");
}

// ---- hover and address zoom

function bindRowMouse(ly, cv, st, lay) {
  const posAt = e => ly.range[0] + (e.clientX - cv.getBoundingClientRect().left) * (ly.range[1] - ly.range[0]) / ly.width;
  let drag = null;
  cv.addEventListener("mousemove", e => {
    ly.tip.show(e, describeAt(ly, st, lay, posAt(e), (ly.range[1] - ly.range[0]) / ly.width));
  });
  cv.addEventListener("mouseleave", () => ly.tip.hide());
  cv.addEventListener("mousedown", e => { drag = posAt(e); e.preventDefault(); });
  cv.addEventListener("mouseup", e => {
    const p = posAt(e), px = Math.abs(p - drag) * ly.width / (ly.range[1] - ly.range[0]);
    if (drag !== null && px >= 4) setAzoom(ly, [Math.min(p, drag), Math.max(p, drag)]);
    drag = null;
  });
  cv.addEventListener("wheel", e => {
    e.preventDefault();
    const f = e.deltaY > 0 ? 1.25 : 0.8, c = posAt(e), [lo, hi] = ly.range;
    setAzoom(ly, [c - (c - lo) * f, c + (hi - c) * f]);
  }, {passive: false});
}

function setAzoom(ly, range) {
  if (range) range = [Math.max(0, range[0]), Math.max(range[0] + 256, range[1])];
  state.azoom = range;
  writeHash();
  ly.render();
}

/// Tooltip lines for position `pos` (bytes into the row) with `perPx` bytes per pixel.
function describeAt(ly, st, lay, pos, perPx) {
  const bi = lowerBound(lay.blocks.length, i => lay.blocks[i].pos === null ? -1 : lay.blocks[i].pos, pos + 1) - 1;
  const b = bi >= 0 ? lay.blocks[bi] : null;
  if (b && b.pos !== null && pos < b.pos + Math.max(b.size, perPx)) return blockLines(ly, st, lay, b, pos, perPx);
  const c = lay.chunks[lowerBound(lay.chunks.length, i => lay.chunks[i].pos, pos + 1) - 1];
  if (!c || pos >= c.pos + c.bytes) return [st.r.resource, "not held"];
  const lines = [st.r.resource, "free gap inside a chunk" +
                 (lay.largestPos !== null && pos >= lay.largestPos && pos < lay.largestPos + lay.largest
                  ? " — the largest, " + human(lay.largest) : "")];
  return lines.concat(chunkLines(st, c));
}

/// The block under the cursor; where several share the pixel, their count and the largest.
function blockLines(ly, st, lay, b, pos, perPx) {
  const out = [st.r.resource];
  const inPx = lay.blocks.filter(x => x.pos !== null && x.pos < pos + perPx && x.pos + x.size > pos - perPx);
  if (inPx.length > 1) {
    out.push(grouped(inPx.length) + " blocks under the cursor (" +
             human(inPx.reduce((s, x) => s + x.size, 0)) + "); the largest:");
    b = inPx.reduce((x, y) => (y.size > x.size ? y : x));
  }
  const a = ly.model.trace.allocations[b.k];
  out.push("block of " + human(a[2]) + " (" + grouped(a[2]) + " B) at " + addressText(st.r, b.off));
  out.push("allocated at event " + grouped(a[0]) + (a[1] === -1 ? ", never freed" : ", freed at event " + grouped(a[1])));
  const frames = framesOf(ly.model.trace, a[3]);
  if (frames.length) { out.push("stack (innermost first):"); for (const f of frames) out.push("  " + f); }
  return out;
}

function chunkLines(st, c) {
  return ["chunk of " + human(c.bytes) + " at " + addressText(st.r, c.off) +
          (c.from !== null ? ", taken at event " + grouped(c.from) : "") +
          (c.to !== null && c.to !== -1 ? ", given back at event " + grouped(c.to) : "")];
}

/// base + offset as hex when the base is known, else "+offset".
function addressText(r, off) {
  try {
    if (r.base && typeof BigInt === "function") return "0x" + (BigInt(r.base) + BigInt(off)).toString(16);
  } catch (e) { /* not a number: fall through */ }
  return "base + " + grouped(off);
}
