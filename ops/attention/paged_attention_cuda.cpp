// Host dispatch of the fused paged attention kernel. The plan: input checks
// (validate_paged_inputs, then what the kernel needs: dtype, head dim, GQA group), the grid and
// the schedule (the rules: attention_policy.h). The run: shape and alignment checks, workspace,
// launch on the current stream.
#ifdef DETFUZZ_WITH_CUDA

#include "ops/attention/paged_attention.h"
#include "ops/attention/paged_attention_kernel.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <vector>

namespace detfuzz::attention {
namespace {

// The device's peak DRAM bandwidth (GB/s), from its memory clock (kHz) and bus width (bits): two
// attribute queries once per device (as the launchers configure their kernels once), not per plan.
double dram_gb_per_s(int device) {
  static std::once_flag queried[64];
  static double gb_per_s[64];
  std::call_once(queried[device % 64], [device] {
    int mem_khz = 0, bus_bits = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, device));
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device));
    gb_per_s[device % 64] = 2.0 * mem_khz * 1e3 * (bus_bits / 8.0) * 1e-9;
  });
  return gb_per_s[device % 64];
}

}  // namespace

std::string paged_attention_cuda_can_implement(const at::Tensor &q, const at::Tensor &k_pool) {
  if (!q.is_cuda()) return "q is not a CUDA tensor";
  if (q.scalar_type() != at::kHalf && q.scalar_type() != at::kBFloat16)
    return "dtype " + std::string(c10::toString(q.scalar_type())) + " (needs float16 or bfloat16)";
  if (q.dim() != 3 || k_pool.dim() != 4) return "q must be 3-D and k_pool 4-D";
  const int64_t d = q.size(2);
  if (d != 64 && d != 128 && d != 256) return "head dim " + std::to_string(d) + " (needs 64, 128 or 256)";
  const int64_t hkv = k_pool.size(2);
  if (hkv <= 0 || q.size(1) % hkv != 0 || q.size(1) / hkv < 1 || q.size(1) / hkv > 8)
    return "GQA group " + std::to_string(q.size(1)) + "/" + std::to_string(hkv) + " (needs an integer in 1..8)";
  return "";
}

