#include "harness/junit.h"

#include "harness/report.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

namespace detfuzz {
namespace fs = std::filesystem;
namespace {

// XML 1.0 text and attribute values: markup escaped; control characters other than tab and
// newline are not allowed in XML 1.0 at all, so they become '?'.
std::string xml_escape(const std::string &s) {
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        if (static_cast<unsigned char>(ch) < 0x20 && ch != '\n' && ch != '\t')
          out += '?';
        else
          out += ch;
    }
  }
  return out;
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", s < 0 ? 0.0 : s);
  return buf;
}

std::string ulp_text(uint64_t u) { return u == UINT64_MAX ? "inf" : std::to_string(u); }

struct Counts {
  int64_t tests = 0, failures = 0, errors = 0, skipped = 0;
};

// One target's <testcase>.
std::string target_case(const TargetStats &s, const JunitContext &ctx, Counts &n) {
  const Target &t = s.target;
  std::ostringstream x;
  x << "    <testcase classname=\""
    << xml_escape("detfuzz." + std::string(to_string(t.backend)) + "." + t.op + "." + t.impl) << "\" name=\""
    << xml_escape(t.property + "/" + dtype_name(t.dtype)) << "\" time=\"" << seconds_text(s.seconds + s.shrink_seconds)
    << "\">\n";
  ++n.tests;
  const int64_t failed = s.failures + s.errors;
  const std::string counts =
      std::to_string(failed) + " of " + std::to_string(s.cases) + " cases failed (max ULP " + ulp_text(s.max_ulp) + ")";
  std::string evidence;
  if (s.has_minimal)
    evidence = "shrunk record (" + ctx.report_dir + "/failures.csv):\n" + record_row(s.minimal) + "\n" +
               s.minimal.detail + "\nrepro: " + repro_command(s.minimal, ctx.program) + "\n";
  if (s.cases == 0) {
    ++n.skipped;
    x << "      <skipped message=\"no case ran (the budget was spent on other targets)\"/>\n";
  } else if (failed > 0 && t.expectation == Expectation::must_hold) {
    const bool error = s.failures == 0;  // every failure was the impl throwing
    ++(error ? n.errors : n.failures);
    const std::string tag = error ? "error" : "failure";
    const std::string message = t.name() + ": " + counts + (s.has_minimal ? "; " + s.minimal.detail : "");
    x << "      <" << tag << " type=\"must-hold\" message=\"" << xml_escape(message) << "\">" << xml_escape(evidence)
      << "</" << tag << ">\n";
  } else if (failed > 0) {
    x << "      <system-out>"
      << xml_escape("observed (a baseline: reported, never fails the run): " + counts + "\n" + evidence)
      << "</system-out>\n";
  }
  x << "    </testcase>\n";
  return x.str();
}

std::string corpus_case(const CampaignResult &r, const JunitContext &ctx, Counts &n) {
  std::ostringstream x;
  ++n.tests;
  x << "    <testcase classname=\"detfuzz." << xml_escape(ctx.backend) << ".corpus\" name=\"replay\" time=\"0.000\">\n";
  if (r.corpus_must_hold_failures > 0) {
    ++n.failures;
    const std::string message = std::to_string(r.corpus_must_hold_failures) + " must-hold corpus records failed";
    x << "      <failure type=\"must-hold\" message=\"" << xml_escape(message) << "\">"
      << xml_escape("their records and repro commands are in " + ctx.report_dir + "/failures.csv and the run's log\n")
      << "</failure>\n";
  } else if (r.corpus_replayed == 0) {
    ++n.skipped;
    x << "      <skipped message=\"no corpus record for the selected targets\"/>\n";
  }
  x << "    </testcase>\n";
  return x.str();
}

}  // namespace

std::string junit_xml(const CampaignResult &r, const JunitContext &ctx) {
  Counts n;
  std::string cases = corpus_case(r, ctx, n);
  for (const auto &s : r.targets) cases += target_case(s, ctx, n);
  char hostname[256] = "";
  gethostname(hostname, sizeof hostname - 1);
  std::ostringstream x;
  const std::string suite = "detfuzz." + ctx.backend;
  const std::string totals = "tests=\"" + std::to_string(n.tests) + "\" failures=\"" + std::to_string(n.failures) +
                             "\" errors=\"" + std::to_string(n.errors) + "\" skipped=\"" + std::to_string(n.skipped) +
                             "\" time=\"" + seconds_text(r.elapsed_s) + "\"";
  x << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    << "<testsuites name=\"detfuzz\" " << totals << ">\n"
    << "  <testsuite name=\"" << xml_escape(suite) << "\" " << totals << " timestamp=\"" << xml_escape(ctx.timestamp)
    << "\" hostname=\"" << xml_escape(hostname) << "\">\n"
    << "    <properties>\n"
    << "      <property name=\"seed\" value=\"" << ctx.seed << "\"/>\n"
    << "      <property name=\"cases\" value=\"" << r.cases << "\"/>\n"
    << "      <property name=\"report\" value=\"" << xml_escape(ctx.report_dir) << "\"/>\n"
    << "    </properties>\n"
    << cases << "  </testsuite>\n</testsuites>\n";
  return x.str();
}

void check_junit_path(const fs::path &path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw ReportError("--junit " + path.string() + " is a folder, not a file");
  const fs::path parent = path.has_parent_path() ? path.parent_path() : fs::path(".");
  if (!fs::is_directory(parent, ec) || access(parent.c_str(), W_OK) != 0)
    throw ReportError("cannot write the JUnit file " + path.string() + ": its folder " + parent.string() +
                      " is not a writable folder");
}

void write_junit(const fs::path &path, const std::string &xml) {
  const fs::path tmp = path.string() + ".partial-" + std::to_string(getpid());
  {
    std::ofstream f(tmp);
    f << xml;
    f.close();
    if (!f) {
      std::error_code ec;
      fs::remove(tmp, ec);
      throw ReportError("cannot write the JUnit file " + path.string());
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw ReportError("cannot write the JUnit file " + path.string() + ": " + ec.message());
  }
}

}  // namespace detfuzz
