#include "harness/minimize.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <sstream>

namespace detfuzz {
namespace {

// Parameters that are sizes or positions, with their low bounds; "j" is special (i + 1).
// Lists ('.'-joined) are lowered an item at a time.
const std::map<std::string, int64_t> &size_params() {
  static const std::map<std::string, int64_t> p = {
      // row ops and spec ops: the slice, the composed batch's offset and tail
      {"i", 0},
      {"j", 1},
      {"o", 0},
      {"tail", 0},
      // paged attention: query and key lengths per sequence, chunk lengths, the pool, the target sequence
      {"q", 1},
      {"kv", 1},
      {"chunks", 1},
      {"pool", 0},
      {"target", 0},
      // graph prefill: cached and new tokens per sequence, sequence lengths
      {"cached", 0},
      {"new", 1},
      {"len", 1},
      // engine: decode steps, shared prefix length, instances, running sequences
      {"dec", 0},
      {"syslen", 0},
      {"inst", 1},
      {"run", 1},
  };
  return p;
}

bool is_decimal(const std::string &s) {
  return !s.empty() && s.size() < 18 &&
         std::all_of(s.begin(), s.end(), [](unsigned char ch) { return std::isdigit(ch); });
}

std::vector<std::string> split_items(const std::string &s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string part; std::getline(ss, part, '.');) out.push_back(part);
  return out;
}

std::string join_items(const std::vector<std::string> &items) {
  std::string out;
  for (size_t k = 0; k < items.size(); ++k) out += (k ? "." : "") + items[k];
  return out;
}

// A case whose dimension was lowered to `v` with its slice clamped into it, when the slice
// reached past `v`; else `c` itself.
CaseSpec clamp_slice(const CaseSpec &c, int64_t v) {
  const std::string &si = c.param("i"), &sj = c.param("j");
  if (!is_decimal(si) || !is_decimal(sj)) return c;
  int64_t i = std::stoll(si), j = std::stoll(sj);
  if (j <= v || v < 1) return c;
  j = v;
  i = std::min(i, j - 1);
  CaseSpec out = c;
  out.params["i"] = std::to_string(i);
  out.params["j"] = std::to_string(j);
  return out;
}

bool same_case(const CaseSpec &a, const CaseSpec &b) { return a.shape == b.shape && a.params == b.params; }

}  // namespace

std::vector<int64_t> lower_values(int64_t v, int64_t low) {
  std::vector<int64_t> out;
  if (v <= low) return out;
  for (int64_t d = v - low; d >= 1; d /= 2)
    if (out.empty() || out.back() != v - d) out.push_back(v - d);
  if (out.back() != v - 1) out.push_back(v - 1);
  return out;
}

std::string SizeRef::name(const CaseSpec &) const {
  if (kind == Kind::dim) return "shape[" + std::to_string(index) + "]";
  if (kind == Kind::param) return key;
  return key + "[" + std::to_string(index) + "]";
}

std::vector<SizeRef> lowerable_sizes(const CaseSpec &c) {
  std::vector<SizeRef> out;
  for (const char *key : {"i", "j"})
    if (is_decimal(c.param(key))) out.push_back({SizeRef::Kind::param, 0, key});
  for (size_t d = 0; d < c.shape.size(); ++d) out.push_back({SizeRef::Kind::dim, d, ""});
  for (const auto &[key, value] : c.params) {
    if (key == "i" || key == "j" || !size_params().count(key)) continue;
    if (is_decimal(value)) {
      out.push_back({SizeRef::Kind::param, 0, key});
      continue;
    }
    const auto items = split_items(value);
    if (items.size() > 1 && std::all_of(items.begin(), items.end(), is_decimal))
      for (size_t k = 0; k < items.size(); ++k) out.push_back({SizeRef::Kind::item, k, key});
  }
  return out;
}

int64_t size_value(const CaseSpec &c, const SizeRef &s) {
  if (s.kind == SizeRef::Kind::dim) return s.index < c.shape.size() ? c.shape[s.index] : 0;
  const std::string v = c.param(s.key);
  if (s.kind == SizeRef::Kind::param) return is_decimal(v) ? std::stoll(v) : 0;
  const auto items = split_items(v);
  return s.index < items.size() && is_decimal(items[s.index]) ? std::stoll(items[s.index]) : 0;
}

int64_t size_low_bound(const CaseSpec &c, const SizeRef &s) {
  if (s.kind == SizeRef::Kind::dim) return 1;
  if (s.key == "j") return is_decimal(c.param("i")) ? std::stoll(c.param("i")) + 1 : 1;
  const auto it = size_params().find(s.key);
  return it == size_params().end() ? 0 : it->second;
}

CaseSpec with_size(const CaseSpec &c, const SizeRef &s, int64_t v) {
  CaseSpec out = c;
  if (s.kind == SizeRef::Kind::dim) {
    out.shape.at(s.index) = v;
  } else if (s.kind == SizeRef::Kind::param) {
    out.params[s.key] = std::to_string(v);
  } else {
    auto items = split_items(c.param(s.key));
    items.at(s.index) = std::to_string(v);
    out.params[s.key] = join_items(items);
  }
  return out;
}

MinimizeResult minimize_case(const CaseSpec &start, const std::function<Trial(const CaseSpec &)> &trial,
                             const std::function<bool()> &stop) {
  MinimizeResult r;
  r.spec = start;
  for (bool progress = true; progress;) {
    progress = false;
    for (const SizeRef &s : lowerable_sizes(r.spec)) {
      // Lower this size as far as it goes, then the next.
      for (bool lowered = true; lowered;) {
        lowered = false;
        for (int64_t v : lower_values(size_value(r.spec, s), size_low_bound(r.spec, s))) {
          if (stop()) {
            r.stopped = true;
            return r;
          }
          CaseSpec candidate = with_size(r.spec, s, v);
          ++r.trials;
          Trial t = trial(candidate);
          if (t == Trial::malformed && s.kind == SizeRef::Kind::dim) {
            const CaseSpec clamped = clamp_slice(candidate, v);
            if (!same_case(clamped, candidate)) {
              if (stop()) {
                r.stopped = true;
                return r;
              }
              ++r.trials;
              t = trial(clamped);
              candidate = clamped;
            }
          }
          if (t != Trial::same) continue;
          r.spec = candidate;
          ++r.lowered;
          lowered = progress = true;
          break;
        }
      }
    }
  }
  return r;
}

std::string error_signature(const std::string &detail) {
  std::string out;
  for (char ch : detail)
    if (!std::isdigit(static_cast<unsigned char>(ch))) out += ch;
  return out;
}

}  // namespace detfuzz
