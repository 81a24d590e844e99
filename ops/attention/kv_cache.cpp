#include "ops/attention/kv_cache.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

#ifdef DETFUZZ_WITH_CUDA
#include "ops/cuda/cuda_check.h"

#include <c10/cuda/CUDAStream.h>
#endif

namespace detfuzz::attention {
namespace {

// Whether t's device's current stream is capturing a CUDA graph (no host syncs allowed then).
bool capturing_graph(const at::Tensor &t) {
#ifdef DETFUZZ_WITH_CUDA
  if (!t.is_cuda()) return false;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  DETFUZZ_CUDA_CHECK(cudaStreamIsCapturing(c10::cuda::getCurrentCUDAStream(t.device().index()).stream(), &status));
  return status != cudaStreamCaptureStatusNone;
#else
  (void)t;
  return false;
#endif
}

}  // namespace

BlockAllocator::BlockAllocator(int64_t num_blocks) : num_blocks_(num_blocks), used_(num_blocks, false) {
  TORCH_CHECK(num_blocks >= 0, "BlockAllocator: num_blocks must be >= 0, got ", num_blocks);
  free_.reserve(num_blocks);
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);  // hands out 0, 1, 2, ...
}

int64_t BlockAllocator::allocate() {
  if (free_.empty())
    throw std::runtime_error("BlockAllocator: out of blocks (all " + std::to_string(num_blocks_) + " in use)");
  const int64_t b = free_.back();
  free_.pop_back();
  used_[b] = true;
  return b;
}

std::vector<int64_t> BlockAllocator::allocate(int64_t count) {
  if (count > num_free())
    throw std::runtime_error("BlockAllocator: asked for " + std::to_string(count) + " blocks, " +
                             std::to_string(num_free()) + " free");
  std::vector<int64_t> out;
  for (int64_t i = 0; i < count; ++i) out.push_back(allocate());
  return out;
}

void BlockAllocator::free(int64_t block) {
  TORCH_CHECK(block >= 0 && block < num_blocks_, "BlockAllocator::free: block id ", block, " out of range [0, ",
              num_blocks_, ")");
  TORCH_CHECK(used_[block], "BlockAllocator::free: block ", block, " is not allocated (double free?)");
  used_[block] = false;
  free_.push_back(block);
}

int64_t slot_of(const std::vector<int64_t> &blocks, int64_t block_size, int64_t pos) {
  const int64_t j = pos / block_size;
  TORCH_CHECK(j < static_cast<int64_t>(blocks.size()), "slot_of: token ", pos, " needs page ", j,
              " but the sequence has ", blocks.size(), " pages of ", block_size);
  return blocks[j] * block_size + pos % block_size;
}

KVCache::KVCache(const KVCacheConfig &c) : config_(c) {
  TORCH_CHECK(c.num_layers > 0 && c.num_blocks > 0 && c.block_size > 0 && c.num_kv_heads > 0 && c.head_dim > 0,
              "KVCache: every size must be positive (layers ", c.num_layers, ", blocks ", c.num_blocks, ", block_size ",
              c.block_size, ", kv heads ", c.num_kv_heads, ", head_dim ", c.head_dim, ")");
  const auto opts = at::TensorOptions().dtype(c.dtype).device(c.device);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    for (auto *pools : {&k_, &v_}) {
      auto t = at::empty({c.num_blocks, c.block_size, c.num_kv_heads, c.head_dim}, opts);
      t.fill_(std::numeric_limits<float>::quiet_NaN());
      pools->push_back(t);
    }
  }
}

const at::Tensor &KVCache::k(int64_t layer) const {
  TORCH_CHECK(layer >= 0 && layer < config_.num_layers, "KVCache: layer ", layer, " out of range");
  return k_[layer];
}
const at::Tensor &KVCache::v(int64_t layer) const {
  TORCH_CHECK(layer >= 0 && layer < config_.num_layers, "KVCache: layer ", layer, " out of range");
  return v_[layer];
}

