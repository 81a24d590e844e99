// Host dispatch of the fp8 scaled matmul and the fused MoE layer on CUDA: the CPU kernels' input
// checks (ops/cpu/moe.h) and the device checks, copies of inputs into the layout a kernel reads
// (bitwise the same values), then the launchers.
// scaled_mm decides nothing from M: on an sm_90 GPU with K >= 1 it runs the Hopper kernel, which
// reads b column-major ([N, K], as a weight is stored) and rows 16-byte aligned; b in another
// layout is copied into that one (a cost the caller avoids by passing a weight's transpose).
// fused_moe runs the Hopper grouped GEMMs where the layer fits them (16-bit, H and I multiples of
// 8: a property of the layer, not of the batch), else the CUDA-core ones. fused_moe reads the routing back to the host to group the
// (token, slot) pairs by expert into tiles: which pairs share a tile, never what a pair computes.
#include "ops/cuda/moe_ops.h"

#include "ops/cuda/fused_moe.cuh"
#include "ops/cuda/gemm.cuh"  // gemm_path_available
#include "ops/cuda/scaled_mm.cuh"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace detfuzz::cuda_ops {
namespace {

namespace ck = detfuzz::cuda_kernels;

ck::DType out_kernel_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return ck::DType::f32;
    case at::kHalf: return ck::DType::f16;
    case at::kBFloat16: return ck::DType::bf16;
    default: TORCH_CHECK(false, "scaled_mm: the output dtype must be bfloat16, float16 or float32, got ", t);
  }
}

ck::Fp8Scale kernel_mode(cpu_ops::ScaleMode m) {
  switch (m) {
    case cpu_ops::ScaleMode::tensor: return ck::Fp8Scale::tensor;
    case cpu_ops::ScaleMode::channel: return ck::Fp8Scale::channel;
    default: return ck::Fp8Scale::block;
  }
}

void check_on(const at::Tensor &t, const at::Tensor &a, const char *name) {
  TORCH_CHECK(t.is_cuda() && t.device() == a.device(), "scaled_mm: ", name, " must be on ", a.device(), ", got ",
              t.device());
}

void check_on_cuda(const at::Tensor &logits) {
  TORCH_CHECK(logits.is_cuda(), "fused_moe: logits must be a CUDA tensor, got device ", logits.device());
}

// A [rows, cols] fp8 matrix with unit column stride and rows 16-byte apart and aligned, as TMA
// reads it: t itself where it is so, else a copy into a buffer with rows of round16(cols) bytes
// (the padding is never read: the kernel's maps end at cols).
at::Tensor tma_rows(const at::Tensor &t) {
  const int64_t rows = t.size(0), cols = t.size(1);
  if (t.stride(1) == 1 && t.stride(0) % 16 == 0 && t.stride(0) >= cols &&
      reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0)
    return t;
  at::Tensor buf = at::empty({rows, (cols + 15) / 16 * 16}, t.options().dtype(at::kByte));
  at::Tensor view = buf.narrow(1, 0, cols);
  view.copy_(t.view(at::kByte));
  return view.view(at::kFloat8_e4m3fn);
}

cudaStream_t stream_of(const at::Tensor &t) { return at::cuda::getCurrentCUDAStream(t.device().index()).stream(); }

// ids [T, k] int32 and weights [T, k] float32 on logits' device.
std::pair<at::Tensor, at::Tensor> route(const at::Tensor &logits, int64_t top_k) {
  const at::Tensor l = logits.contiguous();
  const int64_t t = l.size(0);
  at::Tensor ids = at::empty({t, top_k}, l.options().dtype(at::kInt));
  at::Tensor weights = at::empty({t, top_k}, l.options());
  ck::launch_moe_route(l.const_data_ptr<float>(), t, l.size(1), top_k, ids.data_ptr<int32_t>(),
                       weights.data_ptr<float>(), stream_of(l));
  return {ids, weights};
}

