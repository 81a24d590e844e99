// The property catalogue across op families: which properties apply to an op, how cases of a
// target are generated, and how a case is checked. Row ops live in row_properties.h, paged
// attention in attention/attention_properties.h.
#pragma once

#include "properties/case.h"
#include "properties/generators.h"
#include "properties/verdict.h"

#include <string>
#include <vector>

namespace detfuzz {

std::vector<std::string> all_ops();                               // row ops, then paged_attention
std::vector<std::string> properties_for(const std::string &op);   // empty for an unknown op
rc::Gen<CaseSpec> gen_case(const Target &t);
// Throws std::invalid_argument for a malformed case; impl failures come back as Verdict::error.
Verdict check_case(const CaseSpec &c);

}  // namespace detfuzz
