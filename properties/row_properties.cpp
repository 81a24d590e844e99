#include "properties/row_properties.h"

#include "ops/reference.h"
#include "properties/data.h"
#include "properties/streams.h"

#include <algorithm>
#include <numeric>
#include <sstream>
#include <stdexcept>

#ifdef DETFUZZ_WITH_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "ops/cuda/cuda_ops.h"
#endif

namespace detfuzz {
namespace {

// Tensor ids of fresh rows (batch_compose) are offset so they never collide with the inputs'.
constexpr uint64_t kFreshRowsTensor = 1000;

std::vector<int64_t> parse_dims(const std::string &s) {
  std::vector<int64_t> dims;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, '.')) {
    if (part.empty()) continue;
    try {
      dims.push_back(std::stoll(part));
    } catch (const std::exception &) {
      throw std::invalid_argument("dims '" + s + "' is not integers joined by '.'");
    }
  }
  return dims;
}

void need_rank(const CaseSpec &c, size_t lo, size_t hi) {
  if (c.shape.size() < lo || c.shape.size() > hi)
    throw std::invalid_argument(c.op + " needs a shape of " + std::to_string(lo) + (lo == hi ? "" : ".." + std::to_string(hi)) +
                                " sizes, got '" + c.shape_string() + "'");
}

int64_t normalized_dim(int64_t d, int64_t rank, const std::string &what) {
  if (d < -rank || d >= rank) throw std::invalid_argument(what + "=" + std::to_string(d) + " is out of range for rank " + std::to_string(rank));
  return d < 0 ? d + rank : d;
}

std::vector<int64_t> reduced_dims(const CaseSpec &c) {
  std::vector<int64_t> dims;
  for (int64_t d : parse_dims(c.param("dims"))) dims.push_back(normalized_dim(d, c.shape.size(), "dims"));
  return dims;
}

at::Tensor run_impl(const ImplInfo &impl, const OpArgs &args) { return impl.run(args); }

// Input `t` of a case drawn as tensor `tensor_id`: the dtype's data from the case's distribution,
// except the index inputs (rope's positions in [0, 4096), embedding's ids in [0, V)), int64.
at::Tensor input_tensor(const CaseSpec &c, size_t t, uint64_t tensor_id, at::IntArrayRef sizes, const at::Device &device) {
  const bool index = t == 1 && (c.op == "rope" || c.op == "embedding");
  if (!index) return make_values(c.seed, tensor_id, sizes, c.dtype, c.dist, device);
  const int64_t range = c.op == "rope" ? 4096 : std::max<int64_t>(1, c.shape[1]);
  at::Tensor v = at::empty(sizes, at::kLong);
  int64_t *p = v.data_ptr<int64_t>();
  for (int64_t e = 0; e < v.numel(); ++e) p[e] = static_cast<int64_t>(counter_bits(c.seed, tensor_id, e) % range);
  return v.to(device);
}

// Values (contiguous tensors, made on the case's device) of every input, before layouts.
std::vector<at::Tensor> input_values(const CaseSpec &c) {
  const auto sizes = row_input_sizes(c);
  const at::Device device = device_of(c.backend);
  std::vector<at::Tensor> v;
  for (size_t t = 0; t < sizes.size(); ++t) v.push_back(input_tensor(c, t, t, sizes[t], device));
  return v;
}

OpArgs args_from_values(const CaseSpec &c, const std::vector<at::Tensor> &values, bool force_contiguous) {
  OpArgs a;
  const auto device = device_of(c.backend);
  for (size_t t = 0; t < values.size(); ++t) {
    const char code = force_contiguous || t >= c.layout.size() ? 'c' : c.layout[t];
    a.tensors.push_back(with_layout(values[t], code, device));
  }
  a.alpha = c.param_double("alpha", 1.0);
  a.beta = c.param_double("beta", 1.0);
  if (c.op == "log_softmax") {
    a.dim = c.param_int("dim", -1);
    a.half_to_float = c.param_int("h2f", 0) != 0;
  }
  if (c.op == "mean") {
    a.dims = parse_dims(c.param("dims"));
    a.keepdim = c.param_int("keepdim", 0) != 0;
  }
  a.eps = c.param_double("eps", 1e-6);
  a.theta = c.param_double("theta", 10000.0);
  return a;
}

const ImplInfo &impl_of(const CaseSpec &c) {
  const ImplInfo *impl = find_impl(c.op, c.impl, c.backend);
  if (!impl) throw std::invalid_argument("no impl '" + c.impl + "' of op '" + c.op + "' on backend " + to_string(c.backend));
  if (!impl->supports(c.dtype))
    throw std::invalid_argument("impl '" + c.impl + "' of " + c.op + " does not support dtype " + dtype_name(c.dtype));
  return *impl;
}

