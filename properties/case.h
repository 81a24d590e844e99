// A case: everything needed to rebuild the same bits on any machine and re-check one property.
// It is what RapidCheck generates and shrinks, what a failure record stores, and what replay reads.
#pragma once

#include "ops/registry.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace detfuzz {

struct CaseSpec {
  std::string op, impl, property;
  Backend backend = Backend::cpu;
  at::ScalarType dtype = at::kFloat;
  // Op-defined sizes: mm/addmm {M,N,K}; bmm {B,M,N,K}; log_softmax/mean: the input's sizes.
  std::vector<int64_t> shape;
  // One layout code per input tensor, in OpArgs order: c contiguous, t transposed storage,
  // p padded rows with a storage offset, g every other element of a wider buffer.
  std::string layout;
  std::string dist = "normal";  // normal | uniform | linspace | wide | special
  uint64_t seed = 0;            // data seed: element e of tensor t is a pure function of (seed, t, e)
  // Op attributes and property parameters, e.g. dim=1 keepdim=0 bias=2 alpha=0x3ff0000000000000 i=3 j=7.
  std::map<std::string, std::string> params;

  std::string param(const std::string &key, const std::string &fallback = "") const;
  int64_t param_int(const std::string &key, int64_t fallback) const;
  double param_double(const std::string &key, double fallback) const;  // stored as hex bits of a double

  std::string shape_string() const;   // "2x7x9"
  std::string params_string() const;  // "dim=1 i=3 j=7"
  std::string describe() const;       // one line for logs
};

std::string double_to_hex(double v);  // "0x3ff0000000000000": exact
double double_from_hex(const std::string &s);
std::vector<int64_t> parse_shape(const std::string &s);                 // throws std::invalid_argument
std::map<std::string, std::string> parse_params(const std::string &s);  // throws std::invalid_argument

}  // namespace detfuzz
