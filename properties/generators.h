// What every family's case generators share: the target, size limits, sizes biased toward where
// kernels break (1, primes, tile edges +-1, reductions that are not a multiple of a block, N
// smaller than a tile, empty dims) and choices that shrink. Row ops' cases are made in
// properties/rows/row_cases.h.
#pragma once

#include "properties/case.h"

#include <rapidcheck.h>

namespace detfuzz {

// What a campaign fuzzes: one (op, impl, property, dtype) on a backend.
struct Target {
  std::string op, impl, property;
  Backend backend = Backend::cpu;
  at::ScalarType dtype = at::kFloat;
  Expectation expectation = Expectation::must_hold;

  std::string name() const;  // "mm/invariant/batch_slice/float32"
};

// Size limits of generated row-op cases, per backend (CPU cases stay cheap).
struct SizeLimits {
  int64_t rows, cols, reduce, batch;
};
SizeLimits size_limits(Backend b);

// A dimension in [lo, hi], half the time from the edge list, shrinking toward lo.
rc::Gen<int64_t> gen_dim(int64_t lo, int64_t hi);

// RapidCheck's element/elementOf/weightedElement/oneOf do not shrink. These do: they draw an index
// with inRange, which shrinks toward 0, so a failing case shrinks toward the first choice.
template <typename T>
rc::Gen<T> shrinking_choice(std::vector<std::pair<int, T>> weighted) {
  int total = 0;
  for (const auto &w : weighted) total += w.first;
  return rc::gen::map(rc::gen::inRange(0, total), [weighted](int k) {
    for (const auto &w : weighted) {
      if (k < w.first) return w.second;
      k -= w.first;
    }
    return weighted.back().second;
  });
}

}  // namespace detfuzz
