// The MoE family's two properties (moe_properties.h); its row properties go to properties/rows.
// Inputs are the row family's: element e of input t is counter data keyed by (seed, t, e) in the
// input's dtype, seen through the case's layout codes; the tokens added to a batch are fresh
// tensors keyed apart from the inputs.
#include "properties/moe/moe_properties.h"
#include "ops/first_line.h"

#include "properties/data.h"
#include "properties/defs/op_def.h"
#include "properties/family.h"
#include "properties/rows/row_cases.h"
#include "properties/rows/row_properties.h"

#include <algorithm>
#include <stdexcept>

namespace detfuzz {
namespace {

// Tensor ids of added tokens, offset so they never collide with the inputs'.
constexpr uint64_t kAddedTokensTensor = 2000;

bool is_own(const std::string &property) {
  const auto &own = moe_own_properties();
  return std::find(own.begin(), own.end(), property) != own.end();
}

struct MoeCase {
  const OpDef &def;
  const CaseSpec &c;
  ImplInfo impl;

  at::Tensor input(size_t t, uint64_t tensor_id, at::IntArrayRef sizes) const {
    const auto fixed = def.input_dtype ? def.input_dtype(t) : std::nullopt;
    at::Tensor v = make_values(c.seed, tensor_id, sizes, fixed.value_or(c.dtype), c.dist, device_of(c.backend));
    if (t == 1 && c.param_int("ties", 0) == 1) v = (v * 2).round() / 2;  // logits: many equal values
    return v;
  }

  std::vector<at::Tensor> values() const {
    const auto sizes = def.input_sizes(c);
    std::vector<at::Tensor> v;
    for (size_t t = 0; t < sizes.size(); ++t) v.push_back(input(t, t, sizes[t]));
    return v;
  }

  OpArgs args(const std::vector<at::Tensor> &values, bool routing) const {
    OpArgs a;
    for (size_t t = 0; t < values.size(); ++t)
      a.tensors.push_back(with_layout(values[t], t < c.layout.size() ? c.layout[t] : 'c', device_of(c.backend)));
    if (def.read_attributes) def.read_attributes(c, a);
    a.params = c.params;
    if (routing) a.params["routing"] = "1";
    return a;
  }

  at::Tensor run(const OpArgs &a) const {
    try {
      return impl.run(a);
    } catch (const std::exception &e) {
      throw OpFailure(first_line(e.what()));
    }
  }

