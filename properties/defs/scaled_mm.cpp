// scaled_mm: out[M, N] = (a * sa) @ (b * sb) + bias, a [M, K] and b [K, N] in float8 e4m3fn,
// float32 scales by the case's `scale` (tensor: [1] and [1]; channel: [M, 1] and [1, N]; block:
// [M, K/128] and [K/128, N/128], 1 x 128 activation and 128 x 128 weight blocks as DeepSeek-V3
// checkpoints ship them), `bias=1` adds bias [N]; the output has the case's dtype. The batch is
// the rows of a (and of sa, where it has rows).
//
// Accuracy. The reference dequantises in float64 and multiplies exactly (per element,
// A[i,k] = a[i,k] sa(i,k), B[k,j] = b[k,j] sb(k,j)). In the kernel, with u = 2^-24:
//  - a product of two e4m3 values is exact in float32 (4 + 4 significand bits <= 24);
//  - a block partial over L = min(K, 128) products is a float32 sum from zero: each product
//    passes at most L - 1 roundings;
//  - the block's scale sa * sb is one rounding, the partial times it one more;
//  - the nb = ceil(K/128) scaled partials are added in K order (nb - 1 roundings after the first);
//  - the bias add is one rounding.
// So each term a_ik b_kj sa sb carries at most L + nb + 1 roundings, the bias one:
//   (L + nb + 2) u sum_k |A_ik||B_kj| + u |bias_j| + (nb + 2) tiny
// (first order, with one rounding to spare for the second-order terms; tiny covers a scaled
// partial that underflows). Unbounded where the magnitude could overflow a float32 accumulator.
//
// The contract also lets a block partial come from Hopper's fp8 tensor core (wgmma k32 over the
// block, ops/cuda/scaled_mm_sm90.cu), whose accumulation is narrower than float32. Its model: an
// instruction adds 32 products to the block's running partial by aligning the 33 terms to the
// largest and truncating each below 13 fraction bits of it (DeepSeek-V3 measured about 14 bits
// kept), then normalises to float32 (one rounding). So instruction g of a block, with R_g the
// exact running partial before it and S_g its exact sum, errs by at most
//   33 * 2^-13 * max(|R_g|, max_{k in g} |A_ik||B_kj|) + u |R_g + S_g|
// (first order; within a block the scales are one factor, so the dequantised products stand in
// for the raw ones). The bound adds this over every instruction of every block:
//   core = (L + nb + 2) u sum_k |A_ik||B_kj| + sum_g tc_g + u |bias_j| + (nb + 2) tiny.
// It also bounds a float32 block sum (any order), more loosely: the accuracy property catches a
// wrong scale, index, block or bias, not a lost last bit.
#include "ops/cpu/moe.h"
#include "properties/defs/defs.h"

#include <algorithm>

