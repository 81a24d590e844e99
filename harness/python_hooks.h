// Users' kernels in Python: what `--import MODULE` and `--mode MODULE:ENABLE_FN` need from an
// interpreter, and where the CLI gets one.
//
// Inside Python (`python -m detfuzz`, detfuzz.main, the pytest plugin: python/detfuzz), the
// extension module registers PythonHooks before it runs the CLI with the GIL released; the hooks
// take the GIL back to import a module or call a mode's enable function. The executable
// (build/detfuzz) has no interpreter: a fuzz, replay or bench command line that asks for one is
// handed to `python3 -m detfuzz` with the same arguments (exec_python_if_needed), the build's
// python/ folder first on PYTHONPATH.
//
// Nothing here links Python: the hooks are plain std::functions.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace detfuzz {

struct PythonHooks {
  // Imports a module by dotted name (from sys.path / PYTHONPATH) or by the path of a .py file.
  // Throws std::runtime_error whose message is "<ExceptionType>: <first line of its message>".
  std::function<void(const std::string &module)> import_module;
  // Imports `module` and calls its `fn()`; throws like import_module.
  std::function<void(const std::string &module, const std::string &fn)> call_function;
  // A program that runs this same CLI in a fresh interpreter (a launcher of `python -m detfuzz`):
  // what fork-mode workers and crash replays exec instead of /proc/self/exe, which is python.
  std::string self_program;
};

// Registered by the Python module; an empty hook set (the executable) means no interpreter.
void set_python_hooks(PythonHooks hooks);
bool python_hooks_set();

// --import's help text (fuzz, replay and bench say it alike).
inline constexpr const char *kImportFlagText =
    "Python module registering torch.library ops (dotted name or file.py), imported first; repeatable. "
    "build/detfuzz hands such a run to python3 -m detfuzz";

// True for a user's Python mode, "MODULE:ENABLE_FN" (the module may be a dotted name or a .py path).
bool is_python_mode(const std::string &mode);

// Imports `imports` in order, then (for a Python mode) imports its module and calls its enable
// function. Throws UsageError, one line: "--import mymod: ModuleNotFoundError: No module named
// 'mymod'", "--mode m:f: AttributeError: ...". Needs the hooks unless both are empty. Records the
// imports for repro commands (python_replay_options).
void prepare_python(const std::vector<std::string> &imports, const std::string &mode);
// A user's Python mode was enabled by prepare_python (so our own mode is not turned on).
bool python_mode_enabled();
// "--import M" for every module prepare_python imported, in order: replay options of records.
std::vector<std::string> python_replay_options();
// The hooks' self_program, or "" (then /proc/self/exe is the program to exec).
std::string python_self_program();

// The executable's entry: when argv's subcommand is fuzz, replay or bench and it has --import or
// a --mode MODULE:ENABLE_FN, execs python with argv[1..] as `python -m detfuzz` would run them
// (python: $DETFUZZ_PYTHON, else the python the build found, else python3 on PATH; the build's
// python/ folder prepended to PYTHONPATH; a package that does not import is a one-line error,
// exit 2) and returns only if that exec failed (with exit code 2, the reason printed).
// Returns -1 when argv needs no interpreter.
int exec_python_if_needed(int argc, char **argv);

}  // namespace detfuzz
