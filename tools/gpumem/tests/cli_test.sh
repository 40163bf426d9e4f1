#!/usr/bin/env bash
# CLI tests of the gpumem tool: cli_test.sh GPUMEM_BINARY TESTS_DIR WORK_DIR
# Each check prints "ok - what" or "FAIL - what" with the output; exits 1 if any failed.
set -u
bin=$1 tests=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
failures=0
ok() { echo "ok - $1"; }
fail() { echo "FAIL - $1"; echo "--- stdout:"; cat out.txt; echo "--- stderr:"; cat err.txt; failures=$((failures + 1)); }
# run EXPECTED_RC ARGS...: runs the tool, output in out.txt / err.txt.
run() { local want=$1; shift; "$bin" "$@" >out.txt 2>err.txt; rc=$?; [ "$rc" -eq "$want" ]; }
has() { grep -qF -- "$1" "$2"; }

if run 0 && has "pool" out.txt && has "peak held" out.txt && has "gpt2_train.csv" out.txt &&
   has "resnet50_train.csv" out.txt && has "report: " out.txt && [ -s gpumem-report/index.html ] &&
   [ -s gpumem-report/results.json ] && has '"timeline"' gpumem-report/index.html; then
  ok "default run: exit 0, table of both bundled traces, report folder"
else fail "default run (rc=$rc)"; fi

if run 0 --version && grep -qE '^gpumem [0-9]+\.[0-9]+\.[0-9]+ \(CCCL [0-9]+\.[0-9]+\.[0-9]+, CUDA runtime [0-9]+\.[0-9]+\)$' out.txt; then
  ok "--version names gpumem's version and its CCCL"
else fail "--version (rc=$rc)"; fi

if run 0 replay "$tests/golden.csv" -r pool:initial=1MiB -r cuda --simulate --csv &&
   has "golden.csv,pool:initial=1MiB>cuda,ok,8000,1048576,131.072000,0.023438,0.001969,1038336," out.txt &&
   has "golden.csv,cuda,ok,8000,8000,1.000000,0.000000,0.000000,0," out.txt; then
  ok "golden numbers (CSV)"
else fail "golden numbers (rc=$rc)"; fi

if run 0 replay "$tests/golden.csv" -r pool:initial=1MiB --simulate --json &&
   python3 -c 'import json,sys; d=json.load(open("out.txt")); r=d["traces"][0]["results"][0]; assert r["peak_held_bytes"]==1048576 and r["at_peak"]["largest_free_bytes"]==1038336 and r["at_peak"]["internal_bytes"]==192, r'; then
  ok "--json is valid JSON with the golden numbers"
else fail "--json (rc=$rc)"; fi

printf 'Thread,Time,Action,Pointer,Size,Stream\n0,1,allocate,0x10,256,0\n0,2,allocate,0x20,twelve,0\n' > bad.csv
if run 2 replay bad.csv --simulate && has "bad.csv:3: expected a decimal Size, found 'twelve'" err.txt; then
  ok "malformed line: file, line and what was expected"
else fail "malformed line (rc=$rc)"; fi

if run 2 replay missing.csv --simulate && has "missing.csv: cannot open the trace" err.txt; then
  ok "missing trace"
else fail "missing trace (rc=$rc)"; fi

if run 2 replay "$tests/golden.csv" -r poool --simulate && has "unknown resource 'poool'" err.txt &&
   has "pool" err.txt && has "arena" err.txt && has "binning" err.txt && has "cuda" err.txt; then
  ok "unknown resource lists the valid names"
else fail "unknown resource (rc=$rc)"; fi

if run 2 replay "$tests/golden.csv" -r pool:initial=lots --simulate && has "cannot read 'lots' as a size" err.txt; then
  ok "bad size says what to write"
else fail "bad size (rc=$rc)"; fi

if run 2 replay "$tests/golden.csv" -r pool:inital=1MiB --simulate && has "has no parameter 'inital'" err.txt &&
   has "initial (default" err.txt; then
  ok "unknown parameter lists the parameters"
else fail "unknown parameter (rc=$rc)"; fi

printf 'Thread,Time,Action,Pointer,Size,Stream\n0,1,allocate,0x10,4096,0\n0,2,allocate,0x20,4096,0\n0,3,allocate,0x30,65536,0\n0,4,free,0x10,4096,0\n' > oom.csv
if run 3 replay oom.csv -r cuda --simulate=16KiB && has "OUT OF MEMORY at line 4" out.txt &&
   has "out of memory at event 2 (line 4)" out.txt && has "state: holds 8.00 KiB, live 8.00 KiB in 2 blocks" out.txt; then
  ok "simulated capacity too small: out of memory at the event, with the state"
