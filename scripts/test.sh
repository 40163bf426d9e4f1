#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs what is missing, then
#   0. layering: no public header includes one of a higher tier, no source folder one above its
#      tier (scripts/check_layering.py);
#      format: every C++ and CUDA source is laid out as clang-format (.clang-format) lays it out;
#   1. release build: every test (GPU tests skip with a reason where there is no GPU),
#      benchmark smoke runs, tool CLI tests;
#   2. consumers: the install moved to another folder and used through find_package (the README's
#      C++ quick start, checked to be the README's text, and examples/consumer) and pkg-config;
#      gpumem as a FetchContent subproject built as a shared library;
#   3. ASan+UBSan build: the CPU tests;
#   4. TSan build: the CPU tests (threads, registry, stress);
#      invariant-check build (Debug, GPUMEM_CHECK_INVARIANTS): each resource checks its invariants
#      after every slow path; the conformance and fuzz-sequence suites;
#   5. libFuzzer (clang, ASan+UBSan; Atheris for the Python snapshot converter): each fuzzer
#      25 s from its seed corpus;
#   6. newest CCCL: the CPU tests again, built against the newest CCCL headers from PyPI
#      (nvidia-cuda-cccl, header-only, in a virtual environment), so that an interface change
#      upstream turns this red before it reaches a user's build;
#   7. the Python package (pip install . + pytest), when python/ exists.
# Each stage's build tree is removed once its tests have run (GPUMEM_KEEP_BUILD_TREES=1 keeps them),
# so the run needs the disk of one tree at a time; it says how much disk is left at the start and
# after any failed build.
# Ends with one line "gpumem tests: N passed, N failed, N skipped"; exits non-zero on any failure.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/setup.sh" || exit 1
set +e  # setup.sh turns on -e; this script tallies failures itself
jobs=$(nproc)
logs="$root/build-test-logs"
mkdir -p "$logs"
passed=0 failed=0 skipped=0 stage_failed=()

# disk_left: one line, the space left where the build trees are (a full disk fails every later
# build, so each failure says how much was left).
disk_left() {
  echo "   disk: $(df -h --output=avail "$root" | tail -n 1 | tr -d ' ') left on $(df --output=target "$root" | tail -n 1)"
}

# drop_tree <dir>: a stage's build tree, removed once its tests have run, so that the stages
# never hold more than one tree on disk at a time (a fresh clone builds every tree anyway).
# GPUMEM_KEEP_BUILD_TREES=1 keeps them, for rerunning a stage by hand.
drop_tree() {
  [ "${GPUMEM_KEEP_BUILD_TREES:-0}" = 1 ] || rm -rf "$1"
}

disk_left >&2

