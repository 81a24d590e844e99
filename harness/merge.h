// detfuzz merge OUT SHARD_DIRS...: one report out of the reports of a sharded campaign's shards
// (harness/shard.h). cases.csv is every shard's rows in shard order, renumbered; failures.csv every
// shard's records; summary.json keeps each shard's summary (its context: device, seed, shard)
// under "shards" and sums the counts under "results". Exit 1 when a shard's must-hold property failed.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace detfuzz {

// Returns the exit code (0, or 1 when a shard failed a must-hold property); throws ReportError /
// UsageError (exit 2) on a missing or malformed shard report, before anything is written.
int merge_reports(const std::filesystem::path &out, const std::vector<std::filesystem::path> &shards,
                  const std::string &command_line);

}  // namespace detfuzz
