"""Habits from RMM and CuPy, without a GPU: statistics of the current resource (enable, scopes,
the profiler), reinitialize(), free_all_blocks(), Numba's external memory manager and CuPy's
pinned-memory hook (over stand-in `numba` / `cupy` objects where the package is missing)."""

import gc
import importlib.util
import sys
import types

import pytest

import gpumem


@pytest.fixture
def current(host):
    """A pool over the host stand-in as device 0's resource; the initial one back afterwards."""
    pool = gpumem.PoolMemoryResource(gpumem.CudaMemoryResource(host), "4MiB")
    gpumem.set_per_device_resource(0, pool)
    yield pool
    gpumem.set_per_device_resource(0, None)


# -- statistics -----------------------------------------------------------------------------------


def test_statistics_are_off_until_enabled(current):
    assert gpumem.get_statistics() is None
    with pytest.raises(gpumem.StatisticsNotEnabledError, match="enable_statistics"):
        gpumem.push_statistics()
    stats = gpumem.enable_statistics()
    assert isinstance(stats, gpumem.StatisticsResourceAdaptor) and stats.upstream is current
    assert gpumem.get_current_device_resource() is stats
    assert gpumem.enable_statistics() is stats  # once only
    buf = gpumem.DeviceBuffer(1000)
    s = gpumem.get_statistics()
    assert (s.current_bytes, s.current_count, s.total_count) == (1000, 1, 1)
    del buf
    s = gpumem.get_statistics()
    assert (s.current_bytes, s.peak_bytes, s.total_bytes) == (0, 1000, 1000)


def test_push_and_pop_measure_a_nested_scope(current):
    gpumem.enable_statistics()
    outer = gpumem.DeviceBuffer(4096)
    gpumem.push_statistics()
    inner = gpumem.DeviceBuffer(512)
    del inner
    popped = gpumem.pop_statistics()
    assert (popped.peak_bytes, popped.total_count, popped.current_bytes) == (512, 1, 0)
    s = gpumem.get_statistics()
    assert s.total_count == 2 and s.current_bytes == 4096  # the scope folded into the outer one
    with pytest.raises(IndexError):
        gpumem.pop_statistics()
    del outer


def test_statistics_block_switches_them_on_and_off(current):
    with gpumem.statistics() as scope:
        a = gpumem.DeviceBuffer(2048)
        b = gpumem.DeviceBuffer(1024)
        assert scope.current().current_bytes == 3072
        del a
    assert scope.result == gpumem.Statistics(1024, 3072, 3072, 1, 2, 2)
    assert gpumem.get_current_device_resource() is current  # switched back off
    assert gpumem.get_statistics() is None
    del b


def test_statistics_block_keeps_an_enabled_adaptor_and_nests(current):
    stats = gpumem.enable_statistics()
    with gpumem.statistics() as outer:
        x = gpumem.DeviceBuffer(100)
        with gpumem.statistics() as inner:
            y = gpumem.DeviceBuffer(300)
            del y
        del x
    assert inner.result.total_bytes == 300 and outer.result.total_bytes == 400
    assert gpumem.get_current_device_resource() is stats


def test_profiler_records_per_function_and_block(current):
    records = gpumem.ProfilerRecords()

    @gpumem.profiler(records=records)
    def step(n):
        b = gpumem.DeviceBuffer(n)
        return b.size

    @gpumem.profiler(name="big", records=records)
    def big():
        keep = [gpumem.DeviceBuffer(1 << 20) for _ in range(2)]
        return len(keep)

    assert step(1000) == 1000 and step(3000) == 3000 and big() == 2
    with gpumem.profiler(name="block", records=records):
        gpumem.DeviceBuffer(64)
    name = f"{__name__}.test_profiler_records_per_function_and_block.<locals>.step"
    r = records.records[name]
    assert (r.calls, r.peak_bytes, r.total_bytes, r.total_count) == (2, 3000, 4000, 2)
    assert records.records["big"].peak_bytes == 2 << 20
    assert records.records["block"].total_count == 1
    table = records.report()
    order = [line.split()[0] for line in table.splitlines()[2:]]
    assert order == ["big", name, "block"], table  # largest peak first
    with pytest.raises(ValueError, match="order by one of"):
        records.report(ordered_by="speed")
    assert gpumem.get_statistics() is None  # each run switched statistics back off


def test_profiler_records_a_run_that_raises(current):
    records = gpumem.ProfilerRecords()

    @gpumem.profiler(name="fails", records=records)
    def fails():
        gpumem.DeviceBuffer(10)
        raise KeyError("x")

    with pytest.raises(KeyError):
        fails()
    assert records.records["fails"].calls == 1
    assert gpumem.get_current_device_resource() is current


