// The property catalogue across op families (properties/family.h): which properties apply to an
// op, how cases of a target are generated, and how a case is checked, looked up in the table of
// families (row ops in properties/rows, paged attention in properties/attention, the graph runner
// in properties/graph, the LAPS engine in properties/laps).
#pragma once

#include "properties/case.h"
#include "properties/generators.h"
#include "properties/verdict.h"

#include <optional>
#include <string>
#include <vector>

namespace detfuzz {

std::vector<std::string> all_ops();                              // every family's listed ops, in table order
bool is_known_op(const std::string &op);                         // all_ops() or a spec op (aten::mm, loaded specs)
std::vector<std::string> properties_for(const std::string &op);  // empty for an unknown op
// Whether `impl` of `op` is held to `property` (every pair but some of prefill_graph's).
bool property_applies(const std::string &op, const std::string &impl, const std::string &property);
// The impl from the registry, or for a spec op its dispatcher impl `torch`; nullopt when unknown.
std::optional<ImplInfo> lookup_impl(const std::string &op, const std::string &impl, Backend backend);
rc::Gen<CaseSpec> gen_case(const Target &t);
// Throws std::invalid_argument for a malformed case; impl failures come back as Verdict::error.
Verdict check_case(const CaseSpec &c);

}  // namespace detfuzz
