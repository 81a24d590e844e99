// detfuzz's batch-invariant paged attention as libtorch ops, for engines written in Python
// (torch.ops.load_library("libdetfuzz_torch.so")):
//   torch.ops.detfuzz.paged_attention(q, k_pool, v_pool, cu_seqlens_q, seq_lens_kv, block_table, scale)
//     plans and runs in one call (CPU: the fixed-split algorithm; CUDA: the fused kernel);
//   torch.classes.detfuzz.PagedAttentionPlan(q, k_pool, v_pool, cu_seqlens_q, seq_lens_kv, block_table)
//     plans once per batch (CUDA; a device-to-host copy of the metadata), and .run(q, k_pool, v_pool,
//     scale) launches only, so an engine can run it once per layer and capture it in a CUDA graph.
// Tensors as paged_attention.h describes them; scale 0 means 1 / sqrt(head_dim).
#pragma once

#include <ATen/ATen.h>
#include <torch/custom_class.h>

#ifdef DETFUZZ_WITH_CUDA
#include "ops/attention/paged_attention.h"
#endif

namespace detfuzz {

#ifdef DETFUZZ_WITH_CUDA
class PagedAttentionPlanHolder : public torch::CustomClassHolder {
 public:
  PagedAttentionPlanHolder(const at::Tensor &q, const at::Tensor &k_pool, const at::Tensor &v_pool,
                           const at::Tensor &cu_seqlens_q, const at::Tensor &seq_lens_kv, const at::Tensor &block_table)
      : plan_(q, k_pool, v_pool, cu_seqlens_q, seq_lens_kv, block_table) {}
  at::Tensor run(const at::Tensor &q, const at::Tensor &k_pool, const at::Tensor &v_pool, double scale) const {
    return plan_.run(q, k_pool, v_pool, scale);
  }

 private:
  attention::PagedAttentionCudaPlan plan_;
};
#endif

}  // namespace detfuzz
