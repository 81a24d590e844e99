// KV cache: allocator, set_kv through the flat view, metadata validation errors.
#include "ops/attention/kv_cache.h"
#include "ops/attention/paged_attention.h"
#include "ops/registry.h"
#include "properties/attention/attention_properties.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <set>
#include <string>

using namespace detfuzz;
using namespace detfuzz::attention;

namespace {

at::Tensor values(std::vector<int64_t> sizes, uint64_t tensor_id) {
  auto t = at::empty(sizes, at::kFloat);
  float *p = t.data_ptr<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = attention_case::value(7, tensor_id, i);
  return t;
}

// A valid small batch: 2 sequences (q 3 of kv 5, decode of kv 6), pages of 4, 6 blocks.
struct Inputs {
  at::Tensor q, k, v, cu, kv, bt;
};
Inputs valid_inputs() {
  KVCacheConfig cfg;
  cfg.num_blocks = 6;
  cfg.block_size = 4;
  cfg.num_kv_heads = 2;
  cfg.head_dim = 8;
  cfg.dtype = at::kFloat;
  KVCache cache(cfg);
  const std::vector<std::vector<int64_t>> blocks = {{4, 1}, {0, 5}};
  std::vector<int64_t> slots;
  for (int64_t p = 0; p < 5; ++p) slots.push_back(slot_of(blocks[0], 4, p));
  for (int64_t p = 0; p < 6; ++p) slots.push_back(slot_of(blocks[1], 4, p));
  cache.set_kv(0, at::tensor(slots, at::kLong), values({11, 2, 8}, 1), values({11, 2, 8}, 2));
  const auto meta = make_metadata({3, 1}, {5, 6}, blocks, 3, at::kCPU);
  return {values({4, 4, 8}, 0), cache.k(0), cache.v(0), meta.cu_seqlens_q, meta.seq_lens_kv, meta.block_table};
}

// Runs the reference on the inputs and returns the error message ("" when it did not throw).
std::string error_of(const Inputs &in) {
  try {
    paged_attention_reference(in.q, in.k, in.v, in.cu, in.kv, in.bt, 0.0);
  } catch (const c10::Error &e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(BlockAllocator, HandsOutDistinctBlocksAndRejectsMisuse) {
  BlockAllocator a(5);
  std::set<int64_t> got;
  for (int i = 0; i < 5; ++i) got.insert(a.allocate());
  EXPECT_EQ(got, (std::set<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_THROW(a.allocate(), std::runtime_error);
  a.free(3);
  EXPECT_EQ(a.num_free(), 1);
  EXPECT_EQ(a.allocate(), 3);
  a.free(2);
  EXPECT_THROW(a.free(2), c10::Error);  // double free
  EXPECT_THROW(a.free(7), c10::Error);  // not a block
}

TEST(KVCache, SetKvWritesWhereTheBlockTableSays) {
  KVCacheConfig cfg;
  cfg.num_blocks = 7;
  cfg.block_size = 3;
  cfg.num_kv_heads = 2;
  cfg.head_dim = 4;
  cfg.dtype = at::kFloat;
  KVCache cache(cfg);
  const std::vector<int64_t> blocks = {5, 2, 6};  // 8 tokens over pages 5, 2, 6
  std::vector<int64_t> slots;
  for (int64_t p = 0; p < 8; ++p) slots.push_back(slot_of(blocks, 3, p));
  EXPECT_EQ(slots[0], 15);
  EXPECT_EQ(slots[4], 2 * 3 + 1);
  const auto k = values({8, 2, 4}, 11), v = values({8, 2, 4}, 12);
  cache.set_kv(0, at::tensor(slots, at::kLong), k, v);
  // Read back through the [num_blocks, block_size, H_kv, D] view (the kernels' addressing).
  for (int64_t p = 0; p < 8; ++p) {
    const auto kr = cache.k(0)[blocks[p / 3]][p % 3];
    const auto vr = cache.v(0)[blocks[p / 3]][p % 3];
    EXPECT_TRUE(at::equal(kr, k[p])) << "token " << p;
    EXPECT_TRUE(at::equal(vr, v[p])) << "token " << p;
  }
  // Everything else is still the NaN fill: nothing was written outside the 8 slots.
  const auto flat = cache.k(0).view({21, 2, 4});
  int64_t nan_rows = 0;
  for (int64_t s = 0; s < 21; ++s) nan_rows += flat[s].isnan().all().item<bool>();
  EXPECT_EQ(nan_rows, 21 - 8);
  // An un-viewed index would have treated the slot ids as block ids: the view matters.
  EXPECT_THROW(cache.set_kv(0, at::tensor(std::vector<int64_t>{21}, at::kLong), k.slice(0, 0, 1), v.slice(0, 0, 1)),
               c10::Error);
}

// The host path of set_kv against index_copy_ on the flat view, bit for bit: int32 and int64
// slot ids, gapped K/V views, bfloat16 pools, K/V of another dtype (converted), a slot named
// twice (the later token's row stays), and the range check's message.
TEST(KVCache, SetKvOnTheHostAsIndexCopy) {
  KVCacheConfig cfg;
  cfg.num_blocks = 5;
  cfg.block_size = 4;
  cfg.num_kv_heads = 2;
  cfg.head_dim = 8;
  cfg.dtype = at::kBFloat16;
  cfg.num_layers = 2;
  const std::vector<int64_t> slots = {7, 0, 19, 3, 7, 12};
  const at::Tensor wide = values({6, 2, 16}, 21);
  for (auto id_type : {at::kInt, at::kLong})
    for (bool gapped : {false, true})
      for (auto in_type : {at::kBFloat16, at::kFloat}) {
        const at::Tensor k = (gapped ? wide.slice(2, 0, 8) : values({6, 2, 8}, 22)).to(in_type);
        const at::Tensor v = (gapped ? wide.slice(2, 8, 16) : values({6, 2, 8}, 23)).to(in_type);
        KVCache cache(cfg);
        cache.set_kv(1, at::tensor(slots, id_type), k, v);
        at::Tensor k_ref = KVCache(cfg).k(1).view({20, 2, 8}), v_ref = KVCache(cfg).v(1).view({20, 2, 8});
        k_ref.index_copy_(0, at::tensor(slots, at::kLong), k.to(at::kBFloat16));
        v_ref.index_copy_(0, at::tensor(slots, at::kLong), v.to(at::kBFloat16));
        const at::Tensor k_got = cache.k(1).view({20, 2, 8}), v_got = cache.v(1).view({20, 2, 8});
        EXPECT_EQ(0, std::memcmp(k_got.data_ptr(), k_ref.data_ptr(), k_ref.nbytes())) << id_type << gapped << in_type;
        EXPECT_EQ(0, std::memcmp(v_got.data_ptr(), v_ref.data_ptr(), v_ref.nbytes())) << id_type << gapped << in_type;
        EXPECT_TRUE(at::equal(k_got[7], k[4].to(at::kBFloat16)));  // slot 7 twice: token 4's row
      }
  KVCache cache(cfg);
  const at::Tensor k = values({2, 2, 8}, 24).to(at::kBFloat16);
  try {
    cache.set_kv(0, at::tensor(std::vector<int64_t>{3, -2}, at::kLong), k, k);
    ADD_FAILURE() << "a negative slot was accepted";
  } catch (const c10::Error &e) {
    EXPECT_NE(std::string(e.what()).find("slot_mapping holds -2, outside [0, 20)"), std::string::npos) << e.what();
  }
}

TEST(PagedMetadata, ValidInputsPass) { EXPECT_EQ(error_of(valid_inputs()), ""); }

TEST(PagedMetadata, Int64BlockTableIsRejected) {
  auto in = valid_inputs();
  in.bt = in.bt.to(at::kLong);
  const auto msg = error_of(in);
  EXPECT_NE(msg.find("block_table must be int32"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Long"), std::string::npos) << msg;
}

TEST(PagedMetadata, BlockIdOutOfRangeIsRejected) {
  auto in = valid_inputs();
  in.bt[1][1] = 99;
  const auto msg = error_of(in);
  EXPECT_NE(msg.find("block_table[1, 1] = 99"), std::string::npos) << msg;
  in = valid_inputs();
  in.bt[0][0] = -1;
  EXPECT_NE(error_of(in).find("= -1 is out of range"), std::string::npos) << error_of(in);
  // Padding past a sequence's used pages is never read, so it may hold anything.
  in = valid_inputs();
  in.bt[0][2] = 12345;
  EXPECT_EQ(error_of(in), "");
}

TEST(PagedMetadata, SeqLenBeyondTableCapacityIsRejected) {
  auto in = valid_inputs();
  in.kv[1] = 13;  // 3 blocks x 4 = 12
  const auto msg = error_of(in);
  EXPECT_NE(msg.find("seq_lens_kv[1] = 13 exceeds the block table's capacity"), std::string::npos) << msg;
}

TEST(PagedMetadata, QueryLongerThanKvIsRejected) {
  auto in = valid_inputs();
  in.kv[0] = 2;  // q_len 3
  const auto msg = error_of(in);
  EXPECT_NE(msg.find("query of 3 tokens but only 2 cached"), std::string::npos) << msg;
}

TEST(PagedMetadata, InconsistentShapesAreRejected) {
  auto in = valid_inputs();
  in.cu[2] = 5;  // T_q is 4
  EXPECT_NE(error_of(in).find("must equal the number of query rows T_q = 4"), std::string::npos) << error_of(in);
  in = valid_inputs();
  in.q = in.q.slice(1, 0, 3);  // H_q 3, H_kv 2
  EXPECT_NE(error_of(in).find("H_q (3) must be a positive multiple of H_kv (2)"), std::string::npos) << error_of(in);
  in = valid_inputs();
  in.kv = in.kv.slice(0, 0, 1);
  EXPECT_NE(error_of(in).find("seq_lens_kv must be [2]"), std::string::npos) << error_of(in);
  in = valid_inputs();
  in.v = in.v.to(at::kHalf);
  EXPECT_NE(error_of(in).find("must share a dtype"), std::string::npos) << error_of(in);
}

TEST(PagedMetadata, EveryImplValidates) {
  auto in = valid_inputs();
  in.bt = in.bt.to(at::kLong);
  OpArgs args;
  args.tensors = {in.q, in.k, in.v, in.cu, in.kv, in.bt};
  int impls = 0;
  for (const auto &i : all_impls()) {
    if (i.op != "paged_attention" || i.backend != Backend::cpu) continue;
    ++impls;
    EXPECT_THROW(i.run(args), c10::Error) << i.impl;
  }
  EXPECT_EQ(impls, 6);
}

TEST(PagedMetadata, EmptySequenceIsAllowed) {
  // q_len = 0 with kv_len = 0: a sequence with no rows (defined, contributes nothing).
  auto in = valid_inputs();
  const auto meta = make_metadata({3, 0, 1}, {5, 0, 6}, {{4, 1}, {}, {0, 5}}, 3, at::kCPU);
  const auto out =
      paged_attention_split_cpu(in.q, in.k, in.v, meta.cu_seqlens_q, meta.seq_lens_kv, meta.block_table, 0.0);
  const auto ref = paged_attention_split_cpu(in.q, in.k, in.v, in.cu, in.kv, in.bt, 0.0);
  EXPECT_TRUE(at::equal(out, ref));
}
