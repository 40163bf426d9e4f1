"""Resource specs: the tool's grammar, one parser, one factory table."""

import pytest

import gpumem


def test_from_spec_builds_a_stack_whose_top_is_typed(host):
    top = gpumem.from_spec("statistics>pool:initial=1MiB,max=4MiB>cuda", host)
    assert isinstance(top, gpumem.StatisticsResourceAdaptor)
    p = top.allocate(1000)
    assert top.get_bytes_counter().value == 1000
    assert host.used_bytes == 1 << 20
    top.deallocate(p, 1000)
    assert top.runtime is host and top.spec.startswith("statistics>pool")


def test_a_stack_without_a_leaf_gets_cuda(host):
    top = gpumem.from_spec("pool:initial=256KiB", host)
    assert isinstance(top, gpumem.PoolMemoryResource)
    assert top.pool_size == 256 << 10


def test_stack_memory_returns_when_the_top_dies():
    host = gpumem.HostRuntime(capacity_bytes=1 << 30, backed=False)
    top = gpumem.from_spec("tracking>binning>pool:initial=2MiB", host)
    p = top.allocate(5000)
    top.deallocate(p, 5000)
    del top
    assert host.live_allocations == 0


def test_simulated_runtime_builds_huge_stacks():
    sim = gpumem.HostRuntime(capacity_bytes=1 << 40, backed=False)
    top = gpumem.from_spec("arena:size=200GiB", sim)
    p = top.allocate(50 << 30)
    top.deallocate(p, 50 << 30)


@pytest.mark.parametrize(
    "spec, message",
    [("poool>cuda", "unknown resource 'poool'"), ("pool:initial=1XB", "initial"),
     ("pool:bogus=1", "bogus"), ("pool>", ".")],
)
def test_bad_specs_raise_spec_error_saying_what_to_write(host, spec, message):
    with pytest.raises(gpumem.SpecError, match=message):
        gpumem.from_spec(spec, host)


def test_sizes_and_the_factory_table():
    assert gpumem.parse_size("1.5GiB") == 3 << 29
    assert gpumem.parse_size("80GB") == 80 * 10**9
    assert gpumem.size_to_string(1 << 30) == "1GiB"
    names = {e["name"] for e in gpumem.list_resources()}
    assert {"pool", "arena", "statistics", "cuda", "cuda_async"} <= names
    pool = next(e for e in gpumem.list_resources() if e["name"] == "pool")
    assert pool["kind"] == "suballocator" and "initial" in pool["params"]
    assert "pool" in gpumem.describe_resources()
