#include "properties/properties.h"

#include "properties/attention/attention_properties.h"
#include "properties/row_properties.h"

#include <stdexcept>

namespace detfuzz {

std::vector<std::string> all_ops() {
  std::vector<std::string> ops = row_ops();
  ops.push_back("paged_attention");
  return ops;
}

std::vector<std::string> properties_for(const std::string &op) {
  if (is_row_op(op)) return row_properties();
  if (op == "paged_attention") return attention_properties();
  return {};
}

rc::Gen<CaseSpec> gen_case(const Target &t) {
  if (t.op == "paged_attention") return gen_attention_case(t.impl, t.property, t.backend, t.dtype);
  return gen_row_case(t);
}

Verdict check_case(const CaseSpec &c) {
  if (c.op == "paged_attention") return check_attention_case(c);
  if (is_row_op(c.op)) return check_row_case(c);
  throw std::invalid_argument("unknown op '" + c.op + "'");
}

}  // namespace detfuzz
