#!/usr/bin/env bash
# The Python front end on the CPU: Python custom ops (tests/python/planted_ops.py) fuzzed through
# build/detfuzz --import (which hands the run to python -m detfuzz), python -m detfuzz, the Python
# API and pytest with the plugin. The planted split-K op is caught and shrunk to 17 rows in each,
# the correct op holds, a Python exception in an op is a case `error`, a user's Python mode makes
# the aten targets must-hold, a Python paged attention kernel is an impl of paged_attention (its
# planted batched-P bug caught and shrunk to two sequences); bad input is a one-line error, exit 2,
# nothing written.
#   tests/python/test_frontend.sh BUILD/detfuzz        (exit 77: skipped, the package was not built)
set -u
bin=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
build=$(dirname "$bin")
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -f "$build/python/detfuzz/__init__.py" ] || ! ls "$build"/python/detfuzz/_detfuzz*.so >/dev/null 2>&1; then
  echo "SKIP: no Python package in $build/python (DETFUZZ_PYTHON is off)"; exit 77
fi
python=${DETFUZZ_PYTHON:-$(sed -n 's/^DETFUZZ_PYTHON_EXECUTABLE:INTERNAL=//p' "$build/CMakeCache.txt")}  # the build's
[ -x "$python" ] || python=python3
export PYTHONPATH="$here:$build/python${PYTHONPATH:+:$PYTHONPATH}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 2
spec=$here/planted_ops.spec
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
check() {  # check NAME EXPECTED_EXIT COMMAND...
  local name=$1 want=$2; shift 2
  "$@" >"$work/out" 2>"$work/err"; local got=$?
  if [ "$got" -eq "$want" ]; then ok; else bad "$name: exit $got, wanted $want"; tail -n 8 "$work/out" "$work/err"; fi
}
one_line_error() {  # the last command's stderr is one 'detfuzz: error:' line containing $1
  if [ "$(wc -l <"$work/err")" -eq 1 ] && grep -q "^detfuzz: error: " "$work/err" && grep -qF -- "$1" "$work/err"; then ok; else
    bad "error message should be one line with '$1':"; cat "$work/err"; fi
}
minimal_rows() {  # the batch of the shrunk record of report $1's failing target: "a batch of N" (batch_compose) or M
  "$python" - "$1" <<'PY'
import csv, json, re, sys
t = [t for t in json.load(open(sys.argv[1] + "/summary.json"))["results"]["targets"] if t.get("minimal")]
if not t:
    print("none")
else:
    r = next(csv.reader([t[0]["minimal"]]))
    m = re.search(r"a batch of (\d+)", r[18])
    print(m.group(1) if m else r[5].split("x")[0])
PY
}
cases_per_s() {
  "$python" -c 'import json,sys; r=json.load(open(sys.argv[1]+"/summary.json"))["results"]; print("%.0f" % (r["cases"]/r["elapsed_s"]))' "$1"
}
common=(--spec "$spec" --backend cpu --no-corpus)

# build/detfuzz --import: the planted op caught and shrunk to 17 rows, its repro replays; the correct op holds.
check "exe splitk" 1 "$bin" fuzz --import planted_ops "${common[@]}" --op detfuzz_py_test::splitk_mm --budget 60s --seed 4 --stop-on-failure --out "$work/exe-splitk"
[ "$(minimal_rows "$work/exe-splitk")" = 17 ] && ok || bad "exe splitk: shrunk record is not 17 rows: $(minimal_rows "$work/exe-splitk")"
repro=$(grep -m1 "  repro: " "$work/out" | sed 's/^  repro: //')
case "$repro" in *"-m detfuzz replay --case "*"--import planted_ops"*) ok ;; *) bad "repro line: $repro" ;; esac
check "exe splitk repro" 1 bash -c "$repro --expect-reproduce"
grep -q "matches the record bit for bit" "$work/out" && ok || { bad "repro did not reproduce"; cat "$work/out"; }
check "exe rowwise" 0 "$bin" fuzz --import planted_ops "${common[@]}" --op detfuzz_py_test::rowwise_mm --budget 10s --seed 5 --out "$work/exe-rowwise"
echo "python custom op through build/detfuzz: $(cases_per_s "$work/exe-rowwise") cases/s (rowwise_mm, 10 s)"
check "exe replay --import" 1 "$bin" replay "$work/exe-splitk/failures.csv" --import planted_ops --spec "$spec"
# The per-op table of the third-party campaigns (third_party/table.py) over these two runs.
"$python" "$here/third_party/table.py" "$work/exe-splitk" "$work/exe-rowwise" >"$work/table.md" 2>&1
grep -q "^| splitk_mm | .*\*\*fails\*\* .*: fail, " "$work/table.md" && grep -q "^| rowwise_mm | held | held " "$work/table.md" \
  && ok || { bad "third_party/table.py"; cat "$work/table.md"; }

