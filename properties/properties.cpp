#include "properties/properties.h"

#include "properties/attention/attention_properties.h"
#include "properties/graph/graph_properties.h"
#include "properties/laps/laps_properties.h"
#include "properties/row_properties.h"
#include "properties/spec/op_spec.h"
#include "properties/spec/spec_properties.h"

#include <algorithm>
#include <stdexcept>

namespace detfuzz {

std::vector<std::string> all_ops() {
  std::vector<std::string> ops = row_ops();
  ops.push_back("paged_attention");
  ops.push_back("laps_engine");
  ops.push_back("prefill_graph");
  return ops;
}

bool is_known_op(const std::string &op) {
  const auto ops = all_ops();
  return std::find(ops.begin(), ops.end(), op) != ops.end() || is_spec_op(op);
}

std::vector<std::string> properties_for(const std::string &op) {
  if (is_row_op(op)) return row_properties();
  if (op == "paged_attention") return attention_properties();
  if (op == "laps_engine") return laps_properties();
  if (op == "prefill_graph") return graph_properties();
  if (is_spec_op(op)) return spec_properties(op);
  return {};
}

bool property_applies(const std::string &op, const std::string &impl, const std::string &property) {
  if (op == "prefill_graph") return graph_property_applies(impl, property);
  return true;
}

std::optional<ImplInfo> lookup_impl(const std::string &op, const std::string &impl, Backend backend) {
  if (const ImplInfo *i = find_impl(op, impl, backend)) return *i;
  if (impl == "torch" && is_spec_op(op)) return spec_torch_impl(*find_op_spec(op), backend);
  return std::nullopt;
}

rc::Gen<CaseSpec> gen_case(const Target &t) {
  if (t.op == "paged_attention") return gen_attention_case(t.impl, t.property, t.backend, t.dtype);
  if (t.op == "laps_engine") return gen_laps_case(t);
  if (t.op == "prefill_graph") return gen_graph_case(t.impl, t.property, t.backend, t.dtype);
  if (is_spec_op(t.op)) return gen_spec_case(t);
  return gen_row_case(t);
}

Verdict check_case(const CaseSpec &c) {
  if (c.op == "paged_attention") return check_attention_case(c);
  if (c.op == "laps_engine") return check_laps_case(c);
  if (c.op == "prefill_graph") return check_graph_case(c);
  if (is_row_op(c.op)) return check_row_case(c);
  if (is_spec_op(c.op)) return check_spec_case(c);
  throw std::invalid_argument("unknown op '" + c.op + "'");
}

}  // namespace detfuzz