# tally <log>: adds a ctest log's counts to the totals.
tally() {
  local line total fails skips
  line=$(grep -E '^[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$1" | tail -n 1)
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
    tail -n 30 "$logs/$name.configure.log" "$logs/$name.build.log" >&2
    disk_left >&2
    failed=$((failed + 1)); stage_failed+=("$name")
    drop_tree "$dir"
    return
  fi
  (cd "$dir" && ctest --output-on-failure --timeout 600 -j"$jobs" "$@") >"$logs/$name.ctest.log" 2>&1
  grep -E 'tests passed|Total Test time' "$logs/$name.ctest.log" >&2
  grep -A100 'The following tests FAILED' "$logs/$name.ctest.log" >&2 || true
  tally "$logs/$name.ctest.log"
  [ "$name" = release ] || drop_tree "$dir"
}

# layering: no public header includes one of a higher tier, and no source folder includes headers
# above its tier (include/gpumem/README.md); and the check itself fails on a header and on a source
# that do (a copy of the headers and sources with one upward include planted in each).
layering() {
  python3 "$root/scripts/check_layering.py" "$root" || return 1
  local planted="$root/build-test-logs/layering-planted"
  rm -rf "$planted" && mkdir -p "$planted" &&
    cp -r "$root/include" "$root/src" "$root/CMakeLists.txt" "$planted/" || return 1
  sed -i '0,/#include <gpumem\//s//#include <gpumem\/spec\/resource_factory.hpp>\n&/' \
    "$planted/include/gpumem/mr/pool_memory_resource.hpp"
  sed -i '0,/#include <gpumem\//s//#include <gpumem\/replay\/replay.hpp>\n&/' \
    "$planted/src/trace/trace_writer.cpp"
  if python3 "$root/scripts/check_layering.py" "$planted" >"$logs/layering-planted.log"; then
    echo "the layering check passed a planted upward include"; return 1
  fi
  grep -q 'pool_memory_resource.hpp .*includes gpumem/spec/resource_factory.hpp' \
    "$logs/layering-planted.log" &&
    grep -q 'src/trace/trace_writer.cpp .*includes gpumem/replay/replay.hpp' \
      "$logs/layering-planted.log"
}
echo "== layering (scripts/check_layering.py)" >&2
if layering >"$logs/layering.log" 2>&1; then
  passed=$((passed + 1)); tail -n 1 "$logs/layering.log" >&2
else
  failed=$((failed + 1)); stage_failed+=(layering); tail -n 20 "$logs/layering.log" >&2
fi

# format: clang-format in check mode over every C++ and CUDA source (a file it would change fails).
format_check() {
  local files
  mapfile -t files < <(cd "$root" && find include src tools tests bench python/src examples \
    -type f \( -name '*.hpp' -o -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \
    -o -name '*.inl' -o -name '*.inc' \) | sort)
  echo "clang-format: ${#files[@]} files"
  (cd "$root" && clang-format --dry-run --Werror "${files[@]}")
}
echo "== format (clang-format --dry-run --Werror)" >&2
if format_check >"$logs/format.log" 2>&1; then
  passed=$((passed + 1)); head -1 "$logs/format.log" >&2
else
  failed=$((failed + 1)); stage_failed+=(format); grep -E 'error:' "$logs/format.log" | head -20 >&2
fi

cfg="-DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX=$root/build-test/prefix"
stage release "$root/build-test"

# readme_block <name>: the code block after the line "<!-- name -->" in README.md.
readme_block() {
  awk -v mark="<!-- $1 -->" '$0 == mark { on = 1; next }
    on && /^```/ { if (inside) exit; inside = 1; next }
    on && inside { print }' "$root/README.md"
}

# consumers: every way of using gpumem from another project, each built and run.
consumers() {
  local prefix="$root/build-test/prefix" moved="$root/build-test/moved-prefix"
  local out="$root/build-test/consumers"
  rm -rf "$moved" "$out" && mkdir -p "$out" || return 1
  cmake --install "$root/build-test" && mv "$prefix" "$moved" || return 1
  echo "-- the README's C++ quick start is examples/quickstart"
  diff <(readme_block quickstart-cpp) "$root/examples/quickstart/main.cpp" &&
    diff <(readme_block quickstart-cmake) "$root/examples/quickstart/CMakeLists.txt" || return 1
  echo "-- quick start and consumer through find_package from a moved install prefix"
  for ex in quickstart consumer; do
    cmake -S "$root/examples/$ex" -B "$out/$ex" -G Ninja -DCMAKE_PREFIX_PATH="$moved" &&
      cmake --build "$out/$ex" || return 1
  done
  "$out/quickstart/quickstart" && "$out/consumer/gpumem_consumer" || return 1
  local config pcdir
  config=$(dirname "$(find "$moved" -name gpumem-config.cmake -print -quit)")
  local cuda_home cuda_real
  if command -v nvcc >/dev/null; then
    cuda_home=$(dirname "$(dirname "$(command -v nvcc)")")
  else  # CUDA's headers and runtime from PyPI (scripts/setup.sh)
    cuda_home=${GPUMEM_CUDA_ROOT:?no nvcc and no GPUMEM_CUDA_ROOT}
  fi
  cuda_real=$(cd "$cuda_home" && pwd -P)
  if grep -rnF -e "$root" -e "$cuda_home" -e "$cuda_real" "$config"; then
    echo "the CMake package names a folder of this machine (above)"; return 1
  fi
  echo "-- consumer through pkg-config"
  pcdir=$(dirname "$(find "$moved" -name gpumem.pc -print -quit)")
  PKG_CONFIG_PATH="$pcdir" pkg-config --exists gpumem &&
    c++ "$root/examples/consumer/main.cpp" -o "$out/pkgconfig_consumer" \
      $(PKG_CONFIG_PATH="$pcdir" pkg-config --cflags --libs gpumem) &&
    "$out/pkgconfig_consumer" || return 1
  echo "-- FetchContent subproject, shared library"
  cmake -S "$root/examples/subproject" -B "$out/subproject" -G Ninja -DGPUMEM_SOURCE_DIR="$root" \
    -DGPUMEM_BUILD_SHARED=ON -DCMAKE_BUILD_TYPE=Release &&
    cmake --build "$out/subproject" -- -j"$jobs" &&
    ldd "$out/subproject/gpumem_subproject" | grep -q 'libgpumem\.so' &&
    "$out/subproject/gpumem_subproject"
}
echo "== consumers (moved install prefix, README quick start, pkg-config, FetchContent shared)" >&2
if consumers >"$logs/consumers.log" 2>&1; then
  passed=$((passed + 1)); grep -E '^(gpumem consumer|peak )' "$logs/consumers.log" >&2
else
  failed=$((failed + 1)); stage_failed+=(consumers); tail -n 30 "$logs/consumers.log" >&2
fi
drop_tree "$root/build-test"

san="-DCMAKE_BUILD_TYPE=Debug -DGPUMEM_BUILD_CUDA_TESTS=OFF -DGPUMEM_BUILD_BENCHMARKS=OFF -DGPUMEM_BUILD_TOOLS=OFF"
cfg="$san -DGPUMEM_SANITIZE=address"
ASAN_OPTIONS=detect_leaks=1:protect_shadow_gap=0:allocator_may_return_null=1 stage asan "$root/build-asan" -L cpu
cfg="$san -DGPUMEM_SANITIZE=thread"
TSAN_OPTIONS=halt_on_error=1 stage tsan "$root/build-tsan" -L cpu

# Invariant checks: each resource runs its check_invariants() after every slow path (growth,
# reclaim, refills, flushes) and aborts naming a broken invariant. Only the conformance and
# fuzz-sequence suites (and the check's own test) are built and run: they take every resource
# through every slow path in about 2 minutes on 2 cores, build included, where the whole CPU suite
# would mean building every test a fourth time.
cfg="$san -DGPUMEM_CHECK_INVARIANTS=ON -DGPUMEM_TESTS_MATCHING=^(conformance|fuzz)/|invariant_checks"
stage invariants "$root/build-invariants" -L cpu -E '^compile_fail\.'

cfg="$san -DGPUMEM_BUILD_TESTS=OFF -DGPUMEM_SANITIZE=address -DGPUMEM_BUILD_FUZZERS=ON -DCMAKE_CXX_COMPILER=clang++-14"
# The snapshot converter (Python) is fuzzed by Atheris, from PyPI into a virtual environment.
fuzz_venv="$root/build-fuzz/venv"
if { { [ -x "$fuzz_venv/bin/python" ] || python3 -m venv "$fuzz_venv"; } &&
     "$fuzz_venv/bin/pip" install -q --only-binary=:all: atheris; } >"$logs/fuzz.pip.log" 2>&1; then
  cfg="$cfg -DGPUMEM_FUZZ_PYTHON=$fuzz_venv/bin/python"
else
  echo "== fuzz: could not install atheris from PyPI; the snapshot converter is not fuzzed" >&2
  tail -n 5 "$logs/fuzz.pip.log" >&2
  disk_left >&2
  failed=$((failed + 1)); stage_failed+=(fuzz-atheris)
fi
ASAN_OPTIONS=detect_leaks=1 stage fuzz "$root/build-fuzz" -L fuzz

# newest_cccl_include: installs the newest nvidia-cuda-cccl into a virtual environment and prints
# the folder that holds its cuda/ headers.
newest_cccl_include() {
  local venv="$root/build-cccl-newest/venv" header
  [ -x "$venv/bin/pip" ] || python3 -m venv "$venv" || return 1
  "$venv/bin/pip" install -q --upgrade nvidia-cuda-cccl >&2 || return 1
  header=$(find "$venv" -path '*/include/cccl/cuda/memory_resource' -print -quit)
  [ -n "$header" ] || return 1
  dirname "$(dirname "$header")"
}
if cccl_include=$(newest_cccl_include 2>"$logs/cccl-newest.pip.log"); then
  echo "   CCCL $(sed -nE 's/^#define CCCL_VERSION ([0-9]+).*/\1/p' \
    "$cccl_include/cuda/std/__cccl/version.h") from $cccl_include" >&2
  # -O1 for speed, -g kept: the stack tests read file and line from the debug information.
  cfg="$san -DCMAKE_CXX_FLAGS=-g -DCMAKE_CXX_FLAGS_DEBUG=-O1 -DGPUMEM_CCCL_INCLUDE_DIR=$cccl_include"
  stage cccl-newest "$root/build-cccl-newest" -L cpu
else
  echo "== cccl-newest: could not install nvidia-cuda-cccl from PyPI" >&2
  tail -n 5 "$logs/cccl-newest.pip.log" >&2
  disk_left >&2
  drop_tree "$root/build-cccl-newest"
  failed=$((failed + 1)); stage_failed+=(cccl-newest)
fi

if [ -f "$root/pyproject.toml" ] && [ -x "$root/scripts/test_python.sh" ]; then
  echo "== python" >&2
  if "$root/scripts/test_python.sh" >"$logs/python.log" 2>&1; then :; else
    stage_failed+=(python); disk_left >&2; fi
  tail -n 3 "$logs/python.log" >&2
  line=$(grep -E '[0-9]+ (passed|failed)' "$logs/python.log" | tail -n 1)
  count() { grep -oE "[0-9]+ $1" <<<"$line" | grep -oE '[0-9]+' || true; }
  p=$(count passed); f=$(count failed); s=$(count skipped)
  passed=$((passed + ${p:-0})); failed=$((failed + ${f:-0})); skipped=$((skipped + ${s:-0}))
  [ -n "$line" ] || failed=$((failed + 1))
fi

if ((${#stage_failed[@]})); then echo "failed stages: ${stage_failed[*]}" >&2; fi
echo "gpumem tests: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