# quack's adapter and spec agree (every op's schema, sizes and batch dims), checked on the CPU against
# a stand-in quack package of torch functions with quack's call signatures (the real one is CUDA only).
mkdir -p "$work/standin/quack"
: >"$work/standin/quack/__init__.py"
cat >"$work/standin/quack/rmsnorm.py" <<'PY'
import torch
def rmsnorm(x, weight, residual=None, eps=1e-6, prenorm=False):
    s = x if residual is None else x + residual
    out = torch.nn.functional.rms_norm(s, (x.shape[-1],), weight, eps)
    return (out, s) if prenorm else out
def layernorm_fwd(x, weight, bias=None, eps=1e-6):
    return torch.nn.functional.layer_norm(x.float(), (x.shape[-1],), weight, bias, eps).to(x.dtype)
PY
printf 'import torch\ndef softmax(x): return torch.softmax(x, dim=-1)\n' >"$work/standin/quack/softmax.py"
printf 'import torch\ndef cross_entropy(x, target, reduction="mean"):\n    return torch.nn.functional.cross_entropy(x.float(), target, reduction=reduction)\n' \
  >"$work/standin/quack/cross_entropy.py"
printf 'def gemm(A, B, tuned=True): return A @ B\n' >"$work/standin/quack/gemm_interface.py"
quack_ops=$(grep -E "^op " "$here/third_party/quack_ops.spec" | awk '{print $2}' | grep -v _wide | paste -sd,)
check "quack adapter and spec" 0 env PYTHONPATH="$work/standin:$PYTHONPATH" "$python" -m detfuzz fuzz \
  --import "$here/third_party/quack_ops.py" --spec "$here/third_party/quack_ops.spec" --backend cpu --no-corpus \
  --op "$quack_ops" --budget 3s --seed 8 --out "$work/quack-standin"

# python -m detfuzz: the same, and the module given as a file path.
check "python -m splitk" 1 "$python" -m detfuzz fuzz --import "$here/planted_ops.py" "${common[@]}" --op detfuzz_py_test::splitk_mm --budget 60s --seed 7 --stop-on-failure --out "$work/py-splitk"
[ "$(minimal_rows "$work/py-splitk")" = 17 ] && ok || bad "python -m splitk: shrunk record is not 17 rows: $(minimal_rows "$work/py-splitk")"
check "python -m rowwise" 0 "$python" -m detfuzz fuzz --import planted_ops "${common[@]}" --op detfuzz_py_test::rowwise_mm --budget 10s --seed 8 --junit "$work/py.xml" --out "$work/py-rowwise"
echo "python custom op through python -m detfuzz: $(cases_per_s "$work/py-rowwise") cases/s (rowwise_mm, 10 s)"
grep -q "every must-hold property held" "$work/out" && ok || bad "python -m rowwise: no verdict line"

# A Python exception inside the op is a case `error` with the exception's first line.
check "raising op" 1 "$python" -m detfuzz fuzz --import planted_ops "${common[@]}" --op detfuzz_py_test::raising_mm --property batch_slice --budget 30s --seed 9 --stop-on-failure --out "$work/raising"
grep -q ",error,.*,ValueError: raising_mm: 9 rows is more than 8$" "$work/raising/failures.csv" && ok || { bad "raising op: no error record with the exception's text"; cat "$work/raising/failures.csv"; }

# A user's Python mode: aten targets become must-hold (and hold: the mode's mm is fixed-order).
check "user mode" 0 "$bin" fuzz --import planted_ops --mode planted_ops:enable_mode --backend cpu --no-corpus --op mm --impl torch --property batch_slice --dtype float32 --cases 40 --budget 60s --seed 10 --out "$work/mode"
"$python" -c 'import json,sys; t=json.load(open(sys.argv[1]+"/summary.json"))["results"]["targets"]; sys.exit(0 if t and all(x["expectation"]=="must-hold" for x in t) else 1)' "$work/mode" && ok || bad "user mode: aten targets are not must-hold"
check "planted user mode" 1 "$bin" fuzz --import planted_ops --mode planted_ops:enable_planted_mode --backend cpu --no-corpus --op mm --impl torch --property batch_slice --dtype float32 --budget 60s --seed 10 --stop-on-failure --out "$work/mode-planted"
[ "$(minimal_rows "$work/mode-planted")" = 17 ] && ok || bad "planted user mode: shrunk record is not 17 rows: $(minimal_rows "$work/mode-planted")"

# A Python paged attention kernel named as an impl of paged_attention (NS::name): the attention
# properties run on it; the planted one (P rounded when batched) is caught and shrunk to two sequences.
attn=(--import paged_ops --backend cpu --no-corpus --op paged_attention --dtype bfloat16)
check "python attention holds" 0 "$bin" fuzz "${attn[@]}" --impl detfuzz_py_test::paged_attention --budget 20s --seed 12 --out "$work/attn-ok"
"$python" -c 'import json,sys; t=json.load(open(sys.argv[1]+"/summary.json"))["results"]["targets"]; sys.exit(0 if len(t) == 6 and all(x["impl"]=="detfuzz_py_test::paged_attention" and x["expectation"]=="must-hold" for x in t) else 1)' "$work/attn-ok" \
  && ok || bad "python attention: not six must-hold targets of the user's impl"
