#!/usr/bin/env bash
# Hostile input against the gpumem tool: hostile_test.sh GPUMEM_BINARY TESTS_DIR WORK_DIR
# One check per class of attack: exit status, the message, and that no input or existing output
# changed (checksums before and after). Prints "ok - what" or "FAIL - what"; exits 1 on a failure.
set -u
bin=$1 tests=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
failures=0
ok() { echo "ok - $1"; }
fail() { echo "FAIL - $1"; echo "--- stdout:"; head -c 3000 out.txt; echo "--- stderr:"; head -c 3000 err.txt; failures=$((failures + 1)); }
# run EXPECTED_RC ARGS...: runs the tool (no progress bar), output in out.txt / err.txt.
run() { local want=$1; shift; "$bin" "$@" >out.txt 2>err.txt; rc=$?; [ "$rc" -eq "$want" ]; }
has() { grep -qF -- "$1" "$2"; }
sum() { sha256sum "$1" | cut -d' ' -f1; }
cp "$tests/golden.csv" golden.csv
golden=$(sum golden.csv)

# -- data loss: an output that is also an input -------------------------------------------------
if run 1 replay golden.csv -r 'logging:file=golden.csv>pool' --simulate &&
   has "it is also an input" err.txt && [ "$(sum golden.csv)" = "$golden" ]; then
  ok "a logging layer writing into the trace is refused; the trace is intact"
else fail "logging layer over the trace (rc=$rc)"; fi

if run 1 replay golden.csv -r pool --simulate --report . && [ "$(sum golden.csv)" = "$golden" ]; then
  :  # the report folder holds no file named like the trace: allowed
fi
cp golden.csv results.csv; results=$(sum results.csv)
if run 1 replay results.csv -r pool --simulate --report . && has "it is also an input" err.txt &&
   [ "$(sum results.csv)" = "$results" ]; then
  ok "the report's results.csv that is also the trace is refused"
else fail "report over the trace (rc=$rc)"; fi

python3 "$tests/make_snapshot.py" snap.pickle; snap=$(sum snap.pickle)
if run 1 convert snap.pickle -o snap.pickle && has "it is also an input" err.txt &&
   [ "$(sum snap.pickle)" = "$snap" ]; then
  ok "convert -o equal to its input is refused; the snapshot is intact"
else fail "convert onto its input (rc=$rc)"; fi
ln -s snap.pickle alias.csv
if run 1 convert snap.pickle -o alias.csv && [ "$(sum snap.pickle)" = "$snap" ]; then
  ok "convert -o a link to its input is refused"
else fail "convert onto a link to its input (rc=$rc)"; fi

printf 'keep me\n' > existing.csv; existing=$(sum existing.csv)
printf 'not a pickle' > junk.pickle
if run 1 convert junk.pickle -o existing.csv && has "not a PyTorch memory snapshot" err.txt &&
   [ "$(sum existing.csv)" = "$existing" ] && [ -z "$(ls | grep gpumem-tmp)" ]; then
  ok "a malformed snapshot leaves an existing output as it was (no temporary left)"
else fail "convert of a malformed snapshot over an existing file (rc=$rc)"; fi

# Snapshots that unpickle but hold the wrong values, and the fuzzer's finds (tests/fuzz/corpus/
# snapshot_converter/regression_*): each refused with a message, never a Python traceback.
for snapshot in "$tests"/../../../tests/fuzz/corpus/snapshot_converter/regression_*; do
  name=$(basename "$snapshot")
  if run 1 convert "$snapshot" -o existing.csv && has "$name: " err.txt &&
     ! has "Traceback" err.txt && [ "$(sum existing.csv)" = "$existing" ]; then
    ok "convert refuses $name: $(tail -1 err.txt | sed 's/.*regression_[a-z_0-9]*: //')"
  else fail "convert of $name (rc=$rc)"; fi
done

