// Test data that rebuilds the same bits on any machine. Element e of tensor t of a case with
// data seed s is a pure function of (s, t, e) through a counter-based generator (splitmix64
// finalisers), computed in float64 and rounded once to the tensor's dtype (properties/
// counter_data.h). CUDA tensors are made on the device with the same bits as the host's. Layouts
// are made by copying those values into a poisoned (NaN-filled) storage viewed with the
// requested strides, so an impl that reads outside its view sees NaN.
#pragma once

#include "ops/counter_rng.h"
#include "ops/registry.h"

#include <string>
#include <vector>

namespace detfuzz {

// The distributions of the catalogue.
const std::vector<std::string> &distributions();  // normal uniform linspace wide special

// splitmix64, counter_bits and the rest of the counter-based generator live in ops/counter_rng.h.

// Contiguous tensor of `sizes` and `dtype` drawn from `dist` (integers: uniform in [-100, 100]),
// on `device`: generated there for a CUDA device (float32/16, bfloat16, int32/64), bit for bit the
// host's values. Throws std::invalid_argument for an unknown distribution.
at::Tensor make_values(uint64_t seed, uint64_t tensor, at::IntArrayRef sizes, at::ScalarType dtype,
                       const std::string &dist, const at::Device &device = at::Device(at::kCPU));

// Rows of the paged-attention data (counter_data::irwin_hall_value): row r holds the values of
// key keys[r] at indices first[r] .. first[r] + width - 1, as a float32 [rows, width] tensor
// made on `device` (on a CUDA device by a kernel, with the host's bits).
at::Tensor keyed_rows(const std::vector<uint64_t> &keys, const std::vector<uint64_t> &first, int64_t width,
                      const at::Device &device);

// One row of them on the host: out[e] = irwin_hall_value(key, first + e) for e < width, eight at
// a time with AVX-512 where the CPU has it (irwin_hall_rows_vectorised), with the same bits.
void irwin_hall_row(uint64_t key, uint64_t first, int64_t width, float *out);
bool irwin_hall_rows_vectorised();

// The same values seen through a layout: 'c' contiguous, 't' transposed storage (last two dims),
// 'p' padded rows plus a storage offset, 'g' every other element of a twice-as-wide buffer.
// The result lives on `device`. Throws std::invalid_argument for an unknown code.
at::Tensor with_layout(const at::Tensor &values, char layout, const at::Device &device);

at::Device device_of(Backend b);

// Refuses (std::invalid_argument) a case's tensors (its inputs, and its output where that outgrows
// them) of `bytes` in all that cannot fit `device`'s memory (the host's physical memory, or the
// CUDA device's): a record with such a shape is malformed, refused before any allocation rather
// than run into an allocator error. `what` names the case's shape.
void check_tensors_fit(double bytes, const at::Device &device, const std::string &what);

}  // namespace detfuzz
