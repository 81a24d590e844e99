"""What the C++ command line asks of the interpreter (harness/python_hooks.h), and how it is run.

import_user_module and call_user_function are called by the extension, under the GIL, for
``--import MODULE`` and ``--mode MODULE:ENABLE_FN``; run_cli is ``python -m detfuzz`` and
``detfuzz.main``.
"""
import hashlib
import importlib
import importlib.util
import os
import shlex
import shutil
import sys
import tempfile

import warnings

# torch warns on import where numpy is missing; the CLI's stderr keeps to its own one-line errors.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
import torch  # noqa: E402,F401  (libtorch is loaded before the extension that links it)

from . import _detfuzz  # noqa: E402

# Modules imported by path: path -> module, so that a second import is the same module (its
# torch.library registrations must not run twice).
_by_path = {}


def import_user_module(name):
    """Imports a module by dotted name (sys.path, PYTHONPATH) or by the path of a .py file."""
    module = _import(name)
    # A custom op imports torch._dynamo on its first call (1-2 s): here, before the campaign's
    # clock starts, rather than inside its first case.
    import torch._dynamo  # noqa: F401
    return module


def _import(name):
    if name.endswith(".py") or os.sep in name:
        path = os.path.abspath(name)
        if path in _by_path:
            return _by_path[path]
        if not os.path.isfile(path):
            raise ModuleNotFoundError(f"No file {name}")
        module_name = os.path.splitext(os.path.basename(path))[0]
        if module_name in sys.modules and os.path.abspath(getattr(sys.modules[module_name], "__file__", "") or "") == path:
            module = sys.modules[module_name]
        else:
            spec = importlib.util.spec_from_file_location(module_name, path)
            if spec is None or spec.loader is None:
                raise ImportError(f"{name} is not a Python module")
            module = importlib.util.module_from_spec(spec)
            sys.modules.setdefault(module_name, module)
            try:
                spec.loader.exec_module(module)
            except BaseException:
                if sys.modules.get(module_name) is module:
                    del sys.modules[module_name]
                raise
        _by_path[path] = module
        return module
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` would: the current folder's modules
    return importlib.import_module(name)


def call_user_function(module, fn):
    """--mode MODULE:ENABLE_FN: imports MODULE and calls ENABLE_FN()."""
    m = import_user_module(module)
    f = getattr(m, fn, None)
    if f is None:
        raise AttributeError(f"module '{m.__name__}' has no attribute '{fn}'")
    if not callable(f):
        raise TypeError(f"{module}:{fn} is not callable")
    f()


def _package_parent():
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def program_name():
    """How repro commands name this CLI: `python3 -m detfuzz` when that is this interpreter."""
    exe = os.path.realpath(sys.executable)
    for name in ("python3", "python"):
        found = shutil.which(name)
        if found and os.path.realpath(found) == exe:
            return f"{name} -m detfuzz"
    return f"{shlex.quote(sys.executable)} -m detfuzz"


def self_program():
    """A launcher of `python -m detfuzz` in this interpreter, for the children a run starts
    (fork-mode workers, crash replays): /proc/self/exe is python itself."""
    parent = _package_parent()
    text = ("#!/bin/sh\n# detfuzz: runs the CLI in the interpreter that started the run\n"
            f"PYTHONPATH={shlex.quote(parent)}${{PYTHONPATH:+:$PYTHONPATH}} exec {shlex.quote(sys.executable)} -m detfuzz \"$@\"\n")
    folder = os.path.join(tempfile.gettempdir(), f"detfuzz-{os.getuid()}")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "launcher-" + hashlib.sha1(text.encode()).hexdigest()[:16])
    try:
        with open(path) as f:
            if f.read() == text:
                return path
    except OSError:
        pass
    tmp = f"{path}.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o755)
    os.replace(tmp, path)
    return path


def run_cli(argv, prog=None):
    """Runs the detfuzz command line with argv (without the program name); returns the exit code."""
    sys.stdout.flush()
    sys.stderr.flush()
    return _detfuzz.main([prog or program_name()] + [os.fspath(a) for a in argv], self_program())
