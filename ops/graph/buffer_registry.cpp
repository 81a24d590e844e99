#include "ops/graph/buffer_registry.h"

#ifdef DETFUZZ_WITH_CUDA
#include "ops/cuda/row_copies.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#endif

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace detfuzz::graph {
namespace {

int64_t next_power_of_two(int64_t x) {
  int64_t p = 1;
  while (p < x) p *= 2;
  return p;
}

}  // namespace

std::optional<at::Tensor> &batch_field(ForwardBatch &b, const std::string &name) {
  if (name == "input_ids") return b.input_ids;
  if (name == "input_embeds") return b.input_embeds;
  if (name == "positions") return b.positions;
  if (name == "out_cache_loc") return b.out_cache_loc;
  if (name == "cu_seqlens_q") return b.cu_seqlens_q;
  if (name == "seq_lens") return b.seq_lens;
  if (name == "block_table") return b.block_table;
  if (name == "logits_index") return b.logits_index;
  if (name == "global_num_tokens") return b.global_num_tokens;
  throw std::invalid_argument("buffer registry: no batch field '" + name + "'");
}

const std::optional<at::Tensor> &batch_field(const ForwardBatch &b, const std::string &name) {
  return batch_field(const_cast<ForwardBatch &>(b), name);
}

BufferRegistry::BufferRegistry(at::Device device, int64_t max_bs, int64_t max_tokens)
    : device_(device), max_bs_(max_bs), max_tokens_(max_tokens) {
  TORCH_CHECK(max_bs >= 1 && max_tokens >= 1, "buffer registry: capacity must be >= 1, got bs ", max_bs, " tokens ",
              max_tokens);
}

int64_t BufferRegistry::rows(SlotAxis axis, int64_t bs, int64_t tokens) const {
  switch (axis) {
    case SlotAxis::tokens: return tokens;
    case SlotAxis::seqs: return bs;
    case SlotAxis::seqs_plus_one: return bs + 1;
  }
  return 0;
}

void BufferRegistry::add_plain(const std::string &name, SlotAxis axis, at::ScalarType dtype,
                               std::vector<int64_t> inner) {
  batch_field(ForwardBatch{}, name);  // a known field
  TORCH_CHECK(!has(name), "buffer registry: slot '", name, "' registered twice");
  std::vector<int64_t> sizes{rows(axis, max_bs_, max_tokens_)};
  sizes.insert(sizes.end(), inner.begin(), inner.end());
  slots_.push_back({name, axis, false, {}, at::zeros(sizes, at::TensorOptions().dtype(dtype).device(device_)), {}});
}

void BufferRegistry::add_computed(const std::string &name, SlotAxis axis, at::ScalarType dtype, PostFill post_fill,
                                  std::vector<int64_t> inner, RowFill row_fill) {
  batch_field(ForwardBatch{}, name);
  TORCH_CHECK(!has(name), "buffer registry: slot '", name, "' registered twice");
  TORCH_CHECK(row_fill.kind == RowFill::Kind::none || (dtype == at::kLong && inner.empty()),
              "buffer registry: a row fill writes int64 rows of one element, not slot '", name, "'");
  std::vector<int64_t> sizes{rows(axis, max_bs_, max_tokens_)};
  sizes.insert(sizes.end(), inner.begin(), inner.end());
  slots_.push_back({name, axis, true, std::move(post_fill),
                    at::zeros(sizes, at::TensorOptions().dtype(dtype).device(device_)), std::move(row_fill)});
}

bool BufferRegistry::has(const std::string &name) const {
  for (const auto &s : slots_)
    if (s.name == name) return true;
  return false;
}

const at::Tensor &BufferRegistry::view(size_t i, int64_t rows) const {
  at::Tensor &v = views_[{i, rows}];
  if (!v.defined()) v = slots_[i].buffer.narrow(0, 0, rows);
  return v;
}

#ifdef DETFUZZ_WITH_CUDA
// Host fields go to the device in one copy: packed into `host` (pinned), copied to `device`, and
// from there into their slots by the row-copy launch. `copied` marks the copy's end: `host` is
// rewritten only after it.
struct BufferRegistry::Staging {
  at::Tensor host, device;
  at::cuda::CUDAEvent copied;
  bool pending = false;
};
#endif

void BufferRegistry::fill_from(const ForwardBatch &batch) {
  TORCH_CHECK(batch.batch_size <= max_bs_ && batch.num_tokens <= max_tokens_, "buffer registry: a batch of ",
              batch.batch_size, " sequences and ", batch.num_tokens, " tokens exceeds the capacity of ", max_bs_,
              " sequences and ", max_tokens_, " tokens");
#ifdef DETFUZZ_WITH_CUDA
  cuda_kernels::RowCopy fused[cuda_kernels::kMaxRowCopies];
  int n_fused = 0;
  std::map<std::string, const void *> on_device;  // a fused field's rows as the launch reads them
  int64_t staged = 0;                             // bytes of host fields packed into the staging buffer
  const bool cuda = device_.is_cuda();
#endif
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot &slot = slots_[i];
    if (slot.computed) continue;
    const auto &field = batch_field(batch, slot.name);
    if (!field) continue;  // absent this batch: extract_buffer carries it as absent
    const int64_t n = rows(slot.axis, batch.batch_size, batch.num_tokens);
    TORCH_CHECK(field->size(0) == n, "buffer registry: field ", slot.name, " has ", field->size(0), " rows, expected ",
                n);
    const at::Tensor &buffer = slot.buffer;
    // block_table: the batch's columns, then zeros.
    const bool narrower = field->dim() == 2 && buffer.dim() == 2 && field->size(1) < buffer.size(1);
#ifdef DETFUZZ_WITH_CUDA
    const bool here = field->device() == buffer.device(), host = field->is_cpu();
    if (cuda && (here || host) && field->scalar_type() == buffer.scalar_type() && field->dim() == buffer.dim() &&
        field->is_contiguous() && n_fused < cuda_kernels::kMaxRowCopies) {
      bool same_inner = true;
      for (int64_t d = narrower ? 2 : 1; d < buffer.dim(); ++d)
        same_inner = same_inner && field->size(d) == buffer.size(d);
      if (host && !staging_) {  // made when a host field first comes (the eager path's fields never do)
        int64_t capacity = 0;
        for (const Slot &s : slots_) capacity += (s.buffer.nbytes() + 15) / 16 * 16;
        staging_ = std::make_shared<Staging>();
        staging_->host = at::empty({capacity}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
        staging_->device = at::empty({capacity}, at::TensorOptions().dtype(at::kByte).device(device_));
      }
      const int64_t bytes = static_cast<int64_t>(buffer.element_size());
      cuda_kernels::RowCopy c;
      c.src = here ? field->data_ptr() : staging_->device.data_ptr<uint8_t>() + staged;
      c.dst = buffer.data_ptr();
      c.rows = n;
      c.src_row_bytes = (n > 0 ? field->numel() / n : 0) * bytes;
      c.dst_row_bytes = buffer.stride(0) * bytes;
      if (same_inner && (narrower || c.src_row_bytes == c.dst_row_bytes) && cuda_kernels::row_copy_fits(c)) {
        if (host) {
          if (staging_->pending) staging_->copied.synchronize();  // the last copy out of `host` is done
          staging_->pending = false;
          std::memcpy(staging_->host.data_ptr<uint8_t>() + staged, field->data_ptr(), field->nbytes());
          staged += (static_cast<int64_t>(field->nbytes()) + 15) / 16 * 16;
        }
        on_device[slot.name] = c.src;
        fused[n_fused++] = c;
        continue;
      }
    }
#endif
    at::Tensor dst = view(i, n);
    if (narrower) {
      dst.narrow(1, field->size(1), dst.size(1) - field->size(1)).zero_();
      dst = dst.narrow(1, 0, field->size(1));
    }
    dst.copy_(*field);
  }
  std::vector<size_t> post_fills;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot &slot = slots_[i];
    if (!slot.computed) continue;
#ifdef DETFUZZ_WITH_CUDA
    const RowFill &f = slot.row_fill;
    const auto from = on_device.find(f.field);
    const bool rows_from_field = f.kind == RowFill::Kind::field_rows_plus && from != on_device.end() &&
                                 batch_field(batch, f.field)->scalar_type() == at::kInt &&
                                 batch_field(batch, f.field)->dim() == 1;
    if (cuda && n_fused < cuda_kernels::kMaxRowCopies && (rows_from_field || f.kind == RowFill::Kind::token_count)) {
      cuda_kernels::RowCopy c;
      c.dst = slot.buffer.data_ptr();
      c.rows = rows(slot.axis, batch.batch_size, batch.num_tokens);
      c.dst_row_bytes = 8;
      if (rows_from_field) {
        TORCH_CHECK(batch_field(batch, f.field)->size(0) >= f.first_row + c.rows, "buffer registry: ", slot.name,
                    " needs ", f.first_row + c.rows, " rows of ", f.field);
        c.op = cuda_kernels::RowOp::widen_int32_add;
        c.src = static_cast<const int32_t *>(from->second) + f.first_row;
        c.src_row_bytes = 4;
        c.value = f.add;
      } else {
        c.op = cuda_kernels::RowOp::fill_int64;
        c.value = batch.num_tokens;
      }
      if (cuda_kernels::row_copy_fits(c)) {
        fused[n_fused++] = c;
        continue;
      }
    }
#endif
    post_fills.push_back(i);
  }
#ifdef DETFUZZ_WITH_CUDA
  if (n_fused > 0) {
    const c10::cuda::CUDAGuard guard(device_);
    const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    if (staged > 0) {
      C10_CUDA_CHECK(cudaMemcpyAsync(staging_->device.data_ptr(), staging_->host.data_ptr(), staged,
                                     cudaMemcpyHostToDevice, stream));
      staging_->copied.record(at::cuda::getCurrentCUDAStream());
      staging_->pending = true;
    }
    cuda_kernels::launch_row_copies(fused, n_fused, stream);
  }
#endif
  for (size_t i : post_fills) {
    at::Tensor v = view(i, rows(slots_[i].axis, batch.batch_size, batch.num_tokens));
    slots_[i].post_fill(v, batch);
  }
}

