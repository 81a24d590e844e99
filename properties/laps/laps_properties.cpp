#include "properties/laps/laps_properties.h"
#include "properties/family.h"

#include "ops/engine/model.h"
#include "properties/data.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <stdexcept>

namespace detfuzz {
namespace laps_case {
namespace {

void require(bool ok, const std::string &what) {
  if (!ok) throw std::invalid_argument("laps_engine case: " + what);
}

std::vector<int64_t> list(const CaseSpec &c, const std::string &key, bool required = true) {
  const std::string s = c.param(key);
  require(!required || !s.empty(), "missing parameter " + key + "=");
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, '.')) {
    require(!part.empty() && part.find_first_not_of("0123456789") == std::string::npos && part.size() <= 9,
            key + "='" + s + "' is not non-negative integers joined by '.'");
    out.push_back(std::stoll(part));
  }
  return out;
}

std::string join(const std::vector<int64_t> &v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "." : "") + std::to_string(v[i]);
  return s;
}

int64_t bounded(const CaseSpec &c, const std::string &key, int64_t fallback, int64_t lo, int64_t hi) {
  const int64_t v = c.param_int(key, fallback);
  require(v >= lo && v <= hi,
          key + "=" + std::to_string(v) + " outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return v;
}

}  // namespace

engine::WorkloadConfig workload(const CaseSpec &c, int64_t vocab) {
  const auto wl = list(c, "wl");
  require(wl.size() == 7, "wl= needs seed.requests.min.short_max.max.rate.decode, got '" + c.param("wl") + "'");
  engine::WorkloadConfig w;
  w.seed = static_cast<uint64_t>(wl[0]);
  w.requests = wl[1];
  w.min_len = wl[2];
  w.short_max = wl[3];
  w.max_len = wl[4];
  w.rate = static_cast<double>(wl[5]);
  w.decode_steps = wl[6];
  w.vocab = vocab;
  return w;
}

engine::Trace trace(const CaseSpec &c, int64_t vocab) {
  if (!c.param("wl").empty()) return engine::make_workload(workload(c, vocab));
  const auto len = list(c, "len"), dec = list(c, "dec"), at = list(c, "at"), sys = list(c, "sys");
  const size_t n = len.size();
  require(n > 0 && dec.size() == n && at.size() == n && sys.size() == n,
          "len=, dec=, at=, sys= must list the same number (> 0) of requests");
  const int64_t syslen = bounded(c, "syslen", 0, 0, 1 << 16);
  engine::Trace t;
  for (size_t i = 0; i < n; ++i) {
    require(len[i] >= 1 && len[i] <= (1 << 20),
            "request " + std::to_string(i) + " has a prompt of " + std::to_string(len[i]) + " tokens");
    engine::Request r;
    r.id = static_cast<int64_t>(i);
    r.decode_steps = dec[i];
    r.arrival_s = static_cast<double>(at[i]) * 1e-3;
    for (int64_t p = 0; p < len[i]; ++p) {
      const bool shared = sys[i] > 0 && p < syslen;
      const uint64_t stream = shared ? 2 * static_cast<uint64_t>(sys[i]) : 2 * i + 1;
      r.prompt.push_back(
          static_cast<int32_t>(counter_bits(c.seed, stream, static_cast<uint64_t>(p)) % static_cast<uint64_t>(vocab)));
    }
    t.push_back(std::move(r));
  }
  return t;
}

engine::Trace variant_trace(const CaseSpec &c, const engine::Trace &base) {
  engine::Trace t = base;
  // Arrival times permuted within windows of `win` ms: requests that arrive in the same window
  // swap arrival times (a seeded shuffle).
  const int64_t win = bounded(c, "win", 0, 0, 1 << 30);
  if (win > 0) {
    std::map<int64_t, std::vector<size_t>> windows;
    for (size_t i = 0; i < t.size(); ++i)
      windows[static_cast<int64_t>(std::llround(t[i].arrival_s * 1e3)) / win].push_back(i);
    uint64_t h = splitmix64(static_cast<uint64_t>(c.param_int("perm", 0)) ^ 0x7a3ull);
    for (auto &[w, members] : windows) {
      std::vector<double> times;
      for (size_t i : members) times.push_back(t[i].arrival_s);
      for (size_t k = times.size(); k > 1; --k) {
        h = splitmix64(h);
        std::swap(times[k - 1], times[h % k]);
      }
      for (size_t k = 0; k < members.size(); ++k) t[members[k]].arrival_s = times[k];
    }
  }
  const auto aborted = list(c, "abort", false), after = list(c, "abort_ms", false);
  require(aborted.size() == after.size(), "abort= and abort_ms= must list the same number of requests");
  for (size_t k = 0; k < aborted.size(); ++k) {
    require(aborted[k] < static_cast<int64_t>(t.size()),
            "abort= names request " + std::to_string(aborted[k]) + ", which does not exist");
    t[aborted[k]].abort_s = t[aborted[k]].arrival_s + static_cast<double>(after[k]) * 1e-3;
  }
  return t;
}

