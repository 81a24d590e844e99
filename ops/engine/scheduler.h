// The waiting queue of one prefill instance: FIFO (the baseline) or LAPS's dual queue (seed 001,
// Feature 2, SGLang's disaggregation/prefill.py).
//
// LAPS: a request whose prompt has at most `threshold` tokens joins the short queue, any other the
// long queue. A batch is built from the short queue first (the seed's queue swap: the ordinary
// batch builder runs over one sub-queue), and from the long queue only when the short one gives
// nothing. An abort filters the request out of both queues. waiting() is short + long, the
// seed's synchronised waiting_queue. FIFO: one queue in arrival order.
//
// The batch builder walks its queue in order and stops at the first request that `admit` refuses
// (no token budget, no KV pages, no room): a request never overtakes another of its own queue.
#pragma once

#include "ops/engine/request.h"

#include <deque>
#include <functional>
#include <string>
#include <vector>

namespace detfuzz::engine {

enum class Policy { fifo, laps };
const char *to_string(Policy p);
Policy policy_from_string(const std::string &s);  // "fifo" | "laps"; throws std::invalid_argument

class DualQueueScheduler {
 public:
  DualQueueScheduler(Policy policy, int64_t threshold);

  bool is_short(const Request &r) const;  // LAPS's classification (FIFO has one queue)
  void add(const Request &r);             // the request must outlive its time in the queue
  bool abort(int64_t id);                 // true when it was waiting (it is gone from both queues)
  // Takes requests in queue order while admit(request) is true; LAPS falls back to the long
  // queue when the short queue yields nothing. The taken requests leave the queue.
  std::vector<const Request *> next_batch(const std::function<bool(const Request &)> &admit);

  std::vector<int64_t> waiting() const;  // ids, short queue then long queue
  size_t short_size() const { return short_.size(); }
  size_t long_size() const { return long_.size(); }
  bool empty() const { return short_.empty() && long_.empty(); }
  Policy policy() const { return policy_; }
  int64_t threshold() const { return threshold_; }

 private:
  static std::vector<const Request *> take(std::deque<const Request *> &queue,
                                           const std::function<bool(const Request &)> &admit);
  Policy policy_;
  int64_t threshold_;
  std::deque<const Request *> short_, long_;  // FIFO keeps everything in short_
};

}  // namespace detfuzz::engine
