// detfuzz._detfuzz: the detfuzz command line and our batch-invariant mode, for Python.
//
//   main(argv, self_program) -> int   runs the CLI (argv[0]: the program that repro commands
//                                     name) with the GIL released; --import and a --mode
//                                     MODULE:ENABLE_FN come back here, under the GIL, through
//                                     the hooks of harness/python_hooks.h
//   enable_batch_invariant_mode(), disable_batch_invariant_mode(), is_batch_invariant_mode_enabled()
//
// The process state a run changes is put back when it returns: SIGINT/SIGTERM handlers (the CLI
// installs its own), ATen's thread count (the CLI pins CPU runs to one thread) and our mode
// (--mode batch-invariant turns it on).
#include "harness/cli_main.h"
#include "harness/python_hooks.h"
#include "ops/torch/batch_invariant_mode.h"

#include <ATen/Parallel.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <csignal>
#include <cstdio>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

namespace py = pybind11;

namespace {

// "ModuleNotFoundError: No module named 'x'": the exception's type and the first line of its text.
std::string exception_line(const py::error_already_set &e) {
  std::string type = "Exception", text;
  try {
    type = py::str(e.type().attr("__name__"));
    text = py::str(e.value());
  } catch (...) {
  }
  text = text.substr(0, text.find('\n'));
  return text.empty() ? type : type + ": " + text;
}

// Calls detfuzz._frontend.<fn>(args...) under the GIL; a Python exception becomes std::runtime_error.
template <typename... Args>
void call_frontend(const char *fn, Args &&...args) {
  std::string error;
  {
    py::gil_scoped_acquire gil;
    try {
      py::module_::import("detfuzz._frontend").attr(fn)(std::forward<Args>(args)...);
    } catch (const py::error_already_set &e) {
      error = exception_line(e);
    }
  }
  if (!error.empty()) throw std::runtime_error(error);
}

int run_main(const std::vector<std::string> &args, const std::string &self_program) {
  if (args.empty()) throw std::invalid_argument("main: argv needs at least the program name");
  detfuzz::PythonHooks hooks;
  hooks.import_module = [](const std::string &m) { call_frontend("import_user_module", m); };
  hooks.call_function = [](const std::string &m, const std::string &fn) { call_frontend("call_user_function", m, fn); };
  hooks.self_program = self_program;
  detfuzz::set_python_hooks(std::move(hooks));

  std::vector<std::string> storage = args;
  std::vector<char *> argv;
  for (auto &a : storage) argv.push_back(a.data());
  argv.push_back(nullptr);

  struct sigaction old_int {
  }, old_term{};
  sigaction(SIGINT, nullptr, &old_int);
  sigaction(SIGTERM, nullptr, &old_term);
  const int threads = at::get_num_threads();
  const bool mode = detfuzz::is_batch_invariant_mode_enabled();
  int rc = 2;
  {
    py::gil_scoped_release release;
    try {
      rc = detfuzz::cli_main(static_cast<int>(storage.size()), argv.data());
    } catch (const std::exception &e) {  // cli_main reports its own errors; this is a last resort
      std::cerr << "detfuzz: error: " << e.what() << std::endl;
    }
    std::cout.flush();
    std::cerr.flush();
    std::fflush(stdout);
    std::fflush(stderr);
    if (at::get_num_threads() != threads) at::set_num_threads(threads);
    mode ? detfuzz::enable_batch_invariant_mode() : detfuzz::disable_batch_invariant_mode();
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  return rc;
}

}  // namespace

PYBIND11_MODULE(_detfuzz, m) {
  m.doc() = "detfuzz's engine: the command line (main) and the batch-invariant mode of our kernels";
  m.def("main", &run_main, py::arg("argv"), py::arg("self_program") = std::string(),
        "Runs the detfuzz command line (argv[0]: the program name repro commands print) with the GIL "
        "released; returns its exit code.");
  m.def(
      "enable_batch_invariant_mode", [] { detfuzz::enable_batch_invariant_mode(); },
      "Our batch-invariant kernels behind libtorch's dispatcher for aten mm, addmm, bmm, baddbmm, _log_softmax, "
      "mean.dim");
  m.def(
      "disable_batch_invariant_mode", [] { detfuzz::disable_batch_invariant_mode(); }, "libtorch's own kernels again");
  m.def("is_batch_invariant_mode_enabled", [] { return detfuzz::is_batch_invariant_mode_enabled(); });
}
