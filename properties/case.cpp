#include "properties/case.h"

#include <cstdio>
#include <cstring>
#include <sstream>
#include <stdexcept>

namespace detfuzz {

std::string CaseSpec::param(const std::string &key, const std::string &fallback) const {
  auto it = params.find(key);
  return it == params.end() ? fallback : it->second;
}

int64_t CaseSpec::param_int(const std::string &key, int64_t fallback) const {
  auto it = params.find(key);
  if (it == params.end()) return fallback;
  try {
    size_t used = 0;
    const int64_t v = std::stoll(it->second, &used);
    if (used == it->second.size()) return v;
  } catch (const std::exception &) {
  }
  throw std::invalid_argument("parameter " + key + "='" + it->second + "' is not an integer");
}

double CaseSpec::param_double(const std::string &key, double fallback) const {
  auto it = params.find(key);
  return it == params.end() ? fallback : double_from_hex(it->second);
}

std::string CaseSpec::shape_string() const {
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "x" : "") + std::to_string(shape[i]);
  return s;
}

std::string CaseSpec::params_string() const {
  std::string s;
  for (const auto &[k, v] : params) s += (s.empty() ? "" : " ") + k + "=" + v;
  return s;
}

std::string CaseSpec::describe() const {
  char seed_hex[24];
  std::snprintf(seed_hex, sizeof seed_hex, "0x%llx", static_cast<unsigned long long>(seed));
  return op + "/" + impl + "/" + property + " " + to_string(backend) + " " + dtype_name(dtype) +
         " shape=" + shape_string() + " layout=" + layout + " dist=" + dist + " seed=" + seed_hex +
         (params.empty() ? "" : " " + params_string());
}

std::string double_to_hex(double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(bits));
  return buf;
}

double double_from_hex(const std::string &s) {
  if (s.size() != 18 || s.compare(0, 2, "0x") != 0 ||
      s.find_first_not_of("0123456789abcdefABCDEF", 2) != std::string::npos)
    throw std::invalid_argument("'" + s + "' is not the hex bit pattern of a double (0x + 16 hex digits)");
  const uint64_t bits = std::stoull(s.substr(2), nullptr, 16);
  double v;
  std::memcpy(&v, &bits, 8);
  return v;
}

std::vector<int64_t> parse_shape(const std::string &s) {
  std::vector<int64_t> out;
  if (s.empty()) throw std::invalid_argument("empty shape");
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, 'x')) {
    if (part.empty() || part.find_first_not_of("0123456789") != std::string::npos)
      throw std::invalid_argument("shape '" + s + "' is not sizes joined by 'x' (e.g. 4x128x64)");
    out.push_back(std::stoll(part));
  }
  return out;
}

std::map<std::string, std::string> parse_params(const std::string &s) {
  std::map<std::string, std::string> out;
  std::stringstream ss(s);
  std::string kv;
  while (ss >> kv) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) throw std::invalid_argument("parameter '" + kv + "' is not key=value");
    out[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return out;
}

}  // namespace detfuzz
