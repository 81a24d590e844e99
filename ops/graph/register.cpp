// Impls of op "prefill_graph": ways to run the small transformer's forward over a batch. They are
// whole pipelines, not single kernel calls: their `run` is empty, each declares its pipeline
// (ops/graph/pipelines.h) here, and properties/graph runs what is declared.
#include "ops/graph/pipelines.h"
#include "ops/registry.h"

#include <map>

namespace detfuzz {
namespace graph {

const PrefillPipeline *prefill_pipeline(const std::string &impl) {
  static const std::map<std::string, PrefillPipeline> pipelines = {
      {"eager", {}},
      {"graph", {/*runner=*/true}},
      {"eager-registry", {false, false, /*through_registry=*/true}},
      {"eager-no-copy", {false, false, /*through_registry=*/true, /*no_copy=*/true}},
      {"mutant-left-aligned", {/*runner=*/true, /*left_aligned=*/true}},
  };
  const auto it = pipelines.find(impl);
  return it == pipelines.end() ? nullptr : &it->second;
}

}  // namespace graph

std::vector<ImplInfo> graph_impls(Backend backend) {
  const auto must = Expectation::must_hold;
  const std::vector<at::ScalarType> dt = {at::kBFloat16, at::kHalf};
  const std::string graph_how = backend == Backend::cuda
                                    ? "right-aligned batch prefill replayed from a captured CUDA graph per bucket"
                                    : "right-aligned batch prefill, the bucket's static-shape forward over the stable "
                                      "buffers (the CPU stand-in for a CUDA graph)";
  return {
      {"eager", "prefill_graph", backend, dt, must, "eager forward over the packed ragged batch", {}},
      {"graph", "prefill_graph", backend, dt, must, graph_how, {}},
      {"eager-registry",
       "prefill_graph",
       backend,
       dt,
       must,
       "eager forward whose inputs go through the buffer registry (grown to the next power of two)",
       {}},
      {"eager-no-copy",
       "prefill_graph",
       backend,
       dt,
       must,
       "eager forward through the registry's no-copy path (DETFUZZ_EAGER_INPUT_NO_COPY)",
       {}},
      {"mutant-left-aligned",
       "prefill_graph",
       backend,
       dt,
       must,
       "planted bug: the graph runner puts real tokens at the start of their slots",
       {}},
  };
}

}  // namespace detfuzz
