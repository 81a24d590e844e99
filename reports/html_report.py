#!/usr/bin/env python3
"""Render detfuzz report folders as one self-contained HTML file (what `detfuzz report` runs).

    python3 reports/html_report.py RUN_DIR [RUN_DIR ...] --out report.html

The page is in the order a kernel engineer reads it:
  1. overview, per fuzz folder (summary.json with results): the device line and the verdict, then a
     matrix with one row per (op, impl), one column per property and one cell per dtype, coloured by
     failure rate; a failing cell links to the target's shrunk record and repro command;
  2. bench (bench.csv): speedup against the baseline (cuBLAS for mm) by M, one plot per (N, K, dtype);
     scan (scan.csv): for each impl, the M where row 0 differs from the 1-row product and where the
     first M-1 rows change;
  3. the shrunk failures (failures.csv) with their repro commands and, where `detfuzz replay
     --sanitize` ran on them (sanitize.csv), compute-sanitizer's first report (the error, the
     kernel, the access, the thread); a histogram of the ULP distance of failing cases per target
     (cases.csv);
  4. last, the full target table.
A ULP distance is shown as `inf (NaN)` when a NaN was involved and `inf` when the two values lie
across an infinity, never as the raw distance between bit patterns.
The page is static HTML with inline SVG and CSS: no script, no font, nothing fetched (in-page
links only). Only the standard library. Exit 2 with a one-line error for a folder that is not a
detfuzz report.
"""
import argparse
import csv
import html
import json
import math
import os
import re
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
ULP_BUCKETS = ["1", "2-3", "4-15", "16-255", "256-64k", ">64k", "inf", "NaN"]
ULP_BOUNDS = [(1, 1), (2, 3), (4, 15), (16, 255), (256, 65535)]
DTYPE_SHORT = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64", "int32": "i32", "int64": "i64",
               "int16": "i16", "int8": "i8", "uint8": "u8", "float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2"}
# The ULP distance from +0 to +inf of the widest output a dtype's cases compare: a distance at least
# this large lies across an infinity (or over the whole range), so "inf" says more than the number.
INF_DISTANCE = {"float64": 0x7FF0000000000000}
INF_DISTANCE_DEFAULT = 0x7F800000  # float32 (16-bit outputs never reach it: at most 65535 apart)
HELD, ERROR_ONLY, NOT_RUN = "#9fd89a", "#f5a623", "#e6e6e6"


class ReportError(Exception):
    pass


def esc(s):
    return html.escape(str(s), quote=True)


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def short_dtype(d):
    return DTYPE_SHORT.get(d, d)


def ulp_kind(text, dtype=""):
    """Classify a max_ulp field: ("nan", None), ("inf", n), ("num", n) or ("none", None)."""
    text = "" if text is None else str(text).strip()
    if text == "":
        return "none", None
    if text.startswith("inf"):
        return "nan", None  # the diff engine writes inf when one side is a NaN
    try:
        u = int(float(text))
    except ValueError:
        return "none", None
    if u >= INF_DISTANCE.get(dtype, INF_DISTANCE_DEFAULT):
        return "inf", u
    return "num", u


def ulp_html(text, dtype=""):
    """max ULP as a reader wants it: a count, `inf` across an infinity, `inf (NaN)` for a NaN."""
    kind, u = ulp_kind(text, dtype)
    if kind == "nan":
        return "<span class='ulp' title='a NaN on one side (a NaN equals only the same NaN pattern)'>inf (NaN)</span>"
    if kind == "inf":
        return f"<span class='ulp' title='{u} representable values apart: across an infinity, or over the whole range'>inf</span>"
    if kind == "num":
        if u >= 1_000_000:
            return f"<span class='ulp' title='{u} ULPs: the values differ in sign or by orders of magnitude'>{u:.1e}</span>".replace("e+0", "e").replace("e+", "e")
        return str(u)
    return "-"


def ulp_plain(text, dtype=""):
    return re.sub(r"<[^>]+>", "", ulp_html(text, dtype))


def detail_text(detail, dtype=""):
    """A record's detail with its "max ULP N" written as the report writes max ULP."""
    return re.sub(r"max ULP (\d+)", lambda m: "max ULP " + ulp_plain(m.group(1), dtype), detail or "")


