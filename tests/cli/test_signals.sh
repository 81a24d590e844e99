#!/usr/bin/env bash
# SIGTERM (a CI timeout) and SIGINT (Ctrl-C) sent to a running campaign: the report is finished
# and renamed into place with "interrupted": true, no partial folder is left, and the exit code
# is 128 + the signal (143, 130). The campaign runs a planted mutant so that the interrupted
# report also carries its shrunk must-hold failure.
set -u
bin=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }

interrupt() {  # interrupt SIGNAL WANTED_EXIT
  local sig=$1 want=$2 out="$work/run-$1"
  "$bin" fuzz --backend cpu --op mm --impl invariant,mutant-splitk --property batch_slice --dtype float32 --seed 7 \
    --budget 10m --no-corpus --out "$out" >"$work/log-$sig" 2>&1 &
  local pid=$!
  # Wait until cases are being checked (the header and at least 20 rows of cases.csv).
  for _ in $(seq 1 300); do
    local partial
    partial=$(ls -d "$out".partial-* 2>/dev/null | head -n 1)
    if [ -n "$partial" ] && [ "$(wc -l <"$partial/cases.csv" 2>/dev/null || echo 0)" -gt 20 ]; then break; fi
    sleep 0.1
  done
  kill -"$sig" "$pid"
  local start=$SECONDS
  wait "$pid"; local got=$?
  [ "$got" -eq "$want" ] && ok || { bad "$sig: exit $got, wanted $want"; tail -n 5 "$work/log-$sig"; }
  [ $((SECONDS - start)) -le 20 ] && ok || bad "$sig: took $((SECONDS - start))s to stop"
  [ -f "$out/summary.json" ] && ok || bad "$sig: no summary.json in $out"
  python3 - "$out/summary.json" "$want" <<'PY' && ok || bad "$sig: summary.json contents"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["interrupted"] is True, s.get("interrupted")
assert s["exit_code"] == int(sys.argv[2]), s["exit_code"]
assert s["results"]["cases"] > 20, s["results"]["cases"]
PY
  [ "$(wc -l <"$out/cases.csv")" -gt 20 ] && ok || bad "$sig: cases.csv lost its rows"
  ls -d "$out".partial-* >/dev/null 2>&1 && bad "$sig: a partial folder was left" || ok
  grep -q "INTERRUPTED by signal" "$work/log-$sig" && ok || bad "$sig: the log does not say it was interrupted"
}

interrupt TERM 143
interrupt INT 130
# The shrunk must-hold failure of the mutant is in the interrupted report, as in a finished one.
grep -q "mutant-splitk" "$work/run-TERM/failures.csv" && ok || bad "TERM: the mutant's failure is not in failures.csv"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
