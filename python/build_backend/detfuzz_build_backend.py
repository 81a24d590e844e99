"""The PEP 517 backend of `pip install .` (pyproject.toml): setuptools and torch from the
environment that runs pip, so that nothing is downloaded.

pip's isolated build environment hides that environment's site-packages; the build needs its
torch (libtorch and the pybind11 headers the extension links), so they are put back on sys.path:
the interpreter's own folders, and those it sees outside the isolation (a venv made with
--system-site-packages reaches its base's packages only there).
Where setuptools can make wheels (setuptools >= 70.1, or the `wheel` package), setup.py builds
(its build_ext runs CMake: cmake_build.py); otherwise this module writes the wheel itself from
the same CMake build.
"""
import base64
import csv
import hashlib
import io
import os
import site
import subprocess
import sys
import sysconfig
import zipfile


def _outer_sys_path():
    """sys.path of this interpreter outside pip's isolation, which works through PYTHONPATH and
    PYTHONNOUSERSITE: a venv made with --system-site-packages sees its base's packages only there."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONNOUSERSITE", "PYTHONHOME")}
    try:
        out = subprocess.run([sys.executable, "-c", "import sys; print('\\n'.join(sys.path))"], env=env, cwd="/",
                             capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return []
    return [p for p in out.stdout.splitlines() if p and os.path.isdir(p)] if out.returncode == 0 else []


for _path in [sysconfig.get_paths()[k] for k in ("purelib", "platlib")] + site.getsitepackages() + _outer_sys_path():
    if _path not in sys.path:
        sys.path.append(_path)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cmake_build  # noqa: E402

NAME, VERSION = "detfuzz", "0.1.0"
SUMMARY = "Bitwise determinism fuzzing of inference kernels: the CLI, a Python API and a pytest plugin"
REQUIRES = ["torch>=2.11,<2.12"]
ENTRY_POINTS = "[pytest11]\ndetfuzz.pytest_plugin = detfuzz.pytest_plugin\n"


def _setuptools_makes_wheels():
    try:
        import setuptools
    except ImportError:
        return False
    version = tuple(int(x) for x in setuptools.__version__.split(".")[:2] if x.isdigit())
    if version >= (70, 1):
        return True
    try:
        import wheel.bdist_wheel  # noqa: F401
        return True
    except ImportError:
        return False


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_sdist(sdist_directory, config_settings=None):
    from setuptools import build_meta
    return build_meta.build_sdist(sdist_directory, config_settings)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    if _setuptools_makes_wheels():
        from setuptools import build_meta
        return build_meta.build_wheel(wheel_directory, config_settings)
    return _write_wheel(wheel_directory)


def _tag():
    impl = f"cp{sys.version_info.major}{sys.version_info.minor}"
    return f"{impl}-{impl}{getattr(sys, 'abiflags', '')}-{sysconfig.get_platform().replace('-', '_').replace('.', '_')}"


def _write_wheel(wheel_directory):
    package = cmake_build.build_package()
    source = os.path.join(cmake_build.ROOT, "python", "detfuzz")
    files = {f"detfuzz/{n}": os.path.join(source, n) for n in sorted(os.listdir(source)) if n.endswith(".py")}
    for path in cmake_build.binaries(package):
        files[f"detfuzz/{os.path.basename(path)}"] = path
    dist_info = f"{NAME}-{VERSION}.dist-info"
    tag = _tag()
    metadata = "".join([f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {VERSION}\nSummary: {SUMMARY}\n",
                        "".join(f"Requires-Dist: {r}\n" for r in REQUIRES)])
    generated = {f"{dist_info}/METADATA": metadata.encode(),
                 f"{dist_info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: detfuzz_build_backend\nRoot-Is-Purelib: false\nTag: {tag}\n".encode(),
                 f"{dist_info}/entry_points.txt": ENTRY_POINTS.encode(),
                 f"{dist_info}/top_level.txt": b"detfuzz\n"}
    name = f"{NAME}-{VERSION}-{tag}.whl"
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as whl:
        items = [(arc, open(path, "rb").read()) for arc, path in files.items()] + list(generated.items())
        for arc, data in items:
            info = zipfile.ZipInfo(arc, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if arc.endswith(".so") else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            whl.writestr(info, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            writer.writerow([arc, f"sha256={digest}", len(data)])
        writer.writerow([f"{dist_info}/RECORD", "", ""])
        whl.writestr(f"{dist_info}/RECORD", record.getvalue())
    return name