engine::EngineConfig baseline_config() {
  engine::EngineConfig e;
  e.policy = engine::Policy::fifo;
  e.instances = 1;
  e.router.laps = false;
  e.max_running = 1;
  e.max_prefill_tokens = 1 << 30;
  e.prefix_reuse = false;
  e.page_size = 16;
  return e;
}

engine::EngineConfig variant_config(const CaseSpec &c) {
  engine::EngineConfig e;
  e.policy = engine::policy_from_string(c.param("policy", "fifo"));
  e.threshold = bounded(c, "thr", 256, 0, 1 << 30);
  e.instances = bounded(c, "inst", 1, 1, 64);
  e.router.laps = bounded(c, "glaps", 0, 0, 1) == 1;
  e.router.threshold = bounded(c, "rthr", 256, 0, 1 << 30);
  e.router.rebalance_interval_s = static_cast<double>(bounded(c, "ivl", 5000, 0, 1 << 30)) * 1e-3;
  e.router.rebalance_ratio = c.param_double("ratio", 2.0);
  require(e.router.rebalance_ratio >= 1 && e.router.rebalance_ratio <= 1e6, "ratio must be in [1, 1e6]");
  e.max_prefill_tokens = bounded(c, "budget", 512, 1, 1 << 30);
  e.max_running = bounded(c, "run", 16, 1, 1 << 20);
  e.page_size = bounded(c, "page", 16, 1, 1024);
  e.prefix_reuse = bounded(c, "reuse", 1, 0, 1) == 1;
  const int64_t pool = bounded(c, "pool", 0, 0, 1 << 20);
  if (pool > 0) {
    require(c.param("wl").empty(), "pool= applies to len= traces only");
    int64_t largest = 0;
    const auto len = list(c, "len"), dec = list(c, "dec");
    for (size_t i = 0; i < len.size() && i < dec.size(); ++i)
      largest = std::max(largest, (len[i] + dec[i] + e.page_size - 1) / e.page_size);
    e.blocks_per_instance = largest + pool - 1;
  }
  const std::string clock = c.param("clock", "model");
  require(clock == "model" || clock == "measured", "clock='" + clock + "' (expected model or measured)");
  e.cost.measured = clock == "measured";
  // A cost model fitted to measured forward times (detfuzz laps --clock calibrated) travels in
  // the record as its coefficients, so the record replays with the same clock.
  for (const auto &[key, field] : {std::pair<const char *, double *>{"cstep", &e.cost.step_s},
                                   {"cseq", &e.cost.seq_s},
                                   {"ctok", &e.cost.token_s},
                                   {"cpair", &e.cost.pair_s}})
    if (!c.param(key).empty()) {
      *field = c.param_double(key, 0);
      require(*field >= 0 && std::isfinite(*field), std::string(key) + " must be a finite time >= 0");
    }
  return e;
}

engine::EngineConfig fifo_of(const engine::EngineConfig &variant) {
  engine::EngineConfig e = variant;
  e.policy = engine::Policy::fifo;
  e.router.laps = false;
  return e;
}

