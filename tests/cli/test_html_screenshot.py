#!/usr/bin/env python3
"""Render a detfuzz HTML report in headless Chromium and check the screenshot is not blank.

    test_html_screenshot.py DETFUZZ_BINARY

Makes a small CPU fuzz run with a planted mutant (so there are failures and a ULP histogram),
a bench.csv and a scan.csv, renders them with `detfuzz report`, screenshots the page with
`chromium --headless --screenshot` and decodes the PNG with zlib (standard library only): the
page must have many non-white pixels, and red ones (the failure bars). Exit 77 (skipped) when
Chromium is not installed; ci/setup installs Debian's `chromium`.
"""
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
        html = work / "report.html"
        render = subprocess.run([binary, "report", str(work / "fuzz"), str(work / "bench"), "--out", str(html)], capture_output=True, text=True)
        assert render.returncode == 0, render.stderr
        png = work / "shot.png"
        shot = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--screenshot={png}",
                               "--window-size=1000,1200", html.as_uri()], capture_output=True, text=True, timeout=120)
        assert png.exists(), f"chromium wrote no screenshot (exit {shot.returncode}): {shot.stderr[-2000:]}"
        width, height, pixels, channels = png_pixels(png.read_bytes())
        non_white = red = 0
        for line in pixels:
            for x in range(0, len(line), channels):
                r, g, b = line[x], line[x + 1], line[x + 2]
                if r < 245 or g < 245 or b < 245:
                    non_white += 1
                if r > 180 and g < 90 and b < 90:
                    red += 1
        total = width * height
        print(f"screenshot {width}x{height}: {non_white} non-white pixels ({100 * non_white / total:.1f}%), {red} red")
        assert non_white > total // 100, "the page rendered blank"
        assert red > 50, "no failure bar or histogram was drawn"
    print("html screenshot: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