def ulp_bucket(text, dtype=""):
    kind, u = ulp_kind(text, dtype)
    if kind == "nan":
        return ULP_BUCKETS.index("NaN")
    if kind == "inf":
        return ULP_BUCKETS.index("inf")
    if kind == "num":
        for i, (lo, hi) in enumerate(ULP_BOUNDS):
            if lo <= u <= hi:
                return i
        return ULP_BUCKETS.index(">64k")
    return ULP_BUCKETS.index("NaN")


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


# ---------------------------------------------------------------------------------------------
# The context line

def version_text(v, kind):
    """CUDA runtime 13000 -> 13.0; cuBLAS 130100 -> 13.1.0; anything else as it is."""
    if not isinstance(v, int) or v <= 0:
        return str(v)
    if kind == "cuda":
        return f"{v // 1000}.{(v % 1000) // 10}"
    if kind == "cublas" and v >= 10000:
        return f"{v // 10000}.{(v // 100) % 100}.{v % 100}"
    return str(v)


def context_line(summary):
    """What ran, on what: a GPU's name, SMs, compute capability and driver; on the CPU its model and threads."""
    ctx = summary.get("context", {}) or {}
    device = ctx.get("device") or "?"
    parts = []
    if ctx.get("sm_count") and device != "cpu":
        gpu = f"<b>{esc(device)}</b> ({esc(ctx['sm_count'])} SMs"
        if ctx.get("compute_capability"):
            gpu += f", compute capability {esc(ctx['compute_capability'])}"
        gpu += ")"
        if ctx.get("driver"):
            gpu += f", driver {esc(ctx['driver'])}"
        if ctx.get("cuda_runtime"):
            gpu += f", CUDA {esc(version_text(ctx['cuda_runtime'], 'cuda'))}"
        if ctx.get("cublas"):
            gpu += f", cuBLAS {esc(version_text(ctx['cublas'], 'cublas'))}"
        parts.append(gpu)
    else:
        cpu = f"<b>CPU</b>: {esc(ctx.get('cpu') or 'unknown model')}"
        if ctx.get("cpu_threads"):
            n = ctx["cpu_threads"]
            cpu += f", {esc(n)} ATen thread{'s' if n != 1 else ''}"
        parts.append(cpu + " (no GPU)" if "cuda_runtime" in ctx else cpu)
    if ctx.get("libtorch"):
        parts.append(f"libtorch {esc(ctx['libtorch'])}")
    commit = str(ctx.get("git_commit", "") or "")
    if commit:
        parts.append(f"commit {esc(commit[:12])}{' (dirty tree)' if ctx.get('git_dirty') else ''}")
    if ctx.get("hostname"):
        parts.append(f"host {esc(ctx['hostname'])}")
    if summary.get("started"):
        parts.append(f"started {esc(summary['started'])}")
    env = {k: v for k, v in (ctx.get("env") or {}).items() if v is not None}
    line = " · ".join(parts)
    if env:
        line += "<br>" + " ".join(f"<code>{esc(k)}={esc(v)}</code>" for k, v in sorted(env.items()))
    command = summary.get("command", "")
    return f"<p class='ctx'>{line}" + (f"<br><code>{esc(command)}</code>" if command else "") + "</p>"


# ---------------------------------------------------------------------------------------------
# Fuzz folders

class FuzzRun:
    """One fuzz folder: its summary, targets, failure records and the page ids that link them."""

    def __init__(self, folder, summary, key):
        self.folder, self.summary, self.key = folder, summary, key
        self.res = summary["results"]
        self.targets = self.res["targets"]
        for t in self.targets:  # fields every target has; a merged or older summary may lack some
            t.setdefault("errors", 0)
            t.setdefault("failures", 0)
            t.setdefault("backend", summary.get("backend", ""))
        self.record_lines, self.records = [], []
        path = folder / "failures.csv"
        if path.exists():
            lines = path.read_text().splitlines()
            self.records = read_csv(path)
            # a record's line is its CSV row as written (records hold no newline)
            self.record_lines = lines[1:len(self.records) + 1]
        # replay --sanitize's annotated records: the sanitizer's report of a record, by its case
        self.sanitized = {}
        sanitize_path = folder / "sanitize.csv"
        if sanitize_path.exists():
            for r in read_csv(sanitize_path):
                report = sanitizer_report(r.get("detail", ""))
                if report:
                    self.sanitized[case_key(r)] = (r, report)
        self.record_of = {}
        for i, r in enumerate(self.records):
            self.record_of.setdefault((r.get("backend", ""), r["op"], r["impl"], r["property"], r["dtype"]), i)
        self.program = (summary.get("command") or "detfuzz").split(" ")[0]
        self.backends = sorted({t["backend"] for t in self.targets})

    def target_id(self, i):
        return f"{self.key}-t{i}"

    def record_id(self, i):
        return f"{self.key}-r{i}"

    def row_name(self, t):
        prefix = f"{t['backend']} " if len(self.backends) > 1 else ""
        return f"{prefix}{t['op']} / {t['impl']}"

    def repro(self, i):
        return self.program + " replay --case '" + self.record_lines[i].replace("'", "'\\''") + "'"


