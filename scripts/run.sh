#!/usr/bin/env bash
# The main job: builds the gpumem tool and runs it (default: replay the bundled traces over every
# suballocator on a simulated address space, print the table, write the HTML report to
# ./gpumem-report). Extra arguments go to the tool, e.g.  scripts/run.sh replay trace.csv
# --resource pool. It runs in the folder it is called from, so relative paths work from anywhere.
# When the build fails, the end of the build log is shown and the script exits non-zero.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/setup.sh"
build="$root/build-run"
mkdir -p "$build"
log="$build/build.log"
if ! { cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPUMEM_BUILD_TESTS=OFF \
         -DGPUMEM_BUILD_BENCHMARKS=OFF &&
       cmake --build "$build" --target gpumem_cli -- -j"$(nproc)"; } >"$log" 2>&1; then
  echo "gpumem: building the tool failed; the end of $log:" >&2
  tail -n 40 "$log" >&2
  exit 1
fi
exec "$build/tools/gpumem/gpumem" "$@"
