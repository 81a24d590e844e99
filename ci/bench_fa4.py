#!/usr/bin/env python3
"""Times FlashAttention-4's forward (flash-attn-4, CuTe DSL: `flash_attn.cute.flash_attn_func`),
torch SDPA's cuDNN backend and detfuzz's paged attention (torch.classes.detfuzz.PagedAttentionPlan
from libdetfuzz_torch.so, pages of 16) on `detfuzz bench --op paged_attention`'s prefill rows: one
sequence, causal, 32 query and 8 KV heads of 128, bf16 and fp16, all on the same values (cuDNN as
`detfuzz bench` calls it: contiguous, K/V heads repeated; FA4 takes the 8 KV heads as they are, once
contiguous and once from detfuzz's paged pools through its page table, `flash_attn_varlen_func`).
Each is captured in a CUDA graph and replayed (detfuzz's plan made once, outside the graph), the
median of many replays timed alone with CUDA events, in one process.

FlashAttention-4 is installed at run time, never committed (its CuTe DSL runtime is a 92 MB
wheel): ci/fa4-wheels puts it in .fa4/site, and ci/gpu-check attention runs this script from there.
    python3 ci/bench_fa4.py OUT.csv [--lengths 1024,2048,4096,8192] [--dtypes bfloat16,float16]
        [--detfuzz-lib build/ops/torch/libdetfuzz_torch.so]
"""
import argparse
import os
import statistics
import sys

import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
PAGE = 16


