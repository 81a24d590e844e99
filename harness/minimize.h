// Lowering a failing case's sizes one at a time while the same failure holds, until none can be
// lowered: the record is then a local minimum in every size. RapidCheck's shrink stops where its
// generators' shrink trees end (a dimension drawn from the edge list, a slice clamped into the
// batch), and can keep sizes that do not matter (52x10x5 where 5x1x1 fails the same way). The
// campaign runs this search after RapidCheck's (candidates checked in process); crash and timeout
// records run it with each candidate in a child process (harness/workers.h).
//
// The sizes: each dimension of the shape (down to 1), and the integer parameters that are sizes or
// positions: i, j (down to i + 1), o and tail of the batch properties; the sequence lengths of
// attention, graph and engine cases (each length of a list alone). Attributes that choose what an
// op computes (dim, keepdim, bias, perm and the like) are left alone. Candidates of one size are
// tried from the smallest: its low bound, then halfway down, a quarter of the way, ... one below;
// the first that fails the same way is kept and the size is tried again from there. When a
// dimension lowered below j leaves a malformed case, the slice is clamped into it (j = the new
// size, i < j) and tried once more.
#pragma once

#include "properties/case.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace detfuzz {

// How a candidate ended, compared with the failure being minimised.
enum class Trial { same, different, malformed };

// The values below v tried for a size of low bound `low`, ascending: low, v - (v - low) / 2,
// v - (v - low) / 4, ..., v - 1 (distinct; empty when v <= low).
std::vector<int64_t> lower_values(int64_t v, int64_t low);

// One size of a case: a shape dimension, an integer parameter, or one item of a '.'-joined list parameter.
struct SizeRef {
  enum class Kind { dim, param, item } kind = Kind::dim;
  size_t index = 0;                           // dim: the shape index; item: the list position
  std::string key;                            // param, item: the parameter
  std::string name(const CaseSpec &c) const;  // "shape[1]", "j", "kv[2]"
};

// The sizes of `c` the search lowers, in the order it tries them (slice indices first).
std::vector<SizeRef> lowerable_sizes(const CaseSpec &c);
int64_t size_value(const CaseSpec &c, const SizeRef &s);
int64_t size_low_bound(const CaseSpec &c, const SizeRef &s);
CaseSpec with_size(const CaseSpec &c, const SizeRef &s, int64_t v);

struct MinimizeResult {
  CaseSpec spec;  // the smallest case found that fails the same way (the start when none)
  int64_t trials = 0, lowered = 0;
  bool stopped = false;  // `stop` ended the search before a local minimum was proved
};

// Lowers sizes of `start` (which fails) while `trial` says the candidate fails the same way.
// `stop` is asked before every trial (a deadline, an interrupt, a poisoned device).
MinimizeResult minimize_case(const CaseSpec &start, const std::function<Trial(const CaseSpec &)> &trial,
                             const std::function<bool()> &stop);

// An error verdict's detail with its digits dropped: two errors of differently sized cases
// ("shapes [5, 3] and [4, 2] cannot be multiplied") are the same error.
std::string error_signature(const std::string &detail);

}  // namespace detfuzz
