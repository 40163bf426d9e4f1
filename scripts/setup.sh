#!/usr/bin/env bash
# Installs what gpumem's build needs on a fresh Debian/Ubuntu machine; the CUDA toolkit is used when
# installed, PyPI's CUDA runtime wheels otherwise (see below).
# Idempotent: installs only missing packages. Sourced by run.sh and test.sh.
set -euo pipefail

need=()
# clang + libFuzzer: the fuzzers; pkg-config: the consumers; clang-format: the format check;
# libcli11-dev: the gpumem tool's command line; nlohmann-json3-dev: the tool's JSON output
for pkg in cmake ninja-build g++ libgtest-dev libgmock-dev libbenchmark-dev python3 python3-venv \
           clang-14 libclang-rt-14-dev pkg-config clang-format libcli11-dev nlohmann-json3-dev; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if ((${#need[@]})); then
  echo "gpumem setup: installing ${need[*]}" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# CUDA: the toolkit when it is installed; otherwise (or with GPUMEM_CUDA_FROM_PYPI=1) only CUDA's
# headers and static runtime, from PyPI's CUDA wheels in a virtual environment (build-cuda-pypi),
# which is all that the library, the tool and the Python package need. The GPU tests with kernels
# need nvcc and are not built then.
if [ "${GPUMEM_CUDA_FROM_PYPI:-0}" != 1 ] && ! command -v nvcc >/dev/null 2>&1 &&
   [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
if [ -z "${GPUMEM_CUDA_ROOT:-}" ] &&
   { [ "${GPUMEM_CUDA_FROM_PYPI:-0}" = 1 ] || ! command -v nvcc >/dev/null 2>&1; }; then
  gpumem_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  cuda_venv="$gpumem_root/build-cuda-pypi"
  if ! compgen -G "$cuda_venv/lib/python3*/site-packages/nvidia/cu13/lib/libcudart_static.a" >/dev/null; then
    echo "gpumem setup: installing CUDA's headers and runtime from PyPI (no CUDA toolkit needed) into $cuda_venv" >&2
    python3 -m venv "$cuda_venv"
    "$cuda_venv/bin/python" -m pip install -q --upgrade pip
    "$cuda_venv/bin/python" -m pip install -q 'nvidia-cuda-runtime==13.0.*' \
      'nvidia-cuda-crt==13.0.*' 'nvidia-cuda-cccl==13.0.*'
  fi
  GPUMEM_CUDA_ROOT=$(compgen -G "$cuda_venv/lib/python3*/site-packages/nvidia/cu13" | head -1)
  export GPUMEM_CUDA_ROOT
  echo "gpumem setup: CUDA headers and runtime from $GPUMEM_CUDA_ROOT (the GPU tests with kernels need nvcc and are left out)" >&2
fi