def failed_count(t):
    return t["failures"] + t["errors"]


def cell_style(t):
    """Fill, text colour, and an outline for one target's chip."""
    if not t["cases"]:
        return NOT_RUN, "#777", ""
    if not t["failures"] and not t["errors"]:
        return HELD, "#1d4d1a", ""
    outline = "outline:2px solid #000;outline-offset:-1px;font-weight:bold;" if t["expectation"] == "must-hold" else ""
    if not t["failures"]:
        return ERROR_ONLY, "#222", outline
    rate = failed_count(t) / t["cases"]
    s = min(1.0, max(0.0, (math.log10(max(rate, 1e-4)) + 3) / 3))  # 0.1% or less palest, 100% darkest
    lo, hi = (248, 196, 196), (198, 40, 40)
    rgb = tuple(round(a + (b - a) * s) for a, b in zip(lo, hi))
    return "#%02x%02x%02x" % rgb, ("#fff" if s > 0.45 else "#222"), outline


def chip(run, ti, t):
    fill, ink, outline = cell_style(t)
    label = short_dtype(t["dtype"])
    name = f"{t['op']}/{t['impl']}/{t['property']}/{t['dtype']}"
    if not t["cases"]:
        title = f"{name}: no case ran"
    else:
        title = (f"{name} ({t['expectation']}): {t['failures']} failed, {t['errors']} errors of {t['cases']} cases "
                 f"({100 * failed_count(t) / t['cases']:.1f}%), max ULP {ulp_plain(t.get('max_ulp'), t['dtype'])}")
    span = f"<span class='chip' style='background:{fill};color:{ink};{outline}' title='{esc(title)}'>{esc(label)}</span>"
    if t["cases"] and failed_count(t):
        ri = run.record_of.get((t["backend"], t["op"], t["impl"], t["property"], t["dtype"]))
        href = run.record_id(ri) if ri is not None else run.target_id(ti)
        return f"<a class='cell-link' href='#{href}'>{span}</a>"
    return span


def overview_matrices(run):
    """One matrix per op family (ops whose impls share a property set): rows (op, impl), columns properties."""
    props_of_op = defaultdict(list)
    for t in run.targets:
        if t["property"] not in props_of_op[t["op"]]:
            props_of_op[t["op"]].append(t["property"])
    families = {}  # property tuple -> ordered ops
    for t in run.targets:
        key = tuple(props_of_op[t["op"]])
        families.setdefault(key, [])
        if t["op"] not in families[key]:
            families[key].append(t["op"])
    cells = defaultdict(list)  # (row, property) -> [(index, target)]
    rows = []
    for i, t in enumerate(run.targets):
        row = (t["backend"], t["op"], t["impl"])
        if row not in rows:
            rows.append(row)
        cells[(row, t["property"])].append((i, t))
    out = []
    for props, ops in families.items():
        out.append("<table class='matrix'><tr><th>op / impl</th>" + "".join(f"<th>{esc(p)}</th>" for p in props) + "</tr>")
        for row in rows:
            if row[1] not in ops:
                continue
            ts = [t for p in props for _, t in cells.get((row, p), [])]
            expect = ts[0]["expectation"] if ts else ""
            cases = sum(t["cases"] for t in ts)
            failed = [t for t in ts if failed_count(t)]
            cls = " class='bad'" if any(t["expectation"] == "must-hold" for t in failed) else ""
            out.append(f"<tr{cls}><td class='rowname'>{esc(run.row_name(ts[0]))}<br><span class='sub'>{esc(expect)}, {cases} cases</span></td>")
            for p in props:
                entries = cells.get((row, p), [])
                inner = "".join(chip(run, i, t) for i, t in entries) if entries else "<span class='sub'>-</span>"
                out.append(f"<td class='cells'>{inner}</td>")
            out.append("</tr>")
        out.append("</table>")
    return "\n".join(out)


