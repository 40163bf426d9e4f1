"""Statistics, tracking, logging and the other adaptors over a simulated upstream."""

import pytest

import gpumem


def test_statistics_count_bytes_and_calls_with_nested_scopes(leaf):
    stats = gpumem.StatisticsResourceAdaptor(gpumem.PoolMemoryResource(leaf, 1 << 20))
    a = stats.allocate(1000)
    b = stats.allocate(3000)
    stats.deallocate(a, 1000)
    c = stats.get_bytes_counter()
    assert (c.value, c.peak, c.total) == (3000, 4000, 4000)
    n = stats.get_allocations_counter()
    assert (n.value, n.peak, n.total) == (1, 2, 2)
    outer_bytes, _ = stats.push_counters()
    assert outer_bytes.value == 3000
    d = stats.allocate(500)
    assert stats.get_bytes_counter().value == 500  # the new scope starts at zero
    stats.deallocate(d, 500)
    inner_bytes, inner_calls = stats.pop_counters()
    assert (inner_bytes.peak, inner_calls.total) == (500, 1)
    assert stats.get_bytes_counter().peak == 4000
    assert stats.allocation_counts["total_count"] == 3
    with pytest.raises(IndexError):
        stats.pop_counters()
    stats.deallocate(b, 3000)


def test_tracking_reports_outstanding_allocations(leaf):
    tracked = gpumem.TrackingResourceAdaptor(leaf, capture_stacks=False)
    p = tracked.allocate(1234)
    q = tracked.allocate(10)
    assert tracked.get_outstanding_allocations() == {p: 1234, q: 10}
    assert tracked.get_allocated_bytes() == 1244
    assert "Outstanding allocations: 2" in tracked.get_outstanding_allocations_str()
    tracked.deallocate(p, 1234)
    tracked.deallocate(q, 10)
    assert tracked.get_outstanding_allocations() == {}


def test_tracking_with_stacks_names_the_frames(leaf):
    # Each live allocation is followed by its C++ stack, one "#i" line a frame: with file and line
    # where the module has debug information, else the module (this extension) and an offset.
    tracked = gpumem.TrackingResourceAdaptor(leaf, capture_stacks=True)
    p = tracked.allocate(256)
    report = tracked.get_outstanding_allocations_str()
    tracked.deallocate(p, 256)
    frames = [line for line in report.splitlines() if line.startswith("  #")]
    assert len(frames) > 1, report
    assert all(len(f.split(" ", 3)) == 4 for f in frames), report  # "  #i <something>"
    assert "tracking_resource_adaptor.hpp:" in report or "_gpumem" in report, report


def test_logging_writes_the_replayable_csv(leaf, tmp_path):
    path = tmp_path / "log.csv"
    logged = gpumem.LoggingResourceAdaptor(leaf, str(path), auto_flush=True)
    p = logged.allocate(4096)
    logged.deallocate(p, 4096)
    logged.flush()
    lines = path.read_text().splitlines()
    assert lines[0] == logged.header == "Thread,Time,Action,Pointer,Size,Stream"
    assert [line.split(",")[2] for line in lines[1:]] == ["allocate", "free"]
    assert lines[1].split(",")[4] == "4096"


def test_logging_without_a_file_name_needs_the_environment_variable(leaf, monkeypatch):
    monkeypatch.delenv("GPUMEM_LOG_FILE", raising=False)
    with pytest.raises(gpumem.LogicError, match="GPUMEM_LOG_FILE"):
        gpumem.LoggingResourceAdaptor(leaf)


def test_limiting_raises_memory_error_naming_the_limit(leaf):
    limited = gpumem.LimitingResourceAdaptor(leaf, 1 << 20)
    p = limited.allocate(1 << 19)
    assert limited.get_allocated_bytes() == 1 << 19
    with pytest.raises(gpumem.OutOfMemoryError, match="limit") as e:
        limited.allocate(1 << 20)
    assert isinstance(e.value, MemoryError)
    limited.deallocate(p, 1 << 19)
    assert limited.get_allocation_limit() == 1 << 20


