"""NCCL on two GPUs with gpumem memory pools (torchrun): a gpumem mem_pool registered with NCCL
through PyTorch's ProcessGroupNCCL.register_mem_pool, an all_reduce over its tensors with the right
sums, and NCCL's own log naming the registered buffer (NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=REG).
Skips without two GPUs or without PyTorch."""

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

NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                "NVSHMEM_DISABLE_NVLS": "1"}


@pytest.mark.parametrize("spec", ["vmm_pool", "vmm_pool:handle=none", "pool"])
def test_a_registered_gpumem_pool_all_reduces_right(spec, tmp_path):
    env = dict(os.environ, **NO_MULTICAST, NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="REG")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "torch_nccl_register.py", "--spec", spec, "--mib", "64", "--out", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, cwd=HERE)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    print(ranks)
    assert sorted(r["rank"] for r in ranks) == [0, 1]
    for r in ranks:
        assert r["registered"], r["error"]
        assert r["sums_ok"], r
        assert r["pool"]["segments"] >= 1 and r["pool"]["segment_bytes"] >= 64 << 20, r
    logged = [x for x in (proc.stdout + proc.stderr).splitlines() if "NCCL INFO register comm" in x]
    assert len(logged) >= 2, "NCCL did not log the registration of the pool's segment"
