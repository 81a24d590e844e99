// The fixed-split algorithm on the CPU (see paged_attention.h for the algorithm), and the plans
// of the planted bugs. Each query row is computed on its own, so the only way batch composition
// can reach a row's bits is through the plan: the invariant plan ignores the batch.
#include "ops/attention/cpu_dot.h"
#include "ops/attention/paged_attention.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace detfuzz::attention {

namespace {

// Everything one sequence's rows need, in float32 on the host.
struct SequenceWork {
  const float *q;                                 // [T_q, H_q, D]
  const std::vector<const float *> *krow, *vrow;  // each key's [H_kv, D] row, by position
  int64_t first_row, q_len, kv_len, h_q, group, D;
  SplitPlan plan;
  float scale;  // log2 domain
};

// Scratch reused across sequences.
struct Scratch {
  std::vector<float> s_tile, pv, split_m, split_l, split_acc, o;
};

// The rows of one sequence. `Round` rounds p to the input dtype before P@V, as a tensor-core
// kernel feeds its MMA; l sums the unrounded p. Inlined into each build below (portable, and
// AVX2 + FMA + F16C, where dot8 and the D-wide loops take 8 lanes and fma is one instruction):
// the same operations in the same order, so the same bits.
template <typename Round>
__attribute__((always_inline)) inline void attend_sequence(const SequenceWork &w, Round round_p, Scratch &x,
                                                           float *od) {
  const int64_t D = w.D, ql = w.q_len, kl = w.kv_len;
  const SplitPlan p = w.plan;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  x.s_tile.resize(p.tile);
  x.pv.resize(D);
  x.o.resize(D);
  float *s_tile = x.s_tile.data(), *pv = x.pv.data(), *o = x.o.data();
  for (int64_t qi = 0; qi < ql; ++qi) {
    const int64_t row = w.first_row + qi, visible = kl - ql + qi + 1;
    if (visible <= 0) {  // a padding row of a graph slot (allow_rows_without_keys): zeros
      std::fill(od + row * w.h_q * D, od + (row + 1) * w.h_q * D, 0.f);
      continue;
    }
    const int64_t nsplit = (visible + p.split - 1) / p.split;
    x.split_m.assign(nsplit, neg_inf);
    x.split_l.assign(nsplit, 0.f);
    x.split_acc.assign(nsplit * D, 0.f);
    for (int64_t h = 0; h < w.h_q; ++h) {
      const int64_t off = (h / w.group) * D;  // KV head of query head h, times D
      const float *qv = w.q + (row * w.h_q + h) * D;
      for (int64_t j = 0; j < nsplit; ++j) {
        const int64_t start = j * p.split, end = std::min(start + p.split, visible);
        float mrun = neg_inf, lrun = 0.f;
        float *acc = x.split_acc.data() + j * D;
        std::fill(acc, acc + D, 0.f);
        for (int64_t t0 = start; t0 < end; t0 += p.tile) {
          const int64_t t1 = std::min(t0 + p.tile, end);
          float tmax = neg_inf;
          for (int64_t k = t0; k < t1; ++k) {
            const float dot = dot8(qv, (*w.krow)[k] + off, D);
            s_tile[k - t0] = dot;
            tmax = std::max(tmax, dot);
          }
          const float x = tmax * w.scale;  // the log2 domain
          const float mnew = x > mrun + kRescaleSlack ? x : mrun;
          const float a = std::exp2(mrun - mnew);  // exp2(-inf) = 0 on the first tile
          float lt = 0.f;
          std::fill(pv, pv + D, 0.f);
          for (int64_t k = t0; k < t1; ++k) {
            const float pk = std::exp2(std::fma(s_tile[k - t0], w.scale, -mnew));
            lt += pk;
            const float pr = round_p(pk);
            const float *vv = (*w.vrow)[k] + off;
            for (int64_t d = 0; d < D; ++d) pv[d] += pr * vv[d];
          }
          lrun = lrun * a + lt;
          for (int64_t d = 0; d < D; ++d) acc[d] = acc[d] * a + pv[d];
          mrun = mnew;
        }
        x.split_m[j] = mrun;
        x.split_l[j] = lrun;
      }
      // Merge sequentially in split order.
      float M = x.split_m[0], L = x.split_l[0];
      std::copy(x.split_acc.begin(), x.split_acc.begin() + D, o);
      for (int64_t j = 1; j < nsplit; ++j) {
        const float mn = std::max(M, x.split_m[j]);
        const float wa = std::exp2(M - mn), wb = std::exp2(x.split_m[j] - mn);
        L = L * wa + x.split_l[j] * wb;
        const float *acc = x.split_acc.data() + j * D;
        for (int64_t d = 0; d < D; ++d) o[d] = o[d] * wa + acc[d] * wb;
        M = mn;
      }
      float *dst = od + (row * w.h_q + h) * D;
      const float inv = 1.f / L;  // out = O * (1 / L), as the CUDA kernels write it
      for (int64_t d = 0; d < D; ++d) dst[d] = o[d] * inv;
    }
  }
}

// The input dtype's rounding of p (identity for float32).
template <typename Input>
struct RoundTo {
  float operator()(float x) const { return static_cast<float>(Input(x)); }
};

#if defined(__x86_64__)
// float16 rounding by F16C, to nearest even as c10's; a NaN takes c10's path (its canonical bits).
struct RoundToHalfF16c {
  __attribute__((target("f16c"))) float operator()(float x) const {
    if (x != x) return static_cast<float>(c10::Half(x));
    return _cvtsh_ss(_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT));
  }
};
#endif

