#include "properties/spec/spec_properties.h"

#include "properties/data.h"
#include "properties/streams.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <algorithm>
#include <numeric>
#include <sstream>
#include <stdexcept>

namespace detfuzz {
namespace {

// Tensor ids of fresh rows (batch_compose), as in row_properties.cpp.
constexpr uint64_t kFreshRowsTensor = 1000;

// The operator (or the checks on its output) failed: the case's verdict is an error, the run goes on.
struct OpFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string first_line(const std::string &s) { return s.substr(0, s.find('\n')); }

const OpSpec &spec_of(const std::string &op) {
  const OpSpec *s = find_op_spec(op);
  if (!s) throw std::invalid_argument("unknown op '" + op + "' (no op spec for it: give one with --spec)");
  return *s;
}

c10::OperatorHandle handle_of(const OpSpec &spec) {
  const auto h = c10::Dispatcher::singleton().findSchema({spec.op_name, spec.overload});
  if (!h)
    throw std::invalid_argument("operator " + spec.name +
                                " is not registered with libtorch's dispatcher (load the library that defines it first)");
  return *h;
}

bool needs_batch(const std::string &property) { return property != "repeat" && property != "variant_agree"; }

const std::vector<std::string> &all_spec_properties() {
  static const std::vector<std::string> p = {"batch_slice", "batch_compose", "permute", "repeat", "variant_agree"};
  return p;
}

c10::IValue decode(const SpecArg &a, const std::string &key, const std::string &v) {
  const auto bad = [&](const std::string &what) {
    return std::invalid_argument("parameter " + key + "='" + v + "' is not " + what + " (argument '" + a.name + "')");
  };
  if (v == "none") return c10::IValue();
  int64_t x = 0;
  const auto as_int = [&](const std::string &s) {
    size_t used = 0;
    try {
      x = std::stoll(s, &used);
    } catch (const std::exception &) {
      return false;
    }
    return used == s.size();
  };
  switch (a.kind) {
    case SpecArg::Kind::int_value:
      if (!as_int(v)) throw bad("an integer");
      return c10::IValue(x);
    case SpecArg::Kind::float_value:
      try {
        return c10::IValue(double_from_hex(v));
      } catch (const std::invalid_argument &) {
        throw bad("the hex bits of a double");
      }
    case SpecArg::Kind::bool_value:
      if (v != "0" && v != "1") throw bad("0 or 1");
      return c10::IValue(v == "1");
    case SpecArg::Kind::int_list: {
      std::vector<int64_t> list;
      if (v != "empty") {
        std::stringstream ss(v);
        std::string part;
        while (std::getline(ss, part, '.')) {
          if (!as_int(part)) throw bad("integers joined by '.' (or empty)");
          list.push_back(x);
        }
      }
      return c10::IValue(list);
    }
    case SpecArg::Kind::dtype:
      try {
        return c10::IValue(static_cast<int64_t>(dtype_from_string(v)));
      } catch (const std::invalid_argument &) {
        throw bad("a dtype");
      }
    default: throw bad("None");
  }
}

int64_t dim_value(const OpSpec &spec, const std::string &d, const std::vector<int64_t> &shape) {
  const int idx = spec.size_index(d);
  return idx >= 0 ? shape[idx] : std::stoll(d);
}

std::vector<int64_t> sizes_of(const OpSpec &spec, const std::vector<std::string> &dims, const std::vector<int64_t> &shape) {
  std::vector<int64_t> out;
  for (const auto &d : dims) out.push_back(dim_value(spec, d, shape));
  return out;
}

std::string sizes_text(at::IntArrayRef s) {
  std::string out = "[";
  for (size_t k = 0; k < s.size(); ++k) out += (k ? ", " : "") + std::to_string(s[k]);
  return out + "]";
}

std::string range_text(int64_t i, int64_t j) { return "[" + std::to_string(i) + ":" + std::to_string(j) + "]"; }

// Everything a check needs, resolved once per case.
struct SpecCase {
  const OpSpec &spec;
  const CaseSpec &c;
  std::vector<std::pair<int, int>> batch_inputs;  // (tensor index, dim)
  int out_dim = 0;
  int64_t batch = 0;

