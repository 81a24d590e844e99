#include "properties/spec/spec_def.h"
#include "ops/first_line.h"

#include "properties/generators.h"

#include "properties/rows/row_cases.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <algorithm>
#include <memory>
#include <sstream>
#include <stdexcept>

namespace detfuzz {
namespace {

c10::OperatorHandle handle_of(const OpSpec &spec) {
  const auto h = c10::Dispatcher::singleton().findSchema({spec.op_name, spec.overload});
  if (!h)
    throw std::invalid_argument(
        "operator " + spec.name +
        " is not registered with libtorch's dispatcher (load the library that defines it first)");
  return *h;
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
    case SpecArg::Kind::float_value: try { return c10::IValue(double_from_hex(v));
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
    case SpecArg::Kind::dtype: try { return c10::IValue(static_cast<int64_t>(dtype_from_string(v)));
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

std::vector<int64_t> sizes_of(const OpSpec &spec, const std::vector<std::string> &dims,
                              const std::vector<int64_t> &shape) {
  std::vector<int64_t> out;
  for (const auto &d : dims) out.push_back(dim_value(spec, d, shape));
  return out;
}

std::string sizes_text(at::IntArrayRef s) {
  std::string out = "[";
  for (size_t k = 0; k < s.size(); ++k) out += (k ? ", " : "") + std::to_string(s[k]);
  return out + "]";
}

rc::Gen<CaseSpec> gen_spec_case(const std::shared_ptr<const OpSpec> &spec, const Target &t) {
  const OpSpec &s = *spec;
  if (t.impl != "torch")
    throw std::invalid_argument("spec op " + t.op + " has only the impl 'torch', not '" + t.impl + "'");
  const bool applies =
      t.property == "repeat" || t.property == "variant_agree" || (row_cases::needs_batch(t.property) && s.has_batch());
  if (!applies) throw std::invalid_argument("property '" + t.property + "' does not apply to spec op " + t.op);
  if (std::find(s.dtypes.begin(), s.dtypes.end(), t.dtype) == s.dtypes.end())
    throw std::invalid_argument("spec op " + t.op + " does not list dtype " + dtype_name(t.dtype));
  return rc::gen::exec([spec, t] {
    const OpSpec &s = *spec;
    CaseSpec c;
    c.op = t.op;
    c.impl = t.impl;
    c.property = t.property;
    c.backend = t.backend;
    c.dtype = t.dtype;
    for (const auto &v : s.sizes) c.shape.push_back(*gen_dim(v.lo, v.hi));
    for (int k = 0; k < s.tensor_count(); ++k)
      c.layout += *shrinking_choice<char>({{6, 'c'}, {2, 't'}, {1, 'p'}, {1, 'g'}});
    c.dist =
        *shrinking_choice<std::string>({{5, "normal"}, {2, "uniform"}, {1, "linspace"}, {1, "wide"}, {1, "special"}});
    c.seed = *rc::gen::inRange<uint64_t>(0, 1ull << 48);
    for (const auto &a : s.args) {
      if (a.kind == SpecArg::Kind::tensor) continue;
      const size_t pick = a.values.size() == 1 ? 0 : *rc::gen::inRange<size_t>(0, a.values.size());
      c.params[spec_param_key(a.name)] = a.values[pick];
    }
    if (row_cases::needs_batch(t.property)) {
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

}  // namespace

bool is_spec_op(const std::string &op) { return find_op_spec(op) != nullptr; }

at::Tensor call_spec_op(const OpSpec &spec, const std::vector<at::Tensor> &tensors,
                        const std::map<std::string, std::string> &params) {
  const c10::OperatorHandle h = handle_of(spec);
  const auto &sargs = h.schema().arguments();
  if (static_cast<int>(tensors.size()) != spec.tensor_count())
    throw std::invalid_argument(spec.name + " takes " + std::to_string(spec.tensor_count()) + " tensors, got " +
                                std::to_string(tensors.size()));
  torch::jit::Stack stack;
  size_t t = 0;
  for (size_t k = 0; k < sargs.size(); ++k) {
    if (k >= spec.args.size()) {
      if (!sargs[k].default_value())
        throw std::invalid_argument(spec.name + ": argument '" + sargs[k].name() +
                                    "' has no default and the spec leaves it out");
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

ImplInfo spec_torch_impl(const OpSpec &spec, Backend backend) {
  ImplInfo info;
  info.impl = "torch";
  info.op = spec.name;
  info.backend = backend;
  info.dtypes = spec.dtypes;
  info.expectation = spec.builtin ? Expectation::observed : Expectation::must_hold;
  info.description = "the dispatcher's kernel for " + spec.name + " (op spec from " + spec.origin + ")";
  info.through_dispatcher = spec.op_name.rfind("aten::", 0) == 0;
  const OpSpec s = spec;
  info.run = [s](const OpArgs &args) { return call_spec_op(s, args.tensors, args.params); };
  return info;
}

OpDef spec_op_def(const OpSpec &spec) {
  const auto s = std::make_shared<const OpSpec>(spec);  // every function of the definition shares it
  OpDef d;
  d.name = s->name;
  for (const auto &v : s->sizes) d.size_names.push_back(v.name);
  d.input_sizes = [s](const CaseSpec &c) {
    if (c.shape.size() != s->sizes.size()) {
      std::string vars;
      for (const auto &v : s->sizes) vars += (vars.empty() ? "" : "x") + v.name;
      throw std::invalid_argument("spec op " + c.op + " needs a shape " + vars + ", got '" + c.shape_string() + "'");
    }
    for (int64_t v : c.shape)
      if (v < 0) throw std::invalid_argument("shape '" + c.shape_string() + "' has a negative size");
    std::vector<std::vector<int64_t>> sizes;
    for (const auto &a : s->args)
      if (a.kind == SpecArg::Kind::tensor) sizes.push_back(sizes_of(*s, a.dims, c.shape));
    return sizes;
  };
  if (s->has_batch()) {
    d.batch_axis = [s](const CaseSpec &c) {
      BatchAxis ax;
      int t = 0;
      for (const auto &a : s->args) {
        if (a.kind != SpecArg::Kind::tensor) continue;
        if (a.batch >= 0) ax.inputs.push_back({t, a.batch});
        ++t;
      }
      ax.out_dim = s->out_batch;
      ax.size = c.shape[s->batch_size_index()];
      return ax;
    };
  }
  d.input_dtype = [s](size_t t) -> std::optional<at::ScalarType> {
    size_t k = 0;
    for (const auto &a : s->args) {
      if (a.kind != SpecArg::Kind::tensor) continue;
      if (k++ == t) return a.dtype;
    }
    return std::nullopt;
  };
  d.validate = [s](const CaseSpec &c) {
    handle_of(*s);
    for (const auto &a : s->args) {  // every value parameter decodes (a malformed record is not an op error)
      if (a.kind == SpecArg::Kind::tensor) continue;
      const std::string key = spec_param_key(a.name);
      decode(a, key, c.param(key, a.values.front()));
    }
  };
  // The output of the case's own sizes must have the spec's out shape (when given) and a batch dim.
  d.check_output = [s](const CaseSpec &c, const at::Tensor &out, int64_t batch) {
    if (s->out_shape_given) {
      const auto want = sizes_of(*s, s->out_dims, c.shape);
      if (out.sizes().vec() != want)
        throw OpFailure(s->name + " returned shape " + sizes_text(out.sizes()) + " where the spec's out is " +
                        sizes_text(want));
    }
    if (s->has_batch() && (out.dim() <= s->out_batch || out.size(s->out_batch) != batch))
      throw OpFailure(s->name + " returned shape " + sizes_text(out.sizes()) + ", which has no batch of " +
                      std::to_string(batch) + " at dim " + std::to_string(s->out_batch));
  };
  d.gen = [s](const Target &t) { return gen_spec_case(s, t); };
  // A user's kernel may synchronise or allocate in ways a CUDA graph cannot capture.
  d.graph_replay = false;
  d.dispatcher_impl = [s](Backend backend) { return spec_torch_impl(*s, backend); };
  return d;
}

}  // namespace detfuzz
