// Host dispatch of the fused paged attention kernel: input checks (validate_paged_inputs, then
// what the kernel needs: dtype, head dim, GQA group, alignment), workspace, launch on the
// current stream.
#ifdef DETFUZZ_WITH_CUDA

#include "ops/attention/paged_attention.h"
#include "ops/attention/paged_attention_kernel.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <cstdint>

namespace detfuzz::attention {

std::string paged_attention_cuda_can_implement(const at::Tensor &q, const at::Tensor &k_pool) {
  if (!q.is_cuda()) return "q is not a CUDA tensor";
  if (q.scalar_type() != at::kHalf && q.scalar_type() != at::kBFloat16)
    return "dtype " + std::string(c10::toString(q.scalar_type())) + " (needs float16 or bfloat16)";
  if (q.dim() != 3 || k_pool.dim() != 4) return "q must be 3-D and k_pool 4-D";
  const int64_t d = q.size(2);
  if (d != 64 && d != 128 && d != 256) return "head dim " + std::to_string(d) + " (needs 64, 128 or 256)";
  const int64_t hkv = k_pool.size(2);
  if (hkv <= 0 || q.size(1) % hkv != 0 || q.size(1) / hkv < 1 || q.size(1) / hkv > 8)
    return "GQA group " + std::to_string(q.size(1)) + "/" + std::to_string(hkv) + " (needs an integer in 1..8)";
  return "";
}

at::Tensor paged_attention_cuda(const at::Tensor &q, const at::Tensor &k_pool, const at::Tensor &v_pool,
                                const at::Tensor &cu_seqlens_q, const at::Tensor &seq_lens_kv,
                                const at::Tensor &block_table, double alpha, int64_t split_tokens) {
  const MetadataHost m = validate_paged_inputs(q, k_pool, v_pool, cu_seqlens_q, seq_lens_kv, block_table);
  const std::string why = paged_attention_cuda_can_implement(q, k_pool);
  TORCH_CHECK(why.empty(), "paged_attention (CUDA): cannot run this case: ", why);
  for (const auto *t : {&cu_seqlens_q, &seq_lens_kv, &block_table})
    TORCH_CHECK(t->is_cuda() && t->device() == q.device(), "paged_attention (CUDA): metadata must be on ", q.device(),
                ", got ", t->device());
  const c10::cuda::CUDAGuard guard(q.device());
  const auto qc = q.contiguous(), kc = k_pool.contiguous(), vc = v_pool.contiguous();
  const auto cu = cu_seqlens_q.contiguous(), sl = seq_lens_kv.contiguous(), bt = block_table.contiguous();
  for (const auto *t : {&qc, &kc, &vc})
    TORCH_CHECK(reinterpret_cast<uintptr_t>(t->data_ptr()) % 16 == 0,
                "paged_attention (CUDA): q and the pools must be 16-byte aligned (storage offset ",
                t->storage_offset(), ")");
  auto out = at::empty({m.num_q, m.h_q, m.head_dim}, q.options());
  if (m.num_q == 0) return out;

  PagedAttnLaunch p;
  p.bf16 = q.scalar_type() == at::kBFloat16;
  p.q = qc.data_ptr();
  p.k_pool = kc.data_ptr();
  p.v_pool = vc.data_ptr();
  p.cu_seqlens_q = cu.data_ptr<int32_t>();
  p.seq_lens_kv = sl.data_ptr<int32_t>();
  p.block_table = bt.data_ptr<int32_t>();
  p.out = out.data_ptr();
  p.num_rows = static_cast<int>(m.num_q);
  p.num_seqs = static_cast<int>(m.num_seqs);
  p.max_blocks = static_cast<int>(m.max_blocks);
  p.block_size = static_cast<int>(m.block_size);
  p.h_q = static_cast<int>(m.h_q);
  p.h_kv = static_cast<int>(m.h_kv);
  p.head_dim = static_cast<int>(m.head_dim);
  TORCH_CHECK(split_tokens > 0 && split_tokens % kKvTile == 0, "paged_attention (CUDA): split_tokens ", split_tokens,
              " is not a positive multiple of ", kKvTile);
  p.split_tokens = static_cast<int>(split_tokens);
  const int64_t capacity = std::max<int64_t>(1, m.max_blocks * m.block_size);
  p.max_splits = static_cast<int>((capacity + split_tokens - 1) / split_tokens);
  p.scale = softmax_scale(alpha, m.head_dim);
  at::Tensor part_acc, part_ml;
  if (p.max_splits > 1) {
    const auto f32 = q.options().dtype(at::kFloat);
    part_acc = at::empty({m.num_q, m.h_q, p.max_splits, m.head_dim}, f32);
    part_ml = at::empty({m.num_q, m.h_q, p.max_splits, 2}, f32);
    p.part_acc = part_acc.data_ptr<float>();
    p.part_ml = part_ml.data_ptr<float>();
  }
  launch_paged_attention(p, at::cuda::getCurrentCUDAStream());
  return out;
}

}  // namespace detfuzz::attention

#endif  // DETFUZZ_WITH_CUDA
