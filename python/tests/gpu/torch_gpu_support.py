"""What the PyTorch GPU tests share: their skip conditions, the switches that keep NVLink
multicast off in every process they start, and running a script in a process of its own (PyTorch
chooses its allocator once per process) for the JSON it prints."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

import gpumem

HERE = os.path.dirname(os.path.abspath(__file__))

NEEDS_TORCH = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="needs the Python package 'torch'")
NEEDS_GPU = pytest.mark.skipif(gpumem.get_num_devices() == 0,
                               reason="needs a CUDA GPU (none visible on this machine)")
NEEDS_TWO_GPUS = pytest.mark.skipif(
    gpumem.get_num_devices() < 2,
    reason=f"needs 2 CUDA GPUs ({gpumem.get_num_devices()} visible here)")

# No NVLink multicast objects (NCCL's NVLS and PyTorch's symmetric memory would make them).
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                "NVSHMEM_DISABLE_NVLS": "1"}


def run_for_json(args, *, prefix="RESULT ", keep_prefix=False, env_extra=None, timeout=300):
    """Runs `python args...` in this folder with NO_MULTICAST (and without a gpumem allocator
    chosen by the environment); returns the JSON of its last stdout line starting with `prefix`
    (the JSON follows the prefix, or begins with it when `keep_prefix`)."""
    env = dict(os.environ, **NO_MULTICAST, **(env_extra or {}))
    env.pop("GPUMEM_TORCH_ALLOC", None)
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=HERE)
    lines = [x for x in proc.stdout.splitlines() if x.startswith(prefix)]
    assert proc.returncode == 0 and lines, f"rc {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return json.loads(lines[-1] if keep_prefix else lines[-1][len(prefix):])


def torchrun_args(*args, nproc=2):
    """The arguments of `python -m torch.distributed.run` for `nproc` processes on this host."""
    return ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc), *args]
