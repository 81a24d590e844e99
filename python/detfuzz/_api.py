"""detfuzz.fuzz and detfuzz.check: one campaign of the CLI on one op, read back from its report.

Nothing here imports torch until a campaign runs (the pytest plugin imports this module).
"""
import csv
import dataclasses
import hashlib
import json
import os
import re
import shlex
import sys
import tempfile
from typing import Any, Dict, List, Optional


class DetfuzzError(ValueError):
    """The run was refused (exit 2): a usage or environment error, e.g. a spec that contradicts the
    op's schema, an op that is not registered, a module that fails to import."""


@dataclasses.dataclass
class Failure:
    """A failing case as the report has it: the shrunk record of a target, and how to replay it."""
    op: str
    impl: str
    property: str
    backend: str
    dtype: str
    shape: str
    outcome: str
    detail: str
    expectation: str
    record: str  # the record line (failures.csv's format)
    repro: str   # a shell command that replays it

    def __str__(self):
        what = self.detail or self.outcome
        return (f"{self.op}/{self.impl}/{self.property}/{self.dtype} ({self.expectation}): {self.outcome} at shape {self.shape}"
                f" ({what})\n  record: {self.record}\n  repro: {self.repro}")


@dataclasses.dataclass
class TargetResult:
    op: str
    impl: str
    property: str
    backend: str
    dtype: str
    expectation: str
    cases: int
    failures: int
    errors: int
    cases_per_s: float
    minimal: Optional[Failure]

    @property
    def passed(self):
        return self.failures == 0 and self.errors == 0


@dataclasses.dataclass
class FuzzResult:
    """What a campaign found. `passed`: every must-hold property held (exit code 0)."""
    exit_code: int
    out: str                      # the report folder (summary.json, failures.csv, ...)
    cases: int
    elapsed_s: float
    targets: List[TargetResult]
    failures: List[Failure]       # one shrunk record per failing target, must-hold ones first
    summary: Dict[str, Any]

    @property
    def passed(self):
        return self.exit_code == 0

    @property
    def cases_per_s(self):
        return self.cases / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def must_hold_failures(self):
        return [f for f in self.failures if f.expectation == "must-hold"]

    def __str__(self):
        head = (f"detfuzz: {'passed' if self.passed else 'FAILED'} ({len(self.targets)} targets, {self.cases} cases in "
                f"{self.elapsed_s:.1f}s, {self.cases_per_s:.0f} cases/s); report: {self.out}")
        return "\n".join([head] + [str(f) for f in self.failures])


RECORD_FIELDS = ("op,impl,property,backend,dtype,shape,layout,dist,seed,params,outcome,differing,numel,first_diff,"
                  "expected_bits,actual_bits,max_abs_diff,max_ulp,detail").split(",")

_OP_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*::[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)?$")


def record_fields(line):
    """A record line (failures.csv's row, a summary's `minimal`) as a dict of its columns."""
    row = next(csv.reader([line]))
    return dict(zip(RECORD_FIELDS, row + [""] * (len(RECORD_FIELDS) - len(row))))


# ---- ops: names, and plain callables wrapped as custom ops ----------------------------------

_SCHEMA_TYPES = {"tensor": "Tensor", "int": "SymInt", "float": "float", "bool": "bool", "int[]": "SymInt[]",
                 "dtype": "ScalarType", "none": "Tensor?"}


def _spec_text(spec):
    """A spec argument: a path to a spec file, or the spec's text."""
    if isinstance(spec, os.PathLike) or (isinstance(spec, str) and "\n" not in spec and os.path.isfile(spec)):
        with open(spec) as f:
            return f.read()
    if isinstance(spec, str) and "\n" not in spec and not spec.lstrip().startswith(("op ", "arg ", "sizes ")):
        raise DetfuzzError(f"spec {spec!r}: no such file")
    return spec


def _spec_lines(text):
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            yield line


def spec_ops(text):
    """The op names of a spec's blocks, in order."""
    return [line.split()[1] for line in _spec_lines(text) if line.split()[0] == "op" and len(line.split()) > 1]


