#!/usr/bin/env bash
# tests/cli/test_readme.sh DETFUZZ_BINARY — every command README.md shows that runs without a GPU
# is run here, so that an example cannot rot.
#
# What is run: each line (backslash continuations joined) of every block fenced as ```sh, in order,
# from the repository root, and each ```python block. Blocks fenced as ```sh gpu need a CUDA GPU
# and are skipped; so are lines that are only comments. A trailing "# exits N" comment gives the
# exit code a command must end with (0 otherwise). As run here:
#   - `build/` names the build folder of DETFUZZ_BINARY, and `/tmp/` a fresh temporary folder;
#   - the ci/ wrappers get BUILD_DIR (that build folder), DETFUZZ_PREBUILT=1 (run that build as it
#     is, no setup or build inside ctest) and 10 s budgets (DETFUZZ_BUDGET, DETFUZZ_GATE_BUDGET,
#     DETFUZZ_NIGHTLY_BUDGET) where a command sets none: a bare `ci/nightly` is a 30-minute run;
#   - `ci/test ...` runs with ctest's -N (list the tests, run none): this test runs inside ctest;
#   - `ci/nightly` is skipped when today's reports/nightly-<date> already exists (it writes there),
#     and what it wrote is removed afterwards; so is any report folder a command printed as its
#     report under reports/;
#   - python blocks run with the python of .deps/env.sh (or python3), skipped when torch is missing.
# DETFUZZ_README=FILE tests another file.
set -u
bin=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
builddir=$(dirname "$bin")
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
readme=${DETFUZZ_README:-$root/README.md}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python=python3
# shellcheck disable=SC1091
[ -f "$root/.deps/env.sh" ] && source "$root/.deps/env.sh" && python=${DETFUZZ_PYTHON:-python3}

# Extract: one NUL-terminated entry per command, "sh|python <TAB> expected exit <TAB> text".
python3 - "$readme" >"$work/commands" <<'PY' || { echo "FAIL cannot read $1"; exit 1; }
import re, sys
lines = open(sys.argv[1]).read().split("\n")
out, block, kind = [], None, None
for line in lines:
    if block is None:
        m = re.match(r"^```(\w+)(.*)$", line)
        if m and m.group(1) in ("sh", "python") and not m.group(2).strip():
            block, kind = [], m.group(1)
        elif line.startswith("```"):
            block, kind = [], "skip"  # output, a listing, or ```sh gpu
        continue
    if line.startswith("```"):
        if kind == "python":
            out.append(("python", 0, "\n".join(block)))
        elif kind == "sh":
            joined, cur = [], ""
            for l in block:
                if l.rstrip().endswith("\\"):
                    cur += l.rstrip()[:-1] + " "
                    continue
                joined.append(cur + l)
                cur = ""
            for l in joined:
                s = l.strip()
                if not s or s.startswith("#"):
                    continue
                want = 0
                m = re.search(r"\s#\s*(.*)$", s)
                if m:
                    e = re.match(r"exits (\d+)", m.group(1))
                    want = int(e.group(1)) if e else 0
                    s = s[:m.start()].rstrip()
                out.append(("sh", want, re.sub(r"\s+", " ", s)))
        block, kind = None, None
        continue
    block.append(line)
sys.stdout.write("".join(f"{k}\t{w}\t{t}\0" for k, w, t in out))
PY

pass=0 fail=0 skip=0
day=$(date -u +%Y%m%d)
cd "$root" || exit 1
while IFS=$'\t' read -r -d '' kind want text; do
  n=$((pass + fail + skip + 1))
  if [ "$kind" = python ]; then
    if ! "$python" -c "import torch" 2>/dev/null; then
      skip=$((skip + 1)); echo "skip [$n] python block: no torch for $python"; continue
    fi
    code=${text//build\//$builddir/}
    printf '%s\n' "$code" >"$work/block.py"
    timeout 600 "$python" "$work/block.py" >"$work/out" 2>&1; got=$?
    shown="python block ($(head -c 60 <<<"$code" | tr '\n' ' ')...)"
  else
    cmd=$text
    nightly_dir=
    if [[ "$cmd" == *ci/nightly* ]]; then
      nightly_dir=$root/reports/nightly-$day
      if [ -e "$nightly_dir" ]; then skip=$((skip + 1)); echo "skip [$n] $cmd: $nightly_dir exists"; continue; fi
      had_corpus=0; [ -e "$root/corpora/nightly-$day.csv" ] && had_corpus=1
    fi
    [[ "$cmd" =~ (^|[[:space:]])ci/test([[:space:]]|$) ]] && cmd="$cmd -N"
    # /tmp/ is this test's own folder, build/ the binary's build folder (whole words only; in this
    # order, as the build folder may itself lie under /tmp/).
    cmd=$(sed -E "s#(^|[[:space:]=])/tmp/#\\1$work/#g; s#(^|[[:space:]=])build/#\\1$builddir/#g" <<<"$cmd")
    BUILD_DIR=$builddir DETFUZZ_PREBUILT=1 DETFUZZ_BUDGET=10s DETFUZZ_GATE_BUDGET=10s DETFUZZ_NIGHTLY_BUDGET=10s \
      timeout 900 bash -c "$cmd" >"$work/out" 2>&1; got=$?
    shown=$text
    if [ -n "$nightly_dir" ]; then
      rm -rf "$nightly_dir"
      [ "$had_corpus" = 0 ] && rm -f "$root/corpora/nightly-$day.csv"
    fi
    # A report written under reports/ (a bare ci/fuzz, ci/gate without DETFUZZ_GATE_OUT) goes again.
    grep -oE "report: $root/reports/[^ ]+" "$work/out" | sed 's/^report: //' | while read -r dir; do
      [ -n "$dir" ] && [ -d "$dir" ] && rm -rf "$dir"
      # ci/gate's run folder (reports/gate-<time>) holds the fuzz report and, with a GPU, a bench.
      case "$dir" in "$root"/reports/gate-*/fuzz) rm -rf "$(dirname "$dir")" ;; esac
    done
  fi
  if [ "$got" -eq "$want" ]; then
    pass=$((pass + 1)); echo "ok   [$n] exit $got: $shown"
  else
    fail=$((fail + 1)); echo "FAIL [$n] exit $got, wanted $want: $shown"; tail -n 15 "$work/out" | sed 's/^/     /'
  fi
done <"$work/commands"

echo "$pass passed, $fail failed, $skip skipped"
[ $((pass + fail)) -gt 0 ] || { echo "FAIL no command found in $readme"; exit 1; }
[ "$fail" -eq 0 ]
