// build/detfuzz: the command line; a run that imports Python modules goes to python3 -m detfuzz.
#include "harness/cli_main.h"
#include "harness/python_hooks.h"

int main(int argc, char **argv) {
  if (const int handed = detfuzz::exec_python_if_needed(argc, argv); handed >= 0) return handed;
  return detfuzz::cli_main(argc, argv);
}