void KVCache::check_slots(const at::Tensor &slot_mapping) const {
  const auto &c = config_;
  TORCH_CHECK(slot_mapping.dim() == 1, "set_kv: slot_mapping must be 1-D, got ", slot_mapping.sizes());
  TORCH_CHECK(slot_mapping.scalar_type() == at::kLong || slot_mapping.scalar_type() == at::kInt,
              "set_kv: slot_mapping must be int64 or int32, got ", slot_mapping.scalar_type());
  const int64_t t = slot_mapping.size(0), slots = c.num_blocks * c.block_size;
  if (t > 0 && !capturing_graph(slot_mapping)) {
    const auto sm = slot_mapping.to(at::kCPU, at::kLong).contiguous();
    const int64_t *ids = sm.const_data_ptr<int64_t>();
    const auto [lo, hi] = std::minmax_element(ids, ids + t);
    TORCH_CHECK(*lo >= 0 && *hi < slots, "set_kv: slot_mapping holds ", (*lo < 0 ? *lo : *hi), ", outside [0, ", slots,
                ")");
  }
}

void KVCache::set_kv(int64_t layer, const at::Tensor &slot_mapping, const at::Tensor &k, const at::Tensor &v) {
  const auto &c = config_;
  TORCH_CHECK(layer >= 0 && layer < c.num_layers, "set_kv: layer ", layer, " out of range [0, ", c.num_layers, ")");
  check_slots(slot_mapping);
  const int64_t t = slot_mapping.size(0);
  for (const auto *x : {&k, &v})
    TORCH_CHECK(x->dim() == 3 && x->size(0) == t && x->size(1) == c.num_kv_heads && x->size(2) == c.head_dim,
                "set_kv: k and v must be [", t, ", ", c.num_kv_heads, ", ", c.head_dim, "], got ", x->sizes());
  const int64_t slots = c.num_blocks * c.block_size;
  if (t > 0 && c.device.is_cpu() && slot_mapping.device().is_cpu() && k.device().is_cpu() && v.device().is_cpu() &&
      k.scalar_type() == c.dtype && v.scalar_type() == c.dtype) {
    // On the host: each token's K and V row copied to its slot in token order (as index_copy_
    // on one thread), without a round of ATen ops per call.
    const auto sm = slot_mapping.to(at::kLong).contiguous();
    const int64_t *ids = sm.const_data_ptr<int64_t>();
    const at::Tensor kc = k.contiguous(), vc = v.contiguous();
    const size_t row = static_cast<size_t>(c.num_kv_heads * c.head_dim) * kc.element_size();
    auto *k_pool = static_cast<char *>(k_[layer].data_ptr()), *v_pool = static_cast<char *>(v_[layer].data_ptr());
    const auto *k_rows = static_cast<const char *>(kc.const_data_ptr()),
               *v_rows = static_cast<const char *>(vc.const_data_ptr());
    for (int64_t i = 0; i < t; ++i) {
      std::memcpy(k_pool + ids[i] * row, k_rows + i * row, row);
      std::memcpy(v_pool + ids[i] * row, v_rows + i * row, row);
    }
    return;
  }
  // The flat view: same bytes as [NB, BS, H_kv, D], indexed per token. Indexing the un-viewed
  // pool would select whole blocks.
  auto kf = k_[layer].view({slots, c.num_kv_heads, c.head_dim});
  auto vf = v_[layer].view({slots, c.num_kv_heads, c.head_dim});
  const auto idx = slot_mapping.to(kf.device(), at::kLong);
  kf.index_copy_(0, idx, k.to(kf.device(), c.dtype));
  vf.index_copy_(0, idx, v.to(vf.device(), c.dtype));
}

KVCache KVCache::clone() const {
  KVCache copy = *this;
  for (auto &t : copy.k_) t = t.clone();
  for (auto &t : copy.v_) t = t.clone();
  return copy;
}

