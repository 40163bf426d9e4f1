#!/usr/bin/env bash
# The report page in headless Chromium: renders without console errors, and what it displays
# (its self-test, #selftest in the URL) matches results.json (page_check.py compares), for the
# default run and for a run where stacks run out of memory; screenshots into WORK_DIR.
#   page_test.sh GPUMEM_BINARY WORK_DIR
# A report without the v2 fields (report_version < 2) is also turned into a v2 fixture by
# v2_fixture.py (synthesized addresses) so the layout view is tested before the C++ side emits it;
# a v2 report is also turned into an old-shape one (v2_fixture.py --downgrade) to test that the
# page degrades gracefully.
# Installs Debian's chromium with apt when it is missing; exits 77 (skipped) when it cannot.
set -u
bin=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)
traces=$here/../traces
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1

find_browser() {
  for b in chromium chromium-browser google-chrome; do
    if command -v "$b" >/dev/null 2>&1; then command -v "$b"; return 0; fi
  done
  return 1
}
browser=$(find_browser)
if [ -z "$browser" ]; then
  echo "chromium missing; installing Debian's chromium with apt-get"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1 && sudo_cmd="sudo -n"
  (timeout 600 $sudo_cmd apt-get install -y --no-install-recommends chromium ||
   (timeout 300 $sudo_cmd apt-get update && timeout 600 $sudo_cmd apt-get install -y --no-install-recommends chromium)) \
    >apt.log 2>&1
  browser=$(find_browser)
fi
if [ -z "$browser" ]; then
  echo "SKIPPED: headless Chromium is not available and could not be installed (see $work/apt.log)"
  exit 77
fi

failures=0
check() { if eval "$2"; then echo "ok - $1"; else echo "FAIL - $1"; failures=$((failures + 1)); fi; }

# load PAGE HASH OUT: the DOM after the script ran (OUT.html) and the console (OUT.console)
load() {
  timeout 120 "$browser" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage \
    --enable-logging=stderr --v=0 --virtual-time-budget=5000 --window-size=1400,2000 \
    --dump-dom "file://$1#$2" >"$3.html" 2>"$3.console"
}
# shot PAGE HASH PNG [HEIGHT]: a screenshot of the page in that state
shot() {
  timeout 120 "$browser" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage \
    --hide-scrollbars --window-size=1400,${4:-2000} --screenshot="$3" "file://$1#$2" >/dev/null 2>&1
  check "screenshot $3" "[ -s '$3' ]"
  echo "screenshot: $3"
}
# page_checks NAME DIR [page_check.py options]: load DIR/index.html with #selftest and check it
page_checks() {
  local name=$1 dir=$2; shift 2
  echo "# $name: $dir/index.html"
  load "$dir/index.html" selftest "$name"
  check "$name: the script ran to its end (<body data-rendered=ok>)" "grep -q '<body data-rendered=\"ok\"' $name.html"
  check "$name: held series drawn (SVG paths)" "[ \$(grep -o 'class=\"series held\"' $name.html | wc -l) -ge 3 ]"
  check "$name: the live series is drawn" "grep -q 'class=\"series live\"' $name.html"
  check "$name: the results table was built" "grep -q '<td><i class=\"swatch\"[^>]*></i>pool' $name.html"
  check "$name: no console messages or errors (the page logs nothing)" "! grep -Eq 'CONSOLE|Uncaught' $name.console"
  check "$name: no network requests in the page" "! grep -Eq '(src|href)=\"https?:' $dir/index.html"
  grep -E 'CONSOLE|Uncaught' "$name.console" | head -5
  if python3 "$here/page_check.py" "$name.html" "$dir/results.json" "$@" >"$name.check"; then
    echo "ok - $name: the page's readout, markers and layout match results.json ($(grep -c '^ok' "$name.check") checks)"
    grep '^# timing' "$name.check"
  else
    echo "FAIL - $name: page_check.py"; grep -v '^ok' "$name.check"; failures=$((failures + 1))
  fi
}
# v2 DIR: DIR itself when its results.json is v2, else a fixture DIR-v2 synthesized from the traces
v2() {
  if grep -q '"report_version":[2-9]' "$1/results.json"; then echo "$1"; return; fi
  mkdir -p "$1-v2"
  python3 "$here/v2_fixture.py" "$1/results.json" "$1-v2/results.json" --trace-dir "$traces" \
    --html "$1/index.html" "$1-v2/index.html" && echo "$1-v2"
}
# old DIR: a copy DIR-v1 with the v2 fields dropped
old() {
  mkdir -p "$1-v1"
  python3 "$here/v2_fixture.py" "$1/results.json" "$1-v1/results.json" --downgrade \
    --html "$1/index.html" "$1-v1/index.html" && echo "$1-v1"
}

