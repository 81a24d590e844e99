// `detfuzz replay --sanitize memcheck|racecheck|initcheck`: each record's case runs again under
// NVIDIA's compute-sanitizer (a child `detfuzz replay --case ...` as its target), and its first
// report -- the kind of error, the kernel, the access, the thread and block -- is printed and
// attached to the record's detail. The annotated records are printed and, given a folder (the
// report folder the records came from, or replay's --out), written to its sanitize.csv, which
// `detfuzz report` shows beside the failures. compute-sanitizer is looked for as DETFUZZ_COMPUTE_SANITIZER (when set), then in PATH,
// $CUDA_HOME/bin, $CUDA_PATH/bin and /usr/local/cuda/bin; without it `replay` stops with a one-line
// error, exit 2.
#pragma once

#include "harness/corpus.h"

#include <iosfwd>
#include <string>
#include <vector>

namespace detfuzz {

// Throws UsageError unless `tool` is memcheck, racecheck or initcheck.
void check_sanitizer_tool(const std::string &tool);
// The compute-sanitizer executable, or "" when there is none.
std::string find_compute_sanitizer();
// The first error report in compute-sanitizer's output as one line ("Invalid __global__ write of
// size 4 bytes; at kernel(float *)+0x70 in k.cu:12; by thread (1,0,0) in block (0,0,0); Address
// 0x... is out of bounds"), or "" when it reported none.
std::string first_sanitizer_report(const std::string &output);
// Runs every record under the tool; prints each first report and the annotated record, and when
// out_dir is not empty writes the annotated records to out_dir/sanitize.csv (through a partial
// file renamed into place). Returns 1 when the sanitizer reported an error for a record, else 0.
int sanitize_records(const std::vector<Record> &records, const std::string &sanitizer, const std::string &tool,
                     const std::string &self, double timeout_s, const std::string &program, const std::string &out_dir,
                     std::ostream &log);

}  // namespace detfuzz
