// compare_bits (what every invariance verdict uses) on the CPU is the host diff engine; the
// device path refuses what it cannot compare. tests/properties/cuda compares the two on a GPU.
#include "properties/data.h"
#include "properties/device_diff.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace detfuzz {
namespace {

TEST(CompareBits, OnTheHostItIsTheHostEngine) {
  const at::Tensor a = make_values(1, 0, {9, 17}, at::kHalf, "special");
  at::Tensor b = a.clone();
  b.view(-1)[40] = 2.5;
  const DiffStats via = compare_bits(a, b), host = bitwise_diff(a, b);
  EXPECT_EQ(via.differing, host.differing);
  EXPECT_EQ(via.first_index, host.first_index);
  EXPECT_EQ(via.summary(), host.summary());
  EXPECT_FALSE(via.equal());
  EXPECT_TRUE(compare_bits(a, a.clone()).equal());
  EXPECT_THROW(device_bitwise_diff(a, b), std::invalid_argument);
}

}  // namespace
}  // namespace detfuzz
