"""The KV cache schedule of python/tests/gpu/mem_pool_bench.py, without a GPU: the same on every
configuration (seeded), within its cap at every event, blocks of 2 to 64 MiB, everything freed."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu"))

import mem_pool_bench  # noqa: E402

MiB = 1 << 20


def replay(schedule):
    """(peak live bytes at any event, live bytes at the end, blocks allocated, sizes)."""
    sizes, live, peak, count = {}, 0, 0, 0
    for events in schedule:
        for e in events:
            if e[0] == "alloc":
                assert e[1] not in sizes  # a block is allocated once
                sizes[e[1]] = e[2]
                live += e[2]
                count += 1
                peak = max(peak, live)
            else:
                live -= sizes.pop(e[1])
    return peak, live, count, sizes


def test_the_kv_schedule_stays_within_its_cap_and_frees_everything():
    cap = 3 << 30
    schedule = mem_pool_bench.kv_schedule(1234, 400, cap)
    assert schedule == mem_pool_bench.kv_schedule(1234, 400, cap)  # seeded: the same every run
    assert schedule != mem_pool_bench.kv_schedule(1235, 400, cap)
    peak, live, count, left = replay(schedule)
    assert live == 0 and not left and count > 1000
    assert cap - 64 * MiB < peak <= cap  # it fills the cache, never beyond
    assert mem_pool_bench.schedule_peak(schedule) == peak
    blocks = [e[2] for events in schedule for e in events if e[0] == "alloc"]
    assert min(blocks) >= 2 * MiB and max(blocks) <= 64 * MiB
    assert all(b % (256 << 10) == 0 for b in blocks) and len(set(blocks)) > 100  # varied sizes


def test_a_full_cache_preempts_the_newest_requests():
    # a 256 MiB cache: frees happen in the same step as the allocations that needed the room
    schedule = mem_pool_bench.kv_schedule(7, 200, 256 * MiB)
    peak, live, _, _ = replay(schedule)
    assert peak <= 256 * MiB and live == 0
    mixed = [events for events in schedule[:-1]
             if any(e[0] == "free" for e in events) and any(e[0] == "alloc" for e in events)]
    assert mixed


def test_the_table_shows_a_refusal_instead_of_a_number():
    rows = mem_pool_bench.table([
        {"workload": "kv", "config": "gpumem", "peak_live_bytes": 100 * MiB,
         "peak_region_used_bytes": 103 * MiB, "used_over_live": 1.03,
         "pool_reserved_peak_bytes": 102 * MiB, "gpumem_held_peak_bytes": 103 * MiB},
        {"workload": "kv", "config": "torch_expandable", "peak_live_bytes": 100 * MiB,
         "used_over_live": None, "status": "expandable segments ignored for the MemPool"}])
    lines = rows.splitlines()
    assert len(lines) == 4
    assert "| 100.0 | 103.0 | 1.030 | 102.0 | 103.0 |" in lines[2]
    assert "| — |" in lines[3] and "ignored" in lines[3]
