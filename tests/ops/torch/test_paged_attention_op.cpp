// detfuzz::paged_attention and detfuzz.PagedAttentionPlan, the ops Python engines call
// (ops/torch/paged_attention_op.h): through libtorch's dispatcher they give the bits of the
// functions they wrap (the fixed-split algorithm on the CPU, the fused kernel on CUDA), the plan's
// run gives the one-call op's bits, and bad metadata is refused. Every comparison is bitwise, on
// normal-distributed data (never zeros).
#include "harness/diff.h"
#include "ops/attention/paged_attention.h"
#include "ops/torch/paged_attention_op.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <gtest/gtest.h>
#include <torch/custom_class.h>
#include <torch/torch.h>

#include <vector>

namespace detfuzz {
namespace {

using Op = at::Tensor(const at::Tensor &, const at::Tensor &, const at::Tensor &, const at::Tensor &,
                      const at::Tensor &, const at::Tensor &, double);

c10::TypedOperatorHandle<Op> paged_attention_op() {
  return c10::Dispatcher::singleton().findSchemaOrThrow("detfuzz::paged_attention", "").typed<Op>();
}

::testing::AssertionResult bitwise(const at::Tensor &expected, const at::Tensor &actual) {
  const DiffStats d = bitwise_diff(expected, actual);
  if (d.equal()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << d.summary();
}

// Two sequences, pages of 16 placed out of order: 3 new tokens over 40 keys (a chunk of a
// prefill) and one over 300 (a decode of two splits); 8 query heads over 2 KV heads of 64.
struct Batch {
  at::Tensor q, k_pool, v_pool, cu_seqlens_q, seq_lens_kv, block_table;
};
Batch make_batch(at::ScalarType dtype, const at::Device &device) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(20261127);
  const auto f32 = at::TensorOptions().dtype(at::kFloat);
  const auto i32 = at::TensorOptions().dtype(at::kInt);
  // Sequence 0 on pages 5, 1, 7; sequence 1 on the others, last to first.
  std::vector<int32_t> table(2 * 19, 0);
  table[0] = 5, table[1] = 1, table[2] = 7;
  for (int32_t page = 23, b = 0; b < 19; --page)
    if (page != 1 && page != 5 && page != 7) table[19 + b++] = page;
  Batch b;
  b.q = at::randn({4, 8, 64}, gen, f32).to(dtype).to(device);
  b.k_pool = at::randn({24, 16, 2, 64}, gen, f32).to(dtype).to(device);
  b.v_pool = at::randn({24, 16, 2, 64}, gen, f32).to(dtype).to(device);
  b.cu_seqlens_q = at::tensor(std::vector<int32_t>{0, 3, 4}, i32).to(device);
  b.seq_lens_kv = at::tensor(std::vector<int32_t>{40, 300}, i32).to(device);
  b.block_table = at::tensor(table, i32).reshape({2, 19}).to(device);
  return b;
}

TEST(PagedAttentionOp, CpuOpGivesTheFixedSplitBits) {
  for (at::ScalarType dtype : {at::kBFloat16, at::kHalf, at::kFloat}) {
    const Batch b = make_batch(dtype, at::Device(at::kCPU));
    const at::Tensor expected = attention::paged_attention_split_cpu(b.q, b.k_pool, b.v_pool, b.cu_seqlens_q,
                                                                     b.seq_lens_kv, b.block_table, 0.0);
    const at::Tensor out =
        paged_attention_op().call(b.q, b.k_pool, b.v_pool, b.cu_seqlens_q, b.seq_lens_kv, b.block_table, 0.0);
    EXPECT_TRUE(bitwise(expected, out)) << c10::toString(dtype);
    EXPECT_TRUE(out.isfinite().all().item<bool>());
    EXPECT_GT(out.abs().max().item<double>(), 0.0);
  }
}

TEST(PagedAttentionOp, BadMetadataIsRefused) {
  const Batch b = make_batch(at::kBFloat16, at::Device(at::kCPU));
  EXPECT_THROW(paged_attention_op().call(b.q, b.k_pool, b.v_pool, b.cu_seqlens_q, b.seq_lens_kv,
                                         b.block_table.to(at::kLong), 0.0),
               c10::Error);
}

#ifdef DETFUZZ_WITH_CUDA
TEST(PagedAttentionOp, PlanClassIsRegistered) {
  EXPECT_NE(torch::getCustomClass("__torch__.torch.classes.detfuzz.PagedAttentionPlan"), nullptr);
}

TEST(PagedAttentionOp, CudaOpAndPlanGiveTheKernelsBits) {
  if (!at::hasCUDA()) GTEST_SKIP() << "needs a CUDA GPU: none found";
  for (at::ScalarType dtype : {at::kBFloat16, at::kHalf}) {
    const Batch b = make_batch(dtype, at::Device(at::kCUDA, 0));
    const at::Tensor expected =
        attention::paged_attention_cuda(b.q, b.k_pool, b.v_pool, b.cu_seqlens_q, b.seq_lens_kv, b.block_table, 0.0);
    const at::Tensor out =
        paged_attention_op().call(b.q, b.k_pool, b.v_pool, b.cu_seqlens_q, b.seq_lens_kv, b.block_table, 0.0);
    EXPECT_TRUE(bitwise(expected, out)) << c10::toString(dtype);
    const auto plan = c10::make_intrusive<PagedAttentionPlanHolder>(b.q, b.k_pool, b.v_pool, b.cu_seqlens_q,
                                                                    b.seq_lens_kv, b.block_table);
    EXPECT_TRUE(bitwise(expected, plan->run(b.q, b.k_pool, b.v_pool, 0.0))) << c10::toString(dtype);
    EXPECT_TRUE(out.isfinite().all().item<bool>());
  }
}
#endif

}  // namespace
}  // namespace detfuzz
