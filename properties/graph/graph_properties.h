// Properties of op "prefill_graph": the small transformer (ops/graph/model.h) run through the
// right-aligned batch-prefill graph runner and the eager paths, checked bitwise on the log-probs
// and on the KV pool.
//
// A case (CaseSpec, op = "prefill_graph"):
//   dtype                 the model's dtype (bfloat16, float16)
//   shape                 {vocab, hidden, layers, q_heads, kv_heads, head_dim, mlp}
//   seed                  weights and tokens: token p of sequence u is counter_bits(seed, 1000 + u, p) % vocab
//   params  cached=0.17.5 per-sequence tokens already in the cache (written by eager passes first)
//           new=9.1.30    per-sequence new tokens of the pass under test (1 = a decode step)
//           page=16       KV page size
//           bs=1.2.4.8    the runner's bucket batch sizes
//           len=16.32.64  the runner's bucket sequence lengths
//           target=1      seq_alone_vs_batched: the sequence checked alone
//
// Impls and the properties they are held to:
//   eager                seq_alone_vs_batched
//   graph                replay_vs_eager, bucket_invariance, padding_invariance, seq_alone_vs_batched
//   eager-registry,      registry_agree, seq_alone_vs_batched
//   eager-no-copy
//   mutant-left-aligned  as graph: the runner with real tokens at the START of their slots, the
//                        negative control (left_aligned_is_caught): the properties must catch it.
//
//   replay_vs_eager     graph replay == eager forward: log-probs, and every real token's K and V
//   bucket_invariance   the batch replayed in every bucket it fits gives the same bits
//   padding_invariance  in the bucket with the most dummy slots and padding, the real rows equal the
//                       eager run and no KV slot changes but the real tokens' own and the scratch slot
//   seq_alone_vs_batched a sequence's log-probs and K/V are the same alone and in the batch
//   registry_agree      eager through the buffer registry (grown from a smaller batch first) ==
//                       eager direct == no-copy
#pragma once

#include "properties/case.h"
#include "properties/verdict.h"

#include <rapidcheck.h>

#include <string>
#include <vector>

namespace detfuzz {

std::vector<std::string> graph_properties();
// Whether `impl` of prefill_graph is held to `property` (see the table above).
bool graph_property_applies(const std::string &impl, const std::string &property);

rc::Gen<CaseSpec> gen_graph_case(const std::string &impl, const std::string &property, Backend backend,
                                 at::ScalarType dtype);
// Throws std::invalid_argument on a malformed case; a failing run gives Verdict::error.
Verdict check_graph_case(const CaseSpec &c);

}  // namespace detfuzz