// The pairs p = token * k + slot grouped by expert (in p order within an expert), and the tiles
// of at most tile_rows pairs of one expert: (expert, first index into the order, count), then the
// count of those tiles (the last element; the device's list pads the tiles before it). On the
// device (ck::launch_moe_group), the tile list padded with empty tiles to ck::moe_max_tiles: no
// host round trip, so a CUDA graph can hold the layer at any batch. Layers of more than
// ck::kMoeGroupMaxExperts experts group on the host. The same tiles either way, so the GEMMs' bits
// too.
std::pair<at::Tensor, at::Tensor> expert_tiles(const at::Tensor &ids, int64_t experts, int64_t tile_rows) {
  const int64_t pairs = ids.numel();
  if (experts <= ck::kMoeGroupMaxExperts) {
    const auto i32 = ids.options().dtype(at::kInt);
    at::Tensor order = at::empty({pairs}, i32);
    at::Tensor tiles = at::empty({3 * ck::moe_max_tiles(pairs, experts, tile_rows) + 1}, i32);
    at::Tensor workspace = at::empty({ck::moe_group_workspace(pairs, experts)}, i32);
    ck::launch_moe_group(ids.const_data_ptr<int32_t>(), pairs, experts, tile_rows, workspace.data_ptr<int32_t>(),
                         order.data_ptr<int32_t>(), tiles.data_ptr<int32_t>(), stream_of(ids));
    return {order, tiles};
  }
  const at::Tensor host = ids.reshape({-1}).cpu();
  const int32_t *id = host.const_data_ptr<int32_t>();
  std::vector<int64_t> start(static_cast<size_t>(experts + 1), 0);
  for (int64_t p = 0; p < pairs; ++p) ++start[static_cast<size_t>(id[p]) + 1];
  for (int64_t e = 0; e < experts; ++e) start[e + 1] += start[e];
  std::vector<int32_t> order(static_cast<size_t>(pairs)), tiles;
  std::vector<int64_t> next(start.begin(), start.end() - 1);
  for (int64_t p = 0; p < pairs; ++p) order[static_cast<size_t>(next[id[p]]++)] = static_cast<int32_t>(p);
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t first = start[e]; first < start[e + 1]; first += tile_rows)
      tiles.insert(tiles.end(), {static_cast<int32_t>(e), static_cast<int32_t>(first),
                                 static_cast<int32_t>(std::min(tile_rows, start[e + 1] - first))});
  const int32_t live = static_cast<int32_t>(tiles.size() / 3);
  tiles.push_back(live);
  const auto i32 = at::TensorOptions().dtype(at::kInt);
  at::Tensor order_t = at::from_blob(order.data(), {pairs}, i32).to(ids.device());
  at::Tensor tiles_t = at::from_blob(tiles.data(), {static_cast<int64_t>(tiles.size())}, i32).to(ids.device());
  return {order_t, tiles_t};
}

// The layer's GEMMs on the Hopper kernels (16-bit x; weights of x's dtype with H and I multiples
// of 8, or fp8 with block scales s13, s2 and H and I multiples of 128): the pairs sorted by
// expert, x's rows gathered in that order, the gate/up GEMM into the rounded activations, the down
// GEMM into each pair's row of y, the combine. Tiles of 128 rows where experts get that many pairs
// on average, else 64, and down tiles of 64 columns where 128 would leave SMs idle: choices of
// speed, never of bits.
void hopper_experts(const at::Tensor &x, const at::Tensor &w13, const at::Tensor &w2, const at::Tensor &s13,
                    const at::Tensor &s2, const at::Tensor &ids, const at::Tensor &weights, int64_t top_k,
                    at::Tensor &out) {
  const bool fp8 = s13.defined();
  const int64_t t_len = x.size(0), h = x.size(1), e_len = w13.size(0), inter = w2.size(2), pairs = t_len * top_k;
  const int tile_m = pairs >= 128 * e_len ? 128 : 64;
  const auto [order, tiles] = expert_tiles(ids, e_len, tile_m);
  const at::Tensor xs = x.index_select(0, at::floor_divide(order, top_k)).contiguous();
  // Weights as TMA reads them: contiguous and 16-byte aligned (a copy of a view that is not).
  auto tma_ready = [](const at::Tensor &w) {
    const at::Tensor c = w.contiguous();
    return reinterpret_cast<uintptr_t>(c.data_ptr()) % 16 == 0 ? c : c.clone();
  };
  const at::Tensor w13c = tma_ready(w13), w2c = tma_ready(w2);
  at::Tensor act = at::empty({pairs, inter}, x.options());
  at::Tensor y = at::empty({pairs, h}, x.options().dtype(at::kFloat));
  const cudaStream_t stream = stream_of(x);
  ck::MoeSm90Gemm up;
  up.gate_up = true;
  up.dtype = out_kernel_dtype(x.scalar_type());
  up.a = xs.data_ptr();
  up.pairs = pairs;
  up.w = w13c.data_ptr();
  up.experts = e_len;
  up.rows = 2 * inter;
  up.cols = h;
  up.tiles = tiles.const_data_ptr<int32_t>();
  up.row_tiles = (tiles.numel() - 1) / 3;
  up.live_row_tiles = tiles.const_data_ptr<int32_t>() + 3 * up.row_tiles;
  up.tile_m = tile_m;
  up.out = act.data_ptr();
  const at::Tensor s13c = fp8 ? s13.contiguous() : at::Tensor(), s2c = fp8 ? s2.contiguous() : at::Tensor();
  up.w_scale = fp8 ? s13c.const_data_ptr<float>() : nullptr;
  const auto launch = fp8 ? ck::launch_moe_gemm_fp8_sm90 : ck::launch_moe_gemm_sm90;
  launch(up, stream);
  ck::MoeSm90Gemm down = up;
  down.gate_up = false;
  down.a = act.data_ptr();
  down.w = w2c.data_ptr();
  down.rows = h;
  down.cols = inter;
  down.order = order.const_data_ptr<int32_t>();
  // 64-column down tiles where 128-column ones would leave SMs idle (decode).
  const int sms = at::cuda::getDeviceProperties(x.device().index())->multiProcessorCount;
  down.down_cols = down.row_tiles * ((h + 127) / 128) < sms ? 64 : 128;
  down.out = y.data_ptr();
  down.w_scale = fp8 ? s2c.const_data_ptr<float>() : nullptr;
  launch(down, stream);
  ck::launch_moe_combine(y.const_data_ptr<float>(), weights.const_data_ptr<float>(), t_len, top_k, h, out.data_ptr(),
                         up.dtype, stream);
}

}  // namespace

