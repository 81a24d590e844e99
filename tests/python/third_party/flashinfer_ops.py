"""FlashInfer's paged attention (PyPI: flashinfer-python) as impls of detfuzz's paged_attention op,
so that the attention properties (seq_alone_vs_batched, block_placement, chunked_prefill,
decode_vs_prefill, repeat, accuracy) run on it (ci/gpu-check python-kernels):

    python -m detfuzz fuzz --import tests/python/third_party/flashinfer_ops.py --backend cuda \
        --op paged_attention --impl detfuzz_flashinfer::paged_attention --dtype bfloat16

Each op takes paged_attention's tensors (q [T_q, H_q, D]; k_pool, v_pool [pages, page_size, H_kv, D];
cu_seqlens_q [S+1]; seq_lens_kv [S]; block_table [S, max_pages]) and the softmax scale, and calls
FlashInfer the way an engine does: the pools are FlashInfer's NHD paged layout as they are, each
sequence's pages are its block table's first ceil(kv / page_size) entries (indptr, indices,
last_page_len), a batch of decodes (every q = 1) goes to BatchDecodeWithPagedKVCacheWrapper (tensor
cores for GQA groups of 4 or more, as SGLang chooses, and always with a fixed split size, which
FlashInfer accepts only there) and any other batch to
BatchPrefillWithPagedKVCacheWrapper with causal=True (FlashInfer aligns the mask bottom-right).
Three impls differ only in what plan() is told:

    detfuzz_flashinfer::paged_attention              FlashInfer's defaults
    detfuzz_flashinfer::paged_attention_fixed_split  fixed_split_size: 2048 tokens a split for decode,
                                                     4096 for prefill (in pages), as SGLang's
                                                     deterministic mode sets them
    detfuzz_flashinfer::paged_attention_no_split     disable_split_kv=True
    detfuzz_flashinfer::paged_attention_prefill_only every batch through the prefill wrapper, decodes
                                                     too, with its defaults: the prefill kernel alone,
                                                     without the engine's switch between two kernels

FLASHINFER_BACKEND_LOG=FILE appends, once per process and kind, which backend plan() resolved
(auto routing), so that a table can say which kernels ran.
"""
import os

import torch
import flashinfer

NS = "detfuzz_flashinfer"
WORKSPACE_BYTES = 128 << 20  # FlashInfer's recommended float workspace
DECODE_SPLIT_TOKENS, PREFILL_SPLIT_TOKENS = 2048, 4096

_workspace = {}
_wrappers = {}
_logged = set()


def _wrapper(kind, device, tensor_cores=False):
    key = (kind, device, tensor_cores)
    if key not in _wrappers:
        if device not in _workspace:
            _workspace[device] = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=device)
        ws = _workspace[device]
        if kind == "decode":
            _wrappers[key] = flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=tensor_cores)
        else:
            _wrappers[key] = flashinfer.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD")
    return _wrappers[key]


def _log_backend(kind, w, q):
    path = os.environ.get("FLASHINFER_BACKEND_LOG")
    backend = getattr(w, "resolved_backend", None) or getattr(w, "_backend", "?")
    entry = (kind, backend, str(q.dtype), q.shape[-1])
    if path and entry not in _logged:
        _logged.add(entry)
        with open(path, "a") as f:
            f.write("%s %s %s D=%d\n" % entry)


