#include "harness/device_faults.h"

#include <ATen/Context.h>
#ifdef DETFUZZ_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

#include <dlfcn.h>

namespace detfuzz {
namespace {

using PlantedHook = const char *(*)();

std::vector<PlantedHook> &planted_hooks() {
  static std::vector<PlantedHook> hooks;
  return hooks;
}

#ifdef DETFUZZ_WITH_CUDA
std::string cuda_error_text(cudaError_t e) {
  const char *name = cudaGetErrorName(e), *text = cudaGetErrorString(e);
  return std::string(name ? name : "cudaError") + ": " + (text ? text : "unknown CUDA error");
}

std::string sticky_cuda_error() {
  if (!at::hasCUDA()) return "";
  const cudaError_t sync = cudaDeviceSynchronize();
  const cudaError_t last = cudaGetLastError();  // clears an error that is not sticky
  if (sync == cudaSuccess && last == cudaSuccess) return "";
  // A sticky error survives cudaGetLastError: the context answers every call with it.
  const cudaError_t again = cudaDeviceSynchronize();
  if (again != cudaSuccess) return cuda_error_text(again);
  const cudaError_t still = cudaGetLastError();
  return still == cudaSuccess ? "" : cuda_error_text(still);
}
#endif

}  // namespace

std::string sticky_device_error(Backend backend) {
  for (PlantedHook hook : planted_hooks())
    if (const char *planted = hook(); planted && *planted)
      return std::string(planted) + ": planted by a loaded library";
#ifdef DETFUZZ_WITH_CUDA
  if (backend == Backend::cuda) return sticky_cuda_error();
#else
  (void)backend;
#endif
  return "";
}

std::string device_error_name(const std::string &sticky_error) {
  return sticky_error.substr(0, sticky_error.find(':'));
}

void register_planted_device_error_hooks(const std::vector<std::string> &libraries) {
  for (const auto &lib : libraries) {
    void *handle = dlopen(lib.c_str(), RTLD_NOW | RTLD_NOLOAD);
    if (!handle) continue;
    if (void *sym = dlsym(handle, "detfuzz_planted_device_error")) {
      const auto hook = reinterpret_cast<PlantedHook>(sym);
      auto &hooks = planted_hooks();
      bool known = false;
      for (PlantedHook h : hooks) known = known || h == hook;
      if (!known) hooks.push_back(hook);
    }
  }
}

}  // namespace detfuzz
