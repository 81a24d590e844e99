#include "ops/device_memory.h"

#ifdef DETFUZZ_WITH_CUDA
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>

#include <algorithm>
#include <atomic>

namespace detfuzz::device_memory {
namespace {
std::atomic<double> g_share{1.0};  // cap_share's share
}  // namespace

void trim_graph_pools(int device) {
  namespace alloc = c10::cuda::CUDACachingAllocator;
  const auto index = static_cast<c10::DeviceIndex>(device);
  const auto stats = alloc::getDeviceStats(index);
  const int64_t reserved =
      stats.reserved_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].current;
  // A quarter of the device, or half of this process's share when it has one: a capture must
  // never meet the cap, where the allocator would have to give cached blocks back.
  const double fraction = std::min(0.25, g_share.load() / 2);
  if (reserved >
      static_cast<int64_t>(static_cast<double>(at::cuda::getDeviceProperties(index)->totalGlobalMem) * fraction))
    alloc::emptyCache();
}

void cap_share(double share) {
  TORCH_CHECK(share > 0.0 && share <= 1.0, "device_memory::cap_share: share ", share, " is not in (0, 1]");
  g_share.store(share);
  const int devices = static_cast<int>(c10::cuda::device_count());
  for (int d = 0; d < devices; ++d) {
    at::empty({1}, at::TensorOptions().device(at::kCUDA, d));  // initialises the allocator for the device
    c10::cuda::CUDACachingAllocator::setMemoryFraction(share, static_cast<c10::DeviceIndex>(d));
  }
}

}  // namespace detfuzz::device_memory
#endif
