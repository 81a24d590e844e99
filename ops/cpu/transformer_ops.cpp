// The transformer's row and element-wise ops on the CPU, the executable spec of
// ops/cuda/transformer_ops.cu. Each output row is a function of its own input row (and, for rope
// and embedding, its own position or id) alone; the only reduction, rms_norm's sum of squares,
// runs in float32 in an order fixed by the row length H: sequential within blocks of
// kRmsBlock elements, then the block partials summed sequentially.
//
//   rms_norm      y = round(x * r * w), r = 1 / sqrt(ss / H + eps), ss = sum x^2 (float32)
//   silu_and_mul  y = round(silu(g) * u), g = x[:, :I], u = x[:, I:], silu(g) = g * sigmoid(g) with
//                 sigmoid(g) = 1 / (1 + exp(-g)) for g >= 0 and e / (1 + e), e = exp(g), for g < 0
//                 (no exp overflow: silu of a large negative g underflows to -0 instead of NaN)
//   rope          NeoX rotate-half: for i < D/2, f_i = theta^(-2i/D) and a = pos * f_i in float64,
//                 c = (float) cos(a), s = (float) sin(a); y_i = x_i c - x_{i+D/2} s,
//                 y_{i+D/2} = x_{i+D/2} c + x_i s (float32, no FMA)
//   embedding     y[t] = w[ids[t]] (a copy: bits move unchanged)
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/output.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace detfuzz::cpu_ops {
namespace {

void check_float(const at::Tensor &x, const char *op, const char *name) {
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16, op,
              ": ", name, " must be float32, float16 or bfloat16, got ", x.scalar_type());
}

void check_index(const at::Tensor &i, const char *op, const char *name) {
  TORCH_CHECK(i.scalar_type() == at::kLong || i.scalar_type() == at::kInt, op, ": ", name,
              " must be int32 or int64, got ", i.scalar_type());
  TORCH_CHECK(i.dim() == 1, op, ": ", name, " must be 1-D, got ", i.sizes());
}

// cos and sin of pos * f_i (float64, rounded to float32) for one (theta, head dim), kept on this
// thread for positions below kPositions: a forward ropes q and k of every layer at the same
// positions, and the case after it mostly at the same ones again. The values are those of the
// formula, computed once per position instead of once per call.
struct RopeAngles {
  static constexpr int64_t kPositions = 1 << 16;
  double theta = 0;
  int64_t head_dim = 0;
  std::vector<double> inv_freq;
  std::vector<float> cos, sin;  // [position, head_dim / 2], valid where known[position]
  std::vector<bool> known;

  void compute(int64_t pos, float *c, float *s) const {
    for (size_t i = 0; i < inv_freq.size(); ++i) {
      const double a = static_cast<double>(pos) * inv_freq[i];
      c[i] = static_cast<float>(std::cos(a));
      s[i] = static_cast<float>(std::sin(a));
    }
  }
  void fill(int64_t pos) {
    if (pos >= static_cast<int64_t>(known.size())) {
      const size_t n = static_cast<size_t>(std::min(kPositions, std::max<int64_t>(2 * pos, 1024)));
      known.resize(n, false);
      cos.resize(n * inv_freq.size());
      sin.resize(n * inv_freq.size());
    }
    if (known[pos]) return;
    compute(pos, cos.data() + pos * inv_freq.size(), sin.data() + pos * inv_freq.size());
    known[pos] = true;
  }
};

RopeAngles &rope_angles(double theta, int64_t head_dim) {
  thread_local RopeAngles angles;
  if (angles.theta != theta || angles.head_dim != head_dim) {
    angles = RopeAngles{};
    angles.theta = theta;
    angles.head_dim = head_dim;
    for (int64_t i = 0; i < head_dim / 2; ++i) angles.inv_freq.push_back(rope_inv_freq(theta, i, head_dim));
  }
  return angles;
}

}  // namespace

at::Tensor rms_norm(const at::Tensor &x, const at::Tensor &weight, double eps) {
  check_float(x, "rms_norm", "x");
  TORCH_CHECK(x.dim() == 2, "rms_norm: x must be [rows, H], got ", x.sizes());
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == x.size(1), "rms_norm: weight must be [", x.size(1), "], got ",
              weight.sizes());
  TORCH_CHECK(weight.scalar_type() == x.scalar_type(), "rms_norm: weight dtype ", weight.scalar_type(),
              " differs from x's ", x.scalar_type());
  TORCH_CHECK(eps >= 0 && std::isfinite(eps), "rms_norm: eps must be finite and >= 0, got ", eps);
  const int64_t rows = x.size(0), h = x.size(1);
  thread_local std::vector<float> x_buf, w_buf, y_buf;
  const float *xp = float_values(x, x_buf), *wp = float_values(weight, w_buf);
  y_buf.resize(static_cast<size_t>(rows * h));
  float *yp = y_buf.data();
  const float eps_f = static_cast<float>(eps), h_f = static_cast<float>(h);
  for (int64_t r = 0; r < rows; ++r) {
    const float *row = xp + r * h;
    float ss = 0.0f;
    for (int64_t b = 0; b < h; b += kRmsBlock) {
      float part = 0.0f;
      for (int64_t e = b; e < std::min(h, b + kRmsBlock); ++e) part += row[e] * row[e];
      ss += part;
    }
    const float inv = 1.0f / std::sqrt(ss / h_f + eps_f);
    for (int64_t e = 0; e < h; ++e) yp[r * h + e] = (row[e] * inv) * wp[e];
  }
  return to_output(yp, {rows, h}, x.scalar_type());
}

