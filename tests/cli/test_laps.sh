#!/usr/bin/env bash
# schedule_invariance end to end on the CPU, as CI runs it: a 60 s campaign of our impl holds
# (exit 0), the planted mutant is caught and shrunk to a small trace (exit 1) whose record replays
# bit for bit, `detfuzz laps` compares FIFO and LAPS on a mixed workload, bad options exit 2.
set -u
bin=$1
budget=${DETFUZZ_LAPS_TEST_BUDGET:-60s}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pass=0 fail=0
check() {  # check NAME EXPECTED_EXIT COMMAND...
  local name=$1 want=$2; shift 2
  "$@" >"$work/out" 2>"$work/err"; local got=$?
  if [ "$got" -eq "$want" ]; then pass=$((pass + 1)); else
    fail=$((fail + 1)); echo "FAIL $name: exit $got, wanted $want"; tail -n 8 "$work/out" "$work/err"; fi
}

check "campaign of invariant holds" 0 "$bin" fuzz --backend cpu --op laps_engine --impl invariant --budget "$budget" \
  --seed 11 --no-corpus --quiet --out "$work/inv"
cases=$(awk -F, 'NR > 1' "$work/inv/cases.csv" | wc -l)
[ "$cases" -ge 20 ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL only $cases cases in $budget"; }

mutant=$("$bin" list impls | awk '$1 == "laps_engine" && $2 ~ /^mutant-/ && $3 == "cpu" {print $2; exit}')
check "mutant caught" 1 "$bin" fuzz --backend cpu --op laps_engine --impl "$mutant" --budget 120s --seed 3 --no-corpus \
  --stop-on-failure --quiet --out "$work/mut"
grep -q "FAILURE (must-hold) laps_engine/$mutant/schedule_invariance" "$work/out" && pass=$((pass + 1)) ||
  { fail=$((fail + 1)); echo "FAIL the mutant's failure was not reported"; }
# Shrunk: at most two requests (len= lists one or two prompt lengths).
requests=$(awk -F, 'NR == 2' "$work/mut/failures.csv" | grep -o 'len=[0-9.]*' | tr -cd '.' | wc -c)
[ "$requests" -le 1 ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL not shrunk to <= 2 requests:"; cat "$work/mut/failures.csv"; }
check "mutant record replays" 1 "$bin" replay "$work/mut/failures.csv" --expect-reproduce
grep -q "matches the record bit for bit" "$work/out" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL replay differs"; cat "$work/out"; }

check "laps fifo vs laps" 0 "$bin" laps --backend cpu --requests 120 --max-len 1024 --instances 3 --step-tokens 512 --seed 2 \
  --out "$work/laps"
for f in cases.csv ttft.csv requests.csv summary.json; do
  [ -s "$work/laps/$f" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL laps wrote no $f"; }
done
grep -q "^laps,short," "$work/laps/ttft.csv" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL no LAPS short row"; }
record=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["case"])' "$work/laps/summary.json")
check "laps record replays" 0 "$bin" replay --case "$record" --expect-reproduce
check "laps unknown impl" 2 "$bin" laps --backend cpu --impl nope --out "$work/l2"
check "laps bad sizes" 2 "$bin" laps --backend cpu --min-len 300 --out "$work/l3"

echo "test_laps: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
