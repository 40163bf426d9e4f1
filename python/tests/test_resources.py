"""Resources over the host stand-in: real bookkeeping, real (host) memory, no GPU."""

import os
import random
import threading

import pytest

import gpumem
from conftest import fill, read


def suballocators(leaf):
    return {
        "pool": lambda: gpumem.PoolMemoryResource(leaf, 1 << 20, 16 << 20),
        "arena": lambda: gpumem.ArenaMemoryResource(leaf, 8 << 20),
        "fixed_size": lambda: gpumem.FixedSizeMemoryResource(leaf, 64 << 10, 16),
        "binning": lambda: gpumem.BinningMemoryResource(leaf, 10, 16),
        "caching": lambda: gpumem.CachingMemoryResource(leaf),
    }


@pytest.mark.parametrize("name", ["pool", "arena", "fixed_size", "binning", "caching"])
def test_suballocator_hands_out_distinct_writable_memory(leaf, name):
    mr = suballocators(leaf)[name]()
    sizes = [256, 1000, 4096, 40000]
    ptrs = [mr.allocate(n) for n in sizes]
    assert len(set(ptrs)) == len(ptrs)
    for i, (p, n) in enumerate(zip(ptrs, sizes)):
        assert p % 256 == 0
        fill(p, n, i + 1)
    for i, (p, n) in enumerate(zip(ptrs, sizes)):
        assert read(p, n) == bytes([i + 1]) * n, "allocations overlap"
    for p, n in zip(ptrs, sizes):
        mr.deallocate(p, n)
    if hasattr(mr, "check_invariants"):
        mr.check_invariants()


def test_pool_reuses_freed_memory_and_reports_its_size(leaf, host):
    pool = gpumem.PoolMemoryResource(leaf, 1 << 20, 4 << 20)
    assert pool.pool_size == 1 << 20 and pool.maximum_pool_size == 4 << 20
    p = pool.allocate(1000)
    pool.deallocate(p, 1000)
    assert pool.allocate(1000) == p
    assert pool.get_free_stats()["free_bytes"] == (1 << 20) - 1024
    assert pool.runtime is host and pool.upstream is leaf


def test_pool_grows_then_out_of_memory_names_sizes(leaf):
    pool = gpumem.PoolMemoryResource(leaf, 1 << 20, 2 << 20)
    a = pool.allocate(1 << 20)
    b = pool.allocate(1 << 20)  # grows to the maximum
    assert pool.pool_size == 2 << 20
    with pytest.raises(MemoryError) as e:
        pool.allocate(1 << 20)
    assert isinstance(e.value, gpumem.OutOfMemoryError)
    assert "pool_memory_resource" in str(e.value) and "1.00 MiB" in str(e.value)
    pool.deallocate(a, 1 << 20)
    pool.deallocate(b, 1 << 20)
    pool.check_invariants()  # the failed call left it usable


def test_memory_freed_on_a_stream_does_not_reach_another_stream_early(host, leaf):
    pool = gpumem.PoolMemoryResource(leaf, 1 << 20, 1 << 20)
    a, b = host.create_stream(), host.create_stream()
    p = pool.allocate(1 << 20, a)
    host.enqueue(a)  # a kernel on `a` still uses p
    pool.deallocate(p, 1 << 20, a)
    assert pool.allocate(1 << 20, a) == p  # same stream: reused at once
    pool.deallocate(p, 1 << 20, a)
    q = pool.allocate(1 << 20, b)  # another stream must be ordered after `a` passes the free
    assert q == p
    if host.completed(a) < host.enqueued(a):  # not synchronized: `b` must wait for `a`
        host.enqueue(b)  # a kernel on `b` using q
        host.complete(b)
        assert host.completed(b) == 0, "b used the block before a reached the free"
        host.complete(a)
        host.complete(b)
        assert host.completed(b) == 1
    pool.deallocate(q, 1 << 20, b)


