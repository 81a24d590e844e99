// Removes a folder and everything under it (a missing path is fine).
//
// Not std::filesystem::remove_all: libtorch.so exports its own copy of that symbol, and on
// machines where the dynamic linker binds the executable's call to libtorch's copy it jumps to
// address 0 (seen with the torch 2.11.0 wheel on Debian 12 and Ubuntu 24.04). POSIX nftw is
// glibc's and cannot be interposed that way.
#pragma once

#include <string>

namespace detfuzz {

void remove_tree(const std::string &path);

}  // namespace detfuzz
