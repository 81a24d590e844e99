"""setuptools build of the Python package detfuzz (python/detfuzz): build_ext runs the project's
CMake build for the extension target only (python/build_backend/cmake_build.py) and copies the
module and libdetfuzz_torch.so into the package. `pip install .` comes here through
python/build_backend/detfuzz_build_backend.py (see pyproject.toml); torch 2.11 must be installed.
"""
import os
import shutil
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(ROOT, "python", "build_backend"))
import cmake_build  # noqa: E402


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        package = cmake_build.build_package()
        target = os.path.dirname(os.path.abspath(self.get_ext_fullpath(ext.name)))
        os.makedirs(target, exist_ok=True)
        for path in cmake_build.binaries(package):
            shutil.copy2(path, target)


os.makedirs(os.path.join(ROOT, "build-python", "setuptools"), exist_ok=True)  # git ignores /build*/
setup(
    packages=["detfuzz"],
    package_dir={"": "python"},
    ext_modules=[Extension("detfuzz._detfuzz", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": os.path.join(ROOT, "build-python", "setuptools")},
             "egg_info": {"egg_base": os.path.join(ROOT, "build-python")}},
)
