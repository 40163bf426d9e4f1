#!/usr/bin/env bash
# The gpumem command line, option by option: cli_options_test.sh GPUMEM_BINARY TESTS_DIR WORK_DIR
# Every option of every command in both forms (--opt value, --opt=value) with its effect checked,
# every conflict, empty and missing values, unknown names with their suggestion, and --help listing
# exactly the options below. Each check prints "ok - what" or "FAIL - what"; exits 1 on a failure.
set -u
bin=$1 tests=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
failures=0
ok() { echo "ok - $1"; }
fail() { echo "FAIL - $1"; echo "--- stdout:"; head -c 2000 out.txt; echo "--- stderr:"; head -c 2000 err.txt; failures=$((failures + 1)); }
# run EXPECTED_RC ARGS...: runs the tool, output in out.txt / err.txt.
run() { local want=$1; shift; "$bin" "$@" >out.txt 2>err.txt; rc=$?; [ "$rc" -eq "$want" ]; }
has() { grep -qF -- "$1" "$2"; }
# check WHAT CONDITION: ok when the shell condition holds.
check() { if eval "$2"; then ok "$1"; else fail "$1 (rc=$rc)"; fi; }
# both WHAT CONDITION OPTION VALUE ARGS...: runs ARGS OPTION VALUE, then ARGS OPTION=VALUE; the
# condition (which sees the form as $form) must hold after each.
both() {
  local what=$1 cond=$2 opt=$3 value=$4; shift 4
  for form in space equals; do
    if [ "$form" = space ]; then "$bin" "$@" "$opt" "$value" >out.txt 2>err.txt
    else "$bin" "$@" "$opt=$value" >out.txt 2>err.txt; fi
    rc=$?
    check "$what ($opt, $form form)" "$cond"
  done
}
cp "$tests/golden.csv" golden.csv
sim=(--simulate --no-progress)

# -- help: each command's --help lists exactly these options -----------------------------------
declare -A options=(
  [gpumem]="--help --version --resource --simulate --threads --json --csv --report --repeat --no-report --no-progress --driver-calls --list-resources"
  [replay]="--help --resource --simulate --threads --json --csv --report --repeat --no-progress --driver-calls --list-resources"
  [bench]="--help --resource --workload --trace --simulate --smoke --json --no-progress --profile"
  [info]="--help"
  [convert]="--help --output --device --python"
  [synth]="--help --events --seed --threads --streams --max-live"
  [help]="--help"
)
for cmd in gpumem replay bench info convert synth help; do
  args=(); [ "$cmd" = gpumem ] || args=("$cmd")
  "$bin" "${args[@]}" --help >out.txt 2>err.txt; rc=$?
  listed=$(grep -oE '^  (-[a-z], )?--[a-z-]+' out.txt | grep -oE -- '--[a-z-]+' | sort | tr '\n' ' ')
  want=$(tr ' ' '\n' <<<"${options[$cmd]}" | sort | tr '\n' ' ')
  check "gpumem ${args[*]} --help lists its options: $want" '[ "$rc" -eq 0 ] && [ "$listed" = "$want" ] && has "Usage: gpumem" out.txt'
done
for cmd in replay bench info convert synth; do
  "$bin" "$cmd" --help >want.txt 2>/dev/null
  run 0 help "$cmd"
  check "gpumem help $cmd is gpumem $cmd --help" 'cmp -s out.txt want.txt'
  run 0 "$cmd" -h
  check "gpumem $cmd -h is gpumem $cmd --help" 'cmp -s out.txt want.txt'
done
"$bin" --help >want.txt 2>/dev/null
run 0 help
check "gpumem help is gpumem --help" 'cmp -s out.txt want.txt'
run 0 --help
check "the help lists the commands" '(for c in replay bench info convert synth help; do grep -qE "^  $c " out.txt || exit 1; done)'
check "the help says which options exclude each other" 'has "(not with --csv)" out.txt && has "(not with --report)" out.txt'
run 0 --version
check "--version" 'grep -qE "^gpumem [0-9]+\.[0-9]+\.[0-9]+ \(CCCL " out.txt'