else fail "out of memory (rc=$rc)"; fi

printf 'Thread,Time,Action,Pointer,Size,Stream\n0,1,allocate,0x10,512,0\n0,2,free,0x99,64,0\n0,3,allocate,0x10,1024,0\n0,4,free,0x10,2048,0\n' > anomalies.csv
if run 0 replay anomalies.csv -r pool --simulate && has "1 free(s) of unknown pointers skipped" out.txt &&
   has "1 allocate(s) of a live pointer" out.txt && has "1 free(s) with a wrong size" out.txt; then
  ok "unknown frees and double allocates counted and reported"
else fail "anomalies (rc=$rc)"; fi

"$bin" synth threads.csv --events 3000 --threads 4 --streams 4 >/dev/null 2>&1
if run 0 replay threads.csv -r pool -r arena --simulate --threads && has "4 thread(s), 4 stream(s)" out.txt; then
  ok "--threads replays a 4-thread trace"
else fail "--threads (rc=$rc)"; fi

for cmd in "" replay bench info convert synth; do
  if run 0 $cmd --help && has "Usage" out.txt; then ok "gpumem $cmd --help"; else fail "gpumem $cmd --help"; fi
done
if run 0 replay --help && has "Examples" out.txt; then ok "replay --help has examples"; else fail "examples"; fi

if run 2 replay "$tests/golden.csv" --frobnicate && has "unknown option '--frobnicate'" err.txt; then
  ok "unknown option"
else fail "unknown option (rc=$rc)"; fi

if run 0 info && (has "No GPU" out.txt || has "CUDA device(s)" out.txt); then
  ok "info"
else fail "info (rc=$rc)"; fi

if python3 "$tests/make_snapshot.py" snap.pickle && run 0 convert snap.pickle -o snap.csv &&
   [ "$(cat snap.csv)" = "$(printf 'Thread,Time,Action,Pointer,Size,Stream\n0,2,allocate,0x7f0000000000,512,0\n0,3,allocate,0x7f0000000200,1024,7\n0,4,free,0x7f0000000000,512,0\n0,6,allocate,0x7f0000000600,4096,0\n0,7,free,0x7f0000000200,1024,7')" ] &&
   run 0 replay snap.csv -r pool --simulate && has "peak live 5.00 KiB" out.txt; then
  ok "convert a PyTorch snapshot and replay it"
else fail "convert (rc=$rc)"; cat snap.csv; fi

# Call stacks end to end: a snapshot with frames -> convert -> replay -> results.json.
python3 - snapframes.pickle <<'PY'
import pickle, sys
f = [{"filename": "model.py", "line": 12, "name": "forward"}, {"filename": "train.py", "line": 40, "name": "main"}]
t = [{"action": "alloc", "addr": 0x1000, "size": 512, "stream": 0, "time_us": 10, "frames": f},
     {"action": "alloc", "addr": 0x2000, "size": 1024, "stream": 0, "time_us": 20, "frames": f[1:]},
     {"action": "free_completed", "addr": 0x1000, "size": 512, "stream": 0, "time_us": 30}]
pickle.dump({"segments": [], "device_traces": [t]}, open(sys.argv[1], "wb"))
PY
if run 0 convert snapframes.pickle -o snapframes.csv && has "Thread,Time,Action,Pointer,Size,Stream,Frames" snapframes.csv &&
   run 0 replay snapframes.csv -r pool -r cuda --simulate --report framesreport &&
   python3 -c '
import json
def no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    assert len(keys) == len(set(keys)), keys
    return dict(pairs)
d = json.load(open("framesreport/results.json"), object_pairs_hook=no_duplicates); t = d["traces"][0]
assert t["allocation_count"] == 2, t["allocation_count"]
assert d["report_version"] == 2, d.get("report_version")
assert t["frames"] == ["forward (model.py:12)", "main (train.py:40)"], t["frames"]
assert t["stacks"] == [[0, 1], [1]], t["stacks"]
assert t["allocations"] == [[0, 2, 512, 0], [1, -1, 1024, 1]], t["allocations"]
assert t["time_us"] == [[0, 0], [1, 10], [2, 20]], t["time_us"]
assert t["live_timeline"] == [[0, 512], [1, 1536], [2, 1024]], t["live_timeline"]
for r in t["results"]:
    assert r["layout_known"] and len(r["addresses"]) == 2 and -1 not in r["addresses"], r
    assert r["at_peak"]["live_blocks"] == 2 and r["chunks"], r
