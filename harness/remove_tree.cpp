#include "harness/remove_tree.h"

#include <ftw.h>
#include <cstdio>

namespace detfuzz {
namespace {

int remove_entry(const char *path, const struct stat *, int, struct FTW *) { return std::remove(path); }

}  // namespace

void remove_tree(const std::string &path) {
  // Depth first (FTW_DEPTH) so folders are empty when removed; no symlinks followed (FTW_PHYS).
  nftw(path.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

}  // namespace detfuzz
