"""Builds the extension module detfuzz._detfuzz with the project's CMake tree (target
detfuzz_python only, tests off), for setup.py and the in-tree PEP 517 backend.

Environment:
  DETFUZZ_BUILD_DIR   the CMake build folder (default build-python/ at the repository root, kept,
                      so that a second install is incremental); an existing build (e.g. build/) works
  DETFUZZ_CMAKE_ARGS  extra CMake arguments, e.g. "-DDETFUZZ_CUDA=OFF"
  JOBS                parallel build jobs (default: the CPU count)
"""
import glob
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def torch_cmake_prefix():
    """torch's CMake folder, without importing torch when it cannot be (pip's isolated build)."""
    try:
        import torch.utils
        return torch.utils.cmake_prefix_path
    except ImportError:
        pass
    for key in ("purelib", "platlib"):
        path = os.path.join(sysconfig.get_paths()[key], "torch", "share", "cmake")
        if os.path.isdir(path):
            return path
    sys.exit("detfuzz: torch 2.11 must be installed in the environment that builds detfuzz (pip install torch==2.11.0)")


def build_package():
    """Configures and builds; returns the package folder holding _detfuzz*.so and libdetfuzz_torch.so."""
    if shutil.which("cmake") is None:
        sys.exit("detfuzz: cmake is needed to build the extension (ci/setup installs it)")
    build = os.path.abspath(os.environ.get("DETFUZZ_BUILD_DIR") or os.path.join(ROOT, "build-python"))
    prefix = [torch_cmake_prefix()] + [p for p in os.environ.get("CMAKE_PREFIX_PATH", "").split(":") if p]
    configure = ["cmake", "-S", ROOT, "-B", build, "-DDETFUZZ_PYTHON=ON",
                 f"-DPython3_EXECUTABLE={sys.executable}", "-DCMAKE_PREFIX_PATH=" + ";".join(prefix)]
    if not os.path.isfile(os.path.join(build, "CMakeCache.txt")):
        configure += ["-DCMAKE_BUILD_TYPE=Release", "-DDETFUZZ_TESTS=OFF"]  # a folder of its own: no tests
        if shutil.which("ccache"):
            configure += ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache", "-DCMAKE_CUDA_COMPILER_LAUNCHER=ccache"]
    configure += shlex.split(os.environ.get("DETFUZZ_CMAKE_ARGS", ""))
    # cmake (and the compilers it runs) without pip's build isolation, which works through PYTHONPATH
    # and PYTHONNOUSERSITE: a cmake installed from PyPI is a Python script that must import its module.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONNOUSERSITE", "PYTHONHOME")}
    subprocess.check_call(configure, env=env)
    subprocess.check_call(["cmake", "--build", build, "--target", "detfuzz_python", "-j",
                           os.environ.get("JOBS", str(os.cpu_count() or 2))], env=env)
    package = os.path.join(build, "python", "detfuzz")
    if not glob.glob(os.path.join(package, "_detfuzz*.so")):
        sys.exit(f"detfuzz: the build made no extension module in {package}")
    return package


def binaries(package):
    """The shared objects a wheel carries: the extension and libdetfuzz_torch.so beside it."""
    return sorted(glob.glob(os.path.join(package, "_detfuzz*.so")) + glob.glob(os.path.join(package, "libdetfuzz_torch.so")))