AttnMetadata make_metadata(const std::vector<int64_t> &q_lens, const std::vector<int64_t> &kv_lens,
                           const std::vector<std::vector<int64_t>> &blocks, int64_t max_blocks, at::Device device) {
  const int64_t s = static_cast<int64_t>(q_lens.size());
  TORCH_CHECK(static_cast<int64_t>(kv_lens.size()) == s && static_cast<int64_t>(blocks.size()) == s,
              "make_metadata: ", s, " query lengths, ", kv_lens.size(), " kv lengths, ", blocks.size(), " block lists");
  auto cu = at::empty({s + 1}, at::kInt), kv = at::empty({s}, at::kInt), bt = at::empty({s, max_blocks}, at::kInt);
  auto *cup = cu.data_ptr<int32_t>();
  auto *kvp = kv.data_ptr<int32_t>();
  auto *btp = bt.data_ptr<int32_t>();
  cup[0] = 0;
  for (int64_t i = 0; i < s; ++i) {
    cup[i + 1] = static_cast<int32_t>(cup[i] + q_lens[i]);
    kvp[i] = static_cast<int32_t>(kv_lens[i]);
    TORCH_CHECK(static_cast<int64_t>(blocks[i].size()) <= max_blocks, "make_metadata: sequence ", i, " has ",
                blocks[i].size(), " pages, more than max_blocks ", max_blocks);
    for (int64_t j = 0; j < max_blocks; ++j)
      btp[i * max_blocks + j] = j < static_cast<int64_t>(blocks[i].size()) ? static_cast<int32_t>(blocks[i][j]) : -1;
  }
  return {cu.to(device), kv.to(device), bt.to(device)};
}