def schema_of_spec(text):
    """The custom-op schema a one-block spec describes: "(Tensor a, Tensor b) -> Tensor"."""
    args = []
    for line in _spec_lines(text):
        words = line.split()
        if words[0] != "arg":
            continue
        if len(words) < 3 or words[2] not in _SCHEMA_TYPES:
            raise DetfuzzError(f"spec line '{line}': cannot make a schema of it")
        typ = _SCHEMA_TYPES[words[2]]
        args.append(f"{typ} {words[1]}" + ("=None" if typ.endswith("?") else ""))
    return "(" + ", ".join(args) + ") -> Tensor"


def _op_name(op):
    """The dispatcher name of an op object, or None for a plain callable."""
    if isinstance(op, str):
        return op
    qualname = getattr(op, "_qualname", None)  # torch.library.custom_op's CustomOpDef
    if isinstance(qualname, str) and "::" in qualname:
        return qualname
    name = getattr(op, "_qualified_op_name", None)  # torch.ops.ns.op (OpOverloadPacket)
    if isinstance(name, str):
        return name
    if type(op).__name__ == "OpOverload":  # torch.ops.ns.op.overload
        return op.name()
    return None


_registered = {}  # op name -> the CustomOpDef of a wrapped callable


def register_callable(fn, name, schema):
    """Wraps `fn` as the custom op `name` (once per process); generated modules call this."""
    if name not in _registered:
        import torch
        _registered[name] = torch.library.custom_op(name, fn, mutates_args=(), schema=schema)
    return _registered[name]


def _importable(fn):
    """(root on sys.path, module name) when fn is a top-level function of an importable module."""
    module = sys.modules.get(getattr(fn, "__module__", None) or "")
    qualname = getattr(fn, "__qualname__", "")
    path = getattr(module, "__file__", None)
    if module is None or module.__name__ == "__main__" or not path or not qualname.isidentifier():
        return None
    if getattr(module, qualname, None) is not fn and getattr(getattr(module, qualname, None), "_init_fn", None) is not fn:
        return None
    root = os.path.dirname(os.path.abspath(path))
    if os.path.basename(path) == "__init__.py":
        root = os.path.dirname(root)
    for _ in range(module.__name__.count(".")):
        root = os.path.dirname(root)
    return root, module.__name__


def _wrap_callable(fn, spec_text):
    """Registers `fn` as a custom op for the run. Returns (op name, spec text naming it, modules to
    --import): when fn is a top-level function of an importable module, a generated module that
    wraps it is imported, so the run's repro commands work in a new process too."""
    if len(spec_ops(spec_text)) > 1:
        raise DetfuzzError("a callable needs a spec of one op block")
    schema = schema_of_spec(spec_text)
    base = re.sub(r"\W", "_", getattr(fn, "__name__", "fn")).strip("_") or "fn"
    where = _importable(fn)
    key = f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', '')}|{schema}"
    if where is None:
        key += f"|{id(fn)}"
    name = f"detfuzz_py::{base}_{hashlib.sha1(key.encode()).hexdigest()[:8]}"
    lines = [line for line in spec_text.splitlines() if not (line.split()[:1] == ["op"])]
    spec_text = f"op {name}\n" + "\n".join(lines) + "\n"
    if where is None:
        register_callable(fn, name, schema)
        return name, spec_text, []
    root, module = where
    folder = os.path.join(tempfile.gettempdir(), f"detfuzz-{os.getuid()}", "wrapped")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, name.replace("::", "__") + ".py")
    text = (f"# Generated by detfuzz.fuzz: {module}.{fn.__qualname__} as the custom op {name}.\n"
            "import importlib\nimport sys\n\n"
            f"if {root!r} not in sys.path:\n    sys.path.insert(0, {root!r})\n"
            "from detfuzz._api import register_callable\n\n"
            f"register_callable(importlib.import_module({module!r}).{fn.__qualname__}, {name!r}, {schema!r})\n")
    if not os.path.isfile(path) or open(path).read() != text:
        with open(path + ".tmp", "w") as f:
            f.write(text)
        os.replace(path + ".tmp", path)
    return name, spec_text, [path]


