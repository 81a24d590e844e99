// Path A: per-sequence gather, then two-pass softmax attention in float32 with plain loops.
// Plain loops rather than at::matmul: a BLAS call's reduction order may depend on the matrix's
// row count, which would make the reference itself fail chunked_prefill and decode_vs_prefill.
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
  const auto kp = k_pool.to(at::kCPU), vp = v_pool.to(at::kCPU);
  auto out = at::empty({m.num_q, m.h_q, D}, at::kFloat);
  const float *qd = qf.data_ptr<float>();
  float *od = out.data_ptr<float>();
  std::vector<float> scores;
  for (int64_t s = 0; s < m.num_seqs; ++s) {
    const int64_t ql = m.q_len(s), kl = m.kv_len[s];
    if (ql == 0) continue;
    // Gather: the sequence's used pages, flattened to [kv_len, H_kv, D] (Path A of the spec).
    const auto ks = gather_sequence(kp, m, s).to(at::kFloat).contiguous();
    const auto vs = gather_sequence(vp, m, s).to(at::kFloat).contiguous();
    const float *kd = ks.data_ptr<float>(), *vd = vs.data_ptr<float>();
    for (int64_t qi = 0; qi < ql; ++qi) {
      const int64_t row = m.cu_q[s] + qi, visible = kl - ql + qi + 1;
      for (int64_t h = 0; h < m.h_q; ++h) {
        const int64_t kvh = h / group;
        const float *qv = qd + (row * m.h_q + h) * D;
        scores.assign(visible, 0.f);
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t k = 0; k < visible; ++k) {
          const float *kv = kd + (k * m.h_kv + kvh) * D;
          float dot = 0.f;
          for (int64_t d = 0; d < D; ++d) dot += qv[d] * kv[d];
          scores[k] = dot * scale;
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

}  // namespace detfuzz::attention
