#!/usr/bin/env bash
# Every subcommand's --help lists the flags subcommands share in one order and with one wording
# (harness/cli_common.h, flag_text), and `merge` takes --out as the other report writers do.
set -u
bin=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pass=0 fail=0
for sub in fuzz replay list bench merge scan laps gate report; do
  "$bin" "$sub" --help >"$work/$sub.txt" 2>&1 || { fail=$((fail + 1)); echo "FAIL $sub --help"; }
done
python3 - "$work" <<'PY' && pass=$((pass + 1)) || fail=$((fail + 1))
import re, sys
work = sys.argv[1]
subs = ["fuzz", "replay", "list", "bench", "merge", "scan", "laps", "gate", "report"]
# The shared flags, in the order every subcommand lists them.
order = ["--backend", "--op", "--impl", "--property", "--dtype", "--seed", "--budget", "--out",
         "--load", "--spec", "--mode", "--cpu-threads", "--case-timeout"]
# Flags of the same name whose meaning differs: laps's --impl and --dtype name the one model's,
# report's --out is an HTML file, replay's the folder of --sanitize's sanitize.csv.
differ = {("laps", "--impl"), ("laps", "--dtype"), ("report", "--out"), ("replay", "--out")}

def options(text):
    lines = text.splitlines()
    out = []
    for k, line in enumerate(lines):
        m = re.match(r"^  (-h,)?(--[a-z][a-z0-9-]*)(.*)$", line)
        if not m:
            continue
        flag, rest = m.group(2), m.group(3)
        parts = re.split(r"\s{2,}", rest.strip(), maxsplit=1)
        desc = parts[1] if len(parts) == 2 else ""
        if not desc and k + 1 < len(lines) and re.match(r"^\s{10,}\S", lines[k + 1]):
            desc = lines[k + 1].strip()
        out.append((flag, desc))
    return out

problems = []
wording = {}
for sub in subs:
    opts = options(open(f"{work}/{sub}.txt").read())
    shared = [f for f, _ in opts if f in order]
    if shared != sorted(shared, key=order.index):
        problems.append(f"{sub}: shared flags out of order: {shared}")
    for f, d in opts:
        if f in order and (sub, f) not in differ:
            wording.setdefault(f, {}).setdefault(d, []).append(sub)
for f, ds in wording.items():
    if len(ds) > 1:
        problems.append(f"{f} is worded differently: " + "; ".join(f"{subs_}: {d!r}" for d, subs_ in ds.items()))
used = {f for f, ds in wording.items() if sum(len(v) for v in ds.values()) > 1}
for f in ["--backend", "--impl", "--dtype", "--seed", "--out", "--load", "--spec", "--mode", "--cpu-threads", "--case-timeout"]:
    if f not in used:
        problems.append(f"{f}: expected in at least two subcommands")
for p in problems:
    print("FAIL", p)
sys.exit(1 if problems else 0)
PY
grep -q -- "--out" "$work/merge.txt" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL merge --help has no --out"; }
grep -q -- "--step-tokens" "$work/laps.txt" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL laps --help has no --step-tokens"; }
"$bin" merge >/dev/null 2>&1; [ $? -eq 2 ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL merge with nothing: wanted exit 2"; }
"$bin" merge "$work/only-out" >/dev/null 2>"$work/err"; [ $? -eq 2 ] && grep -q "merge needs" "$work/err" && pass=$((pass + 1)) \
  || { fail=$((fail + 1)); echo "FAIL merge OUT without shards: wanted a one-line error, exit 2"; cat "$work/err"; }
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
