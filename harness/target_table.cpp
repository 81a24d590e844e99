#include "harness/target_table.h"

#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace detfuzz {
namespace {

std::string format(const char *f, double v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace

void print_target_table(const CampaignResult &r, std::ostream &os) {
  const std::vector<std::string> header = {"target", "expect", "cases", "failed", "rate", "max_ulp", "cases/s"};
  std::vector<std::vector<std::string>> rows;
  for (const auto &s : r.targets) {
    if (s.cases == 0) continue;
    const int64_t failed = s.failures + s.errors;
    rows.push_back({s.target.name(), to_string(s.target.expectation), std::to_string(s.cases), std::to_string(failed),
                    format("%.1f%%", 100.0 * failed / s.cases),
                    s.max_ulp == UINT64_MAX ? std::string("inf") : std::to_string(s.max_ulp),
                    format("%.0f", s.cases_per_s())});
  }
  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); ++c) {
    width[c] = header[c].size();
    for (const auto &row : rows) width[c] = std::max(width[c], row[c].size());
  }
  // The first two columns are text (left-aligned), the rest numbers (right-aligned); two spaces apart.
  const auto line = [&](const std::vector<std::string> &cells) {
    std::string out;
    for (size_t c = 0; c < cells.size(); ++c) {
      const std::string pad(width[c] - cells[c].size(), ' ');
      out += c < 2 ? cells[c] + pad : pad + cells[c];
      if (c + 1 < cells.size()) out += "  ";
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    os << out << '\n';
  };
  line(header);
  for (const auto &row : rows) line(row);
}

}  // namespace detfuzz
