#include "ops/graph/model.h"

#include "ops/attention/paged_attention.h"
#include "ops/counter_rng.h"
#include "ops/cpu/cpu_ops.h"
#ifdef DETFUZZ_WITH_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

#include <cmath>
#include <memory>
#include <sstream>

namespace detfuzz::graph {
namespace {

// Weight tensor ids of the counter-based generator: 0 embed, 1 final norm, 2 lm head, then 10 +
// 8 * layer + k for the six tensors of each layer.
constexpr uint64_t kEmbed = 0, kFinalNorm = 1, kLmHead = 2, kLayerBase = 10;

// Uniform in [-scale, scale) (matrices), or 1 + uniform in [-0.25, 0.25) (norm weights): never
// zero, rounded once to the dtype.
at::Tensor draw(uint64_t seed, uint64_t tensor, at::IntArrayRef sizes, bool norm, double scale, at::ScalarType dtype,
                at::Device device) {
  at::Tensor v = at::empty(sizes, at::kDouble);
  double *p = v.data_ptr<double>();
  for (int64_t e = 0; e < v.numel(); ++e) {
    const double u = 2.0 * counter_unit(counter_bits(seed, tensor, static_cast<uint64_t>(e))) - 1.0;
    p[e] = norm ? 1.0 + 0.25 * u : scale * u;
  }
  return v.to(dtype).to(device);
}

at::Device device_of_backend(Backend b) { return b == Backend::cpu ? at::Device(at::kCPU) : at::Device(at::kCUDA, 0); }

at::Tensor need(const std::optional<at::Tensor> &t, const char *name) {
  TORCH_CHECK(t.has_value() && t->defined(), "forward: the batch has no ", name);
  return *t;
}

class SplitCpuAttention : public AttentionStep {
 public:
  SplitCpuAttention(const ForwardBatch &b, bool rows_without_keys)
      : cu_(need(b.cu_seqlens_q, "cu_seqlens_q")),
        kv_(need(b.seq_lens, "seq_lens")),
        table_(need(b.block_table, "block_table")),
        rows_without_keys_(rows_without_keys) {}
  at::Tensor run(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v) const override {
    return attention::paged_attention_split_cpu(q, k, v, cu_, kv_, table_, 0.0, {}, rows_without_keys_);
  }

 private:
  at::Tensor cu_, kv_, table_;
  bool rows_without_keys_;
};

#ifdef DETFUZZ_WITH_CUDA
class FusedCudaAttention : public AttentionStep {
 public:
  FusedCudaAttention(const ForwardBatch &b, const at::Tensor &q_like, const attention::KVCache &cache)
      : plan_(q_like, cache.k(0), cache.v(0), need(b.cu_seqlens_q, "cu_seqlens_q"), need(b.seq_lens, "seq_lens"),
              need(b.block_table, "block_table")) {}
  at::Tensor run(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v) const override {
    return plan_.run(q, k, v, 0.0);
  }

 private:
  attention::PagedAttentionCudaPlan plan_;
};
#endif

class SdpaAttention : public AttentionStep {
 public:
  SdpaAttention(const ForwardBatch &b, Backend backend)
      : impl_(find_impl("paged_attention", "torch-sdpa", backend)),
        cu_(need(b.cu_seqlens_q, "cu_seqlens_q")),
        kv_(need(b.seq_lens, "seq_lens")),
        table_(need(b.block_table, "block_table")) {
    TORCH_CHECK(impl_ != nullptr, "forward: no torch-sdpa attention on backend ", to_string(backend));
  }
  at::Tensor run(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v) const override {
    OpArgs a;
    a.tensors = {q, k, v, cu_, kv_, table_};
    a.alpha = 0.0;
    return impl_->run(a);
  }

