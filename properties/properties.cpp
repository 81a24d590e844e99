#include "properties/properties.h"

#include "properties/family.h"

#include <algorithm>
#include <stdexcept>

namespace detfuzz {

const std::vector<PropertyFamily> &property_families() {
  static const std::vector<PropertyFamily> table = {row_family(), moe_family(), attention_family(), laps_family(),
                                                    graph_family()};
  return table;
}

const PropertyFamily *family_of(const std::string &op) {
  for (const auto &f : property_families())
    if (f.owns(op)) return &f;
  return nullptr;
}

namespace {

const PropertyFamily &family_or_throw(const std::string &op) {
  const PropertyFamily *f = family_of(op);
  if (!f) throw std::invalid_argument("unknown op '" + op + "'");
  return *f;
}

}  // namespace

void PropertyFamily::own(std::vector<std::string> names) {
  ops = [names] { return names; };
  owns = [names](const std::string &op) { return std::find(names.begin(), names.end(), op) != names.end(); };
}

std::vector<std::string> all_ops() {
  std::vector<std::string> ops;
  for (const auto &f : property_families())
    for (auto &op : f.ops()) ops.push_back(std::move(op));
  return ops;
}

bool is_known_op(const std::string &op) { return family_of(op) != nullptr; }

std::vector<std::string> properties_for(const std::string &op) {
  const PropertyFamily *f = family_of(op);
  return f ? f->properties(op) : std::vector<std::string>{};
}

bool property_applies(const std::string &op, const std::string &impl, const std::string &property) {
  const PropertyFamily *f = family_of(op);
  return f && (!f->applies || f->applies(impl, property));
}

std::optional<ImplInfo> lookup_impl(const std::string &op, const std::string &impl, Backend backend) {
  const PropertyFamily *f = family_of(op);
  if (f && f->impl) return f->impl(op, impl, backend);
  if (const ImplInfo *i = find_impl(op, impl, backend)) return *i;
  return std::nullopt;
}

rc::Gen<CaseSpec> gen_case(const Target &t) { return family_or_throw(t.op).gen(t); }

Verdict check_case(const CaseSpec &c) { return family_or_throw(c.op).check(c); }

}  // namespace detfuzz
