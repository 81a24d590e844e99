// Where op definitions are found: the built-in row ops' (properties/defs) and those of registered
// op specs (properties/spec), made from a spec on first use.
#include "properties/defs/defs.h"
#include "properties/spec/spec_def.h"

#include <list>
#include <map>
#include <mutex>

namespace detfuzz {
namespace {

struct DefRegistry {
  std::mutex mu;
  std::list<OpDef> owned;  // never shrinks: pointers stay valid
  std::map<std::string, const OpDef *> builtin;
  std::map<const OpSpec *, const OpDef *> of_spec;
  std::vector<std::string> builtin_names;
};

DefRegistry &registry() {
  static DefRegistry *r = [] {
    auto *reg = new DefRegistry;
    for (OpDef &d : builtin_op_defs()) {
      reg->builtin_names.push_back(d.name);
      reg->owned.push_back(std::move(d));
      reg->builtin[reg->owned.back().name] = &reg->owned.back();
    }
    return reg;
  }();
  return *r;
}

}  // namespace

const std::vector<std::string> &builtin_row_ops() { return registry().builtin_names; }

const OpDef *find_op_def(const std::string &op) {
  DefRegistry &r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    if (const auto it = r.builtin.find(op); it != r.builtin.end()) return it->second;
  }
  const OpSpec *spec = find_op_spec(op);  // (takes the spec registry's lock)
  if (!spec) return nullptr;
  std::lock_guard<std::mutex> lock(r.mu);
  auto &def = r.of_spec[spec];
  if (!def) {
    r.owned.push_back(spec_op_def(*spec));
    def = &r.owned.back();
  }
  return def;
}

}  // namespace detfuzz
