#include "properties/streams.h"

#ifdef DETFUZZ_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#endif

namespace detfuzz {

#ifdef DETFUZZ_WITH_CUDA
void stream_wait(const c10::cuda::CUDAStream &waiter, const c10::cuda::CUDAStream &producer) {
  at::cuda::CUDAEvent done;
  done.record(producer);
  done.block(waiter);
}
#endif

Verdict second_run_agrees(Backend backend, const at::Tensor &first, const std::function<at::Tensor()> &run,
                          const std::string &what) {
#ifdef DETFUZZ_WITH_CUDA
  if (backend == Backend::cuda) {
    const c10::cuda::CUDAStream main = c10::cuda::getCurrentCUDAStream();
    const c10::cuda::CUDAStream other = c10::cuda::getStreamFromPool();
    stream_wait(other, main);
    at::Tensor second;
    {
      c10::cuda::CUDAStreamGuard guard(other);
      second = run();
    }
    stream_wait(main, other);
    return Verdict::from_diff(first, second, what + " on two streams");
  }
#endif
  (void)backend;
  return Verdict::from_diff(first, run(), what);
}

}  // namespace detfuzz
