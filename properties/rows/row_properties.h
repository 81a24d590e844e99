// The row properties, on op definitions (properties/defs): the built-in row ops and every op of a
// spec file share this one implementation.
//
//   batch_slice    op(x[i:j]) == op(x)[i:j]                     (random i < j, not only row 0)
//   batch_compose  rows x[i:j] placed at offset o of a new batch whose other rows are fresh data
//                  (and whose size differs) give the same bits as op(x)[i:j]
//   permute        op(x[perm]) == op(x)[perm]
//   repeat         two runs give the same bits (on CUDA the second on another stream)
//   variant_agree  the same values in another layout (contiguous copies) give the same bits; on
//                  CUDA also a CUDA-graph replay (ops whose definition allows it) and every kernel
//                  path the impl declares (ImplInfo::variants) vs the automatic choice
//   accuracy       within the bound of the definition's float64 reference (properties/accuracy.h)
//
// An op without a batch (a spec with no batch=) has only repeat and variant_agree; an op without
// a reference has no accuracy.
#pragma once

#include "properties/defs/op_def.h"
#include "properties/verdict.h"

#include <optional>
#include <string>
#include <vector>

namespace detfuzz {

const std::vector<std::string> &row_properties();  // the whole catalogue, in order
// The properties that apply to `def`.
std::vector<std::string> row_properties_of(const OpDef &def);

// The definition of a case's op; throws std::invalid_argument for an unknown op.
const OpDef &op_def_of(const std::string &op);
// The impl of a row op: from the registry, or a spec op's dispatcher impl; nullopt when unknown.
std::optional<ImplInfo> row_impl(const OpDef &def, const std::string &impl, Backend backend);

// Input sizes of a case, in OpArgs order; throws std::invalid_argument if the case's shape or
// parameters do not fit the op.
std::vector<std::vector<int64_t>> row_input_sizes(const CaseSpec &c);
BatchAxis row_batch_axis(const CaseSpec &c);
// The case's inputs on its backend, in its layouts, with its attributes.
OpArgs make_row_args(const CaseSpec &c);

// Cases of a target: the definition's generator, after checking that the target fits it.
rc::Gen<CaseSpec> gen_row_case(const Target &t);
// Checks c.property for c.impl on the case. Failures of the op become Verdict::error; throws
// std::invalid_argument when the case itself is malformed (unknown impl, bad params).
Verdict check_row_case(const CaseSpec &c);

}  // namespace detfuzz
