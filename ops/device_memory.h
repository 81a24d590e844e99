// The caching allocator's memory on a GPU that many CUDA graphs or many processes share. Present
// in CUDA builds only.
#pragma once

#ifdef DETFUZZ_WITH_CUDA
namespace detfuzz::device_memory {

// Every captured CUDA graph allocates from a private pool of the caching allocator. A destroyed
// graph's pool stays cached, and the allocator frees cached memory only when an allocation fails,
// which it cannot do while a stream is capturing: a campaign that captures a graph per case would
// run out of memory in the middle of a capture. Call this after a graph is destroyed (never while
// capturing): when the allocator holds more than a quarter of the device's memory (or half of
// the share cap_share gave this process), it releases the cached blocks, the dead graphs' pools
// with them.
void trim_graph_pools(int device);

// Fork-mode workers sharing a GPU: caps this process's caching allocator at `share` (0 < share
// <= 1) of each visible device's memory. At the cap the allocator gives its cached blocks back
// and retries before it reports out of memory, so the processes together do not run the GPU out
// of memory with blocks each keeps cached (8 workers on one H100 did, 2026-11-25).
void cap_share(double share);

}  // namespace detfuzz::device_memory
#endif
