"""torch.multiprocessing and gpumem memory, without a GPU: which CUDA tensors gpumem refuses to send
or receive (and the message that says what to do), found from stand-in tensors and pools."""

import types

import pytest

from gpumem import _torch_sharing as sharing
from gpumem._torch_sharing import SharingError

MiB = 1 << 20


class FakeStorage:
    def __init__(self, ptr, nbytes):
        self._ptr, self._nbytes = ptr, nbytes

    def data_ptr(self):
        return self._ptr

    def nbytes(self):
        return self._nbytes


def tensor(ptr, nbytes, device=1, cuda=True):
    return types.SimpleNamespace(is_cuda=cuda, device=types.SimpleNamespace(index=device),
                                 untyped_storage=lambda: FakeStorage(ptr, nbytes))


class FakePool:
    """A MemPool as far as snapshot() goes: PyTorch's segment list."""

    def __init__(self, *segments):
        self.segments = [{"address": a, "total_size": n} for a, n in segments]

    def snapshot(self):
        return self.segments


def test_whole_process_gpumem_refuses_every_cuda_tensor_it_sends():
    with pytest.raises(SharingError) as e:
        sharing.check_send(tensor(0x7000_0000, 4 * MiB), whole_process=True, pools=[])
    text = str(e.value)
    assert f"{4 * MiB} bytes on cuda:1" in text
    assert "gpumem.torch.use()" in text and "tensor.cpu()" in text
    sharing.check_send(tensor(0x7000_0000, 4 * MiB, cuda=False), True, [])  # CPU: PyTorch's
    sharing.check_send(tensor(0, 0), True, [])  # an empty storage holds no memory


def test_a_tensor_in_a_gpumem_mem_pool_is_refused_and_others_pass():
    pools = [(FakePool((0x1000_0000, 64 * MiB)), "vmm_pool"),
             (FakePool((0x9000_0000, 8 * MiB), (0xA000_0000, 8 * MiB)), "vmm_pool:shareable=1")]
    with pytest.raises(SharingError, match=r"mem_pool\(\) \('vmm_pool:shareable=1'\)") as e:
        sharing.check_send(tensor(0xA000_0000 + 4096, MiB, device=0), False, pools)
    assert "clone()" in str(e.value) and "use_mem_pool" in str(e.value)
    assert "cuda:0" in str(e.value)
    sharing.check_send(tensor(0x2000_0000, MiB), False, pools)  # PyTorch's own memory
    sharing.check_send(tensor(0x1000_0000 + 64 * MiB, MiB), False, pools)  # just past a segment
    assert sharing.owning_pool_spec(0x1000_0000, pools) == "vmm_pool"


def test_receiving_is_refused_only_under_use():
    why = sharing.receive_refusal(nbytes=3 * MiB, device=2, whole_process=True)
    assert f"{3 * MiB} bytes on cuda:2" in why and "does not call gpumem.torch.use()" in why
    assert sharing.receive_refusal(nbytes=3 * MiB, device=2, whole_process=False) is None


def test_a_pool_that_cannot_describe_itself_holds_nothing_known():
    class Broken:
        def snapshot(self):
            raise RuntimeError("gone")

    assert sharing.owning_pool_spec(0x1000, [(Broken(), "vmm_pool")]) is None
