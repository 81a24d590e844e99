#!/usr/bin/env bash
# What CI and people read from a run: JUnit XML (checked against the schema by check_junit.py),
# `detfuzz gate` over report folders and a stored bench.csv, `detfuzz report` (one self-contained
# HTML file), and small defects kept fixed: bench refuses a bad selection before timing,
# out-of-range record parameters are one-line errors, and the end-of-run table is aligned.
set -u
bin=$1
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pass=0 fail=0
check() {  # check NAME EXPECTED_EXIT COMMAND...
  local name=$1 want=$2; shift 2
  "$@" >"$work/out" 2>"$work/err"; local got=$?
  if [ "$got" -eq "$want" ]; then pass=$((pass + 1)); else
    fail=$((fail + 1)); echo "FAIL $name: exit $got, wanted $want"; tail -n 5 "$work/out" "$work/err"; fi
}
ok() {  # ok NAME COMMAND...: the command succeeds
  local name=$1; shift
  if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $name"; fi
}
one_line_error() {  # the last command's stderr is exactly one 'detfuzz: error:' line naming $1
  if [ "$(wc -l <"$work/err")" -eq 1 ] && grep -q "^detfuzz: error: .*$1" "$work/err"; then pass=$((pass + 1)); else
    fail=$((fail + 1)); echo "FAIL error message should name '$1':"; cat "$work/err"; fi
}

# JUnit: a planted mutant fails its testcase (with the shrunk record and repro), the invariant passes.
check "fuzz --junit" 1 "$bin" fuzz --backend cpu --op mm --impl invariant,mutant-splitk --property batch_slice --dtype float32 \
  --budget 20s --seed 5 --stop-on-failure --no-corpus --junit "$work/junit.xml" --out "$work/mutant"
ok "junit schema" python3 "$here/check_junit.py" "$work/junit.xml" --failing detfuzz.cpu.mm.mutant-splitk/batch_slice/float32 \
  --passing detfuzz.cpu.mm.invariant/batch_slice/float32
# The end-of-run table: every row as wide as the header, a cases/s column.
awk '/^target +expect/{h=length($0); on=1; next} on&&NF==0{on=0} on{if (length($0)!=h) bad=1} END{exit bad}' "$work/out" &&
  grep -q "cases/s" "$work/out" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL table not aligned"; cat "$work/out"; }
