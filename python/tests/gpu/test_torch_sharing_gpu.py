"""CUDA tensors of gpumem memory and torch.multiprocessing, on a GPU, both directions: refused with
gpumem.torch.SharingError saying what to do, and the way out (a clone outside the pool) works.
Each case runs in processes of its own (torch_sharing.py). Skips without a GPU or PyTorch."""

import pytest

from torch_gpu_support import NEEDS_GPU, NEEDS_TORCH, run_for_json

pytestmark = [NEEDS_GPU, NEEDS_TORCH]
SHARING_ERROR = "gpumem._torch_sharing.SharingError"


def test_sending_from_a_process_under_use_is_refused_clearly():
    out = run_for_json(["torch_sharing.py", "send-use"])
    err = out["send"].get("send_error", "")
    assert SHARING_ERROR in err and "tensor.cpu()" in err, out


def test_sending_a_mem_pool_tensor_is_refused_and_its_clone_is_sent():
    out = run_for_json(["torch_sharing.py", "send-pool"])
    err = out["send"].get("send_error", "")
    assert SHARING_ERROR in err and "use_mem_pool" in err, out
    assert out["send_clone"] == {"sum": float(1 << 20)}, out


def test_receiving_into_a_process_under_use_is_refused_clearly():
    out = run_for_json(["torch_sharing.py", "receive-use"])
    err = out["received"].get("error", "")
    assert SHARING_ERROR in err and "does not call gpumem.torch.use()" in err, out