template <typename Round>
void attend_portable(const SequenceWork &w, Scratch &x, float *od) {
  attend_sequence(w, Round{}, x, od);
}

#if defined(__x86_64__)
template <typename Round>
__attribute__((target("avx2,fma,f16c"))) void attend_avx2(const SequenceWork &w, Scratch &x, float *od) {
  attend_sequence(w, Round{}, x, od);
}
#endif

bool portable_pinned = false;

// `Round` in the portable build, `FastRound` (the same bits) in the AVX2 one.
template <typename Round, typename FastRound = Round>
void attend(const SequenceWork &w, Scratch &x, float *od) {
#if defined(__x86_64__)
  if (cpu_attention_vectorised()) return attend_avx2<FastRound>(w, x, od);
#endif
  attend_portable<Round>(w, x, od);
}

}  // namespace

bool cpu_attention_vectorised() {
#if defined(__x86_64__)
  static const bool avx2 =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  return avx2 && !portable_pinned;
#else
  return false;
#endif
}

void pin_portable_cpu_attention(bool pinned) { portable_pinned = pinned; }

at::Tensor paged_attention_split_cpu(const at::Tensor &q, const at::Tensor &k_pool, const at::Tensor &v_pool,
                                     const at::Tensor &cu_seqlens_q, const at::Tensor &seq_lens_kv,
                                     const at::Tensor &block_table, double alpha, const PlanFn &plan,
                                     bool allow_rows_without_keys) {
  const MetadataHost m =
      validate_paged_inputs(q, k_pool, v_pool, cu_seqlens_q, seq_lens_kv, block_table, allow_rows_without_keys);
  const float scale = softmax_scale_log2(alpha, m.head_dim);
  const int64_t D = m.head_dim, BS = m.block_size;
  const auto qf = q.to(at::kCPU).to(at::kFloat).contiguous();
  const auto kf = k_pool.to(at::kCPU).to(at::kFloat).contiguous();
  const auto vf = v_pool.to(at::kCPU).to(at::kFloat).contiguous();
  const float *kd = kf.data_ptr<float>(), *vd = vf.data_ptr<float>();
  auto out = at::empty({m.num_q, m.h_q, D}, at::kFloat);
  float *od = out.data_ptr<float>();
  const at::ScalarType in_dtype = q.scalar_type();

  Scratch scratch;
  std::vector<const float *> krow, vrow;
  for (int64_t s = 0; s < m.num_seqs; ++s) {
    const int64_t ql = m.q_len(s), kl = m.kv_len[s];
    if (ql == 0) continue;
    const SplitPlan p = plan ? plan(m, s) : SplitPlan{};
    TORCH_CHECK(p.tile > 0 && p.split > 0 && p.split % p.tile == 0, "paged_attention: bad split plan (tile ", p.tile,
                ", split ", p.split, ") for sequence ", s);
    // Page walk: the address of every key of the sequence, through the block table.
    krow.resize(kl);
    vrow.resize(kl);
    for (int64_t k = 0; k < kl; ++k) {
      const int64_t slot = static_cast<int64_t>(m.block(s, k / BS)) * BS + k % BS;
      krow[k] = kd + slot * m.h_kv * D;
      vrow[k] = vd + slot * m.h_kv * D;
    }
    const SequenceWork w{qf.data_ptr<float>(), &krow, &vrow, m.cu_q[s], ql, kl, m.h_q, m.h_q / m.h_kv, D, p, scale};
    if (in_dtype == at::kBFloat16)
      attend<RoundTo<c10::BFloat16>>(w, scratch, od);
    else if (in_dtype == at::kHalf)
#if defined(__x86_64__)
      attend<RoundTo<c10::Half>, RoundToHalfF16c>(w, scratch, od);
#else
      attend<RoundTo<c10::Half>>(w, scratch, od);
#endif
    else
      attend<RoundTo<float>>(w, scratch, od);
  }
  return out.to(q.scalar_type()).to(q.device());
}

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// FlashAttention-2's split-KV partition: n_blocks_per_split = ceil(ceil(max_seqlen_k / kBlockN)
// / num_splits), applied to every sequence of the batch.
SplitPlan split_from_max(int64_t max_seqlen_k, int64_t num_splits) {
  const int64_t tiles = std::max<int64_t>(1, ceil_div(max_seqlen_k, kKvTile));
  return {kKvTile, ceil_div(tiles, num_splits) * kKvTile};
}

}  // namespace

