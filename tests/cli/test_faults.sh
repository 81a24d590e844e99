#!/usr/bin/env bash
# Device faults and hangs, end to end on the CPU, with the planted host-side faults of
# tests/plugins/planted_faults.cpp: sticky_rows "poisons the device" at 7 rows (every later call
# fails, and the library reports a sticky cudaErrorIllegalAddress), hang_rows never returns at 13.
#   - one process: the campaign stops at the faulting case, whose `crash` record (detail: the
#     error's name) is shrunk in child processes; summary.json says why it stopped; JUnit; exit 1;
#     no innocent case is an error;
#   - replay of that record, in a child and in process;
#   - fork mode: the faulting worker is replaced and the run goes on, no innocent case an error;
#   - one process, a hang: the --case-timeout watchdog writes the timeout record and the report;
#   - fork mode where every worker hangs: the run still ends with its summary;
#   - --case-timeout's durations; replay --sanitize without compute-sanitizer, and with a stand-in.
set -u
bin=$1
lib=$2
spec=$3
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
plug=(--backend cpu --load "$lib" --spec "$spec" --impl torch --no-corpus)

# 1. One process, a sticky error.
"$bin" fuzz "${plug[@]}" --op detfuzz_planted::sticky_rows --property repeat,variant_agree --seed 3 --budget 60s \
  --shrink-budget 20s --junit "$work/one.xml" --out "$work/one" >"$work/one.log" 2>&1
code=$?
[ "$code" -eq 1 ] && ok || { bad "sticky, one process: exit $code, wanted 1"; tail -n 20 "$work/one.log"; }
python3 - "$work/one" <<'PY' && ok || bad "sticky, one process: report contents"
import csv, json, sys
run = sys.argv[1]
s = json.load(open(f"{run}/summary.json"))
assert s["stopped"]["reason"] == "device_fault" and s["stopped"]["error"] == "cudaErrorIllegalAddress", s.get("stopped")
assert s["exit_code"] == 1 and s["results"]["elapsed_s"] < 50, (s["exit_code"], s["results"]["elapsed_s"])
rows = list(csv.DictReader(open(f"{run}/failures.csv")))
assert len(rows) == 1 and rows[0]["outcome"] == "crash", rows
r = rows[0]
assert r["detail"].startswith("cudaErrorIllegalAddress"), r["detail"]
# Shrunk in children: the fault needs 7 rows, nothing else.
assert r["shape"] == "7x1", (r["shape"], r["detail"])
cases = list(csv.DictReader(open(f"{run}/cases.csv")))
assert all(c["outcome"] == "pass" for c in cases[:-1]), [c for c in cases if c["outcome"] != "pass"][:3]
assert cases[-1]["outcome"] == "crash", cases[-1]
t = [x for x in s["results"]["targets"] if x["failures"] > 0]
assert len(t) == 1 and t[0]["property"] == r["property"], t
open(f"{run}/../faulted-property", "w").write(r["property"])
PY
grep -q "^CRASH (must-hold) detfuzz_planted::sticky_rows/torch/.*: cudaErrorIllegalAddress" "$work/one.log" && ok || bad "sticky, one process: no CRASH line"
grep -q "^STOPPED: a sticky device error (cudaErrorIllegalAddress" "$work/one.log" && ok || bad "sticky, one process: no STOPPED line"
grep -q "repro: .* replay --case .* --load .* --spec " "$work/one.log" && ok || bad "sticky, one process: the repro lacks --load/--spec"
prop=$(cat "$work/faulted-property" 2>/dev/null || echo repeat)
python3 "$here/check_junit.py" "$work/one.xml" --failing "detfuzz.cpu.detfuzz_planted::sticky_rows.torch/$prop/float32" && ok \
  || bad "sticky, one process: JUnit"

# 2. Its record replays: in a child (a crash record), and in process (as an ordinary record).
row=$(sed -n 2p "$work/one/failures.csv")
"$bin" replay --case "$row" --load "$lib" --spec "$spec" >"$work/replay.log" 2>&1
code=$?
[ "$code" -eq 1 ] && grep -q "reproduced in a child: device fault cudaErrorIllegalAddress" "$work/replay.log" && ok \
  || { bad "replay of the crash record: exit $code"; cat "$work/replay.log"; }
