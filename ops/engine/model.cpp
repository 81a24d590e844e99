#include "ops/engine/model.h"

#include <c10/util/Exception.h>

namespace detfuzz::engine {

const std::vector<ModelImpl> &model_impls() {
  static const std::vector<ModelImpl> impls = [] {
    std::vector<ModelImpl> all;
    return all;
  }();
  return impls;
}

const ModelImpl *find_model_impl(const std::string &impl, Backend backend) {
  for (const auto &m : model_impls())
    if (m.impl == impl && m.backend == backend) return &m;
  return nullptr;
}

std::vector<int64_t> default_model_shape(Backend) { return {}; }

at::Tensor prompt_logprobs(StepModel &model, const std::vector<int32_t> &prompt) {
  const int64_t page = 16, pages = (static_cast<int64_t>(prompt.size()) + page - 1) / page;
  const int64_t reserved = model.reserved_pages();
  const auto instance = model.instance(pages + reserved, page, pages);
  SeqWork w;
  w.tokens = prompt;
  for (int64_t b = 0; b < pages; ++b) w.blocks.push_back(reserved + b);
  return instance->run({w}, true).logprobs[0];
}

}  // namespace detfuzz::engine