PlanFn mutant_plan(Mutant mutant) {
  switch (mutant) {
    case Mutant::splits_from_maxlen:
      return [](const MetadataHost &m, int64_t) {
        const int64_t maxlen = *std::max_element(m.kv_len.begin(), m.kv_len.end());
        return split_from_max(maxlen, 4);
      };
    case Mutant::qtile_from_avg:
      return [](const MetadataHost &m, int64_t) {
        // FlashInfer's plan: CTA_TILE_Q from the batch's average packed query length, and with it
        // the number of KV columns per step (the online-softmax merge points).
        const int64_t avg = m.num_seqs ? m.num_q / m.num_seqs : 0;
        const int64_t q_tile = avg > 64 ? 128 : avg > 16 ? 64 : 16;
        const int64_t kv_tile = q_tile == 128 ? 32 : q_tile == 64 ? 64 : 128;
        return SplitPlan{kv_tile, kKvSplit};
      };
    case Mutant::padded_grid:
      return [](const MetadataHost &m, int64_t) {
        // The launch is padded to the CUDA-graph bucket B (next power of two >= S). seq_lens_kv
        // lives in one packed int32 metadata buffer [seq_lens_kv | block_table]; its padded tail
        // is never written, so the grid's scheduler reads B - S entries past the end (the head of
        // the block table: page ids) as sequence lengths and reduces max_seqlen_k over the bucket,
        // then partitions every sequence's KV as FlashAttention-2 does (4 splits of that max).
        int64_t bucket = 1;
        while (bucket < m.num_seqs) bucket *= 2;
        int64_t maxlen = 0;
        for (int64_t i = 0; i < bucket; ++i) {
          int64_t v = 0;
          if (i < m.num_seqs)
            v = m.kv_len[i];
          else if (i - m.num_seqs < static_cast<int64_t>(m.table.size()))
            v = m.table[i - m.num_seqs];
          maxlen = std::max(maxlen, v);
        }
        return split_from_max(maxlen, 4);
      };
  }
  return {};
}

}  // namespace detfuzz::attention
