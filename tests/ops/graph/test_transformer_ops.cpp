// The transformer's row and element-wise ops (rms_norm, silu_and_mul, rope, embedding) on the
// CPU: accuracy against the float64 reference on non-zero data, a row's bits alone vs inside a
// batch, edge shapes, and one-line errors for bad input. On CUDA (gpu label): the same ops
// against the reference, rms_norm bit for bit equal to the CPU spec, silu_and_mul's 16-byte pieces
// equal to its element-by-element form, rope with the KV cache write in one launch bit for bit
// equal to rope and set_kv, and short products reading what the kernel before them wrote.
#include "ops/cpu/cpu_ops.h"
#include "properties/accuracy.h"
#include "ops/registry.h"
#include "properties/data.h"
#ifdef DETFUZZ_WITH_CUDA
#include "ops/attention/kv_cache.h"
#include "ops/cuda/cuda_ops.h"

#include <ATen/cuda/CUDAContext.h>
#endif

#include <gtest/gtest.h>

using namespace detfuzz;

namespace {

bool bitwise_equal(const at::Tensor &a, const at::Tensor &b) {
  if (!a.sizes().equals(b.sizes()) || a.scalar_type() != b.scalar_type()) return false;
  const at::Tensor ac = a.cpu().contiguous(), bc = b.cpu().contiguous();
  return std::memcmp(ac.data_ptr(), bc.data_ptr(), ac.nbytes()) == 0;
}

at::Tensor data(at::IntArrayRef sizes, at::ScalarType dtype, uint64_t seed) {
  return make_values(seed, 0, sizes, dtype, "normal");
}

at::Tensor ids(int64_t n, int64_t range, uint64_t seed) {
  at::Tensor v = at::empty({n}, at::kLong);
  for (int64_t i = 0; i < n; ++i) v.data_ptr<int64_t>()[i] = static_cast<int64_t>(counter_bits(seed, 9, i) % range);
  return v;
}

void expect_accurate(const std::string &op, const OpArgs &args, const at::Tensor &out) {
  OpArgs host = args;
  for (auto &t : host.tensors) t = t.cpu();
  const AccuracyResult r = check_accuracy(op, host, out.cpu());
  EXPECT_TRUE(r.ok) << r.detail;
}

OpArgs args_of(std::vector<at::Tensor> t) {
  OpArgs a;
  a.tensors = std::move(t);
  return a;
}

const std::vector<at::ScalarType> kDtypes = {at::kFloat, at::kHalf, at::kBFloat16};

TEST(TransformerOpsCpu, RmsNormMatchesReferenceOnEdgeWidths) {
  for (at::ScalarType dt : kDtypes)
    for (int64_t h : {1, 7, 63, 64, 65, 1000, 131073}) {
      const int64_t rows = h > 10000 ? 2 : 5;
      const at::Tensor x = data({rows, h}, dt, h), w = make_values(h + 1, 1, {h}, dt, "normal");
      expect_accurate("rms_norm", args_of({x, w}), cpu_ops::rms_norm(x, w, 1e-6));
    }
}

TEST(TransformerOpsCpu, SiluAndMulRopeEmbeddingMatchReference) {
  for (at::ScalarType dt : kDtypes) {
    const at::Tensor x = data({9, 2 * 33}, dt, 1);
    expect_accurate("silu_and_mul", args_of({x}), cpu_ops::silu_and_mul(x));
    const at::Tensor q = data({11, 3, 64}, dt, 2), pos = ids(11, 4096, 3);
    OpArgs ra = args_of({q, pos});
    expect_accurate("rope", ra, cpu_ops::rope(q, pos, ra.theta));
    const at::Tensor table = data({50, 24}, dt, 4), tok = ids(13, 50, 5);
    EXPECT_TRUE(bitwise_equal(cpu_ops::embedding(table, tok), table.index_select(0, tok)));
  }
}

TEST(TransformerOpsCpu, RowsKeepTheirBitsInAnyBatch) {
  const at::Tensor x = data({37, 129}, at::kBFloat16, 7), w = data({129}, at::kBFloat16, 8);
  const at::Tensor whole = cpu_ops::rms_norm(x, w, 1e-5);
  const at::Tensor gu = data({37, 2 * 129}, at::kBFloat16, 9);
  const at::Tensor silu = cpu_ops::silu_and_mul(gu);
  const at::Tensor q = data({37, 2, 16}, at::kHalf, 10), pos = ids(37, 4096, 11);
  const at::Tensor roped = cpu_ops::rope(q, pos, 10000.0);
  for (int64_t i : {0, 5, 36})
    for (int64_t n : {1, 3}) {
      if (i + n > 37) continue;
      EXPECT_TRUE(bitwise_equal(cpu_ops::rms_norm(x.narrow(0, i, n), w, 1e-5), whole.narrow(0, i, n)));
      EXPECT_TRUE(bitwise_equal(cpu_ops::silu_and_mul(gu.narrow(0, i, n)), silu.narrow(0, i, n)));
      EXPECT_TRUE(bitwise_equal(cpu_ops::rope(q.narrow(0, i, n), pos.narrow(0, i, n), 10000.0), roped.narrow(0, i, n)));
    }
}

TEST(TransformerOpsCpu, BadInputIsAnErrorNamingTheValue) {
  const at::Tensor x = data({2, 8}, at::kFloat, 1);
  EXPECT_THROW(cpu_ops::rms_norm(x, data({7}, at::kFloat, 2), 1e-6), c10::Error);
  EXPECT_THROW(cpu_ops::rms_norm(x, data({8}, at::kFloat, 2), -1.0), c10::Error);
  EXPECT_THROW(cpu_ops::silu_and_mul(data({2, 7}, at::kFloat, 3)), c10::Error);
  EXPECT_THROW(cpu_ops::rope(data({2, 1, 7}, at::kFloat, 4), ids(2, 10, 1), 10000.0), c10::Error);
  EXPECT_THROW(cpu_ops::rope(data({2, 1, 8}, at::kFloat, 4), ids(3, 10, 1), 10000.0), c10::Error);
  EXPECT_THROW(cpu_ops::rms_norm(x.to(at::kInt), data({8}, at::kInt, 2), 1e-6), c10::Error);
  at::Tensor bad = ids(4, 10, 2);
  bad[2] = 10;
  try {
    cpu_ops::embedding(data({10, 4}, at::kFloat, 5), bad);
    FAIL() << "an id outside the vocabulary was accepted";
  } catch (const c10::Error &e) {
    EXPECT_NE(std::string(e.what_without_backtrace()).find("ids[2] = 10"), std::string::npos)
        << e.what_without_backtrace();
  }
}

#ifdef DETFUZZ_WITH_CUDA
#define NEED_GPU() \
  if (!at::cuda::is_available()) GTEST_SKIP() << "needs a CUDA GPU: none found"

TEST(TransformerOpsCuda, MatchTheReferenceAndRmsNormMatchesTheCpuBits) {
  NEED_GPU();
  for (at::ScalarType dt : kDtypes) {
    for (int64_t h : {1, 65, 200, 4096, 131073}) {  // 200: 16-byte pieces and a partial block
      const at::Tensor x = data({3, h}, dt, h), w = make_values(h + 1, 1, {h}, dt, "normal");
      const at::Tensor out = cuda_ops::rms_norm(x.cuda(), w.cuda(), 1e-6);
      expect_accurate("rms_norm", args_of({x, w}), out);
      EXPECT_TRUE(bitwise_equal(out, cpu_ops::rms_norm(x, w, 1e-6))) << "H=" << h;
    }
    const at::Tensor gu = data({9, 66}, dt, 1);
    expect_accurate("silu_and_mul", args_of({gu}), cuda_ops::silu_and_mul(gu.cuda()));
    const at::Tensor q = data({11, 3, 128}, dt, 2), pos = ids(11, 4096, 3);
    OpArgs ra = args_of({q, pos});
    expect_accurate("rope", ra, cuda_ops::rope(q.cuda(), pos.cuda(), ra.theta));
    const at::Tensor table = data({50, 24}, dt, 4), tok = ids(13, 50, 5);
    EXPECT_TRUE(bitwise_equal(cuda_ops::embedding(table.cuda(), tok.cuda()), table.index_select(0, tok)));
  }
}

// rope_store_kv reads a QKV product's rows in place and writes Q, and K and V at scattered slots of
// NaN-filled pools: the bits of rope on Q, rope on K and set_kv, slot for slot, the slots nothing
// wrote still NaN.
TEST(TransformerOpsCuda, RopeStoreKvGivesTheBitsOfRopeAndSetKv) {
  NEED_GPU();
  for (at::ScalarType dt : kDtypes) {
    const int64_t t = 13, qh = 4, kvh = 2, d = 64, theta = 10000;
    attention::KVCacheConfig cfg;
    cfg.num_blocks = 8;
    cfg.block_size = 4;
    cfg.num_kv_heads = kvh;
    cfg.head_dim = d;
    cfg.dtype = dt;
    cfg.device = at::kCUDA;
    attention::KVCache apart(cfg);
    attention::KVCache fused = apart.clone();
    const at::Tensor qkv = data({t, (qh + 2 * kvh) * d}, dt, 9).cuda(), pos = ids(t, 4096, 6).cuda();
    at::Tensor slots = at::empty({t}, at::kLong);
    for (int64_t i = 0; i < t; ++i) slots.data_ptr<int64_t>()[i] = (7 * i + 3) % 32;  // distinct, out of order
    slots = slots.cuda();
    const at::Tensor q = cuda_ops::rope(qkv.narrow(1, 0, qh * d).reshape({t, qh, d}), pos, theta);
    apart.set_kv(0, slots, cuda_ops::rope(qkv.narrow(1, qh * d, kvh * d).reshape({t, kvh, d}), pos, theta),
                 qkv.narrow(1, (qh + kvh) * d, kvh * d).reshape({t, kvh, d}));
    fused.check_slots(slots);
    const at::Tensor fq = cuda_ops::rope_store_kv(qkv, pos, theta, qh, kvh, slots, fused.k(0), fused.v(0));
    EXPECT_TRUE(bitwise_equal(fq, q)) << dt;
    EXPECT_TRUE(bitwise_equal(fused.k(0), apart.k(0))) << dt;
    EXPECT_TRUE(bitwise_equal(fused.v(0), apart.v(0))) << dt;
  }
}

// silu_and_mul in 16-byte pieces (aligned rows whose width allows them) gives each element the bits
// it gets element by element (the same rows at an address 2 bytes off).
TEST(TransformerOpsCuda, SiluAndMulGivesTheSameBitsInPiecesAndByElement) {
  NEED_GPU();
  for (at::ScalarType dt : kDtypes) {
    const int64_t rows = 5, i = 4096;
    const at::Tensor gu = data({rows, 2 * i}, dt, 21).cuda();
    const at::Tensor off = at::empty({rows * 2 * i + 1}, gu.options()).narrow(0, 1, rows * 2 * i).view({rows, 2 * i});
    off.copy_(gu);
    ASSERT_NE(reinterpret_cast<uintptr_t>(off.data_ptr()) % 16, 0u);
    EXPECT_TRUE(bitwise_equal(cuda_ops::silu_and_mul(gu), cuda_ops::silu_and_mul(off))) << dt;
  }
}

// A short product starts while the kernel before it still runs (a programmatic dependent,
// gemm_sm90.cu): where that kernel writes B itself, the product still reads what it wrote, even
// where B's memory held NaN just before.
TEST(TransformerOpsCuda, AProductReadsTheBTheKernelBeforeItWrote) {
  NEED_GPU();
  const int64_t k = 4096, n = 4096;
  const at::Tensor src = data({k, n}, at::kBFloat16, 11).cuda();
  const at::Tensor w = make_values(12, 1, {n}, at::kBFloat16, "normal").cuda();
  const at::Tensor a = data({16, k}, at::kBFloat16, 13).cuda();
  const at::Tensor b = cuda_ops::rms_norm(src, w, 1e-6);
  at::cuda::device_synchronize();
  const at::Tensor apart = cuda_ops::mm(a, b);
  at::cuda::device_synchronize();
  for (int round = 0; round < 3; ++round) {
    at::full({k, n}, NAN, b.options());  // freed at once: the next rms_norm's rows likely reuse it
    const at::Tensor chained = cuda_ops::mm(a, cuda_ops::rms_norm(src, w, 1e-6));
    EXPECT_TRUE(bitwise_equal(chained, apart)) << "round " << round;
  }
}

// A short product starts while the rms_norm before it still runs (a programmatic dependent,
// gemm_sm90.cu) and must still read the rows it writes: the same bits as with the GPU idle in
// between, even where the rows' memory held NaN just before.
TEST(TransformerOpsCuda, AProductReadsWhatTheRmsNormBeforeItWrote) {
  NEED_GPU();
  const int64_t k = 65536;  // long rows: the rms_norm runs for a while
  const at::Tensor w = make_values(7, 1, {k}, at::kBFloat16, "normal").cuda();
  const at::Tensor b = data({k, 64}, at::kBFloat16, 8).cuda();
  for (int64_t m : {16, 256}) {
    const at::Tensor x = data({m, k}, at::kBFloat16, m).cuda();
    const at::Tensor normed = cuda_ops::rms_norm(x, w, 1e-6);
    at::cuda::device_synchronize();
    const at::Tensor apart = cuda_ops::mm(normed, b);
    at::cuda::device_synchronize();
    at::full({m, k}, NAN, x.options());  // freed at once: the next rms_norm's rows likely reuse it
    const at::Tensor chained = cuda_ops::mm(cuda_ops::rms_norm(x, w, 1e-6), b);
    EXPECT_TRUE(bitwise_equal(chained, apart)) << "M=" << m;
  }
}
#endif

}  // namespace
