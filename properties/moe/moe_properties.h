// The MoE family: ops fused_moe and fused_moe_fp8 (definitions in properties/defs/fused_moe.cpp).
// It holds them to the row properties on the tokens (checked by properties/rows) and adds two of
// its own:
//
//   expert_load_invariance  token i of the case's batch is placed at offset o of a new batch of
//                           o + 1 + tail tokens, the others fresh; the first `same` of them copy
//                           token i's logits (so they reach exactly its experts), the rest route
//                           freely. Token i's output bits must equal those it had in the case's
//                           batch, however loaded its experts now are.
//   routing_invariance      token i's routing (top-k expert ids and weights, the impl's
//                           `routing=1` output) computed alone equals its routing in the batch.
//
// Parameters: i (the target token), o, tail, same, and ties=1 to round the logits to multiples
// of 1/2 (many equal logits: top-k's tie rule decides). A case of these properties has T >= 1.
#pragma once

#include "properties/case.h"
#include "properties/generators.h"
#include "properties/verdict.h"

#include <string>
#include <vector>

namespace detfuzz {

const std::vector<std::string> &moe_own_properties();  // expert_load_invariance, routing_invariance
std::vector<std::string> moe_properties(const std::string &op);
rc::Gen<CaseSpec> gen_moe_case(const Target &t);
// Throws std::invalid_argument for a malformed case; failures of the op are Verdict::error.
Verdict check_moe_case(const CaseSpec &c);

}  // namespace detfuzz
