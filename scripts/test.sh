#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs what is missing, then
#   1. release build: every test (GPU tests skip with a reason where there is no GPU),
#      benchmark smoke runs, tool CLI tests;
#   2. install + an out-of-tree consumer that does find_package(gpumem);
#   3. ASan+UBSan build: the CPU tests;
#   4. TSan build: the CPU tests (threads, registry, stress);
#   5. libFuzzer (clang, ASan+UBSan): each fuzzer 25 s from its seed corpus;
#   6. the Python package (pip install . + pytest), when python/ exists.
# Ends with one line "gpumem tests: N passed, N failed, N skipped"; exits non-zero on any failure.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/setup.sh" || exit 1
set +e  # setup.sh turns on -e; this script tallies failures itself
jobs=$(nproc)
logs="$root/build-test-logs"
mkdir -p "$logs"
passed=0 failed=0 skipped=0 stage_failed=()

# tally <log>: adds a ctest log's counts to the totals.
tally() {
  local line total fails skips
  line=$(grep -E '^[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$1" | tail -1)
  total=$(sed -E 's/.* out of ([0-9]+).*/\1/' <<<"$line")
  fails=$(sed -E 's/.*passed, ([0-9]+) tests? failed.*/\1/' <<<"$line")
  skips=$(grep -cE '\*\*\*Skipped|Not Run \(Disabled\)' "$1" || true)
  passed=$((passed + ${total:-0} - ${fails:-0} - skips))
  failed=$((failed + ${fails:-0}))
  skipped=$((skipped + skips))
  [ -n "$line" ] || failed=$((failed + 1))
}

# stage <name> <build dir> <ctest args...> : configure flags come from $cfg.
stage() {
  local name=$1 dir=$2
  shift 2
  echo "== $name" >&2
  if ! cmake -S "$root" -B "$dir" -G Ninja $cfg >"$logs/$name.configure.log" 2>&1 ||
     ! cmake --build "$dir" -- -j"$jobs" >"$logs/$name.build.log" 2>&1; then
    echo "   build failed; see $logs/$name.*.log" >&2
    tail -30 "$logs/$name.build.log" "$logs/$name.configure.log" >&2
    failed=$((failed + 1)); stage_failed+=("$name")
    return
  fi
  (cd "$dir" && ctest --output-on-failure --timeout 600 -j"$jobs" "$@") >"$logs/$name.ctest.log" 2>&1
  grep -E 'tests passed|Total Test time' "$logs/$name.ctest.log" >&2
  grep -A100 'The following tests FAILED' "$logs/$name.ctest.log" >&2 || true
  tally "$logs/$name.ctest.log"
}

cfg="-DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX=$root/build-test/prefix"
stage release "$root/build-test"

echo "== consumer (find_package from an install prefix)" >&2
if cmake --install "$root/build-test" >"$logs/install.log" 2>&1 &&
   cmake -S "$root/examples/consumer" -B "$root/build-test/consumer" -G Ninja \
     -DCMAKE_PREFIX_PATH="$root/build-test/prefix" >"$logs/consumer.log" 2>&1 &&
   cmake --build "$root/build-test/consumer" >>"$logs/consumer.log" 2>&1 &&
   "$root/build-test/consumer/gpumem_consumer" >>"$logs/consumer.log" 2>&1; then
  passed=$((passed + 1)); tail -1 "$logs/consumer.log" >&2
else
  failed=$((failed + 1)); stage_failed+=(consumer); tail -20 "$logs/consumer.log" >&2
fi

san="-DCMAKE_BUILD_TYPE=Debug -DGPUMEM_BUILD_CUDA_TESTS=OFF -DGPUMEM_BUILD_BENCHMARKS=OFF -DGPUMEM_BUILD_TOOLS=OFF"
cfg="$san -DGPUMEM_SANITIZE=address"
ASAN_OPTIONS=detect_leaks=1:protect_shadow_gap=0:allocator_may_return_null=1 stage asan "$root/build-asan" -L cpu
cfg="$san -DGPUMEM_SANITIZE=thread"
TSAN_OPTIONS=halt_on_error=1 stage tsan "$root/build-tsan" -L cpu

cfg="$san -DGPUMEM_BUILD_TESTS=OFF -DGPUMEM_SANITIZE=address -DGPUMEM_BUILD_FUZZERS=ON -DCMAKE_CXX_COMPILER=clang++-14"
ASAN_OPTIONS=detect_leaks=1 stage fuzz "$root/build-fuzz" -L fuzz

if [ -f "$root/pyproject.toml" ] && [ -x "$root/scripts/test_python.sh" ]; then
  echo "== python" >&2
  if "$root/scripts/test_python.sh" >"$logs/python.log" 2>&1; then :; else
    stage_failed+=(python); fi
  tail -3 "$logs/python.log" >&2
  line=$(grep -E '[0-9]+ (passed|failed)' "$logs/python.log" | tail -1)
  count() { grep -oE "[0-9]+ $1" <<<"$line" | grep -oE '[0-9]+' || true; }
  p=$(count passed); f=$(count failed); s=$(count skipped)
  passed=$((passed + ${p:-0})); failed=$((failed + ${f:-0})); skipped=$((skipped + ${s:-0}))
  [ -n "$line" ] || failed=$((failed + 1))
fi

if ((${#stage_failed[@]})); then echo "failed stages: ${stage_failed[*]}" >&2; fi
echo "gpumem tests: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