// Slice range [i, j) of the batch from the case's parameters. A record whose range does not fit
// the batch is malformed (std::invalid_argument naming the parameter), never clamped: a replayed
// record must check exactly what it says.
std::pair<int64_t, int64_t> slice_of(const CaseSpec &c, int64_t batch) {
  const int64_t i = c.param_int("i", 0), j = c.param_int("j", batch);
  const std::string of_batch = " (the case's batch has " + std::to_string(batch) + " rows)";
  if (batch == 0) {
    if (i != 0 || j != 0) throw std::invalid_argument("parameters i=" + std::to_string(i) + " j=" + std::to_string(j) + " must be 0 for an empty batch");
    return {0, 0};
  }
  if (i < 0 || i >= batch) throw std::invalid_argument("parameter i=" + std::to_string(i) + " is outside [0, " + std::to_string(batch) + ")" + of_batch);
  if (j <= i || j > batch)
    throw std::invalid_argument("parameter j=" + std::to_string(j) + " is outside (i, " + std::to_string(batch) + "] = (" + std::to_string(i) + ", " +
                                std::to_string(batch) + "]" + of_batch);
  return {i, j};
}

std::string range_text(int64_t i, int64_t j) { return "[" + std::to_string(i) + ":" + std::to_string(j) + "]"; }

Verdict batch_slice(const CaseSpec &c, const ImplInfo &impl) {
  const OpArgs full = make_row_args(c);
  const BatchAxis ax = row_batch_axis(c);
  const auto [i, j] = slice_of(c, ax.size);
  OpArgs part = full;
  for (auto [t, d] : ax.inputs) part.tensors[t] = full.tensors[t].narrow(d, i, j - i);
  const at::Tensor whole = run_impl(impl, full);
  const at::Tensor sliced = run_impl(impl, part);
  return Verdict::from_diff(whole.narrow(ax.out_dim, i, j - i), sliced, "op(x" + range_text(i, j) + ") vs op(x)" + range_text(i, j));
}

Verdict batch_compose(const CaseSpec &c, const ImplInfo &impl) {
  const BatchAxis ax = row_batch_axis(c);
  const auto [i, j] = slice_of(c, ax.size);
  const int64_t len = j - i;
  const int64_t offset = std::max<int64_t>(0, c.param_int("o", 0));
  const int64_t tail = std::max<int64_t>(0, c.param_int("tail", 0));
  const auto values = input_values(c);
  auto composed = values;
  for (auto [t, d] : ax.inputs) {
    auto sizes = values[t].sizes().vec();
    sizes[d] = offset + len + tail;
    at::Tensor fresh = input_tensor(c, t, kFreshRowsTensor + t, sizes, values[t].device());
    fresh.narrow(d, offset, len).copy_(values[t].narrow(d, i, len));
    composed[t] = fresh;
  }
  const at::Tensor a = run_impl(impl, args_from_values(c, values, false));
  const at::Tensor b = run_impl(impl, args_from_values(c, composed, false));
  return Verdict::from_diff(a.narrow(ax.out_dim, i, len), b.narrow(ax.out_dim, offset, len),
                            "rows" + range_text(i, j) + " alone vs at offset " + std::to_string(offset) + " of a batch of " +
                                std::to_string(offset + len + tail));
}

Verdict permute(const CaseSpec &c, const ImplInfo &impl) {
  const BatchAxis ax = row_batch_axis(c);
  std::vector<int64_t> perm(ax.size);
  std::iota(perm.begin(), perm.end(), 0);
  const uint64_t key = static_cast<uint64_t>(c.param_int("perm", 0));
  for (int64_t k = ax.size - 1; k > 0; --k) std::swap(perm[k], perm[counter_bits(key, 7, k) % (k + 1)]);
  const auto values = input_values(c);
  const at::Tensor index = at::tensor(perm, at::kLong).to(device_of(c.backend));
  auto permuted = values;
  for (auto [t, d] : ax.inputs) permuted[t] = values[t].index_select(d, index);
  const at::Tensor a = run_impl(impl, args_from_values(c, values, false));
  const at::Tensor b = run_impl(impl, args_from_values(c, permuted, false));
  return Verdict::from_diff(a.index_select(ax.out_dim, index), b, "op(x[perm]) vs op(x)[perm]");
}

