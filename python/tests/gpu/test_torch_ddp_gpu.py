"""DistributedDataParallel on two GPUs (torchrun, NCCL) with gpumem as each process's allocator:
the same losses as under PyTorch's own allocator, step by step. Skips without two GPUs or without
PyTorch."""

import json

import pytest

from torch_gpu_support import NEEDS_TORCH, NEEDS_TWO_GPUS, run_for_json, torchrun_args

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
