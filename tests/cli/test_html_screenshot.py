#!/usr/bin/env python3
"""Render a detfuzz HTML report in headless Chromium and check what a kernel engineer reads first.

    test_html_screenshot.py DETFUZZ_BINARY

Makes a small CPU fuzz run with a planted mutant (so there are failures and a ULP histogram), a
copy of it whose targets carry the ULP distances a NaN (`inf`) and an infinity (4278190081 apart,
float32 -inf against +inf) give, and a bench.csv; renders them with `detfuzz report` and checks
the page: the overview comes first (the context line names the CPU, not "(- SMs)"; a matrix with a
row per op and impl, a column per property and a chip per dtype), a failing chip links to an
anchor that holds the shrunk record and its repro command, the bench plots come next and the full
target table last, and max ULP reads `inf` or `inf (NaN)`, never the raw distance. Then it
screenshots the page with `chromium --headless --screenshot` and decodes the PNG with zlib
(standard library only): the page must have many non-white pixels, red ones (the failing chips and
the histogram) and green ones (the chips of targets that held). Exit 77 (skipped) when Chromium is
not installed; ci/setup installs Debian's `chromium`.
"""
import json
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

SKIP = 77


def png_pixels(data):
    """Decode an 8-bit RGB/RGBA non-interlaced PNG into (width, height, rows of bytes, channels)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, color, _, _, interlace = header
    assert depth == 8 and color in (2, 6) and interlace == 0, f"unsupported PNG: depth {depth} color {color}"
    channels = 3 if color == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            a = line[x - channels] if x >= channels else 0
            b = prev[x]
            c = prev[x - channels] if x >= channels else 0
            if f == 1:
                line[x] = (line[x] + a) & 255
            elif f == 2:
                line[x] = (line[x] + b) & 255
            elif f == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, rows, channels


def visible_text(page):
    """The page's text as a reader sees it: no tags, attributes (tooltips) or repro commands."""
    page = re.sub(r"<pre>.*?</pre>", "", page, flags=re.S)
    return re.sub(r"<[^>]+>", " ", page)


def check_page(page, context):
    """The order, the overview matrix, the links from failing cells, the ULP text, the context line."""
    overview, bench, table = page.find("Overview:"), page.find("Bench:"), page.find("All targets:")
    assert 0 <= overview < bench < table, f"sections out of order: overview {overview}, bench {bench}, target table {table}"
    assert "<table class='matrix'>" in page, "no overview matrix"
    header = re.search(r"<table class='matrix'><tr>(.*?)</tr>", page).group(1)
    for prop in ("batch_slice", "batch_compose", "permute", "repeat", "variant_agree", "accuracy"):
        assert f"<th>{prop}</th>" in header, f"the matrix has no column {prop}: {header}"
    assert "mm / mutant-splitk" in page and "mm / invariant" in page, "the matrix lacks a row per (op, impl)"
    assert ">fp32</span>" in page, "no dtype chip in the matrix"
    links = re.findall(r"<a class='cell-link' href='#([\w-]+)'>", page)
    assert links, "no failing cell links to its record"
    records = dict(re.findall(r"<div class='fail[^']*' id='([\w-]+)'>(.*?)</div>", page, flags=re.S))
    rows = set(re.findall(r"<tr[^>]* id='([\w-]+)'>", page))
    for anchor in set(links):  # a record (with its repro), or the target's row where it has none
        assert anchor in records or anchor in rows, f"a failing cell links to #{anchor}, which is on the page nowhere"
        assert anchor not in records or "replay --case" in records[anchor], f"record #{anchor} has no repro command"
    assert any(a in records and "mutant-splitk" in records[a] for a in links), "the mutant's failing cell does not link to its record"
    text = visible_text(page)
    assert "4278190081" not in text, "a raw ULP distance is shown"
    assert re.search(r"<td><span class='ulp'[^>]*>inf</span></td>", page), "max ULP across an infinity is not shown as inf"
    assert "inf (NaN)" in text, "max ULP of a NaN is not shown as inf (NaN)"
    assert "- SMs" not in text, "the context line has an SM count of '-'"
    if context.get("device", "cpu") == "cpu":
        assert "SMs" not in text, "the context line speaks of SMs on the CPU"
        assert re.search(r"CPU</b>: \S", page), "the context line does not name the CPU"
    else:
        assert f"{context['device']}</b> ({context['sm_count']} SMs" in page, "the context line does not name the GPU"


