"""NCCL buffer registration that follows a gpumem pool, without a GPU or NCCL: a fake NCCL (C
callbacks with ncclCommRegister's, ncclCommDeregister's and ncclGetVersion's signatures) over the
host stand-in. After every step, what the fake NCCL holds registered is what the pool has mapped.
Also the pool's handle properties NCCL asks for, through the keyword and the spec string."""

import ctypes

import pytest

import gpumem
import gpumem.torch as gt
from gpumem import _torch_nccl

MiB = 1 << 20
COMM = 0xC0FFEE
REGISTER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                            ctypes.POINTER(ctypes.c_void_p))
DEREGISTER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
VERSION = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int))


class FakeNccl:
    """NCCL's functions as a library object would have them; remembers what is registered."""

    def __init__(self, version: int = 22809):
        self.live = {}  # handle -> (address, bytes)
        self.next = 1
        self.fail = 0  # the next n registrations return ncclInvalidUsage (5)
        self.comms = set()

        def register(comm, ptr, size, handle):
            self.comms.add(comm)
            if self.fail:
                self.fail -= 1
                return 5
            handle[0] = self.next
            self.live[self.next] = (ptr, size)
            self.next += 1
            return 0

        def deregister(comm, handle):
            self.comms.add(comm)
            return 0 if self.live.pop(handle, None) is not None else 4

        def get_version(out):
            out[0] = version
            return 0

        self.ncclCommRegister = REGISTER(register)
        self.ncclCommDeregister = DEREGISTER(deregister)
        self.ncclGetVersion = VERSION(get_version)

    def ranges(self):
        return sorted(self.live.values())


def coalesced(ranges):
    out = []
    for p, n in sorted(ranges):
        if out and out[-1][0] + out[-1][1] == p:
            out[-1] = (out[-1][0], out[-1][1] + n)
        else:
            out.append((p, n))
    return out


@pytest.fixture
def host():
    return gpumem.HostRuntime(capacity_bytes=256 * MiB)


def follow(pool, nccl, unit=None):
    return _torch_nccl.registration(pool, COMM, nccl, unit, None, lambda p: None)


def expect_followed(pool, nccl, reg):
    assert coalesced(nccl.ranges()) == coalesced(pool.mapped_runs())
    assert sorted(reg.registrations()) == nccl.ranges()
    assert reg.registered_bytes == sum(n for _, n in nccl.ranges())
    assert reg.failures == 0, reg.last_failure


def test_registrations_follow_growth_trim_pause_and_resume_one_per_handle(host):
    nccl = FakeNccl(version=22809)  # 2.28.9: single-handle buffers only
    pool = gpumem.VmmPoolMemoryResource(reserve_bytes=512 * MiB, runtime=host,
                                        shareable_handles=True)
    early = pool.allocate(20 * MiB)  # mapped before the registration
    with follow(pool, nccl) as reg:
        assert reg.unit == "handle"
        assert nccl.comms == {COMM}
        expect_followed(pool, nccl, reg)
        grown = pool.allocate(40 * MiB)
        expect_followed(pool, nccl, reg)
        for p, n in nccl.ranges():  # each registration is one whole physical handle
            h = host.vmm_allocation_at(p)
            assert (h["base"], h["bytes"], h["shareable"]) == (p, n, True)
        pool.deallocate(grown, 40 * MiB)
        assert pool.trim_to(24 * MiB) > 0
        expect_followed(pool, nccl, reg)
        assert pool.pause(offload=True)
        assert nccl.live == {}
        assert pool.resume()
        expect_followed(pool, nccl, reg)
        assert reg.deregistered > 0
    assert nccl.live == {} and reg.closed  # the with block closed it: all deregistered
    pool.deallocate(early, 20 * MiB)


def test_newer_nccl_registers_runs_of_handles(host):
    nccl = FakeNccl(version=22902)  # 2.29.2: multi-handle buffers
    pool = gpumem.VmmPoolMemoryResource(reserve_bytes=512 * MiB, runtime=host)
    reg = follow(pool, nccl)
    assert reg.unit == "run"
    p = pool.allocate(40 * MiB)  # one growth: three handles, one registration
    assert len(nccl.live) == 1
    expect_followed(pool, nccl, reg)
    reg.close()
    assert nccl.live == {}
    pool.deallocate(p, 40 * MiB)
    with pytest.raises(ValueError, match="'handle'"):
        follow(pool, nccl, unit="segment")


def test_a_failing_ncclcommregister_is_counted_and_the_pool_goes_on(host):
    nccl = FakeNccl()
    pool = gpumem.VmmPoolMemoryResource(reserve_bytes=512 * MiB, runtime=host)
    reg = follow(pool, nccl)
    nccl.fail = 100
    p = pool.allocate(8 * MiB)  # allocation succeeds; its registration does not
    assert reg.failures >= 1
    assert "ncclCommRegister" in reg.last_failure and "returned 5" in reg.last_failure
    nccl.fail = 0
    q = pool.allocate(32 * MiB)
    assert len(nccl.live) >= 2
    reg.close()
    pool.deallocate(p, 8 * MiB)
    pool.deallocate(q, 32 * MiB)