def test_default_profiler_records_and_bare_decorator(current):
    gpumem.default_profiler_records.clear()

    @gpumem.profiler
    def f():
        return gpumem.DeviceBuffer(8).size

    f()
    assert any(n.endswith(".f") for n in gpumem.default_profiler_records.records)
    with pytest.raises(TypeError, match="decorates a function"):
        gpumem.profiler("not a function")


# -- reinitialize and free_all_blocks --------------------------------------------------------------


def test_reinitialize_builds_a_pool_with_statistics(host):
    try:
        built = gpumem.reinitialize(pool=True, initial_pool_size="2MiB", maximum_pool_size="8MiB",
                                    statistics=True, runtime=host)
        top = built[0]
        assert gpumem.get_per_device_resource(0) is top
        assert isinstance(top, gpumem.StatisticsResourceAdaptor)
        pool = top.upstream
        assert isinstance(pool, gpumem.PoolMemoryResource) and pool.pool_size == 2 << 20
        assert pool.maximum_pool_size == 8 << 20
        buf = gpumem.DeviceBuffer(1 << 20)
        assert gpumem.get_statistics().current_bytes == 1 << 20
        del buf
    finally:
        gpumem.set_per_device_resource(0, None)


def test_reinitialize_on_several_devices_with_a_spec_and_logs(tmp_path):
    host = gpumem.HostRuntime(capacity_bytes=64 << 20, device_count=2)
    log = tmp_path / "allocs.csv"
    try:
        built = gpumem.reinitialize(spec="pool:initial=1MiB", devices=[0, 1], logging=True,
                                    log_file_name=str(log), runtime=host)
        assert sorted(built) == [0, 1]
        for d in (0, 1):
            assert isinstance(built[d], gpumem.LoggingResourceAdaptor)
            assert gpumem.get_per_device_resource(d) is built[d]
            built[d].deallocate(built[d].allocate(256), 256)
            built[d].flush()
            assert (tmp_path / f"allocs.dev{d}.csv").read_text().count("\n") >= 3
        assert host.current_device() == 0  # the current device is put back
    finally:
        for d in (0, 1):
            gpumem.set_per_device_resource(d, None)


@pytest.mark.parametrize("kwargs, message", [
    ({"spec": "pool", "pool": True}, "either spec="),
    ({"initial_pool_size": "1GiB"}, "need pool=True"),
    ({"logging": True}, "needs log_file_name"),
    ({"log_file_name": "x.csv"}, "logging is off"),
    ({"devices": []}, "no devices"),
])
def test_reinitialize_refuses_arguments_that_do_not_fit(host, kwargs, message):
    with pytest.raises(ValueError, match=message):
        gpumem.reinitialize(runtime=host, **kwargs)


def test_reinitialize_reports_a_bad_spec(host):
    with pytest.raises(gpumem.SpecError):
        gpumem.reinitialize(spec="pool:initial=lots", runtime=host)
    assert isinstance(gpumem.get_per_device_resource(0), gpumem.CudaMemoryResource)


def test_free_all_blocks_trims_a_vmm_pool_and_a_spec_stack():
    sim = gpumem.HostRuntime(capacity_bytes=1 << 30, backed=False)
    vmm = gpumem.VmmPoolMemoryResource(reserve_bytes=256 << 20, runtime=sim)
    stats = gpumem.StatisticsResourceAdaptor(vmm)
    keep = stats.allocate(2 << 20)
    gone = stats.allocate(16 << 20)
    stats.deallocate(gone, 16 << 20)
    before = vmm.stats()["mapped_bytes"]
    assert stats.free_all_blocks() is True  # through the adaptor to the pool below
    after = vmm.stats()["mapped_bytes"]
    assert after < before and after >= 2 << 20, (before, after)
    stats.deallocate(keep, 2 << 20)

    stack = gpumem.from_spec("statistics>thread_cache>vmm_pool:reserve=256MiB", sim)
    p = stack.allocate(8 << 20)
    stack.deallocate(p, 8 << 20)
    used = sim.used_bytes
    assert gpumem.free_all_blocks(stack) is True
    assert sim.used_bytes < used


def test_free_all_blocks_on_a_pool_that_keeps_its_memory(host):
    pool = gpumem.PoolMemoryResource(gpumem.CudaMemoryResource(host), "1MiB")
    assert pool.free_all_blocks() is False
    assert pool.pool_size == 1 << 20


def test_free_all_blocks_empties_the_caching_allocator(host):
    caching = gpumem.CachingMemoryResource(gpumem.CudaMemoryResource(host))
    caching.deallocate(caching.allocate(1 << 16), 1 << 16)
    live = host.live_allocations
    assert caching.free_all_blocks() is True
    assert host.live_allocations < live


# -- Numba -----------------------------------------------------------------------------------------

has_numba_cuda = (importlib.util.find_spec("numba") is not None
                  and importlib.util.find_spec("numba.cuda") is not None)


