#include "ops/attention/dispatcher_impl.h"
#include "ops/first_line.h"

#include "ops/attention/paged_attention.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <stdexcept>

namespace detfuzz {
namespace {

constexpr const char *kContract =
    "(Tensor q, Tensor k_pool, Tensor v_pool, Tensor cu_seqlens_q, Tensor seq_lens_kv, Tensor block_table, "
    "float scale) -> Tensor";

bool matches_contract(const c10::FunctionSchema &s) {
  const auto &args = s.arguments();
  if (args.size() != 7 || s.returns().size() != 1) return false;
  for (size_t i = 0; i < 6; ++i)
    if (args[i].type()->kind() != c10::TypeKind::TensorType) return false;
  return args[6].type()->kind() == c10::TypeKind::FloatType &&
         s.returns()[0].type()->kind() == c10::TypeKind::TensorType;
}

}  // namespace

bool is_dispatcher_impl_name(const std::string &impl) {
  const auto at = impl.find("::");
  return at != std::string::npos && at > 0 && at + 2 < impl.size();
}

std::optional<ImplInfo> paged_attention_dispatcher_impl(const std::string &qualified, Backend backend) {
  if (!is_dispatcher_impl_name(qualified)) return std::nullopt;
  const auto dot = qualified.find('.', qualified.find("::"));
  const std::string name = qualified.substr(0, dot),
                    overload = dot == std::string::npos ? "" : qualified.substr(dot + 1);
  const auto handle = c10::Dispatcher::singleton().findSchema({name, overload});
  if (!handle)
    throw std::invalid_argument("impl " + qualified +
                                ": no such operator is registered with libtorch's dispatcher (load it with "
                                "--load LIB.so or --import MODULE)");
  if (!matches_contract(handle->schema()))
    throw std::invalid_argument("impl " + qualified + ": its schema " + c10::toString(handle->schema()) +
                                " is not paged_attention's " + kContract);
  ImplInfo info;
  info.impl = qualified;
  info.op = "paged_attention";
  info.backend = backend;
  info.dtypes = float_dtypes();
  info.expectation = Expectation::must_hold;
  info.description = "the dispatcher's operator " + qualified + " (a user's paged attention kernel)";
  const c10::OperatorHandle h = *handle;
  info.run = [h, qualified](const OpArgs &a) {
    TORCH_CHECK(a.tensors.size() == 6, "paged_attention takes 6 tensors, got ", a.tensors.size());
    torch::jit::Stack stack(a.tensors.begin(), a.tensors.end());
    stack.emplace_back(static_cast<double>(attention::softmax_scale(a.alpha, a.tensors[0].size(-1))));
    try {
      h.callBoxed(stack);
    } catch (const std::exception &e) {
      throw std::runtime_error(first_line(e.what()));
    }
    if (stack.size() != 1 || !stack[0].isTensor()) throw std::runtime_error(qualified + " did not return one tensor");
    return stack[0].toTensor();
  };
  return info;
}

}  // namespace detfuzz