def test_mem_pool_registration_follows_the_slots_stack(host):
    lib = gt._library()
    nccl = FakeNccl()
    k = lib.gpumem_torch_pool_open(b"vmm_pool:shareable=1,rdma=1", host._handle, 0)
    assert k >= 0, lib.gpumem_torch_pool_last_error()
    malloc = getattr(lib, f"gpumem_torch_pool_malloc_{k}")
    malloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
    malloc.restype = ctypes.c_void_p
    free = getattr(lib, f"gpumem_torch_pool_free_{k}")
    free.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
    free.restype = None
    try:
        reg = _torch_nccl.registration(object(), COMM, nccl, None, 0, lambda p: k)
        assert reg.registrations() == 0  # the stack maps nothing yet
        seg = malloc(40 * MiB, 0, None)  # a segment PyTorch asks for: registered as mapped
        assert seg, lib.gpumem_torch_pool_last_error()
        assert reg.registrations() == len(nccl.live) == 3 and reg.failures == 0
        assert reg.registered_bytes == sum(n for _, n in nccl.ranges()) >= 40 * MiB
        h = host.vmm_allocation_at(seg)
        assert h["shareable"] and h["gpu_direct_rdma"]
        free(seg, 40 * MiB, 0, None)
        assert len(nccl.live) == 3  # free, still mapped: still registered
        assert lib.gpumem_torch_pool_trim(k) == 0  # given back to the device: deregistered
        assert nccl.live == {} and reg.registrations() == 0 and reg.deregistered == 3
        seg = malloc(8 * MiB, 0, None)
        assert len(nccl.live) == 1
        free(seg, 8 * MiB, 0, None)
        assert lib.gpumem_torch_pool_close(k) == 0  # closes the registration first
        assert nccl.live == {}
        assert reg.registrations() == 0
        reg.close()  # already gone with the slot: nothing happens
    finally:
        lib.gpumem_torch_pool_close(k)


def test_mem_pool_registration_needs_a_vmm_pool(host):
    lib = gt._library()
    k = lib.gpumem_torch_pool_open(b"pool>cuda", host._handle, 0)
    assert k >= 0
    try:
        with pytest.raises(RuntimeError, match="vmm_pool"):
            _torch_nccl.registration(object(), COMM, FakeNccl(), None, 0, lambda p: k)
    finally:
        lib.gpumem_torch_pool_close(k)
    with pytest.raises(TypeError, match="mem_pool"):
        _torch_nccl.registration(object(), COMM, FakeNccl(), None, 0, lambda p: None)


def test_a_paged_mem_pool_cannot_be_registered(host):
    lib = gt._library()
    k = lib.gpumem_torch_pool_open_paged(0.0, host._handle, 0)
    assert k >= 0
    try:
        with pytest.raises(RuntimeError, match="paged memory pool moves its pages"):
            _torch_nccl.registration(object(), COMM, FakeNccl(), None, 0, lambda p: k)
    finally:
        lib.gpumem_torch_pool_close(k)


def test_nccl_versions_and_units():
    assert _torch_nccl.unit_for((2, 28, 9)) == "handle"
    assert _torch_nccl.unit_for((2, 29, 2)) == "run"
    assert _torch_nccl.unit_for((3, 0, 0)) == "run"
    assert _torch_nccl.nccl_version(FakeNccl(22809)) == (2, 28, 9)
    assert _torch_nccl.nccl_version(FakeNccl(2804)) == (2, 8, 4)


def test_an_nccl_other_than_the_communicators_is_refused():
    # PyTorch's wheels carry their own NCCL: a separately installed nvidia-nccl of another version
    # must not be called on PyTorch's communicators.
    lib = FakeNccl(23203)
    with pytest.raises(RuntimeError, match=r"version 2\.32\.3, but PyTorch's communicators run "
                                           r"on NCCL 2\.28\.9"):
        _torch_nccl.matching_library(lib, (2, 28, 9), "/site/nvidia/nccl/lib/libnccl.so.2")
    assert _torch_nccl.matching_library(lib, (2, 32, 3)) is lib
    assert _torch_nccl.matching_library(lib, None) is lib  # PyTorch cannot say: not checked


def test_no_nccl_library_is_a_clear_error():
    with pytest.raises(RuntimeError, match="no NCCL library could be loaded"):
        _torch_nccl.nccl_library(paths=["/nonexistent/libnccl.so.2"])


def test_a_real_nccl_reports_its_version_and_has_the_registration_functions():
    try:
        lib = _torch_nccl.nccl_library()
    except RuntimeError:
        pytest.skip("no NCCL library on this machine")
    version = _torch_nccl.nccl_version(lib)  # no GPU needed
    assert version[0] == 2 and version >= (2, 0, 0), version
    if version >= (2, 19, 0):
        assert _torch_nccl._function_address(lib, "ncclCommRegister")
        assert _torch_nccl._function_address(lib, "ncclCommDeregister")


def test_pool_handles_for_nccl_through_the_keyword_and_the_spec(host):
    plain = gpumem.VmmPoolMemoryResource(reserve_bytes=64 * MiB, runtime=host)
    p = plain.allocate(MiB)
    info = host.vmm_allocation_at(p)
    assert (info["shareable"], info["gpu_direct_rdma"]) == (False, False)
    assert info["base"] % plain.granularity == 0 and info["bytes"] % plain.granularity == 0
    plain.deallocate(p, MiB)
    for pool in (gpumem.VmmPoolMemoryResource(reserve_bytes=64 * MiB, runtime=host,
                                              shareable_handles=True, gpu_direct_rdma=True),
                 gpumem.from_spec("vmm_pool:reserve=64MiB,shareable=1,rdma=1", runtime=host)):
        p = pool.allocate(3 * MiB)
        info = host.vmm_allocation_at(p)
        assert (info["shareable"], info["gpu_direct_rdma"], info["device"]) == (True, True, 0)
        pool.deallocate(p, 3 * MiB)
    with pytest.raises(gpumem.CudaError):
        host.vmm_allocation_at(0x1000)
