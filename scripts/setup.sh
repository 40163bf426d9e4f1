#!/usr/bin/env bash
# Installs what gpumem's build needs on a fresh Debian/Ubuntu machine with the CUDA toolkit.
# Idempotent: installs only missing packages. Sourced by run.sh and test.sh.
set -euo pipefail

need=()
for pkg in cmake ninja-build g++ libgtest-dev libgmock-dev libbenchmark-dev python3 python3-venv \
           clang-14 libclang-rt-14-dev pkg-config; do  # clang + libFuzzer: fuzzers; pkg-config: consumers
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if ((${#need[@]})); then
  echo "gpumem setup: installing ${need[*]}" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
if ! command -v nvcc >/dev/null 2>&1; then
  if [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH=/usr/local/cuda/bin:$PATH
  else
    echo "gpumem setup: the CUDA toolkit (nvcc) is required; install CUDA 13 first." >&2
    exit 1
  fi
fi
