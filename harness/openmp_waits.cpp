#include "harness/openmp_waits.h"

#include <unistd.h>

#include <cstdlib>

namespace detfuzz {

void relaunch_with_passive_openmp_waits(char **argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0) return;
  execv("/proc/self/exe", argv);
  // execv returned: it failed (no /proc). Run as we are; the setting still reaches child processes.
}

}  // namespace detfuzz
