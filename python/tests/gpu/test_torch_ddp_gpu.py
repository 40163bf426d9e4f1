"""DistributedDataParallel on two GPUs (torchrun, NCCL) with gpumem as each process's allocator:
the same losses as under PyTorch's own allocator, step by step. Skips without two GPUs or without
PyTorch."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

import gpumem

HERE = os.path.dirname(os.path.abspath(__file__))

pytestmark = [
    pytest.mark.skipif(gpumem.get_num_devices() < 2,
                       reason=f"needs 2 CUDA GPUs ({gpumem.get_num_devices()} visible here)"),
    pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                       reason="needs the Python package 'torch'"),
]

# No NVLink multicast objects (NCCL's NVLS and PyTorch's symmetric memory would make them).
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                "NVSHMEM_DISABLE_NVLS": "1"}


def torchrun(*args, env_extra=None):
    env = dict(os.environ, **NO_MULTICAST, **(env_extra or {}))
    env.pop("GPUMEM_TORCH_ALLOC", None)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=400, cwd=HERE)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    assert proc.returncode == 0 and lines, f"rc {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return json.loads(lines[-1])


def test_ddp_under_gpumem_trains_like_pytorchs_allocator():
    own = torchrun("torch_ddp_bench.py", "--steps", "12", "--layers", "4")
    ours = torchrun("-m", "gpumem.torch", "torch_ddp_bench.py", "--steps", "12", "--layers", "4")
    print(json.dumps({"torch": own, "gpumem": ours}))
    assert ours["allocator"].startswith("gpumem") and own["allocator"] == "torch"
    assert ours["world"] == own["world"] == 2
    assert ours["mean_losses"] == pytest.approx(own["mean_losses"], rel=1e-5, abs=1e-6)
    assert ours["mean_losses"][-1] < ours["mean_losses"][0]  # it trains
