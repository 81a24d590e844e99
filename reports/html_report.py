#!/usr/bin/env python3
"""Render detfuzz report folders as one self-contained HTML file (what `detfuzz report` runs).

    python3 reports/html_report.py RUN_DIR [RUN_DIR ...] --out report.html

Each folder contributes what it holds:
  fuzz  (summary.json with results, cases.csv, failures.csv): per-target failure rates and cases/s,
        a histogram of the ULP distance of failing cases per target, shrunk failures with repro commands;
  bench (bench.csv): speedup against the baseline (cuBLAS for mm) by M, one plot per (N, K, dtype);
  scan  (scan.csv): for each impl, the M where row 0 differs from the 1-row product and where the
        first M-1 rows change.
The page is static HTML with inline SVG and CSS: no script, no font, nothing fetched. Only the
standard library. Exit 2 with a one-line error for a folder that is not a detfuzz report.
"""
import argparse
import csv
import html
import json
import math
import os
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
ULP_BUCKETS = [("1", 1, 1), ("2-3", 2, 3), ("4-15", 4, 15), ("16-255", 16, 255), ("256-65535", 256, 65535),
               (">65535", 65536, math.inf), ("NaN/inf", None, None)]


class ReportError(Exception):
    pass


def esc(s):
    return html.escape(str(s), quote=True)


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def ulp_bucket(text):
    if text in ("inf", "", None):
        return len(ULP_BUCKETS) - 1
    u = int(text)
    for i, (_, lo, hi) in enumerate(ULP_BUCKETS[:-1]):
        if lo <= u <= hi:
            return i
    return len(ULP_BUCKETS) - 1


def svg_bars(counts, labels, width=300, height=90, color="#d62728"):
    """A small bar chart: one bar per bucket, its count above it, the label below."""
    top = max(counts) or 1
    n = len(counts)
    slot = width / n
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height + 30}" role="img">']
    for i, (c, label) in enumerate(zip(counts, labels)):
        h = height * c / top
        x = i * slot + 4
        out.append(f'<rect x="{x:.1f}" y="{height - h + 12:.1f}" width="{slot - 8:.1f}" height="{h:.1f}" fill="{color}"><title>{esc(label)}: {c}</title></rect>')
        out.append(f'<text x="{x + (slot - 8) / 2:.1f}" y="{height - h + 10:.1f}" font-size="9" text-anchor="middle">{c}</text>')
        out.append(f'<text x="{x + (slot - 8) / 2:.1f}" y="{height + 24:.1f}" font-size="9" text-anchor="middle">{esc(label)}</text>')
    out.append("</svg>")
    return "".join(out)


def rate_bar(rate, width=120):
    w = max(0.0, min(1.0, rate)) * width
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="12"><rect width="{width}" height="12" fill="#eee"/>'
            f'<rect width="{w:.1f}" height="12" fill="#d62728"/></svg>')


