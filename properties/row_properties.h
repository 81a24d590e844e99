// Row properties of the row ops (mm, addmm, bmm, log_softmax, mean): how a case becomes OpArgs,
// which argument dimensions are "the batch", and the bitwise checks of the catalogue.
//
//   batch_slice    op(x[i:j]) == op(x)[i:j]                     (random i < j, not only row 0)
//   batch_compose  rows x[i:j] placed at offset o of a new batch whose other rows are fresh data
//                  (and whose size differs) give the same bits as op(x)[i:j]
//   permute        op(x[perm]) == op(x)[perm]
//   repeat         two runs give the same bits (on CUDA the second on another stream)
//   variant_agree  the same values in another layout (contiguous copies) give the same bits;
//                  on CUDA also a CUDA-graph replay vs the eager run
//   accuracy       within a per-dtype bound of a float64 reference (ops/reference.h)
#pragma once

#include "properties/case.h"
#include "properties/verdict.h"

#include <string>
#include <utility>
#include <vector>

namespace detfuzz {

const std::vector<std::string> &row_properties();
bool is_row_op(const std::string &op);

// Where the batch lives in a row-op case.
struct BatchAxis {
  std::vector<std::pair<int, int>> inputs;  // (tensor index in OpArgs, dim) sliced together
  int out_dim = 0;                          // the matching dim of the output
  int64_t size = 0;                         // the batch size of the case
};

// Input sizes of a case, in OpArgs order; throws std::invalid_argument if the case's shape or
// parameters do not fit the op.
std::vector<std::vector<int64_t>> row_input_sizes(const CaseSpec &c);
BatchAxis row_batch_axis(const CaseSpec &c);
// The case's inputs on its backend, in its layouts, with its attributes.
OpArgs make_row_args(const CaseSpec &c);

// Checks c.property for c.impl on the case. Exceptions from the impl become Verdict::error.
// Throws std::invalid_argument when the case itself is malformed (unknown impl, bad params).
Verdict check_row_case(const CaseSpec &c);

}  // namespace detfuzz
