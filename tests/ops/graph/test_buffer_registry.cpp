// The buffer registry (seed 002), as the seed's unit tests: an absent plain slot is carried as
// absent, a computed slot is exposed when the batch lacks the field, each build flag keeps the
// batch's own value, the eager registry grows to the next power of two, and no-copy wraps the
// batch's tensors.
#include "ops/graph/buffer_registry.h"
#include "ops/graph/prefill_runner.h"

#include <gtest/gtest.h>

#ifdef DETFUZZ_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

#include <cstdlib>

using namespace detfuzz;
using namespace detfuzz::graph;

namespace {

Model tiny_model() {
  ModelConfig c;
  c.vocab = 32;
  c.hidden = 16;
  c.layers = 1;
  c.q_heads = 2;
  c.kv_heads = 1;
  c.head_dim = 8;
  c.mlp = 24;
  return Model(c, Backend::cpu, invariant_kernels(Backend::cpu));
}

ForwardBatch two_sequences() {
  SequenceInput a{{3, 4, 5}, 0, {1}}, b{{7}, 2, {2}};
  return pack_batch({a, b}, 16, 4, at::kCPU);
}

TEST(BufferRegistry, AbsentPlainSlotIsCarriedAsAbsent) {
  const Model m = tiny_model();
  BufferRegistry r = build_prefill_registry(m, 4, 16, {4, true, true});
  const ForwardBatch b = two_sequences();
  ASSERT_FALSE(b.input_embeds.has_value());
  r.fill_from(b);
  const ForwardBatch v = r.extract_buffer(b.batch_size, b.num_tokens, b);
  EXPECT_FALSE(v.input_embeds.has_value()) << "a plain slot absent from the batch must not be exposed";
  ASSERT_TRUE(v.input_ids.has_value());
  EXPECT_TRUE(v.input_ids->equal(*b.input_ids));
  EXPECT_NE(v.input_ids->data_ptr(), b.input_ids->data_ptr()) << "a plain slot is a copy in the registry's buffer";
}

TEST(BufferRegistry, ComputedSlotIsExposedWhenTheBatchFieldIsAbsent) {
  const Model m = tiny_model();
  BufferRegistry r = build_prefill_registry(m, 4, 16, {4, true, true});
  ForwardBatch b = two_sequences();
  b.logits_index.reset();
  b.global_num_tokens.reset();
  r.fill_from(b);
  const ForwardBatch v = r.extract_buffer(b.batch_size, b.num_tokens, b);
  ASSERT_TRUE(v.logits_index.has_value());
  EXPECT_EQ(v.logits_index->data_ptr<int64_t>()[0], 2);
  EXPECT_EQ(v.logits_index->data_ptr<int64_t>()[1], 3);
  ASSERT_TRUE(v.global_num_tokens.has_value());
  EXPECT_EQ(v.global_num_tokens->data_ptr<int64_t>()[0], 4);
}

TEST(BufferRegistry, RegisterGlobalNumTokensFalseCarriesTheBatchValue) {
  const Model m = tiny_model();
  BufferRegistry r = build_prefill_registry(m, 4, 16, {4, false, true});
  EXPECT_FALSE(r.has("global_num_tokens"));
  ForwardBatch b = two_sequences();
  b.global_num_tokens = at::full({2}, 77, at::kLong);  // as data-parallel attention synced it
  r.fill_from(b);
  const ForwardBatch v = r.extract_buffer(b.batch_size, b.num_tokens, b);
  EXPECT_EQ(v.global_num_tokens->data_ptr(), b.global_num_tokens->data_ptr());
  EXPECT_EQ(v.global_num_tokens->data_ptr<int64_t>()[0], 77);
  // With the slot registered, the computed value (a zero-initialised buffer filled by its
  // post-fill) replaces it: the overwrite the flag exists to avoid.
  BufferRegistry with = build_prefill_registry(m, 4, 16, {4, true, true});
  with.fill_from(b);
  EXPECT_EQ(with.extract_buffer(b.batch_size, b.num_tokens, b).global_num_tokens->data_ptr<int64_t>()[0], 4);
}

TEST(BufferRegistry, RegisterInputEmbedsFalseKeepsTheBatchEmbeddings) {
  const Model m = tiny_model();
  BufferRegistry r = build_prefill_registry(m, 4, 16, {4, true, false});
  EXPECT_FALSE(r.has("input_embeds"));
  ForwardBatch b = two_sequences();
  b.input_embeds = at::ones({b.num_tokens, 16}, at::kBFloat16);
  r.fill_from(b);
  const ForwardBatch v = r.extract_buffer(b.batch_size, b.num_tokens, b);
  ASSERT_TRUE(v.input_embeds.has_value());
  EXPECT_EQ(v.input_embeds->data_ptr(), b.input_embeds->data_ptr()) << "carried from the batch, not copied";
  EXPECT_NE(v.positions->data_ptr(), b.positions->data_ptr()) << "the other slots still come from the registry";
}

TEST(BufferRegistry, OverCapacityIsAnError) {
  const Model m = tiny_model();
  BufferRegistry r = build_prefill_registry(m, 1, 2, {4, true, true});
  EXPECT_THROW(r.fill_from(two_sequences()), c10::Error);
}

TEST(EagerInputs, GrowsToTheNextPowerOfTwoAndNoCopyWraps) {
  const Model m = tiny_model();
  EagerInputs in(m, 4, false);
  EXPECT_EQ(in.capacity_bs(), 0);
  const ForwardBatch b = two_sequences();  // 2 sequences, 4 tokens
  const ForwardBatch v = in.view(b);
  EXPECT_EQ(in.capacity_bs(), 2);
  EXPECT_EQ(in.capacity_tokens(), 4);
  EXPECT_TRUE(v.positions->equal(*b.positions));
  SequenceInput a{{1, 2, 3, 4, 5}, 0, {1}}, c{{6}, 0, {2}}, d{{7}, 0, {3}};
  in.view(pack_batch({a, c, d}, 16, 4, at::kCPU));  // 3 sequences, 7 tokens
  EXPECT_EQ(in.capacity_bs(), 4);
  EXPECT_EQ(in.capacity_tokens(), 8);
  in.view(b);  // fits: no shrink
  EXPECT_EQ(in.capacity_tokens(), 8);

  EagerInputs nc(m, 4, true);
  const ForwardBatch w = nc.view(b);
  EXPECT_EQ(w.input_ids->data_ptr(), b.input_ids->data_ptr());
  EXPECT_EQ(nc.capacity_bs(), 0) << "no-copy builds no registry";
}

TEST(EagerInputs, NoCopyFromTheEnvironment) {
  ::unsetenv("DETFUZZ_EAGER_INPUT_NO_COPY");
  EXPECT_FALSE(eager_input_no_copy_from_env());
  ::setenv("DETFUZZ_EAGER_INPUT_NO_COPY", "1", 1);
  EXPECT_TRUE(eager_input_no_copy_from_env());
  ::setenv("DETFUZZ_EAGER_INPUT_NO_COPY", "0", 1);
  EXPECT_FALSE(eager_input_no_copy_from_env());
  ::unsetenv("DETFUZZ_EAGER_INPUT_NO_COPY");
}

#ifdef DETFUZZ_WITH_CUDA
// On CUDA the slots are filled in one launch, host fields through one staged copy: after each of
// three batches, given once on the device and once on the host, every slot must hold what a CPU
// registry holds after the same batch, including the block-table columns a narrower batch leaves
// (zeroed), the computed slots (logits_index, global_num_tokens), and fields that take copy_
// instead (another dtype, a strided view).
TEST(BufferRegistryCuda, OneLaunchFillsAsTheCpuDoes) {
  if (!at::cuda::is_available()) GTEST_SKIP() << "needs a CUDA GPU: none found";
  const Model cpu_model = tiny_model();
  const Model cuda_model(cpu_model.config(), Backend::cuda, invariant_kernels(Backend::cuda));
  BufferRegistry gpu = build_prefill_registry(cuda_model, 4, 16, {6, true, true});
  BufferRegistry cpu = build_prefill_registry(cpu_model, 4, 16, {6, true, true});
  const SequenceInput a{{3, 4, 5, 6, 7}, 0, {1, 5, 2}}, b{{7}, 2, {2}}, c{{9, 10}, 0, {3}};
  const ForwardBatch wide = pack_batch({a, b, c}, 4, 6, at::kCPU);
  const ForwardBatch narrow = pack_batch({b, c}, 4, 2, at::kCPU);
  ForwardBatch odd = pack_batch({c, a}, 4, 3, at::kCPU);
  odd.input_ids = odd.input_ids->to(at::kInt);
  odd.positions = at::stack({*odd.positions, *odd.positions * 3}, 1).select(1, 0);
  ASSERT_FALSE(odd.positions->is_contiguous());
  const std::vector<std::string> names = {"input_ids", "positions",   "out_cache_loc", "cu_seqlens_q",
                                          "seq_lens",  "block_table", "logits_index",  "global_num_tokens"};
  for (const ForwardBatch *batch : std::vector<const ForwardBatch *>{&wide, &narrow, &odd}) {
    ForwardBatch on_gpu = *batch;
    for (const auto &name : names)
      if (auto &field = batch_field(on_gpu, name)) field = field->cuda();
    cpu.fill_from(*batch);
    const ForwardBatch h = cpu.extract_buffer(batch->batch_size, batch->num_tokens, *batch);
    for (const ForwardBatch *given : std::vector<const ForwardBatch *>{&on_gpu, batch}) {
      gpu.fill_from(*given);
      const ForwardBatch g = gpu.extract_buffer(batch->batch_size, batch->num_tokens, *given);
      for (const auto &name : names) {
        ASSERT_TRUE(batch_field(g, name).has_value() && batch_field(h, name).has_value()) << name;
        EXPECT_TRUE(batch_field(g, name)->cpu().equal(*batch_field(h, name)))
            << name << " after the batch of " << batch->batch_size << " sequences, given on the "
            << (given == batch ? "host" : "device");
      }
    }
  }
}
#endif

}  // namespace
