#include "harness/cli_common.h"

#include "harness/campaign.h"
#include "properties/properties.h"
#include "properties/spec/op_spec.h"

#include <algorithm>
#include <ctime>
#include <set>
#include <sstream>

namespace detfuzz {

std::vector<std::string> split_list(const std::string &s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, ','))
    if (!part.empty()) out.push_back(part);
  return out;
}

double parse_duration(const std::string &s) {
  size_t used = 0;
  double v = -1;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception &) {
    used = 0;
  }
  const std::string unit = s.substr(used);
  const double scale = unit.empty() || unit == "s" ? 1 : unit == "m" ? 60 : unit == "h" ? 3600 : -1;
  if (used == 0 || scale < 0 || v < 0)
    throw UsageError("duration '" + s + "' is not a number of seconds (e.g. 30s, 5m, 1h)");
  return v * scale;
}

double parse_duration_flag(const std::string &flag, const std::string &s) {
  try {
    return parse_duration(s);
  } catch (const UsageError &e) {
    throw UsageError(flag + ": " + e.what());
  }
}

uint64_t parse_seed(const std::string &flag, const std::string &s) {
  const bool hex = s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
  const std::string digits = hex ? s.substr(2) : s;
  const char *allowed = hex ? "0123456789abcdefABCDEF" : "0123456789";
  bool ok = !digits.empty() && digits.find_first_not_of(allowed) == std::string::npos;
  uint64_t v = 0;
  if (ok) {
    try {
      v = std::stoull(digits, nullptr, hex ? 16 : 10);  // digits only: all of them are read
    } catch (const std::out_of_range &) {
      ok = false;
    }
  }
  if (!ok)
    throw UsageError(flag + ": '" + s + "' is not a seed (a whole number from 0 to 2^64 - 1, decimal or 0x hex)");
  return v;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return buf;
}

Backend resolve_backend(const std::string &name) {
  if (name == "auto") return backend_available(Backend::cuda) ? Backend::cuda : Backend::cpu;
  Backend b;
  try {
    b = backend_from_string(name);
  } catch (const std::invalid_argument &e) {
    throw UsageError(e.what());
  }
#ifndef DETFUZZ_WITH_CUDA
  if (b == Backend::cuda)
    throw UsageError("backend cuda: this detfuzz was built without CUDA (configure with nvcc present)");
#endif
  if (!backend_available(b)) throw UsageError("backend cuda needs a CUDA GPU: none found");
  return b;
}

std::vector<Target> select_targets(const Selection &sel, Backend backend) {
  const auto ops = all_ops();
  for (const auto &op : sel.ops)
    if (!is_known_op(op)) {
      std::string known;
      for (const auto &o : ops) known += (known.empty() ? "" : ", ") + o;
      throw UsageError("unknown op '" + op + "' (known: " + known +
                       ", aten::mm and the other built-in specs, and ops of --spec files)");
    }
  std::vector<at::ScalarType> dtypes;
  for (const auto &d : sel.dtypes) {
    try {
      dtypes.push_back(dtype_from_string(d));
    } catch (const std::invalid_argument &e) {
      throw UsageError(e.what());
    }
  }
  const bool all_dtypes = dtypes.empty();
  if (all_dtypes) dtypes = float_dtypes();

  std::set<std::string> impls_seen, props_seen;
  std::set<at::ScalarType> dtypes_seen;
  std::vector<Target> targets;
  for (const auto &op : sel.ops.empty() ? ops : sel.ops) {
    const auto props = properties_for(op);
    std::vector<ImplInfo> candidates;
    for (const ImplInfo &impl : all_impls())
      if (impl.op == op && impl.backend == backend) candidates.push_back(impl);
    if (auto spec_impl = lookup_impl(op, "torch", backend); spec_impl && candidates.empty())
      candidates.push_back(*spec_impl);
    for (const auto &name : sel.impls) {  // a user's operator named as an impl (NS::name), where the op takes one
      if (name.find("::") == std::string::npos) continue;
      try {
        if (auto user = lookup_impl(op, name, backend)) candidates.push_back(*user);
      } catch (const std::invalid_argument &e) {
        throw UsageError(e.what());
      }
    }
    for (const ImplInfo &impl : candidates) {
      const bool wanted = sel.impls.empty()
                              ? impl.impl.rfind("mutant-", 0) != 0
                              : std::find(sel.impls.begin(), sel.impls.end(), impl.impl) != sel.impls.end();
      if (!wanted) continue;
      impls_seen.insert(impl.impl);
      for (const auto &p : props) {
        if (!sel.properties.empty() &&
            std::find(sel.properties.begin(), sel.properties.end(), p) == sel.properties.end())
          continue;
        if (!property_applies(op, impl.impl, p)) continue;
        props_seen.insert(p);
        for (at::ScalarType d : dtypes) {
          if (!impl.supports(d)) continue;
          dtypes_seen.insert(d);
          targets.push_back({op, impl.impl, p, backend, d, effective_expectation(impl, sel.batch_invariant_mode)});
        }
      }
    }
  }
  for (const auto &i : sel.impls)
    if (!impls_seen.count(i))
      throw UsageError("unknown impl '" + i + "' for the selected ops on backend " + to_string(backend) +
                       " (see: detfuzz list impls)");
  for (const auto &p : sel.properties)
    if (!props_seen.count(p))
      throw UsageError("unknown property '" + p + "' for the selected ops (see: detfuzz list properties)");
  if (!all_dtypes)
    for (at::ScalarType d : dtypes)
      if (!dtypes_seen.count(d)) throw UsageError("dtype " + dtype_name(d) + " is not supported by any selected impl");
  if (targets.empty())
    throw UsageError("the selection names no target (op x impl x property x dtype) on backend " +
                     std::string(to_string(backend)));
  return targets;
}

nlohmann::json selection_json(const Selection &sel) {
  return {{"backend", sel.backend},       {"ops", sel.ops},       {"impls", sel.impls},
          {"properties", sel.properties}, {"dtypes", sel.dtypes}, {"batch_invariant_mode", sel.batch_invariant_mode}};
}

void load_user_ops(const std::vector<std::string> &libraries, const std::vector<std::string> &specs) {
  try {
    for (const auto &lib : libraries) load_kernel_library(lib);
    for (const auto &spec : specs) load_op_spec_file(spec);
  } catch (const std::invalid_argument &e) {
    throw UsageError(e.what());
  }
}

}  // namespace detfuzz