def render_fuzz(folder, summary):
    res = summary["results"]
    parts = [f"<h2>Fuzz: {esc(folder.name)}</h2>",
             f"<p>{res['cases']} cases in {res['elapsed_s']:.1f} s ({res['cases'] / max(res['elapsed_s'], 1e-9):.0f} cases/s), "
             f"exit {summary.get('exit_code', '?')}; corpus: {res['corpus']['replayed']} replayed, "
             f"{res['corpus']['must_hold_failures']} must-hold failures.</p>"]
    cases = read_csv(folder / "cases.csv") if (folder / "cases.csv").exists() else []
    hist = defaultdict(lambda: [0] * len(ULP_BUCKETS))
    for c in cases:
        if c["outcome"] == "fail" and c["source"] == "fuzz":
            name = f"{c['op']}/{c['impl']}/{c['property']}/{c['dtype']}"
            hist[name][ulp_bucket(c["max_ulp"])] += 1
    parts.append("<table><tr><th>target</th><th>expectation</th><th>cases</th><th>failed</th><th>failure rate</th>"
                 "<th>max ULP</th><th>cases/s</th></tr>")
    for t in res["targets"]:
        if not t["cases"]:
            continue
        failed = t["failures"] + t["errors"]
        rate = failed / t["cases"]
        name = f"{t['op']}/{t['impl']}/{t['property']}/{t['dtype']}"
        cls = ' class="bad"' if failed and t["expectation"] == "must-hold" else ""
        parts.append(f"<tr{cls}><td>{esc(name)}</td><td>{esc(t['expectation'])}</td><td>{t['cases']}</td><td>{failed}</td>"
                     f"<td>{rate_bar(rate)} {100 * rate:.1f}%</td><td>{esc(t['max_ulp'])}</td><td>{t.get('cases_per_s', 0):.0f}</td></tr>")
    parts.append("</table>")
    if hist:
        parts.append("<h3>ULP distance of failing cases, per target</h3><div class='grid'>")
        for name, counts in sorted(hist.items()):
            parts.append(f"<figure><figcaption>{esc(name)}</figcaption>{svg_bars(counts, [b[0] for b in ULP_BUCKETS])}</figure>")
        parts.append("</div>")
    parts.append(render_failures(folder, summary))
    return "\n".join(parts)


def render_failures(folder, summary):
    path = folder / "failures.csv"
    if not path.exists():
        return ""
    lines = path.read_text().splitlines()
    if len(lines) < 2:
        return "<p>No failure records.</p>"
    program = (summary.get("command") or "detfuzz").split(" ")[0]
    rows = read_csv(path)
    out = [f"<h3>Shrunk failures ({len(rows)}, replayable records of failures.csv)</h3>"]
    for line, r in zip(lines[1:], rows):
        repro = program + " replay --case '" + line.replace("'", "'\\''") + "'"
        out.append(f"<div class='fail'><b>{esc(r['op'])}/{esc(r['impl'])}/{esc(r['property'])}</b> {esc(r['dtype'])} shape {esc(r['shape'])} "
                   f"layout {esc(r['layout'])} dist {esc(r['dist'])} {esc(r['params'])}<br>{esc(r['detail'])}"
                   f"<pre>{esc(repro)}</pre></div>")
    return "\n".join(out)


def svg_lines(series, xs_log2=True, width=420, height=220, ref=1.0, xlabel="M", ylabel="speedup"):
    """Line plot of {label: [(x, y)]}, x on a log2 axis, a dashed line at y = ref."""
    pts = [p for s in series.values() for p in s]
    if not pts:
        return ""
    fx = (lambda x: math.log2(x)) if xs_log2 else (lambda x: x)
    x0, x1 = min(fx(p[0]) for p in pts), max(fx(p[0]) for p in pts)
    y1 = max(max(p[1] for p in pts), ref) * 1.1
    x1 = x1 if x1 > x0 else x0 + 1
    ml, mb, mt, mr = 40, 30, 10, 110
    pw, ph = width - ml - mr, height - mb - mt
    sx = lambda x: ml + (fx(x) - x0) / (x1 - x0) * pw
    sy = lambda y: mt + ph - y / y1 * ph
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img">',
           f'<rect x="{ml}" y="{mt}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>',
           f'<line x1="{ml}" x2="{ml + pw}" y1="{sy(ref):.1f}" y2="{sy(ref):.1f}" stroke="#666" stroke-dasharray="4 3"/>',
           f'<text x="{ml - 4}" y="{sy(ref) + 3:.1f}" font-size="9" text-anchor="end">{ref:g}</text>',
           f'<text x="{ml - 4}" y="{mt + 8}" font-size="9" text-anchor="end">{y1:.2f}</text>',
           f'<text x="{ml + pw / 2}" y="{height - 4}" font-size="10" text-anchor="middle">{esc(xlabel)}</text>',
           f'<text x="10" y="{mt + ph / 2}" font-size="10" transform="rotate(-90 10 {mt + ph / 2})" text-anchor="middle">{esc(ylabel)}</text>']
    xticks = sorted({p[0] for p in pts})
    for x in xticks:
        out.append(f'<text x="{sx(x):.1f}" y="{mt + ph + 12}" font-size="9" text-anchor="middle">{x}</text>')
    for i, (label, s) in enumerate(sorted(series.items())):
        color = PALETTE[i % len(PALETTE)]
        s = sorted(s)
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in s)
        out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        for x, y in s:
            out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.5" fill="{color}"><title>{esc(label)} M={x}: {y:.3f}x</title></circle>')
        out.append(f'<text x="{ml + pw + 6}" y="{mt + 12 + 12 * i}" font-size="10" fill="{color}">{esc(label)}</text>')
    out.append("</svg>")
    return "".join(out)