LEGEND = ("<p class='legend'>"
          f"<span class='chip' style='background:{HELD};color:#1d4d1a'>held</span> every case held "
          "<span class='chip' style='background:#f8c4c4'>0.1%</span>"
          "<span class='chip' style='background:#e08585'>3%</span>"
          "<span class='chip' style='background:#c62828;color:#fff'>100%</span> observed failure rate "
          "<span class='chip' style='background:#c62828;color:#fff;outline:2px solid #000;outline-offset:-1px;font-weight:bold'>must-hold</span> a must-hold property failed "
          f"<span class='chip' style='background:{ERROR_ONLY}'>error</span> the impl threw "
          f"<span class='chip' style='background:{NOT_RUN};color:#777'>none</span> no case ran. "
          "A failing cell links to its shrunk record and repro command.</p>")


def render_overview(run):
    res, s = run.res, run.summary
    must = [t for t in run.targets if t["expectation"] == "must-hold" and failed_count(t)]
    corpus = res.get("corpus", {}) or {}
    corpus_must = corpus.get("must_hold_failures", 0)
    observed = sum(1 for t in run.targets if t["expectation"] != "must-hold" and failed_count(t))
    if must or corpus_must:
        verdict = (f"<p class='verdict bad'>MUST-HOLD PROPERTY FAILED: {len(must)} target{'s' if len(must) != 1 else ''}"
                   + (f", {corpus_must} corpus records" if corpus_must else "") + "</p>")
    else:
        verdict = "<p class='verdict good'>every must-hold property held</p>"
    elapsed = res.get("elapsed_s", 0) or 0
    ran = sum(1 for t in run.targets if t["cases"])
    facts = (f"{res.get('cases', 0)} cases in {elapsed:.1f} s ({res.get('cases', 0) / max(elapsed, 1e-9):.0f} cases/s), "
             f"{ran} of {len(run.targets)} targets ran, {observed} observed targets showed failures; "
             f"seed {esc(s.get('seed', '?'))}, backend {esc(s.get('backend', '?'))}, exit {esc(s.get('exit_code', '?'))}; "
             f"corpus: {corpus.get('replayed', 0)} replayed")
    if s.get("interrupted"):
        facts += "; <b>interrupted</b> (the report holds what ran)"
    shard = s.get("shard") or {}
    if shard.get("count", 1) > 1:
        facts += f"; shard {shard.get('index')}/{shard.get('count')}"
    return "\n".join([f"<section class='overview'><h2>Overview: {esc(run.folder.name)}</h2>", context_line(s), verdict,
                      f"<p>{facts}.</p>", LEGEND, overview_matrices(run), "</section>"])


def case_key(r):
    """What identifies a record's case (its outcome and detail aside)."""
    return tuple(r.get(k, "") for k in ("op", "impl", "property", "backend", "dtype", "shape", "layout", "dist", "seed", "params"))


def sanitizer_report(detail):
    """'memcheck: Invalid __global__ write ...' from an annotated record's detail, or ''."""
    at = detail.find("compute-sanitizer ")
    return detail[at + len("compute-sanitizer "):] if at >= 0 else ""


def sanitizer_html(report):
    tool, _, text = report.partition(": ")
    return (f"<div class='sanitizer'><b>compute-sanitizer {esc(tool)}</b> (first report): "
            + "<br>".join(esc(part.strip()) for part in text.split(";")) + "</div>")


def render_sanitized_alone(run):
    """Records of sanitize.csv with no failure record of the same case (e.g. a corpus record)."""
    failed = {case_key(f) for f in run.records}
    alone = [(r, rep) for key, (r, rep) in run.sanitized.items() if key not in failed]
    if not alone:
        return ""
    out = [f"<p>{len(alone)} more records ran under compute-sanitizer (sanitize.csv):</p>"]
    for r, rep in alone:
        out.append(f"<div class='fail'><b>{esc(r['op'])}/{esc(r['impl'])}/{esc(r['property'])}</b> {esc(r['dtype'])} "
                   f"shape {esc(r['shape'])} {esc(r['params'])}; {esc(r.get('outcome', ''))}{sanitizer_html(rep)}</div>")
    return "\n".join(out)


