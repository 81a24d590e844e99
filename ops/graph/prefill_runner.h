// Batch prefill through CUDA graphs, right-aligned (seed 001, Feature 1), and the eager paths.
//
// Buckets (bs, seq_len), default {1, 2, 4, 8} x {16, 32, 64, 128, 256}: a bucket's forward,
// attention included, is captured once in an at::cuda::CUDAGraph (after warm-up runs) over the
// stable buffers of one buffer registry sized for the largest bucket. Every graph of a runner
// allocates from one memory pool (at::cuda::graph_pool_handle(), shared through capture_begin):
// the graphs replay one at a time on one stream and each keeps its output tensor alive, so a
// graph's intermediates may reuse another's; capture_all captures the largest bucket first, so
// the smaller ones fit in the memory it left (a bucket captured on first use shares the pool too,
// growing it when it needs more). Every bucket is captured on one stream of the runner's: the
// caching allocator reuses a block only on the stream it was allocated on. RunnerOptions::
// shared_pool = false gives each graph a private pool of its own (what the bench compares
// against). A batch replays in the
// smallest captured bucket (fewest token slots, then fewest sequences) with bs >= its sequence
// count and seq_len >= its longest extend:
//   - slot s holds sequence s's new tokens RIGHT-ALIGNED: rows [s*L + L - n, (s+1)*L). The
//     attention sees q_len = L for every slot and kv_len = cached + n, and its mask is bottom-right
//     aligned, so the real rows see exactly their causal keys; the padding rows before them see
//     no key (their output is unspecified on CUDA, zero on the CPU) and are never read;
//   - dummy slots (s >= S) get seq_lens = 1 and a block-table row of the scratch page;
//   - padding and dummy tokens write their K/V to the scratch slot (slot 0, page 0), and only there;
//   - cu_seqlens_q = [0, L, 2L, ...], logits at each slot's last row (s+1)*L - 1;
//   - the result is sliced to the S real sequences.
// Before a replay the registry's buffers are updated in place (no pointer ever changes). A batch
// that fits no bucket runs eager, and the result says so; a failed capture is an error naming the
// bucket. On the CPU the same runner runs the same steps (bucket choice, alignment, dummy slots,
// in-place buffer updates) and executes the bucket's static-shape forward over the stable
// buffers where CUDA replays a graph, so every property of it runs in CI.
//
// The KV cache's page 0 belongs to the runner (scratch): sequences must not use it.
#pragma once

#include "ops/graph/buffer_registry.h"
#include "ops/graph/model.h"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace detfuzz::graph {

// One sequence of a batch: `cached` tokens already in the cache, then its new tokens at positions
// cached, cached + 1, ...; `blocks` are the pages of all cached + new tokens, in order.
struct SequenceInput {
  std::vector<int64_t> new_tokens;
  int64_t cached = 0;
  std::vector<int64_t> blocks;
};

struct Bucket {
  int64_t bs = 0, seq_len = 0;
  bool operator<(const Bucket &o) const { return bs != o.bs ? bs < o.bs : seq_len < o.seq_len; }
  bool operator==(const Bucket &o) const { return bs == o.bs && seq_len == o.seq_len; }
  std::string name() const;  // "bs4xlen64"
};

// The slot of token `pos` of a sequence whose pages are `blocks` (page size `block_size`).
int64_t token_slot(const std::vector<int64_t> &blocks, int64_t block_size, int64_t pos);

// The packed (unpadded) batch of the eager path, as CPU tensors or on `device`.
ForwardBatch pack_batch(const std::vector<SequenceInput> &seqs, int64_t block_size, int64_t max_blocks,
                        at::Device device);

enum class EagerMode { direct, registry, no_copy };

struct RunResult {
  at::Tensor logprobs;  // float32 [S, vocab]
  bool used_graph = false;
  std::optional<Bucket> bucket;  // the bucket it ran in; nullopt when eager
  std::string note;              // why eager, when it was not a graph
};

// The eager forward of a batch (EagerMode::registry and no_copy go through `inputs`).
RunResult run_eager(const Model &model, attention::KVCache &cache, const std::vector<SequenceInput> &seqs,
                    int64_t max_blocks, EagerInputs *inputs = nullptr);

struct RunnerOptions {
  std::vector<int64_t> batch_sizes{1, 2, 4, 8};
  std::vector<int64_t> seq_lens{16, 32, 64, 128, 256};
  int64_t max_blocks = 32;  // block-table columns (a sequence's pages at most)
  int warmup_runs = 2;
  bool left_align = false;  // the planted bug: real tokens at the start of their slot
  bool shared_pool = true;  // CUDA: one memory pool for every captured graph (else one per graph)
};

class BatchPrefillGraphRunner {
 public:
  // On CUDA the runner captures buckets on first use (capture_all captures them all now).
  BatchPrefillGraphRunner(const Model &model, attention::KVCache &cache, RunnerOptions options);
  ~BatchPrefillGraphRunner();
  const std::vector<Bucket> &buckets() const { return buckets_; }
  const RunnerOptions &options() const { return options_; }
  // Every bucket the batch fits, smallest first; empty when none.
  std::vector<Bucket> fitting(const std::vector<SequenceInput> &seqs) const;
  // Runs the batch in `bucket` (default: the smallest that fits; a bucket that does not fit is
  // an error). With no bucket that fits, runs eager and says so in the result.
  RunResult run(const std::vector<SequenceInput> &seqs, std::optional<Bucket> bucket = std::nullopt);
  // Captures every bucket not captured yet, largest first (most token slots, then most sequences).
  void capture_all();
  // The buckets in the order they were captured (on the CPU: prepared).
  const std::vector<Bucket> &capture_order() const { return capture_order_; }
  // CUDA: the bytes the caching allocator holds in the captured graphs' memory pools (segments
  // of those pools, in use or cached); 0 on the CPU.
  int64_t graph_pool_bytes() const;
  // The host-side padded, right-aligned batch of a bucket (what fill_from copies into the buffers).
  ForwardBatch padded_batch(const std::vector<SequenceInput> &seqs, const Bucket &b) const;

 private:
  struct Captured;
  struct CaptureStream;
  Captured &captured(const Bucket &b);
  const Model &model_;
  attention::KVCache &cache_;
  RunnerOptions options_;
  std::vector<Bucket> buckets_;
  BufferRegistry registry_;
  std::map<Bucket, std::unique_ptr<Captured>> captured_;
  std::vector<Bucket> capture_order_;
  c10::MempoolId_t pool_{0, 0};                    // CUDA: the shared pool, made at the first capture
  std::unique_ptr<CaptureStream> capture_stream_;  // CUDA: the one stream every bucket is captured on
};

}  // namespace detfuzz::graph
