#include "properties/rows/row_properties.h"
#include "ops/first_line.h"

#include "properties/accuracy.h"
#include "properties/family.h"
#include "properties/rows/row_cases.h"
#include "properties/data.h"
#include "properties/streams.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

#ifdef DETFUZZ_WITH_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "ops/device_memory.h"
#endif

namespace detfuzz {
namespace {

// Tensor ids of fresh rows (batch_compose) are offset so they never collide with the inputs'.
constexpr uint64_t kFreshRowsTensor = 1000;

std::string sizes_text(at::IntArrayRef s) {
  std::string out = "[";
  for (size_t k = 0; k < s.size(); ++k) out += (k ? ", " : "") + std::to_string(s[k]);
  return out + "]";
}

std::string range_text(int64_t i, int64_t j) { return "[" + std::to_string(i) + ":" + std::to_string(j) + "]"; }

// Everything a check needs, resolved once per case.
struct RowCase {
  const OpDef &def;
  const CaseSpec &c;
  const ImplInfo &impl;

  // Input t's dtype: int64 for an index input, else its fixed dtype or the case's.
  at::ScalarType input_dtype(size_t t) const {
    if (def.index_range && def.index_range(c, t) > 0) return at::kLong;
    const auto fixed = def.input_dtype ? def.input_dtype(t) : std::nullopt;
    return fixed.value_or(c.dtype);
  }

  // Input `t` drawn as tensor `tensor_id`: the case's data in the input's dtype, or indices in
  // [0, range) for an index input.
  at::Tensor input(size_t t, uint64_t tensor_id, at::IntArrayRef sizes, const at::Device &device) const {
    const int64_t range = def.index_range ? def.index_range(c, t) : 0;
    if (range <= 0) return make_values(c.seed, tensor_id, sizes, input_dtype(t), c.dist, device);
    at::Tensor v = at::empty(sizes, at::kLong);
    int64_t *p = v.data_ptr<int64_t>();
    for (int64_t e = 0; e < v.numel(); ++e) p[e] = static_cast<int64_t>(counter_bits(c.seed, tensor_id, e) % range);
    return v.to(device);
  }

  // Values (contiguous tensors on the case's device) of every input, before layouts.
  std::vector<at::Tensor> values() const {
    const auto sizes = def.input_sizes(c);
    const at::Device device = device_of(c.backend);
    // In double: an impossible shape's element count may not fit 64 bits.
    const auto bytes_of = [](const std::vector<int64_t> &dims, at::ScalarType dtype) {
      double n = static_cast<double>(c10::elementSize(dtype));
      for (int64_t d : dims) n *= static_cast<double>(d);
      return n;
    };
    double bytes = def.output_sizes ? bytes_of(def.output_sizes(c), c.dtype) : 0;
    for (size_t t = 0; t < sizes.size(); ++t) bytes += bytes_of(sizes[t], input_dtype(t));
    check_tensors_fit(bytes, device, "shape " + c.shape_string());
    std::vector<at::Tensor> v;
    for (size_t t = 0; t < sizes.size(); ++t) v.push_back(input(t, t, sizes[t], device));
    return v;
  }

  OpArgs args(const std::vector<at::Tensor> &values, bool force_contiguous) const {
    OpArgs a;
    const auto device = device_of(c.backend);
    for (size_t t = 0; t < values.size(); ++t) {
      const char code = force_contiguous || t >= c.layout.size() ? 'c' : c.layout[t];
      a.tensors.push_back(with_layout(values[t], code, device));
    }
    if (def.read_attributes) def.read_attributes(c, a);
    a.params = c.params;
    return a;
  }

  // One call of the impl; anything it throws is a failure of the op, not of the case.
  at::Tensor run(const OpArgs &a) const {
    try {
      return impl.run(a);
    } catch (const OpFailure &) {
      throw;
    } catch (const std::exception &e) {
      throw OpFailure(first_line(e.what()));
    }
  }

  // The output of the case's own inputs (the definition may check its shape).
  at::Tensor run_own(const OpArgs &a, int64_t batch) const {
    at::Tensor out = run(a);
    if (def.check_output) def.check_output(c, out, batch);
    return out;
  }

