"""gpumem.torch.mem_pool without a GPU: the per-pool segment functions PyTorch's MemPool calls
(over the host stand-in), the slots they belong to, and mem_pool() against a fake `torch`."""

import ctypes

import pytest

import gpumem
import gpumem.torch as gt
from test_torch_allocator import FAKE_TORCH, run

lib = gt._library()
MiB = 1 << 20


def functions(k):
    malloc = getattr(lib, f"gpumem_torch_pool_malloc_{k}")
    malloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
    malloc.restype = ctypes.c_void_p
    free = getattr(lib, f"gpumem_torch_pool_free_{k}")
    free.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
    free.restype = None
    return malloc, free


def stats(k):
    out = (ctypes.c_ulonglong * 5)()
    assert lib.gpumem_torch_pool_stats(k, out, 5) == 5
    return list(out)


@pytest.fixture
def host():
    return gpumem.HostRuntime(capacity_bytes=256 * MiB, device_count=2)


@pytest.fixture
def slots():
    opened = []
    yield opened
    for k in opened:
        lib.gpumem_torch_pool_close(k)


def test_segments_come_from_the_slots_stack_and_the_slot_closes_once_they_are_back(host, slots):
    k = lib.gpumem_torch_pool_open(b"vmm_pool", host._handle, 0)
    assert k >= 0, lib.gpumem_torch_pool_last_error()
    slots.append(k)
    malloc, free = functions(k)
    a, b = malloc(4 * MiB, 0, None), malloc(2 * MiB, 1, None)  # two devices, a stack each
    assert a and b, lib.gpumem_torch_pool_last_error()
    ctypes.memset(a, 0x7E, 4 * MiB)  # real memory of the host stand-in
    segments, nbytes, allocations, failures, held = stats(k)
    assert (segments, nbytes, allocations, failures) == (2, 6 * MiB, 2, 0)
    assert held >= 6 * MiB
    assert lib.gpumem_torch_pool_close(k) == -2  # PyTorch still holds segments
    free(a, 4 * MiB, 0, None)
    free(b, 2 * MiB, 1, None)
    assert stats(k)[:2] == [0, 0]
    assert lib.gpumem_torch_pool_close(k) == 0
    slots.remove(k)
    assert not malloc(MiB, 0, None)  # a closed slot allocates nothing
    assert "closed" in lib.gpumem_torch_pool_last_error().decode()


def test_a_failed_segment_is_nullptr_with_the_reason(host, slots):
    k = lib.gpumem_torch_pool_open(b"vmm_pool:reserve=8MiB", host._handle, 0)
    slots.append(k)
    malloc, free = functions(k)
    assert not malloc(64 * MiB, 0, None)  # PyTorch then frees cached segments and asks again
    why = lib.gpumem_torch_pool_last_error().decode()
    assert why.startswith(f"gpumem memory pool {k}: cannot allocate a segment of 67108864 bytes "
                          "on CUDA device 0: "), why
    assert not malloc(MiB, 99, None)
    assert "CUDA device 99 is out of range" in lib.gpumem_torch_pool_last_error().decode()
    assert stats(k)[3] == 2
    p = malloc(4 * MiB, 0, None)  # the pool stays usable
    assert p
    free(p, 4 * MiB, 0, None)


def test_bad_specs_and_a_full_table_are_refused(host, slots):
    assert lib.gpumem_torch_pool_open(b"", host._handle, 0) == -1
    assert lib.gpumem_torch_pool_last_error()
    for _ in range(lib.gpumem_torch_pool_slots()):
        k = lib.gpumem_torch_pool_open(b"pool", host._handle, 0)
        assert k >= 0
        slots.append(k)
    assert lib.gpumem_torch_pool_open(b"pool", host._handle, 0) == -1
    assert "slots is in use" in lib.gpumem_torch_pool_last_error().decode()


FAKE_MEMPOOL = '''
class MemPool:
    def __init__(self, allocator=None, use_on_oom=False, no_split=False):
        calls.append(("MemPool", allocator, use_on_oom, no_split))
        self.allocator = allocator


class OldMemPool:  # a PyTorch whose MemPool has neither switch
    def __init__(self, allocator=None):
        calls.append(("OldMemPool", allocator))

cuda.MemPool = MemPool
'''


@pytest.fixture
def fake_torch_with_mempool(tmp_path):
    import os
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(FAKE_TORCH + FAKE_MEMPOOL)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(tmp_path), os.path.dirname(os.path.dirname(gpumem.__file__)),
         env.get("PYTHONPATH", "")])
    return env


def test_mem_pool_gives_pytorch_a_pool_over_its_own_slot(fake_torch_with_mempool):
    out = run("""
        import gc, torch, gpumem, gpumem.torch as gt
        host = gpumem.HostRuntime(capacity_bytes=64 << 20)
        a = gt.mem_pool("pool:initial=1MiB", runtime=host)
        b = gt.mem_pool(runtime=host)
        print([c[2:] for c in torch.calls if c[0] == "CUDAPluggableAllocator"])
        print(gt.mem_pool_spec(a), gt.mem_pool_spec(b), gt.mem_pool_stats(a)["segments"])
        for bad in ("pool:initial=lots", "bogus"):
            try:
                gt.mem_pool(bad, runtime=host)
            except gt.AllocatorConfigError as e:
                print("refused:", str(e))
        slot = gt._pool_of[id(a)]
        del a
        gc.collect()
        gt._close_finished()
        print(slot in gt._open_slots, len(gt._open_slots))
    """, fake_torch_with_mempool)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == ("[('gpumem_torch_pool_malloc_0', 'gpumem_torch_pool_free_0'), "
                        "('gpumem_torch_pool_malloc_1', 'gpumem_torch_pool_free_1')]")
    assert lines[1] == f"pool:initial=1MiB {gt.DEFAULT_SPEC} 0"
    assert lines[2].startswith("refused: spec 'pool:initial=lots': ") and "initial" in lines[2]
    assert lines[3].startswith("refused: spec 'bogus': unknown resource 'bogus'")
    assert lines[4] == "False 1"  # the pool that went gave its slot back


def test_mem_pool_passes_pytorchs_switches_on_and_says_when_pytorch_lacks_them(
        fake_torch_with_mempool):
    out = run("""
        import torch, gpumem, gpumem.torch as gt
        host = gpumem.HostRuntime(capacity_bytes=64 << 20)
        kept = [gt.mem_pool(runtime=host), gt.mem_pool(runtime=host, no_split=True),
                gt.mem_pool(runtime=host, use_on_oom=True)]
        print([c[2:] for c in torch.calls if c[0] == "MemPool"])
        before = len(gt._open_slots)
        torch.cuda.MemPool = torch.OldMemPool
        kept.append(gt.mem_pool(runtime=host))         # no switch set: works with it
        try:
            gt.mem_pool(runtime=host, no_split=True)
        except TypeError as e:
            print("refused:", e)
        print(len(gt._open_slots) - before)            # the refused pool's slot was given back
    """, fake_torch_with_mempool)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "[(False, False), (False, True), (True, False)]"
    assert lines[1].startswith("refused: gpumem.torch.mem_pool: this PyTorch's torch.cuda.MemPool "
                               "does not take no_split (")
    assert lines[2] == "1"