plain=$(sed 's/,crash,/,error,/' <<<"$row")
"$bin" replay --case "$plain" --case "$plain" --load "$lib" --spec "$spec" >"$work/replay2.log" 2>&1
code=$?
[ "$code" -eq 1 ] && ok || { bad "in-process replay of the faulting case: exit $code"; cat "$work/replay2.log"; }
grep -q "^  device fault: cudaErrorIllegalAddress" "$work/replay2.log" && grep -q "^STOPPED: the device context is poisoned; 1 records left" "$work/replay2.log" \
  && ok || { bad "in-process replay: no device fault or STOPPED line"; cat "$work/replay2.log"; }

# 3. Fork mode: each faulting worker is replaced; the run goes on; no innocent case is an error.
"$bin" fuzz "${plug[@]}" --op detfuzz_planted::sticky_rows,detfuzz_planted::known_min_mm --seed 4 --budget 20s \
  --shrink-budget 10s --workers 2 --out "$work/workers" >"$work/workers.log" 2>&1
code=$?
[ "$code" -eq 1 ] && ok || { bad "sticky, workers: exit $code, wanted 1"; tail -n 20 "$work/workers.log"; }
python3 - "$work/workers" <<'PY' && ok || bad "sticky, workers: report contents"
import csv, json, sys
run = sys.argv[1]
s = json.load(open(f"{run}/summary.json"))
w = s["workers"]
assert w["device_faults"] >= 1, w
crashes = [c for c in w["crashes"] if c["target"].startswith("detfuzz_planted::sticky_rows")]
assert crashes and all(c["outcome"] == "crash" and "cudaErrorIllegalAddress" in c["detail"] for c in crashes), crashes
for c in crashes:
    # Shrunk in children: one column, and 7 rows in the call that faulted (the batch, the slice,
    # or the composed batch).
    r = next(csv.DictReader([open(f"{run}/crashes.csv").readline(), c["record"]]))
    m, n = (int(x) for x in r["shape"].split("x"))
    p = dict(kv.split("=") for kv in r["params"].split())
    i, j, o, tail = (int(p.get(k, 0)) for k in ("i", "j", "o", "tail"))
    assert n == 1 and 7 in (m, j - i, o + j - i + tail), (r["shape"], r["params"], c["detail"])
cases = list(csv.DictReader(open(f"{run}/cases.csv")))
errors = [c for c in cases if c["outcome"] == "error"]
assert not errors, errors[:3]
# The run went on after the first fault: the other op's targets were checked.
mm = [t for t in s["results"]["targets"] if t["op"] == "detfuzz_planted::known_min_mm"]
assert sum(t["cases"] for t in mm) > 20, mm
PY

# 4. One process, a hang: the watchdog writes the timeout record (shrunk) and the report, exit 1.
start=$(date +%s)
"$bin" fuzz "${plug[@]}" --op detfuzz_planted::hang_rows --property repeat --seed 5 --budget 60s --case-timeout 2s \
  --shrink-budget 30s --junit "$work/hang.xml" --out "$work/hang" >"$work/hang.log" 2>&1
code=$?
[ "$code" -eq 1 ] && ok || { bad "hang, one process: exit $code, wanted 1"; tail -n 20 "$work/hang.log"; }
[ $(( $(date +%s) - start )) -lt 55 ] && ok || bad "hang, one process: took until the end of the budget"
python3 - "$work/hang" <<'PY' && ok || bad "hang, one process: report contents"
import csv, json, sys
run = sys.argv[1]
s = json.load(open(f"{run}/summary.json"))
assert s["stopped"]["reason"] == "timeout" and s["exit_code"] == 1, s.get("stopped")
rows = list(csv.DictReader(open(f"{run}/failures.csv")))
assert len(rows) == 1 and rows[0]["outcome"] == "timeout", rows
assert rows[0]["shape"] == "13x1", (rows[0]["shape"], rows[0]["detail"])
assert "no result after" in rows[0]["detail"], rows[0]["detail"]
cases = list(csv.DictReader(open(f"{run}/cases.csv")))
assert cases[-1]["outcome"] == "timeout" and all(c["outcome"] == "pass" for c in cases[:-1])
PY
grep -q "^TIMEOUT (must-hold) detfuzz_planted::hang_rows/torch/repeat/float32" "$work/hang.log" && ok || bad "hang, one process: no TIMEOUT line"
python3 "$here/check_junit.py" "$work/hang.xml" --failing "detfuzz.cpu.detfuzz_planted::hang_rows.torch/repeat/float32" && ok \
  || bad "hang, one process: JUnit"

