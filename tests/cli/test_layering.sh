#!/usr/bin/env bash
# The tree's floors, checked: harness/ and the generic properties (the files directly under
# properties/) pick no behaviour by a built-in op's name and include no kernel header (ops/cuda,
# ops/attention); a family's own folder under properties/ may include its kernels' headers.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
failed=0

by_name=$(grep -rn --include='*.cpp' --include='*.h' --include='*.cu' 'op == "\|op != "' harness properties || true)
if [ -n "$by_name" ]; then
  echo "harness/ or properties/ chooses code by an op's name (read the op's definition instead):"
  echo "$by_name"
  failed=1
fi

generic=(harness/*.cpp harness/*.h properties/*.cpp properties/*.h properties/rows/* properties/defs/* properties/spec/*)
kernels=$(grep -n '#include "ops/\(cuda\|attention\)/' "${generic[@]}" || true)
if [ -n "$kernels" ]; then
  echo "harness/ or a generic part of properties/ includes a kernel header:"
  echo "$kernels"
  failed=1
fi

if [ "$failed" -eq 0 ]; then echo "layering: 2 passed, 0 failed"; else exit 1; fi
