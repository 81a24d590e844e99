"""Python paged attention kernels for detfuzz's front end (tests/python/test_frontend.sh), named as
impls of the paged_attention op (detfuzz fuzz --import paged_ops --op paged_attention --impl NS::name):

    detfuzz_py_test::paged_attention(q, k_pool, v_pool, cu_seqlens_q, seq_lens_kv, block_table, scale)
        correct and batch invariant: each sequence alone, every sum in one fixed order.
    detfuzz_py_test::paged_attention_batched_p
        planted bug: in a batch of more than one sequence it rounds the softmax probabilities to the
        input dtype before P @ V (as a kernel that stages P in shared memory might), so a sequence's
        bits depend on whether it came alone. detfuzz must catch it and shrink it to two sequences.

Every product and sum is an elementwise float32 operation over whole tensors, in a fixed order (d,
then key position); the softmax denominator is a cumulative sum (sequential on the CPU), so no
row's result depends on how many rows or keys came with it. Masked keys add exact zeros; exp runs
in float64 and is rounded once to float32.
"""
import torch


def _sequence(q, k, v, scale, round_p):
    """q [ql, H, D], k and v [kl, H, D] (float32, GQA already expanded) -> [ql, H, D] float32."""
    ql, kl = q.shape[0], k.shape[0]
    scores = torch.zeros(ql, kl, q.shape[1])
    for d in range(q.shape[2]):
        scores = scores + q[:, None, :, d] * k[None, :, :, d]
    scores = scores * scale
    visible = torch.arange(kl)[None, :] <= torch.arange(ql)[:, None] + (kl - ql)
    scores = torch.where(visible[:, :, None], scores, torch.full_like(scores, float("-inf")))
    # exp in float64, rounded to float32: a vectorised and a scalar float32 exp may differ in the last
    # bit, and which one an element meets depends on where it falls in the tensor.
    p = torch.exp((scores - scores.amax(dim=1, keepdim=True)).double()).float()
    p = p / torch.cumsum(p, dim=1)[:, -1:, :]
    if round_p is not None:
        p = p.to(round_p).to(torch.float32)
    out = torch.zeros(ql, q.shape[1], q.shape[2])
    for j in range(kl):
        out = out + p[:, j, :, None] * v[None, j]
    return out


def _paged_attention(q, k_pool, v_pool, cu_seqlens_q, seq_lens_kv, block_table, scale, planted):
    page, h_kv = k_pool.shape[1], k_pool.shape[2]
    group = q.shape[1] // h_kv
    batched = seq_lens_kv.numel() > 1
    out = torch.empty(q.shape, dtype=torch.float32)
    for s in range(seq_lens_kv.numel()):
        lo, hi, kl = int(cu_seqlens_q[s]), int(cu_seqlens_q[s + 1]), int(seq_lens_kv[s])
        if hi == lo:
            continue
        blocks = block_table[s, :(kl + page - 1) // page].long()
        k = k_pool[blocks].reshape(-1, h_kv, k_pool.shape[3])[:kl].float().repeat_interleave(group, 1)
        v = v_pool[blocks].reshape(-1, h_kv, v_pool.shape[3])[:kl].float().repeat_interleave(group, 1)
        out[lo:hi] = _sequence(q[lo:hi].float(), k, v, scale, q.dtype if planted and batched else None)
    return out.to(q.dtype)


@torch.library.custom_op("detfuzz_py_test::paged_attention", mutates_args=())
def paged_attention(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, cu_seqlens_q: torch.Tensor,
                    seq_lens_kv: torch.Tensor, block_table: torch.Tensor, scale: float) -> torch.Tensor:
    return _paged_attention(q, k_pool, v_pool, cu_seqlens_q, seq_lens_kv, block_table, scale, planted=False)


@torch.library.custom_op("detfuzz_py_test::paged_attention_batched_p", mutates_args=())
def paged_attention_batched_p(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor,
                              cu_seqlens_q: torch.Tensor, seq_lens_kv: torch.Tensor, block_table: torch.Tensor,
                              scale: float) -> torch.Tensor:
    return _paged_attention(q, k_pool, v_pool, cu_seqlens_q, seq_lens_kv, block_table, scale, planted=True)


@torch.library.custom_op("detfuzz_py_test::paged_attention_wrong_schema", mutates_args=())
def paged_attention_wrong_schema(q: torch.Tensor, k_pool: torch.Tensor) -> torch.Tensor:
    return q.clone()
