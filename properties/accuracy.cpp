#include "properties/accuracy.h"

#include <cfloat>
#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace detfuzz {
namespace {

double unit_roundoff(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return 0x1p-11;
    case at::kBFloat16: return 0x1p-8;
    case at::kDouble: return 0x1p-53;
    default: return kUnitRoundoffF32;
  }
}

double half_smallest_subnormal(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return 0x1p-25;
    case at::kBFloat16: return 0x1p-134;
    case at::kDouble: return 0x1p-1074;  // (half of it is not representable)
    default: return 0x1p-150;
  }
}

double largest_finite(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return 65504.0;
    case at::kBFloat16: return 0x1.fep127;
    case at::kDouble: return DBL_MAX;
    default: return FLT_MAX;
  }
}

std::string coords(int64_t linear, at::IntArrayRef sizes) {
  std::vector<int64_t> index(sizes.size());
  for (size_t d = sizes.size(); d-- > 0;) {
    index[d] = linear % sizes[d];
    linear /= sizes[d];
  }
  std::ostringstream s;
  s << '[';
  for (size_t d = 0; d < index.size(); ++d) s << (d ? "," : "") << index[d];
  s << ']';
  return s.str();
}

const OpDef &reference_def(const std::string &op) {
  const OpDef *def = find_op_def(op);
  if (!def) throw std::invalid_argument("unknown op '" + op + "'");
  if (!def->has_reference()) throw std::invalid_argument("op '" + op + "' has no float64 reference");
  return *def;
}

}  // namespace

double unbounded_above() { return FLT_MAX / 2; }

at::Tensor unbounded_where_huge(const at::Tensor &magnitude, const at::Tensor &core) {
  return at::where(magnitude > unbounded_above(), at::full_like(core, std::numeric_limits<double>::infinity()), core);
}

at::Tensor reference_f64(const std::string &op, const OpArgs &args) { return reference_def(op).reference(args); }

AccuracyResult check_accuracy(const std::string &op, const OpArgs &args, const at::Tensor &out) {
  return check_accuracy(reference_def(op), args, out);
}

AccuracyResult check_accuracy(const OpDef &def, const OpArgs &args, const at::Tensor &out) {
  const std::string &op = def.name;
  AccuracyResult result;
  const at::Tensor ref = def.reference(args).contiguous();
  const at::ScalarType want_dtype = def.out_dtype(args);
  if (!out.sizes().equals(ref.sizes()) || out.scalar_type() != want_dtype) {
    std::ostringstream s;
    s << op << ": output has shape " << out.sizes() << " and dtype " << out.scalar_type() << ", expected shape "
      << ref.sizes() << " and dtype " << want_dtype;
    result.ok = false;
    result.worst_error = std::numeric_limits<double>::infinity();
    result.detail = s.str();
    return result;
  }
  const double u_out = unit_roundoff(want_dtype), eta_out = half_smallest_subnormal(want_dtype);
  const double overflow_at = largest_finite(want_dtype);
  const at::Tensor core = def.core_bound(args).contiguous();
  const at::Tensor bound = (core * (1 + u_out) + ref.abs() * u_out + eta_out).contiguous();
  const at::Tensor got = out.to(at::kDouble).contiguous();
  const double *r = ref.const_data_ptr<double>(), *o = got.const_data_ptr<double>(),
               *b = bound.const_data_ptr<double>();

  int64_t failures = 0;
  double worst_ratio = -1;
  for (int64_t e = 0; e < ref.numel(); ++e) {
    bool pass;
    double error = std::abs(o[e] - r[e]), allowed = b[e];
    if (!std::isfinite(r[e])) {  // NaN where NaN, the same infinity where infinite
      pass = std::isnan(r[e]) ? std::isnan(o[e]) : o[e] == r[e];
      error = pass ? 0 : std::numeric_limits<double>::infinity();
      allowed = 0;
    } else if (std::isinf(allowed)) {  // a float32 accumulator may overflow here
      pass = true;
      error = 0;
    } else if (std::isinf(o[e]) && (o[e] > 0 ? r[e] + allowed >= overflow_at : r[e] - allowed <= -overflow_at)) {
      pass = true;  // the bound reaches past the output dtype's range on the infinity's side: it may round there
      error = 0;
    } else {
      if (std::isnan(error)) error = std::numeric_limits<double>::infinity();
      pass = error <= allowed;
    }
    const double ratio = error == 0 ? 0 : allowed > 0 ? error / allowed : std::numeric_limits<double>::infinity();
    // The worst element: the most out of bounds among failures, else the closest to its bound.
    const bool worse = !pass ? (failures == 0 || ratio > worst_ratio) : (failures == 0 && ratio > worst_ratio);
    if (!pass) ++failures;
    if (worse) {
      worst_ratio = ratio;
      result.worst_index = e;
      result.worst_error = error;
      result.worst_bound = allowed;
    }
  }
  if (failures > 0) {
    const int64_t e = result.worst_index;
    std::ostringstream s;
    s.precision(17);
    s << op << ": " << failures << " of " << ref.numel() << " elements out of bounds; worst at "
      << coords(e, ref.sizes()) << ": out=" << o[e] << " ref=" << r[e] << " |err|=" << result.worst_error
      << " bound=" << result.worst_bound;
    result.ok = false;
    result.detail = s.str();
  }
  return result;
}

}  // namespace detfuzz
