// The fused mixture-of-experts layer on the CPU, in the fixed order of ops/cpu/moe.h: routing,
// per (token, slot) the gate/up GEMM, silu_and_mul and the down GEMM as blocked float32 sums, and
// the weighted combine in slot order. Work is organised per token, never per expert, so nothing a
// token computes can see another token; the plan's knobs (the mutants') are the only readers of
// the experts' loads. Weights are converted to float32 one expert at a time, when first used;
// the output buffer starts as NaN, so an element the loops miss shows.
#include "ops/cpu/moe.h"
#include "ops/cpu/output.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace detfuzz::cpu_ops {
namespace {

// Expert e's weights as float32, row-major, and its block scales (empty for unscaled weights).
struct ExpertWeights {
  std::vector<float> w;
  const float *scale = nullptr;  // [rows / 128 rounded up, cols / 128 rounded up]
  int64_t rows = 0, cols = 0, scale_cols = 0;
};

class ExpertCache {
 public:
  ExpertCache(const at::Tensor &w, const at::Tensor &scale)
      : w_(w), scale_(scale.defined() ? scale.contiguous() : scale) {
    experts_.resize(static_cast<size_t>(w.size(0)));
  }
  const ExpertWeights &get(int64_t e) {
    ExpertWeights &x = experts_[static_cast<size_t>(e)];
    if (x.rows == 0 && w_.size(1) > 0) {
      const at::Tensor f = w_[e].to(at::kFloat).contiguous();
      x.rows = w_.size(1);
      x.cols = w_.size(2);
      x.w.assign(f.const_data_ptr<float>(), f.const_data_ptr<float>() + f.numel());
      if (scale_.defined()) {
        x.scale = scale_.const_data_ptr<float>() + e * scale_.size(1) * scale_.size(2);
        x.scale_cols = scale_.size(2);
      }
    }
    return x;
  }

 private:
  at::Tensor w_, scale_;
  std::vector<ExpertWeights> experts_;
};

// Sum over k in [lo, hi) of w[k] * v[k]: blocks of `block` aligned at multiples of it, each a
// float32 sum from zero, times the fp8 block's scale where there is one, added in K order.
float blocked_dot(const float *w, const float *v, int64_t lo, int64_t hi, int64_t block, const float *scale_row) {
  float total = 0.f;
  for (int64_t k0 = lo; k0 < hi;) {
    const int64_t k1 = std::min(hi, (k0 / block + 1) * block);
    float partial = 0.f;
    for (int64_t k = k0; k < k1; ++k) partial += w[k] * v[k];
    total = scale_row ? total + partial * scale_row[k0 / kFp8Block] : total + partial;
    k0 = k1;
  }
  return total;
}

// Row `r` of an expert's weights times v: the plan's blocking and, when it says so, split-K.
float expert_row_dot(const ExpertWeights &x, int64_t r, const float *v, int64_t block, bool split) {
  const float *w = x.w.data() + r * x.cols;
  const float *scale_row = x.scale ? x.scale + (r / kFp8Block) * x.scale_cols : nullptr;
  const int64_t k = x.cols;
  if (!split) return blocked_dot(w, v, 0, k, block, scale_row);
  const int64_t half = k / 2 / 32 * 32;  // a multiple of 32 at or below the middle
  return blocked_dot(w, v, 0, half, block, scale_row) + blocked_dot(w, v, half, k, block, scale_row);
}

// silu(g) * u as silu_and_mul computes it (ops/cpu/transformer_ops.cpp).
float silu_mul(float g, float u) {
  const bool non_negative = g >= 0.0f;
  const float ex = std::exp(non_negative ? -g : g);
  const float sig = (non_negative ? 1.0f : ex) / (1.0f + ex);
  return (g * sig) * u;
}

// v rounded to a 16-bit dtype (to nearest even), or v itself for float32.
float rounded_to(at::ScalarType dtype, float v) {
  switch (dtype) {
    case at::kHalf: return static_cast<float>(c10::Half(v));
    case at::kBFloat16: return static_cast<float>(c10::BFloat16(v));
    default: return v;
  }
}

// Larger logit first; ties to the lower index; NaN after every number.
bool routes_before(const float *l, int64_t a, int64_t b) {
  const bool na = std::isnan(l[a]), nb = std::isnan(l[b]);
  if (na != nb) return nb;
  if (!na && l[a] != l[b]) return l[a] > l[b];
  return a < b;
}

void check_float(const at::Tensor &t, const char *name) {
  TORCH_CHECK(t.scalar_type() == at::kFloat || t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16,
              "fused_moe: ", name, " must be float32, float16 or bfloat16, got ", t.scalar_type());
}

}  // namespace

