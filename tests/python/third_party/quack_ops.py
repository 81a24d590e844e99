"""quack's CuTe DSL kernels (PyPI: quack-kernels, installed with FlashAttention-4 by ci/fa4-wheels)
behind torch.library custom ops, so that detfuzz fuzzes them like any other op (ci/gpu-check
python-kernels with DETFUZZ_KERNELS=quack; quack_ops.spec says where the batch is):

    python -m detfuzz fuzz --import tests/python/third_party/quack_ops.py \
        --spec tests/python/third_party/quack_ops.spec --backend cuda --op detfuzz_quack::rms_norm

Each op calls quack's public forward with its defaults. quack compiles a kernel per row length N
(and dtype), with the batch symbolic, so the spec fixes N per op: a campaign then compiles a few
kernels instead of one per case. The `_wide` ops take an N at which quack splits a row over a
cluster of CTAs on Hopper. gemm runs quack's un-tuned path (`tuned=False`: one config for every
shape); its default, `tuned=True`, benchmarks every config at each new shape, minutes a case.
Where quack needs what a spec cannot say (a target index in range), the adapter derives it from
the case's own row data, so a row's inputs stay the same alone and in a batch. quack rejects a
tensor whose data is not 16-byte aligned (ValueError: Misaligned Tensor data), which detfuzz's
views at odd offsets are: the adapter hands it an aligned copy of such a tensor (the same values).
"""
import torch
from quack.cross_entropy import cross_entropy as quack_cross_entropy
from quack.gemm_interface import gemm as quack_gemm
from quack.rmsnorm import layernorm_fwd, rmsnorm
from quack.softmax import softmax as quack_softmax

NS = "detfuzz_quack"
EPS = 1e-6


def _aligned(t):
    """t as quack takes it: contiguous, its data 16-byte aligned (a fresh copy where it is not)."""
    return t if t.is_contiguous() and t.data_ptr() % 16 == 0 else t.clone(memory_format=torch.contiguous_format)


@torch.library.custom_op(f"{NS}::rms_norm", mutates_args=())
def rms_norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return rmsnorm(_aligned(x), _aligned(w), eps=EPS)


# The same op under a second name whose spec fixes a row long enough for a cluster of CTAs.
@torch.library.custom_op(f"{NS}::rms_norm_wide", mutates_args=())
def rms_norm_wide(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return rmsnorm(_aligned(x), _aligned(w), eps=EPS)


@torch.library.custom_op(f"{NS}::rms_norm_residual", mutates_args=())
def rms_norm_residual(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The pre-norm form: (rmsnorm(x + r), x + r) side by side, [B, 2N]."""
    out, res_out = rmsnorm(_aligned(x), _aligned(w), residual=_aligned(r), eps=EPS, prenorm=True)
    return torch.cat([out, res_out.to(out.dtype)], dim=1)


@torch.library.custom_op(f"{NS}::layer_norm", mutates_args=())
def layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return layernorm_fwd(_aligned(x), _aligned(w.float()), _aligned(b.float()), EPS)


@torch.library.custom_op(f"{NS}::softmax", mutates_args=())
def softmax(x: torch.Tensor) -> torch.Tensor:
    return quack_softmax(_aligned(x))


@torch.library.custom_op(f"{NS}::softmax_wide", mutates_args=())
def softmax_wide(x: torch.Tensor) -> torch.Tensor:
    return quack_softmax(_aligned(x))


def _cross_entropy(logits, target):
    loss = quack_cross_entropy(_aligned(logits), target.remainder(logits.shape[1]).to(torch.int64),
                               reduction="none")
    return loss.float()


@torch.library.custom_op(f"{NS}::cross_entropy", mutates_args=())
def cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per-row loss (reduction none), [B] in float32; target = the spec's int64 row value mod V."""
    return _cross_entropy(logits, target)


@torch.library.custom_op(f"{NS}::cross_entropy_wide", mutates_args=())
def cross_entropy_wide(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return _cross_entropy(logits, target)


@torch.library.custom_op(f"{NS}::gemm", mutates_args=())
def gemm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a [M, K] @ b [K, N] on quack's Hopper GEMM, un-tuned (one config whatever the shape)."""
    return quack_gemm(_aligned(a), _aligned(b), tuned=False)


if __name__ == "__main__":
    # A smoke run of every op on one small case each (python3 quack_ops.py): an API change in
    # quack shows up here as a traceback before a campaign spends its budget.
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(0)

    def rand(*shape, dtype=torch.bfloat16):
        return torch.randn(*shape, device=dev, dtype=dtype, generator=g)

    x, w, b = rand(3, 4096), rand(4096), rand(1024, 512)
    checks = {
        "rms_norm": (rms_norm(x, w), torch.nn.functional.rms_norm(x.float(), (4096,), w.float(), EPS)),
        "rms_norm_residual": (rms_norm_residual(x, x, w)[:, :4096],
                              torch.nn.functional.rms_norm(2 * x.float(), (4096,), w.float(), EPS)),
        "layer_norm": (layer_norm(x, w, w),
                       torch.nn.functional.layer_norm(x.float(), (4096,), w.float(), w.float(), EPS)),
        "softmax": (softmax(x), torch.softmax(x.float(), dim=1)),
        "cross_entropy": (cross_entropy(x, torch.tensor([1, 2, 3], device=dev)),
                          torch.nn.functional.cross_entropy(x.float(), torch.tensor([1, 2, 3], device=dev),
                                                            reduction="none")),
        "gemm": (gemm(x[:, :1024], b), x[:, :1024].float() @ b.float()),
    }
    for name, (got, ref) in checks.items():
        err = (got.float() - ref).abs().max().item()
        print(f"{name}: {tuple(got.shape)} {got.dtype}, max |error| against torch {err:.3g}")