def render_bench(folder):
    rows = read_csv(folder / "bench.csv")
    plots = defaultdict(lambda: defaultdict(list))
    others = []
    for r in rows:
        if r["impl"] == r["baseline_impl"]:
            continue
        if r["op"] == "mm":
            plots[(int(r["N"]), int(r["K"]), r["dtype"])][r["impl"]].append((int(r["M"]), float(r["speedup_vs_cublas"])))
        else:
            others.append(r)
    out = [f"<h2>Bench: {esc(folder.name)}</h2>"]
    if plots:
        out.append("<h3>mm: speedup against cuBLAS by M, for each (N, K)</h3><div class='grid'>")
        for (n, k, dtype), series in sorted(plots.items()):
            out.append(f"<figure><figcaption>N={n} K={k} {esc(dtype)}</figcaption>{svg_lines(series, ylabel='x cuBLAS')}</figure>")
        out.append("</div>")
    if others:
        out.append("<h3>Other ops</h3><table><tr><th>op</th><th>impl</th><th>dtype</th><th>M</th><th>N</th><th>K</th>"
                   "<th>median µs</th><th>vs baseline</th><th>invariant</th></tr>")
        for r in others:
            out.append(f"<tr><td>{esc(r['op'])}</td><td>{esc(r['impl'])}</td><td>{esc(r['dtype'])}</td><td>{esc(r['M'])}</td><td>{esc(r['N'])}</td>"
                       f"<td>{esc(r['K'])}</td><td>{esc(r['median_us'])}</td><td>{float(r['speedup_vs_cublas']):.2f}x {esc(r['baseline_impl'])}</td>"
                       f"<td>{esc(r['invariant_verified'])}</td></tr>")
        out.append("</table>")
    return "\n".join(out)


def render_scan(folder):
    rows = read_csv(folder / "scan.csv")
    groups = defaultdict(list)
    for r in rows:
        groups[(r["impl"], r["dtype"], r["N"], r["K"])].append(r)
    out = [f"<h2>Scan: {esc(folder.name)}</h2>",
           "<p>One column per M. Top strip: row 0 of the M-row product differs from the 1-row product (red). "
           "Bottom strip: the first M-1 rows change from the (M-1)-row product (orange).</p>"]
    width = 800
    for (impl, dtype, n, k), rs in groups.items():
        rs.sort(key=lambda r: int(r["M"]))
        max_m = int(rs[-1]["M"])
        cw = width / max_m
        svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="44" role="img">',
               f'<rect width="{width}" height="14" fill="#e8f4e8"/><rect y="18" width="{width}" height="14" fill="#e8f4e8"/>']
        row0 = prefix = 0
        for r in rs:
            x = (int(r["M"]) - 1) * cw
            if r["row0_differs_vs_1row"] == "1":
                row0 += 1
                svg.append(f'<rect x="{x:.2f}" width="{max(cw, 0.6):.2f}" height="14" fill="#d62728"><title>M={r["M"]}: row 0 differs, max ULP {esc(r["row0_max_ulp"])}</title></rect>')
            if r["prefix_differs_vs_prev"] == "1":
                prefix += 1
                svg.append(f'<rect x="{x:.2f}" y="18" width="{max(cw, 0.6):.2f}" height="14" fill="#ff7f0e"><title>M={r["M"]}: {esc(r["prefix_differing"])} elements of the first M-1 rows change</title></rect>')
        svg.append(f'<text x="0" y="42" font-size="9">M=1</text><text x="{width}" y="42" font-size="9" text-anchor="end">M={max_m}</text></svg>')
        out.append(f"<figure><figcaption>{esc(impl)} {esc(dtype)} N={esc(n)} K={esc(k)}: row 0 differs at {row0} of {len(rs)} M; "
                   f"the first M-1 rows change at {prefix} M</figcaption>{''.join(svg)}</figure>")
    return "\n".join(out)


