// Sharding a campaign over the machines of an existing engine (a CI matrix, a Kubernetes Indexed
// Job, a Slurm job array): shard i of n takes the selected targets whose index in the full,
// ordered target list is i mod n, and the corpus records whose running index (over the corpus
// files in order) is i mod n. A target keeps its global index in the seed of its rounds, so a
// target's cases in a shard are those an unsharded campaign with the same seed generates for it;
// the union of the n shards is every target and every corpus record exactly once.
#pragma once

#include <string>

namespace detfuzz {

struct Shard {
  int index = 0, count = 1;
  std::string source = "none";  // where it came from: --shard, DETFUZZ_SHARD, kubernetes, slurm
  bool takes(size_t k) const { return static_cast<int>(k % count) == index; }
};

// "i/n" with 0 <= i < n; throws UsageError naming the bad text.
Shard parse_shard(const std::string &text, const std::string &source);
// --shard when given, else from the environment, in this order:
//   DETFUZZ_SHARD=i/n (a CI matrix);
//   JOB_COMPLETION_INDEX with DETFUZZ_SHARD_COUNT (a Kubernetes Indexed Job: pass the job's
//     completions as DETFUZZ_SHARD_COUNT; Kubernetes sets no count variable in the pod);
//   SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN of SLURM_ARRAY_TASK_COUNT (a Slurm job array);
// else no sharding (0/1).
Shard resolve_shard(const std::string &flag);

}  // namespace detfuzz