def test_simulated_runtime_serves_sizes_larger_than_the_host(leaf):
    sim = gpumem.HostRuntime(capacity_bytes=1 << 40, backed=False)
    pool = gpumem.PoolMemoryResource(gpumem.CudaMemoryResource(sim), 256 << 30)
    p = pool.allocate(100 << 30)
    assert sim.used_bytes == 256 << 30
    pool.deallocate(p, 100 << 30)


def test_device_buffer_frees_on_collection(host, leaf):
    buf = gpumem.DeviceBuffer(1000, resource=leaf)
    assert buf.size == 1000 and buf.ptr and host.live_allocations == 1
    cai = buf.__cuda_array_interface__
    assert cai["shape"] == (1000,) and cai["data"][0] == buf.ptr
    del buf
    assert host.live_allocations == 0


def test_callback_resource_calls_python(host, leaf):
    calls = []

    def alloc(n, stream):
        calls.append(("alloc", n))
        return leaf.allocate(n, stream)

    def free(p, n, stream):
        calls.append(("free", n))
        leaf.deallocate(p, n, stream)

    mr = gpumem.CallbackMemoryResource(alloc, free)
    pool = gpumem.PoolMemoryResource(mr, 1 << 20)
    p = pool.allocate(10)
    pool.deallocate(p, 10)
    del pool
    assert calls == [("alloc", 1 << 20), ("free", 1 << 20)]


def test_resources_are_thread_safe_from_python(leaf):
    pool = gpumem.StatisticsResourceAdaptor(gpumem.PoolMemoryResource(leaf, 4 << 20))

    def work():
        for _ in range(200):
            p = pool.allocate(4096)
            pool.deallocate(p, 4096)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    counts = pool.allocation_counts
    assert counts["current_bytes"] == 0 and counts["total_count"] == 800


def test_stacks_keep_their_upstreams_alive(host):
    top = gpumem.StatisticsResourceAdaptor(
        gpumem.PoolMemoryResource(gpumem.CudaMemoryResource(host), 1 << 20)
    )
    import gc

    gc.collect()
    p = top.allocate(100)
    top.deallocate(p, 100)
    del top
    gc.collect()
    assert host.live_allocations == 0  # the pool gave its memory back when the stack died


def test_bad_alignment_is_a_logic_error(leaf):
    with pytest.raises(gpumem.LogicError, match="alignment"):
        leaf.allocate_aligned(100, 3)
    with pytest.raises(ValueError):
        leaf.allocate_aligned(100, 512)


def test_leaf_out_of_memory_is_memory_error_with_the_cpp_message(host, leaf):
    with pytest.raises(MemoryError, match=r"cuda_memory_resource: cannot allocate 128\.00 MiB"):
        leaf.allocate(128 << 20)
    host.fail_next_allocations(1)
    with pytest.raises(gpumem.OutOfMemoryError):
        leaf.allocate(256)
    p = leaf.allocate(256)  # usable after failures
    leaf.deallocate(p, 256)


def test_streams_accept_ints_and_objects(host, leaf):
    s = host.create_stream()

    class TorchLike:
        cuda_stream = s

    class CupyLike:
        ptr = s

    for stream in (s, TorchLike(), CupyLike(), None):
        p = leaf.allocate(256, stream)
        leaf.deallocate(p, 256, stream)
    with pytest.raises(TypeError, match="stream"):
        leaf.allocate(256, "not a stream")


def test_host_resources():
    mr = gpumem.NewDeleteResource()
    p = mr.allocate(100, 64)
    assert p % 64 == 0
    mr.deallocate(p, 100, 64)
    assert mr == gpumem.NewDeleteResource()


def test_vmm_pool_maps_on_demand_and_trims(host):
    pool = gpumem.VmmPoolMemoryResource(reserve_bytes=64 << 20, runtime=host,
                                        busy_growth_percent=0)
    assert pool.runtime is host and pool.granularity == 2 << 20
    assert pool.stats()["mapped_bytes"] == 0
    p = pool.allocate(3 << 20)
    s = pool.stats()
    assert s["mapped_bytes"] == 4 << 20 and s["reserved_bytes"] == 64 << 20
    assert s["free_bytes"] == 1 << 20 and s["handles"] == 1
    pool.deallocate(p, 3 << 20)
    assert pool.trim_to(0) == 4 << 20
    assert pool.pool_size == 0
    pool.check_invariants()
    with pytest.raises(gpumem.OutOfMemoryError) as e:
        pool.allocate(128 << 20)
    assert "reserved address space" in str(e.value)


