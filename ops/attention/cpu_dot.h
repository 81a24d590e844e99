// The q . k dot product of the CPU attention loops (Path A and the fixed-split CPU impl), and
// which build of the fixed-split loops runs.
#pragma once

#include <cstdint>

namespace detfuzz::attention {

// a . b over n elements in eight interleaved float partial sums (lane j takes j, j + 8, ...),
// added pairwise at the end: one fixed order, which the compiler keeps in vector registers.
inline float dot8(const float *a, const float *b, int64_t n) {
  float lane[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  int64_t d = 0;
  for (; d + 8 <= n; d += 8)
    for (int j = 0; j < 8; ++j) lane[j] += a[d + j] * b[d + j];
  for (int j = 0; d < n; ++d, ++j) lane[j] += a[d] * b[d];
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

// The fixed-split CPU loops are compiled twice from one body: portable, and for AVX2 + FMA + F16C (8
// lanes for dot8 and the head-dim loops, fma as one instruction; the same operations in the same
// order). The AVX2 build runs where the CPU has it, unless a test pins the portable one to
// compare the two bit for bit.
bool cpu_attention_vectorised();
void pin_portable_cpu_attention(bool pinned);

}  // namespace detfuzz::attention