# -- write failures are detected ----------------------------------------------------------------
if [ -w /dev/full ]; then
  if run 1 synth /dev/full --events 100000 && has "/dev/full" err.txt; then
    ok "synth to a full disk fails with the path"
  else fail "synth to /dev/full (rc=$rc)"; fi
  "$bin" replay golden.csv -r pool --simulate --csv >/dev/full 2>err.txt; rc=$?
  if [ "$rc" -eq 1 ] && has "cannot write the results" err.txt; then
    ok "results to a full stdout: exit 1"
  else fail "stdout to /dev/full (rc=$rc)"; fi
fi
mkdir ro && chmod 555 ro
if [ ! -w ro ]; then  # (root can write anywhere)
  if run 1 synth ro/t.csv --events 10 && has "ro/t.csv" err.txt; then ok "unwritable folder"; else fail "unwritable folder (rc=$rc)"; fi
fi

# -- numbers: overflow, negative, out of range -----------------------------------------------------
if run 2 synth big.csv --events=-1 && has "from 0 to" err.txt && [ ! -e big.csv ]; then
  ok "synth --events=-1 is refused with the range; nothing written"
else fail "negative count (rc=$rc)"; fi
for bad in "--threads=4294967297" "--threads=0" "--streams=99999999999999999999" "--max-live=0" "--seed=1x"; do
  if run 2 synth big.csv $bad && has "give a whole number from" err.txt; then ok "synth $bad refused"; else fail "synth $bad (rc=$rc)"; fi
done
if run 0 synth s.csv --events 500 --threads 65535 --streams 65535 --max-live 1; then
  ok "synth at the limits of its ranges"
else fail "synth limits (rc=$rc)"; fi
if run 2 replay golden.csv --simulate=18446744073709551616 && has "more than 2^64-1 bytes" err.txt; then
  ok "a size past 2^64-1 is refused, not misread"
else fail "size overflow (rc=$rc)"; fi
if run 2 replay golden.csv -r pool:initial=max --simulate && has "'max' is out of range" err.txt; then
  ok "pool:initial=max is refused instead of becoming 0"
else fail "initial=max (rc=$rc)"; fi
for bad in "--simulate=max" "--simulate=16777215TiB" "-r vmm_pool:handle=max --simulate" \
           "-r binning:min=max>pool --simulate" "-r vmm_pool:reserve=max --simulate"; do
  if run 2 replay golden.csv $bad && has "is out of range; give a size from" err.txt; then
    ok "replay $bad is refused with the range"
  else fail "replay $bad (rc=$rc)"; fi
done
if run 0 replay golden.csv -r cuda --simulate 16GiB && has "16GiB" out.txt && ! has "cannot open" err.txt; then
  ok "--simulate 16GiB (a space before the value) sets the capacity"
else fail "--simulate with a space (rc=$rc)"; fi
if run 2 replay golden.csv -r fixed_size:blocks=-5 --simulate && has "whole number from 0 to" err.txt; then
  ok "a negative count in a spec is refused"
else fail "negative spec count (rc=$rc)"; fi

# -- RFC 4180 CSV -----------------------------------------------------------------------------------
if run 0 replay golden.csv -r pool:initial=1MiB,max=64MiB -r arena --simulate --csv --report rep &&
   python3 - out.txt rep/results.csv <<'PY'
import csv, sys
for path in sys.argv[1:]:
    rows = list(csv.reader(open(path, newline="")))
    assert all(len(r) == len(rows[0]) for r in rows), rows
    assert rows[1][1] == "pool:initial=1MiB,max=64MiB>cuda", rows[1]
PY
then ok "CSV fields with commas are quoted (stdout and results.csv)"
else fail "CSV quoting (rc=$rc)"; fi

# -- late failures keep the finished work -------------------------------------------------------
if run 2 replay golden.csv missing.csv -r pool --simulate --csv && has "golden.csv,pool" out.txt &&
   has "stopped at missing.csv" err.txt && has "cannot open the trace" err.txt; then
  ok "a bad trace after a good one: the good one's results are printed"