void check_route_inputs(const at::Tensor &logits, int64_t top_k) {
  TORCH_CHECK(logits.dim() == 2 && logits.scalar_type() == at::kFloat, "fused_moe: logits must be float32 [T, E], got ",
              logits.scalar_type(), " ", logits.sizes());
  TORCH_CHECK(top_k >= 1 && top_k <= logits.size(1), "fused_moe: top_k=", top_k, " must be in [1, E] = [1, ",
              logits.size(1), "]");
}

Routing moe_route(const at::Tensor &logits, int64_t top_k) {
  check_route_inputs(logits, top_k);
  const int64_t t_len = logits.size(0), e_len = logits.size(1);
  const at::Tensor l = logits.contiguous();
  Routing r{at::empty({t_len, top_k}, at::kLong), at::empty({t_len, top_k}, at::kFloat)};
  int64_t *ids = r.ids.data_ptr<int64_t>();
  float *weights = r.weights.data_ptr<float>();
  std::vector<int64_t> order(static_cast<size_t>(e_len));
  for (int64_t t = 0; t < t_len; ++t) {
    const float *row = l.const_data_ptr<float>() + t * e_len;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + top_k, order.end(),
                      [row](int64_t a, int64_t b) { return routes_before(row, a, b); });
    const float top = row[order[0]];
    float sum = 0.f;
    for (int64_t s = 0; s < top_k; ++s) {
      ids[t * top_k + s] = order[s];
      weights[t * top_k + s] = std::exp(row[order[s]] - top);
      sum += weights[t * top_k + s];
    }
    for (int64_t s = 0; s < top_k; ++s) weights[t * top_k + s] = weights[t * top_k + s] / sum;
  }
  return r;
}

bool check_fused_moe_inputs(const at::Tensor &x, const at::Tensor &logits, const at::Tensor &w13, const at::Tensor &w2,
                            const at::Tensor &w13_scale, const at::Tensor &w2_scale, int64_t top_k) {
  check_float(x, "x");
  TORCH_CHECK(x.dim() == 2 && w13.dim() == 3 && w2.dim() == 3, "fused_moe: x [T, H], w13 [E, 2I, H], w2 [E, H, I] ",
              "expected, got ", x.sizes(), ", ", w13.sizes(), ", ", w2.sizes());
  const int64_t t_len = x.size(0), h = x.size(1), e_len = w13.size(0), inter = w2.size(2);
  TORCH_CHECK(logits.dim() == 2 && logits.size(0) == t_len && logits.size(1) == e_len, "fused_moe: logits must be [",
              t_len, ", ", e_len, "], got ", logits.sizes());
  check_route_inputs(logits, top_k);
  TORCH_CHECK(w13.size(1) == 2 * inter && w13.size(2) == h && w2.size(0) == e_len && w2.size(1) == h,
              "fused_moe: w13 [E, 2I, H] and w2 [E, H, I] do not fit x [T, H]: ", w13.sizes(), ", ", w2.sizes());
  const bool fp8 = w13.scalar_type() == at::kFloat8_e4m3fn;
  TORCH_CHECK(
      fp8 == (w2.scalar_type() == at::kFloat8_e4m3fn) && fp8 == w13_scale.defined() && fp8 == w2_scale.defined(),
      "fused_moe: fp8 weights need both weights fp8 and both block scales");
  if (fp8) {
    auto blocks = [](int64_t n) { return (n + kFp8Block - 1) / kFp8Block; };
    TORCH_CHECK(w13_scale.scalar_type() == at::kFloat && w2_scale.scalar_type() == at::kFloat,
                "fused_moe: scales must be float32");
    TORCH_CHECK(w13_scale.sizes().vec() == std::vector<int64_t>({e_len, blocks(2 * inter), blocks(h)}) &&
                    w2_scale.sizes().vec() == std::vector<int64_t>({e_len, blocks(h), blocks(inter)}),
                "fused_moe: block scales must be [E, 2I/128, H/128] and [E, H/128, I/128] (rounded up), got ",
                w13_scale.sizes(), " and ", w2_scale.sizes());
  } else {
    TORCH_CHECK(w13.scalar_type() == x.scalar_type() && w2.scalar_type() == x.scalar_type(),
                "fused_moe: weights must be fp8 or x's dtype ", x.scalar_type(), ", got ", w13.scalar_type());
  }
  return fp8;
}

