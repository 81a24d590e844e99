// Batch-invariant mode: while it is on, libtorch's dispatcher runs detfuzz's batch-invariant kernels
// for aten::mm, addmm, bmm, baddbmm, _log_softmax and mean.dim on CPU tensors (and CUDA tensors
// in CUDA builds), so torch::mm, torch::matmul, torch::nn::functional::linear, log_softmax and
// mean give a row the same bits alone as inside any batch. Turning it off restores libtorch's
// own kernels. Which entry points reach the replaced ops is listed in aten_overrides.cpp.
//
// The same API, mirroring SGLang's batch_invariant_ops (enable / disable / is_enabled and a scope):
//
//   detfuzz::enable_batch_invariant_mode();          // idempotent
//   { detfuzz::BatchInvariantMode off(false); ... }  // scoped; restores the outer state exactly
//   detfuzz::disable_batch_invariant_mode();         // idempotent
//
// Python engines get it as custom ops of libdetfuzz_torch.so (registered when it is loaded):
//
//   torch.ops.load_library("build/ops/torch/libdetfuzz_torch.so")
//   torch.ops.detfuzz.enable_batch_invariant_mode()
//   torch.ops.detfuzz.disable_batch_invariant_mode()
//   torch.ops.detfuzz.is_batch_invariant_mode_enabled()  # -> bool
//
// When to call. Change the mode at start-up, or between forward passes — as SGLang does when it
// initialises the model runner — never while another thread may be running an op. The mode's
// own state is guarded by a mutex, so concurrent enable/disable/query calls are safe and
// serialised; but libtorch's dispatcher does not promise that a kernel registration is atomic
// with respect to an op that is being dispatched on another thread at that moment, and an op
// running during the switch may get either kernel. Also switching the mode inside a CUDA-graph
// capture has no effect on what the graph replays: a captured graph keeps the kernels that ran
// when it was captured. The first enable in a process makes libtorch print one warning
// ("Overriding a previously registered kernel for the same operator and the same dispatch key");
// that override is the point.
#pragma once

namespace detfuzz {

// Registers our kernels (no-op when already on).
void enable_batch_invariant_mode();
// Deregisters them; libtorch's native kernels are back (no-op when already off).
void disable_batch_invariant_mode();
bool is_batch_invariant_mode_enabled();

// RAII scope: sets the mode to `enabled` for its lifetime, then restores the state it found.
// Scopes nest; each restores exactly the state that was current when it was constructed (also if
// enable/disable were called directly inside it). The mode is process-wide, not per thread: two
// threads' scopes interleaving would restore each other's states, so open scopes from one thread.
class BatchInvariantMode {
 public:
  explicit BatchInvariantMode(bool enabled = true);
  ~BatchInvariantMode();
  BatchInvariantMode(const BatchInvariantMode &) = delete;
  BatchInvariantMode &operator=(const BatchInvariantMode &) = delete;

  bool previous() const { return previous_; }

 private:
  bool previous_;
};

}  // namespace detfuzz