else fail "late failure (rc=$rc)"; fi
if run 2 replay golden.csv -r pool -r nosuch --simulate && has "unknown resource 'nosuch'" err.txt &&
   ! has "golden.csv" out.txt; then
  ok "an unknown resource is found before any work"
else fail "unknown resource late (rc=$rc)"; fi

# -- a trace cut off by a crash ------------------------------------------------------------------
printf 'Thread,Time,Action,Pointer,Size,Stream\n0,1,allocate,0x10,256,0\n0,2,free,0x10,256,0\n0,3,allocate,0x20,4096' > cut.csv
if run 0 replay cut.csv -r pool --simulate && has "cut.csv:4: the last line is cut off" err.txt &&
   has "2 events" out.txt; then
  ok "a cut-off last line is skipped with a warning"
else fail "cut-off trace (rc=$rc)"; fi
printf 'Thread,Time,Action,Pointer,Size,Stream\n0,1,allocate,0x10,oops,0\n0,2,free,0x10,256,0\n' > mid.csv
if run 2 replay mid.csv -r pool --simulate && has "mid.csv:2:" err.txt; then
  ok "a malformed line that is not the last is still an error"
else fail "malformed middle line (rc=$rc)"; fi

# -- messages: what was wrong, with the values, no source locations, no huge echoes --------------
: > empty.csv
if run 0 replay empty.csv -r pool --simulate && has "empty.csv holds no events" err.txt; then
  ok "a 0-byte trace replays with a warning"
else fail "empty trace (rc=$rc)"; fi
printf 'Thread,Time,Action,Pointer,Size,Stream\n0,1,allocate,0x10,0x100,0\n' > hexsize.csv
if run 2 replay hexsize.csv -r pool --simulate && has "found '0x100'" err.txt; then
  ok "a hex Size is shown whole in the message"
else fail "hex size message (rc=$rc)"; fi
{ printf 'Thread,Time,Action,Pointer,Size,Stream\n0,1,'; head -c 1000000 /dev/zero | tr '\0' a; printf ',0x10,8,0\n'; } > longline.csv
if run 2 replay longline.csv -r pool --simulate && [ "$(wc -c <err.txt)" -lt 1000 ] && has "...' (1000000 bytes)" err.txt; then
  ok "a 1 MB field is not echoed whole"
else fail "long line echoed (rc=$rc, $(wc -c <err.txt) bytes of stderr)"; fi
if run 3 replay golden.csv -r 'aligned:alignment=3>pool' --simulate && ! grep -q "failure at\|\.cpp:\|\.hpp:" out.txt err.txt &&
   has "could not be built: gpumem: aligned_resource_adaptor: alignment must be a power of two, got 3" out.txt; then
  ok "a bad value's message carries no source location"
else fail "source location in a message (rc=$rc)"; fi

# -- bounded resources ---------------------------------------------------------------------------
TMPDIR=/nonexistent-gpumem "$bin" replay golden.csv -r pool --simulate >out.txt 2>err.txt; rc=$?
if [ "$rc" -eq 1 ] && has "/nonexistent-gpumem" err.txt && has "TMPDIR" err.txt; then
  ok "the trace cache uses TMPDIR and names it when it cannot be used"
else fail "TMPDIR (rc=$rc)"; fi
many=(); for i in $(seq 1 80); do cp golden.csv "g$i.csv"; many+=("g$i.csv"); done
if (ulimit -n 40 && "$bin" replay "${many[@]}" -r pool --simulate --csv >out.txt 2>err.txt) &&
   [ "$(grep -c ',pool' out.txt)" -eq 80 ]; then
  ok "80 traces under a limit of 40 open files"
else fail "open files per trace ($(grep -c ',pool' out.txt) rows)"; fi

