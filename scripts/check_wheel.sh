#!/usr/bin/env bash
# Checks a gpumem wheel as a user without the CUDA toolkit gets it: installs it into a fresh
# virtual environment (no index, no dependencies) with every CUDA folder taken off PATH and
# LD_LIBRARY_PATH, then checks that its modules and tool need no CUDA library (ldd), the
# installed size, `gpumem --version`, a replay on the simulated device and `import gpumem`.
#   scripts/check_wheel.sh [--hide-cuda] WHEEL [FOLDER]
# --hide-cuda (root, in a private mount namespace: `unshare --mount --propagation private`)
# also hides every /usr/local/cuda* folder, so that nothing of an installed toolkit can be
# reached. FOLDER (default: a temporary one) holds the environment. GPUMEM_WHEEL_LIMIT_MB
# (default 15) bounds the installed size. Called by scripts/test_python.sh.
set -euo pipefail
hide=0
if [ "${1:-}" = --hide-cuda ]; then hide=1; shift; fi
wheel=$(readlink -f "${1:?usage: check_wheel.sh [--hide-cuda] WHEEL [FOLDER]}")
dir=${2:-$(mktemp -d)}
limit_mb=${GPUMEM_WHEEL_LIMIT_MB:-15}

if ((hide)); then
  empty=$(mktemp -d)
  trap 'rmdir "$empty" 2>/dev/null || true' EXIT
  for d in /usr/local/cuda*; do
    real=$(readlink -f "$d")
    if [ -d "$real" ] && ! mountpoint -q "$real"; then mount --bind "$empty" "$real"; fi
  done
fi
strip_cuda() { tr ':' '\n' <<<"${1:-}" | grep -v -i cuda | paste -sd: -; }
export PATH="$dir/venv/bin:$(strip_cuda "$PATH")"
export LD_LIBRARY_PATH="$(strip_cuda "${LD_LIBRARY_PATH:-}")"
unset CUDA_HOME CUDA_PATH CUDAToolkit_ROOT GPUMEM_CUDA_ROOT PYTHONPATH

rm -rf "$dir/venv"
python3 -m venv "$dir/venv"
py="$dir/venv/bin/python"
"$py" -m pip install -q --no-index --no-deps "$wheel"
if ((hide)) && nvcc --version >/dev/null 2>&1; then
  echo "check_wheel: nvcc still runs ($(command -v nvcc))" >&2; exit 1
fi
pkg=$(cd "$dir" && "$py" -c 'import gpumem, os; print(os.path.dirname(gpumem.__file__))')
for f in "$pkg"/*.so "$pkg/bin/gpumem"; do
  if ldd "$f" | grep -E 'libcuda|libcudart|libnv|libstdc\+\+|not found'; then
    echo "check_wheel: $f needs the library above (only glibc and, at run time, the driver are allowed)" >&2
    exit 1
  fi
done
size_kb=$(du -sk "$pkg" | cut -f1)
echo "check_wheel: installed $((size_kb / 1024)) MiB ($size_kb KiB) in $pkg"
if ((size_kb > limit_mb * 1024)); then
  echo "check_wheel: the installed package is larger than $limit_mb MiB" >&2; exit 1
fi
(cd "$dir" && gpumem --version)
(cd "$dir" && gpumem replay "$pkg/traces/resnet50_train.csv" --resource vmm_pool --simulate \
   --no-progress) >"$dir/replay.txt"
grep -q vmm_pool "$dir/replay.txt" || { cat "$dir/replay.txt"; exit 1; }
(cd "$dir" && "$py" - <<'EOF'
import gpumem

out = gpumem.replay(resources="pool", simulate="16GiB")
assert len(out["traces"]) == 2 and all(t["results"] for t in out["traces"]), out
sim = gpumem.HostRuntime()
pool = gpumem.PoolMemoryResource(gpumem.CudaMemoryResource(sim), "1MiB")
pool.deallocate(pool.allocate(4096), 4096)
print(f"check_wheel: gpumem {gpumem.__version__} imports, replays and allocates (simulated)")
EOF
)
echo "check_wheel: OK without the CUDA toolkit"
