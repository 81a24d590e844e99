#include "ops/engine/scheduler.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <stdexcept>

namespace detfuzz::engine {

const char *to_string(Policy p) { return p == Policy::fifo ? "fifo" : "laps"; }

Policy policy_from_string(const std::string &s) {
  if (s == "fifo") return Policy::fifo;
  if (s == "laps") return Policy::laps;
  throw std::invalid_argument("unknown scheduling policy '" + s + "' (expected fifo or laps)");
}

DualQueueScheduler::DualQueueScheduler(Policy policy, int64_t threshold) : policy_(policy), threshold_(threshold) {
  TORCH_CHECK(threshold >= 0, "DualQueueScheduler: threshold must be >= 0, got ", threshold);
}

bool DualQueueScheduler::is_short(const Request &r) const {
  return static_cast<int64_t>(r.prompt.size()) <= threshold_;
}

void DualQueueScheduler::add(const Request &r) {
  (policy_ == Policy::fifo || is_short(r) ? short_ : long_).push_back(&r);
}

bool DualQueueScheduler::abort(int64_t id) {
  const auto aborted = [id](const Request *r) { return r->id == id; };
  const size_t before = short_.size() + long_.size();
  short_.erase(std::remove_if(short_.begin(), short_.end(), aborted), short_.end());
  long_.erase(std::remove_if(long_.begin(), long_.end(), aborted), long_.end());
  return short_.size() + long_.size() != before;
}

std::vector<const Request *> DualQueueScheduler::take(std::deque<const Request *> &queue,
                                                      const std::function<bool(const Request &)> &admit) {
  std::vector<const Request *> batch;
  while (!queue.empty() && admit(*queue.front())) {
    batch.push_back(queue.front());
    queue.pop_front();
  }
  return batch;
}

std::vector<const Request *> DualQueueScheduler::next_batch(const std::function<bool(const Request &)> &admit) {
  std::vector<const Request *> batch = take(short_, admit);
  if (batch.empty()) batch = take(long_, admit);
  return batch;
}

std::vector<int64_t> DualQueueScheduler::waiting() const {
  std::vector<int64_t> ids;
  for (const auto *q : {&short_, &long_})
    for (const Request *r : *q) ids.push_back(r->id);
  return ids;
}

}  // namespace detfuzz::engine
