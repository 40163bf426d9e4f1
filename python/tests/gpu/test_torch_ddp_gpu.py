"""DistributedDataParallel on two GPUs (torchrun, NCCL) with gpumem as each process's allocator,
and with DDP's gradient buckets in a gpumem memory pool registered with NCCL: the same losses as
under PyTorch's own allocator, step by step. Skips without two GPUs or without PyTorch."""

import json
import os
import subprocess
import sys

import pytest

from torch_gpu_support import (HERE, NEEDS_TORCH, NEEDS_TWO_GPUS, NO_MULTICAST, run_for_json,
                               torchrun_args)

pytestmark = [NEEDS_TWO_GPUS, NEEDS_TORCH]


def torchrun(*args):
    return run_for_json(torchrun_args(*args), prefix='{"script"', keep_prefix=True,
                        timeout=400)


def test_ddp_under_gpumem_trains_like_pytorchs_allocator():
    own = torchrun("torch_ddp_bench.py", "--steps", "12", "--layers", "4")
    ours = torchrun("-m", "gpumem.torch", "torch_ddp_bench.py", "--steps", "12", "--layers", "4")
    print(json.dumps({"torch": own, "gpumem": ours}))
    assert ours["allocator"].startswith("gpumem") and own["allocator"] == "torch"
    assert ours["world"] == own["world"] == 2
    assert ours["mean_losses"] == pytest.approx(own["mean_losses"], rel=1e-5, abs=1e-6)
    assert ours["mean_losses"][-1] < ours["mean_losses"][0]  # it trains


def test_ddp_gradient_buckets_in_a_registered_gpumem_pool():
    # DDP built inside a gpumem mem_pool (gradient_as_bucket_view=True), the pool registered with
    # NCCL through gpumem.torch.nccl_registration, the rest on PyTorch's allocator: the same
    # losses, every bucket in the pool's segments, and NCCL's own log of the registration.
    args = ["torch_ddp_bench.py", "--steps", "12", "--layers", "4"]
    own = torchrun(*args)
    env = dict(os.environ, **NO_MULTICAST, NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="REG")
    env.pop("GPUMEM_TORCH_ALLOC", None)
    proc = subprocess.run([sys.executable, *torchrun_args(*args, "--bucket-pool")],
                          capture_output=True, text=True, env=env, timeout=400, cwd=HERE)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    lines = [x for x in proc.stdout.splitlines() if x.startswith('{"script"')]
    assert lines, proc.stdout[-5000:] + proc.stderr[-5000:]
    pooled = json.loads(lines[-1])
    print(json.dumps({"torch": own, "bucket_pool": pooled}))
    assert pooled["allocator"] == own["allocator"] == "torch"
    assert pooled["mean_losses"] == pytest.approx(own["mean_losses"], rel=1e-5, abs=1e-6)
    assert pooled["buckets_in_pool"], pooled
    for r in pooled["ranks"]:
        b = r["bucket_pool"]
        assert b["rebuilt_in_pool"] and b["buckets"] >= 1, b
        # every gradient is a view of a bucket, and the buckets lie in the pool's segments
        assert b["bucket_bytes_in_pool"] == b["bucket_bytes"] >= b["grad_bytes"] > 0, b
        assert b["pool"]["failures"] == 0 and "register_error" not in b, b
        reg = b["registration"]
        assert reg["registrations"] >= 1 and reg["failures"] == 0, reg
        assert reg["registered_bytes"] >= b["pool_segment_bytes"] > 0, reg
    logged = [x for x in (proc.stdout + proc.stderr).splitlines() if "NCCL INFO register comm" in x]
    assert len(logged) >= 2, "NCCL did not log the registration of the bucket pool"
