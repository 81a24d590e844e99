// The outcome of checking one property on one case.
#pragma once

#include "properties/device_diff.h"

#include <string>

namespace detfuzz {

struct Verdict {
  enum class Outcome { pass, fail, error };
  Outcome outcome = Outcome::pass;
  DiffStats diff;      // the bitwise comparison behind an invariance verdict (empty for accuracy)
  std::string detail;  // one line: what was compared, the accuracy miss, or the error text

  bool passed() const { return outcome == Outcome::pass; }
  static Verdict pass(DiffStats d = {}, std::string why = "") { return {Outcome::pass, std::move(d), std::move(why)}; }
  static Verdict fail(DiffStats d, std::string why) { return {Outcome::fail, std::move(d), std::move(why)}; }
  // An error's detail is its first line: a libtorch exception's backtrace stays out of the record.
  static Verdict error(const std::string &why) { return {Outcome::error, {}, why.substr(0, why.find('\n'))}; }
  // Pass when the two tensors are bitwise equal, fail otherwise; `what` names the comparison.
  // CUDA tensors are compared on the device.
  static Verdict from_diff(const at::Tensor &expected, const at::Tensor &actual, const std::string &what) {
    DiffStats d = compare_bits(expected, actual);
    return d.equal() ? pass(std::move(d), what) : fail(d, what + ": " + d.summary());
  }
};

inline const char *to_string(Verdict::Outcome o) {
  return o == Verdict::Outcome::pass ? "pass" : o == Verdict::Outcome::fail ? "fail" : "error";
}

}  // namespace detfuzz
