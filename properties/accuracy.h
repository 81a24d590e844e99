// The `accuracy` property's check: an op's output against its definition's float64 reference,
// element by element, within a bound derived from the dtype, the reduction length and the
// magnitudes involved.
//
// Per output element: |out - ref| <= core * (1 + u_out) + u_out * |ref| + eta_out, where u_out is
// the unit roundoff of the output dtype (2^-24 float32, 2^-11 float16, 2^-8 bfloat16), eta_out
// half its smallest subnormal, and `core` the float32 rounding error of the op, which each op's
// definition derives (standard forward error analysis; see the definition files in
// properties/defs). Where core is infinite (a float32 accumulator may overflow) any value passes.
// Where ref is finite, out may be the infinity of ref's sign if |ref| + bound reaches the output
// dtype's largest finite value (rounding overflow). Where ref is NaN, out must be NaN; where ref
// is an infinity, out must be the same infinity. These bounds are far below the error of an
// index bug, a dropped block or a wrong epilogue.
#pragma once

#include "properties/defs/op_def.h"

#include <string>

namespace detfuzz {

// Constants of the bounds' derivations.
constexpr double kUnitRoundoffF32 = 0x1p-24;  // u: float32 unit roundoff
constexpr double kTinyF32 = 0x1p-149;         // float32 smallest subnormal (its underflow step)
// Above this magnitude a float32 accumulator may overflow: the element is unbounded.
double unbounded_above();
// `core` where `magnitude` is below unbounded_above(), infinity elsewhere.
at::Tensor unbounded_where_huge(const at::Tensor &magnitude, const at::Tensor &core);

struct AccuracyResult {
  bool ok = true;
  int64_t worst_index = -1;  // linear index (row-major over the output's shape) of the worst element
  double worst_error = 0;    // |out - ref| there
  double worst_bound = 0;    // the tolerance allowed there
  std::string detail;        // one line, empty when ok
};

// `out` against def.reference on the same inputs (host tensors).
AccuracyResult check_accuracy(const OpDef &def, const OpArgs &args, const at::Tensor &out);
// The same by op name; throws std::invalid_argument for an op without a reference.
AccuracyResult check_accuracy(const std::string &op, const OpArgs &args, const at::Tensor &out);
at::Tensor reference_f64(const std::string &op, const OpArgs &args);

}  // namespace detfuzz
