// Sticky device errors. An illegal address, a misaligned access, an illegal instruction, a launch
// failure or an assert in a CUDA kernel poisons the process's CUDA context: every later call fails
// with the same error. The campaign asks after every case whether the context is still usable, so
// that the fault is named against the case whose launches raised it (each case ends synchronised,
// so no earlier case can still be running), and never runs another case in a poisoned context.
//
// A kernel library loaded with --load may export
//     extern "C" const char *detfuzz_planted_device_error(void);
// returning the name of a sticky error it has planted (nullptr while healthy). It is asked after
// every case, whatever the backend: the planted-fault test library (tests/plugins) uses it to
// drive this control flow on a machine without a GPU.
#pragma once

#include "ops/registry.h"

#include <string>
#include <vector>

namespace detfuzz {

// "" while this process can run another case on `backend`; else the sticky error as
// "<name>: <description>", e.g. "cudaErrorIllegalAddress: an illegal memory access was
// encountered". On CUDA (a CUDA build with a GPU, and a case of the cuda backend) it waits for the
// device, clears a pending error that is not sticky, and reports one that stays.
std::string sticky_device_error(Backend backend);

// The name alone: "cudaErrorIllegalAddress" of "cudaErrorIllegalAddress: an illegal ...".
std::string device_error_name(const std::string &sticky_error);

// Looks up detfuzz_planted_device_error in each loaded library (already dlopened by --load).
void register_planted_device_error_hooks(const std::vector<std::string> &libraries);

}  // namespace detfuzz
