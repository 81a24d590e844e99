// The buffer registry (seed 002): one way to assemble a forward pass's inputs, shared by graph
// capture, graph replay and the eager path.
//
// A registry owns one preallocated buffer per slot, sized for its capacity (max_bs sequences,
// max_tokens tokens). A slot is
//   plain     copied from the batch's field of the same name by fill_from, or
//   computed  written by its post-fill function from the batch (logits_index from cu_seqlens_q,
//             global_num_tokens from the token count).
// extract_buffer(padded_bs, padded_tokens, template) returns the template with every slot's field
// replaced by a view of its buffer (the first padded_bs or padded_tokens rows), except that a
// plain slot whose field is absent from the template is carried as absent: never exposed as a
// stale or zero buffer. Computed slots are always exposed.
// Build flags skip a slot so that a value already on the batch survives: register_global_num_tokens
// (SGLang's fix for data-parallel attention, whose global_num_tokens was overwritten by a zero
// buffer) and register_input_embeds (the batch's own embeddings are carried as they are).
// The eager path keeps a registry that grows lazily to the next power of two of (batch size,
// tokens); DETFUZZ_EAGER_INPUT_NO_COPY=1 (or EagerInputs' no_copy option) skips the copy and wraps
// the batch's own tensors, for latency.
#pragma once

#include "ops/graph/model.h"

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace detfuzz::graph {

// What a slot's leading dimension counts.
enum class SlotAxis { tokens, seqs, seqs_plus_one };

// A computed slot's fill as a row op of the registry's one CUDA launch, where its post-fill has
// that form: int64 rows taken from another field's int32 rows (from `first_row` on) plus `add`,
// or the batch's token count in every row. Either must give exactly what the post-fill writes.
struct RowFill {
  enum class Kind { none, field_rows_plus, token_count };
  Kind kind = Kind::none;
  std::string field;
  int64_t first_row = 0, add = 0;
};

class BufferRegistry {
 public:
  using PostFill = std::function<void(at::Tensor &view, const ForwardBatch &batch)>;

  BufferRegistry(at::Device device, int64_t max_bs, int64_t max_tokens);
  void add_plain(const std::string &name, SlotAxis axis, at::ScalarType dtype, std::vector<int64_t> inner = {});
  void add_computed(const std::string &name, SlotAxis axis, at::ScalarType dtype, PostFill post_fill,
                    std::vector<int64_t> inner = {}, RowFill row_fill = {});
  bool has(const std::string &name) const;
  int64_t max_bs() const { return max_bs_; }
  int64_t max_tokens() const { return max_tokens_; }

  // Copies every plain slot whose field is present on the batch into the first rows of its
  // buffer (inner columns past the field's are set to 0), then runs the post-fills. The batch's
  // batch_size and num_tokens must fit the capacity (TORCH_CHECK). On CUDA the copies and the
  // row fills are one kernel launch, fields on the host first going over in one copy through a
  // pinned staging buffer; a field of another dtype or layout goes through copy_.
  void fill_from(const ForwardBatch &batch);
  ForwardBatch extract_buffer(int64_t padded_bs, int64_t padded_tokens,
                              const ForwardBatch &forward_batch_template) const;

 private:
  struct Slot {
    std::string name;
    SlotAxis axis;
    bool computed;
    PostFill post_fill;
    at::Tensor buffer;
    RowFill row_fill;
  };
  struct Staging;  // CUDA: the pinned and device staging buffers of host fields
  int64_t rows(SlotAxis axis, int64_t bs, int64_t tokens) const;
  // The first `rows` rows of slot i's buffer, made once per (slot, rows) and kept: a narrow costs
  // microseconds of host time, and an eager forward of a short prompt waits on the host.
  const at::Tensor &view(size_t i, int64_t rows) const;
  at::Device device_;
  int64_t max_bs_, max_tokens_;
  std::vector<Slot> slots_;
  mutable std::map<std::pair<size_t, int64_t>, at::Tensor> views_;
  std::shared_ptr<Staging> staging_;
};

// The slot of a ForwardBatch field by name ("input_ids", "positions", ...); throws
// std::invalid_argument for an unknown name.
std::optional<at::Tensor> &batch_field(ForwardBatch &b, const std::string &name);
const std::optional<at::Tensor> &batch_field(const ForwardBatch &b, const std::string &name);

struct PrefillRegistryOptions {
  int64_t max_blocks = 1;  // block table columns
  bool register_global_num_tokens = true;
  bool register_input_embeds = true;
};
// The forward's slots: plain input_ids, input_embeds, positions, out_cache_loc, cu_seqlens_q,
// seq_lens, block_table; computed logits_index and global_num_tokens.
BufferRegistry build_prefill_registry(const Model &model, int64_t max_bs, int64_t max_tokens,
                                      const PrefillRegistryOptions &options);

// Whether DETFUZZ_EAGER_INPUT_NO_COPY asks for the no-copy eager path ("1", "true", "yes").
bool eager_input_no_copy_from_env();

// The eager path's registry: built on first use and grown (next power of two) when a batch
// exceeds it; computed slots skip global_num_tokens so a value on the batch survives.
class EagerInputs {
 public:
  EagerInputs(const Model &model, int64_t max_blocks, bool no_copy = eager_input_no_copy_from_env());
  // The batch as the forward should see it: through the registry, or (no_copy) the batch itself.
  ForwardBatch view(const ForwardBatch &batch);
  int64_t capacity_bs() const { return registry_ ? registry_->max_bs() : 0; }
  int64_t capacity_tokens() const { return registry_ ? registry_->max_tokens() : 0; }
  bool no_copy() const { return no_copy_; }

 private:
  const Model &model_;
  int64_t max_blocks_;
  bool no_copy_;
  std::unique_ptr<BufferRegistry> registry_;
};

}  // namespace detfuzz::graph