class _FakeContext:
    """What the manager reads of Numba's context: the device's id."""

    def __init__(self, device_id=0):
        self.device = types.SimpleNamespace(id=device_id)


@pytest.mark.skipif(not has_numba_cuda, reason="needs Numba's CUDA target (numba-cuda)")
def test_numba_manager_implements_the_emm_interface(current):
    from numba import cuda

    import gpumem.numba as gn

    assert issubclass(gn.GpumemNumbaManager, cuda.BaseCUDAMemoryManager)
    assert gn._numba_memory_manager is gn.GpumemNumbaManager
    abstract = getattr(gn.GpumemNumbaManager, "__abstractmethods__", frozenset())
    assert not abstract, f"methods of Numba's interface left out: {sorted(abstract)}"
    m = gn.GpumemNumbaManager(context=_FakeContext())
    assert m.interface_version == 1
    m.initialize()
    info = m.get_memory_info()
    assert info.total == current.runtime.memory_info()[1] and info.free <= info.total


@pytest.mark.skipif(not has_numba_cuda, reason="needs Numba's CUDA target (numba-cuda)")
def test_numba_manager_allocates_from_the_devices_resource_and_frees(current):
    import gpumem.numba as gn

    stats = gpumem.enable_statistics()
    m = gn.GpumemNumbaManager(context=_FakeContext())
    mem = m.memalloc(4096)
    assert mem.size == 4096
    assert int(mem.device_pointer_value if hasattr(mem, "device_pointer_value")
               else mem.device_pointer.value) > 0
    assert stats.get_bytes_counter().value == 4096
    del mem
    gc.collect()
    assert stats.get_bytes_counter().value == 0
    assert stats.get_allocations_counter().total == 1


# -- CuPy's pinned memory (over a stand-in `cupy` module) --------------------------------------------


class _FakePinnedPointer:
    """CuPy's PinnedMemoryPointer as far as the hook uses it: holds `mem`, points at mem.ptr."""

    def __init__(self, mem, offset):
        self.mem = mem
        self.ptr = mem.ptr + offset


@pytest.fixture
def fake_cupy(monkeypatch):
    cuda = types.SimpleNamespace(PinnedMemoryPointer=_FakePinnedPointer, installed=None)
    cuda.set_pinned_memory_allocator = lambda fn: setattr(cuda, "installed", fn)
    fake = types.SimpleNamespace(cuda=cuda)
    monkeypatch.setitem(sys.modules, "cupy", fake)
    return fake


class _CountingHost(gpumem.NewDeleteResource):
    """Host memory that remembers what is live (the hook calls allocate/deallocate from Python)."""

    def __init__(self):
        super().__init__()
        self.live = {}

    def allocate(self, nbytes, alignment=16):
        p = super().allocate(nbytes, alignment)
        self.live[p] = nbytes
        return p

    def deallocate(self, ptr, nbytes, alignment=16):
        assert self.live.pop(ptr) == nbytes
        super().deallocate(ptr, nbytes, alignment)


def test_cupy_pinned_allocator_allocates_and_frees_through_the_host_resource(fake_cupy):
    import ctypes

    import gpumem.cupy as gc_

    host_mr = _CountingHost()
    assert gc_.use_pinned(host_mr) is host_mr
    alloc = fake_cupy.cuda.installed
    assert alloc.resource is host_mr
    p = alloc(1 << 20)
    assert p.ptr in host_mr.live and p.mem.size == 1 << 20
    ctypes.memset(p.ptr, 7, 1 << 20)  # real host memory
    assert ctypes.string_at(p.ptr + (1 << 20) - 1, 1) == b"\x07"
    del p
    gc.collect()
    assert host_mr.live == {}
    zero = alloc(0)
    assert zero.mem.size == 0 and len(host_mr.live) == 1
    del zero
    assert host_mr.live == {}


def test_cupy_pinned_allocator_wants_a_host_resource(fake_cupy, host):
    import gpumem.cupy as gc_

    with pytest.raises(TypeError, match="host resource"):
        gc_.pinned_allocator(gpumem.CudaMemoryResource(host))


def test_cupy_free_all_blocks_reaches_the_resource_in_use(monkeypatch):
    import gpumem.cupy as gc_

    sim = gpumem.HostRuntime(capacity_bytes=1 << 30, backed=False)
    vmm = gpumem.VmmPoolMemoryResource(reserve_bytes=64 << 20, runtime=sim)
    vmm.deallocate(vmm.allocate(8 << 20), 8 << 20)
    monkeypatch.setattr(gc_, "_in_use", vmm)
    mapped = vmm.stats()["mapped_bytes"]
    assert gc_.free_all_blocks() is True
    assert vmm.stats()["mapped_bytes"] < mapped
