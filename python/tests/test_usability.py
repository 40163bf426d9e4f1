"""What a new user meets first: sizes with units, readable repr(), errors that say what to do."""

import re

import pytest

import gpumem


def test_sizes_take_units_or_integers(leaf):
    pool = gpumem.PoolMemoryResource(leaf, "1MiB", maximum_pool_size="4MiB")
    assert pool.pool_size == 1 << 20
    assert pool.maximum_pool_size == 4 << 20
    assert gpumem.PoolMemoryResource(leaf, 1 << 20).pool_size == 1 << 20
    limited = gpumem.LimitingResourceAdaptor(pool, "2MiB")
    assert limited.get_allocation_limit() == 2 << 20


def test_bad_sizes_say_what_is_wrong(leaf):
    with pytest.raises(gpumem.LogicError, match="got -5"):
        gpumem.PoolMemoryResource(leaf, -5)
    with pytest.raises(gpumem.LogicError, match="1 gigabyte"):
        gpumem.PoolMemoryResource(leaf, "1 gigabyte")
    with pytest.raises(TypeError):
        gpumem.PoolMemoryResource(leaf, 1.5)


def test_repr_shows_the_configuration(host, leaf):
    pool = gpumem.PoolMemoryResource(leaf, "1MiB", maximum_pool_size=4 << 20)
    text = repr(pool)
    assert text.startswith("PoolMemoryResource(upstream=CudaMemoryResource(")
    assert "initial_pool_size='1MiB'" in text and "maximum_pool_size=4194304" in text
    assert "HostRuntime(capacity_bytes=67108864, backed=True)" in text
    assert repr(gpumem.from_spec("pool:initial=1MiB>cuda", host)).startswith(
        "PoolMemoryResource(spec='pool")


def test_errors_name_no_build_folder(leaf):
    pool = gpumem.PoolMemoryResource(leaf, "1MiB", maximum_pool_size="1MiB")
    with pytest.raises(gpumem.OutOfMemoryError) as info:
        pool.allocate(8 << 20)
    message = str(info.value)
    absolute_source = r"(?<![\w.])/(?:[\w.-]+/)+[\w.-]+\.(?:hpp|cpp|inl)"
    assert not re.search(absolute_source, message), message


@pytest.mark.skipif(gpumem.get_num_devices() > 0, reason="this machine has a GPU")
def test_no_gpu_error_says_to_use_host_runtime():
    with pytest.raises(gpumem.CudaError, match="HostRuntime"):
        gpumem.CudaMemoryResource().allocate(256)
