#include "harness/cpu_threads.h"

#include <ATen/Parallel.h>

namespace detfuzz {

int apply_cpu_threads(int requested, bool cpu_cases_only) {
  const int threads = requested < 0 ? (cpu_cases_only ? 1 : 0) : requested;
  if (threads > 0) at::set_num_threads(threads);
  return at::get_num_threads();
}

}  // namespace detfuzz
