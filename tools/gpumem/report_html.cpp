// The self-contained HTML report: the results as embedded JSON, drawn by an inline script
// (tools/gpumem/page/*.js, joined and embedded at build time as report_page_js.inc).
#include "report.hpp"

#include "checked_output.hpp"
#include "script_safe_stream.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace gpumem::tool {
namespace {

char const page_script[] =
#include "report_page_js.inc"
    ;

char const page_style[] = R"css(
body { font: 14px/1.4 system-ui, sans-serif; margin: 16px 24px; color: #222; max-width: 1360px; }
h1 { margin: 0 0 4px; font-size: 22px; } h2 { margin: 12px 0 4px; } h3 { margin: 18px 0 6px; }
code, .mono { font-family: ui-monospace, monospace; }
.intro, .summary, .hint, .note, .sub { color: #555; }
.hint { font-size: 12px; margin-left: 10px; } .sub { font-size: 11px; font-weight: normal; }
.note.oom, td.oom, .ro-oom { color: #b00020; }
nav.tabs button { font: inherit; padding: 4px 12px; margin-right: 4px; border: 1px solid #bbb;
  background: #f4f4f4; border-radius: 4px 4px 0 0; cursor: pointer; }
nav.tabs button.on { background: #fff; border-bottom-color: #fff; font-weight: bold; }
.verdict { border: 1px solid #cfd8e3; background: #f5f8fc; padding: 6px 14px; border-radius: 6px; }
.verdict h3 { margin: 4px 0; } .verdict dl { display: grid; grid-template-columns: 110px 1fr;
  margin: 4px 0; gap: 2px 8px; } .verdict dt { font-weight: bold; } .verdict dd { margin: 0; }
.verdict ul { margin: 0; padding-left: 18px; }
.controls { margin: 4px 0; display: flex; align-items: center; flex-wrap: wrap; gap: 4px; }
.controls button { font: inherit; font-size: 12px; padding: 1px 8px; cursor: pointer; }
.controls input { width: 90px; font: inherit; } .controls select { font: inherit; font-size: 12px; }
.zoom-text { font-size: 12px; margin-left: 8px; font-weight: bold; }
.tl-box { display: flex; align-items: flex-start; gap: 8px; }
.chart { display: block; user-select: none; }
.plot-bg { fill: #fbfbfb; stroke: #ccc; }
.gridline { stroke: #e6e6e6; } .gridline.dark { stroke: #888; }
.tick { font-size: 11px; fill: #444; } .tick.time { fill: #888; }
.axis-title { font-size: 12px; fill: #333; }
.series { fill: none; stroke-linejoin: round; stroke-width: 2; }
.series.live { stroke: #000; stroke-width: 1.6; stroke-dasharray: 5 3; opacity: 1; }
.dim .series.held { opacity: 0.12; } .dim .series.held.focus { opacity: 1; }
.cross { stroke: #555; stroke-width: 1; pointer-events: none; }
.hover-dots circle { stroke: #fff; stroke-width: 1; pointer-events: none; }
.drag-select { fill: rgba(30, 120, 220, 0.15); stroke: #1e78dc; pointer-events: none; }
.hit { fill: transparent; cursor: crosshair; }
.peak-line { stroke: #999; stroke-dasharray: 2 3; } .capacity-line { stroke: #b00020; stroke-dasharray: 8 4; opacity: 0.5; } .pick-line { stroke: #1e78dc; stroke-width: 1.5; }
.marker-label { font-size: 11px; fill: #666; } .marker-label.pick { fill: #1e78dc; }
.oom-line { stroke-dasharray: 6 3; stroke-width: 1.5; opacity: 0.8; }
.oom-x { stroke: #b00020; stroke-width: 3; }
.oom-label, .marker-label { paint-order: stroke; stroke: #fff; stroke-width: 3px; stroke-linejoin: round; }
.oom-label { font-size: 12px; font-weight: bold; } .label-bg { fill: #fff; opacity: 0.9; }
.readout { min-width: 240px; background: #fff; border: 1px solid #bbb; border-radius: 4px;
  padding: 4px 8px; font-size: 12px; margin-top: 14px; }
.readout table { border-collapse: collapse; } .readout td { padding: 0 6px 0 0; white-space: nowrap; }
.readout td:last-child { text-align: right; font-family: ui-monospace, monospace; }
.ro-head { font-weight: bold; }
.legend { margin: 6px 0; } .legend .item { margin-right: 14px; font-family: ui-monospace, monospace;
  font-size: 13px; cursor: pointer; white-space: nowrap; } .legend .item.off { opacity: 0.35;
  text-decoration: line-through; }
.swatch { display: inline-block; width: 12px; height: 12px; margin-right: 4px; vertical-align: -1px; }
.swatch.dashed { background: repeating-linear-gradient(90deg, #000 0 5px, transparent 5px 8px);
  height: 2px; vertical-align: 3px; width: 18px; }
.layout-key .item { cursor: default; }
.layout-row { margin: 2px 0 6px; } .layout-label { font-size: 12px; }
.layout-label b { font-family: ui-monospace, monospace; } .stats { color: #444; }
.layout-canvas { display: block; border: 1px solid #ccc; cursor: crosshair; }
.bands-canvas { display: block; cursor: crosshair; }
.by-stack-table td.frames { text-align: left; font-family: ui-monospace, monospace; }
.layout-axis { display: block; }
.tooltip { position: fixed; z-index: 10; background: #fffff0; border: 1px solid #999; padding: 4px 8px;
  font: 12px/1.35 ui-monospace, monospace; white-space: pre; pointer-events: none;
  box-shadow: 0 2px 6px rgba(0,0,0,0.2); }
table.results { border-collapse: collapse; margin: 8px 0 24px; }
table.results th, table.results td { border: 1px solid #ccc; padding: 3px 8px; text-align: right;
  vertical-align: top; }
table.results td:first-child, table.results th:first-child { text-align: left;
  font-family: ui-monospace, monospace; white-space: nowrap; }
table.results td .res-note { width: 340px; text-align: left; }
td.dash { color: #999; text-align: center !important; }
table.results td.error { text-align: left; color: #b00020; }
#selftest { white-space: pre-wrap; font-size: 10px; }
)css";

}  // namespace

void write_html(std::ostream& out, replay_report const& report)
{
  out << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      << "<title>gpumem replay report</title><style>" << page_style << "</style></head>\n"
      << "<body><h1>gpumem replay report</h1><div id=\"device\"></div>"
      << "<p class=\"intro\">Peak held: most memory the stack held from below. Fragmentation and "
         "the largest free block are measured when the trace's live bytes peak (\"@ peak\"). "
         "See docs/tool.md.</p>"
      << "<div id=\"traces\"></div>\n"
      << "<script id=\"gpumem-data\" type=\"application/json\">";
  script_safe_buf safe{out};
  std::ostream json{&safe};
  write_json(json, report, true);
  safe.finish();
  out << "</script>\n<script>" << page_script << "</script></body></html>\n";
}

std::string write_report_folder(std::string const& dir, replay_report const& report,
                                std::vector<std::string> const& inputs)
{
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    throw output_error{"cannot create the report folder " + dir + ": " + ec.message() +
                       " (choose another with --report DIR)"};
  }
  auto write = [&](char const* name, auto&& fn) {
    checked_output out{(fs::path{dir} / name).string(), inputs};
    fn(out.stream());
    out.commit();
  };
  write("index.html", [&](std::ostream& o) { write_html(o, report); });
  write("results.json", [&](std::ostream& o) { write_json(o, report, true); });
  write("results.csv", [&](std::ostream& o) { write_csv(o, report); });
  return fs::absolute(fs::path{dir} / "index.html").lexically_normal().string();
}

}  // namespace gpumem::tool
