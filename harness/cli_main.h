// The detfuzz command line (harness/main.cpp), run by the executable (harness/exe_main.cpp) and
// by the Python module (python/detfuzz: `python -m detfuzz`, detfuzz.main) alike.
#pragma once

namespace detfuzz {

// Parses argv (argv[0] is the program name that repro commands print) and runs the subcommand;
// returns the exit code (0, 1, 2, or 128 + a signal).
int cli_main(int argc, char **argv);

}  // namespace detfuzz