 private:
  const ImplInfo *impl_;
  at::Tensor cu_, kv_, table_;
};

}  // namespace

void ModelConfig::validate() const {
  TORCH_CHECK(vocab >= 1 && hidden >= 1 && layers >= 1 && mlp >= 1,
              "model: vocab, hidden, layers and mlp must be >= 1 (", describe(), ")");
  TORCH_CHECK(kv_heads >= 1 && q_heads >= kv_heads && q_heads % kv_heads == 0,
              "model: q_heads must be a positive multiple of kv_heads (", describe(), ")");
  TORCH_CHECK(head_dim >= 2 && head_dim % 2 == 0, "model: head_dim must be even and >= 2 (", describe(), ")");
  TORCH_CHECK(dtype == at::kBFloat16 || dtype == at::kHalf, "model: dtype must be bfloat16 or float16, got ", dtype);
}

std::string ModelConfig::describe() const {
  std::ostringstream s;
  s << "vocab=" << vocab << " hidden=" << hidden << " layers=" << layers << " q_heads=" << q_heads
    << " kv_heads=" << kv_heads << " head_dim=" << head_dim << " mlp=" << mlp << " dtype=" << dtype_name(dtype);
  return s.str();
}

ModelWeights make_weights(const ModelConfig &c, at::Device device) {
  c.validate();
  const uint64_t s = c.weight_seed;
  const int64_t qkv_out = (c.q_heads + 2 * c.kv_heads) * c.head_dim;
  const double in_h = 1.0 / std::sqrt(static_cast<double>(c.hidden));
  ModelWeights w;
  w.embed = draw(s, kEmbed, {c.vocab, c.hidden}, false, 1.0, c.dtype, device);
  for (int64_t l = 0; l < c.layers; ++l) {
    const uint64_t base = kLayerBase + 8 * static_cast<uint64_t>(l);
    LayerWeights lw;
    lw.attn_norm = draw(s, base + 0, {c.hidden}, true, 0, c.dtype, device);
    lw.qkv = draw(s, base + 1, {c.hidden, qkv_out}, false, in_h, c.dtype, device);
    lw.o_proj = draw(s, base + 2, {c.q_heads * c.head_dim, c.hidden}, false,
                     1.0 / std::sqrt(static_cast<double>(c.q_heads * c.head_dim)), c.dtype, device);
    lw.mlp_norm = draw(s, base + 3, {c.hidden}, true, 0, c.dtype, device);
    lw.gate_up = draw(s, base + 4, {c.hidden, 2 * c.mlp}, false, in_h, c.dtype, device);
    lw.down = draw(s, base + 5, {c.mlp, c.hidden}, false, 1.0 / std::sqrt(static_cast<double>(c.mlp)), c.dtype, device);
    w.layers.push_back(std::move(lw));
  }
  w.final_norm = draw(s, kFinalNorm, {c.hidden}, true, 0, c.dtype, device);
  w.lm_head = draw(s, kLmHead, {c.hidden, c.vocab}, false, in_h, c.dtype, device);
  return w;
}

Kernels invariant_kernels(Backend backend) {
  Kernels k;
  k.name = "invariant";
  if (backend == Backend::cpu) {
    k.mm = [](const at::Tensor &a, const at::Tensor &b) { return cpu_ops::mm(a, b); };
    k.rms_norm = [](const at::Tensor &x, const at::Tensor &w, double eps) { return cpu_ops::rms_norm(x, w, eps); };
    k.silu_and_mul = [](const at::Tensor &x) { return cpu_ops::silu_and_mul(x); };
    k.rope = [](const at::Tensor &x, const at::Tensor &p, double theta) { return cpu_ops::rope(x, p, theta); };
    k.embedding = [](const at::Tensor &w, const at::Tensor &ids) { return cpu_ops::embedding(w, ids); };
    k.log_softmax_f32 = [](const at::Tensor &x) { return cpu_ops::log_softmax(x, -1, true); };
    return k;
  }
#ifdef DETFUZZ_WITH_CUDA
  k.mm = [](const at::Tensor &a, const at::Tensor &b) { return cuda_ops::mm(a, b); };
  k.rms_norm = [](const at::Tensor &x, const at::Tensor &w, double eps) { return cuda_ops::rms_norm(x, w, eps); };
  k.silu_and_mul = [](const at::Tensor &x) { return cuda_ops::silu_and_mul(x); };
  k.rope = [](const at::Tensor &x, const at::Tensor &p, double theta) { return cuda_ops::rope(x, p, theta); };
  k.rope_store_kv = cuda_ops::rope_store_kv;
  k.embedding = [](const at::Tensor &w, const at::Tensor &ids) { return cuda_ops::embedding(w, ids); };
  k.log_softmax_f32 = [](const at::Tensor &x) { return cuda_ops::log_softmax(x, -1, true); };
  return k;
#else
  TORCH_CHECK(false, "invariant_kernels: this build has no CUDA");
#endif
}

Kernels torch_kernels(Backend) {
  Kernels k;
  k.name = "torch";
  k.mm = [](const at::Tensor &a, const at::Tensor &b) { return at::mm(a, b); };
  k.rms_norm = [](const at::Tensor &x, const at::Tensor &w, double eps) {
    return at::rms_norm(x, {x.size(-1)}, w, eps);
  };
  k.silu_and_mul = [](const at::Tensor &x) {
    const int64_t i = x.size(-1) / 2;
    return at::silu(x.narrow(-1, 0, i)) * x.narrow(-1, i, i);
  };
  k.rope = [](const at::Tensor &x, const at::Tensor &p, double theta) { return torch_rope(x, p, theta); };
  k.embedding = [](const at::Tensor &w, const at::Tensor &ids) { return at::embedding(w, ids); };
  // half_to_float exists only for float16 on CUDA: everything else converts first.
  k.log_softmax_f32 = [](const at::Tensor &x) {
    return x.is_cuda() && x.scalar_type() == at::kHalf ? at::_log_softmax(x, -1, true)
                                                       : at::_log_softmax(x.to(at::kFloat), -1, false);
  };
  return k;
}

std::unique_ptr<AttentionStep> invariant_attention(const ForwardBatch &batch, const ModelConfig &config,
                                                   const attention::KVCache &cache, bool rows_without_keys) {
  if (!cache.k(0).is_cuda()) return std::make_unique<SplitCpuAttention>(batch, rows_without_keys);
#ifdef DETFUZZ_WITH_CUDA
  // The plan validates q's shape against the metadata (it reads no q values).
  const at::Tensor q_like =
      at::empty({batch.num_tokens, config.q_heads, config.head_dim}, cache.k(0).options().dtype(config.dtype));
  return std::make_unique<FusedCudaAttention>(batch, q_like, cache);
#else
  (void)config;
  TORCH_CHECK(false, "invariant_attention: this build has no CUDA");
#endif
}

std::unique_ptr<AttentionStep> torch_attention(const ForwardBatch &batch, Backend backend) {
  return std::make_unique<SdpaAttention>(batch, backend);
}

Model::Model(ModelConfig config, Backend backend, Kernels kernels)
    : config_(std::move(config)),
      backend_(backend),
      kernels_(std::move(kernels)),
      weights_(make_weights(config_, device_of_backend(backend))) {}

Model::Model(ModelConfig config, Backend backend, Kernels kernels, ModelWeights weights)
    : config_(std::move(config)), backend_(backend), kernels_(std::move(kernels)), weights_(std::move(weights)) {
  config_.validate();
  const ModelConfig &c = config_;
  const at::Device device = device_of_backend(backend);
  const int64_t qkv_out = (c.q_heads + 2 * c.kv_heads) * c.head_dim;
  const auto check = [&](const at::Tensor &t, std::vector<int64_t> sizes, const char *name) {
    TORCH_CHECK(t.defined() && t.sizes().equals(sizes) && t.scalar_type() == c.dtype && t.device() == device &&
                    t.is_contiguous(),
                "model: weight ", name, " must be a contiguous ", c.dtype, " ", at::IntArrayRef(sizes), " on ", device);
  };
  check(weights_.embed, {c.vocab, c.hidden}, "embed");
  TORCH_CHECK(static_cast<int64_t>(weights_.layers.size()) == c.layers, "model: ", weights_.layers.size(),
              " layers of weights for ", c.layers, " layers");
  for (const LayerWeights &lw : weights_.layers) {
    check(lw.attn_norm, {c.hidden}, "attn_norm");
    check(lw.qkv, {c.hidden, qkv_out}, "qkv");
    check(lw.o_proj, {c.q_heads * c.head_dim, c.hidden}, "o_proj");
    check(lw.mlp_norm, {c.hidden}, "mlp_norm");
    check(lw.gate_up, {c.hidden, 2 * c.mlp}, "gate_up");
    check(lw.down, {c.mlp, c.hidden}, "down");
  }
  check(weights_.final_norm, {c.hidden}, "final_norm");
  check(weights_.lm_head, {c.hidden, c.vocab}, "lm_head");
}

at::Device Model::device() const { return device_of_backend(backend_); }

attention::KVCache Model::make_cache(int64_t num_blocks, int64_t block_size) const {
  attention::KVCacheConfig c;
  c.num_layers = config_.layers;
  c.num_blocks = num_blocks;
  c.block_size = block_size;
  c.num_kv_heads = config_.kv_heads;
  c.head_dim = config_.head_dim;
  c.dtype = config_.dtype;
  c.device = device();
  return attention::KVCache(c);
}

at::Tensor Model::forward(const ForwardBatch &batch, attention::KVCache &cache, const AttentionStep &attention) const {
  const ModelConfig &c = config_;
  const ModelWeights &w = weights_;
  const Kernels &k = kernels_;
  const at::Tensor positions = need(batch.positions, "positions");
  const at::Tensor slots = need(batch.out_cache_loc, "out_cache_loc");
  const at::Tensor logits_index = need(batch.logits_index, "logits_index");
  at::Tensor h = batch.input_embeds ? *batch.input_embeds : k.embedding(w.embed, need(batch.input_ids, "input_ids"));
  TORCH_CHECK(h.dim() == 2 && h.size(1) == c.hidden && h.scalar_type() == c.dtype, "forward: input_embeds must be [T, ",
              c.hidden, "] ", c.dtype, ", got ", h.sizes(), " ", h.scalar_type());
  const int64_t t = h.size(0), qd = c.q_heads * c.head_dim, kvd = c.kv_heads * c.head_dim;
  // One check (a host sync outside a capture) covers every layer's pool.
  if (k.rope_store_kv) cache.check_slots(slots);
  for (int64_t l = 0; l < c.layers; ++l) {
    const LayerWeights &lw = w.layers[l];
    const at::Tensor qkv = k.mm(k.rms_norm(h, lw.attn_norm, c.rms_eps), lw.qkv);
    at::Tensor q;
    if (k.rope_store_kv) {
      q = k.rope_store_kv(qkv, positions, c.rope_theta, c.q_heads, c.kv_heads, slots, cache.k(l), cache.v(l));
    } else {
      q = k.rope(qkv.narrow(1, 0, qd).reshape({t, c.q_heads, c.head_dim}), positions, c.rope_theta);
      const at::Tensor key =
          k.rope(qkv.narrow(1, qd, kvd).reshape({t, c.kv_heads, c.head_dim}), positions, c.rope_theta);
      const at::Tensor value = qkv.narrow(1, qd + kvd, kvd).reshape({t, c.kv_heads, c.head_dim});
      cache.set_kv(l, slots, key, value);
    }
    const at::Tensor a = attention.run(q, cache.k(l), cache.v(l)).reshape({t, qd});
    h = at::add(h, k.mm(a, lw.o_proj));
    const at::Tensor gu = k.mm(k.rms_norm(h, lw.mlp_norm, c.rms_eps), lw.gate_up);
    h = at::add(h, k.mm(k.silu_and_mul(gu), lw.down));
  }
  const at::Tensor last = k.rms_norm(h, w.final_norm, c.rms_eps).index_select(0, logits_index);
  return k.log_softmax_f32(k.mm(last, w.lm_head));
}

}  // namespace detfuzz::graph
