#include "ops/engine/engine.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>

namespace detfuzz::engine {

double CostModel::seconds(const StepShape &s, double wall_s) const {
  if (measured) return wall_s;
  return step_s + seq_s * s.seqs + token_s * s.new_tokens + pair_s * static_cast<double>(s.attention_pairs);
}

std::string EngineConfig::describe() const {
  std::ostringstream o;
  o << to_string(policy) << " threshold=" << threshold << " instances=" << instances
    << " router=" << (router.laps ? "laps" : "least-loaded") << " (threshold " << router.threshold << ", interval "
    << router.rebalance_interval_s << " s, ratio " << router.rebalance_ratio << ") page=" << page_size
    << " prefix_reuse=" << prefix_reuse << " max_prefill_tokens=" << max_prefill_tokens
    << " max_running=" << max_running;
  return o.str();
}

int32_t greedy_token(const at::Tensor &logprobs_row) {
  const at::Tensor row = logprobs_row.to(at::kCPU, at::kFloat).contiguous();
  const float *p = row.data_ptr<float>();
  int64_t best = 0;
  for (int64_t i = 1; i < row.numel(); ++i)
    if (p[i] > p[best] || (p[best] != p[best] && p[i] == p[i])) best = i;
  return static_cast<int32_t>(best);
}

namespace {

using Clock = std::chrono::steady_clock;
constexpr double kNever = std::numeric_limits<double>::infinity();

// A request an instance has admitted: its pages, how far its KV is written, what it generated.
struct Live {
  size_t index = 0;  // in the trace
  const Request *req = nullptr;
  LapsRouter::Route route;
  PrefixBlockManager::Lease lease;
  int64_t computed = 0;  // tokens whose KV is written
  bool aborted = false;
  bool routed_done = false;  // the router was told its prefill is over
};

struct Instance {
  Instance(const EngineConfig &c, StepModel &model, int64_t blocks, int64_t max_seq_pages)
      : scheduler(c.policy, c.threshold),
        pages(blocks + model.reserved_pages(), c.page_size, c.prefix_reuse, model.reserved_pages()),
        model(model.instance(blocks + model.reserved_pages(), c.page_size, max_seq_pages)) {}
  DualQueueScheduler scheduler;
  PrefixBlockManager pages;
  std::unique_ptr<ModelInstance> model;  // this server's KV cache (and graph runner)
  std::vector<Live> live;                // admission order
  int64_t chunked_id = -1;               // the request whose prompt is part-way through
  double busy_until = kNever;            // end of the running step, kNever when idle
  std::vector<int64_t> ending;           // ids whose first token or last token the running step produces
};

void validate(const Trace &trace, const EngineConfig &c) {
  auto bad = [](const std::string &what) { throw std::invalid_argument("engine: " + what); };
  std::set<int64_t> ids;
  for (const Request &r : trace) {
    if (!ids.insert(r.id).second) bad("request id " + std::to_string(r.id) + " appears twice");
    if (r.prompt.empty()) bad("request " + std::to_string(r.id) + " has an empty prompt");
    if (r.decode_steps < 0) bad("request " + std::to_string(r.id) + " has negative decode steps");
    if (!(r.arrival_s >= 0)) bad("request " + std::to_string(r.id) + " arrives at a negative time");
  }
  if (c.instances < 1 || c.page_size < 1 || c.max_prefill_tokens < 1 || c.max_running < 1 || c.blocks_per_instance < 0)
    bad("config needs instances, page_size, max_prefill_tokens, max_running >= 1 (" + c.describe() + ")");
}

class Simulation {
 public:
  Simulation(const Trace &trace, const EngineConfig &c, StepModel &model)
      : trace_(trace), c_(c), router_(c.instances, c.router) {
    int64_t blocks = c.blocks_per_instance, max_seq_pages = 1;
    for (const Request &r : trace) {
      const int64_t pages = (static_cast<int64_t>(r.prompt.size()) + r.decode_steps + c.page_size - 1) / c.page_size;
      max_seq_pages = std::max(max_seq_pages, pages);
      if (c.blocks_per_instance == 0) blocks += pages;
    }
    blocks = std::max<int64_t>(blocks, 1);
    if (max_seq_pages > blocks)
      throw std::invalid_argument("engine: a request needs " + std::to_string(max_seq_pages) +
                                  " pages, more than an instance has (" + std::to_string(blocks) + ")");
    for (int64_t i = 0; i < c.instances; ++i)
      instances_.push_back(std::make_unique<Instance>(c, model, blocks, max_seq_pages));
    result_.outputs.resize(trace.size());
    for (size_t i = 0; i < trace.size(); ++i) {
      index_of_[trace[i].id] = i;
      arrivals_.insert({trace[i].arrival_s, trace[i].id});
      if (trace[i].abort_s >= 0) aborts_.insert({std::max(trace[i].abort_s, trace[i].arrival_s), trace[i].id});
    }
  }

