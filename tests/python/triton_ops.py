"""Triton row ops for `ci/gpu-check python`, registered with torch.library.custom_op when this
module is imported (detfuzz fuzz --import triton_ops --spec tests/python/triton_ops.spec):

    detfuzz_triton_test::rowwise_mm(Tensor a, Tensor b) -> Tensor
        correct and batch invariant: one program per (row, block of N columns) sums its K products
        in one fixed order (k = 0, 1, ...) in float32, whatever the row count.
    detfuzz_triton_test::splitk_mm(Tensor a, Tensor b) -> Tensor
        planted bug: above 16 rows the kernel sums K in two halves and adds them, so a row's bits
        depend on how many rows came with it. detfuzz must catch it and shrink it to 17 rows.

CUDA tensors only (the kernels are Triton's); inputs of any strides, float32, float16, bfloat16.
"""
import torch
import triton
import triton.language as tl

SPLIT_K_ABOVE_ROWS = 16
BLOCK_N = 32


# Sizes and strides are not specialised (Triton would compile a variant for each pattern of
# values divisible by 16 or equal to 1): one compiled kernel per dtype and split serves every case.
@triton.jit(do_not_specialize=["N", "K", "sam", "sak", "sbk", "sbn", "scm", "scn"])
def _row_mm_kernel(a_ptr, b_ptr, c_ptr, N, K, sam, sak, sbk, sbn, scm, scn, SPLIT: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < N
    lo = tl.zeros([BLOCK], dtype=tl.float32)
    hi = tl.zeros([BLOCK], dtype=tl.float32)
    if SPLIT:
        half = K // 2
    else:
        half = K
    for k in range(0, half):
        a = tl.load(a_ptr + row * sam + k * sak).to(tl.float32)
        b = tl.load(b_ptr + k * sbk + cols * sbn, mask=mask, other=0.0).to(tl.float32)
        lo += a * b
    for k in range(half, K):
        a = tl.load(a_ptr + row * sam + k * sak).to(tl.float32)
        b = tl.load(b_ptr + k * sbk + cols * sbn, mask=mask, other=0.0).to(tl.float32)
        hi += a * b
    if SPLIT:
        acc = lo + hi
    else:
        acc = lo
    tl.store(c_ptr + row * scm + cols * scn, acc.to(c_ptr.dtype.element_ty), mask=mask)


def _row_mm(a, b, split):
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"shapes {tuple(a.shape)} and {tuple(b.shape)} cannot be multiplied")
    if not a.is_cuda:
        raise ValueError("triton row ops run on CUDA tensors only")
    m, k = a.shape
    n = b.shape[1]
    c = torch.empty(m, n, dtype=a.dtype, device=a.device)
    if m == 0 or n == 0:
        return c
    grid = (m, triton.cdiv(n, BLOCK_N))
    _row_mm_kernel[grid](a, b, c, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                         SPLIT=split, BLOCK=BLOCK_N)
    return c


@torch.library.custom_op("detfuzz_triton_test::rowwise_mm", mutates_args=())
def rowwise_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _row_mm(a, b, split=False)


@torch.library.custom_op("detfuzz_triton_test::splitk_mm", mutates_args=())
def splitk_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _row_mm(a, b, split=a.shape[0] > SPLIT_K_ABOVE_ROWS)
