#!/usr/bin/env bash
# The main job: builds the gpumem tool and runs it (default: replay the bundled traces over every
# suballocator on a simulated address space, print the table, write the HTML report).
# Extra arguments go to the tool, e.g.  scripts/run.sh replay trace.csv --resource pool
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/setup.sh"
build="$root/build-run"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPUMEM_BUILD_TESTS=OFF \
  -DGPUMEM_BUILD_BENCHMARKS=OFF >/dev/null
cmake --build "$build" --target gpumem_cli -- -j"$(nproc)" >/dev/null
cd "$root"
exec "$build/tools/gpumem/gpumem" "$@"
