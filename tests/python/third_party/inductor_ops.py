"""What torch.compile (Inductor, Triton) generates for three blocks, behind torch.library custom
ops so that detfuzz fuzzes them (ci/gpu-check python-kernels; inductor_ops.spec):

    detfuzz_inductor::rms_norm(x [B, N], w [N])           x * rsqrt(mean(x^2) + eps) * w
    detfuzz_inductor::softmax(x [B, N])                    softmax over the last dim
    detfuzz_inductor::mlp(x [B, H], gate/up [I, H], down [H, I])   down(silu(gate x) * up x)

Each is compiled with dynamic=True (one graph for every size where Inductor can; it still
specialises sizes 0 and 1 and recompiles where a guard fails) and the default mode. The batch is
dim 0. Compilation happens inside a case the first time a new guard is met, so cases/s counts it.
"""
import torch

NS = "detfuzz_inductor"
EPS = 1e-6


def _rms_norm(x, w):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype) * w


def _softmax(x):
    return torch.softmax(x, dim=-1)


def _mlp(x, gate, up, down):
    return torch.nn.functional.linear(torch.nn.functional.silu(x @ gate.T) * (x @ up.T), down)


_compiled_rms_norm = torch.compile(_rms_norm, dynamic=True)
_compiled_softmax = torch.compile(_softmax, dynamic=True)
_compiled_mlp = torch.compile(_mlp, dynamic=True)


@torch.library.custom_op(f"{NS}::rms_norm", mutates_args=())
def rms_norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return _compiled_rms_norm(x, w).clone()


@torch.library.custom_op(f"{NS}::softmax", mutates_args=())
def softmax(x: torch.Tensor) -> torch.Tensor:
    return _compiled_softmax(x).clone()


@torch.library.custom_op(f"{NS}::mlp", mutates_args=())
def mlp(x: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, down: torch.Tensor) -> torch.Tensor:
    return _compiled_mlp(x, gate, up, down).clone()