def _attention(q, k_pool, v_pool, cu_seqlens_q, seq_lens_kv, block_table, scale, split, decode_wrapper=True):
    if q.dtype != k_pool.dtype:
        raise ValueError(f"q is {q.dtype} but the pools are {k_pool.dtype}")
    page = k_pool.shape[1]
    h_q, h_kv, d = q.shape[1], k_pool.shape[2], q.shape[2]
    dev = q.device
    kv = seq_lens_kv.to(torch.int64)
    pages = (kv + page - 1) // page
    indptr = torch.zeros(len(kv) + 1, dtype=torch.int32, device=dev)
    indptr[1:] = torch.cumsum(pages, 0).to(torch.int32)
    cols = torch.arange(block_table.shape[1], device=dev)
    indices = block_table[cols.unsqueeze(0) < pages.unsqueeze(1)].to(torch.int32)  # row-major: sequence order
    last = (kv - (pages - 1) * page).to(torch.int32)
    qo_indptr = cu_seqlens_q.to(torch.int32)
    decode = decode_wrapper and bool(torch.all(qo_indptr[1:] - qo_indptr[:-1] == 1))
    extra = {}
    if split == "fixed":
        extra["fixed_split_size"] = max(1, (DECODE_SPLIT_TOKENS if decode else PREFILL_SPLIT_TOKENS) // page)
    elif split == "none":
        extra["disable_split_kv"] = True
    if decode:
        # FlashInfer takes a fixed split size only in its tensor-core decode (as SGLang's deterministic
        # mode runs decode); otherwise tensor cores from GQA groups of 4, as SGLang picks them.
        w = _wrapper("decode", dev, tensor_cores=h_q // h_kv >= 4 or split == "fixed")
        w.plan(indptr, indices, last, h_q, h_kv, d, page, q_data_type=q.dtype, kv_data_type=k_pool.dtype,
               sm_scale=scale, **extra)
        _log_backend("decode", w, q)
        return w.run(q, (k_pool, v_pool))
    w = _wrapper("prefill", dev)
    w.plan(qo_indptr, indptr, indices, last, h_q, h_kv, d, page, causal=True, sm_scale=scale, q_data_type=q.dtype,
           kv_data_type=k_pool.dtype, **extra)
    _log_backend("prefill", w, q)
    return w.run(q, (k_pool, v_pool))


@torch.library.custom_op(f"{NS}::paged_attention", mutates_args=())
def paged_attention(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, cu_seqlens_q: torch.Tensor,
                    seq_lens_kv: torch.Tensor, block_table: torch.Tensor, scale: float) -> torch.Tensor:
    return _attention(q, k_pool, v_pool, cu_seqlens_q, seq_lens_kv, block_table, scale, split="default")


@torch.library.custom_op(f"{NS}::paged_attention_fixed_split", mutates_args=())
def paged_attention_fixed_split(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor,
                                cu_seqlens_q: torch.Tensor, seq_lens_kv: torch.Tensor, block_table: torch.Tensor,
                                scale: float) -> torch.Tensor:
    return _attention(q, k_pool, v_pool, cu_seqlens_q, seq_lens_kv, block_table, scale, split="fixed")


@torch.library.custom_op(f"{NS}::paged_attention_no_split", mutates_args=())
def paged_attention_no_split(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, cu_seqlens_q: torch.Tensor,
                             seq_lens_kv: torch.Tensor, block_table: torch.Tensor, scale: float) -> torch.Tensor:
    return _attention(q, k_pool, v_pool, cu_seqlens_q, seq_lens_kv, block_table, scale, split="none")


@torch.library.custom_op(f"{NS}::paged_attention_prefill_only", mutates_args=())
def paged_attention_prefill_only(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor,
                                 cu_seqlens_q: torch.Tensor, seq_lens_kv: torch.Tensor, block_table: torch.Tensor,
                                 scale: float) -> torch.Tensor:
    return _attention(q, k_pool, v_pool, cu_seqlens_q, seq_lens_kv, block_table, scale, split="default",
                      decode_wrapper=False)


def warm_up(dtypes=(torch.bfloat16,), head_dims=(64, 128, 256)):
    """Compiles FlashInfer's JIT modules for every kind a campaign draws (decode with and without
    tensor cores, prefill; each dtype and head dim) in parallel processes, so that the campaign's
    first cases do not each wait minutes for nvcc. Run as: python flashinfer_ops.py warm."""
    import multiprocessing as mp
    jobs = [(dt, d, group, q_len) for dt in dtypes for d in head_dims for group, q_len in ((1, 1), (4, 1), (1, 3))]
    with mp.get_context("spawn").Pool(min(len(jobs), os.cpu_count() or 1)) as pool:
        for job, err in zip(jobs, pool.map(_warm_one, jobs)):
            print("warm", job, err or "ok", flush=True)


def _warm_one(job):
    dt, d, group, q_len = job
    try:
        dev = torch.device("cuda")
        page, kv = 16, 40
        q = torch.randn(q_len, group, d, device=dev).to(dt)
        pool = torch.randn(4, page, 1, d, device=dev).to(dt)
        bt = torch.arange(3, dtype=torch.int32, device=dev).unsqueeze(0)
        cu = torch.tensor([0, q_len], dtype=torch.int32, device=dev)
        lens = torch.tensor([kv], dtype=torch.int32, device=dev)
        for split in ("default", "fixed", "none"):
            _attention(q, pool, pool, cu, lens, bt, d ** -0.5, split)
        torch.cuda.synchronize()
        return None
    except Exception as e:  # reported, not raised: a kind FlashInfer cannot build is a finding
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


if __name__ == "__main__":
    import sys
    if sys.argv[1:2] == ["warm"]:
        warm_up()
