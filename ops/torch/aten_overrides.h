// The aten operators whose CPU (and, in CUDA builds, CUDA) kernels batch-invariant mode replaces,
// and the function that registers our kernels for them. Which user-level entry points reach these
// operators (matmul, linear, `@`, 3-D inputs, ...) is documented at the top of aten_overrides.cpp.
#pragma once

#include <torch/library.h>

#include <memory>
#include <string>
#include <vector>

namespace detfuzz::torch_mode {

// "aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_log_softmax", "aten::mean.dim".
const std::vector<std::string> &overridden_aten_ops();

// Registers our kernels for every overridden op on the CPU key (and the CUDA key in CUDA builds),
// one torch::Library(IMPL, "aten", key) per key. Destroying the returned libraries deregisters
// them, which restores libtorch's native kernels. Not thread-safe on its own: the mode API
// (batch_invariant_mode.h) serialises calls.
std::vector<std::unique_ptr<torch::Library>> register_aten_overrides();

}  // namespace detfuzz::torch_mode
