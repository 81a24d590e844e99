#include "ops/engine/router.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <sstream>

namespace detfuzz::engine {

namespace {
std::string json_list(const std::vector<int64_t> &v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}
}  // namespace

std::string RouterStatus::json() const {
  std::ostringstream o;
  o << "{\"enabled\":" << (enabled ? "true" : "false") << ",\"threshold\":" << threshold
    << ",\"short_group\":" << json_list(short_group) << ",\"long_group\":" << json_list(long_group)
    << ",\"short_pending\":" << short_pending << ",\"long_pending\":" << long_pending
    << ",\"rebalances\":" << rebalances << "}";
  return o.str();
}

LapsRouter::LapsRouter(int64_t instances, const RouterConfig &config)
    : config_(config), enabled_(config.laps && instances >= 2), load_(instances, 0) {
  TORCH_CHECK(instances >= 1, "LapsRouter: needs at least one instance, got ", instances);
  TORCH_CHECK(config.threshold >= 0 && config.rebalance_interval_s >= 0 && config.rebalance_ratio >= 1,
              "LapsRouter: threshold >= 0, rebalance interval >= 0 and ratio >= 1 required (got ", config.threshold,
              ", ", config.rebalance_interval_s, ", ", config.rebalance_ratio, ")");
  for (int64_t i = 0; i < instances; ++i) {
    all_.push_back(i);
    (i < instances / 2 ? short_group_ : long_group_).push_back(i);
  }
}

int64_t LapsRouter::estimate_prompt_tokens(const Request &r) { return static_cast<int64_t>(r.prompt.size()); }

Group LapsRouter::classify(const Request &r) const {
  return estimate_prompt_tokens(r) <= config_.threshold ? Group::short_group : Group::long_group;
}

int64_t LapsRouter::least_loaded(const std::vector<int64_t> &group) const {
  int64_t best = group.front();
  for (int64_t i : group)
    if (load_[i] < load_[best] || (load_[i] == load_[best] && i < best)) best = i;
  return best;
}

LapsRouter::Route LapsRouter::route(const Request &r, double now_s) {
  Route out;
  if (enabled_) {
    maybe_rebalance(now_s);
    out.group = classify(r);
    out.instance = least_loaded(out.group == Group::short_group ? short_group_ : long_group_);
  } else {
    out.instance = least_loaded(all_);
  }
  ++load_[out.instance];
  ++(out.group == Group::short_group ? short_pending_ : long_pending_);
  return out;
}

void LapsRouter::done(const Route &route) {
  TORCH_CHECK(route.instance >= 0 && route.instance < static_cast<int64_t>(load_.size()) && load_[route.instance] > 0,
              "LapsRouter::done: instance ", route.instance, " has no pending request");
  --load_[route.instance];
  int64_t &pending = route.group == Group::short_group ? short_pending_ : long_pending_;
  TORCH_CHECK(pending > 0, "LapsRouter::done: no pending request in that group");
  --pending;
}

bool LapsRouter::maybe_rebalance(double now_s) {
  if (!enabled_ || now_s - last_rebalance_s_ < config_.rebalance_interval_s) return false;
  last_rebalance_s_ = now_s;
  const double ratio = config_.rebalance_ratio;
  std::vector<int64_t> *from = nullptr, *to = nullptr;
  if (short_pending_ > long_pending_ * ratio && long_group_.size() > 1)
    from = &long_group_, to = &short_group_;
  else if (long_pending_ > short_pending_ * ratio && short_group_.size() > 1)
    from = &short_group_, to = &long_group_;
  if (!from) return false;
  int64_t moved = from->front();
  for (int64_t i : *from)
    if (load_[i] < load_[moved] || (load_[i] == load_[moved] && i > moved)) moved = i;
  from->erase(std::find(from->begin(), from->end(), moved));
  to->insert(std::lower_bound(to->begin(), to->end(), moved), moved);
  ++rebalances_;
  return true;
}

RouterStatus LapsRouter::status() const {
  RouterStatus s;
  s.enabled = enabled_;
  s.threshold = config_.threshold;
  s.short_group = enabled_ ? short_group_ : all_;
  s.long_group = enabled_ ? long_group_ : std::vector<int64_t>{};
  s.short_pending = short_pending_;
  s.long_pending = long_pending_;
  s.rebalances = rebalances_;
  return s;
}

}  // namespace detfuzz::engine
