"""Sleep and wake from Python (docs/sleep.md) over the host stand-in: pause / resume of a
VmmPoolMemoryResource, regions of a VmmRegionMemoryResource, gpumem.region / pause / resume."""

import threading

import pytest

import gpumem
from conftest import fill, read

MiB = 1 << 20


@pytest.fixture
def big_host():
    return gpumem.HostRuntime(capacity_bytes=256 * MiB)


def test_vmm_pool_offload_keeps_the_bytes_at_the_same_address(big_host):
    pool = gpumem.VmmPoolMemoryResource(reserve_bytes=128 * MiB, runtime=big_host)
    p = pool.allocate(5 * MiB)
    fill(p, 5 * MiB, 0x3C)
    assert pool.pause(offload=True)
    assert pool.state == "paused_offloaded"
    assert not pool.pause()
    stats = pool.stats()
    assert stats["mapped_bytes"] == 0 and stats["paused_bytes"] == 6 * MiB
    with pytest.raises(gpumem.PausedError, match="resume"):
        pool.allocate(MiB)
    assert pool.resume()
    assert pool.state == "active"
    assert read(p, 5 * MiB) == bytes([0x3C]) * (5 * MiB)
    assert pool.stats()["pauses"] == 1 and pool.stats()["resumes"] == 1
    pool.deallocate(p, 5 * MiB)
    pool.check_invariants()


def test_paused_error_is_a_logic_error():
    assert issubclass(gpumem.PausedError, gpumem.LogicError)


def test_regions_route_allocations_and_pause_one_by_one(big_host):
    res = gpumem.VmmRegionMemoryResource(reserve_bytes=64 * MiB, runtime=big_host)
    with res.region("weights"):
        assert res.current_region == "weights"
        w = res.allocate(4 * MiB)
        with res.region("kv_cache"):
            kv = res.allocate(8 * MiB)
    assert res.current_region == "default"
    assert res.regions() == ["default", "kv_cache", "weights"]
    fill(w, 4 * MiB, 0x77)
    assert res.pause("kv_cache") == 1
    assert res.state("kv_cache") == "paused_discarded"
    assert res.state("weights") == "active"
    with res.region("kv_cache"), pytest.raises(gpumem.PausedError):
        res.allocate(MiB)
    assert res.pause(offload=True) == 2  # weights and default; kv_cache was paused
    assert res.stats("weights")["state"] == "paused_offloaded"
    res.deallocate(kv, 8 * MiB)  # frees work while paused
    assert res.resume() == 3
    assert read(w, 4 * MiB) == bytes([0x77]) * (4 * MiB)
    res.deallocate(w, 4 * MiB)
    res.check_invariants()
    assert res.bad_deallocations == 0
    with pytest.raises(gpumem.LogicError, match="no region named 'nope'"):
        res.pause("nope")


def test_region_scopes_are_per_thread(big_host):
    res = gpumem.VmmRegionMemoryResource(reserve_bytes=64 * MiB, runtime=big_host)
    seen = {}

    def worker():
        seen["other"] = res.current_region

    with res.region("mine"):
        t = threading.Thread(target=worker)
        t.start()
        t.join()
        assert res.current_region == "mine"
    assert seen["other"] == "default"


def test_module_functions_use_the_current_device_resource(big_host):
    res = gpumem.VmmRegionMemoryResource(reserve_bytes=64 * MiB, runtime=big_host)
    previous = gpumem.set_current_device_resource(res)
    try:
        with gpumem.region("weights"):
            p = res.allocate(MiB)
        fill(p, MiB, 0x11)
        assert gpumem.pause("weights", offload=True) == 1
        assert gpumem.pause() == 1  # the default region
        assert gpumem.resume("weights") == 1
        assert read(p, MiB) == bytes([0x11]) * MiB
        assert gpumem.resume() == 1
        res.deallocate(p, MiB)
    finally:
        gpumem.set_current_device_resource(previous)
    pool = gpumem.VmmPoolMemoryResource(reserve_bytes=64 * MiB, runtime=big_host)
    assert gpumem.pause(resource=pool) == 1 and gpumem.resume(resource=pool) == 1
    with pytest.raises(TypeError, match="VmmRegionMemoryResource"):
        gpumem.region("x", resource=pool)
    with pytest.raises(TypeError, match="VmmRegionMemoryResource"):
        gpumem.pause(resource=gpumem.CudaMemoryResource(big_host))