  // Slice range [i, j) of the batch from the case's parameters. A record whose range does not
  // fit the batch is malformed (std::invalid_argument naming the parameter), never clamped: a
  // replayed record must check exactly what it says.
  std::pair<int64_t, int64_t> slice(int64_t batch) const {
    const int64_t i = c.param_int("i", 0), j = c.param_int("j", batch);
    const std::string of_batch = " (the case's batch has " + std::to_string(batch) + " rows)";
    if (batch == 0) {
      if (i != 0 || j != 0)
        throw std::invalid_argument("parameters i=" + std::to_string(i) + " j=" + std::to_string(j) +
                                    " must be 0 for an empty batch");
      return {0, 0};
    }
    if (i < 0 || i >= batch)
      throw std::invalid_argument("parameter i=" + std::to_string(i) + " is outside [0, " + std::to_string(batch) +
                                  ")" + of_batch);
    if (j <= i || j > batch)
      throw std::invalid_argument("parameter j=" + std::to_string(j) + " is outside (i, " + std::to_string(batch) +
                                  "] = (" + std::to_string(i) + ", " + std::to_string(batch) + "]" + of_batch);
    return {i, j};
  }
};

Verdict batch_slice(const RowCase &r, const BatchAxis &ax) {
  const OpArgs full = r.args(r.values(), false);
  const auto [i, j] = r.slice(ax.size);
  OpArgs part = full;
  for (auto [t, d] : ax.inputs) part.tensors[t] = full.tensors[t].narrow(d, i, j - i);
  const at::Tensor whole = r.run_own(full, ax.size);
  const at::Tensor sliced = r.run(part);
  return Verdict::from_diff(whole.narrow(ax.out_dim, i, j - i), sliced,
                            "op(x" + range_text(i, j) + ") vs op(x)" + range_text(i, j));
}

Verdict batch_compose(const RowCase &r, const BatchAxis &ax) {
  const auto [i, j] = r.slice(ax.size);
  const int64_t len = j - i;
  const int64_t offset = std::max<int64_t>(0, r.c.param_int("o", 0));
  const int64_t tail = std::max<int64_t>(0, r.c.param_int("tail", 0));
  const int64_t composed_batch = offset + len + tail;
  const auto values = r.values();
  auto composed = values;
  for (auto [t, d] : ax.inputs) {
    auto sizes = values[t].sizes().vec();
    sizes[d] = composed_batch;
    at::Tensor fresh = r.input(t, kFreshRowsTensor + t, sizes, values[t].device());
    fresh.narrow(d, offset, len).copy_(values[t].narrow(d, i, len));
    composed[t] = fresh;
  }
  const at::Tensor a = r.run_own(r.args(values, false), ax.size);
  const at::Tensor b = r.run(r.args(composed, false));
  if (b.dim() <= ax.out_dim || b.size(ax.out_dim) != composed_batch)
    throw OpFailure(r.def.name + " returned shape " + sizes_text(b.sizes()) + " for a batch of " +
                    std::to_string(composed_batch));
  return Verdict::from_diff(a.narrow(ax.out_dim, i, len), b.narrow(ax.out_dim, offset, len),
                            "rows" + range_text(i, j) + " alone vs at offset " + std::to_string(offset) +
                                " of a batch of " + std::to_string(composed_batch));
}

Verdict permute(const RowCase &r, const BatchAxis &ax) {
  std::vector<int64_t> perm(ax.size);
  std::iota(perm.begin(), perm.end(), 0);
  const uint64_t key = static_cast<uint64_t>(r.c.param_int("perm", 0));
  for (int64_t k = ax.size - 1; k > 0; --k) std::swap(perm[k], perm[counter_bits(key, 7, k) % (k + 1)]);
  const auto values = r.values();
  const at::Tensor index = at::tensor(perm, at::kLong).to(device_of(r.c.backend));
  auto permuted = values;
  for (auto [t, d] : ax.inputs) permuted[t] = values[t].index_select(d, index);
  const at::Tensor a = r.run_own(r.args(values, false), ax.size);
  const at::Tensor b = r.run(r.args(permuted, false));
  return Verdict::from_diff(a.index_select(ax.out_dim, index.to(a.device())), b, "op(x[perm]) vs op(x)[perm]");
}

Verdict repeat(const RowCase &r, int64_t batch) {
  const OpArgs args = r.args(r.values(), false);
  return second_run_agrees(
      r.c.backend, r.run_own(args, batch), [&] { return r.run(args); }, "two runs");
}

#ifdef DETFUZZ_WITH_CUDA
// Captures the op on a side stream, replays it and compares with the eager result. The graph is
// declared before the tensor it produces: the tensor lives in the graph's memory pool and must be
// released first.
Verdict graph_replay_agrees(const RowCase &r, const OpArgs &args, const at::Tensor &eager) {
  const c10::cuda::CUDAStream main = c10::cuda::getCurrentCUDAStream();
  const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool();
  stream_wait(side, main);
  at::cuda::CUDAGraph graph;
  at::Tensor captured;
  {
    c10::cuda::CUDAStreamGuard guard(side);
    graph.capture_begin();
    try {
      captured = r.run(args);
    } catch (...) {
      try {
        graph.capture_end();  // leave the stream out of capture mode before reporting
      } catch (...) {
      }
      throw;
    }
    graph.capture_end();
    graph.replay();
  }
  stream_wait(main, side);
  Verdict v = Verdict::from_diff(eager, captured, "CUDA-graph replay vs eager");
  captured = at::Tensor();
  graph.reset();
  device_memory::trim_graph_pools(eager.device().index());
  return v;
}
#endif

Verdict variant_agree(const RowCase &r, int64_t batch) {
  const auto values = r.values();
  const OpArgs laid_out = r.args(values, false);
  const at::Tensor a = r.run_own(laid_out, batch);
  const at::Tensor b = r.run(r.args(values, true));
  Verdict v = Verdict::from_diff(a, b, "layout " + r.c.layout + " vs contiguous");
#ifdef DETFUZZ_WITH_CUDA
  // (An empty output launches nothing, and an empty graph cannot be replayed.)
  const bool on_gpu = r.c.backend == Backend::cuda && a.numel() > 0;
  if (v.passed() && on_gpu && r.def.graph_replay) v = graph_replay_agrees(r, laid_out, a);
  // Every kernel path the impl may choose for some shape gives the automatic choice's bits.
  if (v.passed() && on_gpu && r.impl.variants) {
    for (const ImplVariant &path : r.impl.variants(a.device().index(), a.scalar_type())) {
      try {
        v = Verdict::from_diff(a, path.run(laid_out), "automatic path vs " + path.name);
      } catch (const std::exception &e) {
        throw OpFailure(path.name + ": " + first_line(e.what()));
      }
      if (!v.passed()) break;
    }
  }
#endif
  return v;
}

Verdict accuracy(const RowCase &r) {
  const OpArgs args = r.args(r.values(), false);
  const at::Tensor out = r.run(args);
  // The reference and the bounds are computed on the host.
  OpArgs host = args;
  for (auto &t : host.tensors) t = t.cpu();
  const AccuracyResult res = check_accuracy(r.def, host, out.cpu());
  if (res.ok) return Verdict::pass({}, "within tolerance of the float64 reference");
  DiffStats d;
  d.numel = out.numel();
  d.first_index = res.worst_index;
  d.max_abs_diff = res.worst_error;
  return Verdict::fail(d, res.detail);
}

ImplInfo impl_of(const OpDef &def, const CaseSpec &c) {
  if (def.dispatcher_impl && c.impl != "torch")
    throw std::invalid_argument("spec op " + c.op + " has only the impl 'torch', not '" + c.impl + "'");
  const auto impl = row_impl(def, c.impl, c.backend);
  if (!impl)
    throw std::invalid_argument("no impl '" + c.impl + "' of op '" + c.op + "' on backend " + to_string(c.backend));
  if (!impl->supports(c.dtype))
    throw std::invalid_argument("impl '" + c.impl + "' of " + c.op + " does not support dtype " + dtype_name(c.dtype));
  return *impl;
}

}  // namespace

const std::vector<std::string> &row_properties() {
  static const std::vector<std::string> p = {"batch_slice", "batch_compose", "permute",
                                             "repeat",      "variant_agree", "accuracy"};
  return p;
}

std::vector<std::string> row_properties_of(const OpDef &def) {
  std::vector<std::string> out;
  for (const auto &p : row_properties()) {
    if (row_cases::needs_batch(p) && !def.has_batch()) continue;
    if (p == "accuracy" && !def.has_reference()) continue;
    out.push_back(p);
  }
  return out;
}

const OpDef &op_def_of(const std::string &op) {
  const OpDef *def = find_op_def(op);
  if (!def) throw std::invalid_argument("unknown op '" + op + "' (no op definition for it: give a spec with --spec)");
  return *def;
}

std::optional<ImplInfo> row_impl(const OpDef &def, const std::string &impl, Backend backend) {
  if (def.dispatcher_impl) {
    if (impl == "torch") return def.dispatcher_impl(backend);
    return std::nullopt;
  }
  if (const ImplInfo *i = find_impl(def.name, impl, backend)) return *i;
  return std::nullopt;
}

std::vector<std::vector<int64_t>> row_input_sizes(const CaseSpec &c) { return op_def_of(c.op).input_sizes(c); }

BatchAxis row_batch_axis(const CaseSpec &c) {
  const OpDef &def = op_def_of(c.op);
  def.input_sizes(c);  // validates the shape
  if (!def.has_batch()) throw std::invalid_argument("op " + c.op + " has no batch dim");
  return def.batch_axis(c);
}

OpArgs make_row_args(const CaseSpec &c) {
  const OpDef &def = op_def_of(c.op);
  const ImplInfo none{};
  const RowCase r{def, c, none};
  return r.args(r.values(), false);
}

rc::Gen<CaseSpec> gen_row_case(const Target &t) { return op_def_of(t.op).gen(t); }

Verdict check_row_case(const CaseSpec &c) {
  const OpDef &def = op_def_of(c.op);
  const ImplInfo impl = impl_of(def, c);
  const auto props = row_properties_of(def);
  if (std::find(props.begin(), props.end(), c.property) == props.end()) {
    if (def.dispatcher_impl)
      throw std::invalid_argument("property '" + c.property + "' does not apply to spec op " + c.op);
    throw std::invalid_argument("unknown property '" + c.property + "' for row op " + c.op);
  }
  def.input_sizes(c);
  if (def.validate) def.validate(c);
  BatchAxis ax;  // the batch sliced, and the batch a definition's output check expects
  if (def.has_batch() && (row_cases::needs_batch(c.property) || def.check_output)) ax = def.batch_axis(c);
  const RowCase r{def, c, impl};
  try {
    if (c.property == "batch_slice") return batch_slice(r, ax);
    if (c.property == "batch_compose") return batch_compose(r, ax);
    if (c.property == "permute") return permute(r, ax);
    if (c.property == "repeat") return repeat(r, ax.size);
    if (c.property == "variant_agree") return variant_agree(r, ax.size);
    return accuracy(r);
  } catch (const std::invalid_argument &) {
    throw;
  } catch (const std::exception &e) {
    return Verdict::error(e.what());
  }
}

PropertyFamily row_family() {
  PropertyFamily f;
  f.name = "rows";
  // Ops whose definition names another family (the MoE ops) are that family's; it calls
  // check_row_case for their row properties.
  f.ops = [] {
    std::vector<std::string> ops;
    for (const auto &op : builtin_row_ops())
      if (find_op_def(op)->family.empty()) ops.push_back(op);
    return ops;
  };
  f.owns = [](const std::string &op) {
    const OpDef *def = find_op_def(op);
    return def != nullptr && def->family.empty();
  };
  f.properties = [](const std::string &op) { return row_properties_of(op_def_of(op)); };
  f.impl = [](const std::string &op, const std::string &impl, Backend backend) {
    return row_impl(op_def_of(op), impl, backend);
  };
  f.gen = gen_row_case;
  f.check = check_row_case;
  return f;
}

}  // namespace detfuzz