# -- the default run and replay: every option in both forms ---------------------------------------
for cmd in gpumem replay; do
  pre=(); base=(); name=gpumem
  [ "$cmd" = replay ] && pre=(replay golden.csv) base=(replay) name="gpumem replay"
  trace=gpt2_train.csv; [ "$cmd" = replay ] && trace=golden.csv
  norep=(); [ "$cmd" = gpumem ] && norep=(--no-report)
  both "$cmd: the resource stack" 'has "$trace,cuda,ok" out.txt && ! has ",pool" out.txt' \
    --resource cuda "${pre[@]}" "${norep[@]}" "${sim[@]}" --csv
  run 0 "${pre[@]}" "${norep[@]}" "${sim[@]}" --csv -r cuda -rpool:initial=1MiB
  check "$cmd: -r cuda -rSPEC (two stacks)" 'has "$trace,cuda,ok" out.txt && has "$trace,pool:initial=1MiB>cuda," out.txt'
  both "$cmd: the simulated capacity" 'has "simulated device of 16GiB" out.txt' \
    --simulate 16GiB "${pre[@]}" "${norep[@]}" -r cuda --no-progress
  run 0 "${pre[@]}" "${norep[@]}" -r cuda --simulate --no-progress
  check "$cmd: --simulate alone is 80GiB" 'has "simulated device of 80GiB" out.txt'
  for form in space equals; do  # (the folder is named after the form: both() cannot)
    if [ "$form" = space ]; then run 0 "${pre[@]}" -r cuda "${sim[@]}" --csv --report "rep-$cmd-$form"
    else run 0 "${pre[@]}" -r cuda "${sim[@]}" --csv --report="rep-$cmd-$form"; fi
    check "$cmd: the report folder (--report, $form form)" '[ -s "rep-$cmd-$form/index.html" ] && [ -s "rep-$cmd-$form/results.json" ]'
  done
  run 0 "${pre[@]}" "${norep[@]}" -r cuda "${sim[@]}" --json
  check "$cmd: --json" 'python3 -c "import json; json.load(open(\"out.txt\"))"'
  run 0 "${pre[@]}" "${norep[@]}" -r cuda "${sim[@]}" --csv
  check "$cmd: --csv" 'head -1 out.txt | grep -q "^trace,resource,status"'
  run 0 "${pre[@]}" "${norep[@]}" -r cuda "${sim[@]}" --threads
  check "$cmd: --threads" 'has "cuda" out.txt'
  both "$cmd: --repeat (the CSV's repeats column)" '[ "$(sed -n 2p out.txt | awk -F, "{print \$NF}")" = 3 ]' \
    --repeat 3 "${pre[@]}" "${norep[@]}" -r cuda "${sim[@]}" --csv
  for bad in 0 101 x; do
    run 2 "${pre[@]}" --repeat "$bad"
    check "$cmd: --repeat $bad is refused" 'has "--repeat" err.txt && [ ! -s out.txt ]'
  done
  run 0 "${base[@]}" --list-resources
  check "$cmd: --list-resources" 'has "pool (suballocator)" out.txt && has "initial=" out.txt'
  if command -v script >/dev/null; then  # the progress bar is drawn only on a terminal
    script -qec "$bin ${pre[*]} ${norep[*]} -r cuda --simulate --csv 2>&1 >/dev/null" /dev/null >tty.txt
    script -qec "$bin ${pre[*]} ${norep[*]} -r cuda --simulate --csv --no-progress 2>&1 >/dev/null" /dev/null >tty-quiet.txt
    rc=0; check "$cmd: --no-progress leaves out the progress bar" 'has "100%" tty.txt && ! has "100%" tty-quiet.txt'
  fi
  run 2 "${pre[@]}" --json --csv
  check "$cmd: --json and --csv are refused together" 'has "--json and --csv cannot be given together" err.txt'
  run 2 "${base[@]}" --list-resources -r pool
  check "$cmd: --list-resources goes alone" 'has "--list-resources goes alone; --resource was given with it" err.txt'
  run 2 "${pre[@]}" --json=yes
  check "$cmd: a flag with a value is refused" 'has "--json takes no value" err.txt'
  run 2 "${pre[@]}" --report a --report b
  check "$cmd: --report twice is refused" 'has "--report was given more than once" err.txt'
  run 2 "${pre[@]}" --report
  check "$cmd: --report without its value" 'has "--report needs a value (DIR)" err.txt'
  for empty in --report= --resource= --simulate=; do
    run 2 "${pre[@]}" "$empty"
    check "$cmd: $empty (nothing after '=') is refused" 'has "option ${empty%=} has nothing after" err.txt && [ ! -s out.txt ]'
  done
  run 2 "${pre[@]}" --report ""
  check "$cmd: --report '' is refused" 'has "--report: the value is empty; give a folder" err.txt'
  run 2 "${pre[@]}" -r ""
  check "$cmd: -r '' is refused" 'has "--resource: the value is empty" err.txt'
  run 2 "${pre[@]}" --simulate=lots
  check "$cmd: a capacity that is no size" 'has "--simulate: cannot read '"'lots'"' as a size" err.txt'
  run 2 "${pre[@]}" --simulat
  check "$cmd: an unknown option suggests the closest" 'has "unknown option '"'--simulat'"' for '"'$name'"'; did you mean --simulate?" err.txt'
  run 2 "${pre[@]}" --jsno
  check "$cmd: a swap of two letters is close" 'has "did you mean --json?" err.txt'
  run 2 "${pre[@]}" --sim
  check "$cmd: an abbreviation suggests the whole name" 'has "did you mean --simulate?" err.txt'
  run 2 "${pre[@]}" --report-dir x
  check "$cmd: a longer name suggests the option it begins with" 'has "did you mean --report?" err.txt'
  run 2 "${pre[@]}" -x
  check "$cmd: an unknown one-letter option, no suggestion" 'has "unknown option '"'-x'"'" err.txt && ! has "did you mean" err.txt'
  run 2 "${pre[@]}" --frobnicate
  check "$cmd: nothing close, no suggestion" 'has "unknown option '"'--frobnicate'"'" err.txt && ! has "did you mean" err.txt'
