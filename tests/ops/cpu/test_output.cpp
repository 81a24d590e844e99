// The last step of every CPU op (ops/cpu/output.h): float32 to the output dtype, rounded to
// nearest even, every NaN the dtype's positive quiet NaN, the same bits at every position of the
// tensor (vectorised body or scalar tail), and float32 results canonicalised in place.
#include "ops/cpu/output.h"

#include <ATen/ATen.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

namespace detfuzz {
namespace {

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// Values whose conversion is easy to get wrong: NaNs of every sign and payload, infinities,
// signed zeros, subnormals of float32 and of half, ties at bfloat16's and half's rounding
// point, and values past half's range.
std::vector<float> edge_values() {
  std::vector<float> v;
  for (uint32_t b :
       {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFFFFFFFFu, 0x7FBFFFFFu, 0x7F800000u, 0xFF800000u, 0x00000000u,
        0x80000000u, 0x00000001u, 0x807FFFFFu, 0x3F808000u, 0x3F818000u, 0xBF808000u, 0x3F800FFFu, 0x33800000u,
        0x33000001u, 0x477FF000u, 0x477FF001u, 0x47800000u, 0xC7800000u, 0x387FC000u})
    v.push_back(from_bits(b));
  return v;
}

TEST(CpuOutput, RoundsToNearestEvenAndCanonicalisesNaNAtEveryPosition) {
  std::mt19937 rng(20261125);
  const std::vector<float> edges = edge_values();
  for (int64_t n : {1, 7, 8, 15, 16, 17, 31, 32, 33, 64, 100}) {
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<float> x(n);
      for (auto &e : x) {
        const uint32_t pick = rng() % 4;
        e = pick == 0 ? edges[rng() % edges.size()] : from_bits(rng());
      }
      const at::Tensor src = at::from_blob(x.data(), {n}, at::kFloat).clone();
      const at::Tensor bf = cpu_ops::to_output(src.clone(), at::kBFloat16);
      const at::Tensor hf = cpu_ops::to_output(src.clone(), at::kHalf);
      at::Tensor f32 = src.clone();
      const at::Tensor f = cpu_ops::to_output(f32, at::kFloat);
      ASSERT_EQ(bf.scalar_type(), at::kBFloat16);
      ASSERT_EQ(hf.scalar_type(), at::kHalf);
      for (int64_t i = 0; i < n; ++i) {
        const float v = x[i];
        const bool nan = std::isnan(v);
        const uint16_t want_bf = nan ? 0x7FC0 : c10::BFloat16(v).x;
        const uint16_t want_hf = nan ? 0x7E00 : c10::Half(v).x;
        const uint32_t want_f = nan ? 0x7FC00000u : bits_of(v);
        EXPECT_EQ(bf.data_ptr<c10::BFloat16>()[i].x, want_bf)
            << "n " << n << " i " << i << " bits " << std::hex << bits_of(v);
        EXPECT_EQ(hf.data_ptr<c10::Half>()[i].x, want_hf)
            << "n " << n << " i " << i << " bits " << std::hex << bits_of(v);
        EXPECT_EQ(bits_of(f.data_ptr<float>()[i]), want_f) << "n " << n << " i " << i;
        EXPECT_EQ(bits_of(f32.data_ptr<float>()[i]), want_f) << "float32 is canonicalised in place";
      }
    }
  }
}

// A dense but permuted result keeps its strides; a view with gaps converts like its contiguous
// copy, its NaNs included (the same canonical pattern as a dense result's).
TEST(CpuOutput, PermutedAndGappedResults) {
  const at::Tensor x = at::randn({6, 10}, at::kFloat);
  x.select(1, 4).fill_(-std::numeric_limits<float>::quiet_NaN());
  for (const at::Tensor &view : {x.t(), x.slice(1, 0, 10, 2)}) {
    const bool dense = view.is_non_overlapping_and_dense();
    const at::Tensor nan = view.isnan().contiguous();
    ASSERT_GT(nan.sum().item<int64_t>(), 0);
    for (auto [dtype, pattern] : {std::pair{at::kBFloat16, 0x7FC0}, {at::kHalf, 0x7E00}}) {
      const at::Tensor got = cpu_ops::to_output(view, dtype);  // the bfloat16/float16 paths leave `view` as it is
      const at::Tensor want = cpu_ops::to_output(view.contiguous(), dtype);
      ASSERT_EQ(got.sizes(), view.sizes());
      if (dense) EXPECT_EQ(got.strides(), view.strides());
      const at::Tensor bits = got.contiguous().view(at::kShort).to(at::kInt);
      EXPECT_TRUE(at::equal(bits, want.view(at::kShort).to(at::kInt))) << dtype << (dense ? " dense" : " with gaps");
      EXPECT_TRUE(at::all(bits.masked_select(nan) == pattern).item<bool>())
          << dtype << (dense ? " dense" : " with gaps");
    }
  }
}

// to_output from a buffer gives to_output's bits from a tensor, for every output dtype.
TEST(CpuOutput, FromABufferAsFromATensor) {
  std::vector<float> v = edge_values();
  for (int i = 0; i < 41; ++i) v.push_back(0.37f * static_cast<float>(i) - 5.f);
  const int64_t n = static_cast<int64_t>(v.size());
  for (auto dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    const at::Tensor from_tensor = cpu_ops::to_output(at::from_blob(v.data(), {n}).clone(), dtype);
    const at::Tensor from_buffer = cpu_ops::to_output(v.data(), {n}, dtype);
    ASSERT_EQ(from_buffer.scalar_type(), dtype);
    ASSERT_TRUE(from_buffer.is_contiguous());
    EXPECT_EQ(0, std::memcmp(from_tensor.data_ptr(), from_buffer.data_ptr(), from_tensor.nbytes())) << dtype;
  }
}

// float_values: every value of every input dtype and layout as ATen widens it (NaNs: a NaN).
TEST(CpuOutput, FloatValuesWidenExactly) {
  std::vector<float> v = edge_values();
  for (int i = 0; i < 77; ++i) v.push_back(1.37f * static_cast<float>(i) - 50.f);
  const int64_t n = static_cast<int64_t>(v.size());
  const at::Tensor base = at::from_blob(v.data(), {n}).clone();
  for (auto dtype : {at::kFloat, at::kBFloat16, at::kHalf})
    for (bool gapped : {false, true}) {
      const at::Tensor t = gapped ? base.to(dtype).view({n / 3, 3}).slice(1, 0, 2) : base.to(dtype);
      std::vector<float> buffer;
      const float *got = cpu_ops::float_values(t, buffer);
      const at::Tensor expected = t.to(at::kFloat).contiguous();
      const float *want = expected.data_ptr<float>();
      for (int64_t i = 0; i < expected.numel(); ++i)
        EXPECT_TRUE(bits_of(want[i]) == bits_of(got[i]) || (std::isnan(want[i]) && std::isnan(got[i])))
            << dtype << (gapped ? " gapped" : "") << " element " << i;
    }
}

}  // namespace
}  // namespace detfuzz
