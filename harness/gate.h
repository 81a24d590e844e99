// `detfuzz gate`: the verdict of CI on a kernel change, over report folders already written.
// It fails (exit 1) when
//   - a run folder's summary.json says a must-hold property failed (a fuzz or replay run), or
//   - a bench row's invariance check failed (invariant_verified = no for an impl timed), or
//   - a bench row's speedup against its baseline (cuBLAS for mm, torch for reductions, a device
//     copy or SDPA for attention) fell by more than `max_slowdown` (0.1 = 10 %) against the same
//     (op, impl, dtype, M, N, K) row of the stored baseline bench.csv.
// Ratios against the baseline measured in the same run are compared, not microseconds, so a
// stored bench.csv from another GPU of the same kind stays meaningful. Rows only one side has are
// listed, never failed.
#pragma once

#include <filesystem>
#include <iosfwd>
#include <string>
#include <vector>

namespace detfuzz {

struct GateConfig {
  std::filesystem::path baseline;           // a bench.csv or a report folder holding one; empty: no speed check
  std::vector<std::filesystem::path> runs;  // fuzz/replay/bench report folders (or bench.csv files)
  double max_slowdown = 0.1;
};

// Returns 0 (pass) or 1 (fail), printing what it compared; throws std::invalid_argument (exit 2)
// for a missing or malformed folder or file.
int run_gate(const GateConfig &cfg, std::ostream &log);

}  // namespace detfuzz
