// The property catalogue across op families: which properties apply to an op, how cases of a
// target are generated, and how a case is checked. Row ops live in row_properties.h, paged
// attention in attention/attention_properties.h.
#pragma once

#include "properties/case.h"
#include "properties/generators.h"
#include "properties/verdict.h"

#include <optional>
#include <string>
#include <vector>

namespace detfuzz {

std::vector<std::string> all_ops();                               // row ops, paged_attention, prefill_graph, laps_engine
bool is_known_op(const std::string &op);                          // all_ops() or a spec op (aten::mm, loaded specs)
std::vector<std::string> properties_for(const std::string &op);   // empty for an unknown op
// Whether `impl` of `op` is held to `property` (every pair but some of prefill_graph's).
bool property_applies(const std::string &op, const std::string &impl, const std::string &property);
// The impl from the registry, or for a spec op its dispatcher impl `torch`; nullopt when unknown.
std::optional<ImplInfo> lookup_impl(const std::string &op, const std::string &impl, Backend backend);
rc::Gen<CaseSpec> gen_case(const Target &t);
// Throws std::invalid_argument for a malformed case; impl failures come back as Verdict::error.
Verdict check_case(const CaseSpec &c);

}  // namespace detfuzz