namespace detfuzz {
namespace {

cpu_ops::ScaleMode mode_of(const CaseSpec &c) { return cpu_ops::scale_mode_from_string(c.param("scale", "tensor")); }

bool has_bias(const CaseSpec &c) {
  const std::string b = c.param("bias", "0");
  if (b != "0" && b != "1") throw std::invalid_argument("scaled_mm: bias=" + b + " must be 0 or 1");
  return b == "1";
}

// The scale of every element of a [rows, cols] operand, float64: `scale` broadcast over its
// (block) grid. Scales of 1 element, of one per row, one per column, or one per 128-block.
at::Tensor expand_scale(const at::Tensor &scale, int64_t rows, int64_t cols, int64_t row_block, int64_t col_block) {
  at::Tensor s = defs::f64(scale);
  if (s.dim() == 1) return s.reshape({1, 1}).expand({rows, cols});
  s = s.repeat_interleave(row_block, 0).repeat_interleave(col_block, 1);
  return s.narrow(0, 0, rows).narrow(1, 0, cols);
}

// The dequantised operands, float64, by the scale mode of the case's parameters.
std::pair<at::Tensor, at::Tensor> dequantised(const OpArgs &a) {
  const at::Tensor &qa = a.tensors.at(0), &qb = a.tensors.at(1), &sa = a.tensors.at(2), &sb = a.tensors.at(3);
  const int64_t m = qa.size(0), k = qa.size(1), n = qb.size(1), blk = cpu_ops::kFp8Block;
  const auto it = a.params.find("scale");
  const auto mode = cpu_ops::scale_mode_from_string(it == a.params.end() ? "tensor" : it->second);
  at::Tensor sa_full, sb_full;
  switch (mode) {
    case cpu_ops::ScaleMode::tensor:
      sa_full = expand_scale(sa, m, k, 1, 1);
      sb_full = expand_scale(sb, k, n, 1, 1);
      break;
    case cpu_ops::ScaleMode::channel:
      sa_full = expand_scale(sa, m, k, 1, k);
      sb_full = expand_scale(sb, k, n, k, 1);
      break;
    default: sa_full = expand_scale(sa, m, k, 1, blk); sb_full = expand_scale(sb, k, n, blk, blk);
  }
  return {defs::f64(qa) * sa_full, defs::f64(qb) * sb_full};
}

at::Tensor bias_f64(const OpArgs &a, int64_t n) {
  return a.tensors.size() == 5 ? defs::f64(a.tensors[4]).reshape({1, n}) : at::zeros({1, n}, at::kDouble);
}

// sum_g tc_g of the accuracy note above: the fp8 tensor core's truncation, per k32 instruction of
// each 128-wide block, from the exact running partial and the instruction's largest product.
at::Tensor tensor_core_term(const at::Tensor &A, const at::Tensor &B) {
  const int64_t k = A.size(1), group = 32;
  at::Tensor term = at::zeros({A.size(0), B.size(1)}, at::kDouble);
  for (int64_t b0 = 0; b0 < k; b0 += cpu_ops::kFp8Block) {
    at::Tensor running = at::zeros_like(term);
    for (int64_t g0 = b0; g0 < std::min(k, b0 + cpu_ops::kFp8Block); g0 += group) {
      const int64_t len = std::min({group, k - g0, b0 + cpu_ops::kFp8Block - g0});
      const at::Tensor ag = A.narrow(1, g0, len), bg = B.narrow(0, g0, len);
      const at::Tensor largest_product = (ag.abs().unsqueeze(2) * bg.abs().unsqueeze(0)).amax(1);
      const at::Tensor sum = at::mm(ag, bg);
      term += at::maximum(running.abs(), largest_product) * (33 * 0x1p-13) + (running + sum).abs() * kUnitRoundoffF32;
      running += sum;
    }
  }
  return term;
}

// The bench: the matmul shapes with per-tensor scales, then again with block scales (variant
// "block": 1 x 128 activations, 128 x 128 weights); no bias, the output in the bench's dtype, b
// column-major (a [N, K] weight's transpose: what cuBLASLt's fp8 GEMM and the Hopper kernel both
// read without a copy), against at::_scaled_mm (block-wise: _scaled_mm_v2, where cuBLASLt has it).
BenchDef bench() {
  BenchDef b;
  b.shapes = defs::matmul_bench_shapes("scaled_mm");
  for (BenchShape s : defs::matmul_bench_shapes("scaled_mm")) {
    s.variant = "block";
    b.shapes.push_back(s);
  }
  b.uses_k = true;
  b.variants = {"block"};
  b.baseline = "torch-scaled-mm";
  b.args = [](const BenchShape &s, at::ScalarType dtype, at::Generator &gen) {
    const auto opts = at::TensorOptions().device(at::kCUDA).dtype(at::kFloat);
    const bool block = s.variant == "block";
    const auto mode = block ? cpu_ops::ScaleMode::block : cpu_ops::ScaleMode::tensor;
    OpArgs a;
    a.tensors = {at::randn({s.m, s.k}, gen, opts).to(at::kFloat8_e4m3fn),
                 at::randn({s.n, s.k}, gen, opts).to(at::kFloat8_e4m3fn).t(),
                 at::rand(cpu_ops::scale_a_sizes(mode, s.m, s.k), gen, opts) * 0.02 + 0.01,
                 at::rand(cpu_ops::scale_b_sizes(mode, s.k, s.n), gen, opts) * 0.02 + 0.01};
    a.params = {{"scale", block ? "block" : "tensor"}, {"bias", "0"}};
    a.out_dtype = dtype;
    return a;
  };
  b.flops = [](const BenchShape &s) { return 2.0 * s.m * s.n * s.k; };
  b.bytes = [](const BenchShape &s, at::ScalarType dtype) {
    return static_cast<double>(s.m * s.k + s.k * s.n) + static_cast<double>(c10::elementSize(dtype)) * s.m * s.n;
  };
  b.input_bytes = [](const BenchShape &s, at::ScalarType) { return static_cast<double>(s.m * s.k + s.k * s.n); };
  b.against_copy = [](const BenchShape &s) { return s.m <= 32; };
  // a, and block scales' scale_a (one row per row of a).
  b.batch_inputs = [](const BenchShape &s) {
    return s.variant == "block" ? std::vector<size_t>{0, 2} : std::vector<size_t>{0};
  };
  return b;
}

}  // namespace

OpDef scaled_mm_def() {
  OpDef d;
  d.name = "scaled_mm";
  d.size_names = {"M", "N", "K"};
  d.input_sizes = [](const CaseSpec &c) {
    defs::need_rank(c, 3, 3);
    const int64_t m = c.shape[0], n = c.shape[1], k = c.shape[2];
    const auto mode = mode_of(c);
    std::vector<std::vector<int64_t>> sizes = {
        {m, k}, {k, n}, cpu_ops::scale_a_sizes(mode, m, k), cpu_ops::scale_b_sizes(mode, k, n)};
    if (has_bias(c)) sizes.push_back({n});
    return sizes;
  };
  d.output_sizes = [](const CaseSpec &c) { return std::vector<int64_t>{c.shape[0], c.shape[1]}; };
  d.batch_axis = [](const CaseSpec &c) {
    if (mode_of(c) == cpu_ops::ScaleMode::tensor) return BatchAxis{{{0, 0}}, 0, c.shape[0]};
    return BatchAxis{{{0, 0}, {2, 0}}, 0, c.shape[0]};
  };
  d.input_dtype = [](size_t t) -> std::optional<at::ScalarType> {
    if (t < 2) return at::kFloat8_e4m3fn;
    if (t < 4) return at::kFloat;
    return std::nullopt;  // bias: the output's dtype
  };
  d.read_attributes = [](const CaseSpec &c, OpArgs &a) { a.out_dtype = c.dtype; };
  d.gen = [](const Target &t) {
    const OpDef def = *find_op_def(t.op);
    const SizeLimits lim = size_limits(t.backend);
    return rc::gen::apply(
        [t, def](int64_t m, int64_t n, int64_t k, std::string scale, bool bias, std::string layout, std::string dist,
                 uint64_t seed, row_cases::SliceRaw raw) {
          CaseSpec c = row_cases::base_case(t, {m, n, k}, layout + (bias ? "ccc" : "cc"), dist, seed);
          c.params["scale"] = scale;
          c.params["bias"] = bias ? "1" : "0";
          row_cases::add_property_params(c, raw, def);
          return c;
        },
        // K reaches past a few 128-blocks; M and N stay small on the CPU.
        gen_dim(1, lim.rows / 4), gen_dim(1, lim.cols / 4), gen_dim(0, 3 * cpu_ops::kFp8Block + 40),
        shrinking_choice<std::string>({{2, "tensor"}, {1, "channel"}, {2, "block"}}), rc::gen::arbitrary<bool>(),
        row_cases::gen_layout(2), shrinking_choice<std::string>({{5, "normal"}, {2, "uniform"}, {1, "linspace"}}),
        rc::gen::inRange<uint64_t>(0, 1ull << 48), row_cases::gen_slice_raw());
  };
  d.reference = [](const OpArgs &a) {
    const auto [A, B] = dequantised(a);
    return at::mm(A, B) + bias_f64(a, B.size(1));
  };
  d.core_bound = [](const OpArgs &a) {
    const auto [A, B] = dequantised(a);
    const int64_t k = A.size(1), n = B.size(1);
    const double l = static_cast<double>(std::min<int64_t>(k, cpu_ops::kFp8Block));
    const double nb = static_cast<double>((k + cpu_ops::kFp8Block - 1) / cpu_ops::kFp8Block);
    const at::Tensor magnitude = at::mm(A.abs(), B.abs());
    const at::Tensor core = magnitude * ((l + nb + 2) * kUnitRoundoffF32) + tensor_core_term(A, B) +
                            bias_f64(a, n).abs() * kUnitRoundoffF32 + (nb + 2) * kTinyF32;
    return unbounded_where_huge(magnitude, core);
  };
  d.out_dtype = [](const OpArgs &a) { return a.out_dtype.value_or(at::kBFloat16); };
  d.bench = bench();
  return d;
}

}  // namespace detfuzz