def test_aligned_adaptor_over_aligns(leaf):
    aligned = gpumem.AlignedResourceAdaptor(leaf, 4096)
    ptrs = [aligned.allocate(100) for _ in range(4)]
    assert all(p % 4096 == 0 for p in ptrs)
    for p in ptrs:
        aligned.deallocate(p, 100)


def test_failure_callback_retries_after_freeing(host, leaf):
    held = [leaf.allocate(60 << 20)]
    calls = []

    def on_failure(nbytes):
        calls.append(nbytes)
        if held:
            leaf.deallocate(held.pop(), 60 << 20)
            return True
        return False

    mr = gpumem.FailureCallbackResourceAdaptor(leaf, on_failure)
    p = mr.allocate(32 << 20)  # fails once, the callback frees, the retry succeeds
    assert calls == [32 << 20]
    mr.deallocate(p, 32 << 20)
    with pytest.raises(MemoryError):
        mr.allocate(128 << 20)


def test_thread_safe_and_prefetch_adaptors_pass_through(host, leaf):
    for mr in (gpumem.ThreadSafeResourceAdaptor(leaf), gpumem.PrefetchResourceAdaptor(leaf)):
        p = mr.allocate(512)
        mr.deallocate(p, 512)
        assert mr.upstream is leaf and mr.runtime is host


def test_thread_cache_reuses_a_freed_block_and_reports_its_counters(leaf):
    pool = gpumem.PoolMemoryResource(leaf, 8 << 20)
    cache = gpumem.ThreadCacheResourceAdaptor(pool, max_cached_size_bytes=64 << 10,
                                              thread_cap_bytes=1 << 20)
    p = cache.allocate(5000)
    cache.deallocate(p, 5000)
    assert cache.allocate(5000) == p  # from the cache, not the pool
    s = cache.stats
    assert (s["hits"], s["misses"]) == (1, 1)
    assert s["cap_bytes"] == (8 << 20) // 8  # pool_fraction 0.125 of the pool
    cache.deallocate(p, 5000)
    assert cache.stats["bytes_cached"] == 5120
    cache.deallocate(p, 5000)  # a double free: reported and counted, nothing changes
    assert cache.bad_deallocations == 1
    cache.check_invariants()
    cache.trim()
    assert cache.stats["bytes_cached"] == 0
    assert gpumem.mr.thread_cache_resource_adaptor is gpumem.ThreadCacheResourceAdaptor


def test_thread_cache_floor_keeps_room_for_each_thread_over_a_small_pool(leaf):
    pool = gpumem.PoolMemoryResource(leaf, 8 << 20)
    cache = gpumem.ThreadCacheResourceAdaptor(pool, max_cached_size_bytes=64 << 10,
                                              thread_floor_bytes=3 << 20)
    assert cache.stats["cap_bytes"] == 1 << 20  # the pool fraction: no thread has a cache yet
    cache.deallocate(cache.allocate(5000), 5000)
    assert cache.stats["cap_bytes"] == 3 << 20  # one thread's floor is more than the fraction
    cache.check_invariants()


def test_thread_cache_from_spec_and_bad_options(host):
    top = gpumem.from_spec("thread_cache:max_size=64KiB>pool:initial=1MiB>cuda", host)
    p = top.allocate(100 << 10)  # above max_size: passes through
    top.deallocate(p, 100 << 10)
    assert top.stats["passed_through"] == 1
    with pytest.raises(gpumem.LogicError, match="max_cached_size_bytes"):
        gpumem.ThreadCacheResourceAdaptor(gpumem.CudaMemoryResource(host), max_cached_size_bytes=0)


def test_a_stack_deeper_than_the_limit_is_refused_when_built(leaf):
    """A chain thousands deep once overflowed the native stack on the first allocation."""
    top = leaf
    for _ in range(99):  # 100 resources with the leaf: the most one stack may hold
        top = gpumem.StatisticsResourceAdaptor(top)
    with pytest.raises(gpumem.LogicError, match="at most 100 resources; this one would be 101 deep"):
        gpumem.StatisticsResourceAdaptor(top)
    with pytest.raises(gpumem.LogicError, match="at most 100"):
        gpumem.PoolMemoryResource(top, 1 << 20)
    p = top.allocate(4096)  # the deepest allowed stack allocates through every layer
    top.deallocate(p, 4096)
