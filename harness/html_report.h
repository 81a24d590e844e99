// `detfuzz report`: one self-contained HTML file (inline SVG, no script, nothing fetched) of one
// or more report folders. The renderer is reports/html_report.py (Python's standard library
// only); this runs it with the folders and checks what it wrote.
#pragma once

#include <string>
#include <vector>

namespace detfuzz {

struct HtmlReportOptions {
  std::vector<std::string> runs;  // report folders: fuzz, bench, scan
  std::string out;                // default: <first folder>/report.html
};

// Returns the exit code (0); throws std::invalid_argument for a missing folder, a missing
// python3 or a renderer failure (its one-line error).
int render_html_report(const HtmlReportOptions &o);

}  // namespace detfuzz
