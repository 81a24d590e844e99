#include "harness/python_hooks.h"

#include "harness/cli_common.h"

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <set>

namespace detfuzz {
namespace {

namespace fs = std::filesystem;

PythonHooks &hooks() {
  static PythonHooks h;
  return h;
}
std::vector<std::string> &imported() {
  static std::vector<std::string> v;
  return v;
}
bool g_mode_enabled = false;

bool is_identifier(const std::string &s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  return true;
}

}  // namespace

void set_python_hooks(PythonHooks h) { hooks() = std::move(h); }
bool python_hooks_set() { return static_cast<bool>(hooks().import_module); }

bool is_python_mode(const std::string &mode) {
  const size_t colon = mode.rfind(':');
  return colon != std::string::npos && colon > 0 && is_identifier(mode.substr(colon + 1));
}

void prepare_python(const std::vector<std::string> &imports, const std::string &mode) {
  imported().clear();
  g_mode_enabled = false;
  const bool user_mode = is_python_mode(mode);
  if (imports.empty() && !user_mode) return;
  if (!python_hooks_set())
    throw UsageError(std::string(imports.empty() ? "--mode " + mode : "--import " + imports.front()) +
                     ": needs a Python interpreter (run python3 -m detfuzz)");
  for (const auto &m : imports) {
    try {
      hooks().import_module(m);
    } catch (const std::exception &e) {
      throw UsageError("--import " + m + ": " + e.what());
    }
    imported().push_back(m);
  }
  if (user_mode) {
    const size_t colon = mode.rfind(':');
    try {
      hooks().call_function(mode.substr(0, colon), mode.substr(colon + 1));
    } catch (const std::exception &e) {
      throw UsageError("--mode " + mode + ": " + e.what());
    }
    g_mode_enabled = true;
  }
}

bool python_mode_enabled() { return g_mode_enabled; }

std::vector<std::string> python_replay_options() {
  std::vector<std::string> args;
  for (const auto &m : imported()) args.insert(args.end(), {"--import", m});
  return args;
}

std::string python_self_program() { return hooks().self_program; }

int exec_python_if_needed(int argc, char **argv) {
  static const std::set<std::string> takes_python = {"fuzz", "replay", "bench"};
  if (argc < 2 || !takes_python.count(argv[1])) return -1;
  bool needed = false;
  for (int i = 2; i < argc && !needed; ++i) {
    const std::string a = argv[i];
    if (a == "--import" || a.rfind("--import=", 0) == 0)
      needed = true;
    else if (a.rfind("--mode=", 0) == 0)
      needed = is_python_mode(a.substr(7));
    else if (a == "--mode" && i + 1 < argc)
      needed = is_python_mode(argv[i + 1]);
  }
  if (!needed) return -1;

  std::string python;
  if (const char *p = std::getenv("DETFUZZ_PYTHON"); p && *p) python = p;
#ifdef DETFUZZ_PYTHON_EXECUTABLE
  if (python.empty() && fs::exists(DETFUZZ_PYTHON_EXECUTABLE)) python = DETFUZZ_PYTHON_EXECUTABLE;
#endif
  if (python.empty()) python = "python3";
  // The build's package (python/detfuzz next to the executable) comes first.
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  const fs::path package_dir = exe.parent_path() / "python";
  if (!ec && fs::exists(package_dir / "detfuzz" / "__init__.py")) {
    const char *old = std::getenv("PYTHONPATH");
    const std::string value = package_dir.string() + (old && *old ? ":" + std::string(old) : std::string());
    setenv("PYTHONPATH", value.c_str(), 1);
  }
  // `python -m detfuzz`, with a one-line error (exit 2) where the package or torch does not import.
  static const char *launcher =
      "import sys\n"
      "try:\n"
      "    from detfuzz._frontend import run_cli\n"
      "except ImportError as e:\n"
      "    sys.stderr.write(f'detfuzz: error: --import and --mode MODULE:ENABLE_FN need the detfuzz Python package "
      "(build/python or pip install .): {type(e).__name__}: {e}\\n')\n"
      "    sys.exit(2)\n"
      "sys.exit(run_cli(sys.argv[1:]))\n";
  std::vector<char *> args = {const_cast<char *>(python.c_str()), const_cast<char *>("-c"),
                              const_cast<char *>(launcher)};
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  std::cout.flush();
  execvp(python.c_str(), args.data());
  std::cerr << "detfuzz: error: --import and --mode MODULE:ENABLE_FN run in Python: cannot run '" << python
            << "': " << std::strerror(errno) << std::endl;
  return kExitUsage;
}

}  // namespace detfuzz