PagedAttentionCudaPlan::PagedAttentionCudaPlan(const at::Tensor &q, const at::Tensor &k_pool, const at::Tensor &v_pool,
                                               const at::Tensor &cu_seqlens_q, const at::Tensor &seq_lens_kv,
                                               const at::Tensor &block_table, const CudaAttentionOptions &options)
    : options_(options) {
  const MetadataHost m = validate_paged_inputs(q, k_pool, v_pool, cu_seqlens_q, seq_lens_kv, block_table);
  const std::string why = paged_attention_cuda_can_implement(q, k_pool);
  TORCH_CHECK(why.empty(), "paged_attention (CUDA): cannot run this case: ", why);
  for (const auto *t : {&cu_seqlens_q, &seq_lens_kv, &block_table})
    TORCH_CHECK(t->is_cuda() && t->device() == q.device(), "paged_attention (CUDA): metadata must be on ", q.device(),
                ", got ", t->device());
  TORCH_CHECK(options.split_tokens > 0 && options.split_tokens % kKvTile == 0, "paged_attention (CUDA): split_tokens ",
              options.split_tokens, " is not a positive multiple of ", kKvTile);
  TORCH_CHECK(options.softmax_keys == 64 || options.softmax_keys == 32, "paged_attention (CUDA): softmax_keys ",
              options.softmax_keys, " is not 32 or 64");
  cu_seqlens_q_ = cu_seqlens_q.contiguous();
  seq_lens_kv_ = seq_lens_kv.contiguous();
  block_table_ = block_table.contiguous();
  num_q_ = m.num_q;
  num_seqs_ = m.num_seqs;
  max_blocks_ = m.max_blocks;
  block_size_ = m.block_size;
  num_blocks_ = k_pool.size(0);
  h_q_ = m.h_q;
  h_kv_ = m.h_kv;
  head_dim_ = m.head_dim;

  // The grid, the schedule and the splits per CTA: attention_policy.h's rules, with the options'
  // forced choices checked against what the kernels can run.
  namespace policy = attention_policy;
  const policy::KvGrid grid = policy::kv_grid(m.cu_q, m.kv_len, h_q_ / h_kv_, options.split_tokens);
  q_tiles_ = grid.q_tiles;
  max_splits_ = grid.max_splits;
  using Schedule = CudaAttentionOptions::Schedule;
  const int64_t sms = at::cuda::getDeviceProperties(q.device().index())->multiProcessorCount;
  using Kernel = CudaAttentionOptions::Kernel;
  const bool wgmma_runs = head_dim_ <= 128 && paged_attention_wgmma_available(q.device().index());
  TORCH_CHECK(options.kernel != Kernel::wgmma || wgmma_runs,
              "paged_attention (CUDA): the wgmma kernel needs an sm_90 GPU ", "and head dim 64 or 128 (head dim ",
              head_dim_, ")");
  wgmma_ = options.kernel == Kernel::wgmma || (options.kernel == Kernel::automatic && wgmma_runs);
  const double cta_pull = policy::cta_pull_over_sm_share(dram_gb_per_s(q.device().index()), sms);
  whole_rows_ = options.schedule == Schedule::whole_rows ||
                (options.schedule == Schedule::automatic &&
                 (policy::whole_rows_pays(head_dim_, grid.full_tiles, h_kv_, sms) ||
                  policy::decode_whole_rows_pays(wgmma_ && options.softmax_keys == kKvTile, head_dim_, grid, h_kv_, sms,
                                                 cta_pull)));
  TORCH_CHECK(!(whole_rows_ && head_dim_ > 128), "paged_attention (CUDA): the whole_rows schedule needs D <= 128, got ",
              head_dim_);
  TORCH_CHECK(!(whole_rows_ && options.softmax_keys != kKvTile),
              "paged_attention (CUDA): the whole_rows schedule has 64-key softmax steps only");
  TORCH_CHECK(options.schedule != Schedule::split_groups || (wgmma_ && options.softmax_keys == kKvTile),
              "paged_attention (CUDA): the split_groups schedule needs the wgmma kernel and 64-key softmax steps");
  split_groups_ =
      !whole_rows_ &&
      (options.schedule == Schedule::split_groups ||
       (options.schedule == Schedule::automatic && policy::split_groups_pays(wgmma_, options.softmax_keys)));
  TORCH_CHECK(options.splits_per_cta >= 0, "paged_attention (CUDA): splits_per_cta ", options.splits_per_cta, " < 0");
  splits_per_cta_ = options.splits_per_cta;
  if (splits_per_cta_ == 0 && !whole_rows_) {
    const int64_t slots = policy::split_slots(split_groups_, sms, [&] {
      return paged_attention_split_ctas_per_sm(static_cast<int>(head_dim_), q.scalar_type() == at::kBFloat16,
                                               wgmma_ ? AttnKernel::wgmma : AttnKernel::mma_sync, q.device().index());
    });
    splits_per_cta_ = policy::splits_per_cta(grid.tile_splits, h_kv_, slots);
  }
  if (splits_per_cta_ == 0) splits_per_cta_ = 1;
  auto grid_ctas = [&](int64_t consumers) {  // split_groups' CTAs (launch_ws's grid)
    return h_kv_ *
           split_group_ctas(static_cast<int>(max_splits_), static_cast<int>(splits_per_cta_),
                            static_cast<int>(consumers)) *
           q_tiles_ * num_seqs_;
  };
  TORCH_CHECK(options.group_consumers >= 0 && options.group_consumers <= 2, "paged_attention (CUDA): group_consumers ",
              options.group_consumers, " is not 0, 1 or 2");
  group_consumers_ = options.group_consumers > 0 ? options.group_consumers
                                                 : policy::split_group_consumers(split_groups_, grid_ctas(2), sms);
  const int64_t tile_pairs = std::min<int64_t>(64, grid.longest_q * (h_q_ / h_kv_));
  fold_ctas_ =
      options.merge == CudaAttentionOptions::Merge::automatic
          ? policy::fold_ctas(split_groups_, max_splits_, group_consumers_, splits_per_cta_, tile_pairs, wgmma_)
          : 0;
  cta_merge_ = fold_ctas_ > 0;
  early_merge_ = policy::early_merge_pays(split_groups_, max_splits_) && !cta_merge_;
  small_box_tma_ =
      policy::small_box_tma_pays(split_groups_, splits_per_cta_, grid_ctas(group_consumers_), sms, cta_pull) ||
      policy::whole_rows_small_box_tma_pays(whole_rows_ && grid.full_tiles == 0, max_splits_,
                                            h_kv_ * whole_rows_ws_ctas(static_cast<int>(q_tiles_)) * num_seqs_, sms);
}

