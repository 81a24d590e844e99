// Paged KV cache: a block allocator, per-layer K and V pools shaped [num_blocks, block_size,
// H_kv, D], set_kv scattering new tokens through the flat [num_blocks*block_size, H_kv, D] view
// by slot_mapping, and the three metadata tensors every paged attention kernel takes:
//
//   cu_seqlens_q [S+1]             int32  prefix sum of query lengths, starts at 0, ends at T_q
//   seq_lens_kv  [S]               int32  cached length of each sequence (its new tokens included)
//   block_table  [S, max_blocks]   int32  page ids of each sequence, right-padded (padding unread)
//
// Query row q (0-based within its sequence s) sees keys 0 .. seq_lens_kv[s] - q_len[s] + q of
// sequence s only (bottom-right causal mask). q_len <= kv_len is required, so no row is ever
// fully masked. A sequence with q_len = 0 is allowed (it produces no rows; kv_len may be 0 then).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace detfuzz::attention {

// Hands out physical page ids. allocate() pops from a free list; the order in which ids come out
// is the allocator's business (the block_placement property checks that it does not matter).
class BlockAllocator {
 public:
  explicit BlockAllocator(int64_t num_blocks);
  int64_t allocate();  // throws std::runtime_error when exhausted
  std::vector<int64_t> allocate(int64_t count);
  void free(int64_t block);  // throws on a double free or a bad id
  int64_t num_free() const { return static_cast<int64_t>(free_.size()); }
  int64_t num_blocks() const { return num_blocks_; }

 private:
  int64_t num_blocks_;
  std::vector<int64_t> free_;  // popped from the back
  std::vector<bool> used_;
};

// Flat slot of token `pos` of a sequence whose pages are `blocks`: block * block_size + within.
int64_t slot_of(const std::vector<int64_t> &blocks, int64_t block_size, int64_t pos);

struct KVCacheConfig {
  int64_t num_layers = 1;
  int64_t num_blocks = 0;
  int64_t block_size = 16;
  int64_t num_kv_heads = 1;
  int64_t head_dim = 64;
  at::ScalarType dtype = at::kBFloat16;
  at::Device device = at::kCPU;
};

class KVCache {
 public:
  // Pools are allocated with at::empty and filled with a NaN pattern, so that a read of a slot
  // nothing wrote shows up in any result instead of passing as a plausible zero.
  explicit KVCache(const KVCacheConfig &config);
  const KVCacheConfig &config() const { return config_; }
  const at::Tensor &k(int64_t layer) const;  // [num_blocks, block_size, H_kv, D]
  const at::Tensor &v(int64_t layer) const;
  // Writes k[i], v[i] ([T, H_kv, D]) to flat slot slot_mapping[i] (int64 [T]) of layer `layer`,
  // through the [num_blocks*block_size, H_kv, D] view of the pools (same bytes).
  // The slot range is checked on the host (a sync), except while the current CUDA stream is
  // capturing a graph (the graph runner checks its slots before filling its buffers).
  void set_kv(int64_t layer, const at::Tensor &slot_mapping, const at::Tensor &k, const at::Tensor &v);
  // set_kv's checks of slot_mapping (the range on the host, outside a capture), for a kernel that
  // writes the slots itself (cuda_ops::rope_store_kv). Every layer's pool has the same slots.
  void check_slots(const at::Tensor &slot_mapping) const;
  // A copy of both pools of every layer (to snapshot and compare cache states).
  KVCache clone() const;

 private:
  KVCacheConfig config_;
  std::vector<at::Tensor> k_, v_;
};

// The metadata tensors, built from host values (int32, on `device`).
struct AttnMetadata {
  at::Tensor cu_seqlens_q, seq_lens_kv, block_table;
};
AttnMetadata make_metadata(const std::vector<int64_t> &q_lens, const std::vector<int64_t> &kv_lens,
                           const std::vector<std::vector<int64_t>> &blocks, int64_t max_blocks, at::Device device);

// Host copy of validated metadata.
struct MetadataHost {
  int64_t num_seqs = 0, max_blocks = 0, num_q = 0, num_blocks = 0, block_size = 0;
  int64_t h_q = 0, h_kv = 0, head_dim = 0;
  std::vector<int32_t> cu_q, kv_len, table;  // table is [num_seqs * max_blocks] row-major
  int64_t q_len(int64_t s) const { return cu_q[s + 1] - cu_q[s]; }
  int32_t block(int64_t s, int64_t j) const { return table[s * max_blocks + j]; }
};

// Checks every shape, dtype, device and value the kernels rely on (TORCH_CHECK, naming the bad
// value): q [T_q, H_q, D] with H_q a multiple of H_kv; k_pool, v_pool [NB, BS, H_kv, D] of q's
// dtype; int32 metadata of consistent sizes; cu_seqlens_q from 0, non-decreasing, ending at T_q;
// 0 <= q_len <= kv_len <= max_blocks * BS; every block id a sequence uses in [0, NB).
// Copies the metadata to the host (a device sync on CUDA).
// allow_rows_without_keys lifts q_len <= kv_len (graph slots, see paged_attention_split_cpu).
MetadataHost validate_paged_inputs(const at::Tensor &q, const at::Tensor &k_pool, const at::Tensor &v_pool,
                                   const at::Tensor &cu_seqlens_q, const at::Tensor &seq_lens_kv,
                                   const at::Tensor &block_table, bool allow_rows_without_keys = false);

// Path A's gather: sequence s's used pages of `pool` [NB, BS, H_kv, D], flattened to its
// [kv_len, H_kv, D] keys (or values), on the pool's device and in its dtype.
at::Tensor gather_sequence(const at::Tensor &pool, const MetadataHost &m, int64_t s);

}  // namespace detfuzz::attention
