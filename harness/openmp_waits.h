// libgomp's idle worker threads spin between parallel regions (OMP_WAIT_POLICY unset means
// "spin a while"). A campaign runs thousands of small parallel regions (ATen's parallel_for in
// the CPU kernels and conversions) with host work between them, so on a small machine the
// spinning workers take the cores the campaign needs: measured on the 2-core CI machine, a CPU
// campaign checks about 1.8x the cases with passive waits. libgomp reads the policy once, when it
// is loaded, so the only way to change it is to start the process again with it set.
#pragma once

namespace detfuzz {

// For long-running commands: when OMP_WAIT_POLICY is unset, sets it to passive and re-executes
// this program with the same arguments (returns only when that is not possible; then the run
// goes on unchanged). An explicit OMP_WAIT_POLICY is always respected.
void relaunch_with_passive_openmp_waits(char **argv);

}  // namespace detfuzz