def render_failures(run):
    if not run.records:
        return f"<h2>Failures: {esc(run.folder.name)}</h2><p>No failure records.</p>" + render_sanitized_alone(run)
    out = [f"<h2>Failures: {esc(run.folder.name)}</h2>",
           f"<p>{len(run.records)} replayable records of failures.csv: each target's first failure, shrunk, and failing corpus records.</p>"]
    must = {(t["backend"], t["op"], t["impl"]) for t in run.targets if t["expectation"] == "must-hold"}
    order = sorted(range(len(run.records)), key=lambda i: ((run.records[i].get("backend", ""), run.records[i]["op"], run.records[i]["impl"]) not in must, i))
    for i in order:
        r = run.records[i]
        is_must = (r.get("backend", ""), r["op"], r["impl"]) in must
        tag = "<span class='tag must'>must-hold</span>" if is_must else "<span class='tag'>observed</span>"
        out.append(f"<div class='fail{' must' if is_must else ''}' id='{run.record_id(i)}'>{tag} <b>{esc(r['op'])}/{esc(r['impl'])}/{esc(r['property'])}</b> "
                   f"{esc(r['dtype'])} shape {esc(r['shape'])} layout {esc(r['layout'])} dist {esc(r['dist'])} {esc(r['params'])}; "
                   f"{esc(r.get('outcome', ''))}, {esc(r.get('differing', ''))} of {esc(r.get('numel', ''))} elements differ, "
                   f"max ULP {ulp_html(r.get('max_ulp'), r['dtype'])}<br>{esc(detail_text(r.get('detail'), r['dtype']))}"
                   f"{sanitizer_html(run.sanitized[case_key(r)][1]) if case_key(r) in run.sanitized else ''}"
                   f"<pre>{esc(run.repro(i))}</pre></div>")
    out.append(render_sanitized_alone(run))
    return "\n".join(out)


def render_histograms(run):
    path = run.folder / "cases.csv"
    if not path.exists():
        return ""
    hist = defaultdict(lambda: [0] * len(ULP_BUCKETS))
    for c in read_csv(path):
        if c["outcome"] == "fail" and c["source"] == "fuzz":
            hist[f"{c['op']}/{c['impl']}/{c['property']}/{c['dtype']}"][ulp_bucket(c["max_ulp"], c["dtype"])] += 1
    if not hist:
        return ""
    out = ["<h3>ULP distance of failing cases, per target</h3><div class='grid'>"]
    for name, counts in sorted(hist.items()):
        out.append(f"<figure><figcaption>{esc(name)}</figcaption>{svg_bars(counts, ULP_BUCKETS)}</figure>")
    out.append("</div>")
    return "\n".join(out)


def render_target_table(run):
    out = [f"<h2>All targets: {esc(run.folder.name)}</h2>",
           "<table class='targets'><tr><th>target</th><th>expectation</th><th>cases</th><th>failed</th><th>errors</th>"
           "<th>failure rate</th><th>max ULP</th><th>max |diff|</th><th>cases/s</th></tr>"]
    for i, t in enumerate(run.targets):
        failed = failed_count(t)
        rate = failed / t["cases"] if t["cases"] else 0.0
        name = f"{t['op']}/{t['impl']}/{t['property']}/{t['dtype']}" + (f" ({t['backend']})" if len(run.backends) > 1 else "")
        cls = " class='bad'" if failed and t["expectation"] == "must-hold" else ""
        ri = run.record_of.get((t["backend"], t["op"], t["impl"], t["property"], t["dtype"]))
        label = f"<a href='#{run.record_id(ri)}'>{esc(name)}</a>" if ri is not None and failed else esc(name)
        diff = t.get("max_abs_diff")
        diff_text = f"{diff:.3g}" if isinstance(diff, (int, float)) and failed else "-"
        out.append(f"<tr{cls} id='{run.target_id(i)}'><td>{label}</td><td>{esc(t['expectation'])}</td><td>{t['cases']}</td>"
                   f"<td>{t['failures']}</td><td>{t['errors']}</td><td>{rate_bar(rate)} {100 * rate:.1f}%</td>"
                   f"<td>{ulp_html(t.get('max_ulp'), t['dtype']) if failed else '-'}</td><td>{diff_text}</td>"
                   f"<td>{t.get('cases_per_s', 0) or 0:.0f}</td></tr>")
    out.append("</table>")
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# Bench and scan folders

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