def render_folder(folder):
    if not folder.is_dir():
        raise ReportError(f"{folder} is not a folder")
    summary = {}
    if (folder / "summary.json").exists():
        try:
            summary = json.loads((folder / "summary.json").read_text())
        except ValueError as e:
            raise ReportError(f"{folder}/summary.json is not JSON ({e})")
    parts = []
    ctx = summary.get("context", {})
    if summary:
        parts.append(f"<p class='ctx'><code>{esc(summary.get('command', ''))}</code><br>{esc(ctx.get('device', '?'))}"
                     f" ({esc(ctx.get('sm_count', '-'))} SMs), libtorch {esc(ctx.get('libtorch', '?'))}, commit "
                     f"{esc(str(ctx.get('git_commit', '?'))[:12])}, started {esc(summary.get('started', '?'))}</p>")
    found = False
    try:
        if "results" in summary:
            parts.append(render_fuzz(folder, summary))
            found = True
        if (folder / "bench.csv").exists():
            parts.append(render_bench(folder))
            found = True
        if (folder / "scan.csv").exists():
            parts.append(render_scan(folder))
            found = True
    except (KeyError, ValueError) as e:
        raise ReportError(f"{folder} holds a malformed report file ({type(e).__name__}: {e})")
    if not found:
        raise ReportError(f"{folder} is not a detfuzz report folder (no fuzz summary.json, bench.csv or scan.csv)")
    return "\n".join(parts)


STYLE = """
body{font-family:sans-serif;margin:2em;color:#222;background:#fff}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:2px 8px;font-size:13px;text-align:left}
tr.bad td{background:#fde8e8}.grid{display:flex;flex-wrap:wrap;gap:1em}figure{margin:0 0 1em 0}
figcaption{font-size:12px;font-weight:bold}pre{white-space:pre-wrap;word-break:break-all;background:#f4f4f4;padding:4px;font-size:11px}
.fail{border-left:4px solid #d62728;padding-left:8px;margin:8px 0}.ctx{font-size:12px;color:#555}
"""


def main(argv):
    ap = argparse.ArgumentParser(description="Render detfuzz report folders as one HTML file.")
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--out", required=True, type=Path)
    a = ap.parse_args(argv)
    try:
        body = "\n".join(render_folder(f) for f in a.runs)
    except (ReportError, OSError) as e:
        print(f"html_report: error: {e}", file=sys.stderr)
        return 2
    page = (f"<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'><title>detfuzz report</title><style>{STYLE}</style></head>"
            f"<body><h1>detfuzz report</h1>\n{body}\n</body></html>\n")
    out_dir = a.out.resolve().parent
    try:  # written whole, then renamed into place
        fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=a.out.name + ".partial-")
        with os.fdopen(fd, "w") as f:
            f.write(page)
        os.replace(tmp, a.out)
    except OSError as e:
        print(f"html_report: error: cannot write {a.out}: {e.strerror or e}", file=sys.stderr)
        return 2
    print(f"report: {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