# 5. Fork mode where every worker hangs on its first case: the run still ends with its summary.
sed 's/^sizes  M=1..16 N=1..16$/sizes  M=13 N=1..16/' "$spec" >"$work/always13.spec"
"$bin" fuzz --backend cpu --load "$lib" --spec "$work/always13.spec" --impl torch --no-corpus --op detfuzz_planted::hang_rows \
  --seed 6 --budget 5s --workers 1 --case-timeout 1 --no-shrink --out "$work/allhang" >"$work/allhang.log" 2>&1
code=$?
[ "$code" -eq 1 ] && ok || { bad "every worker hangs: exit $code, wanted 1"; tail -n 20 "$work/allhang.log"; }
python3 - "$work/allhang" <<'PY' && ok || bad "every worker hangs: report contents"
import json, sys
s = json.load(open(f"{sys.argv[1]}/summary.json"))
w = s["workers"]
assert w["hung"] >= 2 and w["crashes"] and all(c["outcome"] == "timeout" for c in w["crashes"]), w
assert s["exit_code"] == 1
PY
grep -q "no worker finished a report" "$work/allhang.log" && ok || bad "every worker hangs: the log does not say no worker finished"

# 6. --case-timeout takes durations as --budget does.
for d in 10s 2m 3 0.5m; do
  "$bin" fuzz --backend cpu --op mean --impl invariant --property repeat --dtype float32 --cases 5 --no-corpus --quiet \
    --case-timeout "$d" --out "$work/ct-$d" >"$work/ct.log" 2>&1 && ok || { bad "--case-timeout $d refused"; cat "$work/ct.log"; }
done
"$bin" fuzz --backend cpu --op mean --cases 5 --case-timeout soon --out "$work/ct-bad" >/dev/null 2>"$work/ct.err"
[ $? -eq 2 ] && [ "$(wc -l <"$work/ct.err")" -eq 1 ] && grep -q "case-timeout: duration 'soon'" "$work/ct.err" && ok \
  || { bad "--case-timeout soon: wanted one line, exit 2"; cat "$work/ct.err"; }
"$bin" replay --case "$row" --load "$lib" --spec "$spec" --case-timeout 1m >/dev/null 2>&1
[ $? -eq 1 ] && ok || bad "replay --case-timeout 1m"

# 7. replay --sanitize: without compute-sanitizer a one-line error, exit 2; with one, its first
# report is attached to the record (a stand-in prints a memcheck report and runs the case).
DETFUZZ_COMPUTE_SANITIZER=/nonexistent/compute-sanitizer "$bin" replay --case "$row" --load "$lib" --spec "$spec" \
  --sanitize memcheck >/dev/null 2>"$work/san.err"
[ $? -eq 2 ] && [ "$(wc -l <"$work/san.err")" -eq 1 ] && grep -q "^detfuzz: error: --sanitize memcheck: compute-sanitizer not found" "$work/san.err" \
  && ok || { bad "--sanitize without compute-sanitizer"; cat "$work/san.err"; }
