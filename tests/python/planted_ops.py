"""Python custom ops for detfuzz's front end (tests/python/test_frontend.sh), registered with
torch.library.custom_op when this module is imported (detfuzz fuzz --import planted_ops):

    detfuzz_py_test::rowwise_mm(Tensor a, Tensor b) -> Tensor
        correct and batch invariant: every output element sums its K products in one fixed order
        (k = 0, 1, ...) in float32 (float64 for float64), whatever the row count.
    detfuzz_py_test::splitk_mm(Tensor a, Tensor b) -> Tensor
        planted bug: above 16 rows it sums K in two halves and adds them, so a row's bits depend
        on how many rows came with it. detfuzz must catch it and shrink it to 17 rows.
    detfuzz_py_test::raising_mm(Tensor a, Tensor b) -> Tensor
        raises ValueError above 8 rows: each such case is an `error` with the exception's text.

The sums run over k as whole-matrix float32 multiplies and adds (elementwise, so each element's
rounding is IEEE's and does not depend on the batch or on vectorisation).
"""
import torch

SPLIT_K_ABOVE_ROWS = 16


def _fixed_order_mm(a, b, split):
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"shapes {tuple(a.shape)} and {tuple(b.shape)} cannot be multiplied")
    acc_dtype = torch.float64 if a.dtype == torch.float64 else torch.float32
    af, bf = a.to(acc_dtype), b.to(acc_dtype)
    m, k = af.shape
    n = bf.shape[1]

    def partial(lo, hi):
        acc = torch.zeros(m, n, dtype=acc_dtype, device=a.device)
        for p in range(lo, hi):
            acc = acc + af[:, p:p + 1] * bf[p:p + 1, :]
        return acc

    out = partial(0, k // 2) + partial(k // 2, k) if split else partial(0, k)
    # One canonical NaN: a NaN's payload would otherwise depend on where the float->half
    # conversion meets it (as in tests/plugins/example_kernels.cpp).
    out = torch.where(torch.isnan(out), torch.full_like(out, float("nan")), out)
    return out.to(a.dtype)


@torch.library.custom_op("detfuzz_py_test::rowwise_mm", mutates_args=())
def rowwise_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _fixed_order_mm(a, b, split=False)


@torch.library.custom_op("detfuzz_py_test::splitk_mm", mutates_args=())
def splitk_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _fixed_order_mm(a, b, split=a.shape[0] > SPLIT_K_ABOVE_ROWS)


@torch.library.custom_op("detfuzz_py_test::raising_mm", mutates_args=())
def raising_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.shape[0] > 8:
        raise ValueError(f"raising_mm: {a.shape[0]} rows is more than 8")
    return _fixed_order_mm(a, b, split=False)


def rowwise_mm_plain(a, b):
    """The correct op as a plain function (detfuzz.fuzz wraps it as a custom op)."""
    return _fixed_order_mm(a, b, split=False)


def splitk_mm_plain(a, b):
    """The planted op as a plain function."""
    return _fixed_order_mm(a, b, split=a.shape[0] > SPLIT_K_ABOVE_ROWS)


# A user's Python mode (--mode planted_ops:enable_mode): overrides aten::mm on the CPU with a
# fixed-order float32 matmul that stays batch invariant, as the seed's enable_batch_invariant_mode
# does with its Triton kernels.
_mode_lib = None


def _invariant_mm(a, b):
    return _fixed_order_mm(a, b, split=False)


def enable_mode():
    global _mode_lib
    if _mode_lib is None:
        _mode_lib = torch.library.Library("aten", "IMPL")
        _mode_lib.impl("mm", _invariant_mm, "CPU")


def enable_planted_mode():
    """A planted mode: its aten::mm splits K above 16 rows (detfuzz must catch it under the mode)."""
    global _mode_lib
    if _mode_lib is None:
        _mode_lib = torch.library.Library("aten", "IMPL")
        _mode_lib.impl("mm", lambda a, b: _fixed_order_mm(a, b, split=a.shape[0] > SPLIT_K_ABOVE_ROWS), "CPU")


def disable_mode():
    global _mode_lib
    if _mode_lib is not None:
        _mode_lib._destroy()
        _mode_lib = None
