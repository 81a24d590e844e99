// Float64 references and the per-element accuracy bounds of the `accuracy` property.
//
// reference_f64 upcasts the inputs exactly to float64 and runs libtorch's float64 CPU op
// (at::mm, at::addmm, at::bmm, at::_log_softmax, at::mean), so torch's conventions hold
// (addmm drops a term whose coefficient is zero; log_softmax gives NaN for rows of all -inf or
// with +inf or NaN; an empty mean is NaN).
//
// check_accuracy allows, per output element, |out - ref| <= core * (1 + u_out) + u_out * |ref| + eta_out,
// where u = 2^-24 is the unit roundoff of the float32 arithmetic the kernels use, u_out that of
// the output dtype (2^-24 float32, 2^-11 float16, 2^-8 bfloat16), eta_out half the smallest
// subnormal of the output dtype, tiny = 2^-149 the float32 underflow step, and `core` the
// float32 rounding error of the op (standard forward error analysis; a term passes through at
// most L roundings in a blocked sum of L terms, see ops/cpu/fixed_order.h):
//
//   mm, bmm      core = (K + 2) u sum_k |a_ik||b_kj|                              + (K + 2) tiny
//   addmm        core = (K + 5) u (|alpha| sum_k |a_ik||b_kj| + |beta| |bias_ij|) + (K + 5) tiny
//                (the alpha term is left out when alpha == 0, the beta term when beta == 0)
//   log_softmax  core = u (2 |x_i - m| + 2 R + 2 n + 8 + 4 |log S|)                + n tiny
//                with m the row max, S = sum_j exp(x_j - m), R = sum_j p_j |x_j - m| (p = softmax)
//   mean         core = (n + 2) u mean(|x|)                                        + tiny
//   rms_norm     core = ((H + 10) u + 2^-149 / (ss/H + eps)) |ref| + 2^-149 |w|  + (H + 10) tiny
//                (ss = sum x^2; the second term covers squares that underflow float32; unbounded
//                where sum x^2 exceeds FLT_MAX / 2 or ss/H + eps is 0)
//   silu_and_mul core = 8 u |ref| + tiny, plus |ref| itself where gate < -80 (silu underflows
//                float32 there; the reference flushes silu to zero where float32 cannot hold it)
//   rope         core = 4 u (|x_i c| + |x_j s|)                                   + 4 tiny
//   embedding    core = 0 (a copy)
//
// Where the magnitude term of a matmul or mean exceeds FLT_MAX / 2, a float32 accumulator may
// overflow: that element is unbounded (any value passes). Where ref is finite, out may be the infinity of ref's sign if
// |ref| + bound reaches the output dtype's largest finite value (rounding overflow). Where ref is
// NaN, out must be NaN; where ref is an infinity, out must be the same infinity.
// These bounds are far below the error of an index bug, a dropped block or a wrong epilogue.
#include "ops/reference.h"

#include <ATen/WrapDimUtils.h>
#include <ATen/WrapDimUtilsMulti.h>

#include <cfloat>
#include <cmath>
#include <limits>
#include <sstream>

