#!/usr/bin/env bash
# The Python package's tests, from a fresh clone: a virtual environment in build-python/venv, the
# build and test dependencies from PyPI, `pip install .` (builds the C++ library and the
# extensions), then pytest over python/tests (GPU tests skip themselves without a GPU).
# Called by scripts/test.sh; its last line is pytest's summary.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/build-python/venv"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
py="$venv/bin/python"
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
"$py" -m pip install -q --upgrade pip scikit-build-core pybind11 pytest
"$py" -m pip install -q --no-build-isolation "$root"
cd "$root/python/tests" && "$py" -m pytest -q -rs "$root/python/tests"
