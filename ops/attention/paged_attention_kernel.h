// Launcher of the fused paged attention kernel (paged_attention.cu). Knows nothing of torch: raw
// device pointers, sizes and a stream. Host dispatch (shape checks, workspace) is in
// paged_attention_cuda.cpp.
#pragma once

#include <cuda_runtime_api.h>

namespace detfuzz::attention {

struct PagedAttnLaunch {
  bool bf16 = true;  // else float16
  const void *q = nullptr, *k_pool = nullptr, *v_pool = nullptr;  // [T_q,H_q,D], [NB,BS,H_kv,D] x2
  const int *cu_seqlens_q = nullptr, *seq_lens_kv = nullptr, *block_table = nullptr;
  void *out = nullptr;            // [T_q, H_q, D], q's dtype
  float *part_acc = nullptr;      // [T_q, H_q, max_splits, D] unnormalised split accumulators
  float *part_ml = nullptr;       // [T_q, H_q, max_splits, 2]  split (max, sum)
  int num_rows = 0, num_seqs = 0, max_blocks = 0, block_size = 0;
  int h_q = 0, h_kv = 0, head_dim = 0;
  int split_tokens = 256;  // a multiple of 64
  int max_splits = 0;      // ceil(max_blocks * block_size / split_tokens): from shapes only
  float scale = 1.f;
};

// Two launches on `stream`: the split kernel over the whole mixed batch, then the combine.
// Throws std::runtime_error naming file:line on any CUDA error.
void launch_paged_attention(const PagedAttnLaunch &p, cudaStream_t stream);

}  // namespace detfuzz::attention
