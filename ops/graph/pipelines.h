// How each impl of prefill_graph runs the small transformer's forward over a batch. The impls
// are whole pipelines, not single kernel calls (their ImplInfo::run is empty): register.cpp
// declares each one's pipeline beside it, and properties/graph runs what is declared.
#pragma once

#include <string>

namespace detfuzz::graph {

struct PrefillPipeline {
  // The right-aligned batch-prefill runner (a CUDA graph per bucket), or the eager forward.
  bool runner = false;
  bool left_aligned = false;  // the runner puts real tokens at the start of their slots (a planted bug)
  // Eager inputs go through the buffer registry (EagerInputs), and by its no-copy path.
  bool through_registry = false;
  bool no_copy = false;
};

// The pipeline of impl `impl` of prefill_graph; nullptr for an unknown impl.
const PrefillPipeline *prefill_pipeline(const std::string &impl);

}  // namespace detfuzz::graph