check "python attention planted" 1 "$python" -m detfuzz fuzz "${attn[@]}" --impl detfuzz_py_test::paged_attention_batched_p --property seq_alone_vs_batched --budget 120s --seed 13 --stop-on-failure --out "$work/attn-planted"
"$python" - "$work/attn-planted" <<'PY' && ok || bad "python attention planted: the shrunk record is not two sequences"
import json, sys
from detfuzz import record_fields
t = [t for t in json.load(open(sys.argv[1] + "/summary.json"))["results"]["targets"] if t.get("minimal")]
params = dict(kv.split("=", 1) for kv in record_fields(t[0]["minimal"])["params"].split() if "=" in kv)
print("shrunk:", params)
sys.exit(0 if len(params["q"].split(".")) == 2 else 1)
PY
check "attention impl not registered" 2 "$bin" fuzz "${attn[@]}" --impl detfuzz_py_test::no_such_kernel --budget 5s --out "$work/bad6"
one_line_error "impl detfuzz_py_test::no_such_kernel: no such operator is registered"
check "attention impl wrong schema" 2 "$bin" fuzz "${attn[@]}" --impl detfuzz_py_test::paged_attention_wrong_schema --budget 5s --out "$work/bad7"
one_line_error "is not paged_attention's (Tensor q,"

# Bad input: one line, exit 2, nothing written.
check "module not found" 2 "$bin" fuzz --import no_such_module_xyz "${common[@]}" --budget 5s --out "$work/bad1"
one_line_error "--import no_such_module_xyz: ModuleNotFoundError: No module named 'no_such_module_xyz'"
check "module not found (python -m)" 2 "$python" -m detfuzz replay --import no_such_module_xyz --case x
one_line_error "--import no_such_module_xyz: ModuleNotFoundError"
printf 'import torch\nraise RuntimeError("broken module\\nsecond line")\n' >"$work/broken_mod.py"
check "module raises" 2 "$bin" fuzz --import "$work/broken_mod.py" "${common[@]}" --budget 5s --out "$work/bad2"
one_line_error "--import $work/broken_mod.py: RuntimeError: broken module"
sed 's/arg    b tensor/arg    other tensor/' "$spec" >"$work/contradicts.spec"
check "spec contradicts schema" 2 "$bin" fuzz --import planted_ops --spec "$work/contradicts.spec" --backend cpu --no-corpus --budget 5s --out "$work/bad3"
one_line_error "contradicts.spec"
printf 'op     detfuzz_py_test::not_registered\narg    a tensor [M, K] batch=0\nout    [M, K] batch=0\nsizes  M=1..4 K=1..4\ndtypes float32\n' >"$work/unknown.spec"
check "op not registered" 2 "$bin" fuzz --import planted_ops --spec "$work/unknown.spec" --backend cpu --no-corpus --budget 5s --out "$work/bad4"
one_line_error "detfuzz_py_test::not_registered"
check "mode fn missing" 2 "$bin" fuzz --mode planted_ops:no_such_fn --backend cpu --op mm --no-corpus --budget 5s --out "$work/bad5"
one_line_error "--mode planted_ops:no_such_fn: AttributeError"
for d in bad1 bad2 bad3 bad4 bad5 bad6 bad7; do [ ! -e "$work/$d" ] && ok || bad "$d: a refused run left $work/$d"; done
"$bin" fuzz --help | grep -q -- "--import" && ok || bad "fuzz --help has no --import"

# The Python API and pytest with the plugin (skipped where pytest is not installed).
if "$python" -c "import pytest" 2>/dev/null; then
  check "pytest api" 0 "$python" -m pytest -q -p no:cacheprovider "$here/test_api.py"
  check "pytest plugin" 1 "$python" -m pytest -q -p no:cacheprovider -p detfuzz.pytest_plugin "$spec" --detfuzz-import planted_ops \
    --detfuzz-budget 10s --detfuzz-backend cpu --detfuzz-seed 11 --junitxml "$work/junit.xml" -k "rowwise_mm or splitk_mm"
  "$python" - "$work/junit.xml" <<'PY' && ok || { bad "pytest plugin: junit"; cat "$work/junit.xml"; }
import re, sys, xml.etree.ElementTree as ET
cases = {c.get("name"): c for c in ET.parse(sys.argv[1]).iter("testcase")}  # pytest splits node ids at '::'
row, split = cases["rowwise_mm"], cases["splitk_mm"]
assert row.find("failure") is None, "rowwise_mm failed"
msg = split.find("failure").text
assert re.search(r"a batch of 17\b|,17x", msg) and "repro: " in msg and "--import planted_ops" in msg, msg
PY
else
  echo "SKIP pytest parts: pytest is not installed for $python"
fi

echo "python front end: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
