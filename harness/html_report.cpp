#include "harness/html_report.h"

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <stdexcept>

namespace detfuzz {
namespace fs = std::filesystem;
namespace {

std::string shell_quote(const std::string &s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

int render_html_report(const HtmlReportOptions &o) {
  for (const auto &r : o.runs)
    if (!fs::is_directory(r)) throw std::invalid_argument("report: " + r + " is not a report folder");
  const fs::path script = fs::path(DETFUZZ_SOURCE_DIR) / "reports" / "html_report.py";
  if (!fs::exists(script)) throw std::invalid_argument("report: the renderer " + script.string() + " is missing");
  const std::string out = o.out.empty() ? (fs::path(o.runs.at(0)) / "report.html").string() : o.out;
  std::string cmd = "python3 " + shell_quote(script.string());
  for (const auto &r : o.runs) cmd += " " + shell_quote(r);
  cmd += " --out " + shell_quote(out) + " 2>&1";
  FILE *p = popen(cmd.c_str(), "r");
  if (!p) throw std::invalid_argument("report: cannot run python3");
  std::string output;
  std::array<char, 512> buf{};
  while (fgets(buf.data(), buf.size(), p)) output += buf.data();
  const int status = pclose(p);
  while (!output.empty() && output.back() == '\n') output.pop_back();
  if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
      throw std::invalid_argument("report: python3 is not installed");
    std::string last = output.substr(output.rfind('\n') == std::string::npos ? 0 : output.rfind('\n') + 1);
    const std::string prefix = "html_report: error: ";
    if (last.rfind(prefix, 0) == 0) last = last.substr(prefix.size());
    throw std::invalid_argument("report: " + (last.empty() ? std::string("the renderer failed") : last));
  }
  std::cout << output << std::endl;
  return 0;
}

}  // namespace detfuzz
