#include "ops/graph/prefill_runner.h"

#include <algorithm>
#include <sstream>

#ifdef DETFUZZ_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <c10/cuda/CUDACachingAllocator.h>

#include "ops/device_memory.h"
#endif

namespace detfuzz::graph {
namespace {

constexpr int64_t kScratchSlot = 0;  // slot 0 of page 0

at::Tensor host_long(int64_t n) { return at::zeros({n}, at::kLong); }
at::Tensor host_int(at::IntArrayRef sizes) { return at::zeros(sizes, at::kInt); }

void check_sequences(const std::vector<SequenceInput> &seqs, const Model &model, int64_t block_size,
                     int64_t max_blocks) {
  TORCH_CHECK(!seqs.empty(), "prefill: the batch has no sequence");
  for (size_t s = 0; s < seqs.size(); ++s) {
    const SequenceInput &q = seqs[s];
    const int64_t n = static_cast<int64_t>(q.new_tokens.size()), total = q.cached + n;
    TORCH_CHECK(n >= 1 && q.cached >= 0, "prefill: sequence ", s, " has ", n, " new tokens and ", q.cached,
                " cached (needs >= 1 new, >= 0 cached)");
    const int64_t pages = (total + block_size - 1) / block_size;
    TORCH_CHECK(static_cast<int64_t>(q.blocks.size()) >= pages && static_cast<int64_t>(q.blocks.size()) <= max_blocks,
                "prefill: sequence ", s, " has ", q.blocks.size(), " pages for ", total, " tokens (needs ", pages,
                ", at most ", max_blocks, ")");
    for (int64_t b : q.blocks)
      TORCH_CHECK(b >= 1, "prefill: sequence ", s, " uses page ", b, " (page 0 is the runner's scratch page)");
    for (int64_t t : q.new_tokens)
      TORCH_CHECK(t >= 0 && t < model.config().vocab, "prefill: sequence ", s, " has token id ", t, " outside [0, ",
                  model.config().vocab, ")");
  }
}

}  // namespace

std::string Bucket::name() const { return "bs" + std::to_string(bs) + "xlen" + std::to_string(seq_len); }

int64_t token_slot(const std::vector<int64_t> &blocks, int64_t block_size, int64_t pos) {
  return blocks.at(static_cast<size_t>(pos / block_size)) * block_size + pos % block_size;
}

ForwardBatch pack_batch(const std::vector<SequenceInput> &seqs, int64_t block_size, int64_t max_blocks,
                        at::Device device) {
  const int64_t s_count = static_cast<int64_t>(seqs.size());
  int64_t t_count = 0;
  for (const auto &q : seqs) t_count += static_cast<int64_t>(q.new_tokens.size());
  at::Tensor ids = host_long(t_count), pos = host_long(t_count), loc = host_long(t_count);
  at::Tensor cu = host_int({s_count + 1}), lens = host_int({s_count}), table = host_int({s_count, max_blocks});
  at::Tensor last = host_long(s_count);
  int64_t *ip = ids.data_ptr<int64_t>(), *pp = pos.data_ptr<int64_t>(), *lp = loc.data_ptr<int64_t>();
  int32_t *cp = cu.data_ptr<int32_t>(), *kp = lens.data_ptr<int32_t>(), *tp = table.data_ptr<int32_t>();
  int64_t t = 0;
  for (int64_t s = 0; s < s_count; ++s) {
    const SequenceInput &q = seqs[s];
    for (size_t j = 0; j < q.new_tokens.size(); ++j, ++t) {
      ip[t] = q.new_tokens[j];
      pp[t] = q.cached + static_cast<int64_t>(j);
      lp[t] = token_slot(q.blocks, block_size, pp[t]);
    }
    cp[s + 1] = static_cast<int32_t>(t);
    kp[s] = static_cast<int32_t>(q.cached + static_cast<int64_t>(q.new_tokens.size()));
    for (size_t j = 0; j < q.blocks.size(); ++j)
      tp[s * max_blocks + static_cast<int64_t>(j)] = static_cast<int32_t>(q.blocks[j]);
    last.data_ptr<int64_t>()[s] = t - 1;
  }
  ForwardBatch b;
  b.input_ids = ids.to(device);
  b.positions = pos.to(device);
  b.out_cache_loc = loc.to(device);
  b.cu_seqlens_q = cu.to(device);
  b.seq_lens = lens.to(device);
  b.block_table = table.to(device);
  b.logits_index = last.to(device);
  b.global_num_tokens = at::full({s_count}, t_count, at::kLong).to(device);
  b.batch_size = s_count;
  b.num_tokens = t_count;
  return b;
}

RunResult run_eager(const Model &model, attention::KVCache &cache, const std::vector<SequenceInput> &seqs,
                    int64_t max_blocks, EagerInputs *inputs) {
  check_sequences(seqs, model, cache.config().block_size, max_blocks);
  const ForwardBatch packed = pack_batch(seqs, cache.config().block_size, max_blocks, model.device());
  const ForwardBatch view = inputs ? inputs->view(packed) : packed;
  const std::unique_ptr<AttentionStep> attention = model.kernels().name == "torch"
                                                       ? torch_attention(view, model.backend())
                                                       : invariant_attention(view, model.config(), cache, false);
  RunResult r;
  r.logprobs = model.forward(view, cache, *attention);
  return r;
}

struct BatchPrefillGraphRunner::CaptureStream {
#ifdef DETFUZZ_WITH_CUDA
  c10::cuda::CUDAStream stream;
#endif
};

struct BatchPrefillGraphRunner::Captured {
  ForwardBatch views;  // the bucket's views of the registry's stable buffers
  std::unique_ptr<AttentionStep> attention;
#ifdef DETFUZZ_WITH_CUDA
  std::unique_ptr<at::cuda::CUDAGraph> graph;
#endif
  at::Tensor output;  // CUDA: the graph's output, rewritten by each replay
};

BatchPrefillGraphRunner::BatchPrefillGraphRunner(const Model &model, attention::KVCache &cache, RunnerOptions options)
    : model_(model), cache_(cache), options_(std::move(options)), registry_(model.device(), 1, 1) {
  TORCH_CHECK(!options_.batch_sizes.empty() && !options_.seq_lens.empty(), "prefill runner: no buckets");
  for (int64_t bs : options_.batch_sizes)
    for (int64_t len : options_.seq_lens) {
      TORCH_CHECK(bs >= 1 && len >= 1, "prefill runner: bucket (", bs, ", ", len, ") must be positive");
      buckets_.push_back({bs, len});
    }
  std::sort(buckets_.begin(), buckets_.end(), [](const Bucket &a, const Bucket &b) {
    return a.bs * a.seq_len != b.bs * b.seq_len ? a.bs * a.seq_len < b.bs * b.seq_len : a.bs < b.bs;
  });
  buckets_.erase(std::unique(buckets_.begin(), buckets_.end()), buckets_.end());
  const int64_t max_bs = *std::max_element(options_.batch_sizes.begin(), options_.batch_sizes.end());
  const int64_t max_len = *std::max_element(options_.seq_lens.begin(), options_.seq_lens.end());
  const int64_t capacity = options_.max_blocks * cache_.config().block_size;
  TORCH_CHECK(capacity >= max_len, "prefill runner: the block table holds ", capacity, " tokens, less than seq_len ",
              max_len);
  TORCH_CHECK(cache_.config().num_layers == model_.config().layers, "prefill runner: the cache has ",
              cache_.config().num_layers, " layers, the model ", model_.config().layers);
  PrefillRegistryOptions o;
  o.max_blocks = options_.max_blocks;
  o.register_input_embeds = false;  // token batches only
  registry_ = build_prefill_registry(model_, max_bs, max_bs * max_len, o);
}

BatchPrefillGraphRunner::~BatchPrefillGraphRunner() {
#ifdef DETFUZZ_WITH_CUDA
  // The captured graphs' private memory pools stay cached after the graphs go: release them once
  // the allocator holds too much (see ops/device_memory.h), so that a campaign building a
  // runner per case does not run out of memory in a later capture.
  const bool had_graphs = !captured_.empty() && model_.device().is_cuda();
  captured_.clear();
  if (had_graphs) {
    try {
      const at::Device d = model_.device();
      device_memory::trim_graph_pools(d.has_index() ? d.index() : c10::cuda::current_device());
    } catch (const std::exception &) {
      // A destructor must not throw; the next capture reports the device's state.
    }
  }
#endif
}

std::vector<Bucket> BatchPrefillGraphRunner::fitting(const std::vector<SequenceInput> &seqs) const {
  int64_t longest = 0;
  for (const auto &q : seqs) longest = std::max<int64_t>(longest, static_cast<int64_t>(q.new_tokens.size()));
  std::vector<Bucket> out;
  for (const Bucket &b : buckets_)
    if (b.bs >= static_cast<int64_t>(seqs.size()) && b.seq_len >= longest) out.push_back(b);
  return out;
}

ForwardBatch BatchPrefillGraphRunner::padded_batch(const std::vector<SequenceInput> &seqs, const Bucket &b) const {
  const int64_t len = b.seq_len, tokens = b.bs * len, bsz = cache_.config().block_size;
  at::Tensor ids = host_long(tokens), pos = host_long(tokens), loc = at::full({tokens}, kScratchSlot, at::kLong);
  at::Tensor cu = host_int({b.bs + 1}), lens = host_int({b.bs}), table = host_int({b.bs, options_.max_blocks});
  int64_t *ip = ids.data_ptr<int64_t>(), *pp = pos.data_ptr<int64_t>(), *lp = loc.data_ptr<int64_t>();
  int32_t *cp = cu.data_ptr<int32_t>(), *kp = lens.data_ptr<int32_t>(), *tp = table.data_ptr<int32_t>();
  for (int64_t s = 0; s < b.bs; ++s) {
    cp[s + 1] = static_cast<int32_t>((s + 1) * len);
    if (s >= static_cast<int64_t>(seqs.size())) {  // a dummy slot: one key, on the scratch page
      kp[s] = 1;
      continue;
    }
    const SequenceInput &q = seqs[s];
    const int64_t n = static_cast<int64_t>(q.new_tokens.size());
    const int64_t first = s * len + (options_.left_align ? 0 : len - n);
    for (int64_t j = 0; j < n; ++j) {
      ip[first + j] = q.new_tokens[j];
      pp[first + j] = q.cached + j;
      lp[first + j] = token_slot(q.blocks, bsz, q.cached + j);
    }
    kp[s] = static_cast<int32_t>(q.cached + n);
    for (size_t j = 0; j < q.blocks.size(); ++j)
      tp[s * options_.max_blocks + static_cast<int64_t>(j)] = static_cast<int32_t>(q.blocks[j]);
  }
  ForwardBatch fb;
  fb.input_ids = ids;
  fb.positions = pos;
  fb.out_cache_loc = loc;
  fb.cu_seqlens_q = cu;
  fb.seq_lens = lens;
  fb.block_table = table;
  fb.batch_size = b.bs;
  fb.num_tokens = tokens;
  return fb;
}

BatchPrefillGraphRunner::Captured &BatchPrefillGraphRunner::captured(const Bucket &b) {
  auto it = captured_.find(b);
  if (it != captured_.end()) return *it->second;
  // Fill the buffers with the bucket's widest metadata (every slot q_len = L and the block table's
  // whole capacity of keys, on the scratch page) so that the attention plan made from them covers
  // any batch the bucket will replay; the forward writes only the scratch slot.
  ForwardBatch widest = padded_batch({}, b);
  widest.seq_lens->fill_(static_cast<int32_t>(options_.max_blocks * cache_.config().block_size));
  int64_t *positions = widest.positions->data_ptr<int64_t>();
  for (int64_t t = 0; t < widest.num_tokens; ++t) positions[t] = t % b.seq_len;
  registry_.fill_from(widest);
  capture_order_.push_back(b);
  auto cap = std::make_unique<Captured>();
  cap->views = registry_.extract_buffer(b.bs, b.bs * b.seq_len, widest);
  cap->attention = invariant_attention(cap->views, model_.config(), cache_, /*rows_without_keys=*/true);
#ifdef DETFUZZ_WITH_CUDA
  if (model_.backend() == Backend::cuda) {
    const c10::cuda::CUDAStream main = c10::cuda::getCurrentCUDAStream();
    // One capture stream for every bucket: the caching allocator reuses a freed block only for
    // the stream it was allocated on, so graphs captured on different streams (getStreamFromPool
    // hands them out in turn) could never share their pool's memory.
    if (!capture_stream_)
      capture_stream_ = std::make_unique<CaptureStream>(CaptureStream{c10::cuda::getStreamFromPool()});
    const c10::cuda::CUDAStream side = capture_stream_->stream;
    cap->graph = std::make_unique<at::cuda::CUDAGraph>();
    at::cuda::CUDAEvent main_ready;
    main_ready.record(main);
    main_ready.block(side);
    {
      c10::cuda::CUDAStreamGuard guard(side);
      for (int i = 0; i < options_.warmup_runs; ++i) model_.forward(cap->views, cache_, *cap->attention);
      // The shared pool: every graph of this runner allocates from it (see the header).
      if (options_.shared_pool && pool_ == c10::MempoolId_t{0, 0}) pool_ = at::cuda::graph_pool_handle();
      cap->graph->capture_begin(options_.shared_pool ? pool_ : c10::MempoolId_t{0, 0});
      try {
        cap->output = model_.forward(cap->views, cache_, *cap->attention);
        cap->graph->capture_end();
      } catch (const std::exception &e) {
        try {
          cap->graph->capture_end();
        } catch (...) {
        }
        throw std::runtime_error("prefill runner: capturing bucket " + b.name() + " failed: " + e.what());
      }
    }
    at::cuda::CUDAEvent side_done;
    side_done.record(side);
    side_done.block(main);
  }
#endif
  return *captured_.emplace(b, std::move(cap)).first->second;
}

void BatchPrefillGraphRunner::capture_all() {
  // Largest first: in the shared pool the smaller graphs then reuse the memory the largest left.
  for (auto b = buckets_.rbegin(); b != buckets_.rend(); ++b) captured(*b);
}

int64_t BatchPrefillGraphRunner::graph_pool_bytes() const {
  int64_t bytes = 0;
#ifdef DETFUZZ_WITH_CUDA
  std::vector<c10::MempoolId_t> pools;
  for (const auto &entry : captured_)
    if (entry.second->graph) pools.push_back(entry.second->graph->pool());
  if (pools.empty()) return 0;
  const auto snapshot = c10::cuda::CUDACachingAllocator::snapshot({0, 0}, /*include_traces=*/false);
  for (const auto &segment : snapshot.segments)
    if (std::find(pools.begin(), pools.end(), segment.owner_private_pool_id) != pools.end())
      bytes += static_cast<int64_t>(segment.total_size);
#endif
  return bytes;
}

RunResult BatchPrefillGraphRunner::run(const std::vector<SequenceInput> &seqs, std::optional<Bucket> bucket) {
  check_sequences(seqs, model_, cache_.config().block_size, options_.max_blocks);
  const std::vector<Bucket> fits = fitting(seqs);
  if (bucket) {
    TORCH_CHECK(std::find(fits.begin(), fits.end(), *bucket) != fits.end(), "prefill runner: the batch (", seqs.size(),
                " sequences) does not fit bucket ", bucket->name());
  } else if (fits.empty()) {
    RunResult r = run_eager(model_, cache_, seqs, options_.max_blocks);
    std::ostringstream why;
    int64_t longest = 0;
    for (const auto &q : seqs) longest = std::max<int64_t>(longest, static_cast<int64_t>(q.new_tokens.size()));
    why << "eager: no bucket fits " << seqs.size() << " sequences with an extend of " << longest << " tokens";
    r.note = why.str();
    return r;
  } else {
    bucket = fits.front();
  }
  Captured &cap = captured(*bucket);
  registry_.fill_from(padded_batch(seqs, *bucket));
  RunResult r;
  r.bucket = bucket;
  const int64_t s_count = static_cast<int64_t>(seqs.size());
#ifdef DETFUZZ_WITH_CUDA
  if (cap.graph) {
    cap.graph->replay();
    r.logprobs = cap.output.narrow(0, 0, s_count).clone();
    r.used_graph = true;
    return r;
  }
#endif
  r.logprobs = model_.forward(cap.views, cache_, *cap.attention).narrow(0, 0, s_count);
  r.note = "static-shape forward over the stable buffers (no CUDA graph on the CPU)";
  return r;
}

}  // namespace detfuzz::graph
