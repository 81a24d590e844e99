// Impls of op "paged_attention". OpArgs::tensors = {q [T_q, H_q, D], k_pool [NB, BS, H_kv, D],
// v_pool, cu_seqlens_q [S+1], seq_lens_kv [S], block_table [S, max_blocks]} (int32 metadata);
// OpArgs::alpha = softmax scale, 0 = 1/sqrt(D). Output [T_q, H_q, D] in q's dtype.
#include "ops/attention/paged_attention.h"
#ifdef DETFUZZ_WITH_CUDA
#include "ops/attention/paged_attention_kernel.h"
#endif
#include "ops/registry.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <array>
#include <functional>

namespace detfuzz {
namespace {

using namespace attention;

void check_arity(const OpArgs &a) {
  TORCH_CHECK(a.tensors.size() == 6,
              "paged_attention takes 6 tensors {q, k_pool, v_pool, cu_seqlens_q, seq_lens_kv, block_table}, got ",
              a.tensors.size());
}

at::Tensor run_reference(const OpArgs &a) {
  check_arity(a);
  const auto &t = a.tensors;
  return paged_attention_reference(t[0], t[1], t[2], t[3], t[4], t[5], a.alpha);
}

OpFn split_cpu(PlanFn plan) {
  return [plan](const OpArgs &a) {
    check_arity(a);
    const auto &t = a.tensors;
    return paged_attention_split_cpu(t[0], t[1], t[2], t[3], t[4], t[5], a.alpha, plan);
  };
}

// Baseline: libtorch's scaled_dot_product_attention per sequence over the gathered contiguous K,
// V (GQA by repeat_interleave) with an explicit bottom-right causal mask.
at::Tensor run_torch_sdpa(const OpArgs &a) {
  check_arity(a);
  const auto &t = a.tensors;
  const MetadataHost m = validate_paged_inputs(t[0], t[1], t[2], t[3], t[4], t[5]);
  const int64_t D = m.head_dim, group = m.h_q / m.h_kv;
  const double scale = softmax_scale(a.alpha, D);
  std::vector<at::Tensor> outs;
  for (int64_t s = 0; s < m.num_seqs; ++s) {
    const int64_t ql = m.q_len(s), kl = m.kv_len[s];
    if (ql == 0) continue;
    auto ks = gather_sequence(t[1], m, s);
    auto vs = gather_sequence(t[2], m, s);
    if (group > 1) {
      ks = ks.repeat_interleave(group, 1);
      vs = vs.repeat_interleave(group, 1);
    }
    const auto qs = t[0].slice(0, m.cu_q[s], m.cu_q[s + 1]).transpose(0, 1).unsqueeze(0);
    auto rows = at::arange(ql, at::TensorOptions().dtype(at::kLong).device(t[0].device())).unsqueeze(1);
    auto cols = at::arange(kl, at::TensorOptions().dtype(at::kLong).device(t[0].device())).unsqueeze(0);
    const auto mask = cols <= rows + (kl - ql);
    auto o = at::scaled_dot_product_attention(qs, ks.transpose(0, 1).unsqueeze(0), vs.transpose(0, 1).unsqueeze(0),
                                              mask, 0.0, false, scale);
    outs.push_back(o.squeeze(0).transpose(0, 1));
  }
  if (outs.empty()) return at::empty({0, m.h_q, D}, t[0].options());
  return at::cat(outs, 0).contiguous();
}

#ifdef DETFUZZ_WITH_CUDA
// Lets one of libtorch's SDPA backends run while the guard lives (the others off), restoring the
// user's choice after: at::scaled_dot_product_attention then either runs that backend (its own
// mask handling, GQA expansion and alignment padding included) or throws "no available kernel".
class OnlySdpaBackend {
 public:
  enum Backend { cudnn, efficient };
  explicit OnlySdpaBackend(Backend b) {
    auto &ctx = at::globalContext();
    saved_ = {ctx.userEnabledFlashSDP(), ctx.userEnabledMemEfficientSDP(), ctx.userEnabledMathSDP(),
              ctx.userEnabledCuDNNSDP()};
    ctx.setSDPUseFlash(false);
    ctx.setSDPUseMath(false);
    ctx.setSDPUseMemEfficient(b == efficient);
    ctx.setSDPUseCuDNN(b == cudnn);
  }
  ~OnlySdpaBackend() {
    auto &ctx = at::globalContext();
    ctx.setSDPUseFlash(saved_[0]);
    ctx.setSDPUseMemEfficient(saved_[1]);
    ctx.setSDPUseMath(saved_[2]);
    ctx.setSDPUseCuDNN(saved_[3]);
  }
  OnlySdpaBackend(const OnlySdpaBackend &) = delete;
  OnlySdpaBackend &operator=(const OnlySdpaBackend &) = delete;

