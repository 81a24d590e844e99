#include "properties/generators.h"

#include <algorithm>

namespace detfuzz {
namespace {

// Sizes kernels get wrong: tiny, primes, powers of two and their neighbours (tile edges).
const std::vector<int64_t> &edge_sizes() {
  static const std::vector<int64_t> e = {1,   2,   3,   5,   7,   8,    13,   16,   17,   31,   32,
                                         33,  63,  64,  65,  97,  127,  128,  129,  191,  255,  256,
                                         257, 383, 511, 512, 513, 1023, 1024, 1025, 4095, 4096, 4097};
  return e;
}

}  // namespace

std::string Target::name() const { return op + "/" + impl + "/" + property + "/" + dtype_name(dtype); }

SizeLimits size_limits(Backend b) {
  if (b == Backend::cpu) return {256, 256, 512, 6};
  return {1100, 2100, 2100, 8};  // bounded by the host-side data generation and float64 reference
}

rc::Gen<int64_t> gen_dim(int64_t lo, int64_t hi) {
  std::vector<int64_t> edges;
  if (lo == 0) edges.push_back(0);  // empty dimensions
  for (int64_t e : edge_sizes())
    if (e >= lo && e <= hi) edges.push_back(e);
  // kind 0: any size in range; kind 1: an edge size (ascending, so it shrinks toward small ones).
  const int kinds = edges.empty() ? 1 : 2;
  return rc::gen::apply([edges](int kind, int64_t any, size_t edge) { return kind == 0 ? any : edges[edge]; },
                        rc::gen::inRange(0, kinds), rc::gen::inRange<int64_t>(lo, hi + 1),
                        rc::gen::inRange<size_t>(0, std::max<size_t>(edges.size(), 1)));
}

}  // namespace detfuzz
