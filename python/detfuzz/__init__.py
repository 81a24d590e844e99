"""detfuzz: bitwise determinism fuzzing of inference kernels, from Python.

    detfuzz.main(["fuzz", "--import", "my_ops", "--spec", "my_ops.spec", "--budget", "30s"])  # the CLI
    result = detfuzz.fuzz(my_ops.rowwise_mm, spec="my_ops.spec", budget="10s")            # a FuzzResult
    detfuzz.check(torch.ops.my_ns.rowwise_mm, spec="my_ops.spec")                          # raises AssertionError

Ops are torch.library operators (custom_op, Library(...).impl, C++ TORCH_LIBRARY) described by a
spec file (grammar: properties/spec/op_spec.h); a plain callable is wrapped as a custom op.
The batch-invariant mode of detfuzz's own kernels: enable_batch_invariant_mode,
disable_batch_invariant_mode, set_batch_invariant_mode (a context manager) and
is_batch_invariant_mode_enabled.
"""
import contextlib

# Light on import (the pytest plugin imports this package): torch and the extension load on first use.
from ._api import DetfuzzError, Failure, FuzzResult, TargetResult, check, fuzz, record_fields

__version__ = "0.1.0"
__all__ = ["main", "fuzz", "check", "record_fields", "DetfuzzError", "FuzzResult", "TargetResult", "Failure", "enable_batch_invariant_mode",
           "disable_batch_invariant_mode", "set_batch_invariant_mode", "is_batch_invariant_mode_enabled"]


def main(argv=None):
    """Runs the detfuzz command line (argv without the program name; default sys.argv[1:]) in this
    process, the GIL released while it runs; returns the exit code: 0 every must-hold property
    held, 1 one failed, 2 usage or environment error."""
    import sys
    from ._frontend import run_cli
    return run_cli(sys.argv[1:] if argv is None else list(argv))


def _ext():
    from ._frontend import _detfuzz
    return _detfuzz


def enable_batch_invariant_mode():
    """libtorch's dispatcher runs detfuzz's batch-invariant kernels for aten mm, addmm, bmm,
    baddbmm, _log_softmax and mean.dim (idempotent)."""
    _ext().enable_batch_invariant_mode()


def disable_batch_invariant_mode():
    """libtorch's own kernels again (idempotent)."""
    _ext().disable_batch_invariant_mode()


def is_batch_invariant_mode_enabled():
    return _ext().is_batch_invariant_mode_enabled()


@contextlib.contextmanager
def set_batch_invariant_mode(enabled=True):
    """Sets the mode for the block, then restores the state it found."""
    previous = is_batch_invariant_mode_enabled()
    (enable_batch_invariant_mode if enabled else disable_batch_invariant_mode)()
    try:
        yield
    finally:
        (enable_batch_invariant_mode if previous else disable_batch_invariant_mode)()
