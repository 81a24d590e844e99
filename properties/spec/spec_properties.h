// Row properties of spec ops: any dispatcher operator described by an OpSpec (op_spec.h), called
// boxed through libtorch's dispatcher (c10::Dispatcher findSchema + callBoxed). The impl of a spec
// op is always `torch`: whatever the dispatcher runs for it on the case's backend (the user's
// kernel; for the built-in aten specs libtorch's kernel, or ours under batch-invariant mode).
//
//   batch_slice    op(x[i:j]) == op(x)[i:j] along the spec's batch dims
//   batch_compose  rows x[i:j] at offset o of a new batch of fresh rows (size o + (j-i) + tail)
//   permute        op(x[perm]) == op(x)[perm]
//   repeat         two runs give the same bits (on CUDA the second on another stream)
//   variant_agree  the case's layouts vs contiguous copies of the same values
//
// A case of a spec op (CaseSpec): op = the spec's name ("myns::my_mm"), impl = "torch",
// shape = the size variables' values in the order of the spec's `sizes` line, layout = one code
// per tensor argument, params = each value argument's choice under spec_param_key(name) plus the
// property's i, j (o, tail; perm). Data comes from properties/data.h keyed by the tensor
// argument's index among the tensor arguments.
#pragma once

#include "properties/generators.h"
#include "properties/spec/op_spec.h"
#include "properties/verdict.h"

#include <map>
#include <string>
#include <vector>

namespace detfuzz {

// The properties a spec op supports (those that need a batch only when it has one); empty for
// an op with no spec.
std::vector<std::string> spec_properties(const std::string &op);
bool is_spec_op(const std::string &op);

// Cases of a target whose op is a spec op (t.impl must be "torch", t.dtype one of the spec's).
// Throws std::invalid_argument for an unknown op, impl, property or dtype.
rc::Gen<CaseSpec> gen_spec_case(const Target &t);

// Checks the case. An operator that throws gives Verdict::error with the first line of its
// message; a malformed case (unknown op or property, a shape that does not fit the spec, a
// parameter that does not decode) or an operator that is not registered throws
// std::invalid_argument.
Verdict check_spec_case(const CaseSpec &c);

// The `torch` impl of a spec op on a backend, for the harness's target list: expectation
// must-hold for users' specs (a user gating a kernel wants a failure to fail the run), observed
// for the built-in aten specs (libtorch's kernels are baselines). `run` calls the operator with
// OpArgs.tensors as its tensor arguments and the first value of every other argument.
ImplInfo spec_torch_impl(const OpSpec &spec, Backend backend);

// One boxed call of the spec's operator: `tensors` in the order of its tensor arguments, value
// arguments from `params` (spec_param_key names; missing ones take the spec's first value).
at::Tensor call_spec_op(const OpSpec &spec, const std::vector<at::Tensor> &tensors,
                        const std::map<std::string, std::string> &params);

}  // namespace detfuzz