  EngineResult run() {
    double now = 0;
    while (true) {
      double next = kNever;
      for (const auto &in : instances_) next = std::min(next, in->busy_until);
      if (!arrivals_.empty()) next = std::min(next, arrivals_.begin()->first);
      if (!aborts_.empty()) next = std::min(next, aborts_.begin()->first);
      if (next == kNever) break;
      now = next;
      for (size_t i = 0; i < instances_.size(); ++i)
        if (instances_[i]->busy_until == now) finish_step(*instances_[i], now);
      while (!aborts_.empty() && aborts_.begin()->first == now) {
        abort(aborts_.begin()->second);
        aborts_.erase(aborts_.begin());
      }
      while (!arrivals_.empty() && arrivals_.begin()->first == now) {
        arrive(arrivals_.begin()->second, now);
        arrivals_.erase(arrivals_.begin());
      }
      for (auto &in : instances_)
        if (in->busy_until == kNever) start_step(*in, now);
    }
    for (const auto &in : instances_)
      if (!in->scheduler.empty() || !in->live.empty())
        throw std::logic_error("engine: an instance stopped with work left (a request that can never be admitted)");
    result_.stats.end_s = now;
    result_.stats.router = router_.status();
    return std::move(result_);
  }

 private:
  void arrive(int64_t id, double now) {
    const size_t k = index_of_.at(id);
    if (aborted_.count(id)) return;
    const LapsRouter::Route route = router_.route(trace_[k], now);
    routes_[id] = route;
    result_.outputs[k].instance = route.instance;
    instances_[route.instance]->scheduler.add(trace_[k]);
  }

  void abort(int64_t id) {
    const size_t k = index_of_.at(id);
    if (result_.outputs[k].finished) return;
    aborted_.insert(id);
    ++result_.stats.aborted;
    const auto r = routes_.find(id);
    if (r == routes_.end()) return;  // not arrived yet: it never will
    Instance &in = *instances_[r->second.instance];
    if (in.scheduler.abort(id)) {
      router_.done(r->second);
      return;
    }
    for (Live &l : in.live)
      if (l.req->id == id) l.aborted = true;
    if (in.busy_until == kNever) purge_aborted(in);
  }

  // Frees the pages of aborted requests (between steps only: a running step may still hold them).
  void purge_aborted(Instance &in) {
    for (Live &l : in.live) {
      if (!l.aborted) continue;
      if (!l.routed_done) router_.done(l.route);
      in.pages.release(l.lease.blocks);
      if (in.chunked_id == l.req->id) in.chunked_id = -1;
    }
    in.live.erase(std::remove_if(in.live.begin(), in.live.end(), [](const Live &l) { return l.aborted; }),
                  in.live.end());
  }

  Live *find_live(Instance &in, int64_t id) {
    for (Live &l : in.live)
      if (l.req->id == id) return &l;
    return nullptr;
  }

  void start_step(Instance &in, double now) {
    purge_aborted(in);
    std::vector<size_t> members;  // indices into in.live (which grows while the batch is built)
    std::vector<int64_t> counts;
    int64_t budget = c_.max_prefill_tokens;
    for (size_t i = 0; i < in.live.size() && in.chunked_id >= 0; ++i) {
      const Live &l = in.live[i];
      if (l.req->id != in.chunked_id) continue;
      const int64_t n = std::min<int64_t>(budget, static_cast<int64_t>(l.req->prompt.size()) - l.computed);
      members.push_back(i);
      counts.push_back(n);
      budget -= n;
      if (l.computed + n == static_cast<int64_t>(l.req->prompt.size())) in.chunked_id = -1;
    }
    if (budget > 0) {
      in.scheduler.next_batch([&](const Request &r) {
        if (budget == 0 || static_cast<int64_t>(in.live.size()) >= c_.max_running) return false;
        const int64_t prompt = static_cast<int64_t>(r.prompt.size());
        auto lease = in.pages.acquire(r.prompt, prompt + r.decode_steps);
        if (!lease) return false;
        const int64_t left = prompt - lease->cached_tokens;
        if (left > budget && in.chunked_id >= 0) {  // one chunked request at a time
          in.pages.release(lease->blocks);
          return false;
        }
        Live l;
        l.index = index_of_.at(r.id);
        l.req = &r;
        l.route = routes_.at(r.id);
        l.computed = lease->cached_tokens;
        l.lease = std::move(*lease);
        result_.outputs[l.index].cached_tokens = l.computed;
        result_.stats.reused_tokens += l.computed;
        const int64_t n = std::min(left, budget);
        if (n < left) {
          in.chunked_id = r.id;
          ++result_.stats.chunked_prefills;
        }
        budget -= n;
        in.live.push_back(std::move(l));
        members.push_back(in.live.size() - 1);
        counts.push_back(n);
        return true;
      });
    }
    const bool prefill = !members.empty();
    if (!prefill) {
      for (size_t i = 0; i < in.live.size(); ++i) {
        const Live &l = in.live[i];
        const int64_t prompt = static_cast<int64_t>(l.req->prompt.size());
        if (l.computed >= prompt && l.computed < prompt + l.req->decode_steps) {
          members.push_back(i);
          counts.push_back(1);
        }
      }
    }
    if (members.empty()) return;
    std::vector<Live *> seqs;
    for (size_t i : members) seqs.push_back(&in.live[i]);
    run_step(in, seqs, counts, prefill, now);
  }

