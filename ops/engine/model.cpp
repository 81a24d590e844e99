#include "ops/engine/model.h"

#include "ops/graph/model.h"
#include "ops/graph/prefill_runner.h"

#include <c10/util/Exception.h>

#include <algorithm>

namespace detfuzz::engine {
namespace {

// shape = {vocab, hidden, layers, q_heads, kv_heads, head_dim, mlp}
graph::ModelConfig config_of(at::ScalarType dtype, const std::vector<int64_t> &shape, uint64_t seed) {
  TORCH_CHECK(shape.size() == 7,
              "laps_engine: the model shape is {vocab, hidden, layers, q_heads, kv_heads, head_dim, mlp}, got ",
              shape.size(), " sizes");
  graph::ModelConfig c;
  c.vocab = shape[0];
  c.hidden = shape[1];
  c.layers = shape[2];
  c.q_heads = shape[3];
  c.kv_heads = shape[4];
  c.head_dim = shape[5];
  c.mlp = shape[6];
  c.dtype = dtype;
  c.weight_seed = seed;
  c.validate();
  return c;
}

// One server: its own KV cache (page 0 is the runner's scratch page) and its own graph runner,
// whose captured buckets point at that cache's pools. Prefill steps go through the runner (a
// graph replay when a bucket fits, else eager, as the runner decides); decode steps run eager.
// The `torch` kernels run every step eagerly: their attention (libtorch's SDPA per sequence) is
// not capturable, so an engine on them serves without graphs.
class TransformerInstance : public ModelInstance {
 public:
  TransformerInstance(const graph::Model &model, int64_t num_pages, int64_t page_size, int64_t max_seq_pages)
      : model_(model), cache_(model.make_cache(num_pages, page_size)) {
    graph::RunnerOptions o;
    // The block table must hold the largest bucket's tokens even when every sequence is shorter.
    const int64_t longest_bucket = *std::max_element(o.seq_lens.begin(), o.seq_lens.end());
    max_blocks_ = std::max(max_seq_pages, (longest_bucket + page_size - 1) / page_size);
    o.max_blocks = max_blocks_;
    if (model_.kernels().name != "torch") runner_ = std::make_unique<graph::BatchPrefillGraphRunner>(model_, cache_, o);
  }
  StepOutput run(const std::vector<SeqWork> &batch, bool prefill) override {
    std::vector<graph::SequenceInput> seqs;
    for (const SeqWork &w : batch)
      seqs.push_back({std::vector<int64_t>(w.tokens.begin(), w.tokens.end()), w.context, w.blocks});
    const graph::RunResult r =
        prefill && runner_ ? runner_->run(seqs) : graph::run_eager(model_, cache_, seqs, max_blocks_);
    return {r.logprobs.to(at::kCPU), r.bucket.has_value()};
  }

 private:
  const graph::Model &model_;
  attention::KVCache cache_;
  int64_t max_blocks_;
  std::unique_ptr<graph::BatchPrefillGraphRunner> runner_;
};

class TransformerStepModel : public StepModel {
 public:
  TransformerStepModel(graph::ModelConfig config, Backend backend, graph::Kernels kernels)
      : model_(std::move(config), backend, std::move(kernels)) {}
  int64_t vocab() const override { return model_.config().vocab; }
  int64_t reserved_pages() const override { return 1; }
  std::unique_ptr<ModelInstance> instance(int64_t num_pages, int64_t page_size, int64_t max_seq_pages) override {
    return std::make_unique<TransformerInstance>(model_, num_pages, page_size, max_seq_pages);
  }

 private:
  graph::Model model_;
};

// The planted bug: a matmul that splits K in two halves once the step has more than 16 token
// rows, as a kernel that picks split-K from M would: each half is a matmul in the model's dtype,
// the two partials are added in float32 and rounded. A request's rows then depend on how many
// other tokens share its step (a graph bucket's padded rows count too).
graph::Kernels split_k_from_rows(Backend backend) {
  graph::Kernels k = graph::invariant_kernels(backend);
  const auto inner = k.mm;
  k.name = "mutant-splitk-from-rows";
  k.mm = [inner](const at::Tensor &a, const at::Tensor &b) {
    if (a.size(0) <= 16 || a.size(1) < 2) return inner(a, b);
    const int64_t h = a.size(1) / 2, rest = a.size(1) - h;
    const at::Tensor lo = inner(a.narrow(1, 0, h).contiguous(), b.narrow(0, 0, h).contiguous()).to(at::kFloat);
    const at::Tensor hi = inner(a.narrow(1, h, rest).contiguous(), b.narrow(0, h, rest).contiguous()).to(at::kFloat);
    return (lo + hi).to(a.scalar_type());
  };
  return k;
}

void add_backend(std::vector<ModelImpl> &all, Backend b) {
  const std::vector<at::ScalarType> dt = {at::kBFloat16, at::kHalf};
  auto make = [b](std::function<graph::Kernels(Backend)> kernels) -> MakeModel {
    return [b, kernels](at::ScalarType dtype, const std::vector<int64_t> &shape,
                        uint64_t seed) -> std::unique_ptr<StepModel> {
      return std::make_unique<TransformerStepModel>(config_of(dtype, shape, seed), b, kernels(b));
    };
  };
  all.push_back({"invariant", b, dt, Expectation::must_hold,
                 "the small transformer on our kernels, batch-prefill graph runner", make(graph::invariant_kernels)});
  all.push_back({"torch", b, dt, Expectation::observed, "the small transformer on libtorch's default kernels",
                 make(graph::torch_kernels)});
  all.push_back({"mutant-splitk-from-rows", b, dt, Expectation::must_hold,
                 "our kernels, but mm splits K when a step has > 16 token rows", make(split_k_from_rows)});
}

}  // namespace

const std::vector<ModelImpl> &model_impls() {
  static const std::vector<ModelImpl> impls = [] {
    std::vector<ModelImpl> all;
    add_backend(all, Backend::cpu);
#ifdef DETFUZZ_WITH_CUDA
    add_backend(all, Backend::cuda);
#endif
    return all;
  }();
  return impls;
}

const ModelImpl *find_model_impl(const std::string &impl, Backend backend) {
  for (const auto &m : model_impls())
    if (m.impl == impl && m.backend == backend) return &m;
  return nullptr;
}

std::vector<int64_t> default_model_shape(Backend backend) {
  // CPU: tiny, so a case of a few hundred tokens takes milliseconds on two cores. CUDA: head
  // dim 64 (the fused attention kernel takes 64, 128, 256).
  if (backend == Backend::cpu) return {64, 32, 2, 2, 1, 16, 64};
  return {256, 256, 2, 4, 2, 64, 512};
}

at::Tensor prompt_logprobs(StepModel &model, const std::vector<int32_t> &prompt) {
  const int64_t page = 16, pages = (static_cast<int64_t>(prompt.size()) + page - 1) / page;
  const int64_t reserved = model.reserved_pages();
  const auto instance = model.instance(pages + reserved, page, pages);
  SeqWork w;
  w.tokens = prompt;
  for (int64_t b = 0; b < pages; ++b) w.blocks.push_back(reserved + b);
  return instance->run({w}, true).logprobs[0];
}

}  // namespace detfuzz::engine
