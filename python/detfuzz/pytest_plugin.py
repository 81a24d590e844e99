"""pytest plugin: every op of a spec file is a test item, fuzzed with detfuzz.check.

    pytest -p detfuzz.pytest_plugin my_ops.spec --detfuzz-import my_ops --detfuzz-budget 10s --junitxml=junit.xml

Spec files given on the command line are collected, and so are those that pytest meets whose
path or name matches a --detfuzz-spec pattern. A failing item's message is the shrunk record and
its repro command. Installed with pip, the plugin is registered through the pytest11 entry point.
"""
import fnmatch
import os
import tempfile

import pytest


def pytest_addoption(parser):
    group = parser.getgroup("detfuzz", "detfuzz: fuzz the ops of spec files")
    group.addoption("--detfuzz-spec", action="append", default=[], metavar="PATTERN",
                    help="spec files (glob patterns) whose ops become test items; files given as arguments always do")
    group.addoption("--detfuzz-budget", default="5s", help="time budget per op: 30s, 5m or seconds (default 5s)")
    group.addoption("--detfuzz-import", action="append", default=[], metavar="MODULE",
                    help="Python module registering the ops (dotted name or file.py); repeatable")
    group.addoption("--detfuzz-load", action="append", default=[], metavar="LIB",
                    help="kernel library registering torch operators (TORCH_LIBRARY); repeatable")
    group.addoption("--detfuzz-mode", default=None, help="native, batch-invariant or MODULE:ENABLE_FN")
    group.addoption("--detfuzz-backend", default="auto", help="cpu, cuda or auto (default auto)")
    group.addoption("--detfuzz-property", default=None, help="properties, comma-separated (default every one)")
    group.addoption("--detfuzz-dtype", default=None, help="dtypes, comma-separated (default the spec's)")
    group.addoption("--detfuzz-seed", default=None, help="the seed of every item's campaign (default random)")
    group.addoption("--detfuzz-out", default=None, metavar="DIR",
                    help="folder for the report of every item (default a temporary folder)")


def _wanted(path, config):
    if config.getoption("detfuzz_spec") is None:
        return False
    for pattern in config.getoption("detfuzz_spec"):
        if fnmatch.fnmatch(str(path), pattern) or fnmatch.fnmatch(path.name, pattern) or \
           os.path.abspath(pattern) == str(path):
            return True
    return False


def pytest_collect_file(file_path, parent):
    if file_path.suffix == ".spec" and (parent.session.isinitpath(file_path) or _wanted(file_path, parent.config)):
        return SpecFile.from_parent(parent, path=file_path)
    return None


class SpecFile(pytest.File):
    def collect(self):
        for number, line in enumerate(self.path.read_text().splitlines(), start=1):
            words = line.split("#", 1)[0].split()
            if len(words) >= 2 and words[0] == "op":
                yield SpecItem.from_parent(self, name=words[1], op=words[1], line=number)


class SpecItem(pytest.Item):
    def __init__(self, *, op, line, **kwargs):
        super().__init__(**kwargs)
        self.op = op
        self.line = line

    def runtest(self):
        from ._api import check
        config = self.config
        root = config.getoption("detfuzz_out")
        if root:
            os.makedirs(root, exist_ok=True)
            out = tempfile.mkdtemp(prefix=self.op.replace("::", "__") + "-", dir=root)
        else:
            out = None
        self.result = check(self.op, spec=str(self.path), budget=config.getoption("detfuzz_budget"),
                            properties=config.getoption("detfuzz_property"), dtypes=config.getoption("detfuzz_dtype"),
                            out=out, backend=config.getoption("detfuzz_backend"), seed=config.getoption("detfuzz_seed"),
                            imports=config.getoption("detfuzz_import"), load=config.getoption("detfuzz_load"),
                            mode=config.getoption("detfuzz_mode"))
        self.user_properties.append(("detfuzz_report", self.result.out))
        self.user_properties.append(("detfuzz_cases", str(self.result.cases)))

    def repr_failure(self, excinfo):
        from ._api import DetfuzzError
        if isinstance(excinfo.value, (AssertionError, DetfuzzError)):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, self.line - 1, f"detfuzz {self.op}"
