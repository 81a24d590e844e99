#!/usr/bin/env bash
# Fork mode (fuzz --workers): planted CPU kernels that segfault, abort, call exit(1) and hang. The campaign
# survives them: each becomes a crash or timeout record (crashes.csv, failures.csv, summary.json)
# printed with its repro command, a fresh worker carries on, the invariant target keeps being
# checked, and the exit code is 1 (they are must-hold targets); JUnit shows the crash as the
# target's failure. Each crash and timeout is shrunk in child processes (the mutants fail from 5
# output rows on, so the smallest record has exactly 5). `replay` of a crash or timeout record
# reproduces it in a child process and reports it instead of dying.
set -u
bin=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }

# 1. A segfault, an abort and an exit(1) (a campaign's own exit code, but no report), two workers.
"$bin" fuzz --backend cpu --op mean --impl invariant,mutant-crash-segv,mutant-crash-abort,mutant-crash-exit --property batch_slice \
  --dtype float32 --seed 3 --budget 15s --workers 2 --no-corpus --out "$work/crash" >"$work/crash.log" 2>&1
code=$?
[ "$code" -eq 1 ] && ok || { bad "crash run: exit $code, wanted 1"; tail -n 20 "$work/crash.log"; }
python3 - "$work/crash" <<'PY' && ok || bad "crash run: report contents"
import csv, json, math, sys
run = sys.argv[1]
s = json.load(open(f"{run}/summary.json"))
crashes = s["workers"]["crashes"]
kinds = {c["target"]: c["outcome"] for c in crashes}
assert kinds.get("mean/mutant-crash-segv/batch_slice/float32") == "crash", kinds
assert kinds.get("mean/mutant-crash-abort/batch_slice/float32") == "crash", kinds
assert kinds.get("mean/mutant-crash-exit/batch_slice/float32") == "crash", kinds
assert any("SIGSEGV" in c["detail"] for c in crashes), crashes
assert any("SIGABRT" in c["detail"] for c in crashes), crashes
assert any("exited with code 1 without finishing its report" in c["detail"] for c in crashes), crashes
assert s["exit_code"] == 1 and s["workers"]["count"] == 2
inv = [t for t in s["results"]["targets"] if t["impl"] == "invariant"]
assert inv and sum(t["cases"] for t in inv) > 20 and all(t["failures"] == 0 for t in inv), inv
rows = list(csv.DictReader(open(f"{run}/crashes.csv")))
assert {r["outcome"] for r in rows} == {"crash"} and len(rows) == 3, rows
assert sum(1 for r in csv.DictReader(open(f"{run}/failures.csv")) if r["outcome"] == "crash") == 3
# Shrunk in children: the mutants crash from 5 output rows on, so the minimum is a 5-row output.
for r in rows:
    shape = [int(x) for x in r["shape"].split("x")]
    params = dict(p.split("=") for p in r["params"].split())
    reduced = 1
    for d in params["dims"].split(","):
        reduced *= shape[int(d)]
    out_rows = math.prod(shape) // reduced
    assert out_rows == 5 and min(shape) == 1, (r["shape"], r["params"])
    assert "shrunk from" in r["detail"], r["detail"]
PY
grep -q "^shrunk mean/mutant-crash-segv/batch_slice/float32 (crash) from .* to " "$work/crash.log" && ok || bad "crash run: no shrink line"
grep -q "CRASH (must-hold) mean/mutant-crash-segv" "$work/crash.log" && ok || bad "crash run: no CRASH line for the segfault"
grep -q "repro: .*replay --case" "$work/crash.log" && ok || bad "crash run: no repro command"
ls -d "$work"/crash.workers-* >/dev/null 2>&1 && bad "crash run: the workers' folder was left" || ok

# 2. A hang, killed by the watchdog.
"$bin" fuzz --backend cpu --op mean --impl invariant,mutant-crash-hang --property batch_slice --dtype float32 --seed 4 \
  --budget 12s --workers 1 --case-timeout 2 --shrink-budget 25s --no-corpus --out "$work/hang" >"$work/hang.log" 2>&1
code=$?
[ "$code" -eq 1 ] && ok || { bad "hang run: exit $code, wanted 1"; tail -n 20 "$work/hang.log"; }
python3 - "$work/hang" <<'PY' && ok || bad "hang run: report contents"
import json, sys
s = json.load(open(f"{sys.argv[1]}/summary.json"))
c = s["workers"]["crashes"]
assert len(c) == 1 and c[0]["outcome"] == "timeout" and c[0]["target"] == "mean/mutant-crash-hang/batch_slice/float32", c
assert sum(t["cases"] for t in s["results"]["targets"] if t["impl"] == "invariant") > 10
assert "shrunk from" in c[0]["detail"], c[0]["detail"]
PY

# 3. replay runs crash and timeout records in a child and survives them.
segv=$(grep "mutant-crash-segv" "$work/crash/crashes.csv" | head -n 1)
"$bin" replay --case "$segv" >"$work/replay.log" 2>&1
code=$?
[ "$code" -eq 1 ] && ok || { bad "replay of the crash: exit $code, wanted 1"; cat "$work/replay.log"; }
grep -q "reproduced in a child: killed by signal 11" "$work/replay.log" && ok || bad "replay of the crash: not reported as reproduced"
grep -q "^replayed 1 records" "$work/replay.log" && ok || bad "replay of the crash: the replaying process did not finish"
hang=$(grep "mutant-crash-hang" "$work/hang/crashes.csv" | head -n 1)
"$bin" replay --case "$hang" --case-timeout 2 >"$work/replay-hang.log" 2>&1
code=$?
[ "$code" -eq 1 ] && ok || { bad "replay of the timeout: exit $code, wanted 1"; cat "$work/replay-hang.log"; }
grep -q "reproduced in a child: no result after" "$work/replay-hang.log" && ok || bad "replay of the timeout: not reproduced"

# 4. JUnit from a fork-mode run: the crashed target fails with its crash record and repro.
"$bin" fuzz --backend cpu --op mean --impl invariant,mutant-crash-segv --property batch_slice --dtype float32 --seed 5 \
  --workers 2 --budget 8s --no-corpus --junit "$work/j.xml" --out "$work/j" >"$work/j.log" 2>&1
[ $? -eq 1 ] && ok || bad "--workers with --junit: wanted exit 1"
python3 "$(dirname "$0")/check_junit.py" "$work/j.xml" --failing detfuzz.cpu.mean.mutant-crash-segv/batch_slice/float32 \
  --passing detfuzz.cpu.mean.invariant/batch_slice/float32 && ok || bad "--workers with --junit: JUnit contents"

# --devices needs the CUDA backend and GPUs: on the CPU backend it is a usage error.
"$bin" fuzz --backend cpu --op mean --devices all --budget 5s --out "$work/d" >"$work/devices.log" 2>&1
[ $? -eq 2 ] && ok || bad "--devices on the CPU backend: wanted exit 2"
grep -q "needs the CUDA backend" "$work/devices.log" && ok || bad "--devices on the CPU backend: no clear message"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