Verdict repeat(const CaseSpec &c, const ImplInfo &impl) {
  const OpArgs args = make_row_args(c);
  return second_run_agrees(c.backend, run_impl(impl, args), [&] { return run_impl(impl, args); }, "two runs");
}

Verdict variant_agree(const CaseSpec &c, const ImplInfo &impl) {
  const auto values = input_values(c);
  const OpArgs laid_out = args_from_values(c, values, false);
  const at::Tensor a = run_impl(impl, laid_out);
  const at::Tensor b = run_impl(impl, args_from_values(c, values, true));
  Verdict v = Verdict::from_diff(a, b, "layout " + c.layout + " vs contiguous");
#ifdef DETFUZZ_WITH_CUDA
  // (An empty output launches nothing, and an empty graph cannot be replayed.)
  if (v.passed() && c.backend == Backend::cuda && a.numel() > 0) {
    // Graph replay: capture the op on a side stream, replay, compare with the eager result. The
    // graph is declared before the tensor it produces: the tensor lives in the graph's memory
    // pool and must be released first.
    const c10::cuda::CUDAStream main = c10::cuda::getCurrentCUDAStream();
    const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool();
    stream_wait(side, main);
    at::cuda::CUDAGraph graph;
    at::Tensor captured;
    {
      c10::cuda::CUDAStreamGuard guard(side);
      graph.capture_begin();
      try {
        captured = run_impl(impl, laid_out);
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
    v = Verdict::from_diff(a, captured, "CUDA-graph replay vs eager");
    captured = at::Tensor();
    graph.reset();
    cuda_ops::trim_cached_graph_pools(a.device().index());
  }
  // Every matmul kernel path that may be chosen for some shape (persistent or split/cluster, large
  // or small tiles, 16-bit on Hopper and float32 everywhere) gives the automatic choice's bits.
  const bool matmul = c.op == "mm" || c.op == "addmm" || c.op == "bmm";
  if (v.passed() && matmul && impl.impl == "invariant" && c.backend == Backend::cuda && a.numel() > 0) {
    for (const auto &path : cuda_ops::equivalent_matmul_paths(a.device().index(), a.scalar_type())) {
      if (!v.passed()) break;
      cuda_ops::ScopedMatmulPath forced(path);
      v = Verdict::from_diff(a, run_impl(impl, laid_out), std::string("automatic path vs ") + path.name());
    }
  }
#endif
  return v;
}

Verdict accuracy(const CaseSpec &c, const ImplInfo &impl) {
  const OpArgs args = make_row_args(c);
  const at::Tensor out = run_impl(impl, args);
  // The reference and the bounds are computed on the host.
  OpArgs host = args;
  for (auto &t : host.tensors) t = t.cpu();
  const AccuracyResult r = check_accuracy(c.op, host, out.cpu());
  if (r.ok) return Verdict::pass({}, "within tolerance of the float64 reference");
  DiffStats d;
  d.numel = out.numel();
  d.first_index = r.worst_index;
  d.max_abs_diff = r.worst_error;
  return Verdict::fail(d, r.detail);
}

}  // namespace

const std::vector<std::string> &row_properties() {
  static const std::vector<std::string> p = {"batch_slice", "batch_compose", "permute", "repeat", "variant_agree", "accuracy"};
  return p;
}

bool is_row_op(const std::string &op) {
  const auto &ops = row_ops();
  return std::find(ops.begin(), ops.end(), op) != ops.end();
}

std::vector<std::vector<int64_t>> row_input_sizes(const CaseSpec &c) {
  const auto &s = c.shape;
  if (c.op == "mm") {
    need_rank(c, 3, 3);  // M N K
    return {{s[0], s[2]}, {s[2], s[1]}};
  }
  if (c.op == "addmm") {
    need_rank(c, 3, 3);
    const int64_t bias = c.param_int("bias", 1);
    if (bias != 1 && bias != 2) throw std::invalid_argument("addmm bias=" + std::to_string(bias) + " (expected 1 or 2: the bias rank)");
    return {bias == 1 ? std::vector<int64_t>{s[1]} : std::vector<int64_t>{s[0], s[1]}, {s[0], s[2]}, {s[2], s[1]}};
  }
  if (c.op == "bmm") {
    need_rank(c, 4, 4);  // B M N K
    return {{s[0], s[1], s[3]}, {s[0], s[3], s[2]}};
  }
  if (c.op == "log_softmax" || c.op == "mean") {
    need_rank(c, 1, 4);
    return {s};
  }
  if (c.op == "rms_norm") {
    need_rank(c, 2, 2);  // T H
    return {s, {s[1]}};
  }
  if (c.op == "silu_and_mul") {
    need_rank(c, 2, 2);  // T I
    return {{s[0], 2 * s[1]}};
  }
  if (c.op == "rope") {
    need_rank(c, 3, 3);  // T H D
    if (s[2] % 2 != 0) throw std::invalid_argument("rope needs an even head dim, got shape '" + c.shape_string() + "'");
    return {s, {s[0]}};
  }
  if (c.op == "embedding") {
    need_rank(c, 3, 3);  // T V H
    if (s[1] < 1) throw std::invalid_argument("embedding needs a vocabulary of at least 1, got shape '" + c.shape_string() + "'");
    return {{s[1], s[2]}, {s[0]}};
  }
  throw std::invalid_argument("unknown row op '" + c.op + "'");
}

BatchAxis row_batch_axis(const CaseSpec &c) {
  row_input_sizes(c);  // validates the shape
  BatchAxis ax;
  if (c.op == "mm") {
    ax.inputs = {{0, 0}};
    ax.size = c.shape[0];
  } else if (c.op == "addmm") {
    ax.inputs = {{1, 0}};
    if (c.param_int("bias", 1) == 2) ax.inputs.push_back({0, 0});
    ax.size = c.shape[0];
  } else if (c.op == "bmm") {
    // axis=matrices (the default): the batch of matrices, dimension 0, which grows with the
    // serving batch; axis=rows: the rows of each matrix (dimension 1 of the first operand).
    const std::string axis = c.param("axis", "matrices");
    if (axis == "matrices") {
      ax.inputs = {{0, 0}, {1, 0}};
      ax.out_dim = 0;
      ax.size = c.shape[0];
    } else if (axis == "rows") {
      ax.inputs = {{0, 1}};
      ax.out_dim = 1;
      ax.size = c.shape[1];
    } else {
      throw std::invalid_argument("parameter axis='" + axis + "' (expected matrices or rows)");
    }
  } else if (c.op == "rms_norm" || c.op == "silu_and_mul") {  // tokens
    ax.inputs = {{0, 0}};
    ax.size = c.shape[0];
  } else if (c.op == "rope") {  // tokens and their positions
    ax.inputs = {{0, 0}, {1, 0}};
    ax.size = c.shape[0];
  } else if (c.op == "embedding") {  // ids; the table is shared by every row
    ax.inputs = {{1, 0}};
    ax.size = c.shape[0];
  } else {
    const int64_t rank = c.shape.size();
    std::vector<int64_t> reduced;
    if (c.op == "log_softmax") reduced = {normalized_dim(c.param_int("dim", -1), rank, "dim")};
    else reduced = reduced_dims(c);
    if (c.op == "mean" && reduced.empty()) for (int64_t d = 0; d < rank; ++d) reduced.push_back(d);
    int64_t batch_dim = -1;
    for (int64_t d = 0; d < rank && batch_dim < 0; ++d)
      if (std::find(reduced.begin(), reduced.end(), d) == reduced.end()) batch_dim = d;
    if (batch_dim < 0) throw std::invalid_argument(c.op + " case reduces every dim: it has no batch dim to slice");
    ax.inputs = {{0, static_cast<int>(batch_dim)}};
    ax.size = c.shape[batch_dim];
    int64_t out_dim = batch_dim;
    if (c.op == "mean" && c.param_int("keepdim", 0) == 0)
      out_dim -= std::count_if(reduced.begin(), reduced.end(), [&](int64_t d) { return d < batch_dim; });
    ax.out_dim = static_cast<int>(out_dim);
  }
  return ax;
}

OpArgs make_row_args(const CaseSpec &c) { return args_from_values(c, input_values(c), false); }

Verdict check_row_case(const CaseSpec &c) {
  const ImplInfo &impl = impl_of(c);
  row_input_sizes(c);
  const auto &props = row_properties();
  if (std::find(props.begin(), props.end(), c.property) == props.end())
    throw std::invalid_argument("unknown property '" + c.property + "' for row op " + c.op);
  if (c.property != "repeat" && c.property != "variant_agree" && c.property != "accuracy") row_batch_axis(c);
  try {
    if (c.property == "batch_slice") return batch_slice(c, impl);
    if (c.property == "batch_compose") return batch_compose(c, impl);
    if (c.property == "permute") return permute(c, impl);
    if (c.property == "repeat") return repeat(c, impl);
    if (c.property == "variant_agree") return variant_agree(c, impl);
    return accuracy(c, impl);
  } catch (const std::invalid_argument &) {
    throw;
  } catch (const std::exception &e) {
    return Verdict::error(e.what());
  }
}

}  // namespace detfuzz