 private:
  std::array<bool, 4> saved_{};
};

OpFn sdpa_only(OnlySdpaBackend::Backend b) {
  return [b](const OpArgs &a) {
    OnlySdpaBackend only(b);
    return run_torch_sdpa(a);
  };
}

// Baseline: libtorch's FlashAttention-2 in varlen form, the way engines call it: one launch over
// the ragged batch, q packed [T_q, H_q, D] with cu_seqlens_q, each sequence's K/V gathered from
// its pages into one packed [T_k, H_kv, D] with cumulative lengths, GQA native, is_causal (which
// FlashAttention-2 aligns bottom-right, as chunked prefill needs).
at::Tensor run_torch_flash_varlen(const OpArgs &a) {
  check_arity(a);
  const auto &t = a.tensors;
  const MetadataHost m = validate_paged_inputs(t[0], t[1], t[2], t[3], t[4], t[5]);
  std::vector<at::Tensor> ks, vs;
  std::vector<int32_t> cu_k = {0};
  int64_t max_q = 0, max_k = 0;
  for (int64_t s = 0; s < m.num_seqs; ++s) {
    ks.push_back(gather_sequence(t[1], m, s));
    vs.push_back(gather_sequence(t[2], m, s));
    cu_k.push_back(cu_k.back() + static_cast<int32_t>(m.kv_len[s]));
    max_q = std::max(max_q, m.q_len(s));
    max_k = std::max<int64_t>(max_k, m.kv_len[s]);
  }
  if (m.num_q == 0) return at::empty({0, m.h_q, m.head_dim}, t[0].options());
  const at::Tensor k = at::cat(ks, 0).contiguous(), v = at::cat(vs, 0).contiguous();
  const at::Tensor cu_seqlens_k = at::tensor(cu_k, at::kInt).to(t[0].device());
  const at::Tensor cu_seqlens_q = t[3].to(at::kInt).contiguous();
  auto r =
      at::_flash_attention_forward(t[0].contiguous(), k, v, cu_seqlens_q, cu_seqlens_k, max_q, max_k, 0.0,
                                   /*is_causal=*/true, /*return_debug_mask=*/false, softmax_scale(a.alpha, m.head_dim));
  return std::get<0>(r);
}
#endif

}  // namespace

std::vector<ImplInfo> attention_impls(Backend backend) {
  const std::string op = "paged_attention";
  const auto must = Expectation::must_hold;
  std::vector<ImplInfo> out;
  if (backend == Backend::cpu) {
    const std::vector<at::ScalarType> dt = {at::kHalf, at::kBFloat16, at::kFloat};
    out.push_back(
        {"invariant", op, backend, dt, must,
         "fixed-split paged attention (256-token splits, 64-token tiles, fixed merge order), float32 on the CPU",
         split_cpu({})});
    out.push_back({"reference", op, backend, dt, must,
                   "Path A: per-sequence gather, two-pass float32 softmax attention", run_reference});
    // Imitates FlashAttention-2's split-KV heuristic: the partition of every sequence's KV is
    // computed from max_seqlen_k of the whole batch, so a longer neighbour moves the merge points.
    out.push_back({"mutant-splits-from-maxlen", op, backend, dt, must,
                   "planted bug: KV split size from the batch's max_seqlen_k (FlashAttention-2 num_splits)",
                   split_cpu(mutant_plan(Mutant::splits_from_maxlen))});
    // Imitates FlashInfer's plan choosing CTA_TILE_Q (and with it the KV step) from the batch's
    // average query length: other sequences' query lengths move the online-softmax merge points.
    out.push_back({"mutant-qtile-from-avg", op, backend, dt, must,
                   "planted bug: query tile (and KV step) from the batch's average query length (FlashInfer plan)",
                   split_cpu(mutant_plan(Mutant::qtile_from_avg))});
    // Imitates a CUDA-graph replay padded to a bucket whose padded seq_lens tail is never written:
    // the scheduler reads stale values past the real sequences and takes a shared max over them.
    out.push_back({"mutant-padded-grid", op, backend, dt, must,
                   "planted bug: grid padded to a graph bucket, max_seqlen_k read over the uninitialised tail",
                   split_cpu(mutant_plan(Mutant::padded_grid))});
    out.push_back({"torch-sdpa", op, backend, dt, Expectation::observed,
                   "at::scaled_dot_product_attention per sequence over gathered KV (libtorch CPU)", run_torch_sdpa});
  }
#ifdef DETFUZZ_WITH_CUDA
  if (backend == Backend::cuda) {
    const std::vector<at::ScalarType> dt = {at::kHalf, at::kBFloat16};
    using Schedule = CudaAttentionOptions::Schedule;
    using OptionsFn = std::function<CudaAttentionOptions(const OpArgs &)>;
    auto fused = [](OptionsFn options) -> OpFn {
      return [options](const OpArgs &a) {
        check_arity(a);
        const auto &t = a.tensors;
        const CudaAttentionOptions o = options ? options(a) : CudaAttentionOptions{};
        return paged_attention_cuda(t[0], t[1], t[2], t[3], t[4], t[5], a.alpha, o);
      };
    };
    auto pinned = [](Schedule schedule) -> OptionsFn {
      return [schedule](const OpArgs &a) {
        CudaAttentionOptions o;
        const at::Tensor &q = a.tensors[0];  // [T_q, H_q, D]; whole_rows exists for D <= 128
        o.schedule = schedule;
        if (schedule == Schedule::whole_rows && q.dim() == 3 && q.size(2) > 128) o.schedule = Schedule::split_per_cta;
        // split_groups runs on the wgmma kernel only (an sm_90 GPU, D <= 128).
        if (schedule == Schedule::split_groups &&
            !(q.dim() == 3 && q.size(2) <= 128 && attention::paged_attention_wgmma_available(q.device().index())))
          o.schedule = Schedule::split_per_cta;
        // Two consumers per CTA: the automatic choice takes one on small grids, which most cases are.
        if (o.schedule == Schedule::split_groups) o.group_consumers = 2;
        return o;
      };
    };
    // The mutants size their launch from the batch's metadata: a host copy of it (the plan makes
    // its own), which only they pay for.
    auto from_batch = [](std::function<CudaAttentionOptions(const MetadataHost &)> f) -> OptionsFn {
      return [f](const OpArgs &a) {
        const auto &t = a.tensors;
        return f(validate_paged_inputs(t[0], t[1], t[2], t[3], t[4], t[5]));
      };
    };
    out.push_back({"invariant", op, backend, dt, must,
                   "fused tensor-core paged attention: one launch over the mixed batch, 256-token splits, "
                   "schedule picked from the batch size; wgmma on sm_90 (head dim 64/128), else mma.sync",
                   fused({})});
    // The mma.sync kernel pinned, so that a Hopper GPU fuzzes the other GPUs' kernel too (its bits
    // differ from the wgmma kernel's; each must be invariant on its own).
    out.push_back({"invariant-mma-sync", op, backend, dt, must,
                   "the fused kernel on mma.sync tiles (what GPUs other than sm_90 run), schedule from the batch size",
                   fused([](const OpArgs &) {
                     CudaAttentionOptions o;
                     o.kernel = CudaAttentionOptions::Kernel::mma_sync;
                     return o;
                   })});
    // The two schedules pinned, so that fuzzing covers both whatever the batch sizes.
    out.push_back({"invariant-split-per-cta", op, backend, dt, must,
                   "the fused kernel with the split_per_cta schedule (a CTA per split, merge kernel)",
                   fused(pinned(Schedule::split_per_cta))});
    out.push_back({"invariant-whole-rows", op, backend, dt, must,
                   "the fused kernel with the whole_rows schedule (a CTA walks all splits; D = 256: split_per_cta)",
                   fused(pinned(Schedule::whole_rows))});
    out.push_back({"invariant-split-groups", op, backend, dt, must,
                   "the fused kernel with the split_groups schedule (Hopper: two consumer warpgroups per CTA, each "
                   "on its own splits, whatever the grid; other GPUs and D = 256: split_per_cta)",
                   fused(pinned(Schedule::split_groups))});
    // The CUDA mutants: the fused kernel with a size from the batch (the same bugs as the CPU ones).
    auto split_from = [](Mutant mu) {
      return [mu](const MetadataHost &m) {
        CudaAttentionOptions o;
        if (m.num_seqs) o.split_tokens = mutant_plan(mu)(m, 0).split;
        return o;
      };
    };
    // FlashAttention-2's split-KV partition from the batch's max_seqlen_k.
    out.push_back({"mutant-splits-from-maxlen", op, backend, dt, must,
                   "planted bug: the fused kernel with its KV split size from the batch's max_seqlen_k",
                   fused(from_batch(split_from(Mutant::splits_from_maxlen)))});
    // FlashInfer's query tile from the average query length, and with it the KV step (the
    // kernel's steps are 32 or 64 keys: the plan's 128 runs as 64).
    out.push_back({"mutant-qtile-from-avg", op, backend, dt, must,
                   "planted bug: the fused kernel with its online-softmax step from the batch's average query length",
                   fused(from_batch([](const MetadataHost &m) {
                     CudaAttentionOptions o;
                     o.schedule = Schedule::split_per_cta;  // the 32-key step exists in that schedule only
                     if (m.num_seqs)
                       o.softmax_keys = std::min<int64_t>(64, mutant_plan(Mutant::qtile_from_avg)(m, 0).tile);
                     return o;
                   }))});
    // A graph-padded grid reading the uninitialised seq_lens tail into a shared max_seqlen_k.
    out.push_back({"mutant-padded-grid", op, backend, dt, must,
                   "planted bug: the fused kernel, split size from max_seqlen_k over a padded bucket's stale tail",
                   fused(from_batch(split_from(Mutant::padded_grid)))});
    out.push_back({"reference", op, backend, dt, must,
                   "Path A on the host: per-sequence gather, two-pass float32 softmax attention", run_reference});
    out.push_back({"torch-sdpa", op, backend, dt, Expectation::observed,
                   "at::scaled_dot_product_attention per sequence over gathered KV (libtorch CUDA)", run_torch_sdpa});
    // Each of libtorch's other attention backends on its own, and FlashAttention-2 as
    // engines call it. Observed: whether they hold is what the fuzzer reports.
    out.push_back({"torch-sdpa-cudnn", op, backend, dt, Expectation::observed,
                   "at::scaled_dot_product_attention per sequence with only the cuDNN backend enabled",
                   sdpa_only(OnlySdpaBackend::cudnn)});
    out.push_back({"torch-sdpa-efficient", op, backend, dt, Expectation::observed,
                   "at::scaled_dot_product_attention per sequence with only the memory-efficient backend enabled",
                   sdpa_only(OnlySdpaBackend::efficient)});
    out.push_back({"torch-flash-varlen", op, backend, dt, Expectation::observed,
                   "at::_flash_attention_forward over the ragged batch (cu_seqlens, packed K/V, causal)",
                   run_torch_flash_varlen});
  }
#endif
  return out;
}

}  // namespace detfuzz