at::Tensor PagedAttentionCudaPlan::run(const at::Tensor &q, const at::Tensor &k_pool, const at::Tensor &v_pool,
                                       double alpha) const {
  TORCH_CHECK(q.dim() == 3 && q.size(0) == num_q_ && q.size(1) == h_q_ && q.size(2) == head_dim_,
              "paged_attention (CUDA): q ", q.sizes(), " does not match the plan's [", num_q_, ", ", h_q_, ", ",
              head_dim_, "]");
  for (const auto *t : {&k_pool, &v_pool})
    TORCH_CHECK(t->dim() == 4 && t->size(0) == num_blocks_ && t->size(1) == block_size_ && t->size(2) == h_kv_ &&
                    t->size(3) == head_dim_ && t->scalar_type() == q.scalar_type() && t->device() == q.device(),
                "paged_attention (CUDA): pool ", t->sizes(), " ", t->scalar_type(), " does not match the plan's [",
                num_blocks_, ", ", block_size_, ", ", h_kv_, ", ", head_dim_, "] ", q.scalar_type());
  TORCH_CHECK(q.device() == cu_seqlens_q_.device(), "paged_attention (CUDA): q on ", q.device(), ", the plan on ",
              cu_seqlens_q_.device());
  const c10::cuda::CUDAGuard guard(q.device());
  const auto qc = q.contiguous(), kc = k_pool.contiguous(), vc = v_pool.contiguous();
  for (const auto *t : {&qc, &kc, &vc})
    TORCH_CHECK(reinterpret_cast<uintptr_t>(t->data_ptr()) % 16 == 0,
                "paged_attention (CUDA): q and the pools must be 16-byte aligned (storage offset ", t->storage_offset(),
                ")");
  auto out = at::empty({num_q_, h_q_, head_dim_}, q.options());
  if (num_q_ == 0) return out;

  PagedAttnLaunch p;
  p.bf16 = q.scalar_type() == at::kBFloat16;
  p.q = qc.data_ptr();
  p.k_pool = kc.data_ptr();
  p.v_pool = vc.data_ptr();
  p.cu_seqlens_q = cu_seqlens_q_.data_ptr<int32_t>();
  p.seq_lens_kv = seq_lens_kv_.data_ptr<int32_t>();
  p.block_table = block_table_.data_ptr<int32_t>();
  p.out = out.data_ptr();
  p.num_rows = static_cast<int>(num_q_);
  p.num_seqs = static_cast<int>(num_seqs_);
  p.max_blocks = static_cast<int>(max_blocks_);
  p.block_size = static_cast<int>(block_size_);
  p.pool_blocks = num_blocks_;
  p.h_q = static_cast<int>(h_q_);
  p.h_kv = static_cast<int>(h_kv_);
  p.head_dim = static_cast<int>(head_dim_);
  p.split_tokens = static_cast<int>(options_.split_tokens);
  p.softmax_keys = static_cast<int>(options_.softmax_keys);
  p.q_tiles = static_cast<int>(q_tiles_);
  p.max_splits = static_cast<int>(max_splits_);
  p.splits_per_cta = static_cast<int>(splits_per_cta_);
  p.group_consumers = static_cast<int>(group_consumers_);
  p.schedule = whole_rows_     ? KvSchedule::whole_rows
               : split_groups_ ? KvSchedule::split_groups
                               : KvSchedule::split_per_cta;
  p.kernel = wgmma_ ? AttnKernel::wgmma : AttnKernel::mma_sync;
  p.kv_loads = options_.kv_loads == CudaAttentionOptions::KvLoads::tma        ? KvLoads::tma
               : options_.kv_loads == CudaAttentionOptions::KvLoads::cp_async ? KvLoads::cp_async
               : small_box_tma_                                               ? KvLoads::tma
                                                                              : KvLoads::automatic;
  p.pingpong = options_.turns != CudaAttentionOptions::ConsumerTurns::free;
  p.early_merge = early_merge_;
  p.cta_merge = cta_merge_;
  p.fold_ctas = static_cast<int>(std::max<int64_t>(fold_ctas_, 1));
  p.scale_log2 = softmax_scale_log2(alpha, head_dim_);
  at::Tensor part_acc, part_ml;
  if (!whole_rows_ && max_splits_ > 1 && !cta_merge_) {  // the splits' states for the merge kernel
    const auto f32 = q.options().dtype(at::kFloat);
    part_acc = at::empty({num_q_, h_q_, max_splits_, head_dim_}, f32);
    part_ml = at::empty({num_q_, h_q_, max_splits_, 2}, f32);
    p.part_acc = part_acc.data_ptr<float>();
    p.part_ml = part_ml.data_ptr<float>();
  }
  launch_paged_attention(p, at::cuda::getCurrentCUDAStream());
  return out;
}

at::Tensor paged_attention_cuda(const at::Tensor &q, const at::Tensor &k_pool, const at::Tensor &v_pool,
                                const at::Tensor &cu_seqlens_q, const at::Tensor &seq_lens_kv,
                                const at::Tensor &block_table, double alpha, const CudaAttentionOptions &options) {
  return PagedAttentionCudaPlan(q, k_pool, v_pool, cu_seqlens_q, seq_lens_kv, block_table, options)
      .run(q, k_pool, v_pool, alpha);
}

}  // namespace detfuzz::attention

#endif  // DETFUZZ_WITH_CUDA