MetadataHost validate_paged_inputs(const at::Tensor &q, const at::Tensor &k_pool, const at::Tensor &v_pool,
                                   const at::Tensor &cu_seqlens_q, const at::Tensor &seq_lens_kv,
                                   const at::Tensor &block_table, bool allow_rows_without_keys) {
  TORCH_CHECK(q.dim() == 3, "paged_attention: q must be [T_q, H_q, D], got ", q.sizes());
  TORCH_CHECK(k_pool.dim() == 4, "paged_attention: k_pool must be [num_blocks, block_size, H_kv, D], got ",
              k_pool.sizes());
  TORCH_CHECK(v_pool.sizes() == k_pool.sizes(), "paged_attention: v_pool ", v_pool.sizes(), " must match k_pool ",
              k_pool.sizes());
  TORCH_CHECK(k_pool.scalar_type() == q.scalar_type() && v_pool.scalar_type() == q.scalar_type(),
              "paged_attention: q, k_pool, v_pool must share a dtype, got ", q.scalar_type(), ", ",
              k_pool.scalar_type(), ", ", v_pool.scalar_type());
  TORCH_CHECK(k_pool.device() == q.device() && v_pool.device() == q.device(),
              "paged_attention: q, k_pool, v_pool must be on one device, got ", q.device(), ", ", k_pool.device(), ", ",
              v_pool.device());
  MetadataHost m;
  m.num_q = q.size(0);
  m.h_q = q.size(1);
  m.head_dim = q.size(2);
  m.num_blocks = k_pool.size(0);
  m.block_size = k_pool.size(1);
  m.h_kv = k_pool.size(2);
  TORCH_CHECK(k_pool.size(3) == m.head_dim, "paged_attention: k_pool head dim ", k_pool.size(3), " != q head dim ",
              m.head_dim);
  TORCH_CHECK(m.h_kv > 0 && m.h_q > 0 && m.h_q % m.h_kv == 0, "paged_attention: H_q (", m.h_q,
              ") must be a positive multiple of H_kv (", m.h_kv, ")");
  TORCH_CHECK(m.block_size > 0 && m.head_dim > 0, "paged_attention: block_size ", m.block_size, " and head dim ",
              m.head_dim, " must be positive");
  const std::pair<const at::Tensor *, const char *> metas[] = {
      {&cu_seqlens_q, "cu_seqlens_q"}, {&seq_lens_kv, "seq_lens_kv"}, {&block_table, "block_table"}};
  for (const auto &[t, name] : metas)
    TORCH_CHECK(t->scalar_type() == at::kInt, "paged_attention: ", name, " must be int32, got ", t->scalar_type(),
                " (an int64 ", name, " is a common mistake: convert with .to(torch.int32))");
  TORCH_CHECK(cu_seqlens_q.dim() == 1 && cu_seqlens_q.size(0) >= 1, "paged_attention: cu_seqlens_q must be [S+1], got ",
              cu_seqlens_q.sizes());
  m.num_seqs = cu_seqlens_q.size(0) - 1;
  TORCH_CHECK(seq_lens_kv.dim() == 1 && seq_lens_kv.size(0) == m.num_seqs, "paged_attention: seq_lens_kv must be [",
              m.num_seqs, "] (S from cu_seqlens_q), got ", seq_lens_kv.sizes());
  TORCH_CHECK(block_table.dim() == 2 && block_table.size(0) == m.num_seqs, "paged_attention: block_table must be [",
              m.num_seqs, ", max_blocks], got ", block_table.sizes());
  m.max_blocks = block_table.size(1);

  auto host = [](const at::Tensor &t) {
    const auto c = t.to(at::kCPU).contiguous();
    return std::vector<int32_t>(c.data_ptr<int32_t>(), c.data_ptr<int32_t>() + c.numel());
  };
  m.cu_q = host(cu_seqlens_q);
  m.kv_len = host(seq_lens_kv);
  m.table = host(block_table);
  TORCH_CHECK(m.cu_q[0] == 0, "paged_attention: cu_seqlens_q[0] must be 0, got ", m.cu_q[0]);
  TORCH_CHECK(m.cu_q[m.num_seqs] == m.num_q, "paged_attention: cu_seqlens_q[", m.num_seqs, "] = ", m.cu_q[m.num_seqs],
              " must equal the number of query rows T_q = ", m.num_q);
  const int64_t capacity = m.max_blocks * m.block_size;
  for (int64_t s = 0; s < m.num_seqs; ++s) {
    const int64_t ql = m.q_len(s), kl = m.kv_len[s];
    TORCH_CHECK(ql >= 0, "paged_attention: cu_seqlens_q decreases at sequence ", s, " (", m.cu_q[s], " then ",
                m.cu_q[s + 1], ")");
    TORCH_CHECK(kl >= 0, "paged_attention: seq_lens_kv[", s, "] = ", kl, " is negative");
    TORCH_CHECK(kl <= capacity, "paged_attention: seq_lens_kv[", s, "] = ", kl, " exceeds the block table's capacity ",
                m.max_blocks, " blocks x ", m.block_size, " = ", capacity);
    TORCH_CHECK(allow_rows_without_keys || ql <= kl, "paged_attention: sequence ", s, " has a query of ", ql,
                " tokens but only ", kl, " cached tokens (seq_lens_kv[", s, "] = ", kl, "): q_len must be <= kv_len");
    const int64_t used = (kl + m.block_size - 1) / m.block_size;
    for (int64_t j = 0; j < used; ++j) {
      const int64_t b = m.block(s, j);
      TORCH_CHECK(b >= 0 && b < m.num_blocks, "paged_attention: block_table[", s, ", ", j, "] = ", b,
                  " is out of range [0, ", m.num_blocks, ")");
    }
  }
  return m;
}

at::Tensor gather_sequence(const at::Tensor &pool, const MetadataHost &m, int64_t s) {
  const int64_t kl = m.kv_len[s];
  const int64_t used = (kl + m.block_size - 1) / m.block_size;
  auto ids = at::empty({used}, at::kLong);
  for (int64_t j = 0; j < used; ++j) ids.data_ptr<int64_t>()[j] = m.block(s, j);
  return pool.index_select(0, ids.to(pool.device())).reshape({-1, m.h_kv, m.head_dim}).slice(0, 0, kl);
}

}  // namespace detfuzz::attention