at::Tensor scaled_mm(const at::Tensor &a, const at::Tensor &b, const at::Tensor &scale_a, const at::Tensor &scale_b,
                     const at::Tensor &bias, cpu_ops::ScaleMode mode, at::ScalarType out_dtype, ck::ScaledMmPath path,
                     int promote_blocks) {
  cpu_ops::check_scaled_mm_inputs(a, b, scale_a, scale_b, bias, mode, out_dtype);
  const ck::DType out_kernel = out_kernel_dtype(out_dtype);
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  TORCH_CHECK(!bias.defined() || bias.scalar_type() == out_dtype, "scaled_mm: bias must have the output dtype ",
              out_dtype, ", got ", bias.scalar_type());
  TORCH_CHECK(a.is_cuda(), "scaled_mm: a must be a CUDA tensor, got device ", a.device());
  check_on(b, a, "b");
  check_on(scale_a, a, "scale_a");
  check_on(scale_b, a, "scale_b");
  if (bias.defined()) check_on(bias, a, "bias");

  const c10::cuda::CUDAGuard guard(a.device());
  const bool hopper = path != ck::ScaledMmPath::mma_sync && k >= 1 &&
                      ck::gemm_path_available(ck::GemmPath::sm90_persistent, a.device().index());
  // The Hopper kernel: a's rows and b's columns (the rows of b^T) as TMA reads them; mma.sync:
  // both row-major.
  const at::Tensor ac = hopper ? tma_rows(a) : a.contiguous(), bc = hopper ? tma_rows(b.t()) : b.contiguous();
  const at::Tensor sac = scale_a.contiguous(), sbc = scale_b.contiguous();
  const at::Tensor biasc = bias.defined() ? bias.contiguous() : at::Tensor();
  at::Tensor out = at::empty({m, n}, a.options().dtype(out_dtype));
  ck::ScaledMmParams p;
  p.a = static_cast<const uint8_t *>(ac.data_ptr());
  p.lda = hopper ? ac.stride(0) : k;
  p.b = static_cast<const uint8_t *>(bc.data_ptr());
  p.ldb = hopper ? bc.stride(0) : n;
  p.b_col_major = hopper;
  p.path = path;
  p.promote_blocks = promote_blocks;
  p.scale_a = sac.const_data_ptr<float>();
  p.scale_b = sbc.const_data_ptr<float>();
  p.mode = kernel_mode(mode);
  p.bias = biasc.defined() ? biasc.data_ptr() : nullptr;
  p.out = out.data_ptr();
  p.out_dtype = out_kernel;
  p.M = m;
  p.N = n;
  p.K = k;
  ck::launch_scaled_mm(p, at::cuda::getCurrentCUDAStream(a.device().index()).stream());
  return out;
}

cpu_ops::Routing moe_route(const at::Tensor &logits, int64_t top_k) {
  cpu_ops::check_route_inputs(logits, top_k);
  check_on_cuda(logits);
  const c10::cuda::CUDAGuard guard(logits.device());
  const auto [ids, weights] = route(logits, top_k);
  return {ids.to(at::kLong), weights};
}

