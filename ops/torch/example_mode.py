"""Batch-invariant mode from Python: load libdetfuzz_torch.so and switch libtorch's dispatcher to
detfuzz's kernels for mm/addmm/bmm/baddbmm/_log_softmax/mean.dim (CUDA if available, else CPU).

    python3 ops/torch/example_mode.py [path/to/libdetfuzz_torch.so]

Checks bit for bit that torch.mm(a[:1], b) == torch.mm(a, b)[:1] with the mode on, and shows
libtorch's own kernels disagreeing with themselves with it off. Exit 0 when the mode held.
"""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_LIB = os.path.join(HERE, "..", "..", "build", "ops", "torch", "libdetfuzz_torch.so")


def row0_differs(a, b):
    """Whether row 0 of the M-row product and the 1-row product differ in any bit."""
    alone, batched = torch.mm(a[:1], b), torch.mm(a, b)[:1]
    # Bitwise: compare the bit patterns, never allclose (and NaN == NaN here only if same bits).
    as_int = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}[a.dtype]
    return not torch.equal(alone.view(as_int), batched.view(as_int))


def main():
    lib = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_LIB
    torch.ops.load_library(lib)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    ops = torch.ops.detfuzz
    # Layer shapes (K, N) and batch sizes M; values from a seeded generator, never zeros.
    gen = torch.Generator().manual_seed(0)
    shapes = [(12, 2), (512, 1024), (1024, 512), (4096, 1024)]
    ms = [2, 4, 8, 16, 33, 64, 128]
    cases = []
    for dtype in (torch.float32, torch.bfloat16):
        for k, n in shapes:
            b = torch.randn(k, n, generator=gen).to(device=device, dtype=dtype)
            for m in ms:
                a = torch.randn(m, k, generator=gen).to(device=device, dtype=dtype)
                cases.append((dtype, m, k, n, a, b))

    ops.disable_batch_invariant_mode()
    native = sum(row0_differs(a, b) for _, _, _, _, a, b in cases)
    print(f"{device}: mode off (libtorch's kernels): row 0 alone vs in the batch differs in {native}/{len(cases)} (M, K, N, dtype) cases")

    ops.enable_batch_invariant_mode()
    assert ops.is_batch_invariant_mode_enabled()
    ours = [(dtype, m, k, n) for dtype, m, k, n, a, b in cases if row0_differs(a, b)]
    print(f"{device}: mode on (detfuzz's kernels):   row 0 alone vs in the batch differs in {len(ours)}/{len(cases)} cases")
    for c in ours:
        print("  differs:", c)
    ops.disable_batch_invariant_mode()
    assert not ops.is_batch_invariant_mode_enabled()
    return 1 if ours else 0


if __name__ == "__main__":
    sys.exit(main())
