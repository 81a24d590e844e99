// A test double of StepModel that checks the engine's KV bookkeeping, not arithmetic: each new
// token's K is written as (token id, position) through KVCache::set_kv at its slot, and each
// sequence's output is a function of every (token, position) pair read back through its block
// table. A wrong page, a reused prefix page with other tokens, a slot nothing wrote (the pools
// start as NaN) or a decode fed the wrong token changes the output; the oracle computes it from
// the token list alone.
#pragma once

#include "ops/attention/kv_cache.h"
#include "ops/engine/step_model.h"

#include <cmath>
#include <vector>

namespace detfuzz::engine::testing {

constexpr int64_t kHashVocab = 32;

inline uint64_t fold(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xbf58476d1ce4e5b9ull;
}

// The output row of a context hash: distinct values, so greedy decoding has no ties.
inline at::Tensor row_of(uint64_t h) {
  at::Tensor row = at::empty({kHashVocab}, at::kFloat);
  for (int64_t j = 0; j < kHashVocab; ++j)
    row.data_ptr<float>()[j] = -static_cast<float>((fold(h, static_cast<uint64_t>(j)) % 997) * kHashVocab + j) / 64.f;
  return row;
}

inline uint64_t hash_tokens(const std::vector<int32_t> &seq) {
  uint64_t h = 1;
  for (size_t p = 0; p < seq.size(); ++p) h = fold(fold(h, static_cast<uint64_t>(seq[p])), p);
  return h;
}

class ContextHashInstance : public ModelInstance {
 public:
  ContextHashInstance(int64_t num_pages, int64_t page_size, bool leak_batch)
      : cache_(config(num_pages, page_size)), leak_(leak_batch) {}
  static attention::KVCacheConfig config(int64_t num_pages, int64_t page_size) {
    attention::KVCacheConfig c;
    c.num_blocks = num_pages;
    c.block_size = page_size;
    c.num_kv_heads = 1;
    c.head_dim = 2;
    c.dtype = at::kFloat;
    return c;
  }
  StepOutput run(const std::vector<SeqWork> &batch, bool) override {
    const int64_t bs = cache_.config().block_size;
    std::vector<int64_t> slots;
    std::vector<float> kv;
    for (const auto &s : batch)
      for (size_t i = 0; i < s.tokens.size(); ++i) {
        const int64_t pos = s.context + static_cast<int64_t>(i);
        slots.push_back(attention::slot_of(s.blocks, bs, pos));
        kv.push_back(static_cast<float>(s.tokens[i]));
        kv.push_back(static_cast<float>(pos));
      }
    const int64_t t = static_cast<int64_t>(slots.size());
    const at::Tensor k = at::from_blob(kv.data(), {t, 1, 2}, at::kFloat).clone();
    cache_.set_kv(0, at::from_blob(slots.data(), {t}, at::kLong).clone(), k, k);
    const at::Tensor flat = cache_.k(0).view({-1, 2});
    std::vector<at::Tensor> rows;
    for (const auto &s : batch) {
      std::vector<int32_t> seen;
      uint64_t poison = 0;
      const int64_t len = s.context + static_cast<int64_t>(s.tokens.size());
      for (int64_t pos = 0; pos < len; ++pos) {
        const float *e = flat[attention::slot_of(s.blocks, bs, pos)].data_ptr<float>();
        if (!(e[1] == static_cast<float>(pos))) ++poison;  // NaN or another sequence's token
        seen.push_back(std::isfinite(e[0]) ? static_cast<int32_t>(e[0]) : -1);
      }
      rows.push_back(row_of(hash_tokens(seen) + poison));
    }
    at::Tensor out = at::stack(rows);
    // The planted leak: a step of more than one sequence shifts every output, as a kernel whose
    // split choice depends on the batch would.
    if (leak_ && batch.size() > 1) out.add_(1.0f / 1024);
    return {out, false};
  }

 private:
  attention::KVCache cache_;
  bool leak_;
};

class ContextHashModel : public StepModel {
 public:
  explicit ContextHashModel(bool leak_batch = false) : leak_(leak_batch) {}
  int64_t vocab() const override { return kHashVocab; }
  std::unique_ptr<ModelInstance> instance(int64_t num_pages, int64_t page_size, int64_t) override {
    return std::make_unique<ContextHashInstance>(num_pages, page_size, leak_);
  }

 private:
  bool leak_;
};

// What a request must produce: greedy decoding of the hash model over its own tokens.
struct Expected {
  std::vector<int32_t> tokens;
  at::Tensor final_logprobs;
};
inline Expected oracle(const std::vector<int32_t> &prompt, int64_t decode_steps) {
  Expected e;
  std::vector<int32_t> seq = prompt;
  for (int64_t k = 0; k <= decode_steps; ++k) {
    e.final_logprobs = row_of(hash_tokens(seq));
    const float *p = e.final_logprobs.data_ptr<float>();
    int32_t best = 0;
    for (int32_t j = 1; j < kHashVocab; ++j)
      if (p[j] > p[best]) best = j;
    e.tokens.push_back(best);
    seq.push_back(best);
  }
  return e;
}

}  // namespace detfuzz::engine::testing