namespace detfuzz {
namespace {

constexpr double kU32 = 0x1p-24;     // float32 unit roundoff
constexpr double kTiny = 0x1p-149;   // float32 smallest subnormal
constexpr double kUnboundedAbove = FLT_MAX / 2;

const at::Tensor &input(const std::string &op, const OpArgs &args, size_t index, size_t expected) {
  TORCH_CHECK(args.tensors.size() == expected, op, ": expected ", expected, " tensors, got ", args.tensors.size());
  return args.tensors[index];
}

at::Tensor f64(const at::Tensor &t) { return t.to(at::kDouble); }

// cos and sin of RoPE's angles in float64, [T, 1, D/2] (broadcast over heads).
std::pair<at::Tensor, at::Tensor> rope_cos_sin_f64(const at::Tensor &positions, int64_t d, double theta) {
  const int64_t half = d / 2;
  auto inv_freq = at::empty({half}, at::kDouble);
  for (int64_t i = 0; i < half; ++i)
    inv_freq[i] = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(d));
  const at::Tensor angle = positions.to(at::kCPU, at::kDouble).unsqueeze(1) * inv_freq.unsqueeze(0);
  return {angle.cos().unsqueeze(1), angle.sin().unsqueeze(1)};
}

std::vector<int64_t> mean_dims(const at::Tensor &x, at::IntArrayRef dims) {
  if (!dims.empty()) return dims.vec();
  std::vector<int64_t> all(static_cast<size_t>(x.dim()));
  for (int64_t d = 0; d < x.dim(); ++d) all[static_cast<size_t>(d)] = d;
  return all;
}

// The reduced element count of mean.
int64_t mean_count(const at::Tensor &x, at::IntArrayRef dims) {
  const auto reduced = at::dim_list_to_bitset(dims, x.dim());
  int64_t n = 1;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (dims.empty() || reduced[d]) n *= x.size(d);
  return n;
}

at::ScalarType expected_dtype(const std::string &op, const OpArgs &args) {
  // rope and embedding end with an index tensor; their first tensor carries the dtype.
  const at::ScalarType in =
      (op == "rope" || op == "embedding" ? args.tensors.front() : args.tensors.back()).scalar_type();
  if (op == "log_softmax") return args.half_to_float ? at::kFloat : in;
  if (op == "mean") return args.out_dtype ? *args.out_dtype : at::isFloatingType(in) ? in : at::kFloat;
  return in;
}

double unit_roundoff(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return 0x1p-11;
    case at::kBFloat16: return 0x1p-8;
    case at::kDouble: return 0x1p-53;
    default: return kU32;
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

// `core` of the header comment, as a float64 tensor of the output's shape; inf where unbounded.
at::Tensor core_bound(const std::string &op, const OpArgs &args) {
  const double inf = std::numeric_limits<double>::infinity();
  auto unbounded_where_huge = [inf](const at::Tensor &magnitude, const at::Tensor &core) {
    return at::where(magnitude > kUnboundedAbove, at::full_like(core, inf), core);
  };
  if (op == "mm" || op == "bmm") {
    const at::Tensor &a = input(op, args, 0, 2), &b = input(op, args, 1, 2);
    const double k = static_cast<double>(a.size(-1));
    const at::Tensor magnitude = op == "mm" ? at::mm(f64(a).abs(), f64(b).abs()) : at::bmm(f64(a).abs(), f64(b).abs());
    return unbounded_where_huge(magnitude, magnitude * ((k + 2) * kU32) + (k + 2) * kTiny);
  }
  if (op == "addmm") {
    const at::Tensor &bias = input(op, args, 0, 3), &a = input(op, args, 1, 3), &b = input(op, args, 2, 3);
    const double k = static_cast<double>(a.size(1));
    at::Tensor magnitude = at::zeros({a.size(0), b.size(1)}, a.options().dtype(at::kDouble));
    if (args.alpha != 0) magnitude = magnitude + std::abs(args.alpha) * at::mm(f64(a).abs(), f64(b).abs());
    if (args.beta != 0) magnitude = magnitude + std::abs(args.beta) * f64(bias).abs();
    return unbounded_where_huge(magnitude, magnitude * ((k + 5) * kU32) + (k + 5) * kTiny);
  }
  if (op == "log_softmax") {
    const at::Tensor x = f64(input(op, args, 0, 1));
    if (x.numel() == 0) return at::zeros_like(x);
    const at::Tensor x_nd = x.dim() == 0 ? x.reshape({1}) : x;
    const int64_t d = c10::maybe_wrap_dim(args.dim, x.dim());
    const double n = static_cast<double>(x_nd.size(d));
    const at::Tensor m = std::get<0>(x_nd.max(d, /*keepdim=*/true));
    const at::Tensor deviation = (x_nd - m).abs();
    const at::Tensor p = at::_log_softmax(x_nd, d, false).exp();
    const at::Tensor weighted = at::where(p > 0, p * deviation, at::zeros_like(p)).sum(d, /*keepdim=*/true);
    const at::Tensor log_sum = (x_nd - m).exp().sum(d, /*keepdim=*/true).log();
    const at::Tensor core = (2 * deviation + 2 * weighted + 4 * log_sum.abs() + (2 * n + 8)) * kU32 + n * kTiny;
    return core.view(x.sizes());
  }
  if (op == "mean") {
    const at::Tensor &x = input(op, args, 0, 1);
    const double n = static_cast<double>(mean_count(x, args.dims));
    const at::Tensor mean_abs = at::mean(f64(x).abs(), mean_dims(x, args.dims), args.keepdim);
    return unbounded_where_huge(mean_abs * n, mean_abs * ((n + 2) * kU32) + kTiny);
  }
  if (op == "rms_norm") {
    const at::Tensor x = f64(input(op, args, 0, 2));
    const double h = static_cast<double>(x.size(1));
    const at::Tensor ref = reference_f64(op, args).abs();
    const at::Tensor sum_sq = (x * x).sum(1, /*keepdim=*/true);
    // Squares below float32's range round to its subnormal grid (absolute error <= 2^-150 each):
    // the mean square is off by up to 2^-150, which moves 1/rms by up to 2^-149 / (ss/H + eps)
    // relative. Where ss/H + eps is below 2^-140 (it may underflow), the float32 1/rms is unbounded.
    const at::Tensor denom = (sum_sq / h + args.eps).expand_as(ref);
    const at::Tensor underflow = at::where(denom > 0x1p-140, 0x1p-149 / denom, at::full_like(denom, INFINITY));
    // x * (1/rms) may underflow before the weight scales it back up: up to 2^-149 |w| absolute.
    const at::Tensor w_abs = f64(input(op, args, 1, 2)).abs().unsqueeze(0);
    const at::Tensor core = ref * ((h + 10) * kU32) + ref * underflow + w_abs * 0x1p-149 + (h + 10) * kTiny;
    return unbounded_where_huge(sum_sq.expand_as(ref), at::where(underflow.isinf(), at::full_like(core, INFINITY), core));
  }
  if (op == "silu_and_mul") {
    const at::Tensor x = f64(input(op, args, 0, 1));
    const int64_t i = x.size(1) / 2;
    const at::Tensor ref = reference_f64(op, args).abs();
    const at::Tensor overflowed = x.narrow(1, 0, i) < -80;
    return ref * (8 * kU32) + at::where(overflowed, ref, at::zeros_like(ref)) + kTiny;
  }
  if (op == "rope") {
    const at::Tensor x = f64(input(op, args, 0, 2));
    const int64_t half = x.size(2) / 2;
    const auto [c, s] = rope_cos_sin_f64(input(op, args, 1, 2), half * 2, args.theta);
    const at::Tensor x0 = x.narrow(2, 0, half).abs(), x1 = x.narrow(2, half, half).abs();
    const at::Tensor ca = c.abs(), sa = s.abs();
    return at::cat({x0 * ca + x1 * sa, x1 * ca + x0 * sa}, 2) * (4 * kU32) + 4 * kTiny;
  }
  if (op == "embedding") return at::zeros_like(reference_f64(op, args));
  TORCH_CHECK(false, "check_accuracy: no bound for op '", op, "'");
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

}  // namespace

at::Tensor reference_f64(const std::string &op, const OpArgs &args) {
  if (op == "mm") return at::mm(f64(input(op, args, 0, 2)), f64(input(op, args, 1, 2)));
  if (op == "addmm")
    return at::addmm(f64(input(op, args, 0, 3)), f64(input(op, args, 1, 3)), f64(input(op, args, 2, 3)), args.beta,
                     args.alpha);
  if (op == "bmm") return at::bmm(f64(input(op, args, 0, 2)), f64(input(op, args, 1, 2)));
  if (op == "log_softmax") return at::_log_softmax(f64(input(op, args, 0, 1)), args.dim, false);
  if (op == "mean") {
    const at::Tensor &x = input(op, args, 0, 1);
    return at::mean(f64(x), mean_dims(x, args.dims), args.keepdim);
  }
  if (op == "rms_norm") {
    const at::Tensor x = f64(input(op, args, 0, 2)), w = f64(input(op, args, 1, 2));
    return x * ((x * x).mean(1, /*keepdim=*/true) + args.eps).rsqrt() * w.unsqueeze(0);
  }
  if (op == "silu_and_mul") {
    const at::Tensor x = f64(input(op, args, 0, 1));
    const int64_t i = x.size(1) / 2;
    const at::Tensor g = x.narrow(1, 0, i);
    // silu in float64, flushed to (signed) zero where the kernels' float32 silu is zero: where
    // |silu| or exp(gate) (the sigmoid's numerator for gate < 0) is at most half the smallest
    // float32 subnormal, which rounds to zero. Then silu * inf is NaN in both.
    at::Tensor silu = g / (1 + (-g).exp());
    silu = at::where((silu.abs() <= 0x1p-150) | (g.exp() <= 0x1p-150), silu * 0, silu);
    return silu * x.narrow(1, i, i);
  }
  if (op == "rope") {
    const at::Tensor x = f64(input(op, args, 0, 2));
    const int64_t half = x.size(2) / 2;
    const auto [c, s] = rope_cos_sin_f64(input(op, args, 1, 2), half * 2, args.theta);
    const at::Tensor x0 = x.narrow(2, 0, half), x1 = x.narrow(2, half, half);
    return at::cat({x0 * c - x1 * s, x1 * c + x0 * s}, 2);
  }
  if (op == "embedding") return f64(input(op, args, 0, 2)).index_select(0, input(op, args, 1, 2).to(at::kCPU, at::kLong));
  TORCH_CHECK(false, "reference_f64: unknown op '", op, "'");
}

AccuracyResult check_accuracy(const std::string &op, const OpArgs &args, const at::Tensor &out) {
  AccuracyResult result;
  const at::Tensor ref = reference_f64(op, args).contiguous();
  const at::ScalarType want_dtype = expected_dtype(op, args);
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
  const at::Tensor core = core_bound(op, args).contiguous();
  const at::Tensor bound = (core * (1 + u_out) + ref.abs() * u_out + eta_out).contiguous();
  const at::Tensor got = out.to(at::kDouble).contiguous();
  const double *r = ref.const_data_ptr<double>(), *o = got.const_data_ptr<double>(), *b = bound.const_data_ptr<double>();

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
    } else if (std::isinf(o[e]) && std::signbit(o[e]) == std::signbit(r[e]) && std::abs(r[e]) + allowed >= overflow_at) {
      pass = true;  // rounding overflow of the output dtype
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
