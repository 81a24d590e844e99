#!/usr/bin/env python3
"""Render a detfuzz report folder as Markdown: what ran, where, and what differed.

    python3 reports/render.py reports/<run>            # fuzz: per-target table and shrunk failures
    python3 reports/render.py reports/<bench-run>      # bench: speedups and geomeans
Only the standard library; reads summary.json, failures.csv, bench.csv, scan.csv.
"""
import csv
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

from html_report import bench_row_op  # the same file's directory: reports/


def render_fuzz(summary, folder):
    res = summary["results"]
    print(f"{res['cases']} cases in {res['elapsed_s']:.1f} s, exit {summary['exit_code']}\n")
    print("| target | expectation | cases | failed | rate | max ULP |")
    print("|---|---|---|---|---|---|")
    for t in res["targets"]:
        if not t["cases"]:
            continue
        failed = t["failures"] + t["errors"]
        name = f"{t['op']}/{t['impl']}/{t['property']}/{t['dtype']}"
        print(f"| {name} | {t['expectation']} | {t['cases']} | {failed} | {100 * failed / t['cases']:.1f}% | {t['max_ulp']} |")
    failures = list(csv.DictReader(open(folder / "failures.csv")))
    if failures:
        print(f"\n{len(failures)} replayable failure records (failures.csv):\n")
        for r in failures:
            print(f"- `{r['op']}/{r['impl']}/{r['property']}` {r['dtype']} shape {r['shape']}: {r['detail']}")


def render_bench(folder):
    rows = list(csv.DictReader(open(folder / "bench.csv")))
    groups = defaultdict(list)
    print("| op | impl | dtype | M | N | K | median µs | TFLOP/s | GB/s | vs baseline | invariant |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {bench_row_op(r)} | {r['impl']} | {r['dtype']} | {r['M']} | {r['N']} | {r['K']} | {r['median_us']} | {r['tflops']} | {r['gbps']} "
              f"| {float(r['speedup_vs_cublas']):.2f}x {r['baseline_impl']} | {r['invariant_verified']} |")
        if r["impl"] != r["baseline_impl"]:
            groups[(bench_row_op(r), r["impl"], r["dtype"])].append(float(r["speedup_vs_cublas"]))
    print("\n| op | impl | dtype | geomean vs baseline | shapes |")
    print("|---|---|---|---|---|")
    for (op, impl, dtype), v in sorted(groups.items()):
        print(f"| {op} | {impl} | {dtype} | {math.exp(sum(map(math.log, v)) / len(v)):.3f}x | {len(v)} |")


def render_scan(folder):
    rows = list(csv.DictReader(open(folder / "scan.csv")))
    by = defaultdict(lambda: [0, 0, []])
    for r in rows:
        k = (r["impl"], r["dtype"], r["N"], r["K"])
        by[k][0] += 1
        by[k][1] += int(r["row0_differs_vs_1row"])
        if r["prefix_differs_vs_prev"] == "1":
            by[k][2].append(r["M"])
    print("| impl | dtype | N | K | M where row 0 differs from the 1-row product | M where the first M-1 rows change |")
    print("|---|---|---|---|---|---|")
    for (impl, dtype, n, k), (total, row0, switches) in by.items():
        print(f"| {impl} | {dtype} | {n} | {k} | {row0} of {total} | {' '.join(switches) or 'never'} |")


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    folder = Path(sys.argv[1])
    try:
        summary = json.load(open(folder / "summary.json"))
    except (OSError, ValueError) as e:
        print(f"render: error: {folder} is not a detfuzz report ({e})", file=sys.stderr)
        return 2
    ctx = summary.get("context", {})
    print(f"# detfuzz report {folder.name}\n")
    print(f"`{summary.get('command', '')}` on {ctx.get('device', '?')} ({ctx.get('sm_count', '-')} SMs), "
          f"libtorch {ctx.get('libtorch', '?')}, commit {str(ctx.get('git_commit', '?'))[:12]}, started {summary.get('started', '?')}\n")
    if "results" in summary:
        render_fuzz(summary, folder)
    if (folder / "bench.csv").exists():
        render_bench(folder)
    if (folder / "scan.csv").exists():
        render_scan(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
