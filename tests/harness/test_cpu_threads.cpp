#include "harness/cpu_threads.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

namespace detfuzz {
namespace {

TEST(CpuThreads, CpuRunsUseOneThreadUnlessTold) {
  const int before = at::get_num_threads();
  EXPECT_EQ(apply_cpu_threads(-1, true), 1);
  EXPECT_EQ(apply_cpu_threads(2, true), 2);
  EXPECT_EQ(apply_cpu_threads(0, true), 2) << "0 leaves the count as it is";
  EXPECT_EQ(apply_cpu_threads(-1, false), 2) << "CUDA runs keep libtorch's count";
  at::set_num_threads(before);
}

}  // namespace
}  // namespace detfuzz
