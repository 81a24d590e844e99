#!/usr/bin/env bash
# Kernels no one here wrote, fuzzed through the Python front end on a GPU (ci/gpu-check
# python-kernels): the seed's Triton ops under its own mode (.seed/batch_invariant_ops.py, carried:
# fetched from thinking-machines-lab/batch_invariant_ops, never committed), liger-kernel's Triton
# ops (its wheel carried in .whl/), what torch.compile generates, and FlashInfer's paged attention
# (.whl/flashinfer-site-*.tar.xz, made by ci/fetch-python-kernels) on the attention properties through
# third_party/flashinfer_ops.py, with its defaults and its two invariance settings, and FlashAttention-4's
# paged forward (.fa4/site, made by ci/fa4-wheels) through third_party/fa4_ops.py, and quack's CuTe DSL
# norms, softmax, cross entropy and GEMM (installed with FlashAttention-4) through
# third_party/quack_ops.py. Each campaign's table
# (third_party/table.py) is printed and saved as OUT_DIR/<name>.md. These are observed: a failing
# property is a finding, not a failure of this script, which exits 2 only where a campaign could
# not run (exit 2: bad input, or a module that does not import).
#   tests/python/test_third_party.sh OUT_DIR [seed|liger|inductor|flashinfer|fa4|quack ...]
#   (DETFUZZ_PYTHON: the interpreter, default python3; DETFUZZ_PYTHON_PACKAGE: the folder holding
#   the detfuzz package, default build/python; DETFUZZ_GPU_BUDGET: each campaign's budget, default 60s;
#   DETFUZZ_WORKERS: run each campaign with that many fork-mode workers on the one GPU, so that
#   Triton's compiles of new shapes run side by side; DETFUZZ_FLASHINFER_VARIANTS: which of
#   flashinfer_ops.py's ops run, default all four; empty: only the JIT warm-up)
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$(mkdir -p "$1" && cd "$1" && pwd)
shift
which=("$@"); [ ${#which[@]} -gt 0 ] || which=(seed liger inductor flashinfer)
py=${DETFUZZ_PYTHON:-python3}
tp=tests/python/third_party
export PYTHONPATH="${DETFUZZ_PYTHON_PACKAGE:-$root/build/python}${PYTHONPATH:+:$PYTHONPATH}"
cd "$root" || exit 2
budget=${DETFUZZ_GPU_BUDGET:-60s}
status=0

campaign() {  # name, then the fuzz flags
  local name=$1; shift
  echo "== $name: python -m detfuzz fuzz $* --budget $budget"
  "$py" -m detfuzz fuzz "$@" --backend cuda --no-corpus --quiet --budget "$budget" --seed 20261126 \
    ${DETFUZZ_WORKERS:+--workers "$DETFUZZ_WORKERS"} \
    --out "$out/$name" >"$out/$name.log" 2>&1
  local got=$?
  echo "exit $got"
  if [ $got -ge 2 ]; then tail -5 "$out/$name.log"; status=2; return; fi
  "$py" $tp/table.py "$out/$name" | tee "$out/$name.md"
  grep -E "cases/s|checked" "$out/$name.log" | tail -2
}

spec_ops() {  # the ops a spec file names, comma-separated
  grep -E "^op " "$1" | awk '{print $2}' | paste -sd,
}
fa4_site() {  # module, campaign: module importable, from .fa4/site (ci/fa4-wheels) where not installed; else 1
  "$py" -c "import $1" 2>/dev/null && return 0
  local site
  site=$("$root/ci/fa4-wheels" path) ||
    { echo "== $2: $1 is not installed and there is no .fa4/site (ci/fa4-wheels), skipped"; return 1; }
  export PYTHONPATH="$site:$PYTHONPATH"
}

for w in "${which[@]}"; do
  case $w in
    seed)
      if [ ! -f .seed/batch_invariant_ops.py ]; then echo "== seed: no .seed/batch_invariant_ops.py carried, skipped"; continue; fi
      campaign seed --mode .seed/batch_invariant_ops.py:enable_batch_invariant_mode --op mm,addmm,log_softmax,mean --impl torch ;;
    liger)
      if ! "$py" -c 'import liger_kernel' 2>/dev/null; then
        whl=$(ls .whl/liger_kernel-*.whl 2>/dev/null | head -1)
        [ -n "$whl" ] || { echo "== liger: liger_kernel is not installed and no .whl/liger_kernel-*.whl was carried, skipped"; continue; }
        "$py" -m pip install -q --no-index --no-deps --no-compile --target "$out/site" "$whl" || { status=2; continue; }
        export PYTHONPATH="$out/site:$PYTHONPATH"
      fi
      ops=$(spec_ops $tp/liger_ops.spec)
      campaign liger --import $tp/liger_ops.py --spec $tp/liger_ops.spec --op "$ops" ;;
    inductor)
      ops=$(spec_ops $tp/inductor_ops.spec)
      campaign inductor --import $tp/inductor_ops.py --spec $tp/inductor_ops.spec --op "$ops" ;;
    flashinfer)
      if ! "$py" -c 'import flashinfer' 2>/dev/null; then
        site=$(ls .whl/flashinfer-site-*.tar.xz 2>/dev/null | head -1)
        [ -n "$site" ] || { echo "== flashinfer: flashinfer is not installed and no .whl/flashinfer-site-*.tar.xz was carried (ci/fetch-python-kernels), skipped"; continue; }
        fi_site=$(mktemp -d)  # outside OUT_DIR: 440 MB of sources that the report does not need
        trap 'rm -rf "$fi_site"' EXIT
        tar -xJf "$site" -C "$fi_site" || { status=2; continue; }
        if ! "$py" -c 'import numpy' 2>/dev/null; then
          "$py" -m pip install -q --no-index --no-deps --no-compile --target "$fi_site" .whl/numpy-*.whl || { status=2; continue; }
        fi
        export PYTHONPATH="$fi_site:$PYTHONPATH" PATH="$fi_site/bin:$PATH"
      fi
      # FlashInfer compiles its kernels at first use (nvcc): every kind the campaign draws, in parallel, first.
      export FLASHINFER_BACKEND_LOG="$out/flashinfer-backends.txt"
      echo "== flashinfer: JIT warm-up"; "$py" $tp/flashinfer_ops.py warm 2>&1 | tail -12
      # One campaign per setting, so that shrinking one setting's failures does not take another's time.
      variants=${DETFUZZ_FLASHINFER_VARIANTS-paged_attention paged_attention_fixed_split paged_attention_no_split paged_attention_prefill_only}
      fi_runs=()
      for variant in $variants; do
        fi_runs+=("$out/flashinfer-$variant")
        campaign "flashinfer-$variant" --import $tp/flashinfer_ops.py --op paged_attention --dtype bfloat16 \
          --impl "detfuzz_flashinfer::$variant"
      done
      if [ ${#fi_runs[@]} -gt 0 ]; then
        echo "== flashinfer, every setting"; "$py" $tp/table.py "${fi_runs[@]}" | tee "$out/flashinfer.md"
        "$py" $tp/table.py --records "${fi_runs[@]}"
      fi
      echo "backends plan() resolved:"; sort -u "$FLASHINFER_BACKEND_LOG" 2>/dev/null ;;
    fa4)
      fa4_site flash_attn.cute fa4 || continue
      campaign fa4 --import $tp/fa4_ops.py --op paged_attention --dtype bfloat16 --impl detfuzz_fa4::paged_attention ;;
    quack)
      fa4_site quack.rmsnorm quack || continue
      echo "== quack: one case of each op"; "$py" $tp/quack_ops.py 2>&1 | tail -12
      ops=$(spec_ops $tp/quack_ops.spec)
      campaign quack --import $tp/quack_ops.py --spec $tp/quack_ops.spec --op "$ops" ;;
    *) echo "unknown campaign '$w' (seed, liger, inductor, flashinfer, fa4, quack)"; exit 2 ;;
  esac
done
exit $status
