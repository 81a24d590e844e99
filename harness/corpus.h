// Records: one replayable case and what was seen when it ran, as one CSV row. failures.csv and
// the committed corpora/ use the same format. Tensor values are never stored as decimal text:
// data is rebuilt from the seed; the first differing element is stored as hex bit patterns, and
// so are the float attributes (alpha=0x3ff0...).
//
//   op,impl,property,backend,dtype,shape,layout,dist,seed,params,outcome,differing,numel,
//   first_diff,expected_bits,actual_bits,max_abs_diff,max_ulp,detail
#pragma once

#include "properties/case.h"
#include "properties/verdict.h"

#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

namespace detfuzz {

struct Record {
  CaseSpec spec;
  std::string outcome = "pass";  // pass | fail | error, as seen when recorded
  DiffStats diff;
  std::string detail;
  std::string origin;  // where it was read: "file:line", or "--case"; empty when made in code; not written out
};

// A malformed record or an unreadable corpus file; what() is one line naming file and line.
struct CorpusError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

Record make_record(const CaseSpec &c, const Verdict &v);
// A record refused while it runs (a shape no memory holds, a parameter its op rejects): the
// refusal as a malformed-record error naming where the record came from.
std::invalid_argument refused_record(const Record &r, const std::invalid_argument &e);
// Outcomes only a fork-mode parent records (`fuzz --workers`): the worker died on the case
// ("crash") or was killed after --case-timeout ("timeout"). `replay` runs such records in a child.
inline bool is_crash_outcome(const std::string &outcome) { return outcome == "crash" || outcome == "timeout"; }
const std::string &record_header();
std::string record_row(const Record &r);      // one CSV line, no newline
std::string csv_field(const std::string &s);  // quoted when needed

std::vector<Record> read_records(const std::filesystem::path &file);
Record parse_record_line(const std::string &line);  // a single row without header (for --case)
// The .csv files under a folder (sorted; of a report folder only failures.csv), or the file itself.
std::vector<std::filesystem::path> record_files(const std::filesystem::path &path);

// True when the two diffs describe the same bits: same count, first index and patterns.
bool same_diff(const DiffStats &a, const DiffStats &b);

// The one-line command that replays the record, with the replay options of this process (below).
std::string repro_command(const Record &r, const std::string &program);

// The `replay` options a record of this process needs besides --case: the kernel libraries and
// op specs it was fuzzed with, and the mode (--load, --spec, --mode). Set once by the CLI; repro
// commands end with them, and child replays (crash shrinking, --sanitize) get them.
void set_replay_options(const std::vector<std::string> &args);
const std::vector<std::string> &replay_options();

}  // namespace detfuzz
