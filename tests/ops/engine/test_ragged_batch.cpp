// Packing a step's sequences: ids, positions and slots back to back, metadata per sequence.
#include "ops/engine/ragged_batch.h"

#include <gtest/gtest.h>

namespace detfuzz::engine {
namespace {

std::vector<int64_t> host(const at::Tensor &t) {
  const at::Tensor c = t.to(at::kLong).contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

TEST(RaggedBatch, PacksAPrefillAChunkAndADecode) {
  SeqWork prefill{{5, 6, 7}, 0, {9}};
  SeqWork chunk{{8, 9}, 4, {2, 3, 7}};    // positions 4, 5 over a 4-token prefix
  SeqWork decode{{1}, 8, {4, 0, 5}};      // position 8: page 2 (block 5), slot 5*4+0
  const RaggedBatch r = make_ragged_batch({prefill, chunk, decode}, 4, at::kCPU);
  EXPECT_EQ(host(r.token_ids), (std::vector<int64_t>{5, 6, 7, 8, 9, 1}));
  EXPECT_EQ(host(r.positions), (std::vector<int64_t>{0, 1, 2, 4, 5, 8}));
  EXPECT_EQ(host(r.slot_mapping), (std::vector<int64_t>{36, 37, 38, 12, 13, 20}));
  EXPECT_EQ(host(r.meta.cu_seqlens_q), (std::vector<int64_t>{0, 3, 5, 6}));
  EXPECT_EQ(host(r.meta.seq_lens_kv), (std::vector<int64_t>{3, 6, 9}));
  // Only the pages each sequence uses, right-padded with -1.
  EXPECT_EQ(host(r.meta.block_table), (std::vector<int64_t>{9, -1, -1, 2, 3, -1, 4, 0, 5}));
}

TEST(RaggedBatch, RejectsEmptySequencesAndMissingPages) {
  EXPECT_THROW(make_ragged_batch({SeqWork{{}, 0, {1}}}, 4, at::kCPU), std::invalid_argument);
  EXPECT_THROW(make_ragged_batch({SeqWork{{1, 2}, 3, {1}}}, 4, at::kCPU), std::invalid_argument);
}

}  // namespace
}  // namespace detfuzz::engine
