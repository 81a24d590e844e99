// The attention tests' RapidCheck runner: one named property run over generated paged-attention
// cases, on either backend, keeping the last failing case seen (after shrinking, the minimal one).
#pragma once

#include "properties/attention/attention_properties.h"

#include <rapidcheck.h>

#include <chrono>
#include <optional>
#include <sstream>
#include <string>

namespace detfuzz {

struct PropertyRun {
  bool passed = false;
  int num_success = 0;
  std::optional<CaseSpec> shrunk;  // the last failing case seen: after shrinking, the minimal one
  std::string message;
  double seconds = 0;
};

// Runs `property` for `impl` as a named RapidCheck property (id paged_attention/backend/impl/property)
// with a fixed seed.
inline PropertyRun run_property(const std::string &impl, const std::string &property, Backend backend,
                                at::ScalarType dtype, int max_success, uint64_t seed) {
  PropertyRun out;
  std::optional<CaseSpec> last_failure;
  auto body = [&] {
    const CaseSpec c = *gen_attention_case(impl, property, backend, dtype);
    const Verdict v = check_attention_case(c);
    if (!v.passed()) last_failure = c;
    RC_LOG() << c.describe() << "\n" << to_string(v.outcome) << ": " << v.detail << "\n";
    RC_ASSERT(v.passed());
  };
  rc::detail::TestParams params = rc::detail::configuration().testParams;
  params.maxSuccess = max_success;
  params.seed = seed;
  rc::detail::TestMetadata meta;
  meta.id = std::string("paged_attention/") + to_string(backend) + "/" + impl + "/" + property;
  meta.description = meta.id;
  const auto t0 = std::chrono::steady_clock::now();
  const auto result = rc::detail::checkProperty(rc::detail::toProperty(body), meta, params);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::ostringstream ss;
  rc::detail::printResultMessage(result, ss);
  out.message = ss.str();
  out.passed = result.is<rc::detail::SuccessResult>();
  if (out.passed) out.num_success = result.get<rc::detail::SuccessResult>().numSuccess;
  out.shrunk = last_failure;
  return out;
}

}  // namespace detfuzz
