// Registers detfuzz::paged_attention and detfuzz.PagedAttentionPlan (paged_attention_op.h).
#include "ops/torch/paged_attention_op.h"

#include "ops/attention/paged_attention.h"

#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(detfuzz, m) {
  m.def(
      "paged_attention(Tensor q, Tensor k_pool, Tensor v_pool, Tensor cu_seqlens_q, Tensor seq_lens_kv, "
      "Tensor block_table, float scale=0.) -> Tensor");
#ifdef DETFUZZ_WITH_CUDA
  m.class_<detfuzz::PagedAttentionPlanHolder>("PagedAttentionPlan")
      .def(torch::init<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>())
      .def("run", &detfuzz::PagedAttentionPlanHolder::run);
#endif
}

TORCH_LIBRARY_IMPL(detfuzz, CPU, m) {
  m.impl("paged_attention",
         [](const at::Tensor &q, const at::Tensor &k_pool, const at::Tensor &v_pool, const at::Tensor &cu_seqlens_q,
            const at::Tensor &seq_lens_kv, const at::Tensor &block_table, double scale) {
           return detfuzz::attention::paged_attention_split_cpu(q, k_pool, v_pool, cu_seqlens_q, seq_lens_kv,
                                                                block_table, scale);
         });
}

#ifdef DETFUZZ_WITH_CUDA
TORCH_LIBRARY_IMPL(detfuzz, CUDA, m) {
  m.impl("paged_attention", [](const at::Tensor &q, const at::Tensor &k_pool, const at::Tensor &v_pool,
                               const at::Tensor &cu_seqlens_q, const at::Tensor &seq_lens_kv,
                               const at::Tensor &block_table, double scale) {
    return detfuzz::attention::paged_attention_cuda(q, k_pool, v_pool, cu_seqlens_q, seq_lens_kv, block_table, scale);
  });
}
#endif