if ! "$bin" --simulate --report "$work/default" --no-progress >default.txt 2>default.err; then
  echo "FAIL: the default run failed"; cat default.txt default.err; exit 1
fi
# 12 GiB: pool and arena run out of memory on gpt2 (arena before the peak of live bytes); caching fits.
"$bin" replay "$traces/gpt2_train.csv" --simulate=12GiB --report "$work/oom" --no-progress \
  -r pool -r arena -r caching >oom.txt 2>oom.err
check "the small device's run reports out of memory (exit 3)" "[ $? -eq 3 ]"

# a trace with call stacks (made-up frames by size): the by-stack table and the bands' hovers
python3 "$here/frames_trace.py" "$traces/resnet50_train.csv" "$work/stacks.csv"
"$bin" replay "$work/stacks.csv" --simulate --report "$work/stacks" --no-progress --repeat 3 \
  -r pool -r caching -r vmm_pool -r cuda >stacks.txt 2>stacks.err
check "the run over a trace with call stacks succeeds" "[ $? -eq 0 ]"

page_checks default "$work/default" --text default.txt $(grep -q '"report_version":[2-9]' default/results.json && echo --expect-layout)
page_checks oom "$work/oom" --expect-oom --text oom.txt $(grep -q '"report_version":[2-9]' oom/results.json && echo --expect-layout)
page_checks stacks "$work/stacks" --expect-layout --text stacks.txt --expect-stacks
d2=$(v2 "$work/default") o2=$(v2 "$work/oom")
if [ "$d2" != "$work/default" ]; then page_checks default-v2 "$d2" --expect-layout
else page_checks default-v1 "$(old "$work/default")"; fi
if [ "$o2" != "$work/oom" ]; then page_checks oom-v2 "$o2" --expect-oom --expect-layout
else page_checks oom-v1 "$(old "$work/oom")" --expect-oom; fi
# a point per event in every timeline: the overview must downsample, the zoomed view must not
mkdir -p "$work/oom-dense"
python3 "$here/v2_fixture.py" "$o2/results.json" "$work/oom-dense/results.json" --dense --trace-dir "$traces" \
  --html "$o2/index.html" "$work/oom-dense/index.html" && page_checks oom-dense "$work/oom-dense" --expect-oom --expect-layout
# as past 2,000,000 allocations: no addresses; the page shows the timeline and says why
mkdir -p "$work/omitted"
python3 "$here/v2_fixture.py" "$d2/results.json" "$work/omitted/results.json" --omit \
  --html "$d2/index.html" "$work/omitted/index.html" && page_checks omitted "$work/omitted"
check "omitted: the page says why there is no layout" "grep -q 'more than 2,000,000 allocations' omitted.html"
check "omitted: the page says why there are no bands" "grep -q 'and with them the bands' omitted.html"
check "omitted: the page says why there is no by-stack table" "grep -q 'and with them this table' omitted.html"

# event EXPR RESULTS: a number from the first trace of RESULTS (t: the trace, fail: failure events)
event() {
  python3 -c 'import json,sys; t=json.load(open(sys.argv[2]))["traces"][0]
fail=[r["failure"]["event"] for r in t["results"] if r.get("failure")]
print(int(eval(sys.argv[1])))' "$1" "$2"
}
shot "$d2/index.html" "trace=0" "$work/default.png"
# the OOM report hovered just after the last failure: the readout says which stacks are out of memory
shot "$o2/index.html" "trace=0&hover=$(event 'max(fail) + t["events"] / 100' "$o2/results.json")" "$work/oom.png"
shot "$o2/index.html" "trace=0&view=layout&event=$(event 'max(fail)' "$o2/results.json")" "$work/oom-layout.png"
shot "$d2/index.html" "trace=0&view=layout&azoom=0-1073741824&event=$(event 't["peak_live_event"]' "$d2/results.json")" \
  "$work/layout-zoomed.png"
# the trace with call stacks: bands by size, the by-stack table at the bottom; bands by address in
# the pool stack (result 0); the timeline zoomed around the peak of live bytes, hovered at it
shot "$work/stacks/index.html" "trace=0" "$work/stacks.png" 2700
shot "$work/stacks/index.html" "trace=0&bands=address:0" "$work/bands-address.png" 2700
peak=$(event 't["peak_live_event"]' "$d2/results.json")
shot "$d2/index.html" "trace=0&zoom=$((peak - 60))-$((peak + 60))&hover=$peak" "$work/timeline-zoomed.png" 1000
[ "$failures" -eq 0 ]