  void run_step(Instance &in, const std::vector<Live *> &members, const std::vector<int64_t> &counts, bool prefill,
                double now) {
    std::vector<SeqWork> batch;
    StepShape shape;
    shape.prefill = prefill;
    for (size_t s = 0; s < members.size(); ++s) {
      const Live &l = *members[s];
      SeqWork w;
      w.context = l.computed;
      w.blocks = l.lease.blocks;
      if (prefill) {
        w.tokens.assign(l.req->prompt.begin() + l.computed, l.req->prompt.begin() + l.computed + counts[s]);
      } else {
        const auto &gen = result_.outputs[l.index].tokens;
        w.tokens = {gen.back()};
      }
      shape.new_tokens += counts[s];
      shape.attention_pairs += counts[s] * l.computed + counts[s] * (counts[s] + 1) / 2;
      batch.push_back(std::move(w));
    }
    shape.seqs = static_cast<int64_t>(batch.size());
    const auto t0 = Clock::now();
    const StepOutput out = in.model->run(batch, prefill);
    const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
    shape.graph = out.graph;
    if (out.logprobs.dim() != 2 || out.logprobs.size(0) != shape.seqs)
      throw std::logic_error("engine: the model returned log-probabilities of shape " +
                             std::string(c10::str(out.logprobs.sizes())) + " for " + std::to_string(shape.seqs) +
                             " sequences");
    ++result_.stats.steps;
    ++(prefill ? result_.stats.prefill_steps : result_.stats.decode_steps);
    result_.stats.graph_steps += out.graph;
    in.ending.clear();
    for (size_t s = 0; s < members.size(); ++s) {
      Live &l = *members[s];
      RequestOutput &o = result_.outputs[l.index];
      const int64_t prompt = static_cast<int64_t>(l.req->prompt.size());
      l.computed += counts[s];
      if (prefill) ++o.prefill_chunks;
      if (l.computed < prompt) continue;  // a chunk: its logits are not a token
      if (prefill) in.pages.publish(l.req->prompt, l.lease.blocks);
      const at::Tensor row = out.logprobs[static_cast<int64_t>(s)].clone();
      o.tokens.push_back(greedy_token(row));
      o.final_logprobs = row;
      in.ending.push_back(l.req->id);
    }
    in.busy_until = now + c_.cost.seconds(shape, wall);
  }

  void finish_step(Instance &in, double now) {
    in.busy_until = kNever;
    for (int64_t id : in.ending) {
      Live *l = find_live(in, id);
      if (!l || l->aborted) continue;
      RequestOutput &o = result_.outputs[l->index];
      if (!l->routed_done) {
        o.first_token_s = now;
        router_.done(l->route);
        l->routed_done = true;
      }
      if (static_cast<int64_t>(o.tokens.size()) == 1 + l->req->decode_steps) {
        o.finished = true;
        o.finish_s = now;
        in.pages.release(l->lease.blocks);
        in.live.erase(in.live.begin() + (l - in.live.data()));
      }
    }
    in.ending.clear();
    purge_aborted(in);
  }

  const Trace &trace_;
  const EngineConfig &c_;
  LapsRouter router_;
  std::vector<std::unique_ptr<Instance>> instances_;
  std::map<int64_t, size_t> index_of_;
  std::map<int64_t, LapsRouter::Route> routes_;
  std::set<int64_t> aborted_;
  std::set<std::pair<double, int64_t>> arrivals_, aborts_;
  EngineResult result_;
};

}  // namespace

EngineResult run_trace(const Trace &trace, const EngineConfig &config, StepModel &model) {
  validate(trace, config);
  return Simulation(trace, config, model).run();
}

}  // namespace detfuzz::engine