  // The target token's index in the case's batch.
  int64_t target(int64_t batch) const {
    const int64_t i = c.param_int("i", 0);
    if (i < 0 || i >= batch)
      throw std::invalid_argument("parameter i=" + std::to_string(i) + " is outside [0, " + std::to_string(batch) +
                                  ") (the case's batch has " + std::to_string(batch) + " tokens)");
    return i;
  }
};

Verdict expert_load_invariance(const MoeCase &r, const BatchAxis &ax) {
  const int64_t i = r.target(ax.size);
  const int64_t offset = std::max<int64_t>(0, r.c.param_int("o", 0));
  const int64_t tail = std::max<int64_t>(0, r.c.param_int("tail", 0));
  const int64_t loaded_batch = offset + 1 + tail;
  const int64_t same = std::clamp<int64_t>(r.c.param_int("same", 0), 0, loaded_batch - 1);
  const auto values = r.values();
  auto loaded = values;
  for (auto [t, d] : ax.inputs) {
    auto sizes = values[t].sizes().vec();
    sizes[d] = loaded_batch;
    at::Tensor fresh = r.input(t, kAddedTokensTensor + t, sizes);
    fresh.narrow(d, offset, 1).copy_(values[t].narrow(d, i, 1));
    loaded[t] = fresh;
  }
  // The first `same` added tokens take the target's logits: they reach exactly its experts.
  const at::Tensor target_logits = values[1].narrow(0, i, 1);
  for (int64_t added = 0, row = 0; added < same; ++row)
    if (row != offset) {
      loaded[1].narrow(0, row, 1).copy_(target_logits);
      ++added;
    }
  const at::Tensor a = r.run(r.args(values, false));
  const at::Tensor b = r.run(r.args(loaded, false));
  if (b.dim() != 2 || b.size(0) != loaded_batch) throw OpFailure(r.def.name + " returned the wrong shape");
  return Verdict::from_diff(a.narrow(0, i, 1), b.narrow(0, offset, 1),
                            "token " + std::to_string(i) + " in its batch vs at offset " + std::to_string(offset) +
                                " of a batch of " + std::to_string(loaded_batch) + " (" + std::to_string(same) +
                                " more on its experts)");
}

Verdict routing_invariance(const MoeCase &r, const BatchAxis &ax) {
  const int64_t i = r.target(ax.size);
  const auto values = r.values();
  auto alone = values;
  for (auto [t, d] : ax.inputs) alone[t] = values[t].narrow(d, i, 1).contiguous();
  const at::Tensor batch = r.run(r.args(values, true));
  const at::Tensor one = r.run(r.args(alone, true));
  return Verdict::from_diff(batch.narrow(0, i, 1), one,
                            "routing of token " + std::to_string(i) + " in the batch vs alone");
}

}  // namespace

const std::vector<std::string> &moe_own_properties() {
  static const std::vector<std::string> p = {"expert_load_invariance", "routing_invariance"};
  return p;
}

std::vector<std::string> moe_properties(const std::string &op) {
  std::vector<std::string> p = row_properties_of(op_def_of(op));
  for (const auto &own : moe_own_properties()) p.push_back(own);
  return p;
}

rc::Gen<CaseSpec> gen_moe_case(const Target &t) {
  const OpDef &def = op_def_of(t.op);
  if (!is_own(t.property)) return def.gen(t);
  const bool load = t.property == moe_own_properties()[0];
  return rc::gen::apply(
      [load](CaseSpec c, int64_t i, int64_t offset, int64_t tail, int64_t same, bool ties) {
        c.shape.at(0) = std::max<int64_t>(1, c.shape.at(0));
        c.params["i"] = std::to_string(std::min(i, c.shape[0] - 1));
        if (load) {
          c.params["o"] = std::to_string(offset);
          c.params["tail"] = std::to_string(tail);
          c.params["same"] = std::to_string(std::min(same, offset + tail));
        }
        if (ties) c.params["ties"] = "1";
        return c;
      },
      def.gen(t), rc::gen::inRange<int64_t>(0, 24), rc::gen::inRange<int64_t>(0, 12), rc::gen::inRange<int64_t>(0, 24),
      rc::gen::inRange<int64_t>(0, 24), rc::gen::arbitrary<bool>());
}

Verdict check_moe_case(const CaseSpec &c) {
  if (!is_own(c.property)) return check_row_case(c);
  const OpDef &def = op_def_of(c.op);
  const auto impl = row_impl(def, c.impl, c.backend);
  if (!impl)
    throw std::invalid_argument("no impl '" + c.impl + "' of op '" + c.op + "' on backend " + to_string(c.backend));
  if (!impl->supports(c.dtype))
    throw std::invalid_argument("impl '" + c.impl + "' of " + c.op + " does not support dtype " + dtype_name(c.dtype));
  def.input_sizes(c);  // validates the shape and the parameters
  const BatchAxis ax = def.batch_axis(c);
  const MoeCase r{def, c, *impl};
  try {
    if (c.property == "routing_invariance") return routing_invariance(r, ax);
    return expert_load_invariance(r, ax);
  } catch (const std::invalid_argument &) {
    throw;
  } catch (const std::exception &e) {
    return Verdict::error(e.what());
  }
}

PropertyFamily moe_family() {
  PropertyFamily f;
  f.name = "moe";
  auto mine = [](const std::string &op) {
    const OpDef *def = find_op_def(op);
    return def != nullptr && def->family == "moe";
  };
  f.ops = [mine] {
    std::vector<std::string> ops;
    for (const auto &op : builtin_row_ops())
      if (mine(op)) ops.push_back(op);
    return ops;
  };
  f.owns = mine;
  f.properties = moe_properties;
  f.gen = gen_moe_case;
  f.check = check_moe_case;
  return f;
}

}  // namespace detfuzz
