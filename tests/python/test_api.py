"""The Python API on the CPU: detfuzz.fuzz / detfuzz.check on custom ops and plain callables,
errors, and the batch-invariant mode API (run by tests/python/test_frontend.sh)."""
import os
import re
import threading
import time

import pytest
import torch

import detfuzz
import planted_ops

SPEC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "planted_ops.spec")
MM_SPEC = """
arg    a tensor [M, K] batch=0
arg    b tensor [K, N]
out    [M, N] batch=0
sizes  M=1..64 N=1..32 K=1..64
dtypes float32
"""


def batch_of(failure):
    """The batch of a shrunk record: "a batch of N" (batch_compose composes rows into one) or M."""
    m = re.search(r"a batch of (\d+)", failure.detail)
    return int(m.group(1)) if m else int(failure.shape.split("x")[0])


def test_custom_op_planted_is_caught_and_shrunk(tmp_path):
    result = detfuzz.fuzz(planted_ops.splitk_mm, spec=SPEC, budget=60, seed=3, backend="cpu", stop_on_failure=True,
                          out=tmp_path / "r")
    assert not result.passed and result.exit_code == 1
    failure = result.must_hold_failures[0]
    assert failure.op == "detfuzz_py_test::splitk_mm"
    assert batch_of(failure) == 17, failure
    assert "replay --case" in failure.repro and "--spec" in failure.repro
    assert os.path.isfile(tmp_path / "r" / "failures.csv")


def test_custom_op_correct_holds():
    result = detfuzz.check(torch.ops.detfuzz_py_test.rowwise_mm, spec=SPEC, budget=5, seed=4, backend="cpu")
    assert result.passed and result.cases > 0 and not result.failures
    assert {t.property for t in result.targets} >= {"batch_slice", "batch_compose", "repeat"}


def test_check_raises_with_record_and_repro():
    with pytest.raises(AssertionError) as e:
        detfuzz.check("detfuzz_py_test::splitk_mm", spec=SPEC, budget=60, seed=5, backend="cpu", dtypes="float32")
    message = str(e.value)
    assert "record: detfuzz_py_test::splitk_mm,torch," in message
    assert re.search(r"a batch of 17\b|,17x", message), message
    assert "repro: " in message and "replay --case" in message


def test_plain_callable_is_wrapped(tmp_path):
    result = detfuzz.fuzz(planted_ops.splitk_mm_plain, spec=MM_SPEC, budget=60, seed=6, backend="cpu",
                          stop_on_failure=True)
    assert not result.passed
    failure = result.must_hold_failures[0]
    assert failure.op.startswith("detfuzz_py::splitk_mm_plain_") and batch_of(failure) == 17
    assert "--import" in failure.repro  # the generated module that wraps it, so the repro runs anywhere
    assert detfuzz.check(planted_ops.rowwise_mm_plain, spec=MM_SPEC, budget=3, seed=7, backend="cpu").passed


def test_lambda_is_wrapped_in_process():
    result = detfuzz.fuzz(lambda a, b: planted_ops.rowwise_mm_plain(a, b), spec=MM_SPEC, budget=3, seed=8, backend="cpu")
    assert result.passed and result.cases > 0


def test_errors_are_detfuzz_errors():
    with pytest.raises(detfuzz.DetfuzzError, match="not_an_op"):
        detfuzz.fuzz("detfuzz_py_test::not_an_op", spec="op detfuzz_py_test::not_an_op\n" + MM_SPEC, budget=1, backend="cpu")
    with pytest.raises(detfuzz.DetfuzzError, match="no_such_module"):
        detfuzz.fuzz(planted_ops.rowwise_mm, spec=SPEC, budget=1, backend="cpu", imports=["no_such_module"])
    with pytest.raises(detfuzz.DetfuzzError, match="needs a spec"):
        detfuzz.fuzz(lambda a: a, budget=1)


def test_main_runs_the_cli(tmp_path, capfd):
    code = detfuzz.main(["fuzz", "--spec", SPEC, "--op", "detfuzz_py_test::rowwise_mm", "--backend", "cpu", "--no-corpus",
                         "--cases", "20", "--budget", "30s", "--quiet", "--out", str(tmp_path / "m")])
    assert code == 0
    assert "every must-hold property held" in capfd.readouterr().out
    assert detfuzz.main(["list", "nonsense"]) == 2


def test_batch_invariant_mode_api():
    assert not detfuzz.is_batch_invariant_mode_enabled()
    with detfuzz.set_batch_invariant_mode(True):
        assert detfuzz.is_batch_invariant_mode_enabled()
        a, b = torch.randn(33, 64), torch.randn(64, 16)
        assert torch.equal(torch.mm(a, b)[:1], torch.mm(a[:1], b))
        with detfuzz.set_batch_invariant_mode(False):
            assert not detfuzz.is_batch_invariant_mode_enabled()
        assert detfuzz.is_batch_invariant_mode_enabled()
    assert not detfuzz.is_batch_invariant_mode_enabled()
    detfuzz.enable_batch_invariant_mode()
    detfuzz.disable_batch_invariant_mode()
    assert not detfuzz.is_batch_invariant_mode_enabled()


def test_gil_is_released_while_the_engine_runs(tmp_path):
    """A Python thread keeps running while a campaign of a C++ impl runs in another."""
    done = threading.Event()
    codes = []

    def run():
        codes.append(detfuzz.main(["fuzz", "--op", "mm", "--impl", "invariant", "--backend", "cpu", "--no-corpus", "--quiet",
                                   "--budget", "2s", "--out", str(tmp_path / "gil")]))
        done.set()

    thread = threading.Thread(target=run)
    thread.start()
    ticks = 0
    while not done.is_set():
        ticks += 1
        time.sleep(0.001)
    thread.join()
    assert codes == [0]
    assert ticks > 200, f"the main thread ran {ticks} times in 2 s: the GIL was held"
