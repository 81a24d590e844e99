"""FlashAttention-4's forward (flash-attn-4 on the CuTe DSL: `flash_attn.cute.flash_attn_varlen_func`)
as an impl of detfuzz's paged_attention op, so that the attention properties (seq_alone_vs_batched,
block_placement, chunked_prefill, decode_vs_prefill, repeat, accuracy) run on it
(ci/gpu-check python-kernels with DETFUZZ_KERNELS=fa4, after ci/fa4-wheels install):

    python -m detfuzz fuzz --import tests/python/third_party/fa4_ops.py --backend cuda \
        --op paged_attention --impl detfuzz_fa4::paged_attention --dtype bfloat16

The op calls FlashAttention-4 the way an engine with a paged cache does: q [T_q, H_q, D] packed by
cu_seqlens_q, the K/V pools as they are ([pages, page_size, H_kv, D] is its paged layout), the block
table as its page_table, seq_lens_kv as seqused_k, causal (aligned bottom-right, as detfuzz's).
Everything else is FlashAttention-4's default, its split count and GQA packing included.
"""
import torch
from flash_attn.cute import flash_attn_varlen_func

NS = "detfuzz_fa4"


@torch.library.custom_op(f"{NS}::paged_attention", mutates_args=())
def paged_attention(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, cu_seqlens_q: torch.Tensor,
                    seq_lens_kv: torch.Tensor, block_table: torch.Tensor, scale: float) -> torch.Tensor:
    if q.dtype != k_pool.dtype:
        raise ValueError(f"q is {q.dtype} but the pools are {k_pool.dtype}")
    q_lens = cu_seqlens_q[1:] - cu_seqlens_q[:-1]
    max_q = int(q_lens.max().item()) if q_lens.numel() else 0
    out = flash_attn_varlen_func(q, k_pool, v_pool, cu_seqlens_q=cu_seqlens_q.to(torch.int32), max_seqlen_q=max_q,
                                 seqused_k=seq_lens_kv.to(torch.int32),
                                 page_table=block_table.to(torch.int32).contiguous(),
                                 softmax_scale=scale if scale > 0 else q.shape[-1] ** -0.5, causal=True)
    return (out[0] if isinstance(out, tuple) else out).contiguous()
