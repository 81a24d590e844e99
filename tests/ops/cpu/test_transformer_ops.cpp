// rope and silu_and_mul against their formulas (ops/cpu/transformer_ops.cpp), bit for bit:
// rope's per-thread table of angles at cached, uncached and out-of-table positions, and under
// interleaved thetas and head dims; silu_and_mul's two sigmoid forms at edge values.
#include "ops/cpu/cpu_ops.h"
#include "test_support.h"

#include <cmath>
#include <limits>

namespace detfuzz {
namespace {

using test::bitwise_equal;

at::Tensor rope_formula(const at::Tensor &x, const std::vector<int64_t> &positions, double theta) {
  const int64_t t_len = x.size(0), heads = x.size(1), d = x.size(2), half = d / 2;
  at::Tensor y = at::empty_like(x);
  const float *xp = x.data_ptr<float>();
  float *yp = y.data_ptr<float>();
  for (int64_t t = 0; t < t_len; ++t)
    for (int64_t i = 0; i < half; ++i) {
      const double a = static_cast<double>(positions[t]) * cpu_ops::rope_inv_freq(theta, i, d);
      const float c = static_cast<float>(std::cos(a)), s = static_cast<float>(std::sin(a));
      for (int64_t h = 0; h < heads; ++h) {
        const float *in = xp + (t * heads + h) * d;
        float *out = yp + (t * heads + h) * d;
        const float xc = in[i] * c, ys = in[i + half] * s, yc = in[i + half] * c, xs = in[i] * s;
        out[i] = xc - ys;
        out[i + half] = yc + xs;
      }
    }
  return y;
}

TEST(CpuTransformerOps, RopeFollowsTheFormulaAtEveryPosition) {
  const std::vector<int64_t> positions = {0, 1, 5, 70000, 65535, 65536, 12345, 3, 1 << 20, 2047, 0, 5};
  for (int round = 0; round < 2; ++round)  // the second round reads the table the first one filled
    for (double theta : {10000.0, 500000.0})
      for (int64_t d : {16, 6}) {
        const at::Tensor x = test::randn({static_cast<int64_t>(positions.size()), 3, d}, at::kFloat, 7 + d);
        const at::Tensor pos = at::tensor(positions, at::kLong);
        EXPECT_TRUE(bitwise_equal(rope_formula(x, positions, theta), cpu_ops::rope(x, pos, theta)))
            << "theta " << theta << " head dim " << d << " round " << round;
      }
}

TEST(CpuTransformerOps, SiluAndMulFollowsTheFormulaAtEdgeValues) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> g = {0.f, -0.f, 1.f, -1.f, 30.f, -30.f, 100.f, -100.f, -200.f, inf, -inf, nan, 1e-40f, -1e-40f};
  const at::Tensor r = test::randn({50}, at::kFloat, 5);
  for (int64_t e = 0; e < r.numel(); ++e) g.push_back(4 * r[e].item<float>());
  const int64_t n = static_cast<int64_t>(g.size());
  at::Tensor x = at::empty({1, 2 * n});
  at::Tensor expected = at::empty({1, n});
  for (int64_t e = 0; e < n; ++e) {
    const float u = 0.75f - 0.01f * static_cast<float>(e);
    x[0][e] = g[e];
    x[0][n + e] = u;
    float sig;
    if (g[e] >= 0.0f) {
      sig = 1.0f / (1.0f + std::exp(-g[e]));
    } else {
      const float ex = std::exp(g[e]);
      sig = ex / (1.0f + ex);
    }
    const float y = (g[e] * sig) * u;
    expected[0][e] = std::isnan(y) ? nan : y;  // the op's NaN is the canonical one
  }
  EXPECT_TRUE(bitwise_equal(expected, cpu_ops::silu_and_mul(x)));
}

}  // namespace
}  // namespace detfuzz
