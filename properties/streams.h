// Stream plumbing the property checks share: ordering work across CUDA streams, and the
// `repeat` check (a second run, on CUDA on another stream, must give the same bits).
#pragma once

#include "ops/registry.h"
#include "properties/verdict.h"

#include <ATen/ATen.h>

#include <functional>
#include <string>

#ifdef DETFUZZ_WITH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

namespace detfuzz {

#ifdef DETFUZZ_WITH_CUDA
// Makes `waiter` wait for the work queued so far on `producer`.
void stream_wait(const c10::cuda::CUDAStream &waiter, const c10::cuda::CUDAStream &producer);
#endif

// `repeat`: runs `run` once more and compares its result with `first` bit for bit. On CUDA the
// second run goes on another stream, ordered after the work queued so far on the current one
// (and the current stream after it); `what` names the two runs (" on two streams" is added).
Verdict second_run_agrees(Backend backend, const at::Tensor &first, const std::function<at::Tensor()> &run,
                          const std::string &what);

}  // namespace detfuzz