def test_vmm_pool_keeps_spare_handles_for_the_next_growth(host):
    pool = gpumem.VmmPoolMemoryResource(reserve_bytes=64 << 20, runtime=host,
                                        spare_bytes=8 << 20)
    pool.deallocate(pool.allocate(12 << 20), 12 << 20)
    assert pool.trim_to(0) == 12 << 20
    s = pool.stats()
    assert s["mapped_bytes"] == 0 and s["spare_bytes"] == 0 and s["held_bytes"] == 0  # 12 > 8
    pool.deallocate(pool.allocate(6 << 20), 6 << 20)
    pool.trim_to(0)
    s = pool.stats()
    assert s["spare_bytes"] == 6 << 20 and s["spare_handles"] == 1 and s["held_bytes"] == 6 << 20
    p = pool.allocate(6 << 20)  # maps the spare again
    assert pool.stats()["spare_bytes"] == 0 and pool.stats()["mapped_bytes"] == 6 << 20
    pool.deallocate(p, 6 << 20)
    pool.trim_to(0)
    assert pool.release_spares() == 6 << 20
    assert pool.stats()["held_bytes"] == 0
    pool.check_invariants()


def _repeated_job(seed, steps=300):
    """A seeded job of allocations and frees (0.5 to 48 MiB) that ends with everything freed."""
    rng, job, live, n = random.Random(seed), [], [], 0
    for _ in range(steps):
        if not live or rng.random() < 0.55:
            nbytes = rng.randint(1, 96) * (1 << 19) + rng.randint(0, 3) * 4096
            job.append((True, n, nbytes))
            live.append((n, nbytes))
            n += 1
        else:
            slot, nbytes = live.pop(rng.randrange(len(live)))
            job.append((False, slot, nbytes))
    return job + [(False, slot, nbytes) for slot, nbytes in live]


def _run_job(pool, job):
    slots, order = {}, []
    for allocate, slot, nbytes in job:
        if allocate:
            slots[slot] = pool.allocate(nbytes)
            order.append(slots[slot])
        else:
            pool.deallocate(slots[slot], nbytes)
    return order


@pytest.mark.parametrize("home", [True, False])
def test_vmm_pool_takes_a_repeated_jobs_layout_home(home):
    # Seed 4 moves handles in its growths: with the home layout every run after the second
    # places its blocks where the second did; without it the layout drifts.
    rt = gpumem.HostRuntime(capacity_bytes=8 << 30, backed=False)
    pool = gpumem.VmmPoolMemoryResource(reserve_bytes=16 << 30, runtime=rt, return_home=home)
    job = _repeated_job(4)
    runs = [_run_job(pool, job) for _ in range(6)]
    s = pool.stats()
    if home:
        assert all(r == runs[1] for r in runs[2:])
        assert s["home_returns"] == 4 and s["home_moved_handles"] >= 4
    else:
        assert any(r != runs[1] for r in runs[2:])
        assert s["home_returns"] == 0 and s["home_moved_handles"] == 0
    pool.check_invariants()


@pytest.mark.parametrize("limit, handles", [(None, 1), (16 << 20, 5), (4 << 20, 14),
                                            (3 << 20, 14), ((1 << 64) - 1, 1)])
def test_vmm_pool_handle_bytes_cuts_new_memory_into_handles(limit, handles):
    # 100 MiB of new memory: ends of at most `limit` (rounded up to 2 MiB granules), twice that
    # between them; None (or a limit too large to round) is one handle per growth.
    rt = gpumem.HostRuntime(capacity_bytes=1 << 30)
    pool = gpumem.VmmPoolMemoryResource(reserve_bytes=1 << 30, granularity_bytes=2 << 20,
                                        runtime=rt, handle_bytes=limit)
    p = pool.allocate(100 << 20)
    assert pool.stats()["handles"] == handles
    pool.deallocate(p, 100 << 20)
    pool.check_invariants()


