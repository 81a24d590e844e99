// fp8 scaled matmul on the CPU, in the fixed order of ops/cpu/moe.h: float32 partial sums over
// 128-wide K blocks, each times its combined scale, added into a float32 accumulator in K order.
// The inputs are converted to float32 once (exact for fp8 and float32 scales); the output buffer
// starts as NaN, so an element the loops miss shows. A promotion rule other than "every block"
// is a mutant's (ops/cpu/moe_register.cpp).
#include "ops/cpu/moe.h"
#include "ops/cpu/output.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <vector>

namespace detfuzz::cpu_ops {
namespace {

int64_t blocks_of(int64_t n) { return (n + kFp8Block - 1) / kFp8Block; }

std::string sizes_text(const std::vector<int64_t> &s) {
  std::string out = "[";
  for (size_t k = 0; k < s.size(); ++k) out += (k ? ", " : "") + std::to_string(s[k]);
  return out + "]";
}

}  // namespace

ScaleMode scale_mode_from_string(const std::string &s) {
  if (s == "tensor") return ScaleMode::tensor;
  if (s == "channel") return ScaleMode::channel;
  if (s == "block") return ScaleMode::block;
  throw std::invalid_argument("unknown scale mode '" + s + "' (expected tensor, channel or block)");
}

const char *to_string(ScaleMode m) {
  switch (m) {
    case ScaleMode::tensor: return "tensor";
    case ScaleMode::channel: return "channel";
    default: return "block";
  }
}

std::vector<int64_t> scale_a_sizes(ScaleMode mode, int64_t m, int64_t k) {
  switch (mode) {
    case ScaleMode::tensor: return {1};
    case ScaleMode::channel: return {m, 1};
    default: return {m, blocks_of(k)};
  }
}

std::vector<int64_t> scale_b_sizes(ScaleMode mode, int64_t k, int64_t n) {
  switch (mode) {
    case ScaleMode::tensor: return {1};
    case ScaleMode::channel: return {1, n};
    default: return {blocks_of(k), blocks_of(n)};
  }
}

void check_scaled_mm_inputs(const at::Tensor &a, const at::Tensor &b, const at::Tensor &scale_a,
                            const at::Tensor &scale_b, const at::Tensor &bias, ScaleMode mode,
                            at::ScalarType out_dtype) {
  TORCH_CHECK(a.scalar_type() == at::kFloat8_e4m3fn && b.scalar_type() == at::kFloat8_e4m3fn,
              "scaled_mm: a and b must be float8_e4m3fn, got ", a.scalar_type(), " and ", b.scalar_type());
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0), "scaled_mm: a [M, K] and b [K, N] expected, got ",
              a.sizes(), " and ", b.sizes());
  TORCH_CHECK(out_dtype == at::kBFloat16 || out_dtype == at::kHalf || out_dtype == at::kFloat,
              "scaled_mm: the output dtype must be bfloat16, float16 or float32, got ", out_dtype);
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  TORCH_CHECK(scale_a.scalar_type() == at::kFloat && scale_b.scalar_type() == at::kFloat,
              "scaled_mm: scales must be float32");
  TORCH_CHECK(scale_a.sizes().vec() == scale_a_sizes(mode, m, k), "scaled_mm: scale_a must be ",
              sizes_text(scale_a_sizes(mode, m, k)), " for scale mode ", to_string(mode), ", got ", scale_a.sizes());
  TORCH_CHECK(scale_b.sizes().vec() == scale_b_sizes(mode, k, n), "scaled_mm: scale_b must be ",
              sizes_text(scale_b_sizes(mode, k, n)), " for scale mode ", to_string(mode), ", got ", scale_b.sizes());
  TORCH_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == n), "scaled_mm: bias must be [", n, "], got ",
              bias.sizes());
}

at::Tensor scaled_mm(const at::Tensor &a, const at::Tensor &b, const at::Tensor &scale_a, const at::Tensor &scale_b,
                     const at::Tensor &bias, ScaleMode mode, at::ScalarType out_dtype, const PromotionRule &promotion) {
  check_scaled_mm_inputs(a, b, scale_a, scale_b, bias, mode, out_dtype);
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1), kb = blocks_of(k);

  const at::Tensor af = a.to(at::kFloat).contiguous();
  const at::Tensor bt = b.to(at::kFloat).t().contiguous();  // [N, K]: a column of b is a row here
  const at::Tensor saf = scale_a.contiguous(), sbf = scale_b.contiguous();
  const at::Tensor biasf = bias.defined() ? bias.to(at::kFloat).contiguous() : at::Tensor();
  const float *ap = af.const_data_ptr<float>(), *bp = bt.const_data_ptr<float>();
  const float *sap = saf.const_data_ptr<float>(), *sbp = sbf.const_data_ptr<float>();
  const float *biasp = biasf.defined() ? biasf.const_data_ptr<float>() : nullptr;
  const int64_t per_promotion = promotion ? std::max<int64_t>(1, promotion(m)) : 1;

  // The scale of block kb of row i (of a) and of column j (of b).
  auto sa = [&](int64_t i, int64_t blk) {
    return mode == ScaleMode::tensor ? sap[0] : mode == ScaleMode::channel ? sap[i] : sap[i * kb + blk];
  };
  auto sb = [&](int64_t blk, int64_t j) {
    return mode == ScaleMode::tensor    ? sbp[0]
           : mode == ScaleMode::channel ? sbp[j]
                                        : sbp[blk * blocks_of(n) + j / kFp8Block];
  };

  std::vector<float> out(static_cast<size_t>(m * n), std::numeric_limits<float>::quiet_NaN());
  for (int64_t i = 0; i < m; ++i) {
    const float *arow = ap + i * k;
    for (int64_t j = 0; j < n; ++j) {
      const float *bcol = bp + j * k;
      float total = 0.f;
      for (int64_t g0 = 0; g0 < kb; g0 += per_promotion) {
        float promoted = 0.f;  // the blocks of one promotion interval, each times its scale
        for (int64_t blk = g0; blk < std::min(kb, g0 + per_promotion); ++blk) {
          float partial = 0.f;
          for (int64_t kk = blk * kFp8Block; kk < std::min(k, (blk + 1) * kFp8Block); ++kk)
            partial += arow[kk] * bcol[kk];
          const float scale = sa(i, blk) * sb(blk, j);
          promoted = promoted + partial * scale;
        }
        total = total + promoted;
      }
      out[i * n + j] = biasp ? total + biasp[j] : total;
    }
  }
  return to_output(out.data(), {m, n}, out_dtype);
}

}  // namespace detfuzz::cpu_ops