def main():
    binary = sys.argv[1]
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        print("SKIPPED: chromium is not installed (ci/setup installs Debian's chromium)")
        return SKIP
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        run = subprocess.run([binary, "fuzz", "--backend", "cpu", "--op", "mm", "--impl", "invariant,mutant-splitk", "--dtype", "float32",
                              "--budget", "8s", "--seed", "9", "--no-corpus", "--no-shrink", "--quiet", "--out", str(work / "fuzz")],
                             capture_output=True, text=True)
        assert run.returncode == 1, f"the mutant campaign should fail: {run.returncode}\n{run.stdout}\n{run.stderr}"
        (work / "bench").mkdir()
        rows = ["op,impl,dtype,M,N,K,median_us,tflops,gbps,baseline_impl,cublas_median_us,speedup_vs_cublas,invariant_verified"]
        for m, s in ((1, 0.45), (8, 0.5), (32, 0.6), (128, 0.7), (512, 0.8)):
            rows.append(f"mm,invariant,bfloat16,{m},4096,4096,10,,,cublas,5,{s},yes")
            rows.append(f"mm,cublas,bfloat16,{m},4096,4096,5,,,cublas,5,1.0,yes")
        (work / "bench" / "bench.csv").write_text("\n".join(rows) + "\n")
        # A copy whose must-hold failure lies across an infinity and whose observed target met a NaN.
        ulp = work / "fuzz-ulp"
        shutil.copytree(work / "fuzz", ulp)
        summary = json.loads((ulp / "summary.json").read_text())
        targets = summary["results"]["targets"]
        mutant = next(t for t in targets if t["impl"] == "mutant-splitk" and t["failures"])
        mutant["max_ulp"] = "4278190081"
        held = next(t for t in targets if t["impl"] == "invariant" and t["cases"])
        held.update(failures=1, failure_rate=1 / held["cases"], max_ulp="inf", expectation="observed")
        (ulp / "summary.json").write_text(json.dumps(summary))
        html = work / "report.html"
        render = subprocess.run([binary, "report", str(work / "fuzz"), str(ulp), str(work / "bench"), "--out", str(html)],
                                capture_output=True, text=True)
        assert render.returncode == 0, render.stderr
        page = html.read_text()
        check_page(page, summary.get("context", {}))
        png = work / "shot.png"
        shot = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--screenshot={png}",
                               "--window-size=1000,1200", html.as_uri()], capture_output=True, text=True, timeout=120)
        assert png.exists(), f"chromium wrote no screenshot (exit {shot.returncode}): {shot.stderr[-2000:]}"
        width, height, pixels, channels = png_pixels(png.read_bytes())
        non_white = red = green = 0
        for line in pixels:
            for x in range(0, len(line), channels):
                r, g, b = line[x], line[x + 1], line[x + 2]
                if r < 245 or g < 245 or b < 245:
                    non_white += 1
                if r > 180 and g < 90 and b < 90:
                    red += 1
                if g > 190 and r < 180 and b < 180:
                    green += 1
        total = width * height
        print(f"screenshot {width}x{height}: {non_white} non-white pixels ({100 * non_white / total:.1f}%), {red} red, {green} green")
        assert non_white > total // 100, "the page rendered blank"
        assert red > 50, "no failing chip, failure bar or histogram was drawn"
        assert green > 50, "no chip of a target that held was drawn"
    print("html screenshot: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
