// The models the engine runs, one per impl of op "laps_engine": the small transformer of
// ops/graph with a kernel set (ours: `invariant`; libtorch's defaults: `torch`; planted bugs:
// `mutant-*`), each made from (dtype, shape, seed) so that any machine rebuilds its weights bit
// for bit. The registry's ImplInfo of each (ops/engine/register.cpp) runs one prompt through the
// model (OpArgs::tensors = {int token ids [T]}, output: the last token's log-probabilities [vocab]).
#pragma once

#include "ops/engine/step_model.h"
#include "ops/registry.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace detfuzz::engine {

using MakeModel =
    std::function<std::unique_ptr<StepModel>(at::ScalarType dtype, const std::vector<int64_t> &shape, uint64_t seed)>;

struct ModelImpl {
  std::string impl;
  Backend backend;
  std::vector<at::ScalarType> dtypes;
  Expectation expectation;
  std::string description;
  MakeModel make;
};

const std::vector<ModelImpl> &model_impls();
const ModelImpl *find_model_impl(const std::string &impl, Backend backend);  // nullptr when unknown

// The model geometry property cases use on a backend (tiny on the CPU, so a case takes
// milliseconds on two cores).
std::vector<int64_t> default_model_shape(Backend backend);

// Runs `prompt` through `model` from an empty cache: the last token's log-probabilities [vocab].
at::Tensor prompt_logprobs(StepModel &model, const std::vector<int32_t> &prompt);

}  // namespace detfuzz::engine
