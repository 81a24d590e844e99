// The LAPS router over N prefill instances (seed 001, Feature 3, SGLang's mini_lb.py).
//
// With LAPS on (and at least two instances) the instances start split in two groups, the first
// half short, the second half long. A request is classified by its estimated prompt tokens
// (<= threshold: short) and sent to the least-loaded instance of its group (load: the requests
// routed there and not yet done; ties go to the lowest index); the group's pending counter counts
// it until done(). Before routing, at most once per rebalance interval, one instance moves from
// the long group to the short one when short_pending > long_pending * ratio (and the long group
// keeps at least one), or the other way round when long_pending > short_pending * ratio. The moved
// instance is the least-loaded one of the giving group (ties: the highest index). With LAPS off,
// or a single instance, every request goes to the least-loaded instance of all.
// status() is the seed's /laps_status.
#pragma once

#include "ops/engine/request.h"

#include <string>
#include <vector>

namespace detfuzz::engine {

struct RouterConfig {
  bool laps = true;
  int64_t threshold = 256;            // tokens; <= threshold is short
  double rebalance_interval_s = 5.0;  // seconds between rebalance checks
  double rebalance_ratio = 2.0;       // pending ratio that moves an instance
};

enum class Group { short_group, long_group };

struct RouterStatus {
  bool enabled = false;
  int64_t threshold = 0;
  std::vector<int64_t> short_group, long_group;
  int64_t short_pending = 0, long_pending = 0;
  int64_t rebalances = 0;
  std::string json() const;  // {"enabled":true,"threshold":256,"short_group":[0],...}
};

class LapsRouter {
 public:
  LapsRouter(int64_t instances, const RouterConfig &config);

  static int64_t estimate_prompt_tokens(const Request &r);  // the prompt's length: ids are known
  Group classify(const Request &r) const;

  struct Route {
    int64_t instance = -1;
    Group group = Group::short_group;
  };
  Route route(const Request &r, double now_s);  // rebalance check, then the group's least-loaded instance
  void done(const Route &route);                // the request's prefill finished, or it was aborted
  bool maybe_rebalance(double now_s);           // true when an instance moved

  RouterStatus status() const;
  bool enabled() const { return enabled_; }
  int64_t load(int64_t instance) const { return load_.at(instance); }

 private:
  int64_t least_loaded(const std::vector<int64_t> &group) const;

  RouterConfig config_;
  bool enabled_;
  std::vector<int64_t> short_group_, long_group_, all_;
  std::vector<int64_t> load_;
  int64_t short_pending_ = 0, long_pending_ = 0, rebalances_ = 0;
  double last_rebalance_s_ = 0;
};

}  // namespace detfuzz::engine
