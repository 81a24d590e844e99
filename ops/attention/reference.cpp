// Path A: per-sequence gather, then two-pass softmax attention in float32 with plain loops.
// Plain loops rather than at::matmul: a BLAS call's reduction order may depend on the matrix's
// row count, which would make the reference itself fail chunked_prefill and decode_vs_prefill.
// The float64 reference below is free of that concern (its bits are never compared), so it uses
// batched float64 matmuls on the inputs' device: fast on a GPU, and exact to ~1e-15.
#include "ops/attention/cpu_dot.h"
#include "ops/attention/paged_attention.h"

#include <cmath>
#include <limits>
#include <vector>

namespace detfuzz::attention {

float softmax_scale(double alpha, int64_t head_dim) {
  return static_cast<float>(alpha != 0.0 ? alpha : 1.0 / std::sqrt(static_cast<double>(head_dim)));
}

float softmax_scale_log2(double alpha, int64_t head_dim) {
  const float scale = softmax_scale(alpha, head_dim);
  // The fixed-split algorithm takes the step max of the raw scores, which is the max of the
  // scaled ones only for a positive scale.
  TORCH_CHECK(scale > 0.f && std::isfinite(scale), "paged_attention: softmax scale ", scale,
              " (alpha) must be positive and finite");
  return scale * 1.4426950408889634f;
}

at::Tensor paged_attention_reference(const at::Tensor &q, const at::Tensor &k_pool, const at::Tensor &v_pool,
                                     const at::Tensor &cu_seqlens_q, const at::Tensor &seq_lens_kv,
                                     const at::Tensor &block_table, double alpha) {
  const MetadataHost m = validate_paged_inputs(q, k_pool, v_pool, cu_seqlens_q, seq_lens_kv, block_table);
  const float scale = softmax_scale(alpha, m.head_dim);
  const int64_t D = m.head_dim, group = m.h_q / m.h_kv;
  const auto qf = q.to(at::kCPU).to(at::kFloat).contiguous();
  auto out = at::empty({m.num_q, m.h_q, D}, at::kFloat);
  const float *qd = qf.data_ptr<float>();
  float *od = out.data_ptr<float>();
  std::vector<float> scores;
  for (int64_t s = 0; s < m.num_seqs; ++s) {
    const int64_t ql = m.q_len(s), kl = m.kv_len[s];
    if (ql == 0) continue;
    // Gather: the sequence's used pages, flattened to [kv_len, H_kv, D] (Path A of the spec),
    // where the pools live; only those pages come to the host.
    const auto ks = gather_sequence(k_pool, m, s).to(at::kCPU).to(at::kFloat).contiguous();
    const auto vs = gather_sequence(v_pool, m, s).to(at::kCPU).to(at::kFloat).contiguous();
    const float *kd = ks.data_ptr<float>(), *vd = vs.data_ptr<float>();
    for (int64_t qi = 0; qi < ql; ++qi) {
      const int64_t row = m.cu_q[s] + qi, visible = kl - ql + qi + 1;
      for (int64_t h = 0; h < m.h_q; ++h) {
        const int64_t kvh = h / group;
        const float *qv = qd + (row * m.h_q + h) * D;
        scores.assign(visible, 0.f);
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t k = 0; k < visible; ++k) {
          scores[k] = dot8(qv, kd + (k * m.h_kv + kvh) * D, D) * scale;
          mx = std::max(mx, scores[k]);
        }
        float l = 0.f;
        for (int64_t k = 0; k < visible; ++k) {
          scores[k] = std::exp(scores[k] - mx);
          l += scores[k];
        }
        float *o = od + (row * m.h_q + h) * D;
        for (int64_t d = 0; d < D; ++d) o[d] = 0.f;
        for (int64_t k = 0; k < visible; ++k) {
          const float *vv = vd + (k * m.h_kv + kvh) * D;
          for (int64_t d = 0; d < D; ++d) o[d] += scores[k] * vv[d];
        }
        for (int64_t d = 0; d < D; ++d) o[d] /= l;
      }
    }
  }
  return out.to(q.scalar_type()).to(q.device());
}

at::Tensor paged_attention_reference_f64(const at::Tensor &q, const at::Tensor &k_pool, const at::Tensor &v_pool,
                                         const at::Tensor &cu_seqlens_q, const at::Tensor &seq_lens_kv,
                                         const at::Tensor &block_table, double alpha) {
  const MetadataHost m = validate_paged_inputs(q, k_pool, v_pool, cu_seqlens_q, seq_lens_kv, block_table);
  const double scale = softmax_scale(alpha, m.head_dim);  // the float32 scale every impl uses
  const int64_t D = m.head_dim, h_kv = m.h_kv, group = m.h_q / m.h_kv;
  const auto f64 = q.options().dtype(at::kDouble);
  std::vector<at::Tensor> outs;
  for (int64_t s = 0; s < m.num_seqs; ++s) {
    const int64_t ql = m.q_len(s), kl = m.kv_len[s];
    if (ql == 0) continue;
    // Query head h = kv head * group + g reads kv head h / group: [H_kv, group * ql, D].
    const auto qs = q.slice(0, m.cu_q[s], m.cu_q[s + 1]).to(at::kDouble).view({ql, h_kv, group, D});
    const auto qg = qs.permute({1, 2, 0, 3}).reshape({h_kv, group * ql, D});
    const auto ks = gather_sequence(k_pool, m, s).to(at::kDouble);  // [kl, H_kv, D]
    const auto vs = gather_sequence(v_pool, m, s).to(at::kDouble);
    auto scores = at::bmm(qg, ks.permute({1, 2, 0})).mul_(scale).view({h_kv, group, ql, kl});
    // Bottom-right causal: row r sees keys 0 .. kl - ql + r.
    const auto rows = at::arange(ql, f64).unsqueeze(1), cols = at::arange(kl, f64).unsqueeze(0);
    scores.masked_fill_(cols > rows + static_cast<double>(kl - ql), -std::numeric_limits<double>::infinity());
    const auto p = at::softmax(scores, -1).view({h_kv, group * ql, kl});
    const auto o = at::bmm(p, vs.permute({1, 0, 2}));  // [H_kv, group * ql, D]
    outs.push_back(o.view({h_kv, group, ql, D}).permute({2, 0, 1, 3}).reshape({ql, m.h_q, D}));
  }
  if (outs.empty()) return at::empty({0, m.h_q, D}, f64);
  return at::cat(outs, 0);
}

}  // namespace detfuzz::attention
