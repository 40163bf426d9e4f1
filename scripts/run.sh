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
tool="$build/tools/gpumem/gpumem"
[ -x "$tool" ] || echo "gpumem: first run: building the tool in $build (a few minutes; later runs start at once)" >&2
# progress: ninja's "[n/m]" lines as one updating line on a terminal, else a line per 10 %.
progress() {
  local line n total shown=-1
  while IFS= read -r line; do
    [[ $line =~ ^\[([0-9]+)/([0-9]+)\] ]] || continue
    n=${BASH_REMATCH[1]} total=${BASH_REMATCH[2]}
    if [ -t 2 ]; then
      printf '\rgpumem: building %d/%d' "$n" "$total" >&2
    elif ((n * 10 / total > shown)); then
      shown=$((n * 10 / total))
      echo "gpumem: building $n/$total" >&2
    fi
  done
  if [ -t 2 ] && [ -n "${n:-}" ]; then printf '\r\033[K' >&2; fi
}
if ! { cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPUMEM_BUILD_TESTS=OFF \
         -DGPUMEM_BUILD_BENCHMARKS=OFF >"$log" 2>&1 &&
       cmake --build "$build" --target gpumem_cli -- -j"$(nproc)" 2>&1 | tee -a "$log" | progress; }; then
  echo "gpumem: building the tool failed; the end of $log:" >&2
  tail -n 40 "$log" >&2
  exit 1
fi
exec "$tool" "$@"