# ---- the run --------------------------------------------------------------------------------

def _listish(v):
    if v is None:
        return None
    return v if isinstance(v, str) else ",".join(v)


def _run_capturing_stderr(argv):
    """Runs the CLI with fd 2 in a file (the C++ side writes there), then echoes it to sys.stderr."""
    from ._frontend import run_cli
    with tempfile.TemporaryFile(mode="w+b") as err:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(err.fileno(), 2)
        try:
            code = run_cli(argv)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        err.seek(0)
        text = err.read().decode(errors="replace")
    if text:
        sys.stderr.write(text)
    return code, text


def fuzz(fn_or_op, spec=None, budget="10s", properties=None, out=None, *, dtypes=None, backend="auto", seed=None,
         cases=None, imports=(), load=(), mode=None, stop_on_failure=False, shrink_budget=None, corpus=False,
         quiet=True, args=()):
    """Fuzzes one op and returns a FuzzResult.

    fn_or_op: an op name ("myns::my_mm"), torch.ops.myns.my_mm (or one overload), a
        torch.library.custom_op, or a plain Python callable, which is wrapped as a custom op for
        the run (its arguments are those of the spec, in order; it returns one tensor).
    spec: a spec file's path, or its text (grammar: properties/spec/op_spec.h); for a callable,
        one block, whose `op` line may be left out. None: the op's spec is already registered
        (aten's built-in specs, or given in `args`).
    budget: seconds, or "30s", "5m"; properties, dtypes: lists or comma-separated strings.
    out: the report folder (must not exist or be empty); default a new temporary folder.
    imports, load: modules to --import and kernel libraries to --load first; mode: --mode.
    args: further command-line arguments.
    Raises DetfuzzError when the run is refused (exit 2) with the CLI's one-line error.
    """
    argv = ["fuzz"]
    name = _op_name(fn_or_op)
    spec_files, imports = [], list(imports)
    if name is None:
        if not callable(fn_or_op):
            raise TypeError(f"detfuzz.fuzz: {fn_or_op!r} is neither an op nor a callable")
        if spec is None:
            raise DetfuzzError("a plain callable needs a spec (its arguments, sizes and where the batch is)")
        name, text, wrapper = _wrap_callable(fn_or_op, _spec_text(spec))
        imports = wrapper + imports
        spec = text
    else:
        # A custom op defined in an importable module: --import it too, so that repro commands
        # register the op in a new process (here the import is a no-op).
        where = _importable(getattr(fn_or_op, "_init_fn", None))
        if where is not None and where[1] not in imports:
            imports.append(where[1])
    if spec is not None:
        if isinstance(spec, os.PathLike) or (isinstance(spec, str) and "\n" not in spec and os.path.isfile(spec)):
            spec_files.append(os.fspath(spec))
        else:
            text = _spec_text(spec)
            folder = os.path.join(tempfile.gettempdir(), f"detfuzz-{os.getuid()}", "specs")
            os.makedirs(folder, exist_ok=True)
            path = os.path.join(folder, hashlib.sha1(text.encode()).hexdigest()[:16] + ".spec")
            if not os.path.isfile(path):
                with open(path + f".{os.getpid()}", "w") as f:
                    f.write(text)
                os.replace(path + f".{os.getpid()}", path)
            spec_files.append(path)
    if not _OP_NAME.match(name):
        raise DetfuzzError(f"'{name}' is not an op name (namespace::name[.overload])")
    out = os.fspath(out) if out is not None else tempfile.mkdtemp(prefix="detfuzz-")
    for m in imports:
        argv += ["--import", os.fspath(m)]
    for lib in load:
        argv += ["--load", os.fspath(lib)]
    for s in spec_files:
        argv += ["--spec", s]
    argv += ["--op", name, "--backend", backend, "--out", out,
             "--budget", f"{budget}s" if isinstance(budget, (int, float)) else str(budget)]
    if _listish(properties):
        argv += ["--property", _listish(properties)]
    if _listish(dtypes):
        argv += ["--dtype", _listish(dtypes)]
    if seed is not None:
        argv += ["--seed", str(seed)]
    if cases:
        argv += ["--cases", str(cases)]
    if mode:
        argv += ["--mode", mode]
    if shrink_budget is not None:
        argv += ["--shrink-budget", f"{shrink_budget}s" if isinstance(shrink_budget, (int, float)) else str(shrink_budget)]
    if stop_on_failure:
        argv.append("--stop-on-failure")
    if not corpus:
        argv.append("--no-corpus")
    if quiet:
        argv.append("--quiet")
    argv += [os.fspath(a) for a in args]

    import torch._dynamo  # noqa: F401  (a custom op's first call imports it: not inside the first case)
    code, err = _run_capturing_stderr(argv)
    if code == 2 or not os.path.isfile(os.path.join(out, "summary.json")):
        lines = [line for line in err.splitlines() if line.strip()]
        message = lines[-1] if lines else f"detfuzz exited {code} without a report"
        raise DetfuzzError(message[len("detfuzz: error: "):] if message.startswith("detfuzz: error: ") else message)
    return _read_result(code, out, _replay_options(imports, load, spec_files, mode))


