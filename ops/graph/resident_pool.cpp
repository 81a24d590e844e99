#include "ops/graph/resident_pool.h"

#include <exception>
#include <limits>

namespace detfuzz::graph {
namespace {

bool same_model(const ModelConfig &a, const ModelConfig &b) {
  return a.vocab == b.vocab && a.hidden == b.hidden && a.layers == b.layers && a.q_heads == b.q_heads &&
         a.kv_heads == b.kv_heads && a.head_dim == b.head_dim && a.mlp == b.mlp && a.dtype == b.dtype &&
         a.rope_theta == b.rope_theta && a.rms_eps == b.rms_eps;
}

bool same_runner(const RunnerOptions &a, const RunnerOptions &b) {
  return a.batch_sizes == b.batch_sizes && a.seq_lens == b.seq_lens && a.max_blocks == b.max_blocks &&
         a.warmup_runs == b.warmup_runs && a.left_align == b.left_align;
}

bool same_world(const ResidentPool::Spec &a, const ResidentPool::Spec &b) {
  return same_model(a.config, b.config) && a.backend == b.backend && a.num_blocks == b.num_blocks &&
         a.block_size == b.block_size;
}

// The weights of the last seed drawn, on the host: the two worlds of a seq_alone_vs_batched case
// share a seed, and the second one copies instead of drawing again.
const ModelWeights &host_weights(const ModelConfig &config) {
  static std::optional<std::pair<ModelConfig, ModelWeights>> last;
  if (!last || !same_model(last->first, config) || last->first.weight_seed != config.weight_seed)
    last.emplace(config, make_weights(config, at::kCPU));
  return last->second;
}

}  // namespace

ResidentPool::Resident::Resident(const Spec &spec)
    : spec_(spec), model_(spec.config, spec.backend, invariant_kernels(spec.backend)),
      cache_(model_.make_cache(spec.num_blocks, spec.block_size)) {}

ResidentPool::Lease::Lease(ResidentPool &pool, std::unique_ptr<Resident> resident)
    : pool_(&pool), resident_(std::move(resident)), exceptions_at_start_(std::uncaught_exceptions()) {}

ResidentPool::Lease::~Lease() {
  if (resident_ && std::uncaught_exceptions() == exceptions_at_start_) pool_->give_back(std::move(resident_));
}

ResidentPool::Lease ResidentPool::acquire(const Spec &spec) {
  // Prefer a resident whose runner is the one asked for (its captures are what a hit saves).
  auto pick = idle_.end();
  for (auto it = idle_.begin(); it != idle_.end(); ++it) {
    const Resident &r = **it;
    if (!same_world(r.spec_, spec)) continue;
    const bool exact = spec.runner && r.runner_ && same_runner(r.runner_->options(), *spec.runner);
    const bool usable = !spec.runner || !r.runner_ || exact;
    if (exact) {
      pick = it;
      break;
    }
    if (usable && pick == idle_.end()) pick = it;
  }
  std::unique_ptr<Resident> r;
  if (pick != idle_.end()) {
    r = std::move(*pick);
    idle_.erase(pick);
    ++reused_;
    if (r->model_.config().weight_seed != spec.config.weight_seed)
      r->model_.set_weights(host_weights(spec.config), spec.config.weight_seed);
    for (int64_t l = 0; l < r->cache_.config().num_layers; ++l) {
      r->cache_.k(l).fill_(std::numeric_limits<float>::quiet_NaN());  // as a new KVCache's pools
      r->cache_.v(l).fill_(std::numeric_limits<float>::quiet_NaN());
    }
  } else {
    r.reset(new Resident(spec));
  }
  if (spec.runner && !r->runner_)
    r->runner_ = std::make_unique<BatchPrefillGraphRunner>(r->model_, r->cache_, *spec.runner);
  return Lease(*this, std::move(r));
}

void ResidentPool::give_back(std::unique_ptr<Resident> r) {
  idle_.push_front(std::move(r));
  while (idle_.size() > capacity_) idle_.pop_back();
}

ResidentPool &resident_pool() {
  // Enough for every prefill_graph target of a campaign over the generator's resident shapes
  // (properties/graph): shapes x page sizes x dtypes, two worlds each.
  // Never destroyed: at exit its CUDA graphs would outlive the CUDA runtime's own statics.
  static ResidentPool *const pool = new ResidentPool(32);
  return *pool;
}

}  // namespace detfuzz::graph
