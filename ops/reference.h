// Float64 references and the accuracy check of the `accuracy` property.
#pragma once

#include "ops/op_args.h"

#include <string>

namespace detfuzz {

// The op computed in float64 on the CPU from the same inputs (upcast exactly).
at::Tensor reference_f64(const std::string &op, const OpArgs &args);

struct AccuracyResult {
  bool ok = true;
  int64_t worst_index = -1;  // linear index (row-major over the output's shape) of the worst element
  double worst_error = 0;    // |out - ref| there
  double worst_bound = 0;    // the tolerance allowed there
  std::string detail;        // one line, empty when ok
};

// Checks `out` (any dtype the op returns) against reference_f64 with per-element bounds derived
// from the dtype, the reduction length and the magnitudes involved. Non-finite reference values
// must be matched in kind (NaN where NaN, the same infinity).
AccuracyResult check_accuracy(const std::string &op, const OpArgs &args, const at::Tensor &out);

}  // namespace detfuzz