at::Tensor silu_and_mul(const at::Tensor &x) {
  check_float(x, "silu_and_mul", "x");
  TORCH_CHECK(x.dim() == 2 && x.size(1) % 2 == 0, "silu_and_mul: x must be [rows, 2*I], got ", x.sizes());
  const int64_t rows = x.size(0), i = x.size(1) / 2;
  thread_local std::vector<float> x_buf, y_buf;
  const float *xp = float_values(x, x_buf);
  y_buf.resize(static_cast<size_t>(rows * i));
  float *yp = y_buf.data();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t e = 0; e < i; ++e) {
      // The two formulas above as selects, not a branch: g's sign is a coin flip per element.
      const float g = xp[r * 2 * i + e], u = xp[r * 2 * i + i + e];
      const bool non_negative = g >= 0.0f;
      const float ex = std::exp(non_negative ? -g : g);
      const float sig = (non_negative ? 1.0f : ex) / (1.0f + ex);
      yp[r * i + e] = (g * sig) * u;
    }
  return to_output(yp, {rows, i}, x.scalar_type());
}

at::Tensor rope(const at::Tensor &x, const at::Tensor &positions, double theta) {
  check_float(x, "rope", "x");
  check_index(positions, "rope", "positions");
  TORCH_CHECK(x.dim() == 3 && x.size(2) % 2 == 0, "rope: x must be [T, H, D] with D even, got ", x.sizes());
  TORCH_CHECK(positions.size(0) == x.size(0), "rope: positions must be [", x.size(0), "], got ", positions.sizes());
  TORCH_CHECK(theta > 1 && std::isfinite(theta), "rope: theta must be finite and > 1, got ", theta);
  const int64_t t_len = x.size(0), heads = x.size(1), d = x.size(2), half = d / 2;
  thread_local std::vector<float> x_buf, y_buf;
  const float *xp = float_values(x, x_buf);
  const at::Tensor pos = positions.to(at::kCPU, at::kLong).contiguous();
  const int64_t *pp = pos.const_data_ptr<int64_t>();
  y_buf.resize(static_cast<size_t>(t_len * heads * d));
  float *yp = y_buf.data();
  RopeAngles &angles = rope_angles(theta, d);
  std::vector<float> c_own(half), s_own(half);
  for (int64_t t = 0; t < t_len; ++t) {
    const float *c = c_own.data(), *s = s_own.data();
    if (pp[t] >= 0 && pp[t] < RopeAngles::kPositions) {
      angles.fill(pp[t]);
      c = angles.cos.data() + pp[t] * half;
      s = angles.sin.data() + pp[t] * half;
    } else {
      angles.compute(pp[t], c_own.data(), s_own.data());
    }
    for (int64_t h = 0; h < heads; ++h) {
      const float *in = xp + (t * heads + h) * d;
      float *out = yp + (t * heads + h) * d;
      for (int64_t i = 0; i < half; ++i) {
        out[i] = in[i] * c[i] - in[i + half] * s[i];
        out[i + half] = in[i + half] * c[i] + in[i] * s[i];
      }
    }
  }
  return to_output(yp, {t_len, heads, d}, x.scalar_type()).to(x.device());
}

at::Tensor embedding(const at::Tensor &weight, const at::Tensor &ids) {
  check_float(weight, "embedding", "weight");
  check_index(ids, "embedding", "ids");
  TORCH_CHECK(weight.dim() == 2, "embedding: weight must be [V, H], got ", weight.sizes());
  const int64_t v = weight.size(0);
  const at::Tensor idx = ids.to(at::kCPU, at::kLong).contiguous();
  const int64_t *ip = idx.const_data_ptr<int64_t>();
  for (int64_t t = 0; t < idx.numel(); ++t)
    TORCH_CHECK(ip[t] >= 0 && ip[t] < v, "embedding: ids[", t, "] = ", ip[t], " is outside [0, ", v, ")");
  return weight.contiguous().index_select(0, idx);
}

double rope_inv_freq(double theta, int64_t i, int64_t head_dim) {
  return std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
}

}  // namespace detfuzz::cpu_ops
