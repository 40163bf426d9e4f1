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


# -- paged pools: segments of address space, pages backed as PyTorch's trace says --------------

ALLOC, FREE = 0, 1


def paged_stats(k):
    out = (ctypes.c_ulonglong * 9)()
    assert lib.gpumem_torch_pool_paged_stats(k, out, 9) == 9
    keys = ("backed", "live", "peak", "free", "created", "moved", "waited", "released", "page")
    return dict(zip(keys, out))


def event(action, device, addr, size, stream=None):
    return lib.gpumem_torch_pages_event(action, device, addr, size, stream)


def test_a_paged_slot_backs_only_the_pages_pytorchs_blocks_touch(host, slots):
    k = lib.gpumem_torch_pool_open_paged(0.0, host._handle, 0)
    assert k >= 0, lib.gpumem_torch_pool_last_error()
    slots.append(k)
    malloc, free = functions(k)
    seg = malloc(20 * MiB, 0, None)  # PyTorch's segment for blocks of 1 to 10 MiB
    assert seg, lib.gpumem_torch_pool_last_error()
    assert stats(k)[:2] == [1, 20 * MiB]
    assert paged_stats(k)["backed"] == 0 and stats(k)[4] == 0  # address space only
    assert event(ALLOC, 0, seg + MiB, 3 * MiB) == 0  # a block of 3 MiB at 1 MiB: pages 0 and 1
    ctypes.memset(seg + MiB, 0x5A, 3 * MiB)  # backed by the host stand-in's memory
    s = paged_stats(k)
    assert (s["backed"], s["live"], s["created"], s["page"]) == (4 * MiB, 2, 2, 2 * MiB)
    assert host.memory_info()[1] - host.memory_info()[0] == 4 * MiB  # the device's view
    assert stats(k)[4] == 4 * MiB  # held_bytes: what is backed
    assert event(ALLOC, 0, seg + 8 * MiB, 2 * MiB) == 0  # page 4
    assert event(FREE, 0, seg + MiB, 3 * MiB) == 0  # pages 0 and 1 free
    s = paged_stats(k)
    assert (s["live"], s["free"], s["peak"]) == (1, 2, 3)
    assert event(ALLOC, 0, seg + 12 * MiB, 2 * MiB) == 0  # slack 0: page 0's memory moves
    s = paged_stats(k)
    assert (s["moved"], s["created"], s["backed"]) == (1, 3, 6 * MiB)
    assert event(ALLOC, 1, seg, 2 * MiB) == 0  # another device's block: not this pool's
    assert event(ALLOC, 0, 4096, 2 * MiB) == 0  # outside every paged pool: ignored
    assert lib.gpumem_torch_pool_trim(k) == 0  # the free page goes back
    assert paged_stats(k)["backed"] == 4 * MiB
    for off in (8 * MiB, 12 * MiB):
        assert event(FREE, 0, seg + off, 2 * MiB) == 0
    assert lib.gpumem_torch_pool_close(k) == -2  # PyTorch still holds the segment
    free(seg, 20 * MiB, 0, None)
    assert stats(k)[:2] == [0, 0] and paged_stats(k)["backed"] == 0
    free_bytes, total = host.memory_info()
    assert free_bytes == total  # every page back to the device
    host.check_invariants()
    assert lib.gpumem_torch_pool_close(k) == 0


@pytest.fixture
def small_host():
    return gpumem.HostRuntime(capacity_bytes=8 * MiB)


def test_a_paged_block_that_cannot_be_backed_is_refused_with_the_reason(small_host, slots):
    k = lib.gpumem_torch_pool_open_paged(0.02, small_host._handle, 0)
    assert k >= 0
    slots.append(k)
    malloc, free = functions(k)
    seg = malloc(12 * MiB, 0, None)  # address space: more than the device has is fine
    assert seg
    assert event(ALLOC, 0, seg, 12 * MiB) == -1
    why = lib.gpumem_torch_pool_last_error().decode()
    assert "cannot back a block of 12582912 bytes on CUDA device 0" in why and "backed" in why
    assert paged_stats(k)["backed"] == 0  # nothing kept of the failed block
    assert event(ALLOC, 0, seg, 4 * MiB) == 0  # what fits still serves
    assert event(FREE, 0, seg, 4 * MiB) == 0
    free(seg, 12 * MiB, 0, None)


def test_a_paged_block_is_backed_to_its_512_byte_end(host, slots):
    # PyTorch's trace gives the size asked for; the block is that rounded up to 512 bytes, all of
    # which a kernel may touch: a block ending 100 bytes before a page ends runs onto the next
    k = lib.gpumem_torch_pool_open_paged(0.0, host._handle, 0)
    slots.append(k)
    malloc, free = functions(k)
    seg = malloc(4 * MiB, 0, None)
    at = seg + 2 * MiB - 1000
    assert event(ALLOC, 0, at, 900) == 0
    assert paged_stats(k)["live"] == 2
    ctypes.memset(at, 1, 1024)
    assert event(FREE, 0, at, 900) == 0
    s = paged_stats(k)
    assert (s["live"], s["free"]) == (0, 2)
    free(seg, 4 * MiB, 0, None)


def test_paged_slots_refuse_a_bad_slack(host, slots):
    for bad in (-0.5, float("nan"), float("inf")):
        assert lib.gpumem_torch_pool_open_paged(bad, host._handle, 0) == -1
        assert "slack" in lib.gpumem_torch_pool_last_error().decode()
    k = lib.gpumem_torch_pool_open_paged(0.5, host._handle, 0)
    slots.append(k)
    assert lib.gpumem_torch_pool_paged_stats(k, None, 0) == 0
    plain = lib.gpumem_torch_pool_open(b"pool", host._handle, 0)
    slots.append(plain)
    assert lib.gpumem_torch_pool_paged_stats(plain, None, 0) == -1  # not paged


def test_mem_pool_paged_gives_pytorch_a_paged_slot(fake_torch_with_mempool):
    out = run("""
        import torch, gpumem, gpumem.torch as gt
        host = gpumem.HostRuntime(capacity_bytes=64 << 20)
        pool = gt.mem_pool(paged=True, slack=0.1, runtime=host)
        print(gt.mem_pool_spec(pool), sorted(gt.mem_pool_stats(pool))[:4])
        for kwargs in ({"spec": "pool"}, {"slack": -1}, {"slack": True}, {"slack": "lots"}):
            spec = kwargs.pop("spec", None)
            try:
                gt.mem_pool(spec, paged=True, runtime=host, **kwargs)
            except ValueError as e:
                print("refused:", str(e).split(":")[0])
    """, fake_torch_with_mempool)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "paged:slack=0.1 ['allocations', 'backing_seconds', 'failures', 'free_pages']"
    assert lines[1] == "refused: mem_pool(paged=True) takes no spec (got 'pool')"
    assert lines[2:] == ["refused: mem_pool(paged=True, slack=-1)",
                         "refused: mem_pool(paged=True, slack=True)",
                         "refused: mem_pool(paged=True, slack='lots')"]