def bench_row_op(r):
    """The op of a bench row, with its page size and KV heads where they are not the defaults (16, 8)."""
    notes = [f"{key}={r[key]}" for key, default in (("page", "16"), ("kv_heads", "8"))
             if r.get(key) not in (None, "", default)]
    return " ".join([r["op"]] + notes)


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
            out.append(f"<tr><td>{esc(bench_row_op(r))}</td><td>{esc(r['impl'])}</td><td>{esc(r['dtype'])}</td><td>{esc(r['M'])}</td><td>{esc(r['N'])}</td>"
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


def load_folder(folder, key):
    if not folder.is_dir():
        raise ReportError(f"{folder} is not a folder")
    summary = {}
    if (folder / "summary.json").exists():
        try:
            summary = json.loads((folder / "summary.json").read_text())
        except ValueError as e:
            raise ReportError(f"{folder}/summary.json is not JSON ({e})")
    fuzz = None
    try:
        if "results" in summary:
            fuzz = FuzzRun(folder, summary, key)
    except (KeyError, TypeError, ValueError) as e:
        raise ReportError(f"{folder} holds a malformed report file ({type(e).__name__}: {e})")
    bench, scan = (folder / "bench.csv").exists(), (folder / "scan.csv").exists()
    if not (fuzz or bench or scan):
        raise ReportError(f"{folder} is not a detfuzz report folder (no fuzz summary.json, bench.csv or scan.csv)")
    return {"folder": folder, "summary": summary, "fuzz": fuzz, "bench": bench, "scan": scan}


def render_page(runs):
    """Overview first, then the bench and scan plots, then the failures, last the full target tables."""
    parts = []
    fuzz_runs = [r["fuzz"] for r in runs if r["fuzz"]]
    try:
        for run in fuzz_runs:
            parts.append(render_overview(run))
        for r in runs:
            if r["bench"] or r["scan"]:
                if not r["fuzz"] and r["summary"]:
                    parts.append(context_line(r["summary"]))
                if r["bench"]:
                    parts.append(render_bench(r["folder"]))
                if r["scan"]:
                    parts.append(render_scan(r["folder"]))
        for run in fuzz_runs:
            parts.append(render_failures(run))
            parts.append(render_histograms(run))
        for run in fuzz_runs:
            parts.append(render_target_table(run))
    except (KeyError, TypeError, ValueError) as e:
        raise ReportError(f"a report folder holds a malformed report file ({type(e).__name__}: {e})")
    return "\n".join(p for p in parts if p)


STYLE = """
body{font-family:sans-serif;margin:2em;color:#222;background:#fff}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:2px 8px;font-size:13px;text-align:left}
tr.bad td{background:#fde8e8}.grid{display:flex;flex-wrap:wrap;gap:1em}figure{margin:0 0 1em 0}
figcaption{font-size:12px;font-weight:bold}pre{white-space:pre-wrap;word-break:break-all;background:#f4f4f4;padding:4px;font-size:11px}
.fail{border-left:4px solid #e08585;padding-left:8px;margin:8px 0;font-size:13px}.fail.must{border-left-color:#c62828}
.fail:target{background:#fff6d6}.ctx{font-size:12px;color:#444}.sub{font-size:11px;color:#777}
.verdict{font-size:16px;font-weight:bold;padding:4px 8px;display:inline-block}.verdict.good{background:#e3f4e1;color:#1d4d1a}
.verdict.bad{background:#c62828;color:#fff}
table.matrix td.cells{white-space:nowrap;padding:3px 4px}table.matrix td.rowname{white-space:nowrap}
table.matrix tr.bad td{background:#fff}table.matrix tr.bad td.rowname{background:#fde8e8}
.chip{display:inline-block;min-width:2.6em;text-align:center;font-size:11px;padding:2px 3px;margin:1px;border-radius:3px}
a.cell-link{text-decoration:none}.legend{font-size:12px}.legend .chip{margin-right:2px}
.tag{font-size:11px;padding:1px 4px;border-radius:3px;background:#eee}.tag.must{background:#c62828;color:#fff}
.ulp{border-bottom:1px dotted #888}.sanitizer{background:#fff1e0;border:1px solid #f0b070;padding:4px;margin:4px 0;font-size:12px}table.targets td{white-space:nowrap}
"""


def main(argv):
    ap = argparse.ArgumentParser(description="Render detfuzz report folders as one HTML file.")
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--out", required=True, type=Path)
    a = ap.parse_args(argv)
    try:
        runs = [load_folder(f, f"f{i}") for i, f in enumerate(a.runs)]
        body = render_page(runs)
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
