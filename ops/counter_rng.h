// The counter-based generator every reproducible value of detfuzz comes from, and its one hash:
// a uniform 64-bit value keyed by (seed, tensor, index) through splitmix64 finalisers. Test data
// (properties/data, on the host and in properties/cuda's kernels), the paged-attention data, the
// small transformer's weights (ops/graph) and the engine's workloads (ops/engine) all draw from
// it, so any machine rebuilds them bit for bit. Every function here is integer arithmetic (and
// one exact conversion in counter_unit): the host and the device give the same bits.
//
//   counter_bits(s, t, i) = splitmix64(splitmix64(splitmix64(s) ^ t) + i)
//                         = keyed_bits(tensor_key(s, t), i)
//
// Replays of every saved record depend on these staying bit-identical
// (tests/properties/test_counter_data.cpp holds known answers).
#pragma once

#include <cstdint>

#include "ops/host_device.h"

namespace detfuzz {

// splitmix64's constants, also for vectorised copies of it (properties/data.cpp's AVX-512 rows,
// tested against this scalar form).
constexpr uint64_t kSplitmixGamma = 0x9e3779b97f4a7c15ull;
constexpr uint64_t kSplitmixMul1 = 0xbf58476d1ce4e5b9ull, kSplitmixMul2 = 0x94d049bb133111ebull;

// The splitmix64 finaliser: a bijective mix of 64 bits, for deriving keys and shuffles.
DETFUZZ_HOST_DEVICE inline uint64_t splitmix64(uint64_t x) {
  x += kSplitmixGamma;
  x = (x ^ (x >> 30)) * kSplitmixMul1;
  x = (x ^ (x >> 27)) * kSplitmixMul2;
  return x ^ (x >> 31);
}

// The key of one tensor of a seed, and element `index` of the tensor of that key: loops over a
// tensor's elements derive the key once.
DETFUZZ_HOST_DEVICE inline uint64_t tensor_key(uint64_t seed, uint64_t tensor) {
  return splitmix64(splitmix64(seed) ^ tensor);
}
DETFUZZ_HOST_DEVICE inline uint64_t keyed_bits(uint64_t key, uint64_t index) { return splitmix64(key + index); }

DETFUZZ_HOST_DEVICE inline uint64_t counter_bits(uint64_t seed, uint64_t tensor, uint64_t index) {
  return keyed_bits(tensor_key(seed, tensor), index);
}

// Uniform in [0, 1) with 53 random bits.
DETFUZZ_HOST_DEVICE inline double counter_unit(uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }

}  // namespace detfuzz