def _replay_options(imports, load, specs, mode):
    """The options a repro command carries (as harness/main.cpp's set_replay_options_from)."""
    opts = []
    for m in imports:
        opts += ["--import", os.fspath(m)]
    for lib in load:
        opts += ["--load", os.fspath(lib)]
    for s in specs:
        opts += ["--spec", s]
    if mode and mode != "native":
        opts += ["--mode", mode]
    return opts


def repro_command(record, options):
    from ._frontend import program_name
    return " ".join([program_name(), "replay", "--case", shlex.quote(record)] + [shlex.quote(o) for o in options])


def _read_result(code, out, options):
    with open(os.path.join(out, "summary.json")) as f:
        summary = json.load(f)
    results = summary.get("results", {})
    targets, failures = [], []
    for t in results.get("targets", []):
        minimal = None
        if t.get("minimal"):
            fields = record_fields(t["minimal"])
            minimal = Failure(op=fields["op"], impl=fields["impl"], property=fields["property"], backend=fields["backend"],
                              dtype=fields["dtype"], shape=fields["shape"], outcome=fields["outcome"], detail=fields["detail"],
                              expectation=t.get("expectation", ""), record=t["minimal"],
                              repro=repro_command(t["minimal"], options))
            failures.append(minimal)
        targets.append(TargetResult(op=t["op"], impl=t["impl"], property=t["property"], backend=t["backend"],
                                    dtype=t["dtype"], expectation=t["expectation"], cases=t.get("cases", 0),
                                    failures=t.get("failures", 0), errors=t.get("errors", 0),
                                    cases_per_s=t.get("cases_per_s", 0.0), minimal=minimal))
    failures.sort(key=lambda f: f.expectation != "must-hold")
    return FuzzResult(exit_code=code, out=out, cases=results.get("cases", 0), elapsed_s=results.get("elapsed_s", 0.0),
                      targets=targets, failures=failures, summary=summary)


def check(fn_or_op, spec=None, budget="10s", properties=None, out=None, **kwargs):
    """detfuzz.fuzz with stop_on_failure; raises AssertionError when a must-hold property failed,
    its message the shrunk record(s) and the repro command(s). Returns the FuzzResult otherwise."""
    kwargs.setdefault("stop_on_failure", True)
    result = fuzz(fn_or_op, spec, budget, properties, out, **kwargs)
    if not result.passed:
        bad = result.must_hold_failures or result.failures
        lines = [f"detfuzz: a must-hold property failed ({result.cases} cases; report: {result.out})"]
        lines += [str(f) for f in bad] if bad else ["  (no shrunk record in summary.json: see the report)"]
        raise AssertionError("\n".join(lines))
    return result
