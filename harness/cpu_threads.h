// ATen's intra-op threads during a campaign or a replay. A CPU campaign checks thousands of small
// cases; ATen's parallel regions (our CPU kernels' parallel_for, conversions, libtorch's own
// kernels) each end in a barrier, and on a machine whose cores are shared a barrier waits for a
// descheduled worker. Measured on the 2-core CI machine (2026-11-23, 10 s campaigns over every
// op): one thread checked 5627-5980 cases with four other jobs on the cores (libgomp's default
// 2 threads: 987-1246) and about 9% fewer than 2 threads with the cores to itself. So CPU runs
// use one thread unless told otherwise (parallelism across cases belongs to worker processes);
// CUDA runs keep libtorch's default (their host work is float64 references and conversions).
#pragma once

namespace detfuzz {

// requested < 0: automatic (one thread when the run checks CPU cases only, else libtorch's
// default); 0: libtorch's default; N > 0: N threads. Returns the count in effect.
int apply_cpu_threads(int requested, bool cpu_cases_only);

}  // namespace detfuzz
