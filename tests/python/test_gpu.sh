#!/usr/bin/env bash
# The Python front end on a GPU (ci/gpu-check python): Python custom ops (planted_ops.py) and Triton
# kernels (triton_ops.py) through python -m detfuzz --backend cuda. The planted split-K ops must be
# caught and shrunk to a batch of 17 rows (exit 1), the correct ones must hold (exit 0); each line
# gives the campaign's cases/s. Prints PASS/FAIL per op; exit 1 on a FAIL.
#   tests/python/test_gpu.sh OUT_DIR     (DETFUZZ_PYTHON: the interpreter, default python3;
#   DETFUZZ_PYTHON_PACKAGE: the folder holding the detfuzz package, default build/python;
#   DETFUZZ_GPU_BUDGET: each campaign's budget, default 60s)
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$(mkdir -p "$1" && cd "$1" && pwd)
py=${DETFUZZ_PYTHON:-python3}
export PYTHONPATH="$root/tests/python:${DETFUZZ_PYTHON_PACKAGE:-$root/build/python}${PYTHONPATH:+:$PYTHONPATH}"
cd "$root" || exit 2
"$py" -c 'import detfuzz._frontend' || { echo "FAIL the detfuzz package does not import with $py"; exit 1; }
bad=0
for mod in planted_ops triton_ops; do
  ns=detfuzz_py_test; [ $mod = triton_ops ] && ns=detfuzz_triton_test
  for op in rowwise_mm splitk_mm; do
    want=0 extra=(--seed 30); [ $op = splitk_mm ] && want=1 extra=(--seed 30 --stop-on-failure)
    "$py" -m detfuzz fuzz --import $mod --spec tests/python/$mod.spec --backend cuda --op $ns::$op --no-corpus --quiet \
      --budget "${DETFUZZ_GPU_BUDGET:-60s}" "${extra[@]}" --out "$out/$mod-$op" >"$out/$mod-$op.log" 2>&1
    got=$?
    facts=$("$py" - "$out/$mod-$op" <<'PY' 2>&1
import csv, json, re, sys
r = json.load(open(sys.argv[1] + "/summary.json"))["results"]
t = [t for t in r["targets"] if t.get("minimal")]
batch = "none"
if t:
    rec = next(csv.reader([t[0]["minimal"]]))
    m = re.search(r"a batch of (\d+)", rec[18])
    batch = m.group(1) if m else rec[5].split("x")[0]
print(f"{r['cases']} cases, {r['cases'] / max(r['elapsed_s'], 1e-9):.0f} cases/s, shrunk batch {batch}")
PY
)
    verdict=PASS
    [ "$got" = "$want" ] || verdict=FAIL
    if [ $op = splitk_mm ] && ! grep -q "shrunk batch 17$" <<<"$facts"; then verdict=FAIL; fi
    [ $verdict = PASS ] || { bad=1; tail -5 "$out/$mod-$op.log"; }
    echo "$verdict $mod $ns::$op: exit $got (want $want); $facts"
  done
done
exit $bad