at::Tensor fused_moe(const at::Tensor &x, const at::Tensor &logits, const at::Tensor &w13, const at::Tensor &w2,
                     const at::Tensor &w13_scale, const at::Tensor &w2_scale, int64_t top_k, const MoePlan &plan) {
  check_fused_moe_inputs(x, logits, w13, w2, w13_scale, w2_scale, top_k);
  const int64_t t_len = x.size(0), h = x.size(1), e_len = w13.size(0), inter = w2.size(2);
  const Routing route = moe_route(logits, top_k);
  const int64_t *ids = route.ids.const_data_ptr<int64_t>();
  const float *weights = route.weights.const_data_ptr<float>();

  // Tokens per expert in this batch: read by the plan's knobs alone.
  std::vector<int64_t> load(static_cast<size_t>(e_len), 0);
  for (int64_t p = 0; p < t_len * top_k; ++p) ++load[static_cast<size_t>(ids[p])];
  auto block_of = [&](int64_t e) { return plan.k_block ? plan.k_block(load[e]) : kFp8Block; };
  auto split_of = [&](int64_t e) { return plan.split_k ? plan.split_k(load[e]) : false; };

  ExpertCache up(w13, w13_scale), down(w2, w2_scale);
  const at::Tensor xf = x.to(at::kFloat).contiguous();
  const float *xp = xf.const_data_ptr<float>();
  // y[t, s, :]: slot s's expert output for token t.
  std::vector<float> y(static_cast<size_t>(t_len * top_k * h));
  std::vector<float> act(static_cast<size_t>(inter));
  for (int64_t t = 0; t < t_len; ++t)
    for (int64_t s = 0; s < top_k; ++s) {
      const int64_t e = ids[t * top_k + s];
      const int64_t block = block_of(e);
      const bool split = split_of(e);
      const ExpertWeights &w1 = up.get(e);
      for (int64_t i = 0; i < inter; ++i) {
        const float g = expert_row_dot(w1, i, xp + t * h, block, split);
        const float u = expert_row_dot(w1, inter + i, xp + t * h, block, split);
        act[i] = rounded_to(x.scalar_type(), silu_mul(g, u));
      }
      const ExpertWeights &w_2 = down.get(e);
      float *ys = y.data() + (t * top_k + s) * h;
      for (int64_t j = 0; j < h; ++j) ys[j] = inter == 0 ? 0.f : expert_row_dot(w_2, j, act.data(), block, split);
    }

  std::vector<float> out(static_cast<size_t>(t_len * h), std::numeric_limits<float>::quiet_NaN());
  // The order in which each token adds its slots: slot order, or (mutant) the experts' processing
  // order, busiest first.
  std::vector<int64_t> slots(static_cast<size_t>(top_k));
  std::vector<int64_t> expert_rank(static_cast<size_t>(e_len));
  if (plan.combine_by_expert_load) {
    std::vector<int64_t> experts(static_cast<size_t>(e_len));
    std::iota(experts.begin(), experts.end(), 0);
    std::stable_sort(experts.begin(), experts.end(), [&](int64_t a, int64_t b) { return load[a] > load[b]; });
    for (int64_t r = 0; r < e_len; ++r) expert_rank[experts[r]] = r;
  }
  for (int64_t t = 0; t < t_len; ++t) {
    std::iota(slots.begin(), slots.end(), 0);
    if (plan.combine_by_expert_load)
      std::sort(slots.begin(), slots.end(), [&](int64_t a, int64_t b) {
        return expert_rank[ids[t * top_k + a]] < expert_rank[ids[t * top_k + b]];
      });
    for (int64_t j = 0; j < h; ++j) {
      float acc = 0.f;
      for (int64_t s : slots) acc = acc + weights[t * top_k + s] * y[(t * top_k + s) * h + j];
      out[t * h + j] = acc;
    }
  }
  return to_output(out.data(), {t_len, h}, x.scalar_type());
}

}  // namespace detfuzz::cpu_ops
