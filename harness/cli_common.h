// Helpers shared by the CLI's commands: list parsing, durations, target selection, exit codes.
#pragma once

#include "properties/generators.h"

#include <nlohmann/json.hpp>

#include <stdexcept>
#include <cstdint>
#include <string>
#include <vector>

namespace detfuzz {

enum ExitCode { kExitOk = 0, kExitMustHoldFailed = 1, kExitUsage = 2 };

// A usage or environment error: printed as one line, exit code 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Flags that several subcommands take have one wording, here, and come in this order in every
// subcommand's --help (its own flags between them): --backend --op --impl --property --dtype
// --seed --budget --out --load --spec --mode --cpu-threads --case-timeout. tests/cli/test_help.sh
// holds every subcommand to it.
namespace flag_text {
inline constexpr const char *backend = "cpu, cuda or auto (auto: cuda when a GPU is usable)";
inline constexpr const char *ops = "ops, comma-separated (see: detfuzz list ops)";
inline constexpr const char *impls = "impls, comma-separated (see: detfuzz list impls)";
inline constexpr const char *properties = "properties, comma-separated (see: detfuzz list properties)";
inline constexpr const char *dtypes =
    "dtypes, comma-separated: float32, float16, bfloat16 (and int32, int64 where an op takes them)";
inline constexpr const char *seed = "the run's seed, printed at start: the same seed repeats the run";
inline constexpr const char *budget = "time budget: 30s, 5m, 1h or seconds; 0 for none";
inline constexpr const char *out = "report folder; must not exist or be empty";
inline constexpr const char *load =
    "kernel library registering torch operators (TORCH_LIBRARY), loaded first; repeatable";
inline constexpr const char *spec = "op spec file: where the batch is in a loaded library's operators; repeatable";
inline constexpr const char *mode =
    "native, batch-invariant (our kernels behind libtorch's dispatcher) or MODULE:ENABLE_FN (a user's Python mode, "
    "enabled by calling it); with a mode on, impl torch of the aten ops must hold";
inline constexpr const char *cpu_threads =
    "ATen threads: 1 where every case is on the CPU, else libtorch's own; 0: libtorch's";
inline constexpr const char *case_timeout =
    "longest a case may run: 10s, 2m or seconds (0: no limit); past it the case is a timeout record";
}  // namespace flag_text

std::vector<std::string> split_list(const std::string &s);  // "a,b" -> {a, b}; "" -> {}
double parse_duration(const std::string &s);                // "90", "90s", "5m", "1h" -> seconds
// parse_duration of a flag's value; the error names the flag: "--case-timeout: duration 'x' ...".
double parse_duration_flag(const std::string &flag, const std::string &s);
// A campaign seed: a whole number from 0 to 2^64 - 1, decimal or 0x hex; anything else (a sign,
// a fraction, trailing text, overflow) is a UsageError naming the flag.
uint64_t parse_seed(const std::string &flag, const std::string &s);
std::string utc_now();  // ISO 8601

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
