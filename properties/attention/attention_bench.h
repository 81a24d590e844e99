// Paged attention's own bench (decode and prefill rows), registered on the attention family.
#pragma once

#include "properties/family.h"

namespace detfuzz {

// Sets the bench fields of the attention family (its shape kinds, their check, the impls it
// times and, in CUDA builds, the run).
void add_attention_bench(PropertyFamily &f);

}  // namespace detfuzz