def test_vmm_pool_refuses_a_device_that_does_not_exist():
    with pytest.raises(gpumem.CudaError, match="invalid device 3"):
        gpumem.VmmPoolMemoryResource(reserve_bytes=1 << 30, device=3,
                                     runtime=gpumem.HostRuntime(capacity_bytes=1 << 30))


def test_sizes_beyond_64_bits_are_refused_with_a_clear_message():
    rt = gpumem.HostRuntime(capacity_bytes=1 << 30)
    with pytest.raises(gpumem.LogicError, match="from 0 to 2\\^64 - 1"):
        gpumem.PoolMemoryResource(gpumem.CudaMemoryResource(runtime=rt), 1 << 64, runtime=rt)
    with pytest.raises(TypeError, match="MemoryPoolRef or a cudaMemPool_t"):
        gpumem.CudaAsyncViewMemoryResource(None)
    with pytest.raises(TypeError, match="MemoryPoolRef or a cudaMemPool_t"):
        gpumem.CudaAsyncViewMemoryResource(-1)


def test_vmm_pool_handle_bytes_refuses_a_negative_size():
    with pytest.raises(TypeError):
        gpumem.VmmPoolMemoryResource(reserve_bytes=1 << 30, handle_bytes=-1,
                                     runtime=gpumem.HostRuntime(capacity_bytes=1 << 30))


def test_vmm_pool_single_handle_allocations_export_and_import(host):
    pool = gpumem.VmmPoolMemoryResource(reserve_bytes=64 << 20, runtime=host)
    p = pool.allocate_single_handle(3 << 20)
    s = pool.stats()
    assert s["single_handle_allocations"] == 1 and s["single_handle_bytes"] == 4 << 20
    assert s["mapped_bytes"] == 0  # not the pool's memory
    fd, nbytes, device = pool.export_single_handle(p)
    try:
        assert (nbytes, device) == (4 << 20, 0)
        with gpumem.ImportedVmmMemory(fd, nbytes, runtime=host) as m:
            assert m.ptr not in (0, p) and m.nbytes == nbytes and m.device == 0
        with pytest.raises(gpumem.LogicError) as e:
            m.ptr
        assert "closed" in str(e.value)
        with pytest.raises(gpumem.LogicError) as e:
            gpumem.ImportedVmmMemory(fd, 3 << 20, runtime=host)
        assert "multiple of the granularity" in str(e.value)
    finally:
        os.close(fd)
    with pytest.raises(gpumem.LogicError) as e:
        pool.export_single_handle(p + 256)
    assert "allocate_single_handle" in str(e.value)
    pool.deallocate(p, 3 << 20)
    assert pool.trim_to(0) == 4 << 20
    assert pool.stats()["single_handle_allocations"] == 0
    pool.check_invariants()


def test_vmm_pool_peer_devices_are_checked(host):
    with pytest.raises(gpumem.LogicError) as e:
        gpumem.VmmPoolMemoryResource(reserve_bytes=64 << 20, runtime=host, peer_devices=[0])
    assert "peer device 0 is not another device" in str(e.value)
    pool = gpumem.VmmPoolMemoryResource(reserve_bytes=64 << 20, runtime=host, all_peers=True)
    pool.deallocate(pool.allocate(1 << 20), 1 << 20)  # one device: no peer, nothing to give


def test_vmm_pool_from_spec_takes_its_parameters():
    sim = gpumem.HostRuntime(capacity_bytes=1 << 30, backed=False)
    pool = gpumem.from_spec("vmm_pool:reserve=256MiB,growth=10", runtime=sim)
    assert isinstance(pool, gpumem.VmmPoolMemoryResource)
    pool.deallocate(pool.allocate(1 << 20), 1 << 20)
    assert pool.stats()["reserved_bytes"] == 256 << 20
