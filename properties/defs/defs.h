// What the definition files of this folder share: the built-in definitions (one function each,
// registered in defs.cpp) and helpers for their bounds and bench shapes.
#pragma once

#include "properties/accuracy.h"
#include "properties/defs/op_def.h"
#include "properties/rows/row_cases.h"

#include <stdexcept>
#include <string>
#include <vector>

namespace detfuzz {

// Every built-in row op, in catalogue order.
std::vector<OpDef> builtin_op_defs();

OpDef mm_def();
OpDef addmm_def();
OpDef bmm_def();
OpDef log_softmax_def();
OpDef mean_def();
OpDef rms_norm_def();
OpDef silu_and_mul_def();
OpDef rope_def();
OpDef embedding_def();
OpDef scaled_mm_def();
OpDef fused_moe_def();  // fused_moe.cpp, with fused_moe_fp8_def
OpDef fused_moe_fp8_def();

namespace defs {

// mm's or bmm's core bound: (K + 2) u sum_k |a_ik||b_kj| + (K + 2) tiny, unbounded where huge.
at::Tensor matmul_core(const at::Tensor &a, const at::Tensor &b, bool batched);
// The batch axis of a reduction over `reduced` (normalised dims): the first dim not reduced;
// `drop_reduced`: the output loses the reduced dims (mean without keepdim). Throws when every
// dim is reduced.
BatchAxis first_unreduced_axis(const CaseSpec &c, const std::vector<int64_t> &reduced, bool drop_reduced);
// mm's bench: the 42 LLM shapes (N, K of Llama-class layers; M 1 to 8192) against cuBLAS.
BenchDef matmul_bench();
// The matmul bench's 42 shapes for `op`: (N, K) in {(4096,4096), (14336,4096), (4096,14336),
// (1024,8192), (6144,4096), (128256,4096)} x M in {1, 8, 32, 128, 512, 2048, 8192}.
std::vector<BenchShape> matmul_bench_shapes(const std::string &op);
// A row reduction's bench (log_softmax, mean over the last dim of [rows, cols]) against torch;
// `reduces_to_rows`: one value per row comes out.
BenchDef row_reduction_bench(const std::string &op, bool reduces_to_rows);

}  // namespace defs
}  // namespace detfuzz
