// The graph runner's own bench (`detfuzz bench --op prefill_graph`), registered on the graph family.
#pragma once

#include "properties/family.h"

namespace detfuzz {

// Sets the bench fields of the graph family: its shape kind (prefill_graph: M = sequences,
// N = new tokens per sequence, K = cached tokens per sequence), the check of a shape row, the
// impls it times and, in CUDA builds, the bench itself.
void add_graph_bench(PropertyFamily &f);

}  // namespace detfuzz
