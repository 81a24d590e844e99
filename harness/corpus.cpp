#include "harness/corpus.h"

#define CSV_IO_NO_THREAD
#include <libfccp/csv.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <sstream>

namespace detfuzz {
namespace fs = std::filesystem;
namespace {

constexpr int kColumns = 19;
using Reader = io::CSVReader<kColumns, io::trim_chars<' ', '\t'>, io::double_quote_escape<',', '"'>>;

uint64_t parse_hex(const std::string &s, const char *what) {
  if (s.size() < 3 || s.compare(0, 2, "0x") != 0 || s.size() > 18 ||
      s.find_first_not_of("0123456789abcdefABCDEF", 2) != std::string::npos)
    throw std::invalid_argument(std::string(what) + " '" + s + "' is not 0x followed by hex digits");
  return std::stoull(s.substr(2), nullptr, 16);
}

int64_t parse_int(const std::string &s, const char *what) {
  try {
    size_t used = 0;
    const int64_t v = std::stoll(s, &used);
    if (used == s.size()) return v;
  } catch (const std::exception &) {
  }
  throw std::invalid_argument(std::string(what) + " '" + s + "' is not an integer");
}

std::string hex64(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string format_double(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

Record record_from_fields(const std::vector<std::string> &f) {
  Record r;
  CaseSpec &c = r.spec;
  c.op = f[0];
  c.impl = f[1];
  c.property = f[2];
  if (c.op.empty() || c.impl.empty() || c.property.empty())
    throw std::invalid_argument("op, impl and property must not be empty");
  c.backend = backend_from_string(f[3]);
  c.dtype = dtype_from_string(f[4]);
  c.shape = parse_shape(f[5]);
  c.layout = f[6];
  c.dist = f[7];
  c.seed = parse_hex(f[8], "seed");
  c.params = parse_params(f[9]);
  r.outcome = f[10];
  if (r.outcome != "pass" && r.outcome != "fail" && r.outcome != "error" && !is_crash_outcome(r.outcome))
    throw std::invalid_argument("outcome '" + r.outcome + "' is not pass, fail, error, crash or timeout");
  r.diff.differing = parse_int(f[11], "differing");
  r.diff.numel = parse_int(f[12], "numel");
  r.diff.first_coords = f[13];
  r.diff.expected_bits = f[14].empty() ? 0 : parse_hex(f[14], "expected_bits");
  r.diff.actual_bits = f[15].empty() ? 0 : parse_hex(f[15], "actual_bits");
  // The patterns' width is the compared (output) dtype's: 4, 8 or 16 hex digits.
  const size_t digits = f[14].size() > 2 ? f[14].size() - 2 : 8;
  r.diff.dtype = digits == 4    ? (at::elementSize(c.dtype) == 2 ? c.dtype : at::kHalf)
                 : digits == 16 ? at::kDouble
                                : at::kFloat;
  try {
    r.diff.max_abs_diff = f[16].empty() ? 0 : std::stod(f[16]);
  } catch (const std::exception &) {
    throw std::invalid_argument("max_abs_diff '" + f[16] + "' is not a number");
  }
  r.diff.max_ulp = f[17].empty() ? 0
                                 : (f[17] == "inf" ? std::numeric_limits<uint64_t>::max()
                                                   : static_cast<uint64_t>(parse_int(f[17], "max_ulp")));
  r.detail = f[18];
  return r;
}

std::vector<Record> read_with(Reader &in, const std::string &name, bool header) {
  std::vector<Record> out;
  std::vector<std::string> f(kColumns);
  try {
    if (header)
      in.read_header(io::ignore_no_column, "op", "impl", "property", "backend", "dtype", "shape", "layout", "dist",
                     "seed", "params", "outcome", "differing", "numel", "first_diff", "expected_bits", "actual_bits",
                     "max_abs_diff", "max_ulp", "detail");
    else
      in.set_header("op", "impl", "property", "backend", "dtype", "shape", "layout", "dist", "seed", "params",
                    "outcome", "differing", "numel", "first_diff", "expected_bits", "actual_bits", "max_abs_diff",
                    "max_ulp", "detail");
    while (in.read_row(f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8], f[9], f[10], f[11], f[12], f[13], f[14],
                       f[15], f[16], f[17], f[18])) {
      const std::string origin = name + ":" + std::to_string(in.get_file_line());
      try {
        out.push_back(record_from_fields(f));
      } catch (const std::invalid_argument &e) {
        throw CorpusError(origin + ": malformed record: " + e.what());
      }
      out.back().origin = header ? origin : name;
    }
  } catch (const io::error::base &e) {
    std::string what = e.what();
    std::replace(what.begin(), what.end(), '\n', ' ');
    throw CorpusError(name + ": malformed record file: " + what);
  }
  return out;
}

}  // namespace

Record make_record(const CaseSpec &c, const Verdict &v) {
  Record r;
  r.spec = c;
  r.outcome = to_string(v.outcome);
  r.diff = v.diff;
  r.detail = v.detail;
  return r;
}

std::invalid_argument refused_record(const Record &r, const std::invalid_argument &e) {
  return std::invalid_argument(r.origin.empty() ? std::string(e.what()) : r.origin + ": malformed record: " + e.what());
}

const std::string &record_header() {
  static const std::string h =
      "op,impl,property,backend,dtype,shape,layout,dist,seed,params,outcome,differing,numel,first_diff,expected_bits,"
      "actual_bits,"
      "max_abs_diff,max_ulp,detail";
  return h;
}

std::string csv_field(const std::string &s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos && (s.empty() || (s.front() != ' ' && s.back() != ' '))) return s;
  std::string q = "\"";
  for (char ch : s) {
    if (ch == '\n' || ch == '\r') ch = ' ';
    q += ch;
    if (ch == '"') q += '"';
  }
  return q + "\"";
}

std::string record_row(const Record &r) {
  const CaseSpec &c = r.spec;
  const DiffStats &d = r.diff;
  const bool differs = d.differing > 0;
  std::vector<std::string> f = {c.op,
                                c.impl,
                                c.property,
                                to_string(c.backend),
                                dtype_name(c.dtype),
                                c.shape_string(),
                                c.layout,
                                c.dist,
                                hex64(c.seed),
                                c.params_string(),
                                r.outcome,
                                std::to_string(d.differing),
                                std::to_string(d.numel),
                                d.first_coords,
                                differs ? hex_bits(d.expected_bits, d.dtype) : "",
                                differs ? hex_bits(d.actual_bits, d.dtype) : "",
                                format_double(d.max_abs_diff),
                                d.max_ulp == std::numeric_limits<uint64_t>::max() ? "inf" : std::to_string(d.max_ulp),
                                r.detail};
  std::string line;
  for (size_t i = 0; i < f.size(); ++i) line += (i ? "," : "") + csv_field(f[i]);
  return line;
}

std::vector<Record> read_records(const fs::path &file) {
  std::FILE *fp = std::fopen(file.c_str(), "rb");
  if (!fp) throw CorpusError(file.string() + ": cannot open record file");
  Reader in(file.string(), fp);  // the reader owns and closes fp
  return read_with(in, file.string(), true);
}

Record parse_record_line(const std::string &line) {
  Reader in("--case", line.data(), line.data() + line.size());
  auto records = read_with(in, "--case", false);
  if (records.size() != 1)
    throw CorpusError("--case: expected exactly one record line, got " + std::to_string(records.size()));
  return records.front();
}

std::vector<fs::path> record_files(const fs::path &path) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return {path};
  if (!fs::is_directory(path, ec)) throw CorpusError(path.string() + ": no such record file or folder");
  std::vector<fs::path> files;
  // In a report folder (one with a summary.json) the records are failures.csv; its other CSV
  // files (cases.csv, bench.csv, ...) are not records.
  for (const auto &e : fs::recursive_directory_iterator(path))
    if (e.is_regular_file() && e.path().extension() == ".csv" &&
        (e.path().filename() == "failures.csv" || !fs::exists(e.path().parent_path() / "summary.json", ec)))
      files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

bool same_diff(const DiffStats &a, const DiffStats &b) {
  return a.differing == b.differing && a.first_coords == b.first_coords && a.expected_bits == b.expected_bits &&
         a.actual_bits == b.actual_bits;
}

namespace {
std::vector<std::string> &replay_options_storage() {
  static std::vector<std::string> args;
  return args;
}

// A word quoted for a POSIX shell when it needs it.
std::string shell_word(const std::string &s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=+,@") ==
                        std::string::npos)
    return s;
  std::string quoted;
  for (char ch : s) quoted += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return "'" + quoted + "'";
}
}  // namespace

void set_replay_options(const std::vector<std::string> &args) { replay_options_storage() = args; }
const std::vector<std::string> &replay_options() { return replay_options_storage(); }

std::string repro_command(const Record &r, const std::string &program) {
  // The command carries the case and what was seen, quoted for a POSIX shell.
  std::string quoted;
  for (char ch : record_row(r)) quoted += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  std::string cmd = program + " replay --case '" + quoted + "'";
  for (const auto &a : replay_options()) cmd += " " + shell_word(a);
  return cmd;
}

}  // namespace detfuzz
