#!/usr/bin/env bash
# Sharding: 4 shards, run as local processes (one through each way of naming the shard), take
# disjoint sets of targets and corpus records whose union is the unsharded campaign's; `merge`
# makes one report that is the union of the four; a bad shard is a one-line error, exit 2.
set -u
bin=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
common=(fuzz --backend cpu --impl invariant,torch --seed 11 --cases 100 --quiet --no-shrink)

"$bin" "${common[@]}" --out "$work/all" >/dev/null 2>&1; [ $? -le 1 ] && ok || bad "unsharded run"
"$bin" "${common[@]}" --shard 0/4 --out "$work/s0" >/dev/null 2>&1 &
p0=$!
DETFUZZ_SHARD=1/4 "$bin" "${common[@]}" --out "$work/s1" >/dev/null 2>&1 &
p1=$!
JOB_COMPLETION_INDEX=2 DETFUZZ_SHARD_COUNT=4 "$bin" "${common[@]}" --out "$work/s2" >/dev/null 2>&1 &
p2=$!
SLURM_ARRAY_TASK_ID=8 SLURM_ARRAY_TASK_MIN=5 SLURM_ARRAY_TASK_COUNT=4 "$bin" "${common[@]}" --out "$work/s3" >/dev/null 2>&1 &
p3=$!
for p in $p0 $p1 $p2 $p3; do wait "$p"; [ $? -le 1 ] && ok || bad "a shard's run"; done

python3 - "$work" <<'PY' && ok || bad "shards are not a partition of the unsharded campaign"
import csv, json, sys
w = sys.argv[1]
def targets(d):
    s = json.load(open(f"{w}/{d}/summary.json"))
    return s, {(t["op"], t["impl"], t["property"], t["dtype"]) for t in s["results"]["targets"]}
def corpus_rows(d):
    return {tuple(r[k] for k in ("op", "impl", "property", "dtype", "shape", "seed", "params", "outcome"))
            for r in csv.DictReader(open(f"{w}/{d}/cases.csv")) if r["source"] == "corpus"}
full_summary, full = targets("all")
seen, rows = set(), set()
for i in range(4):
    s, t = targets(f"s{i}")
    assert s["shard"]["index"] == i and s["shard"]["count"] == 4, s["shard"]
    assert not (t & seen), "a target in two shards"
    seen |= t
    r = corpus_rows(f"s{i}")
    assert not (r & rows), "a corpus record in two shards"
    rows |= r
assert seen == full, (len(seen), len(full))
assert rows == corpus_rows("all") and rows, (len(rows), len(corpus_rows("all")))
assert full_summary["shard"]["count"] == 1
PY

# detfuzz merge: the merged report is the union of the four (cases, failures, counts).
"$bin" merge "$work/merged" "$work/s0" "$work/s1" "$work/s2" "$work/s3" >/dev/null 2>"$work/err"
merge_rc=$?
[ "$merge_rc" -le 1 ] && ok || { bad "merge exit $merge_rc"; cat "$work/err"; }
python3 - "$work" "$merge_rc" <<'PY' && ok || bad "the merged report is not the union of the shards"
import csv, json, sys
w, rc = sys.argv[1], int(sys.argv[2])
def rows(d, f, drop=("case", "us")):
    return sorted(tuple((k, v) for k, v in r.items() if k not in drop) for r in csv.DictReader(open(f"{w}/{d}/{f}")))
shards = [f"s{i}" for i in range(4)]
m = json.load(open(f"{w}/merged/summary.json"))
assert rows("merged", "cases.csv") == sorted(sum((rows(d, "cases.csv") for d in shards), []))
assert rows("merged", "failures.csv") == sorted(sum((rows(d, "failures.csv") for d in shards), []))
assert [r["case"] for r in csv.DictReader(open(f"{w}/merged/cases.csv"))] == [str(i) for i in range(m["results"]["cases"] + m["results"]["corpus"]["replayed"])]
ss = [json.load(open(f"{w}/{d}/summary.json")) for d in shards]
assert m["results"]["cases"] == sum(s["results"]["cases"] for s in ss)
assert m["results"]["corpus"]["replayed"] == sum(s["results"]["corpus"]["replayed"] for s in ss)
assert len(m["results"]["targets"]) == sum(len(s["results"]["targets"]) for s in ss)
assert [s["shard"]["index"] for s in m["shards"]] == [0, 1, 2, 3]
assert m["exit_code"] == rc == max(s["exit_code"] for s in ss)
PY
# merge --out DIR SHARDS... is the same merge as the positional form.
"$bin" merge --out "$work/merged-out" "$work/s0" "$work/s1" "$work/s2" "$work/s3" >/dev/null 2>"$work/err"
[ $? -eq "$merge_rc" ] && ok || { bad "merge --out exit"; cat "$work/err"; }
python3 - "$work" <<'PY' && ok || bad "merge --out differs from the positional merge"
import json, sys
w = sys.argv[1]
a, b = (json.load(open(f"{w}/{d}/summary.json")) for d in ("merged", "merged-out"))
assert a["results"] == b["results"] and a["exit_code"] == b["exit_code"]
assert open(f"{w}/merged/cases.csv").read() == open(f"{w}/merged-out/cases.csv").read()
PY
"$bin" merge "$work/merged2" "$work/s0" "$work/nothing" >/dev/null 2>"$work/err"; [ $? -eq 2 ] && ok || bad "merge of a missing shard should exit 2"
[ -e "$work/merged2" ] && bad "a failed merge left its output" || ok

"$bin" "${common[@]}" --shard 4/4 --out "$work/bad" >/dev/null 2>"$work/err"; [ $? -eq 2 ] && ok || bad "--shard 4/4 should exit 2"
[ "$(wc -l <"$work/err")" -eq 1 ] && grep -q "shard '4/4'" "$work/err" && ok || { bad "--shard 4/4 error"; cat "$work/err"; }
JOB_COMPLETION_INDEX=1 "$bin" "${common[@]}" --out "$work/bad" >/dev/null 2>"$work/err"; [ $? -eq 2 ] && ok || bad "index without count should exit 2"
grep -q "DETFUZZ_SHARD_COUNT" "$work/err" && ok || bad "the error should name DETFUZZ_SHARD_COUNT"
[ -e "$work/bad" ] && bad "a failed run left $work/bad" || ok

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
