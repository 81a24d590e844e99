// The mode's state — whether it is on, and the torch::Library registrations that make it on —
// behind one mutex, and the `detfuzz::` custom ops that give Python engines the same switch.
#include "ops/torch/batch_invariant_mode.h"

#include "ops/torch/aten_overrides.h"

#include <torch/library.h>

#include <memory>
#include <mutex>
#include <vector>

namespace detfuzz {
namespace {

struct ModeState {
  std::mutex mu;
  // Non-empty exactly when the mode is on.
  std::vector<std::unique_ptr<torch::Library>> libs;
};

// Deliberately never destroyed: a registration left on at exit must not be torn down after
// libtorch's dispatcher singleton has already been destroyed.
ModeState &state() {
  static ModeState *s = new ModeState;
  return *s;
}

void set_mode(bool on) {
  ModeState &s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (on == !s.libs.empty()) return;
  if (on)
    s.libs = torch_mode::register_aten_overrides();
  else
    s.libs.clear();  // ~Library deregisters: the native kernels are back
}

}  // namespace

void enable_batch_invariant_mode() { set_mode(true); }
void disable_batch_invariant_mode() { set_mode(false); }

bool is_batch_invariant_mode_enabled() {
  ModeState &s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return !s.libs.empty();
}

BatchInvariantMode::BatchInvariantMode(bool enabled) : previous_(is_batch_invariant_mode_enabled()) {
  set_mode(enabled);
}
BatchInvariantMode::~BatchInvariantMode() { set_mode(previous_); }

}  // namespace detfuzz

// Python: torch.ops.load_library(".../libdetfuzz_torch.so"); torch.ops.detfuzz.enable_batch_invariant_mode().
// The ops take no tensors, so they are registered as catch-all (CompositeImplicitAutograd) kernels.
TORCH_LIBRARY(detfuzz, m) {
  m.def("enable_batch_invariant_mode() -> ()", [] { detfuzz::enable_batch_invariant_mode(); });
  m.def("disable_batch_invariant_mode() -> ()", [] { detfuzz::disable_batch_invariant_mode(); });
  m.def("is_batch_invariant_mode_enabled() -> bool", [] { return detfuzz::is_batch_invariant_mode_enabled(); });
}
