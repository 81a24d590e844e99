#!/usr/bin/env python3
"""Times the seed's Triton matmul (thinking-machines-lab/batch_invariant_ops, the kernel SGLang's
batch-invariant mode ships) against cuBLAS on detfuzz bench's default mm shapes, the same way
`detfuzz bench` times: input sets rotated until they cover 256 MB (past the L2 cache), each call
timed alone with CUDA events, the median of many calls, cuBLAS measured in the same process.

The seed's file is fetched for the measurement only and never committed: pass its path.
    python3 ci/bench_seed_triton.py SEED_FILE OUT.csv [--dtypes bfloat16,float16,float32]

Note for float32: the seed's kernel runs tl.dot with Triton's default input precision, which is
TF32 on Hopper; detfuzz's float32 kernel is IEEE (no TF32). The two are not the same arithmetic.
"""
import argparse
import importlib.util
import math
import statistics
import sys

import torch


def load_seed(path):
    spec = importlib.util.spec_from_file_location("seed_batch_invariant_ops", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def default_shapes():
    nk = [(4096, 4096), (14336, 4096), (4096, 14336), (1024, 8192), (6144, 4096), (128256, 4096)]
    return [(m, n, k) for n, k in nk for m in (1, 8, 32, 128, 512, 2048, 8192)]


def time_us(fn, sets, seconds=0.2):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for i in range(3):
        fn(*sets[i % len(sets)])
    torch.cuda.synchronize()
    start.record(); fn(*sets[0]); stop.record(); stop.synchronize()
    once = max(start.elapsed_time(stop) * 1e3, 1.0)
    iters = int(min(max(seconds * 1e6 / once, 3), 2000))
    t = []
    for i in range(iters):
        a, b = sets[i % len(sets)]
        start.record(); fn(a, b); stop.record(); stop.synchronize()
        t.append(start.elapsed_time(stop) * 1e3)
    return statistics.median(t)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("seed_file")
    ap.add_argument("out_csv")
    ap.add_argument("--dtypes", default="bfloat16,float16,float32")
    o = ap.parse_args()
    seed = load_seed(o.seed_file)
    dev = torch.cuda.get_device_name()
    gen = torch.Generator(device="cuda").manual_seed(20261121)
    rows, speedups = [], {}
    shapes = default_shapes()
    for dname in o.dtypes.split(","):
        dtype = getattr(torch, dname)
        for i, (m, n, k) in enumerate(shapes):
            elem = torch.finfo(dtype).bits // 8
            nsets = int(min(max(math.ceil(256e6 / (elem * (m * k + k * n))), 1), 16))
            sets = [(torch.randn(m, k, device="cuda", dtype=dtype, generator=gen),
                     torch.randn(k, n, device="cuda", dtype=dtype, generator=gen)) for _ in range(nsets)]
            cublas_us = time_us(torch.mm, sets)
            with seed.set_batch_invariant_mode(True):
                triton_us = time_us(torch.mm, sets)
                a, b = sets[0]
                invariant = bool(torch.equal(torch.mm(a[:1], b), torch.mm(a, b)[:1]))
            s = cublas_us / triton_us
            speedups.setdefault(dname, []).append(s)
            rows.append((dname, m, n, k, triton_us, 2.0 * m * n * k / triton_us * 1e-6, cublas_us, s, invariant))
            print(f"[{i + 1}/{len(shapes)}] seed-triton {dname} M={m} N={n} K={k}: {triton_us:.1f} us, "
                  f"{2.0 * m * n * k / triton_us * 1e-6:.0f} TFLOP/s, {s:.2f}x cublas"
                  + ("" if invariant else "  (batch_slice FAILED)"), flush=True)
            del sets
    with open(o.out_csv, "w") as f:
        f.write("op,impl,dtype,M,N,K,median_us,tflops,cublas_median_us,speedup_vs_cublas,invariant_verified,device\n")
        for d, m, n, k, us, tf, cb, s, inv in rows:
            f.write(f"mm,seed-triton,{d},{m},{n},{k},{us:.3f},{tf:.2f},{cb:.3f},{s:.4f},{'yes' if inv else 'no'},{dev}\n")
    print(f"\ngeomean speedup of the seed's Triton matmul vs cublas on {dev} (float32: TF32 inside):")
    for d, v in speedups.items():
        print(f"  mm/seed-triton/{d}: {math.exp(sum(map(math.log, v)) / len(v)):.3f}x over {len(v)} shapes")


if __name__ == "__main__":
    sys.exit(main())
