// A property family: the ops it owns, their properties, how cases of a target are generated and
// how a case is checked. Each family registers itself from its own folder (row_family() in
// properties/rows, attention_family() in properties/attention, ...), and properties.cpp holds
// the table: a new family is one line there.
#pragma once

#include "properties/case.h"
#include "properties/defs/op_def.h"
#include "properties/generators.h"
#include "properties/verdict.h"

#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

namespace detfuzz {

// What a family's own bench gets from `detfuzz bench` (CUDA builds run it).
struct FamilyBenchConfig {
  std::vector<std::string> impls;  // as the user named them (the family picks its own)
  std::vector<at::ScalarType> dtypes;
  std::vector<BenchShape> shapes;  // a shape file's rows (the family times its kinds); empty: its default set
  int repetitions = 5;
};

struct PropertyFamily {
  std::string name;                                 // "rows", "attention", "graph", "laps"
  std::function<std::vector<std::string>()> ops;    // the ops it lists (`detfuzz list`)
  std::function<bool(const std::string &op)> owns;  // those and any it resolves (spec ops)
  std::function<std::vector<std::string>(const std::string &op)> properties;
  // Whether `impl` is held to `property` (empty: every impl to every property).
  std::function<bool(const std::string &impl, const std::string &property)> applies;
  // An impl the registry does not hold (a spec op's dispatcher impl); empty: registry only.
  std::function<std::optional<ImplInfo>(const std::string &op, const std::string &impl, Backend)> impl;
  std::function<rc::Gen<CaseSpec>(const Target &)> gen;
  // Throws std::invalid_argument for a malformed case; failures of the op are Verdict::error.
  std::function<Verdict(const CaseSpec &)> check;

  // A bench of its own, for ops that are not timed as one call on a shape M N K (paged
  // attention's decode and prefill rows); all empty when the family has none. Shape kinds are
  // the `op` column of a bench shape file; check_bench_shape throws std::invalid_argument (one
  // line, without the file position) for a row that does not fit; bench_impl says whether the
  // family times an impl name; bench writes bench.csv rows to `csv` and progress to `log`;
  // bench_variants are the variants a row may name (BenchShape::variant).
  std::vector<std::string> bench_shape_kinds;
  std::vector<std::string> bench_variants;
  std::function<void(const BenchShape &)> check_bench_shape;
  std::function<bool(const std::string &impl)> bench_impl;
  std::function<void(const FamilyBenchConfig &, std::ostream &csv, std::ostream &log)> bench;

  // Sets ops and owns for a family of a fixed list of ops.
  void own(std::vector<std::string> names);
};

// The families, in the order `detfuzz list` shows their ops.
const std::vector<PropertyFamily> &property_families();
// The family that owns `op`, or nullptr.
const PropertyFamily *family_of(const std::string &op);

PropertyFamily row_family();        // properties/rows
PropertyFamily attention_family();  // properties/attention
PropertyFamily laps_family();       // properties/laps
PropertyFamily graph_family();      // properties/graph
PropertyFamily moe_family();        // properties/moe

}  // namespace detfuzz