# -- threads -------------------------------------------------------------------------------------
"$bin" synth wide.csv --events 6000 --threads 1000 --seed 3 >/dev/null 2>&1
if run 0 replay wide.csv -r pool -r arena --simulate --threads && grep -qE ' 9[0-9][0-9] thread' out.txt; then
  ok "a trace of ~1000 threads replays threaded"
else fail "1000 threads (rc=$rc)"; fi
"$bin" synth two.csv --events 4000 --threads 4 >/dev/null 2>&1
if run 3 replay two.csv -r 'limiting:limit=64KiB>pool' --simulate --threads && has "OUT OF MEMORY" out.txt; then
  ok "an allocation failing in a threaded replay is reported (no abort)"
else fail "threaded failure (rc=$rc)"; fi
# The lean pool with many threads: each thread's cache floor was kept while the pool grew
# (thread_cache>vmm_pool held 1.19x what vmm_pool alone held on this trace; now within 1.10x).
"$bin" synth t128.csv --events 150000 --threads 128 --seed 5 >/dev/null 2>&1
if run 0 replay t128.csv -r vmm_pool -r 'thread_cache>vmm_pool' --simulate --threads --csv --no-progress &&
   python3 - out.txt <<'PY'
import csv, sys
rows = {r["resource"]: float(r["footprint_ratio"]) for r in csv.DictReader(open(sys.argv[1]))}
alone, cached = rows["vmm_pool"], rows["thread_cache>vmm_pool"]
assert cached <= alone * 1.10, (alone, cached)
PY
then ok "thread_cache>vmm_pool with 128 threads holds within 1.10x of vmm_pool alone"
else fail "thread cache over a lean pool with 128 threads (rc=$rc)"; fi
"$bin" bench -r 'limiting:limit=4KiB>pool' -w threads --smoke --simulate --no-progress >out.txt 2>err.txt; rc=$?
if [ "$rc" -lt 128 ] && has "n/a" out.txt; then
  ok "bench: an allocation failing inside the threads workload is n/a, not std::terminate"
else fail "bench threads failure (rc=$rc)"; fi

# -- what convert writes, replay reads: a recorded stack of more than 1 MiB of text ---------------
python3 - huge.pickle <<'PY'
import pickle, sys
f = [{"filename": "deep_%d.py" % i, "line": i, "name": "f, \"quoted\" " + "x" * 90} for i in range(20000)]
t = [{"action": "alloc", "addr": 0x1000, "size": 512, "stream": 0, "time_us": 10, "frames": f},
     {"action": "free_completed", "addr": 0x1000, "size": 512, "stream": 0, "time_us": 20}]
pickle.dump({"segments": [], "device_traces": [t]}, open(sys.argv[1], "wb"))
PY
if run 0 convert huge.pickle -o huge.csv && has "1 call stack(s) longer than 256 KiB" err.txt &&
   run 0 replay huge.csv -r pool --simulate --report hugereport && has "2 events" out.txt &&
   python3 -c 'import json,sys; f=json.load(open("hugereport/results.json"))["traces"][0]["frames"]; assert 1000 < len(f) < 20000 and f[0].startswith("f, "), len(f)'; then
  ok "convert cuts a stack of 2 MB of text to its innermost frames (said), and replay reads it"
else fail "huge stack round trip (rc=$rc)"; fi

# -- outputs through symbolic links: written through, the link stays a link ---------------------
printf 'old\n' > real.csv && ln -s real.csv link.csv
if run 0 synth link.csv --events 10 && [ -L link.csv ] && has "Thread,Time" real.csv; then
  ok "synth through a link writes the link's target; the link stays"
else fail "synth through a link (rc=$rc)"; fi
mkdir -p elsewhere linked && printf 'old\n' > elsewhere/results.csv &&
  ln -s ../elsewhere/results.csv linked/results.csv
