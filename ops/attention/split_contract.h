// The constants of the fixed-split algorithm (paged_attention.h describes it) that a row's bits
// depend on: one home for the host plan, the CPU algorithm (split_cpu.cpp) and the CUDA kernels
// (paged_attention_tile.cuh), which must agree on them. No CUDA and no torch here.
#pragma once

#include <cstdint>

namespace detfuzz::attention {

constexpr int64_t kKvTile = 64;    // keys per online-softmax step
constexpr int64_t kKvSplit = 256;  // keys per split; a multiple of kKvTile
static_assert(kKvSplit % kKvTile == 0, "a split is whole steps");
// How far (log2 domain) a step's maximum may pass the running reference before the reference moves
// and the state is rescaled: p then stays at most 2^8, which float32 sums and a 16-bit P hold.
constexpr float kRescaleSlack = 8.f;

}  // namespace detfuzz::attention
