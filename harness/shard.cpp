#include "harness/shard.h"

#include "harness/cli_common.h"

#include <cstdlib>

namespace detfuzz {
namespace {

bool parse_int(const std::string &s, long &out) {
  if (s.empty()) return false;
  char *end = nullptr;
  out = std::strtol(s.c_str(), &end, 10);
  return *end == '\0';
}

std::string env(const char *name) {
  const char *v = std::getenv(name);
  return v ? v : "";
}

Shard make_shard(long index, long count, const std::string &text, const std::string &source) {
  if (count < 1 || index < 0 || index >= count)
    throw UsageError("shard '" + text + "' (from " + source + ") must be i/n with 0 <= i < n");
  return {static_cast<int>(index), static_cast<int>(count), source};
}

}  // namespace

Shard parse_shard(const std::string &text, const std::string &source) {
  const auto slash = text.find('/');
  long i = 0, n = 0;
  if (slash == std::string::npos || !parse_int(text.substr(0, slash), i) || !parse_int(text.substr(slash + 1), n))
    throw UsageError("shard '" + text + "' (from " + source + ") must be i/n with 0 <= i < n");
  return make_shard(i, n, text, source);
}

Shard resolve_shard(const std::string &flag) {
  if (!flag.empty()) return parse_shard(flag, "--shard");
  if (!env("DETFUZZ_SHARD").empty()) return parse_shard(env("DETFUZZ_SHARD"), "DETFUZZ_SHARD");
  if (!env("JOB_COMPLETION_INDEX").empty()) {
    const std::string text = env("JOB_COMPLETION_INDEX") + "/" + env("DETFUZZ_SHARD_COUNT");
    if (env("DETFUZZ_SHARD_COUNT").empty())
      throw UsageError(
          "JOB_COMPLETION_INDEX is set but DETFUZZ_SHARD_COUNT is not: pass the job's completions as "
          "DETFUZZ_SHARD_COUNT");
    return parse_shard(text, "JOB_COMPLETION_INDEX/DETFUZZ_SHARD_COUNT");
  }
  if (!env("SLURM_ARRAY_TASK_ID").empty()) {
    long id = 0, min = 0, count = 0;
    const std::string text = env("SLURM_ARRAY_TASK_ID") + "/" + env("SLURM_ARRAY_TASK_COUNT");
    if (!parse_int(env("SLURM_ARRAY_TASK_ID"), id) || !parse_int(env("SLURM_ARRAY_TASK_COUNT"), count) ||
        (!env("SLURM_ARRAY_TASK_MIN").empty() && !parse_int(env("SLURM_ARRAY_TASK_MIN"), min)))
      throw UsageError("shard '" + text +
                       "' (from SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT) is not a pair of integers");
    return make_shard(id - min, count, text, "SLURM_ARRAY_TASK_ID-SLURM_ARRAY_TASK_MIN/SLURM_ARRAY_TASK_COUNT");
  }
  return {};
}

}  // namespace detfuzz