done
run 2 --no-report --report x
check "--report and --no-report are refused together" 'has "--report and --no-report cannot be given together" err.txt'
rm -rf gpumem-report
run 0 --no-report -r cuda "${sim[@]}" --csv
check "--no-report writes no report folder" '[ ! -e gpumem-report ]'
run 2 --json replay golden.csv
check "an option of the default run before a command is refused" 'has "--json goes after the command: gpumem replay ... --json" err.txt'
run 0 replay --simulate golden.csv -r cuda --csv --no-progress
check "replay --simulate TRACE: the trace is not read as the capacity" 'has "golden.csv,cuda,ok" out.txt'
cp golden.csv 16GiB
run 0 replay golden.csv --simulate 16GiB -r cuda --csv --no-progress
check "--simulate FILE: a file named like a size is a trace" '[ "$(grep -c ",cuda,ok" out.txt)" -eq 2 ]'
cp golden.csv ./-dash.csv
run 0 replay -r cuda "${sim[@]}" --csv -- -dash.csv
check "replay -- -dash.csv: a trace named like an option after --" 'has "-dash.csv,cuda,ok" out.txt'
run 2 replay
check "replay without a trace" 'has "give at least one trace" err.txt'
run 2 replay golden.csv --list-resources
check "replay TRACE --list-resources is refused" 'has "--list-resources goes alone; TRACE was given with it" err.txt'
run 2 synth a.csv -- b.csv
check "synth a.csv -- b.csv: one argument too many" 'has "unexpected argument '"'b.csv'"'" err.txt'
run 2 repaly golden.csv
check "an unknown command suggests the closest" 'has "unknown command '"'repaly'"'; did you mean replay?" err.txt'
run 2 replay golden.csv --simulate=1GiB --simulate=2GiB
check "--simulate twice is refused" 'has "--simulate was given more than once" err.txt'

# -- bench ----------------------------------------------------------------------------------------
bench=(bench --smoke --simulate --no-progress)
both "bench: the resource stack" 'has "arena" out.txt && ! has "pool" out.txt' --resource arena "${bench[@]}" -w pair
both "bench: the workload" 'has "pair:" out.txt && ! has "random_small" out.txt' --workload pair "${bench[@]}" -r cuda
run 0 "${bench[@]}" -r cuda -w pair -wthreads
check "bench: -w twice (two workloads)" 'has "pair:" out.txt && has "threads" out.txt && ! has "random_small" out.txt'
both "bench: the replay workload's trace" 'has "golden.csv" out.txt && ! has "gpt2_train" out.txt' --trace golden.csv "${bench[@]}" -r cuda -w replay
both "bench: the simulated capacity (1MiB: the 16MiB pair cannot run)" 'grep -qE "^16.00 MiB +\| +n/a" out.txt && grep -qE "^1.00 MiB +\| +[0-9]" out.txt' \
  --simulate 1MiB bench --smoke --no-progress -r cuda -w pair
run 0 bench --smoke --simulate --no-progress -r cuda -w pair --json
check "bench: --json and --smoke" 'python3 -c "import json; d = json.load(open(\"out.txt\")); assert d[\"smoke\"] is True, d"'
for form in space equals; do
  if [ "$form" = space ]; then run 0 "${bench[@]}" -r cuda -w pair --profile "prof-$form.txt"
  else run 0 "${bench[@]}" -r cuda -w pair --profile="prof-$form.txt"; fi
  check "bench: the profile file (--profile, $form form)" '[ -s "prof-$form.txt" ]'
