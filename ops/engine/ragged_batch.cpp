#include "ops/engine/ragged_batch.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace detfuzz::engine {

RaggedBatch make_ragged_batch(const std::vector<SeqWork> &batch, int64_t page_size, at::Device device) {
  RaggedBatch r;
  std::vector<int64_t> ids, pos, slots;
  std::vector<std::vector<int64_t>> blocks;
  int64_t max_pages = 1;
  for (size_t s = 0; s < batch.size(); ++s) {
    const SeqWork &w = batch[s];
    const int64_t q = static_cast<int64_t>(w.tokens.size()), kv = w.context + q;
    if (q == 0 || w.context < 0) throw std::invalid_argument("ragged batch: sequence " + std::to_string(s) + " has no new token");
    if (static_cast<int64_t>(w.blocks.size()) * page_size < kv)
      throw std::invalid_argument("ragged batch: sequence " + std::to_string(s) + " has " + std::to_string(w.blocks.size()) +
                                  " pages for " + std::to_string(kv) + " tokens");
    for (int64_t i = 0; i < q; ++i) {
      ids.push_back(w.tokens[i]);
      pos.push_back(w.context + i);
      slots.push_back(attention::slot_of(w.blocks, page_size, w.context + i));
    }
    const int64_t used = (kv + page_size - 1) / page_size;
    blocks.emplace_back(w.blocks.begin(), w.blocks.begin() + used);
    max_pages = std::max(max_pages, used);
    r.q_lens.push_back(q);
    r.kv_lens.push_back(kv);
  }
  const auto vec = [&](const std::vector<int64_t> &v) {
    return at::tensor(v, at::TensorOptions().dtype(at::kLong)).to(device);
  };
  r.token_ids = vec(ids);
  r.positions = vec(pos);
  r.slot_mapping = vec(slots);
  r.meta = attention::make_metadata(r.q_lens, r.kv_lens, blocks, max_pages, device);
  return r;
}

}  // namespace detfuzz::engine