check "junit unwritable" 2 "$bin" fuzz --backend cpu --op mm --budget 1s --no-corpus --junit /proc/nope/junit.xml --out "$work/r1"
one_line_error "JUnit file /proc/nope/junit.xml"
[ ! -e "$work/r1" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL a refused run left its report"; }

# gate: the failing run fails it, a passing run passes it.
check "gate must-hold failed" 1 "$bin" gate --run "$work/mutant"
grep -q "FAIL must-hold mm/mutant-splitk/batch_slice/float32" "$work/out" && pass=$((pass + 1)) || { fail=$((fail + 1)); cat "$work/out"; }
check "fuzz invariant" 0 "$bin" fuzz --backend cpu --op mean --impl invariant --budget 3s --seed 6 --no-corpus --quiet --out "$work/good"
check "gate passes" 0 "$bin" gate --run "$work/good"
# gate against a stored bench.csv: a speedup 20% lower fails at the default 10%, passes at 25%.
hdr=op,impl,dtype,M,N,K,median_us,tflops,gbps,baseline_impl,cublas_median_us,speedup_vs_cublas,invariant_verified
mkdir -p "$work/base" "$work/new"
printf '%s\nmm,invariant,bfloat16,8,4096,4096,50.0,5.4,,cublas,25.0,0.5000,yes\nmm,cublas,bfloat16,8,4096,4096,25.0,10.7,,cublas,25.0,1.0000,yes\nmean,invariant,float32,1024,32768,0,40.0,,3000.0,torch,40.0,1.0000,yes\n' "$hdr" >"$work/base/bench.csv"
printf '%s\nmm,invariant,bfloat16,8,4096,4096,62.5,4.3,,cublas,25.0,0.4000,yes\nmean,invariant,float32,1024,32768,0,39.0,,3100.0,torch,40.0,1.0256,yes\nmm,invariant,bfloat16,1,4096,4096,60.0,0.6,,cublas,27.0,0.4500,yes\n' "$hdr" >"$work/new/bench.csv"
check "gate slower" 1 "$bin" gate --baseline "$work/base" --run "$work/new"
grep -q "FAIL slower mm/invariant/bfloat16 M=8 N=4096 K=4096" "$work/out" && grep -q "1 rows the baseline lacks" "$work/out" &&
  pass=$((pass + 1)) || { fail=$((fail + 1)); cat "$work/out"; }
check "gate threshold" 0 "$bin" gate --baseline "$work/base/bench.csv" --run "$work/new" --run "$work/good" --max-slowdown 0.25
sed 's/0.4500,yes/0.4500,no/' "$work/new/bench.csv" >"$work/unverified.csv"
check "gate unverified bench row" 1 "$bin" gate --run "$work/unverified.csv"
# Attention rows carry their page size: the same prefill on pages of 16 and of 64 are two rows.
hdr_pages=$hdr,d2d_gbps,bandwidth_share_of_d2d,page
row='paged_attention_prefill,invariant,bfloat16,1,8192,128,2000.0,275.00,,torch-sdpa-flash,2400.0'
printf '%s\n%s,1.2000,yes,,,16\n%s,1.2000,yes,,,64\n' "$hdr_pages" "$row" "$row" >"$work/attn-base.csv"
printf '%s\n%s,1.2000,yes,,,16\n%s,0.9000,yes,,,64\n' "$hdr_pages" "$row" "$row" >"$work/attn-new.csv"
check "gate attention pages" 1 "$bin" gate --baseline "$work/attn-base.csv" --run "$work/attn-new.csv"
grep -q "FAIL slower paged_attention_prefill/invariant/bfloat16 M=1 N=8192 K=128 page=64" "$work/out" &&
  ! grep -q "K=128:" "$work/out" && pass=$((pass + 1)) || { fail=$((fail + 1)); cat "$work/out"; }
# And their KV heads: the same prefill with 8 KV heads (GQA) and with 32 (MHA) are two rows.
hdr_heads=$hdr_pages,kv_heads
printf '%s\n%s,1.2000,yes,,,16,8\n%s,1.2000,yes,,,16,32\n' "$hdr_heads" "$row" "$row" >"$work/heads-base.csv"
printf '%s\n%s,1.2000,yes,,,16,8\n%s,0.9000,yes,,,16,32\n' "$hdr_heads" "$row" "$row" >"$work/heads-new.csv"
check "gate attention kv heads" 1 "$bin" gate --baseline "$work/heads-base.csv" --run "$work/heads-new.csv"
grep -q "FAIL slower paged_attention_prefill/invariant/bfloat16 M=1 N=8192 K=128 kv_heads=32" "$work/out" &&
  ! grep -q "K=128:" "$work/out" && pass=$((pass + 1)) || { fail=$((fail + 1)); cat "$work/out"; }
# A decode row timed against a copy and FlashAttention-2 is two rows: each gated against its own;
# a row without a speedup (its baseline refused the shape) is not compared.
drow='paged_attention_decode,invariant,bfloat16,16,4096,128,100.0,,2500.0'
printf '%s\n%s,d2d-copy,90.0,0.9000,yes,,,16\n%s,torch-flash-decode,95.0,0.9500,yes,,,16\n%s,d2d-copy,nan,nan,yes,,,64\n' \
  "$hdr_pages" "$drow" "$drow" "$drow" >"$work/dec-base.csv"
printf '%s\n%s,d2d-copy,90.0,0.9000,yes,,,16\n%s,torch-flash-decode,70.0,0.7000,yes,,,16\n%s,d2d-copy,nan,nan,yes,,,64\n' \
  "$hdr_pages" "$drow" "$drow" "$drow" >"$work/dec-new.csv"
check "gate second baseline" 1 "$bin" gate --baseline "$work/dec-base.csv" --run "$work/dec-new.csv"
grep -q "FAIL slower paged_attention_decode/invariant/bfloat16 M=16 N=4096 K=128 vs torch-flash-decode" "$work/out" &&
  [ "$(grep -c "FAIL slower" "$work/out")" = 1 ] && grep -q "1 rows without a speedup" "$work/out" &&
  pass=$((pass + 1)) || { fail=$((fail + 1)); cat "$work/out"; }
check "gate no run" 2 "$bin" gate --baseline "$work/base"
check "gate missing run" 2 "$bin" gate --run "$work/nothing-here"
one_line_error "does not exist"
printf 'op,impl\nmm,x\n' >"$work/bad.csv"
check "gate malformed baseline" 2 "$bin" gate --baseline "$work/bad.csv" --run "$work/new"
one_line_error "not a bench.csv"

# bench: a bad selection exits 2 at once, before any GPU is needed or anything is timed.
check "bench unknown impl" 2 timeout 20 "$bin" bench --impl invariant,no-such-impl
one_line_error "impl 'no-such-impl'"
check "bench unknown op" 2 timeout 20 "$bin" bench --op mm,conv9d
one_line_error "op 'conv9d'"

# Records whose slice does not fit the batch are rejected, naming the field, not clamped.
check "replay i out of range" 2 "$bin" replay --case 'mm,invariant,batch_slice,cpu,float32,4x3x5,cc,normal,0x1,i=4 j=5,pass,0,0,,,,0,0,'
one_line_error "parameter i=4"
check "replay j out of range" 2 "$bin" replay --case 'mm,invariant,batch_slice,cpu,float32,4x3x5,cc,normal,0x1,i=1 j=9,pass,0,0,,,,0,0,'
one_line_error "parameter j=9"

# report: one self-contained HTML file of a fuzz, a bench and a scan folder.
printf 'impl,dtype,N,K,M,row0_differs_vs_1row,row0_max_ulp,prefix_differs_vs_prev,prefix_differing\ncublas,bfloat16,4096,4096,1,0,0,0,0\ncublas,bfloat16,4096,4096,2,1,3,1,17\ncublas,bfloat16,4096,4096,3,1,2,0,0\n' >"$work/scan.csv"
mkdir -p "$work/scan" && mv "$work/scan.csv" "$work/scan/"
mkdir -p "$work/heads" && cp "$work/heads-new.csv" "$work/heads/bench.csv"  # attention rows of 8 and 32 KV heads
check "report" 0 "$bin" report "$work/mutant" "$work/new" "$work/scan" "$work/heads" --out "$work/report.html"
for want in "<svg" "mm/mutant-splitk/batch_slice/float32" "replay --case" "N=4096 K=4096" "row 0 differs at 2 of 3" "class='matrix'" \
  "MUST-HOLD PROPERTY FAILED" "<td>paged_attention_prefill kv_heads=32</td>"; do
  grep -qF "$want" "$work/report.html" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL report lacks '$want'"; }
done
# Self-contained: nothing fetched (the SVG namespace is a name, not a fetch; in-page links are #anchors).
! grep -vF 'xmlns="http://www.w3.org/2000/svg"' "$work/report.html" | grep -qiE "src=|href=[\"'][^#]|https?://|<script" && pass=$((pass + 1)) ||
  { fail=$((fail + 1)); echo "FAIL the report fetches something"; }
check "report default out" 0 "$bin" report "$work/good"
[ -s "$work/good/report.html" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL no report.html in the run folder"; }
check "report not a report" 2 "$bin" report "$work/base/.."
one_line_error "not a detfuzz report folder"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