at::Tensor fused_moe(const at::Tensor &x, const at::Tensor &logits, const at::Tensor &w13, const at::Tensor &w2,
                     const at::Tensor &w13_scale, const at::Tensor &w2_scale, int64_t top_k,
                     const MoeMutation &mutation) {
  const bool fp8 = cpu_ops::check_fused_moe_inputs(x, logits, w13, w2, w13_scale, w2_scale, top_k);
  check_on_cuda(logits);
  const int64_t t_len = x.size(0), h = x.size(1), e_len = w13.size(0), inter = w2.size(2);
  for (const at::Tensor *t : {&x, &w13, &w2, &w13_scale, &w2_scale})
    TORCH_CHECK(!t->defined() || t->device() == logits.device(), "fused_moe: every tensor must be on ", logits.device(),
                ", got ", t->device());

  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor out = at::empty({t_len, h}, x.options());
  if (t_len == 0) return out;
  const auto [ids, weights] = route(logits, top_k);
  const ck::DType dt = out_kernel_dtype(x.scalar_type());
  if (!mutation.any() && ck::moe_sm90_fits(dt, h, inter, fp8)) {
    hopper_experts(x, w13, w2, w13_scale, w2_scale, ids, weights, top_k, out);
    return out;
  }
  const auto [order, tiles] = expert_tiles(ids, e_len, ck::kMoeTileRows);
  const ck::MoeTiles grouped{order.const_data_ptr<int32_t>(), tiles.const_data_ptr<int32_t>(), (tiles.numel() - 1) / 3};
  // The mutants' inputs: tokens per expert, and each token's slots busiest expert first.
  at::Tensor load, slot_order;
  if (mutation.any()) {
    const at::Tensor ids_host = ids.cpu().to(at::kLong);
    load = at::bincount(ids_host.reshape({-1}), {}, e_len);
    if (mutation.combine_by_expert_load) {
      // Rank of each expert, busiest first (ties: lower index first), then the slots by rank.
      const at::Tensor by_load = std::get<1>(at::sort(load, /*stable=*/true, 0, /*descending=*/true));
      const at::Tensor rank = at::empty_like(by_load).scatter_(0, by_load, at::arange(e_len, by_load.options()));
      slot_order = std::get<1>(at::sort(rank.index({ids_host}), /*stable=*/true, 1, false)).to(at::kInt).to(x.device());
    }
    load = load.to(at::kInt).to(x.device());
  }
  const at::Tensor xc = x.contiguous(), w13c = w13.contiguous(), w2c = w2.contiguous();
  const at::Tensor s13 = fp8 ? w13_scale.contiguous() : at::Tensor(), s2 = fp8 ? w2_scale.contiguous() : at::Tensor();
  const auto f32 = x.options().dtype(at::kFloat);
  at::Tensor act = at::empty({t_len * top_k, inter}, f32), y = at::empty({t_len * top_k, h}, f32);
  const cudaStream_t stream = stream_of(x);

  ck::MoeGemmParams up;
  up.gate_up = true;
  up.a = xc.data_ptr();
  up.a_dtype = dt;
  up.top_k = top_k;
  up.w = w13c.data_ptr();
  up.w_dtype = dt;
  up.w_scale = fp8 ? s13.const_data_ptr<float>() : nullptr;
  up.rows = 2 * inter;
  up.cols = h;
  up.out = act.data_ptr<float>();
  if (mutation.any()) {
    up.expert_tokens = load.const_data_ptr<int32_t>();
    up.small_k_block_from = mutation.small_k_block_from;
    up.split_k_up_to = mutation.split_k_up_to;
  }
  ck::launch_moe_gemm(up, grouped, stream);

  ck::MoeGemmParams down = up;
  down.gate_up = false;
  down.a = act.data_ptr();
  down.a_dtype = ck::DType::f32;
  down.w = w2c.data_ptr();
  down.w_scale = fp8 ? s2.const_data_ptr<float>() : nullptr;
  down.rows = h;
  down.cols = inter;
  down.out = y.data_ptr<float>();
  ck::launch_moe_gemm(down, grouped, stream);

  ck::launch_moe_combine(y.const_data_ptr<float>(), weights.const_data_ptr<float>(), t_len, top_k, h, out.data_ptr(),
                         dt, stream, slot_order.defined() ? slot_order.const_data_ptr<int32_t>() : nullptr);
  return out;
}

}  // namespace detfuzz::cuda_ops
