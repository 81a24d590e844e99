// A step's sequences packed the way a paged forward takes them: token ids and positions of every
// new token back to back, the flat KV slot each one writes, and the attention metadata of
// ops/attention/kv_cache.h (cu_seqlens_q, seq_lens_kv, block_table).
#pragma once

#include "ops/engine/step_model.h"

namespace detfuzz::engine {

struct RaggedBatch {
  at::Tensor token_ids;     // int64 [T]
  at::Tensor positions;     // int64 [T]
  at::Tensor slot_mapping;  // int64 [T]
  attention::AttnMetadata meta;  // int32 cu_seqlens_q [S+1], seq_lens_kv [S], block_table [S, max_pages]
  std::vector<int64_t> q_lens, kv_lens;
};

// Throws std::invalid_argument when a sequence has no new token or too few pages.
RaggedBatch make_ragged_batch(const std::vector<SeqWork> &batch, int64_t page_size, at::Device device);

}  // namespace detfuzz::engine