done
run 2 bench -w treads
check "bench: an unknown workload suggests the closest and lists them" 'has "--workload: unknown workload '"'treads'"'; did you mean threads?" err.txt && has "random_large" err.txt'
run 2 bench --trace golden.csv -w pair
check "bench: --trace without the replay workload is refused" 'has "--trace is read only by the replay workload" err.txt'
for empty in --trace= --profile= --workload=; do
  run 2 bench "$empty"
  check "bench: $empty is refused" 'has "option ${empty%=} has nothing after" err.txt'
done
run 2 bench --csv
check "bench: --csv is not a bench option" 'has "unknown option '"'--csv'"' for '"'gpumem bench'"'" err.txt'

# -- convert --------------------------------------------------------------------------------------
python3 "$tests/make_snapshot.py" snap.pickle
for form in space equals; do  # (the file is named after the form: both() cannot)
  if [ "$form" = space ]; then run 0 convert snap.pickle --output "out-$form.csv"
  else run 0 convert snap.pickle --output="out-$form.csv"; fi
  check "convert: the output file (--output, $form form)" 'has "0,2,allocate,0x7f0000000000,512,0" "out-$form.csv"'
done
run 0 convert snap.pickle -o o.csv
check "convert: -o" 'has "0,2,allocate" o.csv'
run 0 convert snap.pickle
check "convert: the default output is the snapshot's name with .csv" 'has "0,2,allocate" snap.csv'
both "convert: the device" 'has "no allocation history for device 1" err.txt' --device 1 convert snap.pickle -o dev.csv
both "convert: the Python" 'has "cannot run ./no-python" err.txt' --python ./no-python convert snap.pickle -o py.csv
run 2 convert snap.pickle --device=-1
check "convert: a negative device is refused" 'has "--device: '"'-1'"' is not a count" err.txt'
run 2 convert
check "convert without a snapshot" 'has "give SNAPSHOT: gpumem convert [OPTIONS] SNAPSHOT" err.txt'
run 2 convert snap.pickle -o ""
check "convert: -o '' is refused" 'has "--output: the value is empty" err.txt'

# -- synth ----------------------------------------------------------------------------------------
"$bin" synth s-space.csv --events 300 --seed 7 --threads 3 --streams 2 --max-live 5 >/dev/null 2>&1
"$bin" synth s-equals.csv --events=300 --seed=7 --threads=3 --streams=2 --max-live=5 >/dev/null 2>&1
"$bin" synth s-seed.csv --events 300 --seed 8 --threads 3 --streams 2 --max-live 5 >/dev/null 2>&1
check "synth: both forms write the same trace" 'cmp -s s-space.csv s-equals.csv'
check "synth: --events" '[ "$(wc -l <s-space.csv)" -eq 301 ]'
check "synth: --seed" '! cmp -s s-space.csv s-seed.csv'
check "synth: --threads and --streams" 'python3 - s-space.csv <<PY
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert {r["Thread"] for r in rows} == {"0", "1", "2"}, {r["Thread"] for r in rows}
assert {r["Stream"] for r in rows} <= {"0", "1", "2"} and len({r["Stream"] for r in rows}) == 2
PY'
check "synth: --max-live" 'python3 - s-space.csv <<PY
import csv, sys
live = most = 0
for r in csv.DictReader(open(sys.argv[1])):
    live += 1 if r["Action"] == "allocate" else -1
    most = max(most, live)
assert most == 5, most
PY'
run 0 synth ten.csv --events 010
check "synth: --events 010 is ten (decimal, not octal)" '[ "$(wc -l <ten.csv)" -eq 11 ]'
for opt in events seed threads streams max-live; do
  run 2 synth x.csv "--$opt=1x"
  check "synth: --$opt=1x is refused with the range" 'has "--$opt: '"'1x'"' is not a count (give a whole number from" err.txt && [ ! -e x.csv ]'
  run 2 synth x.csv "--$opt="
  check "synth: --$opt= is refused" 'has "option --$opt has nothing after" err.txt'
done
run 2 synth
check "synth without its output" 'has "give OUT: gpumem synth [OPTIONS] OUT" err.txt'
run 2 synth a.csv b.csv
check "synth: one argument too many" 'has "unexpected argument '"'b.csv'"' for '"'gpumem synth'"'" err.txt'
run 2 synth x.csv --event 5
check "synth: --event suggests --events" 'has "did you mean --events?" err.txt'

# -- info and help --------------------------------------------------------------------------------
run 0 info
check "info" 'has "No GPU" out.txt || has "CUDA device(s)" out.txt'
run 2 info --json
check "info takes no options" 'has "unknown option '"'--json'"' for '"'gpumem info'"'" err.txt'
run 2 help bnech
check "help of an unknown command suggests the closest" 'has "unknown command '"'bnech'"'; did you mean bench?" err.txt'

echo "$failures failure(s)"
[ "$failures" -eq 0 ]