'; then
  ok "call stacks: convert keeps frames, results.json has frames, stacks and allocations"
else fail "frames end to end (rc=$rc)"; fi

# A stack out of memory before the peak: no numbers at the peak, the live line still there.
if run 3 replay oom.csv -r cuda --simulate=16KiB --report oomreport &&
   python3 -c '
import json; t = json.load(open("oomreport/results.json"))["traces"][0]; r = t["results"][0]
assert r["at_peak"] is None and r["failure"]["event"] == 2, r
assert t["live_timeline"] and t["verdict"]["leanest"] is None, t["verdict"]
assert any("before the trace" in n for n in t["verdict"]["notes"]), t["verdict"]
'; then
  ok "out of memory before the peak: at_peak null, live timeline from the trace"
else fail "oom report (rc=$rc)"; fi
if run 3 replay oom.csv -r cuda --simulate=16KiB --csv && has "oom.csv,cuda,out_of_memory,73728,8192,0.111111,,,," out.txt; then
  ok "CSV: no numbers at the peak for a stack that failed before it"
else fail "oom report (rc=$rc)"; fi

if run 0 replay "$tests/golden.csv" -r pool:initial=1MiB -r pool:initial=64MiB -r cuda --simulate &&
   has "0.2% of 1016.00 KiB" out.txt && has "(host bookkeeping only)" out.txt &&
   has "verdict: leanest pool:initial=1MiB>cuda (held/live 131.072), next pool:initial=64MiB>cuda" out.txt &&
   has "over 5 repeat(s)" out.txt && has "note: cuda (held/live 1.000" out.txt &&
   has "suggestion: pool:initial=1MiB" out.txt; then
  ok "table: external fragmentation with its free bytes, verdict (baseline aside, spreads) and suggestion lines"
else fail "verdict lines (rc=$rc)"; fi

if run 0 replay "$tests/golden.csv" -r pool -r binning -r cuda --simulate --repeat 3 --json &&
   python3 -c '
import json
t = json.load(open("out.txt"))["traces"][0]
v, s = t["verdict"], t["verdict_spread"]
for r in t["results"]:
    n = r["figures"]["ns_per_op"]
    assert len(n["repeats"]) == 3 and n["min"] <= n["median"] <= n["max"], r
    assert abs(r["ns_per_op"] - n["median"]) <= 1e-5 * n["median"], r  # the same, to 6 digits
    f = r["figures"]  # the figures as they are, not rounded: the page rounds them as the table does
    if f.get("free_bytes"):
        assert f["external_fragmentation"] == 1 - f["largest_free_bytes"] / f["free_bytes"], f
assert v["leanest"] != "cuda" and v["fastest"] != "cuda" and s["repeats"] == 3, (v, s)
a, b = s["fastest_ns_per_op"], s["fastest_runner_up"]["ns_per_op"]
assert s["fastest_clear"] == (a["max"] < b["min"] or b["max"] < a["min"]), s
'; then
  ok "--repeat 3: three timings per stack, median and spread (figures unrounded); the verdict leaves the baseline out"
else fail "--repeat (rc=$rc)"; fi
if run 2 replay "$tests/golden.csv" --simulate --repeat 0 && has "--repeat" err.txt && has "from 1 to 100" err.txt; then
  ok "--repeat 0 is refused, naming the range"
else fail "--repeat 0 (rc=$rc)"; fi

printf 'Thread,Time,Action,Pointer,Size,Stream\n' > empty.csv
if run 0 replay empty.csv -r pool -r cuda --simulate --json &&
   python3 -c 'import json; v = json.load(open("out.txt"))["traces"][0]["verdict"]; assert v["leanest"] is None and v["suggestion"] is None and v["notes"], v'; then
  ok "a trace with nothing live: no leanest, no suggestion, a note"
else fail "empty trace verdict (rc=$rc)"; fi

printf 'not a pickle' > junk.pickle
if run 1 convert junk.pickle -o junk.csv && has "not a PyTorch memory snapshot" err.txt; then
  ok "convert rejects a non-snapshot"
