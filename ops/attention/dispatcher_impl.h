// paged_attention impls that live outside detfuzz: any operator registered with libtorch's
// dispatcher (TORCH_LIBRARY from a --load'ed library, torch.library.custom_op from an --import'ed
// module) whose schema is paged_attention's contract
//
//   NS::name(Tensor q, Tensor k_pool, Tensor v_pool, Tensor cu_seqlens_q, Tensor seq_lens_kv,
//            Tensor block_table, float scale) -> Tensor
//
// (the tensors of ops/attention/register.cpp; `scale` is the softmax scale, already resolved from
// the case's alpha) becomes impl "NS::name" of op paged_attention, held to every attention
// property as a user's kernel is: must-hold.
#pragma once

#include "ops/registry.h"

#include <optional>
#include <string>

namespace detfuzz {

// True for a qualified operator name ("NS::name"), the form a user's impl is named by.
bool is_dispatcher_impl_name(const std::string &impl);

// The impl for operator `qualified`; nullopt when `impl` is not a qualified name. Throws
// std::invalid_argument (one line) when no such operator is registered or its schema does not
// match the contract above.
std::optional<ImplInfo> paged_attention_dispatcher_impl(const std::string &qualified, Backend backend);

}  // namespace detfuzz
