#!/usr/bin/env bash
# One visit to a GPU machine: build for Hopper, run the tests (all, or the named executables),
# compute-sanitizer on the GPU tests, and optionally benchmarks. Logs go to $OUT (or ./gpu-out).
#   scripts/gpu_check.sh                      # everything ctest knows
#   TESTS="conformance_test leaf_resources_gpu_test" scripts/gpu_check.sh
#   SANITIZE="leaf_resources_gpu_test" BENCH="gpumem bench ..." scripts/gpu_check.sh
#   BUILD_ONLY=1 scripts/gpu_check.sh         # configure and build, run nothing (a visit in parts)
#   SKIP_BUILD=1 TESTS=... scripts/gpu_check.sh  # run what an earlier call built
#   PYTHON=1 scripts/gpu_check.sh             # also the Python package from the build tree
#                                             # (PYTHONPATH=<build>/python/pkg) and its tests
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/gpu-out}
mkdir -p "$out"
build=/tmp/gpumem-build
{
  echo "commit: ${GPUMEM_COMMIT:-unknown (pass GPUMEM_COMMIT)}"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
} | tee "$out/summary.txt"
python_flag=""
[ -n "${PYTHON:-}" ] && python_flag="-DGPUMEM_BUILD_PYTHON=ON"
if [ -z "${SKIP_BUILD:-}" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90 \
    $python_flag >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
  if [ -n "${TESTS:-}" ]; then
    ninja -C "$build" -k 0 $TESTS >"$out/build.log" 2>&1
  else
    ninja -C "$build" -k 0 >"$out/build.log" 2>&1
  fi
  grep -E 'error|FAILED' "$out/build.log" | head -20
  echo "build: $(tail -1 "$out/build.log")" | tee -a "$out/summary.txt"
fi
[ -n "${BUILD_ONLY:-}" ] && exit 0
cd "$build"
if [ -n "${TESTS:-}" ]; then
  for t in $TESTS; do
    [ -x "tests/$t" ] || { echo "missing tests/$t" | tee -a "$out/summary.txt"; continue; }
    "tests/$t" >"$out/$t.log" 2>&1
    echo "$t: rc=$? $(grep -E '^\[  PASSED|^\[  FAILED|^\[  SKIPPED' "$out/$t.log" | grep -v '\] [a-z_/]*\.' | tr '\n' ' ')" | tee -a "$out/summary.txt"
  done
else
  ctest --timeout 300 -j4 >"$out/ctest.log" 2>&1
  tail -15 "$out/ctest.log" | tee -a "$out/summary.txt"
fi
for t in ${SANITIZE:-}; do
  for tool in memcheck racecheck synccheck; do
    compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 "tests/$t" >"$out/san-$tool-$t.log" 2>&1
    echo "compute-sanitizer $tool $t: rc=$? $(grep -E 'ERROR SUMMARY' "$out/san-$tool-$t.log" | tail -1)" | tee -a "$out/summary.txt"
  done
done
if [ -n "${PYTHON:-}" ]; then
  (cd "$root/python/tests" && PYTHONPATH="$build/python/pkg" python3 -m pytest -q -rs "$root/python/tests") \
    >"$out/python.log" 2>&1
  echo "python: rc=$? $(tail -1 "$out/python.log")" | tee -a "$out/summary.txt"
fi
if [ -n "${BENCH:-}" ]; then (cd "$root" && eval "$BENCH") >"$out/bench.log" 2>&1; tail -60 "$out/bench.log"; fi
