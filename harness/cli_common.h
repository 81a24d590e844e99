// Helpers shared by the CLI's commands: list parsing, durations, target selection, exit codes.
#pragma once

#include "properties/generators.h"

#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>
#include <vector>

namespace detfuzz {

enum ExitCode { kExitOk = 0, kExitMustHoldFailed = 1, kExitUsage = 2 };

// A usage or environment error: printed as one line, exit code 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::vector<std::string> split_list(const std::string &s);  // "a,b" -> {a, b}; "" -> {}
double parse_duration(const std::string &s);                 // "90", "90s", "5m", "1h" -> seconds
std::string utc_now();                                        // ISO 8601

struct Selection {
  std::string backend = "auto";
  std::vector<std::string> ops, impls, properties, dtypes;  // empty: every applicable one (impls: all but mutants)
  // With the batch-invariant mode on, libtorch's dispatcher runs our kernels, so impl `torch`
  // of the aten ops is held to must-hold instead of observed.
  bool batch_invariant_mode = false;
};

// Loads users' kernel libraries (dlopen) and then their op spec files; throws UsageError.
void load_user_ops(const std::vector<std::string> &libraries, const std::vector<std::string> &specs);

Backend resolve_backend(const std::string &name);  // "auto" -> cuda when a GPU is usable; throws UsageError
// Every (op, impl, property, dtype) the selection names that exists; throws UsageError naming an
// unknown op, impl, property or dtype, or one that no selected op/impl supports.
std::vector<Target> select_targets(const Selection &sel, Backend backend);
nlohmann::json selection_json(const Selection &sel);

}  // namespace detfuzz
