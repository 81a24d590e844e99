// A small transformer made only of detfuzz's kernels, for the graph-replay and scheduling
// properties: the forward pass an inference engine runs, small enough to fuzz by the thousand.
//
//   h = embedding(ids)                          (or the batch's input_embeds)
//   per layer:  x = rms_norm(h);  q, k, v = x @ W_qkv;  q, k = rope(q, k, positions)
//               set_kv(out_cache_loc, k, v);    a = paged_attention(q, pools, metadata)
//               h = h + a @ W_o;  x = rms_norm(h);  h = h + silu_and_mul(x @ W_gate_up) @ W_down
//   logprobs = log_softmax(rms_norm(h)[logits_index] @ W_lm, float32)    one row per sequence
//
// Every op is row-wise (a token's row depends on its own inputs), so a sequence's log-probs
// depend on its own tokens and cached keys alone: the claim the properties check, bitwise.
// Residual adds are at::add: one element-wise rounding, the same bits on every kernel.
// Weights are drawn from a seed by the counter-based generator (ops/counter_rng.h), so any
// machine rebuilds the same model bit for bit.
#pragma once

#include "ops/attention/kv_cache.h"
#include "ops/registry.h"

#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace detfuzz::graph {

struct ModelConfig {
  int64_t vocab = 128, hidden = 64, layers = 2;
  int64_t q_heads = 4, kv_heads = 2, head_dim = 16;  // GQA: q_heads a multiple of kv_heads
  int64_t mlp = 128;                                 // SiLU-gated MLP width
  at::ScalarType dtype = at::kBFloat16;              // bfloat16 or float16
  double rope_theta = 10000.0, rms_eps = 1e-6;
  uint64_t weight_seed = 1;

  void validate() const;         // TORCH_CHECK, naming the bad field
  std::string describe() const;  // "vocab=128 hidden=64 ..."
};

struct LayerWeights {
  at::Tensor attn_norm, qkv, o_proj, mlp_norm, gate_up, down;  // matrices stored [in, out]
};
struct ModelWeights {
  at::Tensor embed;  // [vocab, hidden]
  std::vector<LayerWeights> layers;
  at::Tensor final_norm, lm_head;  // [hidden], [hidden, vocab]
};
ModelWeights make_weights(const ModelConfig &config, at::Device device);

// The inputs of one forward pass over a packed ragged batch: S sequences, T new tokens. These
// are the slots of the buffer registry (buffer_registry.h); a slot may be absent (nullopt).
struct ForwardBatch {
  std::optional<at::Tensor> input_ids;          // int64 [T]
  std::optional<at::Tensor> input_embeds;       // [T, hidden] in the model's dtype: replaces input_ids
  std::optional<at::Tensor> positions;          // int64 [T]
  std::optional<at::Tensor> out_cache_loc;      // int64 [T]: the KV slot each token writes
  std::optional<at::Tensor> cu_seqlens_q;       // int32 [S+1]
  std::optional<at::Tensor> seq_lens;           // int32 [S]: cached tokens after this pass (kv_len)
  std::optional<at::Tensor> block_table;        // int32 [S, max_blocks]
  std::optional<at::Tensor> logits_index;       // int64 [S]: the row of each sequence's last token
  std::optional<at::Tensor> global_num_tokens;  // int64 [S], each T (what data-parallel attention syncs)
  int64_t batch_size = 0, num_tokens = 0;
};

// The kernels a forward runs: ours (`invariant`), or libtorch's defaults (`torch`).
struct Kernels {
  std::string name;
  std::function<at::Tensor(const at::Tensor &, const at::Tensor &)> mm;
  std::function<at::Tensor(const at::Tensor &, const at::Tensor &, double)> rms_norm;
  std::function<at::Tensor(const at::Tensor &)> silu_and_mul;
  std::function<at::Tensor(const at::Tensor &, const at::Tensor &, double)> rope;
  std::function<at::Tensor(const at::Tensor &, const at::Tensor &)> embedding;
  std::function<at::Tensor(const at::Tensor &)> log_softmax_f32;  // last dim, float32 out
  // Optional, one launch for rope over Q and K and the cache write of K and V, with their bits
  // (cuda_ops::rope_store_kv): (qkv, positions, theta, q_heads, kv_heads, slots, k_pool, v_pool) -> Q.
  // Unset, the forward runs rope twice and KVCache::set_kv.
  std::function<at::Tensor(const at::Tensor &, const at::Tensor &, double, int64_t, int64_t, const at::Tensor &,
                           const at::Tensor &, const at::Tensor &)>
      rope_store_kv;
};
Kernels invariant_kernels(Backend backend);
Kernels torch_kernels(Backend backend);

// Paged attention over one batch's metadata, for every layer: planned once per batch (eager) or
// once per captured bucket (graph); `run` launches only.
class AttentionStep {
 public:
  virtual ~AttentionStep() = default;
  virtual at::Tensor run(const at::Tensor &q, const at::Tensor &k_pool, const at::Tensor &v_pool) const = 0;
};
// Our fixed-split attention (CPU) or fused kernel (CUDA) over the batch's metadata.
// rows_without_keys: the batch has graph slots whose padding rows see no key (see the runner).
std::unique_ptr<AttentionStep> invariant_attention(const ForwardBatch &batch, const ModelConfig &config,
                                                   const attention::KVCache &cache, bool rows_without_keys);
// libtorch's SDPA per sequence (the `torch-sdpa` baseline of paged_attention), eager only.
std::unique_ptr<AttentionStep> torch_attention(const ForwardBatch &batch, Backend backend);

class Model {
 public:
  Model(ModelConfig config, Backend backend, Kernels kernels);
  // A model over weights made elsewhere (a bench's random weights of a large config, drawn on the
  // device): each must have the config's shape and dtype and sit on the backend's device.
  Model(ModelConfig config, Backend backend, Kernels kernels, ModelWeights weights);
  const ModelConfig &config() const { return config_; }
  Backend backend() const { return backend_; }
  const Kernels &kernels() const { return kernels_; }
  const ModelWeights &weights() const { return weights_; }
  at::Device device() const;

  // One forward pass: writes the new tokens' K/V into `cache` (by out_cache_loc) and returns
  // float32 log-probs [S, vocab] at logits_index. No host synchronisation and no allocation
  // outside the caching allocator: a CUDA graph can capture it.
  at::Tensor forward(const ForwardBatch &batch, attention::KVCache &cache, const AttentionStep &attention) const;

  // A KV cache that fits this model: block 0 is the graph runner's scratch page.
  attention::KVCache make_cache(int64_t num_blocks, int64_t block_size) const;

 private:
  ModelConfig config_;
  Backend backend_;
  Kernels kernels_;
  ModelWeights weights_;
};

}  // namespace detfuzz::graph
