// The self-contained HTML report: the results as embedded JSON, drawn by an inline script
// (report_page.js, embedded at build time as report_page_js.inc).
#include "report.hpp"

#include "checked_output.hpp"

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
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; }
table { border-collapse: collapse; margin: 8px 0 24px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
td:first-child, th:first-child { text-align: left; font-family: monospace; }
.chart { background: #fafafa; border: 1px solid #ddd; }
.grid line, line.grid { stroke: #e4e4e4; }
.tick { font-size: 11px; fill: #555; }
.series { stroke-width: 1.5; }
div.grid { display: flex; flex-wrap: wrap; gap: 12px; }
figure { margin: 0; } figcaption { font-size: 12px; font-family: monospace; }
.legend span { margin-right: 16px; font-family: monospace; }
.legend i { display: inline-block; width: 12px; height: 12px; margin-right: 4px; }
)css";

/// JSON inside <script>: "</" must not end the element.
std::string script_safe(std::string s)
{
  for (std::size_t i = s.find("</"); i != std::string::npos; i = s.find("</", i + 3)) {
    s.replace(i, 2, "<\\/");
  }
  return s;
}

}  // namespace

void write_html(std::ostream& out, replay_report const& report)
{
  std::ostringstream json;
  write_json(json, report, true);
  out << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      << "<title>gpumem replay report</title><style>" << page_style << "</style></head>\n"
      << "<body><h1>gpumem replay report</h1><div id=\"device\"></div>"
      << "<p>Peak held: most memory the stack held from below. Fragmentation and the largest free "
         "block are measured when the trace's live bytes peak. See docs/tool.md.</p>"
      << "<div id=\"traces\"></div>\n"
      << "<script id=\"gpumem-data\" type=\"application/json\">" << script_safe(json.str())
      << "</script>\n<script>" << page_script << "</script></body></html>\n";
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