"$bin" replay --case "$row" --sanitize leakcheck >/dev/null 2>"$work/san.err"
[ $? -eq 2 ] && grep -q "expected memcheck, racecheck or initcheck" "$work/san.err" && ok || bad "--sanitize with an unknown tool"
cat >"$work/compute-sanitizer" <<'SH'
#!/bin/sh
# A stand-in: compute-sanitizer --tool T --print-limit N PROGRAM ARGS...
[ "$1" = --tool ] && [ "$2" = memcheck ] || exit 3
shift 4
echo "========= COMPUTE-SANITIZER"
"$@" >/dev/null 2>&1
echo "========= Invalid __global__ write of size 4 bytes"
echo "=========     at detfuzz_gpu_faults::oob_rows_kernel(const float *, float *, long, int)+0x70 in gpu_faults_kernels.cu:27"
echo "=========     by thread (0,0,0) in block (0,0,0)"
echo "=========     Address 0x7f3c00000000 is out of bounds"
echo "=========     Saved host backtrace up to driver entry point at kernel launch time"
echo "=========         Host Frame: [0x2f00] in libcuda.so.1"
echo "========="
echo "========= ERROR SUMMARY: 1 error"
SH
chmod +x "$work/compute-sanitizer"
PATH="$work:$PATH" "$bin" replay --case "$row" --load "$lib" --spec "$spec" --sanitize memcheck >"$work/san.log" 2>&1
code=$?
[ "$code" -eq 1 ] && ok || { bad "--sanitize with a stand-in: exit $code, wanted 1"; cat "$work/san.log"; }
grep -q "^  first report: Invalid __global__ write of size 4 bytes; at detfuzz_gpu_faults::oob_rows_kernel(.*)+0x70 in gpu_faults_kernels.cu:27; by thread (0,0,0) in block (0,0,0); Address 0x7f3c00000000 is out of bounds$" "$work/san.log" \
  && ok || { bad "--sanitize: the first report"; cat "$work/san.log"; }
grep -q "^  record: .*compute-sanitizer memcheck: Invalid __global__ write" "$work/san.log" && ok || bad "--sanitize: the annotated record"
# Given the report folder, the annotated record goes to its sanitize.csv and the HTML report shows
# the sanitizer's report under the failure; --out elsewhere; a folder that cannot be written, or
# --out without --sanitize, is one line and exit 2.
PATH="$work:$PATH" "$bin" replay "$work/one" --load "$lib" --spec "$spec" --sanitize memcheck >"$work/san2.log" 2>&1
code=$?
python3 - "$work/one/sanitize.csv" <<'PY' && [ "$code" -eq 1 ] && ok || { bad "--sanitize RUN_DIR: exit $code, sanitize.csv"; cat "$work/san2.log"; }
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 1 and rows[0]["outcome"] == "crash", rows
assert "compute-sanitizer memcheck: Invalid __global__ write of size 4 bytes; at detfuzz_gpu_faults::oob_rows_kernel" in rows[0]["detail"], rows[0]["detail"]
PY
"$bin" report "$work/one" --out "$work/one.html" >/dev/null 2>&1 && grep -q "<b>compute-sanitizer memcheck</b> (first report): Invalid __global__ write of size 4 bytes<br>at detfuzz_gpu_faults::oob_rows_kernel" "$work/one.html" \
  && ok || bad "the HTML report lacks the sanitizer's report"
PATH="$work:$PATH" "$bin" replay --case "$row" --load "$lib" --spec "$spec" --sanitize memcheck --out "$work/san-out" >/dev/null 2>&1
[ $? -eq 1 ] && [ -f "$work/san-out/sanitize.csv" ] && ok || bad "--sanitize --out DIR"
PATH="$work:$PATH" "$bin" replay --case "$row" --load "$lib" --spec "$spec" --sanitize memcheck --out /proc/detfuzz-no >/dev/null 2>"$work/san.err"
[ $? -eq 2 ] && [ "$(wc -l <"$work/san.err")" -eq 1 ] && ok || { bad "--sanitize --out unwritable"; cat "$work/san.err"; }
"$bin" replay --case "$row" --load "$lib" --spec "$spec" --out "$work/san-out" >/dev/null 2>"$work/san.err"
[ $? -eq 2 ] && grep -q "out goes with --sanitize" "$work/san.err" && ok || { bad "--out without --sanitize"; cat "$work/san.err"; }

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
