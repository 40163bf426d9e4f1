// page/main.js: builds the page from the embedded JSON: per trace a verdict, the timeline, the
// memory layout and the results table; one trace at a time (tabs), state in the URL hash.
// Sets data-rendered="ok" on <body> when done (the tests check it).

const pageStart = performance.now();
const data = JSON.parse(document.getElementById("gpumem-data").textContent);
const parsedMs = performance.now() - pageStart;

function makeTooltip() {
  const tip = el("div", {class: "tooltip", id: "tooltip"}, document.body);
  tip.style.display = "none";
  return {
    show: (e, lines) => {
      tip.textContent = lines.join("\n");
      tip.style.display = "block";
      const x = Math.min(e.clientX + 14, window.innerWidth - tip.offsetWidth - 8);
      tip.style.left = Math.max(4, x) + "px";
      tip.style.top = (e.clientY + 16) + "px";
    },
    hide: () => { tip.style.display = "none"; },
  };
}

function traceTabs(root) {
  if (data.traces.length < 2) return;
  const nav = el("nav", {class: "tabs"}, root);
  data.traces.forEach((t, i) => {
    const b = el("button", {type: "button", class: i === state.trace ? "on" : ""}, nav, baseName(t.path));
    b.addEventListener("click", () => {
      state.trace = i; state.event = null; state.zoom = null; state.azoom = null; state.hide = [];
      writeHash();
      renderPage();
    });
  });
}

function traceSummary(sec, t) {
  el("h2", {}, sec, baseName(t.path));
  const allocs = t.allocation_count !== undefined ? t.allocation_count
      : Array.isArray(t.allocations) ? t.allocations.length : t.allocations;
  el("p", {class: "summary"}, sec, `${grouped(t.events)} events (${grouped(allocs)} allocations, ` +
     `${grouped(t.frees)} frees), peak live ${human(t.peak_live_bytes)} at event ` +
     `${grouped(t.peak_live_event)}, ${t.threads} thread(s), ${t.streams} stream(s).`);
}

function layoutSection(sec, model, hooks) {
  const box = el("section", {class: "layout", id: "layout-view"}, sec);
  el("h3", {}, box, "Memory layout at one event");
  if (model.trace.allocations_omitted) {
    el("p", {class: "note"}, box, "The trace has more than 2,000,000 allocations: the report leaves " +
       "their addresses out to stay small, so only the timeline is shown.");
    return null;
  }
  if (!model.hasLayout) {
    el("p", {class: "note"}, box, "This report has no addresses (made by an older gpumem, or a trace " +
       "without allocations): the layout view is not available.");
    return null;
  }
  return makeLayout(box, model, hooks);
}

function bandsSection(sec, model, hooks) {
  const box = el("section", {class: "bands", id: "bands-view"}, sec);
  el("h3", {}, box, "Allocations over time — each a band from its allocation to its free, as thick as its size");
  if (!model.hasLayout || !model.exactLive) {
    el("p", {class: "note"}, box, model.trace.allocations_omitted
       ? "The trace has more than 2,000,000 allocations: the report leaves them out, and with them the bands."
       : "This report has no allocations (made by an older gpumem, or a trace without any): no bands to draw.");
    return null;
  }
  return makeBands(box, model, hooks);
}

function renderPage() {
  const root = document.getElementById("traces");
  root.textContent = "";
  state.trace = clamp(state.trace, 0, Math.max(0, data.traces.length - 1));
  traceTabs(root);
  const t = data.traces[state.trace];
  const page = {};
  if (!t) { el("p", {}, root, "The report has no traces."); return page; }
  const model = modelOf(t), sec = el("section", {class: "trace"}, root);
  page.model = model;
  traceSummary(sec, t);
  verdictPanel(sec, model, data.simulated);
  const hooks = {tooltip: tooltip, pick: e => pick(page, e),
                 stacksChanged: () => page.layout && page.layout.render(), rebuild: renderPage,
                 zoomChanged: () => page.bands && page.bands.render()};
  const timeBox = el("section", {class: "timeline", id: "timeline-view"}, sec);
  el("h3", {}, timeBox, "Memory held over time — every stack on one scale, dashed: live bytes of the trace");
  page.timeline = model.stacks.length || model.live.length ? makeTimeline(timeBox, model, hooks) : null;
  page.layout = layoutSection(sec, model, hooks);
  if (page.layout) page.layout.render();
  page.bands = bandsSection(sec, model, hooks);
  if (state.view === "layout") sec.insertBefore(document.getElementById("layout-view"), timeBox);
  el("h3", {}, sec, "Results");
  resultsTable(sec, model, data.simulated, data.report_version || 1);
  byStackTable(sec, model);
  return page;
}

function pick(page, event) {
  state.event = event;
  writeHash();
  if (page.timeline) page.timeline.render();
  if (page.layout) page.layout.render();
}

const tooltip = makeTooltip();
readHash();
el("p", {}, document.getElementById("device"), "Device: " + data.device +
   (data.simulated ? " — times are host bookkeeping only" : ""));
const firstPage = renderPage();
firstPage.timing = {parse_ms: Math.round(parsedMs), page_ms: Math.round(performance.now() - pageStart),
                    layout_ms: firstPage.layout ? Math.round(firstPage.layout.lastMs) : null};
if (state.hover !== null && firstPage.timeline) hoverTimeline(firstPage.timeline, state.hover);
// a hash typed or pasted into the address bar (the page's own changes use replaceState: no event)
window.addEventListener("hashchange", () => { readHash(); renderPage(); });
document.body.setAttribute("data-rendered", "ok");
if (state.selftest) runSelftest(firstPage);
