#!/usr/bin/env bash
# The ci/ wrappers with a user's flags: their defaults go to detfuzz only where the user gave
# none, so `ci/fuzz --budget 5m --op mm` (the README's example) runs instead of failing with
# "--budget: At Most 1 required but received 2". The wrappers run the binary under test as it is
# (DETFUZZ_PREBUILT=1, BUILD_DIR its folder): no setup, no build.
set -u
bin=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export DETFUZZ_PREBUILT=1 BUILD_DIR
BUILD_DIR=$(cd "$(dirname "$bin")" && pwd)
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
# summary FOLDER EXPR: a Python expression over the report's summary.json `s` holds.
summary() { python3 -c "import json,sys; s=json.load(open(sys.argv[1]+'/summary.json')); sys.exit(0 if ($2) else 1)" "$1"; }
small=(--op mean --impl invariant --dtype float32 --property repeat --no-corpus --quiet)

"$root/ci/fuzz" --budget 3s "${small[@]}" --backend cpu --seed 9 --out "$work/fuzz" >"$work/log" 2>&1 && ok \
  || { bad "ci/fuzz with --budget and --backend"; tail -n 5 "$work/log"; }
summary "$work/fuzz" 's["budget"]["seconds"] == 3 and s["backend"] == "cpu" and s["seed"] == 9' && ok || bad "ci/fuzz: the user's flags were not the ones used"
"$root/ci/fuzz" --budget=2s "${small[@]}" --backend=cpu --out="$work/fuzz-eq" >"$work/log" 2>&1 && ok \
  || { bad "ci/fuzz with --flag=value"; tail -n 5 "$work/log"; }
summary "$work/fuzz-eq" 's["budget"]["seconds"] == 2' && ok || bad "ci/fuzz: --budget=2s not used"
DETFUZZ_BUDGET=7s "$root/ci/fuzz" "${small[@]}" --backend cpu --cases 30 --out "$work/fuzz-default" >"$work/log" 2>&1 && ok \
  || { bad "ci/fuzz with its default budget"; tail -n 5 "$work/log"; }
summary "$work/fuzz-default" 's["budget"]["seconds"] == 7 and s["results"]["cases"] == 30' && ok || bad "ci/fuzz: its default --budget was not passed"

"$root/ci/nightly" --budget 3s --seed 5 "${small[@]}" --backend cpu --out "$work/nightly" >"$work/log" 2>&1 && ok \
  || { bad "ci/nightly with the user's --budget, --seed, --out"; tail -n 5 "$work/log"; }
summary "$work/nightly" 's["budget"]["seconds"] == 3 and s["seed"] == 5' && ok || bad "ci/nightly: the user's flags were not the ones used"

DETFUZZ_GATE_OUT="$work/gate" "$root/ci/gate" --budget 3s --op mean --dtype float32 --property repeat --backend cpu --no-corpus --quiet \
  >"$work/log" 2>&1 && ok || { bad "ci/gate with the user's --budget and --backend"; tail -n 5 "$work/log"; }
summary "$work/gate/fuzz" 's["budget"]["seconds"] == 3 and s["selection"]["impls"] == ["invariant"]' && ok \
  || bad "ci/gate: the user's --budget, or its default --impl invariant, was not used"
DETFUZZ_GATE_OUT="$work/gate2" "$root/ci/gate" --impl torch --budget 2s --op mm --dtype float32 --property repeat --backend cpu \
  --no-corpus --quiet --out "$work/gate2-fuzz" >"$work/log" 2>&1 && ok || { bad "ci/gate with the user's --impl and --out"; tail -n 5 "$work/log"; }
summary "$work/gate2-fuzz" 's["selection"]["impls"] == ["torch"]' && ok || bad "ci/gate: the user's --impl was not used"

# FlashAttention-4's scripts refuse bad input with one line and exit 2, writing nothing.
"$root/ci/fa4-wheels" >"$work/log" 2>&1; [ $? -eq 2 ] && [ "$(wc -l <"$work/log")" -eq 1 ] && ok || bad "ci/fa4-wheels without a step"
(cd "$work" && mkdir -p fa4 && cp -r "$root/ci" fa4/ && fa4/ci/fa4-wheels install) >"$work/log" 2>&1
[ $? -eq 2 ] && grep -q "missing .fa4/part-a" "$work/log" && ok || { bad "ci/fa4-wheels install without the parts"; cat "$work/log"; }
py=$root/.deps/venv/bin/python  # the environment ci/setup makes, with torch
[ -x "$py" ] || py=python3
if "$py" -c "import torch" 2>/dev/null; then
  for args in "$work/none/x.csv" "$work/x.csv --lengths 100" "$work/x.csv --dtypes float32"; do
    # shellcheck disable=SC2086  (args is a list of words)
    "$py" "$root/ci/bench_fa4.py" $args >"$work/log" 2>&1; got=$?
    [ $got -eq 2 ] && grep -q "^bench_fa4: error: " "$work/log" && [ ! -e "$work/x.csv" ] && ok \
      || { bad "ci/bench_fa4.py $args: exit $got"; tail -n 3 "$work/log"; }
  done
else
  echo "ci/bench_fa4.py's checks skipped: no python with torch here"
fi

# The helper itself.
(
  source "$root/ci/flags.sh"
  defaults=()
  default_flag --budget 60s --op mm --budget=5m
  default_flag --backend auto --op mm
  [ "${defaults[*]}" = "--backend auto" ] || exit 1
  [ "$(user_value --out --out a --op b --out=c)" = c ] || exit 1
  ! user_value --out --op b >/dev/null
) && ok || bad "ci/flags.sh"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