Comparison compare(const CaseSpec &c, engine::StepModel &model) {
  require(c.property == "schedule_invariance", "unknown property '" + c.property + "'");
  Comparison r;
  r.base_trace = trace(c, model.vocab());
  r.variant_trace = variant_trace(c, r.base_trace);
  r.variant_config = variant_config(c);
  const std::string base = c.param("base", "alone");
  require(base == "alone" || base == "fifo", "base='" + base + "' (expected alone or fifo)");
  r.base_config = base == "fifo" ? fifo_of(r.variant_config) : baseline_config();
  r.base_config.cost = r.variant_config.cost;
  try {
    r.base = engine::run_trace(r.base_trace, r.base_config, model);
    r.variant = engine::run_trace(r.variant_trace, r.variant_config, model);
  } catch (const std::invalid_argument &) {
    throw;
  } catch (const std::exception &e) {
    r.verdict = Verdict::error(c.impl + " threw: " + e.what());
    return r;
  }
  int64_t first = -1;
  DiffStats first_diff;
  for (size_t i = 0; i < r.base_trace.size(); ++i) {
    const engine::RequestOutput &x = r.base.outputs[i], &y = r.variant.outputs[i];
    if (r.variant_trace[i].abort_s >= 0 && !y.finished) continue;
    if (!x.finished || !y.finished) {
      r.verdict = Verdict::error("request " + std::to_string(i) + " did not finish (" +
                                 (x.finished ? "variant" : "baseline") + " run)");
      return r;
    }
    ++r.compared;
    const bool tokens_equal = x.tokens == y.tokens;
    DiffStats d = bitwise_diff(x.final_logprobs, y.final_logprobs);
    if (tokens_equal && d.equal()) continue;
    r.token_changes += !tokens_equal;
    ++r.bit_changes;
    if (first >= 0) continue;
    first = static_cast<int64_t>(i);
    if (d.equal()) {  // same last log-probabilities, other tokens: show the token streams
      const auto ids = [](const std::vector<int32_t> &v) {
        return at::from_blob(const_cast<int32_t *>(v.data()), {static_cast<int64_t>(v.size())}, at::kInt).clone();
      };
      d = bitwise_diff(ids(x.tokens), ids(y.tokens));
    }
    first_diff = d;
  }
  const engine::EngineStats &st = r.variant.stats;
  std::ostringstream what;
  what << r.compared << " requests " << (base == "fifo" ? "under fifo" : "alone") << " vs under "
       << r.variant_config.describe() << " (" << st.steps << " steps, " << st.reused_tokens << " prefix tokens reused, "
       << st.chunked_prefills << " chunked, " << st.router.rebalances << " rebalances, " << st.aborted << " aborted)";
  if (first < 0) {
    r.verdict = Verdict::pass(first_diff, what.str());
    return r;
  }
  const engine::RequestOutput &y = r.variant.outputs[first];
  std::ostringstream why;
  why << what.str() << ": " << r.bit_changes << " requests changed bits, " << r.token_changes
      << " changed tokens; first request " << first << " (" << r.base_trace[first].prompt.size()
      << " prompt tokens, instance " << y.instance << ", " << y.prefill_chunks << " chunks, " << y.cached_tokens
      << " cached): " << first_diff.summary();
  r.verdict = Verdict::fail(first_diff, why.str());
  return r;
}

Verdict check(const CaseSpec &c, const ModelFactory &make_model) {
  std::unique_ptr<engine::StepModel> model = make_model(c);
  return compare(c, *model).verdict;
}