ForwardBatch BufferRegistry::extract_buffer(int64_t padded_bs, int64_t padded_tokens,
                                            const ForwardBatch &forward_batch_template) const {
  TORCH_CHECK(padded_bs <= max_bs_ && padded_tokens <= max_tokens_, "buffer registry: view of ", padded_bs,
              " sequences and ", padded_tokens, " tokens exceeds the capacity");
  ForwardBatch out = forward_batch_template;
  out.batch_size = padded_bs;
  out.num_tokens = padded_tokens;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot &slot = slots_[i];
    // A plain slot whose field is absent this batch is carried (absent) from the template.
    if (!slot.computed && !batch_field(forward_batch_template, slot.name)) continue;
    batch_field(out, slot.name) = view(i, rows(slot.axis, padded_bs, padded_tokens));
  }
  return out;
}

BufferRegistry build_prefill_registry(const Model &model, int64_t max_bs, int64_t max_tokens,
                                      const PrefillRegistryOptions &options) {
  BufferRegistry r(model.device(), max_bs, max_tokens);
  r.add_plain("input_ids", SlotAxis::tokens, at::kLong);
  if (options.register_input_embeds)
    r.add_plain("input_embeds", SlotAxis::tokens, model.config().dtype, {model.config().hidden});
  r.add_plain("positions", SlotAxis::tokens, at::kLong);
  r.add_plain("out_cache_loc", SlotAxis::tokens, at::kLong);
  r.add_plain("cu_seqlens_q", SlotAxis::seqs_plus_one, at::kInt);
  r.add_plain("seq_lens", SlotAxis::seqs, at::kInt);
  r.add_plain("block_table", SlotAxis::seqs, at::kInt, {options.max_blocks});
  // The row of each sequence's last token: cu_seqlens_q[1:] - 1, on the device, no host sync.
  r.add_computed("logits_index", SlotAxis::seqs, at::kLong,
                 [](at::Tensor &view, const ForwardBatch &b) {
                   TORCH_CHECK(b.cu_seqlens_q.has_value(), "buffer registry: logits_index needs cu_seqlens_q");
                   view.copy_(b.cu_seqlens_q->narrow(0, 1, b.batch_size)).sub_(1);
                 },
                 {}, {RowFill::Kind::field_rows_plus, "cu_seqlens_q", 1, -1});
  if (options.register_global_num_tokens)
    r.add_computed("global_num_tokens", SlotAxis::seqs, at::kLong,
                   [](at::Tensor &view, const ForwardBatch &b) { view.fill_(b.num_tokens); }, {},
                   {RowFill::Kind::token_count, "", 0, 0});
  return r;
}

