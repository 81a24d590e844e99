"""liger-kernel's Triton ops (PyPI: liger-kernel) behind torch.library custom ops, so that detfuzz
fuzzes them like any other op (ci/gpu-check python-kernels; liger_ops.spec says where the batch is):

    python -m detfuzz fuzz --import tests/python/third_party/liger_ops.py \
        --spec tests/python/third_party/liger_ops.spec --backend cuda --op detfuzz_liger::rms_norm

Each op calls liger's public functional API (liger_kernel.transformers.functional) with its
defaults, forward only. Inputs are cloned first: some of liger's kernels write into their inputs.
Where liger needs what a spec cannot say (an index in range, the top-k of a router), the adapter
derives it from the case's own row data, so a row's inputs stay the same alone and in a batch:
    cross_entropy, fused_linear_cross_entropy: target = the spec's int64 row value mod V;
    fused_moe: each token's top-2 experts and softmax weights from its router logits row.
"""
import torch
from liger_kernel.ops.fused_moe import LigerFusedMoEFunction
from liger_kernel.transformers import functional as F

NS = "detfuzz_liger"
EPS = 1e-6


@torch.library.custom_op(f"{NS}::rms_norm", mutates_args=())
def rms_norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return F.liger_rms_norm(x.clone(), w, EPS)


# The same op under a second name whose spec draws up to 40000 rows of at most 256 columns:
# liger switches to a 16-rows-per-program kernel at 32768 rows when a row fits 256 columns.
@torch.library.custom_op(f"{NS}::rms_norm_tall", mutates_args=())
def rms_norm_tall(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return F.liger_rms_norm(x.clone(), w, EPS)


@torch.library.custom_op(f"{NS}::layer_norm", mutates_args=())
def layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.liger_layer_norm(x.clone(), w, b, EPS)


@torch.library.custom_op(f"{NS}::softmax", mutates_args=())
def softmax(x: torch.Tensor) -> torch.Tensor:
    return F.liger_softmax(x.clone())


@torch.library.custom_op(f"{NS}::swiglu", mutates_args=())
def swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.liger_swiglu(a.clone(), b.clone())


@torch.library.custom_op(f"{NS}::geglu", mutates_args=())
def geglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.liger_geglu(a.clone(), b.clone())


@torch.library.custom_op(f"{NS}::rope", mutates_args=())
def rope(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """q [B, H, S, D], k [B, KH, S, D], cos/sin [1, S, D]; returns q and k rotated, each row of the
    batch flattened and concatenated: [B, (H + KH) * S * D'], D' = D rounded down to even (rope
    rotates pairs; the adapter drops an odd last column)."""
    d = q.shape[-1] // 2 * 2
    qr, kr = F.liger_rope(q[..., :d].clone(), k[..., :d].clone(), cos[..., :d].contiguous(), sin[..., :d].contiguous())
    return torch.cat([qr.reshape(qr.shape[0], -1), kr.reshape(kr.shape[0], -1)], dim=1)


def _targets(target, vocab):
    return target.remainder(vocab).to(torch.int64)


@torch.library.custom_op(f"{NS}::cross_entropy", mutates_args=())
def cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per-row loss (reduction none), [B] in float32."""
    loss = F.liger_cross_entropy(logits.clone(), _targets(target, logits.shape[1]), reduction="none")
    return loss.float()


@torch.library.custom_op(f"{NS}::fused_linear_cross_entropy", mutates_args=())
def fused_linear_cross_entropy(x: torch.Tensor, weight: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per-row loss of x @ weight.T against target (reduction none), [B] in float32."""
    loss = F.liger_fused_linear_cross_entropy(x.clone(), weight, _targets(target, weight.shape[0]), reduction="none")
    return loss.float()


TOP_K = 2


@torch.library.custom_op(f"{NS}::fused_moe", mutates_args=())
def fused_moe(x: torch.Tensor, router_logits: torch.Tensor, gate: torch.Tensor, up: torch.Tensor,
              down: torch.Tensor) -> torch.Tensor:
    """x [T, H], router_logits [T, E], gate and up [E, I, H], down [E, H, I] -> [T, H]; liger takes
    gate and up stacked, [E, 2I, H]. Routing is the top-2 of each token's logits (torch.topk on its
    own row), the weights their softmax."""
    top_w, top_i = torch.topk(router_logits.float(), TOP_K, dim=1)
    top_w = torch.softmax(top_w, dim=1).to(x.dtype)
    gate_up = torch.cat([gate, up], dim=1).contiguous()
    return LigerFusedMoEFunction.apply(x.clone(), gate_up, down, top_i.to(torch.int32), top_w)
