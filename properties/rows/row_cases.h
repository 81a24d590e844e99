// Generators of row-op cases, shared by the op definitions of properties/defs: the draws every
// row case makes (layouts, data distribution, seed, the property's slice parameters) and the
// three shape kinds of the built-in ops (matmul, reductions, token-wise ops). A definition picks
// a kind and sets its own attributes from the kind's draws; everything shrinks toward small,
// contiguous, normal-distributed cases.
#pragma once

#include "properties/defs/op_def.h"

#include <functional>
#include <string>
#include <vector>

namespace detfuzz::row_cases {

// Raw slice parameters; fitted into the case's batch by add_property_params.
struct SliceRaw {
  int64_t i, len, offset, tail;
  uint64_t perm;
  int axis_choice;  // for ops with several batch axes (bmm): 0..3
};

rc::Gen<std::string> gen_dist();
rc::Gen<std::string> gen_layout(size_t n);
rc::Gen<SliceRaw> gen_slice_raw();
CaseSpec base_case(const Target &t, std::vector<int64_t> shape, std::string layout, std::string dist, uint64_t seed);

// Whether a property compares rows of a batch (batch_slice, batch_compose, permute).
bool needs_batch(const std::string &property);
// The property's parameters (i j, o tail, perm) in terms of the case's actual batch.
void add_property_params(CaseSpec &c, const SliceRaw &r, const OpDef &def);

// mm {M,N,K}, addmm {M,N,K}, bmm {B,M,N,K}: `attributes(c, bias_rank in 1..2, scalars in 0..3)`.
struct MatmulKind {
  bool batched = false;
  size_t inputs = 2;
  std::function<void(CaseSpec &, int bias_rank, int scalars)> attributes;
};
rc::Gen<CaseSpec> gen_matmul(const Target &t, const MatmulKind &kind);

// log_softmax, mean: rank 2 or 3, the reduced dim the long one.
struct ReductionDraw {
  int rank, reduce_at;
  int64_t shown;  // reduce_at, or reduce_at - rank when drawn negative
  bool multi, keepdim, h2f;
};
rc::Gen<CaseSpec> gen_reduction(const Target &t, std::function<void(CaseSpec &, const ReductionDraw &)> attributes);

// rms_norm, silu_and_mul, rope, embedding: T tokens (the batch) and one layout code for the
// float input. `shape` makes the case's shape from the draws; `attributes` sets the rest.
struct TokenDraw {
  int64_t tokens, width, heads, half_dim, vocab;
  int eps_kind;  // 0..2
};
rc::Gen<CaseSpec> gen_tokens(const Target &t, std::function<std::vector<int64_t>(const TokenDraw &)> shape,
                             std::function<void(CaseSpec &, const TokenDraw &)> attributes = {});

}  // namespace detfuzz::row_cases