else fail "convert junk (rc=$rc)"; fi

if run 0 bench --smoke --simulate --json --no-progress &&
   python3 -c 'import json; d=json.load(open("out.txt")); assert len(d["workloads"]) == 5, d'; then
  ok "bench --smoke --json: five workloads"
else fail "bench smoke (rc=$rc)"; fi

if run 0 bench --smoke --simulate -r pool -w pair -w threads && has "pair:" out.txt && has "2 thread(s)" out.txt; then
  ok "bench text tables"
else fail "bench text (rc=$rc)"; fi

if run 0 replay "$tests/golden.csv" -r vmm_pool -r pool --simulate --driver-calls --repeat 1 --no-progress &&
   has "CUDA calls, cold: " out.txt && grep -qE 'CUDA calls, cold: .*create [1-9][0-9]* \(' out.txt &&
   has "CUDA calls, warm: " out.txt &&
   run 0 replay "$tests/golden.csv" -r vmm_pool --simulate --driver-calls --repeat 1 --json &&
   python3 -c 'import json; d=json.load(open("out.txt")); r=d["traces"][0]["results"][0]; c=r["driver_calls"]; w=r["warm_driver_calls"]; assert c["create"]["calls"] > 0 and c["map"]["calls"] > 0 and "seconds" in c["set_access"], c; assert w["create"]["calls"] < c["create"]["calls"] and "calls" in w["map"], w'; then
  ok "--driver-calls: the cold and warm replays' CUDA calls in the table and the JSON"
else fail "--driver-calls (rc=$rc)"; fi

# The PyTorch peers' plumbing, with a stand-in for the child script: its JSON answer becomes the
# peer's column; a peer that cannot run is left out with its reason on one line.
cat > fake_peer.py <<'PY'
import json, sys
if "--expandable" in sys.argv:
    print(json.dumps({"skipped": "PyTorch sees no CUDA device"}))
else:
    assert sys.argv[-1].endswith("golden.csv"), sys.argv
    print(json.dumps({"peer": "torch", "cold_ns_per_event": 1234.4, "warm_ns_per_event": 321.0,
                      "peak_used_bytes": 8336, "peak_live_bytes": 8000, "used_over_live": 1.042}))
PY
if GPUMEM_TORCH_PEER=fake_peer.py GPUMEM_PYTHON=python3 run 0 bench --simulate -r pool -w replay \
     --trace "$tests/golden.csv" --smoke --no-progress &&
   grep -qE '^golden.csv .*\| +[0-9]+ / [0-9]+ / [0-9.]+ \| 1234 / 321 / 1.042$' out.txt &&
   has "| torch" out.txt && ! has "| torch_expandable" out.txt &&
   has "torch_expandable: skipped: PyTorch sees no CUDA device" out.txt &&
   GPUMEM_TORCH_PEER=fake_peer.py run 0 bench --simulate -r pool -w replay --trace "$tests/golden.csv" --smoke --json &&
   python3 -c 'import json; w=json.load(open("out.txt"))["workloads"][0]; r=w["rows"]["golden.csv"]; assert r["torch"]==1234.4 and r["torch:warm_ns"]==321.0 and r["torch:footprint_ratio"]==1.042, r; assert any("torch_expandable: skipped" in n for n in w["notes"]), w'; then
  ok "PyTorch peers: a child's JSON answer is a column; a skipped peer says why"
else fail "PyTorch peers (rc=$rc)"; fi

if run 0 bench --simulate -r pool -w replay --trace "$tests/golden.csv" --smoke --no-progress &&
   has "torch: skipped: it needs a GPU (this run is on the simulated device)" out.txt; then
  ok "PyTorch peers skipped on the simulated device, saying why"
else fail "PyTorch peers on the simulated device (rc=$rc)"; fi

cat > broken_peer.py <<'PY'
print("Traceback (most recent call last): nonsense")
PY
if GPUMEM_TORCH_PEER=broken_peer.py run 0 bench --simulate -r pool -w replay --trace "$tests/golden.csv" --smoke --no-progress &&
   has "torch: skipped: its answer is not JSON: 'Traceback" out.txt; then
  ok "PyTorch peers: an answer that is not JSON is a skip that quotes it"
else fail "PyTorch peers, bad answer (rc=$rc)"; fi

echo "$failures failure(s)"
[ "$failures" -eq 0 ]
