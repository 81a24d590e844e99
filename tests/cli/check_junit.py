#!/usr/bin/env python3
"""Check a detfuzz JUnit file against the JUnit XML schema CI systems read (the Jenkins/Ant
junit-10 shape: testsuites > testsuite > properties?, testcase*; testcase > skipped | failure |
error | system-out), that the totals agree with the testcases, and what detfuzz promises:

    check_junit.py FILE [--failing TARGET ...] [--passing TARGET ...]

TARGET is classname/name, e.g. detfuzz.cpu.mm.mutant-splitk/batch_slice/float32. A --failing
target must carry a <failure> whose text holds its shrunk record and a repro command.
Exit 0 when it all holds; 1 with one line per problem otherwise.
"""
import argparse
import sys
import xml.etree.ElementTree as ET

TESTCASE_CHILDREN = {"skipped", "failure", "error", "system-out", "system-err"}
SUITE_CHILDREN = {"properties", "testcase", "system-out", "system-err"}


def number(el, attr, kind, problems):
    v = el.get(attr)
    if v is None:
        problems.append(f"<{el.tag} name={el.get('name')!r}> lacks {attr}")
        return 0
    try:
        x = kind(v)
        if x < 0:
            raise ValueError
        return x
    except ValueError:
        problems.append(f"<{el.tag}> {attr}={v!r} is not a non-negative {kind.__name__}")
        return 0


def check(path, failing, passing):
    problems = []
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError) as e:
        return [f"{path}: not well-formed XML ({e})"]
    if root.tag != "testsuites":
        return [f"root element is <{root.tag}>, expected <testsuites>"]
    cases = {}
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for suite in root:
        if suite.tag != "testsuite":
            problems.append(f"<testsuites> holds <{suite.tag}>")
            continue
        for attr in ("name", "timestamp", "hostname"):
            if not suite.get(attr):
                problems.append(f"<testsuite> lacks {attr}")
        counted = {k: number(suite, k, int, problems) for k in totals}
        number(suite, "time", float, problems)
        seen = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        for child in suite:
            if child.tag not in SUITE_CHILDREN:
                problems.append(f"<testsuite> holds <{child.tag}>")
            if child.tag == "properties":
                for p in child:
                    if p.tag != "property" or p.get("name") is None or p.get("value") is None:
                        problems.append("<properties> holds something other than <property name value>")
            if child.tag != "testcase":
                continue
            seen["tests"] += 1
            for attr in ("classname", "name"):
                if not child.get(attr):
                    problems.append(f"<testcase> lacks {attr}")
            number(child, "time", float, problems)
            outcome = [c.tag for c in child if c.tag in ("skipped", "failure", "error")]
            for c in child:
                if c.tag not in TESTCASE_CHILDREN:
                    problems.append(f"<testcase> holds <{c.tag}>")
                if c.tag in ("failure", "error") and not c.get("message"):
                    problems.append(f"<{c.tag}> of {child.get('name')} lacks a message")
            if len(outcome) > 1:
                problems.append(f"testcase {child.get('name')} has {len(outcome)} outcomes")
            for tag, key in (("failure", "failures"), ("error", "errors"), ("skipped", "skipped")):
                if tag in outcome:
                    seen[key] += 1
            cases[f"{child.get('classname')}/{child.get('name')}"] = child
        for k in totals:
            if counted[k] != seen[k]:
                problems.append(f"<testsuite {suite.get('name')}> says {k}={counted[k]}, its testcases make {seen[k]}")
            totals[k] += seen[k]
    for k, v in totals.items():
        if number(root, k, int, problems) != v:
            problems.append(f"<testsuites> says {k}={root.get(k)}, its suites make {v}")
    for t in failing:
        c = cases.get(t)
        f = c.find("failure") if c is not None else None
        if f is None:
            problems.append(f"{t}: no failing testcase (testcases: {', '.join(sorted(cases))})")
        elif "replay --case '" not in (f.text or "") or "shrunk record" not in (f.text or ""):
            problems.append(f"{t}: the failure text lacks the shrunk record or the repro command")
    for t in passing:
        c = cases.get(t)
        if c is None or c.find("failure") is not None or c.find("error") is not None:
            problems.append(f"{t}: not a passing testcase")
    return problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--failing", nargs="*", default=[])
    ap.add_argument("--passing", nargs="*", default=[])
    a = ap.parse_args()
    problems = check(a.file, a.failing, a.passing)
    for p in problems:
        print(f"check_junit: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