  SpecCase(const OpSpec &s, const CaseSpec &cs) : spec(s), c(cs) {
    int t = 0;
    for (const auto &a : spec.args) {
      if (a.kind != SpecArg::Kind::tensor) continue;
      if (a.batch >= 0) batch_inputs.push_back({t, a.batch});
      ++t;
    }
    out_dim = spec.out_batch;
    const int b = spec.batch_size_index();
    batch = b >= 0 ? c.shape[b] : 0;
  }

  // Contiguous CPU values of every tensor argument.
  std::vector<at::Tensor> values(uint64_t tensor_base = 0) const {
    std::vector<at::Tensor> v;
    uint64_t t = 0;
    for (const auto &a : spec.args) {
      if (a.kind != SpecArg::Kind::tensor) continue;
      v.push_back(make_values(c.seed, tensor_base + t, sizes_of(spec, a.dims, c.shape), a.dtype.value_or(c.dtype), c.dist));
      ++t;
    }
    return v;
  }

  std::vector<at::Tensor> laid_out(const std::vector<at::Tensor> &values, bool force_contiguous) const {
    std::vector<at::Tensor> out;
    const auto device = device_of(c.backend);
    for (size_t t = 0; t < values.size(); ++t) {
      const char code = force_contiguous || t >= c.layout.size() ? 'c' : c.layout[t];
      out.push_back(with_layout(values[t], code, device));
    }
    return out;
  }

  at::Tensor call(const std::vector<at::Tensor> &tensors) const { return call_spec_op(spec, tensors, c.params); }

  // The output of the case's own sizes must have the spec's out shape (when given) and a batch dim.
  void check_output(const at::Tensor &out) const {
    if (spec.out_shape_given) {
      const auto want = sizes_of(spec, spec.out_dims, c.shape);
      if (out.sizes().vec() != want)
        throw OpFailure(spec.name + " returned shape " + sizes_text(out.sizes()) + " where the spec's out is " + sizes_text(want));
    }
    if (spec.has_batch() && (out.dim() <= out_dim || out.size(out_dim) != batch))
      throw OpFailure(spec.name + " returned shape " + sizes_text(out.sizes()) + ", which has no batch of " + std::to_string(batch) +
                      " at dim " + std::to_string(out_dim));
  }

