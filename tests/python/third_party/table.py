#!/usr/bin/env python3
"""Markdown table of one or more campaigns' summary.json: one row per op (per impl where the impl is
a user's operator, NS::name, as FlashInfer's paged attention variants are), one column per property
(held, or the dtypes that failed it), the first failing record's shape and detail, cases and
cases/s. ci/gpu-check python-kernels prints it; README's tables of third-party kernels are these.

    python3 tests/python/third_party/table.py REPORT_DIR [REPORT_DIR ...]   (the detfuzz package on PYTHONPATH)
    python3 tests/python/third_party/table.py --records REPORT_DIR ...      each failing target's shrunk record
"""
import collections
import json
import sys

from detfuzz import record_fields


def rows(report_dirs):
    by_op = collections.OrderedDict()
    for d in report_dirs:
        try:
            summary = json.load(open(f"{d}/summary.json"))
        except (OSError, ValueError) as e:
            print(f"| {d} | no summary ({e.__class__.__name__}) |")
            continue
        for t in summary["results"]["targets"]:
            by_op.setdefault(t["impl"] if "::" in t["impl"] else t["op"], []).append(t)
    return by_op


def main(dirs):
    by_op = rows(dirs)
    props = []
    for targets in by_op.values():
        for t in targets:
            if t["property"] not in props:
                props.append(t["property"])
    print("| op | " + " | ".join(props) + " | first failing record | cases | cases/s |")
    print("|---" * (len(props) + 4) + "|")
    for op, targets in by_op.items():
        cells, first = [], ""
        for p in props:
            ts = [t for t in targets if t["property"] == p]
            if not ts or not sum(t["cases"] for t in ts):
                cells.append("-")
                continue
            failed = sorted({t["dtype"] for t in ts if t["failures"]})
            errored = sorted({t["dtype"] for t in ts if t["errors"] and not t["failures"]})
            cell = ("**fails** " + ",".join(failed)) if failed else ""
            cell += ("; " if cell and errored else "") + ("errors " + ",".join(errored) if errored else "")
            cells.append(cell or "held")
            for t in ts:
                if not first and t.get("minimal"):
                    rec = record_fields(t["minimal"])
                    detail = rec["detail"].split(";")[0][:90]
                    first = f"{rec['property']} {rec['dtype']} {rec['shape']} {rec['params']}: {rec['outcome']}, {detail}"
        cases = sum(t["cases"] for t in targets)
        seconds = sum(t["seconds"] for t in targets)
        name = op.split("::")[-1]
        print(f"| {name} | " + " | ".join(cells) + f" | {first or '-'} | {cases} | {cases / max(seconds, 1e-9):.0f} |")


def records(dirs):
    for name, targets in rows(dirs).items():
        for t in targets:
            if t.get("minimal"):
                rec = record_fields(t["minimal"])
                print(f"- {name} {rec['property']} {rec['dtype']}: shape {rec['shape']} {rec['params']}: "
                      f"{rec['outcome']}, {rec['detail'][:160]}")


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1:] == ["--records"]:
        sys.exit("usage: table.py [--records] REPORT_DIR [REPORT_DIR ...]")
    (records if sys.argv[1] == "--records" else main)([a for a in sys.argv[1:] if a != "--records"])