if run 0 replay golden.csv -r pool --simulate --report linked && [ -L linked/results.csv ] &&
   has "golden.csv" elsewhere/results.csv; then
  ok "a report file that is a link: written through, the link stays"
else fail "report through a link (rc=$rc)"; fi
ln -s snap.pickle.csv snaplink.csv && printf 'old\n' > snap.pickle.csv
if run 0 convert snap.pickle -o snaplink.csv && [ -L snaplink.csv ] && has "Thread" snap.pickle.csv; then
  ok "convert -o a link writes the link's target; the link stays"
else fail "convert through a link (rc=$rc)"; fi
ln -s nowhere/none.csv dangling.csv
if run 1 synth dangling.csv --events 10 && has "does not exist" err.txt && [ -L dangling.csv ]; then
  ok "a link to nothing is refused with a message"
else fail "dangling link (rc=$rc)"; fi
ln -s /dev/stdout so.csv
"$bin" synth so.csv --events 10 >redirected.csv 2>err.txt; rc=$?
if [ "$rc" -eq 0 ] && [ -L so.csv ] && [ "$(head -1 redirected.csv)" = "Thread,Time,Action,Pointer,Size,Stream" ] &&
   [ "$(wc -l <redirected.csv)" -eq 11 ]; then
  ok "a link to /dev/stdout writes the trace into the shell's redirection; the link stays"
else fail "link to /dev/stdout (rc=$rc)"; fi
# (/proc/self/fd/1 is what /dev/stdout links to; named through a link of this folder, so that a
# regression run as root cannot replace the system's /dev/stdout)
ln -s /proc/self/fd/1 fd1.csv
"$bin" synth fd1.csv --events 10 >stdout.csv 2>err.txt; rc=$?
if [ "$rc" -eq 0 ] && [ -L fd1.csv ] && [ "$(wc -l <stdout.csv)" -eq 11 ]; then
  ok "synth to a link to /proc/self/fd/1 > file: the link stays a link, the file has the trace"
else fail "synth to /proc/self/fd/1 (rc=$rc)"; fi

# -- bench --profile is a checked output -----------------------------------------------------------
if run 1 bench -w replay --trace golden.csv --profile golden.csv -r pool --smoke --simulate --no-progress &&
   has "it is also an input" err.txt && [ "$(sum golden.csv)" = "$golden" ]; then
  ok "bench --profile onto the benchmarked trace is refused; the trace is intact"
else fail "bench --profile onto its trace (rc=$rc)"; fi
if [ -w /dev/full ]; then
  if run 1 bench -w pair --profile /dev/full -r pool --smoke --simulate --no-progress && has "/dev/full" err.txt; then
    ok "bench --profile to a full disk fails with the path"
  else fail "bench --profile /dev/full (rc=$rc)"; fi
fi

# -- bench --profile names the tool's functions wherever the binary lies ----------------------------
# (its symbolizer gets the binary's path as an argument, never through a shell)
if command -v addr2line >/dev/null; then
  odd=$'odd dir \'q\' "d" $x `y` ;|\nline'
  mkdir -p "$odd" && cp "$bin" "$odd/gpumem"
  "$odd/gpumem" bench -w replay -r pool --smoke --simulate --no-progress --profile profile.txt \
    >out.txt 2>err.txt; rc=$?
  if [ "$rc" -eq 0 ] && grep -q '^ *[0-9.]*%  gpumem::' profile.txt && ! grep -q 'gpumem+0x' profile.txt; then
    ok "bench --profile of a binary in a folder named with quotes, \$, a backquote and a line break names its functions"
  else fail "bench --profile from an oddly named folder (rc=$rc): $(grep -m3 'gpumem+0x' profile.txt)"; fi
fi

[ "$(sum golden.csv)" = "$golden" ] || fail "golden.csv changed during the run"
echo "$failures failure(s)"
[ "$failures" -eq 0 ]