bool eager_input_no_copy_from_env() {
  const char *v = std::getenv("DETFUZZ_EAGER_INPUT_NO_COPY");
  if (!v) return false;
  const std::string s(v);
  return s == "1" || s == "true" || s == "yes";
}

EagerInputs::EagerInputs(const Model &model, int64_t max_blocks, bool no_copy)
    : model_(model), max_blocks_(max_blocks), no_copy_(no_copy) {}

ForwardBatch EagerInputs::view(const ForwardBatch &batch) {
  if (no_copy_) return batch;  // the batch's own tensors, wrapped as they are
  if (!registry_ || batch.batch_size > registry_->max_bs() || batch.num_tokens > registry_->max_tokens()) {
    const int64_t bs = next_power_of_two(std::max<int64_t>({1, batch.batch_size, capacity_bs()}));
    const int64_t tokens = next_power_of_two(std::max<int64_t>({1, batch.num_tokens, capacity_tokens()}));
    PrefillRegistryOptions o;
    o.max_blocks = max_blocks_;
    o.register_global_num_tokens = false;  // a value already on the batch survives
    registry_ = std::make_unique<BufferRegistry>(build_prefill_registry(model_, bs, tokens, o));
  }
  registry_->fill_from(batch);
  return registry_->extract_buffer(batch.batch_size, batch.num_tokens, batch);
}

}  // namespace detfuzz::graph
