#!/usr/bin/env bash
# The detfuzz CLI as a user meets it: exit codes, one-line errors, nothing half-written,
# a libtorch CPU mm failure found, shrunk, saved and replayed bit for bit.
set -u
bin=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pass=0 fail=0
check() {  # check NAME EXPECTED_EXIT COMMAND...
  local name=$1 want=$2; shift 2
  "$@" >"$work/out" 2>"$work/err"; local got=$?
  if [ "$got" -eq "$want" ]; then pass=$((pass + 1)); else
    fail=$((fail + 1)); echo "FAIL $name: exit $got, wanted $want"; tail -n 5 "$work/out" "$work/err"; fi
}
one_line_error() {  # the last command's stderr is exactly one 'detfuzz: error:' line naming $1
  if [ "$(wc -l <"$work/err")" -eq 1 ] && grep -q "^detfuzz: error: .*$1" "$work/err"; then pass=$((pass + 1)); else
    fail=$((fail + 1)); echo "FAIL error message should name '$1':"; cat "$work/err"; fi
}

check "list" 0 "$bin" list
grep -q "mutant-splitk" "$work/out" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL list shows no mutants"; }
check "help" 0 "$bin" --help
check "no subcommand" 2 "$bin"
check "unknown flag" 2 "$bin" fuzz --frobnicate
one_line_error "not expected: --frobnicate (see: detfuzz fuzz --help)"
check "not a number" 2 "$bin" scan --n abc
one_line_error "--n = abc"
check "negative seed" 2 "$bin" fuzz --backend cpu --op mm --budget 1s --seed -5 --out "$work/r1"
one_line_error "--seed: '-5' is not a seed"
check "seed past 64 bits" 2 "$bin" fuzz --backend cpu --op mm --budget 1s --seed 18446744073709551616 --out "$work/r1"
one_line_error "is not a seed"
check "hex seed" 0 "$bin" fuzz --backend cpu --op mm --impl invariant --property repeat --cases 3 --seed 0x1F --no-corpus --out "$work/hex"
grep -q "seed=31 " "$work/out" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL --seed 0x1F is not seed 31"; head -2 "$work/out"; }

check "unknown op" 2 "$bin" fuzz --backend cpu --op conv9d --out "$work/r1"
one_line_error "unknown op 'conv9d'"
check "unknown impl" 2 "$bin" fuzz --backend cpu --op mm --impl cudnn-magic --out "$work/r1"
one_line_error "unknown impl 'cudnn-magic'"
check "unknown property" 2 "$bin" fuzz --backend cpu --property telepathy --out "$work/r1"
one_line_error "unknown property 'telepathy'"
check "unsupported dtype" 2 "$bin" fuzz --backend cpu --op mm --dtype int32 --out "$work/r1"
one_line_error "dtype int32 is not supported"
check "bad duration" 2 "$bin" fuzz --backend cpu --op mm --budget soon --out "$work/r1"
one_line_error "duration 'soon'"
check "unwritable out" 2 "$bin" fuzz --backend cpu --op mm --budget 1s --out /proc/detfuzz-report
one_line_error "cannot write the output folder"
printf 'op,impl\nmm\n' >"$work/bad.csv"
check "malformed corpus" 2 "$bin" fuzz --backend cpu --op mm --budget 1s --corpus "$work/bad.csv" --out "$work/r1"
one_line_error "bad.csv"
[ ! -e "$work/r1" ] && ! ls "$work" | grep -q partial && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL a refused run left files"; ls "$work"; }
check "replay malformed" 2 "$bin" replay "$work/bad.csv"
check "replay --case malformed" 2 "$bin" replay --case 'mm,invariant,batch_slice,cpu,float33,2x2x2,cc,normal,0x1,,pass,0,0,,,,0,0,'
one_line_error "unknown dtype 'float33'"
# A shape no memory can hold is a malformed record, for an observed impl too, not an op's error.
check "replay impossible shape" 2 "$bin" replay --case 'mm,torch,batch_slice,cpu,float32,99999999999x99999999x2,cc,normal,0x1,,pass,0,0,,,,0,0,'
one_line_error "shape 99999999999x99999999x2: its tensors need .* GiB, more than the host's"
# Inputs of 64 MiB, an output of 3.6 TiB.
check "replay impossible output" 2 "$bin" replay --case 'mm,invariant,batch_slice,cpu,float32,999999x999999x16,cc,normal,0x1,,pass,0,0,,,,0,0,'
one_line_error "shape 999999x999999x16: its tensors need"
check "replay impossible attention" 2 "$bin" replay --case 'paged_attention,invariant,seq_alone_vs_batched,cpu,float32,2x2x128x64,c,normal,0x0,kv=999999999 place=0 pool=0 q=1 target=0,pass,0,0,,,,0,0,'
one_line_error "paged_attention shape 2x2x128x64 with kv=999999999: its tensors need"
check "replay impossible model" 2 "$bin" replay --case 'prefill_graph,eager,seq_alone_vs_batched,cpu,float16,64000x409600x1x4x2x32x32,c,normal,0x0,bs=1.2 cached=6.6 len=16 new=1.1 page=1 target=0,pass,0,0,,,,0,0,'
one_line_error "prefill_graph shape 64000x409600x1x4x2x32x32 (vocab=64000 .*): its tensors need"
# Refused while it runs, a record from a file is named by file and line, in replay and in a campaign's corpus.
{ echo 'op,impl,property,backend,dtype,shape,layout,dist,seed,params,outcome,differing,numel,first_diff,expected_bits,actual_bits,max_abs_diff,max_ulp,detail'
  echo 'prefill_graph,eager,seq_alone_vs_batched,cpu,float16,64000x409600x1x4x2x32x32,c,normal,0x0,bs=1.2 cached=6.6 len=16 new=1.1 page=1 target=0,pass,0,0,,,,0,0,'; } >"$work/huge.csv"
