// Impls of op "laps_engine": one per engine model (ops/engine/model.h). Calling one runs a prompt
// through its model from an empty cache; the property schedule_invariance (properties/laps)
// runs whole traces through the engine with it.
#include "ops/engine/model.h"

#include <c10/util/Exception.h>

namespace detfuzz {

std::vector<ImplInfo> engine_impls(Backend backend) {
  std::vector<ImplInfo> out;
  for (const engine::ModelImpl &m : engine::model_impls()) {
    if (m.backend != backend) continue;
    const engine::MakeModel make = m.make;
    const Backend b = backend;
    out.push_back({m.impl, "laps_engine", backend, m.dtypes, m.expectation, m.description, [make, b](const OpArgs &a) {
                     TORCH_CHECK(a.tensors.size() == 1 && a.tensors[0].dim() == 1 && a.tensors[0].numel() > 0,
                                 "laps_engine takes one 1-D tensor of prompt token ids");
                     const at::Tensor ids = a.tensors[0].to(at::kCPU, at::kInt).contiguous();
                     std::vector<int32_t> prompt(ids.data_ptr<int32_t>(), ids.data_ptr<int32_t>() + ids.numel());
                     const auto model = make(a.out_dtype.value_or(at::kFloat), engine::default_model_shape(b), 0);
                     return engine::prompt_logprobs(*model, prompt);
                   }});
  }
  return out;
}

}  // namespace detfuzz
