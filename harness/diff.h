// Bitwise diff engine. Two tensors are equal only when every element has the same bit pattern:
// a NaN equals only the same NaN pattern, and +0 differs from -0. Beside the verdict it measures
// how far apart the differing elements are (max |a-b| and max ULP distance) for the reports.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>

namespace detfuzz {

struct DiffStats {
  at::ScalarType dtype = at::kFloat;  // of the compared tensors: the width of the bit patterns
  int64_t numel = 0;
  int64_t differing = 0;       // elements whose bit patterns differ
  int64_t first_index = -1;    // linear row-major index of the first differing element, -1 if none
  std::string first_coords;    // the same as "[i,j,...]"
  uint64_t expected_bits = 0;  // bit patterns at first_index (zero-extended)
  uint64_t actual_bits = 0;
  double max_abs_diff = 0;      // over differing pairs that are both finite; inf when a non-finite pair differs
  uint64_t max_ulp = 0;         // over differing pairs; UINT64_MAX when one side is NaN
  bool shape_mismatch = false;  // shapes or dtypes differ: nothing element-wise was compared
  std::string shape_detail;

  bool equal() const { return !shape_mismatch && differing == 0; }
  std::string summary() const;  // one line
};

// `expected` is the reference side (e.g. the full-batch result sliced), `actual` the other.
DiffStats bitwise_diff(const at::Tensor &expected, const at::Tensor &actual);

// Distance in units in the last place between two values of a floating dtype, given as bit
// patterns of that dtype's width; NaN on either side gives UINT64_MAX. +0 and -0 are 1 apart.
uint64_t ulp_distance(uint64_t a_bits, uint64_t b_bits, at::ScalarType dtype);

std::string hex_bits(uint64_t bits, at::ScalarType dtype);
std::string coords_string(
    int64_t linear, at::IntArrayRef sizes);  // "[i,j,...]" of a row-major index  // "0x3f800000", width of the dtype

}  // namespace detfuzz