def graph_us(fn, reps=30):
    """Median CUDA-event time of a graph replay of fn, each replay timed alone."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        graph.replay()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_csv")
    ap.add_argument("--lengths", default="1024,2048,4096,8192")
    ap.add_argument("--dtypes", default="bfloat16,float16")
    ap.add_argument("--detfuzz-lib", default=os.path.join(ROOT, "build", "ops", "torch", "libdetfuzz_torch.so"))
    o = ap.parse_args()

    def fail(message):  # bad input or a missing piece: one line, exit 2, nothing written
        print(f"bench_fa4: error: {message}", file=sys.stderr)
        sys.exit(2)

    out_dir = os.path.dirname(os.path.abspath(o.out_csv))
    if not os.access(out_dir, os.W_OK):
        fail(f"{out_dir}: not a writable folder")
    try:
        lengths = [int(x) for x in o.lengths.split(",")]
        dtypes = [getattr(torch, x) for x in o.dtypes.split(",") if x in ("bfloat16", "float16")]
    except ValueError:
        fail(f"--lengths {o.lengths}: not a list of integers")
    if len(dtypes) != len(o.dtypes.split(",")):
        fail(f"--dtypes {o.dtypes}: only bfloat16 and float16")
    if any(n <= 0 or n % PAGE for n in lengths):
        fail(f"--lengths {o.lengths}: each must be a positive multiple of {PAGE}")
    if not torch.cuda.is_available():
        fail("needs a CUDA GPU: none found")
    try:
        from flash_attn.cute import flash_attn_func, flash_attn_varlen_func
    except Exception as e:  # noqa: BLE001 - any import failure means the column cannot be run
        fail(f"flash_attn.cute does not import: {e}")
    if not os.path.isfile(o.detfuzz_lib):
        fail(f"{o.detfuzz_lib}: no such file (build detfuzz first)")
    torch.ops.load_library(o.detfuzz_lib)
    hq, hkv, d = 32, 8, 128
    gen = torch.Generator(device="cuda").manual_seed(20261127)
    device = torch.cuda.get_device_name()
    rows = []
    for dtype in dtypes:
        dtype_name = str(dtype).removeprefix("torch.")
        for length in lengths:
            q = torch.randn(1, length, hq, d, device="cuda", dtype=dtype, generator=gen)
            k = torch.randn(1, length, hkv, d, device="cuda", dtype=dtype, generator=gen)
            v = torch.randn(1, length, hkv, d, device="cuda", dtype=dtype, generator=gen)
            qc = q.transpose(1, 2).contiguous()
            kc = k.transpose(1, 2).repeat_interleave(hq // hkv, 1).contiguous()
            vc = v.transpose(1, 2).repeat_interleave(hq // hkv, 1).contiguous()
            # detfuzz's layout: q [L, 32, 128], pools [L / 16 pages, 16, 8, 128], the pages in order.
            q_rows = q[0]
            k_pool, v_pool = k[0].view(-1, PAGE, hkv, d), v[0].view(-1, PAGE, hkv, d)
            i32 = dict(device="cuda", dtype=torch.int32)
            cu_q, lens = torch.tensor([0, length], **i32), torch.tensor([length], **i32)
            table = torch.arange(length // PAGE, **i32).view(1, -1)
            plan = torch.classes.detfuzz.PagedAttentionPlan(q_rows, k_pool, v_pool, cu_q, lens, table)

            def fa4():
                out = flash_attn_func(q, k, v, causal=True)
                return out[0] if isinstance(out, tuple) else out

            def fa4_paged():
                out = flash_attn_varlen_func(q_rows, k_pool, v_pool, cu_seqlens_q=cu_q, max_seqlen_q=length,
                                             seqused_k=lens, page_table=table, causal=True)
                return (out[0] if isinstance(out, tuple) else out).unsqueeze(0)

            def cudnn():
                return torch.ops.aten._scaled_dot_product_cudnn_attention(qc, kc, vc, None, False, 0.0, True)[0]

            def ours():
                return plan.run(q_rows, k_pool, v_pool, 0.0)

            with torch.no_grad():
                # The three agree to bf16/fp16 rounding: a check that each ran the same attention, not a property.
                ref = cudnn().transpose(1, 2)[0].float()
                diff = max((fn()[0].float() - ref).abs().max().item() for fn in (fa4, fa4_paged))
                diff = max(diff, (ours().float() - ref).abs().max().item())
                # Interleaved: each impl timed once per round, the median of the rounds' medians.
                impls = (("fa4", fa4), ("fa4_paged", fa4_paged), ("cudnn", cudnn), ("ours", ours))
                t = {name: [] for name, _ in impls}
                for _ in range(3):
                    for name, fn in impls:
                        t[name].append(graph_us(fn))
                fa4_us, paged_us, cudnn_us, ours_us = (statistics.median(t[n]) for n, _ in impls)
            flops = 4.0 * hq * d * length * (length + 1) / 2
            tf = {name: flops / us * 1e-6 for name, us in
                  (("ours", ours_us), ("fa4", fa4_us), ("paged", paged_us), ("cudnn", cudnn_us))}
            rows.append((dtype_name, length, ours_us, fa4_us, paged_us, cudnn_us, tf["ours"], tf["fa4"], tf["paged"],
                         tf["cudnn"], cudnn_us / ours_us, fa4_us / ours_us, paged_us / ours_us, cudnn_us / fa4_us,
                         diff))
            print(f"{device} {dtype_name} prefill {length}: detfuzz {ours_us:.1f} us ({tf['ours']:.0f} TFLOP/s), "
                  f"FA4 {fa4_us:.1f} us ({tf['fa4']:.0f}), FA4 on the pages {paged_us:.1f} us ({tf['paged']:.0f}), "
                  f"cuDNN {cudnn_us:.1f} us ({tf['cudnn']:.0f}): detfuzz at {cudnn_us / ours_us:.2f}x cuDNN, "
                  f"{fa4_us / ours_us:.2f}x FA4, {paged_us / ours_us:.2f}x FA4 on the pages; "
                  f"FA4 at {cudnn_us / fa4_us:.2f}x cuDNN (max difference from cuDNN {diff:.2e})", flush=True)
    with open(o.out_csv, "w") as f:
        f.write("device,dtype,length,detfuzz_us,fa4_us,fa4_paged_us,cudnn_us,detfuzz_tflops,fa4_tflops,"
                "fa4_paged_tflops,cudnn_tflops,detfuzz_vs_cudnn,detfuzz_vs_fa4,detfuzz_vs_fa4_paged,fa4_vs_cudnn,"
                "max_abs_diff\n")
        for row in rows:
            f.write(device + "," + ",".join(f"{x:.4g}" if isinstance(x, float) else str(x) for x in row) + "\n")


if __name__ == "__main__":
    main()
