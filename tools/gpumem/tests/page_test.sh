#!/usr/bin/env bash
# The report page renders in headless Chromium without console errors:
#   page_test.sh GPUMEM_BINARY WORK_DIR
# Installs Debian's chromium with apt when it is missing; exits 77 (skipped) when it cannot.
set -u
bin=$1 work=$2
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

if ! "$bin" --simulate --report report --no-progress >table.txt 2>run.err; then
  echo "FAIL: the default run failed"; cat table.txt run.err; exit 1
fi
timeout 120 "$browser" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage \
  --enable-logging=stderr --v=0 --virtual-time-budget=5000 \
  --dump-dom "file://$work/report/index.html" >dom.html 2>console.txt
failures=0
check() { if eval "$2"; then echo "ok - $1"; else echo "FAIL - $1"; failures=$((failures + 1)); fi; }
check "the script ran to its end (<body data-rendered=ok>)" "grep -q '<body data-rendered=\"ok\"' dom.html"
check "charts were drawn (held series as SVG polylines)" \
  "[ \$(grep -o 'class=\"series held\"' dom.html | wc -l) -ge 4 ]"
check "the live series is drawn" "grep -q 'class=\"series live\"' dom.html"
check "the results table was built" "grep -q '<td>pool' dom.html"
check "no console messages or errors (the page logs nothing)" "! grep -Eq 'CONSOLE|Uncaught' console.txt"
check "no network requests in the page" "! grep -Eq '(src|href)=\"https?:' report/index.html"
if [ "$failures" -ne 0 ]; then
  echo "--- console:"; grep -E 'CONSOLE|Uncaught' console.txt | head -20
fi
[ "$failures" -eq 0 ]