check "replay impossible model from a file" 2 "$bin" replay "$work/huge.csv"
one_line_error "huge.csv:2: malformed record: prefill_graph shape 64000x409600x1x4x2x32x32"
check "corpus impossible model" 2 "$bin" fuzz --backend cpu --op prefill_graph --budget 1s --corpus "$work/huge.csv" --out "$work/r2"
one_line_error "huge.csv:2: malformed record: prefill_graph shape"
[ ! -e "$work/r2" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL a refused corpus record left a report"; }
check "replay impossible cache" 2 "$bin" replay --case 'prefill_graph,eager,seq_alone_vs_batched,cpu,float16,64x32x1x4x2x32x32,c,normal,0x0,bs=1.2 cached=99999999999.6 len=16 new=1.1 page=1 target=0,pass,0,0,,,,0,0,'
one_line_error "prefill_graph shape 64x32x1x4x2x32x32 .*: its tensors need"

# libtorch's CPU mm: found, shrunk, saved; exit 0 because torch is observed.
check "torch mm fuzz" 0 "$bin" fuzz --backend cpu --impl torch --op mm --dtype float32 --property batch_slice --budget 30s --seed 1 --stop-on-failure --out "$work/torch"
grep -q "failure (observed) mm/torch/batch_slice/float32, shrunk" "$work/out" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL no shrunk torch failure"; cat "$work/out"; }
[ "$(wc -l <"$work/torch/failures.csv")" -ge 2 ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL failures.csv empty"; }
check "replay torch record" 0 "$bin" replay "$work/torch/failures.csv" --expect-reproduce
grep -qE "([0-9]+) of \1 recorded failures reproduced bit for bit" "$work/out" && pass=$((pass + 1)) || { fail=$((fail + 1)); cat "$work/out"; }
# The printed repro command works as printed.
repro=$(grep -m1 "repro: " "$work/torch/../out" 2>/dev/null || true)
check "torch mm fuzz again for its repro line" 0 "$bin" fuzz --backend cpu --impl torch --op mm --dtype float32 --property batch_slice --budget 30s --seed 1 --stop-on-failure --no-corpus --out "$work/torch2"
repro=$(grep -m1 "  repro: " "$work/out" | sed 's/^  repro: //')
check "repro command" 0 bash -c "$repro --expect-reproduce"

# A planted mutant fails the run (exit 1) and the invariant impl holds (exit 0).
check "mutant exits 1" 1 "$bin" fuzz --backend cpu --impl mutant-splitk --op mm --budget 20s --seed 2 --stop-on-failure --no-corpus --out "$work/mutant"
check "invariant exits 0" 0 "$bin" fuzz --backend cpu --impl invariant --op mm,log_softmax --budget 10s --seed 3 --out "$work/inv"
for f in cases.csv failures.csv summary.json; do [ -s "$work/inv/$f" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL missing $f"; }; done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