  std::pair<int64_t, int64_t> slice() const {
    if (batch == 0) return {0, 0};
    const int64_t i = std::clamp<int64_t>(c.param_int("i", 0), 0, batch - 1);
    const int64_t j = std::clamp<int64_t>(c.param_int("j", batch), i + 1, batch);
    return {i, j};
  }
};

Verdict batch_slice(const SpecCase &s) {
  const auto full = s.laid_out(s.values(), false);
  const auto [i, j] = s.slice();
  auto part = full;
  for (auto [t, d] : s.batch_inputs) part[t] = full[t].narrow(d, i, j - i);
  const at::Tensor whole = s.call(full);
  s.check_output(whole);
  const at::Tensor sliced = s.call(part);
  return Verdict::from_diff(whole.narrow(s.out_dim, i, j - i), sliced, "op(x" + range_text(i, j) + ") vs op(x)" + range_text(i, j));
}

Verdict batch_compose(const SpecCase &s) {
  const auto [i, j] = s.slice();
  const int64_t len = j - i;
  const int64_t offset = std::max<int64_t>(0, s.c.param_int("o", 0));
  const int64_t tail = std::max<int64_t>(0, s.c.param_int("tail", 0));
  const auto values = s.values();
  auto composed = values;
  for (auto [t, d] : s.batch_inputs) {
    auto sizes = values[t].sizes().vec();
    sizes[d] = offset + len + tail;
    at::Tensor fresh = make_values(s.c.seed, kFreshRowsTensor + t, sizes, values[t].scalar_type(), s.c.dist);
    fresh.narrow(d, offset, len).copy_(values[t].narrow(d, i, len));
    composed[t] = fresh;
  }
  const at::Tensor a = s.call(s.laid_out(values, false));
  s.check_output(a);
  const at::Tensor b = s.call(s.laid_out(composed, false));
  if (b.dim() <= s.out_dim || b.size(s.out_dim) != offset + len + tail)
    throw OpFailure(s.spec.name + " returned shape " + sizes_text(b.sizes()) + " for a batch of " + std::to_string(offset + len + tail));
  return Verdict::from_diff(a.narrow(s.out_dim, i, len), b.narrow(s.out_dim, offset, len),
                            "rows" + range_text(i, j) + " alone vs at offset " + std::to_string(offset) + " of a batch of " +
                                std::to_string(offset + len + tail));
}

Verdict permute(const SpecCase &s) {
  std::vector<int64_t> perm(s.batch);
  std::iota(perm.begin(), perm.end(), 0);
  const uint64_t key = static_cast<uint64_t>(s.c.param_int("perm", 0));
  for (int64_t k = s.batch - 1; k > 0; --k) std::swap(perm[k], perm[counter_bits(key, 7, k) % (k + 1)]);
  const at::Tensor index = at::tensor(perm, at::kLong);
  const auto values = s.values();
  auto permuted = values;
  for (auto [t, d] : s.batch_inputs) permuted[t] = values[t].index_select(d, index);
  const at::Tensor a = s.call(s.laid_out(values, false));
  s.check_output(a);
  const at::Tensor b = s.call(s.laid_out(permuted, false));
  return Verdict::from_diff(a.index_select(s.out_dim, index.to(a.device())), b, "op(x[perm]) vs op(x)[perm]");
}

Verdict repeat(const SpecCase &s) {
  const auto args = s.laid_out(s.values(), false);
  const at::Tensor a = s.call(args);
  s.check_output(a);
  return second_run_agrees(s.c.backend, a, [&] { return s.call(args); }, "two runs");
}

Verdict variant_agree(const SpecCase &s) {
  const auto values = s.values();
  const at::Tensor a = s.call(s.laid_out(values, false));
  s.check_output(a);
  const at::Tensor b = s.call(s.laid_out(values, true));
  return Verdict::from_diff(a, b, "layout " + s.c.layout + " vs contiguous");
}

}  // namespace

bool is_spec_op(const std::string &op) { return find_op_spec(op) != nullptr; }

std::vector<std::string> spec_properties(const std::string &op) {
  const OpSpec *s = find_op_spec(op);
  if (!s) return {};
  std::vector<std::string> out;
  for (const auto &p : all_spec_properties())
    if (s->has_batch() || !needs_batch(p)) out.push_back(p);
  return out;
}

at::Tensor call_spec_op(const OpSpec &spec, const std::vector<at::Tensor> &tensors,
                        const std::map<std::string, std::string> &params) {
  const c10::OperatorHandle h = handle_of(spec);
  const auto &sargs = h.schema().arguments();
  if (static_cast<int>(tensors.size()) != spec.tensor_count())
    throw std::invalid_argument(spec.name + " takes " + std::to_string(spec.tensor_count()) + " tensors, got " + std::to_string(tensors.size()));
  torch::jit::Stack stack;
  size_t t = 0;
  for (size_t k = 0; k < sargs.size(); ++k) {
    if (k >= spec.args.size()) {
      if (!sargs[k].default_value())
        throw std::invalid_argument(spec.name + ": argument '" + sargs[k].name() + "' has no default and the spec leaves it out");
      stack.push_back(*sargs[k].default_value());
      continue;
    }
    const SpecArg &a = spec.args[k];
    if (a.kind == SpecArg::Kind::tensor) {
      stack.push_back(tensors[t++]);
      continue;
    }
    const std::string key = spec_param_key(a.name);
    const auto it = params.find(key);
    stack.push_back(decode(a, key, it == params.end() ? a.values.front() : it->second));
  }
  try {
    h.callBoxed(stack);
  } catch (const std::exception &e) {
    throw OpFailure(first_line(e.what()));
  }
  if (stack.size() != 1 || !stack[0].isTensor()) throw OpFailure(spec.name + " did not return one tensor");
  return stack[0].toTensor();
}

rc::Gen<CaseSpec> gen_spec_case(const Target &t) {
  const OpSpec &spec = spec_of(t.op);
  if (t.impl != "torch") throw std::invalid_argument("spec op " + t.op + " has only the impl 'torch', not '" + t.impl + "'");
  const auto props = spec_properties(t.op);
  if (std::find(props.begin(), props.end(), t.property) == props.end())
    throw std::invalid_argument("property '" + t.property + "' does not apply to spec op " + t.op);
  if (std::find(spec.dtypes.begin(), spec.dtypes.end(), t.dtype) == spec.dtypes.end())
    throw std::invalid_argument("spec op " + t.op + " does not list dtype " + dtype_name(t.dtype));
  const OpSpec s = spec;  // the generator keeps its own copy
  return rc::gen::exec([s, t] {
    CaseSpec c;
    c.op = t.op;
    c.impl = t.impl;
    c.property = t.property;
    c.backend = t.backend;
    c.dtype = t.dtype;
    for (const auto &v : s.sizes) c.shape.push_back(*gen_dim(v.lo, v.hi));
    for (int k = 0; k < s.tensor_count(); ++k) c.layout += *shrinking_choice<char>({{6, 'c'}, {2, 't'}, {1, 'p'}, {1, 'g'}});
    c.dist = *shrinking_choice<std::string>({{5, "normal"}, {2, "uniform"}, {1, "linspace"}, {1, "wide"}, {1, "special"}});
    c.seed = *rc::gen::inRange<uint64_t>(0, 1ull << 48);
    for (const auto &a : s.args) {
      if (a.kind == SpecArg::Kind::tensor) continue;
      const size_t pick = a.values.size() == 1 ? 0 : *rc::gen::inRange<size_t>(0, a.values.size());
      c.params[spec_param_key(a.name)] = a.values[pick];
    }
    if (needs_batch(t.property)) {
      const int64_t batch = c.shape[s.batch_size_index()];
      const int64_t i_raw = *rc::gen::inRange<int64_t>(0, 512);
      const int64_t len = *rc::gen::inRange<int64_t>(1, 512);
      const int64_t i = batch == 0 ? 0 : std::min(i_raw, batch - 1);
      c.params["i"] = std::to_string(i);
      c.params["j"] = std::to_string(batch == 0 ? 0 : std::min(batch, i + len));
      if (t.property == "batch_compose") {
        c.params["o"] = std::to_string(*rc::gen::inRange<int64_t>(0, 64));
        c.params["tail"] = std::to_string(*rc::gen::inRange<int64_t>(0, 64));
      }
      if (t.property == "permute") c.params["perm"] = std::to_string(*rc::gen::inRange<uint64_t>(0, 1u << 30));
    }
    return c;
  });
}

Verdict check_spec_case(const CaseSpec &c) {
  const OpSpec &spec = spec_of(c.op);
  if (c.impl != "torch") throw std::invalid_argument("spec op " + c.op + " has only the impl 'torch', not '" + c.impl + "'");
  const auto props = spec_properties(c.op);
  if (std::find(props.begin(), props.end(), c.property) == props.end())
    throw std::invalid_argument("property '" + c.property + "' does not apply to spec op " + c.op);
  if (c.shape.size() != spec.sizes.size()) {
    std::string vars;
    for (const auto &v : spec.sizes) vars += (vars.empty() ? "" : "x") + v.name;
    throw std::invalid_argument("spec op " + c.op + " needs a shape " + vars + ", got '" + c.shape_string() + "'");
  }
  for (int64_t v : c.shape)
    if (v < 0) throw std::invalid_argument("shape '" + c.shape_string() + "' has a negative size");
  handle_of(spec);
  for (const auto &a : spec.args) {  // every value parameter decodes (a malformed record is not an op error)
    if (a.kind == SpecArg::Kind::tensor) continue;
    const std::string key = spec_param_key(a.name);
    decode(a, key, c.param(key, a.values.front()));
  }
  const SpecCase s(spec, c);
  try {
    if (c.property == "batch_slice") return batch_slice(s);
    if (c.property == "batch_compose") return batch_compose(s);
    if (c.property == "permute") return permute(s);
    if (c.property == "repeat") return repeat(s);
    return variant_agree(s);
  } catch (const OpFailure &e) {
    return Verdict::error(e.what());
  } catch (const std::invalid_argument &) {
    throw;
  } catch (const std::exception &e) {
    return Verdict::error(e.what());
  }
}

ImplInfo spec_torch_impl(const OpSpec &spec, Backend backend) {
  ImplInfo info;
  info.impl = "torch";
  info.op = spec.name;
  info.backend = backend;
  info.dtypes = spec.dtypes;
  info.expectation = spec.builtin ? Expectation::observed : Expectation::must_hold;
  info.description = "the dispatcher's kernel for " + spec.name + " (op spec from " + spec.origin + ")";
  const OpSpec s = spec;
  info.run = [s](const OpArgs &args) { return call_spec_op(s, args.tensors, {}); };
  return info;
}

}  // namespace detfuzz