rc::Gen<CaseSpec> gen(const Target &t, std::vector<int64_t> shape, int64_t max_requests, int64_t max_len) {
  return rc::gen::exec([=] {
    CaseSpec c;
    c.op = "laps_engine";
    c.impl = t.impl;
    c.property = t.property;
    c.backend = t.backend;
    c.dtype = t.dtype;
    c.shape = shape;
    c.layout = "c";
    c.dist = "normal";
    struct Draw {
      int64_t len, dec, gap, sys;
    };
    // Lengths around page and attention-split edges, else anywhere up to max_len.
    std::vector<int64_t> edges;
    for (int64_t v : {1, 2, 15, 16, 17, 63, 64, 65, 255, 256, 257})
      if (v <= max_len) edges.push_back(v);
    const auto len_gen = rc::gen::weightedOneOf<int64_t>(
        {{3, rc::gen::inRange<int64_t>(1, max_len + 1)}, {1, rc::gen::elementOf(edges)}});
    const auto draw = rc::gen::exec([=] {
      return Draw{*len_gen, *rc::gen::inRange<int64_t>(0, 4),
                  *shrinking_choice<int64_t>({{2, 0}, {3, 1}, {2, 5}, {1, 20}}), *rc::gen::inRange<int64_t>(0, 3)};
    });
    const auto draws = *rc::gen::resize(static_cast<int>(max_requests),
                                        rc::gen::nonEmpty(rc::gen::container<std::vector<Draw>>(draw)));
    std::vector<int64_t> len, dec, at, sys;
    int64_t now = 0;
    for (const Draw &d : draws) {
      now += d.gap;
      len.push_back(d.len);
      dec.push_back(d.dec);
      at.push_back(now);
      sys.push_back(d.sys);
    }
    const int64_t n = static_cast<int64_t>(draws.size());
    c.params["len"] = join(len);
    c.params["dec"] = join(dec);
    c.params["at"] = join(at);
    c.params["sys"] = join(sys);
    c.params["syslen"] = std::to_string(*shrinking_choice<int64_t>({{1, 0}, {2, 16}, {1, 17}, {1, 40}}));
    c.params["policy"] = *shrinking_choice<std::string>({{1, "fifo"}, {2, "laps"}});
    c.params["thr"] = std::to_string(*rc::gen::inRange<int64_t>(1, max_len + 1));
    c.params["inst"] = std::to_string(*rc::gen::inRange<int64_t>(1, 5));
    c.params["glaps"] = std::to_string(*rc::gen::inRange<int64_t>(0, 2));
    c.params["rthr"] = std::to_string(*rc::gen::inRange<int64_t>(1, max_len + 1));
    c.params["ivl"] = std::to_string(*rc::gen::inRange<int64_t>(0, 30));
    c.params["ratio"] = double_to_hex(*shrinking_choice<double>({{1, 2.0}, {1, 1.0}, {1, 1.5}, {1, 4.0}}));
    c.params["budget"] = std::to_string(*shrinking_choice<int64_t>(
        {{1, 1 << 20}, {2, *rc::gen::inRange<int64_t>(1, max_len + 1)}, {1, *rc::gen::elementOf(edges)}}));
    c.params["run"] = std::to_string(*rc::gen::inRange<int64_t>(1, 9));
    c.params["page"] = std::to_string(*shrinking_choice<int64_t>({{2, 16}, {1, 1}, {1, 64}}));
    c.params["pool"] = std::to_string(*shrinking_choice<int64_t>({{2, 0}, {1, *rc::gen::inRange<int64_t>(1, 12)}}));
    c.params["reuse"] = std::to_string(*rc::gen::inRange<int64_t>(0, 2));
    c.params["win"] = std::to_string(*shrinking_choice<int64_t>({{1, 0}, {2, *rc::gen::inRange<int64_t>(1, 40)}}));
    c.params["perm"] = std::to_string(*rc::gen::inRange<int64_t>(0, 1000));
    // Aborts of other requests: never request 0, so something is always compared.
    std::vector<int64_t> aborted, after;
    for (int64_t i = 1; i < n; ++i)
      if (*rc::gen::inRange<int64_t>(0, 5) == 4) {
        aborted.push_back(i);
        after.push_back(*rc::gen::inRange<int64_t>(0, 30));
      }
    if (!aborted.empty()) {
      c.params["abort"] = join(aborted);
      c.params["abort_ms"] = join(after);
    }
    c.seed = *rc::gen::inRange<uint64_t>(0, uint64_t{1} << 32);
    return c;
  });
}

}  // namespace laps_case

std::vector<std::string> laps_properties() { return {"schedule_invariance"}; }

rc::Gen<CaseSpec> gen_laps_case(const Target &t) {
  const bool cuda = t.backend == Backend::cuda;
  return laps_case::gen(t, engine::default_model_shape(t.backend), cuda ? 24 : 8, cuda ? 700 : 300);
}

Verdict check_laps_case(const CaseSpec &c) {
  const engine::ModelImpl *impl = engine::find_model_impl(c.impl, c.backend);
  if (!impl)
    throw std::invalid_argument("laps_engine case: no impl '" + c.impl + "' on backend " + to_string(c.backend));
  if (std::find(impl->dtypes.begin(), impl->dtypes.end(), c.dtype) == impl->dtypes.end())
    throw std::invalid_argument("laps_engine case: impl " + c.impl + " does not take " + dtype_name(c.dtype));
  return laps_case::check(c, [impl](const CaseSpec &spec) { return impl->make(spec.dtype, spec.shape, spec.seed); });
}

PropertyFamily laps_family() {
  PropertyFamily f;
  f.name = "laps";
  f.own({"laps_engine"});
  f.properties = [](const std::string &) { return laps_properties(); };
  f.gen = gen_laps_case;
  f.check = check_laps_case;
  return f;
}

}  // namespace detfuzz
