// The first line of an error's text: detfuzz reports an exception (a Python traceback, a libtorch
// error with its backtrace) as one line.
#pragma once

#include <string>

namespace detfuzz {

inline std::string first_line(const std::string &s) { return s.substr(0, s.find('\n')); }

}  // namespace detfuzz
