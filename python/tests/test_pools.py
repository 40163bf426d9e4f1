"""CUDA memory pools: the rules and diagnoses that need no GPU; the rest skips without one."""

import pytest

import gpumem
from conftest import requires_gpu


def test_valid_properties_break_no_rule():
    props = gpumem.PoolProperties()
    assert props.broken_rule() == ""
    props.validate()
    assert props.location == gpumem.LocationKind.device and props.id == 0


@pytest.mark.parametrize(
    "kwargs, rule",
    [
        (dict(location=gpumem.LocationKind.device, id=-1), "R1"),
        (dict(location=gpumem.LocationKind.host,
              handle_types=[gpumem.AllocationHandleType.posix_file_descriptor]), "R3"),
        (dict(allocation_type=gpumem.PoolAllocationType.managed, max_size_bytes=1 << 20), "R6"),
        (dict(handle_types=[gpumem.AllocationHandleType.win32]), "R8"),
    ],
)
def test_broken_rules_are_named_without_cuda(kwargs, rule):
    props = gpumem.PoolProperties(**kwargs)
    assert rule in props.broken_rule()
    with pytest.raises(gpumem.LogicError, match=rule):
        props.validate()
    with pytest.raises(gpumem.LogicError, match=rule):
        gpumem.MemoryPool(props)  # refused before CUDA is called


def test_capabilities_say_why_without_a_gpu():
    caps = gpumem.query_pool_capabilities(0)
    if gpumem.get_num_devices() == 0:
        assert caps["device_unusable_reason"] != ""
        assert not caps["pools_supported"]


@requires_gpu
def test_memory_pool_attributes_and_cuda_async_resource():
    mr = gpumem.CudaAsyncMemoryResource(initial_pool_size=1 << 20, release_threshold=1 << 30)
    assert mr.pool.release_threshold == 1 << 30
    p = mr.allocate(1 << 20)
    assert mr.pool.used_mem_current >= 1 << 20
    mr.deallocate(p, 1 << 20)
    pool = gpumem.MemoryPool(gpumem.PoolProperties(max_size_bytes=64 << 20))
    pool.release_threshold = 4 << 20
    view = gpumem.CudaAsyncViewMemoryResource(pool)
    q = view.allocate(4096)
    view.deallocate(q, 4096)
    gpumem.cuda_runtime().synchronize()
    pool.trim_to(0)
    assert pool.usage_statistics()["used_bytes"] == 0
