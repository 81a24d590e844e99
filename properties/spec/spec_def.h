// A spec op's definition: any dispatcher operator described by an OpSpec (op_spec.h) becomes an
// OpDef, the same kind of definition as a built-in row op's, without a reference or bench shapes,
// so that the row properties (properties/rows) check it. Its only impl is `torch`, called boxed
// through libtorch's dispatcher (c10::Dispatcher findSchema + callBoxed): the user's kernel, or
// for the built-in aten specs libtorch's kernel (ours, or a user's, under a mode that overrides
// it).
//
// A case of a spec op (CaseSpec): op = the spec's name ("myns::my_mm"), impl = "torch",
// shape = the size variables' values in the order of the spec's `sizes` line, layout = one code
// per tensor argument, params = each value argument's choice under spec_param_key(name) plus the
// property's i, j (o, tail; perm). Data comes from properties/data.h keyed by the tensor
// argument's index among the tensor arguments.
#pragma once

#include "properties/defs/op_def.h"
#include "properties/spec/op_spec.h"

#include <map>
#include <string>
#include <vector>

namespace detfuzz {

bool is_spec_op(const std::string &op);  // a built-in aten spec or a registered one

OpDef spec_op_def(const OpSpec &spec);

// Calls the spec's operator through the dispatcher with `tensors` (the tensor arguments in
// order) and each value argument from `params` (its first value when absent). Throws OpFailure
// when the operator throws or does not return one tensor.
at::Tensor call_spec_op(const OpSpec &spec, const std::vector<at::Tensor> &tensors,
                        const std::map<std::string, std::string> &params);

// The spec op's impl `torch` on `backend`: must-hold for a user's spec, observed for a built-in
// aten spec (must-hold too while a mode overrides the aten op: it runs through the dispatcher).
ImplInfo spec_torch_impl(const OpSpec &spec, Backend backend);

}  // namespace detfuzz
