// The counter-based generator every reproducible value of detfuzz comes from: a uniform 64-bit
// value keyed by (seed, tensor, index) through splitmix64 finalisers. Test data (properties/data)
// and the small transformer's weights (ops/graph) both draw from it, so any machine rebuilds
// them bit for bit.
#pragma once

#include <cstdint>

namespace detfuzz {

// The splitmix64 finaliser: a bijective mix of 64 bits, for deriving keys and shuffles.
inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

inline uint64_t counter_bits(uint64_t seed, uint64_t tensor, uint64_t index) {
  return splitmix64(splitmix64(splitmix64(seed) ^ tensor) + index);
}

// Uniform in [0, 1) with 53 random bits.
inline double counter_unit(uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }

}  // namespace detfuzz
